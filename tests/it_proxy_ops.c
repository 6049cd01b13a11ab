/* it_proxy_ops.c -- operating fairq-proxy end to end: metrics and probes, live reload, runtime overrides, logs. */
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "opstest.h"

#define WINDOW 4
#define WARMUP 8                /* dispatches after a change before shares are counted */
#define EST "1000"              /* every run's declared cost, so runs are tokens */

typedef struct fixture {
    natstest *srv;
    pt_proxy px;
    pt_client c;
    pt_worker *w;
} fixture;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    /* The children inherit these: metrics on a port the proxy picks and
     * logs, and a low threshold for old-queue warnings. */
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    setenv("FAIRQ_QUEUE_AGE_WARN_MS", "300", 1);
    return natstest_start(&f->srv, NULL) == 0 && pt_connect(&f->c, f->srv) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    pt_worker_stop(f->w);
    if (f->px.proc.pid)
        assert_int_equal(pt_proxy_stop(&f->px), 0);
    pt_close(&f->c);
    natstest_destroy(f->srv);
    unsetenv("FAIRQ_HTTP_LISTEN");
    unsetenv("FAIRQ_QUEUE_AGE_WARN_MS");
    unsetenv("FAIRQ_NATS_URL");
    free(f);
    return 0;
}

static void start_proxy(fixture *f, const char *name, const char *yaml, int nth)
{
    assert_int_equal(pt_proxy_start(&f->px, f->srv, name, yaml), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", nth, 15000), 0);
}

static void start_worker(fixture *f, int service_ms)
{
    pt_worker_opts wo = {.concurrency = WINDOW, .service_ms = service_ms};
    assert_int_equal(pt_worker_start(&f->w, f->srv, &wo), 0);
}

/* n runs each for tenants a and b, interleaved, run ids "<tenant>-<i>". */
static void submit_pair(fixture *f, const char *a, const char *b, int n)
{
    const char *h[] = {"Fair-Est-Tokens", EST, NULL};
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            char body[64];
            snprintf(body, sizeof body, "{\"run_id\":\"%s-%d\"}", k ? b : a, i);
            assert_int_equal(pt_submit_async(&f->c, k ? b : a, body, strlen(body), h), 0);
        }
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
}

/* Stop the workers and let what is under way settle: the window fills and
 * dispatching stops. Returns the last dispatch sequence, the mark between
 * two phases. */
static uint64_t pause_workers(fixture *f)
{
    pt_worker_hold(f->w, true);
    sleep_ms(200);
    return pt_stream_last(&f->c, "FAIR_DISPATCH");
}

/* Let the workers go until `more` further runs are completed, then pause
 * them again; returns the new mark. */
static uint64_t run_phase(fixture *f, size_t more)
{
    size_t done = pt_worker_completed(f->w);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, done + more, 60000), 0);
    return pause_workers(f);
}

/* Dispatches of a and b with a sequence in (from + WARMUP, to], counted
 * only while both still had runs queued (each submitted `each`). */
static void shares(const pt_msg *m, size_t n, uint64_t from, uint64_t to, const char *a,
                   const char *b, int each, int got[2])
{
    int left[2] = {each, each};
    got[0] = got[1] = 0;
    for (size_t i = 0; i < n; i++) {
        int k = strcmp(m[i].tenant, a) == 0 ? 0 : 1;
        assert_string_equal(m[i].tenant, k ? b : a);
        if (m[i].seq > from + WARMUP && m[i].seq <= to && left[0] > 0 && left[1] > 0)
            got[k]++;
        left[k]--;
    }
    assert_true(got[0] + got[1] >= 40);
}

/* Every run of a and b dispatched exactly once, each tenant's in the order
 * it submitted them. */
static void assert_each_once_in_order(const pt_msg *m, size_t n, const char *a, const char *b,
                                      int each)
{
    assert_int_equal(n, (size_t)(2 * each));
    int next[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        int k = strcmp(m[i].tenant, a) == 0 ? 0 : 1;
        char want[64];
        snprintf(want, sizeof want, "%s-%d", k ? b : a, next[k]++);
        assert_string_equal(m[i].run_id, want);
    }
}

static double ratio(const int got[2])
{
    return got[1] ? (double)got[0] / got[1] : 1e9;
}

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("expected \"%s\" in: %s", part, s ? s : "(nothing)");
}

/* ---- metrics and probes ------------------------------------------------- */

#define FLOOD 2000
#define SMALL 20

static long long stat_of(const char *text, const char *series)
{
    const char *at = strstr(text, series);
    return at ? atoll(at + strlen(series)) : -1;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static int http_status(int port, const char *path, char **body)
{
    int status = 0;
    assert_int_equal(ot_http_get(port, path, &status, body), 0);
    return status;
}

/* Poll path until it answers want, up to 20 s; its last body in *body. */
static void wait_status(int port, const char *path, int want, char **body)
{
    long long end = nt_now_ms() + 20000;
    int got = 0;
    do {
        free(*body);
        *body = NULL;
        if ((got = http_status(port, path, body)) == want)
            return;
        sleep_ms(100);
    } while (nt_now_ms() < end);
    fail_msg("%s answered %d, not %d, for 20 s: %s", path, got, want, *body ? *body : "");
}

static void test_metrics_during_flood_and_probes(void **state)
{
    fixture *f = *state;
    start_proxy(f, "metrics",
                "scheduler:\n  default_plan: free\n"
                "window:\n  max_in_flight: 8\n"
                "plans:\n  - name: free\n    weight: 1\n  - name: pro\n    weight: 3\n"
                "tenants:\n  - id: small\n    plan: pro\n", 1);
    int port = ot_http_port(&f->px, 5000);
    assert_true(port > 0);
    char *body = NULL;
    assert_int_equal(http_status(port, "/healthz", &body), 200);
    free(body);
    body = NULL;
    wait_status(port, "/readyz", 200, &body);     /* once its consumers are in place */
    assert_contains(body, "ready");
    free(body);
    assert_int_equal(http_status(port, "/nothing-here", &body), 404);
    free(body);

    pt_worker_opts wo = {.concurrency = 8, .service_ms = 10};
    assert_int_equal(pt_worker_start(&f->w, f->srv, &wo), 0);
    for (int i = 0; i < FLOOD; i++)
        assert_int_equal(pt_submit_async(&f->c, "loud", "{}", 2, NULL), 0);
    for (int i = 0; i < SMALL; i++)
        assert_int_equal(pt_submit_async(&f->c, "small", "{}", 2, NULL), 0);
    assert_int_equal(pt_submit_flush(&f->c), 0);

    /* Scrape through the flood; keep the scrape that saw the most queued. */
    char flood[600], final[600];
    snprintf(flood, sizeof flood, "%s/flood.prom", natstest_dir(f->srv));
    snprintf(final, sizeof final, "%s/final.prom", natstest_dir(f->srv));
    long long most = -1;
    int scrapes = 0;
    while (pt_worker_completed(f->w) < FLOOD + SMALL) {
        char *text = NULL;
        assert_int_equal(http_status(port, "/metrics", &text), 200);
        scrapes++;
        long long q = stat_of(text, "fairq_tenant_queued_runs{tenant=\"loud\",plan=\"free\"} ");
        if (q > most) {
            most = q;
            write_file(flood, text);
        }
        free(text);
        sleep_ms(50);
    }
    fprintf(stderr, "metrics: %d scrapes during the flood, at most %lld of loud's runs queued\n",
            scrapes, most);
    assert_true(most > 0);
    /* The snapshot is refreshed each second: wait until it has the end. */
    long long end = nt_now_ms() + 10000, sent = -1;
    char *text = NULL;
    while (sent != FLOOD && nt_now_ms() < end) {
        free(text);
        text = NULL;
        assert_int_equal(http_status(port, "/metrics", &text), 200);
        sent = stat_of(text, "fairq_tenant_dispatched_runs_total{tenant=\"loud\",plan=\"free\"} ");
        sleep_ms(100);
    }
    write_file(final, text);
    free(text);
    const char *args[] = {"metrics", flood, final, "--flooding", "loud",
                          "--tenant", "loud:free:2000:default", "--tenant", "small:pro:20:config",
                          NULL};
    assert_int_equal(ot_check(args), 0);

    /* Ready only while connected: the reason says what is missing. */
    assert_int_equal(natstest_stop(f->srv), 0);
    body = NULL;
    wait_status(port, "/readyz", 503, &body);
    assert_contains(body, "disconnected from NATS");
    free(body);
    body = NULL;
    assert_int_equal(http_status(port, "/healthz", &body), 200);
    free(body);
    body = NULL;
    assert_int_equal(natstest_restart(f->srv), 0);
    wait_status(port, "/readyz", 200, &body);
    free(body);
}

/* ---- live reload ---------------------------------------------------------- */

#define RELOAD_EACH 400

/* Tenant a on free (weight 1, at most pending queued), b on gold (weight
 * gold); extra appended. */
static void reload_yaml(char *buf, size_t cap, int gold, int pending, const char *extra)
{
    snprintf(buf, cap,
             "scheduler:\n  default_plan: free\n  quantum_tokens: 1000\n"
             "window:\n  max_in_flight: %d\n"
             "plans:\n  - name: gold\n    weight: %d\n  - name: free\n    weight: 1\n"
             "    max_pending: %d\n"
             "tenants:\n  - id: a\n    plan: free\n  - id: b\n    plan: gold\n%s",
             WINDOW, gold, pending, extra);
}

static void test_reload_on_sighup(void **state)
{
    fixture *f = *state;
    char yaml[1024];
    reload_yaml(yaml, sizeof yaml, 1, 100000, "");
    start_proxy(f, "reload", yaml, 1);
    start_worker(f, 3);
    submit_pair(f, "a", "b", RELOAD_EACH);
    assert_int_equal(pt_worker_wait_completed(f->w, 100, 60000), 0);
    uint64_t m0 = pause_workers(f);

    /* A valid change: gold weighs 3, and free's max_pending falls far below
     * what a has queued, which stays queued; the dispatch subject changes
     * too, which only a restart may apply. */
    reload_yaml(yaml, sizeof yaml, 3, 10, "subjects:\n  dispatch: fair.elsewhere\n");
    assert_int_equal(ot_config_rewrite(&f->px, yaml), 0);
    assert_int_equal(ot_proxy_signal(&f->px, SIGHUP), 0);
    assert_int_equal(pt_log_wait(&f->px, "config reloaded", 10000), 0);
    assert_int_equal(pt_log_count(&f->px, "restart_needed=subjects.dispatch"), 1);
    char *r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"b\"}", NULL);
    assert_contains(r, "\"weight\":3");
    assert_contains(r, "\"source\":\"config\"");
    free(r);
    /* a's queue is over its new max_pending: a new run is refused. */
    const char *extra = "{\"run_id\":\"a-extra\"}";
    assert_int_equal(pt_submit(&f->c, "a", extra, strlen(extra), NULL), 0);
    uint64_t m1 = run_phase(f, 240);

    /* An invalid file is refused whole, by signal and by request. */
    reload_yaml(yaml, sizeof yaml, 0, 10, "");
    assert_int_equal(ot_config_rewrite(&f->px, yaml), 0);
    assert_int_equal(ot_proxy_signal(&f->px, SIGHUP), 0);
    assert_int_equal(pt_log_wait(&f->px, "config reload refused", 10000), 0);
    assert_int_equal(pt_log_count(&f->px, "reload.yaml:12:5: plans[0].weight: must be >= 1"), 1);
    r = pt_request(&f->c, "fair.admin.reload", "", NULL);
    assert_contains(r, "\"ok\":false");
    assert_contains(r, "reload.yaml:12:5: plans[0].weight: must be >= 1");
    free(r);
    r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"b\"}", NULL);
    assert_contains(r, "\"weight\":3");
    free(r);

    /* The valid file again, by request: the reply names what needs a restart. */
    reload_yaml(yaml, sizeof yaml, 3, 10, "subjects:\n  dispatch: fair.elsewhere\n");
    assert_int_equal(ot_config_rewrite(&f->px, yaml), 0);
    r = pt_request(&f->c, "fair.admin.reload", "", NULL);
    assert_contains(r, "\"ok\":true");
    assert_contains(r, "\"restart_needed\":[\"subjects.dispatch\"]");
    free(r);

    size_t done = pt_worker_completed(f->w);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 2 * RELOAD_EACH, 60000), 0);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    assert_each_once_in_order(m, n, "a", "b", RELOAD_EACH);
    assert_int_equal(pt_worker_received(f->w), 2 * RELOAD_EACH);
    int before[2], after[2], kept[2];
    shares(m, n, 0, m0, "b", "a", RELOAD_EACH, before);
    shares(m, n, m0, m1, "b", "a", RELOAD_EACH, after);
    shares(m, n, m1, UINT64_MAX, "b", "a", RELOAD_EACH, kept);
    pt_msgs_free(m, n);
    fprintf(stderr, "reload: b:a runs before %d:%d (%.2f), after the reload %d:%d (%.2f), "
            "after the refused ones %d:%d (%.2f); %zu runs completed after them\n",
            before[0], before[1], ratio(before), after[0], after[1], ratio(after), kept[0],
            kept[1], ratio(kept), 2 * RELOAD_EACH - done);
    assert_true(ratio(before) > 0.8 && ratio(before) < 1.25);
    assert_true(ratio(after) > 2.4 && ratio(after) < 3.75);
    assert_true(ratio(kept) > 2.4 && ratio(kept) < 3.75);
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].subject, "fair.rejected.a");
    assert_contains(m[0].error, "tenant_full");
    pt_msgs_free(m, n);
    char *st = pt_stats(&f->c);
    assert_contains(st, "\"config_reloads\":2");
    assert_contains(st, "\"config_reload_failures\":2");
    free(st);
}

/* Poll the reply to subject (body) until it holds part, up to timeout_ms;
 * returns the ms it took, or -1. Requests that get no answer (the proxy
 * reconnecting) are retried. */
static long long poll_reply(fixture *f, const char *subject, const char *body, const char *part,
                            int timeout_ms)
{
    long long t0 = nt_now_ms();
    do {
        char *r = pt_request(&f->c, subject, body, NULL);
        bool found = r && strstr(r, part);
        free(r);
        if (found)
            return nt_now_ms() - t0;
        sleep_ms(10);
    } while (nt_now_ms() < t0 + timeout_ms);
    return -1;
}

#define UNKNOWN_EACH 5

/* unknown_tenants switched from admit to reject by a reload: the unlisted
 * tenant's new run is refused with unknown_tenant, while its runs queued
 * before the reload and the listed tenant's runs are all dispatched, once,
 * in order. */
static void test_reload_rejects_unknown_tenants(void **state)
{
    fixture *f = *state;
    static const char fmt[] =
        "scheduler:\n  default_plan: free\n  unknown_tenants: %s\n"
        "window:\n  max_in_flight: 2\n"
        "plans:\n  - name: free\n    weight: 1\n"
        "tenants:\n  - id: known\n";
    char yaml[512];
    snprintf(yaml, sizeof yaml, fmt, "admit");
    start_proxy(f, "unknown", yaml, 1);
    /* No workers yet: two runs fill the window, the other eight wait. */
    submit_pair(f, "known", "stranger", UNKNOWN_EACH);
    assert_true(poll_reply(f, "fair.admin.stats", "{\"limit\":0}", "\"queued_runs\":8,", 10000) >=
                0);

    snprintf(yaml, sizeof yaml, fmt, "reject");
    assert_int_equal(ot_config_rewrite(&f->px, yaml), 0);
    assert_int_equal(ot_proxy_signal(&f->px, SIGHUP), 0);
    assert_int_equal(pt_log_wait(&f->px, "config reloaded", 10000), 0);
    const char *late = "{\"run_id\":\"stranger-late\"}";
    char more[64];
    snprintf(more, sizeof more, "{\"run_id\":\"known-%d\"}", UNKNOWN_EACH);
    assert_int_equal(pt_submit(&f->c, "stranger", late, strlen(late), NULL), 0);
    assert_int_equal(pt_submit(&f->c, "known", more, strlen(more), NULL), 0);

    start_worker(f, 1);
    assert_int_equal(pt_worker_wait_completed(f->w, 2 * UNKNOWN_EACH + 1, 30000), 0);
    sleep_ms(300);      /* nothing else may come */
    assert_int_equal(pt_worker_received(f->w), 2 * UNKNOWN_EACH + 1);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    assert_int_equal(n, 2 * UNKNOWN_EACH + 1);
    int next[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        int k = strcmp(m[i].tenant, "known") == 0 ? 0 : 1;
        char want[64];
        snprintf(want, sizeof want, "%s-%d", k ? "stranger" : "known", next[k]++);
        assert_string_equal(m[i].run_id, want);
    }
    assert_int_equal(next[0], UNKNOWN_EACH + 1);
    assert_int_equal(next[1], UNKNOWN_EACH);
    pt_msgs_free(m, n);
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].subject, "fair.rejected.stranger");
    assert_int_equal(strncmp(m[0].error, "unknown_tenant: ", 16), 0);
    assert_int_equal(m[0].len, strlen(late));
    assert_memory_equal(m[0].data, late, strlen(late));
    pt_msgs_free(m, n);
}

/* ---- runtime overrides ------------------------------------------------------ */

#define OVR_EACH 600

static const char ovr_yaml[] =
    "scheduler:\n  default_plan: free\n  quantum_tokens: 1000\n"
    "window:\n  max_in_flight: 4\n"
    "plans:\n  - name: free\n    weight: 1\n  - name: gold\n    weight: 3\n"
    "tenants:\n  - id: a\n    plan: free\n  - id: b\n    plan: free\n";

/* Each request is refused with a JSON error and changes nothing. */
static void refuse(fixture *f, const char *subject, const char *body, const char *why)
{
    char *r = pt_request(&f->c, subject, body, NULL);
    assert_contains(r, "\"ok\":false");
    assert_contains(r, why);
    free(r);
}

static void test_overrides_admin_bucket_restart(void **state)
{
    fixture *f = *state;
    start_proxy(f, "overrides", ovr_yaml, 1);
    start_worker(f, 3);
    submit_pair(f, "a", "b", OVR_EACH);
    assert_int_equal(pt_worker_wait_completed(f->w, 80, 60000), 0);
    uint64_t m0 = pause_workers(f);

    /* Through the admin subject (with fairq-admin, as an operator would):
     * b moves to gold, in force on the reply. */
    char *r = NULL;
    assert_int_equal(ot_admin(f->srv, "tenant.set", "{\"tenant\":\"b\",\"plan\":\"gold\"}", &r),
                     0);
    assert_contains(r, "\"ok\":true");
    assert_contains(r, "\"plan\":\"gold\",\"weight\":3");
    assert_contains(r, "\"source\":\"override\",\"override\":{\"plan\":\"gold\"}");
    free(r);
    uint64_t m1 = run_phase(f, 200);

    /* Straight into the bucket by a plain client: a weighs 6 within a
     * second, before the workers take another run. */
    long long t0 = nt_now_ms();
    assert_int_equal(ot_kv_put(&f->c, "fairq_tenants", "a", "{\"weight\":6}"), 0);
    long long seen = -1;
    while (seen < 0 && nt_now_ms() < t0 + 1000) {
        r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"a\"}", NULL);
        if (r && strstr(r, "\"weight\":6"))
            seen = nt_now_ms() - t0;
        free(r);
    }
    fprintf(stderr, "overrides: a bucket write was in force after %lld ms\n", seen);
    sleep_ms((int)(t0 + 1000 - nt_now_ms() > 0 ? t0 + 1000 - nt_now_ms() : 0));
    uint64_t m2 = run_phase(f, 200);

    refuse(f, "fair.admin.tenant.set", "not json", "not a JSON object");
    refuse(f, "fair.admin.tenant.set", "{\"weight\":2}", "tenant");
    refuse(f, "fair.admin.tenant.set", "{\"tenant\":\"a b\",\"weight\":2}", "tenant");
    refuse(f, "fair.admin.tenant.set", "{\"tenant\":\"a\",\"weight\":0}", "weight");
    refuse(f, "fair.admin.tenant.set", "{\"tenant\":\"a\",\"wieght\":2}", "unknown field");
    refuse(f, "fair.admin.tenant.set", "{\"tenant\":\"a\",\"plan\":\"platinum\"}",
           "platinum is not defined");
    refuse(f, "fair.admin.tenant.get", "{}", "tenant");
    refuse(f, "fair.admin.nonsense", "", "unknown admin request");
    assert_int_equal(ot_admin(f->srv, "tenant.set", "{\"tenant\":\"a\",\"weight\":-1}", &r), 1);
    assert_contains(r, "weight");
    free(r);
    /* An invalid value in the bucket is refused too, and the policy stays. */
    assert_int_equal(ot_kv_put(&f->c, "fairq_tenants", "a", "{\"weight\":\"heavy\"}"), 0);
    assert_int_equal(pt_log_wait(&f->px, "override refused", 5000), 0);
    r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"a\"}", NULL);
    assert_contains(r, "\"weight\":6,");
    assert_contains(r, "\"override\":{\"weight\":6}");
    free(r);
    assert_int_equal(ot_kv_put(&f->c, "fairq_tenants", "a", "{\"weight\":6}"), 0);
    char *st = pt_stats(&f->c);
    assert_contains(st, "\"tenant\":\"b\",\"plan\":\"gold\",\"source\":\"override\"");
    assert_contains(st, "\"overrides_refused\":1");
    free(st);

    /* A restart reads both back before its first dispatch. */
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    assert_int_equal(pt_log_count(&f->px, "msg=\"overrides read\" bucket=fairq_tenants in_force=2"),
                     1);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 2 * OVR_EACH, 60000), 0);

    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    assert_each_once_in_order(m, n, "a", "b", OVR_EACH);
    int before[2], admin[2], bucket[2], restarted[2];
    shares(m, n, 0, m0, "a", "b", OVR_EACH, before);
    shares(m, n, m0, m1, "a", "b", OVR_EACH, admin);
    shares(m, n, m1, m2, "a", "b", OVR_EACH, bucket);
    shares(m, n, m2, UINT64_MAX, "a", "b", OVR_EACH, restarted);
    pt_msgs_free(m, n);
    fprintf(stderr, "overrides: a:b runs before %d:%d (%.2f), after b's plan override %d:%d "
            "(%.2f), after a's weight in the bucket %d:%d (%.2f), after the restart %d:%d (%.2f)\n",
            before[0], before[1], ratio(before), admin[0], admin[1], ratio(admin), bucket[0],
            bucket[1], ratio(bucket), restarted[0], restarted[1], ratio(restarted));
    assert_true(ratio(before) > 0.8 && ratio(before) < 1.25);
    assert_true(ratio(admin) > 1 / 3.75 && ratio(admin) < 1 / 2.4);  /* 1:3 */
    assert_true(ratio(bucket) > 1.6 && ratio(bucket) < 2.5);          /* 6:3 */
    assert_true(ratio(restarted) > 1.6 && ratio(restarted) < 2.5);
}

/* Overrides ride through a nats-server restart under the running proxy,
 * graceful and kill -9: the one in force stays, and once the proxy serves
 * again a value written to the bucket applies within a second (the watch
 * came back). */
static void test_overrides_survive_server_restart(void **state)
{
    fixture *f = *state;
    start_proxy(f, "kvrestart", ovr_yaml, 1);
    assert_int_equal(ot_kv_put(&f->c, "fairq_tenants", "a", "{\"weight\":4}"), 0);
    assert_true(poll_reply(f, "fair.admin.tenant.get", "{\"tenant\":\"a\"}", "\"weight\":4,",
                           1000) >= 0);
    static const char *const put[] = {"{\"plan\":\"gold\"}", "{\"weight\":7}"};
    static const char *const want[] = {"\"plan\":\"gold\",\"weight\":3,",
                                       "\"plan\":\"free\",\"weight\":7,"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(i ? natstest_kill(f->srv) : natstest_stop(f->srv), 0);
        assert_int_equal(natstest_restart(f->srv), 0);
        assert_int_equal(pt_log_wait_n(&f->px, "reconnected", i + 1, 20000), 0);
        assert_true(poll_reply(f, "fair.admin.tenant.get", "{\"tenant\":\"a\"}",
                               "\"weight\":4,", 20000) >= 0);
        /* The client may still be reconnecting: retry its write. */
        long long end = nt_now_ms() + 10000;
        while (ot_kv_put(&f->c, "fairq_tenants", "b", put[i]) != 0 && nt_now_ms() < end)
            sleep_ms(100);
        long long took = poll_reply(f, "fair.admin.tenant.get", "{\"tenant\":\"b\"}", want[i],
                                    1000);
        fprintf(stderr, "overrides: a bucket write after a server %s was in force after %lld ms\n",
                i ? "kill -9 and restart" : "restart", took);
        assert_true(took >= 0);
    }
    char *r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"a\"}", NULL);
    assert_contains(r, "\"source\":\"override\",\"override\":{\"weight\":4}");
    free(r);
}

/* An override removed is forgotten once the watch echoes its deletion
 * (the proxy keeps no record per key ever deleted); setting it again then
 * writes over the bucket's delete marker, whose revision is read back. The
 * bucket refuses a value past its bound. */
static void test_override_deleted_then_set_again(void **state)
{
    fixture *f = *state;
    start_proxy(f, "ovrforget", ovr_yaml, 1);
    const char *sets[] = {"{\"tenant\":\"a\",\"weight\":2}", "{\"tenant\":\"a\",\"weight\":null}"};
    const char *want[] = {"\"override\":{\"weight\":2}", "\"override\":null"};
    for (int i = 0; i < 2; i++) {
        char *r = pt_request(&f->c, "fair.admin.tenant.set", sets[i], NULL);
        assert_contains(r, "\"ok\":true");
        assert_contains(r, want[i]);
        free(r);
    }
    /* The watch delivers in revision order: once a later key is in force,
     * the deletion's echo has come. */
    assert_int_equal(ot_kv_put(&f->c, "fairq_tenants", "b", "{\"weight\":5}"), 0);
    assert_true(poll_reply(f, "fair.admin.tenant.get", "{\"tenant\":\"b\"}", "\"weight\":5,",
                           5000) >= 0);
    char *r = pt_request(&f->c, "fair.admin.tenant.set", "{\"tenant\":\"a\",\"weight\":3}", NULL);
    assert_contains(r, "\"ok\":true");
    assert_contains(r, "\"override\":{\"weight\":3}");
    free(r);
    char big[2048];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[0] = '{';
    big[sizeof big - 2] = '}';
    assert_int_equal(ot_kv_put(&f->c, "fairq_tenants", "c", big), -1);
}

/* ---- logs ------------------------------------------------------------------ */

static void test_logs_in_both_formats(void **state)
{
    fixture *f = *state;
    /* A password in the URL must not reach the log. */
    char url[256];
    snprintf(url, sizeof url, "nats://fairq:s3cret-pw@127.0.0.1:%d", natstest_port(f->srv));
    setenv("FAIRQ_NATS_URL", url, 1);
    static const char base[] =
        "scheduler:\n  default_plan: free\n"
        "window:\n  max_in_flight: 4\n"
        "plans:\n  - name: free\n    weight: 1\n";
    char yaml[512];
    snprintf(yaml, sizeof yaml, "%slog:\n  format: json\n", base);
    start_proxy(f, "json", yaml, 1);
    /* No workers: four runs fill the window, the rest wait. */
    for (int i = 0; i < 20; i++)
        assert_int_equal(pt_submit(&f->c, "slow", "{}", 2, NULL), 0);
    assert_int_equal(pt_log_wait(&f->px, "tenant queue is old", 10000), 0);
    assert_int_equal(ot_config_rewrite(&f->px, "log:\n  format: yaml\n"), 0);
    assert_int_equal(ot_proxy_signal(&f->px, SIGHUP), 0);
    assert_int_equal(pt_log_wait(&f->px, "config reload refused", 10000), 0);
    sleep_ms(2500);
    /* Rate-limited: the queue stays old, the warning is not repeated. */
    assert_int_equal(pt_log_count(&f->px, "tenant queue is old"), 1);
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    const char *json[] = {"logs", "json", f->px.log,
                          "--require", "fairq-proxy starting:version",
                          "--require", "fairq-proxy starting:effective",
                          "--require", "tenant queue is old:age_ms",
                          "--require", "config reload refused; the config in force stays:reason",
                          "--require", "fairq-proxy stopped",
                          "--forbid", "s3cret-pw", NULL};
    assert_int_equal(ot_check(json), 0);
    assert_int_equal(pt_log_count(&f->px, "\"effective\":\"nats.url=nats://***@127.0.0.1:"), 1);

    /* logfmt at level warn: only warnings and errors. */
    snprintf(yaml, sizeof yaml, "%slog:\n  format: logfmt\n  level: warn\n", base);
    assert_int_equal(pt_proxy_start(&f->px, f->srv, "logfmt", yaml), 0);
    assert_int_equal(pt_log_wait(&f->px, "tenant queue is old", 15000), 0);
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    const char *logfmt[] = {"logs", "logfmt", f->px.log, "--min-level", "warn",
                            "--require", "tenant queue is old:suppressed",
                            "--forbid", "s3cret-pw", NULL};
    assert_int_equal(ot_check(logfmt), 0);
}

#define IDLE_TENANTS 50

/* Tenants that had a run and hold nothing since are forgotten after the
 * longer of the duplicate window and the run timeout (a second each here),
 * unless listed: one run from each of many tenants does not cost memory
 * for good. A forgotten tenant that comes back starts anew. */
static void test_idle_tenants_forgotten(void **state)
{
    fixture *f = *state;
    start_proxy(f, "idle",
                "streams:\n  duplicate_window_ms: 1000\n"
                "scheduler:\n  default_plan: free\n"
                "window:\n  max_in_flight: 4\n  run_timeout_ms: 1000\n"
                "plans:\n  - name: free\n    weight: 1\n"
                "tenants:\n  - id: kept\n", 1);
    start_worker(f, 1);
    const char *h[] = {"Fair-Est-Tokens", EST, NULL};
    for (int i = 0; i <= IDLE_TENANTS; i++) {
        char tenant[16], body[64];
        snprintf(tenant, sizeof tenant, i < IDLE_TENANTS ? "u%d" : "kept", i);
        snprintf(body, sizeof body, "{\"run_id\":\"%s-0\"}", tenant);
        assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), h), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, IDLE_TENANTS + 1, 20000), 0);
    /* Only the listed one is left, in the proxy and in the scheduler. */
    assert_true(poll_reply(f, "fair.admin.stats", "{\"limit\":0}", "\"tenants_total\":1,",
                           15000) >= 0);
    assert_true(poll_reply(f, "fair.admin.stats", "{\"limit\":0}", "\"tenants\":1,", 1000) >=
                0);
    char *r = pt_request(&f->c, "fair.admin.stats", "", NULL);
    assert_non_null(r);
    assert_non_null(strstr(r, "\"tenant\":\"kept\""));
    assert_null(strstr(r, "\"tenant\":\"u7\""));
    free(r);
    /* u7 comes back: served, its counters from zero. */
    const char again[] = "{\"run_id\":\"u7-1\"}";
    assert_int_equal(pt_submit(&f->c, "u7", again, strlen(again), h), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, IDLE_TENANTS + 2, 20000), 0);
    assert_true(poll_reply(f, "fair.admin.stats", "{\"tenant\":\"u7\"}",
                           "\"dispatched_runs\":1,", 5000) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_during_flood_and_probes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_on_sighup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload_rejects_unknown_tenants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overrides_admin_bucket_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overrides_survive_server_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_override_deleted_then_set_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logs_in_both_formats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_tenants_forgotten, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
