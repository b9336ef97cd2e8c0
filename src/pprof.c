/* pprof.c — the profile writers: a pm_prof_snapshot_t becomes a gzip'd
 * pprof profile.proto in Go's heap layout, or gperftools' legacy heap text.
 * Owns: the protobuf encoder, the stored-block gzip container, mappings and
 * build ids from dl_iterate_phdr, in-process symbol names from ELF tables.
 * Must never: call malloc/free/stdio/qsort or anything else that allocates
 * (the process's malloc is us): scratch memory comes from pm_os_map and is
 * unmapped before returning; bytes leave through pm_os_write_all.
 * Lock: none.  Called with no allocator or profiler lock held; only the
 * dynamic loader's own lock is held inside the dl_iterate_phdr callback. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pm.h"
#include "pm_os.h"
#include "pm_pprof.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- growable scratch buffers in mmap'd memory ------------------------ */

/* Invariant: len <= cap; cap == 0 iff p == NULL; failed is sticky. */
typedef struct buf {
    uint8_t *p;
    size_t len, cap;
    bool failed;
} buf_t;

static bool buf_reserve(buf_t *b, size_t extra)
{
    if (b->failed) return false;
    if (extra <= b->cap - b->len) return true;
    size_t need = b->len + extra, cap = b->cap ? b->cap : 16384;
    if (need < b->len) goto fail;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) goto fail;
        cap *= 2;
    }
    uint8_t *p = pm_os_map(cap, 0);
    if (!p) goto fail;
    if (b->len) memcpy(p, b->p, b->len);
    if (b->cap) pm_os_unmap(b->p, b->cap);
    b->p = p;
    b->cap = cap;
    return true;
fail:
    b->failed = true;
    return false;
}

static void *buf_add(buf_t *b, size_t n)
{
    if (!buf_reserve(b, n)) return NULL;
    if (!b->p) return NULL; /* n == 0 on an empty buffer (fuzz_alloc) */
    void *r = b->p + b->len;
    b->len += n;
    return r;
}

static void buf_put(buf_t *b, const void *d, size_t n)
{
    void *r = buf_add(b, n);
    if (r && n) memcpy(r, d, n);
}

static void buf_free(buf_t *b)
{
    if (b->cap) pm_os_unmap(b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- open-addressing hash tables of item indexes ---------------------- */

/* slot[i] is an item index + 1, or 0 when empty; count * 2 <= mask + 1. */
typedef struct table {
    uint32_t *slot;
    size_t mask, count;
    bool failed;
} table_t;

typedef uint64_t (*hash_fn)(const void *ctx, uint32_t item);
typedef bool (*eq_fn)(const void *ctx, uint32_t item, const void *key);

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint64_t hash_bytes(const void *d, size_t n)
{
    const uint8_t *p = d;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return mix64(h ^ n);
}

static bool table_resize(table_t *t, size_t slots, hash_fn h, const void *ctx)
{
    uint32_t *s = pm_os_map(slots * sizeof *s, 0);
    if (!s) {
        t->failed = true;
        return false;
    }
    for (size_t i = 0; t->slot && i <= t->mask; i++) {
        uint32_t v = t->slot[i];
        if (!v) continue;
        size_t j = h(ctx, v - 1) & (slots - 1);
        while (s[j]) j = (j + 1) & (slots - 1);
        s[j] = v;
    }
    if (t->slot) pm_os_unmap(t->slot, (t->mask + 1) * sizeof *t->slot);
    t->slot = s;
    t->mask = slots - 1;
    return true;
}

/* The slot holding an item equal to key, or the empty slot where it goes. */
static uint32_t *table_slot(table_t *t, uint64_t h, eq_fn eq, const void *ctx,
                            const void *key)
{
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t v = t->slot[i];
        if (!v || eq(ctx, v - 1, key)) return &t->slot[i];
    }
}

/* Call after filling an empty slot returned by table_slot. */
static void table_added(table_t *t, hash_fn h, const void *ctx)
{
    if (++t->count * 2 > t->mask + 1) table_resize(t, (t->mask + 1) * 2, h, ctx);
}

static void table_free(table_t *t)
{
    if (t->slot) pm_os_unmap(t->slot, (t->mask + 1) * sizeof *t->slot);
    t->slot = NULL;
}

/* ---- the writer's state ----------------------------------------------- */

typedef struct str_ent { uint32_t off, len; } str_ent_t;

/* One distinct pc.  map is an index + 1 into maps (0: no mapping); func is
 * a Function id (0: no name found). */
typedef struct loc {
    uintptr_t pc;
    uint32_t map, func;
} loc_t;

/* One PT_LOAD segment.  [vstart, vend) is the segment exactly; start/offset
 * are that rounded down to the page; limit == vend. */
typedef struct map_ent {
    uint64_t vstart, vend, start, limit, offset;
    uint32_t file, build;
    bool exe, exec;
} map_t;

typedef struct func_ent { uint32_t name, file; } func_t;

/* One candidate symbol of the object being symbolized.  name points into
 * a mapped file or into the loaded object; used before either goes away. */
typedef struct sym {
    uint64_t addr, size;
    const char *name;
    uint32_t len, rank;
} sym_t;

typedef struct writer {
    buf_t strdata, strs, locs, maps, funcs, syms;
    table_t strtab, loctab, functab;
    bool seen_exe;
} writer_t;

typedef struct str_key { const char *s; size_t n; } str_key_t;
typedef struct func_key { uint32_t name, file; } func_key_t;

#define STRS(w) ((const str_ent_t *)(w)->strs.p)
#define LOCS(w) ((loc_t *)(w)->locs.p)
#define MAPS(w) ((map_t *)(w)->maps.p)
#define FUNCS(w) ((func_t *)(w)->funcs.p)
#define COUNT(b, type) ((b).len / sizeof(type))

static uint64_t str_hash(const void *ctx, uint32_t i)
{
    const writer_t *w = ctx;
    return hash_bytes(w->strdata.p + STRS(w)[i].off, STRS(w)[i].len);
}

static bool str_eq(const void *ctx, uint32_t i, const void *key)
{
    const writer_t *w = ctx;
    const str_key_t *k = key;
    return STRS(w)[i].len == k->n && !memcmp(w->strdata.p + STRS(w)[i].off, k->s, k->n);
}

/* The string table index of s[0..n), added when new.  0 ("") on failure. */
static uint32_t intern_n(writer_t *w, const char *s, size_t n)
{
    str_key_t key = {s, n};
    if (w->strtab.failed) return 0; /* a table that could not grow is never full */
    uint32_t *slot = table_slot(&w->strtab, hash_bytes(s, n), str_eq, w, &key);
    if (*slot) return *slot - 1;
    if (w->strdata.len + n > UINT32_MAX) {
        w->strdata.failed = true;
        return 0;
    }
    str_ent_t e = {(uint32_t)w->strdata.len, (uint32_t)n};
    uint32_t idx = (uint32_t)COUNT(w->strs, str_ent_t);
    buf_put(&w->strdata, s, n);
    buf_put(&w->strs, &e, sizeof e);
    if (w->strdata.failed || w->strs.failed) return 0;
    *slot = idx + 1;
    table_added(&w->strtab, str_hash, w);
    return idx;
}

static uint32_t intern(writer_t *w, const char *s) { return intern_n(w, s, strlen(s)); }

static uint64_t loc_hash(const void *ctx, uint32_t i)
{
    return mix64(LOCS((const writer_t *)ctx)[i].pc);
}

static bool loc_eq(const void *ctx, uint32_t i, const void *key)
{
    return LOCS((const writer_t *)ctx)[i].pc == *(const uintptr_t *)key;
}

/* The index of pc's location, added when new; UINT32_MAX on failure. */
static uint32_t loc_index(writer_t *w, uintptr_t pc)
{
    if (w->loctab.failed) return UINT32_MAX;
    uint32_t *slot = table_slot(&w->loctab, mix64(pc), loc_eq, w, &pc);
    if (*slot) return *slot - 1;
    loc_t l = {pc, 0, 0};
    uint32_t idx = (uint32_t)COUNT(w->locs, loc_t);
    buf_put(&w->locs, &l, sizeof l);
    if (w->locs.failed) return UINT32_MAX;
    *slot = idx + 1;
    table_added(&w->loctab, loc_hash, w);
    return idx;
}

static uint64_t func_hash(const void *ctx, uint32_t i)
{
    const func_t *f = &FUNCS((const writer_t *)ctx)[i];
    return mix64((uint64_t)f->name << 32 | f->file);
}

static bool func_eq(const void *ctx, uint32_t i, const void *key)
{
    const func_t *f = &FUNCS((const writer_t *)ctx)[i];
    const func_key_t *k = key;
    return f->name == k->name && f->file == k->file;
}

/* The Function id (index + 1) of (name, file); 0 on failure. */
static uint32_t func_id(writer_t *w, uint32_t name, uint32_t file)
{
    func_key_t key = {name, file};
    if (w->functab.failed) return 0;
    uint32_t *slot = table_slot(&w->functab, mix64((uint64_t)name << 32 | file),
                                func_eq, w, &key);
    if (*slot) return *slot;
    func_t f = {name, file};
    uint32_t idx = (uint32_t)COUNT(w->funcs, func_t);
    buf_put(&w->funcs, &f, sizeof f);
    if (w->funcs.failed) return 0;
    *slot = idx + 1;
    table_added(&w->functab, func_hash, w);
    return idx + 1;
}

static bool writer_failed(const writer_t *w)
{
    return w->strdata.failed || w->strs.failed || w->locs.failed ||
           w->maps.failed || w->funcs.failed || w->syms.failed ||
           w->strtab.failed || w->loctab.failed || w->functab.failed;
}

static void writer_free(writer_t *w)
{
    buf_free(&w->strdata);
    buf_free(&w->strs);
    buf_free(&w->locs);
    buf_free(&w->maps);
    buf_free(&w->funcs);
    buf_free(&w->syms);
    table_free(&w->strtab);
    table_free(&w->loctab);
    table_free(&w->functab);
}

/* ---- small formatting helpers (no stdio) ------------------------------ */

static size_t fmt_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0, i = 0;
    do tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10));
    while (n) out[i++] = tmp[--n];
    return i;
}

/* v right-aligned in at least width characters, like printf("%*llu"). */
static size_t fmt_u64_pad(char *out, uint64_t v, size_t width)
{
    char tmp[20];
    size_t n = fmt_u64(tmp, v), i = 0;
    while (n + i < width) out[i++] = ' ';
    memcpy(out + i, tmp, n);
    return i + n;
}

static size_t fmt_hex(char *out, uint64_t v)
{
    int shift = 60;
    size_t i = 0;
    out[i++] = '0';
    out[i++] = 'x';
    while (shift > 0 && !((v >> shift) & 0xf)) shift -= 4;
    for (; shift >= 0; shift -= 4) out[i++] = "0123456789abcdef"[(v >> shift) & 0xf];
    return i;
}

/* v in hex without the 0x, as /proc/self/maps prints addresses. */
static size_t fmt_hex_bare(char *out, uint64_t v)
{
    size_t n = fmt_hex(out, v) - 2;
    memmove(out, out + 2, n);
    return n;
}

/* The kernel's page size (segments are mapped in whole pages). */
static uintptr_t kernel_page(void)
{
    uintptr_t page = getauxval(AT_PAGESZ);
    return page && !(page & (page - 1)) ? page : 4096;
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

/* A read-only private mapping of a whole file, or NULL. */
static const uint8_t *map_file(const char *path, size_t *len)
{
    int fd = pm_os_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (uint64_t)st.st_size < SIZE_MAX) {
        *len = (size_t)st.st_size;
        p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    pm_os_close(fd);
    return p == MAP_FAILED ? NULL : p;
}

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

static void add_sym(writer_t *w, const ElfW(Sym) *s, const char *strtab, size_t strsz)
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
    buf_put(&w->syms, &y, sizeof y);
}

/* Adds the FUNC symbols of the first section of `type` in a mapped file;
 * false when there is no such section. */
static bool file_syms(writer_t *w, const uint8_t *f, size_t len, unsigned type)
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
        if (!buf_reserve(&w->syms, count * sizeof(sym_t))) return false;
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
static void memory_syms(writer_t *w, const struct dl_phdr_info *info)
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
    if (!buf_reserve(&w->syms, count * sizeof(sym_t))) return;
    for (size_t j = 1; j < count; j++)
        add_sym(w, &((const ElfW(Sym) *)symtab)[j], (const char *)strtab, strsz);
}

static bool sym_before(const sym_t *a, const sym_t *b)
{
    return a->addr != b->addr ? a->addr < b->addr : a->rank > b->rank;
}

static void sift_down(sym_t *v, size_t root, size_t n)
{
    for (;;) {
        size_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && sym_before(&v[c], &v[c + 1])) c++;
        if (!sym_before(&v[root], &v[c])) return;
        sym_t t = v[root];
        v[root] = v[c];
        v[c] = t;
        root = c;
    }
}

/* Heapsort: by address, best rank first among equal addresses. */
static void sort_syms(sym_t *v, size_t n)
{
    for (size_t i = n / 2; i-- > 0;) sift_down(v, i, n);
    for (size_t end = n; end > 1; end--) {
        sym_t t = v[0];
        v[0] = v[end - 1];
        v[end - 1] = t;
        sift_down(v, 0, end - 1);
    }
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
static void symbolize(writer_t *w, const struct dl_phdr_info *info,
                      const char *path, uint32_t file, const char *build, size_t first)
{
    size_t flen = 0, dlen = 0;
    const uint8_t *f = map_file(path, &flen), *dbg = NULL;
    char hex[2 * BUILD_ID_MAX + 1];
    w->syms.len = 0;
    if (f && build[0] && (!file_build_id(f, flen, hex) || strcmp(hex, build))) {
        munmap((void *)f, flen); /* not the file that was loaded */
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
    size_t nsyms = COUNT(w->syms, sym_t), nlocs = COUNT(w->locs, loc_t);
    sort_syms(v, nsyms);
    for (size_t i = 0; nsyms && i < nlocs; i++) {
        loc_t *l = &LOCS(w)[i];
        if (l->map <= first || !l->pc) continue;
        const sym_t *s = find_sym(v, nsyms, l->pc - 1 - info->dlpi_addr);
        if (s) l->func = func_id(w, intern_n(w, s->name, s->len), file);
    }
    if (dbg) munmap((void *)dbg, dlen);
    if (f) munmap((void *)f, flen);
}

/* Held across dl_iterate_phdr, and by the fork handler: a thread forking
 * while another walks the loader's list would leave the child the loader's
 * lock held for good (glibc does not reset it), and the child's own dump
 * would wait on it forever. */
static pm_lock_t phdr_lock = PM_LOCK_INIT;

void pm_pprof_lock_all(void) { pm_lock(&phdr_lock); }

void pm_pprof_unlock_all(int child)
{
    if (child) pm_lock_reset(&phdr_lock);
    else pm_unlock(&phdr_lock);
}

/* dl_iterate_phdr callback: one Mapping per PT_LOAD segment of each object,
 * locations assigned to the segment that holds them, then named. */
static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    writer_t *w = data;
    const char *name = info->dlpi_name, *path = name;
    char *exe = NULL; /* mapped, not on the stack: dumps run on small stacks too */
    bool is_exe = false;
    (void)size;
    if (!name || !name[0]) {
        if (w->seen_exe) return 0;
        w->seen_exe = is_exe = true;
        exe = pm_os_map(PATH_MAX, 0);
        if (!exe) {
            w->maps.failed = true; /* the dump fails with ENOMEM */
            return 1;
        }
        ssize_t n = readlink("/proc/self/exe", exe, PATH_MAX - 1);
        exe[n > 0 ? n : 0] = 0;
        name = exe;
        path = "/proc/self/exe";
    } else if (!strchr(name, '/')) {
        return 0; /* linux-vdso.so.1 and other objects without a file */
    }
    char build[2 * BUILD_ID_MAX + 1] = "";
    memory_build_id(info, build);
    uint32_t file = intern(w, name), build_str = intern(w, build);
    if (exe) pm_os_unmap(exe, PATH_MAX);
    size_t first = COUNT(w->maps, map_t);
    uintptr_t page = kernel_page();
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !ph->p_memsz) continue;
        uint64_t vstart = info->dlpi_addr + ph->p_vaddr, delta = vstart & (page - 1);
        map_t m = {vstart, vstart + ph->p_memsz, vstart - delta, vstart + ph->p_memsz,
                   ph->p_offset >= delta ? ph->p_offset - delta : 0, file, build_str,
                   is_exe, (ph->p_flags & PF_X) != 0};
        buf_put(&w->maps, &m, sizeof m);
    }
    size_t last = COUNT(w->maps, map_t), nlocs = COUNT(w->locs, loc_t), hits = 0;
    if (writer_failed(w)) return 1;
    for (size_t i = 0; i < nlocs; i++) {
        loc_t *l = &LOCS(w)[i];
        uint64_t a = l->pc - 1; /* the call instruction, not the one after */
        for (size_t j = first; !l->map && l->pc && j < last; j++)
            if (a >= MAPS(w)[j].vstart && a < MAPS(w)[j].vend) {
                l->map = (uint32_t)j + 1;
                hits++;
            }
    }
    if (hits) symbolize(w, info, path, file, build, first);
    return writer_failed(w) ? 1 : 0;
}

/* ---- protobuf encoding ------------------------------------------------ */

static void pb_varint(buf_t *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        tmp[n++] = c | (v ? 0x80 : 0);
    } while (v);
    buf_put(b, tmp, n);
}

static void pb_key(buf_t *b, unsigned field, unsigned wire)
{
    pb_varint(b, (uint64_t)field << 3 | wire);
}

/* A varint field; zero is the default and is left out. */
static void pb_uint(buf_t *b, unsigned field, uint64_t v)
{
    if (!v) return;
    pb_key(b, field, 0);
    pb_varint(b, v);
}

static void pb_bytes(buf_t *b, unsigned field, const void *d, size_t n)
{
    pb_key(b, field, 2);
    pb_varint(b, n);
    buf_put(b, d, n);
}

static void pb_msg(buf_t *b, unsigned field, const buf_t *sub)
{
    pb_bytes(b, field, sub->p, sub->len);
}

/* ValueType {type, unit} */
static void pb_value_type(buf_t *out, buf_t *sub, unsigned field, uint32_t type, uint32_t unit)
{
    sub->len = 0;
    pb_uint(sub, 1, type);
    pb_uint(sub, 2, unit);
    pb_msg(out, field, sub);
}

/* ---- gzip container: stored deflate blocks + CRC32 -------------------- */

static void crc_table(uint32_t t[256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
    }
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int gzip_write(int fd, const uint8_t *data, size_t len)
{
    static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 /* unix */};
    uint32_t table[256], crc = 0xffffffffu; /* on the stack: no shared state */
    crc_table(table);
    if (pm_os_write_all(fd, header, sizeof header)) return -1;
    size_t off = 0;
    do {
        size_t n = len - off > 65535 ? 65535 : len - off;
        uint8_t bh[5] = {off + n == len ? 1 : 0, /* BFINAL, BTYPE 00 (stored) */
                         (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)~n, (uint8_t)(~n >> 8)};
        for (size_t i = 0; i < n; i++) crc = table[(crc ^ data[off + i]) & 0xff] ^ (crc >> 8);
        if (pm_os_write_all(fd, bh, sizeof bh) || pm_os_write_all(fd, data + off, n))
            return -1;
        off += n;
    } while (off < len);
    uint8_t trailer[8];
    put_le32(trailer, ~crc);
    put_le32(trailer + 4, (uint32_t)len);
    return pm_os_write_all(fd, trailer, sizeof trailer);
}

/* ---- profile.proto ---------------------------------------------------- */

/* Fixed string table indexes, interned first in this order. */
enum { S_EMPTY, S_ALLOC_OBJECTS, S_COUNT, S_ALLOC_SPACE, S_BYTES, S_INUSE_OBJECTS,
       S_INUSE_SPACE, S_SPACE, S_FIXED };

static void add_comment(writer_t *w, buf_t *ids, const char *what, uint64_t v, const char *unit)
{
    char line[128];
    size_t n = strlen("profmalloc: "), k = strlen(what);
    memcpy(line, "profmalloc: ", n);
    memcpy(line + n, what, k);
    n += k;
    line[n++] = '=';
    n += fmt_u64(line + n, v);
    k = strlen(unit);
    memcpy(line + n, unit, k);
    n += k;
    uint32_t id = intern_n(w, line, n);
    buf_put(ids, &id, sizeof id);
}

/* Why has_functions stays false although Function/Line are filled in:
 * pprof skips local symbolization of any mapping that has has_functions,
 * has_filenames or has_line_numbers set (symbolizer.go newMapping), and
 * then -lines has no file:line.  With all three false, pprof re-symbolizes
 * each mapping whose binary it can open (addr2line/llvm-symbolizer, or in
 * `go tool pprof` Go's own DWARF reader): its names and file:line replace
 * ours.  Where the binary is missing, stripped of DWARF (system libraries),
 * or has another build id, or the reader finds nothing for an address, it
 * keeps the Location.line we wrote, so names still show.  Cost: where
 * DWARF has a line but no name (go tool pprof on gcc's .constprop clones)
 * the name shown is empty.  Our Line.line is 0 (no DWARF in-process). */
static int write_proto(int fd, const pm_prof_snapshot_t *s, writer_t *w)
{
    static const char *const fixed[S_FIXED] = {
        "", "alloc_objects", "count", "alloc_space", "bytes", "inuse_objects",
        "inuse_space", "space"};
    buf_t out = {0}, sub = {0}, sub2 = {0}, pk = {0}, comments = {0}, order = {0};
    int rc = -1, err = ENOMEM;

    for (size_t i = 0; i < S_FIXED; i++) intern(w, fixed[i]);
    const profmalloc_stats_t *t = &s->totals;
    add_comment(w, &comments, "in_use", t->in_use, " bytes");
    add_comment(w, &comments, "requested", t->requested, " bytes");
    add_comment(w, &comments, "mapped", t->mapped, " bytes");
    add_comment(w, &comments, "resident_estimate", t->resident_estimate, " bytes");
    add_comment(w, &comments, "thread_cache", t->thread_cache, " bytes");
    add_comment(w, &comments, "central_cache", t->central_cache, " bytes");
    add_comment(w, &comments, "fragmentation", t->fragmentation, " bytes");
    add_comment(w, &comments, "pageheap_free", t->pageheap_free, " bytes");
    add_comment(w, &comments, "released", t->released, " bytes");
    add_comment(w, &comments, "metadata", t->metadata, " bytes");
    add_comment(w, &comments, "threads", t->threads, "");
    add_comment(w, &comments, "lock_contention", t->lock_contention, "");
    add_comment(w, &comments, "samples_live", t->samples_live, "");
    add_comment(w, &comments, "sample_rate", s->sample_rate, " bytes");

    for (size_t i = 0; i < s->nsamples; i++)
        for (uint32_t d = 0; d < s->samples[i].depth; d++)
            loc_index(w, s->samples[i].pcs[d]);
    if (writer_failed(w)) goto done;
    pm_lock(&phdr_lock);
    dl_iterate_phdr(phdr_cb, w);
    pm_unlock(&phdr_lock);
    if (writer_failed(w)) goto done;

    /* Mapping order: the executable's code segment first, because pprof
     * takes mapping[0] as the main binary and `pprof <binary> <profile>`
     * points only that one at <binary>; `go tool pprof` then derives the
     * load bias as start - p_vaddr of the first PF_X PT_LOAD, exact when
     * that p_vaddr is page-aligned (GNU ld's layout).  Then the
     * executable's other segments, then every other object. */
    size_t nmaps = COUNT(w->maps, map_t), nlocs = COUNT(w->locs, loc_t);
    uint32_t *id_of = buf_add(&order, nmaps * 2 * sizeof(uint32_t) + 1);
    if (!id_of) goto done;
    uint32_t *seq = id_of + nmaps, nseq = 0;
    for (int pass = 0; pass < 3; pass++)
        for (size_t j = 0; j < nmaps; j++) {
            const map_t *m = &MAPS(w)[j];
            if ((pass == 0 && m->exe && m->exec) || (pass == 1 && m->exe && !m->exec) ||
                (pass == 2 && !m->exe)) {
                seq[nseq++] = (uint32_t)j;
                id_of[j] = nseq;
            }
        }

    for (unsigned v = 0; v < 4; v++) {
        static const uint8_t types[4][2] = {{S_ALLOC_OBJECTS, S_COUNT}, {S_ALLOC_SPACE, S_BYTES},
                                            {S_INUSE_OBJECTS, S_COUNT}, {S_INUSE_SPACE, S_BYTES}};
        pb_value_type(&out, &sub, 1, types[v][0], types[v][1]);
    }
    for (size_t i = 0; i < s->nsamples; i++) {
        const pm_prof_sample_t *x = &s->samples[i];
        sub.len = 0;
        pk.len = 0;
        for (uint32_t d = 0; d < x->depth; d++) pb_varint(&pk, loc_index(w, x->pcs[d]) + 1);
        if (pk.len) pb_msg(&sub, 1, &pk);
        pk.len = 0;
        pb_varint(&pk, x->alloc_objects);
        pb_varint(&pk, x->alloc_bytes);
        pb_varint(&pk, x->inuse_objects);
        pb_varint(&pk, x->inuse_bytes);
        pb_msg(&sub, 2, &pk);
        sub2.len = 0;
        pb_uint(&sub2, 1, S_BYTES);
        pb_uint(&sub2, 3, x->size);
        pb_msg(&sub, 3, &sub2);
        pb_msg(&out, 2, &sub);
    }
    for (uint32_t k = 0; k < nseq; k++) {
        const map_t *m = &MAPS(w)[seq[k]];
        sub.len = 0;
        pb_uint(&sub, 1, k + 1);
        pb_uint(&sub, 2, m->start);
        pb_uint(&sub, 3, m->limit);
        pb_uint(&sub, 4, m->offset);
        pb_uint(&sub, 5, m->file);
        pb_uint(&sub, 6, m->build);
        pb_msg(&out, 3, &sub);
    }
    for (size_t i = 0; i < nlocs; i++) {
        const loc_t *l = &LOCS(w)[i];
        sub.len = 0;
        pb_uint(&sub, 1, i + 1);
        pb_uint(&sub, 2, l->map ? id_of[l->map - 1] : 0);
        pb_uint(&sub, 3, l->pc ? l->pc - 1 : 0);
        if (l->func) {
            sub2.len = 0;
            pb_uint(&sub2, 1, l->func);
            pb_msg(&sub, 4, &sub2);
        }
        pb_msg(&out, 4, &sub);
    }
    for (size_t i = 0; i < COUNT(w->funcs, func_t); i++) {
        const func_t *f = &FUNCS(w)[i];
        sub.len = 0;
        pb_uint(&sub, 1, i + 1);
        pb_uint(&sub, 2, f->name);
        pb_uint(&sub, 3, f->name);
        pb_uint(&sub, 4, f->file);
        pb_msg(&out, 5, &sub);
    }
    for (size_t i = 0; i < COUNT(w->strs, str_ent_t); i++)
        pb_bytes(&out, 6, w->strdata.p + STRS(w)[i].off, STRS(w)[i].len);
    pb_uint(&out, 9, s->time_ns);
    pb_uint(&out, 10, s->duration_ns);
    pb_value_type(&out, &sub, 11, S_SPACE, S_BYTES);
    pb_uint(&out, 12, s->sample_rate);
    for (size_t i = 0; i < COUNT(comments, uint32_t); i++)
        pb_uint(&out, 13, ((const uint32_t *)comments.p)[i]);
    pb_uint(&out, 14, S_INUSE_SPACE);

    if (writer_failed(w) || out.failed || sub.failed || sub2.failed || pk.failed ||
        comments.failed)
        goto done;
    rc = gzip_write(fd, out.p, out.len);
    err = errno;
done:
    buf_free(&out);
    buf_free(&sub);
    buf_free(&sub2);
    buf_free(&pk);
    buf_free(&comments);
    buf_free(&order);
    errno = err;
    return rc;
}

/* ---- legacy gperftools heap text -------------------------------------- */

/* 1 - e^(-x) for x >= 0, without libm: a series for small x (no
 * cancellation), else range reduction x = k ln2 + r and e^-r by series. */
static double one_minus_exp_neg(double x)
{
    if (!(x > 0)) return 0;
    if (x < 0.5) {
        double term = x, sum = x;
        for (int k = 2; k < 24; k++) {
            term *= -x / k;
            sum += term;
        }
        return sum;
    }
    if (x > 700) return 1;
    const double ln2 = 0.69314718055994530942;
    int k = (int)(x / ln2);
    double r = x - k * ln2, term = 1, e = 1;
    for (int i = 1; i < 24; i++) {
        term *= -r / i;
        e += term;
    }
    while (k-- > 0) e *= 0.5;
    return 1 - e;
}

/* Legacy scaling.  Readers of heap_v2 (pprof's legacy_profile.go
 * scaleHeapSample, google-pprof's ReadHeapProfile) multiply every line's
 * count and bytes by 1 / (1 - e^(-avg/R)) with avg = bytes / count, because
 * gperftools writes raw sample counts.  Our snapshot holds values already
 * scaled that way, so each pair is turned back into raw counts:
 * count = round(objects * p), bytes = count * S with p = 1 - e^(-S/R) and
 * S the bucket's object size (bytes / objects when size is unknown).  The
 * reader then sees avg == S exactly, applies the very scale the sampler
 * did, and its totals equal the snapshot's up to rounding.  (S is taken
 * from the sample, not from bytes / objects: both were rounded to integers
 * after scaling, which would shift avg and the raw bytes.)  At R <= 1 values are exact and the
 * header says "heapprofile", which both readers leave unscaled (google-pprof
 * would still scale heap_v2/1 for tiny objects). */
static void raw_pair(uint64_t objs, uint64_t bytes, uint64_t size, uint64_t rate,
                     uint64_t *ro, uint64_t *rb)
{
    *ro = *rb = 0;
    if (!objs || !bytes) return; /* readers reject or drop such pairs */
    if (rate <= 1) {
        *ro = objs;
        *rb = bytes;
        return;
    }
    double avg = size ? (double)size : (double)bytes / (double)objs;
    double c = (double)objs * one_minus_exp_neg(avg / (double)rate) + 0.5;
    uint64_t n = c < 1 ? 1 : (uint64_t)c;
    double b = (double)n * avg + 0.5;
    if (b < 1) return;
    *ro = n;
    *rb = (uint64_t)b;
}

typedef struct out {
    int fd, err;
    char *buf;
    size_t len, cap;
} out_t;

static void out_flush(out_t *o)
{
    if (!o->err && o->len && pm_os_write_all(o->fd, o->buf, o->len)) o->err = errno;
    o->len = 0;
}

static void out_put(out_t *o, const char *s, size_t n)
{
    while (n) {
        if (o->len == o->cap) out_flush(o);
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->buf + o->len, s, k);
        o->len += k;
        s += k;
        n -= k;
    }
}

/* "<io>: <ib> [<ao>: <ab>] @" as gperftools prints it (%6d: %8d). */
static void out_counts(out_t *o, const uint64_t v[4])
{
    char line[128];
    size_t n = 0;
    n += fmt_u64_pad(line + n, v[0], 6);
    line[n++] = ':';
    line[n++] = ' ';
    n += fmt_u64_pad(line + n, v[1], 8);
    line[n++] = ' ';
    line[n++] = '[';
    n += fmt_u64_pad(line + n, v[2], 6);
    line[n++] = ':';
    line[n++] = ' ';
    n += fmt_u64_pad(line + n, v[3], 8);
    memcpy(line + n, "] @", 3);
    out_put(o, line, n + 3);
}

/* dl_iterate_phdr callback: the object's loaded segments as lines of
 * /proc/self/maps ("start-end perms offset dev inode path"), for a legacy
 * profile written where /proc is not mounted.  The program is named by
 * AT_EXECFN, the path it was started with. */
typedef struct {
    out_t *o;
    const char *exe; /* the program's absolute path */
} maps_arg_t;

static int maps_line_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    maps_arg_t *arg = data;
    out_t *o = arg->o;
    (void)size;
    const char *name = info->dlpi_name;
    if (!name || !name[0]) name = arg->exe;
    if (!name || !strchr(name, '/')) return 0; /* the vDSO: no file */
    uintptr_t page = kernel_page();
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !ph->p_memsz) continue;
        uint64_t vstart = info->dlpi_addr + ph->p_vaddr, delta = vstart & (page - 1);
        char line[96];
        size_t n = fmt_hex_bare(line, vstart - delta);
        line[n++] = '-';
        n += fmt_hex_bare(line + n, (vstart + ph->p_memsz + page - 1) & ~(uint64_t)(page - 1));
        line[n++] = ' ';
        line[n++] = ph->p_flags & PF_R ? 'r' : '-';
        line[n++] = ph->p_flags & PF_W ? 'w' : '-';
        line[n++] = ph->p_flags & PF_X ? 'x' : '-';
        line[n++] = 'p';
        line[n++] = ' ';
        n += fmt_hex_bare(line + n, ph->p_offset >= delta ? ph->p_offset - delta : 0);
        memcpy(line + n, " 00:00 0 ", 9);
        n += 9;
        out_put(o, line, n);
        out_put(o, name, strlen(name));
        out_put(o, "\n", 1);
    }
    return o->err ? 1 : 0;
}

static int write_legacy(int fd, const pm_prof_snapshot_t *s)
{
    out_t o = {fd, 0, NULL, 0, 65536};
    o.buf = pm_os_map(o.cap, 0);
    if (!o.buf) {
        errno = ENOMEM;
        return -1;
    }
    uint64_t rate = s->sample_rate, tot[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < s->nsamples; i++) {
        const pm_prof_sample_t *x = &s->samples[i];
        uint64_t v[4];
        raw_pair(x->inuse_objects, x->inuse_bytes, x->size, rate, &v[0], &v[1]);
        raw_pair(x->alloc_objects, x->alloc_bytes, x->size, rate, &v[2], &v[3]);
        for (int k = 0; k < 4; k++) tot[k] += v[k];
    }
    char line[64];
    out_put(&o, "heap profile: ", 14);
    out_counts(&o, tot);
    size_t n = 0;
    if (rate > 1) {
        memcpy(line, " heap_v2/", 9);
        n = 9 + fmt_u64(line + 9, rate);
    } else {
        memcpy(line, " heapprofile", 12);
        n = 12;
    }
    line[n++] = '\n';
    out_put(&o, line, n);
    for (size_t i = 0; i < s->nsamples; i++) {
        const pm_prof_sample_t *x = &s->samples[i];
        uint64_t v[4];
        raw_pair(x->inuse_objects, x->inuse_bytes, x->size, rate, &v[0], &v[1]);
        raw_pair(x->alloc_objects, x->alloc_bytes, x->size, rate, &v[2], &v[3]);
        if (!v[0] && !v[2]) continue;
        out_counts(&o, v);
        for (uint32_t d = 0; d < x->depth; d++) {
            line[0] = ' ';
            out_put(&o, line, 1 + fmt_hex(line + 1, x->pcs[d]));
        }
        out_put(&o, "\n", 1);
    }
    out_put(&o, "\nMAPPED_LIBRARIES:\n", 19);
    out_flush(&o);
    int mfd = o.err ? -1 : pm_os_open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (mfd < 0 && !o.err) { /* no /proc: the loaded objects, in its format */
        /* the program by AT_EXECFN, made absolute as maps would print it
         * (google-pprof matches it against the binary's absolute path) */
        const char *execfn = (const char *)getauxval(AT_EXECFN);
        char *exe = pm_os_map(PATH_MAX, 0);
        maps_arg_t arg = {&o, execfn};
        if (exe && execfn && execfn[0] != '/' && getcwd(exe, PATH_MAX)) {
            size_t n = strlen(exe), k = strlen(execfn);
            if (execfn[0] == '.' && execfn[1] == '/') execfn += 2, k -= 2;
            if (n + 1 + k < PATH_MAX) {
                exe[n] = '/';
                memcpy(exe + n + 1, execfn, k + 1);
                arg.exe = exe;
            }
        }
        pm_lock(&phdr_lock);
        dl_iterate_phdr(maps_line_cb, &arg);
        pm_unlock(&phdr_lock);
        out_flush(&o);
        if (exe) pm_os_unmap(exe, PATH_MAX);
    }
    for (ssize_t r; mfd >= 0 && !o.err && (r = pm_os_read(mfd, o.buf, o.cap)) != 0;) {
        if (r < 0) {
            o.err = errno;
            break;
        }
        o.len = (size_t)r;
        out_flush(&o);
    }
    if (mfd >= 0) pm_os_close(mfd);
    pm_os_unmap(o.buf, o.cap);
    errno = o.err;
    return o.err ? -1 : 0;
}

/* ---- entry point ------------------------------------------------------ */

int pm_pprof_write(int fd, const pm_prof_snapshot_t *s, int format)
{
    if (!s || fd < 0 || (s->nsamples && !s->samples) ||
        (format != PROFMALLOC_FORMAT_PPROF && format != PROFMALLOC_FORMAT_LEGACY)) {
        errno = fd < 0 && s ? EBADF : EINVAL;
        return -1;
    }
    for (size_t i = 0; i < s->nsamples; i++)
        if (s->samples[i].depth > PM_STACK_MAX || (s->samples[i].depth && !s->samples[i].pcs)) {
            errno = EINVAL;
            return -1;
        }
    if (format == PROFMALLOC_FORMAT_LEGACY) return write_legacy(fd, s);

    writer_t w;
    memset(&w, 0, sizeof w);
    int rc = -1;
    if (table_resize(&w.strtab, 1024, str_hash, &w) &&
        table_resize(&w.loctab, 1024, loc_hash, &w) &&
        table_resize(&w.functab, 1024, func_hash, &w)) {
        rc = write_proto(fd, s, &w);
    } else {
        errno = ENOMEM;
    }
    int err = errno;
    writer_free(&w);
    errno = err;
    return rc;
}
