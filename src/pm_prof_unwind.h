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

/* As pm_unwind_capture, from the frame record at fp (a caller's, further
 * up this stack, built by __builtin_frame_address(0)): pcs[0] is the
 * return address it holds.  A record outside the stack, or one whose
 * return address is in the allocator's own code (its function was called,
 * not tail-called, from inside the allocator), gives the whole walk from
 * here, whose first frames the caller skips as before. */
int pm_unwind_capture_from(uintptr_t fp, uintptr_t *pcs, int max);

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
