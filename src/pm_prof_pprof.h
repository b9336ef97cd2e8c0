/* pm_prof_pprof.h — the profile writers (prof_pprof.c): a heap snapshot
 * formatted as pprof profile.proto (gzip container, Go's heap layout) or
 * as gperftools' legacy heap text.  Never allocates with malloc.  The one
 * lock they take is prof_symbols.c's phdr_lock, across dl_iterate_phdr.
 * Call them after every allocator and profiler lock is dropped. */
#ifndef PM_PROF_PPROF_H
#define PM_PROF_PPROF_H

#include "pm_prof_types.h"

/* Writes snapshot s to fd in format PROFMALLOC_FORMAT_PPROF (gzip'd
 * profile.proto, Go heap layout) or PROFMALLOC_FORMAT_LEGACY (gperftools
 * heap_v2 text).  Returns 0, or -1 with errno set (EINVAL for a bad
 * argument, ENOMEM when scratch memory cannot be mapped, or write(2)'s). */
int pm_pprof_write(int fd, const pm_prof_snapshot_t *s, int format);

#endif
