/* it_replicas_fair.c -- one fairness across replicas, live: two fairq-proxy replicas, each owning one backlogged tenant, get token shares by weight whatever their runs cost, and a small tenant's first run is not behind another replica's flood. */
/*
 * One nats-server mapping fair.submit.* and fair.done.* to 2 partitions,
 * two replicas (rep-a, the fixture's proxy, and rep-b) with window.share
 * on, one partition each, and a pool of workers that spend a millisecond a
 * token and report what they spent. lib/share's arithmetic is
 * tests/test_share.c's and the simulator's (docs/scaling.md, "Measured");
 * this checks the bound of docs/scaling.md ("The bound") on real NATS: the
 * tolerance is that bound computed for the test's window, weights, run
 * costs and interval, not a number of its own.
 *
 * The tokens a tenant was served are those the workers processed for it
 * within the interval: a run received at t and taking est x 1 ms counts the
 * part of [t, t + its service] inside the interval, as fairq-sim and
 * scripts/bench-replicas.sh count them.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "partition.h"
#include "proxyfixture.h"

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

/* The first name prefix<n> whose partition is k. */
static void name_on(char *out, size_t cap, const char *prefix, int k)
{
    for (int n = 0;; n++) {
        snprintf(out, cap, "%s%d", prefix, n);
        if (fq_partition_of(out, strlen(out), P) == (uint32_t)k)
            return;
    }
}

static void replica_yaml(char *out, size_t cap, const char *id)
{
    char h0[32], h1[32];
    name_on(h0, sizeof h0, "heavy", 0);
    name_on(h1, sizeof h1, "heavy", 1);
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

/* n runs of tenant, est tokens each, run ids <tenant>-<i>. */
static void backlog(pf_fixture *f, const char *tenant, int n, uint32_t est)
{
    char body[96], e[16];
    snprintf(e, sizeof e, "%u", est);
    const char *hdrs[] = {"Fair-Est-Tokens", e, NULL};
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof body, "{\"run_id\":\"%s-%d\"}", tenant, i);
        assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), hdrs), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
}

/* The tokens the workers processed for tenant within [t1, t2) (ms,
 * monotonic): each run's actual tokens, spread over its service. */
static double served(pf_fixture *f, const char *tenant, long long t1, long long t2)
{
    double sum = 0;
    size_t n = pt_worker_received(f->w);
    for (size_t i = 0; i < n; i++) {
        pt_seen s = pt_worker_seen(f->w, i);
        if (strcmp(s.tenant, tenant) != 0)
            continue;
        double start = (double)s.at_ms, len = (double)s.est * US_PER_TOKEN / 1000.0;
        double from = start > (double)t1 ? start : (double)t1;
        double to = start + len < (double)t2 ? start + len : (double)t2;
        if (to > from && len > 0)
            sum += (double)(s.actual ? s.actual : s.est) * (to - from) / len;
    }
    return sum;
}

/*
 * The bound of docs/scaling.md for tokens processed over an interval of
 * T seconds in steady state, tenant a alone on replica A (weight wa), b
 * alone on B (wb), a window of g runs, workers of r tokens a second, the
 * shorter runs taking s seconds:
 *
 *   |S_a/wa - S_b/wb| <= r T |g_A/wa - g_B/wb| + r T (g/W) δ/(s + δ)
 *
 * g_X the replica's share of the window in whole runs, W = wa + wb, δ (d
 * here) the turnaround of a slot (a completion to the next run at a
 * worker), taken as one heartbeat period p. No DRR term: each replica has
 * one tenant.
 */
static double bound(double T, int wa, int wb, double s)
{
    double r = 1e6 / US_PER_TOKEN, d = PERIOD_MS / 1000.0;
    double W = wa + wb, ga = floor(WINDOW * wa / W + 0.5), gb = WINDOW - ga;
    return r * T * fabs(ga / wa - gb / wb) + r * T * (WINDOW / W) * d / (s + d);
}

/* Submit the backlogs (a's first), let the shares settle (each replica
 * hears the other, 2p, and the one whose share shrank drains, one service
 * time of its runs), measure over INTERVAL_MS, and check the bound. */
static void shares_within_bound(pf_fixture *f, const char *a, int wa, uint32_t est_a,
                                const char *b, int wb, uint32_t est_b)
{
    /* enough runs for either tenant to fill the whole window throughout */
    int secs = (2 * PERIOD_MS + 2000 + INTERVAL_MS) / 1000 + 2;
    backlog(f, a, WINDOW + 2 + WINDOW * secs * COST / (int)est_a, est_a);
    backlog(f, b, WINDOW + 2 + WINDOW * secs * COST / (int)est_b, est_b);
    double s = (double)(est_a < est_b ? est_a : est_b) * US_PER_TOKEN / 1e6;
    long long t1 = nt_now_ms() + 2 * PERIOD_MS + (long long)(s * 1000) + 1000;
    long long t2 = t1 + INTERVAL_MS;
    while (nt_now_ms() < t2)
        nt_sleep_ms(100);
    double sa = served(f, a, t1, t2), sb = served(f, b, t1, t2);
    double T = INTERVAL_MS / 1000.0, lim = bound(T, wa, wb, s);
    double slots = (sa + sb) / (1e6 / US_PER_TOKEN * T);
    print_message("%s (w %d, %u-token runs): %.0f tokens; %s (w %d, %u-token runs): %.0f; "
                  "|S_a/w_a - S_b/w_b| = %.0f, bound %.0f; slots busy %.2f of %d\n",
                  a, wa, est_a, sa, b, wb, est_b, sb, fabs(sa / wa - sb / wb), lim, slots,
                  WINDOW);
    assert_true(sa > 0 && sb > 0);
    assert_true(fabs(sa / wa - sb / wb) <= lim);
}

/* 3:1 weights across replicas: 6 and 2 of the 8 runs, 3:1 in tokens. */
static void test_weights_three_to_one_across_replicas(void **state)
{
    pf_fixture *f = *state;
    int ka, kb;
    partitions(f, &ka, &kb);
    char big[32], small[32];
    name_on(big, sizeof big, "heavy", ka);      /* the heavy plan: weight 3 */
    name_on(small, sizeof small, "light", kb);
    shares_within_bound(f, big, 3, COST, small, 1, COST);
}

/* Equal weights, runs 50 times costlier on one replica: half the tokens
 * each, as one proxy's DRR gives them. */
static void test_fifty_fold_costs_across_replicas(void **state)
{
    pf_fixture *f = *state;
    int ka, kb;
    partitions(f, &ka, &kb);
    char chat[32], research[32];
    name_on(chat, sizeof chat, "chat", ka);
    name_on(research, sizeof research, "research", kb);
    shares_within_bound(f, chat, 1, COST, research, 1, 50 * COST);
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
    name_on(flood, sizeof flood, "flood", ka);
    name_on(small, sizeof small, "small", kb);
    pt_worker_hold(f->w, true);
    backlog(f, flood, 4 * WINDOW, COST);
    /* the whole window to the flood */
    for (long long end = nt_now_ms() + 10000;
         pt_worker_received(f->w) < WINDOW && nt_now_ms() < end;)
        nt_sleep_ms(20);
    assert_int_equal(pt_worker_received(f->w), WINDOW);
    backlog(f, small, 1, COST);
    for (long long end = nt_now_ms() + 10000;
         pt_worker_received(f->w) < WINDOW + 1 && nt_now_ms() < end;)
        nt_sleep_ms(20);
    assert_int_equal(pt_worker_received(f->w), WINDOW + 1);
    pt_seen s = pt_worker_seen(f->w, WINDOW);
    assert_string_equal(s.tenant, small);
    assert_int_equal(pt_worker_completed(f->w), 0);    /* the flood still holds the window */
    pt_worker_hold(f->w, false);
    /* and the flood is served on */
    assert_int_equal(pt_worker_wait_completed(f->w, WINDOW + 2, 20000), 0);
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
