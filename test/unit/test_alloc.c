/* test_alloc.c — unit tests of src/alloc.c through pm_malloc & co: the
 * countdown charged once, malloc/calloc/realloc/memalign, and the aborts
 * on invalid frees (realloc of large blocks in place stays in test_core.c
 * with the page heap's tests). */
#include "core_test.h"

/* The sampling countdown is charged exactly once per allocation: malloc's
 * fast path takes the size off before it looks at its list, so the slow
 * path it falls into on an empty list must not charge again, while the
 * large path (which the fast path does not charge) must.  Rate 0 here: the
 * countdown only ever decreases. */
typedef struct {
    int64_t fresh_slow, fast, large, calloc_small;
    uint32_t len_before_fast, len_after_fast;
} charge_t;

static void *charge_thread(void *arg)
{
    charge_t *r = arg;
    become_active();
    void *p0 = pm_malloc(64);
    unsigned cls = pm_sizeclass_of(4000);
    assert_null(pm_tls.list[cls].head);
    int64_t c0 = pm_tls.sampler.countdown;
    void *p1 = pm_malloc(4000); /* empty list: the slow path */
    int64_t c1 = pm_tls.sampler.countdown;
    r->len_before_fast = pm_tls.list[cls].len;
    void *p2 = pm_malloc(4000); /* the fast path */
    r->len_after_fast = pm_tls.list[cls].len;
    int64_t c2 = pm_tls.sampler.countdown;
    void *p3 = pm_malloc(300000);
    int64_t c3 = pm_tls.sampler.countdown;
    void *p4 = pm_calloc(1, 100);
    int64_t c4 = pm_tls.sampler.countdown;
    r->fresh_slow = c0 - c1;
    r->fast = c1 - c2;
    r->large = c2 - c3;
    r->calloc_small = c3 - c4;
    pm_free(p0);
    pm_free(p1);
    pm_free(p2);
    pm_free(p3);
    pm_free(p4);
    return NULL;
}

static void test_alloc_countdown_charged_once(void **state)
{
    (void)state;
    charge_t r = {0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, charge_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(r.len_before_fast >= 1);
    assert_int_equal(r.len_after_fast, r.len_before_fast - 1);
    assert_int_equal(r.fresh_slow, 4000);
    assert_int_equal(r.fast, 4000);
    assert_int_equal(r.large, 300000);
    assert_int_equal(r.calloc_small, 100);
}

/* ---- the malloc family -------------------------------------------------- */

static void test_alloc_malloc_free_usable(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 15, 16, 17, 100, 128, 129, 1000, 1024, 1025,
                                   4000, 65536, 100000, PM_MAX_SMALL - 1, PM_MAX_SMALL,
                                   PM_MAX_SMALL + 1, 300000, 1u << 20, (1u << 20) + 1};
    void *p[PM_ARRAY_LEN(sizes)];
    for (size_t i = 0; i < PM_ARRAY_LEN(sizes); i++) {
        size_t s = sizes[i];
        p[i] = pm_malloc(s);
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % PM_ALIGNMENT, 0);
        size_t u = pm_usable_size(p[i]);
        assert_true(u >= s);
        if (s <= PM_MAX_SMALL) {
            assert_int_equal(u, pm_class_size[pm_sizeclass_of(s)]);
        } else {
            /* whole pages, up to an eighth more (large.c, large_pages) */
            assert_int_equal(u % PAGE, 0);
            assert_true(u <= s + s / 8 + PAGE);
            assert_int_equal((uintptr_t)p[i] % PAGE, 0);
        }
        memset(p[i], (int)i, u);
    }
    /* all distinct and not overlapping */
    for (size_t i = 0; i < PM_ARRAY_LEN(sizes); i++)
        for (size_t j = i + 1; j < PM_ARRAY_LEN(sizes); j++) {
            uintptr_t a = (uintptr_t)p[i], b = (uintptr_t)p[j];
            assert_true(a + pm_usable_size(p[i]) <= b || b + pm_usable_size(p[j]) <= a);
        }
    for (size_t i = 0; i < PM_ARRAY_LEN(sizes); i++) {
        const uint8_t *c = p[i];
        assert_int_equal(c[0], (uint8_t)i);
        assert_int_equal(c[pm_usable_size(p[i]) - 1], (uint8_t)i);
        pm_free(p[i]);
    }
    assert_int_equal(pm_usable_size(NULL), 0);
    pm_free(NULL);
    errno = 0;
    assert_null(pm_malloc((size_t)PTRDIFF_MAX + 1));
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(pm_malloc(SIZE_MAX));
    assert_int_equal(errno, ENOMEM);
    /* free keeps errno */
    void *big = pm_malloc(20u << 20);
    errno = 4321;
    pm_free(big);
    assert_int_equal(errno, 4321);
}

static void test_alloc_calloc(void **state)
{
    (void)state;
    /* small: a recycled dirty block comes back zeroed */
    char *p = pm_malloc(1000);
    memset(p, 0xee, 1000);
    pm_free(p);
    char *q = pm_calloc(10, 100);
    assert_ptr_equal(q, p);
    assert_true(all_zero(q, 1000));
    pm_free(q);
    /* large: resident dirty pages come back zeroed */
    pm_pageheap_release_all();
    char *big = pm_malloc(3u << 20);
    memset(big, 0xee, 3u << 20);
    pm_free(big);
    char *z = pm_calloc(3, 1u << 20);
    assert_ptr_equal(z, big);
    assert_true(all_zero(z, 3u << 20));
    pm_free(z);
    /* overflow */
    errno = 0;
    assert_null(pm_calloc(SIZE_MAX / 2, 3));
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(pm_calloc((size_t)1 << 32, (size_t)1 << 32));
    assert_int_equal(errno, ENOMEM);
    void *zero = pm_calloc(0, 0);
    assert_non_null(zero);
    pm_free(zero);
}

static void test_alloc_realloc(void **state)
{
    (void)state;
    uint8_t *p = pm_realloc(NULL, 40);
    assert_non_null(p);
    for (int i = 0; i < 40; i++) p[i] = (uint8_t)i;
    /* grow through classes and into large blocks, contents kept */
    static const size_t steps[] = {100, 1000, 5000, 70000, 300000, 2u << 20};
    for (size_t k = 0; k < PM_ARRAY_LEN(steps); k++) {
        p = pm_realloc(p, steps[k]);
        assert_non_null(p);
        assert_true(pm_usable_size(p) >= steps[k]);
        for (size_t i = 0; i < 40; i++) assert_int_equal(p[i], (uint8_t)i);
        p[steps[k] - 1] = 0x99;
    }
    /* shrinking a little keeps the block */
    uint8_t *same = pm_realloc(p, (2u << 20) - 5000);
    assert_ptr_equal(same, p);
    /* shrinking a lot moves it */
    uint8_t *small = pm_realloc(p, 64);
    assert_non_null(small);
    assert_ptr_not_equal(small, p);
    for (size_t i = 0; i < 40; i++) assert_int_equal(small[i], (uint8_t)i);
    /* a failed realloc leaves the block alone */
    errno = 0;
    assert_null(pm_realloc(small, SIZE_MAX));
    assert_int_equal(errno, ENOMEM);
    for (size_t i = 0; i < 40; i++) assert_int_equal(small[i], (uint8_t)i);
    assert_true(pm_usable_size(small) >= 64);
    /* realloc(p, 0) frees */
    assert_null(pm_realloc(small, 0));
    errno = 0;
    assert_null(pm_reallocarray(NULL, SIZE_MAX / 2, 3));
    assert_int_equal(errno, ENOMEM);
}

static void realloc_interior(void *arg) { pm_realloc((char *)arg + 16, 48); }

/* realloc within a small block's class keeps it, the class found by the
 * block's page (pm_realloc's fast check): for every class, its size and
 * half of it keep the block, a byte more or below half moves it; a block
 * on a page flagged for a sample is kept too, and a pointer inside a block
 * is still refused. */
static void test_realloc_in_place_by_page_info(void **state)
{
    (void)state;
    for (unsigned cls = 1; cls < pm_class_count; cls++) {
        size_t size = pm_class_size[cls];
        for (int sampled = 0; sampled <= 1; sampled++) {
            if (sampled) profmalloc_set_sample_rate(1);
            uint8_t *p = pm_malloc(size);
            if (sampled) profmalloc_set_sample_rate(0);
            assert_non_null(p);
            assert_int_equal(pm_sizeclass_of(size), cls);
            p[0] = 1;
            p[size - 1] = 2;
            assert_ptr_equal(pm_realloc(p, size), p);
            assert_ptr_equal(pm_realloc(p, size / 2), p);
            assert_int_equal(p[0], 1);
            uint8_t *q = pm_realloc(p, size + 1);
            assert_ptr_not_equal(q, p);
            assert_int_equal(q[0], 1);
            assert_int_equal(q[size - 1], 2);
            uint8_t *r = pm_malloc(size);
            r[0] = 3;
            uint8_t *t = pm_realloc(r, size / 2 - 1);
            assert_ptr_not_equal(t, r);
            assert_int_equal(t[0], 3);
            pm_free(q);
            pm_free(t);
        }
    }
    void *p = pm_malloc(64);
    expect_child_abort(realloc_interior, p, "realloc(): invalid pointer", (char *)p + 16, "interior");
    pm_free(p);
}

/* A growth that crosses its class's end by a sliver is an append: the
 * thread's fourth in a row, and each after it, moves into twice the old
 * block; fewer, or a run broken by a growth of more than a sixteenth,
 * get a quarter more (alloc.c: growth_reserve). */
static size_t grown_usable(size_t old, size_t size)
{
    uint8_t *p = pm_malloc(old);
    assert_non_null(p);
    p[0] = 7;
    p[old - 1] = 9;
    uint8_t *q = pm_realloc(p, size);
    assert_non_null(q);
    assert_ptr_not_equal(q, p);
    assert_int_equal(q[0], 7);
    assert_int_equal(q[old - 1], 9);
    size_t u = pm_usable_size(q);
    pm_free(q);
    return u;
}

static void test_realloc_append_run(void **state)
{
    (void)state;
    size_t old = pm_class_size[pm_sizeclass_of(1000)];
    for (int round = 0; round < 2; round++) {
        /* a growth by a half breaks any run */
        size_t u = grown_usable(old, old + old / 2);
        assert_true(u >= old + old / 2 && u < 2 * old);
        for (int i = 1; i <= 6; i++) {
            u = grown_usable(old, old + 1 + (size_t)i);
            assert_true(u >= old + old / 4);
            if (i < 4) assert_true(u < 2 * old);
            else assert_true(u >= 2 * old);
        }
    }
    /* past a sixteenth is no append, even after a run */
    assert_true(grown_usable(old, old + old / 16 + 1) < 2 * old);
    assert_true(grown_usable(old, old + 1) < 2 * old);
}

/* A small block that keeps its class is resized without a read of its own
 * memory (its free key is a line the program may never touch): with the
 * block's first OS page unreadable, realloc within the class still works. */
static void test_realloc_in_place_reads_no_block_word(void **state)
{
    (void)state;
    size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned cls = pm_sizeclass_of(3 * os_page);
    size_t size = pm_class_size[cls];
    assert_int_equal(size % os_page, 0); /* its objects start on OS pages */
    char *p = pm_malloc(size);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % os_page, 0);
    p[os_page] = 7;
    assert_int_equal(mprotect(p, os_page, PROT_NONE), 0);
    assert_ptr_equal(pm_realloc(p, size - 100), p);
    assert_ptr_equal(pm_realloc(p, size / 2 + 1), p);
    assert_int_equal(mprotect(p, os_page, PROT_READ | PROT_WRITE), 0);
    assert_int_equal(p[os_page], 7);
    pm_free(p);
}

/* Every alignment and size class, glibc's rounding of a bad alignment,
 * posix_memalign's EINVAL, valloc and pvalloc. */
static void test_alloc_memalign(void **state)
{
    (void)state;
    static const size_t aligns[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192,
                                    16384, 65536, 1u << 20};
    static const size_t sizes[] = {1, 24, 100, 1000, 5000, 9000, 70000, PM_MAX_SMALL, 300000};
    for (size_t i = 0; i < PM_ARRAY_LEN(aligns); i++)
        for (size_t j = 0; j < PM_ARRAY_LEN(sizes); j++) {
            size_t a = aligns[i], s = sizes[j];
            uint8_t *p = pm_memalign(a, s);
            if (!p) fail_msg("memalign(%zu, %zu) failed", a, s);
            if ((uintptr_t)p % a) fail_msg("memalign(%zu, %zu) = %p misaligned", a, s, (void *)p);
            assert_true(pm_usable_size(p) >= s);
            p[0] = 1;
            p[s - 1] = 2;
            pm_free(p);
        }
    /* non-power-of-two alignment rounds up, like glibc */
    void *p = pm_memalign(48, 10);
    assert_int_equal((uintptr_t)p % 64, 0);
    pm_free(p);
    p = pm_memalign(3 * 8192, 10);
    assert_int_equal((uintptr_t)p % 32768, 0);
    pm_free(p);
    void *out = (void *)0x1;
    assert_int_equal(pm_posix_memalign(&out, 24, 10), EINVAL);
    assert_int_equal(pm_posix_memalign(&out, 4, 10), EINVAL);
    assert_ptr_equal(out, (void *)0x1);
    assert_int_equal(pm_posix_memalign(&out, 4096, 10), 0);
    assert_int_equal((uintptr_t)out % 4096, 0);
    pm_free(out);
    p = pm_valloc(10);
    assert_int_equal((uintptr_t)p % 4096, 0);
    pm_free(p);
    p = pm_pvalloc(5000);
    assert_int_equal((uintptr_t)p % 4096, 0);
    assert_true(pm_usable_size(p) >= 8192);
    pm_free(p);
}

/* An alignment up to a page is served by the smallest class at least the
 * size whose size it divides (pm_align_class, a table since the first such
 * class was looked for at every call), from the thread's list as malloc
 * is: a block of up to 8 KiB freed comes back at once. */
static void test_memalign_classes(void **state)
{
    (void)state;
    for (size_t a = 32; a <= PM_PAGE_SIZE; a *= 2)
        for (size_t s = 1; s <= PM_MAX_SMALL; s += s < 4096 ? 8 : s / 16) {
            size_t want = 0;
            for (unsigned c = 1; c < pm_class_count && !want; c++)
                if (pm_class_size[c] >= s && pm_class_size[c] % a == 0) want = pm_class_size[c];
            uint8_t *p = pm_memalign(a, s);
            if (!p) fail_msg("memalign(%zu, %zu) failed", a, s);
            if ((uintptr_t)p % a) fail_msg("memalign(%zu, %zu) = %p misaligned", a, s, (void *)p);
            size_t got = pm_usable_size(p);
            if (want && got != want) fail_msg("memalign(%zu, %zu): %zu bytes, want %zu", a, s, got, want);
            if (got < s) fail_msg("memalign(%zu, %zu): only %zu bytes", a, s, got);
            p[s - 1] = 1;
            pm_free(p);
            uint8_t *q = pm_memalign(a, s);
            if (want && want <= 8192 && q != p) fail_msg("memalign(%zu, %zu): not the block just freed", a, s);
            pm_free(q);
        }
}

/* memalign with an alignment above the page size and size 0 must still
 * return a valid, unique, freeable block (glibc does). */
static void test_alloc_memalign_size_zero(void **state)
{
    (void)state;
    static const size_t aligns[] = {16, 4096, 8192, 16384, 65536};
    for (size_t i = 0; i < PM_ARRAY_LEN(aligns); i++) {
        void *a = pm_memalign(aligns[i], 0);
        void *b = pm_memalign(aligns[i], 0);
        if (!a || !b) fail_msg("memalign(%zu, 0) returned NULL", aligns[i]);
        assert_ptr_not_equal(a, b);
        assert_int_equal((uintptr_t)a % aligns[i], 0);
        pm_span_t *s = pm_pagemap_span((uintptr_t)a >> PM_PAGE_SHIFT);
        if (!s || s->state != PM_SPAN_IN_USE || s->npages == 0)
            fail_msg("memalign(%zu, 0) = %p lies in no in-use span (span %p, npages %zu)",
                     aligns[i], a, (void *)s, s ? s->npages : 0);
        pm_free(a);
        pm_free(b);
    }
}

/* ======================================================================
 * invalid free: a forked child must abort with the message
 * ==================================================================== */

static void free_in_child(void *bad) { pm_free(bad); }

static void expect_invalid_free(void *bad, const char *what)
{
    expect_child_abort(free_in_child, bad, "free(): invalid pointer", bad, what);
}

static void test_invalid_free(void **state)
{
    (void)state;
    int local = 0;
    expect_invalid_free(&local, "stack address");
    char *small = pm_malloc(48);
    expect_invalid_free(small + 24, "middle of a 48-byte block");
    expect_invalid_free(small + 8, "8 bytes into a block");
    char *large = pm_malloc(1u << 20);
    expect_invalid_free(large + 16, "16 bytes into a large block");
    expect_invalid_free(large + 3 * PAGE, "an inner page of a large block");
    expect_invalid_free((char *)pm_free + 0, "a code address");
    /* a freed large block */
    char *gone = pm_malloc(1u << 20);
    pm_free(gone);
    expect_invalid_free(gone, "a freed large block");
    /* the same small block twice in a row */
    char *twice = pm_malloc(64);
    pm_free(twice);
    expect_child_abort(free_in_child, twice, "free(): double free detected", twice, "a double free");
    pm_free(large);
    pm_free(small);
}

/* An interior pointer that is 16-byte aligned, on a page of a size class,
 * while the thread's list for that class has room: the free fast path sees
 * a valid class byte and alignment, so only validation can catch it. */
static void test_invalid_free_interior_aligned(void **state)
{
    (void)state;
    char *warm = pm_malloc(100000); /* the list for the class has room */
    pm_free(warm);
    char *big = pm_malloc(100000);
    expect_invalid_free(big + 50000, "middle of a 100000-byte block");
    char *mid = pm_malloc(64);
    expect_invalid_free(mid + 32, "middle of a 64-byte block");
    pm_free(mid);
    pm_free(big);
}

/* The start of an object its span has not cut yet, which no malloc
 * returned: the slow path's owner check (realloc, malloc_usable_size, a
 * free that finds its list full) knows how far the span was cut. */
static void usable_in_child(void *p) { (void)pm_usable_size(p); }
static void realloc_in_child(void *p) { (void)pm_realloc(p, 100); }

static void test_invalid_uncut_object(void **state)
{
    (void)state;
    char *p = pm_malloc(1200); /* a class of this test's own */
    pm_span_t *s = pm_pagemap_span((uintptr_t)p >> PM_PAGE_SHIFT);
    size_t size = pm_class_size[s->cls];
    assert_true(s->carved < s->capacity);
    char *uncut = (char *)(s->page << PM_PAGE_SHIFT) + (size_t)s->carved * size;
    expect_child_abort(usable_in_child, uncut, "malloc_usable_size(): invalid pointer", uncut, "usable");
    expect_child_abort(realloc_in_child, uncut, "realloc(): invalid pointer", uncut, "realloc");
    /* the object before it was cut, and is accepted */
    assert_int_equal(pm_usable_size(uncut - size), size);
    pm_free(p);
}

/* An uncut object on a page the carve has not reached: that page's class
 * word is still 0, so even free's fast path (the list has room) sends it
 * to the owner check. */
static void test_invalid_free_uncut_page(void **state)
{
    (void)state;
    char *p = pm_malloc(2800); /* 2816 B: spans of 3 pages, 8 objects; this test's class */
    pm_span_t *s = pm_pagemap_span((uintptr_t)p >> PM_PAGE_SHIFT);
    size_t size = pm_class_size[s->cls];
    assert_int_equal(size, 2816);
    size_t reached = ((size_t)(s->carved - 1) * size) >> PM_PAGE_SHIFT;
    char *far = NULL;
    for (uint32_t i = s->carved; i < s->capacity && !far; i++)
        if ((((size_t)i * size) >> PM_PAGE_SHIFT) > reached) far = (char *)(s->page << PM_PAGE_SHIFT) + (size_t)i * size;
    assert_non_null(far); /* the first refill of a class is short */
    pm_tlist_t *l = &pm_tls.list[s->cls];
    assert_true(l->len < l->max_len); /* so the fast path would have room */
    expect_invalid_free(far, "an uncut object on a page the carve has not reached");
    pm_free(p);
}


/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest alloc[] = {
        cmocka_unit_test(test_alloc_countdown_charged_once),
        cmocka_unit_test(test_alloc_malloc_free_usable),
        cmocka_unit_test(test_alloc_calloc),
        cmocka_unit_test(test_alloc_realloc),
        cmocka_unit_test(test_realloc_in_place_by_page_info),
        cmocka_unit_test(test_realloc_in_place_reads_no_block_word),
        cmocka_unit_test(test_realloc_append_run),
        cmocka_unit_test(test_alloc_memalign),
        cmocka_unit_test(test_memalign_classes),
        cmocka_unit_test(test_alloc_memalign_size_zero),
    };
    const struct CMUnitTest invalid_free[] = {
        cmocka_unit_test(test_invalid_free),
        cmocka_unit_test(test_invalid_free_interior_aligned),
        cmocka_unit_test(test_invalid_uncut_object),
        cmocka_unit_test(test_invalid_free_uncut_page),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("alloc", alloc, NULL, NULL);
    failed += cmocka_run_group_tests_name("invalid_free", invalid_free, NULL, NULL);
    return failed ? 1 : 0;
}
