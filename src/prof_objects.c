/* prof_objects.c — the loaded-object registry of the unwinder: which
 * object's unwind tables cover a PC (_dl_find_object, or a search table
 * built here for a program linked without one), the objects loaded at
 * start-up (whose rules cannot go stale), and giving back the pages of
 * their tables once read.
 * Must never: allocate or call what may (dl_iterate_phdr and dlopen run
 * only from pm_objects_pin_loaded, at the constructor); a lookup runs
 * inside malloc and in signal handlers.
 * Locks: none (atomics; the lists are written once, at the constructor). */
#include "pm.h"
#include "pm_elf.h"
#include "pm_os.h"
#include "pm_prof_objects.h"
#include "pm_prof_unwind.h"
#include "pm_prof_unwind_cfi.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <sys/auxv.h>

#if defined(__x86_64__)

/* Every object loaded when profmalloc's constructor runs, listed once by
 * pm_objects_pin_loaded, outside the unwinder's paths: the program, its
 * libraries and preloads (never unloaded), and whatever other libraries'
 * constructors opened before (which can be closed again: their rules can
 * go stale, and their pages are never given back, never_unloaded). */
#define PM_PINNED_MAX 64
static const uint8_t *_Atomic loaded_hdr[PM_PINNED_MAX];
static _Atomic int loaded_n;
/* Which of them never_unloaded() said stay for good; set before loaded_n
 * counts them. */
static bool loaded_stays[PM_PINNED_MAX];

/* ---- giving back the pages of the unwind tables -------------------------
 * A rule is worked out once per PC and then cached, but working it out
 * reads the object's .eh_frame_hdr and .eh_frame, and the kernel maps the
 * 64 KB of file around every page such a read faults in, resident for
 * good for a few lookups at start-up.  So after a walk that read the tables of a start-up object, the pages
 * from its .eh_frame_hdr to the end of the segment that holds it go back
 * (MADV_DONTNEED: the file's pages stay in the page cache, and the next
 * read maps them again).  Only where no write can be lost: the segment is
 * neither writable nor executable (no relocation, no debugger breakpoint,
 * no patched code lives there) and the object has no text relocations;
 * and only start-up objects, which are never unloaded, so the range can
 * never hold anything else.  At most once per PM_GIVEBACK_NS: tables read
 * since the last time go at the first capture after that
 * (test_prof_unwind.c: test_tables_given_back, test_unloaded_tables_kept). */
#define PM_GIVEBACK_NS (100 * 1000 * 1000)
static uintptr_t giveback_lo[PM_PINNED_MAX], giveback_hi[PM_PINNED_MAX];
static _Atomic uint64_t giveback_pending; /* one bit per start-up object */
static _Atomic uint64_t giveback_ns;      /* monotonic time of the last */

/* The libraries the program links against directly (its DT_NEEDED
 * entries: libstdc++ in a C++ program) stay as long as it runs; needed.c
 * asks the loader which objects they are (by their dynamic sections).  It
 * is linked into the shared library only: its dlopen would make every
 * static link of libprofmalloc.a warn, and a static program has no such
 * libraries.  Without it, only the program, the C library and profmalloc
 * give their tables' pages back. */
#define PM_NEEDED_MAX 64
static uintptr_t needed_ld[PM_NEEDED_MAX];
static int needed_n;

static bool needed_by_program(const struct dl_phdr_info *info)
{
    uintptr_t ld = (uintptr_t)pm_elf_dynamic(info);
    for (int i = 0; ld && i < needed_n; i++)
        if (needed_ld[i] == ld) return true;
    return false;
}

/* Objects listed at start-up are not all there for good: a library's
 * constructor that ran before profmalloc's may have dlopen()ed a plugin,
 * which it can close again, and a madvise on its old range would then
 * zero whatever was mapped there next.  Only the ones that cannot go give
 * their pages back: the program, the libraries it names in DT_NEEDED, the
 * C library (which holds dl_iterate_phdr) and profmalloc itself.  Other
 * libraries' tables stay mapped once read. */
static bool never_unloaded(const struct dl_phdr_info *info, bool program)
{
    return program || needed_by_program(info) || pm_elf_segment(info, (uintptr_t)&dl_iterate_phdr) ||
           pm_elf_segment(info, (uintptr_t)&pm_objects_pin_loaded);
}

/* Object n's range, from its program headers (called before it is listed). */
static void set_giveback_range(const struct dl_phdr_info *info, uintptr_t hdr, int n)
{
    const ElfW(Phdr) *load = pm_elf_segment(info, hdr);
    const ElfW(Dyn) *dyn = pm_elf_dynamic(info);
    if (!load || (load->p_flags & (PF_W | PF_X)) || load->p_filesz != load->p_memsz) return;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++)
        if (dyn->d_tag == DT_TEXTREL || (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL))) return;
    uintptr_t page = pm_os_page_size();
    uintptr_t lo = (hdr + page - 1) & ~(page - 1);
    uintptr_t hi = (info->dlpi_addr + load->p_vaddr + load->p_memsz) & ~(page - 1);
    if (hi > lo) {
        giveback_lo[n] = lo;
        giveback_hi[n] = hi;
    }
}

void pm_objects_give_back(uint64_t touched)
{
    if (touched) atomic_fetch_or_explicit(&giveback_pending, touched, memory_order_relaxed);
    if (PM_LIKELY(!atomic_load_explicit(&giveback_pending, memory_order_relaxed))) return;
    uint64_t now = pm_os_monotonic_ns();
    uint64_t last = atomic_load_explicit(&giveback_ns, memory_order_relaxed);
    /* signed: another thread may have stored a later time than this now */
    if ((int64_t)(now - last) < PM_GIVEBACK_NS ||
        !atomic_compare_exchange_strong_explicit(&giveback_ns, &last, now, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    uint64_t m = atomic_exchange_explicit(&giveback_pending, 0, memory_order_relaxed);
    for (; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        pm_os_discard((void *)giveback_lo[i], giveback_hi[i] - giveback_lo[i]);
    }
}

/* ---- executables without a search table ----------------------------------
 * gcc links static executables without --eh-frame-hdr, so neither the
 * loader nor _dl_find_object knows where their .eh_frame is.  For such a
 * main program, profmalloc's constructor finds .eh_frame through the
 * section headers of /proc/self/exe and builds the table itself, in mapped
 * memory and in .eh_frame_hdr's format (8-byte entries relative to the
 * table), which the walk then uses for PCs inside the program. */
static const uint8_t *_Atomic exe_hdr;
static uintptr_t exe_lo, exe_hi; /* the program's mapping; set before exe_hdr */

#ifndef SHT_X86_64_UNWIND
#define SHT_X86_64_UNWIND 0x70000001 /* gold's type for .eh_frame */
#endif

/* .eh_frame's address and size from the executable's section headers, if
 * /proc/self/exe is the program described by `info` (its program headers
 * are the ones in memory: not so under `ld.so ./prog`, where it is ld.so). */
static bool exe_eh_frame(const struct dl_phdr_info *info, uintptr_t *start, size_t *len)
{
    size_t fsize = 0;
    const void *map = pm_os_map_file("/proc/self/exe", &fsize);
    if (!map) return false;
    if (fsize < sizeof(Elf64_Ehdr)) {
        pm_os_unmap((void *)map, fsize);
        return false;
    }
    const uint8_t *f = map;
    const Elf64_Ehdr *eh = map;
    bool found = false;
    size_t phbytes = (size_t)info->dlpi_phnum * sizeof(ElfW(Phdr));
    if (__builtin_memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
        eh->e_phentsize == sizeof(ElfW(Phdr)) && eh->e_phnum == info->dlpi_phnum && eh->e_phoff < fsize &&
        phbytes <= fsize - eh->e_phoff && __builtin_memcmp(f + eh->e_phoff, info->dlpi_phdr, phbytes) == 0 &&
        eh->e_shentsize == sizeof(Elf64_Shdr) && eh->e_shoff < fsize && eh->e_shstrndx < eh->e_shnum &&
        eh->e_shnum <= (fsize - eh->e_shoff) / sizeof(Elf64_Shdr)) {
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(f + eh->e_shoff);
        const Elf64_Shdr *names = &sh[eh->e_shstrndx];
        for (unsigned i = 0; names->sh_offset < fsize && names->sh_size <= fsize - names->sh_offset &&
                             i < eh->e_shnum && !found;
             i++) {
            static const char want[] = ".eh_frame";
            if (sh[i].sh_name >= names->sh_size || names->sh_size - sh[i].sh_name < sizeof want ||
                !(sh[i].sh_flags & SHF_ALLOC) ||
                (sh[i].sh_type != SHT_PROGBITS && sh[i].sh_type != SHT_X86_64_UNWIND))
                continue;
            if (__builtin_memcmp(f + names->sh_offset + sh[i].sh_name, want, sizeof want) == 0) {
                *start = info->dlpi_addr + sh[i].sh_addr;
                *len = sh[i].sh_size;
                found = true;
            }
        }
    }
    pm_os_unmap((void *)map, fsize);
    return found;
}

/* Builds the search table for the main program; called once, from the
 * constructor. */
static void build_exe_table(const struct dl_phdr_info *info)
{
    uintptr_t start = 0, lo = UINTPTR_MAX, hi = 0;
    size_t len = 0;
    if (!exe_eh_frame(info, &start, &len)) return;
    bool inside = false; /* within one loaded segment: the gaps are unmapped */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t seg = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD) continue;
        if (seg < lo) lo = seg;
        if (seg + ph->p_memsz > hi) hi = seg + ph->p_memsz;
        inside |= (ph->p_flags & PF_R) && start >= seg && start - seg <= ph->p_memsz &&
                  len <= ph->p_memsz - (start - seg);
    }
    if (!inside) return;
    /* only the pages written become resident */
    uint8_t *map = pm_os_map(24 + 16 * (len / 8), 0);
    if (!map) return;
    const uint8_t *h = pm_cfi_build_hdr((const uint8_t *)start, len, lo, hi, map);
    exe_lo = lo;
    exe_hi = hi;
    atomic_store_explicit(&exe_hdr, h, memory_order_release);
}

static int pin_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    bool *first = data;
    int n = atomic_load_explicit(&loaded_n, memory_order_relaxed);
    if (n >= PM_PINNED_MAX) return 1;
    const uint8_t *hdr = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
            hdr = (const uint8_t *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    bool program = *first; /* the main program, listed first */
    if (!hdr && program) {
        build_exe_table(info);
        hdr = atomic_load_explicit(&exe_hdr, memory_order_relaxed);
    }
    *first = false;
    if (hdr) {
        bool stays = never_unloaded(info, program);
        if (hdr != atomic_load_explicit(&exe_hdr, memory_order_relaxed) && stays)
            set_giveback_range(info, (uintptr_t)hdr, n);
        loaded_stays[n] = stays;
        atomic_store_explicit(&loaded_hdr[n], hdr, memory_order_relaxed);
        atomic_store_explicit(&loaded_n, n + 1, memory_order_release);
    }
    return 0;
}

/* _dl_find_object works once the loader has built its object tables: in a
 * dynamically linked program before any constructor or malloc from outside
 * the loader, but in a static executable (no program interpreter) only
 * after libc's own start-up, which allocates first.  There the DWARF walk
 * waits for profmalloc's constructor and earlier captures walk frame
 * records, whose every load is bounds-checked. */
static _Atomic bool dlfo_ready;

/* Was the program loaded by an interpreter?  AT_BASE is its address, but
 * 0 when ld.so was run as a command (`ld.so ./prog`); the program's own
 * headers (AT_PHDR, which ld.so then points at the program) still have
 * PT_INTERP. */
static bool dynamically_linked(void)
{
    if (getauxval(AT_BASE) != 0) return true;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    size_t n = getauxval(AT_PHNUM);
    for (size_t i = 0; ph && i < n; i++)
        if (ph[i].p_type == PT_INTERP) return true;
    return false;
}

bool pm_objects_dwarf_ready(void)
{
    if (PM_LIKELY(atomic_load_explicit(&dlfo_ready, memory_order_relaxed))) return true;
    if (!dynamically_linked()) return false;
    atomic_store_explicit(&dlfo_ready, true, memory_order_relaxed);
    return true;
}

void pm_objects_pin_loaded(void)
{
    bool first = true;
    if (!atomic_load_explicit(&loaded_n, memory_order_acquire)) {
        if (pm_needed_dynamics) needed_n = pm_needed_dynamics(needed_ld, PM_NEEDED_MAX);
        dl_iterate_phdr(pin_object, &first);
    }
    atomic_store_explicit(&dlfo_ready, true, memory_order_relaxed);
}

int pm_objects_pinned(const uint8_t *hdr)
{
    int n = atomic_load_explicit(&loaded_n, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (hdr == atomic_load_explicit(&loaded_hdr[i], memory_order_relaxed)) return i;
    return -1;
}

bool pm_objects_may_give_back(int pin) { return giveback_hi[pin] > giveback_lo[pin]; }

bool pm_objects_stays(int pin) { return pin >= 0 && loaded_stays[pin]; }

const uint8_t *pm_objects_table_of(uintptr_t pc)
{
    struct dl_find_object obj;
    if (_dl_find_object((void *)pc, &obj) != 0) return NULL; /* no object (JIT code) */
    const uint8_t *hdr = obj.dlfo_eh_frame;
    if (!hdr) { /* no search table: ours for the main program, else no unwind info */
        hdr = atomic_load_explicit(&exe_hdr, memory_order_acquire);
        if (!hdr || pc < exe_lo || pc >= exe_hi) return NULL;
    }
    return hdr;
}

#else

void pm_objects_pin_loaded(void) {}

#endif /* __x86_64__ */
