/* central.c — one free list per size class, shared by all threads.
 * Objects move to and from thread caches in chains of up to a batch, which
 * park in `slots` (a transfer cache: at most 64 KiB per class of up to
 * 1 KiB, 16 KiB or a quarter of those out per larger class, see
 * park_limit): a put pushes its chain, or joins a
 * short one to the newest slot while that stays within a batch; a get of
 * n takes the newest slots whole while they fit and the first objects of
 * the next, except that a short newest chain over one of n gives way to
 * it and moves down into its place.  So a batch moves
 * between threads in O(1) (the producer/consumer path), and a dead
 * thread's short lists go to the next thread that asks instead of being
 * walked back into their spans and carved out again (bench/threadchurn,
 * bench/prodcons).  What the slots cannot hold goes back into
 * its span, found through the page map; a span whose objects have all come
 * back returns to the page heap, except that a class above 1 KiB keeps
 * up to PM_KEEP_BYTES of such empty spans on its list (see kept_max)
 * while it uses them (pm_central_tick) and until malloc_trim;
 * an idle class's slots go back to their floor (park_max) then too.
 * Lock: one per class (pm_central_of(c)->lock).  Must never call the page heap
 * (which may make syscalls) while holding it: new spans are fetched and
 * empty spans returned after the lock is dropped. */
#include "pm_internal.h"

/* The classes' structs, in the order of their first use: a program uses
 * a few of the ~100 classes, and packed this way the used structs share a
 * few pages instead of touching most of the array.  slot_of[cls] is 1 +
 * the struct's index, 0 until the class is first used; assigned under
 * assign_lock, which the fork handler takes before the structs. */
PM_SPARSE_BSS static pm_central_t centrals[PM_CLASS_MAX];
static _Atomic uint8_t slot_of[PM_CLASS_MAX];
static _Atomic unsigned nassigned; /* written under assign_lock; pm_central_tick reads it without */
static pm_lock_t assign_lock = PM_LOCK_INIT;

pm_central_t *pm_central_find(unsigned cls)
{
    unsigned slot = atomic_load_explicit(&slot_of[cls], memory_order_acquire);
    return slot ? &centrals[slot - 1] : NULL;
}

pm_central_t *pm_central_of(unsigned cls)
{
    pm_central_t *c = pm_central_find(cls);
    if (PM_LIKELY(c != NULL)) return c;
    pm_lock(&assign_lock);
    unsigned slot = atomic_load_explicit(&slot_of[cls], memory_order_relaxed);
    if (!slot) {
        slot = pm_relaxed_load(&nassigned) + 1;
        atomic_store_explicit(&slot_of[cls], (uint8_t)slot, memory_order_release);
        atomic_store_explicit(&nassigned, slot, memory_order_release);
    }
    pm_unlock(&assign_lock);
    return &centrals[slot - 1];
}

/* What the slots of one class may hold, full batches and short chains
 * alike.  Parked objects are memory no other class can use.  A class of
 * up to 1 KiB parks up to 64 KiB: several batches, which is what lets
 * batches move between threads in O(1) (bench/prodcons, larson).  A
 * larger class parks up to 16 KiB, or a quarter of the objects it has
 * out, within 1 MiB (park_limit): a program that keeps many medium
 * blocks live moves batches of them in O(1) as tcmalloc's transfer cache
 * does, where walking them into their spans and out again was a third of
 * bench/mixed -m medium's allocator work; and a class the program has
 * moved on from, or that is idle, parks 16 KiB again, as one touching many
 * medium classes would otherwise hold parked objects in each
 * (test_central_parks_in_proportion, test_central_partial_slots). */
#define PM_PARK_SMALL ((size_t)64 * 1024)
#define PM_PARK_LARGE ((size_t)16 * 1024)
#define PM_PARK_LARGE_CAP ((size_t)1024 * 1024)
#define PM_PARK_OUT_SHARE 4 /* parked <= out / PM_PARK_OUT_SHARE above PM_PARK_LARGE */
#define PM_PARK_SMALL_MAX 1024 /* largest class with PM_PARK_SMALL */

/* Empty spans a class above PM_PARK_SMALL_MAX keeps on its list: as many
 * as it has in use, within PM_KEEP_BYTES at least and PM_KEEP_MAX_BYTES
 * at most (see keep_limit).  A medium class's span holds 1-11 objects, so
 * a malloc/free pair of it emptied and re-made a span nearly every time:
 * page-heap lock, coalescing, split, page-map writes, and objects that
 * landed on pages never touched before.  A kept span is reused whole, at
 * the same addresses (test_central_keeps_empty_span,
 * test_central_keeps_in_proportion).  bench/mixed -m medium -n 3000000:
 * 1.63 s and 223 MB peak RSS with 256 KiB a class, 1.03 s and 56 MB with
 * as many as in use (tcmalloc 0.62 s, 133 MB). */
#define PM_KEEP_BYTES ((size_t)256 * 1024)
#define PM_KEEP_MAX_BYTES ((size_t)16 << 20)
/* Ticks (pm_central_tick, up to 8 a second) without a get or put after
 * which a class gives its kept spans back: an idle program still returns
 * them, as the page heap returns a span unused for a second. */
#define PM_KEEP_IDLE_TICKS 8

static inline void *span_base(const pm_span_t *s) { return (void *)(s->page << PM_PAGE_SHIFT); }

/* The debug build's test of a link in span s's free list: an object cut
 * from s (a link into another span is as corrupt as a wild one). */
static int cut_from(const pm_span_t *s, const void *o)
{
    return (uintptr_t)o >= s->page << PM_PAGE_SHIFT && pm_span_cut_object(s, o);
}

/* Objects are taken from the head of the nonempty list.  Nearly full
 * spans go to the head and nearly empty ones to the tail, so allocation
 * fills the busy spans and the sparse ones get a chance to empty and go
 * back to the page heap (this halves the footprint of realloc-heavy
 * programs whose blocks drift through the size classes). */
static void link_span(pm_central_t *c, pm_span_t *s, int at_tail)
{
    pm_span_t *after = at_tail ? c->nonempty.prev : &c->nonempty;
    s->next = after->next;
    s->prev = after;
    after->next->prev = s;
    after->next = s;
    s->on_list = 1;
}

static void unlink_span(pm_span_t *s)
{
    s->prev->next = s->next;
    s->next->prev = s->prev;
    s->on_list = 0;
}

/* c->kept is written under c's lock, and read without it by
 * pm_central_tick to skip classes: relaxed atomics for both.  kept_low
 * follows the fewest since the last tick (kept_fall; see pm_central_tick). */
static inline void kept_set(pm_central_t *c, uint32_t n) { __atomic_store_n(&c->kept, n, __ATOMIC_RELAXED); }

/* c->kept fell to n. */
static inline void kept_fall(pm_central_t *c, uint32_t n)
{
    kept_set(c, n);
    if (n < c->kept_low) c->kept_low = n;
}

/* First use of a class, under its lock. */
static void lock_central(pm_central_t *c, unsigned cls)
{
    pm_lock(&c->lock);
    if (PM_LIKELY(c->nonempty.next != NULL)) return;
    c->nonempty.next = c->nonempty.prev = &c->nonempty;
    size_t size = pm_class_size[cls];
    c->cls = (uint8_t)cls;
    c->park_max = (uint32_t)((size <= PM_PARK_SMALL_MAX ? PM_PARK_SMALL : PM_PARK_LARGE) / size);
    c->park_cap = size <= PM_PARK_SMALL_MAX ? c->park_max : (uint32_t)(PM_PARK_LARGE_CAP / size);
    size_t slots = c->park_cap / pm_class_batch[cls];
    c->max_slots = (uint32_t)(slots < 1 ? 1 : slots > PM_MAX_SLOTS ? PM_MAX_SLOTS : slots);
    size_t span = (size_t)pm_class_pages[cls] << PM_PAGE_SHIFT;
    c->kept_max = size <= PM_PARK_SMALL_MAX ? 0 : span >= PM_KEEP_BYTES ? 1 : (uint32_t)(PM_KEEP_BYTES / span);
    c->kept_cap = size <= PM_PARK_SMALL_MAX ? 0 : (uint32_t)(PM_KEEP_MAX_BYTES / span);
}

/* How many objects c's slots may hold: park_max, or a quarter of the
 * objects out, within park_cap.  Under c's lock. */
static inline uint64_t park_limit(const pm_central_t *c)
{
    uint64_t n = c->out / PM_PARK_OUT_SHARE;
    if (n <= c->park_max) return c->park_max;
    return n < c->park_cap ? n : c->park_cap;
}

/* How many empty spans c may keep: as many as it has in use (so a class
 * holds at most twice its live spans), kept_max at least, kept_cap at
 * most.  Under c's lock. */
static inline uint64_t keep_limit(const pm_central_t *c)
{
    uint64_t in_use = c->spans - c->kept, n = in_use > c->kept_max ? in_use : c->kept_max;
    return n < c->kept_cap ? n : c->kept_cap;
}

/* Room: beyond keep_limit, a class may keep empty spans while it owns no
 * more than it had in use at once since the last tick, so a batch made and
 * freed whole comes back without the page heap; one budget for all
 * classes, since a class's spans serve no other (doc/design.md;
 * test_central_room_keeps_batch, test_central_room_bounded). */
static _Atomic size_t room_bytes;

static inline size_t span_bytes(unsigned cls) { return (size_t)pm_class_pages[cls] << PM_PAGE_SHIFT; }

/* Whether c may keep one more empty span on the room budget, and if so
 * charges it.  Under c's lock. */
static int room_take(pm_central_t *c)
{
    if (c->spans > c->in_use_high || c->kept >= c->kept_cap) return 0;
    size_t b = span_bytes(c->cls), have = atomic_load_explicit(&room_bytes, memory_order_relaxed);
    do {
        if (have + b > PM_ROOM_BYTES) return 0;
    } while (!atomic_compare_exchange_weak_explicit(&room_bytes, &have, have + b, memory_order_relaxed,
                                                    memory_order_relaxed));
    c->room_n++;
    return 1;
}

/* Gives n of c's room spans (at most all) back to the budget. */
static void room_give(pm_central_t *c, uint32_t n)
{
    if (n > c->room_n) n = c->room_n;
    if (!n) return;
    atomic_fetch_sub_explicit(&room_bytes, n * span_bytes(c->cls), memory_order_relaxed);
    c->room_n -= n;
}

/* After c->kept fell: no more room spans than kept ones. */
static void room_fit(pm_central_t *c)
{
    if (c->room_n > c->kept) room_give(c, c->room_n - c->kept);
}

/* A fresh span for class cls, with every page mapped to it.  Its pages'
 * class words stay 0 until the carve reaches them (cut_pages), so a free
 * of an object no malloc was given, on a page not reached yet, misses
 * free's fast path and meets the owner check. */
static pm_span_t *new_span(unsigned cls)
{
    pm_span_t *s = pm_pageheap_alloc(pm_class_pages[cls]);
    if (!s) return NULL;
    s->cls = (uint8_t)cls;
    s->capacity = (uint32_t)((s->npages << PM_PAGE_SHIFT) / pm_class_size[cls]);
    for (size_t i = 0; i < s->npages; i++) pm_pagemap_set_span(s->page + i, s);
    return s;
}

/* Objects [from, to) of s were just cut: the pages from the one where
 * object `from` starts to the one where object `to - 1` starts get their
 * class word (an OR, which keeps a sampled flag already there).  A page
 * among them where no object starts (inside a long object) may be marked
 * or not, depending on the batches; free's offset test fails there anyway. */
static void cut_pages(pm_span_t *s, unsigned cls, uint32_t from, uint32_t to)
{
    size_t size = pm_class_size[cls];
    size_t first = ((size_t)from * size) >> PM_PAGE_SHIFT, last = ((size_t)(to - 1) * size) >> PM_PAGE_SHIFT;
    for (size_t i = first; i <= last; i++) pm_pagemap_add_class(s->page + i, i, (uint8_t)cls);
}

void *pm_central_get(unsigned cls, uint32_t n, uint32_t *got)
{
    pm_central_t *c = pm_central_of(cls);
    size_t size = pm_class_size[cls];
    void *chain = NULL;
    uint32_t k = 0;
    int fresh = 0;
    lock_central(c, cls);
    c->busy = 1;
    if (c->nslots) {
        /* Parked chains, newest first: each one whole while it fits, then
         * the first objects of the next.  A whole first chain is O(1) (the
         * batch transfer); anything else walks the objects it takes.  A
         * short newest chain over one of n trades places with it first:
         * taking the short one and the front of the next left that one's
         * rest on top, short, for every later get to do the same
         * (test_central_partial_slots). */
        uint32_t newest = c->nslots - 1;
        if (newest && c->slot_n[newest] < n && c->slot_n[newest - 1] == n) {
            void *short_chain = c->slots[newest];
            c->slots[newest] = c->slots[newest - 1];
            c->slots[newest - 1] = short_chain;
            c->slot_n[newest - 1] = c->slot_n[newest];
            c->slot_n[newest] = (uint8_t)n;
        }
        while (k < n && c->nslots) {
            uint32_t top = c->nslots - 1, have = c->slot_n[top];
            uint32_t take = have < n - k ? have : n - k;
            void *part = c->slots[top];
            void *last = part; /* part's take-th object, if needed */
            if (take < have || chain)
                for (uint32_t i = 1; i < take; i++) {
                    last = pm_link_next(last, 0);
                    if (pm_config_debug && !pm_is_carved_object(last, cls)) pm_bad_link(0, last);
                }
            if (take < have) {
                c->slots[top] = pm_link_next(last, 0);
                c->slot_n[top] = (uint8_t)(have - take);
                pm_link_set(last, NULL);
            } else {
                c->nslots = top;
            }
            if (chain) pm_link_set(last, chain);
            chain = part;
            k += take;
        }
        c->parked -= k;
        goto handed;
    }
    while (k < n) {
        pm_span_t *s = c->nonempty.next;
        if (s == &c->nonempty) {
            /* Short rather than a fresh span when the class's old spans
             * gave something: the thread comes back when it has used these,
             * and by then frees may have refilled the old spans, so no span
             * is carved just to round a refill up (bench/threadchurn's peak
             * RSS).  Once this get has opened a fresh span (the class is
             * growing), it may open more. */
            if (k && !fresh) break;
            fresh = 1;
            pm_unlock(&c->lock);
            s = new_span(cls);
            pm_lock(&c->lock);
            if (!s) break;
            link_span(c, s, 1);
            c->spans++;
            c->span_free += s->capacity;
            continue;
        }
        uint32_t before = k;
        /* a kept span in use again; not a fresh one (nothing carved yet),
         * which a put may have queued behind kept spans while this get
         * had the lock dropped for new_span */
        if (s->allocated == 0 && s->carved && c->kept) {
            kept_fall(c, c->kept - 1);
            room_give(c, 1);
        }
        while (k < n && s->freelist) {
            void *o = s->freelist;
            if (pm_config_debug && !cut_from(s, o)) pm_bad_link(0, o);
            s->freelist = pm_link_next(o, 0);
            pm_link_set(o, chain);
            chain = o;
            k++;
        }
        uint32_t cut = s->carved, m = s->capacity - cut < n - k ? s->capacity - cut : n - k;
        if (m) {
            /* last object first, so the chain hands them out in address
             * order: a program that walks its blocks in the order it made
             * them reads ascending lines the prefetcher follows
             * (test_central_carves_in_order) */
            char *base = span_base(s); /* the stores below may alias s and the key */
            uintptr_t key = pm_guard.key;
            for (uint32_t i = cut + m; i-- > cut;) {
                void *o = base + (size_t)i * size;
                pm_link_set(o, chain);
                pm_key_store(o, key); /* free, as far as free can tell, until handed out */
                chain = o;
            }
            /* read without the lock by the owner check (pm_span_cut_object):
             * set once their keys are, so a free of one of them before it
             * is handed out finds it free */
            __atomic_store_n(&s->carved, cut + m, __ATOMIC_RELAXED);
            k += m;
            cut_pages(s, cls, cut, s->carved);
        }
        s->allocated += k - before;
        if (!s->freelist && s->carved == s->capacity) unlink_span(s);
    }
    c->span_free -= k;
    if (c->spans - c->kept > c->in_use_high) c->in_use_high = c->spans - c->kept;
handed:
    c->out += k;
    pm_unlock(&c->lock);
    *got = k;
    return chain;
}

/* Gives spans that emptied (linked through `next`) back to the page heap;
 * never under a central lock. */
static void free_spans(pm_span_t *empty)
{
    while (empty) {
        pm_span_t *s = empty;
        empty = s->next;
        pm_pagemap_set_class(s->page, s->npages, 0);
        pm_pageheap_free(s);
    }
}

/* Puts a chain of n objects back into their spans, unlocks c, and gives
 * the spans that became empty back to the page heap. */
/* Span s (off c's list) leaves class c: pushed on `empty`, the chain of
 * spans for free_spans once c's lock is dropped; returns the new head. */
static pm_span_t *leave_locked(pm_central_t *c, pm_span_t *s, pm_span_t *empty)
{
    c->spans--;
    c->span_free -= s->capacity;
    s->next = empty;
    return s;
}

static pm_span_t *unkeep_locked(pm_central_t *c, uint64_t keep, pm_span_t *empty);

/* Puts a chain of n objects back into their spans; the spans that leave
 * the class go on `empty` (see leave_locked), the new head returned. */
static pm_span_t *home_locked(pm_central_t *c, unsigned cls, void *chain, uint32_t n, pm_span_t *empty)
{
    c->span_free += n;
    /* runs are looked for where the chain starts with one (a chain a
     * thread freed in order), not in one freed at random */
    int runs = !pm_config_debug && n > 1 && (((uintptr_t)chain ^ (uintptr_t)pm_link_get(chain)) >> PM_PAGE_SHIFT) == 0;
    while (chain) {
        void *o = chain, *last = o;
        if (pm_config_debug && !pm_is_carved_object(o, cls)) pm_bad_link(1, o);
        chain = pm_link_next(o, 1);
        pm_span_t *s = pm_pagemap_span((uintptr_t)o >> PM_PAGE_SHIFT);
        /* every object of the span home already: o was freed twice */
        if (PM_UNLIKELY(s->allocated == 0)) pm_guard_double_free("free()", o);
        /* the objects after o on its page go home with it, their links
         * kept (test_central_homes_runs); never more than are out, so a
         * cycle still ends at the check above */
        uint32_t m = 1;
        if (runs)
            while (chain && ((uintptr_t)chain ^ (uintptr_t)o) >> PM_PAGE_SHIFT == 0 && m < s->allocated) {
                last = chain;
                chain = pm_link_next(last, 1);
                m++;
            }
        /* a block already home in its span: freed twice (the debug build
         * walks the span's free objects, each link checked first and the
         * walk bounded by the span's capacity: a cycle is corruption too) */
        if (pm_config_debug) {
            uint32_t seen = 0;
            for (void *q = s->freelist; q; q = pm_link_next(q, 1)) {
                if (q == o) pm_guard_double_free("free()", o);
                if (++seen > s->capacity || !cut_from(s, q)) pm_bad_link(1, q);
            }
        }
        pm_link_set(last, s->freelist);
        s->freelist = o;
        s->allocated -= m;
        if (s->allocated == 0) {
            if (s->on_list) unlink_span(s);
            if (c->kept < keep_limit(c) || room_take(c)) { /* kept for the next get, last in line */
                kept_set(c, c->kept + 1);
                link_span(c, s, 1);
            } else {
                empty = leave_locked(c, s, empty);
            }
            /* fewer in use: the kept spans past the bound are charged to
             * the room while it lasts, or go, so a class the program has
             * moved on from keeps kept_max (strings grown through the
             * classes by realloc, bench/realloc) */
            uint64_t limit = keep_limit(c);
            while (c->kept > limit + c->room_n && room_take(c)) {}
            if (c->kept > limit + c->room_n) empty = unkeep_locked(c, limit + c->room_n, empty);
        } else if (s->trimming) {
            continue; /* held by malloc_trim, which links it back */
        } else if (!s->on_list) {
            /* at the head, or the tail if the run took it down to a
             * quarter of its capacity out after its first object, as the
             * next branch would have one object at a time (m > 1 only
             * spares a single object the division) */
            link_span(c, s, m > 1 && s->capacity / 4 - s->allocated < m - 1);
        } else if (s->capacity / 4 - s->allocated < m && s->next != &c->nonempty) {
            /* from above a quarter of its capacity out to at most that
             * (unsigned: no wrap past it): to the tail */
            unlink_span(s);
            link_span(c, s, 1);
        }
    }
    return empty;
}

static void return_to_spans_locked(pm_central_t *c, unsigned cls, void *chain, uint32_t n)
{
    pm_span_t *empty = home_locked(c, cls, chain, n, NULL);
    pm_unlock(&c->lock);
    free_spans(empty);
}

/* Sends c's oldest parked chains home until the slots hold at most
 * `limit` objects; returns the new head of `empty`. */
static pm_span_t *unpark_locked(pm_central_t *c, unsigned cls, uint64_t limit, pm_span_t *empty)
{
    uint32_t gone = 0;
    while (c->parked > limit && gone < c->nslots) {
        uint32_t n = c->slot_n[gone];
        c->parked -= n;
        empty = home_locked(c, cls, c->slots[gone++], n, empty);
    }
    if (gone) {
        c->nslots -= gone;
        for (uint32_t i = 0; i < c->nslots; i++) {
            c->slots[i] = c->slots[i + gone];
            c->slot_n[i] = c->slot_n[i + gone];
        }
    }
    return empty;
}

void pm_central_put(unsigned cls, void *chain, uint32_t n)
{
    pm_central_t *c = pm_central_of(cls);
    uint32_t batch = pm_class_batch[cls];
    void *last = NULL;
    if (n < batch) { /* found before locking: a short chain may join the newest slot */
        last = chain;
        for (uint32_t i = 1; i < n; i++) last = pm_link_next(last, 1);
    }
    lock_central(c, cls);
    c->busy = 1;
    c->out -= n;
    /* a chain of up to a batch parks while the class's parked objects stay
     * within park_limit (a dead thread's one 200 KiB block of a class with
     * few out goes back to the page heap, not into a slot) */
    uint64_t limit = park_limit(c);
    int fits = n <= batch && c->parked + n <= limit;
    uint32_t top = c->nslots - 1;
    if (fits && last && c->nslots && c->slot_n[top] + n <= batch) {
        pm_link_set(last, c->slots[top]); /* joins the newest slot */
        c->slots[top] = chain;
        c->slot_n[top] = (uint8_t)(c->slot_n[top] + n);
    } else if (fits && c->nslots < c->max_slots) {
        c->slots[c->nslots] = chain;
        c->slot_n[c->nslots++] = (uint8_t)n;
    } else {
        /* fewer out than when these parked: the oldest chains go home too */
        pm_span_t *empty = c->parked > limit ? unpark_locked(c, cls, limit, NULL) : NULL;
        empty = home_locked(c, cls, chain, n, empty);
        pm_unlock(&c->lock);
        free_spans(empty);
        return;
    }
    c->parked += n;
    /* parked past the floor: the idle tick looks at this class */
    if (c->parked > c->park_max && !__atomic_load_n(&c->deep, __ATOMIC_RELAXED))
        __atomic_store_n(&c->deep, 1, __ATOMIC_RELAXED);
    pm_unlock(&c->lock);
}

/* Takes c's kept empty spans off its list down to `keep` (0: every empty
 * span, a fresh one not carved yet too) onto `empty` (see leave_locked).
 * Kept spans wait last in line: the walk starts at the tail. */
static pm_span_t *unkeep_locked(pm_central_t *c, uint64_t keep, pm_span_t *empty)
{
    for (pm_span_t *s = c->nonempty.prev, *prev; s != &c->nonempty && (!keep || c->kept > keep); s = prev) {
        prev = s->prev;
        if (s->allocated || (keep && !s->carved)) continue;
        unlink_span(s);
        if (s->carved && c->kept) kept_set(c, c->kept - 1);
        empty = leave_locked(c, s, empty);
    }
    kept_fall(c, keep ? c->kept : 0);
    room_fit(c);
    return empty;
}

/* Moves every parked batch back into its spans, so that spans whose
 * objects are all home can return to the page heap, and gives the kept
 * empty spans back (malloc_trim). */
void pm_central_drain(void)
{
    for (unsigned cls = 1; cls < pm_class_count; cls++) {
        pm_central_t *c = pm_central_find(cls);
        if (!c) continue;
        pm_lock(&c->lock);
        while (c->nslots) {
            uint32_t top = --c->nslots, n = c->slot_n[top];
            c->parked -= n;
            return_to_spans_locked(c, cls, c->slots[top], n);
            pm_lock(&c->lock);
        }
        pm_span_t *empty = c->nonempty.next ? unkeep_locked(c, 0, NULL) : NULL;
        pm_unlock(&c->lock);
        free_spans(empty);
    }
}

/* Called with the page heap's tick (at most 8 times a second): a class
 * with kept spans and no get or put for PM_KEEP_IDLE_TICKS ticks gives
 * them back (after its parked chains, so the spans those empty go too),
 * and a busy one the kept spans no get took since the last tick (kept_low
 * of them): a class whose use fell from a peak kept as many empty spans
 * as it had in use for as long as it was touched once a second, and
 * bench/strings held 35 MB of them over 107 MB in use
 * (test_central_tick_returns_unused_kept).  The unlocked look at `kept`
 * only skips classes. */
void pm_central_tick(void)
{
    for (unsigned i = 0; i < pm_relaxed_load(&nassigned); i++) {
        pm_central_t *c = &centrals[i];
        if (!__atomic_load_n(&c->kept, __ATOMIC_RELAXED) && !__atomic_load_n(&c->deep, __ATOMIC_RELAXED)) continue;
        pm_lock(&c->lock);
        pm_span_t *empty = NULL;
        uint32_t unused = 0; /* kept spans to give back (UINT32_MAX: all) */
        if (c->busy) {
            c->busy = 0;
            c->idle_ticks = 0;
            unused = c->kept_low;
        } else if (++c->idle_ticks >= PM_KEEP_IDLE_TICKS) {
            empty = unpark_locked(c, c->cls, c->park_max, NULL);
            __atomic_store_n(&c->deep, 0, __ATOMIC_RELAXED);
            unused = UINT32_MAX;
        }
        if (unused) empty = unkeep_locked(c, unused < c->kept ? c->kept - unused : 0, empty);
        c->kept_low = c->kept;
        c->in_use_high = c->spans - c->kept;
        pm_unlock(&c->lock);
        free_spans(empty);
    }
}

/* Releases the whole OS pages in [lo, hi) (mask: the OS page - 1). */
static uint64_t release_inside(uintptr_t lo, uintptr_t hi, uintptr_t mask)
{
    lo = (lo + mask) & ~mask;
    hi &= ~mask;
    if (hi <= lo || pm_os_release((void *)lo, hi - lo) != 0) return 0;
    return hi - lo;
}

/* Gives the spans malloc_trim held (c->trim_held) their objects back,
 * behind any freed into them meanwhile, and links them into the nonempty
 * list again; with `empty`, a span whose objects are now all home goes on
 * *empty for the page heap instead (in a child after fork, from the fork
 * handler, it stays listed: an empty span on the list is still sound). */
static void give_back_locked(pm_central_t *c, pm_span_t **empty)
{
    while (c->trim_held) {
        pm_span_t *s = c->trim_held;
        c->trim_held = s->next;
        if (s->held && !s->freelist) {
            s->freelist = s->held;
        } else if (s->held) {
            void *last = s->freelist;
            for (void *next; (next = pm_link_next(last, 1)) != NULL;) last = next;
            pm_link_set(last, s->held);
        }
        s->held = NULL;
        __atomic_store_n(&s->carved, s->held_carved, __ATOMIC_RELAXED);
        s->allocated -= s->held_pin;
        s->trimming = 0;
        if (s->allocated == 0 && empty) {
            *empty = leave_locked(c, s, *empty);
        } else {
            link_span(c, s, s->allocated <= s->capacity / 4);
        }
    }
}

/* malloc_trim: gives back the OS pages that lie wholly inside the free
 * objects of spans still in use (all but the page holding an object's
 * link), and the uncarved tails of those spans, as glibc's malloc_trim
 * releases the pages inside its free chunks.  Only classes above one OS
 * page can have such pages.  Per class: under the lock, every span on the
 * nonempty list moves to c->trim_held, its free list into `held`, and its
 * free objects and tail count as allocated (so no thread can be handed an
 * object whose pages are going, and the span cannot empty meanwhile); the
 * madvises run without the lock; under the lock again the spans get their
 * objects back, and one that is now empty goes to the page heap.  Returns
 * the bytes released. */
uint64_t pm_central_release_free(void)
{
    size_t page = pm_os_page_size();
    uint64_t released = 0;
    for (unsigned cls = 1; cls < pm_class_count; cls++) {
        size_t size = pm_class_size[cls];
        if (size <= page) continue;
        pm_central_t *c = pm_central_find(cls);
        if (!c) continue;
        pm_lock(&c->lock);
        if (!c->nonempty.next || c->trim_held) { /* never used, or another trim */
            pm_unlock(&c->lock);
            continue;
        }
        kept_fall(c, 0); /* kept spans are held too, and freed when given back */
        room_fit(c);
        while (c->nonempty.next != &c->nonempty) {
            pm_span_t *s = c->nonempty.next;
            unlink_span(s);
            s->held = s->freelist;
            s->held_pin = s->capacity - s->allocated;
            s->held_carved = s->carved;
            s->freelist = NULL;
            __atomic_store_n(&s->carved, s->capacity, __ATOMIC_RELAXED);
            s->allocated = s->capacity;
            s->trimming = 1;
            s->next = c->trim_held; /* off the nonempty list: the link is free */
            c->trim_held = s;
        }
        pm_span_t *held = c->trim_held;
        pm_unlock(&c->lock);
        /* nothing taken: c->trim_held may by now be another trim's */
        if (!held) continue;
        for (pm_span_t *s = held; s; s = s->next) {
            char *base = span_base(s);
            char *carved_end = base + (size_t)s->held_carved * size;
            for (char *o = s->held; o; o = pm_link_get(o)) {
                /* a link a stray write changed: stop here rather than
                 * release someone else's pages (the allocation that
                 * reaches it reports it) */
                if (o < base || o >= carved_end || (size_t)(o - base) % size) break;
                /* past the link and the free key */
                released += release_inside((uintptr_t)o + 2 * sizeof(void *), (uintptr_t)o + size, page - 1);
            }
            released += release_inside((uintptr_t)carved_end,
                                       (uintptr_t)(base + (s->npages << PM_PAGE_SHIFT)), page - 1);
        }
        pm_span_t *empty = NULL;
        pm_lock(&c->lock);
        give_back_locked(c, &empty);
        pm_unlock(&c->lock);
        free_spans(empty);
    }
    return released;
}

/* The fork handler: assign_lock, then the structs in use, in their
 * order (fixed: a struct's place never changes). */
void pm_central_lock_all(void)
{
    pm_lock(&assign_lock);
    for (unsigned i = 0; i < nassigned; i++) pm_lock(&centrals[i].lock);
}

void pm_central_unlock_all(int child)
{
    for (unsigned i = nassigned; i-- > 0;) {
        /* a trim the fork interrupted (its thread is not in the child) */
        if (child) give_back_locked(&centrals[i], NULL);
        if (child) pm_lock_reset(&centrals[i].lock);
        else pm_unlock(&centrals[i].lock);
    }
    if (child) pm_lock_reset(&assign_lock);
    else pm_unlock(&assign_lock);
}
