/* prof_leaks.c — PROFMALLOC_LEAKS: at exit, the allocation sites (call
 * stacks) that still hold memory, largest first, on stderr with function
 * names and the estimate's standard error when sampled; or, given a path,
 * the profile of those blocks.
 * Must never: call stdio or malloc (it runs from the library's destructor,
 * on the program's own allocator); scratch memory is mapped.  Takes no
 * lock of its own (the site copy takes the profiler's briefly). */
#include "pm_hunt.h"
#include "pm_prof_symbols.h"

enum { SHOW = 20, NAMED = 200, FRAMES = 6, NAME_POOL = 256 * 1024 };

typedef struct leak {
    const void *stack;
    const uintptr_t *pcs;
    uint32_t depth;
    uint64_t size;     /* requested size of one site (0: several sizes) */
    double bytes, objects, var;
    size_t key;        /* its frames' names: index into names_t */
} leak_t;

static double root(double x)
{
    if (!(x > 0)) return 0;
    double r = x > 1 ? x / 2 : 1;
    for (int i = 0; i < 64; i++) r = 0.5 * (r + x / r);
    return r;
}

/* Ascending by stack, or descending by bytes (*ctx nonzero). */
static bool leak_before(const void *pa, const void *pb, const void *ctx)
{
    const leak_t *a = pa, *b = pb;
    return *(const int *)ctx ? a->bytes > b->bytes : (uintptr_t)a->stack < (uintptr_t)b->stack;
}

static void sort_leaks(leak_t *v, size_t n, int by_bytes) { pm_encode_sort(v, n, sizeof *v, leak_before, &by_bytes); }

typedef struct names {
    char *pool;
    size_t used, pool_cap;
    uint32_t off[NAMED * FRAMES], len[NAMED * FRAMES];
} names_t;

static void got_name(void *arg, size_t i, const char *name, size_t len)
{
    names_t *nm = arg;
    if (!name || nm->used + len > nm->pool_cap) {
        nm->len[i] = 0;
        return;
    }
    for (size_t k = 0; k < len; k++) nm->pool[nm->used + k] = name[k];
    nm->off[i] = (uint32_t)nm->used;
    nm->len[i] = (uint32_t)len;
    nm->used += len;
}

/* Whether two stacks' shown frames have the same names (all named). */
static int same_names(const names_t *nm, const leak_t *a, const leak_t *b)
{
    uint32_t da = a->depth < FRAMES ? a->depth : FRAMES, db = b->depth < FRAMES ? b->depth : FRAMES;
    if (da != db) return 0;
    for (uint32_t d = 0; d < da; d++) {
        size_t i = a->key * FRAMES + d, j = b->key * FRAMES + d;
        if (!nm->len[i] || nm->len[i] != nm->len[j]) return 0;
        for (uint32_t c = 0; c < nm->len[i]; c++)
            if (nm->pool[nm->off[i] + c] != nm->pool[nm->off[j] + c]) return 0;
    }
    return 1;
}

int pm_pprof_names(const uintptr_t *pcs, size_t n, pm_pprof_name_fn cb, void *arg)
{
    pm_symbols_t w;
    int rc = -1;
    if (pm_symbols_init(&w)) {
        for (size_t i = 0; i < n; i++) pm_symbols_loc(&w, pcs[i]);
        if (!pm_symbols_failed(&w) && pm_symbols_resolve(&w) == 0) {
            rc = 0;
            for (size_t i = 0; i < n; i++) {
                const pm_sym_loc_t *l = &PM_SYM_LOCS(&w)[pm_symbols_loc(&w, pcs[i])];
                if (l->func) {
                    const pm_sym_str_t *e = &PM_SYM_STRS(&w)[PM_SYM_FUNCS(&w)[l->func - 1].name];
                    cb(arg, i, (const char *)w.strdata.p + e->off, e->len);
                } else {
                    cb(arg, i, NULL, 0);
                }
            }
        }
    }
    pm_symbols_free(&w);
    return rc;
}

static void num(pm_buf_t *b, double v) { pm_buf_u64(b, v > 0 ? (uint64_t)(v + 0.5) : 0); }

static void report(void)
{
    pm_site_copy_t c = {0};
    if (pm_hunt_copy_take(&c) != 0) {
        pm_os_message("PROFMALLOC_LEAKS: no memory for the report");
        return;
    }
    uint64_t rate = pm_sampler_rate();
    size_t bytes = (c.n + 1) * sizeof(leak_t) + NAME_POOL + sizeof(names_t);
    char *mem = pm_os_map(bytes, 0);
    if (!mem) {
        pm_hunt_copy_free(&c);
        pm_os_message("PROFMALLOC_LEAKS: no memory for the report");
        return;
    }
    leak_t *v = (leak_t *)mem;
    names_t *nm = (names_t *)(mem + (c.n + 1) * sizeof(leak_t));
    nm->pool = (char *)(nm + 1);
    size_t n = 0;
    for (size_t i = 0; i < c.n; i++) {
        const pm_site_count_t *s = &c.v[i];
        if (s->alloc_bytes <= s->free_bytes) continue;
        leak_t l = {0};
        pm_sites_info(s->site, &l.pcs, &l.depth, &l.size, &l.stack);
        l.bytes = (double)(s->alloc_bytes - s->free_bytes) / (1 << PM_FX_SHIFT);
        l.objects = s->alloc_objects > s->free_objects
                        ? (double)(s->alloc_objects - s->free_objects) / (1 << PM_FX_SHIFT) : 0;
        if (rate > 1) { /* each block stands for 1/p: variance N (1-p)/p s^2 */
            double p = pm_math_one_minus_exp((double)(l.size ? l.size : 1) / (double)rate);
            if (p > 0) l.var = l.objects * (1 - p) / p * (double)l.size * (double)l.size;
        }
        v[n++] = l;
    }
    pm_hunt_copy_free(&c);
    /* one line per call stack: its sizes merged */
    sort_leaks(v, n, 0);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && v[m - 1].stack == v[i].stack) {
            v[m - 1].bytes += v[i].bytes;
            v[m - 1].objects += v[i].objects;
            v[m - 1].var += v[i].var;
            if (v[m - 1].size != v[i].size) v[m - 1].size = 0;
        } else {
            v[m++] = v[i];
        }
    }
    sort_leaks(v, m, 1);
    /* the largest NAMED stacks named; those whose shown frames have the
     * same names (a loop's first call peeled off, one caller's two call
     * sites) are one line */
    size_t named = m < NAMED ? m : NAMED;
    uintptr_t *pcs = (uintptr_t *)(nm->pool + NAME_POOL - NAMED * FRAMES * sizeof(uintptr_t));
    nm->pool_cap = NAME_POOL - NAMED * FRAMES * sizeof(uintptr_t);
    for (size_t i = 0; i < named; i++)
        for (uint32_t d = 0; d < FRAMES; d++) pcs[i * FRAMES + d] = d < v[i].depth ? v[i].pcs[d] : 0;
    int ok = pm_pprof_names(pcs, named * FRAMES, got_name, nm) == 0;
    for (size_t i = 0; i < named; i++) v[i].key = i;
    if (ok) {
        for (size_t i = 0; i < named; i++) {
            if (v[i].bytes < 0) continue;
            for (size_t j = i + 1; j < named; j++)
                if (v[j].bytes >= 0 && same_names(nm, &v[i], &v[j])) {
                    v[i].bytes += v[j].bytes;
                    v[i].objects += v[j].objects;
                    v[i].var += v[j].var;
                    if (v[i].size != v[j].size) v[i].size = 0;
                    v[j].bytes = -1; /* merged */
                }
        }
        size_t k = 0;
        for (size_t i = 0; i < m; i++)
            if (v[i].bytes >= 0) v[k++] = v[i];
        named -= m - k;
        m = k;
        sort_leaks(v, named, 1);
    }
    double total = 0;
    for (size_t i = 0; i < m; i++) total += v[i].bytes;
    size_t show = m < SHOW ? m : SHOW;
    int named_ok = ok;

    char text[1024];
    pm_buf_t b;
    pm_buf_init(&b, text, sizeof text, 2);
    if (!m) {
        pm_buf_str(&b, "profmalloc: leaks: no allocation site holds memory at exit");
        pm_buf_str(&b, rate == 1 ? " (exact: sample rate 1)\n" : " (of the sampled blocks)\n");
    } else {
        pm_buf_str(&b, "profmalloc: leaks: ");
        pm_buf_u64(&b, m);
        pm_buf_str(&b, m == 1 ? " call stack holds " : " call stacks hold ");
        if (rate > 1) pm_buf_str(&b, "about ");
        num(&b, total);
        pm_buf_str(&b, " bytes at exit");
        if (rate == 1) {
            pm_buf_str(&b, " (exact: sample rate 1)\n");
        } else {
            pm_buf_str(&b, " (estimated from samples at rate ");
            pm_buf_u64(&b, rate);
            pm_buf_str(&b, "; +- one standard error)\n");
        }
    }
    for (size_t i = 0; i < show; i++) {
        pm_buf_str(&b, "profmalloc: leaks: ");
        num(&b, v[i].bytes);
        if (rate > 1) {
            pm_buf_str(&b, " +- ");
            num(&b, root(v[i].var));
        }
        pm_buf_str(&b, " bytes in ");
        num(&b, v[i].objects);
        pm_buf_str(&b, v[i].objects >= 0.5 && v[i].objects < 1.5 ? " block" : " blocks");
        if (v[i].size) {
            pm_buf_str(&b, " of ");
            pm_buf_u64(&b, v[i].size);
        }
        pm_buf_str(&b, " at");
        for (uint32_t d = 0; d < FRAMES && d < v[i].depth; d++) {
            pm_buf_str(&b, d ? " <- " : " ");
            size_t k = v[i].key * FRAMES + d;
            if (named_ok && nm->len[k]) {
                char name[256];
                size_t len = nm->len[k] < sizeof name - 1 ? nm->len[k] : sizeof name - 1;
                for (size_t j = 0; j < len; j++) name[j] = nm->pool[nm->off[k] + j];
                name[len] = 0;
                pm_buf_str(&b, name);
            } else {
                pm_buf_hex(&b, v[i].pcs[d]);
            }
        }
        pm_buf_str(&b, "\n");
    }
    if (m > show) {
        double rest = 0;
        for (size_t i = show; i < m; i++) rest += v[i].bytes;
        pm_buf_str(&b, "profmalloc: leaks: and ");
        pm_buf_u64(&b, m - show);
        pm_buf_str(&b, " more call stacks holding ");
        num(&b, rest);
        pm_buf_str(&b, " bytes (PROFMALLOC_LEAKS=path writes them all as a profile)\n");
    }
    pm_buf_flush(&b);
    pm_os_unmap(mem, bytes);
}

void pm_leaks_at_exit(void)
{
    const char *what = pm_options.leaks;
    if (!what) return;
    if (what[0] == '1' && !what[1]) {
        report();
        return;
    }
    enum { CAP = 4096 };
    char *path = pm_os_map(CAP, 0);
    if (!path || pm_dump_expand(what, path, CAP) != 0 || profmalloc_dump(path) != 0)
        pm_os_message("PROFMALLOC_LEAKS: could not write the profile of the leaks");
    if (path) pm_os_unmap(path, CAP);
}
