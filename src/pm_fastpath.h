/* pm_fastpath.h — the malloc and free fast paths, inlined into the libc
 * names (override.c) and the malloc family (alloc.c), the only two files
 * that include it, so no file below alloc.c can call up into them.  They
 * take no lock and call nothing but their slow twins in alloc.c.
 * Their cost per malloc+free pair is measured by bench/count-instructions.sh
 * (doc/performance.md gives today's figure, doc/hardening.md what the free
 * key added to it); no other change may raise it.
 *
 * A block in a thread cache's list holds the next block in its first word
 * (encoded in the hardened build) and the free key in its second
 * (pm_internal.h, guard.c): free sends a block whose key is set to
 * pm_free_slow, which aborts, however the block was freed before
 * (test_harden: test_double_free_same_class); malloc erases the key. */
#ifndef PM_FASTPATH_H
#define PM_FASTPATH_H

#include "pm_internal.h"

/* A block of class cls off the thread's list for a request of size bytes,
 * or NULL, the sampler charged either way (the slow path refunds it). */
PM_INLINE void *pm_tcache_pop_inline(unsigned cls, size_t size)
{
    pm_tcache_t *t = &pm_tls;
    pm_tlist_t *l = &t->list[cls];
    void *p = l->head;
    /* charged first, in one read-modify-write: the slow path knows */
    int lasts = pm_sampler_charge(&t->sampler, size);
    if (PM_LIKELY(p != NULL && lasts)) {
        void *next = pm_link_next(p, 0);
        l->head = next;
        l->len--;
        pm_key_clear(p);
        /* The next block's line may sit in another core's cache (a refill
         * from another thread's frees): its miss then overlaps the caller's
         * work instead of the next malloc's (bench/prodcons). */
        __builtin_prefetch(next, 1);
        return p;
    }
    return NULL;
}

PM_INLINE void *pm_malloc_inline(size_t size)
{
    if (pm_config_debug) return pm_alloc_slow(size); /* checks every link */
    /* sizes up to 1 KiB take one compare to their class */
    if (PM_UNLIKELY(size > 1024) && size > PM_MAX_SMALL) return pm_alloc_slow(size);
    void *p = pm_tcache_pop_inline(pm_sizeclass_of(size), size);
    if (PM_LIKELY(p != NULL)) return p;
    return pm_alloc_slow_charged(size);
}

PM_INLINE void pm_free_inline(void *p)
{
    if (pm_config_debug) {
        pm_free_slow(p); /* looks for p in its thread's list */
        return;
    }
    uintptr_t a = (uintptr_t)p;
    pm_leaf_t *leaf;
    if (PM_LIKELY(a >> PM_ZONE_SHIFT == atomic_load_explicit(&pm_leaf_hint.key, memory_order_acquire))) {
        leaf = pm_leaf_hint.leaf;
        if (!leaf) __builtin_unreachable(); /* set before the key */
    } else
        leaf = pm_pagemap_leaf(a >> PM_PAGE_SHIFT);
    if (PM_LIKELY(leaf != NULL)) {
        /* a small block on a page without samples, at an object's start */
        unsigned cls;
        if (PM_LIKELY(pm_small_object_at(leaf, a, &cls))) {
            pm_tlist_t *l = &pm_tls.list[cls];
            uintptr_t key = pm_guard.key; /* loaded once: the stores below may alias it */
            if (PM_LIKELY(l->len < l->max_len && ((uintptr_t *)p)[1] != key)) {
                pm_link_set(p, l->head);
                pm_key_store(p, key);
                l->head = p;
                l->len++;
                return;
            }
        }
    }
    pm_free_slow(p);
}

#endif
