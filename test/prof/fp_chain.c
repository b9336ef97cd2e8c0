/* fp_chain.c — fp_outer → fp_site → malloc, compiled with frame pointers
 * (see prof.mk; an optimize attribute would do under gcc only), for the
 * profiler's frame-pointer walk (test_frame_pointer_unwind). */
#include <stdlib.h>

void *fp_site(size_t size);
void *fp_outer(size_t size);

volatile int fp_sink;

__attribute__((noinline)) void *fp_site(size_t size)
{
    void *p = malloc(size);
    fp_sink++; /* not a tail call */
    return p;
}

__attribute__((noinline)) void *fp_outer(size_t size)
{
    void *p = fp_site(size);
    fp_sink++;
    return p;
}
