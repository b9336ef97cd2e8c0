/* http_target — a program for test_http.py: it serves /debug/pprof/
 * (PROFMALLOC_HTTP, or profmalloc_http_start in "api" mode) while two
 * threads allocate: http_leaky_site keeps blocks, a checker fills blocks
 * with a pattern and verifies it before freeing them (exit 3 on a
 * mismatch).  stdin drives it, one command a line:
 *   release   free the blocks http_held_site took at start
 *   peak      http_peak_site takes 48 MiB, then frees it all, and prints
 *             "peaked": the peak of live bytes is in that function
 *   fork      fork; the parent stops its server, the child serves again
 *             on :0 and prints "child <port>"
 *   EOF       stop and exit 0 (destructors stop the server)
 * It prints "site <address of http_leaky_site>" and "ready" first, the
 * latter once the ring is full: a profile asked for at once has the
 * leaky site (test_heap failed 14 times in 40 under load without it). */
#include <profmalloc.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { HELD = 2048, RING = 4096 };
static void *held[HELD];
static void *ring[RING];
static atomic_int stop, ring_full;

__attribute__((noinline)) void *http_leaky_site(size_t n)
{
    void *p = malloc(n);
    if (p) memset(p, 0x5a, n);
    return p;
}

__attribute__((noinline)) void *http_held_site(size_t n) { return malloc(n); }

enum { PEAK_BLOCKS = 768 };
__attribute__((noinline)) void http_peak_site(void)
{
    static void *v[PEAK_BLOCKS];
    for (int i = 0; i < PEAK_BLOCKS; i++) {
        v[i] = malloc(64 << 10);
        if (v[i]) memset(v[i], 0x3c, 64 << 10);
    }
    for (int i = 0; i < PEAK_BLOCKS; i++) free(v[i]);
}

static void *leaker(void *arg)
{
    (void)arg;
    for (unsigned i = 0; !atomic_load(&stop); i++) {
        free(ring[i % RING]);
        ring[i % RING] = http_leaky_site(1024 + (i % 7) * 64);
        if (i == RING - 1) atomic_store(&ring_full, 1);
        if (i % 64 == 0) usleep(1000);
    }
    return NULL;
}

static void *checker(void *arg)
{
    (void)arg;
    uint64_t round = 0;
    while (!atomic_load(&stop)) {
        unsigned char *v[64];
        for (int i = 0; i < 64; i++) {
            size_t n = 16 + (size_t)((round * 64 + i) % 2000) * 8;
            v[i] = malloc(n);
            if (!v[i]) exit(3);
            memset(v[i], (int)(i + round) & 0xff, n);
            v[i][n - 1] = (unsigned char)n;
        }
        for (int i = 0; i < 64; i++) {
            size_t n = 16 + (size_t)((round * 64 + i) % 2000) * 8;
            if (v[i][0] != ((i + round) & 0xff) || v[i][n - 1] != (unsigned char)n) {
                fprintf(stderr, "http_target: block corrupted\n");
                exit(3);
            }
            free(v[i]);
        }
        round++;
        usleep(500);
    }
    return NULL;
}

static int api_checks(void)
{
    int port = profmalloc_http_start("127.0.0.1:0");
    if (port <= 0) return 10;
    errno = 0;
    if (profmalloc_http_start("127.0.0.1:0") != -1 || errno != EBUSY) return 11;
    profmalloc_http_stop();
    const char *bad[] = {"nonsense", "1.2.3.4.5:80", "127.0.0.1:70000", "127.0.0.1:", "[::1:80", ":x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        if (profmalloc_http_start(bad[i]) != -1 || errno != EINVAL) return 12;
    }
    profmalloc_http_stop(); /* not running: nothing happens */
    port = profmalloc_http_start("[::1]:0");
    if (port > 0) printf("ipv6 %d\n", port);
    else printf("ipv6 unavailable %d\n", errno);
    fflush(stdout);
    if (port > 0) {
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 14; /* the test has fetched from it */
        profmalloc_http_stop();
    }
    port = profmalloc_http_start(":0");
    if (port <= 0) return 13;
    printf("port %d\n", port);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "api") == 0) {
        int rc = api_checks();
        if (rc) {
            printf("api failed %d\n", rc);
            return rc;
        }
    }
    for (int i = 0; i < HELD; i++) held[i] = http_held_site(4096);
    printf("site %p\n", (void *)http_leaky_site);
    pthread_t a, b;
    pthread_create(&a, NULL, leaker, NULL);
    pthread_create(&b, NULL, checker, NULL);
    while (!atomic_load(&ring_full)) usleep(1000);
    printf("ready\n");
    char line[64];
    int child = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "release\n") == 0) {
            for (int i = 0; i < HELD; i++) free(held[i]), held[i] = NULL;
            printf("released\n");
        } else if (strcmp(line, "peak\n") == 0) {
            http_peak_site();
            printf("peaked\n");
        } else if (strcmp(line, "fork\n") == 0) {
            pid_t pid = fork();
            if (pid == 0) {
                child = 1;
                int port = profmalloc_http_start(":0");
                printf("child %d\n", port);
                continue;
            }
            profmalloc_http_stop();
            printf("stopped\n");
            int st = 0;
            waitpid(pid, &st, 0);
            printf("child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        }
    }
    atomic_store(&stop, 1);
    if (!child) { /* a child has no such threads, and a ring slot maybe freed mid-update */
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        for (int i = 0; i < RING; i++) free(ring[i]);
    }
    return 0;
}
