/* threadchurn — many short-lived threads, each allocating a little.
 *
 * What it stresses: N threads are created in a loop (at most T alive at a
 * time); each mallocs LIVE blocks of 16..1024 bytes, frees a random half,
 * allocates again into the holes, frees everything and exits.
 * Why: a per-thread-cache allocator pays for creating a thread cache on a
 * thread's first malloc and for flushing it at thread exit (TLS destructor);
 * if either is slow (a global lock, a big memset, an mmap per thread) or a
 * dead thread's cache strands memory, thread pools that spawn workers on
 * demand suffer.  glibc reuses arenas across threads and is a tough
 * baseline here.
 *
 * Options: -n threads to create (default 5000), -t max alive at once
 * (default 2), -l blocks per thread (default 300), -s seed.
 * Result: ops= threads created, seconds= wall time (thread creation
 * included: it is the same for every allocator except for its own mallocs).
 */
#include "bench_common.h"

#define MIN_SZ 16
#define MAX_SZ 1024

typedef struct {
    long live;
    uint64_t seed;
} arg_t;

static void *worker(void *vp)
{
    arg_t *a = vp;
    rng_t r;
    rng_seed(&r, a->seed);
    slot_t *slot = slots_new(&r, a->live, MIN_SZ, MAX_SZ);
    for (long i = 0; i < a->live / 2; i++) {
        uint32_t k = rng_below(&r, (uint32_t)a->live);
        if (slot[k].p) {
            slot_free(slot[k], MIN_SZ, MAX_SZ);
            slot[k].p = NULL;
        }
    }
    for (long i = 0; i < a->live; i++)
        if (!slot[i].p) slot[i] = slot_new(&r, MIN_SZ, MAX_SZ);
    slots_free(slot, a->live, MIN_SZ, MAX_SZ);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 2, .iters = 5000, .seed = 1, .live = 300, .batch = 1};
    parse_opts(argc, argv, &o, "[-n threads_total] [-t alive_at_once] [-l blocks_per_thread] [-s seed]");
    pthread_t *tid = xmalloc(sizeof *tid * (size_t)o.threads);
    arg_t *args = xmalloc(sizeof *args * (size_t)o.threads);
    double t0 = now_sec();
    long created = 0;
    while (created < o.iters) {
        int k = 0;
        for (; k < o.threads && created < o.iters; k++, created++) {
            args[k] = (arg_t){o.live, o.seed * 31337u + (uint64_t)created};
            xpthread_create(&tid[k], worker, &args[k]);
        }
        for (int i = 0; i < k; i++) xpthread_join(tid[i]);
    }
    double t = now_sec() - t0;
    char extra[64];
    snprintf(extra, sizeof extra, "blocks_per_thread=%ld", o.live);
    report("threadchurn", o.threads, (double)created, t, extra);
    free(tid);
    free(args);
    return 0;
}
