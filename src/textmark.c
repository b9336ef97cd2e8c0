/* textmark.c — compiled twice, as the first and the last object of the
 * library's one relocatable object (see the Makefile), so that
 * pm_text_begin and pm_text_end bracket the allocator's code.  The
 * profiler drops the stack frames that fall between them. */
#include "pm_internal.h"

#ifdef PM_TEXT_END
void pm_text_end(void) { __asm__ volatile(""); }
#else
void pm_text_begin(void) { __asm__ volatile(""); }
#endif
