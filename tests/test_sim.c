/* test_sim.c -- the design card's claims, as numbers from the simulator driving the real scheduler. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenario.h"
#include "sim.h"

static void source_path(char *buf, size_t cap, const char *rel)
{
    const char *src = getenv("FAIRQ_SOURCE_DIR");
    snprintf(buf, cap, "%s/%s", src ? src : ".", rel);
}

static fq_scenario *load(const char *name)
{
    char rel[256], path[4096], err[512] = "";
    snprintf(rel, sizeof(rel), "config/scenarios/%s.yaml", name);
    source_path(path, sizeof(path), rel);
    fq_scenario *sc = NULL;
    if (fq_scenario_load(&sc, path, err, sizeof(err)) != FQ_OK)
        fail_msg("%s", err);
    return sc;
}

static fq_scenario *parse(const char *yaml)
{
    char err[512] = "";
    fq_scenario *sc = NULL;
    if (fq_scenario_parse(&sc, "inline", yaml, strlen(yaml), err, sizeof(err)) != FQ_OK)
        fail_msg("%s", err);
    return sc;
}

static fq_sim_result *run(const fq_scenario *sc, enum fq_sim_policy p)
{
    fq_sim_result *r = NULL;
    assert_int_equal(fq_sim_run(&r, sc, p), FQ_OK);
    assert_non_null(r);
    return r;
}

static const fq_sim_tenant_stats *tenant(const fq_scenario *sc, const fq_sim_result *r,
                                         const char *id)
{
    long k = fq_scenario_tenant_index(sc, id);
    if (k < 0)
        fail_msg("no tenant %s", id);
    return &r->tenants[k];
}

/* Tokens served in the window by the tenants whose id starts with prefix,
 * on average. */
static double mean_served(const fq_scenario *sc, const fq_sim_result *r, const char *prefix)
{
    double sum = 0;
    int n = 0;
    for (size_t k = 0; k < sc->n_tenants; k++) {
        if (strncmp(sc->tenants[k].id, prefix, strlen(prefix)) == 0) {
            sum += r->tenants[k].served;
            n++;
        }
    }
    assert_true(n > 0);
    return sum / n;
}

/* The card's Tuesday: behind FIFO a small tenant's first run waits about 40
 * minutes; DRR serves it within two service times of one run, and A still
 * gets all the capacity the others leave. */
static void test_tuesday(void **state)
{
    (void)state;
    fq_scenario *sc = load("tuesday");
    fq_sim_result *fifo = run(sc, FQ_SIM_FIFO), *drr = run(sc, FQ_SIM_DRR);
    int64_t worst_fifo = -1;
    for (size_t k = 0; k < sc->n_tenants; k++) {
        if (strncmp(sc->tenants[k].id, "small-", 6) != 0)
            continue;
        int64_t f = fifo->tenants[k].first_wait, d = drr->tenants[k].first_wait;
        if (f > worst_fifo)
            worst_fifo = f;
        assert_true(d >= 0);
        if ((double)d > 2 * drr->service_ms)
            fail_msg("%s waits %" PRId64 " ms under drr; a service time is %.0f ms",
                     sc->tenants[k].id, d, drr->service_ms);
    }
    if (llabs(worst_fifo - 2400000) > 240000)
        fail_msg("worst first-run wait under fifo: %" PRId64 " ms, not 40 min +-10%%",
                 worst_fifo);
    assert_true(drr->utilization >= fifo->utilization);
    assert_true(drr->utilization > 0.8);
    assert_true(drr->idle_queued_s == 0);
    assert_int_equal(drr->completed, sc->n_runs);
    fq_sim_result_free(fifo);
    fq_sim_result_free(drr);
    fq_scenario_free(sc);
}

/* Runs that differ fifty-fold: DRR meters tokens, the card's listing counts
 * requests. */
static void test_costs_50x(void **state)
{
    (void)state;
    fq_scenario *sc = load("costs-50x");
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *rr = run(sc, FQ_SIM_RR);
    for (size_t k = 0; k < sc->n_tenants; k++) {
        const fq_sim_tenant_stats *t = &drr->tenants[k];
        assert_true(t->backlogged);
        if (fabs(t->share / t->fair - 1) > 0.05)
            fail_msg("%s: drr share %.4f, fair %.4f", sc->tenants[k].id, t->share, t->fair);
    }
    const fq_sim_tenant_stats *chat = tenant(sc, rr, "chat");
    if (!(chat->fair / chat->share > 5))
        fail_msg("rr gives chat %.4f of a fair %.4f: not off by 5x", chat->share, chat->fair);
    fq_sim_result_free(drr);
    fq_sim_result_free(rr);
    fq_scenario_free(sc);
}

/* rs[0..n) of sc reported in format fmt, as one string. */
static char *report_of(const fq_scenario *sc, fq_sim_result *const *rs, size_t n,
                       enum fq_sim_format fmt)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fq_sim_report rep;
    fq_sim_report_begin(&rep, f, fmt);
    fq_sim_report_add(&rep, sc, rs, n);
    assert_int_equal(fq_sim_report_end(&rep), FQ_OK);
    fclose(f);
    return buf;
}

/* The value of column col in the report CSV's row of policy and tenant. */
static double csv_value(const char *csv, const char *policy, const char *tenant,
                        const char *col)
{
    char line[4096];
    int at = -1;
    for (const char *p = csv; *p;) {
        size_t n = strcspn(p, "\n");
        snprintf(line, sizeof(line), "%.*s", (int)n, p);
        p += n + (p[n] != 0);
        char *f[64];
        int nf = 0;
        for (char *c = line, *e; nf < 64; c = e + 1) {
            f[nf++] = c;
            if (!(e = strchr(c, ',')))
                break;
            *e = 0;
        }
        if (at < 0) {           /* the header */
            for (int i = 0; i < nf; i++)
                if (strcmp(f[i], col) == 0)
                    at = i;
            assert_true(at >= 0);
        } else if (nf > at && strcmp(f[2], policy) == 0 && strcmp(f[3], tenant) == 0) {
            return strtod(f[at], NULL);
        }
    }
    fail_msg("no row %s %s", policy, tenant);
    return 0;
}

/* Two tenants with equal tokens, a 1:4 output mix: reconciled in raw
 * tokens they get equal tokens and unequal cost; at priced cost, equal
 * cost. The priced columns (share, fair, Jain) say so in priced cost, in
 * the table, its summary, the CSV and the JSON. */
static void test_priced_shares(void **state)
{
    (void)state;
    fq_scenario *sc = load("priced");
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *pr = run(sc, FQ_SIM_DRR_PRICED);
    const fq_sim_tenant_stats *chat = tenant(sc, drr, "chat");
    if (!(fabs(chat->share - 0.5) < 0.02 && chat->share_priced < 0.4))
        fail_msg("drr: chat's tokens %.4f, cost %.4f", chat->share, chat->share_priced);
    assert_true(fabs(chat->fair_priced - 0.5) < 0.01);
    assert_true(drr->jain_priced < 0.95);
    chat = tenant(sc, pr, "chat");
    if (!(fabs(chat->share_priced - 0.5) < 0.02 && chat->share > 0.6))
        fail_msg("drr-priced: chat's tokens %.4f, cost %.4f", chat->share, chat->share_priced);
    assert_true(pr->jain_priced > 0.99);
    fq_sim_result *rs[2] = {drr, pr};
    char *csv = report_of(sc, rs, 2, FQ_SIM_CSV);
    assert_true(fabs(csv_value(csv, "drr", "chat", "share") - 0.5) < 0.02);
    assert_true(csv_value(csv, "drr", "chat", "share_priced") < 0.4);
    assert_true(fabs(csv_value(csv, "drr-priced", "chat", "share_priced") - 0.5) < 0.02);
    assert_true(fabs(csv_value(csv, "drr", "chat", "fair_share_priced") - 0.5) < 0.01);
    assert_true(csv_value(csv, "drr", "chat", "tokens_priced") >
                csv_value(csv, "drr", "chat", "tokens_served"));
    assert_true(csv_value(csv, "drr", "*", "jain_priced") < 0.95);
    assert_true(csv_value(csv, "drr-priced", "*", "jain_priced") > 0.99);
    char *js = report_of(sc, rs, 2, FQ_SIM_JSON), want[64];
    snprintf(want, sizeof(want), "\"jain_priced\": %.6f", drr->jain_priced);
    assert_non_null(strstr(js, want));
    snprintf(want, sizeof(want), "\"share_priced\": %.6f", tenant(sc, drr, "chat")->share_priced);
    assert_non_null(strstr(js, want));
    char *tb = report_of(sc, rs, 2, FQ_SIM_TABLE);
    assert_non_null(strstr(tb, "Jain in priced cost\n"));     /* the summary's column */
    free(csv);
    free(js);
    free(tb);
    fq_sim_result_free(drr);
    fq_sim_result_free(pr);
    fq_scenario_free(sc);
}

/* A tenant whose runs cost 3x what it declares: about 3x an honest peer's
 * actual tokens without reconciliation, the peer's share with it. */
static void test_over_runner(void **state)
{
    (void)state;
    fq_scenario *sc = load("over-runner");
    fq_sim_result *norec = run(sc, FQ_SIM_DRR_NO_RECONCILE), *drr = run(sc, FQ_SIM_DRR),
                  *nocorr = run(sc, FQ_SIM_DRR_NO_CORRECTION);
    double r_norec = tenant(sc, norec, "over")->served / mean_served(sc, norec, "honest");
    double r_drr = tenant(sc, drr, "over")->served / mean_served(sc, drr, "honest");
    double r_nocorr = tenant(sc, nocorr, "over")->served / mean_served(sc, nocorr, "honest");
    if (fabs(r_norec / 3 - 1) > 0.1)
        fail_msg("drr-no-reconcile: over gets %.3fx an honest peer, not about 3x", r_norec);
    if (fabs(r_drr - 1) > 0.05)
        fail_msg("drr: over gets %.3fx an honest peer", r_drr);
    if (fabs(r_nocorr - 1) > 0.05)
        fail_msg("drr-no-correction: over gets %.3fx an honest peer", r_nocorr);
    fq_sim_result_free(norec);
    fq_sim_result_free(drr);
    fq_sim_result_free(nocorr);
    fq_scenario_free(sc);
}

/* Weight by plan: 10:1 is what they get, and not what FIFO gives. */
static void test_enterprise(void **state)
{
    (void)state;
    fq_scenario *sc = load("enterprise");
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *fifo = run(sc, FQ_SIM_FIFO);
    double ratio = tenant(sc, drr, "ent")->served / mean_served(sc, drr, "std");
    if (fabs(ratio / 10 - 1) > 0.05)
        fail_msg("drr: enterprise gets %.3fx a standard tenant, not 10x", ratio);
    assert_true(drr->jain > 0.99);
    double fifo_ratio = tenant(sc, fifo, "ent")->served / mean_served(sc, fifo, "std");
    assert_true(fifo_ratio < 9);
    fq_sim_result_free(drr);
    fq_sim_result_free(fifo);
    fq_scenario_free(sc);
}

/* Deficit is smoothing, not a savings account: back from an hour's
 * silence, the returner gets at most one quantum ahead of its fair share
 * (FIFO shows the measure can fail). */
static void test_idle_returner(void **state)
{
    (void)state;
    fq_scenario *sc = load("idle-returner");
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *fifo = run(sc, FQ_SIM_FIFO);
    long k = fq_scenario_tenant_index(sc, "returner");
    double quantum = (double)sc->quantum * sc->tenants[k].weight;
    if (drr->tenants[k].ahead > quantum)
        fail_msg("drr: the returner got %.0f tokens ahead; a quantum is %.0f",
                 drr->tenants[k].ahead, quantum);
    assert_true(fifo->tenants[k].ahead > 5 * quantum);
    fq_sim_result_free(drr);
    fq_sim_result_free(fifo);
    fq_scenario_free(sc);
}

/* Admission control refuses what cannot be served, counted per tenant;
 * nothing else is lost, under any policy. */
static void test_overload(void **state)
{
    (void)state;
    fq_scenario *sc = load("overload");
    for (int p = 0; p < FQ_SIM__NPOLICIES; p++) {
        fq_sim_result *r = run(sc, (enum fq_sim_policy)p);
        assert_int_equal(r->submitted, sc->n_runs);
        assert_true(r->rejected > 0);
        assert_int_equal(r->completed + r->rejected, r->submitted);
        assert_int_equal(r->queued_end + r->in_flight_end, 0);
        uint64_t rejected = 0;
        for (size_t k = 0; k < sc->n_tenants; k++) {
            const fq_sim_tenant_stats *t = &r->tenants[k];
            assert_true(t->rejected > 0);
            assert_int_equal(t->completed + t->rejected, t->submitted);
            rejected += t->rejected;
        }
        assert_int_equal(rejected, r->rejected);
        if (p == FQ_SIM_DRR)
            assert_true(r->jain > 0.99);
        fq_sim_result_free(r);
    }
    fq_scenario_free(sc);
}

/* fifo and drr never leave a worker idle while a run waits; a hard cap
 * does when the large tenant is at its cap. */
static void test_work_conservation(void **state)
{
    (void)state;
    fq_scenario *sc = load("quietly-large");
    fq_sim_result *fifo = run(sc, FQ_SIM_FIFO), *drr = run(sc, FQ_SIM_DRR),
                  *cap = run(sc, FQ_SIM_CAP);
    assert_true(fifo->idle_queued_s == 0);
    assert_true(drr->idle_queued_s == 0);
    assert_true(cap->idle_queued_s > 600);
    assert_true(cap->utilization < drr->utilization);
    assert_true(fabs(drr->utilization - fifo->utilization) < 1e-9);
    fq_sim_result_free(fifo);
    fq_sim_result_free(drr);
    fq_sim_result_free(cap);
    fq_scenario_free(sc);
}

/* Every format of every policy's report, as one string. */
static char *report(const fq_scenario *sc)
{
    fq_sim_result *res[FQ_SIM__NPOLICIES];
    for (int p = 0; p < FQ_SIM__NPOLICIES; p++)
        res[p] = run(sc, (enum fq_sim_policy)p);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    for (int fmt = FQ_SIM_TABLE; fmt <= FQ_SIM_JSON; fmt++) {
        fq_sim_report rep;
        fq_sim_report_begin(&rep, f, (enum fq_sim_format)fmt);
        fq_sim_report_add(&rep, sc, res, FQ_SIM__NPOLICIES);
        assert_int_equal(fq_sim_report_end(&rep), FQ_OK);
    }
    fq_sim_waits_header(f);
    fq_sim_waits(f, sc, res, FQ_SIM__NPOLICIES);
    fclose(f);
    for (int p = 0; p < FQ_SIM__NPOLICIES; p++)
        fq_sim_result_free(res[p]);
    return buf;
}

static void test_same_seed_same_bytes(void **state)
{
    (void)state;
    fq_scenario *a = load("tuesday"), *b = load("tuesday");
    char *ra = report(a), *rb = report(b);
    assert_true(strlen(ra) > 10000);
    assert_string_equal(ra, rb);
    assert_int_equal(fq_scenario_generate(b, a->seed + 1), FQ_OK);
    char *rc = report(b);
    assert_true(strcmp(ra, rc) != 0);
    free(ra);
    free(rb);
    free(rc);
    fq_scenario_free(a);
    fq_scenario_free(b);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    size_t n;
    do {
        if (*len + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
        n = fread(buf + *len, 1, cap - *len, f);
        *len += n;
    } while (n);
    fclose(f);
    buf[*len] = '\0';
    return buf;
}

/* The example trace in the repository is what --emit-trace writes for
 * tuesday (scripts/sim-trace.sh), and replaying it through every policy
 * gives what the scenario gives. */
static void test_example_trace(void **state)
{
    (void)state;
    char path[4096];
    source_path(path, sizeof(path), "config/traces/tuesday.csv");
    size_t len;
    char *file = slurp(path, &len);
    fq_scenario *sc = load("tuesday");
    char *gen = NULL;
    size_t glen = 0;
    FILE *f = open_memstream(&gen, &glen);
    assert_int_equal(fq_scenario_write_trace(f, sc), FQ_OK);
    fclose(f);
    assert_string_equal(gen, file);
    char *direct = report(sc);
    fq_scenario *replay = load("tuesday");
    char err[256];
    f = fmemopen(file, len, "r");
    assert_int_equal(fq_scenario_read_trace(replay, f, path, err, sizeof(err)), FQ_OK);
    fclose(f);
    char *replayed = report(replay);
    assert_string_equal(direct, replayed);
    free(file);
    free(gen);
    free(direct);
    free(replayed);
    fq_scenario_free(sc);
    fq_scenario_free(replay);
}

/* Service time is actual tokens over the rate: a worker each, or a budget
 * shared by the runs in flight. */
static void test_capacity_models(void **state)
{
    (void)state;
    static const char *const yaml[] = {
        "duration_s: 60\n"
        "capacity: {workers: 2, worker_tokens_per_s: 50}\n"
        "workflows: [{name: w, cost: {dist: fixed, tokens: 1000}}]\n"
        "tenants: [{id: a, arrivals: [{kind: burst, count: 2}]}]\n",
        "duration_s: 60\n"
        "capacity: {tokens_per_s: 100, max_in_flight: 2}\n"
        "workflows: [{name: w, cost: {dist: fixed, tokens: 1000}}]\n"
        "tenants: [{id: a, arrivals: [{kind: burst, count: 2}]}]\n",
    };
    for (int i = 0; i < 2; i++) {
        fq_scenario *sc = parse(yaml[i]);
        fq_sim_result *r = run(sc, FQ_SIM_DRR);
        /* Both run at once at 50 tokens/s: 20 s each, 2,000 tokens in 20 s. */
        assert_int_equal(r->end, 20000);
        assert_true(fabs(r->service_ms - 20000) < 1e-6);
        assert_true(fabs(r->tenants[0].served - 2000) < 1e-6);
        assert_true(fabs(r->utilization - 2000.0 / (100 * 60)) < 1e-9);
        assert_int_equal(r->wait_max, 0);
        fq_sim_result_free(r);
        fq_scenario_free(sc);
    }
}

/* A horizon stops the simulation; what was left is counted, not lost. */
static void test_horizon(void **state)
{
    (void)state;
    fq_scenario *sc = parse(
        "duration_s: 60\n"
        "horizon_s: 100\n"
        "max_pending: 30\n"
        "capacity: {workers: 2, worker_tokens_per_s: 100}\n"
        "workflows: [{name: w, cost: {dist: fixed, tokens: 1000}}]\n"
        "tenants: [{id: a, arrivals: [{kind: burst, count: 50}]}]\n");
    for (int p = 0; p < FQ_SIM__NPOLICIES; p++) {
        fq_sim_result *r = run(sc, (enum fq_sim_policy)p);
        assert_int_equal(r->end, 100000);
        assert_int_equal(r->completed, 20);     /* 2 workers x 10 s a run */
        assert_int_equal(r->in_flight_end, 0);
        assert_true(r->rejected > 0);
        assert_int_equal(r->completed + r->in_flight_end + r->queued_end + r->rejected,
                         r->submitted);
        fq_sim_result_free(r);
    }
    fq_scenario_free(sc);
}

static void test_policy_names(void **state)
{
    (void)state;
    enum fq_sim_policy p[FQ_SIM__NPOLICIES];
    size_t n;
    char err[256];
    assert_int_equal(fq_sim_policy_parse(p, &n, "all", err, sizeof(err)), FQ_OK);
    assert_int_equal(n, FQ_SIM__NPOLICIES);
    assert_int_equal(fq_sim_policy_parse(p, &n, "drr,fifo,drr", err, sizeof(err)), FQ_OK);
    assert_int_equal(n, 2);
    assert_int_equal(p[0], FQ_SIM_DRR);
    assert_int_equal(p[1], FQ_SIM_FIFO);
    assert_int_equal(fq_sim_policy_parse(p, &n, "drr,lottery", err, sizeof(err)), FQ_EINVAL);
    assert_non_null(strstr(err, "lottery"));
    for (int i = 0; i < FQ_SIM__NPOLICIES; i++) {
        assert_int_equal(fq_sim_policy_parse(p, &n, fq_sim_policy_name((enum fq_sim_policy)i),
                                             err, sizeof(err)), FQ_OK);
        assert_int_equal(p[0], i);
    }
    assert_null(fq_sim_policy_name(FQ_SIM__NPOLICIES));
}

/* The longest wait of tenant k's interactive runs (interactive 1), or of
 * the first run of each of its sub-tenants (interactive 0); UINT64_MAX if
 * one was never dispatched. */
static uint64_t longest_wait(const fq_scenario *sc, const fq_sim_result *r, long k,
                             int interactive)
{
    uint64_t max = 0;
    unsigned char seen[1024] = {0};
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *sr = &sc->runs[i];
        if ((long)sr->tenant != k)
            continue;
        if (interactive ? !sr->interactive : (!sr->sub || sr->sub >= sizeof(seen) || seen[sr->sub]))
            continue;
        if (!interactive)
            seen[sr->sub] = 1;
        uint64_t w = r->runs[i].dispatched == UINT64_MAX ? UINT64_MAX
                                                         : r->runs[i].dispatched - sr->at;
        max = w > max ? w : max;
    }
    return max;
}

/* Classes and sub-tenants together: with both, the flooding user's
 * interactive runs and its colleagues' first runs each wait about a
 * service time (10 s); with classes alone the colleagues' first runs wait
 * behind the flood, with sub-tenants alone the interactive runs wait
 * behind their own user's batch runs. The accounts' shares are the same
 * under every policy. */
static void test_classes_and_subtenants(void **state)
{
    (void)state;
    fq_scenario *sc = load("classes-subtenants");
    long big = fq_scenario_tenant_index(sc, "big");
    assert_true(big >= 0);
    enum fq_sim_policy ps[] = {FQ_SIM_DRR, FQ_SIM_DRR_CLASS, FQ_SIM_DRR_SUB,
                               FQ_SIM_DRR_CLASS_SUB};
    uint64_t inter[4], first[4];
    double service[4];
    for (int i = 0; i < 4; i++) {
        fq_sim_result *r = run(sc, ps[i]);
        inter[i] = longest_wait(sc, r, big, 1);
        first[i] = longest_wait(sc, r, big, 0);
        service[i] = r->service_ms;
        print_message("%s: interactive max %" PRIu64 " ms, sub-tenants' first runs max %" PRIu64
                      " ms\n", fq_sim_policy_name(ps[i]), inter[i], first[i]);
        for (size_t k = 0; k < sc->n_tenants; k++) {
            assert_true(r->tenants[k].backlogged);
            assert_true(fabs(r->tenants[k].share / r->tenants[k].fair - 1) < 0.02);
        }
        fq_sim_result_free(r);
    }
    /* "within a service time" (docs/policy.md): the mean service time of
     * a run under that policy, not a multiple of it */
    const uint64_t flood = 10 * 60000;    /* ms */
    assert_true(inter[0] > flood && first[0] > flood);                         /* drr */
    assert_true((double)inter[1] < service[1] && first[1] > flood);           /* drr-class */
    assert_true(inter[2] > flood && (double)first[2] < service[2]);           /* drr-sub */
    assert_true((double)inter[3] < service[3] && (double)first[3] < service[3]); /* both */
    fq_scenario_free(sc);
}

/* ---- issue 17's knobs, each against the policy without it -------------- */

/* Every feature is off unless configured, and with all of them off fairq
 * behaves exactly as before them: on scenarios that configure none (no
 * burst_in_flight, no rate, no output mix, no interactive workflow, no
 * sub-tenant), each knob's policy dispatches every run at the same moment
 * as drr, and serves each tenant the same tokens. */
static void test_knobs_off_change_nothing(void **state)
{
    (void)state;
    const char *const names[] = {"tuesday", "costs-50x", "over-runner", "idle-returner"};
    const enum fq_sim_policy knobs[] = {FQ_SIM_DRR_RATE, FQ_SIM_DRR_PRICED, FQ_SIM_DRR_CLASS,
                                        FQ_SIM_DRR_SUB, FQ_SIM_DRR_CLASS_SUB};
    for (size_t s = 0; s < sizeof names / sizeof names[0]; s++) {
        fq_scenario *sc = load(names[s]);
        fq_sim_result *drr = run(sc, FQ_SIM_DRR);
        for (size_t p = 0; p < sizeof knobs / sizeof knobs[0]; p++) {
            fq_sim_result *r = run(sc, knobs[p]);
            for (size_t i = 0; i < sc->n_runs; i++)
                if (r->runs[i].dispatched != drr->runs[i].dispatched)
                    fail_msg("%s under %s: run %zu dispatched at %" PRIu64 ", under drr %" PRIu64,
                             names[s], fq_sim_policy_name(knobs[p]), i, r->runs[i].dispatched,
                             drr->runs[i].dispatched);
            for (size_t k = 0; k < sc->n_tenants; k++)
                assert_true(r->tenants[k].served == drr->tenants[k].served);
            fq_sim_result_free(r);
        }
        /* a burst nobody configured leaves the hard cap as it was */
        fq_sim_result *cap = run(sc, FQ_SIM_DRR_CAP), *burst = run(sc, FQ_SIM_DRR_BURST);
        for (size_t i = 0; i < sc->n_runs; i++)
            assert_true(burst->runs[i].dispatched == cap->runs[i].dispatched);
        fq_sim_result_free(cap);
        fq_sim_result_free(burst);
        fq_sim_result_free(drr);
        fq_scenario_free(sc);
    }
}

/* Point 1 (config/scenarios/burst.yaml): the hard cap leaves workers idle
 * while the big tenant is alone; the burstable cap uses the pool as fully
 * as uncapped DRR and the small tenants wait less than under it, since the
 * big tenant holds only its cap while they have queued runs. */
static void test_burst(void **state)
{
    (void)state;
    fq_scenario *sc = load("burst");
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *cap = run(sc, FQ_SIM_DRR_CAP),
                  *burst = run(sc, FQ_SIM_DRR_BURST);
    print_message("utilization drr %.3f, drr-cap %.3f, drr-burst %.3f\n", drr->utilization,
                  cap->utilization, burst->utilization);
    assert_true(cap->utilization < 0.3 && cap->idle_queued_s > 3600);
    assert_true(burst->utilization > 0.99 && burst->idle_queued_s == 0);
    assert_true(fabs(burst->utilization - drr->utilization) < 1e-9);
    int smalls = 0;
    for (size_t k = 0; k < sc->n_tenants; k++) {
        if (strncmp(sc->tenants[k].id, "small-", 6) != 0)
            continue;
        smalls++;
        const fq_sim_tenant_stats *b = &burst->tenants[k], *d = &drr->tenants[k];
        if (!(b->wait_p99 < d->wait_p99 && b->wait_p50 < d->wait_p50))
            fail_msg("%s: drr-burst p50 %" PRIu64 " p99 %" PRIu64 " ms, drr p50 %" PRIu64
                     " p99 %" PRIu64 " ms", sc->tenants[k].id, b->wait_p50, b->wait_p99,
                     d->wait_p50, d->wait_p99);
        assert_int_equal(b->completed, d->completed);
    }
    assert_int_equal(smalls, 5);
    fq_sim_result_free(drr);
    fq_sim_result_free(cap);
    fq_sim_result_free(burst);
    fq_scenario_free(sc);
}

/* Point 3 (config/scenarios/rate.yaml): the token rate holds hog to its
 * plan's 12,000 tokens a minute (and its minute of burst, and the run
 * that crosses it) even with workers idle, refuses nothing, and the
 * steady tenants wait no longer for it. */
static void test_rate(void **state)
{
    (void)state;
    fq_scenario *sc = load("rate");
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *rate = run(sc, FQ_SIM_DRR_RATE);
    long hog = fq_scenario_tenant_index(sc, "hog");
    assert_true(hog >= 0);
    double minutes = (double)rate->window / 60000.0;
    double most = 12000.0 * (minutes + 1) + 1200;  /* a run costs at most 1,200 */
    print_message("hog: drr %.0f tokens, drr-rate %.0f (at most %.0f)\n",
                  drr->tenants[hog].served, rate->tenants[hog].served, most);
    assert_true(rate->tenants[hog].served <= most);
    assert_true(rate->tenants[hog].served > 12000.0 * minutes * 0.95);
    assert_true(drr->tenants[hog].served > 2 * most);
    assert_int_equal(rate->rejected, 0);
    assert_true(rate->utilization < drr->utilization);
    for (size_t k = 0; k < sc->n_tenants; k++) {
        if ((long)k == hog)
            continue;
        assert_true(rate->tenants[k].wait_p50 <= drr->tenants[k].wait_p50);
        assert_true(rate->tenants[k].wait_p99 <= drr->tenants[k].wait_p99);
    }
    fq_sim_result_free(drr);
    fq_sim_result_free(rate);
    fq_scenario_free(sc);
}

/* Point 4 (config/scenarios/classes.yaml): team's interactive runs wait
 * behind none of its own 900 batch runs (at most a service time, against
 * more than ten minutes without classes), and the other tenants' shares
 * are unchanged (to a ten-thousandth: runs of other costs leave team in
 * another order, which moves the others' completions by milliseconds). */
static void test_classes(void **state)
{
    (void)state;
    fq_scenario *sc = load("classes");
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *cls = run(sc, FQ_SIM_DRR_CLASS);
    long team = fq_scenario_tenant_index(sc, "team");
    assert_true(team >= 0);
    uint64_t without = longest_wait(sc, drr, team, 1), with = longest_wait(sc, cls, team, 1);
    print_message("team's interactive runs: longest wait drr %" PRIu64 " ms, drr-class %" PRIu64
                  " ms, service %.0f ms\n", without, with, cls->service_ms);
    assert_true(without > 10 * 60000);
    assert_true((double)with < cls->service_ms);
    for (size_t k = 0; k < sc->n_tenants; k++) {
        double a = drr->tenants[k].served, b = cls->tenants[k].served;
        if (fabs(a - b) > a * 1e-4)
            fail_msg("%s: %.0f tokens under drr, %.0f under drr-class", sc->tenants[k].id, a, b);
    }
    fq_sim_result_free(drr);
    fq_sim_result_free(cls);
    fq_scenario_free(sc);
}

/* Point 2 (config/scenarios/subtenants.yaml): big's 50 users and solo's
 * one get equal token shares under both policies; with sub-tenants no
 * colleague of the user flooding 900 runs waits more than a service time
 * for its first run (more than ten minutes without). */
static void test_subtenants(void **state)
{
    (void)state;
    fq_scenario *sc = load("subtenants");
    long big = fq_scenario_tenant_index(sc, "big");
    assert_true(big >= 0);
    unsigned char seen[1024] = {0};
    int users = 0;
    for (size_t i = 0; i < sc->n_runs; i++) {
        uint32_t u = sc->runs[i].sub;
        if ((long)sc->runs[i].tenant == big && u && u < sizeof seen && !seen[u]) {
            seen[u] = 1;
            users++;
        }
    }
    assert_int_equal(users, 50);
    fq_sim_result *drr = run(sc, FQ_SIM_DRR), *sub = run(sc, FQ_SIM_DRR_SUB);
    for (size_t k = 0; k < sc->n_tenants; k++) {
        assert_true(sub->tenants[k].backlogged);
        assert_true(fabs(sub->tenants[k].share - 0.5) < 0.01);
        assert_true(fabs(drr->tenants[k].share - 0.5) < 0.01);
    }
    uint64_t without = longest_wait(sc, drr, big, 0), with = longest_wait(sc, sub, big, 0);
    print_message("big's users' first runs: longest wait drr %" PRIu64 " ms, drr-sub %" PRIu64
                  " ms, service %.0f ms\n", without, with, sub->service_ms);
    assert_true(without > 10 * 60000);
    assert_true((double)with < sub->service_ms);
    fq_sim_result_free(drr);
    fq_sim_result_free(sub);
    fq_scenario_free(sc);
}

/* ---- one fairness across replicas (issue 16 point 4) -------------------- */

/* Each tenant's token share under drr-replicas is within 10% of what one
 * proxy (drr) gives it on the same traffic, and the window is exceeded by
 * at most the reserve raced by every replica (count x 1 run). */
static void shares_match_one_proxy(const char *name)
{
    fq_scenario *sc = load(name);
    fq_sim_result *one = run(sc, FQ_SIM_DRR), *reps = run(sc, FQ_SIM_DRR_REPLICAS);
    assert_int_equal(reps->replicas, sc->proxies.count);
    for (size_t k = 0; k < sc->n_tenants; k++) {
        double a = one->tenants[k].share, b = reps->tenants[k].share;
        print_message("%s %s: one proxy %.1f%%, replicas %.1f%%\n", name, sc->tenants[k].id,
                      100 * a, 100 * b);
        assert_true(one->tenants[k].backlogged && reps->tenants[k].backlogged);
        assert_true(fabs(b - a) <= 0.10 * a);
    }
    assert_true(reps->peak_in_flight <= sc->capacity.max_in_flight + sc->proxies.count);
    assert_true(reps->utilization > one->utilization - 0.01);
    fq_sim_result_free(one);
    fq_sim_result_free(reps);
    fq_scenario_free(sc);
}

static void test_replicas_equal_weights(void **state)
{
    (void)state;
    shares_match_one_proxy("replicas-equal");
}

/* An odd window of 9 runs for two equal replicas: a rounding that gave one
 * replica the odd run for good would give it 5 of 9 (55.6%, 11% over its
 * share); rounded by turns, each holds 4.5 over time. */
static void test_replicas_odd_window(void **state)
{
    (void)state;
    fq_scenario *sc = parse(
        "duration_s: 3600\n"
        "capacity: {workers: 9, worker_tokens_per_s: 25}\n"
        "proxies: {count: 2}\n"
        "workflows: [{name: w, cost: {dist: uniform, min: 800, max: 1200}}]\n"
        "tenants:\n"
        "  - {id: a, proxy: 1, arrivals: [{kind: poisson, rate_per_hour: 1200}]}\n"
        "  - {id: b, proxy: 2, arrivals: [{kind: poisson, rate_per_hour: 1200}]}\n");
    fq_sim_result *one = run(sc, FQ_SIM_DRR), *reps = run(sc, FQ_SIM_DRR_REPLICAS);
    for (size_t k = 0; k < 2; k++) {
        double a = one->tenants[k].share, b = reps->tenants[k].share;
        print_message("odd window %s: one proxy %.1f%%, replicas %.1f%%\n",
                      sc->tenants[k].id, 100 * a, 100 * b);
        assert_true(fabs(b - a) <= 0.05 * a);
    }
    fq_sim_result_free(one);
    fq_sim_result_free(reps);
    fq_scenario_free(sc);
}

/* Three replicas, one of them with two tenants: weights 1, 2, 2, 3. */
static void test_replicas_three(void **state)
{
    (void)state;
    shares_match_one_proxy("replicas-three");
}

static void test_replicas_costs_50x(void **state)
{
    (void)state;
    shares_match_one_proxy("replicas-costs-50x");
}

/* 3:1 weights on two replicas give 3:1 within 10%, as one proxy does. */
static void test_replicas_weights(void **state)
{
    (void)state;
    shares_match_one_proxy("replicas-weights");
    fq_scenario *sc = load("replicas-weights");
    fq_sim_result *r = run(sc, FQ_SIM_DRR_REPLICAS);
    double ratio = tenant(sc, r, "big")->served / tenant(sc, r, "small")->served;
    print_message("replicas-weights: big / small = %.3f\n", ratio);
    assert_true(fabs(ratio - 3.0) <= 0.3);
    fq_sim_result_free(r);
    fq_scenario_free(sc);
}

/* Tuesday's flood on one replica, the small accounts on the other: each
 * small account's first run waits no longer than behind one proxy, within
 * one service time. */
static void test_replicas_tuesday_first_runs(void **state)
{
    (void)state;
    fq_scenario *sc = load("replicas-tuesday");
    fq_sim_result *one = run(sc, FQ_SIM_DRR), *reps = run(sc, FQ_SIM_DRR_REPLICAS);
    for (size_t k = 0; k < sc->n_tenants; k++) {
        if (strncmp(sc->tenants[k].id, "small", 5) != 0)
            continue;
        int64_t a = one->tenants[k].first_wait, b = reps->tenants[k].first_wait;
        assert_true(a >= 0 && b >= 0);
        if ((double)b > (double)a + one->service_ms)
            fail_msg("%s: first run waited %" PRId64 " ms across replicas, %" PRId64
                     " ms behind one proxy (service %.0f ms)", sc->tenants[k].id, b, a,
                     one->service_ms);
    }
    /* and A still gets what the others leave */
    assert_true(fabs(reps->utilization - one->utilization) < 0.01);
    fq_sim_result_free(one);
    fq_sim_result_free(reps);
    fq_scenario_free(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tuesday),
        cmocka_unit_test(test_costs_50x),
        cmocka_unit_test(test_priced_shares),
        cmocka_unit_test(test_over_runner),
        cmocka_unit_test(test_enterprise),
        cmocka_unit_test(test_idle_returner),
        cmocka_unit_test(test_overload),
        cmocka_unit_test(test_work_conservation),
        cmocka_unit_test(test_same_seed_same_bytes),
        cmocka_unit_test(test_example_trace),
        cmocka_unit_test(test_capacity_models),
        cmocka_unit_test(test_horizon),
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_classes_and_subtenants),
        cmocka_unit_test(test_knobs_off_change_nothing),
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_rate),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_subtenants),
        cmocka_unit_test(test_replicas_equal_weights),
        cmocka_unit_test(test_replicas_costs_50x),
        cmocka_unit_test(test_replicas_three),
        cmocka_unit_test(test_replicas_odd_window),
        cmocka_unit_test(test_replicas_weights),
        cmocka_unit_test(test_replicas_tuesday_first_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
