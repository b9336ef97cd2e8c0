/* trade — threads that free each other's batches of mixed-size blocks.
 *
 * What it stresses: -t N threads in a ring.  Each round a thread mallocs a
 * batch of -b blocks (default 256) of 16 B-16 KiB, log-uniform (as many
 * blocks of 16-32 B as of 8-16 KiB), writes each block's header and tail,
 * and hands the batch to the next thread's mailbox; it then checks and
 * frees the batch waiting in its own mailbox, if any.  A thread whose
 * neighbour's mailbox is still full empties its own while it waits.
 * Why: every free is of another thread's block, and every class from 16 B
 * to 16 KiB is in flight at once, so each thread cache fills on the frees
 * and empties on the mallocs, class by class, every round: the pattern of
 * xmalloc-test.  A cache that cannot hold one round's blocks sends each
 * batch through the central lists and fetches it back the next round.
 *
 * Options: -t threads (default 2), -n blocks allocated over all threads
 * (default 8000000), -b batch, -s seed.
 * Result: ops= blocks allocated (and freed), seconds= wall time.
 */
#include "bench_common.h"

#include <sched.h>
#include <stdatomic.h>

#define LO 16
#define HI 16384

typedef struct {
    _Alignas(64) _Atomic(void **) box;
    pthread_t th;
    int id, n;
    long rounds, batch;
    uint64_t seed;
} trader_t;

#define MAX_TRADERS 256
static trader_t traders[MAX_TRADERS];
static _Atomic int finished;

/* Blocks of LO..HI bytes, log-uniform: an octave at random, then a size
 * in it. */
static size_t trade_size(rng_t *r)
{
    unsigned octave = rng_below(r, 10); /* 16 << 9 == 8 KiB: the last octave ends at 16 KiB */
    size_t lo = (size_t)LO << octave;
    return rng_range(r, lo, lo * 2);
}

/* Checks and frees the batch in t's mailbox, if one is there. */
static int take_delivery(trader_t *t)
{
    void **b = atomic_exchange_explicit(&t->box, NULL, memory_order_acquire);
    if (!b) return 0;
    for (long i = 0; i < t->batch; i++) blk_free(b[i], LO, HI);
    free(b);
    return 1;
}

static void *trader(void *arg)
{
    trader_t *t = arg, *next = &traders[(t->id + 1) % t->n];
    rng_t r;
    rng_seed(&r, t->seed);
    for (long round = 0; round < t->rounds; round++) {
        void **b = xmalloc((size_t)t->batch * sizeof *b);
        for (long i = 0; i < t->batch; i++) {
            size_t n = trade_size(&r);
            b[i] = xmalloc(n);
            blk_init(b[i], n, (uint32_t)rng_next(&r));
        }
        void **none = NULL;
        while (!atomic_compare_exchange_weak_explicit(&next->box, &none, b, memory_order_release,
                                                      memory_order_relaxed)) {
            none = NULL;
            if (!take_delivery(t)) sched_yield();
        }
        take_delivery(t);
    }
    /* the previous thread may still be handing this one batches */
    atomic_fetch_add(&finished, 1);
    while (atomic_load(&finished) < t->n)
        if (!take_delivery(t)) sched_yield();
    take_delivery(t);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 2, .iters = 8000000, .seed = 1, .live = 1, .batch = 256};
    parse_opts(argc, argv, &o, "[-t threads] [-n blocks] [-b batch] [-s seed]");
    if (o.threads > MAX_TRADERS) die("at most %d threads", MAX_TRADERS);
    long rounds = o.iters / o.batch / o.threads;
    if (rounds < 1) rounds = 1;
    for (int i = 0; i < o.threads; i++)
        traders[i] = (trader_t){.id = i, .n = o.threads, .rounds = rounds, .batch = o.batch, .seed = o.seed * 7919 + (uint64_t)i};
    double t0 = now_sec();
    for (int i = 0; i < o.threads; i++)
        if (pthread_create(&traders[i].th, NULL, trader, &traders[i]) != 0) die("pthread_create failed");
    for (int i = 0; i < o.threads; i++) pthread_join(traders[i].th, NULL);
    double t = now_sec() - t0;
    report("trade", o.threads, (double)rounds * (double)o.batch * o.threads, t, "");
    return 0;
}
