/* pm_prof_unwind.h — call-stack capture for the heap profiler (prof_unwind.c,
 * prof_objects.c).
 * Safe to call from inside malloc, before any constructor, in any thread and
 * from a signal handler: it never allocates, never locks, never uses stdio. */
#ifndef PM_PROF_UNWIND_H
#define PM_PROF_UNWIND_H

#include <stdint.h>

#define PM_UNWIND_DWARF 0 /* default: walk .eh_frame CFI (works without frame pointers) */
#define PM_UNWIND_FP 1    /* follow the %rbp chain only (PROFMALLOC_UNWIND=fp) */

/* Selects the unwinder for later captures; any value other than PM_UNWIND_FP
 * means PM_UNWIND_DWARF.  The mode is process-wide and may change at any
 * time (relaxed atomic); parsing PROFMALLOC_UNWIND is the caller's job. */
void pm_unwind_set_mode(int mode);
int pm_unwind_get_mode(void);

/* Stores into pcs[] the return addresses of the calling stack, innermost
 * first, and returns how many it stored (0 <= n <= max).
 *
 * Let F0 be the function that called pm_unwind_capture, F1 the function
 * that called F0, and so on.  The unwound sequence is
 *     R0 = return address of the call to pm_unwind_capture (a PC in F0),
 *     R1 = return address of the call to F0 (a PC in F1), ...
 * pcs[i] = R(skip + i): with skip == 0, pcs[0] is a PC inside the direct
 * caller of pm_unwind_capture; skip == 1 drops that frame, so pcs[0] is
 * a PC inside the caller's caller.  Negative skip counts as 0.  Frames are
 * counted as they exist at run time: a caller that got inlined into its own
 * caller is no frame, so callers should be noinline where skip matters.
 *
 * Every entry is a return address (the instruction after a call): subtract
 * 1 before symbolizing.  The walk ends early, without error, at the
 * outermost frame (_start, thread start, makecontext), at code without
 * unwind info, at a signal frame, or when the stack looks corrupt. */
int pm_unwind_capture(uintptr_t *pcs, int max, int skip);

/* A thread's last walks from pm_unwind_capture_from, replayed instead of
 * walked again when they would read the same words: the same first frame
 * (PC, stack pointer, %rbp) and every stack word the walk read still
 * holding what it held (%rbp only if a CFA was computed from the first
 * frame's: code without frame pointers keeps data there).  A walk is a
 * function of those alone while every
 * PC's rule is one of an object never unloaded, so only such walks are
 * kept, and only up to PM_UNWIND_MEMO_FRAMES frames (a loop's samples
 * from one call site walk once: test_prof_unwind.c, test_memo_replays). */
#define PM_UNWIND_MEMO_FRAMES 32
#define PM_UNWIND_MEMO_WAYS 2
typedef struct {
    uintptr_t pc, sp, bp; /* the first frame; pc 0: empty */
    uintptr_t lo, hi;     /* the walk's bounds */
    int32_t n, max;       /* pcs stored, for a walk of at most max */
    uint32_t nslots;      /* stack words read, in the walk's order */
    uint32_t bp_used;     /* a CFA was the first frame's %rbp plus an offset */
    const void *site;     /* the caller's for these pcs (prof_sites.c: their stack), NULL when new */
    const void *bucket;   /* and its last (stack, size) bucket, valid when site is */
    uintptr_t pcs[PM_UNWIND_MEMO_FRAMES];
    uintptr_t addr[2 * PM_UNWIND_MEMO_FRAMES], val[2 * PM_UNWIND_MEMO_FRAMES];
} pm_unwind_memo_way_t;
typedef struct pm_unwind_memo_s {
    pm_unwind_memo_way_t way[PM_UNWIND_MEMO_WAYS];
    uint32_t victim; /* the way the next new walk replaces */
    int32_t last;    /* the way that gave or kept the last capture's pcs, or -1 */
} pm_unwind_memo_t;

/* As pm_unwind_capture, from the frame record at fp (a caller's, further
 * up this stack, built by __builtin_frame_address(0)): pcs[0] is the
 * return address it holds.  A record outside the stack, or one whose
 * return address is in the allocator's own code (its function was called,
 * not tail-called, from inside the allocator), gives the whole walk from
 * here, whose first frames the caller skips as before; so does fp 0.
 * With memo (the thread's, or NULL), a DWARF walk is replayed from it or
 * kept in it. */
int pm_unwind_capture_from(uintptr_t fp, uintptr_t *pcs, int max, pm_unwind_memo_t *memo);

/* Walks replayed from a memo so far, about (as pm_unwind_slow_lookups). */
uint64_t pm_unwind_memo_replays(void);

/* How many frames' rules were not found by the PC alone (the loader was
 * asked for their object), about: x86-64 only, for the tests. */
uint64_t pm_unwind_slow_lookups(void);

/* prof_unwind_go.c: where a DWARF walk ended at pc (a return address),
 * with the callee's CFA sp and %rbp bp, continues from Go's asmcgocall
 * onto the goroutine's stack; returns how many return addresses it
 * stored (0: pc is not in a recognised asmcgocall). */
int pm_unwind_go_continue(uintptr_t pc, uintptr_t sp, uintptr_t bp, uintptr_t *pcs, int max);

/* Lists the objects loaded at start-up, whose unwind rules need no check
 * against a reload (they are never unloaded).  Called once from the
 * library's constructor; calls dl_iterate_phdr, so never from malloc. */
void pm_objects_pin_loaded(void);

/* The code in [lo, hi) (the allocator's own, built without frame pointers)
 * is walked with its unwind tables in PM_UNWIND_FP mode too; the %rbp chain
 * starts at the first frame outside it.  Without this, the frame-pointer
 * walk would start from a register the allocator used for data. */
void pm_unwind_set_own_code(uintptr_t lo, uintptr_t hi);

/* needed.c (linked into the shared library only, hence weak): the dynamic
 * sections of the objects the loader loaded for the program's DT_NEEDED
 * names, at most max of them into ld; returns how many.  Calls dlopen, so
 * only from pm_objects_pin_loaded. */
int pm_needed_dynamics(uintptr_t *ld, int max) __attribute__((weak));

#endif
