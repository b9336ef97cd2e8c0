/* linked.c — a program linked with -lprofmalloc: built against the shared
 * library, against the static archive (LINK_STATIC), and as a fully static
 * executable (LINK_STATIC and LINK_FULLY_STATIC: `cc -static`, where libc
 * itself allocates during its start-up, before any constructor, and the
 * loader's object tables are not set up yet).  It allocates in several ways
 * (directly and through libc functions that allocate internally), checks
 * the results and that profmalloc serves them, and that sampled sites reach
 * a dump.  Exits 0 on success; prints the failed checks otherwise. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profmalloc.h"

static int failures;

#ifdef LINK_STATIC
/* Names of the program's own that profmalloc also uses inside: the archive
 * keeps its internal names local, so these link and stay the program's. */
int pm_options = 7;
void *pm_malloc(size_t n) { return malloc(n + 1); }
#endif

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf("linked: FAILED %s (line %d)\n", #cond, __LINE__);          \
            failures++;                                                        \
        }                                                                      \
    } while (0)

static uint64_t in_use(void)
{
    profmalloc_stats_t s;
    if (profmalloc_get_stats(&s) != 0) return 0;
    return s.in_use;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void *thread_alloc(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    char *p = malloc(n);
    if (p) memset(p, 0x5c, n);
    return p;
}

/* One call site for the sampling check: its blocks' first frame returns
 * into this function. */
__attribute__((noinline)) static void *sampled_site(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory"); /* not a tail call */
    return p;
}

/* A block the program's own constructor allocates: in a static executable
 * that runs before libc's start-up is over for profmalloc's purposes unless
 * profmalloc's constructor runs first. */
static void *ctor_block;
__attribute__((constructor)) static void program_constructor(void)
{
    ctor_block = sampled_site(23456);
}

/* Three blocks of 12345 bytes from sampled_site, recorded at rate 1, are
 * in use in a legacy dump at stacks whose first frame is in sampled_site:
 * "N: B [...] @ <pc in sampled_site> ..." lines adding up to 3 and 37035.
 * Run at PROFMALLOC_SAMPLE_RATE=1, the constructor's block is there too. */
static void check_sampled_site(void)
{
    const char *env_rate = getenv("PROFMALLOC_SAMPLE_RATE");
    unsigned long want = env_rate && strcmp(env_rate, "1") == 0 ? 1 : 0;
    size_t old = profmalloc_get_sample_rate();
    profmalloc_set_sample_rate(1);
    void *blk[3];
    for (int i = 0; i < 3; i++) blk[i] = sampled_site(12345);
    char path[] = "/tmp/profmalloc-linked.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    unlink(path);
    CHECK(profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_LEGACY) == 0);
    static char text[1 << 20];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    CHECK(n > 0);
    text[n > 0 ? n : 0] = 0;
    /* the constructor's block apart: at a rate other than 1 it is sampled
     * by chance (1 - exp(-23456 / rate): one run in 23 at the default), and
     * then stands for about 1/that many blocks */
    unsigned long objects = 0, bytes = 0, ctor_objects = 0, ctor_bytes = 0;
    for (char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        unsigned long c, b;
        uintptr_t pc, caller = 0;
        int got = sscanf(line, " %lu: %lu [%*u: %*u] @ %" SCNxPTR " %" SCNxPTR, &c, &b, &pc, &caller);
        if (got >= 3 && pc > (uintptr_t)sampled_site && pc < (uintptr_t)sampled_site + 256) {
            int ctor = got == 4 && caller > (uintptr_t)program_constructor &&
                       caller < (uintptr_t)program_constructor + 64;
            *(ctor ? &ctor_objects : &objects) += c;
            *(ctor ? &ctor_bytes : &bytes) += b;
        }
    }
    /* at rate 1, all four together (without .eh_frame_hdr under ld.so the
     * stacks stop at sampled_site, so the constructor's is no apart) */
    int ok = want ? objects + ctor_objects == 4 && bytes + ctor_bytes == 3 * 12345 + 23456
                  : objects == 3 && bytes == 3 * 12345;
    CHECK(ok);
    if (!ok)
        printf("linked: sampled_site (%p) has %lu blocks, %lu bytes (and %lu, %lu from the constructor) in:\n%.4000s\n",
               (void *)sampled_site, objects, bytes, ctor_objects, ctor_bytes, text);
    for (int i = 0; i < 3; i++) free(blk[i]);
    free(ctor_block);
    profmalloc_set_sample_rate(old);
}

int main(void)
{
    const size_t MiB = 1 << 20;

    /* profmalloc serves plain malloc */
    uint64_t a = in_use();
    char *p = malloc(MiB);
    CHECK(p != NULL);
    memset(p, 1, MiB);
    CHECK(in_use() >= a + MiB);
    free(p);
    CHECK(in_use() < a + MiB);

#ifndef LINK_FULLY_STATIC
    /* the malloc that libc and dlsym see is the one from profmalloc's object */
    Dl_info di_stats, di_malloc;
    void *sym_malloc = dlsym(RTLD_DEFAULT, "malloc");
    CHECK(sym_malloc != NULL);
    CHECK(dladdr((void *)profmalloc_get_stats, &di_stats) != 0);
    CHECK(sym_malloc && dladdr(sym_malloc, &di_malloc) != 0);
    CHECK(di_stats.dli_fbase == di_malloc.dli_fbase);
#ifdef LINK_STATIC
    CHECK(di_stats.dli_fname && !strstr(di_stats.dli_fname, "libprofmalloc.so"));
#else
    CHECK(di_stats.dli_fname && strstr(di_stats.dli_fname, "libprofmalloc.so"));
#endif
#endif

    /* libc's internal allocations go to profmalloc too */
    char *big = malloc(MiB + 1);
    CHECK(big != NULL);
    memset(big, 'x', MiB);
    big[MiB] = 0;
    a = in_use();
    char *dup = strdup(big);
    CHECK(dup != NULL && strcmp(dup, big) == 0);
    CHECK(in_use() >= a + MiB);
    CHECK(malloc_usable_size(dup) >= MiB + 1);
    free(dup);
    free(big);

    char *s = NULL;
    CHECK(asprintf(&s, "%s-%d-%.3f", "profmalloc", 42, 2.5) > 0);
    CHECK(s && strcmp(s, "profmalloc-42-2.500") == 0);
    free(s);

    char *buf = NULL;
    size_t len = 0;
    FILE *ms = open_memstream(&buf, &len);
    CHECK(ms != NULL);
    for (int i = 0; i < 20000; i++) fprintf(ms, "line %d\n", i);
    fclose(ms);
    CHECK(len > 100000 && strncmp(buf, "line 0\nline 1\n", 14) == 0);
    FILE *mf = fmemopen(buf, len, "r");
    CHECK(mf != NULL);
    char *line = NULL;
    size_t cap = 0;
    long lines = 0;
    while (getline(&line, &cap, mf) > 0) lines++;
    CHECK(lines == 20000);
    free(line);
    fclose(mf);
    free(buf);

    /* qsort allocates a temporary for big arrays */
    enum { N = 200000 };
    int *v = malloc(N * sizeof *v);
    CHECK(v != NULL);
    for (int i = 0; i < N; i++) v[i] = (int)((i * 2654435761u) % 1000003u);
    qsort(v, N, sizeof *v, cmp_int);
    int sorted = 1;
    for (int i = 1; i < N; i++) sorted &= v[i - 1] <= v[i];
    CHECK(sorted);

    /* calloc, realloc, aligned */
    int *z = calloc(N, sizeof *z);
    CHECK(z != NULL);
    int allzero = 1;
    for (int i = 0; i < N; i++) allzero &= z[i] == 0;
    CHECK(allzero);
    v = realloc(v, 2 * N * sizeof *v);
    CHECK(v != NULL && v[0] <= v[N - 1]);
    free(v);
    free(z);
    void *al = NULL;
    CHECK(posix_memalign(&al, 4096, 10000) == 0 && ((uintptr_t)al & 4095) == 0);
    free(al);
    al = aligned_alloc(65536, 65536);
    CHECK(al != NULL && ((uintptr_t)al & 65535) == 0);
    free(al);
    volatile size_t huge = SIZE_MAX / 2 + 1;
    errno = 0;
    CHECK(malloc(huge) == NULL && errno == ENOMEM);

    /* a block from another thread, freed here */
    pthread_t t;
    void *r = NULL;
    CHECK(pthread_create(&t, NULL, thread_alloc, (void *)(uintptr_t)300000) == 0);
    CHECK(pthread_join(t, &r) == 0);
    CHECK(r != NULL && ((unsigned char *)r)[299999] == 0x5c);
    free(r);

    check_sampled_site();
#ifdef LINK_STATIC
    void *own = pm_malloc(10);
    CHECK(own != NULL && pm_options == 7);
    free(own);
#endif

    if (failures) {
        printf("linked: %d check(s) failed\n", failures);
        return 1;
    }
    printf("linked: OK (%s)\n",
#if defined(LINK_FULLY_STATIC)
           "fully static executable"
#elif defined(LINK_STATIC)
           "static archive"
#else
           "shared library"
#endif
    );
    return 0;
}
