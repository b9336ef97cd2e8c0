/* cli.h — the profmalloc command's shared types: a heap profile read from
 * pprof profile.proto or gperftools legacy text, the symbolizer, and the
 * small helpers every subcommand uses.  The command is an ordinary program
 * (stdio, malloc); none of this is linked into the allocator. */
#ifndef PM_CLI_H
#define PM_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Value indexes, in Go's heap layout. */
enum { V_ALLOC_OBJ, V_ALLOC_BYTES, V_INUSE_OBJ, V_INUSE_BYTES, V_N };

typedef struct {
    uint64_t start, limit, offset;
    char *file, *build_id;
} cli_map_t;

typedef struct {
    uint64_t addr;  /* the call instruction (return address - 1) */
    char *func;     /* name from the profile, or NULL */
    char *file;     /* source file from the profile, or NULL */
    int64_t line;
    int map;        /* index into maps, or -1 */
    /* filled by the symbolizer */
    char *sym_func, *sym_file;
    int64_t sym_line;
} cli_loc_t;

typedef struct {
    uint32_t *locs; /* indexes into locs, leaf first */
    uint32_t depth;
    double v[V_N];  /* estimated (scaled) values */
    double n[2];    /* samples behind the inuse and alloc values */
    uint64_t size;  /* object size label, 0 when unknown */
} cli_sample_t;

typedef struct {
    cli_sample_t *samples;
    size_t nsamples;
    cli_loc_t *locs;
    size_t nlocs;
    cli_map_t *maps;
    size_t nmaps;
    char **comments;
    size_t ncomments;
    uint64_t period;      /* sample rate in bytes; <= 1 means exact */
    int64_t time_ns;
    bool legacy;          /* read from legacy text */
    bool has_counts;      /* n[] known (profmalloc or gperftools data) */
} cli_profile_t;

/* readers: 0 on success, else -1 with a message in err */
int cli_read_profile(const char *path, cli_profile_t *p, char *err, size_t errlen);
int cli_parse_profile(const uint8_t *data, size_t len, cli_profile_t *p, char *err, size_t errlen);
void cli_free_profile(cli_profile_t *p);

/* samples behind an estimate of objs objects (bytes in all) at rate R */
double cli_count_behind(double objs, double bytes, uint64_t size, uint64_t rate);

/* timeline.c: the PROFMALLOC_TIMELINE log (doc/timeline.md, version 1) */
typedef struct {
    uint64_t t, live, max, min, allocs, frees, alloc_bytes, free_bytes;
    uint64_t in_use; /* the allocator's exact figure (a later field), or 0 */
} cli_tl_rec_t;

typedef struct {
    uint64_t bytes, objs, size;
    uint64_t *pcs;
    uint32_t depth;
} cli_tl_site_t;

typedef struct {
    uint64_t t, live;
    cli_tl_site_t *sites;
    uint32_t nsites;
} cli_tl_peak_t;

typedef struct {
    cli_tl_rec_t *recs;
    size_t nrecs;
    cli_tl_peak_t *peaks;
    size_t npeaks;
    cli_map_t *maps;
    size_t nmaps;
    uint64_t rate, pid, start_ns, interval_ms;
    bool ended;     /* a Z record: the process exited normally */
    bool truncated; /* an incomplete last line or peak block was dropped */
} cli_timeline_t;

int cli_parse_timeline(const uint8_t *data, size_t len, cli_timeline_t *tl, char *err, size_t errlen);
void cli_free_timeline(cli_timeline_t *tl);
/* one part of a rotated log, appended to tl (first: the oldest part) */
int cli_timeline_part(const char *text, size_t len, cli_timeline_t *tl, bool first, char *err, size_t errlen);
/* the profile at peak i (inuse values only) */
void cli_timeline_profile(const cli_timeline_t *tl, size_t i, cli_profile_t *p);

/* an output file written to a temporary name and renamed when complete */
typedef struct {
    FILE *f;
    const char *path;
    char tmp[4200];
} cli_out_t;
FILE *cli_out_open(const char *path, cli_out_t *o);
int cli_out_close(cli_out_t *o, bool ok); /* 0, or -1 (the file is not written) */

/* writers (convert) */
int cli_write_pprof(FILE *f, const cli_profile_t *p, bool gzip);
int cli_write_legacy(FILE *f, const cli_profile_t *p);
/* p to path, atomically, as gperftools text (.heap, .txt), raw
 * profile.proto (.pb) or gzip'd; 0, or -1 with a message printed. */
int cli_write_profile_file(const char *path, const cli_profile_t *p);

/* inflate.c: gzip (one or more members), zlib or raw deflate into a
 * malloc'd buffer; returns 0, or -1 with a message. */
int cli_gunzip(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen, const char **err);
int cli_inflate_raw(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen,
                    size_t *used, size_t limit, const char **err);
int cli_zlib_inflate(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen, size_t limit,
                     const char **err);
uint32_t cli_crc32(uint32_t crc, const uint8_t *p, size_t n);

/* symbolize.c */
typedef struct {
    const char *debug_dir; /* default /usr/lib/debug */
    bool progress;         /* a progress line on stderr after a second */
    bool verbose;
} cli_sym_opts_t;
void cli_symbolize(cli_profile_t *p, const cli_sym_opts_t *o);
int cli_loc_vaddr(const cli_profile_t *p, const cli_loc_t *l, uint64_t *va);

/* demangle.c: a malloc'd demangled name, or NULL when not understood */
char *cli_demangle(const char *mangled);

/* math without libm */
double cli_exp(double x);
double cli_sqrt(double x);
double cli_one_minus_exp_neg(double x);

/* util */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t k);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
int cli_slurp(const char *path, uint8_t **data, size_t *len, char *err, size_t errlen);
const char *cli_human(double bytes, char *buf, size_t len);

#endif
