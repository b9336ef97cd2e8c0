/* main.c — the profmalloc command: subcommand dispatch, help texts, and
 * the `top`, `diff`, `stats` and `convert` subcommands.  Exit status: 0
 * fine, 1 the data says something is wrong when asked (diff
 * --fail-on-growth), 2 usage or input errors.  Output fits 80 columns;
 * colour only on a terminal, never with NO_COLOR.  The command never runs
 * another program (no binutils, Go or network) but the one `run` is
 * given; it is single-threaded.  test/cli/test_cli.py:
 * test_help_and_usage, test_diff_finds_the_leak, test_stats. */
#include "cli.h"
#include "cli_main.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cli_sym_opts_t sym_opts;

static const char *const usage_main =
    "usage: profmalloc <command> [options] ...\n"
    "\n"
    "Run a program under the profmalloc heap profiler and read its profiles:\n"
    "no other tool needed (symbols and file:line come from the binaries).\n"
    "\n"
    "commands:\n"
    "  run      run a program with profiling on and show its top allocation sites\n"
    "  top      the top allocation sites of a profile\n"
    "  diff     what grew and what shrank between two profiles\n"
    "  flame    an interactive SVG flame graph of a profile\n"
    "  stats    the allocator statistics a profile carries\n"
    "  convert  pprof <-> gperftools legacy text\n"
    "  timeline live bytes over time and the sites at each peak (PROFMALLOC_TIMELINE)\n"
    "\n"
    "Profiles are pprof profile.proto files (gzip'd or not) or gperftools heap\n"
    "text (.heap), as the library writes them (PROFMALLOC_DUMP) or as Go and\n"
    "gperftools write them.  'profmalloc <command> --help' for a command's\n"
    "options; man profmalloc for more.  Exit status: 0 fine, 1 a check failed\n"
    "(diff --fail-on-growth), 2 usage or input error.\n";

static const char *const usage_top =
    "usage: profmalloc top FILE [--inuse|--alloc] [--objects] [-n N] [--lines]\n"
    "                          [--cum] [--json]\n"
    "\n"
    "The allocation sites holding the most memory in a heap profile, with\n"
    "function and file:line read from the program's binaries (symbol table,\n"
    "DWARF line table, separate debug files), sizes, shares, and for a sampled\n"
    "profile the standard error of each estimate.\n"
    "\n"
    "  --inuse       memory in use at the time of the dump (default)\n"
    "  --alloc       all memory allocated up to the dump, freed or not\n"
    "  --objects     count objects instead of bytes\n"
    "  -n N          show N sites (default 20; 0 for all)\n"
    "  --lines       one row per source line instead of per function\n"
    "  --cum         charge each function with everything allocated under it\n"
    "                (its callees too), as pprof's cum column; shares then add\n"
    "                up to more than 100%\n"
    "  --json        machine-readable output\n"
    "  --debug-dir D where separate debug files live (default /usr/lib/debug)\n";

static const char *const usage_diff =
    "usage: profmalloc diff OLD NEW [--inuse|--alloc] [--objects] [-n N] [--lines]\n"
    "                  [--base] [--fail-on-growth BYTES] [--json]\n"
    "\n"
    "What grew and what shrank per allocation site between two profiles of the\n"
    "same program, largest growth first: the leak between two points in time.\n"
    "\n"
    "  --base        print NEW minus OLD as one profile, as pprof -base does\n"
    "                (its top sites, shares of the difference's total)\n"
    "  --fail-on-growth BYTES\n"
    "                exit 1 when the total grew by more than BYTES (k, M, G\n"
    "                suffixes), for CI\n"
    "  (other options as for top)\n";

static const char *const usage_stats =
    "usage: profmalloc stats FILE [--json]\n"
    "\n"
    "The allocator's exact totals that a profmalloc dump carries (bytes in\n"
    "use, mapped, cached, released, metadata...), beside the profile's sampled\n"
    "totals and sample counts.\n";

static const char *const usage_convert =
    "usage: profmalloc convert IN OUT\n"
    "\n"
    "Converts a heap profile between pprof and gperftools legacy text.  OUT's\n"
    "name picks the format: .heap or .txt for legacy text, .pb for raw\n"
    "profile.proto, anything else (.pb.gz) for gzip'd profile.proto.  Function\n"
    "names and file:line found in the binaries are written into a pprof output.\n";

static void usage_err(const char *usage, const char *fmt, const char *arg)
{
    fprintf(stderr, "profmalloc: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage);
}

int parse_size(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    if (*end == 'k' || *end == 'K') v *= 1024, end++;
    else if (*end == 'M' || *end == 'm') v *= 1048576, end++;
    else if (*end == 'G' || *end == 'g') v *= 1073741824.0, end++;
    if (*end == 'i') end++;
    if (*end == 'B') end++;
    if (*end) return -1;
    *out = v;
    return 0;
}

int load_profile(const char *path, cli_profile_t *p)
{
    char err[512];
    if (cli_read_profile(path, p, err, sizeof err)) {
        fprintf(stderr, "profmalloc: %s\n", err);
        return -1;
    }
    cli_symbolize(p, &sym_opts);
    return 0;
}

int parse_count(const char *s, int *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9') return -1;
    long n = strtol(s, &end, 10);
    if (*end || n > INT_MAX) return -1;
    *out = (int)n;
    return 0;
}

/* Common options; returns 1 if consumed (with *i advanced), 0 if not,
 * -1 on a usage error. */
static int view_opt(int argc, char **argv, int *i, view_t *v, int *limit, bool *json)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--inuse")) v->alloc = false;
    else if (!strcmp(a, "--alloc")) v->alloc = true;
    else if (!strcmp(a, "--objects")) v->objects = true;
    else if (!strcmp(a, "--lines")) v->lines = true;
    else if (!strcmp(a, "--cum")) v->cum = true;
    else if (json && !strcmp(a, "--json")) *json = true;
    else if (limit && (!strcmp(a, "-n") || !strncmp(a, "-n", 2) || !strncmp(a, "--n=", 4))) {
        const char *val = !strcmp(a, "-n") ? (*i + 1 < argc ? argv[++*i] : NULL) : a[1] == 'n' ? a + 2 : a + 4;
        if (parse_count(val, limit)) return -1;
    } else if (!strcmp(a, "--debug-dir") || !strncmp(a, "--debug-dir=", 12)) {
        const char *val = a[11] == '=' ? a + 12 : (*i + 1 < argc ? argv[++*i] : NULL);
        if (!val) return -1;
        sym_opts.debug_dir = val;
    } else return 0;
    return 1;
}

static bool wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) return false;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    }
    return false;
}

/* Prints s right-aligned in w columns (UTF-8 aware). */
static void rpad(FILE *f, const char *s, int w)
{
    int cols = 0;
    for (const char *c = s; *c; c++) cols += ((unsigned char)*c & 0xc0) != 0x80;
    for (int k = cols; k < w; k++) fputc(' ', f);
    fputs(s, f);
}

/* ---- top -------------------------------------------------------------- */

int top_print(FILE *f, const char *title, cli_profile_t *const *ps, size_t nps, const view_t *v, int limit,
              bool json)
{
    sitetab_t t = {0};
    for (size_t i = 0; i < nps; i++) collect_sites(ps[i], v, 1, &t);
    sort_sites(&t, false);
    uint64_t period = nps ? ps[0]->period : 0;
    double exact = -1;
    bool at_peak = false;
    for (size_t i = 0; i < nps; i++) {
        total_t tot[64];
        size_t nt = parse_totals(ps[i], tot, 64);
        double x;
        /* a peak profile (PROFMALLOC_DUMP_PEAK) carries the peak's own figure */
        if (!find_total(tot, nt, "peak_in_use", &x)) at_peak = true;
        else if (find_total(tot, nt, "in_use", &x)) continue;
        exact = (exact < 0 ? 0 : exact) + x;
    }
    size_t shown = limit && (size_t)limit < t.n ? (size_t)limit : t.n;
    if (json) {
        fprintf(f, "{\"profile\": ");
        json_str(f, title);
        fprintf(f, ", \"index\": \"%s\", \"period\": %llu, \"total\": %.0f, \"total_stderr\": %.0f, "
                   "\"samples\": %.0f, \"sites_total\": %zu",
                index_name(v), (unsigned long long)period, t.total[1], cli_sqrt(t.totvar[1]), t.totn[1], t.n);
        if (exact >= 0) fprintf(f, ", \"exact_in_use\": %.0f", exact);
        fprintf(f, ",\n \"sites\": [");
        for (size_t i = 0; i < shown; i++) {
            const site_t *s = &t.sites[i];
            fprintf(f, "%s\n  {\"function\": ", i ? "," : "");
            json_str(f, s->func);
            fprintf(f, ", \"file\": ");
            if (s->file) json_str(f, s->file);
            else fprintf(f, "null");
            fprintf(f, ", \"line\": %lld, \"value\": %.0f, \"stderr\": %.0f, \"share\": %.4f, \"samples\": %.0f",
                    (long long)s->line, s->val[1], cli_sqrt(s->var[1]), t.total[1] ? s->val[1] / t.total[1] : 0,
                    s->n[1]);
            if (s->obj) {
                fprintf(f, ", \"object\": ");
                json_str(f, s->obj);
                fprintf(f, ", \"address\": \"0x%llx\"", (unsigned long long)s->vaddr);
            }
            fputc('}', f);
        }
        fprintf(f, "\n ]}\n");
        free_sites(&t);
        return 0;
    }
    char a[32], b[32];
    fmt_value(v, t.total[1], a, sizeof a);
    char summary[160];
    int sl = snprintf(summary, sizeof summary, "%s %s in %zu %s%s", a, index_name(v), t.n,
                      v->cum ? "function" : "site", t.n == 1 ? "" : "s");
    if (v->cum) sl += snprintf(summary + sl, sizeof summary - (size_t)sl, " (cum)");
    if (period > 1) {
        cli_human((double)period, b, sizeof b);
        snprintf(summary + sl, sizeof summary - (size_t)sl, ", sampled every %s", b);
    } else if (nps && ps[0]->has_counts) {
        snprintf(summary + sl, sizeof summary - (size_t)sl, ", every allocation recorded");
    }
    if (strlen(title) + 2 + strlen(summary) <= 80)
        fprintf(f, "%s%s%s: %s\n", col("\033[1m"), title, col("\033[0m"), summary);
    else
        fprintf(f, "%s%s%s:\n  %s\n", col("\033[1m"), title, col("\033[0m"), summary);
    if (!t.n) {
        bool any = false;
        for (size_t i = 0; i < nps && !any; i++)
            for (size_t k = 0; k < ps[i]->nsamples && !any; k++) any = ps[i]->samples[k].n[1] > 0;
        if (any && !v->alloc) fprintf(f, "  (nothing held: every sampled block was freed; see --alloc, --peak)\n");
        else fprintf(f, "  (no samples%s)\n", period > 1 ? ": too little was allocated for the sampling rate; try --rate 1" : "");
        free_sites(&t);
        return 0;
    }
    bool sampled = period > 1;
    fprintf(f, "%10s %9s %6s %7s  %s\n", v->objects ? "objects" : "bytes", sampled ? "std.err" : "",
            "share", sampled ? "samples" : "", "site");
    for (size_t i = 0; i < shown; i++) {
        const site_t *s = &t.sites[i];
        char val[32], err[32], share[16], n[16];
        fmt_value(v, s->val[1], val, sizeof val);
        if (sampled) fmt_err(v, s->var[1], err, sizeof err);
        else err[0] = 0;
        snprintf(share, sizeof share, "%.1f%%", t.total[1] ? 100 * s->val[1] / t.total[1] : 0);
        if (sampled) snprintf(n, sizeof n, "%.0f", s->n[1]);
        else n[0] = 0;
        rpad(f, val, 10);
        fputc(' ', f);
        rpad(f, err, 9);
        fputc(' ', f);
        rpad(f, share, 6);
        fputc(' ', f);
        rpad(f, n, 7);
        fputs("  ", f);
        print_site(f, s, 80 - 37);
    }
    if (shown < t.n) fprintf(f, "%10s  (%zu more sites; -n 0 shows all)\n", "", t.n - shown);
    fmt_value(v, t.total[1], a, sizeof a);
    rpad(f, a, 10);
    fputc(' ', f);
    if (sampled) {
        fmt_err(v, t.totvar[1], b, sizeof b);
        rpad(f, b, 9);
    } else {
        rpad(f, "", 9);
    }
    if (sampled) fprintf(f, " %6s %7.0f  total", "100%", t.totn[1]);
    else fprintf(f, " %6s %7s  total", "100%", "");
    if (exact >= 0 && !v->alloc && !v->objects) {
        cli_human(exact, b, sizeof b);
        fprintf(f, at_peak ? " (exact in use at the peak: %s)" : " (allocator's exact in use: %s)", b);
    }
    fputc('\n', f);
    free_sites(&t);
    return 0;
}

int cmd_top(int argc, char **argv)
{
    view_t v = {0};
    int limit = 20;
    bool json = false;
    const char *file = NULL;
    if (wants_help(argc, argv)) {
        fputs(usage_top, stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        int r = view_opt(argc, argv, &i, &v, &limit, &json);
        if (r < 0) return usage_err(usage_top, "bad value for %s", argv[i]), 2;
        if (r) continue;
        if (argv[i][0] == '-' && argv[i][1]) return usage_err(usage_top, "unknown option %s", argv[i]), 2;
        if (file) return usage_err(usage_top, "one profile only (%s)", argv[i]), 2;
        file = argv[i];
    }
    if (!file) return usage_err(usage_top, "%s", "no profile named"), 2;
    cli_profile_t p;
    sym_opts.progress = true;
    if (load_profile(file, &p)) return 2;
    cli_setup_color(stdout);
    cli_profile_t *pp = &p;
    top_print(stdout, file, &pp, 1, &v, limit, json);
    cli_free_profile(&p);
    return 0;
}

/* ---- diff ------------------------------------------------------------- */

int cmd_diff(int argc, char **argv)
{
    view_t v = {0};
    int limit = 20;
    bool json = false, base = false;
    double fail = -1;
    const char *files[2] = {NULL, NULL};
    int nf = 0;
    if (wants_help(argc, argv)) {
        fputs(usage_diff, stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        int r = view_opt(argc, argv, &i, &v, &limit, &json);
        if (r < 0) return usage_err(usage_diff, "bad value for %s", argv[i]), 2;
        if (r) continue;
        if (!strcmp(argv[i], "--base")) base = true;
        else if (!strcmp(argv[i], "--fail-on-growth") || !strncmp(argv[i], "--fail-on-growth=", 17)) {
            const char *val = argv[i][16] == '=' ? argv[i] + 17 : i + 1 < argc ? argv[++i] : NULL;
            if (!val || parse_size(val, &fail)) return usage_err(usage_diff, "bad value for %s", "--fail-on-growth"), 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return usage_err(usage_diff, "unknown option %s", argv[i]), 2;
        } else if (nf == 2) {
            return usage_err(usage_diff, "two profiles only (%s)", argv[i]), 2;
        } else {
            files[nf++] = argv[i];
        }
    }
    if (nf != 2) return usage_err(usage_diff, "%s", "two profiles needed: OLD NEW"), 2;
    cli_profile_t p[2];
    sym_opts.progress = true;
    if (load_profile(files[0], &p[0])) return 2;
    if (load_profile(files[1], &p[1])) return 2;
    cli_setup_color(stdout);
    sitetab_t t = {0};
    collect_sites(&p[0], &v, 0, &t);
    collect_sites(&p[1], &v, 1, &t);
    sort_sites(&t, false);
    double growth = t.total[1] - t.total[0];
    size_t changed = 0;
    for (size_t i = 0; i < t.n; i++) changed += t.sites[i].val[1] != t.sites[i].val[0];
    size_t shown = 0;
    if (json) {
        printf("{\"old\": ");
        json_str(stdout, files[0]);
        printf(", \"new\": ");
        json_str(stdout, files[1]);
        printf(", \"index\": \"%s\", \"old_total\": %.0f, \"new_total\": %.0f, \"delta\": %.0f, "
               "\"delta_stderr\": %.0f,\n \"sites\": [",
               index_name(&v), t.total[0], t.total[1], growth, cli_sqrt(t.totvar[0] + t.totvar[1]));
        for (size_t i = 0; i < t.n && (!limit || shown < (size_t)limit); i++) {
            const site_t *s = &t.sites[i];
            if (s->val[1] == s->val[0]) continue;
            printf("%s\n  {\"function\": ", shown++ ? "," : "");
            json_str(stdout, s->func);
            printf(", \"file\": ");
            if (s->file) json_str(stdout, s->file);
            else printf("null");
            printf(", \"line\": %lld, \"old\": %.0f, \"new\": %.0f, \"delta\": %.0f, \"stderr\": %.0f}",
                   (long long)s->line, s->val[0], s->val[1], s->val[1] - s->val[0], cli_sqrt(s->var[0] + s->var[1]));
        }
        printf("\n ]}\n");
    } else if (base) {
        /* pprof -base: the difference as a profile of its own */
        char a[32], b[32];
        fmt_value(&v, growth, a, sizeof a);
        printf("%s%s - %s%s:\n  %s %s\n", col("\033[1m"), files[1], files[0], col("\033[0m"), a, index_name(&v));
        printf("%10s %9s %6s  %s\n", v.objects ? "objects" : "flat", "std.err", "flat%", "site");
        for (size_t i = 0; i < t.n && (!limit || shown < (size_t)limit); i++) {
            const site_t *s = &t.sites[i];
            double d = s->val[1] - s->val[0];
            if (d == 0) continue;
            shown++;
            fmt_value(&v, d, a, sizeof a);
            if (p[1].period > 1) fmt_err(&v, s->var[0] + s->var[1], b, sizeof b);
            else b[0] = 0;
            char share[16];
            snprintf(share, sizeof share, "%.1f%%", growth ? 100 * d / growth : 0);
            rpad(stdout, a, 10);
            putchar(' ');
            rpad(stdout, b, 9);
            putchar(' ');
            rpad(stdout, share, 6);
            fputs("  ", stdout);
            print_site(stdout, s, 80 - 29);
        }
        fmt_value(&v, growth, a, sizeof a);
        rpad(stdout, a, 10);
        printf(" %9s %6s  total of the difference\n", "", "100%");
    } else {
        char a[32], b[32], c[32], d[32];
        fmt_value(&v, t.total[0], a, sizeof a);
        fmt_value(&v, t.total[1], b, sizeof b);
        printf("%s%s -> %s%s:\n  %s %s -> %s, %zu site%s changed\n", col("\033[1m"), files[0], files[1],
               col("\033[0m"), index_name(&v), a, b, changed, changed == 1 ? "" : "s");
        printf("%10s %10s %10s %9s  %s\n", "delta", "old", "new", p[1].period > 1 ? "std.err" : "", "site");
        for (size_t i = 0; i < t.n && (!limit || shown < (size_t)limit); i++) {
            const site_t *s = &t.sites[i];
            double dd = s->val[1] - s->val[0];
            if (dd == 0) continue;
            shown++;
            fmt_value(&v, dd, a, sizeof a);
            if (dd > 0) {
                memmove(a + 1, a, strlen(a) + 1);
                a[0] = '+';
            }
            fmt_value(&v, s->val[0], b, sizeof b);
            fmt_value(&v, s->val[1], c, sizeof c);
            if (p[1].period > 1) fmt_err(&v, s->var[0] + s->var[1], d, sizeof d);
            else d[0] = 0;
            fputs(col(dd > 0 ? "\033[31m" : "\033[32m"), stdout);
            rpad(stdout, a, 10);
            fputs(col("\033[0m"), stdout);
            putchar(' ');
            rpad(stdout, b, 10);
            putchar(' ');
            rpad(stdout, c, 10);
            putchar(' ');
            rpad(stdout, d, 9);
            fputs("  ", stdout);
            print_site(stdout, s, 80 - 44);
        }
        if (!changed) printf("%10s  (no site changed)\n", "");
        else if (shown < changed) printf("%10s  (%zu more changed sites; -n 0 shows all)\n", "", changed - shown);
        fmt_value(&v, growth, a, sizeof a);
        if (growth > 0) {
            memmove(a + 1, a, strlen(a) + 1);
            a[0] = '+';
        }
        fmt_value(&v, t.total[0], b, sizeof b);
        fmt_value(&v, t.total[1], c, sizeof c);
        rpad(stdout, a, 10);
        putchar(' ');
        rpad(stdout, b, 10);
        putchar(' ');
        rpad(stdout, c, 10);
        printf(" %9s  total\n", "");
    }
    int rc = 0;
    if (fail >= 0 && growth > fail) {
        char a[32], b[32];
        fmt_value(&v, growth, a, sizeof a);
        fmt_value(&v, fail, b, sizeof b);
        fprintf(stderr, "profmalloc: %s grew by %s, more than the %s allowed\n", index_name(&v), a, b);
        rc = 1;
    }
    free_sites(&t);
    cli_free_profile(&p[0]);
    cli_free_profile(&p[1]);
    return rc;
}

/* ---- stats ------------------------------------------------------------ */

static const char *stat_help(const char *k)
{
    static const char *const h[][2] = {
        {"in_use", "held by the program"},
        {"requested", "requested, by size class"},
        {"mapped", "bytes mapped from the OS"},
        {"resident_estimate", "estimated resident"},
        {"thread_cache", "free in thread caches"},
        {"central_cache", "free in central lists"},
        {"fragmentation", "lost to size-class rounding"},
        {"pageheap_free", "free in the page heap"},
        {"released", "given back to the OS"},
        {"metadata", "allocator metadata"},
        {"threads", "threads with a cache"},
        {"lock_contention", "contended lock waits"},
        {"samples_live", "sampled blocks alive"},
        {"sample_rate", "mean bytes between samples"},
        {NULL, NULL}};
    for (int i = 0; h[i][0]; i++)
        if (!strcmp(h[i][0], k)) return h[i][1];
    return "";
}

int cmd_stats(int argc, char **argv)
{
    bool json = false;
    const char *file = NULL;
    if (wants_help(argc, argv)) {
        fputs(usage_stats, stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-' && argv[i][1]) return usage_err(usage_stats, "unknown option %s", argv[i]), 2;
        else if (file) return usage_err(usage_stats, "one profile only (%s)", argv[i]), 2;
        else file = argv[i];
    }
    if (!file) return usage_err(usage_stats, "%s", "no profile named"), 2;
    cli_profile_t p;
    char err[512];
    if (cli_read_profile(file, &p, err, sizeof err)) {
        fprintf(stderr, "profmalloc: %s\n", err);
        return 2;
    }
    cli_setup_color(stdout);
    total_t tot[64];
    size_t nt = parse_totals(&p, tot, 64);
    double s[V_N] = {0}, n[2] = {0};
    for (size_t i = 0; i < p.nsamples; i++) {
        for (int k = 0; k < V_N; k++) s[k] += p.samples[i].v[k];
        n[0] += p.samples[i].n[0];
        n[1] += p.samples[i].n[1];
    }
    if (json) {
        printf("{\"profile\": ");
        json_str(stdout, file);
        printf(", \"format\": \"%s\", \"period\": %llu, \"sampled\": {\"inuse_space\": %.0f, "
               "\"inuse_objects\": %.0f, \"alloc_space\": %.0f, \"alloc_objects\": %.0f, \"records\": %zu",
               p.legacy ? "legacy" : "pprof", (unsigned long long)p.period, s[V_INUSE_BYTES], s[V_INUSE_OBJ],
               s[V_ALLOC_BYTES], s[V_ALLOC_OBJ], p.nsamples);
        if (p.has_counts) printf(", \"inuse_samples\": %.0f, \"alloc_samples\": %.0f", n[0], n[1]);
        printf("}, \"allocator\": {");
        for (size_t i = 0; i < nt; i++) {
            printf("%s", i ? ", " : "");
            json_str(stdout, tot[i].key);
            printf(": %llu", tot[i].value);
        }
        printf("}}\n");
        cli_free_profile(&p);
        return 0;
    }
    char a[32], b[32];
    printf("%s%s%s:\n  %s profile", col("\033[1m"), file, col("\033[0m"), p.legacy ? "gperftools heap text" : "pprof");
    if (p.period > 1) printf(", sampled every %s", cli_human((double)p.period, a, sizeof a));
    else if (p.has_counts) printf(", every allocation recorded");
    printf("\n\n");
    if (nt) {
        printf("allocator totals at the dump (exact):\n");
        for (size_t i = 0; i < nt; i++) {
            if (tot[i].bytes) {
                cli_human((double)tot[i].value, a, sizeof a);
                printf("  %-17s %9s %13llu  %s\n", tot[i].key, a, tot[i].value, stat_help(tot[i].key));
            } else {
                printf("  %-17s %9llu %13s  %s\n", tot[i].key, tot[i].value, "", stat_help(tot[i].key));
            }
        }
    } else {
        printf("(no allocator totals: the profile was not written by profmalloc)\n");
    }
    printf("\nprofile (%s):\n", p.period > 1 ? "sampled estimates" : "exact");
    printf("  %-17s %9s %13.0f objects\n", "inuse_space", cli_human(s[V_INUSE_BYTES], a, sizeof a), s[V_INUSE_OBJ]);
    printf("  %-17s %9s %13.0f objects\n", "alloc_space", cli_human(s[V_ALLOC_BYTES], b, sizeof b), s[V_ALLOC_OBJ]);
    if (p.has_counts && p.period > 1)
        printf("  %-17s %9.0f %13.0f  behind inuse_space, alloc_space\n", "samples", n[0], n[1]);
    printf("  %-17s %9zu %13s  (stack, size) pairs\n", "records", p.nsamples, "");
    double x;
    if (!find_total(tot, nt, "in_use", &x) && x > 0)
    {
        printf("\nThe profile accounts for %.1f%% of the bytes in use: it counts the bytes each\n"
               "call asked for, the allocator the size classes they were rounded up to%s\n",
               100 * s[V_INUSE_BYTES] / x,
               p.period > 1 ? ";\nand it is an estimate from samples (each site's error: profmalloc top)." : ".");
    }
    cli_free_profile(&p);
    return 0;
}

/* ---- convert ---------------------------------------------------------- */

int cmd_convert(int argc, char **argv)
{
    if (wants_help(argc, argv)) {
        fputs(usage_convert, stdout);
        return 0;
    }
    const char *f[2];
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--debug-dir") && i + 1 < argc) sym_opts.debug_dir = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) return usage_err(usage_convert, "unknown option %s", argv[i]), 2;
        else if (nf == 2) return usage_err(usage_convert, "%s", "two files: IN OUT"), 2;
        else f[nf++] = argv[i];
    }
    if (nf != 2) return usage_err(usage_convert, "%s", "two files: IN OUT"), 2;
    cli_profile_t p;
    if (load_profile(f[0], &p)) return 2;
    if (cli_write_profile_file(f[1], &p)) {
        cli_free_profile(&p);
        return 2;
    }
    cli_free_profile(&p);
    return 0;
}

/* ---- demangle ------------------------------------------------------- */

/* Each argument, or each line of stdin, demangled (or as it was). */
static int cmd_demangle(int argc, char **argv)
{
    if (wants_help(argc, argv)) {
        fputs("usage: profmalloc demangle [NAME...]\n\n"
              "Prints each Itanium C++ name demangled, as profmalloc shows it (the\n"
              "common forms; others unchanged).  Without names, reads one a line.\n",
              stdout);
        return 0;
    }
    char line[8192];
    for (int i = 1; i < argc || (argc == 1 && fgets(line, sizeof line, stdin)); i++) {
        const char *m = argc > 1 ? argv[i] : line;
        if (argc == 1) line[strcspn(line, "\n")] = 0;
        char *d = cli_demangle(m);
        puts(d ? d : m);
        free(d);
        if (argc == 1) i = 0;
    }
    return 0;
}

/* ---- dispatch --------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (argc >= 3 && !strcmp(argv[1], "help")) {
            static char *a[3];
            a[0] = argv[2], a[1] = "--help", a[2] = NULL;
            argv = a;
            argc = 2;
            goto dispatch;
        }
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("profmalloc %s\n", PM_CLI_VERSION);
        return 0;
    }
    argv++;
    argc--;
dispatch:;
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"top", cmd_top},     {"diff", cmd_diff},   {"stats", cmd_stats}, {"convert", cmd_convert},
                {"flame", cmd_flame}, {"run", cmd_run}, {"demangle", cmd_demangle},
                {"timeline", cmd_timeline},     {NULL, NULL}};
    for (int i = 0; cmds[i].name; i++)
        if (!strcmp(argv[0], cmds[i].name)) return cmds[i].fn(argc, argv);
    fprintf(stderr, "profmalloc: unknown command '%s'\n%s", argv[0], usage_main);
    return 2;
}
