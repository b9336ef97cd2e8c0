/* pm_hunt.h — leak hunting beyond "now": copies of the site table (peak,
 * mark), dump triggers, the exit leak report, the timeline and gperftools'
 * heap-profiler API.  Everything here runs on the sampling slow path or in
 * a public call, never under an allocator lock (prof_peak.c,
 * prof_triggers.c, prof_leaks.c, prof_timeline.c, prof_gperftools.c). */
#ifndef PM_HUNT_H
#define PM_HUNT_H

#include "pm_internal.h"
#include "pm_prof_types.h"

/* ---- prof_sites.c: the site table seen from outside --------------------- */
#define PM_FX_SHIFT PM_WEIGHT_SHIFT
/* Copies every site's counters into out[0..cap) and returns the number of
 * sites (more than cap: nothing past cap was written; call again). */
size_t pm_sites_copy(pm_site_count_t *out, size_t cap);
size_t pm_sites_count(void);
/* A site's call stack (innermost first) and requested size: immutable. */
void pm_sites_info(const void *site, const uintptr_t **pcs, uint32_t *depth, uint64_t *size, const void **stack);
/* The sums of every sampled allocation's and free's weight (fixed point),
 * and the lowest live bytes since the last call (restarting from
 * `restart`); both cheap enough for every sample. */
typedef struct pm_hunt_totals {
    uint64_t alloc_objects, alloc_bytes, free_objects, free_bytes; /* fixed point */
} pm_hunt_totals_t;
void pm_sites_totals(pm_hunt_totals_t *out);
uint64_t pm_sites_live_low(uint64_t restart);

/* ---- prof_dump.c ---------------------------------------------------------- */
/* profmalloc_dump in `format` (-1: by the path's name) showing `view`. */
int pm_dump_view(const char *path, int format, const pm_prof_view_t *view);
/* profmalloc_dump_fd with a view (NULL: the live table). */
int pm_dump_fd_view(int fd, int format, const pm_prof_view_t *view);
/* Expands %p, %e and %% of pattern into out (cap bytes); -1 when too long. */
int pm_dump_expand(const char *pattern, char *out, size_t cap);

/* ---- prof_peak.c: the peak and the mark -------------------------------- */
/* A tick with no sample (pm_hunt_slow_path), with no lock held: the peak
 * copy, the triggers, the timeline. */
void pm_hunt_tick(void);
/* The same after a sampled allocation (pm_sites_add), with the totals it
 * left: alloc and free bytes, fixed point; in_profiler held, no lock. */
void pm_hunt_sampled(uint64_t alloc_fx, uint64_t free_fx);
/* Nonzero while a timeline or a time-based trigger wants ticks that do not
 * wait for a sample; then alloc.c calls pm_hunt_slow_path at its slow
 * paths (refill, overflow, large blocks), outside every lock. */
extern int pm_hunt_clocked;
void pm_hunt_slow_path(pm_tcache_t *t);
uint64_t pm_hunt_live_bytes(void); /* the sampled estimate, whole bytes */
uint64_t pm_hunt_peak_live(void);  /* its highest value at a sample so far */
/* A copy of the site table, in no order; mapped memory. */
typedef struct pm_site_copy {
    pm_site_count_t *v;
    size_t n, bytes;
} pm_site_copy_t;
/* Fills c (zeroed, or a copy whose memory is reused when big enough). */
int pm_hunt_copy_take(pm_site_copy_t *c);
void pm_hunt_copy_free(pm_site_copy_t *c);
void pm_hunt_init(void);
void pm_hunt_at_exit(void);
/* profmalloc_dump_peak to an open fd in `format` (PROFMALLOC_FORMAT_*). */
int pm_hunt_dump_peak_fd(int fd, int format);
void pm_hunt_lock_all(void);
void pm_hunt_unlock_all(int child);
/* The child's own state (triggers, timeline, gperftools' files) after a fork
 * whose prepare took no lock: a process that never started a thread. */
void pm_hunt_child(void);
/* Waits for a `busy` flag (the timeline's, a trigger set's) and takes it:
 * the exit, public calls and the HTTP server must not skip their turn;
 * the sample path tries once and goes on (test_hunt's test_gperftools_api). */
static inline void pm_hunt_busy_take(_Atomic int *busy)
{
    int idle = 0;
    while (!atomic_compare_exchange_weak(busy, &idle, 1)) {
        idle = 0;
        pm_os_yield();
    }
}

/* ---- prof_triggers.c -------------------------------------------------- */
void pm_triggers_init(void);
void pm_triggers_tick(uint64_t alloc_bytes, uint64_t live_bytes);
void pm_triggers_at_exit(void);
void pm_triggers_child(void); /* after fork, in the child: no dump is under way */

/* ---- prof_leaks.c ----------------------------------------------------- */
void pm_leaks_at_exit(void);
/* Calls cb(arg, i, name, len) for each pcs[i] with its function's name
 * (not NUL-terminated), or NULL when none is known; names come from the
 * loaded objects' symbol tables, as the profile's.  Returns 0, or -1. */
typedef void (*pm_pprof_name_fn)(void *arg, size_t i, const char *name, size_t len);
int pm_pprof_names(const uintptr_t *pcs, size_t n, pm_pprof_name_fn cb, void *arg);

/* ---- prof_timeline.c -------------------------------------------------- */
void pm_timeline_init(void);
void pm_timeline_tick(uint64_t live_bytes); /* the hunt tick's estimate */
void pm_timeline_at_exit(void);
void pm_timeline_child(void);
/* Copies the timeline file's current part, complete records only, to fd:
 * 0 done, 1 no timeline is being recorded, -1 failed. */
int pm_timeline_copy_fd(int fd);

/* ---- prof_gperftools.c ------------------------------------------------ */
void pm_gperf_init(void);
void pm_gperf_tick(uint64_t alloc_bytes, uint64_t live_bytes);
void pm_gperf_at_exit(void);
void pm_gperf_child(void);

#endif
