/* symbolize.c — function names and file:line for a profile's addresses,
 * read by the command itself from the binaries named in the profile's
 * mappings: ELF .symtab/.dynsym and DWARF .debug_line (versions 2 to 5,
 * zlib-compressed sections too), looked up in a separate debug file by
 * build id under the debug directory or by .gnu_debuglink when the binary
 * is stripped.  A binary whose build id differs from the profile's is not
 * used (the names the profile carries are shown instead).  Every offset
 * read from a file is checked against its size (test_top_pie,
 * test_top_nopie, test_top_stripped_debuglink, test_top_stripped_buildid).  Objects stay loaded for the process's life: `run`
 * symbolizes many profiles of the same binaries. */
#include "cli.h"

#include <elf.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint64_t addr, size;
    const char *name;
} sym_t;

typedef struct {
    uint64_t addr;
    uint32_t file; /* index into obj files */
    uint32_t line : 31, end : 1;
} row_t;

/* How many of the n elements of base (each `size` bytes, sorted by the
 * address they start with: sym_t and row_t) start at or below a. */
_Static_assert(offsetof(sym_t, addr) == 0 && offsetof(row_t, addr) == 0, "addr leads");
static size_t at_or_below(const void *base, size_t n, size_t size, uint64_t a)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t at;
        memcpy(&at, (const char *)base + mid * size, sizeof at);
        if (at <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

typedef struct {
    const uint8_t *base;
    size_t len;
} image_t;

typedef struct obj {
    char *path, *build_id;
    bool ok;
    image_t img, dbg;       /* the binary and its debug file (dbg.base may be NULL) */
    Elf64_Phdr *loads;
    size_t nloads;
    sym_t *syms;
    size_t nsyms;
    row_t *rows;
    size_t nrows;
    char **files;
    size_t nfiles;
    uint8_t **owned;        /* decompressed sections */
    size_t nowned;
    struct obj *next;
} obj_t;

static obj_t *objects;

/* ---- ELF -------------------------------------------------------------- */

static bool elf_ok(const image_t *im)
{
    if (im->len < sizeof(Elf64_Ehdr)) return false;
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)im->base;
    if (memcmp(e->e_ident, ELFMAG, SELFMAG) || e->e_ident[EI_CLASS] != ELFCLASS64 ||
        e->e_ident[EI_DATA] != ELFDATA2LSB)
        return false;
    if (e->e_shoff > im->len || e->e_shnum > (im->len - e->e_shoff) / sizeof(Elf64_Shdr)) return false;
    if (e->e_phoff > im->len || e->e_phnum > (im->len - e->e_phoff) / sizeof(Elf64_Phdr)) return false;
    if (e->e_shnum && e->e_shentsize != sizeof(Elf64_Shdr)) return false;
    return true;
}

static const Elf64_Shdr *shdrs(const image_t *im, size_t *n)
{
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)im->base;
    *n = e->e_shnum;
    return (const Elf64_Shdr *)(im->base + e->e_shoff);
}

static const char *sec_name(const image_t *im, const Elf64_Shdr *sh)
{
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)im->base;
    size_t n;
    const Elf64_Shdr *s = shdrs(im, &n);
    if (e->e_shstrndx >= n) return "";
    const Elf64_Shdr *str = &s[e->e_shstrndx];
    if (str->sh_offset > im->len || str->sh_size > im->len - str->sh_offset || sh->sh_name >= str->sh_size)
        return "";
    const char *p = (const char *)im->base + str->sh_offset + sh->sh_name;
    if (!memchr(p, 0, str->sh_size - sh->sh_name)) return "";
    return p;
}

static const Elf64_Shdr *find_sec(const image_t *im, const char *name)
{
    size_t n;
    const Elf64_Shdr *s = shdrs(im, &n);
    for (size_t i = 0; i < n; i++)
        if (s[i].sh_type != SHT_NOBITS && !strcmp(sec_name(im, &s[i]), name)) return &s[i];
    return NULL;
}

/* A section's bytes, decompressed when SHF_COMPRESSED (zlib). */
static const uint8_t *sec_data(obj_t *o, const image_t *im, const Elf64_Shdr *sh, size_t *len)
{
    if (!sh || sh->sh_type == SHT_NOBITS || sh->sh_offset > im->len || sh->sh_size > im->len - sh->sh_offset)
        return NULL;
    const uint8_t *p = im->base + sh->sh_offset;
    if (!(sh->sh_flags & SHF_COMPRESSED)) {
        *len = sh->sh_size;
        return p;
    }
    if (sh->sh_size < sizeof(Elf64_Chdr)) return NULL;
    const Elf64_Chdr *ch = (const Elf64_Chdr *)p;
    if (ch->ch_type != ELFCOMPRESS_ZLIB || ch->ch_size > ((size_t)1 << 31)) return NULL;
    uint8_t *out;
    size_t outlen;
    const char *err;
    if (cli_zlib_inflate(p + sizeof *ch, sh->sh_size - sizeof *ch, &out, &outlen, ch->ch_size, &err)) return NULL;
    o->owned = xrealloc(o->owned, (o->nowned + 1) * sizeof *o->owned);
    o->owned[o->nowned++] = out;
    *len = outlen;
    return out;
}

static bool map_image(const char *path, image_t *im)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    bool ok = false;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) {
            im->base = p;
            im->len = (size_t)st.st_size;
            ok = elf_ok(im);
            if (!ok) munmap(p, im->len);
        }
    }
    close(fd);
    return ok;
}

static void build_id_of(const image_t *im, char *hex, size_t hexlen)
{
    hex[0] = 0;
    size_t n;
    const Elf64_Shdr *s = shdrs(im, &n);
    for (size_t i = 0; i < n; i++) {
        if (s[i].sh_type != SHT_NOTE || s[i].sh_offset > im->len || s[i].sh_size > im->len - s[i].sh_offset) continue;
        const uint8_t *p = im->base + s[i].sh_offset, *end = p + s[i].sh_size;
        while (end - p >= 12) {
            uint32_t namesz, descsz, type;
            memcpy(&namesz, p, 4);
            memcpy(&descsz, p + 4, 4);
            memcpy(&type, p + 8, 4);
            size_t na = ((size_t)namesz + 3) & ~(size_t)3, da = ((size_t)descsz + 3) & ~(size_t)3;
            if (na > (size_t)(end - p) - 12 || da > (size_t)(end - p) - 12 - na) break;
            if (type == NT_GNU_BUILD_ID && namesz == 4 && !memcmp(p + 12, "GNU", 4) && descsz * 2 < hexlen) {
                for (uint32_t k = 0; k < descsz; k++) snprintf(hex + 2 * k, 3, "%02x", p[12 + na + k]);
                return;
            }
            p += 12 + na + da;
        }
    }
}

/* ---- symbols ---------------------------------------------------------- */

static int sym_cmp(const void *a, const void *b)
{
    const sym_t *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    /* a sized symbol before an unsized one at the same address */
    return (x->size == 0) - (y->size == 0);
}

static void load_syms(obj_t *o, const image_t *im, unsigned type)
{
    size_t n;
    const Elf64_Shdr *s = shdrs(im, &n);
    for (size_t i = 0; i < n; i++) {
        if (s[i].sh_type != type || s[i].sh_link >= n) continue;
        size_t symlen, strlen_;
        const uint8_t *sy = sec_data(o, im, &s[i], &symlen);
        const uint8_t *st = sec_data(o, im, &s[s[i].sh_link], &strlen_);
        if (!sy || !st) continue;
        size_t cnt = symlen / sizeof(Elf64_Sym);
        o->syms = xrealloc(o->syms, (o->nsyms + cnt) * sizeof *o->syms);
        for (size_t k = 0; k < cnt; k++) {
            Elf64_Sym e;
            memcpy(&e, sy + k * sizeof e, sizeof e);
            unsigned t = ELF64_ST_TYPE(e.st_info);
            if ((t != STT_FUNC && t != STT_GNU_IFUNC) || !e.st_value || e.st_shndx == SHN_UNDEF ||
                e.st_name >= strlen_ || !memchr(st + e.st_name, 0, strlen_ - e.st_name))
                continue;
            o->syms[o->nsyms++] = (sym_t){e.st_value, e.st_size, (const char *)st + e.st_name};
        }
    }
}

static const char *find_sym(const obj_t *o, uint64_t a)
{
    size_t lo = at_or_below(o->syms, o->nsyms, sizeof *o->syms, a);
    /* the closest symbols at or below a: a sized one that covers it, or an
     * unsized one (assembler labels) when nothing sized covers it */
    for (size_t k = lo, tries = 0; k-- > 0 && tries < 8; tries++) {
        const sym_t *s = &o->syms[k];
        if (s->size && a < s->addr + s->size) return s->name;
        if (!s->size && tries == 0) return s->name;
    }
    return NULL;
}

/* ---- DWARF .debug_line ------------------------------------------------ */

typedef struct {
    const uint8_t *p, *end;
    bool bad;
} rd_t;

static uint64_t rd_n(rd_t *r, int n)
{
    if (r->bad || r->end - r->p < n) {
        r->bad = true;
        r->p = r->end;
        return 0;
    }
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | r->p[i];
    r->p += n;
    return v;
}

static uint64_t rd_uleb(rd_t *r)
{
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        if (r->p >= r->end) {
            r->bad = true;
            return 0;
        }
        uint8_t c = *r->p++;
        if (shift < 64) v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return v;
    }
}

static int64_t rd_sleb(rd_t *r)
{
    int64_t v = 0;
    int shift = 0;
    uint8_t c;
    do {
        if (r->p >= r->end) {
            r->bad = true;
            return 0;
        }
        c = *r->p++;
        if (shift < 64) v |= (int64_t)((uint64_t)(c & 0x7f) << shift);
        shift += 7;
    } while (c & 0x80);
    if (shift < 64 && (c & 0x40)) v |= -((int64_t)1 << shift);
    return v;
}

static const char *rd_str(rd_t *r)
{
    const uint8_t *z = r->p < r->end ? memchr(r->p, 0, (size_t)(r->end - r->p)) : NULL;
    if (!z) {
        r->bad = true;
        r->p = r->end;
        return "";
    }
    const char *s = (const char *)r->p;
    r->p = z + 1;
    return s;
}

typedef struct {
    const uint8_t *str, *line_str;
    size_t str_len, line_str_len;
} strsecs_t;

static const char *str_at(const uint8_t *sec, size_t len, uint64_t off)
{
    if (!sec || off >= len || !memchr(sec + off, 0, len - off)) return "";
    return (const char *)sec + off;
}

/* Reads one attribute of a v5 entry format; returns its string or
 * number. */
static void read_form(rd_t *r, uint64_t form, bool dw64, const strsecs_t *ss, const char **s, uint64_t *u)
{
    *s = NULL;
    *u = 0;
    switch (form) {
    case 0x08: *s = rd_str(r); break;                                       /* string */
    case 0x0e: *s = str_at(ss->str, ss->str_len, rd_n(r, dw64 ? 8 : 4)); break;      /* strp */
    case 0x1f: *s = str_at(ss->line_str, ss->line_str_len, rd_n(r, dw64 ? 8 : 4)); break; /* line_strp */
    case 0x0b: *u = rd_n(r, 1); break;  /* data1 */
    case 0x05: *u = rd_n(r, 2); break;  /* data2 */
    case 0x06: *u = rd_n(r, 4); break;  /* data4 */
    case 0x07: *u = rd_n(r, 8); break;  /* data8 */
    case 0x1e: rd_n(r, 8), rd_n(r, 8); break; /* data16 (MD5) */
    case 0x0f: *u = rd_uleb(r); break;  /* udata */
    case 0x0d: *u = (uint64_t)rd_sleb(r); break; /* sdata */
    case 0x09: { uint64_t n = rd_uleb(r); if (n > (uint64_t)(r->end - r->p)) r->bad = true; else r->p += n; break; } /* block */
    case 0x0a: { uint64_t n = rd_n(r, 1); if (n > (uint64_t)(r->end - r->p)) r->bad = true; else r->p += n; break; }
    case 0x25: rd_n(r, 1); break; /* strx1: no str_offsets here */
    case 0x26: rd_n(r, 2); break;
    case 0x27: rd_n(r, 3); break;
    case 0x28: rd_n(r, 4); break;
    case 0x1a: rd_uleb(r); break; /* strx */
    default: r->bad = true;
    }
}

static uint32_t add_file(obj_t *o, const char *dir, const char *name)
{
    char buf[4096];
    if (name[0] == '/' || !dir || !dir[0]) snprintf(buf, sizeof buf, "%s", name);
    else snprintf(buf, sizeof buf, "%s/%s", dir, name);
    o->files = xrealloc(o->files, (o->nfiles + 1) * sizeof *o->files);
    o->files[o->nfiles] = xstrdup(buf);
    return (uint32_t)o->nfiles++;
}

static void add_row(obj_t *o, size_t *cap, uint64_t addr, uint32_t file, uint64_t line, bool end)
{
    if (o->nrows == *cap) o->rows = xrealloc(o->rows, (*cap = *cap ? *cap * 2 : 4096) * sizeof *o->rows);
    o->rows[o->nrows++] = (row_t){addr, file, (uint32_t)(line & 0x7fffffff), end};
}

/* One unit's header and program.  Directory 0 is the compilation
 * directory, which is left off (the file shows as the compiler saw it). */
static void line_unit(obj_t *o, rd_t *u, bool dw64, const strsecs_t *ss, size_t *cap)
{
    unsigned version = (unsigned)rd_n(u, 2);
    if (version < 2 || version > 5) return;
    unsigned addr_size = 8;
    if (version >= 5) {
        addr_size = (unsigned)rd_n(u, 1);
        rd_n(u, 1);
    }
    uint64_t hlen = rd_n(u, dw64 ? 8 : 4);
    if (u->bad || hlen > (uint64_t)(u->end - u->p)) return;
    const uint8_t *prog = u->p + hlen;
    unsigned min_inst = (unsigned)rd_n(u, 1);
    if (version >= 4) rd_n(u, 1);
    bool def_stmt = rd_n(u, 1) != 0;
    (void)def_stmt;
    int line_base = (int8_t)rd_n(u, 1);
    unsigned line_range = (unsigned)rd_n(u, 1), opcode_base = (unsigned)rd_n(u, 1);
    uint8_t oplen[256] = {0};
    for (unsigned i = 1; i < opcode_base; i++) oplen[i] = (uint8_t)rd_n(u, 1);
    if (u->bad || !line_range || !opcode_base) return;

    const char *dirs[1024];
    size_t ndirs = 0;
    uint32_t *files = NULL;
    size_t nfiles = 0;
    if (version < 5) {
        dirs[ndirs++] = NULL; /* the compilation directory */
        for (;;) {
            const char *d = rd_str(u);
            if (u->bad || !*d) break;
            if (ndirs < 1024) dirs[ndirs++] = d;
        }
        files = xrealloc(files, sizeof *files);
        files[nfiles++] = UINT32_MAX; /* file 0: none before v5 */
        for (;;) {
            const char *name = rd_str(u);
            if (u->bad || !*name) break;
            uint64_t di = rd_uleb(u);
            rd_uleb(u);
            rd_uleb(u);
            files = xrealloc(files, (nfiles + 1) * sizeof *files);
            files[nfiles++] = add_file(o, di && di < ndirs ? dirs[di] : NULL, name);
        }
    } else {
        for (int pass = 0; pass < 2 && !u->bad; pass++) {
            unsigned nfmt = (unsigned)rd_n(u, 1);
            uint64_t fmt[32][2];
            if (nfmt > 32) return;
            for (unsigned i = 0; i < nfmt; i++) fmt[i][0] = rd_uleb(u), fmt[i][1] = rd_uleb(u);
            uint64_t count = rd_uleb(u);
            if (count > (uint64_t)(u->end - u->p)) {
                u->bad = true;
                break;
            }
            for (uint64_t k = 0; k < count && !u->bad; k++) {
                const char *name = NULL;
                uint64_t di = 0;
                for (unsigned i = 0; i < nfmt; i++) {
                    const char *s;
                    uint64_t v;
                    read_form(u, fmt[i][1], dw64, ss, &s, &v);
                    if (fmt[i][0] == 1) name = s; /* DW_LNCT_path */
                    else if (fmt[i][0] == 2) di = v; /* DW_LNCT_directory_index */
                }
                if (pass == 0) {
                    if (ndirs < 1024) dirs[ndirs++] = k == 0 ? NULL : name;
                } else {
                    files = xrealloc(files, (nfiles + 1) * sizeof *files);
                    files[nfiles++] = add_file(o, di < ndirs ? dirs[di] : NULL, name ? name : "?");
                }
            }
        }
    }
    if (u->bad || prog > u->end) {
        free(files);
        return;
    }
    u->p = prog;
    uint64_t addr = 0, file = 1, line = 1;
    while (u->p < u->end && !u->bad) {
        unsigned op = (unsigned)rd_n(u, 1);
        if (op >= opcode_base) {
            unsigned adj = op - opcode_base;
            addr += (uint64_t)(adj / line_range) * min_inst;
            line += (uint64_t)(int64_t)(line_base + (int)(adj % line_range));
            add_row(o, cap, addr, file < nfiles ? files[file] : UINT32_MAX, line, false);
            continue;
        }
        switch (op) {
        case 0: {
            uint64_t len = rd_uleb(u);
            if (u->bad || !len || len > (uint64_t)(u->end - u->p)) {
                u->bad = true;
                break;
            }
            const uint8_t *next = u->p + len;
            unsigned ext = (unsigned)rd_n(u, 1);
            if (ext == 1) {
                add_row(o, cap, addr, UINT32_MAX, line, true);
                addr = 0, file = 1, line = 1;
            } else if (ext == 2) {
                addr = rd_n(u, len - 1 <= 8 ? (int)(len - 1) : 8);
                (void)addr_size;
            }
            u->p = next;
            break;
        }
        case 1: add_row(o, cap, addr, file < nfiles ? files[file] : UINT32_MAX, line, false); break;
        case 2: addr += rd_uleb(u) * min_inst; break;
        case 3: line += (uint64_t)rd_sleb(u); break;
        case 4: file = rd_uleb(u); break;
        case 8: addr += (uint64_t)((255 - opcode_base) / line_range) * min_inst; break;
        case 9: addr += rd_n(u, 2); break;
        default:
            for (unsigned i = 0; i < oplen[op]; i++) rd_uleb(u);
        }
    }
    free(files);
}

static int row_cmp(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    return (int)y->end - (int)x->end; /* a sequence's end before the next one's start */
}

static void load_lines(obj_t *o, const image_t *im)
{
    size_t len;
    const uint8_t *d = sec_data(o, im, find_sec(im, ".debug_line"), &len);
    if (!d) return;
    strsecs_t ss = {0};
    ss.str = sec_data(o, im, find_sec(im, ".debug_str"), &ss.str_len);
    ss.line_str = sec_data(o, im, find_sec(im, ".debug_line_str"), &ss.line_str_len);
    rd_t r = {d, d + len, false};
    size_t cap = 0;
    while (r.p < r.end && !r.bad) {
        uint64_t ulen = rd_n(&r, 4);
        bool dw64 = false;
        if (ulen == 0xffffffff) {
            ulen = rd_n(&r, 8);
            dw64 = true;
        }
        if (r.bad || ulen > (uint64_t)(r.end - r.p)) break;
        rd_t u = {r.p, r.p + ulen, false};
        line_unit(o, &u, dw64, &ss, &cap);
        r.p += ulen;
    }
    if (o->nrows) qsort(o->rows, o->nrows, sizeof *o->rows, row_cmp);
}

static const row_t *find_row(const obj_t *o, uint64_t a)
{
    size_t lo = at_or_below(o->rows, o->nrows, sizeof *o->rows, a);
    if (!lo) return NULL;
    const row_t *r = &o->rows[lo - 1];
    /* a sequence at address 0 is code the linker dropped */
    if (r->end || r->file == UINT32_MAX || r->addr == 0) return NULL;
    return r;
}

/* ---- debug files ------------------------------------------------------ */

static bool try_debug(obj_t *o, const char *path, const char *want_id)
{
    image_t im;
    if (!map_image(path, &im)) return false;
    char id[128];
    build_id_of(&im, id, sizeof id);
    if (want_id[0] && id[0] && strcmp(id, want_id)) {
        munmap((void *)im.base, im.len);
        return false;
    }
    o->dbg = im;
    return true;
}

static void find_debug(obj_t *o, const char *id, const char *debug_dir)
{
    char path[4096];
    if (strlen(id) > 2) {
        snprintf(path, sizeof path, "%s/.build-id/%.2s/%s.debug", debug_dir, id, id + 2);
        if (try_debug(o, path, id)) return;
    }
    size_t len;
    const uint8_t *dl = sec_data(o, &o->img, find_sec(&o->img, ".gnu_debuglink"), &len);
    if (!dl || !memchr(dl, 0, len)) return;
    const char *name = (const char *)dl;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", o->path);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else dir[0] = 0;
    snprintf(path, sizeof path, "%s%s", dir, name);
    if (strcmp(path, o->path) && try_debug(o, path, id)) return;
    snprintf(path, sizeof path, "%s.debug/%s", dir, name);
    if (try_debug(o, path, id)) return;
    snprintf(path, sizeof path, "%s%s%s", debug_dir, dir[0] == '/' ? "" : "/", dir);
    size_t n = strlen(path);
    snprintf(path + n, sizeof path - n, "%s", name);
    try_debug(o, path, id);
}

static obj_t *load_obj(const char *path, const char *build_id, const char *debug_dir)
{
    for (obj_t *o = objects; o; o = o->next)
        if (!strcmp(o->path, path) && !strcmp(o->build_id, build_id)) return o;
    obj_t *o = xcalloc(1, sizeof *o);
    o->path = xstrdup(path);
    o->build_id = xstrdup(build_id);
    o->next = objects;
    objects = o;
    char id[128] = "";
    if (map_image(path, &o->img)) {
        build_id_of(&o->img, id, sizeof id);
        if (build_id[0] && id[0] && strcmp(id, build_id)) {
            /* another build: only a debug file with the profile's id helps */
            munmap((void *)o->img.base, o->img.len);
            o->img.base = NULL;
        }
    }
    if (!o->img.base) {
        char p[4096];
        if (strlen(build_id) > 2) {
            snprintf(p, sizeof p, "%s/.build-id/%.2s/%s.debug", debug_dir, build_id, build_id + 2);
            if (try_debug(o, p, build_id)) {
                o->img = o->dbg;
                o->dbg.base = NULL;
            }
        }
        if (!o->img.base) return o;
    }
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)o->img.base;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(o->img.base + e->e_phoff);
    o->loads = xcalloc(e->e_phnum, sizeof *o->loads);
    for (size_t i = 0; i < e->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD) o->loads[o->nloads++] = ph[i];
    if (!find_sec(&o->img, ".debug_line") || !find_sec(&o->img, ".symtab"))
        find_debug(o, id[0] ? id : build_id, debug_dir);
    const image_t *dbg = o->dbg.base ? &o->dbg : &o->img;
    if (find_sec(&o->img, ".symtab")) load_syms(o, &o->img, SHT_SYMTAB);
    else if (o->dbg.base && find_sec(&o->dbg, ".symtab")) load_syms(o, &o->dbg, SHT_SYMTAB);
    load_syms(o, &o->img, SHT_DYNSYM);
    if (o->nsyms) qsort(o->syms, o->nsyms, sizeof *o->syms, sym_cmp);
    load_lines(o, find_sec(dbg, ".debug_line") ? dbg : &o->img);
    o->ok = true;
    return o;
}

/* File offset -> the object's virtual address, through its PT_LOADs. */
static bool to_vaddr(const obj_t *o, uint64_t off, uint64_t *va)
{
    for (size_t i = 0; i < o->nloads; i++) {
        const Elf64_Phdr *p = &o->loads[i];
        if (off >= p->p_offset && off < p->p_offset + p->p_filesz) {
            *va = off - p->p_offset + p->p_vaddr;
            return true;
        }
    }
    return false;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void cli_symbolize(cli_profile_t *p, const cli_sym_opts_t *opt)
{
    const char *debug_dir = opt && opt->debug_dir ? opt->debug_dir : "/usr/lib/debug";
    double t0 = now_s();
    bool shown = false, tty = isatty(2);
    for (size_t m = 0; m < p->nmaps; m++) {
        const cli_map_t *map = &p->maps[m];
        if (!map->file || map->file[0] != '/') continue;
        bool used = false;
        for (size_t i = 0; i < p->nlocs && !used; i++) used = p->locs[i].map == (int)m;
        if (!used) continue;
        if (opt && opt->progress && now_s() - t0 > 1) {
            fprintf(stderr, tty ? "\rprofmalloc: symbolizing %zu/%zu %-40.40s" : "profmalloc: symbolizing (%zu/%zu) %s...\n",
                    m + 1, p->nmaps, map->file);
            shown = true;
        }
        obj_t *o = load_obj(map->file, map->build_id ? map->build_id : "", debug_dir);
        if (!o->ok) continue;
        for (size_t i = 0; i < p->nlocs; i++) {
            cli_loc_t *l = &p->locs[i];
            uint64_t va;
            if (l->map != (int)m || l->sym_func || !to_vaddr(o, l->addr - map->start + map->offset, &va)) continue;
            const char *name = find_sym(o, va);
            const row_t *r = find_row(o, va);
            if (!name && !r) continue;
            if (name) {
                char *d = cli_demangle(name);
                l->sym_func = d ? d : xstrdup(name);
            } else {
                l->sym_func = xstrdup(l->func ? l->func : "??");
            }
            if (r) {
                l->sym_file = xstrdup(o->files[r->file]);
                l->sym_line = r->line;
            }
        }
    }
    if (shown && tty) fprintf(stderr, "\r%-78s\r", "");
}

/* The object-relative address of a location, for --json and the tests. */
int cli_loc_vaddr(const cli_profile_t *p, const cli_loc_t *l, uint64_t *va)
{
    if (l->map < 0) return -1;
    const cli_map_t *map = &p->maps[l->map];
    for (obj_t *o = objects; o; o = o->next)
        if (o->ok && !strcmp(o->path, map->file) && !strcmp(o->build_id, map->build_id ? map->build_id : ""))
            return to_vaddr(o, l->addr - map->start + map->offset, va) ? 0 : -1;
    return -1;
}
