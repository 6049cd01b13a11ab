/* it_proxy_journal.c -- the runs journal read back at a restart: forged records refused and counted, adoption bounded by the window. */
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

#define WINDOW 4
#define PHANTOMS 64

static const char yaml[] =
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 4\n"
    "plans:\n  - name: free\n    weight: 1\n";

static int setup(void **state)
{
    return pf_setup(state, yaml, NULL);
}

static int teardown(void **state)
{
    pf_teardown(state, true);
    return 0;
}

static long long unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The stats row of one tenant. */
static cJSON *tenant_row(pf_fixture *f, const char *tenant, cJSON **reply)
{
    char req[128];
    snprintf(req, sizeof req, "{\"tenant\":\"%s\"}", tenant);
    *reply = pf_stats(f, req, NULL);
    cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(*reply, "tenants"), 0);
    assert_non_null(row);
    return row;
}

/* The stats reply for one tenant, whose "tenants" is empty if it is not
 * known. */
static cJSON *tenant_row_or_null(pf_fixture *f, const char *tenant, cJSON **reply)
{
    char req[128];
    snprintf(req, sizeof req, "{\"tenant\":\"%s\"}", tenant);
    *reply = pf_stats(f, req, NULL);
    return *reply;
}

static long tenant_num(pf_fixture *f, const char *tenant, const char *key)
{
    cJSON *j;
    long v = pf_num(tenant_row(f, tenant, &j), key);
    cJSON_Delete(j);
    return v;
}

/* Stop the proxy (it releases its lease) and start it again. */
static void restart(pf_fixture *f, int nth)
{
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", nth, 15000), 0);
    /* Its admin subscription may reach the server a moment after the line:
     * until then a request has no responders. */
    char *r = NULL;
    for (int i = 0; i < 50 && !(r = pt_stats(&f->c)); i++)
        nt_sleep_ms(100);
    assert_non_null(r);
    free(r);
}

/* Anyone allowed to publish to the journal's subject forges 64 flight
 * records and a handful of bad ones. At the restart the phantoms fill the
 * window only up to its limit, the rest are expired at once (and a late
 * completion still reconciles one, once), and every bad record is refused
 * and counted. */
static void test_forged_records_at_restart(void **state)
{
    pf_fixture *f = *state;
    long long now = unix_ms();
    size_t cap = 64 * 1024, len = 0;
    char *msg = malloc(cap);
    assert_non_null(msg);
    len += (size_t)snprintf(msg + len, cap - len, "{\"v\":1,\"entries\":[");
    for (int i = 0; i < PHANTOMS; i++)
        len += (size_t)snprintf(msg + len, cap - len,
                                "{\"st\":\"flight\",\"t\":\"ph\",\"r\":\"p-%d\",\"e\":100,\"d\":0,"
                                "\"s\":0,\"at\":%lld},", i, now);
    /* refused: no st (once taken for a done record), an estimate of 1e30
     * (once cast to an unsigned), a type not known, a wrong type, a tenant
     * that is a number */
    len += (size_t)snprintf(msg + len, cap - len,
                            "{\"t\":\"ph\",\"r\":\"p-1\",\"s\":0,\"at\":1},"
                            "{\"st\":\"flight\",\"t\":\"ph\",\"r\":\"x-1\",\"e\":1e30,\"d\":0,"
                            "\"s\":0,\"at\":%lld},"
                            "{\"st\":\"teleport\",\"t\":\"ph\",\"r\":\"x-2\",\"at\":1},"
                            "{\"st\":\"flight\",\"t\":\"ph\",\"r\":\"x-3\",\"e\":\"100\",\"d\":0,"
                            "\"s\":0,\"at\":%lld},"
                            "{\"st\":\"done\",\"t\":5,\"r\":\"p-2\",\"s\":0,\"at\":1}]}",
                            now, now);
    assert_true(len < cap);
    pf_publish(f, "fairq.runs", msg);
    free(msg);
    pf_publish(f, "fairq.runs", "not a batch");
    pf_publish(f, "fairq.runs", "{\"v\":1,\"entries\":[{\"st\":\"debt\",\"t\":\"ph\",\"df\":\"-5\","
                                "\"at\":1}]}");
    restart(f, 2);
    assert_int_equal(pt_log_count(&f->px, "journal records refused"), 1);

    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "journal_refused"), 7);
    assert_int_equal(pf_overall(j, "adopted"), WINDOW);
    assert_int_equal(pf_overall(j, "in_flight"), WINDOW);
    assert_int_equal(pf_overall(j, "expired"), PHANTOMS - WINDOW);
    cJSON_Delete(j);

    /* The phantoms hold the window up to its limit, not past it: a real
     * run waits, and goes as soon as one of them completes. */
    assert_int_equal(pt_submit(&f->c, "real", "{\"run_id\":\"real-1\"}", 19, NULL), 0);
    nt_sleep_ms(300);
    assert_int_equal(tenant_num(f, "real", "queued_runs"), 1);
    pf_publish(f, "fair.done.ph", "{\"run_id\":\"p-0\",\"actual_tokens\":100,\"status\":\"ok\"}");
    long dispatched = 0;
    for (int i = 0; i < 100 && dispatched < 1; i++, nt_sleep_ms(50))
        dispatched = tenant_num(f, "real", "dispatched_runs");
    assert_int_equal(dispatched, 1);

    /* An expired phantom's late completion reconciles once. */
    pf_publish(f, "fair.done.ph", "{\"run_id\":\"p-10\",\"actual_tokens\":150,\"status\":\"ok\"}");
    pf_publish(f, "fair.done.ph", "{\"run_id\":\"p-10\",\"actual_tokens\":150,\"status\":\"ok\"}");
    long completed = 0;
    for (int i = 0; i < 100 && completed < 2; i++, nt_sleep_ms(50))
        completed = tenant_num(f, "ph", "completed_runs");
    assert_int_equal(completed, 2);
    nt_sleep_ms(200);
    assert_int_equal(tenant_num(f, "ph", "deficit"), -50);
    j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "completions_duplicate"), 1);
    assert_int_equal(pf_overall(j, "journal_refused"), 7);
    cJSON_Delete(j);
}

/* ---- debts ---------------------------------------------------------------- */

#define DEBTORS 40

/* Every run costs twice its estimate: each tenant is left in debt. */
static uint64_t overrun(void *arg, const char *tenant, uint32_t est)
{
    (void)arg;
    (void)tenant;
    return 2ull * est;
}

/* Completed run ids and their journal are kept 2 s (the duplicate window
 * and the run timeout), so debt records are written again every second. */
#define DEBT_YAML(forget)                                                                    \
    "scheduler:\n  default_plan: free\n  debt_forget_ms: " forget "\n"                      \
    "streams:\n  duplicate_window_ms: 1000\n"                                                \
    "window:\n  max_in_flight: 64\n  run_timeout_ms: 2000\n"                                \
    "estimates:\n  default_tokens: 300\n"                                                    \
    "plans:\n  - name: free\n    weight: 1\n"

static int setup_debt_kept(void **state)
{
    pt_worker_opts wo = {.concurrency = 8, .service_ms = 1, .actual = overrun};
    return pf_setup(state, DEBT_YAML("3600000"), &wo);
}

static int setup_debt_forgotten(void **state)
{
    pt_worker_opts wo = {.concurrency = 8, .service_ms = 1, .actual = overrun};
    return pf_setup(state, DEBT_YAML("1000"), &wo);
}

/* Debt records of tenant in the journal stream. */
static int debt_records(pf_fixture *f, const char *tenant)
{
    char needle[128];
    snprintf(needle, sizeof needle, "\"st\":\"debt\",\"t\":\"%s\"", tenant);
    return pf_journal_count(f, needle);
}

/* Wait until the stats say overall.key == want, up to timeout_ms; returns
 * the last value. */
static long wait_overall(pf_fixture *f, const char *key, long want, int timeout_ms)
{
    long v = -1;
    for (int waited = 0; waited <= timeout_ms; waited += 100, nt_sleep_ms(100)) {
        cJSON *j = pf_stats(f, "", NULL);
        v = pf_overall(j, key);
        cJSON_Delete(j);
        if (v == want)
            break;
    }
    return v;
}

static long tenants_total(pf_fixture *f)
{
    cJSON *j = pf_stats(f, "", NULL);
    long v = pf_num(j, "tenants_total");
    cJSON_Delete(j);
    return v;
}

/* A tenant's debt survives a restart (it was lost at every restart: the
 * journal restored runs, not deficits), and its record is written again
 * while it lasts, so the journal's short retention does not age it out. */
static void test_debt_survives_restart(void **state)
{
    pf_fixture *f = *state;
    pf_submit_runs(f, 0, 3, 3);
    assert_int_equal(pt_worker_wait_completed(f->w, 3, 20000), 0);
    long before[3];
    char tenant[16];
    for (int i = 0; i < 3; i++) {
        snprintf(tenant, sizeof tenant, "t%d", i);
        long d = 0;
        for (int k = 0; k < 50 && d >= 0; k++, nt_sleep_ms(50))
            d = tenant_num(f, tenant, "deficit");
        before[i] = d;
        assert_true(before[i] < 0);
    }
    /* idle debtors: their records are refreshed, each second here */
    nt_sleep_ms(2500);
    assert_true(debt_records(f, "t0") >= 2);
    restart(f, 2);
    for (int i = 0; i < 3; i++) {
        snprintf(tenant, sizeof tenant, "t%d", i);
        assert_int_equal(tenant_num(f, tenant, "deficit"), before[i]);
    }
    /* The submits inherited at each start: FAIR_SUBMIT's last sequence as
     * the server said once the consumer was made, not a time (at the first
     * start 0 to 3, as the runs were submitted before its answer or after;
     * at the restart 3). */
    assert_int_equal(pt_log_wait_n(&f->px, "up_to_seq=", 2, 10000), 0);
    assert_int_equal(pt_log_wait(&f->px, "up_to_seq=3", 10000), 0);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "debts_forgiven"), 0);
    assert_int_equal(pf_overall(j, "journal_refused"), 0);
    cJSON_Delete(j);
}

/* Debt has a bounded life: tenants left in debt are forgiven after
 * scheduler.debt_forget_ms holding nothing, then forgotten, and the
 * tenant count returns to its baseline, also across a restart. */
static void test_debts_forgiven_then_forgotten(void **state)
{
    pf_fixture *f = *state;
    assert_int_equal(tenants_total(f), 0);
    pf_submit_runs(f, 0, DEBTORS, DEBTORS);
    assert_int_equal(pt_worker_wait_completed(f->w, DEBTORS, 20000), 0);
    assert_int_equal(wait_overall(f, "debts_forgiven", DEBTORS, 15000), DEBTORS);
    long n = -1;
    for (int waited = 0; waited < 15000 && n != 0; waited += 100, nt_sleep_ms(100))
        n = tenants_total(f);
    assert_int_equal(n, 0);
    /* the journal says 0 for each: a restart brings no debt back, and the
     * tenants its flight records name go again */
    restart(f, 2);
    for (int i = 0; i < DEBTORS; i += 13) {
        char tenant[16];
        snprintf(tenant, sizeof tenant, "t%d", i);
        cJSON *j;
        cJSON *row = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(tenant_row_or_null(f, tenant, &j), "tenants"), 0);
        if (row)
            assert_int_equal(pf_num(row, "deficit"), 0);
        cJSON_Delete(j);
    }
    n = -1;
    for (int waited = 0; waited < 15000 && n != 0; waited += 100, nt_sleep_ms(100))
        n = tenants_total(f);
    assert_int_equal(n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forged_records_at_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_debt_survives_restart, setup_debt_kept, teardown),
        cmocka_unit_test_setup_teardown(test_debts_forgiven_then_forgotten, setup_debt_forgotten,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
