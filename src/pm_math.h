/* pm_math.h — the two functions of e the profiler needs, without libm
 * (the library links libc only): -ln(u) for the sampler's exponential
 * gaps, 1 - e^-x for a sample's weight and the legacy writer's raw
 * counts.  test_prof_sampler.c checks both against libm. */
#ifndef PM_MATH_H
#define PM_MATH_H

#include <stdint.h>

/* ln(x) for x > 0: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
 * ln(m) = 2 atanh(z), z = (m-1)/(m+1), |z| < 0.172, summed to z^13
 * (error below 1e-12). */
static inline double pm_math_ln(double x)
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

/* -ln(u) for u in (0, 1]. */
static inline double pm_math_neg_log(double u) { return -pm_math_ln(u); }

/* 1 - e^-x for x >= 0, accurate also for tiny x (no cancellation): the
 * chance that an allocation of x = size/rate means is sampled (the
 * sampler's weights, the legacy writer's raw counts). */
static inline double pm_math_one_minus_exp(double x)
{
    if (x < 0.25) {
        /* x - x^2/2! + x^3/3! - ... to x^10 by Horner's rule (no division):
         * error < 1e-13 relative */
        double p = 1.0 / 3628800;
        p = 1.0 / 362880 - x * p;
        p = 1.0 / 40320 - x * p;
        p = 1.0 / 5040 - x * p;
        p = 1.0 / 720 - x * p;
        p = 1.0 / 120 - x * p;
        p = 1.0 / 24 - x * p;
        p = 1.0 / 6 - x * p;
        p = 1.0 / 2 - x * p;
        return x * (1 - x * p);
    }
    if (x > 40) return 1.0;
    /* exp(-x) = 2^-k exp(-r), r = x - k ln 2 in [0, ln 2), exp(-r) by
     * Horner's rule to r^16, 2^-k from its exponent bits (k <= 57) */
    int k = (int)(x / 0.6931471805599453);
    double r = x - k * 0.6931471805599453, e = 1.0 / 20922789888000;
    e = 1.0 / 1307674368000 - r * e;
    e = 1.0 / 87178291200 - r * e;
    e = 1.0 / 6227020800 - r * e;
    e = 1.0 / 479001600 - r * e;
    e = 1.0 / 39916800 - r * e;
    e = 1.0 / 3628800 - r * e;
    e = 1.0 / 362880 - r * e;
    e = 1.0 / 40320 - r * e;
    e = 1.0 / 5040 - r * e;
    e = 1.0 / 720 - r * e;
    e = 1.0 / 120 - r * e;
    e = 1.0 / 24 - r * e;
    e = 1.0 / 6 - r * e;
    e = 1.0 / 2 - r * e;
    e = 1 - r * e;
    e = 1 - r * e;
    union { uint64_t u; double d; } scale = {(uint64_t)(1023 - k) << 52};
    return 1.0 - e * scale.d;
}

#endif
