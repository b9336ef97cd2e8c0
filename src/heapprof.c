/* heapprof.c — the sampled allocation-site table.  A sampled allocation
 * gets a record (address → bucket, weight) and its bucket, one per
 * (call stack, requested size), accumulates unbiased estimates: a block of
 * s bytes sampled at mean rate R stands for 1/p blocks, p = 1 - e^(-s/R)
 * (weight 1 at R = 1, the exact mode).  Frees subtract the same weight.
 * Snapshots copy the buckets into mmap'd memory; pprof.c formats them.
 * Lock: prof.lock guards the three hash tables (stacks, buckets, records)
 * and the record pool and arena.
 * Must never: unwind, map memory or write a file while holding it — pools
 * are refilled and tables grown with the lock dropped; never call malloc
 * (everything comes from meta.c or pm_os_map). */
#include "pm_internal.h"
#include "pm_pprof.h"
#include "pm_stacktrace.h"

#include <errno.h>
#include <fcntl.h>

/* Every table entry starts with this header; tables grow by rehashing. */
typedef struct node {
    struct node *next;            /* hash chain */
    uint64_t hash;
} node_t;

typedef struct table {
    node_t **heads;               /* nheads chains, nheads a power of two */
    uint64_t nheads, count;
} table_t;

/* A call stack, interned: buckets of many sizes share it. */
typedef struct stack {
    node_t node;
    uint32_t depth;
    uintptr_t pcs[];              /* depth return addresses, leaf first */
} stack_t;

/* One (stack, requested size) pair: pprof's "bytes" label is exact. */
typedef struct bucket {
    node_t node;
    const stack_t *stack;
    uint64_t size;
    double alloc_objects, alloc_bytes, free_objects, free_bytes;
} bucket_t;

/* A live sampled block.  A small one also flags its page in the page map
 * (so its free takes the slow path) and is counted in its span, whose
 * pages are unflagged when the count returns to 0. */
typedef struct record {
    node_t node;                  /* node.next also links the free pool */
    uintptr_t key;                /* the block's address */
    bucket_t *bucket;
    double weight;
} record_t;

#define POOL_CHUNK 64
#define ARENA_CHUNK ((size_t)64 * 1024)
#define ARENA_NEED (sizeof(stack_t) + PM_STACK_MAX * sizeof(uintptr_t) + sizeof(bucket_t) + 32)
#define STACK_EXTRA 16            /* room for the allocator's own frames */
#define FIRST_HEADS 256

static struct {
    pm_lock_t lock;
    table_t stacks, buckets, records;
    uint64_t nlive;               /* live sampled blocks */
    record_t *free_records;
    char *arena, *arena_end;      /* bump memory for stacks and buckets */
    uint64_t start_ns;
} prof = {.lock = PM_LOCK_INIT};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

void pm_heapprof_init(void)
{
    prof.start_ns = pm_os_now_ns();
    pm_stacktrace_set_mode(pm_options.unwind_fp ? PM_UNWIND_FP : PM_UNWIND_DWARF);
}

uint64_t pm_heapprof_live_samples(void)
{
    return pm_relaxed_load((_Atomic uint64_t *)&prof.nlive);
}

/* ---- tables and pools, grown with the lock dropped ------------------- */

static void table_insert_locked(table_t *t, node_t *n)
{
    node_t **head = &t->heads[n->hash & (t->nheads - 1)];
    n->next = *head;
    *head = n;
    t->count++;
}

/* Called with the lock held and returned with it held; may drop it to map
 * a larger head array.  Returns 1 when it changed anything, 0 when the
 * table has room for two more entries, -1 when out of memory. */
static int table_room_locked(table_t *t)
{
    if (t->count + 2 <= t->nheads * 2) return 0;
    uint64_t want = t->nheads ? t->nheads * 4 : FIRST_HEADS;
    pm_unlock(&prof.lock);
    node_t **heads = pm_os_map(want * sizeof *heads, 0);
    pm_lock(&prof.lock);
    if (!heads) return -1;
    node_t **old = heads;
    uint64_t old_n = want;
    if (want > t->nheads) { /* else another thread grew it meanwhile */
        old = t->heads;
        old_n = t->nheads;
        t->heads = heads;
        t->nheads = want;
        t->count = 0;
        for (uint64_t i = 0; i < old_n; i++) {
            for (node_t *n = old[i], *next; n; n = next) {
                next = n->next;
                table_insert_locked(t, n);
            }
        }
    }
    if (old) {
        pm_unlock(&prof.lock);
        pm_os_unmap(old, old_n * sizeof *old);
        pm_lock(&prof.lock);
    }
    return 1;
}

static int pools_room_locked(void)
{
    if (prof.free_records && prof.free_records->node.next &&
        (size_t)(prof.arena_end - prof.arena) >= ARENA_NEED)
        return 0;
    pm_unlock(&prof.lock);
    record_t *r = pm_meta_alloc(POOL_CHUNK * sizeof *r);
    char *arena = pm_meta_alloc(ARENA_CHUNK);
    pm_lock(&prof.lock);
    if (!r || !arena) return -1;
    for (int i = 0; i < POOL_CHUNK; i++) {
        r[i].node.next = (node_t *)prof.free_records;
        prof.free_records = &r[i];
    }
    if ((size_t)(prof.arena_end - prof.arena) < ARENA_NEED) {
        prof.arena = arena;
        prof.arena_end = arena + ARENA_CHUNK;
    }
    return 1;
}

/* Takes prof_lock with room for one more sample (a stack, a bucket, a
 * and a record); returns -1, unlocked, when out of memory. */
static int lock_ready(void)
{
    pm_lock(&prof.lock);
    for (;;) {
        int r = pools_room_locked();
        if (r == 0) r = table_room_locked(&prof.stacks);
        if (r == 0) r = table_room_locked(&prof.buckets);
        if (r == 0) r = table_room_locked(&prof.records);
        if (r == 0) return 0;
        if (r < 0) {
            pm_unlock(&prof.lock);
            return -1;
        }
    }
}

static void *arena_take_locked(size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    void *p = prof.arena;
    prof.arena += bytes;
    return p;
}

static const stack_t *stack_for_locked(const uintptr_t *pcs, uint32_t depth)
{
    uint64_t h = mix(depth);
    for (uint32_t i = 0; i < depth; i++) h = mix(h ^ pcs[i]);
    for (node_t *n = prof.stacks.heads[h & (prof.stacks.nheads - 1)]; n; n = n->next) {
        stack_t *st = (stack_t *)n;
        if (n->hash != h || st->depth != depth) continue;
        uint32_t i = 0;
        while (i < depth && st->pcs[i] == pcs[i]) i++;
        if (i == depth) return st;
    }
    stack_t *st = arena_take_locked(sizeof *st + depth * sizeof(uintptr_t));
    st->node.hash = h;
    st->depth = depth;
    for (uint32_t i = 0; i < depth; i++) st->pcs[i] = pcs[i];
    table_insert_locked(&prof.stacks, &st->node);
    return st;
}

static bucket_t *bucket_for_locked(const uintptr_t *pcs, uint32_t depth, uint64_t size)
{
    const stack_t *st = stack_for_locked(pcs, depth);
    uint64_t h = mix(st->node.hash ^ mix(size));
    for (node_t *n = prof.buckets.heads[h & (prof.buckets.nheads - 1)]; n; n = n->next) {
        bucket_t *b = (bucket_t *)n;
        if (b->stack == st && b->size == size) return b;
    }
    bucket_t *b = arena_take_locked(sizeof *b);
    *b = (bucket_t){.node.hash = h, .stack = st, .size = size};
    table_insert_locked(&prof.buckets, &b->node);
    return b;
}

/* The link that points at the record with this key (or at NULL). */
static record_t **find_locked(uintptr_t key)
{
    node_t **link = &prof.records.heads[mix(key) & (prof.records.nheads - 1)];
    while (*link && ((record_t *)*link)->key != key) link = &(*link)->next;
    return (record_t **)link;
}

static record_t *insert_locked(uintptr_t key)
{
    record_t *r = prof.free_records;
    prof.free_records = (record_t *)r->node.next;
    *r = (record_t){.node.hash = mix(key), .key = key};
    table_insert_locked(&prof.records, &r->node);
    return r;
}

static void remove_locked(record_t **link)
{
    record_t *r = *link;
    *link = (record_t *)r->node.next;
    r->node.next = (node_t *)prof.free_records;
    prof.free_records = r;
    prof.records.count--;
}

static int in_allocator(uintptr_t pc)
{
    return pc > (uintptr_t)&pm_text_begin && pc <= (uintptr_t)&pm_text_end;
}

/* ---- sampling --------------------------------------------------------- */

void pm_alloc_sampled(pm_tcache_t *t, void *p, size_t size)
{
    if (t->in_profiler) return;
    t->in_profiler = 1;
    int saved_errno = errno;
    uintptr_t raw[PM_STACK_MAX + STACK_EXTRA];
    int n = pm_stacktrace_capture(raw, PM_STACK_MAX + STACK_EXTRA, 0);
    int skip = 0;
    while (skip < n && in_allocator(raw[skip])) skip++;
    uint32_t depth = (uint32_t)(n - skip > PM_STACK_MAX ? PM_STACK_MAX : n - skip);
    uint64_t rate = t->sample_rate;
    double weight = 1.0;
    if (rate > 1) {
        double prob = pm_sampler_prob((double)(size ? size : 1) / (double)rate);
        weight = prob > 0 ? 1.0 / prob : 1.0;
    }
    if (lock_ready() == 0) {
        bucket_t *b = bucket_for_locked(raw + skip, depth, size);
        b->alloc_objects += weight;
        b->alloc_bytes += weight * (double)size;
        record_t *r = insert_locked((uintptr_t)p);
        r->bucket = b;
        r->weight = weight;
        prof.nlive++;
        /* flag the block before it is handed out, so its free is seen */
        uintptr_t page = (uintptr_t)p >> PM_PAGE_SHIFT;
        pm_span_t *s = pm_pagemap_span(page);
        if (s->cls) {
            if (s->nsampled < 2) {
                s->sampled[s->sampled[0] ? 1 : 0] = p;
            } else {
                s->sampled_overflow = 1;
            }
            s->nsampled++;
            pm_pagemap_mark_sampled(page, 1);
        } else {
            s->sample = r;
        }
        pm_unlock(&prof.lock);
    }
    errno = saved_errno;
    t->in_profiler = 0;
}

void pm_free_sampled(pm_span_t *s, void *p)
{
    /* Most frees on a flagged page are of other blocks: tell them apart
     * without the lock.  The span's fields for p were written before p
     * was handed out, so they are visible here; a race with a sample of
     * another block only concerns that block. */
    if (s->cls) {
        void *volatile *sampled = (void *volatile *)s->sampled;
        if (!((volatile pm_span_t *)s)->sampled_overflow && p != sampled[0] && p != sampled[1])
            return;
    }
    pm_lock(&prof.lock);
    record_t **link = prof.records.nheads ? find_locked((uintptr_t)p) : NULL;
    if (link && *link) {
        record_t *r = *link;
        r->bucket->free_objects += r->weight;
        r->bucket->free_bytes += r->weight * (double)r->bucket->size;
        remove_locked(link);
        prof.nlive--;
        if (s->cls) {
            if (s->sampled[0] == p) s->sampled[0] = NULL;
            if (s->sampled[1] == p) s->sampled[1] = NULL;
            if (--s->nsampled == 0) {
                s->sampled_overflow = 0;
                pm_pagemap_set_class(s->page, s->npages, s->cls); /* unflag */
            }
        }
    }
    if (s->cls == 0) s->sample = NULL;
    pm_unlock(&prof.lock);
}

void pm_heapprof_lock_all(void) { pm_lock(&prof.lock); }

void pm_heapprof_unlock_all(int child)
{
    if (child) pm_lock_reset(&prof.lock);
    else pm_unlock(&prof.lock);
}

/* ---- snapshots and dumps ---------------------------------------------- */

static uint64_t round_est(double v) { return v <= 0 ? 0 : (uint64_t)(v + 0.5); }

typedef struct snapshot_mem {
    void *base;
    size_t bytes;
} snapshot_mem_t;

/* Copies the buckets into mmap'd memory (released by snapshot_free). */
static int snapshot_take(pm_prof_snapshot_t *snap, snapshot_mem_t *mem)
{
    *snap = (pm_prof_snapshot_t){0};
    pm_stats_collect(&snap->totals);
    snap->sample_rate = pm_sampler_rate();
    snap->time_ns = pm_os_now_ns();
    snap->duration_ns = snap->time_ns > prof.start_ns ? snap->time_ns - prof.start_ns : 0;
    for (;;) {
        pm_lock(&prof.lock);
        uint64_t want = prof.buckets.count + 16;
        pm_unlock(&prof.lock);
        size_t bytes = want * (sizeof(pm_prof_sample_t) + PM_STACK_MAX * sizeof(uintptr_t));
        char *base = pm_os_map(bytes, 0);
        if (!base) {
            errno = ENOMEM;
            return -1;
        }
        pm_prof_sample_t *samples = (pm_prof_sample_t *)base;
        uintptr_t *stacks = (uintptr_t *)(base + want * sizeof(pm_prof_sample_t));
        pm_lock(&prof.lock);
        if (prof.buckets.count > want) {
            pm_unlock(&prof.lock);
            pm_os_unmap(base, bytes);
            continue;
        }
        size_t n = 0;
        for (uint64_t h = 0; h < prof.buckets.nheads; h++) {
            for (node_t *node = prof.buckets.heads[h]; node; node = node->next) {
                const bucket_t *b = (const bucket_t *)node;
                uintptr_t *pcs = stacks + n * PM_STACK_MAX;
                for (uint32_t i = 0; i < b->stack->depth; i++) pcs[i] = b->stack->pcs[i];
                double live_objects = b->alloc_objects - b->free_objects;
                double live_bytes = b->alloc_bytes - b->free_bytes;
                samples[n++] = (pm_prof_sample_t){
                    .alloc_objects = round_est(b->alloc_objects),
                    .alloc_bytes = round_est(b->alloc_bytes),
                    .inuse_objects = round_est(live_objects),
                    .inuse_bytes = round_est(live_bytes),
                    .size = b->size,
                    .depth = b->stack->depth,
                    .pcs = pcs,
                };
            }
        }
        pm_unlock(&prof.lock);
        snap->samples = samples;
        snap->nsamples = n;
        mem->base = base;
        mem->bytes = bytes;
        return 0;
    }
}

PM_EXPORT int profmalloc_dump_fd(int fd, int format)
{
    if (format != PROFMALLOC_FORMAT_PPROF && format != PROFMALLOC_FORMAT_LEGACY) {
        errno = EINVAL;
        return -1;
    }
    pm_init();
    pm_prof_snapshot_t snap;
    snapshot_mem_t mem;
    if (snapshot_take(&snap, &mem) != 0) return -1;
    int rc = pm_pprof_write(fd, &snap, format);
    int saved = errno;
    pm_os_unmap(mem.base, mem.bytes);
    errno = saved;
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = pm_fmt_strlen(s), k = pm_fmt_strlen(suffix);
    return n >= k && pm_fmt_streq(s + n - k, suffix);
}

PM_EXPORT int profmalloc_dump(const char *path)
{
    if (!path || !*path) {
        errno = EINVAL;
        return -1;
    }
    char tmp[4096];
    pm_buf_t b;
    pm_buf_init(&b, tmp, sizeof tmp - 1, -1);
    pm_buf_str(&b, path);
    pm_buf_str(&b, ".tmp.");
    pm_buf_u64(&b, (uint64_t)pm_os_getpid());
    if (b.truncated) {
        errno = ENAMETOOLONG;
        return -1;
    }
    tmp[b.len] = 0;
    int fd = pm_os_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int format = ends_with(path, ".heap") ? PROFMALLOC_FORMAT_LEGACY : PROFMALLOC_FORMAT_PPROF;
    int rc = profmalloc_dump_fd(fd, format);
    if (rc == 0) rc = pm_os_fsync(fd);
    int saved = errno;
    if (pm_os_close(fd) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc == 0 && pm_os_rename(tmp, path) != 0) {
        rc = -1;
        saved = errno;
    }
    if (rc != 0) pm_os_unlink(tmp);
    errno = saved;
    return rc;
}

/* Expands %p (pid) and %% in PROFMALLOC_DUMP. */
void pm_heapprof_at_exit(void)
{
    const char *pattern = pm_options.dump_pattern;
    if (!pattern) return;
    char path[4096];
    pm_buf_t b;
    pm_buf_init(&b, path, sizeof path - 1, -1);
    for (const char *s = pattern; *s; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            pm_buf_u64(&b, (uint64_t)pm_os_getpid());
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            pm_buf_str(&b, "%");
            s++;
        } else {
            char c[2] = {*s, 0};
            pm_buf_str(&b, c);
        }
    }
    path[b.len] = 0;
    if (b.truncated || profmalloc_dump(path) != 0) pm_os_message("PROFMALLOC_DUMP: could not write the heap profile");
}

PM_EXPORT void profmalloc_set_sample_rate(size_t bytes)
{
    pm_init();
    pm_sampler_set_rate(bytes);
    /* the calling thread switches at once; others at their next slow path */
    pm_tcache_t *t = &pm_tls;
    if (t->state == PM_THREAD_ACTIVE) {
        t->sample_rate = bytes;
        t->countdown = pm_sampler_next(&t->rng, bytes);
    }
}

PM_EXPORT size_t profmalloc_get_sample_rate(void)
{
    pm_init();
    return (size_t)pm_sampler_rate();
}
