/* test_central.c — unit tests of src/central.c: gets and puts of chains, the
 * transfer slots, short gets, the park cap (the release of free spans,
 * malloc_trim, stays in test_core.c with the page heap's tests). */
#include "core_test.h"

/* ======================================================================
 * central.c  (classes no other test uses: 176, 208, 896, 1024, 1152, 1536 B, 160 KiB)
 * ==================================================================== */




static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
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

/* objs[0..n) linked in that order */
static void *link_in_order(void **objs, uint32_t n)
{
    for (uint32_t i = 0; i + 1 < n; i++) pm_link_set(objs[i], objs[i + 1]);
    pm_link_set(objs[n - 1], NULL);
    return objs[0];
}

/* A chain longer than a batch goes into its spans a run at a time: the
 * objects of one span that follow each other keep their links and go to
 * the front of the span's free list in the chain's order (one at a time
 * they went in reversed), and runs that alternate between spans are
 * counted each in its own. */
static void test_central_homes_runs(void **state)
{
    (void)state;
    unsigned cls = class_of_size(48);
    pm_central_t *c = pm_central_of(cls);
    uint32_t cap = pm_class_pages[cls] * PAGE / 48, batch = pm_class_batch[cls], got;
    pm_pageheap_stats_t before = ph_stats();
    uint32_t n = cap + 10;
    assert_true(n - 2 > batch);
    void *chain = pm_central_get(cls, n, &got);
    assert_int_equal(got, n);
    void **objs = calloc(n, sizeof *objs);
    check_chain(cls, chain, n, objs);
    pm_span_t *a = pm_pagemap_span((uintptr_t)objs[0] >> PM_PAGE_SHIFT);
    pm_span_t *b = pm_pagemap_span((uintptr_t)objs[n - 1] >> PM_PAGE_SHIFT);
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(pm_pagemap_span((uintptr_t)objs[cap - 1] >> PM_PAGE_SHIFT), a);
    assert_ptr_equal(pm_pagemap_span((uintptr_t)objs[cap] >> PM_PAGE_SHIFT), b);

    /* all but each span's first object, in address order: a run of a's,
     * then a run of b's */
    void **order = calloc(n, sizeof *order);
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (i != 0 && i != cap) order[k++] = objs[i];
    pm_central_put(cls, link_in_order(order, k), k);
    assert_int_equal(c->parked, 0);
    assert_int_equal(a->allocated, 1);
    assert_int_equal(b->allocated, 1);
    /* a, full and off the list before, went past a quarter of its
     * capacity out: last in line, as one object at a time took it */
    assert_ptr_equal(c->nonempty.prev, a);
    assert_ptr_equal(c->nonempty.next, b);
    void *q = a->freelist;
    for (uint32_t i = 1; i < cap; i++, q = pm_link_get(q)) assert_ptr_equal(q, objs[i]);
    assert_null(q);
    q = b->freelist;
    for (uint32_t i = cap + 1; i < n; i++, q = pm_link_get(q)) assert_ptr_equal(q, objs[i]);
    assert_ptr_equal(q, NULL); /* b's uncut objects are not on its list */
    void *first[2] = {objs[0], objs[cap]};
    check_central_invariant(cls, first, 2);

    /* out again, then back alternating a, b, a, b...: runs of one */
    void *again = pm_central_get(cls, n - 2, &got);
    assert_int_equal(got, n - 2);
    assert_int_equal(a->allocated + b->allocated, n);
    void **mixed = calloc(n, sizeof *mixed);
    uint32_t na = 0, nb = 0;
    for (void *o = again; o; o = pm_link_get(o)) {
        if (pm_pagemap_span((uintptr_t)o >> PM_PAGE_SHIFT) == a) mixed[na++] = o;
        else objs[nb++] = o;
    }
    assert_int_equal(na + nb, n - 2);
    assert_true(na > 1 && nb > 1);
    k = 0;
    for (uint32_t i = 0; i < na || i < nb; i++) {
        if (i < na) order[k++] = mixed[i];
        if (i < nb) order[k++] = objs[i];
    }
    pm_central_put(cls, link_in_order(order, k), k);
    assert_int_equal(a->allocated, 1);
    assert_int_equal(b->allocated, 1);
    assert_int_equal(c->out, 2);
    pm_central_drain();
    assert_int_equal(ph_stats().in_use - before.in_use, 2 * pm_class_pages[cls] * PAGE);
    pm_link_set(first[0], first[1]);
    pm_link_set(first[1], NULL);
    pm_central_put(cls, first[0], 2);
    pm_central_drain();
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
    free(order);
    free(mixed);
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

/* A fresh span's objects come out in address order, each one object past
 * the last, over two gets (the second carves on where the first stopped):
 * a program that walks its blocks in the order it made them reads lines
 * the prefetcher follows (central.c pm_central_get; bench/rounds). */
static void test_central_carves_in_order(void **state)
{
    (void)state;
    unsigned cls = class_of_size(48);
    pm_central_t *c = pm_central_of(cls);
    size_t size = pm_class_size[cls];
    uint32_t cap = pm_class_pages[cls] * PAGE / (uint32_t)size, got1, got2;
    assert_int_equal(c->spans, 0);
    assert_true(cap > 16);
    void *a = pm_central_get(cls, 8, &got1), *b = pm_central_get(cls, 8, &got2);
    assert_int_equal(got1, 8);
    assert_int_equal(got2, 8);
    assert_int_equal(c->spans, 1);
    char *want = (char *)a;
    for (void *chain = a; chain; chain = pm_link_get(chain), want += size) assert_ptr_equal(chain, want);
    for (void *chain = b; chain; chain = pm_link_get(chain), want += size) assert_ptr_equal(chain, want);
    assert_int_equal((uintptr_t)a % PAGE, 0); /* the span's first object */
    pm_central_put(cls, a, 8);
    pm_central_put(cls, b, 8);
    pm_central_drain();
    assert_int_equal(c->spans, 0);
}

/* Short chains with several slots: joining the newest slot, a get that
 * takes the whole chain under a short one, gets that take whole slots and
 * split the next, short chains that find every slot taken,
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

    /* a batch with a short chain on top of a whole one: the whole one in
     * O(1), the short one moved down into its place (taking the short one
     * and the front of the next left that one's rest on top, short, for
     * every later get to do the same) */
    void *objs[64];
    void *x = pm_central_get(cls, batch, &got);
    assert_int_equal(got, batch);
    assert_ptr_equal(x, a);
    check_chain(cls, x, batch, objs);
    assert_int_equal(c->nslots, 1);
    assert_ptr_equal(c->slots[0], b10); /* b10 joined b5 in front */
    assert_int_equal(c->slot_n[0], 15);
    assert_int_equal(chain_len(c->slots[0]), 15);
    assert_int_equal(c->parked, 15);
    /* a short chain of 20 on the 15 (no room to join): a batch takes the
     * 20 whole, then the front of the 15 */
    void *x20 = take_front(&x, 20);
    pm_central_put(cls, x20, 20);
    assert_int_equal(c->nslots, 2);
    void *z = pm_central_get(cls, batch, &got);
    assert_int_equal(got, batch);
    check_chain(cls, z, batch, objs);
    assert_int_equal(c->nslots, 1);
    assert_int_equal(c->slot_n[0], 35 - batch);
    assert_int_equal(chain_len(c->slots[0]), 35 - batch);
    /* more than is parked: what there is */
    void *y = pm_central_get(cls, batch, &got);
    assert_int_equal(got, 35 - batch);
    assert_int_equal(chain_len(y), 35 - batch);
    assert_int_equal(c->nslots, 0);
    assert_int_equal(c->parked, 0);
    assert_int_equal(c->out, 2 * batch); /* z, y, x and what is left of b */
    /* y: x's batch - 20 after it, 15 in all */
    void *tail = y;
    while (pm_link_get(tail)) tail = pm_link_get(tail);
    pm_link_set(tail, x);
    x = z;

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
    pm_central_put(cls, y, 15 - 3);
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
    assert_int_equal(cb->spans, 1); /* emptied, and kept (central.c PM_KEEP_BYTES) */
    assert_int_equal(cb->kept, 1);
    /* the kept span serves the next get (short rather than a fresh span) */
    void *two = pm_central_get(big, pm_class_batch[big], &got);
    assert_int_equal(got, 1);
    assert_ptr_equal(two, one);
    assert_int_equal(cb->kept, 0);
    pm_central_put(big, two, got);
    assert_int_equal(cb->nslots, 0);
    assert_int_equal(cb->parked, 0);
    assert_int_equal(cb->spans, 1);
    pm_central_drain(); /* malloc_trim gives kept spans back */
    assert_int_equal(cb->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

/* 1 if the OS page holding p is resident, else 0. */
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
    assert_int_equal(cl->spans, cl->kept); /* its spans emptied: kept or home */
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


/* ====================================================================== */

/* A medium class keeps a span that empties on its list: the next get
 * takes the same object, with no page-heap operation, and the span goes
 * back once the class has been idle for PM_KEEP_IDLE_TICKS ticks. */
static void test_central_keeps_empty_span(void **state)
{
    (void)state;
    unsigned cls = class_of_size(160 * 1024);
    pm_central_t *c = pm_central_of(cls);
    uint32_t got;
    pm_central_drain();
    pm_pageheap_stats_t before = ph_stats();
    void *one = pm_central_get(cls, 1, &got);
    assert_int_equal(got, 1);
    pm_central_put(cls, one, 1);
    assert_int_equal(c->kept, 1);
    assert_int_equal(c->spans, 1);
    pm_pageheap_stats_t kept = ph_stats();
    void *again = pm_central_get(cls, 1, &got);
    assert_ptr_equal(again, one);
    assert_int_equal(ph_stats().in_use, kept.in_use); /* no page-heap operation */
    pm_central_put(cls, again, 1);
    pm_central_tick(); /* a put since the last tick: busy */
    assert_int_equal(c->kept, 1);
    for (int i = 0; i < 16 && c->kept; i++) pm_central_tick();
    assert_int_equal(c->kept, 0);
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

/* A class keeps as many empty spans as it has in use: of 40 one-object
 * spans, 20 freed stay kept (each a span the page heap need not coalesce,
 * split and map again) and are reused without a page-heap operation; once
 * the other 20 are freed too, the class keeps kept_max and what the room
 * budget allows, and when idle none. */
static void test_central_keeps_in_proportion(void **state)
{
    (void)state;
    enum { N = 40 };
    unsigned cls = class_of_size(160 * 1024); /* one object a span */
    pm_central_t *c = pm_central_of(cls);
    void *o[N];
    uint32_t got;
    pm_central_drain();
    pm_pageheap_stats_t before = ph_stats();
    for (int i = 0; i < N; i++) {
        assert_non_null(o[i] = pm_central_get(cls, 1, &got));
        assert_int_equal(got, 1);
    }
    assert_int_equal(c->spans, N);
    for (int i = 0; i < N / 2; i++) pm_central_put(cls, o[i], 1);
    assert_int_equal(c->kept + c->parked, N / 2); /* a quarter of those out may park */
    assert_int_equal(c->spans, N);
    pm_pageheap_stats_t kept = ph_stats();
    for (int i = 0; i < N / 2; i++) assert_non_null(o[i] = pm_central_get(cls, 1, &got));
    assert_int_equal(ph_stats().in_use, kept.in_use); /* no page-heap operation */
    assert_int_equal(c->kept, 0);
    for (int i = 0; i < N; i++) pm_central_put(cls, o[i], 1);
    assert_true(c->kept_max >= 1);
    /* and those the room budget holds for a class back to its peak */
    size_t span = (size_t)pm_class_pages[cls] << PM_PAGE_SHIFT;
    assert_true(c->room_n >= 1 && c->room_n * span <= PM_ROOM_BYTES);
    assert_int_equal(c->kept, c->kept_max + c->room_n);
    assert_int_equal(c->spans, c->kept);
    for (int i = 0; i < 16 && c->kept; i++) pm_central_tick();
    assert_int_equal(c->kept, 0);
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

/* The 160 KiB class (one object a span), its struct and span bytes, with
 * every parked chain and kept span of every class gone. */
static unsigned one_a_span_class(pm_central_t **c, size_t *span)
{
    unsigned cls = class_of_size(160 * 1024);
    *c = pm_central_of(cls);
    *span = (size_t)pm_class_pages[cls] << PM_PAGE_SHIFT;
    pm_central_drain();
    return cls;
}

/* A busy class gives back at each tick the kept spans no get took since
 * the last one (the fewest it kept meanwhile): a class whose use fell
 * from a peak no longer keeps as many empty spans as it has in use for
 * as long as it is touched once a second.  A span a get took in the
 * window stays. */
static void test_central_tick_returns_unused_kept(void **state)
{
    (void)state;
    enum { N = 20 };
    pm_central_t *c;
    size_t span;
    unsigned cls = one_a_span_class(&c, &span);
    void *o[N];
    uint32_t got;
    pm_pageheap_stats_t before = ph_stats();
    for (int i = 0; i < N; i++) assert_non_null(o[i] = pm_central_get(cls, 1, &got));
    for (int i = N / 2; i < N; i++) pm_central_put(cls, o[i], 1);
    uint32_t kept = c->kept;
    assert_true(kept >= 2 && kept <= N / 2);
    pm_central_tick(); /* none back: the drain left the class with none kept */
    assert_int_equal(c->kept, kept);
    /* one kept span taken and given back in the window (after the
     * parked objects, which a get takes first): the others go */
    uint32_t take = (uint32_t)c->parked + 1;
    void *w[N];
    assert_true(take <= N);
    for (uint32_t i = 0; i < take; i++) assert_non_null(w[i] = pm_central_get(cls, 1, &got));
    assert_int_equal(c->kept, kept - 1);
    for (uint32_t i = 0; i < take; i++) pm_central_put(cls, w[i], 1);
    assert_int_equal(c->kept, kept);
    pm_pageheap_stats_t busy = ph_stats();
    pm_central_tick();
    assert_int_equal(c->kept, 1);
    assert_int_equal(c->spans, N / 2 + c->parked + 1); /* out, parked, kept */
    assert_int_equal(busy.in_use - ph_stats().in_use, (uint64_t)(kept - 1) * span);
    /* taken again in the next window: it stays */
    for (uint32_t i = 0; i < take; i++) assert_non_null(w[i] = pm_central_get(cls, 1, &got));
    assert_int_equal(c->kept, 0);
    for (uint32_t i = 0; i < take; i++) pm_central_put(cls, w[i], 1);
    pm_central_tick();
    assert_int_equal(c->kept, 1);
    for (int i = 0; i < N / 2; i++) pm_central_put(cls, o[i], 1);
    pm_central_drain();
    pm_central_tick(); /* the class's peak in use back to none, as found */
    assert_int_equal(c->spans, 0);
    assert_int_equal(c->in_use_high, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

/* A batch of spans made and freed whole is kept whole (the room beyond
 * as many as are in use, up to the most in use since the last tick): the
 * same batch again takes no page-heap operation.  A tick with the class
 * busy lowers the peak to what is in use then, so the next batch freed
 * keeps kept_max only. */
static void test_central_room_keeps_batch(void **state)
{
    (void)state;
    enum { N = 8 };
    pm_central_t *c;
    size_t span;
    unsigned cls = one_a_span_class(&c, &span);
    void *o[N];
    uint32_t got;
    assert_true(N * span <= PM_ROOM_BYTES);
    pm_pageheap_stats_t before = ph_stats();
    for (int i = 0; i < N; i++) assert_non_null(o[i] = pm_central_get(cls, 1, &got));
    assert_int_equal(c->in_use_high, N);
    for (int i = 0; i < N; i++) pm_central_put(cls, o[i], 1);
    assert_int_equal(c->spans, N);
    assert_int_equal(c->kept + c->parked, N);
    pm_pageheap_stats_t kept = ph_stats();
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < N; i++) assert_non_null(o[i] = pm_central_get(cls, 1, &got));
        assert_int_equal(c->kept, 0);
        assert_int_equal(c->room_n, 0); /* reuse gives the budget back */
        for (int i = 0; i < N; i++) pm_central_put(cls, o[i], 1);
        assert_int_equal(ph_stats().in_use, kept.in_use); /* no page-heap operation */
    }
    /* a tick while the class is busy: the peak is what is in use, none */
    for (int i = 0; i < N; i++) assert_non_null(o[i] = pm_central_get(cls, 1, &got));
    pm_central_tick();
    assert_int_equal(c->in_use_high, N);
    for (int i = 0; i < N; i++) pm_central_put(cls, o[i], 1);
    pm_central_tick(); /* busy: peak = 0 in use */
    assert_int_equal(c->in_use_high, 0);
    for (int i = 0; i < N; i++) assert_non_null(o[i] = pm_central_get(cls, 1, &got));
    pm_central_tick();
    c->in_use_high = 0; /* as if the batch had been made before the tick */
    for (int i = 0; i < N; i++) pm_central_put(cls, o[i], 1);
    assert_int_equal(c->room_n, 0);
    assert_true(c->kept <= c->kept_max);
    for (int i = 0; i < 16 && c->kept; i++) pm_central_tick();
    pm_central_drain();
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

/* The room is one budget for all classes: two classes freeing batches of
 * one and a half times PM_ROOM_BYTES each keep at most PM_ROOM_BYTES
 * between them beyond kept_max, and a class whose kept spans go back
 * returns its share to the other. */
static void test_central_room_bounded(void **state)
{
    (void)state;
    unsigned a = class_of_size(160 * 1024), b = class_of_size(96 * 1024);
    assert_int_not_equal(a, b);
    pm_central_t *ca = pm_central_of(a), *cb = pm_central_of(b);
    size_t sa = (size_t)pm_class_pages[a] << PM_PAGE_SHIFT, sb = (size_t)pm_class_pages[b] << PM_PAGE_SHIFT;
    /* objects for one and a half rooms of spans each */
    size_t batch = PM_ROOM_BYTES + PM_ROOM_BYTES / 2;
    uint32_t na = (uint32_t)(batch / sa * (sa / pm_class_size[a]));
    uint32_t nb = (uint32_t)(batch / sb * (sb / pm_class_size[b]));
    void **oa = calloc(na, sizeof *oa), **ob = calloc(nb, sizeof *ob);
    uint32_t got;
    pm_central_drain();
    assert_int_equal(ca->room_n + cb->room_n, 0);
    for (uint32_t i = 0; i < na; i++) assert_non_null(oa[i] = pm_central_get(a, 1, &got));
    for (uint32_t i = 0; i < nb; i++) assert_non_null(ob[i] = pm_central_get(b, 1, &got));
    for (uint32_t i = 0; i < na; i++) pm_central_put(a, oa[i], 1);
    assert_true(ca->room_n * sa <= PM_ROOM_BYTES && ca->room_n * sa > PM_ROOM_BYTES - sa);
    for (uint32_t i = 0; i < nb; i++) pm_central_put(b, ob[i], 1);
    assert_true(ca->room_n * sa + cb->room_n * sb <= PM_ROOM_BYTES);
    assert_true(ca->kept <= ca->kept_max + ca->room_n && cb->kept <= cb->kept_max + cb->room_n);
    /* a's kept spans go (its class idle): b may take the room */
    uint32_t b_room = cb->room_n;
    pm_central_drain();
    assert_int_equal(ca->room_n + cb->room_n, 0);
    for (uint32_t i = 0; i < nb; i++) assert_non_null(ob[i] = pm_central_get(b, 1, &got));
    for (uint32_t i = 0; i < nb; i++) pm_central_put(b, ob[i], 1);
    assert_true(cb->room_n > b_room);
    assert_true(cb->room_n * sb <= PM_ROOM_BYTES);
    pm_central_drain();
    free(oa);
    free(ob);
}

/* A class above 1 KiB parks up to a quarter of the objects it has out
 * (within 1 MiB), not just 16 KiB: batches of a class with many blocks
 * live move in O(1).  As objects come home the slots shrink with them,
 * oldest chains first, and an idle class's slots go back to 16 KiB. */
static void test_central_parks_in_proportion(void **state)
{
    (void)state;
    enum { K = 24 };
    unsigned cls = class_of_size(8192);
    pm_central_t *c = pm_central_of(cls);
    size_t size = pm_class_size[cls];
    uint32_t batch = pm_class_batch[cls];
    void *chains[K];
    pm_central_drain();
    pm_pageheap_stats_t before = ph_stats();
    assert_true((size_t)batch * size > 16 * 1024); /* more than the floor */
    for (int i = 0; i < K; i++) chains[i] = get_full(cls, batch);
    assert_int_equal(c->out, (uint64_t)K * batch);
    /* a quarter of the objects out is room for a whole batch */
    pm_central_put(cls, chains[0], batch);
    assert_int_equal(c->parked, batch);
    assert_int_equal(c->nslots, 1);
    /* and for more, while as many stay out */
    pm_central_put(cls, chains[1], batch);
    assert_int_equal(c->parked, 2 * batch);
    /* the rest come home: the slots never hold more than the bound, and
     * end at the floor */
    for (int i = 2; i < K; i++) {
        pm_central_put(cls, chains[i], batch);
        uint64_t bound = c->out / 4 > c->park_max ? c->out / 4 : c->park_max;
        assert_true(c->parked <= bound);
    }
    assert_int_equal(c->out, 0);
    assert_true(c->parked <= c->park_max);
    assert_true(c->parked * size <= 16 * 1024);

    /* parked deep, then idle: the tick sends the slots back to the floor */
    for (int i = 0; i < K; i++) chains[i] = get_full(cls, batch);
    for (int i = 0; i < K / 4; i++) pm_central_put(cls, chains[i], batch);
    assert_true(c->parked > c->park_max);
    for (int i = 0; i < 16 && c->parked > c->park_max; i++) pm_central_tick();
    assert_true(c->parked <= c->park_max);
    for (int i = K / 4; i < K; i++) pm_central_put(cls, chains[i], batch);
    pm_central_drain();
    assert_int_equal(c->parked, 0);
    assert_int_equal(c->spans, 0);
    assert_int_equal(ph_stats().in_use, before.in_use);
}

int main(void)
{
    core_test_init();
    const struct CMUnitTest central[] = {
        cmocka_unit_test(test_central_get_put),
        cmocka_unit_test(test_central_short_get),
        cmocka_unit_test(test_central_carves_in_order),
        cmocka_unit_test(test_central_transfer_slots),
        cmocka_unit_test(test_central_homes_runs),
        cmocka_unit_test(test_central_partial_slots),
        cmocka_unit_test(test_central_keeps_empty_span),
        cmocka_unit_test(test_central_keeps_in_proportion),
        cmocka_unit_test(test_central_tick_returns_unused_kept),
        cmocka_unit_test(test_central_room_keeps_batch),
        cmocka_unit_test(test_central_room_bounded),
        cmocka_unit_test(test_central_park_cap),
        cmocka_unit_test(test_central_parks_in_proportion),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("central", central, NULL, NULL);
    return failed ? 1 : 0;
}
