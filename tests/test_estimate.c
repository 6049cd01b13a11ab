/* test_estimate.c -- unit tests of the estimator: statistics, fallbacks, declared ratios, bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "estimate.h"

#define MAX_TOKENS 1000000u

static fq_est *est_new_capped(uint32_t min_samples, uint32_t percentile,
                              uint32_t max_entries, uint32_t max_tenant_entries)
{
    fq_est_opts o;
    fq_est *e = NULL;

    fq_est_opts_init(&o);
    o.default_tokens = 1000;
    o.max_tokens = MAX_TOKENS;
    o.min_samples = min_samples;
    o.percentile = percentile;
    o.max_entries = max_entries;
    o.max_tenant_entries = max_tenant_entries;
    assert_int_equal(fq_est_create(&e, &o), FQ_OK);
    assert_non_null(e);
    return e;
}

static fq_est *est_new(uint32_t min_samples, uint32_t percentile, uint32_t max_entries)
{
    return est_new_capped(min_samples, percentile, max_entries, 4096);
}

/* xorshift64: reproducible samples without libc's rand. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank percentile of v[0..n), sorted in place. */
static uint32_t nearest_rank(uint32_t *v, size_t n, uint32_t pct)
{
    qsort(v, n, sizeof(*v), cmp_u32);
    size_t rank = (n * pct + 99) / 100;
    return v[rank - 1];
}

static void observe_all(fq_est *e, const char *tenant, const char *wf,
                        const uint32_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fq_est_observe(e, tenant, wf, 0, 0, v[i]);
}

static void test_create_rejects_bad_options(void **state)
{
    (void)state;
    fq_est_opts good, o;
    fq_est *e = (fq_est *)&good;   /* not NULL, to see it cleared */

    fq_est_opts_init(&good);
    assert_int_equal(fq_est_create(&e, NULL), FQ_EINVAL);
    assert_null(e);
    o = good; o.default_tokens = 0;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.max_tokens = 0;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.min_samples = 0;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.min_samples = FQ_EST_MAX_MIN_SAMPLES + 1;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.percentile = 100;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.max_entries = 0;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.max_entries = FQ_EST_MAX_ENTRIES + 1;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.max_tenant_entries = 0;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    o = good; o.max_tenant_entries = FQ_EST_MAX_ENTRIES + 1;
    assert_int_equal(fq_est_create(&e, &o), FQ_EINVAL);
    assert_null(e);
    assert_int_equal(fq_est_create(NULL, &good), FQ_EINVAL);
    fq_est_destroy(NULL);

    assert_int_equal(fq_est_create(&e, &good), FQ_OK);
    assert_int_equal(fq_est_entries(e), 0);
    assert_int_equal(fq_est_charge(e, "t", "wf", 0), good.default_tokens);
    fq_est_destroy(e);
}

/* The mean charged is the samples' mean, rounded, for a small exact set and
 * for a large skewed one. */
static void test_mean_of_known_sets(void **state)
{
    (void)state;
    fq_est *e = est_new(1, 0, 64);
    const uint32_t small[] = {120, 80, 310, 45, 990, 7, 1500, 230};
    size_t n = sizeof(small) / sizeof(small[0]);
    double sum = 0;

    for (size_t i = 0; i < n; i++)
        sum += small[i];
    observe_all(e, "a", "wf", small, n);
    assert_int_equal(fq_est_charge(e, "a", "wf", 0), (uint32_t)(sum / n + 0.5));

    /* 1000 samples spread over four orders of magnitude, below the window. */
    uint64_t s = 42;
    sum = 0;
    for (int i = 0; i < 1000; i++) {
        uint32_t v = 1 + (uint32_t)(rng_next(&s) % 10) * (uint32_t)(1 + rng_next(&s) % 5000);
        sum += v;
        fq_est_observe(e, "b", "wf", 0, 0, v);
    }
    double mean = sum / 1000;
    uint32_t got = fq_est_charge(e, "b", "wf", 0);
    assert_true(got >= (uint32_t)mean && got <= (uint32_t)mean + 1);
    fq_est_destroy(e);
}

/* Percentiles: exact for 1..1024, where every bucket is filled evenly and
 * interpolation within a bucket is exact; otherwise within the resolution
 * of a bucket, under a quarter of the value, for uniform, skewed and
 * clustered sets. */
static void test_percentiles_of_known_sets(void **state)
{
    (void)state;
    const uint32_t pcts[] = {1, 10, 50, 90, 95, 99};
    uint32_t v[1024];

    for (size_t p = 0; p < sizeof(pcts) / sizeof(pcts[0]); p++) {
        fq_est *e = est_new(1, pcts[p], 64);
        uint64_t s = 7 + p;

        /* 1..1024 in descending order: the order must not matter. */
        for (uint32_t i = 0; i < 1024; i++)
            v[i] = 1024 - i;
        observe_all(e, "even", "wf", v, 1024);
        uint32_t want = nearest_rank(v, 1024, pcts[p]);
        int got = (int)fq_est_charge(e, "even", "wf", 0);
        assert_int_equal(got, want);

        /* 1..1000: the top bucket, 896..1023, is filled in part. */
        for (uint32_t i = 0; i < 1000; i++)
            v[i] = 1 + (uint32_t)(rng_next(&s) % 1000);
        observe_all(e, "uniform", "wf", v, 1000);
        want = nearest_rank(v, 1000, pcts[p]);
        got = (int)fq_est_charge(e, "uniform", "wf", 0);
        assert_true(abs(got - (int)want) < (int)want / 4);

        /* Log-uniform over 10..1,000,000 tokens. */
        for (size_t i = 0; i < 1000; i++) {
            uint32_t exp10 = 1 + (uint32_t)(rng_next(&s) % 5);
            uint32_t base = 1;
            while (exp10--)
                base *= 10;
            v[i] = base + (uint32_t)(rng_next(&s) % (base * 9));
        }
        observe_all(e, "skewed", "wf", v, 1000);
        want = nearest_rank(v, 1000, pcts[p]);
        got = (int)fq_est_charge(e, "skewed", "wf", 0);
        assert_true(abs(got - (int)want) < (int)want / 4);

        /* Two clusters: 90% cheap runs, 10% fifty times dearer. */
        for (size_t i = 0; i < 1000; i++)
            v[i] = i % 10 == 0 ? 50000 + (uint32_t)(rng_next(&s) % 100)
                               : 1000 + (uint32_t)(rng_next(&s) % 100);
        observe_all(e, "clustered", "wf", v, 1000);
        want = nearest_rank(v, 1000, pcts[p]);
        got = (int)fq_est_charge(e, "clustered", "wf", 0);
        assert_true(abs(got - (int)want) < (int)want / 4);
        fq_est_destroy(e);
    }
}

/* A history is not charged before it has min_samples samples. */
static void test_min_samples_gates_history(void **state)
{
    (void)state;
    const uint32_t min = 5;
    fq_est *e = est_new(min, 0, 64);

    for (uint32_t i = 1; i < min; i++) {
        fq_est_observe(e, "a", "wf", 0, 0, 300);
        assert_int_equal(fq_est_charge(e, "a", "wf", 0), 1000);
    }
    fq_est_observe(e, "a", "wf", 0, 0, 300);
    assert_int_equal(fq_est_charge(e, "a", "wf", 0), 300);
    fq_est_destroy(e);
}

/* Each step of the chain: global default, workflow default, the
 * workflow's shared statistic, the tenant's own history. */
static void test_fallback_chain(void **state)
{
    (void)state;
    const uint32_t min = 4;
    fq_est *e = est_new(min, 0, 64);

    assert_int_equal(fq_est_charge(e, "a", "report", 0), 1000);
    assert_int_equal(fq_est_set_workflow(e, "report", 5000), FQ_OK);
    assert_int_equal(fq_est_charge(e, "a", "report", 0), 5000);
    assert_int_equal(fq_est_charge(e, "a", "other", 0), 1000);

    /* b and c, two samples each: neither trusted alone, and two tenants
     * are no quorum for the shared statistic. */
    for (int i = 0; i < 2; i++) {
        fq_est_observe(e, "b", "report", 0, 0, 2000);
        fq_est_observe(e, "c", "report", 0, 0, 4000);
    }
    assert_int_equal(fq_est_charge(e, "a", "report", 0), 5000);
    /* A third: the median of the three serves a tenant never seen. */
    for (int i = 0; i < 2; i++)
        fq_est_observe(e, "f", "report", 0, 0, 3500);
    assert_int_equal(fq_est_charge(e, "a", "report", 0), 3500);
    assert_int_equal(fq_est_charge(e, "b", "report", 0), 3500);
    assert_int_equal(fq_est_charge(e, "a", "other", 0), 1000);

    /* a's own history wins once trusted; it also counts in the workflow's
     * shared statistic, as one tenant of four. */
    for (uint32_t i = 0; i < min; i++)
        fq_est_observe(e, "a", "report", 0, 0, 600);
    assert_int_equal(fq_est_charge(e, "a", "report", 0), 600);
    assert_int_equal(fq_est_charge(e, "d", "report", 0), (2000 + 3500) / 2);

    /* Runs without a workflow have their own chain. */
    assert_int_equal(fq_est_charge(e, "a", "", 0), 1000);
    assert_int_equal(fq_est_charge(e, "a", NULL, 0), 1000);
    for (int i = 0; i < 2; i++) {
        fq_est_observe(e, "b", NULL, 0, 0, 70);
        fq_est_observe(e, "c", "", 0, 0, 90);
        fq_est_observe(e, "f", NULL, 0, 0, 80);
    }
    assert_int_equal(fq_est_charge(e, "a", "", 0), 80);
    assert_int_equal(fq_est_charge(e, "a", "report", 0), 600);

    /* Replacing a workflow default; many workflows each keep theirs. */
    assert_int_equal(fq_est_set_workflow(e, "other", 10), FQ_OK);
    assert_int_equal(fq_est_set_workflow(e, "other", 20), FQ_OK);
    assert_int_equal(fq_est_charge(e, "a", "other", 0), 20);
    char wf[32];
    for (uint32_t i = 1; i <= 500; i++) {
        snprintf(wf, sizeof(wf), "wf-%u", i);
        assert_int_equal(fq_est_set_workflow(e, wf, i), FQ_OK);
    }
    for (uint32_t i = 1; i <= 500; i++) {
        snprintf(wf, sizeof(wf), "wf-%u", i);
        assert_int_equal(fq_est_charge(e, "a", wf, 0), i);
    }
    fq_est_destroy(e);
}

/* A tenant whose runs cost 3x what it declares is charged 3x its
 * declaration once min_samples completions are seen; an honest tenant and
 * an over-declarer are charged what they really cost too. */
static void test_declared_ratio_corrects(void **state)
{
    (void)state;
    const uint32_t min = 6;
    fq_est *e = est_new(min, 0, 64);
    uint64_t s = 99;
    double under_actual = 0;

    for (uint32_t i = 0; i < min; i++) {
        assert_int_equal(fq_est_charge(e, "under", "wf", 400), 400);
        uint32_t declared = 100 + (uint32_t)(rng_next(&s) % 900);
        uint32_t noise = (uint32_t)(rng_next(&s) % 21);   /* actual 2.9x..3.1x */
        uint64_t actual = (uint64_t)declared * (290 + noise) / 100;
        under_actual += actual;
        fq_est_observe(e, "under", "wf", declared, declared, actual);
        fq_est_observe(e, "honest", "wf", declared, declared, declared);
        fq_est_observe(e, "over", "wf", declared, declared, declared / 2);
    }
    uint32_t got = fq_est_charge(e, "under", "wf", 400);
    assert_true(got >= 400 * 289 / 100 && got <= 400 * 31 / 10);
    assert_true(abs((int)fq_est_charge(e, "honest", "wf", 400) - 400) <= 1);
    assert_true(abs((int)fq_est_charge(e, "over", "wf", 400) - 200) <= 2);

    /* The ratio is the tenant's for that workflow only. */
    assert_int_equal(fq_est_charge(e, "under", "other", 400), 400);
    assert_int_equal(fq_est_charge(e, "newcomer", "wf", 400), 400);

    /* Without a declaration the history serves, not the ratio. */
    assert_int_equal(fq_est_charge(e, "under", "wf", 0), (uint32_t)(under_actual / min + 0.5));
    fq_est_destroy(e);
}

/* One absurd completion moves a trusted ratio by a bounded amount, and a
 * tenant whose behaviour changes is followed: history does not shield it. */
static void test_ratio_is_robust_and_follows_change(void **state)
{
    (void)state;
    fq_est *e = est_new(4, 0, 64);

    for (int i = 0; i < 63; i++)
        fq_est_observe(e, "t", "wf", 100, 100, 100);
    fq_est_observe(e, "t", "wf", 100, 100, UINT64_MAX);
    /* At most (63 x 1 + 64) / 64 ~= 2x, where the raw actual would be 10,000x. */
    uint32_t got = fq_est_charge(e, "t", "wf", 100);
    assert_true(got > 100 && got <= 200);

    for (int i = 0; i < 500; i++)
        fq_est_observe(e, "t", "wf", 100, 100, 300);
    got = fq_est_charge(e, "t", "wf", 100);
    assert_true(got >= 290 && got <= 300);
    fq_est_destroy(e);
}

/* Histograms decay: the mean follows a workflow whose runs get dearer, and
 * a history trusted with a large min_samples stays trusted after halving. */
static void test_history_decays_but_stays_trusted(void **state)
{
    (void)state;
    fq_est *e = est_new(1, 0, 64);

    for (int i = 0; i < 5000; i++)
        fq_est_observe(e, "t", "wf", 0, 0, 100);
    for (int i = 0; i < 5000; i++)
        fq_est_observe(e, "t", "wf", 0, 0, 1000);
    assert_true(fq_est_charge(e, "t", "wf", 0) >= 990);
    fq_est_destroy(e);

    const uint32_t min = 600;
    e = est_new(min, 90, 64);
    for (uint32_t i = 0; i < 20 * min; i++) {
        fq_est_observe(e, "t", "wf", 0, 0, 10 + i % 500);
        if (i + 1 >= min)
            assert_int_not_equal(fq_est_charge(e, "t", "wf", 0), 1000);
    }
    fq_est_destroy(e);
}

/* actual == 0 is a cancelled run: no sample, no error; learning goes on. */
static void test_cancelled_runs_teach_nothing(void **state)
{
    (void)state;
    fq_est *e = est_new(3, 0, 64);

    for (int i = 0; i < 10; i++)
        fq_est_observe(e, "t", "wf", 50, 500, 0);
    assert_int_equal(fq_est_entries(e), 0);
    assert_int_equal(fq_est_charge(e, "t", "wf", 0), 1000);
    assert_int_equal(fq_est_charge(e, "t", "wf", 50), 50);
    assert_true(fq_est_error(e, "t") == 1.0);

    for (int i = 0; i < 3; i++) {
        fq_est_observe(e, "t", "wf", 50, 500, 400);
        fq_est_observe(e, "t", "wf", 50, 500, 0);
    }
    assert_int_equal(fq_est_charge(e, "t", "wf", 0), 400);
    assert_int_equal(fq_est_charge(e, "t", "wf", 50), 400);
    assert_true(fq_est_error(e, "t") > 0.79 && fq_est_error(e, "t") < 0.81);
    fq_est_destroy(e);
}

/* The estimate error is actual / charged tokens, per tenant, over all its
 * workflows. */
static void test_error_tracking(void **state)
{
    (void)state;
    fq_est *e = est_new(3, 0, 64);

    assert_true(fq_est_error(e, "a") == 1.0);
    assert_true(fq_est_error(e, NULL) == 1.0);
    for (int i = 0; i < 10; i++) {
        fq_est_observe(e, "a", "x", 0, 100, 300);
        fq_est_observe(e, "a", "y", 0, 1000, 3000);
        fq_est_observe(e, "b", "x", 0, 400, 100);
    }
    assert_true(fq_est_error(e, "a") > 2.999 && fq_est_error(e, "a") < 3.001);
    assert_true(fq_est_error(e, "b") > 0.249 && fq_est_error(e, "b") < 0.251);
    assert_true(fq_est_error(e, "c") == 1.0);

    /* Token-weighted: one big miss outweighs many small hits. */
    fq_est_observe(e, "c", "x", 0, 10, 10);
    fq_est_observe(e, "c", "x", 0, 10, 10);
    fq_est_observe(e, "c", "x", 0, 1000, 2000);
    double want = (10.0 + 10 + 2000) / (10 + 10 + 1000);
    assert_true(fq_est_error(e, "c") > want - 1e-9 && fq_est_error(e, "c") < want + 1e-9);

    /* An unknown charge (0) leaves the error as it is. */
    fq_est_observe(e, "b", "x", 0, 0, 100000);
    assert_true(fq_est_error(e, "b") > 0.249 && fq_est_error(e, "b") < 0.251);
    fq_est_destroy(e);
}

/* Every estimate is in [1, max_tokens], whatever came in. */
static void test_clamping(void **state)
{
    (void)state;
    fq_est_opts o;
    fq_est *e = NULL;

    fq_est_opts_init(&o);
    o.max_tokens = 1000;
    o.default_tokens = 5000;
    o.min_samples = 2;
    assert_int_equal(fq_est_create(&e, &o), FQ_OK);

    assert_int_equal(fq_est_charge(e, "t", "wf", 0), 1000);
    assert_int_equal(fq_est_set_workflow(e, "wf", 4000000000u), FQ_OK);
    assert_int_equal(fq_est_charge(e, "t", "wf", 0), 1000);
    assert_int_equal(fq_est_charge(e, "t", "wf", UINT32_MAX), 1000);
    assert_int_equal(fq_est_charge(e, "t", "wf", 1), 1);

    /* Absurd actuals are learned as max_tokens. */
    fq_est_observe(e, "t", "wf", 0, 0, UINT64_MAX);
    fq_est_observe(e, "t", "wf", 0, 0, 1000000000000ULL);
    assert_int_equal(fq_est_charge(e, "t", "wf", 0), 1000);
    fq_est_observe(e, "t", "wf", 0, 0, 1);
    fq_est_observe(e, "t", "wf", 0, 0, 1);
    fq_est_observe(e, "t", "wf", 0, 0, 1);
    assert_int_equal(fq_est_charge(e, "t", "wf", 0), (uint32_t)((2 * 1000 + 3) / 5.0 + 0.5));

    /* A ratio far below 1 still charges at least 1 token; far above,
     * max_tokens. */
    for (int i = 0; i < 4; i++) {
        fq_est_observe(e, "cheap", "wf", 1000, 1000, 1);
        fq_est_observe(e, "dear", "wf", 1, 1, 1000);
    }
    assert_int_equal(fq_est_charge(e, "cheap", "wf", 1), 1);
    assert_int_equal(fq_est_charge(e, "dear", "wf", 999), 1000);
    assert_true(fq_est_error(e, "dear") <= 1000.0);
    fq_est_destroy(e);
}

/* Keys that are NULL, empty or too long are refused or ignored, never
 * crash, and never reach another tenant's history. */
static void test_bad_keys(void **state)
{
    (void)state;
    fq_est *e = est_new(1, 0, 64);
    char longname[FQ_WORKFLOW_MAX + 2];

    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(fq_est_set_workflow(e, NULL, 10), FQ_EINVAL);
    assert_int_equal(fq_est_set_workflow(e, longname, 10), FQ_EINVAL);
    assert_int_equal(fq_est_set_workflow(e, "wf", 0), FQ_EINVAL);

    for (int i = 0; i < 3; i++) {
        fq_est_observe(e, NULL, "wf", 0, 10, 10);
        fq_est_observe(e, "", "wf", 0, 10, 10);
        fq_est_observe(e, longname, "wf", 0, 10, 10);
    }
    /* No tenant to charge them to: nothing is learned. */
    assert_int_equal(fq_est_entries(e), 0);
    assert_int_equal(fq_est_charge(e, "t", "wf", 0), 1000);
    fq_est_observe(e, "t", longname, 0, 10, 20);
    assert_int_equal(fq_est_entries(e), 1);     /* only the tenant's record */
    assert_int_equal(fq_est_tenant_entries(e, "t"), 1);
    assert_true(fq_est_error(e, "t") == 2.0);
    assert_int_equal(fq_est_charge(e, "t", longname, 0), 1000);
    assert_int_equal(fq_est_charge(e, NULL, "wf", 0), 1000);
    assert_int_equal(fq_est_charge(e, longname, "wf", 7), 7);
    assert_true(fq_est_error(e, longname) == 1.0);
    assert_int_equal(fq_est_tenant_entries(e, longname), 0);
    assert_int_equal(fq_est_tenant_entries(e, NULL), 0);

    /* A workflow named like another's tenant keys nothing of it. */
    for (int i = 0; i < 3; i++)
        fq_est_observe(e, "ab", "", 0, 0, 500);
    assert_int_equal(fq_est_charge(e, "a", "b", 0), 1000);
    fq_est_destroy(e);
}

/* Many more tenants than max_entries: the entries never exceed it, memory
 * stops growing once full, and under that pressure whole tenants go, the
 * least recently used first (a charge counts as use). */
static void test_memory_is_bounded_lru(void **state)
{
    (void)state;
    const uint32_t max = 50, min = 2, keys = 5000;
    fq_est *e = est_new(min, 0, max);
    char tenant[32];
    size_t full_bytes = 0;

    /* "keeper" learns first, then is only charged, never observed again. */
    for (uint32_t j = 0; j < min; j++)
        fq_est_observe(e, "keeper", "wf", 0, 0, 7);
    for (uint32_t i = 0; i < keys; i++) {
        snprintf(tenant, sizeof(tenant), "t%u", i);
        for (uint32_t j = 0; j < min; j++)
            fq_est_observe(e, tenant, "wf", 0, 0, 100 + i);
        assert_true(fq_est_entries(e) <= max);
        assert_int_equal(fq_est_charge(e, "keeper", "wf", 0), 7);
        if (i == 2 * max)
            full_bytes = fq_est_bytes(e);
        else if (i > 2 * max)
            assert_int_equal(fq_est_bytes(e), full_bytes);
    }
    assert_true(fq_est_entries(e) >= max - 1);

    /* Each tenant holds two entries, its record and its history, keeper
     * too; the workflow's shared summary one. */
    uint32_t survivors = 0;
    for (uint32_t i = keys; i-- > 0;) {
        snprintf(tenant, sizeof(tenant), "t%u", i);
        if (fq_est_charge(e, tenant, "wf", 0) == 100 + i) {
            survivors++;
            assert_int_equal(fq_est_tenant_entries(e, tenant), 2);
        } else {
            assert_int_equal(fq_est_tenant_entries(e, tenant), 0);
            break;
        }
    }
    assert_int_equal(survivors, (max - 1 - 2) / 2);
    /* The evicted fall back to the workflow's shared statistic, alive. */
    snprintf(tenant, sizeof(tenant), "t%u", 0);
    assert_true(fq_est_charge(e, tenant, "wf", 0) > 100 + keys / 2);
    fq_est_destroy(e);
}

/* The bound holds down to a single entry: a tenant's record, then no room
 * for its history; a tenant that holds only its record gives it up. */
static void test_single_entry_bound(void **state)
{
    (void)state;
    fq_est *e = est_new(1, 0, 1);

    for (int i = 0; i < 100; i++) {
        fq_est_observe(e, i % 2 ? "a" : "b", i % 3 ? "x" : "y", 10, 10, 40);
        assert_int_equal(fq_est_entries(e), 1);
    }
    /* The entry left is the last tenant's record (i = 99). */
    assert_true(fq_est_error(e, "a") > 3.99 && fq_est_error(e, "a") < 4.01);
    assert_true(fq_est_error(e, "b") == 1.0);
    assert_int_equal(fq_est_charge(e, "a", "x", 0), 1000);
    fq_est_destroy(e);
}

/* A stream of unique workflow names from one tenant recycles that tenant's
 * own entries: another tenant's histories, the workflow shared by others,
 * and the estimates they give stay as they were. */
static void test_unique_names_evict_only_their_tenant(void **state)
{
    (void)state;
    const uint32_t max = 256, min = 2, names = 10000;
    fq_est *e = est_new(min, 0, max);
    char wf[32];

    for (uint32_t w = 0; w < 10; w++) {
        snprintf(wf, sizeof(wf), "b-%u", w);
        for (uint32_t j = 0; j < min; j++)
            fq_est_observe(e, "b", wf, 0, 0, 100 + w);
    }
    for (uint32_t j = 0; j < min; j++) {
        fq_est_observe(e, "h1", "common", 0, 0, 500);
        fq_est_observe(e, "h2", "common", 0, 0, 600);
        fq_est_observe(e, "h3", "common", 0, 0, 700);
    }
    assert_int_equal(fq_est_charge(e, "newcomer", "common", 0), 600);
    size_t b_held = fq_est_tenant_entries(e, "b");

    for (uint32_t i = 0; i < names; i++) {
        snprintf(wf, sizeof(wf), "a-%u", i);
        for (uint32_t j = 0; j < min; j++)
            fq_est_observe(e, "a", wf, 0, 0, 5000);
        assert_true(fq_est_entries(e) <= max);
    }

    for (uint32_t w = 0; w < 10; w++) {
        snprintf(wf, sizeof(wf), "b-%u", w);
        assert_int_equal(fq_est_charge(e, "b", wf, 0), 100 + w);
    }
    assert_int_equal(fq_est_charge(e, "newcomer", "common", 0), 600);
    assert_int_equal(fq_est_charge(e, "h1", "common", 0), 500);
    /* a's newest names are learned, its oldest recycled. */
    assert_int_equal(fq_est_charge(e, "a", "a-9999", 0), 5000);
    assert_int_equal(fq_est_charge(e, "a", "a-0", 0), 1000);
    assert_int_equal(fq_est_tenant_entries(e, "b"), b_held);
    assert_int_equal(fq_est_tenant_entries(e, "a"),
                     fq_est_entries(e) - b_held - 3 * 2 - 1);
    fq_est_destroy(e);
}

/* The bound is split max-min fairly: a tenant that needs room takes it
 * from the tenant holding the most, and from itself once it holds as many;
 * a per-tenant cap bounds each, whatever room is left. */
static void test_bound_is_split_fairly(void **state)
{
    (void)state;
    const uint32_t max = 100;
    fq_est *e = est_new(1, 0, max);
    char wf[32];

    /* b reports 40 workflows alone: its record, 40 histories and 40
     * summaries, 81 entries. Then a streams new names. */
    for (uint32_t w = 0; w < 40; w++) {
        snprintf(wf, sizeof(wf), "b-%u", w);
        fq_est_observe(e, "b", wf, 0, 0, 100 + w);
    }
    assert_int_equal(fq_est_tenant_entries(e, "b"), 81);
    for (uint32_t i = 0; i < 1000; i++) {
        snprintf(wf, sizeof(wf), "a-%u", i);
        fq_est_observe(e, "a", wf, 0, 0, 5000);
        size_t a = fq_est_tenant_entries(e, "a"), b = fq_est_tenant_entries(e, "b");
        assert_true(a + b <= max);
        /* a took from b only while b held more. */
        assert_true(b + 2 >= a);
        assert_true(b >= max / 2 - 1);
    }
    /* b lost its least recently used; its newest are intact. */
    assert_int_equal(fq_est_charge(e, "b", "b-39", 0), 139);
    assert_int_equal(fq_est_charge(e, "b", "b-0", 0), 1000);
    fq_est_destroy(e);

    /* With a cap of 8 per tenant, a holds 8 at most with room to spare. */
    e = est_new_capped(1, 0, max, 8);
    for (uint32_t i = 0; i < 1000; i++) {
        snprintf(wf, sizeof(wf), "a-%u", i);
        fq_est_observe(e, "a", wf, 0, 0, 5000);
        assert_true(fq_est_tenant_entries(e, "a") <= 8);
    }
    fq_est_observe(e, "b", "b-0", 0, 0, 100);
    assert_int_equal(fq_est_tenant_entries(e, "a"), 8);
    assert_int_equal(fq_est_tenant_entries(e, "b"), 3);
    assert_int_equal(fq_est_entries(e), 11);
    fq_est_destroy(e);
}

/* What a tenant learns is charged to it: its record, its histories, and
 * the workflows only it has reported (until a second tenant does). A
 * tenant with nothing learned holds nothing, however often it is charged. */
static void test_history_is_charged_to_its_tenant(void **state)
{
    (void)state;
    fq_est *e = est_new(1, 0, 1000);
    char wf[32];

    for (uint32_t w = 0; w < 5; w++) {
        snprintf(wf, sizeof(wf), "wf-%u", w);
        fq_est_observe(e, "a", wf, 0, 0, 100);
    }
    assert_int_equal(fq_est_tenant_entries(e, "a"), 1 + 5 + 5);
    assert_int_equal(fq_est_entries(e), 11);

    /* b reports two of them: those two summaries are shared, no longer a's. */
    fq_est_observe(e, "b", "wf-0", 0, 0, 100);
    fq_est_observe(e, "b", "wf-1", 0, 0, 100);
    assert_int_equal(fq_est_tenant_entries(e, "a"), 1 + 5 + 3);
    assert_int_equal(fq_est_tenant_entries(e, "b"), 1 + 2);
    assert_int_equal(fq_est_entries(e), 9 + 3 + 2);

    /* 200,000 tenants charged, none of them completing anything. */
    size_t bytes = fq_est_bytes(e);
    char tenant[32];
    for (uint32_t i = 0; i < 200000; i++) {
        snprintf(tenant, sizeof(tenant), "c%u", i);
        assert_int_equal(fq_est_charge(e, tenant, "wf-0", 0), 1000);
        assert_int_equal(fq_est_charge(e, tenant, "wf-0", 40), 40);
    }
    assert_int_equal(fq_est_tenant_entries(e, "c7"), 0);
    assert_int_equal(fq_est_entries(e), 14);
    assert_int_equal(fq_est_bytes(e), bytes);
    fq_est_destroy(e);
}

/* One tenant reporting actuals 1,000x the others' for a workflow, as often
 * as it likes, moves the shared statistic a tenant without history of its
 * own is charged at most one rank among the others' values; alone, or with
 * one other, it moves nothing. */
static void test_shared_statistic_bounded_against_one_tenant(void **state)
{
    (void)state;
    const uint32_t min = 4;
    const uint32_t honest[] = {900, 950, 1000, 1050, 1100};
    fq_est *e = est_new(min, 0, 1024);
    char tenant[32];

    for (uint32_t h = 0; h < 5; h++) {
        snprintf(tenant, sizeof(tenant), "h%u", h);
        for (uint32_t j = 0; j < min; j++)
            fq_est_observe(e, tenant, "wf", 0, 0, honest[h]);
    }
    assert_int_equal(fq_est_charge(e, "newcomer", "wf", 0), 1000);

    /* The bound, with the others' values 900..1100: between the midpoints
     * beside their median, [975, 1025]. */
    for (uint32_t j = 0; j < 10000; j++)
        fq_est_observe(e, "x", "wf", 0, 0, 1000 * 1000);
    uint32_t got = fq_est_charge(e, "newcomer", "wf", 0);
    assert_true(got >= 975 && got <= 1025);
    /* And as low as it likes. */
    for (uint32_t j = 0; j < 10000; j++)
        fq_est_observe(e, "x", "wf", 0, 0, 1);
    got = fq_est_charge(e, "newcomer", "wf", 0);
    assert_true(got >= 975 && got <= 1025);
    /* The others' own estimates are their own. */
    assert_int_equal(fq_est_charge(e, "h0", "wf", 0), 900);
    fq_est_destroy(e);

    /* Alone, or with one honest tenant, no quorum: the default serves. */
    e = est_new(min, 0, 1024);
    for (uint32_t j = 0; j < 10000; j++)
        fq_est_observe(e, "x", "wf", 0, 0, 1000 * 1000);
    assert_int_equal(fq_est_charge(e, "newcomer", "wf", 0), 1000);
    for (uint32_t j = 0; j < min; j++)
        fq_est_observe(e, "h0", "wf", 0, 0, 900);
    assert_int_equal(fq_est_charge(e, "newcomer", "wf", 0), 1000);
    fq_est_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_bad_options),
        cmocka_unit_test(test_mean_of_known_sets),
        cmocka_unit_test(test_percentiles_of_known_sets),
        cmocka_unit_test(test_min_samples_gates_history),
        cmocka_unit_test(test_fallback_chain),
        cmocka_unit_test(test_declared_ratio_corrects),
        cmocka_unit_test(test_ratio_is_robust_and_follows_change),
        cmocka_unit_test(test_history_decays_but_stays_trusted),
        cmocka_unit_test(test_cancelled_runs_teach_nothing),
        cmocka_unit_test(test_error_tracking),
        cmocka_unit_test(test_clamping),
        cmocka_unit_test(test_bad_keys),
        cmocka_unit_test(test_memory_is_bounded_lru),
        cmocka_unit_test(test_single_entry_bound),
        cmocka_unit_test(test_unique_names_evict_only_their_tenant),
        cmocka_unit_test(test_bound_is_split_fairly),
        cmocka_unit_test(test_history_is_charged_to_its_tenant),
        cmocka_unit_test(test_shared_statistic_bounded_against_one_tenant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
