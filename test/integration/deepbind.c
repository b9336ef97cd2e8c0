/* deepbind.c — a plugin opened with RTLD_DEEPBIND (as Debian 12's php opens
 * its extensions) shares blocks with the program both ways.  Without
 * profmalloc's dlopen (src/deepbind.c) the plugin's free() is glibc's and
 * the first exchange aborts in glibc ("free(): invalid pointer").
 * The plugin is opened by its bare name, which only this program's
 * DT_RUNPATH ($ORIGIN/deepbind) finds: so the dlopen that runs must still
 * see this program as its caller.  The same with dlmopen(LM_ID_BASE, ...),
 * and with PROFMALLOC_KEEP_DEEPBIND=1, which keeps the flag.  Runs with and without profmalloc
 * (LD_PRELOAD, -lprofmalloc, neither; PM_TEST_REQUIRE_PROFMALLOC set: it
 * must be loaded); prints "ok" and exits 0, or says what failed and
 * exits 1. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); failed = 1; } } while (0)

int main(int argc, char **argv)
{
    /* argv[1]: "dlmopen" opens it with dlmopen(LM_ID_BASE, ...); "keep"
     * (run with PROFMALLOC_KEEP_DEEPBIND=1) checks that the flag was kept,
     * and passes no block across */
    const char *how = argc > 1 ? argv[1] : "dlopen";
    int keep = strcmp(how, "keep") == 0;
    void *h = strcmp(how, "dlmopen") == 0
                  ? dlmopen(LM_ID_BASE, "libpm_deepbind_plug.so", RTLD_NOW | RTLD_DEEPBIND)
                  : dlopen("libpm_deepbind_plug.so", RTLD_NOW | RTLD_DEEPBIND);
    if (!h) {
        fprintf(stderr, "FAIL: %s by the program's RUNPATH: %s\n", how, dlerror());
        return 1;
    }
    void (*pfree)(void *) = (void (*)(void *))dlsym(h, "plug_free");
    void *(*pmalloc)(size_t) = (void *(*)(size_t))dlsym(h, "plug_malloc");
    void *(*prealloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(h, "plug_realloc");
    char *(*pstrdup)(const char *) = (char *(*)(const char *))dlsym(h, "plug_strdup");
    void *(*pfree_addr)(void) = (void *(*)(void))dlsym(h, "plug_free_address");
    if (!pfree || !pmalloc || !prealloc || !pstrdup || !pfree_addr) {
        fprintf(stderr, "FAIL: dlsym: %s\n", dlerror());
        return 1;
    }
    if (getenv("PM_TEST_REQUIRE_PROFMALLOC"))
        CHECK(dlsym(RTLD_DEFAULT, "profmalloc_dump") != NULL, "profmalloc is not loaded");
    void *global_free = dlsym(RTLD_DEFAULT, "free");
    if (keep) {
        CHECK(pfree_addr() != global_free, "PROFMALLOC_KEEP_DEEPBIND=1: the plugin's free is the program's");
        dlclose(h);
        if (!failed) puts("ok");
        return failed;
    }
    CHECK(pfree_addr() == global_free, "the plugin's free is %p, the program's %p", pfree_addr(), global_free);

    /* the program's blocks, small and page-sized, freed and grown by the plugin */
    for (size_t n = 16; n <= (1u << 20); n *= 4) {
        char *a = malloc(n);
        CHECK(a != NULL, "malloc(%zu)", n);
        memset(a, 'a', n);
        pfree(a);
        char *b = malloc(n);
        memset(b, 'b', n);
        char *c = prealloc(b, 3 * n);
        CHECK(c != NULL && c[0] == 'b' && c[n - 1] == 'b', "plugin's realloc of %zu bytes", n);
        free(c);
    }
    /* the plugin's blocks, freed and grown by the program */
    for (size_t n = 16; n <= (1u << 20); n *= 4) {
        char *p = pmalloc(n);
        CHECK(p != NULL, "plugin's malloc(%zu)", n);
        memset(p, 'p', n);
        char *q = realloc(p, 2 * n);
        CHECK(q != NULL && q[n - 1] == 'p', "realloc of the plugin's %zu bytes", n);
        free(q);
    }
    char *s = pstrdup("deepbind");
    CHECK(s && strcmp(s, "deepbind") == 0, "plugin's strdup");
    free(s);
    dlclose(h);
    if (!failed) puts("ok");
    return failed;
}
