/* test_core.c — unit tests of the allocator core, module by module:
 * size classes, page map, page heap, central lists, thread caches and the
 * malloc family (pm_* called directly), the totals of pm_stats_collect,
 * the sampler's arithmetic, size parsing and options, and the invalid-free
 * aborts.  Linked with libprofmalloc-test.a (no libc overrides): the test
 * program itself, cmocka and pthread run on glibc's malloc.
 *
 * Tests share one allocator, so each one works on its own size classes or
 * on page-heap states it sets up itself (pm_pageheap_release_all() leaves
 * no resident free span, which makes "which span comes next" predictable).
 * Sampling is turned off in main() so the profiler adds no metadata and no
 * sampled-page flags behind the tests' backs.  Anything computed in a
 * helper thread is asserted in the main thread (cmocka's failures
 * longjmp).  */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "child_stderr.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <linux/seccomp.h>
#include <linux/filter.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pm_internal.h"

#define PAGE PM_PAGE_SIZE

static uint8_t *page_ptr(uintptr_t page) { return (uint8_t *)(page << PM_PAGE_SHIFT); }

static pm_pageheap_stats_t ph_stats(void)
{
    pm_pageheap_stats_t st;
    memset(&st, 0, sizeof st);
    pm_pageheap_stats(&st);
    return st;
}

static profmalloc_stats_t stats(void)
{
    profmalloc_stats_t s;
    pm_stats_collect(&s);
    return s;
}

static void assert_stats_balance(const profmalloc_stats_t *s)
{
    assert_int_equal(s->mapped, s->in_use + s->fragmentation + s->thread_cache +
                                    s->central_cache + s->pageheap_free + s->released +
                                    s->metadata);
}

static int all_zero(const void *p, size_t n)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i]) return 0;
    return 1;
}

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

/* ======================================================================
 * pagemap.c  (fake pages far from any real mapping: keys 0x1234/0x1235)
 * ==================================================================== */

#define FAKE_KEY ((uintptr_t)0x1234)

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

/* ======================================================================
 * pageheap.c
 * ==================================================================== */

static void test_pageheap_alloc_basic(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 2, 3, 7, 64, 128, 129, 300, 1000};
    for (size_t i = 0; i < PM_ARRAY_LEN(sizes); i++) {
        size_t n = sizes[i];
        pm_pageheap_stats_t before = ph_stats();
        pm_span_t *s = pm_pageheap_alloc(n);
        assert_non_null(s);
        pm_pageheap_stats_t after = ph_stats();
        assert_int_equal(s->npages, n);
        assert_int_equal(s->state, PM_SPAN_IN_USE);
        assert_int_equal(((uintptr_t)page_ptr(s->page)) % PAGE, 0);
        assert_ptr_equal(pm_pagemap_span(s->page), s);
        assert_ptr_equal(pm_pagemap_span(s->page + n - 1), s);
        assert_int_equal(after.in_use - before.in_use, n * PAGE);
        assert_int_equal(after.mapped, after.in_use + after.free + after.released + after.meta);
        /* the memory is ours to write */
        memset(page_ptr(s->page), 0x5a, n * PAGE);
        pm_pageheap_free(s);
        pm_pageheap_stats_t freed = ph_stats();
        assert_int_equal(freed.in_use, before.in_use);
    }
    assert_null(pm_pageheap_alloc(0));
    assert_null(pm_pageheap_alloc(SIZE_MAX));
}

static void test_pageheap_reuse(void **state)
{
    (void)state;
    pm_pageheap_release_all(); /* no resident free span left */
    assert_int_equal(ph_stats().free, 0);
    pm_span_t *s = pm_pageheap_alloc(5);
    assert_non_null(s);
    uintptr_t page = s->page;
    memset(page_ptr(page), 1, 5 * PAGE);
    pm_pageheap_free(s);
    assert_int_equal(ph_stats().free, 5 * PAGE);
    /* the only resident free span is preferred */
    pm_span_t *again = pm_pageheap_alloc(5);
    assert_non_null(again);
    assert_int_equal(again->page, page);
    assert_int_equal(again->zeroed, 0);
    assert_int_equal(ph_stats().free, 0);
    pm_pageheap_free(again);
    /* a smaller request is cut from the front of it */
    pm_span_t *part = pm_pageheap_alloc(2);
    assert_int_equal(part->page, page);
    assert_int_equal(ph_stats().free, 3 * PAGE);
    pm_pageheap_free(part);
    assert_int_equal(ph_stats().free, 5 * PAGE);
}

/* Best fit among resident free spans: the shortest exact list at or above
 * the request (found through the lists' bitmap, across its three words:
 * lists 1-63, 64-127 and 128), then
 * the shortest long span.  The test keeps a model of the free spans and
 * checks each pick against it. */
/* A fork while another thread releases a span's pages (outside the page
 * heap's lock): in the child, where that thread is gone, the span must not
 * be lost when it was only being madvised (its first page must still
 * belong to a span), and must not be handed out when it may already be
 * unmapped (the child writes every page of a span of the same size: one
 * on an unmapped page kills it). */
enum { RF_SHORT = 64, RF_LONG = (32 << 20) >> PM_PAGE_SHIFT };
typedef struct {
    size_t pages;
    _Atomic int stop, in_release;
    _Atomic uintptr_t page; /* of the span being released */
} release_fork_t;

static void *release_fork_worker(void *arg)
{
    release_fork_t *f = arg;
    while (!atomic_load(&f->stop)) {
        pm_span_t *s = pm_pageheap_alloc(f->pages);
        if (!s) break;
        volatile char *p = (char *)(s->page << PM_PAGE_SHIFT);
        for (size_t i = 0; i < f->pages << PM_PAGE_SHIFT; i += 4096) p[i] = 1;
        /* short: madvised as it is freed (malloc_trim could unmap it with
         * the released run it joins); long: unmapped by malloc_trim */
        atomic_store(&f->page, s->page);
        if (f->pages < 128) {
            atomic_store(&f->in_release, 1);
            pm_pageheap_free_released(s);
        } else {
            pm_pageheap_free(s);
            atomic_store(&f->in_release, 1);
            pm_pageheap_release_all();
        }
        atomic_store(&f->in_release, 0);
    }
    return NULL;
}

static int release_fork_child(release_fork_t *f)
{
    size_t pages = f->pages;
    if (pages < 128 && atomic_load(&f->in_release)) {
        /* its first page still belongs to a span (freed or not) */
        uintptr_t page = atomic_load(&f->page);
        pm_span_t *s = pm_pagemap_span(page);
        if (!s || s->page > page || page >= s->page + s->npages) return 3;
    }
    pm_span_t *s = pm_pageheap_alloc(pages);
    if (!s) return 2;
    volatile char *p = (char *)(s->page << PM_PAGE_SHIFT);
    for (size_t i = 0; i < pages << PM_PAGE_SHIFT; i += 4096) p[i] = 2;
    return 0;
}

static void fork_while_releasing(size_t pages)
{
    release_fork_t f = {.pages = pages};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_fork_worker, &f), 0);
    int during = 0, k = 0;
    for (; k < 400 && during < 4; k++) {
        usleep(500 + (unsigned)(k * 7919) % 3000);
        int in = atomic_load(&f.in_release);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) _exit(release_fork_child(&f));
        during += in && atomic_load(&f.in_release);
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("%zu pages, fork %d: child status %#x (3: the span being released was lost; "
                     "SIGSEGV: an unmapped span was handed out)", pages, k, (unsigned)st);
    }
    atomic_store(&f.stop, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
    print_message("    %zu pages: %d forks, %d while a release ran\n", pages, k, during);
}

static void test_pageheap_fork_while_releasing(void **state)
{
    (void)state;
    fork_while_releasing(RF_SHORT);
    fork_while_releasing(RF_LONG);
}

/* pm_os_release gives back only the kernel pages wholly inside the range
 * (madvise would round the length up into the next bytes) and says so
 * when that is not the whole range. */
static void test_os_release_whole_pages(void **state)
{
    (void)state;
    size_t pg = pm_os_page_size();
    unsigned char *m = pm_os_map(4 * pg, pg);
    assert_non_null(m);
    memset(m, 0xAB, 4 * pg);
    /* [pg/2, pg/2 + 2 pg): only the second page lies wholly inside */
    assert_int_equal(pm_os_release(m + pg / 2, 2 * pg), -1);
    for (size_t i = 0; i < 4 * pg; i++) {
        unsigned char want = (i >= pg && i < 2 * pg) ? 0 : 0xAB;
        if (m[i] != want) fail_msg("byte %zu is %#x, expected %#x", i, m[i], want);
    }
    memset(m, 0xAB, 4 * pg);
    assert_int_equal(pm_os_release(m + pg, 2 * pg), 0); /* aligned: all of it */
    for (size_t i = 0; i < 4 * pg; i++) {
        unsigned char want = (i >= pg && i < 3 * pg) ? 0 : 0xAB;
        if (m[i] != want) fail_msg("byte %zu is %#x, expected %#x", i, m[i], want);
    }
    assert_int_equal(pm_os_release(m + 1, pg - 2), -1); /* no whole page */
    assert_int_equal(m[1], 0xAB);
    pm_os_unmap(m, 4 * pg);
}

static void test_pageheap_best_fit(void **state)
{
    (void)state;
    static const size_t len[] = {3, 70, 150, 66, 200, 129, 128};
    enum { N = PM_ARRAY_LEN(len) };
    pm_span_t *sp[N], *sep[N];
    uintptr_t page[N];
    /* One resident free run, cut into span, separator, span, ...: with no
     * other resident free span, each allocation takes the front of what is
     * left of it, so the separators keep the freed spans apart. */
    size_t total = 0;
    for (int i = 0; i < N; i++) total += len[i] + 1;
    pm_pageheap_release_all();
    pm_span_t *run = pm_pageheap_alloc(total);
    assert_non_null(run);
    uintptr_t next = run->page;
    pm_pageheap_free(run);
    for (int i = 0; i < N; i++) {
        sp[i] = pm_pageheap_alloc(len[i]);
        sep[i] = pm_pageheap_alloc(1);
        assert_true(sp[i] && sep[i]);
        assert_int_equal(sp[i]->page, next);
        assert_int_equal(sep[i]->page, next + len[i]);
        next += len[i] + 1;
        memset(page_ptr(sp[i]->page), 7, len[i] * PAGE);
        page[i] = sp[i]->page;
    }
    for (int i = 0; i < N; i++) pm_pageheap_free(sp[i]);
    struct { uintptr_t page; size_t n; } model[N];
    for (int i = 0; i < N; i++) { /* free, and apart: none coalesced */
        pm_span_t *f = pm_pagemap_span(page[i]);
        assert_int_equal(f->state, PM_SPAN_FREE);
        assert_int_equal(f->page, page[i]);
        assert_int_equal(f->npages, len[i]);
        model[i].page = page[i];
        model[i].n = len[i];
    }
    assert_int_equal(ph_stats().free, (uint64_t)(total - N) * PAGE);
    /* the last one fits no resident span: fresh memory, which may release
     * resident ones, so nothing after it relies on the model */
    static const size_t want[] = {2, 65, 68, 140, 1, 160, 129, 128, 3, 64};
    pm_span_t *got[PM_ARRAY_LEN(want)];
    for (size_t i = 0; i < PM_ARRAY_LEN(want); i++) {
        int best = -1;
        for (int k = 0; k < N; k++)
            if (model[k].n >= want[i] && (best < 0 || model[k].n < model[best].n)) best = k;
        got[i] = pm_pageheap_alloc(want[i]);
        assert_non_null(got[i]);
        if (best < 0) { /* nothing resident fits: fresh memory */
            assert_int_equal(got[i]->zeroed, 1);
            continue;
        }
        assert_int_equal(got[i]->zeroed, 0);
        /* the shortest fit; with several of that length, one of them */
        int ok = 0;
        for (int k = 0; k < N; k++)
            if (model[k].n == model[best].n && got[i]->page == model[k].page) ok = 1, best = k;
        assert_true(ok);
        model[best].page += want[i];
        model[best].n -= want[i];
    }
    for (size_t i = 0; i < PM_ARRAY_LEN(want); i++) pm_pageheap_free(got[i]);
    for (int i = 0; i < N; i++) pm_pageheap_free(sep[i]);
}

/* Fresh pages about to be faulted in send resident free pages back to
 * the OS, oldest first, but never below a quarter of the pages in use. */
static void test_pageheap_growth_floor(void **state)
{
    (void)state;
    enum { B = 500, USED = 4000, C = 600 };
    pm_span_t *b[3], *sep[3];
    pm_pageheap_release_all();
    pm_span_t *run = pm_pageheap_alloc(3 * (B + 1)); /* three spans kept apart */
    assert_non_null(run);
    pm_pageheap_free(run);
    for (int i = 0; i < 3; i++) {
        b[i] = pm_pageheap_alloc(B);
        sep[i] = pm_pageheap_alloc(1);
        assert_true(b[i] && sep[i]);
        assert_int_equal(sep[i]->page, b[i]->page + B);
    }
    pm_span_t *used = pm_pageheap_alloc(USED);
    assert_non_null(used);
    for (int i = 0; i < 3; i++) pm_pageheap_free(b[i]);
    pm_pageheap_stats_t st = ph_stats();
    assert_int_equal(st.free, 3 * B * PAGE);
    uint64_t in_use = st.in_use / PAGE + C;
    /* the floor, a quarter of in_use, is between 2B and 3B; an eighth or
     * a half would not be */
    assert_true(in_use / 4 >= 2 * B && in_use / 4 < 3 * B);
    assert_true(in_use / 8 < 2 * B && in_use / 2 >= 3 * B);
    /* no free span holds C pages: fresh memory, and the oldest free span
     * (B pages) goes back; a second would leave less than a quarter of
     * in_use */
    pm_span_t *c = pm_pageheap_alloc(C);
    assert_non_null(c);
    assert_int_equal(c->zeroed, 1);
    st = ph_stats();
    assert_int_equal(st.free, 2 * B * PAGE);
    pm_pageheap_free(c);
    pm_pageheap_free(used);
    for (int i = 0; i < 3; i++) pm_pageheap_free(sep[i]);
}

/* Three adjacent spans of N pages, or fails. Spans that were not adjacent
 * are freed again. */
static void adjacent_three(size_t n, pm_span_t **a, pm_span_t **b, pm_span_t **c)
{
    enum { TRIES = 64 };
    pm_span_t *held[3 * TRIES];
    size_t nheld = 0;
    *a = *b = *c = NULL;
    for (int t = 0; t < TRIES && !*c; t++) {
        pm_span_t *x = pm_pageheap_alloc(n), *y = pm_pageheap_alloc(n), *z = pm_pageheap_alloc(n);
        assert_true(x && y && z);
        if (y->page == x->page + n && z->page == y->page + n) {
            *a = x, *b = y, *c = z;
        } else {
            held[nheld++] = x, held[nheld++] = y, held[nheld++] = z;
        }
    }
    assert_non_null(*c);
    for (size_t i = 0; i < nheld; i++) pm_pageheap_free(held[i]);
}

/* Coalescing joins only neighbours of the same state. */
static void test_pageheap_coalesce_same_state(void **state)
{
    (void)state;
    enum { N = 5 };
    pm_span_t *a, *b, *c;
    pm_pageheap_release_all();
    adjacent_three(N, &a, &b, &c);
    pm_pageheap_release_all();
    uintptr_t base = a->page;
    pm_pageheap_free(a);
    pm_pageheap_release_all(); /* A is RETURNED now */
    pm_span_t *ra = pm_pagemap_span(base + N - 1);
    assert_non_null(ra);
    assert_int_equal(ra->state, PM_SPAN_RETURNED);
    pm_pageheap_free(b); /* FREE beside RETURNED: stays alone */
    pm_span_t *sb = pm_pagemap_span(base + N);
    assert_non_null(sb);
    assert_int_equal(sb->state, PM_SPAN_FREE);
    assert_int_equal(sb->page, base + N);
    assert_int_equal(sb->npages, N);
    assert_int_equal(ph_stats().free, N * PAGE);
    pm_pageheap_free(c); /* FREE beside FREE: joins B */
    sb = pm_pagemap_span(base + N);
    assert_int_equal(sb->page, base + N);
    assert_int_equal(sb->npages, 2 * N);
    assert_ptr_equal(pm_pagemap_span(base + 3 * N - 1), sb);
    assert_int_equal(ph_stats().free, 2 * N * PAGE);
    /* released, all three are one RETURNED span (with whatever was
     * beside), or unmapped: with no neighbour left, an island */
    pm_pageheap_release_all();
    pm_span_t *r = pm_pagemap_span(base + N);
    if (r && r->page <= base + N && r->page + r->npages > base + N) {
        assert_int_equal(r->state, PM_SPAN_RETURNED);
        assert_true(r->page <= base && r->page + r->npages >= base + 3 * N);
    } else {
        unsigned char vec[3 * N * PAGE / 4096];
        errno = 0;
        assert_int_equal(mincore(page_ptr(base), 3 * N * PAGE, vec), -1);
        assert_int_equal(errno, ENOMEM);
    }
    assert_int_equal(ph_stats().free, 0);
}

/* The straightforward coalescing scenario: A, B, C adjacent; free A and C
 * then B; one span of 3N pages comes back at A's address. */
static void test_pageheap_coalesce_three(void **state)
{
    (void)state;
    enum { N = 6 };
    pm_span_t *a, *b, *c;
    pm_pageheap_release_all();
    adjacent_three(N, &a, &b, &c);
    pm_pageheap_release_all(); /* only A, B, C will be resident free */
    uintptr_t base = a->page;
    memset(page_ptr(base), 0xab, 3 * N * PAGE);
    pm_pageheap_stats_t st0 = ph_stats();
    pm_pageheap_free(a);
    pm_pageheap_free(c);
    assert_int_equal(ph_stats().free, 2 * N * PAGE);
    assert_int_equal(pm_pagemap_span(base)->npages, N);          /* B keeps them apart */
    assert_int_equal(pm_pagemap_span(base + 2 * N)->npages, N);
    pm_pageheap_free(b);
    pm_pageheap_stats_t st1 = ph_stats();
    assert_int_equal(st1.free, 3 * N * PAGE);
    assert_int_equal(st0.in_use - st1.in_use, 3 * N * PAGE);
    /* the merged span is the first and last page's span */
    pm_span_t *m = pm_pagemap_span(base);
    assert_non_null(m);
    assert_int_equal(m->state, PM_SPAN_FREE);
    assert_int_equal(m->page, base);
    assert_int_equal(m->npages, 3 * N);
    assert_ptr_equal(pm_pagemap_span(base + 3 * N - 1), m);

    pm_span_t *all = pm_pageheap_alloc(3 * N);
    assert_non_null(all);
    assert_int_equal(all->page, base);
    assert_int_equal(all->npages, 3 * N);
    assert_int_equal(all->zeroed, 0);
    assert_int_equal(ph_stats().free, 0);
    /* the bytes were not touched by the page heap */
    assert_int_equal(page_ptr(base)[0], 0xab);
    assert_int_equal(page_ptr(base)[3 * N * PAGE - 1], 0xab);
    pm_pageheap_free(all);
}

static void test_pageheap_aligned(void **state)
{
    (void)state;
    static const size_t aligns[] = {2, 4, 64, 256};
    static const size_t sizes[] = {1, 3, 64, 100};
    for (size_t i = 0; i < PM_ARRAY_LEN(aligns); i++) {
        for (size_t j = 0; j < PM_ARRAY_LEN(sizes); j++) {
            pm_pageheap_stats_t before = ph_stats();
            pm_span_t *s = pm_pageheap_alloc_aligned(sizes[j], aligns[i]);
            assert_non_null(s);
            assert_int_equal(s->page % aligns[i], 0);
            assert_int_equal(s->npages, sizes[j]);
            assert_int_equal(s->state, PM_SPAN_IN_USE);
            assert_ptr_equal(pm_pagemap_span(s->page), s);
            assert_ptr_equal(pm_pagemap_span(s->page + s->npages - 1), s);
            pm_pageheap_stats_t after = ph_stats();
            assert_int_equal(after.in_use - before.in_use, sizes[j] * PAGE);
            memset(page_ptr(s->page), 0x11, sizes[j] * PAGE);
            pm_pageheap_free(s);
            assert_int_equal(ph_stats().in_use, before.in_use);
        }
    }
}

/* Aligned spans allocated and freed in turn reuse the run they came from,
 * the freed span (FREE) and the unused ends of its run (RETURNED) do not
 * merge, so no run was n + align - 1 long again and every round grew the
 * heap. */
static void test_pageheap_aligned_reuse(void **state)
{
    (void)state;
    uint64_t mapped = 0;
    for (int round = 0; round < 100; round++) {
        pm_span_t *s = pm_pageheap_alloc_aligned(200, 128);
        assert_non_null(s);
        assert_int_equal(s->page % 128, 0);
        assert_int_equal(s->npages, 200);
        page_ptr(s->page)[0] = 1;
        pm_pageheap_free(s);
        if (round == 0) mapped = ph_stats().mapped;
    }
    if (ph_stats().mapped > mapped)
        fail_msg("heap mapped %llu KiB after one aligned round, %llu KiB after 100",
                 (unsigned long long)mapped >> 10, (unsigned long long)ph_stats().mapped >> 10);
}

/* An aligned span no free run holds is mapped on its alignment, as one
 * stretch of a multiple of the alignment that starts with the span: the
 * rest is one free run right after it (the fallback mapped n + align - 1
 * pages and kept both ends, pieces nothing else fitted; cut to the span
 * alone, consecutive mappings left gaps and never merged). */
static void test_pageheap_aligned_growth(void **state)
{
    (void)state;
    enum { N = 300, ALIGN = 4096 }; /* 32 MiB: no free run holds it */
    pm_pageheap_stats_t before = ph_stats();
    pm_span_t *s = pm_pageheap_alloc_aligned(N, ALIGN);
    assert_non_null(s);
    assert_int_equal(s->page % ALIGN, 0);
    assert_int_equal(s->npages, N);
    pm_pageheap_stats_t after = ph_stats();
    /* (less when the growth released other runs: pick_for_growth) */
    if (after.mapped > before.mapped + (uint64_t)ALIGN * PAGE)
        fail_msg("%d pages aligned on %d mapped %llu pages", N, ALIGN,
                 (unsigned long long)(after.mapped - before.mapped) / PAGE);
    assert_int_equal(s->zeroed, 1);
    pm_span_t *rest = pm_pagemap_span(s->page + N);
    assert_non_null(rest);
    assert_int_equal(rest->page, s->page + N);
    assert_int_equal(rest->state, PM_SPAN_RETURNED);
    assert_true(rest->npages >= ALIGN - N);
    page_ptr(s->page)[N * PAGE - 1] = 1;
    pm_pageheap_free(s);
    pm_pageheap_release_all();
}

/* pm_os_one_mapping tells a range in one mapping from one across two (the
 * kernel refuses to move those), and leaves the mappings as they were;
 * pm_os_mapped tells a hole from a mapped page. */
static void test_os_one_mapping(void **state)
{
    (void)state;
    size_t pg = pm_os_page_size();
    char *r = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(r != MAP_FAILED);
    int after_mapped = pm_os_mapped(r + 4 * pg);
    assert_int_equal(pm_os_one_mapping(r, 4 * pg), 1);
    assert_int_equal(pm_os_mapped(r + 4 * pg), after_mapped); /* a page it grew into went again */
    assert_int_equal(mprotect(r + pg, pg, PROT_READ), 0); /* three mappings now */
    assert_int_equal(pm_os_one_mapping(r, 2 * pg), 0);
    assert_int_equal(pm_os_one_mapping(r, pg), 1);
    assert_int_equal(pm_os_one_mapping(r + 2 * pg, 2 * pg), 1);
    assert_int_equal(pm_os_mapped(r + 4 * pg), after_mapped);
    r[0] = 1;
    r[3 * pg] = 1;
    assert_int_equal(pm_os_mapped(r + pg), 1);
    assert_int_equal(munmap(r, 4 * pg), 0);
    assert_int_equal(pm_os_mapped(r + pg), 0);
}

static int maps_now(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* Holes that split the heap's address space stop at a bound (past it,
 * such runs are only madvised): 40 blocks of 2 pages on 4 MiB, each
 * mapped with the rest of its 4 MiB, then every rest given back.  Unbound,
 * each rest became a hole and each block a mapping of its own (a review:
 * 66 000 of them, and pthread_create failed at vm.max_map_count).  The
 * count the bound is kept by follows the holes made and closed. */
static void test_pageheap_holes_bounded(void **state)
{
    (void)state;
    enum { N = 40, ALIGN = 512, BOUND = 10 };
    pm_pageheap_release_all();
    int64_t e0 = pm_pageheap_extents();
    assert_true(e0 >= 0);
    pm_pageheap_set_max_extents(e0 + BOUND);
    pm_span_t *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = pm_pageheap_alloc_aligned(2, ALIGN);
        assert_non_null(v[i]);
        assert_int_equal(v[i]->page % ALIGN, 0);
        page_ptr(v[i]->page)[0] = 1;
    }
    int m0 = maps_now();
    int64_t e1 = pm_pageheap_extents();
    pm_pageheap_release_all(); /* the rests: long released runs */
    int m1 = maps_now();
    int64_t e2 = pm_pageheap_extents();
    pm_pageheap_set_max_extents(4096);
    for (int i = 0; i < N; i++) pm_pageheap_free(v[i]);
    pm_pageheap_release_all();
    int64_t e3 = pm_pageheap_extents();
    if (e2 > e0 + BOUND || m1 > m0 + BOUND + 2)
        fail_msg("bound %d: extents %lld -> %lld, mappings %d -> %d", BOUND, (long long)e1,
                 (long long)e2, m0, m1);
    assert_true(e2 >= e1); /* holes only split */
    assert_true(m1 - m0 >= (int)(e2 - e1) - 2); /* counted holes are real ones */
    assert_true(e3 <= e2); /* the blocks freed close their holes */
}

/* The heap's stretches of address space, counted from the page map: runs
 * whose ends name them, in any state but on their way out, merged where
 * they touch. */
typedef struct { uintptr_t lo, hi; } range_t;
static int range_cmp(const void *x, const void *y)
{
    const range_t *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

static int64_t real_extents(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    size_t cap = 4096, n = 0;
    range_t *v = malloc(cap * sizeof *v);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
        for (uintptr_t p = lo >> PM_PAGE_SHIFT; p < (hi >> PM_PAGE_SHIFT); p++) {
            pm_span_t *t = pm_pagemap_span(p);
            if (!t || t->page != p || !t->npages || pm_pagemap_span(p + t->npages - 1) != t) continue;
            if (t->state < PM_SPAN_IN_USE || t->state > PM_SPAN_RELEASING) continue;
            if (t->state == PM_SPAN_RELEASING && t->unmapping) continue;
            if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
            v[n++] = (range_t){p, p + t->npages};
            p += t->npages - 1;
        }
    }
    fclose(f);
    qsort(v, n, sizeof *v, range_cmp);
    int64_t ext = 0;
    uintptr_t end = 0;
    for (size_t i = 0; i < n; i++) {
        if (!i || v[i].lo != end) ext++;
        if (v[i].hi > end) end = v[i].hi;
    }
    free(v);
    return ext;
}

enum { EXT_SLOTS = 24, EXT_OPS = 1500 };

static void *extents_worker(void *arg)
{
    unsigned r = (unsigned)(uintptr_t)arg;
    void *p[EXT_SLOTS] = {0};
    for (int i = 0; i < EXT_OPS; i++) {
        int k = rand_r(&r) % EXT_SLOTS, op = rand_r(&r) % 10;
        size_t n = rand_r(&r) % 4 ? ((size_t)1 << 20) + (size_t)rand_r(&r) % (7u << 20)
                                  : (size_t)(1 + rand_r(&r) % 32) << 20;
        if (op < 4) {
            pm_free(p[k]);
            p[k] = pm_malloc(n);
        } else if (op < 8) { /* grows move with mremap when they cannot grow in place */
            void *q = pm_realloc(p[k], n);
            if (q) p[k] = q;
        } else if (op == 8) {
            pm_free(p[k]);
            p[k] = NULL;
        } else {
            pm_malloc_trim(0);
        }
        if (p[k]) *(char *)p[k] = 1;
    }
    for (int k = 0; k < EXT_SLOTS; k++) pm_free(p[k]);
    return NULL;
}

/* The count the bound on holes relies on stays exact while threads map,
 * unmap and move big blocks at once (a review: counted at the end of a
 * move, four threads drifted it to -38 with nothing mapped). */
static void test_pageheap_extents_exact(void **state)
{
    (void)state;
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, extents_worker, (void *)(uintptr_t)(i * 7919 + 1)), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    assert_int_equal(pm_pageheap_extents(), real_extents());
    pm_malloc_trim(0);
    assert_int_equal(pm_pageheap_extents(), real_extents());
}

static size_t vm_size_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmSize:", 7)) kb = strtoul(line + 7, NULL, 10);
    if (f) fclose(f);
    return kb << 10;
}

/* Runs fn in a child (child_stderr.h), which must exit with status 0. */
static void expect_child_ok(void (*fn)(void *))
{
    char out[256];
    int status = run_in_child(fn, NULL, out, sizeof out);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Past the bound on holes, a growth that RLIMIT_AS refuses still gets the
 * free runs between blocks back: a hole is better than ENOMEM (a review:
 * with the bound reached, malloc(250 MiB) failed beside a free 200 MiB run
 * that glibc gave back).  Blocks c, e, f of 200 MiB, e between the other
 * two; a limit 100 MiB above; e freed; malloc(250 MiB). */
static void bound_yields_child(void *arg)
{
    (void)arg;
    pm_pageheap_set_max_extents(pm_pageheap_extents()); /* reached */
    char *c = pm_malloc(200u << 20), *e = pm_malloc(200u << 20), *f = pm_malloc(200u << 20);
    if (!c || !e || !f) _exit(1);
    c[0] = e[0] = f[0] = 1;
    uintptr_t lo = (uintptr_t)(c < f ? c : f), hi = (uintptr_t)(c < f ? f : c);
    if ((uintptr_t)e < lo || (uintptr_t)e > hi) _exit(0); /* not between: nothing to show */
    struct rlimit rl = {vm_size_now() + (100u << 20), RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
    pm_free(e);
    char *g = pm_malloc(250u << 20);
    _exit(g ? 0 : 3);
}

static void test_pageheap_bound_yields_to_rlimit(void **state)
{
    (void)state;
    expect_child_ok(bound_yields_child);
}

/* A growth that RLIMIT_AS refuses gives back the long resident free runs
 * and the short released runs beside them, which go along; the check that
 * the give-back can make room at all counts both.  It counted only the
 * long runs: a review's malloc(520 MB) after rounds of 400 MB of 1-3 MiB
 * blocks failed where glibc's succeeded.  Here two free runs of 200 pages
 * between three released ones of 120, a limit 900 pages above, and a
 * request for 1000: the growth's check wants 1000 + 640 (two page-map
 * leaves), which the long runs alone (400) do not make up. */
static void give_back_child(void *arg)
{
    (void)arg;
    enum { R = 120, F = 200, ROOM = 900, WANT = 1000 };
    pm_pageheap_release_all(); /* nothing FREE: the pieces below are cut from one run */
    pm_span_t *run = pm_pageheap_alloc(2 + 3 * R + 2 * F);
    if (!run) _exit(1);
    uintptr_t page = run->page;
    pm_pageheap_free(run); /* the only FREE run: cut in order */
    pm_span_t *g0 = pm_pageheap_alloc(1), *r[3], *f[2];
    for (int i = 0; i < 3; i++) {
        r[i] = pm_pageheap_alloc(R);
        if (i < 2) f[i] = pm_pageheap_alloc(F);
    }
    pm_span_t *g1 = pm_pageheap_alloc(1);
    if (!g0 || !g1 || g0->page != page || g1->page != page + 1 + 3 * R + 2 * F) _exit(2);
    for (int i = 0; i < 3; i++) pm_pageheap_free_released(r[i]);
    for (int i = 0; i < 2; i++) pm_pageheap_free(f[i]);
    struct rlimit rl = {vm_size_now() + (size_t)ROOM * PAGE, RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    _exit(pm_pageheap_alloc(WANT) ? 0 : 4);
}

static void test_pageheap_give_back_counts_neighbours(void **state)
{
    (void)state;
    expect_child_ok(give_back_child);
}

/* A free run left between two holes (both neighbours unmapped) goes back
 * with munmap whatever its length: it merges with nothing any more, and,
 * under 1 MiB, stayed mapped for good (a review: 1 250 of them, 646 MB). */
static void test_pageheap_unmaps_islands(void **state)
{
    (void)state;
    enum { LONG = 200, SHORT = 8 };
    pm_pageheap_release_all(); /* nothing FREE: the three spans below are cut from one run */
    pm_span_t *x = pm_pageheap_alloc(LONG + SHORT + LONG);
    assert_non_null(x);
    uintptr_t page = x->page;
    assert_int_equal(pm_pageheap_shrink(x, LONG), 1); /* its tail: the only FREE run */
    pm_span_t *y = pm_pageheap_alloc(SHORT), *z = pm_pageheap_alloc(LONG);
    assert_non_null(y);
    assert_non_null(z);
    assert_int_equal(y->page, page + LONG);
    assert_int_equal(z->page, page + LONG + SHORT);
    memset(page_ptr(y->page), 5, SHORT * PAGE);
    pm_pageheap_free(x);
    pm_pageheap_free(z);
    pm_pageheap_release_all(); /* both long runs unmapped: y is an island */
    unsigned char vec[SHORT * PAGE / 4096];
    errno = 0;
    assert_int_equal(mincore(page_ptr(page), 4096, vec), -1);
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_int_equal(mincore(page_ptr(page + LONG + SHORT), 4096, vec), -1);
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(page_ptr(y->page)[SHORT * PAGE - 1], 5);
    pm_pageheap_stats_t before = ph_stats();
    pm_pageheap_free(y);
    pm_pageheap_release_all();
    pm_pageheap_stats_t after = ph_stats();
    errno = 0;
    assert_int_equal(mincore(page_ptr(page + LONG), SHORT * PAGE, vec), -1);
    assert_int_equal(errno, ENOMEM);
    assert_int_equal(before.mapped - after.mapped, (uint64_t)SHORT * PAGE);
    assert_int_equal(after.mapped, after.in_use + after.free + after.released + after.meta);
}

/* A span in use grows into the free span right after it, resident or
 * not, and only into that: an in-use neighbour or too short a free one
 * leaves it as it was. */
static void test_pageheap_extend(void **state)
{
    (void)state;
    pm_pageheap_release_all();
    pm_span_t *run = pm_pageheap_alloc(20);
    assert_non_null(run);
    uintptr_t page = run->page;
    pm_pageheap_free(run); /* the only resident free span: 20 pages at page */
    assert_int_equal(ph_stats().free, 20 * PAGE);
    pm_span_t *a = pm_pageheap_alloc(5);
    assert_int_equal(a->page, page);
    memset(page_ptr(page), 3, 5 * PAGE);
    assert_int_equal(pm_pageheap_extend(a, 8), 1);
    assert_int_equal(a->page, page);
    assert_int_equal(a->npages, 8);
    assert_int_equal(a->state, PM_SPAN_IN_USE);
    assert_ptr_equal(pm_pagemap_span(page + 7), a);
    assert_int_equal(ph_stats().free, 12 * PAGE);
    /* the rest is still a free span, found by the next allocation */
    pm_span_t *b = pm_pageheap_alloc(4);
    assert_int_equal(b->page, page + 8);
    assert_int_equal(pm_pageheap_extend(a, 9), 0); /* b is in use */
    assert_int_equal(a->npages, 8);
    assert_int_equal(pm_pageheap_extend(b, 13), 0); /* 8 free pages, not 9 */
    assert_int_equal(b->npages, 4);
    assert_int_equal(pm_pageheap_extend(a, 8), 0);  /* not longer */
    pm_pageheap_free(b);
    /* all of the free span after it: no free span left behind */
    assert_int_equal(pm_pageheap_extend(a, 20), 1);
    assert_int_equal(a->npages, 20);
    assert_int_equal(ph_stats().free, 0);
    assert_ptr_equal(pm_pagemap_span(page + 19), a);
    for (size_t i = 0; i < 5 * PAGE; i += 997) assert_int_equal(page_ptr(page)[i], 3);
    pm_pageheap_free(a);
    assert_int_equal(ph_stats().free, 20 * PAGE);
    /* into fresh (released) pages too */
    pm_pageheap_release_all();
    pm_span_t *c = pm_pageheap_alloc(3);
    uintptr_t cpage = c->page;
    pm_span_t *after = pm_pagemap_span(cpage + 3);
    assert_true(after && after->state == PM_SPAN_RETURNED && after->page == cpage + 3);
    assert_int_equal(pm_pageheap_extend(c, 6), 1);
    assert_int_equal(c->npages, 6);
    memset(page_ptr(cpage), 1, 6 * PAGE);
    pm_pageheap_free(c);
}

/* A span in use moves to a longer place with its pages: contents kept,
 * the page map names it at its new ends and no more at its old ones, the
 * old addresses are unmapped, and the heap counts the difference.  Too
 * long a move leaves it as it was. */
static void test_pageheap_move(void **state)
{
    (void)state;
    enum { N = 200, M = 700 };
    pm_span_t *s = pm_pageheap_alloc(N);
    assert_non_null(s);
    uintptr_t old = s->page;
    for (size_t i = 0; i < N * PAGE; i += 4096) page_ptr(old)[i] = (uint8_t)(i >> 12);
    pm_pageheap_stats_t before = ph_stats();
    assert_int_equal(pm_pageheap_move(s, (size_t)1 << 40, 1), 0); /* no room for that */
    assert_int_equal(s->page, old);
    assert_int_equal(s->npages, N);
    assert_ptr_equal(pm_pagemap_span(old), s);
    assert_ptr_equal(pm_pagemap_span(old + N - 1), s);
    assert_int_equal(pm_pageheap_move(s, M, 1), 1);
    assert_int_equal(s->npages, M);
    assert_int_equal(s->state, PM_SPAN_IN_USE);
    assert_ptr_equal(pm_pagemap_span(s->page), s);
    assert_ptr_equal(pm_pagemap_span(s->page + M - 1), s);
    pm_span_t *e = pm_pagemap_span(old);
    assert_true(!e || e != s || old < e->page || old >= e->page + e->npages);
    for (size_t i = 0; i < N * PAGE; i += 4096) assert_int_equal(page_ptr(s->page)[i], (uint8_t)(i >> 12));
    assert_true(all_zero(page_ptr(s->page + N), (M - N) * PAGE));
    unsigned char vec[1];
    errno = 0;
    assert_int_equal(mincore(page_ptr(old), 4096, vec), -1);
    assert_int_equal(errno, ENOMEM);
    pm_pageheap_stats_t after = ph_stats();
    assert_int_equal(after.mapped - before.mapped, (uint64_t)(M - N) * PAGE);
    assert_int_equal(after.in_use - before.in_use, (uint64_t)(M - N) * PAGE);
    memset(page_ptr(s->page), 3, M * PAGE);
    pm_pageheap_free(s);
    pm_pageheap_stats_t done = ph_stats();
    assert_int_equal(done.in_use, before.in_use - N * PAGE);
    assert_int_equal(done.mapped, done.in_use + done.free + done.released + done.meta);
}

static void test_pageheap_release_all(void **state)
{
    (void)state;
    enum { N = 9 };
    pm_span_t *s = pm_pageheap_alloc(N);
    assert_non_null(s);
    uintptr_t page = s->page;
    memset(page_ptr(page), 0xcd, N * PAGE);
    pm_pageheap_free(s);
    pm_pageheap_stats_t before = ph_stats();
    assert_true(before.free >= N * PAGE);
    pm_pageheap_release_all();
    pm_pageheap_stats_t after = ph_stats();
    assert_int_equal(after.free, 0);
    /* every free page was madvised, or unmapped with its run (1 MiB and up) */
    assert_int_equal((after.released - before.released) + (before.mapped - after.mapped), before.free);
    assert_int_equal(after.in_use, before.in_use);

    /* every span handed out now is released memory: zeroed, and reads as
     * zero; take single pages until each page written above came back,
     * unless it went with a longer run that was unmapped */
    size_t covered = 0;
    int seen[N];
    for (size_t i = 0; i < N; i++) {
        unsigned char v;
        errno = 0;
        seen[i] = mincore(page_ptr(page + i), 1, &v) == -1 && errno == ENOMEM;
        covered += seen[i];
    }
    size_t max = after.released / PAGE + 1, k = 0;
    pm_span_t **got = calloc(max, sizeof *got);
    assert_non_null(got);
    int bad = 0;
    while (k < max && covered < N) {
        pm_span_t *t = pm_pageheap_alloc(1);
        if (!t) break;
        got[k++] = t;
        if (t->zeroed != 1 || !all_zero(page_ptr(t->page), PAGE)) bad++;
        if (t->page >= page && t->page < page + N && !seen[t->page - page]) {
            seen[t->page - page] = 1;
            covered++;
        }
    }
    for (size_t i = 0; i < k; i++) pm_pageheap_free(got[i]);
    free(got);
    pm_pageheap_release_all();
    assert_int_equal(bad, 0);
    assert_int_equal(covered, N);
}

/* The cap on resident free pages grows with the heap: past 64 MiB, up to
 * half the pages in use stay free and resident, so a program replacing big
 * blocks at random reuses them without faulting them in again.  With a
 * fixed 64 MiB cap, the 96 MiB freed here went back down to 24 MiB (spans go
 * whole).  A PROFMALLOC_RELEASE_BYTES given by the user stays a fixed cap.
 * Every span is freed before the checks, so a failure leaves no 416 MiB in
 * use for the tests that follow. */
static size_t cap_kept(int fixed, int freed) /* resident free bytes kept */
{
    enum { BIG = 8 << 20, N = 64 };
    pm_options_t saved = pm_options;
    pm_options.release_bytes_set = fixed;
    pm_pageheap_release_all();
    pm_span_t *s[N];
    int got = 0;
    while (got < N && (s[got] = pm_pageheap_alloc(BIG / PAGE)) != NULL) got++; /* never touched */
    for (int i = 0; i < freed && i < got; i++) pm_pageheap_free(s[i]);
    pm_pageheap_stats_t mid = ph_stats();
    for (int i = freed; i < got; i++) pm_pageheap_free(s[i]);
    pm_pageheap_release_all();
    pm_options = saved;
    assert_int_equal(got, N);
    return mid.free;
}

static void test_pageheap_release_cap_grows_with_heap(void **state)
{
    (void)state;
    /* 96 MiB free against 416 MiB in use: all of it kept */
    assert_true(cap_kept(0, 12) >= (size_t)12 << 23);
    /* the same with the 64 MiB given: down to half of it */
    assert_true(cap_kept(1, 12) <= (size_t)64 << 20);
    /* and once most of it is free (96 MiB left in use) the cap is 64 MiB again */
    assert_true(cap_kept(0, 52) <= (size_t)64 << 20);
}

/* The release rules run as the program allocates (pm_pageheap_tick, from
 * the sampling countdown), not only when the page heap frees a span: a
 * program that frees its big blocks and goes on with small ones gets them
 * back to the OS a second later.  Before, they stayed resident for good. */
static void test_pageheap_tick_releases(void **state)
{
    (void)state;
    enum { N = 8, BIG = 1 << 20 };
    pm_pageheap_release_all();
    pm_span_t *s[N];
    for (int i = 0; i < N; i++) {
        assert_non_null(s[i] = pm_pageheap_alloc(BIG / PAGE));
        memset(page_ptr(s[i]->page), 1, BIG);
    }
    for (int i = 0; i < N; i++) pm_pageheap_free(s[i]);
    assert_true(ph_stats().free >= (size_t)N * BIG); /* kept: under the cap */
    pm_pageheap_tick();
    assert_true(ph_stats().free >= (size_t)N * BIG); /* young: still kept */
    pm_pageheap_skip_time(1100000000ull);
    pm_pageheap_tick();
    assert_true(ph_stats().free < (size_t)BIG); /* a second unused: returned */
}

/* One tick returns 32 MiB at most, cut from the end of a longer run: a
 * tick in a malloc(64) returned a 2 GB run at once and took 270 ms (a
 * review).  The next tick (an eighth of a second later) goes on. */
static void test_pageheap_tick_bounded(void **state)
{
    (void)state;
    enum { RUN = 6144 }; /* 48 MiB: under the 64 MiB cap, so kept */
    pm_pageheap_skip_time(1100000000ull); /* every free span a second old */
    pm_pageheap_release_all();
    pm_span_t *s = pm_pageheap_alloc(RUN);
    assert_non_null(s);
    uintptr_t page = s->page;
    pm_pageheap_free(s);
    assert_int_equal(ph_stats().free, (size_t)RUN * PAGE);
    pm_pageheap_skip_time(1100000000ull);
    pm_pageheap_tick();
    assert_int_equal(ph_stats().free, (size_t)(RUN - 4096) * PAGE);
    assert_non_null(pm_pagemap_span(page)); /* the front stays, free */
    pm_pageheap_skip_time(200000000ull);
    pm_pageheap_tick();
    assert_int_equal(ph_stats().free, 0);
}

/* A run keeps its age when a span is cut from it: the rest has been free
 * as long as the run.  Its age restarted at every cut, and a trickle of
 * small allocations kept a big free run resident for good (a review: 800
 * MB).  Free at 0, one page cut at 0.6 s, a tick at 1.2 s: the rest goes. */
static void test_pageheap_cut_keeps_age(void **state)
{
    (void)state;
    enum { RUN = 512 };
    pm_pageheap_skip_time(1100000000ull); /* every free span a second old */
    pm_pageheap_release_all(); /* nothing else FREE: the page is cut from the run */
    pm_span_t *s = pm_pageheap_alloc(RUN);
    assert_non_null(s);
    uintptr_t page = s->page;
    pm_pageheap_free(s);
    pm_pageheap_skip_time(600000000ull);
    pm_span_t *one = pm_pageheap_alloc(1);
    assert_non_null(one);
    uintptr_t got = one->page;
    size_t rest = ph_stats().free;
    if (got != page || rest != (size_t)(RUN - 1) * PAGE) pm_pageheap_free(one);
    assert_int_equal(got, page);
    assert_int_equal(rest, (size_t)(RUN - 1) * PAGE);
    pm_pageheap_skip_time(600000000ull);
    pm_pageheap_tick();
    size_t left = ph_stats().free;
    pm_pageheap_free(one); /* before the check: a failure leaks nothing */
    pm_pageheap_release_all();
    assert_int_equal(left, 0);
}

/* Every page heap operation, at random, with the clock jumping and the
 * program learning and forgetting reuse: after each one the free lists
 * and the age list agree (pm_pageheap_verify).  A cut that kept its run's
 * age linked a span after one no longer there, and a later walk of the
 * released list never ended. */
static void test_pageheap_random_ops_agree(void **state)
{
    (void)state;
    enum { SLOTS = 64, OPS = 20000 };
    pm_span_t *s[SLOTS] = {0};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    pm_pageheap_skip_time(1100000000ull); /* every free span a second old */
    for (int op = 0; op < OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int i = (int)(x % SLOTS), what = (int)((x >> 8) % 16);
        size_t n = 1 + (size_t)((x >> 16) % (what & 1 ? 40 : 700));
        if (!s[i]) {
            s[i] = what < 12 ? pm_pageheap_alloc(n)
                             : pm_pageheap_alloc_aligned(n, (size_t)1 << (1 + (x >> 32) % 6));
            assert_non_null(s[i]);
        } else if (what < 7) {
            if (what < 5) pm_pageheap_free(s[i]);
            else pm_pageheap_free_released(s[i]);
            s[i] = NULL;
        } else if (what < 9) {
            (void)pm_pageheap_extend(s[i], s[i]->npages + n);
        } else if (what < 11) {
            (void)pm_pageheap_shrink(s[i], 1 + s[i]->npages / 2);
        } else if (what < 15) {
            pm_pageheap_skip_time((x >> 24) % 400000000ull);
            pm_pageheap_tick();
        } else if ((x >> 40) % 64 == 0) {
            pm_pageheap_release_all();
        }
        int bad = pm_pageheap_verify();
        if (bad) fail_msg("operation %d (%d): the lists disagree (%d)", op, what, bad);
    }
    for (int i = 0; i < SLOTS; i++)
        if (s[i]) pm_pageheap_free(s[i]);
    assert_int_equal(pm_pageheap_verify(), 0);
    pm_pageheap_skip_time(1100000000ull); /* every free span a second old */
    pm_pageheap_release_all();
}


/* A free run of 1 MiB or more goes back with munmap (its address space and
 * commit charge with it).  After the hole, the heap still allocates,
 * coalesces and hands out zeroed memory. */
static void test_pageheap_unmaps_long_runs(void **state)
{
    (void)state;
    enum { LONG = 200, SHORT = 8 };
    pm_pageheap_release_all(); /* every free span RETURNED: nothing FREE to merge with */
    /* cut one after the other: g keeps big and b from merging when freed */
    pm_span_t *a = pm_pageheap_alloc(SHORT), *big = pm_pageheap_alloc(LONG), *g = pm_pageheap_alloc(1);
    pm_span_t *b = pm_pageheap_alloc(SHORT), *c = pm_pageheap_alloc(SHORT);
    assert_non_null(a);
    assert_non_null(big);
    assert_non_null(g);
    assert_non_null(b);
    assert_non_null(c);
    uintptr_t bigpage = big->page, bpage = b->page;
    memset(page_ptr(bigpage), 7, LONG * PAGE);
    memset(page_ptr(bpage), 8, SHORT * PAGE);
    pm_pageheap_free(big);
    pm_pageheap_free(b);
    pm_pageheap_stats_t before = ph_stats();
    pm_pageheap_release_all();
    pm_pageheap_stats_t after = ph_stats();
    assert_int_equal(after.free, 0);
    assert_int_equal(after.in_use, before.in_use);
    /* (released runs of 1 MiB and more, such as the unused rest of a
     * mapping, go too) */
    assert_true(before.mapped - after.mapped >= (uint64_t)LONG * PAGE);
    assert_int_equal(after.mapped, after.in_use + after.free + after.released + after.meta);
    unsigned char vec[LONG * PAGE / 4096];
    errno = 0;
    assert_int_equal(mincore(page_ptr(bigpage), LONG * PAGE, vec), -1);
    assert_int_equal(errno, ENOMEM);
    /* no span covers its pages any more (an entry may still name a struct
     * that is free or reused: the run took a released neighbour along) */
    for (uintptr_t pg = bigpage; pg < bigpage + LONG; pg += LONG - 1) {
        pm_span_t *e = pm_pagemap_span(pg);
        assert_true(!e || pg < e->page || pg >= e->page + e->npages);
    }
    /* the heap goes on: a long span again, zeroed; then everything back */
    pm_span_t *again = pm_pageheap_alloc(LONG);
    assert_non_null(again);
    assert_int_equal(again->zeroed, 1);
    assert_true(all_zero(page_ptr(again->page), LONG * PAGE));
    memset(page_ptr(again->page), 9, LONG * PAGE);
    pm_pageheap_free(again);
    pm_pageheap_free(a);
    pm_pageheap_free(g);
    pm_pageheap_free(c);
    pm_pageheap_release_all();
    assert_int_equal(ph_stats().free, 0);
}

/* The decay: a free run unused for a second goes back at the next free,
 * and one of 1 MiB or more with its address space; a run released at once
 * (a block realloc moved away from) keeps its addresses for reuse, and is
 * unmapped once it too has stayed unused for a second. */
static void test_pageheap_decay_unmaps(void **state)
{
    (void)state;
    enum { LONG = 200, SHORT = 8, TRIGGERS = 64 };
    pm_span_t *trigger[TRIGGERS]; /* freed after the wait: each free runs the policy */
    for (int i = 0; i < TRIGGERS; i++) assert_non_null(trigger[i] = pm_pageheap_alloc(1));
    pm_span_t *a = pm_pageheap_alloc(LONG), *g1 = pm_pageheap_alloc(1);
    pm_span_t *b = pm_pageheap_alloc(LONG), *g2 = pm_pageheap_alloc(1);
    pm_span_t *c = pm_pageheap_alloc(SHORT), *g3 = pm_pageheap_alloc(1);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(g1);
    assert_non_null(g2);
    assert_non_null(g3);
    uintptr_t apage = a->page, bpage = b->page, cpage = c->page;
    memset(page_ptr(apage), 1, LONG * PAGE);
    memset(page_ptr(bpage), 2, LONG * PAGE);
    memset(page_ptr(cpage), 3, SHORT * PAGE);
    pm_pageheap_free(a);          /* FREE, resident */
    pm_pageheap_free_released(b); /* released at once, still mapped */
    pm_pageheap_free(c);
    unsigned char vec[LONG * PAGE / 4096];
    assert_int_equal(mincore(page_ptr(apage), LONG * PAGE, vec), 0);
    assert_true(vec[0] & 1);
    assert_int_equal(mincore(page_ptr(bpage), LONG * PAGE, vec), 0);
    assert_false(vec[0] & 1);
    usleep(1100 * 1000);
    /* the policy takes 32 spans a free, older ones (other tests') first;
     * nothing is allocated meanwhile, which could cut from a, b or c and
     * make their rest young again */
    for (int i = 0; i < TRIGGERS; i++) pm_pageheap_free(trigger[i]);
    errno = 0;
    assert_int_equal(mincore(page_ptr(apage), LONG * PAGE, vec), -1);
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_int_equal(mincore(page_ptr(bpage), LONG * PAGE, vec), -1);
    assert_int_equal(errno, ENOMEM);
    /* the short run: released (madvised, or unmapped with a longer run it
     * joined: where it was cut is the heap's choice) */
    errno = 0;
    if (mincore(page_ptr(cpage), SHORT * PAGE, vec) == 0) {
        for (size_t i = 0; i < SHORT * PAGE / 4096; i++) assert_false(vec[i] & 1);
    } else {
        assert_int_equal(errno, ENOMEM);
    }
    pm_pageheap_free(g1);
    pm_pageheap_free(g2);
    pm_pageheap_free(g3);
}

/* Unmapping races growth: once a run is unmapped, the kernel may hand its
 * addresses to the next mmap at once (here: the page heap growing for
 * another thread), and the span made there must keep its page map
 * entries.  They were cleared after the munmap, erasing a live block's
 * entry (its free then aborted: invalid pointer). */
typedef struct {
    _Atomic int stop;
    _Atomic long bad, grown;
} unmap_race_t;

static void *unmap_race_releaser(void *arg)
{
    unmap_race_t *r = arg;
    enum { RUNS = 8 };
    while (!atomic_load(&r->stop)) {
        /* runs of 4 MiB apart from each other: several holes per release */
        pm_span_t *run[RUNS], *guard[RUNS];
        for (int i = 0; i < RUNS; i++) {
            run[i] = pm_pageheap_alloc(512);
            guard[i] = pm_pageheap_alloc(1);
            if (!run[i] || !guard[i]) return NULL;
            memset(page_ptr(run[i]->page), 1, PAGE);
        }
        for (int i = 0; i < RUNS; i++) pm_pageheap_free(run[i]);
        pm_pageheap_release_all();
        for (int i = 0; i < RUNS; i++) pm_pageheap_free(guard[i]);
    }
    return NULL;
}

static void *unmap_race_grower(void *arg)
{
    unmap_race_t *r = arg;
    uint64_t x = (uintptr_t)&x | 1;
    while (!atomic_load(&r->stop)) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* sizes of every kind, so that some growth fits a hole exactly */
        pm_span_t *s = pm_pageheap_alloc(1 + (size_t)(x % 1300));
        if (!s) break;
        atomic_fetch_add(&r->grown, 1);
        for (int i = 0; i < 50; i++) {
            if (pm_pagemap_span(s->page) != s || pm_pagemap_span(s->page + s->npages - 1) != s)
                atomic_fetch_add(&r->bad, 1);
            sched_yield();
        }
        pm_pageheap_free(s);
    }
    return NULL;
}

static void test_pageheap_unmap_races_growth(void **state)
{
    (void)state;
    unmap_race_t r = {0};
    pthread_t t[3];
    assert_int_equal(pthread_create(&t[0], NULL, unmap_race_releaser, &r), 0);
    assert_int_equal(pthread_create(&t[1], NULL, unmap_race_grower, &r), 0);
    assert_int_equal(pthread_create(&t[2], NULL, unmap_race_grower, &r), 0);
    usleep(1500 * 1000);
    /* on a loaded machine each sched_yield may cost a time slice: run on
     * until enough spans were checked (at most 20 s more) */
    for (int i = 0; i < 2000 && atomic_load(&r.grown) <= 10; i++) usleep(10 * 1000);
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 3; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    print_message("    %ld spans checked, %ld lost their page map entries\n", atomic_load(&r.grown),
                  atomic_load(&r.bad));
    assert_int_equal(atomic_load(&r.bad), 0);
    assert_true(atomic_load(&r.grown) > 10);
    pm_pageheap_release_all();
}

/* ======================================================================
 * central.c  (classes no other test uses: 176, 208, 896, 1024, 1152, 1536 B)
 * ==================================================================== */

static unsigned class_of_size(size_t size)
{
    unsigned c = pm_sizeclass_of(size);
    assert_int_equal(pm_class_size[c], size);
    return c;
}

static uint32_t chain_len(void *chain)
{
    uint32_t n = 0;
    for (void *p = chain; p; p = pm_link_get(p)) n++;
    return n;
}

/* n objects from the central list over as many gets as it takes: a get
 * returns fewer than asked when the class's old spans run out. */
static void *get_full(unsigned cls, uint32_t n)
{
    void *chain = NULL;
    uint32_t have = 0;
    while (have < n) {
        uint32_t got = 0;
        void *part = pm_central_get(cls, n - have, &got);
        assert_non_null(part);
        assert_in_range(got, 1, n - have);
        assert_int_equal(chain_len(part), got);
        void *last = part;
        while (pm_link_get(last)) last = pm_link_get(last);
        pm_link_set(last, chain);
        chain = part;
        have += got;
    }
    return chain;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t freelist_len(const pm_span_t *s)
{
    uint32_t n = 0;
    for (void *p = s->freelist; p; p = pm_link_get(p)) n++;
    return n;
}

/* Checks every object of a chain and the central invariants; `objs` gets
 * the objects (n of them). */
static void check_chain(unsigned cls, void *chain, uint32_t n, void **objs)
{
    size_t size = pm_class_size[cls];
    uint32_t i = 0;
    for (void *p = chain; p; p = pm_link_get(p)) {
        assert_true(i < n);
        objs[i++] = p;
    }
    assert_int_equal(i, n);
    for (i = 0; i < n; i++) {
        uintptr_t a = (uintptr_t)objs[i], page = a >> PM_PAGE_SHIFT;
        pm_span_t *s = pm_pagemap_span(page);
        assert_non_null(s);
        assert_int_equal(s->cls, cls);
        assert_int_equal(s->state, PM_SPAN_IN_USE);
        assert_int_equal(s->npages, pm_class_pages[cls]);
        assert_int_equal(pm_pagemap_leaf(page)->info[page & ((1u << PM_LEAF_BITS) - 1)] & 0xff, cls);
        assert_int_equal(a % PM_ALIGNMENT, 0);
        uintptr_t off = a - (s->page << PM_PAGE_SHIFT);
        assert_int_equal(off % size, 0);
        assert_true(off + size <= s->npages * PAGE);
    }
    qsort(objs, n, sizeof *objs, cmp_ptr);
    for (i = 1; i < n; i++) assert_true((uintptr_t)objs[i] >= (uintptr_t)objs[i - 1] + size);
}

static void check_span_invariant(const pm_span_t *s)
{
    assert_int_equal(s->capacity, s->npages * PAGE / pm_class_size[s->cls]);
    assert_true(s->carved <= s->capacity);
    assert_int_equal(s->allocated + freelist_len(s) + (s->capacity - s->carved), s->capacity);
}

/* Σ allocated over the spans of `objs` == out + parked, for a class whose
 * every span holds one of objs (objs: held or parked in slots), and parked
 * is the sum of the slots' counts, each 1..batch. */
static void check_central_invariant(unsigned cls, void **objs, size_t n)
{
    pm_central_t *c = pm_central_of(cls);
    pm_span_t *seen[256];
    size_t nseen = 0;
    uint64_t allocated = 0;
    for (size_t i = 0; i < n; i++) {
        pm_span_t *s = pm_pagemap_span((uintptr_t)objs[i] >> PM_PAGE_SHIFT);
        size_t j = 0;
        while (j < nseen && seen[j] != s) j++;
        if (j < nseen) continue;
        assert_true(nseen < PM_ARRAY_LEN(seen));
        seen[nseen++] = s;
        check_span_invariant(s);
        allocated += s->allocated;
    }
    uint64_t parked = 0;
    for (uint32_t i = 0; i < c->nslots; i++) {
        assert_in_range(c->slot_n[i], 1, pm_class_batch[cls]);
        parked += c->slot_n[i];
    }
    assert_int_equal(parked, c->parked);
    assert_int_equal(allocated, c->out + c->parked);
    assert_int_equal(c->spans, nseen);
}

static void test_central_get_put(void **state)
{
    (void)state;
    unsigned cls = class_of_size(208);
    pm_central_t *c = pm_central_of(cls);
    uint32_t cap = pm_class_pages[cls] * PAGE / 208;
    /* untouched class: not set up yet (set up at first use) or empty */
    assert_true(c->nonempty.next == NULL || c->nonempty.next == &c->nonempty);
    assert_int_equal(c->nslots, 0);
    pm_pageheap_stats_t before = ph_stats();

    uint32_t n = 2 * cap + 5, got = 0; /* three spans, not a batch */
    assert_true(n != pm_class_batch[cls]);
    void *chain = pm_central_get(cls, n, &got);
    assert_non_null(chain);
    assert_int_equal(got, n);
    void **objs = calloc(n, sizeof *objs);
    check_chain(cls, chain, n, objs);
    assert_int_equal(c->out, n);
    assert_int_equal(c->spans, 3);
    assert_int_equal(ph_stats().in_use - before.in_use, 3 * pm_class_pages[cls] * PAGE);
    check_central_invariant(cls, objs, n);
    /* only the partly carved span is still on the nonempty list */
    assert_ptr_not_equal(c->nonempty.next, &c->nonempty);
    assert_ptr_equal(c->nonempty.next->next, &c->nonempty);
    assert_int_equal(c->nonempty.next->carved, 5);

    /* back one at a time, but keep one object of each span */
    pm_span_t *spans[3] = {0};
    void *keep[3] = {0};
    for (uint32_t i = 0; i < n; i++) {
        pm_span_t *s = pm_pagemap_span((uintptr_t)objs[i] >> PM_PAGE_SHIFT);
        int k = 0;
        while (k < 3 && spans[k] && spans[k] != s) k++;
        assert_true(k < 3);
        if (!spans[k]) {
            spans[k] = s;
            keep[k] = objs[i];
            continue;
        }
        pm_link_set(objs[i], NULL);
        pm_central_put(cls, objs[i], 1);
    }
    assert_int_equal(c->out, 3);
    assert_int_equal(c->spans, 3);
    assert_int_equal(ph_stats().in_use - before.in_use, 3 * pm_class_pages[cls] * PAGE);
    /* single objects park, each joining the newest slot until it holds a
     * batch: n - 3 objects fill the fewest slots */
    uint32_t batch = pm_class_batch[cls];
    assert_true((uint64_t)c->max_slots * batch >= n - 3);
    assert_int_equal(c->parked, n - 3);
    assert_int_equal(c->nslots, (n - 3 + batch - 1) / batch);
    for (uint32_t i = 0; i + 1 < c->nslots; i++) assert_int_equal(c->slot_n[i], batch);
    check_central_invariant(cls, keep, 3);
    /* draining the slots puts them back into their spans, which stay */
    pm_central_drain();
    assert_int_equal(c->nslots, 0);
    assert_int_equal(c->parked, 0);
    assert_int_equal(c->spans, 3);
    check_central_invariant(cls, keep, 3);
    /* the last object of a span sends the span back to the page heap, once
     * it leaves the slots */
    for (int k = 0; k < 3; k++) {
        uint64_t in_use = ph_stats().in_use;
        pm_link_set(keep[k], NULL);
        pm_central_put(cls, keep[k], 1);
        assert_int_equal(c->parked, 1);
        assert_int_equal(ph_stats().in_use, in_use);
        pm_central_drain();
        assert_int_equal(in_use - ph_stats().in_use, pm_class_pages[cls] * PAGE);
        assert_int_equal(c->spans, 2u - k);
        uintptr_t page = spans[k]->page;
        assert_int_equal(pm_pagemap_leaf(page)->info[page & ((1u << PM_LEAF_BITS) - 1)], 0);
    }
    assert_int_equal(c->out, 0);
    assert_int_equal(c->span_free, 0);
    assert_ptr_equal(c->nonempty.next, &c->nonempty);
    assert_int_equal(ph_stats().in_use, before.in_use);

    /* a whole chain back at once (longer than a batch: into the spans) */
    assert_true(n > batch);
    chain = pm_central_get(cls, n, &got);
    assert_int_equal(got, n);
    pm_central_put(cls, chain, n);
    assert_int_equal(c->out, 0);
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
    free(objs);
}

static void test_central_transfer_slots(void **state)
{
    (void)state;
    unsigned cls = class_of_size(896);
    pm_central_t *c = pm_central_of(cls);
    uint32_t batch = pm_class_batch[cls];
    assert_int_equal(c->nslots, 0);
    assert_int_equal(c->out, 0);
    pm_pageheap_stats_t before = ph_stats();

    uint32_t got;
    void *chain = pm_central_get(cls, batch, &got);
    assert_int_equal(got, batch);
    void *objs[64];
    check_chain(cls, chain, batch, objs);
    assert_int_equal(c->out, batch);

    /* a full batch parks in a slot */
    pm_central_put(cls, chain, batch);
    assert_int_equal(c->nslots, 1);
    assert_int_equal(c->out, 0);
    check_central_invariant(cls, objs, batch);
    /* nothing went back to the spans */
    uint64_t in_use = ph_stats().in_use;
    assert_true(in_use > before.in_use);

    /* the next batch get returns the same chain, O(1) */
    void *again = pm_central_get(cls, batch, &got);
    assert_ptr_equal(again, chain);
    assert_int_equal(got, batch);
    assert_int_equal(c->nslots, 0);
    assert_int_equal(c->out, batch);
    assert_int_equal(chain_len(again), batch);
    void *objs2[64];
    check_chain(cls, again, batch, objs2);
    assert_memory_equal(objs, objs2, batch * sizeof(void *));

    /* slots are bounded by max_slots: the rest goes into the spans */
    uint32_t nb = c->max_slots + 1;
    void **chains = calloc(nb, sizeof *chains);
    chains[0] = again;
    for (uint32_t i = 1; i < nb; i++) {
        chains[i] = get_full(cls, batch);
    }
    for (uint32_t i = 0; i < nb; i++) pm_central_put(cls, chains[i], batch);
    assert_int_equal(c->nslots, c->max_slots);
    assert_int_equal(c->parked, (uint64_t)c->max_slots * batch);
    assert_int_equal(c->out, 0);

    /* a get of fewer than a slot holds splits the newest slot */
    void *two = pm_central_get(cls, 2, &got);
    assert_int_equal(got, 2);
    assert_int_equal(chain_len(two), 2);
    assert_int_equal(c->nslots, c->max_slots);
    assert_int_equal(c->slot_n[c->nslots - 1], batch - 2);
    assert_int_equal(c->parked, (uint64_t)c->max_slots * batch - 2);
    /* a get of what it holds takes the whole slot */
    void *rest = pm_central_get(cls, batch - 2, &got);
    assert_int_equal(got, batch - 2);
    assert_int_equal(chain_len(rest), batch - 2);
    assert_int_equal(c->nslots, c->max_slots - 1);
    assert_int_equal(c->out, batch);
    /* short chains join the newest slot while it has room for them */
    void *one = rest;
    rest = pm_link_get(one);
    pm_link_set(one, NULL);
    pm_central_put(cls, two, 2);  /* the newest slot is full: a slot of its own */
    assert_int_equal(c->nslots, c->max_slots);
    assert_int_equal(c->slot_n[c->nslots - 1], 2);
    pm_central_put(cls, rest, batch - 3); /* joins it: 2 + batch - 3 < batch */
    assert_int_equal(c->nslots, c->max_slots);
    assert_int_equal(c->slot_n[c->nslots - 1], batch - 1);
    assert_int_equal(chain_len(c->slots[c->nslots - 1]), batch - 1);
    pm_central_put(cls, one, 1);          /* fills it to a batch */
    assert_int_equal(c->slot_n[c->nslots - 1], batch);
    assert_int_equal(c->out, 0);
    assert_int_equal(c->parked, (uint64_t)c->max_slots * batch);

    /* malloc_trim's drain returns every parked object to its span, and the
     * spans, now empty, to the page heap */
    pm_central_drain();
    assert_int_equal(c->nslots, 0);
    assert_int_equal(c->parked, 0);
    assert_int_equal(c->out, 0);
    assert_int_equal(c->spans, 0);
    assert_int_equal(c->span_free, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
    free(chains);
}

/* The first n objects of *chain as a chain of their own; *chain keeps the
 * rest. */
static void *take_front(void **chain, uint32_t n)
{
    void *front = *chain, *last = front;
    for (uint32_t i = 1; i < n; i++) last = pm_link_get(last);
    *chain = pm_link_get(last);
    pm_link_set(last, NULL);
    return front;
}

/* A get that the class's old spans can serve only in part comes back short
 * instead of opening a fresh span; once they are empty it opens one. */
static void test_central_short_get(void **state)
{
    (void)state;
    unsigned cls = class_of_size(1536);
    pm_central_t *c = pm_central_of(cls);
    uint32_t cap = pm_class_pages[cls] * PAGE / pm_class_size[cls], got;
    assert_int_equal(c->out, 0);
    assert_int_equal(c->spans, 0);
    assert_true(cap > 4);
    pm_pageheap_stats_t before = ph_stats();

    void *all = pm_central_get(cls, cap, &got); /* one fresh span, all of it */
    assert_int_equal(got, cap);
    assert_int_equal(c->spans, 1);
    void *three = take_front(&all, 3);
    pm_central_put(cls, three, 3);
    pm_central_drain(); /* the three go back into their span */
    assert_int_equal(c->parked, 0);
    assert_int_equal(c->span_free, 3);

    void *a = pm_central_get(cls, cap, &got);
    assert_int_equal(got, 3); /* short: no second span for the rest */
    assert_int_equal(c->spans, 1);
    assert_int_equal(chain_len(a), 3);
    void *b = pm_central_get(cls, cap, &got); /* old spans empty: a fresh one */
    assert_int_equal(got, cap);
    assert_int_equal(c->spans, 2);

    pm_central_put(cls, all, cap - 3);
    pm_central_put(cls, a, 3);
    pm_central_put(cls, b, cap);
    pm_central_drain();
    assert_int_equal(c->out, 0);
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

/* Short chains with several slots: joining the newest slot, gets that take
 * whole slots and split the next, short chains that find every slot taken,
 * and the byte cap that keeps a big class's single objects out. */
static void test_central_partial_slots(void **state)
{
    (void)state;
    unsigned cls = class_of_size(176);
    pm_central_t *c = pm_central_of(cls);
    uint32_t batch = pm_class_batch[cls], got;
    assert_int_equal(c->nslots, 0);
    assert_int_equal(c->out, 0);
    pm_pageheap_stats_t before = ph_stats();

    void *a = pm_central_get(cls, batch, &got);
    assert_int_equal(got, batch);
    assert_true(c->max_slots >= 3);
    void *b = get_full(cls, batch);
    void *b5 = take_front(&b, 5), *b10 = take_front(&b, 10); /* b keeps batch - 15 */

    pm_central_put(cls, a, batch);
    pm_central_put(cls, b5, 5); /* the newest slot is full: a slot of its own */
    assert_int_equal(c->nslots, 2);
    assert_int_equal(c->slot_n[1], 5);
    pm_central_put(cls, b10, 10); /* joins it */
    assert_int_equal(c->nslots, 2);
    assert_int_equal(c->slot_n[1], 15);
    assert_int_equal(chain_len(c->slots[1]), 15);
    assert_int_equal(c->parked, batch + 15);

    /* a batch: the newest slot whole (15), then 17 off the one below */
    void *objs[64];
    void *x = pm_central_get(cls, batch, &got);
    assert_int_equal(got, batch);
    check_chain(cls, x, batch, objs);
    assert_int_equal(c->nslots, 1);
    assert_int_equal(c->slot_n[0], batch - 17);
    assert_int_equal(chain_len(c->slots[0]), batch - 17);
    assert_int_equal(c->parked, batch - 17);
    /* more than is parked: what there is */
    void *y = pm_central_get(cls, batch, &got);
    assert_int_equal(got, batch - 17);
    assert_int_equal(chain_len(y), batch - 17);
    assert_int_equal(c->nslots, 0);
    assert_int_equal(c->parked, 0);
    assert_int_equal(c->out, 2 * batch); /* x, y and what is left of b */

    /* every slot taken by a full batch: a short chain goes to its spans */
    void **full = calloc(c->max_slots, sizeof *full);
    for (uint32_t i = 1; i < c->max_slots; i++) {
        full[i] = get_full(cls, batch); /* from the spans */
    }
    pm_central_put(cls, x, batch);
    for (uint32_t i = 1; i < c->max_slots; i++) pm_central_put(cls, full[i], batch);
    assert_int_equal(c->nslots, c->max_slots);
    uint64_t span_free = c->span_free;
    void *y3 = take_front(&y, 3);
    pm_central_put(cls, y3, 3);
    assert_int_equal(c->nslots, c->max_slots);
    assert_int_equal(c->parked, (uint64_t)c->max_slots * batch);
    assert_int_equal(c->span_free, span_free + 3);
    pm_central_put(cls, y, batch - 20);
    pm_central_put(cls, b, batch - 15);
    assert_int_equal(c->out, 0);
    pm_central_drain();
    assert_int_equal(c->parked, 0);
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
    free(full);

    /* a class whose single object exceeds its cap: neither a short chain
     * nor a full batch parks (each span goes straight back to the page
     * heap) */
    unsigned big = class_of_size(96 * 1024);
    pm_central_t *cb = pm_central_of(big);
    assert_true(pm_class_size[big] > 64 * 1024);
    void *one = pm_central_get(big, 1, &got);
    assert_int_equal(got, 1);
    assert_int_equal(cb->spans, 1);
    pm_central_put(big, one, 1);
    assert_int_equal(cb->parked, 0);
    assert_int_equal(cb->spans, 0);
    void *two = pm_central_get(big, pm_class_batch[big], &got);
    assert_int_equal(got, pm_class_batch[big]);
    pm_central_put(big, two, pm_class_batch[big]);
    assert_int_equal(cb->nslots, 0);
    assert_int_equal(cb->parked, 0);
    assert_int_equal(cb->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

/* 1 if the OS page holding p is resident, else 0. */
static int page_resident(const void *p)
{
    size_t os = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char v = 0;
    assert_int_equal(mincore((void *)((uintptr_t)p & ~(os - 1)), os, &v), 0);
    return v & 1;
}

/* malloc_trim's second step: the OS pages that lie wholly inside the free
 * objects of spans still in use go back to the OS (all but the page that
 * holds an object's link), and so do the spans' tails; live objects keep
 * every byte, and the free objects are back in their spans afterwards. */
static void test_central_release_free(void **state)
{
    (void)state;
    size_t os = (size_t)sysconf(_SC_PAGESIZE);
    unsigned cls = class_of_size(9216); /* 4 objects in 5 pages: a 4 KiB tail */
    size_t size = pm_class_size[cls];
    if (2 * os > size) {
        print_message("    (OS pages of %zu bytes: no page inside a 9216-byte object; skipped)\n", os);
        return;
    }
    uint32_t per_span = (uint32_t)(pm_class_pages[cls] * PAGE / size);
    pm_central_t *c = pm_central_of(cls);
    pm_central_drain();
    uint64_t spans0 = c->spans, free0 = c->span_free, out0 = c->out;
    enum { N = 32 };
    uint8_t *o[N];
    void *chain = get_full(cls, N);
    for (int i = 0; i < N; i++) {
        o[i] = chain;
        chain = pm_link_get(chain);
        memset(o[i], 0xa5, size);
    }
    /* every other object back: each span keeps live objects */
    uint32_t nfree = 0;
    for (int i = 0; i < N; i += 2) {
        pm_link_set(o[i], NULL);
        pm_central_put(cls, o[i], 1);
        nfree++;
    }
    pm_central_drain(); /* parked objects into their spans */
    uint64_t released = pm_central_release_free();
    /* each freed object has at least one whole OS page past its first */
    assert_true(released >= nfree * os);
    for (int i = 0; i < N; i++) {
        pm_span_t *s = pm_pagemap_span((uintptr_t)o[i] >> PM_PAGE_SHIFT);
        assert_non_null(s);
        assert_int_equal(s->cls, cls);
        assert_int_equal(s->trimming, 0);
        assert_null(s->held);
        if (i % 2) { /* live: every byte kept */
            for (size_t k = 0; k < size; k++)
                if (o[i][k] != 0xa5) fail_msg("live object %d lost byte %zu", i, k);
            continue;
        }
        /* free: its link's page stays, the pages wholly past it go */
        assert_true(page_resident(o[i]));
        uintptr_t lo = ((uintptr_t)o[i] + sizeof(void *) + os - 1) & ~(os - 1);
        uintptr_t hi = ((uintptr_t)o[i] + size) & ~(os - 1);
        assert_true(hi > lo);
        for (uintptr_t a = lo; a < hi; a += os)
            if (page_resident((void *)a)) fail_msg("object %d: page %#lx still resident", i, (unsigned long)a);
        /* back on its span's free list, the span back on the nonempty list */
        assert_true(s->on_list);
        uint32_t live = 0, found = 0;
        for (int j = 0; j < N; j++)
            if (pm_pagemap_span((uintptr_t)o[j] >> PM_PAGE_SHIFT) == s) live += j % 2;
        for (void *f = s->freelist; f; f = pm_link_get(f)) found += f == (void *)o[i];
        assert_int_equal(found, 1);
        assert_int_equal(s->allocated, live);
        assert_int_equal(freelist_len(s) + (s->capacity - s->carved), per_span - live);
        /* the span's tail past its last object went too */
        uintptr_t end = (s->page << PM_PAGE_SHIFT) + s->npages * PAGE;
        uintptr_t tail = ((s->page << PM_PAGE_SHIFT) + (uintptr_t)per_span * size + os - 1) & ~(os - 1);
        for (uintptr_t a = tail; a < end; a += os) assert_false(page_resident((void *)a));
    }
    assert_int_equal(c->spans, spans0 + N / per_span);
    assert_int_equal(c->out, out0 + N - nfree);
    assert_int_equal(c->span_free, free0 + (uint64_t)(N / per_span) * per_span - (N - nfree));
    /* the objects are handed out again, whole: the released pages read 0 */
    void *again = get_full(cls, nfree);
    uint32_t zeros = 0;
    for (uint8_t *a = again; a; a = pm_link_get(a)) {
        for (size_t k = sizeof(void *); k < size; k++) zeros += a[k] == 0;
        memset(a + sizeof(void *), 0x5a, size - sizeof(void *));
    }
    assert_true(zeros >= nfree * os / 2);
    pm_central_put(cls, again, nfree);
    for (int i = 1; i < N; i += 2) {
        pm_link_set(o[i], NULL);
        pm_central_put(cls, o[i], 1);
    }
    pm_central_drain(); /* every span empty: back to the page heap */
    assert_int_equal(c->spans, spans0);
    assert_int_equal(c->out, out0);
    assert_int_equal(c->span_free, free0);
}

/* While one thread mallocs and frees blocks of a class, writing them and
 * checking them, another trims it over and over: no block in use may lose
 * a byte, and the class's books balance at the end. */
typedef struct {
    unsigned rounds;
    _Atomic int done;
    _Atomic int corrupt;
} trim_race_t;

static void *trim_race_worker(void *arg)
{
    trim_race_t *r = arg;
    enum { M = 256 }; /* 2.3 MB: more than a thread cache holds */
    uint8_t *b[M];
    /* each round takes M blocks, most of which the last round's frees sent
     * back through the central lists into their spans, fills them, checks
     * them and frees them all */
    for (unsigned round = 0; round < r->rounds; round++) {
        for (int k = 0; k < M; k++) {
            b[k] = pm_malloc(9216);
            memset(b[k], (int)(round + (unsigned)k) | 1, 9216);
        }
        for (int k = 0; k < M; k++) {
            for (size_t j = 0; j < 9216; j += 256)
                if (b[k][j] != (uint8_t)((round + (unsigned)k) | 1)) atomic_store(&r->corrupt, 1);
            pm_free(b[k]);
        }
    }
    atomic_store(&r->done, 1);
    return NULL; /* the thread's cache goes back at its exit */
}

static void test_central_release_free_race(void **state)
{
    (void)state;
    unsigned cls = class_of_size(9216);
    pm_central_t *c = pm_central_of(cls);
    pm_central_drain();
    uint64_t spans0 = c->spans, free0 = c->span_free, out0 = c->out;
    trim_race_t r = {.rounds = 400};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, trim_race_worker, &r), 0);
    unsigned trims = 0;
    while (!atomic_load(&r.done) || trims < 10) {
        pm_central_release_free();
        trims++;
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(atomic_load(&r.corrupt), 0);
    pm_central_drain();
    assert_int_equal(c->out, out0);
    assert_int_equal(c->spans, spans0);
    assert_int_equal(c->span_free, free0);
}

/* A fork while another thread trims: the child, where that thread does
 * not exist, must find every span back on its class's list with its free
 * objects (the fork handler gives back what the trim held), so its books
 * balance and it can allocate and free the class. */
typedef struct {
    _Atomic int stop;
    _Atomic int in_trim;
} trim_fork_t;

static void *trim_fork_trimmer(void *arg)
{
    trim_fork_t *f = arg;
    while (!atomic_load(&f->stop)) {
        atomic_store(&f->in_trim, 1);
        pm_central_release_free();
        atomic_store(&f->in_trim, 0);
    }
    return NULL;
}

/* In the child: free objects on the nonempty spans == the class's count. */
static int trim_fork_child(unsigned cls)
{
    pm_central_t *c = pm_central_of(cls);
    if (c->trim_held) return 2;
    uint64_t on_lists = 0;
    for (pm_span_t *s = c->nonempty.next; s != &c->nonempty; s = s->next) {
        if (s->trimming || s->held) return 3;
        on_lists += freelist_len(s) + (s->capacity - s->carved);
    }
    if (on_lists != c->span_free) return 4;
    void *p[64];
    for (int i = 0; i < 64; i++) {
        p[i] = pm_malloc(9216);
        if (!p[i]) return 5;
        memset(p[i], 1, 9216);
    }
    for (int i = 0; i < 64; i++) pm_free(p[i]);
    return 0;
}

static void test_central_release_free_fork(void **state)
{
    (void)state;
    unsigned cls = class_of_size(9216);
    /* many free objects in spans that stay in use: each trim takes a while */
    enum { N = 2000 };
    void **b = calloc(N, sizeof *b);
    assert_non_null(b);
    for (int i = 0; i < N; i++) {
        b[i] = pm_malloc(9216);
        assert_non_null(b[i]);
        memset(b[i], 3, 9216);
    }
    for (int i = 0; i < N; i += 2) pm_free(b[i]);
    pm_tcache_flush_all(&pm_tls);
    pm_central_drain();
    trim_fork_t f = {0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, trim_fork_trimmer, &f), 0);
    int during = 0;
    for (int k = 0; k < 40; k++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) _exit(trim_fork_child(cls));
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("child %d: status %#x", k, (unsigned)st);
        during += atomic_load(&f.in_trim);
    }
    atomic_store(&f.stop, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(during > 0);
    for (int i = 1; i < N; i += 2) pm_free(b[i]);
    free(b);
}

/* What parks per class: up to 64 KiB for classes of up to 1 KiB, 16 KiB
 * above; a class above 1 KiB whose batch is bigger than that parks short
 * chains only, and what does not fit goes back to its spans. */
static void test_central_park_cap(void **state)
{
    (void)state;
    unsigned small = class_of_size(1024), large = class_of_size(1152);
    pm_central_t *cs = pm_central_of(small), *cl = pm_central_of(large);
    uint32_t bs = pm_class_batch[small], bl = pm_class_batch[large];
    size_t sl = pm_class_size[large];
    assert_int_equal(cs->out, 0);
    assert_int_equal(cl->out, 0);
    pm_pageheap_stats_t before = ph_stats();

    /* 1 KiB: full batches park up to 64 KiB, the next one goes home */
    uint32_t fit = (uint32_t)(64 * 1024 / (bs * 1024));
    assert_true(fit >= 2);
    void **chains = calloc(fit + 1, sizeof *chains);
    for (uint32_t i = 0; i <= fit; i++) chains[i] = get_full(small, bs);
    for (uint32_t i = 0; i <= fit; i++) pm_central_put(small, chains[i], bs);
    assert_int_equal(cs->parked, (uint64_t)fit * bs);
    assert_true(cs->parked * 1024 <= 64 * 1024);
    assert_int_equal(cs->out, 0);

    /* above 1 KiB: a batch is more than 16 KiB and does not park ... */
    assert_true((size_t)bl * sl > 16 * 1024);
    void *batch = get_full(large, bl);
    pm_central_put(large, batch, bl);
    assert_int_equal(cl->parked, 0);
    assert_int_equal(cl->nslots, 0);
    assert_int_equal(cl->spans, 0); /* its spans emptied and went home */
    /* ... short chains park while they stay within 16 KiB */
    uint32_t cap = (uint32_t)(16 * 1024 / sl);
    assert_true(cap >= 2 && cap < bl);
    void *objs = get_full(large, bl);
    for (uint32_t i = 0; i < bl; i++) {
        void *o = take_front(&objs, 1);
        pm_central_put(large, o, 1);
        assert_int_equal(cl->parked, i < cap ? i + 1 : cap);
    }
    assert_true(cl->parked * sl <= 16 * 1024);
    assert_int_equal(cl->out, 0);

    pm_central_drain();
    assert_int_equal(cs->spans, 0);
    assert_int_equal(cl->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
    free(chains);
}

/* ======================================================================
 * tcache.c and alloc.c through pm_malloc & co.
 * ==================================================================== */

static void check_tcache_invariants(const pm_tcache_t *t, const char *where)
{
    size_t cap = 0;
    for (unsigned c = 1; c < pm_class_count; c++) {
        const pm_tlist_t *l = &t->list[c];
        cap += (size_t)l->max_len * pm_class_size[c];
        uint32_t n = 0;
        for (void *p = l->head; p && n <= l->len; p = pm_link_get(p)) n++;
        if (n != l->len) fail_msg("%s: class %u: len %u but %u on the list", where, c, l->len, n);
    }
    if (cap != t->capacity) fail_msg("%s: capacity %zu != Σ max_len·size %zu", where, t->capacity, cap);
    size_t budget = atomic_load(&((pm_tcache_t *)t)->budget);
    if (t->capacity > budget) fail_msg("%s: capacity %zu > budget %zu", where, t->capacity, budget);
}

typedef struct {
    int state_before, state_after_malloc, state_after_free;
    uint32_t max_len_first;
    uint32_t grow_bad;           /* growth steps that broke slow start */
    uint32_t grow_steps, max_len_end;
    uint32_t len_over;           /* frees after which len > max_len */
    uint32_t len_over_at, len_over_len, len_over_max;
    uint64_t threads_in;
    size_t capacity, budget, sum;
    uint32_t bad_list;
} slowstart_t;

/* A new thread caches nothing for its first PM_THREAD_NEW_OPS operations
 * (tcache.c): these make it a caching one, in a class of its own. */
static void become_active(void)
{
    assert_int_equal(pm_tls.state, PM_THREAD_EMPTY);
    pm_free(pm_malloc(24));
    assert_int_equal(pm_tls.state, PM_THREAD_NEW);
    for (int i = 0; i < PM_THREAD_NEW_OPS && pm_tls.state == PM_THREAD_NEW; i++) pm_free(pm_malloc(24));
    assert_int_equal(pm_tls.state, PM_THREAD_ACTIVE);
}

static void *slowstart_thread(void *arg)
{
    slowstart_t *r = arg;
    unsigned cls = pm_sizeclass_of(64);
    uint32_t batch = pm_class_batch[cls];
    pm_tlist_t *l = &pm_tls.list[cls];
    enum { N = 2000 };
    static void *blocks[N];
    r->state_before = pm_tls.state;
    become_active();
    blocks[0] = pm_malloc(64);
    r->state_after_malloc = pm_tls.state;
    r->max_len_first = l->max_len;
    r->threads_in = stats().threads;
    for (int i = 1; i < N; i++) {
        uint32_t len = l->len, max = l->max_len;
        blocks[i] = pm_malloc(64);
        if (l->max_len != max) {
            r->grow_steps++;
            /* below a batch the limit doubles (capped at the batch);
             * past it, it grows a batch per underflow */
            uint32_t want = max >= batch ? max + batch : max * 2 <= batch ? max * 2 : batch;
            if (len != 0 || l->max_len != want) r->grow_bad++;
        }
    }
    r->max_len_end = l->max_len;
    for (int i = 0; i < N; i++) {
        pm_free(blocks[i]);
        if (l->len > l->max_len && !r->len_over++) {
            r->len_over_at = (uint32_t)i;
            r->len_over_len = l->len;
            r->len_over_max = l->max_len;
        }
    }
    r->state_after_free = pm_tls.state;
    size_t sum = 0;
    for (unsigned c = 1; c < pm_class_count; c++) {
        sum += (size_t)pm_tls.list[c].max_len * pm_class_size[c];
        if (pm_tls.list[c].len > pm_tls.list[c].max_len) r->bad_list++;
    }
    r->sum = sum;
    r->capacity = pm_tls.capacity;
    r->budget = atomic_load(&pm_tls.budget);
    return NULL;
}

/* A thread whose first allocation comes in its last round of key
 * destructors: glibc never calls profmalloc's exit hook for it.  Its cache
 * must not stay in the registry as a pointer into its dead TLS: with the
 * thread's stack reused by the next thread the registry became a cycle and
 * stats hung; with the stack unmapped, stats crashed. */
static pthread_key_t lr_key;
static __thread int lr_rounds;
static void *lr_last;

static void lr_dtor(void *v)
{
    if (++lr_rounds < 4) { /* PTHREAD_DESTRUCTOR_ITERATIONS in glibc */
        pthread_setspecific(lr_key, v); /* once more, in the next round */
        return;
    }
    void *p = pm_malloc(64); /* the thread's first allocation */
    pm_free(lr_last);
    lr_last = p;
}

static void *lr_thread(void *arg)
{
    pthread_setspecific(lr_key, (void *)1);
    return arg;
}

static void late_registration_child(void *arg)
{
    int no_robust_list = arg != NULL;
    if (no_robust_list) {
        /* new threads get no robust list: set_robust_list fails as under
         * qemu-user, so the kernel never marks their node's owner dead */
        struct sock_filter code[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_set_robust_list, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {sizeof code / sizeof code[0], code};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
            _exit(77);
    }
    if (pthread_key_create(&lr_key, lr_dtor) != 0) _exit(3);
    for (int i = 0; i < 3; i++) { /* glibc reuses the stack (and TLS) */
        pthread_t t;
        if (pthread_create(&t, NULL, lr_thread, NULL) || pthread_join(t, NULL)) _exit(3);
    }
    profmalloc_stats_t s;
    pm_stats_collect(&s); /* hung here */
    /* a thread on a stack of our own, unmapped after it ends */
    size_t sz = 256 * 1024;
    void *stack = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstack(&at, stack, sz);
    pthread_t t;
    if (pthread_create(&t, &at, lr_thread, NULL) || pthread_join(t, NULL)) _exit(3);
    munmap(stack, sz);
    pm_stats_collect(&s); /* crashed here (without a robust list too) */
    if (!no_robust_list && s.threads != 1) _exit(4); /* only this one lives */
    for (int i = 0; i < 100; i++) pm_free(pm_malloc(100000)); /* budget walks too */
    _exit(0);
}

static void test_tcache_registration_in_last_destructor_round(void **state)
{
    (void)state;
    char out[256];
    int st = run_in_child(late_registration_child, NULL, out, sizeof out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("child status %#x: %s", (unsigned)st, out);
    /* where threads have no robust list, the walks stay off their caches */
    st = run_in_child(late_registration_child, (void *)1, out, sizeof out);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) skip(); /* no seccomp here */
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("child (no robust list) status %#x: %s", (unsigned)st, out);
}

static void test_tcache_fresh_thread_and_slow_start(void **state)
{
    (void)state;
    slowstart_t r;
    memset(&r, 0, sizeof r);
    uint64_t threads0 = stats().threads;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slowstart_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r.state_before, PM_THREAD_EMPTY);
    assert_int_equal(r.state_after_malloc, PM_THREAD_ACTIVE);
    assert_int_equal(r.state_after_free, PM_THREAD_ACTIVE);
    assert_int_equal(r.threads_in, threads0 + 1);
    /* the first refill sets the limit to 4 objects (tcache.c FIRST_LEN)
     * and doubles it: 8 after the first malloc (the batch of 64 B is 32) */
    assert_int_equal(pm_class_batch[pm_sizeclass_of(64)], 32);
    assert_int_equal(r.max_len_first, 8);
    assert_true(r.grow_steps > 10);
    assert_int_equal(r.grow_bad, 0);
    assert_true(r.max_len_end > pm_class_batch[pm_sizeclass_of(64)]);
    assert_int_equal(r.sum, r.capacity);
    assert_true(r.capacity <= r.budget);
    assert_int_equal(stats().threads, threads0);
}

/* pm_types.h: "len <= max_len, except while a free is deciding what to do
 * with an overflow" -- so it holds again whenever pm_free has returned.
 * The slow-start thread above frees 2000 blocks of 64 bytes after growing
 * the list far beyond a batch, which makes the list shrink on overflow. */
static void test_tcache_len_within_max_len(void **state)
{
    (void)state;
    slowstart_t r;
    memset(&r, 0, sizeof r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slowstart_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (r.len_over)
        fail_msg("len > max_len after %u of the frees (first after free #%u: len %u, max_len %u)",
                 r.len_over, r.len_over_at, r.len_over_len, r.len_over_max);
    assert_int_equal(r.bad_list, 0);
}

/* A thread that only frees (a consumer): each overflow sends the list's
 * oldest batch to the central list and keeps the newest frees, so after
 * every free the list is exactly the last `len` blocks freed, newest
 * first, NULL-terminated.  (Releasing the newest batch instead keeps a
 * cold object and walks the whole batch; a cut that miscounts breaks the
 * length or the termination.) */
enum { CONSUMER_N = 1000 };
typedef struct {
    void **blocks;
    unsigned bad_at, overflows;
    uint32_t bad_len, bad_walk;
} consumer_t;

static void *consumer_thread(void *arg)
{
    consumer_t *r = arg;
    unsigned cls = pm_sizeclass_of(64);
    for (unsigned i = 0; i < CONSUMER_N && !r->bad_at; i++) {
        uint32_t before = pm_tls.list[cls].len;
        pm_free(r->blocks[i]);
        pm_tlist_t *l = &pm_tls.list[cls];
        if (l->len < before) r->overflows++;
        uint32_t walked = 0;
        int ok = 1;
        for (void *p = l->head; p && walked <= l->len; p = pm_link_get(p), walked++)
            if (walked > i || p != r->blocks[i - walked]) ok = 0;
        if (!ok || walked != l->len) {
            r->bad_at = i + 1;
            r->bad_len = l->len;
            r->bad_walk = walked;
        }
    }
    return NULL;
}

static void test_tcache_consumer_keeps_newest(void **state)
{
    (void)state;
    consumer_t r = {0};
    r.blocks = calloc(CONSUMER_N, sizeof *r.blocks);
    assert_non_null(r.blocks);
    for (unsigned i = 0; i < CONSUMER_N; i++) assert_non_null(r.blocks[i] = pm_malloc(64));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, consumer_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (r.bad_at)
        fail_msg("after free #%u the list has len %u but walks %u objects, or not the newest frees",
                 r.bad_at, r.bad_len, r.bad_walk);
    /* the list overflowed many times: the check above covered the cut */
    assert_true(r.overflows + 1 >= (unsigned)(CONSUMER_N / pm_class_batch[pm_sizeclass_of(64)]));
    free(r.blocks);
}

typedef struct {
    uint64_t threads_in, cache_in, own;
} exit_t;

static void *exit_thread(void *arg)
{
    exit_t *r = arg;
    enum { N = 400 };
    static void *b[N];
    static const size_t sizes[] = {32, 256, 1024, 4096};
    for (size_t k = 0; k < PM_ARRAY_LEN(sizes); k++) {
        for (int i = 0; i < N; i++) b[i] = pm_malloc(sizes[k]);
        for (int i = 0; i < N; i++) pm_free(b[i]);
    }
    uint64_t own = 0;
    for (unsigned c = 1; c < pm_class_count; c++)
        own += (uint64_t)pm_tls.list[c].len * pm_class_size[c];
    r->own = own;
    profmalloc_stats_t s = stats();
    r->threads_in = s.threads;
    r->cache_in = s.thread_cache;
    return NULL;
}

static void test_tcache_exit_flushes(void **state)
{
    (void)state;
    exit_t r = {0};
    profmalloc_stats_t s0 = stats();
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, exit_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    profmalloc_stats_t s1 = stats();
    assert_true(r.own > 64 * 1024);
    assert_int_equal(r.threads_in, s0.threads + 1);
    assert_int_equal(r.cache_in, s0.thread_cache + r.own);
    assert_int_equal(s1.threads, s0.threads);
    assert_int_equal(s1.thread_cache, s0.thread_cache);
    assert_int_equal(s1.in_use, s0.in_use);
    assert_stats_balance(&s1);
}

/* ---- DEAD state: a key destructor that runs after the allocator's ---- */

static pthread_key_t late_key;
static struct {
    int state_at, state_after;
    int malloc_ok, calloc_ok, realloc_ok, large_ok;
    uint32_t max_len;
    uint64_t parked_before, parked_after_get, parked_after_put;
} dead;

static void late_destructor(void *arg)
{
    dead.state_at = pm_tls.state;
    /* the thread's flushed 128-byte list waits in the transfer slots; a
     * dead thread's malloc takes one object from there, its free puts one
     * back */
    pm_central_t *c128 = pm_central_of(pm_sizeclass_of(128));
    dead.parked_before = c128->parked;
    void *r = pm_malloc(128);
    dead.parked_after_get = c128->parked;
    pm_free(r);
    dead.parked_after_put = c128->parked;
    void *keep = arg;
    char *p = pm_malloc(100);
    dead.malloc_ok = p != NULL && pm_usable_size(p) >= 100;
    if (p) memset(p, 0x77, 100);
    char *q = pm_calloc(10, 30);
    dead.calloc_ok = q != NULL && all_zero(q, 296);
    p = pm_realloc(p, 5000);
    dead.realloc_ok = p != NULL && p[0] == 0x77 && p[99] == 0x77;
    void *big = pm_malloc(1 << 20);
    dead.large_ok = big != NULL;
    pm_free(big);
    pm_free(q);
    pm_free(p);
    pm_free(keep); /* allocated while the thread was ACTIVE */
    dead.state_after = pm_tls.state;
    dead.max_len = pm_tls.list[pm_sizeclass_of(128)].max_len;
}

static void *dead_thread(void *arg)
{
    (void)arg;
    become_active();
    void *keep = pm_malloc(128);
    void *tmp = pm_malloc(128);
    pm_free(tmp);
    pthread_setspecific(late_key, keep);
    return NULL;
}

static void test_tcache_dead_thread(void **state)
{
    (void)state;
    /* created long after init, so after the allocator's key: glibc runs
     * destructors in key order */
    assert_int_equal(pthread_key_create(&late_key, late_destructor), 0);
    profmalloc_stats_t s0 = stats();
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, dead_thread, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    profmalloc_stats_t s1 = stats();
    pthread_key_delete(late_key);
    assert_int_equal(dead.state_at, PM_THREAD_DEAD);
    assert_int_equal(dead.state_after, PM_THREAD_DEAD);
    assert_true(dead.malloc_ok);
    assert_true(dead.calloc_ok);
    assert_true(dead.realloc_ok);
    assert_true(dead.large_ok);
    assert_int_equal(dead.max_len, 0);
    assert_true(dead.parked_before >= 1);
    assert_int_equal(dead.parked_after_get, dead.parked_before - 1);
    assert_int_equal(dead.parked_after_put, dead.parked_before);
    /* nothing leaked into a cache that nobody owns, the thread is gone */
    assert_int_equal(s1.threads, s0.threads);
    assert_int_equal(s1.in_use, s0.in_use);
    assert_int_equal(s1.thread_cache, s0.thread_cache);
    assert_stats_balance(&s1);
}

/* ---- budget invariant after a mixed workload, in several threads ----- */

typedef struct {
    unsigned seed;
    size_t capacity, sum, budget;
    uint32_t len_over;
} budget_t;

static void *budget_thread(void *arg)
{
    budget_t *r = arg;
    enum { SLOTS = 4096 };
    void **slot = calloc(SLOTS, sizeof *slot);
    unsigned x = r->seed;
    for (int i = 0; i < 200000; i++) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) % SLOTS;
        if (slot[k]) {
            pm_free(slot[k]);
            slot[k] = NULL;
        } else {
            size_t size = (x >> 20) % 4 == 0 ? (x >> 4) % 32768 : (x >> 4) % 512;
            slot[k] = pm_malloc(size);
        }
    }
    for (int k = 0; k < SLOTS; k++) pm_free(slot[k]);
    free(slot);
    size_t sum = 0;
    for (unsigned c = 1; c < pm_class_count; c++) {
        sum += (size_t)pm_tls.list[c].max_len * pm_class_size[c];
        if (pm_tls.list[c].len > pm_tls.list[c].max_len) r->len_over++;
    }
    r->sum = sum;
    r->capacity = pm_tls.capacity;
    r->budget = atomic_load(&pm_tls.budget);
    return NULL;
}

static void test_tcache_budget_invariant(void **state)
{
    (void)state;
    enum { T = 4 };
    budget_t r[T];
    pthread_t th[T];
    memset(r, 0, sizeof r);
    profmalloc_stats_t s0 = stats();
    for (int i = 0; i < T; i++) {
        r[i].seed = 1234u + (unsigned)i * 7919u;
        assert_int_equal(pthread_create(&th[i], NULL, budget_thread, &r[i]), 0);
    }
    for (int i = 0; i < T; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < T; i++) {
        assert_int_equal(r[i].sum, r[i].capacity);
        assert_true(r[i].capacity <= r[i].budget);
        assert_true(r[i].budget <= pm_options.tcache_bytes);
    }
    profmalloc_stats_t s1 = stats();
    assert_int_equal(s1.threads, s0.threads);
    assert_int_equal(s1.in_use, s0.in_use);
    assert_stats_balance(&s1);
    /* the main thread's cache obeys it too */
    void *p = pm_malloc(10);
    pm_free(p);
    check_tcache_invariants(&pm_tls, "main thread");
}

/* More live threads than the pool has budget for (32 MiB / 512 KiB = 64):
 * every thread ends at its minimum and its lists keep asking for more.  A
 * budget growth looks at a bounded number of other threads, and a thread
 * that found nothing waits before it looks again: each growth used to walk
 * every thread under one lock (1000 threads: 9 s, glibc 0.4 s). */
enum { CROWD = 160 };
static pthread_barrier_t crowd_barrier;

static void *crowd_thread(void *arg)
{
    (void)arg;
    enum { PER = 64 };
    static const size_t sizes[] = {48, 96, 208, 448, 960, 2048, 4096, 8192};
    void *b[PER];
    pthread_barrier_wait(&crowd_barrier); /* all alive at once */
    for (int round = 0; round < 40; round++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            for (int i = 0; i < PER; i++) assert_non_null(b[i] = pm_malloc(sizes[k]));
            for (int i = 0; i < PER; i++) pm_free(b[i]);
        }
    pthread_barrier_wait(&crowd_barrier);
    return NULL;
}

static void test_tcache_crowd_steals_bounded(void **state)
{
    (void)state;
    uint64_t w0, v0, w1, v1;
    pm_tcache_steal_work(&w0, &v0);
    pthread_t th[CROWD];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 << 10);
    assert_int_equal(pthread_barrier_init(&crowd_barrier, NULL, CROWD), 0);
    for (int i = 0; i < CROWD; i++) assert_int_equal(pthread_create(&th[i], &attr, crowd_thread, NULL), 0);
    for (int i = 0; i < CROWD; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&crowd_barrier);
    pthread_attr_destroy(&attr);
    pm_tcache_steal_work(&w1, &v1);
    uint64_t walks = w1 - w0, visits = v1 - v0;
    assert_true(walks > 0);               /* the pool did run out */
    assert_true(visits <= 16 * walks);    /* a few threads per look */
    assert_true(walks <= (uint64_t)CROWD * 48); /* and few looks per thread (~16 here; 800 without the wait) */
}

/* One thread's cache never holds more than 1 MiB (tcache.c MAX_BUDGET),
 * however much the global pool has left: a thread that cycles through
 * blocks of 8..64 KiB grows its lists up to that cap and no further. */
typedef struct {
    size_t budget_max, capacity_max;
    uint32_t over_budget;
} cap_t;

/* One round of 1.5 MB through the thread's cache: 48 blocks of 8..64 KiB
 * allocated, then freed. */
static void cycle_big_blocks(void)
{
    enum { N = 48 };
    void *b[N];
    for (int i = 0; i < N; i++) assert_non_null(b[i] = pm_malloc((size_t)8192 << (i % 4)));
    for (int i = 0; i < N; i++) pm_free(b[i]);
}

static void *cap_thread(void *arg)
{
    cap_t *r = arg;
    for (int round = 0; round < 40; round++) {
        cycle_big_blocks();
        size_t budget = atomic_load(&pm_tls.budget);
        if (budget > r->budget_max) r->budget_max = budget;
        if (pm_tls.capacity > r->capacity_max) r->capacity_max = pm_tls.capacity;
        if (pm_tls.capacity > budget) r->over_budget++;
    }
    return NULL;
}

static void test_tcache_thread_cap(void **state)
{
    (void)state;
    cap_t r = {0};
    assert_true(pm_options.tcache_bytes > ((size_t)4 << 20)); /* the pool is not the limit */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cap_thread, &r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(r.over_budget, 0);
    assert_true(r.budget_max <= ((size_t)1 << 20));
    /* the lists did grow to the cap: 1.5 MB of blocks cycle through them */
    assert_true(r.capacity_max > ((size_t)1 << 20) / 2);
}

/* The global pool bounds the caches of threads that sleep, too: each of
 * SLEEPERS threads in turn grows its cache as far as it can, then sleeps
 * (as a Python thread waiting for the GIL does).  Once the pool is spent, a
 * thread may take only budget that another's lists leave unused, so the
 * caches together stay within PROFMALLOC_TCACHE_BYTES plus the 64 KiB floor
 * each thread is granted when the pool is empty.  Taking used budget (the
 * victim shrinking at a slow path it never reaches while asleep) let them
 * reach SLEEPERS x 1 MiB. */
enum { SLEEPERS = 48 };
typedef struct {
    sem_t grown, wake;
    size_t capacity;
} sleeper_t;

static void *sleeper_thread(void *arg)
{
    sleeper_t *r = arg;
    for (int round = 0; round < 20; round++) cycle_big_blocks();
    r->capacity = pm_tls.capacity;
    sem_post(&r->grown);
    sem_wait(&r->wake);
    return NULL;
}

static void test_tcache_pool_bounds_sleepers(void **state)
{
    (void)state;
    sleeper_t *r = calloc(SLEEPERS, sizeof *r);
    pthread_t th[SLEEPERS];
    assert_non_null(r);
    size_t total = 0, max = 0;
    for (int i = 0; i < SLEEPERS; i++) {
        sem_init(&r[i].grown, 0, 0);
        sem_init(&r[i].wake, 0, 0);
        assert_int_equal(pthread_create(&th[i], NULL, sleeper_thread, &r[i]), 0);
        while (sem_wait(&r[i].grown) != 0) {
        }
        total += r[i].capacity;
        if (r[i].capacity > max) max = r[i].capacity;
    }
    for (int i = 0; i < SLEEPERS; i++) sem_post(&r[i].wake);
    for (int i = 0; i < SLEEPERS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < SLEEPERS; i++) {
        sem_destroy(&r[i].grown);
        sem_destroy(&r[i].wake);
    }
    free(r);
    /* the first threads reached the per-thread cap, so the pool was spent */
    assert_true(max > ((size_t)1 << 20) / 2);
    assert_true((size_t)SLEEPERS * max > pm_options.tcache_bytes);
    if (total > pm_options.tcache_bytes + (size_t)SLEEPERS * 64 * 1024)
        fail_msg("%d sleeping threads cache %zu bytes, over the pool of %zu", SLEEPERS, total,
                 (size_t)pm_options.tcache_bytes);
}

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
    int64_t c0 = pm_tls.countdown;
    void *p1 = pm_malloc(4000); /* empty list: the slow path */
    int64_t c1 = pm_tls.countdown;
    r->len_before_fast = pm_tls.list[cls].len;
    void *p2 = pm_malloc(4000); /* the fast path */
    r->len_after_fast = pm_tls.list[cls].len;
    int64_t c2 = pm_tls.countdown;
    void *p3 = pm_malloc(300000);
    int64_t c3 = pm_tls.countdown;
    void *p4 = pm_calloc(1, 100);
    int64_t c4 = pm_tls.countdown;
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
            assert_int_equal(u, (s + PAGE - 1) / PAGE * PAGE);
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
 * cannot and must move, it gets twice its old size and the block it leaves
 * is not kept resident in the page heap (from 1 MiB: moved with its pages,
 * or copied and released at once). */
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

/* ======================================================================
 * sampler.c
 * ==================================================================== */

static int close_rel(double got, double want, double tol)
{
    if (got == want) return 1;
    return fabs(got - want) <= tol * fabs(want);
}

static void test_sampler_neg_log(void **state)
{
    (void)state;
    assert_true(pm_sampler_neg_log(1.0) == 0.0);
    static const double known[] = {0.5, 0.25, 0.1, 1e-3, 1e-10, 1e-100, 1e-300, 2.2250738585072014e-308,
                                   0.7071067811865475, 0.7071067811865476, 0.99, 0.999999,
                                   1.0 - 1.0 / 9007199254740992.0, 1.0 / 9007199254740992.0,
                                   0.3678794411714423};
    for (size_t i = 0; i < PM_ARRAY_LEN(known); i++) {
        double u = known[i], got = pm_sampler_neg_log(u), want = -log(u);
        if (!close_rel(got, want, 1e-9)) fail_msg("neg_log(%.17g) = %.17g, want %.17g", u, got, want);
    }
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = ((double)(x >> 11) + 1.0) / 9007199254740992.0;
        if (i % 4 == 0) u = ldexp(u, -(int)(x % 900)); /* spread the exponent */
        double got = pm_sampler_neg_log(u), want = -log(u);
        if (!close_rel(got, want, 1e-9)) fail_msg("neg_log(%.17g) = %.17g, want %.17g", u, got, want);
    }
}

static void test_sampler_prob(void **state)
{
    (void)state;
    assert_true(pm_sampler_prob(0.0) == 0.0);
    for (double x = 1e-9; x <= 50.0; x *= 1.01) {
        double got = pm_sampler_prob(x), want = -expm1(-x);
        if (!close_rel(got, want, 1e-9)) fail_msg("prob(%.17g) = %.17g, want %.17g", x, got, want);
        assert_true(got >= 0.0 && got <= 1.0);
    }
    static const double edges[] = {0.25, 0.2499999999, 0.25000001, 0.6931471805599453, 40.0, 40.0001, 1.0};
    for (size_t i = 0; i < PM_ARRAY_LEN(edges); i++) {
        double x = edges[i], got = pm_sampler_prob(x), want = -expm1(-x);
        if (!close_rel(got, want, 1e-9)) fail_msg("prob(%.17g) = %.17g, want %.17g", x, got, want);
    }
    /* monotone */
    double prev = 0;
    for (double x = 1e-6; x < 45; x *= 1.003) {
        double p = pm_sampler_prob(x);
        if (p < prev) fail_msg("prob not monotone at %.17g", x);
        prev = p;
    }
}

static void test_sampler_next(void **state)
{
    (void)state;
    static const uint64_t rates[] = {1000, 65536, 524288};
    enum { N = 200000 };
    for (size_t r = 0; r < PM_ARRAY_LEN(rates); r++) {
        uint64_t rng = 0x9E3779B97F4A7C15ull ^ (rates[r] * 2654435761u);
        double sum = 0, sum2 = 0;
        int64_t min = INT64_MAX;
        for (int i = 0; i < N; i++) {
            int64_t g = pm_sampler_next(&rng, rates[r]);
            if (g < min) min = g;
            sum += (double)g;
            sum2 += (double)g * (double)g;
        }
        double rate = (double)rates[r], mean = sum / N, se = rate / sqrt((double)N);
        if (fabs(mean - rate) > 4 * se)
            fail_msg("rate %.0f: mean gap %.1f, more than 4 std errors (%.1f) off", rate, mean, se);
        /* exponential: variance == mean^2 (loose, 10%) */
        double var = sum2 / N - mean * mean;
        if (fabs(sqrt(var) - rate) > 0.1 * rate)
            fail_msg("rate %.0f: std dev %.1f, want ~%.0f", rate, sqrt(var), rate);
        assert_true(min >= 0);
        assert_true(rng != 0);
    }
    /* same seed, same sequence */
    uint64_t a = 42, b = 42;
    for (int i = 0; i < 100; i++) assert_int_equal(pm_sampler_next(&a, 4096), pm_sampler_next(&b, 4096));
    uint64_t rng = 7;
    for (int i = 0; i < 1000; i++) assert_int_equal(pm_sampler_next(&rng, 1), -1);
    for (int i = 0; i < 1000; i++) assert_int_equal(pm_sampler_next(&rng, 0), PM_TICK_BYTES);
    /* a zero state is reseeded, not stuck */
    rng = 0;
    pm_sampler_next(&rng, 1000);
    assert_true(rng != 0);
    assert_true(pm_sampler_seed() != 0);
}

/* ======================================================================
 * fmt.c and options.c
 * ==================================================================== */

static void test_fmt_parse_size(void **state)
{
    (void)state;
    static const struct { const char *s; uint64_t v; } ok[] = {
        {"0", 0}, {"1", 1}, {"512k", 512u << 10}, {"2M", 2u << 20}, {"1G", 1u << 30},
        {"64KiB", 64u << 10}, {"3kb", 3u << 10}, {"7K", 7u << 10}, {"5m", 5u << 20},
        {"2T", (uint64_t)2 << 40}, {"10B", 10}, {"4MiB", 4u << 20}, {"1gb", 1u << 30},
        {"007", 7}, {"18446744073709551615", UINT64_MAX}, {"16777215T", (uint64_t)16777215 << 40},
    };
    for (size_t i = 0; i < PM_ARRAY_LEN(ok); i++) {
        uint64_t v = 12345;
        if (pm_fmt_parse_size(ok[i].s, &v) != 0) fail_msg("\"%s\" rejected", ok[i].s);
        if (v != ok[i].v) fail_msg("\"%s\" = %llu, want %llu", ok[i].s, (unsigned long long)v,
                                   (unsigned long long)ok[i].v);
    }
    static const char *bad[] = {"", "k", "12x", "-1", "1.5M", "99999999999999999999",
                                "20000000T", "18446744073709551616", "16777216T", " 1", "1 ",
                                "+1", "1kk", "1iB", "1KiBx", "1Bk", "0x10", "1e3", "M", "4Ki", "2mi"};
    for (size_t i = 0; i < PM_ARRAY_LEN(bad); i++) {
        uint64_t v = 777;
        if (pm_fmt_parse_size(bad[i], &v) == 0) fail_msg("\"%s\" accepted as %llu", bad[i],
                                                         (unsigned long long)v);
        assert_int_equal(v, 777);
    }
    uint64_t v;
    assert_int_equal(pm_fmt_parse_size(NULL, &v), -1);
}

static void test_fmt_buf(void **state)
{
    (void)state;
    char mem[64];
    pm_buf_t b;
    pm_buf_init(&b, mem, sizeof mem, -1);
    pm_buf_str(&b, "n=");
    pm_buf_u64(&b, 0);
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, UINT64_MAX);
    pm_buf_str(&b, " ");
    pm_buf_hex(&b, 0);
    pm_buf_str(&b, " ");
    pm_buf_hex(&b, 0xdeadbeefull);
    assert_int_equal(b.truncated, 0);
    assert_int_equal(b.len, strlen("n=0 18446744073709551615 0x0 0xdeadbeef"));
    assert_memory_equal(mem, "n=0 18446744073709551615 0x0 0xdeadbeef", b.len);
    /* no fd: overflow truncates, never writes past cap */
    char small[8 + 1];
    small[8] = '#';
    pm_buf_init(&b, small, 8, -1);
    pm_buf_str(&b, "0123456789");
    assert_int_equal(b.len, 8);
    assert_int_equal(b.truncated, 1);
    assert_int_equal(small[8], '#');
    assert_memory_equal(small, "01234567", 8);
    /* an fd: flushes when full, nothing lost */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pm_buf_init(&b, small, 8, fds[1]);
    pm_buf_str(&b, "hello, world: ");
    pm_buf_hex(&b, 0xabcdef0123456789ull);
    assert_int_equal(pm_buf_flush(&b), 0);
    close(fds[1]);
    char out[64] = {0};
    ssize_t n = read(fds[0], out, sizeof out - 1);
    close(fds[0]);
    assert_string_equal(out, "hello, world: 0xabcdef0123456789");
    assert_int_equal(n, 32);
    assert_int_equal(b.truncated, 0);
    assert_int_equal(pm_fmt_strlen(""), 0);
    assert_int_equal(pm_fmt_strlen("abc"), 3);
    assert_true(pm_fmt_streq("abc", "abc"));
    assert_false(pm_fmt_streq("abc", "abd"));
    assert_false(pm_fmt_streq("abc", "ab"));
    assert_false(pm_fmt_streq("ab", "abc"));
}

static void test_options_load(void **state)
{
    (void)state;
    pm_options_t saved = pm_options;
    setenv("PROFMALLOC_SAMPLE_RATE", "64k", 1);
    setenv("PROFMALLOC_TCACHE_BYTES", "12x", 1);     /* malformed: keeps the default */
    setenv("PROFMALLOC_RELEASE_BYTES", "1MiB", 1);
    setenv("PROFMALLOC_UNWIND", "fp", 1);
    setenv("PROFMALLOC_VERBOSE", "2", 1);             /* malformed */
    setenv("PROFMALLOC_DUMP", "", 1);                 /* malformed */
    pm_options_load();
    assert_int_equal(pm_options.sample_rate, 64 * 1024);
    assert_int_equal(pm_options.tcache_bytes, saved.tcache_bytes);
    assert_int_equal(pm_options.release_bytes, 1u << 20);
    assert_int_equal(pm_options.release_bytes_set, 1);
    assert_int_equal(saved.release_bytes_set, 0);
    assert_int_equal(pm_options.unwind_fp, 1);
    assert_int_equal(pm_options.verbose, saved.verbose);
    assert_ptr_equal(pm_options.dump_pattern, saved.dump_pattern);
    setenv("PROFMALLOC_UNWIND", "dwarf", 1);
    setenv("PROFMALLOC_DUMP", "x.%p.heap", 1);
    pm_options_load();
    assert_int_equal(pm_options.unwind_fp, 0);
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    /* % only in %p and %% */
    setenv("PROFMALLOC_DUMP", "y.%t.heap", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    setenv("PROFMALLOC_DUMP", "z%", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    setenv("PROFMALLOC_DUMP", "z.%%.%p", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "z.%%.%p");
    /* sizes above INT64_MAX (the profile's period is signed) are malformed */
    setenv("PROFMALLOC_SAMPLE_RATE", "9223372036854775808", 1);
    setenv("PROFMALLOC_TCACHE_BYTES", "18446744073709551615", 1);
    pm_options_load();
    assert_int_equal(pm_options.sample_rate, 64 * 1024);
    assert_int_equal(pm_options.tcache_bytes, saved.tcache_bytes);
    setenv("PROFMALLOC_SAMPLE_RATE", "9223372036854775807", 1);
    pm_options_load();
    assert_int_equal(pm_options.sample_rate, INT64_MAX);
    unsetenv("PROFMALLOC_SAMPLE_RATE");
    unsetenv("PROFMALLOC_TCACHE_BYTES");
    unsetenv("PROFMALLOC_RELEASE_BYTES");
    unsetenv("PROFMALLOC_UNWIND");
    unsetenv("PROFMALLOC_VERBOSE");
    unsetenv("PROFMALLOC_DUMP");
    pm_options = saved;
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
    pm_init();
    pm_sampler_set_rate(0);
    const struct CMUnitTest sizeclass[] = {
        cmocka_unit_test(test_sizeclass_table),
        cmocka_unit_test(test_sizeclass_lookup_exhaustive),
    };
    const struct CMUnitTest pagemap[] = {
        cmocka_unit_test(test_pagemap_set_and_lookup),
        cmocka_unit_test(test_pagemap_unknown_and_out_of_range),
    };
    const struct CMUnitTest pageheap[] = {
        cmocka_unit_test(test_pageheap_alloc_basic),
        cmocka_unit_test(test_pageheap_reuse),
        cmocka_unit_test(test_pageheap_best_fit),
        cmocka_unit_test(test_pageheap_growth_floor),
        cmocka_unit_test(test_pageheap_coalesce_same_state),
        cmocka_unit_test(test_pageheap_coalesce_three),
        cmocka_unit_test(test_pageheap_aligned),
        cmocka_unit_test(test_pageheap_aligned_reuse),
        cmocka_unit_test(test_pageheap_aligned_growth),
        cmocka_unit_test(test_pageheap_move),
        cmocka_unit_test(test_os_one_mapping),
        cmocka_unit_test(test_pageheap_unmaps_islands),
        cmocka_unit_test(test_pageheap_holes_bounded),
        cmocka_unit_test(test_pageheap_extents_exact),
        cmocka_unit_test(test_pageheap_bound_yields_to_rlimit),
        cmocka_unit_test(test_pageheap_give_back_counts_neighbours),
        cmocka_unit_test(test_pageheap_extend),
        cmocka_unit_test(test_pageheap_release_all),
        cmocka_unit_test(test_pageheap_release_cap_grows_with_heap),
        cmocka_unit_test(test_pageheap_tick_releases),
        cmocka_unit_test(test_pageheap_tick_bounded),
        cmocka_unit_test(test_pageheap_cut_keeps_age),
        cmocka_unit_test(test_pageheap_random_ops_agree),
        cmocka_unit_test(test_pageheap_unmaps_long_runs),
        cmocka_unit_test(test_pageheap_decay_unmaps),
        cmocka_unit_test(test_pageheap_unmap_races_growth),
        cmocka_unit_test(test_pageheap_fork_while_releasing),
        cmocka_unit_test(test_os_release_whole_pages),
    };
    const struct CMUnitTest central[] = {
        cmocka_unit_test(test_central_get_put),
        cmocka_unit_test(test_central_short_get),
        cmocka_unit_test(test_central_transfer_slots),
        cmocka_unit_test(test_central_partial_slots),
        cmocka_unit_test(test_central_park_cap),
        cmocka_unit_test(test_central_release_free),
        cmocka_unit_test(test_central_release_free_race),
        cmocka_unit_test(test_central_release_free_fork),
    };
    const struct CMUnitTest tcache[] = {
        cmocka_unit_test(test_tcache_fresh_thread_and_slow_start),
        cmocka_unit_test(test_tcache_len_within_max_len),
        cmocka_unit_test(test_tcache_registration_in_last_destructor_round),
        cmocka_unit_test(test_tcache_consumer_keeps_newest),
        cmocka_unit_test(test_tcache_exit_flushes),
        cmocka_unit_test(test_tcache_dead_thread),
        cmocka_unit_test(test_tcache_budget_invariant),
        cmocka_unit_test(test_tcache_crowd_steals_bounded),
        cmocka_unit_test(test_tcache_thread_cap),
        cmocka_unit_test(test_tcache_pool_bounds_sleepers),
        cmocka_unit_test(test_alloc_countdown_charged_once),
    };
    const struct CMUnitTest alloc[] = {
        cmocka_unit_test(test_alloc_malloc_free_usable),
        cmocka_unit_test(test_alloc_calloc),
        cmocka_unit_test(test_alloc_realloc),
        cmocka_unit_test(test_alloc_realloc_headroom),
        cmocka_unit_test(test_alloc_realloc_large_in_place),
        cmocka_unit_test(test_alloc_memalign),
        cmocka_unit_test(test_alloc_memalign_size_zero),
        cmocka_unit_test(test_stats_balance),
    };
    const struct CMUnitTest sampler[] = {
        cmocka_unit_test(test_sampler_neg_log),
        cmocka_unit_test(test_sampler_prob),
        cmocka_unit_test(test_sampler_next),
    };
    const struct CMUnitTest fmt[] = {
        cmocka_unit_test(test_fmt_parse_size),
        cmocka_unit_test(test_fmt_buf),
        cmocka_unit_test(test_options_load),
    };
    const struct CMUnitTest bad[] = {
        cmocka_unit_test(test_invalid_free),
        cmocka_unit_test(test_invalid_free_interior_aligned),
        cmocka_unit_test(test_invalid_uncut_object),
        cmocka_unit_test(test_invalid_free_uncut_page),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("sizeclass", sizeclass, NULL, NULL);
    failed += cmocka_run_group_tests_name("pagemap", pagemap, NULL, NULL);
    failed += cmocka_run_group_tests_name("pageheap", pageheap, NULL, NULL);
    failed += cmocka_run_group_tests_name("central", central, NULL, NULL);
    failed += cmocka_run_group_tests_name("tcache", tcache, NULL, NULL);
    failed += cmocka_run_group_tests_name("alloc", alloc, NULL, NULL);
    failed += cmocka_run_group_tests_name("sampler", sampler, NULL, NULL);
    failed += cmocka_run_group_tests_name("fmt", fmt, NULL, NULL);
    failed += cmocka_run_group_tests_name("invalid_free", bad, NULL, NULL);
    return failed ? 1 : 0;
}
