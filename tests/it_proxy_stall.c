/* it_proxy_stall.c -- the proxy frozen (SIGSTOP) mid-flood, again and again: pulls outlive their deadlines, nothing is lost or doubled. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "proxytest.h"

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

typedef struct fixture {
    natstest *srv;
    pt_proxy px;
    pt_client c;
    pt_worker *w;
} fixture;

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 64\n"
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
    pt_worker_opts wo = {.concurrency = 64, .service_ms = 1};
    return pt_worker_start(&f->w, f->srv, &wo);
}

static int teardown(void **state)
{
    fixture *f = *state;
    pt_worker_stop(f->w);
    assert_true(nt_proc_alive(&f->px.proc));
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    pt_close(&f->c);
    natstest_destroy(f->srv);
    free(f);
    return 0;
}

static void test_frozen_mid_flood(void **state)
{
    fixture *f = *state;
    const int n = ROUNDS * PER_ROUND;
    for (int r = 0; r < ROUNDS; r++) {
        /* Frozen with a pull open, longer than its expiry (500 ms) and the
         * margin after it; runs keep coming meanwhile. */
        assert_int_equal(kill(f->px.proc.pid, SIGSTOP), 0);
        for (int i = r * PER_ROUND; i < (r + 1) * PER_ROUND; i++) {
            char tenant[16], body[64];
            snprintf(tenant, sizeof tenant, "t%d", i % TENANTS);
            snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
            assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), NULL), 0);
        }
        assert_int_equal(pt_submit_flush(&f->c), 0);
        sleep_ms(700);
        assert_int_equal(kill(f->px.proc.pid, SIGCONT), 0);
        sleep_ms(30 * (r % 4));
    }
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)n, 60000), 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_frozen_mid_flood, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
