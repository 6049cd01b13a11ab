/* test_config.c -- unit tests of the config loader: the shipped file, defaults, every kind of error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"

/* Four lines that make a valid config; cases append from line 5. */
#define BASE "nats: {url: nats://127.0.0.1:4222}\n" \
             "scheduler: {default_plan: free}\n"     \
             "plans:\n"                              \
             "  - name: free\n"

/* A config that sets every setting, none to its default or with a space. */
#define FULL \
    "nats:\n" \
    "  url: nats://a:4222\n" \
    "  tls: {ca: ca.pem, cert: c.pem, key: k.pem}\n" \
    "  user: u\n" \
    "  password: pw\n" \
    "  inbox_prefix: _IN.x\n" \
    "partitions: 16\n" \
    "replica_id: fairq-0\n" \
    "subjects: {submit: s.in, dispatch: s.work, done: s.done, rejected: s.rej, admin: s.adm," \
    " runs: s.journal}\n" \
    "streams: {submit: B1, dispatch: B2, done: B3, rejected: B4, runs: B5, durable: b," \
    " lease_bucket: l, tenants_bucket: t, replicas: 3, duplicate_window_ms: 120000," \
    " dispatch_max_age_ms: 130000, rejected_max_age_ms: 86400000," \
    " submit_max_msgs_per_tenant: 500, submit_max_bytes: 7, rejected_max_msgs_per_tenant: 9," \
    " rejected_max_bytes: 1024}\n" \
    "scheduler: {quantum_tokens: 2000, default_plan: basic, unknown_tenants: reject," \
    " max_est_tokens: 50000, max_wait_ms: 30000, debt_forget_ms: 7200000}\n" \
    "window: {max_in_flight: 8, max_in_flight_tokens: 100000, run_timeout_ms: 5000}\n" \
    "limits: {max_buffered_runs: 10, max_buffered_bytes: 4096}\n" \
    "plans: [{name: basic, weight: 2}]\n" \
    "tenants: [{id: t1}]\n" \
    "estimates: {default_tokens: 700, workflows: [{name: w, tokens: 1200}]}\n" \
    "http: {listen: \"127.0.0.1:1\", probe_listen: \"127.0.0.1:2\", max_tenant_series: 5}\n" \
    "log: {level: debug, format: json, queue_age_warn_ms: 5}\n"

static fq_status parse(fq_config *c, const char *yaml, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    err[0] = '\0';
    return fq_config_parse(c, "t.yaml", yaml, strlen(yaml), err, errlen);
}

static void parse_ok(fq_config *c, const char *yaml)
{
    char err[512];
    fq_status s = parse(c, yaml, err, sizeof(err));
    if (s != FQ_OK)
        fail_msg("unexpected error: %s", err);
}

static void test_shipped_config_loads(void **state)
{
    (void)state;
    const char *dir = getenv("FAIRQ_SOURCE_DIR");
    char path[4096], err[512];
    snprintf(path, sizeof(path), "%s/config/fairq.yaml", dir ? dir : ".");
    fq_config c;
    memset(&c, 0, sizeof(c));
    fq_status s = fq_config_load(&c, path, err, sizeof(err));
    if (s != FQ_OK)
        fail_msg("%s", err);
    assert_string_equal(c.scheduler.default_plan, "free");
    assert_true(c.n_plans >= 3);
    assert_true(c.n_tenants >= 2);
    assert_true(c.estimates.n_workflows >= 2);
    /* It shows the defaults of what lives in JetStream. */
    fq_config d;
    parse_ok(&d, BASE);
    assert_string_equal(c.streams.submit, d.streams.submit);
    assert_string_equal(c.streams.dispatch, d.streams.dispatch);
    assert_string_equal(c.streams.runs, d.streams.runs);
    assert_string_equal(c.streams.durable, d.streams.durable);
    assert_string_equal(c.streams.lease_bucket, d.streams.lease_bucket);
    assert_string_equal(c.streams.tenants_bucket, d.streams.tenants_bucket);
    assert_string_equal(c.subjects.runs, d.subjects.runs);
    assert_int_equal(c.streams.duplicate_window_ms, d.streams.duplicate_window_ms);
    assert_int_equal(c.streams.dispatch_max_age_ms, d.streams.dispatch_max_age_ms);
    assert_int_equal(c.streams.rejected_max_age_ms, d.streams.rejected_max_age_ms);
    assert_int_equal(c.streams.submit_max_msgs_per_tenant, d.streams.submit_max_msgs_per_tenant);
    assert_int_equal(c.streams.submit_max_bytes, d.streams.submit_max_bytes);
    assert_int_equal(c.streams.rejected_max_msgs_per_tenant,
                     d.streams.rejected_max_msgs_per_tenant);
    assert_int_equal(c.streams.rejected_max_bytes, d.streams.rejected_max_bytes);
    fq_config_free(&d);

    /* Its policy: the plans and tenants it lists, and the default plan. */
    fq_policy *p;
    assert_int_equal(fq_config_policy(&p, &c), FQ_OK);
    fq_policy_resolved r;
    assert_int_equal(fq_policy_resolve(&r, p, "acme"), FQ_OK);
    assert_string_equal(r.plan, "enterprise");
    assert_int_equal(r.source, FQ_SRC_CONFIG);
    assert_int_equal(r.p.weight, fq_policy_plan(p, "enterprise")->weight);
    assert_int_equal(fq_policy_resolve(&r, p, "someone-new"), FQ_OK);
    assert_string_equal(r.plan, "free");
    assert_int_equal(r.source, FQ_SRC_DEFAULT);
    assert_true(fq_policy_plan(p, "enterprise")->weight >
                fq_policy_plan(p, "pro")->weight);
    assert_true(fq_policy_plan(p, "pro")->weight > fq_policy_plan(p, "free")->weight);
    fq_policy_destroy(p);
    fq_config_free(&c);
}

static void test_defaults(void **state)
{
    (void)state;
    fq_config c;
    parse_ok(&c, BASE);
    assert_string_equal(c.nats.url, "nats://127.0.0.1:4222");
    assert_null(c.nats.creds);
    assert_null(c.nats.tls_ca);
    assert_null(c.nats.tls_cert);
    assert_null(c.nats.tls_key);
    assert_null(c.nats.user);
    assert_null(c.nats.password);
    assert_null(c.nats.nkey);
    assert_string_equal(c.nats.inbox_prefix, "_INBOX");
    assert_string_equal(c.subjects.submit, "fair.submit");
    assert_string_equal(c.subjects.dispatch, "fair.dispatch");
    assert_string_equal(c.subjects.done, "fair.done");
    assert_string_equal(c.subjects.rejected, "fair.rejected");
    assert_string_equal(c.subjects.admin, "fair.admin");
    assert_string_equal(c.subjects.runs, "fairq.runs");
    assert_string_equal(c.streams.submit, "FAIR_SUBMIT");
    assert_string_equal(c.streams.dispatch, "FAIR_DISPATCH");
    assert_string_equal(c.streams.done, "FAIR_DONE");
    assert_string_equal(c.streams.rejected, "FAIR_REJECTED");
    assert_string_equal(c.streams.runs, "FAIRQ_RUNS");
    assert_string_equal(c.streams.durable, "fairq");
    assert_string_equal(c.streams.lease_bucket, "fairq_lease");
    assert_int_equal(c.streams.lease_ttl_ms, 3000);
    assert_string_equal(c.streams.tenants_bucket, "fairq_tenants");
    assert_int_equal(c.streams.replicas, 1);
    assert_int_equal(c.partitions, 1);      /* no mapping: as before partitions */
    assert_int_equal(c.partitions_before, 1);   /* no change of P */
    assert_null(c.replica_id);              /* made at start */
    assert_int_equal(c.streams.duplicate_window_ms, 600000);
    /* max(1 h, 2 x max(duplicate window, run timeout)) */
    assert_int_equal(c.streams.dispatch_max_age_ms, 3600000);
    assert_int_equal(c.streams.rejected_max_age_ms, 7 * 24 * 3600 * 1000);
    assert_int_equal(c.streams.submit_max_msgs_per_tenant, 100000);
    assert_int_equal(c.streams.submit_max_bytes, 1 << 30);
    assert_int_equal(c.streams.rejected_max_msgs_per_tenant, 10000);
    assert_int_equal(c.streams.rejected_max_bytes, 256 << 20);
    assert_int_equal(c.scheduler.quantum_tokens, 1000);
    assert_false(c.scheduler.reject_unknown);
    assert_int_equal(c.scheduler.max_est_tokens, 1000000);
    assert_int_equal(c.scheduler.max_wait_ms, 0);
    assert_int_equal(c.scheduler.debt_forget_ms, 3600000);
    assert_int_equal(c.window.max_in_flight, 64);
    assert_int_equal(c.window.max_in_flight_tokens, 0);
    assert_int_equal(c.window.run_timeout_ms, 600000);
    assert_int_equal(c.limits.max_buffered_runs, 1000000);
    assert_int_equal(c.limits.max_buffered_bytes, 256u << 20);
    assert_int_equal(c.estimates.default_tokens, 1000);
    assert_int_equal(c.estimates.n_workflows, 0);
    assert_string_equal(c.http.listen, "127.0.0.1:9464");
    assert_string_equal(c.http.probe_listen, "");
    assert_int_equal(c.http.max_tenant_series, 10000);
    assert_string_equal(c.log.level, "info");
    assert_string_equal(c.log.format, "logfmt");
    assert_int_equal(c.log.queue_age_warn_ms, 60000);
    assert_int_equal(c.n_plans, 1);
    assert_int_equal(c.plans[0].weight, 1);
    assert_int_equal(c.plans[0].max_in_flight, 0);
    assert_int_equal(c.plans[0].max_pending, 0);
    assert_int_equal(c.n_tenants, 0);

    /* max_pending nowhere set: the stated default applies. */
    fq_policy *p;
    fq_policy_resolved r;
    assert_int_equal(fq_config_policy(&p, &c), FQ_OK);
    assert_int_equal(fq_policy_resolve(&r, p, "x"), FQ_OK);
    assert_int_equal(r.p.max_pending, FQ_DEFAULT_MAX_PENDING);
    fq_policy_destroy(p);
    fq_config_free(&c);
    fq_config_free(&c);     /* leaves it zeroed: a second free is harmless */
}

static void test_values_are_read(void **state)
{
    (void)state;
    fq_config c;
    parse_ok(&c,
        "nats:\n"
        "  url: nats://a:4222,nats://b:4222\n"
        "  creds: /run/x.creds\n"
        "  tls: {ca: ca.pem, cert: c.pem, key: k.pem}\n"
        "subjects: {submit: s.in, dispatch: s.work, done: s.done, rejected: s.rej, admin: s.adm,"
        " runs: s.journal}\n"
        "streams:\n"
        "  submit: B_SUBMIT\n"
        "  dispatch: B_DISPATCH\n"
        "  done: B_DONE\n"
        "  rejected: B_REJECTED\n"
        "  runs: B_RUNS\n"
        "  durable: b-proxy\n"
        "  lease_bucket: b_lease\n"
        "  lease_ttl_ms: 10000\n"
        "  tenants_bucket: b_tenants\n"
        "  replicas: 3\n"
        "  duplicate_window_ms: 120000\n"
        "  dispatch_max_age_ms: 120_000\n"
        "  rejected_max_age_ms: 86400000\n"
        "  submit_max_msgs_per_tenant: 500\n"
        "  submit_max_bytes: 0\n"
        "  rejected_max_msgs_per_tenant: 9_223_372_036_854_775_807\n"
        "  rejected_max_bytes: 1_048_576\n"
        "scheduler:\n"
        "  quantum_tokens: 2_000\n"
        "  default_plan: basic\n"
        "  unknown_tenants: reject\n"
        "  max_est_tokens: 50000\n"
        "  max_wait_ms: 30000\n"
        "  debt_forget_ms: 7200000\n"
        "  classes: \"interactive:100, batch\"\n"
        "window: {max_in_flight: 8, max_in_flight_tokens: 100000, run_timeout_ms: 5000}\n"
        "limits: {max_buffered_runs: 10, max_buffered_bytes: 4096}\n"
        "plans:\n"
        "  - {name: basic, weight: 2, max_in_flight: 4, max_pending: 100, burst_in_flight: 9,\n"
        "     tokens_per_minute: 90000, price_input: 10, price_output: 40, price_cached: 1,\n"
        "     class_max_pending: \"50, 0\"}\n"
        "  - {name: gold, weight: 7}\n"
        "tenants:\n"
        "  - {id: t1, plan: gold, weight: 9, max_in_flight: 3, max_pending: 5,\n"
        "     class_max_pending: \"7,4294967295\"}\n"
        "  - {id: t2}\n"
        "estimates:\n"
        "  default_tokens: 700\n"
        "  workflows: [{name: summarize, tokens: 1200}]\n"
        "http: {listen: \"\"}\n"
        "log: {level: debug, format: json}\n");
    assert_string_equal(c.nats.url, "nats://a:4222,nats://b:4222");
    assert_string_equal(c.scheduler.classes, "interactive:100, batch");
    fq_classes cl;
    assert_int_equal(fq_classes_parse(&cl, c.scheduler.classes), FQ_OK);
    assert_int_equal(cl.n, 2);
    assert_string_equal(cl.name[1], "batch");
    assert_int_equal(cl.max_pending[0], 100);
    assert_int_equal(cl.max_pending[1], 0);
    assert_int_equal(fq_classes_find(&cl, "batch", 5), 1);
    assert_int_equal(fq_classes_find(&cl, "batc", 4), -1);
    /* a class's max_pending per plan and per tenant entry */
    assert_true(c.plans[0].class_max_pending.set);
    assert_int_equal(c.plans[0].class_max_pending.n[0], 50);
    assert_int_equal(c.plans[0].class_max_pending.n[1], 0);
    assert_false(c.plans[1].class_max_pending.set);
    assert_int_equal(c.tenants[0].class_max_pending.n[0], 7);
    assert_int_equal(c.tenants[0].class_max_pending.n[1], 4294967295u);
    assert_false(c.tenants[1].class_max_pending.set);
    assert_string_equal(c.nats.creds, "/run/x.creds");
    assert_string_equal(c.nats.tls_key, "k.pem");
    assert_string_equal(c.subjects.dispatch, "s.work");
    assert_string_equal(c.subjects.admin, "s.adm");
    assert_string_equal(c.subjects.runs, "s.journal");
    assert_string_equal(c.streams.submit, "B_SUBMIT");
    assert_string_equal(c.streams.dispatch, "B_DISPATCH");
    assert_string_equal(c.streams.done, "B_DONE");
    assert_string_equal(c.streams.rejected, "B_REJECTED");
    assert_string_equal(c.streams.runs, "B_RUNS");
    assert_string_equal(c.streams.durable, "b-proxy");
    assert_string_equal(c.streams.lease_bucket, "b_lease");
    assert_int_equal(c.streams.lease_ttl_ms, 10000);
    assert_string_equal(c.streams.tenants_bucket, "b_tenants");
    assert_int_equal(c.streams.replicas, 3);
    assert_int_equal(c.streams.duplicate_window_ms, 120000);
    assert_int_equal(c.streams.dispatch_max_age_ms, 120000);  /* as given, not derived */
    assert_int_equal(c.streams.rejected_max_age_ms, 86400000);
    assert_int_equal(c.streams.submit_max_msgs_per_tenant, 500);
    assert_int_equal(c.streams.submit_max_bytes, 0);    /* none */
    assert_true(c.streams.rejected_max_msgs_per_tenant == INT64_MAX);
    assert_int_equal(c.streams.rejected_max_bytes, 1048576);
    assert_int_equal(c.scheduler.quantum_tokens, 2000);
    assert_true(c.scheduler.reject_unknown);
    assert_int_equal(c.scheduler.max_est_tokens, 50000);
    assert_int_equal(c.scheduler.max_wait_ms, 30000);
    assert_int_equal(c.scheduler.debt_forget_ms, 7200000);
    assert_int_equal(c.window.max_in_flight, 8);
    assert_int_equal(c.window.max_in_flight_tokens, 100000);
    assert_int_equal(c.window.run_timeout_ms, 5000);
    assert_int_equal(c.limits.max_buffered_runs, 10);
    assert_int_equal(c.limits.max_buffered_bytes, 4096);
    assert_int_equal(c.n_plans, 2);
    assert_int_equal(c.plans[0].max_in_flight, 4);
    assert_int_equal(c.plans[0].max_pending, 100);
    assert_int_equal(c.plans[0].burst_in_flight, 9);
    assert_int_equal(c.plans[0].tokens_per_minute, 90000);
    assert_int_equal(c.plans[0].prices.output, 40);
    assert_int_equal(c.plans[1].weight, 7);
    assert_int_equal(c.n_tenants, 2);
    assert_string_equal(c.tenants[0].plan, "gold");
    assert_int_equal(c.tenants[0].weight, 9);
    assert_string_equal(c.tenants[1].plan, "");    /* the default plan */
    assert_int_equal(c.estimates.default_tokens, 700);
    assert_string_equal(c.estimates.workflows[0].name, "summarize");
    assert_int_equal(c.estimates.workflows[0].tokens, 1200);
    assert_string_equal(c.http.listen, "");
    assert_string_equal(c.log.level, "debug");
    assert_string_equal(c.log.format, "json");

    fq_policy *p;
    fq_policy_resolved r;
    assert_int_equal(fq_config_policy(&p, &c), FQ_OK);
    assert_int_equal(fq_policy_resolve(&r, p, "t1"), FQ_OK);
    assert_int_equal(r.p.weight, 9);
    assert_int_equal(r.p.max_pending, 5);
    assert_int_equal(fq_policy_resolve(&r, p, "t2"), FQ_OK);
    assert_string_equal(r.plan, "basic");
    assert_int_equal(r.p.max_in_flight, 4);
    assert_int_equal(fq_policy_resolve(&r, p, "t3"), FQ_EUNKNOWN);
    fq_policy_destroy(p);
    fq_config_free(&c);
}

/* max_subtenants: per plan (0 or absent: none), per tenant entry, and per
 * override, each layer over the one below. */
static void test_max_subtenants_layers(void **state)
{
    (void)state;
    fq_config c;
    char err[256];
    const char *yaml = "nats: {url: n}\nscheduler: {default_plan: free}\n"
                       "plans: [{name: free}, {name: team, max_subtenants: 50},\n"
                       "        {name: off, max_subtenants: 0}]\n"
                       "tenants: [{id: big, plan: team}, {id: capped, plan: team, "
                       "max_subtenants: 3}, {id: own, max_subtenants: 7}]\n";
    assert_int_equal(parse(&c, yaml, err, sizeof err), FQ_OK);
    fq_policy *p = NULL;
    fq_policy_resolved r;
    assert_int_equal(fq_config_policy(&p, &c), FQ_OK);
    const struct { const char *t; uint32_t want; } cases[] = {
        {"anyone", 0}, {"big", 50}, {"capped", 3}, {"own", 7}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(fq_policy_resolve(&r, p, cases[i].t), FQ_OK);
        assert_int_equal(r.p.max_subtenants, cases[i].want);
    }
    fq_tenant_entry e = {.id = "big", .max_subtenants = 9};
    assert_int_equal(fq_policy_set_override(p, &e), FQ_OK);
    assert_int_equal(fq_policy_resolve(&r, p, "big"), FQ_OK);
    assert_int_equal(r.p.max_subtenants, 9);
    e.max_subtenants = FQ_POLICY_MAX_SUBTENANTS + 1;
    assert_int_equal(fq_policy_set_override(p, &e), FQ_EINVAL);
    fq_policy_destroy(p);
    fq_config_free(&c);
}

/* Each bad document, and the one message it must give, position included. */
static const struct {
    const char *yaml;
    const char *want;
} bad_cases[] = {
    /* Unknown keys: placed at the key itself, with the keys allowed there. */
    {BASE "bogus: 1\n",
     "t.yaml:5:1: bogus: unknown key (known here: nats, partitions, partitions_before, replica_id, subjects, streams, "
     "scheduler, "
     "window, limits, plans, tenants, estimates, http, log)"},
    {BASE "  - name: pro\n    wieght: 3\n",
     "t.yaml:6:5: plans[1].wieght: unknown key (known here: name, weight, "
     "max_in_flight, max_pending, burst_in_flight, tokens_per_minute, price_input, "
     "price_output, price_cached, max_subtenants, class_weights, class_max_pending)"},
    /* After a nested mapping that holds a key of the same name. */
    {"nats:\n  url: x\n  tls:\n    ca: a\n  ca: b\n",
     "t.yaml:5:3: nats.ca: unknown key (known here: url, creds, tls, user, password, nkey, nkey_seed, inbox_prefix)"},
    /* replicas and the overrides bucket live under streams. */
    {"nats: {url: n, replicas: 3}\n",
     "t.yaml:1:16: nats.replicas: unknown key (known here: url, creds, tls, user, password, nkey, nkey_seed, inbox_prefix)"},
    {BASE "estimates:\n  workflows:\n    - {name: a, tokens: 1, cost: 2}\n",
     "t.yaml:7:28: estimates.workflows[0].cost: unknown key (known here: name, tokens)"},
    /* A key given twice in one mapping: placed at the second. */
    {BASE "window: {max_in_flight: 1}\nwindow: {max_in_flight: 2}\n",
     "t.yaml:6:1: window: key given twice"},
    /* Wrong types. */
    {BASE "  - name: pro\n    weight: 1.5\n",
     "t.yaml:6:5: plans[1].weight: '1.5' is not a whole number (digits only, no sign, "
     "fraction or leading zero)"},
    {BASE "window: {run_timeout_ms: -5}\n",
     "t.yaml:5:10: window.run_timeout_ms: '-5' is not a whole number (digits only, no "
     "sign, fraction or leading zero)"},
    {BASE "limits: {max_buffered_runs: 010}\n",
     "t.yaml:5:10: limits.max_buffered_runs: '010' is not a whole number (digits only, "
     "no sign, fraction or leading zero)"},
    {BASE "limits: {max_buffered_runs: 99999999999999999999}\n",
     "t.yaml:5:10: limits.max_buffered_runs: '99999999999999999999' is not a whole "
     "number (digits only, no sign, fraction or leading zero)"},
    {BASE "  - name: pro\n    weight: [3]\n",
     "t.yaml:6:5: plans[1].weight: expected a single value, got a list"},
    {BASE "  - pro\n", "t.yaml:5:5: plans[1]: expected a mapping, got a single value"},
    {"nats: nats://x\n", "t.yaml:1:1: nats: expected a mapping, got a single value"},
    {"- a\n- b\n", "t.yaml:1:1: expected a mapping, got a list"},
    /* Missing required keys: placed at the nearest enclosing key, if any. */
    {"scheduler: {default_plan: free}\nplans: [{name: free}]\n",
     "t.yaml: nats.url: required (e.g. nats://127.0.0.1:4222)"},
    {"nats: {url: n}\nplans: [{name: free}]\n",
     "t.yaml: scheduler.default_plan: required (the plan of tenants that are not listed)"},
    {"nats: {url: n}\nscheduler: {quantum_tokens: 5}\nplans: [{name: free}]\n",
     "t.yaml:2:1: scheduler.default_plan: required (the plan of tenants that are not "
     "listed)"},
    {"nats: {url: n}\nscheduler: {default_plan: free}\n",
     "t.yaml: plans: required: at least one plan (- name: free, weight: 1)"},
    {"nats: {url: n}\nscheduler: {default_plan: free}\nplans: []\n",
     "t.yaml:3:1: plans: required: at least one plan (- name: free, weight: 1)"},
    {BASE "  - weight: 2\n", "t.yaml:5:5: plans[1].name: required"},
    {BASE "tenants:\n  - plan: free\n", "t.yaml:6:5: tenants[0].id: required"},
    {BASE "estimates: {workflows: [{name: w}]}\n",
     "t.yaml:5:25: estimates.workflows[0].tokens: required"},
    {"", "t.yaml: nats.url: required (e.g. nats://127.0.0.1:4222)"},
    /* Out of range. */
    {BASE "  - {name: a, weight: 2}\n  - {name: b, weight: 0}\n",
     "t.yaml:6:15: plans[2].weight: must be >= 1"},
    {BASE "  - {name: a, weight: 1000001}\n",
     "t.yaml:5:15: plans[1].weight: must be <= 1000000"},
    {BASE "tenants: [{id: t, weight: 0}]\n", "t.yaml:5:19: tenants[0].weight: must be >= 1"},
    {BASE "tenants: [{id: t, max_pending: 0}]\n",
     "t.yaml:5:19: tenants[0].max_pending: must be >= 1"},
    {BASE "  - {name: b, max_in_flight: 4, burst_in_flight: 4}\n",
     "t.yaml:5:33: plans[1].burst_in_flight: must be above max_in_flight (4), or left out"},
    {BASE "tenants: [{id: t, price_output: 1000001}]\n",
     "t.yaml:5:19: tenants[0].price_output: must be <= 1000000"},
    {BASE "tenants: [{id: t, tokens_per_minute: 0}]\n",
     "t.yaml:5:19: tenants[0].tokens_per_minute: must be >= 1"},
    {BASE "  - {name: b, class_weights: \"3,1\"}\n",
     "t.yaml:5:15: plans[1].class_weights: needs scheduler.classes"},
    {"nats: {url: n}\nscheduler: {default_plan: free, classes: \"a,b\"}\n"
     "plans: [{name: free, class_weights: \"3,2,1\"}]\n",
     "t.yaml:3:22: plans[0].class_weights: must be \"strict\" or one weight of 1 to 1000 per "
     "class of scheduler.classes (2), highest first, as in \"3, 1\""},
    {"nats: {url: n}\nscheduler: {default_plan: free, classes: \"a,b\"}\n"
     "plans: [{name: free}]\ntenants: [{id: t, class_weights: \"1001, 1\"}]\n",
     "t.yaml:4:19: tenants[0].class_weights: must be \"strict\" or one weight of 1 to 1000 "
     "per class of scheduler.classes (2), highest first, as in \"3, 1\""},
    {BASE "  - {name: b, class_max_pending: \"3,1\"}\n",
     "t.yaml:5:15: plans[1].class_max_pending: needs scheduler.classes"},
    {"nats: {url: n}\nscheduler: {default_plan: free, classes: \"a,b\"}\n"
     "plans: [{name: free, class_max_pending: \"3,2,1\"}]\n",
     "t.yaml:3:22: plans[0].class_max_pending: must be one max_pending of 0 to 2^32-1 per "
     "class of scheduler.classes (2), highest first, as in \"100, 0\" (0: none of the "
     "class's own)"},
    {"nats: {url: n}\nscheduler: {default_plan: free, classes: \"a,b\"}\n"
     "plans: [{name: free}]\ntenants: [{id: t, class_max_pending: \"-1, 1\"}]\n",
     "t.yaml:4:19: tenants[0].class_max_pending: must be one max_pending of 0 to 2^32-1 per "
     "class of scheduler.classes (2), highest first, as in \"100, 0\" (0: none of the "
     "class's own)"},
    {BASE "  - {name: b, max_subtenants: 10001}\n",
     "t.yaml:5:15: plans[1].max_subtenants: must be <= 10000"},
    {BASE "tenants: [{id: t, max_subtenants: 0}]\n",
     "t.yaml:5:19: tenants[0].max_subtenants: must be >= 1"},
    {BASE "  - {name: b, burst_in_flight: 4}\n",
     "t.yaml:5:15: plans[1].burst_in_flight: needs max_in_flight: without a cap there is "
     "nothing to burst past"},
    {BASE "streams: {replicas: 6}\n", "t.yaml:5:11: streams.replicas: must be <= 5"},
    {"nats: {url: n}\nscheduler: {default_plan: free, classes: \"a,b,a\"}\nplans: [{name: free}]\n",
     "t.yaml:2:33: scheduler.classes: 'a,b,a' is not a list of priority classes, highest "
     "first: 2 to 4 distinct names of 1 to 32 of [A-Za-z0-9_-], each with an optional "
     ":max_pending, separated by commas"},
    {BASE "streams: {lease_ttl_ms: 999}\n", "t.yaml:5:11: streams.lease_ttl_ms: must be >= 1000"},
    {BASE "streams: {lease_ttl_ms: 60001}\n",
     "t.yaml:5:11: streams.lease_ttl_ms: must be <= 60000"},
    {BASE "streams: {replicas: 0}\n", "t.yaml:5:11: streams.replicas: must be >= 1"},
    {"nats: {url: n}\nscheduler: {default_plan: free, quantum_tokens: 0}\nplans: [{name: free}]\n",
     "t.yaml:2:33: scheduler.quantum_tokens: must be >= 1"},
    {BASE "window: {max_in_flight: 0}\n", "t.yaml:5:10: window.max_in_flight: must be >= 1"},
    {"nats: {url: n}\nscheduler: {default_plan: free, debt_forget_ms: 999}\nplans: [{name: free}]\n",
     "t.yaml:2:33: scheduler.debt_forget_ms: must be >= 1000"},
    {BASE "window: {run_timeout_ms: 31536000001}\n",
     "t.yaml:5:10: window.run_timeout_ms: must be <= 31536000000"},
    {"nats: {url: n}\nscheduler: {default_plan: free, max_est_tokens: 500}\n"
     "plans: [{name: free}]\nestimates: {default_tokens: 501}\n",
     "t.yaml:4:13: estimates.default_tokens: must be <= 500"},
    {"nats: {url: n}\nscheduler: {default_plan: free, max_est_tokens: 500}\n"
     "plans: [{name: free}]\nestimates: {workflows: [{name: w, tokens: 600}]}\n",
     "t.yaml:4:35: estimates.workflows[0].tokens: must be <= 500"},
    /* Names given twice, and names that refer to nothing. */
    {BASE "  - name: pro\n  - name: free\n",
     "t.yaml:6:5: plans[2].name: 'free' given twice (first at plans[0])"},
    {BASE "tenants:\n  - {id: a}\n  - {id: b}\n  - {id: a}\n",
     "t.yaml:8:6: tenants[2].id: 'a' given twice (first at tenants[0])"},
    {BASE "estimates:\n  workflows:\n    - {name: w, tokens: 1}\n    - {name: w, tokens: 2}\n",
     "t.yaml:8:8: estimates.workflows[1].name: 'w' given twice (first at "
     "estimates.workflows[0])"},
    {BASE "tenants: [{id: a, plan: gold}]\n",
     "t.yaml:5:19: tenants[0].plan: no plan named 'gold' in plans"},
    {"nats: {url: n}\nscheduler: {default_plan: gold}\nplans: [{name: free}]\n",
     "t.yaml:2:13: scheduler.default_plan: no plan named 'gold' in plans"},
    {BASE "tenants: [{id: \"a.b\"}]\n",
     "t.yaml:5:12: tenants[0].id: 'a.b' must be 1 to 64 of A-Z a-z 0-9 _ -"},
    /* fairq's own names are no tenant's (refusals to <rejected>._invalid,
     * metrics past the series limit in tenant="_other"); a plan may be so
     * named, since plans are no subject token and no tenant label. */
    {BASE "tenants: [{id: _invalid}]\n",
     "t.yaml:5:12: tenants[0].id: '_invalid' is reserved: fairq uses _invalid and _other for "
     "runs without a tenant and for metrics past the series limit"},
    {BASE "tenants: [{id: _other}]\n",
     "t.yaml:5:12: tenants[0].id: '_other' is reserved: fairq uses _invalid and _other for "
     "runs without a tenant and for metrics past the series limit"},
    {BASE "  - name: \"pro plan\"\n",
     "t.yaml:5:5: plans[1].name: 'pro plan' must be 1 to 64 of A-Z a-z 0-9 _ -"},
    /* Words from a fixed set. */
    {BASE "log: {level: verbose}\n",
     "t.yaml:5:7: log.level: 'verbose' is not one of: debug, info, warn, error"},
    {BASE "log: {format: xml}\n", "t.yaml:5:7: log.format: 'xml' is not one of: logfmt, json"},
    /* The knobs that were environment-only. */
    {BASE "http: {max_tenant_series: 0}\n", "t.yaml:5:8: http.max_tenant_series: must be >= 1"},
    {BASE "http: {max_tenant_series: 1000001}\n",
     "t.yaml:5:8: http.max_tenant_series: must be <= 1000000"},
    {BASE "http: {max_tenant_series: -5}\n",
     "t.yaml:5:8: http.max_tenant_series: '-5' is not a whole number (digits only, no sign, "
     "fraction or leading zero)"},
    {BASE "log: {queue_age_warn_ms: 0}\n", "t.yaml:5:7: log.queue_age_warn_ms: must be >= 1"},
    {BASE "log: {queue_age_warn_ms: 1.5}\n",
     "t.yaml:5:7: log.queue_age_warn_ms: '1.5' is not a whole number (digits only, no sign, "
     "fraction or leading zero)"},
    /* Stream, consumer and bucket names (JetStream's rules), and the
     * streams' durations. */
    {BASE "streams: {tenants_bucket: \"a.b\"}\n",
     "t.yaml:5:11: streams.tenants_bucket: 'a.b' is not a bucket name: 1 to 64 of "
     "[A-Za-z0-9_-]"},
    {BASE "streams: {lease_bucket: \"\"}\n",
     "t.yaml:5:11: streams.lease_bucket: '' is not a bucket name: 1 to 64 of [A-Za-z0-9_-]"},
    {BASE "streams: {lease_bucket: x, tenants_bucket: x}\n",
     "t.yaml:5:28: streams.tenants_bucket: 'x' is streams.lease_bucket already"},
    {BASE "streams: {submit: FAIR.SUBMIT}\n",
     "t.yaml:5:11: streams.submit: 'FAIR.SUBMIT' is not a JetStream name: 1 to 64 printable "
     "characters without white space, '.', '*', '>', '/' or '\\'"},
    {BASE "streams:\n  done: \"FAIR DONE\"\n",
     "t.yaml:6:3: streams.done: 'FAIR DONE' is not a JetStream name: 1 to 64 printable "
     "characters without white space, '.', '*', '>', '/' or '\\'"},
    {BASE "streams: {runs: \"RUNS*\"}\n",
     "t.yaml:5:11: streams.runs: 'RUNS*' is not a JetStream name: 1 to 64 printable "
     "characters without white space, '.', '*', '>', '/' or '\\'"},
    {BASE "streams: {rejected: \"a>\"}\n",
     "t.yaml:5:11: streams.rejected: 'a>' is not a JetStream name: 1 to 64 printable "
     "characters without white space, '.', '*', '>', '/' or '\\'"},
    {BASE "streams: {dispatch: ../x}\n",
     "t.yaml:5:11: streams.dispatch: '../x' is not a JetStream name: 1 to 64 printable "
     "characters without white space, '.', '*', '>', '/' or '\\'"},
    {BASE "streams: {dispatch: \"a\\\\b\"}\n",
     "t.yaml:5:11: streams.dispatch: 'a\\b' is not a JetStream name: 1 to 64 printable "
     "characters without white space, '.', '*', '>', '/' or '\\'"},
    {BASE "streams: {durable: \"\"}\n",
     "t.yaml:5:11: streams.durable: '' is not a JetStream name: 1 to 64 printable "
     "characters without white space, '.', '*', '>', '/' or '\\'"},
    {BASE "streams: {submit: A234567890123456789012345678901234567890123456789012345678901234"
     "5}\n",
     "t.yaml:5:11: streams.submit: 'A2345678901234567890123456789012345678901234567890123456789"
     "012345' is not a JetStream name: 1 to 64 printable characters without white space, "
     "'.', '*', '>', '/' or '\\'"},
    {BASE "streams:\n  done: FAIR_X\n  runs: FAIR_X\n",
     "t.yaml:7:3: streams.runs: 'FAIR_X' is streams.done already"},
    {BASE "streams: {dispatch: FAIR_SUBMIT}\n",
     "t.yaml:5:11: streams.dispatch: 'FAIR_SUBMIT' is streams.submit already"},
    {BASE "streams: {duplicate_window_ms: 999}\n",
     "t.yaml:5:11: streams.duplicate_window_ms: must be >= 1000"},
    {BASE "streams: {duplicate_window_ms: 86400001}\n",
     "t.yaml:5:11: streams.duplicate_window_ms: must be <= 86400000"},
    {BASE "streams: {duplicate_window_ms: 10m}\n",
     "t.yaml:5:11: streams.duplicate_window_ms: '10m' is not a whole number (digits only, no "
     "sign, fraction or leading zero)"},
    {BASE "streams: {duplicate_window_ms: 600000, dispatch_max_age_ms: 599999}\n",
     "t.yaml:5:40: streams.dispatch_max_age_ms: must be >= streams.duplicate_window_ms "
     "(600000): after a server restart only the messages still held de-duplicate a "
     "retried dispatch"},
    {BASE "streams: {dispatch_max_age_ms: 31536000001}\n",
     "t.yaml:5:11: streams.dispatch_max_age_ms: must be <= 31536000000"},
    {BASE "streams: {rejected_max_age_ms: 0}\n",
     "t.yaml:5:11: streams.rejected_max_age_ms: must be >= 1000"},
    /* JetStream takes its limits as signed 64-bit numbers. */
    {BASE "streams: {submit_max_msgs_per_tenant: 9223372036854775808}\n",
     "t.yaml:5:11: streams.submit_max_msgs_per_tenant: must be <= 9223372036854775807"},
    {BASE "streams: {submit_max_bytes: -1}\n",
     "t.yaml:5:11: streams.submit_max_bytes: '-1' is not a whole number (digits only, no "
     "sign, fraction or leading zero)"},
    {BASE "streams: {rejected_max_bytes: 1GB}\n",
     "t.yaml:5:11: streams.rejected_max_bytes: '1GB' is not a whole number (digits only, no "
     "sign, fraction or leading zero)"},
    {BASE "streams: {lease: fairq_lease}\n",
     "t.yaml:5:11: streams.lease: unknown key (known here: submit, dispatch, done, rejected, "
     "runs, durable, lease_bucket, lease_ttl_ms, tenants_bucket, replicas, duplicate_window_ms, "
     "dispatch_max_age_ms, rejected_max_age_ms, submit_max_msgs_per_tenant, "
     "submit_max_bytes, rejected_max_msgs_per_tenant, rejected_max_bytes)"},
    {"nats: {url: n}\nscheduler: {default_plan: free, unknown_tenants: deny}\n"
     "plans: [{name: free}]\n",
     "t.yaml:2:33: scheduler.unknown_tenants: 'deny' is not one of: admit, reject"},
    /* Subjects, listen address, TLS. */
    {BASE "subjects: {submit: \"fair.*\"}\n",
     "t.yaml:5:12: subjects.submit: 'fair.*' is not a subject: dot-separated tokens, none "
     "empty, without white space or wildcards"},
    {BASE "subjects: {done: fair..done}\n",
     "t.yaml:5:12: subjects.done: 'fair..done' is not a subject: dot-separated tokens, "
     "none empty, without white space or wildcards"},
    {BASE "subjects: {done: fair.submit}\n",
     "t.yaml:5:12: subjects.done: 'fair.submit' is subjects.submit already"},
    {BASE "subjects: {dispatch: fair.submit.work}\n",
     "t.yaml:5:12: subjects.dispatch: 'fair.submit.work' falls under subjects.submit.*"},
    {BASE "subjects: {runs: fair.done.runs}\n",
     "t.yaml:5:12: subjects.runs: 'fair.done.runs' falls under subjects.done.*"},
    /* With partitions, FAIR_SUBMIT and FAIR_DONE capture <subject>.*.* */
    {BASE "partitions: 16\nsubjects: {dispatch: fair.submit.3.work}\n",
     "t.yaml:6:12: subjects.dispatch: 'fair.submit.3.work' falls under subjects.submit.*.*"},
    {BASE "partitions: 2\nsubjects: {runs: fair.done.0.runs}\n",
     "t.yaml:6:12: subjects.runs: 'fair.done.0.runs' falls under subjects.done.*.*"},
    {BASE "partitions: 2\nsubjects: {runs: fair.rejected.runs}\n",
     "t.yaml:6:12: subjects.runs: 'fair.rejected.runs' falls under subjects.rejected.*"},
    {BASE "partitions: 0\n", "t.yaml:5:1: partitions: must be >= 1"},
    /* a replica id is part of a key: r.<id> */
    {BASE "replica_id: a.b\n", "t.yaml:5:1: replica_id: 'a.b' is not a replica id: 1 to 48 "
     "letters, digits, '-' or '_', not 'released'"},
    {BASE "replica_id: released\n", "t.yaml:5:1: replica_id: 'released' is not a replica id: "
     "1 to 48 letters, digits, '-' or '_', not 'released'"},
    {BASE "partitions: 1025\n", "t.yaml:5:1: partitions: must be <= 1024"},
    {BASE "partitions: many\n", "t.yaml:5:1: partitions: 'many' is not a whole number (digits only, no sign, fraction or leading zero)"},
    {BASE "subjects: {runs: fair.dispatch}\n",
     "t.yaml:5:12: subjects.runs: 'fair.dispatch' is subjects.dispatch already"},
    {BASE "http: {listen: localhost}\n",
     "t.yaml:5:8: http.listen: 'localhost' is not host:port (port 1 to 65535), or \"\" to "
     "disable"},
    {BASE "http: {listen: \"127.0.0.1:70000\"}\n",
     "t.yaml:5:8: http.listen: '127.0.0.1:70000' is not host:port (port 1 to 65535), or "
     "\"\" to disable"},
    {BASE "http: {probe_listen: 9465}\n",
     "t.yaml:5:8: http.probe_listen: '9465' is not host:port (port 1 to 65535), or \"\" for "
     "none"},
    {"nats: {url: n, tls: {cert: c.pem}}\n",
     "t.yaml:1:16: nats.tls.key: required with nats.tls.cert: cert and key go together"},
    {"nats: {url: n, user: fairq}\n",
     "t.yaml:1:1: nats.password: required with nats.user: user and password go together"},
    {"nats: {url: n, password: pw}\n",
     "t.yaml:1:1: nats.user: required with nats.password: user and password go together"},
    {"nats: {url: n, nkey_seed: f.nk}\n",
     "t.yaml:1:1: nats.nkey: required with nats.nkey_seed: the public key and its seed file go "
     "together"},
    {"nats: {url: n, nkey: SUAM, nkey_seed: f.nk}\n",
     "t.yaml:1:16: nats.nkey: not a user's public nkey: 56 characters of base32 beginning with U "
     "(the seed, SU..., goes in a file named by nkey_seed)"},
    {"nats: {url: n, creds: c.creds, user: u, password: p}\n",
     "t.yaml:1:32: nats.user: one way to authenticate: creds, user and password, or nkey"},
    {"nats: {url: n, inbox_prefix: \"_INBOX_a.>\"}\n",
     "t.yaml:1:16: nats.inbox_prefix: '_INBOX_a.>' is not an inbox prefix: 1 to 64 characters of "
     "dot-separated tokens, none empty, without white space or wildcards"},
    {"nats: {url: n, inbox_prefix: _INBOX_a.}\n",
     "t.yaml:1:16: nats.inbox_prefix: '_INBOX_a.' is not an inbox prefix: 1 to 64 characters of "
     "dot-separated tokens, none empty, without white space or wildcards"},
    /* Not YAML, or more than one document, or aliases. */
    {BASE "log: {level: \"info\n",
     "t.yaml:6:1: YAML syntax: found unexpected end of stream while scanning a quoted "
     "scalar"},
    {BASE "log:\n  level: info\n\tformat: json\n",
     "t.yaml:7:1: YAML syntax: found a tab character that violates indentation while "
     "scanning a plain scalar"},
    {BASE "---\nlog: {level: info}\n", "t.yaml:5:1: a second YAML document: the config "
     "is one document"},
    {BASE "log: {level: &l info, format: *l}\n",
     "t.yaml:5:23: log.format: YAML aliases (*name) are not supported"},
};

static void test_errors(void **state)
{
    (void)state;
    size_t n = sizeof(bad_cases) / sizeof(bad_cases[0]);
    for (size_t i = 0; i < n; i++) {
        fq_config c;
        char err[512];
        fq_status s = parse(&c, bad_cases[i].yaml, err, sizeof(err));
        if (s != FQ_EINVAL || strcmp(err, bad_cases[i].want) != 0)
            fail_msg("case %zu:\n%s\nstatus %d, message:\n  %s\nwanted:\n  %s", i,
                     bad_cases[i].yaml, s, err, bad_cases[i].want);
    }
}

/* The unknown key is named as written, whatever it looks like. */
static void test_unknown_key_variants(void **state)
{
    (void)state;
    const char *yaml[] = {
        BASE "scheduler2:\n",
        BASE "\"nats.url\": x\n",
        BASE "nats_url: [1, 2]\n",
    };
    const char *key[] = {"scheduler2", "nats.url", "nats_url"};
    for (size_t i = 0; i < sizeof(yaml) / sizeof(yaml[0]); i++) {
        fq_config c;
        char err[512], want[128];
        assert_int_equal(parse(&c, yaml[i], err, sizeof(err)), FQ_EINVAL);
        snprintf(want, sizeof(want), "t.yaml:5:1: %s: unknown key", key[i]);
        if (strncmp(err, want, strlen(want)) != 0)
            fail_msg("got %s, wanted %s...", err, want);
    }
}

/* On error the output is left as it was, and a short buffer still gets a
 * terminated message. */
static void test_error_leaves_output_untouched(void **state)
{
    (void)state;
    fq_config c, before;
    memset(&c, 0xA5, sizeof(c));
    before = c;
    char err[16];
    assert_int_equal(fq_config_parse(&c, "t.yaml", BASE "bogus: 1\n",
                                      strlen(BASE "bogus: 1\n"), err, sizeof(err)),
                     FQ_EINVAL);
    assert_memory_equal(&c, &before, sizeof(c));
    assert_int_equal(strlen(err), sizeof(err) - 1);
    assert_int_equal(strncmp(err, "t.yaml:5:1: bog", sizeof(err) - 1), 0);
    /* A NULL error buffer is allowed. */
    assert_int_equal(fq_config_parse(&c, "t.yaml", "", 0, NULL, 0), FQ_EINVAL);
}

static void test_load_missing_file(void **state)
{
    (void)state;
    fq_config c;
    char err[512];
    memset(&c, 0, sizeof(c));
    assert_int_equal(fq_config_load(&c, "no/such/fairq.yaml", err, sizeof(err)), FQ_EIO);
    assert_non_null(strstr(err, "no/such/fairq.yaml: "));
    assert_null(c.nats.url);
}

static void test_describe_hides_secrets(void **state)
{
    (void)state;
    fq_config c;
    parse_ok(&c,
        "nats:\n"
        "  url: \"nats://alice:hunter2@a:4222, tls://tok3n@b:4222\"\n"
        "  creds: /secret/dir/fairq.creds\n"
        "  tls: {ca: /etc/ca.pem, cert: /etc/c.pem, key: /secret/dir/k.pem}\n"
        "scheduler: {default_plan: free}\n"
        "plans: [{name: free}, {name: pro, weight: 3}]\n"
        "tenants: [{id: t1}]\n");
    char line[4096];
    size_t n = fq_config_describe(&c, line, sizeof(line));
    assert_int_equal(n, strlen(line));
    assert_null(strchr(line, '\n'));
    assert_null(strstr(line, "hunter2"));
    assert_null(strstr(line, "alice"));
    assert_null(strstr(line, "tok3n"));
    assert_null(strstr(line, "secret"));
    assert_non_null(strstr(line, "nats.url=\"nats://***@a:4222, tls://***@b:4222\""));
    assert_non_null(strstr(line, " nats.creds=set "));
    assert_non_null(strstr(line, " nats.tls.key=set "));
    assert_non_null(strstr(line, " nats.tls.ca=/etc/ca.pem "));
    assert_non_null(strstr(line, " plans=free:1,pro:3 "));
    assert_non_null(strstr(line, " tenants=1 "));
    assert_non_null(strstr(line, " window.max_in_flight_tokens=none "));

    /* A password and an nkey seed file are secrets too; the user, the
     * public key and the inbox prefix are not. */
    fq_config u;
    parse_ok(&u, "nats: {url: n, user: fairq, password: s3cr3tpw, inbox_prefix: _INBOX_fairq}\n"
                 "scheduler: {default_plan: free}\nplans: [{name: free}]\n");
    char uline[4096];
    fq_config_describe(&u, uline, sizeof(uline));
    assert_null(strstr(uline, "s3cr3tpw"));
    assert_non_null(strstr(uline, " nats.user=fairq nats.password=set "));
    assert_non_null(strstr(uline, " nats.inbox_prefix=_INBOX_fairq "));
    fq_config_free(&u);
    parse_ok(&u, "nats: {url: n, nkey: UAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,"
                 " nkey_seed: /secret/dir/fairq.nk}\n"
                 "scheduler: {default_plan: free}\nplans: [{name: free}]\n");
    fq_config_describe(&u, uline, sizeof(uline));
    assert_null(strstr(uline, "secret"));
    assert_non_null(strstr(uline, " nats.nkey=UAAAA"));
    assert_non_null(strstr(uline, " nats.nkey_seed=set "));
    fq_config_free(&u);

    /* Truncated as snprintf truncates: the same prefix, the same length. */
    char small[40];
    assert_int_equal(fq_config_describe(&c, small, sizeof(small)), n);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_int_equal(strncmp(small, line, sizeof(small) - 1), 0);
    assert_int_equal(fq_config_describe(&c, NULL, 0), n);
    fq_config_free(&c);

    /* Without credentials the URL is shown as given. */
    parse_ok(&c, BASE);
    fq_config_describe(&c, line, sizeof(line));
    assert_non_null(strstr(line, "nats.url=nats://127.0.0.1:4222 nats.creds=none "));
    fq_config_free(&c);
}

/* The keys that replace FAIRQ_* environment knobs are read and shown. */
static void test_ops_keys(void **state)
{
    (void)state;
    fq_config c;
    char buf[2048];
    parse_ok(&c, "nats: {url: n}\n"
                 "streams: {tenants_bucket: team_overrides}\n"
                 "scheduler: {default_plan: free}\n"
                 "plans: [{name: free}]\n"
                 "http: {max_tenant_series: 2_500}\n"
                 "log: {queue_age_warn_ms: 15000}\n");
    assert_string_equal(c.streams.tenants_bucket, "team_overrides");
    assert_int_equal(c.http.max_tenant_series, 2500);
    assert_int_equal(c.log.queue_age_warn_ms, 15000);
    fq_config_describe(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, " streams.tenants_bucket=team_overrides"));
    assert_non_null(strstr(buf, " http.max_tenant_series=2500"));
    assert_non_null(strstr(buf, " log.queue_age_warn_ms=15000"));
    assert_non_null(strstr(buf, " scheduler.debt_forget_ms=3600000"));
    fq_config_free(&c);
}

static void test_diff_restart(void **state)
{
    (void)state;
    fq_config a, b;
    char buf[256];
    parse_ok(&a, BASE "window: {max_in_flight: 4}\n");
    parse_ok(&b, BASE "  - name: pro\n"
                 "window: {max_in_flight: 8}\n");   /* live settings only */
    assert_int_equal(fq_config_diff_restart(&a, &b, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
    fq_config_free(&b);

    parse_ok(&b,
        "nats: {url: \"nats://u:secret@other:4222\", creds: x.creds, inbox_prefix: _IN_x}\n"
        "partitions: 8\n"
        "subjects: {submit: in.submit}\n"
        "streams: {replicas: 3}\n"
        "scheduler: {default_plan: free}\n"
        "plans: [{name: free}]\n"
        "http: {listen: \"\"}\n");
    assert_int_equal(fq_config_diff_restart(&a, &b, buf, sizeof(buf)), 7);
    assert_string_equal(buf, "nats.url,nats.creds,nats.inbox_prefix,partitions,"
                        "subjects.submit,streams.replicas,http.listen");  /* in file order */
    assert_null(strstr(buf, "secret"));
    /* A short buffer truncates the list, not the count. */
    assert_int_equal(fq_config_diff_restart(&b, &a, buf, 9), 7);
    assert_string_equal(buf, "nats.url");
    fq_config_free(&b);

    /* The overrides bucket and the series limit are fixed at start; the
     * queue-age threshold applies live. */
    parse_ok(&b, "nats: {url: \"nats://127.0.0.1:4222\"}\n"
                 "streams: {tenants_bucket: other}\n"
                 "scheduler: {default_plan: free}\n"
                 "plans: [{name: free}]\n"
                 "http: {max_tenant_series: 5}\n"
                 "log: {queue_age_warn_ms: 5}\n");
    assert_int_equal(fq_config_diff_restart(&a, &b, buf, sizeof(buf)), 2);
    assert_string_equal(buf, "streams.tenants_bucket,http.max_tenant_series");
    fq_config_free(&b);

    /* Every stream setting takes a restart: the streams exist already. */
    parse_ok(&b, BASE "subjects: {runs: other.runs}\n"
                 "streams: {submit: S, dispatch: D, done: F, rejected: R, runs: J,"
                 " durable: d, lease_bucket: l, lease_ttl_ms: 6000, tenants_bucket: t,"
                 " duplicate_window_ms: 60000,"
                 " dispatch_max_age_ms: 60000, rejected_max_age_ms: 60000,"
                 " submit_max_msgs_per_tenant: 1, submit_max_bytes: 1,"
                 " rejected_max_msgs_per_tenant: 1, rejected_max_bytes: 1}\n");
    char all[1024];
    assert_int_equal(fq_config_diff_restart(&a, &b, all, sizeof(all)), 17);
    assert_string_equal(all, "subjects.runs,streams.submit,streams.dispatch,streams.done,"
                        "streams.rejected,streams.runs,streams.durable,streams.lease_bucket,"
                        "streams.lease_ttl_ms,streams.tenants_bucket,streams.duplicate_window_ms,"
                        "streams.dispatch_max_age_ms,streams.rejected_max_age_ms,"
                        "streams.submit_max_msgs_per_tenant,streams.submit_max_bytes,"
                        "streams.rejected_max_msgs_per_tenant,streams.rejected_max_bytes");
    fq_config_free(&b);

    /* The estimator is built once with the estimate bounds, and the
     * journal's max age follows the run timeout: those take a restart too. */
    parse_ok(&b, "nats: {url: \"nats://127.0.0.1:4222\"}\n"
                 "scheduler: {default_plan: free, max_est_tokens: 5000, quantum_tokens: 7}\n"
                 "window: {run_timeout_ms: 5000, max_in_flight: 9}\n"
                 "plans: [{name: free}]\n"
                 "estimates: {default_tokens: 900}\n");
    assert_int_equal(fq_config_diff_restart(&a, &b, buf, sizeof(buf)), 3);
    assert_string_equal(buf, "scheduler.max_est_tokens,window.run_timeout_ms,"
                        "estimates.default_tokens");
    fq_config_free(&a);
    fq_config_free(&b);
}

/* What a reload keeps (fq_config_keep_restart) is what the diff compares:
 * a config given every restart-only setting of another differs from it in
 * none, and keeps its own live settings. */
static void test_keep_restart(void **state)
{
    (void)state;
    fq_config a, b;
    char buf[1024];
    parse_ok(&a, BASE "window: {max_in_flight: 4}\n");
    parse_ok(&b, FULL);
    /* all 40 but creds, nkey and nkey_seed, which neither sets */
    assert_int_equal(fq_config_diff_restart(&a, &b, buf, sizeof(buf)), 37);
    fq_config kept = b;
    fq_config_keep_restart(&kept, &a);
    assert_int_equal(fq_config_diff_restart(&a, &kept, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
    assert_ptr_equal(kept.nats.url, a.nats.url);            /* shallow */
    assert_int_equal(kept.window.max_in_flight, 8);         /* b's, live */
    assert_string_equal(kept.log.level, "debug");
    assert_true(kept.scheduler.reject_unknown);
    assert_int_equal(kept.scheduler.max_est_tokens, a.scheduler.max_est_tokens);
    fq_config_free(&a);
    fq_config_free(&b);
}

/* The keys "known here" lists at path (the error message of an unknown key
 * there), appended to keys as full paths; a key that is a section of its
 * own is followed into. Returns how many it found. */
static size_t schema_keys(const char *path, char keys[][64], size_t n, size_t max)
{
    char yaml[512], err[1024];
    fq_config c;
    size_t depth = 0;
    int k = 0;                  /* libcyaml refuses the key before validation */
    for (const char *p = path; *p; depth++) {   /* path as nested flow mappings */
        size_t len = strcspn(p, ".");
        k += snprintf(yaml + k, sizeof(yaml) - (size_t)k, "%.*s: {", (int)len, p);
        p += len + (p[len] == '.');
    }
    k += snprintf(yaml + k, sizeof(yaml) - (size_t)k, "zz_unknown: 1");
    for (size_t d = 0; d < depth; d++)
        k += snprintf(yaml + k, sizeof(yaml) - (size_t)k, "}");
    snprintf(yaml + k, sizeof(yaml) - (size_t)k, "\n");
    if (parse(&c, yaml, err, sizeof(err)) == FQ_OK) {
        fq_config_free(&c);
        return n;
    }
    const char *list = strstr(err, "(known here: ");
    if (!list)
        return n;               /* a list of entries or a scalar, not a section */
    list += strlen("(known here: ");
    while (*list && *list != ')' && n < max) {
        size_t len = strcspn(list, ",)");
        char key[64];
        snprintf(key, sizeof(key), "%s%s%.*s", path, *path ? "." : "", (int)len, list);
        size_t before = n;
        n = schema_keys(key, keys, n, max);
        if (n == before)        /* a setting, not a section */
            snprintf(keys[n++], sizeof(keys[0]), "%s", key);
        list += len;
        list += strspn(list, ", ");
    }
    return n;
}

/* libcyaml's schema and describe walk the same settings: every key the
 * loader takes is shown by describe, and every key describe shows is one
 * the loader takes. */
static void test_schema_and_describe_agree(void **state)
{
    (void)state;
    static char keys[128][64];
    size_t n = schema_keys("", keys, 0, 128);
    assert_true(n > 40);
    fq_config c;
    static char line[8192];
    parse_ok(&c, FULL);
    fq_config_describe(&c, line, sizeof(line));
    fq_config_free(&c);
    size_t shown = 0;
    for (const char *p = line; *p; shown++) {
        size_t klen = strcspn(p, "=");
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = strlen(keys[i]) == klen && strncmp(keys[i], p, klen) == 0;
        if (!known)
            fail_msg("describe shows %.*s, which the loader does not take", (int)klen, p);
        p += strcspn(p, " ");   /* FULL has no value with a space */
        p += *p == ' ';
    }
    for (size_t i = 0; i < n; i++) {
        char want[80];
        snprintf(want, sizeof(want), " %s=", keys[i]);
        if (strncmp(line, want + 1, strlen(want + 1)) != 0 && !strstr(line, want))
            fail_msg("the loader takes %s, which describe does not show", keys[i]);
    }
    assert_int_equal(shown, n);
}

/* FAIR_DISPATCH's max age follows the duplicate window and the run timeout
 * unless given; the derived value is what describe shows. */
static void test_dispatch_max_age(void **state)
{
    (void)state;
    fq_config c;
    char buf[4096];
    parse_ok(&c, BASE "window: {run_timeout_ms: 7200000}\n");
    assert_int_equal(c.streams.dispatch_max_age_ms, 2 * 7200000);
    fq_config_free(&c);
    parse_ok(&c, BASE "streams: {duplicate_window_ms: 3600000}\n");
    assert_int_equal(c.streams.dispatch_max_age_ms, 2 * 3600000);
    fq_config_describe(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, " streams.submit=FAIR_SUBMIT streams.dispatch=FAIR_DISPATCH"
                            " streams.done=FAIR_DONE streams.rejected=FAIR_REJECTED"
                            " streams.runs=FAIRQ_RUNS streams.durable=fairq"
                            " streams.lease_bucket=fairq_lease streams.lease_ttl_ms=3000"
                            " streams.tenants_bucket=fairq_tenants streams.replicas=1"
                            " streams.duplicate_window_ms=3600000"
                            " streams.dispatch_max_age_ms=7200000"
                            " streams.rejected_max_age_ms=604800000"
                            " streams.submit_max_msgs_per_tenant=100000"
                            " streams.submit_max_bytes=1073741824"
                            " streams.rejected_max_msgs_per_tenant=10000"
                            " streams.rejected_max_bytes=268435456 "));
    assert_non_null(strstr(buf, " subjects.runs=fairq.runs "));
    fq_config_free(&c);
    parse_ok(&c, BASE "streams: {submit_max_msgs_per_tenant: 0}\n");
    fq_config_describe(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, " streams.submit_max_msgs_per_tenant=none "));
    fq_config_free(&c);
    /* Equal to the window is enough. */
    parse_ok(&c, BASE "streams: {duplicate_window_ms: 5000, dispatch_max_age_ms: 5000}\n");
    assert_int_equal(c.streams.dispatch_max_age_ms, 5000);
    fq_config_free(&c);
}

/* A copy owns its strings and tables: freeing the original leaves it whole. */
static void test_copy(void **state)
{
    (void)state;
    fq_config a, b;
    char da[4096], db[4096];
    parse_ok(&a, "nats: {url: \"nats://u:p@h:4222\", creds: c.creds}\n"
                 "streams: {submit: S1}\n"
                 "scheduler: {default_plan: free}\n"
                 "plans: [{name: free}, {name: pro, weight: 4}]\n"
                 "tenants: [{id: t1, plan: pro}]\n"
                 "estimates: {workflows: [{name: w, tokens: 9}]}\n");
    fq_config_describe(&a, da, sizeof da);
    assert_int_equal(fq_config_copy(&b, &a), FQ_OK);
    assert_ptr_not_equal(b.streams.submit, a.streams.submit);
    assert_ptr_not_equal(b.plans, a.plans);
    fq_config_free(&a);
    fq_config_describe(&b, db, sizeof db);
    assert_string_equal(da, db);
    assert_string_equal(b.streams.submit, "S1");
    assert_string_equal(b.nats.creds, "c.creds");
    assert_string_equal(b.plans[1].name, "pro");
    assert_string_equal(b.tenants[0].plan, "pro");
    assert_int_equal(b.estimates.workflows[0].tokens, 9);
    fq_config_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_config_loads),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_max_subtenants_layers),
        cmocka_unit_test(test_values_are_read),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_unknown_key_variants),
        cmocka_unit_test(test_error_leaves_output_untouched),
        cmocka_unit_test(test_load_missing_file),
        cmocka_unit_test(test_describe_hides_secrets),
        cmocka_unit_test(test_ops_keys),
        cmocka_unit_test(test_diff_restart),
        cmocka_unit_test(test_keep_restart),
        cmocka_unit_test(test_schema_and_describe_agree),
        cmocka_unit_test(test_dispatch_max_age),
        cmocka_unit_test(test_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
