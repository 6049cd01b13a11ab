/* drr.h -- token-metered deficit round robin over per-tenant virtual queues. */
#ifndef FQ_DRR_H
#define FQ_DRR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "run.h"

typedef struct fq_sched fq_sched;
typedef struct fq_tenant fq_tenant;

/* Priority classes within a tenant, at most. */
#define FQ_SCHED_MAX_CLASSES 4
/* The largest weight of a class within its tenant. */
#define FQ_SCHED_MAX_CLASS_WEIGHT 1000u

/* A tenant's policy as the scheduler applies it (lib/policy resolves it
 * from plans and overrides). */
typedef struct fq_tenant_policy {
    uint32_t weight;            /* quantum = base quantum x weight; 1..FQ_SCHED_MAX_WEIGHT */
    uint32_t max_in_flight;     /* per-tenant concurrency cap; 0 = none */
    uint32_t max_pending;       /* queued runs allowed; 0 = none */
    uint32_t burst_in_flight;   /* the cap while no other tenant has queued
                                   runs, where above max_in_flight (which must
                                   be set); 0 = none: max_in_flight always */
    uint32_t tokens_per_minute; /* token rate (GCRA, a minute's tokens of
                                   burst); 0 = none */
    uint32_t max_subtenants;    /* sub-tenants its runs are shared among, at
                                   most the scheduler's max_subtenants; 0 =
                                   none: its runs one FIFO, names ignored */
    uint16_t class_weight[FQ_SCHED_MAX_CLASSES]; /* with classes: [0] 0 =
                                   strict priority; else DRR in tokens over
                                   the tenant's classes, class c's quantum
                                   times class_weight[c] (at most
                                   FQ_SCHED_MAX_CLASS_WEIGHT; 0 as 1) */
} fq_tenant_policy;

/* Limits that keep quantum x weight, and so every deficit, far from
 * int64 overflow (their product is at most 10^15). */
#define FQ_SCHED_MAX_WEIGHT 1000000u
#define FQ_SCHED_MAX_QUANTUM 1000000000u

typedef struct fq_sched_opts {
    uint32_t quantum;           /* base quantum in tokens; 1..FQ_SCHED_MAX_QUANTUM */
    uint32_t max_est_tokens;    /* charges are capped here; >= 1 */
    uint32_t max_in_flight;     /* window in runs; 0 = unlimited */
    uint64_t max_in_flight_tokens; /* window in tokens; 0 = unlimited */
    uint64_t run_timeout;       /* lease, in the caller's time unit; 0 = none */
    uint32_t max_expired;       /* expired runs remembered for late completions */
    uint64_t expired_keep;      /* ... for this long past their lease's end at most
                                   (the run_timeout unit); 0: no limit but max_expired */
    uint64_t minute;            /* the caller's time units in a minute, for
                                   token rates; 0: 60,000 (milliseconds) */
    uint32_t max_subtenants;    /* sub-tenants a tenant's runs are shared fairly
                                   among (DRR in tokens, within each class),
                                   at most, whatever its policy says; past its
                                   cap, new ones share one; 0: none (read at
                                   create only) */
    uint32_t nclasses;          /* priority classes within a tenant, 0 or 1:
                                   none; read at create only (the order of
                                   queued runs depends on it); with
                                   max_subtenants too, classes first */
    uint32_t class_max_pending[FQ_SCHED_MAX_CLASSES]; /* queued runs of a tenant
                                   in each class; 0 = none (the tenant's
                                   max_pending still applies to all) */
    bool keep_idle_credit;      /* no idle reset: only for the simulator's
                                   comparison of what the reset is worth */
    bool caller_runs;           /* runs are the caller's records (fq_sched_give_run):
                                   none is allocated or freed here, and none is indexed
                                   by id (the caller finds its own and names them by
                                   record: fq_sched_*_run); read at create only */
    uint64_t seed;              /* of the tenant table's hash, read at create
                                   only: random where clients choose tenant
                                   ids (the proxy), 0 in tests and the simulator */
} fq_sched_opts;

/* Where a tenant is. Exactly one holds at any time. */
enum fq_tenant_state {
    FQ_T_IDLE = 0,      /* nothing queued */
    FQ_T_ACTIVE,        /* on the active list, in the rotation */
    FQ_T_WAITING,       /* in debt: waits outside the rotation for its round */
    FQ_T_CAPPED,        /* at its cap (max_in_flight, or burst_in_flight
                           while no other tenant has queued runs): out of
                           the rotation */
    FQ_T_PARKED,        /* parked (fq_sched_park, or over its token rate):
                           out of the rotation until a time */
};

/* A read-only view of a tenant, for stats and tests. */
typedef struct fq_tenant_info {
    const char *id;
    enum fq_tenant_state state;
    uint32_t weight;
    int64_t deficit;            /* signed: debt is negative */
    uint32_t queued;            /* runs */
    uint32_t class_queued[FQ_SCHED_MAX_CLASSES]; /* ... in each priority class
                                   (with classes configured; else 0) */
    uint32_t subtenants;        /* sub-tenants known (with max_subtenants) */
    uint32_t active_subtenants; /* ... of them with queued runs */
    uint64_t queued_tokens;
    uint32_t in_flight;         /* runs holding a window slot */
    uint64_t oldest_enqueued;   /* enqueue time of the head run; 0 if none */
    uint64_t dispatched;        /* runs, total */
    uint64_t charged_tokens;    /* estimates charged, total */
    uint64_t actual_tokens;     /* actual tokens reported, total */
    uint64_t priced_tokens;     /* their priced cost, reconciled, total (the
                                   actual tokens where nothing is priced) */
    uint64_t expired;           /* leases that expired */
    uint64_t rate_until;        /* with a token rate: the time (dispatch's
                                   unit) before which it may not send; 0 if none */
} fq_tenant_info;

/* What a completion returns to the caller (the run is freed by then). */
typedef struct fq_done {
    fq_tenant *tenant;
    void *handle;
    uint32_t est;               /* the estimate that was charged */
    bool expired;               /* its lease had expired before */
} fq_done;

typedef struct fq_sched_stats {
    uint64_t visits;            /* tenants examined by dispatch */
    uint64_t dispatched;        /* runs dispatched */
    uint64_t expired;           /* leases expired */
    uint64_t wakeups;           /* debtors woken for their round */
    uint64_t lane_visits;       /* sub-tenant level work, by enqueue and dispatch
                                   (with classes or sub-tenants): the lanes runs
                                   were put in and taken from, the slots of a
                                   tenant's index probed to find a run's
                                   sub-tenant, and those a pass forgetting idle
                                   sub-tenants read */
    uint32_t active;            /* tenants with queued runs (any state but idle) */
    uint32_t tenants;           /* tenants known */
    uint64_t queued;            /* runs queued */
    uint64_t queued_tokens;
    uint32_t in_flight;         /* runs holding a window slot */
    uint64_t in_flight_tokens;
    uint32_t expired_held;      /* runs whose lease expired, remembered for a late
                                   completion (up to max_expired, for expired_keep) */
    uint64_t round;             /* current DRR round */
    uint32_t parked;            /* tenants out of the rotation until a time */
    uint64_t active_weight;     /* the weights of the tenants with queued runs,
                                   summed (a replica's heartbeat, lib/share) */
} fq_sched_stats;

/* Create a scheduler. On error *out is NULL and the status says why. */
fq_status fq_sched_create(fq_sched **out, const fq_sched_opts *o);
/* Free the scheduler and every run and tenant it holds. Safe on NULL. */
void fq_sched_destroy(fq_sched *s);
/* Change the window, quantum and charge cap at run time; queued and
 * in-flight runs are kept; new quanta apply from each tenant's next grant. */
fq_status fq_sched_set_opts(fq_sched *s, const fq_sched_opts *o);

/* Change only the window (0: unlimited), as lib/share does every heartbeat
 * period: runs in flight are kept, and a window that shrank below them only
 * stops dispatch until they complete. O(1), no allocation; the limits
 * apply until the next call or fq_sched_set_opts. */
void fq_sched_set_window(fq_sched *s, uint32_t max_in_flight, uint64_t max_in_flight_tokens);

/* Find the tenant named id, creating it with policy p when it is new (p is
 * ignored for a known tenant). On error *out is NULL and nothing changed. */
fq_status fq_sched_tenant(fq_tenant **out, fq_sched *s, const char *id, size_t len,
                          const fq_tenant_policy *p);
/* Forget a tenant that holds nothing: idle, no run queued, in flight or
 * expired and awaiting its completion, and a deficit of zero (no debt to
 * escape, no credit to lose). t is freed; the id is new if it comes again.
 * FQ_EEXIST: it still holds something, and nothing changed. */
fq_status fq_sched_tenant_remove(fq_sched *s, fq_tenant *t);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Find a known tenant, or NULL. */
fq_tenant *fq_sched_find(fq_sched *s, const char *id, size_t len);
#endif
/* Apply a new policy; it takes effect from the tenant's next visit, without
 * losing its place or its queued runs. */
fq_status fq_tenant_set_policy(fq_sched *s, fq_tenant *t, const fq_tenant_policy *p);
void fq_tenant_info_get(const fq_tenant *t, fq_tenant_info *out);

/* Queue a run at the tail of its tenant's queue, charging est tokens
 * (capped at max_est_tokens, at least 1). id must be unique among the runs
 * the caller holds. FQ_EFULL: the tenant has max_pending queued; nothing is
 * added. On success *out (if given) is the queued run. */
fq_status fq_sched_enqueue(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                           uint32_t est, void *handle, uint64_t now);

/* The same, in priority class cls (0: the highest; < nclasses), as a run
 * of t's sub-tenant sub[0..len) (len 0: the tenant's runs that name none,
 * one sub-tenant of their own; sub is ignored without sub-tenants). Within
 * its tenant a run leaves after the runs back from the window
 * (fq_sched_requeue), then:
 *  - by class: the highest class with queued runs goes first (strict, the
 *    tenant policy's class_weight[0] 0), or the classes take turns by DRR
 *    in tokens at their class weights (weighted);
 *  - within the class, by sub-tenant: DRR in estimated tokens over the
 *    class's active sub-tenants, each granted the same quantum a turn (the
 *    largest estimate queued in the tenant since its lanes were last
 *    empty; a class's turn is that times its weight), and one that starts
 *    queuing is served at its class's next turn, before those that have
 *    had a turn (fq_codel's new list), unless it was served in the current
 *    round already; within one sub-tenant and class, in submit order.
 * So an interactive run of any of a tenant's users leaves before that
 * tenant's batch runs, and one user's flood delays a colleague's first run
 * by at most one run (one quantum) of each sub-tenant ahead of it. Across
 * tenants nothing changes: a run of any class or sub-tenant spends its
 * tenant's deficit, so classes and sub-tenants divide its share, never
 * enlarge it.
 * A tenant knows at most max_subtenants sub-tenants, the lower of the
 * scheduler's and its policy's, read at each enqueue (active, or idle
 * while the tenant has runs queued or while it owes a turn); runs of new ones past that share one
 * overflow sub-tenant. With either max_subtenants 0 the name is ignored:
 * the run is the tenant's that name none (runs of sub-tenants known
 * before its cap was lowered to 0 keep their place and leave in turn).
 * O(1) per enqueue and dispatch: the sub-tenant is found in a per-tenant
 * index of at most max_subtenants.
 * FQ_EINVAL: cls out of range, or (with sub-tenants) a name longer than
 * FQ_SCHED_SUB_MAX or with a byte outside 0x21..0x7e; FQ_EFULL: the tenant
 * has max_pending queued, or class_max_pending[cls] of that class; nothing
 * is added. */
fq_status fq_sched_enqueue_sub(fq_run **out, fq_sched *s, fq_tenant *t, const char *sub,
                               size_t len, uint32_t cls, uint64_t id, uint32_t est,
                               void *handle, uint64_t now);
/* Sub-tenants (max_subtenants > 0). The longest name of one. */
#define FQ_SCHED_SUB_MAX 64

/* A sub-tenant as stats and explain show it. */
typedef struct fq_sub_info {
    char name[FQ_SCHED_SUB_MAX + 1]; /* "": the runs that name none, or the overflow one */
    bool overflow;              /* the one that new sub-tenants past the cap share */
    uint32_t queued;            /* runs queued */
} fq_sub_info;

/* The sub-tenant of t that runs naming sub[0..len) join now: the one so
 * named (len 0: the runs that name none), else the overflow one where new
 * ones go there. FQ_ENOTFOUND if it has none (not known, or t has no
 * sub-tenants). O(1). */
fq_status fq_sched_sub_info(fq_sub_info *out, const fq_sched *s, const fq_tenant *t,
                            const char *sub, size_t len);
/* The sub-tenant queued run r waits in (the one its claim joined at
 * enqueue: named, the runs naming none, or the overflow one), found from
 * the run, so that it is known without the run's claim (a run whose body
 * the caller did not keep). FQ_ENOTFOUND if r is not queued in its
 * tenant's lanes (not queued, no sub-tenants, or back from the window at
 * the head of its tenant's queue). O(1). */
fq_status fq_sched_run_sub_info(fq_sub_info *out, const fq_sched *s, const fq_run *r);
/* Up to n of t's sub-tenants with queued runs, those with the most first
 * (ties in no set order); returns how many. O(max_subtenants x n): for an
 * admin request about one tenant, not a hot path. */
size_t fq_sched_sub_top(fq_sub_info *out, size_t n, const fq_sched *s, const fq_tenant *t);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* fq_sched_enqueue_sub with no sub-tenant. fq_sched_enqueue queues in
 * class nclasses - 1 (the lowest), or 0 without classes. */
fq_status fq_sched_enqueue_class(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                                 uint32_t cls, uint32_t est, void *handle, uint64_t now);
#endif

/* With caller_runs, the caller embeds an fq_run in its own record of each
 * run, so that a run is one record, one allocation, and hands it over
 * before each call that takes a run in (fq_sched_enqueue*, fq_sched_adopt*):
 * that call makes r its run (r is the scheduler's from then on until the
 * run is completed, cancelled, forgotten or evicted; its handle, if the
 * caller wants one, is what the call is given). A call that fails leaves r
 * the caller's, and the next hand-over replaces it. */
void fq_sched_give_run(fq_sched *s, fq_run *r);
/* Such a record's hnode is the caller's (an index of its own, by id, say):
 * the scheduler never touches it. A run it lets go has state FQ_RUN_FREE
 * (set as it is let go, before any callback hears of it), so the caller
 * tells from r->state whether the scheduler holds it. The scheduler keeps
 * no index by id then: the calls below that name a run by id find none
 * (fq_sched_run is NULL, the others FQ_ENOTFOUND, fq_sched_adopt* do not
 * check that the id is new); the caller names its runs by record with the
 * fq_sched_*_run forms, which do what the id forms do. */

/* Pick the next run by DRR and move it into the in-flight window with a
 * lease until now + run_timeout. NULL if nothing is queued, the window is
 * full, or every tenant with work is at its cap. The run stays valid until
 * it is completed, requeued or its expired record is evicted. */
fq_run *fq_sched_dispatch(fq_sched *s, uint64_t now);

/* A run's actual spend counts, for reconciliation, up to this many times
 * its estimate. */
#define FQ_ACTUAL_MAX_FACTOR 64

/* A completion: reconcile the tenant's deficit by actual - est exactly once
 * (actual capped at FQ_ACTUAL_MAX_FACTOR x est) and free the slot. FQ_ENOTFOUND if the run is not held (never dispatched,
 * completed already, or forgotten): nothing changes. */
fq_status fq_sched_complete(fq_done *out, fq_sched *s, uint64_t id, uint64_t actual);
/* The same for a run whose completion priced its token kinds: actual is
 * counted as reported, cost (in the estimates' unit) is reconciled. */
fq_status fq_sched_complete_priced(fq_done *out, fq_sched *s, uint64_t id, uint64_t actual,
                                   uint64_t cost);
fq_status fq_sched_complete_run(fq_done *out, fq_sched *s, fq_run *r, uint64_t actual,
                                uint64_t cost);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Reconcile a run the scheduler does not hold (dispatched before a restart)
 * from the estimate that was charged for it. The caller ensures once. */
void fq_tenant_reconcile(fq_sched *s, fq_tenant *t, uint32_t est, uint64_t actual);
void fq_tenant_reconcile_priced(fq_sched *s, fq_tenant *t, uint32_t est, uint64_t actual,
                                uint64_t cost);
#endif

/* Set the deficit of a tenant that holds nothing (idle, no run queued, in
 * flight or expired awaiting its completion) to debt: its debt read back
 * after a restart, or 0 when its debt is forgiven. FQ_EINVAL if debt is
 * positive or below -2^62 (credit is never banked, and deficits saturate
 * there); FQ_EEXIST if it holds something. Nothing changes on error. */
fq_status fq_tenant_set_debt(fq_sched *s, fq_tenant *t, int64_t debt);

/* Whether a tenant's debt (deficit < 0) that last changed at changed_at has
 * outlived its life at now, all in one time unit: a debt is not kept for
 * ever, or an idle tenant that once overran by one token would be
 * remembered for good. The caller forgives it only while the tenant holds
 * nothing (fq_tenant_set_debt checks). A time before changed_at (a clock
 * stepped back) is not past it. */
bool fq_debt_forgiven(int64_t deficit, int64_t changed_at, int64_t now, uint64_t life);

/* Take into the window a run dispatched before a restart (read back from
 * NATS): it holds a slot and counts against its tenant's cap from
 * dispatched_at, and is completed, expired or requeued like any other. Its
 * estimate was charged before the restart, so the deficit is not charged
 * again. FQ_EEXIST if a run with that id is in the window already; FQ_EFULL
 * if the window (runs or tokens, as fq_window_fits) or the tenant's cap has
 * no room left: the records read back are not trusted to fill it past its
 * limits, so the caller keeps such a run as expired instead. */
fq_status fq_sched_adopt(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                         uint32_t est, void *handle, uint64_t dispatched_at);

/* Take in, as expired, a run whose lease ended at expired_at (in the
 * caller's time unit) before a restart: it holds no slot, and a late
 * completion reconciles it once (fq_sched_complete); it is forgotten like
 * any expired run (fq_sched_expire). Its estimate was charged before the
 * restart. FQ_EEXIST if a run with that id is held already. */
fq_status fq_sched_adopt_expired(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                                 uint32_t est, void *handle, uint64_t expired_at);

/* Undo a dispatch that never reached the workers (a failed publish): the run,
 * in flight or expired since, goes back to the head of its tenant's queue
 * and its charge is refunded.
 * Runs requeued this way lead the queue in the order of their ids,
 * whatever order they come back in: the order they were queued in when a
 * tenant's ids increase as its runs are queued (the proxy's submit stream
 * sequences do). Its queue age counts from its dispatch from then on (from
 * its lease's end if it had expired). */
fq_status fq_sched_requeue(fq_sched *s, uint64_t id);
fq_status fq_sched_requeue_run(fq_sched *s, fq_run *r);

/* A run in the window (in flight, or expired) whose dispatch reached the
 * workers only at now: a run read back after a restart from the record of
 * an attempt that had failed, sent again and stored new. Its lease runs
 * from now; expired, it keeps no slot (the window's limits hold) and is
 * remembered as if its lease ended now. Its charge is unchanged.
 * FQ_ENOTFOUND if it is not in the window. */
fq_status fq_sched_redispatched(fq_sched *s, uint64_t id, uint64_t now);
fq_status fq_sched_redispatched_run(fq_sched *s, fq_run *r, uint64_t now);

/* Keep t out of the rotation until now >= until (in dispatch's time
 * unit), after one of its dispatches failed: its queue stays whole and in
 * order, its deficit and its runs in flight are kept, and the others are
 * served meanwhile. It leaves the rotation when dispatch next reaches it
 * (a requeued run makes that at once), and rejoins behind the tenants in
 * the rotation once until has passed. A later until extends the parking;
 * an earlier one changes nothing. */
void fq_sched_park(fq_sched *s, fq_tenant *t, uint64_t until);

/* Take back for good a dispatch that never reached the workers (the run
 * was refused or its body lost): the run leaves the window and is freed,
 * its charge is refunded (to an idle tenant at most up to zero, like any
 * refund) and it does not count as dispatched. FQ_ENOTFOUND if the run is
 * not in flight: nothing changes. */
fq_status fq_sched_cancel(fq_sched *s, uint64_t id);
fq_status fq_sched_cancel_run(fq_sched *s, fq_run *r);

/* Let go of a dispatched run (in flight, or expired) that another
 * scheduler now answers for (its partition moved to another replica): it
 * leaves the window, its slot freed, with no charge refunded or
 * reconciled. FQ_ENOTFOUND if it is not in the window. */
fq_status fq_sched_forget(fq_sched *s, uint64_t id);
fq_status fq_sched_forget_run(fq_sched *s, fq_run *r);

/* Let go of every tenant which(arg, t) picks (their partition moved):
 * each queued run, in the order dispatch would take it, is shown to cb (if
 * given) and freed, and the tenant is left idle with a deficit of zero
 * (its debt is its journal's, read back by the next owner; credit is
 * dropped as when a queue empties), no token rate owed and not parked.
 * Its dispatched runs are the caller's to forget first (fq_sched_forget).
 * Returns the queued runs freed. O(tenants + active + parked): for a
 * handover, not the hot path. */
size_t fq_sched_clear(fq_sched *s, bool (*which)(void *arg, const fq_tenant *t),
                      void (*cb)(void *arg, const fq_run *r), void *arg);

/* What fq_sched_expire tells its callback about a run. */
enum fq_expiry {
    FQ_EXPIRY_LEASE = 1,    /* its lease ended: its slot is free, it is remembered */
    FQ_EXPIRY_EVICTED,      /* it is forgotten (past max_expired or expired_keep):
                               freed when the callback returns */
};

/* Expire every lease whose deadline is <= now: the slot is freed, the
 * estimate stays charged, and the run is remembered (up to max_expired,
 * and for expired_keep) so that a late completion still reconciles once.
 * Then forget the expired runs past those bounds. cb, if given, sees each
 * run that expires and then each that is forgotten, so a caller that keeps
 * something per run (its handle) frees it then. Returns the leases
 * expired. */
size_t fq_sched_expire(fq_sched *s, uint64_t now,
                       void (*cb)(void *arg, const fq_run *r, enum fq_expiry what),
                       void *arg);
/* The earliest time a parked tenant (fq_sched_park, or over its token
 * rate) may rejoin, or UINT64_MAX if none is parked: a caller that sleeps
 * between events (the simulator) wakes then. */
uint64_t fq_sched_next_unpark(const fq_sched *s);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The earliest lease deadline, or UINT64_MAX if none. */
uint64_t fq_sched_next_deadline(const fq_sched *s);
#endif

/* The dispatched run (in flight, or expired and awaiting its completion)
 * with this id, or NULL. Queued runs are the caller's to index. */
fq_run *fq_sched_run(fq_sched *s, uint64_t id);

/* Tokens that DRR would serve before a run of est tokens newly queued by t:
 * an O(1) upper bound, min(all queued tokens, (t's queued + est) x total
 * active weight / t's weight). Admission control divides it by throughput. */
uint64_t fq_sched_tokens_ahead(const fq_sched *s, const fq_tenant *t, uint32_t est);

/* With a token rate: how long (dispatch's unit) a run of est tokens newly
 * queued by t would wait for its rate alone, behind t's queued runs, from
 * now; 0 without a rate. Admission control counts it against max_wait. */
uint64_t fq_sched_rate_wait(const fq_sched *s, const fq_tenant *t, uint32_t est, uint64_t now);
/* The stats ranking of every tenant: those with queued runs first, by
 * queued tokens (most first), then the enqueue time of their head run
 * (oldest first), then by id; then those with nothing queued, in the order
 * they were created (a tenant removed and created again goes last). A
 * change to a queue only marks its tenant, O(1). fq_sched_rank_sync puts
 * every marked tenant in place, O(log n) each, once more than backlog are
 * marked (0: whenever one is): a caller that calls it once a turn with a
 * small backlog bounds what a page waits for, and pays nothing while only
 * a few tenants change (their marks coalesce until a page asks). */
void fq_sched_rank_sync(fq_sched *s, size_t backlog);
/* The tenant at position i (0: the first) of the ranking, synced first, or
 * NULL past the last. O(log n). */
fq_tenant *fq_sched_rank_at(fq_sched *s, size_t i);
/* The tenant after t in the ranking, or NULL after the last; t came from
 * fq_sched_rank_at or _next with no change to s since. O(1) amortised. */
fq_tenant *fq_sched_rank_next(fq_sched *s, const fq_tenant *t);

void fq_sched_stats_get(const fq_sched *s, fq_sched_stats *out);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Visit every known tenant, in no particular order. */
void fq_sched_foreach(fq_sched *s, void (*cb)(void *arg, fq_tenant *t), void *arg);
#endif

/* Bytes of scheduler memory per tenant (struct and index) and per queued
 * run, for the benchmark. */
size_t fq_sched_tenant_bytes(void);
size_t fq_sched_run_bytes(void);

#endif
