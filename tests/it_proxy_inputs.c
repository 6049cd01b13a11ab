/* it_proxy_inputs.c -- bad input end to end: each case refused with a reason or dispatched opaque, never a crash or a stall. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxyfixture.h"

static const char yaml[] =
    "scheduler:\n  default_plan: free\n  unknown_tenants: reject\n"
    "window:\n  max_in_flight: 8\n"
    "plans:\n  - name: free\n    weight: 1\n"
    "  - name: tiny\n    weight: 1\n    max_in_flight: 1\n    max_pending: 3\n"
    "tenants:\n  - id: a\n  - id: good\n  - id: p\n    plan: tiny\n"
    "  - id: flood\n  - id: quiet\n";

static const char yaml_overload[] =
    "scheduler:\n  default_plan: free\n  max_wait_ms: 300\n"
    "window:\n  max_in_flight: 2\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = 16, .service_ms = 1};
    return pf_setup(state, yaml, &wo);
}

static int setup_overload(void **state)
{
    pt_worker_opts wo = {.concurrency = 4, .service_ms = 20};
    return pf_setup(state, yaml_overload, &wo);
}

static int teardown(void **state)
{
    /* Whatever it was fed, the proxy is alive and stops cleanly. */
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* One bad (or odd) input and what the contract says becomes of it. */
typedef struct tcase {
    const char *subject;        /* tenant, or "=subject" */
    const char *body;           /* NUL-terminated, unique among the cases */
    const char *hdr_key, *hdr_val;
    const char *code;           /* expected Fair-Error code, NULL: dispatched */
    const char *rejected_to;    /* tenant token of the rejection subject */
    const char *why;            /* in the Fair-Error sentence, if not NULL */
} tcase;

/* Names at their limits: 128 bytes of run id and 64 of workflow pass, one
 * byte more is refused. */
#define S16 "0123456789abcdef"
#define S64 S16 S16 S16 S16
#define RUN_ID_128 S64 S64
#define WORKFLOW_64 S64

static const tcase cases[] = {
    {"a", "", NULL, NULL, NULL, NULL, NULL},
    {"a", "{not json", NULL, NULL, NULL, NULL, NULL},
    {"a", "\xff\xfe{\"est_tokens\":5}", NULL, NULL, NULL, NULL, NULL},
    {"a", "[1,2,3]", NULL, NULL, NULL, NULL, NULL},
    {"a", "{\"run_id\":\"ok-1\",\"workflow\":\"w\",\"est_tokens\":10,\"x\":[1]}", NULL, NULL, NULL,
     NULL, NULL},
    {"a", "{\"est_tokens\":\"abc\"}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"est_tokens\":0}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"est_tokens\":-5}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"est_tokens\":1.5}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"est_tokens\":1e12}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"est_tokens\":true}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"run_id\":5}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"run_id\":\"has space\"}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"tenant\":\"someone-else\"}", NULL, NULL, "invalid", "a", NULL},
    {"a", "{\"h\":1}", "Fair-Est-Tokens", "12x", "invalid", "a", NULL},
    /* A header with an empty value counts as absent: a derived run id. */
    {"a", "{\"h\":2}", "Fair-Run-Id", "", NULL, NULL, NULL},
    {"=fair.submit.bad%tenant", "{\"t\":1}", NULL, NULL, "invalid", "_invalid", NULL},
    {"=fair.submit.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "{\"t\":2}",
     NULL, NULL, "invalid", "_invalid", NULL},
    {"stranger", "{\"t\":3}", NULL, NULL, "unknown_tenant", "stranger", NULL},
    /* A listed tenant that never had a run admitted. */
    {"quiet", "{\"est_tokens\":0,\"q\":1}", NULL, NULL, "invalid", "quiet", NULL},
    /* Over-long names, in the body and in headers, are refused with the
     * field named; at the limit they pass. */
    {"a", "{\"run_id\":\"" RUN_ID_128 "\"}", NULL, NULL, NULL, NULL, NULL},
    {"a", "{\"run_id\":\"" RUN_ID_128 "x\"}", NULL, NULL, "invalid", "a", "run_id"},
    {"a", "{\"workflow\":\"" WORKFLOW_64 "\"}", NULL, NULL, NULL, NULL, NULL},
    {"a", "{\"workflow\":\"" WORKFLOW_64 "x\"}", NULL, NULL, "invalid", "a", "workflow"},
    {"a", "{\"h\":3}", "Fair-Run-Id", RUN_ID_128 "y", "invalid", "a", "Fair-Run-Id"},
    {"a", "{\"h\":4}", "Fair-Workflow", WORKFLOW_64 "y", "invalid", "a", "Fair-Workflow"},
    /* fairq's reserved names are no tenant's. */
    {"=fair.submit._invalid", "{\"t\":4}", NULL, NULL, "invalid", "_invalid",
     "other than _invalid and _other"},
    {"=fair.submit._other", "{\"t\":5}", NULL, NULL, "invalid", "_invalid",
     "other than _invalid and _other"},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const pt_msg *find_body(const pt_msg *m, size_t n, const void *body, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (m[i].len == len && memcmp(m[i].data, body, len) == 0)
            return &m[i];
    return NULL;
}

/* How many runs of tenant stats j counts refused with code; 0 if none. */
static long rejected_of(const cJSON *j, const char *tenant, const char *code)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(j, "tenants")) {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(t, "tenant")->valuestring, tenant) != 0)
            continue;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(t, "rejected"), code);
        return cJSON_IsNumber(n) ? (long)n->valuedouble : 0;
    }
    fail_msg("no tenant %s in the stats", tenant);
    return -1;
}

/* Refusals by tenant and code as the stats count them: on the tenant when
 * fairq knows it or the config lists it (a, quiet), else only overall
 * (stranger and the subjects with no valid tenant). */
static void check_rejected_counts(pf_fixture *f, long want_reject)
{
    static const char *const tenants[] = {"a", "quiet"};
    static const char *const codes[] = {"invalid", "too_big", "duplicate", "unknown_tenant"};
    cJSON *j = pf_stats(f, "", NULL);
    long counted = 0;
    for (size_t t = 0; t < 2; t++) {
        for (size_t k = 0; k < 4; k++) {
            long want = strcmp(tenants[t], "a") == 0 && k > 0 && k < 3; /* BIG2, dup2 */
            for (size_t i = 0; i < NCASES; i++)
                want += cases[i].code && strcmp(cases[i].rejected_to, tenants[t]) == 0 &&
                        strcmp(cases[i].code, codes[k]) == 0;
            long got = rejected_of(j, tenants[t], codes[k]);
            if (got != want)
                fail_msg("tenant %s: %ld runs refused as %s, want %ld", tenants[t], got,
                         codes[k], want);
            counted += got;
        }
    }
    long elsewhere = 0;
    for (size_t i = 0; i < NCASES; i++)
        elsewhere += cases[i].code && strcmp(cases[i].rejected_to, "a") != 0 &&
                     strcmp(cases[i].rejected_to, "quiet") != 0;
    assert_int_equal(counted, want_reject - elsewhere);
    assert_int_equal(pf_overall(j, "rejected"), want_reject);
    cJSON_Delete(j);
}

static void test_bad_submits(void **state)
{
    pf_fixture *f = *state;
    size_t want_dispatch = 0, want_reject = 0;
    for (size_t i = 0; i < NCASES; i++) {
        const char *h[] = {cases[i].hdr_key, cases[i].hdr_val, NULL};
        assert_int_equal(pt_submit(&f->c, cases[i].subject, cases[i].body, strlen(cases[i].body),
                                   cases[i].hdr_key ? h : NULL), 0);
        want_dispatch += cases[i].code == NULL;
        want_reject += cases[i].code != NULL;
    }
    /* 1 MB is forwarded; a body that leaves no room for fairq's headers
     * under max_payload is refused (its dispatch would need some 220
     * bytes more; its refusal, with a shorter header, fits). */
    size_t big = 1000000, too_big = 1048576 - 200;
    char *body = malloc(too_big);
    memset(body, 'x', too_big);
    memcpy(body, "BIG1", 4);
    assert_int_equal(pt_submit(&f->c, "a", body, big, NULL), 0);
    memcpy(body, "BIG2", 4);
    assert_int_equal(pt_submit(&f->c, "a", body, too_big, NULL), 0);
    want_dispatch++;
    want_reject++;
    /* A run id used twice: the second is refused. */
    const char dup1[] = "{\"run_id\":\"dup-1\",\"n\":1}", dup2[] = "{\"run_id\":\"dup-1\",\"n\":2}";
    assert_int_equal(pt_submit(&f->c, "a", dup1, strlen(dup1), NULL), 0);
    assert_int_equal(pt_submit(&f->c, "a", dup2, strlen(dup2), NULL), 0);
    want_dispatch++;
    want_reject++;
    /* None of it stalls another tenant. */
    const char good[] = "{\"run_id\":\"good-1\"}";
    assert_int_equal(pt_submit(&f->c, "good", good, strlen(good), NULL), 0);
    want_dispatch++;

    pf_wait_msgs(f, "FAIR_REJECTED", want_reject);
    pf_wait_msgs(f, "FAIR_DISPATCH", want_dispatch);
    assert_int_equal(pt_worker_wait_completed(f->w, want_dispatch, 20000), 0);
    pt_msg *d = NULL, *r = NULL;
    size_t nd = 0, nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &d, &nd), 0);
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nd, want_dispatch);
    assert_int_equal(nr, want_reject);
    for (size_t i = 0; i < NCASES; i++) {
        const tcase *c = &cases[i];
        size_t len = strlen(c->body);
        if (!c->code) {
            const pt_msg *m = find_body(d, nd, c->body, len);
            if (!m)
                fail_msg("case %zu (%s) was not dispatched", i, c->body);
            assert_string_equal(m->tenant, "a");
            continue;
        }
        const pt_msg *m = find_body(r, nr, c->body, len);
        if (!m)
            fail_msg("case %zu (%s) was not refused", i, c->body);
        char subj[128];
        snprintf(subj, sizeof subj, "fair.rejected.%s", c->rejected_to);
        assert_string_equal(m->subject, subj);
        /* "code: a sentence" */
        if (strncmp(m->error, c->code, strlen(c->code)) != 0 || m->error[strlen(c->code)] != ':' ||
            strlen(m->error) < strlen(c->code) + 10)
            fail_msg("case %zu: Fair-Error \"%s\", expected code %s", i, m->error, c->code);
        if (c->why && !strstr(m->error, c->why))
            fail_msg("case %zu: Fair-Error \"%s\" does not name %s", i, m->error, c->why);
        if (strcmp(c->rejected_to, "_invalid") == 0)
            assert_string_equal(m->fsubject, c->subject + 1);
    }
    memcpy(body, "BIG1", 4);
    const pt_msg *m = find_body(d, nd, body, big);
    assert_non_null(m);
    memcpy(body, "BIG2", 4);
    m = find_body(r, nr, body, too_big);
    assert_non_null(m);
    assert_memory_equal(m->error, "too_big:", 8);
    free(body);
    m = find_body(d, nd, dup1, strlen(dup1));
    assert_non_null(m);
    assert_string_equal(m->run_id, "dup-1");
    m = find_body(r, nr, dup2, strlen(dup2));
    assert_non_null(m);
    assert_memory_equal(m->error, "duplicate:", 10);
    m = find_body(d, nd, good, strlen(good));
    assert_non_null(m);
    /* An opaque run gets a run id derived from its submit sequence. */
    m = find_body(d, nd, "{not json", 9);
    assert_memory_equal(m->run_id, "fq-", 3);
    pt_msgs_free(d, nd);
    pt_msgs_free(r, nr);
    check_rejected_counts(f, (long)want_reject);
}

static void test_max_pending(void **state)
{
    pf_fixture *f = *state;
    /* p's plan: one in flight, three queued; the worker holds its run.
     * p-0 is submitted alone and awaited at the worker: were it still
     * queued when the others arrive, five would be refused, not four. */
    pt_worker_hold(f->w, true);
    for (int i = 0; i < 8; i++) {
        char b[32];
        snprintf(b, sizeof b, "{\"run_id\":\"p-%d\"}", i);
        assert_int_equal(pt_submit(&f->c, "p", b, strlen(b), NULL), 0);
        for (long long end = nt_now_ms() + 10000; i == 0 && pt_worker_received(f->w) < 1;) {
            assert_true(nt_now_ms() < end);
            nt_sleep_ms(5);
        }
    }
    pf_wait_msgs(f, "FAIR_REJECTED", 4);
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nr, 4);
    for (size_t i = 0; i < nr; i++) {
        assert_string_equal(r[i].subject, "fair.rejected.p");
        assert_memory_equal(r[i].error, "tenant_full:", 12);
    }
    pt_msgs_free(r, nr);
    cJSON *j = pf_stats(f, "{\"tenant\":\"p\"}", NULL);
    assert_int_equal(rejected_of(j, "p", "tenant_full"), 4);
    cJSON_Delete(j);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 4, 20000), 0);
}

/* Runs to as many tenant ids nothing lists, refused as unknown: each wrote
 * a "run refused" line (one a tenant a second), as many lines as runs. At
 * most 20 a second over all tenants now, the next line saying how many
 * went unlogged; every refusal is still published and counted. */
static void test_refusal_flood_logs_bounded(void **state)
{
    pf_fixture *f = *state;
    enum { N = 600 };
    int before = pt_log_count(&f->px, "run refused");
    long long t0 = nt_now_ms();
    for (int i = 0; i < N; i++) {
        char tenant[16];
        snprintf(tenant, sizeof tenant, "u-%d", i);
        assert_int_equal(pt_submit_async(&f->c, tenant, "{}", 2, NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    pf_wait_msgs(f, "FAIR_REJECTED", N);
    long long secs = (nt_now_ms() - t0) / 1000 + 1;
    cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
    assert_int_equal(pf_num(j, "tenants_total"), 0);
    cJSON_Delete(j);
    nt_sleep_ms(200);      /* the log is written as it goes; let it land */
    int lines = pt_log_count(&f->px, "run refused") - before;
    fprintf(stderr, "%d refusals to new tenant ids in about %lld s: %d log lines\n", N, secs,
            lines);
    assert_true(lines >= 1);
    assert_true(lines <= 20 * (secs + 1));
}

/* A completion past 4096 bytes is refused unread, and its copy on the
 * rejected subject goes without its body: a flood of them (anyone may
 * send one, up to max_payload) fills that stream no faster than short
 * ones. */
static void test_long_completion_copied_without_body(void **state)
{
    pf_fixture *f = *state;
    enum { LEN = 200000 };
    char *body = malloc(LEN + 1);
    assert_non_null(body);
    int k = snprintf(body, LEN, "{\"run_id\":\"c-9\",\"actual_tokens\":5,\"status\":\"ok\","
                     "\"pad\":\"");
    memset(body + k, 'x', (size_t)(LEN - k - 2));
    memcpy(body + LEN - 2, "\"}", 3);
    pf_publish(f, "fair.done.a", body);
    free(body);
    pf_wait_msgs(f, "FAIR_REJECTED", 1);
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nr, 1);
    assert_string_equal(r[0].subject, "fair.rejected._invalid");
    assert_non_null(strstr(r[0].error, "at most 4096"));
    assert_non_null(strstr(r[0].error, "without its body"));
    assert_int_equal(r[0].len, 0);
    pt_msgs_free(r, nr);
}

static void test_bad_completions(void **state)
{
    pf_fixture *f = *state;
    const char run[] = "{\"run_id\":\"c-1\",\"est_tokens\":100}";
    assert_int_equal(pt_submit(&f->c, "a", run, strlen(run), NULL), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 1, 20000), 0);
    /* Repeated, malformed, unknown and absurd completions. A completion for
     * a run fairq never dispatched changes nothing, whatever it echoes, and
     * is copied to the rejected subject as an invalid one is. */
    pf_publish(f, "fair.done.a", "{\"run_id\":\"c-1\",\"actual_tokens\":100,\"status\":\"ok\"}");
    pf_publish(f, "fair.done.a", "not json at all");
    pf_publish(f, "fair.done.a", "{\"run_id\":\"c-1\",\"actual_tokens\":1e15,\"status\":\"ok\"}");
    pf_publish(f, "fair.done.a", "{\"run_id\":\"c-1\",\"actual_tokens\":5,\"status\":\"maybe\"}");
    pf_publish(f, "fair.done.bad%x", "{\"run_id\":\"c-1\",\"actual_tokens\":5,\"status\":\"ok\"}");
    pf_publish(f, "fair.done.a",
                 "{\"run_id\":\"nobody\",\"actual_tokens\":50,\"status\":\"ok\",\"est_tokens\":40}");
    pf_publish(f, "fair.done.a", "{\"run_id\":\"nobody-2\",\"actual_tokens\":50,\"status\":\"error\"}");
    /* The same unknown completion again: still unknown, not a duplicate,
     * since the first recorded nothing. */
    pf_publish(f, "fair.done.a",
                 "{\"run_id\":\"nobody\",\"actual_tokens\":50,\"status\":\"ok\",\"est_tokens\":40}");
    pf_wait_msgs(f, "FAIR_REJECTED", 7);
    long long end = nt_now_ms() + 10000;
    cJSON *j = NULL;
    while (nt_now_ms() < end) {
        cJSON_Delete(j);
        j = pf_stats(f, "", NULL);
        if (pf_overall(j, "completions_duplicate") + pf_overall(j, "completions_unheld") +
                pf_overall(j, "completions_unknown") >= 4)
            break;
        nt_sleep_ms(50);
    }
    assert_int_equal(pf_overall(j, "completions"), 1);
    assert_int_equal(pf_overall(j, "completions_duplicate"), 1);
    assert_int_equal(pf_overall(j, "completions_invalid"), 4);
    assert_int_equal(pf_overall(j, "completions_unheld"), 0);
    assert_int_equal(pf_overall(j, "completions_unknown"), 3);
    assert_int_equal(pf_overall(j, "in_flight"), 0);
    cJSON_Delete(j);
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nr, 7);
    for (size_t i = 0; i < nr; i++) {
        assert_string_equal(r[i].subject, "fair.rejected._invalid");
        assert_memory_equal(r[i].fsubject, "fair.done.", 10);
        assert_memory_equal(r[i].error, "invalid: invalid completion: ", 29);
    }
    pt_msgs_free(r, nr);
    /* Still serving. */
    const char good[] = "{\"run_id\":\"good-2\"}";
    assert_int_equal(pt_submit(&f->c, "good", good, strlen(good), NULL), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 2, 20000), 0);
}

/* A completion for a run that is queued, not dispatched yet, is a worker's
 * bug: refused as invalid, it changes nothing, and the run is dispatched
 * later as any other. (It was taken for a run dispatched before a restart,
 * reconciled, and its run id remembered as completed, so the run itself was
 * refused as a duplicate when its turn came.) */
static void test_completion_of_queued_run(void **state)
{
    pf_fixture *f = *state;
    /* p may have one run in flight: the worker holds r-0, r-1 waits. */
    pt_worker_hold(f->w, true);
    const char q0[] = "{\"run_id\":\"r-0\"}", q1[] = "{\"run_id\":\"r-1\"}";
    assert_int_equal(pt_submit(&f->c, "p", q0, strlen(q0), NULL), 0);
    assert_int_equal(pt_submit(&f->c, "p", q1, strlen(q1), NULL), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    /* r-1 must be held: a completion for a run fairq has not fetched yet
     * is one for a run it does not know. */
    long long end = nt_now_ms() + 10000;
    long queued = 0;
    while (queued != 1 && nt_now_ms() < end) {
        cJSON *j = pf_stats(f, "{\"tenant\":\"p\"}", NULL);
        queued = pf_num(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0),
                        "queued_runs");
        cJSON_Delete(j);
        if (queued != 1)
            nt_sleep_ms(20);
    }
    assert_int_equal(queued, 1);
    pf_publish(f, "fair.done.p",
               "{\"run_id\":\"r-1\",\"actual_tokens\":50,\"status\":\"ok\",\"est_tokens\":40}");
    pf_wait_msgs(f, "FAIR_REJECTED", 1);
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nr, 1);
    assert_string_equal(r[0].subject, "fair.rejected._invalid");
    assert_string_equal(r[0].fsubject, "fair.done.p");
    assert_non_null(strstr(r[0].error, "invalid: invalid completion: run_id r-1 is queued"));
    pt_msgs_free(r, nr);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 2, 20000), 0);
    pf_assert_each_dispatched_once(f, 2);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "completions_invalid"), 1);
    assert_int_equal(pf_overall(j, "completions_unheld"), 0);
    assert_int_equal(pf_overall(j, "rejected"), 0);
    cJSON_Delete(j);
}

static void test_overload_admission(void **state)
{
    pf_fixture *f = *state;
    /* Two slots and 20 ms a run: about 100 runs, 100,000 tokens a second.
     * A flood of 1000 runs would wait ten seconds: past max_wait_ms
     * (300 ms) it is refused once the drain rate is known, while a quiet
     * tenant's single run, with little ahead of it in DRR order, is let in. */
    for (int i = 0; i < 1000; i++) {
        char b[32];
        snprintf(b, sizeof b, "{\"run_id\":\"f-%d\"}", i);
        assert_int_equal(pt_submit_async(&f->c, "flood", b, strlen(b), NULL), 0);
        if (i == 100) {
            assert_int_equal(pt_submit_flush(&f->c), 0);
            nt_sleep_ms(1500);     /* the drain rate is measured meanwhile */
        }
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    const char quiet[] = "{\"run_id\":\"q-1\"}";
    assert_int_equal(pt_submit(&f->c, "quiet", quiet, strlen(quiet), NULL), 0);
    nt_sleep_ms(1000);
    cJSON *j = pf_stats(f, "", NULL);
    long rejected = pf_overall(j, "rejected");
    assert_int_equal(rejected_of(j, "flood", "overload"), rejected);
    cJSON_Delete(j);
    fprintf(stderr, "overload: %ld of 1000 flood runs refused past max_wait_ms\n", rejected);
    assert_true(rejected > 500);
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    for (size_t i = 0; i < nr; i++) {
        assert_string_equal(r[i].subject, "fair.rejected.flood");
        assert_memory_equal(r[i].error, "overload:", 9);
        /* each states the wait it was refused for, past max_wait_ms, in
         * Fair-Wait-Ms and in its sentence (docs/protocol.md section 4) */
        long wait = strtol(r[i].wait_ms, NULL, 10);
        if (wait <= 300)
            fail_msg("refusal %zu: Fair-Wait-Ms '%s' (%s)", i, r[i].wait_ms, r[i].error);
        char want[160];
        snprintf(want, sizeof want, "overload: the estimated wait of %ld ms exceeds "
                 "scheduler.max_wait_ms (300 ms)", wait);
        assert_string_equal(r[i].error, want);
    }
    pt_msgs_free(r, nr);
    /* The quiet tenant's run was admitted and served. */
    long long end = nt_now_ms() + 10000;
    bool served = false;
    while (!served && nt_now_ms() < end) {
        for (size_t i = 0; i < pt_worker_received(f->w) && !served; i++)
            served = strcmp(pt_worker_seen(f->w, i).run_id, "q-1") == 0;
        nt_sleep_ms(20);
    }
    assert_true(served);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_submits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_completions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusal_flood_logs_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_completion_copied_without_body, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_completion_of_queued_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overload_admission, setup_overload, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
