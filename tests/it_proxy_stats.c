/* it_proxy_stats.c -- fair.admin.stats with thousands of tenants: the reply fits max_payload and pages through them all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "opstest.h"
#include "proxy.h"
#include "proxyfixture.h"

/* Enough tenants that the whole snapshot is a few times max_payload. */
#define NTENANTS 5000

/* Tenants with /metrics series of their own; the rest fold into _other. */
#define SERIES 100

/* A window of one and no worker: the first run stays in flight and every
 * other tenant's run stays queued, and old after a second. The leading
 * indented key extends the http mapping of the file's header. */
static const char yaml[] =
    "  max_tenant_series: 100\n"
    "log:\n  queue_age_warn_ms: 1000\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 1\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    if (pf_setup(state, yaml, NULL) != 0)
        return -1;
    pf_fixture *f = *state;
    for (int i = 0; i < NTENANTS; i++) {
        char tenant[16], body[64];
        snprintf(tenant, sizeof tenant, "t%05d", i);
        int n = snprintf(body, sizeof body, "{\"est_tokens\":%d}", 1 + i % 97);
        if (pt_submit_async(&f->c, tenant, body, (size_t)n, NULL) != 0)
            return -1;
    }
    if (pt_submit_flush(&f->c) != 0)
        return -1;
    long long end = nt_now_ms() + 30000;
    while (nt_now_ms() < end) {
        char *s = pt_stats_req(&f->c, "{\"limit\":0}", NULL);
        cJSON *j = s ? cJSON_Parse(s) : NULL;
        free(s);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "overall");
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(o, "queued_runs");
        bool all = cJSON_IsNumber(q) && q->valuedouble == NTENANTS - 1;
        cJSON_Delete(j);
        if (all)
            return 0;
        nt_sleep_ms(50);
    }
    fprintf(stderr, "the proxy did not queue %d runs in time\n", NTENANTS - 1);
    return -1;
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* A reply for every request, within max_payload; pages in rank order cover
 * every tenant exactly once. */
static void test_pages_fit(void **state)
{
    pf_fixture *f = *state;
    char *seen = calloc(NTENANTS, 1);
    assert_non_null(seen);
    long offset = 0, pages = 0, prev_tokens = -1, covered = 0;
    bool more = true;
    while (more) {
        char req[64];
        snprintf(req, sizeof req, offset ? "{\"offset\":%ld}" : "", offset);
        size_t len = 0;
        cJSON *j = pf_stats(f, req, &len);
        assert_true((long)len <= pf_overall(j, "max_payload"));
        assert_int_equal(pf_num(j, "tenants_total"), NTENANTS);
        assert_int_equal(pf_num(j, "offset"), offset);
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "tenants"), *t;
        long returned = pf_num(j, "tenants_returned");
        assert_int_equal(cJSON_GetArraySize(ts), returned);
        assert_true(returned > 0);
        cJSON_ArrayForEach(t, ts) {
            const char *id = cJSON_GetObjectItemCaseSensitive(t, "tenant")->valuestring;
            int i = atoi(id + 1);
            assert_in_range(i, 0, NTENANTS - 1);
            assert_int_equal(seen[i], 0);
            seen[i] = 1;
            covered++;
            long tok = pf_num(t, "queued_tokens");
            /* Most queued tokens first, across page boundaries too. */
            assert_true(prev_tokens < 0 || tok <= prev_tokens);
            prev_tokens = tok;
        }
        more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "truncated"));
        if (more) {
            assert_int_equal(pf_num(j, "next_offset"), offset + returned);
            offset += returned;
        }
        cJSON_Delete(j);
        pages++;
    }
    /* The whole snapshot cannot fit one reply: a first page alone would
     * have been the old failure. */
    assert_true(pages >= 2);
    assert_int_equal(covered, NTENANTS);
    free(seen);
    cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
    assert_int_equal(pf_overall(j, "admin_reply_failures"), 0);
    cJSON_Delete(j);
}

static void test_one_tenant_and_limit(void **state)
{
    pf_fixture *f = *state;
    cJSON *j = pf_stats(f, "{\"tenant\":\"t04321\"}", NULL);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "tenants");
    assert_int_equal(cJSON_GetArraySize(ts), 1);
    const cJSON *t = cJSON_GetArrayItem(ts, 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(t, "tenant")->valuestring, "t04321");
    assert_int_equal(pf_num(t, "queued_tokens"), 1 + 4321 % 97);
    assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "truncated")));
    cJSON_Delete(j);

    j = pf_stats(f, "{\"limit\":3,\"offset\":10}", NULL);
    assert_int_equal(pf_num(j, "tenants_returned"), 3);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "truncated")));
    assert_int_equal(pf_num(j, "next_offset"), 13);
    cJSON_Delete(j);

    /* Past the end: an empty page, nothing more. */
    j = pf_stats(f, "{\"offset\":999999}", NULL);
    assert_int_equal(pf_num(j, "tenants_returned"), 0);
    assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "truncated")));
    cJSON_Delete(j);
}

/* http.max_tenant_series from the config bounds the scrape. */
static void test_series_limit(void **state)
{
    pf_fixture *f = *state;
    int port = ot_http_port(&f->px, 5000), status = 0;
    assert_true(port > 0);
    char *body = NULL, want[64];
    long long end = nt_now_ms() + 5000;
    snprintf(want, sizeof want, "\nfairq_tenants_folded %d\n", NTENANTS - SERIES);
    bool seen = false;
    while (!seen && nt_now_ms() < end) {
        free(body);
        body = NULL;
        assert_int_equal(ot_http_get(port, "/metrics", &status, &body), 0);
        assert_int_equal(status, 200);
        seen = strstr(body, want) != NULL;
        if (!seen)
            nt_sleep_ms(200);
    }
    if (!seen)
        fail_msg("no '%s' in the scrape", want + 1);
    free(body);
}

static void test_bad_requests(void **state)
{
    pf_fixture *f = *state;
    static const char *const bad[] = {"[1]", "{\"limit\":-1}", "{\"offset\":1.5}",
                                      "{\"limit\":\"3\"}", "{\"tenant\":7}", "{\"page\":1}",
                                      "{not json"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = pf_stats(f, bad[i], NULL);
        assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        assert_true(cJSON_IsString(e) && e->valuestring[0]);
        cJSON_Delete(j);
    }
}

/* Thousands of old queues: each tenant is logged once a minute at most, and
 * each second's sweep writes at most FQ_QUEUE_AGE_WARN_LINES tenant lines
 * and one line counting the rest. (A limiter of hashed slots logged the
 * tenants that shared a slot every second.) */
static void test_old_queue_warnings_bounded(void **state)
{
    pf_fixture *f = *state;
    assert_int_equal(pt_log_wait_n(&f->px, "msg=\"more tenant queues are old", 4, 15000), 0);
    FILE *in = fopen(f->px.log, "r");
    assert_non_null(in);
    char *seen = calloc(NTENANTS, 1), line[8192];
    assert_non_null(seen);
    long lines = 0, sums = 0;
    while (fgets(line, sizeof line, in)) {
        if (strstr(line, "msg=\"more tenant queues are old")) {
            sums++;
            continue;
        }
        const char *t = strstr(line, " tenant=t");
        if (!strstr(line, "msg=\"tenant queue is old\"") || !t)
            continue;
        int i = atoi(t + 9);
        assert_in_range(i, 0, NTENANTS - 1);
        if (seen[i]++)
            fail_msg("tenant t%05d was logged twice within a minute", i);
        lines++;
    }
    fclose(in);
    free(seen);
    /* The sweep being written may have its tenant lines without its sum,
     * and the first may have found only a few queues old yet. */
    assert_true(lines >= FQ_QUEUE_AGE_WARN_LINES * sums);
    assert_true(lines <= FQ_QUEUE_AGE_WARN_LINES * (sums + 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pages_fit),
        cmocka_unit_test(test_one_tenant_and_limit),
        cmocka_unit_test(test_series_limit),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_old_queue_warnings_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
