/* sizeclass_table.c — prints the size-class table as Markdown, with each
 * class's waste, for doc/design.md (`make sizeclass-table`). */
#include "pm_internal.h"

#include <stdio.h>

int main(void)
{
    pm_sizeclass_init();
    printf("| class | size (B) | span pages | objects/span | batch | worst internal waste | span tail waste |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned c = 1; c < pm_class_count; c++) {
        unsigned prev = c > 1 ? pm_class_size[c - 1] : 0;
        size_t span = (size_t)pm_class_pages[c] * PM_PAGE_SIZE, objs = span / pm_class_size[c];
        /* worst case: a request one byte above the previous class */
        double waste = 100.0 * (pm_class_size[c] - prev - 1) / (prev + 1);
        printf("| %u | %u | %u | %zu | %u | %.1f%% | %.1f%% |\n", c, pm_class_size[c],
               pm_class_pages[c], objs, pm_class_batch[c], waste,
               100.0 * (double)(span % pm_class_size[c]) / (double)span);
    }
    return 0;
}
