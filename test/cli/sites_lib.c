/* sites_lib.c — an allocation site in a shared library, for sites.c. */
#include <stdlib.h>

static int line;

__attribute__((noinline)) void *lib_site(size_t n)
{
    void *p = malloc(n); line = __LINE__;
    return p;
}

int lib_site_line(void) { return line; }
