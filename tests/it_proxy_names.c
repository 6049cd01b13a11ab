/* it_proxy_names.c -- two fairq-proxies on one server, with names of their own, stay apart. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "opstest.h"

#define RUNS 20

/* Proxy A on every default; proxy B on names of its own, and rejecting
 * tenants it does not list, so that its refusals are told apart too. */
static const char a_yaml[] =
    "scheduler: {default_plan: free}\n"
    "window: {max_in_flight: 100}\n"
    "plans: [{name: free}]\n";

static const char b_yaml[] =
    "subjects: {submit: b.submit, dispatch: b.dispatch, done: b.done, rejected: b.rejected,"
    " admin: b.admin, runs: b.runs}\n"
    "streams:\n"
    "  submit: B_SUBMIT\n"
    "  dispatch: B_DISPATCH\n"
    "  done: B_DONE\n"
    "  rejected: B_REJECTED\n"
    "  runs: B_RUNS\n"
    "  durable: b-proxy\n"
    "  lease_bucket: b_lease\n"
    "  tenants_bucket: b_tenants\n"
    "  duplicate_window_ms: 120000\n"
    "  rejected_max_age_ms: 3600000\n"
    "scheduler: {default_plan: free, unknown_tenants: reject}\n"
    "window: {max_in_flight: 100}\n"
    "plans: [{name: free}]\n"
    "tenants: [{id: tb}]\n";

typedef struct fixture {
    natstest *srv;
    pt_proxy a, b;
    pt_client c;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    return natstest_start(&f->srv, NULL) == 0 && pt_connect(&f->c, f->srv) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->a.proc.pid)
        assert_int_equal(pt_proxy_stop(&f->a), 0);
    if (f->b.proc.pid)
        assert_int_equal(pt_proxy_stop(&f->b), 0);
    pt_close(&f->c);
    natstest_destroy(f->srv);
    free(f);
    return 0;
}

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("expected \"%s\" in: %s", part, s ? s : "(nothing)");
}

/* Wait up to 20 s until stream holds n messages. */
static void wait_stream(fixture *f, const char *stream, uint64_t n)
{
    long long end = nt_now_ms() + 20000;
    while (pt_stream_last(&f->c, stream) < n && nt_now_ms() < end)
        nt_sleep_ms(50);
    assert_int_equal(pt_stream_last(&f->c, stream), n);
}

/* Wait up to 20 s until the reply to subject holds part. */
static void wait_reply(fixture *f, const char *subject, const char *body, const char *part)
{
    long long end = nt_now_ms() + 20000;
    char *r = NULL;
    do {
        free(r);
        r = pt_request(&f->c, subject, body, NULL);
        if (r && strstr(r, part))
            break;
        nt_sleep_ms(50);
    } while (nt_now_ms() < end);
    assert_contains(r, part);
    free(r);
}

/* n runs on subject <prefix>.<tenant>, run ids <tenant>-<i>. */
static void submit(fixture *f, const char *prefix, const char *tenant, int n)
{
    for (int i = 0; i < n; i++) {
        char subj[128], body[64];
        snprintf(subj, sizeof subj, "=%s.%s", prefix, tenant);
        snprintf(body, sizeof body, "{\"run_id\":\"%s-%d\"}", tenant, i);
        assert_int_equal(pt_submit(&f->c, subj, body, strlen(body), NULL), 0);
    }
}

/* Complete runs <tenant>-0 .. n-1 on <prefix>.<tenant>. */
static void complete(fixture *f, const char *prefix, const char *tenant, int n)
{
    for (int i = 0; i < n; i++) {
        char subj[128], body[128];
        snprintf(subj, sizeof subj, "%s.%s", prefix, tenant);
        snprintf(body, sizeof body,
                 "{\"run_id\":\"%s-%d\",\"actual_tokens\":10,\"status\":\"ok\"}", tenant, i);
        assert_int_equal(js_Publish(NULL, f->c.js, subj, body, (int)strlen(body), NULL, NULL),
                         NATS_OK);
    }
}

static bool holds(const char *data, size_t len, const char *part)
{
    size_t k = strlen(part);
    for (size_t i = 0; i + k <= len; i++)
        if (memcmp(data + i, part, k) == 0)
            return true;
    return false;
}

#define JOURNAL_MARKER "{\"v\":1,\"entries\":[]}"

/* Every message of stream: on subject, of tenant (Fair-Tenant, if given),
 * and its body holding `has` and not `lacks` (if given). */
static void assert_stream(fixture *f, const char *stream, size_t n, const char *subject,
                          const char *tenant, const char *has, const char *lacks)
{
    pt_msg *m = NULL;
    size_t got = 0;
    assert_int_equal(pt_stream_read(&f->c, stream, &m, &got), 0);
    if (got != n)
        fail_msg("%s holds %zu messages, not %zu", stream, got, n);
    for (size_t i = 0; i < got; i++) {
        assert_string_equal(m[i].subject, subject);
        if (tenant)
            assert_string_equal(m[i].tenant, tenant);
        /* A journal's term markers are empty batches (docs/protocol.md
         * section 8): they hold no run of anyone's. */
        bool marker = m[i].len == strlen(JOURNAL_MARKER) &&
                      memcmp(m[i].data, JOURNAL_MARKER, m[i].len) == 0;
        if (has && !marker)
            assert_true(holds(m[i].data, m[i].len, has));
        if (lacks)
            assert_false(holds(m[i].data, m[i].len, lacks));
    }
    pt_msgs_free(m, got);
}

/* How many consumers of stream are named for a term of durable
 * (durable-<digits>), and how many other consumers it has. */
static void count_consumers(fixture *f, const char *stream, const char *durable, int *ours,
                            int *others)
{
    *ours = *others = 0;
    jsConsumerNamesList *l = NULL;
    if (js_ConsumerNames(&l, f->c.js, stream, NULL, NULL) != NATS_OK)
        return;
    size_t dl = strlen(durable);
    for (int i = 0; i < l->Count; i++) {
        const char *n = l->List[i];
        bool term = strncmp(n, durable, dl) == 0 && n[dl] == '-' && n[dl + 1] &&
                    strspn(n + dl + 1, "0123456789") == strlen(n + dl + 1);
        (term ? ours : others)[0]++;
    }
    jsConsumerNamesList_Destroy(l);
}

/* The proxy's fetch threads create their consumers after it logs that it
 * runs: wait up to 10 s for the one consumer of durable's term on stream
 * (named <durable>-<term>, docs/protocol.md section 7), and no other. */
static void assert_consumer(fixture *f, const char *stream, const char *durable)
{
    long long end = nt_now_ms() + 10000;
    int ours = 0, others = 0;
    for (;;) {
        count_consumers(f, stream, durable, &ours, &others);
        if (ours || nt_now_ms() >= end)
            break;
        nt_sleep_ms(20);
    }
    assert_int_equal(ours, 1);
    assert_int_equal(others, 0);
}

static void test_two_proxies_apart(void **state)
{
    fixture *f = *state;
    assert_int_equal(pt_proxy_start(&f->a, f->srv, "a", a_yaml), 0);
    assert_int_equal(pt_proxy_start(&f->b, f->srv, "b", b_yaml), 0);
    /* Both lead: each holds the lease of its own bucket. */
    assert_int_equal(pt_log_wait(&f->a, "fairq-proxy running", 15000), 0);
    assert_int_equal(pt_log_wait(&f->b, "fairq-proxy running", 15000), 0);
    assert_int_equal(pt_log_count(&f->a, "standing by"), 0);
    assert_int_equal(pt_log_count(&f->b, "standing by"), 0);
    /* The startup line names B's streams. */
    assert_int_equal(pt_log_count(&f->b, " streams.submit=B_SUBMIT "), 1);
    assert_int_equal(pt_log_count(&f->b, " streams.duplicate_window_ms=120000 "), 1);

    /* The streams carry B's settings, and each proxy's durable sits on its
     * own streams only. */
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "B_DISPATCH", NULL, NULL), NATS_OK);
    assert_int_equal(si->Config->Duplicates, 120000LL * 1000000);
    assert_int_equal(si->Config->MaxAge, 3600000LL * 1000000);    /* the default: 1 h */
    jsStreamInfo_Destroy(si);
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "B_REJECTED", NULL, NULL), NATS_OK);
    assert_int_equal(si->Config->MaxAge, 3600000LL * 1000000);
    jsStreamInfo_Destroy(si);
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_DISPATCH", NULL, NULL), NATS_OK);
    assert_int_equal(si->Config->Duplicates, 600000LL * 1000000);
    jsStreamInfo_Destroy(si);
    assert_consumer(f, "FAIR_SUBMIT", "fairq");
    assert_consumer(f, "FAIR_DONE", "fairq");
    assert_consumer(f, "B_SUBMIT", "b-proxy");
    assert_consumer(f, "B_DONE", "b-proxy");

    /* Runs go where their subjects say; B refuses ta, which it does not list. */
    submit(f, "fair.submit", "ta", RUNS);
    submit(f, "b.submit", "tb", RUNS);
    submit(f, "b.submit", "ta", 1);
    wait_stream(f, "FAIR_DISPATCH", RUNS);
    wait_stream(f, "B_DISPATCH", RUNS);
    wait_stream(f, "B_REJECTED", 1);
    assert_stream(f, "FAIR_DISPATCH", RUNS, "fair.dispatch", "ta", NULL, NULL);
    assert_stream(f, "B_DISPATCH", RUNS, "b.dispatch", "tb", NULL, NULL);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "B_REJECTED", &m, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(m[0].subject, "b.rejected.ta");
    assert_contains(m[0].error, "unknown_tenant");
    pt_msgs_free(m, n);
    assert_int_equal(pt_stream_last(&f->c, "FAIR_REJECTED"), 0);

    /* Completions reach only their own proxy. */
    complete(f, "fair.done", "ta", RUNS);
    complete(f, "b.done", "tb", RUNS);
    wait_reply(f, "fair.admin.stats", "{\"limit\":0}", "\"completions\":20,");
    wait_reply(f, "b.admin.stats", "{\"limit\":0}", "\"completions\":20,");
    char *r = pt_request(&f->c, "fair.admin.stats", "{\"limit\":0}", NULL);
    assert_contains(r, "\"submitted\":20,");
    assert_contains(r, "\"completions_unknown\":0,");
    free(r);
    r = pt_request(&f->c, "b.admin.stats", "{\"limit\":0}", NULL);
    assert_contains(r, "\"submitted\":21,");
    assert_contains(r, "\"completions_unknown\":0,");
    free(r);

    /* Each journal holds its own proxy's runs. */
    assert_stream(f, "FAIRQ_RUNS", (size_t)pt_stream_last(&f->c, "FAIRQ_RUNS"), "fairq.runs",
                  NULL, "\"ta\"", "\"tb\"");
    assert_stream(f, "B_RUNS", (size_t)pt_stream_last(&f->c, "B_RUNS"), "b.runs", NULL,
                  "\"tb\"", "\"ta\"");

    /* An override in B's bucket is B's alone. */
    assert_int_equal(ot_kv_put(&f->c, "b_tenants", "tb", "{\"weight\":5}"), 0);
    wait_reply(f, "b.admin.tenant.get", "{\"tenant\":\"tb\"}", "\"source\":\"override\"");
    r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"tb\"}", NULL);
    assert_contains(r, "\"source\":\"default\"");
    assert_contains(r, "\"override\":null");
    free(r);
}

/* streams.lease_ttl_ms makes the lease bucket with that TTL; a proxy whose
 * setting differs from the bucket's stops at start, saying both: a key
 * aging out sooner than it counts on would let a standby take the lease
 * while it still acts. */
static void test_lease_ttl_of_the_bucket(void **state)
{
    fixture *f = *state;
    char yaml[512];
    snprintf(yaml, sizeof yaml, "%sstreams: {lease_ttl_ms: 6000}\n", a_yaml);
    assert_int_equal(pt_proxy_start(&f->a, f->srv, "a", yaml), 0);
    assert_int_equal(pt_log_wait(&f->a, "fairq-proxy running", 15000), 0);
    assert_int_equal(pt_log_count(&f->a, " streams.lease_ttl_ms=6000 "), 1);
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "KV_fairq_lease", NULL, NULL), NATS_OK);
    assert_int_equal(si->Config->MaxAge, 6000LL * 1000000);
    jsStreamInfo_Destroy(si);
    assert_int_equal(pt_proxy_stop(&f->a), 0);
    f->a.proc.pid = 0;
    /* The default, 3 s, against the bucket's 6 s. */
    assert_int_equal(pt_proxy_start(&f->b, f->srv, "b", a_yaml), 0);
    assert_int_equal(pt_log_wait(&f->b, "the lease bucket's TTL is not streams.lease_ttl_ms",
                                 15000), 0);
    assert_int_equal(pt_log_count(&f->b, "bucket_ttl_ms=6000"), 1);
    assert_int_equal(pt_log_count(&f->b, "fairq-proxy running"), 0);
    assert_int_not_equal(pt_proxy_stop(&f->b), 0);     /* it stopped by itself, failing */
    f->b.proc.pid = 0;
}

/* A lease bucket made by hand without direct gets, by which its keys are
 * read. One otherwise as the proxy makes it is given them by the server at
 * the proxy's start (nats-server 2.9.10 turns allow_direct on when the same
 * stream is made again with it); one that differs in more (here a history
 * of 5) keeps none, and a proxy stops at start saying so, rather than
 * standing by for ever, unable to read a key. */
static void test_lease_bucket_without_direct_gets(void **state)
{
    fixture *f = *state;
    const char *subj[] = {"$KV.fairq_lease.>"};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = "KV_fairq_lease";
    sc.Subjects = subj;
    sc.SubjectsLen = 1;
    sc.MaxMsgsPerSubject = 5;
    sc.MaxAge = 3000LL * 1000000;      /* the default lease_ttl_ms */
    sc.AllowRollup = true;
    sc.DenyDelete = true;
    sc.Discard = js_DiscardNew;
    sc.Storage = js_FileStorage;
    sc.AllowDirect = false;
    assert_int_equal(js_AddStream(NULL, f->c.js, &sc, NULL, NULL), NATS_OK);
    assert_int_equal(pt_proxy_start(&f->a, f->srv, "a", a_yaml), 0);
    assert_int_equal(pt_log_wait(&f->a, "the lease bucket does not allow direct gets", 15000), 0);
    assert_int_equal(pt_log_count(&f->a, "fairq-proxy running"), 0);
    assert_int_not_equal(pt_proxy_stop(&f->a), 0);     /* it stopped by itself, failing */
    f->a.proc.pid = 0;

    /* A history of 1, as the proxy makes it, still without direct gets. */
    sc.MaxMsgsPerSubject = 1;
    jsStreamInfo *si = NULL;
    assert_int_equal(js_UpdateStream(&si, f->c.js, &sc, NULL, NULL), NATS_OK);
    assert_false(si->Config->AllowDirect);
    jsStreamInfo_Destroy(si);
    assert_int_equal(pt_proxy_start(&f->a, f->srv, "a", a_yaml), 0);
    assert_int_equal(pt_log_wait(&f->a, "fairq-proxy running", 15000), 0);
    si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "KV_fairq_lease", NULL, NULL), NATS_OK);
    assert_true(si->Config->AllowDirect);
    jsStreamInfo_Destroy(si);
    submit(f, "fair.submit", "ta", 1);
    wait_stream(f, "FAIR_DISPATCH", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_proxies_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_ttl_of_the_bucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_bucket_without_direct_gets, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
