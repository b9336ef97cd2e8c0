/* test_core.c — unit tests of the page heap (src/pageheap.c), the release
 * of pages (the page heap's rules, and malloc_trim's release of the
 * central lists' free spans) and large blocks (realloc in place, its
 * headroom).  The other modules' tests are in test_<module>.c; what they
 * share is in core_test.h.
 * Page-heap states are set up by each test (pm_pageheap_release_all()
 * leaves no resident free span, which makes "which span comes next"
 * predictable). */
#include "core_test.h"

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
/* ======================================================================
 * large blocks through pm_realloc
 * ==================================================================== */

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


/* ====================================================================== */

int main(void)
{
    core_test_init();
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
        cmocka_unit_test(test_central_release_free),
        cmocka_unit_test(test_central_release_free_race),
        cmocka_unit_test(test_central_release_free_fork),
    };
    const struct CMUnitTest alloc[] = {
        cmocka_unit_test(test_alloc_realloc_headroom),
        cmocka_unit_test(test_alloc_realloc_large_in_place),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("pageheap", pageheap, NULL, NULL);
    failed += cmocka_run_group_tests_name("central", central, NULL, NULL);
    failed += cmocka_run_group_tests_name("alloc", alloc, NULL, NULL);
    return failed ? 1 : 0;
}
