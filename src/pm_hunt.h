/* pm_hunt.h — leak hunting beyond "now": copies of the site table (peak,
 * mark), dump triggers, the exit leak report, the timeline and gperftools'
 * heap-profiler API.  Everything here runs on the sampling slow path or in
 * a public call, never under an allocator lock (prof_peak.c,
 * prof_triggers.c, prof_leaks.c, prof_timeline.c, prof_gperftools.c). */
#ifndef PM_HUNT_H
#define PM_HUNT_H

#include "pm_internal.h"
#include "pm_prof_types.h"

/* ---- heapprof.c: the site table seen from outside -------------------- */
/* One site's counters, fixed point with PM_FX_SHIFT fraction bits.  `site`
 * (a bucket) lives as long as the process, so it names the site. */
#define PM_FX_SHIFT 8
typedef struct pm_site_count {
    const void *site;
    uint64_t alloc_objects, alloc_bytes, free_objects, free_bytes;
} pm_site_count_t;
/* Copies every site's counters into out[0..cap) and returns the number of
 * sites (more than cap: nothing past cap was written; call again). */
size_t pm_heapprof_copy_sites(pm_site_count_t *out, size_t cap);
size_t pm_heapprof_site_total(void);
/* A site's call stack (innermost first) and requested size: immutable. */
void pm_heapprof_site_info(const void *site, const uintptr_t **pcs, uint32_t *depth, uint64_t *size,
                           const void **stack);

/* What a dump shows instead of the live table: the values of a copy
 * (PM_VIEW_AT; sites absent from it are left out), or the live table minus
 * a copy (PM_VIEW_SINCE; in-use values may be negative). `base` is sorted
 * by site. `notes` become the profile's comments. */
enum { PM_VIEW_NOW, PM_VIEW_AT, PM_VIEW_SINCE };
typedef struct pm_prof_view {
    int mode;
    const pm_site_count_t *base;
    size_t nbase;
    const char *notes[4];
} pm_prof_view_t;
int pm_heapprof_dump_view(const char *path, int format, const pm_prof_view_t *view);
/* profmalloc_dump_fd with a view (NULL: the live table). */
int pm_heapprof_dump_fd_view(int fd, int format, const pm_prof_view_t *view);
/* Expands %p and %% of pattern into out (cap bytes); -1 when too long. */
int pm_heapprof_expand(const char *pattern, char *out, size_t cap);

/* The sums of every sampled allocation's and free's weight (fixed point),
 * and the lowest live bytes since the last call (restarting from
 * `restart`); both cheap enough for every sample. */
typedef struct pm_hunt_totals {
    uint64_t alloc_objects, alloc_bytes, free_objects, free_bytes; /* fixed point */
} pm_hunt_totals_t;
void pm_heapprof_totals(pm_hunt_totals_t *out);
uint64_t pm_heapprof_live_low(uint64_t restart);

/* ---- prof_peak.c: the peak and the mark -------------------------------- */
/* After each sampled allocation (alloc.c), with no lock held: the peak
 * copy, the triggers, the timeline. */
void pm_hunt_tick(void);
void pm_hunt_totals(pm_hunt_totals_t *out); /* pm_heapprof_totals */
uint64_t pm_hunt_live_bytes(void); /* the sampled estimate, whole bytes */
uint64_t pm_hunt_peak_live(void);  /* its highest value at a sample so far */
/* A copy of the site table, sorted by site; mapped memory. */
typedef struct pm_site_copy {
    pm_site_count_t *v;
    size_t n, bytes;
} pm_site_copy_t;
int pm_hunt_copy_take(pm_site_copy_t *c);
void pm_hunt_copy_free(pm_site_copy_t *c);
void pm_hunt_init(void);
void pm_hunt_at_exit(void);
void pm_hunt_lock_all(void);
void pm_hunt_unlock_all(int child);

/* ---- prof_triggers.c -------------------------------------------------- */
void pm_triggers_init(void);
void pm_triggers_tick(uint64_t alloc_bytes, uint64_t live_bytes);
void pm_triggers_at_exit(void);
void pm_triggers_child(void); /* after fork, in the child: no dump is under way */

/* ---- prof_leaks.c ----------------------------------------------------- */
void pm_leaks_at_exit(void);

/* ---- prof_timeline.c -------------------------------------------------- */
void pm_timeline_init(void);
void pm_timeline_tick(void);
void pm_timeline_at_exit(void);
void pm_timeline_child(void);

/* ---- prof_gperftools.c ------------------------------------------------ */
void pm_gperf_init(void);
void pm_gperf_tick(uint64_t alloc_bytes, uint64_t live_bytes);
void pm_gperf_at_exit(void);
void pm_gperf_child(void);

#endif
