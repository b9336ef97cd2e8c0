/* init.c — the process state's life: lazy, idempotent, thread-safe init
 * on the first slow path (the dynamic loader and other libraries'
 * constructors may call malloc before any constructor of ours), the fork
 * handlers, and the exit-time dump.
 * Init takes no lock of the allocator and calls nothing that allocates;
 * pthread_atfork is registered only after init is complete, so that even
 * an allocating pthread_atfork would find a working allocator.
 * Fork: the prepare handler takes every allocator lock in the one fixed
 * order of doc/design.md; parent and child release them (the child by
 * resetting, since it is the only thread left).  A process that never
 * started a thread has no other that could hold one, and takes none. */
#include "pm_internal.h"
#include "pm_hunt.h"
#include "pm_prof_unwind.h"
#include "pm_prof_symbols.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/single_threaded.h>

_Atomic int pm_init_state;
static _Atomic int atfork_registered;

/* Whether fork_prepare took the locks.  Not where glibc says the process
 * never started a thread (its malloc counts on the same flag): writing
 * each lock word after the fork cost a copy-on-write fault on both sides,
 * 25 a fork (test_api: test_fork_single_threaded_writes_no_locks). */
static int fork_locked;

static void fork_prepare(void)
{
    fork_locked = !__libc_single_threaded;
    if (!fork_locked) return;
    pm_hunt_lock_all();
    pm_symbols_lock_all();
    pm_tcache_lock_all();
    pm_sites_lock_all();
    pm_central_lock_all();
    pm_pageheap_lock_all();
    pm_meta_lock_all();
}

static void fork_release(int child)
{
    if (!fork_locked) {
        if (child) pm_hunt_child();
        return;
    }
    pm_meta_unlock_all(child);
    pm_pageheap_unlock_all(child);
    pm_central_unlock_all(child);
    pm_dump_unlock_all(child);
    pm_sites_unlock_all(child);
    pm_tcache_unlock_all(child);
    pm_symbols_unlock_all(child);
    pm_hunt_unlock_all(child);
}

static void fork_parent(void) { fork_release(0); }
static void fork_child(void) { fork_release(1); }

/* What libc_nonshared.a's pthread_atfork does, called here: that stub is
 * linked after the library's code, at the far end of its cold part, where
 * its one call would fault in 64 KiB of code no small program runs
 * (check-text-resident). */
extern int __register_atfork(void (*)(void), void (*)(void), void (*)(void), void *);
extern void *__dso_handle __attribute__((visibility("hidden")));

void pm_init_slow(void)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&pm_init_state, &expected, 1)) {
        pm_guard_init(); /* before any block exists */
        pm_options_load();
        pm_sampler_set_rate(pm_options.sample_rate);
        pm_sizeclass_init();
        pm_tcache_init();
        pm_sites_init();
        pm_hunt_init();
        atomic_store_explicit(&pm_init_state, 2, memory_order_release);
        if (!atomic_exchange(&atfork_registered, 1))
            __register_atfork(fork_prepare, fork_parent, fork_child, __dso_handle);
        return;
    }
    while (atomic_load_explicit(&pm_init_state, memory_order_acquire) != 2) pm_os_yield();
}

/* override.c's malloc (absent from the unit tests' core-only archive). */
extern void *pm_malloc_here(size_t) __attribute__((weak, visibility("hidden")));

/* Linked into a shared library that the executable loads after the C
 * library (program -> libfoo.so -> libprofmalloc.so), or preloaded behind
 * another allocator, profmalloc's malloc never runs: the program's calls
 * bind to the first malloc in load order.  Say so once, instead of
 * silently profiling nothing.  The test is what a call of the program's
 * malloc returns (through the GOT, as the program calls it), not whose
 * address it is: a preloaded wrapper in front that forwards to profmalloc
 * (libc_malloc_debug, a dlsym(RTLD_NEXT) counter) is fine. */
static void check_interposed(void)
{
    if (!pm_malloc_here) return;
    void *(*volatile bound)(size_t) = malloc;
    void (*volatile release)(void *) = free;
    if (bound == pm_malloc_here) return;
    void *p = bound(1);
    uintptr_t page = (uintptr_t)p >> PM_PAGE_SHIFT;
    int ours = p && pm_pagemap_span(page) != NULL;
    release(p);
    if (!ours)
        pm_os_message("loaded after another malloc, which the program uses instead; "
                      "link profmalloc into the executable (-Wl,--no-as-needed -lprofmalloc) "
                      "or LD_PRELOAD it");
}

/* Runs before main in a program linked with profmalloc; harmless when
 * malloc already ran.  Priority 101, the first: linked into a static
 * executable, this runs before the program's own constructors (C++ static
 * initialisers), whose samples need the unwind table built here. */
__attribute__((constructor(101))) static void init_at_load(void)
{
    pm_init();
    /* the loader's blocks from our own dlopen are not the program's: not
     * sampled, so no leak report names them (test_leak_report_names_only_the_leak) */
    pm_tcache_t *t = &pm_tls;
    uint8_t was = t->in_profiler;
    t->in_profiler = 1;
    pm_objects_pin_loaded();
    t->in_profiler = was;
    check_interposed();
    pm_http_autostart();
}

__attribute__((destructor)) static void at_exit(void)
{
    if (atomic_load(&pm_init_state) == 2) {
        pm_dump_at_exit();
        pm_hunt_at_exit();
    }
}
