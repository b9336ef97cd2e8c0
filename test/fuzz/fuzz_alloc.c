/* fuzz_alloc.c — libFuzzer harness for the malloc family (pm_* of the
 * core, built with coverage): the input is a program over a table of 64
 * slots, each op a byte naming malloc, calloc, realloc, memalign, free,
 * free_sized, usable_size, a sample-rate change or a heap dump, followed
 * by a slot and a size.  Every block is filled with a pattern derived from
 * its address and checked before it is freed or moved; blocks must be
 * aligned as asked, never overlap a live one, and have usable_size at
 * least what was asked.  Any failure aborts (libFuzzer saves the input).
 * Everything is freed at the end of each input. */
#include "pm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 64

typedef struct {
    unsigned char *p;
    size_t size;
} slot_t;

static slot_t slots[SLOTS];
static int devnull = -1;

static void die(const char *what, size_t a, size_t b)
{
    fprintf(stderr, "fuzz_alloc: %s (%zu, %zu)\n", what, a, b);
    abort();
}

static unsigned char pattern(const void *p, size_t i) { return (unsigned char)(((uintptr_t)p >> 4) * 131 + i); }

/* Patterns are checked at the ends and a sample in between: a 1 MiB block
 * costs 4 KiB of checks, not a megabyte. */
static size_t stride(size_t n) { return n > 4096 ? n / 1024 : 1; }

static void fill(unsigned char *p, size_t n)
{
    size_t st = stride(n);
    for (size_t i = 0; i < n; i += st) p[i] = pattern(p, i);
    if (n) p[n - 1] = pattern(p, n - 1);
}

static void check(const unsigned char *p, size_t n, const void *was)
{
    size_t st = stride(n);
    for (size_t i = 0; i < n; i += st)
        if (p[i] != pattern(was, i)) die("contents changed", n, i);
    if (n && p[n - 1] != pattern(was, n - 1)) die("last byte changed", n, n - 1);
}

static void place(int k, void *q, size_t size, size_t align)
{
    if (!q) {
        if (errno != ENOMEM) die("NULL without ENOMEM", size, (size_t)errno);
        return;
    }
    uintptr_t a = (uintptr_t)q;
    if (a % (align < 16 ? 16 : align)) die("misaligned", size, align);
    if (pm_usable_size(q) < size) die("usable_size below the request", pm_usable_size(q), size);
    for (int j = 0; j < SLOTS; j++) {
        if (j == k || !slots[j].p) continue;
        uintptr_t b = (uintptr_t)slots[j].p;
        size_t bs = slots[j].size ? slots[j].size : 1, qs = size ? size : 1;
        if (a < b + bs && b < a + qs) die("overlap", size, slots[j].size);
    }
    slots[k].p = q;
    slots[k].size = size;
    fill(q, size);
}

static void drop(int k)
{
    if (!slots[k].p) return;
    check(slots[k].p, slots[k].size, slots[k].p);
    pm_free(slots[k].p);
    slots[k].p = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    pm_init();
    pm_sampler_set_rate(0);
    devnull = open("/dev/null", O_WRONLY);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    size_t i = 0;
    while (i + 3 <= len) {
        uint8_t op = data[i], k = data[i + 1] % SLOTS, z = data[i + 2];
        i += 3;
        /* sizes: mostly small, up to 1 MiB when the high bits say so */
        size_t size = z & 0x3f;
        if (z & 0x40) size = size * 64 + (i < len ? data[i++] : 0);
        if (z & 0x80) size = size * 256 + (i < len ? data[i++] : 0) * 4;
        errno = 0;
        switch (op % 12) {
        case 0: drop(k); place(k, pm_malloc(size), size, 16); break;
        case 1: {
            drop(k);
            unsigned char *q = pm_calloc(1, size);
            if (q)
                for (size_t b = 0; b < size; b += stride(size))
                    if (q[b]) die("calloc not zeroed", size, b);
            place(k, q, size, 16);
            break;
        }
        case 2: { /* realloc: the old contents move with it */
            if (!slots[k].p) break;
            check(slots[k].p, slots[k].size, slots[k].p);
            unsigned char *old = slots[k].p;
            size_t was = slots[k].size;
            unsigned char *q = pm_realloc(old, size);
            if (!q && size) {
                if (errno != ENOMEM) die("realloc NULL without ENOMEM", size, (size_t)errno);
                break; /* kept */
            }
            slots[k].p = NULL;
            if (!q) break; /* realloc(p, 0) freed it */
            size_t keep = size < was ? size : was;
            size_t st = stride(was);
            for (size_t b = 0; b < keep; b += st)
                if (q[b] != pattern(old, b)) die("realloc lost contents", size, b);
            place(k, q, size, 16);
            break;
        }
        case 3: {
            drop(k);
            size_t align = (size_t)16 << (op >> 4) % 13; /* up to 64 KiB */
            place(k, pm_memalign(align, size), size, align);
            break;
        }
        case 4: case 5: drop(k); break;
        case 6: /* free_sized: the size the program says (override.c drops it) */
            if (slots[k].p) {
                check(slots[k].p, slots[k].size, slots[k].p);
                pm_free(slots[k].p);
                slots[k].p = NULL;
            }
            break;
        case 7:
            if (slots[k].p && pm_usable_size(slots[k].p) < slots[k].size) die("usable_size", slots[k].size, 0);
            break;
        case 8: {
            drop(k);
            void *out = NULL;
            int rc = pm_posix_memalign(&out, 64, size);
            if (rc && rc != ENOMEM) die("posix_memalign error", size, (size_t)rc);
            if (rc) errno = ENOMEM;
            place(k, rc ? NULL : out, size, 64);
            break;
        }
        case 9: { /* the sampler: off, every allocation, the default */
            static const uint64_t rates[] = {0, 1, 512 * 1024, 4096};
            pm_sampler_set_rate(rates[z % 4]);
            break;
        }
        case 10: /* the dump path, in either format, while blocks live */
            if (devnull >= 0 && z < 32) profmalloc_dump_fd(devnull, z & 1);
            break;
        case 11: /* a block filled through usable_size, as some programs do */
            if (slots[k].p) {
                size_t u = pm_usable_size(slots[k].p);
                memset(slots[k].p + slots[k].size, 0xa5, u - slots[k].size);
            }
            break;
        }
    }
    for (int k = 0; k < SLOTS; k++) drop(k);
    pm_sampler_set_rate(0);
    return 0;
}
