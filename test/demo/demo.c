/* demo.c — a small program with a leak, run by `make demo`.
 * Three allocation sites: a cache that keeps growing (the "leak"), request
 * buffers that are freed again, and one large table.  It prints the
 * allocator's exact totals, then writes two heap profiles of itself:
 * demo.pb.gz (pprof) and demo.heap (gperftools text). */
#include <profmalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    struct entry *next;
    char key[48];
};

static struct entry *cache;

__attribute__((noinline, noclone)) static void remember(int i)
{
    struct entry *e = malloc(sizeof *e);
    snprintf(e->key, sizeof e->key, "key-%d", i);
    e->next = cache;
    cache = e; /* never evicted: this is the leak */
}

__attribute__((noinline, noclone)) static size_t handle_request(int i)
{
    size_t n = 256 + (size_t)(i % 16) * 64;
    char *buf = malloc(n);
    memset(buf, 'x', n);
    size_t sum = (size_t)buf[n / 2];
    free(buf);
    return sum;
}

__attribute__((noinline, noclone)) static double *build_table(size_t n)
{
    double *t = calloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (double)i;
    return t;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    double *table = build_table(1 << 20); /* 8 MiB, kept */
    size_t sum = 0;
    for (int i = 0; i < 200000; i++) {
        sum += handle_request(i);
        remember(i);
    }
    profmalloc_stats_t st;
    profmalloc_get_stats(&st);
    printf("demo: %zu requests served (checksum %zu), table[7]=%.0f\n", (size_t)200000, sum, table[7]);
    printf("exact totals: in use %llu bytes, mapped %llu, thread caches %llu, released to OS %llu\n",
           (unsigned long long)st.in_use, (unsigned long long)st.mapped,
           (unsigned long long)st.thread_cache, (unsigned long long)st.released);
    printf("sampling every %llu bytes on average; %llu sampled blocks live\n",
           (unsigned long long)st.sample_rate, (unsigned long long)st.samples_live);
    char path[4096];
    snprintf(path, sizeof path, "%s/demo.pb.gz", dir);
    if (profmalloc_dump(path) != 0) perror("profmalloc_dump");
    else printf("wrote %s\n", path);
    snprintf(path, sizeof path, "%s/demo.heap", dir);
    if (profmalloc_dump(path) != 0) perror("profmalloc_dump");
    else printf("wrote %s\n", path);
    return 0;
}
