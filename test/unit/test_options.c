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
    /* % only in %p, %e and %% */
    setenv("PROFMALLOC_DUMP", "y.%t.heap", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    setenv("PROFMALLOC_DUMP", "z%", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "x.%p.heap");
    setenv("PROFMALLOC_DUMP", "z.%%.%p", 1);
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "z.%%.%p");
    setenv("PROFMALLOC_DUMP", "%e.%p.pb.gz", 1); /* and %e, the program's name */
    pm_options_load();
    assert_string_equal(pm_options.dump_pattern, "%e.%p.pb.gz");
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

/* The rows the docs are generated from (doc/gen_options.c): each one named
 * PROFMALLOC_*, its `code` marks paired, and its default the value in
 * force, parsed back to the same number (what check-docs relies on). */
static void test_options_rows_document_defaults(void **state)
{
    (void)state;
    const char *name, *doc;
    char def[64];
    size_t i = 0;
    int sizes = 0;
    for (; pm_options_row(i, &name, &doc, def, sizeof def) == 0; i++) {
        assert_memory_equal(name, "PROFMALLOC_", 11);
        assert_true(strlen(doc) > 10);
        int marks = 0;
        for (const char *d = doc; *d; d++) marks += *d == '`';
        assert_int_equal(marks % 2, 0);
        assert_true(def[0] != 0);
        uint64_t v;
        if (!strcmp(name, "PROFMALLOC_SAMPLE_RATE") || !strcmp(name, "PROFMALLOC_TCACHE_BYTES")) {
            assert_int_equal(pm_fmt_parse_size(def, &v), 0);
            assert_int_equal(v, name[11] == 'S' ? pm_options.sample_rate : pm_options.tcache_bytes);
            sizes++;
        }
    }
    assert_true(i >= 7);
    assert_int_equal(sizes, 2);
    assert_int_equal(pm_options_row(i, &name, &doc, def, sizeof def), -1);
}

/* ====================================================================== */

int main(void)
{
    core_test_init();
    const struct CMUnitTest options[] = {
        cmocka_unit_test(test_options_load),
        cmocka_unit_test(test_options_rows_document_defaults),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("options", options, NULL, NULL);
    return failed ? 1 : 0;
}
