/* demangle.c — an Itanium C++ ABI demangler for the common forms: nested
 * and std:: names, templates (with T_ parameters and return types),
 * constructors and destructors, operators, builtin, qualified, pointer
 * and reference types, substitutions, local names, ABI tags and gcc's
 * clone suffixes, printed as c++filt prints them.  Anything else
 * (function pointer and array types, expressions, most special names)
 * makes it give up: the caller then shows the mangled name, never a
 * wrong one.  test/cli/test_demangle.c pins both behaviours. */
#include "cli.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAXSUB 256

typedef struct {
    const char *p, *end;
    bool bad;
    char *subs[MAXSUB];
    int nsubs;
    char *targs[64];  /* the latest template arguments, for T_ */
    int ntargs;
    int depth;
    int in_type; /* template args inside a type do not rebind T_ */
} dm_t;

static char *cat(const char *a, const char *b)
{
    size_t x = strlen(a), y = strlen(b);
    char *r = xmalloc(x + y + 1);
    memcpy(r, a, x);
    memcpy(r + x, b, y + 1);
    return r;
}

static char *catf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *r = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(r, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return r;
}

static bool fail(dm_t *d)
{
    d->bad = true;
    return false;
}

static bool peek(dm_t *d, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(d->end - d->p) >= n && !memcmp(d->p, s, n);
}

static bool eat(dm_t *d, const char *s)
{
    if (!peek(d, s)) return false;
    d->p += strlen(s);
    return true;
}

static void add_sub(dm_t *d, const char *s)
{
    if (d->nsubs < MAXSUB) d->subs[d->nsubs++] = xstrdup(s);
    else d->bad = true;
}

static char *type(dm_t *d);
static char *name(dm_t *d, bool *is_template, bool *cdtor, bool as_type, char **cv);
static char *encoding(dm_t *d, bool local);

static bool number(dm_t *d, long *v)
{
    if (d->p >= d->end || !isdigit((unsigned char)*d->p)) return fail(d);
    long x = 0;
    while (d->p < d->end && isdigit((unsigned char)*d->p)) {
        x = x * 10 + (*d->p++ - '0');
        if (x > 100000) return fail(d);
    }
    *v = x;
    return true;
}

static char *source_name(dm_t *d)
{
    long n;
    if (!number(d, &n) || n <= 0 || n > d->end - d->p) return fail(d), NULL;
    char *s;
    if (n >= 10 && !strncmp(d->p, "_GLOBAL__N", 10)) s = xstrdup("(anonymous namespace)");
    else s = xstrndup(d->p, (size_t)n);
    d->p += n;
    return s;
}

static const char *builtin(char c)
{
    switch (c) {
    case 'v': return "void";
    case 'w': return "wchar_t";
    case 'b': return "bool";
    case 'c': return "char";
    case 'a': return "signed char";
    case 'h': return "unsigned char";
    case 's': return "short";
    case 't': return "unsigned short";
    case 'i': return "int";
    case 'j': return "unsigned int";
    case 'l': return "long";
    case 'm': return "unsigned long";
    case 'x': return "long long";
    case 'y': return "unsigned long long";
    case 'n': return "__int128";
    case 'o': return "unsigned __int128";
    case 'f': return "float";
    case 'd': return "double";
    case 'e': return "long double";
    case 'g': return "__float128";
    case 'z': return "...";
    default: return NULL;
    }
}

/* S_, S<base36>_, and the std abbreviations */
static char *substitution(dm_t *d, bool *is_std_abbrev)
{
    *is_std_abbrev = false;
    if (!eat(d, "S")) return fail(d), NULL;
    if (d->p >= d->end) return fail(d), NULL;
    static const char *const abbr[][2] = {{"a", "std::allocator"}, {"b", "std::basic_string"},
                                          {"s", "std::basic_string<char, std::char_traits<char>, std::allocator<char> >"},
        {"i", "std::basic_istream<char, std::char_traits<char> >"},
        {"o", "std::basic_ostream<char, std::char_traits<char> >"},
        {"d", "std::basic_iostream<char, std::char_traits<char> >"}};
    for (int i = 0; i < 6; i++)
        if (*d->p == abbr[i][0][0]) {
            d->p++;
            *is_std_abbrev = true;
            return xstrdup(abbr[i][1]);
        }
    long id = 0;
    if (*d->p != '_') {
        while (d->p < d->end && *d->p != '_') {
            char c = *d->p++;
            if (isdigit((unsigned char)c)) id = id * 36 + (c - '0');
            else if (c >= 'A' && c <= 'Z') id = id * 36 + (c - 'A' + 10);
            else return fail(d), NULL;
            if (id > MAXSUB) return fail(d), NULL;
        }
        id++;
    }
    if (!eat(d, "_") || id >= d->nsubs) return fail(d), NULL;
    return xstrdup(d->subs[id]);
}

static char *template_param(dm_t *d)
{
    if (!eat(d, "T")) return fail(d), NULL;
    long id = 0;
    if (!peek(d, "_")) {
        if (!number(d, &id)) return NULL;
        id++;
    }
    if (!eat(d, "_") || id >= d->ntargs) return fail(d), NULL;
    return xstrdup(d->targs[id]);
}

static char *template_args(dm_t *d)
{
    if (!eat(d, "I")) return fail(d), NULL;
    char *args[64];
    int n = 0;
    while (!d->bad && !eat(d, "E")) {
        if (d->p >= d->end || n == 64) return fail(d), NULL;
        char *a = NULL;
        if (eat(d, "L")) {
            if (peek(d, "_Z")) return fail(d), NULL;
            char t = d->p < d->end ? *d->p++ : 0;
            bool neg = eat(d, "n");
            long v;
            if (!number(d, &v) || !eat(d, "E")) return NULL;
            const char *suf = t == 'i' ? "" : t == 'j' ? "u" : t == 'l' ? "l" : t == 'm' ? "ul" : t == 'x' ? "ll"
                              : t == 'y' ? "ull" : NULL;
            if (t == 'b' && (v == 0 || v == 1)) a = xstrdup(v ? "true" : "false");
            else if (suf) a = catf("%s%ld%s", neg ? "-" : "", v, suf);
            else return fail(d), NULL;
        } else if (peek(d, "X") || peek(d, "J")) {
            return fail(d), NULL;
        } else {
            a = type(d);
            if (!a) return NULL;
        }
        args[n++] = a;
    }
    if (d->bad) return NULL;
    bool bind = d->in_type == 0;
    if (bind) {
        for (int i = 0; i < d->ntargs; i++) free(d->targs[i]);
        d->ntargs = 0;
    }
    size_t len = 3;
    for (int i = 0; i < n; i++) len += strlen(args[i]) + 2;
    char *r = xmalloc(len + 2);
    strcpy(r, "<");
    for (int i = 0; i < n; i++) {
        if (i) strcat(r, ", ");
        strcat(r, args[i]);
        if (bind) d->targs[d->ntargs++] = args[i];
        else free(args[i]);
    }
    if (r[strlen(r) - 1] == '>') strcat(r, " ");
    strcat(r, ">");
    return r;
}

static const struct {
    const char *code, *name;
} ops[] = {{"nw", "new"},  {"na", "new[]"}, {"dl", "delete"}, {"da", "delete[]"}, {"ps", "+"},  {"ng", "-"},
           {"ad", "&"},    {"de", "*"},     {"co", "~"},      {"pl", "+"},        {"mi", "-"},  {"ml", "*"},
           {"dv", "/"},    {"rm", "%"},     {"an", "&"},      {"or", "|"},        {"eo", "^"},  {"aS", "="},
           {"pL", "+="},   {"mI", "-="},    {"mL", "*="},     {"dV", "/="},       {"rM", "%="}, {"aN", "&="},
           {"oR", "|="},   {"eO", "^="},    {"ls", "<<"},     {"rs", ">>"},       {"lS", "<<="}, {"rS", ">>="},
           {"eq", "=="},   {"ne", "!="},    {"lt", "<"},      {"gt", ">"},        {"le", "<="}, {"ge", ">="},
           {"ss", "<=>"},  {"nt", "!"},     {"aa", "&&"},     {"oo", "||"},       {"pp", "++"}, {"mm", "--"},
           {"cm", ","},    {"pm", "->*"},   {"pt", "->"},     {"cl", "()"},       {"ix", "[]"}, {NULL, NULL}};

/* unqualified-name; *cdtor set for constructors and destructors; last is
 * the enclosing class's plain name (for those). */
static char *unqualified(dm_t *d, const char *last, bool *cdtor)
{
    char *r = NULL;
    *cdtor = false;
    if (d->p >= d->end) return fail(d), NULL;
    if (isdigit((unsigned char)*d->p)) {
        r = source_name(d);
    } else if (*d->p == 'C' && d->p + 1 < d->end && strchr("123", d->p[1])) {
        if (!last) return fail(d), NULL;
        d->p += 2;
        r = xstrdup(last);
        *cdtor = true;
    } else if (*d->p == 'D' && d->p + 1 < d->end && strchr("012", d->p[1])) {
        if (!last) return fail(d), NULL;
        d->p += 2;
        r = cat("~", last);
        *cdtor = true;
    } else if (peek(d, "cv")) {
        d->p += 2;
        char *t = type(d);
        if (!t) return NULL;
        r = cat("operator ", t);
        free(t);
        *cdtor = true; /* no return type printed */
    } else {
        for (int i = 0; ops[i].code; i++)
            if (peek(d, ops[i].code)) {
                d->p += 2;
                const char *n = ops[i].name;
                r = cat(isalpha((unsigned char)n[0]) ? "operator " : "operator", n);
                break;
            }
        if (!r) return fail(d), NULL;
    }
    while (r && eat(d, "B")) {
        char *tag = source_name(d);
        if (!tag) {
            free(r);
            return NULL;
        }
        char *t = catf("%s[abi:%s]", r, tag);
        free(r);
        free(tag);
        r = t;
    }
    return r;
}

/* The plain name of a component, for constructors: "vector" from
 * "std::vector<int>", "basic_string" from the abbreviation. */
static char *plain(const char *s)
{
    size_t n = strcspn(s, "<[");
    const char *c = s;
    for (const char *q = s; q + 1 < s + n; q++)
        if (q[0] == ':' && q[1] == ':') c = q + 2;
    return xstrndup(c, (size_t)(s + n - c));
}

/* nested-name or unscoped name, with template args.  *cv gets the
 * method's qualifiers (" const"). */
static char *name(dm_t *d, bool *is_template, bool *cdtor, bool as_type, char **cv)
{
    *is_template = false;
    *cdtor = false;
    if (cv) *cv = NULL;
    if (++d->depth > 64) return fail(d), NULL;
    char *r = NULL;
    if (eat(d, "N")) {
        char quals[32] = "";
        while (d->p < d->end && strchr("rVK", *d->p)) {
            char q = *d->p++;
            strcat(quals, q == 'K' ? " const" : q == 'V' ? " volatile" : " restrict");
        }
        if (eat(d, "R")) strcat(quals, " &");
        else if (eat(d, "O")) strcat(quals, " &&");
        if (cv) *cv = xstrdup(quals);
        char *last = NULL;
        while (!d->bad && !eat(d, "E")) {
            if (d->p >= d->end) return fail(d), free(r), free(last), NULL;
            char *comp = NULL;
            bool std_abbr = false;
            if (peek(d, "St")) {
                d->p += 2;
                char *u = unqualified(d, last, cdtor);
                if (!u) return free(r), free(last), NULL;
                comp = cat("std::", u);
                free(u);
                *is_template = false;
            } else if (peek(d, "S")) {
                comp = substitution(d, &std_abbr);
                if (!comp) return free(r), free(last), NULL;
                if (r) return fail(d), free(r), free(last), free(comp), NULL;
                r = comp;
                free(last);
                last = plain(comp);
                continue;
            } else if (peek(d, "T")) {
                comp = template_param(d);
                if (!comp) return free(r), free(last), NULL;
                if (r) return fail(d), free(r), free(last), free(comp), NULL;
                r = comp;
                add_sub(d, r);
                free(last);
                last = plain(comp);
                continue;
            } else if (peek(d, "I")) {
                if (!r) return fail(d), free(last), NULL;
                char *args = template_args(d);
                if (!args) return free(r), free(last), NULL;
                char *t = cat(r, r[strlen(r) - 1] == '<' ? " " : "");
                free(r);
                r = t;
                t = cat(r, args);
                free(args);
                free(r);
                r = t;
                *is_template = true;
                if (!peek(d, "E") || as_type) add_sub(d, r);
                continue;
            } else {
                comp = unqualified(d, last, cdtor);
                if (!comp) return free(r), free(last), NULL;
                *is_template = false;
            }
            char *t = r ? catf("%s::%s", r, comp) : xstrdup(comp);
            free(r);
            r = t;
            free(last);
            last = plain(comp);
            free(comp);
            if (!peek(d, "E") || as_type) add_sub(d, r);
        }
        free(last);
        if (d->bad) return free(r), NULL;
    } else if (peek(d, "Z")) {
        d->p++;
        char *outer = encoding(d, true);
        if (!outer || !eat(d, "E")) return free(outer), fail(d), NULL;
        if (peek(d, "s")) return free(outer), fail(d), NULL;
        char *inner = name(d, is_template, cdtor, false, NULL);
        if (!inner) return free(outer), NULL;
        if (eat(d, "_")) {
            long n;
            if (peek(d, "_")) d->p++;
            if (!number(d, &n)) return free(outer), free(inner), NULL;
            eat(d, "_");
        }
        r = catf("%s::%s", outer, inner);
        free(outer);
        free(inner);
    } else {
        bool std = eat(d, "St"), abbr = false, from_sub = false;
        if (!std && peek(d, "S")) {
            from_sub = true;
            r = substitution(d, &abbr);
            if (!r) return NULL;
            if (!peek(d, "I")) return r; /* a plain substitution */
        } else {
            char *u = unqualified(d, NULL, cdtor);
            if (!u) return NULL;
            r = std ? cat("std::", u) : u;
            if (std) free(u);
        }
        if (peek(d, "I")) {
            if (!from_sub) add_sub(d, r);
            char *args = template_args(d);
            if (!args) return free(r), NULL;
            char *t = catf("%s%s%s", r, r[strlen(r) - 1] == '<' ? " " : "", args);
            free(r);
            free(args);
            r = t;
            *is_template = true;
            if (as_type) add_sub(d, r);
        } else if (as_type) {
            add_sub(d, r);
        }
    }
    d->depth--;
    return r;
}

static char *type_inner(dm_t *d);

/* A template parameter or substitution followed by template-args: the two
 * joined, itself a substitution candidate.  Takes r; NULL on failure. */
static char *with_args(dm_t *d, char *r)
{
    if (!peek(d, "I")) return r;
    char *args = template_args(d);
    if (!args) return free(r), NULL;
    char *t = cat(r, args);
    free(r), free(args);
    add_sub(d, t);
    return t;
}

static char *type(dm_t *d)
{
    d->in_type++;
    char *r = type_inner(d);
    d->in_type--;
    return r;
}

static char *type_inner(dm_t *d)
{
    if (d->p >= d->end || ++d->depth > 64) return fail(d), NULL;
    char c = *d->p;
    char *r = NULL;
    const char *b = builtin(c);
    if (b) {
        d->p++;
        r = xstrdup(b);
    } else if (peek(d, "Dn")) {
        d->p += 2;
        r = xstrdup("decltype(nullptr)");
    } else if (peek(d, "Di") || peek(d, "Ds") || peek(d, "Du") || peek(d, "Da")) {
        char k = d->p[1];
        d->p += 2;
        r = xstrdup(k == 'i' ? "char32_t" : k == 's' ? "char16_t" : k == 'u' ? "char8_t" : "auto");
    } else if (c == 'K' || c == 'V' || c == 'r') {
        d->p++;
        char *t = type(d);
        if (!t) return NULL;
        const char *q = c == 'K' ? " const" : c == 'V' ? " volatile" : " restrict";
        size_t tl = strlen(t), ql = strlen(q);
        if (tl >= ql && !strcmp(t + tl - ql, q)) { /* a const T that is already const */
            r = t;
        } else {
            r = cat(t, q);
            free(t);
        }
        add_sub(d, r);
    } else if (c == 'P' || c == 'R' || c == 'O') {
        d->p++;
        if (peek(d, "F") || peek(d, "A") || peek(d, "M")) return fail(d), NULL;
        char *t = type(d);
        if (!t) return NULL;
        size_t tl = strlen(t);
        if (c != 'P' && tl && t[tl - 1] == '&') { /* reference collapsing: T& && is T& */
            if (c == 'R' && tl >= 2 && t[tl - 2] == '&') t[tl - 1] = 0;
            r = t;
        } else {
            r = cat(t, c == 'P' ? "*" : c == 'R' ? "&" : "&&");
            free(t);
        }
        add_sub(d, r);
    } else if (c == 'T') {
        r = template_param(d);
        if (!r) return NULL;
        add_sub(d, r);
        if (!(r = with_args(d, r))) return NULL;
    } else if (c == 'S' && !peek(d, "St")) {
        bool abbr;
        r = substitution(d, &abbr);
        if (!r) return NULL;
        if (!(r = with_args(d, r))) return NULL;
    } else if (c == 'N' || c == 'Z' || c == 'S' || isdigit((unsigned char)c)) {
        bool tmpl, cdtor;
        r = name(d, &tmpl, &cdtor, true, NULL);
        if (!r) return NULL;
    } else {
        return fail(d), NULL;
    }
    d->depth--;
    return r;
}

static char *encoding(dm_t *d, bool local)
{
    if (peek(d, "T") || peek(d, "GV")) {
        const char *what = NULL;
        bool is_name = false;
        if (eat(d, "TV")) what = "vtable for ";
        else if (eat(d, "TI")) what = "typeinfo for ";
        else if (eat(d, "TS")) what = "typeinfo name for ";
        else if (eat(d, "TT")) what = "VTT for ";
        else if (eat(d, "GV")) what = "guard variable for ", is_name = true;
        else return fail(d), NULL;
        char *t;
        if (is_name) {
            bool tm, cd;
            t = name(d, &tm, &cd, false, NULL);
        } else {
            t = type(d);
        }
        if (!t) return NULL;
        char *r = cat(what, t);
        free(t);
        return r;
    }
    bool tmpl, cdtor;
    char *cv = NULL;
    char *n = name(d, &tmpl, &cdtor, false, &cv);
    if (!n) return free(cv), NULL;
    if (d->p >= d->end || *d->p == 'E' || *d->p == '.') { /* data */
        free(cv);
        return n;
    }
    char *ret = NULL;
    if (tmpl && !cdtor) {
        ret = type(d);
        if (!ret) return free(n), free(cv), NULL;
    }
    char *params = xstrdup("");
    int np = 0;
    while (!d->bad && d->p < d->end && *d->p != 'E' && *d->p != '.') {
        char *t = type(d);
        if (!t) break;
        if (np == 0 && !strcmp(t, "void") && (d->p >= d->end || *d->p == 'E' || *d->p == '.')) {
            free(t);
            np = -1;
            break;
        }
        char *p = np++ ? catf("%s, %s", params, t) : xstrdup(t);
        free(params);
        free(t);
        params = p;
    }
    if (d->bad || np == 0) {
        free(n), free(cv), free(ret), free(params);
        return fail(d), NULL;
    }
    if (local && ret) { /* c++filt leaves an enclosing function's return type out */
        free(ret);
        ret = NULL;
    }
    char *r = catf("%s%s%s(%s)%s", ret ? ret : "", ret ? " " : "", n, params, cv ? cv : "");
    free(n), free(cv), free(ret), free(params);
    return r;
}

char *cli_demangle(const char *m)
{
    if (!m || strncmp(m, "_Z", 2)) return NULL;
    dm_t *d = xcalloc(1, sizeof *d);
    size_t len = strlen(m);
    const char *dot = strchr(m + 2, '.');
    d->p = m + 2;
    d->end = dot ? dot : m + len;
    char *r = encoding(d, false);
    if (r && (d->bad || d->p != d->end)) {
        free(r);
        r = NULL;
    }
    /* gcc's clones: _Z3foov.constprop.0 -> foo() [clone .constprop.0] */
    while (r && dot && *dot == '.') {
        const char *q = dot + 1;
        while (isalpha((unsigned char)*q) || *q == '_') q++;
        while (*q == '.' && isdigit((unsigned char)q[1])) {
            q++;
            while (isdigit((unsigned char)*q)) q++;
        }
        if (q == dot + 1) {
            free(r);
            r = NULL;
            break;
        }
        char *t = catf("%s [clone %.*s]", r, (int)(q - dot), dot);
        free(r);
        r = t;
        dot = q;
    }
    if (r && dot && *dot) {
        free(r);
        r = NULL;
    }
    for (int i = 0; i < d->nsubs; i++) free(d->subs[i]);
    for (int i = 0; i < d->ntargs; i++) free(d->targs[i]);
    free(d);
    return r;
}
