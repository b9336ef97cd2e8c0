/* prof_timeline.c — PROFMALLOC_TIMELINE (doc/timeline.md). */
#include "pm_hunt.h"
void pm_timeline_init(void) {}
void pm_timeline_tick(void) {}
void pm_timeline_on_live(uint64_t live_bytes) { (void)live_bytes; }
void pm_timeline_at_exit(void) {}
