/* prof_gperftools.c — gperftools' heap profiler and MallocExtension C API
 * over profmalloc's profiler, so a program written for them builds with
 * -lprofmalloc and runs unchanged: HEAPPROFILE=<prefix> and its interval
 * variables, HeapProfilerStart/Stop/Dump, IsHeapProfilerRunning,
 * GetHeapProfile, MallocExtension_GetNumericProperty and friends.
 * Files are <prefix>.0001.heap, ... in gperftools' heap_v2 text, written by
 * the trigger engine (prof_triggers.c) with gperftools' own rule.
 * Must never: dump under a lock.  No lock of its own: `running` (a CAS)
 * lets one HeapProfilerStart set the prefix, and the dumps take turns on
 * the trigger set's busy flag. */
#include "pm_hunt.h"
#include "pm_triggers.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

enum { PREFIX_CAP = 4096 };
PM_SPARSE_BSS static char prefix[PREFIX_CAP];
static _Atomic uint64_t seq;
static _Atomic int running; /* between HeapProfilerStart (or HEAPPROFILE) and Stop */
static pm_trigger_t gp;

/* <prefix>.NNNN.heap, NNNN from 0001 (wider past 9999, as gperftools). */
static void gp_fire(pm_trigger_t *t, const char *kind)
{
    (void)kind;
    char *path = pm_os_map(PREFIX_CAP + 32, 0);
    if (!path) return;
    pm_buf_t b;
    pm_buf_init(&b, path, PREFIX_CAP + 31, -1);
    pm_buf_str(&b, prefix);
    pm_buf_str(&b, ".");
    uint64_t n = atomic_fetch_add(&seq, 1) + 1;
    for (uint64_t d = 1000; d > 1 && n < d; d /= 10) pm_buf_str(&b, "0");
    pm_buf_u64(&b, n);
    pm_buf_str(&b, ".heap");
    path[b.len] = 0;
    int saved = errno;
    if (pm_dump_view(path, PROFMALLOC_FORMAT_LEGACY, NULL) != 0 && !t->complained++)
        pm_os_message("HEAPPROFILE: could not write a heap profile");
    errno = saved;
    pm_os_unmap(path, PREFIX_CAP + 32);
}

static void start(const char *p)
{
    size_t n = pm_fmt_strlen(p);
    int idle = 0;
    if (n + 1 > PREFIX_CAP || !atomic_compare_exchange_strong(&running, &idle, 1)) return;
    for (size_t i = 0; i <= n; i++) prefix[i] = p[i];
    /* gperftools' profile is exact: every allocation, unless the user chose */
    if (!pm_options.sample_rate_set && pm_sampler_rate() != 1) profmalloc_set_sample_rate(1);
    pm_hunt_totals_t tot;
    pm_sites_totals(&tot);
    gp.every_bytes = pm_options.hp_alloc_interval;
    gp.every_inuse = pm_options.hp_inuse_interval;
    gp.every_ns = pm_options.hp_time_interval * 1000000000ull;
    gp.signal = (int)pm_options.hp_signal;
    gp.gperftools = 1;
    gp.fire = gp_fire;
    gp.last_alloc = tot.alloc_bytes >> PM_FX_SHIFT;
    gp.high_water = 0;
    pm_trigger_arm(&gp);
}

void pm_gperf_init(void)
{
    /* HEAPPROFILE's sample rate is set by options.c; the rest needs no
     * allocation and so may run here, inside the first malloc */
    if (pm_options.heapprofile) start(pm_options.heapprofile);
}

void pm_gperf_tick(uint64_t alloc_bytes, uint64_t live_bytes) { pm_trigger_check(&gp, alloc_bytes, live_bytes); }

void pm_gperf_child(void) { atomic_store(&gp.busy, 0); }

void pm_gperf_at_exit(void)
{
    if (atomic_load(&gp.armed)) gp_fire(&gp, "exit");
}

/* ---- <gperftools/heap-profiler.h> --------------------------------------- */

PM_EXPORT void HeapProfilerStart(const char *p)
{
    pm_init();
    if (p && *p) start(p);
}

PM_EXPORT void HeapProfilerStop(void)
{
    atomic_store(&gp.armed, 0);
    /* a dump under way finishes with the prefix before it may change */
    pm_hunt_busy_take(&gp.busy);
    atomic_store(&gp.busy, 0);
    atomic_store(&running, 0);
}

PM_EXPORT int IsHeapProfilerRunning(void) { return atomic_load(&running); }

PM_EXPORT void HeapProfilerDump(const char *reason)
{
    (void)reason;
    if (!atomic_load(&gp.armed)) return;
    /* one dump at a time with the triggers' */
    pm_hunt_busy_take(&gp.busy);
    gp_fire(&gp, "dump");
    atomic_store(&gp.busy, 0);
}

/* The legacy text of the live profile in a malloc'd string (the caller
 * frees it), as gperftools returns it; NULL when it cannot be made. */
PM_EXPORT char *GetHeapProfile(void)
{
    pm_init();
    int fd = pm_os_memfd("profmalloc-heap");
    if (fd < 0) return NULL;
    char *text = NULL;
    if (profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_LEGACY) == 0) {
        int64_t len = pm_os_seek(fd, 0, SEEK_END);
        if (len >= 0 && pm_os_seek(fd, 0, SEEK_SET) == 0 && (text = malloc((size_t)len + 1))) {
            size_t got = 0;
            while (got < (size_t)len) {
                ssize_t r = pm_os_read(fd, text + got, (size_t)len - got);
                if (r <= 0) break;
                got += (size_t)r;
            }
            text[got] = 0;
        }
    }
    int saved = errno;
    pm_os_close(fd);
    errno = saved;
    return text;
}

/* ---- <gperftools/malloc_extension_c.h> ---------------------------------- */

PM_EXPORT int MallocExtension_GetNumericProperty(const char *property, size_t *value)
{
    if (!property || !value) return 0;
    profmalloc_stats_t s;
    pm_stats_collect(&s);
    static const struct { const char *name; size_t off; } props[] = {
        {"generic.current_allocated_bytes", offsetof(profmalloc_stats_t, in_use)},
        {"generic.heap_size", offsetof(profmalloc_stats_t, resident_estimate)},
        {"generic.total_physical_bytes", offsetof(profmalloc_stats_t, resident_estimate)},
        {"tcmalloc.pageheap_free_bytes", offsetof(profmalloc_stats_t, pageheap_free)},
        {"tcmalloc.pageheap_unmapped_bytes", offsetof(profmalloc_stats_t, released)},
        {"tcmalloc.thread_cache_free_bytes", offsetof(profmalloc_stats_t, thread_cache)},
        {"tcmalloc.current_total_thread_cache_bytes", offsetof(profmalloc_stats_t, thread_cache)},
        {"tcmalloc.central_cache_free_bytes", offsetof(profmalloc_stats_t, central_cache)},
        {"tcmalloc.metadata_bytes", offsetof(profmalloc_stats_t, metadata)},
    };
    for (size_t i = 0; i < PM_ARRAY_LEN(props); i++)
        if (pm_fmt_streq(property, props[i].name)) {
            *value = (size_t)*(const uint64_t *)((const char *)&s + props[i].off);
            return 1;
        }
    if (pm_fmt_streq(property, "tcmalloc.max_total_thread_cache_bytes")) {
        *value = (size_t)pm_options.tcache_bytes;
        return 1;
    }
    return 0;
}

PM_EXPORT void MallocExtension_ReleaseFreeMemory(void) { profmalloc_release_free_memory(); }

PM_EXPORT void MallocExtension_ReleaseToSystem(size_t num_bytes)
{
    (void)num_bytes; /* at least that much: all of it */
    profmalloc_release_free_memory();
}

PM_EXPORT size_t MallocExtension_GetAllocatedSize(const void *p) { return p ? pm_usable_size(p) : 0; }

PM_EXPORT size_t MallocExtension_GetEstimatedAllocatedSize(size_t size)
{
    pm_init();
    if (size <= PM_MAX_SMALL) return pm_class_size[pm_sizeclass_of(size ? size : 1)];
    return (size + PM_PAGE_SIZE - 1) & ~(size_t)(PM_PAGE_SIZE - 1);
}
