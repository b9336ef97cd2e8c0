/* core_test.h — what the allocator core's unit tests share (test_core.c
 * and the test_<module>.c files beside it): the includes, and helpers for
 * page-heap states, the stats and central lists.  Each test program links
 * libprofmalloc-test.a (no libc overrides): the test itself, cmocka and
 * pthread run on glibc's malloc, and it calls pm_* directly.
 * Tests in one program share one allocator, so each works on its own size
 * classes or on page-heap states it sets up itself.  Sampling is turned
 * off in main() (core_test_init) so the profiler adds no metadata and no
 * sampled-page flags behind the tests' backs.  Anything computed in a
 * helper thread is asserted in the main thread (cmocka's failures
 * longjmp). */
#ifndef CORE_TEST_H
#define CORE_TEST_H

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

__attribute__((unused)) static uint8_t *page_ptr(uintptr_t page) { return (uint8_t *)(page << PM_PAGE_SHIFT); }

__attribute__((unused)) static pm_pageheap_stats_t ph_stats(void)
{
    pm_pageheap_stats_t st;
    memset(&st, 0, sizeof st);
    pm_pageheap_stats(&st);
    return st;
}

__attribute__((unused)) static profmalloc_stats_t stats(void)
{
    profmalloc_stats_t s;
    pm_stats_collect(&s);
    return s;
}

__attribute__((unused)) static void assert_stats_balance(const profmalloc_stats_t *s)
{
    assert_int_equal(s->mapped, s->in_use + s->fragmentation + s->thread_cache +
                                    s->central_cache + s->pageheap_free + s->released +
                                    s->metadata);
}

__attribute__((unused)) static int all_zero(const void *p, size_t n)
{
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i]) return 0;
    return 1;
}


__attribute__((unused)) static unsigned class_of_size(size_t size)
{
    unsigned c = pm_sizeclass_of(size);
    assert_int_equal(pm_class_size[c], size);
    return c;
}

__attribute__((unused)) static uint32_t chain_len(void *chain)
{
    uint32_t n = 0;
    for (void *p = chain; p; p = pm_link_get(p)) n++;
    return n;
}

/* A new thread caches nothing for its first PM_THREAD_NEW_OPS operations
 * (tcache.c): these make it a caching one, in a class of its own. */
__attribute__((unused)) static void become_active(void)
{
    assert_int_equal(pm_tls.state, PM_THREAD_EMPTY);
    pm_free(pm_malloc(24));
    assert_int_equal(pm_tls.state, PM_THREAD_NEW);
    for (int i = 0; i < PM_THREAD_NEW_OPS && pm_tls.state == PM_THREAD_NEW; i++) pm_free(pm_malloc(24));
    assert_int_equal(pm_tls.state, PM_THREAD_ACTIVE);
}

/* n objects from the central list over as many gets as it takes: a get
 * returns fewer than asked when the class's old spans run out. */
__attribute__((unused)) static void *get_full(unsigned cls, uint32_t n)
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

__attribute__((unused)) static uint32_t freelist_len(const pm_span_t *s)
{
    uint32_t n = 0;
    for (void *p = s->freelist; p; p = pm_link_get(p)) n++;
    return n;
}

/* Sampling off, and the main thread set up as an allocating thread with
 * a cache (the stats count it: test_stats_balance, and the children of
 * test_tcache_registration_in_last_destructor_round expect it live). */
__attribute__((unused)) static void core_test_init(void)
{
    pm_init();
    pm_sampler_set_rate(0);
    /* past the uncached start of a new thread (tcache.c) */
    for (int i = 0; i <= PM_THREAD_NEW_OPS && pm_tls.state != PM_THREAD_ACTIVE; i++) pm_free(pm_malloc(1));
    pm_free(pm_malloc(1));
}

#endif
