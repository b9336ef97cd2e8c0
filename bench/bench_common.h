/* bench_common.h — shared helpers for the bench/ workloads.
 *
 * Every workload is a plain C program that uses only malloc/free/realloc/
 * calloc and pthreads, so it measures whatever allocator the dynamic linker
 * binds (glibc, or one given with LD_PRELOAD).  Each prints exactly one
 * result line on stdout of the form
 *     workload=NAME key=value key=value ...
 * that always contains seconds= (timed region, wall clock), ops= and
 * peak_rss_kb= (VmHWM at exit).  Any allocation failure or content mismatch
 * prints "FAIL: ..." on stderr and exits with status 2, so a broken allocator
 * can never produce a number.
 *
 * Common options (each workload documents its own defaults):
 *   -t THREADS  -n ITERATIONS  -s SEED  -l LIVE  -b BATCH  -z SIZE  -m MODE
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *bench_name = "bench";

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: FAIL: ", bench_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(2);
}

static inline double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Keep the compiler from eliding a malloc/free pair or a store. */
static inline void escape(const void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

/* xorshift64*: fast, good enough for choosing sizes and slots. */
typedef struct { uint64_t s; } rng_t;
static inline void rng_seed(rng_t *r, uint64_t seed)
{
    /* splitmix64 step so that small seeds give unrelated streams */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    r->s = (z ^ (z >> 31)) | 1;
}
static inline uint64_t rng_next(rng_t *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}
/* uniform in [0, n) (n < 2^32; the bias is irrelevant here) */
static inline uint32_t rng_below(rng_t *r, uint32_t n)
{
    return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi) /* [lo, hi] */
{
    return lo + rng_below(r, (uint32_t)(hi - lo + 1));
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) die("malloc(%zu) returned NULL", n);
    if (((uintptr_t)p & 15) != 0 && n >= 16) die("malloc(%zu) = %p is not 16-byte aligned", n, p);
    return p;
}

/* Self-describing block: the first 8 bytes hold the requested size and a
 * random tag; the last byte holds the tag's low byte.  Two live blocks that
 * overlap, or a block whose bytes the allocator scribbled on, fail the check.
 * Needs n >= 16. */
typedef struct { uint32_t size, tag; } blk_hdr_t;
static inline void blk_init(void *p, size_t n, uint32_t tag)
{
    blk_hdr_t h = {(uint32_t)n, tag};
    memcpy(p, &h, sizeof h);
    ((unsigned char *)p)[n - 1] = (unsigned char)tag;
}
static inline size_t blk_check(const void *p, size_t lo, size_t hi)
{
    blk_hdr_t h;
    memcpy(&h, p, sizeof h);
    if (h.size < lo || h.size > hi) die("block %p: header size %u outside [%zu,%zu] (corrupted)", p, h.size, lo, hi);
    if (((const unsigned char *)p)[h.size - 1] != (unsigned char)h.tag)
        die("block %p of %u bytes: tail byte corrupted", p, h.size);
    return h.size;
}
static inline void *blk_new(rng_t *r, size_t lo, size_t hi)
{
    size_t n = rng_range(r, lo, hi);
    void *p = xmalloc(n);
    blk_init(p, n, (uint32_t)rng_next(r));
    return p;
}
static inline void blk_free(void *p, size_t lo, size_t hi)
{
    blk_check(p, lo, hi);
    free(p);
}

/* A slot remembers the tag it gave its block, so that two slots handed the
 * same address (an allocator returning a live block twice) are caught too:
 * the second blk_init overwrites the first slot's tag. */
typedef struct { void *p; uint32_t tag; } slot_t;
static inline slot_t slot_new(rng_t *r, size_t lo, size_t hi)
{
    size_t n = rng_range(r, lo, hi);
    slot_t s = {xmalloc(n), (uint32_t)rng_next(r)};
    blk_init(s.p, n, s.tag);
    return s;
}
static inline void slot_check(slot_t s, size_t lo, size_t hi)
{
    blk_hdr_t h;
    blk_check(s.p, lo, hi);
    memcpy(&h, s.p, sizeof h);
    if (h.tag != s.tag) die("block %p was handed out twice (its tag changed while live)", s.p);
}
static inline void slot_free(slot_t s, size_t lo, size_t hi)
{
    slot_check(s, lo, hi);
    free(s.p);
}

/* An array of n live slots of lo..hi bytes each, and its release (every
 * block checked, then the array freed). */
__attribute__((unused)) static slot_t *slots_new(rng_t *r, long n, size_t lo, size_t hi)
{
    slot_t *slot = xmalloc((size_t)n * sizeof *slot);
    for (long i = 0; i < n; i++) slot[i] = slot_new(r, lo, hi);
    return slot;
}
__attribute__((unused)) static void slots_free(slot_t *slot, long n, size_t lo, size_t hi)
{
    for (long i = 0; i < n; i++) slot_free(slot[i], lo, hi);
    free(slot);
}

/* A value from /proc/self/status in kB ("VmHWM", "VmRSS"); -1 if absent. */
__attribute__((unused)) static long status_kb(const char *key)
{
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtol(line + kl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

typedef struct {
    int threads;
    long iters;
    uint64_t seed;
    long live;
    long batch;
    long size;
    const char *mode;
} bench_opts_t;

__attribute__((unused)) static void parse_opts(int argc, char **argv, bench_opts_t *o, const char *usage)
{
    int c;
    bench_name = argv[0];
    const char *slash = strrchr(bench_name, '/');
    if (slash) bench_name = slash + 1;
    while ((c = getopt(argc, argv, "t:n:s:l:b:z:m:h")) != -1) {
        switch (c) {
        case 't': o->threads = atoi(optarg); break;
        case 'n': o->iters = strtol(optarg, NULL, 0); break;
        case 's': o->seed = strtoull(optarg, NULL, 0); break;
        case 'l': o->live = strtol(optarg, NULL, 0); break;
        case 'b': o->batch = strtol(optarg, NULL, 0); break;
        case 'z': o->size = strtol(optarg, NULL, 0); break;
        case 'm': o->mode = optarg; break;
        default:
            fprintf(stderr, "usage: %s %s\n", bench_name, usage);
            exit(c == 'h' ? 0 : 64);
        }
    }
    if (o->threads < 1 || o->iters < 1 || o->live < 1 || o->batch < 1) {
        fprintf(stderr, "usage: %s %s\n", bench_name, usage);
        exit(64);
    }
}

/* A big block and the tag its bytes were written from (bigtouch, bigrepeat,
 * bigmix). */
typedef struct {
    unsigned char *p;
    size_t n; /* requested size */
    unsigned char tag;
} big_t;

/* The replacement loop both big-block workloads share: o->live slots filled
 * with make(), then o->iters times a random slot's block dropped and made
 * anew, then all dropped.  Returns the wall time of the loop alone. */
__attribute__((unused)) static double big_replace(const bench_opts_t *o, big_t (*make)(rng_t *),
                                                  void (*drop)(big_t))
{
    rng_t r;
    rng_seed(&r, o->seed);
    big_t *slot = xmalloc((size_t)o->live * sizeof *slot);
    for (long i = 0; i < o->live; i++) slot[i] = make(&r);
    double t0 = now_sec();
    for (long i = 0; i < o->iters; i++) {
        uint32_t k = rng_below(&r, (uint32_t)o->live);
        drop(slot[k]);
        slot[k] = make(&r);
    }
    double t = now_sec() - t0;
    for (long i = 0; i < o->live; i++) drop(slot[i]);
    free(slot);
    return t;
}

/* -m bare (churn, prodcons): 1 for bare, 0 for the default checked mode;
 * any other mode is an error. */
__attribute__((unused)) static int bare_mode(const bench_opts_t *o)
{
    if (!o->mode) return 0;
    if (strcmp(o->mode, "bare") != 0) die("unknown mode %s (the only mode is bare)", o->mode);
    return 1;
}

/* Print the result line: "workload=NAME threads=.. ops=.. seconds=.. ns_per_op=..
 * peak_rss_kb=.. <extra>". */
__attribute__((unused)) static void report(const char *name, int threads, double ops, double secs, const char *extra)
{
    printf("workload=%s threads=%d ops=%.0f seconds=%.6f ns_per_op=%.2f mops=%.3f peak_rss_kb=%ld%s%s\n",
           name, threads, ops, secs, ops > 0 ? secs * 1e9 / ops : 0.0,
           secs > 0 ? ops / secs / 1e6 : 0.0, status_kb("VmHWM"), extra && *extra ? " " : "",
           extra ? extra : "");
    fflush(stdout);
}

__attribute__((unused)) static void xpthread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int e = pthread_create(t, NULL, fn, arg);
    if (e) die("pthread_create: %s", strerror(e));
}
__attribute__((unused)) static void xpthread_join(pthread_t t)
{
    int e = pthread_join(t, NULL);
    if (e) die("pthread_join: %s", strerror(e));
}

/* np zeroed, cache-line aligned elements of `size` bytes, one per pair of
 * threads (server, prodcons). */
__attribute__((unused)) static void *pairs_new(int np, size_t size)
{
    void *q = aligned_alloc(64, size * (size_t)np);
    if (!q) die("aligned_alloc returned NULL");
    memset(q, 0, size * (size_t)np);
    return q;
}

/* Starts a(&q[i]) and b(&q[i]) for each of the np pairs and joins all 2*np
 * threads.  Returns the wall time from the first start to the last join. */
__attribute__((unused)) static double pairs_run(void *q, size_t size, int np, void *(*a)(void *),
                                                void *(*b)(void *))
{
    pthread_t *tid = xmalloc(sizeof *tid * 2 * (size_t)np);
    double t0 = now_sec();
    for (int i = 0; i < np; i++) {
        xpthread_create(&tid[2 * i], a, (char *)q + (size_t)i * size);
        xpthread_create(&tid[2 * i + 1], b, (char *)q + (size_t)i * size);
    }
    for (int i = 0; i < 2 * np; i++) xpthread_join(tid[i]);
    double t = now_sec() - t0;
    free(tid);
    return t;
}

#endif
