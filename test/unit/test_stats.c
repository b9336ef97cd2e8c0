/* test_stats.c — unit tests of src/stats.c: pm_stats_collect's totals balance. */
#include "core_test.h"

/* ======================================================================
 * stats.c
 * ==================================================================== */

static void test_stats_balance(void **state)
{
    (void)state;
    profmalloc_stats_t s0 = stats();
    assert_stats_balance(&s0);
    assert_true(s0.threads >= 1);
    assert_int_equal(s0.resident_estimate, s0.mapped - s0.released);

    static const size_t sizes[] = {1, 100, 1000, 20000, PM_MAX_SMALL, 300000, 5u << 20};
    void *p[PM_ARRAY_LEN(sizes)];
    uint64_t expect = s0.in_use;
    for (size_t i = 0; i < PM_ARRAY_LEN(sizes); i++) {
        p[i] = pm_malloc(sizes[i]);
        assert_non_null(p[i]);
        expect += pm_usable_size(p[i]);
        profmalloc_stats_t s = stats();
        assert_int_equal(s.in_use, expect);
        assert_stats_balance(&s);
    }
    for (size_t i = 0; i < PM_ARRAY_LEN(sizes); i++) {
        expect -= pm_usable_size(p[i]);
        pm_free(p[i]);
        profmalloc_stats_t s = stats();
        assert_int_equal(s.in_use, expect);
        assert_stats_balance(&s);
    }
    /* many small blocks: spans, central lists and thread cache all move */
    enum { N = 5000 };
    void **b = calloc(N, sizeof *b);
    for (int i = 0; i < N; i++) b[i] = pm_malloc((size_t)(i % 700) + 1);
    profmalloc_stats_t s1 = stats();
    assert_stats_balance(&s1);
    for (int i = 0; i < N; i += 2) pm_free(b[i]);
    profmalloc_stats_t s2 = stats();
    assert_stats_balance(&s2);
    for (int i = 1; i < N; i += 2) pm_free(b[i]);
    free(b);
    profmalloc_stats_t s3 = stats();
    assert_stats_balance(&s3);
    assert_int_equal(s3.in_use, s0.in_use);
    /* trimming moves resident free pages to released, nothing else */
    pm_malloc_trim(0);
    profmalloc_stats_t s4 = stats();
    assert_stats_balance(&s4);
    assert_int_equal(s4.pageheap_free, 0);
    assert_int_equal(s4.thread_cache, 0); /* the only live thread flushed */
    assert_int_equal(s4.in_use, s0.in_use);
}


/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest stats[] = {
        cmocka_unit_test(test_stats_balance),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("stats", stats, NULL, NULL);
    return failed ? 1 : 0;
}
