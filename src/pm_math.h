/* pm_math.h — the two functions of e the profiler needs, without libm
 * (the library links libc only): ln for the sampler's exponential gaps,
 * 1 - e^-x for a sample's weight and the writers' raw counts.
 * Both are a table look-up (math.c) and a short polynomial, with no
 * division and one path for all but the range's far end (subnormals,
 * x > 40), because the sampler runs them at every sample.
 * test_prof_sampler.c checks both against libm over the whole range
 * (test_math_ln_range, test_sampler_neg_log, test_sampler_prob). */
#ifndef PM_MATH_H
#define PM_MATH_H

#include <stdint.h>

#define PM_MATH_LN2 0x1.62e42fefa39efp-1
#define PM_MATH_LN_ENTRIES 65
#define PM_MATH_EXP2_ENTRIES 32

#pragma GCC visibility push(hidden)
/* {1/c, ln c} for c = 1 + i/64; ln 2 at i = 64 is PM_MATH_LN2 itself */
extern const double pm_math_ln_table[PM_MATH_LN_ENTRIES][2];
/* 2^(-j/32) */
extern const double pm_math_exp2_table[PM_MATH_EXP2_ENTRIES];
#pragma GCC visibility pop

/* ln(2^e m), m = 1 + f 2^-52 for a 52-bit fraction f: c is m rounded to
 * 6 bits, so r = (m - c)/c is at most 2^-7 and m - c exact, and
 * ln = (e ln 2 + ln c) + ln(1 + r), the last to r^6 (truncated below
 * 3e-16).  Near 1 the first sum is exactly 0 (e = 0, c = 1, or e = -1,
 * c = 2): no cancellation there, relative error below 5e-14 throughout. */
static inline double pm_math_ln_parts(int64_t e, uint64_t f)
{
    union { double d; uint64_t u; } m = {.u = f | 0x3ff0000000000000ull}, c;
    uint64_t i = (f + (1ull << 45)) >> 46;
    c.u = (i << 46) + 0x3ff0000000000000ull;
    const double *t = pm_math_ln_table[i];
    double r = (m.d - c.d) * t[0];
    double p = r * (1.0 / 5 - r * (1.0 / 6));
    p = r * (-1.0 / 4 + p);
    p = r * (1.0 / 3 + p);
    p = r * (-1.0 / 2 + p);
    return ((double)e * PM_MATH_LN2 + t[1]) + (r + r * p);
}

/* ln(x) for x > 0, subnormals too. */
static inline double pm_math_ln(double x)
{
    union { double d; uint64_t u; } v = {x};
    int64_t e = -1023;
    if (__builtin_expect(v.u < (1ull << 52), 0)) { /* subnormal: scale into range */
        v.d *= 0x1p52;
        e -= 52;
    }
    return pm_math_ln_parts(e + (int64_t)(v.u >> 52), v.u & ((1ull << 52) - 1));
}

/* 1 - e^-x for x >= 0, accurate also for tiny x (no cancellation): the
 * chance that an allocation of x = size/rate means is sampled (the
 * sampler's weights, the legacy writer's raw counts).
 * e^-x = 2^-(n/32) e^-r, n = round(32 x / ln 2), |r| <= ln 2 / 64, and
 * 1 - e^-x = (1 - s) - s (e^-r - 1) with s = 2^-(n/32): for n = 0 it is
 * the polynomial alone, else 1 - s >= 0.02 is exact (relative error
 * below 3e-13). */
static inline double pm_math_one_minus_exp(double x)
{
    if (x > 40) return 1.0; /* and 2^-(n/32) stays normal */
    /* adding 1.5 * 2^52 rounds to an integer held in the low bits */
    union { double d; uint64_t u; } z = {x * (32 / PM_MATH_LN2) + 0x1.8p52}, s;
    double r = x - (z.d - 0x1.8p52) * (PM_MATH_LN2 / 32);
    double q = r * (1.0 / 24 - r * (1.0 / 120));
    q = r * (-1.0 / 6 + q);
    q = r * (1.0 / 2 + q);
    q = r * (-1.0 + q); /* e^-r - 1 */
    uint32_t n = (uint32_t)z.u;
    s.d = pm_math_exp2_table[n & 31];
    s.u -= (uint64_t)(n >> 5) << 52;
    return (1.0 - s.d) - s.d * q;
}

#endif
