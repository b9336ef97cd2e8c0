/* pm_prof_objects.h — the loaded-object registry (prof_objects.c), for
 * the walks in prof_unwind.c.  x86-64 only, but pm_objects_pin_loaded. */
#ifndef PM_PROF_OBJECTS_H
#define PM_PROF_OBJECTS_H

#include <stdbool.h>
#include <stdint.h>

/* The .eh_frame_hdr (whose address is also the base of datarel pointers)
 * of the object holding pc, or NULL: no object, or no unwind tables. */
const uint8_t *pm_objects_table_of(uintptr_t pc);
/* The index of a start-up object's table (its rules cannot go stale), or -1. */
int pm_objects_pinned(const uint8_t *hdr);
/* Whether start-up object pin (or -1) is one that is never unloaded (the
 * program, its DT_NEEDED libraries, the C library, profmalloc): code at
 * its PCs never changes, so a PC alone identifies its rule. */
bool pm_objects_stays(int pin);
/* Whether start-up object pin has pages of tables to give back. */
bool pm_objects_may_give_back(int pin);
/* Called after every walk with the start-up objects whose tables it read
 * (one bit per pinned index): their pages go back, at most every 100 ms. */
void pm_objects_give_back(uint64_t touched);
/* Whether _dl_find_object can be used yet (a static program: only after
 * the constructor ran pm_objects_pin_loaded). */
bool pm_objects_dwarf_ready(void);

#endif
