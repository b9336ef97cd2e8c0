/* sampler.c — exponential gaps between sample points over allocated
 * bytes (a Poisson process with mean `rate` bytes), so an allocation of
 * s bytes is sampled with probability 1 - exp(-s/rate).
 * Owns: -ln(u) without libm and the per-thread xorshift generator.
 * Must never: allocate or lock.  State lives in the caller's tcache. */
#include "pm_internal.h"

/* ln(x) for x > 0: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
 * ln(m) = 2 atanh(z), z = (m-1)/(m+1), |z| < 0.172, summed to z^13
 * (error below 1e-12). */
static double ln(double x)
{
    union { double d; uint64_t u; } v = {x};
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & ((1ull << 52) - 1)) | (1023ull << 52); /* m in [1, 2) */
    double m = v.d;
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double z = (m - 1) / (m + 1), z2 = z * z;
    double series = z * (1 + z2 * (1.0 / 3 + z2 * (1.0 / 5 + z2 * (1.0 / 7 +
                    z2 * (1.0 / 9 + z2 * (1.0 / 11 + z2 * (1.0 / 13)))))));
    return e * 0.6931471805599453 + 2 * series;
}

double pm_sampler_neg_log(double u) { return -ln(u); }

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
    double gap = -ln(u) * (double)rate;
    if (gap > (double)(INT64_MAX / 4)) return INT64_MAX / 4;
    return (int64_t)gap;
}

uint64_t pm_sampler_seed(void)
{
    uint64_t s = pm_os_monotonic_ns() ^ ((uint64_t)pm_os_gettid() << 32) ^ 0x9E3779B97F4A7C15ull;
    return s ? s : 1;
}

/* The process-wide rate; threads notice a change at their next slow path. */
static _Atomic uint64_t rate_now = 512 * 1024;

uint64_t pm_sampler_rate(void) { return pm_relaxed_load(&rate_now); }
void pm_sampler_set_rate(uint64_t rate) { pm_relaxed_store(&rate_now, rate); }

/* 1 - exp(-x) for x >= 0, accurate also for tiny x (no cancellation). */
double pm_sampler_prob(double x)
{
    if (x < 0.25) {
        /* x - x^2/2! + x^3/3! - ... to x^10: error < 1e-13 relative */
        double term = x, sum = x;
        for (int k = 2; k <= 10; k++) {
            term *= -x / k;
            sum += term;
        }
        return sum;
    }
    if (x > 40) return 1.0;
    /* exp(-x) = 2^-k exp(-r), r = x - k ln 2 in [0, ln 2) */
    int k = (int)(x / 0.6931471805599453);
    double r = x - k * 0.6931471805599453, term = 1, e = 1;
    for (int i = 1; i <= 16; i++) {
        term *= -r / i;
        e += term;
    }
    while (k--) e *= 0.5;
    return 1.0 - e;
}
