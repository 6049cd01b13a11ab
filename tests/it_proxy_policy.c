/* it_proxy_policy.c -- docs/policy.md's knobs through the live proxy: a burstable cap, a token rate with the overload estimate, a completion's priced token kinds, and priority classes within a tenant; each knob's metrics, and hostile token kinds, classes and sub-tenant claims refused with a reason at no other tenant's cost. */
#define _GNU_SOURCE             /* memmem */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "opstest.h"
#include "proxyfixture.h"

/* No workers: dispatched runs stay in flight until a test completes them. */
static const char yaml_burst[] =
    "scheduler:\n  default_plan: free\n"
    "plans:\n  - {name: free, weight: 1, max_in_flight: 1, burst_in_flight: 3}\n";

static const char yaml_rate[] =
    "scheduler:\n  default_plan: free\n  max_wait_ms: 1000\n"
    "plans:\n  - {name: free, weight: 1, tokens_per_minute: 1000}\n";

static const char yaml_priced[] =
    "scheduler:\n  default_plan: free\n"
    "plans:\n  - {name: free, weight: 1, price_input: 1, price_output: 4}\n";

/* One slot, so that the order of dispatch shows. */
static const char yaml_classes[] =
    "scheduler:\n  default_plan: free\n  classes: \"interactive:2, batch\"\n"
    "window: {max_in_flight: 1}\n"
    "plans:\n  - {name: free, weight: 1}\n";

/* Every proxy here serves /metrics on a port of its own choosing. */
static int setup_yaml(void **state, const char *yaml)
{
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    return pf_setup(state, yaml, NULL);
}

static int setup_burst(void **state) { return setup_yaml(state, yaml_burst); }
static int setup_rate(void **state) { return setup_yaml(state, yaml_rate); }
static int setup_priced(void **state) { return setup_yaml(state, yaml_priced); }
static int setup_classes(void **state) { return setup_yaml(state, yaml_classes); }

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* The stats of tenant, parsed (the one entry of its tenants array). */
static cJSON *tenant_stats(pf_fixture *f, const char *tenant, cJSON **whole)
{
    char req[64];
    snprintf(req, sizeof req, "{\"tenant\":\"%s\"}", tenant);
    *whole = pf_stats(f, req, NULL);
    cJSON *ts = cJSON_GetObjectItemCaseSensitive(*whole, "tenants");
    return cJSON_GetArrayItem(ts, 0);
}

/* Poll tenant's stats until key reaches want, up to 10 s; its last value. */
static long wait_for(pf_fixture *f, const char *tenant, const char *key, long want)
{
    long v = -1;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(20)) {
        cJSON *whole, *t = tenant_stats(f, tenant, &whole);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, key);
        v = cJSON_IsNumber(n) ? (long)n->valuedouble : -1;
        cJSON_Delete(whole);
        if (v == want)
            break;
    }
    return v;
}

/* The value of series (name{labels}) in the proxy's /metrics, polled until
 * it is in [lo, hi] (up to 10 s); its last value, NAN if never there. */
static double metric_in(pf_fixture *f, const char *series, double lo, double hi)
{
    int port = ot_http_port(&f->px, 5000);
    assert_true(port > 0);
    double v = NAN;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(50)) {
        int status = 0;
        char *body = NULL, want[256];
        assert_int_equal(ot_http_get(port, "/metrics", &status, &body), 0);
        assert_int_equal(status, 200);
        snprintf(want, sizeof want, "\n%s ", series);
        const char *at = strstr(body, want);
        v = at ? strtod(at + strlen(want), NULL) : NAN;
        free(body);
        if (v >= lo && v <= hi)
            break;
    }
    return v;
}

static void submit(pf_fixture *f, const char *tenant, int id, int est)
{
    char body[96];
    int n = snprintf(body, sizeof body, "{\"run_id\":\"%s-%d\",\"est_tokens\":%d}", tenant, id,
                     est);
    assert_int_equal(pt_submit(&f->c, tenant, body, (size_t)n, NULL), 0);
}

/* Alone, a tenant runs up to its burst, not its cap. Another tenant that
 * queues then is served, at its own cap of 1 since a has queued runs, and
 * a keeps its 3 in flight (no preemption) and gets no more. */
static void test_burst_alone_then_shared(void **state)
{
    pf_fixture *f = *state;
    for (int i = 0; i < 6; i++)
        submit(f, "a", i, 100);
    assert_int_equal(wait_for(f, "a", "in_flight", 3), 3);
    submit(f, "b", 0, 100);
    submit(f, "b", 1, 100);
    assert_int_equal(wait_for(f, "b", "in_flight", 1), 1);
    assert_int_equal(wait_for(f, "b", "queued_runs", 1), 1);
    assert_int_equal(wait_for(f, "a", "in_flight", 3), 3);
    assert_int_equal(wait_for(f, "a", "queued_runs", 3), 3);
    /* a completion of a's gives its slot to no one of a's while b waits:
     * a is above its cap of 1; b is at its own */
    pf_publish(f, "fair.done.a", "{\"run_id\":\"a-0\",\"actual_tokens\":100,\"status\":\"ok\"}");
    assert_int_equal(wait_for(f, "a", "in_flight", 2), 2);
    assert_int_equal(wait_for(f, "a", "queued_runs", 3), 3);
}

/* Two runs of a minute's 1,000 tokens go (the minute's burst and the run
 * that crosses it); the rate alone would hold a third a minute, past
 * max_wait_ms, so it is refused as overload, and the stats say how long
 * the tenant waits. */
static void test_rate_counts_in_overload(void **state)
{
    pf_fixture *f = *state;
    for (int i = 0; i < 3; i++)
        submit(f, "a", i, 1000);
    assert_int_equal(wait_for(f, "a", "in_flight", 2), 2);
    long wait = -1, over = -1;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end && over != 1; nt_sleep_ms(20)) {
        cJSON *whole, *t = tenant_stats(f, "a", &whole);
        const cJSON *rej = cJSON_GetObjectItemCaseSensitive(t, "rejected");
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(rej, "overload");
        over = cJSON_IsNumber(o) ? (long)o->valuedouble : 0;
        wait = pf_num(t, "rate_wait_ms");
        cJSON_Delete(whole);
    }
    assert_int_equal(over, 1);
    assert_true(wait > 50000 && wait <= 60000);
    /* and /metrics the same wait, in seconds */
    double secs = metric_in(f, "fairq_tenant_rate_wait_seconds{tenant=\"a\",plan=\"free\"}",
                            50, 60);
    if (!(secs >= 50 && secs <= 60))
        fail_msg("fairq_tenant_rate_wait_seconds of a: %g, not 50 to 60", secs);
    assert_int_equal(wait_for(f, "a", "queued_runs", 0), 0);
    /* The refusal states the wait it was refused for, in its sentence and
     * in Fair-Wait-Ms: the rate's, about a minute, past max_wait_ms. */
    pf_wait_msgs(f, "FAIR_REJECTED", 1);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &n), 0);
    assert_int_equal(n, 1);
    long hdr = strtol(m[0].wait_ms, NULL, 10);
    assert_true(hdr > 50000 && hdr <= 60000);
    char want[160];
    snprintf(want, sizeof want, "overload: the estimated wait of %ld ms exceeds "
             "scheduler.max_wait_ms (1000 ms)", hdr);
    assert_string_equal(m[0].error, want);
    pt_msgs_free(m, n);
    /* Explained: a run a submits now waits for its rate. */
    char *r = pt_request(&f->c, "fair.explain.a", "", NULL);
    assert_non_null(r);
    cJSON *j = cJSON_Parse(r);
    assert_non_null(j);
    assert_true(pf_num(j, "rate_wait_ms") > 50000);
    assert_true(pf_num(j, "estimated_wait_ms") >= pf_num(j, "rate_wait_ms"));
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(j, "why")->valuestring,
                           "over its token rate"));
    cJSON_Delete(j);
    free(r);
}

/* A completion that reports token kinds is reconciled at its priced cost;
 * the stats keep the tokens as reported too. */
static void test_priced_completion(void **state)
{
    pf_fixture *f = *state;
    submit(f, "a", 0, 1000);
    submit(f, "b", 0, 1000);
    assert_int_equal(wait_for(f, "a", "in_flight", 1), 1);
    assert_int_equal(wait_for(f, "b", "in_flight", 1), 1);
    pf_publish(f, "fair.done.a", "{\"run_id\":\"a-0\",\"actual_tokens\":1000,\"status\":\"ok\","
                                 "\"input_tokens\":600,\"output_tokens\":400}");
    pf_publish(f, "fair.done.b", "{\"run_id\":\"b-0\",\"actual_tokens\":1000,\"status\":\"ok\"}");
    /* 600 input + 400 output at four times: 2,200 */
    assert_int_equal(wait_for(f, "a", "priced_tokens", 2200), 2200);
    assert_int_equal(wait_for(f, "a", "actual_tokens", 1000), 1000);
    /* actual_tokens alone is its cost, as before */
    assert_int_equal(wait_for(f, "b", "priced_tokens", 1000), 1000);
    /* the debt is the priced overrun: 2,200 - 1,000 charged */
    cJSON *whole, *t = tenant_stats(f, "a", &whole);
    assert_int_equal(pf_num(t, "deficit"), -1200);
    cJSON_Delete(whole);
    /* /metrics shows both: the priced cost and the tokens as reported */
    assert_true(metric_in(f, "fairq_tenant_priced_tokens_total{tenant=\"a\",plan=\"free\"}",
                          2200, 2200) == 2200);
    assert_true(metric_in(f, "fairq_tenant_actual_tokens_total{tenant=\"a\",plan=\"free\"}",
                          1000, 1000) == 1000);
    assert_true(metric_in(f, "fairq_tenant_priced_tokens_total{tenant=\"b\",plan=\"free\"}",
                          1000, 1000) == 1000);
}

/* The estimator learns the priced cost, not the raw count: after eight
 * runs of a workflow that report 100 tokens, 900 of them output at four
 * times the price (3,700 in input tokens' worth), the next run of that
 * workflow is charged about 3,700, not about 100. */
static void test_estimator_learns_priced(void **state)
{
    pf_fixture *f = *state;
    for (int i = 0; i < 8; i++) {
        char body[96];
        int n = snprintf(body, sizeof body, "{\"run_id\":\"w-%d\",\"workflow\":\"w\"}", i);
        assert_int_equal(pt_submit(&f->c, "a", body, (size_t)n, NULL), 0);
    }
    assert_int_equal(wait_for(f, "a", "in_flight", 8), 8);
    for (int i = 0; i < 8; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"run_id\":\"w-%d\",\"actual_tokens\":100,"
                 "\"status\":\"ok\",\"input_tokens\":100,\"output_tokens\":900}", i);
        pf_publish(f, "fair.done.a", body);
    }
    assert_int_equal(wait_for(f, "a", "completed_runs", 8), 8);
    assert_int_equal(wait_for(f, "a", "priced_tokens", 8 * 3700), 8 * 3700);
    const char *next = "{\"run_id\":\"w-8\",\"workflow\":\"w\"}";
    assert_int_equal(pt_submit(&f->c, "a", next, strlen(next), NULL), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 9);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    assert_int_equal(n, 9);
    assert_string_equal(m[8].run_id, "w-8");
    /* a histogram's bucket is within a quarter of the value */
    if (m[8].est < 2775 || m[8].est > 4625)
        fail_msg("w-8 charged %u, not about 3,700", m[8].est);
    pt_msgs_free(m, n);
}

/* Completions for bytes (len) on subject, as a worker publishes them. */
static void publish_bytes(pf_fixture *f, const char *subject, const char *body, size_t len)
{
    jsPubAck *pa = NULL;
    assert_int_equal(js_Publish(&pa, f->c.js, subject, body, (int)len, NULL, NULL), NATS_OK);
    jsPubAck_Destroy(pa);
}

/* Token kinds a worker gets wrong (negative, fractional, past the bound,
 * astronomically large, not a number, given twice, more cached than
 * input), a body past 4096 bytes and one that is not UTF-8: each is
 * refused with the field named, counted in completions_invalid, and
 * changes nothing: the run stays in flight uncharged, and the other
 * tenant's completion is reconciled meanwhile. The run's real completion
 * then counts once. */
static void test_hostile_kinds_refused(void **state)
{
    pf_fixture *f = *state;
    submit(f, "a", 0, 1000);
    submit(f, "b", 0, 1000);
    assert_int_equal(wait_for(f, "a", "in_flight", 1), 1);
    assert_int_equal(wait_for(f, "b", "in_flight", 1), 1);
    static const struct {
        const char *kinds, *field;
    } bad[] = {
        {"\"input_tokens\":-1", "input_tokens"},
        {"\"output_tokens\":2.5", "output_tokens"},
        {"\"output_tokens\":100000001", "output_tokens"},
        {"\"output_tokens\":1e300", "output_tokens"},
        {"\"input_tokens\":-9223372036854775809", "input_tokens"},
        {"\"cached_tokens\":\"3\"", "cached_tokens"},
        {"\"input_tokens\":3,\"input_tokens\":3", "input_tokens"},
        {"\"input_tokens\":3,\"cached_tokens\":4", "cached_tokens"},
    };
    const size_t nbad = sizeof bad / sizeof bad[0];
    for (size_t i = 0; i < nbad; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"run_id\":\"a-0\",\"actual_tokens\":1000,\"status\":\"ok\",%s}",
                 bad[i].kinds);
        pf_publish(f, "fair.done.a", body);
    }
    /* a body past 4096 bytes, refused unread; one that is not UTF-8 */
    char *big = malloc(5000);
    int n = snprintf(big, 5000, "{\"run_id\":\"a-0\",\"actual_tokens\":1000,\"status\":\"ok\","
                     "\"output_tokens\":1,\"pad\":\"");
    memset(big + n, 'x', 5000 - (size_t)n - 2);
    memcpy(big + 4998, "\"}", 2);
    publish_bytes(f, "fair.done.a", big, 5000);
    free(big);
    const char utf[] = "{\"run_id\":\"a-0\",\"actual_tokens\":1000,\"status\":\"ok\","
                       "\"output_tokens\":1,\"note\":\"\xff\xfe\"}";
    publish_bytes(f, "fair.done.a", utf, sizeof utf - 1);
    /* b's own completion, among them */
    pf_publish(f, "fair.done.b", "{\"run_id\":\"b-0\",\"actual_tokens\":1000,\"status\":\"ok\","
                                 "\"output_tokens\":1000}");
    assert_int_equal(wait_for(f, "b", "priced_tokens", 4000), 4000);
    long invalid = -1;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end && invalid != (long)nbad + 2;
         nt_sleep_ms(20)) {
        cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
        invalid = pf_overall(j, "completions_invalid");
        cJSON_Delete(j);
    }
    assert_int_equal(invalid, (long)nbad + 2);
    /* each copied to the rejected subject with its reason */
    pf_wait_msgs(f, "FAIR_REJECTED", nbad + 2);
    pt_msg *m = NULL;
    size_t got = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &got), 0);
    assert_int_equal(got, nbad + 2);
    for (size_t i = 0; i < got; i++) {
        if (strncmp(m[i].error, "invalid: invalid completion: ", 29) != 0)
            fail_msg("refusal %zu: %s", i, m[i].error);
        assert_string_equal(m[i].fsubject, "fair.done.a");
    }
    for (size_t i = 0; i < nbad; i++) {     /* in the order sent: the field named */
        if (!strstr(m[i].error, bad[i].field))
            fail_msg("refusal of %s: %s", bad[i].kinds, m[i].error);
    }
    assert_non_null(strstr(m[nbad].error, "4096"));
    pt_msgs_free(m, got);
    /* nothing changed for a: in flight, uncharged */
    cJSON *whole, *t = tenant_stats(f, "a", &whole);
    assert_int_equal(pf_num(t, "in_flight"), 1);
    assert_int_equal(pf_num(t, "completed_runs"), 0);
    assert_int_equal(pf_num(t, "priced_tokens"), 0);
    assert_int_equal(pf_num(t, "deficit"), 0);
    cJSON_Delete(whole);
    /* its real completion counts, once */
    pf_publish(f, "fair.done.a", "{\"run_id\":\"a-0\",\"actual_tokens\":1000,\"status\":\"ok\","
                                 "\"input_tokens\":1000,\"cached_tokens\":1000}");
    assert_int_equal(wait_for(f, "a", "completed_runs", 1), 1);
    assert_int_equal(wait_for(f, "a", "priced_tokens", 1000), 1000);
}

/* A tenant's runs refused with code, polled until want (up to 10 s). */
static long wait_rejected(pf_fixture *f, const char *tenant, const char *code, long want)
{
    long v = -1;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(20)) {
        cJSON *whole, *t = tenant_stats(f, tenant, &whole);
        const cJSON *rej = cJSON_GetObjectItemCaseSensitive(t, "rejected");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(rej, code);
        v = cJSON_IsNumber(n) ? (long)n->valuedouble : 0;
        cJSON_Delete(whole);
        if (v == want)
            break;
    }
    return v;
}

static void done(pf_fixture *f, const char *run_id)
{
    char body[128];
    snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"actual_tokens\":100,\"status\":\"ok\"}",
             run_id);
    pf_publish(f, "fair.done.a", body);
}

/* Interactive runs (by body field and by header) leave before the nine
 * batch runs queued before them; a third is past its class's max_pending
 * of 2, and a class not configured is refused. */
static void test_class_goes_first(void **state)
{
    pf_fixture *f = *state;
    for (int i = 0; i < 10; i++)
        submit(f, "a", i, 100);
    assert_int_equal(wait_for(f, "a", "in_flight", 1), 1);
    const char *i0 = "{\"run_id\":\"a-i0\",\"est_tokens\":100,\"class\":\"interactive\"}";
    assert_int_equal(pt_submit(&f->c, "a", i0, strlen(i0), NULL), 0);
    const char *hdrs[] = {"Fair-Class", "interactive", NULL};
    const char *i1 = "{\"run_id\":\"a-i1\",\"est_tokens\":100}";
    assert_int_equal(pt_submit(&f->c, "a", i1, strlen(i1), hdrs), 0);
    const char *i2 = "{\"run_id\":\"a-i2\",\"est_tokens\":100}";
    assert_int_equal(pt_submit(&f->c, "a", i2, strlen(i2), hdrs), 0);
    const char *bad = "{\"run_id\":\"a-x\",\"class\":\"urgent\"}";
    assert_int_equal(pt_submit(&f->c, "a", bad, strlen(bad), NULL), 0);
    assert_int_equal(wait_rejected(f, "a", "tenant_full", 1), 1);
    assert_int_equal(wait_rejected(f, "a", "invalid", 1), 1);
    assert_int_equal(wait_for(f, "a", "queued_runs", 11), 11);
    /* each completion frees the one slot: the interactive runs go next,
     * so their completions reconcile (a queued run's would wait) */
    done(f, "a-0");
    assert_int_equal(wait_for(f, "a", "completed_runs", 1), 1);
    assert_int_equal(wait_for(f, "a", "queued_runs", 10), 10);
    done(f, "a-i0");
    assert_int_equal(wait_for(f, "a", "completed_runs", 2), 2);
    assert_int_equal(wait_for(f, "a", "queued_runs", 9), 9);
    done(f, "a-i1");
    assert_int_equal(wait_for(f, "a", "completed_runs", 3), 3);
    /* then the batch runs, in order */
    assert_int_equal(wait_for(f, "a", "queued_runs", 8), 8);
    done(f, "a-1");
    assert_int_equal(wait_for(f, "a", "completed_runs", 4), 4);
}

/* Class and sub-tenant claims a producer gets wrong or means harm with:
 * not UTF-8, oversized, not a string, given twice, a class not
 * configured. Each is refused with code invalid and its reason, counted,
 * and nothing of a's is queued; b's run is dispatched meanwhile. */
static void test_hostile_claims_refused(void **state)
{
    pf_fixture *f = *state;
    char huge[5001];
    memset(huge, 'x', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    static const char *const bodies[] = {
        "{\"run_id\":\"h-0\"}",
        "{\"run_id\":\"h-1\"}",
        "{\"run_id\":\"h-2\",\"class\":7}",
        "{\"run_id\":\"h-3\",\"class\":\"batch\",\"class\":\"interactive\"}",
        "{\"run_id\":\"h-4\",\"class\":\"urgent\"}",
        "{\"run_id\":\"h-5\"}",
        "{\"run_id\":\"h-6\"}",
        "{\"run_id\":\"h-7\",\"subtenant\":[\"u\"]}",
    };
    const char *const hdrs[][3] = {
        {"Fair-Class", "\xff\xfe", NULL},
        {"Fair-Class", huge, NULL},
        {NULL, NULL, NULL},
        {NULL, NULL, NULL},
        {NULL, NULL, NULL},
        {"Fair-Subtenant", "caf\xc3\xa9", NULL},
        {"Fair-Subtenant", huge, NULL},
        {NULL, NULL, NULL},
    };
    static const char *const why[] = {
        "invalid: Fair-Class header: ",
        "invalid: Fair-Class header: ",
        "invalid: class: ",
        "invalid: class: given twice",
        "invalid: class: urgent is not one of the classes (interactive, batch)",
        "invalid: Fair-Subtenant header: ",
        "invalid: Fair-Subtenant header: ",
        "invalid: subtenant: ",
    };
    const size_t nbad = sizeof bodies / sizeof bodies[0];
    for (size_t i = 0; i < nbad; i++)
        assert_int_equal(pt_submit(&f->c, "a", bodies[i], strlen(bodies[i]),
                                   hdrs[i][0] ? hdrs[i] : NULL), 0);
    submit(f, "b", 0, 100);
    assert_int_equal(wait_for(f, "b", "in_flight", 1), 1);
    pf_wait_msgs(f, "FAIR_REJECTED", nbad);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &n), 0);
    assert_int_equal(n, nbad);
    for (size_t i = 0; i < nbad; i++) {
        /* matched by run id: the refusals are not bound to come in order */
        char id[16];
        snprintf(id, sizeof id, "\"h-%zu\"", i);
        size_t k = 0;
        while (k < n && !(m[k].data && memmem(m[k].data, m[k].len, id, strlen(id))))
            k++;
        assert_true(k < n);
        if (strncmp(m[k].error, why[i], strlen(why[i])) != 0)
            fail_msg("h-%zu refused as: %s (want %s...)", i, m[k].error, why[i]);
        assert_true(strlen(m[k].error) < 400);  /* the 5,000 bytes are not echoed back */
    }
    pt_msgs_free(m, n);
    /* counted: as refusals, and the claims apart; a is held nowhere (a
     * tenant whose runs are all refused costs no state) */
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "rejected"), (long)nbad);
    assert_int_equal(pf_overall(j, "subtenant_refused"), 3);
    assert_int_equal(pf_overall(j, "queued_runs"), 0);
    assert_int_equal(pf_overall(j, "in_flight"), 1);
    cJSON_Delete(j);
    assert_int_equal(pt_stream_last(&f->c, "FAIR_DISPATCH"), 1);   /* b's alone */
}

/* A class's max_pending per tenant through the overrides bucket: a's
 * interactive class holds 1 run instead of scheduler.classes' 2, b's 3;
 * tenant.get lists it; one that does not give one per class is refused. */
static void test_class_max_pending_by_override(void **state)
{
    pf_fixture *f = *state;
    char *r = pt_request(&f->c, "fair.admin.tenant.set",
                         "{\"tenant\":\"a\",\"class_max_pending\":\"1,2,3\"}", NULL);
    assert_non_null(r);
    assert_non_null(strstr(r, "class_max_pending: give one max_pending per class"));
    free(r);
    const char *sets[] = {"{\"tenant\":\"a\",\"class_max_pending\":\"1, 0\"}",
                          "{\"tenant\":\"b\",\"class_max_pending\":\"3, 0\"}"};
    const char *want[] = {"1,0", "3,0"};
    for (int i = 0; i < 2; i++) {
        r = pt_request(&f->c, "fair.admin.tenant.set", sets[i], NULL);
        assert_non_null(r);
        cJSON *j = cJSON_Parse(r);
        const cJSON *cp = cJSON_GetObjectItemCaseSensitive(j, "class_max_pending");
        if (!cJSON_IsString(cp))
            fail_msg("tenant.set answered: %s", r);
        assert_string_equal(cp->valuestring, want[i]);
        cJSON_Delete(j);
        free(r);
    }
    submit(f, "c", 0, 100);     /* the one slot: every run of a and b stays queued */
    assert_int_equal(wait_for(f, "c", "in_flight", 1), 1);
    const char *tenants[] = {"a", "b"};
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < 4; i++) {
            char body[96];
            int n = snprintf(body, sizeof body, "{\"run_id\":\"%s-i%d\",\"est_tokens\":100,"
                             "\"class\":\"interactive\"}", tenants[t], i);
            assert_int_equal(pt_submit(&f->c, tenants[t], body, (size_t)n, NULL), 0);
        }
    }
    assert_int_equal(wait_for(f, "a", "queued_runs", 1), 1);
    assert_int_equal(wait_for(f, "b", "queued_runs", 3), 3);
    assert_int_equal(wait_rejected(f, "a", "tenant_full", 3), 3);
    assert_int_equal(wait_rejected(f, "b", "tenant_full", 1), 1);
    pf_wait_msgs(f, "FAIR_REJECTED", 4);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &m, &n), 0);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        char sentence[160];
        snprintf(sentence, sizeof sentence, "tenant_full: tenant %s has its max_pending runs "
                 "of class interactive (%d) queued already", m[i].subject + strlen("fair.rejected."),
                 strcmp(m[i].subject, "fair.rejected.a") == 0 ? 1 : 3);
        assert_string_equal(m[i].error, sentence);
    }
    pt_msgs_free(m, n);
}

/* Classes weighted per tenant through the overrides bucket: at 1:1 a
 * tenant's batch runs take turns with its interactive ones instead of
 * waiting for them all (strict, the config's default); weights that do not
 * fit the classes are refused with the reason. */
static void test_class_weights_by_override(void **state)
{
    pf_fixture *f = *state;
    char *r = pt_request(&f->c, "fair.admin.tenant.set",
                         "{\"tenant\":\"a\",\"class_weights\":\"3,2,1\"}", NULL);
    assert_non_null(r);
    assert_non_null(strstr(r, "class_weights"));
    assert_null(strstr(r, "\"override\""));      /* refused: nothing in force */
    free(r);
    /* nor written: the next set would find it there and be refused as a
     * race, as it was under load when the watch had not delivered it yet */
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "KV_fairq_tenants", &m, &n), 0);
    pt_msgs_free(m, n);
    assert_int_equal(n, 0);
    r = pt_request(&f->c, "fair.admin.tenant.set",
                   "{\"tenant\":\"a\",\"class_weights\":\"1, 1\"}", NULL);
    assert_non_null(r);
    cJSON *j = cJSON_Parse(r);
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(j, "class_weights");
    if (!cJSON_IsString(cw))    /* failed once under load: say what came instead */
        print_message("tenant.set answered: %s\n", r);
    assert_true(cJSON_IsString(cw));
    assert_string_equal(cw->valuestring, "1,1");
    cJSON_Delete(j);
    free(r);
    for (int i = 0; i < 4; i++)
        submit(f, "a", i, 100);
    assert_int_equal(wait_for(f, "a", "in_flight", 1), 1);
    for (int i = 0; i < 2; i++) {
        char body[96];
        int n = snprintf(body, sizeof body, "{\"run_id\":\"a-i%d\",\"est_tokens\":100,"
                         "\"class\":\"interactive\"}", i);
        assert_int_equal(pt_submit(&f->c, "a", body, (size_t)n, NULL), 0);
    }
    assert_int_equal(wait_for(f, "a", "queued_runs", 5), 5);
    /* each completion frees the one slot; a completion of a run not sent
     * would wait, so each count says which run went: batch had the turn
     * when the interactive runs came (DRR: they join behind it), then the
     * classes alternate (strict would send a-i0 and a-i1 second and third) */
    const char *order[] = {"a-0", "a-1", "a-i0", "a-2", "a-i1"};
    for (int k = 0; k < 5; k++) {
        done(f, order[k]);
        assert_int_equal(wait_for(f, "a", "completed_runs", k + 1), k + 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_burst_alone_then_shared, setup_burst, teardown),
        cmocka_unit_test_setup_teardown(test_rate_counts_in_overload, setup_rate, teardown),
        cmocka_unit_test_setup_teardown(test_priced_completion, setup_priced, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_kinds_refused, setup_priced, teardown),
        cmocka_unit_test_setup_teardown(test_estimator_learns_priced, setup_priced, teardown),
        cmocka_unit_test_setup_teardown(test_class_goes_first, setup_classes, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_claims_refused, setup_classes, teardown),
        cmocka_unit_test_setup_teardown(test_class_weights_by_override, setup_classes, teardown),
        cmocka_unit_test_setup_teardown(test_class_max_pending_by_override, setup_classes,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
