/* test_prof_unwind_cfi.c — unit tests of the CFI decoder
 * (src/prof_unwind_cfi.c, linked in alone): a hand-built .eh_frame of one
 * CIE and two FDEs, as gcc writes them for a function that sets up %rbp,
 * decoded record by record, then searched through the .eh_frame_hdr table
 * pm_cfi_build_hdr builds for it.  The code they describe is a made-up
 * address range: nothing here is executed or unwound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pm.h"
#include "pm_prof_unwind_cfi.h"

#if defined(__x86_64__)

/* ---- building the section ------------------------------------------------ */
typedef struct {
    uint8_t *base;
    size_t len;
} sec_t;

static _Alignas(16) uint8_t section[512];
static _Alignas(16) uint8_t hdr_out[24 + 16 * (sizeof section / 8)];

static void put(sec_t *s, const void *bytes, size_t n)
{
    memcpy(s->base + s->len, bytes, n);
    s->len += n;
}
static void put8(sec_t *s, uint8_t v) { put(s, &v, 1); }
static void put32(sec_t *s, uint32_t v) { put(s, &v, 4); }

/* Pads the record started at `start` with DW_CFA_nop to a multiple of 8
 * and writes its length field. */
static void close_record(sec_t *s, size_t start)
{
    while ((s->len - start) % 8) put8(s, PM_CFA_NOP);
    uint32_t len = (uint32_t)(s->len - start - 4);
    memcpy(s->base + start, &len, 4);
}

/* The code the FDEs describe: 0x100 bytes per function, far from the
 * section so that a pcrel field is not 0. */
static uintptr_t code_at(unsigned i) { return (uintptr_t)section + 0x100000 + 0x100 * i; }

static size_t cie_off, fde_off[2];

/* CIE "zR": code align 1, data align -8, RA column 16, FDE pointers
 * pcrel|sdata4; initial rules CFA = rsp + 8, RA at CFA - 8.
 * FDE 0 (code_at(0), 0x40 bytes): push %rbp at +0 (CFA = rsp + 16, rbp
 * at CFA - 16 from +1), mov %rsp,%rbp (CFA = rbp + 16 from +4).
 * FDE 1 (code_at(1), 0x20 bytes): RA undefined (an outermost frame).
 * Then the 4-byte terminator. */
static size_t build_section(uint8_t fde0_last_op)
{
    sec_t s = {section, 0};
    memset(section, 0, sizeof section);
    cie_off = s.len;
    put32(&s, 0); /* length, set by close_record */
    put32(&s, 0); /* CIE id */
    put8(&s, 1);  /* version */
    put(&s, "zR", 3);
    put8(&s, 1);    /* code alignment, uleb */
    put8(&s, 0x78); /* data alignment -8, sleb */
    put8(&s, 16);   /* return address column (version 1: a byte) */
    put8(&s, 1);    /* augmentation data length */
    put8(&s, PM_EH_PCREL | PM_EH_SDATA4);
    put8(&s, PM_CFA_DEF_CFA), put8(&s, PM_REG_RSP), put8(&s, 8);
    put8(&s, PM_CFA_OFFSET | PM_REG_RA), put8(&s, 1); /* RA at CFA - 8 */
    close_record(&s, cie_off);

    for (unsigned i = 0; i < 2; i++) {
        size_t start = fde_off[i] = s.len;
        put32(&s, 0);
        put32(&s, (uint32_t)(s.len - cie_off)); /* back to the CIE from this field */
        int32_t rel = (int32_t)((intptr_t)code_at(i) - (intptr_t)(uintptr_t)(s.base + s.len));
        put(&s, &rel, 4);
        put32(&s, i == 0 ? 0x40 : 0x20); /* pc range */
        put8(&s, 0);                     /* augmentation data length */
        if (i == 0) {
            put8(&s, PM_CFA_ADVANCE_LOC | 1);
            put8(&s, PM_CFA_DEF_CFA_OFFSET), put8(&s, 16);
            put8(&s, PM_CFA_OFFSET | PM_REG_RBP), put8(&s, 2); /* rbp at CFA - 16 */
            put8(&s, PM_CFA_ADVANCE_LOC | 3);
            put8(&s, fde0_last_op), put8(&s, PM_REG_RBP);
        } else {
            put8(&s, PM_CFA_UNDEFINED), put8(&s, PM_REG_RA);
        }
        close_record(&s, start);
    }
    put32(&s, 0); /* terminator */
    return s.len;
}

/* ---- the records ------------------------------------------------------- */
static void test_cfi_parses_cie(void **state)
{
    (void)state;
    build_section(PM_CFA_DEF_CFA_REGISTER);
    pm_cfi_cie_t cie;
    assert_true(pm_cfi_parse_cie(section + cie_off, &cie));
    assert_int_equal(cie.code_align, 1);
    assert_int_equal(cie.data_align, -8);
    assert_int_equal(cie.ra_reg, PM_REG_RA);
    assert_int_equal(cie.fde_enc, PM_EH_PCREL | PM_EH_SDATA4);
    assert_true(cie.has_z);
    assert_false(cie.signal);
    assert_int_equal(cie.insns_end - cie.insns, 7); /* 5 bytes of rules, 2 nops */
    /* an FDE is no CIE, and a CIE no FDE */
    assert_false(pm_cfi_parse_cie(section + fde_off[0], &cie));
    pm_cfi_fde_t f;
    assert_false(pm_cfi_parse_fde(section + cie_off, 0, &f));
    /* a version the decoder does not know */
    section[cie_off + 8] = 2;
    assert_false(pm_cfi_parse_cie(section + cie_off, &cie));
    assert_false(pm_cfi_parse_fde(section + fde_off[0], 0, &f));
}

static void test_cfi_parses_fde(void **state)
{
    (void)state;
    build_section(PM_CFA_DEF_CFA_REGISTER);
    pm_cfi_fde_t f;
    for (unsigned i = 0; i < 2; i++) {
        assert_true(pm_cfi_parse_fde(section + fde_off[i], 0, &f));
        assert_int_equal(f.pc_begin, code_at(i));
        assert_int_equal(f.pc_end, code_at(i) + (i == 0 ? 0x40 : 0x20));
        assert_int_equal(f.cie.data_align, -8);
    }
    /* the terminator opens no record */
    pm_cfi_reader_t r;
    bool is64;
    size_t len = build_section(PM_CFA_DEF_CFA_REGISTER);
    assert_null(pm_cfi_open_record(section + len - 4, &r, &is64));
    assert_ptr_equal(pm_cfi_open_record(section + fde_off[0], &r, &is64), section + fde_off[1]);
    assert_false(is64);
}

static void rule_at(uintptr_t pc, pm_cfi_frame_rule_t *r)
{
    pm_cfi_fde_t f;
    assert_true(pm_cfi_parse_fde(section + fde_off[pc >= code_at(1)], 0, &f));
    memset(r, 0xa5, sizeof *r);
    pm_cfi_rule_from_fde(pc, &f, 0, r);
}

static void test_cfi_rules_by_row(void **state)
{
    (void)state;
    build_section(PM_CFA_DEF_CFA_REGISTER);
    pm_cfi_frame_rule_t r;
    rule_at(code_at(0), &r); /* the CIE's rules */
    assert_int_equal(r.result, PM_STEP_OK);
    assert_int_equal(r.cfa_reg, PM_REG_RSP);
    assert_int_equal(r.cfa_off, 8);
    assert_int_equal(r.ra.kind, PM_RULE_OFFSET);
    assert_int_equal(r.ra.off, -8);
    assert_int_equal(r.rbp.kind, PM_RULE_SAME);
    rule_at(code_at(0) + 1, &r); /* after push %rbp */
    assert_int_equal(r.result, PM_STEP_OK);
    assert_int_equal(r.cfa_reg, PM_REG_RSP);
    assert_int_equal(r.cfa_off, 16);
    assert_int_equal(r.rbp.kind, PM_RULE_OFFSET);
    assert_int_equal(r.rbp.off, -16);
    rule_at(code_at(0) + 3, &r); /* still that row */
    assert_int_equal(r.cfa_reg, PM_REG_RSP);
    for (uintptr_t pc = code_at(0) + 4; pc < code_at(0) + 0x40; pc += 0x1b) { /* after mov %rsp,%rbp */
        rule_at(pc, &r);
        assert_int_equal(r.result, PM_STEP_OK);
        assert_int_equal(r.cfa_reg, PM_REG_RBP);
        assert_int_equal(r.cfa_off, 16);
        assert_int_equal(r.ra.off, -8);
        assert_int_equal(r.rbp.off, -16);
    }
    rule_at(code_at(1), &r); /* RA undefined: the outermost frame */
    assert_int_equal(r.result, PM_STEP_END);
}

static void test_cfi_rejects_what_it_cannot_follow(void **state)
{
    (void)state;
    pm_cfi_frame_rule_t r;
    /* a CFA on a register the walk does not track (%rbx) */
    build_section(PM_CFA_DEF_CFA_REGISTER);
    section[fde_off[0] + 4 + 4 + 4 + 4 + 1 + 7] = 3;
    rule_at(code_at(0) + 8, &r);
    assert_int_equal(r.result, PM_STEP_FAIL);
    rule_at(code_at(0) + 1, &r); /* rows before it still decode */
    assert_int_equal(r.result, PM_STEP_OK);
    /* an opcode whose operands cannot be skipped fails the FDE */
    build_section(0x3f);
    rule_at(code_at(0) + 8, &r);
    assert_int_equal(r.result, PM_STEP_FAIL);
}

static void test_cfi_identity_follows_the_bytes(void **state)
{
    (void)state;
    build_section(PM_CFA_DEF_CFA_REGISTER);
    uint64_t a = pm_cfi_record_identity(section + fde_off[0]);
    uint64_t b = pm_cfi_record_identity(section + fde_off[1]);
    assert_true(a & 1);
    assert_true(b & 1);
    assert_true(a != b);
    assert_int_equal(pm_cfi_record_identity(section + fde_off[0]), a);
    build_section(PM_CFA_DEF_CFA_REGISTER);
    section[fde_off[0] + 4 + 4 + 4 + 4 + 1 + 2] = 24; /* CFA offset 24, not 16 */
    assert_true(pm_cfi_record_identity(section + fde_off[0]) != a);
    assert_int_equal(pm_cfi_record_identity(section + cie_off), 0); /* a CIE */
}

/* ---- the search table --------------------------------------------------- */
static void test_cfi_builds_and_searches_table(void **state)
{
    (void)state;
    size_t len = build_section(PM_CFA_DEF_CFA_REGISTER);
    uintptr_t lo = code_at(0), hi = code_at(2);
    const uint8_t *hdr = pm_cfi_build_hdr(section, len, lo, hi, hdr_out);
    assert_ptr_equal(hdr, hdr_out + 4);
    uint64_t count;
    memcpy(&count, hdr + 12, 8);
    assert_int_equal(count, 2);
    pm_cfi_fde_t f;
    uintptr_t eh_frame;
    uint32_t hint = UINT32_MAX;
    assert_ptr_equal(pm_cfi_search_fde(code_at(0) + 5, hdr, &eh_frame, &hint), section + fde_off[0]);
    assert_int_equal(hint, 0);
    assert_ptr_equal(pm_cfi_search_fde(code_at(1) + 5, hdr, &eh_frame, &hint), section + fde_off[1]);
    assert_int_equal(hint, 1);
    /* a stale hint is checked, not trusted */
    hint = 1;
    assert_ptr_equal(pm_cfi_search_fde(code_at(0), hdr, &eh_frame, &hint), section + fde_off[0]);
    assert_null(pm_cfi_search_fde(code_at(0) - 1, hdr, &eh_frame, &hint));
    assert_true(pm_cfi_find_fde(code_at(0) + 0x3f, hdr, &f));
    assert_int_equal(f.pc_begin, code_at(0));
    assert_true(pm_cfi_find_fde(code_at(1), hdr, &f));
    assert_int_equal(f.pc_begin, code_at(1));
    /* in the gap after FDE 1's 0x20 bytes, and below the first */
    assert_false(pm_cfi_find_fde(code_at(1) + 0x20, hdr, &f));
    assert_false(pm_cfi_find_fde(code_at(0) - 1, hdr, &f));
    /* FDEs outside [lo, hi) stay out of the table */
    hdr = pm_cfi_build_hdr(section, len, code_at(1), hi, hdr_out);
    memcpy(&count, hdr + 12, 8);
    assert_int_equal(count, 1);
    assert_false(pm_cfi_find_fde(code_at(0) + 5, hdr, &f));
    assert_true(pm_cfi_find_fde(code_at(1) + 5, hdr, &f));
}

/* The table comes out sorted whatever the order of the FDEs. */
static void test_cfi_table_is_sorted(void **state)
{
    (void)state;
    size_t len = build_section(PM_CFA_DEF_CFA_REGISTER);
    /* swap the two FDEs' code: FDE 0 now describes the higher range */
    int32_t rel0, rel1;
    memcpy(&rel0, section + fde_off[0] + 8, 4);
    memcpy(&rel1, section + fde_off[1] + 8, 4);
    rel0 += 0x100, rel1 -= 0x100;
    memcpy(section + fde_off[0] + 8, &rel0, 4);
    memcpy(section + fde_off[1] + 8, &rel1, 4);
    const uint8_t *hdr = pm_cfi_build_hdr(section, len, code_at(0), code_at(2), hdr_out);
    pm_cfi_fde_t f;
    uintptr_t eh_frame;
    uint32_t hint = UINT32_MAX;
    assert_ptr_equal(pm_cfi_search_fde(code_at(0) + 1, hdr, &eh_frame, &hint), section + fde_off[1]);
    assert_ptr_equal(pm_cfi_search_fde(code_at(1) + 1, hdr, &eh_frame, &hint), section + fde_off[0]);
    assert_true(pm_cfi_find_fde(code_at(1) + 0x30, hdr, &f));
    assert_int_equal(f.pc_end, code_at(1) + 0x40);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cfi_parses_cie),
        cmocka_unit_test(test_cfi_parses_fde),
        cmocka_unit_test(test_cfi_rules_by_row),
        cmocka_unit_test(test_cfi_rejects_what_it_cannot_follow),
        cmocka_unit_test(test_cfi_identity_follows_the_bytes),
        cmocka_unit_test(test_cfi_builds_and_searches_table),
        cmocka_unit_test(test_cfi_table_is_sorted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void)
{
    print_message("test_prof_unwind_cfi: x86-64 only, skipped\n");
    return 0;
}

#endif
