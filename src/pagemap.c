/* pagemap.c — a two-level radix tree from page number to span, with a
 * parallel 16-bit word per page holding the size class and the page's
 * index in its span, so free() checks a small block with two loads.  Leaves (2.25 MiB of address space each,
 * touched sparsely) come from mmap and are published with a CAS, so
 * lookups take no lock and never see a half-built leaf.
 * Entries are written by the page heap (under its lock) and the central
 * lists (for pages of spans they own); readers race benignly. */
#include "pm_internal.h"

PM_SPARSE_BSS pm_leaf_t *_Atomic pm_pagemap_root[1 << PM_ROOT_BITS];
static _Atomic uint64_t leaf_bytes;

/* The first leaf made is the heap's first zone, which it fills downward
 * from the zone's top (os_linux.c, first_hint): a leaf that free finds
 * without reading the root, whose line depends on the block's address
 * (bench/fastpath -m pairs -z 64: 7.2 -> 6.2 ns; test_pagemap_leaf_hint). */
pm_leaf_hint_t pm_leaf_hint = {UINTPTR_MAX, NULL};

static PM_COLD void hint_leaf(uintptr_t key, pm_leaf_t *leaf)
{
    if (__atomic_load_n(&pm_leaf_hint.leaf, __ATOMIC_RELAXED)) return;
    pm_leaf_t *none = NULL;
    if (__atomic_compare_exchange_n(&pm_leaf_hint.leaf, &none, leaf, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        atomic_store_explicit(&pm_leaf_hint.key, key, memory_order_release);
}

#define LEAF_MASK ((1u << PM_LEAF_BITS) - 1)

int pm_pagemap_ensure(uintptr_t page, size_t n)
{
    for (uintptr_t key = page >> PM_LEAF_BITS; key <= (page + n - 1) >> PM_LEAF_BITS; key++) {
        if (key >> PM_ROOT_BITS) return -1;
        if (atomic_load_explicit(&pm_pagemap_root[key], memory_order_acquire)) continue;
        pm_leaf_t *leaf = pm_os_map(sizeof(pm_leaf_t), 0);
        if (!leaf) return -1;
        pm_leaf_t *expected = NULL;
        if (atomic_compare_exchange_strong(&pm_pagemap_root[key], &expected, leaf)) {
            pm_relaxed_add(&leaf_bytes, sizeof(pm_leaf_t));
            hint_leaf(key, leaf);
        } else
            pm_os_unmap(leaf, sizeof(pm_leaf_t));
    }
    return 0;
}

int pm_pagemap_ensure_from(uintptr_t page, size_t n, pm_leaf_t **spares, size_t nspares)
{
    for (uintptr_t key = page >> PM_LEAF_BITS; key <= (page + n - 1) >> PM_LEAF_BITS; key++) {
        if (key >> PM_ROOT_BITS) return -1;
        if (atomic_load_explicit(&pm_pagemap_root[key], memory_order_acquire)) continue;
        size_t i = 0;
        while (i < nspares && !spares[i]) i++;
        if (i == nspares) return -1;
        pm_leaf_t *expected = NULL;
        if (atomic_compare_exchange_strong(&pm_pagemap_root[key], &expected, spares[i])) {
            pm_relaxed_add(&leaf_bytes, sizeof(pm_leaf_t));
            hint_leaf(key, spares[i]);
            spares[i] = NULL;
        }
    }
    return 0;
}

void pm_pagemap_set_span(uintptr_t page, pm_span_t *s)
{
    __atomic_store_n(&pm_pagemap_leaf(page)->span[page & LEAF_MASK], s, __ATOMIC_RELAXED);
}

void pm_pagemap_set_class(uintptr_t page, size_t n, uint8_t cls)
{
    for (size_t i = 0; i < n; i++) {
        pm_leaf_t *leaf = pm_pagemap_leaf(page + i);
        uint16_t info = cls ? (uint16_t)(cls | i << 8) : 0;
        atomic_store_explicit((_Atomic uint16_t *)&leaf->info[(page + i) & LEAF_MASK], info,
                              memory_order_relaxed);
    }
}

void pm_pagemap_add_class(uintptr_t page, size_t index, uint8_t cls)
{
    _Atomic uint16_t *info = (_Atomic uint16_t *)&pm_pagemap_leaf(page)->info[page & LEAF_MASK];
    atomic_fetch_or_explicit(info, (uint16_t)(cls | index << 8), memory_order_relaxed);
}

void pm_pagemap_mark_sampled(uintptr_t page, int on)
{
    _Atomic uint16_t *info = (_Atomic uint16_t *)&pm_pagemap_leaf(page)->info[page & LEAF_MASK];
    if (on) atomic_fetch_or_explicit(info, PM_SAMPLED_PAGE, memory_order_relaxed);
    else atomic_fetch_and_explicit(info, (uint16_t)~PM_SAMPLED_PAGE, memory_order_relaxed);
}

uint64_t pm_pagemap_bytes(void) { return pm_relaxed_load(&leaf_bytes); }

/* Here, below central.c, because central.c checks every link it follows
 * with these in the debug build and calls go down the ladder only
 * (test_debug.c: test_corrupted_transfer_chain, test_write_after_free). */
int pm_is_carved_object(const void *p, unsigned cls)
{
    uintptr_t page = (uintptr_t)p >> PM_PAGE_SHIFT;
    pm_span_t *s = pm_pagemap_span(page);
    return s && s->state == PM_SPAN_IN_USE && s->cls == cls && page >= s->page &&
           pm_span_cut_object(s, p);
}

void pm_bad_link(int in_free, const void *link)
{
    pm_os_fatal(in_free ? "free(): corrupted free list (a block written after free?), link"
                        : "malloc(): corrupted free list (a block written after free?), link",
                link, 1);
}
