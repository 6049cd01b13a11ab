/* it_proxy_limits.c -- the limits end to end: the buffer shared, run timeouts, the token window, and the headers a dispatch carries. */
/*
 * Each behaviour was built and counted in stats, but no test had driven it
 * through a real server. Over-long names and reserved tenants are among the
 * bad inputs of it_proxy_inputs.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "opstest.h"
#include "proxyfixture.h"

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* Start a server and the proxy on yaml with metrics on a port it picks,
 * and workers with wo (none if NULL). */
static int start(void **state, const char *yaml, const pt_worker_opts *wo)
{
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    return pf_setup(state, yaml, wo);
}

/* Wait until the unlabelled sample name reads want in a scrape: the proxy
 * refreshes what it serves once a second. */
static void metric_is(pf_fixture *f, const char *name, double want)
{
    int port = ot_http_port(&f->px, 5000), status = 0;
    assert_true(port > 0);
    char want_line[128];
    snprintf(want_line, sizeof want_line, "\n%s ", name);
    double v = -1;
    for (long long end = nt_now_ms() + 5000; nt_now_ms() < end; nt_sleep_ms(100)) {
        char *body = NULL;
        assert_int_equal(ot_http_get(port, "/metrics", &status, &body), 0);
        assert_int_equal(status, 200);
        const char *at = strstr(body, want_line);
        v = at ? strtod(at + strlen(want_line), NULL) : -1;
        free(body);
        if (v == want)
            return;
    }
    fail_msg("%s is %g, not %g (-1: absent)", name, v, want);
}

/* The stats reply once overall.key is want, waiting up to 20 s. */
static cJSON *stats_when(pf_fixture *f, const char *key, long want)
{
    long long end = nt_now_ms() + 20000;
    for (;;) {
        cJSON *j = pf_stats(f, "", NULL);
        if (pf_overall(j, key) == want)
            return j;
        cJSON_Delete(j);
        if (nt_now_ms() > end)
            fail_msg("overall.%s did not become %ld", key, want);
        nt_sleep_ms(20);
    }
}

/* The stats object of one tenant. */
static cJSON *tenant_stats(pf_fixture *f, const char *tenant, cJSON **reply)
{
    char req[96];
    snprintf(req, sizeof req, "{\"tenant\":\"%s\"}", tenant);
    *reply = pf_stats(f, req, NULL);
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(*reply, "tenants"), 0);
    assert_non_null(t);
    return t;
}

static bool overall_true(const cJSON *j, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "overall"), key));
}

/* ---- (a) limits.max_buffered_runs --------------------------------------- */

#define BUF_LIMIT 10
#define BUF_WINDOW 5
#define BUF_RUNS 60
#define BUF_TENANTS 3

static int setup_buffer(void **state)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "scheduler:\n  default_plan: free\n"
             "window:\n  max_in_flight: %d\n"
             "limits:\n  max_buffered_runs: %d\n"
             "plans:\n  - name: free\n    weight: 1\n", BUF_WINDOW, BUF_LIMIT);
    pt_worker_opts wo = {.concurrency = 2 * BUF_WINDOW, .service_ms = 1};
    if (start(state, yaml, &wo) != 0)
        return -1;
    pt_worker_hold(((pf_fixture *)*state)->w, true);
    return 0;
}

/* FAIR_SUBMIT holds n runs (the dispatched ones are acked), waiting up to
 * 5 s for the acks. */
static void submit_holds(pf_fixture *f, uint64_t n)
{
    uint64_t have = 0;
    for (long long end = nt_now_ms() + 5000; nt_now_ms() < end; nt_sleep_ms(20)) {
        jsStreamInfo *si = NULL;
        assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_SUBMIT", NULL, NULL), NATS_OK);
        have = si->State.Msgs;
        jsStreamInfo_Destroy(si);
        if (have == n)
            return;
    }
    fail_msg("FAIR_SUBMIT holds %llu runs, not %llu", (unsigned long long)have,
             (unsigned long long)n);
}

/* Submit runs r-from .. r-(from + n - 1), BUF_TENANTS tenants in turn. */
static void submit_buf_runs(pf_fixture *f, int from, int n, bool one_at_a_time)
{
    for (int i = from; i < from + n; i++) {
        char tenant[16], body[64];
        snprintf(tenant, sizeof tenant, "t%d", i % BUF_TENANTS);
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
        if (one_at_a_time)
            assert_int_equal(pt_submit(&f->c, tenant, body, strlen(body), NULL), 0);
        else
            assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
}

/* The fill line of BUF_LIMIT: past it the buffer is shared. */
#define BUF_FILL (BUF_LIMIT - BUF_LIMIT / 4)
/* ... and half way from there to BUF_LIMIT: tenants that hold runs stop. */
#define BUF_HOLDERS (BUF_FILL + (BUF_LIMIT - BUF_FILL + 1) / 2)

/* Each tenant's runs left FAIR_DISPATCH in submit order (r-<n>, n up):
 * tenant_of gives a tenant's index from its id. */
static void assert_order_per_tenant(pf_fixture *f, int (*tenant_of)(const char *id), int tenants)
{
    pt_msg *m = NULL;
    size_t k = 0;
    int last[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    assert_true(tenants <= 8);
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    for (size_t i = 0; i < k; i++) {
        int id = atoi(m[i].run_id + 2), t = tenant_of(m[i].tenant);
        assert_true(t >= 0 && t < tenants);
        if (id <= last[t])
            fail_msg("%s left before %s's r-%d", m[i].run_id, m[i].tenant, last[t]);
        last[t] = id;
    }
    pt_msgs_free(m, k);
}

/* The stats reply once the window is full and the buffer holds from its
 * fill line to half way past it (tenants holding runs go no further), with
 * the rest of the n runs submitted given back, waiting up to 20 s. */
static cJSON *buffer_when(pf_fixture *f, long n)
{
    for (long long end = nt_now_ms() + 20000;; nt_sleep_ms(20)) {
        cJSON *j = pf_stats(f, "", NULL);
        long held = pf_overall(j, "buffered_runs"), back = pf_overall(j, "given_back_runs");
        if (held >= BUF_FILL && held <= BUF_HOLDERS && pf_overall(j, "queued_runs") == held &&
            held + back == n - BUF_WINDOW && pf_overall(j, "in_flight") == BUF_WINDOW)
            return j;
        if (nt_now_ms() > end)
            fail_msg("the buffer holds %ld (%ld queued) and %ld are given back, %ld in flight, "
                     "of %ld", held, pf_overall(j, "queued_runs"), back,
                     pf_overall(j, "in_flight"), n);
        cJSON_Delete(j);
    }
}

static int buf_tenant(const char *id)
{
    return atoi(id + 1);
}

/* Past three quarters of max_buffered_runs each tenant holds its share and
 * its further submits are given back to FAIR_SUBMIT (a nak with a delay):
 * the proxy keeps fetching, holds no more, and says so; JetStream keeps
 * the rest; once workers complete, every run is dispatched once and each
 * tenant's in submit order. */
static void test_buffer_shared_past_its_fill_line(void **state)
{
    pf_fixture *f = *state;
    /* A first third, one at a time: the window fills, then the buffer. */
    submit_buf_runs(f, 0, BUF_RUNS / 3, true);
    cJSON *j = buffer_when(f, BUF_RUNS / 3);
    long held = pf_overall(j, "buffered_runs");
    assert_true(pf_overall(j, "given_back") >= BUF_RUNS / 3 - BUF_WINDOW - held);
    assert_false(overall_true(j, "fetch_paused"));
    cJSON_Delete(j);

    /* The other two thirds: every one given back, none held. */
    submit_buf_runs(f, BUF_RUNS / 3, BUF_RUNS - BUF_RUNS / 3, false);
    j = buffer_when(f, BUF_RUNS);
    fprintf(stderr, "limits: held %ld, %ld given back, %ld in flight, of %d runs at a limit "
            "of %d\n", pf_overall(j, "buffered_runs"), pf_overall(j, "given_back_runs"),
            pf_overall(j, "in_flight"), BUF_RUNS, BUF_LIMIT);
    /* Fetched past the first third: every run taken is held or given back. */
    long held2 = pf_overall(j, "buffered_runs");
    assert_false(overall_true(j, "fetch_paused"));
    cJSON_Delete(j);
    submit_holds(f, BUF_RUNS - BUF_WINDOW);
    metric_is(f, "fairq_buffered_runs", (double)held2);
    metric_is(f, "fairq_given_back_awaited_runs", (double)(BUF_RUNS - BUF_WINDOW - held2));
    metric_is(f, "fairq_fetch_paused", 0);
    assert_int_equal(pt_stream_last(&f->c, "FAIR_DISPATCH"), BUF_WINDOW);

    /* Room: what was given back is asked back, in order. */
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, BUF_RUNS, 30000), 0);
    pf_assert_each_dispatched_once(f, BUF_RUNS);
    assert_order_per_tenant(f, buf_tenant, BUF_TENANTS);
    j = stats_when(f, "buffered_runs", 0);
    assert_int_equal(pf_overall(j, "given_back_runs"), 0);
    cJSON_Delete(j);
}

static int loud_or_quiet(const char *id)
{
    return strcmp(id, "la") == 0 ? 0 : strcmp(id, "lb") == 0 ? 1 : strcmp(id, "q") == 0 ? 2 : -1;
}

/* Two loud tenants fill the buffer with FAIR_SUBMIT full of their runs
 * behind; a third tenant's run, behind all of theirs in the stream, is
 * fetched and held at once, and dispatched within the first rounds once
 * the window has room, not after theirs; every run is dispatched once, each
 * tenant's in order. */
static void test_quiet_tenant_behind_loud_ones(void **state)
{
    pf_fixture *f = *state;
    enum { LOUD = 2 * BUF_RUNS / 3 };
    for (int i = 0; i < LOUD; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
        assert_int_equal(pt_submit_async(&f->c, i % 2 ? "lb" : "la", body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    cJSON *j = buffer_when(f, LOUD);
    long held = pf_overall(j, "buffered_runs");
    cJSON_Delete(j);
    char body[64];
    snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", LOUD);
    assert_int_equal(pt_submit(&f->c, "q", body, strlen(body), NULL), 0);
    /* Held at once, past the fill line. */
    j = stats_when(f, "queued_runs", held + 1);
    assert_int_equal(pf_overall(j, "buffered_runs"), held + 1);
    cJSON_Delete(j);

    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, LOUD + 1, 30000), 0);
    pf_assert_each_dispatched_once(f, LOUD + 1);
    assert_order_per_tenant(f, loud_or_quiet, 3);
    /* q's run left with the first round after the window's first runs. */
    pt_msg *m = NULL;
    size_t k = 0, at = k;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    for (size_t i = 0; i < k; i++)
        if (strcmp(m[i].tenant, "q") == 0)
            at = i;
    pt_msgs_free(m, k);
    fprintf(stderr, "limits: q's run was dispatch %zu of %zu\n", at + 1, k);
    /* Within two rounds of the three tenants after the window's first
     * runs (behind all of theirs, it would have been the last). */
    assert_true(at < BUF_WINDOW + 6);
    j = stats_when(f, "given_back_runs", 0);
    cJSON_Delete(j);
}

/* ---- (b) window.run_timeout_ms ------------------------------------------ */

static int setup_timeout(void **state)
{
    return start(state,
                 "scheduler:\n  default_plan: free\n"
                 "window:\n  max_in_flight: 1\n  run_timeout_ms: 1500\n"
                 "plans:\n  - name: free\n    weight: 1\n", NULL);
}

/* A run never completed frees its slot after run_timeout_ms, counted as
 * expired; its late completion reconciles it once. */
static void test_run_timeout_frees_slot(void **state)
{
    pf_fixture *f = *state;
    const char r1[] = "{\"run_id\":\"x-1\",\"est_tokens\":100}";
    const char r2[] = "{\"run_id\":\"x-2\",\"est_tokens\":100}";
    assert_int_equal(pt_submit(&f->c, "a", r1, strlen(r1), NULL), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    assert_int_equal(pt_submit(&f->c, "a", r2, strlen(r2), NULL), 0);
    /* The window of one is x-1's until it expires; then x-2 goes. */
    pf_wait_msgs(f, "FAIR_DISPATCH", 2);
    pf_publish(f, "fair.done.a", "{\"run_id\":\"x-2\",\"actual_tokens\":100,\"status\":\"ok\"}");
    cJSON *j = stats_when(f, "completions", 1);
    assert_int_equal(pf_overall(j, "expired"), 1);
    assert_int_equal(pf_overall(j, "in_flight"), 0);
    cJSON_Delete(j);
    cJSON *t = tenant_stats(f, "a", &j);
    assert_int_equal(pf_num(t, "expired_runs"), 1);
    assert_int_equal(pf_num(t, "in_flight"), 0);
    long deficit = pf_num(t, "deficit");
    cJSON_Delete(j);
    metric_is(f, "fairq_expired_leases_total", 1);

    /* x-1 ends after all, 5000 tokens over its estimate: the tenant pays
     * them once (a late completion: counted unheld, its slot was free
     * already), and a repeat of the completion changes nothing. */
    const char late[] = "{\"run_id\":\"x-1\",\"actual_tokens\":5100,\"status\":\"ok\"}";
    pf_publish(f, "fair.done.a", late);
    j = stats_when(f, "completions_unheld", 1);
    assert_int_equal(pf_overall(j, "completions"), 1);
    cJSON_Delete(j);
    t = tenant_stats(f, "a", &j);
    assert_int_equal(pf_num(t, "deficit"), deficit - 5000);
    assert_int_equal(pf_num(t, "completed_runs"), 2);
    cJSON_Delete(j);
    pf_publish(f, "fair.done.a", late);
    j = stats_when(f, "completions_duplicate", 1);
    assert_int_equal(pf_overall(j, "completions"), 1);
    assert_int_equal(pf_overall(j, "completions_unheld"), 1);
    assert_int_equal(pf_overall(j, "expired"), 1);
    cJSON_Delete(j);
    t = tenant_stats(f, "a", &j);
    assert_int_equal(pf_num(t, "deficit"), deficit - 5000);
    assert_int_equal(pf_num(t, "completed_runs"), 2);
    cJSON_Delete(j);
}

/* ---- (c) window.max_in_flight_tokens ------------------------------------ */

#define TOKEN_CAP 1000

static int setup_tokens(void **state)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "scheduler:\n  default_plan: free\n"
             "window:\n  max_in_flight: 100\n  max_in_flight_tokens: %d\n"
             "plans:\n  - name: free\n    weight: 1\n", TOKEN_CAP);
    return start(state, yaml, NULL);
}

static void complete(pf_fixture *f, const char *tenant, const char *run_id, int actual)
{
    char subj[64], body[128];
    snprintf(subj, sizeof subj, "fair.done.%s", tenant);
    snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"actual_tokens\":%d,\"status\":\"ok\"}",
             run_id, actual);
    pf_publish(f, subj, body);
}

/* FAIR_DISPATCH still holds n runs a moment later: nothing else went. */
static void assert_dispatched_stays(pf_fixture *f, uint64_t n)
{
    assert_int_equal(pt_stream_last(&f->c, "FAIR_DISPATCH"), n);
    nt_sleep_ms(300);
    assert_int_equal(pt_stream_last(&f->c, "FAIR_DISPATCH"), n);
}

/* Never more estimated tokens in flight than the cap, except a run larger
 * than the cap, which goes alone once the window is empty. */
static void test_token_window(void **state)
{
    pf_fixture *f = *state;
    const char big[] = "{\"run_id\":\"big-1\",\"est_tokens\":5000}";
    assert_int_equal(pt_submit(&f->c, "b", big, strlen(big), NULL), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    for (int i = 1; i <= 4; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"run_id\":\"s-%d\",\"est_tokens\":300}", i);
        assert_int_equal(pt_submit(&f->c, "a", body, strlen(body), NULL), 0);
    }
    /* The oversize run has the window to itself. */
    assert_dispatched_stays(f, 1);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "in_flight"), 1);
    assert_int_equal(pf_overall(j, "in_flight_tokens"), 5000);
    assert_int_equal(pf_overall(j, "window_max_in_flight_tokens"), TOKEN_CAP);
    cJSON_Delete(j);
    metric_is(f, "fairq_window_capacity_tokens", TOKEN_CAP);

    /* Then three of 300 fit under 1000, the fourth does not. */
    complete(f, "b", "big-1", 5000);
    pf_wait_msgs(f, "FAIR_DISPATCH", 4);
    assert_dispatched_stays(f, 4);
    j = stats_when(f, "in_flight_tokens", 900);
    assert_int_equal(pf_overall(j, "in_flight"), 3);
    cJSON_Delete(j);

    /* Another oversize run waits for the window to empty. */
    const char big2[] = "{\"run_id\":\"big-2\",\"est_tokens\":5000}";
    assert_int_equal(pt_submit(&f->c, "b", big2, strlen(big2), NULL), 0);
    complete(f, "a", "s-1", 300);
    pf_wait_msgs(f, "FAIR_DISPATCH", 5);       /* s-4: 900 again */
    assert_dispatched_stays(f, 5);
    complete(f, "a", "s-2", 300);
    complete(f, "a", "s-3", 300);
    assert_dispatched_stays(f, 5);             /* s-4 still out */
    complete(f, "a", "s-4", 300);
    pf_wait_msgs(f, "FAIR_DISPATCH", 6);
    j = stats_when(f, "in_flight_tokens", 5000);
    assert_int_equal(pf_overall(j, "in_flight"), 1);
    cJSON_Delete(j);

    pt_msg *m = NULL;
    size_t k = 0;
    static const char *const order[] = {"big-1", "s-1", "s-2", "s-3", "s-4", "big-2"};
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    assert_int_equal(k, 6);
    for (size_t i = 0; i < k; i++)
        assert_string_equal(m[i].run_id, order[i]);
    pt_msgs_free(m, k);
}

/* ---- (d) the producer's headers on dispatches and refusals -------------- */

static int setup_headers(void **state)
{
    return start(state, "scheduler:\n  default_plan: free\n"
                        "plans:\n  - name: free\n    weight: 1\n", NULL);
}

/* The headers a producer sends along with every run of this test: its
 * own, several values of one, Nats- ones JetStream acts on, and Fair- ones,
 * some of which fairq sets itself. */
static const char *const producer_hdrs[] = {
    "X-Trace", "abc",
    "X-Multi", "1",
    "X-Multi", "2",
    "Nats-Expected-Stream", "FAIR_SUBMIT",
    "Nats-Custom", "n",
    "Fair-Tenant", "forged",
    "Fair-Submitted-At", "1",
    "Fair-Priority", "high",
    "Fair-Error", "forged",
    "Fair-Subject", "forged",
    NULL,
};

/* Message seq of stream, with its headers. */
static natsMsg *get_msg(pf_fixture *f, const char *stream, uint64_t seq)
{
    natsMsg *m = NULL;
    assert_int_equal(js_GetMsg(&m, f->c.js, stream, seq, NULL, NULL), NATS_OK);
    return m;
}

static void assert_hdr(natsMsg *m, const char *key, const char *want)
{
    const char *v = NULL;
    natsStatus s = natsMsgHeader_Get(m, key, &v);
    if (!want) {
        if (s != NATS_NOT_FOUND)
            fail_msg("header %s is there (%s), it should not be", key, v ? v : "");
        return;
    }
    if (s != NATS_OK)
        fail_msg("no header %s", key);
    assert_string_equal(v, want);
}

/* Both values of X-Multi, in order. */
static void assert_multi(natsMsg *m)
{
    const char **vals = NULL;
    int n = 0;
    assert_int_equal(natsMsgHeader_Values(m, "X-Multi", &vals, &n), NATS_OK);
    assert_int_equal(n, 2);
    assert_string_equal(vals[0], "1");
    assert_string_equal(vals[1], "2");
    free((void *)vals);
}

/* Nothing named Nats-* but the Nats-Msg-Id want (NULL: none). */
static void assert_nats_hdrs(natsMsg *m, const char *msg_id)
{
    const char **keys = NULL;
    int n = 0;
    assert_int_equal(natsMsgHeader_Keys(m, &keys, &n), NATS_OK);
    for (int i = 0; i < n; i++)
        if (strncasecmp(keys[i], "Nats-", 5) == 0 && strcmp(keys[i], "Nats-Msg-Id") != 0)
            fail_msg("header %s was carried over", keys[i]);
    free((void *)keys);
    assert_hdr(m, "Nats-Msg-Id", msg_id);
}

static void test_headers_carried(void **state)
{
    pf_fixture *f = *state;
    /* Dispatched: fairq's Fair- headers replace the producer's, Nats- ones
     * are dropped but for fairq's Nats-Msg-Id, the rest travel as sent. */
    const char ok[] = "{\"run_id\":\"h-1\",\"workflow\":\"w\",\"est_tokens\":40}";
    assert_int_equal(pt_submit(&f->c, "a", ok, strlen(ok), producer_hdrs), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    natsMsg *m = get_msg(f, "FAIR_DISPATCH", 1);
    assert_hdr(m, "X-Trace", "abc");
    assert_multi(m);
    assert_nats_hdrs(m, "a/h-1");
    assert_hdr(m, "Fair-Tenant", "a");
    assert_hdr(m, "Fair-Run-Id", "h-1");
    assert_hdr(m, "Fair-Workflow", "w");
    assert_hdr(m, "Fair-Est-Tokens", "40");
    const char *sat = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "Fair-Submitted-At", &sat), NATS_OK);
    assert_true(strtoll(sat, NULL, 10) > 1700000000000LL);
    /* Other Fair- headers are the producer's, carried as they came. */
    assert_hdr(m, "Fair-Priority", "high");
    assert_hdr(m, "Fair-Error", "forged");
    assert_hdr(m, "Fair-Subject", "forged");
    natsMsg_Destroy(m);

    /* Refused for a tenant: fairq sets Fair-Error only; the producer's
     * other headers, its Fair- ones included, travel as sent. */
    const char bad[] = "{\"run_id\":\"h-2\",\"est_tokens\":0}";
    assert_int_equal(pt_submit(&f->c, "a", bad, strlen(bad), producer_hdrs), 0);
    pf_wait_msgs(f, "FAIR_REJECTED", 1);
    m = get_msg(f, "FAIR_REJECTED", 1);
    assert_string_equal(natsMsg_GetSubject(m), "fair.rejected.a");
    const char *err = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "Fair-Error", &err), NATS_OK);
    assert_memory_equal(err, "invalid: ", 9);
    assert_hdr(m, "X-Trace", "abc");
    assert_multi(m);
    assert_nats_hdrs(m, NULL);
    assert_hdr(m, "Fair-Tenant", "forged");
    assert_hdr(m, "Fair-Submitted-At", "1");
    assert_hdr(m, "Fair-Priority", "high");
    assert_hdr(m, "Fair-Subject", "forged");
    natsMsg_Destroy(m);

    /* Refused for its subject: Fair-Subject is fairq's, the subject. */
    assert_int_equal(pt_submit(&f->c, "=fair.submit.no%tenant", ok, strlen(ok), producer_hdrs), 0);
    pf_wait_msgs(f, "FAIR_REJECTED", 2);
    m = get_msg(f, "FAIR_REJECTED", 2);
    assert_string_equal(natsMsg_GetSubject(m), "fair.rejected._invalid");
    assert_hdr(m, "Fair-Subject", "fair.submit.no%tenant");
    assert_hdr(m, "Fair-Tenant", "forged");
    assert_hdr(m, "X-Trace", "abc");
    assert_nats_hdrs(m, NULL);
    natsMsg_Destroy(m);
}

/* A claim header is read in any case, and one claim named twice (in two
 * spellings, or one spelling with two values) is refused, not one of the
 * two believed: a worker library comparing names without case would read
 * the other. What fairq read replaces every spelling on the dispatch. */
static int setup_claims(void **state)
{
    return start(state, "scheduler:\n  default_plan: free\n  classes: \"interactive, batch\"\n"
                        "plans:\n  - {name: free, weight: 1, max_subtenants: 4}\n", NULL);
}

/* How many headers of m are named key in any case. */
static int hdr_spellings(natsMsg *m, const char *key)
{
    const char **keys = NULL;
    int n = 0, k = 0;
    assert_int_equal(natsMsgHeader_Keys(m, &keys, &n), NATS_OK);
    for (int i = 0; i < n; i++)
        if (strcasecmp(keys[i], key) == 0) {
            const char **vals = NULL;
            int nv = 0;
            assert_int_equal(natsMsgHeader_Values(m, keys[i], &vals, &nv), NATS_OK);
            k += nv;
            free((void *)vals);
        }
    free((void *)keys);
    return k;
}

static void assert_body(natsMsg *m, const char *want)
{
    assert_int_equal(natsMsg_GetDataLength(m), strlen(want));
    assert_memory_equal(natsMsg_GetData(m), want, strlen(want));
}

static void test_claim_headers_any_case(void **state)
{
    pf_fixture *f = *state;
    /* Read in any case: each is dispatched with the claim as fairq's. */
    const char *h1[] = {"fair-subtenant", "x", "fair-run-id", "c-1", "FAIR-EST-TOKENS", "77",
                        "fair-workflow", "wf", NULL};
    const char b1[] = "{\"n\":1}";
    assert_int_equal(pt_submit(&f->c, "a", b1, strlen(b1), h1), 0);
    /* A class read in any case, so one that is no class is refused. */
    const char *h2[] = {"FAIR-CLASS", "urgent", NULL};
    const char b2[] = "{\"run_id\":\"c-2\"}";
    assert_int_equal(pt_submit(&f->c, "a", b2, strlen(b2), h2), 0);
    /* Named twice: refused, whichever spellings. */
    const char *twice[][5] = {
        {"Fair-Subtenant", "a", "fair-subtenant", "b", NULL},
        {"Fair-Run-Id", "c-4", "Fair-Run-Id", "c-5", NULL},
        {"FAIR-CLASS", "interactive", "Fair-Class", "batch", NULL},
        {"Fair-Est-Tokens", "5", "fair-est-tokens", "5", NULL},
        {"fair-workflow", "v", "Fair-Workflow", "w", NULL},
    };
    const char *why[] = {"Fair-Subtenant", "Fair-Run-Id", "Fair-Class", "Fair-Est-Tokens",
                         "Fair-Workflow"};
    char body[5][32];
    for (int i = 0; i < 5; i++) {
        snprintf(body[i], sizeof body[i], "{\"run_id\":\"t-%d\"}", i);
        assert_int_equal(pt_submit(&f->c, "a", body[i], strlen(body[i]), twice[i]), 0);
    }
    /* Validated as the claim: a sub-tenant with a blank is refused. */
    const char *h3[] = {"fair-subtenant", "not one", NULL};
    const char b3[] = "{\"run_id\":\"c-3\"}";
    assert_int_equal(pt_submit(&f->c, "a", b3, strlen(b3), h3), 0);
    pf_wait_msgs(f, "FAIR_REJECTED", 7);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);

    natsMsg *m = get_msg(f, "FAIR_DISPATCH", 1);
    assert_body(m, b1);
    assert_hdr(m, "Fair-Subtenant", "x");
    assert_hdr(m, "Fair-Run-Id", "c-1");
    assert_hdr(m, "Fair-Est-Tokens", "77");
    assert_hdr(m, "Fair-Workflow", "wf");
    assert_hdr(m, "Nats-Msg-Id", "a/c-1");
    const char *names[] = {"Fair-Subtenant", "Fair-Run-Id", "Fair-Est-Tokens", "Fair-Workflow"};
    for (int i = 0; i < 4; i++)
        if (hdr_spellings(m, names[i]) != 1)
            fail_msg("%d headers named %s in some case", hdr_spellings(m, names[i]), names[i]);
    natsMsg_Destroy(m);

    m = get_msg(f, "FAIR_REJECTED", 1);
    const char *err = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "Fair-Error", &err), NATS_OK);
    if (strncmp(err, "invalid: ", 9) != 0 || !strstr(err, "urgent"))
        fail_msg("FAIR-CLASS: urgent refused as \"%s\"", err);
    natsMsg_Destroy(m);
    for (int i = 0; i < 5; i++) {
        m = get_msg(f, "FAIR_REJECTED", (uint64_t)i + 2);
        assert_body(m, body[i]);
        assert_int_equal(natsMsgHeader_Get(m, "Fair-Error", &err), NATS_OK);
        if (strncmp(err, "invalid: ", 9) != 0 || !strstr(err, why[i]) ||
            !strstr(err, "given twice"))
            fail_msg("%s named twice refused as \"%s\"", why[i], err);
        natsMsg_Destroy(m);
    }
    m = get_msg(f, "FAIR_REJECTED", 7);
    assert_body(m, b3);
    assert_int_equal(natsMsgHeader_Get(m, "Fair-Error", &err), NATS_OK);
    if (strncmp(err, "invalid: Fair-Subtenant header", 30) != 0)
        fail_msg("fair-subtenant: not one refused as \"%s\"", err);
    natsMsg_Destroy(m);
    /* Counted: as invalid on the tenant, the sub-tenant's also as such. */
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "rejected"), 7);
    assert_int_equal(pf_overall(j, "subtenant_refused"), 2);
    cJSON_Delete(j);
}

/* ---- (e) the bytes of a dispatch, its body kept or read back ----------- */

static const char *const bytes_yaml =
    "scheduler:\n  default_plan: free\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup_bytes_kept(void **state)
{
    return start(state, bytes_yaml, NULL);
}

/* No body fits in memory: each is read back by sequence at its dispatch. */
static int setup_bytes_read(void **state)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, "%slimits:\n  max_buffered_bytes: 1\n", bytes_yaml);
    return start(state, yaml, NULL);
}

/* Standard base64, as the stream API writes it, into out (n bytes). */
static char *b64_decode(const char *in, size_t *n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = strlen(in);
    char *out = malloc(len / 4 * 3 + 1);
    assert_non_null(out);
    uint32_t acc = 0;
    int bits = 0;
    *n = 0;
    for (size_t i = 0; i < len && in[i] != '='; i++) {
        const char *at = strchr(abc, in[i]);
        assert_non_null(at);
        acc = acc << 6 | (uint32_t)(at - abc);
        if ((bits += 6) >= 8) {
            bits -= 8;
            out[(*n)++] = (char)(acc >> bits & 0xff);
        }
    }
    return out;
}

/* Message seq of stream as the server stores it: its header block and
 * body, byte for byte (the stream API's answer, not a client's parse). */
static void stored(pf_fixture *f, const char *stream, uint64_t seq, char **hdr, size_t *hlen,
                   char **body, size_t *blen)
{
    char subj[128], req[64];
    snprintf(subj, sizeof subj, "$JS.API.STREAM.MSG.GET.%s", stream);
    snprintf(req, sizeof req, "{\"seq\":%llu}", (unsigned long long)seq);
    natsMsg *r = NULL;
    assert_int_equal(natsConnection_Request(&r, f->c.nc, subj, req, (int)strlen(req), 5000),
                     NATS_OK);
    cJSON *j = cJSON_ParseWithLength(natsMsg_GetData(r), (size_t)natsMsg_GetDataLength(r));
    cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
    assert_non_null(m);
    cJSON *h = cJSON_GetObjectItemCaseSensitive(m, "hdrs");
    cJSON *d = cJSON_GetObjectItemCaseSensitive(m, "data");
    *hdr = b64_decode(cJSON_IsString(h) ? h->valuestring : "", hlen);
    *body = b64_decode(cJSON_IsString(d) ? d->valuestring : "", blen);
    cJSON_Delete(j);
    natsMsg_Destroy(r);
}

/* Whether a header line (at p, up to its colon) is one fairq sets on a
 * dispatch or one named Nats-*: those a dispatch does not carry. */
static bool not_carried(const char *p)
{
    static const char *const own[] = {"Nats-", "Fair-Tenant:", "Fair-Run-Id:",
                                      "Fair-Est-Tokens:", "Fair-Submitted-At:",
                                      "Fair-Dispatched-At:", "Fair-Workflow:"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (strncasecmp(p, own[i], strlen(own[i])) == 0)
            return true;
    return false;
}

/* A dispatch carries the producer's headers byte for byte as it sent them
 * (but Nats-* and those fairq sets), in its order, after fairq's own, and
 * its body byte for byte: the same whether the body was kept in memory or
 * read back by sequence. The producer's block is what the server stored
 * of the same message sent to a stream of its own. */
/* The producer's headers of test_headers_carried but Nats-Expected-Stream,
 * so that a stream of another name stores them too. */
static const char *const bytes_hdrs[] = {
    "X-Trace", "abc",
    "X-Multi", "1",
    "X-Multi", "2",
    "Nats-Custom", "n",
    "Fair-Tenant", "forged",
    "Fair-Submitted-At", "1",
    "Fair-Priority", "high",
    "Fair-Error", "forged",
    "x-lower", "v a l u e",
    NULL,
};

static void check_dispatch_bytes(pf_fixture *f, double body_reads)
{
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    const char *subjects[] = {"copy.>"};
    sc.Name = "COPY";
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_MemoryStorage;
    assert_int_equal(js_AddStream(NULL, f->c.js, &sc, NULL, NULL), NATS_OK);
    const char run[] = "{\"run_id\":\"b-1\",\"workflow\":\"w\",\"est_tokens\":40,"
                       "\"input\":\"\\u00e9 \\\\ bytes\"}";
    assert_int_equal(pt_submit(&f->c, "=copy.a", run, strlen(run), bytes_hdrs), 0);
    char *want_h, *want_b;
    size_t want_hl, want_bl;
    stored(f, "COPY", 1, &want_h, &want_hl, &want_b, &want_bl);
    assert_int_equal(want_bl, strlen(run));
    /* the lines a dispatch carries, as the producer wrote them */
    char *carried = malloc(want_hl + 1);
    assert_non_null(carried);
    size_t cl = 0;
    assert_true(want_hl > 12);
    for (const char *p = want_h + 10, *end = want_h + want_hl - 2, *nl; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        assert_non_null(nl);
        if (!not_carried(p)) {
            memcpy(carried + cl, p, (size_t)(nl + 1 - p));
            cl += (size_t)(nl + 1 - p);
        }
    }
    assert_true(cl > 0);

    assert_int_equal(pt_submit(&f->c, "a", run, strlen(run), bytes_hdrs), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    char *got_h, *got_b;
    size_t got_hl, got_bl;
    stored(f, "FAIR_DISPATCH", 1, &got_h, &got_hl, &got_b, &got_bl);
    /* "NATS/1.0", Nats-Msg-Id first, fairq's six others, then the carried
     * lines and the blank line */
    const char first[] = "NATS/1.0\r\nNats-Msg-Id: a/b-1\r\n";
    assert_true(got_hl > sizeof first);
    assert_memory_equal(got_h, first, sizeof first - 1);
    const char *p = got_h + sizeof first - 1;
    for (int i = 0; i < 6; i++) {
        assert_memory_equal(p, "Fair-", 5);
        p = memchr(p, '\n', (size_t)(got_h + got_hl - p)) + 1;
    }
    assert_int_equal((size_t)(got_h + got_hl - p), cl + 2);
    assert_memory_equal(p, carried, cl);
    assert_memory_equal(p + cl, "\r\n", 2);
    assert_int_equal(got_bl, want_bl);
    assert_memory_equal(got_b, want_b, want_bl);
    free(want_h);
    free(want_b);
    free(got_h);
    free(got_b);
    free(carried);
    metric_is(f, "fairq_body_reads_total", body_reads);
}

static void test_dispatch_bytes_kept(void **state)
{
    check_dispatch_bytes(*state, 0);
}

static void test_dispatch_bytes_read(void **state)
{
    check_dispatch_bytes(*state, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_buffer_shared_past_its_fill_line, setup_buffer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_quiet_tenant_behind_loud_ones, setup_buffer,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_run_timeout_frees_slot, setup_timeout, teardown),
        cmocka_unit_test_setup_teardown(test_token_window, setup_tokens, teardown),
        cmocka_unit_test_setup_teardown(test_headers_carried, setup_headers, teardown),
        cmocka_unit_test_setup_teardown(test_claim_headers_any_case, setup_claims, teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_bytes_kept, setup_bytes_kept, teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_bytes_read, setup_bytes_read, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
