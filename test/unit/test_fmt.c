/* test_fmt.c — unit tests of src/fmt.c: size parsing and the bounded buffer. */
#include "core_test.h"

/* ======================================================================
 * fmt.c and options.c
 * ==================================================================== */

static void test_fmt_parse_size(void **state)
{
    (void)state;
    static const struct { const char *s; uint64_t v; } ok[] = {
        {"0", 0}, {"1", 1}, {"512k", 512u << 10}, {"2M", 2u << 20}, {"1G", 1u << 30},
        {"64KiB", 64u << 10}, {"3kb", 3u << 10}, {"7K", 7u << 10}, {"5m", 5u << 20},
        {"2T", (uint64_t)2 << 40}, {"10B", 10}, {"4MiB", 4u << 20}, {"1gb", 1u << 30},
        {"007", 7}, {"18446744073709551615", UINT64_MAX}, {"16777215T", (uint64_t)16777215 << 40},
    };
    for (size_t i = 0; i < PM_ARRAY_LEN(ok); i++) {
        uint64_t v = 12345;
        if (pm_fmt_parse_size(ok[i].s, &v) != 0) fail_msg("\"%s\" rejected", ok[i].s);
        if (v != ok[i].v) fail_msg("\"%s\" = %llu, want %llu", ok[i].s, (unsigned long long)v,
                                   (unsigned long long)ok[i].v);
    }
    static const char *bad[] = {"", "k", "12x", "-1", "1.5M", "99999999999999999999",
                                "20000000T", "18446744073709551616", "16777216T", " 1", "1 ",
                                "+1", "1kk", "1iB", "1KiBx", "1Bk", "0x10", "1e3", "M", "4Ki", "2mi"};
    for (size_t i = 0; i < PM_ARRAY_LEN(bad); i++) {
        uint64_t v = 777;
        if (pm_fmt_parse_size(bad[i], &v) == 0) fail_msg("\"%s\" accepted as %llu", bad[i],
                                                         (unsigned long long)v);
        assert_int_equal(v, 777);
    }
    uint64_t v;
    assert_int_equal(pm_fmt_parse_size(NULL, &v), -1);
}

static void test_fmt_buf(void **state)
{
    (void)state;
    char mem[64];
    pm_buf_t b;
    pm_buf_init(&b, mem, sizeof mem, -1);
    pm_buf_str(&b, "n=");
    pm_buf_u64(&b, 0);
    pm_buf_str(&b, " ");
    pm_buf_u64(&b, UINT64_MAX);
    pm_buf_str(&b, " ");
    pm_buf_hex(&b, 0);
    pm_buf_str(&b, " ");
    pm_buf_hex(&b, 0xdeadbeefull);
    assert_int_equal(b.truncated, 0);
    assert_int_equal(b.len, strlen("n=0 18446744073709551615 0x0 0xdeadbeef"));
    assert_memory_equal(mem, "n=0 18446744073709551615 0x0 0xdeadbeef", b.len);
    /* no fd: overflow truncates, never writes past cap */
    char small[8 + 1];
    small[8] = '#';
    pm_buf_init(&b, small, 8, -1);
    pm_buf_str(&b, "0123456789");
    assert_int_equal(b.len, 8);
    assert_int_equal(b.truncated, 1);
    assert_int_equal(small[8], '#');
    assert_memory_equal(small, "01234567", 8);
    /* an fd: flushes when full, nothing lost */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pm_buf_init(&b, small, 8, fds[1]);
    pm_buf_str(&b, "hello, world: ");
    pm_buf_hex(&b, 0xabcdef0123456789ull);
    assert_int_equal(pm_buf_flush(&b), 0);
    close(fds[1]);
    char out[64] = {0};
    ssize_t n = read(fds[0], out, sizeof out - 1);
    close(fds[0]);
    assert_string_equal(out, "hello, world: 0xabcdef0123456789");
    assert_int_equal(n, 32);
    assert_int_equal(b.truncated, 0);
    assert_int_equal(pm_fmt_strlen(""), 0);
    assert_int_equal(pm_fmt_strlen("abc"), 3);
    assert_true(pm_fmt_streq("abc", "abc"));
    assert_false(pm_fmt_streq("abc", "abd"));
    assert_false(pm_fmt_streq("abc", "ab"));
    assert_false(pm_fmt_streq("ab", "abc"));
}

/* pm_fmt_join: both parts, or as much as fits and a terminator, never a
 * byte past cap (the peak notes' and the double-free message's names). */
static void test_fmt_join(void **state)
{
    (void)state;
    char out[12];
    pm_fmt_join(out, sizeof out, "peak", "_in_use");
    assert_string_equal(out, "peak_in_use");
    out[sizeof out - 1] = '#';
    pm_fmt_join(out, 8, "free", ": double free");
    assert_string_equal(out, "free: d");
    assert_int_equal(out[sizeof out - 1], '#');
    pm_fmt_join(out, sizeof out, "", "");
    assert_string_equal(out, "");
}


/* ====================================================================== */

/* The exit dump's own errno table says what glibc's strerror says (the
 * test runs in the C locale), for every errno it knows. */
static void test_errno_text(void **state)
{
    (void)state;
    int known = 0;
    for (int e = 0; e < 200; e++) {
        const char *t = pm_fmt_errno_text(e);
        if (!t) continue;
        known++;
        assert_string_equal(t, strerror(e));
    }
    assert_string_equal(pm_fmt_errno_text(ENOENT), "No such file or directory");
    assert_non_null(pm_fmt_errno_text(EACCES));
    assert_non_null(pm_fmt_errno_text(ENOSPC));
    assert_true(known >= 25);
    assert_null(pm_fmt_errno_text(0));
    assert_null(pm_fmt_errno_text(-1));
}

int main(void)
{
    core_test_init();
    const struct CMUnitTest fmt[] = {
        cmocka_unit_test(test_fmt_parse_size),
        cmocka_unit_test(test_fmt_buf),
        cmocka_unit_test(test_fmt_join),
        cmocka_unit_test(test_errno_text),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("fmt", fmt, NULL, NULL);
    return failed ? 1 : 0;
}
