/* test_policy.c -- unit tests of plans, tenant entries, overrides and their resolution. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "policy.h"

static fq_plan plan(const char *name, uint32_t weight, uint32_t mif, uint32_t mp)
{
    fq_plan p = {.weight = weight, .max_in_flight = mif, .max_pending = mp};
    snprintf(p.name, sizeof(p.name), "%s", name);
    return p;
}

static fq_tenant_entry entry(const char *id, const char *plan_name, uint32_t weight,
                             uint32_t mif, uint32_t mp)
{
    fq_tenant_entry e = {.weight = weight, .max_in_flight = mif, .max_pending = mp};
    snprintf(e.id, sizeof(e.id), "%s", id);
    snprintf(e.plan, sizeof(e.plan), "%s", plan_name);
    return e;
}

/* free (weight 1), pro (3, max_pending 500), enterprise (10, cap 8). */
static fq_policy *three_plans(bool reject_unknown)
{
    fq_policy *p = NULL;
    assert_int_equal(fq_policy_create(&p, "free", reject_unknown, 1000), FQ_OK);
    fq_plan pl[] = {plan("free", 1, 0, 0), plan("pro", 3, 0, 500),
                    plan("enterprise", 10, 8, 0)};
    for (size_t i = 0; i < sizeof(pl) / sizeof(pl[0]); i++)
        assert_int_equal(fq_policy_set_plan(p, &pl[i]), FQ_OK);
    return p;
}

static fq_policy_resolved resolve_ok(const fq_policy *p, const char *tenant)
{
    fq_policy_resolved r;
    memset(&r, 0, sizeof(r));
    assert_int_equal(fq_policy_resolve(&r, p, tenant), FQ_OK);
    return r;
}

static void test_create_checks_default_plan(void **state)
{
    (void)state;
    fq_policy *p = (fq_policy *)&p;
    assert_int_equal(fq_policy_create(&p, "", false, 0), FQ_EINVAL);
    assert_null(p);
    assert_int_equal(fq_policy_create(&p, "has space", false, 0), FQ_EINVAL);
    assert_int_equal(fq_policy_create(&p, NULL, false, 0), FQ_EINVAL);
    fq_policy_destroy(NULL);
}

static void test_unlisted_tenant_gets_default_plan(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    fq_policy_resolved r = resolve_ok(p, "acme");
    assert_string_equal(r.plan, "free");
    assert_int_equal(r.source, FQ_SRC_DEFAULT);
    assert_int_equal(r.p.weight, 1);
    assert_int_equal(r.p.max_in_flight, 0);
    /* The plan sets no max_pending, so the policy default applies. */
    assert_int_equal(r.p.max_pending, 1000);
    fq_policy_destroy(p);
}

static void test_missing_default_plan_is_not_found(void **state)
{
    (void)state;
    fq_policy *p = NULL;
    assert_int_equal(fq_policy_create(&p, "basic", false, 0), FQ_OK);
    fq_policy_resolved r = {.plan = "untouched"};
    assert_int_equal(fq_policy_resolve(&r, p, "acme"), FQ_ENOTFOUND);
    assert_string_equal(r.plan, "untouched");
    /* Added later, it is found without rebuilding anything. */
    fq_plan b = plan("basic", 2, 0, 0);
    assert_int_equal(fq_policy_set_plan(p, &b), FQ_OK);
    assert_int_equal(resolve_ok(p, "acme").p.weight, 2);
    /* default_max_pending 0 means no limit at all. */
    assert_int_equal(resolve_ok(p, "acme").p.max_pending, 0);
    fq_policy_destroy(p);
}

static void test_reject_unknown(void **state)
{
    (void)state;
    fq_policy *p = three_plans(true);
    fq_policy_resolved r = {.plan = "untouched"};
    assert_int_equal(fq_policy_resolve(&r, p, "stranger"), FQ_EUNKNOWN);
    assert_string_equal(r.plan, "untouched");

    fq_tenant_entry e = entry("listed", "", 0, 0, 0);
    assert_int_equal(fq_policy_set_tenant(p, &e), FQ_OK);
    r = resolve_ok(p, "listed");
    assert_string_equal(r.plan, "free");    /* no plan named: the default */
    assert_int_equal(r.source, FQ_SRC_CONFIG);

    /* An override alone makes a tenant known. */
    fq_tenant_entry o = entry("stranger", "pro", 0, 0, 0);
    assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
    r = resolve_ok(p, "stranger");
    assert_string_equal(r.plan, "pro");
    assert_int_equal(r.source, FQ_SRC_OVERRIDE);
    assert_int_equal(fq_policy_clear_override(p, "stranger"), FQ_OK);
    assert_int_equal(fq_policy_resolve(&r, p, "stranger"), FQ_EUNKNOWN);
    fq_policy_destroy(p);
}

static void test_config_entry_beats_plan(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    fq_tenant_entry e = entry("acme", "pro", 0, 0, 0);
    assert_int_equal(fq_policy_set_tenant(p, &e), FQ_OK);
    fq_policy_resolved r = resolve_ok(p, "acme");
    assert_string_equal(r.plan, "pro");
    assert_int_equal(r.source, FQ_SRC_CONFIG);
    assert_int_equal(r.p.weight, 3);
    assert_int_equal(r.p.max_pending, 500);

    /* Fields the entry sets win over the plan's, one by one. */
    e = entry("acme", "enterprise", 4, 0, 7);
    assert_int_equal(fq_policy_set_tenant(p, &e), FQ_OK);
    r = resolve_ok(p, "acme");
    assert_string_equal(r.plan, "enterprise");
    assert_int_equal(r.p.weight, 4);
    assert_int_equal(r.p.max_in_flight, 8);     /* the plan's */
    assert_int_equal(r.p.max_pending, 7);
    fq_policy_destroy(p);
}

static void test_override_beats_config_field_by_field(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    fq_tenant_entry e = entry("acme", "pro", 5, 2, 0);
    assert_int_equal(fq_policy_set_tenant(p, &e), FQ_OK);

    /* Only the weight is overridden: plan and cap still come from config. */
    fq_tenant_entry o = entry("acme", "", 9, 0, 0);
    assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
    fq_policy_resolved r = resolve_ok(p, "acme");
    assert_int_equal(r.source, FQ_SRC_OVERRIDE);
    assert_string_equal(r.plan, "pro");
    assert_int_equal(r.p.weight, 9);
    assert_int_equal(r.p.max_in_flight, 2);
    assert_int_equal(r.p.max_pending, 500);

    /* Replacing the override replaces it whole. */
    o = entry("acme", "enterprise", 0, 0, 0);
    assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
    r = resolve_ok(p, "acme");
    assert_string_equal(r.plan, "enterprise");
    assert_int_equal(r.p.weight, 5);            /* the config entry's */
    assert_int_equal(r.p.max_in_flight, 2);

    assert_int_equal(fq_policy_clear_override(p, "acme"), FQ_OK);
    r = resolve_ok(p, "acme");
    assert_int_equal(r.source, FQ_SRC_CONFIG);
    assert_string_equal(r.plan, "pro");
    assert_int_equal(fq_policy_clear_override(p, "acme"), FQ_ENOTFOUND);
    fq_policy_destroy(p);
}

static void test_bad_entries_change_nothing(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    fq_tenant_entry e = entry("acme", "pro", 0, 0, 0);
    assert_int_equal(fq_policy_set_tenant(p, &e), FQ_OK);

    fq_tenant_entry bad = entry("acme", "platinum", 0, 0, 0);
    assert_int_equal(fq_policy_set_tenant(p, &bad), FQ_ENOTFOUND);
    assert_int_equal(fq_policy_set_override(p, &bad), FQ_ENOTFOUND);
    bad = entry("acme", "pro", FQ_POLICY_MAX_WEIGHT + 1, 0, 0);
    assert_int_equal(fq_policy_set_tenant(p, &bad), FQ_EINVAL);
    bad = entry("bad.id", "pro", 0, 0, 0);
    assert_int_equal(fq_policy_set_override(p, &bad), FQ_EINVAL);
    bad = entry("acme", "bad plan", 0, 0, 0);
    assert_int_equal(fq_policy_set_override(p, &bad), FQ_EINVAL);
    bad = entry("_other", "pro", 0, 0, 0);      /* reserved: no tenant's */
    assert_int_equal(fq_policy_set_tenant(p, &bad), FQ_EINVAL);
    assert_int_equal(fq_policy_set_override(p, &bad), FQ_EINVAL);
    /* An id that fills its array with no terminator is refused, not read past. */
    memset(bad.id, 'a', sizeof(bad.id));
    assert_int_equal(fq_policy_set_tenant(p, &bad), FQ_EINVAL);

    fq_policy_resolved r = resolve_ok(p, "acme");
    assert_string_equal(r.plan, "pro");
    assert_int_equal(r.source, FQ_SRC_CONFIG);
    assert_int_equal(r.p.weight, 3);

    fq_plan bp = plan("free", 0, 0, 0);
    assert_int_equal(fq_policy_set_plan(p, &bp), FQ_EINVAL);
    bp = plan("free", FQ_POLICY_MAX_WEIGHT + 1, 0, 0);
    assert_int_equal(fq_policy_set_plan(p, &bp), FQ_EINVAL);
    bp = plan("", 1, 0, 0);
    assert_int_equal(fq_policy_set_plan(p, &bp), FQ_EINVAL);
    assert_int_equal(resolve_ok(p, "someone").p.weight, 1);
    assert_null(fq_policy_plan(p, ""));
    fq_policy_destroy(p);
}

static void test_invalid_tenant_id(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    fq_policy_resolved r;
    char longid[FQ_TENANT_MAX + 2];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_int_equal(fq_policy_resolve(&r, p, ""), FQ_EINVAL);
    assert_int_equal(fq_policy_resolve(&r, p, "a.b"), FQ_EINVAL);
    assert_int_equal(fq_policy_resolve(&r, p, longid), FQ_EINVAL);
    longid[FQ_TENANT_MAX] = '\0';   /* exactly 64 bytes is valid */
    assert_int_equal(fq_policy_resolve(&r, p, longid), FQ_OK);
    fq_policy_destroy(p);
}

static void test_replacing_a_plan_applies_to_its_tenants(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    fq_tenant_entry e = entry("acme", "pro", 0, 0, 0);
    assert_int_equal(fq_policy_set_tenant(p, &e), FQ_OK);
    const char *name = resolve_ok(p, "acme").plan;

    fq_plan pro = plan("pro", 6, 3, 0);
    assert_int_equal(fq_policy_set_plan(p, &pro), FQ_OK);
    fq_policy_resolved r = resolve_ok(p, "acme");
    assert_int_equal(r.p.weight, 6);
    assert_int_equal(r.p.max_in_flight, 3);
    assert_int_equal(r.p.max_pending, 1000);   /* 0 again: the policy default */
    assert_ptr_equal(r.plan, name);
    assert_int_equal(fq_policy_plan(p, "pro")->weight, 6);
    fq_policy_destroy(p);
}

/* Enough entries to grow every table many times over: every one of them still
 * resolves to its own values, and plan names handed out stay valid. */
static void test_many_entries(void **state)
{
    (void)state;
    enum { PLANS = 300, TENANTS = 20000 };
    fq_policy *p = three_plans(false);
    const char *dflt = resolve_ok(p, "x").plan;   /* "free", before any growth */
    char id[32];
    for (uint32_t i = 0; i < PLANS; i++) {
        snprintf(id, sizeof(id), "plan-%u", i);
        fq_plan pl = plan(id, i + 1, 0, 0);
        assert_int_equal(fq_policy_set_plan(p, &pl), FQ_OK);
    }
    for (uint32_t i = 0; i < TENANTS; i++) {
        char pn[32];
        snprintf(id, sizeof(id), "t%u", i);
        snprintf(pn, sizeof(pn), "plan-%u", i % PLANS);
        fq_tenant_entry e = entry(id, pn, 0, i % 7, 0);
        assert_int_equal(fq_policy_set_tenant(p, &e), FQ_OK);
        if (i % 3 == 0) {
            fq_tenant_entry o = entry(id, "", i % 11 + 1, 0, i + 1);
            assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
        }
    }
    assert_string_equal(dflt, "free");
    for (uint32_t i = 0; i < TENANTS; i++) {
        snprintf(id, sizeof(id), "t%u", i);
        fq_policy_resolved r = resolve_ok(p, id);
        bool ov = i % 3 == 0;
        assert_int_equal(r.source, ov ? FQ_SRC_OVERRIDE : FQ_SRC_CONFIG);
        assert_int_equal(r.p.weight, ov ? i % 11 + 1 : i % PLANS + 1);
        assert_int_equal(r.p.max_in_flight, i % 7);
        assert_int_equal(r.p.max_pending, ov ? i + 1 : 1000);
        char pn[32];
        snprintf(pn, sizeof(pn), "plan-%u", i % PLANS);
        assert_string_equal(r.plan, pn);
    }
    assert_int_equal(resolve_ok(p, "t20000").source, FQ_SRC_DEFAULT);
    fq_policy_destroy(p);
}

struct ov_seen {
    unsigned count;
    unsigned weights;   /* sum, to see each override's own values */
};

static void count_override(void *arg, const fq_tenant_entry *t)
{
    struct ov_seen *s = arg;
    s->count++;
    s->weights += t->weight;
}

static void test_foreach_override_visits_each_once(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    struct ov_seen s = {0, 0};
    fq_policy_foreach_override(p, count_override, &s);
    assert_int_equal(s.count, 0);
    char id[16];
    unsigned want = 0;
    for (unsigned i = 0; i < 100; i++) {
        snprintf(id, sizeof(id), "t%u", i);
        fq_tenant_entry o = entry(id, "", i + 1, 0, 0);
        assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
        assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);   /* replaces */
        want += i + 1;
    }
    assert_int_equal(fq_policy_clear_override(p, "t0"), FQ_OK);
    fq_policy_foreach_override(p, count_override, &s);
    assert_int_equal(s.count, 99);
    assert_int_equal(s.weights, want - 1);
    fq_policy_destroy(p);
}

/* The burstable cap and the token rate resolve like the other knobs:
 * override over config entry over plan; unset everywhere is 0 (off). */
static void test_policy_knobs_resolve_by_layer(void **state)
{
    (void)state;
    fq_policy *p = three_plans(false);
    fq_plan burst = plan("burst", 1, 2, 0);
    burst.burst_in_flight = 8;
    assert_int_equal(fq_policy_set_plan(p, &burst), FQ_OK);
    assert_int_equal(resolve_ok(p, "nobody").p.burst_in_flight, 0);
    fq_tenant_entry a = entry("a", "burst", 0, 0, 0);
    assert_int_equal(fq_policy_set_tenant(p, &a), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.burst_in_flight, 8);
    assert_int_equal(resolve_ok(p, "a").p.max_in_flight, 2);
    a.burst_in_flight = 4;
    assert_int_equal(fq_policy_set_tenant(p, &a), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.burst_in_flight, 4);
    fq_tenant_entry o = entry("a", "", 0, 0, 0);
    o.burst_in_flight = 16;
    assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.burst_in_flight, 16);
    assert_int_equal(fq_policy_clear_override(p, "a"), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.burst_in_flight, 4);
    /* tokens_per_minute the same way */
    assert_int_equal(resolve_ok(p, "a").p.tokens_per_minute, 0);
    burst.tokens_per_minute = 60000;
    assert_int_equal(fq_policy_set_plan(p, &burst), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.tokens_per_minute, 60000);
    o.tokens_per_minute = 1000;
    assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.tokens_per_minute, 1000);
    assert_int_equal(resolve_ok(p, "a").p.burst_in_flight, 16);
    /* class weights: strict unless a layer sets them; an override's
     * "strict" beats a weighted plan; they must fit the classes */
    fq_policy_set_nclasses(p, 2);
    assert_int_equal(resolve_ok(p, "a").p.class_weight[0], 0);
    assert_int_equal(fq_class_weights_parse(&burst.class_weights, " 3 ,1 "), FQ_OK);
    assert_int_equal(fq_policy_set_plan(p, &burst), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.class_weight[0], 3);
    assert_int_equal(resolve_ok(p, "a").p.class_weight[1], 1);
    assert_int_equal(fq_class_weights_parse(&o.class_weights, "strict"), FQ_OK);
    assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").p.class_weight[0], 0);
    assert_int_equal(fq_class_weights_parse(&o.class_weights, "1,2,3"), FQ_OK);
    assert_int_equal(fq_policy_set_override(p, &o), FQ_EINVAL);     /* 3 weights, 2 classes */
    char text[48];
    fq_class_weights_format(text, sizeof text, &burst.class_weights);
    assert_string_equal(text, "3,1");
    fq_class_weights none;
    assert_int_equal(fq_class_weights_parse(&none, ""), FQ_OK);
    assert_false(none.set);
    const char *bad[] = {"3", "0,1", "1001,1", "1,2,3,4,5", "3;1", "strict,1", "1,,2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(fq_class_weights_parse(&none, bad[i]), FQ_EINVAL);
    /* a class's max_pending: not set (scheduler.classes') unless a layer
     * sets it; the override's over the entry's over the plan's; one per
     * class or refused */
    assert_false(resolve_ok(p, "a").class_max_pending.set);
    assert_int_equal(fq_class_pending_parse(&burst.class_max_pending, "100, 0"), FQ_OK);
    assert_int_equal(fq_policy_set_plan(p, &burst), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").class_max_pending.n[0], 100);
    assert_int_equal(fq_class_pending_parse(&a.class_max_pending, "7,3"), FQ_OK);
    assert_int_equal(fq_policy_set_tenant(p, &a), FQ_OK);
    assert_int_equal(resolve_ok(p, "a").class_max_pending.n[1], 3);
    assert_int_equal(fq_class_weights_parse(&o.class_weights, "strict"), FQ_OK);
    assert_int_equal(fq_class_pending_parse(&o.class_max_pending, "0, 9"), FQ_OK);
    assert_int_equal(fq_policy_set_override(p, &o), FQ_OK);
    fq_class_pending cp = resolve_ok(p, "a").class_max_pending;
    assert_true(cp.set);
    assert_int_equal(cp.n[0], 0);
    assert_int_equal(cp.n[1], 9);
    fq_class_pending_format(text, sizeof text, &cp);
    assert_string_equal(text, "0,9");
    assert_int_equal(fq_class_pending_parse(&o.class_max_pending, "1,2,3"), FQ_OK);
    assert_int_equal(fq_policy_set_override(p, &o), FQ_EINVAL);     /* 3 for 2 classes */
    assert_int_equal(resolve_ok(p, "a").class_max_pending.n[1], 9); /* unchanged */
    fq_class_pending np;
    assert_int_equal(fq_class_pending_parse(&np, ""), FQ_OK);
    assert_false(np.set);
    const char *badp[] = {"3", "-1,1", "4294967296,1", "1,2,3,4,5", "3;1", "1,,2", "a,b"};
    for (size_t i = 0; i < sizeof badp / sizeof badp[0]; i++)
        assert_int_equal(fq_class_pending_parse(&np, badp[i]), FQ_EINVAL);
    fq_policy_destroy(p);
}

/* Priced costs: in input tokens' worth, cached tokens counted among the
 * input ones and priced apart, rounded up; every price 1 is input + output. */
static void test_price_cost(void **state)
{
    (void)state;
    fq_prices one = {1, 1, 1}, unset = {0, 0, 0}, p = {10, 40, 1};
    assert_int_equal(fq_price_cost(&one, 1000, 500, 400), 1500);
    assert_int_equal(fq_price_cost(&unset, 1000, 500, 400), 1500);
    /* 600 x 10 + 400 x 1 + 500 x 40 = 26,400 over 10 */
    assert_int_equal(fq_price_cost(&p, 1000, 500, 400), 2640);
    assert_int_equal(fq_price_cost(&p, 0, 0, 0), 0);
    assert_int_equal(fq_price_cost(&p, 1, 0, 1), 1);        /* 0.1, rounded up */
    assert_int_equal(fq_price_cost(&p, 5, 0, 9), 1);        /* cached past input: all cached */
    /* the largest kinds a completion may report and the largest prices fit */
    fq_prices big = {1, FQ_POLICY_MAX_PRICE, FQ_POLICY_MAX_PRICE};
    uint64_t most = (uint64_t)UINT32_MAX * 100;
    assert_true(fq_price_cost(&big, most, most, most) == most * FQ_POLICY_MAX_PRICE * 2);
    /* prices resolve like the other fields, 1 where unset */
    fq_policy *pol = three_plans(false);
    assert_int_equal(resolve_ok(pol, "x").prices.output, 1);
    fq_plan m = plan("metered", 1, 0, 0);
    m.prices = (fq_prices){.input = 2, .output = 8};
    assert_int_equal(fq_policy_set_plan(pol, &m), FQ_OK);
    fq_tenant_entry e = entry("x", "metered", 0, 0, 0);
    e.prices.cached = 1;
    assert_int_equal(fq_policy_set_tenant(pol, &e), FQ_OK);
    fq_prices r = resolve_ok(pol, "x").prices;
    assert_int_equal(r.input, 2);
    assert_int_equal(r.output, 8);
    assert_int_equal(r.cached, 1);
    m.prices.output = FQ_POLICY_MAX_PRICE + 1;
    assert_int_equal(fq_policy_set_plan(pol, &m), FQ_EINVAL);
    fq_policy_destroy(pol);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_checks_default_plan),
        cmocka_unit_test(test_unlisted_tenant_gets_default_plan),
        cmocka_unit_test(test_missing_default_plan_is_not_found),
        cmocka_unit_test(test_reject_unknown),
        cmocka_unit_test(test_config_entry_beats_plan),
        cmocka_unit_test(test_override_beats_config_field_by_field),
        cmocka_unit_test(test_bad_entries_change_nothing),
        cmocka_unit_test(test_invalid_tenant_id),
        cmocka_unit_test(test_replacing_a_plan_applies_to_its_tenants),
        cmocka_unit_test(test_many_entries),
        cmocka_unit_test(test_foreach_override_visits_each_once),
        cmocka_unit_test(test_policy_knobs_resolve_by_layer),
        cmocka_unit_test(test_price_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
