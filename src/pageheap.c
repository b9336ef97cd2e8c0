/* pageheap.c — spans of 8 KiB pages: best-fit allocation from free lists
 * by length, splitting, coalescing on free, growth from the OS, and the
 * mechanism that returns free pages to the OS.  Which pages go back, and
 * when, is pagerelease.c's to decide: under the lock this file describes
 * its state (view_locked), asks pm_release_choose_locked for a plan,
 * picks the spans the plan names (state RELEASING, off every list), and
 * madvises or unmaps them after dropping the lock, then re-inserts them as
 * RETURNED (or forgets them, unmapped).
 * Lock: ph.lock guards every list, counter and free span.  Must never make
 * a syscall under it: growth maps memory before taking it.  A free that
 * finds it held does not wait: it leaves its span on ph.deferred, and the
 * next thread to take the lock (ph_lock) puts it on the lists first.
 * Span structs come from meta.c through a spare pool topped up outside the
 * lock, so no operation allocates metadata while holding it.
 * A returned run of 1 MiB or more is unmapped (UNMAP_PAGES), and so is a
 * run of any length with no neighbour in the heap (an island between
 * holes).  Fresh memory from the OS counts as RETURNED (not yet resident),
 * so it is used last.
 * A span whose release the kernel refused (mlock/mlockall, or a kernel
 * page larger than the span's alignment) keeps its contents, so it goes
 * back as FREE, never RETURNED: RETURNED means "reads as zero", and calloc
 * skips zeroing on it.  The policy is told (pm_release_refused_locked). */
#include "pm_internal.h"
#include "pm_usdt.h"

#include <string.h>

#define LISTS 128            /* exact lists for 1..128 pages; [0] for longer */
#define GROW_PAGES 256       /* map at least 2 MiB at a time */
#define SPARE_WANT 6
#define RELEASE_BATCH 32
/* A free run at least this long goes back to the OS with munmap instead of
 * madvise, so its address space and its commit charge go too (as glibc
 * unmaps its mmapped chunks): under vm.overcommit_memory=2 or RLIMIT_AS,
 * memory freed after a peak was otherwise still counted against the
 * process.  Shorter runs are madvised and keep their addresses: every hole
 * splits a mapping, and vm.max_map_count bounds a process's mappings. */
#define UNMAP_PAGES 128      /* 1 MiB */
/* Holes that split the heap's address space stop here (see can_unmap):
 * well under vm.max_map_count (65 530), which the program's own mappings
 * and threads share. */
#define PM_MAX_EXTENTS 4096
static void heap_gains(uintptr_t page, size_t npages);
static void heap_loses(uintptr_t page, size_t npages);

enum { KIND_FREE = 0, KIND_RETURNED = 1 };

static struct {
    pm_lock_t lock;
    pm_span_t *lists[2][LISTS + 1];
    uint64_t nonempty[2][(LISTS + 1 + 63) / 64]; /* bit i: lists[kind][i] has a span */
    uint64_t free_pages[2];      /* pages on lists of each kind */
    uint64_t releasing_pages;
    pm_span_t *releasing;        /* RELEASING spans, linked by next/prev */
    uint64_t meta_pages;         /* pages turned into span structs */
    uint64_t mapped_pages;
    pm_span_t *spare;            /* unused span structs, linked by next */
    _Atomic unsigned nspare;
    pm_span_t *newest, *oldest;  /* FREE spans by the time they became free */
    uint64_t now;                /* the clock as read by the current operation */
    uint64_t give_back_ns;       /* no give-back for a failed growth before this, */
    uint64_t give_back_fail_pages; /* of this many pages or more */
    int64_t extents;             /* stretches of address space the heap holds, each
                                  * one mapping or more (see can_unmap) */
    int64_t max_extents;         /* holes split no more of them past this */
    pm_span_t *tree[2];          /* lists[kind][0]'s spans by (npages, page) */
    uint64_t returned_floor_ns;  /* no released run became free before this (0: unknown) */
    int space_limited;           /* pm_os_space_limited() as of the last growth */
    int short_of_space;          /* give-backs under way for RLIMIT_AS: holes
                                  * may split past max_extents */
    _Atomic uint64_t skew_ns;    /* added to the clock (tests: time passing) */
    /* spans freed while the lock was held (DEFERRED, linked by next), on a
     * line of their own: pushed without the lock */
    _Atomic(pm_span_t *) deferred PM_ALIGNED(PM_CACHELINE);
} ph = {.lock = PM_LOCK_INIT, .max_extents = PM_MAX_EXTENTS};

/* The page heap's clock: read before the lock (vDSO), noted under it, so
 * every operation's decisions and the ages it records use its own time. */
static inline uint64_t clock_now(void) { return pm_os_monotonic_ns() + pm_relaxed_load(&ph.skew_ns); }
static inline void clock_locked(uint64_t now)
{
    if (now > ph.now) ph.now = now;
}

/* The clock as the span operations read it: every CLOCK_EVERY-th of them
 * (and every tick, growth and give-back) reads it, the others use the
 * time last noted (0: nothing to note).  A clock read on every malloc and
 * free of a medium block was a visible part of its cost; ages and decay need
 * milliseconds, not nanoseconds (test_pageheap_tick_releases and
 * test_pageheap_cut_keeps_age see the time tests skip at once). */
#define CLOCK_EVERY 64
/* counted per thread: one counter for all bounced its cache line between
 * threads on every medium malloc and free */
static PM_TLS uint32_t clock_ops;
static inline uint64_t clock_coarse(void)
{
    if ((++clock_ops & (CLOCK_EVERY - 1)) == 0) return clock_now();
    return 0;
}

/* ---- the lock, and the frees that did not wait for it -------------------
 * Threads making and freeing large or medium blocks at once met on this
 * lock for every malloc and every free.  A free has nothing to return, so
 * one that finds the lock held pushes its span on ph.deferred and goes on;
 * whoever takes the lock next coalesces the pushed spans before anything
 * else, so every operation ordered after the free (an allocation, the
 * stats, a trim, a fork) sees the span free (test_pageheap_free_deferred,
 * test_pageheap_deferred_frees_agree).  The release rules run at the next
 * free that takes the lock, or the next tick. */
static void coalesce_insert_locked(pm_span_t *s);

/* Freed span s goes on the lists as a fresh free span of `state`. */
static void insert_freed_locked(pm_span_t *s, uint8_t state)
{
    *s = (pm_span_t){.page = s->page, .npages = s->npages, .state = state};
    coalesce_insert_locked(s);
}

/* Just after taking the lock: the spans pushed meanwhile go on the lists. */
static void drain_locked(void)
{
    if (!atomic_load_explicit(&ph.deferred, memory_order_relaxed)) return;
    pm_span_t *s = atomic_exchange_explicit(&ph.deferred, NULL, memory_order_acquire);
    while (s) {
        pm_span_t *next = s->next;
        insert_freed_locked(s, PM_SPAN_FREE);
        s = next;
    }
}

static void ph_lock(void)
{
    pm_lock(&ph.lock);
    drain_locked();
}

static int ph_trylock(void)
{
    if (!pm_trylock(&ph.lock)) return 0;
    drain_locked();
    return 1;
}

/* The state of a span found through the page map, under the lock: an
 * in-use one's may change meanwhile, by a free that did not wait (defer),
 * and is then still no FREE or RETURNED neighbour. */
static inline uint8_t state_of(const pm_span_t *t) { return __atomic_load_n(&t->state, __ATOMIC_RELAXED); }

/* In-use span s leaves that state for `state`, in one exchange: a second
 * free of it fails, on another thread too, whether the first one waited
 * for the lock or not (test_pageheap_deferred_double_free). */
static void in_use_to(pm_span_t *s, uint8_t state)
{
    PM_CHECK(__atomic_exchange_n(&s->state, state, __ATOMIC_RELAXED) == PM_SPAN_IN_USE, "free(): span freed twice");
}

static void defer(pm_span_t *s)
{
    in_use_to(s, PM_SPAN_DEFERRED);
    pm_span_t *head = atomic_load_explicit(&ph.deferred, memory_order_relaxed);
    do s->next = head;
    while (!atomic_compare_exchange_weak_explicit(&ph.deferred, &head, s, memory_order_release,
                                                  memory_order_relaxed));
}

static inline int kind_of(const pm_span_t *s) { return s->state == PM_SPAN_FREE ? KIND_FREE : KIND_RETURNED; }
static inline void *addr_of(uintptr_t page) { return (void *)(page << PM_PAGE_SHIFT); }

/* Exact lists 1..LISTS, and list 0 for every longer span. */
static inline size_t list_index(size_t npages) { return npages <= LISTS ? npages : 0; }

static pm_span_t **list_for(int kind, size_t npages) { return &ph.lists[kind][list_index(npages)]; }

static inline void mark_list(int kind, size_t npages, int on)
{
    size_t i = list_index(npages);
    uint64_t bit = (uint64_t)1 << (i & 63);
    if (on) ph.nonempty[kind][i >> 6] |= bit;
    else ph.nonempty[kind][i >> 6] &= ~bit;
}

/* ---- the size tree -------------------------------------------------------
 * The spans longer than LISTS pages, of each kind, also sit in a treap
 * keyed by (npages, page), its priorities a hash of the span struct's
 * address: a best fit among tens of thousands of long free runs is a
 * descent of ~2 log n nodes, not a walk of them all (bench/holes;
 * test_pageheap_long_runs_best_fit). */
static inline uint64_t tree_prio(const pm_span_t *s) { return pm_mix64((uintptr_t)s); }

static inline int tree_less(const pm_span_t *a, const pm_span_t *b)
{
    return a->npages < b->npages || (a->npages == b->npages && a->page < b->page);
}

/* Splits tree t into the spans before k (*l) and the rest (*r). */
static void tree_split(pm_span_t *t, const pm_span_t *k, pm_span_t **l, pm_span_t **r)
{
    while (t) {
        if (tree_less(t, k)) {
            *l = t;
            l = &t->tr;
            t = t->tr;
        } else {
            *r = t;
            r = &t->tl;
            t = t->tl;
        }
    }
    *l = *r = NULL;
}

/* Joins trees a and b, every span of a before every span of b. */
static pm_span_t *tree_merge(pm_span_t *a, pm_span_t *b)
{
    pm_span_t *root = NULL, **at = &root;
    while (a && b) {
        if (tree_prio(a) > tree_prio(b)) {
            *at = a;
            at = &a->tr;
            a = a->tr;
        } else {
            *at = b;
            at = &b->tl;
            b = b->tl;
        }
    }
    *at = a ? a : b;
    return root;
}

static void tree_insert(pm_span_t **root, pm_span_t *s)
{
    uint64_t p = tree_prio(s);
    while (*root && tree_prio(*root) > p) root = tree_less(s, *root) ? &(*root)->tl : &(*root)->tr;
    tree_split(*root, s, &s->tl, &s->tr);
    *root = s;
}

static void tree_remove(pm_span_t **root, pm_span_t *s)
{
    while (*root != s) {
        PM_CHECK(*root != NULL, "page heap: long span missing from its tree");
        root = tree_less(s, *root) ? &(*root)->tl : &(*root)->tr;
    }
    *root = tree_merge(s->tl, s->tr);
}

/* The first span of tree t after (npages, page) in the tree's order, or
 * NULL. */
static pm_span_t *tree_above(pm_span_t *t, size_t npages, uintptr_t page)
{
    pm_span_t *best = NULL;
    while (t) {
        if (t->npages > npages || (t->npages == npages && t->page > page)) {
            best = t;
            t = t->tl;
        } else {
            t = t->tr;
        }
    }
    return best;
}

/* The shortest span of at least n pages (n > 0), the lowest of equals. */
static inline pm_span_t *tree_fit(pm_span_t *t, size_t n) { return tree_above(t, n - 1, UINTPTR_MAX); }

/* The span after k in the tree's order, or NULL. */
static inline pm_span_t *tree_after(pm_span_t *t, const pm_span_t *k) { return tree_above(t, k->npages, k->page); }

static void list_insert(pm_span_t *s)
{
    pm_span_t **head = list_for(kind_of(s), s->npages);
    if (!*head) mark_list(kind_of(s), s->npages, 1);
    s->prev = NULL;
    s->next = *head;
    if (*head) (*head)->prev = s;
    *head = s;
    ph.free_pages[kind_of(s)] += s->npages;
    if (s->npages > LISTS) tree_insert(&ph.tree[kind_of(s)], s);
    s->free_ns = ph.now;
    if (s->state == PM_SPAN_RETURNED && ph.returned_floor_ns > ph.now) ph.returned_floor_ns = ph.now;
    if (s->state == PM_SPAN_FREE) { /* newest end of the age list */
        s->older = ph.newest;
        s->newer = NULL;
        if (ph.newest) ph.newest->newer = s;
        else ph.oldest = s;
        ph.newest = s;
    }
}

static void age_unlink(pm_span_t *s)
{
    if (s->older) s->older->newer = s->newer;
    else ph.oldest = s->newer;
    if (s->newer) s->newer->older = s->older;
    else ph.newest = s->older;
}

static void list_remove(pm_span_t *s)
{
    pm_span_t **head = list_for(kind_of(s), s->npages);
    if (s->prev) s->prev->next = s->next;
    else *head = s->next;
    if (s->next) s->next->prev = s->prev;
    if (!*head) mark_list(kind_of(s), s->npages, 0);
    if (s->npages > LISTS) tree_remove(&ph.tree[kind_of(s)], s);
    ph.free_pages[kind_of(s)] -= s->npages;
    if (s->state == PM_SPAN_FREE) age_unlink(s);
}

/* A free span's age: its place on the age list and when it became free. */
typedef struct {
    pm_span_t *older; /* the span before it on the age list */
    uint64_t free_ns;
} pm_age_t;

static pm_age_t age_of(const pm_span_t *s)
{
    return (pm_age_t){s->state == PM_SPAN_FREE ? s->older : NULL, s->free_ns};
}

/* s, just put on its list, is what is left of a span `cut` pages were
 * taken from (a: that span's age, taken before it left the lists).  A
 * rest at least 8 times the cut keeps the run's age: a trickle of small
 * spans cut from a big run would otherwise keep all of it from ever being
 * a second old, resident for good (test_pageheap_cut_keeps_age).  A
 * shorter rest is young again: a run mostly taken is memory in use, and
 * aging it made bench/large fault in more pages. */
static int age_restore(pm_span_t *s, pm_age_t a, size_t cut)
{
    if (s->npages < 8 * (uint64_t)cut) return 0;
    s->free_ns = a.free_ns;
    if (s->state != PM_SPAN_FREE) {
        if (ph.returned_floor_ns > a.free_ns) ph.returned_floor_ns = a.free_ns;
        return 1;
    }
    /* right after the span that was older than the run, which is still on
     * the list (spans pushed since sit after it) */
    age_unlink(s);
    pm_span_t *newer = a.older ? a.older->newer : ph.oldest;
    s->older = a.older;
    s->newer = newer;
    if (a.older) a.older->newer = s;
    else ph.oldest = s;
    if (newer) newer->older = s;
    else ph.newest = s;
    return 1;
}

static uint64_t in_use_locked(void)
{
    return ph.mapped_pages - ph.free_pages[KIND_FREE] - ph.free_pages[KIND_RETURNED] -
           ph.releasing_pages - ph.meta_pages;
}

/* The heap's state as the policy sees it (pagerelease.c). */
PM_INLINE pm_heap_view_t view_locked(size_t grow_pages)
{
    return (pm_heap_view_t){.now = ph.now, .in_use = in_use_locked(), .free = ph.free_pages[KIND_FREE],
                            .released = ph.free_pages[KIND_RETURNED],
                            .oldest_free_ns = ph.oldest ? ph.oldest->free_ns : UINT64_MAX,
                            .grow_pages = grow_pages, .space_limited = ph.space_limited};
}

/* ---- span structs ----------------------------------------------------- */

static pm_span_t *best_fit_locked(size_t n);
static void spare_put_locked(pm_span_t *s);
static void mark_ends(pm_span_t *s);

/* When metadata cannot be mapped (the address space or the map count is
 * exhausted) while the heap has free pages, span structs come from the
 * first page of a free span: it turns into metadata for good.  Otherwise
 * a malloc that fits a free span failed for want of a struct to describe
 * it. */
static int spares_from_heap(void)
{
    ph_lock();
    pm_span_t *s = best_fit_locked(1);
    if (!s) {
        pm_unlock(&ph.lock);
        return -1;
    }
    pm_age_t age = age_of(s);
    list_remove(s);
    uintptr_t page = s->page;
    if (s->npages > 1) {
        s->page++;
        s->npages--;
        mark_ends(s);
        list_insert(s);
        age_restore(s, age, 1);
    } else {
        spare_put_locked(s);
    }
    pm_pagemap_set_span(page, NULL);
    heap_loses(page, 1); /* a page of metadata now */
    ph.meta_pages++;
    pm_unlock(&ph.lock);
    /* written outside the lock: a released page faults in here */
    pm_span_t *structs = addr_of(page);
    size_t n = PM_PAGE_SIZE / sizeof *structs;
    for (size_t i = 0; i < n; i++) structs[i] = (pm_span_t){.next = i + 1 < n ? &structs[i + 1] : NULL};
    ph_lock();
    structs[n - 1].next = ph.spare;
    ph.spare = structs;
    pm_relaxed_add(&ph.nspare, (unsigned)n);
    pm_unlock(&ph.lock);
    return 0;
}

/* Tops the spare structs up; fails only with fewer than the two an
 * operation may need. */
static int reserve_spares(void)
{
    while (pm_relaxed_load(&ph.nspare) < SPARE_WANT) {
        pm_span_t *s = pm_meta_alloc(sizeof *s);
        if (!s) { /* a heap page only when an operation would otherwise fail */
            if (pm_relaxed_load(&ph.nspare) >= 2) return 0;
            if (spares_from_heap() == 0) continue;
            return -1;
        }
        ph_lock();
        s->next = ph.spare;
        ph.spare = s;
        pm_relaxed_add(&ph.nspare, 1);
        pm_unlock(&ph.lock);
    }
    return 0;
}

static pm_span_t *spare_get_locked(void)
{
    pm_span_t *s = ph.spare;
    ph.spare = s->next;
    atomic_fetch_sub_explicit(&ph.nspare, 1, memory_order_relaxed);
    *s = (pm_span_t){0};
    return s;
}

static void spare_put_locked(pm_span_t *s)
{
    *s = (pm_span_t){0};
    s->next = ph.spare;
    ph.spare = s;
    pm_relaxed_add(&ph.nspare, 1);
}

/* ---- coalescing ------------------------------------------------------- */

static void mark_ends(pm_span_t *s)
{
    pm_pagemap_set_span(s->page, s);
    pm_pagemap_set_span(s->page + s->npages - 1, s);
}

/* The span whose last page is right before s (before) or whose first is
 * right after it, or NULL.  Found through the page map, whose entries
 * may name a struct reused since: its range is checked. */
static inline pm_span_t *beside(const pm_span_t *s, int before)
{
    pm_span_t *t = before ? (s->page ? pm_pagemap_span(s->page - 1) : NULL) : pm_pagemap_span(s->page + s->npages);
    return t && (before ? t->page + t->npages == s->page : t->page == s->page + s->npages) ? t : NULL;
}

/* beside(), when FREE or RETURNED. */
static inline pm_span_t *free_beside(const pm_span_t *s, int before)
{
    pm_span_t *t = beside(s, before);
    return t && (state_of(t) == PM_SPAN_FREE || state_of(t) == PM_SPAN_RETURNED) ? t : NULL;
}

/* s, on no list, takes in t, its free neighbour before it (before) or
 * after it. */
static inline void merge_locked(pm_span_t *s, pm_span_t *t, int before)
{
    list_remove(t);
    if (before) s->page = t->page;
    s->npages += t->npages;
    spare_put_locked(t);
}

/* s is FREE or RETURNED and on no list: merge it with neighbours of the
 * same state, then insert it. */
static void coalesce_insert_locked(pm_span_t *s)
{
    for (int before = 1; before >= 0; before--) {
        pm_span_t *t = beside(s, before);
        if (t && state_of(t) == s->state) merge_locked(s, t, before);
    }
    mark_ends(s);
    list_insert(s);
}

/* ---- allocation ------------------------------------------------------- */

static void pick(pm_span_t *s, pm_span_t **out, size_t *k, int absorb);
static size_t release_picked(pm_span_t **picked, size_t k);
static size_t pick_long_locked(int kind, pm_span_t **out, uint64_t before, int edges, int absorb);
static size_t pick_plan_locked(const pm_release_plan_t *plan, int absorb, pm_span_t **out);
static void unmap_released(void);
static void free_span(pm_span_t *s, int released);
static size_t pick_for_growth_locked(pm_span_t **out, size_t n, int event);

/* The shortest free span of at least n pages of the kinds first..last,
 * resident ones first, or NULL. */
static pm_span_t *fit_kinds_locked(size_t n, int first, int last)
{
    for (int kind = first; kind <= last; kind++) {
        /* the shortest nonempty exact list of at least n pages */
        for (size_t w = n >> 6; n <= LISTS && w < PM_ARRAY_LEN(ph.nonempty[kind]); w++) {
            uint64_t bits = ph.nonempty[kind][w];
            if (w == n >> 6) bits &= ~(uint64_t)0 << (n & 63);
            if (bits) {
                pm_span_t *s = ph.lists[kind][w * 64 + (size_t)__builtin_ctzll(bits)];
                PM_CHECK(s != NULL, "page heap: free-list bitmap out of step");
                return s;
            }
        }
        /* the long spans: the size tree */
        pm_span_t *best = tree_fit(ph.tree[kind], n > LISTS ? n : LISTS + 1);
        if (best) return best;
    }
    return NULL;
}

static pm_span_t *fit_locked(size_t n, int kind) { return fit_kinds_locked(n, kind, kind); }
static pm_span_t *best_fit_locked(size_t n) { return fit_kinds_locked(n, KIND_FREE, KIND_RETURNED); }

int pm_pageheap_resident_fit(size_t n)
{
    if (n == 0 || n > (SIZE_MAX >> PM_PAGE_SHIFT) / 2) return 0;
    ph_lock();
    int fit = fit_locked(n, KIND_FREE) != NULL;
    pm_unlock(&ph.lock);
    return fit;
}

/* Takes n pages from the front of s, a free span already off the lists
 * whose age was `age`, returning the rest. */
static void cut_front_locked(pm_span_t *s, size_t n, pm_age_t age)
{
    if (s->npages > n) {
        pm_span_t *rest = spare_get_locked();
        rest->page = s->page + n;
        rest->npages = s->npages - n;
        rest->state = s->state;
        mark_ends(rest);
        list_insert(rest);
        age_restore(rest, age, n);
        s->npages = n;
    }
    s->zeroed = s->state == PM_SPAN_RETURNED;
    if (s->zeroed) pm_os_note_faultin(s->page << PM_PAGE_SHIFT, s->npages << PM_PAGE_SHIFT);
    s->state = PM_SPAN_IN_USE;
    mark_ends(s);
}

/* Takes n pages from the front of free span s, returning the rest. */
static void carve_locked(pm_span_t *s, size_t n)
{
    pm_age_t age = age_of(s);
    list_remove(s);
    cut_front_locked(s, n, age);
}

/* Takes the n pages at `start` (inside free span s) and returns the pages
 * before and after them as free spans of s's state.  Needs two spares. */
static void carve_at_locked(pm_span_t *s, uintptr_t start, size_t n)
{
    pm_age_t age = age_of(s);
    list_remove(s);
    size_t lead = start - s->page;
    if (lead) {
        pm_span_t *head = spare_get_locked();
        head->page = s->page;
        head->npages = lead;
        head->state = s->state;
        s->page = start;
        s->npages -= lead;
        mark_ends(head);
        list_insert(head);
        if (age_restore(head, age, n)) age.older = head; /* the rest right after it */
    }
    cut_front_locked(s, n, age);
}

/* Spans an aligned search looks at before it gives up. */
#define ALIGNED_SCAN 64

/* A free span holding n pages that start on a multiple of align, resident
 * ones first, the shortest first; *start is where.  Looks at up to
 * ALIGNED_SCAN spans (test_pageheap_aligned_best_fit). */
static PM_NOINLINE pm_span_t *aligned_fit_locked(size_t n, size_t align, uintptr_t *start)
{
    size_t budget = ALIGNED_SCAN;
    for (int kind = KIND_FREE; kind <= KIND_RETURNED; kind++) {
        /* exact lists n..LISTS, then the longer runs (the size tree) */
        for (size_t i = n <= LISTS ? n : LISTS + 1; i <= LISTS + 1; i++) {
            pm_span_t *s = i <= LISTS ? ph.lists[kind][i] : tree_fit(ph.tree[kind], n > LISTS ? n : LISTS + 1);
            for (; s; s = i <= LISTS ? s->next : tree_after(ph.tree[kind], s)) {
                uintptr_t at = (s->page + align - 1) & ~(uintptr_t)(align - 1);
                if (s->npages >= n && at - s->page <= s->npages - n) {
                    *start = at;
                    return s;
                }
                if (--budget == 0) return NULL;
            }
        }
    }
    return NULL;
}

/* Free runs a stretch taken across may hold on either side of its FREE span. */
#define ACROSS_SIDE 8

/* n pages starting on a multiple of align, in use, taken across a stretch
 * of free runs around a FREE span, or NULL.  Runs of the two states never
 * merge, and the short fresh rests that aligned blocks were cut from split
 * the resident runs freed between them, so such blocks were mapped afresh
 * one in four (doc/design.md, aligned blocks).  Each run keeps what the
 * block does not take, in its state.  Looks at the ALIGNED_SCAN newest
 * FREE spans; needs two spares (test_pageheap_aligned_across_returned). */
static PM_NOINLINE pm_span_t *aligned_across_locked(size_t n, size_t align)
{
    size_t budget = ALIGNED_SCAN;
    for (pm_span_t *f = ph.newest; f && budget--; f = f->older) {
        pm_span_t *part[2 * ACROSS_SIDE + 1];
        int first = ACROSS_SIDE, last = ACROSS_SIDE;
        part[first] = f;
        while (first > 0 && (part[first - 1] = free_beside(part[first], 1))) first--;
        while (last < 2 * ACROSS_SIDE && (part[last + 1] = free_beside(part[last], 0))) last++;
        uintptr_t lo = part[first]->page, hi = part[last]->page + part[last]->npages;
        uintptr_t at = (lo + align - 1) & ~(uintptr_t)(align - 1);
        if (first == last || at > hi || hi - at < n) continue;
        pm_span_t *s = NULL;
        int zeroed = 1;
        for (int i = first; i <= last; i++) { /* each run's share, in page order */
            pm_span_t *t = part[i];
            uintptr_t from = at > t->page ? at : t->page, to = t->page + t->npages;
            if (to > at + n) to = at + n;
            if (from >= to) continue;
            carve_at_locked(t, from, to - from);
            zeroed &= t->zeroed;
            if (!s) {
                s = t;
                continue;
            }
            s->npages += t->npages;
            spare_put_locked(t);
        }
        s->zeroed = (uint8_t)zeroed;
        mark_ends(s);
        return s;
    }
    return NULL;
}

/* Pages grow() maps for n pages aligned to `align` pages, page-map leaves
 * included: what a limit on the address space must leave room for. */
static size_t grow_need(size_t n, size_t align)
{
    size_t leaf = (sizeof(pm_leaf_t) + PM_PAGE_SIZE - 1) >> PM_PAGE_SHIFT;
    return n + (align - 1) + 2 * leaf; /* grow's least mapping */
}

/* Maps fresh memory for at least n pages, starting on a multiple of
 * `align` pages, and adds it as RETURNED.  With `take`, n pages at the
 * start of the new memory go to the caller in *take under the same lock
 * (when spares allow; else *take stays NULL and the caller looks again).
 * Mapping the aligned range itself rather than n + align - 1 pages and
 * cutting the block out: the unused lead and trail were pieces that only
 * a block of their size could reuse, so address space grew without bound
 * (test_api: test_random_aligned_address_space). */
static int grow(size_t n, size_t align, pm_span_t **take)
{
    size_t pages = n > GROW_PAGES ? n : GROW_PAGES;
    if (pages > (SIZE_MAX >> PM_PAGE_SHIFT) / 4 || align > (SIZE_MAX >> PM_PAGE_SHIFT) / 4) return -1;
    /* a multiple of the alignment: the next such mapping, placed right
     * below, then touches this one and the kernel merges them, so aligned
     * blocks do not become a mapping each and reach vm.max_map_count
     * (test_api: test_big_alignment_mappings_merge).  That maps twice the
     * alignment for a moment (pm_os_map's slack): where it does not fit
     * (RLIMIT_AS, strict overcommit), 2 MiB, then the block's own pages
     * (test_api: test_big_alignment_at_limit) */
    size_t tries[3] = {(pages + align - 1) / align * align, pages, n};
    void *mem = NULL;
    int limited = pm_os_space_limited();
    for (int i = 0; i < 3 && !mem; i++)
        if (i == 0 || tries[i] < tries[i - 1])
            if ((mem = pm_os_map(tries[i] << PM_PAGE_SHIFT, align << PM_PAGE_SHIFT))) pages = tries[i];
    if (!mem) return -1;
    PM_USDT2(memory_heap_new, mem, pages << PM_PAGE_SHIFT);
    uintptr_t page = (uintptr_t)mem >> PM_PAGE_SHIFT;
    if (pm_pagemap_ensure(page, pages) != 0) {
        pm_os_unmap(mem, pages << PM_PAGE_SHIFT);
        return -1;
    }
    /* the new run's age: the clock as of now, not of the last free (an
     * unused rest older than the decay (pagerelease.c) is unmapped) */
    uint64_t now = clock_now();
    ph_lock();
    clock_locked(now);
    ph.space_limited = limited;
    if (!ph.spare) {
        pm_unlock(&ph.lock);
        pm_os_unmap(mem, pages << PM_PAGE_SHIFT);
        return 0; /* the caller retries and tops the spares up */
    }
    pm_span_t *s = spare_get_locked();
    s->page = page;
    s->npages = pages;
    s->state = PM_SPAN_RETURNED;
    ph.mapped_pages += pages;
    heap_gains(page, pages);
    coalesce_insert_locked(s); /* s may now start before page */
    size_t k = 0;
    pm_span_t *picked[RELEASE_BATCH];
    if (take && pm_relaxed_load(&ph.nspare) >= 2) {
        carve_at_locked(s, page, n);
        *take = s;
        k = pick_for_growth_locked(picked, n, PM_RELEASE_GROWTH);
    }
    pm_unlock(&ph.lock);
    if (k) release_picked(picked, k);
    return 0;
}

/* The heap is about to fault in n fresh pages because no resident free
 * span fits: what the policy's growth rule gives back (pagerelease.c). */
static size_t pick_for_growth_locked(pm_span_t **out, size_t n, int event)
{
    pm_release_plan_t plan;
    pm_heap_view_t v = view_locked(n);
    pm_release_choose_locked(&v, event, &plan);
    return pick_plan_locked(&plan, 0, out);
}

/* Out of address space (RLIMIT_AS, vm.max_map_count) or commit charge
 * (vm.overcommit_memory=2): every free run long enough to be unmapped goes
 * back, resident or released (a buffer realloc grew to 200 MiB and freed
 * left 162 MiB mapped, and a malloc(400 MiB) that glibc served failed);
 * shorter runs stay, as madvise gives no address space back.  None when it
 * cannot help: a program that keeps asking for more than could ever fit (a
 * malloc(1 << 45) caught as an error) lost its warm free memory on every
 * try, 300 times the page faults.  Under RLIMIT_AS that is known (the room
 * left plus the long runs is less than n); otherwise at most one give-back
 * per second after one that did not help (see below).
 * 1: some address space went, so growing may now succeed. */
static int can_unmap(uintptr_t page, size_t npages);

/* Whether a resident free run that a give-back unmaps starts or ends at
 * `page` (before: ends there): pick() takes a released neighbour along. */
static int long_free_at(uintptr_t page, int before)
{
    pm_span_t *t = pm_pagemap_span(page);
    return t && state_of(t) == PM_SPAN_FREE && t->npages >= UNMAP_PAGES &&
           (before ? t->page + t->npages == page + 1 : t->page == page) && can_unmap(t->page, t->npages);
}

/* Pages a give-back would unmap: free runs that can be unmapped, of
 * either kind, and the short released runs next to long resident ones,
 * which go with them: not counting them refused as hopeless a request
 * that giving them back would serve (test_api: test_freed_address_space_serves_malloc). */
static uint64_t long_free_pages_locked(void)
{
    uint64_t pages = 0;
    for (int kind = KIND_FREE; kind <= KIND_RETURNED; kind++)
        for (size_t idx = 1; idx <= LISTS + 1; idx++)
            for (pm_span_t *s = ph.lists[kind][idx <= LISTS ? idx : 0]; s; s = s->next)
                if (can_unmap(s->page, s->npages) ||
                    (kind == KIND_RETURNED && ((s->page && long_free_at(s->page - 1, 1)) ||
                                               long_free_at(s->page + s->npages, 0))))
                    pages += s->npages;
    return pages;
}

/* n: the pages the failed request asked for; need: what its growth maps. */
static int give_back_address_space(size_t n, size_t need)
{
    uint64_t now = clock_now();
    size_t room = pm_os_as_room();
    pm_span_t *picked[RELEASE_BATCH];
    ph_lock();
    /* short of address space, a mapping split is better than ENOMEM
     * (test_pageheap_bound_yields_to_rlimit) */
    int short_of_space = room >> PM_PAGE_SHIFT < need;
    ph.short_of_space += short_of_space;
    uint64_t long_free = long_free_pages_locked();
    int skip;
    if (short_of_space) {
        /* RLIMIT_AS refused the growth: the long runs help exactly when
         * they make up the difference, pause or not
         * (test_api: test_freed_address_space_returns) */
        skip = (room >> PM_PAGE_SHIFT) + long_free < need;
    } else {
        /* Something else refused (map count, commit charge).  The pause
         * holds only for requests at least as large as one that failed and
         * that the long free runs could not hold by themselves, so a
         * program that frees its caches after an ENOMEM and retries a
         * smaller request succeeds (test_api: test_retry_after_enomem). */
        skip = now < ph.give_back_ns && n >= ph.give_back_fail_pages && long_free < n;
    }
    if (skip) {
        ph.short_of_space -= short_of_space;
        pm_unlock(&ph.lock);
        return 0;
    }
    uint64_t before = ph.mapped_pages;
    for (;;) {
        size_t k = pick_long_locked(KIND_FREE, picked, UINT64_MAX, 0, 1);
        pm_unlock(&ph.lock);
        if (!k || release_picked(picked, k)) break; /* none left, or the kernel kept one */
        ph_lock();
    }
    unmap_released();
    ph_lock();
    ph.short_of_space -= short_of_space;
    int went = ph.mapped_pages < before;
    pm_unlock(&ph.lock);
    return went;
}

/* The growth of n pages after a give-back failed too: no more give-backs
 * for a while, for requests as large. */
static void give_back_failed(size_t n)
{
    uint64_t now = clock_now();
    ph_lock();
    if (now >= ph.give_back_ns || n < ph.give_back_fail_pages) ph.give_back_fail_pages = n;
    ph.give_back_ns = now + pm_release_decay_ns();
    pm_unlock(&ph.lock);
}

pm_span_t *pm_pageheap_alloc(size_t n) { return pm_pageheap_alloc_roomy(n, n); }

pm_span_t *pm_pageheap_alloc_roomy(size_t n, size_t roomy)
{
    if (n == 0 || n > (SIZE_MAX >> PM_PAGE_SHIFT) / 2) return NULL;
    if (roomy < n || roomy > (SIZE_MAX >> PM_PAGE_SHIFT) / 2) roomy = n;
    int gave_back = 0;
    for (;;) {
        if (reserve_spares() != 0) return NULL;
        uint64_t now = clock_coarse();
        ph_lock();
        clock_locked(now);
        if (pm_relaxed_load(&ph.nspare) >= 2) {
            /* A resident run of n pages, else a released one of roomy,
             * else a released one of n; a run no longer than roomy is
             * taken whole, and a longer resident one gives n only:
             * blocks that took roomy pages of longer resident runs held
             * pages the cap no longer counted as free (bench/large's
             * peak RSS +5 %; test_large_rounds_to_step) */
            pm_span_t *s = fit_locked(n, KIND_FREE);
            if (!s && roomy > n) s = fit_locked(roomy, KIND_RETURNED);
            if (!s) s = fit_locked(n, KIND_RETURNED);
            if (s) {
                size_t take = s->npages <= roomy ? s->npages : s->state == PM_SPAN_FREE ? n : roomy;
                carve_locked(s, take);
                pm_span_t *picked[RELEASE_BATCH];
                /* (n of them faulted in: the rest is never written) */
                size_t k = s->zeroed ? pick_for_growth_locked(picked, n, PM_RELEASE_GROWTH) : 0;
                pm_unlock(&ph.lock);
                if (k) release_picked(picked, k);
                return s;
            }
        }
        pm_unlock(&ph.lock);
        if (grow(roomy, 1, NULL) != 0) {
            /* the exact pages before any give-back: warm free runs are
             * not unmapped to make room for pages never written */
            if (roomy > n) {
                roomy = n;
                continue;
            }
            if (gave_back) give_back_failed(n);
            if (gave_back || !give_back_address_space(n, grow_need(n, 1))) return NULL;
            gave_back = 1;
        }
    }
}

pm_span_t *pm_pageheap_alloc_aligned(size_t n, size_t align)
{
    if (align <= 1) return pm_pageheap_alloc(n);
    if (n > (SIZE_MAX >> PM_PAGE_SHIFT) / 4 || align > (SIZE_MAX >> PM_PAGE_SHIFT) / 4)
        return NULL;
    /* First a free run that already holds an aligned range: the freed
     * block (FREE) and the unused lead and trail of its run (RETURNED)
     * never merge, so no run is n + align - 1 long again and a loop of
     * aligned allocations would map more on every round
     * (test_api: test_aligned_loop_address_space).  Then any run of
     * n + align - 1 pages, which holds one wherever it starts; then fresh
     * memory mapped on the alignment (see grow()). */
    int gave_back = 0;
    for (;;) {
        if (reserve_spares() != 0) return NULL;
        uint64_t now = clock_coarse();
        ph_lock();
        clock_locked(now);
        if (pm_relaxed_load(&ph.nspare) >= 2) {
            uintptr_t at;
            pm_span_t *s = aligned_fit_locked(n, align, &at);
            if (!s && (s = best_fit_locked(n + align - 1)))
                at = (s->page + align - 1) & ~(uintptr_t)(align - 1);
            if (s) carve_at_locked(s, at, n);
            else s = aligned_across_locked(n, align);
            if (s) {
                pm_span_t *picked[RELEASE_BATCH];
                size_t k = s->zeroed ? pick_for_growth_locked(picked, n, PM_RELEASE_GROWTH) : 0;
                pm_unlock(&ph.lock);
                if (k) release_picked(picked, k);
                return s;
            }
        }
        pm_unlock(&ph.lock);
        pm_span_t *s = NULL;
        if (grow(n, align, &s) == 0) {
            if (s) return s;
            continue;
        }
        if (gave_back) give_back_failed(n);
        if (gave_back || !give_back_address_space(n, grow_need(n, align))) return NULL;
        gave_back = 1;
    }
}

/* Shrinks in-use span s to its first n (>= 1) pages; the rest is freed as
 * a span of its own.  Returns 0 when no span struct could be had, and s is
 * unchanged. */
int pm_pageheap_shrink(pm_span_t *s, size_t n)
{
    if (n == 0 || n >= s->npages) return 0;
    (void)reserve_spares(); /* one spare on hand is enough */
    ph_lock();
    PM_CHECK(s->state == PM_SPAN_IN_USE, "page heap: shrinking a span not in use");
    if (!ph.spare) {
        pm_unlock(&ph.lock);
        return 0;
    }
    pm_span_t *t = spare_get_locked();
    t->page = s->page + n;
    t->npages = s->npages - n;
    t->state = PM_SPAN_IN_USE;
    mark_ends(t);
    s->npages = n;
    mark_ends(s);
    pm_unlock(&ph.lock);
    pm_pageheap_free_large(t); /* a 1 GiB block cut to 1 MiB kept the rest */
    return 1;
}

/* Grows in-use span s in place to n pages when the span right after it is
 * free (resident or not) and long enough: s takes the front of it, and
 * the rest stays free.  Returns 1 when s now has n pages, 0 when s is
 * unchanged.  No syscall and no new span struct. */
int pm_pageheap_extend(pm_span_t *s, size_t n)
{
    if (n <= s->npages || n > (SIZE_MAX >> PM_PAGE_SHIFT) / 2) return 0;
    size_t need = n - s->npages;
    int ok = 0;
    uint64_t now = clock_coarse();
    ph_lock();
    clock_locked(now);
    PM_CHECK(s->state == PM_SPAN_IN_USE, "page heap: extending a span not in use");
    pm_span_t *t = free_beside(s, 0);
    if (t && t->npages >= need) {
        pm_age_t age = age_of(t);
        list_remove(t);
        if (t->npages > need) { /* the rest stays free, in the same struct */
            t->page += need;
            t->npages -= need;
            mark_ends(t);
            list_insert(t);
            age_restore(t, age, need);
        } else {
            spare_put_locked(t);
        }
        s->npages = n;
        s->zeroed = 0;
        mark_ends(s);
        ok = 1;
    }
    pm_unlock(&ph.lock);
    return ok;
}

/* s's old addresses leave the page map before they are moved away: from
 * then on they may go to any mmap (see pick).  Undone by remark. */
static void unmark_ends(pm_span_t *s)
{
    ph_lock();
    PM_CHECK(s->state == PM_SPAN_IN_USE, "page heap: moving a span not in use");
    pm_pagemap_set_span(s->page, NULL);
    pm_pagemap_set_span(s->page + s->npages - 1, NULL);
    heap_loses(s->page, s->npages);
    pm_unlock(&ph.lock);
}

/* The move did not happen: s is back at its old addresses. */
static void remark(pm_span_t *s)
{
    ph_lock();
    heap_gains(s->page, s->npages);
    mark_ends(s);
    pm_unlock(&ph.lock);
}

/* s now lies at page, n pages long; its growth is fresh pages the program
 * is about to fault in, as a new run's would be: the growth rule gives
 * back resident free pages for them (pagerelease.c rule_move). */
static void moved_to(pm_span_t *s, uintptr_t page, size_t n)
{
    pm_span_t *picked[RELEASE_BATCH];
    uint64_t now = clock_now();
    ph_lock();
    clock_locked(now);
    heap_gains(page, n);
    size_t grown = n - s->npages;
    ph.mapped_pages += grown;
    s->page = page;
    s->npages = n;
    s->zeroed = 0;
    mark_ends(s);
    size_t k = pick_for_growth_locked(picked, grown, PM_RELEASE_MOVE);
    pm_unlock(&ph.lock);
    if (k) release_picked(picked, k);
}

/* No place could be reserved (the address space is short: RLIMIT_AS):
 * the kernel chooses where the pages go, so only the growth needs room,
 * as with glibc's mremap.  The page-map leaves the new place may need
 * (two at most: each covers 2 GiB) are mapped first, so the block never
 * lands where the page map cannot describe it; and one 8 KiB page more is
 * moved, so that a place the kernel aligned to 4 KiB only still holds n
 * of our pages once the contents are shifted by 4 KiB (a copy, in that
 * case only).  The spares cost 5 MiB of address space beyond the growth
 * (glibc needs the growth only), as the place is known only after the
 * move and moving back to the old addresses could take a mapping another
 * thread made meanwhile; the ones not used are unmapped at once. */
static int move_anywhere(pm_span_t *s, size_t n)
{
    size_t os_page = pm_os_page_size();
    if (n >= ((size_t)1 << PM_LEAF_BITS) || os_page > PM_PAGE_SIZE) return 0;
    pm_leaf_t *spares[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        if (!(spares[i] = pm_os_map(sizeof(pm_leaf_t), 0))) goto out;
    size_t old_bytes = s->npages << PM_PAGE_SHIFT, bytes = (n + 1) << PM_PAGE_SHIFT;
    unmark_ends(s);
    char *q = pm_os_remap_anywhere(addr_of(s->page), old_bytes, bytes);
    if (!q) {
        remark(s);
        goto out;
    }
    size_t shift = (PM_PAGE_SIZE - ((uintptr_t)q & (PM_PAGE_SIZE - 1))) & (PM_PAGE_SIZE - 1);
    if (shift) {
        memmove(q + shift, q, old_bytes);
        pm_os_unmap(q, shift);
    }
    char *start = q + shift, *end = start + (n << PM_PAGE_SHIFT);
    pm_os_unmap(end, (size_t)(q + bytes - end));
    uintptr_t page = (uintptr_t)start >> PM_PAGE_SHIFT;
    PM_CHECK(pm_pagemap_ensure_from(page, n, spares, 2) == 0, "page heap: page map leaves short for a move");
    moved_to(s, page, n);
out:
    for (int i = 0; i < 2; i++)
        if (spares[i]) pm_os_unmap(spares[i], sizeof(pm_leaf_t));
    return s->npages == n;
}

/* The reservation [r, end) around the place [lo, hi) a block moved to. */
static void unmap_slack(char *r, uintptr_t lo, uintptr_t hi, uintptr_t end)
{
    if (lo > (uintptr_t)r) pm_os_unmap(r, lo - (uintptr_t)r);
    if (end > hi) pm_os_unmap((void *)hi, end - hi);
}

/* Moves in-use span s to n > s->npages pages at a new address: the pages
 * go with mremap onto an aligned place reserved first (its page map
 * leaves made before), so its contents move with the page tables,
 * nothing is copied and nothing faulted in again, and the old addresses
 * leave the heap (as an unmapped run does).  What realloc does for a big
 * block that cannot grow in place, as glibc moves its mmapped chunks.
 * Returns 1 when s has its n pages at the new place, 0 when s is
 * unchanged (no room, or a range the kernel will not move in one piece:
 * it spans mappings).  Only when anywhere is set may the kernel choose
 * the place (move_anywhere) where none can be reserved: for the exact
 * size, not a reserve, which would take the address space that an
 * allocation after it needs (test_api: test_realloc_at_limit_leaves_room). */
int pm_pageheap_move(pm_span_t *s, size_t n, int anywhere)
{
    size_t os_page = pm_os_page_size();
    if (n <= s->npages || n > (SIZE_MAX >> PM_PAGE_SHIFT) / 4 ||
        (((s->page | s->npages | n) << PM_PAGE_SHIFT) & (os_page - 1)))
        return 0;
    size_t bytes = n << PM_PAGE_SHIFT;
    size_t slack = PM_PAGE_SIZE > os_page ? PM_PAGE_SIZE - os_page : 0;
    /* a range across two mappings (blocks cut from neighbouring ones, or
     * next to a block moved before) is refused by the kernel: asked
     * first, as a kernel before about 6.15 unmaps the destination before
     * refusing, and our reservation's addresses could then go to another
     * thread's mmap before we unmapped them (test_os_one_mapping) */
    if (!pm_os_one_mapping(addr_of(s->page), s->npages << PM_PAGE_SHIFT)) return 0;
    char *r = pm_os_reserve(bytes + slack);
    if (!r) return anywhere ? move_anywhere(s, n) : 0;
    uintptr_t to = ((uintptr_t)r + PM_PAGE_SIZE - 1) & ~(uintptr_t)(PM_PAGE_SIZE - 1);
    uintptr_t end = (uintptr_t)r + bytes + slack;
    if (pm_pagemap_ensure(to >> PM_PAGE_SHIFT, n) != 0) {
        pm_os_unmap(r, bytes + slack);
        return 0;
    }
    unmark_ends(s);
    if (pm_os_remap(addr_of(s->page), s->npages << PM_PAGE_SHIFT, bytes, (void *)to) != 0) {
        remark(s);
        /* the kernel may have unmapped the destination before refusing
         * (before about 6.15): then only the slack is still ours */
        if (pm_os_mapped((void *)to)) {
            pm_os_unmap(r, bytes + slack);
        } else {
            unmap_slack(r, to, to + bytes, end);
        }
        /* refused for the address space (6.18 counts the reservation
         * against RLIMIT_AS): where only the growth fits, the kernel's
         * place (test_api: test_realloc_grows_at_address_limit) */
        return anywhere ? move_anywhere(s, n) : 0;
    }
    unmap_slack(r, to, to + bytes, end);
    moved_to(s, to >> PM_PAGE_SHIFT, n);
    return 1;
}

/* ---- free and release ------------------------------------------------- */

/* A span whose pages are being released (outside the lock) stays on
 * ph.releasing, so that a fork child, where the releasing thread is gone,
 * can take it back (pm_pageheap_unlock_all). */
static void releasing_link_locked(pm_span_t *s)
{
    s->state = PM_SPAN_RELEASING;
    ph.releasing_pages += s->npages;
    s->prev = NULL;
    s->next = ph.releasing;
    if (ph.releasing) ph.releasing->prev = s;
    ph.releasing = s;
}

static void releasing_unlink_locked(pm_span_t *s)
{
    if (s->prev) s->prev->next = s->next;
    else ph.releasing = s->next;
    if (s->next) s->next->prev = s->prev;
    ph.releasing_pages -= s->npages;
}

enum { OS_KEPT, OS_RELEASED, OS_UNMAPPED };

/* Whether the page heap holds the page next to a run (the last page of
 * the span before it, or the first of the span after it): a span's ends
 * are always in the page map. */
static int ours(uintptr_t page, int before)
{
    pm_span_t *t = pm_pagemap_span(page);
    return t && (before ? t->page + t->npages == page + 1 : t->page == page);
}

/* How many of the heap's runs touch [page, page + npages) from outside. */
static int neighbours(uintptr_t page, size_t npages)
{
    return (page && ours(page - 1, 1)) + ours(page + npages, 0);
}

/* ph.extents as [page, page + npages) becomes the heap's (mapped, or back
 * in the page map) or stops being it (its ends leave the page map): a
 * range with no neighbour is a stretch of its own, one with two joins or
 * splits one.  Called when the ends change, under the lock, so threads
 * counting at once agree (a move counted at its end drifted the count). */
static void heap_gains(uintptr_t page, size_t npages) { ph.extents += 1 - neighbours(page, npages); }
static void heap_loses(uintptr_t page, size_t npages) { ph.extents += neighbours(page, npages) - 1; }

/* A run of whole kernel pages (with pages above 8 KiB munmap would round
 * it up and take a neighbour's bytes) that is UNMAP_PAGES or longer, or
 * that has no neighbour in the heap on either side: an island left
 * between two holes, which no longer merges with anything and, under
 * 1 MiB, would otherwise never be unmapped (test_pageheap_unmaps_islands).
 * Unmapping an island splits no mapping: it is one, or its neighbours
 * are the program's. */
static int can_unmap(uintptr_t page, size_t npages)
{
    uintptr_t mask = pm_os_page_size() - 1;
    if (((page | npages) << PM_PAGE_SHIFT) & mask) return 0;
    int before = page && ours(page - 1, 1), after = ours(page + npages, 0);
    if (!before && !after) return 1;
    if (npages < UNMAP_PAGES) return 0;
    /* a hole between two runs of the heap splits a mapping: past
     * max_extents such runs are only madvised, as glibc keeps the unused
     * rest of its mapped chunks, so aligned blocks cannot reach
     * vm.max_map_count (test_pageheap_holes_bounded) */
    return !(before && after) || ph.extents < ph.max_extents || ph.short_of_space;
}

/* Gives the pages of s (RELEASING, so no other thread touches it) to the
 * OS; called without the lock.  A released run whose munmap the kernel
 * refuses is madvised again: harmless, and rare (the map count). */
static int give_to_os(const pm_span_t *s)
{
    void *addr = addr_of(s->page);
    size_t bytes = s->npages << PM_PAGE_SHIFT;
    PM_USDT2(memory_heap_free, addr, s->unmapping ? bytes : 0); /* 0: madvised (memory_heap_less) */
    if (s->unmapping && pm_os_unmap_heap(addr, bytes) == 0) return OS_UNMAPPED;
    return pm_os_release(addr, bytes) == 0 ? OS_RELEASED : OS_KEPT;
}

/* s's pages are unmapped: the span leaves the heap.  Its ends left the
 * page map when it was picked (interior pages may still name a struct
 * that is reused later; owner() and coalescing check a span's range
 * before trusting it). */
static void forget_locked(pm_span_t *s)
{
    ph.mapped_pages -= s->npages;
    spare_put_locked(s);
}

/* Takes s off its list for release.  A run that can_unmap() may be
 * unmapped: its ends leave the page map now, under the lock.  Once unmapped, its addresses may go to any mmap at
 * once, our own growth included, whose span they then name: clearing them
 * after the munmap erased a live block's entry (free(): invalid pointer). */
static void pick(pm_span_t *s, pm_span_t **out, size_t *k, int absorb)
{
    list_remove(s);
    if (absorb && s->npages >= UNMAP_PAGES) {
        /* malloc_trim and a failed growth: released neighbours go with it.
         * Left beside the hole, such a piece (the rest of a released run a
         * block was cut from) could merge with nothing again and, under
         * 1 MiB, would never be unmapped (test_pageheap_unmaps_long_runs).
         * Not on the policy's own releases: the released runs are what the
         * next large blocks are cut from (bench/large's page faults). */
        for (int before = 1; before >= 0; before--) {
            pm_span_t *t = beside(s, before);
            if (t && state_of(t) == PM_SPAN_RETURNED) merge_locked(s, t, before);
        }
    }
    releasing_link_locked(s);
    s->unmapping = (uint8_t)can_unmap(s->page, s->npages);
    if (s->unmapping) {
        heap_loses(s->page, s->npages); /* gained back if it stays */
        pm_pagemap_set_span(s->page, NULL);
        pm_pagemap_set_span(s->page + s->npages - 1, NULL);
    }
    out[(*k)++] = s;
}

/* Picks FREE span s, or only its last `most` pages when it is longer and
 * a span struct is on hand (s keeps the rest, and its age); returns the
 * pages picked. */
static uint64_t pick_most(pm_span_t *s, pm_span_t **out, size_t *k, int absorb, uint64_t most)
{
    uint64_t n = s->npages;
    if (n <= most || !ph.spare) {
        pick(s, out, k, absorb);
        return n;
    }
    pm_age_t age = age_of(s);
    list_remove(s);
    pm_span_t *t = spare_get_locked();
    s->npages -= most;
    t->page = s->page + s->npages;
    t->npages = most;
    t->state = PM_SPAN_FREE;
    mark_ends(s);
    list_insert(s);
    age_restore(s, age, 0);
    mark_ends(t);
    list_insert(t);
    pick(t, out, k, 0);
    return most;
}

/* Picks the spans a plan names: FREE spans free since plan->aged_before,
 * oldest first (up to aged_pages, while more than aged_floor pages stay),
 * then the longest FREE spans while more than keep_pages stay; at most
 * plan->budget pages in all, cutting the last span to fit.  long_only:
 * only runs long enough to be unmapped.  absorb: see pick. */
static size_t pick_plan_locked(const pm_release_plan_t *plan, int absorb, pm_span_t **out)
{
    size_t k = 0;
    uint64_t left = plan->budget ? plan->budget : UINT64_MAX;
    uint64_t aged = plan->aged_pages ? plan->aged_pages : UINT64_MAX;
    while (!plan->long_only && k < RELEASE_BATCH && left && aged && ph.oldest &&
           ph.oldest->free_ns <= plan->aged_before && ph.free_pages[KIND_FREE] > plan->aged_floor) {
        uint64_t got = pick_most(ph.oldest, out, &k, absorb, left);
        left -= got;
        aged -= got < aged ? got : aged;
    }
    /* (a plan with no cap, the growth rule's, walks no list) */
    for (size_t i = 0; i <= LISTS && k < RELEASE_BATCH && left && ph.free_pages[KIND_FREE] > plan->keep_pages; i++) {
        /* longest first: the large list, then 128 down to 1 pages */
        size_t idx = i == 0 ? 0 : LISTS + 1 - i;
        if (plan->long_only && idx && idx < UNMAP_PAGES) break;
        while (ph.lists[KIND_FREE][idx] && k < RELEASE_BATCH && left &&
               ph.free_pages[KIND_FREE] > plan->keep_pages)
            left -= pick_most(ph.lists[KIND_FREE][idx], out, &k, absorb, left);
    }
    return k;
}

/* Returns the picked spans' pages to the OS and the spans to the free
 * lists (or out of the heap, when unmapped); gives the number of spans
 * that stayed in the heap. */
static size_t release_picked(pm_span_t **picked, size_t k)
{
    uint8_t fate[RELEASE_BATCH];
    size_t nrefused = 0, stayed = 0;
    for (size_t i = 0; i < k; i++) {
        fate[i] = (uint8_t)give_to_os(picked[i]);
        nrefused += fate[i] == OS_KEPT;
        stayed += fate[i] != OS_UNMAPPED;
    }
    ph_lock();
    for (size_t i = 0; i < k; i++) {
        releasing_unlink_locked(picked[i]);
        if (fate[i] == OS_UNMAPPED) {
            forget_locked(picked[i]);
            continue;
        }
        picked[i]->state = fate[i] == OS_KEPT ? PM_SPAN_FREE : PM_SPAN_RETURNED;
        if (picked[i]->unmapping) heap_gains(picked[i]->page, picked[i]->npages);
        picked[i]->unmapping = 0;
        coalesce_insert_locked(picked[i]); /* names it at its ends again */
    }
    if (nrefused) pm_release_refused_locked(ph.now);
    pm_unlock(&ph.lock);
    return stayed;
}

static void release_both(pm_span_t **picked, size_t k, pm_span_t **stale, size_t nstale)
{
    if (k) release_picked(picked, k);
    if (nstale) release_picked(stale, nstale);
}

/* The policy's rules for a free or a tick (`event`), under the lock with
 * the clock noted: picks what goes back to the OS into picked (*k) and
 * stale (*nstale), for release_both once the lock is dropped. */
static void rules_locked(int event, pm_span_t **picked, size_t *k, pm_span_t **stale, size_t *nstale)
{
    pm_release_plan_t plan;
    pm_heap_view_t v = view_locked(0);
    pm_release_choose_locked(&v, event, &plan);
    *k = plan.aged_before || plan.keep_pages != UINT64_MAX ? pick_plan_locked(&plan, 0, picked) : 0;
    *nstale = plan.stale ? pick_long_locked(KIND_RETURNED, stale, plan.stale_before, plan.stale_edges, 0) : 0;
    if (*nstale == RELEASE_BATCH) pm_release_stale_full_locked();
}

static void free_span(pm_span_t *s, int released)
{
    pm_span_t *picked[RELEASE_BATCH], *stale[RELEASE_BATCH];
    size_t k, nstale;
    uint64_t now = clock_coarse(); /* vDSO: read before the lock */
    int releasing = released, fate = OS_KEPT;
    if (releasing) { /* its pages go outside the lock */
        ph_lock();
        in_use_to(s, PM_SPAN_RELEASING);
        releasing_link_locked(s);
        pm_unlock(&ph.lock);
        /* madvised, not unmapped, whatever its length: the growing program
         * soon wants pages again (bench/grow's page faults; malloc_trim
         * unmaps it) */
        fate = pm_os_release(addr_of(s->page), s->npages << PM_PAGE_SHIFT) == 0 ? OS_RELEASED : OS_KEPT;
        ph_lock();
    } else if (!ph_trylock()) { /* the holder's successor inserts it */
        defer(s);
        return;
    }
    clock_locked(now);
    if (releasing) {
        releasing_unlink_locked(s);
        if (fate == OS_KEPT) pm_release_refused_locked(ph.now);
    } else {
        in_use_to(s, PM_SPAN_FREE);
    }
    insert_freed_locked(s, fate == OS_RELEASED ? PM_SPAN_RETURNED : PM_SPAN_FREE);
    rules_locked(PM_RELEASE_FREE, picked, &k, stale, &nstale);
    pm_unlock(&ph.lock);
    release_both(picked, k, stale, nstale);
}

/* The rules as the program allocates (each thread's sampling countdown
 * calls this: every PM_TICK_BYTES at rate 0), when the policy says a tick
 * is due (pm_release_tick_due). */
int pm_pageheap_tick(void)
{
    uint64_t now = clock_now();
    if (!pm_release_tick_due(now)) return 0;
    pm_span_t *picked[RELEASE_BATCH], *stale[RELEASE_BATCH];
    size_t k, nstale;
    (void)reserve_spares(); /* for a long run cut to the tick's bound */
    ph_lock();
    clock_locked(now);
    rules_locked(PM_RELEASE_TICK, picked, &k, stale, &nstale);
    pm_unlock(&ph.lock);
    release_both(picked, k, stale, nstale);
    return 1;
}

void pm_pageheap_skip_time(uint64_t ns)
{
    pm_relaxed_add(&ph.skew_ns, ns);
    uint64_t now = clock_now();
    ph_lock();
    clock_locked(now); /* the next operation sees the time passed */
    pm_unlock(&ph.lock);
}

void pm_pageheap_free(pm_span_t *s) { free_span(s, 0); }

/* Its pages go back to the OS at once (tests: a released run where they
 * want one). */
void pm_pageheap_free_released(pm_span_t *s) { free_span(s, 1); }

/* The policy decides under the lock and free_span takes it again: a lock
 * more on a path that has just copied 256 KiB or more (a moved block) or
 * freed 32 MiB (a huge one), and no code more on the paths every free
 * runs (check-text-resident).  huge: pm_release_keep_huge_locked decides,
 * else pm_release_keep_moved_locked. */
static void free_chosen(pm_span_t *s, int huge, int fresh)
{
    uint64_t now = clock_now();
    ph_lock();
    clock_locked(now);
    pm_heap_view_t v = view_locked(0);
    int keep = huge ? pm_release_keep_huge_locked(&v, s->npages) : pm_release_keep_moved_locked(&v, s->npages, fresh);
    pm_unlock(&ph.lock);
    free_span(s, !keep);
}

void pm_pageheap_free_moved(pm_span_t *s, int fresh) { free_chosen(s, 0, fresh); }

void pm_pageheap_free_large(pm_span_t *s)
{
    if (((size_t)s->npages << PM_PAGE_SHIFT) >= PM_HUGE_FREE) free_chosen(s, 1, 0);
    else free_span(s, 0);
}

/* Picks runs of a kind that can be unmapped (long ones first) that became
 * free at `before` or earlier (UINT64_MAX: all of them), and with `edges`
 * younger ones too where unmapping splits no mapping (a heap neighbour on
 * one side at most); absorb: see pick.  A walk of all the released runs
 * notes the oldest one's age, and a look for stale ones before it could be
 * a second old walks nothing: bench/holes walked its 5 600 released runs
 * at each free after a full batch, a fifth of its CPU time
 * (pm_pageheap_verify checks the floor). */
static size_t pick_long_locked(int kind, pm_span_t **out, uint64_t before, int edges, int absorb)
{
    size_t k = 0;
    if (kind == KIND_RETURNED && !edges && before < ph.returned_floor_ns) return 0;
    uint64_t oldest = UINT64_MAX;
    for (size_t i = 0; i <= LISTS && k < RELEASE_BATCH; i++) {
        size_t idx = i == 0 ? 0 : LISTS + 1 - i; /* the long list, then 128 pages down */
        pm_span_t *s = ph.lists[kind][idx];
        while (s && k < RELEASE_BATCH) {
            pm_span_t *next = s->next; /* (absorbing takes only the other kind) */
            if ((s->free_ns <= before || (edges && neighbours(s->page, s->npages) < 2)) &&
                can_unmap(s->page, s->npages))
                pick(s, out, &k, absorb);
            else if (s->free_ns < oldest)
                oldest = s->free_ns;
            s = next;
        }
    }
    if (kind == KIND_RETURNED && k < RELEASE_BATCH && !absorb) ph.returned_floor_ns = oldest; /* all seen */
    return k;
}

/* malloc_trim, after the resident free pages: released runs of 1 MiB and
 * more are unmapped too (a block realloc moved away from, fresh memory
 * never used).  Stops at the first run the kernel keeps. */
static void unmap_released(void)
{
    pm_span_t *picked[RELEASE_BATCH];
    for (;;) {
        ph_lock();
        size_t k = pick_long_locked(KIND_RETURNED, picked, UINT64_MAX, 0, 0);
        pm_unlock(&ph.lock);
        if (!k || release_picked(picked, k)) return;
    }
}

/* Tries every resident free page once: a span the kernel refused goes
 * back FREE and would be picked again, so the walk stops after as many
 * pages as were free when it began. */
void pm_pageheap_release_all(void)
{
    pm_span_t *picked[RELEASE_BATCH];
    ph_lock();
    uint64_t left = ph.free_pages[KIND_FREE];
    pm_unlock(&ph.lock);
    while (left) {
        ph_lock();
        uint64_t had = ph.free_pages[KIND_FREE];
        pm_release_plan_t all = {.keep_pages = 0}; /* every FREE span, longest first */
        size_t k = pick_plan_locked(&all, 1, picked);
        uint64_t took = had - ph.free_pages[KIND_FREE]; /* not the released neighbours taken along */
        pm_unlock(&ph.lock);
        if (!k) break;
        left -= took < left ? took : left;
        release_picked(picked, k);
    }
    unmap_released();
}

void pm_pageheap_stats(pm_pageheap_stats_t *out)
{
    ph_lock();
    out->mapped = ph.mapped_pages << PM_PAGE_SHIFT;
    out->free = ph.free_pages[KIND_FREE] << PM_PAGE_SHIFT;
    out->released = (ph.free_pages[KIND_RETURNED] + ph.releasing_pages) << PM_PAGE_SHIFT;
    out->meta = ph.meta_pages << PM_PAGE_SHIFT;
    out->in_use = out->mapped - out->free - out->released - out->meta;
    out->contention = pm_relaxed_load(&ph.lock.contended);
    pm_unlock(&ph.lock);
}

/* Spans in tree t of kind `kind`, all long, within (lo, hi) by key and of
 * priority at most the parent's; SIZE_MAX when one is not. */
static size_t tree_check(const pm_span_t *t, int kind, const pm_span_t *lo, const pm_span_t *hi, uint64_t max_prio)
{
    if (!t) return 0;
    if ((lo && !tree_less(lo, t)) || (hi && !tree_less(t, hi)) || tree_prio(t) > max_prio || t->npages <= LISTS ||
        (t->state != PM_SPAN_FREE && t->state != PM_SPAN_RETURNED) || kind_of(t) != kind)
        return SIZE_MAX;
    size_t l = tree_check(t->tl, kind, lo, t, tree_prio(t)), r = tree_check(t->tr, kind, t, hi, tree_prio(t));
    return l == SIZE_MAX || r == SIZE_MAX ? SIZE_MAX : l + r + 1;
}

/* Tests: the free lists, the age list and the size trees agree.  0, or
 * which check failed: 1 a listed span's state or length list is wrong,
 * 2 the pages on the lists are not free_pages, 3 an age-list link is
 * broken or a span on it is not FREE, 4 the age list is not oldest
 * first, 5 it does not hold every FREE span, 6 a size tree is out of
 * order, holds a span of another kind or a short one, or holds fewer or
 * more spans than its kind's long list. */
int pm_pageheap_verify(void)
{
    int bad = 0;
    uint64_t pages[2] = {0, 0}, nfree = 0, naged = 0;
    ph_lock();
    for (int kind = KIND_FREE; kind <= KIND_RETURNED && !bad; kind++)
        for (size_t i = 0; i <= LISTS && !bad; i++)
            for (pm_span_t *s = ph.lists[kind][i]; s && !bad; s = s->next) {
                if (kind_of(s) != kind || (s->state != PM_SPAN_FREE && s->state != PM_SPAN_RETURNED) ||
                    list_index(s->npages) != i || (s->next && s->next->prev != s))
                    bad = 1;
                pages[kind] += s->npages;
                nfree += kind == KIND_FREE;
            }
    if (!bad && (pages[0] != ph.free_pages[0] || pages[1] != ph.free_pages[1])) bad = 2;
    for (pm_span_t *s = ph.oldest, *prev = NULL; s && !bad; prev = s, s = s->newer) {
        if (s->state != PM_SPAN_FREE || s->older != prev || (!s->newer && ph.newest != s)) bad = 3;
        else if (prev && prev->free_ns > s->free_ns) bad = 4;
        if (++naged > nfree) bad = 5;
    }
    if (!bad && naged != nfree) bad = 5;
    for (int kind = KIND_FREE; kind <= KIND_RETURNED && !bad; kind++) {
        size_t nlong = 0;
        for (pm_span_t *s = ph.lists[kind][0]; s; s = s->next) nlong++;
        if (tree_check(ph.tree[kind], kind, NULL, NULL, UINT64_MAX) != nlong) bad = 6;
    }
    for (size_t i = 0; i <= LISTS && !bad; i++)
        for (pm_span_t *s = ph.lists[KIND_RETURNED][i]; s && !bad; s = s->next)
            if (s->free_ns < ph.returned_floor_ns) bad = 7;
    pm_unlock(&ph.lock);
    return bad;
}

void pm_pageheap_set_max_extents(int64_t n)
{
    ph_lock();
    ph.max_extents = n;
    pm_unlock(&ph.lock);
}

int64_t pm_pageheap_extents(void)
{
    ph_lock();
    int64_t n = ph.extents;
    pm_unlock(&ph.lock);
    return n;
}

void pm_pageheap_lock_all(void) { ph_lock(); }

void pm_pageheap_unlock_all(int child)
{
    if (!child) {
        pm_unlock(&ph.lock);
        return;
    }
    pm_lock_reset(&ph.lock);
    ph.short_of_space = 0; /* a give-back's thread is gone here */
    /* Spans another thread was releasing when the fork came: that thread
     * is gone here, so they go back as FREE (the release may have been
     * partial: FREE promises nothing about contents).  One long enough to
     * be unmapped may already be gone, and its addresses may even hold a
     * mapping of the program's by now: it leaves the heap untouched (at
     * worst its address space stays mapped in the child, unused). */
    while (ph.releasing) {
        pm_span_t *s = ph.releasing;
        releasing_unlink_locked(s);
        if (s->unmapping) {
            forget_locked(s);
            continue;
        }
        insert_freed_locked(s, PM_SPAN_FREE);
    }
}
