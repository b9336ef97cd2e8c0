/* fmt.c — allocation-free formatting and parsing: the one number
 * formatter (decimal, padded, hex), a bounded text buffer that flushes to
 * a file descriptor, size suffixes.
 * Must never: allocate, use stdio, or know any allocator type.
 * No state, no lock. */
#include "pm_internal.h"

#include <errno.h>

size_t pm_fmt_strlen(const char *s)
{
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

int pm_fmt_streq(const char *a, const char *b)
{
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

void pm_buf_init(pm_buf_t *b, char *data, size_t cap, int fd)
{
    b->data = data;
    b->len = 0;
    b->cap = cap;
    b->fd = fd;
    b->error = 0;
    b->truncated = 0;
}

int pm_buf_flush(pm_buf_t *b)
{
    if (b->fd >= 0 && b->len && !b->error) {
        if (pm_os_write_all(b->fd, b->data, b->len) != 0) b->error = errno ? errno : EIO;
    }
    if (b->fd >= 0) b->len = 0;
    return b->error ? -1 : 0;
}

static void put(pm_buf_t *b, const char *s, size_t n)
{
    while (n) {
        if (b->len == b->cap) {
            if (b->fd < 0) {
                b->truncated = 1;
                return;
            }
            pm_buf_flush(b);
        }
        size_t room = b->cap - b->len, k = n < room ? n : room;
        for (size_t i = 0; i < k; i++) b->data[b->len + i] = s[i];
        b->len += k;
        s += k;
        n -= k;
    }
}

void pm_buf_str(pm_buf_t *b, const char *s) { put(b, s, pm_fmt_strlen(s)); }

void pm_fmt_join(char *out, size_t cap, const char *a, const char *b)
{
    pm_buf_t buf;
    pm_buf_init(&buf, out, cap - 1, -1);
    pm_buf_str(&buf, a);
    pm_buf_str(&buf, b);
    out[buf.len] = 0;
}

size_t pm_fmt_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0, i = 0;
    do tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n) out[i++] = tmp[--n];
    return i;
}

size_t pm_fmt_u64_pad(char *out, uint64_t v, size_t width)
{
    char tmp[20];
    size_t n = pm_fmt_u64(tmp, v), i = 0;
    while (n + i < width) out[i++] = ' ';
    for (size_t k = 0; k < n; k++) out[i + k] = tmp[k];
    return i + n;
}

size_t pm_fmt_hex(char *out, uint64_t v, int prefix)
{
    int shift = 60;
    size_t i = 0;
    if (prefix) {
        out[i++] = '0';
        out[i++] = 'x';
    }
    while (shift > 0 && !((v >> shift) & 0xf)) shift -= 4;
    for (; shift >= 0; shift -= 4) out[i++] = "0123456789abcdef"[(v >> shift) & 0xf];
    return i;
}

void pm_buf_u64(pm_buf_t *b, uint64_t v)
{
    char tmp[20];
    put(b, tmp, pm_fmt_u64(tmp, v));
}

void pm_buf_hex(pm_buf_t *b, uint64_t v)
{
    char tmp[18];
    put(b, tmp, pm_fmt_hex(tmp, v, 1));
}

int pm_fmt_parse_size(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*s) {
    case 'k': case 'K': shift = 10; s++; break;
    case 'm': case 'M': shift = 20; s++; break;
    case 'g': case 'G': shift = 30; s++; break;
    case 't': case 'T': shift = 40; s++; break;
    default: break;
    }
    /* "iB" whole: "4Ki" is malformed (test_fmt_parse_size, fuzz_options) */
    if (shift && (*s == 'i' || *s == 'I') && (s[1] == 'b' || s[1] == 'B')) s++;
    if (*s == 'b' || *s == 'B') s++;
    if (*s) return -1;
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    *out = v << shift;
    return 0;
}

/* strerror's text for the errnos a file write meets; NULL for others.
 * glibc's strerror may translate (and so allocate and lock) or format
 * into a buffer; a table does neither (test_fmt's test_errno_text). */
const char *pm_fmt_errno_text(int err)
{
    static const struct { int err; const char *text; } table[] = {
        {EPERM, "Operation not permitted"},
        {ENOENT, "No such file or directory"},
        {EINTR, "Interrupted system call"},
        {EIO, "Input/output error"},
        {ENXIO, "No such device or address"},
        {EBADF, "Bad file descriptor"},
        {EAGAIN, "Resource temporarily unavailable"},
        {ENOMEM, "Cannot allocate memory"},
        {EACCES, "Permission denied"},
        {EBUSY, "Device or resource busy"},
        {EEXIST, "File exists"},
        {EXDEV, "Invalid cross-device link"},
        {ENODEV, "No such device"},
        {ENOTDIR, "Not a directory"},
        {EISDIR, "Is a directory"},
        {EINVAL, "Invalid argument"},
        {ENFILE, "Too many open files in system"},
        {EMFILE, "Too many open files"},
        {ETXTBSY, "Text file busy"},
        {EFBIG, "File too large"},
        {ENOSPC, "No space left on device"},
        {ESPIPE, "Illegal seek"},
        {EROFS, "Read-only file system"},
        {EPIPE, "Broken pipe"},
        {EDEADLK, "Resource deadlock avoided"},
        {ENAMETOOLONG, "File name too long"},
        {ELOOP, "Too many levels of symbolic links"},
        {EOVERFLOW, "Value too large for defined data type"},
        {EDQUOT, "Disk quota exceeded"},
        {ESTALE, "Stale file handle"},
        {ECONNREFUSED, "Connection refused"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].err == err) return table[i].text;
    return NULL;
}
