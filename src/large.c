/* large.c — large blocks (above 256 KiB, or aligned beyond a page): each
 * a span of its own from the page heap, and realloc's strategies for them
 * that keep the block where it is (shrink in place, grow into the free
 * pages after it) or move its pages without a copy (mremap).  The bytes
 * and counts the stats show are kept here, changed in one place
 * (account).  Takes no lock itself (the page heap takes its own); reaches
 * the profiler only to drop and re-take a resized block's sample. */
#include "pm_internal.h"

#include <errno.h>
#include <string.h>

static _Atomic uint64_t large_bytes, large_requested, large_count;

/* A large block at least this big that realloc must move gets twice its
 * old size, and its old pages go back to the OS at once (pm_realloc). */
#define PM_BIG_MOVE ((size_t)1 << 20)

static inline void *page_addr(uintptr_t page) { return (void *)(page << PM_PAGE_SHIFT); }

/* The stats' view of large block s changes: its pages by `pages`, its
 * requested size to `size`, the count by `count`.  The sums are modular:
 * a decrease adds the complement. */
static void account(pm_span_t *s, int64_t pages, size_t size, int count)
{
    pm_relaxed_add(&large_bytes, (uint64_t)pages << PM_PAGE_SHIFT);
    pm_relaxed_add(&large_requested, (uint64_t)size - s->requested);
    if (count) pm_relaxed_add(&large_count, (uint64_t)(int64_t)count);
    s->requested = size;
}

static int64_t grown(const pm_span_t *s, size_t before) { return (int64_t)s->npages - (int64_t)before; }

void pm_alloc_large_stats(uint64_t *bytes, uint64_t *requested, uint64_t *count)
{
    *bytes = pm_relaxed_load(&large_bytes);
    *requested = pm_relaxed_load(&large_requested);
    *count = pm_relaxed_load(&large_count);
}

/* ---- calloc of big blocks ---------------------------------------------
 * A big block cut from resident free pages must be zeroed: by a memset,
 * which writes every page, or by releasing them (madvise), after which the
 * program faults in only the pages it touches, as with glibc's fresh mmap.
 * The first wins for a block filled whole, the second by far for one
 * touched at a few pages (doc/design.md), so the program's last watched
 * block decides: 16 of its pages, one at a place of its own in each
 * sixteenth, are handed out not resident, and at free fewer than two of
 * them resident means the next block is released instead of written.  A
 * block released or fresh from the OS is always watched (only mincore at
 * free); a written one in WATCH_EVERY, as its 16 page faults and 32 system
 * calls cost a filled calloc(4 MiB) as much as the memset
 * (test_calloc_follows_use). */
#define PM_CALLOC_WATCH ((size_t)4 << 20)
#define WATCH_SAMPLES 16
#define WATCH_EVERY 8
/* From this size up, a run mostly not resident is released whatever the
 * last watch said (calloc_big); below it, the look (mincore over the
 * block) cost a filled calloc(4 MiB) 4 %.  glibc maps blocks this big
 * afresh, so none of its callocs of them writes a page. */
#define PM_CALLOC_LOOK ((size_t)32 << 20)

static _Atomic int calloc_sparse;
static _Atomic uint32_t calloc_count;

/* The OS page that watched block p of size bytes shows in sample i. */
static void *watch_page(const void *p, size_t size, unsigned i)
{
    size_t os = pm_os_page_size(), seg = size / WATCH_SAMPLES / os;
    return (char *)p + ((size_t)i * seg + pm_mix64((uintptr_t)p ^ i) % seg) * os;
}

/* Zeroes big block s (p, size bytes) for calloc, and watches it.  From
 * PM_CALLOC_LOOK up, pages mostly not resident (a free run some big block
 * left untouched) are released rather than written even after a filled
 * block: the memset would fault every one of them in, where the program
 * may touch a few (calloc(2 GiB) after a malloc(1 GiB) touched at three
 * bytes: 2 GB peak RSS and 1.2 s, glibc 1.6 MB;
 * test_calloc_untouched_run_released). */
static int calloc_releases(void *p, size_t size)
{
    return pm_relaxed_load(&calloc_sparse) ||
           (size >= PM_CALLOC_LOOK && (unsigned long)pm_os_resident_pages(p, size) < size / pm_os_page_size() / 2);
}

static void calloc_big(pm_span_t *s, void *p, size_t size)
{
    if (!s->zeroed && !(calloc_releases(p, size) && pm_os_release(p, s->npages << PM_PAGE_SHIFT) == 0)) {
        memset(p, 0, size);
        if (pm_relaxed_add(&calloc_count, 1) % WATCH_EVERY) return;
        for (unsigned i = 0; i < WATCH_SAMPLES; i++) pm_os_discard(watch_page(p, size, i), pm_os_page_size());
    }
    s->calloc_watch = 1;
}

/* Watched block s is being freed: what the program touched of it. */
static void watch_done(const pm_span_t *s)
{
    int n = 0;
    for (unsigned i = 0; i < WATCH_SAMPLES; i++) {
        int r = pm_os_resident(watch_page(page_addr(s->page), s->requested, i));
        if (r < 0) return;
        n += r;
    }
    pm_relaxed_store(&calloc_sparse, n * 8 < WATCH_SAMPLES);
}

/* A large block asks for its pages rounded up to one of 8 steps per
 * doubling (at most 1/8 more): it gets them all where the pages come from
 * the OS (never written, they cost address space, not memory), and a
 * resident run whole where that is no longer, else just its pages.  A
 * block a little bigger than the last one freed then fits the run that one
 * left, where an exact run was a few pages short and the next block
 * faulted in a fresh run: bench/pythreads' JSON strings, each a few
 * percent longer than the last, kept 6.6-11.6 MB of such runs resident.
 * Realloc's reserve is roomy already and is not rounded again; it is
 * taken the same way, all of it from the OS and only the pages asked for
 * from a longer resident run, where the reserve would be resident memory
 * nothing has written (bench/run.sh's vectors: the last step to a target
 * short of the doubled reserve kept 1/4 of each buffer resident unused,
 * 231 -> 208 MB and 68 k -> 55 k page faults; test_large_rounds_to_step). */
static size_t large_pages(size_t n)
{
    if (n < 16) return n;
    size_t step = (size_t)1 << (63 - __builtin_clzll((unsigned long long)n) - 3);
    return (n + step - 1) & ~(step - 1); /* (n < 2^51: no wrap) */
}

/* size: what the application asked for; bytes (>= size): what to reserve. */
void *pm_large_alloc(size_t size, size_t bytes, size_t align_pages, int zero)
{
    size_t n = bytes ? (bytes + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT : 1, roomy = n;
    int aligned = align_pages > 1;
    /* (not an aligned block: its run is cut at its alignment, and its
     * rest before and after goes back as free runs anyway) */
    if (!aligned && bytes > size) /* realloc's reserve: roomy already, the request exact */
        n = (size + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT;
    else if (!aligned)
        roomy = large_pages(n);
    pm_span_t *s = aligned ? pm_pageheap_alloc_aligned(n, align_pages) : pm_pageheap_alloc_roomy(n, roomy);
    /* refused: once more after the allocator gave back what it holds
     * (test_harden: test_recovery_after_aligned_fill) */
    if (!s && n <= (SIZE_MAX >> PM_PAGE_SHIFT) / 2 && pm_tcache_give_back(n << PM_PAGE_SHIFT))
        s = aligned ? pm_pageheap_alloc_aligned(n, align_pages) : pm_pageheap_alloc(n);
    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    s->cls = 0;
    s->requested = 0;
    s->usable_seen = 0;
    s->sample = NULL;
    s->calloc_watch = 0;
    account(s, (int64_t)s->npages, size, 1);
    void *p = page_addr(s->page);
    if (zero && size >= PM_CALLOC_WATCH) calloc_big(s, p, size);
    else if (zero && !s->zeroed) memset(p, 0, size);
    return p;
}

void pm_large_free(pm_span_t *s)
{
    if (s->calloc_watch) watch_done(s);
    account(s, -(int64_t)s->npages, 0, -1);
    pm_pageheap_free_large(s);
}

/* Its pages go back to the OS at once or stay for the next block, as the
 * policy says (pagerelease.c, pm_release_keep_moved_locked); no watch is
 * done, as the copy read the block whole. */
void pm_large_free_moved(pm_span_t *s, const void *q)
{
    const pm_span_t *to = pm_pagemap_span((uintptr_t)q >> PM_PAGE_SHIFT);
    account(s, -(int64_t)s->npages, 0, -1);
    pm_pageheap_free_moved(s, to && to->cls == 0 && to->zeroed);
}

void pm_large_resized(pm_span_t *s, size_t size) { account(s, 0, size, 0); }

int pm_large_is_big(const pm_span_t *s) { return s->cls == 0 && ((size_t)s->npages << PM_PAGE_SHIFT) >= PM_BIG_MOVE; }

/* A large block that grew or shrank in place is, for the profiler, the
 * old block freed and a new one of `size`, as a move would be: a 64 MiB
 * block shrunk to 1 MiB must not stay 64 MiB live, nor one grown from
 * 300 KB to 2 MiB stay 300 KB. */
static void resample(pm_span_t *s, void *old, void *p, size_t size)
{
    if (old && PM_UNLIKELY(pm_sites_maybe_sampled(s, old))) pm_sites_remove(s, old);
    pm_tcache_t *t = pm_alloc_thread_cache();
    uint64_t weight = pm_alloc_sample_tick(t, size);
    if (weight) pm_sites_add(t, p, size, weight, 0, 0);
}

/* realloc cannot move large block s for want of address space: its pages
 * past what was asked for (the reserve of an earlier growth) go back to
 * the OS, unless malloc_usable_size said they were the program's.  1: the
 * block shrank, a move may now fit.  Under RLIMIT_AS, a buffer grown by
 * half at each step (doubled reserve: 259 MiB for 194) could not go to
 * 291 MiB 520 MiB above the start, which glibc's mremap does. */
int pm_large_shed_reserve(pm_span_t *s)
{
    size_t need = (s->requested + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT, before = s->npages;
    if (s->cls != 0 || s->usable_seen || need == 0 || need >= before) return 0;
    if (!pm_pageheap_shrink(s, need)) return 0;
    account(s, grown(s, before), s->requested, 0);
    pm_pageheap_release_all(); /* the tail's address space, and any other */
    return 1;
}

/* realloc of large block s (at p) to `size`, where it need not be copied:
 * the new address, or NULL when the caller must allocate and copy.
 * - A block that stays large shrinks in place, as glibc's does: its tail
 *   pages go back to the page heap as free resident pages (the release
 *   policy returns them like any others), with no copy and nothing to
 *   allocate, so it works when memory is exhausted, and a
 *   shrink-then-grow-back loop does not fault its pages in again
 *   (test_realloc_shrinks_large_in_place, test_exhausted_realloc_shrinks).
 * - A growing block takes the free pages right after it when it can (its
 *   reserve, else just enough), as glibc grows a block into its top chunk:
 *   no copy, and no old block left behind in the page heap.  The reserve
 *   (pm_realloc's) is a quarter more than the old size, twice it from
 *   PM_BIG_MOVE: its pages are only faulted in as they are written, and
 *   each move copies into fresh pages the kernel must fault in and zero
 *   (bench/grow).
 * - A big block that cannot grow in place moves with mremap, as glibc
 *   moves its mmapped chunks: its pages go with the page tables, so
 *   nothing is copied or faulted in again, and the old addresses are gone
 *   at once (test_realloc_big_moves_pages).  The profiler's record is
 *   keyed by the old address: dropped before the move, taken again if the
 *   block stays.
 * test_alloc_realloc_large_in_place, test_alloc_realloc_headroom. */
void *pm_large_realloc_in_place(pm_span_t *s, void *p, size_t size, size_t reserve)
{
    s->calloc_watch = 0; /* its watch pages are not where its new size puts them */
    size_t old = (size_t)s->npages << PM_PAGE_SHIFT, before = s->npages;
    size_t exact = (size + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT;
    if (size < old) {
        if (size <= PM_MAX_SMALL || !pm_pageheap_shrink(s, exact)) return NULL;
        account(s, grown(s, before), size, 0);
        resample(s, p, p, size);
        return p;
    }
    size_t roomy = reserve > size ? (reserve + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT : exact;
    if (pm_pageheap_extend(s, roomy) || (roomy > exact && pm_pageheap_extend(s, exact))) {
        account(s, grown(s, before), size, 0);
        resample(s, p, p, size);
        return p;
    }
    /* a resident free run it fits in is cheaper than mremap's fresh
     * pages: the copy costs less than the page faults on the growth
     * (test_realloc_moves_into_resident_run) */
    if (!pm_large_is_big(s) || pm_pageheap_resident_fit(roomy)) return NULL;
    int sampled = pm_sites_maybe_sampled(s, p);
    if (sampled) pm_sites_remove(s, p);
    if (pm_pageheap_move(s, roomy, roomy == exact) || (roomy > exact && pm_pageheap_move(s, exact, 1))) {
        account(s, grown(s, before), size, 0);
        void *q = page_addr(s->page);
        resample(s, NULL, q, size);
        return q;
    }
    if (sampled) {
        pm_tcache_t *t = pm_alloc_thread_cache();
        pm_sites_add(t, p, s->requested, pm_sampler_weight(&t->sampler, s->requested), 0, 0);
    }
    return NULL;
}
