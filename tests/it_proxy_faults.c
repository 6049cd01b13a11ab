/* it_proxy_faults.c -- kill -9 of the proxy, a nats-server restart, SIGTERM, and two proxies on one set of streams. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "proxytest.h"

#define WINDOW 16
#define TENANTS 3

typedef struct fixture {
    natstest *srv;
    pt_proxy px, px2;
    pt_client c;
    pt_worker *w;
} fixture;

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 16\n"
    "plans:\n  - name: free\n    weight: 1\n";

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    if (natstest_start(&f->srv, NULL) != 0 || pt_proxy_start(&f->px, f->srv, "proxy", yaml) != 0 ||
        pt_log_wait(&f->px, "fairq-proxy running", 15000) != 0 || pt_connect(&f->c, f->srv) != 0)
        return -1;
    pt_worker_opts wo = {.concurrency = 2 * WINDOW, .service_ms = 5};
    return pt_worker_start(&f->w, f->srv, &wo);
}

static int teardown(void **state)
{
    fixture *f = *state;
    pt_worker_stop(f->w);
    if (f->px.proc.pid)
        pt_proxy_stop(&f->px);
    if (f->px2.proc.pid)
        pt_proxy_stop(&f->px2);
    pt_close(&f->c);
    natstest_destroy(f->srv);
    free(f);
    return 0;
}

static void submit_runs(fixture *f, int from, int n)
{
    for (int i = from; i < from + n; i++) {
        char tenant[16], body[64];
        snprintf(tenant, sizeof tenant, "t%d", i % TENANTS);
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
        assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
}

/* FAIR_DISPATCH holds every run r-0 .. r-(n-1) exactly once: no run was
 * lost and none reached the workers twice. */
static void assert_each_dispatched_once(fixture *f, int n)
{
    pt_msg *m = NULL;
    size_t k = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    char *seen = calloc((size_t)n, 1);
    for (size_t i = 0; i < k; i++) {
        int id = -1;
        assert_int_equal(sscanf(m[i].run_id, "r-%d", &id), 1);
        assert_true(id >= 0 && id < n);
        if (seen[id])
            fail_msg("run r-%d dispatched twice", id);
        seen[id] = 1;
    }
    assert_int_equal(k, (size_t)n);
    free(seen);
    pt_msgs_free(m, k);
}

static cJSON *stats(fixture *f)
{
    char *s = pt_stats(&f->c);
    assert_non_null(s);
    cJSON *j = cJSON_Parse(s);
    free(s);
    assert_non_null(j);
    return j;
}

static long overall(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "overall"), key);
    assert_true(cJSON_IsNumber(v));
    return (long)v->valuedouble;
}

static void test_kill9_mid_flood_then_restart(void **state)
{
    fixture *f = *state;
    const int N = 600;
    submit_runs(f, 0, N);
    assert_int_equal(pt_worker_wait_completed(f->w, 100, 30000), 0);
    /* Workers stay busy with what they hold while the proxy dies. */
    pt_worker_hold(f->w, true);
    sleep_ms(300);
    assert_int_equal(pt_proxy_kill(&f->px), 0);
    uint64_t last_before = pt_stream_last(&f->c, "FAIR_DISPATCH");
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    /* Its old lease must age out first: a takeover within a few seconds. */
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    sleep_ms(500);
    cJSON *j = stats(f);
    long adopted = overall(j, "adopted"), in_flight = overall(j, "in_flight");
    cJSON_Delete(j);
    uint64_t last_after = pt_stream_last(&f->c, "FAIR_DISPATCH");
    fprintf(stderr, "kill -9: %ld runs adopted into the window after restart, %ld in flight, "
            "%llu dispatched meanwhile\n", adopted, in_flight,
            (unsigned long long)(last_after - last_before));
    /* The window did not start from zero: the runs the workers still hold
     * count, so the new proxy sent at most what the window had left. */
    assert_true(adopted > 0);
    assert_true(in_flight <= WINDOW);
    assert_true(last_after - last_before <= (uint64_t)(WINDOW - adopted));
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)N, 60000), 0);
    assert_each_dispatched_once(f, N);
    sleep_ms(300);
    j = stats(f);
    assert_int_equal(overall(j, "in_flight"), 0);
    assert_int_equal(overall(j, "queued_runs"), 0);
    cJSON_Delete(j);
}

static void test_nats_server_restart_mid_run(void **state)
{
    fixture *f = *state;
    const int N = 600;
    submit_runs(f, 0, N);
    assert_int_equal(pt_worker_wait_completed(f->w, 150, 30000), 0);
    assert_int_equal(natstest_restart(f->srv), 0);
    assert_int_equal(pt_log_wait(&f->px, "reconnected to NATS", 15000), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)N, 90000), 0);
    assert_each_dispatched_once(f, N);
    assert_true(nt_proc_alive(&f->px.proc));
}

static void test_sigterm_keeps_queued_runs_for_next_start(void **state)
{
    fixture *f = *state;
    const int N = 300;
    pt_worker_hold(f->w, true);
    submit_runs(f, 0, N);
    sleep_ms(500);
    /* Graceful: exit 0, what is still queued stays in FAIR_SUBMIT. */
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    assert_int_equal(pt_log_count(&f->px, "fairq-proxy stopped"), 1);
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_SUBMIT", NULL, NULL), NATS_OK);
    assert_int_equal(si->State.Msgs, (uint64_t)(N - WINDOW));
    jsStreamInfo_Destroy(si);
    /* A standby would take over at once: the lease was released. */
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 2500), 0);
    assert_int_equal(pt_log_count(&f->px, "standing by"), 0);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)N, 60000), 0);
    assert_each_dispatched_once(f, N);
}

static void test_second_proxy_stands_by_then_takes_over(void **state)
{
    fixture *f = *state;
    char yaml2[512];
    snprintf(yaml2, sizeof yaml2, "%s", yaml);
    assert_int_equal(pt_proxy_start(&f->px2, f->srv, "standby", yaml2), 0);
    assert_int_equal(pt_log_wait(&f->px2, "standing by", 10000), 0);
    submit_runs(f, 0, 100);
    assert_int_equal(pt_worker_wait_completed(f->w, 100, 30000), 0);
    assert_int_equal(pt_log_count(&f->px2, "fairq-proxy running"), 0);
    long long t0 = nt_now_ms();
    assert_int_equal(pt_proxy_kill(&f->px), 0);
    assert_int_equal(pt_log_wait(&f->px2, "leader lease acquired", 10000), 0);
    long long took = nt_now_ms() - t0;
    fprintf(stderr, "lease takeover after kill -9 of the leader: %lld ms\n", took);
    assert_true(took < 6000);
    submit_runs(f, 100, 100);
    assert_int_equal(pt_worker_wait_completed(f->w, 200, 30000), 0);
    assert_each_dispatched_once(f, 200);
}

static void test_lease_taken_exits_for_a_restart_as_standby(void **state)
{
    fixture *f = *state;
    /* Another holder overwrites the lease, as a partitioned peer would. */
    kvStore *kv = NULL;
    assert_int_equal(js_KeyValue(&kv, f->c.js, "fairq_lease"), NATS_OK);
    uint64_t rev = 0;
    assert_int_equal(kvStore_PutString(&rev, kv, "leader", "someone-else"), NATS_OK);
    kvStore_Destroy(kv);
    assert_int_equal(nt_proc_wait(&f->px.proc, 10000), 0);
    assert_int_equal(nt_proc_exit_code(&f->px.proc), 3);
    assert_true(pt_log_count(&f->px, "lost the leader lease") == 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill9_mid_flood_then_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nats_server_restart_mid_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_keeps_queued_runs_for_next_start, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_second_proxy_stands_by_then_takes_over, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lease_taken_exits_for_a_restart_as_standby, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
