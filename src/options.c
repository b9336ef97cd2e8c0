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
    .dump_prefix = "profmalloc",
    .timeline_interval_ms = 100,
    .timeline_max = 64u << 20,
    .timeline_keep = 3,
    .timeline_sites = 16,
    .timeline_peak_seconds = 10,
    .hp_alloc_interval = (uint64_t)1 << 30,
    .hp_inuse_interval = 100u << 20,
};

/* COUNT: a decimal count (of seconds, milliseconds or files); SIGNAL: a
 * signal by name (SIGUSR2, USR2) or number; LEAKS: "1", "0" or a pattern */
enum kind { SIZE, PATTERN, BOOL, UNWIND, STRING, COUNT, SIGNAL, LEAKS };

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
     "profiling off, `1` records every allocation", &pm_options.sample_rate_set, NULL, 0},
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
     "byte budget shared by all thread caches; unset, the default or 2 MiB a live "
     "thread (up to 256 MiB), whichever is more", &pm_options.tcache_bytes_set, NULL, 0},
    {"PROFMALLOC_RELEASE_BYTES", SIZE, &pm_options.release_bytes,
     "free resident memory kept before pages go back to the OS (pages unused for a "
     "second go back anyway); unset, the cap is the default or the memory in use, "
     "whichever is more, and free memory over it waits for the next tick (1/8 s) "
     "below 1.5 times the cap, and stays while the heap is within half the cap "
     "of its peak of the last second (without `RLIMIT_AS` or strict overcommit); "
     "set, it is the cap, held at every free", &pm_options.release_bytes_set, NULL, 0},
    {"PROFMALLOC_VERBOSE", BOOL, &pm_options.verbose,
     "`1` prints the options in force at start, and where the exit dump was written",
     NULL, NULL, 0},
    {"PROFMALLOC_KEEP_DEEPBIND", BOOL, &pm_options.keep_deepbind,
     "`1`: `dlopen()` keeps `RTLD_DEEPBIND` (dropped by default, so that a library "
     "opened with it frees through profmalloc; profmalloc(3), NOTES)", NULL, NULL, 0},
    {"PROFMALLOC_DUMP_PEAK", PATTERN, &pm_options.dump_peak,
     "write the profile at the peak of live bytes to this path at exit (doc/peak.md); "
     "`%p` is the process id", NULL, NULL, 0},
    {"PROFMALLOC_LEAKS", LEAKS, &pm_options.leaks,
     "`1`: at exit, the call stacks still holding memory, on stderr; a path (`%p` "
     "allowed): their profile instead (doc/leaks.md)", NULL, NULL, 0},
    {"PROFMALLOC_DUMP_PREFIX", PATTERN, &pm_options.dump_prefix,
     "the triggered dumps below go to `<prefix>.<pid>.<seq>.<kind>.pb.gz`; `%p` is the "
     "process id", NULL, NULL, 0},
    {"PROFMALLOC_DUMP_EVERY_BYTES", SIZE, &pm_options.every_bytes,
     "a dump each time this many more bytes were allocated; `0` never", NULL, NULL, 0},
    {"PROFMALLOC_DUMP_EVERY_INUSE", SIZE, &pm_options.every_inuse,
     "a dump each time the high-water mark of live bytes passes a multiple of this; "
     "`0` never", NULL, NULL, 0},
    {"PROFMALLOC_DUMP_EVERY_SECONDS", COUNT, &pm_options.every_seconds,
     "a dump every this many seconds while the program allocates; `0` never", NULL, NULL, 0},
    {"PROFMALLOC_DUMP_SIGNAL", SIGNAL, &pm_options.dump_signal,
     "a dump when this signal arrives (`SIGUSR2`, `USR2` or a number)", NULL, NULL, 0},
    {"PROFMALLOC_TIMELINE", PATTERN, &pm_options.timeline,
     "append a record of live bytes about every interval, and the top sites at each "
     "local peak, to this path (doc/timeline.md); `%p` is the process id", NULL, NULL, 0},
    {"PROFMALLOC_TIMELINE_INTERVAL", COUNT, &pm_options.timeline_interval_ms,
     "milliseconds between timeline records, 1 to 60000", NULL, NULL, 0},
    {"PROFMALLOC_TIMELINE_MAX", SIZE, &pm_options.timeline_max,
     "size at which the timeline rotates to `path.1`, ..., at least 4k", NULL, NULL, 0},
    {"PROFMALLOC_TIMELINE_KEEP", COUNT, &pm_options.timeline_keep,
     "rotated timeline parts kept, 0 to 99", NULL, NULL, 0},
    {"PROFMALLOC_TIMELINE_SITES", COUNT, &pm_options.timeline_sites,
     "sites listed at each timeline peak, 1 to 64", NULL, NULL, 0},
    {"PROFMALLOC_TIMELINE_PEAK_SECONDS", COUNT, &pm_options.timeline_peak_seconds,
     "while live bytes only rise, a timeline peak block at least this often; `0` never",
     NULL, NULL, 0},
    {"HEAPPROFILE", PATTERN, &pm_options.heapprofile,
     "gperftools: write `<prefix>.0001.heap`, ... on gperftools' triggers and at exit; "
     "sets the sample rate to 1 unless `PROFMALLOC_SAMPLE_RATE` is given "
     "(doc/gperftools.md)", NULL, NULL, 0},
    {"HEAP_PROFILE_ALLOCATION_INTERVAL", COUNT, &pm_options.hp_alloc_interval,
     "gperftools: a dump each time this many more bytes were allocated", NULL, NULL, 0},
    {"HEAP_PROFILE_INUSE_INTERVAL", COUNT, &pm_options.hp_inuse_interval,
     "gperftools: a dump each time the high-water mark of live bytes rises by this much",
     NULL, NULL, 0},
    {"HEAP_PROFILE_TIME_INTERVAL", COUNT, &pm_options.hp_time_interval,
     "gperftools: a dump every this many seconds; `0` never", NULL, NULL, 0},
    {"HEAPPROFILESIGNAL", SIGNAL, &pm_options.hp_signal,
     "gperftools: a dump when this signal arrives", NULL, NULL, 0},
    {"PROFMALLOC_HTTP", STRING, &pm_options.http_addr,
     "serve the heap profile at Go's `/debug/pprof/` paths (`heap`, `allocs`, `peak`, "
     "`symbol`) and the statistics and timeline at `/debug/profmalloc/` on `host:port`; `:port` means "
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
         * dump reads the pattern long after; the PATTERN options share a pool */
        PM_SPARSE_BSS static char pool[8 * 4096];
        static size_t used;
        size_t n = 0;
        if (!*v) return -1;
        for (const char *s = v; *s; s++)
            if (*s == '%' && (s[1] == 'p' || s[1] == 'e' || s[1] == '%')) s++;
            else if (*s == '%') return -1;
        while (v[n] && n < 4095) n++;
        if (v[n] || used + n + 1 > sizeof pool) return -1; /* longer than any path */
        char *copy = pool + used;
        used += n + 1;
        for (size_t i = 0; i <= n; i++) copy[i] = v[i];
        *(const char **)o->target = copy;
        return 0;
    }
    case COUNT: {
        uint64_t n = 0;
        const char *s = v;
        for (; *s >= '0' && *s <= '9' && n < UINT64_MAX / 10 - 10; s++) n = n * 10 + (uint64_t)(*s - '0');
        if (s == v || *s) return -1;
        *(uint64_t *)o->target = n;
        return 0;
    }
    case SIGNAL: {
        static const struct { const char *name; int sig; } names[] = {
            {"HUP", 1}, {"INT", 2}, {"QUIT", 3}, {"USR1", 10}, {"USR2", 12},
            {"ALRM", 14}, {"TERM", 15}, {"CHLD", 17}, {"CONT", 18}, {"WINCH", 28},
            {"IO", 29}, {"PWR", 30}, {"PROF", 27}, {"VTALRM", 26}, {"URG", 23}};
        const char *s = v[0] == 'S' && v[1] == 'I' && v[2] == 'G' ? v + 3 : v;
        uint64_t n = 0;
        for (size_t i = 0; i < PM_ARRAY_LEN(names); i++)
            if (pm_fmt_streq(s, names[i].name)) n = (uint64_t)names[i].sig;
        if (!n && *s >= '0' && *s <= '9') {
            const char *d = s;
            while (*d >= '0' && *d <= '9' && n < 1000) n = n * 10 + (uint64_t)(*d++ - '0');
            if (*d) n = 0;
        }
        /* SIGKILL and SIGSTOP cannot be caught; past 64 no signal exists */
        if (!n || n == 9 || n == 19 || n > 64) return -1;
        *(uint64_t *)o->target = n;
        return 0;
    }
    case LEAKS: /* "0": off; "1": the stderr report; else a path pattern */
        if (v[0] == '0' && !v[1]) return 0;
        if (v[0] == '1' && !v[1]) {
            *(const char **)o->target = "1";
            return 0;
        } else {
            struct option p = *o;
            p.kind = PATTERN;
            return parse(&p, v);
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
    case COUNT: pm_buf_u64(&b, *(uint64_t *)o->target); break;
    case SIGNAL: /* 0: none */
        if (*(uint64_t *)o->target) pm_buf_u64(&b, *(uint64_t *)o->target);
        else pm_buf_str(&b, "none");
        break;
    case LEAKS: pm_buf_str(&b, *(const char **)o->target ? *(const char **)o->target : "none"); break;
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
    /* ranges the timeline needs */
    if (pm_options.timeline_interval_ms < 1 || pm_options.timeline_interval_ms > 60000) {
        complain("PROFMALLOC_TIMELINE_INTERVAL", pm_os_getenv("PROFMALLOC_TIMELINE_INTERVAL"), "out of range: 1 to 60000");
        pm_options.timeline_interval_ms = 100;
    }
    if (pm_options.timeline_max < 4096) {
        complain("PROFMALLOC_TIMELINE_MAX", pm_os_getenv("PROFMALLOC_TIMELINE_MAX"), "out of range: at least 4k");
        pm_options.timeline_max = 64u << 20;
    }
    if (pm_options.timeline_keep > 99) {
        complain("PROFMALLOC_TIMELINE_KEEP", pm_os_getenv("PROFMALLOC_TIMELINE_KEEP"), "out of range: 0 to 99");
        pm_options.timeline_keep = 3;
    }
    if (pm_options.timeline_sites < 1 || pm_options.timeline_sites > 64) {
        complain("PROFMALLOC_TIMELINE_SITES", pm_os_getenv("PROFMALLOC_TIMELINE_SITES"), "out of range: 1 to 64");
        pm_options.timeline_sites = 16;
    }
    /* gperftools' profiler is exact: every allocation recorded */
    if (pm_options.heapprofile && !pm_options.sample_rate_set) pm_options.sample_rate = 1;
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
