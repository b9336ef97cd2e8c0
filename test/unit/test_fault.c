/* test_fault.c — the allocator on a failing OS: the fake OS of os_linux.c
 * (pm_os_fault_set) refuses mmap, madvise and munmap at a chance of none,
 * a third, and always, while two threads run random operations at sample
 * rates 0, 512 KiB and 1.  Every failure must be NULL (or the call's error
 * value) with errno ENOMEM, a failed realloc must keep its block, no block
 * may lose its contents, and once the OS gives memory again allocation and
 * a heap dump must work, with no metadata lost to the failures.
 * Calls pm_* directly (the test itself runs on the C library's malloc). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_internal.h"

#define SLOTS 512
#define OPS 3000

typedef struct slot {
    unsigned char *p;
    size_t size;
} slot_t;

typedef struct worker {
    uint64_t rng;
    slot_t slots[SLOTS];
    uint64_t nulls, bad_errno, bad_content, misaligned;
} worker_t;

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static unsigned char pattern(const void *p, size_t i) { return (unsigned char)(((uintptr_t)p >> 4) * 31 + i * 7); }

static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = pattern(p, i);
}

static int intact(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern(p, i)) return 0;
    return 1;
}

/* A size: mostly small, some large, a few huge. */
static size_t pick_size(uint64_t *rng)
{
    uint64_t r = next_rand(rng);
    switch (r % 8) {
    case 0: return 1 + (r >> 8) % 400000;
    case 1: return 1 + (r >> 8) % (1u << 20);
    default: return 1 + (r >> 8) % 2048;
    }
}

static void release_slot(worker_t *w, slot_t *s)
{
    if (!s->p) return;
    if (!intact(s->p, s->size)) w->bad_content++;
    pm_free(s->p);
    s->p = NULL;
}

static void *run_worker(void *arg)
{
    worker_t *w = arg;
    for (int op = 0; op < OPS; op++) {
        slot_t *s = &w->slots[next_rand(&w->rng) % SLOTS];
        uint64_t r = next_rand(&w->rng);
        size_t size = pick_size(&w->rng);
        void *q = NULL;
        errno = 0;
        switch (r % 6) {
        case 0: release_slot(w, s); continue;
        case 1: release_slot(w, s); q = pm_malloc(size); break;
        case 2: release_slot(w, s); q = pm_calloc(1, size);
            if (q)
                for (size_t i = 0; i < size; i++)
                    if (((unsigned char *)q)[i]) { w->bad_content++; break; }
            break;
        case 3: release_slot(w, s); q = pm_memalign((size_t)16 << (r >> 8) % 10, size);
            if (q && ((uintptr_t)q & ((((size_t)16 << (r >> 8) % 10)) - 1))) w->misaligned++;
            break;
        case 4: {
            if (!s->p) continue;
            if (!intact(s->p, s->size)) w->bad_content++;
            void *n = pm_realloc(s->p, size);
            if (!n) {
                if (errno != ENOMEM) w->bad_errno++;
                w->nulls++;
                if (!intact(s->p, s->size)) w->bad_content++; /* kept whole */
                continue;
            }
            size_t keep = size < s->size ? size : s->size;
            for (size_t i = 0; i < keep; i++)
                if (((unsigned char *)n)[i] != pattern(s->p, i)) { w->bad_content++; break; }
            s->p = n;
            s->size = size;
            fill(s->p, s->size);
            continue;
        }
        case 5: {
            release_slot(w, s);
            void *out = NULL;
            int rc = pm_posix_memalign(&out, 64, size);
            if (rc != 0 && rc != ENOMEM) w->bad_errno++;
            q = rc == 0 ? out : NULL;
            if (rc) errno = ENOMEM;
            break;
        }
        }
        if (!q) {
            w->nulls++;
            if (errno != ENOMEM) w->bad_errno++;
            continue;
        }
        if ((uintptr_t)q % 16) w->misaligned++;
        s->p = q;
        s->size = size;
        fill(s->p, s->size);
    }
    return NULL;
}

static void free_all(worker_t *w)
{
    for (int i = 0; i < SLOTS; i++) release_slot(w, &w->slots[i]);
}

static void set_faults(uint32_t per_1024)
{
    pm_os_fault_set(PM_OS_FAULT_MAP, per_1024);
    pm_os_fault_set(PM_OS_FAULT_RELEASE, per_1024);
    pm_os_fault_set(PM_OS_FAULT_UNMAP, per_1024);
}

/* Metadata other than the page map, whose leaves (one per 2 GiB of
 * address space) follow where the kernel places the heap, not failures. */
static uint64_t metadata(void)
{
    profmalloc_stats_t s;
    pm_stats_collect(&s);
    return s.metadata - pm_pagemap_bytes();
}

/* One round: the two threads under the given fault chance, then the OS
 * well again: everything freed, malloc and a dump must work. */
static uint64_t round_at(uint64_t rate, uint32_t faults, uint64_t seed)
{
    static worker_t w[2];
    pm_sampler_set_rate(rate);
    for (int i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].rng = seed * 2 + (uint64_t)i + 1;
    }
    uint64_t faults_before = pm_os_fault_count();
    set_faults(faults);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, run_worker, &w[i]), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    /* a dump while the OS refuses: an error, no crash */
    int fd = open("/dev/null", O_WRONLY);
    assert_true(fd >= 0);
    if (faults == 1024) assert_int_not_equal(profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_LEGACY), 0);
    else (void)profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_LEGACY);
    set_faults(0);
    uint64_t nulls = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(w[i].bad_errno, 0);
        assert_int_equal(w[i].bad_content, 0);
        assert_int_equal(w[i].misaligned, 0);
        nulls += w[i].nulls;
        free_all(&w[i]);
        assert_int_equal(w[i].bad_content, 0);
    }
    if (faults == 0) assert_int_equal(nulls, 0);
    if (faults == 1024) assert_true(nulls > 0);
    if (faults) assert_true(pm_os_fault_count() > faults_before);
    /* memory is back: allocation and dumps work */
    void *big = pm_malloc((size_t)8 << 20), *small = pm_malloc(100);
    assert_non_null(big);
    assert_non_null(small);
    pm_free(big);
    pm_free(small);
    assert_int_equal(profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_LEGACY), 0);
    assert_int_equal(profmalloc_dump_fd(fd, PROFMALLOC_FORMAT_PPROF), 0);
    close(fd);
    pm_malloc_trim(0);
    return nulls;
}

static void test_fault_rates(void **state)
{
    (void)state;
    static const uint64_t rates[] = {0, 512 * 1024, 1};
    static const uint32_t faults[] = {0, 341, 1024};
    for (size_t r = 0; r < PM_ARRAY_LEN(rates); r++) {
        /* the same rounds twice: the second may not keep more metadata
         * than the first left (span structs and leaves are reused) */
        uint64_t after_first = 0;
        for (int pass = 0; pass < 2; pass++) {
            for (size_t f = 0; f < PM_ARRAY_LEN(faults); f++) round_at(rates[r], faults[f], r * 16 + f);
            uint64_t m = metadata();
            if (pass == 0) after_first = m;
            else if (m > after_first + ((uint64_t)1 << 20))
                fail_msg("rate %llu: metadata %llu after the second pass, %llu after the first",
                         (unsigned long long)rates[r], (unsigned long long)m, (unsigned long long)after_first);
        }
    }
    pm_sampler_set_rate(0);
}

int main(void)
{
    pm_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_rates),
    };
    return cmocka_run_group_tests_name("fault", tests, NULL, NULL);
}
