/* trimrss.c — what malloc_trim(0) gives back from a thinned-out heap.
 *
 * Mallocs 200 MiB in blocks of one size (argument, default 12288 bytes),
 * writes them, frees every other one and calls malloc_trim(0), printing
 * VmRSS after each step.  A block's neighbours stay live, so only pages
 * wholly inside the free blocks can go back to the OS.
 * Build: cc -O2 -o trimrss bench/tools/trimrss.c
 * Run:   ./trimrss 12288; LD_PRELOAD=build/libprofmalloc.so ./trimrss 12288 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb < 0 ? -1 : kb >> 10;
}

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? (size_t)atol(argv[1]) : 12288;
    if (size < 16) size = 16;
    size_t n = ((size_t)200 << 20) / size;
    void **p = malloc(n * sizeof *p);
    if (!p) return 1;
    for (size_t i = 0; i < n; i++) {
        p[i] = malloc(size);
        if (!p[i]) return 1;
        memset(p[i], 1, size);
    }
    long full = rss_mb();
    for (size_t i = 0; i < n; i += 2) free(p[i]);
    long half = rss_mb();
    malloc_trim(0);
    printf("size=%zu full_mb=%ld half_freed_mb=%ld trimmed_mb=%ld\n", size, full, half, rss_mb());
    return 0;
}
