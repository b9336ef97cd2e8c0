/* bigtouch — 64 live blocks of 64 KiB-4 MiB, each touched at three bytes.
 *
 * What it stresses: LIVE slots (default 64) hold blocks whose sizes are
 * log-uniform in [64 KiB, 4 MiB]; each step frees a random slot's block
 * and mallocs a new one, writing its first, middle and last byte.
 * Why: unlike bench/large (every page written), the work here is the
 * allocator's own: finding and cutting a run, and what it does with the
 * run freed.  An allocator that unmaps or madvises every freed run and
 * maps a fresh one pays system calls and three page faults per step; one
 * that reuses its free runs pays neither.  Peak RSS stays small for all
 * (three pages per block), so the time says it all.
 * With -m aligned each block comes from posix_memalign on a random power
 * of two from 64 KiB to 2 MiB (buffers for O_DIRECT, huge pages, SIMD
 * arenas): a block's run must start on its alignment, and what is left
 * before and after it is a piece the next blocks must still fit in.
 *
 * Options: -n steps (default 200000), -l live (default 64), -s seed,
 * -m plain|aligned (default plain).
 * Result: ops= steps, seconds= wall time of the replacement loop.
 */
#include "bench_common.h"

#define MIN_SZ (64u << 10)
#define MAX_SZ (4u << 20)

static int aligned;

static big_t make(rng_t *r)
{
    unsigned e = 16 + rng_below(r, 6); /* 2^16 .. 2^21 */
    size_t lo = (size_t)1 << e;
    size_t n = lo + rng_below(r, (uint32_t)lo);
    big_t b = {NULL, n, (unsigned char)rng_next(r)};
    if (aligned) {
        size_t align = (size_t)1 << (16 + rng_below(r, 6)); /* 64 KiB .. 2 MiB */
        if (posix_memalign((void **)&b.p, align, n) != 0) die("posix_memalign(%zu, %zu) failed", align, n);
        if ((uintptr_t)b.p & (align - 1)) die("posix_memalign(%zu) gave %p", align, (void *)b.p);
    } else {
        b.p = xmalloc(n);
    }
    b.p[0] = b.tag;
    b.p[n / 2] = (unsigned char)(b.tag + 1);
    b.p[n - 1] = (unsigned char)(b.tag + 2);
    return b;
}

static void drop(big_t b)
{
    if (b.p[0] != b.tag || b.p[b.n / 2] != (unsigned char)(b.tag + 1) || b.p[b.n - 1] != (unsigned char)(b.tag + 2))
        die("block %p of %zu bytes corrupted", (void *)b.p, b.n);
    free(b.p);
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 200000, .seed = 1, .live = 64, .batch = 1, .mode = "plain"};
    parse_opts(argc, argv, &o, "[-n steps] [-l live] [-s seed] [-m plain|aligned]");
    if (strcmp(o.mode, "aligned") == 0) aligned = 1;
    else if (strcmp(o.mode, "plain") != 0) die("unknown mode %s", o.mode);
    double t = big_replace(&o, make, drop);
    char extra[64];
    snprintf(extra, sizeof extra, "live=%ld mode=%s", o.live, o.mode);
    report("bigtouch", 1, (double)o.iters, t, extra);
    return 0;
}
