/* needed.c — which loaded objects are the program's own libraries (its
 * DT_NEEDED entries), for the unwinder's give-back of table pages
 * (prof_objects.c, never_unloaded).  Linked into libprofmalloc.so only: the
 * dlopen here would make every static link of libprofmalloc.a warn, and a
 * static program has no such libraries.
 * A name can be satisfied by an object of another file name (a preloaded
 * library with that soname, an audit module's redirection), and a plugin
 * that a constructor opened can carry the name's file name, so the loader
 * is asked: dlopen(name, RTLD_NOLOAD) returns, for a bare name, the object
 * loaded first under it.  Runs once, from profmalloc's constructor. */
#include "pm_elf.h"
#include "pm_prof_unwind.h"

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const char **names;
    int max;
} names_t;

/* The program's DT_NEEDED names (pointers into its string table), from the
 * first object listed. */
static int program_needed(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    names_t *out = data;
    const ElfW(Dyn) *dyn = pm_elf_dynamic(info);
    uintptr_t strtab = 0;
    size_t strsz = 0;
    for (const ElfW(Dyn) *d = dyn; d && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
        if (d->d_tag == DT_STRSZ) strsz = d->d_un.d_val;
    }
    if (strtab && strtab < info->dlpi_addr) strtab += info->dlpi_addr; /* not relocated in place */
    if (!strtab || !strsz || !pm_elf_segment(info, strtab) || !pm_elf_segment(info, strtab + strsz - 1) ||
        ((const char *)strtab)[strsz - 1] != 0)
        return 1;
    int n = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL && n < out->max; d++)
        if (d->d_tag == DT_NEEDED && d->d_un.d_val < strsz) out->names[n++] = (const char *)strtab + d->d_un.d_val;
    return 1; /* the program only */
}

int pm_needed_dynamics(uintptr_t *ld, int max)
{
    const char *names[64] = {0};
    names_t out = {names, max < 64 ? max : 64};
    dl_iterate_phdr(program_needed, &out);
    int n = 0;
    for (int i = 0; i < out.max && names[i]; i++) {
        /* a path or a $ORIGIN name would be looked up from here, not as the
         * loader did at start-up */
        if (strchr(names[i], '/') || strchr(names[i], '$')) continue;
        void *h = dlopen(names[i], RTLD_NOLOAD | RTLD_LAZY);
        if (!h) continue;
        struct link_map *lm = NULL;
        if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_ld) ld[n++] = (uintptr_t)lm->l_ld;
        dlclose(h); /* what this dlopen added: the object stays */
    }
    return n;
}
