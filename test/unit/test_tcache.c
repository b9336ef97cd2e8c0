/* test_tcache.c — unit tests of src/tcache.c: a thread's start, list lengths,
 * registration and exit, the budget and its stealing, the pool of caches. */
#include "core_test.h"

#include <sched.h>

/* ======================================================================
 * tcache.c and alloc.c through pm_malloc & co.
 * ==================================================================== */

static void check_tcache_invariants(const pm_tcache_t *t, const char *where)
{
    size_t cap = 0, small = 0;
    for (unsigned c = 1; c < pm_class_count; c++) {
        const pm_tlist_t *l = &t->list[c];
        cap += (size_t)l->max_len * pm_class_size[c];
        if (pm_class_size[c] <= 16384) small += (size_t)l->max_len * pm_class_size[c];
        int limited = (t->limited[c / 64] >> (c % 64)) & 1;
        if (limited != (l->max_len > 0))
            fail_msg("%s: class %u: max_len %u but limited bit %d", where, c, l->max_len, limited);
        uint32_t n = 0;
        for (void *p = l->head; p && n <= l->len; p = pm_link_get(p)) n++;
        if (n != l->len) fail_msg("%s: class %u: len %u but %u on the list", where, c, l->len, n);
    }
    if (cap != t->capacity) fail_msg("%s: capacity %zu != Σ max_len·size %zu", where, t->capacity, cap);
    if (small != t->small_capacity)
        fail_msg("%s: small capacity %zu != Σ max_len·size up to 16 KiB %zu", where, t->small_capacity, small);
    if (t->small_shift > 2) fail_msg("%s: small ceiling 1 MiB << %u, over 4 MiB", where, t->small_shift);
    if (small > ((size_t)1 << 20) << t->small_shift)
        fail_msg("%s: small classes hold %zu bytes, over 1 MiB << %u", where, small, t->small_shift);
    size_t budget = atomic_load(&((pm_tcache_t *)t)->budget);
    if (t->capacity > budget) fail_msg("%s: capacity %zu > budget %zu", where, t->capacity, budget);
}

/* Runs fn(arg) on a thread of its own (a fresh cache) and waits for it. */
static void run_thread(void *(*fn)(void *), void *arg)
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fn, arg), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
}

typedef struct {
    int state_before, state_after_malloc, state_after_free;
    uint32_t max_len_first;
    uint32_t grow_bad;           /* growth steps that broke slow start */
    uint32_t grow_steps, max_len_end;
    uint32_t len_over;           /* frees after which len > max_len */
    uint32_t len_over_at, len_over_len, len_over_max;
    uint64_t threads_in;
    size_t capacity, budget, sum;
    uint32_t bad_list;
} slowstart_t;

static void *slowstart_thread(void *arg)
{
    slowstart_t *r = arg;
    unsigned cls = pm_sizeclass_of(64);
    uint32_t batch = pm_class_batch[cls];
    pm_tlist_t *l = &pm_tls.list[cls];
    enum { N = 2000 };
    static void *blocks[N];
    r->state_before = pm_tls.state;
    become_active();
    blocks[0] = pm_malloc(64);
    r->state_after_malloc = pm_tls.state;
    r->max_len_first = l->max_len;
    r->threads_in = stats().threads;
    for (int i = 1; i < N; i++) {
        uint32_t len = l->len, max = l->max_len;
        blocks[i] = pm_malloc(64);
        if (l->max_len != max) {
            r->grow_steps++;
            /* below a batch the limit doubles (capped at the batch);
             * past it, it grows a batch per underflow */
            uint32_t want = max >= batch ? max + batch : max * 2 <= batch ? max * 2 : batch;
            if (len != 0 || l->max_len != want) r->grow_bad++;
        }
    }
    r->max_len_end = l->max_len;
    for (int i = 0; i < N; i++) {
        pm_free(blocks[i]);
        if (l->len > l->max_len && !r->len_over++) {
            r->len_over_at = (uint32_t)i;
            r->len_over_len = l->len;
            r->len_over_max = l->max_len;
        }
    }
    r->state_after_free = pm_tls.state;
    size_t sum = 0;
    for (unsigned c = 1; c < pm_class_count; c++) {
        sum += (size_t)pm_tls.list[c].max_len * pm_class_size[c];
        if (pm_tls.list[c].len > pm_tls.list[c].max_len) r->bad_list++;
    }
    r->sum = sum;
    r->capacity = pm_tls.capacity;
    r->budget = atomic_load(&pm_tls.budget);
    return NULL;
}

/* A thread whose first allocation comes in its last round of key
 * destructors: glibc never calls profmalloc's exit hook for it.  Its cache
 * must not stay in the registry as a pointer into its dead TLS: with the
 * thread's stack reused by the next thread the registry became a cycle and
 * stats hung; with the stack unmapped, stats crashed. */
static pthread_key_t lr_key;
static __thread int lr_rounds;
static void *lr_last;

static void lr_dtor(void *v)
{
    if (++lr_rounds < 4) { /* PTHREAD_DESTRUCTOR_ITERATIONS in glibc */
        pthread_setspecific(lr_key, v); /* once more, in the next round */
        return;
    }
    void *p = pm_malloc(64); /* the thread's first allocation */
    pm_free(lr_last);
    lr_last = p;
}

static void *lr_thread(void *arg)
{
    pthread_setspecific(lr_key, (void *)1);
    return arg;
}

static void late_registration_child(void *arg)
{
    int no_robust_list = arg != NULL;
    if (no_robust_list) {
        /* new threads get no robust list: set_robust_list fails as under
         * qemu-user, so the kernel never marks their node's owner dead */
        struct sock_filter code[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_set_robust_list, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {sizeof code / sizeof code[0], code};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
            _exit(77);
    }
    if (pthread_key_create(&lr_key, lr_dtor) != 0) _exit(3);
    for (int i = 0; i < 3; i++) { /* glibc reuses the stack (and TLS) */
        pthread_t t;
        if (pthread_create(&t, NULL, lr_thread, NULL) || pthread_join(t, NULL)) _exit(3);
    }
    profmalloc_stats_t s;
    pm_stats_collect(&s); /* hung here */
    /* a thread on a stack of our own, unmapped after it ends */
    size_t sz = 256 * 1024;
    void *stack = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstack(&at, stack, sz);
    pthread_t t;
    if (pthread_create(&t, &at, lr_thread, NULL) || pthread_join(t, NULL)) _exit(3);
    munmap(stack, sz);
    pm_stats_collect(&s); /* crashed here (without a robust list too) */
    if (!no_robust_list && s.threads != 1) _exit(4); /* only this one lives */
    for (int i = 0; i < 100; i++) pm_free(pm_malloc(100000)); /* budget walks too */
    _exit(0);
}

static void test_tcache_registration_in_last_destructor_round(void **state)
{
    (void)state;
    char out[256];
    int st = run_in_child(late_registration_child, NULL, out, sizeof out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("child status %#x: %s", (unsigned)st, out);
    /* where threads have no robust list, the walks stay off their caches */
    st = run_in_child(late_registration_child, (void *)1, out, sizeof out);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) skip(); /* no seccomp here */
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("child (no robust list) status %#x: %s", (unsigned)st, out);
}

static void test_tcache_fresh_thread_and_slow_start(void **state)
{
    (void)state;
    slowstart_t r;
    memset(&r, 0, sizeof r);
    uint64_t threads0 = stats().threads;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slowstart_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r.state_before, PM_THREAD_EMPTY);
    assert_int_equal(r.state_after_malloc, PM_THREAD_ACTIVE);
    assert_int_equal(r.state_after_free, PM_THREAD_ACTIVE);
    assert_int_equal(r.threads_in, threads0 + 1);
    /* the first refill sets the limit to 4 objects (tcache.c FIRST_LEN)
     * and doubles it: 8 after the first malloc (the batch of 64 B is 32) */
    assert_int_equal(pm_class_batch[pm_sizeclass_of(64)], 32);
    assert_int_equal(r.max_len_first, 8);
    assert_true(r.grow_steps > 10);
    assert_int_equal(r.grow_bad, 0);
    assert_true(r.max_len_end > pm_class_batch[pm_sizeclass_of(64)]);
    assert_int_equal(r.sum, r.capacity);
    assert_true(r.capacity <= r.budget);
    assert_int_equal(stats().threads, threads0);
}

/* pm_types.h: "len <= max_len, except while a free is deciding what to do
 * with an overflow" -- so it holds again whenever pm_free has returned.
 * The slow-start thread above frees 2000 blocks of 64 bytes after growing
 * the list far beyond a batch, which makes the list shrink on overflow. */
static void test_tcache_len_within_max_len(void **state)
{
    (void)state;
    slowstart_t r;
    memset(&r, 0, sizeof r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slowstart_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (r.len_over)
        fail_msg("len > max_len after %u of the frees (first after free #%u: len %u, max_len %u)",
                 r.len_over, r.len_over_at, r.len_over_len, r.len_over_max);
    assert_int_equal(r.bad_list, 0);
}

/* A thread that only frees (a consumer): each overflow sends the list's
 * oldest batch to the central list and keeps the newest frees, so after
 * every free the list is exactly the last `len` blocks freed, newest
 * first, NULL-terminated.  (Releasing the newest batch instead keeps a
 * cold object and walks the whole batch; a cut that miscounts breaks the
 * length or the termination.) */
enum { CONSUMER_N = 1000 };
typedef struct {
    void **blocks;
    unsigned bad_at, overflows;
    uint32_t bad_len, bad_walk;
} consumer_t;

static void *consumer_thread(void *arg)
{
    consumer_t *r = arg;
    unsigned cls = pm_sizeclass_of(64);
    for (unsigned i = 0; i < CONSUMER_N && !r->bad_at; i++) {
        uint32_t before = pm_tls.list[cls].len;
        pm_free(r->blocks[i]);
        pm_tlist_t *l = &pm_tls.list[cls];
        if (l->len < before) r->overflows++;
        uint32_t walked = 0;
        int ok = 1;
        for (void *p = l->head; p && walked <= l->len; p = pm_link_get(p), walked++)
            if (walked > i || p != r->blocks[i - walked]) ok = 0;
        if (!ok || walked != l->len) {
            r->bad_at = i + 1;
            r->bad_len = l->len;
            r->bad_walk = walked;
        }
    }
    return NULL;
}

static void test_tcache_consumer_keeps_newest(void **state)
{
    (void)state;
    consumer_t r = {0};
    r.blocks = calloc(CONSUMER_N, sizeof *r.blocks);
    assert_non_null(r.blocks);
    for (unsigned i = 0; i < CONSUMER_N; i++) assert_non_null(r.blocks[i] = pm_malloc(64));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, consumer_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (r.bad_at)
        fail_msg("after free #%u the list has len %u but walks %u objects, or not the newest frees",
                 r.bad_at, r.bad_len, r.bad_walk);
    /* the list overflowed many times: the check above covered the cut */
    assert_true(r.overflows + 1 >= (unsigned)(CONSUMER_N / pm_class_batch[pm_sizeclass_of(64)]));
    free(r.blocks);
}

typedef struct {
    uint64_t threads_in, cache_in, own;
} exit_t;

static void *exit_thread(void *arg)
{
    exit_t *r = arg;
    enum { N = 400 };
    static void *b[N];
    static const size_t sizes[] = {32, 256, 1024, 4096};
    for (size_t k = 0; k < PM_ARRAY_LEN(sizes); k++) {
        for (int i = 0; i < N; i++) b[i] = pm_malloc(sizes[k]);
        for (int i = 0; i < N; i++) pm_free(b[i]);
    }
    uint64_t own = 0;
    for (unsigned c = 1; c < pm_class_count; c++)
        own += (uint64_t)pm_tls.list[c].len * pm_class_size[c];
    r->own = own;
    profmalloc_stats_t s = stats();
    r->threads_in = s.threads;
    r->cache_in = s.thread_cache;
    return NULL;
}

static void test_tcache_exit_flushes(void **state)
{
    (void)state;
    exit_t r = {0};
    profmalloc_stats_t s0 = stats();
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, exit_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    profmalloc_stats_t s1 = stats();
    assert_true(r.own > 64 * 1024);
    assert_int_equal(r.threads_in, s0.threads + 1);
    assert_int_equal(r.cache_in, s0.thread_cache + r.own);
    assert_int_equal(s1.threads, s0.threads);
    assert_int_equal(s1.thread_cache, s0.thread_cache);
    assert_int_equal(s1.in_use, s0.in_use);
    assert_stats_balance(&s1);
}

/* ---- DEAD state: a key destructor that runs after the allocator's ---- */

static pthread_key_t late_key;
static struct {
    int state_at, state_after;
    int malloc_ok, calloc_ok, realloc_ok, large_ok;
    uint32_t max_len;
    uint64_t parked_before, parked_after_get, parked_after_put;
} dead;

static void late_destructor(void *arg)
{
    dead.state_at = pm_tls.state;
    /* the thread's flushed 128-byte list waits in the transfer slots; a
     * dead thread's malloc takes one object from there, its free puts one
     * back */
    pm_central_t *c128 = pm_central_of(pm_sizeclass_of(128));
    dead.parked_before = c128->parked;
    void *r = pm_malloc(128);
    dead.parked_after_get = c128->parked;
    pm_free(r);
    dead.parked_after_put = c128->parked;
    void *keep = arg;
    char *p = pm_malloc(100);
    dead.malloc_ok = p != NULL && pm_usable_size(p) >= 100;
    if (p) memset(p, 0x77, 100);
    char *q = pm_calloc(10, 30);
    dead.calloc_ok = q != NULL && all_zero(q, 296);
    p = pm_realloc(p, 5000);
    dead.realloc_ok = p != NULL && p[0] == 0x77 && p[99] == 0x77;
    void *big = pm_malloc(1 << 20);
    dead.large_ok = big != NULL;
    pm_free(big);
    pm_free(q);
    pm_free(p);
    pm_free(keep); /* allocated while the thread was ACTIVE */
    dead.state_after = pm_tls.state;
    dead.max_len = pm_tls.list[pm_sizeclass_of(128)].max_len;
}

static void *dead_thread(void *arg)
{
    (void)arg;
    become_active();
    void *keep = pm_malloc(128);
    void *tmp = pm_malloc(128);
    pm_free(tmp);
    pthread_setspecific(late_key, keep);
    return NULL;
}

static void test_tcache_dead_thread(void **state)
{
    (void)state;
    /* created long after init, so after the allocator's key: glibc runs
     * destructors in key order */
    assert_int_equal(pthread_key_create(&late_key, late_destructor), 0);
    profmalloc_stats_t s0 = stats();
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, dead_thread, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    profmalloc_stats_t s1 = stats();
    pthread_key_delete(late_key);
    assert_int_equal(dead.state_at, PM_THREAD_DEAD);
    assert_int_equal(dead.state_after, PM_THREAD_DEAD);
    assert_true(dead.malloc_ok);
    assert_true(dead.calloc_ok);
    assert_true(dead.realloc_ok);
    assert_true(dead.large_ok);
    assert_int_equal(dead.max_len, 0);
    assert_true(dead.parked_before >= 1);
    assert_int_equal(dead.parked_after_get, dead.parked_before - 1);
    assert_int_equal(dead.parked_after_put, dead.parked_before);
    /* nothing leaked into a cache that nobody owns, the thread is gone */
    assert_int_equal(s1.threads, s0.threads);
    assert_int_equal(s1.in_use, s0.in_use);
    assert_int_equal(s1.thread_cache, s0.thread_cache);
    assert_stats_balance(&s1);
}

/* ---- budget invariant after a mixed workload, in several threads ----- */

typedef struct {
    unsigned seed;
    size_t capacity, sum, budget;
    uint32_t len_over;
} budget_t;

static void *budget_thread(void *arg)
{
    budget_t *r = arg;
    enum { SLOTS = 4096 };
    void **slot = calloc(SLOTS, sizeof *slot);
    unsigned x = r->seed;
    for (int i = 0; i < 200000; i++) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) % SLOTS;
        if (slot[k]) {
            pm_free(slot[k]);
            slot[k] = NULL;
        } else {
            size_t size = (x >> 20) % 4 == 0 ? (x >> 4) % 32768 : (x >> 4) % 512;
            slot[k] = pm_malloc(size);
        }
    }
    for (int k = 0; k < SLOTS; k++) pm_free(slot[k]);
    free(slot);
    size_t sum = 0;
    for (unsigned c = 1; c < pm_class_count; c++) {
        sum += (size_t)pm_tls.list[c].max_len * pm_class_size[c];
        if (pm_tls.list[c].len > pm_tls.list[c].max_len) r->len_over++;
    }
    r->sum = sum;
    r->capacity = pm_tls.capacity;
    r->budget = atomic_load(&pm_tls.budget);
    return NULL;
}

static void test_tcache_budget_invariant(void **state)
{
    (void)state;
    enum { T = 4 };
    budget_t r[T];
    pthread_t th[T];
    memset(r, 0, sizeof r);
    profmalloc_stats_t s0 = stats();
    for (int i = 0; i < T; i++) {
        r[i].seed = 1234u + (unsigned)i * 7919u;
        assert_int_equal(pthread_create(&th[i], NULL, budget_thread, &r[i]), 0);
    }
    for (int i = 0; i < T; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < T; i++) {
        assert_int_equal(r[i].sum, r[i].capacity);
        assert_true(r[i].capacity <= r[i].budget);
        assert_true(r[i].budget <= pm_options.tcache_bytes);
    }
    profmalloc_stats_t s1 = stats();
    assert_int_equal(s1.threads, s0.threads);
    assert_int_equal(s1.in_use, s0.in_use);
    assert_stats_balance(&s1);
    /* the main thread's cache obeys it too */
    void *p = pm_malloc(10);
    pm_free(p);
    check_tcache_invariants(&pm_tls, "main thread");
}

/* More live threads than the pool has budget for (32 MiB / 512 KiB = 64):
 * every thread ends at its minimum and its lists keep asking for more.  A
 * budget growth looks at a bounded number of other threads, and a thread
 * that found nothing waits before it looks again: each growth used to walk
 * every thread under one lock (1000 threads: 9 s, glibc 0.4 s). */
enum { CROWD = 160 };
static pthread_barrier_t crowd_barrier;

static void *crowd_thread(void *arg)
{
    (void)arg;
    enum { PER = 64 };
    static const size_t sizes[] = {48, 96, 208, 448, 960, 2048, 4096, 8192};
    void *b[PER];
    pthread_barrier_wait(&crowd_barrier); /* all alive at once */
    for (int round = 0; round < 40; round++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            for (int i = 0; i < PER; i++) assert_non_null(b[i] = pm_malloc(sizes[k]));
            for (int i = 0; i < PER; i++) pm_free(b[i]);
        }
    pthread_barrier_wait(&crowd_barrier);
    return NULL;
}

static void test_tcache_crowd_steals_bounded(void **state)
{
    (void)state;
    uint64_t w0, v0, w1, v1;
    pm_tcache_steal_work(&w0, &v0);
    pthread_t th[CROWD];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 << 10);
    /* the pool as a user sets it: unset, it would grow with the threads */
    pm_options.tcache_bytes_set = 1;
    assert_int_equal(pthread_barrier_init(&crowd_barrier, NULL, CROWD), 0);
    for (int i = 0; i < CROWD; i++) assert_int_equal(pthread_create(&th[i], &attr, crowd_thread, NULL), 0);
    for (int i = 0; i < CROWD; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&crowd_barrier);
    pthread_attr_destroy(&attr);
    pm_options.tcache_bytes_set = 0;
    pm_tcache_steal_work(&w1, &v1);
    uint64_t walks = w1 - w0, visits = v1 - v0;
    assert_true(walks > 0);               /* the pool did run out */
    assert_true(visits <= 16 * walks);    /* a few threads per look */
    assert_true(walks <= (uint64_t)CROWD * 48); /* and few looks per thread (~16 here; 800 without the wait) */
}

/* Unless PROFMALLOC_TCACHE_BYTES is set, the pool grows by 2 MiB a live
 * thread past 16 (tcache.c THREAD_POOL): 40 threads that grow their
 * caches at once hold more than the 32 MiB default between them, read
 * while all of them wait at a barrier. */
enum { POOL_THREADS = 40 };
static pthread_barrier_t pool_barrier;
static pm_tcache_t *pool_caches[POOL_THREADS];
static _Atomic int pool_next;

static void cycle_blocks(size_t first, int n);

static void *pool_thread(void *arg)
{
    (void)arg;
    pool_caches[atomic_fetch_add(&pool_next, 1)] = &pm_tls;
    for (int round = 0; round < 8; round++) cycle_blocks(32768, 128);
    pthread_barrier_wait(&pool_barrier); /* all grown, none allocating */
    pthread_barrier_wait(&pool_barrier); /* read */
    return NULL;
}

static void test_tcache_pool_grows_with_threads(void **state)
{
    (void)state;
    assert_false(pm_options.tcache_bytes_set);
    assert_int_equal(pm_options.tcache_bytes, (uint64_t)32 << 20);
    pthread_t th[POOL_THREADS];
    atomic_store(&pool_next, 0);
    assert_int_equal(pthread_barrier_init(&pool_barrier, NULL, POOL_THREADS + 1), 0);
    for (int i = 0; i < POOL_THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, pool_thread, NULL), 0);
    pthread_barrier_wait(&pool_barrier);
    size_t sum = 0;
    for (int i = 0; i < POOL_THREADS; i++) sum += atomic_load(&pool_caches[i]->budget);
    pthread_barrier_wait(&pool_barrier);
    for (int i = 0; i < POOL_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&pool_barrier);
    if (sum <= ((size_t)40 << 20)) fail_msg("40 threads' budgets: %zu bytes, not past 40 MiB", sum);
}

/* One thread's cache never holds more than 16 MiB (tcache.c MAX_BUDGET),
 * however much the global pool has left, and of that at most 1 MiB in
 * classes up to 16 KiB (MAX_SMALL_BUDGET): a thread that cycles some
 * 50 MB of blocks of 32..512 KiB (the largest not cached) through its
 * cache grows its lists past 1 MiB up to the cap; one that cycles 1.6 MB
 * of blocks of 1..16 KiB stops at 1 MiB. */
typedef struct {
    size_t budget_max, capacity_max, small_max;
    uint32_t over_budget;
    size_t first; /* the cycle's smallest block; it doubles 4 times */
} cap_t;

/* One round of n (<= 256) blocks of first..16 x first bytes through the
 * thread's cache: allocated, then freed. */
static void cycle_blocks(size_t first, int n)
{
    void *b[256];
    for (int i = 0; i < n; i++) assert_non_null(b[i] = pm_malloc(first << (i % 5)));
    for (int i = 0; i < n; i++) pm_free(b[i]);
}

/* 2 MB of blocks of 8..128 KiB, small and not. */
static void cycle_big_blocks(void) { cycle_blocks(8192, 48); }

/* 256 live blocks of first..16 x first bytes, one replaced at random
 * 256 times (a program's steady state: frees and mallocs interleave). */
static void replace_blocks(void *live[256], size_t first, uint64_t *seed)
{
    for (int i = 0; i < 256; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(*seed >> 56), e = (unsigned)(*seed >> 40) % 5;
        pm_free(live[k]);
        assert_non_null(live[k] = pm_malloc(first << e));
    }
}

static void *cap_thread(void *arg)
{
    cap_t *r = arg;
    uint64_t seed = 1;
    void *live[256] = {0};
    for (int round = 0; round < 40; round++) {
        cycle_blocks(r->first, 256);
        replace_blocks(live, r->first, &seed);
        size_t budget = atomic_load(&pm_tls.budget);
        if (budget > r->budget_max) r->budget_max = budget;
        if (pm_tls.capacity > r->capacity_max) r->capacity_max = pm_tls.capacity;
        if (pm_tls.small_capacity > r->small_max) r->small_max = pm_tls.small_capacity;
        if (pm_tls.capacity > budget) r->over_budget++;
        check_tcache_invariants(&pm_tls, "cap thread");
    }
    for (int i = 0; i < 256; i++) pm_free(live[i]);
    return NULL;
}

static cap_t run_cap_thread(size_t first)
{
    cap_t r = {.first = first};
    run_thread(cap_thread, &r);
    assert_int_equal(r.over_budget, 0);
    return r;
}

static void test_tcache_thread_cap(void **state)
{
    (void)state;
    assert_true(pm_options.tcache_bytes > ((size_t)16 << 20)); /* the pool is not the limit */
    cap_t r = run_cap_thread(32768);
    assert_true(r.budget_max <= ((size_t)16 << 20));
    /* the lists did grow past the small classes' ceiling and the old cap
     * of 4 MiB, towards the cap */
    if (r.capacity_max <= ((size_t)6 << 20)) fail_msg("lists reached %zu bytes (budget %zu), not past 6 MiB", r.capacity_max, r.budget_max);
}

static void test_tcache_small_classes_capped(void **state)
{
    (void)state;
    cap_t r = run_cap_thread(1024);
    assert_true(r.small_max <= ((size_t)1 << 20));
    assert_true(r.capacity_max <= ((size_t)1 << 20));
    /* and they did reach it: 256 blocks of up to 16 KiB cycle through them */
    assert_true(r.small_max > ((size_t)1 << 20) / 2);
}

/* Two threads trade batches of 256 blocks of 1-16 KiB: each frees the
 * other's, so its lists overflow on the frees and refill on the mallocs,
 * a round trip through the central lists each.  Such a thread's small
 * classes outgrow 1 MiB, up to 4 MiB, and a window of idle checks without
 * round trips takes them back to 1 MiB (tcache.c PINGPONG_RAISE). */
typedef struct {
    _Atomic(void **) box[2];
    _Atomic int done;
    size_t small_max[2];
    unsigned shift_max[2], shift_after[2];
    size_t small_after[2];
} trade_t;

static trade_t trade;

static void drain_box(int me)
{
    void **b = atomic_exchange(&trade.box[me], NULL);
    if (!b) return;
    for (int i = 0; i < 256; i++) pm_free(b[i]);
    pm_free(b);
}

static void *trade_thread(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t seed = (uint64_t)me + 1;
    for (int round = 0; round < 600; round++) {
        void **b = pm_malloc(256 * sizeof *b);
        assert_non_null(b);
        for (int i = 0; i < 256; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            assert_non_null(b[i] = pm_malloc((size_t)1024 << ((seed >> 40) % 5)));
        }
        void **none = NULL;
        while (!atomic_compare_exchange_weak(&trade.box[!me], &none, b)) {
            none = NULL;
            drain_box(me);
            sched_yield();
        }
        drain_box(me);
        if (pm_tls.small_capacity > trade.small_max[me]) trade.small_max[me] = pm_tls.small_capacity;
        if (pm_tls.small_shift > trade.shift_max[me]) trade.shift_max[me] = pm_tls.small_shift;
        check_tcache_invariants(&pm_tls, "trading thread");
    }
    /* the other thread may still be handing this one batches */
    atomic_fetch_add(&trade.done, 1);
    while (atomic_load(&trade.done) < 2) {
        drain_box(me);
        sched_yield();
    }
    drain_box(me);
    /* two idle windows: the first sees the trading's round trips, the
     * second none */
    for (int check = 0; check < 2; check++) {
        for (int i = 0; i < 8; i++) pm_tcache_tick();
        pm_tcache_idle_check(&pm_tls);
    }
    trade.shift_after[me] = pm_tls.small_shift;
    trade.small_after[me] = pm_tls.small_capacity;
    check_tcache_invariants(&pm_tls, "trading thread, idle");
    return NULL;
}

static void test_tcache_round_trips_raise_small_ceiling(void **state)
{
    (void)state;
    memset(&trade, 0, sizeof trade);
    pthread_t th[2];
    for (intptr_t i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, trade_thread, (void *)i), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        if (trade.small_max[i] <= ((size_t)1 << 20))
            fail_msg("thread %d: small classes reached %zu bytes, not past 1 MiB", i, trade.small_max[i]);
        assert_true(trade.shift_max[i] >= 1);
        assert_int_equal(trade.shift_after[i], 0);
        assert_true(trade.small_after[i] <= ((size_t)1 << 20));
    }
}

/* n (<= 64) blocks of size bytes made, then freed. */
static void cycle_size(size_t size, int n)
{
    void *b[64];
    for (int i = 0; i < n; i++) assert_non_null(b[i] = pm_malloc(size));
    for (int i = 0; i < n; i++) pm_free(b[i]);
}

/* A class above 16 KiB starts its list at one object, fetched alone
 * (tcache.c first_limit): a thread that uses a medium size once keeps
 * no spare of it; one that holds several of it grows the list as before.
 * A 16 KiB class still fetches FIRST_LEN objects at its first use. */
typedef struct {
    uint32_t first_len, first_max, after_free_len, reuse_len, second_max, deep_max, small_len;
} single_t;

static void *single_thread(void *arg)
{
    single_t *r = arg;
    unsigned big = pm_sizeclass_of(64 << 10), small = pm_sizeclass_of(16 << 10);
    pm_tlist_t *l = &pm_tls.list[big];
    become_active();
    void *a = pm_malloc(64 << 10);
    r->first_len = l->len;
    r->first_max = l->max_len;
    pm_free(a);
    r->after_free_len = l->len;
    a = pm_malloc(64 << 10); /* the cached one */
    r->reuse_len = l->len;
    void *b = pm_malloc(64 << 10); /* a second live one: the list grows */
    r->second_max = l->max_len;
    pm_free(a);
    pm_free(b);
    for (int round = 0; round < 8; round++) cycle_size(64 << 10, 32);
    r->deep_max = l->max_len;
    void *s = pm_malloc(16 << 10);
    r->small_len = pm_tls.list[small].len;
    pm_free(s);
    check_tcache_invariants(&pm_tls, "single thread");
    return NULL;
}

static void test_tcache_big_class_starts_single(void **state)
{
    (void)state;
    single_t r = {0};
    run_thread(single_thread, &r);
    assert_int_equal(r.first_len, 0);
    assert_int_equal(r.first_max, 1);
    assert_int_equal(r.after_free_len, 1);
    assert_int_equal(r.reuse_len, 0);
    assert_true(r.second_max >= 2);
    if (r.deep_max < 16) fail_msg("a list cycling 32 blocks grew to %u only", r.deep_max);
    assert_int_equal(r.small_len, 3);
}

/* A thread that filled its cache with one size and moves on to another
 * gets the room back from the idle list within a few passes: scavenges
 * come once per window of refused growths, 4 per class with a limit, so a
 * thread using few classes is not held to the window a thread cycling
 * through 60 needs (tcache.c scavenge_window). */
typedef struct {
    uint32_t old_len, new_len, rounds;
} move_t;

static void *move_thread(void *arg)
{
    move_t *r = arg;
    unsigned a = pm_sizeclass_of(64 << 10), b = pm_sizeclass_of(40 << 10);
    for (int i = 0; i < 20; i++) cycle_size(64 << 10, 64); /* 4 MiB cached */
    r->old_len = pm_tls.list[a].max_len;
    for (r->rounds = 0; r->rounds < 200 && pm_tls.list[b].max_len < 48; r->rounds++) cycle_size(40 << 10, 60);
    r->new_len = pm_tls.list[b].max_len;
    check_tcache_invariants(&pm_tls, "move thread");
    return NULL;
}

static void test_tcache_moves_to_new_size(void **state)
{
    (void)state;
    move_t r = {0};
    run_thread(move_thread, &r);
    /* the first size held most of the budget */
    if (r.old_len < 40) fail_msg("64 KiB list reached only %u", r.old_len);
    if (r.new_len < 48 || r.rounds > 3) /* 7 with a window of 1024 for all */
        fail_msg("40 KiB list at %u after %u passes (64 KiB list had %u)", r.new_len, r.rounds, r.old_len);
}

/* A thread that filled a list with one size and went on with another,
 * within its budget (no refused growth, so no scavenge), gives the idle
 * list back a second of release ticks (8) later, halving it at each such
 * check, while the list it goes on using stays cached. */
typedef struct {
    uint32_t before, after_first, after_second, after_all, busy_before, busy_after;
} idle_t;

static void *idle_thread(void *arg)
{
    idle_t *r = arg;
    unsigned big = pm_sizeclass_of(64 << 10), small = pm_sizeclass_of(4096);
    for (int i = 0; i < 10; i++) cycle_size(64 << 10, 32);
    r->before = pm_tls.list[big].max_len;
    for (int i = 0; i < 10; i++) cycle_size(4096, 64);
    r->busy_before = pm_tls.list[small].max_len;
    for (int check = 0; check < 12; check++) {
        for (int i = 0; i < 8; i++) pm_tcache_tick();
        cycle_size(4096, 64); /* the list in use: refilled and overflowed */
        pm_tcache_idle_check(&pm_tls);
        if (check == 0) r->after_first = pm_tls.list[big].max_len;
        if (check == 1) r->after_second = pm_tls.list[big].max_len;
        check_tcache_invariants(&pm_tls, "idle thread");
    }
    r->after_all = pm_tls.list[big].max_len;
    r->busy_after = pm_tls.list[small].max_len;
    return NULL;
}

static void test_tcache_idle_lists_shrink(void **state)
{
    (void)state;
    idle_t r = {0};
    run_thread(idle_thread, &r);
    if (r.before < 16) fail_msg("64 KiB list reached only %u", r.before);
    assert_int_equal(r.after_first, r.before);      /* it was in use since the last look */
    assert_int_equal(r.after_second, r.before / 2); /* idle since: halved */
    assert_int_equal(r.after_all, 0);
    /* the list in use stays cached: served by the fast path alone it looks
     * idle to a check, is halved, and grows back at its next refill */
    if (r.busy_after < pm_class_batch[pm_sizeclass_of(4096)])
        fail_msg("the list in use went from %u to %u", r.busy_before, r.busy_after);
}

/* The same through malloc: at rate 0 a thread's countdown ends every
 * 4 MiB it allocates (PM_TICK_BYTES), which runs the release tick when an
 * eighth of a second has passed, and the idle check.  A thread that
 * filled a 64 KiB list and then allocates only 4 KiB blocks, 5 MiB per
 * eighth of a second, halves the idle list within 20 such rounds. */
static void *idle_malloc_thread(void *arg)
{
    idle_t *r = arg;
    unsigned big = pm_sizeclass_of(64 << 10);
    for (int i = 0; i < 10; i++) cycle_size(64 << 10, 32);
    r->before = pm_tls.list[big].max_len;
    for (int round = 0; round < 20; round++) {
        pm_pageheap_skip_time(pm_release_decay_ns() / 8 + 5000000);
        for (int i = 0; i < 20; i++) cycle_size(4096, 64);
    }
    r->after_all = pm_tls.list[big].max_len;
    check_tcache_invariants(&pm_tls, "idle malloc thread");
    return NULL;
}

static void test_tcache_idle_lists_shrink_through_malloc(void **state)
{
    (void)state;
    idle_t r = {0};
    run_thread(idle_malloc_thread, &r);
    if (r.before < 16) fail_msg("64 KiB list reached only %u", r.before);
    if (r.after_all > r.before / 2) fail_msg("64 KiB list still %u of %u after 20 rounds", r.after_all, r.before);
}

/* The global pool bounds the caches of threads that sleep, too: each of
 * SLEEPERS threads in turn grows its cache as far as it can, then sleeps
 * (as a Python thread waiting for the GIL does).  Once the pool is spent, a
 * thread may take only budget that another's lists leave unused, so the
 * caches together stay within PROFMALLOC_TCACHE_BYTES plus the 64 KiB floor
 * each thread is granted when the pool is empty.  Taking used budget (the
 * victim shrinking at a slow path it never reaches while asleep) let them
 * reach SLEEPERS x 1 MiB. */
enum { SLEEPERS = 48 };
typedef struct {
    sem_t grown, wake;
    size_t capacity;
} sleeper_t;

static void *sleeper_thread(void *arg)
{
    sleeper_t *r = arg;
    for (int round = 0; round < 20; round++) cycle_big_blocks();
    r->capacity = pm_tls.capacity;
    sem_post(&r->grown);
    sem_wait(&r->wake);
    return NULL;
}

static void test_tcache_pool_bounds_sleepers(void **state)
{
    (void)state;
    sleeper_t *r = calloc(SLEEPERS, sizeof *r);
    pthread_t th[SLEEPERS];
    assert_non_null(r);
    /* the pool as a user sets it: unset, it grows with the threads
     * (test_tcache_pool_grows_with_threads) */
    pm_options.tcache_bytes_set = 1;
    size_t total = 0, max = 0;
    for (int i = 0; i < SLEEPERS; i++) {
        sem_init(&r[i].grown, 0, 0);
        sem_init(&r[i].wake, 0, 0);
        assert_int_equal(pthread_create(&th[i], NULL, sleeper_thread, &r[i]), 0);
        while (sem_wait(&r[i].grown) != 0) {
        }
        total += r[i].capacity;
        if (r[i].capacity > max) max = r[i].capacity;
    }
    for (int i = 0; i < SLEEPERS; i++) sem_post(&r[i].wake);
    for (int i = 0; i < SLEEPERS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < SLEEPERS; i++) {
        sem_destroy(&r[i].grown);
        sem_destroy(&r[i].wake);
    }
    free(r);
    pm_options.tcache_bytes_set = 0;
    /* the first threads reached the per-thread cap, so the pool was spent */
    assert_true(max > ((size_t)1 << 20) / 2);
    assert_true((size_t)SLEEPERS * max > pm_options.tcache_bytes);
    if (total > pm_options.tcache_bytes + (size_t)SLEEPERS * 64 * 1024)
        fail_msg("%d sleeping threads cache %zu bytes, over the pool of %zu", SLEEPERS, total,
                 (size_t)pm_options.tcache_bytes);
}



/* A thread's first free of a block under a cache line goes on to the
 * central list (its first malloc then refills, and can own a line); its
 * second is kept, as every free of a larger class is from the first. */
typedef struct {
    void *tiny[2], *big;
    uint32_t len_after[3], max_after[3];
} tiny_free_t;

static void *tiny_free_thread(void *arg)
{
    tiny_free_t *r = arg;
    become_active();
    unsigned tiny = pm_sizeclass_of(16), big = pm_sizeclass_of(64);
    for (int i = 0; i < 2; i++) {
        pm_free(r->tiny[i]);
        r->len_after[i] = pm_tls.list[tiny].len;
        r->max_after[i] = pm_tls.list[tiny].max_len;
    }
    pm_free(r->big);
    r->len_after[2] = pm_tls.list[big].len;
    r->max_after[2] = pm_tls.list[big].max_len;
    return NULL;
}

static void test_tcache_first_tiny_free_passes(void **state)
{
    (void)state;
    tiny_free_t r = {{pm_malloc(16), pm_malloc(16)}, pm_malloc(64), {0}, {0}};
    run_thread(tiny_free_thread, &r);
    assert_int_equal(r.len_after[0], 0);
    assert_int_equal(r.max_after[0], 0);
    assert_int_equal(r.len_after[1], 1);
    assert_true(r.max_after[1] >= 1);
    assert_int_equal(r.len_after[2], 1);
}

/* A first refill's chain of blocks under a cache line starts with a block
 * whose lines hold only blocks of the chain: one after a block whose line
 * mate is elsewhere; unchanged where no block qualifies; the same blocks
 * linked either way (pm_tcache_own_line_first, for 16, 32 and 48 B). */
static int addr_cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static int in_set(const uintptr_t *v, size_t n, uintptr_t a)
{
    return bsearch(&a, v, n, sizeof *v, addr_cmp) != NULL;
}

static void *link_all(uintptr_t *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) pm_link_set((void *)v[i], i + 1 < n ? (void *)v[i + 1] : NULL);
    return (void *)v[0];
}

static void test_tcache_own_line_first(void **state)
{
    (void)state;
    enum { N = 512 };
    static uintptr_t all[N];
    static const size_t sizes[] = {16, 32, 48};
    for (size_t z = 0; z < PM_ARRAY_LEN(sizes); z++) {
        size_t size = sizes[z];
        unsigned cls = pm_sizeclass_of(size);
        assert_int_equal(pm_class_size[cls], size);
        uint32_t n = 0;
        for (void *p = get_full(cls, N); p; p = pm_link_get(p)) all[n++] = (uintptr_t)p;
        assert_int_equal(n, N);
        qsort(all, N, sizeof *all, addr_cmp);
        /* a line-aligned block a, held here with the block before it and
         * every block that meets a's line, all from one span */
        uint32_t mates = (uint32_t)((64 + size - 1) / size);
        uintptr_t a = 0;
        for (uint32_t i = 1; i < N && !a; i++) {
            uintptr_t c = all[i];
            if (c & 63 || !in_set(all, N, c - size)) continue;
            if (pm_pagemap_span((c - size) >> PM_PAGE_SHIFT) != pm_pagemap_span(c >> PM_PAGE_SHIFT)) continue;
            uint32_t k = 1;
            while (k < mates && in_set(all, N, c + k * size) &&
                   pm_pagemap_span((c + k * size) >> PM_PAGE_SHIFT) == pm_pagemap_span(c >> PM_PAGE_SHIFT))
                k++;
            if (k == mates) a = c;
        }
        assert_true(a != 0);
        /* a - size first: its line's other blocks are not in the chain */
        uintptr_t chain[8];
        uint32_t len = 0;
        chain[len++] = a - size;
        for (uint32_t k = 0; k < mates; k++) chain[len++] = a + k * size;
        void *head = pm_tcache_own_line_first(link_all(chain, len), len, size);
        assert_ptr_equal(head, (void *)a);
        uintptr_t want[8] = {a, a - size};
        for (uint32_t k = 1; k < mates; k++) want[k + 1] = a + k * size;
        uint32_t seen = 0;
        for (void *p = head; p; p = pm_link_get(p), seen++) {
            assert_true(seen < len);
            assert_true((uintptr_t)p == want[seen]);
        }
        assert_int_equal(seen, len);
        /* without a, no block's lines are all in the chain */
        uintptr_t gap[2] = {a - size, a + size};
        head = pm_tcache_own_line_first(link_all(gap, 2), 2, size);
        assert_ptr_equal(head, (void *)(a - size));
        assert_ptr_equal(pm_link_get(head), (void *)(a + size));
        assert_null(pm_link_get((void *)(a + size)));
        /* back to the central list in batches */
        for (uint32_t i = 0; i < N;) {
            uint32_t k = N - i < pm_class_batch[cls] ? N - i : pm_class_batch[cls];
            pm_central_put(cls, link_all(all + i, k), k);
            i += k;
        }
    }
}

/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest tcache[] = {
        cmocka_unit_test(test_tcache_fresh_thread_and_slow_start),
        cmocka_unit_test(test_tcache_big_class_starts_single),
        cmocka_unit_test(test_tcache_len_within_max_len),
        cmocka_unit_test(test_tcache_registration_in_last_destructor_round),
        cmocka_unit_test(test_tcache_consumer_keeps_newest),
        cmocka_unit_test(test_tcache_exit_flushes),
        cmocka_unit_test(test_tcache_dead_thread),
        cmocka_unit_test(test_tcache_budget_invariant),
        cmocka_unit_test(test_tcache_crowd_steals_bounded),
        cmocka_unit_test(test_tcache_thread_cap),
        cmocka_unit_test(test_tcache_pool_grows_with_threads),
        cmocka_unit_test(test_tcache_small_classes_capped),
        cmocka_unit_test(test_tcache_round_trips_raise_small_ceiling),
        cmocka_unit_test(test_tcache_moves_to_new_size),
        cmocka_unit_test(test_tcache_idle_lists_shrink),
        cmocka_unit_test(test_tcache_idle_lists_shrink_through_malloc),
        cmocka_unit_test(test_tcache_pool_bounds_sleepers),
        cmocka_unit_test(test_tcache_own_line_first),
        cmocka_unit_test(test_tcache_first_tiny_free_passes),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("tcache", tcache, NULL, NULL);
    return failed ? 1 : 0;
}
