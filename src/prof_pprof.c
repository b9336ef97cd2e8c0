/* prof_pprof.c — the profile writers: a pm_prof_snapshot_t becomes a
 * gzip'd pprof profile.proto in Go's heap layout, or gperftools' legacy
 * heap text.  Builds on prof_symbols.c (the dictionary, symbol names,
 * mappings) and prof_encode.c (buffers, protobuf, gzip).
 * Must never: call malloc/free/stdio/qsort or anything else that allocates
 * (the process's malloc is us): scratch memory comes from pm_os_map and is
 * unmapped before returning; bytes leave through pm_os_write_all.
 * Lock: none of its own.  Called with no allocator or profiler lock held. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pm.h"
#include "pm_fmt.h"
#include "pm_math.h"
#include "pm_os.h"
#include "pm_prof_encode.h"
#include "pm_prof_pprof.h"
#include "pm_prof_symbols.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

/* v in hex without the 0x, as /proc/self/maps prints addresses. */
static size_t fmt_hex_bare(char *out, uint64_t v) { return pm_fmt_hex(out, v, 0); }

static void pb_value_type(pm_ebuf_t *out, pm_ebuf_t *sub, unsigned field, uint32_t type, uint32_t unit)
{
    sub->len = 0;
    pm_encode_uint(sub, 1, type);
    pm_encode_uint(sub, 2, unit);
    pm_encode_msg(out, field, sub);
}


/* ---- profile.proto ---------------------------------------------------- */

/* Fixed string table indexes, interned first in this order. */
enum { S_EMPTY, S_ALLOC_OBJECTS, S_COUNT, S_ALLOC_SPACE, S_BYTES, S_INUSE_OBJECTS,
       S_INUSE_SPACE, S_SPACE, S_FIXED };

/* One "key=value" of the totals comment; `B` marks bytes. */
static void add_total(pm_buf_t *b, const char *what, uint64_t v, int bytes)
{
    pm_buf_str(b, " ");
    pm_buf_str(b, what);
    pm_buf_str(b, "=");
    pm_buf_u64(b, v);
    if (bytes) pm_buf_str(b, "B");
}

/* Why has_functions stays false although Function/Line are filled in:
 * pprof skips local symbolization of any mapping that has has_functions,
 * has_filenames or has_line_numbers set (symbolizer.go newMapping), and
 * then -lines has no file:line.  With all three false, pprof re-symbolizes
 * each mapping whose binary it can open (addr2line/llvm-symbolizer, or in
 * `go tool pprof` Go's own DWARF reader): its names and file:line replace
 * ours.  Where the binary is missing, stripped of DWARF (system libraries),
 * or has another build id, or the reader finds nothing for an address, it
 * keeps the Location.line we wrote, so names still show.  Cost: where
 * DWARF has a line but no name (go tool pprof on gcc's .constprop clones)
 * the name shown is empty.  Our Line.line is 0 (no DWARF in-process). */
static int write_proto(int fd, const pm_prof_snapshot_t *s, pm_symbols_t *w)
{
    static const char *const fixed[S_FIXED] = {
        "", "alloc_objects", "count", "alloc_space", "bytes", "inuse_objects",
        "inuse_space", "space"};
    pm_ebuf_t out = {0}, sub = {0}, sub2 = {0}, pk = {0}, comments = {0}, order = {0};
    int rc = -1, err = ENOMEM;

    for (size_t i = 0; i < S_FIXED; i++) pm_symbols_intern(w, fixed[i]);
    const profmalloc_stats_t *t = &s->totals;
    /* the exact totals in one comment, not one each: pprof prints every
     * comment atop its reports and in the -png legend (profmalloc stats
     * reads both forms; test_prof_pprof's test_writer_proto) */
    char line[512];
    pm_buf_t b;
    pm_buf_init(&b, line, sizeof line, -1);
    pm_buf_str(&b, "profmalloc:");
    add_total(&b, "in_use", t->in_use, 1);
    add_total(&b, "requested", t->requested, 1);
    add_total(&b, "mapped", t->mapped, 1);
    add_total(&b, "resident_estimate", t->resident_estimate, 1);
    add_total(&b, "thread_cache", t->thread_cache, 1);
    add_total(&b, "central_cache", t->central_cache, 1);
    add_total(&b, "fragmentation", t->fragmentation, 1);
    add_total(&b, "pageheap_free", t->pageheap_free, 1);
    add_total(&b, "released", t->released, 1);
    add_total(&b, "metadata", t->metadata, 1);
    add_total(&b, "threads", t->threads, 0);
    add_total(&b, "lock_contention", t->lock_contention, 0);
    add_total(&b, "samples_live", t->samples_live, 0);
    add_total(&b, "sample_rate", s->sample_rate, 1);
    uint32_t id = pm_symbols_intern_n(w, line, b.len);
    pm_encode_put(&comments, &id, sizeof id);
    for (int i = 0; i < 4; i++) /* a view's notes: a peak's or a mark's time */
        if (s->notes[i]) {
            id = pm_symbols_intern(w, s->notes[i]);
            pm_encode_put(&comments, &id, sizeof id);
        }

    for (size_t i = 0; i < s->nsamples; i++)
        for (uint32_t d = 0; d < s->samples[i].depth; d++)
            pm_symbols_loc(w, s->samples[i].pcs[d]);
    if (pm_symbols_failed(w)) goto done;
    pm_symbols_resolve(w);
    if (pm_symbols_failed(w)) goto done;

    /* Mapping order: the executable's code segment first, because pprof
     * takes mapping[0] as the main binary and `pprof <binary> <profile>`
     * points only that one at <binary>; `go tool pprof` then derives the
     * load bias as start - p_vaddr of the first PF_X PT_LOAD, exact when
     * that p_vaddr is page-aligned (GNU ld's layout).  Then the
     * executable's other segments, then every other object. */
    size_t nmaps = PM_SYM_COUNT(w->maps, pm_sym_map_t), nlocs = PM_SYM_COUNT(w->locs, pm_sym_loc_t);
    uint32_t *id_of = pm_encode_add(&order, nmaps * 2 * sizeof(uint32_t) + 1);
    if (!id_of) goto done;
    uint32_t *seq = id_of + nmaps, nseq = 0;
    for (int pass = 0; pass < 3; pass++)
        for (size_t j = 0; j < nmaps; j++) {
            const pm_sym_map_t *m = &PM_SYM_MAPS(w)[j];
            if ((pass == 0 && m->exe && m->exec) || (pass == 1 && m->exe && !m->exec) ||
                (pass == 2 && !m->exe)) {
                seq[nseq++] = (uint32_t)j;
                id_of[j] = nseq;
            }
        }

    for (unsigned v = 0; v < 4; v++) {
        static const uint8_t types[4][2] = {{S_ALLOC_OBJECTS, S_COUNT}, {S_ALLOC_SPACE, S_BYTES},
                                            {S_INUSE_OBJECTS, S_COUNT}, {S_INUSE_SPACE, S_BYTES}};
        pb_value_type(&out, &sub, 1, types[v][0], types[v][1]);
    }
    for (size_t i = 0; i < s->nsamples; i++) {
        const pm_prof_sample_t *x = &s->samples[i];
        sub.len = 0;
        pk.len = 0;
        for (uint32_t d = 0; d < x->depth; d++) pm_encode_varint(&pk, pm_symbols_loc(w, x->pcs[d]) + 1);
        if (pk.len) pm_encode_msg(&sub, 1, &pk);
        pk.len = 0;
        pm_encode_varint(&pk, x->alloc_objects);
        pm_encode_varint(&pk, x->alloc_bytes);
        pm_encode_varint(&pk, x->inuse_objects);
        pm_encode_varint(&pk, x->inuse_bytes);
        pm_encode_msg(&sub, 2, &pk);
        sub2.len = 0;
        pm_encode_uint(&sub2, 1, S_BYTES);
        pm_encode_uint(&sub2, 3, x->size);
        pm_encode_msg(&sub, 3, &sub2);
        pm_encode_msg(&out, 2, &sub);
    }
    for (uint32_t k = 0; k < nseq; k++) {
        const pm_sym_map_t *m = &PM_SYM_MAPS(w)[seq[k]];
        sub.len = 0;
        pm_encode_uint(&sub, 1, k + 1);
        pm_encode_uint(&sub, 2, m->start);
        pm_encode_uint(&sub, 3, m->limit);
        pm_encode_uint(&sub, 4, m->offset);
        pm_encode_uint(&sub, 5, m->file);
        pm_encode_uint(&sub, 6, m->build);
        pm_encode_msg(&out, 3, &sub);
    }
    for (size_t i = 0; i < nlocs; i++) {
        const pm_sym_loc_t *l = &PM_SYM_LOCS(w)[i];
        sub.len = 0;
        pm_encode_uint(&sub, 1, i + 1);
        pm_encode_uint(&sub, 2, l->map ? id_of[l->map - 1] : 0);
        pm_encode_uint(&sub, 3, l->pc ? l->pc - 1 : 0);
        if (l->func) {
            sub2.len = 0;
            pm_encode_uint(&sub2, 1, l->func);
            pm_encode_msg(&sub, 4, &sub2);
        }
        pm_encode_msg(&out, 4, &sub);
    }
    for (size_t i = 0; i < PM_SYM_COUNT(w->funcs, pm_sym_func_t); i++) {
        const pm_sym_func_t *f = &PM_SYM_FUNCS(w)[i];
        sub.len = 0;
        pm_encode_uint(&sub, 1, i + 1);
        pm_encode_uint(&sub, 2, f->name);
        pm_encode_uint(&sub, 3, f->name);
        pm_encode_uint(&sub, 4, f->file);
        pm_encode_msg(&out, 5, &sub);
    }
    for (size_t i = 0; i < PM_SYM_COUNT(w->strs, pm_sym_str_t); i++)
        pm_encode_bytes(&out, 6, w->strdata.p + PM_SYM_STRS(w)[i].off, PM_SYM_STRS(w)[i].len);
    pm_encode_uint(&out, 9, s->time_ns);
    pm_encode_uint(&out, 10, s->duration_ns);
    pb_value_type(&out, &sub, 11, S_SPACE, S_BYTES);
    pm_encode_uint(&out, 12, s->sample_rate);
    for (size_t i = 0; i < PM_SYM_COUNT(comments, uint32_t); i++)
        pm_encode_uint(&out, 13, ((const uint32_t *)comments.p)[i]);
    pm_encode_uint(&out, 14, S_INUSE_SPACE);

    if (pm_symbols_failed(w) || out.failed || sub.failed || sub2.failed || pk.failed ||
        comments.failed)
        goto done;
    rc = pm_encode_gzip(fd, out.p, out.len);
    err = errno;
done:
    pm_encode_free(&out);
    pm_encode_free(&sub);
    pm_encode_free(&sub2);
    pm_encode_free(&pk);
    pm_encode_free(&comments);
    pm_encode_free(&order);
    errno = err;
    return rc;
}

/* ---- legacy gperftools heap text -------------------------------------- */

/* Legacy scaling.  Readers of heap_v2 (pprof's legacy_profile.go
 * scaleHeapSample, google-pprof's ReadHeapProfile) multiply every line's
 * count and bytes by 1 / (1 - e^(-avg/R)) with avg = bytes / count, because
 * gperftools writes raw sample counts.  Our snapshot holds values already
 * scaled that way, so each pair is turned back into raw counts:
 * count = round(objects * p), bytes = count * S with p = 1 - e^(-S/R) and
 * S the bucket's object size (bytes / objects when size is unknown).  The
 * reader then sees avg == S exactly, applies the very scale the sampler
 * did, and its totals equal the snapshot's up to rounding.  (S is taken
 * from the sample, not from bytes / objects: both were rounded to integers
 * after scaling, which would shift avg and the raw bytes.)  At R <= 1 values are exact and the
 * header says "heapprofile", which both readers leave unscaled (google-pprof
 * would still scale heap_v2/1 for tiny objects). */
static void raw_pair(uint64_t objs, uint64_t bytes, uint64_t size, uint64_t rate,
                     uint64_t *ro, uint64_t *rb)
{
    *ro = *rb = 0;
    if (!objs || !bytes) return; /* readers reject or drop such pairs */
    if (rate <= 1) {
        *ro = objs;
        *rb = bytes;
        return;
    }
    double avg = size ? (double)size : (double)bytes / (double)objs;
    double c = (double)objs * pm_math_one_minus_exp(avg / (double)rate) + 0.5;
    uint64_t n = c < 1 ? 1 : (uint64_t)c;
    double b = (double)n * avg + 0.5;
    if (b < 1) return;
    *ro = n;
    *rb = (uint64_t)b;
}

typedef struct out {
    int fd, err;
    char *buf;
    size_t len, cap;
} out_t;

static void out_flush(out_t *o)
{
    if (!o->err && o->len && pm_os_write_all(o->fd, o->buf, o->len)) o->err = errno;
    o->len = 0;
}

static void out_put(out_t *o, const char *s, size_t n)
{
    while (n) {
        if (o->len == o->cap) out_flush(o);
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->buf + o->len, s, k);
        o->len += k;
        s += k;
        n -= k;
    }
}

/* "<io>: <ib> [<ao>: <ab>] @" as gperftools prints it (%6d: %8d). */
static void out_counts(out_t *o, const uint64_t v[4])
{
    char line[128];
    size_t n = 0;
    n += pm_fmt_u64_pad(line + n, v[0], 6);
    line[n++] = ':';
    line[n++] = ' ';
    n += pm_fmt_u64_pad(line + n, v[1], 8);
    line[n++] = ' ';
    line[n++] = '[';
    n += pm_fmt_u64_pad(line + n, v[2], 6);
    line[n++] = ':';
    line[n++] = ' ';
    n += pm_fmt_u64_pad(line + n, v[3], 8);
    memcpy(line + n, "] @", 3);
    out_put(o, line, n + 3);
}

/* dl_iterate_phdr callback: the object's loaded segments as lines of
 * /proc/self/maps ("start-end perms offset dev inode path"), for a legacy
 * profile written where /proc is not mounted.  The program is named by
 * AT_EXECFN, the path it was started with. */
typedef struct {
    out_t *o;
    const char *exe; /* the program's absolute path */
} maps_arg_t;

static int maps_line_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    maps_arg_t *arg = data;
    out_t *o = arg->o;
    (void)size;
    const char *name = info->dlpi_name;
    if (!name || !name[0]) name = arg->exe;
    if (!name || !strchr(name, '/')) return 0; /* the vDSO: no file */
    uintptr_t page = pm_os_page_size();
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !ph->p_memsz) continue;
        uint64_t vstart = info->dlpi_addr + ph->p_vaddr, delta = vstart & (page - 1);
        char line[96];
        size_t n = fmt_hex_bare(line, vstart - delta);
        line[n++] = '-';
        n += fmt_hex_bare(line + n, (vstart + ph->p_memsz + page - 1) & ~(uint64_t)(page - 1));
        line[n++] = ' ';
        line[n++] = ph->p_flags & PF_R ? 'r' : '-';
        line[n++] = ph->p_flags & PF_W ? 'w' : '-';
        line[n++] = ph->p_flags & PF_X ? 'x' : '-';
        line[n++] = 'p';
        line[n++] = ' ';
        n += fmt_hex_bare(line + n, ph->p_offset >= delta ? ph->p_offset - delta : 0);
        memcpy(line + n, " 00:00 0 ", 9);
        n += 9;
        out_put(o, line, n);
        out_put(o, name, strlen(name));
        out_put(o, "\n", 1);
    }
    return o->err ? 1 : 0;
}

static int write_legacy(int fd, const pm_prof_snapshot_t *s)
{
    out_t o = {fd, 0, NULL, 0, 65536};
    o.buf = pm_os_map_scratch(o.cap);
    if (!o.buf) {
        errno = ENOMEM;
        return -1;
    }
    uint64_t rate = s->sample_rate, tot[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < s->nsamples; i++) {
        const pm_prof_sample_t *x = &s->samples[i];
        uint64_t v[4];
        raw_pair(x->inuse_objects, x->inuse_bytes, x->size, rate, &v[0], &v[1]);
        raw_pair(x->alloc_objects, x->alloc_bytes, x->size, rate, &v[2], &v[3]);
        for (int k = 0; k < 4; k++) tot[k] += v[k];
    }
    char line[64];
    out_put(&o, "heap profile: ", 14);
    out_counts(&o, tot);
    size_t n = 0;
    if (rate > 1) {
        memcpy(line, " heap_v2/", 9);
        n = 9 + pm_fmt_u64(line + 9, rate);
    } else {
        memcpy(line, " heapprofile", 12);
        n = 12;
    }
    line[n++] = '\n';
    out_put(&o, line, n);
    for (size_t i = 0; i < s->nsamples; i++) {
        const pm_prof_sample_t *x = &s->samples[i];
        uint64_t v[4];
        raw_pair(x->inuse_objects, x->inuse_bytes, x->size, rate, &v[0], &v[1]);
        raw_pair(x->alloc_objects, x->alloc_bytes, x->size, rate, &v[2], &v[3]);
        if (!v[0] && !v[2]) continue;
        out_counts(&o, v);
        for (uint32_t d = 0; d < x->depth; d++) {
            line[0] = ' ';
            out_put(&o, line, 1 + pm_fmt_hex(line + 1, x->pcs[d], 1));
        }
        out_put(&o, "\n", 1);
    }
    out_put(&o, "\nMAPPED_LIBRARIES:\n", 19);
    out_flush(&o);
    int mfd = o.err ? -1 : pm_os_open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (mfd < 0 && !o.err) { /* no /proc: the loaded objects, in its format */
        /* the program by AT_EXECFN, made absolute as maps would print it
         * (google-pprof matches it against the binary's absolute path) */
        const char *execfn = (const char *)getauxval(AT_EXECFN);
        char *exe = pm_os_map_scratch(PATH_MAX);
        maps_arg_t arg = {&o, execfn};
        if (exe && execfn && execfn[0] != '/' && pm_os_getcwd(exe, PATH_MAX)) {
            size_t n = strlen(exe), k = strlen(execfn);
            if (execfn[0] == '.' && execfn[1] == '/') execfn += 2, k -= 2;
            if (n + 1 + k < PATH_MAX) {
                exe[n] = '/';
                memcpy(exe + n + 1, execfn, k + 1);
                arg.exe = exe;
            }
        }
        pm_symbols_each_object(maps_line_cb, &arg);
        out_flush(&o);
        if (exe) pm_os_unmap(exe, PATH_MAX);
    }
    for (ssize_t r; mfd >= 0 && !o.err && (r = pm_os_read(mfd, o.buf, o.cap)) != 0;) {
        if (r < 0) {
            o.err = errno;
            break;
        }
        o.len = (size_t)r;
        out_flush(&o);
    }
    if (mfd >= 0) pm_os_close(mfd);
    pm_os_unmap(o.buf, o.cap);
    errno = o.err;
    return o.err ? -1 : 0;
}

/* ---- entry point ------------------------------------------------------ */

int pm_pprof_write(int fd, const pm_prof_snapshot_t *s, int format)
{
    if (!s || fd < 0 || (s->nsamples && !s->samples) ||
        (format != PROFMALLOC_FORMAT_PPROF && format != PROFMALLOC_FORMAT_LEGACY)) {
        errno = fd < 0 && s ? EBADF : EINVAL;
        return -1;
    }
    for (size_t i = 0; i < s->nsamples; i++)
        if (s->samples[i].depth > PM_STACK_MAX || (s->samples[i].depth && !s->samples[i].pcs)) {
            errno = EINVAL;
            return -1;
        }
    if (format == PROFMALLOC_FORMAT_LEGACY) return write_legacy(fd, s);

    pm_symbols_t w;
    int rc = -1;
    if (pm_symbols_init(&w)) {
        rc = write_proto(fd, s, &w);
    } else {
        errno = ENOMEM;
    }
    int err = errno;
    pm_symbols_free(&w);
    errno = err;
    return rc;
}
