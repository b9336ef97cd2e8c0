/* replay — replays an allocation trace recorded from a real program.
 *
 * What it stresses: the exact sequence of malloc/free/realloc/memalign
 * calls (sizes and lifetimes) that g++'s cc1plus made while compiling a
 * small C++ file (bench/traces/gxx-cc1plus.cc, ~760k calls, recorded on
 * Debian 12 / gcc 12 with bench/tools/record-trace.sh).  Every block gets
 * its first and last byte written and checked before it is freed; blocks
 * the program never freed are freed at the end of each pass.
 * Why: synthetic workloads miss the real mix of a compiler — many tiny
 * tree nodes, hash tables that grow by realloc, a long tail of big
 * buffers, long-lived and short-lived objects interleaved.  This is the
 * "does it hold up on a real program" check.
 *
 * Trace format (text, gzip'd in the repo; run.sh decompresses it):
 *   # comment            m SIZE             allocation number N (implicit,
 *   a ALIGN SIZE         memalign            counting from 1)
 *   f AGE                free of the allocation made AGE allocations ago
 *   r AGE SIZE           realloc of that block (it keeps its number)
 *
 * Usage: replay [-n passes (default 3)] [-l max_calls (default all)] TRACE_FILE
 * Result: ops= calls replayed, seconds= wall time of the passes (parsing
 * excluded).
 */
#include "bench_common.h"

typedef struct {
    uint32_t kind; /* 'm', 'a', 'f', 'r' */
    uint32_t id;
    uint64_t size;  /* m, a, r */
    uint32_t align; /* a */
} op_t;

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 3, .seed = 1, .live = 0x7fffffff, .batch = 1};
    parse_opts(argc, argv, &o, "[-n passes] [-l max_calls] TRACE_FILE");
    if (optind >= argc) die("usage: replay [-n passes] TRACE_FILE");
    FILE *f = fopen(argv[optind], "r");
    if (!f) die("cannot open %s: %s", argv[optind], strerror(errno));
    size_t cap = 1 << 20, n = 0;
    op_t *ops = xmalloc(cap * sizeof *ops);
    uint32_t nalloc = 0;
    char line[256];
    while ((long)n < o.live && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (n == cap) {
            cap *= 2;
            ops = realloc(ops, cap * sizeof *ops);
            if (!ops) die("realloc failed while loading the trace");
        }
        op_t *p = &ops[n];
        unsigned long long a = 0, b = 0;
        int k = sscanf(line + 1, "%llu %llu", &a, &b);
        p->kind = (uint32_t)line[0];
        switch (line[0]) {
        case 'm': if (k < 1) goto bad; p->id = ++nalloc; p->size = a; break;
        case 'a': if (k < 2) goto bad; p->id = ++nalloc; p->align = (uint32_t)a; p->size = b; break;
        case 'f': if (k < 1 || a >= nalloc) goto bad; p->id = nalloc - (uint32_t)a; break;
        case 'r': if (k < 2 || a >= nalloc) goto bad; p->id = nalloc - (uint32_t)a; p->size = b; break;
        default: goto bad;
        }
        n++;
        continue;
    bad:
        die("bad trace line %zu: %s", n + 1, line);
    }
    fclose(f);
    if (n == 0) die("empty trace");

    unsigned char **ptr = xmalloc(((size_t)nalloc + 1) * sizeof *ptr);
    uint64_t *sz = xmalloc(((size_t)nalloc + 1) * sizeof *sz);
    double t = 0;
    for (long pass = 0; pass < o.iters; pass++) {
        memset(ptr, 0, ((size_t)nalloc + 1) * sizeof *ptr);
        double t0 = now_sec();
        for (size_t i = 0; i < n; i++) {
            const op_t *p = &ops[i];
            unsigned char *q = ptr[p->id];
            unsigned char tag = (unsigned char)(p->id * 131u + 7);
            switch (p->kind) {
            case 'm':
            case 'a':
                if (p->kind == 'm') {
                    q = malloc(p->size);
                } else {
                    void *v = NULL;
                    if (posix_memalign(&v, p->align, p->size)) v = NULL;
                    q = v;
                    if (q && ((uintptr_t)q & (p->align - 1))) die("posix_memalign(%u) misaligned", p->align);
                }
                if (!q && p->size) die("allocation of %llu bytes failed", (unsigned long long)p->size);
                if (q && p->size) {
                    q[0] = tag;
                    q[p->size - 1] = tag;
                }
                ptr[p->id] = q;
                sz[p->id] = p->size;
                break;
            case 'r':
                if (q && sz[p->id] && q[0] != tag) die("block %u corrupted before realloc", p->id);
                q = realloc(q, p->size);
                if (!q && p->size) die("realloc to %llu bytes failed", (unsigned long long)p->size);
                if (q && p->size) {
                    if (sz[p->id] && q[0] != tag) die("realloc lost the contents of block %u", p->id);
                    q[0] = tag;
                    q[p->size - 1] = tag;
                }
                ptr[p->id] = q;
                sz[p->id] = p->size;
                break;
            case 'f':
                if (q && sz[p->id] && (q[0] != tag || q[sz[p->id] - 1] != tag))
                    die("block %u (%llu bytes) corrupted before free", p->id, (unsigned long long)sz[p->id]);
                free(q);
                ptr[p->id] = NULL;
                break;
            }
        }
        /* the blocks the program never freed; skipping the freed ones keeps
         * ~370k calls of free(NULL) per pass, which the program never made,
         * out of the replay */
        for (uint32_t id = 1; id <= nalloc; id++)
            if (ptr[id]) free(ptr[id]);
        t += now_sec() - t0;
    }
    char extra[96];
    snprintf(extra, sizeof extra, "passes=%ld calls_per_pass=%zu", o.iters, n);
    report("replay", 1, (double)n * (double)o.iters, t, extra);
    free(ptr);
    free(sz);
    free(ops);
    return 0;
}
