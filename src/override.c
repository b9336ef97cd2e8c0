/* override.c — the C library's allocation names, mapped onto pm_*.
 * Nothing else lives here, so the test archive (built without this file)
 * exercises the allocator through pm_* while the test program itself
 * still runs on glibc's malloc.  malloc and free inline the fast paths. */
#include "pm_fastpath.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>

PM_EXPORT void *malloc(size_t size) { return pm_malloc_inline(size); }
/* this file's malloc, whichever one the program's references bind to
 * (gcc's copy attribute repeats malloc's own attributes; clang has none) */
#define PM_COPY_ATTRS(f)
#ifdef __has_attribute
#if __has_attribute(copy)
#undef PM_COPY_ATTRS
#define PM_COPY_ATTRS(f) , copy(f)
#endif
#endif
extern __typeof__(malloc) pm_malloc_here
    __attribute__((alias("malloc"), visibility("hidden") PM_COPY_ATTRS(malloc)));
PM_EXPORT void free(void *p) { pm_free_inline(p); }
PM_EXPORT void *calloc(size_t n, size_t size) { return pm_calloc(n, size); }
PM_EXPORT void *realloc(void *p, size_t size) { return pm_realloc(p, size); }
PM_EXPORT void *reallocarray(void *p, size_t n, size_t size) { return pm_reallocarray(p, n, size); }
PM_EXPORT int posix_memalign(void **out, size_t align, size_t size) { return pm_posix_memalign(out, align, size); }
PM_EXPORT void *aligned_alloc(size_t align, size_t size) { return pm_aligned_alloc(align, size); }
PM_EXPORT void *memalign(size_t align, size_t size) { return pm_memalign(align, size); }
PM_EXPORT void *valloc(size_t size) { return pm_valloc(size); }
PM_EXPORT void *pvalloc(size_t size) { return pm_pvalloc(size); }
PM_EXPORT size_t malloc_usable_size(void *p) { return pm_usable_size(p); }
PM_EXPORT void free_sized(void *p, size_t size) { (void)size; pm_free_inline(p); }
PM_EXPORT void free_aligned_sized(void *p, size_t align, size_t size)
{
    (void)align;
    (void)size;
    pm_free_inline(p);
}
PM_EXPORT int malloc_trim(size_t pad) { return pm_malloc_trim(pad); }
PM_EXPORT int mallopt(int param, int value) { return pm_mallopt(param, value); }
PM_EXPORT void malloc_stats(void) { pm_malloc_stats(); }
PM_EXPORT struct mallinfo2 mallinfo2(void) { return pm_mallinfo2(); }
PM_EXPORT int malloc_info(int options, FILE *fp) { return pm_malloc_info(options, fp); }

static int clamp_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

PM_EXPORT struct mallinfo mallinfo(void)
{
    struct mallinfo2 m = pm_mallinfo2();
    return (struct mallinfo){
        .arena = clamp_int(m.arena), .ordblks = clamp_int(m.ordblks),
        .smblks = clamp_int(m.smblks), .hblks = clamp_int(m.hblks),
        .hblkhd = clamp_int(m.hblkhd), .usmblks = clamp_int(m.usmblks),
        .fsmblks = clamp_int(m.fsmblks), .uordblks = clamp_int(m.uordblks),
        .fordblks = clamp_int(m.fordblks), .keepcost = clamp_int(m.keepcost)};
}

/* glibc's internal entry points, which some programs and libraries call.
 * (An alias cannot repeat the declaration attributes of its target.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#endif
PM_EXPORT void *__libc_malloc(size_t) __attribute__((alias("malloc")));
PM_EXPORT void __libc_free(void *) __attribute__((alias("free")));
PM_EXPORT void *__libc_calloc(size_t, size_t) __attribute__((alias("calloc")));
PM_EXPORT void *__libc_realloc(void *, size_t) __attribute__((alias("realloc")));
PM_EXPORT void *__libc_memalign(size_t, size_t) __attribute__((alias("memalign")));
PM_EXPORT void *__libc_valloc(size_t) __attribute__((alias("valloc")));
PM_EXPORT void *__libc_pvalloc(size_t) __attribute__((alias("pvalloc")));
PM_EXPORT int __posix_memalign(void **, size_t, size_t) __attribute__((alias("posix_memalign")));
