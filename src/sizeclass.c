/* sizeclass.c — the size-class table, computed once at init: 16..128 in
 * steps of 16, then 8 classes per doubling up to 256 KiB (at most 12.5 %
 * internal waste above 128 bytes); a class's span is the fewest pages with
 * at most 1/8 at its tail, since one live object pins its span; batch is
 * 64 KiB / size, clamped to 2..32.  test_sizeclass_table checks the rules;
 * doc/design.md prints the table (make sizeclass-table).
 * Written only during init; read-only afterwards, no lock. */
#include "pm_internal.h"

uint8_t pm_class_index[PM_CLASS_SLOTS];
uint32_t pm_class_size[PM_CLASS_MAX];
uint16_t pm_class_pages[PM_CLASS_MAX];
uint16_t pm_class_batch[PM_CLASS_MAX];
uint64_t pm_free_magic[256];
uint8_t pm_align_class[PM_ALIGN_CLASSES][PM_CLASS_MAX];
uint32_t pm_class_count;

static size_t pages_for(size_t size)
{
    size_t n = (size + PM_PAGE_SIZE - 1) / PM_PAGE_SIZE;
    for (;; n++) {
        size_t bytes = n * PM_PAGE_SIZE;
        if (bytes % size <= bytes / 8) return n;
    }
}

void pm_sizeclass_init(void)
{
    unsigned c = 1;
    size_t size = 16;
    while (size <= PM_MAX_SMALL) {
        pm_class_size[c] = (uint32_t)size;
        pm_class_pages[c] = (uint16_t)pages_for(size);
        pm_free_magic[c] = UINT64_MAX / size + 1;
        PM_CHECK(pm_class_pages[c] < 256, "span too long for the page index");
        size_t batch = (64 * 1024) / size;
        pm_class_batch[c] = (uint16_t)(batch < 2 ? 2 : batch > 32 ? 32 : batch);
        c++;
        size_t step = 16;
        if (size >= 128) {
            size_t p2 = 128;
            while (p2 * 2 <= size) p2 *= 2;
            step = p2 / 8;
        }
        size += step;
    }
    pm_class_count = c;
    PM_CHECK(c <= PM_CLASS_MAX, "size-class table overflow");
    /* every slot maps to the smallest class that holds its largest size */
    unsigned cls = 1;
    for (size_t slot = 0; slot < PM_CLASS_SLOTS; slot++) {
        if (slot > 64 && slot <= 128) continue; /* no size maps here */
        size_t max = slot <= 64 ? slot * 16 : (slot - 120) << 7;
        while (pm_class_size[cls] < max) cls++;
        pm_class_index[slot] = (uint8_t)cls;
    }
    for (unsigned a = 0; a < PM_ALIGN_CLASSES; a++) {
        unsigned next = 0;
        for (unsigned k = c - 1; k >= 1; k--) {
            if (!(pm_class_size[k] & (((uint32_t)32 << a) - 1))) next = k;
            pm_align_class[a][k] = (uint8_t)next;
        }
    }
}
