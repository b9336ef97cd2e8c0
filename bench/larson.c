/* larson — server-style churn with ownership passing between threads.
 *
 * What it stresses: T worker threads each own an array of LIVE slots of
 * random sizes (16..1024 bytes).  Each step frees a random slot and mallocs
 * a new random size into it.  Every 64 steps a thread also swaps one of its
 * blocks with a slot of a shared exchange table (atomic exchange), so it
 * later frees a block another thread allocated, while that thread frees
 * one of ours.  After every round of STEPS steps a thread exits and hands
 * its whole slot array to a freshly created thread, which frees and
 * replaces the blocks its predecessor allocated (the pattern of a server
 * whose per-connection threads come and go).  This is the idea of the
 * Larson & Krishnan server benchmark, reimplemented here.
 * Why: it mixes the thread-local fast path with remote frees (blocks
 * returning to another thread's cache or the central lists) and with thread
 * caches being created and torn down while their blocks live on; an
 * allocator that strands memory in dead threads' caches, or serialises
 * remote frees on one lock, falls behind here.
 *
 * Options: -t threads (default 2), -n rounds per thread chain (default 50),
 * -b steps per round (default 100000), -l live slots per thread (default
 * 2000), -s seed.
 * Result: ops= total steps (malloc+free pairs), seconds= wall time.
 */
#include "bench_common.h"
#include <stdatomic.h>

#define MIN_SZ 16
#define MAX_SZ 1024
#define XCHG 256

static _Atomic(void *) exchange_tbl[XCHG];

typedef struct chain {
    long rounds_left, steps, live;
    uint64_t seed;
    slot_t *slot;
} chain_t;

static void *worker(void *vp)
{
    chain_t *c = vp;
    rng_t r;
    rng_seed(&r, c->seed);
    slot_t *slot = c->slot;
    for (long i = 0; i < c->steps; i++) {
        uint32_t k = rng_below(&r, (uint32_t)c->live);
        slot_free(slot[k], MIN_SZ, MAX_SZ);
        slot[k] = slot_new(&r, MIN_SZ, MAX_SZ);
        if ((i & 63) == 0) {
            uint32_t x = rng_below(&r, XCHG);
            uint32_t k2 = rng_below(&r, (uint32_t)c->live);
            slot_check(slot[k2], MIN_SZ, MAX_SZ);
            void *theirs = atomic_exchange(&exchange_tbl[x], slot[k2].p);
            if (theirs) {
                blk_hdr_t h;
                blk_check(theirs, MIN_SZ, MAX_SZ);
                memcpy(&h, theirs, sizeof h);
                slot[k2] = (slot_t){theirs, h.tag};
            } else {
                slot[k2] = slot_new(&r, MIN_SZ, MAX_SZ);
            }
        }
    }
    /* hand the slot array to a new thread */
    if (--c->rounds_left > 0) {
        c->seed = rng_next(&r);
        pthread_t next;
        xpthread_create(&next, worker, c);
        pthread_detach(next);
    } else {
        for (long i = 0; i < c->live; i++) slot_free(slot[i], MIN_SZ, MAX_SZ);
        free(slot);
        __atomic_store_n(&c->slot, NULL, __ATOMIC_RELEASE);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 2, .iters = 50, .seed = 1, .live = 2000, .batch = 100000};
    parse_opts(argc, argv, &o, "[-t threads] [-n rounds] [-b steps_per_round] [-l live] [-s seed]");
    rng_t r;
    rng_seed(&r, o.seed);
    chain_t *ch = xmalloc(sizeof *ch * (size_t)o.threads);
    for (int i = 0; i < o.threads; i++) {
        ch[i] = (chain_t){o.iters, o.batch, o.live, rng_next(&r), xmalloc(sizeof(slot_t) * (size_t)o.live)};
        for (long j = 0; j < o.live; j++) ch[i].slot[j] = slot_new(&r, MIN_SZ, MAX_SZ);
    }
    double t0 = now_sec();
    pthread_t *tid = xmalloc(sizeof *tid * (size_t)o.threads);
    for (int i = 0; i < o.threads; i++) xpthread_create(&tid[i], worker, &ch[i]);
    for (int i = 0; i < o.threads; i++) xpthread_join(tid[i]);
    /* successors are detached: wait until every chain has finished */
    for (;;) {
        int busy = 0;
        for (int i = 0; i < o.threads; i++) busy |= __atomic_load_n(&ch[i].slot, __ATOMIC_ACQUIRE) != NULL;
        if (!busy) break;
        usleep(200);
    }
    double t = now_sec() - t0;
    for (int i = 0; i < XCHG; i++) {
        void *p = atomic_exchange(&exchange_tbl[i], NULL);
        if (p) blk_free(p, MIN_SZ, MAX_SZ);
    }
    char extra[96];
    snprintf(extra, sizeof extra, "live=%ld rounds=%ld threads_created=%ld", o.live, o.iters, o.iters * o.threads);
    report("larson", o.threads, (double)o.iters * (double)o.batch * o.threads, t, extra);
    free(ch);
    free(tid);
    return 0;
}
