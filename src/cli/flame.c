/* flame.c — `profmalloc flame`: a profile's stacks as a self-contained
 * SVG flame graph (root at the bottom, a frame's width its bytes or
 * objects), with inline JavaScript only: hover shows a frame's value and
 * share, a click zooms to it, "Search" highlights the frames matching a
 * regular expression and gives their share.  Frames narrower than 0.1
 * pixel are left out (their bytes stay in their parent's width).
 * test/cli/test_cli.py: test_flame_svg.  Single-threaded, like the
 * whole command. */
#include "cli.h"
#include "cli_main.h"

#include <stdlib.h>
#include <string.h>

/* The frames of a stack drawn, innermost first: the tree is walked
 * recursively, and a crafted profile may hold a stack of any depth
 * (test_flame_deep_stack). */
enum { FRAMES_MAX = 1024 };

typedef struct node {
    char *name;
    double v;
    struct node *child, *next;
} node_t;

static node_t *child_of(node_t *n, const char *name)
{
    for (node_t *c = n->child; c; c = c->next)
        if (!strcmp(c->name, name)) return c;
    node_t *c = xcalloc(1, sizeof *c);
    c->name = xstrdup(name);
    c->next = n->child;
    n->child = c;
    return c;
}

static void free_tree(node_t *n)
{
    while (n) {
        node_t *next = n->next;
        free_tree(n->child);
        free(n->name);
        free(n);
        n = next;
    }
}

static int depth_of(const node_t *n)
{
    int d = 0;
    for (const node_t *c = n->child; c; c = c->next) {
        int k = depth_of(c);
        if (k > d) d = k;
    }
    return d + 1;
}

static void xml(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

typedef struct {
    FILE *f;
    double total, width;
    int height, rows;
    const view_t *v;
} emit_t;

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(node_t *const *)a)->name, (*(node_t *const *)b)->name);
}

static void emit(emit_t *e, node_t *n, int depth, double x)
{
    double px = e->width * n->v / e->total;
    if (px < 0.1 && depth) return;
    unsigned h = 2166136261u;
    for (const char *c = n->name; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    int r = 205 + (int)(h % 50), g = 90 + (int)((h >> 8) % 130), b = 40 + (int)((h >> 16) % 40);
    char val[32];
    fmt_value(e->v, n->v, val, sizeof val);
    fprintf(e->f, "<g class=\"f\" data-d=\"%d\" data-x=\"%.0f\" data-v=\"%.0f\"><title>", depth, x, n->v);
    xml(e->f, n->name);
    fprintf(e->f, " (%s, %.2f%%)</title><rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"15\" fill=\"rgb(%d,%d,%d)\" rx=\"2\"/>"
                  "<text x=\"%.2f\" y=\"%d\">",
            val, 100 * n->v / e->total, 10 + e->width * x / e->total, e->height - 36 - 16 * (depth + 1), px, r, g, b,
            13 + e->width * x / e->total, e->height - 36 - 16 * depth - 5);
    /* the label as the script fits it (so that it shows without script) */
    int fit = (int)((px - 6) / 7);
    size_t nl = strlen(n->name);
    if (fit >= 3) {
        if (nl <= (size_t)fit) {
            xml(e->f, n->name);
        } else {
            char *t = xstrndup(n->name, (size_t)fit - 2);
            xml(e->f, t);
            fputs("..", e->f);
            free(t);
        }
    }
    fprintf(e->f, "</text></g>\n");
    /* children in name order, as flame graphs lay them out */
    size_t nc = 0;
    for (node_t *c = n->child; c; c = c->next) nc++;
    node_t **v = xcalloc(nc, sizeof *v);
    nc = 0;
    for (node_t *c = n->child; c; c = c->next) v[nc++] = c;
    if (nc) qsort(v, nc, sizeof *v, cmp_name);
    for (size_t i = 0; i < nc; i++) {
        emit(e, v[i], depth + 1, x);
        x += v[i]->v;
    }
    free(v);
}

static const char *const script =
    "<script type=\"text/ecmascript\"><![CDATA[\n"
    "(function(){\n"
    "var svg=document.documentElement, W=+svg.getAttribute('data-w'), T=+svg.getAttribute('data-total');\n"
    "var frames=Array.prototype.slice.call(document.querySelectorAll('g.f'));\n"
    "var det=document.getElementById('details'), mat=document.getElementById('matched');\n"
    "function A(g,k){return +g.getAttribute('data-'+k);}\n"
    "function fit(g,w){var t=g.querySelector('text'), n=g.querySelector('title').textContent;\n"
    " n=n.replace(/ \\([^()]*\\)$/,''); var c=Math.floor((w-6)/7);\n"
    " t.textContent = c<3 ? '' : (n.length<=c ? n : n.slice(0,c-2)+'..');}\n"
    "function zoom(z){var x0=z?A(z,'x'):0, v0=z?A(z,'v'):T, d0=z?A(z,'d'):0;\n"
    " frames.forEach(function(g){var x=A(g,'x'), v=A(g,'v'), d=A(g,'d'), r=g.querySelector('rect'), t=g.querySelector('text');\n"
    "  var inside = x>=x0 && x+v<=x0+v0+0.5 && d>=d0, anc = d<d0 && x<=x0 && x+v>=x0+v0-0.5;\n"
    "  if(!inside && !anc){g.style.display='none';return;}\n"
    "  g.style.display=''; var px = anc?10:10+W*(x-x0)/v0, w = anc?W:W*v/v0;\n"
    "  r.setAttribute('x',px); r.setAttribute('width',w); t.setAttribute('x',px+3);\n"
    "  g.style.opacity = anc?0.6:1; fit(g,w);});\n"
    " document.getElementById('unzoom').style.display = z?'':'none';}\n"
    "frames.forEach(function(g){\n"
    " g.addEventListener('mouseover',function(){det.textContent=g.querySelector('title').textContent;});\n"
    " g.addEventListener('mouseout',function(){det.textContent=' ';});\n"
    " g.addEventListener('click',function(){zoom(A(g,'d')?g:null);});});\n"
    "document.getElementById('unzoom').addEventListener('click',function(){zoom(null);});\n"
    "document.getElementById('search').addEventListener('click',function(){\n"
    " var q=prompt('Search for (regular expression):',''); var re=null;\n"
    " if(q){try{re=new RegExp(q);}catch(e){alert(e);return;}}\n"
    " var iv=[];\n"
    " frames.forEach(function(g){var r=g.querySelector('rect'), n=g.querySelector('title').textContent.replace(/ \\([^()]*\\)$/,'');\n"
    "  if(!r.getAttribute('data-fill')) r.setAttribute('data-fill',r.getAttribute('fill'));\n"
    "  var m=re&&re.test(n); r.setAttribute('fill', m?'rgb(230,0,230)':r.getAttribute('data-fill'));\n"
    "  if(m) iv.push([A(g,'x'),A(g,'x')+A(g,'v')]);});\n"
    " iv.sort(function(a,b){return a[0]-b[0];}); var s=0, e=-1;\n"
    " iv.forEach(function(p){if(p[0]>=e){s+=p[1]-p[0];e=p[1];}else if(p[1]>e){s+=p[1]-e;e=p[1];}});\n"
    " mat.textContent = re ? 'Matched: '+(100*s/T).toFixed(2)+'%' : ' ';});\n"
    "frames.forEach(function(g){fit(g,+g.querySelector('rect').getAttribute('width'));});\n"
    "})();\n"
    "]]></script>\n";

static const char *const usage_flame =
    "usage: profmalloc flame FILE -o OUT.svg [--inuse|--alloc] [--objects]\n"
    "\n"
    "Writes an interactive SVG flame graph of a heap profile: each box a\n"
    "function, its width the memory allocated under it, callers below callees.\n"
    "Open it in a browser: hover for sizes and shares, click to zoom, Search to\n"
    "highlight functions by regular expression.  No external script is fetched.\n"
    "\n"
    "  -o OUT.svg    where to write it (required; - for stdout)\n"
    "  --inuse       memory in use (default);  --alloc  all memory allocated\n"
    "  --objects     objects instead of bytes\n"
    "  --title T     the title (default: the profile's name)\n";

int cmd_flame(int argc, char **argv)
{
    view_t v = {0};
    const char *in = NULL, *out = NULL, *title = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_flame, stdout);
            return 0;
        }
        if (!strcmp(a, "--inuse")) v.alloc = false;
        else if (!strcmp(a, "--alloc")) v.alloc = true;
        else if (!strcmp(a, "--objects")) v.objects = true;
        else if (!strcmp(a, "-o") && i + 1 < argc) out = argv[++i];
        else if (!strncmp(a, "-o", 2) && a[2]) out = a + 2;
        else if (!strcmp(a, "--title") && i + 1 < argc) title = argv[++i];
        else if (!strcmp(a, "--debug-dir") && i + 1 < argc) sym_opts.debug_dir = argv[++i];
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "profmalloc: unknown option %s\n%s", a, usage_flame);
            return 2;
        } else if (in) {
            fprintf(stderr, "profmalloc: one profile only (%s)\n%s", a, usage_flame);
            return 2;
        } else in = a;
    }
    if (!in || !out) {
        fprintf(stderr, "profmalloc: %s\n%s", in ? "no output named (-o OUT.svg)" : "no profile named", usage_flame);
        return 2;
    }
    cli_profile_t p;
    sym_opts.progress = true;
    if (load_profile(in, &p)) return 2;
    node_t root = {xstrdup("all"), 0, NULL, NULL};
    for (size_t i = 0; i < p.nsamples; i++) {
        const cli_sample_t *s = &p.samples[i];
        double val, var, n;
        sample_value(&p, s, &v, &val, &var, &n);
        if (val <= 0) continue;
        root.v += val;
        node_t *cur = &root;
        for (uint32_t d = s->depth < FRAMES_MAX ? s->depth : FRAMES_MAX; d-- > 0;) {
            char fb[32];
            cur = child_of(cur, loc_func(&p.locs[s->locs[d]], fb, sizeof fb));
            cur->v += val;
        }
    }
    cli_out_t of;
    FILE *f = cli_out_open(out, &of);
    if (!f) {
        free_tree(root.child);
        free(root.name);
        cli_free_profile(&p);
        return 2;
    }
    int rows = depth_of(&root);
    double W = 1180;
    int H = 16 * rows + 36 + 52;
    char tot[32];
    fmt_value(&v, root.v, tot, sizeof tot);
    fprintf(f, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
               "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"%d\" "
               "viewBox=\"0 0 1200 %d\" data-w=\"%.0f\" data-total=\"%.0f\">\n",
            H, H, W, root.v);
    fprintf(f, "<style>text{font-family:Verdana,sans-serif;font-size:12px;fill:#000}"
               "g.f text{pointer-events:none;font-size:11px}g.f:hover rect{stroke:#000;stroke-width:0.5}"
               "#search,#unzoom{cursor:pointer}</style>\n"
               "<rect x=\"0\" y=\"0\" width=\"1200\" height=\"%d\" fill=\"#f8f8f0\"/>\n", H);
    fprintf(f, "<text x=\"600\" y=\"24\" text-anchor=\"middle\" style=\"font-size:17px\">");
    xml(f, title ? title : in);
    fprintf(f, ": %s %s</text>\n", tot, index_name(&v));
    fprintf(f, "<text id=\"unzoom\" x=\"10\" y=\"24\" style=\"display:none\">Reset zoom</text>\n"
               "<text id=\"search\" x=\"1190\" y=\"24\" text-anchor=\"end\">Search</text>\n"
               "<text id=\"matched\" x=\"1190\" y=\"%d\" text-anchor=\"end\"> </text>\n"
               "<text id=\"details\" x=\"10\" y=\"%d\"> </text>\n",
            H - 12, H - 12);
    emit_t e = {f, root.v > 0 ? root.v : 1, W, H, rows, &v};
    if (root.v > 0) emit(&e, &root, 0, 0);
    else fprintf(f, "<text x=\"600\" y=\"60\" text-anchor=\"middle\">(no samples)</text>\n");
    fputs(script, f);
    fprintf(f, "</svg>\n");
    int bad = cli_out_close(&of, true);
    free_tree(root.child);
    free(root.name);
    cli_free_profile(&p);
    if (bad) {
        fprintf(stderr, "profmalloc: %s: write failed\n", out);
        return 2;
    }
    return 0;
}
