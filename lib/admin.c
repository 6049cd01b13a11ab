/* admin.c -- the admin plane: requests on <admin>.>, their rate limits, and the stats reply. */
#include "admin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"
#include "names.h"
#include "owner.h"

/*
 * Principles
 *
 * - Every body is untrusted and parsed through lib/msg.c; a request that
 *   cannot be served gets a JSON error with the reason, never silence.
 * - Work that costs the loop more than a reply is rate limited by a
 *   bucket per kind: its burst bounds what one turn does, its rate what a
 *   second does; over it the request is answered busy at once, with how
 *   long to wait.
 * - A stats page costs its own rows, not a walk of the tenants before it:
 *   the scheduler keeps them ranked (fq_sched_rank_at), so the first row
 *   at any offset is found in O(log n) and each next one in O(1).
 * - The proxy's state is read through fq_admin_ops only; what this module
 *   counts is its own.
 */

#define AD_REPLY_MAX 4096
#define AD_REPLICAS_MAX (FQ_OWNER_REPLICAS_MAX * (FQ_OWNER_ID_MAX + 3)) /* the list of
                                       replicas a reply names, at most */
#define AD_REPLY_MARGIN 512         /* room under max_payload for what a reply carries
                                       besides its body */
#define AD_STATS_TAIL 160           /* room after the tenants for what closes the reply */
#define AD_EXPLAIN_SLOTS 256        /* explain buckets, a tenant's by its id's hash */
#define AD_EXPLAIN_TENANT_RATE 5    /* explain requests a second for one tenant's slot */
#define AD_EXPLAIN_TENANT_BURST 3

/* Admin work that costs the loop more than a reply, rate limited each by a
 * bucket. */
enum ad_kind {
    AD_STATS,           /* a page writes up to 500 rows (FQ_ADMIN_STATS_PAGE_MAX),
                           up to max_payload of JSON */
    AD_RELOAD,          /* reads and checks the config file */
    AD_SET,             /* a KV write, waited for */
    AD_EXPLAIN,         /* lookups in O(1), but any producer may ask */
    AD__COUNT
};
static const struct {
    const char *name;           /* the request, as in the busy reply */
    uint32_t rate, burst;       /* a second; at once */
} ad_limits[AD__COUNT] = {
    [AD_STATS] = {FQ_ADMIN_STATS, 5, 1},
    [AD_RELOAD] = {FQ_ADMIN_RELOAD, 2, 2},
    [AD_SET] = {FQ_ADMIN_TENANT_SET, 20, 5},
    [AD_EXPLAIN] = {"explain", 50, 10},
};

const char fq_admin_busy_queued[] =
    "{\"ok\":false,\"busy\":true,\"retry_ms\":100,"
    "\"error\":\"busy: too many admin requests are waiting; retry later\"}";

struct fq_admin {
    char prefix[256];           /* the admin subject */
    const fq_ovr_set *ovr;      /* the overrides, the proxy's */
    fq_admin_ops ops;
    fq_bucket rate[AD__COUNT];  /* admin work allowed, by kind */
    fq_bucket reply_warn;       /* "admin reply not sent" lines, one a second */
    fq_bucket explain[AD_EXPLAIN_SLOTS]; /* explain requests by tenant slot: one tenant
                                   asking as fast as it can leaves the others
                                   most of AD_EXPLAIN's rate (a tenant cannot
                                   choose its slot: NATS gives it its subject) */
    fq_admin_counters c;
};

#define AD_KV(w, k, v) (fq_json_key((w), (k)), fq_json_int((w), (int64_t)(v)))

fq_status fq_admin_create(fq_admin **out, const char *prefix, const fq_ovr_set *ovr,
                          const fq_admin_ops *ops, uint64_t now)
{
    *out = NULL;
    if (strlen(prefix) >= sizeof((fq_admin *)0)->prefix)
        return FQ_EINVAL;
    fq_admin *a = calloc(1, sizeof *a);
    if (!a)
        return FQ_ENOMEM;
    snprintf(a->prefix, sizeof a->prefix, "%s", prefix);
    a->ovr = ovr;
    a->ops = *ops;
    for (int k = 0; k < AD__COUNT; k++)
        fq_bucket_init(&a->rate[k], ad_limits[k].rate, ad_limits[k].burst, now);
    fq_bucket_init(&a->reply_warn, 1, 1, now);
    for (size_t i = 0; i < AD_EXPLAIN_SLOTS; i++)
        fq_bucket_init(&a->explain[i], AD_EXPLAIN_TENANT_RATE, AD_EXPLAIN_TENANT_BURST, now);
    *out = a;
    return FQ_OK;
}

void fq_admin_destroy(fq_admin *a)
{
    free(a);
}

const fq_admin_counters *fq_admin_counters_get(const fq_admin *a)
{
    return &a->c;
}

/* ---- replies ------------------------------------------------------------- */

/* Send a reply; a failed publish (the requester sees only a timeout) is
 * counted, and logged once a second at most. */
static void ad_send(fq_admin *a, const void *req, const char *subject, const char *data,
                    size_t len, uint64_t now)
{
    fq_status s = a->ops.reply(a->ops.arg, req, data, len);
    if (s == FQ_OK)
        return;
    a->c.reply_failures++;
    if (fq_bucket_take(&a->reply_warn, now, NULL))
        fq_log(FQ_LOG_ERROR, "admin reply not sent", FQ_STR("subject", subject),
               FQ_INT("bytes", (int64_t)len), FQ_STR("reason", fq_status_text(s)),
               FQ_UINT("failures", a->c.reply_failures));
}

/* A request being answered. */
typedef struct ad_req {
    fq_admin *a;
    const char *subject;
    const void *body;
    size_t len;
    const void *req;            /* the proxy's handle */
    uint64_t now;
} ad_req;

/* Start a reply in w over buf[0..cap): an object whose first member is "ok". */
static void ad_begin(fq_json *w, char *buf, size_t cap, bool ok)
{
    fq_json_init(w, buf, cap);
    fq_json_begin_object(w);
    fq_json_key(w, "ok");
    fq_json_bool(w, ok);
}

static void ad_reply(const ad_req *q, fq_json *w)
{
    static const char bad[] = "{\"ok\":false,\"error\":\"the reply did not fit\"}";
    size_t len = 0;
    if (fq_json_finish(w, &len) == FQ_OK)
        ad_send(q->a, q->req, q->subject, w->buf, len, q->now);
    else
        ad_send(q->a, q->req, q->subject, bad, sizeof bad - 1, q->now);
}

static void ad_error(const ad_req *q, const char *why)
{
    char buf[AD_REPLY_MAX];
    fq_json w;
    ad_begin(&w, buf, sizeof buf, false);
    fq_json_key(&w, "error");
    fq_json_string(&w, why);
    fq_json_end_object(&w);
    ad_reply(q, &w);
}

/* Take a token of bucket b, which allows rate requests of name a second
 * (for what: "" or " for one tenant"). With none left, answer busy, with
 * how long until one is, and count it: a cheap reply instead of the work. */
static bool ad_take(const ad_req *q, fq_bucket *b, uint32_t rate, const char *name,
                    const char *what)
{
    uint64_t wait = 0;
    if (fq_bucket_take(b, q->now, &wait))
        return true;
    q->a->c.busy++;
    char buf[512], why[160];
    fq_json w;
    snprintf(why, sizeof why, "busy: at most %u %s requests a second%s; retry in %llu ms",
             rate, name, what, (unsigned long long)wait);
    ad_begin(&w, buf, sizeof buf, false);
    fq_json_key(&w, "busy");
    fq_json_bool(&w, true);
    AD_KV(&w, "retry_ms", wait);
    fq_json_key(&w, "error");
    fq_json_string(&w, why);
    fq_json_end_object(&w);
    ad_reply(q, &w);
    return false;
}

/* Take a token for admin work of kind (ad_take). */
static bool ad_allow(const ad_req *q, enum ad_kind kind)
{
    return ad_take(q, &q->a->rate[kind], ad_limits[kind].rate, ad_limits[kind].name, "");
}

/* The replica answering ("replica") and the replicas alive in its view
 * ("replicas"): fairq-admin asks each of them in turn for a view of the
 * whole deployment (stats --all, reload), and learns from every answer
 * who else to ask. Nothing without the callbacks. */
static void ad_replicas(fq_json *w, const fq_admin_ops *o)
{
    const char *id = o->replica_id ? o->replica_id(o->arg) : NULL;
    if (!id || !o->replica_at)
        return;
    fq_json_key(w, "replica");
    fq_json_string(w, id);
    fq_json_key(w, "replicas");
    fq_json_begin_array(w);
    const char *r;
    for (size_t i = 0; (r = o->replica_at(o->arg, i)) != NULL; i++)
        fq_json_string(w, r);
    fq_json_end_array(w);
}

/* ---- stats ---------------------------------------------------------------- */

/* The tenant's sub-tenants with the most queued, if it was given them. */
static void ad_stats_top_subs(fq_json *w, const fq_admin_tenant *t)
{
    if (!t->n_top_subs)
        return;
    fq_json_key(w, "top_subtenants");
    fq_json_begin_array(w);
    for (size_t i = 0; i < t->n_top_subs; i++) {
        fq_json_begin_object(w);
        fq_json_key(w, "subtenant");
        fq_json_string(w, t->top_subs[i].name);
        if (t->top_subs[i].overflow) {
            fq_json_key(w, "overflow");
            fq_json_bool(w, true);
        }
        AD_KV(w, "queued_runs", t->top_subs[i].queued);
        fq_json_end_object(w);
    }
    fq_json_end_array(w);
}

/* A tenant's values: its identity and weight, every row of fq_tenant_rows
 * with a stats key (the same values /metrics has), its token rate's wait
 * when it has one, and its refusals by reason. */
static void ad_stats_tenant(fq_json *w, const fq_admin_tenant *t, uint64_t now)
{
    const fq_tenant_info *ti = &t->info;
    fq_metrics_tenant m;
    memset(&m, 0, sizeof m);
    fq_metrics_tenant_set_info(&m, ti, now, 1e-3);
    m.completed_runs = t->completed;
    m.estimate_error = t->estimate_error;
    fq_json_begin_object(w);
    fq_json_key(w, "tenant");
    fq_json_string(w, t->id);
    fq_json_key(w, "plan");
    fq_json_string(w, t->plan);
    fq_json_key(w, "source");
    fq_json_string(w, fq_policy_source_name(t->source));
    AD_KV(w, "weight", ti->weight);
    for (size_t i = 0; i < fq_tenant_nrows; i++) {
        const fq_tenant_row *r = &fq_tenant_rows[i];
        const void *v = (const char *)&m + r->off;
        if (!r->stats_key)
            continue;
        fq_json_key(w, r->stats_key);
        if (r->kind == FQ_TV_U64)
            fq_json_int(w, (int64_t)*(const uint64_t *)v);
        else if (r->kind == FQ_TV_I64)
            fq_json_int(w, *(const int64_t *)v);
        else if (r->stats_scale > 0)
            fq_json_int(w, llround(*(const double *)v * r->stats_scale));
        else
            fq_json_double(w, *(const double *)v);
    }
    if (ti->rate_until)     /* with a token rate: how long until it may send */
        AD_KV(w, "rate_wait_ms", ti->rate_until > now ? ti->rate_until - now : 0);
    if (ti->subtenants) {   /* names only for one tenant, and a few: never a label */
        AD_KV(w, "subtenants", ti->subtenants);
        AD_KV(w, "active_subtenants", ti->active_subtenants);
    }
    ad_stats_top_subs(w, t);
    fq_json_key(w, "rejected");
    fq_json_begin_object(w);
    for (int s = 1; s < FQ__COUNT; s++)
        if (t->rejected[s])
            AD_KV(w, fq_status_code((fq_status)s), t->rejected[s]);
    fq_json_end_object(w);
    fq_json_end_object(w);
}

/* The overall section: every row of fq_overall_rows with a stats key. */
static void ad_stats_overall(fq_json *w, const fq_metrics_overall *a)
{
    fq_json_key(w, "overall");
    fq_json_begin_object(w);
    for (size_t i = 0; i < fq_overall_nrows; i++) {
        const fq_overall_row *r = &fq_overall_rows[i];
        if (!r->stats_key)
            continue;
        fq_json_key(w, r->stats_key);
        if (r->kind == FQ_OV_FLAG)
            fq_json_bool(w, fq_overall_u64(r, a) != 0);
        else if (r->kind == FQ_OV_RATE)
            fq_json_double(w, fq_overall_rate(r, a));
        else
            fq_json_int(w, (int64_t)fq_overall_u64(r, a));
    }
    fq_json_end_object(w);
}

/* The stats reply for r into buf of cap bytes, which bounds it: the
 * overall section, then the selected tenants from r->offset on, as many
 * as fit, r->limit allows and FQ_ADMIN_STATS_PAGE_MAX bounds, and how
 * many were left out. *len: its length. now: monotonic ms. */
static fq_status ad_stats_json(fq_admin *a, const fq_stats_req *r, char *buf, size_t cap,
                               size_t *len, uint64_t now)
{
    const fq_admin_ops *o = &a->ops;
    fq_metrics_overall all;
    o->overall(o->arg, &all);
    size_t limit = r->limit < FQ_ADMIN_STATS_PAGE_MAX ? r->limit : FQ_ADMIN_STATS_PAGE_MAX;
    /* One tenant, or the ranking from offset on: found in O(log n), then
     * each row after it in O(1). */
    const void *one = r->tenant[0] ? o->tenant_find(o->arg, r->tenant) : NULL;
    size_t total = r->tenant[0] ? one != NULL : all.tenants;
    size_t i = r->offset < total ? r->offset : total, shown = 0;
    const void *t = i == total || !limit ? NULL : one ? one : o->tenant_at(o->arg, i);
    fq_json w;
    fq_json_init(&w, buf, cap);
    fq_json_begin_object(&w);
    ad_stats_overall(&w, &all);
    ad_replicas(&w, o);
    AD_KV(&w, "tenants_total", all.tenants);
    AD_KV(&w, "offset", r->offset);
    fq_json_key(&w, "tenants");
    fq_json_begin_array(&w);
    for (; t && shown < limit; i++, shown++) {
        /* The writer is a plain value over buf: a copy taken before a
         * tenant is a checkpoint to fall back to when it does not fit. */
        fq_json mark = w;
        fq_admin_tenant v;
        fq_sub_info top[FQ_ADMIN_TOP_SUBTENANTS];
        o->tenant_view(o->arg, t, true, &v);
        v.top_subs = top;
        v.n_top_subs = one && o->tenant_subs ? o->tenant_subs(o->arg, t, top, sizeof top /
                                                              sizeof top[0]) : 0;
        ad_stats_tenant(&w, &v, now);
        if (w.len + AD_STATS_TAIL >= cap) {
            w = mark;
            break;
        }
        t = one ? NULL : o->tenant_after(o->arg, t);
    }
    fq_json_end_array(&w);
    AD_KV(&w, "tenants_returned", shown);
    fq_json_key(&w, "truncated");
    fq_json_bool(&w, i < total);
    if (i < total)
        AD_KV(&w, "next_offset", i);
    fq_json_end_object(&w);
    return fq_json_finish(&w, len);
}

/* ---- explain ---------------------------------------------------------------- */

static const char *ad_state_name(enum fq_tenant_state st)
{
    switch (st) {
    case FQ_T_ACTIVE: return "active";
    case FQ_T_WAITING: return "waiting";
    case FQ_T_CAPPED: return "capped";
    case FQ_T_PARKED: return "parked";
    default: return "idle";
    }
}

/* What explain decides from e alone, before anything is written: the cap in
 * force (burst_in_flight while no other tenant has queued runs), whether the
 * window is full and whether the run waits in its queue. */
typedef struct ad_explain_facts {
    bool bursting;              /* burst_in_flight is the cap in force */
    uint32_t in_force;          /* the tenant's cap in force; 0: none */
    bool window_full;           /* at the window's run or token limit */
    bool waits;                 /* the run (or a run submitted now) is queued */
} ad_explain_facts;

static ad_explain_facts ad_explain_decide(const fq_explain *e)
{
    const fq_tenant_policy *pol = &e->policy;
    ad_explain_facts f;
    f.bursting = pol->burst_in_flight > pol->max_in_flight && pol->max_in_flight &&
                 e->others_queued == 0;
    f.in_force = f.bursting ? pol->burst_in_flight : pol->max_in_flight;
    f.window_full = (e->window_max_runs && e->window_runs >= e->window_max_runs) ||
                    (e->window_max_tokens && e->window_tokens >= e->window_max_tokens);
    f.waits = e->where == FQ_LW_QUEUED;
    return f;
}

/* What holds a queued run (or a run submitted now) of e's tenant, the first
 * that applies, as a sentence into why. */
static void ad_explain_why(char *why, size_t cap, const fq_explain *e, uint32_t in_force,
                           bool window_full, uint64_t now)
{
    const fq_tenant_info *ti = &e->info;
    const char *run = e->run_id[0] ? "the run" : "a run submitted now";
    if (!e->known || (!e->run_id[0] && !ti->queued && ti->state == FQ_T_IDLE &&
                      (!in_force || ti->in_flight < in_force) && !window_full &&
                      ti->deficit >= 0 && e->rate_wait_ms == 0))
        snprintf(why, cap, "nothing holds the tenant: %s goes at the next dispatch", run);
    else if (ti->state == FQ_T_CAPPED || (in_force && ti->in_flight >= in_force))
        snprintf(why, cap, "the tenant has %u run%s in flight, its cap (%s): %s waits for one "
                 "of them to complete", ti->in_flight, ti->in_flight == 1 ? "" : "s",
                 in_force == e->policy.max_in_flight ? "max_in_flight" : "burst_in_flight", run);
    else if (e->rate_wait_ms || (ti->state == FQ_T_PARKED && ti->rate_until > now))
        snprintf(why, cap, "the tenant is over its token rate (%u tokens a minute): %s may "
                 "go in %llu ms", e->policy.tokens_per_minute, run,
                 (unsigned long long)e->rate_wait_ms);
    else if (ti->state == FQ_T_PARKED)
        snprintf(why, cap, "the tenant is parked after a failed dispatch: %s waits until "
                 "its parking ends", run);
    else if (ti->state == FQ_T_WAITING)
        snprintf(why, cap, "the tenant is in debt (%lld tokens, its runs cost more than their "
                 "estimates): %s waits for the rounds that repay it", (long long)-ti->deficit,
                 run);
    else if (window_full)
        snprintf(why, cap, "the in-flight window is full: %s waits for a completion", run);
    else
        snprintf(why, cap, "the tenant is in the rotation: at most %llu tokens of it and the "
                 "other active tenants go before %s", (unsigned long long)e->tokens_ahead, run);
}

/* The run's own fields, when one was asked about. */
static void ad_explain_run(fq_json *w, const fq_explain *e)
{
    if (!e->run_id[0])
        return;
    fq_json_key(w, "run_id");
    fq_json_string(w, e->run_id);
    fq_json_key(w, "where");
    fq_json_string(w, fq_ledger_where_name(e->where));
    if (e->est)
        AD_KV(w, "est_tokens", e->est);
    if (e->subtenant[0]) {
        fq_json_key(w, "subtenant");
        fq_json_string(w, e->subtenant);
    }
}

/* The tenant's state and queue, and its sub-tenant's place, when known. */
static void ad_explain_tenant(fq_json *w, const fq_explain *e, const ad_explain_facts *f)
{
    const fq_tenant_info *ti = &e->info;
    fq_json_key(w, "known");
    fq_json_bool(w, e->known);
    if (!e->known)
        return;
    fq_json_key(w, "state");
    fq_json_string(w, ad_state_name(ti->state));
    AD_KV(w, "weight", ti->weight);
    AD_KV(w, "queued_runs", ti->queued);
    AD_KV(w, "queued_tokens", ti->queued_tokens);
    /* A queued run waits behind at most its tenant's other queued
     * runs (within a tenant and class runs leave in submit order, and
     * a lower class waits for a higher), a new one behind all of them:
     * a bound, not a position, which only a walk would find. */
    if (f->waits)
        AD_KV(w, "runs_ahead_at_most",
              e->run_id[0] ? (ti->queued ? ti->queued - 1 : 0) : ti->queued);
    AD_KV(w, "in_flight", ti->in_flight);
    AD_KV(w, "deficit", ti->deficit);
    AD_KV(w, "debt", ti->deficit < 0 ? -ti->deficit : 0);
    if (!e->sub_known)
        return;
    /* Its sub-tenant's place: behind at most its sub-tenant's other
     * queued runs, and a turn of each other active sub-tenant before
     * each of its own (a bound, as the tenant's). */
    fq_json_key(w, "subtenant_position");
    fq_json_begin_object(w);
    if (e->sub.overflow) {
        fq_json_key(w, "overflow");
        fq_json_bool(w, true);
    }
    AD_KV(w, "queued_runs", e->sub.queued);
    if (f->waits)
        AD_KV(w, "runs_ahead_at_most", e->sub.queued ? e->sub.queued - 1 : 0);
    AD_KV(w, "active_subtenants", ti->active_subtenants);
    AD_KV(w, "others_active", ti->active_subtenants - (e->sub.queued > 0));
    fq_json_end_object(w);
}

/* The limits that may hold it: the tenant's cap and rate, the window, and
 * the drain rate with the wait it gives. */
static void ad_explain_limits(fq_json *w, const fq_explain *e, const ad_explain_facts *f)
{
    const fq_tenant_policy *pol = &e->policy;
    if (pol->max_in_flight) {
        fq_json_key(w, "cap");
        fq_json_begin_object(w);
        AD_KV(w, "max_in_flight", pol->max_in_flight);
        if (pol->burst_in_flight)
            AD_KV(w, "burst_in_flight", pol->burst_in_flight);
        AD_KV(w, "in_force", f->in_force);
        fq_json_key(w, "bursting");
        fq_json_bool(w, f->bursting);
        fq_json_key(w, "at_cap");
        fq_json_bool(w, e->known && e->info.in_flight >= f->in_force);
        fq_json_end_object(w);
    }
    if (pol->tokens_per_minute) {
        AD_KV(w, "tokens_per_minute", pol->tokens_per_minute);
        AD_KV(w, "rate_wait_ms", e->rate_wait_ms);
    }
    fq_json_key(w, "window");
    fq_json_begin_object(w);
    AD_KV(w, "in_flight_runs", e->window_runs);
    AD_KV(w, "max_runs", e->window_max_runs);
    AD_KV(w, "in_flight_tokens", e->window_tokens);
    AD_KV(w, "max_tokens", e->window_max_tokens);
    fq_json_key(w, "full");
    fq_json_bool(w, f->window_full);
    fq_json_end_object(w);
    fq_json_key(w, "drain_tokens_per_sec");
    fq_json_double(w, e->drain_tokens_per_sec);
    if (f->waits) {
        AD_KV(w, "tokens_ahead_at_most", e->tokens_ahead);
        fq_json_key(w, "estimated_wait_ms");
        if (e->wait_known || e->wait_ms)
            fq_json_int(w, (int64_t)(e->wait_ms > INT64_MAX ? INT64_MAX : e->wait_ms));
        else
            fq_json_null(w);
    }
}

/* Where the run is, said once for each place that is not a queue; a queued
 * run (or one submitted now) is explained by what holds it. */
static const char *const ad_where_why[] = {
    [FQ_LW_UNKNOWN] = "fairq holds no such run of the tenant: not submitted yet, refused "
                      "(see its refusals), or completed before fairq last forgot it",
    [FQ_LW_IN_FLIGHT] = "dispatched: a worker has it",
    [FQ_LW_EXPIRED] = "dispatched, and its lease ran out before a completion: a late "
                      "completion still counts",
    [FQ_LW_DONE] = "completed",
};

fq_status fq_admin_explain_json(char *buf, size_t cap, size_t *len, const fq_explain *e,
                                uint64_t now)
{
    ad_explain_facts f = ad_explain_decide(e);
    fq_json w;
    ad_begin(&w, buf, cap, true);
    fq_json_key(&w, "tenant");
    fq_json_string(&w, e->tenant);
    ad_explain_run(&w, e);
    ad_explain_tenant(&w, e, &f);
    ad_explain_limits(&w, e, &f);
    char why[320];
    size_t wi = (size_t)e->where;
    if (wi < sizeof ad_where_why / sizeof *ad_where_why && ad_where_why[wi])
        snprintf(why, sizeof why, "%s", ad_where_why[wi]);
    else
        ad_explain_why(why, sizeof why, e, f.in_force, f.window_full, now);
    fq_json_key(&w, "why");
    fq_json_string(&w, why);
    fq_json_end_object(&w);
    return fq_json_finish(&w, len);
}

void fq_admin_explain(fq_admin *a, const char *explain, const char *subject, const void *body,
                      size_t len, const void *req, uint64_t now)
{
    ad_req q = {a, subject, body, len, req, now};
    size_t pl = strlen(explain);
    const char *tenant = strncmp(subject, explain, pl) == 0 && subject[pl] == '.'
                         ? subject + pl + 1 : "";
    fq_explain_req r;
    char err[256];
    if (len > FQ_ADMIN_BODY_MAX) {
        snprintf(err, sizeof err, "the request body is %zu bytes; explain requests take at "
                 "most %d bytes", len, FQ_ADMIN_BODY_MAX);
        a->c.too_long++;
        ad_error(&q, err);
        return;
    }
    if (!fq_tenant_id_valid(tenant, strlen(tenant))) {
        a->c.invalid++;
        ad_error(&q, "the subject names no valid tenant: explain requests go to "
                 "<explain>.<tenant>");
        return;
    }
    if (fq_explain_req_parse(&r, body, len, err, sizeof err) != FQ_OK) {
        a->c.invalid++;
        ad_error(&q, err);
        return;
    }
    fq_bucket *slot = &a->explain[fq_fnv1a(tenant) % AD_EXPLAIN_SLOTS];
    if (!ad_take(&q, slot, AD_EXPLAIN_TENANT_RATE, "explain", " for one tenant") ||
        !ad_allow(&q, AD_EXPLAIN))
        return;
    fq_explain e = {.tenant = tenant, .run_id = r.run_id};
    a->ops.explain(a->ops.arg, tenant, r.run_id, &e, now);
    e.tenant = tenant;
    e.run_id = r.run_id;
    char buf[AD_REPLY_MAX];
    size_t n = 0;
    if (fq_admin_explain_json(buf, sizeof buf, &n, &e, now) == FQ_OK)
        ad_send(a, req, subject, buf, n, now);
    else
        ad_error(&q, "the reply did not fit");
}

/* ---- the requests ----------------------------------------------------------- */

static void ad_stats(const ad_req *q)
{
    fq_stats_req r;
    char err[256];
    if (fq_stats_req_parse(&r, q->body, q->len, err, sizeof err) != FQ_OK) {
        q->a->c.invalid++;
        ad_error(q, err);
        return;
    }
    /* The overall section alone, or one tenant, costs what a reply does. */
    if (!r.tenant[0] && r.limit && !ad_allow(q, AD_STATS))
        return;
    /* The reply is bounded by the server's max_payload, less a margin. */
    fq_metrics_overall all;
    q->a->ops.overall(q->a->ops.arg, &all);
    size_t mp = (size_t)all.max_payload, len = 0;
    size_t cap = mp > 2 * AD_REPLY_MARGIN ? mp - AD_REPLY_MARGIN : mp / 2;
    char *buf = malloc(cap);
    fq_status s = buf ? ad_stats_json(q->a, &r, buf, cap, &len, q->now) : FQ_ENOMEM;
    if (s == FQ_OK)
        ad_send(q->a, q->req, q->subject, buf, len, q->now);
    else
        ad_error(q, fq_status_text(s));
    free(buf);
}

static void ad_reload(const ad_req *q)
{
    char restart[512], err[1024];
    if (!ad_allow(q, AD_RELOAD))
        return;
    if (q->a->ops.reload(q->a->ops.arg, restart, sizeof restart, err, sizeof err) != FQ_OK) {
        ad_error(q, err);
        return;
    }
    fq_metrics_overall all;
    q->a->ops.overall(q->a->ops.arg, &all);
    char buf[AD_REPLY_MAX + AD_REPLICAS_MAX];
    fq_json w;
    ad_begin(&w, buf, sizeof buf, true);
    ad_replicas(&w, &q->a->ops);
    fq_json_key(&w, "restart_needed");
    fq_json_begin_array(&w);
    for (char *k = restart, *end; *k; k = *end ? end + 1 : end) {
        end = strchr(k, ',');
        if (!end)
            end = k + strlen(k);
        fq_json_stringn(&w, k, (size_t)(end - k));
    }
    fq_json_end_array(&w);
    AD_KV(&w, "reloads", all.config_reloads);
    fq_json_end_object(&w);
    ad_reply(q, &w);
}

/* A tenant's policy in force, field by field, which layer set it, and its
 * override. */
static void ad_tenant_reply(const ad_req *q, const char *tenant)
{
    fq_policy_resolved pr;
    fq_status s = fq_policy_resolve(&pr, q->a->ops.policy(q->a->ops.arg), tenant);
    if (s != FQ_OK) {
        ad_error(q, s == FQ_EUNKNOWN
                 ? "the tenant is listed nowhere and scheduler.unknown_tenants is reject"
                 : fq_status_text(s));
        return;
    }
    const fq_tenant_entry *o = fq_ovr_find(q->a->ovr, tenant, NULL);
    char buf[AD_REPLY_MAX];
    fq_json w;
    ad_begin(&w, buf, sizeof buf, true);
    fq_json_key(&w, "tenant");
    fq_json_string(&w, tenant);
    fq_json_key(&w, "plan");
    fq_json_string(&w, pr.plan);
    AD_KV(&w, "weight", pr.p.weight);
    AD_KV(&w, "max_in_flight", pr.p.max_in_flight);
    AD_KV(&w, "max_pending", pr.p.max_pending);
    if (pr.p.burst_in_flight)
        AD_KV(&w, "burst_in_flight", pr.p.burst_in_flight);
    if (pr.p.tokens_per_minute)
        AD_KV(&w, "tokens_per_minute", pr.p.tokens_per_minute);
    if (pr.p.max_subtenants)
        AD_KV(&w, "max_subtenants", pr.p.max_subtenants);
    if (pr.p.class_weight[0]) {     /* weighted classes; strict is not listed */
        fq_class_weights cw = {.set = true};
        char text[48];
        memcpy(cw.w, pr.p.class_weight, sizeof cw.w);
        fq_class_weights_format(text, sizeof text, &cw);
        fq_json_key(&w, "class_weights");
        fq_json_string(&w, text);
    }
    if (pr.class_max_pending.set) {     /* else scheduler.classes' */
        char text[48];
        fq_class_pending_format(text, sizeof text, &pr.class_max_pending);
        fq_json_key(&w, "class_max_pending");
        fq_json_string(&w, text);
    }
    if (pr.prices.input != 1 || pr.prices.output != 1 || pr.prices.cached != 1) {
        AD_KV(&w, "price_input", pr.prices.input);
        AD_KV(&w, "price_output", pr.prices.output);
        AD_KV(&w, "price_cached", pr.prices.cached);
    }
    fq_json_key(&w, "source");
    fq_json_string(&w, fq_policy_source_name(pr.source));
    fq_json_key(&w, "override");
    if (o)
        fq_ovr_entry_json(&w, o);
    else
        fq_json_null(&w);
    fq_json_end_object(&w);
    ad_reply(q, &w);
}

static void ad_get(const ad_req *q)
{
    fq_override_patch pt;
    char err[256];
    if (fq_override_patch_parse(&pt, q->body, q->len, FQ_PATCH_GET, FQ_POLICY_MAX_WEIGHT, err,
                                sizeof err) != FQ_OK) {
        q->a->c.invalid++;
        ad_error(q, err);
    } else
        ad_tenant_reply(q, pt.tenant);
}

/* Change a tenant's override: validated, stored in the bucket and put in
 * force by the proxy (the watch's echo of it changes nothing). */
static void ad_set(const ad_req *q)
{
    const fq_admin_ops *o = &q->a->ops;
    fq_override_patch pt;
    fq_ovr_write w;
    char err[512];
    if (fq_override_patch_parse(&pt, q->body, q->len, FQ_PATCH_SET, FQ_POLICY_MAX_WEIGHT, err,
                                sizeof err) != FQ_OK ||
        fq_ovr_plan(&w, q->a->ovr, o->policy(o->arg), &pt, err, sizeof err) != FQ_OK) {
        q->a->c.invalid++;
        ad_error(q, err);
        return;
    }
    if (w.changes && !o->fresh(o->arg)) {
        ad_error(q, "this proxy cannot renew its leader lease now and changes nothing until "
                 "it does: retry");
        return;
    }
    if (w.changes && !ad_allow(q, AD_SET))
        return;
    if (w.changes && o->ovr_write(o->arg, &w, err, sizeof err) != FQ_OK) {
        ad_error(q, err);
        return;
    }
    ad_tenant_reply(q, pt.tenant);
}

void fq_admin_request(fq_admin *a, const char *subject, const void *body, size_t len,
                      const void *req, uint64_t now)
{
    static const struct {
        const char *name;
        void (*fn)(const ad_req *q);
    } routes[] = {
        {FQ_ADMIN_STATS, ad_stats},
        {FQ_ADMIN_RELOAD, ad_reload},
        {FQ_ADMIN_TENANT_GET, ad_get},
        {FQ_ADMIN_TENANT_SET, ad_set},
    };
    ad_req q = {a, subject, body, len, req, now};
    size_t pl = strlen(a->prefix), i = 0;
    const char *what = strncmp(subject, a->prefix, pl) == 0 && subject[pl] == '.'
                       ? subject + pl + 1 : "";
    while (i < sizeof routes / sizeof routes[0] && strcmp(what, routes[i].name) != 0)
        i++;
    if (len > FQ_ADMIN_BODY_MAX) {
        /* Parsed on the loop, and a valid body is small: a long one is
         * refused before any work, whatever it asks. */
        char why[128];
        snprintf(why, sizeof why, "the request body is %zu bytes; admin requests take at "
                 "most %d bytes", len, FQ_ADMIN_BODY_MAX);
        a->c.too_long++;
        ad_error(&q, why);
    } else if (i < sizeof routes / sizeof routes[0]) {
        routes[i].fn(&q);
    } else {
        a->c.invalid++;
        ad_error(&q, "unknown admin request: the subjects are <admin>.stats, <admin>.reload, "
                 "<admin>.tenant.get and <admin>.tenant.set");
    }
}
