/* tcache.c — per-thread caches: one free list per size class, in
 * initial-exec TLS, created lazily by the first slow path of a thread.
 * Lists adapt within a byte budget per thread (at most 16 MiB, of which
 * the classes up to 16 KiB may use 1 MiB, or up to 4 MiB while their
 * batches make round trips through the central lists): a list
 * starts at 4 objects (one above 16 KiB) and doubles up to a batch, then
 * grows a batch per underflow, and shrinks after repeated overflows (like
 * tcmalloc).  The
 * budgets come from one global pool (PROFMALLOC_TCACHE_BYTES, which grows
 * with the live threads unless set: THREAD_POOL); a thread
 * that needs more takes from the pool, or the part of another thread's
 * budget that thread's lists do not use.  Taking used budget (as tcmalloc
 * does, the victim shrinking at its next slow path) let threads that sleep
 * keep their caches while others grew theirs beyond the pool
 * (test_tcache_crowd_steals_bounded).  At thread exit (a
 * pthread key destructor) the cache is flushed and the thread turns DEAD:
 * later mallocs and frees from that thread go straight to the central
 * lists.
 * Lock: reg_lock guards the registry of live caches and stealing; the
 * lists themselves belong to their thread and need no lock. */
#include "pm_internal.h"
#include "pm_prof_unwind.h"

#include <linux/futex.h>
#include <pthread.h>
#include <errno.h>

PM_TLS pm_tcache_t pm_tls;

#define MIN_BUDGET ((size_t)64 * 1024)
#define START_BUDGET ((size_t)512 * 1024)
#define STEP ((size_t)64 * 1024)
/* A busy thread's cache may grow to this: a class above 16 KiB moves 2
 * or 3 objects per central trip, and a program cycling through the ~30
 * classes from 16 to 256 KiB made a trip for most of its operations with
 * 1 MiB, and for a fifth of them with 4 MiB (bench/mixed -m medium); the
 * pool (PROFMALLOC_TCACHE_BYTES) still bounds all threads together
 * (test_tcache_thread_cap). */
#define MAX_BUDGET ((size_t)16 << 20)
/* ... but the classes up to SMALL_CLASS_MAX (4 or more objects a trip)
 * hold no more than this: 4 MiB of them per thread cost a program whose
 * threads take turns (bench/pythreads) peak RSS for no speed
 * (test_tcache_small_classes_capped) ... */
#define MAX_SMALL_BUDGET ((size_t)1 << 20)
/* ... unless the thread's lists keep sending batches to the central
 * lists and fetching them back (a refill of a class whose last trip was
 * an overflow: a round trip): PINGPONG_RAISE of them between two idle
 * checks double its ceiling, up to 4 MiB, and a window with fewer puts
 * it back.  Two threads trading batches of 16 B-16 KiB blocks (bench/
 * trade) made a central trip every 9 operations at 1 MiB, at 0.7x the
 * pace of tcmalloc's 4 MiB cache; pythreads makes ~500 round trips a
 * run, mixed 25 000 (test_tcache_round_trips_raise_small_ceiling). */
#define PINGPONG_RAISE 1024
#define SMALL_SHIFT_MAX 2
#define OVERFLOWED 2 /* active[cls]: the class's last trip was an overflow */
#define SMALL_CLASS_MAX 16384
#define MAX_LIST_LEN 8192
#define MAX_OVERFLOWS 3
#define FIRST_LEN 4      /* a list's length limit at its first use */
#define LINE 64          /* a cache line */
/* ... and for blocks smaller than a line: two lines' worth of 16-byte
 * blocks, so a first refill can own a line (pm_tcache_own_line_first) */
#define FIRST_LEN_TINY 8
#define STEAL_TRIES 16   /* threads one budget growth looks at (grow_budget) */
#define STEAL_BACKOFF_MAX 1024
/* Refused growths between two scavenges, per class with a limit: a list
 * is idle when it saw no refill or overflow in a window that long.  A
 * fixed 16 halved the lists of a thread cycling through ~60 medium
 * classes, idle only for a sixtieth of a pass, which it then refilled; a
 * thread using a few classes still moves on to a new size within a pass
 * (test_tcache_moves_to_new_size). */
#define SCAVENGE_PER_CLASS 4
#define SCAVENGE_MIN 16

/* The registry of live thread caches.  Its nodes live in metadata memory,
 * not in the threads' TLS: a thread whose first allocation comes in its
 * last round of key destructors registers but never gets its exit call
 * (glibc calls no destructor set in that round), and a registry of TLS
 * addresses kept the dead thread's cache, whose memory then became
 * another thread's (a cycle: stats hung) or was unmapped (stats crashed).
 * Each node holds a robust mutex that its thread locks for life: when a
 * thread dies without unlocking it, the kernel marks the owner dead in the
 * mutex word, and the next walk of the registry drops the node without
 * touching the dead thread's memory (its cached blocks and its budget are
 * lost: such a thread only ever allocated in its last destructor round). */
typedef struct pm_treg {
    pthread_mutex_t alive;
    pm_tcache_t *t;
    struct pm_treg *next, *prev;
    /* the thread's last stack walks (prof_unwind.c), here rather than in
     * its TLS, where every thread would carry them */
    pm_unwind_memo_t memo;
    int pooled; /* its thread added THREAD_POOL to the pool */
} pm_treg_t;

/* Unless PROFMALLOC_TCACHE_BYTES is set, the pool holds at least this
 * much per live thread: with 32 MiB for 64 threads churning blocks of
 * 16 B-31 KiB on 2 cores, a thread had 512 KiB, made central trips for
 * a fifth of its time, and took 0.44 s where mimalloc took 0.21; with
 * 2 MiB a thread, 0.30 s at 12 % more peak RSS (125 against 111 MB;
 * glibc 250, mimalloc 247; test_tcache_pool_grows_with_threads). */
#define THREAD_POOL ((size_t)2 << 20)
#define POOL_MAX ((size_t)256 << 20) /* ... up to 128 threads */

static pm_lock_t reg_lock = PM_LOCK_INIT;
static _Atomic uint64_t steal_walks, steal_visits; /* for tests: grow_budget's work */
static pm_treg_t *threads;             /* registry, under reg_lock */
static pm_treg_t *steal_cursor;        /* next victim, under reg_lock */
static pm_treg_t *spare_nodes;         /* linked by next, under reg_lock */
static uint64_t nthreads;
static _Atomic int64_t unclaimed;      /* global budget not given to a thread */
static pthread_key_t exit_key;
/* Release ticks (up to 8 a second) so far, and how many a thread lets
 * pass before its lists left idle meanwhile are halved: a thread that
 * filled its lists with one size and then went on with others within
 * its budget (no refusal, so no scavenge) kept them for good, up to
 * MAX_BUDGET per thread (test_tcache_idle_lists_shrink). */
static _Atomic uint32_t tick_epoch;
#define IDLE_TICKS 8

/* Bumped when the OS refused memory: each thread's next slow path flushes
 * its cache (test_harden: test_recovery_after_aligned_fill). */
static _Atomic uint32_t flush_requests;

void pm_tcache_flush_others(void) { pm_relaxed_add(&flush_requests, 1); }

int pm_tcache_give_back(size_t bytes)
{
    pm_pageheap_stats_t st;
    pm_pageheap_stats(&st);
    if (bytes > st.mapped) return 0;
    pm_tcache_t *t = &pm_tls;
    if (t->state == PM_THREAD_ACTIVE) pm_tcache_flush_all(t);
    pm_tcache_flush_others();
    pm_central_drain();
    pm_pageheap_release_all();
    return 1;
}

/* Obeys a flush request made since the thread last looked. */
static void maybe_flush(pm_tcache_t *t)
{
    uint32_t r = pm_relaxed_load(&flush_requests);
    if (PM_LIKELY(r == t->flush_seen)) return;
    t->flush_seen = r;
    pm_tcache_flush_all(t);
}

/* The classes up to SMALL_CLASS_MAX, as a map like pm_tcache_t.limited:
 * the one test of "small" (small_class, and scavenge's small-only walk). */
static uint64_t small_map[(PM_CLASS_MAX + 63) / 64];

void pm_tcache_init(void)
{
    for (unsigned cls = 1; cls < pm_class_count; cls++)
        if (pm_class_size[cls] <= SMALL_CLASS_MAX) small_map[cls >> 6] |= (uint64_t)1 << (cls & 63);
    atomic_store(&unclaimed, (int64_t)pm_options.tcache_bytes);
    pthread_key_create(&exit_key, pm_tcache_thread_exit);
    pm_os_set_give_back(pm_tcache_give_back); /* the profiler's scratch maps */
}

static size_t claim(size_t want)
{
    int64_t have = atomic_load_explicit(&unclaimed, memory_order_relaxed);
    while (have > 0) {
        int64_t take = have < (int64_t)want ? have : (int64_t)want;
        if (atomic_compare_exchange_weak(&unclaimed, &have, have - take)) return (size_t)take;
    }
    return 0;
}

/* Does the node's thread live?  The robust mutex word holds the owner's
 * TID while it lives; the kernel clears it (setting FUTEX_OWNER_DIED) when
 * the owner dies holding it. */
static int node_alive(pm_treg_t *n)
{
    int w = __atomic_load_n(&n->alive.__data.__lock, __ATOMIC_ACQUIRE);
    return (w & FUTEX_TID_MASK) != 0;
}

/* Cleared once a thread turns out to have no robust list (set_robust_list
 * refused: qemu-user, a seccomp filter): the kernel then never marks a
 * dead owner, and a live-looking node may belong to a thread that died in
 * its last destructor round, its TLS gone.  From then on no walk reads
 * another thread's cache (stats count no thread's cached blocks, budget is
 * never taken from another thread); nothing else changes. */
static _Atomic int robust_ok = 1;

/* May a walk read the caches of the threads whose nodes look alive? */
static int caches_readable(void)
{
    return atomic_load_explicit(&robust_ok, memory_order_relaxed);
}

static void node_unlink_locked(pm_treg_t *n)
{
    if (n->prev) n->prev->next = n->next;
    else threads = n->next;
    if (n->next) n->next->prev = n->prev;
    if (steal_cursor == n) steal_cursor = n->next;
    nthreads--;
    if (n->pooled) atomic_fetch_sub(&unclaimed, (int64_t)THREAD_POOL);
    n->pooled = 0;
    n->next = spare_nodes;
    spare_nodes = n;
}

/* Takes the mutex of a fresh or recycled node for the calling thread. */
static void node_claim(pm_treg_t *n, pm_tcache_t *t)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&n->alive, &a);
    pthread_mutexattr_destroy(&a);
    pthread_mutex_lock(&n->alive);
    n->t = t;
    for (unsigned i = 0; i < PM_UNWIND_MEMO_WAYS; i++) n->memo.way[i].pc = 0;
    t->reg = n;
}

pm_unwind_memo_t *pm_tcache_memo(pm_tcache_t *t) { return t->reg ? &t->reg->memo : NULL; }

/* A thread's first slow path: it samples from now on, and caches nothing
 * for its first PM_THREAD_NEW_OPS operations.  A thread whose first
 * allocation comes in the last round of pthread key destructors never gets
 * its exit call (glibc calls no destructor set in that round, and nothing
 * after): what it cached was lost for good (20 000 such threads, 117 MB).
 * Such a thread allocates a few blocks; so a thread caches once it has
 * shown it is more than that (test_harden:
 * test_threads_born_in_destructors). */
void pm_tcache_thread_begin(pm_tcache_t *t)
{
    pm_sampler_thread_start(&t->sampler);
    t->new_ops = 0;
    t->state = PM_THREAD_NEW;
}

void pm_tcache_thread_start(pm_tcache_t *t)
{
    size_t budget = claim(START_BUDGET);
    if (budget < MIN_BUDGET) {
        /* overcommit the floor rather than run without a cache */
        atomic_fetch_sub(&unclaimed, (int64_t)(MIN_BUDGET - budget));
        budget = MIN_BUDGET;
    }
    atomic_store(&t->budget, budget);
    t->capacity = 0;
    t->small_capacity = 0;
    t->small_shift = 0;
    t->pingpongs = 0;
    t->idle_epoch = pm_relaxed_load(&tick_epoch);
    t->state = PM_THREAD_ACTIVE;
    t->flush_seen = pm_relaxed_load(&flush_requests);
    pm_lock(&reg_lock);
    pm_treg_t *n = spare_nodes;
    if (n) spare_nodes = n->next;
    pm_unlock(&reg_lock);
    if (!n) n = pm_meta_alloc(sizeof *n); /* NULL: the thread stays out of the stats */
    t->reg = NULL;
    if (n) {
        /* a robust list for the kernel to walk at the thread's death?
         * (asked outside any lock: a system call) */
        if (!pm_os_has_robust_list()) atomic_store_explicit(&robust_ok, 0, memory_order_relaxed);
        node_claim(n, t);
        pm_lock(&reg_lock);
        n->prev = NULL;
        n->next = threads;
        if (threads) threads->prev = n;
        threads = n;
        nthreads++;
        n->pooled = !pm_options.tcache_bytes_set && nthreads * THREAD_POOL > pm_options.tcache_bytes &&
                    nthreads * THREAD_POOL <= POOL_MAX;
        if (n->pooled) atomic_fetch_add(&unclaimed, (int64_t)THREAD_POOL);
        pm_unlock(&reg_lock);
    }
    pthread_setspecific(exit_key, t);
}

/* Cuts n (> 0) objects off list l and returns them as a NULL-terminated
 * chain, walking whichever part of the list is shorter. */
static void *cut(pm_tlist_t *l, uint32_t n)
{
    void *chain;
    uint32_t keep = l->len - n;
    if (keep < n) {
        /* Release the list's oldest n objects, walking only past the keep
         * newest: a thread that only frees (a consumer) overflows a list
         * of batch + 1 objects, so this is O(1) there, and the objects it
         * keeps are the ones still warm in its cache. */
        if (keep == 0) {
            chain = l->head;
            l->head = NULL;
        } else {
            void *last = l->head; /* the keep-th object */
            for (uint32_t i = 1; i < keep; i++) last = pm_link_next(last, 1);
            chain = pm_link_next(last, 1);
            pm_link_set(last, NULL);
        }
    } else {
        /* the n newest: a walk past them */
        chain = l->head;
        void *last = chain; /* the n-th object */
        for (uint32_t i = 1; i < n; i++) last = pm_link_next(last, 1);
        l->head = pm_link_next(last, 1);
        pm_link_set(last, NULL);
    }
    l->len = keep;
    return chain;
}

static void release(pm_tlist_t *l, unsigned cls, uint32_t n)
{
    uint32_t batch = pm_class_batch[cls];
    while (n) {
        uint32_t k = n < batch ? n : batch;
        pm_central_put(cls, cut(l, k), k);
        n -= k;
    }
}

static inline int small_class(unsigned cls) { return (small_map[cls >> 6] >> (cls & 63)) & 1; }

/* What the classes up to SMALL_CLASS_MAX may hold in t's lists. */
static inline size_t small_ceiling(const pm_tcache_t *t) { return MAX_SMALL_BUDGET << t->small_shift; }

/* Whether `bytes` more fit under the small classes' ceiling, doubled
 * first for a thread whose lists made PINGPONG_RAISE round trips since
 * its last idle check. */
static int small_room(pm_tcache_t *t, size_t bytes)
{
    if (t->small_capacity + bytes <= small_ceiling(t)) return 1;
    if (t->pingpongs < PINGPONG_RAISE || t->small_shift >= SMALL_SHIFT_MAX) return 0;
    t->small_shift++;
    t->pingpongs = 0;
    return t->small_capacity + bytes <= small_ceiling(t);
}

/* Sets list cls's limit to n, keeping the capacities and the map of
 * limited classes (which scavenge and shrink walk) in step. */
static void set_limit(pm_tcache_t *t, unsigned cls, uint32_t n)
{
    pm_tlist_t *l = &t->list[cls];
    size_t size = pm_class_size[cls];
    size_t before = (size_t)l->max_len * size, after = (size_t)n * size;
    t->capacity = t->capacity - before + after;
    if (small_class(cls)) t->small_capacity = t->small_capacity - before + after;
    uint64_t bit = (uint64_t)1 << (cls & 63);
    if (n) t->limited[cls >> 6] |= bit;
    else t->limited[cls >> 6] &= ~bit;
    l->max_len = n;
}

/* Refusals to wait before the next scavenge (SCAVENGE_PER_CLASS). */
static uint16_t scavenge_window(const pm_tcache_t *t)
{
    unsigned n = 0;
    /* bits cleared one by one: __builtin_popcountll is a call into libgcc,
     * linked past the library's cold code (check-text-resident) */
    for (unsigned w = 0; w < sizeof t->limited / sizeof t->limited[0]; w++)
        for (uint64_t m = t->limited[w]; m; m &= m - 1) n++;
    n *= SCAVENGE_PER_CLASS;
    return (uint16_t)(n < SCAVENGE_MIN ? SCAVENGE_MIN : n);
}

/* Halves list cls's limit, releasing what no longer fits. */
static void halve(pm_tcache_t *t, unsigned cls)
{
    pm_tlist_t *l = &t->list[cls];
    uint32_t keep = l->max_len / 2;
    set_limit(t, cls, keep);
    if (l->len > keep) release(l, cls, l->len - keep);
}

/* Lowers list lengths until capacity fits the (possibly lowered) budget. */
static void shrink(pm_tcache_t *t)
{
    size_t budget = atomic_load(&t->budget);
    while (t->capacity > budget) {
        size_t before = t->capacity;
        for (unsigned w = 0; w < sizeof t->limited / sizeof t->limited[0]; w++)
            for (uint64_t m = t->limited[w]; m; m &= m - 1) halve(t, w * 64 + (unsigned)__builtin_ctzll(m));
        PM_CHECK(t->capacity < before, "thread cache capacity out of step");
    }
}

void pm_tcache_steal_work(uint64_t *walks, uint64_t *visits)
{
    *walks = pm_relaxed_load(&steal_walks);
    *visits = pm_relaxed_load(&steal_visits);
}

/* Finds `bytes` more budget: from the pool, else from another thread's
 * unused budget (thieves serialise on reg_lock; the victim only adds).
 * 1: found; 0: not found; -1: not looked for (a thread that found nothing
 * recently waits before it looks again; the caller treats both alike). */
static int grow_budget(pm_tcache_t *t, size_t bytes)
{
    size_t want = bytes > STEP ? bytes : STEP;
    if (atomic_load(&t->budget) + want > MAX_BUDGET) return 0;
    size_t got = claim(want);
    if (got >= bytes) {
        atomic_fetch_add(&t->budget, got);
        return 1;
    }
    if (got) atomic_fetch_add(&unclaimed, (int64_t)got);
    /* The pool is empty.  Stealing looks at a few threads per attempt (the
     * cursor moves on, so all get their turn), and a thread that found
     * nothing waits out twice as many growths before it looks again: with
     * every one of many threads at its minimum, each refill walked them all
     * under reg_lock (1000 threads: 9.1 s against glibc's 0.36 s). */
    if (t->steal_skip) {
        t->steal_skip--;
        return -1;
    }
    int ok = 0;
    pm_lock(&reg_lock);
    pm_relaxed_add(&steal_walks, 1);
    for (uint64_t tries = 0; tries < nthreads && tries < STEAL_TRIES && !ok; tries++) {
        pm_relaxed_add(&steal_visits, 1);
        pm_treg_t *n = steal_cursor ? steal_cursor : threads;
        steal_cursor = n ? n->next : NULL;
        if (!n) continue;
        if (!node_alive(n)) {
            node_unlink_locked(n);
            continue;
        }
        if (!caches_readable()) continue;
        pm_tcache_t *v = n->t;
        if (v == t) continue;
        size_t vb = atomic_load(&v->budget);
        size_t vc = atomic_load_explicit(&v->capacity, memory_order_relaxed);
        if (vb >= MIN_BUDGET + want && vb - want >= vc) {
            atomic_fetch_sub(&v->budget, want);
            atomic_fetch_add(&t->budget, want);
            ok = 1;
        }
    }
    pm_unlock(&reg_lock);
    if (ok) {
        t->steal_backoff = 0;
    } else {
        t->steal_backoff = t->steal_backoff ? t->steal_backoff * 2 : 1;
        if (t->steal_backoff > STEAL_BACKOFF_MAX) t->steal_backoff = STEAL_BACKOFF_MAX;
        t->steal_skip = t->steal_backoff;
    }
    return ok;
}

/* Halves the lists that saw no refill or overflow since the last call:
 * their blocks sit idle while other classes want the budget (a program
 * that moved on from one size to another). */
static size_t scavenge(pm_tcache_t *t, int small_only)
{
    size_t before = t->capacity;
    for (unsigned w = 0; w < sizeof t->limited / sizeof t->limited[0]; w++)
        for (uint64_t m = t->limited[w] & (small_only ? small_map[w] : ~(uint64_t)0); m; m &= m - 1) {
            unsigned cls = w * 64 + (unsigned)__builtin_ctzll(m);
            if (!t->active[cls]) halve(t, cls);
            t->active[cls] = 0;
        }
    return before - t->capacity;
}

/* How far a list's limit grows when the list runs empty or over: to
 * FIRST_LEN (or a batch, if smaller) at first use, then doubling up to a
 * batch, then a batch at a time: growing by one object below a batch
 * made a short-lived thread pay a central-list round trip for most of its
 * first blocks of each size (bench/threadchurn). */
static uint32_t growth(uint32_t max_len, uint32_t batch)
{
    uint32_t first = batch < FIRST_LEN ? batch : FIRST_LEN;
    if (max_len < first) return first - max_len;
    if (max_len >= batch) return batch;
    return max_len * 2 <= batch ? max_len : batch - max_len;
}

/* A list's limit at its first use: FIRST_LEN_TINY (or a batch) for blocks
 * under a line (pm_tcache_own_line_first), growth(0) for the rest, and
 * the one block asked for above SMALL_CLASS_MAX: a program allocating
 * buffers of many medium sizes a few at a time kept a spare of each per
 * thread (git log -p: 3.1 MB of lists above 16 KiB for 4.5 MB in use;
 * test_tcache_big_class_starts_single). */
static uint32_t first_limit(size_t size, uint32_t batch)
{
    if (size < LINE) return batch < FIRST_LEN_TINY ? batch : FIRST_LEN_TINY;
    return size > SMALL_CLASS_MAX ? 1 : growth(0, batch);
}

static PM_NOINLINE void grow_list_slow(pm_tcache_t *t, unsigned cls, uint32_t by)
{
    pm_tlist_t *l = &t->list[cls];
    t->active[cls] = 1;
    if (l->max_len + by > MAX_LIST_LEN) by = MAX_LIST_LEN - l->max_len;
    size_t bytes = (size_t)by * pm_class_size[cls];
    if (!by) return;
    if (small_class(cls) && !small_room(t, bytes)) {
        /* the small classes' own ceiling: only their idle lists make room */
        if (t->scavenge_skip) {
            t->scavenge_skip--;
            return;
        }
        t->scavenge_skip = scavenge_window(t);
        scavenge(t, 1); /* the larger classes' lists would free no room here */
        if (t->small_capacity + bytes > small_ceiling(t)) return;
    }
    if (t->capacity + bytes > atomic_load(&t->budget)) {
        /* no budget to be had: idle lists give up room.  While stealing
         * waits its turn, scavenging (it walks every limited class) runs when the
         * refusals left are a multiple of 16: at least once per wait, the
         * last refusal of it.  Never, and a thread moving from size to size
         * took 5x the refills; always, and 1000 crowded threads took 1.3 s,
         * not 0.5 s */
        int grown = grow_budget(t, bytes);
        if (grown < 0 && (t->steal_skip & 15)) return;
        /* At the budget's ceiling, a scavenge once per window of refusals
         * (scavenge_window): one per refusal walked every class on nearly
         * every refill of a thread cycling through the medium classes. */
        if (grown <= 0) {
            if (grown == 0 && t->scavenge_skip) {
                t->scavenge_skip--;
                return;
            }
            t->scavenge_skip = scavenge_window(t);
            if (scavenge(t, 0) == 0 || t->capacity + bytes > atomic_load(&t->budget)) return;
        }
    }
    set_limit(t, cls, l->max_len + by);
}

/* Lets list cls hold `by` more objects if the budget allows: the room
 * there is, or a refusal while the scavenge window lasts, without
 * grow_list_slow's frame (a thread cycling through the medium classes
 * sits at its ceiling and is refused on most refills). */
static inline void grow_list(pm_tcache_t *t, unsigned cls, uint32_t by)
{
    pm_tlist_t *l = &t->list[cls];
    if (l->max_len + by > MAX_LIST_LEN) by = MAX_LIST_LEN - l->max_len;
    if (!by) {
        t->active[cls] = 1;
        return;
    }
    size_t bytes = (size_t)by * pm_class_size[cls], budget = atomic_load_explicit(&t->budget, memory_order_relaxed);
    int small_full = small_class(cls) && t->small_capacity + bytes > small_ceiling(t);
    if (!small_full && t->capacity + bytes <= budget) {
        t->active[cls] = 1;
        set_limit(t, cls, l->max_len + by);
        return;
    }
    if (t->scavenge_skip && (small_full || budget + (bytes > STEP ? bytes : STEP) > MAX_BUDGET)) {
        t->active[cls] = 1;
        t->scavenge_skip--;
        return;
    }
    grow_list_slow(t, cls, by);
}

void pm_tcache_tick(void) { pm_relaxed_add(&tick_epoch, 1); }

/* The small classes' ceiling back to MAX_SMALL_BUDGET, their lists halved
 * until they fit. */
static PM_COLD void small_ceiling_back(pm_tcache_t *t)
{
    t->small_shift = 0;
    while (t->small_capacity > small_ceiling(t))
        for (unsigned w = 0; w < sizeof t->limited / sizeof t->limited[0]; w++)
            for (uint64_t m = t->limited[w] & small_map[w]; m; m &= m - 1) halve(t, w * 64 + (unsigned)__builtin_ctzll(m));
}

void pm_tcache_idle_check(pm_tcache_t *t)
{
    uint32_t e = pm_relaxed_load(&tick_epoch);
    if (e - t->idle_epoch < IDLE_TICKS || t->state != PM_THREAD_ACTIVE) return;
    t->idle_epoch = e;
    scavenge(t, 0);
    /* a window with few round trips: the small classes' ceiling goes back */
    if (t->small_shift && t->pingpongs < PINGPONG_RAISE) small_ceiling_back(t);
    t->pingpongs = 0;
}

/* Whether every block that shares a cache line with block o (the blocks
 * of its span lie size bytes apart) is among v[0..n): none handed to
 * anyone else or yet to be carved (a block not in the chain fails). */
static int owns_lines(void *const *v, uint32_t n, uintptr_t o, size_t size)
{
    uintptr_t lo = o & ~(uintptr_t)(LINE - 1), hi = (o + size - 1) | (LINE - 1);
    for (uintptr_t mate = o - (o - lo + size - 1) / size * size; mate <= hi; mate += size) {
        uint32_t i = 0;
        while (i < n && (uintptr_t)v[i] != mate) i++;
        if (i == n) return 0;
    }
    return 1;
}

/* A chain of got blocks of size < LINE, reordered so that it starts with
 * a block whose cache lines hold only blocks of the chain, if it has one:
 * a thread that reuses one small block (the chain's first, at its first
 * refill) then writes no line another thread's block shares.  Two
 * threads' first blocks of a class taken one at a time from the central
 * list are neighbours (the NEW phase), and glibc's 32-byte chunks or
 * mimalloc's thread-owned pages ran Hoard's cache-thrash and
 * cache-scratch 2-3x faster (test_tcache.c: test_tcache_own_line_first). */
void *pm_tcache_own_line_first(void *chain, uint32_t got, size_t size)
{
    void *v[FIRST_LEN_TINY];
    uint32_t n = 0;
    /* (links central.c just wrote) */
    for (void *p = chain; p && n < got && n < FIRST_LEN_TINY; p = pm_link_get(p)) v[n++] = p;
    for (uint32_t i = 0; i < n; i++) {
        if (!owns_lines(v, n, (uintptr_t)v[i], size)) continue;
        if (i == 0) return chain;
        pm_link_set(v[i - 1], pm_link_get(v[i]));
        pm_link_set(v[i], chain);
        return v[i];
    }
    return chain;
}

void *pm_tcache_refill(pm_tcache_t *t, unsigned cls)
{
    pm_tlist_t *l = &t->list[cls];
    uint32_t batch = pm_class_batch[cls];
    size_t size = pm_class_size[cls];
    maybe_flush(t);
    if (t->active[cls] & OVERFLOWED) {
        t->active[cls] &= ~OVERFLOWED;
        t->pingpongs++;
    }
    if (t->capacity > atomic_load_explicit(&t->budget, memory_order_relaxed)) shrink(t);
    /* first use: make room before fetching (first_limit); a list started
     * at one block grows from there at its next refill, not now */
    int first = l->max_len == 0, single = first && size > SMALL_CLASS_MAX;
    if (first) grow_list(t, cls, first_limit(size, batch));
    uint32_t n = l->max_len < batch ? l->max_len : batch;
    if (n == 0) n = 1;
    uint32_t got;
    void *chain = pm_central_get(cls, n, &got);
    if (!chain) return NULL;
    if (first && size < LINE) {
        /* the central list stops short at the end of its old spans: a
         * second get opens a fresh span for the lines to own */
        uint32_t more = 0;
        void *rest = got < n ? pm_central_get(cls, n - got, &more) : NULL;
        if (rest) {
            void *tail = rest;
            for (uint32_t i = 1; i < more; i++) tail = pm_link_get(tail);
            pm_link_set(tail, chain);
            chain = rest;
            got += more;
        }
        if (got > 1) chain = pm_tcache_own_line_first(chain, got, size);
    }
    l->head = pm_link_next(chain, 0);
    l->len = got - 1;
    if (!single) grow_list(t, cls, growth(l->max_len, batch));
    return chain;
}

void pm_tcache_overflow(pm_tcache_t *t, unsigned cls)
{
    pm_tlist_t *l = &t->list[cls];
    uint32_t batch = pm_class_batch[cls];
    maybe_flush(t);
    if (t->capacity > atomic_load_explicit(&t->budget, memory_order_relaxed)) shrink(t);
    if (l->max_len == 0 && cls < 8 && pm_class_size[cls] < LINE && !(t->tiny_passed & (1u << cls))) {
        /* a thread's first free of a block under a line (another thread's,
         * as likely as not) goes on, so that its first malloc refills and
         * starts from a line of its own (pm_tcache_own_line_first) */
        t->tiny_passed |= (uint8_t)(1u << cls);
        release(l, cls, l->len);
        return;
    }
    if (l->max_len < batch) {
        grow_list(t, cls, growth(l->max_len, batch));
        if (l->len <= l->max_len) return;
    }
    release(l, cls, l->len < batch ? l->len : batch);
    t->active[cls] = 1 | (small_class(cls) ? OVERFLOWED : 0);
    if (l->max_len > batch && ++t->overflows[cls] > MAX_OVERFLOWS) {
        set_limit(t, cls, l->max_len - batch);
        t->overflows[cls] = 0;
        if (l->len > l->max_len) release(l, cls, l->len - l->max_len);
    }
}

void pm_tcache_flush_all(pm_tcache_t *t)
{
    for (unsigned cls = 1; cls < pm_class_count; cls++) {
        pm_tlist_t *l = &t->list[cls];
        if (l->len) release(l, cls, l->len);
        l->max_len = 0;
    }
    t->capacity = 0;
    t->small_capacity = 0;
    t->small_shift = 0;
    for (unsigned w = 0; w < sizeof t->limited / sizeof t->limited[0]; w++) t->limited[w] = 0;
}

void pm_tcache_thread_exit(void *arg)
{
    pm_tcache_t *t = arg;
    if (t != &pm_tls || t->state != PM_THREAD_ACTIVE) return;
    pm_tcache_flush_all(t);
    pm_lock(&reg_lock);
    if (t->reg) {
        node_unlink_locked(t->reg);
        pthread_mutex_unlock(&t->reg->alive); /* no waiters: no syscall */
        t->reg = NULL;
    }
    pm_unlock(&reg_lock);
    atomic_fetch_add(&unclaimed, (int64_t)atomic_load(&t->budget));
    atomic_store(&t->budget, 0);
    t->state = PM_THREAD_DEAD;
}

/* The counts below read other threads' list lengths as plain loads, as
 * their fast paths write them (test/unit/tsan.supp): ThreadSanitizer is
 * told to ignore the reads, as its suppression cannot match a report whose
 * reading stack it has lost (one check-tsan run in three, tsan_stress
 * all). */
#if defined(__SANITIZE_THREAD__)
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define IGNORE_READS_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define IGNORE_READS_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define IGNORE_READS_BEGIN() ((void)0)
#define IGNORE_READS_END() ((void)0)
#endif

void pm_tcache_class_counts(uint64_t counts[PM_CLASS_MAX], uint64_t *nthreads_out)
{
    pm_lock(&reg_lock);
    for (pm_treg_t *n = threads, *next; n; n = next) {
        next = n->next;
        if (!node_alive(n)) {
            node_unlink_locked(n);
            continue;
        }
        if (!caches_readable()) continue;
        IGNORE_READS_BEGIN();
        for (unsigned cls = 1; cls < pm_class_count; cls++)
            counts[cls] += ((volatile pm_tlist_t *)&n->t->list[cls])->len;
        IGNORE_READS_END();
    }
    *nthreads_out = nthreads;
    pm_unlock(&reg_lock);
}

void pm_tcache_lock_all(void) { pm_lock(&reg_lock); }

void pm_tcache_unlock_all(int child)
{
    if (!child) {
        pm_unlock(&reg_lock);
        return;
    }
    /* Only the forking thread lives on in the child: forget the others'
     * caches (their blocks stay allocated; the child cannot know which of
     * them the vanished threads still referenced). */
    pm_lock_reset(&reg_lock);
    pm_tcache_t *self = &pm_tls;
    threads = NULL;
    steal_cursor = NULL;
    nthreads = 0;
    int64_t budget = (int64_t)pm_options.tcache_bytes;
    if (self->state == PM_THREAD_ACTIVE && self->reg) {
        /* the child's thread takes its node's mutex anew (the parent's
         * thread held it; the child has its own TID and robust list) */
        pm_treg_t *n = self->reg;
        node_claim(n, self);
        n->next = n->prev = NULL;
        n->pooled = 0; /* the pool starts over below */
        threads = n;
        nthreads = 1;
    }
    if (self->state == PM_THREAD_ACTIVE) budget -= (int64_t)atomic_load(&self->budget);
    atomic_store(&unclaimed, budget);
}
