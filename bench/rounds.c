/* rounds — a live set made, freed whole and made again, round after round.
 *
 * What it stresses: -n rounds of three phases, one per size range: small
 * blocks (16..256 B, 100 MB per round), medium ones (1..64 KiB, 300 MB)
 * and large ones (100 KiB..1 MiB, 300 MB), each block written whole as it
 * is made, then checked and freed in the order it was made.  The whole
 * heap is freed at the end of each phase and made again at the start of
 * the next round's; only the array of pointers stays.
 * Why: the release policy.  A batch job, a build step or a request burst
 * that ends and starts again frees most of its heap at once and asks for
 * as much a moment later.  An allocator that hands the freed pages back to
 * the OS at the free faults every one of them in again in the next round
 * (a page fault per 4 KiB, where writing the page costs a tenth of that);
 * one that keeps them runs at the speed of its free lists.  -z scales the
 * bytes of each phase (default 100, in percent).
 *
 * Options: -n rounds (default 5), -z percent of the default sizes, -s seed.
 * Result: ops= blocks made, seconds= wall time of all rounds,
 * faults= minor page faults during them.
 */
#include "bench_common.h"

#include <sys/resource.h>

typedef struct {
    size_t lo, hi, bytes;
} phase_t;

static long minor_faults(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 5, .seed = 1, .live = 1, .batch = 1, .size = 100};
    parse_opts(argc, argv, &o, "[-n rounds] [-z percent] [-s seed]");
    if (o.size < 1) die("-z must be at least 1");
    const phase_t phase[] = {{16, 256, 100u << 20}, {1024, 65536, 300u << 20}, {100000, 1u << 20, 300u << 20}};
    size_t cap = 0;
    for (size_t k = 0; k < sizeof phase / sizeof phase[0]; k++) {
        size_t n = phase[k].bytes / 100 * (size_t)o.size / ((phase[k].lo + phase[k].hi) / 2) * 2 + 16;
        if (n > cap) cap = n;
    }
    slot_t *slot = xmalloc(cap * sizeof *slot);
    rng_t r;
    rng_seed(&r, o.seed);
    double ops = 0;
    long f0 = minor_faults();
    double t0 = now_sec();
    for (long round = 0; round < o.iters; round++)
        for (size_t k = 0; k < sizeof phase / sizeof phase[0]; k++) {
            const phase_t *ph = &phase[k];
            size_t want = ph->bytes / 100 * (size_t)o.size, made = 0, n = 0;
            while (made < want) {
                if (n == cap) die("internal: slot array full");
                size_t z = rng_range(&r, ph->lo, ph->hi);
                slot[n] = (slot_t){xmalloc(z), (uint32_t)rng_next(&r)};
                memset(slot[n].p, (int)(slot[n].tag >> 8), z);
                blk_init(slot[n].p, z, slot[n].tag);
                made += z;
                n++;
            }
            for (size_t i = 0; i < n; i++) slot_free(slot[i], ph->lo, ph->hi);
            ops += (double)n;
        }
    double t = now_sec() - t0;
    char extra[64];
    snprintf(extra, sizeof extra, "faults=%ld", minor_faults() - f0);
    report("rounds", 1, ops, t, extra);
    free(slot);
    return 0;
}
