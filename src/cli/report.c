/* report.c — what `top`, `diff` and `stats` print: a profile's samples
 * grouped by allocation site (the first frame outside the allocation
 * wrappers), with estimates, their standard errors and shares, as an
 * 80-column table or JSON.  The estimate's standard error follows from
 * the sampling: n samples of size s taken with probability p = 1 - e^(-s/R)
 * give a Horvitz-Thompson variance n (1 - p) (s / p)^2 (test/cli/test_cli.py:
 * test_top_stderr). */
#include "cli.h"
#include "cli_main.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- output style ----------------------------------------------------- */

bool cli_color;

const char *col(const char *code) { return cli_color ? code : ""; }

void cli_setup_color(FILE *f)
{
    const char *nc = getenv("NO_COLOR");
    const char *term = getenv("TERM");
    cli_color = isatty(fileno(f)) && !(nc && nc[0]) && !(term && !strcmp(term, "dumb"));
}

void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* ---- sites ------------------------------------------------------------ */

static bool is_wrapper(const char *f)
{
    static const char *const prefixes[] = {"operator new", "operator delete", "_Znw", "_Zna", "__libc_",
                                           "__GI_", "_IO_", "__vasprintf", "__asprintf", "__strdup",
                                           "__strndup", "__wcsdup", "__getdelim", NULL};
    static const char *const names[] = {"strdup", "strndup", "wcsdup", "asprintf", "vasprintf", "getline",
                                        "getdelim", "open_memstream", "realpath", "malloc", "calloc",
                                        "realloc", "reallocarray", "aligned_alloc", "posix_memalign",
                                        "memalign", "valloc", "pvalloc", NULL};
    if (!f) return false;
    for (int i = 0; prefixes[i]; i++)
        if (!strncmp(f, prefixes[i], strlen(prefixes[i]))) return true;
    for (int i = 0; names[i]; i++)
        if (!strcmp(f, names[i])) return true;
    return false;
}

const char *loc_func(const cli_loc_t *l, char *buf, size_t len)
{
    if (l->sym_func) return l->sym_func;
    if (l->func && l->func[0]) return l->func;
    snprintf(buf, len, "0x%llx", (unsigned long long)l->addr);
    return buf;
}

/* As loc_func, but an unnamed address as object+offset, as pprof shows it. */
static const char *loc_name(const cli_profile_t *p, const cli_loc_t *l, char *buf, size_t len)
{
    if (l->sym_func || (l->func && l->func[0]) || l->map < 0) return loc_func(l, buf, len);
    const cli_map_t *m = &p->maps[l->map];
    const char *base = strrchr(m->file, '/');
    snprintf(buf, len, "%s+0x%llx", base ? base + 1 : m->file, (unsigned long long)(l->addr - m->start + m->offset));
    return buf;
}

const char *loc_file(const cli_loc_t *l, int64_t *line)
{
    if (l->sym_func && l->sym_file) {
        *line = l->sym_line;
        return l->sym_file;
    }
    if (!l->sym_func && l->file && l->file[0]) {
        *line = l->line;
        return l->file;
    }
    *line = 0;
    return NULL;
}

/* Index of the frame a sample is charged to: its first frame outside
 * the allocation wrappers (operator new, strdup...), or its leaf. */
static uint32_t site_frame(const cli_profile_t *p, const cli_sample_t *s)
{
    char b[32];
    for (uint32_t d = 0; d + 1 < s->depth; d++)
        if (!is_wrapper(loc_func(&p->locs[s->locs[d]], b, sizeof b))) return d;
    return s->depth ? s->depth - 1 : 0;
}

/* The value, its variance and the samples behind it for one sample. */
void sample_value(const cli_profile_t *p, const cli_sample_t *s, const view_t *v, double *val,
                  double *var, double *n)
{
    int k = v->alloc ? (v->objects ? V_ALLOC_OBJ : V_ALLOC_BYTES) : (v->objects ? V_INUSE_OBJ : V_INUSE_BYTES);
    double objs = s->v[v->alloc ? V_ALLOC_OBJ : V_INUSE_OBJ], bytes = s->v[v->alloc ? V_ALLOC_BYTES : V_INUSE_BYTES];
    *val = s->v[k];
    *n = s->n[v->alloc ? 1 : 0];
    *var = 0;
    if (!p->has_counts || p->period <= 1 || objs <= 0) return;
    double size = s->size ? (double)s->size : bytes / objs;
    double q = cli_one_minus_exp_neg(size / (double)p->period);
    if (q <= 0) return;
    double per = v->objects ? 1 / q : size / q;
    *var = *n * (1 - q) * per * per;
}

static int site_cmp_key(const void *a, const void *b)
{
    const site_t *x = a, *y = b;
    return strcmp(x->key, y->key);
}

static int site_cmp_val(const void *a, const void *b)
{
    const site_t *x = a, *y = b;
    double dx = x->val[1] - x->val[0], dy = y->val[1] - y->val[0];
    if (dx != dy) return dx < dy ? 1 : -1;
    return strcmp(x->key, y->key);
}

/* The site of key, created with these func/file/line when new. */
static site_t *site_of(sitetab_t *t, const char *key, const char *func, const char *file, int64_t line)
{
    if (t->n * 2 >= t->hcap) {
        size_t cap = t->hcap ? t->hcap * 2 : 1024;
        uint32_t *h = xcalloc(cap, sizeof *h);
        for (size_t k = 0; k < t->n; k++) {
            size_t x = t->sites[k].hash & (cap - 1);
            while (h[x]) x = (x + 1) & (cap - 1);
            h[x] = (uint32_t)k + 1;
        }
        free(t->hash);
        t->hash = h;
        t->hcap = cap;
    }
    uint64_t hv = 1469598103934665603ull;
    for (const char *c = key; *c; c++) hv = (hv ^ (unsigned char)*c) * 1099511628211ull;
    size_t x = hv & (t->hcap - 1);
    for (; t->hash[x]; x = (x + 1) & (t->hcap - 1)) {
        site_t *c = &t->sites[t->hash[x] - 1];
        if (c->hash == hv && !strcmp(c->key, key)) return c;
    }
    if (t->n == t->cap) t->sites = xrealloc(t->sites, (t->cap = t->cap ? t->cap * 2 : 256) * sizeof *t->sites);
    site_t *st = &t->sites[t->n];
    memset(st, 0, sizeof *st);
    st->key = xstrdup(key);
    st->hash = hv;
    st->func = xstrdup(func);
    st->file = file ? xstrdup(file) : NULL;
    st->line = line;
    st->best = -1;
    t->hash[x] = (uint32_t)++t->n;
    return st;
}

/* Charges one sample's value to the site of frame l (NULL: no stack). */
static site_t *charge(const cli_profile_t *p, const view_t *v, int which, sitetab_t *t, const cli_loc_t *l,
                      double val, double var, double n)
{
    char fb[256], key[1024];
    const char *func = "(no stack)", *file = NULL;
    int64_t line = 0;
    if (l) {
        func = loc_name(p, l, fb, sizeof fb);
        file = loc_file(l, &line);
    }
    if (v->lines) snprintf(key, sizeof key, "%s\t%s\t%lld", func, file ? file : "", (long long)line);
    else snprintf(key, sizeof key, "%s", func);
    site_t *st = site_of(t, key, func, file, line);
    st->val[which] += val;
    st->var[which] += var;
    st->n[which] += n;
    /* without --lines, show the line of the biggest contribution */
    if (val > st->best) {
        st->best = val;
        if (file && (!st->file || strcmp(st->file, file))) {
            free(st->file);
            st->file = xstrdup(file);
        }
        st->line = line;
        if (l && !st->obj) {
            uint64_t va;
            if (cli_loc_vaddr(p, l, &va) == 0) {
                st->vaddr = va;
                st->obj = xstrdup(p->maps[l->map].file);
            }
        }
    }
    return st;
}

/* Adds profile p into slot `which` (0 or 1) of the site table: each
 * sample to its site, or with v->cum to every function (line) on its
 * stack, once per sample (test_top_cum). */
void collect_sites(const cli_profile_t *p, const view_t *v, int which, sitetab_t *t)
{
    for (size_t i = 0; i < p->nsamples; i++) {
        const cli_sample_t *s = &p->samples[i];
        double val, var, n;
        sample_value(p, s, v, &val, &var, &n);
        if (val == 0 && n == 0) continue;
        t->total[which] += val;
        t->totvar[which] += var;
        t->totn[which] += n;
        if (!s->depth) {
            charge(p, v, which, t, NULL, val, var, n);
            continue;
        }
        if (!v->cum) {
            charge(p, v, which, t, &p->locs[s->locs[site_frame(p, s)]], val, var, n);
            continue;
        }
        size_t seen[PM_CLI_MAXDEPTH], nseen = 0; /* site indexes: the table may move */
        for (uint32_t d = 0; d < s->depth && nseen < PM_CLI_MAXDEPTH; d++) {
            /* a function on the stack twice (recursion) counts once */
            char fb[256], key[1024];
            const cli_loc_t *l = &p->locs[s->locs[d]];
            const char *func = loc_name(p, l, fb, sizeof fb);
            int64_t line = 0;
            const char *file = loc_file(l, &line);
            if (v->lines) snprintf(key, sizeof key, "%s\t%s\t%lld", func, file ? file : "", (long long)line);
            else snprintf(key, sizeof key, "%s", func);
            size_t idx = (size_t)(site_of(t, key, func, file, line) - t->sites), k;
            for (k = 0; k < nseen; k++)
                if (seen[k] == idx) break;
            if (k < nseen) continue;
            charge(p, v, which, t, l, val, var, n);
            seen[nseen++] = idx;
        }
    }
}

void sort_sites(sitetab_t *t, bool by_key)
{
    if (t->n) qsort(t->sites, t->n, sizeof *t->sites, by_key ? site_cmp_key : site_cmp_val);
    free(t->hash);
    t->hash = NULL;
    t->hcap = 0;
}

void free_sites(sitetab_t *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->sites[i].key);
        free(t->sites[i].func);
        free(t->sites[i].file);
        free(t->sites[i].obj);
    }
    free(t->sites);
    free(t->hash);
    memset(t, 0, sizeof *t);
}

/* "file:line", shortened from the left to fit len. */
const char *site_where(const site_t *s, char *buf, size_t len)
{
    if (!s->file) {
        buf[0] = 0;
        return buf;
    }
    char tmp[4200];
    const char *base = strrchr(s->file, '/');
    if (s->line <= 0 && base) /* an object without line information */
        snprintf(tmp, sizeof tmp, "%s", base + 1);
    else if (s->line > 0) snprintf(tmp, sizeof tmp, "%s:%lld", s->file, (long long)s->line);
    else snprintf(tmp, sizeof tmp, "%s", s->file);
    size_t n = strlen(tmp);
    if (n < len) {
        memcpy(buf, tmp, n + 1);
        return buf;
    }
    snprintf(buf, len, "...%s", tmp + n - (len - 4));
    return buf;
}

/* Replaces the contents of each outermost open..close pair with "...". */
static void elide(char *s, char open, char close)
{
    char *w = s;
    int depth = 0;
    for (const char *r = s; *r; r++) {
        if (*r == open) {
            if (depth++ == 0) {
                *w++ = open;
                *w++ = '.', *w++ = '.', *w++ = '.';
            }
            continue;
        }
        if (*r == close && depth > 0) {
            if (--depth == 0) *w++ = close;
            continue;
        }
        if (depth == 0) *w++ = *r;
    }
    *w = 0;
}

/* The site column: "function  file:line" within width characters: the
 * file's directories go first, then a C++ name's parameters and template
 * arguments, then the ends of both (test_cxx_names_demangled). */
void print_site(FILE *f, const site_t *s, int width)
{
    char where[4300], fn[512];
    site_where(s, where, sizeof where);
    snprintf(fn, sizeof fn, "%s", s->func);
    int fl = (int)strlen(fn), wl = (int)strlen(where);
    if (fl + 2 + wl > width && s->file && s->line > 0) { /* the file's name alone */
        const char *base = strrchr(s->file, '/');
        snprintf(where, sizeof where, "%s:%lld", base ? base + 1 : s->file, (long long)s->line);
        wl = (int)strlen(where);
    }
    if (fl + 2 + wl > width) {
        elide(fn, '(', ')');
        if ((int)strlen(fn) + 2 + wl > width) elide(fn, '<', '>');
        fl = (int)strlen(fn);
    }
    if (fl + 2 + wl > width && wl > 16) { /* the file's name from its left */
        int keep = width - fl - 2 > 16 ? width - fl - 2 : 16;
        memmove(where + 3, where + wl - (keep - 3), (size_t)(keep - 3) + 1);
        memcpy(where, "...", 3);
        wl = keep;
    }
    int room = width - (wl ? wl + 2 : 0);
    if (room < 8) room = 8;
    if (fl > room) fprintf(f, "%s%.*s...%s", col("\033[1m"), room - 3, fn, col("\033[0m"));
    else fprintf(f, "%s%s%s", col("\033[1m"), fn, col("\033[0m"));
    if (wl) fprintf(f, "  %s%s%s", col("\033[36m"), where, col("\033[0m"));
    fputc('\n', f);
}

/* The allocator's exact totals carried in comments ("profmalloc: k=v"),
 * in either the one-line or the one-per-line form. */
size_t parse_totals(const cli_profile_t *p, total_t *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < p->ncomments; i++) {
        const char *c = p->comments[i];
        if (strncmp(c, "profmalloc:", 11)) continue;
        c += 11;
        while (*c) {
            while (*c == ' ' || *c == ',') c++;
            const char *eq = strchr(c, '=');
            if (!eq) break;
            const char *sp = strchr(c, ' ');
            if (sp && sp < eq) { /* a word without '=': skip it */
                c = sp;
                continue;
            }
            size_t kl = (size_t)(eq - c);
            char *end;
            unsigned long long v = strtoull(eq + 1, &end, 10);
            if (end == eq + 1) break;
            if (n < max && kl < sizeof out[n].key) {
                memcpy(out[n].key, c, kl);
                out[n].key[kl] = 0;
                out[n].value = v;
                out[n].bytes = !strncmp(end, " bytes", 6) || (*end == 'B' && (end[1] == ' ' || !end[1]));
                if (!strncmp(end, " bytes", 6)) end += 6;
                else if (*end == 'B') end++;
                n++;
            }
            c = end;
        }
    }
    return n;
}

int find_total(const total_t *t, size_t n, const char *key, double *v)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].key, key)) {
            *v = (double)t[i].value;
            return 0;
        }
    return -1;
}

const char *index_name(const view_t *v)
{
    return v->alloc ? (v->objects ? "alloc_objects" : "alloc_space") : (v->objects ? "inuse_objects" : "inuse_space");
}

void fmt_value(const view_t *v, double x, char *buf, size_t len)
{
    if (v->objects) snprintf(buf, len, "%.0f", x);
    else cli_human(x, buf, len);
}

/* ±SE as a value (human) */
void fmt_err(const view_t *v, double var, char *buf, size_t len)
{
    double se = cli_sqrt(var);
    if (se < 0.5) {
        snprintf(buf, len, "exact");
        return;
    }
    char t[32];
    fmt_value(v, se, t, sizeof t);
    snprintf(buf, len, "±%s", t);
}
