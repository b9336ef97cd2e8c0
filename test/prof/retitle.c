/* retitle.c — a program that sets its process title the way nginx,
 * postgres and libbsd's setproctitle() do: it overwrites the strings of
 * argv and environ in place.  Its first allocation comes after the
 * environment is set up (no library allocates before main here), so
 * profmalloc reads its options from those strings.  Prints its pid; the
 * exit dump (PROFMALLOC_DUMP) must still reach the path it was given.
 * Run by test_prof.c (test_dump_at_exit_after_retitle). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profmalloc.h"

extern char **environ;
static void *volatile keep;

__attribute__((noinline)) static void retitle_site(void)
{
    keep = malloc(8u << 20);
    memset(keep, 1, 8u << 20);
}

int main(int argc, char **argv)
{
    profmalloc_set_sample_rate(1);
    retitle_site();
    for (int i = 0; i < argc; i++) memset(argv[i], 0, strlen(argv[i]));
    for (char **e = environ; *e; e++) memset(*e, 0, strlen(*e));
    printf("%d\n", (int)getpid());
    fflush(stdout); /* before any message from the exit dump */
    return 0; /* exit() runs the dump */
}
