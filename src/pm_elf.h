/* pm_elf.h — reading a loaded object's program headers, as
 * dl_iterate_phdr lists them (prof_objects.c, needed.c).  No allocation, no
 * lock: plain reads of the loader's tables. */
#ifndef PM_ELF_H
#define PM_ELF_H

#include <link.h>
#include <stddef.h>
#include <stdint.h>

/* The loaded segment (PT_LOAD) that holds addr, or NULL. */
static inline const ElfW(Phdr) *pm_elf_segment(const struct dl_phdr_info *info, uintptr_t addr)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t seg = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && addr >= seg && addr - seg < ph->p_memsz) return ph;
    }
    return NULL;
}

/* The object's dynamic section, or NULL. */
static inline const ElfW(Dyn) *pm_elf_dynamic(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            return (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    return NULL;
}

#endif
