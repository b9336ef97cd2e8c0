/* prof_unwind_go.c — continues a C stack that cgo entered, from Go's
 * runtime.asmcgocall on the system stack onto the goroutine's stack,
 * along Go's frame pointers (amd64), so that a profile shows the Go
 * caller of the C code that allocated.
 * Must never: read memory it has not bounded (it runs inside malloc, like
 * the unwinder that calls it), allocate, or lock.  No state, no lock.
 * Recognised only where the instructions before asmcgocall's call of the
 * C function are exactly the ones whose stack layout this file reads (two
 * layouts; the older checked with Go 1.19, doc/cgo.md); anywhere else the
 * stack ends at asmcgocall, as it did before (test_prof_unwind_go). */
#include "pm.h"
#include "pm_prof_unwind.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#if defined(__x86_64__)

/* runtime.asmcgocall (asm_amd64.s), on the system stack, just before
 * it calls the C function, in the two layouts Go has had:
 *   MOVQ DI, 48(SP)                     g                  (to Go 1.21)
 *   MOVQ (g_stack+stack_hi)(DI), DI     g.stack.hi, at g+8
 *   SUBQ DX, DI
 *   MOVQ DI, 40(SP)                     g.stack.hi - the goroutine's SP
 *   MOVQ BX, DI; MOVQ BX, CX; CALL AX
 * and, since asmcgocall_landingpad (which jumps to the C function):
 *   MOVQ DI, 8(SP); MOVQ 8(DI), DI; SUBQ DX, DI; MOVQ DI, 0(SP)
 *   CALL runtime.asmcgocall_landingpad  (rel32: any 4 bytes)
 * The return address follows either call. */
static const struct layout {
    uint8_t code[25];
    uint8_t len, any_from; /* bytes [any_from, len) may be anything */
    uint8_t g_off, depth_off;
} layouts[] = {
    {{0x48, 0x89, 0x7c, 0x24, 0x30, 0x48, 0x8b, 0x7f, 0x08, 0x48, 0x29, 0xd7, 0x48,
      0x89, 0x7c, 0x24, 0x28, 0x48, 0x89, 0xdf, 0x48, 0x89, 0xd9, 0xff, 0xd0},
     25, 25, 48, 40},
    {{0x48, 0x89, 0x7c, 0x24, 0x08, 0x48, 0x8b, 0x7f, 0x08, 0x48, 0x29, 0xd7, 0x48,
      0x89, 0x3c, 0x24, 0xe8},
     21, 17, 8, 0},
};

/* The layout whose code ends at pc, or NULL. */
static const struct layout *recognise(uintptr_t pc)
{
    struct dl_find_object obj;
    if (pc < 32 || _dl_find_object((void *)pc, &obj) != 0) return NULL;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        const struct layout *l = &layouts[i];
        if (pc - l->len < (uintptr_t)obj.dlfo_map_start) continue;
        if (memcmp((const void *)(pc - l->len), l->code, l->any_from) == 0) return l;
    }
    return NULL;
}

static int stack_slot_ok(uintptr_t a, uintptr_t lo, uintptr_t hi)
{
    return (a & 7) == 0 && a >= lo && a < hi && hi - a >= 16;
}

int pm_unwind_go_continue(uintptr_t pc, uintptr_t sp, uintptr_t bp, uintptr_t *pcs, int max)
{
    const struct layout *l = max > 0 ? recognise(pc) : NULL;
    if (!l || (sp & 7)) return 0;
    /* sp is the C function's CFA: asmcgocall's stack pointer at the call,
     * inside the frame it made (SUBQ $64 or $16, SP), so both slots are mapped */
    uintptr_t g = *(const uintptr_t *)(sp + l->g_off), depth = *(const uintptr_t *)(sp + l->depth_off);
    if (!g || (g & 7)) return 0; /* no goroutine: asmcgocall ran on g0 */
    uintptr_t lo = *(const uintptr_t *)g, hi = *(const uintptr_t *)(g + 8);
    if (lo >= hi || hi - lo > ((uintptr_t)1 << 30) || depth > hi - lo) return 0;
    uintptr_t gsp = hi - depth; /* the goroutine's SP at asmcgocall's entry */
    if (!stack_slot_ok(gsp, lo, hi)) return 0;
    int n = 0;
    pcs[n++] = *(const uintptr_t *)gsp; /* into asmcgocall's caller */
    /* asmcgocall keeps %rbp, which C code preserves: the frame record of
     * its caller (Go pushes one in every frame that has a size) */
    uintptr_t prev = gsp;
    while (n < max && bp > prev && stack_slot_ok(bp, lo, hi)) {
        uintptr_t ra = *(const uintptr_t *)(bp + 8);
        if (ra < 4096) break;
        pcs[n++] = ra;
        prev = bp;
        bp = *(const uintptr_t *)bp;
    }
    return n;
}

#else

int pm_unwind_go_continue(uintptr_t pc, uintptr_t sp, uintptr_t bp, uintptr_t *pcs, int max)
{
    (void)pc, (void)sp, (void)bp, (void)pcs, (void)max;
    return 0;
}

#endif
