/* pm_os.h — the OS contract.  os_linux.c is the only file that calls a
 * system-call wrapper (mmap, open, stat, futex, ...) but for one named
 * below; everything else in src/ reaches the kernel through here (check-os-contract reads every
 * other object's undefined symbols).  Other files call libc and the
 * loader only where the call itself is the point, and those may enter
 * the kernel on their own: the loader's lists (dl_iterate_phdr,
 * _dl_find_object, getauxval; dlopen/dlsym in needed.c and deepbind.c)
 * and pthread's keys, fork handlers and robust mutexes (tcache.c, init.c).
 * One file makes its own: prof_http.c, the HTTP server, on a thread of its
 * own and no allocator path, whose sockets, poll and memfds are its job.
 * Must never: allocate with malloc, take an allocator lock, or use stdio.
 * Every function is safe to call before any constructor has run. */
#ifndef PM_OS_H
#define PM_OS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Memory.  pm_os_map returns zeroed memory aligned to `align` (a power of
 * two, at least the OS page), or NULL. */
void *pm_os_map(size_t size, size_t align);
/* Returns 0, or -1 when the range stays mapped (splitting a mapping past
 * vm.max_map_count).  The length is rounded up to the kernel's page. */
int pm_os_unmap(void *addr, size_t size);
/* The same for a run of the page heap's: the next aligned mapping is tried
 * at its end first (os_linux.c, map_at_hint). */
int pm_os_unmap_heap(void *addr, size_t size);
/* Address space only (PROT_NONE, no commit charge), for pm_os_remap to
 * move a mapping onto; NULL on failure. */
void *pm_os_reserve(size_t size);
/* Moves the pages [old, old + old_size) to `to` (page-aligned, inside a
 * reservation), growing them to new_size (mremap MREMAP_FIXED): contents
 * move with the page tables, nothing is copied, and what was at `to` is
 * replaced.  0, or -1 with the old range untouched. */
int pm_os_remap(void *old, size_t old_size, size_t new_size, void *to);
/* 1 when [addr, addr + size) lies in one mapping (no call above moves a
 * range that spans two), else 0. */
int pm_os_one_mapping(void *addr, size_t size);
/* 1 when the page holding addr is mapped (by anyone), 0 when it is a hole. */
int pm_os_mapped(void *addr);
/* The same where the kernel chooses (only the growth needs new address
 * space): the new address (page-aligned), or NULL with the old range
 * untouched. */
void *pm_os_remap_anywhere(void *old, size_t old_size, size_t new_size);
/* Gives the kernel pages wholly inside [addr, addr + size) back to the OS;
 * they read as zero when next touched.  Returns 0 when that was the whole
 * range, else -1: the kernel refused (pages locked by mlock/mlockall), or
 * the range is not aligned to its pages (a kernel with pages above 8 KiB),
 * and some of the bytes keep their contents. */
int pm_os_release(void *addr, size_t size);
/* Whether the OS page at addr is resident (mincore): 1, 0, or -1 when it
 * cannot tell. */
int pm_os_resident(void *addr);
/* How many of the OS pages of [addr, addr + size) are resident (addr on
 * an OS page), or -1 when it cannot tell. */
long pm_os_resident_pages(void *addr, size_t size);
/* pm_os_map(size, 0) for scratch memory (a dump's buffers), tried once
 * more when refused, after the give-back function set here (the
 * allocator's, at init) has returned memory it held: a dump after an
 * out-of-memory episode works whenever malloc would. */
void *pm_os_map_scratch(size_t size);
void pm_os_set_give_back(int (*fn)(size_t size));
size_t pm_os_page_size(void);      /* the kernel's page (AT_PAGESZ) */
/* Tests: the memory calls above fail, as the kernel's would, per_1024 times
 * in 1024 (0: never, the default); map covers pm_os_map, reserve and the
 * remaps, release is madvise, unmap munmap.  pm_os_fault_count: failures
 * made so far. */
enum { PM_OS_FAULT_MAP, PM_OS_FAULT_RELEASE, PM_OS_FAULT_UNMAP, PM_OS_FAULT_KINDS };
void pm_os_fault_set(unsigned kind, uint32_t per_1024);
uint64_t pm_os_fault_count(void);
size_t pm_os_as_room(void);        /* RLIMIT_AS less the size mapped; SIZE_MAX: no limit */
int pm_os_space_limited(void);     /* 1: RLIMIT_AS set, or strict overcommit */

/* Environment: scans environ (or /proc/self/environ before libc set it up).
 * Returns NULL when unset.  pm_os_secure() is true in setuid/setgid
 * programs (AT_SECURE), where PROFMALLOC_* variables must be ignored. */
const char *pm_os_getenv(const char *name);
int pm_os_secure(void);

/* Raw file I/O with write(2) semantics but retrying on EINTR and short
 * writes.  Return 0 or -1 with errno set. */
int pm_os_write_all(int fd, const void *buf, size_t len);
int pm_os_open(const char *path, int flags, int mode);
int pm_os_close(int fd);
ssize_t pm_os_read(int fd, void *buf, size_t len);
int pm_os_memfd(const char *name);                         /* close-on-exec */
int64_t pm_os_seek(int fd, int64_t offset, int whence);   /* lseek */
int pm_os_rename(const char *from, const char *to);
int pm_os_unlink(const char *path);
int pm_os_fsync(int fd);
/* SIGPIPE blocked around writes to a pipe the caller does not own; restore
 * takes back the one a write raised (raised != 0), unless one was already
 * pending before. */
typedef struct {
    _Alignas(8) unsigned char old[128]; /* a sigset_t (signal.h stays out of here) */
    int was_pending;
} pm_os_sigpipe_t;
void pm_os_sigpipe_block(pm_os_sigpipe_t *s);
void pm_os_sigpipe_restore(pm_os_sigpipe_t *s, int raised);

/* Fills buf with random bytes (getrandom, without blocking; early in boot,
 * before the kernel's pool is ready, a mix of clocks and addresses). */
void pm_os_random(void *buf, size_t len);

/* Process facts. */
pid_t pm_os_getpid(void);
uint64_t pm_os_now_ns(void);       /* CLOCK_REALTIME */
uint64_t pm_os_monotonic_ns(void); /* CLOCK_MONOTONIC */

/* Futex wait/wake on a 32-bit word (the lock's slow path). */
void pm_os_futex_wait(_Atomic int *word, int expected);
void pm_os_futex_wake(_Atomic int *word, int count);
void pm_os_yield(void);

/* The memory system calls made so far, with the bytes they covered. */
typedef struct pm_os_counts {
    uint64_t mmap_calls, mmap_bytes, munmap_calls, munmap_bytes;
    uint64_t madvise_calls, madvise_bytes, mremap_calls, mremap_bytes;
    uint64_t peak_mapped; /* most bytes mapped at once by pm_os_map */
    uint64_t faultin_calls, faultin_bytes; /* non-resident runs handed out */
} pm_os_counts_t;
void pm_os_counts(pm_os_counts_t *out);
/* The page heap hands out a run that is not resident (fresh from mmap, or
 * returned to the OS before): it faults in when touched (counted, and the
 * memory_heap_more probe). */
void pm_os_note_faultin(uintptr_t addr, size_t bytes);

/* Writes "profmalloc: <msg>\n" to stderr. */
void pm_os_message(const char *msg);

/* Files and memory for the profiler (symbols, unwind tables, dump paths):
 * the system calls prof_*.c would otherwise make themselves.  Each keeps
 * errno unless it fails, as the calls it wraps. */
struct stat;
int pm_os_stat(const char *path, struct stat *st, int follow); /* follow 0: lstat */
ssize_t pm_os_readlink(const char *path, char *buf, size_t cap); /* no NUL added */
int pm_os_fchmod(int fd, int mode);
int pm_os_set_blocking(int fd);    /* clears O_NONBLOCK */
uid_t pm_os_geteuid(void);
char *pm_os_getcwd(char *buf, size_t cap); /* buf, or NULL */
/* A read-only private mapping of a whole regular, non-empty file (length
 * in *len, unmapped with pm_os_unmap), or NULL. */
const void *pm_os_map_file(const char *path, size_t *len);
/* Drops the pages of [addr, addr + size) (page-aligned): when next
 * touched, a private file mapping's are read from the file again and
 * anonymous ones read as zero (or, if the kernel refused, they keep their
 * contents).  errno is kept. */
void pm_os_discard(void *addr, size_t size);
/* 1 when the calling thread has a robust futex list registered with the
 * kernel (glibc sets one up for each thread it starts). */
int pm_os_has_robust_list(void);

#endif
