/* large — churn of large blocks (64 KiB .. 8 MiB), every page touched.
 *
 * What it stresses: LIVE slots hold blocks whose sizes are log-uniform in
 * [64 KiB, 8 MiB]; each step checks and frees a random slot and mallocs a
 * new block, writing one byte in every 4 KiB page of it (so the pages are
 * really faulted in, as a program filling its buffers would).  With -t N,
 * N threads each run that churn on slots of their own at once, so every
 * step of every thread goes to the one page heap behind them.
 * Why: above the size classes an allocator goes to its page heap or
 * straight to mmap/munmap.  Returning memory to the OS too eagerly costs a
 * page fault per page on every reuse (glibc's mmap threshold, a page heap
 * that madvises at once); keeping too much costs RSS.  Time and peak RSS
 * together show where each allocator sits on that trade-off.  Several
 * threads add the page heap's lock: its hold time and how a waiter spins
 * or sleeps (on 2 cores with more threads than cores, a waiter that spins
 * while the holder is preempted wastes its time slice).
 *
 * Options: -n steps per thread (default 3000), -l live blocks per thread
 * (default 16), -t threads (default 1), -s seed.
 * Result: ops= steps of all threads, seconds= wall time from the first
 * thread's start to the last one's end (the fill and the final frees
 * included), mb_touched= megabytes written.
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

static slot_t big_new(rng_t *r, double *touched)
{
    size_t n = pick_size(r);
    unsigned char *p = xmalloc(n);
    uint32_t tag = (uint32_t)rng_next(r);
    for (size_t off = 0; off < n; off += PAGE) p[off] = (unsigned char)(tag + off / PAGE);
    blk_init(p, n, tag);
    *touched += (double)n;
    return (slot_t){p, tag};
}

static void big_free(slot_t s)
{
    unsigned char *p = s.p;
    slot_check(s, MIN_SZ, MAX_SZ);
    size_t n = blk_check(p, MIN_SZ, MAX_SZ);
    blk_hdr_t h;
    memcpy(&h, p, sizeof h);
    /* the last byte is the tail tag (blk_init), which may sit on a page's
     * first byte when n is a page multiple plus one */
    for (size_t off = PAGE; off + 1 < n; off += 16 * PAGE)
        if (p[off] != (unsigned char)(h.tag + off / PAGE)) die("large block %p corrupted at offset %zu", (void *)p, off);
    free(p);
}

typedef struct {
    long steps, live;
    uint64_t seed;
    pthread_barrier_t *start; /* NULL: the only thread, no barrier */
    double t_start, t_end, touched;
} arg_t;

/* One thread's churn, timed from the fill to the last free. */
static void *worker(void *vp)
{
    arg_t *a = vp;
    rng_t r;
    rng_seed(&r, a->seed);
    slot_t *slot = xmalloc(sizeof *slot * (size_t)a->live);
    if (a->start) pthread_barrier_wait(a->start);
    a->t_start = now_sec();
    for (long i = 0; i < a->live; i++) slot[i] = big_new(&r, &a->touched);
    for (long i = 0; i < a->steps; i++) {
        uint32_t k = rng_below(&r, (uint32_t)a->live);
        big_free(slot[k]);
        slot[k] = big_new(&r, &a->touched);
    }
    for (long i = 0; i < a->live; i++) big_free(slot[i]);
    a->t_end = now_sec();
    free(slot);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 3000, .seed = 1, .live = 16, .batch = 1};
    parse_opts(argc, argv, &o, "[-t threads] [-n steps_per_thread] [-l live] [-s seed]");
    arg_t *args = xmalloc(sizeof *args * (size_t)o.threads);
    /* thread 0 has the seed itself: -t 1 makes the blocks it always made */
    for (int i = 0; i < o.threads; i++)
        args[i] = (arg_t){o.iters, o.live, o.seed + (uint64_t)i * 1000003u, NULL, 0, 0, 0};
    if (o.threads == 1) {
        worker(&args[0]);
    } else {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)o.threads + 1);
        pthread_t *tid = xmalloc(sizeof *tid * (size_t)o.threads);
        for (int i = 0; i < o.threads; i++) {
            args[i].start = &start;
            xpthread_create(&tid[i], worker, &args[i]);
        }
        pthread_barrier_wait(&start);
        for (int i = 0; i < o.threads; i++) xpthread_join(tid[i]);
        free(tid);
        pthread_barrier_destroy(&start);
    }
    double first = args[0].t_start, last = args[0].t_end, touched = 0;
    for (int i = 0; i < o.threads; i++) {
        if (args[i].t_start < first) first = args[i].t_start;
        if (args[i].t_end > last) last = args[i].t_end;
        touched += args[i].touched;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "live=%ld mb_touched=%.0f", o.live, touched / 1048576.0);
    report("large", o.threads, (double)o.iters * o.threads, last - first, extra);
    free(args);
    return 0;
}
