/* deepbind.c — dlopen without RTLD_DEEPBIND, so that a library opened with
 * it still frees with profmalloc.
 * A library opened with RTLD_DEEPBIND looks its symbols up in itself and
 * its own dependencies before the global scope: its free() is the C
 * library's, and the first block it frees that our malloc returned ends in
 * glibc's "free(): invalid pointer" (Debian 12's php opens its extensions
 * so: `php -v` died at start-up).  Every preloaded allocator has this
 * problem (jemalloc, tcmalloc, mimalloc here); the fix they used, glibc's
 * __free_hook, is gone since glibc 2.34.  So profmalloc's dlopen drops the
 * flag: the library then binds free() and the rest to profmalloc, as
 * every library loaded at start-up does (PHP itself stopped passing the
 * flag when dlmopen is available, for this reason).  The library loses
 * only its priority over the global scope for its other symbols.
 * The real dlopen must see the caller's return address: it looks a bare
 * name up in the calling object's DT_RUNPATH.  So the call is the last
 * thing this function does, compiled as a jump (test/integration/deepbind
 * checks a program whose RUNPATH alone finds its plugin).
 * Linked into libprofmalloc.so only: a static program's dlopen is libc.a's. */
#include "pm_internal.h"

#include <dlfcn.h>
#include <stdatomic.h>

typedef void *dlopen_fn(const char *, int);

static _Atomic(dlopen_fn *) next_dlopen;

/* The dlopen the program would have called without us (the C library's).
 * dlsym may allocate: fine here, outside every allocator path. */
__attribute__((noinline, cold)) static dlopen_fn *find_next(void)
{
    dlopen_fn *f = (dlopen_fn *)dlsym(RTLD_NEXT, "dlopen");
    if (f) atomic_store_explicit(&next_dlopen, f, memory_order_relaxed);
    return f;
}

#ifdef __has_attribute
#if __has_attribute(musttail)
#define PM_MUSTTAIL __attribute__((musttail))
#endif
#endif
#ifndef PM_MUSTTAIL
#define PM_MUSTTAIL
#endif

PM_EXPORT void *dlopen(const char *file, int mode)
{
    dlopen_fn *f = atomic_load_explicit(&next_dlopen, memory_order_relaxed);
    if (PM_UNLIKELY(f == NULL)) f = find_next();
    if (PM_UNLIKELY(f == NULL)) return NULL; /* dlerror() says why */
    PM_MUSTTAIL return f(file, mode & ~RTLD_DEEPBIND);
}
