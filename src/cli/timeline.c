/* timeline.c — `profmalloc timeline`: a summary of a timeline's peaks,
 * an SVG of live bytes over time with the peaks marked and the top sites
 * of the highest one beside it, or the profile at one peak (--peak,
 * --at).  Rotated parts are read oldest first.  Tested on a log of known
 * shape (test/cli/test_cli.py: test_timeline_*). */
#include "cli.h"
#include "cli_main.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the command ------------------------------------------------------ */

static const char *const usage_timeline =
    "usage: profmalloc timeline LOG [-o OUT.svg] [--at T | --peak N|max [-o OUT]]\n"
    "\n"
    "Reads a timeline written with PROFMALLOC_TIMELINE (or profmalloc run\n"
    "--timeline): live bytes about every 100 ms and the top sites at each local\n"
    "peak.  Without options, lists the peaks.\n"
    "\n"
    "  -o OUT.svg    draw live bytes against time, the peaks marked and the top\n"
    "                sites of the highest peak listed beside it\n"
    "  --peak N      the profile at peak N (as numbered in the list; max for the\n"
    "                highest): its top sites, or with -o FILE written as a\n"
    "                profile (.pb.gz, or .heap for gperftools text)\n"
    "  --at T        the same for the peak recorded nearest to T seconds\n"
    "  -n N          sites to show (default 10)\n"
    "Rotated parts (LOG.1, LOG.2, ...) are read before LOG when present.\n";

static int read_timeline(const char *path, cli_timeline_t *tl)
{
    char err[512];
    memset(tl, 0, sizeof *tl);
    /* oldest part first: LOG.N ... LOG.1, then LOG */
    int last = 0;
    for (int k = 1; k < 100; k++) {
        char p[4200];
        struct stat st;
        snprintf(p, sizeof p, "%s.%d", path, k);
        if (stat(p, &st)) break;
        last = k;
    }
    for (int k = last; k >= 0; k--) {
        char p[4200];
        if (k) snprintf(p, sizeof p, "%s.%d", path, k);
        else snprintf(p, sizeof p, "%s", path);
        uint8_t *data;
        size_t len;
        if (cli_slurp(p, &data, &len, err, sizeof err)) {
            fprintf(stderr, "profmalloc: %s\n", err);
            cli_free_timeline(tl);
            return -1;
        }
        int rc = cli_timeline_part((const char *)data, len, tl, k == last, err, sizeof err);
        free(data);
        if (rc) {
            fprintf(stderr, "profmalloc: %s: %s\n", p, err);
            cli_free_timeline(tl);
            return -1;
        }
    }
    return 0;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

static size_t highest_peak(const cli_timeline_t *tl)
{
    size_t best = 0;
    for (size_t i = 1; i < tl->npeaks; i++)
        if (tl->peaks[i].live > tl->peaks[best].live) best = i;
    return best;
}

static int write_svg(const char *out, const char *title, const cli_timeline_t *tl, int limit)
{
    cli_out_t of;
    FILE *f = cli_out_open(out, &of);
    if (!f) return 2;
    const double X0 = 80, W = 720, Y0 = 50, H = 380;
    uint64_t tmax = 1, ymax = 1;
    bool has_in_use = false;
    for (size_t i = 0; i < tl->nrecs; i++) {
        if (tl->recs[i].t > tmax) tmax = tl->recs[i].t;
        uint64_t hi = tl->recs[i].max > tl->recs[i].live ? tl->recs[i].max : tl->recs[i].live;
        if (tl->recs[i].in_use > hi) hi = tl->recs[i].in_use;
        if (hi > ymax) ymax = hi;
        has_in_use |= tl->recs[i].in_use != 0;
    }
    for (size_t i = 0; i < tl->npeaks; i++) {
        if (tl->peaks[i].live > ymax) ymax = tl->peaks[i].live;
        if (tl->peaks[i].t > tmax) tmax = tl->peaks[i].t;
    }
    /* a round top for the axis */
    double top = 1;
    while (top < (double)ymax) top *= 2;
#define PX(t) (X0 + W * (double)(t) / (double)tmax)
#define PY(b) (Y0 + H - H * (double)(b) / top)
    fprintf(f, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
               "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"500\" "
               "viewBox=\"0 0 1200 500\" data-records=\"%zu\" data-peaks=\"%zu\">\n"
               "<style>text{font-family:Verdana,sans-serif;font-size:12px}.s{font-size:11px}"
               "circle:hover{stroke:#000;stroke-width:2}</style>\n"
               "<rect width=\"1200\" height=\"500\" fill=\"#fbfbf8\"/>\n",
            tl->nrecs, tl->npeaks);
    fprintf(f, "<text x=\"600\" y=\"24\" text-anchor=\"middle\" style=\"font-size:16px\">");
    xml_text(f, title);
    fprintf(f, ": live bytes over time</text>\n");
    /* axes and grid */
    char b[32];
    for (int k = 0; k <= 4; k++) {
        double y = Y0 + H - H * k / 4.0;
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" class=\"s\">%s</text>\n",
                X0, y, X0 + W, y, X0 - 6, y + 4, cli_human(top * k / 4, b, sizeof b));
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" class=\"s\">%.1f s</text>\n",
                X0 + W * k / 4.0, Y0 + H + 18, (double)tmax * k / 4.0 / 1000);
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#000\"/>\n", X0, Y0 + H, X0 + W, Y0 + H);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#000\"/>\n", X0, Y0, X0, Y0 + H);
    /* the interval's range, then live bytes */
    if (tl->nrecs) {
        /* each record's highest and lowest live bytes, over the interval it closes */
        for (size_t i = 0; i < tl->nrecs; i++) {
            uint64_t t0 = i ? tl->recs[i - 1].t : 0, hi = tl->recs[i].max, lo = tl->recs[i].min;
            if (hi < lo) continue;
            fprintf(f, "<rect class=\"range\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f3c9a0\" "
                       "fill-opacity=\"0.6\"/>\n",
                    PX(t0), PY(hi), PX(tl->recs[i].t) - PX(t0), PY(lo) - PY(hi));
        }
        fprintf(f, "<polyline id=\"live\" fill=\"none\" stroke=\"#c0392b\" stroke-width=\"1.5\" points=\"");
        for (size_t i = 0; i < tl->nrecs; i++) fprintf(f, "%.1f,%.1f ", PX(tl->recs[i].t), PY(tl->recs[i].live));
        fprintf(f, "\"/>\n");
        if (has_in_use) { /* the allocator's exact figure, rounded up to size classes */
            fprintf(f, "<polyline id=\"in_use\" fill=\"none\" stroke=\"#7f8c8d\" stroke-dasharray=\"4,3\" points=\"");
            for (size_t i = 0; i < tl->nrecs; i++) fprintf(f, "%.1f,%.1f ", PX(tl->recs[i].t), PY(tl->recs[i].in_use));
            fprintf(f, "\"/>\n");
        }
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" class=\"s\" fill=\"#c0392b\">live bytes (the band: each interval's "
                   "range)</text>\n", X0 + 10, Y0 - 8);
        if (has_in_use)
            fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" class=\"s\" fill=\"#7f8c8d\">- - allocator's exact in use</text>\n",
                    X0 + 330, Y0 - 8);
    }
    size_t hi = highest_peak(tl);
    for (size_t i = 0; i < tl->npeaks; i++) {
        const cli_tl_peak_t *pk = &tl->peaks[i];
        fprintf(f, "<g class=\"peak\" data-n=\"%zu\" data-t=\"%llu\" data-live=\"%llu\"><circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" "
                   "fill=\"%s\"><title>peak %zu: %s at %.2f s</title></circle>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"s\">%zu</text></g>\n",
                i + 1, (unsigned long long)pk->t, (unsigned long long)pk->live, PX(pk->t), PY(pk->live),
                i == hi ? "#8e44ad" : "#2c3e50", i + 1, cli_human((double)pk->live, b, sizeof b), pk->t / 1000.0,
                PX(pk->t), PY(pk->live) - 9, i + 1);
    }
    /* the highest peak's top sites */
    double ty = Y0 + 10;
    if (tl->npeaks) {
        const cli_tl_peak_t *pk = &tl->peaks[hi];
        fprintf(f, "<text x=\"830\" y=\"%.0f\" style=\"font-weight:bold\">peak %zu: %s at %.2f s</text>\n", ty, hi + 1,
                cli_human((double)pk->live, b, sizeof b), pk->t / 1000.0);
        ty += 20;
        cli_profile_t p;
        cli_timeline_profile(tl, hi, &p);
        cli_symbolize(&p, &sym_opts);
        view_t v = {.lines = true};
        sitetab_t t = {0};
        collect_sites(&p, &v, 1, &t);
        sort_sites(&t, false);
        for (size_t i = 0; i < t.n && (int)i < limit; i++) {
            char where[64];
            site_where(&t.sites[i], where, 40);
            fprintf(f, "<g class=\"site\"><text x=\"830\" y=\"%.0f\" class=\"s\">%s  ", ty,
                    cli_human(t.sites[i].val[1], b, sizeof b));
            xml_text(f, t.sites[i].func);
            fprintf(f, "</text><text x=\"850\" y=\"%.0f\" class=\"s\" fill=\"#555\">", ty + 14);
            xml_text(f, where);
            fprintf(f, "</text></g>\n");
            ty += 32;
        }
        free_sites(&t);
        cli_free_profile(&p);
    } else {
        fprintf(f, "<text x=\"830\" y=\"%.0f\">(no peak recorded)</text>\n", ty);
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    if (cli_out_close(&of, true)) {
        fprintf(stderr, "profmalloc: %s: write failed\n", out);
        return 2;
    }
    return 0;
}

int cmd_timeline(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *peak = NULL, *at = NULL;
    int limit = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_timeline, stdout);
            return 0;
        }
        if (!strcmp(a, "-o") && val) out = val, i++;
        else if (!strcmp(a, "--peak") && val) peak = val, i++;
        else if (!strcmp(a, "--at") && val) at = val, i++;
        else if (!strcmp(a, "-n") && val) {
            if (parse_count(val, &limit)) {
                fprintf(stderr, "profmalloc: -n %s: not a count\n%s", val, usage_timeline);
                return 2;
            }
            i++;
        }
        else if (!strcmp(a, "--debug-dir") && val) sym_opts.debug_dir = val, i++;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "profmalloc: unknown option %s\n%s", a, usage_timeline);
            return 2;
        } else if (in) {
            fprintf(stderr, "profmalloc: one timeline only (%s)\n%s", a, usage_timeline);
            return 2;
        } else in = a;
    }
    if (!in) {
        fprintf(stderr, "profmalloc: no timeline named\n%s", usage_timeline);
        return 2;
    }
    if (peak && at) {
        fprintf(stderr, "profmalloc: --peak or --at, not both\n");
        return 2;
    }
    cli_timeline_t tl;
    if (read_timeline(in, &tl)) return 2;
    cli_setup_color(stdout);
    sym_opts.progress = true;
    int rc = 0;
    if (peak || at) {
        size_t idx = 0;
        if (!tl.npeaks) {
            fprintf(stderr, "profmalloc: %s records no peak\n", in);
            cli_free_timeline(&tl);
            return 2;
        }
        if (peak && !strcmp(peak, "max")) {
            idx = highest_peak(&tl);
        } else if (peak) {
            char *e;
            long n = strtol(peak, &e, 10);
            if (*e || n < 1 || (size_t)n > tl.npeaks) {
                fprintf(stderr, "profmalloc: --peak %s: the timeline has peaks 1 to %zu\n", peak, tl.npeaks);
                cli_free_timeline(&tl);
                return 2;
            }
            idx = (size_t)n - 1;
        } else {
            char *e;
            double s = strtod(at, &e);
            if (e == at || (*e && strcmp(e, "s"))) {
                fprintf(stderr, "profmalloc: --at %s: seconds expected\n", at);
                cli_free_timeline(&tl);
                return 2;
            }
            double best = -1;
            for (size_t i = 0; i < tl.npeaks; i++) {
                double d = (double)tl.peaks[i].t / 1000 - s;
                if (d < 0) d = -d;
                if (best < 0 || d < best) best = d, idx = i;
            }
        }
        cli_profile_t p;
        cli_timeline_profile(&tl, idx, &p);
        cli_symbolize(&p, &sym_opts);
        if (out) {
            if (cli_write_profile_file(out, &p)) rc = 2;
        } else {
            char title[256], b[32];
            snprintf(title, sizeof title, "peak %zu of %s (%s at %.2f s)", idx + 1, in,
                     cli_human((double)tl.peaks[idx].live, b, sizeof b), tl.peaks[idx].t / 1000.0);
            cli_profile_t *pp = &p;
            view_t v = {.lines = true};
            top_print(stdout, title, &pp, 1, &v, limit, false);
        }
        cli_free_profile(&p);
    } else if (out) {
        rc = write_svg(out, in, &tl, limit);
    } else {
        char b[32], c[32];
        uint64_t maxlive = 0, last = tl.nrecs ? tl.recs[tl.nrecs - 1].live : 0;
        for (size_t i = 0; i < tl.nrecs; i++)
            if (tl.recs[i].max > maxlive) maxlive = tl.recs[i].max;
        printf("%s%s%s: pid %llu, %zu records over %.1f s, %s\n", col("\033[1m"), in, col("\033[0m"),
               (unsigned long long)tl.pid, tl.nrecs, tl.nrecs ? tl.recs[tl.nrecs - 1].t / 1000.0 : 0.0,
               tl.ended ? "ended at exit" : tl.truncated ? "cut short" : "no exit record");
        printf("  highest live %s, at the end %s\n", cli_human((double)maxlive, b, sizeof b),
               cli_human((double)last, c, sizeof c));
        if (tl.npeaks) printf("%5s %9s %10s  %s\n", "peak", "time", "live", "top site");
        for (size_t i = 0; i < tl.npeaks; i++) {
            cli_profile_t p;
            cli_timeline_profile(&tl, i, &p);
            cli_symbolize(&p, &sym_opts);
            view_t v = {.lines = true};
            sitetab_t t = {0};
            collect_sites(&p, &v, 1, &t);
            sort_sites(&t, false);
            char when[32];
            snprintf(when, sizeof when, "%.2f s", tl.peaks[i].t / 1000.0);
            printf("%5zu %9s %10s  ", i + 1, when, cli_human((double)tl.peaks[i].live, b, sizeof b));
            if (t.n) print_site(stdout, &t.sites[0], 80 - 28);
            else printf("-\n");
            free_sites(&t);
            cli_free_profile(&p);
        }
        if (tl.npeaks) printf("profmalloc timeline %s --peak N for a peak's sites; -o t.svg to draw it\n", in);
    }
    cli_free_timeline(&tl);
    return rc;
}
