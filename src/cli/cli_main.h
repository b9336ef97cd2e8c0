/* cli_main.h — the subcommands' shared declarations (report.c, main.c,
 * flame.c, run.c). */
#ifndef PM_CLI_MAIN_H
#define PM_CLI_MAIN_H
#include "cli.h"

typedef struct {
    bool alloc, objects, lines, cum;
} view_t;

#define PM_CLI_MAXDEPTH 512

typedef struct {
    char *key, *func, *file, *obj;
    uint64_t hash, vaddr;
    int64_t line;
    double best;
    double val[2], var[2], n[2];
} site_t;

typedef struct {
    site_t *sites;
    size_t n, cap;
    uint32_t *hash;
    size_t hcap;
    double total[2], totvar[2], totn[2];
} sitetab_t;

typedef struct {
    char key[48];
    unsigned long long value;
    bool bytes;
} total_t;

extern bool cli_color;
const char *col(const char *code);
void cli_setup_color(FILE *f);
void json_str(FILE *f, const char *s);
const char *loc_func(const cli_loc_t *l, char *buf, size_t len);
const char *loc_file(const cli_loc_t *l, int64_t *line);
void sample_value(const cli_profile_t *p, const cli_sample_t *s, const view_t *v, double *val, double *var,
                  double *n);
void collect_sites(const cli_profile_t *p, const view_t *v, int which, sitetab_t *t);
void sort_sites(sitetab_t *t, bool by_key);
void free_sites(sitetab_t *t);
const char *site_where(const site_t *s, char *buf, size_t len);
void print_site(FILE *f, const site_t *s, int width);
size_t parse_totals(const cli_profile_t *p, total_t *out, size_t max);
int find_total(const total_t *t, size_t n, const char *key, double *v);
const char *index_name(const view_t *v);
void fmt_value(const view_t *v, double x, char *buf, size_t len);
void fmt_err(const view_t *v, double var, char *buf, size_t len);

/* loads and symbolizes a profile, or prints the error and returns -1 */
int load_profile(const char *path, cli_profile_t *p);
extern cli_sym_opts_t sym_opts;

int cmd_top(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_flame(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_timeline(int argc, char **argv);
int top_print(FILE *f, const char *title, cli_profile_t *const *ps, size_t nps, const view_t *v, int limit,
              bool json);
int parse_size(const char *s, double *out);
/* -n N: a decimal count into *out; 0, or -1 when s is not one. */
int parse_count(const char *s, int *out);

#endif
