/* run.c — `profmalloc run`: runs a command with the library preloaded and
 * PROFMALLOC_DUMP pointing into an output directory (one profile per
 * process, %p), waits for it, then prints the top sites of the final heap
 * of each program it ran, processes of one program merged.  Exits with
 * the command's status (128 + signal when it was killed).  The library is
 * looked for next to the command (build/) and under the install prefix.
 * test/cli/test_cli.py: test_run_fork, test_run_exec, test_run_errors. */
#include "cli.h"
#include "cli_main.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PM_CLI_LIBDIR
#define PM_CLI_LIBDIR "/usr/local/lib"
#endif

static const char *const usage_run =
    "usage: profmalloc run [--rate N] [--out DIR] [-n N] [--lines] [--alloc]\n"
    "                      [--peak] [--leaks] [--timeline] [--lib PATH]\n"
    "                      -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD with profmalloc preloaded and heap profiling on, collects the\n"
    "profile that CMD and each of its child processes write at exit (one per\n"
    "process, in DIR), and prints the top allocation sites of the memory each\n"
    "program still held at exit, with function and file:line.  The report goes\n"
    "to stderr; the exit status is CMD's.\n"
    "\n"
    "  --rate N      mean bytes between samples (k, M, G suffixes; default the\n"
    "                library's 512k; 1 records every allocation exactly)\n"
    "  --out DIR     where the profiles go (default ./profmalloc.CMD.PID)\n"
    "  -n N          sites per program (default 10)\n"
    "  --lines       one row per source line instead of per function\n"
    "  --alloc       rank by all bytes allocated instead of bytes held at exit\n"
    "  --peak        also the top sites at the peak of live bytes\n"
    "                (PROFMALLOC_DUMP_PEAK)\n"
    "  --leaks       the sites still holding memory at exit, from the library's\n"
    "                leak report (PROFMALLOC_LEAKS)\n"
    "  --timeline    record live bytes over time (PROFMALLOC_TIMELINE); read it\n"
    "                with profmalloc timeline\n"
    "  --lib PATH    the library to preload (default: found next to this\n"
    "                command, or in " PM_CLI_LIBDIR ")\n";

static int find_lib(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"/libprofmalloc.so", "/../lib/libprofmalloc.so", "/../lib64/libprofmalloc.so",
                             "/../lib/x86_64-linux-gnu/libprofmalloc.so", NULL};
        for (int i = 0; rel[i]; i++) {
            if (strlen(exe) + strlen(rel[i]) >= len) continue;
            memcpy(out, exe, strlen(exe));
            memcpy(out + strlen(exe), rel[i], strlen(rel[i]) + 1);
            char real[PATH_MAX];
            if (access(out, R_OK) == 0 && realpath(out, real)) {
                snprintf(out, len, "%s", real);
                return 0;
            }
        }
    }
    snprintf(out, len, "%s/libprofmalloc.so", PM_CLI_LIBDIR);
    return access(out, R_OK) == 0 ? 0 : -1;
}

typedef struct {
    char *prog;
    cli_profile_t **ps;
    size_t n;
    int *pids;
    double total;
} group_t;

static int group_cmp(const void *a, const void *b)
{
    const group_t *x = a, *y = b;
    return x->total < y->total ? 1 : x->total > y->total ? -1 : strcmp(x->prog, y->prog);
}

static size_t count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

/* Reads DIR/<prefix>*, groups the profiles by program (the executable's
 * mapping), and prints each group's top sites, largest group first. */
static void report(const char *dir, const char *prefix, const char *what, const view_t *v, int limit, bool rate_set)
{
    group_t *g = NULL;
    size_t ng = 0, nfiles = 0, empty = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        cli_profile_t *p = xcalloc(1, sizeof *p);
        char err[512];
        nfiles++;
        if (cli_read_profile(path, p, err, sizeof err)) {
            fprintf(stderr, "profmalloc: %s\n", err);
            free(p);
            continue;
        }
        if (!p->nsamples) {
            empty++;
            cli_free_profile(p);
            free(p);
            continue;
        }
        const char *prog = p->nmaps ? p->maps[0].file : "?";
        size_t k;
        for (k = 0; k < ng; k++)
            if (!strcmp(g[k].prog, prog)) break;
        if (k == ng) {
            g = xrealloc(g, (ng + 1) * sizeof *g);
            memset(&g[ng], 0, sizeof *g);
            g[ng++].prog = xstrdup(prog);
        }
        g[k].ps = xrealloc(g[k].ps, (g[k].n + 1) * sizeof *g[k].ps);
        g[k].pids = xrealloc(g[k].pids, (g[k].n + 1) * sizeof *g[k].pids);
        g[k].pids[g[k].n] = atoi(e->d_name + strlen(prefix));
        g[k].ps[g[k].n++] = p;
        for (size_t s = 0; s < p->nsamples; s++)
            g[k].total += p->samples[s].v[v->alloc ? V_ALLOC_BYTES : V_INUSE_BYTES];
    }
    if (d) closedir(d);
    if (!nfiles && strcmp(prefix, "heap.")) {
        fprintf(stderr, "\n(no profile %s was written: this library does not support %s)\n", what,
                !strcmp(prefix, "peak.") ? "PROFMALLOC_DUMP_PEAK" : "PROFMALLOC_LEAKS");
        return;
    }
    if (empty)
        fprintf(stderr, "  (%zu process%s sampled nothing%s)\n", empty, empty == 1 ? "" : "es",
                rate_set ? "" : "; --rate 1 records every allocation");
    if (ng) qsort(g, ng, sizeof *g, group_cmp);
    for (size_t k = 0; k < ng; k++) {
        for (size_t j = 0; j < g[k].n; j++) cli_symbolize(g[k].ps[j], &sym_opts);
        char title[PATH_MAX + 128];
        const char *base = strrchr(g[k].prog, '/');
        if (g[k].n == 1) snprintf(title, sizeof title, "%s (pid %d), %s", base ? base + 1 : g[k].prog, g[k].pids[0], what);
        else snprintf(title, sizeof title, "%s (%zu processes), %s", base ? base + 1 : g[k].prog, g[k].n, what);
        fputc('\n', stderr);
        top_print(stderr, title, g[k].ps, g[k].n, v, limit, false);
        for (size_t j = 0; j < g[k].n; j++) {
            cli_free_profile(g[k].ps[j]);
            free(g[k].ps[j]);
        }
        free(g[k].ps);
        free(g[k].pids);
        free(g[k].prog);
    }
    free(g);
}

int cmd_run(int argc, char **argv)
{
    view_t v = {0};
    int limit = 10, i;
    const char *out = NULL, *rate = NULL, *lib = NULL;
    bool peak = false, leaks = false, timeline = false;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-') break;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_run, stdout);
            return 0;
        }
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--rate") && val) rate = val, i++;
        else if (!strncmp(a, "--rate=", 7)) rate = a + 7;
        else if (!strcmp(a, "--out") && val) out = val, i++;
        else if (!strncmp(a, "--out=", 6)) out = a + 6;
        else if (!strcmp(a, "--lib") && val) lib = val, i++;
        else if (!strcmp(a, "-n") && val) {
            if (parse_count(val, &limit)) {
                fprintf(stderr, "profmalloc: -n %s: not a count\n%s", val, usage_run);
                return 2;
            }
            i++;
        }
        else if (!strcmp(a, "--lines")) v.lines = true;
        else if (!strcmp(a, "--peak")) peak = true;
        else if (!strcmp(a, "--leaks")) leaks = true;
        else if (!strcmp(a, "--timeline")) timeline = true;
        else if (!strcmp(a, "--alloc")) v.alloc = true;
        else if (!strcmp(a, "--debug-dir") && val) sym_opts.debug_dir = val, i++;
        else {
            fprintf(stderr, "profmalloc: unknown option %s\n%s", a, usage_run);
            return 2;
        }
    }
    if (i >= argc) {
        fprintf(stderr, "profmalloc: no command to run\n%s", usage_run);
        return 2;
    }
    char **cmd = argv + i;
    double r;
    if (rate && parse_size(rate, &r)) {
        fprintf(stderr, "profmalloc: bad --rate '%s'\n", rate);
        return 2;
    }
    char libpath[PATH_MAX];
    if (lib) snprintf(libpath, sizeof libpath, "%s", lib);
    else if (find_lib(libpath, sizeof libpath)) {
        fprintf(stderr, "profmalloc: libprofmalloc.so not found next to this command nor in %s (--lib PATH)\n",
                PM_CLI_LIBDIR);
        return 2;
    }
    char dir[PATH_MAX], abs[PATH_MAX];
    if (out) snprintf(dir, sizeof dir, "%s", out);
    else {
        const char *base = strrchr(cmd[0], '/');
        snprintf(dir, sizeof dir, "profmalloc.%s.%d", base ? base + 1 : cmd[0], (int)getpid());
    }
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "profmalloc: cannot create %s: %s\n", dir, strerror(errno));
        return 2;
    }
    if (!realpath(dir, abs)) {
        fprintf(stderr, "profmalloc: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    /* profiles already in DIR are not this run's */
    DIR *d = opendir(abs);
    size_t before = 0;
    for (struct dirent *e; d && (e = readdir(d));) before += !strncmp(e->d_name, "heap.", 5);
    if (d) closedir(d);
    before += count_files(abs, "peak.") + count_files(abs, "leaks.") + count_files(abs, "timeline.");
    if (before) {
        fprintf(stderr, "profmalloc: %s already holds profiles; use another --out\n", dir);
        return 2;
    }

    char dump[PATH_MAX + 32], *preload;
    snprintf(dump, sizeof dump, "%s/heap.%%p.pb.gz", abs);
    const char *old = getenv("LD_PRELOAD");
    size_t pl = strlen(libpath) + (old ? strlen(old) + 1 : 0) + 1;
    preload = xmalloc(pl);
    snprintf(preload, pl, "%s%s%s", libpath, old && *old ? ":" : "", old && *old ? old : "");
    setenv("LD_PRELOAD", preload, 1);
    setenv("PROFMALLOC_DUMP", dump, 1);
    setenv("PROFMALLOC_DUMP_EMPTY", "1", 1); /* counted below as "sampled nothing" */
    if (rate) setenv("PROFMALLOC_SAMPLE_RATE", rate, 1);
    /* issue 27's variables (doc/timeline.md); a library without them ignores them */
    char extra[PATH_MAX + 32];
    if (peak) {
        snprintf(extra, sizeof extra, "%s/peak.%%p.pb.gz", abs);
        setenv("PROFMALLOC_DUMP_PEAK", extra, 1);
    }
    if (leaks) {
        snprintf(extra, sizeof extra, "%s/leaks.%%p.pb.gz", abs);
        setenv("PROFMALLOC_LEAKS", extra, 1);
    }
    if (timeline) {
        snprintf(extra, sizeof extra, "%s/timeline.%%p", abs);
        setenv("PROFMALLOC_TIMELINE", extra, 1);
    }
    free(preload);

    struct sigaction ign = {0}, oint, oquit;
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &oint);
    sigaction(SIGQUIT, &ign, &oquit);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("profmalloc: fork");
        return 2;
    }
    if (pid == 0) {
        sigaction(SIGINT, &oint, NULL);
        sigaction(SIGQUIT, &oquit, NULL);
        execvp(cmd[0], cmd);
        fprintf(stderr, "profmalloc: %s: %s\n", cmd[0], strerror(errno));
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    sigaction(SIGINT, &oint, NULL);
    sigaction(SIGQUIT, &oquit, NULL);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 2;
    /* a command that could not start leaves no empty directory behind
       (test_cli.py: test_run_errors) */
    if (!out && WIFEXITED(st) && WEXITSTATUS(st) == 127 && !rmdir(abs)) {
        fprintf(stderr, "profmalloc run: %s exited with status 127 and wrote nothing\n", cmd[0]);
        return rc;
    }

    cli_setup_color(stderr);
    sym_opts.progress = true;
    size_t nheap = count_files(abs, "heap.");
    fprintf(stderr, "\n%sprofmalloc run%s: %s exited with status %d; %zu profile%s in %s\n", col("\033[1m"),
            col("\033[0m"), cmd[0], rc, nheap, nheap == 1 ? "" : "s", dir);
    if (!nheap)
        fprintf(stderr, "  no profile was written: the program did not end through exit() (it called\n"
                        "  _exit() or was killed), or it is statically linked, or it cleared LD_PRELOAD\n");
    if (leaks && count_files(abs, "leaks."))
        report(abs, "leaks.", "still allocated at exit (leaks)", &v, limit, rate != NULL);
    else {
        if (leaks && nheap)
            fprintf(stderr, "  (no leak profile: this library does not support PROFMALLOC_LEAKS;\n"
                            "  showing what was held at exit instead)\n");
        report(abs, "heap.", v.alloc ? "allocated over its life" : "held at exit", &v, limit, rate != NULL);
    }
    if (peak) report(abs, "peak.", "at the peak of live bytes", &v, limit, rate != NULL);
    if (timeline) {
        DIR *td = opendir(abs);
        size_t nt = 0;
        for (struct dirent *e; td && (e = readdir(td));) {
            if (strncmp(e->d_name, "timeline.", 9) || strchr(e->d_name + 9, '.')) continue;
            nt++;
            fprintf(stderr, "\ntimeline of pid %s: profmalloc timeline %s/%s [-o timeline.svg]\n", e->d_name + 9, dir,
                    e->d_name);
        }
        if (td) closedir(td);
        if (!nt)
            fprintf(stderr, "\n(no timeline written: this library does not support PROFMALLOC_TIMELINE yet,\n"
                            " or the program allocated for less than an interval)\n");
    }
    if (nheap)
        fprintf(stderr, "\nmore: profmalloc top %s/heap.PID.pb.gz --lines   (or flame, stats, diff)\n", dir);
    return rc;
}
