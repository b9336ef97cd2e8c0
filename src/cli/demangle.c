/* demangle.c — placeholder replaced below */
#include "cli.h"
char *cli_demangle(const char *m) { (void)m; return NULL; }
