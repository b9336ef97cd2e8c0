/* deepbind_plug.c — the plugin test/integration/deepbind.c opens with
 * RTLD_DEEPBIND: it frees, allocates and grows blocks of the program's,
 * through whatever malloc its own lookups find. */
#include <stdlib.h>
#include <string.h>

void plug_free(void *p) { free(p); }
void *plug_malloc(size_t n) { return malloc(n); }
void *plug_realloc(void *p, size_t n) { return realloc(p, n); }
char *plug_strdup(const char *s) { return strdup(s); }
/* the free() this library's references are bound to */
void *plug_free_address(void) { return (void *)free; }
