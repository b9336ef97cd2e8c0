/* bigtouch — 64 live blocks of 64 KiB-4 MiB, each touched at three bytes.
 *
 * What it stresses: LIVE slots (default 64) hold blocks whose sizes are
 * log-uniform in [64 KiB, 4 MiB]; each step frees a random slot's block
 * and mallocs a new one, writing its first, middle and last byte.
 * Why: unlike bench/large (every page written), the work here is the
 * allocator's own: finding and cutting a run, and what it does with the
 * run freed.  An allocator that unmaps or madvises every freed run and
 * maps a fresh one pays system calls and three page faults per step; one
 * that reuses its free runs pays neither.  Peak RSS stays small for all
 * (three pages per block), so the time says it all.
 *
 * Options: -n steps (default 200000), -l live (default 64), -s seed.
 * Result: ops= steps, seconds= wall time of the replacement loop.
 */
#include "bench_common.h"

#define MIN_SZ (64u << 10)
#define MAX_SZ (4u << 20)

static big_t make(rng_t *r)
{
    unsigned e = 16 + rng_below(r, 6); /* 2^16 .. 2^21 */
    size_t lo = (size_t)1 << e;
    size_t n = lo + rng_below(r, (uint32_t)lo);
    big_t b = {xmalloc(n), n, (unsigned char)rng_next(r)};
    b.p[0] = b.tag;
    b.p[n / 2] = (unsigned char)(b.tag + 1);
    b.p[n - 1] = (unsigned char)(b.tag + 2);
    return b;
}

static void drop(big_t b)
{
    if (b.p[0] != b.tag || b.p[b.n / 2] != (unsigned char)(b.tag + 1) || b.p[b.n - 1] != (unsigned char)(b.tag + 2))
        die("block %p of %zu bytes corrupted", (void *)b.p, b.n);
    free(b.p);
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 200000, .seed = 1, .live = 64, .batch = 1};
    parse_opts(argc, argv, &o, "[-n steps] [-l live] [-s seed]");
    double t = big_replace(&o, make, drop);
    char extra[32];
    snprintf(extra, sizeof extra, "live=%ld", o.live);
    report("bigtouch", 1, (double)o.iters, t, extra);
    return 0;
}
