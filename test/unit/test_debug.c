/* test_debug.c — the debug build (./configure --enable-debug, which defines
 * PM_CONFIG_DEBUG): misuse that the release build's fast paths let through
 * must abort with a message there.  Linked with the core built with
 * -DPM_CONFIG_DEBUG (test/unit/debug.mk); pm_* are called directly, the
 * test program itself runs on glibc's malloc.  Each misuse runs in a forked
 * child.  test/unit/debug.mk also runs the API and stress tests on the
 * debug build as the process's malloc, so its checks must not fire on
 * correct programs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "child_stderr.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "pm_internal.h"

static void expect_abort(void (*fn)(void *), void *arg, const char *what, const void *at)
{
    expect_child_abort(fn, arg, what, at, what);
}

static void assert_debug_build(void) { assert_true(pm_config_debug); }

/* free(a); free(b); free(a) in one class: a is in the thread's list but
 * not at its head, where the release build looks. */
static void double_free_child(void *arg)
{
    void **out = arg;
    pm_free(out[0]);
    pm_free(out[1]);
    pm_free(out[0]);
}

static void test_double_free_inside_the_list(void **state)
{
    (void)state;
    assert_debug_build();
    void *blk[2] = {pm_malloc(40), pm_malloc(40)};
    expect_abort(double_free_child, blk, "free(): double free detected", blk[0]);
    pm_free(blk[1]);
    pm_free(blk[0]);
}

/* A block freed twice after the first free went home to its span: the
 * child flushes its cache and drains the transfer slots between the two. */
static void double_free_home_child(void *arg)
{
    void **blk = arg;
    pm_free(blk[0]);
    pm_tcache_flush_all(&pm_tls);
    pm_central_drain();
    pm_free(blk[0]);
    pm_tcache_flush_all(&pm_tls);
    pm_central_drain();
}

static void test_double_free_after_flush(void **state)
{
    (void)state;
    /* a neighbour stays live, so the span stays in use */
    void *blk[2] = {pm_malloc(1500), pm_malloc(1500)};
    assert_ptr_equal(pm_pagemap_span((uintptr_t)blk[0] >> PM_PAGE_SHIFT),
                     pm_pagemap_span((uintptr_t)blk[1] >> PM_PAGE_SHIFT));
    expect_abort(double_free_home_child, blk, "free(): double free detected", blk[0]);
    pm_free(blk[0]);
    pm_free(blk[1]);
}

/* The start of an object the span has not cut yet: no malloc returned it.
 * The release build's free fast path accepts it (class and alignment are
 * right), its slow path (realloc, malloc_usable_size, a full list) does not. */
static void free_child(void *p) { pm_free(p); }
static void usable_child(void *p) { (void)pm_usable_size(p); }

static void test_never_handed_out(void **state)
{
    (void)state;
    char *p = pm_malloc(48); /* class 48 is this test's alone */
    pm_span_t *s = pm_pagemap_span((uintptr_t)p >> PM_PAGE_SHIFT);
    assert_non_null(s);
    assert_int_equal(s->cls, pm_sizeclass_of(48));
    assert_true(s->carved < s->capacity);
    char *uncut = (char *)(s->page << PM_PAGE_SHIFT) + (size_t)s->carved * 48;
    expect_abort(free_child, uncut, "free(): invalid pointer", uncut);
    expect_abort(usable_child, uncut, "malloc_usable_size(): invalid pointer", uncut);
    pm_free(p);
}

/* A write into a freed block changes the link to the next free block:
 * the malloc that takes the block follows the bad link and aborts. */
static void write_after_free_child(void *arg)
{
    void **blk = arg;
    pm_free(blk[0]);
    pm_free(blk[1]);
    pm_link_set(blk[1], (char *)blk[0] + 8); /* a stray write that decodes to this */
    (void)pm_malloc(64);
}

static void test_write_after_free(void **state)
{
    (void)state;
    void *blk[2] = {pm_malloc(64), pm_malloc(64)};
    expect_abort(write_after_free_child, blk,
                 "malloc(): corrupted free list (a block written after free?), link",
                 (char *)blk[0] + 8);
    pm_free(blk[1]);
    pm_free(blk[0]);
}

/* A write after free that makes the thread's list a cycle: the next free
 * of the class walks the list, and must stop at its length, not spin. */
static void cycle_child(void *arg)
{
    void **blk = arg;
    pm_free(blk[0]);
    pm_free(blk[1]); /* list: b -> a */
    pm_link_set(blk[0], blk[1]); /* a -> b: a cycle */
    pm_free(blk[2]);
}

static void test_cycle_in_the_list(void **state)
{
    (void)state;
    void *blk[3] = {pm_malloc(200), pm_malloc(200), pm_malloc(200)};
    /* the child's list after its two frees: b, a, then len - 2 others; the
     * walk through the cycle b, a, b, ... stops at its (len + 1)-th link */
    uint32_t len = pm_tls.list[pm_sizeclass_of(200)].len + 2;
    expect_abort(cycle_child, blk, "free(): corrupted free list (a block written after free?), link",
                 len % 2 ? blk[0] : blk[1]);
    for (int i = 0; i < 3; i++) pm_free(blk[i]);
}

/* A chain parked in a transfer slot by a thread that exited, written
 * after free: the refill that takes it checks its first link. */
static void *free_and_exit(void *arg)
{
    void **blk = arg;
    pm_free(blk[0]);
    pm_free(blk[1]);
    return NULL;
}

#define BOGUS ((void *)(uintptr_t)0x414141414140u)

static void slot_child(void *arg)
{
    void **blk = arg;
    pthread_t t;
    if (pthread_create(&t, NULL, free_and_exit, blk) != 0 || pthread_join(t, NULL) != 0) _exit(3);
    pm_link_set(blk[0], BOGUS);
    pm_link_set(blk[1], BOGUS);
    for (int i = 0; i < 3; i++) (void)pm_malloc(320);
}

static void test_corrupted_transfer_chain(void **state)
{
    (void)state;
    void *blk[2] = {pm_malloc(320), pm_malloc(320)};
    expect_abort(slot_child, blk, "malloc(): corrupted free list (a block written after free?), link",
                 BOGUS);
    pm_free(blk[0]);
    pm_free(blk[1]);
}

/* Correct use trips nothing: blocks of every size go between threads,
 * through realloc and the aligned calls, with flushes in between. */
static void *worker(void *arg)
{
    void **ring = arg;
    unsigned x = 12345;
    for (int i = 0; i < 200000; i++) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) % 256;
        if (ring[k]) {
            pm_free(ring[k]);
            ring[k] = NULL;
        } else if (x & 1) {
            ring[k] = pm_realloc(pm_malloc((x >> 16) % 3000 + 1), (x >> 12) % 70000 + 1);
        } else {
            ring[k] = pm_memalign((size_t)64 << (x >> 20) % 6, (x >> 14) % 5000 + 1);
        }
        if (i % 50000 == 0) pm_tcache_flush_all(&pm_tls);
    }
    return NULL;
}

static void test_correct_use_passes(void **state)
{
    (void)state;
    static void *ring[2][256];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, worker, ring[i]), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    /* what the threads left, freed here: cross-thread frees */
    size_t left = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 256; k++)
            if (ring[i][k]) {
                pm_free(ring[i][k]);
                left++;
            }
    assert_true(left > 0);
    pm_malloc_trim(0);
}

int main(void)
{
    pm_init();
    pm_sampler_set_rate(0);
    /* a caching thread: a new one's first operations skip its lists */
    for (int i = 0; i <= PM_THREAD_NEW_OPS && pm_tls.state != PM_THREAD_ACTIVE; i++) pm_free(pm_malloc(1));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_free_inside_the_list),
        cmocka_unit_test(test_double_free_after_flush),
        cmocka_unit_test(test_never_handed_out),
        cmocka_unit_test(test_write_after_free),
        cmocka_unit_test(test_cycle_in_the_list),
        cmocka_unit_test(test_corrupted_transfer_chain),
        cmocka_unit_test(test_correct_use_passes),
    };
    return cmocka_run_group_tests_name("debug build", tests, NULL, NULL);
}
