/* it_proxy_storage.c -- per-tenant storage bounds: one tenant cannot fill FAIR_SUBMIT or FAIR_REJECTED for the others. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxyfixture.h"

/*
 * Each tenant is one subject of FAIR_SUBMIT and of FAIR_REJECTED, and the
 * proxy creates both with a per-subject limit from streams.*: FAIR_SUBMIT
 * refuses a publish past it (the producer's PubAck is an error), while
 * FAIR_REJECTED drops the tenant's oldest refusals. A refusal that JetStream
 * will not store at all is acked and counted, not retried for ever.
 */

#define BOUND 5
#define FLOOD 20
#define JS_LIMIT 10077      /* JetStream: a stream limit refused the publish */

/* One run in flight at a time, FAIR_SUBMIT holding BOUND runs a tenant,
 * FAIR_REJECTED keeping a tenant's 3 newest refusals. */
static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 1\n"
    "streams:\n  submit_max_msgs_per_tenant: 5\n  rejected_max_msgs_per_tenant: 3\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = 4, .service_ms = 1};
    return pf_setup(state, yaml, &wo);
}

static int teardown(void **state)
{
    pf_teardown(state, true);
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

/* Publish body to <submit>.<tenant> and wait for the PubAck: its JetStream
 * error code, 0 when stored. */
static int submit(pf_fixture *f, const char *tenant, const char *body)
{
    char subj[128];
    snprintf(subj, sizeof subj, "fair.submit.%s", tenant);
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_Publish(&pa, f->c.js, subj, body, (int)strlen(body), NULL, &jerr);
    jsPubAck_Destroy(pa);
    if (s != NATS_OK && jerr == 0)
        fail_msg("publish to %s: %s", subj, natsStatus_GetText(s));
    return s == NATS_OK ? 0 : (int)jerr;
}

/* Wait until the proxy took every submit (FAIR_SUBMIT empty), up to 10 s. */
static void wait_submit_empty(pf_fixture *f)
{
    long long end = nt_now_ms() + 10000;
    while (stream_msgs(f, "FAIR_SUBMIT") != 0 && nt_now_ms() < end)
        nt_sleep_ms(20);
    assert_int_equal(stream_msgs(f, "FAIR_SUBMIT"), 0);
}

/* The streams are made as the config says. */
static void test_streams_carry_the_bounds(void **state)
{
    pf_fixture *f = *state;
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_SUBMIT", NULL, NULL), NATS_OK);
    assert_int_equal(si->Config->MaxMsgsPerSubject, BOUND);
    assert_int_equal(si->Config->MaxBytes, 1 << 30);
    assert_int_equal(si->Config->Discard, js_DiscardNew);
    assert_true(si->Config->DiscardNewPerSubject);
    jsStreamInfo_Destroy(si);
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_REJECTED", NULL, NULL), NATS_OK);
    assert_int_equal(si->Config->MaxMsgsPerSubject, 3);
    assert_int_equal(si->Config->MaxBytes, 256 << 20);
    assert_int_equal(si->Config->Discard, js_DiscardOld);
    jsStreamInfo_Destroy(si);
    assert_int_equal(pt_log_count(&f->px, "stream differs"), 0);
}

/* A tenant whose runs wait (workers busy) floods past its bound: the server
 * refuses the excess at the PubAck, where the producer sees it, and another
 * tenant's runs are stored and dispatched all the same. */
static void test_submit_flood_refused_at_puback(void **state)
{
    pf_fixture *f = *state;
    pt_worker_hold(f->w, true);
    int stored = 0, refused = 0;
    for (int i = 0; i < FLOOD; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"run_id\":\"loud-%d\"}", i);
        int jerr = submit(f, "loud", body);
        if (jerr == 0) {
            stored++;
        } else {
            assert_int_equal(jerr, JS_LIMIT);
            refused++;
        }
    }
    fprintf(stderr, "flood of %d: %d stored, %d refused at the PubAck\n", FLOOD, stored,
            refused);
    /* The bound, plus what the proxy dispatched meanwhile (one slot). */
    assert_true(stored >= BOUND && stored <= BOUND + 1);
    assert_int_equal(refused, FLOOD - stored);
    for (int i = 0; i < 3; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"run_id\":\"quiet-%d\"}", i);
        assert_int_equal(submit(f, "quiet", body), 0);
    }
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)stored + 3, 30000), 0);
    int quiet = 0;
    for (size_t i = 0; i < pt_worker_received(f->w); i++)
        quiet += strcmp(pt_worker_seen(f->w, i).tenant, "quiet") == 0;
    assert_int_equal(quiet, 3);
    wait_submit_empty(f);
}

/* A tenant whose every run is refused floods FAIR_REJECTED past its bound:
 * its oldest refusals are dropped, every submit is acked, nothing stalls. */
static void test_refusal_flood_keeps_the_newest(void **state)
{
    pf_fixture *f = *state;
    for (int i = 0; i < FLOOD; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"run_id\":\"bad-%d\",\"est_tokens\":0}", i);
        assert_int_equal(submit(f, "bad", body), 0);
        wait_submit_empty(f);   /* within FAIR_SUBMIT's bound: one at a time */
    }
    assert_int_equal(submit(f, "good", "{\"run_id\":\"good-0\"}"), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 1, 10000), 0);
    wait_submit_empty(f);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &n), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        char want[64];
        snprintf(want, sizeof want, "\"bad-%zu\"", FLOOD - n + i);
        assert_non_null(strstr(m[i].data, want));
    }
    pt_msgs_free(m, n);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "refusals_unstored"), 0);
    cJSON_Delete(j);
}

/* An operator made FAIR_REJECTED refuse past its per-subject limit: the
 * proxy's refusals past it are refused in turn. A refusal only informs:
 * the runs are acked all the same and counted, and the others go on. */
static void test_refused_refusals_are_acked(void **state)
{
    pf_fixture *f = *state;
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    assert_int_equal(js_DeleteStream(f->c.js, "FAIR_REJECTED", NULL, NULL), NATS_OK);
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    const char *subj[] = {"fair.rejected.*"};
    sc.Name = "FAIR_REJECTED";
    sc.Subjects = subj;
    sc.SubjectsLen = 1;
    sc.MaxMsgsPerSubject = 3;
    sc.Discard = js_DiscardNew;
    sc.DiscardNewPerSubject = true;
    assert_int_equal(js_AddStream(NULL, f->c.js, &sc, NULL, NULL), NATS_OK);
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    assert_true(pt_log_count(&f->px, "stream differs") >= 1);

    for (int i = 0; i < FLOOD; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"run_id\":\"bad-%d\",\"est_tokens\":0}", i);
        assert_int_equal(submit(f, "bad", body), 0);
        wait_submit_empty(f);   /* within FAIR_SUBMIT's bound: one at a time */
    }
    assert_int_equal(submit(f, "good", "{\"run_id\":\"good-0\"}"), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 1, 10000), 0);
    wait_submit_empty(f);
    assert_int_equal(stream_msgs(f, "FAIR_REJECTED"), 3);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "refusals_unstored"), FLOOD - 3);
    cJSON_Delete(j);
    assert_true(pt_log_count(&f->px, "a refusal was not stored") >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_streams_carry_the_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_submit_flood_refused_at_puback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusal_flood_keeps_the_newest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_refusals_are_acked, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
