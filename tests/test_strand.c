/* test_strand.c -- a partition's stranded submits and refused consumer, found in virtual time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "strand.h"

/* A submit at or below the floor is stranded only when seen again at the
 * next check: an ack's removal may lag the floor by one read. */
static void test_stranded_after_two_sightings(void **state)
{
    (void)state;
    fq_strand s = {0};
    uint64_t from = 0;
    assert_int_equal(fq_strand_check(&from, &s, 5, 9), FQ_STRAND_SUSPECT);
    assert_int_equal(fq_strand_check(&from, &s, 5, 12), FQ_STRAND_STRANDED);
    assert_int_equal(from, 5);
    /* draining: each next one at or below the floor seen is stranded at once */
    assert_int_equal(fq_strand_check(&from, &s, 7, 15), FQ_STRAND_STRANDED);
    assert_int_equal(from, 7);
    assert_int_equal(fq_strand_check(&from, &s, 12, 15), FQ_STRAND_STRANDED);
    assert_int_equal(from, 12);
    /* above the floor the finding saw: the consumer's, and the drain ends */
    assert_int_equal(fq_strand_check(&from, &s, 13, 15), FQ_STRAND_SUSPECT);
    assert_int_equal(s.drain_floor, 0);
    assert_int_equal(fq_strand_check(&from, &s, 13, 15), FQ_STRAND_STRANDED);
    assert_int_equal(from, 13);
    assert_int_equal(fq_strand_check(&from, &s, 0, 15), FQ_STRAND_NONE);
    assert_int_equal(fq_strand_check(&from, &s, 14, 20), FQ_STRAND_SUSPECT);
}

/* A consumer made again forgets what was seen of the old one: no
 * submit it delivers is taken for stranded on the old one's floor. */
static void test_new_consumer_forgets(void **state)
{
    (void)state;
    fq_strand s = {0};
    uint64_t from = 0;
    assert_int_equal(fq_strand_check(&from, &s, 5, 9), FQ_STRAND_SUSPECT);
    assert_int_equal(fq_strand_check(&from, &s, 5, 9), FQ_STRAND_STRANDED);
    assert_false(fq_strand_consumer(&s, true, 100, 30000));
    assert_int_equal(fq_strand_check(&from, &s, 6, 9), FQ_STRAND_SUSPECT);
    assert_false(fq_strand_consumer(&s, true, 200, 30000));
    assert_int_equal(fq_strand_check(&from, &s, 6, 0), FQ_STRAND_NONE);
}

/* What the consumer will still deliver is not stranded; nor is anything
 * before a floor or a first submit is known. */
static void test_not_stranded(void **state)
{
    (void)state;
    fq_strand s = {0};
    uint64_t from = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fq_strand_check(&from, &s, 10, 9), FQ_STRAND_NONE);
        assert_int_equal(fq_strand_check(&from, &s, 0, 9), FQ_STRAND_NONE);
        assert_int_equal(fq_strand_check(&from, &s, 3, 0), FQ_STRAND_NONE);
    }
    /* an acked submit seen once, removed by the next check */
    assert_int_equal(fq_strand_check(&from, &s, 9, 9), FQ_STRAND_SUSPECT);
    assert_int_equal(fq_strand_check(&from, &s, 10, 9), FQ_STRAND_NONE);
    assert_int_equal(fq_strand_check(&from, &s, 9, 9), FQ_STRAND_SUSPECT);
    /* the first stored moved on (acked and removed) but another is below */
    assert_int_equal(fq_strand_check(&from, &s, 10, 12), FQ_STRAND_SUSPECT);
    assert_int_equal(from, 0);
}

/* A refusal is reported once, when it has lasted the bound; its creation
 * ends it, and a later refusal is timed from its own start. */
static void test_refused_past_bound(void **state)
{
    (void)state;
    fq_strand s = {0};
    assert_false(fq_strand_consumer(&s, false, 1000, 30000));
    assert_false(fq_strand_consumer(&s, false, 30999, 30000));
    assert_false(fq_strand_refused(&s, 30999, 30000));
    assert_true(fq_strand_consumer(&s, false, 31000, 30000));
    assert_true(fq_strand_refused(&s, 31000, 30000));
    assert_false(fq_strand_consumer(&s, false, 90000, 30000));
    assert_false(fq_strand_consumer(&s, true, 91000, 30000));
    assert_false(fq_strand_refused(&s, 200000, 30000));
    assert_false(fq_strand_consumer(&s, false, 200000, 30000));
    assert_false(fq_strand_consumer(&s, false, 229999, 30000));
    assert_true(fq_strand_consumer(&s, false, 230000, 30000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stranded_after_two_sightings),
        cmocka_unit_test(test_not_stranded),
        cmocka_unit_test(test_new_consumer_forgets),
        cmocka_unit_test(test_refused_past_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
