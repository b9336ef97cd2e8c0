/* os_linux.c — the only file that makes system calls (see pm_os.h).
 * Owns: mmap/munmap/madvise, the environment scan, raw file I/O, the
 * profiler's file and link lookups, clocks, futexes.
 * Must never: call malloc, stdio, getenv or anything that locks.
 * No state beyond a cached copy of /proc/self/environ used only when the
 * allocator starts before libc has set `environ`. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pm.h"
#include "pm_os.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pm_usdt.h"

extern char **environ;

/* System calls the allocator made, with their bytes (profmalloc_get_stats_ex). */
static _Atomic uint64_t os_counts[10];
static _Atomic uint64_t os_net, os_peak; /* bytes mapped now, and at most */

void pm_os_counts(pm_os_counts_t *out)
{
    out->mmap_calls = pm_relaxed_load(&os_counts[0]);
    out->mmap_bytes = pm_relaxed_load(&os_counts[1]);
    out->munmap_calls = pm_relaxed_load(&os_counts[2]);
    out->munmap_bytes = pm_relaxed_load(&os_counts[3]);
    out->madvise_calls = pm_relaxed_load(&os_counts[4]);
    out->madvise_bytes = pm_relaxed_load(&os_counts[5]);
    out->mremap_calls = pm_relaxed_load(&os_counts[6]);
    out->mremap_bytes = pm_relaxed_load(&os_counts[7]);
    out->peak_mapped = pm_relaxed_load(&os_peak);
    out->faultin_calls = pm_relaxed_load(&os_counts[8]);
    out->faultin_bytes = pm_relaxed_load(&os_counts[9]);
}

static void net_add(int64_t delta)
{
    uint64_t now = atomic_fetch_add_explicit(&os_net, (uint64_t)delta, memory_order_relaxed) + (uint64_t)delta;
    uint64_t peak = pm_relaxed_load(&os_peak);
    while (delta > 0 && now > peak && !atomic_compare_exchange_weak(&os_peak, &peak, now)) {}
}

static void count(int which, uint64_t bytes)
{
    pm_relaxed_add(&os_counts[which], 1);
    pm_relaxed_add(&os_counts[which + 1], bytes);
}

void pm_os_note_faultin(uintptr_t addr, size_t bytes)
{
    count(8, bytes);
    PM_USDT2(memory_heap_more, addr, bytes);
}

/* ---- fault injection (tests) ------------------------------------------
 * A fake OS for the unit tests (test/unit/test_fault.c): each kind of
 * memory call fails, as the kernel's would, with the chance set here.
 * Off (0), it costs each call one load. */
static _Atomic uint32_t fault_rate[PM_OS_FAULT_KINDS];
static _Atomic uint64_t fault_seq;
static _Atomic uint64_t fault_count;

void pm_os_fault_set(unsigned kind, uint32_t per_1024)
{
    if (kind < PM_OS_FAULT_KINDS) atomic_store(&fault_rate[kind], per_1024);
}

uint64_t pm_os_fault_count(void) { return atomic_load(&fault_count); }

/* splitmix64: the output for state x, which steps by SPLITMIX_STEP (the
 * fault dice, and pm_os_random's fallback). */
#define SPLITMIX_STEP 0x9e3779b97f4a7c15ull
static uint64_t splitmix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int faulted(unsigned kind)
{
    uint32_t rate = atomic_load_explicit(&fault_rate[kind], memory_order_relaxed);
    if (__builtin_expect(rate == 0, 1)) return 0;
    uint64_t x = atomic_fetch_add_explicit(&fault_seq, SPLITMIX_STEP, memory_order_relaxed);
    if ((splitmix(x) & 1023) >= rate) return 0;
    atomic_fetch_add_explicit(&fault_count, 1, memory_order_relaxed);
    return 1;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Where the next aligned mapping is tried first: right below the last
 * one, as the kernel would place it, but on the alignment.  An aligned
 * request mapped its slack and unmapped it again, two system calls and a
 * split of the new mapping for each large block of a heap that grows
 * one block at a time (bench/holes: 20 000 of each); at the hint the
 * kernel maps the exact range or refuses (MAP_FIXED_NOREPLACE never
 * replaces a mapping; a kernel older than 4.17 takes it as a hint, and a
 * mapping elsewhere is unmapped), and the new mapping merges with the
 * one above it (test_os_aligned_map_at_hint). */
static _Atomic uintptr_t map_hint;
#define HINT_FLOOR ((uintptr_t)1 << 30)
#define HINT_ALIGN_MAX ((size_t)2 << 20)

/* Heap address space given back (a run unmapped, a block moved away by
 * mremap) raises the hint to its end, so the next growth takes the hole
 * instead of going on down: a heap that maps and unmaps runs all the time
 * (a cap the user set) walked down through hundreds of GiB, each 2 GiB of
 * it a page-map leaf never freed (test_os_unmap_raises_hint).  Other
 * unmaps (metadata, scratch, a move's slack) leave it: a growth aimed at
 * a hole too small fails once and goes where the kernel puts it. */
static void hint_freed(uintptr_t end)
{
    uintptr_t top = atomic_load_explicit(&map_hint, memory_order_relaxed);
    while (top && end > top &&
           !atomic_compare_exchange_weak_explicit(&map_hint, &top, end, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* The first hinted mapping (the heap's first growth) ends on a zone
 * boundary (PM_ZONE_SHIFT) below where the kernel would place it, so the
 * heap grows down through one page-map leaf for its first 2 GiB instead of
 * straddling two at random (one heap in ten at 200 MB): free's fast path
 * finds that leaf without the root (pagemap.c, pm_leaf_hint).  The probe
 * costs a mmap and a munmap once; if the range is taken, the kernel's
 * place serves as before (test_pagemap: test_pagemap_leaf_hint). */
static PM_COLD void first_hint(size_t size)
{
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return;
    munmap(p, size);
    uintptr_t top = ((uintptr_t)p + size) & ~(((uintptr_t)1 << PM_ZONE_SHIFT) - 1), none = 0;
    if (top >= HINT_FLOOR + size)
        atomic_compare_exchange_strong_explicit(&map_hint, &none, top, memory_order_relaxed, memory_order_relaxed);
}

static void *map_at_hint(size_t size, size_t align)
{
    uintptr_t top = atomic_load_explicit(&map_hint, memory_order_relaxed);
    if (top < HINT_FLOOR + size) return NULL;
    uintptr_t at = (top - size) & ~(uintptr_t)(align - 1);
    void *p = mmap((void *)at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if ((uintptr_t)p != at) { /* an old kernel's hint, elsewhere */
        munmap(p, size);
        return NULL;
    }
    return p;
}

/* errno is kept on every path: a malloc that succeeds after a failed
 * mmap (a refill that got part of a batch) must not leave ENOMEM behind,
 * and every failure sets ENOMEM itself (alloc.c). */
void *pm_os_map(size_t size, size_t align)
{
    size_t os_page = pm_os_page_size();
    if (align < os_page) align = os_page;
    if (size > SIZE_MAX - os_page) return NULL;
    size = (size + os_page - 1) & ~(os_page - 1);
    size_t want = size + (align - os_page);
    if (want < size || faulted(PM_OS_FAULT_MAP)) return NULL;
    int saved = errno;
    /* (not past HINT_ALIGN_MAX: a block aligned to a terabyte asks for
     * its alignment's worth of memory, and is refused as glibc's is;
     * test_api: test_malloc_exceeding_memory) */
    if (align > os_page && align <= HINT_ALIGN_MAX) {
        if (!atomic_load_explicit(&map_hint, memory_order_relaxed)) first_hint(size);
        void *q = map_at_hint(size, align);
        if (q) {
            atomic_store_explicit(&map_hint, (uintptr_t)q, memory_order_relaxed);
            count(0, size);
            net_add((int64_t)size);
            errno = saved;
            return q;
        }
    }
    /* no MAP_NORESERVE: the kernel's overcommit check must be able to say
     * no, so that an impossible malloc fails with ENOMEM as in glibc */
    void *p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        errno = saved;
        return NULL;
    }
    uintptr_t start = (uintptr_t)p;
    uintptr_t aligned = (start + align - 1) & ~(uintptr_t)(align - 1);
    /* the slack's unmaps are counted (stats: munmap calls), not its bytes */
    if (aligned > start && munmap(p, aligned - start) == 0) count(2, 0);
    uintptr_t end = start + want, aligned_end = aligned + size;
    if (end > aligned_end && munmap((void *)aligned_end, end - aligned_end) == 0) count(2, 0);
    if (align > os_page) atomic_store_explicit(&map_hint, aligned, memory_order_relaxed);
    count(0, size);
    net_add((int64_t)size);
    errno = saved;
    return (void *)aligned;
}

static int (*_Atomic give_back)(size_t);

void pm_os_set_give_back(int (*fn)(size_t size)) { atomic_store(&give_back, fn); }

void *pm_os_map_scratch(size_t size)
{
    void *p = pm_os_map(size, 0);
    int (*fn)(size_t) = atomic_load(&give_back);
    if (!p && fn && fn(size)) p = pm_os_map(size, 0);
    return p;
}

int pm_os_unmap(void *addr, size_t size)
{
    if (size && faulted(PM_OS_FAULT_UNMAP)) return -1;
    int saved = errno;
    int rc = size ? munmap(addr, size) : 0;
    count(2, size);
    if (rc == 0) net_add(-(int64_t)size);
    errno = saved;
    return rc == 0 ? 0 : -1;
}

int pm_os_unmap_heap(void *addr, size_t size)
{
    int rc = pm_os_unmap(addr, size);
    if (rc == 0 && size) hint_freed((uintptr_t)addr + size);
    return rc;
}

void *pm_os_reserve(size_t size)
{
    if (faulted(PM_OS_FAULT_MAP)) return NULL;
    int saved = errno;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

int pm_os_remap(void *old, size_t old_size, size_t new_size, void *to)
{
    if (faulted(PM_OS_FAULT_MAP)) return -1;
    int saved = errno;
    void *p = mremap(old, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, to);
    count(6, new_size);
    if (p == to) net_add((int64_t)new_size - (int64_t)old_size);
    if (p == to && to != old) hint_freed((uintptr_t)old + old_size);
    errno = saved;
    return p == to ? 0 : -1;
}

/* Whether [addr, addr + size) lies in one mapping: the kernel refuses to
 * move a range across two (EFAULT), and a kernel before about 6.15 unmaps
 * the destination of a MREMAP_FIXED before it finds that out.  Asked of
 * mremap growing the range in place by a page, which checks the range
 * first: EFAULT across mappings; else it grows into a hole after it (the
 * page, ours alone, is unmapped again) or refuses with ENOMEM. */
int pm_os_one_mapping(void *addr, size_t size)
{
    int saved = errno;
    size_t os_page = pm_os_page_size();
    void *p = mremap(addr, size, size + os_page, 0);
    int one = p != MAP_FAILED || errno != EFAULT;
    if (p != MAP_FAILED) munmap((char *)addr + size, os_page);
    errno = saved;
    return one;
}

int pm_os_mapped(void *addr)
{
    int saved = errno;
    unsigned char vec;
    int rc = mincore(addr, 1, &vec);
    int mapped = rc == 0 || errno != ENOMEM;
    errno = saved;
    return mapped;
}

void *pm_os_remap_anywhere(void *old, size_t old_size, size_t new_size)
{
    if (faulted(PM_OS_FAULT_MAP)) return NULL;
    int saved = errno;
    void *p = mremap(old, old_size, new_size, MREMAP_MAYMOVE);
    count(6, new_size);
    if (p != MAP_FAILED) net_add((int64_t)new_size - (int64_t)old_size);
    if (p != MAP_FAILED && p != old) hint_freed((uintptr_t)old + old_size);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

/* Set once madvise has reported success and kept a page (a seccomp filter
 * answering 0, some emulators): from then on nothing counts as released,
 * so calloc zeroes what it hands out. */
static _Atomic int madvise_keeps;

int pm_os_release(void *addr, size_t size)
{
    /* madvise rounds the length up to the kernel's page: on a kernel with
     * pages above 8 KiB that would zero the next span's first bytes.  Only
     * the kernel pages wholly inside the range go. */
    uintptr_t mask = pm_os_page_size() - 1, a = (uintptr_t)addr;
    uintptr_t lo = (a + mask) & ~mask, hi = (a + size) & ~mask;
    int rc = 0;
    if (hi > lo) {
        if (atomic_load_explicit(&madvise_keeps, memory_order_relaxed) || faulted(PM_OS_FAULT_RELEASE)) return -1;
        /* the first page made resident, then asked whether it still is:
         * a real release leaves it out (mincore, not a read, which would
         * map the zero page there) */
        *(volatile uint8_t *)lo = 1;
        int saved = errno;
        rc = madvise((void *)lo, hi - lo, MADV_DONTNEED);
        count(4, hi - lo);
        PM_USDT2(memory_heap_less, lo, hi - lo);
        if (rc == 0 && pm_os_resident((void *)lo) == 1) {
            atomic_store_explicit(&madvise_keeps, 1, memory_order_relaxed);
            rc = -1;
        }
        errno = saved;
    }
    return rc == 0 && lo == a && hi == a + size ? 0 : -1;
}

int pm_os_resident(void *addr)
{
    int saved = errno;
    unsigned char vec = 0;
    int rc = mincore((void *)((uintptr_t)addr & ~(pm_os_page_size() - 1)), 1, &vec);
    errno = saved;
    return rc == 0 ? vec & 1 : -1;
}

long pm_os_resident_pages(void *addr, size_t size)
{
    int saved = errno;
    size_t os = pm_os_page_size(), pages = (size + os - 1) / os;
    unsigned char vec[1024]; /* a window of pages per call: stack, not heap */
    long n = 0;
    for (size_t at = 0; at < pages; at += sizeof vec) {
        size_t k = pages - at < sizeof vec ? pages - at : sizeof vec;
        if (mincore((char *)addr + at * os, k * os, vec) != 0) {
            n = -1;
            break;
        }
        for (size_t i = 0; i < k; i++) n += vec[i] & 1;
    }
    errno = saved;
    return n;
}

size_t pm_os_page_size(void)
{
    static _Atomic size_t cached;
    size_t page = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!page) {
        page = (size_t)getauxval(AT_PAGESZ);
        if (!page) page = 4096;
        atomic_store_explicit(&cached, page, memory_order_relaxed);
    }
    return page;
}

/* Whether RLIMIT_AS has a soft limit, which *r then holds (a raw
 * syscall: errno may change). */
static int as_limited(struct rlimit *r)
{
    return syscall(SYS_prlimit64, 0, RLIMIT_AS, NULL, r) == 0 && r->rlim_cur != RLIM_INFINITY;
}

/* Bytes the process may still map under RLIMIT_AS (its soft limit less
 * /proc/self/statm's size), or SIZE_MAX when there is no such limit or it
 * cannot be read.  errno is left as it was. */
size_t pm_os_as_room(void)
{
    int saved = errno;
    size_t room = SIZE_MAX;
    struct rlimit r;
    if (as_limited(&r)) {
        char buf[64];
        int fd = pm_os_open("/proc/self/statm", O_RDONLY | O_CLOEXEC, 0);
        ssize_t n = fd >= 0 ? pm_os_read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0) pm_os_close(fd);
        if (n > 0) {
            size_t pages = 0;
            for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
                pages = pages * 10 + (size_t)(buf[i] - '0');
            size_t used = pages * pm_os_page_size();
            room = used >= r.rlim_cur ? 0 : (size_t)r.rlim_cur - used;
        }
    }
    errno = saved;
    return room;
}

/* Whether address space is scarce: RLIMIT_AS is set, or the kernel
 * charges every writable mapping (vm.overcommit_memory=2, read once).
 * errno is left as it was. */
int pm_os_space_limited(void)
{
    static _Atomic int strict; /* 0: not read yet, 1: no, 2: yes */
    int saved = errno, s = atomic_load_explicit(&strict, memory_order_relaxed);
    if (!s) {
        char c = 0;
        int fd = pm_os_open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC, 0);
        if (fd >= 0) {
            if (pm_os_read(fd, &c, 1) != 1) c = 0;
            pm_os_close(fd);
        }
        s = c == '2' ? 2 : 1;
        atomic_store_explicit(&strict, s, memory_order_relaxed);
    }
    struct rlimit r;
    int limited = s == 2 || as_limited(&r);
    errno = saved;
    return limited;
}

/* ---- environment ---------------------------------------------------- */

static const char *match(const char *entry, const char *name)
{
    size_t i = 0;
    while (name[i] && entry[i] == name[i]) i++;
    return (!name[i] && entry[i] == '=') ? entry + i + 1 : NULL;
}

static char *proc_environ;      /* NUL-separated copy, mapped once */
static size_t proc_environ_len;

static void load_proc_environ(void)
{
    int fd = pm_os_open("/proc/self/environ", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return;
    size_t cap = 1 << 20;
    char *buf = pm_os_map(cap, 0);
    if (buf) {
        size_t len = 0;
        ssize_t n;
        while (len < cap - 1 && (n = pm_os_read(fd, buf + len, cap - 1 - len)) > 0)
            len += (size_t)n;
        buf[len] = 0;
        proc_environ_len = len;
        proc_environ = buf;
    }
    pm_os_close(fd);
}

const char *pm_os_getenv(const char *name)
{
    char **env = environ;
    if (env) {
        for (; *env; env++) {
            const char *v = match(*env, name);
            if (v) return v;
        }
        return NULL;
    }
    if (!proc_environ) load_proc_environ();
    for (size_t i = 0; proc_environ && i < proc_environ_len;) {
        const char *v = match(proc_environ + i, name);
        if (v) return v;
        i += strlen(proc_environ + i) + 1;
    }
    return NULL;
}

int pm_os_secure(void)
{
    return getauxval(AT_SECURE) != 0;
}

/* ---- files ---------------------------------------------------------- */

int pm_os_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = syscall(SYS_write, fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) { /* a descriptor set O_NONBLOCK: wait */
                struct pollfd pf = {fd, POLLOUT, 0};
                if (poll(&pf, 1, -1) >= 0 || errno == EINTR) continue;
            }
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int pm_os_open(const char *path, int flags, int mode)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

int pm_os_close(int fd) { return (int)syscall(SYS_close, fd); }

ssize_t pm_os_read(int fd, void *buf, size_t len)
{
    ssize_t n;
    do n = syscall(SYS_read, fd, buf, len);
    while (n < 0 && errno == EINTR);
    return n;
}

int pm_os_rename(const char *from, const char *to)
{
    return (int)syscall(SYS_renameat, AT_FDCWD, from, AT_FDCWD, to);
}

int pm_os_unlink(const char *path)
{
    return (int)syscall(SYS_unlinkat, AT_FDCWD, path, 0);
}

int pm_os_fsync(int fd) { return (int)syscall(SYS_fsync, fd); }

_Static_assert(sizeof(sigset_t) <= sizeof(((pm_os_sigpipe_t *)0)->old), "sigset_t fits");

void pm_os_sigpipe_block(pm_os_sigpipe_t *s)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, (sigset_t *)(void *)s->old);
    s->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

void pm_os_sigpipe_restore(pm_os_sigpipe_t *s, int raised)
{
    int saved = errno;
    if (raised && !s->was_pending) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        struct timespec now = {0, 0};
        while (sigtimedwait(&set, NULL, &now) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, (const sigset_t *)(const void *)s->old, NULL);
    errno = saved;
}

/* ---- process -------------------------------------------------------- */

pid_t pm_os_getpid(void) { return (pid_t)syscall(SYS_getpid); }

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts); /* vDSO: no lock, no allocation */
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t pm_os_now_ns(void) { return clock_ns(CLOCK_REALTIME); }
uint64_t pm_os_monotonic_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

void pm_os_random(void *buf, size_t len)
{
    int saved = errno;
    size_t got = 0;
    while (got < len) {
        long n = syscall(SYS_getrandom, (char *)buf + got, len - got, 0x1 /* GRND_NONBLOCK */);
        if (n > 0) got += (size_t)n;
        else if (n < 0 && errno == EINTR) continue;
        else break;
    }
    if (got < len) {
        /* splitmix64 over what differs between processes and runs */
        uint64_t x = clock_ns(CLOCK_MONOTONIC) ^ (clock_ns(CLOCK_REALTIME) << 17) ^ (uint64_t)(uintptr_t)&saved ^
                     ((uint64_t)syscall(SYS_getpid) << 32);
        for (size_t i = got; i < len; i++) {
            x += SPLITMIX_STEP;
            ((unsigned char *)buf)[i] ^= (unsigned char)splitmix(x);
        }
    }
    errno = saved;
}

void pm_os_futex_wait(_Atomic int *word, int expected)
{
    int saved = errno;
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
    errno = saved;
}

void pm_os_futex_wake(_Atomic int *word, int count)
{
    int saved = errno;
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
    errno = saved;
}

void pm_os_yield(void) { sched_yield(); }

void pm_os_message(const char *msg)
{
    int saved = errno;
    char line[512];
    size_t n = 0;
    const char *prefix = "profmalloc: ";
    for (const char *s = prefix; *s && n < sizeof line - 2; s++) line[n++] = *s;
    for (const char *s = msg; *s && n < sizeof line - 2; s++) line[n++] = *s;
    line[n++] = '\n';
    (void)pm_os_write_all(2, line, n);
    errno = saved;
}

void pm_os_fatal(const char *msg, const void *ptr, int has_ptr)
{
    char line[400];
    size_t n = 0;
    for (const char *s = msg; *s && n < 300; s++) line[n++] = *s;
    if (has_ptr) {
        uintptr_t v = (uintptr_t)ptr;
        line[n++] = ' ';
        line[n++] = '0';
        line[n++] = 'x';
        int shift = 60;
        while (shift > 0 && !((v >> shift) & 0xf)) shift -= 4;
        for (; shift >= 0; shift -= 4) line[n++] = "0123456789abcdef"[(v >> shift) & 0xf];
    }
    line[n] = 0;
    pm_os_message(line);
    /* raise SIGABRT without running atexit handlers or flushing stdio */
    abort();
}

/* ---- lock slow path (futex) ----------------------------------------- */

void pm_lock_wait_slow(pm_lock_t *l)
{
    PM_USDT1(lock_contended, l);
    for (int spin = 0; spin < PM_LOCK_SPIN; spin++) {
        int expected = 0;
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->state, &expected, 1,
                                                  memory_order_acquire,
                                                  memory_order_relaxed))
            goto held;
        __builtin_ia32_pause();
    }
    while (atomic_exchange_explicit(&l->state, 2, memory_order_acquire) != 0)
        pm_os_futex_wait(&l->state, 2);
held:
    /* counted once the lock's line is ours: an add before the spin took
     * that line from the holder, which needs it to unlock */
    pm_relaxed_add(&l->contended, 1);
}

void pm_lock_wake_slow(pm_lock_t *l)
{
    pm_os_futex_wake(&l->state, 1);
}

/* ---- files and memory for the profiler -------------------------------- */

int pm_os_stat(const char *path, struct stat *st, int follow)
{
    return follow ? stat(path, st) : lstat(path, st);
}

ssize_t pm_os_readlink(const char *path, char *buf, size_t cap) { return readlink(path, buf, cap); }

int pm_os_fchmod(int fd, int mode) { return fchmod(fd, (mode_t)mode); }

int pm_os_memfd(const char *name) { return (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC); }

int64_t pm_os_seek(int fd, int64_t offset, int whence) { return (int64_t)lseek(fd, (off_t)offset, whence); }

int pm_os_set_blocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ? -1 : 0;
}

uid_t pm_os_geteuid(void) { return geteuid(); }

char *pm_os_getcwd(char *buf, size_t cap) { return getcwd(buf, cap); }

const void *pm_os_map_file(const char *path, size_t *len)
{
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return NULL;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size < SIZE_MAX) {
        *len = (size_t)st.st_size;
        p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    close(fd);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

void pm_os_discard(void *addr, size_t size)
{
    int saved = errno;
    madvise(addr, size, MADV_DONTNEED);
    errno = saved;
}

int pm_os_has_robust_list(void)
{
    void *head = NULL;
    size_t len = 0;
    int saved = errno;
    long rc = syscall(SYS_get_robust_list, 0, &head, &len);
    errno = saved;
    return rc == 0 && head != NULL;
}
