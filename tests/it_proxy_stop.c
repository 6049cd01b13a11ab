/* it_proxy_stop.c -- SIGTERM stops the proxy with exit 0 within FQ_PROXY_STOP_MS, NATS up, killed or hung. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy.h"
#include "proxyfixture.h"

/*
 * docs/protocol.md promises: SIGTERM to exit within 10 s, NATS up or not.
 * Each case runs the proxy with its overrides watch (always on) and runs in
 * motion, takes NATS away as a case says, sends SIGTERM and asserts the
 * exit code 0 by the deadline, and that the proxy's own stop path kept it,
 * not the watchdog of cmd/fairq-proxy. The time taken is printed, not
 * asserted.
 */

#define WINDOW 16
#define TENANTS 3
#define RUNS 2000

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 16\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    /* Slow enough that dispatches and journal writes are under way the
     * whole time the cases below look. */
    pt_worker_opts wo = {.concurrency = 2 * WINDOW, .service_ms = 20};
    return pf_setup(state, yaml, &wo);
}

static int teardown(void **state)
{
    pf_fixture *f = *state;
    /* The workers' clients stop cleanly only with a server that answers. */
    if (f && f->srv && natstest_running(f->srv))
        natstest_pause(f->srv, false);
    else if (f && f->srv)
        natstest_restart(f->srv);
    pf_teardown(state, false);
    return 0;
}

/* Runs flowing: submitted, and the workers busy completing them. */
static void flow(pf_fixture *f)
{
    pf_submit_runs(f, 0, RUNS, TENANTS);
    assert_int_equal(pt_worker_wait_completed(f->w, 100, 30000), 0);
}

/* SIGTERM, then the exit by the deadline, with code 0, from the stop path. */
static void sigterm_within_budget(pf_fixture *f, const char *what)
{
    long long t0 = nt_now_ms();
    assert_int_equal(nt_proc_signal_wait(&f->px.proc, SIGTERM, (int)FQ_PROXY_STOP_MS), 0);
    long long took = nt_now_ms() - t0;
    fprintf(stderr, "SIGTERM to exit, %s: %lld ms (%s)\n", what, took,
            pt_log_count(&f->px, "publishes unsettled") ? "publishes unsettled"
                                                          : "everything settled");
    assert_int_equal(nt_proc_exit_code(&f->px.proc), 0);
    assert_int_equal(pt_log_count(&f->px, "fairq-proxy stopped"), 1);
    assert_int_equal(pt_log_count(&f->px, "overran"), 0);
}

/* NATS up, dispatches and journal writes under way: they settle, their
 * submits are acked, and the next start neither loses nor repeats a run. */
static void test_sigterm_with_publishes_under_way(void **state)
{
    pf_fixture *f = *state;
    flow(f);
    sigterm_within_budget(f, "NATS up, runs in flight");
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 10000), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, RUNS, 60000), 0);
    pf_assert_each_dispatched_once(f, RUNS);
}

/* No workers, and runs that time out after 500 ms: every half second the
 * window's runs expire and the next ones are dispatched, with or without
 * an answer from NATS, so publishes are under way whenever NATS goes. */
static const char yaml_expiring[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 16\n  run_timeout_ms: 500\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup_expiring(void **state)
{
    if (pf_setup(state, yaml_expiring, NULL) != 0)
        return -1;
    pf_submit_runs(*state, 0, 300, TENANTS);
    return pt_log_wait(&((pf_fixture *)*state)->px, "run timed out", 10000);
}

/* NATS killed: the connection drops, nothing can settle, reconnects fail. */
static void test_sigterm_with_nats_killed(void **state)
{
    pf_fixture *f = *state;
    assert_int_equal(natstest_kill(f->srv), 0);
    assert_int_equal(pt_log_wait(&f->px, "disconnected from NATS", 10000), 0);
    sigterm_within_budget(f, "NATS killed");
}

/* NATS hung (SIGSTOP): the connection stays open and nothing answers, so
 * every PubAck and API call waits for its timeout; the watcher's and the
 * consumers' threads are blocked on replies that cannot come. The runs
 * dispatched after the server stopped are never answered: the stop waits
 * for them as long as its budget allows, then closes. */
static void test_sigterm_with_nats_hung(void **state)
{
    pf_fixture *f = *state;
    assert_int_equal(natstest_pause(f->srv, true), 0);
    nt_sleep_ms(800);
    sigterm_within_budget(f, "NATS hung");
    assert_int_equal(pt_log_count(&f->px, "publishes unsettled"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigterm_with_publishes_under_way, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_with_nats_killed, setup_expiring, teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_with_nats_hung, setup_expiring, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
