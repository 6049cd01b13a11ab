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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forged_records_at_restart, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
