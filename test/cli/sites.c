/* sites.c — a program with known allocation sites for the profmalloc
 * command's tests (test/cli/test_cli.py).  Run under the preload at
 * PROFMALLOC_SAMPLE_RATE=1, it prints each site's function and __LINE__
 * ("site NAME LINE BYTES_LIVE") and leaves a known amount live at each.
 *   sites [DIR]        dumps DIR/before.pb.gz, leaks more at leak_site,
 *                      dumps DIR/after.pb.gz (for diff)
 *   sites fork         a child process allocates at child_site
 *   sites exec         the process execs itself as "sites child"
 *   sites child        allocates at child_site and exits
 *   sites peak         8 MiB at peak_site, freed, then 100000 bytes kept */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *lib_site(size_t n);
int lib_site_line(void);

static void *keep[64];
static int nkeep;

#define NOINL __attribute__((noinline, noclone))

NOINL static void leak_site(size_t n, int *line)
{
    keep[nkeep++] = malloc(n); *line = __LINE__;
}

NOINL static void calloc_site(size_t n, int *line)
{
    keep[nkeep++] = calloc(1, n); *line = __LINE__;
}

NOINL static void churn_site(size_t n, int *line)
{
    for (int i = 0; i < 10; i++) {
        char *p = malloc(n); *line = __LINE__;
        memset(p, 1, n);
        free(p);
    }
}

NOINL static void dup_site(int *line)
{
    char s[3000];
    memset(s, 'x', sizeof s - 1);
    s[sizeof s - 1] = 0;
    keep[nkeep++] = strdup(s); *line = __LINE__;
}

NOINL static void *peak_site(size_t n, int *line)
{
    void *p = malloc(n); *line = __LINE__;
    memset(p, 1, n);
    return p;
}

NOINL static void child_site(int *line)
{
    keep[nkeep++] = malloc(222222); *line = __LINE__;
}

static int dump(const char *dir, const char *name)
{
    int (*fn)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "profmalloc_dump");
    char path[4096];
    if (!fn) {
        fprintf(stderr, "sites: profmalloc_dump not found (not preloaded?)\n");
        return 1;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fn(path) != 0;
}

int main(int argc, char **argv)
{
    int line;
    if (argc > 1 && !strcmp(argv[1], "child")) {
        child_site(&line);
        printf("site child_site %d 222222\n", line);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "many")) {
        static void *many[20000];
        for (int i = 0; i < 20000; i++) {
            many[i] = malloc(100); line = __LINE__;
        }
        keep[0] = many;
        printf("site main %d 2000000\n", line);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "peak")) { /* 8 MiB held, freed, then 100000 kept */
        void *big = peak_site(8 << 20, &line);
        printf("site peak_site %d 0\n", line);
        free(big);
        leak_site(100000, &line);
        printf("site leak_site %d 100000\n", line);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "exec")) {
        leak_site(1000, &line); /* the exec'd image writes the only profile */
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        return 127;
    }
    if (argc > 1 && !strcmp(argv[1], "fork")) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            child_site(&line);
            printf("site child_site %d 222222\n", line);
            exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        leak_site(100000, &line);
        printf("site leak_site %d 100000\n", line);
        return 3; /* run passes the status through */
    }
    leak_site(100000, &line);
    leak_site(100000, &line);
    leak_site(100000, &line);
    printf("site leak_site %d 300000\n", line);
    calloc_site(50000, &line);
    printf("site calloc_site %d 50000\n", line);
    churn_site(40000, &line);
    printf("site churn_site %d 0\n", line);
    dup_site(&line);
    printf("site dup_site %d 3000\n", line);
    keep[nkeep++] = lib_site(70000);
    keep[nkeep++] = lib_site(70000);
    printf("site lib_site %d 140000\n", lib_site_line());
    if (argc > 1) {
        if (dump(argv[1], "before.pb.gz") || dump(argv[1], "before.heap")) return 1;
        leak_site(100000, &line);
        leak_site(100000, &line);
        if (dump(argv[1], "after.pb.gz") || dump(argv[1], "after.heap")) return 1;
    }
    return 0;
}
