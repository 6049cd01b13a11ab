/* test_partition.c -- nats-server's partition function: known values, and the subjects fairq accepts or refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "partition.h"

/* Values nats-server 2.9.10 chose for these tokens (the mapped subjects a
 * subscriber received under {{partition(16,1)}} and {{partition(7,1)}};
 * tests/it_partition.c compares hundreds more with a live server). */
static void test_known_values(void **state)
{
    (void)state;
    static const struct {
        const char *token;
        uint32_t p16, p7;
    } known[] = {
        {"acme", 15, 5}, {"globex", 14, 4}, {"initech", 1, 4}, {"a", 12, 5},
        {"t\xc3\xa9nant", 8, 6}, {"\xff\xfe", 0, 3},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        size_t len = strlen(known[i].token);
        assert_int_equal(fq_partition_of(known[i].token, len, 16), known[i].p16);
        assert_int_equal(fq_partition_of(known[i].token, len, 7), known[i].p7);
        assert_int_equal(fq_partition_of(known[i].token, len, 1), 0);
    }
    /* the hash of the empty token is FNV-1a's offset basis, 2166136261 */
    assert_int_equal(fq_partition_of("", 0, 1u << 31), 2166136261u % (1u << 31));
    /* only the len bytes count */
    assert_int_equal(fq_partition_of("acmeXYZ", 4, 16), 15);
}

static void test_tenant_one_partition(void **state)
{
    (void)state;
    const char *t;
    size_t len;
    char err[256];
    assert_int_equal(fq_partition_tenant(&t, &len, "fair.submit.acme", "fair.submit", 1, err,
                                         sizeof err), FQ_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(t, "acme", 4);
    assert_int_equal(fq_partition_tenant(&t, &len, "fair.done.acme", "fair.submit", 1, err,
                                         sizeof err), FQ_EINVAL);
    assert_null(t);
    assert_int_equal(fq_partition_tenant(&t, &len, "fair.submitacme", "fair.submit", 1, err,
                                         sizeof err), FQ_EINVAL);
}

static void test_tenant_partitioned(void **state)
{
    (void)state;
    const char *t;
    size_t len;
    char err[256];
    assert_int_equal(fq_partition_tenant(&t, &len, "fair.submit.15.acme", "fair.submit", 16,
                                         err, sizeof err), FQ_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(t, "acme", 4);
    assert_int_equal(fq_partition_tenant(&t, &len, "fair.done.1.initech", "fair.done", 16, err,
                                         sizeof err), FQ_OK);
    /* a partition token that is not the tenant's: published by hand */
    static const char *const bad[] = {
        "fair.submit.3.acme",       /* another partition */
        "fair.submit.015.acme",     /* the right number, not as the server writes it */
        "fair.submit.+15.acme", "fair.submit.15 .acme", "fair.submit..acme",
        "fair.submit.31.acme",      /* 15 modulo 16, out of range */
        "fair.submit.acme",         /* unmapped: no partition token */
        "fair.submit.15.x.acme",    /* a token too many */
        "fair.submit.15.",          /* no tenant: its partition is 5 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(fq_partition_tenant(&t, &len, bad[i], "fair.submit", 16, err,
                                             sizeof err), FQ_EINVAL);
        assert_null(t);
        assert_int_equal(len, 0);
        assert_true(strlen(err) > 0);
    }
    fq_partition_tenant(&t, &len, "fair.submit.3.acme", "fair.submit", 16, err, sizeof err);
    assert_non_null(strstr(err, "partition 15 of 16"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_tenant_one_partition),
        cmocka_unit_test(test_tenant_partitioned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
