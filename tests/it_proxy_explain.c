/* it_proxy_explain.c -- fair.explain.<tenant> through the live proxy: where a run is and what holds it, a queued run's sub-tenant with its body not kept, hostile requests refused with a reason, requests without a reply counted, a burst answered busy. */
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

/* No workers: dispatched runs stay in flight until a test completes them;
 * a's cap of 1 holds its other runs. */
static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "plans:\n  - {name: free, weight: 1, max_in_flight: 1}\n";

static int setup(void **state) { return pf_setup(state, yaml, NULL); }

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* The explain reply of tenant for body, parsed. */
static cJSON *explain(pf_fixture *f, const char *tenant, const char *body)
{
    char subject[128];
    snprintf(subject, sizeof subject, "fair.explain.%s", tenant);
    char *r = pt_request(&f->c, subject, body, NULL);
    assert_non_null(r);
    cJSON *j = cJSON_Parse(r);
    assert_non_null(j);
    free(r);
    return j;
}

static const char *str(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

/* Where run is, asked until it is want (up to 10 s). */
static void wait_where(pf_fixture *f, const char *run, const char *want)
{
    char body[96], where[32] = "";
    snprintf(body, sizeof body, "{\"run_id\":\"%s\"}", run);
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(20)) {
        cJSON *j = explain(f, "a", body);
        snprintf(where, sizeof where, "%s", str(j, "where"));
        cJSON_Delete(j);
        if (strcmp(where, want) == 0)
            break;
    }
    assert_string_equal(where, want);
}

/* A run in flight, one queued behind its tenant's cap, one unknown, one
 * done; the tenant as a whole; a tenant fairq never saw. */
static void test_where_and_why(void **state)
{
    pf_fixture *f = *state;
    for (int i = 0; i < 3; i++) {
        char body[64];
        int n = snprintf(body, sizeof body, "{\"run_id\":\"a-%d\",\"est_tokens\":100}", i);
        assert_int_equal(pt_submit(&f->c, "a", body, (size_t)n, NULL), 0);
    }
    wait_where(f, "a-0", "in_flight");
    wait_where(f, "a-2", "queued");
    cJSON *j = explain(f, "a", "{\"run_id\":\"a-2\"}");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    assert_string_equal(str(j, "state"), "capped");
    assert_int_equal(pf_num(j, "queued_runs"), 2);
    assert_int_equal(pf_num(j, "runs_ahead_at_most"), 1);
    assert_int_equal(pf_num(j, "est_tokens"), 100);
    assert_int_equal(pf_num(j, "in_flight"), 1);
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(j, "cap");
    assert_int_equal(pf_num(cap, "in_force"), 1);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cap, "at_cap")));
    assert_true(pf_num(j, "tokens_ahead_at_most") >= 200);
    assert_non_null(strstr(str(j, "why"), "its cap (max_in_flight)"));
    cJSON_Delete(j);

    j = explain(f, "a", "{\"run_id\":\"nope\"}");
    assert_string_equal(str(j, "where"), "unknown");
    cJSON_Delete(j);
    j = explain(f, "a", "");
    assert_int_equal(pf_num(j, "runs_ahead_at_most"), 2);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(j, "estimated_wait_ms"));
    cJSON_Delete(j);
    j = explain(f, "never", "  ");
    assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "known")));
    assert_non_null(strstr(str(j, "why"), "nothing holds the tenant"));
    cJSON_Delete(j);

    /* fairq-admin prints the same reply */
    char *out = NULL;
    assert_int_equal(ot_admin(f->srv, "explain", "a", &out), 0);
    assert_non_null(out);
    j = cJSON_Parse(out);
    if (!j)
        fail_msg("fairq-admin explain a printed: %s", out);
    free(out);
    assert_string_equal(str(j, "tenant"), "a");
    assert_string_equal(str(j, "state"), "capped");
    assert_int_equal(pf_num(j, "runs_ahead_at_most"), 2);
    assert_non_null(strstr(str(j, "why"), "its cap (max_in_flight)"));
    cJSON_Delete(j);

    /* a-0 completes: a-1 goes, a-0 is done. */
    pf_publish(f, "fair.done.a", "{\"run_id\":\"a-0\",\"actual_tokens\":100,\"status\":\"ok\"}");
    wait_where(f, "a-1", "in_flight");
    wait_where(f, "a-0", "done");
}

/* Hostile requests get a reason; requests without a reply are dropped and
 * counted; a burst past the rate is answered busy, not served. */
static void test_hostile_and_bounded(void **state)
{
    pf_fixture *f = *state;
    static const struct {
        const char *tenant, *body, *why;
    } bad[] = {
        {"a", "{\"run_id\":\"a b\"}", "run_id: must be"},
        {"a", "{\"run_id\":7}", "run_id: must be"},
        {"a", "{\"run_id\":\"r\xff\xfe\"}", "(invalid UTF-8)"},
        {"a", "{\"run_id\":\"\\u0000x\"}", ""},
        {"a", "{\"run_id\":\"a\",\"run_id\":\"b\"}", "run_id: given twice"},
        {"a", "{\"tenant\":\"b\"}", "may hold only \"run_id\""},
        {"a", "[1]", "must be empty or a JSON object"},
        {"_invalid", "", "names no valid tenant"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = explain(f, bad[i].tenant, bad[i].body);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")))
            fail_msg("%s answered, not refused", bad[i].body);
        if (!strstr(str(j, "error"), bad[i].why) || !str(j, "error")[0])
            fail_msg("%s refused as: %s", bad[i].body, str(j, "error"));
        cJSON_Delete(j);
    }
    /* each counted (the subject's too), none as a request too long */
    long invalid = 0;
    for (long long end = nt_now_ms() + 10000;
         nt_now_ms() < end && invalid != (long)(sizeof bad / sizeof bad[0]); nt_sleep_ms(20)) {
        cJSON *s = pf_stats(f, "{\"limit\":0}", NULL);
        invalid = pf_overall(s, "admin_requests_invalid");
        cJSON_Delete(s);
    }
    assert_int_equal(invalid, (long)(sizeof bad / sizeof bad[0]));
    char *big = malloc(5001);
    memset(big, ' ', 5000);
    big[5000] = '\0';
    cJSON *j = explain(f, "a", big);
    assert_non_null(strstr(str(j, "error"), "at most 4096 bytes"));
    cJSON_Delete(j);
    free(big);

    for (int i = 0; i < 30; i++)
        assert_int_equal(natsConnection_PublishString(f->c.nc, "fair.explain.a", ""), NATS_OK);
    assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
    long dropped = 0;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end && dropped < 30; nt_sleep_ms(20)) {
        cJSON *s = pf_stats(f, "{\"limit\":0}", NULL);
        dropped = pf_overall(s, "admin_requests_no_reply");
        cJSON_Delete(s);
    }
    assert_int_equal(dropped, 30);

    /* 40 at once, past a tenant's burst of 3: the rest are busy, each
     * answered. */
    natsInbox *inbox = NULL;
    natsSubscription *sub = NULL;
    assert_int_equal(natsInbox_Create(&inbox), NATS_OK);
    assert_int_equal(natsConnection_SubscribeSync(&sub, f->c.nc, inbox), NATS_OK);
    for (int i = 0; i < 40; i++)
        assert_int_equal(natsConnection_PublishRequestString(f->c.nc, "fair.explain.a", inbox,
                                                             ""), NATS_OK);
    assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
    int ok = 0, busy = 0;
    for (int i = 0; i < 40; i++) {
        natsMsg *m = NULL;
        assert_int_equal(natsSubscription_NextMsg(&m, sub, 10000), NATS_OK);
        const char *d = natsMsg_GetData(m);
        ok += strncmp(d, "{\"ok\":true", 10) == 0;
        busy += strncmp(d, "{\"ok\":false,\"busy\":true,", 24) == 0;
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(inbox);
    assert_int_equal(ok + busy, 40);
    assert_true(ok >= 3);
    assert_true(busy >= 1);
}

/* Bodies not kept (max_buffered_bytes: 1, every run held index only): a
 * queued run's sub-tenant is found from its place in the scheduler. */
static int setup_index_only(void **state)
{
    return pf_setup(state,
                    "scheduler:\n  default_plan: team\n"
                    "plans:\n  - {name: team, weight: 1, max_in_flight: 1, max_subtenants: 1}\n"
                    "limits:\n  max_buffered_bytes: 1\n",
                    NULL);
}

static void test_subtenant_of_run_not_kept(void **state)
{
    pf_fixture *f = *state;
    static const char *const subs[] = {"alice", "alice", "", "bob"};   /* bob: past the cap */
    for (int i = 0; i < 4; i++) {
        char body[64];
        int n = snprintf(body, sizeof body, "{\"run_id\":\"s-%d\",\"est_tokens\":100}", i);
        const char *hdrs[] = {"Fair-Subtenant", subs[i], NULL};
        assert_int_equal(pt_submit(&f->c, "a", body, (size_t)n, subs[i][0] ? hdrs : NULL), 0);
    }
    wait_where(f, "s-0", "in_flight");
    wait_where(f, "s-3", "queued");
    cJSON *s = pf_stats(f, "{\"limit\":0}", NULL);
    assert_true(pf_overall(s, "index_only_runs") >= 3);     /* no body, no claim kept */
    cJSON_Delete(s);
    cJSON *j = explain(f, "a", "{\"run_id\":\"s-1\"}");
    assert_string_equal(str(j, "subtenant"), "alice");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(j, "subtenant_position");
    assert_non_null(pos);
    assert_int_equal(pf_num(pos, "queued_runs"), 1);
    cJSON_Delete(j);
    j = explain(f, "a", "{\"run_id\":\"s-3\"}");     /* in the overflow one: no name */
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "subtenant"));
    pos = cJSON_GetObjectItemCaseSensitive(j, "subtenant_position");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pos, "overflow")));
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_where_and_why, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_and_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subtenant_of_run_not_kept, setup_index_only,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
