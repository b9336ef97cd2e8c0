/* pm_triggers.h — one set of dump triggers (prof_triggers.c): profmalloc's
 * own (PROFMALLOC_DUMP_EVERY_*) and gperftools' (HEAPPROFILE, whose rule
 * resets every trigger at each dump). */
#ifndef PM_TRIGGERS_H
#define PM_TRIGGERS_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct pm_trigger {
    uint64_t every_bytes, every_inuse, every_ns; /* 0: that trigger is off */
    int signal;                                  /* 0: none */
    int gperftools;                              /* gperftools' rule */
    void (*fire)(struct pm_trigger *t, const char *kind);
    /* state, changed only by the thread holding `busy` */
    uint64_t next_bytes, next_inuse, next_ns;
    uint64_t last_alloc, high_water;
    uint64_t signals_seen;                       /* the signal's count acted on */
    int complained;
    _Atomic int busy, armed;
} pm_trigger_t;

void pm_trigger_arm(pm_trigger_t *t);
void pm_trigger_check(pm_trigger_t *t, uint64_t alloc_bytes, uint64_t live_bytes);
int pm_trigger_watch_signal(int sig);

#endif
