/* test_prof_sites.c — unit tests of src/prof_sites.c: the sampled-page
 * flags that send a free to the profiler, the records' memory, and the
 * buckets a sample is counted in. */
#include "core_test.h"
#include "pm_prof_types.h"
#include "pm_prof_unwind.h"

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

/* A span with more than two live samples: the frees of its other blocks
 * take no lock, as the samples past the first two are counted by their
 * index in the span (exact in a span of 32 blocks), and a count goes back
 * down when its sample is freed. */
static void test_hashed_counts(void **state)
{
    (void)state;
    enum { S = 4, N = 24 };
    void *p[S], *a[N];
    size_t size = 256;
    unsigned cls = pm_sizeclass_of(size);
    assert_true((size_t)pm_class_pages[cls] * PAGE / pm_class_size[cls] <= 32);
    sampled_blocks(size, p, S);
    pm_span_t *s = span_of(p[0]);
    assert_int_equal(s->nsampled, S);
    int on_flagged = 0;
    for (int i = 0; i < N; i++) assert_non_null(a[i] = pm_malloc(size));
    uint64_t before = pm_sites_locked_misses();
    for (int i = 0; i < N; i++) {
        on_flagged += span_of(a[i]) == s && flagged(a[i]);
        pm_free(a[i]);
    }
    assert_true(on_flagged >= 4);
    assert_int_equal(pm_sites_locked_misses() - before, 0);
    /* p[2] and p[3] went to the hash table: once p[3] is freed, the block
     * made again at its address (the list's head) is no sample, and its
     * free takes no lock either */
    pm_free(p[3]);
    assert_int_equal(pm_sites_live_samples(), S - 1);
    void *again = pm_malloc(size);
    assert_ptr_equal(again, p[3]);
    before = pm_sites_locked_misses();
    pm_free(again);
    assert_int_equal(pm_sites_locked_misses() - before, 0);
    assert_int_equal(pm_sites_live_samples(), S - 1);
    for (int i = 0; i < S - 1; i++) pm_free(p[i]);
    assert_int_equal(pm_sites_live_samples(), 0);
    for (int i = 0; i < 32; i += 2) assert_int_equal(s->hashed[i / 2], 0);
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

/* How many of the small sampled blocks p[0..n) the hash tables should
 * hold: a span's first two live samples keep their records in the span. */
static uint64_t expect_hashed(void **p, int n)
{
    uint64_t hashed = 0;
    for (int i = 0; i < n; i++) {
        int before = 0;
        for (int j = 0; j < i; j++) before += span_of(p[j]) == span_of(p[i]);
        hashed += before >= 2;
    }
    return hashed;
}

/* A large block's record hangs from its span only: the hash tables hold
 * small blocks' records, and a large sample is counted and dropped all
 * the same, also when realloc resizes or moves the block. */
static void test_large_sample_off_table(void **state)
{
    (void)state;
    enum { N = 24 };
    void *big[N], *small[N];
    assert_int_equal(pm_sites_live_samples(), 0);
    profmalloc_set_sample_rate(1);
    for (int i = 0; i < N; i++) {
        assert_non_null(big[i] = pm_malloc((300u << 10) + 4096 * (size_t)i));
        assert_non_null(small[i] = pm_malloc(48));
    }
    profmalloc_set_sample_rate(0);
    assert_int_equal(pm_sites_live_samples(), 2 * N);
    uint64_t hashed = expect_hashed(small, N);
    assert_true(hashed > 0); /* 48-byte blocks: many to a span */
    assert_int_equal(pm_sites_hashed_records(), hashed);
    for (int i = 0; i < N; i++) assert_non_null(span_of(big[i])->sample);
    profmalloc_set_sample_rate(1);
    big[0] = pm_realloc(big[0], 200u << 10); /* shrinks in place */
    big[1] = pm_realloc(big[1], 4u << 20);   /* grows or moves */
    profmalloc_set_sample_rate(0);
    assert_non_null(big[0]);
    assert_non_null(big[1]);
    assert_int_equal(pm_sites_live_samples(), 2 * N);
    assert_int_equal(pm_sites_hashed_records(), hashed);
    for (int i = 0; i < N; i++) pm_free(big[i]);
    assert_int_equal(pm_sites_live_samples(), N);
    assert_int_equal(pm_sites_hashed_records(), hashed);
    for (int i = 0; i < N; i++) pm_free(small[i]);
    assert_int_equal(pm_sites_live_samples(), 0);
    assert_int_equal(pm_sites_hashed_records(), 0);
}

/* A span's first two live samples keep their records in the span, more go
 * to the hash table; frees in any order find each record, and a span's
 * slots serve again once its samples went (an overflow's records are
 * found in the table). */
static void test_span_holds_records(void **state)
{
    (void)state;
    enum { N = 5 };
    void *p[N];
    sampled_blocks(96, p, N);
    pm_span_t *s = span_of(p[0]);
    assert_int_equal(s->nsampled, N);
    assert_int_equal(pm_sites_live_samples(), N);
    assert_int_equal(pm_sites_hashed_records(), N - 2);
    assert_ptr_equal(s->sampled[0], p[0]);
    assert_ptr_equal(s->sampled[1], p[1]);
    pm_free(p[3]); /* hashed */
    assert_int_equal(pm_sites_hashed_records(), N - 3);
    pm_free(p[0]); /* in the span */
    assert_int_equal(pm_sites_live_samples(), N - 2);
    assert_int_equal(pm_sites_hashed_records(), N - 3);
    assert_null(s->sampled[0]);
    /* a new sample takes the free slot */
    profmalloc_set_sample_rate(1);
    void *q = pm_malloc(96);
    profmalloc_set_sample_rate(0);
    if (span_of(q) == s) {
        assert_int_equal(pm_sites_hashed_records(), N - 2); /* nsampled was 3: hashed */
    }
    pm_free(q);
    for (int i = 1; i < N; i++)
        if (i != 3) pm_free(p[i]);
    assert_int_equal(pm_sites_live_samples(), 0);
    assert_int_equal(pm_sites_hashed_records(), 0);
    assert_int_equal(s->nsampled, 0);
    /* the slots serve again */
    sampled_blocks(96, p, 2);
    assert_int_equal(pm_sites_hashed_records(), 0);
    pm_free(p[1]);
    pm_free(p[0]);
    assert_int_equal(pm_sites_live_samples(), 0);
}

/* A class of a page or more hashes every sample by its address, leaving
 * its span's sampled-block fields alone: each sampled block's own page is
 * flagged, frees in any order find each record, realloc within the class
 * keeps the count, and the flags go with the samples. */
static void test_page_classes_hashed(void **state)
{
    (void)state;
    enum { N = 6 };
    void *p[N];
    const size_t sizes[N] = {PM_PAGE_SIZE, 12 << 10, 20 << 10, 32 << 10, 32 << 10, 100 << 10};
    assert_int_equal(pm_sites_live_samples(), 0);
    profmalloc_set_sample_rate(1);
    for (int i = 0; i < N; i++) assert_non_null(p[i] = pm_malloc(sizes[i]));
    profmalloc_set_sample_rate(0);
    assert_int_equal(pm_sites_live_samples(), N);
    assert_int_equal(pm_sites_hashed_records(), N);
    for (int i = 0; i < N; i++) {
        pm_span_t *s = span_of(p[i]);
        assert_true(s->cls != 0 && pm_class_size[s->cls] >= PM_PAGE_SIZE);
        assert_int_equal(s->nsampled, 0);
        assert_null(s->sampled[0]);
        assert_true(pm_sites_maybe_sampled(s, p[i]));
    }
    /* an unsampled neighbour of a 12 KiB block may start on its last page:
     * its free finds no record and drops none */
    void *q = pm_malloc(12 << 10);
    assert_non_null(q);
    pm_free(q);
    assert_int_equal(pm_sites_live_samples(), N);
    p[3] = pm_realloc(p[3], (32 << 10) - 100); /* within its class: kept as it is */
    assert_non_null(p[3]);
    int order[N] = {4, 0, 5, 2, 3, 1};
    for (int k = 0; k < N; k++) {
        void *b = p[order[k]];
        pm_span_t *s = span_of(b);
        pm_free(b);
        assert_false(pm_sites_maybe_sampled(s, b));
        assert_int_equal(pm_sites_hashed_records(), (uint64_t)(N - 1 - k));
        assert_int_equal(pm_sites_live_samples(), (uint64_t)(N - 1 - k));
    }
}

/* A few live samples take no slab: at most 4 hash to any one of the 16
 * shards, which hold their first 4 records themselves; more take slabs,
 * and freed inline records serve again. */
static void test_first_records_inline(void **state)
{
    (void)state;
    enum { FEW = 4, MANY = 200 };
    static void *p[MANY];
    assert_int_equal(pm_sites_live_samples(), 0);
    assert_int_equal(pm_sites_inline_records(), 0);
    profmalloc_set_sample_rate(1);
    for (int i = 0; i < FEW; i++) assert_non_null(p[i] = pm_malloc(3000 + 8 * (size_t)i));
    profmalloc_set_sample_rate(0);
    assert_int_equal(pm_sites_live_samples(), FEW);
    assert_int_equal(pm_sites_inline_records(), FEW);
    for (int i = 0; i < FEW; i++) pm_free(p[i]);
    assert_int_equal(pm_sites_inline_records(), 0);
    profmalloc_set_sample_rate(1);
    for (int i = 0; i < MANY; i++) assert_non_null(p[i] = pm_malloc(200));
    profmalloc_set_sample_rate(0);
    assert_int_equal(pm_sites_live_samples(), MANY);
    assert_true(pm_sites_inline_records() <= 16 * 4);
    assert_true(pm_sites_inline_records() > 0);
    for (int i = 0; i < MANY; i++) pm_free(p[i]);
    assert_int_equal(pm_sites_live_samples(), 0);
    assert_int_equal(pm_sites_inline_records(), 0);
}

/* Call sites of their own (no tail call: the return address names them). */
#define SITE_FN(name)                                                                                                  \
    PM_NOINLINE static void *name(size_t n)                                                                            \
    {                                                                                                                  \
        void *p = pm_alloc_slow(n); /* as malloc's tail call at rate 1 */                                             \
        __asm__ volatile("" : "+r"(p));                                                                                \
        return p;                                                                                                      \
    }
SITE_FN(site_a)
SITE_FN(site_b)
SITE_FN(site_c)
SITE_FN(site_d)

static const pm_prof_sample_t *stack_of(const pm_prof_snapshot_t *snap, size_t size)
{
    for (size_t i = 0; i < snap->nsamples; i++)
        if (snap->samples[i].size == size) return &snap->samples[i];
    return NULL;
}

static int same_stack(const pm_prof_sample_t *a, const pm_prof_sample_t *b)
{
    return a->depth == b->depth && memcmp(a->pcs, b->pcs, a->depth * sizeof a->pcs[0]) == 0;
}

static void *keep[64];
static int nkeep;

/* fn(sizes[i]) for each i, from one call instruction. */
PM_NOINLINE static void call_each(void *(*fn)(size_t), const size_t *sizes, int n)
{
    for (int i = 0; i < n; i++) keep[nkeep++] = fn(sizes[i]);
}

/* On a thread of its own, whose stack holds none of cmocka's frames:
 * walks through objects not listed for good are not kept. */
static void *memo_site_thread(void *arg)
{
    (void)arg;
    void *(*const fn[3])(size_t) = {site_a, site_b, site_c};
    for (int i = 0; i <= PM_THREAD_NEW_OPS; i++) pm_free(pm_malloc(64)); /* a cache, and a memo with it */
    if (!pm_tcache_memo(&pm_tls)) _exit(4);
    profmalloc_set_sample_rate(1);
    /* three sites of one size through a memo of two ways: each new walk
     * takes the way of another site's */
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 3; i++) call_each(fn[i], (const size_t[]){100, 100}, 2);
    /* one site of many sizes: 16 exact (its first), then sizes of two
     * groups, then an exact one again */
    size_t d[21];
    for (int i = 0; i < 16; i++) d[i] = 1000 + (size_t)i;
    const size_t more[] = {3000, 3100, 3000, 600, 1001};
    memcpy(d + 16, more, sizeof more);
    call_each(site_d, d, 21);
    profmalloc_set_sample_rate(0);
    return NULL;
}

/* In a child: the start-up objects listed, so walks are replayed. */
static void memo_site_child(void *arg)
{
    (void)arg;
    pm_objects_pin_loaded();
    uint64_t replays = pm_unwind_memo_replays();
    pthread_t th;
    if (pthread_create(&th, NULL, memo_site_thread, NULL) != 0 || pthread_join(th, NULL) != 0) _exit(3);
    if (pm_unwind_memo_replays() - replays < 9 + 10) _exit(77); /* no replays here: nothing to test */
    pm_prof_snapshot_t snap;
    pm_sites_mem_t mem;
    if (pm_sites_snapshot(&snap, &mem, NULL) != 0) _exit(2);
    /* a site's return address into its caller names it */
    uintptr_t ra[3] = {0, 0, 0};
    uint64_t objects[3] = {0, 0, 0};
    for (size_t i = 0; i < snap.nsamples; i++) {
        const pm_prof_sample_t *x = &snap.samples[i];
        if (x->size != 100) continue;
        int j = 0;
        while (j < 3 && ra[j] && ra[j] != x->pcs[0]) j++;
        if (j == 3) _exit(10);
        ra[j] = x->pcs[0];
        objects[j] += x->alloc_objects;
    }
    for (int j = 0; j < 3; j++)
        if (objects[j] != 6) _exit(20 + j); /* some counted at another site */
    const pm_prof_sample_t *d = stack_of(&snap, 1000);
    if (!d) _exit(14);
    uint64_t d_objects = 0, d_bytes = 0, d_buckets = 0;
    for (size_t i = 0; i < snap.nsamples; i++) {
        const pm_prof_sample_t *x = &snap.samples[i];
        if (!same_stack(x, d)) continue;
        d_buckets++;
        d_objects += x->alloc_objects;
        d_bytes += x->alloc_bytes;
        if (x->size == 1001 && x->alloc_objects != 2) _exit(30); /* exact, not its group's */
        if (x->size == 600 && x->alloc_objects != 1) _exit(31);
        if (x->size >= 3000 && x->size < 3100 && (x->alloc_objects != 3 || x->alloc_bytes != 9100)) _exit(32);
    }
    uint64_t want = 0;
    for (size_t z = 1000; z < 1016; z++) want += z;
    if (d_buckets != 18 || d_objects != 21 || d_bytes != want + 9100 + 600 + 1001) _exit(33);
    pm_os_unmap(mem.base, mem.bytes);
    for (int i = 0; i < nkeep; i++) pm_free(keep[i]);
    _exit(0);
}

/* Runs child in a child process: exit 0 passes, 77 skips (no replays). */
static void run_memo_child(void (*child)(void *))
{
    char out[512];
    int status = run_in_child(child, NULL, out, sizeof out);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0) fprintf(stderr, "child exit %d: %s", WEXITSTATUS(status), out);
    if (WEXITSTATUS(status) == 77) skip();
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A replayed walk's samples go to the stack its first walk was interned
 * as, and a new walk in a memo way is interned afresh; a site of many
 * sizes finds its groups' buckets and still its exact ones. */
static void test_memo_keeps_site(void **state)
{
    (void)state;
    run_memo_child(memo_site_child);
}

/* n samples of one size from one call site, each block freed at once. */
PM_NOINLINE static void sample_one_size(size_t size, int n)
{
    for (int i = 0; i < n; i++) pm_free(site_a(size));
}

static void *memo_bucket_thread(void *arg)
{
    uint64_t *lookups = arg;
    for (int i = 0; i <= PM_THREAD_NEW_OPS; i++) pm_free(pm_malloc(64)); /* a cache, and a memo with it */
    if (!pm_tcache_memo(&pm_tls)) _exit(4);
    profmalloc_set_sample_rate(1);
    uint64_t before = pm_sites_bucket_lookups();
    sample_one_size(3333, 50);
    lookups[0] = pm_sites_bucket_lookups() - before;
    before = pm_sites_bucket_lookups();
    sample_one_size(3334, 50); /* another size: one lookup, then the memo's again */
    lookups[1] = pm_sites_bucket_lookups() - before;
    profmalloc_set_sample_rate(0);
    return NULL;
}

/* In a child: a loop's replayed walks take their bucket from the memo, so
 * only the first sample of a size looks its bucket up; every sample still
 * counts in it. */
static void memo_bucket_child(void *arg)
{
    (void)arg;
    pm_objects_pin_loaded();
    uint64_t replays = pm_unwind_memo_replays(), lookups[2] = {0, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, memo_bucket_thread, lookups) != 0 || pthread_join(th, NULL) != 0) _exit(3);
    if (pm_unwind_memo_replays() - replays < 90) _exit(77); /* no replays here: nothing to test */
    if (lookups[0] > 2 || lookups[1] > 2) _exit(10 + (int)(lookups[0] > 2));
    pm_prof_snapshot_t snap;
    pm_sites_mem_t mem;
    if (pm_sites_snapshot(&snap, &mem, NULL) != 0) _exit(2);
    /* sizes no other test samples: the child has its parent's table */
    const pm_prof_sample_t *a = stack_of(&snap, 3333), *b = stack_of(&snap, 3334);
    if (!a || !b || a->alloc_objects != 50 || b->alloc_objects != 50) _exit(20);
    if (a->alloc_bytes != 50 * 3333 || b->alloc_bytes != 50 * 3334) _exit(21);
    pm_os_unmap(mem.base, mem.bytes);
    _exit(0);
}

static void test_memo_keeps_bucket(void **state)
{
    (void)state;
    run_memo_child(memo_bucket_child);
}

int main(void)
{
    core_test_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampled_page_flags),
        cmocka_unit_test(test_unsampled_neighbour_free),
        cmocka_unit_test(test_hashed_counts),
        cmocka_unit_test(test_records_from_chunks),
        cmocka_unit_test(test_first_records_inline),
        cmocka_unit_test(test_large_sample_off_table),
        cmocka_unit_test(test_span_holds_records),
        cmocka_unit_test(test_page_classes_hashed),
        cmocka_unit_test(test_memo_keeps_site),
        cmocka_unit_test(test_memo_keeps_bucket),
    };
    return cmocka_run_group_tests_name("prof_sites", tests, NULL, NULL);
}
