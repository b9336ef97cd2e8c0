/* gen_options.c — writes the PROFMALLOC_* variables' documentation from
 * the options table (src/options.c), the one source of it: `make docs`
 * rewrites the part of README.md, doc/profmalloc.3 and
 * include/profmalloc.h between the "options:" markers, and `make check`
 * (check-docs) fails when a committed file differs from what this writes.
 *
 *   gen_options FILE     FILE with its generated part rewritten, on stdout
 *
 * The kind of output follows FILE's name (.md, .3, .h).  A row's doc marks
 * code with `backquotes`; its default is the option's initial value in
 * pm_options, so a row added to the table needs nothing here.  A tool, not
 * the allocator: stdio and malloc are the C library's. */
#include "pm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum style { MD, MAN, HDR };

static const char *begin_of(enum style st)
{
    return st == MD ? "<!-- options: begin (make docs, from src/options.c) -->"
         : st == MAN ? ".\\\" options: begin (make docs, from src/options.c)"
                     : " * options: begin (make docs, from src/options.c)";
}
static const char *end_of(enum style st)
{
    return st == MD ? "<!-- options: end -->" : st == MAN ? ".\\\" options: end" : " * options: end";
}

/* doc with its `code` marks as the style wants them. */
static void put_doc(FILE *out, const char *doc, enum style st)
{
    int in_code = 0;
    for (const char *s = doc; *s; s++) {
        if (*s == '`') {
            in_code = !in_code;
            if (st == MD) fputc('`', out);
            else if (st == MAN) fputs(in_code ? "\\fB" : "\\fR", out);
            continue;
        }
        if (st == MAN && *s == '\\') fputs("\\e", out);
        else if (st == MAN && *s == '-' && in_code) fputs("\\-", out);
        else if (st == MD && *s == '|') fputs("\\|", out);
        else fputc(*s, out);
    }
}

/* The header's comment: doc without marks, wrapped after the name column. */
static void put_hdr_row(FILE *out, const char *name, const char *doc, const char *def)
{
    char text[1024];
    size_t n = 0;
    for (const char *s = doc; *s && n < sizeof text - 64; s++)
        if (*s != '`') text[n++] = *s;
    n += (size_t)snprintf(text + n, sizeof text - n, " (default %s)", def);
    text[n] = 0;
    const int col = 30, width = 78;
    fprintf(out, " *   %-*s", col - 5, name);
    int at = col;
    if ((int)strlen(name) > col - 6) {
        fprintf(out, "\n *%*s", col - 2, "");
    }
    char *word = strtok(text, " ");
    int first = 1;
    while (word) {
        int len = (int)strlen(word);
        if (!first && at + 1 + len > width) {
            fprintf(out, "\n *%*s", col - 2, "");
            at = col;
            first = 1;
        }
        fprintf(out, "%s%s", first ? "" : " ", word);
        at += len + !first;
        first = 0;
        word = strtok(NULL, " ");
    }
    fputc('\n', out);
}

static void put_rows(FILE *out, enum style st)
{
    if (st == MD) fputs("| variable | meaning | default |\n|---|---|---|\n", out);
    const char *name, *doc;
    char def[64];
    for (size_t i = 0; pm_options_row(i, &name, &doc, def, sizeof def) == 0; i++) {
        if (st == MD) {
            fprintf(out, "| `%s` | ", name);
            put_doc(out, doc, st);
            fprintf(out, " | `%s` |\n", def);
        } else if (st == MAN) {
            /* a line starting with . or ' would be a roff request */
            fprintf(out, ".TP\n.B %s\n%s", name, doc[0] == '.' || doc[0] == '\'' ? "\\&" : "");
            put_doc(out, doc, st);
            fprintf(out, ".\nDefault: %s.\n", def);
        } else {
            put_hdr_row(out, name, doc, def);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fputs("usage: gen_options FILE (README.md, doc/profmalloc.3, include/profmalloc.h)\n", stderr);
        return 2;
    }
    const char *path = argv[1], *dot = strrchr(path, '.');
    enum style st = dot && !strcmp(dot, ".md") ? MD : dot && !strcmp(dot, ".3") ? MAN : HDR;
    if (!dot || (st == HDR && strcmp(dot, ".h"))) {
        fprintf(stderr, "gen_options: %s: not a .md, .3 or .h file\n", path);
        return 2;
    }
    FILE *in = fopen(path, "r");
    if (!in) {
        perror(path);
        return 1;
    }
    char line[4096];
    int state = 0; /* 0 before the part, 1 inside it, 2 after it */
    while (fgets(line, sizeof line, in)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[--n] = 0;
        if (state == 1) {
            if (strcmp(line, end_of(st)) != 0) continue;
            put_rows(stdout, st);
            state = 2;
        } else if (state == 0 && !strcmp(line, begin_of(st))) {
            state = 1;
        }
        puts(line);
    }
    fclose(in);
    if (state != 2) {
        fprintf(stderr, "gen_options: %s: no \"%s\" ... \"%s\" lines\n", path, begin_of(st), end_of(st));
        return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
