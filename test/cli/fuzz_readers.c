/* fuzz_readers.c — libFuzzer target for the profmalloc command's profile
 * readers (src/cli/profile.c, src/cli/inflate.c): any input must parse or
 * fail with a message, never crash, leak, hang or read out of bounds.  A
 * profile that parses is also grouped into sites and written back out in
 * both formats.  Built with clang -fsanitize=fuzzer,address,undefined by
 * test/cli/cli.mk (check-cli-fuzz, make fuzz); seeds in test/cli/corpus. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "cli_main.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    cli_profile_t p;
    char err[256];
    cli_timeline_t tl;
    if (cli_parse_timeline(data, len, &tl, err, sizeof err) == 0) {
        for (size_t i = 0; i < tl.npeaks; i++) {
            cli_timeline_profile(&tl, i, &p);
            cli_free_profile(&p);
        }
        cli_free_timeline(&tl);
    }
    if (cli_parse_profile(data, len, &p, err, sizeof err) != 0) return 0;
    view_t views[3] = {{.lines = true}, {.alloc = true, .objects = true}, {.cum = true}};
    for (int i = 0; i < 3; i++) {
        sitetab_t t = {0};
        collect_sites(&p, &views[i], 1, &t);
        sort_sites(&t, false);
        free_sites(&t);
    }
    total_t tot[64];
    parse_totals(&p, tot, 64);
    FILE *f = fopen("/dev/null", "w");
    if (f) {
        cli_write_pprof(f, &p, true);
        cli_write_legacy(f, &p);
        fclose(f);
    }
    cli_free_profile(&p);
    return 0;
}
