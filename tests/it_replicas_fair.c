/* it_replicas_fair.c -- one fairness across replicas, live: two fairq-proxy replicas, each owning one backlogged tenant, get token shares by weight whatever their runs cost, and a small tenant's first run is not behind another replica's flood. */
/*
 * One nats-server mapping fair.submit.* and fair.done.* to 2 partitions,
 * two replicas (rep-a, the fixture's proxy, and rep-b) with window.share
 * on, one partition each, and a pool of workers that spend a millisecond a
 * token and report what they spent. lib/share's arithmetic is
 * tests/test_share.c's and the simulator's (docs/scaling.md, "Measured");
 * this checks the bound of docs/scaling.md ("The bound") on real NATS: the
 * tolerance is that bound computed for the test's window, weights, run
 * costs and interval, not a number of its own, and issue 16's 10% of one
 * proxy's shares. The measurement is tests/support/sharecheck's, which
 * it_cluster_replicas makes on the 3-node cluster too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxyfixture.h"
#include "sharecheck.h"

#define P 2
#define WINDOW 8            /* G: the global window, in runs */
#define US_PER_TOKEN 1000   /* a worker's speed: r = 1000 tokens a second */
#define COST 1000           /* a run of the light tenants: s = 1 s */
#define PERIOD_MS 100       /* the replicas' heartbeat period, p */
#define INTERVAL_MS 4000    /* T */

static const char yaml_fmt[] =
    "partitions: %d\n"
    "replica_id: %s\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: %d\n  share: on\n"
    "plans:\n  - name: free\n    weight: 1\n  - name: heavy\n    weight: 3\n"
    "tenants:\n  - id: %s\n    plan: heavy\n  - id: %s\n    plan: heavy\n";

static char dir[] = "/tmp/fairq-it-fair-XXXXXX";
static char conf[256];
static pt_proxy rep_b;

static void replica_yaml(char *out, size_t cap, const char *id)
{
    char h0[32], h1[32];
    sc_name_on(h0, sizeof h0, "heavy", P, 0);
    sc_name_on(h1, sizeof h1, "heavy", P, 1);
    snprintf(out, cap, yaml_fmt, P, id, WINDOW, h0, h1);
}

static int setup(void **state)
{
    strcpy(dir, "/tmp/fairq-it-fair-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    if (pf_write_mapping(conf, sizeof conf, dir, P) != 0)
        return -1;
    char yaml[1024];
    replica_yaml(yaml, sizeof yaml, "rep-a");
    /* more workers than the window and its reserves: a run starts when dispatched */
    pt_worker_opts wo = {.concurrency = 2 * WINDOW, .per_token_us = US_PER_TOKEN};
    int rc = pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, yaml, &wo);
    if (rc)
        return rc;
    pf_fixture *fx = *state;
    replica_yaml(yaml, sizeof yaml, "rep-b");
    if (pt_proxy_start(&rep_b, fx->srv, "rep-b", yaml) != 0 ||
        pt_log_wait(&rep_b, "fairq-proxy running", 15000) != 0)
        return -1;
    const char *ids[] = {"rep-a", "rep-b"};
    return pf_wait_shared(&fx->c, "fairq_lease", P, ids, 2, 15000);
}

static int teardown(void **state)
{
    if (nt_proc_alive(&rep_b.proc))
        pt_proxy_stop(&rep_b);
    pf_teardown(state, false);
    remove(conf);
    rmdir(dir);
    return 0;
}

/* The partition each replica owns (rep-a's, rep-b's). */
static void partitions(pf_fixture *f, int *ka, int *kb)
{
    char own[P][PF_ID_MAX];
    pf_owners(&f->c, "fairq_lease", P, own);
    *ka = strcmp(own[0], "rep-a") == 0 ? 0 : 1;
    *kb = 1 - *ka;
    assert_string_equal(own[*ka], "rep-a");
    assert_string_equal(own[*kb], "rep-b");
}

static const sc_world world = {.parts = P, .window = WINDOW, .us_per_token = US_PER_TOKEN,
                                .period_ms = PERIOD_MS, .interval_ms = INTERVAL_MS};

/* 3:1 weights across replicas: 6 and 2 of the 8 runs, 3:1 in tokens. */
static void test_weights_three_to_one_across_replicas(void **state)
{
    pf_fixture *f = *state;
    int ka, kb;
    partitions(f, &ka, &kb);
    char big[32], small[32];
    sc_name_on(big, sizeof big, "heavy", P, ka);      /* the heavy plan: weight 3 */
    sc_name_on(small, sizeof small, "light", P, kb);
    sc_shares(f, &world, big, 3, COST, small, 1, COST);
}

/* Equal weights, runs 50 times costlier on one replica: half the tokens
 * each, as one proxy's DRR gives them. */
static void test_fifty_fold_costs_across_replicas(void **state)
{
    pf_fixture *f = *state;
    int ka, kb;
    partitions(f, &ka, &kb);
    char chat[32], research[32];
    sc_name_on(chat, sizeof chat, "chat", P, ka);
    sc_name_on(research, sizeof research, "research", P, kb);
    sc_shares(f, &world, chat, 1, COST, research, 1, 50 * COST);
}

/* A flood on rep-a holds the whole window (rep-b has no backlog) and none
 * of its runs completes; a small tenant's first run on rep-b goes at once,
 * on the shared reserve: not behind the flood, where one proxy would make
 * it wait for the flood's first completion. */
static void test_small_first_run_not_behind_another_replicas_flood(void **state)
{
    pf_fixture *f = *state;
    int ka, kb;
    partitions(f, &ka, &kb);
    char flood[32], small[32];
    sc_name_on(flood, sizeof flood, "flood", P, ka);
    sc_name_on(small, sizeof small, "small", P, kb);
    sc_first_run(f, &world, flood, COST, small);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_weights_three_to_one_across_replicas, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fifty_fold_costs_across_replicas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_first_run_not_behind_another_replicas_flood,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
