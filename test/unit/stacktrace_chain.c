/* stacktrace_chain.c — a known call chain a -> b -> c -> capture for
 * test_prof_unwind.c.  Built twice by prof_unwind.mk: with CHAIN_PREFIX=om
 * (-fomit-frame-pointer) and CHAIN_PREFIX=fp (-fno-omit-frame-pointer).
 * Each function sits alone in a section named <prefix>_sec_<x>, so the test
 * can check a PC against the linker's __start_/__stop_ symbols.
 * test_prof_unwind.c includes this file with STACKTRACE_CHAIN_DECLS_ONLY
 * defined to get the declarations below and nothing else. */
#include <stdint.h>

struct chain_req {
    uintptr_t *pcs;
    int max, skip, n;
    void (*fn)(struct chain_req *); /* if set, chain_c calls it instead of capturing */
};

/* om_*: built with -fomit-frame-pointer; fp_*: with frame pointers.
 * chain_rec recurses `depth` times, then calls chain_a. */
int om_chain_a(struct chain_req *r);
int om_chain_b(struct chain_req *r);
int om_chain_c(struct chain_req *r);
int om_chain_rec(struct chain_req *r, int depth);
int fp_chain_a(struct chain_req *r);
int fp_chain_b(struct chain_req *r);
int fp_chain_c(struct chain_req *r);
int fp_chain_rec(struct chain_req *r, int depth);

#ifndef STACKTRACE_CHAIN_DECLS_ONLY

#include "pm_prof_unwind.h"

#ifndef CHAIN_PREFIX
#error "define CHAIN_PREFIX (om or fp)"
#endif

#define CHAIN_CAT2(a, b) a##_##b
#define CHAIN_CAT(a, b) CHAIN_CAT2(a, b)
#define CHAIN_NAME(x) CHAIN_CAT(CHAIN_PREFIX, x)
#define CHAIN_STR2(x) #x
#define CHAIN_STR(x) CHAIN_STR2(x)
#define CHAIN_FN(x) __attribute__((noinline, section(CHAIN_STR(CHAIN_PREFIX) "_sec_" #x)))

/* Keeps the compiler from folding the chain into a loop or a jump. */
static volatile int chain_sink;

CHAIN_FN(c) int CHAIN_NAME(chain_c)(struct chain_req *r)
{
    if (r->fn)
        r->fn(r);
    else
        r->n = pm_unwind_capture(r->pcs, r->max, r->skip);
    chain_sink++;
    return r->n + 1;
}

CHAIN_FN(b) int CHAIN_NAME(chain_b)(struct chain_req *r)
{
    int v = CHAIN_NAME(chain_c)(r);
    chain_sink++;
    return v + 1;
}

CHAIN_FN(a) int CHAIN_NAME(chain_a)(struct chain_req *r)
{
    int v = CHAIN_NAME(chain_b)(r);
    chain_sink++;
    return v + 1;
}

CHAIN_FN(rec) int CHAIN_NAME(chain_rec)(struct chain_req *r, int depth)
{
    int v = depth > 0 ? CHAIN_NAME(chain_rec)(r, depth - 1) : CHAIN_NAME(chain_a)(r);
    chain_sink++;
    return v + 1;
}

#endif /* !STACKTRACE_CHAIN_DECLS_ONLY */
