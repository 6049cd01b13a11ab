/* test_metrics.c -- the Prometheus renderer: families, values, folding into _other, escaping, skew, histograms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* ---- reading the text back ---- */

/* The value of the sample whose name and labels are exactly series
 * ("name{a=\"x\"}"), or NaN if there is no such line. */
static double value_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return NAN;
}

static int has_series(const char *text, const char *series)
{
    return !isnan(value_of(text, series));
}

/* Lines starting with prefix. */
static size_t count_lines(const char *text, const char *prefix)
{
    size_t c = 0, n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        c += strncmp(p, prefix, n) == 0;
    return c;
}

/* Structure every exposition must have: each family announced once by HELP
 * then TYPE, its samples right after, each sample named after the family
 * (histograms with their suffixes), label values properly quoted. */
static void assert_well_formed(const char *text)
{
    char family[128] = "", type[16] = "";
    char seen[128][128];
    size_t nseen = 0;
    const char *p = text;

    assert_true(text[strlen(text) - 1] == '\n');
    while (*p) {
        const char *eol = strchr(p, '\n');
        assert_non_null(eol);
        if (strncmp(p, "# HELP ", 7) == 0) {
            assert_int_equal(sscanf(p + 7, "%127s", family), 1);
            for (size_t i = 0; i < nseen; i++)
                assert_string_not_equal(seen[i], family);
            assert_true(nseen < 128);
            strcpy(seen[nseen++], family);
            const char *t = eol + 1;
            char tname[128];
            assert_int_equal(sscanf(t, "# TYPE %127s %15s", tname, type), 2);
            assert_string_equal(tname, family);
            p = strchr(t, '\n') + 1;
            continue;
        }
        assert_true(*p != '#');
        size_t fl = strlen(family);
        assert_int_equal(strncmp(p, family, fl), 0);
        const char *rest = p + fl;
        if (strcmp(type, "histogram") == 0) {
            if (strncmp(rest, "_bucket", 7) == 0) rest += 7;
            else if (strncmp(rest, "_sum", 4) == 0) rest += 4;
            else if (strncmp(rest, "_count", 6) == 0) rest += 6;
            else fail_msg("histogram sample without suffix: %.*s", (int)(eol - p), p);
        }
        if (*rest == '{') {
            rest++;
            while (*rest != '}') {
                while (*rest != '=') {
                    assert_true((*rest >= 'a' && *rest <= 'z') || *rest == '_');
                    rest++;
                }
                assert_int_equal(*++rest, '"');
                rest++;
                while (*rest != '"') {
                    assert_true(*rest != '\n');
                    if (*rest == '\\') {
                        rest++;
                        assert_non_null(strchr("\\\"n", *rest));
                    }
                    rest++;
                }
                rest++;
                if (*rest == ',')
                    rest++;
            }
            rest++;
        }
        assert_int_equal(*rest, ' ');
        char *end;
        strtod(rest + 1, &end);
        assert_ptr_equal(end, eol);
        p = eol + 1;
    }
}

static char *render(fq_metrics_snapshot *s)
{
    fq_buf b = {0};
    assert_int_equal(fq_metrics_render(&b, s), FQ_OK);
    assert_non_null(b.p);
    assert_well_formed(b.p);
    return b.p;
}

static fq_metrics_tenant *add(fq_metrics_snapshot *s, const char *id, const char *plan,
                              uint64_t queued, double age)
{
    fq_metrics_tenant *t = fq_metrics_snapshot_add(s);
    assert_non_null(t);
    snprintf(t->tenant, sizeof t->tenant, "%s", id);
    snprintf(t->plan, sizeof t->plan, "%s", plan);
    t->queued_runs = queued;
    t->queued_tokens = queued * 100;
    t->oldest_age_seconds = age;
    return t;
}

/* ---- tests ---- */

static void test_hist_buckets_are_upper_bounds(void **state)
{
    (void)state;
    fq_hist h = {0};
    fq_hist_observe(&h, 0);
    fq_hist_observe(&h, 1000);              /* exactly 1 ms: le="0.001" */
    fq_hist_observe(&h, 1001);
    fq_hist_observe(&h, 3600000000ULL);     /* exactly 1 h */
    fq_hist_observe(&h, 3600000001ULL);     /* past the last bound */
    assert_int_equal(h.bucket[0], 2);
    assert_int_equal(h.bucket[1], 1);
    assert_int_equal(h.bucket[FQ_HIST_BUCKETS - 1], 1);
    assert_int_equal(h.bucket[FQ_HIST_BUCKETS], 1);
    assert_int_equal(fq_hist_count(&h), 5);
    assert_int_equal(h.sum_us, 1000 + 1001 + 3600000000ULL + 3600000001ULL);
    for (size_t i = 1; i < FQ_HIST_BUCKETS; i++)
        assert_true(fq_hist_bounds_us[i] > fq_hist_bounds_us[i - 1]);
}

static void test_values_and_labels(void **state)
{
    (void)state;
    fq_metrics_snapshot *s;
    assert_int_equal(fq_metrics_snapshot_create(&s, 0), FQ_OK);
    assert_int_equal(s->max_tenant_series, FQ_METRICS_MAX_TENANT_SERIES);

    fq_metrics_tenant *a = add(s, "acme", "pro", 900, 12.5);
    a->weight = 3;
    a->source = FQ_SRC_OVERRIDE;
    a->deficit_tokens = -250;
    a->dispatched_runs = 40;
    a->charged_tokens = 4000;
    a->actual_tokens = 12000;
    a->estimate_error = 3.0;
    a->rejected[FQ_EFULL] = 7;
    a->rejected[FQ_EINVAL] = 2;
    fq_hist_observe(&a->submit_to_dispatch, 1500);
    fq_hist_observe(&a->submit_to_dispatch, 2 * 1000000);
    add(s, "beta", "free", 0, 0);   /* never dispatched, error unknown */

    s->all.in_flight_runs = 17;
    s->all.window_runs = 64;
    s->all.window_tokens = 0;
    s->all.nats_connected = true;
    s->all.nats_reconnects = 2;
    s->all.fetch_paused = true;
    s->all.submitted_runs = 950;
    s->all.redelivered_runs = 12;
    s->all.duplicates_acked = 4;
    s->all.dispatch_duplicates = 3;
    s->all.adopted_runs = 9;
    s->all.journal_refused_records = 65;
    s->all.debts_forgiven = 66;
    s->all.expired_forgotten_early = 67;
    s->all.completion_copies_skipped = 68;
    s->all.completions_deferred = 171;
    s->all.completions_early_applied = 172;
    s->all.redispatched = 173;
    s->all.done_unconfirmed_resent = 174;
    s->all.dispatch_unanswered = 175;
    s->all.refusals_repeated = 176;
    s->all.unowned = 177;
    s->all.possible_duplicates = 183;
    s->all.records_foreign = 178;
    s->all.parts_adopted = 179;
    s->all.parts_released = 180;
    s->all.released_queued = 181;
    s->all.released_dispatched = 182;
    s->all.admin_requests_too_long = 69;
    s->all.admin_requests_invalid = 70;
    s->all.subtenant_overflow = 71;
    s->all.index_only_runs = 300;
    s->all.body_reads = 310;
    s->all.body_lost = 1;
    s->all.completions[FQ_COMPLETION_HELD] = 40;
    s->all.completions[FQ_COMPLETION_UNHELD] = 6;
    s->all.completions[FQ_COMPLETION_DUPLICATE] = 5;
    s->all.completions[FQ_COMPLETION_INVALID] = 2;
    s->all.completions[FQ_COMPLETION_UNKNOWN] = 1;
    s->all.publish_failures = 7;
    s->all.dispatch_failures = 5;
    s->all.parked_tenants = 2;
    s->all.dispatch_stalled = true;
    s->all.refusals_unstored = 9;
    s->all.overrides_refused = 8;
    s->all.admin_reply_failures = 11;
    s->all.max_payload = 1048576;
    s->all.rejected_runs[FQ_EINVAL] = 5;     /* acme's 2 and 3 of tenants not known */
    s->all.rejected_runs[FQ_EFULL] = 7;

    char *t = render(s);
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"acme\",plan=\"pro\"}") == 900);
    assert_true(value_of(t, "fairq_tenant_queued_tokens{tenant=\"acme\",plan=\"pro\"}") == 90000);
    assert_true(value_of(t, "fairq_tenant_deficit_tokens{tenant=\"acme\",plan=\"pro\"}") == -250);
    assert_true(value_of(t, "fairq_tenant_oldest_queued_age_seconds{tenant=\"acme\",plan=\"pro\"}") == 12.5);
    assert_true(value_of(t, "fairq_tenant_actual_tokens_total{tenant=\"acme\",plan=\"pro\"}") == 12000);
    assert_true(value_of(t, "fairq_tenant_estimate_error_ratio{tenant=\"acme\",plan=\"pro\"}") == 3.0);
    assert_true(value_of(t, "fairq_tenant_weight{tenant=\"acme\",plan=\"pro\",source=\"override\"}") == 3);
    assert_true(value_of(t, "fairq_tenant_rejected_runs_total{tenant=\"acme\",plan=\"pro\",reason=\"tenant_full\"}") == 7);
    assert_true(value_of(t, "fairq_tenant_rejected_runs_total{tenant=\"acme\",plan=\"pro\",reason=\"invalid\"}") == 2);
    assert_int_equal(count_lines(t, "fairq_tenant_rejected_runs_total{"), 2);
    /* Histogram: cumulative buckets, +Inf equals the count, sum in seconds. */
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_bucket{tenant=\"acme\",plan=\"pro\",le=\"0.001\"}") == 0);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_bucket{tenant=\"acme\",plan=\"pro\",le=\"0.0025\"}") == 1);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_bucket{tenant=\"acme\",plan=\"pro\",le=\"2.5\"}") == 2);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_bucket{tenant=\"acme\",plan=\"pro\",le=\"3600\"}") == 2);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_bucket{tenant=\"acme\",plan=\"pro\",le=\"+Inf\"}") == 2);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_count{tenant=\"acme\",plan=\"pro\"}") == 2);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_sum{tenant=\"acme\",plan=\"pro\"}") == 2.0015);
    assert_int_equal(count_lines(t, "fairq_tenant_submit_to_dispatch_seconds_bucket{tenant=\"acme\""),
                     FQ_HIST_BUCKETS + 1);
    /* A tenant with nothing to say has its gauges, but no histogram and
     * no estimate error rather than a made-up one. */
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"beta\",plan=\"free\"}") == 0);
    assert_false(has_series(t, "fairq_tenant_estimate_error_ratio{tenant=\"beta\",plan=\"free\"}"));
    assert_int_equal(count_lines(t, "fairq_tenant_submit_to_dispatch_seconds_count{tenant=\"beta\""), 0);
    assert_true(value_of(t, "fairq_tenant_weight{tenant=\"beta\",plan=\"free\",source=\"default\"}") == 0);

    assert_true(value_of(t, "fairq_in_flight_runs") == 17);
    assert_true(value_of(t, "fairq_window_capacity_runs") == 64);
    assert_true(isinf(value_of(t, "fairq_window_capacity_tokens")));
    assert_true(value_of(t, "fairq_nats_connected") == 1);
    assert_true(value_of(t, "fairq_nats_reconnects_total") == 2);
    assert_true(value_of(t, "fairq_fetch_paused") == 1);
    assert_true(value_of(t, "fairq_tenants") == 2);
    assert_true(value_of(t, "fairq_tenants_active") == 1);
    assert_true(value_of(t, "fairq_tenants_folded") == 0);
    assert_true(value_of(t, "fairq_build_info{version=\"" FAIRQ_VERSION "\"}") == 1);
    assert_int_equal(count_lines(t, "fairq_tenant_queued_runs{tenant=\"_other\""), 0);
    /* The proxy's own counters, each under its name. */
    assert_true(value_of(t, "fairq_submitted_runs_total") == 950);
    assert_true(value_of(t, "fairq_redelivered_runs_total") == 12);
    assert_true(value_of(t, "fairq_duplicates_acked_total") == 4);
    assert_true(value_of(t, "fairq_dispatch_duplicates_total") == 3);
    assert_true(value_of(t, "fairq_adopted_runs_total") == 9);
    assert_true(value_of(t, "fairq_journal_refused_records_total") == 65);
    assert_true(value_of(t, "fairq_debts_forgiven_total") == 66);
    assert_true(value_of(t, "fairq_expired_forgotten_early_total") == 67);
    assert_true(value_of(t, "fairq_completion_copies_skipped_total") == 68);
    assert_true(value_of(t, "fairq_completions_deferred_total") == 171);
    assert_true(value_of(t, "fairq_completions_early_applied_total") == 172);
    assert_true(value_of(t, "fairq_redispatched_runs_total") == 173);
    assert_true(value_of(t, "fairq_done_unconfirmed_resent_runs_total") == 174);
    assert_true(value_of(t, "fairq_dispatch_unanswered_total") == 175);
    assert_true(value_of(t, "fairq_refusals_repeated_total") == 176);
    assert_true(value_of(t, "fairq_unowned_deliveries_total") == 177);
    assert_true(value_of(t, "fairq_possible_duplicate_dispatches_total") == 183);
    assert_true(value_of(t, "fairq_journal_foreign_records_total") == 178);
    assert_true(value_of(t, "fairq_partitions_adopted_total") == 179);
    assert_true(value_of(t, "fairq_partitions_released_total") == 180);
    assert_true(value_of(t, "fairq_released_runs_total{state=\"queued\"}") == 181);
    assert_true(value_of(t, "fairq_released_runs_total{state=\"dispatched\"}") == 182);
    assert_true(value_of(t, "fairq_admin_requests_too_long_total") == 69);
    assert_true(value_of(t, "fairq_admin_requests_invalid_total") == 70);
    assert_true(value_of(t, "fairq_subtenant_overflow_runs_total") == 71);
    assert_true(value_of(t, "fairq_index_only_runs") == 300);
    assert_true(value_of(t, "fairq_body_reads_total") == 310);
    assert_true(value_of(t, "fairq_body_lost_total") == 1);
    assert_true(value_of(t, "fairq_completions_total{outcome=\"held\"}") == 40);
    assert_true(value_of(t, "fairq_completions_total{outcome=\"unheld\"}") == 6);
    assert_true(value_of(t, "fairq_completions_total{outcome=\"duplicate\"}") == 5);
    assert_true(value_of(t, "fairq_completions_total{outcome=\"invalid\"}") == 2);
    assert_true(value_of(t, "fairq_completions_total{outcome=\"unknown\"}") == 1);
    assert_true(value_of(t, "fairq_rejected_runs_total{reason=\"invalid\"}") == 5);
    assert_true(value_of(t, "fairq_rejected_runs_total{reason=\"tenant_full\"}") == 7);
    /* A reason never seen has no series. */
    assert_int_equal(count_lines(t, "fairq_rejected_runs_total{reason=\"overload\"}"), 0);
    assert_int_equal(count_lines(t, "fairq_completions_total{"), FQ_COMPLETION__COUNT);
    assert_true(value_of(t, "fairq_publish_failures_total") == 7);
    assert_true(value_of(t, "fairq_dispatch_failures_total") == 5);
    assert_true(value_of(t, "fairq_parked_tenants") == 2);
    assert_true(value_of(t, "fairq_dispatch_stalled") == 1);
    assert_true(value_of(t, "fairq_refusals_unstored_total") == 9);
    assert_true(value_of(t, "fairq_overrides_refused_total") == 8);
    assert_true(value_of(t, "fairq_admin_reply_failures_total") == 11);
    assert_true(value_of(t, "fairq_nats_max_payload_bytes") == 1048576);
    free(t);

    /* Cleared and refilled, the snapshot renders only the new state. */
    fq_metrics_snapshot_clear(s);
    add(s, "gamma", "pro", 1, 1);
    t = render(s);
    assert_false(has_series(t, "fairq_tenant_queued_runs{tenant=\"acme\",plan=\"pro\"}"));
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"gamma\",plan=\"pro\"}") == 1);
    assert_true(value_of(t, "fairq_in_flight_runs") == 0);
    free(t);
    fq_metrics_snapshot_destroy(s);
    fq_metrics_snapshot_destroy(NULL);
}

/* Past the limit, tenants fold per plan into _other: sums for counts, the
 * maximum for ages, nothing for deficits, weights and estimate errors. */
/* How the proxy stands now: one series per reason, the one in force 1,
 * and the lease's age. */
static void test_ready_and_lease_age(void **state)
{
    (void)state;
    fq_buf b = {0};
    fq_metrics_render_ready(&b, FQ_READY_LEASE_STALE, 3100);
    assert_non_null(b.p);
    assert_well_formed(b.p);
    assert_int_equal(count_lines(b.p, "fairq_ready{"), FQ_READY__COUNT);
    assert_true(value_of(b.p, "fairq_ready{reason=\"lease_stale\"}") == 1);
    assert_true(value_of(b.p, "fairq_ready{reason=\"ready\"}") == 0);
    assert_true(value_of(b.p, "fairq_ready{reason=\"standby\"}") == 0);
    assert_true(value_of(b.p, "fairq_lease_age_seconds") == 3.1);
    fq_buf_reset(&b);
    fq_metrics_render_ready(&b, FQ_READY_STANDBY, 0);
    assert_true(value_of(b.p, "fairq_ready{reason=\"standby\"}") == 1);
    assert_true(value_of(b.p, "fairq_ready{reason=\"lease_stale\"}") == 0);
    assert_true(value_of(b.p, "fairq_lease_age_seconds") == 0);
    assert_string_equal(fq_ready_reason_name(FQ_READY_JOURNAL_STALLED), "journal_stalled");
    fq_buf_free(&b);
}

static void test_tenants_fold_into_other(void **state)
{
    (void)state;
    fq_metrics_snapshot *s;
    assert_int_equal(fq_metrics_snapshot_create(&s, 2), FQ_OK);
    add(s, "t1", "pro", 1, 1);
    add(s, "t2", "free", 2, 2);
    fq_metrics_tenant *f1 = add(s, "t3", "free", 3, 30);
    fq_metrics_tenant *f2 = add(s, "t4", "free", 4, 7);
    fq_metrics_tenant *f3 = add(s, "t5", "pro", 5, 5);
    fq_metrics_tenant *f4 = add(s, "_other", "free", 6, 6);   /* a real tenant of that name */
    f1->rejected[FQ_EOVERLOAD] = 1;
    f2->rejected[FQ_EOVERLOAD] = 2;
    f1->deficit_tokens = 10;
    f1->estimate_error = 2;
    f1->dispatched_runs = 10;
    f3->dispatched_runs = 5;
    f4->dispatched_runs = 1;
    fq_hist_observe(&f1->submit_to_dispatch, 100);
    fq_hist_observe(&f2->submit_to_dispatch, 100 * 1000000ULL);

    char *t = render(s);
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"t1\",plan=\"pro\"}") == 1);
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"t2\",plan=\"free\"}") == 2);
    assert_false(has_series(t, "fairq_tenant_queued_runs{tenant=\"t3\",plan=\"free\"}"));
    assert_int_equal(count_lines(t, "fairq_tenant_queued_runs{"), 4);
    assert_int_equal(count_lines(t, "fairq_tenant_queued_runs{tenant=\"_other\""), 2);
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"_other\",plan=\"free\"}") == 3 + 4 + 6);
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"_other\",plan=\"pro\"}") == 5);
    assert_true(value_of(t, "fairq_tenant_dispatched_runs_total{tenant=\"_other\",plan=\"free\"}") == 11);
    assert_true(value_of(t, "fairq_tenant_oldest_queued_age_seconds{tenant=\"_other\",plan=\"free\"}") == 30);
    assert_true(value_of(t, "fairq_tenant_rejected_runs_total{tenant=\"_other\",plan=\"free\",reason=\"overload\"}") == 3);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_count{tenant=\"_other\",plan=\"free\"}") == 2);
    assert_true(value_of(t, "fairq_tenant_submit_to_dispatch_seconds_bucket{tenant=\"_other\",plan=\"free\",le=\"0.001\"}") == 1);
    assert_int_equal(count_lines(t, "fairq_tenant_deficit_tokens{tenant=\"_other\""), 0);
    assert_int_equal(count_lines(t, "fairq_tenant_estimate_error_ratio{tenant=\"_other\""), 0);
    assert_int_equal(count_lines(t, "fairq_tenant_weight{tenant=\"_other\""), 0);
    assert_true(value_of(t, "fairq_tenants") == 6);
    assert_true(value_of(t, "fairq_tenants_folded") == 4);
    /* The skew counts every tenant, folded or not: ages 1,2,5,6,7,30. */
    assert_true(value_of(t, "fairq_queue_age_skew_seconds") == 30 - 5.5);
    free(t);
    fq_metrics_snapshot_destroy(s);
}

/* Tenants folded as they are filled render the same text as the same
 * tenants added and folded at render time, while the snapshot holds rows
 * only for the named ones and one per plan; cleared, it forgets them. */
static void test_fold_at_fill_renders_the_same(void **state)
{
    (void)state;
    fq_metrics_snapshot *all, *pre;
    assert_int_equal(fq_metrics_snapshot_create(&all, 2), FQ_OK);
    assert_int_equal(fq_metrics_snapshot_create(&pre, 2), FQ_OK);
    static const struct { const char *id, *plan; uint64_t queued; double age; } ts[] = {
        {"t1", "pro", 1, 1}, {"t2", "free", 2, 2}, {"t3", "free", 3, 30},
        {"t4", "free", 0, 0}, {"t5", "pro", 5, 5}, {"t6", "free", 6, 6},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        fq_metrics_tenant *a = add(all, ts[i].id, ts[i].plan, ts[i].queued, ts[i].age);
        a->rejected[FQ_EOVERLOAD] = i;
        a->dispatched_runs = 10 * i;
        a->deficit_tokens = -(int64_t)i;
        a->estimate_error = 1.5;
        fq_hist_observe(&a->submit_to_dispatch, 1000 * i * i);
        if (i < 2) {
            *add(pre, ts[i].id, ts[i].plan, 0, 0) = *a;
        } else {
            fq_metrics_tenant m = *a;
            snprintf(m.tenant, sizeof m.tenant, "ignored");
            assert_int_equal(fq_metrics_snapshot_fold(pre, &m), FQ_OK);
        }
    }
    assert_int_equal(pre->n_tenants, 2);
    assert_int_equal(pre->n_folded_rows, 2);
    assert_int_equal(pre->n_folded, 4);
    char *a = render(all), *b = render(pre);
    assert_string_equal(a, b);
    assert_true(value_of(b, "fairq_tenants") == 6);
    assert_true(value_of(b, "fairq_tenants_active") == 5);
    assert_true(value_of(b, "fairq_tenants_folded") == 4);
    assert_true(value_of(b, "fairq_tenant_queued_runs{tenant=\"_other\",plan=\"free\"}") == 9);
    /* Ages 1,2,30,5,6: median 5. */
    assert_true(value_of(b, "fairq_queue_age_skew_seconds") == 30 - 5);
    free(a);
    free(b);
    fq_metrics_snapshot_clear(pre);
    add(pre, "t9", "pro", 1, 1);
    b = render(pre);
    assert_true(value_of(b, "fairq_tenants") == 1);
    assert_true(value_of(b, "fairq_tenants_folded") == 0);
    assert_int_equal(count_lines(b, "fairq_tenant_dispatched_runs_total{tenant=\"_other\""), 0);
    free(b);
    fq_metrics_snapshot_destroy(all);
    fq_metrics_snapshot_destroy(pre);
}

/* Label values from config and clients are escaped; bytes that are not
 * UTF-8 become U+FFFD. */
static void test_label_escaping(void **state)
{
    (void)state;
    fq_metrics_snapshot *s;
    assert_int_equal(fq_metrics_snapshot_create(&s, 0), FQ_OK);
    add(s, "acme", "we\"ird\\plan\nx", 1, 0);
    add(s, "beta", "caf\xc3\xa9\xff", 1, 0);
    char *t = render(s);
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"acme\",plan=\"we\\\"ird\\\\plan\\nx\"}") == 1);
    assert_true(value_of(t, "fairq_tenant_queued_runs{tenant=\"beta\",plan=\"caf\xc3\xa9\xef\xbf\xbd\"}") == 1);
    free(t);
    fq_metrics_snapshot_destroy(s);
}

static void test_skew(void **state)
{
    (void)state;
    fq_metrics_snapshot *s;
    assert_int_equal(fq_metrics_snapshot_create(&s, 0), FQ_OK);
    assert_true(fq_metrics_queue_age_skew(s) == 0);
    add(s, "a", "p", 1, 10);
    assert_true(fq_metrics_queue_age_skew(s) == 0);     /* no peers */
    add(s, "idle", "p", 0, 99);                         /* nothing queued: ignored */
    add(s, "b", "p", 1, 1);
    add(s, "c", "p", 1, 2);
    assert_true(fq_metrics_queue_age_skew(s) == 10 - 2);
    add(s, "d", "p", 1, 4);                             /* even count: mean of the middle two */
    assert_true(fq_metrics_queue_age_skew(s) == 10 - 3);
    fq_metrics_snapshot_destroy(s);
}

static void test_set_info(void **state)
{
    (void)state;
    fq_metrics_tenant m;
    fq_tenant_info ti = {
        .id = "acme", .weight = 2, .deficit = -5, .queued = 3, .queued_tokens = 300,
        .in_flight = 4, .oldest_enqueued = 10000, .dispatched = 9, .charged_tokens = 900,
        .actual_tokens = 1800,
    };
    memset(&m, 0, sizeof m);
    fq_metrics_tenant_set_info(&m, &ti, 12500, 1e-3);
    assert_string_equal(m.tenant, "acme");
    assert_int_equal(m.weight, 2);
    assert_int_equal(m.deficit_tokens, -5);
    assert_int_equal(m.queued_runs, 3);
    assert_int_equal(m.queued_tokens, 300);
    assert_int_equal(m.in_flight_runs, 4);
    assert_true(fabs(m.oldest_age_seconds - 2.5) < 1e-9);
    assert_int_equal(m.dispatched_runs, 9);
    assert_int_equal(m.charged_tokens, 900);
    assert_int_equal(m.actual_tokens, 1800);
    ti.queued = 0;      /* empty queue: no age, whatever the stale time says */
    fq_metrics_tenant_set_info(&m, &ti, 12500, 1e-3);
    assert_true(m.oldest_age_seconds == 0);
}

/* A realistic state: odd names, folding, histograms, rejections. Written to
 * $FAIRQ_METRICS_SAMPLE when set, for tests/metrics_test.py to check with
 * the Prometheus parser; the tenants and plans it uses are listed there. */
static void test_sample(void **state)
{
    (void)state;
    static const char *const plans[] = {"free", "pro", "we\"ird\\plan\nx"};
    fq_metrics_snapshot *s;
    assert_int_equal(fq_metrics_snapshot_create(&s, 5), FQ_OK);
    for (int i = 0; i < 8; i++) {
        char id[16];
        snprintf(id, sizeof id, i == 0 ? "acme" : "tenant-%d_x", i);
        fq_metrics_tenant *t = add(s, id, plans[i % 3], (uint64_t)(i == 0 ? 900 : i), i == 0 ? 120 : i);
        t->weight = (uint32_t)(i % 3) + 1;
        t->source = (enum fq_policy_source)(i % 3);
        t->in_flight_runs = (uint64_t)i % 4;
        t->deficit_tokens = 500 - 200 * i;
        t->dispatched_runs = 100u * (uint64_t)i;
        t->charged_tokens = 1000u * (uint64_t)i;
        t->actual_tokens = 1100u * (uint64_t)i;
        t->estimate_error = 1.1;
        t->rejected[FQ_EFULL] = (uint64_t)i % 2;
        t->rejected[FQ_EINVAL] = i == 0 ? 3 : 0;
        for (uint64_t k = 0; k < (uint64_t)i * 10; k++)
            fq_hist_observe(&t->submit_to_dispatch, 300 * k * k);
    }
    s->all = (fq_metrics_overall){
        .in_flight_runs = 12, .in_flight_tokens = 12000, .window_runs = 64, .window_tokens = 0,
        .expired_leases = 1, .buffered_runs = 930, .buffered_bytes = 476160, .fetch_paused = false,
        .fetch_pauses = 0, .nats_connected = true, .nats_reconnects = 1, .config_reloads = 2,
        .config_reload_failures = 1, .invalid_subject_runs = 4, .lease_held = true,
        .submitted_runs = 1200, .redelivered_runs = 5, .duplicates_acked = 1,
        .dispatch_duplicates = 2, .adopted_runs = 3, .journal_refused_records = 64, .index_only_runs = 400, .body_reads = 410,
        .body_lost = 1, .completions = {1100, 40, 3, 2, 1}, .publish_failures = 6,
        .overrides_refused = 1, .admin_reply_failures = 1, .max_payload = 1048576,
        .rejected_runs = {[FQ_EINVAL] = 7, [FQ_EFULL] = 3},
    };
    fq_buf b = {0};
    assert_int_equal(fq_metrics_render(&b, s), FQ_OK);
    fq_metrics_render_ready(&b, FQ_READY_OK, 1200);     /* what a scrape appends */
    assert_well_formed(b.p);
    char *t = b.p;
    assert_true(value_of(t, "fairq_tenants_folded") == 3);

    const char *path = getenv("FAIRQ_METRICS_SAMPLE");
    if (path && *path) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(fputs(t, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
    }
    free(t);
    fq_metrics_snapshot_destroy(s);
}

/* Every byte of fq_metrics_overall belongs to one row of fq_overall_rows
 * (a field added without its row fails here), no stats key or labelled
 * sample is written twice, a family's rows follow each other, and every
 * row says how it folds across replicas (a row without a rule fails here):
 * a counter summed, a capacity not folded. */
static void test_overall_table_covers_every_field(void **state)
{
    (void)state;
    unsigned char owner[sizeof(fq_metrics_overall)];
    memset(owner, 0, sizeof owner);
    for (size_t i = 0; i < fq_overall_nrows; i++) {
        const fq_overall_row *r = &fq_overall_rows[i];
        size_t size = r->kind == FQ_OV_FLAG ? sizeof(bool)
                      : r->kind == FQ_OV_REASONS ? FQ__COUNT * sizeof(uint64_t)
                      : r->kind == FQ_OV_PARTS ? sizeof(fq_metrics_parts) : 8;
        assert_true(r->off + size <= sizeof owner);
        for (size_t k = 0; k < size; k++) {
            assert_int_equal(owner[r->off + k], 0);
            owner[r->off + k] = 1;
        }
        assert_true(r->stats_key || r->metric);
        assert_true(r->fold == FQ_FOLD_SUM || r->fold == FQ_FOLD_MAX || r->fold == FQ_FOLD_NONE);
        if (r->kind == FQ_OV_COUNTER || r->kind == FQ_OV_REASONS)
            assert_int_equal(r->fold, FQ_FOLD_SUM);
        if (r->kind == FQ_OV_CAPACITY)
            assert_int_equal(r->fold, FQ_FOLD_NONE);
        for (size_t j = 0; j < i; j++) {
            const fq_overall_row *q = &fq_overall_rows[j];
            if (r->stats_key && q->stats_key)
                assert_string_not_equal(r->stats_key, q->stats_key);
            if (r->metric && q->metric && strcmp(r->metric, q->metric) == 0) {
                /* the same family: right after its previous row, each
                 * sample labelled differently */
                assert_true(r->label && q->label);
                assert_string_not_equal(r->label, q->label);
                const fq_overall_row *prev = NULL;
                for (size_t k = i; k-- > 0 && !prev;)
                    if (fq_overall_rows[k].metric)
                        prev = &fq_overall_rows[k];
                assert_string_equal(prev->metric, r->metric);
            }
        }
        if (r->metric && (!r->label || i == 0 || !fq_overall_rows[i - 1].metric ||
                          strcmp(fq_overall_rows[i - 1].metric, r->metric) != 0))
            assert_non_null(r->help);
    }
    /* What no row covers is padding after a flag, shorter than a word. */
    for (size_t k = 0; k < sizeof owner;) {
        size_t run = 0;
        while (k + run < sizeof owner && !owner[k + run])
            run++;
        assert_true(run < 8);
        k += run ? run : 1;
    }
}

/* Each partition owned has its backlog series, labelled partition; the
 * others none (at most 128 series whatever P is); the stats sum them. */
static void test_partition_backlog(void **state)
{
    (void)state;
    fq_metrics_snapshot *s = NULL;
    assert_int_equal(fq_metrics_snapshot_create(&s, 10), FQ_OK);
    /* by the proxy's pair of consumers; the label is the partition's,
     * which may be past 128 (P up to 1,024) */
    s->all.parts.owned[3] = s->all.parts.owned[127] = true;
    s->all.parts.part[3] = s->all.parts_backlog.part[3] = 3;
    s->all.parts.part[127] = s->all.parts_backlog.part[127] = 900;
    s->all.parts.part[4] = 4;
    s->all.parts.queued[3] = 5;
    s->all.parts.queued[4] = 9;     /* not owned: not shown */
    s->all.parts_backlog.owned[3] = s->all.parts_backlog.owned[127] = true;
    s->all.parts_backlog.queued[3] = 5;
    s->all.parts_backlog.queued[127] = 40;
    char *out = render(s);
    assert_non_null(strstr(out, "# TYPE fairq_partition_backlog_runs gauge\n"));
    assert_non_null(strstr(out, "\nfairq_partition_backlog_runs{partition=\"900\"} 40\n"));
    assert_non_null(strstr(out, "# TYPE fairq_partition_queued_runs gauge\n"));
    assert_non_null(strstr(out, "\nfairq_partition_queued_runs{partition=\"3\"} 5\n"));
    assert_non_null(strstr(out, "\nfairq_partition_queued_runs{partition=\"900\"} 0\n"));
    assert_null(strstr(out, "partition=\"127\""));
    assert_null(strstr(out, "partition=\"4\""));
    assert_null(strstr(out, "partition=\"0\""));
    for (size_t i = 0; i < fq_overall_nrows; i++)
        if (fq_overall_rows[i].kind == FQ_OV_PARTS)
            assert_int_equal(fq_overall_u64(&fq_overall_rows[i], &s->all),
                             strcmp(fq_overall_rows[i].stats_key, "partition_backlog_runs") == 0
                                 ? 45 : 5);
    free(out);
    fq_metrics_snapshot_destroy(s);
}

/* A client-visible name that was spelled two ways keeps both, in one row:
 * the stats key publish_failures and the family fairq_publish_failures_total
 * read the same value. */
static void test_overall_names_kept(void **state)
{
    (void)state;
    static const char *const pairs[][2] = {
        {"publish_failures", "fairq_publish_failures_total"},
        {"expired", "fairq_expired_leases_total"},
        {"reconnects", "fairq_nats_reconnects_total"},
        {"leader", "fairq_dispatch_lease_held"},
        {"window_max_in_flight", "fairq_window_capacity_runs"},
        {"completions", "fairq_completions_total"},
        {"rejected", "fairq_rejected_runs_total"},
    };
    fq_metrics_overall a;
    memset(&a, 0, sizeof a);
    a.publish_failures = 7;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        const fq_overall_row *found = NULL;
        for (size_t i = 0; i < fq_overall_nrows && !found; i++)
            if (fq_overall_rows[i].stats_key &&
                strcmp(fq_overall_rows[i].stats_key, pairs[p][0]) == 0)
                found = &fq_overall_rows[i];
        assert_non_null(found);
        assert_string_equal(found->metric, pairs[p][1]);
        if (p == 0)
            assert_int_equal(fq_overall_u64(found, &a), 7);
    }
}

/* The per-tenant table: every row is a family, a stats key or both, no
 * stats key twice, and the names clients know stay paired in one row. */
static void test_tenant_table(void **state)
{
    (void)state;
    static const char *const pairs[][2] = {
        {"dispatched_tokens", "fairq_tenant_charged_tokens_total"},
        {"in_flight", "fairq_tenant_in_flight_runs"},
        {"deficit", "fairq_tenant_deficit_tokens"},
        {"oldest_queued_age_ms", "fairq_tenant_oldest_queued_age_seconds"},
        {"estimate_error", "fairq_tenant_estimate_error_ratio"},
    };
    size_t paired = 0;
    for (size_t i = 0; i < fq_tenant_nrows; i++) {
        const fq_tenant_row *r = &fq_tenant_rows[i];
        assert_true(r->name || r->stats_key);
        assert_true(r->off < sizeof(fq_metrics_tenant));
        assert_true(r->fold == FQ_FOLD_SUM || r->fold == FQ_FOLD_MAX || r->fold == FQ_FOLD_NONE);
        if (r->name)
            assert_non_null(r->help);
        for (size_t j = 0; j < i && r->stats_key; j++)
            if (fq_tenant_rows[j].stats_key)
                assert_string_not_equal(fq_tenant_rows[j].stats_key, r->stats_key);
        for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
            if (r->stats_key && strcmp(r->stats_key, pairs[k][0]) == 0) {
                assert_non_null(r->name);
                assert_string_equal(r->name, pairs[k][1]);
                paired++;
            }
        }
    }
    assert_int_equal(paired, sizeof pairs / sizeof pairs[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_buckets_are_upper_bounds),
        cmocka_unit_test(test_values_and_labels),
        cmocka_unit_test(test_ready_and_lease_age),
        cmocka_unit_test(test_tenants_fold_into_other),
        cmocka_unit_test(test_fold_at_fill_renders_the_same),
        cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_skew),
        cmocka_unit_test(test_set_info),
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_overall_table_covers_every_field),
        cmocka_unit_test(test_overall_names_kept),
        cmocka_unit_test(test_partition_backlog),
        cmocka_unit_test(test_tenant_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
