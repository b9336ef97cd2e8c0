/* fuzz_options.c — libFuzzer harness for the PROFMALLOC_* option parser:
 * the input, split at newlines, becomes the environment (a line's first
 * byte picks the variable when it is not already NAME=...), and
 * pm_options_load parses it.  Every option must come out in range (a rate
 * and sizes at most INT64_MAX, a dump pattern with % only in %p, %e, %%,
 * booleans 0 or 1), and pm_fmt_parse_size must agree with a reference
 * parser written here on every line.  Malformed values are reported on
 * stderr (run with -close_fd_mask=2). */
#include "pm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const char *const names[] = {
    "PROFMALLOC_SAMPLE_RATE", "PROFMALLOC_DUMP", "PROFMALLOC_UNWIND", "PROFMALLOC_TCACHE_BYTES",
    "PROFMALLOC_RELEASE_BYTES", "PROFMALLOC_VERBOSE", "PROFMALLOC_KEEP_DEEPBIND", "PROFMALLOCX",
};

static void die(const char *what, const char *v)
{
    fprintf(stderr, "fuzz_options: %s: \"%s\"\n", what, v);
    abort();
}

/* "<digits>[k|M|G|T][B|iB]", suffix case-insensitive, powers of 1024. */
static int ref_parse(const char *s, uint64_t *out)
{
    uint64_t n = 0;
    const char *p = s;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (n > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return -1;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    unsigned shift = 0;
    switch (*p | 0x20) {
    case 'k': shift = 10; p++; break;
    case 'm': shift = 20; p++; break;
    case 'g': shift = 30; p++; break;
    case 't': shift = 40; p++; break;
    }
    if ((*p | 0x20) == 'b') p++;
    else if (shift && (*p | 0x20) == 'i' && (p[1] | 0x20) == 'b') p += 2;
    if (*p) return -1;
    if (shift && n > (UINT64_MAX >> shift)) return -1;
    *out = n << shift;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static char buf[4096];
    static char *env[64];
    size_t nenv = 0, w = 0, at = 0;
    while (at < len && nenv < PM_ARRAY_LEN(env) - 1) {
        size_t end = at;
        while (end < len && data[end] != '\n') end++;
        size_t n = end - at; /* the line, cut at a NUL */
        const uint8_t *nul = memchr(data + at, 0, n);
        if (nul) n = (size_t)(nul - (data + at));
        char *line = buf + w;
        if (n > 0 && !memchr(data + at, '=', n)) {
            /* NAME=value with the name from the first byte */
            const char *name = names[data[at] % PM_ARRAY_LEN(names)];
            size_t nl = strlen(name);
            if (w + nl + n + 2 >= sizeof buf) break;
            memcpy(buf + w, name, nl);
            buf[w + nl] = '=';
            memcpy(buf + w + nl + 1, data + at + 1, n - 1);
            w += nl + n;
        } else {
            if (w + n + 1 >= sizeof buf) break;
            memcpy(buf + w, data + at, n);
            w += n;
        }
        buf[w++] = 0;
        env[nenv++] = line;
        /* the size parser against the reference, on the value */
        const char *v = strchr(line, '=');
        v = v ? v + 1 : line;
        uint64_t a = 0, b = 0;
        int ra = pm_fmt_parse_size(v, &a), rb = ref_parse(v, &b);
        if (ra != rb || (ra == 0 && a != b)) die("pm_fmt_parse_size disagrees with the reference", v);
        at = end + 1;
    }
    env[nenv] = NULL;
    pm_options_t saved = pm_options;
    char **saved_env = environ;
    environ = env;
    pm_options_load();
    environ = saved_env;
    if (pm_options.sample_rate > INT64_MAX || pm_options.tcache_bytes > INT64_MAX ||
        pm_options.release_bytes > INT64_MAX)
        die("a size above INT64_MAX", "");
    if ((unsigned)pm_options.verbose > 1 || (unsigned)pm_options.keep_deepbind > 1 ||
        (unsigned)pm_options.unwind_fp > 1)
        die("a boolean out of range", "");
    if (pm_options.dump_pattern) {
        const char *d = pm_options.dump_pattern;
        if (!*d) die("an empty dump pattern", d);
        for (; *d; d++)
            if (*d == '%' && d[1] != 'p' && d[1] != 'e' && d[1] != '%')
                die("a stray % in the dump pattern", pm_options.dump_pattern);
            else if (*d == '%') d++;
    }
    pm_options = saved;
    return 0;
}
