/* prof_sampler.c — when to sample: exponential gaps between sample points
 * over allocated bytes (a Poisson process with mean `rate` bytes), so an
 * allocation of s bytes is sampled with probability 1 - exp(-s/rate).
 * Owns: the process-wide rate and its default, a thread's pm_sampler_t
 * (countdown, random state, the rate it was drawn with and the last
 * sample's weight: its start, its slow path and a rate change), a sample's
 * weight.  The math is pm_math.h's (a table and a polynomial each).
 * Must never: allocate, lock or reach the site table (alloc.c hands a
 * sample on).  The fast path's charge is inline (pm_internal.h). */
#include "pm_internal.h"

static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* -ln(u) for u uniform in (0, 1], drawn as u = 2^-g y: g >= 1 geometric
 * (a random word's leading zeros) and y uniform in [1, 2) (52 random
 * bits), so -ln(u) = g ln 2 - ln(y) needs no conversion, no exponent work
 * and no division (test_sampler_next, test_sampler_next_quantiles). */
static inline double exp_draw(uint64_t *rng)
{
    uint64_t x = next_random(rng), low = x & 0xfff;
    /* -g from the highest set bit: -12..-1, else -13 and below */
    int64_t e = PM_LIKELY(low) ? (int64_t)(__builtin_clzll(low) ^ 63) - 12
                               : -13 - (int64_t)__builtin_clzll(next_random(rng)); /* never 0 */
    return -pm_math_ln_parts(e, x >> 12);
}

/* The gap at rate >= 2 (at most INT64_MAX: a signed conversion). */
static inline int64_t gap_of(uint64_t *rng, uint64_t rate)
{
    double gap = exp_draw(rng) * (double)(int64_t)rate;
    if (gap > (double)(INT64_MAX / 4)) return INT64_MAX / 4;
    return (int64_t)gap;
}

int64_t pm_sampler_next(uint64_t *rng, uint64_t rate)
{
    if (rate == 0) return PM_TICK_BYTES; /* no samples: the countdown only ticks */
    if (rate == 1) return -1; /* every allocation: never reach 0 */
    if (!*rng) *rng = pm_sampler_seed();
    return gap_of(rng, rate);
}

/* The clock and the thread's own TLS address (threads started in the same
 * nanosecond differ there; a gettid cost every new thread a system call). */
uint64_t pm_sampler_seed(void)
{
    uint64_t s = pm_os_monotonic_ns() ^ pm_mix64((uintptr_t)&pm_tls) ^ 0x9E3779B97F4A7C15ull;
    return s ? s : 1;
}

/* The process-wide rate; threads notice a change at their next slow path. */
static _Atomic uint64_t rate_now = PM_SAMPLE_RATE_DEFAULT;

uint64_t pm_sampler_rate(void) { return pm_relaxed_load(&rate_now); }
void pm_sampler_set_rate(uint64_t rate)
{
    if (rate > INT64_MAX) rate = INT64_MAX; /* the profile's period is signed */
    pm_relaxed_store(&rate_now, rate);
}

/* Draws the countdown afresh at rate and forgets the last weight. */
static void set_rate(pm_sampler_t *s, uint64_t rate)
{
    s->rate = rate;
    s->inv_rate = rate > 1 ? 1.0 / (double)(int64_t)rate : 0.0;
    s->last_size = 0;
    s->countdown = s->drawn = pm_sampler_next(&s->rng, rate);
}

void pm_sampler_redraw(pm_sampler_t *s) { set_rate(s, pm_sampler_rate()); }

void pm_sampler_thread_start(pm_sampler_t *s)
{
    s->rng = pm_sampler_seed();
    pm_sampler_redraw(s);
}

/* A block of size bytes sampled at mean rate R stands for 1/p blocks,
 * p = 1 - e^(-size/R): unbiased estimates (weight exactly one at R = 1).
 * size >= 1, below 2^63 as every block's; inv_rate = 1/R for R > 1.
 * Capped where R / size passes 2^55 (test_sampler_weight). */
PM_INLINE uint64_t weight_of(size_t size, double inv_rate)
{
    double p = pm_math_one_minus_exp((double)(int64_t)size * inv_rate);
    double w = (double)PM_WEIGHT_ONE / p + 0.5;
    return w < 0x1p63 ? (uint64_t)(int64_t)w : (uint64_t)INT64_MAX;
}

uint64_t pm_sampler_weight(const pm_sampler_t *s, size_t size)
{
    if (s->rate <= 1) return PM_WEIGHT_ONE;
    return weight_of(size ? size : 1, s->inv_rate);
}

uint64_t pm_sampler_record_slow(pm_sampler_t *s, size_t size)
{
    uint64_t rate = pm_sampler_rate();
    if (PM_UNLIKELY(s->rate != rate)) set_rate(s, rate);
    s->countdown -= (int64_t)size;
    if (PM_LIKELY(s->countdown >= 0)) return 0;
    s->tick_bytes += (uint64_t)(s->drawn - s->countdown); /* all charged since the draw */
    if (PM_UNLIKELY(rate <= 1)) {
        s->countdown = s->drawn = pm_sampler_next(&s->rng, rate);
        return rate ? PM_WEIGHT_ONE : PM_SAMPLE_TICK;
    }
    s->countdown = s->drawn = gap_of(&s->rng, rate); /* seeded: set_rate drew at this rate */
    /* a loop allocating one size pays for its weight once
     * (test_sampler_weight_cache) */
    size_t n = size ? size : 1;
    if (n != s->last_size) {
        s->last_size = n;
        s->last_weight = weight_of(n, s->inv_rate);
    }
    return s->last_weight;
}

PM_EXPORT void profmalloc_set_sample_rate(size_t bytes)
{
    pm_init();
    pm_sampler_set_rate(bytes);
    /* the calling thread switches at once; others at their next slow path */
    pm_tcache_t *t = &pm_tls;
    if (t->state != PM_THREAD_EMPTY) pm_sampler_redraw(&t->sampler); /* NEW and DEAD sample too */
}

PM_EXPORT size_t profmalloc_get_sample_rate(void)
{
    pm_init();
    return (size_t)pm_sampler_rate();
}
