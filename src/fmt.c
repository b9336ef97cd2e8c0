/* fmt.c — allocation-free formatting and parsing: a bounded text buffer
 * that flushes to a file descriptor, decimal/hex numbers, size suffixes.
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

void pm_buf_u64(pm_buf_t *b, uint64_t v)
{
    char tmp[24];
    int i = sizeof tmp;
    do tmp[--i] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    put(b, tmp + i, sizeof tmp - (size_t)i);
}

void pm_buf_hex(pm_buf_t *b, uint64_t v)
{
    char tmp[18];
    int i = sizeof tmp;
    do tmp[--i] = "0123456789abcdef"[v & 15];
    while ((v >>= 4) != 0);
    tmp[--i] = 'x';
    tmp[--i] = '0';
    put(b, tmp + i, sizeof tmp - (size_t)i);
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
