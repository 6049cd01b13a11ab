/* it_proxy_subtenants.c -- tenants within tenants through the live proxy: a colleague's first run goes at its tenant's next turn behind a flooding sub-tenant, splitting into sub-tenants gains a tenant nothing, the dispatch carries Fair-Subtenant, bad claims are refused with their reason, and more sub-tenants than the cap share one, never a metrics label. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "opstest.h"
#include "proxyfixture.h"

/* No workers and one slot: the test completes each run, so the order of
 * dispatch is the scheduler's alone. Estimates of a quantum: one run a
 * tenant's turn. Plan free has no sub-tenants. */
static const char yaml[] =
    "scheduler:\n  default_plan: team\n"
    "window: {max_in_flight: 1}\n"
    "plans:\n  - {name: team, weight: 1, max_subtenants: 16}\n"
    "  - {name: free, weight: 1}\n"
    "tenants:\n  - {id: plain, plan: free}\n"
    "  - {id: capped, plan: team, max_subtenants: 2}\n";

static int setup(void **state)
{
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    return pf_setup(state, yaml, NULL);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* Submit run tenant/id as sub-tenant sub ("" none), by header or body. */
static void submit(pf_fixture *f, const char *tenant, const char *id, const char *sub,
                   bool header)
{
    char body[160];
    int n = snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"est_tokens\":1000%s%s%s}", id,
                     sub[0] && !header ? ",\"subtenant\":\"" : "", sub[0] && !header ? sub : "",
                     sub[0] && !header ? "\"" : "");
    const char *hdrs[] = {"Fair-Subtenant", sub, NULL};
    assert_int_equal(pt_submit(&f->c, tenant, body, (size_t)n, sub[0] && header ? hdrs : NULL),
                     0);
}

static long tenant_num(pf_fixture *f, const char *tenant, const char *key)
{
    char req[64];
    snprintf(req, sizeof req, "{\"tenant\":\"%s\"}", tenant);
    cJSON *whole = pf_stats(f, req, NULL);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(whole, "tenants"), 0);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, key);
    long v = cJSON_IsNumber(n) ? (long)n->valuedouble : -1;
    cJSON_Delete(whole);
    return v;
}

/* Poll until tenant's stats key reaches want, up to 10 s; its last value. */
static long wait_for(pf_fixture *f, const char *tenant, const char *key, long want)
{
    long v = -1;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(20))
        if ((v = tenant_num(f, tenant, key)) == want)
            break;
    return v;
}

/* The n-th dispatch (from 1), once it is stored: *out is malloc'd. */
static pt_msg *dispatch_nth(pf_fixture *f, size_t n, pt_msg **all, size_t *count)
{
    pf_wait_msgs(f, "FAIR_DISPATCH", n);
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", all, count), 0);
    assert_true(*count >= n);
    return &(*all)[n - 1];
}

/* Complete the n-th dispatch at its estimate: its slot goes to the next. */
static void complete_nth(pf_fixture *f, size_t n, char *run_id, size_t cap, char *sub,
                         size_t subcap)
{
    pt_msg *all = NULL;
    size_t count = 0;
    pt_msg *m = dispatch_nth(f, n, &all, &count);
    snprintf(run_id, cap, "%s", m->run_id);
    if (sub)
        snprintf(sub, subcap, "%s", m->subtenant);
    char subject[96], body[200];
    snprintf(subject, sizeof subject, "fair.done.%s", m->tenant);
    snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"actual_tokens\":%u,\"status\":\"ok\"}",
             m->run_id, m->est);
    pt_msgs_free(all, count);
    pf_publish(f, subject, body);
}

/* One user of big floods 30 runs; a colleague's first run, queued behind
 * them, leaves at big's next turn: the next dispatch, not the 30th. On
 * plan free (no sub-tenants) the same claim changes nothing: FIFO. Each
 * dispatch carries its claim in Fair-Subtenant, from a header or a body. */
static void test_colleague_not_behind_flood(void **state)
{
    pf_fixture *f = *state;
    char id[32], run[140], sub[80];
    for (int i = 0; i < 30; i++) {
        snprintf(id, sizeof id, "flood-%d", i);
        submit(f, "big", id, "flood", i % 2);
    }
    assert_int_equal(wait_for(f, "big", "queued_runs", 29), 29);
    submit(f, "big", "colleague-0", "colleague", false);
    assert_int_equal(wait_for(f, "big", "queued_runs", 30), 30);
    assert_int_equal(tenant_num(f, "big", "subtenants"), 2);
    assert_int_equal(tenant_num(f, "big", "active_subtenants"), 2);
    complete_nth(f, 1, run, sizeof run, sub, sizeof sub);
    assert_string_equal(run, "flood-0");
    assert_string_equal(sub, "flood");
    complete_nth(f, 2, run, sizeof run, sub, sizeof sub);
    assert_string_equal(run, "colleague-0");
    assert_string_equal(sub, "colleague");
    complete_nth(f, 3, run, sizeof run, sub, sizeof sub);
    assert_string_equal(run, "flood-1");
    assert_string_equal(sub, "flood");      /* from its header */
    assert_int_equal(wait_for(f, "big", "queued_runs", 27), 27);
    /* stats name the sub-tenants with most queued, a few, for this tenant alone */
    cJSON *whole = pf_stats(f, "{\"tenant\":\"big\"}", NULL);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(whole, "tenants"), 0);
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(t, "top_subtenants");
    assert_int_equal(cJSON_GetArraySize(top), 1);
    const cJSON *first = cJSON_GetArrayItem(top, 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(first, "subtenant")->valuestring,
                        "flood");
    assert_int_equal(pf_num(first, "queued_runs"), 27);
    cJSON_Delete(whole);
    /* explain: a queued run of the flood, and where its sub-tenant stands */
    char *r = pt_request(&f->c, "fair.explain.big", "{\"run_id\":\"flood-9\"}", NULL);
    assert_non_null(r);
    cJSON *j = cJSON_Parse(r);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "subtenant")->valuestring, "flood");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(j, "subtenant_position");
    assert_int_equal(pf_num(pos, "queued_runs"), 27);
    assert_int_equal(pf_num(pos, "runs_ahead_at_most"), 26);
    cJSON_Delete(j);
    free(r);

    /* plain's plan has none: its colleague waits its turn in submit order */
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "p-flood-%d", i);
        submit(f, "plain", id, "flood", false);
    }
    submit(f, "plain", "p-colleague-0", "colleague", true);
    assert_int_equal(wait_for(f, "plain", "queued_runs", 4), 4);
    assert_int_equal(tenant_num(f, "plain", "subtenants"), -1);
    /* big's 27 and plain's 4 share the slot in turns: plain's four in order */
    const char *want[] = {"p-flood-0", "p-flood-1", "p-flood-2", "p-colleague-0"};
    size_t k = 0;
    for (size_t n = 4; k < 4; n++) {
        complete_nth(f, n, run, sizeof run, sub, sizeof sub);
        if (strncmp(run, "p-", 2) == 0) {
            assert_string_equal(run, want[k]);
            k++;
        }
    }
    assert_string_equal(sub, "colleague");  /* carried all the same */
}

/* many splits into 8 users, one keeps to 1: with both backlogged, the
 * slot goes to each in turn, as without sub-tenants. */
static void test_splitting_gains_nothing(void **state)
{
    pf_fixture *f = *state;
    char id[32], sub[16], run[140];
    for (int i = 0; i < 16; i++) {
        snprintf(id, sizeof id, "m-%d", i);
        snprintf(sub, sizeof sub, "u%d", i % 8);
        submit(f, "many", id, sub, i % 2);
        snprintf(id, sizeof id, "o-%d", i);
        submit(f, "one", id, "solo", false);
    }
    long queued = 0;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end && queued != 31;
         nt_sleep_ms(20))
        queued = tenant_num(f, "many", "queued_runs") + tenant_num(f, "one", "queued_runs");
    assert_int_equal(queued, 31);
    assert_int_equal(tenant_num(f, "many", "subtenants"), 8);
    int got_many = 0;
    for (size_t n = 1; n <= 20; n++) {
        complete_nth(f, n, run, sizeof run, NULL, 0);
        got_many += run[0] == 'm';
    }
    /* a turn each: 10 and 10, give or take which went first */
    assert_true(got_many >= 9 && got_many <= 11);
}

/* Bad claims are refused, each with its reason, and counted. */
static void test_bad_claims_refused(void **state)
{
    pf_fixture *f = *state;
    const char *hdr_bad[] = {"Fair-Subtenant", "two words", NULL};
    const char *b1 = "{\"run_id\":\"x-1\"}";
    assert_int_equal(pt_submit(&f->c, "big", b1, strlen(b1), hdr_bad), 0);
    const char *b2 = "{\"run_id\":\"x-2\",\"subtenant\":\"12345678901234567890123456789012345"
                     "678901234567890123456789012345\"}";
    assert_int_equal(pt_submit(&f->c, "big", b2, strlen(b2), NULL), 0);
    const char *hdr_other[] = {"Fair-Subtenant", "bob", NULL};
    const char *b3 = "{\"run_id\":\"x-3\",\"subtenant\":\"alice\"}";
    assert_int_equal(pt_submit(&f->c, "big", b3, strlen(b3), hdr_other), 0);
    pf_wait_msgs(f, "FAIR_REJECTED", 3);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &n), 0);
    assert_int_equal(n, 3);
    const char *want[] = {"invalid: Fair-Subtenant header: ", "invalid: subtenant: ",
                          "invalid: Fair-Subtenant header: names another sub-tenant than the "
                          "body's subtenant field"};
    for (size_t i = 0; i < 3; i++) {
        if (strncmp(m[i].error, want[i], strlen(want[i])) != 0)
            fail_msg("refusal %zu: %s", i, m[i].error);
    }
    pt_msgs_free(m, n);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "subtenant_refused"), 3);
    cJSON_Delete(j);
    assert_int_equal(pt_stream_last(&f->c, "FAIR_DISPATCH"), 0);
    /* the cap in force, from the plan, and from an override */
    char *r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"big\"}", NULL);
    assert_non_null(r);
    j = cJSON_Parse(r);
    assert_int_equal(pf_num(j, "max_subtenants"), 16);
    cJSON_Delete(j);
    free(r);
    r = pt_request(&f->c, "fair.admin.tenant.set", "{\"tenant\":\"big\",\"max_subtenants\":2}",
                   NULL);
    assert_non_null(r);
    j = cJSON_Parse(r);
    assert_int_equal(pf_num(j, "max_subtenants"), 2);
    cJSON_Delete(j);
    free(r);
}

/* A tenant naming 40 sub-tenants past its cap of 2: none is refused (the
 * claim cannot enlarge its share, so there is nothing to refuse), the
 * ones past the cap share one overflow sub-tenant, so what the tenant
 * costs stays bounded, and no sub-tenant name becomes a metrics label.
 * Another tenant keeps its turns. */
static void test_past_the_cap_bounded(void **state)
{
    pf_fixture *f = *state;
    char id[32], sub[32], run[140];
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof id, "c-%d", i);
        snprintf(sub, sizeof sub, "user-%d", i);
        submit(f, "capped", id, sub, i % 2);
    }
    assert_int_equal(wait_for(f, "capped", "queued_runs", 39), 39);
    submit(f, "one", "o-0", "solo", false);
    assert_int_equal(wait_for(f, "one", "queued_runs", 1), 1);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "rejected"), 0);
    assert_int_equal(pf_overall(j, "subtenant_refused"), 0);
    /* but counted: the 38 runs naming one past the first two */
    long over = pf_overall(j, "subtenant_overflow");
    if (over != 38)
        fail_msg("subtenant_overflow %ld, not the 38 runs past the cap of 2", over);
    cJSON_Delete(j);
    /* known: the two of the cap and the overflow one, not 40 */
    long known = tenant_num(f, "capped", "subtenants");
    if (known < 1 || known > 3)
        fail_msg("capped knows %ld sub-tenants with a cap of 2", known);
    cJSON *whole = pf_stats(f, "{\"tenant\":\"capped\"}", NULL);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(whole, "tenants"), 0);
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(t, "top_subtenants");
    long overflow = -1;
    for (int i = 0; i < cJSON_GetArraySize(top); i++) {
        const cJSON *e = cJSON_GetArrayItem(top, i);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "overflow")))
            overflow = pf_num(e, "queued_runs");
    }
    cJSON_Delete(whole);
    assert_true(overflow >= 37);
    /* explain places a run past the cap in the overflow sub-tenant */
    char *r = pt_request(&f->c, "fair.explain.capped", "{\"run_id\":\"c-30\"}", NULL);
    assert_non_null(r);
    j = cJSON_Parse(r);
    free(r);
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(j, "subtenant_position");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pos, "overflow")));
    cJSON_Delete(j);
    /* the scrape has capped's series, and no sub-tenant in it */
    int port = ot_http_port(&f->px, 5000), status = 0;
    assert_true(port > 0);
    char *body = NULL;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(100)) {
        free(body);
        body = NULL;
        assert_int_equal(ot_http_get(port, "/metrics", &status, &body), 0);
        assert_int_equal(status, 200);
        if (strstr(body, "fairq_tenant_queued_runs{tenant=\"capped\""))
            break;
    }
    if (!strstr(body, "fairq_tenant_queued_runs{tenant=\"capped\""))
        fail_msg("no series of capped in the scrape:\n%.2000s", body);
    assert_null(strstr(body, "user-"));
    assert_null(strstr(body, "solo"));
    assert_null(strstr(body, "subtenant=\""));
    free(body);
    /* one's run goes within capped's next turn or two, not behind its 39 */
    bool ones = false;
    for (size_t n = 1; n <= 3 && !ones; n++) {
        complete_nth(f, n, run, sizeof run, NULL, 0);
        ones = strcmp(run, "o-0") == 0;
    }
    assert_true(ones);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_colleague_not_behind_flood, setup, teardown),
        cmocka_unit_test_setup_teardown(test_splitting_gains_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_claims_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_past_the_cap_bounded, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
