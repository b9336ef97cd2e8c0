/* pm_prof_types.h — the profiler's snapshot, taken by prof_sites.c under
 * the profiler lock into mmap'd memory, completed by prof_dump.c with the
 * allocator's totals, and written by prof_pprof.c after every lock is
 * dropped.
 * Invariants of a snapshot:
 *   every samples[i].depth <= PM_STACK_MAX and pcs points at depth entries;
 *   values are already unbiased estimates (at rate 1, exact counts);
 *   inuse_objects <= alloc_objects and inuse_bytes <= alloc_bytes. */
#ifndef PM_PROF_TYPES_H
#define PM_PROF_TYPES_H

#include <stdint.h>
#include <stddef.h>
#include "../include/profmalloc.h"

#define PM_STACK_MAX 64

typedef struct pm_prof_sample {
    uint64_t alloc_objects, alloc_bytes;  /* cumulative since start */
    uint64_t inuse_objects, inuse_bytes;  /* live now */
    uint64_t size;                        /* object size: the "bytes" label */
    uint32_t depth;
    const uintptr_t *pcs;                 /* return addresses, leaf first */
} pm_prof_sample_t;

typedef struct pm_prof_snapshot {
    uint64_t sample_rate;     /* period: mean bytes between samples; 1 = exact */
    uint64_t time_ns;         /* CLOCK_REALTIME at the snapshot */
    uint64_t duration_ns;     /* since the profiler started */
    size_t nsamples;
    const pm_prof_sample_t *samples;
    profmalloc_stats_t totals; /* the allocator's exact totals */
    const char *notes[4];     /* extra comment lines (a peak's time), or NULL */
} pm_prof_snapshot_t;

/* prof_sites.c: copies the buckets into mapped memory (mem, which the
 * caller unmaps) and sets every field of snap but `totals`.  0, or -1
 * with errno ENOMEM. */
typedef struct pm_sites_mem {
    void *base;
    size_t bytes;
} pm_sites_mem_t;

/* One site's counters, fixed point with PM_WEIGHT_SHIFT fraction bits.
 * `site` (a bucket) lives as long as the process, so it names the site. */
typedef struct pm_site_count {
    const void *site;
    uint64_t alloc_objects, alloc_bytes, free_objects, free_bytes;
} pm_site_count_t;

/* What a snapshot shows instead of the live table: the values of a copy
 * (PM_VIEW_AT; sites absent from it are left out), or the live table minus
 * a copy (PM_VIEW_SINCE; in-use values may be negative).  `base` is sorted
 * by site; `notes` become the profile's comments. */
enum { PM_VIEW_NOW, PM_VIEW_AT, PM_VIEW_SINCE };
typedef struct pm_prof_view {
    int mode;
    const pm_site_count_t *base;
    size_t nbase;
    const char *notes[4];
} pm_prof_view_t;

/* view NULL: the live table. */
int pm_sites_snapshot(pm_prof_snapshot_t *snap, pm_sites_mem_t *mem, const pm_prof_view_t *view);
/* Samples whose bucket was looked up rather than taken from the walk's
 * memo so far (for the tests, counted as pm_unwind_memo_replays is). */
uint64_t pm_sites_bucket_lookups(void);

#endif
