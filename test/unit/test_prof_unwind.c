/* test_prof_unwind.c — unit tests of the walks (src/prof_unwind.c, with
 * prof_objects.c and prof_unwind_cfi.c linked in directly).
 * The known chains come from stacktrace_chain.c, built without (om_*) and
 * with (fp_*) frame pointers.  Functions whose return addresses are checked
 * each sit in their own section, so a PC can be checked against the
 * linker's __start_<section>/__stop_<section> symbols. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <execinfo.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmocka.h>

#include "child_stderr.h"

int st_needed_fn(int x); /* needed_lib.c, a DT_NEEDED library */
#include "pm_prof_unwind.h"
#define STACKTRACE_CHAIN_DECLS_ONLY
#include "stacktrace_chain.c"

#define MAXF 64
#define FN_IN(sec) __attribute__((noinline, section(#sec)))
#define RANGE(sec)                                                             \
    extern const char __start_##sec[], __stop_##sec[];                         \
    static int in_##sec(uintptr_t pc)                                          \
    {                                                                          \
        return pc > (uintptr_t)__start_##sec && pc <= (uintptr_t)__stop_##sec; \
    }

RANGE(om_sec_a)
RANGE(om_sec_b)
RANGE(om_sec_c)
RANGE(om_sec_rec)
RANGE(fp_sec_a)
RANGE(fp_sec_b)
RANGE(fp_sec_c)
RANGE(fp_sec_rec)
RANGE(st_caller)
RANGE(st_callback)
RANGE(st_compar)
RANGE(st_qsort_caller)
RANGE(st_thread)
RANGE(st_ctx)
RANGE(st_signal)
RANGE(st_phdr_cb)
RANGE(st_phdr_caller)
RANGE(st_asm_cb)
RANGE(st_asm_caller)
RANGE(st_asm_mix)
RANGE(st_asm_expr)
RANGE(st_asm_bad)
RANGE(st_ctor)
RANGE(st_reload_cb)
RANGE(st_reload_caller)
RANGE(st_entry)
RANGE(st_entry_caller)
RANGE(st_memo_mid)
RANGE(st_memo_a)
RANGE(st_memo_b)

static volatile int sink;

/* The "test function" at the top of the known chain. */
FN_IN(st_caller) static int call_chain(struct chain_req *r, int fp_chain, int depth)
{
    int v;
    if (depth >= 0)
        v = fp_chain ? fp_chain_rec(r, depth) : om_chain_rec(r, depth);
    else
        v = fp_chain ? fp_chain_a(r) : om_chain_a(r);
    sink++;
    return v;
}

static int capture_chain(int mode, int fp_chain, uintptr_t *pcs, int max, int skip)
{
    pm_unwind_set_mode(mode);
    struct chain_req r = {pcs, max, skip, -1, NULL};
    call_chain(&r, fp_chain, -1);
    pm_unwind_set_mode(PM_UNWIND_DWARF);
    return r.n;
}

static void assert_known_chain(const uintptr_t *pcs, int n, int fp_chain)
{
    assert_true(n >= 4);
    assert_true(n < MAXF); /* ended by itself at _start */
    assert_true(fp_chain ? in_fp_sec_c(pcs[0]) : in_om_sec_c(pcs[0]));
    assert_true(fp_chain ? in_fp_sec_b(pcs[1]) : in_om_sec_b(pcs[1]));
    assert_true(fp_chain ? in_fp_sec_a(pcs[2]) : in_om_sec_a(pcs[2]));
    assert_true(in_st_caller(pcs[3]));
}

static void test_mode(void **state)
{
    (void)state;
    assert_int_equal(pm_unwind_get_mode(), PM_UNWIND_DWARF);
    pm_unwind_set_mode(PM_UNWIND_FP);
    assert_int_equal(pm_unwind_get_mode(), PM_UNWIND_FP);
    pm_unwind_set_mode(42);
    assert_int_equal(pm_unwind_get_mode(), PM_UNWIND_DWARF);
}

/* DWARF through code without frame pointers, and through code with them. */
static void test_dwarf_chain(void **state)
{
    (void)state;
    uintptr_t pcs[MAXF];
    int n = capture_chain(PM_UNWIND_DWARF, 0, pcs, MAXF, 0);
    assert_known_chain(pcs, n, 0);
    n = capture_chain(PM_UNWIND_DWARF, 1, pcs, MAXF, 0);
    assert_known_chain(pcs, n, 1);
}

static void test_fp_chain(void **state)
{
    (void)state;
    uintptr_t pcs[MAXF];
    /* With frame pointers the walk reaches the caller of a (a's record
     * holds its return address even though call_chain has no frame
     * pointer of its own). */
    int n = capture_chain(PM_UNWIND_FP, 1, pcs, MAXF, 0);
    assert_true(n >= 4 && n <= MAXF);
    assert_true(in_fp_sec_c(pcs[0]));
    assert_true(in_fp_sec_b(pcs[1]));
    assert_true(in_fp_sec_a(pcs[2]));
    assert_true(in_st_caller(pcs[3]));
    /* Without frame pointers only the first frame is certain. */
    n = capture_chain(PM_UNWIND_FP, 0, pcs, MAXF, 0);
    assert_true(n >= 1 && n <= MAXF);
    assert_true(in_om_sec_c(pcs[0]));
}

static void test_skip_and_max(void **state)
{
    (void)state;
    uintptr_t pcs[MAXF];
    for (int mode = PM_UNWIND_DWARF; mode <= PM_UNWIND_FP; mode++) {
        assert_int_equal(capture_chain(mode, 1, pcs, MAXF, 1) >= 3, 1);
        assert_true(in_fp_sec_b(pcs[0]));
        assert_true(in_fp_sec_a(pcs[1]));
        assert_true(in_st_caller(pcs[2]));
        assert_int_equal(capture_chain(mode, 1, pcs, MAXF, 3) >= 1, 1);
        assert_true(in_st_caller(pcs[0]));
        assert_int_equal(capture_chain(mode, 1, pcs, MAXF, -7) >= 4, 1);
        assert_true(in_fp_sec_c(pcs[0]));
        pcs[1] = 12345;
        assert_int_equal(capture_chain(mode, 1, pcs, 1, 0), 1);
        assert_true(in_fp_sec_c(pcs[0]));
        assert_int_equal(pcs[1], 12345); /* max respected */
        assert_int_equal(capture_chain(mode, 1, pcs, 2, 2), 2);
        assert_true(in_fp_sec_a(pcs[0]));
        assert_true(in_st_caller(pcs[1]));
        assert_int_equal(capture_chain(mode, 1, pcs, 0, 0), 0);
        assert_int_equal(capture_chain(mode, 1, pcs, MAXF, 100000), 0);
    }
}

/* pm_alloc_slow's frame record, as malloc tail-calls it: the walk from it
 * (pm_unwind_capture_from) gives the whole walk's frames from its caller
 * on, without stepping through the frames below; a record that is not on
 * the stack above gives the whole walk. */
FN_IN(st_entry) static int entry_walks(uintptr_t *from, int *nfrom, uintptr_t *all, int max, uintptr_t bogus)
{
    uintptr_t fp = bogus ? bogus : (uintptr_t)__builtin_frame_address(0);
    *nfrom = pm_unwind_capture_from(fp, from, max, NULL);
    int n = pm_unwind_capture(all, max, 0);
    sink++;
    return n;
}

FN_IN(st_entry_caller) static int entry_caller(uintptr_t *from, int *nfrom, uintptr_t *all, uintptr_t bogus)
{
    int n = entry_walks(from, nfrom, all, MAXF, bogus);
    sink++;
    return n;
}

static void test_capture_from_entry_frame(void **state)
{
    (void)state;
    uintptr_t from[MAXF], all[MAXF];
    for (int mode = PM_UNWIND_DWARF; mode <= PM_UNWIND_FP; mode++) {
        pm_unwind_set_mode(mode);
        int nfrom = 0, n = entry_caller(from, &nfrom, all, 0);
        assert_true(n >= 3 && n < MAXF);
        assert_true(in_st_entry(all[0]));
        assert_true(in_st_entry_caller(all[1]));
        assert_int_equal(nfrom, n - 1);
        for (int i = 0; i < nfrom; i++) assert_int_equal(from[i], all[i + 1]);
        /* below this frame, or not a stack address: the whole walk */
        n = entry_caller(from, &nfrom, all, 8);
        assert_true(nfrom >= 3);
        int seen = 0;
        for (int i = 0; i < nfrom; i++) seen += in_st_entry_caller(from[i]);
        assert_int_equal(seen, 1);
    }
    pm_unwind_set_mode(PM_UNWIND_DWARF);
}

/* The memo: a walk from the same first frame whose words are all the
 * same is replayed; one whose caller above differs (same first frame,
 * same stack pointer) is walked again and gives its own frames. */
FN_IN(st_entry) static int memo_entry(uintptr_t *pcs, pm_unwind_memo_t *memo)
{
    int n = pm_unwind_capture_from((uintptr_t)__builtin_frame_address(0), pcs, MAXF, memo);
    sink++;
    return n;
}

FN_IN(st_memo_mid) static int memo_mid(uintptr_t *pcs, pm_unwind_memo_t *memo)
{
    int n = memo_entry(pcs, memo);
    sink++;
    return n;
}

/* two callers alike but for their addresses: memo_mid's frame, and so the
 * walk's first frame, sits at the same stack pointer under either */
FN_IN(st_memo_a) static int memo_a(uintptr_t *pcs, pm_unwind_memo_t *memo)
{
    int n = memo_mid(pcs, memo);
    sink++;
    return n;
}

FN_IN(st_memo_b) static int memo_b(uintptr_t *pcs, pm_unwind_memo_t *memo)
{
    int n = memo_mid(pcs, memo);
    sink++;
    return n;
}

static __attribute__((noinline)) int memo_via(int (*f)(uintptr_t *, pm_unwind_memo_t *), uintptr_t *pcs,
                                              pm_unwind_memo_t *memo)
{
    int n = f(pcs, memo);
    sink++;
    return n;
}

/* Walks from one call site: calls[i] (memo_a or memo_b) into out[i], the
 * replays of each into rep[i]; before the last, the memo way that holds
 * memo_b's walk gets its first word wrong. */
enum { MEMO_CALLS = 6 };
static void memo_run(int (*const *calls)(uintptr_t *, pm_unwind_memo_t *), pm_unwind_memo_t *memo,
                     uintptr_t (*out)[MAXF], int *n, uint64_t *rep, uintptr_t b_ra)
{
    for (int i = 0; i < MEMO_CALLS; i++) {
        if (i == MEMO_CALLS - 1 && b_ra) {
            pm_unwind_memo_way_t *w = memo->way[0].val[0] == b_ra ? &memo->way[0] : &memo->way[1];
            w->val[0] ^= 16;
        }
        uint64_t before = pm_unwind_memo_replays();
        n[i] = memo_via(calls[i], out[i], memo);
        rep[i] = pm_unwind_memo_replays() - before;
    }
}

static int (*const memo_calls[MEMO_CALLS])(uintptr_t *, pm_unwind_memo_t *) = {memo_a, memo_a, memo_b,
                                                                                memo_b, memo_a, memo_b};

/* In a child: the start-up objects listed, so their rules are for good. */
static void memo_child(void *arg)
{
    (void)arg;
    pm_objects_pin_loaded();
    static pm_unwind_memo_t memo;
    static uintptr_t out[MEMO_CALLS][MAXF], ref[MAXF];
    int n[MEMO_CALLS];
    uint64_t rep[MEMO_CALLS];
    /* a first run finds memo_b's return address, for the tamper */
    memo_run(memo_calls, &memo, out, n, rep, 0);
    uintptr_t b_ra = out[2][1];
    memset(&memo, 0, sizeof memo);
    memo_run(memo_calls, &memo, out, n, rep, b_ra);
    const uint64_t want[MEMO_CALLS] = {0, 1, 0, 1, 1, 0};
    for (int i = 0; i < MEMO_CALLS; i++) {
        if (rep[i] != want[i]) _exit(10 + i);
        int b = memo_calls[i] == memo_b;
        if (n[i] != n[0] || n[i] < 4 || !in_st_memo_mid(out[i][0])) _exit(20 + i);
        if (!(b ? in_st_memo_b(out[i][1]) : in_st_memo_a(out[i][1]))) _exit(30 + i);
        /* the same frames as the first walk of that caller */
        if (memcmp(out[i], out[b ? 2 : 0], (size_t)n[i] * sizeof out[0][0]) != 0) _exit(40 + i);
    }
    /* one first frame for both callers: the words above told them apart */
    if (memo.way[0].pc != memo.way[1].pc || memo.way[0].sp != memo.way[1].sp) _exit(50);
    /* the walk without a memo agrees (called here, not from memo_run) */
    if (memo_via(memo_b, ref, NULL) != n[2] - 1 || memcmp(ref, out[2], 3 * sizeof ref[0]) != 0) _exit(51);
    _exit(0);
}

static void expect_child_passes(void (*fn)(void *), void *arg);

static void test_memo_replays(void **state)
{
    (void)state;
    pm_unwind_set_mode(PM_UNWIND_DWARF);
    /* objects not listed (rules that a reload could change): never kept */
    static pm_unwind_memo_t memo;
    static uintptr_t out[MEMO_CALLS][MAXF];
    int n[MEMO_CALLS];
    uint64_t rep[MEMO_CALLS];
    memo_run(memo_calls, &memo, out, n, rep, 0);
    for (int i = 0; i < MEMO_CALLS; i++) {
        assert_int_equal(rep[i], 0);
        assert_int_equal(n[i], n[0]);
    }
    assert_memory_equal(out[0], out[1], (size_t)n[0] * sizeof out[0][0]);
    assert_true(in_st_memo_b(out[2][1]));
    expect_child_passes(memo_child, NULL);
}

/* Two frames that keep data in %rbp, as code without frame pointers
 * does: st_data_rbp(fn, data, pcs, memo) loads data into %rbp and calls
 * st_data_rbp_inner, which saves it on its stack (an sp-based CFA) and
 * calls fn(pcs, memo). */
__asm__(".pushsection st_asm_data_rbp,\"ax\",@progbits\n"
        ".globl st_data_rbp\n.hidden st_data_rbp\n.type st_data_rbp,@function\n"
        "st_data_rbp:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_adjust_cfa_offset 8\n"
        ".cfi_offset rbp, -16\n"
        "movq %rsi, %rbp\n"
        "movq %rdx, %rsi\n"
        "movq %rcx, %rdx\n"
        "call st_data_rbp_inner\n"
        "popq %rbp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size st_data_rbp, .-st_data_rbp\n"
        ".type st_data_rbp_inner,@function\n"
        "st_data_rbp_inner:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_adjust_cfa_offset 8\n"
        ".cfi_offset rbp, -16\n"
        "movq %rdi, %rax\n"
        "movq %rsi, %rdi\n"
        "movq %rdx, %rsi\n"
        "call *%rax\n"
        "popq %rbp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size st_data_rbp_inner, .-st_data_rbp_inner\n"
        ".popsection\n");
int st_data_rbp(int (*fn)(uintptr_t *, pm_unwind_memo_t *), uintptr_t data, uintptr_t *pcs, pm_unwind_memo_t *memo);
RANGE(st_asm_data_rbp)

static void data_rbp_child(void *arg)
{
    (void)arg;
    pm_objects_pin_loaded();
    static pm_unwind_memo_t memo;
    static uintptr_t out[3][MAXF];
    int n[3];
    uint64_t rep[3];
    for (int i = 0; i < 3; i++) {
        uint64_t before = pm_unwind_memo_replays();
        n[i] = st_data_rbp(memo_entry, 0x1000 * (uintptr_t)(i + 1), out[i], &memo);
        rep[i] = pm_unwind_memo_replays() - before;
    }
    if (n[0] < 3 || !in_st_asm_data_rbp(out[0][0]) || !in_st_asm_data_rbp(out[0][1])) _exit(10);
    /* the saved data differs from call to call, and no CFA is computed
     * from it: the walk is replayed all the same */
    if (rep[0] != 0 || rep[1] != 1 || rep[2] != 1) _exit(20);
    for (int i = 1; i < 3; i++)
        if (n[i] != n[0] || memcmp(out[i], out[0], (size_t)n[0] * sizeof out[0][0]) != 0) _exit(30 + i);
    _exit(0);
}

/* The memo notes a saved %rbp only once a CFA is computed from it
 * (prof_unwind.c: step_dwarf). */
static void test_memo_ignores_data_rbp(void **state)
{
    (void)state;
    pm_unwind_set_mode(PM_UNWIND_DWARF);
    expect_child_passes(data_rbp_child, NULL);
}

static void test_deep_recursion(void **state)
{
    (void)state;
    enum { DEPTH = 200 };
    static uintptr_t pcs[512];
    for (int fp_chain = 0; fp_chain <= 1; fp_chain++) {
        for (int mode = fp_chain ? PM_UNWIND_FP : PM_UNWIND_DWARF; mode >= 0; mode--) {
            pm_unwind_set_mode(mode);
            struct chain_req r = {pcs, 512, 0, -1, NULL};
            call_chain(&r, fp_chain, DEPTH);
            pm_unwind_set_mode(PM_UNWIND_DWARF);
            int (*in_rec)(uintptr_t) = fp_chain ? in_fp_sec_rec : in_om_sec_rec;
            assert_true(r.n >= DEPTH + 5);
            assert_true(r.n < 512);
            for (int i = 3; i < 3 + DEPTH + 1; i++) assert_true(in_rec(pcs[i]));
            assert_true(in_st_caller(pcs[DEPTH + 4]));
            /* max cuts a deep stack exactly */
            r = (struct chain_req){pcs, 64, 10, -1, NULL};
            pm_unwind_set_mode(mode);
            call_chain(&r, fp_chain, DEPTH);
            pm_unwind_set_mode(PM_UNWIND_DWARF);
            assert_int_equal(r.n, 64);
            for (int i = 0; i < 64; i++) assert_true(in_rec(pcs[i]));
        }
    }
}

/* Compares with glibc's backtrace(), which uses libgcc's unwinder: from the
 * second entry on, both must list the same return addresses. */
static void assert_same_as_backtrace(const uintptr_t *pcs, int n, void *const *bt, int nb)
{
    assert_true(n >= 2);
    assert_true(n < MAXF);
    assert_int_equal(n, nb);
    for (int i = 1; i < n; i++) assert_int_equal(pcs[i], (uintptr_t)bt[i]);
}

static uintptr_t cb_pcs[MAXF];
static void *cb_bt[MAXF];
static int cb_n, cb_nb;

FN_IN(st_callback) static void callback_capture(struct chain_req *r)
{
    cb_n = pm_unwind_capture(cb_pcs, MAXF, 0);
    cb_nb = backtrace(cb_bt, MAXF);
    r->n = cb_n;
}

static void test_matches_backtrace(void **state)
{
    (void)state;
    struct chain_req r = {NULL, 0, 0, -1, callback_capture};
    call_chain(&r, 0, 3);
    assert_true(in_st_callback(cb_pcs[0]));
    assert_true(in_om_sec_c(cb_pcs[1]));
    assert_same_as_backtrace(cb_pcs, cb_n, cb_bt, cb_nb);
}

/* ---- through libc: qsort calls back into us ------------------------- */
static uintptr_t qs_pcs[MAXF];
static void *qs_bt[MAXF];
static int qs_n = -1, qs_nb;

FN_IN(st_compar) static int compar(const void *a, const void *b)
{
    if (qs_n < 0) {
        qs_n = pm_unwind_capture(qs_pcs, MAXF, 0);
        qs_nb = backtrace(qs_bt, MAXF);
    }
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

FN_IN(st_qsort_caller) static void sort_some(int *v, size_t n)
{
    qsort(v, n, sizeof *v, compar);
    sink++;
}

static int in_libc(uintptr_t pc)
{
    Dl_info info;
    return dladdr((void *)(pc - 1), &info) && info.dli_fname && strstr(info.dli_fname, "libc.so");
}

static void test_through_libc(void **state)
{
    (void)state;
    int v[64];
    for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
    sort_some(v, 64);
    assert_true(v[0] == 0 && v[63] == 63);
    assert_true(qs_n >= 3);
    assert_true(in_st_compar(qs_pcs[0]));
    int caller = -1;
    for (int i = 1; i < qs_n; i++)
        if (in_st_qsort_caller(qs_pcs[i])) {
            caller = i;
            break;
        }
    assert_true(caller >= 2);
    for (int i = 1; i < caller; i++) assert_true(in_libc(qs_pcs[i]));
    assert_same_as_backtrace(qs_pcs, qs_n, qs_bt, qs_nb);
}

/* dl_iterate_phdr's unwind info uses a "zPLR" CIE (personality, LSDA). */
static uintptr_t ph_pcs[MAXF];
static void *ph_bt[MAXF];
static int ph_n = -1, ph_nb;

FN_IN(st_phdr_cb) static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info;
    (void)size;
    (void)arg;
    ph_n = pm_unwind_capture(ph_pcs, MAXF, 0);
    ph_nb = backtrace(ph_bt, MAXF);
    return 1; /* stop after the first object */
}

FN_IN(st_phdr_caller) static void iterate_phdr(void)
{
    dl_iterate_phdr(phdr_cb, NULL);
    sink++;
}

static void test_through_libc_zplr(void **state)
{
    (void)state;
    iterate_phdr();
    assert_true(ph_n >= 3);
    assert_true(in_st_phdr_cb(ph_pcs[0]));
    assert_true(in_libc(ph_pcs[1]));
    assert_true(in_st_phdr_caller(ph_pcs[2]));
    assert_same_as_backtrace(ph_pcs, ph_n, ph_bt, ph_nb);
}

/* ---- hand-written CFI ---------------------------------------------------
 * st_cfi_mix: %rbp-based CFA, a realigned stack, remember/restore_state
 *   around a bogus row, DW_CFA_GNU_args_size.
 * st_cfi_expr: a DW_CFA_def_cfa_expression CFA: the DWARF walk must stop
 *   there cleanly (the frame-pointer walk goes on).
 * st_noret_call: the call is the function's last instruction, so its
 *   return address is the first byte of st_after_noret, whose CFI says
 *   "outermost frame": only a pc - 1 lookup finds the right row. */
__asm__(".pushsection st_asm_mix,\"ax\",@progbits\n"
        ".globl st_cfi_mix\n.hidden st_cfi_mix\n.type st_cfi_mix,@function\n"
        "st_cfi_mix:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbp, -16\n"
        "movq %rsp, %rbp\n"
        ".cfi_def_cfa_register rbp\n"
        "pushq %rbx\n"
        ".cfi_offset rbx, -24\n"
        "andq $-64, %rsp\n"
        ".cfi_remember_state\n"
        ".cfi_undefined rip\n"
        ".cfi_def_cfa rsp, 0\n"
        "nop\n"
        ".cfi_restore_state\n"
        ".cfi_escape 0x2e, 0x00\n"
        "call *%rdi\n"
        "leaq -8(%rbp), %rsp\n"
        "popq %rbx\n"
        ".cfi_restore rbx\n"
        "popq %rbp\n"
        ".cfi_def_cfa rsp, 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size st_cfi_mix, .-st_cfi_mix\n"
        ".popsection\n"
        ".pushsection st_asm_expr,\"ax\",@progbits\n"
        ".globl st_cfi_expr\n.hidden st_cfi_expr\n.type st_cfi_expr,@function\n"
        "st_cfi_expr:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbp, -16\n"
        "movq %rsp, %rbp\n"
        ".cfi_escape 0x0f, 0x02, 0x76, 0x10\n" /* CFA = DW_OP_breg6 (rbp) + 16 */
        "call *%rdi\n"
        "popq %rbp\n"
        ".cfi_def_cfa rsp, 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size st_cfi_expr, .-st_cfi_expr\n"
        ".popsection\n"
        ".pushsection st_asm_noret,\"ax\",@progbits\n"
        ".globl st_noret_call\n.hidden st_noret_call\n.type st_noret_call,@function\n"
        "st_noret_call:\n"
        ".cfi_startproc\n"
        "subq $8, %rsp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "call *%rdi\n"
        ".cfi_endproc\n"
        ".size st_noret_call, .-st_noret_call\n"
        ".globl st_after_noret\n.hidden st_after_noret\n.type st_after_noret,@function\n"
        "st_after_noret:\n"
        ".cfi_startproc\n"
        ".cfi_undefined rip\n"
        "ud2\n"
        ".cfi_endproc\n"
        ".size st_after_noret, .-st_after_noret\n"
        ".popsection\n");

void st_cfi_mix(void (*fn)(void));
void st_cfi_expr(void (*fn)(void));
void st_noret_call(void (*fn)(void));
void st_after_noret(void);

static uintptr_t asm_pcs[MAXF];
static void *asm_bt[MAXF];
static int asm_n, asm_nb;
static jmp_buf asm_jmp;

FN_IN(st_asm_cb) static void asm_cb(void)
{
    asm_n = pm_unwind_capture(asm_pcs, MAXF, 0);
    asm_nb = backtrace(asm_bt, MAXF);
}

FN_IN(st_asm_cb) static void asm_cb_noret(void)
{
    asm_n = pm_unwind_capture(asm_pcs, MAXF, 0);
    longjmp(asm_jmp, 1);
}

FN_IN(st_asm_caller) static void call_asm(void (*asm_fn)(void (*)(void)), void (*cb)(void))
{
    if (!setjmp(asm_jmp)) asm_fn(cb);
    sink++;
}

static void test_handwritten_cfi(void **state)
{
    (void)state;
    call_asm(st_cfi_mix, asm_cb);
    assert_true(asm_n >= 3 && asm_n < MAXF);
    assert_true(in_st_asm_cb(asm_pcs[0]));
    assert_true(in_st_asm_mix(asm_pcs[1]));
    assert_true(in_st_asm_caller(asm_pcs[2]));
    assert_same_as_backtrace(asm_pcs, asm_n, asm_bt, asm_nb);

    call_asm(st_cfi_expr, asm_cb);
    assert_int_equal(asm_n, 2); /* stops cleanly at the expression */
    assert_true(in_st_asm_cb(asm_pcs[0]));
    assert_true(in_st_asm_expr(asm_pcs[1]));

    call_asm(st_noret_call, asm_cb_noret);
    assert_true(asm_n >= 3 && asm_n < MAXF);
    assert_true(in_st_asm_cb(asm_pcs[0]));
    assert_int_equal(asm_pcs[1], (uintptr_t)st_after_noret);
    assert_true(in_st_asm_caller(asm_pcs[2]));

    /* The frame-pointer walk follows the records of both asm functions; it
     * cannot see their return addresses (kept in asm_cb's frame, which has
     * no record), so after asm_cb comes call_asm. */
    for (int i = 0; i < 2; i++) {
        pm_unwind_set_mode(PM_UNWIND_FP);
        call_asm(i ? st_cfi_expr : st_cfi_mix, asm_cb);
        pm_unwind_set_mode(PM_UNWIND_DWARF);
        assert_true(asm_n >= 2 && asm_n < MAXF);
        assert_true(in_st_asm_cb(asm_pcs[0]));
        assert_true(in_st_asm_caller(asm_pcs[1]));
    }
}

/* st_bad_frame_call(pcs, max, skip, bad_rbp) calls pm_unwind_capture
 * with %rbp = bad_rbp and CFI that says its CFA is %rbp + 16: both walks are
 * led to bad_rbp, and must refuse to read there when it lies above the top
 * of the running thread's stack. */
__asm__(".pushsection st_asm_bad,\"ax\",@progbits\n"
        ".globl st_bad_frame_call\n.hidden st_bad_frame_call\n"
        ".type st_bad_frame_call,@function\n"
        "st_bad_frame_call:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbp, -16\n"
        "movq %rcx, %rbp\n"
        ".cfi_def_cfa_register rbp\n"
        "call pm_unwind_capture\n"
        ".cfi_def_cfa rsp, 16\n"
        "popq %rbp\n"
        ".cfi_def_cfa_offset 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size st_bad_frame_call, .-st_bad_frame_call\n"
        ".popsection\n");

int st_bad_frame_call(uintptr_t *pcs, int max, int skip, uintptr_t bad_rbp);

struct bounds_result {
    uintptr_t bad;
    int n[2], first_ok[2];
};

static void *bounds_thread(void *arg)
{
    struct bounds_result *b = arg;
    for (int mode = PM_UNWIND_DWARF; mode <= PM_UNWIND_FP; mode++) {
        uintptr_t pcs[MAXF];
        pm_unwind_set_mode(mode);
        b->n[mode] = st_bad_frame_call(pcs, MAXF, 0, b->bad);
        pm_unwind_set_mode(PM_UNWIND_DWARF);
        b->first_ok[mode] = b->n[mode] >= 1 && in_st_asm_bad(pcs[0]);
    }
    return NULL;
}

static void test_stack_bounds(void **state)
{
    (void)state;
    /* A thread stack with an inaccessible page right above it: a walk
     * that reads above the stack top crashes the test. */
    size_t size = 256 * 1024, page = 4096;
    char *m = mmap(NULL, size + 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m + size, 4 * page, PROT_NONE), 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    assert_int_equal(pthread_attr_setstack(&attr, m, size), 0);
    static struct bounds_result b;
    for (int k = 0; k < 3; k++) {
        b.bad = (uintptr_t)(m + size) + (uintptr_t)k * 1024; /* in the inaccessible page */
        pthread_t th;
        assert_int_equal(pthread_create(&th, &attr, bounds_thread, &b), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        for (int mode = 0; mode < 2; mode++) {
            assert_true(b.first_ok[mode]);
            assert_int_equal(b.n[mode], 1);
        }
    }
    pthread_attr_destroy(&attr);
    munmap(m, size + 4 * page);
}

/* ---- other stacks ---------------------------------------------------- */
struct thread_result {
    uintptr_t pcs[MAXF];
    void *bt[MAXF];
    int n, nb, n_fp, fp_first_ok;
};

FN_IN(st_thread) static void *thread_main(void *arg)
{
    struct thread_result *t = arg;
    t->n = pm_unwind_capture(t->pcs, MAXF, 0);
    t->nb = backtrace(t->bt, MAXF);
    uintptr_t fp_pcs[MAXF];
    pm_unwind_set_mode(PM_UNWIND_FP);
    t->n_fp = pm_unwind_capture(fp_pcs, MAXF, 0);
    pm_unwind_set_mode(PM_UNWIND_DWARF);
    t->fp_first_ok = t->n_fp >= 1 && in_st_thread(fp_pcs[0]);
    sink++;
    return NULL;
}

static void test_thread(void **state)
{
    (void)state;
    static struct thread_result t;
    pthread_t th;
    pthread_attr_t attr;
    /* A small stack too, so the stack-top bound is exercised off the main thread. */
    for (size_t size = 0; size <= 65536; size += 65536) {
        memset(&t, 0, sizeof t);
        pthread_attr_init(&attr);
        if (size) pthread_attr_setstacksize(&attr, size);
        assert_int_equal(pthread_create(&th, &attr, thread_main, &t), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        pthread_attr_destroy(&attr);
        assert_true(in_st_thread(t.pcs[0]));
        assert_true(in_libc(t.pcs[1])); /* start_thread */
        assert_same_as_backtrace(t.pcs, t.n, t.bt, t.nb);
        assert_true(t.fp_first_ok);
        assert_true(t.n_fp < MAXF);
    }
}

static ucontext_t ctx_main, ctx_co;
static int ctx_n[2], ctx_first_ok[2];

FN_IN(st_ctx) static void ctx_func(void)
{
    for (int mode = PM_UNWIND_DWARF; mode <= PM_UNWIND_FP; mode++) {
        uintptr_t pcs[MAXF];
        pm_unwind_set_mode(mode);
        ctx_n[mode] = pm_unwind_capture(pcs, MAXF, 0);
        pm_unwind_set_mode(PM_UNWIND_DWARF);
        ctx_first_ok[mode] = ctx_n[mode] >= 1 && in_st_ctx(pcs[0]);
    }
    sink++;
}

static void test_makecontext(void **state)
{
    (void)state;
    static char stack[256 * 1024] __attribute__((aligned(16)));
    assert_int_equal(getcontext(&ctx_co), 0);
    ctx_co.uc_stack.ss_sp = stack;
    ctx_co.uc_stack.ss_size = sizeof stack;
    ctx_co.uc_link = &ctx_main;
    makecontext(&ctx_co, ctx_func, 0);
    assert_int_equal(swapcontext(&ctx_main, &ctx_co), 0);
    for (int mode = 0; mode < 2; mode++) {
        assert_true(ctx_first_ok[mode]);
        assert_true(ctx_n[mode] < MAXF); /* stopped by itself */
    }
    assert_true(ctx_n[PM_UNWIND_DWARF] <= 3); /* ctx_func, __start_context */
}

static uintptr_t sig_pcs[2][MAXF];
static volatile int sig_n[2];

FN_IN(st_signal) static void on_signal(int sig)
{
    (void)sig;
    for (int mode = PM_UNWIND_DWARF; mode <= PM_UNWIND_FP; mode++) {
        pm_unwind_set_mode(mode);
        sig_n[mode] = pm_unwind_capture(sig_pcs[mode], MAXF, 0);
    }
    pm_unwind_set_mode(PM_UNWIND_DWARF);
}

static void test_signal_handler(void **state)
{
    (void)state;
    static char alt[64 * 1024] __attribute__((aligned(16)));
    for (int on_alt = 0; on_alt <= 1; on_alt++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = on_alt ? SA_ONSTACK : 0;
        sigemptyset(&sa.sa_mask);
        if (on_alt) {
            stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
            assert_int_equal(sigaltstack(&ss, NULL), 0);
        }
        assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
        sig_n[0] = sig_n[1] = -1;
        raise(SIGUSR1);
        sigaction(SIGUSR1, &old, NULL);
        if (on_alt) {
            stack_t ss = {.ss_flags = SS_DISABLE};
            sigaltstack(&ss, NULL);
        }
        for (int mode = 0; mode < 2; mode++) {
            assert_true(sig_n[mode] >= 1 && sig_n[mode] < MAXF);
            assert_true(in_st_signal(sig_pcs[mode][0]));
        }
    }
}

/* Before main: a constructor of the executable, run from libc's startup. */
static uintptr_t ctor_pcs[MAXF];
static int ctor_n = -1;

FN_IN(st_ctor) __attribute__((constructor(101))) static void early_capture(void)
{
    ctor_n = pm_unwind_capture(ctor_pcs, MAXF, 0);
}

static void test_constructor(void **state)
{
    (void)state;
    assert_true(ctor_n >= 2 && ctor_n < MAXF);
    assert_true(in_st_ctor(ctor_pcs[0]));
    assert_true(in_libc(ctor_pcs[1]));
}

/* ---- never allocates ------------------------------------------------- */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void test_no_malloc(void **state)
{
    (void)state;
    uintptr_t pcs[MAXF];
    int total = 0;
    capture_chain(PM_UNWIND_DWARF, 0, pcs, MAXF, 0); /* warm up */
    size_t before = heap_in_use();
    for (int i = 0; i < 10000; i++) {
        total += capture_chain(PM_UNWIND_DWARF, i & 1, pcs, MAXF, 0);
        total += capture_chain(PM_UNWIND_FP, 1, pcs, MAXF, 0);
    }
    size_t after = heap_in_use();
    assert_true(total >= 10000 * 8);
    assert_int_equal(before, after);
}

/* ---- concurrent with dlopen/dlclose (the object list changes) --------- */
static _Atomic int dl_stop;
static _Atomic long dl_bad, dl_runs;

static void *capture_loop(void *arg)
{
    (void)arg;
    uintptr_t pcs[MAXF];
    while (!dl_stop) {
        int n = capture_chain(PM_UNWIND_DWARF, 0, pcs, MAXF, 0);
        if (n < 4 || n >= MAXF || !in_om_sec_c(pcs[0]) || !in_st_caller(pcs[3])) dl_bad++;
        dl_runs++;
    }
    return NULL;
}

static void test_concurrent_dlopen(void **state)
{
    (void)state;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, capture_loop, NULL), 0);
    int opened = 0;
    for (int i = 0; i < 100; i++) {
        void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            opened++;
            dlclose(h);
        }
    }
    while (dl_runs < 1000) sched_yield();
    dl_stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    assert_int_equal(opened, 100);
    assert_int_equal(dl_bad, 0);
}

/* A plugin reloaded at the same address after a rebuild that changed one
 * frame's size: the unwinder must use the new library's rule, not one it
 * cached for the old library's code at the same PC (that gave a garbage
 * caller and lost the rest of the stack). */
static uintptr_t reload_pcs[MAXF];
static int reload_n;

FN_IN(st_reload_cb) static void reload_cb(void)
{
    reload_n = pm_unwind_capture(reload_pcs, MAXF, 0);
    sink++;
}

FN_IN(st_reload_caller) static int reload_call(void *h)
{
    void (*call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(h, "plug_call");
    if (!call) return -1;
    call(reload_cb);
    sink++;
    return 0;
}

static int copy_file(const char *from, const char *to)
{
    char cmd[4 * PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.new' && mv '%s.new' '%s'", from, to, to, to);
    return system(cmd);
}

/* Loads build `first`, then build `second` of a plugin at one path, and
 * checks the stack through plug_call each time. */
static void reload_pair(const char *first_name, const char *second_name)
{
    const char *dir = getenv("ST_PLUG_DIR");
    if (!dir) skip();
    char a[PATH_MAX], b[PATH_MAX], plug[PATH_MAX];
    snprintf(a, sizeof a, "%s/%s", dir, first_name);
    snprintf(b, sizeof b, "%s/%s", dir, second_name);
    snprintf(plug, sizeof plug, "%s/plug.so", dir);
    uintptr_t first = 0;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(copy_file(round ? b : a, plug), 0);
        void *h = dlopen(plug, RTLD_NOW | RTLD_LOCAL);
        assert_non_null(h);
        void *fn = dlsym(h, "plug_call");
        struct link_map *lm = NULL;
        assert_int_equal(dlinfo(h, RTLD_DI_LINKMAP, &lm), 0);
        if (round == 0) first = (uintptr_t)lm->l_addr;
        else if ((uintptr_t)lm->l_addr != first) {
            dlclose(h);
            skip(); /* not reloaded at the same address: nothing to test */
        }
        pm_unwind_set_mode(PM_UNWIND_DWARF);
        assert_int_equal(reload_call(h), 0);
        /* reload_cb, plug_call, reload_call, ... */
        assert_true(reload_n >= 3);
        assert_true(in_st_reload_cb(reload_pcs[0]));
        assert_true((uintptr_t)reload_pcs[1] > (uintptr_t)fn && reload_pcs[1] < (uintptr_t)fn + 96);
        if (!in_st_reload_caller(reload_pcs[2]))
            fail_msg("round %d: the plugin's caller is %#lx, not reload_call", round,
                     (unsigned long)reload_pcs[2]);
        dlclose(h);
    }
}

static void test_reload_same_address(void **state)
{
    (void)state;
    reload_pair("plug_a.so", "plug_b.so"); /* one FDE's bytes differ */
}

/* The rebuilt plugin's FDE has the same bytes as the old one's, moved with
 * the code: the cache must tell them apart by where the FDE is. */
static void test_reload_same_address_moved_fde(void **state)
{
    (void)state;
    reload_pair("plug_m1.so", "plug_m2.so");
}

static void expect_child_passes(void (*fn)(void *), void *arg);

/* ---- rules keyed by the PC alone ---------------------------------------- */

static uintptr_t ref_pcs[MAXF];
static int ref_n;

/* After the start-up objects are listed, a walk through them finds its
 * rules by the PC alone once they have been worked out, and they are the
 * ones the lookup by object gave (the parent's walk, before any listing). */
static void pinned_child(void *arg)
{
    (void)arg;
    pm_objects_pin_loaded();
    uintptr_t pcs[2][MAXF];
    int n[2];
    uint64_t slow[2];
    for (int i = 0; i < 2; i++) { /* one call site: the same PCs */
        uint64_t before = pm_unwind_slow_lookups();
        n[i] = capture_chain(PM_UNWIND_DWARF, 0, pcs[i], MAXF, 0);
        slow[i] = pm_unwind_slow_lookups() - before;
    }
    fprintf(stderr, "%d and %d frames, %lu and %lu looked up by object\n", n[0], n[1], (unsigned long)slow[0],
            (unsigned long)slow[1]);
    if (n[0] != n[1] || n[0] < 6 || memcmp(pcs[0], pcs[1], sizeof pcs[0][0] * (size_t)n[0]) != 0) _exit(3);
    /* the known chain: the same PCs as the parent's */
    if (memcmp(pcs[0], ref_pcs, 4 * sizeof ref_pcs[0]) != 0) _exit(4);
    /* most of the second walk from the cache: not all, as two PCs of the
     * chain whose slots other rules fill (it depends on where the code
     * landed) are looked up again (2 of 12 in one build) */
    _exit(slow[0] > 0 && 2 * slow[1] < slow[0] ? 0 : 5);
}

static void test_pinned_rules_cached(void **state)
{
    (void)state;
    ref_n = capture_chain(PM_UNWIND_DWARF, 0, ref_pcs, MAXF, 0);
    assert_known_chain(ref_pcs, ref_n, 0);
    expect_child_passes(pinned_child, NULL);
}

/* A plugin dlopen()ed after the listing: its frame's rule is looked up by
 * its object at every walk, never served by the PC alone. */
static void plugin_child(void *arg)
{
    pm_objects_pin_loaded();
    void *h = dlopen((const char *)arg, RTLD_NOW | RTLD_LOCAL);
    if (!h) _exit(3);
    if (reload_call(h) != 0 || reload_call(h) != 0) _exit(3);
    uint64_t before = pm_unwind_slow_lookups();
    if (reload_call(h) != 0) _exit(3);
    uint64_t slow = pm_unwind_slow_lookups() - before;
    if (reload_n < 3 || !in_st_reload_caller(reload_pcs[2])) _exit(4);
    fprintf(stderr, "%lu frames looked up by object\n", (unsigned long)slow);
    _exit(slow >= 1 ? 0 : 5);
}

static void test_plugin_rules_checked(void **state)
{
    (void)state;
    const char *dir = getenv("ST_PLUG_DIR");
    if (!dir) skip();
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/plug_a.so", dir);
    expect_child_passes(plugin_child, path);
}

/* A plugin opened before the listing (as a library's constructor may)
 * is listed with the start-up objects but can be closed: rebuilt and
 * reloaded at the same address, its new frame's rule must be used. */
static void pinned_reload_child(void *arg)
{
    const char *dir = arg;
    char a[PATH_MAX], b[PATH_MAX], plug[PATH_MAX];
    snprintf(a, sizeof a, "%s/plug_a.so", dir);
    snprintf(b, sizeof b, "%s/plug_b.so", dir);
    snprintf(plug, sizeof plug, "%s/plug_pinned.so", dir);
    uintptr_t first = 0;
    for (int round = 0; round < 2; round++) {
        if (copy_file(round ? b : a, plug) != 0) _exit(3);
        void *h = dlopen(plug, RTLD_NOW | RTLD_LOCAL);
        if (!h) _exit(3);
        struct link_map *lm = NULL;
        if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) _exit(3);
        if (round == 0) {
            first = (uintptr_t)lm->l_addr;
            pm_objects_pin_loaded(); /* the plugin is listed with the rest */
        } else if ((uintptr_t)lm->l_addr != first) {
            _exit(77); /* not reloaded at the same address: nothing to test */
        }
        if (reload_call(h) != 0 || reload_call(h) != 0) _exit(3); /* the second from the cache */
        if (reload_n < 3 || !in_st_reload_caller(reload_pcs[2])) {
            fprintf(stderr, "round %d: the plugin's caller is %#lx, not reload_call\n", round,
                    (unsigned long)reload_pcs[2]);
            _exit(4);
        }
        dlclose(h);
    }
    unlink(plug);
    _exit(0);
}

static void test_reload_pinned_plugin(void **state)
{
    (void)state;
    char *dir = getenv("ST_PLUG_DIR");
    if (!dir) skip();
    expect_child_passes(pinned_reload_child, dir);
}

/* ---- the unwind tables' pages go back after a lookup -------------------- */

/* A library's pages from its .eh_frame_hdr to the end of the segment
 * holding it, when that segment is read-only: the range the unwinder gives
 * back.  range[2] is the library's name. */
static int lib_tables(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t *range = arg;
    if (!strstr(info->dlpi_name, (const char *)range[2])) return 0;
    uintptr_t hdr = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) hdr = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    for (int i = 0; hdr && i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t seg = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || hdr < seg || hdr - seg >= ph->p_memsz) continue;
        if (ph->p_flags != PF_R) return 1;
        range[0] = (hdr + 4095) & ~(uintptr_t)4095;
        range[1] = (seg + ph->p_memsz) & ~(uintptr_t)4095;
    }
    return 1;
}

/* How many pages of [lo, hi) are mapped in this process (pagemap bit 63);
 * -1 when pagemap cannot be read. */
static long pages_mapped(uintptr_t lo, uintptr_t hi)
{
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0) return -1;
    long n = 0;
    for (uintptr_t a = lo; a < hi; a += 4096) {
        uint64_t e;
        if (pread(fd, &e, 8, (off_t)(a / 4096 * 8)) != 8) {
            n = -1;
            break;
        }
        n += (long)(e >> 63);
    }
    close(fd);
    return n;
}

static uintptr_t gb_pcs[MAXF];
static int gb_n;

static int gb_compar(const void *a, const void *b)
{
    if (!gb_n) gb_n = pm_unwind_capture(gb_pcs, MAXF, 0);
    return *(const int *)a - *(const int *)b;
}

static void giveback_child(void *arg)
{
    uintptr_t range[3] = {0, 0, (uintptr_t)arg};
    dl_iterate_phdr(lib_tables, range);
    if (range[1] <= range[0]) _exit(77); /* no read-only segment: nothing to check */
    pm_objects_pin_loaded();
    for (uintptr_t a = range[0]; a < range[1]; a += 4096) (void)*(const volatile uint8_t *)a;
    long before = pages_mapped(range[0], range[1]);
    if (before < 0) _exit(77);
    if (before != (long)((range[1] - range[0]) / 4096)) _exit(3); /* the read maps them */
    /* the give-back interval counts from the last one, and this process
     * has made none (the parent never lists its objects) */
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    int v[32];
    for (int i = 0; i < 32; i++) v[i] = (i * 7) % 32;
    qsort(v, 32, sizeof v[0], gb_compar);
    if (gb_n < 3) _exit(4);
    int through_libc = 0;
    for (int i = 0; i < gb_n; i++) through_libc |= in_libc(gb_pcs[i]);
    if (!through_libc) _exit(5);
    long after = pages_mapped(range[0], range[1]);
    fprintf(stderr, "%s tables: %ld of %ld pages mapped after the walk\n", (const char *)arg, after,
            (long)((range[1] - range[0]) / 4096));
    _exit(after == 0 ? 0 : 6);
}

/* A walk through libc reads libc's .eh_frame_hdr and .eh_frame; the pages
 * that maps (the kernel maps 64 KB around each) go back afterwards.  The same
 * for a library the program names in DT_NEEDED (cmocka, whose frames call
 * every test). */
/* Runs fn(arg) in a child that exits 0 (passed), 77 (nothing to check
 * here: skipped) or another code (failed, with what it wrote on stderr). */
static void expect_child_passes(void (*fn)(void *), void *arg)
{
    char out[512];
    int status = run_in_child(fn, arg, out, sizeof out);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) skip();
    if (WEXITSTATUS(status) != 0) fprintf(stderr, "child exit %d: %s", WEXITSTATUS(status), out);
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void tables_given_back(const char *lib)
{
    expect_child_passes(giveback_child, (void *)lib);
}

static void test_tables_given_back(void **state)
{
    (void)state;
    tables_given_back("/libc.so");
}

static void test_needed_tables_given_back(void **state)
{
    (void)state;
    tables_given_back("/libcmocka.so");
}

/* A plugin dlopen()ed before the start-up objects are listed (as a library's
 * constructor may, before profmalloc's runs) can be closed again: its pages
 * must never be given back, or a madvise on its old range zeroes whatever
 * is mapped there next. */
static uintptr_t un_pcs[MAXF];
static int un_n;

static void unload_cb(void)
{
    un_n = pm_unwind_capture(un_pcs, MAXF, 0);
    sink++;
}

static void unload_child(void *arg)
{
    const char *path = arg;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) _exit(3);
    void (*call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(h, "plug_call");
    if (!call) _exit(3);
    pm_objects_pin_loaded(); /* the plugin is listed with the rest */
    unload_cb();                /* through libc: a give-back now, the next 100 ms later */
    call(unload_cb);            /* reads the plugin's tables meanwhile */
    if (un_n < 3) _exit(4);
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0) _exit(3);
    unsigned char *base = (unsigned char *)lm->l_addr;
    dlclose(h);
    /* new memory where the plugin was (its segments span 32 KiB) */
    size_t len = 32 * 1024;
    unsigned char *buf = mmap(base, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (buf != base) _exit(77); /* still mapped, or the kernel has no MAP_FIXED_NOREPLACE */
    memset(buf, 0xab, len);
    struct timespec pause = {0, 150 * 1000 * 1000}; /* past the give-back interval */
    nanosleep(&pause, NULL);
    unload_cb(); /* the first capture after it gives back what is pending */
    size_t changed = 0;
    for (size_t i = 0; i < len; i++) changed += buf[i] != 0xab;
    fprintf(stderr, "%zu of %zu bytes changed\n", changed, len);
    _exit(changed ? 6 : 0);
}

static void unloaded_tables_kept(const char *plugin)
{
    const char *dir = getenv("ST_PLUG_DIR");
    if (!dir) skip();
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, plugin);
    expect_child_passes(unload_child, path);
}

static void test_unloaded_tables_kept(void **state)
{
    (void)state;
    unloaded_tables_kept("plug_many.so");
}

/* The same with a plugin of the file name of a library the program links
 * against (libstneeded.so, which has no .eh_frame_hdr and so is never
 * matched by name): the loader, not the name, says which is the program's. */
static void test_needed_name_plugin_kept(void **state)
{
    (void)state;
    assert_int_equal(st_needed_fn(1), 2);
    unloaded_tables_kept("other/libstneeded.so");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode),
        cmocka_unit_test(test_dwarf_chain),
        cmocka_unit_test(test_fp_chain),
        cmocka_unit_test(test_skip_and_max),
        cmocka_unit_test(test_capture_from_entry_frame),
        cmocka_unit_test(test_memo_replays),
        cmocka_unit_test(test_memo_ignores_data_rbp),
        cmocka_unit_test(test_deep_recursion),
        cmocka_unit_test(test_matches_backtrace),
        cmocka_unit_test(test_through_libc),
        cmocka_unit_test(test_through_libc_zplr),
        cmocka_unit_test(test_handwritten_cfi),
        cmocka_unit_test(test_stack_bounds),
        cmocka_unit_test(test_thread),
        cmocka_unit_test(test_makecontext),
        cmocka_unit_test(test_signal_handler),
        cmocka_unit_test(test_constructor),
        cmocka_unit_test(test_no_malloc),
        cmocka_unit_test(test_concurrent_dlopen),
        cmocka_unit_test(test_reload_same_address),
        cmocka_unit_test(test_reload_same_address_moved_fde),
        cmocka_unit_test(test_pinned_rules_cached),
        cmocka_unit_test(test_plugin_rules_checked),
        cmocka_unit_test(test_reload_pinned_plugin),
        cmocka_unit_test(test_tables_given_back),
        cmocka_unit_test(test_needed_tables_given_back),
        cmocka_unit_test(test_unloaded_tables_kept),
        cmocka_unit_test(test_needed_name_plugin_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
