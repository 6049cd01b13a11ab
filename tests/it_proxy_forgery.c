/* it_proxy_forgery.c -- forged completions end to end: whoever may publish fair.done.<tenant> moves no deficit, uses no run id and grows nothing. */
/*
 * Every worker may publish completions on every tenant's subject. A
 * completion counts only for a run fairq dispatched and still remembers,
 * on that run's tenant's subject, and corrects the charge fairq made; each
 * test below is one way a forger used completions before that rule, shown
 * harmless, and the legitimate late completion, which must still count
 * once, across a restart too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "proxyfixture.h"

#define TIMEOUT_MS 1500

/* One slot, so that the dispatch order is DRR's alone; a short run timeout
 * for the late completions. */
static const char yaml[] =
    "scheduler:\n  default_plan: free\n  quantum_tokens: 1000\n"
    "window:\n  max_in_flight: 1\n  run_timeout_ms: 1500\n"
    "plans:\n  - name: free\n    weight: 1\n"
    "tenants:\n  - id: victim\n  - id: forger\n";

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = 1, .service_ms = 1};
    return pf_setup(state, yaml, &wo);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* The stats reply once overall.key is at least want, waiting up to 20 s. */
static cJSON *stats_when(pf_fixture *f, const char *key, long want)
{
    long long end = nt_now_ms() + 20000;
    for (;;) {
        cJSON *j = pf_stats(f, "", NULL);
        if (pf_overall(j, key) >= want)
            return j;
        cJSON_Delete(j);
        if (nt_now_ms() > end)
            fail_msg("overall.%s did not reach %ld", key, want);
        nt_sleep_ms(20);
    }
}

/* Completions the proxy has handled, whatever became of them. */
static long handled(const cJSON *j)
{
    static const char *const keys[] = {"completions", "completions_unheld",
                                       "completions_duplicate", "completions_invalid",
                                       "completions_unknown"};
    long n = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        n += pf_overall(j, keys[i]);
    return n;
}

/* The stats reply once the proxy has handled n completions, up to 20 s. */
static cJSON *stats_handled(pf_fixture *f, long n)
{
    long long end = nt_now_ms() + 20000;
    for (;;) {
        cJSON *j = pf_stats(f, "", NULL);
        if (handled(j) >= n)
            return j;
        cJSON_Delete(j);
        if (nt_now_ms() > end)
            fail_msg("the proxy did not handle %ld completions", n);
        nt_sleep_ms(20);
    }
}

/* tenant's field key in the stats. */
static long tenant_num(pf_fixture *f, const char *tenant, const char *key)
{
    char req[96];
    snprintf(req, sizeof req, "{\"tenant\":\"%s\"}", tenant);
    cJSON *j = pf_stats(f, req, NULL);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    assert_non_null(t);
    long v = pf_num(t, key);
    cJSON_Delete(j);
    return v;
}

static uint64_t stream_msgs(pf_fixture *f, const char *stream)
{
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, stream, NULL, NULL), NATS_OK);
    uint64_t n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
}

static void submit(pf_fixture *f, const char *tenant, const char *run_id, int est)
{
    char body[160];
    snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"est_tokens\":%d}", run_id, est);
    assert_int_equal(pt_submit(&f->c, tenant, body, strlen(body), NULL), 0);
}

static void complete(pf_fixture *f, const char *tenant, const char *run_id, long long actual,
                     long est)
{
    char subj[96], body[256];
    snprintf(subj, sizeof subj, "fair.done.%s", tenant);
    if (est)
        snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"actual_tokens\":%lld,\"status\":\"ok\","
                 "\"est_tokens\":%ld}", run_id, actual, est);
    else
        snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"actual_tokens\":%lld,"
                 "\"status\":\"ok\"}", run_id, actual);
    pf_publish(f, subj, body);
}

/* Both tenants known, nothing queued or in flight. */
static void warm_up(pf_fixture *f)
{
    submit(f, "forger", "warm-f", 1000);
    submit(f, "victim", "warm-v", 1000);
    assert_int_equal(pt_worker_wait_completed(f->w, 2, 20000), 0);
    cJSON_Delete(stats_when(f, "completions", 2));
}

/* Forged completions for runs never submitted, each echoing the largest
 * estimate and reporting nothing spent, gave the forger a million tokens
 * of credit apiece while its runs waited, and they then went ahead of its
 * neighbour's. */
static void test_forged_credit_lifts_nothing(void **state)
{
    pf_fixture *f = *state;
    warm_up(f);
    /* Both backlogged behind a held run. */
    pt_worker_hold(f->w, true);
    submit(f, "victim", "block", 1000);
    pf_wait_msgs(f, "FAIR_DISPATCH", 3);
    for (int i = 0; i < 10; i++) {
        char id[32];
        snprintf(id, sizeof id, "f-%d", i);
        submit(f, "forger", id, 1000);
        snprintf(id, sizeof id, "v-%d", i);
        submit(f, "victim", id, 1000);
    }
    cJSON_Delete(stats_when(f, "queued_runs", 20));
    long deficit = tenant_num(f, "forger", "deficit");
    for (int i = 0; i < 20; i++) {
        char id[32];
        snprintf(id, sizeof id, "forged-%d", i);
        complete(f, "forger", id, 0, 1000000);
    }
    cJSON *j = stats_handled(f, 22);
    assert_int_equal(tenant_num(f, "forger", "deficit"), deficit);
    assert_int_equal(tenant_num(f, "forger", "completed_runs"), 1);
    assert_int_equal(pf_overall(j, "completions_unknown"), 20);
    assert_int_equal(pf_overall(j, "completions_unheld"), 0);
    cJSON_Delete(j);

    /* DRR alternates them. */
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 23, 30000), 0);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    assert_int_equal(n, 23);
    int row = 0, longest = 0;
    for (size_t i = 3; i < n; i++) {
        row = strcmp(m[i].tenant, "forger") == 0 ? row + 1 : 0;
        longest = row > longest ? row : longest;
    }
    pt_msgs_free(m, n);
    fprintf(stderr, "forged credit: the forger's longest run of dispatches in a row: %d\n",
            longest);
    assert_true(longest <= 2);
}

/* One completion for a run the neighbour never had, reporting 10^12
 * tokens spent against an echoed million, put the neighbour deep in debt.
 * Nor does a completion count on another tenant's subject, or one with an
 * absurd count for a run that is the neighbour's. */
static void test_forged_debt_sinks_nobody(void **state)
{
    pf_fixture *f = *state;
    warm_up(f);
    long deficit = tenant_num(f, "victim", "deficit");
    long forger = tenant_num(f, "forger", "deficit");
    /* Past 100 x max_est_tokens: refused as invalid. At the bound: unknown. */
    complete(f, "victim", "ghost", 1000000000000LL, 1000000);
    complete(f, "victim", "ghost", 100000000LL, 1000000);
    cJSON *j = stats_handled(f, 4);
    assert_int_equal(tenant_num(f, "victim", "deficit"), deficit);
    assert_int_equal(pf_overall(j, "completions_invalid"), 1);
    assert_int_equal(pf_overall(j, "completions_unknown"), 1);
    cJSON_Delete(j);

    /* The victim's run in flight: a completion for it on the forger's
     * subject does not count, nor the forger's on the victim's subject. */
    pt_worker_hold(f->w, true);
    submit(f, "victim", "v-1", 1000);
    pf_wait_msgs(f, "FAIR_DISPATCH", 3);
    complete(f, "forger", "v-1", 0, 0);
    complete(f, "victim", "warm-f", 0, 0);
    complete(f, "victim", "v-1", 1000000000000LL, 0);
    j = stats_handled(f, 7);
    assert_int_equal(tenant_num(f, "victim", "in_flight"), 1);
    assert_int_equal(tenant_num(f, "forger", "deficit"), forger);
    assert_int_equal(pf_overall(j, "completions_invalid"), 2);
    assert_int_equal(pf_overall(j, "completions_unknown"), 3);
    assert_int_equal(pf_overall(j, "completions"), 2);
    cJSON_Delete(j);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, 3, 20000), 0);
    j = stats_when(f, "completions", 3);
    assert_int_equal(pf_overall(j, "completions_duplicate"), 0);
    cJSON_Delete(j);
}

/* Derived run ids (fq-<FAIR_SUBMIT created, s>-<seq>) are predictable from
 * the stream's info: completing the next ten in advance made the
 * neighbour's next ten submits duplicates. */
static void test_precompleted_ids_refuse_nothing(void **state)
{
    pf_fixture *f = *state;
    warm_up(f);
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_SUBMIT", NULL, NULL), NATS_OK);
    long long created = (long long)(si->Created / 1000000000);
    unsigned long long last = (unsigned long long)si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    for (unsigned long long k = 1; k <= 10; k++) {
        char id[64];
        snprintf(id, sizeof id, "fq-%lld-%llu", created, last + k);
        complete(f, "victim", id, 1, 1);
    }
    cJSON_Delete(stats_handled(f, 12));
    for (int i = 0; i < 10; i++) {
        char body[32];
        snprintf(body, sizeof body, "opaque %d", i);
        assert_int_equal(pt_submit(&f->c, "victim", body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_worker_wait_completed(f->w, 12, 20000), 0);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    assert_int_equal(n, 12);
    char want[64];
    snprintf(want, sizeof want, "fq-%lld-%llu", created, last + 10);
    assert_string_equal(m[11].run_id, want);
    pt_msgs_free(m, n);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "rejected"), 0);
    assert_int_equal(pf_overall(j, "completions_unknown"), 10);
    cJSON_Delete(j);
}

/* Forged completions to as many new tenant ids made as many tenants, never
 * forgotten, and each added a run id to the completed set and a record to
 * the journal. Now they are counted, and copied to the rejected subject
 * at most 100 a second. */
static void test_forged_flood_grows_nothing(void **state)
{
    pf_fixture *f = *state;
    enum { N = 5000 };
    warm_up(f);
    cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
    long tenants = pf_num(j, "tenants_total");
    cJSON_Delete(j);
    uint64_t journal = stream_msgs(f, "FAIRQ_RUNS");
    uint64_t rejected = stream_msgs(f, "FAIR_REJECTED");
    long long t0 = nt_now_ms();
    for (int i = 0; i < N; i++) {
        char subj[64], body[128];
        snprintf(subj, sizeof subj, "=fair.done.t-%d", i);
        snprintf(body, sizeof body,
                 "{\"run_id\":\"x-%d\",\"actual_tokens\":2,\"status\":\"ok\",\"est_tokens\":1}", i);
        assert_int_equal(pt_submit_async(&f->c, subj, body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    j = stats_handled(f, 2 + N);
    long long secs = (nt_now_ms() - t0) / 1000 + 2;
    assert_int_equal(pf_num(j, "tenants_total"), tenants);
    nt_sleep_ms(300);
    assert_int_equal(stream_msgs(f, "FAIRQ_RUNS"), journal);
    assert_int_equal(pf_overall(j, "completions_unknown"), N);
    long skipped = pf_overall(j, "completion_copies_skipped");
    cJSON_Delete(j);
    uint64_t copies = stream_msgs(f, "FAIR_REJECTED") - rejected;
    /* Every one is accounted for: copied, or counted as skipped. */
    assert_int_equal(copies + (uint64_t)skipped, N);
    fprintf(stderr, "forged flood: %d completions, %llu copied to FAIR_REJECTED in about %lld s\n",
            N, (unsigned long long)copies, secs);
    assert_true(copies >= 1);
    assert_true(copies <= (uint64_t)(100 * secs));
    /* Still serving, the ids of the flood free for their tenants. */
    submit(f, "t-7", "x-7", 10);
    assert_int_equal(pt_worker_wait_completed(f->w, 3, 20000), 0);
}

static long long unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The legitimate path: a run whose lease ran out still reconciles once
 * when its completion comes late, against the charge fairq made, and also
 * after a restart of the proxy, whether the run expired before it or
 * while no proxy ran, or its flight record has aged out of the journal
 * and only its expired record is left, within max(duplicate window,
 * run_timeout) of its expiry (ten minutes here). A repeat changes
 * nothing. */
static void test_late_completion_counts_once_across_restart(void **state)
{
    pf_fixture *f = *state;
    pt_worker_hold(f->w, true);
    submit(f, "victim", "late-1", 100);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
    submit(f, "victim", "late-2", 100);
    /* late-1 expires, so late-2 takes the slot; the proxy stops before
     * late-2 expires. */
    pf_wait_msgs(f, "FAIR_DISPATCH", 2);
    /* Two runs whose flight records have aged out: one expired a second
     * ago, one past the ten minutes. */
    char batch[512];
    long long now = unix_ms();
    snprintf(batch, sizeof batch,
             "{\"v\":1,\"entries\":["
             "{\"st\":\"expired\",\"t\":\"victim\",\"r\":\"aged-1\",\"e\":100,\"d\":0,"
             "\"s\":9001,\"at\":%lld},"
             "{\"st\":\"expired\",\"t\":\"victim\",\"r\":\"gone-1\",\"e\":100,\"d\":0,"
             "\"s\":9002,\"at\":%lld}]}", now - 1000, now - 600000 - 1000);
    pf_publish(f, "fairq.runs", batch);
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    nt_sleep_ms(TIMEOUT_MS + 200);
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    long deficit = tenant_num(f, "victim", "deficit");
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "in_flight"), 0);
    cJSON_Delete(j);

    /* Each spent 5000 over its estimate of 100: paid once each. The
     * echoed estimate is not what is corrected. */
    complete(f, "victim", "late-1", 5100, 1);
    complete(f, "victim", "late-2", 5100, 0);
    complete(f, "victim", "aged-1", 5100, 0);
    complete(f, "victim", "gone-1", 5100, 0);
    j = stats_handled(f, 4);
    assert_int_equal(tenant_num(f, "victim", "deficit"), deficit - 15000);
    assert_int_equal(pf_overall(j, "completions_unheld"), 3);
    assert_int_equal(pf_overall(j, "completions_unknown"), 1);
    cJSON_Delete(j);
    complete(f, "victim", "late-1", 5100, 0);
    complete(f, "victim", "late-2", 5100, 0);
    complete(f, "victim", "aged-1", 5100, 0);
    j = stats_handled(f, 7);
    assert_int_equal(tenant_num(f, "victim", "deficit"), deficit - 15000);
    assert_int_equal(pf_overall(j, "completions_duplicate"), 3);
    assert_int_equal(pf_overall(j, "completions_unheld"), 3);
    cJSON_Delete(j);
    /* A run id fairq held is still refused as a duplicate. */
    submit(f, "victim", "late-1", 100);
    pf_wait_msgs(f, "FAIR_REJECTED", 1);
    pt_worker_hold(f->w, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forged_credit_lifts_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_debt_sinks_nobody, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precompleted_ids_refuse_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_flood_grows_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_completion_counts_once_across_restart, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
