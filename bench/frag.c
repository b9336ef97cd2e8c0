/* frag — fragmentation and memory return, measured as RSS per phase.
 *
 * What it stresses:
 *   phase 1 (fill):  malloc small blocks (16..512 B) until FILL MiB were
 *                    requested (default 200), writing each block's header;
 *   phase 2 (thin):  free 90% of them in random order, leaving survivors
 *                    scattered over every page;
 *   phase 3 (large): malloc LARGE MiB (default 100) of 32 KiB..1 MiB blocks
 *                    and touch every page;
 *   phase 4 (empty): check and free everything.
 * RSS (VmRSS) is read after each phase; VmHWM gives the peak.
 * Why: after phase 2, 90% of the small-object memory is free but pinned
 * by survivors.  An allocator that can give free pages back (or reuse whole
 * free spans for the large blocks) keeps the peak near FILL; one that
 * cannot adds LARGE on top.  final_rss_kb (after phase 3) and
 * empty_rss_kb (after phase 4) show how much memory is held or returned.
 *
 * Options: -n fill MiB (default 200), -l large MiB (default 100), -s seed.
 * Result: ops= mallocs, seconds= wall time of all phases, peak_rss_kb=,
 * fill_rss_kb=, thin_rss_kb=, final_rss_kb=, empty_rss_kb=.
 */
#include "bench_common.h"

#define MIN_SZ 16
#define MAX_SZ 512
#define LMIN (32u << 10)
#define LMAX (1u << 20)
#define PAGE 4096

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 200, .seed = 1, .live = 100, .batch = 1};
    parse_opts(argc, argv, &o, "[-n fill_MiB] [-l large_MiB] [-s seed]");
    rng_t r;
    rng_seed(&r, o.seed);
    size_t fill = (size_t)o.iters << 20, large = (size_t)o.live << 20;
    size_t cap = fill / ((MIN_SZ + MAX_SZ) / 2) * 2 + 16;
    slot_t *small = xmalloc(sizeof *small * cap);
    size_t lcap = large / LMIN + 16;
    unsigned char **big = xmalloc(sizeof *big * lcap);
    uint32_t *order = xmalloc(sizeof *order * cap);
    long base_rss = status_kb("VmRSS");

    double t0 = now_sec();
    size_t ns = 0, req = 0;
    while (req < fill) {
        if (ns == cap) die("internal: small array full");
        size_t n = rng_range(&r, MIN_SZ, MAX_SZ);
        small[ns] = (slot_t){xmalloc(n), (uint32_t)rng_next(&r)};
        blk_init(small[ns].p, n, small[ns].tag);
        req += n;
        ns++;
    }
    long fill_rss = status_kb("VmRSS");

    for (size_t i = 0; i < ns; i++) order[i] = (uint32_t)i;
    for (size_t i = ns - 1; i > 0; i--) {
        size_t j = rng_below(&r, (uint32_t)(i + 1));
        uint32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    size_t nfree = ns / 10 * 9;
    for (size_t i = 0; i < nfree; i++) {
        slot_free(small[order[i]], MIN_SZ, MAX_SZ);
        small[order[i]].p = NULL;
    }
    long thin_rss = status_kb("VmRSS");

    size_t nb = 0, lreq = 0;
    while (lreq < large) {
        if (nb == lcap) die("internal: large array full");
        size_t n = rng_range(&r, LMIN, LMAX);
        unsigned char *p = xmalloc(n);
        uint32_t tag = (uint32_t)rng_next(&r);
        for (size_t off = 0; off < n; off += PAGE) p[off] = (unsigned char)(tag ^ (off / PAGE));
        blk_init(p, n, tag);
        big[nb++] = p;
        lreq += n;
    }
    long final_rss = status_kb("VmRSS");

    for (size_t i = 0; i < nb; i++) blk_free(big[i], LMIN, LMAX);
    for (size_t i = 0; i < ns; i++)
        if (small[i].p) slot_free(small[i], MIN_SZ, MAX_SZ);
    double t = now_sec() - t0;
    long empty_rss = status_kb("VmRSS");
    char extra[256];
    snprintf(extra, sizeof extra,
             "fill_mb=%ld large_mb=%ld base_rss_kb=%ld fill_rss_kb=%ld thin_rss_kb=%ld final_rss_kb=%ld empty_rss_kb=%ld",
             o.iters, o.live, base_rss, fill_rss, thin_rss, final_rss, empty_rss);
    report("frag", 1, (double)(ns + nb), t, extra);
    free(small);
    free(big);
    free(order);
    return 0;
}
