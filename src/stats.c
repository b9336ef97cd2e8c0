/* stats.c — the allocator's exact totals, merged from every layer, and
 * the glibc reporting calls built on them (mallinfo2, malloc_stats,
 * malloc_info) plus malloc_trim and mallopt.
 * Must never hold two locks at once: each layer is read under its own lock
 * in turn, so totals are a near-consistent snapshot, exact when quiet.
 * Output is formatted into a stack buffer and written with write(2); only
 * malloc_info, whose contract is a FILE *, hands text to stdio (fputs),
 * with no allocator lock held. */
#include "pm_internal.h"
#include "pm_hunt.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>

/* The totals, and into free_objs[class] (when not NULL) the free small
 * blocks of each class: thread caches, transfer slots and spans. */
static void collect(profmalloc_stats_t *out, uint64_t free_objs[PM_CLASS_MAX])
{
    *out = (profmalloc_stats_t){0};
    pm_init();
    pm_pageheap_stats_t ph;
    pm_pageheap_stats(&ph);
    uint64_t cached[PM_CLASS_MAX] = {0}, threads = 0, tcache = 0;
    pm_tcache_class_counts(cached, &threads);
    uint64_t small_out = 0, central_free = 0, span_bytes = 0, contention = ph.contention;
    for (unsigned cls = 1; cls < pm_class_count; cls++) {
        pm_central_t *c = pm_central_find(cls);
        uint64_t size = pm_class_size[cls], central = 0;
        if (c) {
            pm_lock(&c->lock);
            central = c->parked + c->span_free;
            small_out += c->out * size;
            central_free += central * size;
            span_bytes += c->spans * ((uint64_t)pm_class_pages[cls] << PM_PAGE_SHIFT);
            pm_unlock(&c->lock);
            contention += pm_relaxed_load(&c->lock.contended);
        }
        tcache += cached[cls] * size;
        if (free_objs) free_objs[cls] = cached[cls] + central;
    }
    uint64_t large, large_req, large_n;
    pm_alloc_large_stats(&large, &large_req, &large_n);
    out->thread_cache = tcache;
    out->central_cache = central_free;
    out->in_use = small_out - (tcache < small_out ? tcache : small_out) + large;
    out->requested = out->in_use - large + large_req;
    out->fragmentation = span_bytes - small_out - central_free;
    out->pageheap_free = ph.free;
    out->released = ph.released;
    out->metadata = pm_meta_bytes() + pm_pagemap_bytes() + pm_sites_mapped_bytes();
    out->mapped = ph.mapped + out->metadata;
    out->metadata += ph.meta; /* span structs carved from the heap, of ph.mapped */
    out->resident_estimate = out->mapped - out->released;
    out->threads = threads;
    out->lock_contention = contention;
    out->sample_rate = pm_sampler_rate();
    out->samples_live = pm_sites_live_samples();
}

void pm_stats_collect(profmalloc_stats_t *out) { collect(out, NULL); }

PM_EXPORT int profmalloc_get_stats(profmalloc_stats_t *out)
{
    pm_stats_collect(out);
    return 0;
}

PM_EXPORT void profmalloc_release_free_memory(void) { pm_malloc_trim(0); }

/* The extended totals: per class, locks, system calls, peaks. */
static void collect_ex(profmalloc_stats_ex_t *x)
{
    *x = (profmalloc_stats_ex_t){.struct_size = sizeof *x};
    collect(&x->base, NULL);
    uint64_t cached[PM_CLASS_MAX] = {0}, threads = 0;
    pm_tcache_class_counts(cached, &threads);
    pm_pageheap_stats_t ph;
    pm_pageheap_stats(&ph);
    x->pageheap_lock_waits = ph.contention;
    for (unsigned cls = 1; cls < pm_class_count && x->nclasses < PROFMALLOC_STATS_CLASSES; cls++) {
        profmalloc_class_stats_t *k = &x->classes[x->nclasses++];
        uint64_t size = pm_class_size[cls];
        k->size = size;
        k->thread_cache = cached[cls];
        pm_central_t *c = pm_central_find(cls);
        if (!c) continue;
        pm_lock(&c->lock);
        uint64_t out = c->out, central = c->parked + c->span_free;
        k->spans = c->spans;
        pm_unlock(&c->lock);
        k->span_bytes = k->spans * ((uint64_t)pm_class_pages[cls] << PM_PAGE_SHIFT);
        k->in_use = out > cached[cls] ? out - cached[cls] : 0;
        k->central = central;
        uint64_t cut = (out + central) * size;
        k->fragmentation = k->span_bytes > cut ? k->span_bytes - cut : 0;
        k->lock_waits = pm_relaxed_load(&c->lock.contended);
        x->central_lock_waits += k->lock_waits;
    }
    pm_os_counts_t os;
    pm_os_counts(&os);
    x->peak_mapped = os.peak_mapped;
    x->peak_live = pm_hunt_peak_live();
    x->mmap_calls = os.mmap_calls;
    x->mmap_bytes = os.mmap_bytes;
    x->munmap_calls = os.munmap_calls;
    x->munmap_bytes = os.munmap_bytes;
    x->madvise_calls = os.madvise_calls;
    x->madvise_bytes = os.madvise_bytes;
    x->mremap_calls = os.mremap_calls;
    x->mremap_bytes = os.mremap_bytes;
    x->faultin_calls = os.faultin_calls;
    x->faultin_bytes = os.faultin_bytes;
}

PM_EXPORT int profmalloc_get_stats_ex(profmalloc_stats_ex_t *out)
{
    size_t want = out ? (size_t)out->struct_size : 0;
    if (!out || want < offsetof(profmalloc_stats_ex_t, base) + sizeof out->base) {
        errno = EINVAL;
        return -1;
    }
    /* mapped, not on the stack: a PTHREAD_STACK_MIN thread has ~14 KB */
    profmalloc_stats_ex_t *x = pm_os_map(sizeof *x, 0);
    if (!x) {
        errno = ENOMEM;
        return -1;
    }
    collect_ex(x);
    size_t n = want < sizeof *x ? want : sizeof *x;
    x->struct_size = n;
    for (size_t i = 0; i < want; i++) ((char *)out)[i] = i < n ? ((const char *)x)[i] : 0;
    pm_os_unmap(x, sizeof *x);
    return 0;
}

int pm_malloc_trim(size_t pad)
{
    (void)pad;
    pm_init();
    /* the calling thread's cache first, so its blocks can free spans */
    pm_tcache_t *t = &pm_tls;
    if (t->state == PM_THREAD_ACTIVE) pm_tcache_flush_all(t);
    pm_central_drain();
    uint64_t inside = pm_central_release_free();
    profmalloc_stats_t before, after;
    pm_stats_collect(&before);
    pm_pageheap_release_all();
    pm_stats_collect(&after);
    return before.pageheap_free != 0 || inside != 0 || after.mapped < before.mapped;
}

int pm_mallopt(int param, int value)
{
    switch (param) {
    case M_MXFAST: /* glibc: 0 .. 80 * sizeof(size_t) / 4, else refused */
        return value >= 0 && (size_t)value <= 80 * sizeof(size_t) / 4;
    case M_TRIM_THRESHOLD: case M_TOP_PAD: case M_MMAP_THRESHOLD:
    case M_MMAP_MAX: case M_CHECK_ACTION: case M_PERTURB: case M_ARENA_TEST:
    case M_ARENA_MAX:
        return 1; /* accepted; profmalloc's own policies do not need them */
    default:
        return 0;
    }
}

struct mallinfo2 pm_mallinfo2(void)
{
    profmalloc_stats_t s;
    pm_stats_collect(&s);
    uint64_t large, large_req, large_n;
    pm_alloc_large_stats(&large, &large_req, &large_n);
    uint64_t free_bytes = s.thread_cache + s.central_cache + s.pageheap_free;
    return (struct mallinfo2){
        .arena = s.mapped - s.metadata,
        .ordblks = 1,
        /* no block has a mapping of its own, as glibc's mmapped chunks do:
         * uordblks (every byte in use) + hblkhd must count each byte once */
        .hblks = 0,
        .hblkhd = 0,
        .uordblks = s.in_use,
        .fordblks = free_bytes,
        .fsmblks = s.thread_cache + s.central_cache,
        .keepcost = s.pageheap_free,
    };
}

static void line(pm_buf_t *b, const char *label, uint64_t v)
{
    pm_buf_str(b, label);
    pm_buf_u64(b, v);
    pm_buf_str(b, "\n");
}

/* "LABEL N (BYTES B)": how many calls of a kind and the bytes they moved. */
static void calls(pm_buf_t *b, const char *label, uint64_t n, uint64_t bytes)
{
    pm_buf_str(b, label);
    pm_buf_u64(b, n);
    pm_buf_str(b, " (");
    pm_buf_u64(b, bytes);
    pm_buf_str(b, " B)");
}

/* The text of malloc_stats and profmalloc_stats_print(TEXT). */
static void text_stats(pm_buf_t *b, const profmalloc_stats_ex_t *x)
{
    const profmalloc_stats_t *s = &x->base;
    /* glibc's layout first, so scripts that read it keep working */
    pm_buf_str(b, "Arena 0:\n");
    line(b, "system bytes     = ", s->mapped);
    line(b, "in use bytes     = ", s->in_use);
    pm_buf_str(b, "Total (incl. mmap):\n");
    line(b, "system bytes     = ", s->mapped);
    line(b, "in use bytes     = ", s->in_use);
    line(b, "max mmap regions = ", 0);
    line(b, "max mmap bytes   = ", 0);
    pm_buf_str(b, "profmalloc:\n");
    line(b, "  in use           = ", s->in_use);
    line(b, "  thread caches    = ", s->thread_cache);
    line(b, "  central lists    = ", s->central_cache);
    line(b, "  span tails       = ", s->fragmentation);
    line(b, "  page heap free   = ", s->pageheap_free);
    line(b, "  returned to OS   = ", s->released);
    line(b, "  metadata         = ", s->metadata);
    line(b, "  threads          = ", s->threads);
    line(b, "  lock contention  = ", s->lock_contention);
    line(b, "  sample rate      = ", s->sample_rate);
    line(b, "  live samples     = ", s->samples_live);
    line(b, "  peak mapped      = ", x->peak_mapped);
    line(b, "  peak live        = ", x->peak_live);
    line(b, "  page heap waits  = ", x->pageheap_lock_waits);
    line(b, "  central waits    = ", x->central_lock_waits);
    calls(b, "  system calls     = mmap ", x->mmap_calls, x->mmap_bytes);
    calls(b, ", munmap ", x->munmap_calls, x->munmap_bytes);
    calls(b, ", madvise ", x->madvise_calls, x->madvise_bytes);
    calls(b, ", mremap ", x->mremap_calls, x->mremap_bytes);
    pm_buf_str(b, "\n");
    calls(b, "  faulted-in runs  = ", x->faultin_calls, x->faultin_bytes);
    pm_buf_str(b, "\n");
    pm_buf_str(b, "  class    size   spans  in use  tcache central frag bytes lock waits\n");
    for (uint64_t i = 0; i < x->nclasses; i++) {
        const profmalloc_class_stats_t *k = &x->classes[i];
        if (!k->spans && !k->thread_cache) continue;
        const uint64_t v[7] = {k->size, k->spans, k->in_use, k->thread_cache, k->central, k->fragmentation,
                               k->lock_waits};
        static const size_t width[8] = {7, 8, 8, 8, 8, 8, 10, 11};
        char num[32];
        for (int f = -1; f < 7; f++) {
            num[pm_fmt_u64_pad(num, f < 0 ? i + 1 : v[f], width[f + 1])] = 0;
            pm_buf_str(b, num);
        }
        pm_buf_str(b, "\n");
    }
}

static void json_u64(pm_buf_t *b, const char *key, uint64_t v, int comma)
{
    pm_buf_str(b, "\"");
    pm_buf_str(b, key);
    pm_buf_str(b, "\":");
    pm_buf_u64(b, v);
    if (comma) pm_buf_str(b, ",");
}

static void json_stats(pm_buf_t *b, const profmalloc_stats_ex_t *x)
{
    const profmalloc_stats_t *s = &x->base;
    pm_buf_str(b, "{");
    json_u64(b, "in_use", s->in_use, 1);
    json_u64(b, "requested", s->requested, 1);
    json_u64(b, "mapped", s->mapped, 1);
    json_u64(b, "resident_estimate", s->resident_estimate, 1);
    json_u64(b, "thread_cache", s->thread_cache, 1);
    json_u64(b, "central_cache", s->central_cache, 1);
    json_u64(b, "fragmentation", s->fragmentation, 1);
    json_u64(b, "pageheap_free", s->pageheap_free, 1);
    json_u64(b, "released", s->released, 1);
    json_u64(b, "metadata", s->metadata, 1);
    json_u64(b, "threads", s->threads, 1);
    json_u64(b, "lock_contention", s->lock_contention, 1);
    json_u64(b, "sample_rate", s->sample_rate, 1);
    json_u64(b, "samples_live", s->samples_live, 1);
    json_u64(b, "peak_mapped", x->peak_mapped, 1);
    json_u64(b, "peak_live", x->peak_live, 1);
    json_u64(b, "pageheap_lock_waits", x->pageheap_lock_waits, 1);
    json_u64(b, "central_lock_waits", x->central_lock_waits, 1);
    pm_buf_str(b, "\"os\":{");
    json_u64(b, "mmap_calls", x->mmap_calls, 1);
    json_u64(b, "mmap_bytes", x->mmap_bytes, 1);
    json_u64(b, "munmap_calls", x->munmap_calls, 1);
    json_u64(b, "munmap_bytes", x->munmap_bytes, 1);
    json_u64(b, "madvise_calls", x->madvise_calls, 1);
    json_u64(b, "madvise_bytes", x->madvise_bytes, 1);
    json_u64(b, "mremap_calls", x->mremap_calls, 1);
    json_u64(b, "mremap_bytes", x->mremap_bytes, 1);
    json_u64(b, "faultin_calls", x->faultin_calls, 1);
    json_u64(b, "faultin_bytes", x->faultin_bytes, 0);
    pm_buf_str(b, "},\"classes\":[");
    int first = 1;
    for (uint64_t i = 0; i < x->nclasses; i++) {
        const profmalloc_class_stats_t *k = &x->classes[i];
        if (!k->spans && !k->thread_cache) continue;
        pm_buf_str(b, first ? "{" : ",{");
        first = 0;
        json_u64(b, "class", i + 1, 1);
        json_u64(b, "size", k->size, 1);
        json_u64(b, "spans", k->spans, 1);
        json_u64(b, "span_bytes", k->span_bytes, 1);
        json_u64(b, "in_use", k->in_use, 1);
        json_u64(b, "thread_cache", k->thread_cache, 1);
        json_u64(b, "central", k->central, 1);
        json_u64(b, "fragmentation", k->fragmentation, 1);
        json_u64(b, "lock_waits", k->lock_waits, 0);
        pm_buf_str(b, "}");
    }
    pm_buf_str(b, "]}\n");
}

PM_EXPORT int profmalloc_stats_print(int fd, int format)
{
    if (format != PROFMALLOC_STATS_TEXT && format != PROFMALLOC_STATS_JSON) {
        errno = EINVAL;
        return -1;
    }
    int entry_errno = errno;
    pm_init();
    profmalloc_stats_ex_t *x = pm_os_map(sizeof *x, 0);
    if (!x) {
        errno = ENOMEM;
        return -1;
    }
    collect_ex(x);
    char text[2048];
    pm_buf_t b;
    pm_buf_init(&b, text, sizeof text, fd);
    if (format == PROFMALLOC_STATS_JSON) json_stats(&b, x);
    else text_stats(&b, x);
    int rc = pm_buf_flush(&b) == 0 && !b.error ? 0 : -1;
    int saved = rc == 0 ? entry_errno : (b.error ? b.error : errno);
    pm_os_unmap(x, sizeof *x);
    errno = saved;
    return rc;
}

void pm_malloc_stats(void)
{
    int saved = errno;
    profmalloc_stats_print(2, PROFMALLOC_STATS_TEXT);
    errno = saved;
}

static void xml_total(pm_buf_t *b, const char *type, uint64_t count, uint64_t size)
{
    pm_buf_str(b, "<total type=\"");
    pm_buf_str(b, type);
    pm_buf_str(b, "\" count=\"");
    pm_buf_u64(b, count);
    pm_buf_str(b, "\" size=\"");
    pm_buf_u64(b, size);
    pm_buf_str(b, "\"/>\n");
}

int pm_malloc_info(int options, FILE *fp)
{
    if (options != 0) return EINVAL; /* as glibc's code does (its manual says -1) */
    /* free small blocks by size class, as glibc lists its free chunks by bin */
    profmalloc_stats_t s;
    uint64_t counts[PM_CLASS_MAX] = {0}, nfree = 0;
    collect(&s, counts);
    /* mapped, not on the stack: a PTHREAD_STACK_MIN thread has ~14 KB */
    size_t cap = PM_CLASS_MAX * 80 + 1024;
    char *text = pm_os_map(cap, 0);
    if (!text) {
        errno = ENOMEM;
        return -1;
    }
    pm_buf_t b;
    pm_buf_init(&b, text, cap - 1, -1);
    pm_buf_str(&b, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
    for (unsigned cls = 1; cls < pm_class_count; cls++) {
        if (!counts[cls]) continue;
        nfree += counts[cls];
        pm_buf_str(&b, "  <size from=\"");
        pm_buf_u64(&b, cls > 1 ? pm_class_size[cls - 1] + 1 : 1);
        pm_buf_str(&b, "\" to=\"");
        pm_buf_u64(&b, pm_class_size[cls]);
        pm_buf_str(&b, "\" total=\"");
        pm_buf_u64(&b, counts[cls] * pm_class_size[cls]);
        pm_buf_str(&b, "\" count=\"");
        pm_buf_u64(&b, counts[cls]);
        pm_buf_str(&b, "\"/>\n");
    }
    pm_buf_str(&b, "</sizes>\n");
    xml_total(&b, "fast", nfree, s.thread_cache + s.central_cache);
    xml_total(&b, "rest", 1, s.pageheap_free);
    pm_buf_str(&b, "<system type=\"current\" size=\"");
    pm_buf_u64(&b, s.mapped);
    pm_buf_str(&b, "\"/>\n<aspace type=\"total\" size=\"");
    pm_buf_u64(&b, s.mapped);
    pm_buf_str(&b, "\"/>\n</heap>\n");
    xml_total(&b, "released", 0, s.released);
    xml_total(&b, "inuse", 0, s.in_use);
    /* glibc's "mmap" total: its mapped chunks; here the system calls */
    pm_os_counts_t os;
    pm_os_counts(&os);
    xml_total(&b, "mmap", os.mmap_calls, os.mmap_bytes);
    xml_total(&b, "munmap", os.munmap_calls, os.munmap_bytes);
    xml_total(&b, "madvise", os.madvise_calls, os.madvise_bytes);
    pm_buf_str(&b, "<system type=\"max\" size=\"");
    pm_buf_u64(&b, os.peak_mapped);
    pm_buf_str(&b, "\"/>\n");
    pm_buf_str(&b, "<system type=\"current\" size=\"");
    pm_buf_u64(&b, s.mapped);
    pm_buf_str(&b, "\"/>\n</malloc>\n");
    text[b.len] = 0;
    int rc = fputs(text, fp) < 0 ? -1 : 0;
    int saved = errno;
    pm_os_unmap(text, cap);
    errno = saved;
    return rc;
}
