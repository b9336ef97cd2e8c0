/* test_pagerelease.c — unit tests of the release policy (pagerelease.c)
 * through the page heap: the decay, the cap that grows with the heap and
 * its pace, the growth rule's floor and age, the tick and its bound, ages
 * kept across cuts, unmapping stale released runs, and malloc_trim's
 * release of everything, the OS pages inside the central lists' free
 * objects included (central.c pm_central_release_free).  Linked with libprofmalloc-test.a (no libc overrides);
 * sampling is off (main); the clock jumps with pm_pageheap_skip_time.
 * main sets RLIMIT_AS (far above what the tests map), as the rules pinned
 * here hold alone where address space is scarce; where it is not, free
 * pages within the recent peak stay too (test_pageheap_cap_holds_rounds). */
#include "core_test.h"
#include <sys/resource.h>

static void set_as_limit(rlim_t soft)
{
    struct rlimit r;
    assert_int_equal(getrlimit(RLIMIT_AS, &r), 0);
    r.rlim_cur = soft;
    assert_int_equal(setrlimit(RLIMIT_AS, &r), 0);
}

/* The page heap notes whether address space is scarce when it grows:
 * a span longer than all it maps makes it grow. */
static void grow_heap(void)
{
    pm_span_t *s = pm_pageheap_alloc(ph_stats().mapped / PAGE + 1);
    assert_non_null(s);
    pm_pageheap_free(s);
    pm_pageheap_release_all();
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
     * in_use.  Only spans free for an eighth of a second go (one freed a
     * moment ago is what the next block is cut from) */
    pm_pageheap_skip_time(200000000ull);
    pm_span_t *c = pm_pageheap_alloc(C);
    assert_non_null(c);
    assert_int_equal(c->zeroed, 1);
    st = ph_stats();
    assert_int_equal(st.free, 2 * B * PAGE);
    pm_pageheap_free(c);
    pm_pageheap_free(used);
    for (int i = 0; i < 3; i++) pm_pageheap_free(sep[i]);
}

/* A growth releases only free spans that have been unused for an eighth
 * of a second: in a steady state of big blocks replaced at random, the span
 * freed a moment ago is the one the next block will be cut from. */
static void test_pageheap_growth_keeps_young(void **state)
{
    (void)state;
    enum { B = 500, USED = 100, C = 600 };
    pm_pageheap_release_all();
    pm_span_t *x = pm_pageheap_alloc(B), *sep = pm_pageheap_alloc(1), *used = pm_pageheap_alloc(USED);
    assert_true(x && sep && used);
    memset(page_ptr(x->page), 1, B * PAGE);
    pm_pageheap_free(x);
    assert_int_equal(ph_stats().free, B * PAGE);
    pm_span_t *c1 = pm_pageheap_alloc(C); /* fresh: x is young and stays */
    assert_non_null(c1);
    assert_int_equal(c1->zeroed, 1);
    assert_int_equal(ph_stats().free, B * PAGE);
    pm_pageheap_skip_time(200000000ull);
    pm_span_t *c2 = pm_pageheap_alloc(C); /* fresh again: now x goes */
    assert_non_null(c2);
    assert_int_equal(c2->zeroed, 1);
    assert_int_equal(ph_stats().free, 0);
    pm_pageheap_free(c1);
    pm_pageheap_free(c2);
    pm_pageheap_free(used);
    pm_pageheap_free(sep);
}

/* A span moved with its pages faults its growth in as fresh pages and is
 * never cut from a free run: the young ones go back too, down to the
 * growth rule's floor (pagerelease.c rule_move), where a fresh run keeps
 * them (test_pageheap_growth_keeps_young). */
static void test_pageheap_move_releases_young(void **state)
{
    (void)state;
    enum { B = 500, USED = 400, N = 100, M = 700 };
    pm_pageheap_release_all();
    pm_span_t *s = pm_pageheap_alloc(N), *x = pm_pageheap_alloc(B), *sep = pm_pageheap_alloc(1),
              *used = pm_pageheap_alloc(USED);
    assert_true(s && x && sep && used);
    memset(page_ptr(x->page), 1, B * PAGE);
    pm_pageheap_free(x);
    assert_int_equal(ph_stats().free, B * PAGE);
    assert_int_equal(pm_pageheap_move(s, M, 1), 1);
    assert_int_equal(ph_stats().free, 0); /* young, and gone: 500 > (700 + 401) / 4 */
    pm_pageheap_free(s);
    pm_pageheap_free(used);
    pm_pageheap_free(sep);
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
 * as many pages as are in use stay free and resident, so a program replacing big
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
    /* the same with the 64 MiB given: held at every free */
    assert_true(cap_kept(1, 12) <= (size_t)64 << 20);
    /* and once most of it is free the cap follows what is left in use,
     * 96 MiB, then 64 MiB once only 32 MiB are; a free enforces it past
     * 1.5 times only on spans unused for an eighth of a second, so a burst
     * of frees may leave up to twice the cap for the next tick
     * (test_pageheap_cap_paced): 1.5 times was crossed by whether the
     * test's own frees took that long (1 run in 30 under load).  Runs go
     * whole, so less may stay. */
    assert_true(cap_kept(0, 52) <= (size_t)192 << 20);
    assert_true(cap_kept(0, 60) <= (size_t)128 << 20);
}

/* The default cap is paced: free pages past it (but within 1.5 times it) stay
 * until the next tick, which returns at most 32 MiB, longest first; the
 * free runs of blocks replaced at random come and go within a tick. */
static void test_pageheap_cap_paced(void **state)
{
    (void)state;
    enum { BIG = 8 << 20, USED = 16, FREED = 20 };
    pm_pageheap_skip_time(1100000000ull); /* the tick is due */
    pm_pageheap_tick();
    pm_pageheap_release_all();
    pm_span_t *s[USED + FREED];
    for (int i = 0; i < USED + FREED; i++) assert_non_null(s[i] = pm_pageheap_alloc(BIG / PAGE));
    for (int i = USED; i < USED + FREED; i++) pm_pageheap_free(s[i]);
    size_t before = ph_stats().free; /* 160 MiB free, 128 MiB in use: over the cap */
    pm_pageheap_skip_time(200000000ull);
    pm_pageheap_tick();
    size_t after = ph_stats().free;
    for (int i = 0; i < USED; i++) pm_pageheap_free(s[i]);
    pm_pageheap_release_all();
    assert_int_equal(before, (size_t)FREED * BIG);
    assert_int_equal(after, (size_t)FREED * BIG - (32 << 20));
}

/* Past 1.5 times the default cap, a free returns only spans unused for an
 * eighth of a second, oldest first: the spans just freed stay for the next
 * blocks (bench/bigrepeat faulted in 144 k pages over 2 000 steps, 33 k
 * now), the stale ones go.  Past twice the cap any span goes at once, so a
 * program that frees much and then sleeps keeps at most that. */
static void test_pageheap_cap_keeps_young(void **state)
{
    (void)state;
    enum { BIG = 8 << 20, USED = 16, FREED = 28, BURST = 24, N = USED + 1 + FREED + BURST };
    static pm_span_t *s[N], *sep[N];
    /* each span with a page in use after it, so that none merges with
     * another (a merged run is as young as its youngest part): cut in turn
     * from the front of the one resident free run */
    pm_options_t saved = pm_options;
    pm_options.release_bytes_set = 1; /* a cap of a TiB while it is cut */
    pm_options.release_bytes = (size_t)1 << 40;
    pm_pageheap_release_all();
    pm_span_t *run = pm_pageheap_alloc((size_t)(USED + 1 + FREED) * (BIG / PAGE + 1));
    assert_non_null(run);
    pm_pageheap_free(run);
    for (int i = 0; i < USED + 1 + FREED; i++) {
        assert_non_null(s[i] = pm_pageheap_alloc(BIG / PAGE));
        assert_non_null(sep[i] = pm_pageheap_alloc(1));
        assert_int_equal(sep[i]->page, s[i]->page + BIG / PAGE);
    }
    pm_options = saved; /* the default cap from here on */
    pm_pageheap_skip_time(1100000000ull); /* the clock noted now */
    for (int i = USED + 1; i < USED + 1 + FREED; i++) pm_pageheap_free(s[i]);
    /* 224 MiB free, just freed, against a cap of 136 MiB (in use): kept */
    size_t young = ph_stats().free;
    pm_pageheap_skip_time(200000000ull);
    pm_pageheap_free(s[USED]); /* a free once they are old: cap 128 MiB */
    size_t aged = ph_stats().free;
    for (int i = USED + 1 + FREED; i < N; i++) {
        assert_non_null(s[i] = pm_pageheap_alloc(BIG / PAGE));
        assert_non_null(sep[i] = pm_pageheap_alloc(1));
    }
    for (int i = USED + 1 + FREED; i < N; i++) pm_pageheap_free(s[i]);
    size_t burst = ph_stats().free; /* freed at once, past twice the cap */
    for (int i = 0; i < USED; i++) pm_pageheap_free(s[i]);
    for (int i = 0; i < N; i++) pm_pageheap_free(sep[i]);
    pm_pageheap_release_all();
    assert_int_equal(young, (size_t)FREED * BIG);
    /* the old ones went down to 7/8 of the cap; the one just freed stayed */
    if (aged > (size_t)USED * BIG || aged < (size_t)BIG) fail_msg("%zu MiB free after the old ones could go", aged >> 20);
    if (burst > 2 * (size_t)USED * BIG + BIG) fail_msg("%zu MiB free past twice the cap", burst >> 20);
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

/* Rounds: where address space is not scarce, the big blocks a program
 * frees at the end of a round stay for the next round while the heap is
 * within half the cap over its recent peak, and the decay rule
 * still returns them a second later; where it is scarce, they go back at
 * once (past twice the cap), as glibc unmaps its mmapped chunks.  bench/pyrounds
 * faulted every page in again each round: 356 k page faults over 5 rounds
 * where tcmalloc takes 148 k. */
static void test_pageheap_cap_holds_rounds(void **state)
{
    (void)state;
    enum { N = 32, BIG = 8 << 20 };
    static pm_span_t *s[N];
    for (int limited = 0; limited < 2; limited++) {
        set_as_limit(limited ? (rlim_t)1 << 46 : RLIM_INFINITY);
        grow_heap();
        pm_pageheap_skip_time(2100000000ull); /* no peak of an earlier test */
        pm_pageheap_tick();
        for (int round = 0; round < 2; round++) {
            size_t zeroed = 0;
            for (int i = 0; i < N; i++) {
                assert_non_null(s[i] = pm_pageheap_alloc(BIG / PAGE));
                zeroed += s[i]->zeroed;
            }
            /* the second round finds the first's pages, resident */
            if (round == 1 && !limited) assert_int_equal(zeroed, 0);
            if (round == 1 && limited) assert_true(zeroed > N / 2);
            for (int i = 0; i < N; i++) pm_pageheap_free(s[i]);
            size_t kept = ph_stats().free;
            /* 256 MiB freed at once against a cap of 64 MiB */
            if (!limited) assert_true(kept >= (size_t)N * BIG);
            else assert_true(kept <= (size_t)128 << 20);
        }
        /* unused for a second: the decay returns them, a tick at a time */
        for (int t = 0; t < 16; t++) {
            pm_pageheap_skip_time(1100000000ull);
            pm_pageheap_tick();
        }
        assert_int_equal(ph_stats().free, 0);
    }
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

/* Blocks aligned far beyond their size, all live, mapped one below the
 * other with the unused rest of each alignment: the release ticks while
 * they are made (released pages far outnumber those in use) unmap no rest
 * younger than the decay that lies between two live blocks, as each such
 * hole costs the process a mapping (a program with 66 000 such blocks
 * reached vm.max_map_count).  The clock jumps an eighth of a second per
 * tick, under the decay in all. */
static void test_pageheap_excess_keeps_holes_out(void **state)
{
    (void)state;
    enum { N = 48, ALIGN = 512, EVERY = 8 };
    static pm_span_t *b[N];
    for (int i = 0; i < N; i++) {
        b[i] = pm_pageheap_alloc_aligned(2, ALIGN);
        assert_non_null(b[i]);
        assert_int_equal(b[i]->page % ALIGN, 0);
        memset(page_ptr(b[i]->page), 1, 2 * PAGE);
        if (i % EVERY == EVERY - 1) {
            pm_pageheap_skip_time(pm_release_decay_ns() / 8 + 1000000);
            assert_int_equal(pm_pageheap_tick(), 1);
        }
    }
    int between = 0, holes = 0;
    unsigned char vec[1];
    for (int i = 1; i < N; i++) {
        if (b[i]->page + ALIGN != b[i - 1]->page) continue; /* not mapped right below */
        between++;
        errno = 0;
        /* the rest's first page: unmapped, or mapped and never touched */
        if (mincore(page_ptr(b[i]->page + 2), 4096, vec) != 0) holes += errno == ENOMEM;
    }
    for (int i = 0; i < N; i++) pm_pageheap_free(b[i]);
    assert_true(between >= N / 2);
    if (holes) fail_msg("%d of %d rests between live blocks unmapped", holes, between);
}

/* ---- malloc_trim's release of the central lists' free pages ------------ */

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
/* A freed block of 32 MiB or more goes back at once past the cap, as
 * glibc unmaps one that big, even within the recent peak, and so does the
 * tail a shrink cuts off one; within the cap it stays.  A program that
 * freed a 1 GiB block and then made a few small blocks, or none, kept
 * all of it resident.  But a huge block made on fresh pages within a
 * second of one going back starts rounds, and huge blocks freed then stay
 * (pagerelease.c pm_release_keep_huge_locked). */
static void test_pageheap_huge_free_released(void **state)
{
    (void)state;
    const size_t huge = (size_t)128 << 20, within = (size_t)40 << 20; /* the cap: 64 MiB */
    set_as_limit(RLIM_INFINITY); /* the peak would keep them */
    grow_heap();
    pm_pageheap_skip_time(2100000000ull); /* no peak of an earlier test */
    pm_pageheap_tick();

    void *p = pm_malloc(huge);
    assert_non_null(p);
    pm_free(p);
    assert_true(ph_stats().free < PM_HUGE_FREE);
    /* made again at once, on released pages: rounds, so this one stays */
    p = pm_malloc(huge);
    assert_non_null(p);
    pm_free(p);
    assert_true(ph_stats().free >= huge);
    pm_pageheap_release_all();
    pm_pageheap_skip_time(2100000000ull); /* the rounds lapse */
    pm_pageheap_tick();
    p = pm_malloc(huge);
    assert_non_null(p);
    pm_free(p);
    assert_true(ph_stats().free < PM_HUGE_FREE);
    pm_pageheap_skip_time(2100000000ull);
    pm_pageheap_tick();

    p = pm_malloc(within);
    assert_non_null(p);
    pm_free(p);
    assert_true(ph_stats().free >= within); /* kept for the next */
    pm_pageheap_release_all();

    p = pm_malloc(huge);
    assert_non_null(p);
    void *q = pm_realloc(p, (size_t)1 << 20);
    assert_ptr_equal(q, p); /* shrunk in place */
    assert_true(ph_stats().free < PM_HUGE_FREE);
    pm_free(q);
    pm_pageheap_release_all();
    set_as_limit((rlim_t)1 << 46);
    grow_heap();
}

/* The old copy of a block realloc moved stays resident when its new block
 * came from resident pages and the free pages, with it, stay within those
 * in use (a user's cap instead when set), else it goes back at once
 * (pagerelease.c pm_release_keep_moved_locked; bench/run.sh's vectors). */
static void test_pageheap_moved_copy_kept_within_use(void **state)
{
    (void)state;
    enum { USED = 2000, COPY = 300 };
    pm_options_t saved = pm_options;
    pm_pageheap_release_all();
    pm_span_t *used = pm_pageheap_alloc(USED), *copy = pm_pageheap_alloc(COPY);
    assert_true(used && copy);
    uint64_t free0 = ph_stats().free;
    pm_pageheap_free_moved(copy, 0); /* the new block was resident: kept */
    assert_int_equal(ph_stats().free, free0 + (uint64_t)COPY * PAGE);
    copy = pm_pageheap_alloc(COPY);
    assert_non_null(copy);
    assert_int_equal(ph_stats().free, free0);
    pm_pageheap_free_moved(copy, 1); /* the new block came from the OS: released */
    assert_int_equal(ph_stats().free, free0);

    /* free pages past those in use (USED + COPY) with the copy: released */
    pm_span_t *extra = pm_pageheap_alloc(USED + COPY / 2);
    copy = pm_pageheap_alloc(COPY);
    assert_true(extra && copy);
    pm_pageheap_free(extra);
    uint64_t free1 = ph_stats().free;
    assert_true(free1 >= free0 + (uint64_t)(USED + COPY / 2) * PAGE);
    pm_pageheap_free_moved(copy, 0);
    assert_int_equal(ph_stats().free, free1);
    /* ... but within a cap the user set */
    copy = pm_pageheap_alloc(COPY);
    assert_non_null(copy);
    free1 = ph_stats().free;
    pm_options.release_bytes_set = 1;
    pm_options.release_bytes = (size_t)1 << 40;
    pm_pageheap_free_moved(copy, 0);
    assert_int_equal(ph_stats().free, free1 + (uint64_t)COPY * PAGE);
    pm_options = saved;
    pm_pageheap_free(used);
    pm_pageheap_release_all();
}

/* Where address space is not scarce, the old copy also stays while the
 * heap with it stays within the most pages in use lately: a round that
 * starts over finds more pages free than in use, and its copies are what
 * its next blocks are cut from (pm_release_keep_moved_locked; bench/run.sh's
 * vectors).  Where it is scarce, the copy goes back as before. */
static void test_pageheap_moved_copy_kept_within_peak(void **state)
{
    (void)state;
    enum { USED = 200, A = 3000, COPY = 300 };
    for (int limited = 0; limited < 2; limited++) {
        set_as_limit(limited ? (rlim_t)1 << 46 : RLIM_INFINITY);
        grow_heap();
        pm_pageheap_skip_time(2100000000ull); /* no peak of an earlier test */
        pm_pageheap_tick();
        pm_span_t *used = pm_pageheap_alloc(USED), *a = pm_pageheap_alloc(A), *b = pm_pageheap_alloc(A);
        pm_span_t *one = pm_pageheap_alloc(1);
        assert_true(used && a && b && one);
        uint64_t peak = ph_stats().in_use / PAGE;
        pm_pageheap_free(one); /* the rules see the peak */
        pm_pageheap_free(a);
        pm_pageheap_release_all(); /* a's pages gone: the heap below its peak */
        pm_pageheap_free(b);
        pm_span_t *moved = pm_pageheap_alloc(COPY), *copy = pm_pageheap_alloc(COPY);
        assert_true(moved && copy);
        assert_int_equal(copy->zeroed, 0); /* cut from b's resident pages */
        pm_pageheap_stats_t st = ph_stats();
        /* more free than in use, and in use with free and copy within the peak */
        assert_true(st.free > st.in_use);
        assert_true((st.in_use + st.free) / PAGE + COPY <= peak);
        pm_pageheap_free_moved(copy, 0);
        assert_int_equal(ph_stats().free, st.free + (limited ? 0 : (uint64_t)COPY * PAGE));
        pm_pageheap_free(moved);
        pm_pageheap_free(used);
        pm_pageheap_release_all();
    }
}

/* The rounds rule on the policy alone: after a peak of P pages in use,
 * free pages that keep the heap within half the cap over P stay (a
 * quarter let the first round's unused free runs take bench/pyrounds past
 * it, and the next round faulted 100 MB in again); past that, the cap
 * applies.  Runs last: its views' clock is far past the heap's. */
static void test_release_rounds_slack(void **state)
{
    (void)state;
    uint64_t cap = pm_options.release_bytes >> PM_PAGE_SHIFT, peak = 4 * cap, used = cap / 2;
    assert_false(pm_options.release_bytes_set);
    pm_release_plan_t p;
    pm_heap_view_t v = {.now = (uint64_t)1 << 50, .in_use = peak, .oldest_free_ns = UINT64_MAX};
    pm_release_choose_locked(&v, PM_RELEASE_TICK, &p); /* the peak */
    assert_int_equal(p.keep_pages, UINT64_MAX);
    v.now += 1000000;
    v.in_use = used;
    v.free = peak + cap * 3 / 8 - used; /* more than a quarter of the cap over, less than half */
    pm_release_choose_locked(&v, PM_RELEASE_TICK, &p);
    assert_int_equal(p.keep_pages, UINT64_MAX);
    assert_int_equal(p.aged_before, 0);
    v.free = peak + cap * 5 / 8 - used; /* more than half over: down to 7/8 of the cap */
    pm_release_choose_locked(&v, PM_RELEASE_TICK, &p);
    assert_int_equal(p.keep_pages, cap - cap / 8);
}

int main(void)
{
    core_test_init();
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur == RLIM_INFINITY) {
        r.rlim_cur = (rlim_t)1 << 46;
        setrlimit(RLIMIT_AS, &r);
    }
    pm_span_t *g = pm_pageheap_alloc(ph_stats().mapped / PAGE + 1); /* noted at a growth */
    if (g) pm_pageheap_free(g);
    pm_pageheap_release_all();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pageheap_growth_floor),
        cmocka_unit_test(test_pageheap_growth_keeps_young),
        cmocka_unit_test(test_pageheap_move_releases_young),
        cmocka_unit_test(test_pageheap_release_all),
        cmocka_unit_test(test_pageheap_release_cap_grows_with_heap),
        cmocka_unit_test(test_pageheap_cap_paced),
        cmocka_unit_test(test_pageheap_cap_keeps_young),
        cmocka_unit_test(test_pageheap_cap_holds_rounds),
        cmocka_unit_test(test_pageheap_tick_releases),
        cmocka_unit_test(test_pageheap_tick_bounded),
        cmocka_unit_test(test_pageheap_cut_keeps_age),
        cmocka_unit_test(test_pageheap_decay_unmaps),
        cmocka_unit_test(test_pageheap_excess_keeps_holes_out),
        cmocka_unit_test(test_pageheap_huge_free_released),
        cmocka_unit_test(test_pageheap_moved_copy_kept_within_use),
        cmocka_unit_test(test_pageheap_moved_copy_kept_within_peak),
        cmocka_unit_test(test_central_release_free),
        cmocka_unit_test(test_central_release_free_race),
        cmocka_unit_test(test_central_release_free_fork),
        cmocka_unit_test(test_release_rounds_slack), /* last: see there */
    };
    return cmocka_run_group_tests_name("pagerelease", tests, NULL, NULL) ? 1 : 0;
}
