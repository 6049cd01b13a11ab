/* test_client.c -- the client programs' shared helpers: flags, the cost mix, percentiles, the steady arrival source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cmd/arrivals.h"
#include "../cmd/client.h"

static void test_parse_u64(void **state)
{
    uint64_t v = 77;
    (void)state;
    assert_true(fqc_parse_u64("0", 0, 10, &v));
    assert_int_equal(v, 0);
    assert_true(fqc_parse_u64("007", 0, 10, &v));
    assert_int_equal(v, 7);
    assert_true(fqc_parse_u64("18446744073709551615", 0, UINT64_MAX, &v));
    assert_true(v == UINT64_MAX);
    v = 77;
    /* Each refusal leaves the output alone. */
    const char *bad[] = {"", "-1", "+1", " 1", "1 ", "1.0", "0x10", "1e3", "abc",
                         "18446744073709551616", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(fqc_parse_u64(bad[i], 0, UINT64_MAX, &v));
    assert_false(fqc_parse_u64(NULL, 0, 10, &v));
    assert_false(fqc_parse_u64("11", 0, 10, &v));
    assert_false(fqc_parse_u64("4", 5, 10, &v));
    assert_int_equal(v, 77);
}

static void test_parse_double(void **state)
{
    double v = -1;
    (void)state;
    assert_true(fqc_parse_double("1e3", 0, 1e6, &v));
    assert_true(v == 1000.0);
    assert_true(fqc_parse_double("0.25", 0, 1, &v));
    assert_true(v == 0.25);
    v = -1;
    const char *bad[] = {"", "nan", "inf", "-inf", "1x", "x", "2", "-0.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(fqc_parse_double(bad[i], 0, 1, &v));
    assert_true(v == -1);
}

static void test_last_token(void **state)
{
    (void)state;
    assert_string_equal(fqc_last_token("fair.submit.acme"), "acme");
    assert_string_equal(fqc_last_token("acme"), "acme");
    assert_string_equal(fqc_last_token("fair.submit."), "");
}

static void test_costs_parse(void **state)
{
    fqc_costs c;
    char err[160];
    (void)state;

    assert_true(fqc_costs_parse(&c, "100:0.9,5000:0.1", 1000000, err, sizeof err));
    assert_int_equal(c.n, 2);
    assert_int_equal(c.tokens[0], 100);
    assert_int_equal(c.tokens[1], 5000);
    assert_true(fabs(c.cum[0] - 0.9) < 1e-12);
    assert_true(c.cum[1] == 1.0);
    assert_string_equal(c.workflow[0], "");

    /* Weights are relative; a name makes the entry's workflow. */
    assert_true(fqc_costs_parse(&c, "chat=100:3,batch=5000", 1000000, err, sizeof err));
    assert_int_equal(c.n, 2);
    assert_true(fabs(c.cum[0] - 0.75) < 1e-12);
    assert_string_equal(c.workflow[0], "chat");
    assert_string_equal(c.workflow[1], "batch");

    assert_true(fqc_costs_parse(&c, "1000", 1000000, err, sizeof err));
    assert_int_equal(c.n, 1);
    assert_int_equal(c.tokens[0], 1000);
    assert_int_equal(fqc_costs_pick(&c, 0.999999), 0);
}

static void test_costs_refused(void **state)
{
    const char *bad[] = {
        "", ",", "100,", ",100", "100,,200", "0", "abc", "100:0", "100:-1", "100:x",
        "100:inf", "100:nan", "1000001", "=100", "bad name=100", "100:0.5:1",
        "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17",
    };
    fqc_costs c, before;
    char err[160];
    (void)state;

    memset(&c, 0x5a, sizeof c);
    before = c;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_false(fqc_costs_parse(&c, bad[i], 1000000, err, sizeof err));
        assert_true(err[0] != '\0');
        assert_memory_equal(&c, &before, sizeof c);
    }
    assert_false(fqc_costs_parse(&c, NULL, 1000000, err, sizeof err));
}

static void test_costs_pick(void **state)
{
    fqc_costs c;
    char err[160];
    uint64_t rng = 42;
    int hits[2] = {0, 0};
    (void)state;

    assert_true(fqc_costs_parse(&c, "100:0.9,5000:0.1", 1000000, err, sizeof err));
    assert_int_equal(fqc_costs_pick(&c, 0.0), 0);
    assert_int_equal(fqc_costs_pick(&c, 0.8999), 0);
    assert_int_equal(fqc_costs_pick(&c, 0.9), 1);
    assert_int_equal(fqc_costs_pick(&c, 0.999999), 1);
    for (int i = 0; i < 100000; i++)
        hits[fqc_costs_pick(&c, fql_uniform(&rng))]++;
    /* 10% +- 0.5% over 100,000 draws (about 5 standard deviations). */
    assert_in_range(hits[1], 9500, 10500);
}

static void test_quantiles(void **state)
{
    fqc_samples s = {0};
    uint64_t rng = 7;
    (void)state;

    assert_int_equal(fqc_samples_quantile(&s, 0.5), 0);
    /* 1..100 in a shuffled order. */
    uint32_t v[100];
    for (int i = 0; i < 100; i++)
        v[i] = (uint32_t)i + 1;
    for (int i = 99; i > 0; i--) {
        int j = (int)(fql_rand(&rng) % (uint64_t)(i + 1));
        uint32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    for (int i = 0; i < 100; i++)
        assert_int_equal(fqc_samples_add(&s, v[i]), FQ_OK);
    fqc_samples_sort(&s);
    assert_int_equal(fqc_samples_quantile(&s, 0.5), 50);
    assert_int_equal(fqc_samples_quantile(&s, 0.99), 99);
    assert_int_equal(fqc_samples_quantile(&s, 0.999), 100);
    assert_int_equal(fqc_samples_quantile(&s, 1.0), 100);
    assert_int_equal(fqc_samples_quantile(&s, 0.0001), 1);
    fqc_samples_free(&s);

    /* Out-of-range samples are clamped, not wrapped. */
    assert_int_equal(fqc_samples_add(&s, -5), FQ_OK);
    assert_int_equal(fqc_samples_add(&s, (int64_t)UINT32_MAX + 10), FQ_OK);
    fqc_samples_sort(&s);
    assert_int_equal(fqc_samples_quantile(&s, 0.5), 0);
    assert_true(fqc_samples_quantile(&s, 1.0) == UINT32_MAX);
    fqc_samples_free(&s);
}

static const char *const tenants[] = {"a", "b", "c"};

static fql_steady_cfg steady(double rate, double secs, uint64_t count)
{
    fql_steady_cfg c = {.rate = rate, .duration_us = (int64_t)(secs * 1e6), .count = count,
                        .actual_factor = 1, .seed = 1};
    char err[160];
    assert_true(fqc_costs_parse(&c.costs, "chat=100:0.9,batch=5000:0.1", 1000000, err, sizeof err));
    return c;
}

static void test_steady_constant(void **state)
{
    fql_steady_cfg c = steady(1000, 1.0, 0);
    fql_source *src = NULL;
    fql_arrival a;
    uint64_t n = 0, per[3] = {0, 0, 0};
    (void)state;

    assert_int_equal(fql_steady_create(&src, &c, tenants, 3), FQ_OK);
    while (src->next(src, &a)) {
        /* Evenly spaced, a millisecond apart, and all before the end. */
        assert_int_equal(a.at_us, (int64_t)n * 1000);
        assert_true(a.tenant < 3);
        per[a.tenant]++;
        assert_true(a.est_tokens == 100 || a.est_tokens == 5000);
        assert_string_equal(a.workflow, a.est_tokens == 100 ? "chat" : "batch");
        assert_true(a.actual_tokens == a.est_tokens);
        n++;
    }
    assert_int_equal(n, 1000);
    for (int t = 0; t < 3; t++)
        assert_in_range(per[t], 250, 420);
    assert_false(src->next(src, &a));
    src->destroy(src);
}

/* In turn, N runs over N tenants give each exactly one, in order. */
static void test_steady_in_turn(void **state)
{
    fql_steady_cfg c = steady(0, 0, 7);
    fql_source *src = NULL;
    fql_arrival a;
    uint32_t n = 0;
    (void)state;

    c.in_turn = true;
    assert_int_equal(fql_steady_create(&src, &c, tenants, 3), FQ_OK);
    while (src->next(src, &a))
        assert_int_equal(a.tenant, n++ % 3);
    assert_int_equal(n, 7);
    src->destroy(src);
}

static void test_steady_count_and_factor(void **state)
{
    fql_steady_cfg c = steady(0, 0, 25);
    fql_source *src = NULL;
    fql_arrival a;
    uint64_t n = 0;
    (void)state;

    c.actual_factor = 2.5;
    assert_int_equal(fql_steady_create(&src, &c, tenants, 3), FQ_OK);
    while (src->next(src, &a)) {
        assert_int_equal(a.at_us, 0);                     /* rate 0: back to back */
        assert_true(a.actual_tokens * 2 == (uint64_t)a.est_tokens * 5);
        n++;
    }
    assert_int_equal(n, 25);
    src->destroy(src);
}

static void test_steady_seeded(void **state)
{
    fql_steady_cfg c = steady(500, 10, 0);
    fql_source *x = NULL, *y = NULL, *z = NULL;
    fql_arrival a, b;
    int same = 0, differ = 0;
    (void)state;

    c.poisson = true;
    assert_int_equal(fql_steady_create(&x, &c, tenants, 3), FQ_OK);
    assert_int_equal(fql_steady_create(&y, &c, tenants, 3), FQ_OK);
    c.seed = 2;
    assert_int_equal(fql_steady_create(&z, &c, tenants, 3), FQ_OK);
    for (int i = 0; i < 200; i++) {
        assert_true(x->next(x, &a));
        assert_true(y->next(y, &b));
        same += a.at_us == b.at_us && a.tenant == b.tenant && a.est_tokens == b.est_tokens;
        assert_true(z->next(z, &b));
        differ += a.at_us != b.at_us;
    }
    assert_int_equal(same, 200);
    assert_true(differ > 190);
    x->destroy(x);
    y->destroy(y);
    z->destroy(z);
}

static void test_steady_poisson_rate(void **state)
{
    fql_steady_cfg c = steady(2000, 10, 0);
    fql_source *src = NULL;
    fql_arrival a;
    uint64_t n = 0;
    int64_t prev = -1;
    (void)state;

    c.poisson = true;
    c.seed = 99;
    assert_int_equal(fql_steady_create(&src, &c, tenants, 3), FQ_OK);
    while (src->next(src, &a)) {
        assert_true(a.at_us >= prev);
        assert_true(a.at_us < 10000000);
        prev = a.at_us;
        n++;
    }
    /* 20,000 expected; a Poisson count's deviation is about 141. */
    assert_in_range(n, 19300, 20700);
    src->destroy(src);
}

static void test_steady_refused(void **state)
{
    fql_steady_cfg c = steady(10, 1, 0);
    fql_source *src = (fql_source *)&c;
    (void)state;

    assert_int_equal(fql_steady_create(&src, &c, tenants, 0), FQ_EINVAL);
    c.rate = -1;
    assert_int_equal(fql_steady_create(&src, &c, tenants, 3), FQ_EINVAL);
    c.rate = NAN;
    assert_int_equal(fql_steady_create(&src, &c, tenants, 3), FQ_EINVAL);
    c.rate = 10;
    c.actual_factor = INFINITY;
    assert_int_equal(fql_steady_create(&src, &c, tenants, 3), FQ_EINVAL);
    assert_ptr_equal(src, (fql_source *)&c);
}

/* fairq-load --scenario with an empty or comment-only file: refused with a
 * reason (libcyaml reads no document there, and the loader used to follow
 * the NULL it returned). */
static void test_scenario_empty_file(void **state)
{
    static const char *const texts[] = {"", "# nothing but a comment\n"};
    (void)state;

    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char path[] = "/tmp/test_client_XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        FILE *f = fdopen(fd, "w");
        assert_non_null(f);
        fputs(texts[i], f);
        fclose(f);
        fql_source *src = NULL;
        char err[256] = "";
        assert_int_equal(fql_scenario_create(&src, path, 1, NULL, err, sizeof err), FQ_EINVAL);
        assert_null(src);
        assert_non_null(strstr(err, "no scenario"));
        unlink(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_u64),
        cmocka_unit_test(test_parse_double),
        cmocka_unit_test(test_last_token),
        cmocka_unit_test(test_costs_parse),
        cmocka_unit_test(test_costs_refused),
        cmocka_unit_test(test_costs_pick),
        cmocka_unit_test(test_quantiles),
        cmocka_unit_test(test_steady_constant),
        cmocka_unit_test(test_steady_count_and_factor),
        cmocka_unit_test(test_steady_in_turn),
        cmocka_unit_test(test_steady_seeded),
        cmocka_unit_test(test_steady_poisson_rate),
        cmocka_unit_test(test_steady_refused),
        cmocka_unit_test(test_scenario_empty_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
