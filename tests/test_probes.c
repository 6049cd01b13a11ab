/* test_probes.c -- unit tests of the probes: readiness from the published state at a given time, and snapshots handed from the loop to a scrape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "probes.h"

static uint64_t clock_ms;

static uint64_t fake_now(void)
{
    return clock_ms;
}

static int setup(void **state)
{
    fq_probes *pr = NULL;
    clock_ms = 10000;
    assert_int_equal(fq_probes_create(&pr, 0, fake_now), FQ_OK);
    *state = pr;
    return 0;
}

static int teardown(void **state)
{
    fq_probes_destroy(*state);
    return 0;
}

static enum fq_ready_reason ready_at(fq_probes *pr, uint64_t now, char *why)
{
    return fq_probes_ready_state(pr, now, why, 256);
}

/* Starting, standing by, leading with a fresh lease, stale, stalled. */
static void test_readiness(void **state)
{
    fq_probes *pr = *state;
    char why[256];
    assert_int_equal(ready_at(pr, 1000, why), FQ_READY_STARTING);
    assert_string_equal(why, "connecting to NATS");
    fq_probes_phase(pr, FQ_PHASE_STANDBY);
    assert_int_equal(ready_at(pr, 1000, why), FQ_READY_STARTING);
    assert_string_equal(why, "standing by: cannot read the leader lease");
    fq_probes_lease(pr, 0, 0, "other:1");
    assert_int_equal(ready_at(pr, 1000, why), FQ_READY_STANDBY);
    assert_string_equal(why, "standby: other:1 holds the leader lease");
    char text[256];
    assert_true(fq_probes_ready(text, sizeof text, pr));
    /* With partitions, owning none: a standby, ready, saying who holds
     * them (issue 12 point 4); with its lease not fresh, as it holds none. */
    fq_probes_owners(pr, "the 8 partitions are held by rep-a (4), rep-b (4)");
    assert_int_equal(ready_at(pr, 1000, why), FQ_READY_STANDBY);
    assert_string_equal(why, "standby: owns no partition; the 8 partitions are held by "
                             "rep-a (4), rep-b (4)");
    assert_true(fq_probes_ready(text, sizeof text, pr));
    fq_probes_owners(pr, "");
    /* Leading: ready while fresh, not once the lease is stale. */
    fq_probes_phase(pr, FQ_PHASE_SERVING);
    fq_probes_lease(pr, 3500, 1000, NULL);
    assert_int_equal(ready_at(pr, 3499, why), FQ_READY_OK);
    assert_string_equal(why, "");
    assert_int_equal(ready_at(pr, 3500, why), FQ_READY_LEASE_STALE);
    assert_non_null(strstr(why, "last renewed 2500 ms ago"));
    /* Failing writes make it not ready, dispatches first. */
    assert_false(fq_probes_stall(pr, FQ_STALL_JOURNAL, true, 10077));
    assert_true(fq_probes_stall(pr, FQ_STALL_JOURNAL, true, 10077));
    assert_int_equal(ready_at(pr, 2000, why), FQ_READY_JOURNAL_STALLED);
    assert_non_null(strstr(why, "js_err 10077"));
    fq_probes_stall(pr, FQ_STALL_DISPATCH, true, 10023);
    assert_true(fq_probes_stalled(pr, FQ_STALL_DISPATCH));
    assert_int_equal(ready_at(pr, 2000, why), FQ_READY_DISPATCH_STALLED);
    assert_true(fq_probes_stall(pr, FQ_STALL_DISPATCH, false, 0));
    assert_true(fq_probes_stall(pr, FQ_STALL_JOURNAL, false, 0));
    assert_int_equal(ready_at(pr, 2000, why), FQ_READY_OK);
    fq_probes_phase(pr, FQ_PHASE_CONSUMERS);
    assert_int_equal(ready_at(pr, 2000, why), FQ_READY_CONSUMERS);
    fq_probes_phase(pr, FQ_PHASE_STOPPING);
    assert_int_equal(ready_at(pr, 2000, why), FQ_READY_STOPPING);
    clock_ms = 2000;
    assert_false(fq_probes_ready(text, sizeof text, pr));
}

static double value_of(const fq_buf *b, const char *series)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", series);
    const char *at = strstr(b->p, key);
    assert_non_null(at);
    double v = 0;
    assert_int_equal(sscanf(at + strlen(key), "%lf", &v), 1);
    return v;
}

/* A scrape shows the newest published snapshot, never the one being
 * filled, and the readiness of its moment. */
static void test_snapshots_hand_over(void **state)
{
    fq_probes *pr = *state;
    fq_probes_phase(pr, FQ_PHASE_SERVING);
    fq_probes_lease(pr, clock_ms + 1000, clock_ms - 200, NULL);
    fq_probes_filling(pr)->all.submitted_runs = 5;
    fq_probes_publish(pr);
    fq_metrics_snapshot *next = fq_probes_filling(pr);
    fq_metrics_snapshot_clear(next);
    next->all.submitted_runs = 9;       /* filling: not shown yet */
    fq_buf b = {0};
    assert_int_equal(fq_probes_metrics(&b, pr), FQ_OK);
    assert_true(value_of(&b, "fairq_submitted_runs_total") == 5);
    assert_true(value_of(&b, "fairq_ready{reason=\"ready\"}") == 1);
    assert_true(value_of(&b, "fairq_lease_age_seconds") == 0.2);
    fq_probes_publish(pr);
    fq_buf_reset(&b);
    assert_int_equal(fq_probes_metrics(&b, pr), FQ_OK);
    assert_true(value_of(&b, "fairq_submitted_runs_total") == 9);
    /* Scraped again with no pass between: the same text. */
    fq_buf_reset(&b);
    assert_int_equal(fq_probes_metrics(&b, pr), FQ_OK);
    assert_true(value_of(&b, "fairq_submitted_runs_total") == 9);
    fq_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_readiness, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshots_hand_over, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
