/* test_scenario.c -- scenario files and traces: schema errors with positions, validation, deterministic generation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scenario.h"

/* A valid scenario; tests append or substitute lines. */
#define HEAD \
    "name: t\n" \
    "seed: 7\n" \
    "duration_s: 3600\n" \
    "capacity: {workers: 2, worker_tokens_per_s: 100}\n" \
    "plans:\n" \
    "  - {name: gold, weight: 5, max_pending: 9}\n" \
    "workflows:\n" \
    "  - name: w\n" \
    "    cost: {dist: fixed, tokens: 100}\n"

static fq_scenario *parse_ok(const char *yaml)
{
    char err[256] = "";
    fq_scenario *sc = NULL;
    fq_status st = fq_scenario_parse(&sc, "t.yaml", yaml, strlen(yaml), err, sizeof(err));
    if (st != FQ_OK)
        fail_msg("unexpected error: %s", err);
    return sc;
}

/* The error message for a scenario that must fail with FQ_EINVAL. */
static const char *parse_err(const char *yaml)
{
    static char err[256];
    err[0] = '\0';
    fq_scenario *sc = NULL;
    assert_int_equal(fq_scenario_parse(&sc, "t.yaml", yaml, strlen(yaml), err, sizeof(err)),
                     FQ_EINVAL);
    assert_null(sc);
    assert_true(err[0] != '\0');
    return err;
}

static size_t runs_of(const fq_scenario *sc, const char *id)
{
    long k = fq_scenario_tenant_index(sc, id);
    assert_true(k >= 0);
    size_t n = 0;
    for (size_t i = 0; i < sc->n_runs; i++)
        n += sc->runs[i].tenant == (uint32_t)k;
    return n;
}

static void test_tenants_plans_and_replicas(void **state)
{
    (void)state;
    fq_scenario *sc = parse_ok(HEAD
        "max_pending: 4\n"
        "tenants:\n"
        "  - id: g\n"
        "    plan: gold\n"
        "    arrivals: [{kind: burst, start_s: 10, count: 3}]\n"
        "  - id: s\n"
        "    replicas: 12\n"
        "    weight: 2\n"
        "    arrivals: [{kind: burst, count: 1}]\n");
    assert_string_equal(sc->name, "t");
    assert_int_equal(sc->seed, 7);
    assert_int_equal(sc->duration, 3600000);
    assert_int_equal(sc->quantum, 1000);           /* default */
    assert_int_equal(sc->capacity.max_in_flight, 2);
    assert_int_equal(sc->n_tenants, 13);
    assert_string_equal(sc->tenants[0].id, "g");
    assert_string_equal(sc->tenants[0].plan, "gold");
    assert_int_equal(sc->tenants[0].weight, 5);
    assert_int_equal(sc->tenants[0].max_pending, 9);   /* the plan's */
    assert_string_equal(sc->tenants[1].id, "s-01");
    assert_string_equal(sc->tenants[12].id, "s-12");
    assert_string_equal(sc->tenants[12].plan, "default");
    assert_int_equal(sc->tenants[12].weight, 2);
    assert_int_equal(sc->tenants[12].max_pending, 4);  /* the scenario's */
    assert_int_equal(sc->n_runs, 15);
    assert_int_equal(runs_of(sc, "g"), 3);
    /* Sorted by time: the twelve bursts at 0 first, in tenant order. */
    assert_int_equal(sc->runs[0].at, 0);
    assert_int_equal(sc->runs[0].tenant, 1);
    assert_int_equal(sc->runs[11].tenant, 12);
    assert_int_equal(sc->runs[12].at, 10000);
    fq_scenario_free(sc);
}

static void test_processes_costs_and_errors(void **state)
{
    (void)state;
    fq_scenario *sc = parse_ok(HEAD
        "  - name: quiet\n"
        "    estimate: none\n"
        "    cost: {dist: uniform, min: 10, max: 20}\n"
        "tenants:\n"
        "  - id: c\n"
        "    error: 3\n"
        "    idle: [{start_s: 600, end_s: 1200}]\n"
        "    arrivals:\n"
        "      - {kind: constant, rate_per_hour: 60, end_s: 1800}\n"
        "      - {kind: burst, start_s: 3000, count: 10, duration_s: 100, workflow: quiet}\n");
    /* 60 an hour for 30 minutes is 30 runs; the idle 10 minutes drop 10. */
    size_t constant = 0, burst = 0;
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *r = &sc->runs[i];
        if (i)
            assert_true(sc->runs[i - 1].at <= r->at);
        if (r->workflow == 0) {
            constant++;
            assert_int_equal(r->at % 60000, 0);
            assert_false(r->at >= 600000 && r->at < 1200000);
            assert_int_equal(r->est, 100);
            assert_int_equal(r->actual, 300);       /* error 3 */
        } else {
            burst++;
            assert_int_equal(r->at, 3000000 + (burst - 1) * 10000);
            assert_int_equal(r->est, 0);            /* estimate: none */
            assert_in_range(r->actual, 30, 60);
        }
    }
    assert_int_equal(constant, 20);
    assert_int_equal(burst, 10);
    fq_scenario_free(sc);
}

/* Poisson counts and lognormal medians follow their parameters. */
static void test_distributions(void **state)
{
    (void)state;
    fq_scenario *sc = parse_ok(
        "duration_s: 36000\n"
        "capacity: {workers: 1, worker_tokens_per_s: 1}\n"
        "workflows:\n"
        "  - name: ln\n"
        "    cost: {dist: lognormal, tokens: 1000, sigma: 0.8}\n"
        "tenants:\n"
        "  - id: p\n"
        "    arrivals: [{kind: poisson, rate_per_hour: 3600}]\n");
    /* 36,000 expected; the standard deviation is 190. */
    assert_in_range(sc->n_runs, 36000 - 760, 36000 + 760);
    size_t below = 0;
    for (size_t i = 0; i < sc->n_runs; i++)
        below += sc->runs[i].actual < 1000;
    double frac = (double)below / (double)sc->n_runs;
    assert_true(fabs(frac - 0.5) < 0.02);
    fq_scenario_free(sc);
}

#define TWO_TENANTS(extra) HEAD \
    "tenants:\n" \
    extra \
    "  - id: b\n" \
    "    arrivals: [{kind: poisson, rate_per_hour: 100}]\n"

/* The same seed gives the same runs; another seed others; and adding a
 * tenant moves no one else's arrivals. */
static void test_generation_is_deterministic_and_local(void **state)
{
    (void)state;
    fq_scenario *a = parse_ok(TWO_TENANTS(""));
    fq_scenario *b = parse_ok(TWO_TENANTS(""));
    fq_scenario *c = parse_ok(TWO_TENANTS(
        "  - id: a\n"
        "    arrivals: [{kind: poisson, rate_per_hour: 500}]\n"));
    assert_true(a->n_runs > 50);
    assert_int_equal(a->n_runs, b->n_runs);
    assert_memory_equal(a->runs, b->runs, a->n_runs * sizeof(*a->runs));
    assert_int_equal(runs_of(c, "b"), a->n_runs);
    long kb = fq_scenario_tenant_index(c, "b");
    for (size_t i = 0, j = 0; i < c->n_runs; i++)
        if (c->runs[i].tenant == (uint32_t)kb)
            assert_int_equal(c->runs[i].at, a->runs[j++].at);
    assert_int_equal(fq_scenario_generate(b, 8), FQ_OK);
    assert_int_equal(b->seed, 8);
    assert_false(b->n_runs == a->n_runs &&
                 memcmp(a->runs, b->runs, a->n_runs * sizeof(*a->runs)) == 0);
    fq_scenario_free(a);
    fq_scenario_free(b);
    fq_scenario_free(c);
}

/* An unknown key names its own line and column, not its mapping's. */
static void test_unknown_key_position(void **state)
{
    (void)state;
    const char *err = parse_err(HEAD
        "tenants:\n"
        "  - id: a\n"
        "    arrivals: [{kind: burst, count: 1}]\n"
        "  - id: b\n"
        "    plna: gold\n"
        "    arrivals: [{kind: burst, count: 1}]\n");
    assert_non_null(strstr(err, "t.yaml:14:5: "));
    assert_non_null(strstr(err, "plna"));
}

static void test_type_and_enum_errors_have_positions(void **state)
{
    (void)state;
    const char *err = parse_err(HEAD
        "tenants:\n"
        "  - id: a\n"
        "    weight: heavy\n"
        "    arrivals: [{kind: burst, count: 1}]\n");
    assert_non_null(strstr(err, "t.yaml:12:"));
    err = parse_err(HEAD
        "tenants:\n"
        "  - id: a\n"
        "    arrivals: [{kind: sometimes, count: 1}]\n");
    assert_non_null(strstr(err, "t.yaml:12:"));
    err = parse_err("duration_s: 10\n");        /* capacity, workflows, tenants */
    assert_non_null(strstr(err, "t.yaml"));
    err = parse_err("duration_s: [\n");
    assert_non_null(strstr(err, "t.yaml"));
}

static void test_validation(void **state)
{
    (void)state;
    static const struct {
        const char *yaml;
        const char *says;
    } cases[] = {
        {HEAD "tenants:\n  - id: a\n    plan: silver\n"
              "    arrivals: [{kind: burst, count: 1}]\n", "plan"},
        {HEAD "tenants:\n  - id: a\n"
              "    arrivals: [{kind: burst, count: 1, rate_per_hour: 5}]\n", "burst"},
        {HEAD "tenants:\n  - id: a\n"
              "    arrivals: [{kind: poisson}]\n", "rate_per_hour"},
        {HEAD "tenants:\n  - id: a\n"
              "    arrivals: [{kind: poisson, rate_per_hour: 1, start_s: 50, end_s: 20}]\n",
         "end_s"},
        {HEAD "tenants:\n  - id: a\n"
              "    arrivals: [{kind: burst, count: 1, workflow: nope}]\n", "workflow"},
        {HEAD "tenants:\n  - id: a b\n"
              "    arrivals: [{kind: burst, count: 1}]\n", "id"},
        {HEAD "tenants:\n  - id: a\n    replicas: 2\n"
              "    arrivals: [{kind: burst, count: 1}]\n"
              "  - id: a-01\n    arrivals: [{kind: burst, count: 1}]\n", "twice"},
        {HEAD "tenants:\n  - id: a\n    idle: [{start_s: 9, end_s: 3}]\n"
              "    arrivals: [{kind: burst, count: 1}]\n", "idle"},
        {HEAD "tenants:\n  - id: a\n    error: -1\n"
              "    arrivals: [{kind: burst, count: 1}]\n", "error"},
        {HEAD "tenants:\n  - id: a\n"
              "    arrivals: [{kind: poisson, rate_per_hour: 3000000}]\n"
              "  - id: b\n"
              "    arrivals: [{kind: poisson, rate_per_hour: 3000000}]\n", "runs"},
        {"duration_s: 10\ncapacity: {workers: 1, worker_tokens_per_s: 1, tokens_per_s: 5}\n"
         "workflows: [{name: w, cost: {dist: fixed, tokens: 1}}]\n"
         "tenants: [{id: a, arrivals: [{kind: burst, count: 1}]}]\n", "capacity"},
        {"duration_s: 10\ncapacity: {tokens_per_s: 5}\n"
         "workflows: [{name: w, cost: {dist: fixed, tokens: 1}}]\n"
         "tenants: [{id: a, arrivals: [{kind: burst, count: 1}]}]\n", "max_in_flight"},
        {"duration_s: 10\ncapacity: {workers: 1, worker_tokens_per_s: 1}\n"
         "workflows: [{name: w, cost: {dist: uniform, min: 5, max: 2}}]\n"
         "tenants: [{id: a, arrivals: [{kind: burst, count: 1}]}]\n", "uniform"},
        {"duration_s: 10\ncapacity: {workers: 1, worker_tokens_per_s: 1}\n"
         "workflows: [{name: w, cost: {dist: lognormal, tokens: 5, sigma: 9}}]\n"
         "tenants: [{id: a, arrivals: [{kind: burst, count: 1}]}]\n", "sigma"},
        {"duration_s: 0\ncapacity: {workers: 1, worker_tokens_per_s: 1}\n"
         "workflows: [{name: w, cost: {dist: fixed, tokens: 1}}]\n"
         "tenants: [{id: a, arrivals: [{kind: burst, count: 1}]}]\n", "duration_s"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *err = parse_err(cases[i].yaml);
        if (!strstr(err, cases[i].says))
            fail_msg("case %zu: '%s' does not mention '%s'", i, err, cases[i].says);
    }
}

/* An empty or comment-only file is no document: libcyaml answers CYAML_OK
 * with no data, which is an error here, not a crash. */
static void test_empty_document(void **state)
{
    (void)state;
    static const char *const texts[] = {"", "# only a comment\n", "\n\n"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        const char *err = parse_err(texts[i]);
        if (!strstr(err, "t.yaml: no scenario"))
            fail_msg("case %zu: '%s'", i, err);
    }
    /* The file loader hands its bytes to the same parse. */
    char path[] = "/tmp/test_scenario_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256] = "";
    fq_scenario *sc = NULL;
    assert_int_equal(fq_scenario_load(&sc, path, err, sizeof(err)), FQ_EINVAL);
    assert_null(sc);
    assert_non_null(strstr(err, "no scenario"));
    unlink(path);
}

/* A scenario whose tenants submit nothing within its duration has no runs
 * (generating them sorted none: qsort was handed NULL). */
static void test_no_runs(void **state)
{
    (void)state;
    fq_scenario *sc = parse_ok(HEAD "tenants:\n  - id: late\n"
                               "    arrivals: [{kind: constant, rate_per_hour: 60, start_s: 7200}]\n");
    assert_int_equal(sc->n_tenants, 1);
    assert_int_equal(sc->n_runs, 0);
    assert_int_equal(fq_scenario_generate(sc, 3), FQ_OK);
    assert_int_equal(sc->n_runs, 0);
    fq_scenario_free(sc);
}

static void test_budget_capacity(void **state)
{
    (void)state;
    fq_scenario *sc = parse_ok(
        "duration_s: 10\n"
        "capacity: {tokens_per_s: 500, max_in_flight: 4, max_in_flight_tokens: 9000}\n"
        "workflows: [{name: w, cost: {dist: fixed, tokens: 1}}]\n"
        "tenants: [{id: a, arrivals: [{kind: burst, count: 1}]}]\n");
    assert_int_equal(sc->capacity.workers, 0);
    assert_int_equal(sc->capacity.max_in_flight, 4);
    assert_int_equal(sc->capacity.max_in_flight_tokens, 9000);
    assert_true(sc->capacity.tokens_per_s == 500);
    fq_scenario_free(sc);
}

static char *trace_text(const fq_scenario *sc, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    assert_non_null(f);
    assert_int_equal(fq_scenario_write_trace(f, sc), FQ_OK);
    fclose(f);
    return buf;
}

/* A written trace read back gives the same tenants and runs. */
static void test_trace_round_trip(void **state)
{
    (void)state;
    fq_scenario *sc = parse_ok(HEAD
        "tenants:\n"
        "  - id: g\n"
        "    plan: gold\n"
        "    arrivals: [{kind: poisson, rate_per_hour: 200}]\n"
        "  - id: s\n"
        "    error: 2\n"
        "    arrivals: [{kind: poisson, rate_per_hour: 300}]\n");
    size_t len;
    char *text = trace_text(sc, &len);
    fq_scenario *rp = parse_ok(HEAD
        "tenants:\n"
        "  - id: other\n"
        "    arrivals: [{kind: burst, count: 1}]\n");
    FILE *f = fmemopen(text, len, "r");
    char err[256];
    assert_int_equal(fq_scenario_read_trace(rp, f, "dir/day one.csv", err, sizeof(err)), FQ_OK);
    fclose(f);
    assert_string_equal(rp->name, "day_one");
    assert_null(rp->spec);
    assert_int_equal(fq_scenario_generate(rp, 1), FQ_EINVAL);
    assert_int_equal(rp->n_tenants, 2);
    assert_string_equal(rp->tenants[0].id, sc->tenants[sc->runs[0].tenant].id);
    long g = fq_scenario_tenant_index(rp, "g");
    assert_int_equal(rp->tenants[g].weight, 5);
    assert_int_equal(rp->tenants[g].max_pending, 9);
    assert_int_equal(rp->n_runs, sc->n_runs);
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *a = &sc->runs[i], *b = &rp->runs[i];
        assert_int_equal(a->at, b->at);
        assert_int_equal(a->est, b->est);
        assert_int_equal(a->actual, b->actual);
        assert_string_equal(sc->tenants[a->tenant].id, rp->tenants[b->tenant].id);
        assert_string_equal(sc->workflows[a->workflow], rp->workflows[b->workflow]);
    }
    free(text);
    fq_scenario_free(rp);
    fq_scenario_free(sc);
}

static fq_status read_trace(fq_scenario *sc, const char *text, char *err, size_t errlen)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    fq_status st = fq_scenario_read_trace(sc, f, "x.csv", err, errlen);
    fclose(f);
    return st;
}

static void test_trace_rows(void **state)
{
    (void)state;
    fq_scenario *sc;
    assert_int_equal(fq_scenario_defaults(&sc, "replay"), FQ_OK);
    char err[256];
    /* Columns in any order, plan optional, rows sorted stably by time. */
    assert_int_equal(read_trace(sc,
        "# a comment\n"
        "actual_tokens,tenant,est_tokens,submitted_at_ms,workflow\r\n"
        "10,b,0,500,\n"
        "20,a,15,100,chat\n"
        "\n"
        "30,c,15,500,chat\n", err, sizeof(err)), FQ_OK);
    assert_int_equal(sc->n_runs, 3);
    assert_int_equal(sc->runs[0].at, 100);
    assert_string_equal(sc->tenants[sc->runs[1].tenant].id, "b");
    assert_string_equal(sc->tenants[sc->runs[2].tenant].id, "c");
    assert_string_equal(sc->workflows[sc->runs[1].workflow], "");
    assert_int_equal(sc->runs[1].est, 0);
    assert_int_equal(sc->duration, 501);
    assert_int_equal(sc->tenants[0].weight, 1);
    static const struct {
        const char *text;
        const char *says;
    } bad[] = {
        {"tenant,submitted_at_ms,workflow,est_tokens\n", "x.csv:1: the header"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens,color\n", "x.csv:1:"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\na,1,w,1\n", "x.csv:2: wrong"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\na,-1,w,1,1\n", "submitted"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\na,1,w,1,0\n", "actual"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\na,1,w,x,1\n", "est_tokens"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\na!,1,w,1,1\n", "tenant"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\na,1,\"w\",1,1\n", "quoted"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens,plan\n"
         "a,1,w,1,1,x\na,2,w,1,1,y\n", "x.csv:3: the tenant's plan"},
        {"tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\n", "no runs"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(read_trace(sc, bad[i].text, err, sizeof(err)), FQ_EINVAL);
        if (!strstr(err, bad[i].says))
            fail_msg("case %zu: '%s' does not mention '%s'", i, err, bad[i].says);
    }
    assert_int_equal(sc->n_runs, 3);            /* unchanged by the failures */
    fq_scenario_free(sc);
}

/* A scenario with plans refuses a trace naming another plan. */
static void test_trace_unknown_plan(void **state)
{
    (void)state;
    fq_scenario *sc = parse_ok(TWO_TENANTS(""));
    char err[256];
    assert_int_equal(read_trace(sc, "tenant,submitted_at_ms,workflow,est_tokens,actual_tokens,"
                                "plan\na,1,w,1,1,silver\n", err, sizeof(err)), FQ_EINVAL);
    assert_non_null(strstr(err, "plan"));
    fq_scenario_free(sc);
}

/* Every scenario shipped in config/scenarios loads. */
static void test_shipped_scenarios_load(void **state)
{
    (void)state;
    const char *src = getenv("FAIRQ_SOURCE_DIR");
    char pattern[4096];
    snprintf(pattern, sizeof(pattern), "%s/config/scenarios/*.yaml", src ? src : ".");
    glob_t g;
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    assert_true(g.gl_pathc >= 7);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char err[512] = "";
        fq_scenario *sc = NULL;
        if (fq_scenario_load(&sc, g.gl_pathv[i], err, sizeof(err)) != FQ_OK)
            fail_msg("%s", err);
        assert_true(sc->n_runs > 0);
        fq_scenario_free(sc);
    }
    globfree(&g);
    char err[256];
    fq_scenario *sc = NULL;
    assert_int_equal(fq_scenario_load(&sc, "/nonexistent/x.yaml", err, sizeof(err)), FQ_EIO);
    assert_null(sc);
    assert_non_null(strstr(err, "/nonexistent/x.yaml"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenants_plans_and_replicas),
        cmocka_unit_test(test_processes_costs_and_errors),
        cmocka_unit_test(test_distributions),
        cmocka_unit_test(test_generation_is_deterministic_and_local),
        cmocka_unit_test(test_unknown_key_position),
        cmocka_unit_test(test_type_and_enum_errors_have_positions),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_empty_document),
        cmocka_unit_test(test_no_runs),
        cmocka_unit_test(test_budget_capacity),
        cmocka_unit_test(test_trace_round_trip),
        cmocka_unit_test(test_trace_rows),
        cmocka_unit_test(test_trace_unknown_plan),
        cmocka_unit_test(test_shipped_scenarios_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
