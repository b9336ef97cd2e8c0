/* test_prof_unwind_go.c — src/prof_unwind_go.c on hand-made frames: a "code"
 * array holding asmcgocall's instructions before its call of the C
 * function, a system-stack frame with the goroutine's g and depth where
 * asmcgocall keeps them, and a goroutine stack of frame records.  The real
 * thing is tested end to end by bindings/go/example (make check-go). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "pm_prof_unwind.h"

static const uint8_t code[] = {
    0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
    0x48, 0x89, 0x7c, 0x24, 0x30, 0x48, 0x8b, 0x7f, 0x08, 0x48, 0x29, 0xd7, 0x48,
    0x89, 0x7c, 0x24, 0x28, 0x48, 0x89, 0xdf, 0x48, 0x89, 0xd9, 0xff, 0xd0,
    0xc3, 0xc3, 0xc3, 0xc3,
};
#define RET ((uintptr_t)(code + 16 + 25)) /* after CALL AX */

/* the later layout: g at 8(SP), depth at 0(SP), CALL asmcgocall_landingpad */
static const uint8_t code2[] = {
    0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90,
    0x48, 0x89, 0x7c, 0x24, 0x08, 0x48, 0x8b, 0x7f, 0x08, 0x48, 0x29, 0xd7, 0x48, 0x89, 0x3c, 0x24,
    0xe8, 0x12, 0x34, 0x56, 0x78,
    0xc3, 0xc3, 0xc3, 0xc3,
};
#define RET2 ((uintptr_t)(code2 + 16 + 21))

struct world {
    uintptr_t gstack[64]; /* the goroutine's stack: [lo, hi) */
    uintptr_t g[2];       /* g.stack.lo, g.stack.hi */
    uintptr_t sys[8];     /* asmcgocall's frame on the system stack */
    uintptr_t bp;         /* %rbp in asmcgocall: the wrapper's frame record */
};

static void build(struct world *w)
{
    memset(w, 0, sizeof *w);
    uintptr_t lo = (uintptr_t)&w->gstack[0], hi = (uintptr_t)&w->gstack[64];
    w->g[0] = lo;
    w->g[1] = hi;
    w->gstack[4] = 0x1111;                       /* the goroutine's SP: into the wrapper */
    w->gstack[8] = (uintptr_t)&w->gstack[16];    /* frame records, each [next bp, ra] */
    w->gstack[9] = 0x2222;
    w->gstack[16] = (uintptr_t)&w->gstack[30];
    w->gstack[17] = 0x3333;
    w->gstack[30] = 0;                           /* the outermost frame */
    w->gstack[31] = 0x4444;
    w->sys[5] = hi - (uintptr_t)&w->gstack[4];   /* 40(SP): depth */
    w->sys[6] = (uintptr_t)w->g;                 /* 48(SP): g */
    w->bp = (uintptr_t)&w->gstack[8];
}

static int unwind(struct world *w, uintptr_t pc, uintptr_t *pcs, int max)
{
    return pm_unwind_go_continue(pc, (uintptr_t)w->sys, w->bp, pcs, max);
}

static void test_continues_onto_goroutine_stack(void **state)
{
    (void)state;
    static struct world w;
    build(&w);
    uintptr_t pcs[16];
    assert_int_equal(unwind(&w, RET, pcs, 16), 4);
    assert_int_equal(pcs[0], 0x1111);
    assert_int_equal(pcs[1], 0x2222);
    assert_int_equal(pcs[2], 0x3333);
    assert_int_equal(pcs[3], 0x4444);
    assert_int_equal(unwind(&w, RET, pcs, 2), 2);
    assert_int_equal(unwind(&w, RET, pcs, 0), 0);
}

static void test_later_layout(void **state)
{
    (void)state;
    static struct world w;
    static uint8_t other[sizeof code2];
    uintptr_t pcs[16];
    build(&w);
    w.sys[0] = w.sys[5]; /* depth at 0(SP), g at 8(SP) */
    w.sys[1] = w.sys[6];
    w.sys[5] = w.sys[6] = 0;
    assert_int_equal(unwind(&w, RET2, pcs, 16), 4);
    assert_int_equal(pcs[0], 0x1111);
    assert_int_equal(pcs[3], 0x4444);
    assert_int_equal(unwind(&w, RET, pcs, 16), 0); /* the older layout's slots are empty */
    memcpy(other, code2, sizeof code2);
    other[16 + 20] ^= 0xff; /* the call's target: any */
    assert_int_equal(unwind(&w, (uintptr_t)(other + 16 + 21), pcs, 16), 4);
    for (size_t i = 16; i < 16 + 17; i++) {
        memcpy(other, code2, sizeof code2);
        other[i] ^= 1;
        assert_int_equal(unwind(&w, (uintptr_t)(other + 16 + 21), pcs, 16), 0);
    }
}

static void test_stops_where_not_recognised(void **state)
{
    (void)state;
    static struct world w;
    static uint8_t other[sizeof code];
    uintptr_t pcs[16];
    build(&w);
    /* any other instruction before the return address: another layout */
    for (size_t i = 16; i < 16 + 25; i++) {
        memcpy(other, code, sizeof code);
        other[i] ^= 1;
        assert_int_equal(unwind(&w, (uintptr_t)(other + 16 + 25), pcs, 16), 0);
    }
    assert_int_equal(unwind(&w, RET - 1, pcs, 16), 0);
    assert_int_equal(pm_unwind_go_continue(16, (uintptr_t)w.sys, w.bp, pcs, 16), 0); /* no object */
    /* no goroutine (asmcgocall on g0), or a g whose stack does not hold the SP */
    w.sys[6] = 0;
    assert_int_equal(unwind(&w, RET, pcs, 16), 0);
    build(&w);
    w.sys[5] = 65 * sizeof(uintptr_t);
    assert_int_equal(unwind(&w, RET, pcs, 16), 0);
    build(&w);
    w.g[0] = w.g[1];
    assert_int_equal(unwind(&w, RET, pcs, 16), 0);
}

static void test_frame_chain_bounded(void **state)
{
    (void)state;
    static struct world w;
    uintptr_t pcs[16];
    build(&w);
    w.bp = (uintptr_t)&w.gstack[2]; /* below the goroutine's SP */
    assert_int_equal(unwind(&w, RET, pcs, 16), 1);
    build(&w);
    w.gstack[16] = (uintptr_t)&w.gstack[8]; /* a loop */
    assert_int_equal(unwind(&w, RET, pcs, 16), 3);
    build(&w);
    w.gstack[16] = (uintptr_t)&w.gstack[64]; /* at the top: no room for a record */
    assert_int_equal(unwind(&w, RET, pcs, 16), 3);
    build(&w);
    w.gstack[17] = 8; /* not a code address */
    assert_int_equal(unwind(&w, RET, pcs, 16), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_continues_onto_goroutine_stack),
        cmocka_unit_test(test_later_layout),
        cmocka_unit_test(test_stops_where_not_recognised),
        cmocka_unit_test(test_frame_chain_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
