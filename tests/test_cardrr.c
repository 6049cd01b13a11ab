/* test_cardrr.c -- the card's listing, kept as a baseline: it behaves as the issue says it does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cardrr.h"

/* Small runs: a quantum per visit, one run per visit, is round robin by
 * request count, so a tenant with 10x larger runs gets 10x the tokens. */
static void test_small_runs_degenerate_to_request_counting(void **state)
{
    (void)state;
    fq_cardrr *c;
    assert_int_equal(fq_cardrr_create(&c, 2, 1000, NULL), FQ_OK);
    fq_cardrr_run r[2] = {{.tenant = 0, .est = 10}, {.tenant = 1, .est = 100}};
    fq_cardrr_enqueue(c, &r[0]);
    fq_cardrr_enqueue(c, &r[1]);
    uint64_t tokens[2] = {0, 0};
    for (int i = 0; i < 1000; i++) {
        fq_cardrr_run *x = fq_cardrr_next(c);
        assert_non_null(x);
        tokens[x->tenant] += x->est;
        fq_cardrr_enqueue(c, x);
    }
    assert_int_equal(tokens[1], 10 * tokens[0]);
    fq_cardrr_destroy(c);
}

/* Reconciliation records debt, and the reset on enqueue erases it. */
static void test_reset_on_enqueue_erases_debt(void **state)
{
    (void)state;
    fq_cardrr *c;
    assert_int_equal(fq_cardrr_create(&c, 1, 1000, NULL), FQ_OK);
    fq_cardrr_run r = {.tenant = 0, .est = 100};
    fq_cardrr_enqueue(c, &r);
    assert_ptr_equal(fq_cardrr_next(c), &r);
    fq_cardrr_reconcile(c, 0, 100, 5000);
    assert_int_equal(fq_cardrr_deficit(c, 0), 900 - 4900);
    fq_cardrr_enqueue(c, &r);
    assert_int_equal(fq_cardrr_deficit(c, 0), 0);
    fq_cardrr_destroy(c);
}

/* quantum x weight past 2^32 (a large quantum, an enterprise weight) is the
 * product, as in the listing's JavaScript numbers, not its value mod 2^32. */
static void test_weighted_quantum_does_not_wrap(void **state)
{
    (void)state;
    fq_cardrr *c;
    const uint32_t weight[1] = {10000};
    assert_int_equal(fq_cardrr_create(&c, 1, 1000000, weight), FQ_OK);
    fq_cardrr_run r = {.tenant = 0, .est = 4000000000u};
    fq_cardrr_enqueue(c, &r);
    assert_ptr_equal(fq_cardrr_next(c), &r);   /* 1e10 covers 4e9 on the first visit */
    assert_int_equal(fq_cardrr_deficit(c, 0), 10000000000LL - 4000000000LL);
    fq_cardrr_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_runs_degenerate_to_request_counting),
        cmocka_unit_test(test_reset_on_enqueue_erases_debt),
        cmocka_unit_test(test_weighted_quantum_does_not_wrap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
