/* it_proxy_stall.c -- the proxy frozen (SIGSTOP) mid-flood, again and again: pulls outlive their deadlines, nothing is lost or doubled. */
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

#define TENANTS 4
#define ROUNDS 8
#define PER_ROUND 250

/*
 * A frozen proxy cannot read what the server sends for the pull request it
 * had open; when it thaws its deadline has passed, and those deliveries
 * are still on their way: left over for its next fetch. nats.c 3.4.1's
 * Fetch miscounts such leftovers and can write past the array it returns
 * (caught by an ASan build); the proxy's own pulls must take them, once.
 */

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 64\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = 64, .service_ms = 1};
    return pf_setup(state, yaml, &wo);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

static void test_frozen_mid_flood(void **state)
{
    pf_fixture *f = *state;
    const int n = ROUNDS * PER_ROUND;
    for (int r = 0; r < ROUNDS; r++) {
        /* Frozen with a pull open, longer than its expiry (500 ms) and the
         * margin after it; runs keep coming meanwhile. */
        assert_int_equal(kill(f->px.proc.pid, SIGSTOP), 0);
        pf_submit_runs(f, r * PER_ROUND, PER_ROUND, TENANTS);
        nt_sleep_ms(700);
        assert_int_equal(kill(f->px.proc.pid, SIGCONT), 0);
        nt_sleep_ms(30 * (r % 4));
    }
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)n, 60000), 0);
    pf_assert_each_dispatched_once(f, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_frozen_mid_flood, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
