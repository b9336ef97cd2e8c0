/* tide — a live set of hundreds of MB that grows and shrinks slowly.
 *
 * What it stresses: blocks of 64 B-64 KiB (log-uniform), each written
 * whole, are added and removed so that the live bytes follow a slow tide
 * between LOW and HIGH (default 32 MB and 320 MB): -n cycles of a rise and
 * a fall, each step a replacement of a random live block plus, one step in
 * two, an addition (rising) or a removal (falling).  At every low water
 * the workload reads its RSS; the result reports the largest of those.
 * Why: the release policy.  An allocator that returns freed pages at once
 * pays a page fault per page when the tide comes back; one that keeps
 * everything stays at the high-water mark when the program shrinks.
 * rss_low_kb (the RSS at low water, live bytes ~LOW) against peak_rss_kb
 * shows how much a shrinking program gives back at once, rss_settled_kb
 * (after 1.5 s more of replacements at low water, not timed) how much it
 * gives back once it has settled, and the time how much the giving back
 * costs.
 *
 * Options: -n cycles (default 3), -z HIGH bytes (default 320 MB; LOW is an
 * eighth of it), -s seed.
 * Result: ops= steps, seconds= wall time (the rise and fall only),
 * rss_low_kb=, rss_settled_kb=, high_mb=.
 */
#include "bench_common.h"

typedef struct { void *p; uint32_t n, tag; } blk_t;

static blk_t make(rng_t *r)
{
    unsigned e = 6 + rng_below(r, 10); /* 2^6 .. 2^15 */
    size_t lo = (size_t)1 << e;
    size_t n = lo + rng_below(r, (uint32_t)lo);
    blk_t b = {xmalloc(n), (uint32_t)n, (uint32_t)rng_next(r)};
    memset(b.p, (int)(b.tag & 0xff), n);
    return b;
}

static void drop(blk_t b)
{
    const unsigned char *p = b.p;
    unsigned char c = (unsigned char)(b.tag & 0xff);
    if (p[0] != c || p[b.n - 1] != c || p[b.n / 2] != c) die("block %p of %u bytes corrupted", b.p, b.n);
    free(b.p);
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 3, .seed = 1, .live = 1, .batch = 1, .size = 320L << 20};
    parse_opts(argc, argv, &o, "[-n cycles] [-z high_bytes] [-s seed]");
    size_t high = (size_t)o.size, low = high / 8;
    size_t cap = high / 64 + 1024; /* blocks average ~12 KB */
    blk_t *live = xmalloc(cap * sizeof *live);
    size_t n = 0, bytes = 0;
    long steps = 0, rss_low = 0;
    rng_t r;
    rng_seed(&r, o.seed);
    double t0 = now_sec();
    for (long c = 0; c < o.iters; c++) {
        for (int rising = 1; rising >= 0; rising--) {
            while (rising ? bytes < high : bytes > low) {
                steps++;
                if (n) { /* a replacement */
                    size_t k = rng_below(&r, (uint32_t)n);
                    bytes -= live[k].n;
                    drop(live[k]);
                    live[k] = make(&r);
                    bytes += live[k].n;
                }
                if (steps & 1) continue;
                if (rising) {
                    if (n == cap) die("more than %zu blocks live", cap);
                    live[n] = make(&r);
                    bytes += live[n++].n;
                } else if (n) {
                    size_t k = rng_below(&r, (uint32_t)n);
                    bytes -= live[k].n;
                    drop(live[k]);
                    live[k] = live[--n];
                }
            }
            if (!rising) {
                long kb = status_kb("VmRSS");
                if (kb > rss_low) rss_low = kb;
            }
        }
    }
    double t = now_sec() - t0;
    /* settled: 1.5 s more of replacements at low water (not timed) */
    for (double t1 = now_sec(); now_sec() - t1 < 1.5;)
        for (int i = 0; i < 1000 && n; i++) {
            size_t k = rng_below(&r, (uint32_t)n);
            drop(live[k]);
            live[k] = make(&r);
        }
    long rss_settled = status_kb("VmRSS");
    for (size_t i = 0; i < n; i++) drop(live[i]);
    free(live);
    char extra[128];
    snprintf(extra, sizeof extra, "rss_low_kb=%ld rss_settled_kb=%ld high_mb=%zu", rss_low, rss_settled, high >> 20);
    report("tide", 1, (double)steps, t, extra);
    return 0;
}
