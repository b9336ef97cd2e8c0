/* prof_http.c — the /debug/pprof endpoint: a small HTTP/1.1 server on a
 * thread of its own (PROFMALLOC_HTTP, profmalloc_http_start) serving the
 * heap profile, its delta over ?seconds=N, the peak profile, pprof's symbol
 * protocol, the allocator's statistics and the timeline file, one
 * connection and one request at a time.
 * Must never: run on an allocator path or call malloc (every buffer is
 * mmap'd, every body goes through a memfd), hold a lock of its own while
 * it calls into the profiler, or serve in a forked child.
 * Lock: ctl_lock orders start and stop; the server thread takes none of
 * its own (doc/design.md, "The HTTP endpoint"). */
#include "pm_hunt.h"
#include "pm_prof_encode.h"
#include "pm_prof_pprof.h"
#include "pm_prof_symbols.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
    HEAD_MAX = 16 << 10,       /* request line and headers */
    BODY_MAX = 64 << 10,       /* a POST to /debug/pprof/symbol */
    HEADERS_MAX = 64,
    HEAD_TIMEOUT_MS = 3000,    /* the whole header block, from accept */
    BODY_TIMEOUT_MS = 10000,
    SEND_TIMEOUT_MS = 30000,   /* the whole response */
    SECONDS_MAX = 3600,        /* ?seconds= */
    BACKLOG = 16,
    SYMBOLS_MAX = 8192,        /* addresses in one symbol request */
};

static pm_lock_t ctl_lock = PM_LOCK_INIT;
static struct {
    int running;
    int listen_fd, wake_fd;
    pthread_t thread;
    int port;
    char *mem; /* HEAD_MAX + BODY_MAX + 1, mmap'd */
} srv = {0, -1, -1, 0, 0, NULL};
static _Atomic int atfork_done;

/* ---- small helpers ----------------------------------------------------- */

static int has_prefix(const char *s, size_t n, const char *p)
{
    size_t k = pm_fmt_strlen(p);
    return n >= k && memcmp(s, p, k) == 0;
}

static int same(const char *s, size_t n, const char *lit)
{
    return n == pm_fmt_strlen(lit) && memcmp(s, lit, n) == 0;
}

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int same_ci(const char *s, size_t n, const char *lit)
{
    if (n != pm_fmt_strlen(lit)) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s[i]) != lit[i]) return 0;
    return 1;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = lower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static uint64_t elapsed_ms(uint64_t since_ns) { return (pm_os_monotonic_ns() - since_ns) / 1000000; }

/* Waits for fd to be ready for `events`, or for the stop signal, until
 * deadline_ms after start_ns: 1 ready, 0 timed out, -1 stopping. */
static int wait_fd(int fd, short events, uint64_t start_ns, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t gone = elapsed_ms(start_ns);
        if (gone >= deadline_ms) return 0;
        struct pollfd p[2] = {{srv.wake_fd, POLLIN, 0}, {fd, events, 0}};
        int n = poll(p, fd >= 0 ? 2 : 1, (int)(deadline_ms - gone));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || (p[0].revents & POLLIN)) return -1;
        if (n > 0) return 1;
    }
}

static int send_all(int fd, const void *data, size_t len, uint64_t start_ns)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        if (wait_fd(fd, POLLOUT, start_ns, SEND_TIMEOUT_MS) != 1) return -1;
    }
    return 0;
}

/* ---- gzip (stored blocks) and profile.proto, read and written ---------- */

/* The profile inside our own writer's gzip (stored blocks only). */
static int gunzip_stored(const uint8_t *z, size_t n, pm_ebuf_t *out)
{
    if (n < 18 || z[0] != 0x1f || z[1] != 0x8b || z[2] != 8 || z[3] != 0) return -1;
    size_t off = 10;
    for (;;) {
        if (off + 5 > n) return -1;
        int final = z[off] & 1, type = (z[off] >> 1) & 3;
        size_t len = z[off + 1] | (size_t)z[off + 2] << 8;
        size_t nlen = z[off + 3] | (size_t)z[off + 4] << 8;
        if (type != 0 || (len ^ nlen) != 0xffff || off + 5 + len > n) return -1;
        pm_encode_put(out, z + off + 5, len);
        off += 5 + len;
        if (final) break;
    }
    return out->failed ? -1 : 0;
}

typedef struct pb {
    const uint8_t *p, *end;
    int bad;
} pb_t;

static uint64_t get_varint(pb_t *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) break;
        uint8_t c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return v;
    }
    r->bad = 1;
    return 0;
}

/* One field: its number, and either its varint (*v) or its bytes. */
typedef struct pb_field {
    unsigned num, wire;
    uint64_t v;
    const uint8_t *d;
    size_t n;
    const uint8_t *start; /* the field's first byte (key included) */
} pb_field_t;

static int next_field(pb_t *r, pb_field_t *f)
{
    if (r->bad || r->p >= r->end) return 0;
    f->start = r->p;
    uint64_t key = get_varint(r);
    f->num = (unsigned)(key >> 3);
    f->wire = key & 7;
    f->d = NULL;
    f->n = 0;
    if (f->wire == 0) f->v = get_varint(r);
    else if (f->wire == 2) {
        uint64_t n = get_varint(r);
        if (n > (uint64_t)(r->end - r->p)) r->bad = 1;
        else {
            f->d = r->p;
            f->n = n;
            r->p += n;
        }
    } else if (f->wire == 1 || f->wire == 5) {
        size_t n = f->wire == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n) r->bad = 1;
        else r->p += n;
    } else r->bad = 1;
    return !r->bad;
}

/* Collects a repeated integer field's values (packed or not) into out[cap];
 * *n counts them all. */
static int each_int(const pb_field_t *f, uint64_t *out, size_t cap, size_t *n)
{
    if (f->wire == 0) {
        if (*n < cap) out[*n] = f->v;
        (*n)++;
        return 0;
    }
    if (f->wire != 2) return -1;
    pb_t r = {f->d, f->d + f->n, 0};
    while (r.p < r.end && !r.bad) {
        uint64_t v = get_varint(&r);
        if (*n < cap) out[*n] = v;
        (*n)++;
    }
    return r.bad ? -1 : 0;
}

/* The parts of a profile a delta and the allocs view need. */
enum { VALUES_MAX = 8, DEPTH_MAX = 256 };
typedef struct str { const uint8_t *p; size_t n; } str_t;
typedef struct loc { uint64_t id, addr; } loc_t;
typedef struct sample {
    const uint8_t *d; /* the sample message */
    size_t n;
    uint64_t hash;
    size_t nvalues;
    int64_t values[VALUES_MAX];
} sample_t;

typedef struct profile {
    pm_ebuf_t raw;                      /* the decompressed message */
    pm_ebuf_t strs, locs, samples; /* arrays of str_t, loc_t, sample_t */
    uint64_t time_ns;
} profile_t;

#define ARR(b, T) ((T *)(b).p)
#define CNT(b, T) ((b).len / sizeof(T))

static void profile_free(profile_t *p)
{
    pm_encode_free(&p->raw);
    pm_encode_free(&p->strs);
    pm_encode_free(&p->locs);
    pm_encode_free(&p->samples);
}

static int locs_sorted(const pm_ebuf_t *locs)
{
    const loc_t *l = ARR(*locs, loc_t);
    for (size_t i = 1; i < CNT(*locs, loc_t); i++)
        if (l[i].id <= l[i - 1].id) return 0;
    return 1;
}

static const loc_t *loc_by_id(const profile_t *p, uint64_t id)
{
    const loc_t *l = ARR(p->locs, loc_t);
    size_t lo = 0, hi = CNT(p->locs, loc_t);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l[mid].id == id) return &l[mid];
        if (l[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static str_t str_at(const profile_t *p, uint64_t i)
{
    return i < CNT(p->strs, str_t) ? ARR(p->strs, str_t)[i] : (str_t){(const uint8_t *)"", 0};
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t mix_str(uint64_t h, str_t s)
{
    for (size_t i = 0; i < s.n; i++) h = mix(h, s.p[i]);
    return mix(h, s.n);
}

/* What identifies a sample across two profiles of one process: its stack's
 * addresses and its labels, by value.  Writes them to key[] (cap words). */
static size_t sample_key(const profile_t *p, const sample_t *s, uint64_t *key, size_t cap, uint64_t *hash)
{
    pb_t r = {s->d, s->d + s->n, 0};
    pb_field_t f;
    size_t k = 0;
    uint64_t h = 1;
    while (next_field(&r, &f)) {
        if (f.num == 1) {
            uint64_t ids[DEPTH_MAX];
            size_t n = 0;
            each_int(&f, ids, DEPTH_MAX, &n);
            for (size_t i = 0; i < n && i < DEPTH_MAX; i++) {
                const loc_t *l = loc_by_id(p, ids[i]);
                uint64_t a = l ? l->addr : ~(uint64_t)0;
                h = mix(h, a);
                if (k < cap) key[k++] = a;
            }
        } else if (f.num == 3 && f.wire == 2) {
            pb_t lr = {f.d, f.d + f.n, 0};
            pb_field_t g;
            h = mix(h, 0xabcd);
            while (next_field(&lr, &g)) {
                if (g.wire != 0) continue;
                h = mix(h, g.num);
                if (g.num == 1 || g.num == 2 || g.num == 4) h = mix_str(h, str_at(p, g.v));
                else h = mix(h, g.v);
            }
        }
    }
    *hash = h;
    return k;
}

static int profile_parse(profile_t *p)
{
    pb_t r = {p->raw.p, p->raw.p + p->raw.len, 0};
    pb_field_t f;
    while (next_field(&r, &f)) {
        if (f.num == 6 && f.wire == 2) {
            str_t s = {f.d, f.n};
            pm_encode_put(&p->strs, &s, sizeof s);
        } else if (f.num == 9 && f.wire == 0) {
            p->time_ns = f.v;
        } else if (f.num == 4 && f.wire == 2) {
            loc_t l = {0, 0};
            pb_t lr = {f.d, f.d + f.n, 0};
            pb_field_t g;
            while (next_field(&lr, &g)) {
                if (g.num == 1 && g.wire == 0) l.id = g.v;
                else if (g.num == 3 && g.wire == 0) l.addr = g.v;
            }
            if (lr.bad) return -1;
            pm_encode_put(&p->locs, &l, sizeof l);
        } else if (f.num == 2 && f.wire == 2) {
            sample_t s = {f.d, f.n, 0, 0, {0}};
            pb_t sr = {f.d, f.d + f.n, 0};
            pb_field_t g;
            uint64_t v[VALUES_MAX]; /* across fields: values may come unpacked */
            while (next_field(&sr, &g)) {
                if (g.num != 2) continue;
                size_t n = s.nvalues;
                if (each_int(&g, v + s.nvalues, VALUES_MAX - s.nvalues, &n) != 0) return -1;
                s.nvalues = n < VALUES_MAX ? n : VALUES_MAX;
                for (size_t i = 0; i < s.nvalues; i++) s.values[i] = (int64_t)v[i];
            }
            pm_encode_put(&p->samples, &s, sizeof s);
        }
    }
    if (r.bad || p->strs.failed || p->locs.failed || p->samples.failed) return -1;
    return locs_sorted(&p->locs) ? 0 : -1;
}

/* Reads a gzip'd profile from memfd fd and parses it. */
static int profile_load(int fd, profile_t *p)
{
    *p = (profile_t){0};
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0) return -1;
    void *z = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (z == MAP_FAILED) return -1;
    int rc = gunzip_stored(z, (size_t)size, &p->raw);
    munmap(z, (size_t)size);
    return rc == 0 ? profile_parse(p) : -1;
}

/* ---- the responses' bodies ---------------------------------------------- */

static int new_body(void) { return memfd_create("profmalloc-http", MFD_CLOEXEC); }

/* Makes alloc_space the default sample type of the message in out, whose
 * string table is p's, as Go's allocs profile has it. */
static void default_alloc_space(pm_ebuf_t *out, const profile_t *p)
{
    size_t n = CNT(p->strs, str_t), idx = n;
    for (size_t i = 0; i < n; i++)
        if (same((const char *)ARR(p->strs, str_t)[i].p, ARR(p->strs, str_t)[i].n, "alloc_space")) idx = i;
    if (idx == n) {
        pm_encode_key(out, 6, 2);
        pm_encode_varint(out, 11);
        pm_encode_put(out, "alloc_space", 11);
    }
    pm_encode_key(out, 14, 0); /* the last value of a field wins */
    pm_encode_varint(out, idx);
}

/* The delta p1 - p0, as Go's net/http/pprof serves ?seconds=N: every value
 * of every sample subtracted (in-use counts may go negative), samples that
 * did not change left out.  Buckets are never freed, so every sample of p0
 * is in p1. */
static int write_delta(int fd, profile_t *p0, profile_t *p1, int allocs)
{
    size_t n0 = CNT(p0->samples, sample_t), slots = 16;
    while (slots < 2 * n0 + 2) slots *= 2;
    pm_ebuf_t table = {0}, out = {0}, msg = {0}, packed = {0};
    int rc = -1;
    if (!pm_encode_reserve(&table, slots * sizeof(uint32_t))) goto done;
    uint32_t *slot = (uint32_t *)table.p; /* sample index + 1 */
    memset(slot, 0, slots * sizeof(uint32_t));
    /* the server thread's only; with the big arrays, off the pages of the
     * small variables every process touches */
    PM_SPARSE_BSS static uint64_t ka[DEPTH_MAX], kb[DEPTH_MAX];
    sample_t *s0 = ARR(p0->samples, sample_t);
    for (size_t i = 0; i < n0; i++) {
        sample_key(p0, &s0[i], ka, DEPTH_MAX, &s0[i].hash);
        size_t j = s0[i].hash & (slots - 1);
        while (slot[j]) j = (j + 1) & (slots - 1);
        slot[j] = (uint32_t)i + 1;
    }
    pb_t r = {p1->raw.p, p1->raw.p + p1->raw.len, 0};
    pb_field_t f;
    while (next_field(&r, &f))
        if (f.num != 2 && f.num != 9 && f.num != 10) pm_encode_put(&out, f.start, (size_t)(r.p - f.start));
    sample_t *s1 = ARR(p1->samples, sample_t);
    for (size_t i = 0; i < CNT(p1->samples, sample_t); i++) {
        uint64_t h;
        size_t nk = sample_key(p1, &s1[i], ka, DEPTH_MAX, &h);
        const sample_t *old = NULL;
        for (size_t j = h & (slots - 1); slot[j]; j = (j + 1) & (slots - 1)) {
            sample_t *c = &s0[slot[j] - 1];
            if (c->hash != h) continue;
            uint64_t hc;
            size_t nc = sample_key(p0, c, kb, DEPTH_MAX, &hc);
            if (nc == nk && memcmp(ka, kb, nk * sizeof ka[0]) == 0) {
                old = c;
                break;
            }
        }
        int changed = 0;
        int64_t d[VALUES_MAX];
        for (size_t v = 0; v < s1[i].nvalues; v++) {
            d[v] = s1[i].values[v] - (old && v < old->nvalues ? old->values[v] : 0);
            changed |= d[v] != 0;
        }
        if (!changed) continue;
        msg.len = 0;
        pb_t sr = {s1[i].d, s1[i].d + s1[i].n, 0};
        pb_field_t g;
        while (next_field(&sr, &g))
            if (g.num != 2) pm_encode_put(&msg, g.start, (size_t)(sr.p - g.start));
        packed.len = 0;
        for (size_t v = 0; v < s1[i].nvalues; v++) pm_encode_varint(&packed, (uint64_t)d[v]);
        pm_encode_key(&msg, 2, 2);
        pm_encode_varint(&msg, packed.len);
        pm_encode_put(&msg, packed.p, packed.len);
        pm_encode_key(&out, 2, 2);
        pm_encode_varint(&out, msg.len);
        pm_encode_put(&out, msg.p, msg.len);
    }
    pm_encode_key(&out, 9, 0);
    pm_encode_varint(&out, p1->time_ns);
    pm_encode_key(&out, 10, 0);
    pm_encode_varint(&out, p1->time_ns > p0->time_ns ? p1->time_ns - p0->time_ns : 0);
    if (allocs) default_alloc_space(&out, p1);
    if (!r.bad && !out.failed && !msg.failed && !packed.failed && !table.failed)
        rc = pm_encode_gzip(fd, out.p, out.len);
done:
    pm_encode_free(&table);
    pm_encode_free(&out);
    pm_encode_free(&msg);
    pm_encode_free(&packed);
    return rc;
}

static int write_allocs(int fd, const profile_t *p)
{
    pm_ebuf_t out = {0};
    pm_encode_put(&out, p->raw.p, p->raw.len);
    default_alloc_space(&out, p);
    int rc = out.failed ? -1 : pm_encode_gzip(fd, out.p, out.len);
    pm_encode_free(&out);
    return rc;
}

static int dump_profile(int *fd)
{
    *fd = new_body();
    if (*fd < 0) return -1;
    return profmalloc_dump_fd(*fd, PROFMALLOC_FORMAT_PPROF);
}

/* 0 done, -1 failed, 1 stopped while waiting. */
static int serve_profile(int body, int allocs, int64_t seconds)
{
    int fd0 = -1, fd1 = -1, rc = -1;
    profile_t p0 = {0}, p1 = {0};
    if (seconds > 0) {
        if (dump_profile(&fd0) != 0 || profile_load(fd0, &p0) != 0) goto done;
        if (wait_fd(-1, 0, pm_os_monotonic_ns(), (uint64_t)seconds * 1000) < 0) {
            rc = 1;
            goto done;
        }
    }
    if (seconds <= 0 && !allocs) {
        rc = profmalloc_dump_fd(body, PROFMALLOC_FORMAT_PPROF);
        goto done;
    }
    if (dump_profile(&fd1) != 0 || profile_load(fd1, &p1) != 0) goto done;
    rc = seconds > 0 ? write_delta(body, &p0, &p1, allocs) : write_allocs(body, &p1);
done:
    if (fd0 >= 0) close(fd0);
    if (fd1 >= 0) close(fd1);
    profile_free(&p0);
    profile_free(&p1);
    return rc;
}

/* pprof's symbol protocol: "0xADDR+0xADDR..." in, "0xADDR name" lines out,
 * named by the profile writer's own symbolizer (prof_symbols.c). */
static int serve_symbols(int body, const char *q, size_t qn)
{
    char line[512];
    pm_buf_t b;
    pm_buf_init(&b, line, sizeof line, body);
    pm_buf_str(&b, "num_symbols: 1\n");
    pm_symbols_t w;
    int rc = pm_symbols_init(&w) ? 0 : -1;
    size_t n = 0;
    for (size_t i = 0; rc == 0 && i < qn && n < SYMBOLS_MAX;) {
        size_t j = i;
        while (j < qn && q[j] != '+') j++;
        uint64_t v = 0;
        int ok = 0;
        if (j - i > 2 && q[i] == '0' && (q[i + 1] == 'x' || q[i + 1] == 'X')) {
            ok = 1;
            for (size_t k = i + 2; k < j && ok; k++) {
                int h = hexval((unsigned char)q[k]);
                if (h < 0 || v >> 60) ok = 0;
                else v = v << 4 | (uint64_t)h;
            }
        } else if (j > i) {
            ok = 1;
            for (size_t k = i; k < j && ok; k++) {
                if (q[k] < '0' || q[k] > '9' || v > UINT64_MAX / 10) ok = 0;
                else v = v * 10 + (uint64_t)(q[k] - '0');
            }
        }
        if (ok && v && v != UINT64_MAX) {
            pm_symbols_loc(&w, (uintptr_t)v + 1); /* the symbolizer looks up pc - 1 */
            n++;
        }
        i = j + 1;
    }
    if (rc == 0 && (pm_symbols_failed(&w) || pm_symbols_resolve(&w) != 0 || pm_symbols_failed(&w)))
        rc = -1;
    const pm_sym_loc_t *l = PM_SYM_LOCS(&w);
    for (size_t i = 0; rc == 0 && i < PM_SYM_COUNT(w.locs, pm_sym_loc_t); i++) {
        if (!l[i].func) continue;
        const pm_sym_str_t *name = &PM_SYM_STRS(&w)[PM_SYM_FUNCS(&w)[l[i].func - 1].name];
        if (!name->len) continue;
        pm_buf_hex(&b, l[i].pc - 1);
        pm_buf_str(&b, " ");
        char nm[256];
        for (size_t off = 0; off < name->len; off += sizeof nm - 1) {
            size_t c = name->len - off < sizeof nm - 1 ? name->len - off : sizeof nm - 1;
            memcpy(nm, w.strdata.p + name->off + off, c);
            nm[c] = 0;
            pm_buf_str(&b, nm);
        }
        pm_buf_str(&b, "\n");
    }
    pm_symbols_free(&w);
    return pm_buf_flush(&b) == 0 ? rc : -1;
}

static const struct stat_field {
    const char *name;
    size_t off;
} stat_fields[] = {
#define F(x) {#x, offsetof(profmalloc_stats_t, x)}
    F(in_use), F(requested), F(mapped), F(resident_estimate), F(thread_cache),
    F(central_cache), F(fragmentation), F(pageheap_free), F(released), F(metadata),
    F(threads), F(lock_contention), F(sample_rate), F(samples_live),
#undef F
};

static int serve_stats(int body, int json)
{
    profmalloc_stats_t st;
    profmalloc_get_stats(&st);
    char line[256];
    pm_buf_t b;
    pm_buf_init(&b, line, sizeof line, body);
    if (json) pm_buf_str(&b, "{");
    for (size_t i = 0; i < PM_ARRAY_LEN(stat_fields); i++) {
        uint64_t v;
        memcpy(&v, (const char *)&st + stat_fields[i].off, sizeof v);
        if (json) pm_buf_str(&b, i ? ", \"" : "\"");
        pm_buf_str(&b, stat_fields[i].name);
        pm_buf_str(&b, json ? "\": " : ": ");
        pm_buf_u64(&b, v);
        if (!json) pm_buf_str(&b, "\n");
    }
    if (json) pm_buf_str(&b, "}\n");
    return pm_buf_flush(&b);
}

static int serve_index(int body)
{
    profmalloc_stats_t st;
    profmalloc_get_stats(&st);
    char line[512];
    pm_buf_t b;
    pm_buf_init(&b, line, sizeof line, body);
    pm_buf_str(&b,
               "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n/debug/pprof/\n"
               "<br>\n<p>Set debug=1 as a query parameter to export in legacy text format</p>\n"
               "<br>\nTypes of profiles available:\n<table>\n"
               "<thead><td>Count</td><td>Profile</td></thead>\n");
    static const char *const names[] = {"allocs", "heap", "peak"};
    for (size_t i = 0; i < PM_ARRAY_LEN(names); i++) {
        pm_buf_str(&b, "<tr><td>");
        pm_buf_u64(&b, st.samples_live);
        pm_buf_str(&b, "</td><td><a href='");
        pm_buf_str(&b, names[i]);
        pm_buf_str(&b, "?debug=1'>");
        pm_buf_str(&b, names[i]);
        pm_buf_str(&b, "</a></td></tr>\n");
    }
    pm_buf_str(&b,
               "</table>\n<a href=\"/debug/profmalloc/stats\">allocator statistics</a>"
               " (<a href=\"/debug/profmalloc/stats?format=json\">json</a>)\n<br>\n"
               "<a href=\"/debug/profmalloc/timeline\">timeline</a> (when PROFMALLOC_TIMELINE "
               "records one)\n<br>\n"
               "<p>\nProfile Descriptions:\n<ul>\n"
               "<li><div class=profile-name>allocs: </div> A sampling of all past memory "
               "allocations (profmalloc, the C heap)</li>\n"
               "<li><div class=profile-name>heap: </div> A sampling of memory allocations of "
               "live objects (profmalloc, the C heap). You can specify the gc GET parameter "
               "(accepted and ignored) and seconds=N for the change over N seconds.</li>\n"
               "<li><div class=profile-name>peak: </div> The live allocations at the highest "
               "live bytes so far (profmalloc, the C heap)</li>\n"
               "<li><div class=profile-name>symbol: </div> pprof's symbol lookup "
               "(POST 0xADDR+0xADDR...)</li>\n"
               "</ul>\n</p>\n</body>\n</html>\n");
    return pm_buf_flush(&b);
}

/* ---- requests -------------------------------------------------------------- */

typedef struct request {
    const char *method, *path, *query;
    size_t method_n, path_n, query_n;
    const char *body;
    size_t body_n;
} request_t;

static const char *reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Sends status and headers, then body (a memfd, or -1 for `text`). */
static void respond(int c, uint64_t start, int status, const char *type, const char *extra,
                    int body, const char *text, int head_only)
{
    size_t len = 0;
    void *map = NULL;
    if (body >= 0) {
        off_t end = lseek(body, 0, SEEK_END);
        if (end < 0) end = 0;
        len = (size_t)end;
        if (len) {
            map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, body, 0);
            if (map == MAP_FAILED) {
                map = NULL;
                status = 500;
                text = "profile unavailable\n";
                type = "text/plain; charset=utf-8";
                extra = NULL;
                body = -1;
            }
        }
    }
    if (body < 0) len = text ? pm_fmt_strlen(text) : 0;
    char h[640];
    pm_buf_t b;
    pm_buf_init(&b, h, sizeof h, -1);
    pm_buf_str(&b, "HTTP/1.1 ");
    pm_buf_u64(&b, (uint64_t)status);
    pm_buf_str(&b, " ");
    pm_buf_str(&b, reason(status));
    pm_buf_str(&b, "\r\nContent-Type: ");
    pm_buf_str(&b, type);
    pm_buf_str(&b, "\r\nContent-Length: ");
    pm_buf_u64(&b, len);
    pm_buf_str(&b, "\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nConnection: close\r\n");
    if (extra) pm_buf_str(&b, extra);
    pm_buf_str(&b, "\r\n");
    if (send_all(c, h, b.len, start) == 0 && !head_only) {
        if (body >= 0 && map) send_all(c, map, len, start);
        else if (body < 0 && len) send_all(c, text, len, start);
    }
    if (map) munmap(map, len);
}

static void fail(int c, uint64_t start, int status, const char *msg)
{
    respond(c, start, status, "text/plain; charset=utf-8", status == 405 ? "Allow: GET, HEAD, POST\r\n" : NULL,
            -1, msg, 0);
}

/* The value of query parameter `name` (percent-decoded into out), or -1. */
static int query_get(const request_t *r, const char *name, char *out, size_t cap)
{
    size_t k = pm_fmt_strlen(name);
    for (size_t i = 0; i < r->query_n;) {
        size_t j = i;
        while (j < r->query_n && r->query[j] != '&') j++;
        if (j - i >= k && memcmp(r->query + i, name, k) == 0 &&
            (j - i == k || r->query[i + k] == '=')) {
            size_t n = 0;
            for (size_t p = i + k + 1; p < j; p++) {
                int ch = (unsigned char)r->query[p];
                if (ch == '+') ch = ' ';
                else if (ch == '%') {
                    int hi = p + 2 < j ? hexval((unsigned char)r->query[p + 1]) : -1;
                    int lo = p + 2 < j ? hexval((unsigned char)r->query[p + 2]) : -1;
                    if (hi < 0 || lo < 0) return -2;
                    ch = hi << 4 | lo;
                    p += 2;
                }
                if (n + 1 >= cap) return -2;
                out[n++] = (char)ch;
            }
            out[n] = 0;
            return (int)n;
        }
        i = j + 1;
    }
    return -1;
}

/* A decimal integer parameter: 0 and *v set, 1 absent, -1 malformed. */
static int query_int(const request_t *r, const char *name, int64_t *v)
{
    char s[32];
    int n = query_get(r, name, s, sizeof s);
    if (n == -1) return 1;
    if (n <= 0) return -1;
    int neg = s[0] == '-';
    int64_t x = 0;
    for (int i = neg; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || x > (INT64_MAX - 9) / 10) return -1;
        x = x * 10 + (s[i] - '0');
    }
    if (n == neg) return -1;
    *v = neg ? -x : x;
    return 0;
}

static void route(int c, uint64_t start, const request_t *r)
{
    int get = same(r->method, r->method_n, "GET"), head = same(r->method, r->method_n, "HEAD");
    int post = same(r->method, r->method_n, "POST");
    const char *p = r->path;
    size_t n = r->path_n;
    int body = -1;
    static const char text[] = "text/plain; charset=utf-8";
    if (same(p, n, "/debug/pprof/symbol")) {
        if (!get && !head && !post) { fail(c, start, 405, "method not allowed\n"); return; }
        body = new_body();
        if (body < 0 || serve_symbols(body, post ? r->body : r->query, post ? r->body_n : r->query_n) != 0)
            fail(c, start, 500, "symbolisation failed\n");
        else respond(c, start, 200, text, NULL, body, NULL, head);
    } else if (same(p, n, "/debug/pprof/heap") || same(p, n, "/debug/pprof/allocs")) {
        int allocs = p[13] == 'a';
        int64_t debug = 0, seconds = 0;
        if (!get && !head) { fail(c, start, 405, "method not allowed\n"); return; }
        int dk = query_int(r, "debug", &debug), sk = query_int(r, "seconds", &seconds);
        if (dk < 0) { fail(c, start, 400, "invalid value for \"debug\"\n"); return; }
        if (sk < 0 || (sk == 0 && (seconds <= 0 || seconds > SECONDS_MAX)))
            { fail(c, start, 400, "invalid value for \"seconds\"\n"); return; }
        if (sk == 0 && debug) { fail(c, start, 400, "seconds and debug params are incompatible\n"); return; }
        body = new_body();
        if (body < 0) { fail(c, start, 500, "no memory\n"); return; }
        if (debug) {
            if (profmalloc_dump_fd(body, PROFMALLOC_FORMAT_LEGACY) != 0)
                fail(c, start, 500, "profile unavailable\n");
            else respond(c, start, 200, text, NULL, body, NULL, head);
        } else {
            int rc = serve_profile(body, allocs, sk == 0 ? seconds : 0);
            const char *disp = sk == 0 ? (allocs ? "Content-Disposition: attachment; filename=\"allocs-delta\"\r\n"
                                                 : "Content-Disposition: attachment; filename=\"heap-delta\"\r\n")
                                       : (allocs ? "Content-Disposition: attachment; filename=\"allocs\"\r\n"
                                                 : "Content-Disposition: attachment; filename=\"heap\"\r\n");
            uint64_t now = pm_os_monotonic_ns(); /* the send's deadline starts after a delta's wait */
            if (rc == 0) respond(c, now, 200, "application/octet-stream", disp, body, NULL, head);
            else if (rc < 0) fail(c, now, 500, "profile unavailable\n");
        }
    } else if (same(p, n, "/debug/pprof/peak")) {
        int64_t debug = 0, seconds = 0;
        if (!get && !head) { fail(c, start, 405, "method not allowed\n"); return; }
        int dk = query_int(r, "debug", &debug), sk = query_int(r, "seconds", &seconds);
        if (dk < 0) { fail(c, start, 400, "invalid value for \"debug\"\n"); return; }
        /* a peak is one moment: there is no change over seconds to show */
        if (sk != 1) { fail(c, start, 400, "the peak profile takes no \"seconds\"\n"); return; }
        body = new_body();
        if (body < 0) { fail(c, start, 500, "no memory\n"); return; }
        if (pm_hunt_dump_peak_fd(body, debug ? PROFMALLOC_FORMAT_LEGACY : PROFMALLOC_FORMAT_PPROF) != 0)
            fail(c, start, 500, "profile unavailable\n");
        else if (debug) respond(c, start, 200, text, NULL, body, NULL, head);
        else respond(c, start, 200, "application/octet-stream",
                     "Content-Disposition: attachment; filename=\"peak\"\r\n", body, NULL, head);
    } else if (same(p, n, "/debug/profmalloc/timeline")) {
        if (!get && !head) { fail(c, start, 405, "method not allowed\n"); return; }
        body = new_body();
        int rc = body < 0 ? -1 : pm_timeline_copy_fd(body);
        if (rc == 1) fail(c, start, 404, "no timeline is being recorded (set PROFMALLOC_TIMELINE)\n");
        else if (rc != 0) fail(c, start, 500, "timeline unavailable\n");
        else respond(c, start, 200, text, NULL, body, NULL, head);
    } else if (same(p, n, "/debug/profmalloc/stats")) {
        char fmt[16];
        if (!get && !head) { fail(c, start, 405, "method not allowed\n"); return; }
        int json = query_get(r, "format", fmt, sizeof fmt) > 0 && pm_fmt_streq(fmt, "json");
        body = new_body();
        if (body < 0 || serve_stats(body, json) != 0) fail(c, start, 500, "no memory\n");
        else respond(c, start, 200, json ? "application/json" : text, NULL, body, NULL, head);
    } else if (same(p, n, "/debug/pprof/") || same(p, n, "/debug/pprof")) {
        if (!get && !head) { fail(c, start, 405, "method not allowed\n"); return; }
        body = new_body();
        if (body < 0 || serve_index(body) != 0) fail(c, start, 500, "no memory\n");
        else respond(c, start, 200, "text/html; charset=utf-8", NULL, body, NULL, head);
    } else {
        fail(c, start, 404, "404 page not found\n");
    }
    if (body >= 0) close(body);
}

static int tchar(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Reads one request from c and answers it. */
static void serve(int c)
{
    uint64_t start = pm_os_monotonic_ns();
    char *buf = srv.mem;
    size_t len = 0, head_end = 0;
    /* the header block, up to its blank line */
    while (!head_end) {
        if (len == HEAD_MAX) { fail(c, start, 431, "request header too large\n"); return; }
        ssize_t got = recv(c, buf + len, HEAD_MAX - len, MSG_DONTWAIT);
        if (got == 0) return; /* closed before a whole request */
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return;
            int w = wait_fd(c, POLLIN, start, HEAD_TIMEOUT_MS);
            if (w == 0) { fail(c, start, 408, "request timeout\n"); return; }
            if (w < 0) return;
            continue;
        }
        size_t from = len > 3 ? len - 3 : 0;
        len += (size_t)got;
        for (size_t i = from; i + 1 < len && !head_end; i++) {
            if (buf[i] == '\n' && buf[i + 1] == '\n') head_end = i + 2;
            else if (buf[i] == '\n' && buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n') head_end = i + 3;
        }
    }
    /* request line: METHOD SP target SP HTTP/1.x */
    request_t r = {0};
    size_t i = 0;
    while (i < head_end && tchar((unsigned char)buf[i])) i++;
    r.method = buf;
    r.method_n = i;
    if (!i || buf[i] != ' ') { fail(c, start, 400, "malformed request line\n"); return; }
    size_t t = ++i;
    while (i < head_end && buf[i] > ' ' && buf[i] < 0x7f) i++;
    if (i == t || buf[i] != ' ' || buf[t] != '/') { fail(c, start, 400, "malformed request target\n"); return; }
    r.path = buf + t;
    r.path_n = i - t;
    for (size_t q = 0; q < r.path_n; q++)
        if (r.path[q] == '?') {
            r.query = r.path + q + 1;
            r.query_n = r.path_n - q - 1;
            r.path_n = q;
            break;
        }
    if (!r.query) r.query = r.path + r.path_n;
    i++;
    size_t eol = i;
    while (eol < head_end && buf[eol] != '\n') eol++;
    size_t vend = eol > i && buf[eol - 1] == '\r' ? eol - 1 : eol;
    if (!same(buf + i, vend - i, "HTTP/1.1") && !same(buf + i, vend - i, "HTTP/1.0")) {
        if (has_prefix(buf + i, vend - i, "HTTP/") && vend - i == 8)
            { fail(c, start, 505, "HTTP version not supported\n"); return; }
        { fail(c, start, 400, "malformed request line\n"); return; }
    }
    /* headers */
    int nheaders = 0, have_length = 0, expect = 0;
    uint64_t length = 0;
    for (i = eol + 1; i < head_end;) {
        eol = i;
        while (eol < head_end && buf[eol] != '\n') eol++;
        size_t end = eol > i && buf[eol - 1] == '\r' ? eol - 1 : eol;
        if (end == i) break; /* the blank line */
        if (++nheaders > HEADERS_MAX) { fail(c, start, 431, "too many header fields\n"); return; }
        size_t k = i;
        while (k < end && tchar((unsigned char)buf[k])) k++;
        if (k == i || k == end || buf[k] != ':') { fail(c, start, 400, "malformed header field\n"); return; }
        size_t v = k + 1;
        while (v < end && (buf[v] == ' ' || buf[v] == '\t')) v++;
        size_t ve = end;
        while (ve > v && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t')) ve--;
        for (size_t x = v; x < ve; x++)
            if ((unsigned char)buf[x] < 0x20 && buf[x] != '\t') { fail(c, start, 400, "malformed header value\n"); return; }
        if (same_ci(buf + i, k - i, "content-length")) {
            uint64_t n = 0;
            if (v == ve) { fail(c, start, 400, "malformed Content-Length\n"); return; }
            for (size_t x = v; x < ve; x++) {
                if (buf[x] < '0' || buf[x] > '9') { fail(c, start, 400, "malformed Content-Length\n"); return; }
                n = n > BODY_MAX ? BODY_MAX + 1 : n * 10 + (uint64_t)(buf[x] - '0'); /* 413 below */
            }
            if (have_length && n != length) { fail(c, start, 400, "conflicting Content-Length\n"); return; }
            have_length = 1;
            length = n;
        } else if (same_ci(buf + i, k - i, "transfer-encoding")) {
            { fail(c, start, 501, "Transfer-Encoding not supported\n"); return; }
        } else if (same_ci(buf + i, k - i, "expect")) {
            if (!same_ci(buf + v, ve - v, "100-continue")) { fail(c, start, 400, "unsupported Expect\n"); return; }
            expect = 1;
        }
        i = eol + 1;
    }
    if (length > BODY_MAX) { fail(c, start, 413, "request body too large\n"); return; }
    /* body: what came with the headers, then the rest */
    char *body = buf + HEAD_MAX;
    len -= head_end;
    if (len > length) len = length; /* pipelined bytes are dropped: one request per connection */
    memcpy(body, buf + head_end, len);
    if (expect && len < length && send_all(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, start) != 0) return;
    uint64_t body_start = pm_os_monotonic_ns();
    while (len < length) {
        ssize_t got = recv(c, body + len, length - len, MSG_DONTWAIT);
        if (got == 0) { fail(c, start, 400, "truncated request body\n"); return; }
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return;
            int w = wait_fd(c, POLLIN, body_start, BODY_TIMEOUT_MS);
            if (w == 0) { fail(c, start, 408, "request timeout\n"); return; }
            if (w < 0) return;
            continue;
        }
        len += (size_t)got;
    }
    r.body = body;
    r.body_n = length;
    route(c, pm_os_monotonic_ns(), &r);
}

static void *server_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{srv.wake_fd, POLLIN, 0}, {srv.listen_fd, POLLIN, 0}};
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || (p[0].revents & POLLIN)) break;
        int c = accept4(srv.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            /* out of descriptors: let the backlog wait instead of spinning */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                wait_fd(-1, 0, pm_os_monotonic_ns(), 100);
            continue;
        }
        serve(c);
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------ */

/* "host:port", "[v6]:port" or ":port" (loopback); host 127.0.0.1,
 * localhost, another IPv4 or IPv6 literal.  0, or -1 (EINVAL). */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sl)
{
    char host[64];
    const char *colon = NULL, *s = addr;
    size_t hn;
    if (!addr) addr = s = "127.0.0.1:0";
    if (*s == '[') {
        const char *e = strchr(s, ']');
        if (!e || e[1] != ':') return -1;
        hn = (size_t)(e - s - 1);
        if (hn >= sizeof host) return -1;
        memcpy(host, s + 1, hn);
        colon = e + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) return -1;
        hn = (size_t)(colon - s);
        if (hn >= sizeof host) return -1;
        memcpy(host, s, hn);
    }
    host[hn] = 0;
    uint32_t port = 0;
    if (!colon[1]) return -1;
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9' || port > 65535) return -1;
        port = port * 10 + (uint32_t)(*p - '0');
    }
    if (port > 65535) return -1;
    memset(ss, 0, sizeof *ss);
    if (*s == '[') {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) return -1;
        *sl = sizeof *a;
        return 0;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (!hn || pm_fmt_streq(host, "localhost")) a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &a->sin_addr) != 1) return -1;
    *sl = sizeof *a;
    return 0;
}

static void close_fds(void)
{
    if (srv.listen_fd >= 0) close(srv.listen_fd);
    if (srv.wake_fd >= 0) close(srv.wake_fd);
    srv.listen_fd = srv.wake_fd = -1;
}

/* The child of a fork has no server thread: it closes the parent's
 * socket and serves only when it calls profmalloc_http_start itself
 * (test_fork_child_does_not_serve). */
static void fork_child(void)
{
    pm_lock_reset(&ctl_lock);
    if (srv.running) close_fds();
    srv.running = 0;
}

static void write_port_file(int port)
{
    const char *path = pm_options.http_port_file;
    if (!path) return;
    char tmp[4200], num[24];
    pm_buf_t b;
    pm_buf_init(&b, tmp, sizeof tmp - 1, -1);
    pm_buf_str(&b, path);
    pm_buf_str(&b, ".tmp.");
    pm_buf_u64(&b, (uint64_t)pm_os_getpid());
    tmp[b.len] = 0;
    pm_buf_t nb;
    pm_buf_init(&nb, num, sizeof num, -1);
    pm_buf_u64(&nb, (uint64_t)port);
    pm_buf_str(&nb, "\n");
    int fd = b.truncated ? -1 : pm_os_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0 && pm_os_write_all(fd, num, nb.len) == 0;
    if (fd >= 0 && pm_os_close(fd) != 0) ok = 0;
    if (ok && pm_os_rename(tmp, path) == 0) return;
    if (fd >= 0) pm_os_unlink(tmp);
    pm_os_message("PROFMALLOC_HTTP_PORT_FILE: could not write the port");
}

PM_EXPORT int profmalloc_http_start(const char *addr)
{
    pm_init();
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_addr(addr, &ss, &sl) != 0) {
        errno = EINVAL;
        return -1;
    }
    if (!atomic_exchange(&atfork_done, 1)) pthread_atfork(NULL, NULL, fork_child);
    pm_lock(&ctl_lock);
    int rc = -1, err = EBUSY;
    if (srv.running) goto out;
    if (!srv.mem && !(srv.mem = pm_os_map(HEAD_MAX + BODY_MAX + 1, 0))) {
        err = ENOMEM;
        goto out;
    }
    srv.listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    srv.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int one = 1;
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (srv.listen_fd < 0 || srv.wake_fd < 0 ||
        setsockopt(srv.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(srv.listen_fd, (struct sockaddr *)&ss, sl) != 0 || listen(srv.listen_fd, BACKLOG) != 0 ||
        getsockname(srv.listen_fd, (struct sockaddr *)&bound, &bl) != 0) {
        err = errno;
        close_fds();
        goto out;
    }
    srv.port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
    /* the thread takes no signal: the program's handlers run on its own threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&srv.thread, &attr, server_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (err) {
        close_fds();
        goto out;
    }
    srv.running = 1;
    rc = srv.port;
    write_port_file(rc);
out:
    pm_unlock(&ctl_lock);
    if (rc < 0) errno = err;
    return rc;
}

PM_EXPORT void profmalloc_http_stop(void)
{
    pm_lock(&ctl_lock);
    if (srv.running) {
        uint64_t one = 1;
        ssize_t w = write(srv.wake_fd, &one, sizeof one);
        (void)w;
        pthread_join(srv.thread, NULL);
        close_fds();
        srv.running = 0;
    }
    pm_unlock(&ctl_lock);
}

/* PROFMALLOC_HTTP, from the library's constructor: after init, outside
 * every allocator path (pthread_create may allocate). */
void pm_http_autostart(void)
{
    const char *addr = pm_options.http_addr;
    if (!addr) return;
    char msg[160];
    pm_buf_t b;
    pm_buf_init(&b, msg, sizeof msg - 1, -1);
    int port = profmalloc_http_start(addr);
    if (port < 0) {
        int err = errno;
        pm_buf_str(&b, "PROFMALLOC_HTTP: cannot serve on ");
        pm_buf_str(&b, addr);
        pm_buf_str(&b, err == EINVAL ? " (malformed address)" : " (errno ");
        if (err != EINVAL) {
            pm_buf_u64(&b, (uint64_t)err);
            pm_buf_str(&b, ")");
        }
    } else {
        pm_buf_str(&b, "serving http://");
        size_t n = pm_fmt_strlen(addr);
        const char *colon = addr + n;
        while (colon > addr && *colon != ':') colon--;
        if (colon == addr) pm_buf_str(&b, "127.0.0.1");
        else {
            char host[64];
            size_t hn = (size_t)(colon - addr) < sizeof host ? (size_t)(colon - addr) : sizeof host - 1;
            memcpy(host, addr, hn);
            host[hn] = 0;
            pm_buf_str(&b, host);
        }
        pm_buf_str(&b, ":");
        pm_buf_u64(&b, (uint64_t)port);
        pm_buf_str(&b, "/debug/pprof/");
    }
    msg[b.len] = 0;
    pm_os_message(msg);
}

/* Stops the server before the process's other destructors and exit's
 * teardown, so a request in flight ends with its connection closed
 * (test_exit_with_request_in_flight). */
__attribute__((destructor)) static void stop_at_exit(void) { profmalloc_http_stop(); }
