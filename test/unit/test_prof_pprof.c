/* test_prof_pprof.c — unit tests of the profile writers (src/prof_pprof.c,
 * with prof_symbols.c and prof_encode.c).
 * Builds snapshots by hand from real return addresses of functions in this
 * binary, writes them, then decodes the result here (gunzip of stored
 * blocks with its own CRC32, a small protobuf reader) and checks it field by
 * field; runs `go tool pprof` and `google-pprof` on the files when they are
 * installed.  The test itself may use libc malloc and stdio freely: it is
 * linked against glibc's allocator, not ours.  Files go beside the test
 * binary (build/test/).  Compiled with -DPPROF_FIXTURE_LIB it is instead a
 * tiny shared object whose file the tests delete while it is loaded. */
#ifdef PPROF_FIXTURE_LIB

#include <stdint.h>

volatile int pprof_fixture_sink;

__attribute__((noinline)) static uintptr_t fixture_grab(void)
{
    return (uintptr_t)__builtin_return_address(0);
}

/* Returns a return address that lies inside this function. */
__attribute__((visibility("default"), noinline)) uintptr_t pprof_fixture_site(void)
{
    uintptr_t r = fixture_grab();
    pprof_fixture_sink += 7;
    return r;
}

#else /* the test program */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pm_prof_pprof.h"
#include "profile_reader.h"

/* ---- call sites whose return addresses make the stacks ---------------- */

volatile int pprof_sink;

__attribute__((noinline)) static uintptr_t grab_ra(void)
{
    return (uintptr_t)__builtin_return_address(0);
}

/* Each returns a return address inside itself; distinct bodies keep
 * -fipa-icf from folding them into one function. */
__attribute__((noinline)) uintptr_t pprof_site_alpha(void);
__attribute__((noinline)) uintptr_t pprof_site_beta(void);
__attribute__((noinline)) uintptr_t pprof_site_gamma(void);

uintptr_t pprof_site_alpha(void)
{
    uintptr_t r = grab_ra();
    pprof_sink += 1;
    return r;
}

uintptr_t pprof_site_beta(void)
{
    uintptr_t r = grab_ra();
    pprof_sink += 2;
    return r;
}

uintptr_t pprof_site_gamma(void)
{
    uintptr_t r = grab_ra();
    pprof_sink += 3;
    return r;
}

/* ---- allocation counting ---------------------------------------------- */

/* This binary's malloc family (exported, so libc's own calls land here too)
 * counts calls while g_counting is set; the writers must make none. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
static volatile int g_counting, g_allocs;

#define TEST_EXPORT __attribute__((visibility("default")))
TEST_EXPORT void *malloc(size_t n)
{
    if (g_counting) g_allocs++;
    return __libc_malloc(n);
}
TEST_EXPORT void *calloc(size_t n, size_t size)
{
    if (g_counting) g_allocs++;
    return __libc_calloc(n, size);
}
TEST_EXPORT void *realloc(void *p, size_t n)
{
    if (g_counting) g_allocs++;
    return __libc_realloc(p, n);
}
TEST_EXPORT void free(void *p)
{
    if (g_counting && p) g_allocs++;
    __libc_free(p);
}

/* ---- files and commands ------------------------------------------------ */

static char g_exe[PATH_MAX]; /* this binary's real path */
static char g_dir[PATH_MAX]; /* its directory: where outputs go */

static const char *out_path(const char *name)
{
    static char buf[4][2 * PATH_MAX];
    static int next;
    char *p = buf[next++ & 3];
    int n = snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    assert_true(n > 0 && (size_t)n < sizeof buf[0]);
    return p;
}

static int write_snapshot(const char *path, const pm_prof_snapshot_t *s, int format)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    int rc = pm_pprof_write(fd, s, format);
    close(fd);
    return rc;
}

static bool have_tool(const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

/* Runs a shell command; returns its stdout+stderr (malloc'd). */
static char *run(const char *fmt, ...)
{
    char cmd[4 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - 1 - n, p)) > 0) {
        n += r;
        if (n == cap - 1) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int status = pclose(p);
    if (status != 0) fprintf(stderr, "command failed (%d): %s\n%s\n", status, cmd, buf);
    assert_int_equal(status, 0);
    return buf;
}

/* ---- ELF facts about this binary, read independently of the writers -- */

/* GNU build id of an ELF file from its section headers, lowercase hex. */
static void file_build_id(const char *path, char *hex, size_t cap)
{
    size_t len;
    uint8_t *f = slurp(path, &len);
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)f;
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(f + eh->e_shoff);
    const char *names = (const char *)f + sh[eh->e_shstrndx].sh_offset;
    hex[0] = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (strcmp(names + sh[i].sh_name, ".note.gnu.build-id")) continue;
        const uint8_t *n = f + sh[i].sh_offset;
        uint32_t namesz = le32(n), descsz = le32(n + 4);
        const uint8_t *desc = n + 12 + ((namesz + 3) & ~3u);
        assert_true(2 * descsz < cap);
        for (uint32_t k = 0; k < descsz; k++) sprintf(hex + 2 * k, "%02x", desc[k]);
    }
    free(f);
}

static int count_pt_load(const char *path)
{
    size_t len;
    uint8_t *f = slurp(path, &len);
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)f;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(f + eh->e_phoff);
    int n = 0;
    for (int i = 0; i < eh->e_phnum; i++) n += ph[i].p_type == PT_LOAD && ph[i].p_memsz;
    free(f);
    return n;
}

/* ---- the shared snapshot ------------------------------------------------ */

static uintptr_t pc_alpha, pc_beta, pc_gamma, pc_write;
static uintptr_t stack_a[3], stack_b[2], stack_c[1];
static pm_prof_sample_t samples3[3];
static pm_prof_snapshot_t snap3;

static void make_snapshot(void)
{
    pc_alpha = pprof_site_alpha();
    pc_beta = pprof_site_beta();
    pc_gamma = pprof_site_gamma();
    /* a "return address" inside libc's write(): pc - 1 is write + 4 */
    pc_write = (uintptr_t)(void *)&write + 5;
    stack_a[0] = pc_alpha;
    stack_a[1] = pc_beta;
    stack_a[2] = pc_gamma;
    stack_b[0] = pc_gamma;
    stack_b[1] = pc_beta; /* shared with stack_a: one Location */
    stack_c[0] = pc_write;
    samples3[0] = (pm_prof_sample_t){10, 1000, 5, 500, 100, 3, stack_a};
    samples3[1] = (pm_prof_sample_t){4, 4096, 4, 4096, 1024, 2, stack_b};
    samples3[2] = (pm_prof_sample_t){1, 64, 0, 0, 64, 1, stack_c};
    memset(&snap3, 0, sizeof snap3);
    snap3.sample_rate = 524288;
    snap3.time_ns = 1700000000123456789ull;
    snap3.duration_ns = 5000000001ull;
    snap3.nsamples = 3;
    snap3.samples = samples3;
    snap3.totals.in_use = 111111;
    snap3.totals.mapped = 4194304;
    snap3.totals.pageheap_free = 8192;
    snap3.totals.released = 16384;
    snap3.totals.sample_rate = 524288;
}

/* ---- tests -------------------------------------------------------------- */

static void test_proto_fields(void **state)
{
    (void)state;
    make_snapshot();
    const char *path = out_path("pprof_test.pb.gz");
    assert_int_equal(write_snapshot(path, &snap3, PROFMALLOC_FORMAT_PPROF), 0);
    tprof_t p;
    load_profile(&p, path, NULL);

    /* Go's heap layout */
    static const char *const types[4][2] = {{"alloc_objects", "count"}, {"alloc_space", "bytes"},
                                            {"inuse_objects", "count"}, {"inuse_space", "bytes"}};
    assert_int_equal(p.nst, 4);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(S(&p, p.st[i].type), types[i][0]);
        assert_string_equal(S(&p, p.st[i].unit), types[i][1]);
    }
    assert_string_equal(S(&p, p.pt.type), "space");
    assert_string_equal(S(&p, p.pt.unit), "bytes");
    assert_int_equal(p.period, 524288);
    assert_int_equal(p.time, snap3.time_ns);
    assert_int_equal(p.dur, snap3.duration_ns);
    assert_string_equal(S(&p, p.dflt), "inuse_space");

    /* samples: values, "bytes" label, leaf-first locations at pc - 1 */
    assert_int_equal(p.ns, 3);
    for (size_t i = 0; i < 3; i++) {
        const pm_prof_sample_t *x = &samples3[i];
        const tsample_t *s = &p.s[i];
        assert_int_equal(s->vals.v[0], x->alloc_objects);
        assert_int_equal(s->vals.v[1], x->alloc_bytes);
        assert_int_equal(s->vals.v[2], x->inuse_objects);
        assert_int_equal(s->vals.v[3], x->inuse_bytes);
        assert_int_equal(s->nlabels, 1);
        assert_string_equal(S(&p, s->lkey), "bytes");
        assert_int_equal(s->lnum, x->size);
        assert_int_equal(s->locs.n, x->depth);
        for (uint32_t d = 0; d < x->depth; d++)
            assert_int_equal(loc_by_id(&p, s->locs.v[d])->addr, x->pcs[d] - 1);
    }
    assert_int_equal(p.nl, 4); /* alpha, beta (shared), gamma, write */

    /* mappings: the executable's code segment first, with its build id */
    char build[160];
    file_build_id(g_exe, build, sizeof build);
    assert_true(strlen(build) >= 16);
    assert_true(p.nm >= 2);
    assert_string_equal(S(&p, p.m[0].file), g_exe);
    assert_string_equal(S(&p, p.m[0].build), build);
    assert_true(pc_alpha - 1 >= p.m[0].start && pc_alpha - 1 < p.m[0].limit);
    assert_int_equal(p.m[0].start % 4096, 0);
    int exe_maps = 0;
    for (size_t i = 0; i < p.nm; i++) {
        assert_int_equal(p.m[i].hasfn, 0); /* pprof must still symbolize */
        exe_maps += !strcmp(S(&p, p.m[i].file), g_exe);
    }
    assert_int_equal(exe_maps, count_pt_load(g_exe)); /* every PT_LOAD */

    /* locations: in the segment that holds them, named in-process */
    static const char *const names[3] = {"pprof_site_alpha", "pprof_site_beta", "pprof_site_gamma"};
    const uintptr_t pcs[3] = {pc_alpha, pc_beta, pc_gamma};
    for (int i = 0; i < 3; i++) {
        const tloc_t *l = loc_by_addr(&p, pcs[i] - 1);
        assert_non_null(l);
        const tmap_t *m = map_by_id(&p, l->map);
        assert_non_null(m);
        assert_string_equal(S(&p, m->file), g_exe);
        assert_string_equal(loc_func_name(&p, l), names[i]);
        const tfunc_t *f = func_by_id(&p, l->funcs.v[0]);
        assert_string_equal(S(&p, f->sys), names[i]);
        assert_string_equal(S(&p, f->file), g_exe);
    }
    const tloc_t *lw = loc_by_addr(&p, pc_write - 1);
    assert_non_null(lw);
    const tmap_t *mw = map_by_id(&p, lw->map);
    assert_non_null(mw);
    assert_non_null(strstr(S(&p, mw->file), "libc.so"));
    assert_true(strlen(S(&p, mw->build)) >= 16);
    /* write, __write, __libc_write... share the address: the plain name wins */
    assert_non_null(loc_func_name(&p, lw));
    assert_string_equal(loc_func_name(&p, lw), "write");
    for (size_t i = 0; i < p.nf; i++) /* symbol versions ("@@GLIBC_...") cut */
        assert_null(strchr(S(&p, p.f[i].name), '@'));

    /* comments: the allocator's exact totals, all in one line (pprof
     * prints each comment atop every report) */
    assert_int_equal(p.comments.n, 1);
    const char *c = S(&p, p.comments.v[0]);
    assert_true(strlen(c) < 512);
    assert_non_null(strstr(c, "profmalloc: in_use=111111B "));
    assert_non_null(strstr(c, " mapped=4194304B "));
    assert_non_null(strstr(c, " pageheap_free=8192B "));
    assert_non_null(strstr(c, " released=16384B "));
    assert_non_null(strstr(c, " threads=0 "));
    assert_non_null(strstr(c, " sample_rate=524288B"));
    free_profile(&p);
}

static void test_proto_empty_snapshot(void **state)
{
    (void)state;
    pm_prof_snapshot_t s;
    memset(&s, 0, sizeof s);
    s.sample_rate = 1;
    const char *path = out_path("pprof_empty.pb.gz");
    assert_int_equal(write_snapshot(path, &s, PROFMALLOC_FORMAT_PPROF), 0);
    tprof_t p;
    int blocks;
    load_profile(&p, path, &blocks);
    assert_int_equal(blocks, 1);
    assert_int_equal(p.ns, 0);
    assert_int_equal(p.nl, 0);
    assert_int_equal(p.nst, 4);
    assert_int_equal(p.period, 1);
    assert_string_equal(S(&p, p.m[0].file), g_exe);
    free_profile(&p);
}

/* More than 64 KiB of protobuf: several stored blocks, one CRC over all. */
static void test_proto_many_samples(void **state)
{
    (void)state;
    enum { N = 6000 };
    make_snapshot();
    pm_prof_sample_t *v = calloc(N, sizeof *v);
    for (size_t i = 0; i < N; i++)
        v[i] = (pm_prof_sample_t){i + 1, (i + 1) * (i + 16), i / 2, (i / 2) * (i + 16), i + 16,
                                  (uint32_t)(1 + i % 3), stack_a};
    pm_prof_snapshot_t s = snap3;
    s.nsamples = N;
    s.samples = v;
    const char *path = out_path("pprof_many.pb.gz");
    assert_int_equal(write_snapshot(path, &s, PROFMALLOC_FORMAT_PPROF), 0);
    tprof_t p;
    int blocks;
    load_profile(&p, path, &blocks);
    assert_true(blocks >= 2);
    assert_int_equal(p.ns, N);
    assert_int_equal(p.nl, 3);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(p.s[i].vals.v[1], v[i].alloc_bytes);
        assert_int_equal(p.s[i].vals.v[3], v[i].inuse_bytes);
        assert_int_equal(p.s[i].lnum, v[i].size);
        assert_int_equal(p.s[i].locs.n, v[i].depth);
    }
    free_profile(&p);
    free(v);
}

/* A library whose file is deleted while loaded: its names come from the
 * .dynsym the loader mapped. */
static void test_proto_deleted_library(void **state)
{
    (void)state;
    const char *src = out_path("libpprof_fixture.so");
    const char *copy = out_path("pprof_fixture_deleted.so");
    size_t len;
    uint8_t *bytes = slurp(src, &len);
    FILE *f = fopen(copy, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    free(bytes);
    void *h = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    uintptr_t (*site)(void) = (uintptr_t(*)(void))dlsym(h, "pprof_fixture_site");
    assert_non_null(site);
    assert_int_equal(unlink(copy), 0);
    uintptr_t st[1] = {site()};
    pm_prof_sample_t x = {2, 200, 1, 100, 100, 1, st};
    pm_prof_snapshot_t s;
    memset(&s, 0, sizeof s);
    s.sample_rate = 1;
    s.nsamples = 1;
    s.samples = &x;
    const char *path = out_path("pprof_deleted.pb.gz");
    assert_int_equal(write_snapshot(path, &s, PROFMALLOC_FORMAT_PPROF), 0);
    tprof_t p;
    load_profile(&p, path, NULL);
    const tloc_t *l = loc_by_addr(&p, st[0] - 1);
    assert_non_null(l);
    const tmap_t *m = map_by_id(&p, l->map);
    assert_non_null(m);
    assert_non_null(strstr(S(&p, m->file), "pprof_fixture_deleted.so"));
    assert_true(strlen(S(&p, m->build)) >= 16);
    assert_non_null(loc_func_name(&p, l));
    assert_string_equal(loc_func_name(&p, l), "pprof_fixture_site");
    free_profile(&p);
    dlclose(h);
}

/* Sums of the value columns of `go tool pprof -raw`. */
static void raw_totals(const char *out, uint64_t tot[4], int *lines)
{
    *lines = 0;
    memset(tot, 0, 4 * sizeof *tot);
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        unsigned long long v[4];
        int n = 0;
        if (sscanf(l, " %llu %llu %llu %llu:%n", &v[0], &v[1], &v[2], &v[3], &n) == 4 && n > 0) {
            for (int k = 0; k < 4; k++) tot[k] += v[k];
            ++*lines;
        }
    }
}

static void test_go_pprof_reads_proto(void **state)
{
    (void)state;
    if (!have_tool("go")) skip();
    make_snapshot();
    const char *path = out_path("pprof_go.pb.gz");
    assert_int_equal(write_snapshot(path, &snap3, PROFMALLOC_FORMAT_PPROF), 0);

    char *raw = run("go tool pprof -raw '%s' '%s' 2>&1", g_exe, path);
    assert_non_null(strstr(raw, "PeriodType: space bytes"));
    assert_non_null(strstr(raw, "Period: 524288"));
    assert_non_null(strstr(raw, "profmalloc: in_use=111111B "));
    uint64_t tot[4];
    int lines;
    raw_totals(raw, tot, &lines);
    assert_int_equal(lines, 3);
    assert_int_equal(tot[0], 15);
    assert_int_equal(tot[1], 5160);
    assert_int_equal(tot[2], 9);
    assert_int_equal(tot[3], 4596);
    free(raw);

    /* with the binary: names, and file:line from its DWARF */
    char *top = run("go tool pprof -top -sample_index=alloc_space '%s' '%s' 2>&1", g_exe, path);
    assert_non_null(strstr(top, "of 5160B total"));
    assert_non_null(strstr(top, "pprof_site_alpha"));
    free(top);
    char *lines_out = run("go tool pprof -top -lines '%s' '%s' 2>&1", g_exe, path);
    assert_non_null(strstr(lines_out, "pprof_site_beta"));
    assert_non_null(strstr(lines_out, "test_prof_pprof.c:"));
    free(lines_out);

    /* without symbolization: the names written in-process */
    char *nosym = run("go tool pprof -top -symbolize=none '%s' 2>&1", path);
    assert_non_null(strstr(nosym, "pprof_site_gamma"));
    assert_non_null(strstr(nosym, "of 4596B total"));
    free(nosym);
}

/* Unbiased values as a sampler at rate R reports n raw samples of size sz. */
static void unbiased(uint64_t n, uint64_t sz, uint64_t rate, uint64_t *objs, uint64_t *bytes)
{
    double scale = 1 / (1 - exp(-(double)sz / (double)rate));
    *objs = (uint64_t)llround((double)n * scale);
    *bytes = (uint64_t)llround((double)(n * sz) * scale);
}

typedef struct { uint64_t io, ib, ao, ab; } legacy_line_t;

/* Parses the header and sample lines; returns the number of sample lines. */
static int parse_legacy(const char *text, legacy_line_t *hdr, char *kind, size_t kcap,
                        legacy_line_t *lines, uintptr_t pcs[][8], int *depths, int max)
{
    unsigned long long a, b, c, d;
    int n = 0;
    char fmt[64];
    snprintf(fmt, sizeof fmt, "heap profile: %%llu: %%llu [ %%llu: %%llu] @ %%%zus", kcap - 1);
    assert_int_equal(sscanf(text, fmt, &a, &b, &c, &d, kind), 5);
    *hdr = (legacy_line_t){a, b, c, d};
    const char *l = strchr(text, '\n') + 1;
    while (*l && *l != '\n') {
        int off = 0;
        assert_int_equal(sscanf(l, "%llu: %llu [ %llu: %llu] @%n", &a, &b, &c, &d, &off), 4);
        assert_true(n < max);
        lines[n] = (legacy_line_t){a, b, c, d};
        const char *q = l + off;
        depths[n] = 0;
        unsigned long long pc;
        int used;
        while (sscanf(q, " 0x%llx%n", &pc, &used) == 1) {
            pcs[n][depths[n]++] = (uintptr_t)pc;
            q += used;
        }
        assert_int_equal(*q, '\n');
        l = q + 1;
        n++;
    }
    assert_int_equal(strncmp(l, "\nMAPPED_LIBRARIES:\n", 19), 0);
    return n;
}

static const uint64_t legacy_n[3][2] = {{3, 2}, {5, 5}, {2, 1}}; /* raw (alloc, inuse) */
static const uint64_t legacy_size[3] = {16, 4096, 1 << 20};

static void make_legacy_snapshot(pm_prof_snapshot_t *s, pm_prof_sample_t *v, uint64_t rate)
{
    make_snapshot();
    uintptr_t *stacks[3] = {stack_a, stack_b, stack_c};
    for (int i = 0; i < 3; i++) {
        v[i] = (pm_prof_sample_t){0, 0, 0, 0, legacy_size[i], i == 0 ? 3 : i == 1 ? 2 : 1,
                                  stacks[i]};
        unbiased(legacy_n[i][0], legacy_size[i], rate, &v[i].alloc_objects, &v[i].alloc_bytes);
        unbiased(legacy_n[i][1], legacy_size[i], rate, &v[i].inuse_objects, &v[i].inuse_bytes);
    }
    *s = snap3;
    s->sample_rate = rate;
    s->nsamples = 3;
    s->samples = v;
}

static void test_legacy_text(void **state)
{
    (void)state;
    pm_prof_sample_t v[3];
    pm_prof_snapshot_t s;
    make_legacy_snapshot(&s, v, 524288);
    const char *path = out_path("pprof_legacy.heap");
    assert_int_equal(write_snapshot(path, &s, PROFMALLOC_FORMAT_LEGACY), 0);
    size_t len;
    char *text = (char *)slurp(path, &len);
    legacy_line_t hdr, lines[8];
    uintptr_t pcs[8][8];
    int depths[8];
    char kind[32];
    int n = parse_legacy(text, &hdr, kind, sizeof kind, lines, pcs, depths, 8);
    assert_string_equal(kind, "heap_v2/524288");
    assert_int_equal(n, 3);
    legacy_line_t sum = {0, 0, 0, 0};
    for (int i = 0; i < 3; i++) {
        /* raw sample counts, as gperftools writes them: readers unbias */
        assert_int_equal(lines[i].ao, legacy_n[i][0]);
        assert_int_equal(lines[i].ab, legacy_n[i][0] * legacy_size[i]);
        assert_int_equal(lines[i].io, legacy_n[i][1]);
        assert_int_equal(lines[i].ib, legacy_n[i][1] * legacy_size[i]);
        assert_int_equal(depths[i], v[i].depth);
        for (uint32_t d = 0; d < v[i].depth; d++) assert_int_equal(pcs[i][d], v[i].pcs[d]);
        sum.io += lines[i].io;
        sum.ib += lines[i].ib;
        sum.ao += lines[i].ao;
        sum.ab += lines[i].ab;
    }
    assert_memory_equal(&hdr, &sum, sizeof sum);
    /* /proc/self/maps follows, naming this binary */
    assert_non_null(strstr(strstr(text, "MAPPED_LIBRARIES:\n"), g_exe));
    free(text);

    /* at rate 1 the values are exact: "heapprofile", no unbiasing */
    pm_prof_sample_t e = {7, 700, 3, 300, 100, 1, stack_c};
    pm_prof_snapshot_t s1 = snap3;
    s1.sample_rate = 1;
    s1.nsamples = 1;
    s1.samples = &e;
    assert_int_equal(write_snapshot(path, &s1, PROFMALLOC_FORMAT_LEGACY), 0);
    text = (char *)slurp(path, &len);
    n = parse_legacy(text, &hdr, kind, sizeof kind, lines, pcs, depths, 8);
    assert_string_equal(kind, "heapprofile");
    assert_int_equal(n, 1);
    assert_int_equal(lines[0].io, 3);
    assert_int_equal(lines[0].ib, 300);
    assert_int_equal(lines[0].ao, 7);
    assert_int_equal(lines[0].ab, 700);
    free(text);
}

static void test_legacy_readers(void **state)
{
    (void)state;
    bool go = have_tool("go"), gp = have_tool("google-pprof");
    if (!go && !gp) skip();
    pm_prof_sample_t v[3];
    pm_prof_snapshot_t s;
    make_legacy_snapshot(&s, v, 524288);
    const char *path = out_path("pprof_readers.heap");
    assert_int_equal(write_snapshot(path, &s, PROFMALLOC_FORMAT_LEGACY), 0);
    uint64_t want[4] = {0, 0, 0, 0};
    for (int i = 0; i < 3; i++) {
        want[0] += v[i].alloc_objects;
        want[1] += v[i].alloc_bytes;
        want[2] += v[i].inuse_objects;
        want[3] += v[i].inuse_bytes;
    }
    if (go) {
        /* pprof unbiases each line again: totals match the snapshot's */
        char *raw = run("go tool pprof -raw '%s' '%s' 2>&1", g_exe, path);
        uint64_t tot[4];
        int lines;
        raw_totals(raw, tot, &lines);
        assert_int_equal(lines, 3);
        for (int k = 0; k < 4; k++) {
            /* pprof truncates each line's product: up to 1 per line */
            double diff = fabs((double)tot[k] - (double)want[k]);
            if (diff > lines + 1e-6 * (double)want[k]) fail_msg("column %d: pprof %llu, snapshot %llu", k,
                                     (unsigned long long)tot[k], (unsigned long long)want[k]);
        }
        free(raw);
    }
    if (gp) {
        char *out = run("google-pprof --text --inuse_objects '%s' '%s' 2>&1", g_exe, path);
        unsigned long long total = 0;
        const char *t = strstr(out, "Total: ");
        assert_non_null(t);
        assert_int_equal(sscanf(t, "Total: %llu objects", &total), 1);
        assert_true(total + 1 >= want[2] && total <= want[2] + 1);
        assert_non_null(strstr(out, "pprof_site_alpha"));
        free(out);
    }
}

static void test_errors(void **state)
{
    (void)state;
    make_snapshot();
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    close(fd); /* now a bad descriptor */
    for (int format = 0; format < 2; format++) {
        errno = 0;
        assert_int_equal(pm_pprof_write(fd, &snap3, format), -1);
        assert_int_equal(errno, EBADF);
        errno = 0;
        assert_int_equal(pm_pprof_write(-1, &snap3, format), -1);
        assert_int_equal(errno, EBADF);
    }
    int ok = open("/dev/null", O_WRONLY | O_CLOEXEC);
    errno = 0;
    assert_int_equal(pm_pprof_write(ok, &snap3, 7), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(pm_pprof_write(ok, NULL, PROFMALLOC_FORMAT_PPROF), -1);
    assert_int_equal(errno, EINVAL);
    pm_prof_sample_t deep = samples3[0];
    deep.depth = PM_STACK_MAX + 1;
    pm_prof_snapshot_t bad = snap3;
    bad.nsamples = 1;
    bad.samples = &deep;
    errno = 0;
    assert_int_equal(pm_pprof_write(ok, &bad, PROFMALLOC_FORMAT_PPROF), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(pm_pprof_write(ok, &snap3, PROFMALLOC_FORMAT_PPROF), 0);
    close(ok);
}

/* No malloc, calloc, realloc or free, by the writers or by libc on its behalf. */
static void test_no_allocation(void **state)
{
    (void)state;
    make_snapshot();
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    g_allocs = 0;
    g_counting = 1;
    free(strdup("the counter sees libc's own calls")); /* sanity: 2 calls */
    g_counting = 0;
    if (!g_allocs) skip(); /* malloc is not ours here (valgrind, sanitizers) */
    assert_int_equal(g_allocs, 2);
    g_allocs = 0;
    g_counting = 1;
    int rc1 = pm_pprof_write(fd, &snap3, PROFMALLOC_FORMAT_PPROF);
    int rc2 = pm_pprof_write(fd, &snap3, PROFMALLOC_FORMAT_LEGACY);
    g_counting = 0;
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, 0);
    assert_int_equal(g_allocs, 0);
    close(fd);
}

/* Bytes of address space this process has mapped, read without stdio. */
static uint64_t mapped_bytes(void)
{
    static char buf[1 << 20];
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    close(fd);
    buf[n] = 0;
    uint64_t total = 0;
    for (char *l = buf; *l;) {
        char *end;
        unsigned long long a = strtoull(l, &end, 16), b = strtoull(end + 1, NULL, 16);
        total += b - a;
        l = strchr(l, '\n');
        if (!l) break;
        l++;
    }
    return total;
}

/* Every scratch page (and every mapped ELF file) is unmapped again. */
static void test_no_mapping_left_behind(void **state)
{
    (void)state;
    make_snapshot();
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(pm_pprof_write(fd, &snap3, PROFMALLOC_FORMAT_PPROF), 0); /* warm-up */
    uint64_t before = mapped_bytes();
    assert_int_equal(pm_pprof_write(fd, &snap3, PROFMALLOC_FORMAT_PPROF), 0);
    assert_int_equal(pm_pprof_write(fd, &snap3, PROFMALLOC_FORMAT_LEGACY), 0);
    uint64_t after = mapped_bytes();
    assert_int_equal(after, before);
    close(fd);
}

int main(void)
{
    ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
    if (n <= 0) return 1;
    g_exe[n] = 0;
    memcpy(g_dir, g_exe, (size_t)n + 1);
    *strrchr(g_dir, '/') = 0;
    if (!getenv("HOME")) setenv("HOME", g_dir, 1); /* go tool wants one */

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proto_fields),
        cmocka_unit_test(test_proto_empty_snapshot),
        cmocka_unit_test(test_proto_many_samples),
        cmocka_unit_test(test_proto_deleted_library),
        cmocka_unit_test(test_go_pprof_reads_proto),
        cmocka_unit_test(test_legacy_text),
        cmocka_unit_test(test_legacy_readers),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_no_allocation),
        cmocka_unit_test(test_no_mapping_left_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
