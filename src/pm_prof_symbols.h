/* pm_prof_symbols.h — the profile's dictionary and its symbolisation
 * (prof_symbols.c): strings, locations (one per distinct PC), mappings
 * (one per loaded segment, with the object's build id) and functions,
 * named in process from ELF symbol tables.  Used by prof_pprof.c. */
#ifndef PM_PROF_SYMBOLS_H
#define PM_PROF_SYMBOLS_H

#include "pm_prof_encode.h"

#include <link.h>

typedef struct pm_sym_str { uint32_t off, len; } pm_sym_str_t;

/* One distinct pc.  map is an index + 1 into maps (0: no mapping); func is
 * a Function id (0: no name found). */
typedef struct pm_sym_loc {
    uintptr_t pc;
    uint32_t map, func;
} pm_sym_loc_t;

/* One PT_LOAD segment.  [vstart, vend) is the segment exactly; start/offset
 * are that rounded down to the page; limit == vend. */
typedef struct pm_sym_map {
    uint64_t vstart, vend, start, limit, offset;
    uint32_t file, build;
    bool exe, exec;
} pm_sym_map_t;

typedef struct pm_sym_func { uint32_t name, file; } pm_sym_func_t;


/* The tables, all in mapped memory; syms is the symbolizer's scratch. */
typedef struct pm_symbols {
    pm_ebuf_t strdata, strs, locs, maps, funcs, syms;
    pm_etable_t strtab, loctab, functab;
    bool seen_exe;
} pm_symbols_t;


#define PM_SYM_STRS(w) ((const pm_sym_str_t *)(w)->strs.p)
#define PM_SYM_LOCS(w) ((pm_sym_loc_t *)(w)->locs.p)
#define PM_SYM_MAPS(w) ((pm_sym_map_t *)(w)->maps.p)
#define PM_SYM_FUNCS(w) ((pm_sym_func_t *)(w)->funcs.p)
#define PM_SYM_COUNT(b, type) ((b).len / sizeof(type))

/* Zeroes w and sets its tables up; false (ENOMEM) when they cannot be. */
bool pm_symbols_init(pm_symbols_t *w);
/* The string table index of s[0..n), added when new.  0 ("") on failure. */
uint32_t pm_symbols_intern_n(pm_symbols_t *w, const char *s, size_t n);
uint32_t pm_symbols_intern(pm_symbols_t *w, const char *s);
/* The index of pc's location, added when new; UINT32_MAX on failure. */
uint32_t pm_symbols_loc(pm_symbols_t *w, uintptr_t pc);
/* The Function id (index + 1) of (name, file); 0 on failure. */
uint32_t pm_symbols_func(pm_symbols_t *w, uint32_t name, uint32_t file);
bool pm_symbols_failed(const pm_symbols_t *w);
void pm_symbols_free(pm_symbols_t *w);
/* Adds a mapping per loaded segment and names the locations added so far
 * (their map and func).  0, or -1 when w ran out of memory. */
int pm_symbols_resolve(pm_symbols_t *w);
/* dl_iterate_phdr under the lock below (for the legacy writer's maps). */
int pm_symbols_each_object(int (*cb)(struct dl_phdr_info *, size_t, void *), void *arg);
/* The lock held across dl_iterate_phdr; the fork handler takes it first. */
void pm_symbols_lock_all(void);
void pm_symbols_unlock_all(int child);

#endif
