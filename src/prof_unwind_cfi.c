/* prof_unwind_cfi.c — decodes call frame information: .eh_frame records
 * (CIE, FDE), the .eh_frame_hdr search table, and the CFA programs that
 * give the rule to step from a PC to its caller; and builds a search
 * table for a program linked without one.
 * Pure functions over byte buffers the caller vouches are mapped: every
 * read stays inside the record that holds it (test_prof_unwind_cfi.c).
 * Must never: allocate, lock, make a system call or keep state; it runs
 * inside malloc and in signal handlers.  x86-64 only. */
#include "pm.h"
#include "pm_prof_unwind_cfi.h"

#if defined(__x86_64__)

/* ---- byte reader --------------------------------------------------------
 * The unwind tables belong to loaded objects and are trusted to be mapped,
 * but every read stays inside the CIE/FDE that holds it. */

uint64_t pm_cfi_read_fixed(pm_cfi_reader_t *r, unsigned size)
{
    if (!r->ok || (size_t)(r->end - r->p) < size) {
        r->ok = false;
        return 0;
    }
    uint64_t v = 0;
    switch (size) {
    case 1: v = r->p[0]; break;
    case 2: { uint16_t t; __builtin_memcpy(&t, r->p, 2); v = t; break; }
    case 4: { uint32_t t; __builtin_memcpy(&t, r->p, 4); v = t; break; }
    default: __builtin_memcpy(&v, r->p, 8); break;
    }
    r->p += size;
    return v;
}

/* A LEB128 number; a signed one is sign-extended from bit 6 of its last
 * byte.  Running off the end clears r->ok and reads 0. */
static inline uint64_t read_leb(pm_cfi_reader_t *r, bool is_signed)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (r->ok && r->p < r->end) {
        uint8_t b = *r->p++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) {
            if (is_signed && shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
            return v;
        }
    }
    r->ok = false;
    return 0;
}

static uint64_t read_uleb(pm_cfi_reader_t *r) { return read_leb(r, false); }
static int64_t read_sleb(pm_cfi_reader_t *r) { return (int64_t)read_leb(r, true); }

/* Reads a pointer in DW_EH_PE encoding `enc`.  datarel is relative to
 * `dbase` (the .eh_frame_hdr on x86-64).  Returns false when the encoding
 * is omitted or unsupported (textrel, funcrel). */
static bool read_encoded(pm_cfi_reader_t *r, uint8_t enc, uintptr_t dbase, uintptr_t *out)
{
    if (enc == PM_EH_OMIT || !r->ok) return false;
    if ((enc & 0x70) == PM_EH_ALIGNED) {
        uintptr_t a = ((uintptr_t)r->p + 7) & ~(uintptr_t)7;
        if (a > (uintptr_t)r->end) return r->ok = false;
        r->p = (const uint8_t *)a;
    }
    uintptr_t field = (uintptr_t)r->p;
    uint64_t v;
    switch (enc & 0x0f) {
    case PM_EH_ABSPTR: v = pm_cfi_read_fixed(r, 8); break;
    case PM_EH_ULEB128: v = read_uleb(r); break;
    case PM_EH_UDATA2: v = pm_cfi_read_fixed(r, 2); break;
    case PM_EH_UDATA4: v = pm_cfi_read_fixed(r, 4); break;
    case PM_EH_UDATA8: v = pm_cfi_read_fixed(r, 8); break;
    case PM_EH_SLEB128: v = (uint64_t)read_sleb(r); break;
    case PM_EH_SDATA2: v = (uint64_t)(int64_t)(int16_t)pm_cfi_read_fixed(r, 2); break;
    case PM_EH_SDATA4: v = (uint64_t)(int64_t)(int32_t)pm_cfi_read_fixed(r, 4); break;
    case PM_EH_SDATA8: v = pm_cfi_read_fixed(r, 8); break;
    default: return r->ok = false;
    }
    if (!r->ok) return false;
    switch (enc & 0x70) {
    case 0:
    case PM_EH_ALIGNED: break;
    case PM_EH_PCREL: v += field; break;
    case PM_EH_DATAREL:
        if (!dbase) return r->ok = false;
        v += dbase;
        break;
    default: return r->ok = false; /* textrel, funcrel: not used on x86-64 */
    }
    if (enc & PM_EH_INDIRECT) {
        if (!v || (v & 7)) return r->ok = false;
        v = *(const uintptr_t *)(uintptr_t)v;
    }
    *out = (uintptr_t)v;
    return true;
}

const uint8_t *pm_cfi_open_record(const uint8_t *p, pm_cfi_reader_t *r, bool *is64)
{
    r->p = p;
    r->end = p + 12;
    r->ok = true;
    uint64_t len = pm_cfi_read_fixed(r, 4);
    *is64 = false;
    if (len == 0xffffffffu) {
        len = pm_cfi_read_fixed(r, 8);
        *is64 = true;
    }
    if (!r->ok || len == 0 || len > ((uint64_t)1 << 30)) return NULL;
    const uint8_t *end = r->p + len;
    r->end = end;
    return end;
}

/* ---- CIE / FDE ----------------------------------------------------------- */

bool pm_cfi_parse_cie(const uint8_t *p, pm_cfi_cie_t *cie)
{
    pm_cfi_reader_t r;
    bool is64;
    if (!pm_cfi_open_record(p, &r, &is64)) return false;
    if (pm_cfi_read_fixed(&r, is64 ? 8 : 4) != 0) return false; /* CIE id */
    uint64_t version = pm_cfi_read_fixed(&r, 1);
    if (version != 1 && version != 3 && version != 4) return false;
    const uint8_t *aug = r.p;
    while (r.p < r.end && *r.p) r.p++;
    if (r.p >= r.end) return false;
    r.p++; /* NUL */
    if (aug[0] == 'e' && aug[1] == 'h') return false; /* pre-2.95 GCC */
    if (version == 4) {
        if (pm_cfi_read_fixed(&r, 1) != 8 || pm_cfi_read_fixed(&r, 1) != 0) return false;
    }
    cie->code_align = read_uleb(&r);
    cie->data_align = read_sleb(&r);
    cie->ra_reg = version == 1 ? pm_cfi_read_fixed(&r, 1) : read_uleb(&r);
    cie->fde_enc = PM_EH_ABSPTR;
    cie->has_z = aug[0] == 'z';
    cie->signal = false;
    if (cie->has_z) {
        uint64_t aug_len = read_uleb(&r);
        if (!r.ok || aug_len > (uint64_t)(r.end - r.p)) return false;
        const uint8_t *aug_end = r.p + aug_len;
        pm_cfi_reader_t a = {r.p, aug_end, true};
        for (const uint8_t *s = aug + 1; *s; s++) {
            uintptr_t ignored;
            switch (*s) {
            case 'R': cie->fde_enc = (uint8_t)pm_cfi_read_fixed(&a, 1); break;
            case 'L': pm_cfi_read_fixed(&a, 1); break;
            case 'P': {
                /* Skip the personality pointer: decode it without applying
                 * its base or indirection (nothing here is dereferenced). */
                uint8_t enc = (uint8_t)pm_cfi_read_fixed(&a, 1);
                uint8_t raw = (enc & 0x70) == PM_EH_ALIGNED ? PM_EH_ALIGNED : (enc & 0x0f);
                read_encoded(&a, raw, 0, &ignored);
                break;
            }
            case 'S': cie->signal = true; break;
            case 'B': /* AArch64 BTI, no data */
            case 'G': break; /* AArch64 MTE, no data */
            default: return false; /* unknown: cannot tell where 'R' is */
            }
            if (!a.ok) return false;
        }
        r.p = aug_end;
    } else if (aug[0]) {
        return false;
    }
    if (!r.ok || cie->code_align == 0 || cie->ra_reg != PM_REG_RA) return false;
    cie->insns = r.p;
    cie->insns_end = r.end;
    return true;
}

/* Parses the FDE at p and the CIE it points to; fails if p is a CIE. */
bool pm_cfi_parse_fde(const uint8_t *p, uintptr_t dbase, pm_cfi_fde_t *f)
{
    pm_cfi_reader_t r;
    bool is64;
    if (!pm_cfi_open_record(p, &r, &is64)) return false;
    const uint8_t *id_field = r.p;
    uint64_t cie_off = pm_cfi_read_fixed(&r, is64 ? 8 : 4);
    if (!r.ok || cie_off == 0 || cie_off > (uintptr_t)id_field) return false;
    if (!pm_cfi_parse_cie(id_field - cie_off, &f->cie)) return false;
    uintptr_t begin, range;
    if (!read_encoded(&r, f->cie.fde_enc, dbase, &begin)) return false;
    if (!read_encoded(&r, f->cie.fde_enc & 0x0f, 0, &range)) return false;
    if (f->cie.has_z) {
        uint64_t aug_len = read_uleb(&r);
        if (!r.ok || aug_len > (uint64_t)(r.end - r.p)) return false;
        r.p += aug_len;
    }
    f->pc_begin = begin;
    f->pc_end = begin + range;
    f->insns = r.p;
    f->insns_end = r.end;
    return true;
}

/* Field i of a .eh_frame_hdr search table (datarel, 4 or 8 bytes wide). */
static inline uintptr_t table_field(const uint8_t *table, uintptr_t i, unsigned width, bool sign,
                                    uintptr_t dbase)
{
    if (width == 4) {
        uint32_t v;
        __builtin_memcpy(&v, table + i * 4, 4);
        return dbase + (sign ? (uintptr_t)(intptr_t)(int32_t)v : (uintptr_t)v);
    }
    uint64_t v;
    __builtin_memcpy(&v, table + i * 8, 8);
    return dbase + (uintptr_t)v;
}

const uint8_t *pm_cfi_search_fde(uintptr_t pc, const uint8_t *hdr, uintptr_t *eh_frame,
                                 uint32_t *hint)
{
    uintptr_t dbase = (uintptr_t)hdr, count = 0;
    const uint8_t *table;
    unsigned width = 0;
    bool sign = true;
    *eh_frame = 0;
    if (hdr[0] != 1) return NULL;
    if (hdr[1] == (PM_EH_PCREL | PM_EH_SDATA4) && hdr[2] == PM_EH_UDATA4 &&
        hdr[3] == (PM_EH_DATAREL | PM_EH_SDATA4)) {
        /* what GNU ld and lld write, decoded without the reader (the
         * unwinder's hot path): 4-byte fields, entries relative to hdr */
        uint32_t n;
        __builtin_memcpy(&n, hdr + 8, 4);
        count = n;
        table = hdr + 12;
        width = 4;
    } else {
        uint8_t frame_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
        pm_cfi_reader_t r = {hdr + 4, hdr + 4 + 16 + 16, true};
        if (!read_encoded(&r, frame_enc, dbase, eh_frame)) return NULL;
        bool have_table = count_enc != PM_EH_OMIT && table_enc != PM_EH_OMIT &&
                          read_encoded(&r, count_enc, dbase, &count);
        sign = (table_enc & 0x08) != 0;
        if (have_table && (table_enc & 0x70) == PM_EH_DATAREL && !(table_enc & PM_EH_INDIRECT)) {
            switch (table_enc & 0x0f) {
            case PM_EH_UDATA4:
            case PM_EH_SDATA4: width = 4; break;
            case PM_EH_UDATA8:
            case PM_EH_SDATA8: width = 8; break;
            default: break;
            }
        }
        if (!width) return NULL; /* the caller scans from *eh_frame */
        *eh_frame = 0;
        table = r.p;
    }
    /* Sorted (initial location, FDE address) pairs: find the last entry
     * whose initial location is <= pc, trying the hint first. */
    if (count == 0 || table_field(table, 0, width, sign, dbase) > pc) return NULL;
    uintptr_t lo = 0, hi = count, h = *hint;
    if (h < count && table_field(table, 2 * h, width, sign, dbase) <= pc &&
        (h + 1 == count || table_field(table, 2 * (h + 1), width, sign, dbase) > pc))
        lo = hi = h;
    while (hi - lo > 1) {
        uintptr_t mid = lo + (hi - lo) / 2;
        if (table_field(table, 2 * mid, width, sign, dbase) <= pc)
            lo = mid;
        else
            hi = mid;
    }
    *hint = (uint32_t)lo;
    return (const uint8_t *)table_field(table, 2 * lo + 1, width, sign, dbase);
}

/* Finds the FDE covering pc through its object's .eh_frame_hdr, whose
 * address is also the base of datarel pointers. */
bool pm_cfi_find_fde(uintptr_t pc, const uint8_t *hdr, pm_cfi_fde_t *f)
{
    uintptr_t dbase = (uintptr_t)hdr, eh_frame;
    uint32_t hint = UINT32_MAX;
    const uint8_t *found = pm_cfi_search_fde(pc, hdr, &eh_frame, &hint);
    if (found) return pm_cfi_parse_fde(found, dbase, f) && pc >= f->pc_begin && pc < f->pc_end;
    if (!eh_frame) return false;
    /* No usable search table (rare: the linker could not sort it): scan
     * .eh_frame up to its zero terminator. */
    const uint8_t *p = (const uint8_t *)eh_frame;
    for (;;) {
        pm_cfi_reader_t rec;
        bool is64;
        const uint8_t *end = pm_cfi_open_record(p, &rec, &is64);
        if (!end) return false;
        uint64_t id = pm_cfi_read_fixed(&rec, is64 ? 8 : 4);
        if (rec.ok && id != 0 && pm_cfi_parse_fde(p, dbase, f) && pc >= f->pc_begin && pc < f->pc_end)
            return true;
        p = end;
    }
}

/* ---- CFA program ---------------------------------------------------------
 * Only the rules needed to step one frame are tracked: the CFA, the return
 * address column and %rbp (the only register besides %rsp that GCC and
 * glibc use to define a CFA).  The caller's %rsp is the CFA by definition. */

typedef struct {
    uint64_t cfa_reg;
    int64_t cfa_off;
    bool cfa_bad; /* an expression: not evaluated, the walk stops */
    pm_cfi_rule_t rbp, ra;
} cfa_state_t;

static pm_cfi_rule_t *rule_of(cfa_state_t *s, const pm_cfi_cie_t *cie, uint64_t reg)
{
    if (reg == cie->ra_reg) return &s->ra;
    if (reg == PM_REG_RBP) return &s->rbp;
    return NULL; /* a register the walk does not need */
}

static void set_rule(cfa_state_t *s, const pm_cfi_cie_t *cie, uint64_t reg, uint8_t kind, int64_t off)
{
    pm_cfi_rule_t *rule = rule_of(s, cie, reg);
    if (!rule) return;
    rule->kind = kind;
    rule->off = off;
    rule->reg = 0;
}

/* The factored offset operand of the *_offset_extended and val_offset ops:
 * signed for the _sf forms, negated for the GNU one, scaled by data_align. */
static int64_t read_factored_offset(pm_cfi_reader_t *r, const pm_cfi_cie_t *cie, uint8_t op)
{
    if (op == PM_CFA_OFFSET_EXTENDED_SF || op == PM_CFA_VAL_OFFSET_SF) return read_sleb(r) * cie->data_align;
    int64_t u = (int64_t)read_uleb(r);
    return (op == PM_CFA_GNU_NEGATIVE_OFFSET_EXTENDED ? -u : u) * cie->data_align;
}

/* DW_CFA_restore(_extended): back to the CIE's initial rule for reg, or
 * same-value while the CIE's own instructions run (init NULL). */
static void restore_rule(cfa_state_t *s, const pm_cfi_cie_t *cie, const cfa_state_t *init, uint64_t reg)
{
    pm_cfi_rule_t *rule = rule_of(s, cie, reg);
    const pm_cfi_rule_t *orig = init ? rule_of((cfa_state_t *)init, cie, reg) : NULL;
    if (rule) *rule = orig ? *orig : (pm_cfi_rule_t){PM_RULE_SAME, 0, 0};
}

/* Runs CFA instructions [p, end) starting at location loc, stopping before
 * the first row that starts above target.  init is the state after the
 * CIE's initial instructions (NULL while running those). */
static bool run_cfa(const uint8_t *p, const uint8_t *end, const pm_cfi_cie_t *cie, uintptr_t loc,
                    uintptr_t target, uintptr_t dbase, cfa_state_t *s, const cfa_state_t *init)
{
    cfa_state_t saved[PM_CFA_STATE_DEPTH];
    int depth = 0;
    pm_cfi_reader_t r = {p, end, true};
    while (r.ok && r.p < r.end) {
        uint8_t op = *r.p++;
        uint64_t reg, delta;
        int64_t off;
        switch (op & 0xc0) {
        case PM_CFA_ADVANCE_LOC:
            loc += (uintptr_t)(op & 0x3f) * cie->code_align;
            if (loc > target) return true;
            continue;
        case PM_CFA_OFFSET:
            off = (int64_t)read_uleb(&r) * cie->data_align;
            set_rule(s, cie, op & 0x3f, PM_RULE_OFFSET, off);
            continue;
        case PM_CFA_RESTORE:
            restore_rule(s, cie, init, op & 0x3f);
            continue;
        default: break;
        }
        switch (op) {
        case PM_CFA_NOP: break;
        case PM_CFA_SET_LOC: {
            uintptr_t to;
            if (!read_encoded(&r, cie->fde_enc, dbase, &to)) return false;
            loc = to;
            if (loc > target) return true;
            break;
        }
        case PM_CFA_ADVANCE_LOC1:
        case PM_CFA_ADVANCE_LOC2:
        case PM_CFA_ADVANCE_LOC4:
            delta = pm_cfi_read_fixed(&r, op == PM_CFA_ADVANCE_LOC1 ? 1 : op == PM_CFA_ADVANCE_LOC2 ? 2 : 4);
            loc += (uintptr_t)delta * cie->code_align;
            if (r.ok && loc > target) return true;
            break;
        case PM_CFA_OFFSET_EXTENDED:
        case PM_CFA_OFFSET_EXTENDED_SF:
        case PM_CFA_GNU_NEGATIVE_OFFSET_EXTENDED:
        case PM_CFA_VAL_OFFSET:
        case PM_CFA_VAL_OFFSET_SF:
            reg = read_uleb(&r);
            off = read_factored_offset(&r, cie, op);
            set_rule(s, cie, reg,
                     op == PM_CFA_VAL_OFFSET || op == PM_CFA_VAL_OFFSET_SF ? PM_RULE_VAL_OFFSET
                                                                           : PM_RULE_OFFSET,
                     off);
            break;
        case PM_CFA_RESTORE_EXTENDED:
            restore_rule(s, cie, init, read_uleb(&r));
            break;
        case PM_CFA_UNDEFINED:
            set_rule(s, cie, read_uleb(&r), PM_RULE_UNDEF, 0);
            break;
        case PM_CFA_SAME_VALUE:
            set_rule(s, cie, read_uleb(&r), PM_RULE_SAME, 0);
            break;
        case PM_CFA_REGISTER: {
            reg = read_uleb(&r);
            uint64_t from = read_uleb(&r);
            pm_cfi_rule_t *rule = rule_of(s, cie, reg);
            if (rule) {
                bool known = from == PM_REG_RBP || from == PM_REG_RSP;
                *rule = (pm_cfi_rule_t){known ? PM_RULE_REG : PM_RULE_BAD, (uint8_t)from, 0};
            }
            break;
        }
        case PM_CFA_REMEMBER_STATE:
            if (depth == PM_CFA_STATE_DEPTH) return false;
            saved[depth++] = *s;
            break;
        case PM_CFA_RESTORE_STATE:
            if (depth == 0) return false;
            *s = saved[--depth];
            break;
        case PM_CFA_DEF_CFA:
            s->cfa_reg = read_uleb(&r);
            s->cfa_off = (int64_t)read_uleb(&r);
            s->cfa_bad = false;
            break;
        case PM_CFA_DEF_CFA_SF:
            s->cfa_reg = read_uleb(&r);
            s->cfa_off = read_sleb(&r) * cie->data_align;
            s->cfa_bad = false;
            break;
        case PM_CFA_DEF_CFA_REGISTER:
            s->cfa_reg = read_uleb(&r);
            s->cfa_bad = false;
            break;
        case PM_CFA_DEF_CFA_OFFSET:
            s->cfa_off = (int64_t)read_uleb(&r);
            break;
        case PM_CFA_DEF_CFA_OFFSET_SF:
            s->cfa_off = read_sleb(&r) * cie->data_align;
            break;
        case PM_CFA_DEF_CFA_EXPRESSION:
            delta = read_uleb(&r);
            if (!r.ok || delta > (uint64_t)(r.end - r.p)) return false;
            r.p += delta;
            s->cfa_bad = true;
            break;
        case PM_CFA_EXPRESSION:
        case PM_CFA_VAL_EXPRESSION:
            reg = read_uleb(&r);
            delta = read_uleb(&r);
            if (!r.ok || delta > (uint64_t)(r.end - r.p)) return false;
            r.p += delta;
            set_rule(s, cie, reg, PM_RULE_BAD, 0);
            break;
        case PM_CFA_GNU_ARGS_SIZE:
            read_uleb(&r);
            break;
        default:
            return false; /* unknown opcode: its operands cannot be skipped */
        }
    }
    return r.ok;
}

/* ---- the rule for one PC ------------------------------------------------ */

void pm_cfi_rule_from_fde(uintptr_t pc, const pm_cfi_fde_t *fp, uintptr_t dbase, pm_cfi_frame_rule_t *out)
{
    const pm_cfi_fde_t f = *fp;
    out->result = PM_STEP_FAIL;
    cfa_state_t init = {PM_REG_RSP, 8, false, {PM_RULE_SAME, 0, 0}, {PM_RULE_UNDEF, 0, 0}};
    if (!run_cfa(f.cie.insns, f.cie.insns_end, &f.cie, f.pc_begin, UINTPTR_MAX, dbase, &init, NULL))
        return;
    cfa_state_t s = init;
    if (!run_cfa(f.insns, f.insns_end, &f.cie, f.pc_begin, pc, dbase, &s, &init)) return;
    if (s.ra.kind == PM_RULE_UNDEF) {
        out->result = PM_STEP_END; /* outermost frame: _start, thread start */
        return;
    }
    if (s.cfa_bad || (s.cfa_reg != PM_REG_RSP && s.cfa_reg != PM_REG_RBP)) return;
    if (s.ra.kind != PM_RULE_OFFSET && s.ra.kind != PM_RULE_VAL_OFFSET && s.ra.kind != PM_RULE_REG) return;
    out->result = PM_STEP_OK;
    out->cfa_reg = (uint8_t)s.cfa_reg;
    out->cfa_off = s.cfa_off;
    out->ra = s.ra;
    out->rbp = s.rbp;
}


/* The CIE's first 8 bytes after its id are its version and augmentation:
 * the CIE is shared and rarely the only thing that changed. */
uint64_t pm_cfi_record_identity(const uint8_t *fde)
{
    pm_cfi_reader_t r, c;
    bool is64, cie64;
    const uint8_t *end = pm_cfi_open_record(fde, &r, &is64);
    if (!end) return 0;
    const uint8_t *id_field = r.p;
    uint64_t cie_off = pm_cfi_read_fixed(&r, is64 ? 8 : 4);
    if (!r.ok || cie_off == 0 || cie_off > (uintptr_t)id_field) return 0;
    const uint8_t *cie = id_field - cie_off;
    const uint8_t *cie_end = pm_cfi_open_record(cie, &c, &cie64);
    if (!cie_end) return 0;
    uint64_t head;
    __builtin_memcpy(&head, c.p + (cie64 ? 8 : 4), 8);
    return pm_hash_bytes(fde, (size_t)(end - fde), (uint64_t)(cie_end - cie) << 32 ^ head) | 1;
}


/* Sorts the table's (initial location, FDE) pairs by location (heapsort:
 * no allocation, no recursion). */
static void sort_pairs(int64_t *t, size_t n)
{
    if (n < 2) return;
    for (size_t end = n, start = n / 2;;) {
        size_t root;
        if (start > 0) {
            root = --start;
        } else {
            if (--end == 0) return;
            int64_t a = t[0], b = t[1];
            t[0] = t[2 * end];
            t[1] = t[2 * end + 1];
            t[2 * end] = a;
            t[2 * end + 1] = b;
            root = 0;
        }
        for (size_t child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && t[2 * (child + 1)] > t[2 * child]) child++;
            if (t[2 * root] >= t[2 * child]) break;
            int64_t a = t[2 * root], b = t[2 * root + 1];
            t[2 * root] = t[2 * child];
            t[2 * root + 1] = t[2 * child + 1];
            t[2 * child] = a;
            t[2 * child + 1] = b;
        }
    }
}

/* Builds the search table for a program linked without --eh-frame-hdr
 * (gcc -static): a record takes at least 8 bytes, so len / 8 pairs are
 * enough; 20 bytes of header at out + 4, so that the table starts
 * 8-aligned. */
const uint8_t *pm_cfi_build_hdr(const uint8_t *sec, size_t len, uintptr_t lo, uintptr_t hi, uint8_t *out)
{
    const uint8_t *sec_end = sec + len;
    size_t n = len / 8;
    uint8_t *h = out + 4;
    int64_t *table = (int64_t *)(out + 24);
    uintptr_t dbase = (uintptr_t)h; /* entries are relative to the header */
    size_t m = 0;
    /* a length field takes up to 12 bytes; only the 4-byte terminator is
     * shorter */
    for (const uint8_t *p = sec; p + 12 <= sec_end && m < n;) {
        pm_cfi_reader_t r;
        bool is64;
        const uint8_t *end = pm_cfi_open_record(p, &r, &is64);
        if (!end || end > sec_end) break;
        const uint8_t *id_field = r.p;
        uint64_t cie_off = pm_cfi_read_fixed(&r, is64 ? 8 : 4);
        pm_cfi_fde_t fde;
        if (r.ok && cie_off != 0 && cie_off <= (uintptr_t)(id_field - sec) &&
            pm_cfi_parse_fde(p, dbase, &fde) && fde.pc_begin >= lo && fde.pc_end > fde.pc_begin &&
            fde.pc_end <= hi) {
            table[2 * m] = (int64_t)(fde.pc_begin - dbase);
            table[2 * m + 1] = (int64_t)((uintptr_t)p - dbase);
            m++;
        }
        p = end;
    }
    sort_pairs(table, m);
    h[0] = 1;
    h[1] = PM_EH_ABSPTR;                  /* eh_frame_ptr */
    h[2] = PM_EH_UDATA8;                  /* fde_count */
    h[3] = PM_EH_DATAREL | PM_EH_SDATA8;  /* table entries */
    uint64_t ptr = (uintptr_t)sec, count = m;
    __builtin_memcpy(h + 4, &ptr, 8);
    __builtin_memcpy(h + 12, &count, 8);
    return h;
}

#endif /* __x86_64__ */
