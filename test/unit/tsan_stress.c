/* tsan_stress.c — threads against the allocator core through pm_*, for
 * ThreadSanitizer (make check-tsan: the core built with -fsanitize=thread,
 * test/unit/tsan.supp naming the reads made without a lock on purpose).
 * The process itself runs on the C library's malloc, as the unit tests do.
 * Usage: tsan_stress MODE [iterations]; modes: prodcons (blocks freed by
 * other threads, through a queue and through atomic slots), churn (short
 * threads whose blocks outlive them), realloc (growth through every class
 * into large blocks and back), trim, sample1, samplesmall, dump, fork,
 * large, all.  Fails on a race (TSan's exit code), on a forked child that
 * does not exit 0, or when blocks are left in use at the end. */
#include "pm_internal.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <malloc.h>

static int ITERS = 20000;
static atomic_int stop;
static atomic_int failed;

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

/* 60 % up to 256 B, 25 % up to 4 KiB, 12 % up to 260 KiB, 3 % large */
static size_t rsize(unsigned *s)
{
    unsigned r = rnd(s) % 100;
    if (r < 60) return 1 + rnd(s) % 256;
    if (r < 85) return 257 + rnd(s) % 4000;
    if (r < 97) return 4097 + rnd(s) % (256 << 10);
    return (256 << 10) + 1 + rnd(s) % (1 << 20);
}

static void touch(void *p, size_t n)
{
    if (p) {
        ((volatile char *)p)[0] = 1;
        ((volatile char *)p)[n - 1] = 2;
    }
}

/* n threads running fn, the i-th given seed + i */
static void start(pthread_t *t, int n, void *(*fn)(void *), unsigned seed)
{
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, fn, (void *)(uintptr_t)(seed + (unsigned)i));
}

static void join(pthread_t *t, int n)
{
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

/* ---- a mutex-protected queue for cross-thread frees ---- */
#define QCAP 4096
static void *q[QCAP];
static int qh, qt, qn;
static pthread_mutex_t qm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qc = PTHREAD_COND_INITIALIZER;

static void qput(void *p)
{
    pthread_mutex_lock(&qm);
    while (qn == QCAP) {
        pthread_mutex_unlock(&qm);
        sched_yield();
        pthread_mutex_lock(&qm);
    }
    q[qt] = p;
    qt = (qt + 1) % QCAP;
    qn++;
    pthread_cond_signal(&qc);
    pthread_mutex_unlock(&qm);
}

/* the next block, or NULL: when the queue is empty and, with wait, stop is set */
static void *qget(int wait)
{
    pthread_mutex_lock(&qm);
    void *p = NULL;
    while (!qn && wait && !atomic_load(&stop)) pthread_cond_wait(&qc, &qm);
    if (qn) {
        p = q[qh];
        qh = (qh + 1) % QCAP;
        qn--;
    }
    pthread_mutex_unlock(&qm);
    return p;
}

static void stop_consumers(void)
{
    atomic_store(&stop, 1);
    pthread_mutex_lock(&qm);
    pthread_cond_broadcast(&qc);
    pthread_mutex_unlock(&qm);
}

/* ---- lock-free handoff via atomics: a block parked in a slot is freed by
 * whichever thread replaces it ---- */
#define SLOTS 256
static _Atomic(void *) slot[SLOTS];

static void hand_over(unsigned *s, void *p)
{
    pm_free(atomic_exchange_explicit(&slot[rnd(s) % SLOTS], p, memory_order_acq_rel));
}

static void drain_slots(void)
{
    for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL));
}

static void *producer(void *a)
{
    unsigned s = (unsigned)(uintptr_t)a;
    for (int i = 0; i < ITERS; i++) {
        size_t n = rsize(&s);
        void *p;
        switch (rnd(&s) % 4) {
        case 0: p = pm_malloc(n); break;
        case 1: p = pm_calloc(1, n); break;
        case 2: p = pm_memalign((size_t)16 << (rnd(&s) % 10), n); break;
        default: p = pm_realloc(pm_malloc(n / 2 + 1), n); break;
        }
        touch(p, n);
        if (rnd(&s) & 1) qput(p);
        else hand_over(&s, p);
        if (i % 7 == 0) pm_free(pm_malloc(rnd(&s) % 200));
    }
    return NULL;
}

static void *consumer(void *a)
{
    (void)a;
    void *p;
    while ((p = qget(1)) != NULL || !atomic_load(&stop)) pm_free(p);
    while ((p = qget(0)) != NULL) pm_free(p);
    return NULL;
}

static void run_prodcons(int np, int nc)
{
    pthread_t tp[8], tc[8];
    atomic_store(&stop, 0);
    start(tc, nc, consumer, 0);
    start(tp, np, producer, 5);
    join(tp, np);
    stop_consumers();
    join(tc, nc);
    drain_slots();
}

/* ---- many short-lived threads; blocks outlive their thread ---- */
static void *shortlived(void *a)
{
    unsigned s = (unsigned)(uintptr_t)a;
    void *keep[64];
    for (int i = 0; i < 64; i++) {
        size_t n = rsize(&s) % 5000 + 1;
        keep[i] = pm_malloc(n);
        touch(keep[i], n);
    }
    for (int i = 0; i < 64; i += 2) pm_free(keep[i]);
    for (int i = 1; i < 64; i += 2) hand_over(&s, keep[i]);
    return NULL;
}

static void run_churn(int rounds)
{
    for (int r = 0; r < rounds; r++) {
        pthread_t t[4];
        start(t, 4, shortlived, (unsigned)r * 4 + 1);
        join(t, 4);
    }
    drain_slots();
}

/* ---- realloc growth across classes into large blocks, and back ---- */
static void *grower(void *a)
{
    unsigned s = (unsigned)(uintptr_t)a;
    for (int i = 0; i < ITERS / 50; i++) {
        size_t n = 8;
        char *p = pm_malloc(n);
        memset(p, 'a', n);
        while (n < (size_t)(600 << 10)) {
            size_t m = n + n / 2 + rnd(&s) % 1000;
            p = pm_realloc(p, m);
            memset(p + n, 'b', m - n);
            n = m;
            (void)pm_usable_size(p);
            if (rnd(&s) % 8 == 0) { /* someone else frees it */
                hand_over(&s, p);
                p = pm_malloc(n);
                memset(p, 'c', n);
            }
        }
        while (n > 16) {
            n /= 3;
            p = pm_realloc(p, n);
        }
        pm_free(p);
    }
    return NULL;
}

/* ---- large blocks: realloc in place or moved, big alignments, calloc ---- */
static void *large_worker(void *a)
{
    unsigned s = (unsigned)(uintptr_t)a;
    for (int i = 0; i < ITERS / 100; i++) {
        size_t n = (256 << 10) + rnd(&s) % 100000;
        char *p = pm_calloc(1, n);
        if (p[n - 1]) abort();
        for (int k = 0; k < 6; k++) {
            size_t m = (rnd(&s) & 3) ? n * 2 : n / 2 + 1;
            p = pm_realloc(p, m);
            p[(m > n ? n : m) - 1] = 'x';
            n = m;
            (void)pm_usable_size(p);
        }
        void *al = pm_memalign((size_t)1 << (12 + rnd(&s) % 9), 1 + rnd(&s) % (600 << 10));
        touch(al, 1);
        hand_over(&s, al);
        pm_free(p);
    }
    return NULL;
}

/* ---- a background thread: trims, stats, dumps, sample-rate changes ---- */
static int bg_trim, bg_stats, bg_dump, bg_rate;
static atomic_int bg_done; /* its own: the consumers' stop ends a phase, not it */
static pthread_t bg;

static void *background(void *a)
{
    (void)a;
    int fd = open("/dev/null", O_WRONLY);
    unsigned s = 99;
    while (!atomic_load(&bg_done)) {
        if (bg_trim) {
            pm_malloc_trim(0);
            profmalloc_release_free_memory();
        }
        if (bg_stats) {
            profmalloc_stats_t st;
            profmalloc_get_stats(&st);
            (void)pm_mallinfo2();
            pm_malloc_stats();
        }
        if (bg_dump) profmalloc_dump_fd(fd, rnd(&s) & 1);
        if (bg_rate) profmalloc_set_sample_rate(rnd(&s) & 1 ? 1 : 512);
        pm_free(pm_malloc(rsize(&s)));
        usleep(200);
    }
    close(fd);
    return NULL;
}

static void bg_start(void)
{
    atomic_store(&bg_done, 0);
    pthread_create(&bg, NULL, background, NULL);
}

static void bg_stop(void)
{
    atomic_store(&bg_done, 1);
    pthread_join(bg, NULL);
}

/* growers and a producer/consumer pair beside the background thread */
static void run_mixed(void)
{
    pthread_t g[2];
    bg_start();
    start(g, 2, grower, 1);
    run_prodcons(2, 1);
    join(g, 2);
    bg_stop();
    drain_slots();
}

static void run_workers(void *(*fn)(void *), int n)
{
    pthread_t t[4];
    start(t, n, fn, 1);
    join(t, n);
    drain_slots();
}

/* ---- fork while threads allocate ---- */
static void run_fork(void)
{
    pthread_t t[2], c;
    atomic_store(&stop, 0);
    start(&c, 1, consumer, 0);
    start(t, 2, producer, 3);
    for (int k = 0; k < 10; k++) {
        usleep(20000);
        pid_t pid = fork();
        if (pid == 0) {
            pm_free(pm_malloc(100));
            pm_free(pm_malloc(300 << 10));
            profmalloc_stats_t st;
            profmalloc_get_stats(&st);
            _exit(0);
        }
        int ws;
        waitpid(pid, &ws, 0);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
            fprintf(stderr, "FAIL: forked child %d: status %x\n", k, ws);
            atomic_store(&failed, 1);
        }
    }
    join(t, 2);
    stop_consumers();
    join(&c, 1);
    drain_slots();
}

static void run_all(void)
{
    pthread_t g, l[2];
    bg_trim = bg_stats = bg_dump = bg_rate = 1;
    bg_start();
    start(&g, 1, grower, 7);
    start(l, 2, large_worker, 11);
    run_prodcons(2, 1);
    run_churn(10);
    join(&g, 1);
    join(l, 2);
    bg_stop();
    drain_slots();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "prodcons";
    if (argc > 2) ITERS = atoi(argv[2]);
    pm_init();
    pm_sampler_set_rate(0);
    if (!strcmp(mode, "prodcons")) run_prodcons(2, 2);
    else if (!strcmp(mode, "churn")) run_churn(ITERS / 100);
    else if (!strcmp(mode, "realloc")) run_workers(grower, 3);
    else if (!strcmp(mode, "trim")) {
        bg_trim = bg_stats = 1;
        run_mixed();
    } else if (!strcmp(mode, "sample1")) {
        profmalloc_set_sample_rate(1);
        bg_stats = 1;
        run_mixed();
        run_churn(20);
    } else if (!strcmp(mode, "samplesmall")) {
        profmalloc_set_sample_rate(4096);
        bg_trim = 1;
        run_mixed();
        run_churn(20);
    } else if (!strcmp(mode, "dump")) {
        profmalloc_set_sample_rate(1024);
        bg_dump = bg_rate = 1;
        run_mixed();
    } else if (!strcmp(mode, "fork")) {
        profmalloc_set_sample_rate(4096);
        run_fork();
    } else if (!strcmp(mode, "large")) {
        profmalloc_set_sample_rate(65536);
        bg_trim = bg_stats = 1;
        bg_start();
        run_workers(large_worker, 3);
        bg_stop();
    } else if (!strcmp(mode, "all")) {
        profmalloc_set_sample_rate(2048);
        run_all();
    } else {
        fprintf(stderr, "tsan_stress: unknown mode %s\n", mode);
        return 2;
    }
    profmalloc_stats_t st;
    profmalloc_get_stats(&st);
    fprintf(stderr, "%s done: in_use=%llu threads=%llu\n", mode, (unsigned long long)st.in_use,
            (unsigned long long)st.threads);
    if (st.in_use != 0) {
        fprintf(stderr, "FAIL: %llu bytes still in use\n", (unsigned long long)st.in_use);
        atomic_store(&failed, 1);
    }
    return atomic_load(&failed);
}
