/* pm_types.h — every struct shared between files, each with its invariants.
 * Owns: type definitions only.  Which lock guards which field is written
 * beside the field; doc/design.md has the lock order. */
#ifndef PM_TYPES_H
#define PM_TYPES_H

#include "pm.h"

/* ---- spans ------------------------------------------------------------
 * A span is a run of npages pages starting at page number `page`.
 * States: IN_USE (a small-object span owned by a central list, or one large
 * block), FREE (resident, on a page-heap free list), RETURNED (given back
 * to the OS, reads as zero), RELEASING (off every list while the page heap
 * madvises it outside its lock).
 * Small-object span invariants (under its central lock):
 *   allocated + free_count(freelist) + (capacity - carved) == capacity
 *   carved <= capacity == npages * PM_PAGE_SIZE / class_size
 * except while malloc_trim holds the span (`trimming`, central.c
 * pm_central_release_free): it has taken the free objects into `held` and
 * counts them and the uncarved tail as allocated, so that no thread takes
 * an object whose pages are being released and the span cannot empty.
 * Free spans (under the page-heap lock): the page map maps their first and
 * last page to them (a RELEASING one that may be unmapped: neither), and no
 * two FREE neighbours (or two RETURNED ones) exist: coalescing joins them
 * at once. */
enum { PM_SPAN_IN_USE = 1, PM_SPAN_FREE, PM_SPAN_RETURNED, PM_SPAN_RELEASING,
       PM_SPAN_DEFERRED /* freed while the page heap's lock was held (pageheap.c) */ };

typedef struct pm_span {
    uintptr_t page;           /* first page number (address >> PM_PAGE_SHIFT) */
    size_t npages;
    struct pm_span *next, *prev; /* list links: central nonempty or free list */
    void *freelist;           /* small: returned objects inside this span */
    uint32_t allocated;       /* small: objects out of this span */
    uint32_t carved;          /* small: objects ever cut from the front */
    uint32_t capacity;        /* small: objects that fit */
    uint8_t cls;              /* size class, 0 for a large block */
    uint8_t state;            /* PM_SPAN_* */
    uint8_t zeroed;           /* large: memory known to be all zero */
    uint8_t on_list;          /* small: linked into the central nonempty list */
    uint8_t trimming;         /* small: held by malloc_trim (off every list) */
    uint8_t unmapping;        /* RELEASING: may be unmapped, so its ends are
                                 out of the page map already (pageheap.c) */
    uint8_t usable_seen;      /* large: malloc_usable_size was asked, so its
                                 bytes past `requested` may hold data */
    uint8_t calloc_watch;     /* large: a calloc's, handed out zero without a
                                 memset: only the program made its pages
                                 resident (large.c) */
    uint32_t held_pin;        /* small, trimming: what it added to allocated */
    uint32_t held_carved;     /* small, trimming: carved before it was held */
    void *held;               /* small, trimming: its free objects, taken */
    size_t requested;         /* large: bytes the application asked for */
    void *sample;             /* large: its sample record, or NULL */
    /* small, under the profiler's lock: live sampled blocks in this span,
     * the first two of them (so frees of the span's other blocks can tell
     * they are not sampled without that lock), whether more than two were
     * ever live at once since nsampled was last 0, and the others' count
     * by their index in the span modulo 32, four bits each (prof_sites.c:
     * hashed_count) */
    uint32_t nsampled;
    uint32_t sampled_overflow;
    uint8_t hashed[16];
    void *sampled[2];
    void *sampled_rec[2];     /* their records, which no hash table holds */
    uint64_t free_ns;         /* FREE: when it became free (monotonic) */
    struct pm_span *older, *newer; /* FREE: the page heap's age list */
    struct pm_span *tl, *tr;  /* FREE or RETURNED, longer than the exact lists:
                                 children in the page heap's size tree */
} pm_span_t;

/* ---- per-thread cache ---------------------------------------------------
 * One free list per size class, linked through each block's first word.
 * Invariants (touched only by the owning thread, except `budget`):
 *   len == length of the list at head;  len <= max_len, except while a
 *   free is deciding what to do with an overflow
 *   capacity == Σ max_len[c] * class_size[c] <= budget.  Another thread
 *   lowers `budget` only by what capacity leaves unused; a growth of the
 *   lists racing with that can overshoot by one step, which this thread's
 *   next slow path shrinks away.
 * A new thread's cache is all zero: empty lists with max_len 0 and a zero
 * countdown, so its first malloc and first free both miss into the slow
 * path, which sets the thread up (the "empty sentinel").  */
typedef struct pm_tlist {
    void *head;
    uint32_t len;
    uint32_t max_len;
} pm_tlist_t;

/* EMPTY: never allocated; NEW: its first PM_THREAD_NEW_OPS allocations
 * and frees go to the central lists uncached (tcache.c); ACTIVE: caching;
 * DEAD: its exit call came, uncached again. */
enum { PM_THREAD_EMPTY = 0, PM_THREAD_ACTIVE, PM_THREAD_DEAD, PM_THREAD_NEW };
#define PM_THREAD_NEW_OPS 32

/* A thread's sampling state (prof_sampler.c); its countdown is charged
 * inline by malloc's fast path, so it comes first in pm_tcache_t. */
typedef struct pm_sampler {
    int64_t countdown;              /* bytes to allocate before the next sample */
    uint64_t rng;                   /* xorshift state */
    uint64_t rate;                  /* rate the countdown was drawn with */
    /* slow-path state: the weight of the last sample's size at this rate,
     * since a program often allocates one size in a loop */
    double inv_rate;                /* 1/rate (0 at rate 0 and 1) */
    size_t last_size;               /* 0: none since the rate was set */
    uint64_t last_weight;
    int64_t drawn;                  /* the countdown's value when it was drawn */
    uint64_t tick_bytes;            /* charged since the release rules last ran */
} pm_sampler_t;

typedef struct pm_tcache {
    pm_tlist_t list[PM_CLASS_MAX];
    pm_sampler_t sampler;
    /* slow-path state */
    uint16_t overflows[PM_CLASS_MAX];
    uint8_t active[PM_CLASS_MAX];     /* refilled or overflowed since the last scavenge */
    _Atomic size_t capacity;        /* the owner writes it; thieves read it (tcache.c) */
    _Atomic size_t budget;
    size_t small_capacity;          /* the part of capacity in classes up to 16 KiB */
    uint64_t limited[(PM_CLASS_MAX + 63) / 64]; /* classes with max_len > 0 */
    uint8_t state;                  /* PM_THREAD_* */
    uint8_t in_profiler;            /* reentrancy guard for the profiler */
    uint16_t steal_skip;            /* budget growths to refuse before stealing again */
    uint16_t steal_backoff;         /* the last skip; doubles per failed steal */
    uint16_t scavenge_skip;         /* refused growths before the next scavenge */
    uint32_t flush_seen;            /* the flush request it last obeyed (tcache.c) */
    uint32_t new_ops;               /* NEW: slow-path operations so far */
    uint32_t hunt_slow;             /* slow paths since the clock was read (prof_peak.c) */
    uint32_t idle_epoch;            /* release ticks seen at its last idle check (tcache.c) */
    uint8_t tiny_passed;            /* classes 1-7 below 64 B whose first free went on (tcache.c) */
    uint8_t small_shift;            /* the small classes' ceiling: 1 MiB << this (tcache.c) */
    uint8_t appends;                /* realloc's last moves that were appends, up to APPEND_RUN (alloc.c) */
    uint32_t pingpongs;             /* round trips since the last idle check (tcache.c) */
    void *prof_sites[8];            /* the profiler's recently used buckets */
    struct pm_treg *reg;            /* its registry node (tcache.c), or NULL */
} pm_tcache_t;

/* ---- central free list, one per size class ----------------------------
 * Under `lock`:
 *   out == objects handed to thread caches (or the application) and not
 *          yet returned
 *   Σ over spans of class: allocated == out + parked
 *   parked == Σ slot_n[0..nslots), every slot_n in 1..batch
 *   parked <= park_cap, nslots <= max_slots
 *   nonempty holds exactly the class's spans with a free or uncarved object
 * A class's struct is set up at its first use (nonempty.next == NULL until
 * then), so classes a program never uses cost no resident memory. */
#define PM_MAX_SLOTS 32

typedef struct pm_central {
    pm_lock_t lock;
    pm_span_t nonempty;          /* sentinel of a circular list */
    uint32_t nslots, max_slots;
    uint32_t park_max, park_cap; /* objects the slots may hold, at least and at most (central.c) */
    void *slots[PM_MAX_SLOTS];   /* parked chains (a stack), slot_n[i] objects each */
    uint8_t slot_n[PM_MAX_SLOTS];
    uint64_t parked;             /* objects in the slots */
    uint64_t out;
    uint64_t spans;              /* spans owned by this class */
    uint64_t span_free;          /* Σ capacity - allocated over its spans */
    pm_span_t *trim_held;        /* spans malloc_trim holds (central.c) */
    uint32_t kept, kept_max;     /* empty spans left on the list (central.c) */
    uint32_t kept_low;           /* fewest kept since the last tick (central.c) */
    uint32_t kept_cap;           /* ... never more than this (central.c keep_limit) */
    uint64_t in_use_high;        /* most spans in use since the last tick (central.c room_take) */
    uint32_t room_n;             /* kept spans charged to the room budget, <= kept (central.c) */
    uint32_t idle_ticks;         /* ticks without a get or put (central.c) */
    uint8_t busy;                /* a get or put since the last tick */
    uint8_t deep;                /* parked past park_max since the last idle tick (atomic) */
    uint8_t cls;                 /* the class */
} PM_ALIGNED(PM_CACHELINE) pm_central_t;

#endif
