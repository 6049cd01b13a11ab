/* it_proxy_hostile.c -- fairq against hostile tenants: a poisoned run never stops the others, headers a worker can trust, a full store is waited out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "opstest.h"
#include "proxyfixture.h"

/* libnats's constructor of received messages (exported, not declared): a
 * message whose header block is the first hdr_len bytes of buf, sent as it
 * is. How a hostile producer's bytes are put on the wire here. */
natsStatus natsMsg_create(natsMsg **m, const char *subj, int subj_len, const char *reply,
                          int reply_len, const char *buf, int buf_len, int hdr_len);

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 8\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = 8, .service_ms = 1};
    return pf_setup(state, yaml, &wo);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* Publish hdr (hl bytes, written as is) and body to subject through
 * JetStream, waiting for the PubAck: stored as the producer wrote it. */
static void publish_raw(pf_fixture *f, const char *subject, const char *hdr, size_t hl,
                        const char *body, size_t bl)
{
    char *buf = malloc(hl + bl + 1);
    assert_non_null(buf);
    memcpy(buf, hdr, hl);
    memcpy(buf + hl, body, bl);
    natsMsg *m = NULL, *r = NULL;
    assert_int_equal(natsMsg_create(&m, subject, (int)strlen(subject), NULL, 0, buf,
                                    (int)(hl + bl), (int)hl),
                     NATS_OK);
    assert_int_equal(natsConnection_RequestMsg(&r, f->c.nc, m, 10000), NATS_OK);
    const char *ack = natsMsg_GetData(r);
    if (!ack || !strstr(ack, "\"seq\""))
        fail_msg("%s did not store it: %s", subject, ack ? ack : "(no reply)");
    natsMsg_Destroy(r);
    natsMsg_Destroy(m);
    free(buf);
}

/* n header lines "hNNNNN:x" (no blank after the colon: fairq writes one),
 * in a header block of its own; *len its bytes. */
static char *compact_block(int n, size_t *len)
{
    char *b = malloc(16 + (size_t)n * 12);
    assert_non_null(b);
    size_t k = (size_t)sprintf(b, "NATS/1.0\r\n");
    for (int i = 0; i < n; i++)
        k += (size_t)sprintf(b + k, "h%05d:x\r\n", i);
    k += (size_t)sprintf(b + k, "\r\n");
    *len = k;
    return b;
}

static const pt_msg *find_body(const pt_msg *m, size_t n, const char *body, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].len == len && memcmp(m[i].data, body, len) == 0)
            return &m[i];
    return NULL;
}

/* Messages stream holds now. */
static uint64_t stream_msgs(pf_fixture *f, const char *stream)
{
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, stream, NULL, NULL), NATS_OK);
    uint64_t n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
}

/* A poisoned submit: its header block, written as is, and the refusal it
 * must get. */
typedef struct poison {
    const char *hdr;            /* NULL: built by the test */
    const char *code;           /* Fair-Error code */
    const char *why;            /* in the sentence */
    bool bare;                  /* refused without the producer's headers */
} poison;

static const poison poisons[] = {
    /* An empty name: before, accepted, then no dispatch could be built and
     * it sat at the head of the rotation, stopping every tenant. */
    {"NATS/1.0\r\n: x\r\n\r\n", "invalid", "header \"\": its name is not a header token", true},
    /* A blank before the colon: carried verbatim ahead of fairq's own. */
    {"NATS/1.0\r\nFair-Tenant : victim\r\n\r\n", "invalid",
     "header \"Fair-Tenant \": its name is not a header token", true},
    /* Decoys that made JetStream miss fairq's Nats-Msg-Id. */
    {"NATS/1.0\r\nX-Nats-Msg-Id-Decoy: 1\r\n\r\n", "invalid",
     "header \"X-Nats-Msg-Id-Decoy\": its name holds Nats-Msg-Id", true},
    {"NATS/1.0\r\nX-Note: Nats-Msg-Id: x\r\n\r\n", "invalid",
     "header \"X-Note\": its value holds Nats-Msg-Id", true},
    /* 62 KB of headers that grow past JetStream's 64 KiB once written with
     * a blank after each colon: before, republished every 250 ms for ever. */
    {NULL, "too_big", "header block would be", true},
    /* The same growth past max_payload, with a body near it. */
    {NULL, "too_big", "max_payload", true},
};
#define NPOISON (sizeof poisons / sizeof *poisons)

/* Submit poison i as tenant "evil", its body "poison-i" (padded near
 * max_payload for the last one); *body gets the body, malloc'd. */
static size_t submit_poison(pf_fixture *f, size_t i, char **body)
{
    size_t hl = 0, bl = 0;
    char *hdr = NULL;
    if (poisons[i].hdr) {
        hdr = strdup(poisons[i].hdr);
        hl = strlen(hdr);
    } else if (i == NPOISON - 2) {
        hdr = compact_block(6200, &hl);      /* 62,012 bytes, 68,212 written */
        assert_true(hl < 63000);
    } else {
        hdr = compact_block(2000, &hl);      /* 20,012 bytes, 22,012 written */
    }
    /* The last: the producer's bytes fit max_payload, its dispatch would
     * not (100 bytes to spare are less than fairq's headers). */
    bl = i == NPOISON - 1 ? 1048576 - 22012 - 100 : 16;
    *body = malloc(bl);
    assert_non_null(*body);
    memset(*body, '.', bl);
    memcpy(*body, "poison-", 7);
    (*body)[7] = (char)('0' + i);
    publish_raw(f, "fair.submit.evil", hdr, hl, *body, bl);
    free(hdr);
    return bl;
}

/* Every poison refused once, with its code and reason, without the
 * producer's headers; none dispatched; every good run r-0 .. r-(n-1)
 * dispatched once. */
static void check_outcome(pf_fixture *f, char **bodies, size_t *lens, int n)
{
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nr, NPOISON);
    for (size_t i = 0; i < NPOISON; i++) {
        const pt_msg *m = find_body(r, nr, bodies[i], lens[i]);
        if (!m)
            fail_msg("poison %zu was not refused", i);
        assert_string_equal(m->subject, "fair.rejected.evil");
        if (strncmp(m->error, poisons[i].code, strlen(poisons[i].code)) != 0 ||
            !strstr(m->error, poisons[i].why))
            fail_msg("poison %zu: Fair-Error \"%s\", expected %s: ...%s...", i, m->error,
                     poisons[i].code, poisons[i].why);
        if (poisons[i].bare && !strstr(m->error, "refused without the run's headers"))
            fail_msg("poison %zu: Fair-Error \"%s\" does not say the headers were left out", i,
                     m->error);
    }
    pt_msgs_free(r, nr);
    pf_assert_each_dispatched_once(f, n);
}

/* Poisoned submits among other tenants' runs, before and after a restart:
 * each is refused to fair.rejected.evil and acked, the others flow. */
static void test_poison_stops_no_one(void **state)
{
    pf_fixture *f = *state;
    pf_submit_runs(f, 0, 6, 3);
    pf_wait_msgs(f, "FAIR_DISPATCH", 6);
    char *bodies[NPOISON];
    size_t lens[NPOISON];
    for (size_t i = 0; i < NPOISON; i++) {
        lens[i] = submit_poison(f, i, &bodies[i]);
        pf_submit_runs(f, 6 + (int)i * 3, 3, 3);    /* the others, between them */
    }
    int n = 6 + (int)NPOISON * 3;
    pf_wait_msgs(f, "FAIR_DISPATCH", (uint64_t)n);
    pf_wait_msgs(f, "FAIR_REJECTED", NPOISON);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)n, 20000), 0);
    check_outcome(f, bodies, lens, n);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "rejected"), NPOISON);
    assert_int_equal(pf_overall(j, "dispatch_failures"), 0);
    cJSON_Delete(j);

    /* After a restart nothing comes back: every poison was acked. */
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    pf_submit_runs(f, n, 6, 3);
    pf_wait_msgs(f, "FAIR_DISPATCH", (uint64_t)n + 6);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)n + 6, 20000), 0);
    check_outcome(f, bodies, lens, n + 6);
    pf_wait_empty(f, "FAIR_SUBMIT");
    for (size_t i = 0; i < NPOISON; i++)
        free(bodies[i]);
}

/* Headers a worker can trust: fairq writes its own first, Nats-Msg-Id
 * before all, so a tenant, run id or carried header holding the text
 * cannot hide it from JetStream, and a dispatch published again is
 * stored once. The tenant here is named Nats-Msg-Id and so is its run:
 * before, their Fair-Tenant and Fair-Run-Id lines came first, and
 * JetStream found no message id. */
static void test_dispatch_published_again_is_stored_once(void **state)
{
    pf_fixture *f = *state;
    pt_worker_hold(f->w, true);
    const char *h[] = {"X-Trace", "abc", "X-Multi", "1", NULL};
    const char body[] = "{\"run_id\":\"Nats-Msg-Id:\"}";
    assert_int_equal(pt_submit(&f->c, "Nats-Msg-Id", body, strlen(body), h), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    /* The stored dispatch, its header block as fairq wrote it. */
    natsMsg *m = NULL;
    assert_int_equal(js_GetMsg(&m, f->c.js, "FAIR_DISPATCH", 1, NULL, NULL), NATS_OK);
    assert_string_equal(natsMsg_GetSubject(m), "fair.dispatch");
    for (int k = 0; k < 2; k++) {
        natsMsg *r = NULL;
        /* Sent as it was stored: its headers are not touched before. */
        assert_int_equal(natsConnection_RequestMsg(&r, f->c.nc, m, 10000), NATS_OK);
        const char *ack = natsMsg_GetData(r);
        if (!ack || !strstr(ack, "\"duplicate\""))
            fail_msg("published again, it was not a duplicate: %s", ack ? ack : "(no reply)");
        natsMsg_Destroy(r);
    }
    const char *v = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "Nats-Msg-Id", &v), NATS_OK);
    assert_string_equal(v, "Nats-Msg-Id/Nats-Msg-Id:");
    assert_int_equal(natsMsgHeader_Get(m, "X-Trace", &v), NATS_OK);
    assert_string_equal(v, "abc");
    natsMsg_Destroy(m);
    assert_int_equal(stream_msgs(f, "FAIR_DISPATCH"), 1);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 1, 20000), 0);
}

/* ---- a full store ------------------------------------------------------ */

#define FULL_RUNS 12
#define FULL_ROOM 3

/* FAIR_DISPATCH made before the proxy starts, holding FULL_ROOM messages
 * at most and refusing more (js_err 10077): a full store, as a disk at
 * JetStream's limit is (10023), without filling a disk. */
static int setup_full(void **state)
{
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    pf_fixture *f = calloc(1, sizeof *f);
    *state = f;
    if (!f || natstest_start(&f->srv, NULL) != 0 || pt_connect(&f->c, f->srv) != 0)
        return -1;
    jsStreamConfig c;
    jsStreamConfig_Init(&c);
    const char *subj[] = {"fair.dispatch"};
    c.Name = "FAIR_DISPATCH";
    c.Subjects = subj;
    c.SubjectsLen = 1;
    c.Storage = js_FileStorage;
    c.MaxMsgs = FULL_ROOM;
    c.Discard = js_DiscardNew;
    c.Duplicates = 600LL * 1000000000;
    c.MaxAge = 3600LL * 1000000000;
    jsStreamInfo *si = NULL;
    if (js_AddStream(&si, f->c.js, &c, NULL, NULL) != NATS_OK)
        return -1;
    jsStreamInfo_Destroy(si);
    if (pt_proxy_start(&f->px, f->srv, "proxy", yaml) != 0 ||
        pt_log_wait(&f->px, "fairq-proxy running", 15000) != 0)
        return -1;
    pt_worker_opts wo = {.concurrency = 8, .service_ms = 1};
    return pt_worker_start(&f->w, f->srv, &wo);
}

static int teardown_full(void **state)
{
    unsetenv("FAIRQ_HTTP_LISTEN");
    return teardown(state);
}

/* Whether the proxy says dispatches keep failing; false without an answer
 * (a proxy just restarted may not have its admin subscription in place at
 * the server yet). */
static bool stalled(pf_fixture *f)
{
    char *text = pt_stats(&f->c);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!j)
        return false;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "overall");
    bool s = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "dispatch_stalled"));
    cJSON_Delete(j);
    return s;
}

static int readyz(int port, char **body)
{
    int status = 0;
    free(*body);
    *body = NULL;
    assert_int_equal(ot_http_get(port, "/readyz", &status, body), 0);
    return status;
}

/* While the dispatch stream refuses every write, runs are neither refused
 * nor lost: they stay in FAIR_SUBMIT, the proxy says it is not dispatching
 * (stats, /readyz, its log), and once there is room again every run is
 * dispatched once, each tenant's in order. */
static void test_full_store_is_waited_out(void **state)
{
    pf_fixture *f = *state;
    int port = ot_http_port(&f->px, 5000);
    assert_true(port > 0);
    pf_submit_runs(f, 0, FULL_RUNS, 3);
    long long end = nt_now_ms() + 20000;
    while (!stalled(f) && nt_now_ms() < end)
        nt_sleep_ms(50);
    assert_true(stalled(f));
    char *body = NULL;
    assert_int_equal(readyz(port, &body), 503);
    if (!strstr(body, "not dispatching"))
        fail_msg("/readyz says \"%s\"", body);
    assert_int_equal(readyz(port, &body), 503);
    assert_int_equal(pt_log_wait(&f->px, "not dispatching", 5000), 0);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "rejected"), 0);
    assert_true(pf_overall(j, "dispatch_failures") > 0);
    cJSON_Delete(j);
    assert_int_equal(stream_msgs(f, "FAIR_DISPATCH"), FULL_ROOM);
    /* What was not stored is still in FAIR_SUBMIT, unacked. */
    assert_int_equal(stream_msgs(f, "FAIR_SUBMIT"), FULL_RUNS - FULL_ROOM);
    free(body);
    body = NULL;

    /* A restart meanwhile loses nothing: the journal says the runs whose
     * dispatch failed were in flight, but they are sent again, not taken
     * for sent. */
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    end = nt_now_ms() + 20000;
    while (!stalled(f) && nt_now_ms() < end)
        nt_sleep_ms(50);
    assert_true(stalled(f));
    assert_int_equal(stream_msgs(f, "FAIR_SUBMIT"), FULL_RUNS - FULL_ROOM);

    /* Room again. */
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_DISPATCH", NULL, NULL), NATS_OK);
    si->Config->MaxMsgs = -1;
    jsStreamInfo *si2 = NULL;
    assert_int_equal(js_UpdateStream(&si2, f->c.js, si->Config, NULL, NULL), NATS_OK);
    jsStreamInfo_Destroy(si2);
    jsStreamInfo_Destroy(si);
    pf_wait_msgs(f, "FAIR_DISPATCH", FULL_RUNS);
    assert_int_equal(pt_worker_wait_completed(f->w, FULL_RUNS, 20000), 0);
    pf_assert_each_dispatched_once(f, FULL_RUNS);
    assert_int_equal(pt_log_wait(&f->px, "dispatching again", 5000), 0);
    port = ot_http_port(&f->px, 5000);     /* the restarted proxy's */
    assert_true(port > 0);
    end = nt_now_ms() + 10000;
    while (readyz(port, &body) != 200 && nt_now_ms() < end)
        nt_sleep_ms(50);
    assert_int_equal(readyz(port, &body), 200);
    free(body);
    assert_false(stalled(f));
    j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "rejected"), 0);
    cJSON_Delete(j);
    /* Each tenant's runs reached the workers in the order they came. */
    pt_msg *m = NULL;
    size_t k = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    int last[3] = {-1, -1, -1};
    for (size_t i = 0; i < k; i++) {
        int id = -1;
        assert_int_equal(sscanf(m[i].run_id, "r-%d", &id), 1);
        if (id <= last[id % 3])
            fail_msg("r-%d reached the workers after r-%d", id, last[id % 3]);
        last[id % 3] = id;
    }
    pt_msgs_free(m, k);
    pf_wait_empty(f, "FAIR_SUBMIT");
}

/* ---- max_payload shrinks under a queued run ------------------------------ */

static char conf_path[512];

static void write_conf(const char *text)
{
    FILE *c = fopen(conf_path, "w");
    assert_non_null(c);
    fputs(text, c);
    fclose(c);
}

/* A server whose config file the test rewrites before restarting it; one
 * run in the window at a time, so that runs wait queued. */
static int setup_shrink(void **state)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(conf_path, sizeof conf_path, "%s/fairq-hostile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(conf_path);
    if (fd < 0)
        return -1;
    close(fd);
    write_conf("max_payload: 1048576\n");
    static const char *args[] = {"-c", conf_path, NULL};
    pf_fixture *f = calloc(1, sizeof *f);
    *state = f;
    pt_worker_opts wo = {.concurrency = 1, .service_ms = 1};
    if (!f || natstest_start(&f->srv, args) != 0 ||
        pt_proxy_start(&f->px, f->srv, "proxy",
                       "scheduler:\n  default_plan: free\n"
                       "window:\n  max_in_flight: 1\n"
                       "plans:\n  - name: free\n    weight: 1\n") != 0 ||
        pt_log_wait(&f->px, "fairq-proxy running", 15000) != 0 || pt_connect(&f->c, f->srv) != 0)
        return -1;
    return pt_worker_start(&f->w, f->srv, &wo);
}

static int teardown_shrink(void **state)
{
    int rc = teardown(state);
    unlink(conf_path);
    return rc;
}

/* A run admitted under one max_payload that the server, restarted with a
 * smaller one, will not take: its dispatch fails to send, and it is refused
 * then (too_big), as admission would refuse it now, instead of being tried
 * at the head of the rotation for ever; the other tenants' runs flow. */
static void test_max_payload_shrinks(void **state)
{
    pf_fixture *f = *state;
    pt_worker_hold(f->w, true);
    pf_submit_runs(f, 0, 1, 1);                 /* r-0 takes the one slot */
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    size_t bl = 600000;
    char *big = malloc(bl);
    assert_non_null(big);
    memset(big, 'b', bl);
    const char *h[] = {"Fair-Run-Id", "big-1", "X-Kept", "1", NULL};
    assert_int_equal(pt_submit(&f->c, "big", big, bl, h), 0);
    pf_submit_runs(f, 1, 3, 2);
    /* The server comes back allowing 512 KiB. */
    write_conf("max_payload: 524288\n");
    assert_int_equal(natstest_stop(f->srv), 0);
    assert_int_equal(natstest_restart(f->srv), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "reconnected to NATS", 1, 20000), 0);
    pt_worker_hold(f->w, false);
    pf_wait_msgs(f, "FAIR_REJECTED", 1);
    pf_wait_msgs(f, "FAIR_DISPATCH", 4);
    assert_int_equal(pt_worker_wait_completed(f->w, 4, 20000), 0);
    pf_assert_each_dispatched_once(f, 4);
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    /* Once, or twice when the consumer's reset after the reconnect
     * delivered the submit again while its refusal was on its way: then
     * admission refuses it too, for the same reason. */
    assert_true(nr == 1 || nr == 2);
    for (size_t i = 0; i < nr; i++) {
        assert_string_equal(r[i].subject, "fair.rejected.big");
        if (strncmp(r[i].error, "too_big:", 8) != 0 || !strstr(r[i].error, "max_payload"))
            fail_msg("Fair-Error \"%s\"", r[i].error);
        /* Too long for the new limit, it went without its body. */
        assert_int_equal(r[i].len, 0);
    }
    pt_msgs_free(r, nr);
    free(big);
    pf_wait_empty(f, "FAIR_SUBMIT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_poison_stops_no_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_published_again_is_stored_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_full_store_is_waited_out, setup_full,
                                        teardown_full),
        cmocka_unit_test_setup_teardown(test_max_payload_shrinks, setup_shrink,
                                        teardown_shrink),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
