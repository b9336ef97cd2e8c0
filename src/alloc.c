/* alloc.c — the malloc family on top of the thread caches: the slow twins
 * of the inline fast paths (pm_fastpath.h), calloc, realloc (its in-place
 * strategies for large blocks are large.c's), aligned allocation, usable
 * size, and the free-side validation that turns a bad pointer into a
 * clear abort instead of heap corruption.
 * Must never: hold a lock (it takes none itself), or reach the profiler
 * other than through the sampling countdown on the slow path.
 * glibc is the reference for every edge case (doc/design.md lists them). */
#include "pm_fastpath.h"
#include "pm_hunt.h"

#include <errno.h>
#include <string.h>


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

/* Charges `size` bytes to the thread's sampler (t from
 * pm_alloc_thread_cache: NEW, ACTIVE or DEAD, all of which sample);
 * returns the sample's weight when this allocation is a sample point,
 * else 0. */
uint64_t pm_alloc_sample_tick(pm_tcache_t *t, size_t size)
{
    uint64_t weight = pm_sampler_record(&t->sampler, size);
    if (PM_LIKELY(weight == 0)) return 0;
    if (pm_sampler_tick_due(&t->sampler)) {
        if (pm_pageheap_tick()) {
            pm_central_tick();
            pm_tcache_tick();
        }
        pm_tcache_idle_check(t);
    }
    return weight != PM_SAMPLE_TICK ? weight : 0;
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
        /* once more after giving back what is held
         * (test_harden: test_recovery_after_aligned_fill) */
        if (!pm_tcache_give_back(pm_class_size[cls])) return enomem();
        uint32_t got;
        p = pm_central_get(cls, 1, &got);
        if (!p) return enomem();
    }
    pm_key_clear(p);
    return p;
}

/* The calling thread's cache, set up at its first slow path; a NEW
 * thread starts caching after PM_THREAD_NEW_OPS operations (tcache.c). */
pm_tcache_t *pm_alloc_thread_cache(void)
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
static void *alloc_reserve(size_t size, size_t bytes, size_t align_pages, int zero, uintptr_t entry)
{
    if (PM_UNLIKELY(bytes > PTRDIFF_MAX)) return enomem();
    pm_tcache_t *t = pm_alloc_thread_cache();
    uint64_t sampled = pm_alloc_sample_tick(t, size);
    void *p;
    unsigned cls = 0;
    if (bytes <= PM_MAX_SMALL && align_pages <= 1) {
        cls = pm_sizeclass_of(bytes);
        p = alloc_small(t, cls);
        if (p && zero) memset(p, 0, size);
    } else {
        p = pm_large_alloc(size, bytes, align_pages, zero);
    }
    if (sampled && p) {
        pm_sites_add(t, p, size, sampled, entry, cls); /* and the peak copy, dump triggers, timeline */
    } else if (PM_UNLIKELY(pm_hunt_clocked)) {
        pm_hunt_slow_path(t);
    }
    return p;
}

static void *alloc_any(size_t size, size_t align_pages, int zero)
{
    return alloc_reserve(size, size, align_pages, zero, 0);
}

/* malloc reaches its slow path by a tail call, so this frame's record
 * holds malloc's caller's return address and %rbp, its CFA that caller's
 * stack pointer: a sample's stack walk starts there and steps through
 * none of the allocator's frames (pm_unwind_capture_from; test_prof_unwind:
 * test_capture_from_entry_frame).  Handed down as an argument, so no other
 * path (realloc, or a signal handler's, inside this call) can see it. */
PM_NOINLINE void *pm_alloc_slow(size_t size)
{
    void *p = alloc_reserve(size, size, 1, 0, (uintptr_t)__builtin_frame_address(0));
    __asm__ volatile("" : "+r"(p) : : "memory"); /* no tail call: the record must stay */
    return p;
}

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

/* The class of the small block at p by pm_small_object_at, or 0 (also
 * off the page map).  With sampled, also a block that starts an object on
 * a flagged page: *sampled 1 for a class of a page or more, the one
 * object starting there (test_prof_sites.c: test_page_classes_hashed), 2
 * for a smaller class, whose span is then *span (the same test the fast
 * path trusts on an unflagged page; test_prof_sites.c:
 * test_sampled_page_flags). */
static unsigned small_class_at(const void *p, int *sampled, pm_span_t **span)
{
    uintptr_t a = (uintptr_t)p, page = a >> PM_PAGE_SHIFT;
    pm_leaf_t *leaf = page >> (PM_ADDR_BITS - PM_PAGE_SHIFT) ? NULL : pm_pagemap_leaf(page);
    if (!leaf) return 0;
    unsigned info = pm_page_info(leaf, a), cls = info & 0xff;
    if (pm_object_start(info, a, cls)) return cls;
    cls &= ~(unsigned)PM_SAMPLED_PAGE;
    if (!sampled || cls == (info & 0xff) || !pm_object_start(info, a, cls)) return 0;
    if (pm_sites_by_address(cls)) {
        *sampled = 1;
    } else {
        *sampled = 2;
        *span = pm_leaf_span(leaf, page);
    }
    return cls;
}

void pm_free_slow(void *p)
{
    if (!p) return;
    /* a block the fast path would have taken but for a full list, or a
     * sampled block of a class of a page or more: its page says all, its
     * span's line is left alone (the debug build checks the span:
     * test_debug; test_prof_sites.c: test_page_classes_hashed) */
    int sampled = 0;
    pm_span_t *s = NULL;
    unsigned cls = pm_config_debug ? 0 : small_class_at(p, &sampled, &s);
    if (sampled) {
        if (PM_UNLIKELY(pm_key_is_set(p))) pm_guard_double_free("free()", p);
        if (sampled == 1) pm_sites_remove_by_address(p);
        else pm_sites_remove(s, p);
    } else if (!cls) {
        s = owner(p);
        cls = s->cls;
        if (PM_UNLIKELY(cls && pm_key_is_set(p))) pm_guard_double_free("free()", p);
        if (PM_UNLIKELY(pm_sites_maybe_sampled(s, p))) pm_sites_remove(s, p);
        if (cls == 0) {
            pm_large_free(s);
            return;
        }
    } else if (PM_UNLIKELY(pm_key_is_set(p))) { /* free already, in some list (pm_internal.h) */
        pm_guard_double_free("free()", p);
    }
    pm_tcache_t *t = pm_alloc_thread_cache();
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
    if (l->len > l->max_len) {
        pm_tcache_overflow(t, cls);
        if (PM_UNLIKELY(pm_hunt_clocked)) pm_hunt_slow_path(t);
    }
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

/* What a small block of `old` usable bytes that must grow to `size`
 * moves into: at least a quarter more, as tcmalloc gives.  A growth past
 * the class's end by at most a sixteenth of it is an append, and a thread
 * whose last APPEND_RUN moves were all appends builds its strings or
 * arrays a step at a time and goes on: it gets twice the old block, so
 * each block crosses half as many classes and leaves fewer half-empty
 * spans behind (doc/design.md; test_alloc: test_realloc_append_run). */
#define APPEND_RUN 4
__attribute__((noinline)) static size_t growth_reserve(size_t old, size_t size)
{
    pm_tcache_t *t = &pm_tls;
    if (size <= old) return 0; /* a shrink: no reserve, the run untouched */
    if (size - old > old / 16) {
        t->appends = 0;
        return old + old / 4;
    }
    if (t->appends < APPEND_RUN) t->appends++;
    return t->appends < APPEND_RUN ? old + old / 4 : 2 * old;
}

/* The block realloc moves one of `old` usable bytes to, for `size`: a
 * growth takes `reserve` where it can (see pm_realloc); NULL with errno
 * ENOMEM when none could be had. */
static void *move_target(size_t old, size_t size, size_t reserve)
{
    void *q = NULL;
    int saved = errno;
    if (size > old && reserve > size) {
        q = alloc_reserve(size, reserve, 1, 0, 0);
        if (!q) errno = saved; /* the exact size may still fit */
    }
    /* (not inlined: a move copies the block anyway) */
    return q ? q : pm_malloc(size);
}

/* Its frees call pm_free: three inlined copies of free's fast path kept
 * the hot code past one 64 KiB window (check-text-resident). */
void *pm_realloc(void *p, size_t size)
{
    if (!p) return pm_malloc_inline(size);
    if (size == 0) {
        pm_free(p);
        return NULL;
    }
    if (PM_UNLIKELY(size > PTRDIFF_MAX)) return enomem();
    /* A small block is found without its span, whose line a program
     * resizing many blocks misses on nearly every call: one that keeps
     * its class stays (test_alloc: test_realloc_in_place_by_page_info),
     * and one that moves meets the owner check once its new block is
     * made, the span's miss overlapping that work (4 096 blocks resized
     * at random to 1-2 000 bytes: 0.18 -> 0.16 s, tcmalloc 0.13).  One
     * that stays reads no word of the block either: its free key is a
     * line the program may never touch, and reading it was nearly half
     * the time of bench/strings (a freed block given to realloc is told
     * when it must move, at the key test below or its free, as glibc
     * tells it only in free; test_harden: test_double_free_same_class;
     * test_realloc_in_place_reads_no_block_word). */
    unsigned cls = small_class_at(p, NULL, NULL);
    if (cls && size <= pm_class_size[cls] && size >= pm_class_size[cls] / 2) return p;
    if (cls && !pm_key_is_set(p)) {
        size_t old = pm_class_size[cls];
        int saved = errno;
        void *q = move_target(old, size, growth_reserve(old, size));
        (void)owner_for(p, "realloc(): invalid pointer");
        if (!q) {
            if (size > old) return NULL;
            errno = saved; /* a shrink that cannot move keeps its block */
            return p;
        }
        memcpy(q, p, size < old ? size : old);
        pm_free(p);
        return q;
    }
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
        if (s->cls == 0) pm_large_resized(s, size);
        return p;
    }
    /* Growing: reserve at least a quarter more than the old block, as
     * tcmalloc does, so a block grown in steps moves through every second
     * or third size class instead of every one: fewer copies, and far
     * fewer half-empty spans left behind, each pinned by the one string
     * that stopped growing in it (bench/realloc measures it).  A small
     * block a thread grows by appends gets twice (growth_reserve), and so
     * does a big large block (large.c, PM_BIG_MOVE). */
    int big = pm_large_is_big(s);
    size_t reserve = big ? 2 * old : s->cls ? growth_reserve(old, size) : old + old / 4;
    /* a large block shrinks, grows into the pages after it, or moves with
     * its pages (large.c) */
    if (s->cls == 0 && (size > old || size > PM_MAX_SMALL)) {
        void *q = pm_large_realloc_in_place(s, p, size, reserve);
        if (q) return q;
    }
    int saved = errno;
    void *q = move_target(old, size, reserve);
    if (!q && size > old && pm_large_shed_reserve(s)) {
        errno = saved;
        old = span_usable(s);
        q = pm_malloc(size);
    }
    if (!q) {
        if (size > old) return NULL;
        errno = saved; /* a shrink that cannot move keeps its block */
        return p;
    }
    /* a large block's bytes past its request were never written, unless
     * malloc_usable_size offered them: reading them faulted in zero pages
     * and the copy wrote them out (test_realloc_copies_what_was_asked) */
    size_t have = s->cls == 0 && !s->usable_seen && s->requested ? s->requested : old;
    memcpy(q, p, size < have ? size : have);
    if (s->cls == 0) {
        /* a large block a growth leaves goes back to the OS, as mremap
         * leaves nothing behind, unless the policy keeps it for the next
         * (pm_release_keep_moved_locked): a block growing in steps would
         * otherwise leave every step resident in the page heap, and the
         * default cap keeps young free runs (pagerelease.c, bench/grow).
         * One left for a small block stays, for the next large one: a
         * buffer that goes back and forth faulted its pages in each time
         * (test_realloc_large_to_small_keeps_pages). */
        if (PM_UNLIKELY(pm_sites_maybe_sampled(s, p))) pm_sites_remove(s, p);
        if (size > old) pm_large_free_moved(s, q);
        else pm_large_free(s);
    } else {
        pm_free(p);
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
         * since spans start on page boundaries, and its list serves them
         * as malloc's does (C++'s aligned new of alignas(64) objects,
         * posix_memalign(4096) buffers; test_memalign_classes); the
         * sampler and the profile see the size asked for, not the class's */
        unsigned cls = pm_align_class[__builtin_ctzll(align) - 5][pm_sizeclass_of(size)];
        if (cls) {
            if (!pm_config_debug) {
                void *p = pm_tcache_pop_inline(cls, size);
                if (PM_LIKELY(p != NULL)) return p;
                pm_sampler_refund(&pm_tls.sampler, size);
            }
            return alloc_reserve(size, pm_class_size[cls], 1, 0, 0);
        }
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
