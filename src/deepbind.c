/* deepbind.c — dlopen and dlmopen without RTLD_DEEPBIND, so that a library
 * opened with it still frees with profmalloc.
 * A library opened with RTLD_DEEPBIND looks its symbols up in itself and
 * its own dependencies before the global scope: its free() is the C
 * library's, and the first block it frees that our malloc returned ends in
 * glibc's "free(): invalid pointer" (or "invalid size", or a crash): Debian
 * 12's php opens its extensions so, and `php -v` died at start-up.  Every
 * preloaded allocator has this problem (jemalloc, tcmalloc, mimalloc here);
 * the fix they used, glibc's __free_hook, is gone since glibc 2.34.  So
 * profmalloc's dlopen drops the flag: the library then binds free() and
 * the rest to profmalloc, as
 * every library loaded at start-up does (PHP itself stopped passing the
 * flag when dlmopen is available, for this reason).  What the library
 * loses is the priority of its own symbols (and its dependencies') over
 * those of the global scope: a program that opens a plugin with the flag
 * to give it its own version of a library the program also uses sets
 * PROFMALLOC_KEEP_DEEPBIND=1, and must then keep blocks from crossing.
 * dlmopen into a new namespace is left alone: that namespace has a C
 * library, and a malloc, of its own.
 * The real dlopen must see the caller's return address: it looks a bare
 * name up in the calling object's DT_RUNPATH or DT_RPATH, and expands
 * $ORIGIN from it.  So each wrapper's last act is a jump to it (musttail
 * under clang; under gcc, the function is built at -O2 with sibling calls
 * whatever the build's flags), and test/integration/deepbind.c checks a
 * program whose RUNPATH alone finds its plugin.
 * Linked into libprofmalloc.so only: a static program's dlopen is libc.a's. */
#include "pm_internal.h"

#include <dlfcn.h>
#include <stdatomic.h>

typedef void *dlopen_fn(const char *, int);
typedef void *dlmopen_fn(Lmid_t, const char *, int);

static void *_Atomic next_dlopen, *_Atomic next_dlmopen;

/* The C library's function of that name (the one the program would have
 * called without us), looked up once.  dlsym takes the loader's lock and
 * may call malloc: safe here, as no allocator path and no allocator lock
 * leads to these wrappers (their callers are the program, and needed.c
 * from profmalloc's constructor, after init). */
__attribute__((noinline, cold)) static void *find_next(void *_Atomic *cache, const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f) atomic_store_explicit(cache, f, memory_order_relaxed);
    return f;
}

static inline void *next_fn(void *_Atomic *cache, const char *name)
{
    void *f = atomic_load_explicit(cache, memory_order_relaxed);
    return PM_LIKELY(f != NULL) ? f : find_next(cache, name);
}

__attribute__((noinline, cold)) static int keep_deepbind(void)
{
    pm_init(); /* the options; a library's constructor may call dlopen first */
    return pm_options.keep_deepbind;
}

static inline int mode_for(int mode)
{
    if (!(mode & RTLD_DEEPBIND) || keep_deepbind()) return mode;
    return mode & ~RTLD_DEEPBIND;
}

#define PM_MUSTTAIL
#define PM_SIBCALL
#ifdef __has_attribute
#if __has_attribute(musttail)
#undef PM_MUSTTAIL
#define PM_MUSTTAIL __attribute__((musttail))
#elif defined(__GNUC__) && !defined(__clang__)
#undef PM_SIBCALL
#define PM_SIBCALL __attribute__((optimize("O2", "optimize-sibling-calls")))
#endif
#endif

PM_EXPORT PM_SIBCALL void *dlopen(const char *file, int mode)
{
    dlopen_fn *f = (dlopen_fn *)next_fn(&next_dlopen, "dlopen");
    if (PM_UNLIKELY(f == NULL)) return NULL; /* dlerror() says why */
    PM_MUSTTAIL return f(file, mode_for(mode));
}

PM_EXPORT PM_SIBCALL void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
    dlmopen_fn *f = (dlmopen_fn *)next_fn(&next_dlmopen, "dlmopen");
    if (PM_UNLIKELY(f == NULL)) return NULL;
    PM_MUSTTAIL return f(lmid, file, lmid == LM_ID_BASE ? mode_for(mode) : mode);
}
