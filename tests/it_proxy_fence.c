/* it_proxy_fence.c -- a leader frozen past its lease or cut off from NATS, with a standby taking over under load: slow, never wrong. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <cjson/cJSON.h>

#include "opstest.h"
#include "relay.h"

/*
 * The leader reaches NATS through a relay (tests/support/relay.h) that the
 * test pauses to cut it off, or it is frozen with SIGSTOP; the standby
 * reaches NATS directly. Runs are submitted all along, ten every 100 ms
 * over four tenants. Once the leader is back and has stopped (exit 3),
 * every submitted run must have been stored once in FAIR_DISPATCH, in
 * each tenant's submit order, and completed; every completion reconciled
 * once (one done record in the journal); nothing left in FAIR_SUBMIT or
 * FAIR_DONE; and no run waited more than the lease's TTL + 5 s after the
 * standby took over (docs/protocol.md, sections 7 and 8).
 */

#define TENANTS 4
#define MAX_RUNS 8000
#define LEASE_TTL_MS 3000

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 32\n"
    "plans:\n  - name: free\n    weight: 1\n";

typedef struct fx {
    natstest *srv;
    nt_relay *relay;
    pt_proxy leader, standby;
    int leader_http, standby_http;
    pt_client c;
    pt_worker *w;
    pthread_t submitter;
    bool submitting;
    atomic_bool stop_submit;
    atomic_int submitted;       /* runs r-0 .. r-(submitted-1), PubAcks received */
    char submit_err[128];       /* why the submitter stopped early (read after the join) */
} fx;

static int64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int start(void **state, bool with_standby)
{
    fx *f = calloc(1, sizeof *f);
    *state = f;
    if (!f || natstest_start(&f->srv, NULL) != 0 ||
        nt_relay_start(&f->relay, natstest_port(f->srv)) != 0)
        return -1;
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", nt_relay_port(f->relay));
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    int rc = pt_proxy_start_url(&f->leader, f->srv, url, "leader", yaml);
    if (rc == 0)
        rc = pt_log_wait(&f->leader, "fairq-proxy running", 15000);
    if (rc == 0 && with_standby)
        rc = pt_proxy_start(&f->standby, f->srv, "standby", yaml);
    unsetenv("FAIRQ_HTTP_LISTEN");
    if (rc != 0 || (with_standby && pt_log_wait(&f->standby, "standing by", 10000) != 0) ||
        pt_connect(&f->c, f->srv) != 0)
        return -1;
    f->leader_http = ot_http_port(&f->leader, 5000);
    f->standby_http = with_standby ? ot_http_port(&f->standby, 5000) : 0;
    pt_worker_opts wo = {.concurrency = 32, .service_ms = 5};
    return f->leader_http > 0 && (!with_standby || f->standby_http > 0)
               ? pt_worker_start(&f->w, f->srv, &wo) : -1;
}

static int setup(void **state)
{
    return start(state, true);
}

static int setup_lone(void **state)
{
    return start(state, false);
}

static int teardown(void **state)
{
    fx *f = *state;
    if (!f)
        return 0;
    atomic_store(&f->stop_submit, true);
    if (f->submitting)
        pthread_join(f->submitter, NULL);
    pt_worker_stop(f->w);
    if (f->leader.proc.pid)
        kill(f->leader.proc.pid, SIGCONT);
    pt_proxy_stop(&f->leader);
    pt_proxy_stop(&f->standby);
    pt_close(&f->c);
    nt_relay_destroy(f->relay);
    natstest_destroy(f->srv);
    free(f);
    return 0;
}

/* Ten runs every 100 ms, r-i to tenant t(i % TENANTS), from a connection
 * of its own, until told to stop: each tenant's runs are stored in the
 * order of their ids. */
static void *submit_main(void *arg)
{
    fx *f = arg;
    pt_client c;
    if (pt_connect(&c, f->srv) != 0) {
        snprintf(f->submit_err, sizeof f->submit_err, "no connection");
        return NULL;
    }
    int i = 0;
    while (!atomic_load(&f->stop_submit) && i + 10 <= MAX_RUNS) {
        for (int k = 0; k < 10; k++, i++) {
            char tenant[16], body[64];
            snprintf(tenant, sizeof tenant, "t%d", i % TENANTS);
            snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
            if (pt_submit_async(&c, tenant, body, strlen(body), NULL) != 0)
                break;
        }
        long long t0 = nt_now_ms();
        if (pt_submit_flush(&c) != 0) {
            /* Runs past `submitted` may be stored all the same: what the
             * test then checks would fail without saying why. */
            snprintf(f->submit_err, sizeof f->submit_err,
                     "r-%d..r-%d: the flush failed after %lld ms", atomic_load(&f->submitted),
                     i - 1, nt_now_ms() - t0);
            break;
        }
        atomic_store(&f->submitted, i);
        nt_sleep_ms(100);
    }
    pt_close(&c);
    return NULL;
}

/* /readyz of the proxy on port: its status, and whether its body holds text. */
static bool readyz(int port, int want_status, const char *text)
{
    int status = 0;
    char *body = NULL;
    bool ok = ot_http_get(port, "/readyz", &status, &body) == 0 && status == want_status &&
              body && strstr(body, text);
    free(body);
    return ok;
}

static bool readyz_within(int port, int want_status, const char *text, int timeout_ms)
{
    long long end = nt_now_ms() + timeout_ms;
    while (!readyz(port, want_status, text) && nt_now_ms() < end)
        nt_sleep_ms(100);
    return readyz(port, want_status, text);
}

/* Whether /metrics of the proxy on port has the line `line` (whole). */
static bool metric_line(int port, const char *line)
{
    int status = 0;
    char *body = NULL, want[128];
    snprintf(want, sizeof want, "\n%s\n", line);
    bool ok = ot_http_get(port, "/metrics", &status, &body) == 0 && status == 200 && body &&
              strstr(body, want);
    free(body);
    return ok;
}

/* Wait up to timeout_ms for stream to hold no message. */
static uint64_t wait_empty(fx *f, const char *stream, int timeout_ms)
{
    long long end = nt_now_ms() + timeout_ms;
    for (;;) {
        jsStreamInfo *si = NULL;
        assert_int_equal(js_GetStreamInfo(&si, f->c.js, stream, NULL, NULL), NATS_OK);
        uint64_t n = si->State.Msgs;
        jsStreamInfo_Destroy(si);
        if (!n || nt_now_ms() >= end)
            return n;
        nt_sleep_ms(100);
    }
}

/* Every run r-0 .. r-(n-1) stored once in FAIR_DISPATCH, each tenant's in
 * the order of their ids, and dispatched within TTL + 5 s of the later of
 * its submit and the takeover (unix ms; < 0: no takeover, not checked). */
static void assert_dispatches(fx *f, int n, int64_t takeover_ms)
{
    pt_msg *m = NULL;
    size_t k = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    char *seen = calloc((size_t)n, 1);
    int last[TENANTS];
    int64_t worst = 0;
    for (int t = 0; t < TENANTS; t++)
        last[t] = -1;
    for (size_t i = 0; i < k; i++) {
        int id = -1;
        assert_int_equal(sscanf(m[i].run_id, "r-%d", &id), 1);
        assert_true(id >= 0 && id < n);
        if (seen[id])
            fail_msg("run r-%d stored twice in FAIR_DISPATCH", id);
        seen[id] = 1;
        if (id < last[id % TENANTS])
            fail_msg("tenant t%d: r-%d dispatched after r-%d", id % TENANTS, id,
                     last[id % TENANTS]);
        last[id % TENANTS] = id;
        int64_t from = m[i].submitted_at > takeover_ms ? m[i].submitted_at : takeover_ms;
        if (takeover_ms >= 0 && m[i].dispatched_at - from > worst)
            worst = m[i].dispatched_at - from;
    }
    fprintf(stderr, "  %zu runs stored once, in order; longest wait past the takeover or "
            "the submit: %lld ms\n", k, (long long)worst);
    assert_int_equal(k, (size_t)n);
    assert_true(worst <= LEASE_TTL_MS + 5000);
    free(seen);
    pt_msgs_free(m, k);
}

/* Every run r-0 .. r-(n-1) has exactly one done record in the journal:
 * its completion was reconciled once, by one leader or the other. */
static void assert_reconciled_once(fx *f, int n)
{
    pt_msg *m = NULL;
    size_t k = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIRQ_RUNS", &m, &k), 0);
    int *done = calloc((size_t)n, sizeof *done);
    for (size_t i = 0; i < k; i++) {
        cJSON *j = cJSON_ParseWithLength(m[i].data, m[i].len);
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "entries")) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "st");
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "r");
            int id = -1;
            if (cJSON_IsString(st) && strcmp(st->valuestring, "done") == 0 &&
                cJSON_IsString(r) && sscanf(r->valuestring, "r-%d", &id) == 1 && id >= 0 &&
                id < n)
                done[id]++;
        }
        cJSON_Delete(j);
    }
    for (int i = 0; i < n; i++)
        if (done[i] != 1)
            fail_msg("r-%d has %d done records in the journal", i, done[i]);
    free(done);
    pt_msgs_free(m, k);
}

/* The leader key's last value, revision and age as the server holds them. */
static void print_lease_key(fx *f)
{
    natsMsg *m = NULL;
    natsStatus s = js_GetLastMsg(&m, f->c.js, "KV_fairq_lease", "$KV.fairq_lease.leader", NULL,
                                 NULL);
    if (s != NATS_OK) {
        print_message("the leader key: none (%s)\n", natsStatus_GetText(s));
        return;
    }
    print_message("the leader key: '%.*s' at revision %llu, written %lld ms ago\n",
                  natsMsg_GetDataLength(m), natsMsg_GetData(m) ? natsMsg_GetData(m) : "",
                  (unsigned long long)natsMsg_GetSequence(m),
                  (long long)(unix_ms() - natsMsg_GetTime(m) / 1000000));
    natsMsg_Destroy(m);
}

enum fault { FREEZE, PARTITION };

/* Under load, the leader frozen or cut off for ms; the standby takes over. */
static void fault(fx *f, enum fault kind, int ms)
{
    assert_int_equal(pthread_create(&f->submitter, NULL, submit_main, f), 0);
    f->submitting = true;
    long long end = nt_now_ms() + 10000;
    while ((atomic_load(&f->submitted) < 200 || pt_worker_completed(f->w) < 100) &&
           nt_now_ms() < end)
        nt_sleep_ms(20);
    assert_true(pt_worker_completed(f->w) >= 100);
    /* A standby is a healthy sidecar: ready, and says so. The leader is
     * ready once its last renewal is fresh: a renewal answered late on a
     * loaded machine makes it 503 for a moment, which read once failed the
     * test before any fault; what follows is the fault's doing. */
    assert_true(readyz(f->standby_http, 200, "standby"));
    assert_true(readyz_within(f->leader_http, 200, "ready", 10000));
    /* Its metrics say what it knows: connected, not holding the lease,
     * standing by (they said disconnected: a snapshot never filled). */
    assert_true(metric_line(f->standby_http, "fairq_nats_connected 1"));
    assert_true(metric_line(f->standby_http, "fairq_dispatch_lease_held 0"));
    assert_true(metric_line(f->standby_http, "fairq_ready{reason=\"standby\"} 1"));
    assert_true(metric_line(f->leader_http, "fairq_dispatch_lease_held 1"));

    long long t0 = nt_now_ms();
    if (kind == FREEZE)
        assert_int_equal(kill(f->leader.proc.pid, SIGSTOP), 0);
    else
        nt_relay_pause(f->relay, true);
    if (kind == PARTITION) {
        /* Cut off, it cannot renew: not ready, and why (it said ready for
         * 19 s of a 25 s partition). */
        assert_true(readyz_within(f->leader_http, 503, "cannot renew the leader lease", 4000));
    }
    if (pt_log_wait(&f->standby, "leader lease acquired", 15000) != 0) {
        /* Failed once under load: say whether the server still held the
         * frozen leader's key past its TTL or the standby could not take
         * a key gone. */
        print_lease_key(f);
        pt_log_print(&f->standby, "lease");
        if (nt_proc_alive(&f->standby.proc))
            print_message("the standby runs\n");
        else
            print_message("the standby exited: code %d, wait status %d\n",
                          nt_proc_exit_code(&f->standby.proc), f->standby.proc.status);
        fail_msg("the standby did not take the lease within 15 s of the fault");
    }
    int64_t takeover = unix_ms();
    fprintf(stderr, "  standby took over %lld ms after the fault began\n", nt_now_ms() - t0);
    assert_true(readyz_within(f->standby_http, 200, "ready", 10000));
    long long left = t0 + ms - nt_now_ms();
    if (left > 0)
        nt_sleep_ms((int)left);
    if (kind == FREEZE)
        assert_int_equal(kill(f->leader.proc.pid, SIGCONT), 0);
    else
        nt_relay_pause(f->relay, false);

    /* Back, it finds the lease another's and stops for a restart as a
     * standby, having changed nothing. */
    assert_int_equal(nt_proc_wait(&f->leader.proc, 40000), 0);
    assert_int_equal(nt_proc_exit_code(&f->leader.proc), 3);
    nt_sleep_ms(500);
    atomic_store(&f->stop_submit, true);
    pthread_join(f->submitter, NULL);
    f->submitting = false;
    if (f->submit_err[0])
        fail_msg("the submitter stopped early: %s", f->submit_err);
    int n = atomic_load(&f->submitted);
    fprintf(stderr, "  %d runs submitted\n", n);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)n, 30000), 0);
    /* Nothing stuck: every submit and completion acked. */
    assert_int_equal(wait_empty(f, "FAIR_SUBMIT", 10000), 0);
    assert_int_equal(wait_empty(f, "FAIR_DONE", 10000), 0);
    assert_dispatches(f, n, takeover);
    assert_reconciled_once(f, n);
}

/* SIGSTOP past the lease, then SIGCONT: the resumed leader pulled from the
 * new leader's consumer and left runs stuck for a day (AckWait). */
static void test_leader_frozen_past_its_lease(void **state)
{
    fault(*state, FREEZE, 7000);
}

/* Cut off for 6 s: its connection survives (pings every 5 s, three
 * missed), so what it wrote before and after comes through at once. */
static void test_leader_cut_off_6s(void **state)
{
    fault(*state, PARTITION, 6000);
}

/* Cut off for 25 s: it reconnects after and finds itself fenced (it used
 * to recreate the live leader's consumers and write the journal). */
static void test_leader_cut_off_25s(void **state)
{
    fault(*state, PARTITION, 25000);
}

/* A lone leader whose server hangs for 5 s (SIGSTOP: connections open,
 * nothing answers): not ready while it cannot renew (it said ready through
 * a 10 s hang), changing nothing; then it renews, or takes the key again
 * in a new term if it aged out, sends what it held back, and goes on:
 * every run once, in order, nothing stuck. */
static void test_lone_leader_server_hang(void **state)
{
    fx *f = *state;
    /* A burst stored before the hang: it is being dispatched when it
     * begins (submits during the hang would fail on the producer's side). */
    const int n = 4000;
    for (int i = 0; i < n; i++) {
        char tenant[16], body[64];
        snprintf(tenant, sizeof tenant, "t%d", i % TENANTS);
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
        assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    /* Ready before the hang (a loaded machine can delay a renewal while
     * the burst comes in): what follows is then the hang's doing. */
    assert_true(readyz_within(f->leader_http, 200, "ready", 15000));
    assert_int_equal(natstest_pause(f->srv, true), 0);
    bool stale = readyz_within(f->leader_http, 503, "cannot renew the leader lease", 4000);
    nt_sleep_ms(2000);
    assert_int_equal(natstest_pause(f->srv, false), 0);
    assert_true(stale);
    assert_true(readyz_within(f->leader_http, 200, "ready", 15000));
    fprintf(stderr, "  %zu of %d completed at the hang's end; new terms: %d\n",
            pt_worker_completed(f->w), n, pt_log_count(&f->leader, "taken again in a new term"));
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)n, 30000), 0);
    assert_int_equal(wait_empty(f, "FAIR_SUBMIT", 10000), 0);
    assert_int_equal(wait_empty(f, "FAIR_DONE", 10000), 0);
    assert_true(nt_proc_alive(&f->leader.proc));
    assert_dispatches(f, n, -1);
    assert_reconciled_once(f, n);
}

/* Another leader's write in the journal (here its term marker, stored by
 * the test) fences this one at the server: its next batch is refused, it
 * settles nothing that batch carried and stops (exit 3); restarted, it
 * serves every run once. */
static void test_journal_fences_a_stale_leader(void **state)
{
    fx *f = *state;
    assert_int_equal(pthread_create(&f->submitter, NULL, submit_main, f), 0);
    f->submitting = true;
    long long end = nt_now_ms() + 10000;
    while (pt_worker_completed(f->w) < 100 && nt_now_ms() < end)
        nt_sleep_ms(20);
    const char mark[] = "{\"v\":1,\"entries\":[]}";
    jsPubAck *pa = NULL;
    assert_int_equal(js_Publish(&pa, f->c.js, "fairq.runs", mark, (int)strlen(mark), NULL, NULL),
                     NATS_OK);
    jsPubAck_Destroy(pa);
    assert_int_equal(nt_proc_wait(&f->leader.proc, 10000), 0);
    assert_int_equal(nt_proc_exit_code(&f->leader.proc), 3);
    assert_int_equal(pt_log_count(&f->leader, "the runs journal refused our batch"), 1);
    assert_int_equal(pt_proxy_restart(&f->leader), 0);
    assert_int_equal(pt_log_wait_n(&f->leader, "fairq-proxy running", 2, 15000), 0);
    nt_sleep_ms(500);
    atomic_store(&f->stop_submit, true);
    pthread_join(f->submitter, NULL);
    f->submitting = false;
    if (f->submit_err[0])
        fail_msg("the submitter stopped early: %s", f->submit_err);
    int n = atomic_load(&f->submitted);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)n, 30000), 0);
    assert_int_equal(wait_empty(f, "FAIR_SUBMIT", 10000), 0);
    assert_int_equal(wait_empty(f, "FAIR_DONE", 10000), 0);
    assert_dispatches(f, n, -1);
    assert_reconciled_once(f, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_leader_frozen_past_its_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leader_cut_off_6s, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leader_cut_off_25s, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lone_leader_server_hang, setup_lone, teardown),
        cmocka_unit_test_setup_teardown(test_journal_fences_a_stale_leader, setup_lone,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
