/* prof_symbols.c — the profile's dictionary (strings, locations,
 * mappings, functions) and in-process symbolisation: mappings and build
 * ids from dl_iterate_phdr, function names from the ELF symbol tables of
 * the loaded file, its separate debug file, or the loaded .dynsym.
 * Must never: call malloc/stdio or anything else that allocates: scratch
 * memory comes from pm_os_map and files are mapped, both unmapped before
 * returning.  Lock: phdr_lock, held across dl_iterate_phdr only (the fork
 * handler takes it first: a child inheriting the loader's lock held would
 * hang in its own dump). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pm.h"
#include "pm_os.h"
#include "pm_prof_symbols.h"

#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>

/* One candidate symbol of the object being symbolized.  name points into
 * a mapped file or into the loaded object; used before either goes away. */
typedef struct sym {
    uint64_t addr, size;
    const char *name;
    uint32_t len, rank;
} sym_t;

typedef struct str_key { const char *s; size_t n; } str_key_t;
typedef struct func_key { uint32_t name, file; } func_key_t;

/* ---- the dictionary ------------------------------------------------------ */


static uint64_t str_hash(const void *ctx, uint32_t i)
{
    const pm_symbols_t *w = ctx;
    return pm_hash_bytes(w->strdata.p + PM_SYM_STRS(w)[i].off, PM_SYM_STRS(w)[i].len, 0);
}

static bool str_eq(const void *ctx, uint32_t i, const void *key)
{
    const pm_symbols_t *w = ctx;
    const str_key_t *k = key;
    return PM_SYM_STRS(w)[i].len == k->n && !memcmp(w->strdata.p + PM_SYM_STRS(w)[i].off, k->s, k->n);
}

uint32_t pm_symbols_intern_n(pm_symbols_t *w, const char *s, size_t n)
{
    str_key_t key = {s, n};
    if (w->strtab.failed) return 0; /* a table that could not grow is never full */
    uint32_t *slot = pm_encode_table_slot(&w->strtab, pm_hash_bytes(s, n, 0), str_eq, w, &key);
    if (*slot) return *slot - 1;
    if (w->strdata.len + n > UINT32_MAX) {
        w->strdata.failed = true;
        return 0;
    }
    pm_sym_str_t e = {(uint32_t)w->strdata.len, (uint32_t)n};
    uint32_t idx = (uint32_t)PM_SYM_COUNT(w->strs, pm_sym_str_t);
    pm_encode_put(&w->strdata, s, n);
    pm_encode_put(&w->strs, &e, sizeof e);
    if (w->strdata.failed || w->strs.failed) return 0;
    *slot = idx + 1;
    pm_encode_table_added(&w->strtab, str_hash, w);
    return idx;
}

uint32_t pm_symbols_intern(pm_symbols_t *w, const char *s) { return pm_symbols_intern_n(w, s, strlen(s)); }

static uint64_t loc_hash(const void *ctx, uint32_t i)
{
    return pm_mix64(PM_SYM_LOCS((const pm_symbols_t *)ctx)[i].pc);
}

static bool loc_eq(const void *ctx, uint32_t i, const void *key)
{
    return PM_SYM_LOCS((const pm_symbols_t *)ctx)[i].pc == *(const uintptr_t *)key;
}

uint32_t pm_symbols_loc(pm_symbols_t *w, uintptr_t pc)
{
    if (w->loctab.failed) return UINT32_MAX;
    uint32_t *slot = pm_encode_table_slot(&w->loctab, pm_mix64(pc), loc_eq, w, &pc);
    if (*slot) return *slot - 1;
    pm_sym_loc_t l = {pc, 0, 0};
    uint32_t idx = (uint32_t)PM_SYM_COUNT(w->locs, pm_sym_loc_t);
    pm_encode_put(&w->locs, &l, sizeof l);
    if (w->locs.failed) return UINT32_MAX;
    *slot = idx + 1;
    pm_encode_table_added(&w->loctab, loc_hash, w);
    return idx;
}

static uint64_t func_hash(const void *ctx, uint32_t i)
{
    const pm_sym_func_t *f = &PM_SYM_FUNCS((const pm_symbols_t *)ctx)[i];
    return pm_mix64((uint64_t)f->name << 32 | f->file);
}

static bool func_eq(const void *ctx, uint32_t i, const void *key)
{
    const pm_sym_func_t *f = &PM_SYM_FUNCS((const pm_symbols_t *)ctx)[i];
    const func_key_t *k = key;
    return f->name == k->name && f->file == k->file;
}

uint32_t pm_symbols_func(pm_symbols_t *w, uint32_t name, uint32_t file)
{
    func_key_t key = {name, file};
    if (w->functab.failed) return 0;
    uint32_t *slot = pm_encode_table_slot(&w->functab, pm_mix64((uint64_t)name << 32 | file),
                                func_eq, w, &key);
    if (*slot) return *slot;
    pm_sym_func_t f = {name, file};
    uint32_t idx = (uint32_t)PM_SYM_COUNT(w->funcs, pm_sym_func_t);
    pm_encode_put(&w->funcs, &f, sizeof f);
    if (w->funcs.failed) return 0;
    *slot = idx + 1;
    pm_encode_table_added(&w->functab, func_hash, w);
    return idx + 1;
}

bool pm_symbols_failed(const pm_symbols_t *w)
{
    return w->strdata.failed || w->strs.failed || w->locs.failed ||
           w->maps.failed || w->funcs.failed || w->syms.failed ||
           w->strtab.failed || w->loctab.failed || w->functab.failed;
}

void pm_symbols_free(pm_symbols_t *w)
{
    pm_encode_free(&w->strdata);
    pm_encode_free(&w->strs);
    pm_encode_free(&w->locs);
    pm_encode_free(&w->maps);
    pm_encode_free(&w->funcs);
    pm_encode_free(&w->syms);
    pm_encode_table_free(&w->strtab);
    pm_encode_table_free(&w->loctab);
    pm_encode_table_free(&w->functab);
}

bool pm_symbols_init(pm_symbols_t *w)
{
    memset(w, 0, sizeof *w);
    return pm_encode_table_resize(&w->strtab, 1024, str_hash, w) &&
           pm_encode_table_resize(&w->loctab, 1024, loc_hash, w) &&
           pm_encode_table_resize(&w->functab, 1024, func_hash, w);
}

/* ---- ELF: build ids and symbols --------------------------------------- */

#define BUILD_ID_MAX 64

/* Scans an ELF note area for NT_GNU_BUILD_ID; writes lowercase hex to hex
 * (2 * BUILD_ID_MAX + 1 bytes) and returns its length, or 0. */
static size_t note_build_id(const uint8_t *p, size_t len, size_t align, char *hex)
{
    if (align != 8) align = 4;
    while (len >= 12) {
        uint32_t namesz, descsz, type;
        memcpy(&namesz, p, 4);
        memcpy(&descsz, p + 4, 4);
        memcpy(&type, p + 8, 4);
        p += 12;
        len -= 12;
        size_t nsz = ((size_t)namesz + align - 1) & ~(align - 1);
        size_t dsz = ((size_t)descsz + align - 1) & ~(align - 1);
        if (nsz > len) return 0;
        const uint8_t *name = p;
        p += nsz;
        len -= nsz;
        if (descsz > len) return 0;
        if (type == NT_GNU_BUILD_ID && namesz == 4 && !memcmp(name, "GNU", 4) &&
            descsz > 0 && descsz <= BUILD_ID_MAX) {
            for (uint32_t i = 0; i < descsz; i++) {
                hex[2 * i] = "0123456789abcdef"[p[i] >> 4];
                hex[2 * i + 1] = "0123456789abcdef"[p[i] & 0xf];
            }
            hex[2 * descsz] = 0;
            return 2 * (size_t)descsz;
        }
        if (dsz > len) return 0;
        p += dsz;
        len -= dsz;
    }
    return 0;
}

static size_t memory_build_id(const struct dl_phdr_info *info, char *hex)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        size_t n = note_build_id(p, ph->p_filesz, ph->p_align, hex);
        if (n) return n;
    }
    return 0;
}

static const uint8_t *map_file(const char *path, size_t *len) { return pm_os_map_file(path, len); }

/* Section headers of a mapped ELF file of our own class, or NULL. */
static const ElfW(Shdr) *elf_sections(const uint8_t *f, size_t len, size_t *n)
{
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)f;
    if (len < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) ||
        eh->e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
        eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff % sizeof(void *) ||
        eh->e_shoff > len || eh->e_shnum > (len - eh->e_shoff) / sizeof(ElfW(Shdr)))
        return NULL;
    *n = eh->e_shnum;
    return (const ElfW(Shdr) *)(f + eh->e_shoff);
}

static bool section_ok(const ElfW(Shdr) *sh, size_t len)
{
    return sh->sh_type == SHT_NOBITS ? false
                                     : sh->sh_offset <= len && sh->sh_size <= len - sh->sh_offset;
}

static size_t file_build_id(const uint8_t *f, size_t len, char *hex)
{
    size_t n;
    const ElfW(Shdr) *sh = elf_sections(f, len, &n);
    for (size_t i = 0; sh && i < n; i++) {
        if (sh[i].sh_type != SHT_NOTE || !section_ok(&sh[i], len)) continue;
        size_t r = note_build_id(f + sh[i].sh_offset, sh[i].sh_size, sh[i].sh_addralign, hex);
        if (r) return r;
    }
    return 0;
}

/* Higher is better among symbols at one address: sized, then fewer leading
 * underscores (write over __write), then global over weak over local. */
static uint32_t sym_rank(const char *name, uint64_t size, unsigned bind)
{
    uint32_t r = size ? 64 : 0, u = 0;
    while (name[u] == '_' && u < 3) u++;
    r += (3 - u) * 4;
    r += bind == STB_GLOBAL ? 2 : bind == STB_WEAK ? 1 : 0;
    return r;
}

static void add_sym(pm_symbols_t *w, const ElfW(Sym) *s, const char *strtab, size_t strsz)
{
    unsigned type = ELF64_ST_TYPE(s->st_info); /* same for ELF32 */
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s->st_shndx == SHN_UNDEF ||
        !s->st_value || s->st_name >= strsz)
        return;
    const char *name = strtab + s->st_name;
    size_t n = strnlen(name, strsz - s->st_name);
    if (!n || n == strsz - s->st_name) return; /* empty or unterminated */
    const char *at = memchr(name, '@', n);       /* "memcpy@@GLIBC_2.14" */
    if (at && at > name) n = (size_t)(at - name);
    sym_t y = {s->st_value, s->st_size, name, (uint32_t)n,
               sym_rank(name, s->st_size, ELF64_ST_BIND(s->st_info))};
    pm_encode_put(&w->syms, &y, sizeof y);
}

/* Adds the FUNC symbols of the first section of `type` in a mapped file;
 * false when there is no such section. */
static bool file_syms(pm_symbols_t *w, const uint8_t *f, size_t len, unsigned type)
{
    size_t n;
    const ElfW(Shdr) *sh = elf_sections(f, len, &n);
    for (size_t i = 0; sh && i < n; i++) {
        if (sh[i].sh_type != type) continue;
        if (!section_ok(&sh[i], len) || sh[i].sh_link >= n ||
            sh[i].sh_entsize != sizeof(ElfW(Sym)) || sh[i].sh_offset % sizeof(void *))
            return false;
        const ElfW(Shdr) *str = &sh[sh[i].sh_link];
        if (!section_ok(str, len)) return false;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)(f + sh[i].sh_offset);
        size_t count = sh[i].sh_size / sizeof *sym;
        if (!pm_encode_reserve(&w->syms, count * sizeof(sym_t))) return false;
        for (size_t j = 1; j < count; j++)
            add_sym(w, &sym[j], (const char *)f + str->sh_offset, str->sh_size);
        return true;
    }
    return false;
}

/* Is [p, p + n) inside one PT_LOAD segment of the loaded object? */
static bool in_object(const struct dl_phdr_info *info, uintptr_t p, size_t n)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && p >= lo && n <= ph->p_memsz && p - lo <= ph->p_memsz - n)
            return true;
    }
    return false;
}

/* Number of .dynsym entries, from DT_GNU_HASH or DT_HASH. */
static size_t dynsym_count(const struct dl_phdr_info *info, uintptr_t gnu, uintptr_t sysv)
{
    if (sysv && in_object(info, sysv, 8)) return ((const uint32_t *)sysv)[1];
    if (!gnu || !in_object(info, gnu, 16)) return 0;
    const uint32_t *h = (const uint32_t *)gnu;
    uint32_t nbuckets = h[0], symoffset = h[1], bloom = h[2];
    const uint32_t *buckets = h + 4 + (size_t)bloom * (sizeof(ElfW(Addr)) / 4);
    if (!in_object(info, (uintptr_t)buckets, (size_t)nbuckets * 4)) return 0;
    const uint32_t *chains = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t i = 0; i < nbuckets; i++)
        if (buckets[i] > last) last = buckets[i];
    if (last < symoffset) return symoffset;
    for (;; last++) {
        const uint32_t *c = &chains[last - symoffset];
        if (!in_object(info, (uintptr_t)c, 4)) return 0;
        if (*c & 1) return (size_t)last + 1;
    }
}

/* Adds the FUNC symbols of .dynsym as the loaded object has it in memory
 * (the file on disk is gone or is not the one that was loaded). */
static void memory_syms(pm_symbols_t *w, const struct dl_phdr_info *info)
{
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t base = info->dlpi_addr;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return;
    uintptr_t symtab = 0, strtab = 0, gnu = 0, sysv = 0;
    size_t strsz = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        /* ld.so relocates these in place unless .dynamic is read-only */
        uintptr_t v = dyn->d_un.d_ptr;
        if (dyn->d_tag != DT_STRSZ && v < base) v += base;
        switch (dyn->d_tag) {
        case DT_SYMTAB: symtab = v; break;
        case DT_STRTAB: strtab = v; break;
        case DT_STRSZ: strsz = dyn->d_un.d_val; break;
        case DT_GNU_HASH: gnu = v; break;
        case DT_HASH: sysv = v; break;
        default: break;
        }
    }
    size_t count = dynsym_count(info, gnu, sysv);
    if (!symtab || !strtab || !count || !in_object(info, strtab, strsz) ||
        count > SIZE_MAX / sizeof(ElfW(Sym)) ||
        !in_object(info, symtab, count * sizeof(ElfW(Sym))))
        return;
    if (!pm_encode_reserve(&w->syms, count * sizeof(sym_t))) return;
    for (size_t j = 1; j < count; j++)
        add_sym(w, &((const ElfW(Sym) *)symtab)[j], (const char *)strtab, strsz);
}

/* By address, best rank first among equal addresses. */
static bool sym_before(const void *pa, const void *pb, const void *ctx)
{
    const sym_t *a = pa, *b = pb;
    (void)ctx;
    return a->addr != b->addr ? a->addr < b->addr : a->rank > b->rank;
}

/* The symbol containing link-time address a, or NULL. */
static const sym_t *find_sym(const sym_t *v, size_t n, uint64_t a)
{
    size_t lo = 0, hi = n; /* first index with addr > a */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].addr <= a) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return NULL;
    size_t i = lo - 1;
    while (i > 0 && v[i - 1].addr == v[i].addr) i--; /* best of its address */
    if (!v[i].size) return &v[i];                    /* unsized: nearest wins */
    /* sized: it, or an enclosing function a few entries back (local labels) */
    for (size_t k = 0; k < 16; k++, i--) {
        if (v[i].size && a - v[i].addr < v[i].size) return &v[i];
        if (!i) break;
    }
    return NULL;
}

/* Names the locations that fell into maps [first, nmaps) of this object. */
static void symbolize(pm_symbols_t *w, const struct dl_phdr_info *info,
                      const char *path, uint32_t file, const char *build, size_t first)
{
    size_t flen = 0, dlen = 0;
    const uint8_t *f = map_file(path, &flen), *dbg = NULL;
    char hex[2 * BUILD_ID_MAX + 1];
    w->syms.len = 0;
    if (f && build[0] && (!file_build_id(f, flen, hex) || strcmp(hex, build))) {
        pm_os_unmap((void *)f, flen); /* not the file that was loaded */
        f = NULL;
    }
    if (f && !file_syms(w, f, flen, SHT_SYMTAB)) {
        w->syms.len = 0;
        if (strlen(build) > 2) {
            /* stripped: the separate debug file a -dbgsym package installs */
            char dpath[64 + 2 * BUILD_ID_MAX];
            size_t n = 25, rest = strlen(build + 2);
            memcpy(dpath, "/usr/lib/debug/.build-id/", 25);
            dpath[n++] = build[0];
            dpath[n++] = build[1];
            dpath[n++] = '/';
            memcpy(dpath + n, build + 2, rest);
            memcpy(dpath + n + rest, ".debug", 7);
            dbg = map_file(dpath, &dlen);
            if (dbg && (!file_build_id(dbg, dlen, hex) || strcmp(hex, build) ||
                        !file_syms(w, dbg, dlen, SHT_SYMTAB)))
                w->syms.len = 0;
        }
        if (!w->syms.len) file_syms(w, f, flen, SHT_DYNSYM);
    }
    if (!w->syms.len) memory_syms(w, info);

    sym_t *v = (sym_t *)w->syms.p;
    size_t nsyms = PM_SYM_COUNT(w->syms, sym_t), nlocs = PM_SYM_COUNT(w->locs, pm_sym_loc_t);
    pm_encode_sort(v, nsyms, sizeof *v, sym_before, NULL);
    for (size_t i = 0; nsyms && i < nlocs; i++) {
        pm_sym_loc_t *l = &PM_SYM_LOCS(w)[i];
        if (l->map <= first || !l->pc) continue;
        const sym_t *s = find_sym(v, nsyms, l->pc - 1 - info->dlpi_addr);
        if (s) l->func = pm_symbols_func(w, pm_symbols_intern_n(w, s->name, s->len), file);
    }
    if (dbg) pm_os_unmap((void *)dbg, dlen);
    if (f) pm_os_unmap((void *)f, flen);
}

/* Held across dl_iterate_phdr, and by the fork handler: a thread forking
 * while another walks the loader's list would leave the child the loader's
 * lock held for good (glibc does not reset it), and the child's own dump
 * would wait on it forever. */
static pm_lock_t phdr_lock = PM_LOCK_INIT;

void pm_symbols_lock_all(void) { pm_lock(&phdr_lock); }

void pm_symbols_unlock_all(int child)
{
    if (child) pm_lock_reset(&phdr_lock);
    else pm_unlock(&phdr_lock);
}

/* dl_iterate_phdr callback: one Mapping per PT_LOAD segment of each object,
 * locations assigned to the segment that holds them, then named. */
static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    pm_symbols_t *w = data;
    const char *name = info->dlpi_name, *path = name;
    char *exe = NULL; /* mapped, not on the stack: dumps run on small stacks too */
    bool is_exe = false;
    (void)size;
    if (!name || !name[0]) {
        if (w->seen_exe) return 0;
        w->seen_exe = is_exe = true;
        exe = pm_os_map(PATH_MAX, 0); /* no give-back under the loader's lock */
        if (!exe) {
            w->maps.failed = true; /* the dump fails with ENOMEM */
            return 1;
        }
        ssize_t n = pm_os_readlink("/proc/self/exe", exe, PATH_MAX - 1);
        exe[n > 0 ? n : 0] = 0;
        name = exe;
        path = "/proc/self/exe";
    } else if (!strchr(name, '/')) {
        return 0; /* linux-vdso.so.1 and other objects without a file */
    }
    char build[2 * BUILD_ID_MAX + 1] = "";
    memory_build_id(info, build);
    uint32_t file = pm_symbols_intern(w, name), build_str = pm_symbols_intern(w, build);
    if (exe) pm_os_unmap(exe, PATH_MAX);
    size_t first = PM_SYM_COUNT(w->maps, pm_sym_map_t);
    uintptr_t page = pm_os_page_size();
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !ph->p_memsz) continue;
        uint64_t vstart = info->dlpi_addr + ph->p_vaddr, delta = vstart & (page - 1);
        pm_sym_map_t m = {vstart, vstart + ph->p_memsz, vstart - delta, vstart + ph->p_memsz,
                   ph->p_offset >= delta ? ph->p_offset - delta : 0, file, build_str,
                   is_exe, (ph->p_flags & PF_X) != 0};
        pm_encode_put(&w->maps, &m, sizeof m);
    }
    size_t last = PM_SYM_COUNT(w->maps, pm_sym_map_t), nlocs = PM_SYM_COUNT(w->locs, pm_sym_loc_t), hits = 0;
    if (pm_symbols_failed(w)) return 1;
    for (size_t i = 0; i < nlocs; i++) {
        pm_sym_loc_t *l = &PM_SYM_LOCS(w)[i];
        uint64_t a = l->pc - 1; /* the call instruction, not the one after */
        for (size_t j = first; !l->map && l->pc && j < last; j++)
            if (a >= PM_SYM_MAPS(w)[j].vstart && a < PM_SYM_MAPS(w)[j].vend) {
                l->map = (uint32_t)j + 1;
                hits++;
            }
    }
    if (hits) symbolize(w, info, path, file, build, first);
    return pm_symbols_failed(w) ? 1 : 0;
}

int pm_symbols_resolve(pm_symbols_t *w)
{
    pm_lock(&phdr_lock);
    dl_iterate_phdr(phdr_cb, w);
    pm_unlock(&phdr_lock);
    return pm_symbols_failed(w) ? -1 : 0;
}

int pm_symbols_each_object(int (*cb)(struct dl_phdr_info *, size_t, void *), void *arg)
{
    pm_lock(&phdr_lock);
    int rc = dl_iterate_phdr(cb, arg);
    pm_unlock(&phdr_lock);
    return rc;
}
