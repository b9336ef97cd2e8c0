/* hunt_prog.c — programs of known memory behaviour for test_hunt.c, one
 * per argv[1]; linked with -lprofmalloc.  No stdio: the leak report must
 * see only the program's own blocks. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profmalloc.h"

static void *volatile sink;
static void **kept;
static size_t nkept;

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* grows to 20 MB in 1 KiB blocks, then frees all but 1 % */
__attribute__((noinline)) void peak_site(void)
{
    kept = malloc(20480 * sizeof *kept);
    for (nkept = 0; nkept < 20480; nkept++) kept[nkept] = malloc(1024);
    for (size_t i = 0; i < nkept; i++)
        if (i % 100) free(kept[i]), kept[i] = NULL;
}

static void *steady[2048];
/* 2 MB held to the end */
__attribute__((noinline)) void steady_site(void)
{
    for (int i = 0; i < 2048; i++) steady[i] = malloc(1000);
}

static void *before[1000], *after[1000], *untouched[1000];
__attribute__((noinline)) void before_mark_site(void)
{
    for (int i = 0; i < 1000; i++) before[i] = malloc(3000);
}
__attribute__((noinline)) void after_mark_site(void)
{
    for (int i = 0; i < 1000; i++) after[i] = malloc(5000);
}
__attribute__((noinline)) void untouched_site(void)
{
    for (int i = 0; i < 1000; i++) untouched[i] = malloc(700);
}

__attribute__((noinline)) void leaky_function(void)
{
    for (int i = 0; i < 300; i++) sink = malloc(4096); /* never freed */
}
__attribute__((noinline)) void tidy_function(void)
{
    void *p[300];
    for (int i = 0; i < 300; i++) p[i] = malloc(4096);
    for (int i = 0; i < 300; i++) free(p[i]);
}

/* allocates and frees `total` bytes in 4 KiB blocks */
__attribute__((noinline)) void churn_site(size_t total)
{
    for (size_t done = 0; done < total; done += 4096) {
        sink = malloc(4096);
        free(sink);
    }
}

static void *ramp[8192];
/* live bytes rise to n * 4 KiB, one step per ms, then fall back */
__attribute__((noinline)) void ramp_site(int n, long step_us)
{
    for (int i = 0; i < n; i++) {
        ramp[i] = malloc(4096);
        if (step_us) {
            struct timespec ts = {0, step_us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < n; i++) {
        free(ramp[i]);
        ramp[i] = NULL;
        sink = malloc(64); /* the program goes on allocating: records go on */
        free(sink);
        if (step_us) {
            struct timespec ts = {0, step_us * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "peak")) { /* argv[2]: peak profile; argv[3]: exit profile */
        steady_site();
        peak_site();
        if (argc > 2 && profmalloc_dump_peak(argv[2]) != 0) return 3;
        if (argc > 3 && profmalloc_dump(argv[3]) != 0) return 4;
        return 0;
    }
    if (!strcmp(mode, "mark")) { /* argv[2]: since-mark profile */
        untouched_site();
        before_mark_site();
        if (profmalloc_mark() != 0) return 3;
        after_mark_site();
        for (int i = 0; i < 1000; i += 2) free(before[i]), before[i] = NULL;
        return profmalloc_dump_since_mark(argv[2]) != 0 ? 4 : 0;
    }
    if (!strcmp(mode, "leak")) {
        tidy_function();
        leaky_function();
        tidy_function();
        return 0;
    }
    if (!strcmp(mode, "churn")) { /* argv[2]: bytes to allocate */
        churn_site(strtoull(argv[2], NULL, 0));
        return 0;
    }
    if (!strcmp(mode, "inuse")) { /* argv[2]: blocks of 4 KiB to hold, then free */
        ramp_site(atoi(argv[2]), 0);
        return 0;
    }
    if (!strcmp(mode, "signal")) { /* raise argv[2] times, allocating in between */
        for (int i = 0, n = atoi(argv[2]); i < n; i++) {
            raise(SIGUSR2);
            churn_site(4 << 20);
        }
        return 0;
    }
    if (!strcmp(mode, "seconds")) { /* allocate for argv[2] ms */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        long ms = atol(argv[2]);
        do {
            churn_site(64 << 10);
            nap_ms(5);
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
        return 0;
    }
    if (!strcmp(mode, "fork")) { /* a child allocates for 200 ms, then the parent */
        for (int i = 0; i < 20; i++) churn_site(64 << 10), nap_ms(5);
        pid_t pid = fork();
        if (pid < 0) return 3;
        for (int i = 0; i < 40; i++) churn_site(64 << 10), nap_ms(5);
        if (pid == 0) _exit(0); /* the child writes no exit record */
        int st;
        return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 4;
    }
    if (!strcmp(mode, "grow")) { /* argv[2] rounds keeping 64 KiB, each longer than 2 ms */
        for (int i = 0, n = atoi(argv[2]); i < n; i++) {
            for (int k = 0; k < 16; k++) sink = malloc(4096); /* kept */
            nap_ms(2);
        }
        return 0;
    }
    if (!strcmp(mode, "slow")) { /* argv[2] rounds of 10 ms keeping 100 blocks of 64 B: 64 KiB per 100 ms */
        static void *keep[1 << 16];
        for (int i = 0, n = atoi(argv[2]), k = 0; i < n; i++) {
            for (int j = 0; j < 100 && k < (1 << 16); j++) keep[k++] = malloc(64);
            nap_ms(10);
        }
        return 0;
    }
    if (!strcmp(mode, "ticks")) { /* argv[2] rounds of 64 KiB, each longer than 1 ms */
        for (int i = 0, n = atoi(argv[2]); i < n; i++) {
            churn_site(64 << 10);
            nap_ms(2);
        }
        return 0;
    }
    if (!strcmp(mode, "ramps")) { /* two growth-then-release shapes: 8 MB then 16 MB */
        if (argc > 2) { /* ramp_site's address, for the peaks' top site */
            int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
            char hex[32];
            int n = 0;
            for (uintptr_t a = (uintptr_t)ramp_site, d = (uintptr_t)1 << 60; d; d >>= 4)
                hex[n++] = "0123456789abcdef"[(a / d) & 15];
            hex[n++] = '\n';
            if (fd < 0 || write(fd, hex, n) != n) return 3;
            close(fd);
        }
        ramp_site(2048, 250);
        nap_ms(200);
        churn_site(4096);
        ramp_site(4096, 125);
        churn_site(4096);
        return 0;
    }
    if (!strcmp(mode, "zigzag")) { /* 8 MB, a fall with a blip in it, 0, then 4 MB: two peaks */
        const size_t MB = 1 << 20;
        void *a = malloc(6 * MB), *b = malloc(MB), *c = malloc(MB);
        free(c); /* 7 MB, 12.5 % under the top: the record after the nap writes the 8 MB peak */
        nap_ms(60);
        free(malloc(64));
        free(malloc(256 << 10)); /* a blip above that record, well under a 5 % rise */
        free(b);                 /* 6 MB, 14 % under the blip: the same fall, no peak */
        nap_ms(60);
        free(malloc(64));
        free(a); /* the trough */
        nap_ms(60);
        free(malloc(64));
        void *d = malloc(4 * MB); /* lower than where the first peak was written */
        nap_ms(60);
        free(malloc(64));
        free(d);
        nap_ms(60);
        free(malloc(64));
        return 0;
    }
    if (!strcmp(mode, "grow-forever")) { /* for SIGKILL */
        for (int i = 0;; i++) {
            sink = malloc(4096);
            if (i % 64 == 0) nap_ms(1);
        }
    }
    return 2;
}
