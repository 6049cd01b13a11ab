/* it_proxy_fence_done.c -- a completion that reaches a new leader before its run is in flight there is reconciled once, not lost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>

#include "proxyfixture.h"

/*
 * What a leader fenced mid-turn leaves behind, set up by hand while no
 * proxy runs: runs r-0 and r-1 of tenant t unacked in FAIR_SUBMIT, and
 * r-1's dispatch stored in FAIR_DISPATCH under Nats-Msg-Id t/r-1 (its
 * journal batch never stored, so no flight record). The next leader has
 * one window slot, which r-0 takes; while r-1 is queued behind it, a
 * worker's completion of r-1 comes. Once r-0 completes, r-1's dispatch is
 * de-duplicated, so no worker completes r-1 again: the leader refused r-1's
 * completion at once as "queued, not dispatched yet", lost it, and held
 * r-1's slot until run_timeout (docs/protocol.md, sections 3 and 8).
 */

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 1\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    return pf_setup(state, yaml, NULL);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

static uint64_t stream_msgs(pf_fixture *f, const char *stream)
{
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, stream, NULL, NULL), NATS_OK);
    uint64_t n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
}

/* Done records of run_id in the journal. */
static int done_records(pf_fixture *f, const char *run_id)
{
    pt_msg *m = NULL;
    size_t k = 0;
    int n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIRQ_RUNS", &m, &k), 0);
    for (size_t i = 0; i < k; i++) {
        cJSON *j = cJSON_ParseWithLength(m[i].data, m[i].len);
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "entries")) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "st");
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "r");
            n += cJSON_IsString(st) && strcmp(st->valuestring, "done") == 0 &&
                 cJSON_IsString(r) && strcmp(r->valuestring, run_id) == 0;
        }
        cJSON_Delete(j);
    }
    pt_msgs_free(m, k);
    return n;
}

/* The stats reply once overall.a + overall.b is at least want, or after 20 s. */
static cJSON *stats_when(pf_fixture *f, const char *a, const char *b, long want)
{
    long long end = nt_now_ms() + 20000;
    for (;;) {
        cJSON *j = pf_stats(f, "", NULL);
        if (pf_overall(j, a) + pf_overall(j, b) >= want || nt_now_ms() > end)
            return j;
        cJSON_Delete(j);
        nt_sleep_ms(100);
    }
}

static void complete(pf_fixture *f, const char *run_id)
{
    char body[128];
    snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"actual_tokens\":7,\"status\":\"ok\"}",
             run_id);
    pf_publish(f, "fair.done.t", body);
}

static void test_completion_before_redispatch(void **state)
{
    pf_fixture *f = *state;
    /* The first proxy made the streams; it leaves, releasing the lease. */
    assert_int_equal(pt_proxy_stop(&f->px), 0);

    const char r0[] = "{\"run_id\":\"r-0\"}", r1[] = "{\"run_id\":\"r-1\"}";
    const char *const dh[] = {"Nats-Msg-Id", "t/r-1", "Fair-Tenant", "t", "Fair-Run-Id", "r-1",
                              "Fair-Est-Tokens", "1", NULL};
    assert_int_equal(pt_submit(&f->c, "t", r0, strlen(r0), NULL), 0);
    assert_int_equal(pt_submit(&f->c, "t", r1, strlen(r1), NULL), 0);
    assert_int_equal(pt_submit(&f->c, "=fair.dispatch", r1, strlen(r1), dh), 0);

    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    /* r-0 holds the one slot, r-1 is queued: r-1's completion comes, and
     * is looked at (deferred; refused before the fix); then r-0 completes. */
    cJSON *j = stats_when(f, "queued_runs", "in_flight", 2);
    assert_int_equal(pf_overall(j, "queued_runs"), 1);
    assert_int_equal(pf_overall(j, "in_flight"), 1);
    cJSON_Delete(j);
    complete(f, "r-1");
    cJSON_Delete(stats_when(f, "completions_deferred", "completions_invalid", 1));
    complete(f, "r-0");
    j = stats_when(f, "completions", "completions_unheld", 2);
    /* Both reconciled once, against runs in flight, and their slots freed. */
    assert_int_equal(pf_overall(j, "completions_invalid"), 0);
    assert_int_equal(pf_overall(j, "completions_unknown"), 0);
    assert_int_equal(pf_overall(j, "completions_unheld"), 0);
    assert_int_equal(pf_overall(j, "completions"), 2);
    assert_true(pf_overall(j, "completions_deferred") >= 1);
    assert_int_equal(pf_overall(j, "in_flight"), 0);
    assert_int_equal(pf_overall(j, "queued_runs"), 0);
    cJSON_Delete(j);
    j = pf_stats(f, "{\"tenant\":\"t\"}", NULL);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    assert_non_null(t);
    assert_int_equal(pf_num(t, "completed_runs"), 2);
    cJSON_Delete(j);
    /* Each stored once: r-1's second dispatch was de-duplicated. */
    pf_assert_each_dispatched_once(f, 2);
    /* One done record each; nothing left unacked. */
    long long end = nt_now_ms() + 10000;
    while ((done_records(f, "r-1") != 1 || done_records(f, "r-0") != 1 ||
            stream_msgs(f, "FAIR_DONE") || stream_msgs(f, "FAIR_SUBMIT")) && nt_now_ms() < end)
        nt_sleep_ms(100);
    assert_int_equal(done_records(f, "r-0"), 1);
    assert_int_equal(done_records(f, "r-1"), 1);
    assert_int_equal(stream_msgs(f, "FAIR_DONE"), 0);
    assert_int_equal(stream_msgs(f, "FAIR_SUBMIT"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_completion_before_redispatch, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
