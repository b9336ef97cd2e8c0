/* prof_dump.c — the top of the profiler: the public dump API
 * (profmalloc_dump_fd, profmalloc_dump) and the exit dump
 * (PROFMALLOC_DUMP): it gathers the stats, takes a snapshot of the site
 * table (prof_sites.c) and hands both to the writers (prof_pprof.c); and
 * where a profile file goes: a temporary renamed over the target, a
 * device or FIFO written in place, one of our own descriptors shared.
 * Must never: be called from the allocator's paths (only from the API and
 * the exit handler), hold a lock of the allocator, or leave a torn file.
 * Locks: one per shared descriptor number (into_locks), dumps only. */
#include "pm_internal.h"
#include "pm_hunt.h"
#include "pm_prof_pprof.h"
#include "pm_usdt.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

/* One dump at a time goes into a shared descriptor (dump_into): threads
 * dumping to /dev/stdout at once interleaved their writes into one corrupt
 * stream.  One lock per descriptor number (modulo 1024), so a dump waiting
 * on a full pipe holds up no dump elsewhere.  Only dumps take them, never the
 * allocator, and the fork handlers leave them alone (a dump into a slow
 * pipe would hold up every fork); a forked child, where the holder does not
 * exist, resets them. */
#define INTO_LOCKS 1024 /* exact below 1024; 16 KiB of zero pages, touched where used */
PM_SPARSE_BSS static pm_lock_t into_locks[INTO_LOCKS];

void pm_dump_unlock_all(int child)
{
    for (int i = 0; child && i < INTO_LOCKS; i++) /* only held ones: no write to the rest */
        if (atomic_load_explicit(&into_locks[i].state, memory_order_relaxed)) pm_lock_reset(&into_locks[i]);
}

PM_EXPORT int profmalloc_dump_fd(int fd, int format) { return pm_dump_fd_view(fd, format, NULL); }

int pm_dump_fd_view(int fd, int format, const pm_prof_view_t *view)
{
    if (format != PROFMALLOC_FORMAT_PPROF && format != PROFMALLOC_FORMAT_LEGACY) {
        errno = EINVAL;
        return -1;
    }
    int entry_errno = errno; /* left as it was by a dump that succeeds */
    pm_init();
    pm_prof_snapshot_t snap = {0};
    pm_sites_mem_t mem;
    pm_stats_collect(&snap.totals);
    if (pm_sites_snapshot(&snap, &mem, view) != 0) return -1;
    int rc = pm_pprof_write(fd, &snap, format);
    if (rc == 0) PM_USDT3(dump_written, fd, format, snap.nsamples);
    int saved = rc == 0 ? entry_errno : errno;
    pm_os_unmap(mem.base, mem.bytes);
    errno = saved;
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = pm_fmt_strlen(s), k = pm_fmt_strlen(suffix);
    return n >= k && pm_fmt_streq(s + n - k, suffix);
}

/* The length of path's directory part, its last '/' included (0: none). */
static size_t dir_len(const char *path)
{
    size_t dir = 0;
    for (size_t i = 0; path[i]; i++)
        if (path[i] == '/') dir = i + 1;
    return dir;
}

/* What follows `prefix` in s, or NULL if s does not start with it. */
static const char *after(const char *s, const char *prefix)
{
    while (*prefix && *s == *prefix) s++, prefix++;
    return *prefix ? NULL : s;
}

static _Atomic uint64_t dump_seq;

/* Creates the temporary a dump is written to before it is renamed over
 * path: in path's directory (rename is atomic only within one), named
 * .profmalloc-dump.<pid>.<n> with a per-process counter and created with
 * O_EXCL.  So concurrent dumps to one path each write a file of their own
 * and the last rename wins with a whole profile (with one name per pid,
 * threads truncated and renamed each other's half-written files), no
 * symlink at the name is followed, and the name stays short (a valid
 * 251-byte file name had no room for a suffix). */
static int open_temp(const char *path, char *tmp, size_t cap)
{
    size_t dir = dir_len(path);
    int err = ENAMETOOLONG;
    for (int tries = 0; tries < 64; tries++) {
        pm_buf_t b;
        if (dir >= cap - 1) break;
        for (size_t i = 0; i < dir; i++) tmp[i] = path[i];
        pm_buf_init(&b, tmp + dir, cap - 1 - dir, -1);
        pm_buf_str(&b, ".profmalloc-dump.");
        pm_buf_u64(&b, (uint64_t)pm_os_getpid());
        pm_buf_str(&b, ".");
        pm_buf_u64(&b, atomic_fetch_add_explicit(&dump_seq, 1, memory_order_relaxed));
        if (b.truncated) break;
        tmp[dir + b.len] = 0;
        int fd = pm_os_open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) return fd; /* EEXIST: a dead process's leftover */
        err = EEXIST;
    }
    errno = err;
    return -1;
}

enum { DUMP_PATH_CAP = 4096 };

/* The descriptor a path names when it is one of this process's own:
 * /proc/self/fd/N, /proc/<pid>/fd/N, /dev/fd/N (and so /dev/stdout, a link
 * to /proc/self/fd/1); -1 otherwise. */
static int own_fd_path(const char *p)
{
    const char *q = after(p, "/proc/self/fd/");
    if (!q) q = after(p, "/dev/fd/");
    if (!q && (q = after(p, "/proc/"))) { /* /proc/<pid>/fd/: this process's pid only */
        uint64_t pid = 0;
        const char *d = q;
        while (*q >= '0' && *q <= '9' && q - d < 10) pid = pid * 10 + (uint64_t)(*q++ - '0');
        if (q == d || pid != (uint64_t)pm_os_getpid()) return -1;
        q = after(q, "/fd/");
    }
    if (!q || (q[0] == '0' && q[1])) return -1; /* the kernel names no "01" */
    int fd = 0;
    const char *d = q;
    while (*q >= '0' && *q <= '9' && q - d < 9) fd = fd * 10 + (*q++ - '0');
    return q > d && !*q ? fd : -1;
}

/* May `link` (lstat in *st) be followed?  The kernel's rule for
 * fs.protected_symlinks, applied whatever the setting, since the link is
 * resolved here and not by the kernel: in a sticky world-writable
 * directory (/tmp), only a link owned by us or by the directory's owner.
 * `dir` is a buffer for the directory's name. */
static int may_follow(const char *link, const struct stat *st, char *dir)
{
    size_t n = dir_len(link);
    if (n > 1) n--; /* "/a/b" -> "/a"; "/b" keeps "/" */
    for (size_t i = 0; i < n; i++) dir[i] = link[i];
    if (!n) dir[n++] = '.';
    dir[n] = 0;
    struct stat ds;
    if (pm_os_stat(dir, &ds, 1) != 0) return -1;
    if ((ds.st_mode & S_ISVTX) && (ds.st_mode & S_IWOTH) && st->st_uid != pm_os_geteuid() &&
        st->st_uid != ds.st_uid) {
        errno = EACCES;
        return -1;
    }
    return 0;
}

enum { DUMP_REPLACE, DUMP_IN_PLACE, DUMP_THROUGH_LINK, DUMP_TO_FD };

/* Where a dump to `path` goes.  A regular file, or nothing yet:
 * DUMP_REPLACE with that path in `out` (*mode: the file's permission bits,
 * or -1), to be replaced through a temporary.  A symbolic link is followed
 * (up to 40 links; in a sticky world-writable directory only our own or the
 * directory owner's) and the file it leads to is replaced, not the link.
 * One of our descriptors (/dev/stdout, /proc/self/fd/N): DUMP_TO_FD with
 * the descriptor in *fd, written at its offset (">>" appends), never
 * reopened or replaced.  Anything else — a device such as /dev/null, a
 * FIFO, a directory — DUMP_IN_PLACE: renaming over it would replace the
 * node itself (as root, /dev/null for the whole machine), so the dump is
 * written into `out`.  -1 with errno on failure. */
static int dump_target(const char *path, char *out, char *link, int *fd, int *mode)
{
    size_t n = pm_fmt_strlen(path);
    *mode = -1;
    if (n >= DUMP_PATH_CAP) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (size_t i = 0; i <= n; i++) out[i] = path[i];
    for (int depth = 0; depth <= 40; depth++) {
        if ((*fd = own_fd_path(out)) >= 0) return DUMP_TO_FD;
        struct stat st;
        if (pm_os_stat(out, &st, 0) != 0) return errno == ENOENT ? DUMP_REPLACE : -1;
        if (S_ISREG(st.st_mode)) {
            *mode = (int)(st.st_mode & 0777);
            return DUMP_REPLACE;
        }
        if (!S_ISLNK(st.st_mode)) return DUMP_IN_PLACE;
        if (may_follow(out, &st, link) != 0) return -1;
        ssize_t len = pm_os_readlink(out, link, DUMP_PATH_CAP - 1);
        if (len <= 0) return -1;
        link[len] = 0;
        /* a /proc link whose target is no path (/proc/thread-self/fd/1 ->
         * "pipe:[N]") to something that is no regular file: written in
         * place through it.  Only those: any other link is resolved here,
         * each one checked, and the end opened without following links (a
         * chain through a link another user planted, or one swapped in
         * meanwhile, got written through) */
        if (after(out, "/proc/") && link[0] != '/' && pm_os_stat(out, &st, 1) == 0 && !S_ISREG(st.st_mode))
            return DUMP_THROUGH_LINK;
        /* a relative link is relative to the link's directory */
        size_t dir = link[0] == '/' ? 0 : dir_len(out);
        if (dir + (size_t)len >= DUMP_PATH_CAP) {
            errno = ENAMETOOLONG;
            return -1;
        }
        for (ssize_t i = 0; i <= len; i++) out[dir + (size_t)i] = link[i];
    }
    errno = ELOOP;
    return -1;
}

/* Writes the dump into a descriptor that is not a regular file of ours.  A
 * pipe whose reader has gone (/dev/stdout into `| head`) fails with EPIPE:
 * SIGPIPE is blocked meanwhile and the one the write raised taken back, so
 * a dump never kills the program.  `shared`: one of the program's own
 * descriptors, which other threads may be dumping into too: they take turns
 * (one lock per descriptor number below 1024), and a dump interrupted by a
 * signal handler that dumps into one again gets EDEADLK, not a hang. */
static PM_TLS int in_shared_dump;

static int dump_into(int fd, int format, int shared, const pm_prof_view_t *view)
{
    pm_lock_t *lock = shared ? &into_locks[(unsigned)fd % INTO_LOCKS] : NULL;
    if (lock && in_shared_dump) {
        errno = EDEADLK;
        return -1;
    }
    pm_os_sigpipe_t sp;
    pm_os_sigpipe_block(&sp);
    if (lock) {
        in_shared_dump = 1;
        pm_lock(lock);
    }
    int rc = pm_dump_fd_view(fd, format, view);
    int saved = errno;
    if (lock) {
        pm_unlock(lock);
        in_shared_dump = 0;
    }
    pm_os_sigpipe_restore(&sp, rc != 0 && saved == EPIPE);
    errno = saved;
    return rc;
}

/* Writes the dump into an existing node that is not a regular file.
 * O_NONBLOCK: a FIFO without a reader fails with ENXIO instead of blocking
 * the dump forever; the writes themselves block as usual. */
static int dump_in_place(const char *path, int format, int follow, const pm_prof_view_t *view)
{
    /* O_NOFOLLOW unless `path` is a link already checked: a FIFO found at
     * `path` may have become a link by now (a race in a shared directory) */
    int fd = pm_os_open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW), 0);
    if (fd < 0) return -1;
    int rc = pm_os_set_blocking(fd) != 0 ? -1 : dump_into(fd, format, 0, view);
    int saved = errno;
    pm_os_close(fd);
    errno = saved;
    return rc;
}

/* Writes the dump to a temporary beside `target` (a regular file or none
 * yet) and renames it over `target`: never half-written.  The replaced
 * file's permission bits carry over (mode >= 0). */
static int dump_replacing(const char *target, char *tmp, int format, int mode, const pm_prof_view_t *view)
{
    int fd = open_temp(target, tmp, DUMP_PATH_CAP);
    if (fd < 0) return -1;
    int rc = mode >= 0 ? pm_os_fchmod(fd, mode) : 0;
    if (rc == 0) rc = pm_dump_fd_view(fd, format, view);
    if (rc == 0) rc = pm_os_fsync(fd);
    int saved = errno;
    if (pm_os_close(fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc == 0 && pm_os_rename(tmp, target) != 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0) pm_os_unlink(tmp);
    errno = saved;
    return rc;
}

PM_EXPORT int profmalloc_dump(const char *path) { return pm_dump_view(path, -1, NULL); }

int pm_dump_view(const char *path, int format, const pm_prof_view_t *view)
{
    if (!path || !*path) {
        errno = EINVAL;
        return -1;
    }
    int entry_errno = errno; /* a dump that succeeds leaves errno as it found it */
    if (format < 0) format = ends_with(path, ".heap") ? PROFMALLOC_FORMAT_LEGACY : PROFMALLOC_FORMAT_PPROF;
    /* path buffers are mapped, not on the stack: dumps (and the exit dump)
     * run on PTHREAD_STACK_MIN threads too, which have ~14 KB */
    char *tmp = pm_os_map_scratch(3 * DUMP_PATH_CAP);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    /* not cancelled halfway: a thread cancelled while waiting on a full
     * pipe kept its descriptor's lock for good, and a temporary behind */
    int cancel_state;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
    char *target = tmp + DUMP_PATH_CAP;
    int fd = -1, mode = -1;
    int rc = dump_target(path, target, target + DUMP_PATH_CAP, &fd, &mode);
    if (rc == DUMP_TO_FD)
        rc = dump_into(fd, format, 1, view);
    else if (rc == DUMP_IN_PLACE || rc == DUMP_THROUGH_LINK)
        rc = dump_in_place(target, format, rc == DUMP_THROUGH_LINK, view);
    else if (rc == DUMP_REPLACE)
        rc = dump_replacing(target, tmp, format, mode, view);
    int saved = rc == 0 ? entry_errno : errno;
    pm_os_unmap(tmp, 3 * DUMP_PATH_CAP);
    pthread_setcancelstate(cancel_state, NULL);
    errno = saved;
    return rc;
}

/* The program's name for %e: the last component of the path it was
 * executed by (AT_EXECFN, the kernel's copy of execve's path: a script's
 * own name rather than its interpreter's, a symlink's rather than its
 * target's, as core_pattern's %e; and not argv[0], which setproctitle
 * overwrites), else of /proc/self/exe, else "unknown".  `buf` holds the
 * link read.  test_prof's test_dump_at_exit_program_name. */
static const char *program_name(char *buf, size_t cap)
{
    const char *fn = (const char *)getauxval(AT_EXECFN);
    if (!fn || !*fn) {
        ssize_t n = pm_os_readlink("/proc/self/exe", buf, cap - 1);
        if (n <= 0) return "unknown";
        buf[n] = 0;
        fn = buf;
    }
    fn += dir_len(fn);
    return *fn ? fn : "unknown";
}

/* Expands %p, %e and %% of pattern into out (cap bytes, always
 * terminated); name (namecap bytes) holds the link program_name reads.
 * Returns -1 if the result was cut short. */
static int expand(const char *pattern, char *out, size_t cap, char *name, size_t namecap)
{
    pm_buf_t b;
    pm_buf_init(&b, out, cap - 1, -1);
    for (const char *s = pattern; *s; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            pm_buf_u64(&b, (uint64_t)pm_os_getpid());
            s++;
        } else if (s[0] == '%' && s[1] == 'e') {
            pm_buf_str(&b, program_name(name, namecap));
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            pm_buf_str(&b, "%");
            s++;
        } else {
            char c[2] = {*s, 0};
            pm_buf_str(&b, c);
        }
    }
    out[b.len] = 0;
    return b.truncated ? -1 : 0;
}

int pm_dump_expand(const char *pattern, char *out, size_t cap)
{
    char name[512];
    return expand(pattern, out, cap, name, sizeof name);
}

/* Expands %p (pid), %e (the program's name) and %% in PROFMALLOC_DUMP. */
void pm_dump_at_exit(void)
{
    const char *pattern = pm_options.dump_pattern;
    if (!pattern) return;
    enum { PATH_CAP = 4096, MSG_CAP = 4200 };
    char *path = pm_os_map_scratch(PATH_CAP + MSG_CAP); /* not on a small stack */
    if (!path) {
        pm_os_message("PROFMALLOC_DUMP: could not write the heap profile (no memory)");
        return;
    }
    char *msg = path + PATH_CAP;
    int truncated = expand(pattern, path, PATH_CAP, msg, MSG_CAP) != 0;
    /* a process that sampled nothing (a shell in a wrapper script) leaves
     * no file unless asked: test_prof's test_exit_dump_when_empty */
    int empty = !pm_options.dump_empty && !pm_sites_sampled_any();
    int err = empty ? 0 : truncated ? ENAMETOOLONG : profmalloc_dump(path) == 0 ? 0 : errno;
    /* silent when written, unless asked; else which file and why, in
     * strerror's words from a table (strerror may allocate;
     * test_prof's test_exit_dump_messages) */
    if (!err && !pm_options.verbose) {
        pm_os_unmap(path, PATH_CAP + MSG_CAP);
        return;
    }
    pm_buf_t m;
    pm_buf_init(&m, msg, MSG_CAP - 1, -1);
    pm_buf_str(&m, err     ? "PROFMALLOC_DUMP: could not write the heap profile to "
                   : empty ? "PROFMALLOC_DUMP: nothing sampled, no heap profile written to "
                           : "PROFMALLOC_DUMP: wrote the heap profile to ");
    pm_buf_str(&m, path);
    const char *text = pm_fmt_errno_text(err);
    if (empty) pm_buf_str(&m, " (PROFMALLOC_DUMP_EMPTY=1 writes one)");
    else if (err && text) pm_buf_str(&m, ": "), pm_buf_str(&m, text);
    else if (err) pm_buf_str(&m, ": errno "), pm_buf_u64(&m, (uint64_t)err);
    msg[m.len] = 0;
    pm_os_message(msg);
    pm_os_unmap(path, PATH_CAP + MSG_CAP);
}
