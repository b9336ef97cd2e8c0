/* options.c — the one table of PROFMALLOC_* options: name, kind, default,
 * one-line doc.  Parsed once, at process init, from `environ` (never
 * getenv).  Ignored entirely in setuid/setgid programs (AT_SECURE).
 * A malformed value is reported once on stderr and the default kept.
 * Written only during init (under the init protocol), read everywhere. */
#include "pm_internal.h"

pm_options_t pm_options = {
    .sample_rate = PM_SAMPLE_RATE_DEFAULT,
    .dump_pattern = NULL,
    .unwind_fp = 0,
    .tcache_bytes = 32u << 20,
    .release_bytes = 64u << 20,
    .verbose = 0,
    .keep_deepbind = 0,
};

enum kind { SIZE, PATTERN, BOOL, UNWIND, STRING };

/* STRING values are copied for the reason PATTERN's is (prof_http.c) */
PM_SPARSE_BSS static char http_addr[128], http_port_file[4096];

static const struct option {
    const char *name;
    enum kind kind;
    void *target;
    const char *doc;
    int *given;       /* set to 1 when the variable is given and valid, or NULL */
    char *copy;       /* STRING: where the value is kept, of `cap` bytes */
    size_t cap;
} table[] = {
    {"PROFMALLOC_SAMPLE_RATE", SIZE, &pm_options.sample_rate,
     "mean bytes between samples; 0 off, 1 every allocation (default 512k)", NULL, NULL, 0},
    {"PROFMALLOC_DUMP", PATTERN, &pm_options.dump_pattern,
     "write a heap profile here at exit; %p = pid, %% = % (default: none)", NULL, NULL, 0},
    {"PROFMALLOC_UNWIND", UNWIND, &pm_options.unwind_fp,
     "stack unwinder: dwarf (default) or fp", NULL, NULL, 0},
    {"PROFMALLOC_TCACHE_BYTES", SIZE, &pm_options.tcache_bytes,
     "byte budget shared by all thread caches (default 32M)", NULL, NULL, 0},
    {"PROFMALLOC_RELEASE_BYTES", SIZE, &pm_options.release_bytes,
     "free resident memory kept before returning it to the OS; unset: 64M or half "
     "the memory in use, whichever is more", &pm_options.release_bytes_set, NULL, 0},
    {"PROFMALLOC_VERBOSE", BOOL, &pm_options.verbose,
     "1: print the options in force at start", NULL, NULL, 0},
    {"PROFMALLOC_KEEP_DEEPBIND", BOOL, &pm_options.keep_deepbind,
     "1: dlopen keeps RTLD_DEEPBIND (default 0: dropped)", NULL, NULL, 0},
    {"PROFMALLOC_HTTP", STRING, &pm_options.http_addr,
     "serve /debug/pprof/ on host:port (:0 picks a port; default: off)", NULL, http_addr,
     sizeof http_addr},
    {"PROFMALLOC_HTTP_PORT_FILE", STRING, &pm_options.http_port_file,
     "write PROFMALLOC_HTTP's port to this file (default: none)", NULL, http_port_file,
     sizeof http_port_file},
};

static void complain(const char *name, const char *value, const char *doc)
{
    char line[400];
    pm_buf_t b;
    pm_buf_init(&b, line, sizeof line - 1, -1);
    pm_buf_str(&b, "ignoring malformed ");
    pm_buf_str(&b, name);
    pm_buf_str(&b, "=\"");
    pm_buf_str(&b, value);
    pm_buf_str(&b, "\" (");
    pm_buf_str(&b, doc);
    pm_buf_str(&b, ")");
    line[b.len] = 0;
    pm_os_message(line);
}

static int parse(const struct option *o, const char *v)
{
    switch (o->kind) {
    case SIZE: { /* at most INT64_MAX: the profile's period is signed */
        uint64_t n;
        if (pm_fmt_parse_size(v, &n) != 0 || n > INT64_MAX) return -1;
        *(uint64_t *)o->target = n;
        return 0;
    }
    case PATTERN: { /* a path; % only in %p and %% */
        /* copied: programs that set their process title (nginx, postgres,
         * setproctitle) overwrite the environment strings, and the exit
         * dump reads the pattern long after (one PATTERN option) */
        PM_SPARSE_BSS static char copy[4096];
        size_t n = 0;
        if (!*v) return -1;
        for (const char *s = v; *s; s++)
            if (*s == '%' && (s[1] == 'p' || s[1] == '%')) s++;
            else if (*s == '%') return -1;
        while (v[n] && n < sizeof copy - 1) n++;
        if (v[n]) return -1; /* longer than any path */
        for (size_t i = 0; i <= n; i++) copy[i] = v[i];
        *(const char **)o->target = copy;
        return 0;
    }
    case BOOL:
        if ((v[0] == '0' || v[0] == '1') && !v[1]) {
            *(int *)o->target = v[0] == '1';
            return 0;
        }
        return -1;
    case STRING: {
        size_t n = pm_fmt_strlen(v);
        if (!n || n >= o->cap) return -1;
        for (size_t i = 0; i <= n; i++) o->copy[i] = v[i];
        *(const char **)o->target = o->copy;
        return 0;
    }
    case UNWIND:
        if (pm_fmt_streq(v, "fp")) *(int *)o->target = 1;
        else if (pm_fmt_streq(v, "dwarf")) *(int *)o->target = 0;
        else return -1;
        return 0;
    }
    return -1;
}

void pm_options_load(void)
{
    if (pm_os_secure()) return;
    for (size_t i = 0; i < PM_ARRAY_LEN(table); i++) {
        const char *v = pm_os_getenv(table[i].name);
        if (v && parse(&table[i], v) != 0) complain(table[i].name, v, table[i].doc);
        else if (v && table[i].given) *table[i].given = 1;
    }
    if (pm_options.verbose) {
        char line[200];
        pm_buf_t b;
        pm_buf_init(&b, line, sizeof line - 1, -1);
        pm_buf_str(&b, "sample_rate=");
        pm_buf_u64(&b, pm_options.sample_rate);
        pm_buf_str(&b, " tcache_bytes=");
        pm_buf_u64(&b, pm_options.tcache_bytes);
        pm_buf_str(&b, " release_bytes=");
        pm_buf_u64(&b, pm_options.release_bytes);
        pm_buf_str(&b, pm_options.unwind_fp ? " unwind=fp" : " unwind=dwarf");
        if (pm_options.keep_deepbind) pm_buf_str(&b, " keep_deepbind=1");
        if (pm_options.http_addr) pm_buf_str(&b, " http="), pm_buf_str(&b, pm_options.http_addr);
        line[b.len] = 0;
        pm_os_message(line);
    }
}
