/* test_prof_sites.c — unit tests of src/prof_sites.c: the sampled-page
 * flags that send a free to the profiler, and the records' memory. */
#include "core_test.h"

static int flagged(const void *p)
{
    uintptr_t page = (uintptr_t)p >> PM_PAGE_SHIFT;
    return (pm_pagemap_leaf(page)->info[page & ((1u << PM_LEAF_BITS) - 1)] & PM_SAMPLED_PAGE) != 0;
}

static int same_page(const void *a, const void *b)
{
    return (uintptr_t)a >> PM_PAGE_SHIFT == (uintptr_t)b >> PM_PAGE_SHIFT;
}

static pm_span_t *span_of(const void *p) { return pm_pagemap_span((uintptr_t)p >> PM_PAGE_SHIFT); }

/* n blocks of `size` at rate 1 (each one sampled), all from one span:
 * blocks of a span taken at rate 0 and freed last are the thread cache's
 * next ones. */
static void sampled_blocks(size_t size, void **p, int n)
{
    enum { K = 12 };
    void *q[K];
    int at = 0, best = 0;
    for (int i = 0; i < K; i++) q[i] = pm_malloc(size);
    for (int i = 0; i < K; i++) {
        int same = 0;
        for (int j = 0; j < K; j++) same += span_of(q[j]) == span_of(q[i]);
        if (same > best) best = same, at = i;
    }
    assert_true(best >= n);
    pm_span_t *s = span_of(q[at]);
    for (int i = 0; i < K; i++)
        if (span_of(q[i]) != s) pm_free(q[i]);
    for (int i = 0; i < K; i++)
        if (span_of(q[i]) == s) pm_free(q[i]);
    profmalloc_set_sample_rate(1);
    for (int i = 0; i < n; i++) p[i] = pm_malloc(size);
    profmalloc_set_sample_rate(0);
    for (int i = 0; i < n; i++) {
        assert_non_null(p[i]);
        assert_ptr_equal(span_of(p[i]), s);
        assert_true(flagged(p[i]));
    }
}

/* Every live sampled block keeps its page flagged (else its free would not
 * reach the profiler and its record would stay); a page with none goes
 * back to the fast free as soon as it can. */
static void test_sampled_page_flags(void **state)
{
    (void)state;
    void *p[3];
    /* blocks on pages of their own: each free unflags its own page */
    size_t big = PAGE + 1024; /* 4 in a span of 5 pages */
    unsigned cls = pm_sizeclass_of(big);
    assert_true(pm_class_pages[cls] * PAGE >= 3 * pm_class_size[cls]);
    sampled_blocks(big, p, 2);
    assert_false(same_page(p[0], p[1]));
    pm_free(p[0]);
    assert_false(flagged(p[0]));
    assert_true(flagged(p[1]));
    pm_free(p[1]);
    assert_false(flagged(p[1]));

    /* a block alone in its span (every class from 14 KiB up) */
    sampled_blocks(5 * PAGE, p, 1);
    pm_free(p[0]);
    assert_false(flagged(p[0]));

    /* two blocks on one page: the page stays flagged for the other */
    sampled_blocks(64, p, 2);
    if (same_page(p[0], p[1])) {
        pm_free(p[1]);
        assert_true(flagged(p[0]));
        pm_free(p[0]);
        assert_false(flagged(p[0]));
    } else {
        pm_free(p[1]);
        pm_free(p[0]);
    }

    /* more than two live in a span: flags stay until the last goes, then
     * every page of the span is clear */
    sampled_blocks(big, p, 3);
    pm_free(p[0]);
    assert_true(flagged(p[1]));
    assert_true(flagged(p[2]));
    pm_free(p[2]);
    assert_true(flagged(p[1]));
    pm_free(p[1]);
    for (int i = 0; i < 3; i++) assert_false(flagged(p[i]));
    assert_int_equal(pm_sites_live_samples(), 0);
}

/* A freed block of a flagged page that was not sampled leaves the others'
 * records alone. */
static void test_unsampled_neighbour_free(void **state)
{
    (void)state;
    void *s[1];
    sampled_blocks(96, s, 1);
    void *a = pm_malloc(96);
    assert_true(same_page(a, s[0]));
    pm_free(a);
    assert_int_equal(pm_sites_live_samples(), 1);
    assert_true(flagged(s[0]));
    pm_free(s[0]);
    assert_int_equal(pm_sites_live_samples(), 0);
}

/* Records come from chunks of 1 MiB mapped at once (not from a mapping
 * per 16 KiB slab, which left holes between the page heap's growths), and
 * freed records' slabs serve the next samples. */
static void test_records_from_chunks(void **state)
{
    (void)state;
    enum { N = 40000 };
    static void *p[N];
    uint64_t before = pm_sites_mapped_bytes(), peak = 0;
    for (int round = 0; round < 2; round++) {
        profmalloc_set_sample_rate(1);
        for (int i = 0; i < N; i++) assert_non_null(p[i] = pm_malloc(256)); /* 32 to a span */
        profmalloc_set_sample_rate(0);
        assert_int_equal(pm_sites_live_samples(), N);
        uint64_t now = pm_sites_mapped_bytes();
        if (round == 0) {
            peak = now;
            assert_true(now > before); /* 40 000 records of 48 bytes */
            assert_int_equal((now - before) % (1u << 20), 0);
            assert_true(now - before <= (4u << 20));
        } else {
            assert_true(now <= peak);
        }
        for (int i = 0; i < N; i++) pm_free(p[i]);
        assert_int_equal(pm_sites_live_samples(), 0);
        assert_true(pm_sites_mapped_bytes() <= peak);
    }
}

int main(void)
{
    core_test_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_page_flags),
        cmocka_unit_test(test_unsampled_neighbour_free),
        cmocka_unit_test(test_records_from_chunks),
    };
    return cmocka_run_group_tests_name("prof_sites", tests, NULL, NULL);
}
