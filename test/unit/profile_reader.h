/* profile_reader.h — a reader of profmalloc's pprof files for the tests:
 * slurp a file, gunzip its stored deflate blocks (checking the CRC32 with
 * an independent bitwise implementation), decode profile.proto into
 * tprof_t and check what pprof enforces.  Header-only (static functions),
 * for test programs that include <cmocka.h> first; uses libc malloc. */
#ifndef PROFILE_READER_H
#define PROFILE_READER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    buf = realloc(buf, n + 1);
    buf[n] = 0;
    return buf;
}

/* ---- gunzip of stored deflate blocks, with an independent CRC32 --------- */

static inline uint32_t crc32_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Returns the payload (malloc'd); asserts the container is well formed. */
static inline uint8_t *gunzip_stored(const uint8_t *gz, size_t len, size_t *out_len, int *blocks)
{
    assert_true(len >= 18);
    assert_int_equal(gz[0], 0x1f);
    assert_int_equal(gz[1], 0x8b);
    assert_int_equal(gz[2], 8);    /* deflate */
    assert_int_equal(gz[3], 0);    /* no optional header fields */
    size_t pos = 10, n = 0;
    uint8_t *out = malloc(len);
    int final = 0;
    *blocks = 0;
    while (!final) {
        assert_true(pos + 5 <= len);
        final = gz[pos] & 1;
        assert_int_equal(gz[pos] >> 1, 0); /* BTYPE 00: stored */
        unsigned blen = gz[pos + 1] | gz[pos + 2] << 8;
        unsigned nlen = gz[pos + 3] | gz[pos + 4] << 8;
        assert_int_equal(blen ^ 0xffff, nlen);
        pos += 5;
        assert_true(pos + blen <= len);
        memcpy(out + n, gz + pos, blen);
        n += blen;
        pos += blen;
        ++*blocks;
    }
    assert_int_equal(pos + 8, len);
    assert_int_equal(le32(gz + pos), crc32_bitwise(out, n));
    assert_int_equal(le32(gz + pos + 4), (uint32_t)n);
    *out_len = n;
    return out;
}

/* ---- a small profile.proto reader -------------------------------------- */

typedef struct { uint64_t *v; size_t n, cap; } vec_t;

static inline void vec_push(vec_t *a, uint64_t x)
{
    if (a->n == a->cap) a->v = realloc(a->v, (a->cap = a->cap ? 2 * a->cap : 8) * sizeof *a->v);
    a->v[a->n++] = x;
}

#define GROW(arr, n) ((arr) = realloc((arr), ((n) + 1) * sizeof *(arr)), memset(&(arr)[n], 0, sizeof *(arr)), &(arr)[(n)++])

typedef struct { const uint8_t *p, *end; } rd_t;

static inline uint64_t rd_varint(rd_t *r)
{
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        assert_true(r->p < r->end);
        assert_true(shift < 64);
        uint8_t c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return v;
    }
}

/* Next field: returns false at the end.  Varints land in *v, bytes in *sub. */
static inline bool rd_field(rd_t *r, unsigned *field, unsigned *wire, uint64_t *v, rd_t *sub)
{
    if (r->p >= r->end) return false;
    uint64_t key = rd_varint(r);
    *field = (unsigned)(key >> 3);
    *wire = key & 7;
    assert_true(*field > 0);
    if (*wire == 0) {
        *v = rd_varint(r);
    } else if (*wire == 2) {
        uint64_t n = rd_varint(r);
        assert_true(n <= (uint64_t)(r->end - r->p));
        sub->p = r->p;
        sub->end = r->p + n;
        r->p += n;
    } else {
        fail_msg("unexpected wire type %u for field %u", *wire, *field);
    }
    return true;
}

/* A repeated integer field, packed or not. */
static inline void rd_repeated(vec_t *a, unsigned wire, uint64_t v, rd_t *sub)
{
    if (wire == 0) {
        vec_push(a, v);
        return;
    }
    while (sub->p < sub->end) vec_push(a, rd_varint(sub));
}

typedef struct { uint64_t type, unit; } tvt_t;
typedef struct {
    vec_t locs, vals;
    uint64_t lkey, lnum, lstr;
    int nlabels;
} tsample_t;
typedef struct { uint64_t id, start, limit, offset, file, build, hasfn; } tmap_t;
typedef struct { uint64_t id, map, addr; vec_t funcs; } tloc_t;
typedef struct { uint64_t id, name, sys, file; } tfunc_t;
typedef struct {
    tvt_t st[8], pt;
    size_t nst, ns, nm, nl, nf, nstr;
    tsample_t *s;
    tmap_t *m;
    tloc_t *l;
    tfunc_t *f;
    char **str;
    uint64_t time, dur, period, dflt;
    vec_t comments;
} tprof_t;

static inline tvt_t rd_value_type(rd_t r)
{
    tvt_t t = {0, 0};
    unsigned f, w;
    uint64_t v;
    rd_t sub;
    while (rd_field(&r, &f, &w, &v, &sub)) {
        if (f == 1) t.type = v;
        if (f == 2) t.unit = v;
    }
    return t;
}

static inline void rd_sample(tsample_t *s, rd_t r)
{
    unsigned f, w;
    uint64_t v;
    rd_t sub;
    while (rd_field(&r, &f, &w, &v, &sub)) {
        if (f == 1) rd_repeated(&s->locs, w, v, &sub);
        if (f == 2) rd_repeated(&s->vals, w, v, &sub);
        if (f == 3) {
            unsigned f2, w2;
            uint64_t v2;
            rd_t sub2;
            s->nlabels++;
            while (rd_field(&sub, &f2, &w2, &v2, &sub2)) {
                if (f2 == 1) s->lkey = v2;
                if (f2 == 2) s->lstr = v2;
                if (f2 == 3) s->lnum = v2;
            }
        }
    }
}

static inline void rd_profile(tprof_t *p, const uint8_t *data, size_t len)
{
    memset(p, 0, sizeof *p);
    rd_t r = {data, data + len}, sub;
    unsigned f, w;
    uint64_t v;
    while (rd_field(&r, &f, &w, &v, &sub)) {
        unsigned f2, w2;
        uint64_t v2;
        rd_t s2;
        switch (f) {
        case 1:
            assert_true(p->nst < 8);
            p->st[p->nst++] = rd_value_type(sub);
            break;
        case 2: rd_sample(GROW(p->s, p->ns), sub); break;
        case 3: {
            tmap_t *m = GROW(p->m, p->nm);
            while (rd_field(&sub, &f2, &w2, &v2, &s2)) {
                if (f2 == 1) m->id = v2;
                if (f2 == 2) m->start = v2;
                if (f2 == 3) m->limit = v2;
                if (f2 == 4) m->offset = v2;
                if (f2 == 5) m->file = v2;
                if (f2 == 6) m->build = v2;
                if (f2 >= 7 && f2 <= 9) m->hasfn |= v2;
            }
            break;
        }
        case 4: {
            tloc_t *l = GROW(p->l, p->nl);
            while (rd_field(&sub, &f2, &w2, &v2, &s2)) {
                if (f2 == 1) l->id = v2;
                if (f2 == 2) l->map = v2;
                if (f2 == 3) l->addr = v2;
                if (f2 == 4) {
                    unsigned f3, w3;
                    uint64_t v3, fn = 0;
                    rd_t s3;
                    while (rd_field(&s2, &f3, &w3, &v3, &s3))
                        if (f3 == 1) fn = v3;
                    vec_push(&l->funcs, fn);
                }
            }
            break;
        }
        case 5: {
            tfunc_t *fn = GROW(p->f, p->nf);
            while (rd_field(&sub, &f2, &w2, &v2, &s2)) {
                if (f2 == 1) fn->id = v2;
                if (f2 == 2) fn->name = v2;
                if (f2 == 3) fn->sys = v2;
                if (f2 == 4) fn->file = v2;
            }
            break;
        }
        case 6: {
            assert_int_equal(w, 2);
            char **sp = GROW(p->str, p->nstr);
            *sp = malloc((size_t)(sub.end - sub.p) + 1);
            memcpy(*sp, sub.p, (size_t)(sub.end - sub.p));
            (*sp)[sub.end - sub.p] = 0;
            break;
        }
        case 9: p->time = v; break;
        case 10: p->dur = v; break;
        case 11: p->pt = rd_value_type(sub); break;
        case 12: p->period = v; break;
        case 13: rd_repeated(&p->comments, w, v, &sub); break;
        case 14: p->dflt = v; break;
        default: fail_msg("unexpected Profile field %u", f);
        }
    }
}

static inline void free_profile(tprof_t *p)
{
    for (size_t i = 0; i < p->ns; i++) {
        free(p->s[i].locs.v);
        free(p->s[i].vals.v);
    }
    for (size_t i = 0; i < p->nl; i++) free(p->l[i].funcs.v);
    for (size_t i = 0; i < p->nstr; i++) free(p->str[i]);
    free(p->s);
    free(p->m);
    free(p->l);
    free(p->f);
    free(p->str);
    free(p->comments.v);
}

static inline const char *S(const tprof_t *p, uint64_t idx)
{
    assert_true(idx < p->nstr);
    return p->str[idx];
}

static inline const tmap_t *map_by_id(const tprof_t *p, uint64_t id)
{
    for (size_t i = 0; i < p->nm; i++)
        if (p->m[i].id == id) return &p->m[i];
    return NULL;
}

static inline const tloc_t *loc_by_id(const tprof_t *p, uint64_t id)
{
    for (size_t i = 0; i < p->nl; i++)
        if (p->l[i].id == id) return &p->l[i];
    return NULL;
}

static inline const tfunc_t *func_by_id(const tprof_t *p, uint64_t id)
{
    for (size_t i = 0; i < p->nf; i++)
        if (p->f[i].id == id) return &p->f[i];
    return NULL;
}

static inline const tloc_t *loc_by_addr(const tprof_t *p, uint64_t addr)
{
    for (size_t i = 0; i < p->nl; i++)
        if (p->l[i].addr == addr) return &p->l[i];
    return NULL;
}

/* The name of a location's (only) function, or NULL. */
static inline const char *loc_func_name(const tprof_t *p, const tloc_t *l)
{
    if (l->funcs.n != 1) return NULL;
    const tfunc_t *f = func_by_id(p, l->funcs.v[0]);
    assert_non_null(f);
    return S(p, f->name);
}

/* What pprof enforces, and more: ids non-zero and unique, references
 * resolve, one value per sample type, string_table[0] == "". */
static inline void check_integrity(const tprof_t *p)
{
    assert_true(p->nstr >= 1);
    assert_string_equal(p->str[0], "");
    for (size_t i = 0; i < p->nst; i++) {
        S(p, p->st[i].type);
        S(p, p->st[i].unit);
    }
    S(p, p->pt.type);
    S(p, p->pt.unit);
    S(p, p->dflt);
    for (size_t i = 0; i < p->comments.n; i++) S(p, p->comments.v[i]);
    for (size_t i = 0; i < p->nm; i++) {
        assert_true(p->m[i].id != 0);
        for (size_t j = 0; j < i; j++) assert_true(p->m[j].id != p->m[i].id);
        S(p, p->m[i].file);
        S(p, p->m[i].build);
        assert_true(p->m[i].start < p->m[i].limit);
    }
    for (size_t i = 0; i < p->nf; i++) {
        assert_true(p->f[i].id != 0);
        for (size_t j = 0; j < i; j++) assert_true(p->f[j].id != p->f[i].id);
        S(p, p->f[i].name);
        S(p, p->f[i].sys);
        S(p, p->f[i].file);
    }
    for (size_t i = 0; i < p->nl; i++) {
        const tloc_t *l = &p->l[i];
        assert_true(l->id != 0);
        for (size_t j = 0; j < i; j++) assert_true(p->l[j].id != l->id);
        if (l->map) {
            const tmap_t *m = map_by_id(p, l->map);
            assert_non_null(m);
            assert_true(l->addr >= m->start && l->addr < m->limit);
        }
        for (size_t k = 0; k < l->funcs.n; k++) assert_non_null(func_by_id(p, l->funcs.v[k]));
    }
    for (size_t i = 0; i < p->ns; i++) {
        assert_int_equal(p->s[i].vals.n, p->nst);
        for (size_t k = 0; k < p->s[i].locs.n; k++)
            assert_non_null(loc_by_id(p, p->s[i].locs.v[k]));
        S(p, p->s[i].lkey);
    }
}

static inline void load_profile(tprof_t *p, const char *path, int *blocks)
{
    size_t gzlen, len;
    uint8_t *gz = slurp(path, &gzlen);
    int nb;
    uint8_t *raw = gunzip_stored(gz, gzlen, &len, &nb);
    if (blocks) *blocks = nb;
    rd_profile(p, raw, len);
    check_integrity(p);
    free(raw);
    free(gz);
}

#endif
