/* test_large.c — unit tests of large blocks (large.c): realloc's reserve,
 * growth in place into the free pages after a block, the move of a big
 * block with its pages, shrinking in place, and the byte and block counts
 * the stats show through all of them.  Linked with libprofmalloc-test.a
 * (no libc overrides); sampling is off (main). */
#include "core_test.h"

/* Growing a block reserves a quarter more than the old one (small and
 * large), while a jump past that gets the size asked for. */
static void test_alloc_realloc_headroom(void **state)
{
    (void)state;
    uint8_t *p = pm_malloc(1000);
    assert_non_null(p);
    memset(p, 7, 1000);
    size_t old = pm_usable_size(p);
    uint8_t *q = pm_realloc(p, old + 1);
    assert_non_null(q);
    assert_true(pm_usable_size(q) >= old + old / 4);
    assert_true(pm_usable_size(q) < 2 * old);
    for (size_t i = 0; i < 1000; i++) assert_int_equal(q[i], 7);
    /* a jump beyond old + old/4: the class of the new size */
    uint8_t *r = pm_realloc(q, 100000);
    assert_non_null(r);
    assert_int_equal(pm_usable_size(r), pm_class_size[pm_sizeclass_of(100000)]);
    /* large blocks too */
    uint8_t *l = pm_realloc(r, 300000);
    assert_non_null(l);
    size_t lold = pm_usable_size(l);
    assert_int_equal(lold % PAGE, 0);
    uint8_t *l2 = pm_realloc(l, lold + 1);
    assert_non_null(l2);
    /* (in place only when the pages after it are free: then the reserve
     * as well when they are enough) */
    assert_true(pm_usable_size(l2) >= lold + lold / 4 || (l2 == l && pm_usable_size(l2) > lold));
    for (size_t i = 0; i < 1000; i++) assert_int_equal(l2[i], 7);
    pm_free(l2);
    /* the biggest class growing by a byte: a large block with the reserve */
    uint8_t *top = pm_malloc(PM_MAX_SMALL);
    assert_non_null(top);
    assert_int_equal(pm_usable_size(top), PM_MAX_SMALL);
    memset(top, 9, PM_MAX_SMALL);
    uint8_t *big = pm_realloc(top, PM_MAX_SMALL + 1);
    assert_non_null(big);
    assert_true(pm_usable_size(big) >= PM_MAX_SMALL + PM_MAX_SMALL / 4);
    assert_int_equal(pm_usable_size(big) % PAGE, 0);
    for (size_t i = 0; i < PM_MAX_SMALL; i += 4093) assert_int_equal(big[i], 9);
    assert_int_equal(big[PM_MAX_SMALL - 1], 9);
    pm_free(big);
}


/* A large block grows in place into the free pages after it; when it
 * cannot and must move onto fresh pages, it gets twice its old size and
 * the block it leaves is not kept resident in the page heap (from 1 MiB:
 * moved with its pages, or copied and released at once; one moved into
 * resident pages may stay, test_pageheap_moved_copy_kept_within_use). */
static void test_alloc_realloc_large_in_place(void **state)
{
    (void)state;
    const size_t MiB = (size_t)1 << 20;
    pm_pageheap_release_all();
    uint8_t *x = pm_malloc(8 * MiB);
    assert_non_null(x);
    memset(x, 0, 8 * MiB);
    pm_free(x); /* the only resident free span: 8 MiB */
    uint8_t *p = pm_malloc(MiB);
    assert_ptr_equal(p, x);
    memset(p, 5, MiB);
    uint8_t *q = pm_realloc(p, 3 * MiB);
    assert_ptr_equal(q, p); /* grown, not moved */
    assert_true(pm_usable_size(q) >= 3 * MiB);
    for (size_t i = 0; i < MiB; i += 4093) assert_int_equal(q[i], 5);
    memset(q, 6, 3 * MiB);
    /* a block right after it: the next growth must move */
    uint8_t *y = pm_malloc(MiB);
    assert_ptr_equal(y, q + pm_usable_size(q));
    size_t qsize = pm_usable_size(q);
    unsigned char *vec = calloc(qsize / 4096, 1);
    assert_int_equal(mincore(q, qsize, vec), 0);
    for (size_t i = 0; i < qsize / 4096; i++) assert_true(vec[i] & 1); /* resident */
    uint8_t *r = pm_realloc(q, 5 * MiB);
    assert_non_null(r);
    assert_ptr_not_equal(r, q);
    assert_true(pm_usable_size(r) >= 2 * qsize); /* a move from 1 MiB up doubles */
    for (size_t i = 0; i < 3 * MiB; i += 4093) assert_int_equal(r[i], 6);
    /* the block left behind is gone at once: its pages moved with it
     * (mremap) and its addresses are unmapped; or, where the move was
     * refused, released with madvise */
    errno = 0;
    if (mincore(q, qsize, vec) == 0) {
        for (size_t i = 0; i < qsize / 4096; i++) assert_false(vec[i] & 1);
    } else {
        assert_int_equal(errno, ENOMEM);
    }
    free(vec);
    pm_free(y);
    pm_free(r);
}

/* The counts the stats show (large.c account) follow a block through
 * every strategy: allocated, kept, shrunk in place, grown in place, moved,
 * copied and freed, they come back to where they started. */
static void test_large_accounting(void **state)
{
    (void)state;
    const size_t MiB = (size_t)1 << 20;
    uint64_t b0, r0, n0, b, r, n;
    pm_alloc_large_stats(&b0, &r0, &n0);
    uint8_t *p = pm_malloc(3 * MiB);
    assert_non_null(p);
    pm_alloc_large_stats(&b, &r, &n);
    assert_int_equal(b - b0, 3 * MiB);
    assert_int_equal(r - r0, 3 * MiB);
    assert_int_equal(n - n0, 1);
    p = pm_realloc(p, 2 * MiB); /* kept: waste under half */
    pm_alloc_large_stats(&b, &r, &n);
    assert_int_equal(b - b0, 3 * MiB);
    assert_int_equal(r - r0, 2 * MiB);
    p = pm_realloc(p, MiB + 1); /* shrunk in place */
    pm_alloc_large_stats(&b, &r, &n);
    assert_int_equal(b - b0, pm_usable_size(p));
    assert_true(pm_usable_size(p) < 2 * MiB);
    assert_int_equal(r - r0, MiB + 1);
    p = pm_realloc(p, 6 * MiB); /* in place, moved or copied */
    assert_non_null(p);
    pm_alloc_large_stats(&b, &r, &n);
    assert_int_equal(b - b0, pm_usable_size(p));
    assert_int_equal(r - r0, 6 * MiB);
    assert_int_equal(n - n0, 1);
    pm_free(p);
    pm_alloc_large_stats(&b, &r, &n);
    assert_int_equal(b, b0);
    assert_int_equal(r, r0);
    assert_int_equal(n, n0);
}

/* How many of the OS pages of [p, p + size) are resident. */
static size_t resident_pages(const void *p, size_t size)
{
    size_t n = size / 4096, in = 0;
    unsigned char *vec = calloc(n, 1);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)p, size, vec), 0);
    for (size_t i = 0; i < n; i++) in += vec[i] & 1;
    free(vec);
    return in;
}

/* The page heap's only resident free run: size bytes, written, at the
 * address returned. */
static uint8_t *resident_run(size_t size)
{
    pm_pageheap_release_all();
    uint8_t *x = pm_malloc(size);
    assert_non_null(x);
    memset(x, 1, size);
    pm_free(x);
    return x;
}

static void assert_zero(const uint8_t *p, size_t size)
{
    for (size_t i = 0; i < size; i += 4096 - 8) assert_int_equal(p[i], 0);
    assert_int_equal(p[size - 1], 0);
}

/* calloc of a big block cut from resident free pages: after blocks the
 * program touched at a byte, the pages are released rather than written;
 * after one it filled, written (all but the 16 pages of a watch). */
static void test_calloc_follows_use(void **state)
{
    (void)state;
    const size_t size = (size_t)16 << 20, pages = size / 4096;
    uint8_t *x;
    for (int i = 0; i < 8; i++) { /* one written block in 8 is watched */
        x = resident_run(size);
        uint8_t *a = pm_calloc(1, size);
        assert_ptr_equal(a, x);
        /* (a read of a page maps it too: only these three are looked at) */
        assert_int_equal(a[0] | a[size / 2] | a[size - 1], 0);
        a[size / 2] = 1;
        pm_free(a); /* touched at a few pages: sparse */
    }

    x = resident_run(size);
    uint8_t *b = pm_calloc(1, size);
    assert_ptr_equal(b, x);
    assert_true(resident_pages(b, size) < pages / 64); /* released, not written */
    assert_zero(b, size);
    memset(b, 2, size);
    pm_free(b); /* filled: dense */

    x = resident_run(size);
    uint8_t *c = pm_calloc(1, size);
    assert_ptr_equal(c, x);
    size_t in = resident_pages(c, size);
    assert_true(in >= pages - 16); /* written (but for a watch's pages) */
    assert_zero(c, size);
    pm_free(c);
}

/* calloc of a block of 32 MiB or more on a free run that a malloc'd
 * block left untouched but for a byte: its pages are released, not
 * written, even after a filled block made calloc write (a memset would
 * fault every page in). */
static void test_calloc_untouched_run_released(void **state)
{
    (void)state;
    const size_t size = (size_t)32 << 20, pages = size / 4096; /* PM_CALLOC_LOOK */
    pm_pageheap_release_all();
    uint8_t *a = pm_calloc(1, size); /* from released pages: watched */
    assert_non_null(a);
    memset(a, 2, size);
    pm_free(a); /* filled: the next calloc on resident pages writes */

    pm_pageheap_release_all();
    uint8_t *x = pm_malloc(size);
    assert_non_null(x);
    x[size / 2] = 1;
    pm_free(x);
    uint8_t *b = pm_calloc(1, size);
    assert_ptr_equal(b, x);
    assert_true(resident_pages(b, size) < pages / 64); /* released, not written */
    assert_zero(b, size);
    pm_free(b);
}

/* A large block realloc'd down to a small one leaves its pages resident
 * in the page heap, for the next large block (one a growth leaves goes
 * back at once: test_alloc_realloc_large_in_place). */
static void test_realloc_large_to_small_keeps_pages(void **state)
{
    (void)state;
    const size_t size = (size_t)512 << 10;
    uint8_t *x = resident_run(size);
    uint8_t *p = pm_malloc(size);
    assert_ptr_equal(p, x);
    memset(p, 3, size);
    uint8_t *q = pm_realloc(p, 100);
    assert_non_null(q);
    assert_ptr_not_equal(q, p);
    for (int i = 0; i < 100; i++) assert_int_equal(q[i], 3);
    assert_int_equal(resident_pages(p, size), size / 4096);
    uint8_t *r = pm_malloc(size);
    assert_ptr_equal(r, p); /* the same pages, still resident */
    pm_free(r);
    pm_free(q);
}

/* A big block that cannot grow in place moves into a resident free run it
 * fits in, copied, rather than with mremap onto fresh pages: the copy
 * costs less than faulting in its growth (bench/grow's peak RSS 97.6 ->
 * 71.1 MB).  Without a resident run it still moves with its pages
 * (test_api: test_realloc_big_moves_pages). */
static void test_realloc_moves_into_resident_run(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20;
    pm_pageheap_release_all();
    uint8_t *a = pm_malloc(2 * mib), *b = pm_malloc(2 * mib);
    assert_non_null(a);
    assert_non_null(b);
    if (b < a) { /* a is the lower one */
        uint8_t *t = a;
        a = b;
        b = t;
    }
    assert_ptr_equal(b, a + 2 * mib); /* a cannot grow in place */
    memset(a, 5, 2 * mib);
    uint8_t *c = pm_malloc(8 * mib);
    assert_non_null(c);
    memset(c, 1, 8 * mib);
    pm_free(c); /* a resident free run of 8 MiB */
    assert_int_equal(resident_pages(c, 8 * mib), 8 * mib / 4096);
    uint8_t *q = pm_realloc(a, 3 * mib);
    assert_ptr_equal(q, c);
    for (size_t i = 0; i < 2 * mib; i += 4093) assert_int_equal(q[i], 5);
    assert_int_equal(q[2 * mib - 1], 5);
    pm_free(q);
    pm_free(b);
}

/* A large block cut from pages not resident takes up to 1/8 more, rounded
 * up to one of 8 steps per doubling, so a block a few pages bigger than
 * the one just freed is cut from the run that one left, where an exact
 * run was a few pages short and the next block faulted in fresh pages
 * (bench/pythreads' JSON strings); a resident run it takes whole when no
 * longer than that, else only the pages it needs; realloc's reserve and
 * blocks aligned beyond a page take exact pages. */
static void test_large_rounds_to_step(void **state)
{
    (void)state;
    for (size_t pages = 32; pages < 4096; pages += 37) {
        pm_pageheap_release_all();
        size_t size = pages * PAGE - 100;
        uint8_t *p = pm_malloc(size);
        assert_non_null(p);
        size_t got = pm_usable_size(p);
        assert_true(got >= size);
        assert_true(got <= size + size / 8 + PAGE);
        pm_free(p);
    }
    /* fresh from the OS (longer than any run the heap has): the step */
    size_t huge = ((size_t)64 << 20) + 3 * PAGE;
    uint8_t *h = pm_malloc(huge);
    assert_non_null(h);
    assert_int_equal(pm_usable_size(h), (size_t)72 << 20);
    pm_free(h);
    pm_pageheap_release_all();
    size_t first = 161 * PAGE - 100, next = 175 * PAGE;
    uint8_t *a = pm_malloc(first);
    assert_non_null(a);
    assert_int_equal(pm_usable_size(a), 176 * PAGE);
    memset(a, 3, first);
    pm_free(a); /* the only resident free run */
    uint8_t *b = pm_malloc(next);
    assert_ptr_equal(b, a);
    memset(b, 4, next);
    pm_free(b);
    /* from the resident run: the pages needed, its rest left free */
    uint8_t *c = pm_malloc(100 * PAGE);
    assert_ptr_equal(c, a);
    assert_int_equal(pm_usable_size(c), 100 * PAGE);
    uint8_t *d = pm_malloc(60 * PAGE);
    assert_ptr_equal(d, c + pm_usable_size(c));
    pm_free(c);
    pm_free(d);
    /* a resident run no longer than the rounded size: taken whole */
    uint8_t *e = pm_malloc(170 * PAGE);
    assert_ptr_equal(e, a);
    assert_int_equal(pm_usable_size(e), 176 * PAGE);
    pm_free(e);
    /* realloc's reserve is not rounded again: g cannot grow in place
     * (blk is right after it), so it moves to its reserve, 50 pages */
    pm_pageheap_release_all();
    uint8_t *run = pm_malloc(80 * PAGE);
    assert_non_null(run);
    pm_free(run); /* the only resident free run: 80 pages */
    uint8_t *g = pm_malloc(40 * PAGE), *blk = pm_malloc(40 * PAGE);
    assert_ptr_equal(g, run);
    assert_ptr_equal(blk, run + 40 * PAGE);
    uint8_t *g2 = pm_realloc(g, 40 * PAGE + 1);
    assert_non_null(g2);
    assert_ptr_not_equal(g2, g);
    assert_int_equal(pm_usable_size(g2), 50 * PAGE);
    pm_free(g2);
    pm_free(blk);
    /* ... and cut from a resident run, it is the pages asked for: its
     * reserve there would be resident memory nothing writes (bench/run.sh's
     * vectors: the last step to a target short of the doubled reserve) */
    pm_pageheap_release_all();
    run = pm_malloc(200 * PAGE);
    assert_non_null(run);
    pm_free(run); /* the only resident free run: 200 pages */
    g = pm_malloc(40 * PAGE);
    blk = pm_malloc(40 * PAGE);
    assert_ptr_equal(g, run);
    assert_ptr_equal(blk, run + 40 * PAGE);
    g2 = pm_realloc(g, 40 * PAGE + 1);
    assert_ptr_equal(g2, run + 80 * PAGE);
    assert_int_equal(pm_usable_size(g2), 41 * PAGE);
    pm_free(g2);
    pm_free(blk);
    /* blocks aligned beyond a page keep their pages exact */
    void *al = NULL;
    assert_int_equal(pm_posix_memalign(&al, 64 * PAGE, 161 * PAGE), 0);
    assert_int_equal(pm_usable_size(al), 161 * PAGE);
    pm_free(al);
}

/* A large block that realloc moves by a copy gives the bytes asked for,
 * not its reserve, which was never written: copying the reserve read
 * zero pages and wrote them into the new block. */
static void test_realloc_copies_what_was_asked(void **state)
{
    (void)state;
    pm_pageheap_release_all();
    uint8_t *x = pm_malloc((size_t)8 << 20);
    assert_non_null(x);
    pm_free(x); /* one free run of 8 MiB, never written */
    uint8_t *a = pm_malloc(33 * PAGE);
    assert_ptr_equal(a, x);
    uint8_t *a2 = pm_realloc(a, 33 * PAGE + 1); /* in place, with its reserve */
    assert_ptr_equal(a2, a);
    /* (its span, not malloc_usable_size, which would offer the reserve) */
    size_t a2_bytes = pm_pagemap_span((uintptr_t)a2 >> PM_PAGE_SHIFT)->npages * PAGE;
    assert_true(a2_bytes >= 41 * PAGE);
    memset(a2, 3, 33 * PAGE + 1);
    uint8_t *blk = pm_malloc(40 * PAGE);
    assert_ptr_equal(blk, a2 + a2_bytes); /* a2 cannot grow in place */
    uint8_t *q = pm_realloc(a2, (size_t)1 << 20);
    assert_non_null(q);
    assert_ptr_not_equal(q, a2);
    assert_int_equal(q[33 * PAGE], 3);
    size_t os = 4096, first = (33 * PAGE + 1 + os - 1) / os * os;
    assert_int_equal(resident_pages(q + first, 40 * PAGE - first), 0);
    pm_free(q);
    pm_free(blk);
}

int main(void)
{
    core_test_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_realloc_headroom),
        cmocka_unit_test(test_alloc_realloc_large_in_place),
        cmocka_unit_test(test_large_accounting),
        cmocka_unit_test(test_calloc_follows_use),
        cmocka_unit_test(test_calloc_untouched_run_released),
        cmocka_unit_test(test_realloc_large_to_small_keeps_pages),
        cmocka_unit_test(test_realloc_moves_into_resident_run),
        cmocka_unit_test(test_large_rounds_to_step),
        cmocka_unit_test(test_realloc_copies_what_was_asked),
    };
    return cmocka_run_group_tests_name("large", tests, NULL, NULL) ? 1 : 0;
}
