/* churn — random replacement of small blocks (the headline workload).
 *
 * What it stresses: each thread keeps LIVE small blocks (16..256 bytes,
 * uniformly random sizes) in a slot array; each step picks a random slot,
 * checks and frees its block and mallocs a new one of a new random size.
 * The working set (a few thousand live blocks) stays in the thread cache's
 * reach, but sizes and free order are random, so the allocator's free lists
 * are exercised across all small size classes with no LIFO luck.
 * Why: most C/C++ programs are dominated by exactly this kind of traffic;
 * profmalloc targets 3x glibc here.  With -t 2 every thread runs its own
 * independent churn (no sharing), so throughput should scale ~linearly:
 * any shared lock or false sharing in the allocator shows up as lost
 * scaling.
 *
 * Options: -t threads (default 1), -n steps per thread (default 20000000),
 * -l live blocks per thread (default 4000), -s seed, -m bare.
 * -m bare: the same sizes and slots, but the blocks are never written or
 * read (only malloc's result is checked for NULL and alignment), so the
 * time is the allocator's own plus the random numbers: the allocator's
 * throughput with the least of the workload's memory traffic on top.  The
 * default (checked) mode writes a header and a tail byte into every block
 * and checks both at free, which is what a broken allocator fails.
 * Result: seconds= wall time from the first thread's start to the last
 * thread's end (each thread reads the clock itself: the main thread may
 * not run again until the workers are done); ops= total steps (one malloc
 * + one free each).
 */
#include "bench_common.h"

#define MIN_SZ 16
#define MAX_SZ 256

typedef struct {
    long steps, live;
    uint64_t seed;
    int bare;
    pthread_barrier_t *start;
    double t_start, t_end;   /* this thread's timed region */
} arg_t;

/* The checked loop: every block written at malloc and checked at free. */
static void churn_checked(rng_t *r, slot_t *slot, long steps, long live)
{
    for (long i = 0; i < steps; i++) {
        uint32_t k = rng_below(r, (uint32_t)live);
        slot_free(slot[k], MIN_SZ, MAX_SZ);
        slot[k] = slot_new(r, MIN_SZ, MAX_SZ);
    }
    slots_free(slot, live, MIN_SZ, MAX_SZ);
}

/* The bare loop: malloc and free only. */
static void churn_bare(rng_t *r, void **blk, long steps, long live)
{
    for (long i = 0; i < steps; i++) {
        uint32_t k = rng_below(r, (uint32_t)live);
        free(blk[k]);
        blk[k] = xmalloc(rng_range(r, MIN_SZ, MAX_SZ));
    }
    for (long i = 0; i < live; i++) free(blk[i]);
    free(blk);
}

/* Set-up before the barrier; the loop and the final frees are timed. */
static void *worker(void *vp)
{
    arg_t *a = vp;
    rng_t r;
    rng_seed(&r, a->seed);
    slot_t *slot = NULL;
    void **blk = NULL;
    if (a->bare) {
        blk = xmalloc((size_t)a->live * sizeof *blk);
        for (long i = 0; i < a->live; i++) blk[i] = xmalloc(rng_range(&r, MIN_SZ, MAX_SZ));
    } else {
        slot = slots_new(&r, a->live, MIN_SZ, MAX_SZ);
    }
    pthread_barrier_wait(a->start);
    a->t_start = now_sec();
    if (a->bare) churn_bare(&r, blk, a->steps, a->live);
    else churn_checked(&r, slot, a->steps, a->live);
    a->t_end = now_sec();
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 20000000, .seed = 1, .live = 4000, .batch = 1};
    parse_opts(argc, argv, &o, "[-t threads] [-n steps_per_thread] [-l live] [-s seed] [-m bare]");
    int bare = bare_mode(&o);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)o.threads + 1);
    pthread_t *tid = xmalloc(sizeof *tid * (size_t)o.threads);
    arg_t *args = xmalloc(sizeof *args * (size_t)o.threads);
    for (int i = 0; i < o.threads; i++) {
        args[i] = (arg_t){o.iters, o.live, o.seed * 1000003u + (uint64_t)i, bare, &start, 0, 0};
        xpthread_create(&tid[i], worker, &args[i]);
    }
    pthread_barrier_wait(&start);
    for (int i = 0; i < o.threads; i++) xpthread_join(tid[i]);
    double first = args[0].t_start, last = args[0].t_end;
    for (int i = 1; i < o.threads; i++) {
        if (args[i].t_start < first) first = args[i].t_start;
        if (args[i].t_end > last) last = args[i].t_end;
    }
    double t = last - first;
    char extra[64];
    snprintf(extra, sizeof extra, "live=%ld mode=%s", o.live, bare ? "bare" : "checked");
    report("churn", o.threads, (double)o.iters * o.threads, t, extra);
    free(tid);
    free(args);
    return 0;
}
