/* trace-malloc.c — LD_PRELOAD tracer that records a program's allocation
 * calls for bench/replay.  Not shipped, not built by make: see
 * bench/tools/record-trace.sh.
 *
 * Each traced process writes $TRACE_DIR/trace.<pid> (text):
 *   # exe <path of /proc/self/exe>
 *   m ID SIZE          malloc / calloc / valloc
 *   a ID ALIGN SIZE    memalign / posix_memalign / aligned_alloc
 *   r ID SIZE          realloc of block ID (keeps its ID); realloc(NULL, n)
 *                      is logged as m, realloc(p, 0) as f
 *   f ID               free
 * IDs are assigned in allocation order, starting at 1.  The tracer keeps
 * the ID in a 16-byte header in front of every block (so it needs no
 * pointer table); it allocates through glibc's __libc_* entry points.
 * Single-threaded programs only give a faithful order (a lock keeps the
 * file consistent anyway).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
#include <dlfcn.h>
static size_t real_usable(void *p);

typedef struct { char *orig; uint64_t id; } hdr_t;
#define HDR 16

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int fd = -1, disabled;
static uint64_t next_id = 1;
static char buf[1 << 16];
static size_t blen;

static void flush(void)
{
    size_t off = 0;
    while (off < blen) {
        ssize_t n = write(fd, buf + off, blen - off);
        if (n <= 0) { if (errno == EINTR) continue; disabled = 1; break; }
        off += (size_t)n;
    }
    blen = 0;
}

static void put(const char *s, size_t n)
{
    if (blen + n > sizeof buf) flush();
    memcpy(buf + blen, s, n);
    blen += n;
}

static void putu(uint64_t v)
{
    char t[24];
    int i = 24;
    do { t[--i] = (char)('0' + v % 10); v /= 10; } while (v);
    put(t + i, (size_t)(24 - i));
}

static int open_trace(void)
{
    if (fd >= 0) return 1;
    if (disabled) return 0;
    const char *dir = getenv("TRACE_DIR");
    if (!dir) { disabled = 1; return 0; }
    char path[4096], exe[2048];
    size_t dl = strlen(dir);
    if (dl > 4000) { disabled = 1; return 0; }
    memcpy(path, dir, dl);
    memcpy(path + dl, "/trace.", 7);
    char t[24]; int i = 24; uint64_t p = (uint64_t)getpid();
    do { t[--i] = (char)('0' + p % 10); p /= 10; } while (p);
    memcpy(path + dl + 7, t + i, (size_t)(24 - i));
    path[dl + 7 + (24 - i)] = 0;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) { disabled = 1; return 0; }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    put("# exe ", 6);
    if (n > 0) put(exe, (size_t)n);
    put("\n", 1);
    return 1;
}

__attribute__((destructor)) static void fini(void)
{
    pthread_mutex_lock(&mu);
    if (fd >= 0) flush();
    pthread_mutex_unlock(&mu);
}

static void *wrap(char *orig, size_t off, size_t size, int kind, size_t align)
{
    if (!orig) return NULL;
    char *user = orig + off;
    hdr_t h = {orig, 0};
    pthread_mutex_lock(&mu);
    h.id = next_id++;
    if (open_trace()) {
        if (kind == 'a') { put("a ", 2); putu(h.id); put(" ", 1); putu(align); }
        else { put("m ", 2); putu(h.id); }
        put(" ", 1); putu(size); put("\n", 1);
    }
    pthread_mutex_unlock(&mu);
    memcpy(user - HDR, &h, sizeof h);
    return user;
}

void *malloc(size_t n) { return wrap(__libc_malloc(n + HDR), HDR, n, 'm', 0); }
void *calloc(size_t a, size_t b)
{
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) { errno = ENOMEM; return NULL; }
    return wrap(__libc_calloc(1, n + HDR), HDR, n, 'm', 0);
}
void *memalign(size_t al, size_t n)
{
    if (al <= HDR) return malloc(n);
    return wrap(__libc_memalign(al, n + al), al, n, 'a', al);
}
void *aligned_alloc(size_t al, size_t n) { return memalign(al, n); }
int posix_memalign(void **out, size_t al, size_t n)
{
    void *p = memalign(al, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void *valloc(size_t n) { return memalign(4096, n); }
void *pvalloc(size_t n) { return memalign(4096, (n + 4095) & ~(size_t)4095); }

void free(void *p)
{
    if (!p) return;
    hdr_t h;
    memcpy(&h, (char *)p - HDR, sizeof h);
    pthread_mutex_lock(&mu);
    if (open_trace()) { put("f ", 2); putu(h.id); put("\n", 1); }
    pthread_mutex_unlock(&mu);
    __libc_free(h.orig);
}

void *realloc(void *p, size_t n)
{
    if (!p) return malloc(n);
    if (n == 0) { free(p); return NULL; }
    hdr_t h;
    memcpy(&h, (char *)p - HDR, sizeof h);
    char *np;
    if ((char *)p - h.orig == HDR) {
        np = __libc_realloc(h.orig, n + HDR);
        if (!np) return NULL;
        np += HDR;
    } else {
        size_t old = real_usable(h.orig) - (size_t)((char *)p - h.orig);
        np = __libc_malloc(n + HDR);
        if (!np) return NULL;
        np += HDR;
        memcpy(np, p, old < n ? old : n);
        __libc_free(h.orig);
    }
    h.orig = np - HDR;
    memcpy(np - HDR, &h, sizeof h);
    pthread_mutex_lock(&mu);
    if (open_trace()) { put("r ", 2); putu(h.id); put(" ", 1); putu(n); put("\n", 1); }
    pthread_mutex_unlock(&mu);
    return np;
}

static size_t real_usable(void *p)
{
    static size_t (*fn)(void *);
    if (!fn) fn = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    return fn ? fn(p) : 0;
}

size_t malloc_usable_size(void *p)
{
    if (!p) return 0;
    hdr_t h;
    memcpy(&h, (char *)p - HDR, sizeof h);
    return real_usable(h.orig) - (size_t)((char *)p - h.orig);
}
