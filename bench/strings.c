/* strings — strings appended to at random and dropped at random.
 *
 * What it stresses: LIVE slots (default 20 000) each hold a string.  Each
 * step picks a slot at random and, one time in 50, drops its string (free)
 * or else appends 1-200 bytes to it with an exact-size realloc, as a naive
 * string builder does; a string past 1 MiB is dropped too.  Lengths
 * spread out to a few KiB on average, the live set grows from nothing to
 * about 90 MB, and the blocks pass through every class from 16 B to tens
 * of KiB, each living for a random time while others grow past it.
 * Why: unlike bench/realloc (strings built whole, then freed together),
 * blocks of every age share a size class's spans here.  An allocator that
 * hands a freed block to the next request of its class, whatever span it
 * lies in, keeps every span one live block pins (peak RSS); one that
 * reads a block's memory to resize it where its size still fits pays a
 * cache miss per append (time).
 *
 * Options: -n steps (default 3000000), -l live slots (default 20000),
 * -s seed.
 * Result: ops= steps, seconds= wall time, moved= reallocs that returned
 * another pointer, live_mb= bytes live at the end.
 */
#include "bench_common.h"

#define MAX_ADD 200
#define MAX_LEN ((size_t)1 << 20)

typedef struct {
    char *p;
    size_t len;
    uint32_t id;
} str_t;

/* A string's bytes: one letter for each 64-byte piece, so that appends are
 * memsets and a check reads a byte a piece (the workload's own work stays
 * small next to the allocator's). */
static inline char pat(uint32_t id, size_t i) { return (char)('a' + (id * 7u + (i >> 6)) % 26u); }

static void append(str_t *x, char *q, size_t add)
{
    for (size_t i = x->len, end = x->len + add; i < end;) {
        size_t piece_end = ((i >> 6) + 1) << 6;
        size_t k = (piece_end < end ? piece_end : end) - i;
        memset(q + i, pat(x->id, i), k);
        i += k;
    }
}

static void drop(str_t *x)
{
    for (size_t i = 0; i < x->len; i += 64)
        if (x->p[i] != pat(x->id, i)) die("string %u corrupted at byte %zu of %zu", x->id, i, x->len);
    if (x->p[x->len - 1] != pat(x->id, x->len - 1)) die("string %u corrupted at its end (%zu bytes)", x->id, x->len);
    free(x->p);
    *x = (str_t){NULL, 0, 0};
}

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 3000000, .seed = 1, .live = 20000, .batch = 1};
    parse_opts(argc, argv, &o, "[-n steps] [-l live] [-s seed]");
    rng_t r;
    rng_seed(&r, o.seed);
    size_t n = (size_t)o.live;
    str_t *s = xmalloc(sizeof *s * n);
    for (size_t i = 0; i < n; i++) s[i] = (str_t){NULL, 0, 0};
    uint32_t next_id = 1;
    double moved = 0;
    size_t live = 0;
    double t0 = now_sec();
    for (long step = 0; step < o.iters; step++) {
        str_t *x = &s[rng_below(&r, (uint32_t)n)];
        if (x->p && rng_below(&r, 50) == 0) {
            live -= x->len;
            drop(x);
            continue;
        }
        if (!x->p) x->id = next_id++;
        size_t add = rng_range(&r, 1, MAX_ADD);
        char *q = realloc(x->p, x->len + add);
        if (!q) die("realloc(%zu) returned NULL", x->len + add);
        if (x->p && q != x->p) moved++;
        /* spot-check that a move kept the contents */
        if (x->len && (q[0] != pat(x->id, 0) || q[x->len - 1] != pat(x->id, x->len - 1)))
            die("realloc lost the contents of a %zu-byte string", x->len);
        append(x, q, add);
        x->p = q;
        x->len += add;
        live += add;
        if (x->len > MAX_LEN) {
            live -= x->len;
            drop(x);
        }
    }
    double t = now_sec() - t0;
    for (size_t i = 0; i < n; i++)
        if (s[i].p) drop(&s[i]);
    char extra[96];
    snprintf(extra, sizeof extra, "moved=%.0f live_mb=%.1f", moved, (double)live / (1 << 20));
    report("strings", 1, (double)o.iters, t, extra);
    free(s);
    return 0;
}
