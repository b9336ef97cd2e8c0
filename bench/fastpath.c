/* fastpath — the allocator's fast path, per size class.
 *
 * What it stresses: for each of 16, 32, 64, 128, 256, 1024, 4096 and
 * 32768 bytes, (a) N back-to-back malloc+free pairs of that size (the block
 * goes straight back to the thread cache and is handed out again: the pure
 * cost of the inline fast path), and (b) batches of B mallocs followed by B
 * frees (the cache has to grow past its steady state, so refills from and
 * flushes to the central free lists show up).
 * Why: this is where a tcmalloc-style thread cache must beat glibc's tcache
 * +bins; a regression in the per-call overhead (a sampling counter, a TLS
 * lookup, a lock) shows up here first, per size.
 *
 * Options: -n pairs per size (default 2000000), -b batch size (default
 * 1000), -s seed (unused: the sequence is fixed), -m pairs -z SIZE runs only
 * the pairs loop for one size (used by count-instructions.sh).
 * Result: seconds= is the sum over all sizes and both patterns; per size
 * pair_ns_SIZE= and batch_ns_SIZE= give ns per malloc+free.  Large sizes
 * run fewer batch operations (their batches touch many pages).
 */
#include "bench_common.h"

static const size_t sizes[] = {16, 32, 64, 128, 256, 1024, 4096, 32768};

__attribute__((noinline)) static void run_pairs(size_t size, long n)
{
    for (long i = 0; i < n; i++) {
        unsigned char *p = malloc(size);
        if (!p) die("malloc(%zu) returned NULL", size);
        p[0] = (unsigned char)i;
        p[size - 1] = (unsigned char)i;
        escape(p);
        if (p[0] != (unsigned char)i) die("block %p lost its contents", (void *)p);
        free(p);
    }
}

__attribute__((noinline)) static void run_batches(size_t size, long rounds, long batch, void **slots)
{
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < batch; i++) {
            unsigned char *p = malloc(size);
            if (!p) die("malloc(%zu) returned NULL", size);
            p[0] = (unsigned char)i;
            p[size - 1] = (unsigned char)(i >> 3);
            slots[i] = p;
        }
        escape(slots);
        for (long i = 0; i < batch; i++) {
            unsigned char *p = slots[i];
            if (p[0] != (unsigned char)i || p[size - 1] != (unsigned char)(i >> 3))
                die("batch block %p of %zu bytes corrupted", (void *)p, size);
            free(p);
        }
    }
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 2000000, .seed = 1, .live = 1, .batch = 1000, .size = 0, .mode = "all"};
    parse_opts(argc, argv, &o, "[-n pairs_per_size] [-b batch] [-m all|pairs -z size]");
    char extra[2048] = "";
    size_t el = 0;

    if (strcmp(o.mode, "pairs") == 0) {
        if (o.size < 1) die("-m pairs needs -z SIZE");
        double t0 = now_sec();
        run_pairs((size_t)o.size, o.iters);
        double t = now_sec() - t0;
        snprintf(extra, sizeof extra, "size=%ld pair_ns_%ld=%.2f", o.size, o.size, t * 1e9 / (double)o.iters);
        report("fastpath", 1, (double)o.iters, t, extra);
        return 0;
    }
    if (strcmp(o.mode, "all") != 0) die("unknown mode %s", o.mode);

    void **slots = xmalloc((size_t)o.batch * sizeof *slots);
    double total = 0, ops = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t s = sizes[k];
        /* warm-up: bring the size class into the cache */
        run_pairs(s, 1000);
        double t0 = now_sec();
        run_pairs(s, o.iters);
        double tp = now_sec() - t0;
        long nb = o.iters;
        if (s >= 32768) nb /= 64;
        else if (s >= 4096) nb /= 16;
        else if (s >= 1024) nb /= 4;
        long rounds = nb / o.batch;
        if (rounds < 1) rounds = 1;
        t0 = now_sec();
        run_batches(s, rounds, o.batch, slots);
        double tb = now_sec() - t0;
        total += tp + tb;
        ops += (double)o.iters + (double)(rounds * o.batch);
        el += (size_t)snprintf(extra + el, sizeof extra - el, "%spair_ns_%zu=%.2f batch_ns_%zu=%.2f", k ? " " : "", s,
                               tp * 1e9 / (double)o.iters, s, tb * 1e9 / (double)(rounds * o.batch));
    }
    free(slots);
    report("fastpath", 1, ops, total, extra);
    return 0;
}
