/* test_stress.c — multi-threaded stress of the malloc API.
 *
 *   cross_thread        N threads allocate random sizes, fill them with a
 *                       pattern of (thread, seq), pass a share to the other
 *                       threads through locked rings; receivers verify and
 *                       free (or realloc, then free)
 *   many_short_threads  5000 short-lived threads allocate and free, leaving
 *                       blocks for the main thread; memory stays bounded
 *   profiler_metadata_bounded  a steady random-size malloc/free loop does
 *                       not grow the metadata without bound
 *   fork_under_load     4 threads hammer malloc/free while the main thread
 *                       forks 50 times; every child allocates (also from a
 *                       new thread) and exits 0 before its alarm
 *   thread_exit_blocks  a thread exits holding blocks that other threads
 *                       verify, realloc and free later
 *   tls_destructors     pthread_key destructors that free, malloc and re-arm
 *                       themselves after the allocator's own thread-exit
 *                       work, including a thread whose first allocation is
 *                       in a destructor
 *
 * profmalloc-specific checks (exact statistics) are made when
 * profmalloc_get_stats is found with dlsym; the linked build, or
 * PM_TEST_REQUIRE_PROFMALLOC=1, makes its absence a failure.  Everything
 * else also passes on glibc alone. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "profmalloc.h"

typedef int (*get_stats_fn)(profmalloc_stats_t *);
static get_stats_fn pm_stats_fn;
static int require_pm;

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x | 1;
}

/* Fills n bytes of a 16-byte aligned block with a pattern derived from seed:
 * the little-endian bytes of words, so any prefix of a fill is checkable. */
static void pfill(void *p, size_t n, uint64_t seed)
{
    uint64_t *w = p;
    size_t nw = n / 8;
    for (size_t i = 0; i < nw; i++) w[i] = seed ^ (i * 0x9E3779B97F4A7C15ull);
    unsigned char *c = p;
    uint64_t last = seed ^ (nw * 0x9E3779B97F4A7C15ull);
    for (size_t i = nw * 8; i < n; i++) c[i] = (unsigned char)(last >> ((i & 7) * 8));
}

/* 1 when the first n bytes still hold the pattern of seed. */
static int pcheck(const void *p, size_t n, uint64_t seed)
{
    const uint64_t *w = p;
    size_t nw = n / 8;
    for (size_t i = 0; i < nw; i++)
        if (w[i] != (seed ^ (i * 0x9E3779B97F4A7C15ull))) return 0;
    const unsigned char *c = p;
    uint64_t last = seed ^ (nw * 0x9E3779B97F4A7C15ull);
    for (size_t i = nw * 8; i < n; i++)
        if (c[i] != (unsigned char)(last >> ((i & 7) * 8))) return 0;
    return 1;
}

static _Atomic long errors;
static char first_error[256];
static pthread_mutex_t error_mu = PTHREAD_MUTEX_INITIALIZER;

/* Records a failure seen in a worker thread (cmocka asserts are for the main
 * thread only). */
static void report(const char *fmt, ...)
{
    if (atomic_fetch_add(&errors, 1) == 0) {
        pthread_mutex_lock(&error_mu);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_error, sizeof first_error, fmt, ap);
        va_end(ap);
        pthread_mutex_unlock(&error_mu);
    }
}

static void reset_errors(void)
{
    atomic_store(&errors, 0);
    first_error[0] = 0;
}

static void assert_no_worker_errors(void)
{
    long e = atomic_load(&errors);
    if (e) fail_msg("%ld error(s) in worker threads; first: %s", e, first_error);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static profmalloc_stats_t stats(void)
{
    profmalloc_stats_t s;
    memset(&s, 0, sizeof s);
    if (pm_stats_fn && pm_stats_fn(&s) != 0) report("profmalloc_get_stats failed");
    return s;
}

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, res = 0;
    if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
    fclose(f);
    return res * (size_t)sysconf(_SC_PAGESIZE);
}

/* in_use must come back to its value before a test once everything the test
 * allocated is freed (slack: glibc's own thread bookkeeping, cmocka). */
static void assert_in_use_back(uint64_t before, const char *what)
{
    if (!pm_stats_fn) return;
    uint64_t after = stats().in_use;
    if (after > before + MiB)
        fail_msg("%s: in_use grew from %llu to %llu bytes after freeing everything", what,
                 (unsigned long long)before, (unsigned long long)after);
}

/* Random size: mostly small, some 1 KiB .. 1 MiB. */
static size_t random_size(uint64_t *rng)
{
    uint64_t r = rng_next(rng);
    unsigned pick = (unsigned)(r % 1000);
    r >>= 10;
    if (pick < 700) return (size_t)(r % 256);               /* 0..255 */
    if (pick < 900) return 256 + (size_t)(r % (768));       /* ..1 KiB */
    if (pick < 985) return KiB + (size_t)(r % (63 * KiB));  /* ..64 KiB */
    if (pick < 996) return 64 * KiB + (size_t)(r % (256 * KiB)); /* ..320 KiB */
    return 256 * KiB + (size_t)(r % (768 * KiB));          /* ..1 MiB */
}

/* ---- (a) cross-thread frees with content checks --------------------------- */

#define XT_THREADS 6
#define XT_RING 256
#define XT_SLOTS 256
#define XT_SECONDS 2.0

struct xmsg {
    unsigned char *p;
    size_t n;
    uint64_t seed;
};

static struct mailbox {
    pthread_mutex_t mu;
    size_t head, count;
    struct xmsg ring[XT_RING];
} boxes[XT_THREADS];

static double xt_deadline;
static _Atomic long xt_ops, xt_sent, xt_received;

static int mailbox_push(int to, struct xmsg m)
{
    struct mailbox *b = &boxes[to];
    pthread_mutex_lock(&b->mu);
    int ok = b->count < XT_RING;
    if (ok) {
        b->ring[(b->head + b->count) % XT_RING] = m;
        b->count++;
    }
    pthread_mutex_unlock(&b->mu);
    return ok;
}

static size_t mailbox_pop_all(int me, struct xmsg *out)
{
    struct mailbox *b = &boxes[me];
    pthread_mutex_lock(&b->mu);
    size_t n = b->count;
    for (size_t i = 0; i < n; i++) out[i] = b->ring[(b->head + i) % XT_RING];
    b->head = (b->head + n) % XT_RING;
    b->count = 0;
    pthread_mutex_unlock(&b->mu);
    return n;
}

static void verify_and_free(struct xmsg m, const char *where)
{
    if (!pcheck(m.p, m.n, m.seed))
        report("%s: block %p of %zu bytes (seed %llx) corrupted", where, (void *)m.p, m.n,
               (unsigned long long)m.seed);
    if (malloc_usable_size(m.p) < m.n)
        report("%s: usable size %zu < %zu", where, malloc_usable_size(m.p), m.n);
    free(m.p);
}

static void *xt_worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t rng = mix((uint64_t)me, 12345);
    struct xmsg slots[XT_SLOTS];
    memset(slots, 0, sizeof slots);
    static __thread struct xmsg inbox[XT_RING];
    uint64_t seq = 0;
    long ops = 0;
    while (1) {
        if ((ops & 63) == 0 && now_s() > xt_deadline) break;
        ops++;
        size_t got = mailbox_pop_all(me, inbox);
        for (size_t i = 0; i < got; i++) verify_and_free(inbox[i], "receiver");
        atomic_fetch_add(&xt_received, (long)got);

        uint64_t r = rng_next(&rng);
        size_t n = random_size(&rng);
        uint64_t seed = mix((uint64_t)me << 40 | seq, 7);
        seq++;
        unsigned char *p;
        if (r % 10 == 0) {
            p = calloc(1, n);
            if (p) {
                for (size_t i = 0; i < n; i++)
                    if (p[i]) {
                        report("calloc(1, %zu) byte %zu not zero", n, i);
                        break;
                    }
            }
        } else {
            p = malloc(n);
        }
        if (!p) {
            report("allocation of %zu failed", n);
            continue;
        }
        if ((uintptr_t)p % 16) report("block %p not 16-byte aligned", (void *)p);
        pfill(p, n, seed);
        struct xmsg m = {p, n, seed};
        if ((r >> 8) % 3 == 0) {
            int to = (int)((r >> 16) % (XT_THREADS - 1));
            if (to >= me) to++;
            if (mailbox_push(to, m)) {
                atomic_fetch_add(&xt_sent, 1);
                continue;
            }
        }
        size_t s = (size_t)((r >> 24) % XT_SLOTS);
        if (slots[s].p) {
            if ((r >> 40) % 4 == 0) {
                /* realloc the old block to a new random size, check the prefix */
                struct xmsg o = slots[s];
                size_t nn = random_size(&rng);
                unsigned char *q = realloc(o.p, nn);
                if (!q && nn) {
                    report("realloc(%zu -> %zu) failed", o.n, nn);
                } else if (q) {
                    if (!pcheck(q, o.n < nn ? o.n : nn, o.seed))
                        report("realloc %zu -> %zu lost contents", o.n, nn);
                    free(q);
                }
            } else {
                verify_and_free(slots[s], "owner");
            }
        }
        slots[s] = m;
    }
    for (size_t s = 0; s < XT_SLOTS; s++)
        if (slots[s].p) verify_and_free(slots[s], "owner at end");
    atomic_fetch_add(&xt_ops, ops);
    return NULL;
}

static void test_cross_thread(void **state)
{
    (void)state;
    reset_errors();
    uint64_t in_use0 = stats().in_use;
    for (int i = 0; i < XT_THREADS; i++) {
        pthread_mutex_init(&boxes[i].mu, NULL);
        boxes[i].head = boxes[i].count = 0;
    }
    xt_deadline = now_s() + XT_SECONDS;
    pthread_t t[XT_THREADS];
    for (int i = 0; i < XT_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, xt_worker, (void *)(intptr_t)i), 0);
    for (int i = 0; i < XT_THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    struct xmsg *rest = malloc(XT_RING * sizeof *rest);
    assert_non_null(rest);
    long left = 0;
    for (int i = 0; i < XT_THREADS; i++) {
        size_t n = mailbox_pop_all(i, rest);
        for (size_t k = 0; k < n; k++) verify_and_free(rest[k], "main drain");
        left += (long)n;
    }
    free(rest);
    print_message("    %ld operations, %ld blocks passed between threads\n",
                  atomic_load(&xt_ops), atomic_load(&xt_sent));
    assert_no_worker_errors();
    assert_int_equal(atomic_load(&xt_received) + left, atomic_load(&xt_sent));
    assert_true(atomic_load(&xt_sent) > 1000);
    assert_in_use_back(in_use0, "cross_thread");
}

/* ---- (b) thousands of short-lived threads -------------------------------- */

#define ST_THREADS 5000
#define ST_BATCH 8
#define ST_LEFT 3

struct st_arg {
    int idx;
    struct xmsg left[ST_LEFT];
};

static void *st_worker(void *v)
{
    struct st_arg *a = v;
    uint64_t rng = mix((uint64_t)a->idx, 99);
    enum { NB = 56 };
    struct xmsg b[NB];
    for (int i = 0; i < NB; i++) {
        size_t n;
        if (i < 46) n = 16 + (size_t)(rng_next(&rng) % 2048);
        else if (i < 55) n = 2 * KiB + (size_t)(rng_next(&rng) % (30 * KiB));
        else n = 64 * KiB + (size_t)(rng_next(&rng) % (240 * KiB));
        b[i].n = n;
        b[i].seed = mix((uint64_t)a->idx, (uint64_t)i);
        b[i].p = malloc(n);
        if (!b[i].p) {
            report("short thread %d: malloc(%zu) failed", a->idx, n);
            return NULL;
        }
        pfill(b[i].p, n, b[i].seed);
    }
    /* leave one small, one medium and the big one to the main thread */
    a->left[0] = b[3];
    a->left[1] = b[50];
    a->left[2] = b[55];
    for (int i = 0; i < NB; i++) {
        if (i == 3 || i == 50 || i == 55) continue;
        verify_and_free(b[i], "short thread");
    }
    return NULL;
}

/* Memory of the allocator itself: mapped minus metadata when profmalloc is
 * active (the profiler's metadata has a test of its own), else RSS. */
static size_t memory_metric(size_t *total)
{
    if (pm_stats_fn) {
        profmalloc_stats_t s = stats();
        *total = (size_t)s.mapped;
        return (size_t)(s.mapped - s.metadata);
    }
    return *total = rss_bytes();
}

static void test_many_short_threads(void **state)
{
    (void)state;
    reset_errors();
    profmalloc_stats_t s0 = stats();
    size_t base_total, base = memory_metric(&base_total);
    size_t at[6] = {0}, at_total[6] = {0};
    struct st_arg args[ST_BATCH];
    pthread_t t[ST_BATCH];
    for (int done = 0; done < ST_THREADS; done += ST_BATCH) {
        for (int k = 0; k < ST_BATCH; k++) {
            memset(&args[k], 0, sizeof args[k]);
            args[k].idx = done + k;
            assert_int_equal(pthread_create(&t[k], NULL, st_worker, &args[k]), 0);
        }
        for (int k = 0; k < ST_BATCH; k++) {
            assert_int_equal(pthread_join(t[k], NULL), 0);
            for (int j = 0; j < ST_LEFT; j++)
                if (args[k].left[j].p) verify_and_free(args[k].left[j], "main after join");
        }
        int next = done + ST_BATCH;
        if (next % 1000 == 0) at[next / 1000] = memory_metric(&at_total[next / 1000]);
    }
    size_t final_total, final = memory_metric(&final_total);
    print_message("    %s: start %zu KiB, after 1000/2000/5000 threads %zu/%zu/%zu KiB\n",
                  pm_stats_fn ? "mapped-metadata" : "rss", base / KiB, at[1] / KiB, at[2] / KiB,
                  final / KiB);
    if (pm_stats_fn)
        print_message("    mapped with metadata: %zu -> %zu KiB\n", base_total / KiB,
                      final_total / KiB);
    assert_no_worker_errors();
    /* bounded: 5000 threads of about 400 KiB each must not pile up */
    if (final_total >= base_total + 64 * MiB)
        fail_msg("memory grew from %zu to %zu KiB over 5000 threads", base_total / KiB,
                 final_total / KiB);
    /* and no longer growing between the second and the last 1000 threads
     * (slack: caches that are still filling up to their bounds) */
    size_t slack = at[2] / 5 > 16 * MiB ? at[2] / 5 : 16 * MiB;
    if (final > at[2] + slack)
        fail_msg("memory grew from %zu to %zu KiB between threads 2000 and 5000", at[2] / KiB,
                 final / KiB);
    if (pm_stats_fn) {
        profmalloc_stats_t s1 = stats();
        /* the caches of exited threads are gone */
        if (s1.threads > s0.threads + 2)
            fail_msg("%llu live thread caches after all threads exited (before: %llu)",
                     (unsigned long long)s1.threads, (unsigned long long)s0.threads);
        /* their cached memory did not stay attached to dead threads */
        assert_true(s1.thread_cache < 64 * MiB);
        assert_in_use_back(s0.in_use, "many_short_threads");
    }
}

/* ---- profiler metadata stays bounded -------------------------------------- */

/* A steady workload (one live block at a time, random large sizes) must not
 * grow the allocator's metadata without bound: the heap profiler keeps its
 * sampled (stack, size) buckets, so it has to bound them. */
static void test_profiler_metadata_bounded(void **state)
{
    (void)state;
    if (!pm_stats_fn) skip();
    void (*set_rate)(size_t) = (void (*)(size_t))dlsym(RTLD_DEFAULT, "profmalloc_set_sample_rate");
    size_t (*get_rate)(void) = (size_t(*)(void))dlsym(RTLD_DEFAULT, "profmalloc_get_sample_rate");
    assert_non_null(set_rate);
    assert_non_null(get_rate);
    size_t old_rate = get_rate();
    set_rate(512 * KiB); /* the documented default */
    uint64_t rng = 77;
    for (int i = 0; i < 2000; i++) free(malloc(256 * KiB + (size_t)(rng_next(&rng) % (768 * KiB))));
    profmalloc_stats_t a = stats();
    enum { ITER = 30000 };
    for (int i = 0; i < ITER; i++) {
        size_t n = 256 * KiB + (size_t)(rng_next(&rng) % (768 * KiB));
        unsigned char *p = malloc(n);
        assert_non_null(p);
        p[0] = p[n - 1] = 1;
        free(p);
    }
    profmalloc_stats_t b = stats();
    set_rate(old_rate);
    print_message("    metadata %llu -> %llu KiB, mapped %llu -> %llu KiB over %d malloc/free\n",
                  (unsigned long long)a.metadata / KiB, (unsigned long long)b.metadata / KiB,
                  (unsigned long long)a.mapped / KiB, (unsigned long long)b.mapped / KiB, ITER);
    if (b.metadata > a.metadata + 8 * MiB)
        fail_msg("metadata grew by %llu KiB in a steady malloc/free loop (sampling at 512 KiB)",
                 (unsigned long long)(b.metadata - a.metadata) / KiB);
    assert_true(b.mapped <= a.mapped + 16 * MiB);
}

/* ---- (c) fork while other threads allocate -------------------------------- */

#define FK_HAMMERS 4
#define FK_FORKS 50

static atomic_int fk_stop;
static _Atomic long fk_ops;

static void *fk_hammer(void *arg)
{
    uint64_t rng = mix((uint64_t)(intptr_t)arg, 555);
    enum { NS = 64 };
    struct xmsg s[NS];
    memset(s, 0, sizeof s);
    long ops = 0;
    while (!atomic_load_explicit(&fk_stop, memory_order_relaxed)) {
        int i = (int)(rng_next(&rng) % NS);
        if (s[i].p) verify_and_free(s[i], "hammer");
        size_t n = random_size(&rng);
        if (n > 512 * KiB) n /= 4;
        s[i].p = malloc(n);
        s[i].n = n;
        s[i].seed = rng_next(&rng) | 1;
        if (!s[i].p) {
            report("hammer malloc(%zu) failed", n);
            break;
        }
        pfill(s[i].p, n < 256 ? n : 256, s[i].seed);
        s[i].n = n < 256 ? n : 256;
        if (ops % 16 == 0) {
            /* also the aligned and resizing paths */
            void *q = NULL;
            if (posix_memalign(&q, 4096, 5000) == 0) free(q);
            void *r = realloc(NULL, 100);
            r = realloc(r, 70000);
            free(r);
        }
        ops++;
    }
    for (int i = 0; i < NS; i++)
        if (s[i].p) verify_and_free(s[i], "hammer end");
    atomic_fetch_add(&fk_ops, ops);
    return NULL;
}

static void *child_thread(void *arg)
{
    (void)arg;
    void *p[200];
    for (int i = 0; i < 200; i++) {
        p[i] = malloc((size_t)(i * 37 % 3000) + 1);
        if (!p[i]) return (void *)1;
        memset(p[i], i, (size_t)(i * 37 % 3000) + 1);
    }
    for (int i = 0; i < 200; i++) free(p[i]);
    void *big = malloc(MiB);
    if (!big) return (void *)1;
    memset(big, 1, MiB);
    free(big);
    return NULL;
}

/* Runs in the forked child; returns the exit code (0 = all good). */
static int child_work(struct xmsg inherited)
{
    if (!pcheck(inherited.p, inherited.n, inherited.seed)) return 10;
    free(inherited.p);
    void *small[1000];
    for (int i = 0; i < 1000; i++) {
        size_t n = (size_t)(i % 97) * 11 + 1;
        small[i] = malloc(n);
        if (!small[i]) return 11;
        pfill(small[i], n, (uint64_t)i);
    }
    for (int i = 0; i < 1000; i++)
        if (!pcheck(small[i], (size_t)(i % 97) * 11 + 1, (uint64_t)i)) return 12;
    for (int i = 0; i < 1000; i++) free(small[i]);
    for (int i = 0; i < 4; i++) {
        size_t n = (size_t)(i + 1) * 700 * KiB;
        unsigned char *b = malloc(n);
        if (!b) return 13;
        memset(b, 0x5a, n);
        b = realloc(b, n * 2);
        if (!b || b[n - 1] != 0x5a) return 14;
        free(b);
    }
    unsigned char *c = calloc(1000, 1000);
    if (!c) return 15;
    for (size_t i = 0; i < 1000000; i += 4096)
        if (c[i]) return 16;
    free(c);
    if (pm_stats_fn) {
        profmalloc_stats_t a, b;
        if (pm_stats_fn(&a) != 0) return 17;
        void *x = malloc(MiB);
        if (pm_stats_fn(&b) != 0) return 17;
        if (b.in_use < a.in_use + MiB) return 18;
        free(x);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread, NULL) != 0) return 19;
    void *ret = (void *)2;
    if (pthread_join(t, &ret) != 0 || ret != NULL) return 20;
    return 0;
}

static void test_fork_under_load(void **state)
{
    (void)state;
    reset_errors();
    uint64_t in_use0 = stats().in_use;
    atomic_store(&fk_stop, 0);
    pthread_t t[FK_HAMMERS];
    for (int i = 0; i < FK_HAMMERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, fk_hammer, (void *)(intptr_t)i), 0);
    int bad = 0, first_status = 0;
    for (int k = 0; k < FK_FORKS; k++) {
        struct xmsg inh;
        inh.n = 100 + (size_t)k * 5000;
        inh.seed = mix((uint64_t)k, 3);
        inh.p = malloc(inh.n);
        assert_non_null(inh.p);
        pfill(inh.p, inh.n, inh.seed);
        usleep(2000); /* let the hammers get into the allocator */
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(10); /* a deadlocked child dies of SIGALRM: a failure, not a hang */
            _exit(child_work(inh));
        }
        free(inh.p);
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            if (!bad) first_status = st;
            bad++;
        }
    }
    atomic_store(&fk_stop, 1);
    for (int i = 0; i < FK_HAMMERS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    print_message("    %d forks, hammers did %ld operations\n", FK_FORKS, atomic_load(&fk_ops));
    if (bad)
        fail_msg("%d of %d children failed; first: %s %d", bad, FK_FORKS,
                 WIFSIGNALED(first_status) ? "killed by signal" : "exit code",
                 WIFSIGNALED(first_status) ? WTERMSIG(first_status) : WEXITSTATUS(first_status));
    assert_no_worker_errors();
    assert_true(atomic_load(&fk_ops) > 1000);
    assert_in_use_back(in_use0, "fork_under_load");
}

/* ---- (d) blocks outliving their thread; TLS destructors ------------------- */

#define TE_BLOCKS 3000
static struct xmsg te_blocks[TE_BLOCKS];

static void *te_producer(void *arg)
{
    (void)arg;
    uint64_t rng = 42;
    for (int i = 0; i < TE_BLOCKS; i++) {
        size_t n = i % 100 == 0 ? 300 * KiB + (size_t)i : (size_t)(rng_next(&rng) % 4096);
        te_blocks[i].n = n;
        te_blocks[i].seed = mix((uint64_t)i, 8);
        te_blocks[i].p = malloc(n);
        if (!te_blocks[i].p) {
            report("producer malloc failed");
            return NULL;
        }
        pfill(te_blocks[i].p, n, te_blocks[i].seed);
    }
    return NULL; /* exits holding all of them */
}

static void *te_consumer(void *arg)
{
    int part = (int)(intptr_t)arg;
    for (int i = part; i < TE_BLOCKS; i += 2) {
        struct xmsg m = te_blocks[i];
        if (i % 6 < 2) {
            /* realloc a dead thread's block first */
            unsigned char *q = realloc(m.p, m.n + 1000);
            if (!q) {
                report("realloc of orphan block failed");
                continue;
            }
            if (!pcheck(q, m.n, m.seed)) report("orphan block %d changed by realloc", i);
            free(q);
        } else {
            verify_and_free(m, "consumer of orphan blocks");
        }
    }
    return NULL;
}

static void test_thread_exit_blocks(void **state)
{
    (void)state;
    reset_errors();
    uint64_t in_use0 = stats().in_use;
    for (int round = 0; round < 3; round++) {
        pthread_t p, c[2];
        assert_int_equal(pthread_create(&p, NULL, te_producer, NULL), 0);
        assert_int_equal(pthread_join(p, NULL), 0);
        assert_no_worker_errors();
        /* more threads come and go before the orphans are freed */
        for (int k = 0; k < 4; k++) {
            pthread_t x;
            assert_int_equal(pthread_create(&x, NULL, child_thread, NULL), 0);
            assert_int_equal(pthread_join(x, NULL), 0);
        }
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_create(&c[k], NULL, te_consumer, (void *)(intptr_t)k), 0);
        for (int k = 0; k < 2; k++) assert_int_equal(pthread_join(c[k], NULL), 0);
        assert_no_worker_errors();
    }
    /* the freed memory is reusable and calloc still zeroes it */
    for (int i = 0; i < 2000; i++) {
        size_t n = (size_t)(i * 13 % 4096) + 1;
        unsigned char *z = calloc(1, n);
        assert_non_null(z);
        for (size_t k = 0; k < n; k++)
            if (z[k]) fail_msg("calloc(1, %zu) byte %zu is %d", n, k, z[k]);
        free(z);
    }
    assert_in_use_back(in_use0, "thread_exit_blocks");
}

#define TD_THREADS 200 /* of each kind */
#define TD_ROUNDS 3

static pthread_key_t td_key;
static _Atomic long td_calls;
static char td_dummy[TD_THREADS]; /* key values of threads that never malloc */
static struct xmsg td_left[2 * TD_THREADS];

struct td_state {
    int idx, round;
    struct xmsg blk;
};

static void td_churn(int idx, int round)
{
    for (int i = 0; i < 40; i++) {
        size_t n = (size_t)((idx * 31 + i * 97 + round) % 5000) + 1;
        if (i == 39) n = 300 * KiB;
        uint64_t seed = mix((uint64_t)idx << 8 | (uint64_t)round, (uint64_t)i);
        void *p = malloc(n);
        if (!p) {
            report("malloc(%zu) in TLS destructor failed", n);
            return;
        }
        pfill(p, n, seed);
        void *q = calloc(1, 64);
        if (!q || ((unsigned char *)q)[63]) report("calloc in TLS destructor");
        free(q);
        if (!pcheck(p, n, seed)) report("block corrupted in TLS destructor");
        free(p);
    }
}

static void td_destructor(void *v)
{
    struct td_state *s;
    if ((char *)v >= td_dummy && (char *)v < td_dummy + TD_THREADS) {
        /* this thread never allocated: its first malloc is here */
        s = malloc(sizeof *s);
        if (!s) {
            report("first malloc in a TLS destructor failed");
            return;
        }
        s->idx = TD_THREADS + (int)((char *)v - td_dummy);
        s->round = 0;
        s->blk.p = NULL;
    } else {
        s = v;
    }
    if (s->blk.p) verify_and_free(s->blk, "TLS destructor");
    s->blk.p = NULL;
    td_churn(s->idx, s->round);
    s->round++;
    atomic_fetch_add(&td_calls, 1);
    size_t n = (size_t)(s->idx * 53 % 3000) + 8 + (s->round == 2 ? 400 * KiB : 0);
    struct xmsg m = {malloc(n), n, mix((uint64_t)s->idx, (uint64_t)s->round + 100)};
    if (!m.p) {
        report("malloc in TLS destructor failed");
        return;
    }
    pfill(m.p, n, m.seed);
    if (s->round < TD_ROUNDS) {
        s->blk = m;
        /* re-arm: called again in the next destructor pass, after every other
         * key's destructor (the allocator's included) has run */
        if (pthread_setspecific(td_key, s) != 0) report("pthread_setspecific in destructor");
    } else {
        td_left[s->idx] = m; /* freed by the main thread after join */
        free(s);
    }
}

static void *td_thread_alloc(void *arg)
{
    int idx = (int)(intptr_t)arg;
    void *warm = malloc(100); /* make sure this thread has a cache */
    free(warm);
    struct td_state *s = malloc(sizeof *s);
    if (!s) {
        report("malloc failed");
        return NULL;
    }
    s->idx = idx;
    s->round = 0;
    s->blk.n = 1000;
    s->blk.seed = mix((uint64_t)idx, 1);
    s->blk.p = malloc(1000);
    if (!s->blk.p) return NULL;
    pfill(s->blk.p, 1000, s->blk.seed);
    pthread_setspecific(td_key, s);
    return NULL;
}

static void *td_thread_noalloc(void *arg)
{
    int idx = (int)(intptr_t)arg;
    pthread_setspecific(td_key, &td_dummy[idx]);
    return NULL;
}

static void test_tls_destructors(void **state)
{
    (void)state;
    reset_errors();
    profmalloc_stats_t s0 = stats();
    atomic_store(&td_calls, 0);
    memset(td_left, 0, sizeof td_left);
    assert_int_equal(pthread_key_create(&td_key, td_destructor), 0);
    for (int i = 0; i < TD_THREADS; i += 4) {
        pthread_t t[8];
        for (int k = 0; k < 4; k++) {
            assert_int_equal(pthread_create(&t[k], NULL, td_thread_alloc, (void *)(intptr_t)(i + k)), 0);
            assert_int_equal(pthread_create(&t[4 + k], NULL, td_thread_noalloc, (void *)(intptr_t)(i + k)), 0);
        }
        for (int k = 0; k < 8; k++) assert_int_equal(pthread_join(t[k], NULL), 0);
    }
    pthread_key_delete(td_key);
    assert_no_worker_errors();
    assert_int_equal(atomic_load(&td_calls), 2L * TD_THREADS * TD_ROUNDS);
    for (int i = 0; i < 2 * TD_THREADS; i++) {
        assert_non_null(td_left[i].p);
        assert_true(pcheck(td_left[i].p, td_left[i].n, td_left[i].seed));
        free(td_left[i].p);
    }
    if (pm_stats_fn) {
        profmalloc_stats_t s1 = stats();
        if (s1.threads > s0.threads + 2)
            fail_msg("%llu live thread caches after the threads exited (before: %llu)",
                     (unsigned long long)s1.threads, (unsigned long long)s0.threads);
        assert_in_use_back(s0.in_use, "tls_destructors");
    }
}

/* ------------------------------------------------------------------------ */

static void test_profmalloc_active(void **state)
{
    (void)state;
    if (!pm_stats_fn) {
        if (require_pm) fail_msg("profmalloc_get_stats not found: profmalloc is not the active allocator");
        skip();
    }
    uint64_t a = stats().in_use;
    void *p = malloc(MiB);
    assert_non_null(p);
    assert_true(stats().in_use >= a + MiB);
    free(p);
}

int main(void)
{
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl);
    pm_stats_fn = (get_stats_fn)dlsym(RTLD_DEFAULT, "profmalloc_get_stats");
    const char *req = getenv("PM_TEST_REQUIRE_PROFMALLOC");
    require_pm = req && *req && strcmp(req, "0") != 0;
#ifdef PM_TEST_LINKED
    require_pm = 1;
#endif
    printf("test_stress: profmalloc %s%s\n", pm_stats_fn ? "active" : "NOT active",
           require_pm ? " (required)" : "");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profmalloc_active),
        cmocka_unit_test(test_many_short_threads),
        cmocka_unit_test(test_profiler_metadata_bounded),
        cmocka_unit_test(test_cross_thread),
        cmocka_unit_test(test_fork_under_load),
        cmocka_unit_test(test_thread_exit_blocks),
        cmocka_unit_test(test_tls_destructors),
    };
    /* PM_TEST_FILTER / PM_TEST_SKIP: cmocka name patterns (* and ?) */
    if (getenv("PM_TEST_FILTER")) cmocka_set_test_filter(getenv("PM_TEST_FILTER"));
    if (getenv("PM_TEST_SKIP")) cmocka_set_skip_filter(getenv("PM_TEST_SKIP"));
    return cmocka_run_group_tests_name("profmalloc stress", tests, NULL, NULL);
}
