/* test_sizeclass.c — unit tests of src/sizeclass.c: the size-class table and the
 * size-to-class lookup. */
#include "core_test.h"

/* ======================================================================
 * sizeclass.c
 * ==================================================================== */

static void test_sizeclass_table(void **state)
{
    (void)state;
    pm_sizeclass_init(); /* idempotent: init already built the same table */
    assert_true(pm_class_count >= 2 && pm_class_count <= PM_CLASS_MAX);
    assert_int_equal(pm_class_size[1], 16);
    assert_int_equal(pm_class_size[pm_class_count - 1], PM_MAX_SMALL);
    for (unsigned c = 1; c < pm_class_count; c++) {
        size_t size = pm_class_size[c], pages = pm_class_pages[c];
        size_t span = pages * PAGE;
        assert_int_equal(size % 16, 0);
        if (c > 1) assert_true(size > pm_class_size[c - 1]);
        assert_true(pages >= 1);
        assert_true(span >= size);
        /* span tail waste at most 1/8 of the span */
        assert_true((span % size) * 8 <= span);
        /* the fewest such pages: one page less holds no object or leaves
         * more than 1/8 at its tail (short spans: a live object pins its
         * span) */
        size_t shorter = span - PAGE;
        assert_true(pages == 1 || shorter < size || (shorter % size) * 8 > shorter);
        /* the classes up to 1 KiB still get at least 8 objects a span */
        if (size <= 1024) assert_true(span / size >= 8);
        assert_in_range(pm_class_batch[c], 2, 32);
    }
    assert_true(pm_class_slot(PM_MAX_SMALL) < PM_CLASS_SLOTS);
}

static void test_sizeclass_lookup_exhaustive(void **state)
{
    (void)state;
    for (size_t s = 0; s <= PM_MAX_SMALL; s++) {
        unsigned c = pm_sizeclass_of(s);
        if (c < 1 || c >= pm_class_count) fail_msg("size %zu -> class %u out of range", s, c);
        size_t size = pm_class_size[c];
        if (size < s) fail_msg("size %zu -> class %u of size %zu: too small", s, c, size);
        if (c > 1 && pm_class_size[c - 1] >= s)
            fail_msg("size %zu -> class %u (%zu), but class %u (%u) fits", s, c, size, c - 1,
                     pm_class_size[c - 1]);
        if (s > 128 && (size - s) * 8 > s)
            fail_msg("size %zu -> %zu wastes more than 12.5%%", s, size);
    }
}


/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest sizeclass[] = {
        cmocka_unit_test(test_sizeclass_table),
        cmocka_unit_test(test_sizeclass_lookup_exhaustive),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("sizeclass", sizeclass, NULL, NULL);
    return failed ? 1 : 0;
}
