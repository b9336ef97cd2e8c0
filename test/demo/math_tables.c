/* math_tables.c — prints src/math.c's tables (`make math-tables`): each
 * entry from libm in long double, rounded once to double.
 * test_prof_sampler.c's test_math_tables checks the committed ones. */
#include <math.h>
#include <stdio.h>

int main(void)
{
    printf("/* {1/c, ln c} for c = 1 + i/64 */\n");
    printf("const double pm_math_ln_table[PM_MATH_LN_ENTRIES][2] = {\n");
    for (int i = 0; i <= 64; i++) {
        long double c = 1.0L + i / 64.0L;
        printf("    {%a, %a},\n", (double)(1.0L / c), (double)logl(c));
    }
    printf("};\n\n/* 2^(-j/32) */\nconst double pm_math_exp2_table[PM_MATH_EXP2_ENTRIES] = {\n");
    for (int j = 0; j < 32; j++) printf("    %a,\n", (double)exp2l(-j / 32.0L));
    printf("};\n");
    return 0;
}
