/* prof_peak.c — running totals of the sampled allocations, the copy of the
 * site table at the peak of live bytes, the copy at profmalloc_mark(), and
 * the dispatch of everything that runs after a sampled allocation
 * (pm_hunt_sampled, called by each sample: triggers, timeline, gperftools).
 * Must never: map memory, unwind or write while holding a lock; copies are
 * taken into memory mapped beforehand and swapped in under peak.lock or
 * mark.lock, which guard only a pointer swap or a memcpy (no other lock is
 * taken under them; the fork handlers take them first). */
#include "pm_hunt.h"
#include "pm_prof_encode.h"

#include <errno.h>

static _Atomic uint64_t max_estimate; /* the highest live estimate, whole bytes */

typedef struct held_copy {
    pm_lock_t lock;
    pm_site_copy_t copy;
    uint64_t estimate, in_use, time_ns; /* at the copy */
    int taken;
} held_copy_t;

static held_copy_t peak = {.lock = PM_LOCK_INIT}, mark = {.lock = PM_LOCK_INIT};
/* live estimate (fixed point) that triggers the next peak copy */
static _Atomic uint64_t next_peak_fx;
static _Atomic int peak_busy;

uint64_t pm_hunt_peak_live(void) { return pm_relaxed_load(&max_estimate); }

uint64_t pm_hunt_live_bytes(void)
{
    pm_hunt_totals_t t;
    pm_sites_totals(&t);
    return t.alloc_bytes > t.free_bytes ? (t.alloc_bytes - t.free_bytes) >> PM_FX_SHIFT : 0;
}

/* ---- copies of the site table ----------------------------------------- */

static bool site_before(const void *a, const void *b, const void *ctx)
{
    (void)ctx;
    return (uintptr_t)((const pm_site_count_t *)a)->site < (uintptr_t)((const pm_site_count_t *)b)->site;
}

int pm_hunt_copy_take(pm_site_copy_t *c)
{
    for (;;) {
        size_t bytes = (pm_sites_count() + 64) * sizeof(pm_site_count_t);
        if (c->bytes < bytes) {
            /* twice what it held: each mapping between the heap's own
             * mappings keeps them from merging (test_big_alignment_
             * mappings_merge), so few of them */
            size_t cap = bytes > 2 * c->bytes ? bytes : 2 * c->bytes;
            pm_hunt_copy_free(c);
            c->v = pm_os_map(cap, 0);
            if (!c->v) {
                errno = ENOMEM;
                return -1;
            }
            c->bytes = cap;
        }
        size_t room = c->bytes / sizeof(pm_site_count_t);
        size_t n = pm_sites_copy(c->v, room);
        if (n > room) continue; /* sites were added meanwhile */
        c->n = n;
        return 0;
    }
}

void pm_hunt_copy_free(pm_site_copy_t *c)
{
    if (c->bytes) pm_os_unmap(c->v, c->bytes);
    *c = (pm_site_copy_t){0};
}

/* Swaps c (taken by the caller) with h's copy, recording when; the caller
 * gets the old copy's memory back in c, to reuse or free. */
static void hold(held_copy_t *h, pm_site_copy_t *c, uint64_t estimate)
{
    profmalloc_stats_t s;
    pm_stats_collect(&s);
    uint64_t now = pm_os_now_ns();
    pm_lock(&h->lock);
    pm_site_copy_t old = h->copy;
    h->copy = *c;
    h->estimate = estimate;
    h->in_use = s.in_use;
    h->time_ns = now;
    h->taken = 1;
    pm_unlock(&h->lock);
    *c = old;
}

/* A private copy of h's copy (memcpy under its lock into memory mapped
 * before), and its record. */
static int dup_held(held_copy_t *h, pm_site_copy_t *out, held_copy_t *info)
{
    for (;;) {
        pm_lock(&h->lock);
        size_t n = h->copy.n;
        pm_unlock(&h->lock);
        size_t bytes = (n + 1) * sizeof(pm_site_count_t);
        pm_site_count_t *v = pm_os_map(bytes, 0);
        if (!v) {
            errno = ENOMEM;
            return -1;
        }
        pm_lock(&h->lock);
        if (h->copy.n > n) {
            pm_unlock(&h->lock);
            pm_os_unmap(v, bytes);
            continue;
        }
        for (size_t i = 0; i < h->copy.n; i++) v[i] = h->copy.v[i];
        *out = (pm_site_copy_t){v, h->copy.n, bytes};
        info->estimate = h->estimate;
        info->in_use = h->in_use;
        info->time_ns = h->time_ns;
        info->taken = h->taken;
        pm_unlock(&h->lock);
        return 0;
    }
}

/* Copies the site table when the live estimate first passes 1.1 times the
 * last copy's (plus a page, so that a small heap is not copied at each
 * sample): O(log) copies of the growth (test_peak_profile_tops_peak_site). */
static void peak_check(uint64_t live_fx)
{
    if (live_fx <= pm_relaxed_load(&next_peak_fx)) return;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&peak_busy, &idle, 1)) return;
    static pm_site_copy_t spare; /* the copy before last: its memory reused */
    if (pm_hunt_copy_take(&spare) == 0) {
        hold(&peak, &spare, live_fx >> PM_FX_SHIFT);
        atomic_store_explicit(&next_peak_fx, live_fx + live_fx / 10 + ((uint64_t)4096 << PM_FX_SHIFT),
                              memory_order_relaxed);
    }
    atomic_store(&peak_busy, 0);
}

static int hunting_timeline, hunting_triggers, hunting_gperf;
int pm_hunt_clocked;
/* monotonic time before which a slow path does not tick; the thread whose
 * exchange moves it ticks, the others go on */
static _Atomic uint64_t clock_due;
static uint64_t clock_step_ns;
/* the clock is read at most once per this many slow paths of a thread */
#define SLOW_PATHS_PER_CLOCK 4

void pm_hunt_init(void)
{
    hunting_triggers = pm_options.every_bytes || pm_options.every_inuse || pm_options.every_seconds ||
                       pm_options.dump_signal;
    hunting_timeline = pm_options.timeline != NULL;
    hunting_gperf = 1; /* HeapProfilerStart may start it later */
    /* a program allocating less than the sample rate per interval (or at
     * rate 0) still gets its records and time-based dumps
     * (test_timeline_slow_allocator); a quarter interval so a tick is
     * never much later than the timeline's own due time */
    uint64_t ms = hunting_timeline ? pm_options.timeline_interval_ms : 100;
    clock_step_ns = (ms ? ms : 1) * 1000000 / 4;
    pm_hunt_clocked = hunting_timeline || pm_options.every_seconds || pm_options.dump_signal ||
                      pm_options.hp_time_interval || pm_options.hp_signal;
    pm_triggers_init();
    pm_timeline_init();
    pm_gperf_init();
}

/* The work of a tick, given the sampled totals (fixed point); the caller
 * holds in_profiler and no lock. */
void pm_hunt_sampled(uint64_t alloc_fx, uint64_t free_fx)
{
    uint64_t live_fx = alloc_fx > free_fx ? alloc_fx - free_fx : 0, live = live_fx >> PM_FX_SHIFT;
    uint64_t m = pm_relaxed_load(&max_estimate);
    while (live > m && !atomic_compare_exchange_weak(&max_estimate, &m, live)) {}
    peak_check(live_fx);
    if (hunting_timeline) pm_timeline_tick(live);
    /* at rate 0 (ticks from slow paths only) a dump would be empty */
    int sampling = pm_sampler_rate() != 0;
    if (hunting_triggers && sampling) pm_triggers_tick(alloc_fx >> PM_FX_SHIFT, live);
    if (hunting_gperf && sampling) pm_gperf_tick(alloc_fx >> PM_FX_SHIFT, live);
}

void pm_hunt_tick(void)
{
    /* what it calls allocates nothing; the flag keeps a signal handler's
     * malloc meanwhile from sampling into a half-done tick */
    pm_tcache_t *t = &pm_tls;
    if (t->in_profiler) return;
    t->in_profiler = 1;
    int saved_errno = errno;
    pm_hunt_totals_t tot;
    pm_sites_totals(&tot);
    pm_hunt_sampled(tot.alloc_bytes, tot.free_bytes);
    errno = saved_errno;
    t->in_profiler = 0;
}

void pm_hunt_slow_path(pm_tcache_t *t)
{
    if (++t->hunt_slow < SLOW_PATHS_PER_CLOCK || t->in_profiler) return;
    t->hunt_slow = 0;
    uint64_t now = pm_os_monotonic_ns(), due = pm_relaxed_load(&clock_due);
    if (now < due) return;
    if (!atomic_compare_exchange_strong_explicit(&clock_due, &due, now + clock_step_ns, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    pm_hunt_tick();
}

/* ---- the public calls -------------------------------------------------- */

static void note(char *buf, size_t cap, const char *what, uint64_t v, const char *unit)
{
    pm_buf_t b;
    pm_buf_init(&b, buf, cap - 1, -1);
    pm_buf_str(&b, "profmalloc: ");
    pm_buf_str(&b, what);
    pm_buf_str(&b, "=");
    pm_buf_u64(&b, v);
    pm_buf_str(&b, unit);
    buf[b.len] = 0;
}

/* Writes h's copy (PM_VIEW_AT) or the growth since it (PM_VIEW_SINCE) to
 * path, or, when path is NULL, to fd in `format` (the HTTP endpoint's). */
static int dump_held(held_copy_t *h, const char *path, int fd, int format, int mode, const char *label)
{
    pm_init();
    pm_site_copy_t c;
    held_copy_t info = {0};
    if (dup_held(h, &c, &info) != 0) return -1;
    /* sorted here, not when taken: the peak's copies are taken at samples
     * and few of them are ever written (test_hunt's peak and mark tests) */
    pm_encode_sort(c.v, c.n, sizeof *c.v, site_before, NULL);
    char notes[3][96];
    pm_prof_view_t view = {.mode = mode, .base = c.v, .nbase = c.n};
    if (info.taken) {
        char what[48];
        pm_fmt_join(what, sizeof what, label, "_in_use");
        note(notes[0], sizeof notes[0], what, info.in_use, " bytes");
        pm_fmt_join(what, sizeof what, label, "_time");
        note(notes[1], sizeof notes[1], what, info.time_ns, " ns since the epoch");
        pm_fmt_join(what, sizeof what, label, "_estimate");
        note(notes[2], sizeof notes[2], what, info.estimate, " bytes");
        for (int i = 0; i < 3; i++) view.notes[i] = notes[i];
    }
    /* a difference has negative values: only profile.proto holds them */
    int rc = path ? pm_dump_view(path, mode == PM_VIEW_SINCE ? PROFMALLOC_FORMAT_PPROF : -1, &view)
                  : pm_dump_fd_view(fd, format, &view);
    int saved = errno;
    pm_hunt_copy_free(&c);
    errno = saved;
    return rc;
}

static int bad_path(const char *path)
{
    if (path && *path) return 0;
    errno = EINVAL;
    return 1;
}

PM_EXPORT int profmalloc_dump_peak(const char *path)
{
    return bad_path(path) ? -1 : dump_held(&peak, path, -1, -1, PM_VIEW_AT, "peak");
}

int pm_hunt_dump_peak_fd(int fd, int format) { return dump_held(&peak, NULL, fd, format, PM_VIEW_AT, "peak"); }

PM_EXPORT int profmalloc_mark(void)
{
    pm_init();
    pm_site_copy_t c = {0};
    if (pm_hunt_copy_take(&c) != 0) return -1;
    hold(&mark, &c, pm_hunt_live_bytes());
    pm_hunt_copy_free(&c); /* the previous mark's */
    return 0;
}

PM_EXPORT int profmalloc_dump_since_mark(const char *path)
{
    return bad_path(path) ? -1 : dump_held(&mark, path, -1, -1, PM_VIEW_SINCE, "mark");
}

void pm_hunt_at_exit(void)
{
    if (pm_options.dump_peak) {
        enum { CAP = 4096 };
        char *path = pm_os_map(CAP, 0);
        if (path && pm_dump_expand(pm_options.dump_peak, path, CAP) == 0 &&
            profmalloc_dump_peak(path) != 0)
            pm_os_message("PROFMALLOC_DUMP_PEAK: could not write the peak profile");
        if (path) pm_os_unmap(path, CAP);
    }
    pm_leaks_at_exit();
    pm_timeline_at_exit();
    pm_gperf_at_exit();
}

void pm_hunt_lock_all(void)
{
    pm_lock(&peak.lock);
    pm_lock(&mark.lock);
}

void pm_hunt_child(void)
{
    pm_triggers_child();
    pm_timeline_child();
    pm_gperf_child();
}

void pm_hunt_unlock_all(int child)
{
    if (child) {
        pm_lock_reset(&mark.lock);
        pm_lock_reset(&peak.lock);
        atomic_store(&peak_busy, 0); /* its thread is gone */
        pm_hunt_child();
    } else {
        pm_unlock(&mark.lock);
        pm_unlock(&peak.lock);
    }
}
