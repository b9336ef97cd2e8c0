/* pm_prof_unwind_cfi.h — decoding of .eh_frame / .eh_frame_hdr call frame
 * information (prof_unwind_cfi.c): pure functions over byte buffers, used
 * by the walks (prof_unwind.c), the loaded-object registry (prof_objects.c)
 * and test/unit/test_prof_unwind_cfi.c.  x86-64 only. */
#ifndef PM_PROF_UNWIND_CFI_H
#define PM_PROF_UNWIND_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- DWARF constants (DWARF 4 section 7.23/7.24, LSB "eh_frame") ------- */
#define PM_EH_ABSPTR 0x00
#define PM_EH_ULEB128 0x01
#define PM_EH_UDATA2 0x02
#define PM_EH_UDATA4 0x03
#define PM_EH_UDATA8 0x04
#define PM_EH_SLEB128 0x09
#define PM_EH_SDATA2 0x0a
#define PM_EH_SDATA4 0x0b
#define PM_EH_SDATA8 0x0c
#define PM_EH_PCREL 0x10
#define PM_EH_TEXTREL 0x20
#define PM_EH_DATAREL 0x30
#define PM_EH_FUNCREL 0x40
#define PM_EH_ALIGNED 0x50
#define PM_EH_INDIRECT 0x80
#define PM_EH_OMIT 0xff

#define PM_CFA_ADVANCE_LOC 0x40 /* high two bits */
#define PM_CFA_OFFSET 0x80
#define PM_CFA_RESTORE 0xc0
#define PM_CFA_NOP 0x00
#define PM_CFA_SET_LOC 0x01
#define PM_CFA_ADVANCE_LOC1 0x02
#define PM_CFA_ADVANCE_LOC2 0x03
#define PM_CFA_ADVANCE_LOC4 0x04
#define PM_CFA_OFFSET_EXTENDED 0x05
#define PM_CFA_RESTORE_EXTENDED 0x06
#define PM_CFA_UNDEFINED 0x07
#define PM_CFA_SAME_VALUE 0x08
#define PM_CFA_REGISTER 0x09
#define PM_CFA_REMEMBER_STATE 0x0a
#define PM_CFA_RESTORE_STATE 0x0b
#define PM_CFA_DEF_CFA 0x0c
#define PM_CFA_DEF_CFA_REGISTER 0x0d
#define PM_CFA_DEF_CFA_OFFSET 0x0e
#define PM_CFA_DEF_CFA_EXPRESSION 0x0f
#define PM_CFA_EXPRESSION 0x10
#define PM_CFA_OFFSET_EXTENDED_SF 0x11
#define PM_CFA_DEF_CFA_SF 0x12
#define PM_CFA_DEF_CFA_OFFSET_SF 0x13
#define PM_CFA_VAL_OFFSET 0x14
#define PM_CFA_VAL_OFFSET_SF 0x15
#define PM_CFA_VAL_EXPRESSION 0x16
#define PM_CFA_GNU_ARGS_SIZE 0x2e
#define PM_CFA_GNU_NEGATIVE_OFFSET_EXTENDED 0x2f

/* x86-64 DWARF register numbers. */
#define PM_REG_RBP 6
#define PM_REG_RSP 7
#define PM_REG_RA 16

#define PM_CFA_STATE_DEPTH 8 /* DW_CFA_remember_state nesting we accept */

/* A bounded reader: every read stays inside [p, end); a failed one clears ok. */
typedef struct {
    const uint8_t *p;
    const uint8_t *end;
    bool ok;
} pm_cfi_reader_t;

uint64_t pm_cfi_read_fixed(pm_cfi_reader_t *r, unsigned size);
/* Opens one .eh_frame record (CIE or FDE) at p: sets r to its body (after
 * the length) and returns its end, or NULL for the terminator / bad data. */
const uint8_t *pm_cfi_open_record(const uint8_t *p, pm_cfi_reader_t *r, bool *is64);

typedef struct {
    const uint8_t *insns, *insns_end; /* initial instructions */
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool has_z;
    bool signal; /* 'S': the frame is a signal trampoline */
} pm_cfi_cie_t;

typedef struct {
    pm_cfi_cie_t cie;
    uintptr_t pc_begin, pc_end;
    const uint8_t *insns, *insns_end;
} pm_cfi_fde_t;

bool pm_cfi_parse_cie(const uint8_t *p, pm_cfi_cie_t *cie);
/* Parses the FDE record at p with its CIE; dbase is the base of datarel
 * pointers (the object's .eh_frame_hdr). */
bool pm_cfi_parse_fde(const uint8_t *p, uintptr_t dbase, pm_cfi_fde_t *f);
/* The FDE record that the .eh_frame_hdr search table at hdr gives for pc
 * (the last one starting at or below it; it may not cover pc), NULL when
 * pc is below the first or the object has no usable table; *eh_frame: the
 * start of .eh_frame, for a scan when there is no table.  *hint: the
 * index found last (checked before use), updated. */
const uint8_t *pm_cfi_search_fde(uintptr_t pc, const uint8_t *hdr, uintptr_t *eh_frame, uint32_t *hint);
/* The FDE covering pc through its object's .eh_frame_hdr (by the table,
 * or by a scan of .eh_frame when there is none). */
bool pm_cfi_find_fde(uintptr_t pc, const uint8_t *hdr, pm_cfi_fde_t *f);

/* ---- rules: what it takes to step from a frame to its caller ----------
 * Only the rules needed to step one frame are tracked: the CFA, the return
 * address column and %rbp (the only register besides %rsp that GCC and
 * glibc use to define a CFA).  The caller's %rsp is the CFA by definition. */
enum { PM_RULE_SAME, PM_RULE_UNDEF, PM_RULE_OFFSET, PM_RULE_VAL_OFFSET, PM_RULE_REG, PM_RULE_BAD };

typedef struct {
    uint8_t kind;
    uint8_t reg; /* PM_RULE_REG: the register holding the value */
    int64_t off; /* PM_RULE_OFFSET / PM_RULE_VAL_OFFSET: relative to the CFA */
} pm_cfi_rule_t;

enum { PM_STEP_OK, PM_STEP_END, PM_STEP_FAIL };

typedef struct {
    uint8_t result; /* PM_STEP_OK: apply the rules; PM_STEP_END / PM_STEP_FAIL: stop */
    uint8_t cfa_reg; /* PM_REG_RSP or PM_REG_RBP */
    int64_t cfa_off;
    pm_cfi_rule_t ra, rbp;
} pm_cfi_frame_rule_t;

/* The rule for pc from its FDE f (found in the object whose .eh_frame_hdr
 * is at dbase): the CIE's and the FDE's CFA programs run up to pc. */
void pm_cfi_rule_from_fde(uintptr_t pc, const pm_cfi_fde_t *f, uintptr_t dbase, pm_cfi_frame_rule_t *out);
/* A hash of the bytes of FDE record fde, its CIE's length and head: with
 * the PC and the FDE's address, the rule is a function of them.  0 for a
 * malformed record, else odd. */
uint64_t pm_cfi_record_identity(const uint8_t *fde);
/* Builds an .eh_frame_hdr with its sorted search table (8-byte entries
 * relative to the header) for the FDEs of .eh_frame section [sec, sec + len)
 * whose code lies within [lo, hi), into out (24 + 16 * (len / 8) bytes,
 * 8-aligned): returns the header (out + 4). */
const uint8_t *pm_cfi_build_hdr(const uint8_t *sec, size_t len, uintptr_t lo, uintptr_t hi, uint8_t *out);

#endif
