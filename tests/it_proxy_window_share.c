/* it_proxy_window_share.c -- window.share end to end: the proxy's heartbeat on the subject, its part of the window from the beats it hears, and bad beats refused. */
/*
 * Until replicas own partitions (issue 16 point 2), one proxy leads and
 * the others stand by, so the other replica here is the test itself: it
 * publishes a peer's heartbeats on the subject, through the real server,
 * and watches what the proxy dispatches and says in stats. lib/share's
 * arithmetic is tests/test_share.c's; this is the wiring.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "msg.h"
#include "names.h"
#include "proxyfixture.h"

#define WINDOW 4

/* The peer's heartbeat, published again while the test waits (a replica
 * beats every 100 ms; one silent for 5 s is forgotten); id "" for none. */
static fq_share_beat peer;

static int setup(void **state)
{
    peer = (fq_share_beat){0};
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "scheduler:\n  default_plan: free\n"
             "window:\n  max_in_flight: %d\n  share: on\n"
             "plans:\n  - name: free\n    weight: 1\n", WINDOW);
    /* no workers: what is dispatched stays in flight */
    return pf_setup(state, yaml, NULL);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

static void peer_publish(pf_fixture *f)
{
    char buf[FQ_SHARE_BEAT_MAX_BYTES];
    size_t n = fq_share_beat_format(buf, sizeof buf, &peer);
    assert_true(n > 0);
    assert_int_equal(natsConnection_Publish(f->c.nc, FQ_SUBJECT_SHARE, buf, (int)n), NATS_OK);
    assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
}

/* The stats reply once overall.key is want, waiting up to 10 s. */
static void overall_becomes(pf_fixture *f, const char *key, long want)
{
    long have = -1;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(20)) {
        if (peer.id[0])
            peer_publish(f);
        cJSON *j = pf_stats(f, "", NULL);
        have = pf_overall(j, key);
        cJSON_Delete(j);
        if (have == want)
            return;
    }
    fail_msg("overall.%s is %ld, not %ld", key, have, want);
}

/* A peer's heartbeat from now on, as another replica would publish it. */
static void peer_beats(pf_fixture *f, uint64_t weight, uint64_t queued, uint32_t runs)
{
    peer = (fq_share_beat){.id = "peer-1", .weight = weight, .queued_runs = queued,
                           .queued_tokens = queued * 1000, .runs = runs,
                           .tokens = runs * 1000ull};
    peer_publish(f);
}

/* The proxy publishes a valid heartbeat at least every 100 ms, which says
 * what it holds and wants. */
static void test_proxy_publishes_its_heartbeat(void **state)
{
    pf_fixture *f = *state;
    natsSubscription *sub = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&sub, f->c.nc, FQ_SUBJECT_SHARE), NATS_OK);
    long long t0 = nt_now_ms();
    int beats = 0;
    while (beats < 5) {
        natsMsg *m = NULL;
        assert_int_equal(natsSubscription_NextMsg(&m, sub, 2000), NATS_OK);
        fq_share_beat b;
        char err[256];
        assert_int_equal(fq_share_beat_parse(&b, natsMsg_GetData(m),
                                             (size_t)natsMsg_GetDataLength(m), err, sizeof err),
                         FQ_OK);
        if (strcmp(b.id, "peer-1") != 0)
            beats++;
        natsMsg_Destroy(m);
    }
    /* five beats in about 400 ms; a generous bound for a loaded machine */
    assert_true(nt_now_ms() - t0 < 3000);
    natsSubscription_Destroy(sub);
    /* alone, it has the whole window */
    overall_becomes(f, "share_max_in_flight", WINDOW);
}

/* A peer that holds the whole window and wants more leaves this proxy the
 * reserve alone (one run) until it drains; then they split by weight;
 * idle, it leaves the proxy everything. A bad beat is refused, counted. */
static void test_peer_beats_set_the_proxy_part(void **state)
{
    pf_fixture *f = *state;
    overall_becomes(f, "share_max_in_flight", WINDOW);
    peer_beats(f, 1, 100, WINDOW);
    overall_becomes(f, "share_peers", 1);
    pf_submit_runs(f, 0, 10, 1);
    overall_becomes(f, "in_flight", 1);         /* room 0 + the reserve */
    overall_becomes(f, "share_max_in_flight", 1);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "in_flight"), 1);
    cJSON_Delete(j);
    /* why t0's runs wait: this replica's part of the window is full */
    char *r = pt_request(&f->c, "fair.explain.t0", "", NULL);
    assert_non_null(r);
    if (!strstr(r, "the in-flight window is full"))
        fail_msg("explain says %s", r);
    free(r);
    peer_beats(f, 1, 100, 0);                   /* drained: half each */
    overall_becomes(f, "share_max_in_flight", WINDOW / 2);
    overall_becomes(f, "in_flight", WINDOW / 2);
    peer_beats(f, 0, 0, 0);                     /* idle: all of it */
    overall_becomes(f, "in_flight", WINDOW);
    overall_becomes(f, "share_max_in_flight", WINDOW);

    long before;
    j = pf_stats(f, "", NULL);
    before = pf_overall(j, "share_heartbeats_refused");
    cJSON_Delete(j);
    static const char *const bad[] = {"{not json", "{\"id\":\"x\"}",
                                      "{\"id\":\"x y\",\"weight\":1,\"queued_runs\":0,"
                                      "\"queued_tokens\":0,\"runs\":0,\"tokens\":0,"
                                      "\"borrowed_runs\":0,\"borrowed_tokens\":0}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(natsConnection_PublishString(f->c.nc, FQ_SUBJECT_SHARE, bad[i]),
                         NATS_OK);
    assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
    overall_becomes(f, "share_heartbeats_refused", before + 3);
    assert_true(pt_log_wait(&f->px, "heartbeat refused", 5000) == 0);
    overall_becomes(f, "in_flight", WINDOW);    /* and it still serves */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_proxy_publishes_its_heartbeat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_beats_set_the_proxy_part, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
