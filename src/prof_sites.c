/* prof_sites.c — the sampled allocation-site table: a record per live
 * sample (address → bucket, weight, size), a bucket per (call stack,
 * requested size) holding unbiased estimates (each sample adds the weight
 * prof_sampler.c gave it, its free subtracts it), and snapshots in mapped
 * memory for prof_dump.c (of the table, or of a view: a copy, or the table
 * minus one; running totals and copies serve leak hunting, pm_hunt.h).
 * A stack's sizes past its first EXACT_SIZES share
 * a bucket per power of two, so the table grows with stacks, not sizes.
 * Locks: prof.lock (stacks, buckets, their arena), one per record shard
 * (the records and sampled-block fields of the spans that hash to it, and
 * the records of blocks of a page or more whose addresses do) and
 * slabs.lock (the chunks records are carved from), never two at once;
 * frees never take prof.lock.  Must never: unwind, map memory or write a
 * file under a lock, call malloc, or reach up to stats, init or the dump
 * API, but through the leak hunt each sample is handed to with no lock
 * held (pm_hunt_sampled: its copies, triggers and timeline). */
#include "pm_internal.h"
#include "pm_hunt.h"
#include "pm_prof_types.h"
#include "pm_prof_unwind.h"
#include "pm_usdt.h"

#include <errno.h>

/* Every table entry starts with this header; tables grow by rehashing. */
typedef struct node {
    struct node *next;            /* hash chain */
    uint64_t hash;
} node_t;

typedef struct table {
    node_t **heads;               /* nheads chains, nheads a power of two */
    uint64_t nheads, count;
} table_t;

/* A call stack, interned: buckets of many sizes share it.  Once its exact
 * sizes are all taken, a size not among them finds its group's bucket by
 * two loads (exact_bits, groups), without hashing: a site of many sizes
 * would otherwise look each sample up twice. */
struct bucket;
typedef struct stack {
    node_t node;
    uint32_t depth;
    _Atomic uint32_t nsizes;      /* exact-size buckets: written under prof.lock */
    _Atomic uint64_t exact_bits;  /* size_bit() of each, set before nsizes counts it */
    struct bucket *_Atomic *groups; /* by a group key's k, once the stack has one */
    uintptr_t pcs[];              /* depth return addresses, leaf first */
} stack_t;

/* Weights are fixed point with FX_SHIFT fraction bits, so the counters can
 * be atomics (at rate 1 every weight is exactly 1 << FX_SHIFT). */
#define FX_SHIFT PM_WEIGHT_SHIFT
#define FX_ONE PM_WEIGHT_ONE

/* One (stack, requested size) pair: pprof's "bytes" label is exact; or
 * (stack, GROUP | k): the stack's sizes in [2^k, 2^(k+1)) past its first
 * EXACT_SIZES.  alloc_* >= free_* for each of objects and bytes, in fixed
 * point.  test_harden: test_site_table_bounded. */
#define EXACT_SIZES 16
#define GROUP ((uint64_t)1 << 63)
typedef struct bucket {
    node_t node;
    const stack_t *stack;
    uint64_t size;                /* the size, or GROUP | k */
    _Atomic uint64_t alloc_objects, alloc_bytes, free_objects, free_bytes;
} bucket_t;

/* A live sampled block.  A small one also flags its page in the page map
 * (so its free takes the slow path); in a class under a page it is counted
 * in its span, whose pages are unflagged when the count returns to 0, and
 * in a larger class it is hashed by its address (pm_sites_by_address). */
typedef struct record {
    node_t node;                  /* node.next also links the free pool */
    uintptr_t key;                /* the block's address */
    bucket_t *bucket;
    uint64_t weight;              /* fixed point */
    uint64_t size;                /* requested (a group's bucket has many) */
} record_t;

#define SHARDS 16
/* Records come from slabs of SLAB_BYTES, on their alignment, so a record
 * finds its slab by masking.  A slab whose records are all free goes back
 * to its chunk (its pages discarded), unless it is its shard's last one
 * with room: at rate 1 a fill until malloc failed left 166-173 MB of
 * records behind, and malloc(200 MiB) failed where glibc's and rate 0's
 * succeeded (test_harden: test_rate1_metadata_returned). */
#define SLAB_BYTES ((size_t)16 * 1024)
typedef struct slab {
    struct slab *next, *prev;     /* the shard's slabs with a free record */
    record_t *free;               /* its freed records */
    struct chunk *chunk;          /* where it was carved */
    uint32_t live, carved;        /* records in use, ever cut from the front */
    uint8_t listed;
} slab_t;
#define SLAB_FIRST ((sizeof(slab_t) + sizeof(record_t) - 1) / sizeof(record_t))
#define SLAB_RECORDS (SLAB_BYTES / sizeof(record_t) - SLAB_FIRST)
#define ARENA_CHUNK ((size_t)64 * 1024)
#define GROUP_KEYS 64
#define ARENA_NEED                                                                                                     \
    (sizeof(stack_t) + PM_STACK_MAX * sizeof(uintptr_t) + sizeof(bucket_t) + GROUP_KEYS * sizeof(bucket_t *) + 48)
#define STACK_EXTRA 16            /* room for the allocator's own frames */
#define FIRST_HEADS 8 /* 64 bytes: most of the 16 shards hold a few records */

/* Each shard holds its first SHARD_INLINE records itself, taken before
 * any slab's: a small heap has a few live samples, and a slab for each of
 * the shards they hash to faulted in a page of records apiece, 64 KB
 * (test_prof_sites.c: test_first_records_inline). */
#define SHARD_INLINE 4
typedef struct shard {
    pm_lock_t lock;
    table_t records;
    slab_t *slabs;                /* those with a free record */
    uint64_t nslabs;              /* all of them (stats: metadata) */
    record_t *inline_free;        /* the freed ones of inline_records */
    uint32_t inline_carved, inline_live;
    record_t inline_records[SHARD_INLINE];
} PM_ALIGNED(PM_CACHELINE) shard_t;

static struct {
    pm_lock_t lock;               /* the sites */
    table_t stacks, buckets;
    char *arena, *arena_end;      /* bump memory for stacks and buckets */
    uint64_t start_ns;
    shard_t shards[SHARDS];
} prof = {.lock = PM_LOCK_INIT};

/* Bytes mapped here for records and large head arrays (stats: metadata). */
static _Atomic uint64_t mapped_bytes;

uint64_t pm_sites_mapped_bytes(void) { return pm_relaxed_load(&mapped_bytes); }

/* Live records held in the shards themselves (read without locks). */
uint64_t pm_sites_inline_records(void)
{
    uint64_t n = 0;
    for (int i = 0; i < SHARDS; i++) n += ((volatile shard_t *)&prof.shards[i])->inline_live;
    return n;
}

uint64_t pm_sites_hashed_records(void)
{
    uint64_t n = 0;
    for (int i = 0; i < SHARDS; i++) {
        shard_t *sh = &prof.shards[i];
        pm_lock(&sh->lock);
        for (uint64_t h = 0; h < sh->records.nheads; h++)
            for (node_t *x = sh->records.heads[h]; x; x = x->next) n++;
        pm_unlock(&sh->lock);
    }
    return n;
}

static void *map_counted(size_t bytes, size_t align)
{
    void *p = pm_os_map(bytes, align);
    if (p) pm_relaxed_add(&mapped_bytes, bytes);
    return p;
}

static void unmap_counted(void *p, size_t bytes)
{
    if (pm_os_unmap(p, bytes) == 0) atomic_fetch_sub_explicit(&mapped_bytes, bytes, memory_order_relaxed);
}

/* ---- slabs, carved from chunks ---------------------------------------
 * Slabs come from chunks of 1 MiB, mapped as they are (no trim to an
 * alignment), which hold a header and the CHUNK_SLABS aligned slabs that
 * fit after it.  Mapped one at a time, each small mapping landed between
 * two growths of the page heap, whose free runs on either side could then
 * never merge.
 * A chunk whose slabs are all free is unmapped unless it is the last one
 * (test_prof_sites.c: test_records_from_chunks).
 * slabs.lock is a leaf: no other lock is taken under it. */
#define CHUNK_BYTES ((size_t)1 << 20)
#define CHUNK_SLABS (CHUNK_BYTES / SLAB_BYTES - 1)
#define CHUNK_ALL_FREE (((uint64_t)1 << CHUNK_SLABS) - 1)
typedef struct chunk {
    struct chunk *next, *prev;    /* chunks with a free slab */
    char *base;                   /* slab 0, on SLAB_BYTES */
    uint64_t free;                /* bit i: slab i is free */
    uint8_t listed;
} chunk_t;

static struct {
    pm_lock_t lock;
    chunk_t *avail;
    uint64_t nchunks;
} slabs = {.lock = PM_LOCK_INIT};

static void chunk_link_locked(chunk_t *c)
{
    c->prev = NULL;
    c->next = slabs.avail;
    if (slabs.avail) slabs.avail->prev = c;
    slabs.avail = c;
    c->listed = 1;
}

static void chunk_unlink_locked(chunk_t *c)
{
    if (c->prev) c->prev->next = c->next;
    else slabs.avail = c->next;
    if (c->next) c->next->prev = c->prev;
    c->listed = 0;
}

/* A slab, uninitialised, or NULL when no chunk can be mapped. */
static slab_t *slab_get(void)
{
    for (;;) {
        pm_lock(&slabs.lock);
        chunk_t *c = slabs.avail;
        if (c) {
            uint64_t free = c->free;
            unsigned i = (unsigned)__builtin_ctzll(free);
            __atomic_store_n(&c->free, free & (free - 1), __ATOMIC_RELAXED);
            if (!c->free) chunk_unlink_locked(c);
            pm_unlock(&slabs.lock);
            slab_t *sl = (slab_t *)(c->base + i * SLAB_BYTES);
            sl->chunk = c;
            return sl;
        }
        pm_unlock(&slabs.lock);
        c = map_counted(CHUNK_BYTES, 0);
        if (!c) return NULL;
        c->base = (char *)(((uintptr_t)(c + 1) + SLAB_BYTES - 1) & ~(uintptr_t)(SLAB_BYTES - 1));
        c->free = CHUNK_ALL_FREE;
        pm_lock(&slabs.lock);
        chunk_link_locked(c);
        __atomic_store_n(&slabs.nchunks, slabs.nchunks + 1, __ATOMIC_RELAXED);
        pm_unlock(&slabs.lock);
    }
}

/* Whether sl is the only slab taken from its chunk, and other chunks
 * exist: a shard keeps its last slab with room, but not one that would
 * keep a chunk mapped for nothing (read without slabs.lock: a stale
 * answer only keeps or gives back one slab more). */
static int slab_pins_chunk(const slab_t *sl)
{
    const chunk_t *c = sl->chunk;
    uint64_t bit = (uint64_t)1 << (((const char *)sl - c->base) / SLAB_BYTES);
    return __atomic_load_n(&slabs.nchunks, __ATOMIC_RELAXED) > 1 &&
           (__atomic_load_n(&c->free, __ATOMIC_RELAXED) | bit) == CHUNK_ALL_FREE;
}

/* Gives back a slab without live records; called without any lock. */
static void slab_put(slab_t *sl)
{
    chunk_t *c = sl->chunk, *gone = NULL;
    unsigned i = (unsigned)(((char *)sl - c->base) / SLAB_BYTES);
    pm_os_discard(sl, SLAB_BYTES); /* before another thread can take it */
    pm_lock(&slabs.lock);
    __atomic_store_n(&c->free, c->free | (uint64_t)1 << i, __ATOMIC_RELAXED);
    if (!c->listed) chunk_link_locked(c);
    if (c->free == CHUNK_ALL_FREE && slabs.nchunks > 1) {
        chunk_unlink_locked(c);
        __atomic_store_n(&slabs.nchunks, slabs.nchunks - 1, __ATOMIC_RELAXED);
        gone = c;
    }
    pm_unlock(&slabs.lock);
    if (gone) unmap_counted(gone, CHUNK_BYTES);
}

static inline shard_t *shard_of(const pm_span_t *s) { return &prof.shards[pm_mix64(s->page) >> 60]; }

/* A class of a page or more (pm_sites_by_address): the record goes in the
 * table of the shard its address picks, and neither the sample nor the
 * free reads the span's sampled-block fields, whose line and page-map
 * entry a sample of a large heap's block missed in cache. */
static inline shard_t *shard_at(const void *p) { return &prof.shards[pm_mix64((uintptr_t)p) >> 60]; }

void pm_sites_init(void)
{
    prof.start_ns = pm_os_now_ns();
    pm_unwind_set_mode(pm_options.unwind_fp ? PM_UNWIND_FP : PM_UNWIND_DWARF);
    /* return addresses into the allocator lie in (begin, end] */
    pm_unwind_set_own_code((uintptr_t)&pm_text_begin + 1, (uintptr_t)&pm_text_end + 1);
}

/* Live sampled blocks: the records of every shard (read without locks). */
uint64_t pm_sites_live_samples(void)
{
    uint64_t n = 0;
    for (int i = 0; i < SHARDS; i++) n += ((volatile shard_t *)&prof.shards[i])->records.count;
    return n;
}

/* Was any allocation sampled since start?  Its site stays in the table
 * after the block is freed, so an empty table means none was. */
int pm_sites_sampled_any(void) { return ((volatile table_t *)&prof.buckets)->count != 0; }

/* ---- tables and pools, grown with the lock dropped ------------------- */

/* Chains only ever gain nodes at their head, published with a release
 * store, so the bucket table can be searched without its lock. */
static void table_link(table_t *t, node_t *n)
{
    node_t **head = &t->heads[n->hash & (t->nheads - 1)];
    __atomic_store_n(&n->next, *head, __ATOMIC_RELAXED);
    __atomic_store_n(head, n, __ATOMIC_RELEASE);
}

static void table_insert(table_t *t, node_t *n)
{
    table_link(t, n);
    t->count++;
}

/* Lock-free readers of the bucket table see it through a view that is
 * never changed once published; a grown table gets a new view, and the
 * old head arrays are kept (they add up to a third of the live one). */
typedef struct view {
    uint64_t n;
    node_t **heads;
} view_t;
static view_t bucket_views[64];
static view_t *_Atomic bucket_view;
static unsigned bucket_growths;

/* Head arrays: small ones from the metadata pool (18 tables would waste a
 * page each if mapped; the outgrown ones stay, a third of the live size at
 * most), large ones mapped and unmapped when outgrown. */
#define SMALL_HEADS ((size_t)16 * 1024)

static node_t **heads_alloc(uint64_t n)
{
    size_t bytes = n * sizeof(node_t *);
    return bytes <= SMALL_HEADS ? pm_meta_alloc(bytes) : map_counted(bytes, 0);
}

/* Called with `lock` held and returned with it held; may drop it to map a
 * larger head array.  Returns 1 when it changed anything, 0 when the table
 * has room for two more entries, -1 when out of memory. */
static int table_room(pm_lock_t *lock, table_t *t)
{
    if (t->count + 2 <= t->nheads * 2) return 0;
    uint64_t want = t->nheads ? t->nheads * 4 : FIRST_HEADS;
    pm_unlock(lock);
    node_t **heads = heads_alloc(want);
    pm_lock(lock);
    if (!heads) return -1;
    node_t **old = heads;
    uint64_t old_n = want;
    if (want > t->nheads) { /* else another thread grew it meanwhile */
        old = t->heads;
        old_n = t->nheads;
        t->heads = heads;
        t->nheads = want;
        /* count stays as it is: pm_sites_live_samples reads it without
         * the lock (zeroed and counted up again, the stats' live samples
         * fell by up to a shard's records while a table grew: a TSan run) */
        for (uint64_t i = 0; i < old_n; i++) {
            for (node_t *n = old[i], *next; n; n = next) {
                next = n->next;
                table_link(t, n);
            }
        }
    }
    if (t == &prof.buckets && old != heads) {
        view_t *v = &bucket_views[bucket_growths++ & 63];
        v->n = t->nheads;
        v->heads = t->heads;
        atomic_store_explicit(&bucket_view, v, memory_order_release);
        old = NULL; /* a reader may still be walking it */
    }
    if (old && old_n * sizeof *old > SMALL_HEADS) {
        pm_unlock(lock);
        unmap_counted(old, old_n * sizeof *old);
        pm_lock(lock);
    }
    return 1;
}

/* Takes prof.lock with room for a new stack and bucket. */
static int lock_sites(void)
{
    pm_lock(&prof.lock);
    for (;;) {
        int r = 0;
        if ((size_t)(prof.arena_end - prof.arena) < ARENA_NEED) {
            pm_unlock(&prof.lock);
            char *arena = pm_meta_alloc(ARENA_CHUNK);
            pm_lock(&prof.lock);
            if (!arena) r = -1;
            else if ((size_t)(prof.arena_end - prof.arena) < ARENA_NEED) {
                prof.arena = arena;
                prof.arena_end = arena + ARENA_CHUNK;
            }
            if (r == 0) r = 1;
        }
        if (r == 0) r = table_room(&prof.lock, &prof.stacks);
        if (r == 0) r = table_room(&prof.lock, &prof.buckets);
        if (r == 0) return 0;
        if (r < 0) {
            pm_unlock(&prof.lock);
            return -1;
        }
    }
}

/* Records are cut from the slab's front as they are needed, so a new
 * slab costs no loop and its untouched pages stay unfaulted. */
static slab_t *slab_init(slab_t *sl)
{
    sl->free = NULL;
    sl->live = 0;
    sl->carved = 0;
    return sl;
}

static void slab_link_locked(shard_t *sh, slab_t *sl)
{
    sl->prev = NULL;
    sl->next = sh->slabs;
    if (sh->slabs) sh->slabs->prev = sl;
    sh->slabs = sl;
    sl->listed = 1;
    if (sl->live == 0) sh->nslabs++;
}

static void slab_unlink_locked(shard_t *sh, slab_t *sl)
{
    if (sl->prev) sl->prev->next = sl->next;
    else sh->slabs = sl->next;
    if (sl->next) sl->next->prev = sl->prev;
    sl->listed = 0;
}

static int inline_room(const shard_t *sh) { return sh->inline_free || sh->inline_carved < SHARD_INLINE; }

static int is_inline(const shard_t *sh, const record_t *r)
{
    return r >= sh->inline_records && r < sh->inline_records + SHARD_INLINE;
}

static record_t *record_take_locked(shard_t *sh)
{
    if (inline_room(sh)) {
        record_t *r = sh->inline_free;
        if (r) sh->inline_free = (record_t *)r->node.next;
        else r = &sh->inline_records[sh->inline_carved++];
        sh->inline_live++;
        return r;
    }
    slab_t *sl = sh->slabs;
    record_t *r = sl->free;
    if (r) sl->free = (record_t *)r->node.next;
    else r = (record_t *)sl + SLAB_FIRST + sl->carved++;
    sl->live++;
    if (!sl->free && sl->carved == SLAB_RECORDS) slab_unlink_locked(sh, sl);
    return r;
}

/* Gives r back to its slab; returns the slab when it is now empty and not
 * the shard's last with room, for the caller to put after unlocking. */
static slab_t *record_put_locked(shard_t *sh, record_t *r)
{
    if (is_inline(sh, r)) {
        r->node.next = (node_t *)sh->inline_free;
        sh->inline_free = r;
        sh->inline_live--;
        return NULL;
    }
    slab_t *sl = (slab_t *)((uintptr_t)r & ~(uintptr_t)(SLAB_BYTES - 1));
    r->node.next = (node_t *)sl->free;
    sl->free = r;
    if (!sl->listed) slab_link_locked(sh, sl);
    if (--sl->live) return NULL;
    if (sh->slabs == sl && !sl->next && !slab_pins_chunk(sl)) return NULL; /* kept for the next sample */
    slab_unlink_locked(sh, sl);
    sh->nslabs--;
    return sl;
}

/* Takes a shard's lock with room for one more record. */
static int lock_shard(shard_t *sh)
{
    pm_lock(&sh->lock);
    for (;;) {
        int r = 0;
        if (!sh->slabs && !inline_room(sh)) {
            pm_unlock(&sh->lock);
            slab_t *sl = slab_get();
            pm_lock(&sh->lock);
            if (!sl) r = -1;
            else slab_link_locked(sh, slab_init(sl));
            if (r == 0) r = 1;
        }
        if (r == 0 && sh->records.count + 2 > sh->records.nheads * 2) r = table_room(&sh->lock, &sh->records);
        if (r == 0) return 0;
        if (r < 0) {
            pm_unlock(&sh->lock);
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

static uint64_t stack_hash(const uintptr_t *pcs, uint32_t depth)
{
    /* a multiply and a fold per PC, one full mix at the end: the table
     * compares whole stacks, the hash only spreads them */
    uint64_t h = depth;
    for (uint32_t i = 0; i < depth; i++) {
        h = (h ^ pcs[i]) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 32;
    }
    return pm_mix64(h);
}

/* Is b the bucket of (stack, size)?  The stack is st when known (stacks
 * are interned: one struct per stack), else pcs[0 .. depth). */
static int same_site(const bucket_t *b, uint64_t bh, const stack_t *st, const uintptr_t *pcs, uint32_t depth,
                     uint64_t size)
{
    if (!b || b->node.hash != bh || b->size != size) return 0;
    if (st) return b->stack == st;
    if (b->stack->depth != depth) return 0;
    for (uint32_t i = 0; i < depth; i++)
        if (b->stack->pcs[i] != pcs[i]) return 0;
    return 1;
}

/* The stack of the last sample (any thread's): a loop's samples share
 * one, found here without hashing it.  Stacks are never freed, and only
 * their atomic fields change. */
static const stack_t *_Atomic last_stack;

static const stack_t *stack_seen(const uintptr_t *pcs, uint32_t depth)
{
    const stack_t *st = atomic_load_explicit(&last_stack, memory_order_acquire);
    if (!st || st->depth != depth) return NULL;
    for (uint32_t i = 0; i < depth; i++)
        if (st->pcs[i] != pcs[i]) return NULL;
    return st;
}

/* A size's key in its stack's group buckets. */
static uint64_t group_key(uint64_t size)
{
    return GROUP | (uint64_t)(size ? 63 - __builtin_clzll(size) : 0);
}

/* A size's bit in its stack's exact_bits. */
static uint64_t size_bit(uint64_t size) { return (uint64_t)1 << (pm_mix64(size) & 63); }

/* The group bucket of a size that cannot be one of st's exact sizes, or
 * NULL when that is not known or the bucket is not made yet. */
static bucket_t *group_seen(const stack_t *st, uint64_t size)
{
    if (atomic_load_explicit(&st->nsizes, memory_order_acquire) < EXACT_SIZES ||
        (atomic_load_explicit(&st->exact_bits, memory_order_relaxed) & size_bit(size)))
        return NULL;
    bucket_t *_Atomic *groups = __atomic_load_n(&st->groups, __ATOMIC_ACQUIRE);
    return groups ? atomic_load_explicit(&groups[group_key(size) & (GROUP_KEYS - 1)], memory_order_acquire) : NULL;
}

/* A bucket with this key found without prof.lock: the thread's recent
 * buckets, then the published view of the table. */
static bucket_t *bucket_seen(pm_tcache_t *t, uint64_t bh, const stack_t *st, const uintptr_t *pcs, uint32_t depth,
                             uint64_t key)
{
    bucket_t **cached = (bucket_t **)&t->prof_sites[bh & 7];
    if (same_site(*cached, bh, st, pcs, depth, key)) return *cached;
    const view_t *v = atomic_load_explicit(&bucket_view, memory_order_acquire);
    if (v) {
        node_t *n = __atomic_load_n(&v->heads[bh & (v->n - 1)], __ATOMIC_ACQUIRE);
        for (int steps = 0; n && steps < 64; steps++, n = __atomic_load_n(&n->next, __ATOMIC_ACQUIRE))
            if (same_site((bucket_t *)n, bh, st, pcs, depth, key)) return *cached = (bucket_t *)n;
    }
    return NULL;
}

static bucket_t *find_bucket_locked(const stack_t *st, uint64_t bh, uint64_t key)
{
    for (node_t *n = prof.buckets.heads[bh & (prof.buckets.nheads - 1)]; n; n = n->next)
        if (((bucket_t *)n)->stack == st && ((bucket_t *)n)->size == key) return (bucket_t *)n;
    return NULL;
}

static _Atomic uint64_t bucket_lookups;

uint64_t pm_sites_bucket_lookups(void) { return pm_relaxed_load(&bucket_lookups); }

/* The bucket of (stack, size), or of its size's group once the stack has
 * EXACT_SIZES exact ones.  A thread remembers the buckets it used last
 * (buckets are never freed), so a hot site costs no lock; hashes are
 * computed before the lock. */
static bucket_t *bucket_for(pm_tcache_t *t, const uintptr_t *pcs, uint32_t depth, uint64_t size,
                            const stack_t *known)
{
    pm_relaxed_store(&bucket_lookups, pm_relaxed_load(&bucket_lookups) + 1);
    const stack_t *seen = known ? known : stack_seen(pcs, depth);
    if (seen) {
        bucket_t *g = group_seen(seen, size);
        if (g) return g;
    }
    uint64_t sh = seen ? seen->node.hash : stack_hash(pcs, depth);
    /* sizes and group keys differ, and stay apart through an odd multiplier */
    uint64_t bh = pm_mix64(sh ^ size * 0xff51afd7ed558ccdull);
    uint64_t gkey = group_key(size), gh = pm_mix64(sh ^ gkey * 0xff51afd7ed558ccdull);
    bucket_t *b = bucket_seen(t, bh, seen, pcs, depth, size);
    if (!b) b = bucket_seen(t, gh, seen, pcs, depth, gkey);
    if (b) {
        if (!seen) atomic_store_explicit(&last_stack, b->stack, memory_order_release);
        return b;
    }
    if (lock_sites() != 0) return NULL;
    stack_t *st = NULL;
    for (node_t *n = prof.stacks.heads[sh & (prof.stacks.nheads - 1)]; n && !st; n = n->next) {
        stack_t *cand = (stack_t *)n;
        if (n->hash != sh || cand->depth != depth) continue;
        uint32_t i = 0;
        while (i < depth && cand->pcs[i] == pcs[i]) i++;
        if (i == depth) st = cand;
    }
    if (!st) {
        st = arena_take_locked(sizeof *st + depth * sizeof(uintptr_t));
        st->node.hash = sh;
        st->depth = depth;
        atomic_init(&st->nsizes, 0);
        atomic_init(&st->exact_bits, 0);
        st->groups = NULL;
        for (uint32_t i = 0; i < depth; i++) st->pcs[i] = pcs[i];
        table_insert(&prof.stacks, &st->node);
    }
    b = find_bucket_locked(st, bh, size);
    uint32_t nsizes = atomic_load_explicit(&st->nsizes, memory_order_relaxed);
    if (!b && nsizes >= EXACT_SIZES) {
        bh = gh;
        size = gkey;
        b = find_bucket_locked(st, bh, size);
    }
    if (!b) {
        b = arena_take_locked(sizeof *b);
        *b = (bucket_t){.node.hash = bh, .stack = st, .size = size};
        table_insert(&prof.buckets, &b->node);
        if (!(size & GROUP)) {
            atomic_fetch_or_explicit(&st->exact_bits, size_bit(size), memory_order_relaxed);
            atomic_store_explicit(&st->nsizes, nsizes + 1, memory_order_release);
        } else {
            if (!st->groups) {
                bucket_t *_Atomic *groups = arena_take_locked(GROUP_KEYS * sizeof *groups);
                for (int k = 0; k < GROUP_KEYS; k++) atomic_init(&groups[k], NULL);
                __atomic_store_n(&st->groups, groups, __ATOMIC_RELEASE);
            }
            atomic_store_explicit(&st->groups[size & (GROUP_KEYS - 1)], b, memory_order_release);
        }
    }
    pm_unlock(&prof.lock);
    t->prof_sites[bh & 7] = b;
    atomic_store_explicit(&last_stack, st, memory_order_release);
    return b;
}

/* The link that points at the record with this key (or at NULL). */
static record_t **find_locked(shard_t *sh, uintptr_t key)
{
    if (!sh->records.nheads) return NULL;
    node_t **link = &sh->records.heads[pm_mix64(key) & (sh->records.nheads - 1)];
    while (*link && ((record_t *)*link)->key != key) link = &(*link)->next;
    return (record_t **)link;
}

static int in_allocator(uintptr_t pc)
{
    return pc > (uintptr_t)&pm_text_begin && pc <= (uintptr_t)&pm_text_end;
}

/* ---- sampling --------------------------------------------------------- */

/* A span of a class under a page counts its live samples past sampled[]
 * (those in the shard's hash table) by the block's index in the span
 * modulo 32: its address over the class size's power of two is the index
 * times an odd number, so the count is exact in a span of up to 32
 * blocks.  A free of a block whose count is 0 and that is not in
 * sampled[] is no sample, told without the lock.  A boolean "more than
 * two" sent every free of such a span's flagged pages to the shard's lock
 * and hash table for as long as one of them lived
 * (test_prof_sites.c: test_hashed_counts).  Written under the span's
 * shard lock; a count at 15 stays until the span's samples are gone. */
static inline unsigned hashed_index(const pm_span_t *s, const void *p)
{
    return ((uintptr_t)p >> __builtin_ctz(pm_class_size[s->cls])) & 31;
}

static inline unsigned hashed_count(const pm_span_t *s, unsigned i)
{
    return ((unsigned)__atomic_load_n(&s->hashed[i >> 1], __ATOMIC_RELAXED) >> (4 * (i & 1))) & 15;
}

static void hashed_add(pm_span_t *s, const void *p, int d)
{
    unsigned i = hashed_index(s, p), c = hashed_count(s, i);
    if (c == 15) return;
    c = (unsigned)((int)c + d);
    unsigned shift = 4 * (i & 1), byte = s->hashed[i >> 1];
    __atomic_store_n(&s->hashed[i >> 1], (uint8_t)((byte & ~(15u << shift)) | (c << shift)), __ATOMIC_RELAXED);
}

static _Atomic uint64_t locked_misses;

uint64_t pm_sites_locked_misses(void) { return pm_relaxed_load(&locked_misses); }

/* Every sampled allocation and free with its weight, fixed point: alloc
 * objects, alloc bytes, free objects, free bytes; and the lowest live
 * bytes since pm_sites_live_low last asked (the timeline's minimum). */
static _Atomic uint64_t totals[4], live_low = UINT64_MAX;

void pm_sites_totals(pm_hunt_totals_t *out)
{
    out->alloc_objects = pm_relaxed_load(&totals[0]);
    out->alloc_bytes = pm_relaxed_load(&totals[1]);
    out->free_objects = pm_relaxed_load(&totals[2]);
    out->free_bytes = pm_relaxed_load(&totals[3]);
}

uint64_t pm_sites_live_low(uint64_t restart)
{
    return atomic_exchange_explicit(&live_low, restart, memory_order_relaxed);
}

void pm_sites_add(pm_tcache_t *t, void *p, size_t size, uint64_t weight, uintptr_t entry, unsigned cls)
{
    if (t->in_profiler) return;
    t->in_profiler = 1;
    int saved_errno = errno;
    uintptr_t raw[PM_STACK_MAX + STACK_EXTRA];
    pm_unwind_memo_t *memo = pm_tcache_memo(t);
    int n = pm_unwind_capture_from(entry, raw, PM_STACK_MAX + STACK_EXTRA, memo);
    int skip = 0;
    while (skip < n && in_allocator(raw[skip])) skip++;
    uint32_t depth = (uint32_t)(n - skip > PM_STACK_MAX ? PM_STACK_MAX : n - skip);
    /* a replayed walk gives the pcs it gave before, so the stack they were
     * interned as (test_prof_sites.c: test_memo_keeps_site) */
    pm_unwind_memo_way_t *way = memo && memo->last >= 0 ? &memo->way[memo->last] : NULL;
    /* and a loop allocating one size finds its exact bucket there: an
     * exact bucket, once made, is the one bucket_for gives for its size
     * (test_prof_sites.c: test_memo_keeps_bucket) */
    bucket_t *b = way && way->site ? (bucket_t *)way->bucket : NULL;
    if (!b || b->size != size) {
        b = bucket_for(t, raw + skip, depth, size, way ? way->site : NULL);
        if (b && way) {
            way->site = b->stack;
            way->bucket = b;
        }
    }
    uintptr_t page = (uintptr_t)p >> PM_PAGE_SHIFT;
    int alone = pm_sites_by_address(cls);
    pm_span_t *s = alone ? NULL : pm_pagemap_span(page);
    shard_t *sh = alone ? shard_at(p) : shard_of(s);
    uint64_t alloc_fx = 0;
    if (b && lock_shard(sh) == 0) {
        pm_relaxed_add(&b->alloc_objects, weight);
        pm_relaxed_add(&b->alloc_bytes, weight * size);
        pm_relaxed_add(&totals[0], weight);
        alloc_fx = pm_relaxed_add(&totals[1], weight * size) + weight * size;
        PM_USDT3(sample, p, size, depth);
        record_t *r = record_take_locked(sh);
        *r = (record_t){.node.hash = pm_mix64((uintptr_t)p), .key = (uintptr_t)p, .bucket = b, .weight = weight,
                        .size = size};
        /* The span holds the record where it can, so its free finds it
         * with no hash-table line to miss: a large block's, and a span's
         * first two live samples in a class under a page; only more go to
         * the hash table (test_prof_sites.c: test_large_sample_off_table,
         * test_span_holds_records).  The block is flagged before it is
         * handed out, so its free is seen. */
        sh->records.count++;
        if (alone) {
            table_link(&sh->records, &r->node);
            pm_pagemap_mark_sampled(page, 1);
        } else if (s->cls) {
            if (s->nsampled < 2) {
                int i = s->sampled[0] ? 1 : 0;
                s->sampled[i] = p;
                s->sampled_rec[i] = r;
            } else {
                s->sampled_overflow = 1;
                hashed_add(s, p, 1);
                table_link(&sh->records, &r->node);
            }
            s->nsampled++;
            pm_pagemap_mark_sampled(page, 1);
        } else {
            s->sample = r;
        }
        pm_unlock(&sh->lock);
    }
    /* the peak copy, dump triggers and timeline, with the totals this
     * sample left (no lock held) */
    pm_hunt_sampled(alloc_fx ? alloc_fx : pm_relaxed_load(&totals[1]), pm_relaxed_load(&totals[3]));
    errno = saved_errno;
    t->in_profiler = 0;
}

/* A shard's record table, mostly empty after its samples went, gets heads
 * for four times its records (mapped without the lock; the old ones are
 * unmapped after it). */
static void shrink_records(shard_t *sh)
{
    pm_lock(&sh->lock);
    uint64_t want = FIRST_HEADS;
    while (want < sh->records.count * 4) want *= 2;
    int still = want * 4 <= sh->records.nheads;
    pm_unlock(&sh->lock);
    if (!still) return;
    node_t **heads = heads_alloc(want);
    if (!heads) return;
    pm_lock(&sh->lock);
    node_t **old = heads;
    uint64_t old_n = want;
    if (want * 4 <= sh->records.nheads && sh->records.count * 2 <= want) {
        old = sh->records.heads;
        old_n = sh->records.nheads;
        sh->records.heads = heads;
        sh->records.nheads = want;
        for (uint64_t i = 0; i < old_n; i++)
            for (node_t *n = old[i], *next; n; n = next) {
                next = n->next;
                table_link(&sh->records, n);
            }
    }
    pm_unlock(&sh->lock);
    if (old_n * sizeof *old > SMALL_HEADS) unmap_counted(old, old_n * sizeof *old);
}

/* p's record out, if p has one: s is p's span, or NULL when alone (p's
 * class is one of a page or more). */
static void remove_record(pm_span_t *s, int alone, void *p)
{
    shard_t *sh = alone ? shard_at(p) : shard_of(s);
    slab_t *empty = NULL;
    pm_lock(&sh->lock);
    record_t *r = NULL, **link = NULL;
    if (alone) {
        if ((link = find_locked(sh, (uintptr_t)p)) != NULL) r = *link;
    } else if (!s->cls) r = s->sample && ((record_t *)s->sample)->key == (uintptr_t)p ? s->sample : NULL;
    else if (s->sampled[0] == p) r = s->sampled_rec[0];
    else if (s->sampled[1] == p) r = s->sampled_rec[1];
    else if ((link = find_locked(sh, (uintptr_t)p)) != NULL) r = *link;
    if (r) {
        pm_relaxed_add(&r->bucket->free_objects, r->weight);
        pm_relaxed_add(&r->bucket->free_bytes, r->weight * r->size);
        pm_relaxed_add(&totals[2], r->weight);
        uint64_t fb = pm_relaxed_add(&totals[3], r->weight * r->size) + r->weight * r->size;
        uint64_t ab = pm_relaxed_load(&totals[1]), live = ab > fb ? (ab - fb) >> FX_SHIFT : 0;
        uint64_t low = pm_relaxed_load(&live_low);
        while (live < low && !atomic_compare_exchange_weak(&live_low, &low, live)) {}
        if (link) *link = (record_t *)r->node.next;
        empty = record_put_locked(sh, r);
        sh->records.count--;
        if (alone) {
            pm_pagemap_mark_sampled((uintptr_t)p >> PM_PAGE_SHIFT, 0);
        } else if (s->cls) {
            if (link) hashed_add(s, p, -1);
            if (s->sampled[0] == p) s->sampled[0] = NULL;
            if (s->sampled[1] == p) s->sampled[1] = NULL;
            /* unflag: the bits only, so pages the carve has not reached
             * keep their class word at 0 (central.c).  Without an overflow
             * the span's live samples are the ones in sampled[], so p's
             * page alone goes, unless the other one starts on it; after
             * one, every page at the last (test_prof_sites.c:
             * test_sampled_page_flags) */
            uintptr_t other = (uintptr_t)s->sampled[0] | (uintptr_t)s->sampled[1];
            if (--s->nsampled == 0 && s->sampled_overflow) {
                s->sampled_overflow = 0;
                for (size_t i = 0; i < sizeof s->hashed; i++)
                    __atomic_store_n(&s->hashed[i], 0, __ATOMIC_RELAXED);
                for (size_t i = 0; i < s->npages; i++) pm_pagemap_mark_sampled(s->page + i, 0);
            } else if (!s->sampled_overflow && (other >> PM_PAGE_SHIFT) != ((uintptr_t)p >> PM_PAGE_SHIFT)) {
                pm_pagemap_mark_sampled((uintptr_t)p >> PM_PAGE_SHIFT, 0);
            }
        }
    } else if (!alone && s->cls) {
        pm_relaxed_add(&locked_misses, 1);
    }
    if (!alone && s->cls == 0) s->sample = NULL;
    int shrink = sh->records.nheads > 4096 && sh->records.count * 16 < sh->records.nheads;
    pm_unlock(&sh->lock);
    if (empty) slab_put(empty);
    if (shrink) shrink_records(sh);
}

void pm_sites_remove(pm_span_t *s, void *p)
{
    int alone = pm_sites_by_address(s->cls);
    /* most frees on a flagged page are of other blocks: told apart here
     * (see hashed_index), before remove_record's frame is set up; p's own
     * fields were written before p was handed out, and a race with another
     * block's sample can only raise a count */
    if (!alone && s->cls) {
        void *volatile *sampled = (void *volatile *)s->sampled;
        if (!hashed_count(s, hashed_index(s, p)) && p != sampled[0] && p != sampled[1]) return;
    }
    remove_record(s, alone, p);
}

void pm_sites_remove_by_address(void *p) { remove_record(NULL, 1, p); }

void pm_sites_lock_all(void)
{
    pm_lock(&prof.lock);
    for (int i = 0; i < SHARDS; i++) pm_lock(&prof.shards[i].lock);
    pm_lock(&slabs.lock);
}

void pm_sites_unlock_all(int child)
{
    if (child) pm_lock_reset(&slabs.lock);
    else pm_unlock(&slabs.lock);
    for (int i = SHARDS; i-- > 0;) {
        if (child) pm_lock_reset(&prof.shards[i].lock);
        else pm_unlock(&prof.shards[i].lock);
    }
    if (child) pm_lock_reset(&prof.lock);
    else pm_unlock(&prof.lock);
}

/* ---- snapshots ---------------------------------------------------------- */

/* Fixed point to the nearest whole number; a difference that went
 * negative (a free counted before the sample it matches was) reads 0. */
static uint64_t round_fx(uint64_t total, uint64_t freed)
{
    return total > freed ? (total - freed + FX_ONE / 2) >> FX_SHIFT : 0;
}

/* ---- the site table seen from outside (pm_hunt.h) --------------------- */

size_t pm_sites_count(void)
{
    pm_lock(&prof.lock);
    size_t n = prof.buckets.count;
    pm_unlock(&prof.lock);
    return n;
}

size_t pm_sites_copy(pm_site_count_t *out, size_t cap)
{
    pm_lock(&prof.lock);
    size_t n = prof.buckets.count, i = 0;
    for (uint64_t h = 0; n <= cap && h < prof.buckets.nheads; h++)
        for (node_t *node = prof.buckets.heads[h]; node; node = node->next) {
            const bucket_t *b = (const bucket_t *)node;
            out[i++] = (pm_site_count_t){b, pm_relaxed_load(&b->alloc_objects), pm_relaxed_load(&b->alloc_bytes),
                                         pm_relaxed_load(&b->free_objects), pm_relaxed_load(&b->free_bytes)};
        }
    pm_unlock(&prof.lock);
    return n;
}

void pm_sites_info(const void *site, const uintptr_t **pcs, uint32_t *depth, uint64_t *size, const void **stack)
{
    const bucket_t *b = site;
    *pcs = b->stack->pcs;
    *depth = b->stack->depth;
    *size = b->size & GROUP ? 0 : b->size; /* 0: a group of sizes */
    if (stack) *stack = b->stack;
}

/* The copy's entry for site b (view->base is sorted by site), or NULL. */
static const pm_site_count_t *view_find(const pm_prof_view_t *view, const bucket_t *b)
{
    size_t lo = 0, hi = view->nbase;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)view->base[mid].site < (uintptr_t)b) lo = mid + 1;
        else hi = mid;
    }
    return lo < view->nbase && view->base[lo].site == b ? &view->base[lo] : NULL;
}

/* a - b in fixed point to the nearest whole number, negative allowed. */
static uint64_t diff_fx(uint64_t a, uint64_t b)
{
    int64_t d = (int64_t)(a - b);
    return (uint64_t)(d >= 0 ? (d + (int64_t)FX_ONE / 2) >> FX_SHIFT : -((-d + (int64_t)FX_ONE / 2) >> FX_SHIFT));
}

int pm_sites_snapshot(pm_prof_snapshot_t *snap, pm_sites_mem_t *mem, const pm_prof_view_t *view)
{
    snap->sample_rate = pm_sampler_rate();
    snap->time_ns = pm_os_now_ns();
    snap->duration_ns = snap->time_ns > prof.start_ns ? snap->time_ns - prof.start_ns : 0;
    if (view)
        for (int i = 0; i < 4; i++) snap->notes[i] = view->notes[i];
    int mode = view ? view->mode : PM_VIEW_NOW;
    for (;;) {
        pm_lock(&prof.lock);
        uint64_t want = prof.buckets.count + 16;
        pm_unlock(&prof.lock);
        size_t bytes = want * (sizeof(pm_prof_sample_t) + PM_STACK_MAX * sizeof(uintptr_t));
        char *base = pm_os_map_scratch(bytes);
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
                uint64_t ao = pm_relaxed_load(&b->alloc_objects), ab = pm_relaxed_load(&b->alloc_bytes);
                uint64_t fo = pm_relaxed_load(&b->free_objects), fb = pm_relaxed_load(&b->free_bytes);
                /* a group shows its mean size (its bytes are exact) */
                uint64_t size = b->size;
                if (size & GROUP) size = ao >= FX_ONE ? (ab + ao / 2) / ao : (uint64_t)1 << (size & 63);
                pm_prof_sample_t x = {
                    .alloc_objects = round_fx(ao, 0),
                    .alloc_bytes = round_fx(ab, 0),
                    .inuse_objects = round_fx(ao, fo),
                    .inuse_bytes = round_fx(ab, fb),
                };
                if (mode != PM_VIEW_NOW) {
                    const pm_site_count_t *c = view_find(view, b);
                    if (mode == PM_VIEW_AT) {
                        if (!c) continue; /* the site did not exist then */
                        x = (pm_prof_sample_t){round_fx(c->alloc_objects, 0), round_fx(c->alloc_bytes, 0),
                                               round_fx(c->alloc_objects, c->free_objects),
                                               round_fx(c->alloc_bytes, c->free_bytes), 0, 0, NULL};
                    } else {
                        pm_site_count_t zero = {0};
                        if (!c) c = &zero;
                        x.alloc_objects = round_fx(ao, c->alloc_objects);
                        x.alloc_bytes = round_fx(ab, c->alloc_bytes);
                        x.inuse_objects = diff_fx(ao - fo, c->alloc_objects - c->free_objects);
                        x.inuse_bytes = diff_fx(ab - fb, c->alloc_bytes - c->free_bytes);
                        if (!x.alloc_objects && !x.inuse_objects && !x.inuse_bytes) continue;
                    }
                }
                uintptr_t *pcs = stacks + n * PM_STACK_MAX;
                for (uint32_t i = 0; i < b->stack->depth; i++) pcs[i] = b->stack->pcs[i];
                x.size = size;
                x.depth = b->stack->depth;
                x.pcs = pcs;
                samples[n++] = x;
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
