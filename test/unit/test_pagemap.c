/* test_pagemap.c — unit tests of src/pagemap.c: spans and class words by page
 * number, on fake pages far from any real mapping. */
#include "core_test.h"

/* ======================================================================
 * pagemap.c  (fake pages far from any real mapping: keys 0x1234/0x1235)
 * ==================================================================== */

#define FAKE_KEY ((uintptr_t)0x1234)

/* Whether a mapping of the process ends at address end. */
static int mapping_ends_at(uintptr_t end)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && hi == end) found = 1;
    }
    fclose(f);
    return found;
}

/* The heap's first mapping ends on a zone boundary, so the heap grows down
 * through one leaf, and that leaf is free's hint (os_linux.c first_hint,
 * pagemap.c pm_leaf_hint); leaves made later leave the hint alone. */
static void test_pagemap_leaf_hint(void **state)
{
    (void)state;
    void *p = pm_malloc(64);
    assert_non_null(p);
    uintptr_t key = (uintptr_t)p >> PM_ZONE_SHIFT;
    assert_int_equal(atomic_load(&pm_leaf_hint.key), key);
    assert_ptr_equal(pm_leaf_hint.leaf, pm_pagemap_leaf((uintptr_t)p >> PM_PAGE_SHIFT));
    if (!mapping_ends_at((key + 1) << PM_ZONE_SHIFT))
        fail_msg("no mapping ends at the top of the heap's zone %#lx", (unsigned long)((key + 1) << PM_ZONE_SHIFT));
    pm_free(p);
    assert_ptr_equal(pm_malloc(64), p); /* freed through the hint into the thread's list */
    pm_free(p);
    assert_int_equal(pm_pagemap_ensure((FAKE_KEY + 2) << PM_LEAF_BITS, 1), 0);
    assert_int_equal(atomic_load(&pm_leaf_hint.key), key);
}

static void test_pagemap_set_and_lookup(void **state)
{
    (void)state;
    uintptr_t first = (FAKE_KEY << PM_LEAF_BITS) - 1; /* last page of leaf 0x1233 */
    uintptr_t second = FAKE_KEY << PM_LEAF_BITS;       /* first page of leaf 0x1234 */
    uintptr_t page = first - 1;                         /* three pages across the boundary */
    int fresh = pm_pagemap_leaf(page) == NULL && pm_pagemap_leaf(second) == NULL;
    uint64_t bytes_before = pm_pagemap_bytes();

    assert_int_equal(pm_pagemap_ensure(page, 3), 0);
    assert_non_null(pm_pagemap_leaf(page));
    assert_non_null(pm_pagemap_leaf(second));
    assert_ptr_not_equal(pm_pagemap_leaf(page), pm_pagemap_leaf(second));
    if (fresh) assert_int_equal(pm_pagemap_bytes() - bytes_before, 2 * sizeof(pm_leaf_t));
    /* ensuring again maps nothing more */
    bytes_before = pm_pagemap_bytes();
    assert_int_equal(pm_pagemap_ensure(page, 3), 0);
    assert_int_equal(pm_pagemap_bytes(), bytes_before);

    /* nothing set yet: NULL and class 0 */
    for (uintptr_t p = page; p < page + 3; p++) {
        assert_null(pm_pagemap_span(p));
        assert_int_equal(pm_pagemap_leaf(p)->info[p & ((1u << PM_LEAF_BITS) - 1)], 0);
    }

    pm_span_t fake = {.page = page, .npages = 3, .state = PM_SPAN_IN_USE, .cls = 7};
    for (uintptr_t p = page; p < page + 3; p++) pm_pagemap_set_span(p, &fake);
    pm_pagemap_set_class(page, 3, 7);
    for (uintptr_t p = page; p < page + 3; p++) {
        assert_ptr_equal(pm_pagemap_span(p), &fake);
        assert_int_equal(pm_pagemap_leaf(p)->info[p & ((1u << PM_LEAF_BITS) - 1)] & 0xff, 7);
        /* the high byte is the page's index within its span */
        assert_int_equal(pm_pagemap_leaf(p)->info[p & ((1u << PM_LEAF_BITS) - 1)] >> 8, p - page);
    }
    /* neighbours untouched */
    assert_null(pm_pagemap_span(page - 1));
    assert_null(pm_pagemap_span(page + 3));
    assert_int_equal(pm_pagemap_leaf(page + 3)->info[(page + 3) & ((1u << PM_LEAF_BITS) - 1)], 0);

    /* the sampled flag toggles only its bit, only on its page */
    uint16_t *cls_first = &pm_pagemap_leaf(first)->info[first & ((1u << PM_LEAF_BITS) - 1)];
    uint16_t *cls_second = &pm_pagemap_leaf(second)->info[second & ((1u << PM_LEAF_BITS) - 1)];
    pm_pagemap_mark_sampled(first, 1);
    assert_int_equal(*cls_first & 0xff, 7 | PM_SAMPLED_PAGE);
    assert_int_equal(*cls_second & 0xff, 7);
    pm_pagemap_mark_sampled(first, 1); /* idempotent */
    assert_int_equal(*cls_first & 0xff, 7 | PM_SAMPLED_PAGE);
    pm_pagemap_mark_sampled(first, 0);
    assert_int_equal(*cls_first & 0xff, 7);
    pm_pagemap_mark_sampled(first, 0);
    assert_int_equal(*cls_first & 0xff, 7);
    pm_pagemap_set_class(second, 1, 0);
    pm_pagemap_mark_sampled(second, 1);
    assert_int_equal(*cls_second & 0xff, PM_SAMPLED_PAGE);
    pm_pagemap_mark_sampled(second, 0);
    assert_int_equal(*cls_second & 0xff, 0);

    /* clear it all again */
    for (uintptr_t p = page; p < page + 3; p++) pm_pagemap_set_span(p, NULL);
    pm_pagemap_set_class(page, 3, 0);
    assert_null(pm_pagemap_span(page));
}

static void test_pagemap_unknown_and_out_of_range(void **state)
{
    (void)state;
    /* a leaf nobody ensured */
    uintptr_t key = 0x0777;
    while (pm_pagemap_leaf(key << PM_LEAF_BITS)) key++;
    assert_null(pm_pagemap_span(key << PM_LEAF_BITS));
    assert_null(pm_pagemap_span((key << PM_LEAF_BITS) + 12345));

    /* beyond 48 bits: NULL, even where the masked key aliases a real leaf */
    uintptr_t limit = (uintptr_t)1 << (PM_ADDR_BITS - PM_PAGE_SHIFT);
    assert_null(pm_pagemap_span(limit));
    assert_null(pm_pagemap_span(~(uintptr_t)0));
    pm_span_t *s = pm_pageheap_alloc(1);
    assert_non_null(s);
    assert_ptr_equal(pm_pagemap_span(s->page), s);
    assert_null(pm_pagemap_span(s->page + limit));
    assert_null(pm_pagemap_span(s->page | ((uintptr_t)1 << 40)));
    pm_pageheap_free(s);

    /* ensure refuses pages outside the address space */
    assert_int_equal(pm_pagemap_ensure(limit, 1), -1);
    assert_int_equal(pm_pagemap_ensure(limit - 1, 2), -1);
}


/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest pagemap[] = {
        cmocka_unit_test(test_pagemap_leaf_hint), /* first: before the fake leaves */
        cmocka_unit_test(test_pagemap_set_and_lookup),
        cmocka_unit_test(test_pagemap_unknown_and_out_of_range),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("pagemap", pagemap, NULL, NULL);
    return failed ? 1 : 0;
}
