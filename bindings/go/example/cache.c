/* cache.c — a small hash table of string values, in C, called from Go.
 * It leaks: cache_put replaces a key's value without freeing the old
 * one (doc/cgo.md finds the line from the running service). */
#include "cache.h"

#include <stdlib.h>
#include <string.h>

struct entry {
    char *key;
    char *value;
    size_t n;
    struct entry *next;
};

static struct entry *table[1024];

static unsigned hash(const char *s)
{
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % 1024;
}

/* extern: gcc would make a static one a .constprop clone, which go tool
 * pprof shows without a name */
__attribute__((noinline)) char *copy_value(const char *value, size_t n)
{
    char *p = malloc(n);
    if (p) memcpy(p, value, n);
    return p;
}

void cache_put(const char *key, const char *value, size_t n)
{
    struct entry **head = &table[hash(key)], *e;
    for (e = *head; e; e = e->next) {
        if (strcmp(e->key, key) == 0) {
            e->value = copy_value(value, n); /* the old value is lost */
            e->n = n;
            return;
        }
    }
    e = malloc(sizeof *e);
    if (!e) return;
    e->key = strdup(key);
    e->value = copy_value(value, n);
    e->n = n;
    e->next = *head;
    *head = e;
}

size_t cache_len(const char *key)
{
    for (struct entry *e = table[hash(key)]; e; e = e->next)
        if (strcmp(e->key, key) == 0) return e->n;
    return 0;
}
