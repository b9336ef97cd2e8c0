/* server — request trees of mixed-size objects, freed by another thread.
 *
 * What it stresses: -t N pairs of threads.  In each pair an "acceptor"
 * handles requests: a request is a tree of 8-64 nodes (a node: a header
 * of 64-256 B holding its children, and most of the time a payload of
 * 16 B-2 KiB, one in 16 a buffer of 4-32 KiB), built depth first and
 * filled in, then handed to its "worker" through a lock-free ring.  The
 * worker walks the tree, checks every payload and frees every block,
 * children first.  Up to 256 requests are in flight per pair.
 * Why: a server's request objects are born in one thread and die in
 * another, in every size class at once: the cross-thread path (thread
 * cache overflow into the shared lists, refill from them) carries all the
 * traffic, for small and medium classes alike, and the freed objects must
 * find their way back to the allocating thread without piling up.
 *
 * Options: -t pairs (default 1), -n requests per pair (default 100000),
 * -s seed.
 * Result: ops= blocks allocated (and freed) over all pairs, seconds= wall
 * time, requests=.
 */
#include "bench_common.h"

#include <sched.h>
#include <stdatomic.h>

#define QLEN 256

typedef struct node {
    uint32_t nkids, tag;
    size_t plen;
    unsigned char *payload;
    struct node *kid[];
} node_t;

typedef struct {
    _Alignas(64) _Atomic unsigned long head;
    _Alignas(64) _Atomic unsigned long tail;
    _Alignas(64) node_t *ring[QLEN];
    long n;
    uint64_t seed;
    long blocks_made, blocks_freed;
} pair_t;

static void spin_wait(int *spins)
{
    if (++*spins < 64) __builtin_ia32_pause();
    else sched_yield();
}

static size_t payload_size(rng_t *r)
{
    uint32_t u = rng_below(r, 16);
    if (u == 0) return rng_range(r, 4096, 32768);
    if (u < 3) return 0;
    return rng_range(r, 16, 2048);
}

/* A subtree of `*budget` nodes at most; counts its blocks in *made. */
static node_t *build(rng_t *r, long *budget, long *made, int depth)
{
    uint32_t nk = depth < 6 ? rng_below(r, 5) : 0;
    if ((long)nk > *budget) nk = (uint32_t)*budget;
    size_t hdr = sizeof(node_t) + nk * sizeof(node_t *);
    size_t want = rng_range(r, 64, 256);
    node_t *n = xmalloc(hdr > want ? hdr : want);
    (*made)++;
    n->tag = (uint32_t)rng_next(r);
    n->plen = payload_size(r);
    n->payload = NULL;
    if (n->plen) {
        n->payload = xmalloc(n->plen);
        (*made)++;
        n->payload[0] = (unsigned char)n->tag;
        n->payload[n->plen - 1] = (unsigned char)(n->tag >> 8);
        if (n->plen > 64) n->payload[n->plen / 2] = (unsigned char)(n->tag >> 16);
    }
    *budget -= nk;
    n->nkids = nk;
    for (uint32_t i = 0; i < nk; i++) n->kid[i] = build(r, budget, made, depth + 1);
    return n;
}

static void destroy(node_t *n, long *freed)
{
    for (uint32_t i = 0; i < n->nkids; i++) destroy(n->kid[i], freed);
    if (n->payload) {
        if (n->payload[0] != (unsigned char)n->tag || n->payload[n->plen - 1] != (unsigned char)(n->tag >> 8) ||
            (n->plen > 64 && n->payload[n->plen / 2] != (unsigned char)(n->tag >> 16)))
            die("payload %p of %zu bytes corrupted", (void *)n->payload, n->plen);
        free(n->payload);
        (*freed)++;
    }
    free(n);
    (*freed)++;
}

static void *acceptor(void *vp)
{
    pair_t *q = vp;
    rng_t r;
    rng_seed(&r, q->seed);
    long made = 0;
    for (long i = 0; i < q->n; i++) {
        long budget = (long)rng_range(&r, 8, 64) - 1;
        node_t *root = build(&r, &budget, &made, 0);
        unsigned long h = atomic_load_explicit(&q->head, memory_order_relaxed);
        int spins = 0;
        while (h - atomic_load_explicit(&q->tail, memory_order_acquire) >= QLEN) spin_wait(&spins);
        q->ring[h % QLEN] = root;
        atomic_store_explicit(&q->head, h + 1, memory_order_release);
    }
    q->blocks_made = made;
    return NULL;
}

static void *worker(void *vp)
{
    pair_t *q = vp;
    long freed = 0;
    for (long i = 0; i < q->n; i++) {
        unsigned long t = atomic_load_explicit(&q->tail, memory_order_relaxed);
        int spins = 0;
        while (atomic_load_explicit(&q->head, memory_order_acquire) == t) spin_wait(&spins);
        node_t *root = q->ring[t % QLEN];
        atomic_store_explicit(&q->tail, t + 1, memory_order_release);
        destroy(root, &freed);
    }
    q->blocks_freed = freed;
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 100000, .seed = 1, .live = 1, .batch = 1};
    parse_opts(argc, argv, &o, "[-t pairs] [-n requests] [-s seed]");
    int np = o.threads;
    pair_t *q = pairs_new(np, sizeof *q);
    for (int i = 0; i < np; i++) {
        q[i].n = o.iters;
        q[i].seed = o.seed * 7919u + (uint64_t)i;
    }
    double t = pairs_run(q, sizeof *q, np, worker, acceptor);
    long blocks = 0;
    for (int i = 0; i < np; i++) {
        if (q[i].blocks_freed != q[i].blocks_made)
            die("pair %d freed %ld of %ld blocks", i, q[i].blocks_freed, q[i].blocks_made);
        blocks += q[i].blocks_made;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "pairs=%d requests=%ld", np, o.iters * np);
    report("server", 2 * np, (double)blocks, t, extra);
    free(q);
    return 0;
}
