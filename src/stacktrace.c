/* stacktrace.c — captures the allocating call stack for the heap profiler.
 * Owns: the unwinder (DWARF .eh_frame CFI on x86-64, %rbp chain as the
 * alternative) and the process-wide unwind mode.
 * Must never: call malloc or anything that may (stdio, dladdr, backtrace,
 * dl_iterate_phdr, libgcc's unwinder), nor read a stack slot outside the
 * bounds it checked; it runs inside malloc and in signal handlers.
 * Locks: none.  Objects are found with _dl_find_object (lock-free); the
 * rule cache is lock-free.  Only x86-64 has the DWARF walk; AArch64 always
 * walks frame records and other targets capture nothing. */
#include "pm.h"
#include "pm_elf.h"
#include "pm_stacktrace.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <time.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* No frame is further than this above the capturing frame. */
#define PM_STACK_SPAN ((uintptr_t)64 << 20)

static _Atomic int unwind_mode = PM_UNWIND_DWARF;

void pm_stacktrace_set_mode(int mode)
{
    pm_relaxed_store(&unwind_mode, mode == PM_UNWIND_FP ? PM_UNWIND_FP : PM_UNWIND_DWARF);
}

int pm_stacktrace_get_mode(void)
{
    return pm_relaxed_load(&unwind_mode);
}

#if defined(__x86_64__) || defined(__aarch64__)

/* Set by the dynamic loader (or by a static binary's _start) to the initial
 * stack pointer of the main thread: no frame of that thread lies above it. */
extern void *__libc_stack_end;

/* An upper bound for the frames above sp, never more than PM_STACK_SPAN:
 *  - a glibc thread keeps its descriptor (pthread_self()) at the top of its
 *    stack, above every frame, also for stacks from pthread_attr_setstack;
 *  - the main thread's frames lie below __libc_stack_end (the address of
 *    argc), and the page that holds it is mapped.
 * On those stacks all of [sp, top) is mapped, so a corrupt frame chain
 * cannot fault.  On other stacks (makecontext, sigaltstack) the bound can
 * only limit the damage: the walk relies on the monotonic CFA check. */
static uintptr_t stack_top(uintptr_t sp)
{
    uintptr_t top = sp + PM_STACK_SPAN;
    if (top < sp) top = UINTPTR_MAX & ~(uintptr_t)7;
    uintptr_t self = (uintptr_t)pthread_self();
    if (self > sp && self < top) return self;
    uintptr_t end = (uintptr_t)__libc_stack_end;
    if (end > sp && end < top) {
        uintptr_t page_end = (end | 4095) + 1;
        return page_end < top ? page_end : top;
    }
    return top;
}

/* A readable, aligned word of the running stack? */
static inline bool slot_ok(uintptr_t addr, uintptr_t lo, uintptr_t hi)
{
    return (addr & 7) == 0 && addr >= lo && addr < hi && hi - addr >= 8;
}

static inline uintptr_t load_slot(uintptr_t addr)
{
    return *(const uintptr_t *)addr;
}

/* Follows the frame-pointer chain from frame record fp: [fp] is the caller's
 * frame pointer, [fp + 8] the return address.  Records must strictly rise. */
static int walk_fp(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *pcs, int max, int skip)
{
    int n = 0;
    while (n < max) {
        if (!slot_ok(fp, lo, hi) || !slot_ok(fp + 8, lo, hi)) break;
        uintptr_t next = load_slot(fp);
        uintptr_t ra = load_slot(fp + 8);
        if (ra < 4096) break;
        if (skip > 0)
            skip--;
        else
            pcs[n++] = ra;
        if (next <= fp) break;
        fp = next;
    }
    return n;
}

#endif /* x86-64 || aarch64 */

#if defined(__x86_64__)

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

/* ---- byte reader --------------------------------------------------------
 * The unwind tables belong to loaded objects and are trusted to be mapped,
 * but every read stays inside the CIE/FDE that holds it. */
typedef struct {
    const uint8_t *p;
    const uint8_t *end;
    bool ok;
} reader_t;

static uint64_t read_fixed(reader_t *r, unsigned size)
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

static uint64_t read_uleb(reader_t *r)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (r->ok && r->p < r->end) {
        uint8_t b = *r->p++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) return v;
    }
    r->ok = false;
    return 0;
}

static int64_t read_sleb(reader_t *r)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (r->ok && r->p < r->end) {
        uint8_t b = *r->p++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) {
            if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
            return (int64_t)v;
        }
    }
    r->ok = false;
    return 0;
}

/* Reads a pointer in DW_EH_PE encoding `enc`.  datarel is relative to
 * `dbase` (the .eh_frame_hdr on x86-64).  Returns false when the encoding
 * is omitted or unsupported (textrel, funcrel). */
static bool read_encoded(reader_t *r, uint8_t enc, uintptr_t dbase, uintptr_t *out)
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
    case PM_EH_ABSPTR: v = read_fixed(r, 8); break;
    case PM_EH_ULEB128: v = read_uleb(r); break;
    case PM_EH_UDATA2: v = read_fixed(r, 2); break;
    case PM_EH_UDATA4: v = read_fixed(r, 4); break;
    case PM_EH_UDATA8: v = read_fixed(r, 8); break;
    case PM_EH_SLEB128: v = (uint64_t)read_sleb(r); break;
    case PM_EH_SDATA2: v = (uint64_t)(int64_t)(int16_t)read_fixed(r, 2); break;
    case PM_EH_SDATA4: v = (uint64_t)(int64_t)(int32_t)read_fixed(r, 4); break;
    case PM_EH_SDATA8: v = read_fixed(r, 8); break;
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

/* Opens one .eh_frame record (CIE or FDE) at p: sets r to its body (after
 * the length) and returns its end, or NULL for the terminator / bad data. */
static const uint8_t *open_record(const uint8_t *p, reader_t *r, bool *is64)
{
    r->p = p;
    r->end = p + 12;
    r->ok = true;
    uint64_t len = read_fixed(r, 4);
    *is64 = false;
    if (len == 0xffffffffu) {
        len = read_fixed(r, 8);
        *is64 = true;
    }
    if (!r->ok || len == 0 || len > ((uint64_t)1 << 30)) return NULL;
    const uint8_t *end = r->p + len;
    r->end = end;
    return end;
}

/* ---- CIE / FDE ----------------------------------------------------------- */
typedef struct {
    const uint8_t *insns, *insns_end; /* initial instructions */
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool has_z;
    bool signal; /* 'S': the frame is a signal trampoline */
} cie_t;

typedef struct {
    cie_t cie;
    uintptr_t pc_begin, pc_end;
    const uint8_t *insns, *insns_end;
} fde_t;

static bool parse_cie(const uint8_t *p, cie_t *cie)
{
    reader_t r;
    bool is64;
    if (!open_record(p, &r, &is64)) return false;
    if (read_fixed(&r, is64 ? 8 : 4) != 0) return false; /* CIE id */
    uint64_t version = read_fixed(&r, 1);
    if (version != 1 && version != 3 && version != 4) return false;
    const uint8_t *aug = r.p;
    while (r.p < r.end && *r.p) r.p++;
    if (r.p >= r.end) return false;
    r.p++; /* NUL */
    if (aug[0] == 'e' && aug[1] == 'h') return false; /* pre-2.95 GCC */
    if (version == 4) {
        if (read_fixed(&r, 1) != 8 || read_fixed(&r, 1) != 0) return false;
    }
    cie->code_align = read_uleb(&r);
    cie->data_align = read_sleb(&r);
    cie->ra_reg = version == 1 ? read_fixed(&r, 1) : read_uleb(&r);
    cie->fde_enc = PM_EH_ABSPTR;
    cie->has_z = aug[0] == 'z';
    cie->signal = false;
    if (cie->has_z) {
        uint64_t aug_len = read_uleb(&r);
        if (!r.ok || aug_len > (uint64_t)(r.end - r.p)) return false;
        const uint8_t *aug_end = r.p + aug_len;
        reader_t a = {r.p, aug_end, true};
        for (const uint8_t *s = aug + 1; *s; s++) {
            uintptr_t ignored;
            switch (*s) {
            case 'R': cie->fde_enc = (uint8_t)read_fixed(&a, 1); break;
            case 'L': read_fixed(&a, 1); break;
            case 'P': {
                /* Skip the personality pointer: decode it without applying
                 * its base or indirection (nothing here is dereferenced). */
                uint8_t enc = (uint8_t)read_fixed(&a, 1);
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
static bool parse_fde(const uint8_t *p, uintptr_t dbase, fde_t *f)
{
    reader_t r;
    bool is64;
    if (!open_record(p, &r, &is64)) return false;
    const uint8_t *id_field = r.p;
    uint64_t cie_off = read_fixed(&r, is64 ? 8 : 4);
    if (!r.ok || cie_off == 0 || cie_off > (uintptr_t)id_field) return false;
    if (!parse_cie(id_field - cie_off, &f->cie)) return false;
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

/* The FDE record that the .eh_frame_hdr search table gives for pc (the
 * last one starting at or below it; it may not cover pc), NULL when pc is
 * below the first or the object has no usable table; *eh_frame: the
 * start of .eh_frame, for a scan when there is no table. */
static const uint8_t *search_fde(uintptr_t pc, const uint8_t *hdr, uintptr_t *eh_frame,
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
        reader_t r = {hdr + 4, hdr + 4 + 16 + 16, true};
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
static bool find_fde(uintptr_t pc, const uint8_t *hdr, fde_t *f)
{
    uintptr_t dbase = (uintptr_t)hdr, eh_frame;
    uint32_t hint = UINT32_MAX;
    const uint8_t *found = search_fde(pc, hdr, &eh_frame, &hint);
    if (found) return parse_fde(found, dbase, f) && pc >= f->pc_begin && pc < f->pc_end;
    if (!eh_frame) return false;
    /* No usable search table (rare: the linker could not sort it): scan
     * .eh_frame up to its zero terminator. */
    const uint8_t *p = (const uint8_t *)eh_frame;
    for (;;) {
        reader_t rec;
        bool is64;
        const uint8_t *end = open_record(p, &rec, &is64);
        if (!end) return false;
        uint64_t id = read_fixed(&rec, is64 ? 8 : 4);
        if (rec.ok && id != 0 && parse_fde(p, dbase, f) && pc >= f->pc_begin && pc < f->pc_end)
            return true;
        p = end;
    }
}

/* ---- CFA program ---------------------------------------------------------
 * Only the rules needed to step one frame are tracked: the CFA, the return
 * address column and %rbp (the only register besides %rsp that GCC and
 * glibc use to define a CFA).  The caller's %rsp is the CFA by definition. */
enum { RULE_SAME, RULE_UNDEF, RULE_OFFSET, RULE_VAL_OFFSET, RULE_REG, RULE_BAD };

typedef struct {
    uint8_t kind;
    uint8_t reg; /* RULE_REG: the register holding the value */
    int64_t off; /* RULE_OFFSET / RULE_VAL_OFFSET: relative to the CFA */
} rule_t;

typedef struct {
    uint64_t cfa_reg;
    int64_t cfa_off;
    bool cfa_bad; /* an expression: not evaluated, the walk stops */
    rule_t rbp, ra;
} cfa_state_t;

static rule_t *rule_of(cfa_state_t *s, const cie_t *cie, uint64_t reg)
{
    if (reg == cie->ra_reg) return &s->ra;
    if (reg == PM_REG_RBP) return &s->rbp;
    return NULL; /* a register the walk does not need */
}

static void set_rule(cfa_state_t *s, const cie_t *cie, uint64_t reg, uint8_t kind, int64_t off)
{
    rule_t *rule = rule_of(s, cie, reg);
    if (!rule) return;
    rule->kind = kind;
    rule->off = off;
    rule->reg = 0;
}

/* Runs CFA instructions [p, end) starting at location loc, stopping before
 * the first row that starts above target.  init is the state after the
 * CIE's initial instructions (NULL while running those). */
static bool run_cfa(const uint8_t *p, const uint8_t *end, const cie_t *cie, uintptr_t loc,
                    uintptr_t target, uintptr_t dbase, cfa_state_t *s, const cfa_state_t *init)
{
    cfa_state_t saved[PM_CFA_STATE_DEPTH];
    int depth = 0;
    reader_t r = {p, end, true};
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
            set_rule(s, cie, op & 0x3f, RULE_OFFSET, off);
            continue;
        case PM_CFA_RESTORE: {
            rule_t *rule = rule_of(s, cie, op & 0x3f);
            const rule_t *orig = init ? rule_of((cfa_state_t *)init, cie, op & 0x3f) : NULL;
            if (rule) *rule = orig ? *orig : (rule_t){RULE_SAME, 0, 0};
            continue;
        }
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
            delta = read_fixed(&r, op == PM_CFA_ADVANCE_LOC1 ? 1 : op == PM_CFA_ADVANCE_LOC2 ? 2 : 4);
            loc += (uintptr_t)delta * cie->code_align;
            if (r.ok && loc > target) return true;
            break;
        case PM_CFA_OFFSET_EXTENDED:
            reg = read_uleb(&r);
            off = (int64_t)read_uleb(&r) * cie->data_align;
            set_rule(s, cie, reg, RULE_OFFSET, off);
            break;
        case PM_CFA_OFFSET_EXTENDED_SF:
            reg = read_uleb(&r);
            off = read_sleb(&r) * cie->data_align;
            set_rule(s, cie, reg, RULE_OFFSET, off);
            break;
        case PM_CFA_GNU_NEGATIVE_OFFSET_EXTENDED:
            reg = read_uleb(&r);
            off = -(int64_t)read_uleb(&r) * cie->data_align;
            set_rule(s, cie, reg, RULE_OFFSET, off);
            break;
        case PM_CFA_VAL_OFFSET:
            reg = read_uleb(&r);
            off = (int64_t)read_uleb(&r) * cie->data_align;
            set_rule(s, cie, reg, RULE_VAL_OFFSET, off);
            break;
        case PM_CFA_VAL_OFFSET_SF:
            reg = read_uleb(&r);
            off = read_sleb(&r) * cie->data_align;
            set_rule(s, cie, reg, RULE_VAL_OFFSET, off);
            break;
        case PM_CFA_RESTORE_EXTENDED: {
            reg = read_uleb(&r);
            rule_t *rule = rule_of(s, cie, reg);
            const rule_t *orig = init ? rule_of((cfa_state_t *)init, cie, reg) : NULL;
            if (rule) *rule = orig ? *orig : (rule_t){RULE_SAME, 0, 0};
            break;
        }
        case PM_CFA_UNDEFINED:
            set_rule(s, cie, read_uleb(&r), RULE_UNDEF, 0);
            break;
        case PM_CFA_SAME_VALUE:
            set_rule(s, cie, read_uleb(&r), RULE_SAME, 0);
            break;
        case PM_CFA_REGISTER: {
            reg = read_uleb(&r);
            uint64_t from = read_uleb(&r);
            rule_t *rule = rule_of(s, cie, reg);
            if (rule) {
                bool known = from == PM_REG_RBP || from == PM_REG_RSP;
                *rule = (rule_t){known ? RULE_REG : RULE_BAD, (uint8_t)from, 0};
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
            set_rule(s, cie, reg, RULE_BAD, 0);
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

/* ---- unwind rules and their cache -----------------------------------------
 * What it takes to step from a frame at a given PC to its caller. */
enum { STEP_OK, STEP_END, STEP_FAIL };

typedef struct {
    uint8_t result; /* STEP_OK: apply the rules; STEP_END / STEP_FAIL: stop */
    uint8_t cfa_reg; /* PM_REG_RSP or PM_REG_RBP */
    int64_t cfa_off;
    rule_t ra, rbp;
} frame_rule_t;

/* Computes the rule for PC from the FDE that covers it. */
/* The rule for pc from its FDE f (found in the object whose
 * .eh_frame_hdr is at dbase). */
static void rule_from_fde(uintptr_t pc, const fde_t *fp, uintptr_t dbase, frame_rule_t *out)
{
    const fde_t f = *fp;
    out->result = STEP_FAIL;
    cfa_state_t init = {PM_REG_RSP, 8, false, {RULE_SAME, 0, 0}, {RULE_UNDEF, 0, 0}};
    if (!run_cfa(f.cie.insns, f.cie.insns_end, &f.cie, f.pc_begin, UINTPTR_MAX, dbase, &init, NULL))
        return;
    cfa_state_t s = init;
    if (!run_cfa(f.insns, f.insns_end, &f.cie, f.pc_begin, pc, dbase, &s, &init)) return;
    if (s.ra.kind == RULE_UNDEF) {
        out->result = STEP_END; /* outermost frame: _start, thread start */
        return;
    }
    if (s.cfa_bad || (s.cfa_reg != PM_REG_RSP && s.cfa_reg != PM_REG_RBP)) return;
    if (s.ra.kind != RULE_OFFSET && s.ra.kind != RULE_VAL_OFFSET && s.ra.kind != RULE_REG) return;
    out->result = STEP_OK;
    out->cfa_reg = (uint8_t)s.cfa_reg;
    out->cfa_off = s.cfa_off;
    out->ra = s.ra;
    out->rbp = s.rbp;
}

/* A lock-free, two-way cache of rules by PC (a PC's slot, then its
 * neighbour), shared by all threads.
 * Each entry is two words written and read with relaxed atomics: data and
 * key ^ data, so a torn entry (two writers, or a reader racing a writer)
 * fails the key check and is treated as a miss.  The key mixes in the
 * address of the object's .eh_frame_hdr and the address and a hash of the
 * bytes of the FDE (and CIE head) that cover the PC (found by the search of .eh_frame_hdr on
 * every lookup; the cache saves running the CFA programs): code dlopen()ed
 * where other code was unloaded does not inherit its rules, also when it
 * is a rebuilt library loaded at the same address with its .eh_frame_hdr
 * at the same place (a plugin reloaded after a change of one function's
 * frame got the old frame's rule, and a wrong stack).  Only rules that fit
 * the packed form are cached:
 *   bit 0 valid, bits 1-2 result, bit 3 CFA is %rbp-based, bits 4-5 %rbp
 *   rule (0 same, 1 offset, 2 undefined), bits 8-15 / 16-23 RA / %rbp
 *   offset as -off/8, bits 24-55 CFA offset. */
/* The cache starts as one page and grows once, to PM_ST_CACHE_BITS, when
 * lookups have met PM_ST_GROW_AFTER valid entries of other PCs in their
 * slot (a miss, or a hit in the second way): a small
 * program's few dozen PCs then touch one page of it instead of one page
 * each, and a large program soon has the room it needs. */
#define PM_ST_SMALL_BITS 8   /* 256 entries, 4 KiB */
#define PM_ST_CACHE_BITS 12  /* 4096 entries, 64 KiB, mapped when grown */
#define PM_ST_GROW_AFTER 512

typedef struct {
    _Atomic uint64_t key_x_data;
    _Atomic uint64_t data;
} cache_entry_t;

PM_SPARSE_BSS static _Alignas(4096) cache_entry_t small_cache[1u << PM_ST_SMALL_BITS];
static cache_entry_t *_Atomic rule_cache; /* NULL: small_cache */
static _Atomic uint32_t cache_evictions;
/* search table indices found last, by PC (objects loaded later only):
 * checked before use */
static _Atomic uint32_t search_hint[256];

static void cache_grow(void)
{
    size_t bytes = sizeof(cache_entry_t) << PM_ST_CACHE_BITS;
    void *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) return;
    cache_entry_t *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&rule_cache, &expected, (cache_entry_t *)t,
                                                 memory_order_release, memory_order_relaxed))
        munmap(t, bytes);
}

/* A lookup met another PC's entry in its slot (a miss, or a hit in the
 * second way): PM_ST_GROW_AFTER of them in the small cache grow it. */
static void note_conflict(const cache_entry_t *cache)
{
    if (cache == small_cache &&
        atomic_fetch_add_explicit(&cache_evictions, 1, memory_order_relaxed) + 1 >= PM_ST_GROW_AFTER)
        cache_grow();
}

static uint64_t hash_bytes(const uint8_t *p, const uint8_t *end, uint64_t h)
{
    size_t n = (size_t)(end - p);
    h ^= (uint64_t)n * 0x9e3779b97f4a7c15ull;
    uint64_t w;
    for (; end - p > 8; p += 8) {
        __builtin_memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    if (n >= 8) { /* the last 8 bytes, overlapping the words before */
        __builtin_memcpy(&w, end - 8, 8);
        return ((h ^ w) * 0xff51afd7ed558ccdull) ^ (h >> 31);
    }
    for (; p < end; p++) h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

/* A hash of the bytes of FDE record fde, its CIE's length and the first
 * 8 bytes after the CIE's id (version, augmentation; the CIE is shared
 * and rarely the only thing that changed): with the PC and the FDE's
 * address, the rule is a function of them.  0 for a malformed record. */
static uint64_t record_identity(const uint8_t *fde)
{
    reader_t r, c;
    bool is64, cie64;
    const uint8_t *end = open_record(fde, &r, &is64);
    if (!end) return 0;
    const uint8_t *id_field = r.p;
    uint64_t cie_off = read_fixed(&r, is64 ? 8 : 4);
    if (!r.ok || cie_off == 0 || cie_off > (uintptr_t)id_field) return 0;
    const uint8_t *cie = id_field - cie_off;
    const uint8_t *cie_end = open_record(cie, &c, &cie64);
    if (!cie_end) return 0;
    uint64_t head;
    __builtin_memcpy(&head, c.p + (cie64 ? 8 : 4), 8);
    return hash_bytes(fde, end, (uint64_t)(cie_end - cie) << 32 ^ head) | 1;
}

static inline uint64_t cache_key(uintptr_t pc, const uint8_t *hdr, uint64_t ident)
{
    return (uint64_t)pc ^ ((uint64_t)(uintptr_t)hdr << 16) ^ ((uint64_t)(uintptr_t)hdr >> 3) ^ ident;
}

static inline uint32_t cache_slot(uintptr_t pc, unsigned bits)
{
    return (uint32_t)(((uint64_t)pc * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

/* -off/8 for a slot offset in [-2040, -8] that is a multiple of 8, else 0. */
static inline uint64_t pack_slot_off(int64_t off)
{
    return off < 0 && off >= -2040 && (off & 7) == 0 ? (uint64_t)(-off / 8) : 0;
}

static uint64_t pack_rule(const frame_rule_t *r)
{
    uint64_t d = 1 | (uint64_t)r->result << 1;
    if (r->result != STEP_OK) return d;
    uint64_t ra_off = pack_slot_off(r->ra.off);
    if (r->ra.kind != RULE_OFFSET || !ra_off) return 0;
    if (r->cfa_off < 0 || r->cfa_off > (int64_t)UINT32_MAX) return 0;
    d |= (uint64_t)(r->cfa_reg == PM_REG_RBP) << 3 | ra_off << 8 | (uint64_t)r->cfa_off << 24;
    switch (r->rbp.kind) {
    case RULE_SAME: break;
    case RULE_UNDEF: d |= (uint64_t)2 << 4; break;
    case RULE_OFFSET: {
        uint64_t bp_off = pack_slot_off(r->rbp.off);
        if (!bp_off) return 0;
        d |= (uint64_t)1 << 4 | bp_off << 16;
        break;
    }
    default: return 0;
    }
    return d;
}

static void unpack_rule(uint64_t d, frame_rule_t *r)
{
    r->result = (uint8_t)((d >> 1) & 3);
    r->cfa_reg = (d >> 3) & 1 ? PM_REG_RBP : PM_REG_RSP;
    r->cfa_off = (int64_t)((d >> 24) & UINT32_MAX);
    r->ra = (rule_t){RULE_OFFSET, 0, -8 * (int64_t)((d >> 8) & 0xff)};
    switch ((d >> 4) & 3) {
    case 1: r->rbp = (rule_t){RULE_OFFSET, 0, -8 * (int64_t)((d >> 16) & 0xff)}; break;
    case 2: r->rbp = (rule_t){RULE_UNDEF, 0, 0}; break;
    default: r->rbp = (rule_t){RULE_SAME, 0, 0}; break;
    }
}

/* Every object loaded when profmalloc's constructor runs, listed once by
 * pm_stacktrace_pin_loaded, outside the unwinder's paths: the program, its
 * libraries and preloads (never unloaded), and whatever other libraries'
 * constructors opened before (which can be closed again: their rules can
 * go stale, and their pages are never given back, never_unloaded). */
#define PM_PINNED_MAX 64
static const uint8_t *_Atomic loaded_hdr[PM_PINNED_MAX];
static _Atomic int loaded_n;

/* ---- giving back the pages of the unwind tables -------------------------
 * A rule is worked out once per PC and then cached, but working it out
 * reads the object's .eh_frame_hdr and .eh_frame, and the kernel maps the
 * 64 KB of file around every page such a read faults in.  libc's tables
 * alone left 130-200 KB resident in every profiled process, for a few
 * lookups at start-up: more than a small program's whole heap moves.
 * So after a walk that read the tables of a start-up object, the pages
 * from its .eh_frame_hdr to the end of the segment that holds it go back
 * (MADV_DONTNEED: the file's pages stay in the page cache, and the next
 * read maps them again).  Only where no write can be lost: the segment is
 * neither writable nor executable (no relocation, no debugger breakpoint,
 * no patched code lives there) and the object has no text relocations;
 * and only start-up objects, which are never unloaded, so the range can
 * never hold anything else.  At most once per PM_GIVEBACK_NS: tables read
 * since the last time go at the first capture after that. */
#define PM_GIVEBACK_NS (100 * 1000 * 1000)
static uintptr_t giveback_lo[PM_PINNED_MAX], giveback_hi[PM_PINNED_MAX];
static _Atomic uint64_t giveback_pending; /* one bit per start-up object */
static _Atomic uint64_t giveback_ns;      /* monotonic time of the last */

/* The libraries the program links against directly (its DT_NEEDED
 * entries: libstdc++ in a C++ program) stay as long as it runs; needed.c
 * asks the loader which objects they are (by their dynamic sections).  It
 * is linked into the shared library only: its dlopen would make every
 * static link of libprofmalloc.a warn, and a static program has no such
 * libraries.  Without it, only the program, the C library and profmalloc
 * give their tables' pages back. */
#define PM_NEEDED_MAX 64
static uintptr_t needed_ld[PM_NEEDED_MAX];
static int needed_n;

static bool needed_by_program(const struct dl_phdr_info *info)
{
    uintptr_t ld = (uintptr_t)pm_elf_dynamic(info);
    for (int i = 0; ld && i < needed_n; i++)
        if (needed_ld[i] == ld) return true;
    return false;
}

/* Objects listed at start-up are not all there for good: a library's
 * constructor that ran before profmalloc's may have dlopen()ed a plugin,
 * which it can close again, and a madvise on its old range would then
 * zero whatever was mapped there next.  Only the ones that cannot go give
 * their pages back: the program, the libraries it names in DT_NEEDED, the
 * C library (which holds dl_iterate_phdr) and profmalloc itself.  Other
 * libraries' tables stay mapped once read. */
static bool never_unloaded(const struct dl_phdr_info *info, bool program)
{
    return program || needed_by_program(info) || pm_elf_segment(info, (uintptr_t)&dl_iterate_phdr) ||
           pm_elf_segment(info, (uintptr_t)&pm_stacktrace_capture);
}

/* Object n's range, from its program headers (called before it is listed). */
static void set_giveback_range(const struct dl_phdr_info *info, uintptr_t hdr, int n)
{
    const ElfW(Phdr) *load = pm_elf_segment(info, hdr);
    const ElfW(Dyn) *dyn = pm_elf_dynamic(info);
    if (!load || (load->p_flags & (PF_W | PF_X)) || load->p_filesz != load->p_memsz) return;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++)
        if (dyn->d_tag == DT_TEXTREL || (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL))) return;
    uintptr_t page = getauxval(AT_PAGESZ) ? getauxval(AT_PAGESZ) : 4096;
    uintptr_t lo = (hdr + page - 1) & ~(page - 1);
    uintptr_t hi = (info->dlpi_addr + load->p_vaddr + load->p_memsz) & ~(page - 1);
    if (hi > lo) {
        giveback_lo[n] = lo;
        giveback_hi[n] = hi;
    }
}

/* Called after every walk with the objects whose tables it read. */
static void give_back_tables(uint64_t touched)
{
    if (touched) atomic_fetch_or_explicit(&giveback_pending, touched, memory_order_relaxed);
    if (PM_LIKELY(!atomic_load_explicit(&giveback_pending, memory_order_relaxed))) return;
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return; /* vDSO: no lock, no allocation */
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    uint64_t last = atomic_load_explicit(&giveback_ns, memory_order_relaxed);
    /* signed: another thread may have stored a later time than this now */
    if ((int64_t)(now - last) < PM_GIVEBACK_NS ||
        !atomic_compare_exchange_strong_explicit(&giveback_ns, &last, now, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    uint64_t m = atomic_exchange_explicit(&giveback_pending, 0, memory_order_relaxed);
    int saved = errno;
    for (; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        madvise((void *)giveback_lo[i], giveback_hi[i] - giveback_lo[i], MADV_DONTNEED);
    }
    errno = saved;
}

/* ---- executables without a search table ----------------------------------
 * gcc links static executables without --eh-frame-hdr, so neither the
 * loader nor _dl_find_object knows where their .eh_frame is.  For such a
 * main program, profmalloc's constructor finds .eh_frame through the
 * section headers of /proc/self/exe and builds the table itself, in mapped
 * memory and in .eh_frame_hdr's format (8-byte entries relative to the
 * table), which the walk then uses for PCs inside the program. */
static const uint8_t *_Atomic exe_hdr;
static uintptr_t exe_lo, exe_hi; /* the program's mapping; set before exe_hdr */

#ifndef SHT_X86_64_UNWIND
#define SHT_X86_64_UNWIND 0x70000001 /* gold's type for .eh_frame */
#endif

/* .eh_frame's address and size from the executable's section headers, if
 * /proc/self/exe is the program described by `info` (its program headers
 * are the ones in memory: not so under `ld.so ./prog`, where it is ld.so). */
static bool exe_eh_frame(const struct dl_phdr_info *info, uintptr_t *start, size_t *len)
{
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(Elf64_Ehdr))
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return false;
    const uint8_t *f = map;
    size_t fsize = (size_t)st.st_size;
    const Elf64_Ehdr *eh = map;
    bool found = false;
    size_t phbytes = (size_t)info->dlpi_phnum * sizeof(ElfW(Phdr));
    if (__builtin_memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
        eh->e_phentsize == sizeof(ElfW(Phdr)) && eh->e_phnum == info->dlpi_phnum && eh->e_phoff < fsize &&
        phbytes <= fsize - eh->e_phoff && __builtin_memcmp(f + eh->e_phoff, info->dlpi_phdr, phbytes) == 0 &&
        eh->e_shentsize == sizeof(Elf64_Shdr) && eh->e_shoff < fsize && eh->e_shstrndx < eh->e_shnum &&
        eh->e_shnum <= (fsize - eh->e_shoff) / sizeof(Elf64_Shdr)) {
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
        const Elf64_Shdr *names = &sh[eh->e_shstrndx];
        for (unsigned i = 0; names->sh_offset < fsize && names->sh_size <= fsize - names->sh_offset &&
                             i < eh->e_shnum && !found;
             i++) {
            static const char want[] = ".eh_frame";
            if (sh[i].sh_name >= names->sh_size || names->sh_size - sh[i].sh_name < sizeof want ||
                !(sh[i].sh_flags & SHF_ALLOC) ||
                (sh[i].sh_type != SHT_PROGBITS && sh[i].sh_type != SHT_X86_64_UNWIND))
                continue;
            if (__builtin_memcmp(f + names->sh_offset + sh[i].sh_name, want, sizeof want) == 0) {
                *start = info->dlpi_addr + sh[i].sh_addr;
                *len = sh[i].sh_size;
                found = true;
            }
        }
    }
    munmap(map, fsize);
    return found;
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

/* Builds the search table for the main program; called once, from the
 * constructor. */
static void build_exe_table(const struct dl_phdr_info *info)
{
    uintptr_t start = 0, lo = UINTPTR_MAX, hi = 0;
    size_t len = 0;
    if (!exe_eh_frame(info, &start, &len)) return;
    bool inside = false; /* within one loaded segment: the gaps are unmapped */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t seg = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD) continue;
        if (seg < lo) lo = seg;
        if (seg + ph->p_memsz > hi) hi = seg + ph->p_memsz;
        inside |= (ph->p_flags & PF_R) && start >= seg && start - seg <= ph->p_memsz &&
                  len <= ph->p_memsz - (start - seg);
    }
    if (!inside) return;
    const uint8_t *sec = (const uint8_t *)start, *sec_end = sec + len;
    /* a record takes at least 8 bytes, so len / 8 pairs are enough; only
     * the pages written become resident.  20 bytes of header at map + 4,
     * so that the table starts 8-aligned */
    size_t n = len / 8;
    uint8_t *map = mmap(NULL, 24 + 16 * n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return;
    uint8_t *h = map + 4;
    int64_t *table = (int64_t *)(map + 24);
    uintptr_t dbase = (uintptr_t)h; /* entries are relative to the header */
    size_t m = 0;
    /* a length field takes up to 12 bytes; only the 4-byte terminator is
     * shorter */
    for (const uint8_t *p = sec; p + 12 <= sec_end && m < n;) {
        reader_t r;
        bool is64;
        const uint8_t *end = open_record(p, &r, &is64);
        if (!end || end > sec_end) break;
        const uint8_t *id_field = r.p;
        uint64_t cie_off = read_fixed(&r, is64 ? 8 : 4);
        fde_t fde;
        if (r.ok && cie_off != 0 && cie_off <= (uintptr_t)(id_field - sec) &&
            parse_fde(p, dbase, &fde) && fde.pc_begin >= lo && fde.pc_end > fde.pc_begin &&
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
    uint64_t ptr = start, count = m;
    __builtin_memcpy(h + 4, &ptr, 8);
    __builtin_memcpy(h + 12, &count, 8);
    exe_lo = lo;
    exe_hi = hi;
    atomic_store_explicit(&exe_hdr, h, memory_order_release);
}

static int pin_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    bool *first = data;
    int n = atomic_load_explicit(&loaded_n, memory_order_relaxed);
    if (n >= PM_PINNED_MAX) return 1;
    const uint8_t *hdr = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
            hdr = (const uint8_t *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    bool program = *first; /* the main program, listed first */
    if (!hdr && program) {
        build_exe_table(info);
        hdr = atomic_load_explicit(&exe_hdr, memory_order_relaxed);
    }
    *first = false;
    if (hdr) {
        if (hdr != atomic_load_explicit(&exe_hdr, memory_order_relaxed) && never_unloaded(info, program))
            set_giveback_range(info, (uintptr_t)hdr, n);
        atomic_store_explicit(&loaded_hdr[n], hdr, memory_order_relaxed);
        atomic_store_explicit(&loaded_n, n + 1, memory_order_release);
    }
    return 0;
}

/* The allocator's own code, walked by its unwind tables in frame-pointer
 * mode too (pm_stacktrace_set_own_code). */
static _Atomic uintptr_t own_code_lo, own_code_hi;

void pm_stacktrace_set_own_code(uintptr_t lo, uintptr_t hi)
{
    pm_relaxed_store(&own_code_lo, lo);
    pm_relaxed_store(&own_code_hi, hi);
}

/* _dl_find_object works once the loader has built its object tables: in a
 * dynamically linked program before any constructor or malloc from outside
 * the loader, but in a static executable (no program interpreter) only
 * after libc's own start-up, which allocates first.  There the DWARF walk
 * waits for profmalloc's constructor and earlier captures walk frame
 * records, whose every load is bounds-checked. */
static _Atomic bool dlfo_ready;

/* Was the program loaded by an interpreter?  AT_BASE is its address, but
 * 0 when ld.so was run as a command (`ld.so ./prog`); the program's own
 * headers (AT_PHDR, which ld.so then points at the program) still have
 * PT_INTERP. */
static bool dynamically_linked(void)
{
    if (getauxval(AT_BASE) != 0) return true;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    size_t n = getauxval(AT_PHNUM);
    for (size_t i = 0; ph && i < n; i++)
        if (ph[i].p_type == PT_INTERP) return true;
    return false;
}

static bool dwarf_ready(void)
{
    if (PM_LIKELY(atomic_load_explicit(&dlfo_ready, memory_order_relaxed))) return true;
    if (!dynamically_linked()) return false;
    atomic_store_explicit(&dlfo_ready, true, memory_order_relaxed);
    return true;
}

void pm_stacktrace_pin_loaded(void)
{
    bool first = true;
    if (!atomic_load_explicit(&loaded_n, memory_order_acquire)) {
        if (pm_needed_dynamics) needed_n = pm_needed_dynamics(needed_ld, PM_NEEDED_MAX);
        dl_iterate_phdr(pin_object, &first);
    }
    atomic_store_explicit(&dlfo_ready, true, memory_order_relaxed);
}

/* The index of a start-up object's table, or -1. */
static int pinned(const uint8_t *hdr)
{
    int n = atomic_load_explicit(&loaded_n, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (hdr == atomic_load_explicit(&loaded_hdr[i], memory_order_relaxed)) return i;
    return -1;
}

/* The rule for pc; adds to *touched the start-up object whose tables it
 * read, if they have pages to give back. */
static void find_rule(uintptr_t pc, frame_rule_t *r, uint64_t *touched)
{
    struct dl_find_object obj;
    if (_dl_find_object((void *)pc, &obj) != 0) {
        r->result = STEP_FAIL; /* no object (JIT code) */
        return;
    }
    const uint8_t *hdr = obj.dlfo_eh_frame;
    if (!hdr) { /* no search table: ours for the main program, else no unwind info */
        hdr = atomic_load_explicit(&exe_hdr, memory_order_acquire);
        if (!hdr || pc < exe_lo || pc >= exe_hi) {
            r->result = STEP_FAIL;
            return;
        }
    }
    uintptr_t dbase = (uintptr_t)hdr, eh_frame;
    fde_t f;
    cache_entry_t *cache = atomic_load_explicit(&rule_cache, memory_order_acquire);
    unsigned bits = cache ? PM_ST_CACHE_BITS : PM_ST_SMALL_BITS;
    if (!cache) cache = small_cache;
    cache_entry_t *e = &cache[cache_slot(pc, bits)];
    const uint8_t *rec = NULL;
    uint64_t ident = 1; /* a start-up object's rules cannot go stale */
    int pin = pinned(hdr);
    if (pin < 0) {
        _Atomic uint32_t *hp = &search_hint[cache_slot(pc, 8)];
        uint32_t hint = atomic_load_explicit(hp, memory_order_relaxed);
        rec = search_fde(pc, hdr, &eh_frame, &hint);
        atomic_store_explicit(hp, hint, memory_order_relaxed);
        ident = rec ? record_identity(rec) : 0;
        /* and where the FDE is: its pc_begin and CIE pointer are relative
         * to it, so the same bytes moved with the code describe other PCs */
        if (ident) ident ^= ((uint64_t)(uintptr_t)rec * 0x9e3779b97f4a7c15ull) | 1;
        if (!ident) { /* no search table (or a malformed record): uncached */
            if (find_fde(pc, hdr, &f) && !f.cie.signal) rule_from_fde(pc, &f, dbase, r);
            else r->result = STEP_FAIL;
            return;
        }
    }
    uint64_t key = cache_key(pc, hdr, ident);
    uint64_t kx = atomic_load_explicit(&e->key_x_data, memory_order_relaxed);
    uint64_t d = atomic_load_explicit(&e->data, memory_order_relaxed);
    /* Two ways: a PC whose slot another took sits in the slot's neighbour
     * (two PCs of one stack that shared a slot had missed at every sample:
     * 2.5 instructions per malloc+free pair in bench/fastpath at the
     * default rate, the small cache never filling enough to grow). */
    cache_entry_t *alt = NULL;
    uint64_t ad = 0;
    if (PM_UNLIKELY(!(d & 1) || (kx ^ d) != key)) {
        alt = &cache[cache_slot(pc, bits) ^ 1];
        uint64_t akx = atomic_load_explicit(&alt->key_x_data, memory_order_relaxed);
        ad = atomic_load_explicit(&alt->data, memory_order_relaxed);
        if (!(ad & 1) || (akx ^ ad) != key) goto miss;
        note_conflict(cache);
        d = ad;
    }
    unpack_rule(d, r); /* one call site, so that it stays inlined */
    return;
miss:
    if (pin >= 0 && giveback_hi[pin] > giveback_lo[pin]) *touched |= (uint64_t)1 << pin;
    bool found = rec ? parse_fde(rec, dbase, &f) && pc >= f.pc_begin && pc < f.pc_end
                     : find_fde(pc, hdr, &f);
    if (found && !f.cie.signal)
        rule_from_fde(pc, &f, dbase, r);
    else
        r->result = STEP_FAIL;
    uint64_t nd = pack_rule(r);
    if (nd) {
        /* into the slot if free, else the neighbour if free, else the
         * slot's entry moves to the neighbour (a reader that meets either
         * half-written finds a key mismatch) */
        if ((d & 1) && !(ad & 1)) {
            e = alt;
        } else if (d & 1) {
            atomic_store_explicit(&alt->data, d, memory_order_relaxed);
            atomic_store_explicit(&alt->key_x_data, kx, memory_order_relaxed);
        }
        atomic_store_explicit(&e->data, nd, memory_order_relaxed);
        atomic_store_explicit(&e->key_x_data, key ^ nd, memory_order_relaxed);
    }
    if (d & 1) note_conflict(cache);
}

/* ---- stepping ------------------------------------------------------------ */
/* Register state of one frame: the PC, its stack pointer and %rbp. */
typedef struct {
    uintptr_t pc, sp, bp;
} frame_t;

static bool eval_rule(const rule_t *rule, const frame_t *fr, uintptr_t cfa, uintptr_t lo,
                      uintptr_t hi, uintptr_t *out)
{
    switch (rule->kind) {
    case RULE_OFFSET: {
        uintptr_t addr = cfa + (uintptr_t)rule->off;
        if (!slot_ok(addr, lo, hi)) return false;
        *out = load_slot(addr);
        return true;
    }
    case RULE_VAL_OFFSET: *out = cfa + (uintptr_t)rule->off; return true;
    case RULE_REG: *out = rule->reg == PM_REG_RBP ? fr->bp : fr->sp; return true;
    default: return false;
    }
}

/* Replaces fr by its caller's registers.  fr->pc is a return address, so
 * the row for the call instruction (pc - 1) is the one in effect. */
static int step_dwarf(frame_t *fr, uintptr_t lo, uintptr_t hi, uint64_t *touched)
{
    frame_rule_t rule;
    find_rule(fr->pc - 1, &rule, touched);
    if (rule.result != STEP_OK) return rule.result;
    uintptr_t base = rule.cfa_reg == PM_REG_RBP ? fr->bp : fr->sp;
    uintptr_t cfa = base + (uintptr_t)rule.cfa_off;
    if (cfa <= fr->sp || (cfa & 7) || cfa > hi) return STEP_FAIL;
    uintptr_t ra, bp = 0;
    if (!eval_rule(&rule.ra, fr, cfa, lo, hi, &ra)) return STEP_FAIL;
    if (rule.rbp.kind == RULE_SAME)
        bp = fr->bp;
    else if (rule.rbp.kind != RULE_UNDEF && !eval_rule(&rule.rbp, fr, cfa, lo, hi, &bp))
        bp = 0; /* unknown: a later CFA based on it fails the checks */
    if (ra < 4096) return STEP_END; /* 0 also marks the outermost frame */
    fr->pc = ra;
    fr->sp = cfa;
    fr->bp = bp;
    return STEP_OK;
}

static int walk_dwarf(frame_t fr, uintptr_t lo, uintptr_t hi, uintptr_t *pcs, int max, int skip)
{
    int n = 0;
    uint64_t touched = 0;
    for (;;) {
        if (skip > 0)
            skip--;
        else
            pcs[n++] = fr.pc;
        if (n == max) break;
        if (step_dwarf(&fr, lo, hi, &touched) != STEP_OK) {
            if (!skip) n += pm_unwind_go(fr.pc, fr.sp, fr.bp, pcs + n, max - n); /* cgo's callers */
            break;
        }
    }
    give_back_tables(touched);
    return n;
}

#endif /* __x86_64__ */

#if defined(__GNUC__) && !defined(__clang__)
#define PM_CAPTURE_ATTR __attribute__((noipa)) /* no inlining, cloning or splitting */
#else
#define PM_CAPTURE_ATTR PM_NOINLINE
#endif

PM_CAPTURE_ATTR int pm_stacktrace_capture(uintptr_t *pcs, int max, int skip)
{
#if defined(__x86_64__) || defined(__aarch64__)
    if (max <= 0) return 0;
    if (skip < 0) skip = 0;
    /* __builtin_frame_address(0) makes GCC and Clang give this function a
     * frame record, which is where both walks start: [fp] holds the
     * caller's frame pointer and [fp + 8] the return address into it. */
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    uintptr_t hi = stack_top(fp);
    if (!slot_ok(fp, fp, hi) || !slot_ok(fp + 8, fp, hi)) return 0;
    int n = -1;
#if defined(__x86_64__)
    if (dwarf_ready()) {
        frame_t fr = {load_slot(fp + 8), fp + 16, load_slot(fp)};
        if (pm_relaxed_load(&unwind_mode) == PM_UNWIND_DWARF) return walk_dwarf(fr, fp, hi, pcs, max, skip);
        /* the frame-pointer walk: through the allocator's own frames by
         * their unwind tables, then along %rbp from its caller's frame */
        uintptr_t own_lo = pm_relaxed_load(&own_code_lo), own_hi = pm_relaxed_load(&own_code_hi);
        n = 0;
        uint64_t touched = 0; /* the allocator's own tables only */
        int step = STEP_OK;
        while (fr.pc >= own_lo && fr.pc < own_hi) {
            if (skip > 0)
                skip--;
            else
                pcs[n++] = fr.pc;
            if (n == max || (step = step_dwarf(&fr, fp, hi, &touched)) != STEP_OK) break;
        }
        give_back_tables(touched);
        if (n == max || step != STEP_OK) return n;
        if (n == 0 && fr.sp == fp + 16) {
            n = -1; /* still in the first frame: the plain walk below */
        } else { /* left the allocator: fr is its caller's frame */
            if (skip > 0)
                skip--;
            else
                pcs[n++] = fr.pc;
            if (n < max) n += walk_fp(fr.bp, fr.sp, hi, pcs + n, max - n, skip);
        }
    }
#endif
    if (n < 0) n = walk_fp(fp, fp, hi, pcs, max, skip);
    /* no tail call: walk_fp reads this function's own frame record, which
     * the callee's frame would overwrite once this frame is gone */
    __asm__ volatile("" : "+r"(n) : : "memory");
    return n;
#else
    (void)pcs;
    (void)max;
    (void)skip;
    return 0;
#endif
}
