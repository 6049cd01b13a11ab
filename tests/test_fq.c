/* test_fq.c -- fq's shared helpers: decimal formatting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fq.h"

/* fq_u64_dec writes what snprintf's %llu would, at both ends of the range
 * and across digit-count boundaries, and says how many digits. */
static void test_u64_dec_matches_printf(void **state)
{
    (void)state;
    const uint64_t v[] = {0, 1, 9, 10, 99, 100, 4294967295ULL, 4294967296ULL,
                          1764748800123ULL, 9999999999999999999ULL, UINT64_MAX};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char got[FQ_U64_DEC_MAX], want[32];
        memset(got, '#', sizeof got);
        int k = snprintf(want, sizeof want, "%llu", (unsigned long long)v[i]);
        assert_int_equal(fq_u64_dec(got, v[i]), (size_t)k);
        assert_string_equal(got, want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64_dec_matches_printf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
