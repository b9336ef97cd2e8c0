/* bigrepeat — blocks of several MiB allocated, filled and freed again.
 *
 * What it stresses: LIVE slots (default 8) hold blocks of 2-16 MiB
 * (log-uniform); each step frees a random slot's block, mallocs a new one
 * and writes one byte in every 4 KiB page of it, as a program filling its
 * buffers would.
 * Why: a program that makes big buffers again and again (an image, a
 * decompression window, a message).  glibc maps and unmaps each one, and
 * every page of every new buffer faults in; an allocator that keeps freed
 * runs of a few MiB for the next buffer faults in nothing at a steady
 * state.  How many it keeps shows in the peak RSS (live ~ 8 x 6 MiB).
 *
 * Options: -n steps (default 2000), -l live (default 8), -s seed.
 * Result: ops= steps, seconds= wall time of the replacement loop,
 * mb_touched=.
 */
#include "bench_common.h"

#define PAGE 4096

static double touched;

static big_t make(rng_t *r)
{
    unsigned e = 21 + rng_below(r, 3); /* 2 MiB .. 16 MiB */
    size_t lo = (size_t)1 << e;
    size_t n = lo + rng_below(r, (uint32_t)lo);
    big_t b = {xmalloc(n), n, (unsigned char)rng_next(r)};
    for (size_t off = 0; off < n; off += PAGE) b.p[off] = (unsigned char)(b.tag + off / PAGE);
    b.p[n - 1] = b.tag;
    touched += (double)n;
    return b;
}

static void drop(big_t b)
{
    if (b.p[0] != b.tag || b.p[b.n - 1] != b.tag || b.p[PAGE] != (unsigned char)(b.tag + 1))
        die("block %p of %zu bytes corrupted", (void *)b.p, b.n);
    free(b.p);
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 2000, .seed = 1, .live = 8, .batch = 1};
    parse_opts(argc, argv, &o, "[-n steps] [-l live] [-s seed]");
    double t = big_replace(&o, make, drop);
    char extra[48];
    snprintf(extra, sizeof extra, "live=%ld mb_touched=%.0f", o.live, touched / 1048576.0);
    report("bigrepeat", 1, (double)o.iters, t, extra);
    return 0;
}
