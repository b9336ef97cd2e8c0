/* test_harden.c — misuse, exhaustion and abuse of the public API, each case
 * in a forked child: double frees (same thread, other thread, after other
 * frees, through realloc), forged free-list links, frees of pointers no
 * malloc returned, recovery after RLIMIT_AS ran out, threads born in the
 * last round of key destructors, the profiler's memory at sample rate 1.
 * Linked with -lprofmalloc (the library is the program's malloc); the
 * misuse cases glibc also catches compare only the outcome, ours names
 * the call and the address (expect_child_abort). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../unit/child_stderr.h"

#include "profmalloc.h"

static volatile size_t vsize = 100; /* keeps the compiler off the calls */

/* ---- helpers ---------------------------------------------------------- */

/* The child's exit status must be 0; a non-zero status names the step
 * that failed (the child's own _exit codes). */
static void expect_child_ok(void (*fn)(void *), void *arg, const char *label)
{
    char out[2048];
    int st = run_in_child(fn, arg, out, sizeof out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("%s: child status %#x (exit %d), stderr \"%s\"", label, (unsigned)st,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
}

static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* RLIMIT_AS at what is mapped now plus `extra` bytes. */
static void limit_as(size_t extra)
{
    struct rlimit r;
    r.rlim_cur = r.rlim_max = vm_size() + extra;
    if (setrlimit(RLIMIT_AS, &r) != 0) _exit(90);
}

/* ---- double frees ------------------------------------------------------ */

static void *volatile blk_a, *volatile blk_b;

static void df_abab(void *arg)
{
    (void)arg;
    free(blk_b);
    free(blk_a); /* b's free made a no longer the list's head */
}

static void df_after_many(void *arg)
{
    (void)arg;
    void *others[1000];
    for (int i = 0; i < 1000; i++) others[i] = malloc(vsize);
    for (int i = 0; i < 1000; i++) free(others[i]);
    free(blk_a);
}

static void *free_it(void *p)
{
    free(p);
    return NULL;
}

static void df_other_thread(void *arg)
{
    (void)arg;
    pthread_t t;
    if (pthread_create(&t, NULL, free_it, blk_a) || pthread_join(t, NULL)) _exit(3);
}

static void df_realloc(void *arg)
{
    (void)arg;
    void *volatile q = realloc(blk_a, 5000); /* another class: a move, then a free */
    (void)q;
}

/* glibc: "free(): double free detected in tcache 2".  The cycle these made
 * in the thread's list handed out two blocks forever. */
static void test_double_free_same_class(void **state)
{
    (void)state;
    blk_a = malloc(vsize);
    blk_b = malloc(vsize);
    free(blk_a);
    /* in the child: free(b); free(a) */
    expect_child_abort(df_abab, NULL, "free(): double free detected", blk_a, "free(a) free(b) free(a)");
    expect_child_abort(df_after_many, NULL, "free(): double free detected", blk_a,
                       "free(a), 1000 frees of its class, free(a)");
    expect_child_abort(df_other_thread, NULL, "free(): double free detected", blk_a,
                       "free(a), then free(a) in another thread");
    expect_child_abort(df_realloc, NULL, "realloc(): double free detected", blk_a,
                       "free(a), then realloc(a) to another class");
    free(blk_b);
}

static void *hold_and_free(void *arg)
{
    void **slot = arg;
    free(*slot);
    return NULL;
}

/* A block another thread freed while that thread lives on (its cache
 * holds the block), freed again here. */
static void df_two_live_threads(void *arg)
{
    (void)arg;
    void *p = malloc(vsize);
    blk_a = p;
    pthread_t t;
    if (pthread_create(&t, NULL, hold_and_free, (void *)&blk_a) || pthread_join(t, NULL)) _exit(3);
    free(p);
}

static void test_double_free_cross_thread(void **state)
{
    (void)state;
    char out[512];
    int st = run_in_child(df_two_live_threads, NULL, out, sizeof out);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT || !strstr(out, "free(): double free detected"))
        fail_msg("no abort: status %#x, stderr \"%s\"", (unsigned)st, out);
}

/* ---- forged links -------------------------------------------------------- */

static void forge_link(void *arg)
{
    void **p = malloc(vsize);
    void **q = malloc(vsize);
    free(q);
    free(p); /* p heads the list, q after it */
    p[0] = arg; /* a write after free: the link now leads to arg */
    void *x = malloc(vsize);
    void *y = malloc(vsize);
    void *z = malloc(vsize);
    /* not reached: the list led to arg */
    fprintf(stderr, "handed out %p %p %p\n", x, y, z);
    _exit(0);
}

/* A write after free that sets the link (the classic tcache poisoning),
 * here to a stack address and to a small integer. */
static void test_forged_link_aborts(void **state)
{
    (void)state;
    const char *hard = getenv("PM_TEST_HARDENED");
    if (!hard || strcmp(hard, "1") != 0) {
        printf("test_forged_link_aborts: links are checked in the hardened build (make check-hardened)\n");
        skip();
    }
    static char target[256] __attribute__((aligned(16)));
    const void *forged[] = {target, (void *)0x41414141, NULL};
    for (int i = 0; forged[i]; i++) {
        char out[512];
        int st = run_in_child(forge_link, (void *)forged[i], out, sizeof out);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT || !strstr(out, "profmalloc: malloc(): corrupted free list"))
            fail_msg("forged link %p: status %#x, stderr \"%s\"", forged[i], (unsigned)st, out);
    }
}

/* ---- pointers no malloc returned (these already abort) ------------------ */

static void free_child(void *p) { free(p); }

static void test_invalid_pointers(void **state)
{
    (void)state;
    static char in_data[64] __attribute__((aligned(16)));
    int on_stack[4];
    char *small = malloc(48);
    char *large = malloc(1 << 20);
    void *mapped = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *(*libc_malloc)(size_t) = libc ? (void *(*)(size_t))dlsym(libc, "malloc") : NULL;
    assert_non_null(libc_malloc);
    void *theirs = libc_malloc(64); /* the C library's own allocator */
    assert_true(mapped != MAP_FAILED);
    assert_non_null(theirs);
    expect_child_abort(free_child, on_stack, "free(): invalid pointer", on_stack, "stack");
    expect_child_abort(free_child, in_data, "free(): invalid pointer", in_data, "static");
    expect_child_abort(free_child, small + 16, "free(): invalid pointer", small + 16, "interior");
    expect_child_abort(free_child, small + 1, "free(): invalid pointer", small + 1, "misaligned");
    expect_child_abort(free_child, large + 8, "free(): invalid pointer", large + 8, "misaligned large");
    expect_child_abort(free_child, mapped, "free(): invalid pointer", mapped, "mmap'd");
    expect_child_abort(free_child, theirs, "free(): invalid pointer", theirs, "another allocator's block");
    free(small);
    free(large);
    munmap(mapped, 1 << 16);
}

/* ---- recovery after RLIMIT_AS ran out ---------------------------------- */

#define MAX_FILL 200000
static void *fill[MAX_FILL];

/* Fills with aligned blocks until the limit refuses one, frees them all;
 * malloc(1 MiB) must then succeed, as glibc's does. */
static void aligned_fill(void *arg)
{
    (void)arg;
    /* ulimit -v 400000, as the failure was first seen */
    struct rlimit r = {(rlim_t)400000 << 10, (rlim_t)400000 << 10};
    if (vm_size() > r.rlim_cur / 2 || setrlimit(RLIMIT_AS, &r) != 0) _exit(90);
    size_t n = 0;
    while (n < MAX_FILL && posix_memalign(&fill[n], 262144, 40000) == 0) n++;
    if (n == 0 || n == MAX_FILL) _exit(2);
    for (size_t i = 0; i < n; i++) free(fill[i]);
    void *p = malloc(1 << 20);
    if (!p) _exit(3);
    memset(p, 1, 1 << 20);
    free(p);
    /* and again after a fill with small blocks, in two threads' caches */
    n = 0;
    while (n < MAX_FILL && (fill[n] = malloc(30000))) n++;
    if (n == MAX_FILL) _exit(4);
    for (size_t i = 0; i < n; i++) free(fill[i]);
    p = malloc((size_t)64 << 20);
    if (!p) _exit(5);
    free(p);
    _exit(0);
}

static void test_recovery_after_aligned_fill(void **state)
{
    (void)state;
    expect_child_ok(aligned_fill, NULL, "aligned fill under RLIMIT_AS, then malloc(1 MiB)");
}

/* Rate 1, small blocks until NULL, all freed: the profiler's records go
 * with their samples, and malloc(120 MiB) fits again in the 160 MiB. */
static void rate1_fill(void *arg)
{
    (void)arg;
    profmalloc_set_sample_rate(1);
    limit_as((size_t)160 << 20);
    static void *blocks[4 << 20];
    size_t n = 0;
    while (n < sizeof blocks / sizeof blocks[0] && (blocks[n] = malloc(48))) n++;
    if (n == sizeof blocks / sizeof blocks[0]) _exit(2);
    for (size_t i = 0; i < n; i++) free(blocks[i]);
    void *p = malloc((size_t)120 << 20);
    if (!p) _exit(3);
    free(p);
    _exit(0);
}

static void test_rate1_metadata_returned(void **state)
{
    (void)state;
    expect_child_ok(rate1_fill, NULL, "rate 1 fill and free under RLIMIT_AS, then malloc(120 MiB)");
}

/* A dump right after malloc ran out and memory came back. */
static void dump_after_oom(void *arg)
{
    const char *dir = arg;
    char path[256];
    snprintf(path, sizeof path, "%s/after-oom.heap", dir);
    limit_as((size_t)48 << 20);
    size_t n = 0;
    while (n < MAX_FILL && (fill[n] = malloc(4000))) n++;
    if (n == MAX_FILL) _exit(2);
    for (size_t i = 0; i < n; i++) free(fill[i]);
    void *p = malloc(100);
    if (!p) _exit(3);
    free(p);
    if (profmalloc_dump(path) != 0) _exit(4);
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size == 0) _exit(5);
    unlink(path);
    _exit(0);
}

/* The exit dump (PROFMALLOC_DUMP) after an OOM episode: this program run
 * again with an argument, the variable set, its files counted after. */
static int exit_dump_child(void)
{
    limit_as((size_t)48 << 20);
    size_t n = 0;
    while (n < MAX_FILL && (fill[n] = malloc(4000))) n++;
    for (size_t i = 0; i < n; i++) free(fill[i]);
    return n == 0 || n == MAX_FILL ? 2 : 0; /* exit writes the profile */
}

static char self_path[4096];

static void test_exit_dump_after_oom(void **state)
{
    (void)state;
    char dir[] = "/tmp/pm-harden-exit-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char pattern[256];
    snprintf(pattern, sizeof pattern, "PROFMALLOC_DUMP=%s/exit.%%p.heap", dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[] = {self_path, "exit-dump-child", NULL};
        /* the library under test, when it is preloaded (check-hardened) */
        char preload[4200];
        const char *pre = getenv("LD_PRELOAD");
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", pre ? pre : "");
        char *envp[] = {pattern, pre ? preload : NULL, NULL};
        execve(self_path, argv, envp);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char path[300];
    snprintf(path, sizeof path, "%s/exit.%d.heap", dir, (int)pid);
    struct stat sb;
    int found = stat(path, &sb) == 0 && sb.st_size > 0;
    unlink(path);
    rmdir(dir);
    if (!found) fail_msg("no exit dump at %s", path);
}

static void test_dump_after_oom(void **state)
{
    (void)state;
    char dir[] = "/tmp/pm-harden-XXXXXX";
    assert_non_null(mkdtemp(dir));
    expect_child_ok(dump_after_oom, dir, "profmalloc_dump after an OOM episode");
    rmdir(dir);
}

/* ---- threads born in the last round of key destructors ----------------- */

static pthread_key_t late_key;
static _Atomic int late_rounds_done;

static void late_dtor(void *v)
{
    uintptr_t round = (uintptr_t)v;
    if (round < 4) { /* PTHREAD_DESTRUCTOR_ITERATIONS */
        pthread_setspecific(late_key, (void *)(round + 1));
        return;
    }
    /* the thread's first allocations: a few classes, kept in its cache */
    for (size_t sz = 16; sz <= 4096; sz *= 2) free(malloc(sz));
    late_rounds_done++;
}

static void *late_thread(void *arg)
{
    pthread_setspecific(late_key, (void *)1);
    return arg;
}

static void late_threads(void *arg)
{
    (void)arg;
    if (pthread_key_create(&late_key, late_dtor) != 0) _exit(2);
    int nthreads = 20000;
    /* warm up, so what the first threads set up is not counted */
    for (int i = 0; i < 200; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, late_thread, NULL) || pthread_join(t, NULL)) _exit(3);
    }
    profmalloc_stats_t before, after;
    profmalloc_get_stats(&before);
    for (int i = 0; i < nthreads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, late_thread, NULL) || pthread_join(t, NULL)) _exit(3);
    }
    profmalloc_get_stats(&after);
    if (late_rounds_done != nthreads + 200) _exit(4);
    /* 117 MB before: every thread's cache was lost */
    uint64_t grew = after.mapped - before.mapped;
    if (after.mapped > before.mapped && grew > ((uint64_t)8 << 20)) {
        fprintf(stderr, "mapped grew by %llu bytes, thread caches %llu\n", (unsigned long long)grew,
                (unsigned long long)after.thread_cache);
        _exit(5);
    }
    _exit(0);
}

static void test_threads_born_in_destructors(void **state)
{
    (void)state;
    expect_child_ok(late_threads, NULL, "20 000 threads allocating in their last destructor round");
}

/* ---- the profiler's memory with many sizes at one site ------------------ */

/* The live objects and bytes of a legacy dump's header, written to and
 * read back from a temporary file. */
static int legacy_totals(unsigned long long *objs, unsigned long long *bytes)
{
    char path[] = "/tmp/pm-harden-totals-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    unlink(path);
    int rc = profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_LEGACY);
    FILE *f = rc == 0 && lseek(fd, 0, SEEK_SET) == 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        close(fd);
        return -1;
    }
    rc = fscanf(f, "heap profile: %llu: %llu", objs, bytes) == 2 ? 0 : -1;
    fclose(f);
    return rc;
}

static void many_sizes(void *arg)
{
    (void)arg;
    profmalloc_set_sample_rate(1);
    profmalloc_stats_t s0, s1;
    profmalloc_get_stats(&s0);
    for (size_t sz = 1; sz <= 300000; sz++) {
        void *p = malloc(sz);
        if (!p) _exit(2);
        ((volatile char *)p)[0] = 1;
        if (sz % 2) free(p);
        else fill[sz % MAX_FILL] = p, free(p);
    }
    profmalloc_get_stats(&s1);
    /* 3000 live blocks of sizes 1..3000 at one site: the profile's totals
     * stay exact (rate 1) though most sizes share group buckets */
    static void *live[3000];
    uint64_t want = 0;
    for (size_t i = 0; i < 3000; i++) want += i + 1;
    unsigned long long o0, b0, o1, b1;
    if (legacy_totals(&o0, &b0) != 0) _exit(7);
    for (size_t i = 0; i < 3000; i++) live[i] = malloc(i + 1);
    if (legacy_totals(&o1, &b1) != 0) _exit(8);
    for (size_t i = 0; i < 3000; i++) free(live[i]);
    /* the second dump's temporary file and stream are sampled too */
    if (o1 - o0 < 3000 || o1 - o0 > 3004 || b1 - b0 < want || b1 - b0 > want + 4096) {
        fprintf(stderr, "live %llu objects %llu bytes, want 3000 and %llu\n", o1 - o0, b1 - b0,
                (unsigned long long)want);
        _exit(13);
    }
    /* one site: its buckets must not grow with the number of sizes (66 MB
     * for a million sizes before) */
    uint64_t grew = s1.metadata > s0.metadata ? s1.metadata - s0.metadata : 0;
    if (grew > ((uint64_t)4 << 20)) {
        fprintf(stderr, "metadata grew by %llu bytes\n", (unsigned long long)grew);
        _exit(3);
    }
    char path[] = "/tmp/pm-harden-sizes-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) _exit(4);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (profmalloc_dump_fd(fd, 0) != 0) _exit(5);
    clock_gettime(CLOCK_MONOTONIC, &b);
    struct stat st;
    fstat(fd, &st);
    close(fd);
    unlink(path);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    if (st.st_size > (1 << 20) || secs > 0.5) {
        fprintf(stderr, "dump %lld bytes in %.3f s\n", (long long)st.st_size, secs);
        _exit(6);
    }
    _exit(0);
}

static void test_site_table_bounded(void **state)
{
    (void)state;
    expect_child_ok(many_sizes, NULL, "300 000 sizes at one site, rate 1");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "exit-dump-child") == 0) return exit_dump_child();
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0) return 1;
    self_path[n] = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_free_same_class),
        cmocka_unit_test(test_double_free_cross_thread),
        cmocka_unit_test(test_forged_link_aborts),
        cmocka_unit_test(test_invalid_pointers),
        cmocka_unit_test(test_recovery_after_aligned_fill),
        cmocka_unit_test(test_rate1_metadata_returned),
        cmocka_unit_test(test_dump_after_oom),
        cmocka_unit_test(test_exit_dump_after_oom),
        cmocka_unit_test(test_threads_born_in_destructors),
        cmocka_unit_test(test_site_table_bounded),
    };
    return cmocka_run_group_tests_name("harden", tests, NULL, NULL);
}
