/* pm.h — base of every file in src/: configuration constants, compiler
 * attributes, atomics and the allocator's lock.
 * Owns: nothing at run time.  Must never: include allocator types (those are
 * in pm_types.h) or call into libc.
 * The lock is a futex word (0 free, 1 held, 2 held with waiters) that counts
 * how often it was found held, so contention can be reported per lock. */
#ifndef PM_H
#define PM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- configuration ---------------------------------------------------- */
#define PM_PAGE_SHIFT 13                       /* spans are made of 8 KiB pages */
#define PM_PAGE_SIZE ((size_t)1 << PM_PAGE_SHIFT)
#define PM_ALIGNMENT 16                        /* every block is 16-byte aligned */
#define PM_MAX_SMALL ((size_t)256 * 1024)      /* largest size-class block */
#define PM_CLASS_MAX 100                       /* room for the size-class table */
#define PM_ADDR_BITS 48                        /* x86-64 / arm64 user space */
/* The address space one page-map leaf covers (pagemap.c); the heap's
 * first mapping ends on a multiple of it (os_linux.c, first_hint). */
#define PM_ZONE_SHIFT 31

/* Compile-time features are constants tested with if (), not #ifdef. */
#ifdef PM_CONFIG_DEBUG
static const bool pm_config_debug = true;
#else
static const bool pm_config_debug = false;
#endif
/* The hardened build (PM_CONFIG_HARDENED, and the debug build): free-list
 * links safe-linked and checked at every pop (pm_internal.h, guard.c). */
#if defined(PM_CONFIG_HARDENED) || defined(PM_CONFIG_DEBUG)
static const bool pm_config_hardened = true;
#else
static const bool pm_config_hardened = false;
#endif

/* ---- attributes ------------------------------------------------------- */
#define PM_LIKELY(x) __builtin_expect(!!(x), 1)
#define PM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PM_INLINE static inline __attribute__((always_inline))
#define PM_NOINLINE __attribute__((noinline))
#define PM_COLD __attribute__((cold, noinline))
#define PM_EXPORT __attribute__((visibility("default")))
#define PM_TLS __thread __attribute__((tls_model("initial-exec")))
#define PM_CACHELINE 64
#define PM_ALIGNED(n) __attribute__((aligned(n)))
/* Zero-initialised arrays of a page or more that are touched sparsely (the
 * page map's root, the central lists' structs, the unwinder's rule cache):
 * `ld -r` gathers them in an output section of build/profmalloc.o of their
 * own, profmalloc_sparse (the Makefile's text-order.ld), which a link
 * places after .bss, so the small variables that every process touches
 * share a few pages instead of being spread between these, and .bss needs
 * no page alignment (the rule cache's): it starts right after .data.  Not
 * ".lbss": gcc reaches a large-data section through the GOT, a load more
 * on free's fast path. */
#define PM_SPARSE_BSS __attribute__((section(".bss.profmalloc_sparse")))
#define PM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* An assertion that stays in release builds for cheap invariants whose
 * violation would corrupt the heap. */
#define PM_CHECK(cond, msg)                                                    \
    do {                                                                       \
        if (PM_UNLIKELY(!(cond))) pm_os_fatal(msg, 0, 0);                      \
    } while (0)
#define PM_DEBUG_ASSERT(cond)                                                  \
    do {                                                                       \
        if (pm_config_debug && !(cond))                                        \
            pm_os_fatal("assertion failed: " #cond, 0, 0);                     \
    } while (0)

void pm_os_fatal(const char *msg, const void *ptr, int has_ptr)
    __attribute__((noreturn, cold));

/* ---- lock ------------------------------------------------------------- */
typedef struct pm_lock {
    _Atomic int state;            /* 0 free, 1 held, 2 held and contended */
    _Atomic uint64_t contended;   /* acquisitions that found it held */
} pm_lock_t;

#define PM_LOCK_INIT {0, 0}

/* Pauses a waiter spins before it sleeps on the futex (6 us at 25 ns a
 * pause): the allocator's locks are held for well under a microsecond, so
 * a lock still held after that has a holder off its CPU, and spinning on
 * would only burn the waiter's time slice (test_os_linux:
 * test_lock_waiter_sleeps). */
#define PM_LOCK_SPIN 256

void pm_lock_wait_slow(pm_lock_t *l);
void pm_lock_wake_slow(pm_lock_t *l);

/* 1: taken; 0: held by another thread (nothing is counted). */
PM_INLINE int pm_trylock(pm_lock_t *l)
{
    int expected = 0;
    return atomic_compare_exchange_strong_explicit(&l->state, &expected, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

PM_INLINE void pm_lock(pm_lock_t *l)
{
    if (PM_LIKELY(pm_trylock(l))) return;
    pm_lock_wait_slow(l);
}

PM_INLINE void pm_unlock(pm_lock_t *l)
{
    if (PM_UNLIKELY(atomic_exchange_explicit(&l->state, 0, memory_order_release) == 2))
        pm_lock_wake_slow(l);
}

/* After fork() the child owns every lock its parent's atfork handler took. */
PM_INLINE void pm_lock_reset(pm_lock_t *l)
{
    atomic_store_explicit(&l->state, 0, memory_order_relaxed);
}

#define pm_relaxed_load(p) atomic_load_explicit((p), memory_order_relaxed)
#define pm_relaxed_store(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define pm_relaxed_add(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)

/* The finaliser of MurmurHash3: every input bit moves every output bit,
 * so a table may index by the low bits. */
PM_INLINE uint64_t pm_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* A hash of the bytes [p, p + n), a word at a time, from seed: the
 * unwinder's rule identities and the profile writer's string table. */
static inline uint64_t pm_hash_bytes(const void *data, size_t n, uint64_t seed)
{
    const uint8_t *p = data, *end = p + n;
    uint64_t h = seed ^ (uint64_t)n * 0x9e3779b97f4a7c15ull, w;
    for (; end - p > 8; p += 8) {
        __builtin_memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    if (n >= 8) { /* the last 8 bytes, overlapping the words before */
        __builtin_memcpy(&w, end - 8, 8);
        h ^= w;
    } else {
        for (; p < end; p++) h = (h ^ *p) * 0x100000001b3ull;
    }
    return pm_mix64(h);
}

#endif
