/* deepbind.c — dlopen and dlmopen (LM_ID_BASE) without RTLD_DEEPBIND: a
 * library opened with the flag would bind free() to the C library's and
 * abort on the first block of ours it frees, and glibc's __free_hook, the
 * old way around it, is gone.  PROFMALLOC_KEEP_DEEPBIND=1 keeps the flag.
 * Must never: call the real dlopen other than as a tail jump, since it
 * reads the caller's RUNPATH and $ORIGIN from its return address (musttail
 * under clang, sibling calls at -O2 under gcc); a new namespace is left
 * alone (it has a malloc of its own).  No lock.  Linked into the shared
 * library only.  test/integration/deepbind.c pins both. */
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
