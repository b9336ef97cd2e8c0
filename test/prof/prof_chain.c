/* prof_chain.c — a known call chain chain_a → chain_b → chain_c → malloc,
 * compiled with -O2 -fomit-frame-pointer (see prof.mk), so the profiler's
 * stacks must come through code without frame pointers. */
#include <stdlib.h>

void *chain_a(size_t size);
void *chain_b(size_t size);
void *chain_c(size_t size);

volatile int chain_sink;

__attribute__((noinline)) void *chain_c(size_t size)
{
    void *p = malloc(size);
    chain_sink++;
    return p;
}

__attribute__((noinline)) void *chain_b(size_t size)
{
    void *p = chain_c(size + 1);
    chain_sink++;
    return p;
}

__attribute__((noinline)) void *chain_a(size_t size)
{
    void *p = chain_b(size + 1);
    chain_sink++;
    return p;
}
