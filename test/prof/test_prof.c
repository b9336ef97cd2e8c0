/* test_prof.c — the heap profiler end to end, in a program linked with
 * -lprofmalloc: allocation sites of known size are sampled, dumped with
 * profmalloc_dump(), and the dump is decoded here (profile_reader.h) and
 * compared with the truth: within tolerance at a moderate rate, exactly at
 * rate 1.  Also: stacks through code without frame pointers, makecontext
 * stacks, dumps while other threads allocate, fork, realloc and
 * cross-thread frees of sampled blocks, dump errors, the legacy format,
 * PROFMALLOC_DUMP at exit and malformed options.
 * Sites are told apart by function name (filled in-process by the writer).
 * Each test uses its own sites, so cumulative counts start at zero. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include "profmalloc.h"
#include "profile_reader.h"

/* prof_chain.c, built with -fomit-frame-pointer */
void *chain_a(size_t size);
/* fp_chain.c, built with frame pointers */
void *fp_outer(size_t size);

static char g_dir[PATH_MAX];
static char g_exe[PATH_MAX];

static const char *path_in_dir(const char *name)
{
    static char buf[4][PATH_MAX + 64];
    static int next;
    char *p = buf[next++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    return p;
}

enum { ALLOC_OBJ, ALLOC_BYTES, INUSE_OBJ, INUSE_BYTES };

/* Sums the four values of every sample whose stack passes through fn. */
static void site_totals(const tprof_t *p, const char *fn, uint64_t out[4])
{
    memset(out, 0, 4 * sizeof out[0]);
    for (size_t i = 0; i < p->ns; i++) {
        const tsample_t *s = &p->s[i];
        int hit = 0;
        for (size_t k = 0; k < s->locs.n && !hit; k++) {
            const char *name = loc_func_name(p, loc_by_id(p, s->locs.v[k]));
            hit = name && strcmp(name, fn) == 0;
        }
        if (hit)
            for (int v = 0; v < 4; v++) out[v] += s->vals.v[v];
    }
}

static void dump_and_load(tprof_t *p, const char *name)
{
    const char *path = path_in_dir(name);
    assert_int_equal(profmalloc_dump(path), 0);
    load_profile(p, path, NULL);
    assert_int_equal(p->nst, 4);
    assert_string_equal(S(p, p->st[0].type), "alloc_objects");
    assert_string_equal(S(p, p->st[3].type), "inuse_space");
    assert_string_equal(S(p, p->pt.type), "space");
}

/* Dumps to name and gives the four totals of the samples through fn. */
static void dump_site(const char *name, const char *fn, uint64_t v[4])
{
    tprof_t p;
    dump_and_load(&p, name);
    site_totals(&p, fn, v);
    free_profile(&p);
}

static void assert_near(uint64_t got, double want, double tol, const char *what)
{
    double lo = want * (1 - tol), hi = want * (1 + tol);
    if (!((double)got >= lo && (double)got <= hi))
        fail_msg("%s: estimate %llu outside [%.0f, %.0f] (truth %.0f)", what,
                 (unsigned long long)got, lo, hi, want);
}

/* ---- sites of known size ------------------------------------------------ */

/* Stops the compiler from deleting a malloc/free pair as dead code. */
static void *volatile sink;
static void churn(size_t size) { sink = malloc(size); free(sink); }

static void *keep[100000];
static void *keep_pages[400];
static void *keep_large[20];

__attribute__((noinline)) static void site_small_keep(int n)
{
    for (int i = 0; i < n; i++) keep[i] = malloc(200);
}

__attribute__((noinline)) static void site_small_free(int n)
{
    for (int i = 0; i < n; i++) churn(100);
}

__attribute__((noinline)) static void site_pages(int n)
{
    for (int i = 0; i < n; i++) keep_pages[i] = malloc(40000);
    for (int i = 0; i < n; i += 2) {
        free(keep_pages[i]);
        keep_pages[i] = NULL;
    }
}

__attribute__((noinline)) static void site_large(int n)
{
    for (int i = 0; i < n; i++) {
        keep_large[i] = malloc(1 << 20);
        memset(keep_large[i], 1, 4096);
    }
    for (int i = 0; i < n; i += 2) {
        free(keep_large[i]);
        keep_large[i] = NULL;
    }
}

static void free_kept(void)
{
    for (size_t i = 0; i < 100000; i++) free(keep[i]), keep[i] = NULL;
    for (size_t i = 0; i < 400; i++) free(keep_pages[i]), keep_pages[i] = NULL;
    for (size_t i = 0; i < 20; i++) free(keep_large[i]), keep_large[i] = NULL;
}

static void test_estimates_at_moderate_rate(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(16384);
    site_small_keep(50000);   /* 10 MB live: ~610 samples */
    site_small_free(100000);  /* 10 MB allocated, all freed */
    site_pages(400);          /* 16 MB allocated, 8 MB live */
    site_large(20);           /* 20 MiB allocated, 10 MiB live */
    tprof_t p;
    dump_and_load(&p, "prof-moderate.pb.gz");
    assert_int_equal(p.period, 16384);
    uint64_t v[4];
    site_totals(&p, "site_small_keep", v);
    assert_near(v[ALLOC_BYTES], 50000.0 * 200, 0.2, "small_keep alloc bytes");
    assert_near(v[INUSE_BYTES], 50000.0 * 200, 0.2, "small_keep live bytes");
    assert_near(v[INUSE_OBJ], 50000, 0.2, "small_keep live objects");
    site_totals(&p, "site_small_free", v);
    assert_near(v[ALLOC_BYTES], 100000.0 * 100, 0.2, "small_free alloc bytes");
    assert_int_equal(v[INUSE_BYTES], 0);
    assert_int_equal(v[INUSE_OBJ], 0);
    site_totals(&p, "site_pages", v);
    assert_near(v[ALLOC_BYTES], 400.0 * 40000, 0.2, "pages alloc bytes");
    assert_near(v[INUSE_BYTES], 200.0 * 40000, 0.25, "pages live bytes");
    site_totals(&p, "site_large", v);
    assert_near(v[ALLOC_BYTES], 20.0 * (1 << 20), 0.02, "large alloc bytes");
    assert_near(v[INUSE_BYTES], 10.0 * (1 << 20), 0.02, "large live bytes");
    /* the exact totals ride along as comments */
    int found = 0;
    for (size_t i = 0; i < p.comments.n; i++)
        found |= strncmp(S(&p, p.comments.v[i]), "profmalloc: in_use=", 19) == 0;
    assert_true(found);
    free_profile(&p);
    free_kept();
}

__attribute__((noinline)) static void exact_keep(int n) { for (int i = 0; i < n; i++) keep[i] = malloc(24); }
__attribute__((noinline)) static void exact_free(int n) { for (int i = 0; i < n; i++) churn(3000); }
__attribute__((noinline)) static void exact_large(int n)
{
    for (int i = 0; i < n; i++) keep_large[i] = malloc(300000);
}

static void test_exact_at_rate_one(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    exact_keep(30000);
    exact_free(20000);
    exact_large(7);
    profmalloc_stats_t st;
    profmalloc_get_stats(&st);
    assert_true(st.samples_live >= 30007);
    tprof_t p;
    dump_and_load(&p, "prof-exact.pb.gz");
    uint64_t v[4];
    site_totals(&p, "exact_keep", v);
    assert_int_equal(v[ALLOC_OBJ], 30000);
    assert_int_equal(v[ALLOC_BYTES], 30000 * 24);
    assert_int_equal(v[INUSE_OBJ], 30000);
    assert_int_equal(v[INUSE_BYTES], 30000 * 24);
    site_totals(&p, "exact_free", v);
    assert_int_equal(v[ALLOC_OBJ], 20000);
    assert_int_equal(v[ALLOC_BYTES], 20000 * 3000);
    assert_int_equal(v[INUSE_OBJ], 0);
    assert_int_equal(v[INUSE_BYTES], 0);
    site_totals(&p, "exact_large", v);
    assert_int_equal(v[ALLOC_OBJ], 7);
    assert_int_equal(v[INUSE_BYTES], 7 * 300000);
    free_profile(&p);
    free_kept();
    profmalloc_set_sample_rate(512 * 1024);
}

/* ---- stacks --------------------------------------------------------------- */

static int stack_has_in_order(const tprof_t *p, const char *const *names, int n)
{
    for (size_t i = 0; i < p->ns; i++) {
        const tsample_t *s = &p->s[i];
        int next = 0;
        for (size_t k = 0; k < s->locs.n && next < n; k++) {
            const char *name = loc_func_name(p, loc_by_id(p, s->locs.v[k]));
            if (name && strcmp(name, names[next]) == 0) next++;
            else if (next > 0) break; /* the chain must be contiguous */
        }
        if (next == n) return 1;
    }
    return 0;
}

__attribute__((noinline)) static void call_chain(void) { free(chain_a(777)); }

static void test_stack_without_frame_pointers(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    call_chain();
    tprof_t p;
    dump_and_load(&p, "prof-chain.pb.gz");
    const char *want[] = {"chain_c", "chain_b", "chain_a", "call_chain"};
    assert_true(stack_has_in_order(&p, want, 4));
    /* the leaf is the user's function: no allocator frame is left */
    for (size_t i = 0; i < p.ns; i++) {
        const char *leaf = loc_func_name(&p, loc_by_id(&p, p.s[i].locs.v[0]));
        if (leaf) {
            assert_true(strcmp(leaf, "malloc") != 0);
            assert_true(strncmp(leaf, "pm_", 3) != 0);
        }
    }
    free_profile(&p);
    profmalloc_set_sample_rate(512 * 1024);
}

static ucontext_t main_ctx, co_ctx;
static int co_done;

__attribute__((noinline)) static void on_coroutine(void)
{
    for (int i = 0; i < 100; i++) churn(64 + (size_t)i);
    churn(4096);
    co_done = 1;
    swapcontext(&co_ctx, &main_ctx);
}

static void test_makecontext_stack(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    size_t sz = 256 * 1024;
    char *stack = malloc(sz);
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = stack;
    co_ctx.uc_stack.ss_size = sz;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, on_coroutine, 0);
    swapcontext(&main_ctx, &co_ctx);
    assert_true(co_done);
    tprof_t p;
    dump_and_load(&p, "prof-coroutine.pb.gz");
    uint64_t v[4];
    site_totals(&p, "on_coroutine", v);
    assert_int_equal(v[ALLOC_OBJ], 101);
    free_profile(&p);
    free(stack);
    profmalloc_set_sample_rate(512 * 1024);
}

/* ---- concurrency, fork, realloc, cross-thread free ------------------------ */

static volatile int stop_workers;

__attribute__((noinline)) static void *worker(void *arg)
{
    unsigned x = (unsigned)(uintptr_t)arg;
    void *slots[256] = {0};
    while (!stop_workers) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) & 255;
        free(slots[k]);
        slots[k] = malloc(16 + (x >> 16) % 5000);
    }
    for (int k = 0; k < 256; k++) free(slots[k]);
    return NULL;
}

static void test_dump_while_threads_allocate(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(4096);
    pthread_t th[2];
    stop_workers = 0;
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int round = 0; round < 15; round++) {
        tprof_t p;
        dump_and_load(&p, "prof-concurrent.pb.gz"); /* integrity checked inside */
        free_profile(&p);
    }
    stop_workers = 1;
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    tprof_t p;
    dump_and_load(&p, "prof-concurrent.pb.gz");
    uint64_t v[4];
    site_totals(&p, "worker", v);
    assert_true(v[ALLOC_OBJ] > 0);
    assert_int_equal(v[INUSE_OBJ], 0); /* the workers freed everything */
    free_profile(&p);
    profmalloc_set_sample_rate(512 * 1024);
}

__attribute__((noinline)) static void child_site(void) { keep[0] = malloc(123456); }

static void test_fork_child_dumps_its_own(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    pthread_t th;
    stop_workers = 0;
    pthread_create(&th, NULL, worker, (void *)7);
    const char *child_path = path_in_dir("prof-child.pb.gz");
    unlink(child_path);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        child_site();
        _exit(profmalloc_dump(child_path) == 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    stop_workers = 1;
    pthread_join(th, NULL);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    tprof_t p;
    load_profile(&p, child_path, NULL);
    uint64_t v[4];
    site_totals(&p, "child_site", v);
    assert_int_equal(v[INUSE_BYTES], 123456);
    free_profile(&p);
    dump_and_load(&p, "prof-parent.pb.gz"); /* the parent never ran child_site */
    site_totals(&p, "child_site", v);
    assert_int_equal(v[ALLOC_OBJ], 0);
    free_profile(&p);
    profmalloc_set_sample_rate(512 * 1024);
}

__attribute__((noinline)) static void realloc_site(void)
{
    char *s = malloc(100);
    strcpy(s, "grow me");
    s = realloc(s, 5000);  /* moves: a new sampled block, the old one freed */
    s = realloc(s, 5200);  /* moves into a block with headroom; 5200 is recorded */
    s = realloc(s, 300000);
    assert_string_equal(s, "grow me");
    free(s);
}

static void test_realloc_of_sampled_blocks(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    realloc_site();
    tprof_t p;
    dump_and_load(&p, "prof-realloc.pb.gz");
    uint64_t v[4];
    site_totals(&p, "realloc_site", v);
    assert_int_equal(v[ALLOC_OBJ], 4);
    assert_int_equal(v[ALLOC_BYTES], 100 + 5000 + 5200 + 300000);
    assert_int_equal(v[INUSE_OBJ], 0);
    free_profile(&p);
    profmalloc_set_sample_rate(512 * 1024);
}

/* Large blocks: grown in place (the sample keeps its size) or moved (the
 * old sample freed, its pages returned at once from 1 MiB): either way one
 * live sample while the block lives and none after. */
__attribute__((noinline)) static char *realloc_large_site(void)
{
    char *s = malloc((size_t)2 << 20);
    strcpy(s, "grow me");
    char *blocker = malloc((size_t)1 << 20); /* often right after s */
    s = realloc(s, (size_t)3 << 20);
    s = realloc(s, (size_t)40 << 20);
    free(blocker);
    assert_string_equal(s, "grow me");
    return s;
}

static void test_realloc_of_sampled_large_blocks(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    char *s = realloc_large_site();
    uint64_t v[4];
    dump_site("prof-realloc-large.pb.gz", "realloc_large_site", v);
    assert_int_equal(v[INUSE_OBJ], 1);
    assert_true(v[INUSE_BYTES] >= (uint64_t)2 << 20 && v[INUSE_BYTES] <= (uint64_t)40 << 20);
    assert_in_range(v[ALLOC_OBJ], 2, 4); /* s, blocker, and one per move */
    free(s);
    dump_site("prof-realloc-large.pb.gz", "realloc_large_site", v);
    assert_int_equal(v[INUSE_OBJ], 0);
    profmalloc_set_sample_rate(512 * 1024);
}

/* A large block shrunk in place is, for the profile, the old block freed
 * and a new one of the new size: 64 MiB shrunk to 1 MiB shows 1 MiB live. */
__attribute__((noinline)) static char *shrink_large_site(void)
{
    char *s = malloc((size_t)64 << 20);
    strcpy(s, "shrink me");
    char *t = realloc(s, (size_t)1 << 20);
    assert_ptr_equal(t, s); /* in place */
    return t;
}

static void test_realloc_shrinks_sampled_large_block(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    char *s = shrink_large_site();
    uint64_t v[4];
    dump_site("prof-shrink-large.pb.gz", "shrink_large_site", v);
    assert_int_equal(v[INUSE_OBJ], 1);
    assert_int_equal(v[INUSE_BYTES], (uint64_t)1 << 20);
    assert_int_equal(v[ALLOC_OBJ], 2);
    assert_int_equal(v[ALLOC_BYTES], ((uint64_t)64 << 20) + ((uint64_t)1 << 20));
    free(s);
    dump_site("prof-shrink-large.pb.gz", "shrink_large_site", v);
    assert_int_equal(v[INUSE_OBJ], 0);
    assert_int_equal(v[INUSE_BYTES], 0);
    profmalloc_set_sample_rate(512 * 1024);
}

/* Large blocks shrunk, then grown back in place (into the pages the
 * shrink freed): at rate 1 the profile shows exactly the new sizes live. */
__attribute__((noinline)) static void *grow_large_site(void)
{
    char *p = malloc((size_t)4 << 20);
    p[0] = 1;
    char *q = realloc(p, 300000);
    assert_ptr_equal(q, p);
    q = realloc(q, (size_t)2 << 20);
    assert_ptr_equal(q, p);
    return q;
}

static void test_realloc_grows_sampled_large_block(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    enum { N = 20 };
    void *b[N];
    for (int i = 0; i < N; i++) b[i] = grow_large_site();
    uint64_t v[4];
    dump_site("prof-grow-large.pb.gz", "grow_large_site", v);
    assert_int_equal(v[INUSE_OBJ], N);
    assert_int_equal(v[INUSE_BYTES], (uint64_t)N << 21);
    for (int i = 0; i < N; i++) free(b[i]);
    profmalloc_set_sample_rate(512 * 1024);
}

/* Small aligned blocks are recorded at the size asked for (aligned_alloc
 * of 3000 bytes at 4096 takes a 4096-byte object). */
__attribute__((noinline)) static void *aligned_site(void)
{
    return aligned_alloc(4096, 3000);
}

static void test_aligned_small_blocks_record_requested_size(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    enum { N = 50 };
    void *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = aligned_site();
        assert_non_null(b[i]);
        assert_int_equal((uintptr_t)b[i] & 4095, 0);
    }
    uint64_t v[4];
    dump_site("prof-aligned.pb.gz", "aligned_site", v);
    assert_int_equal(v[INUSE_OBJ], N);
    assert_int_equal(v[INUSE_BYTES], N * 3000);
    for (int i = 0; i < N; i++) free(b[i]);
    profmalloc_set_sample_rate(512 * 1024);
}

/* Blocks allocated by another library's key destructor that runs after
 * profmalloc's (the thread's cache already flushed) are sampled too. */
static pthread_key_t late_key;
static void *late_blocks[4];
static _Atomic int late_n;

__attribute__((noinline)) static void *late_dtor_site(void)
{
    void *p = malloc((size_t)1 << 20);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void late_dtor(void *v)
{
    (void)v;
    late_blocks[atomic_fetch_add(&late_n, 1)] = late_dtor_site();
}

static void *late_thread(void *arg)
{
    (void)arg;
    void *p = malloc(10); /* profmalloc's key is set before late_key's value */
    pthread_setspecific(late_key, p);
    return NULL;
}

static void test_sampled_after_thread_cache_flush(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    assert_int_equal(pthread_key_create(&late_key, late_dtor), 0);
    for (int i = 0; i < 4; i++) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, late_thread, NULL), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
    }
    assert_int_equal(atomic_load(&late_n), 4);
    uint64_t v[4];
    dump_site("prof-late-dtor.pb.gz", "late_dtor_site", v);
    assert_int_equal(v[INUSE_OBJ], 4);
    assert_int_equal(v[INUSE_BYTES], (uint64_t)4 << 20);
    for (int i = 0; i < 4; i++) free(late_blocks[i]);
    pthread_key_delete(late_key);
    profmalloc_set_sample_rate(512 * 1024);
}

/* Dumps and malloc_info from a thread on the smallest stack glibc allows
 * (16 KiB, part of it static TLS): their buffers must not be on the stack
 * (they were: malloc_info took 10 KB, the exit dump 17 KB). */
static void *small_stack_reporter(void *arg)
{
    (void)arg;
    void *p = malloc(100);
    long ok = profmalloc_dump(path_in_dir("prof-small-stack.pb.gz")) == 0 &&
              profmalloc_dump(path_in_dir("prof-small-stack.heap")) == 0;
    FILE *f = fopen("/dev/null", "w");
    ok = ok && f && malloc_info(0, f) == 0;
    if (f) fclose(f);
    free(p);
    return (void *)ok;
}

static void test_reports_on_a_small_stack(void **state)
{
    (void)state;
    pthread_attr_t at;
    pthread_attr_init(&at);
    assert_int_equal(pthread_attr_setstacksize(&at, PTHREAD_STACK_MIN), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, &at, small_stack_reporter, NULL), 0);
    void *ok = NULL;
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_true(ok != NULL);
    pthread_attr_destroy(&at);
}

static void *freer(void *arg)
{
    void **blocks = arg;
    for (int i = 0; i < 5000; i++) free(blocks[i]);
    return NULL;
}

__attribute__((noinline)) static void xthread_site(void **blocks)
{
    for (int i = 0; i < 5000; i++) blocks[i] = malloc(48 + (size_t)(i % 3) * 1000);
}

/* samples_live only grows while one thread allocates at rate 1 and frees
 * nothing, whatever the moment another thread reads the stats.  Growing a
 * shard's record table reset its count and counted it up again, and a
 * reader saw up to a shard's records missing (found by a TSan run). */
#define LIVE_N 200000
static void **live_blocks;
static atomic_int live_done;

static void *live_allocator(void *arg)
{
    (void)arg;
    for (int i = 0; i < LIVE_N; i++) live_blocks[i] = malloc(16 + (size_t)(i % 64) * 16);
    atomic_store(&live_done, 1);
    return NULL;
}

static void test_live_samples_never_fall(void **state)
{
    (void)state;
    uint64_t rate = profmalloc_get_sample_rate();
    live_blocks = malloc(LIVE_N * sizeof *live_blocks);
    assert_non_null(live_blocks);
    profmalloc_set_sample_rate(1);
    atomic_store(&live_done, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, live_allocator, NULL), 0);
    uint64_t prev = 0, falls = 0, polls = 0;
    while (!atomic_load(&live_done)) {
        profmalloc_stats_t st;
        profmalloc_get_stats(&st);
        if (st.samples_live < prev) falls++;
        prev = st.samples_live;
        polls++;
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    profmalloc_stats_t st;
    profmalloc_get_stats(&st);
    /* the blocks and the rate go back before any assertion can stop the test */
    for (int i = 0; i < LIVE_N; i++) free(live_blocks[i]);
    free(live_blocks);
    profmalloc_set_sample_rate(rate);
    assert_true(st.samples_live >= LIVE_N);
    assert_true(polls > 100);
    assert_int_equal(falls, 0);
}

static void test_free_from_another_thread(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    xthread_site(keep);
    pthread_t th;
    pthread_create(&th, NULL, freer, keep);
    pthread_join(th, NULL);
    memset(keep, 0, 5000 * sizeof keep[0]);
    tprof_t p;
    dump_and_load(&p, "prof-xthread.pb.gz");
    uint64_t v[4];
    site_totals(&p, "xthread_site", v);
    assert_int_equal(v[ALLOC_OBJ], 5000);
    assert_int_equal(v[INUSE_OBJ], 0);
    assert_int_equal(v[INUSE_BYTES], 0);
    free_profile(&p);
    profmalloc_set_sample_rate(512 * 1024);
}

/* ---- before any constructor ------------------------------------------------ */

/* .preinit_array runs before the initialisers of every shared library,
 * libprofmalloc's constructor included: the allocator must set itself up
 * lazily, from whichever call comes first. */
static char *early_block;
static int early_ok;

static void early_alloc(int argc, char **argv, char **envp)
{
    (void)argc, (void)argv, (void)envp;
    char *p = malloc(100);
    if (!p) return;
    memset(p, 7, 100);
    p = realloc(p, 5000);
    char *z = calloc(10, 1000);
    early_ok = p && p[99] == 7 && z && z[9999] == 0 && malloc_usable_size(p) >= 5000;
    free(z);
    early_block = p;
}

__attribute__((section(".preinit_array"), used)) static void (*preinit_hook)(int, char **, char **) =
    early_alloc;

static void test_allocation_before_constructors(void **state)
{
    (void)state;
    assert_true(early_ok);
    assert_int_equal(early_block[50], 7);
    free(early_block);
    early_block = NULL;
}

/* ---- files, formats, options ---------------------------------------------- */

/* Temporaries this process's dumps left in the test directory. */
static int leftover_temps(void)
{
    char prefix[64];
    int len = snprintf(prefix, sizeof prefix, ".profmalloc-dump.%d.", (int)getpid());
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, (size_t)len) == 0;
    closedir(d);
    return n;
}

/* Runs fn(arg) on four threads at once; each must return NULL. */
static void run_four(void *(*fn)(void *), void *arg)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, fn, arg), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_null(r);
    }
}

/* Threads dumping to one path at once: every dump succeeds, and what any
 * of them finds at the path right after is a whole profile. */
static void *same_path_dumper(void *arg)
{
    const char *path = arg;
    for (int i = 0; i < 15; i++) {
        if (profmalloc_dump(path) != 0) return (void *)1;
        tprof_t p;
        load_profile(&p, path, NULL); /* fails the test on a torn file */
        free_profile(&p);
    }
    return NULL;
}

static void test_concurrent_dumps_to_one_path(void **state)
{
    (void)state;
    profmalloc_set_sample_rate(1);
    enum { K = 800 };
    void **keep = malloc(K * sizeof *keep);
    for (int i = 0; i < K; i++) keep[i] = malloc(64 + (size_t)i);
    char *path = strdup(path_in_dir("prof-same-path.pb.gz"));
    run_four(same_path_dumper, path);
    assert_int_equal(leftover_temps(), 0);
    for (int i = 0; i < K; i++) free(keep[i]);
    free(keep);
    free(path);
    profmalloc_set_sample_rate(512 * 1024);
}

/* A fork while another thread dumps: the child's own dump must not wait
 * on the loader lock the dumping thread held in the parent. */
static void *dump_forever(void *arg)
{
    _Atomic int *stop = arg;
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    while (!atomic_load(stop)) profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_PPROF);
    close(fd);
    return NULL;
}

static void test_fork_while_dumping(void **state)
{
    (void)state;
    _Atomic int stop = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, dump_forever, &stop), 0);
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    for (int i = 0; i < 60; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(3);
            _exit(profmalloc_dump_fd(devnull, PROFMALLOC_FORMAT_PPROF) == 0 ? 0 : 1);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("fork %d: child status %#x (SIGALRM: its dump hung)", i, (unsigned)st);
    }
    atomic_store(&stop, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
    close(devnull);
}

static void test_dump_errors_leave_nothing(void **state)
{
    (void)state;
    errno = 0;
    assert_int_equal(profmalloc_dump(path_in_dir("no-such-dir/x.pb.gz")), -1);
    assert_int_equal(errno, ENOENT);
    /* the target is a directory: writing works, the rename fails */
    const char *dir = path_in_dir("prof-target-dir");
    mkdir(dir, 0755);
    errno = 0;
    assert_int_equal(profmalloc_dump(dir), -1);
    assert_true(errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST);
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(leftover_temps(), 0); /* no temporary left behind */
    errno = 0;
    assert_int_equal(profmalloc_dump_fd(-1, PROFMALLOC_FORMAT_PPROF), -1);
    assert_int_equal(errno, EBADF);
    assert_int_equal(profmalloc_dump_fd(1, 42), -1);
    assert_int_equal(errno, EINVAL);
    /* a dump that succeeds leaves errno alone (its temporary name's
     * lookup had left ENOENT) */
    errno = EDOM;
    assert_int_equal(profmalloc_dump(path_in_dir("errno-kept.pb.gz")), 0);
    assert_int_equal(errno, EDOM);
    int fd = open(path_in_dir("errno-kept.heap"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    errno = EDOM;
    assert_int_equal(profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_LEGACY), 0);
    assert_int_equal(errno, EDOM);
    close(fd);
}

/* Reads a FIFO to its end in another thread (the dump's reader). */
typedef struct {
    const char *path;
    unsigned char head[2];
    size_t bytes;
} fifo_reader_t;

static void *read_fifo(void *arg)
{
    fifo_reader_t *r = arg;
    int fd = open(r->path, O_RDONLY);
    if (fd < 0) return NULL;
    unsigned char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0; r->bytes += (size_t)n)
        if (r->bytes == 0 && n >= 2) memcpy(r->head, buf, 2);
    close(fd);
    return NULL;
}

/* Reads a pipe to its end, starting only after the writer has filled it. */
typedef struct {
    int fd;
    size_t bytes;
} pipe_reader_t;

static void *read_pipe_late(void *arg)
{
    pipe_reader_t *r = arg;
    usleep(50000);
    char buf[4096];
    for (ssize_t n; (n = read(r->fd, buf, sizeof buf)) > 0;) r->bytes += (size_t)n;
    return NULL;
}

static void *dump_once(void *arg)
{
    return profmalloc_dump(arg) == 0 ? NULL : (void *)1;
}

static void *dump_ten_times(void *arg)
{
    for (int i = 0; i < 10; i++)
        if (profmalloc_dump(arg) != 0) return (void *)1;
    return NULL;
}

/* A dump never replaces what sits at its path unless that is a regular
 * file: a FIFO (or a device: /dev/null, which a rename as root replaced for
 * the whole machine) is written into, a FIFO nobody reads fails instead of
 * blocking, and a symbolic link keeps pointing where it did while the file
 * it leads to gets the profile. */
static void test_dump_to_special_files(void **state)
{
    (void)state;
    struct stat sb;
    const char *fifo = path_in_dir("prof-fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    errno = 0;
    assert_int_equal(profmalloc_dump(fifo), -1); /* no reader */
    assert_int_equal(errno, ENXIO);
    fifo_reader_t r = {fifo, {0, 0}, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_fifo, &r), 0);
    /* the dump's non-blocking open fails until the reader has opened its end */
    int rc = -1;
    for (int i = 0; i < 2000 && rc != 0; i++) {
        rc = profmalloc_dump(fifo);
        if (rc != 0) {
            assert_int_equal(errno, ENXIO);
            usleep(1000);
        }
    }
    assert_int_equal(rc, 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(r.bytes > 100 && r.head[0] == 0x1f && r.head[1] == 0x8b);
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));

    /* /dev/stdout's shape: a link to /proc/self/fd/N, here a pipe */
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fcntl(pfd[1], F_SETPIPE_SZ, 1 << 20);
    char target[64];
    snprintf(target, sizeof target, "/proc/self/fd/%d", pfd[1]);
    const char *out = path_in_dir("prof-stdout");
    unlink(out);
    assert_int_equal(symlink(target, out), 0);
    assert_int_equal(profmalloc_dump(out), 0);
    close(pfd[1]);
    unsigned char head[2] = {0, 0};
    assert_int_equal(read(pfd[0], head, 2), 2);
    assert_true(head[0] == 0x1f && head[1] == 0x8b);
    close(pfd[0]);
    assert_int_equal(lstat(out, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));

    /* the pipe's reader has gone (`| head`): an error, not SIGPIPE's death */
    assert_int_equal(pipe(pfd), 0);
    close(pfd[0]);
    snprintf(target, sizeof target, "/proc/self/fd/%d", pfd[1]);
    unlink(out);
    assert_int_equal(symlink(target, out), 0);
    errno = 0;
    assert_int_equal(profmalloc_dump(out), -1);
    assert_int_equal(errno, EPIPE);
    sigset_t pending;
    assert_int_equal(sigpending(&pending), 0);
    assert_false(sigismember(&pending, SIGPIPE));
    close(pfd[1]);

    /* /dev/stdout redirected with >> to a log: the dump goes through the
     * descriptor, after what is there, into the same file */
    const char *log = path_in_dir("prof-log.txt");
    int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    assert_true(lfd >= 0);
    assert_int_equal(write(lfd, "previous\n", 9), 9);
    struct stat before;
    assert_int_equal(fstat(lfd, &before), 0);
    snprintf(target, sizeof target, "/proc/self/fd/%d", lfd);
    unlink(out);
    assert_int_equal(symlink(target, out), 0);
    assert_int_equal(profmalloc_dump(out), 0);
    char fdname[32];
    snprintf(fdname, sizeof fdname, "/dev/fd/%d", lfd);
    assert_int_equal(profmalloc_dump(fdname), 0);
    close(lfd);
    size_t loglen;
    uint8_t *logtext = slurp(log, &loglen);
    assert_true(loglen > 200 && memcmp(logtext, "previous\n", 9) == 0 && logtext[9] == 0x1f && logtext[10] == 0x8b);
    free(logtext);
    assert_int_equal(stat(log, &sb), 0);
    assert_true(sb.st_ino == before.st_ino); /* written into, not replaced */

    /* a pipe as /proc/thread-self/fd/N, a spelling of our own descriptors
     * that is no path the dump knows: written through the link */
    assert_int_equal(pipe(pfd), 0);
    fcntl(pfd[1], F_SETPIPE_SZ, 1 << 20);
    snprintf(target, sizeof target, "/proc/thread-self/fd/%d", pfd[1]);
    assert_int_equal(profmalloc_dump(target), 0);
    close(pfd[1]);
    head[0] = head[1] = 0;
    assert_int_equal(read(pfd[0], head, 2), 2);
    assert_true(head[0] == 0x1f && head[1] == 0x8b);
    close(pfd[0]);

    /* /dev/fd/N of a pipe whose write end is non-blocking (node, libuv) and
     * full: the dump waits for the reader instead of stopping at EAGAIN
     * with part of a profile written */
    assert_int_equal(pipe(pfd), 0);
    assert_true(fcntl(pfd[1], F_SETPIPE_SZ, 4096) > 0);
    assert_int_equal(fcntl(pfd[1], F_SETFL, O_NONBLOCK), 0);
    static char fill[4096];
    while (write(pfd[1], fill, sizeof fill) > 0) {
    }
    snprintf(target, sizeof target, "/dev/fd/%d", pfd[1]);
    pipe_reader_t pr = {pfd[0], 0};
    assert_int_equal(pthread_create(&t, NULL, read_pipe_late, &pr), 0);
    assert_int_equal(profmalloc_dump(target), 0);
    close(pfd[1]);
    assert_int_equal(pthread_join(t, NULL), 0);
    close(pfd[0]);
    assert_true(pr.bytes > 4096 + 100);

    /* threads dumping into one descriptor at once: whole profiles, one
     * after another (gzip -t reads every member) */
    const char *multi = path_in_dir("prof-multi.pb.gz");
    int mfd = open(multi, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    assert_true(mfd >= 0);
    snprintf(fdname, sizeof fdname, "/dev/fd/%d", mfd);
    run_four(dump_ten_times, fdname);
    close(mfd);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "gzip -t '%s'", multi);
    assert_int_equal(system(cmd), 0);

    /* a regular file keeps its permission bits when a dump replaces it */
    const char *priv = path_in_dir("prof-private.pb.gz");
    unlink(priv);
    int pfd0 = open(priv, O_WRONLY | O_CREAT, 0600);
    assert_true(pfd0 >= 0);
    close(pfd0);
    assert_int_equal(chmod(priv, 0600), 0);
    assert_int_equal(profmalloc_dump(priv), 0);
    assert_int_equal(stat(priv, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);

    /* a link another user planted in a sticky world-writable directory
     * (/tmp) is not followed, as the kernel's protected_symlinks would not
     * (root only: the link must belong to someone else) */
    if (geteuid() == 0) {
        const char *sticky = path_in_dir("prof-sticky");
        mkdir(sticky, 01777);
        assert_int_equal(chmod(sticky, 01777), 0);
        const char *victim = path_in_dir("prof-victim");
        FILE *vf = fopen(victim, "w");
        assert_non_null(vf);
        fputs("precious\n", vf);
        fclose(vf);
        const char *planted = path_in_dir("prof-sticky/heap.pb.gz");
        unlink(planted);
        assert_int_equal(symlink(victim, planted), 0);
        assert_int_equal(lchown(planted, 65534, 65534), 0);
        errno = 0;
        assert_int_equal(profmalloc_dump(planted), -1);
        assert_int_equal(errno, EACCES);
        size_t vlen;
        uint8_t *vtext = slurp(victim, &vlen);
        assert_true(vlen == 9 && memcmp(vtext, "precious\n", 9) == 0);
        free(vtext);
        assert_int_equal(lstat(planted, &sb), 0);
        assert_true(S_ISLNK(sb.st_mode));
        /* reached through a link of our own, and leading to a device */
        const char *dev = path_in_dir("prof-null");
        unlink(dev);
        assert_int_equal(mknod(dev, S_IFCHR | 0666, makedev(1, 3)), 0);
        unlink(planted);
        assert_int_equal(symlink(dev, planted), 0);
        assert_int_equal(lchown(planted, 65534, 65534), 0);
        const char *mine = path_in_dir("prof-mine");
        unlink(mine);
        assert_int_equal(symlink(planted, mine), 0);
        errno = 0;
        assert_int_equal(profmalloc_dump(mine), -1);
        assert_int_equal(errno, EACCES);
        /* the same, named through /proc */
        char via_proc[PATH_MAX + 32];
        snprintf(via_proc, sizeof via_proc, "/proc/self/root%s", mine);
        errno = 0;
        assert_int_equal(profmalloc_dump(via_proc), -1);
        assert_int_equal(errno, EACCES);
    }

    /* a dump waiting on a full pipe holds up no dump elsewhere, and
     * cancelling it leaves nothing locked (alarm: fail, not hang) */
    alarm(60);
    assert_int_equal(pipe(pfd), 0);
    assert_true(fcntl(pfd[1], F_SETPIPE_SZ, 4096) > 0);
    assert_int_equal(fcntl(pfd[1], F_SETFL, O_NONBLOCK), 0);
    while (write(pfd[1], fill, sizeof fill) > 0) {
    }
    char stuck[32];
    snprintf(stuck, sizeof stuck, "/dev/fd/%d", pfd[1]);
    pthread_t waiter;
    assert_int_equal(pthread_create(&waiter, NULL, dump_once, stuck), 0);
    usleep(100000); /* it now waits in poll, for a reader */
    int other = open(path_in_dir("prof-other.pb.gz"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(other >= 0);
    for (int i = 0; i < 3; i++) { /* other descriptors, one 16 above the waiter's */
        int d = i < 2 ? dup(other) : dup2(other, pfd[1] + 16);
        assert_true(d >= 0 && d != pfd[1]);
        snprintf(fdname, sizeof fdname, "/dev/fd/%d", d);
        assert_int_equal(profmalloc_dump(fdname), 0);
        close(d);
    }
    close(other);
    assert_int_equal(pthread_cancel(waiter), 0);
    assert_int_equal(fcntl(pfd[0], F_SETFL, O_NONBLOCK), 0);
    char drain[4096];
    void *wr;
    for (;;) { /* read until the cancelled dump has finished and its thread ended */
        while (read(pfd[0], drain, sizeof drain) > 0) {
        }
        if (pthread_tryjoin_np(waiter, &wr) == 0) break;
        usleep(1000);
    }
    assert_true(fcntl(pfd[1], F_SETPIPE_SZ, 1 << 20) > 0); /* room for one more, unread */
    assert_int_equal(profmalloc_dump(stuck), 0); /* its lock is free again */
    close(pfd[1]);
    close(pfd[0]);
    alarm(0);

    /* a relative link to a regular file in another directory: the file is
     * replaced (whole, through a temporary there), the link stays */
    mkdir(path_in_dir("prof-linkdir"), 0755);
    const char *file = path_in_dir("prof-linkdir/real.pb.gz");
    unlink(file);
    const char *link = path_in_dir("prof-link.pb.gz");
    unlink(link);
    assert_int_equal(symlink("prof-linkdir/real.pb.gz", link), 0);
    for (int i = 0; i < 2; i++) { /* creates the file, then replaces it */
        assert_int_equal(profmalloc_dump(link), 0);
        assert_int_equal(lstat(link, &sb), 0);
        assert_true(S_ISLNK(sb.st_mode));
        assert_int_equal(lstat(file, &sb), 0);
        assert_true(S_ISREG(sb.st_mode) && sb.st_size > 100);
    }
    tprof_t p;
    load_profile(&p, file, NULL); /* fails the test on a torn file */
    free_profile(&p);
    DIR *d = opendir(path_in_dir("prof-linkdir"));
    assert_non_null(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));) entries += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(entries, 1); /* real.pb.gz, no temporary */
    assert_int_equal(leftover_temps(), 0);
}

static void test_legacy_format_by_name(void **state)
{
    (void)state;
    const char *path = path_in_dir("prof-legacy.heap");
    assert_int_equal(profmalloc_dump(path), 0);
    size_t len;
    uint8_t *text = slurp(path, &len);
    assert_true(strncmp((char *)text, "heap profile:", 13) == 0);
    assert_non_null(strstr((char *)text, "\nMAPPED_LIBRARIES:\n"));
    free(text);
}

/* Without /proc (a container, a chroot), a legacy dump still lists the
 * loaded objects, in /proc/self/maps' format, from the loader's list.  In a
 * child with /proc unmounted in a mount namespace of its own (root only). */
static void test_legacy_dump_without_proc(void **state)
{
    (void)state;
    const char *path = path_in_dir("prof-noproc.heap");
    unlink(path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            umount2("/proc", MNT_DETACH) != 0)
            _exit(77);
        if (access("/proc/self/maps", F_OK) == 0) _exit(77);
        keep[0] = malloc(1 << 20);
        _exit(profmalloc_dump(path) == 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) skip();
    assert_int_equal(WEXITSTATUS(status), 0);
    size_t len;
    char *text = (char *)slurp(path, &len);
    char *maps = strstr(text, "\nMAPPED_LIBRARIES:\n");
    assert_non_null(maps);
    assert_non_null(strstr(maps, "libprofmalloc.so")); /* from dl_iterate_phdr */
    assert_non_null(strstr(maps, " r-xp ")); /* code segments, perms as maps prints them */
    char exe_line[PATH_MAX + 4];
    snprintf(exe_line, sizeof exe_line, " %s\n", g_exe);
    assert_non_null(strstr(maps, exe_line)); /* the program by its absolute path */
    free(text);
}

static char *run_program(const char *env, const char *exe, const char *mode, int *status)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "env %s '%s' %s 2>&1", env, exe, mode);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    size_t r;
    while ((r = fread(out + n, 1, cap - 1 - n, f)) > 0) n += r;
    out[n] = 0;
    *status = pclose(f);
    return out;
}

static char *run_self(const char *env, const char *mode, int *status)
{
    return run_program(env, g_exe, mode, status);
}

/* Runs `exe` (this program when NULL) with `mode` and PROFMALLOC_DUMP set;
 * it prints its pid and exits with at least 8 MiB live at `site`, which its
 * exit dump must show. */
static void dump_at_exit(const char *extra_env, const char *exe, const char *mode, const char *site)
{
    char env[PATH_MAX + 128];
    snprintf(env, sizeof env, "%s PROFMALLOC_DUMP='%s/prof-exit.%%p.pb.gz'", extra_env, g_dir);
    int status;
    char *out = run_program(env, exe ? exe : g_exe, mode, &status);
    assert_int_equal(status, 0);
    int pid = atoi(out);
    assert_true(pid > 0);
    char name[64];
    snprintf(name, sizeof name, "prof-exit.%d.pb.gz", pid);
    tprof_t p;
    load_profile(&p, path_in_dir(name), NULL);
    uint64_t v[4];
    site_totals(&p, site, v);
    assert_true(v[INUSE_BYTES] >= 8u << 20);
    free_profile(&p);
    free(out);
}

static void test_dump_at_exit_with_pid(void **state)
{
    (void)state;
    dump_at_exit("", NULL, "--print-pid-and-exit", "exit_site");
}

/* A process that sampled nothing (profiling off here) writes no exit
 * dump, says so only when verbose, and writes an empty profile when
 * PROFMALLOC_DUMP_EMPTY=1 asks for one. */
static void test_exit_dump_when_empty(void **state)
{
    (void)state;
    const char *path = path_in_dir("prof-empty.pb.gz");
    char env[PATH_MAX + 160], want[PATH_MAX + 160];
    int status;
    unlink(path);
    snprintf(env, sizeof env, "PROFMALLOC_SAMPLE_RATE=0 PROFMALLOC_DUMP='%s'", path);
    char *out = run_self(env, "--print-rate", &status);
    assert_int_equal(status, 0);
    assert_string_equal(out, "rate=0\n");
    assert_int_equal(access(path, F_OK), -1);
    free(out);

    snprintf(env, sizeof env, "PROFMALLOC_SAMPLE_RATE=0 PROFMALLOC_VERBOSE=1 PROFMALLOC_DUMP='%s'", path);
    out = run_self(env, "--print-rate", &status);
    snprintf(want, sizeof want, "PROFMALLOC_DUMP: nothing sampled, no heap profile written to %s (", path);
    assert_non_null(strstr(out, want));
    assert_int_equal(access(path, F_OK), -1);
    free(out);

    snprintf(env, sizeof env, "PROFMALLOC_SAMPLE_RATE=0 PROFMALLOC_DUMP_EMPTY=1 PROFMALLOC_DUMP='%s'", path);
    out = run_self(env, "--print-rate", &status);
    assert_int_equal(status, 0);
    assert_string_equal(out, "rate=0\n");
    tprof_t p;
    load_profile(&p, path, NULL);
    assert_int_equal(p.ns, 0);
    free_profile(&p);
    unlink(path);
    free(out);
}

/* %e in PROFMALLOC_DUMP is the name the program was started by: here a
 * symlink to retitle, which also blanks its argv (so neither
 * /proc/self/exe nor argv[0] would give it). */
static void test_dump_at_exit_program_name(void **state)
{
    (void)state;
    char link[PATH_MAX + 32], env[PATH_MAX + 128];
    snprintf(link, sizeof link, "%s/renamed-prog", g_dir);
    unlink(link);
    assert_int_equal(symlink(path_in_dir("retitle"), link), 0);
    snprintf(env, sizeof env, "PROFMALLOC_DUMP='%s/%%e.%%p.pb.gz'", g_dir);
    int status;
    char *out = run_program(env, link, "", &status);
    assert_int_equal(status, 0);
    char name[64];
    snprintf(name, sizeof name, "renamed-prog.%d.pb.gz", atoi(out));
    tprof_t p;
    load_profile(&p, path_in_dir(name), NULL);
    uint64_t v[4];
    site_totals(&p, "retitle_site", v);
    assert_true(v[INUSE_BYTES] >= 8u << 20);
    free_profile(&p);
    unlink(path_in_dir(name));
    unlink(link);
    free(out);
}

/* The exit dump says nothing when it wrote its file, unless
 * PROFMALLOC_VERBOSE=1, which says where; when it could not, it says so
 * with the path and the reason in words. */
static int pid_line(const char *out)
{
    for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        if (*l >= '1' && *l <= '9' && l[strspn(l, "0123456789")] == '\n') return atoi(l);
    return -1;
}

static void test_exit_dump_messages(void **state)
{
    (void)state;
    char env[PATH_MAX + 128], want[2 * PATH_MAX];
    int status;
    snprintf(env, sizeof env, "PROFMALLOC_DUMP='%s/no-such-dir/x.%%p.pb.gz'", g_dir);
    char *out = run_self(env, "--print-pid-and-exit", &status);
    assert_int_equal(status, 0);
    snprintf(want, sizeof want,
             "profmalloc: PROFMALLOC_DUMP: could not write the heap profile to %s/no-such-dir/x.%d.pb.gz: "
             "No such file or directory\n", g_dir, pid_line(out));
    assert_non_null(strstr(out, want));
    free(out);

    snprintf(env, sizeof env, "PROFMALLOC_DUMP='%s/prof-quiet.%%p.pb.gz'", g_dir);
    out = run_self(env, "--print-pid-and-exit", &status);
    assert_int_equal(status, 0);
    assert_null(strstr(out, "profmalloc:"));
    snprintf(want, sizeof want, "%s/prof-quiet.%d.pb.gz", g_dir, pid_line(out));
    assert_int_equal(access(want, F_OK), 0);
    unlink(want);
    free(out);

    snprintf(env, sizeof env, "PROFMALLOC_VERBOSE=1 PROFMALLOC_DUMP='%s/prof-verbose.%%p.pb.gz'", g_dir);
    out = run_self(env, "--print-pid-and-exit", &status);
    assert_int_equal(status, 0);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/prof-verbose.%d.pb.gz", g_dir, pid_line(out));
    snprintf(want, sizeof want, "profmalloc: PROFMALLOC_DUMP: wrote the heap profile to %s\n", path);
    assert_non_null(strstr(out, want));
    assert_int_equal(access(path, F_OK), 0);
    unlink(path);
    free(out);
}

/* The exit dump's path survives a program that overwrites its environment
 * strings to set its process title (test/prof/retitle.c). */
static void test_dump_at_exit_after_retitle(void **state)
{
    (void)state;
    dump_at_exit("", path_in_dir("retitle"), "", "retitle_site");
}

/* PROFMALLOC_UNWIND=fp: the allocator itself has no frame pointers, so the
 * %rbp chain starts at the frame of malloc's caller (found through the
 * allocator's unwind tables); from there it reaches fp_outer. */
static void test_frame_pointer_unwind(void **state)
{
    (void)state;
    dump_at_exit("PROFMALLOC_UNWIND=fp", NULL, "--fp-chain-and-exit", "fp_outer");
}

static void test_malformed_option_reported_once(void **state)
{
    (void)state;
    int status;
    char *out = run_self("PROFMALLOC_SAMPLE_RATE=12x", "--print-rate", &status);
    assert_int_equal(status, 0);
    const char *msg = "ignoring malformed PROFMALLOC_SAMPLE_RATE";
    char *first = strstr(out, msg);
    assert_non_null(first);
    assert_null(strstr(first + 1, msg));
    assert_non_null(strstr(out, "rate=524288"));
    free(out);
    out = run_self("PROFMALLOC_SAMPLE_RATE=2M", "--print-rate", &status);
    assert_non_null(strstr(out, "rate=2097152"));
    assert_null(strstr(out, "malformed"));
    free(out);
}

/* AT_SECURE: a set-user-ID program ignores PROFMALLOC_* (as glibc ignores
 * its tunables).  Needs root to make the binary and an unprivileged user. */
static void test_setuid_ignores_options(void **state)
{
    (void)state;
    if (geteuid() != 0 || system("command -v su >/dev/null 2>&1 && id nobody >/dev/null 2>&1") != 0)
        skip();
    char dir[] = "/tmp/pm-suid-XXXXXX";
    assert_non_null(mkdtemp(dir));
    chmod(dir, 0755);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp '%s' %s/prog && chmod 4755 %s/prog", g_exe, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "su nobody -s /bin/sh -c 'PROFMALLOC_SAMPLE_RATE=1 %s/prog --print-rate' 2>&1", dir);
    FILE *f = popen(cmd, "r");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    int status = pclose(f);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    if (status != 0 && strstr(buf, "error while loading shared libraries")) skip(); /* build dir unreadable */
    assert_int_equal(status, 0);
    assert_non_null(strstr(buf, "rate=524288")); /* the default, not 1 */
}

static void test_go_pprof_shows_sites(void **state)
{
    (void)state;
    if (system("command -v go >/dev/null 2>&1") != 0) skip();
    profmalloc_set_sample_rate(1);
    site_small_keep(1000);
    const char *path = path_in_dir("prof-go.pb.gz");
    assert_int_equal(profmalloc_dump(path), 0);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "go tool pprof -top -sample_index=inuse_space '%s' '%s' 2>&1", g_exe, path);
    FILE *f = popen(cmd, "r");
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    assert_int_equal(pclose(f), 0);
    assert_non_null(strstr(buf, "site_small_keep"));
    /* a cgo user's view: a Go heap profile and ours in one session */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && GOCACHE='%s/gocache' go build -o goheap '%s/test/prof/goheap/main.go' 2>&1 && "
             "./goheap go-heap.pb.gz && go tool pprof -top go-heap.pb.gz '%s' 2>&1",
             g_dir, g_dir, PM_SOURCE_DIR, path);
    f = popen(cmd, "r");
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    assert_int_equal(pclose(f), 0);
    assert_non_null(strstr(buf, "site_small_keep")); /* ours */
    assert_non_null(strstr(buf, "main.main"));       /* Go's */
    free_kept();
    profmalloc_set_sample_rate(512 * 1024);
}

__attribute__((noinline)) static void exit_site(void) { keep[0] = malloc(8u << 20); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--print-pid-and-exit") == 0) {
        profmalloc_set_sample_rate(1);
        exit_site();
        printf("%d\n", (int)getpid());
        return 0; /* exit() runs the dump */
    }
    if (argc > 1 && strcmp(argv[1], "--fp-chain-and-exit") == 0) {
        profmalloc_set_sample_rate(1);
        keep[1] = fp_outer(8u << 20);
        printf("%d\n", (int)getpid());
        return 0; /* exit() runs the dump */
    }
    if (argc > 1 && strcmp(argv[1], "--print-rate") == 0) {
        churn(10); /* options are read at the first allocation */
        printf("rate=%zu\n", profmalloc_get_sample_rate());
        return 0;
    }
    if (!realpath("/proc/self/exe", g_exe)) return 2;
    snprintf(g_dir, sizeof g_dir, "%s", g_exe);
    *strrchr(g_dir, '/') = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimates_at_moderate_rate),
        cmocka_unit_test(test_exact_at_rate_one),
        cmocka_unit_test(test_stack_without_frame_pointers),
        cmocka_unit_test(test_makecontext_stack),
        cmocka_unit_test(test_dump_while_threads_allocate),
        cmocka_unit_test(test_concurrent_dumps_to_one_path),
        cmocka_unit_test(test_fork_while_dumping),
        cmocka_unit_test(test_fork_child_dumps_its_own),
        cmocka_unit_test(test_realloc_of_sampled_blocks),
        cmocka_unit_test(test_realloc_of_sampled_large_blocks),
        cmocka_unit_test(test_realloc_shrinks_sampled_large_block),
        cmocka_unit_test(test_realloc_grows_sampled_large_block),
        cmocka_unit_test(test_aligned_small_blocks_record_requested_size),
        cmocka_unit_test(test_sampled_after_thread_cache_flush),
        cmocka_unit_test(test_reports_on_a_small_stack),
        cmocka_unit_test(test_free_from_another_thread),
        cmocka_unit_test(test_live_samples_never_fall),
        cmocka_unit_test(test_allocation_before_constructors),
        cmocka_unit_test(test_dump_errors_leave_nothing),
        cmocka_unit_test(test_dump_to_special_files),
        cmocka_unit_test(test_legacy_format_by_name),
        cmocka_unit_test(test_legacy_dump_without_proc),
        cmocka_unit_test(test_dump_at_exit_with_pid),
        cmocka_unit_test(test_dump_at_exit_after_retitle),
        cmocka_unit_test(test_exit_dump_messages),
        cmocka_unit_test(test_dump_at_exit_program_name),
        cmocka_unit_test(test_exit_dump_when_empty),
        cmocka_unit_test(test_frame_pointer_unwind),
        cmocka_unit_test(test_malformed_option_reported_once),
        cmocka_unit_test(test_setuid_ignores_options),
        cmocka_unit_test(test_go_pprof_shows_sites),
    };
    return cmocka_run_group_tests_name("profiler", tests, NULL, NULL);
}
