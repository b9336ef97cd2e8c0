/* test_os_linux.c — unit tests of src/os_linux.c's file and memory calls
 * for the profiler (pm_os.h): each does what the system call it wraps
 * does, and keeps errno where the contract says so; and of the lock's
 * slow path (pm_lock_wait_slow). */
#include "core_test.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh directory for one test, removed by rm_dir. */
static void make_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/pm_os_test.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void test_os_map_file(void **state)
{
    (void)state;
    char dir[256], path[300], empty[300];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/f", dir);
    snprintf(empty, sizeof empty, "%s/e", dir);
    write_file(path, "profmalloc");
    write_file(empty, "");
    size_t len = 0;
    errno = 1234;
    const char *p = pm_os_map_file(path, &len);
    assert_non_null(p);
    assert_int_equal(len, 10);
    assert_memory_equal(p, "profmalloc", 10);
    assert_int_equal(pm_os_unmap((void *)p, len), 0);
    /* nothing to map: an empty file, a directory, no file; errno kept */
    assert_null(pm_os_map_file(empty, &len));
    assert_null(pm_os_map_file(dir, &len));
    snprintf(path, sizeof path, "%s/missing", dir);
    assert_null(pm_os_map_file(path, &len));
    assert_int_equal(errno, 1234);
    unlink(empty);
    snprintf(path, sizeof path, "%s/f", dir);
    unlink(path);
    rmdir(dir);
}

static void test_os_stat_and_links(void **state)
{
    (void)state;
    char dir[256], file[300], link[300], buf[300];
    make_dir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/f", dir);
    snprintf(link, sizeof link, "%s/l", dir);
    write_file(file, "x");
    assert_int_equal(symlink("f", link), 0);
    struct stat st;
    assert_int_equal(pm_os_stat(link, &st, 0), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(pm_os_stat(link, &st, 1), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_size, 1);
    ssize_t n = pm_os_readlink(link, buf, sizeof buf);
    assert_int_equal(n, 1);
    assert_memory_equal(buf, "f", 1);
    int fd = open(file, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pm_os_fchmod(fd, 0600), 0);
    assert_int_equal(pm_os_stat(file, &st, 1), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    close(fd);
    assert_int_equal(pm_os_geteuid(), geteuid());
    char cwd[4096], mine[4096];
    assert_ptr_equal(pm_os_getcwd(cwd, sizeof cwd), cwd);
    assert_non_null(getcwd(mine, sizeof mine));
    assert_string_equal(cwd, mine);
    unlink(link);
    unlink(file);
    rmdir(dir);
}

static void test_os_set_blocking(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    assert_true(fcntl(p[1], F_GETFL) & O_NONBLOCK);
    assert_int_equal(pm_os_set_blocking(p[1]), 0);
    assert_false(fcntl(p[1], F_GETFL) & O_NONBLOCK);
    close(p[0]);
    close(p[1]);
    assert_int_equal(pm_os_set_blocking(p[1]), -1); /* closed */
}

/* A private file mapping's written page reads as the file again once
 * discarded (what the unwinder relies on never to happen to a page that
 * was written: it discards read-only segments only). */
static void test_os_discard(void **state)
{
    (void)state;
    char dir[256], path[300];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/f", dir);
    write_file(path, "file bytes");
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    long page = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    assert_true(m != MAP_FAILED);
    close(fd);
    memcpy(m, "FILE", 4);
    assert_memory_equal(m, "FILE bytes", 10);
    errno = 77;
    pm_os_discard(m, (size_t)page);
    assert_int_equal(errno, 77);
    assert_memory_equal(m, "file bytes", 10);
    munmap(m, (size_t)page);
    unlink(path);
    rmdir(dir);
}

static void *robust_in_thread(void *arg)
{
    *(int *)arg = pm_os_has_robust_list();
    return NULL;
}

/* glibc registers a robust list for the main thread and each thread it
 * starts (tcache.c's registry relies on it where the kernel allows). */
/* Aligned mappings are tried right below the last one, at the alignment:
 * each lands there whole (no slack mapped and unmapped: pm_os_counts
 * counts the slack's unmaps as munmap calls), the two touch,
 * and the kernel makes them one mapping.  A mapping that sits where the
 * hint points is never replaced: the next one goes elsewhere, aligned. */
static int mappings_covering(uintptr_t lo, uintptr_t hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a < hi && b > lo) n++;
    }
    fclose(f);
    return n;
}

static void test_os_aligned_map_at_hint(void **state)
{
    (void)state;
    enum { SIZE = 1 << 20, ALIGN = 64 << 10 };
    pm_os_counts_t c0, c1;
    char *a = pm_os_map(SIZE, ALIGN);
    pm_os_counts(&c0);
    char *b = pm_os_map(SIZE, ALIGN);
    pm_os_counts(&c1);
    assert_true(a && b);
    assert_int_equal(c1.mmap_calls - c0.mmap_calls, 1);
    assert_int_equal(c1.munmap_calls - c0.munmap_calls, 0); /* no slack unmapped */
    assert_int_equal((uintptr_t)a % ALIGN, 0);
    assert_int_equal((uintptr_t)b % ALIGN, 0);
    assert_ptr_equal(b + SIZE, a); /* right below, on the alignment */
    assert_int_equal(mappings_covering((uintptr_t)b, (uintptr_t)a + SIZE), 1);
    /* something of the program's where the next hint points: kept */
    char *own = mmap(b - SIZE, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    assert_ptr_equal(own, b - SIZE);
    own[0] = 42;
    char *c = pm_os_map(SIZE, ALIGN);
    assert_non_null(c);
    assert_int_equal((uintptr_t)c % ALIGN, 0);
    assert_true(c + SIZE <= own || c >= own + SIZE);
    assert_int_equal(own[0], 42);
    munmap(own, SIZE);
    assert_int_equal(pm_os_unmap(a, SIZE), 0);
    assert_int_equal(pm_os_unmap(b, SIZE), 0);
    assert_int_equal(pm_os_unmap(c, SIZE), 0);
}

/* A heap run unmapped above the hint raises it: the next mapping takes the
 * hole, so a heap that maps a run and unmaps an older one, over and over,
 * stays in one window of address space instead of walking down it (each
 * 2 GiB a page-map leaf never freed).  Other unmaps leave the hint. */
static void test_os_unmap_raises_hint(void **state)
{
    (void)state;
    enum { SIZE = 2 << 20, ALIGN = 8 << 10, ROUNDS = 4096 };
    /* an unmap that is not the heap's leaves the hint where it was */
    char *a = pm_os_map(SIZE, ALIGN), *b = pm_os_map(SIZE, ALIGN);
    assert_true(a && b);
    assert_ptr_equal(b + SIZE, a);
    assert_int_equal(pm_os_unmap(a, SIZE), 0);
    char *c = pm_os_map(SIZE, ALIGN);
    assert_ptr_equal(c + SIZE, b); /* below b, not in a's hole */
    /* a heap run's raises it: the next mapping takes the hole */
    assert_int_equal(pm_os_unmap_heap(b, SIZE), 0);
    char *d = pm_os_map(SIZE, ALIGN);
    assert_ptr_equal(d, b);
    /* and a heap that maps a run and unmaps the last one, 8 GiB in all,
     * stays in one window of address space */
    uintptr_t lo = (uintptr_t)c, hi = (uintptr_t)d + SIZE;
    char *live = d;
    for (int i = 0; i < ROUNDS; i++) {
        char *next = pm_os_map(SIZE, ALIGN);
        assert_non_null(next);
        if ((uintptr_t)next < lo) lo = (uintptr_t)next;
        if ((uintptr_t)next + SIZE > hi) hi = (uintptr_t)next + SIZE;
        assert_int_equal(pm_os_unmap_heap(live, SIZE), 0);
        live = next;
    }
    assert_true(hi - lo <= (uintptr_t)8 * SIZE);
    assert_int_equal(pm_os_unmap(live, SIZE), 0);
    assert_int_equal(pm_os_unmap(c, SIZE), 0);
}

static void test_os_robust_list(void **state)
{
    (void)state;
    int in_thread = -1;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, robust_in_thread, &in_thread), 0);
    pthread_join(t, NULL);
    assert_int_equal(in_thread, pm_os_has_robust_list());
    if (!in_thread) skip(); /* qemu-user, a seccomp filter: no robust lists */
    assert_int_equal(in_thread, 1);
}

/* ---- the lock ------------------------------------------------------------ */

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct {
    pm_lock_t *lock;
    uint64_t *counter; /* written only under lock */
    int rounds;
} lock_arg_t;

static void *lock_counter(void *p)
{
    lock_arg_t *a = p;
    for (int i = 0; i < a->rounds; i++) {
        pm_lock(a->lock);
        uint64_t v = *(volatile uint64_t *)a->counter;
        if (i % 512 == 0) usleep(200); /* held off CPU: waiters sleep on the futex */
        *(volatile uint64_t *)a->counter = v + 1;
        pm_unlock(a->lock);
    }
    return NULL;
}

/* Four threads (more than the cores of a small machine) add to one
 * counter under the lock, a holder now and then sleeping with it held:
 * no increment is lost, whether a waiter spun or slept. */
static void test_lock_excludes(void **state)
{
    (void)state;
    static pm_lock_t lock = PM_LOCK_INIT;
    uint64_t counter = 0;
    enum { THREADS = 4, ROUNDS = 20000 };
    pthread_t t[THREADS];
    lock_arg_t a = {&lock, &counter, ROUNDS};
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, lock_counter, &a), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    assert_int_equal(counter, (uint64_t)THREADS * ROUNDS);
    assert_int_equal(atomic_load(&lock.state), 0);
    assert_true(pm_relaxed_load(&lock.contended) > 0); /* the slow path ran */
}

typedef struct {
    pm_lock_t lock;
    _Atomic int word; /* the futex of a plain sleep (no lock) */
    int plain;
    sem_t held;
    _Atomic uint64_t released_ns; /* when the holder let go */
} holder_arg_t;

#define HOLD_NS 5000000u

/* Holds the lock (or, plain, keeps the word at 0) for HOLD_NS off its
 * CPU. */
static void *hold_lock(void *p)
{
    holder_arg_t *a = p;
    if (!a->plain) pm_lock(&a->lock);
    sem_post(&a->held);
    uint64_t until = mono_ns() + HOLD_NS;
    while (mono_ns() < until) usleep(1000);
    atomic_store(&a->released_ns, mono_ns());
    if (a->plain) {
        atomic_store(&a->word, 1);
        pm_os_futex_wake(&a->word, 1);
    } else {
        pm_unlock(&a->lock);
    }
    return NULL;
}

/* The CPU time this thread spends waiting for a holder off its CPU: in
 * pm_lock, or plain, in a futex wait alone (what sleeping and waking cost
 * here). */
static uint64_t wait_cpu(int plain)
{
    holder_arg_t a = {.lock = PM_LOCK_INIT, .plain = plain};
    sem_init(&a.held, 0, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_lock, &a), 0);
    while (sem_wait(&a.held) != 0) {}
    uint64_t c0 = thread_cpu_ns(), w0 = mono_ns();
    if (plain) {
        while (!atomic_load(&a.word)) pm_os_futex_wait(&a.word, 0);
    } else {
        pm_lock(&a.lock);
    }
    uint64_t cpu = thread_cpu_ns() - c0, got = mono_ns();
    if (!plain) pm_unlock(&a.lock);
    pthread_join(t, NULL);
    sem_destroy(&a.held);
    /* it did wait for the holder (not timed from sem_wait's return: on a
     * busy machine this thread may run again only after the release) */
    assert_true(got >= atomic_load(&a.released_ns) && got > w0);
    return cpu;
}

/* A waiter whose lock stays held by a thread off its CPU spins
 * PM_LOCK_SPIN pauses and then sleeps on the futex: it spends no more
 * CPU time than a plain futex sleep and a few pauses, however long it
 * waits (a waiter that spun 2000 pauses, 50 us here, burnt time slices
 * the holder needed on a machine with more threads than cores).  The
 * bound is calibrated here: pauses timed, a plain sleep measured. */
static void test_lock_waiter_sleeps(void **state)
{
    (void)state;
    uint64_t t0 = thread_cpu_ns();
    for (int i = 0; i < 20000; i++) __builtin_ia32_pause();
    double pause_ns = (double)(thread_cpu_ns() - t0) / 20000;
    /* the least of nine tries of each, taken in turns: a busy machine may
     * charge a try for an interrupt or a stolen slice */
    uint64_t plain = UINT64_MAX, locked = UINT64_MAX;
    for (int round = 0; round < 9; round++) {
        uint64_t p = wait_cpu(1), l = wait_cpu(0);
        if (p < plain) plain = p;
        if (l < locked) locked = l;
    }
    /* twice the spin, and 20 us of slack */
    double bound = (double)plain + 2.0 * PM_LOCK_SPIN * pause_ns + 20000.0;
    if ((double)locked >= bound)
        fail_msg("waiter used %.1f us of CPU (a plain futex sleep %.1f us, a pause %.1f ns)", locked / 1e3,
                 plain / 1e3, pause_ns);
}

int main(void)
{
    core_test_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_os_map_file),
        cmocka_unit_test(test_os_stat_and_links),
        cmocka_unit_test(test_os_set_blocking),
        cmocka_unit_test(test_os_discard),
        cmocka_unit_test(test_os_robust_list),
        cmocka_unit_test(test_os_aligned_map_at_hint),
        cmocka_unit_test(test_os_unmap_raises_hint),
        cmocka_unit_test(test_lock_excludes),
        cmocka_unit_test(test_lock_waiter_sleeps),
    };
    return cmocka_run_group_tests_name("os_linux", tests, NULL, NULL) ? 1 : 0;
}
