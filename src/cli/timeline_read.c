/* timeline_read.c — the reader of the PROFMALLOC_TIMELINE log
 * (doc/timeline.md, format version 1) and the profile at one of its
 * peaks.  It keeps every complete record and drops an incomplete last
 * line or a peak block without its E line, as the format says; it is
 * fuzzed with the profile readers (test/cli/fuzz_readers.c). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

void cli_free_timeline(cli_timeline_t *tl)
{
    for (size_t i = 0; i < tl->npeaks; i++) {
        for (uint32_t k = 0; k < tl->peaks[i].nsites; k++) free(tl->peaks[i].sites[k].pcs);
        free(tl->peaks[i].sites);
    }
    for (size_t i = 0; i < tl->nmaps; i++) {
        free(tl->maps[i].file);
        free(tl->maps[i].build_id);
    }
    free(tl->recs);
    free(tl->peaks);
    free(tl->maps);
    memset(tl, 0, sizeof *tl);
}

/* Numbers of a line: decimal (or hex) fields separated by one or more
 * spaces; returns how many were read before the first non-number. */
static int fields(const char *s, uint64_t *v, int max, int base)
{
    int n = 0;
    while (n < max) {
        while (*s == ' ') s++;
        if (!*s) break;
        char *end;
        if (!((*s >= '0' && *s <= '9') || (base == 16 && ((*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')))))
            break;
        v[n++] = strtoull(s, &end, base);
        s = end;
        if (*s && *s != ' ') break;
    }
    return n;
}

int cli_timeline_part(const char *text, size_t len, cli_timeline_t *tl, bool first, char *err, size_t errlen)
{
    const char *end = text + len, *line = text;
    size_t lineno = 0, caprec = tl->nrecs, cappeak = tl->npeaks, capmap = tl->nmaps;
    cli_tl_peak_t cur = {0};
    size_t capsites = 0;
    bool in_peak = false;
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) { /* an incomplete last line: dropped */
            tl->truncated = true;
            break;
        }
        size_t n = (size_t)(nl - line);
        char buf[8192];
        const char *l = line;
        line = nl + 1;
        lineno++;
        if (n >= sizeof buf) {
            if (lineno == 1) goto notl;
            continue;
        }
        memcpy(buf, l, n);
        buf[n] = 0;
        if (memchr(l, 0, n)) {
            if (lineno == 1) goto notl;
            continue;
        }
        if (lineno == 1) {
            if (strncmp(buf, "profmalloc-timeline ", 20)) goto notl;
            char *p = buf + 20, *e;
            unsigned long v = strtoul(p, &e, 10);
            if (e == p || v != 1) {
                snprintf(err, errlen, "timeline format version %.20s, this reader knows version 1", p);
                return -1;
            }
            if (first) {
                for (char *k = e; (k = strchr(k, ' ')) != NULL;) {
                    k++;
                    uint64_t x = strtoull(strchr(k, '=') ? strchr(k, '=') + 1 : k, NULL, 10);
                    if (!strncmp(k, "pid=", 4)) tl->pid = x;
                    else if (!strncmp(k, "start_ns=", 9)) tl->start_ns = x;
                    else if (!strncmp(k, "rate=", 5)) tl->rate = x;
                    else if (!strncmp(k, "interval_ms=", 12)) tl->interval_ms = x;
                }
            }
            continue;
        }
        uint64_t v[9];
        const char *rest = buf + 2;
        if (n < 2 || buf[1] != ' ') continue; /* unknown lines are ignored */
        switch (buf[0]) {
        case 'M': {
            /* M start-end offset path */
            uint64_t a[1], b[1], o[1];
            char *dash = strchr(rest, '-');
            if (!dash || fields(rest, a, 1, 16) != 1 || fields(dash + 1, b, 1, 16) != 1) break;
            char *sp = strchr(dash, ' ');
            if (!sp || fields(sp + 1, o, 1, 16) != 1) break;
            char *path = strchr(sp + 1, ' ');
            if (!path || path[1] != '/') break;
            if (!first) break; /* every part repeats them */
            if (tl->nmaps == capmap) tl->maps = xrealloc(tl->maps, (capmap = capmap ? capmap * 2 : 16) * sizeof *tl->maps);
            tl->maps[tl->nmaps++] = (cli_map_t){a[0], b[0], o[0], xstrdup(path + 1), xstrdup("")};
            break;
        }
        case 'R': {
            int nf = in_peak ? 0 : fields(rest, v, 9, 10);
            if (nf < 8) break;
            if (tl->nrecs == caprec) tl->recs = xrealloc(tl->recs, (caprec = caprec ? caprec * 2 : 256) * sizeof *tl->recs);
            tl->recs[tl->nrecs++] = (cli_tl_rec_t){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], nf > 8 ? v[8] : 0};
            break;
        }
        case 'Z':
            tl->ended = true;
            break;
        case 'P':
            if (in_peak) { /* a block left open: drop it */
                for (uint32_t k = 0; k < cur.nsites; k++) free(cur.sites[k].pcs);
                free(cur.sites);
            }
            memset(&cur, 0, sizeof cur);
            capsites = 0;
            in_peak = fields(rest, v, 3, 10) == 3;
            if (in_peak) {
                cur.t = v[0];
                cur.live = v[1];
            }
            break;
        case 'S': {
            if (!in_peak || fields(rest, v, 3, 10) != 3 || cur.nsites >= 4096) break;
            const char *p = rest;
            for (int k = 0; k < 3; k++) {
                while (*p == ' ') p++;
                while (*p && *p != ' ') p++;
            }
            while (*p == ' ') p++;
            cli_tl_site_t s = {v[0], v[1], v[2], NULL, 0};
            size_t cap = 0;
            while (*p && s.depth < 256) {
                char *e;
                uint64_t pc = strtoull(p, &e, 16);
                if (e == p) break;
                if (s.depth == cap) s.pcs = xrealloc(s.pcs, (cap = cap ? cap * 2 : 8) * sizeof *s.pcs);
                s.pcs[s.depth++] = pc;
                p = e;
                if (*p != ',') break;
                p++;
            }
            if (cur.nsites == capsites) cur.sites = xrealloc(cur.sites, (capsites = capsites ? capsites * 2 : 16) * sizeof *cur.sites);
            cur.sites[cur.nsites++] = s;
            break;
        }
        case 'E':
            if (!in_peak) break;
            if (tl->npeaks == cappeak) tl->peaks = xrealloc(tl->peaks, (cappeak = cappeak ? cappeak * 2 : 16) * sizeof *tl->peaks);
            tl->peaks[tl->npeaks++] = cur;
            memset(&cur, 0, sizeof cur);
            in_peak = false;
            break;
        default: break;
        }
    }
    if (in_peak) {
        tl->truncated = true;
        for (uint32_t k = 0; k < cur.nsites; k++) free(cur.sites[k].pcs);
        free(cur.sites);
    }
    if (lineno == 0) goto notl;
    return 0;
notl:
    snprintf(err, errlen, "not a profmalloc timeline (no 'profmalloc-timeline 1' header)");
    return -1;
}

int cli_parse_timeline(const uint8_t *data, size_t len, cli_timeline_t *tl, char *err, size_t errlen)
{
    memset(tl, 0, sizeof *tl);
    if (cli_timeline_part((const char *)data, len, tl, true, err, errlen)) {
        cli_free_timeline(tl);
        return -1;
    }
    return 0;
}

void cli_timeline_profile(const cli_timeline_t *tl, size_t i, cli_profile_t *p)
{
    const cli_tl_peak_t *pk = &tl->peaks[i];
    memset(p, 0, sizeof *p);
    p->period = tl->rate;
    p->has_counts = true;
    p->nmaps = tl->nmaps;
    p->maps = xcalloc(tl->nmaps, sizeof *p->maps);
    for (size_t k = 0; k < tl->nmaps; k++) {
        p->maps[k] = tl->maps[k];
        p->maps[k].file = xstrdup(tl->maps[k].file);
        p->maps[k].build_id = xstrdup("");
    }
    p->nsamples = pk->nsites;
    p->samples = xcalloc(pk->nsites, sizeof *p->samples);
    size_t caplocs = 0;
    for (uint32_t k = 0; k < pk->nsites; k++) {
        const cli_tl_site_t *s = &pk->sites[k];
        cli_sample_t *x = &p->samples[k];
        x->v[V_INUSE_BYTES] = (double)s->bytes;
        x->v[V_INUSE_OBJ] = (double)s->objs;
        x->size = s->size;
        x->n[0] = cli_count_behind(x->v[V_INUSE_OBJ], x->v[V_INUSE_BYTES], s->size, tl->rate);
        x->locs = xcalloc(s->depth, sizeof *x->locs);
        for (uint32_t d = 0; d < s->depth; d++) {
            uint64_t a = s->pcs[d] ? s->pcs[d] - 1 : 0;
            size_t j;
            for (j = 0; j < p->nlocs; j++)
                if (p->locs[j].addr == a) break;
            if (j == p->nlocs) {
                if (p->nlocs == caplocs) p->locs = xrealloc(p->locs, (caplocs = caplocs ? caplocs * 2 : 64) * sizeof *p->locs);
                memset(&p->locs[j], 0, sizeof p->locs[j]);
                p->locs[j].addr = a;
                p->locs[j].map = -1;
                for (size_t m = 0; m < p->nmaps; m++)
                    if (a >= p->maps[m].start && a < p->maps[m].limit) {
                        p->locs[j].map = (int)m;
                        break;
                    }
                p->nlocs++;
            }
            x->locs[x->depth++] = (uint32_t)j;
        }
    }
    char c[96];
    snprintf(c, sizeof c, "profmalloc: timeline peak at %llu ms, in_use=%llu bytes", (unsigned long long)pk->t,
             (unsigned long long)pk->live);
    p->comments = xcalloc(1, sizeof *p->comments);
    p->comments[0] = xstrdup(c);
    p->ncomments = 1;
}

