/* admin.h -- the admin plane: requests on <admin>.>, their rate limits, and the stats reply. */
#ifndef FQ_ADMIN_H
#define FQ_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "drr.h"
#include "fq.h"
#include "ledger.h"
#include "metrics.h"
#include "overrides.h"
#include "policy.h"

/*
 * The proxy hands each request (subject, body, an opaque handle) to
 * fq_admin_request on its loop; the module routes it, parses it through
 * lib/msg.c, rate limits the costly ones, builds the reply and sends it
 * through the proxy's reply callback. It reads the proxy's tenants and
 * counters only through fq_admin_ops, and keeps its own state: the rate
 * buckets and its counters. Time is an argument (monotonic ms).
 */

#define FQ_ADMIN_QUEUED 64          /* admin requests waiting for the loop; past it natsio
                                       answers busy (fq_admin_busy_queued), so a turn
                                       sees at most this many */
#define FQ_ADMIN_BODY_MAX 4096      /* an admin request's body, at most: refused unread past it */
#define FQ_ADMIN_STATS_PAGE_MAX 500 /* tenants in one stats reply at most */
#define FQ_ADMIN_TOP_SUBTENANTS 5   /* sub-tenants a stats reply about one tenant lists */

/* natsio's answer to a request past FQ_ADMIN_QUEUED waiting. */
extern const char fq_admin_busy_queued[];

/* A tenant as the stats reply shows it. Strings are valid until the loop
 * next changes its tenants. */
typedef struct fq_admin_tenant {
    const char *id;
    const char *plan;
    enum fq_policy_source source;   /* which layer set its policy */
    fq_tenant_info info;            /* the scheduler's view */
    const uint64_t *rejected;       /* refused runs by reason, [FQ__COUNT] */
    uint64_t completed;             /* completions reconciled */
    double estimate_error;          /* actual / estimated; NaN: not known */
    const fq_sub_info *top_subs;    /* its sub-tenants with the most queued, most
                                       first (a reply about it alone); NULL: none */
    size_t n_top_subs;
} fq_admin_tenant;

/* What an explain reply (<explain>.<tenant>) is built from: the proxy's
 * facts about a tenant and, if asked, one of its runs, each read in O(1)
 * (no walk of a queue or of the tenants). */
typedef struct fq_explain {
    const char *tenant;
    const char *run_id;             /* "": the tenant as a whole (a run submitted now) */
    bool known;                     /* the scheduler knows the tenant: info holds */
    fq_tenant_info info;            /* the scheduler's view of it */
    fq_tenant_policy policy;        /* its policy in force (caps, rate) */
    uint32_t others_queued;         /* other tenants with queued runs: its
                                       burst_in_flight applies only at 0 */
    enum fq_ledger_where where;     /* the run's; FQ_LW_QUEUED for the tenant */
    uint32_t est;                   /* the run's charged tokens (0: the tenant) */
    uint64_t tokens_ahead;          /* tokens served before it, at most (fq_sched_tokens_ahead) */
    uint64_t rate_wait_ms;          /* its token rate alone holds it this long */
    uint64_t wait_ms;               /* its estimated wait (fq_ledger_wait_ms) */
    bool wait_known;                /* a drain rate is known (else wait_ms is the
                                       rate's wait alone) */
    double drain_tokens_per_sec;    /* recent dispatch rate, tokens a second */
    uint32_t window_runs, window_max_runs;      /* in flight, limit (0: none) */
    uint64_t window_tokens, window_max_tokens;  /* in flight, limit (0: none) */
    bool sub_known;                 /* the run's sub-tenant is known: sub holds */
    fq_sub_info sub;                /* ... the one its runs join (overflow past the cap) */
    char subtenant[FQ_SUBTENANT_MAX + 1]; /* the sub-tenant the run claims ("" none) */
} fq_explain;

/* What the module reads of the proxy, and the work only the proxy does. */
typedef struct fq_admin_ops {
    void *arg;                      /* every callback's first argument */
    /* The tenant at position i of the stats ranking, or NULL past the last:
     * those with queued runs by queued tokens (most first), then their
     * oldest queued run (oldest first), then by id; then the idle ones in
     * the order fairq first saw them (fq_sched_rank_at). O(log n). */
    const void *(*tenant_at)(void *arg, size_t i);
    /* The tenant after t (from tenant_at or tenant_after) in the ranking,
     * or NULL. O(1) amortised. */
    const void *(*tenant_after)(void *arg, const void *t);
    /* The tenant named id, or NULL. */
    const void *(*tenant_find)(void *arg, const char *id);
    /* t's view: id and info only unless full. */
    void (*tenant_view)(void *arg, const void *t, bool full, fq_admin_tenant *out);
    /* Up to n of t's sub-tenants with the most queued runs, most first
     * (fq_sched_sub_top); how many. NULL: none shown. */
    size_t (*tenant_subs)(void *arg, const void *t, fq_sub_info *out, size_t n);
    /* The proxy as a whole now (its admin_* counters from fq_admin_counters). */
    void (*overall)(void *arg, fq_metrics_overall *out);
    /* The policy in force. */
    const fq_policy *(*policy)(void *arg);
    /* The lease is fresh: a change may be made. */
    bool (*fresh)(void *arg);
    /* Send data as the reply to req. */
    fq_status (*reply)(void *arg, const void *req, const char *data, size_t len);
    /* Read the config again (FQ_OK: the settings only a restart applies in
     * restart, comma-separated; else err says why). */
    fq_status (*reload)(void *arg, char *restart, size_t rcap, char *err, size_t errlen);
    /* Write w into the overrides bucket, compare-and-set, and put it in
     * force (fq_ovr_stored); else err says why. */
    fq_status (*ovr_write)(void *arg, const fq_ovr_write *w, char *err, size_t errlen);
    /* Fill out with what the proxy knows of tenant and, unless run_id is
     * "", of its run run_id, both valid; out->tenant and run_id are set. */
    void (*explain)(void *arg, const char *tenant, const char *run_id, fq_explain *out,
                    uint64_t now);
    /* This replica's id; NULL (the callback or its answer): the stats and
     * reload replies name no replica. */
    const char *(*replica_id)(void *arg);
    /* The i-th replica alive in its view (its own among them), or NULL
     * past the last: the stats and reload replies list them, so that
     * fairq-admin can ask each (stats --all, reload). */
    const char *(*replica_at)(void *arg, size_t i);
} fq_admin_ops;

/* What the module counts (monotonic). */
typedef struct fq_admin_counters {
    uint64_t busy;                  /* requests answered busy for their rate (natsio
                                       counts those refused on arrival) */
    uint64_t too_long;              /* requests past FQ_ADMIN_BODY_MAX, refused unread */
    uint64_t invalid;               /* requests refused for what they ask: a subject
                                       naming no request or no valid tenant, a body
                                       or field that is not valid */
    uint64_t reply_failures;        /* replies not sent */
} fq_admin_counters;

typedef struct fq_admin fq_admin;

/* prefix: the admin subject (requests are <prefix>.stats, ...); ovr: the
 * overrides, read for tenant.get and tenant.set; now: monotonic ms. */
fq_status fq_admin_create(fq_admin **out, const char *prefix, const fq_ovr_set *ovr,
                          const fq_admin_ops *ops, uint64_t now);
/* Safe on NULL. */
void fq_admin_destroy(fq_admin *a);

/* Answer one request on subject with body[0..len); req is the proxy's
 * handle of it, passed back to ops->reply. */
void fq_admin_request(fq_admin *a, const char *subject, const void *body, size_t len,
                      const void *req, uint64_t now);

/* Answer one explain request: subject is <explain>.<tenant>, explain its
 * prefix (subjects.explain). Rate limited like the admin plane's costly
 * requests, with its own bucket. */
void fq_admin_explain(fq_admin *a, const char *explain, const char *subject, const void *body,
                      size_t len, const void *req, uint64_t now);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The explain reply for e into buf of cap bytes: where the run is, its
 * tenant's state, the window's, what holds it (a sentence), and its
 * estimated wait. *len: its length. Pure: no I/O, e alone. now: monotonic ms. */
fq_status fq_admin_explain_json(char *buf, size_t cap, size_t *len, const fq_explain *e,
                                uint64_t now);
#endif

const fq_admin_counters *fq_admin_counters_get(const fq_admin *a);

#endif
