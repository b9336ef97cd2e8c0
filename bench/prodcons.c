/* prodcons — producer/consumer: every block is freed by another thread.
 *
 * What it stresses: a producer thread mallocs blocks of 16..512 bytes,
 * writes a header into each, and passes them in batches of B pointers
 * through a bounded single-producer/single-consumer ring (lock-free, a
 * few atomics per batch, so the queue costs next to nothing per block);
 * a consumer thread checks and frees every block.  No block is ever freed
 * by the thread that allocated it.
 * Why: remote frees are the weak spot of per-thread caches and of glibc's
 * arenas (every free takes the owning arena's lock, and the producer keeps
 * allocating from the same arena).  A tcmalloc-style allocator returns the
 * blocks through the consumer's cache to the central lists in batches;
 * profmalloc targets >= 10x glibc here.  The ring is bounded (64 batches),
 * so at most ~16k blocks are in flight and memory must be recycled.
 *
 * Options: -t producer/consumer pairs (default 1, i.e. 2 threads),
 * -n blocks per producer (default 5000000), -b batch size (default 256),
 * -s seed, -m bare.
 * -m bare: the producer only mallocs and the consumer only frees; neither
 * writes nor reads the blocks, so the time is the allocator's own (and the
 * cache lines its free lists touch) without the header and tail traffic
 * between the cores that the default (checked) mode adds.
 * Result: ops= total blocks (each one malloc + one remote free), seconds=
 * wall time until every consumer has freed everything.
 */
#include "bench_common.h"
#include <sched.h>
#include <stdatomic.h>

#define MIN_SZ 16
#define MAX_SZ 512
#define QLEN 64

typedef struct {
    _Atomic unsigned long head __attribute__((aligned(64))); /* next to fill (producer) */
    _Atomic unsigned long tail __attribute__((aligned(64))); /* next to drain (consumer) */
    long n, batch;
    uint64_t seed;
    slot_t *items; /* QLEN * batch blocks with their tags */
    long freed;
    int bare;
} pair_t;

static void spin_wait(int *spins)
{
    if (++*spins < 64) __builtin_ia32_pause();
    else sched_yield();
}

static void *producer(void *vp)
{
    pair_t *q = vp;
    rng_t r;
    rng_seed(&r, q->seed);
    long made = 0;
    while (made < q->n) {
        unsigned long h = atomic_load_explicit(&q->head, memory_order_relaxed);
        int spins = 0;
        while (h - atomic_load_explicit(&q->tail, memory_order_acquire) >= QLEN) spin_wait(&spins);
        slot_t *slot = q->items + (h % QLEN) * (unsigned long)q->batch;
        long k = q->batch;
        if (k > q->n - made) k = q->n - made;
        if (q->bare)
            for (long i = 0; i < k; i++) slot[i].p = xmalloc(rng_range(&r, MIN_SZ, MAX_SZ));
        else
            for (long i = 0; i < k; i++) slot[i] = slot_new(&r, MIN_SZ, MAX_SZ);
        for (long i = k; i < q->batch; i++) slot[i].p = NULL;
        made += k;
        atomic_store_explicit(&q->head, h + 1, memory_order_release);
    }
    return NULL;
}

static void *consumer(void *vp)
{
    pair_t *q = vp;
    long freed = 0;
    while (freed < q->n) {
        unsigned long t = atomic_load_explicit(&q->tail, memory_order_relaxed);
        int spins = 0;
        while (atomic_load_explicit(&q->head, memory_order_acquire) == t) spin_wait(&spins);
        slot_t *slot = q->items + (t % QLEN) * (unsigned long)q->batch;
        for (long i = 0; i < q->batch && slot[i].p; i++) {
            if (q->bare) free(slot[i].p);
            else slot_free(slot[i], MIN_SZ, MAX_SZ);
            freed++;
        }
        atomic_store_explicit(&q->tail, t + 1, memory_order_release);
    }
    q->freed = freed;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 5000000, .seed = 1, .live = 1, .batch = 256};
    parse_opts(argc, argv, &o, "[-t pairs] [-n blocks_per_producer] [-b batch] [-s seed] [-m bare]");
    int bare = bare_mode(&o);
    int np = o.threads;
    pair_t *q = pairs_new(np, sizeof *q);
    for (int i = 0; i < np; i++) {
        q[i].n = o.iters;
        q[i].batch = o.batch;
        q[i].seed = o.seed * 7919u + (uint64_t)i;
        q[i].bare = bare;
        q[i].items = xmalloc(sizeof(slot_t) * QLEN * (size_t)o.batch);
    }
    double t = pairs_run(q, sizeof *q, np, consumer, producer);
    for (int i = 0; i < np; i++) {
        if (q[i].freed != o.iters) die("pair %d freed %ld of %ld blocks", i, q[i].freed, o.iters);
        free(q[i].items);
    }
    char extra[64];
    snprintf(extra, sizeof extra, "pairs=%d batch=%ld mode=%s", np, o.batch, bare ? "bare" : "checked");
    report("prodcons", 2 * np, (double)o.iters * np, t, extra);
    free(q);
    return 0;
}
