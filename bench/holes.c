/* holes — large blocks replaced at random among thousands of free runs.
 *
 * What it stresses: LIVE slots (default 20 000) each start with a block of
 * 1-3 MiB (uniform, plus a page); every other one is freed, so the heap
 * holds ~10 000 free runs of 1-3 MiB kept apart by live blocks.  Each step
 * picks a random slot: a live block is freed, an empty slot gets a new
 * block; one byte of each new block is written.  About 30 GB of address
 * space, little of it resident.
 * Why: a page heap must find a best fit among tens of thousands of long
 * free runs in O(log n), not by walking them all; a walk costs tens of
 * microseconds per large malloc here, where the peers take one or two.
 *
 * Options: -n steps (default 100000), -l live slots (default 20000),
 * -s seed.
 * Result: ops= steps, seconds= wall time of the steps (not the set-up).
 */
#include "bench_common.h"

static size_t pick_size(rng_t *r) { return ((size_t)1 << 20) + 4096 + rng_below(r, 2u << 20); }

static unsigned char *make(rng_t *r)
{
    unsigned char *p = xmalloc(pick_size(r));
    p[0] = 0x5a;
    return p;
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 100000, .seed = 1, .live = 20000, .batch = 1};
    parse_opts(argc, argv, &o, "[-n steps] [-l live] [-s seed]");
    rng_t r;
    rng_seed(&r, o.seed);
    unsigned char **slot = xmalloc(sizeof *slot * (size_t)o.live);
    for (long i = 0; i < o.live; i++) slot[i] = make(&r);
    for (long i = 0; i < o.live; i += 2) {
        free(slot[i]);
        slot[i] = NULL;
    }
    double t0 = now_sec();
    for (long i = 0; i < o.iters; i++) {
        uint32_t k = rng_below(&r, (uint32_t)o.live);
        if (slot[k]) {
            if (slot[k][0] != 0x5a) die("block %p corrupted", (void *)slot[k]);
            free(slot[k]);
            slot[k] = NULL;
        } else {
            slot[k] = make(&r);
        }
    }
    double t = now_sec() - t0;
    for (long i = 0; i < o.live; i++) free(slot[i]);
    char extra[64];
    snprintf(extra, sizeof extra, "live=%ld", o.live);
    report("holes", 1, (double)o.iters, t, extra);
    free(slot);
    return 0;
}
