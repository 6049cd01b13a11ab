/* test_overrides.c -- unit tests of the overrides bucket's records: what is in force, echoes, refusals, forgetting, writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "overrides.h"

typedef struct fixture {
    fq_policy *pol;
    fq_ovr_set *s;
} fixture;

static int setup(void **state)
{
    static fixture f;
    assert_int_equal(fq_policy_create(&f.pol, "free", false, 0), FQ_OK);
    fq_plan pl[] = {{.name = "free", .weight = 1}, {.name = "pro", .weight = 3, .max_pending = 500}};
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(fq_policy_set_plan(f.pol, &pl[i]), FQ_OK);
    assert_int_equal(fq_ovr_create(&f.s, 42), FQ_OK);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    fq_ovr_destroy(f->s);
    fq_policy_destroy(f->pol);
    return 0;
}

static enum fq_ovr_outcome put(fixture *f, const char *key, const char *val, uint64_t rev,
                               uint64_t epoch)
{
    char err[256];
    fq_ovr_kv kv = {.key = key, .value = val ? val : "", .len = val ? strlen(val) : 0,
                    .rev = rev, .epoch = epoch, .deleted = !val};
    return fq_ovr_on_kv(f->s, f->pol, &kv, err, sizeof err);
}

static uint32_t weight_of(fixture *f, const char *tenant)
{
    fq_policy_resolved pr;
    assert_int_equal(fq_policy_resolve(&pr, f->pol, tenant), FQ_OK);
    return pr.p.weight;
}

/* A value is put in force; its echo and older revisions change nothing. */
static void test_value_in_force_and_echo(void **state)
{
    fixture *f = *state;
    assert_int_equal(put(f, "acme", "{\"weight\":5}", 3, 1), FQ_OVR_CHANGED);
    assert_int_equal(weight_of(f, "acme"), 5);
    uint64_t rev = 0;
    const fq_tenant_entry *e = fq_ovr_find(f->s, "acme", &rev);
    assert_non_null(e);
    assert_int_equal(e->weight, 5);
    assert_int_equal(rev, 3);
    assert_int_equal(put(f, "acme", "{\"weight\":5}", 3, 1), FQ_OVR_SAME);
    assert_int_equal(put(f, "acme", "{\"weight\":9}", 2, 1), FQ_OVR_SAME);
    assert_int_equal(weight_of(f, "acme"), 5);
    /* A new watch delivers it again: equal, nothing changes. */
    assert_int_equal(put(f, "acme", "{\"weight\":5}", 3, 2), FQ_OVR_SAME);
    assert_int_equal(fq_ovr_in_force(f->s), 1);
}

/* An invalid value or key is refused whole; the record keeps the revision
 * the next compare-and-set expects. */
static void test_refusals(void **state)
{
    fixture *f = *state;
    char err[256];
    fq_ovr_kv bad_key = {.key = "no spaces", .value = "{\"weight\":2}", .len = 12, .rev = 1,
                         .epoch = 1};
    assert_int_equal(fq_ovr_on_kv(f->s, f->pol, &bad_key, err, sizeof err), FQ_OVR_REFUSED);
    assert_non_null(strstr(err, "tenant id"));
    assert_int_equal(put(f, "acme", "{\"weight\":4}", 2, 1), FQ_OVR_CHANGED);
    assert_int_equal(put(f, "acme", "{\"plan\":\"gold\"}", 5, 1), FQ_OVR_REFUSED);
    assert_int_equal(put(f, "acme", "{\"tenant\":\"other\",\"weight\":2}", 6, 1), FQ_OVR_REFUSED);
    assert_int_equal(weight_of(f, "acme"), 4);
    /* class weights must fit the classes configured (none here) */
    assert_int_equal(put(f, "acme", "{\"class_weights\":\"3,1\"}", 7, 1), FQ_OVR_REFUSED);
    fq_policy_set_nclasses(f->pol, 2);
    assert_int_equal(put(f, "acme", "{\"class_weights\":\"3,1\"}", 8, 1), FQ_OVR_CHANGED);
    fq_policy_resolved pr;
    assert_int_equal(fq_policy_resolve(&pr, f->pol, "acme"), FQ_OK);
    assert_int_equal(pr.p.class_weight[0], 3);
    fq_override_patch pt = {.tenant = "acme", .weight = 7, .set = FQ_OVR_WEIGHT};
    fq_ovr_write w;
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_OK);
    assert_true(w.changes);
    assert_int_equal(w.expect, 8);
    fq_policy_set_nclasses(f->pol, 0);
}

/* Issue 17's knobs in a bucket value anyone with write access may put:
 * out of range, of the wrong type, or past 32 bits, each refused whole
 * (the policy in force unchanged); in range, each in force over the
 * tenant's plan. */
static void test_knob_values(void **state)
{
    fixture *f = *state;
    static const char *const bad[] = {
        "{\"price_output\":0}",          "{\"price_input\":1000001}",
        "{\"price_cached\":-1}",         "{\"price_output\":4.5}",
        "{\"max_subtenants\":10001}",    "{\"max_subtenants\":-1}",
        "{\"tokens_per_minute\":4294967296}", "{\"tokens_per_minute\":1e300}",
        "{\"burst_in_flight\":\"8\"}",    "{\"burst_in_flight\":8,\"burst_in_flight\":9}",
        "{\"class_weights\":7}",          "{\"class_max_pending\":\"1,0\"}",
        "{\"class_max_pending\":\"-1,0\"}",
    };
    uint64_t rev = 20;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (put(f, "knobs", bad[i], rev++, 1) != FQ_OVR_REFUSED)
            fail_msg("bucket value %s put in force", bad[i]);
    fq_policy_resolved pr;
    assert_int_equal(fq_policy_resolve(&pr, f->pol, "knobs"), FQ_OK);
    assert_int_equal(pr.prices.output, 1);
    assert_int_equal(pr.p.max_subtenants, 0);
    assert_int_equal(pr.p.tokens_per_minute, 0);
    assert_int_equal(pr.p.burst_in_flight, 0);
    assert_int_equal(put(f, "knobs", "{\"price_input\":2,\"price_output\":8,"
                                     "\"price_cached\":1,\"max_subtenants\":5,"
                                     "\"tokens_per_minute\":6000,\"burst_in_flight\":4}",
                         rev++, 1), FQ_OVR_CHANGED);
    assert_int_equal(fq_policy_resolve(&pr, f->pol, "knobs"), FQ_OK);
    assert_int_equal(pr.prices.input, 2);
    assert_int_equal(pr.prices.output, 8);
    assert_int_equal(pr.prices.cached, 1);
    assert_int_equal(pr.p.max_subtenants, 5);
    assert_int_equal(pr.p.tokens_per_minute, 6000);
    assert_int_equal(pr.p.burst_in_flight, 4);
}

/* A change whose class weights do not fit the classes is refused before
 * anything is written: written, the bucket would hold an override no
 * proxy puts in force, and the next change, expecting no value, would be
 * refused as a race ("changed in the bucket meanwhile") until the watch
 * delivered it. */
static void test_plan_refuses_unfit_class_weights(void **state)
{
    fixture *f = *state;
    char err[256] = "";
    fq_override_patch pt = {.tenant = "acme", .set = FQ_OVR_CLASS_WEIGHTS};
    assert_int_equal(fq_class_weights_parse(&pt.class_weights, "3,2,1"), FQ_OK);
    fq_ovr_write w;
    fq_policy_set_nclasses(f->pol, 2);
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_EINVAL);
    assert_non_null(strstr(err, "class_weights"));
    assert_int_equal(fq_class_weights_parse(&pt.class_weights, "1, 1"), FQ_OK);
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_OK);
    assert_true(w.changes);
    assert_int_equal(w.expect, 0);
    assert_string_equal(w.value, "{\"class_weights\":\"1,1\"}");
    /* without classes, no weights fit */
    fq_policy_set_nclasses(f->pol, 0);
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_EINVAL);
    assert_int_equal(fq_ovr_records(f->s), 0);
}

/* A deleted key is forgotten once the watch delivers its deletion, so the
 * records do not grow with every key ever deleted. */
static void test_deleted_keys_forgotten(void **state)
{
    fixture *f = *state;
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "t%d", i);
        assert_int_equal(put(f, key, "{\"weight\":2}", (uint64_t)(2 * i + 1), 1), FQ_OVR_CHANGED);
        assert_int_equal(put(f, key, NULL, (uint64_t)(2 * i + 2), 1), FQ_OVR_CHANGED);
    }
    assert_int_equal(fq_ovr_records(f->s), 0);
    assert_int_equal(weight_of(f, "t7"), 1);
    /* Delete markers of keys never seen (a new watch reading a bucket that
     * held many) keep nothing either. */
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "t%d", i);
        assert_int_equal(put(f, key, NULL, (uint64_t)(2 * i + 2), 2), FQ_OVR_SAME);
    }
    assert_int_equal(fq_ovr_records(f->s), 0);
    /* A change of a forgotten key expects no value (create reads the
     * marker back). */
    char err[256];
    fq_override_patch pt = {.tenant = "t7", .weight = 3, .set = FQ_OVR_WEIGHT};
    fq_ovr_write w;
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_OK);
    assert_true(w.changes);
    assert_false(w.del);
    assert_int_equal(w.expect, 0);
    assert_string_equal(w.value, "{\"weight\":3}");
}

/* A write of ours is in force at once; a deletion's record stays until the
 * watch echoes it (its revision is what a change in between expects). */
static void test_writes(void **state)
{
    fixture *f = *state;
    char err[256];
    fq_override_patch pt = {.tenant = "acme", .plan = "pro", .set = FQ_OVR_PLAN};
    fq_ovr_write w;
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_OK);
    assert_true(w.changes);
    assert_int_equal(fq_ovr_stored(f->s, f->pol, &w, 10, err, sizeof err), FQ_OK);
    fq_policy_resolved pr;
    assert_int_equal(fq_policy_resolve(&pr, f->pol, "acme"), FQ_OK);
    assert_string_equal(pr.plan, "pro");
    assert_int_equal(put(f, "acme", "{\"plan\":\"pro\"}", 10, 1), FQ_OVR_SAME);
    /* The same again changes nothing: nothing to write. */
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_OK);
    assert_false(w.changes);
    /* Removing the plan empties the override: a delete expecting rev 10. */
    fq_override_patch rm = {.tenant = "acme", .removed = FQ_OVR_PLAN};
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &rm, err, sizeof err), FQ_OK);
    assert_true(w.changes && w.del);
    assert_int_equal(w.expect, 10);
    assert_int_equal(fq_ovr_stored(f->s, f->pol, &w, 11, err, sizeof err), FQ_OK);
    assert_null(fq_ovr_find(f->s, "acme", NULL));
    assert_int_equal(fq_ovr_records(f->s), 1);
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &pt, err, sizeof err), FQ_OK);
    assert_int_equal(w.expect, 11);
    assert_int_equal(put(f, "acme", NULL, 11, 1), FQ_OVR_SAME);
    assert_int_equal(fq_ovr_records(f->s), 0);
    /* A plan the config lacks is refused before anything is written. */
    fq_override_patch gold = {.tenant = "acme", .plan = "gold", .set = FQ_OVR_PLAN};
    assert_int_equal(fq_ovr_plan(&w, f->s, f->pol, &gold, err, sizeof err), FQ_EINVAL);
    assert_non_null(strstr(err, "gold"));
}

static void count_vanished(void *arg, const fq_tenant_entry *e, uint64_t rev)
{
    (void)rev;
    assert_true(fq_ovr_entry_empty(e));
    (*(int *)arg)++;
}

/* A new watch that no longer delivers a key: its override vanished. */
static void test_synced_drops_vanished(void **state)
{
    fixture *f = *state;
    assert_false(fq_ovr_synced(f->s));
    assert_int_equal(put(f, "a", "{\"weight\":2}", 1, 1), FQ_OVR_CHANGED);
    assert_int_equal(put(f, "b", "{\"weight\":3}", 2, 1), FQ_OVR_CHANGED);
    int n = 0;
    fq_ovr_on_synced(f->s, f->pol, 1, count_vanished, &n);
    assert_int_equal(n, 0);
    assert_true(fq_ovr_synced(f->s));
    assert_int_equal(put(f, "b", "{\"weight\":3}", 2, 2), FQ_OVR_SAME);
    fq_ovr_on_synced(f->s, f->pol, 2, count_vanished, &n);
    assert_int_equal(n, 1);
    assert_int_equal(weight_of(f, "a"), 1);
    assert_int_equal(weight_of(f, "b"), 3);
    assert_int_equal(fq_ovr_records(f->s), 1);
}

/* A reload keeps the overrides, unless one names a plan the new config
 * lacks. */
static void test_carry(void **state)
{
    fixture *f = *state;
    assert_int_equal(put(f, "acme", "{\"plan\":\"pro\"}", 1, 1), FQ_OVR_CHANGED);
    fq_policy *np = NULL;
    assert_int_equal(fq_policy_create(&np, "free", false, 0), FQ_OK);
    fq_plan free_plan = {.name = "free", .weight = 1}, pro = {.name = "pro", .weight = 2};
    assert_int_equal(fq_policy_set_plan(np, &free_plan), FQ_OK);
    char err[512] = "";
    assert_int_equal(fq_ovr_carry(f->s, np, "fairq_tenants", err, sizeof err), FQ_ENOTFOUND);
    assert_non_null(strstr(err, "fairq_tenants"));
    assert_int_equal(fq_policy_set_plan(np, &pro), FQ_OK);
    assert_int_equal(fq_ovr_carry(f->s, np, "fairq_tenants", err, sizeof err), FQ_OK);
    fq_policy_resolved pr;
    assert_int_equal(fq_policy_resolve(&pr, np, "acme"), FQ_OK);
    assert_int_equal(pr.p.weight, 2);
    fq_policy_destroy(np);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_value_in_force_and_echo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_knob_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deleted_keys_forgotten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_refuses_unfit_class_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_synced_drops_vanished, setup, teardown),
        cmocka_unit_test_setup_teardown(test_carry, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
