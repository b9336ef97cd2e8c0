/* alloc.c — the malloc family on top of the thread caches: the slow twins
 * of the inline fast paths (pm_fastpath.h), large blocks, calloc, realloc,
 * aligned allocation, usable size, and the free-side validation that
 * turns a bad pointer into a clear abort instead of heap corruption.
 * Must never: hold a lock (it takes none itself), or reach the profiler
 * other than through the sampling countdown on the slow path.
 * glibc is the reference for every edge case (doc/design.md lists them). */
#include "pm_fastpath.h"

#include <errno.h>
#include <string.h>

static _Atomic uint64_t large_bytes, large_requested, large_count;

/* A large block at least this big that realloc must move gets twice its
 * old size, and its old pages go back to the OS at once (pm_realloc). */
#define PM_BIG_MOVE ((size_t)1 << 20)

static inline void *page_addr(uintptr_t page) { return (void *)(page << PM_PAGE_SHIFT); }

PM_COLD static void invalid_pointer(const char *what, const void *p)
{
    pm_os_fatal(what, p, 1);
}

static void *enomem(void)
{
    errno = ENOMEM;
    return NULL;
}

/* ---- sampling -------------------------------------------------------- */

/* Charges `size` bytes to the thread's sampler; returns the sample's
 * weight when this allocation is a sample point, else 0. */
static uint64_t sample_tick(pm_tcache_t *t, size_t size)
{
    uint64_t weight = pm_sampler_record(&t->sampler, size);
    if (PM_LIKELY(weight == 0)) return 0;
    pm_pageheap_tick(); /* every PM_TICK_BYTES at rate 0 */
    /* not after the thread's cache was flushed at its exit: C++ and
     * libraries free and allocate from their own key destructors, which
     * may run after ours */
    return weight != PM_SAMPLE_TICK && t->state != PM_THREAD_EMPTY ? weight : 0;
}

/* ---- when the OS refuses memory --------------------------------------- */

/* An allocation of `bytes` failed for want of memory: the allocator gives
 * back what it holds (pm_tcache_give_back) and says whether a retry may
 * succeed.  test_harden: test_recovery_after_aligned_fill. */
static int reclaim(size_t bytes) { return pm_tcache_give_back(bytes); }

/* ---- large blocks: whole spans of pages ------------------------------ */

/* size: what the application asked for; bytes (>= size): what to reserve. */
static void *alloc_large(size_t size, size_t bytes, size_t align_pages, int zero)
{
    size_t n = bytes ? (bytes + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT : 1;
    pm_span_t *s = NULL;
    for (int tries = 0; !s && tries < 2; tries++) {
        s = align_pages > 1 ? pm_pageheap_alloc_aligned(n, align_pages) : pm_pageheap_alloc(n);
        if (!s && (tries || n > (SIZE_MAX >> PM_PAGE_SHIFT) / 2 || !reclaim(n << PM_PAGE_SHIFT))) break;
    }
    if (!s) return enomem();
    s->cls = 0;
    s->requested = size;
    s->usable_seen = 0;
    s->sample = NULL;
    pm_relaxed_add(&large_bytes, (uint64_t)n << PM_PAGE_SHIFT);
    pm_relaxed_add(&large_requested, size);
    pm_relaxed_add(&large_count, 1);
    void *p = page_addr(s->page);
    if (zero && !s->zeroed) memset(p, 0, size);
    return p;
}

static void free_large(pm_span_t *s, int release)
{
    atomic_fetch_sub_explicit(&large_bytes, (uint64_t)s->npages << PM_PAGE_SHIFT, memory_order_relaxed);
    atomic_fetch_sub_explicit(&large_requested, s->requested, memory_order_relaxed);
    atomic_fetch_sub_explicit(&large_count, 1, memory_order_relaxed);
    if (release) pm_pageheap_free_released(s);
    else pm_pageheap_free(s);
}

void pm_alloc_large_stats(uint64_t *bytes, uint64_t *requested, uint64_t *count)
{
    *bytes = pm_relaxed_load(&large_bytes);
    *requested = pm_relaxed_load(&large_requested);
    *count = pm_relaxed_load(&large_count);
}

/* ---- small blocks ---------------------------------------------------- */

static void *alloc_small(pm_tcache_t *t, unsigned cls)
{
    void *p;
    if (PM_LIKELY(t->state == PM_THREAD_ACTIVE)) {
        pm_tlist_t *l = &t->list[cls];
        p = l->head;
        if (p) {
            l->head = pm_link_next(p, 0);
            l->len--;
        } else {
            p = pm_tcache_refill(t, cls);
        }
        /* a block written after its free sends the list elsewhere */
        if (pm_config_debug && p && l->head && !pm_is_carved_object(l->head, cls))
            pm_bad_link(0, l->head);
    } else {
        uint32_t got;
        p = pm_central_get(cls, 1, &got);
    }
    if (!p) {
        /* once more after giving back what is held */
        if (!reclaim(pm_class_size[cls])) return enomem();
        uint32_t got;
        p = pm_central_get(cls, 1, &got);
        if (!p) return enomem();
    }
    pm_key_clear(p);
    return p;
}

/* The calling thread's cache, set up at its first slow path; a NEW
 * thread starts caching after PM_THREAD_NEW_OPS operations (tcache.c). */
static pm_tcache_t *thread_cache(void)
{
    pm_tcache_t *t = &pm_tls;
    if (PM_LIKELY(t->state == PM_THREAD_ACTIVE)) return t;
    if (t->state == PM_THREAD_EMPTY) {
        pm_init();
        pm_tcache_thread_begin(t);
    }
    if (t->state == PM_THREAD_NEW && ++t->new_ops > PM_THREAD_NEW_OPS) pm_tcache_thread_start(t);
    return t;
}

/* A block of at least `bytes` for a request of `size` <= bytes bytes: the
 * sampler and the profiler see `size` (realloc reserves more than it was
 * asked for; the heap profile shows what the program asked for). */
static void *alloc_reserve(size_t size, size_t bytes, size_t align_pages, int zero)
{
    if (PM_UNLIKELY(bytes > PTRDIFF_MAX)) return enomem();
    pm_tcache_t *t = thread_cache();
    uint64_t sampled = sample_tick(t, size);
    void *p;
    if (bytes <= PM_MAX_SMALL && align_pages <= 1) {
        p = alloc_small(t, pm_sizeclass_of(bytes));
        if (p && zero) memset(p, 0, size);
    } else {
        p = alloc_large(size, bytes, align_pages, zero);
    }
    if (sampled && p) pm_sites_add(t, p, size, sampled);
    return p;
}

static void *alloc_any(size_t size, size_t align_pages, int zero)
{
    return alloc_reserve(size, size, align_pages, zero);
}

void *pm_alloc_slow(size_t size) { return alloc_any(size, 1, 0); }

void *pm_alloc_slow_charged(size_t size)
{
    /* malloc's fast path took size off the countdown before it found its
     * list empty (or the countdown spent): give it back, then charge once */
    pm_sampler_refund(&pm_tls.sampler, size);
    return pm_alloc_slow(size);
}

void *pm_malloc(size_t size) { return pm_malloc_inline(size); }

/* ---- free -------------------------------------------------------------- */

/* The span holding p, validated; aborts with "<what>: invalid pointer"
 * when p is not a block we handed out (as far as can be told cheaply). */
static pm_span_t *owner_for(const void *p, const char *what)
{
    uintptr_t a = (uintptr_t)p, page = a >> PM_PAGE_SHIFT;
    pm_span_t *s = pm_pagemap_span(page);
    if (!s || s->state != PM_SPAN_IN_USE || page < s->page || page >= s->page + s->npages)
        invalid_pointer(what, p);
    /* a small block must be one the span has cut: no one was given the rest */
    if (s->cls ? !pm_span_cut_object(s, p) : a != s->page << PM_PAGE_SHIFT) invalid_pointer(what, p);
    return s;
}

static pm_span_t *owner(const void *p) { return owner_for(p, "free(): invalid pointer"); }

void pm_free_slow(void *p)
{
    if (!p) return;
    pm_span_t *s = owner(p);
    /* its key: free already, in some list (pm_internal.h) */
    if (s->cls && PM_UNLIKELY(pm_key_is_set(p))) pm_guard_double_free("free()", p);
    if (PM_UNLIKELY(pm_sites_maybe_sampled(s, p))) pm_sites_remove(s, p);
    if (s->cls == 0) {
        free_large(s, 0);
        return;
    }
    unsigned cls = s->cls;
    pm_tcache_t *t = thread_cache();
    if (t->state != PM_THREAD_ACTIVE) { /* NEW or DEAD: uncached */
        pm_link_set(p, NULL);
        pm_key_set(p);
        pm_central_put(cls, p, 1);
        return;
    }
    pm_tlist_t *l = &t->list[cls];
    if (pm_config_debug) { /* every link of the list checked */
        uint32_t seen = 0;
        for (void *q = l->head; q; q = pm_link_next(q, 1)) {
            /* each link checked before it is followed, the walk bounded by
             * the list's length: a write after free may have made a cycle */
            if (++seen > l->len || !pm_is_carved_object(q, cls)) pm_bad_link(1, q);
        }
    }
    pm_link_set(p, l->head);
    pm_key_set(p);
    l->head = p;
    l->len++;
    if (l->len > l->max_len) pm_tcache_overflow(t, cls);
}

void pm_free(void *p) { pm_free_inline(p); }

/* ---- the rest of the family ------------------------------------------ */

void *pm_calloc(size_t n, size_t size)
{
    size_t total;
    if (PM_UNLIKELY(__builtin_mul_overflow(n, size, &total))) return enomem();
    if (total <= PM_MAX_SMALL) {
        void *p = pm_malloc_inline(total);
        if (p) memset(p, 0, total);
        return p;
    }
    return alloc_any(total, 1, 1);
}

static size_t span_usable(const pm_span_t *s)
{
    return s->cls ? pm_class_size[s->cls] : s->npages << PM_PAGE_SHIFT;
}

size_t pm_usable_size(const void *p)
{
    if (!p) return 0;
    pm_span_t *s = owner_for(p, "malloc_usable_size(): invalid pointer");
    if (s->cls == 0 && !s->usable_seen) s->usable_seen = 1;
    return span_usable(s);
}

/* realloc cannot move large block s for want of address space: its pages
 * past what was asked for (the reserve of an earlier growth) go back to
 * the OS, unless malloc_usable_size said they were the program's.  1: the
 * block shrank, a move may now fit.  Under RLIMIT_AS, a buffer grown by
 * half at each step (doubled reserve: 259 MiB for 194) could not go to
 * 291 MiB 520 MiB above the start, which glibc's mremap does. */
static int shed_reserve(pm_span_t *s)
{
    size_t need = (s->requested + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT, before = s->npages;
    if (s->cls != 0 || s->usable_seen || need == 0 || need >= before) return 0;
    if (!pm_pageheap_shrink(s, need)) return 0;
    atomic_fetch_sub_explicit(&large_bytes, (uint64_t)(before - need) << PM_PAGE_SHIFT, memory_order_relaxed);
    pm_pageheap_release_all(); /* the tail's address space, and any other */
    return 1;
}

/* A large block that grew or shrank in place is, for the profiler, the
 * old block freed and a new one of `size`, as a move would be: a 64 MiB
 * block shrunk to 1 MiB must not stay 64 MiB live, nor one grown from
 * 300 KB to 2 MiB stay 300 KB (the slack of growth within a block's
 * pages is not re-recorded: see the comment in pm_realloc). */
static void resample(pm_span_t *s, void *p, size_t size)
{
    if (PM_UNLIKELY(pm_sites_maybe_sampled(s, p))) pm_sites_remove(s, p);
    pm_tcache_t *t = thread_cache();
    uint64_t weight = sample_tick(t, size);
    if (weight) pm_sites_add(t, p, size, weight);
}

void *pm_realloc(void *p, size_t size)
{
    if (!p) return pm_malloc_inline(size);
    if (size == 0) {
        pm_free_inline(p);
        return NULL;
    }
    if (PM_UNLIKELY(size > PTRDIFF_MAX)) return enomem();
    pm_span_t *s = owner_for(p, "realloc(): invalid pointer");
    if (s->cls && PM_UNLIKELY(pm_key_is_set(p))) pm_guard_double_free("realloc()", p);
    size_t old = span_usable(s);
    /* Keep the block when the new size fits and wastes at most half.  The
     * heap profile goes on showing the size the block was sampled at (its
     * malloc or last move), as tcmalloc's does: recording each in-place
     * size as a new allocation made one bucket per (stack, size) pair, and
     * a buffer grown a byte at a time in exact mode made millions.  So a
     * block grown in place is under-counted by at most its slack. */
    if (size <= old && size >= old / 2) {
        if (s->cls == 0) { /* a large block's requested size is in the stats */
            pm_relaxed_add(&large_requested, size - s->requested); /* modular */
            s->requested = size;
        }
        return p;
    }
    /* A large block that stays large shrinks in place, as glibc's does: its
     * tail pages go back to the page heap as free resident pages (the
     * release policy returns them like any others), with no copy and
     * nothing to allocate, so it works when memory is exhausted, and a
     * shrink-then-grow-back loop does not fault its pages in again
     * (test_realloc_shrinks_large_in_place, test_exhausted_realloc_shrinks). */
    if (size < old && s->cls == 0 && size > PM_MAX_SMALL) {
        size_t before = s->npages, n = (size + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT;
        if (pm_pageheap_shrink(s, n)) {
            atomic_fetch_sub_explicit(&large_bytes, (uint64_t)(before - n) << PM_PAGE_SHIFT,
                                      memory_order_relaxed);
            pm_relaxed_add(&large_requested, size - s->requested); /* modular */
            s->requested = size;
            resample(s, p, size);
            return p;
        }
    }
    /* Growing: reserve at least a quarter more than the old block, as
     * tcmalloc does.  A string grown by small appends then moves through
     * every second or third size class instead of every one: fewer copies,
     * and far fewer half-empty spans left behind, each pinned by the one
     * string that stopped growing in it (bench/realloc measures it).
     * A big large block (PM_BIG_MOVE) gets twice its old size: its pages
     * are only faulted in as they are written, and each move copies into
     * fresh pages the kernel must fault in and zero (bench/grow).  The
     * block it leaves goes back to the OS at once, as mremap leaves nothing
     * behind: a block growing in steps would otherwise leave every step
     * resident in the page heap. */
    int big = s->cls == 0 && old >= PM_BIG_MOVE;
    size_t reserve = big ? 2 * old : old + old / 4;
    /* A large block grows into the free pages right after it when it can
     * (the reserve, else just enough), as glibc grows a block into its top
     * chunk: no copy, and no old block left behind in the page heap. */
    if (s->cls == 0 && size > old) {
        size_t before = s->npages, exact = (size + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT;
        size_t roomy = reserve > size ? (reserve + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT : exact;
        if (pm_pageheap_extend(s, roomy) || (roomy > exact && pm_pageheap_extend(s, exact))) {
            pm_relaxed_add(&large_bytes, (uint64_t)(s->npages - before) << PM_PAGE_SHIFT);
            pm_relaxed_add(&large_requested, size - s->requested); /* modular */
            s->requested = size;
            resample(s, p, size);
            return p;
        }
    }
    /* A big block that cannot grow in place moves with mremap, as glibc
     * moves its mmapped chunks: its pages go with the page tables, so
     * nothing is copied or faulted in again, and the old addresses are
     * gone at once (test_realloc_big_moves_pages).  The profiler's record
     * is keyed by the old address: dropped before the move, taken again if
     * the block stays. */
    if (big && size > old) {
        size_t before = s->npages, exact = (size + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT;
        size_t roomy = reserve > size ? (reserve + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT : exact;
        int sampled = pm_sites_maybe_sampled(s, p);
        if (sampled) pm_sites_remove(s, p);
        if (pm_pageheap_move(s, roomy, roomy == exact) || (roomy > exact && pm_pageheap_move(s, exact, 1))) {
            pm_relaxed_add(&large_bytes, (uint64_t)(s->npages - before) << PM_PAGE_SHIFT);
            pm_relaxed_add(&large_requested, size - s->requested); /* modular */
            s->requested = size;
            void *q = page_addr(s->page);
            pm_tcache_t *t = thread_cache();
            uint64_t weight = sample_tick(t, size);
            if (weight) pm_sites_add(t, q, size, weight);
            return q;
        }
        if (sampled) {
            pm_tcache_t *t = thread_cache();
            pm_sites_add(t, p, s->requested, pm_sampler_weight(&t->sampler, s->requested));
        }
    }
    void *q = NULL;
    int saved = errno;
    if (size > old && reserve > size) {
        q = alloc_reserve(size, reserve, 1, 0);
        if (!q) errno = saved; /* the exact size may still fit */
    }
    if (!q) q = pm_malloc_inline(size);
    if (!q && size > old && shed_reserve(s)) {
        errno = saved;
        old = span_usable(s);
        q = pm_malloc_inline(size);
    }
    if (!q) {
        if (size > old) return NULL;
        errno = saved; /* a shrink that cannot move keeps its block */
        return p;
    }
    memcpy(q, p, size < old ? size : old);
    if (big) {
        if (PM_UNLIKELY(pm_sites_maybe_sampled(s, p))) pm_sites_remove(s, p);
        free_large(s, 1);
    } else {
        pm_free_inline(p);
    }
    return q;
}

void *pm_reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) return enomem();
    return pm_realloc(p, total);
}

void *pm_memalign(size_t align, size_t size)
{
    if (align <= PM_ALIGNMENT) return pm_malloc_inline(size);
    if (align > SIZE_MAX / 2 + 1) { /* no power of two to round up to */
        errno = EINVAL;
        return NULL;
    }
    if (align & (align - 1)) { /* glibc rounds a bad alignment up */
        if (align > ((size_t)1 << 62)) return enomem();
        size_t a = 1;
        while (a < align) a <<= 1;
        align = a;
    }
    if (PM_UNLIKELY(size > PTRDIFF_MAX || align > PTRDIFF_MAX / 2)) return enomem();
    if (align <= PM_PAGE_SIZE && size <= PM_MAX_SMALL) {
        /* a class whose size is a multiple of align has aligned objects,
         * since spans start on page boundaries; the sampler and the
         * profile see the size asked for, not the class's */
        for (unsigned cls = pm_sizeclass_of(size < align ? align : size); cls < pm_class_count; cls++)
            if (pm_class_size[cls] % align == 0) return alloc_reserve(size, pm_class_size[cls], 1, 0);
    }
    return alloc_any(size, align > PM_PAGE_SIZE ? align >> PM_PAGE_SHIFT : 1, 0);
}

int pm_posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = pm_memalign(align, size);
    if (!p) return ENOMEM; /* errno ENOMEM too, as glibc's (POSIX leaves it open) */
    *out = p;
    return 0;
}

void *pm_aligned_alloc(size_t align, size_t size) { return pm_memalign(align, size); }

#define OS_PAGE ((size_t)4096)

void *pm_valloc(size_t size) { return pm_memalign(OS_PAGE, size); }

void *pm_pvalloc(size_t size)
{
    size_t rounded;
    if (__builtin_add_overflow(size, OS_PAGE - 1, &rounded)) return enomem();
    rounded &= ~(OS_PAGE - 1);
    return pm_memalign(OS_PAGE, rounded ? rounded : OS_PAGE);
}
