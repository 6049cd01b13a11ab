/* it_natsio.c -- the NATS adapter against a real nats-server: streams, fetch, acks, PubAcks, KV, restarts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#include <cmocka.h>
#include <nats/nats.h>

#include "msg.h"
#include "natsio.h"
#include "strand.h"
#include "natstest.h"

#define CONS_ID 0

typedef struct fixture {
    natstest *srv;
    fq_nio *n;
} fixture;

static int setup(void **state)
{
    static fixture f;
    memset(&f, 0, sizeof f);
    if (natstest_start(&f.srv, NULL) != 0)
        return -1;
    fq_nio_opts o = {.url = natstest_url(f.srv), .name = "it_natsio", .pub_wait_ms = 2000};
    char err[256];
    if (fq_nio_create(&f.n, &o, err, sizeof err) != FQ_OK) {
        fprintf(stderr, "connect: %s\n", err);
        return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    fq_nio_destroy(f->n);
    natstest_destroy(f->srv);
    return 0;
}

static const fq_nio_stream work = {.name = "WORK", .subject = "work.*",
                                   .retention = FQ_NIO_WORKQUEUE, .replicas = 1,
                                   .allow_direct = true};

/* Poll until an event of type arrives (other events are passed to keep,
 * if given), or fail after timeout_ms. */
static bool wait_event(fq_nio *n, enum fq_nio_event_type type, fq_nio_event *out, int timeout_ms)
{
    long long end = nt_now_ms() + timeout_ms;
    while (nt_now_ms() < end) {
        fq_nio_event ev;
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        if (ev.type == type) {
            *out = ev;
            return true;
        }
        fq_nio_msg_destroy(ev.msg);
    }
    return false;
}

static void publish(fq_nio *n, const char *subj, const char *body, const char *msgid,
                    uint64_t token)
{
    fq_nio_hdr h[] = {{"Nats-Msg-Id", msgid}};
    fq_nio_out o = {.subject = subj, .data = body, .len = strlen(body),
                    .hdrs = h, .n_hdrs = msgid ? 1 : 0};
    assert_int_equal(fq_nio_publish(n, &o, token), FQ_OK);
}

static void test_stream_ensure_and_mismatch(void **state)
{
    fixture *f = *state;
    char warn[512];
    assert_int_equal(fq_nio_stream_ensure(f->n, &work, warn, sizeof warn), FQ_OK);
    assert_string_equal(warn, "");
    /* Same again: found, no differences. */
    assert_int_equal(fq_nio_stream_ensure(f->n, &work, warn, sizeof warn), FQ_OK);
    assert_string_equal(warn, "");
    fq_nio_stream other = work;
    other.retention = FQ_NIO_LIMITS;
    other.max_age_ms = 60000;
    assert_int_equal(fq_nio_stream_ensure(f->n, &other, warn, sizeof warn), FQ_OK);
    assert_non_null(strstr(warn, "retention"));
    assert_non_null(strstr(warn, "max_age"));
    other.subject = "elsewhere.*";
    assert_int_equal(fq_nio_stream_ensure(f->n, &other, warn, sizeof warn), FQ_EINVAL);
    assert_non_null(strstr(warn, "elsewhere.*"));
}

static void test_puback_tokens_and_duplicates(void **state)
{
    fixture *f = *state;
    fq_nio_stream dedup = {.name = "DEDUP", .subject = "dedup", .retention = FQ_NIO_LIMITS,
                           .duplicates_ms = 60000, .max_age_ms = 120000, .replicas = 1};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &dedup, warn, sizeof warn), FQ_OK);
    publish(f->n, "dedup", "a", "id-1", 11);
    publish(f->n, "dedup", "a", "id-1", 12);
    publish(f->n, "dedup", "b", "id-2", 13);
    int seen = 0, dups = 0;
    for (int i = 0; i < 3; i++) {
        fq_nio_event ev;
        assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
        assert_int_equal(ev.status, FQ_OK);
        assert_true(ev.token >= 11 && ev.token <= 13);
        seen |= 1 << (ev.token - 11);
        dups += ev.duplicate;
        if (ev.token == 12)
            assert_true(ev.duplicate);
    }
    assert_int_equal(seen, 7);
    assert_int_equal(dups, 1);
    assert_int_equal(fq_nio_pending_pubs(f->n), 0);
    /* A publish no stream takes fails, and its message comes back. */
    publish(f->n, "nostream", "x", NULL, 99);
    fq_nio_event ev;
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.token, 99);
    assert_int_equal(ev.status, FQ_EIO);
    assert_non_null(ev.msg);
    assert_string_equal(fq_nio_msg_subject(ev.msg), "nostream");
    fq_nio_msg_destroy(ev.msg);
}

/* A publish nobody stores (a plain subscriber has the subject, so no
 * "no responders" comes either) fails after pub_wait_ms with its message
 * handed back whole; sent again once a stream has the subject, it is
 * stored, Nats-Msg-Id and all. Past max_pending_pubs nothing is sent. */
static void test_puback_timeout_and_republish(void **state)
{
    fixture *f = *state;
    assert_int_equal(fq_nio_subscribe(f->n, 2, "later", 0, NULL), FQ_OK);
    fq_nio_hdr h[] = {{"Nats-Msg-Id", "late-1"}, {"X-Kept", "yes"}};
    fq_nio_out o = {.subject = "later", .data = "body", .len = 4, .hdrs = h, .n_hdrs = 2};
    long long t0 = nt_now_ms();
    assert_int_equal(fq_nio_publish(f->n, &o, 77), FQ_OK);
    assert_int_equal(fq_nio_pending_pubs(f->n), 1);
    fq_nio_event ev;
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 6000));
    assert_true(nt_now_ms() - t0 >= 2000);     /* pub_wait_ms of the fixture */
    assert_int_equal(ev.token, 77);
    assert_int_equal(ev.status, FQ_EIO);
    assert_int_equal(fq_nio_pending_pubs(f->n), 0);
    assert_non_null(ev.msg);
    assert_string_equal(fq_nio_msg_header(ev.msg, "X-Kept"), "yes");
    assert_int_equal(fq_nio_unsubscribe(f->n, 2), FQ_OK);

    fq_nio_stream later = {.name = "LATER", .subject = "later", .retention = FQ_NIO_LIMITS,
                           .duplicates_ms = 60000, .max_age_ms = 120000, .replicas = 1};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &later, warn, sizeof warn), FQ_OK);
    fq_nio_msg *m = ev.msg;
    assert_int_equal(fq_nio_republish(f->n, &m, 78), FQ_OK);
    assert_null(m);
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.token, 78);
    assert_int_equal(ev.status, FQ_OK);
    assert_false(ev.duplicate);
    publish(f->n, "later", "body", "late-1", 79);
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.token, 79);
    assert_true(ev.duplicate);          /* the copy carried Nats-Msg-Id */

    fq_nio *small = NULL;
    fq_nio_opts so = {.url = "", .name = "it_natsio_small", .max_pending_pubs = 2};
    char err[256];
    so.url = natstest_url(f->srv);
    assert_int_equal(fq_nio_create(&small, &so, err, sizeof err), FQ_OK);
    assert_int_equal(fq_nio_subscribe(small, 0, "sink", 0, NULL), FQ_OK);
    fq_nio_out s = {.subject = "sink", .data = "x", .len = 1};
    assert_int_equal(fq_nio_publish(small, &s, 1), FQ_OK);
    assert_int_equal(fq_nio_publish(small, &s, 2), FQ_OK);
    assert_int_equal(fq_nio_publish(small, &s, 3), FQ_EIO);
    assert_int_equal(fq_nio_pending_pubs(small), 2);
    fq_nio_destroy(small);
}

/* Requests are bounded before the owner sees them: those without a reply
 * subject are dropped and counted, those past max_queued waiting are
 * answered busy at once and counted; a request taken by poll frees its
 * room. */
static void test_requests_bounded(void **state)
{
    fixture *f = *state;
    static const char busy[] = "{\"busy\":true}";
    assert_int_equal(fq_nio_subscribe(f->n, 1, "adm.>", 3, busy), FQ_OK);
    assert_int_equal(fq_nio_flush(f->n, 2000), FQ_OK);   /* the server has the interest */
    natsConnection *nc = NULL;
    natsSubscription *inbox = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_SubscribeSync(&inbox, nc, "answers.*"), NATS_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(natsConnection_PublishString(nc, "adm.stats", "{}"), NATS_OK);
    for (int i = 0; i < 5; i++) {
        char reply[32];
        snprintf(reply, sizeof reply, "answers.%d", i);
        assert_int_equal(natsConnection_PublishRequestString(nc, "adm.stats", reply, "{}"),
                         NATS_OK);
    }
    assert_int_equal(natsConnection_Flush(nc), NATS_OK);
    fq_nio_sub_stats st = {0};
    for (long long end = nt_now_ms() + 5000; nt_now_ms() < end && st.busy < 2; nt_sleep_ms(10))
        fq_nio_sub_stats_get(&st, f->n, 1);
    assert_int_equal(st.no_reply, 5);
    assert_int_equal(st.busy, 2);
    /* The two past the bound were answered, by nobody's loop. */
    for (int i = 0; i < 2; i++) {
        natsMsg *m = NULL;
        assert_int_equal(natsSubscription_NextMsg(&m, inbox, 5000), NATS_OK);
        assert_string_equal(natsMsg_GetData(m), busy);
        assert_true(strcmp(natsMsg_GetSubject(m), "answers.3") == 0 ||
                    strcmp(natsMsg_GetSubject(m), "answers.4") == 0);
        natsMsg_Destroy(m);
    }
    /* Three wait for the owner, in order. */
    for (int i = 0; i < 3; i++) {
        fq_nio_event ev;
        assert_true(wait_event(f->n, FQ_NIO_EV_REQUEST, &ev, 5000));
        assert_int_equal(fq_nio_reply(f->n, ev.msg, "ok", 2), FQ_OK);
        fq_nio_msg_destroy(ev.msg);
    }
    /* Taken, they left room: the next one waits for the owner too. */
    assert_int_equal(natsConnection_PublishRequestString(nc, "adm.stats", "answers.5", "{}"),
                     NATS_OK);
    fq_nio_event ev;
    assert_true(wait_event(f->n, FQ_NIO_EV_REQUEST, &ev, 5000));
    assert_int_equal(fq_nio_reply(f->n, ev.msg, "ok", 2), FQ_OK);
    fq_nio_msg_destroy(ev.msg);
    fq_nio_sub_stats_get(&st, f->n, 1);
    assert_int_equal(st.busy, 2);
    /* The owner's answers went to each request's reply, in order. */
    static const char *const order[] = {"answers.0", "answers.1", "answers.2", "answers.5"};
    for (int i = 0; i < 4; i++) {
        natsMsg *m = NULL;
        assert_int_equal(natsSubscription_NextMsg(&m, inbox, 5000), NATS_OK);
        assert_string_equal(natsMsg_GetSubject(m), order[i]);
        assert_string_equal(natsMsg_GetData(m), "ok");
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(inbox);
    natsConnection_Destroy(nc);
    assert_int_equal(fq_nio_unsubscribe(f->n, 1), FQ_OK);
}

/* The answer to the key-value request with token (others dropped). */
static fq_nio_event kv_answer(fq_nio *n, uint64_t token)
{
    fq_nio_event ev;
    long long end = nt_now_ms() + 5000;
    while (nt_now_ms() < end) {
        assert_true(wait_event(n, FQ_NIO_EV_KV_ANSWER, &ev, 5000));
        if (ev.token == token)
            return ev;
        fq_nio_kv_entry_destroy(ev.kv);
    }
    fail_msg("no answer to %llu", (unsigned long long)token);
    return ev;
}

/* Key-value reads and compare-and-set writes sent without waiting, each
 * answered as an event with its token: absent, created only where the key
 * has no entry, read back, updated only on its revision, read as absent
 * over a delete marker and written over it expecting that marker; a write
 * against a revision that moved refused (FQ_EEXIST); fq_nio_kv_poll hands
 * over the answers alone. */
static void test_kv_requests_without_waiting(void **state)
{
    fixture *f = *state;
    char err[256];
    assert_int_equal(fq_nio_kv_ensure(f->n, "it_async", 0, 0, 0, 1, err, sizeof err), FQ_OK);
    assert_int_equal(fq_nio_kv_get_async(f->n, "it_async", "k", 1, 0), FQ_OK);
    fq_nio_event ev = kv_answer(f->n, 1);
    assert_int_equal(ev.status, FQ_ENOTFOUND);
    assert_int_equal(ev.seq, 0);
    assert_null(ev.kv);
    assert_int_equal(fq_nio_kv_write_async(f->n, "it_async", "k", "1", 1, 0, 2, 0), FQ_OK);
    assert_int_equal(fq_nio_kv_write_async(f->n, "it_async", "k", "x", 1, 0, 3, 0), FQ_OK);
    ev = kv_answer(f->n, 2);
    assert_int_equal(ev.status, FQ_OK);
    uint64_t r1 = ev.seq;
    assert_true(r1 > 0);
    ev = kv_answer(f->n, 3);
    assert_int_equal(ev.status, FQ_EEXIST);
    assert_int_equal(ev.err_code, FQ_NIO_ERR_WRONG_LAST);
    assert_int_equal(fq_nio_kv_get_async(f->n, "it_async", "k", 4, 0), FQ_OK);
    ev = kv_answer(f->n, 4);
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(ev.seq, r1);
    assert_non_null(ev.kv);
    assert_string_equal(ev.kv->value, "1");
    fq_nio_kv_entry_destroy(ev.kv);
    assert_int_equal(fq_nio_kv_write_async(f->n, "it_async", "k", "2", 1, r1, 5, 0), FQ_OK);
    assert_int_equal(fq_nio_kv_write_async(f->n, "it_async", "k", "3", 1, r1, 6, 0), FQ_OK);
    ev = kv_answer(f->n, 5);
    assert_int_equal(ev.status, FQ_OK);
    uint64_t r2 = ev.seq;
    assert_true(r2 > r1);
    ev = kv_answer(f->n, 6);
    assert_int_equal(ev.status, FQ_EEXIST);
    /* a delete marker: no value, its revision to write over */
    uint64_t rd = 0;
    assert_int_equal(fq_nio_kv_delete(&rd, f->n, "it_async", "k", r2), FQ_OK);
    assert_int_equal(fq_nio_kv_get_async(f->n, "it_async", "k", 7, 0), FQ_OK);
    ev = kv_answer(f->n, 7);
    assert_int_equal(ev.status, FQ_ENOTFOUND);
    assert_int_equal(ev.seq, rd);
    assert_int_equal(fq_nio_kv_write_async(f->n, "it_async", "k", "4", 1, 0, 8, 0), FQ_OK);
    assert_int_equal(fq_nio_kv_write_async(f->n, "it_async", "k", "5", 1, rd, 9, 0), FQ_OK);
    ev = kv_answer(f->n, 8);
    assert_int_equal(ev.status, FQ_EEXIST);
    ev = kv_answer(f->n, 9);
    assert_int_equal(ev.status, FQ_OK);
    /* the answers alone: a publish's PubAck stays for fq_nio_poll */
    publish(f->n, "it.kv.none", "x", NULL, 10);
    assert_int_equal(fq_nio_kv_get_async(f->n, "it_async", "k", 11, 0), FQ_OK);
    fq_nio_event got[4];
    size_t k = 0;
    for (long long end = nt_now_ms() + 5000; !k && nt_now_ms() < end; nt_sleep_ms(5))
        k = fq_nio_kv_poll(f->n, got, 4);
    assert_int_equal(k, 1);
    assert_int_equal(got[0].type, FQ_NIO_EV_KV_ANSWER);
    assert_int_equal(got[0].token, 11);
    assert_string_equal(got[0].kv->value, "5");
    fq_nio_kv_entry_destroy(got[0].kv);
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.token, 10);
    fq_nio_msg_destroy(ev.msg);
}

/* A key-value request nobody answers (a subscriber that never replies
 * takes it, as a stream without a leader would) fails at its deadline, and
 * an answer that comes after that is not handed over. */
static void test_kv_request_unanswered_fails_at_its_deadline(void **state)
{
    fixture *f = *state;
    assert_int_equal(fq_nio_listen(f->n, 3, "$KV.it_void.k", 0), FQ_OK);
    assert_int_equal(fq_nio_flush(f->n, 5000), FQ_OK);
    assert_int_equal(fq_nio_kv_write_async(f->n, "it_void", "k", "1", 1, 0, 21, 300), FQ_OK);
    fq_nio_event req;
    assert_true(wait_event(f->n, FQ_NIO_EV_REQUEST, &req, 5000));
    fq_nio_event ev = kv_answer(f->n, 21);
    assert_int_equal(ev.status, FQ_EIO);
    /* answered late: dropped */
    static const char late[] = "{\"stream\":\"KV_it_void\",\"seq\":7}";
    assert_int_equal(fq_nio_reply(f->n, req.msg, late, sizeof late - 1), FQ_OK);
    fq_nio_msg_destroy(req.msg);
    assert_false(wait_event(f->n, FQ_NIO_EV_KV_ANSWER, &ev, 500));
    assert_int_equal(fq_nio_unsubscribe(f->n, 3), FQ_OK);
}

/* What fq_nio_publish writes is what arrives: the body byte for byte, our
 * headers with CR and LF turned to spaces (as nats.c's encoder does), the
 * carried ones but Nats-*; and a message with no header has none. */
static void test_publish_headers_as_sent(void **state)
{
    fixture *f = *state;
    fq_nio_stream hs = {.name = "HDRS", .subject = "hdrs.*", .retention = FQ_NIO_LIMITS,
                        .max_age_ms = 120000, .replicas = 1, .allow_direct = true};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &hs, warn, sizeof warn), FQ_OK);
    const char body[] = "a\0b\r\nc";
    fq_nio_hdr h[] = {{"X-One", "1"}, {"X-Bad", "x\r\ny"}, {"Nats-Msg-Id", "hdr-1"}};
    fq_nio_out o = {.subject = "hdrs.a", .data = body, .len = sizeof body, .hdrs = h,
                    .n_hdrs = 3};
    assert_int_equal(fq_nio_publish(f->n, &o, 1), FQ_OK);
    fq_nio_event ev;
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    fq_nio_msg *m = NULL;
    assert_int_equal(fq_nio_get(&m, f->n, "HDRS", ev.seq), FQ_OK);
    assert_int_equal(fq_nio_msg_len(m), sizeof body);
    assert_memory_equal(fq_nio_msg_data(m), body, sizeof body);
    assert_string_equal(fq_nio_msg_header(m, "X-One"), "1");
    assert_string_equal(fq_nio_msg_header(m, "X-Bad"), "x  y");
    /* Carried: X-One and X-Bad, not Nats-Msg-Id, and X-One set anew. */
    fq_nio_hdr h2[] = {{"X-One", "2"}};
    fq_nio_out o2 = {.subject = "hdrs.b", .data = "", .len = 0, .hdrs = h2, .n_hdrs = 1,
                     .carry = m};
    assert_int_equal(fq_nio_publish(f->n, &o2, 2), FQ_OK);
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    fq_nio_msg_destroy(m);
    assert_int_equal(fq_nio_get(&m, f->n, "HDRS", ev.seq), FQ_OK);
    assert_int_equal(fq_nio_msg_len(m), 0);
    assert_string_equal(fq_nio_msg_header(m, "X-One"), "2");
    assert_string_equal(fq_nio_msg_header(m, "X-Bad"), "x  y");
    assert_null(fq_nio_msg_header(m, "Nats-Msg-Id"));
    fq_nio_msg_destroy(m);
    fq_nio_out plain = {.subject = "hdrs.c", .data = "p", .len = 1};
    assert_int_equal(fq_nio_publish(f->n, &plain, 3), FQ_OK);
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(fq_nio_get(&m, f->n, "HDRS", ev.seq), FQ_OK);
    assert_null(fq_nio_msg_header(m, "X-One"));     /* a direct get adds Nats-* only */
    assert_int_equal(fq_nio_msg_len(m), 1);
    assert_memory_equal(fq_nio_msg_data(m), "p", 1);
    fq_nio_msg_destroy(m);
}

/* A fetched submit kept as its carried lines and body (the message given
 * back at once): the same bytes come from the message read back by
 * sequence, and a publish built from them carries what carrying the
 * message would. */
static void test_carry_lines_fetched_and_read_back(void **state)
{
    fixture *f = *state;
    fq_nio_stream ls = {.name = "LINES", .subject = "lines.*", .retention = FQ_NIO_LIMITS,
                        .max_age_ms = 120000, .replicas = 1, .allow_direct = true};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &ls, warn, sizeof warn), FQ_OK);
    const char body[] = "a\0body";
    fq_nio_hdr h[] = {{"Nats-Msg-Id", "lines-1"}, {"X-A", "1"}, {"X-B", "two words"},
                      {"Fair-Run-Id", "r-1"}, {"X-C", "x\r\ny"}};
    fq_nio_out o = {.subject = "lines.a", .data = body, .len = sizeof body, .hdrs = h,
                    .n_hdrs = 5};
    assert_int_equal(fq_nio_publish(f->n, &o, 1), FQ_OK);
    fq_nio_event ev;
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    fq_nio_consumer c = {.stream = "LINES", .durable = "lines", .filter = "lines.a",
                         .max_ack_pending = 1000, .ack_wait_ms = 60000, .batch = 16};
    assert_int_equal(fq_nio_consume(f->n, 3, &c), FQ_OK);
    assert_true(wait_event(f->n, FQ_NIO_EV_MSG, &ev, 5000));
    assert_int_equal(ev.source, 3);
    /* no more from it: the tests after this one wait for any message */
    fq_nio_consume_pause(f->n, 3, true);
    fq_buf got = {0}, back = {0};
    char bad[160];
    assert_int_equal(fq_nio_msg_carry_lines(&got, bad, NULL, ev.msg), FQ_OK);
    char kept[sizeof body];
    assert_int_equal(fq_nio_msg_len(ev.msg), sizeof body);
    memcpy(kept, fq_nio_msg_data(ev.msg), sizeof body);
    fq_nio_ackref ack = ev.ack;
    fq_nio_msg_drop(f->n, ev.msg);
    /* read back by sequence: its Nats-* headers (the stream's) left out,
     * the same lines */
    fq_nio_msg *m = NULL;
    assert_int_equal(fq_nio_get(&m, f->n, "LINES", ack.sseq), FQ_OK);
    assert_int_equal(fq_nio_msg_carry_lines(&back, bad, NULL, m), FQ_OK);
    assert_int_equal(back.len, got.len);
    assert_memory_equal(back.p, got.p, got.len);
    assert_int_equal(fq_nio_msg_len(m), sizeof body);
    assert_memory_equal(fq_nio_msg_data(m), kept, sizeof body);
    fq_nio_msg_destroy(m);
    /* published from the kept bytes, a header set anew replaces its line */
    fq_nio_hdr h2[] = {{"Nats-Msg-Id", "lines-2"}, {"Fair-Run-Id", "r-2"}};
    fq_nio_out o2 = {.subject = "lines.b", .data = kept, .len = sizeof body, .hdrs = h2,
                     .n_hdrs = 2, .carry_lines = got.p, .carry_len = got.len};
    assert_int_equal(fq_nio_publish(f->n, &o2, 2), FQ_OK);
    assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    assert_false(ev.duplicate);
    assert_int_equal(fq_nio_get(&m, f->n, "LINES", ev.seq), FQ_OK);
    assert_string_equal(fq_nio_msg_header(m, "X-A"), "1");
    assert_string_equal(fq_nio_msg_header(m, "X-B"), "two words");
    assert_string_equal(fq_nio_msg_header(m, "X-C"), "x  y");
    assert_string_equal(fq_nio_msg_header(m, "Fair-Run-Id"), "r-2");
    assert_string_equal(fq_nio_msg_header(m, "Nats-Msg-Id"), "lines-2");
    assert_memory_equal(fq_nio_msg_data(m), body, sizeof body);
    fq_nio_msg_destroy(m);
    assert_int_equal(fq_nio_ack(f->n, 3, &ack), FQ_OK);
    free(got.p);
    free(back.p);
}

static void test_fetch_ack_get_and_recreate(void **state)
{
    fixture *f = *state;
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &work, warn, sizeof warn), FQ_OK);
    for (int i = 0; i < 5; i++) {
        char body[32];
        snprintf(body, sizeof body, "run-%d", i);
        publish(f->n, i % 2 ? "work.a" : "work.b", body, NULL, 100 + (uint64_t)i);
    }
    fq_nio_consumer c = {.stream = "WORK", .durable = "it", .filter = "work.*",
                         .max_ack_pending = 1000, .ack_wait_ms = 3600000, .batch = 64};
    assert_int_equal(fq_nio_consume(f->n, CONS_ID, &c), FQ_OK);
    fq_nio_ackref refs[5];
    for (int i = 0; i < 5; i++) {
        fq_nio_event ev;
        assert_true(wait_event(f->n, FQ_NIO_EV_MSG, &ev, 5000));
        char want[32];
        snprintf(want, sizeof want, "run-%d", i);
        /* Submit order is kept across subjects. */
        assert_int_equal(fq_nio_msg_len(ev.msg), strlen(want));
        assert_memory_equal(fq_nio_msg_data(ev.msg), want, strlen(want));
        assert_int_equal(ev.ack.sseq, (uint64_t)i + 1);
        assert_int_equal(ev.ack.delivered, 1);
        assert_true(ev.ts_ms > 0);
        refs[i] = ev.ack;
        /* Dropped: destroyed by the next poll, with any others. */
        fq_nio_msg_drop(f->n, ev.msg);
    }
    /* A body can be read back by sequence while it is unacked. */
    fq_nio_msg *m = NULL;
    assert_int_equal(fq_nio_get(&m, f->n, "WORK", 3), FQ_OK);
    assert_memory_equal(fq_nio_msg_data(m), "run-2", 5);
    assert_string_equal(fq_nio_msg_subject(m), "work.b");
    fq_nio_msg_destroy(m);
    /* Ack 1 and 3 out of order; a work-queue stream then drops them. */
    assert_int_equal(fq_nio_ack(f->n, CONS_ID, &refs[2]), FQ_OK);
    assert_int_equal(fq_nio_ack(f->n, CONS_ID, &refs[0]), FQ_OK);
    long long end = nt_now_ms() + 3000;
    fq_status st = FQ_OK;
    while (nt_now_ms() < end && (st = fq_nio_get(&m, f->n, "WORK", 3)) == FQ_OK)
        fq_nio_msg_destroy(m);
    assert_int_equal(st, FQ_ENOTFOUND);
    /* Restart the server: the consumer is recreated and the three unacked
     * runs come again at once, not after the hour of ack wait. */
    assert_int_equal(natstest_restart(f->srv), 0);
    uint64_t got[3] = {0};
    for (int i = 0; i < 3; i++) {
        fq_nio_event ev;
        assert_true(wait_event(f->n, FQ_NIO_EV_MSG, &ev, 15000));
        got[i] = ev.ack.sseq;
        assert_int_equal(fq_nio_ack(f->n, CONS_ID, &ev.ack), FQ_OK);
        /* The last one is still waiting for a poll at teardown: destroyed
         * with the adapter (the Asan build checks that nothing leaks). */
        fq_nio_msg_drop(f->n, ev.msg);
    }
    assert_int_equal(got[0], 2);
    assert_int_equal(got[1], 4);
    assert_int_equal(got[2], 5);
}

/* A consumer named for a new term deletes the old term's: what the old
 * one delivered and never saw acked comes to the new one at once, in stream
 * order, and the old holder's acks change nothing. Past its fence an
 * adapter acks nothing. */
/* Make stream st through the adapter, then, as a client of its own (nc and
 * js, the caller's to destroy), a durable pull consumer on it. */
static void client_consumer(fixture *f, const fq_nio_stream *st, const char *durable,
                            natsConnection **nc, jsCtx **js)
{
    char warn[512];
    assert_int_equal(fq_nio_stream_ensure(f->n, st, warn, sizeof warn), FQ_OK);
    assert_int_equal(natsConnection_ConnectTo(nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_JetStream(js, *nc, NULL), NATS_OK);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = durable;
    cc.AckPolicy = js_AckExplicit;
    cc.FilterSubject = st->subject;
    jsConsumerInfo *ci = NULL;
    assert_int_equal(js_AddConsumer(&ci, *js, st->name, &cc, NULL, NULL), NATS_OK);
    jsConsumerInfo_Destroy(ci);
}

/* The pull reader that the fetch threads and the example clients share
 * takes as a run only a JetStream delivery: a message sent to its inbox
 * with a reply subject of its own, queued or arriving during a request, is
 * dropped (the fetch thread counted any message with a reply). */
/* A consumer pulls no more while its owner is behind: with 200 runs in
 * the stream and nobody polling, the queue holds at most two batches and
 * the one pulled last (nats.c's message of each, a KiB apiece when a
 * proxy buffers, waits there); polling again, all 200 come. */
static void test_fetch_waits_for_a_slow_owner(void **state)
{
    fixture *f = *state;
    enum { N = 200, BATCH = 8, ID = 1 };
    fq_nio_stream st = {.name = "AHEAD", .subject = "ahead.*", .retention = FQ_NIO_LIMITS,
                        .max_age_ms = 120000, .replicas = 1, .allow_direct = true};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &st, warn, sizeof warn), FQ_OK);
    for (int i = 0; i < N; i++)
        publish(f->n, "ahead.a", "run", NULL, 1000 + (uint64_t)i);
    fq_nio_event ev;
    for (int acked = 0; acked < N; acked++) {
        assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
        assert_int_equal(ev.status, FQ_OK);
    }
    fq_nio_consumer c = {.stream = "AHEAD", .durable = "ahead", .filter = "ahead.a",
                         .max_ack_pending = 1000, .ack_wait_ms = 60000, .batch = BATCH};
    assert_int_equal(fq_nio_consume(f->n, ID, &c), FQ_OK);
    assert_true(wait_event(f->n, FQ_NIO_EV_MSG, &ev, 5000));
    fq_nio_msg_drop(f->n, ev.msg);
    int got = 1, queued = 0;
    nt_sleep_ms(500);           /* the owner busy elsewhere: the fetch thread runs on */
    fq_nio_event evs[N];
    for (size_t k; (k = fq_nio_poll(f->n, evs, N, 0)) > 0;) {
        for (size_t i = 0; i < k; i++) {
            queued += evs[i].type == FQ_NIO_EV_MSG && evs[i].source == ID;
            fq_nio_msg_drop(f->n, evs[i].msg);
        }
    }
    assert_true(queued > 0);
    assert_true(queued < 3 * BATCH);
    got += queued;
    for (long long end = nt_now_ms() + 10000; got < N && nt_now_ms() < end;) {
        size_t k = fq_nio_poll(f->n, evs, N, 50);
        for (size_t i = 0; i < k; i++) {
            got += evs[i].type == FQ_NIO_EV_MSG && evs[i].source == ID;
            fq_nio_msg_drop(f->n, evs[i].msg);
        }
    }
    assert_int_equal(got, N);
    fq_nio_consume_pause(f->n, ID, true);
}

static void test_pull_reader_takes_only_deliveries(void **state)
{
    fixture *f = *state;
    static const fq_nio_stream pulls = {.name = "PULLS", .subject = "pulls.*",
                                        .retention = FQ_NIO_WORKQUEUE, .replicas = 1};
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    client_consumer(f, &pulls, "reader", &nc, &js);
    fq_nio_pull p;
    int ns = 0;
    assert_int_equal(fq_nio_pull_open(&p, nc, "pullbox", NULL, "PULLS", "reader", &ns), FQ_OK);
    assert_int_equal(js_Publish(NULL, js, "pulls.a", "run", 3, NULL, NULL), NATS_OK);
    /* forged: on the inbox, with a reply, before and between requests */
    assert_int_equal(natsConnection_PublishRequestString(nc, "pullbox.1", "forged.reply", "x"),
                     NATS_OK);
    assert_int_equal(natsConnection_Flush(nc), NATS_OK);
    void *got[4] = {0};
    assert_int_equal(fq_nio_pull_queued(&p, got, 4), 0);
    int count = 0;
    assert_int_equal(fq_nio_pull_request(&p, got, 4, true, 2000, &count, &ns), FQ_OK);
    assert_int_equal(count, 1);
    assert_memory_equal(natsMsg_GetData(got[0]), "run", 3);
    assert_int_equal(strncmp(natsMsg_GetReply(got[0]), "$JS.ACK.", 8), 0);
    natsMsg_Destroy(got[0]);
    assert_int_equal(natsConnection_PublishRequestString(nc, "pullbox.2", "forged.reply", "y"),
                     NATS_OK);
    assert_int_equal(js_Publish(NULL, js, "pulls.b", "two", 3, NULL, NULL), NATS_OK);
    count = 0;
    assert_int_equal(fq_nio_pull_request(&p, got, 1, false, 2000, &count, &ns), FQ_OK);
    assert_int_equal(count, 1);
    assert_memory_equal(natsMsg_GetData(got[0]), "two", 3);
    natsMsg_Destroy(got[0]);
    fq_nio_pull_close(&p);
    fq_nio_pull_close(&p);      /* safe twice */
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

static void test_term_consumers_fence_the_old_term(void **state)
{
    fixture *f = *state;
    fq_nio_stream ts = {.name = "TERMS", .subject = "terms.*", .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 1, .allow_direct = true};
    char warn[256], err[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &ts, warn, sizeof warn), FQ_OK);
    for (int i = 0; i < 4; i++) {
        char body[16];
        snprintf(body, sizeof body, "t-%d", i);
        publish(f->n, i % 2 ? "terms.a" : "terms.b", body, NULL, 300 + (uint64_t)i);
    }
    fq_nio_consumer c = {.stream = "TERMS", .durable = "lead", .filter = "terms.*",
                         .max_ack_pending = 1000, .ack_wait_ms = 3600000, .batch = 64,
                         .term = 7};
    assert_int_equal(fq_nio_consume(f->n, 2, &c), FQ_OK);
    fq_nio_ackref refs[4];
    for (int i = 0; i < 4; i++) {
        fq_nio_event ev;
        assert_true(wait_event(f->n, FQ_NIO_EV_MSG, &ev, 5000));
        assert_int_equal(ev.source, 2);
        refs[i] = ev.ack;
        fq_nio_msg_drop(f->n, ev.msg);
    }
    assert_int_equal(fq_nio_ack(f->n, 2, &refs[0]), FQ_OK);
    /* The ack is only buffered by nats.c: a round trip makes the server
     * take it before the next leader, on another connection, deletes this
     * consumer (else the first run comes again, and the test fails). */
    assert_int_equal(fq_nio_flush(f->n, 5000), FQ_OK);
    /* The next leader, on a connection of its own, in term 8. */
    fq_nio *n2 = NULL;
    fq_nio_opts o = {.url = natstest_url(f->srv), .name = "it_natsio_2"};
    assert_int_equal(fq_nio_create(&n2, &o, err, sizeof err), FQ_OK);
    c.term = 8;
    assert_int_equal(fq_nio_consume(n2, 0, &c), FQ_OK);
    uint64_t got[3] = {0};
    for (int i = 0; i < 3; i++) {
        fq_nio_event ev;
        assert_true(wait_event(n2, FQ_NIO_EV_MSG, &ev, 5000));
        got[i] = ev.ack.sseq;
        if (i == 0) {
            /* The old holder acks the one the new holds: nothing changes. */
            assert_int_equal(fq_nio_ack(f->n, 2, &refs[1]), FQ_OK);
            fq_nio_msg *m = NULL;
            nt_sleep_ms(200);
            assert_int_equal(fq_nio_get(&m, f->n, "TERMS", refs[1].sseq), FQ_OK);
            fq_nio_msg_destroy(m);
        }
        assert_int_equal(fq_nio_ack(n2, 0, &ev.ack), FQ_OK);
        fq_nio_msg_drop(n2, ev.msg);
    }
    assert_int_equal(got[0], 2);
    assert_int_equal(got[1], 3);
    assert_int_equal(got[2], 4);
    /* Only the new term's consumer is left. */
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsConsumerNamesList *l = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    assert_int_equal(js_ConsumerNames(&l, js, "TERMS", NULL, NULL), NATS_OK);
    assert_int_equal(l->Count, 1);
    assert_string_equal(l->List[0], "lead-8");
    jsConsumerNamesList_Destroy(l);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    /* Past the fence, no ack leaves. */
    fq_nio_fence(n2, fq_nio_mono_ms());
    assert_int_equal(fq_nio_ack(n2, 0, &refs[3]), FQ_EIO);
    fq_nio_destroy(n2);
}

/* A holder that makes its consumers in an earlier term than one already
 * on the stream (it went stale while making them: frozen, or its listing
 * answered after a partition) never deletes the later term's: the live
 * leader would pull from nothing. Its own is refused by the work queue,
 * and it is told why (FQ_EEXIST). It used to delete every other term's. */
static void test_term_consumers_spare_a_later_term(void **state)
{
    fixture *f = *state;
    fq_nio_stream ts = {.name = "TERMS_LATER", .subject = "later.*",
                        .retention = FQ_NIO_WORKQUEUE, .replicas = 1};
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    client_consumer(f, &ts, "late-9", &nc, &js);
    /* On an adapter of its own, whose fetch thread keeps trying. */
    fq_nio *n2 = NULL;
    char err[256];
    fq_nio_opts o = {.url = natstest_url(f->srv), .name = "it_natsio_later"};
    assert_int_equal(fq_nio_create(&n2, &o, err, sizeof err), FQ_OK);
    fq_nio_consumer c = {.stream = "TERMS_LATER", .durable = "late", .filter = "later.*",
                         .max_ack_pending = 1000, .ack_wait_ms = 60000, .batch = 64,
                         .term = 5};
    assert_int_equal(fq_nio_consume(n2, 0, &c), FQ_OK);
    fq_nio_event ev;
    assert_true(wait_event(n2, FQ_NIO_EV_CONSUMER, &ev, 5000));
    assert_int_equal(ev.source, 0);
    assert_int_equal(ev.status, FQ_EEXIST);
    fq_nio_destroy(n2);
    jsConsumerNamesList *l = NULL;
    assert_int_equal(js_ConsumerNames(&l, js, "TERMS_LATER", NULL, NULL), NATS_OK);
    assert_int_equal(l->Count, 1);
    assert_string_equal(l->List[0], "late-9");
    jsConsumerNamesList_Destroy(l);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* The names of a partition's earlier consumers pass to its next owner
 * with the consumers: each is made with the names its maker deleted, or
 * learnt so, in its description, and whoever deletes it reads them first
 * (lib/pullplan.h, fq_pull_gone). A replica that lost a partition and
 * took it again (terms 5, then 9) deleted its own earlier term's consumer;
 * the next owner (term 12) deletes only term 9's, yet a restarted
 * nats-server node may keep a copy of term 5's and refuse the next
 * owner's consumer until it is made again under that name (natsio's
 * nio_adopt_stale), which it must know: it did not, and a partition's
 * submit consumer was refused for the rest of a cluster test. */
static void test_deleted_names_pass_to_the_next_owner(void **state)
{
    fixture *f = *state;
    fq_nio_stream ts = {.name = "HIST", .subject = "hist.*", .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 1};
    char warn[256], err[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &ts, warn, sizeof warn), FQ_OK);
    fq_nio *a = NULL, *b = NULL;
    fq_nio_opts oa = {.url = natstest_url(f->srv), .name = "it_natsio_hist_a"};
    fq_nio_opts ob = {.url = natstest_url(f->srv), .name = "it_natsio_hist_b"};
    assert_int_equal(fq_nio_create(&a, &oa, err, sizeof err), FQ_OK);
    assert_int_equal(fq_nio_create(&b, &ob, err, sizeof err), FQ_OK);
    fq_nio_consumer c = {.stream = "HIST", .durable = "hist", .filter = "hist.*",
                         .max_ack_pending = 1000, .ack_wait_ms = 60000, .batch = 16,
                         .term = 5};
    fq_nio_event ev;
    assert_int_equal(fq_nio_consume(a, 0, &c), FQ_OK);
    assert_true(wait_event(a, FQ_NIO_EV_CONSUMER, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(ev.seq, 5);
    assert_int_equal(fq_nio_consume_term(a, 0, 9), FQ_OK);
    assert_true(wait_event(a, FQ_NIO_EV_CONSUMER, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(ev.seq, 9);
    /* let go, its consumer left to the next owner */
    assert_int_equal(fq_nio_consume_stop(a, 0), FQ_OK);
    c.term = 12;
    assert_int_equal(fq_nio_consume(b, 0, &c), FQ_OK);
    assert_true(wait_event(b, FQ_NIO_EV_CONSUMER, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(ev.seq, 12);
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    jsConsumerNamesList *l = NULL;
    assert_int_equal(js_ConsumerNames(&l, js, "HIST", NULL, NULL), NATS_OK);
    assert_int_equal(l->Count, 1);
    assert_string_equal(l->List[0], "hist-12");
    jsConsumerNamesList_Destroy(l);
    /* term 12's knows term 9's (it deleted it) and term 5's (term 9's
     * description said it) */
    jsConsumerInfo *ci = NULL;
    assert_int_equal(js_GetConsumerInfo(&ci, js, "HIST", "hist-12", NULL, NULL), NATS_OK);
    assert_non_null(ci->Config->Description);
    assert_string_equal(ci->Config->Description, "hist-9 hist-5");
    jsConsumerInfo_Destroy(ci);
    fq_nio_destroy(a);
    fq_nio_destroy(b);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* A consumer the work queue refuses because another, of no term of
 * ours, overlaps its filter (what a nats-server node kept of a consumer
 * deleted while it was down, invisible to the API, did after a node's
 * kill: a partition's consumer refused for minutes): the event says
 * JetStream's reason (10100), so the owner can say it. It said only that
 * the consumer was not made. */
static void test_consumer_refused_says_why(void **state)
{
    fixture *f = *state;
    fq_nio_stream ts = {.name = "OVERLAP", .subject = "overlap.*",
                        .retention = FQ_NIO_WORKQUEUE, .replicas = 1};
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    client_consumer(f, &ts, "foreign", &nc, &js);
    fq_nio *n2 = NULL;
    char err[256];
    fq_nio_opts o = {.url = natstest_url(f->srv), .name = "it_natsio_overlap"};
    assert_int_equal(fq_nio_create(&n2, &o, err, sizeof err), FQ_OK);
    fq_nio_consumer c = {.stream = "OVERLAP", .durable = "mine", .filter = "overlap.*",
                         .max_ack_pending = 1000, .ack_wait_ms = 60000, .batch = 64,
                         .term = 3};
    assert_int_equal(fq_nio_consume(n2, 0, &c), FQ_OK);
    fq_nio_event ev;
    assert_true(wait_event(n2, FQ_NIO_EV_CONSUMER, &ev, 5000));
    assert_int_equal(ev.source, 0);
    assert_int_equal(ev.status, FQ_EIO);
    assert_int_equal(ev.err_code, 10100);  /* filtered consumer not unique on workqueue stream */
    fq_nio_destroy(n2);
    jsConsumerNamesList *l = NULL;
    assert_int_equal(js_ConsumerNames(&l, js, "OVERLAP", NULL, NULL), NATS_OK);
    assert_int_equal(l->Count, 1);
    assert_string_equal(l->List[0], "foreign");    /* not ours to delete */
    jsConsumerNamesList_Destroy(l);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* The next answer on sub (a request's reply): its body into buf. */
static size_t next_answer(natsSubscription *sub, char *buf, size_t cap)
{
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, sub, 5000), NATS_OK);
    int len = natsMsg_GetDataLength(m);
    assert_true(len > 0 && (size_t)len < cap);
    memcpy(buf, natsMsg_GetData(m), (size_t)len);
    buf[len] = '\0';
    natsMsg_Destroy(m);
    return (size_t)len;
}

/* A consumer whose ack floor passed submits still stored on a work queue
 * strands them, as nats-server 2.9.10 did after a node's restart
 * (docs/operations.md): made here on purpose by a consumer of the test's
 * own with MaxDeliver 1, whose floor passes a delivery left unacked past
 * its AckWait while a work queue keeps the message. The first stored
 * message by subject against the floor finds them (two checks), and each
 * stored again is delivered by that very consumer; the originals are gone. */
static void test_stranded_found_and_restored(void **state)
{
    fixture *f = *state;
    /* direct gets on, as FAIR_SUBMIT has them: a copy takes its subject
     * from the stored message's, not from the get's reply */
    fq_nio_stream ts = {.name = "STRAND", .subject = "strand.*.*",
                        .retention = FQ_NIO_WORKQUEUE, .replicas = 1, .allow_direct = true};
    char err[256], buf[2048];
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsSubscription *sub = NULL, *pull = NULL;
    assert_int_equal(fq_nio_stream_ensure(f->n, &ts, err, sizeof err), FQ_OK);
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    assert_int_equal(natsConnection_SubscribeSync(&sub, nc, "strand-answer.*"), NATS_OK);
    fq_nio *n2 = NULL;
    fq_nio_opts o = {.url = natstest_url(f->srv), .name = "it_natsio_strand"};
    assert_int_equal(fq_nio_create(&n2, &o, err, sizeof err), FQ_OK);
    /* seq 1..3 of partition 1, 4 of partition 2 (5 of partition 1 later) */
    const char *subj[] = {"strand.1.a", "strand.1.b", "strand.1.a", "strand.2.a"};
    const char *body[] = {"r1", "r2", "r3", "r4"};
    fq_nio_event ev;
    for (int i = 0; i < 4; i++) {
        publish(n2, subj[i], body[i], NULL, 300 + (uint64_t)i);
        assert_true(wait_event(n2, FQ_NIO_EV_PUBACK, &ev, 5000));
        assert_int_equal(ev.status, FQ_OK);
    }
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = "strander";
    cc.AckPolicy = js_AckExplicit;
    cc.FilterSubject = "strand.1.*";
    cc.MaxDeliver = 1;
    cc.AckWait = 300 * 1000000LL;
    jsConsumerInfo *ci = NULL;
    assert_int_equal(js_AddConsumer(&ci, js, "STRAND", &cc, NULL, NULL), NATS_OK);
    jsConsumerInfo_Destroy(ci);
    assert_int_equal(js_PullSubscribe(&pull, js, "strand.1.*", "strander", NULL, NULL, NULL),
                     NATS_OK);
    natsMsgList got = {0};
    assert_int_equal(natsSubscription_Fetch(&got, pull, 3, 2000, NULL), NATS_OK);
    assert_int_equal(got.Count, 3);
    natsMsgList_Destroy(&got);
    /* past the AckWait, unacked, never to come again: the floor passes them */
    uint64_t floor = 0, first = 0, from = 0;
    fq_strand st = {0};
    enum fq_strand_verdict v = FQ_STRAND_NONE;
    for (int i = 0; i < 50 && v != FQ_STRAND_STRANDED; i++) {
        /* a pull makes the consumer drop them past their last delivery;
         * its floor moves at its next ack, of a submit stored after */
        if (i == 3) {
            publish(n2, "strand.1.c", "r5", NULL, 310);
            assert_true(wait_event(n2, FQ_NIO_EV_PUBACK, &ev, 5000));
        }
        natsSubscription_Fetch(&got, pull, 1, 200, NULL);
        for (int m = 0; m < got.Count; m++) {
            assert_string_equal(natsMsg_GetSubject(got.Msgs[m]), "strand.1.c");
            assert_int_equal(natsMsg_AckSync(got.Msgs[m], NULL, NULL), NATS_OK);
        }
        natsMsgList_Destroy(&got);
        assert_int_equal(fq_nio_first_stored_ask(n2, "STRAND", "strand.1.*",
                                                 "strand-answer.g"), FQ_OK);
        size_t len = next_answer(sub, buf, sizeof buf);
        assert_int_equal(fq_msg_get_seq_parse(&first, buf, len), FQ_OK);
        assert_int_equal(first, 1);
        assert_int_equal(js_GetConsumerInfo(&ci, js, "STRAND", "strander", NULL, NULL),
                         NATS_OK);
        floor = ci->AckFloor.Stream;
        jsConsumerInfo_Destroy(ci);
        v = fq_strand_check(&from, &st, first, floor);
    }
    assert_int_equal(v, FQ_STRAND_STRANDED);
    assert_int_equal(from, 1);
    assert_true(floor >= 3);
    /* drained: each stored again, the next asked for at once */
    for (uint64_t want = 1; want <= 3; want++) {
        bool stored = false;
        char msgid[32];
        snprintf(msgid, sizeof msgid, "fairq-restored-%d", (int)from);
        assert_int_equal(from, want);
        assert_int_equal(fq_nio_restore(&stored, n2, "STRAND", from, msgid), FQ_OK);
        assert_true(stored);
        assert_int_equal(fq_nio_first_stored_ask(n2, "STRAND", "strand.1.*",
                                                 "strand-answer.g"), FQ_OK);
        size_t len = next_answer(sub, buf, sizeof buf);
        assert_int_equal(fq_msg_get_seq_parse(&first, buf, len), FQ_OK);
        v = fq_strand_check(&from, &st, first, floor);
        assert_int_equal(v, want < 3 ? FQ_STRAND_STRANDED : FQ_STRAND_NONE);
    }
    /* the copies, in order and whole, from the same consumer */
    for (int i = 0; i < 3;) {
        assert_int_equal(natsSubscription_Fetch(&got, pull, 3 - i, 2000, NULL), NATS_OK);
        for (int m = 0; m < got.Count; m++, i++) {
            assert_int_equal(natsMsg_GetDataLength(got.Msgs[m]), 2);
            assert_memory_equal(natsMsg_GetData(got.Msgs[m]), body[i], 2);
            assert_string_equal(natsMsg_GetSubject(got.Msgs[m]), subj[i]);
        }
        natsMsgList_Destroy(&got);
    }
    fq_nio_msg *gone = NULL;
    for (uint64_t seq = 1; seq <= 3; seq++)
        assert_int_equal(fq_nio_get(&gone, n2, "STRAND", seq), FQ_ENOTFOUND);
    natsSubscription_Destroy(pull);
    fq_nio_destroy(n2);
    natsSubscription_Destroy(sub);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* What a read back hands over, message by message. */
typedef void (*scan_fn)(void *arg, const void *data, size_t len, int64_t ts_ms, uint64_t seq);

/* Read stream (subject NULL: whole) back through natsio's scan thread, each
 * message to cb in the order polled; other events are dropped. The end's
 * status, after checking that every event of the read carries its token
 * and that the end counts the messages handed over. */
static fq_status scan_all(fq_nio *n, const char *stream, const char *subject, scan_fn cb,
                          void *arg)
{
    static uint64_t token = 1u << 24;
    uint64_t msgs = 0;
    assert_int_equal(fq_nio_scan_start(n, ++token, stream, subject), FQ_OK);
    for (long long end = nt_now_ms() + 20000; nt_now_ms() < end;) {
        fq_nio_event ev;
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        if (ev.type == FQ_NIO_EV_SCAN) {
            assert_int_equal(ev.token, token);
            msgs++;
            cb(arg, fq_nio_msg_data(ev.msg), fq_nio_msg_len(ev.msg), ev.ts_ms, ev.seq);
        } else if (ev.type == FQ_NIO_EV_SCAN_END) {
            assert_int_equal(ev.token, token);
            assert_int_equal(ev.seq, msgs);
            return ev.status;
        }
        fq_nio_msg_destroy(ev.msg);
    }
    fail_msg("the read back of %s did not end in 20 s", stream);
    return FQ_EIO;
}

typedef struct scan_seen {
    int n;
    uint64_t seq;               /* the last message's stream sequence */
    char bodies[8][16];
} scan_seen;

static void scan_cb(void *arg, const void *data, size_t len, int64_t ts_ms, uint64_t seq)
{
    scan_seen *s = arg;
    assert_true(ts_ms > 0);
    assert_true(seq > s->seq);      /* the stream's sequence, in order */
    s->seq = seq;
    if (s->n < 8)
        snprintf(s->bodies[s->n++], sizeof s->bodies[0], "%.*s", (int)len, (const char *)data);
}

static void test_stream_scan(void **state)
{
    fixture *f = *state;
    fq_nio_stream log = {.name = "LOG", .subject = "log", .retention = FQ_NIO_LIMITS,
                         .replicas = 1};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &log, warn, sizeof warn), FQ_OK);
    scan_seen seen = {0};
    assert_int_equal(scan_all(f->n, "LOG", NULL, scan_cb, &seen), FQ_OK);
    assert_int_equal(seen.n, 0);
    const char *bodies[] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++)
        publish(f->n, "log", bodies[i], NULL, 200 + (uint64_t)i);
    for (int i = 0; i < 3; i++) {
        fq_nio_event ev;
        assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
        assert_int_equal(ev.status, FQ_OK);
    }
    assert_int_equal(scan_all(f->n, "LOG", NULL, scan_cb, &seen), FQ_OK);
    assert_int_equal(seen.n, 3);
    for (int i = 0; i < 3; i++)
        assert_string_equal(seen.bodies[i], bodies[i]);
    assert_int_equal(seen.seq, 3);
    assert_int_equal(scan_all(f->n, "NOPE", NULL, scan_cb, &seen), FQ_ENOTFOUND);
}

/* What a scan of the journal-like stream JLOG saw: bodies "<k>:<i>". */
typedef struct jscan {
    int want;                   /* the subject's k; -1: any */
    uint64_t n;
    int last_i[16];             /* per k, the last i seen (order within a subject) */
    bool foreign, unordered;
} jscan;

static void jscan_cb(void *arg, const void *data, size_t len, int64_t ts_ms, uint64_t seq)
{
    (void)ts_ms;
    (void)seq;
    jscan *s = arg;
    int k = -1, i = -1;
    char b[32];
    snprintf(b, sizeof b, "%.*s", (int)len, (const char *)data);
    if (sscanf(b, "%d:%d", &k, &i) != 2 || k < 0 || k >= 16) {
        s->foreign = true;
        return;
    }
    s->foreign |= s->want >= 0 && k != s->want;
    s->unordered |= i != s->last_i[k] + 1;
    s->last_i[k] = i;
    s->n++;
}

static jscan jscan_run(fixture *f, int want)
{
    jscan s = {.want = want};
    for (int k = 0; k < 16; k++)
        s.last_i[k] = -1;
    char subj[32];
    snprintf(subj, sizeof subj, "jlog.%d", want);
    assert_int_equal(scan_all(f->n, "JLOG", want < 0 ? NULL : subj, jscan_cb, &s), FQ_OK);
    assert_false(s.foreign);
    assert_false(s.unordered);
    return s;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* One subject of a stream read alone (a partition's journal subject, as a
 * takeover reads it): only its messages, all of them, in order; a subject
 * with none reads nothing. With FAIRQ_BENCH_SCAN=N (messages per subject)
 * it times the whole stream's read against one subject's, alternating,
 * and prints the medians. */
static void test_subject_scan(void **state)
{
    fixture *f = *state;
    fq_nio_stream js = {.name = "JLOG", .subject = "jlog.*", .retention = FQ_NIO_LIMITS,
                        .replicas = 1};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &js, warn, sizeof warn), FQ_OK);
    const char *env = getenv("FAIRQ_BENCH_SCAN");
    int per = env ? atoi(env) : 100, parts = 16;
    assert_true(per > 0);
    for (int i = 0; i < per; i++) {
        for (int k = 0; k < parts; k++) {
            char subj[32], body[32];
            snprintf(subj, sizeof subj, "jlog.%d", k);
            snprintf(body, sizeof body, "%d:%d", k, i);
            publish(f->n, subj, body, NULL, 300);
        }
        for (int k = 0; k < parts; k++) {
            fq_nio_event ev;
            assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
            assert_int_equal(ev.status, FQ_OK);
        }
    }
    assert_int_equal(jscan_run(f, 5).n, (uint64_t)per);
    assert_int_equal(jscan_run(f, 15).n, (uint64_t)per);
    assert_int_equal(jscan_run(f, -1).n, (uint64_t)(per * parts));
    jscan none = {.want = 3};
    assert_int_equal(scan_all(f->n, "JLOG", "jlog.x", jscan_cb, &none), FQ_OK);
    assert_int_equal(none.n, 0);
    assert_int_equal(scan_all(f->n, "NOPE", "nope.1", jscan_cb, &none), FQ_ENOTFOUND);
    if (!env)
        return;
    enum { ROUNDS = 5 };
    long long whole[ROUNDS], one[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        long long t0 = nt_now_ms();
        jscan_run(f, -1);
        long long t1 = nt_now_ms();
        jscan_run(f, r % parts);
        whole[r] = t1 - t0;
        one[r] = nt_now_ms() - t1;
    }
    qsort(whole, ROUNDS, sizeof whole[0], cmp_ll);
    qsort(one, ROUNDS, sizeof one[0], cmp_ll);
    print_message("scan of %d messages on %d subjects: whole stream median %lld ms, one "
                  "subject (%d messages) median %lld ms, ratio %.1f\n", per * parts, parts,
                  whole[ROUNDS / 2], per, one[ROUNDS / 2],
                  one[ROUNDS / 2] ? (double)whole[ROUNDS / 2] / (double)one[ROUNDS / 2] : 0.0);
}

/* Publish count messages "<i>" to subj and wait for every PubAck. */
static void publish_many(fixture *f, const char *subj, int count)
{
    static uint64_t token = 1u << 22;
    char body[16];
    fq_nio_event ev;
    for (int sent = 0; sent < count;) {
        int n = count - sent < 1000 ? count - sent : 1000;
        for (int i = 0; i < n; i++) {
            snprintf(body, sizeof body, "%d", sent + i);
            publish(f->n, subj, body, NULL, token++);
        }
        for (int i = 0; i < n; i++) {
            assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
            assert_int_equal(ev.status, FQ_OK);
        }
        sent += n;
    }
}

/* A read back goes on beside the owner's loop (a partition's journal as
 * a replica takes it): the read returns at once, a few dozen of its
 * messages wait for the owner at most however long it does not poll, and
 * a publish made while it is under way has its PubAck polled before the
 * read ends, every message of the read coming in order all the same.
 * Before, the read was one call that returned once the last message had
 * been handed to a callback. */
static void test_scan_beside_the_loop(void **state)
{
    fixture *f = *state;
    fq_nio_stream js = {.name = "BIGLOG", .subject = "biglog.*", .retention = FQ_NIO_LIMITS,
                        .replicas = 1};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &js, warn, sizeof warn), FQ_OK);
    enum { N = 3000 };
    publish_many(f, "biglog.1", N);
    assert_int_equal(fq_nio_scan_start(f->n, 7, "BIGLOG", "biglog.1"), FQ_OK);
    nt_sleep_ms(300);   /* the thread reads ahead meanwhile, as far as it may */
    fq_nio_event ev[256];
    size_t k = fq_nio_poll(f->n, ev, 256, 1000), scans = 0;
    for (size_t i = 0; i < k; i++) {
        scans += ev[i].type == FQ_NIO_EV_SCAN;
        fq_nio_msg_destroy(ev[i].msg);
    }
    print_message("%zu of the read's messages waited for a poll 300 ms after it began\n", scans);
    assert_true(scans > 0 && scans <= 64);
    publish(f->n, "biglog.2", "x", NULL, 99);
    uint64_t seen = scans, next = scans;
    bool acked = false, ended = false;
    for (long long end = nt_now_ms() + 20000; !ended && nt_now_ms() < end;) {
        if (fq_nio_poll(f->n, ev, 1, 50) == 0)
            continue;
        if (ev[0].type == FQ_NIO_EV_PUBACK && ev[0].token == 99) {
            acked = true;
            print_message("the PubAck came after %" PRIu64 " of the read's %d messages\n", seen,
                          N);
        } else if (ev[0].type == FQ_NIO_EV_SCAN) {
            char b[16];
            snprintf(b, sizeof b, "%.*s", (int)fq_nio_msg_len(ev[0].msg),
                     (const char *)fq_nio_msg_data(ev[0].msg));
            assert_int_equal(atoi(b), (int)next);
            assert_int_equal(ev[0].token, 7);
            seen++;
            next++;
        } else if (ev[0].type == FQ_NIO_EV_SCAN_END) {
            assert_int_equal(ev[0].status, FQ_OK);
            assert_int_equal(ev[0].seq, N);
            ended = true;
        }
        fq_nio_msg_destroy(ev[0].msg);
    }
    assert_true(ended);
    assert_true(acked);
    assert_int_equal(seen, N);
}

/* A read stopped midway, or replaced by another, hands nothing more over:
 * no message or end of it is polled after the call, and the read that
 * replaced it comes whole, its own token on each event. */
static void test_scan_stopped_midway(void **state)
{
    fixture *f = *state;
    fq_nio_stream js = {.name = "STOPLOG", .subject = "stoplog.*", .retention = FQ_NIO_LIMITS,
                        .replicas = 1};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &js, warn, sizeof warn), FQ_OK);
    publish_many(f, "stoplog.1", 2000);
    publish_many(f, "stoplog.2", 10);
    fq_nio_event ev[64];
    for (int round = 0; round < 2; round++) {
        assert_int_equal(fq_nio_scan_start(f->n, 1, "STOPLOG", "stoplog.1"), FQ_OK);
        size_t got = 0;
        for (long long end = nt_now_ms() + 5000; got < 10 && nt_now_ms() < end;) {
            size_t k = fq_nio_poll(f->n, ev, 1, 50);
            got += k && ev[0].type == FQ_NIO_EV_SCAN;
            if (k)
                fq_nio_msg_destroy(ev[0].msg);
        }
        assert_int_equal(got, 10);
        if (round == 0) {
            /* stopped: nothing more of it */
            fq_nio_scan_stop(f->n);
            for (long long end = nt_now_ms() + 500; nt_now_ms() < end;) {
                size_t k = fq_nio_poll(f->n, ev, 64, 50);
                for (size_t i = 0; i < k; i++) {
                    assert_true(ev[i].type != FQ_NIO_EV_SCAN &&
                                ev[i].type != FQ_NIO_EV_SCAN_END);
                    fq_nio_msg_destroy(ev[i].msg);
                }
            }
            continue;
        }
        /* replaced: only the new read's events, all of them */
        assert_int_equal(fq_nio_scan_start(f->n, 2, "STOPLOG", "stoplog.2"), FQ_OK);
        uint64_t msgs = 0;
        bool ended = false;
        for (long long end = nt_now_ms() + 10000; !ended && nt_now_ms() < end;) {
            if (fq_nio_poll(f->n, ev, 1, 50) == 0)
                continue;
            if (ev[0].type == FQ_NIO_EV_SCAN || ev[0].type == FQ_NIO_EV_SCAN_END)
                assert_int_equal(ev[0].token, 2);
            msgs += ev[0].type == FQ_NIO_EV_SCAN;
            if (ev[0].type == FQ_NIO_EV_SCAN_END) {
                ended = true;
                assert_int_equal(ev[0].status, FQ_OK);
                assert_int_equal(ev[0].seq, 10);
            }
            fq_nio_msg_destroy(ev[0].msg);
        }
        assert_true(ended);
        assert_int_equal(msgs, 10);
    }
}

/* A read replaced while the server still pushes its messages, many times:
 * each replaced read's subscription ends while messages for it arrive,
 * which crashed nats.c's reader thread when the subscription was freed at
 * once (use after free); and no event of a replaced read is seen. */
static void test_scan_replaced_as_messages_arrive(void **state)
{
    fixture *f = *state;
    fq_nio_stream js = {.name = "REPLOG", .subject = "replog.*", .retention = FQ_NIO_LIMITS,
                        .replicas = 1};
    char warn[256];
    assert_int_equal(fq_nio_stream_ensure(f->n, &js, warn, sizeof warn), FQ_OK);
    publish_many(f, "replog.1", 2000);
    fq_nio_event ev[64];
    for (uint64_t token = 1; token <= 40; token++) {
        assert_int_equal(fq_nio_scan_start(f->n, token, "REPLOG", NULL), FQ_OK);
        size_t got = 0;
        for (long long end = nt_now_ms() + 5000; got == 0 && nt_now_ms() < end;) {
            size_t k = fq_nio_poll(f->n, ev, 64, 50);
            for (size_t i = 0; i < k; i++) {
                if (ev[i].type == FQ_NIO_EV_SCAN || ev[i].type == FQ_NIO_EV_SCAN_END)
                    assert_int_equal(ev[i].token, token);
                got += ev[i].type == FQ_NIO_EV_SCAN;
                fq_nio_msg_destroy(ev[i].msg);
            }
        }
        assert_true(got > 0);
    }
    fq_nio_scan_stop(f->n);
}

static void test_kv_lease_primitives(void **state)
{
    fixture *f = *state;
    char err[256];
    assert_int_equal(fq_nio_kv_ensure(f->n, "it_kv", 60000, 0, 0, 1, err, sizeof err), FQ_OK);
    uint64_t r1 = 0, r2 = 0, r3 = 0;
    assert_int_equal(fq_nio_kv_create(&r1, f->n, "it_kv", "lease", "a", 1), FQ_OK);
    assert_int_equal(fq_nio_kv_create(&r2, f->n, "it_kv", "lease", "b", 1), FQ_EEXIST);
    assert_int_equal(fq_nio_kv_update(&r2, f->n, "it_kv", "lease", "a2", 2, r1), FQ_OK);
    /* A stale revision loses. */
    assert_int_equal(fq_nio_kv_update(&r3, f->n, "it_kv", "lease", "b", 1, r1), FQ_EEXIST);
    char buf[16];
    uint64_t rev = 0;
    assert_int_equal(fq_nio_kv_get(buf, sizeof buf, &rev, f->n, "it_kv", "lease"), FQ_OK);
    assert_string_equal(buf, "a2");
    assert_int_equal(rev, r2);
    assert_int_equal(fq_nio_kv_get(buf, sizeof buf, &rev, f->n, "it_kv", "none"), FQ_ENOTFOUND);
}

/* The next KV or KV_SYNCED event of the watch, other events dropped. */
static fq_nio_event next_kv(fq_nio *n)
{
    long long end = nt_now_ms() + 10000;
    while (nt_now_ms() < end) {
        fq_nio_event ev;
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        if (ev.type == FQ_NIO_EV_KV || ev.type == FQ_NIO_EV_KV_SYNCED)
            return ev;
        fq_nio_msg_destroy(ev.msg);
    }
    fail_msg("no KV event within 10 s");
    return (fq_nio_event){0};
}

static void expect_kv(fq_nio *n, const char *key, const char *value, uint64_t epoch)
{
    fq_nio_event ev = next_kv(n);
    assert_int_equal(ev.type, FQ_NIO_EV_KV);
    assert_int_equal(ev.source, 1);
    assert_string_equal(ev.kv->key, key);
    assert_int_equal(ev.kv->deleted, value == NULL);
    assert_string_equal(ev.kv->value, value ? value : "");
    assert_int_equal(ev.kv->epoch, epoch);
    assert_true(ev.kv->rev > 0);
    fq_nio_kv_entry_destroy(ev.kv);
}

static void expect_synced(fq_nio *n, uint64_t epoch)
{
    fq_nio_event ev = next_kv(n);
    assert_int_equal(ev.type, FQ_NIO_EV_KV_SYNCED);
    assert_int_equal(ev.seq, epoch);
}

/* A watch delivers what the bucket holds, then says so, then each change;
 * after the server restarts it delivers every key again in a new epoch. */
static void test_kv_watch(void **state)
{
    fixture *f = *state;
    char err[256];
    assert_int_equal(fq_nio_kv_ensure(f->n, "it_watch", 0, 0, 0, 1, err, sizeof err), FQ_OK);
    uint64_t ra = 0, rb = 0, rd = 0;
    assert_int_equal(fq_nio_kv_create(&ra, f->n, "it_watch", "a", "{\"weight\":2}", 12), FQ_OK);
    assert_int_equal(fq_nio_kv_watch(f->n, 1, "it_watch"), FQ_OK);
    assert_int_equal(fq_nio_kv_watch(f->n, 1, "it_watch"), FQ_EINVAL);
    expect_kv(f->n, "a", "{\"weight\":2}", 1);
    expect_synced(f->n, 1);
    assert_int_equal(fq_nio_kv_create(&rb, f->n, "it_watch", "b", "x", 1), FQ_OK);
    expect_kv(f->n, "b", "x", 1);
    /* A delete is compare-and-set like a write. */
    assert_int_equal(fq_nio_kv_delete(&rd, f->n, "it_watch", "a", rb), FQ_EEXIST);
    assert_int_equal(fq_nio_kv_delete(&rd, f->n, "it_watch", "a", ra), FQ_OK);
    expect_kv(f->n, "a", NULL, 1);
    char buf[16];
    assert_int_equal(fq_nio_kv_get(buf, sizeof buf, NULL, f->n, "it_watch", "a"), FQ_ENOTFOUND);
    /* A deleted key is created again: create reads its delete marker back
     * and writes over it; a value stands in its way. */
    assert_int_equal(fq_nio_kv_create(&ra, f->n, "it_watch", "a", "y", 1), FQ_OK);
    assert_true(ra > rd);
    expect_kv(f->n, "a", "y", 1);
    assert_int_equal(fq_nio_kv_create(&rd, f->n, "it_watch", "a", "z", 1), FQ_EEXIST);
    assert_int_equal(natstest_stop(f->srv), 0);
    assert_int_equal(natstest_restart(f->srv), 0);
    /* Key order within a watch is the bucket's revision order. */
    expect_kv(f->n, "b", "x", 2);
    expect_kv(f->n, "a", "y", 2);
    expect_synced(f->n, 2);
}

/* A bucket made with bounds refuses a value past them (the server counts
 * a write's headers in its size). */
static void test_kv_bounds(void **state)
{
    fixture *f = *state;
    char err[256], big[200];
    uint64_t rev = 0;
    memset(big, 'x', sizeof big);
    assert_int_equal(fq_nio_kv_ensure(f->n, "it_bounded", 0, 4096, 128, 1, err, sizeof err), FQ_OK);
    assert_int_equal(fq_nio_kv_create(&rev, f->n, "it_bounded", "a", big, 8), FQ_OK);
    assert_int_equal(fq_nio_kv_create(&rev, f->n, "it_bounded", "b", big, sizeof big), FQ_EIO);
}

/* ---- many consumers on one fetch thread ---------------------------------- */

/* Publish count runs to subj through f's adapter and wait for every PubAck. */
static void publish_acked(fixture *f, const char *subj, int count)
{
    static uint64_t token = 1u << 20;
    for (int i = 0; i < count; i++)
        publish(f->n, subj, "run", NULL, token++);
    fq_nio_event ev;
    for (int i = 0; i < count; i++) {
        assert_true(wait_event(f->n, FQ_NIO_EV_PUBACK, &ev, 5000));
        assert_int_equal(ev.status, FQ_OK);
    }
}

/* A stream partitioned as fairq's are, <prefix>.<k>.<tenant>, and an
 * adapter of its own to consume it (the caller destroys it). */
static fq_nio *parts_setup(fixture *f, const char *stream, const char *prefix)
{
    char subject[64], warn[256], err[256];
    snprintf(subject, sizeof subject, "%s.*.*", prefix);
    fq_nio_stream st = {.name = stream, .subject = subject, .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(f->n, &st, warn, sizeof warn), FQ_OK);
    fq_nio *n = NULL;
    fq_nio_opts o = {.url = natstest_url(f->srv), .name = "it_natsio_parts"};
    assert_int_equal(fq_nio_create(&n, &o, err, sizeof err), FQ_OK);
    return n;
}

/* Consumer id of n on partition k of <prefix>, named <prefix>-p<k> (and
 * -<term> for a term other than 0). */
static void parts_consume(fq_nio *n, int id, const char *stream, const char *prefix, int k,
                          int batch, uint64_t term)
{
    char durable[64], filter[64];
    snprintf(durable, sizeof durable, "%s-p%d", prefix, k);
    snprintf(filter, sizeof filter, "%s.%d.*", prefix, k);
    fq_nio_consumer c = {.stream = stream, .durable = durable, .filter = filter,
                         .max_ack_pending = 100000, .ack_wait_ms = 600000, .batch = batch,
                         .term = term};
    assert_int_equal(fq_nio_consume(n, id, &c), FQ_OK);
}

/* The partition of a delivery's subject <prefix>.<k>.<tenant>. */
static int parts_of(const fq_nio_msg *m)
{
    const char *dot = strchr(fq_nio_msg_subject(m), '.');
    return dot ? atoi(dot + 1) : -1;
}

/* 32 consumers on one fetch thread, each filtered to its partition: every
 * run of every partition comes, once, from its own consumer. */
static void test_many_consumers_one_thread(void **state)
{
    fixture *f = *state;
    enum { P = 32, EACH = 20 };
    fq_nio *n = parts_setup(f, "MANY", "many");
    char subj[32];
    for (int k = 0; k < P; k++) {
        snprintf(subj, sizeof subj, "many.%d.t%d", k, k);
        publish_acked(f, subj, EACH);
        parts_consume(n, 100 + k, "MANY", "many", k, 8, 0);
    }
    int got[P] = {0}, made = 0, total = 0;
    fq_nio_event evs[256];
    for (long long end = nt_now_ms() + 20000; total < P * EACH && nt_now_ms() < end;) {
        size_t k = fq_nio_poll(n, evs, 256, 50);
        for (size_t i = 0; i < k; i++) {
            if (evs[i].type == FQ_NIO_EV_CONSUMER) {
                assert_int_equal(evs[i].status, FQ_OK);
                made++;
            }
            if (evs[i].type != FQ_NIO_EV_MSG)
                continue;
            int part = parts_of(evs[i].msg);
            assert_int_equal(evs[i].source, 100 + part);     /* tagged with its consumer */
            got[part]++;
            total++;
            assert_int_equal(fq_nio_ack(n, evs[i].source, &evs[i].ack), FQ_OK);
            fq_nio_msg_drop(n, evs[i].msg);
        }
    }
    assert_int_equal(made, P);
    for (int k = 0; k < P; k++)
        assert_int_equal(got[k], EACH);
    /* Nothing comes twice. */
    size_t k = fq_nio_poll(n, evs, 256, 300);
    for (size_t i = 0; i < k; i++) {
        assert_int_not_equal(evs[i].type, FQ_NIO_EV_MSG);
        fq_nio_msg_destroy(evs[i].msg);
    }
    fq_nio_destroy(n);
}

/* Under load, one consumer is stopped and another added: after the stop
 * nothing of the stopped one arrives (what was queued is dropped), and it
 * is left on the server; the added one gets all its runs; the others
 * lose nothing. Started again, the stopped one is deleted and made afresh
 * (its runs' ack wait is 10 minutes): it gets what it had not acked, so
 * that every run of its partition comes (one acked just before the delete
 * may come again: the server takes acks in after it). */
static void test_consumers_added_and_removed_under_load(void **state)
{
    fixture *f = *state;
    enum { P = 8, EACH = 300, GONE = 3, ADDED = 8 };
    fq_nio *n = parts_setup(f, "LOAD", "load");
    char subj[32];
    for (int k = 0; k <= ADDED; k++) {
        snprintf(subj, sizeof subj, "load.%d.t", k);
        publish_acked(f, subj, EACH);
    }
    for (int k = 0; k < P; k++)
        parts_consume(n, k, "LOAD", "load", k, 16, 0);
    int acked[P + 1] = {0}, total = 0;
    static bool seen[(P + 1) * EACH + 1];
    bool stopped = false;
    fq_nio_event evs[64];
    /* Slowly: 64 events a poll, so that every consumer still has runs to
     * come when the change is made. */
    for (long long end = nt_now_ms() + 20000; total < (P + 1) * EACH && nt_now_ms() < end;) {
        size_t k = fq_nio_poll(n, evs, 64, 50);
        for (size_t i = 0; i < k; i++) {
            if (evs[i].type != FQ_NIO_EV_MSG)
                continue;
            int part = parts_of(evs[i].msg);
            assert_int_equal(evs[i].source, part);
            assert_false(stopped && part == GONE);
            acked[part]++;
            total++;
            assert_true(evs[i].ack.sseq <= (P + 1) * EACH);
            seen[evs[i].ack.sseq] = true;
            assert_int_equal(fq_nio_ack(n, part, &evs[i].ack), FQ_OK);
            fq_nio_msg_drop(n, evs[i].msg);
        }
        if (!stopped && acked[GONE] >= 10) {
            assert_true(acked[GONE] < EACH);
            for (int j = 0; j < P; j++)
                if (j != GONE)
                    assert_true(acked[j] < EACH);       /* under load */
            assert_int_equal(fq_nio_consume_stop(n, GONE), FQ_OK);
            assert_int_equal(fq_nio_consume_stop(n, GONE), FQ_EINVAL);
            parts_consume(n, ADDED, "LOAD", "load", ADDED, 16, 0);
            stopped = true;
            total += EACH - acked[GONE];    /* not coming */
        }
    }
    assert_true(stopped);
    for (int k = 0; k <= ADDED; k++)
        if (k != GONE)
            assert_int_equal(acked[k], EACH);
    /* The stopped consumer is left on the server, for whoever consumes
     * its subjects next. */
    assert_int_equal(fq_nio_flush(n, 5000), FQ_OK);
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    jsConsumerInfo *ci = NULL;
    assert_int_equal(js_GetConsumerInfo(&ci, js, "LOAD", "load-p3", NULL, NULL), NATS_OK);
    jsConsumerInfo_Destroy(ci);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    /* Started again: the rest of its partition, each run once. */
    int before = acked[GONE];
    parts_consume(n, GONE, "LOAD", "load", GONE, 16, 0);
    for (long long end = nt_now_ms() + 10000; acked[GONE] < EACH && nt_now_ms() < end;) {
        size_t k = fq_nio_poll(n, evs, 64, 50);
        for (size_t i = 0; i < k; i++) {
            if (evs[i].type != FQ_NIO_EV_MSG)
                continue;
            assert_int_equal(evs[i].source, GONE);
            assert_true(evs[i].ack.sseq <= (P + 1) * EACH);
            acked[GONE] += !seen[evs[i].ack.sseq];
            seen[evs[i].ack.sseq] = true;
            assert_int_equal(fq_nio_ack(n, GONE, &evs[i].ack), FQ_OK);
            fq_nio_msg_drop(n, evs[i].msg);
        }
    }
    assert_true(before < EACH);
    assert_int_equal(acked[GONE], EACH);
    size_t k = fq_nio_poll(n, evs, 64, 300);
    for (size_t i = 0; i < k; i++) {
        assert_int_not_equal(evs[i].type, FQ_NIO_EV_MSG);
        fq_nio_msg_destroy(evs[i].msg);
    }
    fq_nio_destroy(n);
}

/* A flooded consumer does not starve a quiet one on the same thread: with
 * thousands of runs of the flooded partition waiting, a run published to
 * the quiet partition comes after at most a few batches of the flood,
 * not after the flood. */
static void test_flood_does_not_starve_quiet(void **state)
{
    fixture *f = *state;
    enum { FLOOD = 3000, BATCH = 16 };
    fq_nio *n = parts_setup(f, "FLOOD", "flood");
    publish_acked(f, "flood.0.loud", FLOOD);
    parts_consume(n, 0, "FLOOD", "flood", 0, BATCH, 0);
    parts_consume(n, 1, "FLOOD", "flood", 1, BATCH, 0);
    fq_nio_event evs[8];
    int loud = 0, loud_before = -1, made = 0;
    /* The flood is under way, both consumers made: then the quiet run. */
    while (made < 2 || loud < 2 * BATCH) {
        size_t k = fq_nio_poll(n, evs, 1, 5000);
        assert_int_equal(k, 1);
        made += evs[0].type == FQ_NIO_EV_CONSUMER;
        if (evs[0].type == FQ_NIO_EV_MSG) {
            assert_int_equal(evs[0].source, 0);
            loud++;
            fq_nio_msg_drop(n, evs[0].msg);
        }
    }
    publish_acked(f, "flood.1.quiet", 1);
    for (long long end = nt_now_ms() + 10000; loud_before < 0 && nt_now_ms() < end;) {
        /* a slow owner: a few events at a time */
        size_t k = fq_nio_poll(n, evs, 8, 50);
        for (size_t i = 0; i < k; i++) {
            if (evs[i].type != FQ_NIO_EV_MSG)
                continue;
            if (evs[i].source == 1)
                loud_before = loud;
            else
                loud++;
            fq_nio_msg_drop(n, evs[i].msg);
        }
    }
    assert_true(loud_before >= 2 * BATCH);
    /* What was queued and in flight for the flood when the quiet run was
     * published: at most three batches (two waiting for the owner, one
     * open), and a batch granted meanwhile. */
    assert_true(loud_before - 2 * BATCH <= 4 * BATCH);
    fq_nio_destroy(n);
}

/* Poll n until count consumers are made, each in term (FQ_NIO_EV_CONSUMER,
 * FQ_OK); other events are dropped. */
static void parts_made(fq_nio *n, int count, uint64_t term)
{
    fq_nio_event ev;
    for (int made = 0; made < count; made++) {
        assert_true(wait_event(n, FQ_NIO_EV_CONSUMER, &ev, 10000));
        assert_int_equal(ev.status, FQ_OK);
        assert_int_equal(ev.seq, term);
    }
}

/* A replica frozen past its lease names all its consumers for new terms
 * at once (issue 16): the fetch thread makes them one at a time, in the
 * order asked, and pulls those made while it makes the others. With 32
 * consumers renamed, a run waiting for the first comes before the last is
 * made (it came after all of them: 8 to 11 s on a 3-node cluster), and
 * from the new term's consumer, once it is made. */
static void test_renamed_consumers_pulled_as_made(void **state)
{
    fixture *f = *state;
    enum { C = 32 };
    fq_nio *n = parts_setup(f, "RENAME", "ren");
    for (int k = 0; k < C; k++)
        parts_consume(n, k, "RENAME", "ren", k, 8, 1);
    parts_made(n, C, 1);
    /* A run of partition 0, delivered in term 1 and not acked. */
    publish_acked(f, "ren.0.t", 1);
    fq_nio_event ev;
    assert_true(wait_event(n, FQ_NIO_EV_MSG, &ev, 5000));
    assert_int_equal(ev.source, 0);
    fq_nio_msg_drop(n, ev.msg);
    for (int k = 0; k < C; k++)
        assert_int_equal(fq_nio_consume_term(n, k, 2), FQ_OK);
    /* Where each event comes in the order of events: each consumer made in
     * term 2, and the run delivered again by term 2's consumer. */
    int made_at[C], made = 0, msg_at = 0, at = 0;
    memset(made_at, 0, sizeof made_at);
    for (long long end = nt_now_ms() + 20000; (made < C || !msg_at) && nt_now_ms() < end;) {
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        at++;
        if (ev.type == FQ_NIO_EV_CONSUMER) {
            assert_int_equal(ev.status, FQ_OK);
            assert_int_equal(ev.seq, 2);
            assert_int_equal(made_at[ev.source], 0);
            made_at[ev.source] = at;
            made++;
        } else if (ev.type == FQ_NIO_EV_MSG) {
            assert_int_equal(ev.source, 0);
            assert_int_equal(msg_at, 0);
            assert_int_equal(ev.ack.sseq, 1);
            msg_at = at;
            assert_int_equal(fq_nio_ack(n, 0, &ev.ack), FQ_OK);
            fq_nio_msg_drop(n, ev.msg);
        }
    }
    assert_int_equal(made, C);
    assert_true(msg_at > made_at[0]);       /* not handed over before term 2's was made */
    assert_true(msg_at < made_at[C - 1]);   /* nor after every consumer was made */
    for (int k = 1; k < C; k++)
        assert_true(made_at[k] > made_at[k - 1]);   /* in the order asked */
    fq_nio_destroy(n);
}

/* A consumer is pulled only while it is made as its owner wants: one
 * stopped while the fetch thread is busy making the others (its stop not
 * carried out yet, its consumer live on the server) asks for nothing more,
 * so a run published to its partition after the stop waits in the stream
 * for the partition's next owner, not in a consumer nobody reads until its
 * ack wait runs out. */
static void test_stopped_consumer_not_pulled(void **state)
{
    fixture *f = *state;
    enum { C = 32, GONE = C - 1 };
    fq_nio *n = parts_setup(f, "STOPPED", "stp");
    for (int k = 0; k < C; k++)
        parts_consume(n, k, "STOPPED", "stp", k, 8, 1);
    parts_made(n, C, 1);
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    /* Paused, GONE sends no pull, and the one it had open expires. The
     * server is asked only after a first pause: a pull the fetch thread
     * decided on just before the pause may still be in nats.c's buffer. */
    fq_nio_consume_pause(n, GONE, true);
    jsConsumerInfo *ci = NULL;
    bool idle = false;
    for (long long end = nt_now_ms() + 5000; !idle && nt_now_ms() < end;) {
        nt_sleep_ms(50);
        assert_int_equal(js_GetConsumerInfo(&ci, js, "STOPPED", "stp-p31-1", NULL, NULL),
                         NATS_OK);
        idle = ci->NumWaiting == 0;
        jsConsumerInfo_Destroy(ci);
    }
    assert_true(idle);
    /* The others renamed, then GONE stopped (kept on the server) and no
     * longer paused: it is due last. */
    for (int k = 0; k < GONE; k++)
        assert_int_equal(fq_nio_consume_term(n, k, 2), FQ_OK);
    assert_int_equal(fq_nio_consume_stop(n, GONE), FQ_OK);
    fq_nio_consume_pause(n, GONE, false);
    publish_acked(f, "stp.31.t", 1);
    parts_made(n, GONE, 2);
    assert_int_equal(js_GetConsumerInfo(&ci, js, "STOPPED", "stp-p31-1", NULL, NULL), NATS_OK);
    assert_int_equal(ci->NumAckPending, 0);
    assert_int_equal(ci->Delivered.Consumer, 0);
    assert_int_equal(ci->NumPending, 1);
    jsConsumerInfo_Destroy(ci);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    fq_nio_destroy(n);
}

/* Wait until consumer name of stream has no pull request open (one sent
 * before a fence or a pause expires within a pull's wait), up to 5 s. */
static void pulls_idle(fixture *f, const char *stream, const char *name)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(f->srv)), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    bool idle = false;
    for (long long end = nt_now_ms() + 5000; !idle && nt_now_ms() < end;) {
        nt_sleep_ms(50);
        jsConsumerInfo *ci = NULL;
        assert_int_equal(js_GetConsumerInfo(&ci, js, stream, name, NULL, NULL), NATS_OK);
        idle = ci->NumWaiting == 0;
        jsConsumerInfo_Destroy(ci);
    }
    assert_true(idle);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* Each consumer has a fence of its own besides the process's (issue 16:
 * a partition's late lease renewal stops that partition alone): past
 * consumer 0's, it is not pulled and its acks fail, while consumer 1 goes
 * on, its run delivered and acked; lifted, consumer 0's run comes. The
 * process's fence, the only one before, stops consumer 1 too. */
static void test_fence_per_consumer(void **state)
{
    fixture *f = *state;
    fq_nio *n = parts_setup(f, "FENCEP", "fnp");
    parts_consume(n, 0, "FENCEP", "fnp", 0, 8, 1);
    parts_consume(n, 1, "FENCEP", "fnp", 1, 8, 1);
    parts_made(n, 2, 1);
    publish_acked(f, "fnp.0.t", 1);
    fq_nio_event ev;
    assert_true(wait_event(n, FQ_NIO_EV_MSG, &ev, 5000));
    assert_int_equal(ev.source, 0);
    fq_nio_ackref first = ev.ack;
    fq_nio_msg_destroy(ev.msg);
    fq_nio_fence_consumer(n, 0, fq_nio_mono_ms());
    assert_int_equal(fq_nio_ack(n, 0, &first), FQ_EIO);
    pulls_idle(f, "FENCEP", "fnp-p0-1");
    publish_acked(f, "fnp.0.t", 1);
    publish_acked(f, "fnp.1.t", 1);
    assert_true(wait_event(n, FQ_NIO_EV_MSG, &ev, 5000));
    assert_int_equal(ev.source, 1);
    assert_int_equal(fq_nio_ack(n, 1, &ev.ack), FQ_OK);
    fq_nio_msg_destroy(ev.msg);
    assert_false(wait_event(n, FQ_NIO_EV_MSG, &ev, 1000));   /* partition 0's waits */
    fq_nio_fence_consumer(n, 0, UINT64_MAX);
    assert_true(wait_event(n, FQ_NIO_EV_MSG, &ev, 5000));
    assert_int_equal(ev.source, 0);
    assert_int_equal(ev.ack.sseq, first.sseq + 1);
    assert_int_equal(fq_nio_ack(n, 0, &ev.ack), FQ_OK);
    fq_nio_msg_destroy(ev.msg);
    /* The process's fence: consumer 1's next run does not come. */
    fq_nio_fence(n, fq_nio_mono_ms());
    assert_int_equal(fq_nio_ack(n, 1, &ev.ack), FQ_EIO);
    pulls_idle(f, "FENCEP", "fnp-p1-1");
    publish_acked(f, "fnp.1.t", 1);
    assert_false(wait_event(n, FQ_NIO_EV_MSG, &ev, 1000));
    fq_nio_fence(n, UINT64_MAX);
    assert_true(wait_event(n, FQ_NIO_EV_MSG, &ev, 5000));
    assert_int_equal(ev.source, 1);
    fq_nio_msg_destroy(ev.msg);
    fq_nio_destroy(n);
}

/* A consumer whose API calls go unanswered (a permission denies them, a
 * stream's leader lost) costs the others nothing: the fetch thread waits
 * for none of its answers, so a consumer asked after it is made, and
 * delivers, before its first try is given up on (the API's wait). Here
 * the server lets the adapter publish nothing to the delete of hol-p0,
 * asked first, which every make of it starts with; hol-p1, asked next,
 * must be made and deliver its run before hol-p0 first fails. When that
 * delete was waited for on the fetch thread, hol-p1 was made only after
 * it failed. */
static void test_unanswered_consumer_costs_the_others_nothing(void **state)
{
    fixture *f = *state;
    char conf[600], err[256], warn[256];
    snprintf(conf, sizeof conf, "%s/hole.conf", natstest_dir(f->srv));
    FILE *out = fopen(conf, "w");
    assert_non_null(out);
    fputs("authorization { users = [ { user: rep, password: rep, permissions: {\n"
          "  publish: { deny: [\"$JS.API.CONSUMER.DELETE.HOLE.hol-p0\"] } } } ] }\n", out);
    fclose(out);
    natstest *srv = NULL;
    assert_int_equal(natstest_start(&srv, (const char *const[]){"-c", conf, NULL}), 0);
    fq_nio *n = NULL;
    fq_nio_opts o = {.url = natstest_url(srv), .name = "it_natsio_hole", .user = "rep",
                     .password = "rep", .pub_wait_ms = 2000, .api_wait_ms = 1000};
    assert_int_equal(fq_nio_create(&n, &o, err, sizeof err), FQ_OK);
    fq_nio_stream st = {.name = "HOLE", .subject = "hol.*.*", .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(n, &st, warn, sizeof warn), FQ_OK);
    parts_consume(n, 0, "HOLE", "hol", 0, 8, 0);
    parts_consume(n, 1, "HOLE", "hol", 1, 8, 0);
    fq_nio_hdr h[] = {{"Nats-Msg-Id", "hole-1"}};
    fq_nio_out m = {.subject = "hol.1.t", .data = "run", .len = 3, .hdrs = h, .n_hdrs = 1};
    assert_int_equal(fq_nio_publish(n, &m, 1), FQ_OK);
    /* where each event comes in the order of events */
    int failed = 0, wrong = 0, at = 0, made = 0, run = 0;
    for (long long end = nt_now_ms() + 10000; !(run && failed) && nt_now_ms() < end;) {
        fq_nio_event ev;
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        at++;
        if (ev.type == FQ_NIO_EV_CONSUMER && ev.source == 0) {
            wrong += ev.status == FQ_OK;
            failed = failed ? failed : at;
        } else if (ev.type == FQ_NIO_EV_CONSUMER && ev.source == 1) {
            wrong += ev.status != FQ_OK;
            made = made ? made : at;
        } else if (ev.type == FQ_NIO_EV_MSG) {
            wrong += ev.source != 1 || fq_nio_ack(n, 1, &ev.ack) != FQ_OK;
            run = run ? run : at;
        }
        fq_nio_msg_destroy(ev.msg);
    }
    print_message("events: hol-p0 first failed at %d; hol-p1 made at %d, its run at %d\n",
                  failed, made, run);
    fq_nio_destroy(n);
    natstest_destroy(srv);      /* before the checks: a failed one leaves no server */
    assert_int_equal(wrong, 0);
    assert_true(failed > 0);
    assert_true(made > 0 && made < failed);
    assert_true(run > made && run < failed);
}

/* A consumer's create that goes unanswered (the server denies its publish
 * here) costs the others nothing: the fetch thread sends each create and
 * takes the next consumer, so one asked for after it is made, and
 * fetches, before the first is given up on. Created one at a time, each
 * waited for its answer (on a 3-node cluster its group's leader election,
 * 0.13 to 0.8 s: 32 took 15 s), and the second here for the API's wait. */
static void test_unanswered_create_costs_the_others_nothing(void **state)
{
    fixture *f = *state;
    char conf[600], err[256], warn[256];
    snprintf(conf, sizeof conf, "%s/nocreate.conf", natstest_dir(f->srv));
    FILE *out = fopen(conf, "w");
    assert_non_null(out);
    fputs("authorization { users = [ { user: u, password: u, permissions: {\n"
          "  publish: { deny: [\"$JS.API.CONSUMER.DURABLE.CREATE.NOCREATE.>\"] } } } ] }\n", out);
    fclose(out);
    natstest *srv = NULL;
    assert_int_equal(natstest_start(&srv, (const char *const[]){"-c", conf, NULL}), 0);
    fq_nio *n = NULL;
    fq_nio_opts o = {.url = natstest_url(srv), .name = "it_natsio_nocreate", .user = "u",
                     .password = "u", .api_wait_ms = 2000};
    assert_int_equal(fq_nio_create(&n, &o, err, sizeof err), FQ_OK);
    fq_nio_stream no = {.name = "NOCREATE", .subject = "nocreate.*.*",
                        .retention = FQ_NIO_WORKQUEUE, .replicas = 1};
    fq_nio_stream yes = {.name = "YES", .subject = "yes.*.*", .retention = FQ_NIO_WORKQUEUE,
                         .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(n, &no, warn, sizeof warn), FQ_OK);
    assert_int_equal(fq_nio_stream_ensure(n, &yes, warn, sizeof warn), FQ_OK);
    publish(n, "yes.0.t", "run", NULL, 1);
    fq_nio_event ev;
    assert_true(wait_event(n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    parts_consume(n, 0, "NOCREATE", "nocreate", 0, 8, 1);
    parts_consume(n, 1, "YES", "yes", 0, 8, 1);
    /* Where each event comes in the order of events. */
    int made = 0, msg = 0, failed = 0, at = 0;
    for (long long end = nt_now_ms() + 10000; !failed && nt_now_ms() < end;) {
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        at++;
        if (ev.type == FQ_NIO_EV_CONSUMER && ev.source == 1 && ev.status == FQ_OK && !made)
            made = at;
        if (ev.type == FQ_NIO_EV_CONSUMER && ev.source == 0) {
            assert_int_equal(ev.status, FQ_EIO);
            failed = at;
        }
        if (ev.type == FQ_NIO_EV_MSG) {
            assert_int_equal(ev.source, 1);
            msg = msg ? msg : at;
            fq_nio_msg_destroy(ev.msg);
        }
    }
    assert_true(failed > 0);            /* given up on after the API's wait */
    assert_true(made > 0 && made < failed);
    assert_true(msg > made && msg < failed);
    fq_nio_destroy(n);
    natstest_destroy(srv);
}

/* Whether file path contains needle. */
static bool file_has(const char *path, const char *needle)
{
    char buf[65536];
    FILE *in = fopen(path, "r");
    if (!in)
        return false;
    size_t k = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[k] = '\0';
    return strstr(buf, needle) != NULL;
}

/* A create in flight when the connection is lost is not waited for after
 * the reconnect: its answer, if any, went with the old connection, and the
 * consumer is made again at once like the others, not after the API's wait
 * (30 s here). The first server denies the create, so that it is in flight
 * (unanswered) when the server restarts without the denial. */
static void test_create_in_flight_at_reconnect_made_again(void **state)
{
    fixture *f = *state;
    char conf[600], log[600], err[256], warn[256];
    snprintf(conf, sizeof conf, "%s/recreate.conf", natstest_dir(f->srv));
    FILE *out = fopen(conf, "w");
    assert_non_null(out);
    fputs("authorization { users = [ { user: u, password: u, permissions: {\n"
          "  publish: { deny: [\"$JS.API.CONSUMER.DURABLE.CREATE.LOST.>\"] } } } ] }\n", out);
    fclose(out);
    natstest *srv = NULL;
    assert_int_equal(natstest_start(&srv, (const char *const[]){"-c", conf, NULL}), 0);
    snprintf(log, sizeof log, "%s/nats.log", natstest_dir(srv));
    fq_nio *n = NULL;
    fq_nio_opts o = {.url = natstest_url(srv), .name = "it_natsio_lost", .user = "u",
                     .password = "u", .api_wait_ms = 30000};
    assert_int_equal(fq_nio_create(&n, &o, err, sizeof err), FQ_OK);
    fq_nio_stream lost = {.name = "LOST", .subject = "lost.*.*", .retention = FQ_NIO_WORKQUEUE,
                          .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(n, &lost, warn, sizeof warn), FQ_OK);
    publish(n, "lost.0.t", "run", NULL, 1);
    fq_nio_event ev;
    assert_true(wait_event(n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    parts_consume(n, 0, "LOST", "lost", 0, 8, 1);
    /* The create is sent (the server says it denied it), and unanswered. */
    long long end = nt_now_ms() + 10000;
    while (nt_now_ms() < end && !file_has(log, "$JS.API.CONSUMER.DURABLE.CREATE.LOST"))
        nt_sleep_ms(50);
    assert_true(file_has(log, "$JS.API.CONSUMER.DURABLE.CREATE.LOST"));
    out = fopen(conf, "w");
    assert_non_null(out);
    fputs("authorization { users = [ { user: u, password: u } ] }\n", out);
    fclose(out);
    assert_int_equal(natstest_restart(srv), 0);
    /* Made, and its run delivered, well within the 30 s of the API's wait. */
    bool made = false, got = false;
    for (end = nt_now_ms() + 15000; !got && nt_now_ms() < end;) {
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        if (ev.type == FQ_NIO_EV_CONSUMER && ev.source == 0) {
            assert_int_equal(ev.status, FQ_OK);
            made = true;
        }
        if (ev.type == FQ_NIO_EV_MSG) {
            assert_true(made);
            got = true;
            fq_nio_msg_destroy(ev.msg);
        }
    }
    assert_true(made);
    assert_true(got);
    fq_nio_destroy(n);
    natstest_destroy(srv);
}

/* Write conf: user u, trace on (the log shows each SUB), and deny, if
 * given, to u's subscriptions; for a reload of srv, its store (a reload
 * compares the store directory too: the file must name the one -sd gave). */
static void noans_conf(const char *conf, const natstest *srv, const char *deny)
{
    FILE *out = fopen(conf, "w");
    assert_non_null(out);
    fprintf(out, "trace: true\nauthorization { users = [ { user: u, password: u%s%s%s } ] }\n",
            deny ? ", permissions: { subscribe: { allow: [\">\"], deny: [\"" : "",
            deny ? deny : "", deny ? "\"] } }" : "");
    if (srv)
        fprintf(out, "jetstream { store_dir: \"%s/store\" }\n", natstest_dir(srv));
    fclose(out);
}

/* How many times needle occurs in the file at path (its first 1 MiB). */
static int file_count(const char *path, const char *needle)
{
    static char buf[1 << 20];
    FILE *in = fopen(path, "r");
    if (!in)
        return 0;
    size_t k = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[k] = '\0';
    int count = 0;
    for (const char *p = buf; (p = strstr(p, needle)); p += strlen(needle))
        count++;
    return count;
}

/* Reload srv's config and wait until the server says it did. */
static void noans_reload(natstest *srv, const char *log)
{
    int before = file_count(log, "Reloaded server configuration");
    assert_int_equal(natstest_reload(srv), 0);
    long long end = nt_now_ms() + 5000;
    while (nt_now_ms() < end && file_count(log, "Reloaded server configuration") == before)
        nt_sleep_ms(20);
    assert_true(file_count(log, "Reloaded server configuration") > before);
}

/* A server of its own for a test of unanswered consumer replies, named
 * NAME, its inbox prefix INBOX: stream NOANS with one run on noans.0.t, consumer 1 made (it starts
 * the fetch thread's subscription, <inbox>.>), then consumer 0's replies,
 * <inbox>.0.<number>, denied by a reload. conf and log (600 bytes each)
 * get the server's config and log paths. */
static void noans_start(natstest **srv, fq_nio **n, char *conf, char *log, const fixture *f,
                        const char *name, const char *inbox, int api_wait_ms)
{
    char err[256], warn[256], id[64], deny[160];
    snprintf(conf, 600, "%s/%s.conf", natstest_dir(f->srv), name);
    noans_conf(conf, NULL, NULL);
    assert_int_equal(natstest_start(srv, (const char *const[]){"-c", conf, NULL}), 0);
    snprintf(log, 600, "%s/nats.log", natstest_dir(*srv));
    snprintf(id, sizeof id, "it_natsio_%s", name);
    fq_nio_opts o = {.url = natstest_url(*srv), .name = id, .user = "u", .password = "u",
                     .inbox_prefix = inbox, .api_wait_ms = api_wait_ms};
    assert_int_equal(fq_nio_create(n, &o, err, sizeof err), FQ_OK);
    fq_nio_stream st = {.name = "NOANS", .subject = "noans.*.*", .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(*n, &st, warn, sizeof warn), FQ_OK);
    publish(*n, "noans.0.t", "run", NULL, 1);
    fq_nio_event ev;
    assert_true(wait_event(*n, FQ_NIO_EV_PUBACK, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    parts_consume(*n, 1, "NOANS", "noans", 1, 8, 1);
    assert_true(wait_event(*n, FQ_NIO_EV_CONSUMER, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    static char trace[65536];
    FILE *in = fopen(log, "r");
    assert_non_null(in);
    trace[fread(trace, 1, sizeof trace - 1, in)] = '\0';
    fclose(in);
    char want[80];
    snprintf(want, sizeof want, "SUB %s.", inbox);
    const char *sub = NULL;
    for (const char *p = trace; !sub && (p = strstr(p, want)); p++) {
        const char *sp = strchr(p + 4, ' ');
        if (sp && sp - p > 6 && strncmp(sp - 2, ".>", 2) == 0)
            sub = p + 4;
    }
    assert_non_null(sub);
    snprintf(deny, sizeof deny, "%.*s0.*", (int)(strchr(sub, ' ') - sub - 1), sub);
    noans_conf(conf, *srv, deny);
    noans_reload(*srv, log);
}

/* A create whose answer is lost (the server made the consumer, and the
 * adapter never hears so: its subscription may not receive consumer 0's
 * replies until the server's permissions are reloaded) is sent again as
 * it was after the API's wait, not deleted and made afresh: on a 3-node
 * cluster a create is answered once its consumer's group has elected a
 * leader, which a group whose first vote went unanswered does only at its
 * next election, 4 to 9 s on; deleted and made again, the new group could
 * lose its first vote too (a frozen replica's last partition back after 14
 * and 15 s). The consumer made is the one the server made first: its
 * creation time is unchanged. */
static void test_unanswered_create_sent_again_not_deleted(void **state)
{
    fixture *f = *state;
    char conf[600], log[600], url[128];
    natstest *srv = NULL;
    fq_nio *n = NULL;
    noans_start(&srv, &n, conf, log, f, "noanswer", "_IT_NOANS", 2000);
    fq_nio_event ev;
    parts_consume(n, 0, "NOANS", "noans", 0, 8, 1);
    /* The server makes it; the adapter does not hear so. */
    snprintf(url, sizeof url, "nats://u:u@127.0.0.1:%d", natstest_port(srv));
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, url), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    int64_t created = 0;
    for (long long end = nt_now_ms() + 5000; !created && nt_now_ms() < end; nt_sleep_ms(20)) {
        jsConsumerInfo *ci = NULL;
        if (js_GetConsumerInfo(&ci, js, "NOANS", "noans-p0-1", NULL, NULL) == NATS_OK)
            created = ci->Created;
        jsConsumerInfo_Destroy(ci);
    }
    assert_true(created != 0);
    /* Unanswered for the API's wait at least once, then the replies
     * allowed again, once the server has answered the create sent again
     * (its audit advisory traced): a reload while JetStream takes a
     * request may answer it with an error (JetStream's accounts are
     * reloaded too), and a create failed so is made afresh. */
    int unanswered = 0;
    bool made = false, got = false;
    long long end = nt_now_ms() + 10000;
    while (!unanswered && nt_now_ms() < end) {
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        unanswered += ev.type == FQ_NIO_EV_CONSUMER && ev.source == 0 && ev.status == FQ_EIO;
        made |= ev.type == FQ_NIO_EV_CONSUMER && ev.source == 0 && ev.status == FQ_OK;
        fq_nio_msg_destroy(ev.msg);
    }
    while (nt_now_ms() < end && file_count(log, "CREATE.NOANS.noans-p0-1\\\"") < 2)
        nt_sleep_ms(20);
    noans_conf(conf, srv, NULL);
    noans_reload(srv, log);
    for (end = nt_now_ms() + 10000; !got && nt_now_ms() < end;) {
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        if (ev.type == FQ_NIO_EV_CONSUMER && ev.source == 0) {
            unanswered += ev.status == FQ_EIO;
            made = ev.status == FQ_OK;
        }
        if (ev.type == FQ_NIO_EV_MSG) {
            got = made && ev.source == 0 && fq_nio_ack(n, 0, &ev.ack) == FQ_OK;
            fq_nio_msg_destroy(ev.msg);
        }
    }
    jsConsumerInfo *ci = NULL;
    int64_t now_created = js_GetConsumerInfo(&ci, js, "NOANS", "noans-p0-1", NULL, NULL) ==
                                  NATS_OK
                              ? ci->Created
                              : 0;
    jsConsumerInfo_Destroy(ci);
    print_message("unanswered %d times; %s, its run %s; created %s\n", unanswered,
                  made ? "made" : "not made", got ? "delivered" : "not delivered",
                  now_created == created ? "unchanged" : "anew (deleted and made again)");
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    fq_nio_destroy(n);
    natstest_destroy(srv);      /* before the checks: a failed one leaves no server */
    assert_true(unanswered >= 1);
    assert_true(made);
    assert_true(got);
    assert_true(now_created == created);
}

/* A create unanswered when its replica froze past its lease is not sent
 * again as the replica resumes (past its fence: the term may be another
 * replica's by now, and our create could make again the consumer the next
 * owner has just deleted, refusing its own on the work queue), but held
 * until the fence is lifted, then sent again and made. Here the test
 * process itself is stopped (SIGSTOP, by a shell it starts) for longer
 * than the API's wait, with consumer 0's answers denied and the fence
 * passing meanwhile: the fetch thread, resumed in its read, finds the
 * create's wait over. Before, it sent the create again at once. */
static void test_unanswered_create_held_past_the_fence(void **state)
{
    fixture *f = *state;
    char conf[600], log[600];
    natstest *srv = NULL;
    fq_nio *n = NULL;
    noans_start(&srv, &n, conf, log, f, "fenced", "_IT_FENCED", 1000);
    fq_nio_event ev;
    static const char create[] = "PUB $JS.API.CONSUMER.DURABLE.CREATE.NOANS.noans-p0-1 ";
    parts_consume(n, 0, "NOANS", "noans", 0, 8, 1);
    for (long long end = nt_now_ms() + 5000; nt_now_ms() < end && !file_count(log, create);)
        nt_sleep_ms(5);
    assert_int_equal(file_count(log, create), 1);
    /* the fence passes 0.3 s on, while this process is stopped from 0.1 s
     * to 2.6 s on: the create's wait (1 s) runs out meanwhile */
    fq_nio_fence(n, fq_nio_mono_ms() + 300);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "sleep 0.1; kill -STOP %d; sleep 2.5; kill -CONT %d", (int)getpid(),
             (int)getpid());
    pid_t pid;
    char *argv[] = {"sh", "-c", cmd, NULL};
    assert_int_equal(posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    nt_sleep_ms(1000);      /* resumed: anything the fetch thread sends is traced by now */
    int fenced = file_count(log, create);
    /* the fence lifted and the replies allowed: sent again, made, its run
     * delivered */
    noans_conf(conf, srv, NULL);
    noans_reload(srv, log);
    fq_nio_fence(n, UINT64_MAX);
    bool made = false, got = false;
    for (long long end = nt_now_ms() + 10000; !got && nt_now_ms() < end;) {
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        if (ev.type == FQ_NIO_EV_CONSUMER && ev.source == 0)
            made = ev.status == FQ_OK;
        if (ev.type == FQ_NIO_EV_MSG) {
            got = made && ev.source == 0 && fq_nio_ack(n, 0, &ev.ack) == FQ_OK;
            fq_nio_msg_destroy(ev.msg);
        }
    }
    print_message("creates sent by the end of the freeze past the fence: %d; then %s, its run "
                  "%s\n", fenced, made ? "made" : "not made", got ? "delivered" : "not delivered");
    fq_nio_destroy(n);
    natstest_destroy(srv);
    assert_true(WIFEXITED(status));
    assert_int_equal(fenced, 1);
    assert_true(made);
    assert_true(got);
}

/* A consumer's make whose owner stops it (a partition let go) while a
 * step of it is unanswered goes no further: its listing answered after
 * the stop sends no delete and no create, so no consumer of a term its
 * owner left is made on the server (for the next owner to find, and, made
 * while that one makes its own, to refuse it on the work queue). The
 * server is paused while mk-p0's make is asked for and stopped, so that
 * its listing is answered after the stop. Before, the listing's answer
 * sent the delete and the create, and mk-p0-1 was made. */
static void test_make_stopped_midway_goes_no_further(void **state)
{
    fixture *f = *state;
    (void)f;
    char err[256], warn[256], url[128];
    natstest *srv = NULL;
    assert_int_equal(natstest_start(&srv, NULL), 0);
    fq_nio *n = NULL;
    fq_nio_opts o = {.url = natstest_url(srv), .name = "it_natsio_midway"};
    assert_int_equal(fq_nio_create(&n, &o, err, sizeof err), FQ_OK);
    fq_nio_stream st = {.name = "MK", .subject = "mk.*.*", .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(n, &st, warn, sizeof warn), FQ_OK);
    parts_consume(n, 1, "MK", "mk", 1, 8, 1);   /* the fetch thread running */
    fq_nio_event ev;
    assert_true(wait_event(n, FQ_NIO_EV_CONSUMER, &ev, 5000));
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(natstest_pause(srv, true), 0);
    parts_consume(n, 0, "MK", "mk", 0, 8, 1);
    nt_sleep_ms(200);   /* its listing sent (the fetch thread's next turn, 20 ms at most) */
    assert_int_equal(fq_nio_consume_stop(n, 0), FQ_OK);
    assert_int_equal(natstest_pause(srv, false), 0);
    /* the listing answered after the stop; a delete and a create would
     * follow within ms */
    for (long long end = nt_now_ms() + 1500; nt_now_ms() < end;)
        if (fq_nio_poll(n, &ev, 1, 50) == 1 && ev.type == FQ_NIO_EV_MSG)
            fq_nio_msg_destroy(ev.msg);
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", natstest_port(srv));
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, url), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    jsConsumerInfo *ci = NULL;
    natsStatus s = js_GetConsumerInfo(&ci, js, "MK", "mk-p0-1", NULL, NULL);
    jsConsumerInfo_Destroy(ci);
    print_message("mk-p0-1, stopped while its listing was unanswered: %s\n",
                  s == NATS_OK ? "made" : "not made");
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    fq_nio_destroy(n);
    natstest_destroy(srv);
    assert_int_equal(s, NATS_NOT_FOUND);
}

/* A consumer's make whose delete goes unanswered costs the others
 * nothing: a partition taken deletes its earlier terms' consumers, and a
 * delete that a loaded cluster left unanswered for the API's 5 s, waited
 * for on the fetch thread, stopped every other consumer's pulls as long
 * (measured: the other partitions of a replica silent 2.7 s during a
 * join). Here dead-p0 and dead-p1 are made in term 1; the server stops,
 * dead-p0 is asked for in term 2 meanwhile (its make deletes dead-p0-1
 * first), and the server comes back letting the adapter publish nothing
 * to that delete: dead-p1, made again after the reconnect, must deliver a
 * run well within the API's wait (30 s) while that delete goes
 * unanswered. */
static void test_unanswered_delete_costs_the_others_nothing(void **state)
{
    fixture *f = *state;
    char conf[600], log[600], err[256], warn[256];
    snprintf(conf, sizeof conf, "%s/nodelete.conf", natstest_dir(f->srv));
    FILE *out = fopen(conf, "w");
    assert_non_null(out);
    fputs("authorization { users = [ { user: u, password: u } ] }\n", out);
    fclose(out);
    natstest *srv = NULL;
    assert_int_equal(natstest_start(&srv, (const char *const[]){"-c", conf, NULL}), 0);
    snprintf(log, sizeof log, "%s/nats.log", natstest_dir(srv));
    fq_nio *n = NULL;
    fq_nio_opts o = {.url = natstest_url(srv), .name = "it_natsio_nodelete", .user = "u",
                     .password = "u", .api_wait_ms = 30000};
    assert_int_equal(fq_nio_create(&n, &o, err, sizeof err), FQ_OK);
    fq_nio_stream st = {.name = "DEAD", .subject = "dead.*.*", .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(n, &st, warn, sizeof warn), FQ_OK);
    parts_consume(n, 0, "DEAD", "dead", 0, 8, 1);
    parts_consume(n, 1, "DEAD", "dead", 1, 8, 1);
    int made = 0;
    fq_nio_event ev;
    for (long long end = nt_now_ms() + 10000; made < 2 && nt_now_ms() < end;)
        if (fq_nio_poll(n, &ev, 1, 50) == 1 && ev.type == FQ_NIO_EV_CONSUMER) {
            assert_int_equal(ev.status, FQ_OK);
            made++;
        }
    assert_int_equal(made, 2);
    assert_int_equal(natstest_stop(srv), 0);
    assert_true(wait_event(n, FQ_NIO_EV_CONN, &ev, 10000));
    assert_false(ev.connected);
    out = fopen(conf, "w");
    assert_non_null(out);
    fputs("authorization { users = [ { user: u, password: u, permissions: {\n"
          "  publish: { deny: [\"$JS.API.CONSUMER.DELETE.DEAD.dead-p0-1\"] } } } ] }\n", out);
    fclose(out);
    assert_int_equal(fq_nio_consume_stop(n, 0), FQ_OK);
    parts_consume(n, 0, "DEAD", "dead", 0, 8, 2);
    assert_int_equal(natstest_restart(srv), 0);
    /* the delete sent (the server says it denied it), and unanswered */
    long long end = nt_now_ms() + 10000;
    while (nt_now_ms() < end && !file_has(log, "$JS.API.CONSUMER.DELETE.DEAD.dead-p0-1"))
        nt_sleep_ms(50);
    assert_true(file_has(log, "$JS.API.CONSUMER.DELETE.DEAD.dead-p0-1"));
    publish(n, "dead.1.t", "run", NULL, 1);
    bool got = false;
    for (end = nt_now_ms() + 10000; !got && nt_now_ms() < end;) {
        if (fq_nio_poll(n, &ev, 1, 50) == 0)
            continue;
        if (ev.type == FQ_NIO_EV_MSG) {
            assert_int_equal(ev.source, 1);
            assert_int_equal(fq_nio_ack(n, 1, &ev.ack), FQ_OK);
            got = true;
        }
        fq_nio_msg_destroy(ev.msg);
    }
    print_message("dead-p1's run %s while dead-p0's delete went unanswered\n",
                  got ? "delivered" : "not delivered in 10 s");
    fq_nio_destroy(n);
    natstest_destroy(srv);
    assert_true(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_ensure_and_mismatch),
        cmocka_unit_test(test_puback_tokens_and_duplicates),
        cmocka_unit_test(test_publish_headers_as_sent),
        cmocka_unit_test(test_carry_lines_fetched_and_read_back),
        cmocka_unit_test(test_puback_timeout_and_republish),
        cmocka_unit_test(test_kv_requests_without_waiting),
        cmocka_unit_test(test_kv_request_unanswered_fails_at_its_deadline),
        cmocka_unit_test(test_requests_bounded),
        cmocka_unit_test(test_kv_lease_primitives),
        cmocka_unit_test(test_kv_bounds),
        cmocka_unit_test(test_stream_scan),
        cmocka_unit_test(test_subject_scan),
        cmocka_unit_test(test_scan_beside_the_loop),
        cmocka_unit_test(test_scan_stopped_midway),
        cmocka_unit_test(test_scan_replaced_as_messages_arrive),
        cmocka_unit_test(test_term_consumers_fence_the_old_term),
        cmocka_unit_test(test_term_consumers_spare_a_later_term),
        cmocka_unit_test(test_consumer_refused_says_why),
        cmocka_unit_test(test_deleted_names_pass_to_the_next_owner),
        cmocka_unit_test(test_stranded_found_and_restored),
        cmocka_unit_test(test_fetch_ack_get_and_recreate),
        cmocka_unit_test(test_fetch_waits_for_a_slow_owner),
        cmocka_unit_test(test_pull_reader_takes_only_deliveries),
        cmocka_unit_test(test_kv_watch),
        cmocka_unit_test(test_many_consumers_one_thread),
        cmocka_unit_test(test_consumers_added_and_removed_under_load),
        cmocka_unit_test(test_flood_does_not_starve_quiet),
        cmocka_unit_test(test_renamed_consumers_pulled_as_made),
        cmocka_unit_test(test_stopped_consumer_not_pulled),
        cmocka_unit_test(test_fence_per_consumer),
        cmocka_unit_test(test_unanswered_consumer_costs_the_others_nothing),
        cmocka_unit_test(test_unanswered_create_costs_the_others_nothing),
        cmocka_unit_test(test_create_in_flight_at_reconnect_made_again),
        cmocka_unit_test(test_unanswered_create_sent_again_not_deleted),
        cmocka_unit_test(test_unanswered_create_held_past_the_fence),
        cmocka_unit_test(test_make_stopped_midway_goes_no_further),
        cmocka_unit_test(test_unanswered_delete_costs_the_others_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
