/* large — churn of large blocks (64 KiB .. 8 MiB), every page touched.
 *
 * What it stresses: LIVE slots hold blocks whose sizes are log-uniform in
 * [64 KiB, 8 MiB]; each step checks and frees a random slot and mallocs a
 * new block, writing one byte in every 4 KiB page of it (so the pages are
 * really faulted in, as a program filling its buffers would).
 * Why: above the size classes an allocator goes to its page heap or
 * straight to mmap/munmap.  Returning memory to the OS too eagerly costs a
 * page fault per page on every reuse (glibc's mmap threshold, a page heap
 * that madvises at once); keeping too much costs RSS.  Time and peak RSS
 * together show where each allocator sits on that trade-off.
 *
 * Options: -n steps (default 3000), -l live blocks (default 16), -s seed.
 * Result: ops= steps, seconds= wall time, mb_touched= megabytes written.
 */
#include "bench_common.h"
#include <math.h>

#define MIN_SZ (64u << 10)
#define MAX_SZ (8u << 20)
#define PAGE 4096

static size_t pick_size(rng_t *r)
{
    double u = (double)(rng_next(r) >> 11) * 0x1.0p-53;
    double s = exp(log((double)MIN_SZ) + u * (log((double)MAX_SZ) - log((double)MIN_SZ)));
    size_t n = (size_t)s;
    if (n < MIN_SZ) n = MIN_SZ;
    if (n > MAX_SZ) n = MAX_SZ;
    return n;
}

static double touched;

static slot_t big_new(rng_t *r)
{
    size_t n = pick_size(r);
    unsigned char *p = xmalloc(n);
    uint32_t tag = (uint32_t)rng_next(r);
    for (size_t off = 0; off < n; off += PAGE) p[off] = (unsigned char)(tag + off / PAGE);
    blk_init(p, n, tag);
    touched += (double)n;
    return (slot_t){p, tag};
}

static void big_free(slot_t s)
{
    unsigned char *p = s.p;
    slot_check(s, MIN_SZ, MAX_SZ);
    size_t n = blk_check(p, MIN_SZ, MAX_SZ);
    blk_hdr_t h;
    memcpy(&h, p, sizeof h);
    for (size_t off = PAGE; off < n; off += 16 * PAGE)
        if (p[off] != (unsigned char)(h.tag + off / PAGE)) die("large block %p corrupted at offset %zu", (void *)p, off);
    free(p);
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 3000, .seed = 1, .live = 16, .batch = 1};
    parse_opts(argc, argv, &o, "[-n steps] [-l live] [-s seed]");
    rng_t r;
    rng_seed(&r, o.seed);
    slot_t *slot = xmalloc(sizeof *slot * (size_t)o.live);
    double t0 = now_sec();
    for (long i = 0; i < o.live; i++) slot[i] = big_new(&r);
    for (long i = 0; i < o.iters; i++) {
        uint32_t k = rng_below(&r, (uint32_t)o.live);
        big_free(slot[k]);
        slot[k] = big_new(&r);
    }
    for (long i = 0; i < o.live; i++) big_free(slot[i]);
    double t = now_sec() - t0;
    char extra[64];
    snprintf(extra, sizeof extra, "live=%ld mb_touched=%.0f", o.live, touched / 1048576.0);
    report("large", 1, (double)o.iters, t, extra);
    free(slot);
    return 0;
}
