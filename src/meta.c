/* meta.c — metadata memory (spans, sample records, site buckets) carved
 * from mmap'd chunks; never from malloc, never returned.
 * Must never: make the mmap syscall while holding its lock — a chunk is
 * mapped first and installed under the lock afterwards.
 * Lock: meta_lock guards the bump pointer; it is a leaf lock (taken last). */
#include "pm_internal.h"

#define CHUNK ((size_t)1 << 20)

static pm_lock_t meta_lock = PM_LOCK_INIT;
static char *bump, *limit;         /* current chunk: [bump, limit) is free */
static _Atomic uint64_t mapped;

void *pm_meta_alloc(size_t size)
{
    size = (size + 15) & ~(size_t)15;
    for (;;) {
        pm_lock(&meta_lock);
        if ((size_t)(limit - bump) >= size) {
            void *p = bump;
            bump += size;
            pm_unlock(&meta_lock);
            return p;
        }
        pm_unlock(&meta_lock);
        size_t want = size > CHUNK ? size : CHUNK;
        char *chunk = pm_os_map(want, 0);
        if (!chunk) return NULL;
        pm_relaxed_add(&mapped, want);
        pm_lock(&meta_lock);
        /* Another thread may have installed a chunk meanwhile; keep the one
         * with more room and let the rest of the other go. */
        if ((size_t)(limit - bump) < want) {
            bump = chunk;
            limit = chunk + want;
        } else if (want >= size) {
            pm_unlock(&meta_lock);
            return chunk; /* rare: use the new chunk for this request only */
        }
        pm_unlock(&meta_lock);
    }
}

uint64_t pm_meta_bytes(void) { return pm_relaxed_load(&mapped); }

void pm_meta_lock_all(void) { pm_lock(&meta_lock); }

void pm_meta_unlock_all(int child)
{
    if (child) pm_lock_reset(&meta_lock);
    else pm_unlock(&meta_lock);
}
