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

static unsigned rnd(unsigned *s) { *s = *s * 1103515245u + 12345u; return *s >> 8; }
static size_t rsize(unsigned *s)
{
    unsigned r = rnd(s) % 100;
    if (r < 60) return 1 + rnd(s) % 256;
    if (r < 85) return 257 + rnd(s) % 4000;
    if (r < 97) return 4097 + rnd(s) % (256 << 10);
    return (256 << 10) + 1 + rnd(s) % (1 << 20);
}
static void touch(void *p, size_t n) { if (p) { ((volatile char *)p)[0] = 1; ((volatile char *)p)[n - 1] = 2; } }

/* ---- a mutex-protected queue for cross-thread frees ---- */
#define QCAP 4096
static void *q[QCAP]; static int qh, qt, qn;
static pthread_mutex_t qm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qc = PTHREAD_COND_INITIALIZER;
static void qput(void *p) { pthread_mutex_lock(&qm); while (qn == QCAP) { pthread_mutex_unlock(&qm); sched_yield(); pthread_mutex_lock(&qm);} q[qt] = p; qt = (qt + 1) % QCAP; qn++; pthread_cond_signal(&qc); pthread_mutex_unlock(&qm); }
static void *qget(int wait) { pthread_mutex_lock(&qm); void *p = NULL; while (!qn && wait && !atomic_load(&stop)) pthread_cond_wait(&qc, &qm); if (qn) { p = q[qh]; qh = (qh + 1) % QCAP; qn--; } pthread_mutex_unlock(&qm); return p; }

/* ---- lock-free handoff via atomics (release/acquire) ---- */
#define SLOTS 256
static _Atomic(void *) slot[SLOTS];

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
        else {
            void *old = atomic_exchange_explicit(&slot[rnd(&s) % SLOTS], p, memory_order_acq_rel);
            pm_free(old);
        }
        if (i % 7 == 0) { void *x = pm_malloc(rnd(&s) % 200); pm_free(x); }
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
    for (int i = 0; i < nc; i++) pthread_create(&tc[i], NULL, consumer, NULL);
    for (int i = 0; i < np; i++) pthread_create(&tp[i], NULL, producer, (void *)(uintptr_t)(i * 77 + 5));
    for (int i = 0; i < np; i++) pthread_join(tp[i], NULL);
    atomic_store(&stop, 1);
    pthread_mutex_lock(&qm); pthread_cond_broadcast(&qc); pthread_mutex_unlock(&qm);
    for (int i = 0; i < nc; i++) pthread_join(tc[i], NULL);
    for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL));
}

/* ---- many short-lived threads; blocks outlive their thread ---- */
static void *shortlived(void *a)
{
    unsigned s = (unsigned)(uintptr_t)a;
    void *keep[64];
    for (int i = 0; i < 64; i++) { size_t n = rsize(&s) % 5000 + 1; keep[i] = pm_malloc(n); touch(keep[i], n); }
    for (int i = 0; i < 64; i += 2) pm_free(keep[i]);
    for (int i = 1; i < 64; i += 2) {
        void *old = atomic_exchange_explicit(&slot[rnd(&s) % SLOTS], keep[i], memory_order_acq_rel);
        pm_free(old);
    }
    return NULL;
}
static void run_churn(int rounds)
{
    for (int r = 0; r < rounds; r++) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, shortlived, (void *)(uintptr_t)(r * 4 + i + 1));
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    }
    for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL));
}

/* ---- realloc growth across classes into large blocks ---- */
static void *grower(void *a)
{
    unsigned s = (unsigned)(uintptr_t)a;
    for (int i = 0; i < ITERS / 50; i++) {
        size_t n = 8; char *p = pm_malloc(n); memset(p, 'a', n);
        while (n < (size_t)(600 << 10)) {
            size_t m = n + n / 2 + rnd(&s) % 1000;
            p = pm_realloc(p, m); memset(p + n, 'b', m - n); n = m;
            (void)pm_usable_size(p);
            if (rnd(&s) % 8 == 0) {  /* hand it to someone else to free */
                void *old = atomic_exchange_explicit(&slot[rnd(&s) % SLOTS], p, memory_order_acq_rel);
                if (old) { pm_free(old); }
                p = pm_malloc(n); memset(p, 'c', n);
            }
        }
        while (n > 16) { n /= 3; p = pm_realloc(p, n); }
        pm_free(p);
    }
    return NULL;
}

/* ---- background trim / stats / dump / sample-rate changer ---- */
static int bg_trim, bg_stats, bg_dump, bg_rate;
static void *background(void *a)
{
    (void)a;
    int fd = open("/dev/null", O_WRONLY);
    unsigned s = 99;
    while (!atomic_load(&stop)) {
        if (bg_trim) { pm_malloc_trim(0); profmalloc_release_free_memory(); }
        if (bg_stats) { profmalloc_stats_t st; profmalloc_get_stats(&st); struct mallinfo2 mi = pm_mallinfo2(); (void)mi; pm_malloc_stats(); }
        if (bg_dump) { profmalloc_dump_fd(fd, rnd(&s) & 1); }
        if (bg_rate) { profmalloc_set_sample_rate(rnd(&s) & 1 ? 1 : 512); }
        void *x = pm_malloc(rsize(&s)); pm_free(x);
        usleep(200);
    }
    close(fd);
    return NULL;
}

static void run_mixed(void)
{
    pthread_t bg, g[2];
    atomic_store(&stop, 0);
    pthread_create(&bg, NULL, background, NULL);
    pthread_create(&g[0], NULL, grower, (void *)1);
    pthread_create(&g[1], NULL, grower, (void *)2);
    run_prodcons(2, 1);
    pthread_join(g[0], NULL); pthread_join(g[1], NULL);
    atomic_store(&stop, 1);
    pthread_join(bg, NULL);
    for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL));
}

/* ---- fork while threads allocate ---- */
static void *forkworker(void *a) { producer(a); return NULL; }
static void run_fork(void)
{
    pthread_t t[2], c;
    atomic_store(&stop, 0);
    pthread_create(&c, NULL, consumer, NULL);
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, forkworker, (void *)(uintptr_t)(i + 3));
    for (int k = 0; k < 10; k++) {
        usleep(20000);
        pid_t pid = fork();
        if (pid == 0) {
            void *p = pm_malloc(100); pm_free(p);
            p = pm_malloc(300 << 10); pm_free(p);
            profmalloc_stats_t st; profmalloc_get_stats(&st);
            _exit(0);
        }
        int ws; waitpid(pid, &ws, 0);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
            fprintf(stderr, "FAIL: forked child %d: status %x\n", k, ws);
            atomic_store(&failed, 1);
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    atomic_store(&stop, 1);
    pthread_mutex_lock(&qm); pthread_cond_broadcast(&qc); pthread_mutex_unlock(&qm);
    pthread_join(c, NULL);
    for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL));
}


/* ---- large blocks: realloc in place / moves, big alignments, calloc ---- */
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
            memset(p + (m > n ? n : m) - 1, 'x', 1);
            n = m;
            (void)pm_usable_size(p);
        }
        void *al = pm_memalign((size_t)1 << (12 + rnd(&s) % 9), 1 + rnd(&s) % (600 << 10));
        touch(al, 1);
        void *old = atomic_exchange_explicit(&slot[rnd(&s) % SLOTS], al, memory_order_acq_rel);
        pm_free(old);
        pm_free(p);
    }
    return NULL;
}
static void run_all(void)
{
    pthread_t bg, g, l[2];
    atomic_store(&stop, 0);
    bg_trim = bg_stats = bg_dump = bg_rate = 1;
    pthread_create(&bg, NULL, background, NULL);
    pthread_create(&g, NULL, grower, (void *)7);
    for (int i = 0; i < 2; i++) pthread_create(&l[i], NULL, large_worker, (void *)(uintptr_t)(i + 11));
    run_prodcons(2, 1);
    run_churn(10);
    pthread_join(g, NULL);
    for (int i = 0; i < 2; i++) pthread_join(l[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(bg, NULL);
    for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "prodcons";
    if (argc > 2) ITERS = atoi(argv[2]);
    pm_init();
    pm_sampler_set_rate(0);
    if (!strcmp(mode, "prodcons")) run_prodcons(2, 2);
    else if (!strcmp(mode, "churn")) run_churn(ITERS / 100);
    else if (!strcmp(mode, "realloc")) { pthread_t g[3]; for (int i = 0; i < 3; i++) pthread_create(&g[i], NULL, grower, (void *)(uintptr_t)(i + 1)); for (int i = 0; i < 3; i++) pthread_join(g[i], NULL); for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL)); }
    else if (!strcmp(mode, "trim")) { bg_trim = bg_stats = 1; run_mixed(); }
    else if (!strcmp(mode, "sample1")) { profmalloc_set_sample_rate(1); bg_stats = 1; run_mixed(); run_churn(20); }
    else if (!strcmp(mode, "samplesmall")) { profmalloc_set_sample_rate(4096); bg_trim = 1; run_mixed(); run_churn(20); }
    else if (!strcmp(mode, "dump")) { profmalloc_set_sample_rate(1024); bg_dump = bg_rate = 1; run_mixed(); }
    else if (!strcmp(mode, "fork")) { profmalloc_set_sample_rate(4096); run_fork(); }
    else if (!strcmp(mode, "large")) { profmalloc_set_sample_rate(65536); bg_trim = bg_stats = 1; pthread_t bg, l[3]; atomic_store(&stop, 0); pthread_create(&bg, NULL, background, NULL); for (int i = 0; i < 3; i++) pthread_create(&l[i], NULL, large_worker, (void *)(uintptr_t)(i + 1)); for (int i = 0; i < 3; i++) pthread_join(l[i], NULL); atomic_store(&stop, 1); pthread_join(bg, NULL); for (int i = 0; i < SLOTS; i++) pm_free(atomic_exchange(&slot[i], NULL)); }
    else if (!strcmp(mode, "all")) { profmalloc_set_sample_rate(2048); run_all(); }
    else { fprintf(stderr, "bad mode\n"); return 2; }
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
