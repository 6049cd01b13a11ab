/* metrics.c -- fairq's Prometheus metrics: a snapshot the proxy fills, rendered as text exposition. */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/*
 * Principles:
 *  - Per-tenant families are described once, in a table: name, type, help,
 *    the field they read and how folded tenants combine (sum, max, or not
 *    at all where a sum would mean nothing, like a deficit). Rendering and
 *    folding both walk that table.
 *  - The proxy's values as a whole are described once too (fq_overall_rows):
 *    field, stats key, family, type, help and how replicas' values fold
 *    into the deployment's, so that the stats reply, /metrics and
 *    fairq-admin stats --all, which all walk it, cannot drift apart.
 *  - Cardinality is bounded by construction: the first max_tenant_series
 *    tenants of the snapshot get their own series, every later one is
 *    added into a row tenant="_other" of its plan. Plans come from the
 *    config, so the series count is at most the limit plus the plans.
 *  - Every family is written whole, HELP and TYPE first, because the text
 *    format requires a family's samples to be contiguous.
 *  - Label values are escaped as the format says (\\, \", \n), and bytes
 *    that are not UTF-8 become U+FFFD: the parser rejects invalid UTF-8.
 */

const uint64_t fq_hist_bounds_us[FQ_HIST_BUCKETS] = {
    1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
    120000000, 300000000, 600000000, 1800000000, 3600000000,
};

void fq_hist_observe(fq_hist *h, uint64_t us)
{
    size_t i = 0;
    while (i < FQ_HIST_BUCKETS && us > fq_hist_bounds_us[i])
        i++;
    h->bucket[i]++;
    h->sum_us += us;
}

uint64_t fq_hist_count(const fq_hist *h)
{
    uint64_t n = 0;
    for (size_t i = 0; i <= FQ_HIST_BUCKETS; i++)
        n += h->bucket[i];
    return n;
}

static void hist_merge(fq_hist *into, const fq_hist *h)
{
    for (size_t i = 0; i <= FQ_HIST_BUCKETS; i++)
        into->bucket[i] += h->bucket[i];
    into->sum_us += h->sum_us;
}

/* ---- the per-tenant families ---- */

#define OFF(field) offsetof(fq_metrics_tenant, field)

/* In the order /metrics writes them; a row without a family is for the
 * stats reply only, one without a stats key for /metrics only. */
const fq_tenant_row fq_tenant_rows[] = {
    {"fairq_tenant_queued_runs", "gauge",
     "Runs queued in the tenant's virtual queue, not yet dispatched.",
     OFF(queued_runs), FQ_TV_U64, FQ_FOLD_SUM, "queued_runs", 0},
    {"fairq_tenant_queued_tokens", "gauge",
     "Estimated tokens of the tenant's queued runs.",
     OFF(queued_tokens), FQ_TV_U64, FQ_FOLD_SUM, "queued_tokens", 0},
    {"fairq_tenant_in_flight_runs", "gauge",
     "The tenant's runs dispatched and holding a window slot.",
     OFF(in_flight_runs), FQ_TV_U64, FQ_FOLD_SUM, "in_flight", 0},
    {"fairq_tenant_deficit_tokens", "gauge",
     "DRR deficit: tokens the tenant may still spend this round; negative is debt. Not folded.",
     OFF(deficit_tokens), FQ_TV_I64, FQ_FOLD_NONE, "deficit", 0},
    {"fairq_tenant_oldest_queued_age_seconds", "gauge",
     "Age of the tenant's oldest queued run; 0 when nothing is queued. Folded as the maximum.",
     OFF(oldest_age_seconds), FQ_TV_F64, FQ_FOLD_MAX, "oldest_queued_age_ms",
     1000},
    {"fairq_tenant_rate_wait_seconds", "gauge",
     "Time until the tenant's token rate (tokens_per_minute) lets it send again; 0 when it "
     "may, or has no rate. Folded as the maximum.",
     OFF(rate_wait_seconds), FQ_TV_F64, FQ_FOLD_MAX, NULL, 0},   /* stats: admin.c, only
                                                                    for a tenant with a rate */
    {"fairq_tenant_dispatched_runs_total", "counter",
     "Runs dispatched to the workers.",
     OFF(dispatched_runs), FQ_TV_U64, FQ_FOLD_SUM, "dispatched_runs", 0},
    {"fairq_tenant_charged_tokens_total", "counter",
     "Estimated tokens charged to the tenant's deficit at dispatch.",
     OFF(charged_tokens), FQ_TV_U64, FQ_FOLD_SUM, "dispatched_tokens", 0},
    {"fairq_tenant_actual_tokens_total", "counter",
     "Actual tokens reported by the tenant's completions.",
     OFF(actual_tokens), FQ_TV_U64, FQ_FOLD_SUM, "actual_tokens", 0},
    {"fairq_tenant_priced_tokens_total", "counter",
     "Priced cost of the tenant's completions as reconciled: token kinds at their prices, in "
     "input tokens' worth; the actual tokens where a completion reports no kinds.",
     OFF(priced_tokens), FQ_TV_U64, FQ_FOLD_SUM, "priced_tokens", 0},
    {"fairq_tenant_estimate_error_ratio", "gauge",
     "Actual over estimated tokens of the tenant's recent completions; 1 is exact. Not folded.",
     OFF(estimate_error), FQ_TV_F64, FQ_FOLD_NONE, "estimate_error", 0},
    {NULL, "counter", "Completions reconciled.", OFF(completed_runs), FQ_TV_U64, FQ_FOLD_SUM,
     "completed_runs", 0},
    {NULL, "counter", "Leases that expired.", OFF(expired_runs), FQ_TV_U64, FQ_FOLD_SUM,
     "expired_runs", 0},
};
const size_t fq_tenant_nrows = sizeof fq_tenant_rows / sizeof fq_tenant_rows[0];

/* ---- snapshot ---- */

struct fq_metrics_scratch {
    fq_metrics_tenant *other;       /* one folded row per plan */
    size_t n_other, cap_other;
    const fq_metrics_tenant **rows; /* what is rendered: named, then other */
    size_t n_named, n_rows, cap_rows;
    size_t folded;                  /* tenants folded into the other rows */
    double *ages;                   /* for the skew's median */
    size_t cap_ages;
};

fq_status fq_metrics_snapshot_create(fq_metrics_snapshot **out, size_t max_tenant_series)
{
    *out = NULL;
    fq_metrics_snapshot *s = calloc(1, sizeof *s);
    if (!s)
        return FQ_ENOMEM;
    s->scratch = calloc(1, sizeof *s->scratch);
    if (!s->scratch) {
        free(s);
        return FQ_ENOMEM;
    }
    s->max_tenant_series = max_tenant_series ? max_tenant_series : FQ_METRICS_MAX_TENANT_SERIES;
    *out = s;
    return FQ_OK;
}

void fq_metrics_snapshot_destroy(fq_metrics_snapshot *s)
{
    if (!s)
        return;
    free(s->scratch->ages);
    free(s->scratch->rows);
    free(s->scratch->other);
    free(s->scratch);
    free(s->tenants);
    free(s->folded);
    free(s->folded_ages);
    free(s);
}

void fq_metrics_snapshot_clear(fq_metrics_snapshot *s)
{
    memset(&s->all, 0, sizeof s->all);
    s->n_tenants = s->n_folded_rows = s->n_folded = s->n_folded_ages = 0;
}

static void tenant_zero(fq_metrics_tenant *m)
{
    memset(m, 0, sizeof *m);
    m->estimate_error = NAN;
}

fq_metrics_tenant *fq_metrics_snapshot_add(fq_metrics_snapshot *s)
{
    if (fq_grow(&s->tenants, &s->cap_tenants, s->n_tenants + 1, sizeof *s->tenants) != FQ_OK)
        return NULL;
    fq_metrics_tenant *m = &s->tenants[s->n_tenants++];
    tenant_zero(m);
    return m;
}

void fq_metrics_tenant_set_info(fq_metrics_tenant *m, const fq_tenant_info *ti,
                                uint64_t now, double unit_seconds)
{
    fq_str_copy(m->tenant, sizeof m->tenant, ti->id ? ti->id : "");
    m->weight = ti->weight;
    m->queued_runs = ti->queued;
    m->queued_tokens = ti->queued_tokens;
    m->in_flight_runs = ti->in_flight;
    m->deficit_tokens = ti->deficit;
    m->oldest_age_seconds = ti->queued && now > ti->oldest_enqueued
        ? (double)(now - ti->oldest_enqueued) * unit_seconds : 0.0;
    m->rate_wait_seconds = ti->rate_until > now
        ? (double)(ti->rate_until - now) * unit_seconds : 0.0;
    m->dispatched_runs = ti->dispatched;
    m->charged_tokens = ti->charged_tokens;
    m->actual_tokens = ti->actual_tokens;
    m->priced_tokens = ti->priced_tokens;
    m->expired_runs = ti->expired;
}

/* ---- folding ---- */

/* The same sum-or-max for each kind, at its own type. */
#define FOLD_AS(T) do { \
        T *d = (T *)(void *)dst, v = *(const T *)(const void *)src; \
        *d = f->fold == FQ_FOLD_SUM ? *d + v : (v > *d ? v : *d); \
    } while (0)

static void fold_into(fq_metrics_tenant *o, const fq_metrics_tenant *t)
{
    for (size_t i = 0; i < fq_tenant_nrows; i++) {
        const fq_tenant_row *f = &fq_tenant_rows[i];
        char *dst = (char *)o + f->off;
        const char *src = (const char *)t + f->off;
        if (f->fold == FQ_FOLD_NONE)
            continue;
        switch (f->kind) {
        case FQ_TV_U64: FOLD_AS(uint64_t); break;
        case FQ_TV_I64: FOLD_AS(int64_t); break;
        case FQ_TV_F64: FOLD_AS(double); break;
        }
    }
    for (size_t r = 0; r < FQ__COUNT; r++)
        o->rejected[r] += t->rejected[r];
    hist_merge(&o->submit_to_dispatch, &t->submit_to_dispatch);
}

/* The _other row of plan among rows[0..*n), created on first use. */
static fq_metrics_tenant *other_row(fq_metrics_tenant **rows, size_t *n, size_t *cap,
                                    const char *plan)
{
    for (size_t i = *n; i-- > 0;)
        if (strcmp((*rows)[i].plan, plan) == 0)
            return &(*rows)[i];
    if (fq_grow(rows, cap, *n + 1, sizeof **rows) != FQ_OK)
        return NULL;
    fq_metrics_tenant *o = &(*rows)[(*n)++];
    tenant_zero(o);
    snprintf(o->tenant, sizeof o->tenant, "%s", FQ_METRICS_OTHER);
    snprintf(o->plan, sizeof o->plan, "%s", plan);
    return o;
}

fq_status fq_metrics_snapshot_fold(fq_metrics_snapshot *s, const fq_metrics_tenant *m)
{
    if (m->queued_runs > 0 && fq_grow(&s->folded_ages, &s->cap_folded_ages,
                                   s->n_folded_ages + 1, sizeof *s->folded_ages) != FQ_OK)
        return FQ_ENOMEM;
    fq_metrics_tenant *o = other_row(&s->folded, &s->n_folded_rows, &s->cap_folded_rows, m->plan);
    if (!o)
        return FQ_ENOMEM;
    fold_into(o, m);
    s->n_folded++;
    if (m->queued_runs > 0)
        s->folded_ages[s->n_folded_ages++] = m->oldest_age_seconds;
    return FQ_OK;
}

/* Decide which tenants get series and fold the rest. "_other" is no valid
 * tenant id (fq_tenant_id_valid), but the snapshot is the caller's: a row
 * so named is folded too, so that no two rows share a label set. */
static fq_status fold(fq_metrics_snapshot *s)
{
    fq_metrics_scratch *sc = s->scratch;

    sc->n_other = sc->n_named = 0;
    sc->folded = s->n_folded;
    for (size_t i = 0; i < s->n_folded_rows; i++) {
        fq_metrics_tenant *o = other_row(&sc->other, &sc->n_other, &sc->cap_other,
                                         s->folded[i].plan);
        if (!o)
            return FQ_ENOMEM;
        fold_into(o, &s->folded[i]);
    }
    for (size_t i = 0; i < s->n_tenants; i++) {
        const fq_metrics_tenant *t = &s->tenants[i];
        if (sc->n_named < s->max_tenant_series && strcmp(t->tenant, FQ_METRICS_OTHER) != 0) {
            if (fq_grow(&sc->rows, &sc->cap_rows, sc->n_named + 1, sizeof *sc->rows) != FQ_OK)
                return FQ_ENOMEM;
            sc->rows[sc->n_named++] = t;
            continue;
        }
        fq_metrics_tenant *o = other_row(&sc->other, &sc->n_other, &sc->cap_other, t->plan);
        if (!o)
            return FQ_ENOMEM;
        fold_into(o, t);
        sc->folded++;
    }
    if (fq_grow(&sc->rows, &sc->cap_rows, sc->n_named + sc->n_other, sizeof *sc->rows) != FQ_OK)
        return FQ_ENOMEM;
    for (size_t i = 0; i < sc->n_other; i++)
        sc->rows[sc->n_named + i] = &sc->other[i];
    sc->n_rows = sc->n_named + sc->n_other;
    return FQ_OK;
}

/* ---- skew ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double fq_metrics_queue_age_skew(fq_metrics_snapshot *s)
{
    fq_metrics_scratch *sc = s->scratch;
    size_t n = 0;

    if (fq_grow(&sc->ages, &sc->cap_ages, s->n_tenants + s->n_folded_ages, sizeof *sc->ages) != FQ_OK)
        return NAN;
    for (size_t i = 0; i < s->n_tenants; i++)
        if (s->tenants[i].queued_runs > 0)
            sc->ages[n++] = s->tenants[i].oldest_age_seconds;
    for (size_t i = 0; i < s->n_folded_ages; i++)
        sc->ages[n++] = s->folded_ages[i];
    if (n < 2)
        return 0.0;
    qsort(sc->ages, n, sizeof *sc->ages, cmp_double);
    double median = n % 2 ? sc->ages[n / 2] : (sc->ages[n / 2 - 1] + sc->ages[n / 2]) / 2;
    return sc->ages[n - 1] - median;
}

/* ---- text ---- */

/* By hand: a scrape of 10,000 tenants writes a few hundred thousand. */
static void put_u64(fq_buf *b, uint64_t v)
{
    char d[20];
    size_t n = 0;
    do {
        d[sizeof d - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    fq_buf_append(b, d + sizeof d - n, n);
}

/* The shortest decimal that reads back as d; the format's words for the
 * non-finite values. */
static void put_f64(fq_buf *b, double d)
{
    char num[40];

    if (isnan(d)) {
        fq_buf_puts(b, "NaN");
    } else if (isinf(d)) {
        fq_buf_puts(b, d > 0 ? "+Inf" : "-Inf");
    } else {
        snprintf(num, sizeof num, "%.15g", d);
        if (strtod(num, NULL) != d)
            snprintf(num, sizeof num, "%.17g", d);
        fq_buf_puts(b, num);
    }
}

static void put_label_value(fq_buf *b, const char *v)
{
    const unsigned char *p = (const unsigned char *)v;
    size_t n = strlen(v);

    while (n > 0) {
        size_t step = 1;
        if (*p == '\\')
            fq_buf_append(b, "\\\\", 2);
        else if (*p == '"')
            fq_buf_append(b, "\\\"", 2);
        else if (*p == '\n')
            fq_buf_append(b, "\\n", 2);
        else if ((step = fq_utf8_seq(p, n)) == 0)
            fq_buf_append(b, FQ_UTF8_REPLACEMENT, 3), step = 1;
        else
            fq_buf_append(b, (const char *)p, step);
        p += step;
        n -= step;
    }
}

/* name{tenant="..",plan=".."[,key="val"]} and a space before the value. */
static void put_series(fq_buf *b, const char *name, const char *suffix,
                       const fq_metrics_tenant *r, const char *key, const char *val)
{
    fq_buf_puts(b, name);
    fq_buf_puts(b, suffix);
    fq_buf_puts(b, "{tenant=\"");
    put_label_value(b, r->tenant);
    fq_buf_puts(b, "\",plan=\"");
    put_label_value(b, r->plan);
    if (key) {
        fq_buf_puts(b, "\",");
        fq_buf_puts(b, key);
        fq_buf_puts(b, "=\"");
        put_label_value(b, val);
    }
    fq_buf_puts(b, "\"} ");
}

/* One sample whose value is a whole number. */
static void put_sample_u64(fq_buf *b, const char *name, const char *suffix,
                           const fq_metrics_tenant *r, const char *key, const char *val,
                           uint64_t v)
{
    put_series(b, name, suffix, r, key, val);
    put_u64(b, v);
    fq_buf_putc(b, '\n');
}

/* HELP text escapes only \ and newline. */
static void put_header(fq_buf *b, const char *name, const char *type, const char *help)
{
    fq_buf_printf(b, "# HELP %s ", name);
    for (const char *p = help; *p; p++) {
        if (*p == '\\')
            fq_buf_puts(b, "\\\\");
        else if (*p == '\n')
            fq_buf_puts(b, "\\n");
        else
            fq_buf_putc(b, *p);
    }
    fq_buf_printf(b, "\n# TYPE %s %s\n", name, type);
}

static void render_family(fq_buf *b, const fq_metrics_scratch *sc, const fq_tenant_row *f)
{
    if (!f->name)
        return;     /* the stats reply's only */
    put_header(b, f->name, f->type, f->help);
    for (size_t i = 0; i < sc->n_rows; i++) {
        const fq_metrics_tenant *r = sc->rows[i];
        const void *v = (const char *)r + f->off;
        if (f->fold == FQ_FOLD_NONE && i >= sc->n_named)
            continue;
        if (f->kind == FQ_TV_F64 && isnan(*(const double *)v))
            continue;   /* not known: no sample rather than a NaN */
        put_series(b, f->name, "", r, NULL, NULL);
        switch (f->kind) {
        case FQ_TV_U64: put_u64(b, *(const uint64_t *)v); break;
        case FQ_TV_I64: fq_buf_printf(b, "%" PRId64, *(const int64_t *)v); break;
        case FQ_TV_F64: put_f64(b, *(const double *)v); break;
        }
        fq_buf_putc(b, '\n');
    }
}

/* The policy in force, and which layer set it; not folded. */
static void render_weight(fq_buf *b, const fq_metrics_scratch *sc)
{
    static const char name[] = "fairq_tenant_weight";
    put_header(b, name, "gauge",
               "Weight in force (quantum = base quantum x weight); source is default, config or override. Not folded.");
    for (size_t i = 0; i < sc->n_named; i++) {
        const fq_metrics_tenant *r = sc->rows[i];
        put_sample_u64(b, name, "", r, "source", fq_policy_source_name(r->source), r->weight);
    }
}

static void render_rejected(fq_buf *b, const fq_metrics_scratch *sc)
{
    static const char name[] = "fairq_tenant_rejected_runs_total";
    put_header(b, name, "counter",
               "Runs refused to the rejected subject, by reason (the Fair-Error code).");
    for (size_t i = 0; i < sc->n_rows; i++) {
        for (size_t r = 0; r < FQ__COUNT; r++) {
            if (sc->rows[i]->rejected[r] == 0)
                continue;   /* no zero series for every tenant x reason */
            put_sample_u64(b, name, "", sc->rows[i], "reason", fq_status_code((fq_status)r),
                           sc->rows[i]->rejected[r]);
        }
    }
}

static void render_latency(fq_buf *b, const fq_metrics_scratch *sc)
{
    static const char name[] = "fairq_tenant_submit_to_dispatch_seconds";
    char le[FQ_HIST_BUCKETS + 1][24];

    for (size_t k = 0; k < FQ_HIST_BUCKETS; k++)
        snprintf(le[k], sizeof le[k], "%.15g", (double)fq_hist_bounds_us[k] / 1e6);
    snprintf(le[FQ_HIST_BUCKETS], sizeof le[FQ_HIST_BUCKETS], "+Inf");
    put_header(b, name, "histogram",
               "Time from a run's submit to its dispatch. Tenants with no dispatch yet have no series.");
    for (size_t i = 0; i < sc->n_rows; i++) {
        const fq_metrics_tenant *r = sc->rows[i];
        const fq_hist *h = &r->submit_to_dispatch;
        uint64_t cum = 0;
        if (fq_hist_count(h) == 0)
            continue;
        for (size_t k = 0; k <= FQ_HIST_BUCKETS; k++) {
            cum += h->bucket[k];
            put_sample_u64(b, name, "_bucket", r, "le", le[k], cum);
        }
        put_series(b, name, "_sum", r, NULL, NULL);
        put_f64(b, (double)h->sum_us / 1e6);
        fq_buf_putc(b, '\n');
        put_sample_u64(b, name, "_count", r, NULL, NULL, cum);
    }
}

/* One unlabelled sample of a family of its own. */
static void render_one(fq_buf *b, const char *name, const char *type, const char *help,
                       double d, uint64_t u, bool is_double)
{
    put_header(b, name, type, help);
    fq_buf_printf(b, "%s ", name);
    if (is_double)
        put_f64(b, d);
    else
        put_u64(b, u);
    fq_buf_putc(b, '\n');
}

#define GAUGE_U(name, help, v) render_one(b, name, "gauge", help, 0, (v), false)
#define GAUGE_D(name, help, v) render_one(b, name, "gauge", help, (v), 0, true)

static const char *const ready_names[FQ_READY__COUNT] = {
    [FQ_READY_OK] = "ready", [FQ_READY_STANDBY] = "standby", [FQ_READY_STARTING] = "starting",
    [FQ_READY_RECOVERING] = "recovering", [FQ_READY_CONSUMERS] = "consumers",
    [FQ_READY_DISCONNECTED] = "disconnected", [FQ_READY_LEASE_STALE] = "lease_stale",
    [FQ_READY_DISPATCH_STALLED] = "dispatch_stalled",
    [FQ_READY_JOURNAL_STALLED] = "journal_stalled", [FQ_READY_STOPPING] = "stopping"};

const char *fq_ready_reason_name(enum fq_ready_reason r)
{
    return r >= 0 && r < FQ_READY__COUNT ? ready_names[r] : "unknown";
}


/* 0 means unlimited in the config: +Inf says so to a dashboard. */
static double capacity(uint64_t v)
{
    return v ? (double)v : INFINITY;
}

/* ---- the proxy as a whole ---- */

/* Each row says how it folds across replicas (fq_overall_row.fold): SUM,
 * MAX or NONE, spelled in every row so that none is folded by default. */
#define OV(kind, fold, field, stats_key, metric, label, help) \
    {FQ_OV_##kind, offsetof(fq_metrics_overall, field), stats_key, metric, label, help, \
     FQ_FOLD_##fold}
#define OUTCOME(o) "outcome=\"" o "\""

/* In the order /metrics writes them; a row without a metric is for the
 * stats reply only. */
const fq_overall_row fq_overall_rows[] = {
    OV(GAUGE, SUM, in_flight_runs, "in_flight", "fairq_in_flight_runs", NULL,
       "Runs dispatched and holding a window slot."),
    OV(GAUGE, SUM, in_flight_tokens, "in_flight_tokens", "fairq_in_flight_tokens", NULL,
       "Estimated tokens of the runs in flight."),
    OV(GAUGE, SUM, queued_runs, "queued_runs", NULL, NULL, "Runs queued, every tenant's."),
    OV(GAUGE, SUM, queued_tokens, "queued_tokens", NULL, NULL,
       "Estimated tokens of the queued runs."),
    OV(GAUGE, SUM, tenants, "tenants", NULL, NULL, "Tenants the scheduler knows."),
    OV(GAUGE, SUM, active_tenants, "active_tenants", NULL, NULL, "Tenants with queued runs."),
    OV(CAPACITY, NONE, window_runs, "window_max_in_flight", "fairq_window_capacity_runs", NULL,
       "window.max_in_flight; +Inf when unlimited."),
    OV(CAPACITY, NONE, window_tokens, "window_max_in_flight_tokens", "fairq_window_capacity_tokens",
       NULL, "window.max_in_flight_tokens; +Inf when unlimited."),
    OV(CAPACITY, NONE, share_runs, "share_max_in_flight", "fairq_window_share_runs", NULL,
       "With window.share on, this replica's part of window.max_in_flight now "
       "(docs/scaling.md); +Inf when not shared."),
    OV(CAPACITY, NONE, share_tokens, "share_max_in_flight_tokens", "fairq_window_share_tokens",
       NULL, "With window.share on, this replica's part of window.max_in_flight_tokens now; "
       "+Inf when not shared or unlimited."),
    OV(GAUGE, NONE, share_peers, "share_peers", "fairq_share_peers", NULL,
       "Other replicas whose heartbeat was heard within the last three periods."),
    OV(COUNTER, SUM, share_refused, "share_heartbeats_refused",
       "fairq_share_heartbeats_refused_total", NULL, "Heartbeats refused (invalid, or from one replica too many) or dropped "
       "(too many waiting)."),
    OV(COUNTER, SUM, admin_forwarded, "admin_forwarded", "fairq_admin_forwarded_requests_total",
       NULL, "Admin and explain requests about a tenant handed on to the replica holding its "
       "partition."),
    OV(COUNTER, SUM, expired_leases, "expired", "fairq_expired_leases_total", NULL,
       "Runs whose lease expired with no completion, freeing their slot."),
    OV(GAUGE, SUM, buffered_runs, "buffered_runs", "fairq_buffered_runs", NULL,
       "Runs held in memory (with their body or as an index entry)."),
    OV(GAUGE, SUM, buffered_bytes, "buffered_bytes", "fairq_buffered_bytes", NULL,
       "Bytes of run bodies held in memory."),
    OV(FLAG, SUM, fetch_paused, "fetch_paused", "fairq_fetch_paused", NULL,
       "1 while fetching from the submit stream is paused at limits.max_buffered_runs."),
    OV(COUNTER, SUM, fetch_pauses, "fetch_pauses", "fairq_fetch_pauses_total", NULL,
       "Times fetching paused at limits.max_buffered_runs."),
    OV(GAUGE, SUM, given_back_runs, "given_back_runs", "fairq_given_back_awaited_runs", NULL,
       "Runs given back to the submit stream (over their tenant's share of a full buffer, "
       "or behind one that was), awaited in order."),
    OV(COUNTER, SUM, given_back, "given_back", "fairq_given_back_runs_total", NULL,
       "Submits given back to the submit stream instead of held: their tenant held its share "
       "of a full buffer, or a run of its given back came before them."),
    OV(COUNTER, SUM, given_back_lost, "given_back_lost", "fairq_given_back_lost_runs_total", NULL,
       "Runs given back that never came again when asked back (purged from the submit "
       "stream): forgotten, so that their tenant's later runs move on."),
    OV(FLAG, SUM, nats_connected, "nats_connected", "fairq_nats_connected", NULL,
       "1 while connected to NATS."),
    OV(COUNTER, SUM, nats_reconnects, "reconnects", "fairq_nats_reconnects_total", NULL,
       "Reconnections to NATS."),
    OV(COUNTER, SUM, config_reloads, "config_reloads", "fairq_config_reloads_total", NULL,
       "Config reloads that took effect."),
    OV(COUNTER, SUM, config_reload_failures, "config_reload_failures",
       "fairq_config_reload_failures_total", NULL,
       "Config reloads refused (invalid file); the old config stayed."),
    OV(COUNTER, SUM, invalid_subject_runs, "invalid_subject", "fairq_invalid_subject_runs_total",
       NULL, "Runs refused because their subject names no valid tenant."),
    OV(COUNTER, SUM, subtenant_refused, "subtenant_refused", "fairq_subtenant_refused_runs_total",
       NULL, "Runs refused for their sub-tenant claim (Fair-Subtenant or subtenant): not a "
       "name, or header and body naming two; counted in the rejected runs too."),
    OV(COUNTER, SUM, subtenant_overflow, "subtenant_overflow",
       "fairq_subtenant_overflow_runs_total", NULL,
       "Runs queued in their tenant's overflow sub-tenant: they named a new sub-tenant past "
       "its max_subtenants (not refused: a claim only divides its tenant's share)."),
    OV(REASONS, SUM, rejected_runs, "rejected", "fairq_rejected_runs_total", NULL,
       "Runs refused to the rejected subject, by reason: those of tenants fairq does not know too."),
    OV(FLAG, SUM, lease_held, "leader", "fairq_dispatch_lease_held", NULL,
       "1 while this proxy holds the dispatcher lease; 0 while it waits for another."),
    OV(GAUGE, SUM, partitions_owned, "partitions_owned", "fairq_partitions_owned", NULL,
       "Partitions whose ownership key this replica holds (with partitions: 1, 1 while it "
       "leads)."),
    OV(GAUGE, MAX, partitions_bound, "partitions_bound", "fairq_partitions_bound", NULL,
       "Partitions one replica owns at most (two consumers each, natsio's); with P above "
       "the live replicas times this, the rest stay unowned."),
    OV(GAUGE, MAX, partitions_unassigned, "partitions_unassigned", "fairq_partitions_unassigned",
       NULL, "Partitions no live replica may own, as this replica sees the registry: P above "
       "the live replicas times fairq_partitions_bound. Their runs wait in the stream until "
       "a replica joins."),
    OV(COUNTER, SUM, partition_handovers, "partition_handovers", "fairq_partition_handovers_total",
       NULL, "Partitions this replica took or gave up: moves, stops, takeovers, losses."),
    OV(COUNTER, SUM, partitions_fenced, "partitions_fenced", "fairq_partitions_fenced_total", NULL,
       "Partitions let go at once because their journal refused this replica's batch: "
       "another replica owns them now. The others are served on."),
    OV(COUNTER, SUM, handovers_unsettled, "partition_handovers_unsettled",
       "fairq_partition_handovers_unsettled_total", NULL,
       "Planned moves handed off before the partition's journal settled (2 s): its next "
       "owner does again what was not stored."),
    OV(COUNTER, SUM, submits_stranded, "submits_stranded", "fairq_submits_stranded_total", NULL,
       "Times a partition's first stored submit stayed at or below its consumer's ack floor "
       "over two checks (a nats-server 2.9 defect after a node's restart: never to be "
       "delivered); its consumer was made again from that submit."),
    OV(GAUGE, SUM, consumers_refused, "partitions_consumer_refused",
       "fairq_partitions_consumer_refused", NULL,
       "Owned partitions whose submit consumer the server has refused for over 30 s: their "
       "runs wait in the stream, undispatched (docs/operations.md)."),
    OV(COUNTER, SUM, lease_values_refused, "lease_values_refused",
       "fairq_lease_values_refused_total", NULL,
       "Keys and values of the lease bucket refused, as its watch delivered them (P > 1): "
       "a key fairq never writes (a partition past P, a registry key whose id is not valid, "
       "another name) or a partition's holder that is no replica id; ignored."),
    OV(RATE, MAX, lease_renew_seconds, "lease_renew_seconds", "fairq_lease_renew_seconds", NULL,
       "Round trip of the last ownership key renewal the server confirmed."),
    OV(RATE, MAX, lease_renew_max_seconds, "lease_renew_max_seconds",
       "fairq_lease_renew_max_seconds", NULL,
       "Longest round trip of an ownership key renewal since start."),
    OV(PARTS, SUM, parts, "partition_queued_runs", "fairq_partition_queued_runs", NULL,
       "Runs queued in memory by the tenants of each partition this replica owns (at the "
       "last pass over the tenants); not those still in the submit stream: "
       "fairq_partition_backlog_runs counts them all."),
    OV(PARTS, SUM, parts_backlog, "partition_backlog_runs", "fairq_partition_backlog_runs", NULL,
       "Submits of each partition this replica owns not dispatched yet: not fetched, queued "
       "in memory, or given back (its submit consumer's num_pending plus num_ack_pending, "
       "as the server last answered; asked about once a second and as its consumer is made)."),
    OV(RATE, SUM, dispatch_rate, "dispatch_rate", NULL, NULL,
       "Runs dispatched a second, smoothed."),
    OV(RATE, SUM, dispatch_token_rate, "dispatch_token_rate", NULL, NULL,
       "Estimated tokens dispatched a second, smoothed."),
    OV(RATE, SUM, completion_rate, "completion_rate", NULL, NULL,
       "Completions a second, smoothed."),
    OV(RATE, SUM, actual_token_rate, "actual_token_rate", NULL, NULL,
       "Actual tokens reported a second, smoothed."),
    OV(COUNTER, SUM, submitted_runs, "submitted", "fairq_submitted_runs_total", NULL,
       "Runs fetched from the submit stream, first delivery."),
    OV(COUNTER, SUM, redelivered_runs, "redelivered", "fairq_redelivered_runs_total", NULL,
       "Runs delivered again while held (a consumer reset); not queued twice."),
    OV(COUNTER, SUM, duplicates_acked, "duplicates_acked", "fairq_duplicates_acked_total", NULL,
       "Submits acked without a dispatch: dispatched before a restart, their ack lost."),
    OV(COUNTER, SUM, dispatched_runs, "dispatched", NULL, NULL, "Runs dispatched."),
    OV(COUNTER, SUM, dispatch_duplicates, "dispatch_duplicates", "fairq_dispatch_duplicates_total",
       NULL, "Dispatches the dispatch stream de-duplicated: they had reached the workers before."),
    OV(COUNTER, SUM, adopted_runs, "adopted", "fairq_adopted_runs_total", NULL,
       "Runs in flight read back from the journal at start, holding window slots."),
    OV(COUNTER, SUM, journal_refused_records, "journal_refused",
       "fairq_journal_refused_records_total",
       NULL, "Journal records refused when read back at start: not valid, or of a type not known."),
    OV(COUNTER, SUM, debts_forgiven, "debts_forgiven", "fairq_debts_forgiven_total", NULL,
       "Tenants' debts forgiven after scheduler.debt_forget_ms holding nothing."),
    OV(COUNTER, SUM, expired_forgotten_early, "expired_forgotten_early",
       "fairq_expired_forgotten_early_total", NULL,
       "Expired runs forgotten before their time, past the 100,000 remembered: a late "
       "completion for one changes nothing."),
    OV(GAUGE, SUM, index_only_runs, "index_only_runs", "fairq_index_only_runs", NULL,
       "Runs held without their body (past limits.max_buffered_bytes)."),
    OV(COUNTER, SUM, body_reads, "body_reads", "fairq_body_reads_total", NULL,
       "Bodies read back from the submit stream at dispatch."),
    OV(COUNTER, SUM, body_lost, "body_lost", "fairq_body_lost_total", NULL,
       "Runs whose body was gone from the submit stream at dispatch (purged): not sent."),
    OV(COUNTER, SUM, completions[FQ_COMPLETION_HELD], "completions", "fairq_completions_total",
       OUTCOME("held"),
       "Completions by outcome: held and unheld reconciled, the rest changed nothing."),
    OV(COUNTER, SUM, completions[FQ_COMPLETION_UNHELD], "completions_unheld",
       "fairq_completions_total", OUTCOME("unheld"), NULL),
    OV(COUNTER, SUM, completions[FQ_COMPLETION_DUPLICATE], "completions_duplicate",
       "fairq_completions_total", OUTCOME("duplicate"), NULL),
    OV(COUNTER, SUM, completions[FQ_COMPLETION_INVALID], "completions_invalid",
       "fairq_completions_total", OUTCOME("invalid"), NULL),
    OV(COUNTER, SUM, completions[FQ_COMPLETION_UNKNOWN], "completions_unknown",
       "fairq_completions_total", OUTCOME("unknown"), NULL),
    OV(COUNTER, SUM, completion_copies_skipped, "completion_copies_skipped",
       "fairq_completion_copies_skipped_total", NULL,
       "Invalid or unknown completions acked without a copy to the rejected subject, "
       "past 100 a second."),
    OV(COUNTER, SUM, completions_deferred, "completions_deferred",
       "fairq_completions_deferred_total",
       NULL, "Completions naked to be looked at again in 500 ms, their run queued, not in "
       "flight yet."),
    OV(COUNTER, SUM, completions_early_applied, "completions_early_applied",
       "fairq_completions_early_applied_total", NULL,
       "Completions held before their run was in flight, reconciled when its dispatch came "
       "back a duplicate: an earlier leader had dispatched it."),
    OV(COUNTER, SUM, redispatched, "redispatched", "fairq_redispatched_runs_total", NULL,
       "Runs read back from the journal whose dispatch, sent again, was stored new: the "
       "attempt their flight record told of had failed; their lease restarted."),
    OV(COUNTER, SUM, done_unconfirmed_resent, "done_unconfirmed_resent",
       "fairq_done_unconfirmed_resent_runs_total", NULL,
       "Submits delivered again of runs that completed before their dispatch was seen "
       "stored: published again under their Nats-Msg-Id."),
    OV(COUNTER, SUM, dispatch_unanswered, "dispatch_unanswered", "fairq_dispatch_unanswered_total",
       NULL, "Dispatches whose PubAck did not come (a timeout, a connection dropped): "
       "published again as they were, not queued again."),
    OV(COUNTER, SUM, refusals_repeated, "refusals_repeated", "fairq_refusals_repeated_total", NULL,
       "Submits refused for the state of the moment delivered again: refused again as "
       "their journalled refusal says, not decided anew."),
    OV(COUNTER, SUM, possible_duplicates, "possible_duplicates",
       "fairq_possible_duplicate_dispatches_total", NULL,
       "Dispatches that may reach the workers twice, marked Fair-Possible-Duplicate: sent again "
       "(a run read back, its submit delivered again) when their first may be older than the "
       "duplicate window, or of a run a dispatch of which may be stored unknown to fairq (its "
       "submit inherited from a leader before, or an attempt unanswered and then refused) sent "
       "past the duplicate window of its submit."),
    OV(COUNTER, SUM, unowned, "unowned", "fairq_unowned_deliveries_total", NULL,
       "Submits and completions of a partition this replica does not own: dropped "
       "unanswered, for its owner."),
    OV(COUNTER, SUM, records_foreign, "records_foreign", "fairq_journal_foreign_records_total",
       NULL, "Journal records read back for another partition than the one being adopted: "
       "refused."),
    OV(COUNTER, SUM, parts_adopted, "partitions_adopted", "fairq_partitions_adopted_total", NULL,
       "Partitions the ledger adopted (read their journal back and took their runs)."),
    OV(COUNTER, SUM, parts_released, "partitions_released", "fairq_partitions_released_total",
       NULL, "Partitions the ledger let go (lease lost or handed over)."),
    OV(COUNTER, SUM, released_queued, "released_queued", "fairq_released_runs_total",
       "state=\"queued\"", "Runs let go with their partition: queued ones naked to the "
       "submit stream in each tenant's order, dispatched ones leaving the window uncharged."),
    OV(COUNTER, SUM, released_dispatched, "released_dispatched", "fairq_released_runs_total",
       "state=\"dispatched\"", NULL),
    OV(COUNTER, SUM, publish_failures, "publish_failures", "fairq_publish_failures_total", NULL,
       "Publishes (dispatch, refusal, journal) that failed and were retried."),
    OV(COUNTER, SUM, dispatch_failures, "dispatch_failures", "fairq_dispatch_failures_total", NULL,
       "Dispatches the dispatch stream did not store (a full store, a timeout): the run "
       "was queued again and its tenant parked."),
    OV(GAUGE, SUM, parked_tenants, "parked_tenants", "fairq_parked_tenants", NULL,
       "Tenants out of the rotation for a while after a failed dispatch."),
    OV(FLAG, SUM, dispatch_stalled, "dispatch_stalled", "fairq_dispatch_stalled", NULL,
       "1 while publishes to the dispatch stream keep failing: not dispatching, not ready."),
    OV(COUNTER, SUM, refusals_unstored, "refusals_unstored", "fairq_refusals_unstored_total", NULL,
       "Refusals the rejected stream (or the account) would not store; their runs "
       "were acked all the same."),
    OV(COUNTER, SUM, overrides_refused, "overrides_refused", "fairq_overrides_refused_total", NULL,
       "Values in the overrides bucket refused as invalid; the policy stayed."),
    OV(COUNTER, SUM, admin_reply_failures, "admin_reply_failures",
       "fairq_admin_reply_failures_total", NULL, "Admin replies that could not be sent."),
    OV(COUNTER, SUM, admin_requests_busy, "admin_requests_busy", "fairq_admin_requests_busy_total",
       NULL, "Admin requests answered busy: over their rate, too many waiting, or (P > 1) about "
       "a tenant held by another replica while 64 requests handed on wait for answers."),
    OV(COUNTER, SUM, admin_requests_no_reply, "admin_requests_no_reply",
       "fairq_admin_requests_no_reply_total", NULL,
       "Admin requests without a reply subject, dropped unread."),
    OV(COUNTER, SUM, admin_requests_too_long, "admin_requests_too_long",
       "fairq_admin_requests_too_long_total", NULL,
       "Admin requests whose body passed 4096 bytes, refused unread."),
    OV(COUNTER, SUM, admin_requests_invalid, "admin_requests_invalid",
       "fairq_admin_requests_invalid_total", NULL,
       "Admin and explain requests refused for their subject, body or a field."),
    OV(GAUGE, NONE, max_payload, "max_payload", "fairq_nats_max_payload_bytes", NULL,
       "The server's max_payload; a run is accepted when its dispatch fits it."),
};
const size_t fq_overall_nrows = sizeof fq_overall_rows / sizeof fq_overall_rows[0];

uint64_t fq_overall_u64(const fq_overall_row *r, const fq_metrics_overall *a)
{
    const char *v = (const char *)a + r->off;
    uint64_t sum = 0;
    switch (r->kind) {
    case FQ_OV_FLAG:
        return *(const bool *)(const void *)v;
    case FQ_OV_RATE:
        return (uint64_t)*(const double *)(const void *)v;
    case FQ_OV_REASONS:
        for (size_t i = 0; i < FQ__COUNT; i++)
            sum += ((const uint64_t *)(const void *)v)[i];
        return sum;
    case FQ_OV_PARTS:
        for (size_t i = 0; i < FQ_METRICS_PARTS; i++)
            sum += ((const fq_metrics_parts *)(const void *)v)->owned[i]
                   ? ((const fq_metrics_parts *)(const void *)v)->queued[i] : 0;
        return sum;
    default:
        return *(const uint64_t *)(const void *)v;
    }
}

double fq_overall_rate(const fq_overall_row *r, const fq_metrics_overall *a)
{
    if (r->kind == FQ_OV_RATE)
        return *(const double *)(const void *)((const char *)a + r->off);
    return (double)fq_overall_u64(r, a);
}

/* A row's samples: by reason, labelled, or one. */
static void render_row(fq_buf *b, const fq_overall_row *r, const fq_metrics_overall *a)
{
    if (r->kind == FQ_OV_REASONS) {
        const uint64_t *v = (const uint64_t *)(const void *)((const char *)a + r->off);
        for (size_t i = 0; i < FQ__COUNT; i++) {
            if (v[i] == 0)
                continue;   /* no zero series for every reason */
            fq_buf_printf(b, "%s{reason=\"%s\"} ", r->metric, fq_status_code((fq_status)i));
            put_u64(b, v[i]);
            fq_buf_putc(b, '\n');
        }
        return;
    }
    if (r->kind == FQ_OV_PARTS) {
        const fq_metrics_parts *v = (const void *)((const char *)a + r->off);
        for (size_t k = 0; k < FQ_METRICS_PARTS; k++) {
            if (!v->owned[k])
                continue;   /* a series per partition owned, at most 128 */
            fq_buf_printf(b, "%s{partition=\"%" PRIu32 "\"} ", r->metric, v->part[k]);
            put_u64(b, v->queued[k]);
            fq_buf_putc(b, '\n');
        }
        return;
    }
    fq_buf_puts(b, r->metric);
    if (r->label)
        fq_buf_printf(b, "{%s}", r->label);
    fq_buf_putc(b, ' ');
    if (r->kind == FQ_OV_CAPACITY)
        put_f64(b, capacity(fq_overall_u64(r, a)));
    else if (r->kind == FQ_OV_RATE)
        put_f64(b, fq_overall_rate(r, a));
    else
        put_u64(b, fq_overall_u64(r, a));
    fq_buf_putc(b, '\n');
}

static void render_overall(fq_buf *b, fq_metrics_snapshot *s)
{
    const fq_metrics_overall *a = &s->all;
    uint64_t active = s->n_folded_ages;

    for (size_t i = 0; i < s->n_tenants; i++)
        active += s->tenants[i].queued_runs > 0;

    put_header(b, "fairq_build_info", "gauge", "fairq's version, as a label; always 1.");
    fq_buf_printf(b, "fairq_build_info{version=\"%s\"} 1\n", FAIRQ_VERSION);
    /* What the snapshot's tenants say, rather than the proxy's counts. */
    GAUGE_U("fairq_tenants", "Tenants the scheduler knows.", s->n_tenants + s->n_folded);
    GAUGE_U("fairq_tenants_active", "Tenants with queued runs.", active);
    GAUGE_U("fairq_tenants_folded",
            "Tenants past the series limit, whose values are in tenant=\"_other\".",
            s->scratch->folded);
    GAUGE_D("fairq_queue_age_skew_seconds",
            "Oldest queued run's age of the most delayed tenant minus the median of that age over tenants with queued work; 0 with fewer than two.",
            fq_metrics_queue_age_skew(s));
    const char *family = "";
    for (size_t i = 0; i < fq_overall_nrows; i++) {
        const fq_overall_row *r = &fq_overall_rows[i];
        if (!r->metric)
            continue;
        if (strcmp(r->metric, family) != 0) {
            bool counter = r->kind == FQ_OV_COUNTER || r->kind == FQ_OV_REASONS;
            put_header(b, r->metric, counter ? "counter" : "gauge", r->help);
            family = r->metric;
        }
        render_row(b, r, a);
    }
}

/* One series per reason, 1 for the one /readyz gives now, so an alert
 * needs no absent(): fairq_ready{reason="ready"} summed over the proxies of
 * one set of streams is 0. */
void fq_metrics_render_ready(fq_buf *b, enum fq_ready_reason r, uint64_t lease_age_ms)
{
    static const char name[] = "fairq_ready";
    put_header(b, name, "gauge",
               "1 for the reason /readyz answers with now (ready and standby answer 200).");
    for (int i = 0; i < FQ_READY__COUNT; i++)
        fq_buf_printf(b, "%s{reason=\"%s\"} %d\n", name, ready_names[i], (int)r == i);
    GAUGE_D("fairq_lease_age_seconds",
            "Since the send of the last lease write the server confirmed; past the TTL less "
            "a margin (2.5 s) the leader changes nothing. 0 when not leading.",
            (double)lease_age_ms / 1000.0);
}

fq_status fq_metrics_render(fq_buf *out, fq_metrics_snapshot *s)
{
    if (fold(s) != FQ_OK)
        return FQ_ENOMEM;
    for (size_t i = 0; i < fq_tenant_nrows; i++)
        render_family(out, s->scratch, &fq_tenant_rows[i]);
    render_weight(out, s->scratch);
    render_rejected(out, s->scratch);
    render_latency(out, s->scratch);
    render_overall(out, s);
    return out->failed ? FQ_ENOMEM : FQ_OK;
}
