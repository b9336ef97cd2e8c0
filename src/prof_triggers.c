/* prof_triggers.c — dumps on a trigger: every N bytes allocated, each time
 * the high-water mark of live bytes rises by N, every T seconds, on a
 * signal (PROFMALLOC_DUMP_*; gperftools' HEAPPROFILE set uses the same
 * engine, prof_gperftools.c).  Checked after each sampled allocation
 * (pm_hunt_sampled), never on the fast path; the signal handler only sets a
 * flag, which the next sampled allocation acts on.
 * Must never: dump under a lock.  One dump at a time per set (an atomic
 * flag, not a lock: a thread that finds it taken goes on, and the
 * condition still holds at its next sample). */
#include "pm_hunt.h"
#include "pm_triggers.h"

#include <errno.h>
#include <signal.h>

/* Signals received, counted by number: each trigger set keeps the count it
 * last acted on, so two sets on one signal both see it. */
static _Atomic uint64_t received[65];

static void on_signal(int sig)
{
    if (sig > 0 && sig < 65) atomic_fetch_add_explicit(&received[sig], 1, memory_order_relaxed);
}

int pm_trigger_watch_signal(int sig)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}

static uint64_t next_multiple(uint64_t v, uint64_t n) { return (v / n + 1) * n; }

void pm_trigger_arm(pm_trigger_t *t)
{
    if (t->every_bytes) t->next_bytes = t->every_bytes;
    if (t->every_inuse) t->next_inuse = t->every_inuse;
    t->next_ns = t->every_ns ? pm_os_monotonic_ns() + t->every_ns : 0;
    if (t->signal) {
        t->signals_seen = atomic_load(&received[t->signal]);
        pm_trigger_watch_signal(t->signal);
    }
    atomic_store(&t->armed, 1);
}

/* Which trigger has fired (advancing it), or NULL. */
static const char *due(pm_trigger_t *t, uint64_t alloc, uint64_t live)
{
    if (t->signal) {
        uint64_t n = atomic_load_explicit(&received[t->signal], memory_order_relaxed);
        if (n != t->signals_seen) {
            t->signals_seen = n;
            return "signal";
        }
    }
    if (t->gperftools) { /* gperftools' own rule: one last-dump point for all */
        const char *why = NULL;
        if (t->every_bytes && alloc >= t->last_alloc + t->every_bytes) why = "bytes";
        else if (t->every_inuse && live > t->high_water + t->every_inuse) why = "inuse";
        else if (t->every_ns && pm_os_monotonic_ns() >= t->next_ns) why = "seconds";
        return why;
    }
    if (t->every_bytes && alloc >= t->next_bytes) {
        t->next_bytes = next_multiple(alloc, t->every_bytes);
        return "bytes";
    }
    if (t->every_inuse && live >= t->next_inuse) {
        t->next_inuse = next_multiple(live, t->every_inuse);
        return "inuse";
    }
    if (t->every_ns) {
        uint64_t now = pm_os_monotonic_ns();
        if (now >= t->next_ns) {
            t->next_ns = now + t->every_ns;
            return "seconds";
        }
    }
    return NULL;
}

void pm_trigger_check(pm_trigger_t *t, uint64_t alloc, uint64_t live)
{
    if (!atomic_load_explicit(&t->armed, memory_order_relaxed)) return;
    /* a look without the flag first: most samples fire nothing */
    int maybe = (t->signal && atomic_load_explicit(&received[t->signal], memory_order_relaxed) != t->signals_seen) ||
                (t->every_bytes && alloc >= (t->gperftools ? t->last_alloc + t->every_bytes : t->next_bytes)) ||
                (t->every_inuse && (t->gperftools ? live > t->high_water + t->every_inuse : live >= t->next_inuse)) ||
                t->every_ns;
    if (!maybe) return;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&t->busy, &idle, 1)) return;
    const char *why = atomic_load(&t->armed) ? due(t, alloc, live) : NULL;
    if (why) {
        t->fire(t, why);
        if (t->gperftools) {
            t->last_alloc = alloc;
            if (live > t->high_water) t->high_water = live;
            if (t->every_ns) t->next_ns = pm_os_monotonic_ns() + t->every_ns;
        }
    }
    atomic_store(&t->busy, 0);
}

/* ---- PROFMALLOC_DUMP_EVERY_* and PROFMALLOC_DUMP_SIGNAL -------------- */

static pm_trigger_t own;
static _Atomic uint64_t own_seq;

/* <prefix>.<pid>.<seq>.<kind>.pb.gz */
static void own_fire(pm_trigger_t *t, const char *kind)
{
    enum { CAP = 4096 };
    char *mem = pm_os_map(2 * CAP, 0);
    if (!mem) return;
    char *path = mem + CAP;
    if (pm_dump_expand(pm_options.dump_prefix ? pm_options.dump_prefix : "profmalloc", mem, CAP) == 0) {
        pm_buf_t b;
        pm_buf_init(&b, path, CAP - 1, -1);
        pm_buf_str(&b, mem);
        pm_buf_str(&b, ".");
        pm_buf_u64(&b, (uint64_t)pm_os_getpid());
        pm_buf_str(&b, ".");
        pm_buf_u64(&b, atomic_fetch_add(&own_seq, 1) + 1);
        pm_buf_str(&b, ".");
        pm_buf_str(&b, kind);
        pm_buf_str(&b, ".pb.gz");
        path[b.len] = 0;
        int saved = errno;
        if (b.truncated || pm_dump_view(path, PROFMALLOC_FORMAT_PPROF, NULL) != 0) {
            if (!t->complained++) pm_os_message("PROFMALLOC_DUMP_EVERY_*: could not write a triggered dump");
        }
        errno = saved;
    }
    pm_os_unmap(mem, 2 * CAP);
}

void pm_triggers_init(void)
{
    own.every_bytes = pm_options.every_bytes;
    own.every_inuse = pm_options.every_inuse;
    own.every_ns = pm_options.every_seconds * 1000000000ull;
    own.signal = (int)pm_options.dump_signal;
    own.fire = own_fire;
    if (own.every_bytes || own.every_inuse || own.every_ns || own.signal) pm_trigger_arm(&own);
}

void pm_triggers_child(void) { atomic_store(&own.busy, 0); }

void pm_triggers_tick(uint64_t alloc_bytes, uint64_t live_bytes) { pm_trigger_check(&own, alloc_bytes, live_bytes); }
