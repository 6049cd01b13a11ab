/* test_simjs.c -- the simulated JetStream of the deterministic simulation test behaves as the measured server does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dst/simjs.h"

#define MIN (60 * 1000)

static sj *mk(void)
{
    sj *s = sj_create();
    sj_set_now(s, 1000000);
    sj_stream_cfg sub = {.name = "SUBMIT", .subjects = "fair.submit.*", .retention = SJ_WORKQUEUE,
                         .duplicate_window_ms = 2 * MIN, .max_msgs_per_subject = 3};
    sj_stream_cfg dis = {.name = "DISPATCH", .subjects = "fair.dispatch", .retention = SJ_LIMITS,
                         .duplicate_window_ms = 2 * MIN, .max_age_ms = 10 * MIN};
    sj_stream_cfg runs = {.name = "RUNS", .subjects = "fairq.runs", .retention = SJ_LIMITS,
                          .duplicate_window_ms = 2 * MIN, .max_age_ms = 10 * MIN};
    assert_int_equal(sj_stream_add(s, &sub), 0);
    assert_int_equal(sj_stream_add(s, &dis), 0);
    assert_int_equal(sj_stream_add(s, &runs), 0);
    assert_int_equal(sj_stream_add(s, &runs), -1);
    return s;
}

static sj_puback pub(sj *s, const char *subject, const char *id, const char *data)
{
    sj_hdr h = {"Nats-Msg-Id", id};
    sj_pub p = {.subject = subject, .hdrs = &h, .nhdrs = id ? 1 : 0, .data = data,
                .len = strlen(data)};
    return sj_publish(s, &p);
}

static void test_dedupe_within_the_window(void **state)
{
    (void)state;
    sj *s = mk();
    sj_puback a = pub(s, "fair.dispatch", "t/r1", "x");
    assert_int_equal(a.err, 0);
    assert_false(a.duplicate);
    sj_puback b = pub(s, "fair.dispatch", "t/r1", "y");
    assert_true(b.duplicate);
    assert_int_equal(b.seq, a.seq);
    assert_int_equal(sj_msgs(s, "DISPATCH"), 1);
    sj_set_now(s, sj_now(s) + 2 * MIN);     /* the window has passed */
    sj_puback c = pub(s, "fair.dispatch", "t/r1", "z");
    assert_false(c.duplicate);
    assert_int_equal(c.seq, a.seq + 1);
    assert_int_equal(pub(s, "nowhere", NULL, "x").err, SJ_ERR_NO_STREAM);
    sj_destroy(s);
}

/* Measured with nats-server 2.9.10: a work-queue stream forgets, at a
 * restart, the ids of what its consumer removed; a limits stream keeps them. */
static void test_restart_forgets_removed_ids_of_a_work_queue(void **state)
{
    (void)state;
    sj *s = mk();
    sj_puback a = pub(s, "fair.submit.t", "s1", "x");
    pub(s, "fair.dispatch", "t/r1", "x");
    assert_int_equal(sj_consumer_add(s, "SUBMIT", "fairq-1", NULL, MIN, 100), 0);
    sj_delivery d[4];
    assert_int_equal(sj_fetch(s, "SUBMIT", "fairq-1", 4, d), 1);
    sj_msg_unref(d[0].msg);
    sj_ack(s, "SUBMIT", "fairq-1", a.seq);
    assert_int_equal(sj_msgs(s, "SUBMIT"), 0);
    /* Running, the id is still known. */
    assert_true(pub(s, "fair.submit.t", "s1", "x").duplicate);
    sj_restart(s);
    assert_false(pub(s, "fair.submit.t", "s1", "x").duplicate);
    assert_true(pub(s, "fair.dispatch", "t/r1", "x").duplicate);
    sj_destroy(s);
}

/* The id is checked before the expectation (measured), so a batch sent
 * again after a lost PubAck is a duplicate, not a refusal. */
static void test_expected_last_sequence(void **state)
{
    (void)state;
    sj *s = mk();
    sj_hdr h1[2] = {{"Nats-Msg-Id", "p/1/1"}, {"Nats-Expected-Last-Sequence", "0"}};
    sj_pub p1 = {.subject = "fairq.runs", .hdrs = h1, .nhdrs = 2, .data = "{}", .len = 2};
    sj_puback a = sj_publish(s, &p1);
    assert_int_equal(a.err, 0);
    assert_int_equal(a.seq, 1);
    pub(s, "fairq.runs", "q/9/0", "{}");        /* another leader's marker */
    sj_puback again = sj_publish(s, &p1);
    assert_int_equal(again.err, 0);
    assert_true(again.duplicate);
    sj_hdr h2[2] = {{"Nats-Msg-Id", "p/1/2"}, {"Nats-Expected-Last-Sequence", "1"}};
    sj_pub p2 = {.subject = "fairq.runs", .hdrs = h2, .nhdrs = 2, .data = "{}", .len = 2};
    assert_int_equal(sj_publish(s, &p2).err, SJ_ERR_WRONG_LAST);
    h2[1].value = "2";
    assert_int_equal(sj_publish(s, &p2).err, 0);
    sj_destroy(s);
}

/* An ack names the consumer and the stream sequence: one sent to a
 * consumer deleted and made again under its name applies to the new one;
 * one sent to a consumer that no longer exists changes nothing. */
static void test_stale_ack_applies_to_a_recreated_consumer(void **state)
{
    (void)state;
    sj *s = mk();
    sj_puback a = pub(s, "fair.submit.t", NULL, "x");
    assert_int_equal(sj_consumer_add(s, "SUBMIT", "fairq", NULL, MIN, 100), 0);
    sj_delivery d[4];
    assert_int_equal(sj_fetch(s, "SUBMIT", "fairq", 4, d), 1);
    sj_msg_unref(d[0].msg);
    assert_int_equal(sj_consumer_delete(s, "SUBMIT", "fairq"), 0);
    assert_int_equal(sj_consumer_add(s, "SUBMIT", "fairq-2", NULL, MIN, 100), 0);
    sj_ack(s, "SUBMIT", "fairq", a.seq);        /* to a consumer that is gone */
    assert_int_equal(sj_msgs(s, "SUBMIT"), 1);
    assert_int_equal(sj_fetch(s, "SUBMIT", "fairq-2", 4, d), 1);   /* at once */
    assert_int_equal(d[0].delivered, 1);
    sj_msg_unref(d[0].msg);
    assert_int_equal(sj_consumer_delete(s, "SUBMIT", "fairq-2"), 0);
    assert_int_equal(sj_consumer_add(s, "SUBMIT", "fairq-2", NULL, MIN, 100), 0);
    sj_ack(s, "SUBMIT", "fairq-2", a.seq);      /* stale, and not pending yet: nothing */
    assert_int_equal(sj_msgs(s, "SUBMIT"), 1);
    assert_int_equal(sj_fetch(s, "SUBMIT", "fairq-2", 4, d), 1);
    sj_msg_unref(d[0].msg);
    sj_ack(s, "SUBMIT", "fairq-2", a.seq);      /* the old holder's ack, late: applies */
    assert_int_equal(sj_msgs(s, "SUBMIT"), 0);
    sj_destroy(s);
}

static void test_ack_wait_max_ack_pending_and_nak(void **state)
{
    (void)state;
    sj *s = mk();
    pub(s, "fair.submit.a", NULL, "1");
    pub(s, "fair.submit.b", NULL, "2");
    pub(s, "fair.submit.c", NULL, "3");
    assert_int_equal(sj_consumer_add(s, "SUBMIT", "c", NULL, 1000, 2), 0);
    assert_int_equal(sj_consumer_add(s, "SUBMIT", "d", "fair.submit.a", 1000, 2),
                     SJ_ERR_WQ_OVERLAP);
    sj_delivery d[4];
    assert_int_equal(sj_fetch(s, "SUBMIT", "c", 4, d), 2);     /* MaxAckPending */
    assert_int_equal(d[0].sseq, 1);
    assert_int_equal(d[1].sseq, 2);
    uint64_t cseq2 = d[1].cseq;
    sj_msg_unref(d[0].msg);
    sj_msg_unref(d[1].msg);
    assert_int_equal(sj_fetch(s, "SUBMIT", "c", 4, d), 0);
    sj_nak(s, "SUBMIT", "c", 2, cseq2 + 5, 0);      /* a delivery it never made: ignored */
    assert_int_equal(sj_fetch(s, "SUBMIT", "c", 4, d), 0);
    sj_nak(s, "SUBMIT", "c", 2, cseq2, 500);
    sj_set_now(s, sj_now(s) + 499);
    assert_int_equal(sj_fetch(s, "SUBMIT", "c", 4, d), 0);
    sj_set_now(s, sj_now(s) + 1);
    assert_int_equal(sj_fetch(s, "SUBMIT", "c", 4, d), 1);
    assert_int_equal(d[0].sseq, 2);
    assert_int_equal(d[0].delivered, 2);
    sj_msg_unref(d[0].msg);
    sj_set_now(s, sj_now(s) + 1000);              /* both AckWaits ran out */
    assert_int_equal(sj_fetch(s, "SUBMIT", "c", 4, d), 2);
    assert_int_equal(d[0].sseq, 1);
    assert_int_equal(d[0].delivered, 2);
    assert_int_equal(d[1].delivered, 3);
    sj_msg_unref(d[0].msg);
    sj_msg_unref(d[1].msg);
    sj_ack(s, "SUBMIT", "c", 1);
    assert_int_equal(sj_consumer_pending(s, "SUBMIT", "c"), 1);
    assert_int_equal(sj_fetch(s, "SUBMIT", "c", 4, d), 1);     /* room for the third */
    assert_int_equal(d[0].sseq, 3);
    sj_msg_unref(d[0].msg);
    sj_destroy(s);
}

static void test_per_subject_limit_discards_new(void **state)
{
    (void)state;
    sj *s = mk();
    for (int i = 0; i < 3; i++)
        assert_int_equal(pub(s, "fair.submit.a", NULL, "x").err, 0);
    assert_int_equal(pub(s, "fair.submit.a", NULL, "x").err, SJ_ERR_PER_SUBJECT);
    assert_int_equal(pub(s, "fair.submit.b", NULL, "x").err, 0);
    assert_int_equal(sj_msgs(s, "SUBMIT"), 4);
    sj_delete(s, "SUBMIT", 1);
    assert_int_equal(pub(s, "fair.submit.a", NULL, "x").err, 0);
    sj_destroy(s);
}

/* Measured: a producer header whose name holds Nats-Msg-Id, written before
 * fairq's own, hid it: the same dispatch was stored twice. */
static void test_a_decoy_header_hides_the_msg_id(void **state)
{
    (void)state;
    sj *s = mk();
    sj_hdr h[2] = {{"X-Nats-Msg-Id-Decoy", "1"}, {"Nats-Msg-Id", "t/r"}};
    sj_pub p = {.subject = "fair.dispatch", .hdrs = h, .nhdrs = 2, .data = "x", .len = 1};
    assert_false(sj_publish(s, &p).duplicate);
    assert_false(sj_publish(s, &p).duplicate);
    sj_hdr g[2] = {{"Nats-Msg-Id", "t/r"}, {"X-Nats-Msg-Id-Decoy", "1"}};
    p.hdrs = g;
    assert_false(sj_publish(s, &p).duplicate);
    assert_true(sj_publish(s, &p).duplicate);
    sj_msg *m = sj_get(s, "DISPATCH", 3);
    char v[16];
    assert_true(sj_msg_header(m, "X-Nats-Msg-Id-Decoy", v, sizeof v));
    assert_string_equal(v, "1");
    sj_msg_unref(m);
    sj_destroy(s);
}

static void test_max_age_and_durable_reset(void **state)
{
    (void)state;
    sj *s = mk();
    pub(s, "fair.dispatch", "a", "1");
    sj_set_now(s, sj_now(s) + 5 * MIN);
    pub(s, "fair.dispatch", "b", "2");
    assert_int_equal(sj_consumer_add(s, "DISPATCH", "workers", NULL, MIN, 100), 0);
    sj_delivery d[4];
    assert_int_equal(sj_fetch(s, "DISPATCH", "workers", 4, d), 2);
    sj_msg_unref(d[0].msg);
    sj_msg_unref(d[1].msg);
    sj_ack(s, "DISPATCH", "workers", 1);
    sj_ack(s, "DISPATCH", "workers", 2);
    assert_int_equal(sj_msgs(s, "DISPATCH"), 2);   /* limits: acks remove nothing */
    sj_set_now(s, sj_now(s) + 5 * MIN);
    assert_int_equal(sj_msgs(s, "DISPATCH"), 1);   /* the first aged out */
    assert_null(sj_get(s, "DISPATCH", 1));
    assert_non_null(sj_next(s, "DISPATCH", 0));
    assert_int_equal(sj_next(s, "DISPATCH", 0)->seq, 2);
    sj_consumer_reset(s, "DISPATCH", "workers");
    assert_int_equal(sj_fetch(s, "DISPATCH", "workers", 4, d), 1);  /* the replay */
    assert_int_equal(d[0].sseq, 2);
    assert_int_equal(d[0].delivered, 1);
    sj_msg_unref(d[0].msg);
    sj_destroy(s);
}

static void test_kv_lease_key(void **state)
{
    (void)state;
    sj *s = mk();
    assert_int_equal(sj_kv_add(s, "fairq_lease", 3000), 0);
    char v[64];
    uint64_t rev = 0, r1 = 0, r2 = 0;
    assert_int_equal(sj_kv_get(s, "fairq_lease", "leader", v, sizeof v, &rev), SJ_ERR_NOT_FOUND);
    assert_int_equal(sj_kv_create(s, "fairq_lease", "leader", "p1", &r1), 0);
    assert_int_equal(sj_kv_create(s, "fairq_lease", "leader", "p2", &r2), SJ_ERR_WRONG_LAST);
    assert_int_equal(sj_kv_get(s, "fairq_lease", "leader", v, sizeof v, &rev), 0);
    assert_string_equal(v, "p1");
    assert_int_equal(rev, r1);
    assert_int_equal(sj_kv_update(s, "fairq_lease", "leader", "p1", r1, &r2), 0);
    assert_true(r2 > r1);
    assert_int_equal(sj_kv_update(s, "fairq_lease", "leader", "p2", r1, &rev), SJ_ERR_WRONG_LAST);
    sj_set_now(s, sj_now(s) + 3000);      /* not renewed: aged out */
    assert_int_equal(sj_kv_get(s, "fairq_lease", "leader", v, sizeof v, &rev), SJ_ERR_NOT_FOUND);
    assert_int_equal(sj_kv_update(s, "fairq_lease", "leader", "p1", r2, &rev), SJ_ERR_WRONG_LAST);
    assert_int_equal(sj_kv_create(s, "fairq_lease", "leader", "p2", &rev), 0);
    assert_true(rev > r2);                /* a new term */
    sj_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dedupe_within_the_window),
        cmocka_unit_test(test_restart_forgets_removed_ids_of_a_work_queue),
        cmocka_unit_test(test_expected_last_sequence),
        cmocka_unit_test(test_stale_ack_applies_to_a_recreated_consumer),
        cmocka_unit_test(test_ack_wait_max_ack_pending_and_nak),
        cmocka_unit_test(test_per_subject_limit_discards_new),
        cmocka_unit_test(test_a_decoy_header_hides_the_msg_id),
        cmocka_unit_test(test_max_age_and_durable_reset),
        cmocka_unit_test(test_kv_lease_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
