/* mixed — random replacement over the whole size range, 16 B .. 256 KiB.
 *
 * What it stresses: each thread keeps its own table of LIVE blocks; a step
 * checks and frees a random slot and allocates a new block there.  Sizes
 * are skewed to small, as in real programs: 80 % are 16-256 B, 15 %
 * 256 B-4 KiB, 4 % 4-64 KiB and 1 % 64-256 KiB (uniform within each
 * band), so about 3.4 KB per block on average and, with the default 16 384
 * slots, some 55 MB live per thread.  Every block gets a header and a tail
 * byte, checked at free.
 * Why: the small-object fast path alone says little about a program that
 * also allocates buffers of a few KiB to a few hundred KiB.  Here the
 * medium size classes are hit often enough that an allocator whose thread
 * caches or central lists barely hold them, or whose page heap coalesces
 * and splits the same pages on every medium pair, falls back to glibc's
 * pace; and the large live set shows the memory each keeps besides it.
 * -m medium: every size is 1 KiB-256 KiB, log-uniform (a large live set of
 * medium blocks only: ~190 MB with the default 4 096 slots, -l to change).
 * -m pages: every size is 4 KiB-64 KiB, uniform (blocks of one to sixteen
 * 4 KiB pages, 16 384 live: ~560 MB of blocks, of which the header's and
 * the tail's pages are touched): where each sample is a medium block and
 * most frees miss in cache, as a program caching files or network
 * buffers of a few pages does.
 *
 * Options: -t threads (default 1), -n steps per thread (default 2000000;
 * -m medium and pages: 1000000), -l live slots per thread (default 16384;
 * -m medium: 4096), -s seed, -m mixed|medium|pages.
 * Result: ops= steps over all threads, seconds= wall time of the whole
 * run (the fill and the final frees included), live=, mode=.
 */
#include "bench_common.h"

#define MIN_SZ 16u
#define MAX_SZ (256u << 10)

static int medium, pages;

static size_t pick_size(rng_t *r)
{
    if (pages) return rng_range(r, 4096, 65536);
    if (medium) { /* log-uniform in [1 KiB, 256 KiB] */
        unsigned e = 10 + rng_below(r, 8); /* 2^10 .. 2^17 */
        size_t lo = (size_t)1 << e;
        return lo + rng_below(r, (uint32_t)lo);
    }
    uint32_t u = rng_below(r, 100);
    if (u < 80) return rng_range(r, 16, 256);
    if (u < 95) return rng_range(r, 257, 4096);
    if (u < 99) return rng_range(r, 4097, 65536);
    return rng_range(r, 65537, MAX_SZ);
}

typedef struct {
    long steps, live;
    uint64_t seed;
} job_t;

static slot_t make(rng_t *r)
{
    size_t n = pick_size(r);
    slot_t s = {xmalloc(n), (uint32_t)rng_next(r)};
    blk_init(s.p, n, s.tag);
    return s;
}

static void *run(void *vp)
{
    job_t *j = vp;
    rng_t r;
    rng_seed(&r, j->seed);
    slot_t *slot = xmalloc((size_t)j->live * sizeof *slot);
    for (long i = 0; i < j->live; i++) slot[i] = make(&r);
    for (long i = 0; i < j->steps; i++) {
        uint32_t k = rng_below(&r, (uint32_t)j->live);
        slot_free(slot[k], MIN_SZ, MAX_SZ);
        slot[k] = make(&r);
    }
    slots_free(slot, j->live, MIN_SZ, MAX_SZ);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 2000000, .seed = 1, .live = 16384, .batch = 1};
    parse_opts(argc, argv, &o, "[-t threads] [-n steps] [-l live] [-s seed] [-m mixed|medium|pages]");
    if (o.mode && strcmp(o.mode, "medium") == 0) medium = 1;
    else if (o.mode && strcmp(o.mode, "pages") == 0) pages = 1;
    else if (o.mode && strcmp(o.mode, "mixed") != 0) die("unknown mode %s", o.mode);
    if ((medium || pages) && o.iters == 2000000) o.iters = 1000000;
    if (medium && o.live == 16384) o.live = 4096;
    job_t *job = xmalloc(sizeof *job * (size_t)o.threads);
    pthread_t *tid = xmalloc(sizeof *tid * (size_t)o.threads);
    double t0 = now_sec();
    for (int i = 0; i < o.threads; i++) {
        job[i] = (job_t){o.iters, o.live, o.seed * 104729u + (uint64_t)i};
        xpthread_create(&tid[i], run, &job[i]);
    }
    for (int i = 0; i < o.threads; i++) xpthread_join(tid[i]);
    double t = now_sec() - t0;
    char extra[64];
    const char *name = medium ? "medium" : pages ? "pages" : "mixed";
    snprintf(extra, sizeof extra, "live=%ld mode=%s", o.live, name);
    report(name, o.threads, (double)o.iters * o.threads, t, extra);
    free(job);
    free(tid);
    return 0;
}
