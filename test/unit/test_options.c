/* test_options.c — unit tests of src/options.c: PROFMALLOC_* parsed from environ. */
#include "core_test.h"

static void test_options_load(void **state)
{
    (void)state;
    pm_options_t saved = pm_options;
    setenv("PROFMALLOC_SAMPLE_RATE", "64k", 1);
    setenv("PROFMALLOC_TCACHE_BYTES", "12x", 1);     /* malformed: keeps the default */
    setenv("PROFMALLOC_RELEASE_BYTES", "1MiB", 1);
    setenv("PROFMALLOC_UNWIND", "fp", 1);
    setenv("PROFMALLOC_VERBOSE", "2", 1);             /* malformed */
    setenv("PROFMALLOC_DUMP", "", 1);                 /* malformed */
    pm_options_load();
    assert_int_equal(pm_options.sample_rate, 64 * 1024);
    assert_int_equal(pm_options.tcache_bytes, saved.tcache_bytes);
    assert_int_equal(pm_options.release_bytes, 1u << 20);
    assert_int_equal(pm_options.release_bytes_set, 1);
    assert_int_equal(saved.release_bytes_set, 0);
    assert_int_equal(pm_options.unwind_fp, 1);
    assert_int_equal(pm_options.verbose, saved.verbose);
    assert_ptr_equal(pm_options.dump_pattern, saved.dump_pattern);
    setenv("PROFMALLOC_UNWIND", "dwarf", 1);
    setenv("PROFMALLOC_DUMP", "x.%p.heap", 1);
    pm_options_load();
    assert_int_equal(pm_options.unwind_fp, 0);
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    /* % only in %p and %% */
    setenv("PROFMALLOC_DUMP", "y.%t.heap", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    setenv("PROFMALLOC_DUMP", "z%", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    setenv("PROFMALLOC_DUMP", "z.%%.%p", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "z.%%.%p");
    /* sizes above INT64_MAX (the profile's period is signed) are malformed */
    setenv("PROFMALLOC_SAMPLE_RATE", "9223372036854775808", 1);
    setenv("PROFMALLOC_TCACHE_BYTES", "18446744073709551615", 1);
    pm_options_load();
    assert_int_equal(pm_options.sample_rate, 64 * 1024);
    assert_int_equal(pm_options.tcache_bytes, saved.tcache_bytes);
    setenv("PROFMALLOC_SAMPLE_RATE", "9223372036854775807", 1);
    pm_options_load();
    assert_int_equal(pm_options.sample_rate, INT64_MAX);
    unsetenv("PROFMALLOC_SAMPLE_RATE");
    unsetenv("PROFMALLOC_TCACHE_BYTES");
    unsetenv("PROFMALLOC_RELEASE_BYTES");
    unsetenv("PROFMALLOC_UNWIND");
    unsetenv("PROFMALLOC_VERBOSE");
    unsetenv("PROFMALLOC_DUMP");
    pm_options = saved;
}


/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest options[] = {
        cmocka_unit_test(test_options_load),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("options", options, NULL, NULL);
    return failed ? 1 : 0;
}
