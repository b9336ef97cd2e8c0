/* prof_sampler.c — when to sample: exponential gaps between sample points
 * over allocated bytes (a Poisson process with mean `rate` bytes), so an
 * allocation of s bytes is sampled with probability 1 - exp(-s/rate).
 * Owns: the process-wide rate and its default, a thread's pm_sampler_t
 * (countdown, random state, the rate it was drawn with: its start, its
 * slow path and a rate change), a sample's weight.
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

int64_t pm_sampler_next(uint64_t *rng, uint64_t rate)
{
    if (rate == 0) return PM_TICK_BYTES; /* no samples: the countdown only ticks */
    if (rate == 1) return -1; /* every allocation: never reach 0 */
    if (!*rng) *rng = pm_sampler_seed();
    /* u uniform in (0, 1]: 53 random bits, shifted off zero */
    double u = ((double)(next_random(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double gap = pm_math_neg_log(u) * (double)rate;
    if (gap > (double)(INT64_MAX / 4)) return INT64_MAX / 4;
    return (int64_t)gap;
}

uint64_t pm_sampler_seed(void)
{
    uint64_t s = pm_os_monotonic_ns() ^ ((uint64_t)pm_os_gettid() << 32) ^ 0x9E3779B97F4A7C15ull;
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

void pm_sampler_redraw(pm_sampler_t *s)
{
    s->rate = pm_sampler_rate();
    s->countdown = pm_sampler_next(&s->rng, s->rate);
}

void pm_sampler_thread_start(pm_sampler_t *s)
{
    s->rng = pm_sampler_seed();
    pm_sampler_redraw(s);
}

/* A block of size bytes sampled at mean rate R stands for 1/p blocks,
 * p = 1 - e^(-size/R): unbiased estimates (weight exactly one at R = 1). */
static uint64_t weight_of(size_t size, uint64_t rate)
{
    if (rate <= 1) return PM_WEIGHT_ONE;
    double prob = pm_math_one_minus_exp((double)(size ? size : 1) / (double)rate);
    return prob > 0 ? (uint64_t)((double)PM_WEIGHT_ONE / prob + 0.5) : PM_WEIGHT_ONE;
}

uint64_t pm_sampler_weight(const pm_sampler_t *s, size_t size) { return weight_of(size, s->rate); }

uint64_t pm_sampler_record_slow(pm_sampler_t *s, size_t size)
{
    uint64_t rate = pm_sampler_rate();
    if (PM_UNLIKELY(s->rate != rate)) {
        s->rate = rate;
        s->countdown = pm_sampler_next(&s->rng, rate);
    }
    s->countdown -= (int64_t)size;
    if (PM_LIKELY(s->countdown >= 0)) return 0;
    s->countdown = pm_sampler_next(&s->rng, rate);
    return rate ? weight_of(size, rate) : PM_SAMPLE_TICK;
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
