/* prof_unwind.c — captures the allocating call stack for the heap
 * profiler: the DWARF walk (x86-64; rules from prof_unwind_cfi.c, objects
 * from prof_objects.c) and the %rbp / frame-record walk, the process-wide
 * unwind mode, and the lock-free cache of rules by PC.
 * Must never: call malloc or anything that may (stdio, dladdr, backtrace,
 * dl_iterate_phdr, libgcc's unwinder), nor read a stack slot outside the
 * bounds it checked; it runs inside malloc and in signal handlers.
 * Locks: none; the rule cache is lock-free.  AArch64 always walks frame
 * records and other targets capture nothing. */
#include "pm.h"
#include "pm_os.h"
#include "pm_prof_objects.h"
#include "pm_prof_unwind.h"
#include "pm_prof_unwind_cfi.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* No frame is further than this above the capturing frame. */
#define PM_STACK_SPAN ((uintptr_t)64 << 20)

static _Atomic int unwind_mode = PM_UNWIND_DWARF;

void pm_unwind_set_mode(int mode)
{
    pm_relaxed_store(&unwind_mode, mode == PM_UNWIND_FP ? PM_UNWIND_FP : PM_UNWIND_DWARF);
}

int pm_unwind_get_mode(void)
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
PM_INLINE bool slot_ok(uintptr_t addr, uintptr_t lo, uintptr_t hi)
{
    return (addr & 7) == 0 && addr >= lo && addr < hi && hi - addr >= 8;
}

PM_INLINE uintptr_t load_slot(uintptr_t addr)
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

/* The allocator's own code, walked by its unwind tables in frame-pointer
 * mode too (pm_unwind_set_own_code). */
static _Atomic uintptr_t own_code_lo, own_code_hi;

void pm_unwind_set_own_code(uintptr_t lo, uintptr_t hi)
{
    pm_relaxed_store(&own_code_lo, lo);
    pm_relaxed_store(&own_code_hi, hi);
}

/* ---- the rule cache -------------------------------------------------------- */
/* A lock-free, two-way cache of rules by PC (a PC's slot, then its
 * neighbour), shared by all threads.
 * Each entry is two words written and read with relaxed atomics: data and
 * key ^ data, so a torn entry (two writers, or a reader racing a writer)
 * fails the key check and is treated as a miss.
 * A PC of an object that is never unloaded (pm_objects_stays) has one rule
 * for good: its key is the PC alone, probed before the loader is asked
 * which object holds the PC.  Any other object's key mixes in the address
 * of its .eh_frame_hdr and the address and a hash of the bytes of the FDE
 * (and CIE head) that cover the PC (found by the search of .eh_frame_hdr on
 * every lookup; the cache saves running the CFA programs): code dlopen()ed
 * where other code was unloaded does not inherit its rules, also when it
 * is a rebuilt library loaded at the same address with its .eh_frame_hdr
 * at the same place (a plugin reloaded after a change of one function's
 * frame got the old frame's rule, and a wrong stack).  The two kinds are
 * told apart by a bit of the data, not by the key's value, so neither can
 * ever serve a lookup of the other.  Only rules that fit the packed form
 * are cached:
 *   bit 0 valid, bits 1-2 result, bit 3 CFA is %rbp-based, bits 4-5 %rbp
 *   rule (0 same, 1 offset, 2 undefined), bits 8-15 / 16-23 RA / %rbp
 *   offset as -off/8, bits 24-55 CFA offset, bit 56 keyed by the PC alone. */
#define PM_ST_STAY ((uint64_t)1 << 56)
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
    void *t = pm_os_map(bytes, 0);
    if (!t) return;
    cache_entry_t *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&rule_cache, &expected, (cache_entry_t *)t,
                                                 memory_order_release, memory_order_relaxed))
        pm_os_unmap(t, bytes);
}

/* A lookup met another PC's entry in its slot (a miss, or a hit in the
 * second way): PM_ST_GROW_AFTER of them in the small cache grow it. */
static void note_conflict(const cache_entry_t *cache)
{
    if (cache == small_cache &&
        atomic_fetch_add_explicit(&cache_evictions, 1, memory_order_relaxed) + 1 >= PM_ST_GROW_AFTER)
        cache_grow();
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

static uint64_t pack_rule(const pm_cfi_frame_rule_t *r)
{
    uint64_t d = 1 | (uint64_t)r->result << 1;
    if (r->result != PM_STEP_OK) return d;
    uint64_t ra_off = pack_slot_off(r->ra.off);
    if (r->ra.kind != PM_RULE_OFFSET || !ra_off) return 0;
    if (r->cfa_off < 0 || r->cfa_off > (int64_t)UINT32_MAX) return 0;
    d |= (uint64_t)(r->cfa_reg == PM_REG_RBP) << 3 | ra_off << 8 | (uint64_t)r->cfa_off << 24;
    switch (r->rbp.kind) {
    case PM_RULE_SAME: break;
    case PM_RULE_UNDEF: d |= (uint64_t)2 << 4; break;
    case PM_RULE_OFFSET: {
        uint64_t bp_off = pack_slot_off(r->rbp.off);
        if (!bp_off) return 0;
        d |= (uint64_t)1 << 4 | bp_off << 16;
        break;
    }
    default: return 0;
    }
    return d;
}

/* The cache a walk uses, looked up once per walk (a walk that grows it
 * goes on with the small one, whose entries stay valid). */
typedef struct {
    cache_entry_t *t;
    unsigned bits;
} cache_ref_t;

PM_INLINE cache_ref_t cache_now(void)
{
    cache_entry_t *t = atomic_load_explicit(&rule_cache, memory_order_acquire);
    return t ? (cache_ref_t){t, PM_ST_CACHE_BITS} : (cache_ref_t){small_cache, PM_ST_SMALL_BITS};
}

/* Finds key's entry in the slot e or its neighbour alt, among the entries
 * whose PM_ST_STAY bit is `stay`: true with its data in d; false with the
 * words of the slot in kx, d and of the neighbour in akx, ad, where an
 * insertion goes. */
PM_INLINE bool cache_probe(cache_entry_t *e, cache_entry_t *alt, uint64_t key, uint64_t stay, uint64_t *kx,
                           uint64_t *d, uint64_t *akx, uint64_t *ad, const cache_entry_t *cache)
{
    uint64_t want = 1 | stay, mask = 1 | PM_ST_STAY;
    *kx = atomic_load_explicit(&e->key_x_data, memory_order_relaxed);
    *d = atomic_load_explicit(&e->data, memory_order_relaxed);
    if (PM_LIKELY((*d & mask) == want && (*kx ^ *d) == key)) return true;
    /* Two ways: a PC whose slot another took sits in the slot's neighbour,
     * so two PCs of one stack that share a slot do not miss at every sample
     * (bench/count-instructions.sh at the default rate shows it). */
    *akx = atomic_load_explicit(&alt->key_x_data, memory_order_relaxed);
    *ad = atomic_load_explicit(&alt->data, memory_order_relaxed);
    if ((*ad & mask) != want || (*akx ^ *ad) != key) return false;
    note_conflict(cache);
    *d = *ad;
    return true;
}

/* Not a read-modify-write: walks in other threads may lose a count, which
 * the single-threaded tests that read it do not mind, and none pays for a
 * locked instruction on a shared line. */
static _Atomic uint64_t slow_lookups;

uint64_t pm_unwind_slow_lookups(void) { return pm_relaxed_load(&slow_lookups); }

/* The rule for pc worked out from its object's tables, and cached if it
 * fits the packed form; or found in the cache under its object's identity.
 * Returns it packed, or 0 with the rule in *r; adds to *touched the
 * start-up object whose tables it read, if they have pages to give back. */
static PM_NOINLINE uint64_t find_rule_slow(uintptr_t pc, cache_ref_t c, pm_cfi_frame_rule_t *r,
                                           uint64_t *touched)
{
    pm_relaxed_store(&slow_lookups, pm_relaxed_load(&slow_lookups) + 1);
    cache_entry_t *cache = c.t;
    uint32_t slot = cache_slot(pc, c.bits);
    cache_entry_t *e = &cache[slot], *alt = &cache[slot ^ 1];
    uint64_t kx, d, akx = 0, ad = 0;
    const uint8_t *hdr = pm_objects_table_of(pc);
    if (!hdr) {
        r->result = PM_STEP_FAIL;
        return pack_rule(r);
    }
    uintptr_t dbase = (uintptr_t)hdr, eh_frame;
    pm_cfi_fde_t f;
    const uint8_t *rec = NULL;
    int pin = pm_objects_pinned(hdr);
    uint64_t stay = pm_objects_stays(pin) ? PM_ST_STAY : 0, key = pc;
    if (!stay) {
        /* Other code (dlopen()ed, or opened by a library's constructor
         * before the start-up list and closable) can be replaced by other
         * code at the same PC: its key holds the FDE's identity
         * (test_reload_same_address, test_reload_pinned_plugin). */
        _Atomic uint32_t *hp = &search_hint[cache_slot(pc, 8)];
        uint32_t hint = atomic_load_explicit(hp, memory_order_relaxed);
        rec = pm_cfi_search_fde(pc, hdr, &eh_frame, &hint);
        atomic_store_explicit(hp, hint, memory_order_relaxed);
        uint64_t ident = rec ? pm_cfi_record_identity(rec) : 0;
        /* and where the FDE is: its pc_begin and CIE pointer are relative
         * to it, so the same bytes moved with the code describe other PCs */
        if (ident) ident ^= ((uint64_t)(uintptr_t)rec * 0x9e3779b97f4a7c15ull) | 1;
        if (!ident) { /* no search table (or a malformed record): uncached */
            if (pm_cfi_find_fde(pc, hdr, &f) && !f.cie.signal) pm_cfi_rule_from_fde(pc, &f, dbase, r);
            else r->result = PM_STEP_FAIL;
            return pack_rule(r);
        }
        key = cache_key(pc, hdr, ident);
    }
    if (cache_probe(e, alt, key, stay, &kx, &d, &akx, &ad, cache)) return d;
    if (pin >= 0 && pm_objects_may_give_back(pin)) *touched |= (uint64_t)1 << pin;
    bool found = rec ? pm_cfi_parse_fde(rec, dbase, &f) && pc >= f.pc_begin && pc < f.pc_end
                     : pm_cfi_find_fde(pc, hdr, &f);
    if (found && !f.cie.signal)
        pm_cfi_rule_from_fde(pc, &f, dbase, r);
    else
        r->result = PM_STEP_FAIL;
    uint64_t nd = pack_rule(r);
    if (nd) {
        nd |= stay;
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
    return nd;
}

/* The rule for pc, packed (0: it does not fit, and *r holds it).  A PC of
 * an object that is never unloaded has one rule for good: its entry is
 * keyed by the PC alone, found before asking the loader which object holds
 * it (test_prof_unwind.c: test_pinned_rules_cached). */
PM_INLINE uint64_t find_rule(uintptr_t pc, cache_ref_t c, pm_cfi_frame_rule_t *r, uint64_t *touched)
{
    uint32_t slot = cache_slot(pc, c.bits);
    uint64_t kx, d, akx, ad;
    if (PM_LIKELY(cache_probe(&c.t[slot], &c.t[slot ^ 1], pc, PM_ST_STAY, &kx, &d, &akx, &ad, c.t))) return d;
    return find_rule_slow(pc, c, r, touched);
}

/* ---- stepping ------------------------------------------------------------ */
/* Register state of one frame: the PC, its stack pointer and %rbp. */
typedef struct {
    uintptr_t pc, sp, bp;
} frame_t;

PM_INLINE bool eval_rule(const pm_cfi_rule_t *rule, const frame_t *fr, uintptr_t cfa, uintptr_t lo,
                         uintptr_t hi, uintptr_t *out)
{
    switch (rule->kind) {
    case PM_RULE_OFFSET: {
        uintptr_t addr = cfa + (uintptr_t)rule->off;
        if (!slot_ok(addr, lo, hi)) return false;
        *out = load_slot(addr);
        return true;
    }
    case PM_RULE_VAL_OFFSET: *out = cfa + (uintptr_t)rule->off; return true;
    case PM_RULE_REG: *out = rule->reg == PM_REG_RBP ? fr->bp : fr->sp; return true;
    default: return false;
    }
}

/* Replaces fr by its caller's registers by a rule that does not fit the
 * packed form. */
static PM_NOINLINE int step_rule(const pm_cfi_frame_rule_t *rule, frame_t *fr, uintptr_t lo, uintptr_t hi)
{
    if (rule->result != PM_STEP_OK) return rule->result;
    uintptr_t base = rule->cfa_reg == PM_REG_RBP ? fr->bp : fr->sp;
    uintptr_t cfa = base + (uintptr_t)rule->cfa_off;
    if (cfa <= fr->sp || (cfa & 7) || cfa > hi) return PM_STEP_FAIL;
    uintptr_t ra, bp = 0;
    if (!eval_rule(&rule->ra, fr, cfa, lo, hi, &ra)) return PM_STEP_FAIL;
    if (rule->rbp.kind == PM_RULE_SAME)
        bp = fr->bp;
    else if (rule->rbp.kind != PM_RULE_UNDEF && !eval_rule(&rule->rbp, fr, cfa, lo, hi, &bp))
        bp = 0; /* unknown: a later CFA based on it fails the checks */
    if (ra < 4096) return PM_STEP_END; /* 0 also marks the outermost frame */
    fr->pc = ra;
    fr->sp = cfa;
    fr->bp = bp;
    return PM_STEP_OK;
}

/* A walk being recorded for the memo (pm_unwind_memo_t): the way it
 * fills, and whether it can still be replayed. */
typedef struct {
    pm_unwind_memo_way_t *w;
    int ok;
    int bp_first; /* %rbp still holds the first frame's value */
    uintptr_t bp_at; /* else the stack word it came from, until a CFA uses it (0: noted, or none) */
} memo_rec_t;

PM_INLINE void memo_note(memo_rec_t *m, uintptr_t addr, uintptr_t val)
{
    if (m->w->nslots < 2 * PM_UNWIND_MEMO_FRAMES) {
        m->w->addr[m->w->nslots] = addr;
        m->w->val[m->w->nslots++] = val;
    } else {
        m->ok = 0;
    }
}

/* Replaces fr by its caller's registers.  fr->pc is a return address, so
 * the row for the call instruction (pc - 1) is the one in effect.  The
 * packed rule is applied as it is (the same steps as step_rule).  With m,
 * notes the stack words it reads, and whether the rule is one for good. */
PM_INLINE int step_dwarf(frame_t *fr, uintptr_t lo, uintptr_t hi, cache_ref_t c, uint64_t *touched, memo_rec_t *m)
{
    pm_cfi_frame_rule_t rule;
    uint64_t d = find_rule(fr->pc - 1, c, &rule, touched);
    if (m && !(d & PM_ST_STAY)) m->ok = 0; /* also d == 0: an unpacked rule */
    if (PM_UNLIKELY(!d)) {
        frame_t f = *fr; /* so that the walk's frame can stay in registers */
        int result = step_rule(&rule, &f, lo, hi);
        *fr = f;
        return result;
    }
    int result = (int)((d >> 1) & 3);
    if (result != PM_STEP_OK) return result;
    uintptr_t cfa = ((d >> 3) & 1 ? fr->bp : fr->sp) + (uintptr_t)((d >> 24) & UINT32_MAX);
    if (m && ((d >> 3) & 1)) {
        /* a saved %rbp counts once a CFA is computed from it: code
         * without frame pointers saves data there, which changes from
         * call to call and would make every replay fail */
        if (m->bp_first) m->w->bp_used = 1;
        else if (m->bp_at) memo_note(m, m->bp_at, fr->bp);
        m->bp_at = 0;
    }
    if (cfa <= fr->sp || (cfa & 7) || cfa > hi) return PM_STEP_FAIL;
    /* the slots are aligned as the CFA is, and hi - lo >= 16 */
    uintptr_t at = cfa - 8 * (uintptr_t)((d >> 8) & 0xff), bp = 0;
    if (at - lo > hi - 8 - lo) return PM_STEP_FAIL;
    uintptr_t ra = load_slot(at);
    if (m) memo_note(m, at, ra);
    switch ((d >> 4) & 3) {
    case 1: /* saved at an offset: unknown if out of bounds */
        at = cfa - 8 * (uintptr_t)((d >> 16) & 0xff);
        if (at - lo <= hi - 8 - lo) {
            bp = load_slot(at);
            if (m) m->bp_at = at;
        } else if (m) {
            m->ok = 0; /* depends on lo */
        }
        if (m) m->bp_first = 0;
        break;
    case 2: /* undefined */
        if (m) m->bp_first = 0, m->bp_at = 0;
        break;
    default: bp = fr->bp; break; /* same value */
    }
    if (ra < 4096) return PM_STEP_END;
    fr->pc = ra;
    fr->sp = cfa;
    fr->bp = bp;
    return PM_STEP_OK;
}

/* Replays so far: for the tests, counted as slow_lookups is. */
static _Atomic uint64_t memo_replays;

uint64_t pm_unwind_memo_replays(void) { return pm_relaxed_load(&memo_replays); }

/* The memo's walk from fr, if one would read what it read: its words are
 * read in the walk's order and the first that differs ends the look, so
 * no word is read that the walk itself would not read (bounds: the same
 * top, a bottom no higher).  Returns the pcs stored, or -1. */
static int memo_replay(pm_unwind_memo_t *memo, const frame_t *fr, uintptr_t lo, uintptr_t hi, uintptr_t *pcs,
                       int max)
{
    for (unsigned i = 0; i < PM_UNWIND_MEMO_WAYS; i++) {
        const pm_unwind_memo_way_t *w = &memo->way[i];
        if (w->pc != fr->pc || w->sp != fr->sp || (w->bp_used && w->bp != fr->bp) || w->max != max ||
            w->hi != hi || lo > w->lo)
            continue;
        uint32_t k = 0;
        while (k < w->nslots && load_slot(w->addr[k]) == w->val[k]) k++;
        if (k < w->nslots) continue;
        for (int j = 0; j < w->n; j++) pcs[j] = w->pcs[j];
        pm_relaxed_store(&memo_replays, pm_relaxed_load(&memo_replays) + 1);
        memo->last = (int32_t)i;
        return w->n;
    }
    return -1;
}

/* With memo (and skip 0), a walk the memo holds is replayed, and a new one
 * that can be replayed replaces its victim way. */
static int walk_dwarf(frame_t fr, uintptr_t lo, uintptr_t hi, uintptr_t *pcs, int max, int skip,
                      pm_unwind_memo_t *memo)
{
    memo_rec_t rec = {NULL, 0, 0, 0}, *m = NULL;
    if (memo && !skip) {
        int n = memo_replay(memo, &fr, lo, hi, pcs, max);
        if (n >= 0) return n;
        rec.w = &memo->way[memo->victim];
        rec.w->pc = 0; /* empty until the walk is done */
        rec.w->nslots = 0;
        rec.w->bp_used = 0;
        rec.ok = 1;
        rec.bp_first = 1;
        m = &rec;
    }
    frame_t first = fr;
    int n = 0;
    uint64_t touched = 0;
    cache_ref_t c = cache_now();
    for (;;) {
        if (skip > 0)
            skip--;
        else
            pcs[n++] = fr.pc;
        if (n == max) break;
        int step = step_dwarf(&fr, lo, hi, c, &touched, m);
        if (step != PM_STEP_OK) {
            /* no rule for pc (outermost frames end with PM_STEP_END instead):
             * maybe Go's asmcgocall, whose callers are on a goroutine stack */
            if (step == PM_STEP_FAIL) {
                rec.ok = 0;
                if (!skip) n += pm_unwind_go_continue(fr.pc, fr.sp, fr.bp, pcs + n, max - n);
            }
            break;
        }
    }
    pm_objects_give_back(touched);
    if (m && rec.ok && n <= PM_UNWIND_MEMO_FRAMES) {
        pm_unwind_memo_way_t *w = rec.w;
        for (int j = 0; j < n; j++) w->pcs[j] = pcs[j];
        w->n = n;
        w->max = max;
        w->lo = lo;
        w->hi = hi;
        w->sp = first.sp;
        w->bp = first.bp;
        w->pc = first.pc;
        w->site = NULL;
        memo->last = (int32_t)memo->victim;
        memo->victim = (memo->victim + 1) % PM_UNWIND_MEMO_WAYS;
    }
    return n;
}

#else

uint64_t pm_unwind_slow_lookups(void) { return 0; }

#endif /* __x86_64__ */

#if defined(__GNUC__) && !defined(__clang__)
#define PM_CAPTURE_ATTR __attribute__((noipa)) /* no inlining, cloning or splitting */
#else
#define PM_CAPTURE_ATTR PM_NOINLINE
#endif

PM_CAPTURE_ATTR int pm_unwind_capture(uintptr_t *pcs, int max, int skip)
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
    if (pm_objects_dwarf_ready()) {
        frame_t fr = {load_slot(fp + 8), fp + 16, load_slot(fp)};
        if (pm_relaxed_load(&unwind_mode) == PM_UNWIND_DWARF) return walk_dwarf(fr, fp, hi, pcs, max, skip, NULL);
        /* the frame-pointer walk: through the allocator's own frames by
         * their unwind tables, then along %rbp from its caller's frame */
        uintptr_t own_lo = pm_relaxed_load(&own_code_lo), own_hi = pm_relaxed_load(&own_code_hi);
        n = 0;
        uint64_t touched = 0; /* the allocator's own tables only */
        cache_ref_t c = cache_now();
        int step = PM_STEP_OK;
        while (fr.pc >= own_lo && fr.pc < own_hi) {
            if (skip > 0)
                skip--;
            else
                pcs[n++] = fr.pc;
            if (n == max || (step = step_dwarf(&fr, fp, hi, c, &touched, NULL)) != PM_STEP_OK) break;
        }
        pm_objects_give_back(touched);
        if (n == max || step != PM_STEP_OK) return n;
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

PM_CAPTURE_ATTR int pm_unwind_capture_from(uintptr_t efp, uintptr_t *pcs, int max, pm_unwind_memo_t *memo)
{
    if (memo) memo->last = -1;
#if defined(__x86_64__)
    if (max <= 0) return 0;
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    uintptr_t hi = stack_top(fp);
    /* no entry record (realloc, calloc, the aligned family): the DWARF
     * walk from this frame's own record, memo and all */
    int entry = efp > fp;
    if (!entry) efp = fp;
    if (pm_objects_dwarf_ready() && slot_ok(efp, fp, hi) && slot_ok(efp + 8, fp, hi)) {
        frame_t fr = {load_slot(efp + 8), efp + 16, load_slot(efp)};
        uintptr_t own_lo = pm_relaxed_load(&own_code_lo), own_hi = pm_relaxed_load(&own_code_hi);
        int dwarf = pm_relaxed_load(&unwind_mode) == PM_UNWIND_DWARF;
        if (!entry ? dwarf : fr.pc >= 4096 && (fr.pc < own_lo || fr.pc >= own_hi)) {
            int n;
            if (dwarf) {
                n = walk_dwarf(fr, fp, hi, pcs, max, 0, memo);
            } else {
                pcs[0] = fr.pc;
                n = 1 + (max > 1 ? walk_fp(fr.bp, fr.sp, hi, pcs + 1, max - 1, 0) : 0);
            }
            __asm__ volatile("" : "+r"(n) : : "memory");
            return n;
        }
    }
#endif
    (void)efp;
    (void)memo;
    int n = pm_unwind_capture(pcs, max, 0);
    __asm__ volatile("" : "+r"(n) : : "memory");
    return n;
}
