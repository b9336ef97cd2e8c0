/* realloc — strings grown by many small appends, then freed.
 *
 * What it stresses: NSTR strings each grow from empty to a random target
 * length (64 B .. 16 KiB) by appends of 1..16 bytes, every append being an
 * exact-size realloc(p, len + add + 1) as naive C string builders do; the
 * string to extend is chosen at random, so growths of different strings
 * interleave and a block can rarely grow into its neighbour.  When all
 * strings are complete they are checked byte by byte and freed; ROUNDS
 * rounds are run.
 * Why: realloc growth is where a size-class allocator must return the same
 * pointer while the new size still fits the block's class (no copy), and
 * must move with a cheap copy when it doesn't; glibc can often extend in
 * place.  Profiling samplers must also account realloc as free+malloc
 * without slowing the common in-place case.
 *
 * Options: -l strings per round (default 1000), -n rounds (default 3),
 * -s seed.
 * Result: ops= reallocs, seconds= wall time; moved= reallocs that returned
 * a different pointer.
 */
#include "bench_common.h"

typedef struct {
    char *p;
    size_t len, target;
    uint32_t id;
} str_t;

static inline char pat(uint32_t id, size_t i) { return (char)('a' + (id * 7u + i) % 26u); }

int main(int argc, char **argv)
{
    bench_opts_t o = {.threads = 1, .iters = 3, .seed = 1, .live = 1000, .batch = 1};
    parse_opts(argc, argv, &o, "[-l strings] [-n rounds] [-s seed]");
    rng_t r;
    rng_seed(&r, o.seed);
    long n = o.live;
    str_t *s = xmalloc(sizeof *s * (size_t)n);
    uint32_t *active = xmalloc(sizeof *active * (size_t)n);
    double ops = 0, moved = 0;
    double t0 = now_sec();
    for (long round = 0; round < o.iters; round++) {
        for (long i = 0; i < n; i++) {
            s[i] = (str_t){NULL, 0, rng_range(&r, 64, 16384), (uint32_t)(round * n + i)};
            active[i] = (uint32_t)i;
        }
        long nact = n;
        while (nact > 0) {
            uint32_t k = rng_below(&r, (uint32_t)nact);
            str_t *x = &s[active[k]];
            size_t add = rng_range(&r, 1, 16);
            if (x->len + add > x->target) add = x->target - x->len;
            if (add == 0) add = 1;
            char *q = realloc(x->p, x->len + add + 1);
            if (!q) die("realloc(%zu) returned NULL", x->len + add + 1);
            ops++;
            if (x->p && q != x->p) moved++;
            /* spot-check that the move kept the contents */
            if (x->len && (q[0] != pat(x->id, 0) || q[x->len - 1] != pat(x->id, x->len - 1)))
                die("realloc lost the contents of a %zu-byte string", x->len);
            for (size_t i = 0; i < add; i++) q[x->len + i] = pat(x->id, x->len + i);
            x->len += add;
            q[x->len] = 0;
            x->p = q;
            if (x->len >= x->target) active[k] = active[--nact];
        }
        for (long i = 0; i < n; i++) {
            if (strlen(s[i].p) != s[i].len) die("string %ld has length %zu, expected %zu", i, strlen(s[i].p), s[i].len);
            for (size_t j = 0; j < s[i].len; j++)
                if (s[i].p[j] != pat(s[i].id, j)) die("string %ld corrupted at byte %zu", i, j);
            free(s[i].p);
        }
    }
    double t = now_sec() - t0;
    char extra[64];
    snprintf(extra, sizeof extra, "strings=%ld moved=%.0f", n, moved);
    report("realloc", 1, ops, t, extra);
    free(s);
    free(active);
    return 0;
}
