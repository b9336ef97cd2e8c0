/* text_resident.c — what a small program runs of libprofmalloc.so's code
 * stays in the part the link lays out first (src/hot_functions.txt): run
 * under LD_PRELOAD, it allocates as small programs do (the malloc family
 * across the size classes, large blocks, two threads, a fork, samples),
 * then reads /proc/self/pagemap: no page of the library's code from the
 * first 64 KiB boundary at or past pm_text_cold (argv[1], an offset in the
 * file) to the end of its code may be mapped; with "one-window" (gcc's
 * build), that part must also start in the code's first 64 KiB.  The
 * kernel maps the 64 KiB window around each page fault, so one call of a
 * function left out of the list maps the whole window (`make
 * hot-functions` lists them anew).  Also a workload of
 * bench/tools/hot-functions.sh, which writes the list.
 * Exit 0: passed or skipped (said why), 1: failed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WINDOW ((uintptr_t)64 << 10)

static void *volatile sink;

/* Sizes up to 64 KiB, a few blocks of MiBs, every allocation call. */
static void workload(unsigned seed)
{
    enum { LIVE = 512 };
    static __thread void *slot[LIVE];
    for (int i = 0; i < 200000; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = seed >> 8, k = r % LIVE;
        free(slot[k]);
        size_t size = (r & 7) ? 16 + (r >> 12) % 240 : (r & 8) ? 256 + (r >> 12) % 4096 : (r >> 12) % 65536 + 1;
        slot[k] = malloc(size);
        if (slot[k]) memset(slot[k], 1, size < 64 ? size : 64);
    }
    for (int k = 0; k < LIVE; k++) {
        slot[k] = realloc(slot[k], 3000 + (size_t)k * 7);
        free(slot[k]);
        slot[k] = NULL;
    }
    for (int i = 0; i < 64; i++) {
        void *p = calloc(100 + i, 8), *q = NULL;
        if (posix_memalign(&q, 64 << (i % 8), 200)) q = NULL;
        void *a = aligned_alloc(4096, 8192);
        char *big = malloc(((size_t)1 + i % 4) << 20);
        if (big) big[0] = 1;
        sink = p;
        free(p);
        free(q);
        free(a);
        free(big);
    }
    char *s = NULL;
    for (int i = 1; i < 4000; i++) {
        s = realloc(s, (size_t)i * 16);
        if (s) s[0] = 1;
    }
    free(s);
}

static void *thread_main(void *arg)
{
    workload((unsigned)(uintptr_t)arg);
    return NULL;
}

static int one_window;

static int check(uintptr_t cold, const char *who)
{
    /* The library's mappings (read(2): no buffer to allocate before the scan). */
    static char maps[1 << 16];
    int fd = open("/proc/self/maps", O_RDONLY);
    size_t n = 0;
    ssize_t got;
    while (fd >= 0 && n < sizeof maps - 1 && (got = read(fd, maps + n, sizeof maps - 1 - n)) > 0) n += (size_t)got;
    if (fd >= 0) close(fd);
    uintptr_t base = 0, text_lo = 0, text_hi = 0;
    for (char *line = maps; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        unsigned long lo, hi, off;
        char perm[8];
        if (strstr(line, "/libprofmalloc.so") && sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perm, &off) == 4) {
            if (off == 0 && !base) base = lo;
            if (strcmp(perm, "r-xp") == 0) text_lo = lo, text_hi = hi;
        }
        line = end ? end + 1 : NULL;
    }
    if (!base || !text_hi) {
        printf("text_resident: FAIL: libprofmalloc.so is not mapped (run it under LD_PRELOAD)\n");
        return 1;
    }
    if (base % WINDOW) {
        printf("text_resident: SKIP: the loader did not align the library to 64 KiB (C library before 2.35)\n");
        return 0;
    }
    /* the hot part in one window: past it, every program maps two */
    if (one_window && base + cold > text_lo + WINDOW) {
        printf("text_resident: FAIL: the functions of src/hot_functions.txt take 0x%lx bytes from the start of "
               "the code, more than one 64 KiB window\n",
               (unsigned long)(base + cold - text_lo));
        fflush(stdout);
        return 1;
    }
    uintptr_t from = (base + cold + WINDOW - 1) & ~(WINDOW - 1);
    if (from < text_lo) from = text_lo;
    int pm = open("/proc/self/pagemap", O_RDONLY);
    if (pm < 0) {
        printf("text_resident: SKIP: no /proc/self/pagemap\n");
        return 0;
    }
    unsigned mapped = 0, pages = 0;
    uintptr_t first = 0;
    for (uintptr_t v = from; v < text_hi; v += 4096, pages++) {
        uint64_t e = 0;
        if (pread(pm, &e, sizeof e, (off_t)(v / 4096 * sizeof e)) != sizeof e) break;
        if (e >> 63) {
            if (!mapped) first = v;
            mapped++;
        }
    }
    close(pm);
    if (mapped) {
        printf("text_resident (%s): FAIL: %u of the %u pages of code from offset 0x%lx on are mapped, the first at "
               "0x%lx: a function this program ran is not in src/hot_functions.txt (make hot-functions)\n",
               who, mapped, pages, (unsigned long)(from - base), (unsigned long)(first - base));
        fflush(stdout);
        return 1;
    }
    printf("text_resident (%s): ok: none of the %u pages of code from offset 0x%lx on is mapped\n", who, pages,
           (unsigned long)(from - base));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: text_resident PM_TEXT_COLD_OFFSET [one-window]\n");
        return 1;
    }
    uintptr_t cold = (uintptr_t)strtoull(argv[1], NULL, 0);
    one_window = argc > 2 && strcmp(argv[2], "one-window") == 0;
    fflush(stdout);

    workload(1);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)(i + 2));
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    /* a forked child maps the library's code anew, from its first fault on */
    int child_rc = 1;
    pid_t pid = fork();
    if (pid == 0) {
        workload(9);
        _exit(check(cold, "child"));
    }
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) child_rc = WEXITSTATUS(status);
    if (pid < 0) printf("text_resident: FAIL: fork\n");
    return check(cold, "parent") | child_rc;
}
