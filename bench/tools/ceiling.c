/* ceiling.c — the cheapest allocator a workload can run on: a yardstick,
 * not an allocator anyone should use.
 *
 * Every thread owns a private 4 GiB reservation cut into 64 MiB regions,
 * one per 16-byte size class up to 1 KiB.  malloc pops the class's LIFO
 * list or bumps the region's pointer; free finds the class from the
 * address (one subtraction and a shift) and pushes the block on the list.
 * No headers, no locks, no metadata, no checks, no memory ever returned,
 * and a block freed by another thread lands on that thread's list (so it
 * is only meaningful for workloads whose threads free their own blocks:
 * churn and churn -t N).  Blocks above 1 KiB come from mmap with a
 * 16-byte header.
 *
 * bench/targets.sh runs churn on it next to glibc: the time it takes is
 * what the workload itself costs (random numbers, cache misses on the
 * blocks it writes and checks), so "T(glibc) / T(ceiling)" is the highest
 * speed-up over glibc any allocator can show on that workload on that
 * machine, and its 1-to-2-thread scaling is the machine's own.
 *
 * Build: cc -O2 -shared -fPIC -ftls-model=initial-exec -fno-builtin
 *        -fno-tree-loop-distribute-patterns -o libceiling.so ceiling.c
 * (the last two flags keep the compiler from turning calloc's zeroing loop
 * into a call to memset or calloc). */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#define NCLASS 64                       /* 16 .. 1024 bytes */
#define REGION_SHIFT 26                 /* 64 MiB per class */
#define LARGE_MAGIC 0x6c61726765ull

static __thread char *base;             /* this thread's reservation */
static __thread void *head[NCLASS + 1];
static __thread char *bump[NCLASS + 1];

static int reserve(void)
{
    void *p = mmap(NULL, (size_t)(NCLASS + 1) << REGION_SHIFT, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    base = p;
    for (unsigned c = 1; c <= NCLASS; c++) bump[c] = base + ((size_t)c << REGION_SHIFT);
    return 0;
}

static void *large(size_t n)
{
    if (n > ((size_t)1 << 46)) return NULL;
    char *p = mmap(NULL, n + 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    ((uint64_t *)p)[0] = n;
    ((uint64_t *)p)[1] = LARGE_MAGIC;
    return p + 16;
}

void *malloc(size_t n)
{
    if (n > 1024) return large(n);
    unsigned c = n ? (unsigned)((n + 15) >> 4) : 1;
    void *p = head[c];
    if (p) {
        head[c] = *(void **)p;
        return p;
    }
    if (!base && reserve() < 0) return NULL;
    p = bump[c];
    bump[c] += (size_t)c << 4;
    return p;
}

/* 0: not ours (or another thread's); else the class */
static unsigned class_of(const void *p)
{
    uintptr_t off = (uintptr_t)p - (uintptr_t)base;
    if (!base || off >= ((uintptr_t)(NCLASS + 1) << REGION_SHIFT)) return 0;
    return (unsigned)(off >> REGION_SHIFT);
}

static size_t size_of(const void *p)
{
    unsigned c = class_of(p);
    if (c) return (size_t)c << 4;
    const uint64_t *h = (const uint64_t *)p - 2;
    return h[1] == LARGE_MAGIC ? h[0] : 0;
}

void free(void *p)
{
    if (!p) return;
    unsigned c = class_of(p);
    if (c) {
        *(void **)p = head[c];
        head[c] = p;
        return;
    }
    uint64_t *h = (uint64_t *)p - 2;
    /* another thread's small block, or the loader's: keep it (leaks) */
    if (((uintptr_t)p & 4095) == 16 && h[1] == LARGE_MAGIC) munmap(h, h[0] + 16);
}

void *calloc(size_t a, size_t b)
{
    if (b && a > SIZE_MAX / b) return NULL;
    size_t n = a * b;
    unsigned char *p = malloc(n);
    if (p && n <= 1024)
        for (size_t i = 0; i < n; i++) p[i] = 0; /* large blocks come zeroed */
    return p;
}

void *realloc(void *old, size_t n)
{
    if (!old) return malloc(n);
    unsigned char *p = malloc(n);
    if (!p) return NULL;
    size_t have = size_of(old);
    if (!have) have = n; /* a foreign block: copy what the caller asks */
    for (size_t i = 0; i < n && i < have; i++) p[i] = ((unsigned char *)old)[i];
    free(old);
    return p;
}
