/* test_prof_sampler.c — unit tests of src/prof_sampler.c: -ln(u), 1 - e^-x and the
 * gaps between sample points. */
#include "core_test.h"

/* ======================================================================
 * sampler.c
 * ==================================================================== */

static int close_rel(double got, double want, double tol)
{
    if (got == want) return 1;
    return fabs(got - want) <= tol * fabs(want);
}

static void test_sampler_neg_log(void **state)
{
    (void)state;
    assert_true(pm_math_neg_log(1.0) == 0.0);
    static const double known[] = {0.5, 0.25, 0.1, 1e-3, 1e-10, 1e-100, 1e-300, 2.2250738585072014e-308,
                                   0.7071067811865475, 0.7071067811865476, 0.99, 0.999999,
                                   1.0 - 1.0 / 9007199254740992.0, 1.0 / 9007199254740992.0,
                                   0.3678794411714423};
    for (size_t i = 0; i < PM_ARRAY_LEN(known); i++) {
        double u = known[i], got = pm_math_neg_log(u), want = -log(u);
        if (!close_rel(got, want, 1e-9)) fail_msg("neg_log(%.17g) = %.17g, want %.17g", u, got, want);
    }
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = ((double)(x >> 11) + 1.0) / 9007199254740992.0;
        if (i % 4 == 0) u = ldexp(u, -(int)(x % 900)); /* spread the exponent */
        double got = pm_math_neg_log(u), want = -log(u);
        if (!close_rel(got, want, 1e-9)) fail_msg("neg_log(%.17g) = %.17g, want %.17g", u, got, want);
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


/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest sampler[] = {
        cmocka_unit_test(test_sampler_neg_log),
        cmocka_unit_test(test_sampler_prob),
        cmocka_unit_test(test_sampler_next),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("sampler", sampler, NULL, NULL);
    return failed ? 1 : 0;
}
