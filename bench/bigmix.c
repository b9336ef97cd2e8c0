/* bigmix — random replacement of big blocks, malloc and aligned_alloc mixed.
 *
 * What it stresses: LIVE slots hold big blocks; each step picks a random
 * slot, checks and frees its block and allocates a new one: half the time
 * aligned_alloc(al, n), al a power of two from 16 KiB to 2 MiB (the eight
 * powers equally likely) and n = al/2 + [0, 3*al) rounded up to a multiple
 * of al; otherwise malloc(1 + [0, 3 MiB)).  With the default 512 slots
 * about 700 MiB are live at any time, every block's size differs from the
 * one freed before it, and aligned blocks need their start cut to a
 * boundary.
 * Why: a heap of big blocks replaced at random keeps a large pool of free
 * pages whose pieces rarely fit the next request.  An allocator that
 * returns freed pages to the OS too eagerly (a fixed cap on the resident
 * free pages, small next to such a heap) pays a system call and a page
 * fault per page on nearly every step; one that keeps them all grows its
 * RSS.  This workload found such a cap in profmalloc's page heap.
 *
 * Options: -n steps (default 20000), -l live slots (default 512), -s seed,
 * -m pages|first.
 * -m pages (default): one byte written in every 4 KiB page of the
 * requested size, as a program filling its buffers would; the first and
 * last written bytes are checked at free.  -m first: only the first byte
 * is written and checked, so the time is the allocator's own (its system
 * calls, and no page faults beyond one per block); use a larger -n, such as
 * 200000.
 * Result: ops= steps, seconds= wall time of the replacement loop only (not
 * the initial fill nor the final frees), live=, mode=.
 */
#include "bench_common.h"

#define PAGE 4096
#define MIN_AL (16u << 10)
#define N_AL 8                 /* 16 KiB .. 2 MiB */
#define MAX_MALLOC (3u << 20)

static int pages_mode;
static long step; /* blocks made so far: the tag of the next */

/* The last byte written into a block of n bytes. */
static size_t last_written(size_t n) { return pages_mode ? (n - 1) / PAGE * PAGE : 0; }

/* The tag is never 0, so a block left unwritten (a fresh zero page) fails. */
static big_t big_new(rng_t *r)
{
    big_t b = {NULL, 0, (unsigned char)(step++ % 255 + 1)};
    if (rng_below(r, 2)) {
        size_t al = (size_t)MIN_AL << rng_below(r, N_AL);
        b.n = (al / 2 + rng_below(r, 3 * (uint32_t)al) + al - 1) / al * al;
        b.p = aligned_alloc(al, b.n);
        if (!b.p) die("aligned_alloc(%zu, %zu) returned NULL", al, b.n);
        if ((uintptr_t)b.p % al) die("aligned_alloc(%zu, %zu) = %p is misaligned", al, b.n, (void *)b.p);
    } else {
        b.n = 1 + rng_below(r, MAX_MALLOC);
        b.p = xmalloc(b.n);
    }
    for (size_t off = 0; off <= last_written(b.n); off += PAGE) b.p[off] = b.tag;
    return b;
}

static void big_free(big_t b)
{
    if (b.p[0] != b.tag || b.p[last_written(b.n)] != b.tag)
        die("block %p of %zu bytes: first or last written byte corrupted", (void *)b.p, b.n);
    free(b.p);
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 20000, .seed = 1, .live = 512, .batch = 1};
    parse_opts(argc, argv, &o, "[-n steps] [-l live] [-s seed] [-m pages|first]");
    const char *mode = o.mode ? o.mode : "pages";
    if (strcmp(mode, "pages") != 0 && strcmp(mode, "first") != 0) die("unknown mode %s (pages or first)", mode);
    pages_mode = strcmp(mode, "pages") == 0;
    double t = big_replace(&o, big_new, big_free);
    char extra[64];
    snprintf(extra, sizeof extra, "live=%ld mode=%s", o.live, mode);
    report("bigmix", 1, (double)o.iters, t, extra);
    return 0;
}
