/* pm_internal.h — internal prototypes, grouped under the .c that owns them,
 * and the inlines other files share (size-class lookup, page-map lookup,
 * the sampler's countdown); the malloc and free fast paths are in
 * pm_fastpath.h.  Calls go down the ladder:
 *   override → alloc → tcache → central → pageheap → pagemap/meta → os
 * except at the documented entry points (doc/design.md, "Calls go down"):
 * pm_init from the first allocation and the public calls, the profiler's
 * pm_sampler_* and pm_sites_* on the slow path, the fork and thread-exit
 * hooks. */
#ifndef PM_INTERNAL_H
#define PM_INTERNAL_H

#include "pm.h"
#include "pm_os.h"
#include "pm_types.h"
#include "pm_fmt.h"
#include "pm_math.h"
#include "../include/profmalloc.h"

#include <stddef.h>
#include <stdint.h>

/* Everything declared below is internal to the library: hidden, the fast
 * paths reach its tables directly (%rip-relative), not through the GOT. */
#pragma GCC visibility push(hidden)

/* ---- fmt.c: pm_fmt.h ------------------------------------------------ */

/* ---- options.c ------------------------------------------------------- */
typedef struct pm_options {
    uint64_t sample_rate;      /* PROFMALLOC_SAMPLE_RATE */
    const char *dump_pattern;  /* PROFMALLOC_DUMP, or NULL */
    int dump_empty;            /* PROFMALLOC_DUMP_EMPTY=1 */
    int unwind_fp;             /* PROFMALLOC_UNWIND=fp */
    uint64_t tcache_bytes;     /* PROFMALLOC_TCACHE_BYTES */
    int tcache_bytes_set;      /* ... given: the pool, whatever the threads (tcache.c) */
    uint64_t release_bytes;    /* PROFMALLOC_RELEASE_BYTES */
    int release_bytes_set;     /* ... given: a fixed cap (pageheap.c rule 3) */
    int verbose;               /* PROFMALLOC_VERBOSE */
    int keep_deepbind;         /* PROFMALLOC_KEEP_DEEPBIND=1 (deepbind.c) */
    int sample_rate_set;       /* PROFMALLOC_SAMPLE_RATE given */
    /* leak hunting (pm_hunt.h); patterns NULL when not given */
    const char *dump_peak;     /* PROFMALLOC_DUMP_PEAK */
    const char *leaks;         /* PROFMALLOC_LEAKS: "1" stderr report, else a path */
    const char *dump_prefix;   /* PROFMALLOC_DUMP_PREFIX (triggers' files) */
    uint64_t every_bytes, every_inuse, every_seconds; /* PROFMALLOC_DUMP_EVERY_* */
    uint64_t dump_signal;      /* PROFMALLOC_DUMP_SIGNAL, 0: none */
    const char *timeline;      /* PROFMALLOC_TIMELINE */
    uint64_t timeline_interval_ms, timeline_max, timeline_keep, timeline_sites;
    uint64_t timeline_peak_seconds; /* a rise's sites at least this often */
    const char *heapprofile;   /* HEAPPROFILE (gperftools) */
    uint64_t hp_alloc_interval, hp_inuse_interval, hp_time_interval, hp_signal;
    const char *http_addr;     /* PROFMALLOC_HTTP, or NULL (prof_http.c) */
    const char *http_port_file;/* PROFMALLOC_HTTP_PORT_FILE, or NULL */
} pm_options_t;
extern pm_options_t pm_options;
void pm_options_load(void);
/* Row i of the options table for the docs generator (doc/gen_options.c):
 * name, doc (`code` marked) and default as text; -1 past the last row. */
int pm_options_row(size_t i, const char **name, const char **doc, char *def, size_t cap);

/* ---- meta.c: metadata from mmap, never malloc ------------------------ */
void *pm_meta_alloc(size_t size);       /* zeroed, 16-aligned, never freed */
uint64_t pm_meta_bytes(void);
void pm_meta_lock_all(void);
void pm_meta_unlock_all(int child);

/* ---- sizeclass.c ----------------------------------------------------- */
#define PM_CLASS_SLOTS (((PM_MAX_SMALL + 127) >> 7) + 120 + 1)
extern uint8_t pm_class_index[PM_CLASS_SLOTS];
extern uint32_t pm_class_size[PM_CLASS_MAX];
extern uint16_t pm_class_pages[PM_CLASS_MAX];
extern uint16_t pm_class_batch[PM_CLASS_MAX];
/* Indexed by a page's info byte (pagemap.c): ceil(2^64 / size) for a
 * small class without the sampled flag, so that n % size == 0 <=>
 * n * magic < magic (mod 2^64, n < 2^32); 0 for class 0 (not a small-object
 * page) and for every byte with PM_SAMPLED_PAGE set, where the same test
 * always fails.  Free's fast path thus checks the class and the object's
 * start with one load, one multiply and one compare. */
extern uint64_t pm_free_magic[256];
extern uint32_t pm_class_count;          /* classes are 1 .. pm_class_count-1 */
/* [log2(align) - 5][cls]: the first class from cls on whose size is a
 * multiple of align (32 .. PM_PAGE_SIZE), whose objects are then aligned
 * as spans start on pages; 0: none (memalign) */
#define PM_ALIGN_CLASSES (PM_PAGE_SHIFT - 4)
extern uint8_t pm_align_class[PM_ALIGN_CLASSES][PM_CLASS_MAX];
void pm_sizeclass_init(void);

PM_INLINE size_t pm_class_slot(size_t size)
{
    return PM_LIKELY(size <= 1024) ? (size + 15) >> 4 : (size + 127 + (120 << 7)) >> 7;
}
PM_INLINE unsigned pm_sizeclass_of(size_t size) /* size <= PM_MAX_SMALL */
{
    return pm_class_index[pm_class_slot(size)];
}

/* ---- pagemap.c: page number → span, and → size class ---------------- */
#define PM_LEAF_BITS (PM_ZONE_SHIFT - PM_PAGE_SHIFT)
#define PM_ROOT_BITS (PM_ADDR_BITS - PM_PAGE_SHIFT - PM_LEAF_BITS)
#define PM_SAMPLED_PAGE 0x80   /* info flag: a live sampled block is on this page */
/* info[page]: low byte = size class (0: not a small-object page) with the
 * PM_SAMPLED_PAGE flag; high byte = the page's index within its span, so
 * free can tell an object's start from an interior pointer. */
typedef struct pm_leaf {
    uint16_t info[1 << PM_LEAF_BITS];
    pm_span_t *span[1 << PM_LEAF_BITS];
} pm_leaf_t;
extern pm_leaf_t *_Atomic pm_pagemap_root[1 << PM_ROOT_BITS];

/* Leaves for pages [page, page+n) exist afterwards, or it returns -1. */
int pm_pagemap_ensure(uintptr_t page, size_t n);
/* The same with leaves mapped beforehand: spares[i] is set to NULL when
 * taken.  -1 only when more leaves are missing than spares were given. */
int pm_pagemap_ensure_from(uintptr_t page, size_t n, pm_leaf_t **spares, size_t nspares);
void pm_pagemap_set_span(uintptr_t page, pm_span_t *s);
void pm_pagemap_set_class(uintptr_t page, size_t n, uint8_t cls);
void pm_pagemap_mark_sampled(uintptr_t page, int on);
/* Sets a small span's page's class and index once the carve reaches it
 * (central.c), keeping its sampled flag. */
void pm_pagemap_add_class(uintptr_t page, size_t index, uint8_t cls);
uint64_t pm_pagemap_bytes(void);

/* The heap's first leaf and its root index (key, ~0 until set), written
 * once: free's fast path takes the leaf from here when the index matches,
 * with no load that waits on the block's address (pagemap.c). */
typedef struct {
    _Atomic uintptr_t key;
    pm_leaf_t *leaf; /* set (__atomic) before key, read after key matched */
} pm_leaf_hint_t;
extern pm_leaf_hint_t pm_leaf_hint;

PM_INLINE pm_leaf_t *pm_pagemap_leaf(uintptr_t page)
{
    return atomic_load_explicit(
        &pm_pagemap_root[(page >> PM_LEAF_BITS) & ((1u << PM_ROOT_BITS) - 1)],
        memory_order_acquire);
}
/* page's span in its leaf; relaxed: new_span maps a span's pages without
 * the page heap's lock (the page heap reads only a neighbour's first and
 * last, which it set to the same span before handing it out) */
PM_INLINE pm_span_t *pm_leaf_span(pm_leaf_t *leaf, uintptr_t page)
{
    return __atomic_load_n(&leaf->span[page & ((1u << PM_LEAF_BITS) - 1)], __ATOMIC_RELAXED);
}
PM_INLINE pm_span_t *pm_pagemap_span(uintptr_t page)
{
    if (page >> (PM_ADDR_BITS - PM_PAGE_SHIFT)) return NULL;
    pm_leaf_t *leaf = pm_pagemap_leaf(page);
    return leaf ? pm_leaf_span(leaf, page) : NULL;
}
/* a's page's info word (leaf: a's, not NULL); relaxed: a carve or the
 * profiler may be setting bits in it. */
PM_INLINE unsigned pm_page_info(const pm_leaf_t *leaf, uintptr_t a)
{
    return __atomic_load_n(&leaf->info[(a >> PM_PAGE_SHIFT) & ((1u << PM_LEAF_BITS) - 1)], __ATOMIC_RELAXED);
}
/* Whether address a starts an object of class cls on the page whose info
 * word is info (its page index in the span, above the class byte);
 * pm_free_magic is 0 for a class byte with PM_SAMPLED_PAGE set. */
PM_INLINE int pm_object_start(unsigned info, uintptr_t a, unsigned cls)
{
    uint64_t magic = pm_free_magic[cls];
    /* offset from the span's start: page index, then offset in page */
    uint64_t offset = ((uint64_t)(info >> 8) << PM_PAGE_SHIFT) | (a & (PM_PAGE_SIZE - 1));
    return offset * magic < magic;
}
/* Whether address a starts an object on an unflagged small-object page,
 * from its page's info word; *cls is the page's class byte.  Free's fast
 * path, realloc within a class and the slow free of a full list take a
 * block by it (test_alloc: test_realloc_in_place_by_page_info). */
PM_INLINE int pm_small_object_at(const pm_leaf_t *leaf, uintptr_t a, unsigned *cls)
{
    unsigned info = pm_page_info(leaf, a);
    *cls = info & 0xff;
    return pm_object_start(info, a, info & 0xff);
}
/* Whether p (at or past s's first page) starts an object that small span s
 * has cut, in use or free.  s->carved is read without the class's lock
 * (its writes under the lock are relaxed stores): it never drops below an
 * object already handed out (a trim raises it for a while). */
PM_INLINE int pm_span_cut_object(const pm_span_t *s, const void *p)
{
    uintptr_t off = (uintptr_t)p - (s->page << PM_PAGE_SHIFT);
    size_t size = pm_class_size[s->cls];
    return off % size == 0 && off / size < __atomic_load_n(&s->carved, __ATOMIC_RELAXED);
}
/* The same for any p, and a span of class cls: the debug build's check of
 * every link it follows (--enable-debug, doc/design.md). */
int pm_is_carved_object(const void *p, unsigned cls);
/* The debug build's report of a bad link met by malloc (in_free 0) or free. */
void pm_bad_link(int in_free, const void *link) __attribute__((noreturn, cold));

/* ---- pageheap.c: spans of pages, coalescing, release to the OS ------- */
pm_span_t *pm_pageheap_alloc(size_t npages);
/* npages, or up to roomy (>= npages) where the rest costs no resident
 * memory; pageheap.c says which run gives what (large.c, large_pages). */
pm_span_t *pm_pageheap_alloc_roomy(size_t npages, size_t roomy);
pm_span_t *pm_pageheap_alloc_aligned(size_t npages, size_t align_pages);
void pm_pageheap_free(pm_span_t *s);
/* Frees realloc's old copy of a moved block: kept resident, or its pages
 * returned to the OS first, as the policy says (pagerelease.c); fresh:
 * the new block came from the OS. */
void pm_pageheap_free_moved(pm_span_t *s, int fresh);
/* Frees a large block's span (or a shrink's tail); one of PM_HUGE_FREE or
 * more (glibc's largest mmap threshold) is kept resident, or its pages
 * returned to the OS first, as the policy says (pagerelease.c
 * pm_release_keep_huge_locked). */
#define PM_HUGE_FREE ((size_t)32 << 20)
void pm_pageheap_free_large(pm_span_t *s);
void pm_pageheap_free_released(pm_span_t *s); /* its pages returned to the OS first */
int pm_pageheap_extend(pm_span_t *s, size_t npages); /* 1: s grew in place */
/* Stretches of address space the heap holds, and the most that unmapping
 * may split it into (tests lower it). */
int64_t pm_pageheap_extents(void);
void pm_pageheap_set_max_extents(int64_t n);
int pm_pageheap_move(pm_span_t *s, size_t npages, int anywhere); /* elsewhere, with mremap: 1 done, 0 unchanged */
int pm_pageheap_resident_fit(size_t npages); /* 1: a resident free span has npages */
int pm_pageheap_shrink(pm_span_t *s, size_t npages); /* 1: s shrank */
void pm_pageheap_release_all(void);
int pm_pageheap_tick(void);              /* the release rules, at most 8 times a second; 1: ran */
void pm_pageheap_skip_time(uint64_t ns); /* tests: the page heap's clock jumps ahead */
int pm_pageheap_verify(void);            /* tests: 0 when the lists agree */

/* ---- pagerelease.c: which free pages go back to the OS, and when ------ */
typedef struct pm_heap_view { /* the page heap's state, in pages, under its lock */
    uint64_t now;             /* its clock */
    uint64_t in_use, free, released;
    uint64_t oldest_free_ns;  /* when the oldest resident free span became free (UINT64_MAX: none) */
    uint64_t grow_pages;      /* PM_RELEASE_GROWTH: the fresh pages about to be faulted in */
    int space_limited;        /* address space is scarce (pm_os_space_limited, at the last growth) */
} pm_heap_view_t;
typedef struct pm_release_plan { /* what the page heap picks (pageheap.c pick_plan_locked) */
    uint64_t aged_before;     /* resident free spans free since this or earlier, oldest first */
    uint64_t aged_pages;      /* ... this many pages at most (0: no bound) */
    uint64_t aged_floor;      /* ... while more resident free pages than this stay */
    uint64_t keep_pages;      /* then the longest, while more than this stay (UINT64_MAX: none) */
    uint64_t budget;          /* pages at most in all (0: no bound) */
    int long_only;            /* only runs long enough to be unmapped */
    int stale;                /* released runs free since stale_before are unmapped */
    uint64_t stale_before;
    int stale_edges;          /* ... and younger ones whose unmapping splits no mapping (an edge) */
} pm_release_plan_t;
enum { PM_RELEASE_FREE, PM_RELEASE_TICK, PM_RELEASE_GROWTH, PM_RELEASE_MOVE };
void pm_release_choose_locked(const pm_heap_view_t *v, int event, pm_release_plan_t *plan);
void pm_release_refused_locked(uint64_t now); /* the kernel kept pages it was asked to take */
/* 1: the old copy (pages) of a moved block stays; fresh: its new block came from the OS */
int pm_release_keep_moved_locked(const pm_heap_view_t *v, uint64_t pages, int fresh);
/* 1: a freed huge block (pages) stays resident */
int pm_release_keep_huge_locked(const pm_heap_view_t *v, uint64_t pages);
void pm_release_stale_full_locked(void);     /* a full batch of stale runs: look again soon */
int pm_release_tick_due(uint64_t now);       /* 1 at most 8 times a second */
uint64_t pm_release_decay_ns(void);

typedef struct pm_pageheap_stats {
    uint64_t mapped, free, released, in_use, large_in_use, large_requested;
    uint64_t meta; /* of mapped: pages turned into span structs */
    uint64_t large_count, contention;
} pm_pageheap_stats_t;
void pm_pageheap_stats(pm_pageheap_stats_t *out);
void pm_pageheap_lock_all(void);
void pm_pageheap_unlock_all(int child);

/* ---- central.c: per-class free lists, batches, one lock per class ---- */
pm_central_t *pm_central_of(unsigned cls);   /* the class's struct, set up at its first use */
pm_central_t *pm_central_find(unsigned cls); /* NULL while the class is unused */
/* Returns a chain of up to n (>= 1) objects linked through their first
 * word and sets *got, or returns NULL when memory is exhausted. */
void *pm_central_get(unsigned cls, uint32_t n, uint32_t *got);
void pm_central_put(unsigned cls, void *chain, uint32_t n);
void pm_central_drain(void);
void pm_central_tick(void);                /* kept empty spans nobody used go back */
/* Empty spans all classes together may keep beyond their in-use share, for
 * a class back to the most it had in use since the last tick (central.c). */
#define PM_ROOM_BYTES ((size_t)4 << 20)
uint64_t pm_central_release_free(void); /* malloc_trim; bytes released */
void pm_central_lock_all(void);
void pm_central_unlock_all(int child);

/* ---- tcache.c: per-thread caches ------------------------------------- */
extern PM_TLS pm_tcache_t pm_tls;
void pm_tcache_init(void);                 /* global part, at process init */
void pm_tcache_thread_begin(pm_tcache_t *t);  /* EMPTY -> NEW */
void pm_tcache_thread_start(pm_tcache_t *t);  /* NEW -> ACTIVE: registered, caching */
void pm_tcache_thread_exit(void *t);
void *pm_tcache_refill(pm_tcache_t *t, unsigned cls);  /* list empty */
/* A chain of got blocks of size < 64, starting with one whose cache lines
 * hold only the chain's blocks where it has one (a first refill). */
void *pm_tcache_own_line_first(void *chain, uint32_t got, size_t size);
void pm_tcache_overflow(pm_tcache_t *t, unsigned cls); /* list too long */
void pm_tcache_flush_all(pm_tcache_t *t);
void pm_tcache_tick(void);                 /* a release tick passed (alloc.c) */
void pm_tcache_idle_check(pm_tcache_t *t); /* halves lists idle for a second of ticks */
struct pm_unwind_memo_s;
/* the thread's stack-walk memo (pm_prof_unwind.h), NULL if it has none */
struct pm_unwind_memo_s *pm_tcache_memo(pm_tcache_t *t);
/* Asks every other thread to flush its cache at its next slow path (the
 * OS refused memory: alloc.c reclaim). */
void pm_tcache_flush_others(void);
/* The OS refused `bytes`: gives back what the allocator holds (the calling
 * thread's cache, the others' at their next slow path, the transfer slots,
 * every free page, released runs unmapped) and says whether trying again
 * may succeed: not for a request larger than all the heap holds (a
 * malloc(1 << 45) caught as an error would cost every warm free page each
 * time).  Takes and drops the allocator's locks: call it holding none. */
int pm_tcache_give_back(size_t bytes);
/* Adds each class's objects in the live threads' caches to counts[class]
 * and gives the number of live threads (racy reads of other threads'
 * lengths: a snapshot for reports). */
void pm_tcache_class_counts(uint64_t counts[PM_CLASS_MAX], uint64_t *threads);
/* How often grow_budget looked for budget to steal, and how many thread
 * caches it looked at (for tests). */
void pm_tcache_steal_work(uint64_t *walks, uint64_t *visits);
void pm_tcache_lock_all(void);
void pm_tcache_unlock_all(int child);

/* ---- prof_sampler.c: when to sample (the profiler's entry) ----------- */
#define PM_SAMPLE_RATE_DEFAULT ((uint64_t)512 * 1024)
/* A sample's weight, fixed point: how many blocks it stands for. */
#define PM_WEIGHT_SHIFT 8
#define PM_WEIGHT_ONE ((uint64_t)1 << PM_WEIGHT_SHIFT)
/* With no sampling (rate 0) the countdown still expires every
 * PM_TICK_BYTES; at any rate, the expiry after each PM_TICK_BYTES charged
 * runs the page heap's clock (pm_pageheap_tick, pm_sampler_tick_due). */
#define PM_TICK_BYTES ((int64_t)4 << 20)
/* pm_sampler_record's answer at such an expiry. */
#define PM_SAMPLE_TICK UINT64_MAX
uint64_t pm_sampler_rate(void);            /* the process-wide rate */
void pm_sampler_set_rate(uint64_t rate);   /* clamped to INT64_MAX */
void pm_sampler_thread_start(pm_sampler_t *s);
void pm_sampler_redraw(pm_sampler_t *s);   /* at once to the process rate */
/* The weight of a sample of size bytes at s's rate. */
uint64_t pm_sampler_weight(const pm_sampler_t *s, size_t size);
/* The countdown expired or the rate changed: pm_sampler_record's rest. */
uint64_t pm_sampler_record_slow(pm_sampler_t *s, size_t size);
/* The slow path (tcmalloc's Sampler::RecordAllocation): charges size
 * bytes and returns 0 while the countdown lasts; at its expiry draws the
 * next gap and returns this allocation's weight (PM_WEIGHT_ONE per
 * block), or PM_SAMPLE_TICK at rate 0.  Picks up a changed rate. */
PM_INLINE uint64_t pm_sampler_record(pm_sampler_t *s, size_t size)
{
    if (PM_LIKELY(s->rate == pm_sampler_rate()) && PM_LIKELY(s->countdown >= (int64_t)size)) {
        s->countdown -= (int64_t)size;
        return 0;
    }
    return pm_sampler_record_slow(s, size);
}
/* malloc's fast path: takes size off the countdown; nonzero while it lasts. */
PM_INLINE int pm_sampler_charge(pm_sampler_t *s, size_t size)
{
    s->countdown -= (int64_t)size;
    return s->countdown >= 0;
}
/* Whether PM_TICK_BYTES have been charged since it last said yes (samples
 * come every few hundred KiB; the release rules' clock is read per 4 MiB
 * at any rate: test_prof_sampler.c, test_sampler_tick_bytes). */
PM_INLINE int pm_sampler_tick_due(pm_sampler_t *s)
{
    if (s->tick_bytes < (uint64_t)PM_TICK_BYTES) return 0;
    s->tick_bytes = 0;
    return 1;
}
/* Gives back a charge the fast path made before falling to the slow path. */
PM_INLINE void pm_sampler_refund(pm_sampler_t *s, size_t size) { s->countdown += (int64_t)size; }
/* Next gap in bytes for mean `rate` (at most INT64_MAX); -1 (sample
 * everything) when rate is 1, PM_TICK_BYTES when 0. */
int64_t pm_sampler_next(uint64_t *rng, uint64_t rate);
uint64_t pm_sampler_seed(void);

/* ---- prof_sites.c: the sampled-site table (slow path only) ----------- */
/* p (size bytes) was just allocated at a sample point of this weight;
 * entry: the frame record the stack walk starts from (alloc.c
 * pm_alloc_slow), or 0 for the whole walk. */
void pm_sites_add(pm_tcache_t *t, void *p, size_t size, uint64_t weight, uintptr_t entry, unsigned cls);
/* p, owned by span s, is being freed and may be a sampled block. */
void pm_sites_remove(pm_span_t *s, void *p);
/* A class of a page or more starts at most one object per page, so a
 * flagged page names its sampled block alone, and the profiler finds its
 * record by address, without the span (test_prof_sites.c:
 * test_page_classes_hashed). */
PM_INLINE int pm_sites_by_address(unsigned cls) { return cls && pm_class_size[cls] >= PM_PAGE_SIZE; }
/* pm_sites_remove for such a class's block, from its address alone. */
void pm_sites_remove_by_address(void *p);
PM_INLINE int pm_sites_maybe_sampled(const pm_span_t *s, const void *p)
{
    if (s->cls == 0) return s->sample != NULL;
    uintptr_t page = (uintptr_t)p >> PM_PAGE_SHIFT;
    return (__atomic_load_n(&pm_pagemap_leaf(page)->info[page & ((1u << PM_LEAF_BITS) - 1)], __ATOMIC_RELAXED) &
            PM_SAMPLED_PAGE) != 0;
}
/* Frees of a small block that took a shard's lock and found no record
 * (tests: prof_sites.c's hashed counts). */
uint64_t pm_sites_locked_misses(void);
void pm_sites_init(void);
uint64_t pm_sites_live_samples(void);
uint64_t pm_sites_mapped_bytes(void); /* records and large tables (metadata) */
uint64_t pm_sites_inline_records(void); /* live records not in slabs */
uint64_t pm_sites_hashed_records(void); /* live records in the hash tables (tests) */
int pm_sites_sampled_any(void);
void pm_sites_lock_all(void);
void pm_sites_unlock_all(int child);

/* ---- prof_dump.c: the dump API, where profiles go (the profiler's top) - */
void pm_dump_at_exit(void);            /* PROFMALLOC_DUMP */
void pm_dump_unlock_all(int child);    /* a fork child resets the dump locks */

/* ---- alloc.c: the malloc family, fast paths inline below ------------- */
void *pm_alloc_slow(size_t size);
void *pm_alloc_slow_charged(size_t size); /* size <= PM_MAX_SMALL, countdown charged */
void pm_free_slow(void *p);
void *pm_malloc(size_t size);
void pm_free(void *p);
void *pm_calloc(size_t n, size_t size);
void *pm_realloc(void *p, size_t size);
void *pm_reallocarray(void *p, size_t n, size_t size);
void *pm_memalign(size_t align, size_t size);
int pm_posix_memalign(void **out, size_t align, size_t size);
void *pm_aligned_alloc(size_t align, size_t size);
void *pm_valloc(size_t size);
void *pm_pvalloc(size_t size);
size_t pm_usable_size(const void *p);
void pm_alloc_large_stats(uint64_t *bytes, uint64_t *requested, uint64_t *count);

/* ---- large.c: large blocks, and realloc's in-place strategies --------- */
void *pm_large_alloc(size_t size, size_t bytes, size_t align_pages, int zero);
void pm_large_free(pm_span_t *s);
void pm_large_free_moved(pm_span_t *s, const void *q);  /* realloc moved its block to q */
void pm_large_resized(pm_span_t *s, size_t size);       /* kept its pages; now asked `size` */
int pm_large_is_big(const pm_span_t *s);                 /* realloc doubles it and moves its pages */
int pm_large_shed_reserve(pm_span_t *s);                 /* 1: gave back its reserve */
void *pm_large_realloc_in_place(pm_span_t *s, void *p, size_t size, size_t reserve); /* NULL: copy it */
/* alloc.c, for large.c: the thread's cache, and its sampling countdown */
pm_tcache_t *pm_alloc_thread_cache(void);
uint64_t pm_alloc_sample_tick(pm_tcache_t *t, size_t size); /* the sample's weight, or 0 */

/* ---- textmark.c: the first and last function of the library's code -- */
void pm_text_begin(void);
void pm_text_end(void);

/* ---- init.c ---------------------------------------------------------- */
extern _Atomic int pm_init_state;     /* 0 none, 1 running, 2 done */
void pm_init_slow(void);
PM_INLINE void pm_init(void)
{
    if (PM_UNLIKELY(atomic_load_explicit(&pm_init_state, memory_order_acquire) != 2))
        pm_init_slow();
}

/* ---- prof_http.c: the /debug/pprof endpoint ------------------------- */
void pm_http_autostart(void); /* PROFMALLOC_HTTP, from the constructor */

/* ---- stats.c --------------------------------------------------------- */
void pm_stats_collect(profmalloc_stats_t *out);
int pm_malloc_trim(size_t pad);
int pm_mallopt(int param, int value);
void pm_malloc_stats(void);
struct mallinfo2;
struct _IO_FILE;
struct mallinfo2 pm_mallinfo2(void);
int pm_malloc_info(int options, struct _IO_FILE *fp);

/* ---- guard.c: free-list links and the free-block key ------------------
 * Every free small block holds pm_guard.key in its second word, written
 * when it is freed (or carved) and erased when a malloc hands it out, so
 * free finds a block freed twice with one load and compare wherever its
 * first free put it, in any thread (glibc's tcache key; the key is random
 * and only free blocks hold it, so a match needs no confirmation walk).
 * In the hardened build every link in a free list (thread cache, transfer
 * slot, span) is also stored encoded, as glibc's safe-linking does: the
 * next block's address XOR the link's own address >> 12 XOR a per-process
 * secret, and every pop checks the decoded link (16-byte alignment) before
 * following it, so a write after free or a forged link aborts instead of
 * handing out a wild pointer (its price, in doc/hardening.md, kept it out
 * of the default build).  Secret and key come from getrandom at init.
 * These helpers are the only code that reads or writes a link or a key
 * (test_harden: test_double_free_same_class, test_forged_link_aborts). */
typedef struct pm_guard {
    uintptr_t secret;
    uintptr_t key;
} pm_guard_t;
extern pm_guard_t pm_guard;
void pm_guard_init(void);
/* A block whose key says it is free reached free (or realloc: what names
 * the call): aborts with "<what>: double free detected". */
void pm_guard_double_free(const char *what, const void *p) __attribute__((noreturn, cold));

PM_INLINE void pm_link_set(void *block, const void *next)
{
    uintptr_t mask = pm_config_hardened ? ((uintptr_t)block >> 12) ^ pm_guard.secret : 0;
    *(uintptr_t *)block = mask ^ (uintptr_t)next;
}
PM_INLINE void *pm_link_get(const void *block)
{
    uintptr_t mask = pm_config_hardened ? ((uintptr_t)block >> 12) ^ pm_guard.secret : 0;
    return (void *)(*(const uintptr_t *)block ^ mask);
}
/* A decoded link that can be followed: NULL or 16-byte aligned (always,
 * outside the hardened build, where links are plain). */
PM_INLINE int pm_link_ok(const void *next)
{
    return !pm_config_hardened || ((uintptr_t)next & (PM_ALIGNMENT - 1)) == 0;
}
/* The next block after `block`, checked: a bad link aborts (in_free:
 * which call met it). */
PM_INLINE void *pm_link_next(const void *block, int in_free)
{
    void *next = pm_link_get(block);
    if (PM_UNLIKELY(!pm_link_ok(next))) pm_bad_link(in_free, next);
    if (pm_config_hardened && next) {
        /* an aligned wild value (one in 16) must also land on a page of
         * the block's own class */
        uintptr_t pn = (uintptr_t)next >> PM_PAGE_SHIFT, pb = (uintptr_t)block >> PM_PAGE_SHIFT;
        pm_leaf_t *ln = pn >> (PM_ADDR_BITS - PM_PAGE_SHIFT) ? NULL : pm_pagemap_leaf(pn);
        unsigned mask = (1u << PM_LEAF_BITS) - 1;
        if (PM_UNLIKELY(!ln || ((__atomic_load_n(&ln->info[pn & mask], __ATOMIC_RELAXED) ^
                                 __atomic_load_n(&pm_pagemap_leaf(pb)->info[pb & mask], __ATOMIC_RELAXED)) &
                                0x7f)))
            pm_bad_link(in_free, next);
    }
    return next;
}
/* key passed in: a loop storing many keys loads pm_guard.key once (its
 * stores may alias it) */
PM_INLINE void pm_key_store(void *block, uintptr_t key) { ((uintptr_t *)block)[1] = key; }
PM_INLINE void pm_key_set(void *block) { pm_key_store(block, pm_guard.key); }
PM_INLINE void pm_key_clear(void *block) { ((uintptr_t *)block)[1] = 0; }
PM_INLINE int pm_key_is_set(const void *block) { return ((const uintptr_t *)block)[1] == pm_guard.key; }

#pragma GCC visibility pop

#endif
