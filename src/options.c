/* options.c — the one table of PROFMALLOC_* options: name, kind, target,
 * doc; a target's initial value in pm_options is the default.  The table
 * is the one source of the options' documentation: `make docs` writes
 * README.md's, doc/profmalloc.3's and include/profmalloc.h's from it
 * (doc/gen_options.c), and check-docs fails on drift.  Parsed once, at
 * process init, from `environ` (never getenv).  Ignored entirely in
 * setuid/setgid programs (AT_SECURE).  A malformed value is reported once
 * on stderr and the default kept.  Written only during init (under the
 * init protocol), read everywhere. */
#include "pm_internal.h"

pm_options_t pm_options = {
    .sample_rate = PM_SAMPLE_RATE_DEFAULT,
    .dump_pattern = NULL,
    .dump_empty = 0,
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
     "mean bytes between samples, with an optional `k`, `M` or `G` suffix; `0` turns "
     "profiling off, `1` records every allocation", NULL, NULL, 0},
    {"PROFMALLOC_DUMP", PATTERN, &pm_options.dump_pattern,
     "write a heap profile to this path at exit (`exit()` or a return from `main`; a Go "
     "program calls `profmalloc_dump()`); `%p` is the process id, `%e` the program's name "
     "(the last part of the path it was started by: a script's own name), `%%` a %, any "
     "other % makes the value malformed", NULL, NULL, 0},
    {"PROFMALLOC_DUMP_EMPTY", BOOL, &pm_options.dump_empty,
     "`1`: the exit dump is written even by a process that sampled no allocation (by "
     "default such a process, a shell in a wrapper script, writes nothing)", NULL, NULL, 0},
    {"PROFMALLOC_UNWIND", UNWIND, &pm_options.unwind_fp,
     "stack unwinder: `dwarf` (.eh_frame tables, works without frame pointers) or `fp` "
     "(frame pointers: faster, needs `-fno-omit-frame-pointer` everywhere)", NULL, NULL, 0},
    {"PROFMALLOC_TCACHE_BYTES", SIZE, &pm_options.tcache_bytes,
     "byte budget shared by all thread caches", NULL, NULL, 0},
    {"PROFMALLOC_RELEASE_BYTES", SIZE, &pm_options.release_bytes,
     "free resident memory kept before pages go back to the OS (pages unused for a "
     "second go back anyway); unset, the cap is the default or the memory in use, "
     "whichever is more, and free memory over it waits for the next tick (1/8 s) "
     "below 1.5 times the cap; set, it is the cap, held at every free", &pm_options.release_bytes_set, NULL, 0},
    {"PROFMALLOC_VERBOSE", BOOL, &pm_options.verbose,
     "`1` prints the options in force at start, and where the exit dump was written",
     NULL, NULL, 0},
    {"PROFMALLOC_KEEP_DEEPBIND", BOOL, &pm_options.keep_deepbind,
     "`1`: `dlopen()` keeps `RTLD_DEEPBIND` (dropped by default, so that a library "
     "opened with it frees through profmalloc; profmalloc(3), NOTES)", NULL, NULL, 0},
    {"PROFMALLOC_HTTP", STRING, &pm_options.http_addr,
     "serve the heap profile at Go's `/debug/pprof/` paths (`heap`, `allocs`, `symbol`) "
     "and the statistics at `/debug/profmalloc/stats` on `host:port`; `:port` means "
     "127.0.0.1, port 0 picks one (as `profmalloc_http_start()` does; doc/http.md)",
     NULL, http_addr,
     sizeof http_addr},
    {"PROFMALLOC_HTTP_PORT_FILE", STRING, &pm_options.http_port_file,
     "a file the port `PROFMALLOC_HTTP` serves on is written to", NULL, http_port_file,
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
    for (const char *d = doc; *d; d++) /* the doc without its `code` marks */
        if (*d != '`') pm_buf_str(&b, (char[2]){*d, 0});
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
    case PATTERN: { /* a path; % only in %p, %e and %% */
        /* copied: programs that set their process title (nginx, postgres,
         * setproctitle) overwrite the environment strings, and the exit
         * dump reads the pattern long after (one PATTERN option) */
        PM_SPARSE_BSS static char copy[4096];
        size_t n = 0;
        if (!*v) return -1;
        for (const char *s = v; *s; s++)
            if (*s == '%' && (s[1] == 'p' || s[1] == 'e' || s[1] == '%')) s++;
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

/* A size as the docs write it: the largest of G, M, k dividing it. */
static void put_size(pm_buf_t *b, uint64_t v)
{
    static const char suffix[] = "GMk";
    for (int i = 0; i < 3; i++) {
        uint64_t unit = (uint64_t)1 << (30 - 10 * i);
        if (v && v % unit == 0) {
            pm_buf_u64(b, v / unit);
            pm_buf_str(b, (char[2]){suffix[i], 0});
            return;
        }
    }
    pm_buf_u64(b, v);
}

int pm_options_row(size_t i, const char **name, const char **doc, char *def, size_t cap)
{
    if (i >= PM_ARRAY_LEN(table) || cap < 2) return -1;
    const struct option *o = &table[i];
    pm_buf_t b;
    pm_buf_init(&b, def, cap - 1, -1);
    switch (o->kind) {
    case SIZE: put_size(&b, *(uint64_t *)o->target); break;
    case PATTERN:
    case STRING: pm_buf_str(&b, *(const char **)o->target ? *(const char **)o->target : "none"); break;
    case BOOL: pm_buf_u64(&b, (uint64_t)*(int *)o->target); break;
    case UNWIND: pm_buf_str(&b, *(int *)o->target ? "fp" : "dwarf"); break;
    }
    def[b.len] = 0;
    *name = o->name;
    *doc = o->doc;
    return 0;
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
