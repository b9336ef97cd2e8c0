/* pm_fmt.h — allocation-free formatting and parsing (fmt.c), for the
 * allocator and the profile writers alike: no allocator type in sight. */
#ifndef PM_FMT_H
#define PM_FMT_H

#include <stddef.h>
#include <stdint.h>

/* A bounded text buffer that flushes to a file descriptor when full. */
typedef struct pm_buf {
    char *data;
    size_t len, cap;
    int fd;        /* -1: never flush; overflow sets `truncated` */
    int error;     /* errno of the first failed write, or 0 */
    int truncated;
} pm_buf_t;
void pm_buf_init(pm_buf_t *b, char *data, size_t cap, int fd);
void pm_buf_str(pm_buf_t *b, const char *s);
void pm_buf_u64(pm_buf_t *b, uint64_t v);
void pm_buf_hex(pm_buf_t *b, uint64_t v);
/* v into out without a NUL, returning the length: decimal (at most 20
 * characters), decimal right-aligned in at least width (printf's %*llu),
 * lowercase hex with "0x" when prefix is set (at most 18). */
size_t pm_fmt_u64(char *out, uint64_t v);
size_t pm_fmt_u64_pad(char *out, uint64_t v, size_t width);
size_t pm_fmt_hex(char *out, uint64_t v, int prefix);
int pm_buf_flush(pm_buf_t *b);
/* Parses "<digits>[k|M|G|T][B|iB]" (case-insensitive suffix, powers of
 * 1024).  Returns 0 and sets *out, or -1 for anything else. */
int pm_fmt_parse_size(const char *s, uint64_t *out);
size_t pm_fmt_strlen(const char *s);
/* a then b into out (cap bytes), cut short to fit, always terminated. */
void pm_fmt_join(char *out, size_t cap, const char *a, const char *b);
int pm_fmt_streq(const char *a, const char *b);
/* strerror's text for the common errnos of file writes, else NULL. */
const char *pm_fmt_errno_text(int err);

#endif
