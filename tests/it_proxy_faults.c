/* it_proxy_faults.c -- kill -9 of the proxy, a nats-server restart, SIGTERM, and two proxies on one set of streams. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxyfixture.h"

#define WINDOW 16
#define TENANTS 3

/* The second proxy of the standby test; stopped by the teardown. */
static pt_proxy standby;

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 16\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = 2 * WINDOW, .service_ms = 5};
    return pf_setup(state, yaml, &wo);
}

static int teardown(void **state)
{
    pt_proxy_stop(&standby);
    memset(&standby, 0, sizeof standby);
    pf_teardown(state, false);
    return 0;
}

static void test_kill9_mid_flood_then_restart(void **state)
{
    pf_fixture *f = *state;
    const int N = 600;
    pf_submit_runs(f, 0, N, TENANTS);
    assert_int_equal(pt_worker_wait_completed(f->w, 100, 30000), 0);
    /* Workers stay busy with what they hold while the proxy dies. */
    pt_worker_hold(f->w, true);
    nt_sleep_ms(300);
    assert_int_equal(pt_proxy_kill(&f->px), 0);
    uint64_t last_before = pt_stream_last(&f->c, "FAIR_DISPATCH");
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    /* Its old lease must age out first: a takeover within a few seconds. */
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    nt_sleep_ms(500);
    cJSON *j = pf_stats(f, "", NULL);
    long adopted = pf_overall(j, "adopted"), in_flight = pf_overall(j, "in_flight");
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
    pf_assert_each_dispatched_once(f, N);
    nt_sleep_ms(300);
    j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "in_flight"), 0);
    assert_int_equal(pf_overall(j, "queued_runs"), 0);
    cJSON_Delete(j);
}

static void test_nats_server_restart_mid_run(void **state)
{
    pf_fixture *f = *state;
    const int N = 600;
    pf_submit_runs(f, 0, N, TENANTS);
    assert_int_equal(pt_worker_wait_completed(f->w, 150, 30000), 0);
    assert_int_equal(natstest_restart(f->srv), 0);
    assert_int_equal(pt_log_wait(&f->px, "reconnected to NATS", 15000), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)N, 90000), 0);
    pf_assert_each_dispatched_once(f, N);
    assert_true(nt_proc_alive(&f->px.proc));
}

static void test_sigterm_keeps_queued_runs_for_next_start(void **state)
{
    pf_fixture *f = *state;
    const int N = 300;
    pt_worker_hold(f->w, true);
    pf_submit_runs(f, 0, N, TENANTS);
    nt_sleep_ms(500);
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
    pf_assert_each_dispatched_once(f, N);
}

static void test_second_proxy_stands_by_then_takes_over(void **state)
{
    pf_fixture *f = *state;
    char yaml2[512];
    snprintf(yaml2, sizeof yaml2, "%s", yaml);
    assert_int_equal(pt_proxy_start(&standby, f->srv, "standby", yaml2), 0);
    assert_int_equal(pt_log_wait(&standby, "standing by", 10000), 0);
    pf_submit_runs(f, 0, 100, TENANTS);
    assert_int_equal(pt_worker_wait_completed(f->w, 100, 30000), 0);
    assert_int_equal(pt_log_count(&standby, "fairq-proxy running"), 0);
    long long t0 = nt_now_ms();
    assert_int_equal(pt_proxy_kill(&f->px), 0);
    assert_int_equal(pt_log_wait(&standby, "leader lease acquired", 10000), 0);
    long long took = nt_now_ms() - t0;
    fprintf(stderr, "lease takeover after kill -9 of the leader: %lld ms\n", took);
    assert_true(took < 6000);
    pf_submit_runs(f, 100, 100, TENANTS);
    assert_int_equal(pt_worker_wait_completed(f->w, 200, 30000), 0);
    pf_assert_each_dispatched_once(f, 200);
}

static void test_lease_taken_exits_for_a_restart_as_standby(void **state)
{
    pf_fixture *f = *state;
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

/* One slot, no body kept in memory, and a tenant's quantum of 1,000. */
static const char yaml_lost[] =
    "scheduler:\n  default_plan: free\n  quantum_tokens: 1000\n"
    "window:\n  max_in_flight: 1\n"
    "limits:\n  max_buffered_bytes: 1\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup_lost(void **state)
{
    pt_worker_opts wo = {.concurrency = 1, .service_ms = 1};
    return pf_setup(state, yaml_lost, &wo);
}

/* The stats of tenant t, its number key; -1 while the proxy does not know t
 * (it may not have fetched its first run yet). */
static long tenant_num(pf_fixture *f, const char *t, const char *key)
{
    char req[96];
    snprintf(req, sizeof req, "{\"tenant\":\"%s\"}", t);
    cJSON *j = pf_stats(f, req, NULL);
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    long v = row ? pf_num(row, key) : -1;
    cJSON_Delete(j);
    return v;
}

/* A queued run whose body was purged from the submit stream is not sent:
 * its dispatch is taken back, so it does not count as dispatched and its
 * charge is refunded. (It was reconciled as if it had spent its estimate:
 * the tenant kept the debt of a run that never ran.) */
static void test_lost_body_is_refunded(void **state)
{
    pf_fixture *f = *state;
    pt_worker_hold(f->w, true);
    const char r0[] = "{\"run_id\":\"r-0\"}", r1[] = "{\"run_id\":\"r-1\",\"est_tokens\":5000}";
    assert_int_equal(pt_submit(&f->c, "t", r0, strlen(r0), NULL), 0);
    assert_int_equal(pt_submit(&f->c, "t", r1, strlen(r1), NULL), 0);
    uint64_t seq1 = pt_stream_last(&f->c, "FAIR_SUBMIT");
    long long end = nt_now_ms() + 10000;
    while (tenant_num(f, "t", "queued_runs") != 1 && nt_now_ms() < end)
        nt_sleep_ms(20);
    assert_int_equal(tenant_num(f, "t", "queued_runs"), 1);
    assert_int_equal(js_DeleteMsg(f->c.js, "FAIR_SUBMIT", seq1, NULL, NULL), NATS_OK);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 1, 10000), 0);
    end = nt_now_ms() + 10000;
    cJSON *j = NULL;
    do {
        cJSON_Delete(j);
        nt_sleep_ms(20);
        j = pf_stats(f, "{\"limit\":0}", NULL);
    } while (pf_overall(j, "body_lost") < 1 && nt_now_ms() < end);
    assert_int_equal(pf_overall(j, "body_lost"), 1);
    assert_int_equal(pf_overall(j, "in_flight"), 0);
    assert_int_equal(pf_overall(j, "buffered_runs"), 0);
    cJSON_Delete(j);
    assert_int_equal(tenant_num(f, "t", "dispatched_runs"), 1);
    /* r-1 took 5,000 tokens of a 1,000 quantum; idle since, t owes nothing. */
    assert_int_equal(tenant_num(f, "t", "deficit"), 0);
    assert_int_equal(tenant_num(f, "t", "dispatched_tokens"), tenant_num(f, "t", "actual_tokens"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill9_mid_flood_then_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_body_is_refunded, setup_lost, teardown),
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
