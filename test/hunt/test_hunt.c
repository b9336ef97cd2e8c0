/* test_hunt.c — leak hunting end to end: hunt_prog (a program of known
 * behaviour linked with -lprofmalloc) is run with the variables under test
 * and its files and stderr are read back: the peak profile, since-mark,
 * the leak report, the dump triggers, the timeline, gperftools' API. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <malloc.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profmalloc.h"
#include "profile_reader.h"

static char g_dir[PATH_MAX], g_prog[PATH_MAX + 16], g_work[PATH_MAX + 16];

static const char *in_work(const char *name)
{
    static char buf[8][PATH_MAX + 64];
    static int next;
    char *p = buf[next++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", g_work, name);
    return p;
}

/* Runs hunt_prog with argv and extra environment (NULL-terminated), in the
 * work directory; stderr into err (NUL-terminated).  The exit status. */
static int run(const char *const *env, const char *const *args, char *err, size_t cap)
{
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        if (chdir(g_work) != 0) _exit(126);
        for (const char *const *e = env; e && *e; e++) putenv((char *)*e);
        const char *argv[16] = {g_prog};
        int n = 1;
        for (const char *const *a = args; *a && n < 15; a++) argv[n++] = *a;
        argv[n] = NULL;
        execv(g_prog, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    size_t n = 0;
    ssize_t r;
    char scratch[4096];
    while ((r = read(pipefd[0], err && n < cap - 1 ? err + n : scratch,
                     err && n < cap - 1 ? cap - 1 - n : sizeof scratch)) > 0)
        if (err && n < cap - 1) n += (size_t)r;
    close(pipefd[0]);
    if (err) err[n] = 0;
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Empties the work directory. */
static void clean_work(void)
{
    DIR *d = opendir(g_work);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' || (e->d_name[1] && (e->d_name[1] != '.' || e->d_name[2])))
            unlink(in_work(e->d_name));
    closedir(d);
}

/* Files in the work directory whose name contains `part`. */
static int count_files(const char *part)
{
    DIR *d = opendir(g_work);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

/* The in-use bytes (signed) of the samples whose stack passes through fn. */
static int64_t inuse_of(const tprof_t *p, const char *fn)
{
    int64_t sum = 0;
    for (size_t i = 0; i < p->ns; i++) {
        const tsample_t *s = &p->s[i];
        for (size_t k = 0; k < s->locs.n; k++) {
            const char *name = loc_func_name(p, loc_by_id(p, s->locs.v[k]));
            if (name && strcmp(name, fn) == 0) {
                sum += (int64_t)s->vals.v[3];
                break;
            }
        }
    }
    return sum;
}

static const char *comment_with(const tprof_t *p, const char *prefix)
{
    for (size_t i = 0; i < p->comments.n; i++) {
        const char *c = S(p, p->comments.v[i]);
        if (strncmp(c, prefix, strlen(prefix)) == 0) return c;
    }
    return NULL;
}

/* ---- the peak --------------------------------------------------------- */

static void check_peak(const char *rate)
{
    clean_work();
    char env_rate[64];
    snprintf(env_rate, sizeof env_rate, "PROFMALLOC_SAMPLE_RATE=%s", rate);
    const char *env[] = {env_rate, "PROFMALLOC_DUMP_PEAK=atexit-peak.%p.pb.gz", NULL};
    const char *args[] = {"peak", in_work("peak.pb.gz"), in_work("exit.pb.gz"), NULL};
    char err[4096];
    assert_int_equal(run(env, args, err, sizeof err), 0);
    tprof_t peak, end, atexit_peak;
    load_profile(&peak, in_work("peak.pb.gz"), NULL);
    load_profile(&end, in_work("exit.pb.gz"), NULL);
    assert_int_equal(count_files("atexit-peak."), 1);
    DIR *d = opendir(g_work);
    char name[300] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, "atexit-peak.")) snprintf(name, sizeof name, "%s", e->d_name);
    closedir(d);
    load_profile(&atexit_peak, in_work(name), NULL);
    int64_t pk = inuse_of(&peak, "peak_site"), st = inuse_of(&peak, "steady_site");
    int64_t pk_end = inuse_of(&end, "peak_site"), st_end = inuse_of(&end, "steady_site");
    /* peak_site held 20 MB at the peak, steady_site 2 MB; at exit 0.2 MB and 2 MB */
    if (!(pk > 5 * st)) fail_msg("rate %s: at the peak peak_site %lld, steady_site %lld", rate, (long long)pk, (long long)st);
    /* 2 MB against 0.37 MB (20 KiB blocks left and the 160 KiB array) */
    if (!(st_end > 2 * pk_end)) fail_msg("rate %s: at exit peak_site %lld, steady_site %lld", rate, (long long)pk_end, (long long)st_end);
    if (!strcmp(rate, "1")) {
        /* exact at rate 1: the copy was taken within 10 % of the top */
        assert_true(pk >= 20480 * 1024 * 9 / 10 - 2048 * 1000);
        assert_int_equal(st, 2048 * 1000);
        assert_int_equal(pk_end, 205 * 1024 + 20480 * sizeof(void *)); /* and its array */
    }
    assert_true(inuse_of(&atexit_peak, "peak_site") > 5 * inuse_of(&atexit_peak, "steady_site"));
    const char *c = comment_with(&peak, "profmalloc: peak_in_use=");
    assert_non_null(c);
    assert_true(strtoull(c + strlen("profmalloc: peak_in_use="), NULL, 10) >= 18u << 20);
    assert_non_null(comment_with(&peak, "profmalloc: peak_time="));
    free_profile(&peak);
    free_profile(&end);
    free_profile(&atexit_peak);
}

static void test_peak_profile_tops_peak_site(void **state)
{
    (void)state;
    check_peak("1");
    check_peak("64k");
}

/* ---- mark / since mark ------------------------------------------------ */

static void test_since_mark_shows_growth_and_shrink(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=1", NULL};
    const char *args[] = {"mark", in_work("since.pb.gz"), NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    tprof_t p;
    load_profile(&p, in_work("since.pb.gz"), NULL);
    assert_int_equal(inuse_of(&p, "after_mark_site"), 1000 * 5000);
    assert_int_equal(inuse_of(&p, "before_mark_site"), -500 * 3000);
    assert_int_equal(inuse_of(&p, "untouched_site"), 0);
    assert_non_null(comment_with(&p, "profmalloc: mark_time="));
    free_profile(&p);
}

/* ---- the leak report -------------------------------------------------- */

static void test_leak_report_names_only_the_leak(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=1", "PROFMALLOC_LEAKS=1", NULL};
    const char *args[] = {"leak", NULL};
    char err[8192];
    assert_int_equal(run(env, args, err, sizeof err), 0);
    if (!strstr(err, "leaks: 1 call stack holds 1228800 bytes at exit (exact"))
        fail_msg("report:\n%s", err);
    assert_non_null(strstr(err, "1228800 bytes in 300 blocks of 4096 at leaky_function <- main"));
    assert_null(strstr(err, "tidy_function"));
    /* sampled: an estimate with its error, still only the leak */
    const char *env2[] = {"PROFMALLOC_SAMPLE_RATE=16k", "PROFMALLOC_LEAKS=1", NULL};
    assert_int_equal(run(env2, args, err, sizeof err), 0);
    if (!strstr(err, "call stack holds about") || !strstr(err, " +- ") || !strstr(err, "leaky_function"))
        fail_msg("report:\n%s", err);
    assert_null(strstr(err, "tidy_function"));
    /* a path: the profile of what is left */
    const char *env3[] = {"PROFMALLOC_SAMPLE_RATE=1", "PROFMALLOC_LEAKS=leaks.%p.pb.gz", NULL};
    assert_int_equal(run(env3, args, err, sizeof err), 0);
    assert_int_equal(count_files("leaks."), 1);
}

/* ---- dump triggers ---------------------------------------------------- */

static void test_dump_every_bytes(void **state)
{
    (void)state;
    clean_work();
    /* 10 MB allocated in 4 KiB blocks, a dump per 1 MB: 10 dumps */
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=1", "PROFMALLOC_DUMP_EVERY_BYTES=1M", "PROFMALLOC_DUMP_PREFIX=trig",
                         NULL};
    const char *args[] = {"churn", "10485760", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    assert_int_equal(count_files(".bytes.pb.gz"), 10);
    assert_int_equal(count_files("trig."), 10);
}

static void test_dump_every_inuse(void **state)
{
    (void)state;
    clean_work();
    /* live bytes rise to 8 MB (2048 blocks of 4 KiB): a dump per 1 MB of high-water mark */
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=1", "PROFMALLOC_DUMP_EVERY_INUSE=1M", "PROFMALLOC_DUMP_PREFIX=trig",
                         NULL};
    const char *args[] = {"inuse", "2048", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    assert_int_equal(count_files(".inuse.pb.gz"), 8);
}

static void test_dump_on_signal(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_DUMP_SIGNAL=SIGUSR2", "PROFMALLOC_DUMP_PREFIX=sig", NULL};
    const char *args[] = {"signal", "3", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    assert_int_equal(count_files(".signal.pb.gz"), 3);
    /* gperftools' signal on the same one: both see each */
    clean_work();
    const char *env2[] = {"PROFMALLOC_DUMP_SIGNAL=USR2", "PROFMALLOC_DUMP_PREFIX=sig", "HEAPPROFILE=hs",
                          "HEAPPROFILESIGNAL=12", NULL};
    assert_int_equal(run(env2, args, NULL, 0), 0);
    assert_int_equal(count_files(".signal.pb.gz"), 3);
    assert_int_equal(count_files(".heap"), 3 + 1); /* and the one at exit */
}

static void test_dump_every_seconds(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=4k", "PROFMALLOC_DUMP_EVERY_SECONDS=1", "PROFMALLOC_DUMP_PREFIX=sec",
                         NULL};
    const char *args[] = {"seconds", "2500", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    assert_int_equal(count_files(".seconds.pb.gz"), 2);
}

static void test_malformed_hunt_options(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_DUMP_SIGNAL=SIGNOPE", "PROFMALLOC_DUMP_EVERY_SECONDS=1x",
                         "PROFMALLOC_LEAKS=%z", NULL};
    const char *args[] = {"leak", NULL};
    char err[4096];
    assert_int_equal(run(env, args, err, sizeof err), 0);
    assert_non_null(strstr(err, "ignoring malformed PROFMALLOC_DUMP_SIGNAL=\"SIGNOPE\""));
    assert_non_null(strstr(err, "ignoring malformed PROFMALLOC_DUMP_EVERY_SECONDS=\"1x\""));
    assert_non_null(strstr(err, "ignoring malformed PROFMALLOC_LEAKS=\"%z\""));
    /* once each */
    assert_null(strstr(strstr(err, "PROFMALLOC_DUMP_SIGNAL") + 1, "PROFMALLOC_DUMP_SIGNAL"));
    assert_null(strstr(err, "leaks:"));
}

/* ---- gperftools ---------------------------------------------------------- */

/* Runs cmd; its output into out; the exit status. */
static int capture(const char *cmd, char *out, size_t cap)
{
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    return pclose(f);
}

/* The first function name on the first data line of `go tool pprof -top`
 * or `google-pprof --text` output (the top function). */
static void top_function_is(const char *out, const char *fn, const char *tool)
{
    const char *line = out;
    for (; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        /* data lines start with a number and hold a % */
        const char *p = line;
        while (*p == ' ') p++;
        if (*p >= '0' && *p <= '9' && strchr(p, '%') && strchr(p, '%') < strchr(p, '\n')) break;
    }
    if (!line || !*line) fail_msg("%s: no data line in:\n%s", tool, out);
    const char *end = strchr(line, '\n');
    char first[512];
    size_t n = end ? (size_t)(end - line) : strlen(line);
    snprintf(first, sizeof first, "%.*s", (int)n, line);
    if (!strstr(first, fn)) fail_msg("%s: top line is '%s', not %s; output:\n%s", tool, first, fn, out);
}

static void test_gperftools_api(void **state)
{
    (void)state;
    char prog[PATH_MAX + 32];
    snprintf(prog, sizeof prog, "%s/gperf_prog", g_dir);
    if (access(prog, X_OK) != 0) {
        print_message("skipped: no <gperftools/heap-profiler.h> (libgoogle-perftools-dev) at build time\n");
        skip();
    }
    clean_work();
    char cmd[3 * PATH_MAX], out[1 << 16];
    snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", prog, in_work("gp"));
    assert_int_equal(capture(cmd, out, sizeof out), 0);
    /* the dump, and the final one at exit; none after HeapProfilerStop */
    assert_int_equal(count_files("gp.0001.heap"), 1);
    assert_int_equal(count_files(".heap"), 1);
    if (system("command -v google-pprof >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd, "google-pprof --text '%s' '%s' 2>/dev/null", prog, in_work("gp.0001.heap"));
        assert_int_equal(capture(cmd, out, sizeof out), 0);
        top_function_is(out, "gperf_site", "google-pprof");
    } else {
        print_message("google-pprof not installed: not checked with it\n");
    }
    if (system("command -v go >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd, "go tool pprof -top '%s' '%s' 2>/dev/null", prog, in_work("gp.0001.heap"));
        assert_int_equal(capture(cmd, out, sizeof out), 0);
        top_function_is(out, "gperf_site", "go tool pprof");
    } else {
        print_message("go not installed: not checked with go tool pprof\n");
    }
}

static void test_heapprofile_numbered_files(void **state)
{
    (void)state;
    clean_work();
    /* 5.5 MB allocated, a dump per 1 MB, and the final dump at exit */
    const char *env[] = {"HEAPPROFILE=hp", "HEAP_PROFILE_ALLOCATION_INTERVAL=1048576", NULL};
    const char *args[] = {"churn", "5767168", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    for (int i = 1; i <= 6; i++) {
        char name[32];
        snprintf(name, sizeof name, "hp.%04d.heap", i);
        assert_int_equal(count_files(name), 1);
    }
    assert_int_equal(count_files(".heap"), 6);
    /* exact, as gperftools' (HEAPPROFILE implies rate 1): the text says so */
    size_t len;
    uint8_t *text = slurp(in_work("hp.0006.heap"), &len);
    assert_true(strncmp((char *)text, "heap profile:", 13) == 0);
    assert_non_null(strstr((char *)text, "heapprofile"));
    free(text);
    /* HEAP_PROFILE_INUSE_INTERVAL: 8 MB live at the top, a dump per 2 MB of high-water mark */
    clean_work();
    const char *env2[] = {"HEAPPROFILE=in", "HEAP_PROFILE_INUSE_INTERVAL=2097152", NULL};
    const char *args2[] = {"inuse", "2048", NULL};
    assert_int_equal(run(env2, args2, NULL, 0), 0);
    assert_int_equal(count_files(".heap"), 3 + 1); /* past 2, 4+, 6+ MB (strictly above), and exit */
}

/* ---- the timeline -------------------------------------------------------- */

static long read_timeline(const char *path, profmalloc_timeline_point_t *v, size_t cap)
{
    long n = profmalloc_timeline_read(path, v, cap);
    if (n < 0) fail_msg("profmalloc_timeline_read %s: %s", path, strerror(errno));
    assert_true((size_t)n <= cap);
    return n;
}

static void test_timeline_shape_and_peaks(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=1", "PROFMALLOC_TIMELINE=tl.%p", "PROFMALLOC_TIMELINE_INTERVAL=50",
                         NULL};
    const char *args[] = {"ramps", in_work("addr"), NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    DIR *d = opendir(g_work);
    char name[300] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "tl.", 3)) snprintf(name, sizeof name, "%s", e->d_name);
    closedir(d);
    assert_true(name[0]);
    size_t len;
    char *addr_text = (char *)slurp(in_work("addr"), &len);
    uintptr_t ramp = (uintptr_t)strtoull(addr_text, NULL, 16);
    free(addr_text);
    static profmalloc_timeline_point_t v[10000];
    long n = read_timeline(in_work(name), v, 10000);
    const uint64_t MB = 1 << 20;
    /* the shape: up to 8 MB, down below 1 MB, up to 16 MB, down, the end */
    int phase = 0, peaks = 0, records = 0;
    uint64_t last_t = 0;
    for (long i = 0; i < n; i++) {
        assert_true(v[i].kind == 'P' || v[i].t_ms >= last_t); /* a peak: the time it was seen */
        if (v[i].kind != 'P') last_t = v[i].t_ms;
        if (v[i].kind == 'R') {
            records++;
            assert_true(v[i].min <= v[i].live && v[i].live <= v[i].max);
            if (phase == 0 && v[i].max >= 8 * MB) phase = 1;
            else if (phase == 1 && v[i].min < MB) phase = 2;
            else if (phase == 2 && v[i].max >= 16 * MB) phase = 3;
            else if (phase == 3 && v[i].min < MB) phase = 4;
            assert_true(v[i].max < 17 * MB);
        } else if (v[i].kind == 'P') {
            /* each peak within its interval of the top, topped by ramp_site */
            uint64_t want = peaks == 0 ? 8 * MB : 16 * MB;
            if (!(v[i].live >= want && v[i].live < want + MB))
                fail_msg("peak %d: %llu bytes, not about %llu", peaks, (unsigned long long)v[i].live, (unsigned long long)want);
            assert_true(v[i].top_bytes >= want - want / 8);
            if (!(v[i].top_pc > ramp && v[i].top_pc < ramp + 1024))
                fail_msg("peak %d's top site at %#lx, not in ramp_site (%#lx)", peaks, (unsigned long)v[i].top_pc, (unsigned long)ramp);
            peaks++;
        }
    }
    if (phase != 4) fail_msg("the timeline's shape stopped at phase %d of 4 (%d records)", phase, records);
    assert_int_equal(peaks, 2);
    assert_true(records >= 20);
    assert_int_equal(v[n - 1].kind, 'Z');
}

/* One peak per fall, and a peak after each rise from the trough: a blip
 * during a fall above the live bytes of the record that wrote the peak is
 * not a second peak, and a second rise lower than the first peak's record
 * is one (the zigzag mode makes records at known points by napping). */
static void test_timeline_one_peak_per_fall(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=1", "PROFMALLOC_TIMELINE=zz.tl", "PROFMALLOC_TIMELINE_INTERVAL=20",
                         NULL};
    const char *args[] = {"zigzag", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    static profmalloc_timeline_point_t v[10000];
    long n = read_timeline(in_work("zz.tl"), v, 10000);
    const uint64_t MB = 1 << 20, want[2] = {8 * MB, 4 * MB};
    int peaks = 0;
    for (long i = 0; i < n; i++) {
        if (v[i].kind != 'P') continue;
        if (peaks < 2 && !(v[i].live >= want[peaks] && v[i].live < want[peaks] + 64 * 1024))
            fail_msg("peak %d: %llu bytes, not about %llu", peaks, (unsigned long long)v[i].live,
                     (unsigned long long)want[peaks]);
        peaks++;
    }
    assert_int_equal(peaks, 2);
    assert_int_equal(v[n - 1].kind, 'Z');
}

static void test_timeline_survives_sigkill(void **state)
{
    (void)state;
    clean_work();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(g_work) != 0) _exit(126);
        putenv("PROFMALLOC_SAMPLE_RATE=1");
        putenv("PROFMALLOC_TIMELINE=killed.tl");
        putenv("PROFMALLOC_TIMELINE_INTERVAL=5");
        execl(g_prog, g_prog, "grow-forever", (char *)NULL);
        _exit(127);
    }
    usleep(400 * 1000);
    kill(pid, SIGKILL);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    static profmalloc_timeline_point_t v[100000];
    long n = read_timeline(in_work("killed.tl"), v, 100000);
    assert_true(n >= 5);
    uint64_t last = 0;
    for (long i = 0; i < n; i++) {
        assert_int_equal(v[i].kind, 'R'); /* no end mark, no peak: it only grew */
        assert_true(v[i].live >= last);
        last = v[i].live;
    }
    /* a record or a peak block cut short is left out, the rest read */
    FILE *f = fopen(in_work("killed.tl"), "a");
    fputs("R 123456 99 99 99 1 1", f);
    fclose(f);
    assert_int_equal(read_timeline(in_work("killed.tl"), v, 100000), n);
    f = fopen(in_work("killed.tl"), "a");
    fputs(" 1 1 1\nP 123457 5 2\nS 4096 1 4096 abc\nS 4096 1 4096 abd\n", f);
    fclose(f);
    assert_int_equal(read_timeline(in_work("killed.tl"), v, 100000), n + 1);
    /* not a timeline */
    f = fopen(in_work("not.tl"), "w");
    fputs("profmalloc-timeline 2 pid=1\n", f);
    fclose(f);
    assert_int_equal(profmalloc_timeline_read(in_work("not.tl"), v, 1), -1);
    assert_int_equal(errno, EPROTO);
}

static void test_timeline_rotates(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=4k", "PROFMALLOC_TIMELINE=rot.tl", "PROFMALLOC_TIMELINE_INTERVAL=1",
                         "PROFMALLOC_TIMELINE_MAX=4k", "PROFMALLOC_TIMELINE_KEEP=1", NULL};
    /* 300 rounds, each longer than the interval: 300 records or more, about
     * 18 KB, so at least 4 files of 4 KiB */
    const char *args[] = {"ticks", "300", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    const char *names[] = {"rot.tl.1", "rot.tl"};
    long last_part = -1;
    for (int i = 0; i < 2; i++) {
        size_t len;
        char *text = (char *)slurp(in_work(names[i]), &len);
        assert_true(len <= 4096);
        assert_true(strncmp(text, "profmalloc-timeline 1 ", 22) == 0);
        long part = strtol(strstr(text, " part=") + 6, NULL, 10);
        assert_true(part > last_part);
        last_part = part;
        free(text);
        static profmalloc_timeline_point_t v[1000];
        assert_true(read_timeline(in_work(names[i]), v, 1000) > 5);
    }
    if (last_part < 2) fail_msg("last part %ld: nothing was dropped", last_part);
    assert_int_equal(access(in_work("rot.tl.2"), F_OK), -1);
}

/* Live bytes that only rise (a leak) still show their top sites, at least
 * every PROFMALLOC_TIMELINE_PEAK_SECONDS. */
static void test_timeline_sites_while_rising(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=16k", "PROFMALLOC_TIMELINE=up.tl", "PROFMALLOC_TIMELINE_PEAK_SECONDS=1",
                         NULL};
    const char *args[] = {"grow", "800", NULL}; /* 50 MB over 1.6 s or more */
    assert_int_equal(run(env, args, NULL, 0), 0);
    static profmalloc_timeline_point_t v[10000];
    long n = read_timeline(in_work("up.tl"), v, 10000);
    int peaks = 0;
    uint64_t last = 0;
    for (long i = 0; i < n; i++)
        if (v[i].kind == 'P') {
            assert_true(v[i].live > last);
            last = v[i].live;
            peaks++;
        }
    /* one after a second of rising, and the last, at exit */
    if (peaks < 2) fail_msg("%d peak blocks while rising", peaks);
}

/* A program allocating far less than the sample rate per interval (64
 * KiB per 100 ms at the default 512 KiB), or at rate 0, still gets a
 * record about every interval: the slow paths tick the timeline too.  At
 * rate 0 live bytes are the allocator's exact in_use. */
static void test_timeline_slow_allocator(void **state)
{
    (void)state;
    const char *rates[] = {"PROFMALLOC_SAMPLE_RATE=512k", "PROFMALLOC_SAMPLE_RATE=0"};
    for (int r = 0; r < 2; r++) {
        clean_work();
        const char *env[] = {rates[r], "PROFMALLOC_TIMELINE=slow.tl", NULL};
        const char *args[] = {"slow", "150", NULL}; /* 1.5 s or more, 960 KB kept */
        assert_int_equal(run(env, args, NULL, 0), 0);
        static profmalloc_timeline_point_t v[10000];
        long n = read_timeline(in_work("slow.tl"), v, 10000);
        int records = 0;
        uint64_t last_in_use = 0, last_t = 0;
        for (long i = 0; i < n; i++) {
            if (v[i].kind != 'R') continue;
            records++;
            /* what the program holds only grows: so does the exact count */
            assert_true(v[i].in_use + 64 * 1024 >= last_in_use);
            last_in_use = v[i].in_use;
            last_t = v[i].t_ms;
            if (r == 1) {
                assert_int_equal(v[i].live, v[i].in_use);
                assert_true(v[i].min <= v[i].live && v[i].live <= v[i].max);
            }
        }
        if (records < 10)
            fail_msg("%s: %d records over %llu ms", rates[r], records, (unsigned long long)last_t);
        /* 150 x 100 x 64 B kept at the end, plus the program's own */
        if (!(last_in_use >= 960000 && last_in_use < 4 * 960000))
            fail_msg("%s: %llu bytes in use at the end", rates[r], (unsigned long long)last_in_use);
        assert_int_equal(v[n - 1].kind, 'Z');
    }
}

/* A write that fails (a full disk: /dev/full) stops the timeline, said
 * once: nothing may follow a record cut short. */
static void test_timeline_stops_on_write_error(void **state)
{
    (void)state;
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=4k", "PROFMALLOC_TIMELINE=/dev/full", "PROFMALLOC_TIMELINE_INTERVAL=1",
                         NULL};
    const char *args[] = {"ticks", "20", NULL};
    char err[4096];
    assert_int_equal(run(env, args, err, sizeof err), 0);
    const char *m = strstr(err, "PROFMALLOC_TIMELINE: could not write the timeline; stopped");
    if (!m) fail_msg("stderr:\n%s", err);
    assert_null(strstr(m + 1, "PROFMALLOC_TIMELINE"));
}

static void test_timeline_in_forked_child(void **state)
{
    (void)state;
    clean_work();
    const char *env[] = {"PROFMALLOC_SAMPLE_RATE=4k", "PROFMALLOC_TIMELINE=fk.%p", "PROFMALLOC_TIMELINE_INTERVAL=10",
                         NULL};
    const char *args[] = {"fork", NULL};
    assert_int_equal(run(env, args, NULL, 0), 0);
    /* one file per process, each its own, with its records */
    DIR *d = opendir(g_work);
    int files = 0, ended = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "fk.", 3)) continue;
        files++;
        static profmalloc_timeline_point_t v[10000];
        long n = read_timeline(in_work(e->d_name), v, 10000);
        assert_true(n >= 5);
        ended += v[n - 1].kind == 'Z';
        size_t len;
        char *text = (char *)slurp(in_work(e->d_name), &len);
        char want[64];
        snprintf(want, sizeof want, " pid=%s ", e->d_name + 3);
        assert_non_null(strstr(text, want));
        free(text);
    }
    closedir(d);
    assert_int_equal(files, 2);
    assert_int_equal(ended, 1); /* the parent's; the child left with _exit */
}

/* ---- allocator statistics and probes ---------------------------------- */

static profmalloc_stats_ex_t *stats_now(void)
{
    profmalloc_stats_ex_t *x = calloc(1, sizeof *x);
    x->struct_size = sizeof *x;
    assert_int_equal(profmalloc_get_stats_ex(x), 0);
    assert_int_equal(x->struct_size, sizeof *x);
    return x;
}

static const profmalloc_class_stats_t *class_of(const profmalloc_stats_ex_t *x, size_t size)
{
    for (uint64_t i = 0; i < x->nclasses; i++)
        if (x->classes[i].size >= size) return &x->classes[i];
    fail_msg("no class for %zu bytes", size);
    return NULL;
}

static void test_stats_move_with_allocations(void **state)
{
    (void)state;
    enum { N = 1000, SIZE = 3000 };
    static void *v[N];
    profmalloc_stats_ex_t *a = stats_now();
    for (int i = 0; i < N; i++) v[i] = malloc(SIZE);
    profmalloc_stats_ex_t *b = stats_now();
    uint64_t csize = class_of(b, SIZE)->size;
    assert_true(b->base.in_use >= a->base.in_use + (uint64_t)N * csize - 64 * 1024);
    assert_true(class_of(b, SIZE)->in_use >= class_of(a, SIZE)->in_use + N - 64);
    assert_true(class_of(b, SIZE)->spans > 0);
    assert_true(b->peak_mapped >= b->base.mapped - b->base.metadata);
    assert_true(b->mmap_calls >= 1 && b->mmap_bytes >= b->base.mapped - b->base.metadata);
    for (int i = 0; i < N; i++) free(v[i]);
    malloc_trim(0); /* no free pages left to serve the large block below */
    profmalloc_stats_ex_t *c = stats_now();
    assert_true(c->base.in_use + (uint64_t)N * csize - 64 * 1024 <= b->base.in_use);
    assert_true(class_of(c, SIZE)->in_use + N - 64 <= class_of(b, SIZE)->in_use);
    /* a large block: system calls with their bytes */
    void *volatile big = malloc(256 << 20); /* volatile: not optimised away */
    memset((void *)big, 1, 4096);
    free(big);
    malloc_trim(0);
    profmalloc_stats_ex_t *d = stats_now();
    if (d->mmap_bytes < c->mmap_bytes + (64 << 20))
        fail_msg("mmap bytes %llu -> %llu (calls %llu -> %llu), mremap %llu -> %llu", (unsigned long long)c->mmap_bytes,
                 (unsigned long long)d->mmap_bytes, (unsigned long long)c->mmap_calls, (unsigned long long)d->mmap_calls,
                 (unsigned long long)c->mremap_bytes, (unsigned long long)d->mremap_bytes);
    assert_true(d->munmap_bytes + d->madvise_bytes >= c->munmap_bytes + c->madvise_bytes + (60 << 20));
    assert_true(d->peak_mapped >= (256 << 20));
    /* a run released (madvised) and handed out again faults in: counted */
    static void *volatile run[3];
    for (int i = 0; i < 3; i++) run[i] = malloc(512 << 10), memset((void *)run[i], 1, 512 << 10);
    free((void *)run[1]);
    malloc_trim(0);
    profmalloc_stats_ex_t *r1 = stats_now();
    run[1] = malloc(512 << 10);
    profmalloc_stats_ex_t *r2 = stats_now();
    assert_true(r1->madvise_bytes >= 512 << 10);
    assert_true(r2->faultin_calls > r1->faultin_calls && r2->faultin_bytes >= r1->faultin_bytes + (512 << 10));
    for (int i = 0; i < 3; i++) free((void *)run[i]);
    free(r1), free(r2);
    /* ABI by size: an older, shorter struct is filled only as far as it goes */
    profmalloc_stats_ex_t *e = calloc(1, sizeof *e + 64);
    memset(e, 0xee, sizeof *e);
    e->struct_size = offsetof(profmalloc_stats_ex_t, peak_live);
    assert_int_equal(profmalloc_get_stats_ex(e), 0);
    assert_int_equal(e->struct_size, offsetof(profmalloc_stats_ex_t, peak_live));
    assert_true(e->peak_mapped > 0);
    assert_true(e->peak_live == 0xeeeeeeeeeeeeeeeeull); /* untouched */
    e->struct_size = 8;
    assert_int_equal(profmalloc_get_stats_ex(e), -1);
    assert_int_equal(errno, EINVAL);
    free(a), free(b), free(c), free(d), free(e);
}

static _Atomic int hammer_stop;
static void *hammer(void *arg)
{
    (void)arg;
    static _Thread_local void *v[256];
    while (!hammer_stop) {
        for (int i = 0; i < 256; i++) v[i] = malloc(48 * 1024);
        for (int i = 0; i < 256; i++) free(v[i]);
        malloc_trim(0); /* both threads into the page heap as well */
    }
    return NULL;
}

static void test_lock_waits_rise_under_two_threads(void **state)
{
    (void)state;
    profmalloc_stats_ex_t *a = stats_now(), *b = NULL;
    pthread_t t[2];
    hammer_stop = 0;
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, hammer, NULL);
    for (int tries = 0; tries < 100; tries++) { /* up to 5 s */
        usleep(50 * 1000);
        free(b);
        b = stats_now();
        if (b->central_lock_waits > a->central_lock_waits && b->pageheap_lock_waits > a->pageheap_lock_waits) break;
    }
    hammer_stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    assert_true(b->central_lock_waits > a->central_lock_waits);
    assert_true(b->pageheap_lock_waits > a->pageheap_lock_waits);
    assert_true(b->base.lock_contention > a->base.lock_contention);
    free(a), free(b);
}

static void test_stats_print_and_malloc_info(void **state)
{
    (void)state;
    const char *path = in_work("stats.json");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(profmalloc_stats_print(fd, PROFMALLOC_STATS_JSON), 0);
    close(fd);
    char cmd[2 * PATH_MAX], out[1 << 16];
    if (system("command -v python3 >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                 "print(d[\"in_use\"] > 0, len(d[\"classes\"]) > 0, d[\"os\"][\"mmap_calls\"] > 0)' '%s'", path);
        assert_int_equal(capture(cmd, out, sizeof out), 0);
        assert_string_equal(out, "True True True\n");
    }
    fd = open(in_work("stats.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_int_equal(profmalloc_stats_print(fd, PROFMALLOC_STATS_TEXT), 0);
    close(fd);
    size_t len;
    char *text = (char *)slurp(in_work("stats.txt"), &len);
    assert_non_null(strstr(text, "Arena 0:\nsystem bytes     = "));
    assert_non_null(strstr(text, "  system calls     = mmap "));
    assert_non_null(strstr(text, "lock waits"));
    free(text);
    assert_int_equal(profmalloc_stats_print(1, 7), -1);
    assert_int_equal(errno, EINVAL);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_int_equal(malloc_info(0, f), 0);
    fclose(f);
    assert_true(strncmp(buf, "<malloc version=\"1\">", 20) == 0);
    assert_non_null(strstr(buf, "<total type=\"mmap\" count=\""));
    assert_non_null(strstr(buf, "<system type=\"max\" size=\""));
    assert_non_null(strstr(buf, "</malloc>\n"));
    free(buf);
}

static const char *const probes[] = {"memory_heap_new", "memory_heap_free", "memory_heap_more", "memory_heap_less",
                                     "lock_contended",  "sample",           "dump_written"};

static void test_usdt_notes(void **state)
{
    (void)state;
    if (system("command -v readelf >/dev/null 2>&1") != 0) {
        print_message("skipped: no readelf\n");
        skip();
    }
    char cmd[2 * PATH_MAX], out[1 << 16];
    snprintf(cmd, sizeof cmd, "readelf -n '%s/../../libprofmalloc.so'", g_dir);
    assert_int_equal(capture(cmd, out, sizeof out), 0);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "Provider: profmalloc\n    Name: %s\n", probes[i]);
        if (!strstr(out, want)) fail_msg("no note for probe %s in:\n%s", probes[i], out);
    }
}

/* Counts of two probes in `hunt_prog churn 1M` at rate 1 (256 blocks of
 * 4 KiB: 256 samples), through perf's SDT events (uprobes at the notes'
 * addresses), or bpftrace's usdt probes; skipped where neither can attach. */
static void test_usdt_probes_fire(void **state)
{
    (void)state;
    char cmd[4 * PATH_MAX], out[1 << 16], lib[PATH_MAX + 32];
    snprintf(lib, sizeof lib, "%s/../../libprofmalloc.so", g_dir);
    if (system("command -v perf >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd,
                 "perf probe -q -d 'sdt_profmalloc:*' >/dev/null 2>&1; "
                 "perf probe -q -x '%s' -a sdt_profmalloc:sample -a sdt_profmalloc:memory_heap_new 2>&1", lib);
        if (capture(cmd, out, sizeof out) == 0) {
            snprintf(cmd, sizeof cmd,
                     "cd '%s' && PROFMALLOC_SAMPLE_RATE=1 perf stat -x, -e sdt_profmalloc:sample "
                     "-e sdt_profmalloc:memory_heap_new -- '%s' churn 1048576 2>&1",
                     g_work, g_prog);
            int rc = capture(cmd, out, sizeof out);
            system("perf probe -q -d 'sdt_profmalloc:*' >/dev/null 2>&1");
            assert_int_equal(rc, 0);
            long samples = -1, heaps = -1;
            for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
                if (strstr(l, ",sdt_profmalloc:sample,")) samples = strtol(l, NULL, 10);
                if (strstr(l, ",sdt_profmalloc:memory_heap_new,")) heaps = strtol(l, NULL, 10);
            }
            if (samples < 256 || samples > 260 || heaps < 1) fail_msg("perf stat:\n%s", out);
            return;
        }
        print_message("perf probe cannot add the SDT events here: %s", out);
    }
    /* bpftrace's usdt, where it works for the C library's own probes */
    if (system("command -v bpftrace >/dev/null 2>&1") != 0 ||
        capture("timeout 20 bpftrace -e 'usdt:/usr/lib/x86_64-linux-gnu/libc.so.6:libc:setjmp "
                "{ @s = count(); }' -c /bin/true 2>&1",
                out, sizeof out) != 0 ||
        strstr(out, "ERROR: Error") || strstr(out, "No probes")) {
        print_message("skipped: neither perf probe nor bpftrace can attach USDT probes here\n");
        skip();
    }
    snprintf(cmd, sizeof cmd,
             "cd '%s' && PROFMALLOC_SAMPLE_RATE=1 timeout 60 bpftrace -e "
             "'usdt:%s:profmalloc:sample { @s = count(); }' -c \"'%s' churn 1048576\" 2>&1",
             g_work, lib, g_prog);
    assert_int_equal(capture(cmd, out, sizeof out), 0);
    if (!strstr(out, "@s: 25")) fail_msg("bpftrace:\n%s", out);
}

int main(void)
{
    if (!realpath("/proc/self/exe", g_dir)) return 2;
    *strrchr(g_dir, '/') = 0;
    snprintf(g_prog, sizeof g_prog, "%s/hunt_prog", g_dir);
    snprintf(g_work, sizeof g_work, "%s/work", g_dir);
    mkdir(g_work, 0755);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_profile_tops_peak_site),
        cmocka_unit_test(test_since_mark_shows_growth_and_shrink),
        cmocka_unit_test(test_leak_report_names_only_the_leak),
        cmocka_unit_test(test_dump_every_bytes),
        cmocka_unit_test(test_dump_every_inuse),
        cmocka_unit_test(test_dump_on_signal),
        cmocka_unit_test(test_dump_every_seconds),
        cmocka_unit_test(test_malformed_hunt_options),
        cmocka_unit_test(test_gperftools_api),
        cmocka_unit_test(test_heapprofile_numbered_files),
        cmocka_unit_test(test_timeline_shape_and_peaks),
        cmocka_unit_test(test_timeline_one_peak_per_fall),
        cmocka_unit_test(test_timeline_survives_sigkill),
        cmocka_unit_test(test_timeline_rotates),
        cmocka_unit_test(test_timeline_in_forked_child),
        cmocka_unit_test(test_timeline_stops_on_write_error),
        cmocka_unit_test(test_timeline_sites_while_rising),
        cmocka_unit_test(test_timeline_slow_allocator),
        cmocka_unit_test(test_stats_move_with_allocations),
        cmocka_unit_test(test_lock_waits_rise_under_two_threads),
        cmocka_unit_test(test_stats_print_and_malloc_info),
        cmocka_unit_test(test_usdt_notes),
        cmocka_unit_test(test_usdt_probes_fire),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
