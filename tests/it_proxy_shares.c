/* it_proxy_shares.c -- token-metered shares, plan weights and reconciliation, observed in dispatch order end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxyfixture.h"

#define WINDOW 8
#define WARMUP 40               /* dispatches before the shares settle */

static const char yaml[] =
    "scheduler:\n  default_plan: free\n  quantum_tokens: 1000\n"
    "window:\n  max_in_flight: 8\n"
    "plans:\n  - name: free\n    weight: 1\n  - name: gold\n    weight: 3\n"
    "tenants:\n  - id: g\n    plan: gold\n";

/* The under-declarer's runs cost ten times what it declares. */
static uint64_t actual_of(void *arg, const char *tenant, uint32_t est)
{
    (void)arg;
    return strcmp(tenant, "under") == 0 ? 1000 : est;
}

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = 2 * WINDOW, .service_ms = 2, .actual = actual_of};
    return pf_setup(state, yaml, &wo);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, false), 0);
    return 0;
}

/* A tenant's load: runs of declared est tokens, interleaved with the
 * other's so that both are backlogged from the first dispatch. */
typedef struct load {
    const char *tenant;
    int runs;
    uint32_t est;
} load;

/* Submit a and b interleaved in proportion, run them to completion, and
 * sum what each got while both were still backlogged (after WARMUP). */
static void run_pair(pf_fixture *f, const load *a, const load *b, uint64_t got_runs[2],
                     uint64_t got_tokens[2])
{
    const load *l[2] = {a, b};
    int sent[2] = {0, 0};
    while (sent[0] < a->runs || sent[1] < b->runs) {
        for (int k = 0; k < 2; k++) {
            /* Keep the two submit streams in proportion. */
            if (sent[k] < l[k]->runs &&
                (long)sent[k] * l[1 - k]->runs <= (long)sent[1 - k] * l[k]->runs) {
                char body[96], est[16];
                snprintf(body, sizeof body, "{\"run_id\":\"%s-%d\"}", l[k]->tenant, sent[k]);
                snprintf(est, sizeof est, "%u", l[k]->est);
                const char *h[] = {"Fair-Est-Tokens", est, NULL};
                assert_int_equal(pt_submit_async(&f->c, l[k]->tenant, body, strlen(body), h), 0);
                sent[k]++;
            }
        }
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, (size_t)(a->runs + b->runs), 60000), 0);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    assert_int_equal(n, (size_t)(a->runs + b->runs));
    int left[2] = {a->runs, b->runs};
    got_runs[0] = got_runs[1] = got_tokens[0] = got_tokens[1] = 0;
    for (size_t i = 0; i < n && left[0] > 0 && left[1] > 0; i++) {
        int k = strcmp(m[i].tenant, a->tenant) == 0 ? 0 : 1;
        assert_string_equal(m[i].tenant, l[k]->tenant);
        left[k]--;
        if (i < WARMUP)
            continue;
        got_runs[k]++;
        got_tokens[k] += actual_of(NULL, m[i].tenant, l[k]->est);
    }
    pt_msgs_free(m, n);
    assert_true(got_runs[0] + got_runs[1] > 100);
}

static void test_token_shares_of_10x_cost(void **state)
{
    pf_fixture *f = *state;
    load cheap = {"cheap", 1500, 100}, dear = {"dear", 200, 1000};
    uint64_t runs[2], tokens[2];
    run_pair(f, &cheap, &dear, runs, tokens);
    double ratio = (double)tokens[0] / (double)tokens[1];
    fprintf(stderr, "10x cost: cheap %llu runs / %llu tokens, dear %llu runs / %llu tokens, "
            "token ratio %.2f\n", (unsigned long long)runs[0], (unsigned long long)tokens[0],
            (unsigned long long)runs[1], (unsigned long long)tokens[1], ratio);
    /* Equal weights: equal tokens, so about ten cheap runs per dear one. */
    assert_true(ratio > 0.8 && ratio < 1.25);
    assert_true(runs[0] > 7 * runs[1]);
}

static void test_plan_weights(void **state)
{
    pf_fixture *f = *state;
    load gold = {"g", 600, 1000}, free_ = {"f", 300, 1000};
    uint64_t runs[2], tokens[2];
    run_pair(f, &gold, &free_, runs, tokens);
    double ratio = (double)tokens[0] / (double)tokens[1];
    fprintf(stderr, "plan weights 3:1: gold %llu runs, free %llu runs, ratio %.2f\n",
            (unsigned long long)runs[0], (unsigned long long)runs[1], ratio);
    assert_true(ratio > 2.4 && ratio < 3.75);
}

static void test_reconciliation_against_under_declarer(void **state)
{
    pf_fixture *f = *state;
    /* under declares 100 and spends 1000; honest declares and spends 1000.
     * Charged at face value, under would get ten times the actual tokens. */
    load under = {"under", 800, 100}, honest = {"honest", 300, 1000};
    uint64_t runs[2], tokens[2];
    run_pair(f, &under, &honest, runs, tokens);
    double ratio = (double)tokens[0] / (double)tokens[1];
    fprintf(stderr, "under-declarer: under %llu runs, honest %llu runs, actual token ratio %.2f "
            "(10 without reconciliation)\n", (unsigned long long)runs[0],
            (unsigned long long)runs[1], ratio);
    assert_true(ratio > 0.6 && ratio < 1.6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_token_shares_of_10x_cost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plan_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconciliation_against_under_declarer, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
