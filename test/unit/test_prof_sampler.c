/* test_prof_sampler.c — unit tests of src/prof_sampler.c and the math it
 * uses (pm_math.h, math.c's tables): ln and 1 - e^-x against libm over their
 * whole range, the gaps between sample points, a sample's weight and the
 * thread's cache of it. */
#include "core_test.h"

/* ======================================================================
 * sampler.c
 * ==================================================================== */

static int close_rel(double got, double want, double tol)
{
    if (got == want) return 1;
    return fabs(got - want) <= tol * fabs(want);
}

/* got within tol of want, relative, or within abs_tol absolute */
static int close_abs_rel(double got, double want, double rel_tol, double abs_tol)
{
    return close_rel(got, want, rel_tol) || fabs(got - want) <= abs_tol;
}

/* ulps between two doubles of one sign */
static uint64_t ulps(double a, double b)
{
    int64_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    return ia > ib ? (uint64_t)(ia - ib) : (uint64_t)(ib - ia);
}

/* math.c's tables as make math-tables prints them: 1/c exact, ln c and
 * 2^(-j/32) within an ulp of libm in long double; ln's entries at c = 1
 * and 2 exactly {1, 0} and {1/2, PM_MATH_LN2}, on which ln's accuracy
 * near 1 rests. */
static void test_math_tables(void **state)
{
    (void)state;
    for (int i = 0; i < PM_MATH_LN_ENTRIES; i++) {
        long double c = 1.0L + i / 64.0L;
        double inv = (double)(1.0L / c), ln = (double)logl(c);
        if (pm_math_ln_table[i][0] != inv || (ln != 0 && ulps(pm_math_ln_table[i][1], ln) > 1))
            fail_msg("ln table %d: {%a, %a}, want {%a, %a}", i, pm_math_ln_table[i][0], pm_math_ln_table[i][1], inv,
                     ln);
    }
    assert_true(pm_math_ln_table[0][0] == 1.0 && pm_math_ln_table[0][1] == 0.0);
    assert_true(pm_math_ln_table[64][0] == 0.5 && pm_math_ln_table[64][1] == PM_MATH_LN2);
    for (int j = 0; j < PM_MATH_EXP2_ENTRIES; j++) {
        double want = (double)exp2l(-j / 32.0L);
        if (ulps(pm_math_exp2_table[j], want) > 1) fail_msg("exp2 table %d: %a, want %a", j, pm_math_exp2_table[j], want);
    }
    assert_true(pm_math_exp2_table[0] == 1.0);
}

/* ln over all doubles: powers of two and the table's edges (m = c plus or
 * minus half a step, an ulp either side) at many exponents, subnormals,
 * x within ulps of 1 on both sides; relative error 1e-13. */
static void test_math_ln_range(void **state)
{
    (void)state;
    static const int exps[] = {-1074, -1060, -1023, -1022, -1021, -600, -53, -2, -1, 0, 1, 2, 60, 700, 1023};
    for (size_t e = 0; e < PM_ARRAY_LEN(exps); e++) {
        for (int i = 0; i <= 64; i++) {
            double c = 1.0 + i / 64.0, half = 1.0 / 128;
            double ms[] = {c, c + half, c - half, nextafter(c + half, 2), nextafter(c + half, 0),
                           nextafter(c - half, 2), nextafter(c - half, 0), nextafter(c, 0), nextafter(c, 2)};
            for (size_t k = 0; k < PM_ARRAY_LEN(ms); k++) {
                double x = ldexp(ms[k], exps[e]);
                if (x == 0 || isinf(x)) continue;
                double got = pm_math_ln(x), want = log(x);
                if (!close_abs_rel(got, want, 1e-13, 1e-300)) fail_msg("ln(%a) = %.17g, want %.17g", x, got, want);
            }
        }
    }
    static const double special[] = {4.9406564584124654e-324, 1e-320, 2.2250738585072009e-308, 1.7976931348623157e308,
                                     0.75, 1.5, 0.5, 2.0, 1.0};
    for (size_t i = 0; i < PM_ARRAY_LEN(special); i++) {
        double got = pm_math_ln(special[i]), want = log(special[i]);
        if (!close_rel(got, want, 1e-13)) fail_msg("ln(%a) = %.17g, want %.17g", special[i], got, want);
    }
    assert_true(pm_math_ln(1.0) == 0.0);
    /* within ulps of 1: ln(x) ~ x - 1, no cancellation */
    double up = 1.0, down = 1.0;
    for (int i = 0; i < 2000; i++) {
        up = nextafter(up, 2), down = nextafter(down, 0);
        double gu = pm_math_ln(up), gd = pm_math_ln(down), wu = log(up), wd = log(down);
        if (!close_rel(gu, wu, 1e-13)) fail_msg("ln(%a) = %.17g, want %.17g", up, gu, wu);
        if (!close_rel(gd, wd, 1e-13)) fail_msg("ln(%a) = %.17g, want %.17g", down, gd, wd);
    }
    for (double d = 1e-15; d < 0.3; d *= 1.07) {
        double got = pm_math_ln(1 - d), want = log(1 - d);
        if (!close_rel(got, want, 1e-13)) fail_msg("ln(%a) = %.17g, want %.17g", 1 - d, got, want);
    }
}

static void test_sampler_neg_log(void **state)
{
    (void)state;
    assert_true(-pm_math_ln(1.0) == 0.0);
    static const double known[] = {0.5, 0.25, 0.1, 1e-3, 1e-10, 1e-100, 1e-300, 2.2250738585072014e-308,
                                   0.7071067811865475, 0.7071067811865476, 0.99, 0.999999,
                                   1.0 - 1.0 / 9007199254740992.0, 1.0 / 9007199254740992.0,
                                   0.3678794411714423};
    for (size_t i = 0; i < PM_ARRAY_LEN(known); i++) {
        double u = known[i], got = -pm_math_ln(u), want = -log(u);
        if (!close_rel(got, want, 1e-13)) fail_msg("-ln(%.17g) = %.17g, want %.17g", u, got, want);
    }
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = ((double)(x >> 11) + 1.0) / 9007199254740992.0;
        if (i % 4 == 0) u = ldexp(u, -(int)(x % 900)); /* spread the exponent */
        double got = -pm_math_ln(u), want = -log(u);
        if (!close_rel(got, want, 1e-13)) fail_msg("-ln(%.17g) = %.17g, want %.17g", u, got, want);
    }
}

static void test_sampler_prob(void **state)
{
    (void)state;
    assert_true(pm_math_one_minus_exp(0.0) == 0.0);
    for (double x = 1e-9; x <= 50.0; x *= 1.01) {
        double got = pm_math_one_minus_exp(x), want = -expm1(-x);
        if (!close_rel(got, want, 1e-9)) fail_msg("prob(%.17g) = %.17g, want %.17g", x, got, want);
        assert_true(got >= 0.0 && got <= 1.0);
    }
    static const double edges[] = {0.25, 0.2499999999, 0.25000001, 0.6931471805599453, 40.0, 40.0001, 1.0};
    for (size_t i = 0; i < PM_ARRAY_LEN(edges); i++) {
        double x = edges[i], got = pm_math_one_minus_exp(x), want = -expm1(-x);
        if (!close_rel(got, want, 1e-9)) fail_msg("prob(%.17g) = %.17g, want %.17g", x, got, want);
    }
    /* tiny x, the table's edges (n/32 ln 2 and half-way, each an ulp
     * either side, up to x = 40), 40 and beyond: relative error 1e-12 */
    static const double tiny[] = {4.9406564584124654e-324, 1e-310, 1e-300, 1e-100, 1e-20, 1e-16, 3e-9};
    for (size_t i = 0; i < PM_ARRAY_LEN(tiny); i++) {
        double got = pm_math_one_minus_exp(tiny[i]), want = -expm1(-tiny[i]);
        if (!close_abs_rel(got, want, 1e-12, 1e-320)) fail_msg("prob(%a) = %.17g, want %.17g", tiny[i], got, want);
    }
    for (int n = 0; n <= 1848; n++) {
        double a = n * (M_LN2 / 32), b = (n + 0.5) * (M_LN2 / 32);
        double xs[] = {a, nextafter(a, 0), nextafter(a, 100), b, nextafter(b, 0), nextafter(b, 100)};
        for (size_t k = 0; k < PM_ARRAY_LEN(xs); k++) {
            double x = xs[k], got = pm_math_one_minus_exp(x), want = -expm1(-x);
            if (x > 0 && !close_rel(got, want, 1e-12)) fail_msg("prob(%a) = %.17g, want %.17g", x, got, want);
        }
    }
    const double big[] = {40.0, nextafter(40.0, 0), nextafter(40.0, 100), 41, 745, 1e6, 1e300, INFINITY};
    for (size_t i = 0; i < PM_ARRAY_LEN(big); i++) assert_true(pm_math_one_minus_exp(big[i]) == 1.0);
    /* monotone */
    double prev = 0;
    for (double x = 1e-6; x < 45; x *= 1.003) {
        double p = pm_math_one_minus_exp(x);
        if (p < prev) fail_msg("prob not monotone at %.17g", x);
        prev = p;
    }
}

static void test_sampler_next(void **state)
{
    (void)state;
    static const uint64_t rates[] = {1000, 65536, 524288};
    enum { N = 200000 };
    for (size_t r = 0; r < PM_ARRAY_LEN(rates); r++) {
        uint64_t rng = 0x9E3779B97F4A7C15ull ^ (rates[r] * 2654435761u);
        double sum = 0, sum2 = 0;
        int64_t min = INT64_MAX;
        for (int i = 0; i < N; i++) {
            int64_t g = pm_sampler_next(&rng, rates[r]);
            if (g < min) min = g;
            sum += (double)g;
            sum2 += (double)g * (double)g;
        }
        double rate = (double)rates[r], mean = sum / N, se = rate / sqrt((double)N);
        if (fabs(mean - rate) > 4 * se)
            fail_msg("rate %.0f: mean gap %.1f, more than 4 std errors (%.1f) off", rate, mean, se);
        /* exponential: variance == mean^2 (loose, 10%) */
        double var = sum2 / N - mean * mean;
        if (fabs(sqrt(var) - rate) > 0.1 * rate)
            fail_msg("rate %.0f: std dev %.1f, want ~%.0f", rate, sqrt(var), rate);
        assert_true(min >= 0);
        assert_true(rng != 0);
    }
    /* same seed, same sequence */
    uint64_t a = 42, b = 42;
    for (int i = 0; i < 100; i++) assert_int_equal(pm_sampler_next(&a, 4096), pm_sampler_next(&b, 4096));
    uint64_t rng = 7;
    for (int i = 0; i < 1000; i++) assert_int_equal(pm_sampler_next(&rng, 1), -1);
    for (int i = 0; i < 1000; i++) assert_int_equal(pm_sampler_next(&rng, 0), PM_TICK_BYTES);
    /* a zero state is reseeded, not stuck */
    rng = 0;
    pm_sampler_next(&rng, 1000);
    assert_true(rng != 0);
    assert_true(pm_sampler_seed() != 0);
}

/* The gaps' distribution, beyond mean and variance: the fractions below
 * rate ln 2, rate and 3 rate, and above 8, 12 ln 2 and 14 ln 2 rates (the
 * draw's rare path starts at 12 ln 2), each within 5 standard errors of
 * the exponential's. */
static void test_sampler_next_quantiles(void **state)
{
    (void)state;
    enum { N = 1000000, E = 6 };
    const uint64_t rate = 1u << 20;
    const double edge[E] = {M_LN2, 1, 3, 8, 12 * M_LN2, 14 * M_LN2};
    int count[E] = {0};
    uint64_t rng = 12345;
    for (int i = 0; i < N; i++) {
        double g = (double)pm_sampler_next(&rng, rate) / (double)rate;
        for (int k = 0; k < E; k++) count[k] += k < 3 ? g < edge[k] : g > edge[k];
    }
    for (int k = 0; k < E; k++) {
        double want = k < 3 ? 1 - exp(-edge[k]) : exp(-edge[k]);
        double f = (double)count[k] / N, se = sqrt(want * (1 - want) / N);
        if (fabs(f - want) > 5 * se) fail_msg("edge %g: fraction %.6f, want %.6f (se %.6f)", edge[k], f, want, se);
    }
}

/* 256 / (1 - e^(-size/rate)) rounded, to half a unit (libm's expm1 is
 * the reference), for sizes 1 B - 1 TiB at rates 2 B - 2^62 B; 1 at rates
 * 0 and 1; capped, not overflowing, where rate / size passes 2^55. */
static void test_sampler_weight(void **state)
{
    (void)state;
    static const uint64_t rates[] = {2, 3, 1000, 4096, 65536, 524288, 1u << 20, 1ull << 40, 1ull << 62};
    for (size_t r = 0; r < PM_ARRAY_LEN(rates); r++) {
        pm_sampler_t s;
        memset(&s, 0, sizeof s);
        pm_sampler_set_rate(rates[r]);
        pm_sampler_redraw(&s);
        for (double z = 1; z < 1.1e12; z = z * 1.37 + 1) {
            size_t size = (size_t)z;
            double want = 256.0 / -expm1(-(double)size / (double)rates[r]);
            uint64_t got = pm_sampler_weight(&s, size);
            if (want < 0x1p62 && fabs((double)got - want) > 0.5 + 1e-9 * want)
                fail_msg("weight(%zu) at rate %llu: %llu, want %.3f", size, (unsigned long long)rates[r],
                         (unsigned long long)got, want);
            if (want >= 0x1p63) assert_true(got == (uint64_t)INT64_MAX);
        }
        assert_true(pm_sampler_weight(&s, 0) == pm_sampler_weight(&s, 1));
    }
    pm_sampler_t s;
    memset(&s, 0, sizeof s);
    pm_sampler_set_rate(INT64_MAX);
    pm_sampler_redraw(&s);
    assert_true(pm_sampler_weight(&s, 1) == (uint64_t)INT64_MAX);
    for (uint64_t rate = 0; rate <= 1; rate++) {
        pm_sampler_set_rate(rate);
        pm_sampler_redraw(&s);
        assert_true(pm_sampler_weight(&s, 100) == PM_WEIGHT_ONE);
    }
    pm_sampler_set_rate(0);
}

/* Forces a sample point: the countdown past zero, then one record. */
static uint64_t sample_now(pm_sampler_t *s, size_t size)
{
    if (s->rate != pm_sampler_rate()) pm_sampler_record_slow(s, 0); /* takes the new rate */
    s->countdown = -1;
    return pm_sampler_record_slow(s, size);
}

/* The weight remembered for the last sample's size: the same as computed
 * afresh for a repeated size, a new size and after each rate change (size
 * 0 counted as 1 in both), never a weight from the old rate. */
static void test_sampler_weight_cache(void **state)
{
    (void)state;
    pm_sampler_t s;
    memset(&s, 0, sizeof s);
    /* each rate's first size is the last one's */
    static const size_t sizes[] = {300000, 300000, 0, 0, 1, 1, 4096, 4096, 4096, 1, 0, 300000};
    static const uint64_t rates[] = {524288, 1000, 524288, 2, 1u << 30};
    for (size_t r = 0; r < PM_ARRAY_LEN(rates); r++) {
        pm_sampler_set_rate(rates[r]);
        for (size_t i = 0; i < PM_ARRAY_LEN(sizes); i++) {
            uint64_t got = sample_now(&s, sizes[i]), want = pm_sampler_weight(&s, sizes[i]);
            double exact = 256.0 / -expm1(-(double)(sizes[i] ? sizes[i] : 1) / (double)rates[r]);
            if (got != want || fabs((double)got - exact) > 0.5 + 1e-9 * exact)
                fail_msg("rate %llu, sample %zu of size %zu: weight %llu, want %llu (%.3f)",
                         (unsigned long long)rates[r], i, sizes[i], (unsigned long long)got,
                         (unsigned long long)want, exact);
        }
    }
    /* rate 1: every allocation a sample of weight one; rate 0: ticks */
    pm_sampler_set_rate(1);
    assert_true(sample_now(&s, 4096) == PM_WEIGHT_ONE);
    pm_sampler_set_rate(0);
    assert_true(sample_now(&s, 4096) == PM_SAMPLE_TICK);
}

/* The release rules' clock goes by bytes, not samples: at rates from
 * every allocation to 1 MiB, a sample point says "tick" exactly when
 * PM_TICK_BYTES or more were charged since the last tick (at rate 0, at
 * every expiry). */
static void test_sampler_tick_bytes(void **state)
{
    (void)state;
    static const uint64_t rates[] = {0, 1, 4096, 524288, 1u << 20};
    static const size_t sizes[] = {16, 1000, 300000};
    for (size_t r = 0; r < PM_ARRAY_LEN(rates); r++)
        for (size_t z = 0; z < PM_ARRAY_LEN(sizes); z++) {
            pm_sampler_t s;
            memset(&s, 0, sizeof s);
            pm_sampler_set_rate(rates[r]);
            pm_sampler_thread_start(&s);
            uint64_t since = 0, ticks = 0, points = 0;
            for (uint64_t total = 0; total < ((uint64_t)64 << 20); total += sizes[z]) {
                since += sizes[z];
                if (pm_sampler_record(&s, sizes[z]) == 0) continue;
                points++;
                int due = pm_sampler_tick_due(&s);
                if (due != (since >= (uint64_t)PM_TICK_BYTES))
                    fail_msg("rate %llu size %zu: tick %d after %llu bytes", (unsigned long long)rates[r],
                             sizes[z], due, (unsigned long long)since);
                if (due) {
                    ticks++;
                    since = 0;
                }
            }
            assert_true(ticks >= 8 && ticks <= 16);
            if (rates[r] == 0) assert_true(points == ticks);
            if (rates[r] <= 4096 && rates[r] > 0 && sizes[z] < 4096) assert_true(points > ticks * 100);
        }
    pm_sampler_set_rate(0);
}

/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest sampler[] = {
        cmocka_unit_test(test_math_tables),
        cmocka_unit_test(test_math_ln_range),
        cmocka_unit_test(test_sampler_neg_log),
        cmocka_unit_test(test_sampler_prob),
        cmocka_unit_test(test_sampler_next),
        cmocka_unit_test(test_sampler_next_quantiles),
        cmocka_unit_test(test_sampler_weight),
        cmocka_unit_test(test_sampler_weight_cache),
        cmocka_unit_test(test_sampler_tick_bytes),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("sampler", sampler, NULL, NULL);
    return failed ? 1 : 0;
}
