/* grow — buffers grown by realloc to megabytes, as vectors and lists grow.
 *
 * What it stresses: NBUF buffers each grow from 1 KiB to a random target
 * (1 MiB .. -z bytes) by appends of an eighth of their length (CPython's
 * list growth; a C vector or string builder calling realloc grows the same
 * way), writing every appended byte.  The buffer to extend is chosen at
 * random, so the growths interleave and each buffer usually has a
 * neighbour.  When all are complete they are checked and freed; ROUNDS
 * rounds are run.  With -m double each step doubles the buffer (a C++
 * std::vector or a Go slice), and with -t each thread grows buffers of its
 * own at once (the `vectors` workload of bench/run.sh).
 * Why: a large block that realloc moves leaves its old copy behind.  glibc
 * grows a block into its top chunk or moves it with mremap, so nothing is
 * left; an allocator built on a page heap must grow blocks in place or
 * give the pages of the old copies back, or its peak RSS becomes the sum of
 * every step of every buffer.  Doubling in turn is the other side: an old
 * copy given back at once is the next buffer's new half, faulted in again.
 *
 * Options: -l buffers a thread (default 8), -n rounds (default 3), -z
 * largest target in bytes (default 16 MiB), -t threads (default 1),
 * -m double, -s seed.
 * Result: ops= reallocs, seconds= wall time; moved= reallocs that returned
 * a different pointer.
 */
#include "bench_common.h"

#define START 1024
#define CHUNK 4096

typedef struct {
    unsigned char *p;
    size_t len, target;
    uint32_t id;
} buf_t;

/* The byte every position of buffer id holds: one value per 4 KiB chunk. */
static inline unsigned char val(uint32_t id, size_t off) { return (unsigned char)(id * 31u + off / CHUNK); }

static void fill(buf_t *b, size_t from, size_t to)
{
    while (from < to) {
        size_t end = (from / CHUNK + 1) * CHUNK;
        if (end > to) end = to;
        memset(b->p + from, val(b->id, from), end - from);
        from = end;
    }
}

typedef struct {
    bench_opts_t o;
    int doubling;
    uint64_t seed;
    double ops, moved;
} job_t;

static void *run(void *arg)
{
    job_t *j = arg;
    rng_t r;
    rng_seed(&r, j->seed);
    long n = j->o.live;
    buf_t *b = xmalloc(sizeof *b * (size_t)n);
    uint32_t *active = xmalloc(sizeof *active * (size_t)n);
    for (long round = 0; round < j->o.iters; round++) {
        for (long i = 0; i < n; i++) {
            size_t target = rng_range(&r, 1 << 20, (size_t)j->o.size);
            b[i] = (buf_t){xmalloc(START), START, target, (uint32_t)((uint64_t)j->seed * 7919u + round * n + i)};
            fill(&b[i], 0, START);
            active[i] = (uint32_t)i;
        }
        long nact = n;
        while (nact > 0) {
            uint32_t k = rng_below(&r, (uint32_t)nact);
            buf_t *x = &b[active[k]];
            size_t want = j->doubling ? 2 * x->len : x->len + x->len / 8;
            if (want > x->target) want = x->target;
            unsigned char *q = realloc(x->p, want);
            if (!q) die("realloc(%zu) returned NULL", want);
            j->ops++;
            if (q != x->p) j->moved++;
            if (q[0] != val(x->id, 0) || q[x->len - 1] != val(x->id, x->len - 1))
                die("realloc lost the contents of a %zu-byte buffer", x->len);
            x->p = q;
            fill(x, x->len, want);
            x->len = want;
            if (x->len >= x->target) active[k] = active[--nact];
        }
        for (long i = 0; i < n; i++) {
            for (size_t off = 0; off < b[i].len; off += CHUNK / 2)
                if (b[i].p[off] != val(b[i].id, off)) die("buffer %ld corrupted at byte %zu", i, off);
            if (b[i].p[b[i].len - 1] != val(b[i].id, b[i].len - 1)) die("buffer %ld: last byte corrupted", i);
            free(b[i].p);
        }
    }
    free(b);
    free(active);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 3, .seed = 1, .live = 8, .batch = 1, .size = 16 << 20};
    parse_opts(argc, argv, &o, "[-l buffers] [-n rounds] [-z largest] [-t threads] [-m double] [-s seed]");
    if (o.size < 2 << 20) die("-z %ld: the largest target must be at least 2 MiB", o.size);
    int doubling = o.mode && !strcmp(o.mode, "double");
    if (o.mode && !doubling) die("unknown mode %s (the only mode is double)", o.mode);
    job_t *job = xmalloc(sizeof *job * (size_t)o.threads);
    pthread_t *tid = xmalloc(sizeof *tid * (size_t)o.threads);
    double t0 = now_sec();
    for (int i = 0; i < o.threads; i++) {
        job[i] = (job_t){o, doubling, o.seed + (uint64_t)i * 1000003u, 0, 0};
        if (o.threads == 1) run(&job[i]);
        else xpthread_create(&tid[i], run, &job[i]);
    }
    if (o.threads > 1)
        for (int i = 0; i < o.threads; i++) xpthread_join(tid[i]);
    double t = now_sec() - t0, ops = 0, moved = 0;
    for (int i = 0; i < o.threads; i++) ops += job[i].ops, moved += job[i].moved;
    char extra[64];
    snprintf(extra, sizeof extra, "buffers=%ld moved=%.0f", o.live * o.threads, moved);
    report("grow", o.threads, ops, t, extra);
    free(job);
    free(tid);
    return 0;
}
