/* guard.c — the per-process secrets that free-list integrity rests on
 * (pm_internal.h: pm_link_*, pm_key_*): drawn once at init, before any
 * block exists, and never changed (a fork keeps them, as its blocks do);
 * and the report of a double free.
 * Must never: allocate, or take a lock (the report runs on any path). */
#include "pm_internal.h"

pm_guard_t pm_guard;

void pm_guard_init(void)
{
    uintptr_t r[2] = {0, 0};
    pm_os_random(r, sizeof r);
    /* never 0: a live block's second word is 0 after malloc erased the key */
    pm_guard.key = r[0] | 1;
    pm_guard.secret = r[1];
}

void pm_guard_double_free(const char *what, const void *p)
{
    char msg[96];
    pm_fmt_join(msg, sizeof msg, what, ": double free detected");
    pm_os_fatal(msg, p, 1);
}
