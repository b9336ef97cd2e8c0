/* preload_check.c — exits 0 only when profmalloc is the active allocator of
 * this (plainly linked) program, i.e. when LD_PRELOAD really took effect:
 * profmalloc_get_stats is found and counts a 1 MiB malloc. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profmalloc.h"

int main(void)
{
    int (*get)(profmalloc_stats_t *) =
        (int (*)(profmalloc_stats_t *))dlsym(RTLD_DEFAULT, "profmalloc_get_stats");
    if (!get) {
        printf("preload_check: profmalloc_get_stats not found\n");
        return 1;
    }
    profmalloc_stats_t a, b;
    if (get(&a) != 0) return 2;
    char *volatile p = malloc(1 << 20);
    if (!p) return 3;
    memset(p, 1, 1 << 20);
    if (get(&b) != 0) return 2;
    free(p);
    if (b.in_use < a.in_use + (1u << 20)) {
        printf("preload_check: in_use did not grow (%llu -> %llu)\n",
               (unsigned long long)a.in_use, (unsigned long long)b.in_use);
        return 4;
    }
    printf("preload_check: profmalloc active\n");
    return 0;
}
