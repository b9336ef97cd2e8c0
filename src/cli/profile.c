/* profile.c — the command's profile readers and writers: pprof
 * profile.proto (gzip'd or raw) and gperftools' legacy heap text
 * (heap_v2/R, heapprofile), both into cli_profile_t, and back out for
 * `profmalloc convert`.  A reader never trusts a length, an index or a
 * count from the file: a truncated or corrupt profile gives a message
 * (test_corrupt_and_truncated_inputs; test/cli/fuzz_readers.c).  Ordinary stdio and
 * malloc code: it runs in the command, not in the allocator. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- small helpers ---------------------------------------------------- */

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "profmalloc: out of memory\n");
        exit(2);
    }
    return p;
}

void *xcalloc(size_t n, size_t k)
{
    void *p = calloc(n ? n : 1, k ? k : 1);
    if (!p) {
        fprintf(stderr, "profmalloc: out of memory\n");
        exit(2);
    }
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "profmalloc: out of memory\n");
        exit(2);
    }
    return p;
}

char *xstrndup(const char *s, size_t n)
{
    char *r = xmalloc(n + 1);
    memcpy(r, s, n);
    r[n] = 0;
    return r;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

int cli_slurp(const char *path, uint8_t **data, size_t *len, char *err, size_t errlen)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 65536, n = 0, r;
    uint8_t *buf = xmalloc(cap);
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            if (cap >= ((size_t)1 << 32)) {
                snprintf(err, errlen, "%s: file too large", path);
                free(buf);
                if (f != stdin) fclose(f);
                return -1;
            }
            buf = xrealloc(buf, cap *= 2);
        }
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: read error", path);
        free(buf);
        return -1;
    }
    buf[n] = 0; /* n < cap always: text readers may rely on a terminator */
    *data = buf;
    *len = n;
    return 0;
}

/* Rounds to the nearest integer, clamped: values from a corrupt file may be
 * NaN or out of range, where a plain cast is undefined (check-cli-fuzz
 * under UBSan). */
static uint64_t round_u64(double x)
{
    if (!(x > 0)) return 0;
    if (x >= 1.8e19) return UINT64_MAX;
    return (uint64_t)(x + 0.5);
}

/* e^x without libm: x = k ln2 + r, |r| <= ln2/2, e^r by its series. */
double cli_exp(double x)
{
    if (x != x) return x;
    if (x > 709) return 1e308;
    if (x < -745) return 0;
    const double ln2 = 0.69314718055994530942;
    int k = (int)(x / ln2 + (x < 0 ? -0.5 : 0.5));
    double r = x - k * ln2, term = 1, e = 1;
    for (int i = 1; i < 20; i++) {
        term *= r / i;
        e += term;
    }
    while (k > 0) e *= 2, k--;
    while (k < 0) e *= 0.5, k++;
    return e;
}

/* 1 - e^-x for x >= 0 without cancellation for small x. */
double cli_one_minus_exp_neg(double x)
{
    if (!(x > 0)) return 0;
    if (x < 0.5) {
        double term = x, sum = x;
        for (int k = 2; k < 24; k++) {
            term *= -x / k;
            sum += term;
        }
        return sum;
    }
    return 1 - cli_exp(-x);
}

double cli_sqrt(double x)
{
    if (!(x > 0)) return 0;
    double r = x > 1 ? x / 2 : 1;
    for (int i = 0; i < 200; i++) {
        double n = 0.5 * (r + x / r);
        if (n == r) break;
        r = n;
    }
    return r;
}

const char *cli_human(double b, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double a = b < 0 ? -b : b;
    int u = 0;
    while (a >= 1024 && u < 5) a /= 1024, u++;
    if (u == 0) snprintf(buf, len, "%.0f %s", b < 0 ? -a : a, unit[u]);
    else snprintf(buf, len, a >= 100 ? "%.0f %s" : a >= 10 ? "%.1f %s" : "%.2f %s", b < 0 ? -a : a, unit[u]);
    return buf;
}

void cli_free_profile(cli_profile_t *p)
{
    for (size_t i = 0; i < p->nsamples; i++) free(p->samples[i].locs);
    for (size_t i = 0; i < p->nlocs; i++) {
        free(p->locs[i].func);
        free(p->locs[i].file);
        free(p->locs[i].sym_func);
        free(p->locs[i].sym_file);
    }
    for (size_t i = 0; i < p->nmaps; i++) {
        free(p->maps[i].file);
        free(p->maps[i].build_id);
    }
    for (size_t i = 0; i < p->ncomments; i++) free(p->comments[i]);
    free(p->samples);
    free(p->locs);
    free(p->maps);
    free(p->comments);
    memset(p, 0, sizeof *p);
}

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Raw sample count behind an estimate of objs objects of size s at rate R. */
double cli_count_behind(double objs, double bytes, uint64_t size, uint64_t rate)
{
    if (objs <= 0) return 0;
    if (rate <= 1) return objs;
    double avg = size ? (double)size : bytes / objs;
    double c = objs * cli_one_minus_exp_neg(avg / (double)rate);
    return c < 1 ? 1 : (double)round_u64(c);
}

static void attach_maps(cli_profile_t *p)
{
    for (size_t i = 0; i < p->nlocs; i++) {
        cli_loc_t *l = &p->locs[i];
        if (l->map >= 0) continue;
        for (size_t j = 0; j < p->nmaps; j++)
            if (l->addr >= p->maps[j].start && l->addr < p->maps[j].limit) {
                l->map = (int)j;
                break;
            }
    }
}

/* ---- protobuf --------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
    int bad;
} pb_t;

static uint64_t pb_varint(pb_t *b)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) {
            b->bad = 1;
            return 0;
        }
        uint8_t c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return v;
    }
    b->bad = 1;
    return 0;
}

/* Next field: returns 0 at the end or on error; *sub is the payload of a
 * length-delimited field, *val the value of a varint or fixed one. */
static int pb_next(pb_t *b, unsigned *field, unsigned *wire, uint64_t *val, pb_t *sub)
{
    if (b->bad || b->p >= b->end) return 0;
    uint64_t key = pb_varint(b);
    if (b->bad) return 0;
    *field = (unsigned)(key >> 3);
    *wire = key & 7;
    switch (*wire) {
    case 0: *val = pb_varint(b); break;
    case 1:
        if (b->end - b->p < 8) b->bad = 1;
        else {
            *val = 0;
            for (int i = 7; i >= 0; i--) *val = *val << 8 | b->p[i];
            b->p += 8;
        }
        break;
    case 5:
        if (b->end - b->p < 4) b->bad = 1;
        else {
            *val = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 |
                   (uint64_t)b->p[3] << 24;
            b->p += 4;
        }
        break;
    case 2: {
        uint64_t n = pb_varint(b);
        if (b->bad || n > (uint64_t)(b->end - b->p)) {
            b->bad = 1;
            break;
        }
        sub->p = b->p;
        sub->end = b->p + n;
        sub->bad = 0;
        b->p += n;
        break;
    }
    default: b->bad = 1;
    }
    return !b->bad && *field != 0 ? 1 : (b->bad = 1, 0);
}

/* Repeated scalar: packed (wire 2) or one value (wire 0). */
typedef struct {
    uint64_t *v;
    size_t n, cap;
} u64vec_t;

static void vec_push(u64vec_t *v, uint64_t x)
{
    if (v->n == v->cap) v->v = xrealloc(v->v, (v->cap = v->cap ? v->cap * 2 : 8) * sizeof *v->v);
    v->v[v->n++] = x;
}

static int pb_repeated(unsigned wire, uint64_t val, pb_t *sub, u64vec_t *out)
{
    if (wire == 0) {
        vec_push(out, val);
        return 0;
    }
    if (wire != 2) return -1;
    while (sub->p < sub->end) {
        uint64_t x = pb_varint(sub);
        if (sub->bad) return -1;
        vec_push(out, x);
    }
    return 0;
}

typedef struct {
    uint64_t id, a, b, c, d, e;
} rec_t;

typedef struct {
    rec_t *v;
    size_t n, cap;
} recvec_t;

static rec_t *rec_add(recvec_t *r)
{
    if (r->n == r->cap) r->v = xrealloc(r->v, (r->cap = r->cap ? r->cap * 2 : 64) * sizeof *r->v);
    memset(&r->v[r->n], 0, sizeof r->v[0]);
    return &r->v[r->n++];
}

static int rec_cmp(const void *a, const void *b)
{
    uint64_t x = ((const rec_t *)a)->id, y = ((const rec_t *)b)->id;
    return x < y ? -1 : x > y;
}

static const rec_t *rec_find(const recvec_t *r, uint64_t id)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->v[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < r->n && r->v[lo].id == id ? &r->v[lo] : NULL;
}

typedef struct {
    const uint8_t *p;
    size_t n;
} str_t;

/* The varint fields 1..nfields of message m into r->id, a, b, c, d, e in
 * that order (a Mapping has 6, a Function 4); other fields are skipped.
 * Returns 0 if m is malformed. */
static int read_rec(pb_t *m, rec_t *r, unsigned nfields)
{
    uint64_t *slot[] = {&r->id, &r->a, &r->b, &r->c, &r->d, &r->e};
    unsigned f, w;
    uint64_t v;
    pb_t sub;
    while (pb_next(m, &f, &w, &v, &sub))
        if (w == 0 && f >= 1 && f <= nfields) *slot[f - 1] = v;
    return !m->bad;
}

typedef struct {
    u64vec_t locs, vals, labels_size;
    uint64_t size;
} raw_sample_t;

static int parse_proto(const uint8_t *data, size_t len, cli_profile_t *out, char *err, size_t errlen)
{
    pb_t b = {data, data + len, 0}, sub, s2, s3;
    unsigned f, w, f2, w2, f3, w3;
    uint64_t v, v2, v3;
    str_t *strs = NULL;
    size_t nstrs = 0, capstrs = 0;
    recvec_t types = {0}, maps = {0}, locs = {0}, funcs = {0}, lines = {0};
    raw_sample_t *samples = NULL;
    size_t nsamples = 0, capsamples = 0;
    u64vec_t comments = {0};
    uint64_t period = 0, period_type = 0;
    int64_t time_ns = 0;
    int rc = -1;

    while (pb_next(&b, &f, &w, &v, &sub)) {
        switch (f) {
        case 1: /* sample_type */
        case 11: { /* period_type */
            if (w != 2) goto bad;
            rec_t *r = f == 1 ? rec_add(&types) : &(rec_t){0};
            while (pb_next(&sub, &f2, &w2, &v2, &s2))
                if (f2 == 1 && w2 == 0) r->a = v2;
                else if (f2 == 2 && w2 == 0) r->b = v2;
            if (sub.bad) goto bad;
            if (f == 11) period_type = r->a;
            break;
        }
        case 2: { /* sample */
            if (w != 2) goto bad;
            if (nsamples == capsamples)
                samples = xrealloc(samples, (capsamples = capsamples ? capsamples * 2 : 256) * sizeof *samples);
            raw_sample_t *rs = &samples[nsamples++];
            memset(rs, 0, sizeof *rs);
            while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
                if (f2 == 1) {
                    if (pb_repeated(w2, v2, &s2, &rs->locs)) goto bad;
                } else if (f2 == 2) {
                    if (pb_repeated(w2, v2, &s2, &rs->vals)) goto bad;
                } else if (f2 == 3 && w2 == 2) {
                    uint64_t key = 0, num = 0;
                    while (pb_next(&s2, &f3, &w3, &v3, &s3))
                        if (f3 == 1 && w3 == 0) key = v3;
                        else if (f3 == 3 && w3 == 0) num = v3;
                    if (s2.bad) goto bad;
                    vec_push(&rs->labels_size, key);
                    vec_push(&rs->labels_size, num);
                }
            }
            if (sub.bad) goto bad;
            break;
        }
        case 3: { /* mapping */
            if (w != 2) goto bad;
            if (!read_rec(&sub, rec_add(&maps), 6)) goto bad;
            break;
        }
        case 4: { /* location */
            if (w != 2) goto bad;
            rec_t *r = rec_add(&locs);
            r->d = UINT64_MAX; /* first line record: none */
            while (pb_next(&sub, &f2, &w2, &v2, &s2)) {
                if (f2 == 1 && w2 == 0) r->id = v2;
                else if (f2 == 2 && w2 == 0) r->a = v2;
                else if (f2 == 3 && w2 == 0) r->b = v2;
                else if (f2 == 4 && w2 == 2 && r->d == UINT64_MAX) {
                    rec_t *l = rec_add(&lines);
                    r = &locs.v[locs.n - 1]; /* unchanged: separate vector */
                    while (pb_next(&s2, &f3, &w3, &v3, &s3))
                        if (f3 == 1 && w3 == 0) l->a = v3;
                        else if (f3 == 2 && w3 == 0) l->b = v3;
                    if (s2.bad) goto bad;
                    r->d = lines.n - 1;
                }
            }
            if (sub.bad) goto bad;
            break;
        }
        case 5: { /* function */
            if (w != 2) goto bad;
            if (!read_rec(&sub, rec_add(&funcs), 4)) goto bad;
            break;
        }
        case 6:
            if (w != 2) goto bad;
            if (nstrs == capstrs) strs = xrealloc(strs, (capstrs = capstrs ? capstrs * 2 : 256) * sizeof *strs);
            strs[nstrs].p = sub.p;
            strs[nstrs++].n = (size_t)(sub.end - sub.p);
            break;
        case 9: time_ns = (int64_t)v; break;
        case 12: period = v; break;
        case 13:
            if (pb_repeated(w, v, &sub, &comments)) goto bad;
            break;
        default: break;
        }
    }
    if (b.bad) {
        seterr(err, errlen, "corrupt or truncated profile.proto");
        goto out;
    }
    if (nstrs == 0 || strs[0].n != 0) {
        seterr(err, errlen, "not a pprof profile (no string table)");
        goto out;
    }
#define STR(i) ((i) < nstrs ? xstrndup((const char *)strs[i].p, strs[i].n) : xstrdup(""))
#define STREQ(i, lit) ((i) < nstrs && strs[i].n == strlen(lit) && !memcmp(strs[i].p, lit, strs[i].n))
    /* which value is which */
    int idx[V_N] = {-1, -1, -1, -1};
    for (size_t i = 0; i < types.n; i++) {
        uint64_t t = types.v[i].a;
        if (STREQ(t, "alloc_objects")) idx[V_ALLOC_OBJ] = (int)i;
        else if (STREQ(t, "alloc_space")) idx[V_ALLOC_BYTES] = (int)i;
        else if (STREQ(t, "inuse_objects")) idx[V_INUSE_OBJ] = (int)i;
        else if (STREQ(t, "inuse_space")) idx[V_INUSE_BYTES] = (int)i;
    }
    if (idx[V_INUSE_BYTES] < 0 && idx[V_ALLOC_BYTES] < 0) {
        /* not a heap profile: its last value of unit bytes, else the last value */
        for (size_t i = 0; i < types.n; i++)
            if (STREQ(types.v[i].b, "bytes")) idx[V_INUSE_BYTES] = (int)i;
        if (idx[V_INUSE_BYTES] < 0 && types.n) idx[V_INUSE_BYTES] = (int)types.n - 1;
        if (idx[V_INUSE_BYTES] < 0) {
            seterr(err, errlen, "not a pprof profile (no sample types)");
            goto out;
        }
    }
    (void)period_type;
    if (maps.n) qsort(maps.v, maps.n, sizeof *maps.v, rec_cmp);
    if (locs.n) qsort(locs.v, locs.n, sizeof *locs.v, rec_cmp);
    if (funcs.n) qsort(funcs.v, funcs.n, sizeof *funcs.v, rec_cmp);
    uint64_t size_key = UINT64_MAX;
    for (size_t i = 0; i < nstrs; i++)
        if (STREQ(i, "bytes")) size_key = i;

    out->period = period;
    out->time_ns = time_ns;
    out->has_counts = period > 0;
    out->nmaps = maps.n;
    out->maps = xcalloc(maps.n, sizeof *out->maps);
    for (size_t i = 0; i < maps.n; i++) {
        cli_map_t *m = &out->maps[i];
        m->start = maps.v[i].a;
        m->limit = maps.v[i].b;
        m->offset = maps.v[i].c;
        m->file = STR(maps.v[i].d);
        m->build_id = STR(maps.v[i].e);
    }
    out->nlocs = locs.n;
    out->locs = xcalloc(locs.n, sizeof *out->locs);
    for (size_t i = 0; i < locs.n; i++) {
        cli_loc_t *l = &out->locs[i];
        l->addr = locs.v[i].b;
        l->map = -1;
        if (locs.v[i].a) {
            const rec_t *m = rec_find(&maps, locs.v[i].a);
            if (m) l->map = (int)(m - maps.v);
        }
        if (locs.v[i].d != UINT64_MAX && locs.v[i].d < lines.n) {
            const rec_t *ln = &lines.v[locs.v[i].d];
            const rec_t *fn = rec_find(&funcs, ln->a);
            l->line = (int64_t)ln->b;
            if (fn) {
                if (fn->a && fn->a < nstrs) l->func = STR(fn->a);
                else if (fn->b && fn->b < nstrs) l->func = STR(fn->b);
                if (fn->c && fn->c < nstrs) l->file = STR(fn->c);
            }
        }
    }
    out->nsamples = nsamples;
    out->samples = xcalloc(nsamples, sizeof *out->samples);
    for (size_t i = 0; i < nsamples; i++) {
        raw_sample_t *rs = &samples[i];
        cli_sample_t *s = &out->samples[i];
        s->locs = xcalloc(rs->locs.n, sizeof *s->locs);
        for (size_t k = 0; k < rs->locs.n; k++) {
            const rec_t *l = rec_find(&locs, rs->locs.v[k]);
            if (!l) {
                seterr(err, errlen, "corrupt profile: a sample names location %llu, which is not there",
                       (unsigned long long)rs->locs.v[k]);
                out->nsamples = i + 1;
                goto out;
            }
            s->locs[s->depth++] = (uint32_t)(l - locs.v);
        }
        for (int k = 0; k < V_N; k++)
            if (idx[k] >= 0 && (size_t)idx[k] < rs->vals.n) s->v[k] = (double)(int64_t)rs->vals.v[idx[k]];
        for (size_t k = 0; k + 1 < rs->labels_size.n; k += 2)
            if (rs->labels_size.v[k] == size_key) s->size = rs->labels_size.v[k + 1];
        s->n[0] = cli_count_behind(s->v[V_INUSE_OBJ], s->v[V_INUSE_BYTES], s->size, period);
        s->n[1] = cli_count_behind(s->v[V_ALLOC_OBJ], s->v[V_ALLOC_BYTES], s->size, period);
    }
    out->ncomments = comments.n;
    out->comments = xcalloc(comments.n, sizeof *out->comments);
    for (size_t i = 0; i < comments.n; i++) out->comments[i] = STR(comments.v[i]);
    attach_maps(out);
    rc = 0;
    goto out;
bad:
    seterr(err, errlen, "corrupt or truncated profile.proto");
out:
    for (size_t i = 0; i < nsamples; i++) {
        free(samples[i].locs.v);
        free(samples[i].vals.v);
        free(samples[i].labels_size.v);
    }
    free(samples);
    free(strs);
    free(types.v);
    free(maps.v);
    free(locs.v);
    free(funcs.v);
    free(lines.v);
    free(comments.v);
    if (rc) cli_free_profile(out);
    return rc;
#undef STR
#undef STREQ
}

/* ---- legacy text ------------------------------------------------------ */

typedef struct {
    uint64_t *keys;
    uint32_t *vals;
    size_t cap, n;
} addrmap_t;

static uint32_t addr_index(addrmap_t *m, cli_profile_t *p, size_t *capl, uint64_t addr)
{
    if (m->n * 2 >= m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        uint64_t *k = xcalloc(cap, sizeof *k);
        uint32_t *v = xcalloc(cap, sizeof *v);
        for (size_t i = 0; i < m->cap; i++)
            if (m->vals[i]) {
                size_t h = (m->keys[i] * 0x9e3779b97f4a7c15ull) >> 20;
                while (v[h & (cap - 1)]) h++;
                k[h & (cap - 1)] = m->keys[i];
                v[h & (cap - 1)] = m->vals[i];
            }
        free(m->keys);
        free(m->vals);
        m->keys = k;
        m->vals = v;
        m->cap = cap;
    }
    size_t h = (addr * 0x9e3779b97f4a7c15ull) >> 20;
    while (m->vals[h & (m->cap - 1)]) {
        if (m->keys[h & (m->cap - 1)] == addr) return m->vals[h & (m->cap - 1)] - 1;
        h++;
    }
    if (p->nlocs == *capl) p->locs = xrealloc(p->locs, (*capl = *capl ? *capl * 2 : 256) * sizeof *p->locs);
    cli_loc_t *l = &p->locs[p->nlocs];
    memset(l, 0, sizeof *l);
    l->addr = addr;
    l->map = -1;
    m->keys[h & (m->cap - 1)] = addr;
    m->vals[h & (m->cap - 1)] = (uint32_t)++p->nlocs;
    m->n++;
    return (uint32_t)p->nlocs - 1;
}

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

static int parse_u64(const char **s, uint64_t *v, int base)
{
    const char *p = *s;
    uint64_t x = 0;
    int any = 0;
    for (;; p++) {
        int d;
        if (*p >= '0' && *p <= '9') d = *p - '0';
        else if (base == 16 && *p >= 'a' && *p <= 'f') d = *p - 'a' + 10;
        else if (base == 16 && *p >= 'A' && *p <= 'F') d = *p - 'A' + 10;
        else break;
        if (x > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return -1;
        x = x * (uint64_t)base + (uint64_t)d;
        any = 1;
    }
    if (!any) return -1;
    *s = p;
    *v = x;
    return 0;
}

/* "<io>: <ib> [<ao>: <ab>]" */
static int parse_counts(const char **s, uint64_t c[4])
{
    const char *p = skip_ws(*s);
    for (int i = 0; i < 4; i++) {
        p = skip_ws(p);
        if (parse_u64(&p, &c[i], 10)) return -1;
        p = skip_ws(p);
        char want = i == 0 || i == 2 ? ':' : i == 1 ? '[' : ']';
        if (*p != want) return -1;
        p++;
    }
    *s = p;
    return 0;
}

static int parse_legacy(const char *text, size_t len, cli_profile_t *out, char *err, size_t errlen)
{
    const char *end = text + len, *line = text;
    size_t lineno = 0, capsamples = 0, caplocs = 0, capmaps = 0;
    addrmap_t am = {0};
    uint64_t rate = 0;
    int scaled = 0, in_maps = 0;
    char *buf = NULL;
    size_t bufcap = 0;
    out->legacy = true;
    out->has_counts = true;
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *le = nl ? nl : end;
        size_t n = (size_t)(le - line);
        lineno++;
        if (n >= bufcap) {
            bufcap = n + 1 > 4096 ? n + 1 : 4096;
            free(buf);
            buf = xmalloc(bufcap);
        }
        memcpy(buf, line, n);
        buf[n] = 0;
        if (n && buf[n - 1] == '\r') buf[--n] = 0;
        line = nl ? nl + 1 : end;
        if (memchr(buf, 0, n)) {
            seterr(err, errlen, "line %zu: binary data in a text profile", lineno);
            goto bad;
        }
        const char *p = skip_ws(buf);
        if (lineno == 1) {
            uint64_t c[4];
            if (strncmp(p, "heap profile:", 13)) {
                seterr(err, errlen, "not a heap profile");
                goto bad;
            }
            p += 13;
            if (parse_counts(&p, c) || *(p = skip_ws(p)) != '@') {
                seterr(err, errlen, "line 1: malformed heap profile header");
                goto bad;
            }
            p = skip_ws(p + 1);
            if (!strncmp(p, "heap_v2/", 8)) {
                p += 8;
                if (parse_u64(&p, &rate, 10)) {
                    seterr(err, errlen, "line 1: malformed sampling rate");
                    goto bad;
                }
                scaled = rate > 1;
            } else if (!strncmp(p, "heapprofile", 11) || !*p) {
                rate = 1;
            } else if (!strncmp(p, "heap/", 5)) {
                p += 5;
                if (parse_u64(&p, &rate, 10)) rate = 1;
                scaled = 0; /* v1: unscaled, as pprof treats it */
            } else {
                seterr(err, errlen, "line 1: unknown profile type '%.40s'", p);
                goto bad;
            }
            out->period = rate;
            continue;
        }
        if (!*p) continue;
        if (!strncmp(p, "MAPPED_LIBRARIES:", 17) || !strncmp(p, "--- Memory map:", 15)) {
            in_maps = 1;
            continue;
        }
        if (in_maps) {
            /* start-end perms offset dev inode path */
            uint64_t start, lim, off;
            const char *q = p;
            if (parse_u64(&q, &start, 16) || *q++ != '-' || parse_u64(&q, &lim, 16)) continue;
            q = skip_ws(q);
            while (*q && *q != ' ') q++; /* perms */
            q = skip_ws(q);
            if (parse_u64(&q, &off, 16)) continue;
            q = skip_ws(q);
            while (*q && *q != ' ') q++; /* dev */
            q = skip_ws(q);
            while (*q && *q != ' ') q++; /* inode */
            q = skip_ws(q);
            if (*q != '/') continue;
            if (out->nmaps == capmaps) out->maps = xrealloc(out->maps, (capmaps = capmaps ? capmaps * 2 : 32) * sizeof *out->maps);
            cli_map_t *m = &out->maps[out->nmaps++];
            m->start = start;
            m->limit = lim;
            m->offset = off;
            size_t fl = strlen(q);
            while (fl && (q[fl - 1] == ' ' || q[fl - 1] == '\t')) fl--;
            if (fl > 10 && !strcmp(q + fl - 10, " (deleted)")) fl -= 10;
            m->file = xstrndup(q, fl);
            m->build_id = xstrdup("");
            continue;
        }
        uint64_t c[4];
        if (parse_counts(&p, c) || *(p = skip_ws(p)) != '@') {
            seterr(err, errlen, "line %zu: malformed sample", lineno);
            goto bad;
        }
        p++;
        if (out->nsamples == capsamples)
            out->samples = xrealloc(out->samples, (capsamples = capsamples ? capsamples * 2 : 256) * sizeof *out->samples);
        cli_sample_t *s = &out->samples[out->nsamples++];
        memset(s, 0, sizeof *s);
        size_t caps = 0;
        for (;;) {
            p = skip_ws(p);
            if (!*p) break;
            uint64_t a;
            if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2;
            if (parse_u64(&p, &a, 16) || (*p && *p != ' ' && *p != '\t')) {
                seterr(err, errlen, "line %zu: malformed address", lineno);
                goto bad;
            }
            if (s->depth == caps) s->locs = xrealloc(s->locs, (caps = caps ? caps * 2 : 16) * sizeof *s->locs);
            s->locs[s->depth++] = addr_index(&am, out, &caplocs, a ? a - 1 : 0);
        }
        /* gperftools' counts are raw samples: scale them as pprof does */
        double io = (double)c[0], ib = (double)c[1], ao = (double)c[2], ab = (double)c[3];
        s->n[0] = io;
        s->n[1] = ao;
        if (io) s->size = round_u64(ib / io);
        else if (ao) s->size = round_u64(ab / ao);
        if (scaled) {
            if (io && ib) {
                double sc = 1 / cli_one_minus_exp_neg(ib / io / (double)rate);
                io *= sc, ib *= sc;
            }
            if (ao && ab) {
                double sc = 1 / cli_one_minus_exp_neg(ab / ao / (double)rate);
                ao *= sc, ab *= sc;
            }
        }
        s->v[V_INUSE_OBJ] = io;
        s->v[V_INUSE_BYTES] = ib;
        s->v[V_ALLOC_OBJ] = ao;
        s->v[V_ALLOC_BYTES] = ab;
    }
    if (lineno == 0) {
        seterr(err, errlen, "empty file");
        goto bad;
    }
    free(am.keys);
    free(am.vals);
    free(buf);
    attach_maps(out);
    return 0;
bad:
    free(am.keys);
    free(am.vals);
    free(buf);
    cli_free_profile(out);
    return -1;
}

int cli_parse_profile(const uint8_t *data, size_t len, cli_profile_t *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    uint8_t *raw = NULL;
    size_t rawlen = 0;
    if (len >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        const char *e = NULL;
        if (cli_gunzip(data, len, &raw, &rawlen, &e)) {
            seterr(err, errlen, "%s", e);
            return -1;
        }
        raw = xrealloc(raw, rawlen + 1);
        raw[rawlen] = 0;
        data = raw;
        len = rawlen;
    }
    int rc;
    if (len == 0) {
        seterr(err, errlen, "empty file");
        rc = -1;
    } else {
        size_t i = 0;
        while (i < len && (data[i] == ' ' || data[i] == '\t')) i++;
        if (len - i >= 13 && !memcmp(data + i, "heap profile:", 13))
            rc = parse_legacy((const char *)data, len, p, err, errlen);
        else
            rc = parse_proto(data, len, p, err, errlen);
    }
    free(raw);
    return rc;
}

int cli_read_profile(const char *path, cli_profile_t *p, char *err, size_t errlen)
{
    uint8_t *data;
    size_t len;
    memset(p, 0, sizeof *p);
    if (cli_slurp(path, &data, &len, err, errlen)) return -1;
    char e[256];
    int rc = cli_parse_profile(data, len, p, e, sizeof e);
    if (rc) snprintf(err, errlen, "%s: %s", path, e);
    free(data);
    return rc;
}

/* ---- output files ----------------------------------------------------- */

/* Output goes to a temporary file beside OUT, renamed over it once
 * complete, so a failed or interrupted write never leaves half a file
 * ("-" is stdout).  test_output_files_are_atomic. */
FILE *cli_out_open(const char *path, cli_out_t *o)
{
    o->path = path;
    o->tmp[0] = 0;
    if (!strcmp(path, "-")) return o->f = stdout;
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f) fprintf(stderr, "profmalloc: %s: %s\n", o->tmp, strerror(errno));
    return o->f;
}

int cli_out_close(cli_out_t *o, bool ok)
{
    if (o->f == stdout) return fflush(stdout) == 0 && ok ? 0 : -1;
    ok = !ferror(o->f) && ok;
    if (fclose(o->f)) ok = false;
    if (ok && rename(o->tmp, o->path)) {
        fprintf(stderr, "profmalloc: %s: %s\n", o->path, strerror(errno));
        ok = false;
    }
    if (!ok) unlink(o->tmp);
    return ok ? 0 : -1;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int cli_write_profile_file(const char *path, const cli_profile_t *p)
{
    cli_out_t of;
    FILE *f = cli_out_open(path, &of);
    if (!f) return -1;
    int rc = ends_with(path, ".heap") || ends_with(path, ".txt") ? cli_write_legacy(f, p)
                                                                 : cli_write_pprof(f, p, !ends_with(path, ".pb"));
    if (cli_out_close(&of, rc == 0) == 0) return 0;
    fprintf(stderr, "profmalloc: %s: write failed\n", path);
    return -1;
}

/* ---- writers ---------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} obuf_t;

static void ob_put(obuf_t *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? b->cap * 2 : 4096;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

/* A value read from a corrupt file may be NaN or beyond int64: clamped, as
 * the cast of such a double is undefined (check-cli-fuzz under UBSan). */
static int64_t round_i64(double x)
{
    if (x != x) return 0;
    if (x >= 9.2e18) return INT64_MAX;
    if (x <= -9.2e18) return INT64_MIN;
    return (int64_t)(x + (x < 0 ? -0.5 : 0.5));
}

static void ob_varint(obuf_t *b, uint64_t v)
{
    uint8_t t[10];
    int n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    ob_put(b, t, (size_t)n);
}

static void ob_uint(obuf_t *b, unsigned field, uint64_t v)
{
    if (!v) return;
    ob_varint(b, (uint64_t)field << 3);
    ob_varint(b, v);
}

static void ob_bytes(obuf_t *b, unsigned field, const void *d, size_t n)
{
    ob_varint(b, (uint64_t)field << 3 | 2);
    ob_varint(b, n);
    ob_put(b, d, n);
}

typedef struct {
    char **s;
    size_t n, cap;
    uint32_t *hash; /* open addressing: index + 1, 0 empty */
    size_t hcap;
} strtab_t;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static uint64_t st_add(strtab_t *t, const char *s)
{
    if (!s) s = "";
    if (t->n * 2 >= t->hcap) {
        size_t cap = t->hcap ? t->hcap * 2 : 256;
        uint32_t *h = xcalloc(cap, sizeof *h);
        for (size_t i = 0; i < t->n; i++) {
            size_t x = str_hash(t->s[i]) & (cap - 1);
            while (h[x]) x = (x + 1) & (cap - 1);
            h[x] = (uint32_t)i + 1;
        }
        free(t->hash);
        t->hash = h;
        t->hcap = cap;
    }
    size_t x = str_hash(s) & (t->hcap - 1);
    for (; t->hash[x]; x = (x + 1) & (t->hcap - 1))
        if (!strcmp(t->s[t->hash[x] - 1], s)) return t->hash[x] - 1;
    if (t->n == t->cap) t->s = xrealloc(t->s, (t->cap = t->cap ? t->cap * 2 : 64) * sizeof *t->s);
    t->s[t->n] = (char *)s;
    t->hash[x] = (uint32_t)t->n + 1;
    return t->n++;
}

int cli_write_pprof(FILE *f, const cli_profile_t *p, bool gz)
{
    obuf_t out = {0}, sub = {0}, pk = {0};
    strtab_t st = {0};
    static const char *const types[4][2] = {
        {"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"inuse_objects", "count"}, {"inuse_space", "bytes"}};
    st_add(&st, "");
    for (int v = 0; v < 4; v++) {
        sub.n = 0;
        ob_uint(&sub, 1, st_add(&st, types[v][0]));
        ob_uint(&sub, 2, st_add(&st, types[v][1]));
        ob_bytes(&out, 1, sub.p, sub.n);
    }
    uint64_t bytes = st_add(&st, "bytes");
    for (size_t i = 0; i < p->nsamples; i++) {
        const cli_sample_t *s = &p->samples[i];
        sub.n = 0;
        pk.n = 0;
        for (uint32_t d = 0; d < s->depth; d++) ob_varint(&pk, s->locs[d] + 1);
        if (pk.n) ob_bytes(&sub, 1, pk.p, pk.n);
        pk.n = 0;
        for (int v = 0; v < 4; v++) ob_varint(&pk, (uint64_t)round_i64(s->v[v]));
        ob_bytes(&sub, 2, pk.p, pk.n);
        if (s->size) {
            pk.n = 0;
            ob_uint(&pk, 1, bytes);
            ob_uint(&pk, 3, s->size);
            ob_bytes(&sub, 3, pk.p, pk.n);
        }
        ob_bytes(&out, 2, sub.p, sub.n);
    }
    for (size_t i = 0; i < p->nmaps; i++) {
        const cli_map_t *m = &p->maps[i];
        sub.n = 0;
        ob_uint(&sub, 1, i + 1);
        ob_uint(&sub, 2, m->start);
        ob_uint(&sub, 3, m->limit);
        ob_uint(&sub, 4, m->offset);
        ob_uint(&sub, 5, st_add(&st, m->file));
        ob_uint(&sub, 6, st_add(&st, m->build_id));
        ob_bytes(&out, 3, sub.p, sub.n);
    }
    /* one function per location that has a name (names repeat little) */
    size_t nfunc = 0;
    for (size_t i = 0; i < p->nlocs; i++) {
        const cli_loc_t *l = &p->locs[i];
        const char *fn = l->sym_func ? l->sym_func : l->func;
        sub.n = 0;
        ob_uint(&sub, 1, i + 1);
        ob_uint(&sub, 2, l->map >= 0 ? (uint64_t)l->map + 1 : 0);
        ob_uint(&sub, 3, l->addr);
        if (fn) {
            pk.n = 0;
            ob_uint(&pk, 1, ++nfunc);
            ob_uint(&pk, 2, (uint64_t)(l->sym_func ? l->sym_line : l->line));
            ob_bytes(&sub, 4, pk.p, pk.n);
        }
        ob_bytes(&out, 4, sub.p, sub.n);
    }
    nfunc = 0;
    for (size_t i = 0; i < p->nlocs; i++) {
        const cli_loc_t *l = &p->locs[i];
        const char *fn = l->sym_func ? l->sym_func : l->func;
        const char *file = l->sym_func ? l->sym_file : l->file;
        if (!fn) continue;
        sub.n = 0;
        ob_uint(&sub, 1, ++nfunc);
        ob_uint(&sub, 2, st_add(&st, fn));
        ob_uint(&sub, 3, st_add(&st, fn));
        ob_uint(&sub, 4, st_add(&st, file));
        ob_bytes(&out, 5, sub.p, sub.n);
    }
    uint64_t space = st_add(&st, "space");
    size_t ncom0 = st.n;
    for (size_t i = 0; i < p->ncomments; i++) st_add(&st, p->comments[i]);
    uint64_t inuse = st_add(&st, "inuse_space");
    for (size_t i = 0; i < st.n; i++) ob_bytes(&out, 6, st.s[i], strlen(st.s[i]));
    ob_uint(&out, 9, (uint64_t)p->time_ns);
    sub.n = 0;
    ob_uint(&sub, 1, space);
    ob_uint(&sub, 2, bytes);
    ob_bytes(&out, 11, sub.p, sub.n);
    ob_uint(&out, 12, p->period);
    for (size_t i = 0; i < p->ncomments; i++) ob_uint(&out, 13, st_add(&st, p->comments[i]));
    (void)ncom0;
    ob_uint(&out, 14, inuse);
    int rc = 0;
    if (!gz) {
        if (out.n && fwrite(out.p, 1, out.n, f) != out.n) rc = -1;
    } else {
        /* gzip of stored blocks: any reader inflates them */
        static const uint8_t hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255};
        fwrite(hdr, 1, 10, f);
        size_t pos = 0;
        do {
            size_t k = out.n - pos > 65535 ? 65535 : out.n - pos;
            uint8_t bh[5] = {pos + k == out.n, (uint8_t)k, (uint8_t)(k >> 8), (uint8_t)~k, (uint8_t)(~k >> 8)};
            fwrite(bh, 1, 5, f);
            if (k) fwrite(out.p + pos, 1, k, f);
            pos += k;
        } while (pos < out.n);
        uint32_t crc = cli_crc32(0, out.p, out.n), sz = (uint32_t)out.n;
        uint8_t tr[8] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24),
                         (uint8_t)sz,  (uint8_t)(sz >> 8),  (uint8_t)(sz >> 16),  (uint8_t)(sz >> 24)};
        if (fwrite(tr, 1, 8, f) != 8) rc = -1;
    }
    free(out.p);
    free(sub.p);
    free(pk.p);
    free(st.s);
    free(st.hash);
    return rc;
}

/* Raw counts back from estimates, as the library's legacy writer does. */
static void raw_pair(double objs, double bytes, uint64_t size, uint64_t rate, uint64_t *ro, uint64_t *rb)
{
    *ro = *rb = 0;
    if (objs < 0.5 || bytes < 0.5) return;
    if (rate <= 1) {
        *ro = round_u64(objs);
        *rb = round_u64(bytes);
        return;
    }
    double avg = size ? (double)size : bytes / objs;
    double c = objs * cli_one_minus_exp_neg(avg / (double)rate);
    uint64_t n = c < 1 ? 1 : round_u64(c);
    *ro = n;
    *rb = round_u64((double)n * avg);
}

int cli_write_legacy(FILE *f, const cli_profile_t *p)
{
    uint64_t tot[4] = {0, 0, 0, 0};
    uint64_t rate = p->period;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            fprintf(f, "heap profile: %6llu: %8llu [%6llu: %8llu] @ ", (unsigned long long)tot[0],
                    (unsigned long long)tot[1], (unsigned long long)tot[2], (unsigned long long)tot[3]);
            if (rate > 1) fprintf(f, "heap_v2/%llu\n", (unsigned long long)rate);
            else fprintf(f, "heapprofile\n");
        }
        for (size_t i = 0; i < p->nsamples; i++) {
            const cli_sample_t *s = &p->samples[i];
            uint64_t v[4];
            raw_pair(s->v[V_INUSE_OBJ], s->v[V_INUSE_BYTES], s->size, rate, &v[0], &v[1]);
            raw_pair(s->v[V_ALLOC_OBJ], s->v[V_ALLOC_BYTES], s->size, rate, &v[2], &v[3]);
            if (pass == 0) {
                for (int k = 0; k < 4; k++) tot[k] += v[k];
                continue;
            }
            if (!v[0] && !v[2]) continue;
            fprintf(f, "%6llu: %8llu [%6llu: %8llu] @", (unsigned long long)v[0], (unsigned long long)v[1],
                    (unsigned long long)v[2], (unsigned long long)v[3]);
            for (uint32_t d = 0; d < s->depth; d++)
                fprintf(f, " 0x%016llx", (unsigned long long)(p->locs[s->locs[d]].addr + 1));
            fputc('\n', f);
        }
    }
    fprintf(f, "\nMAPPED_LIBRARIES:\n");
    for (size_t i = 0; i < p->nmaps; i++)
        fprintf(f, "%08llx-%08llx r-xp %08llx 00:00 0 %s\n", (unsigned long long)p->maps[i].start,
                (unsigned long long)p->maps[i].limit, (unsigned long long)p->maps[i].offset, p->maps[i].file);
    return ferror(f) ? -1 : 0;
}
