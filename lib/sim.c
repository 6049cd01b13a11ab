/* sim.c -- a discrete-event simulator of producers, the scheduler and workers, in virtual time.
 *
 * Principles:
 *  - The scheduler, its window and the estimator are the real ones (lib/drr,
 *    lib/window, lib/estimate), driven through their public interfaces with
 *    `now` in virtual milliseconds; rr is lib/cardrr, the card's listing.
 *    Only the baselines that are not fairq (fifo, cap) are written here.
 *  - Events at one instant are handled in a fixed order: completions, then
 *    arrivals in the scenario's order, then dispatch while a worker is free
 *    and a run can go. The simulator draws no random numbers of its own, so
 *    the scenario (and its seed) decides everything, byte for byte.
 *  - Capacity is a pool of workers, each processing its run's actual tokens
 *    at a fixed rate, or a token budget shared equally by the runs in flight
 *    (processor sharing). Service time follows actual tokens, never the
 *    estimate: that is what makes an over-runner cost more than it says.
 *  - Fairness is measured over a window, the scenario's duration, in which
 *    tenants may be backlogged; the simulation goes on past it until every
 *    run is served (or the horizon), so every run's wait is counted.
 *  - drr-replicas runs the scenario's proxies as replicas: each a scheduler
 *    over the tenants it owns, its window set every heartbeat period from
 *    lib/share (the real one) over the beats all replicas published, each
 *    replica ticking at its own phase. Their dispatches share the workers
 *    through one FIFO (the dispatch subject), so a window overshot by the
 *    reserve shows as runs waiting for a worker. With one proxy it is drr.
 */
#include "sim.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cardrr.h"
#include "drr.h"
#include "estimate.h"
#include "partition.h"
#include "share.h"

#define NONE UINT32_MAX

/* ---- policies ---------------------------------------------------------- */

enum engine { ENG_FIFO, ENG_RR, ENG_DRR };

/* Sub-tenants a tenant knows under drr-sub. */
#define FQ_SIM_MAX_SUBTENANTS 10000

typedef struct policy_def {
    const char *name;
    const char *text;
    enum engine engine;
    bool cap;                   /* fifo with a per-tenant concurrency cap */
    bool reconcile;             /* completions correct the charge by actuals */
    bool learn;                 /* the estimator sees actuals */
    bool correct;               /* declared estimates corrected by history */
    bool idle_reset;            /* credit dropped when a queue goes empty */
    bool tenant_cap;            /* drr: each tenant's max_in_flight applies */
    bool burst;                 /* drr: and its burst_in_flight */
    bool rate;                  /* drr: each tenant's tokens_per_minute applies */
    bool priced;                /* drr: costs are priced by token kind */
    bool classes;               /* drr: interactive runs before batch, per tenant */
    bool subs;                  /* drr: sub-tenants share their tenant's turns */
    bool replicas;              /* drr: the scenario's proxies, windows by lib/share */
} policy_def;

/* Designated fields: a flag a policy does not name is off, so adding one
 * touches only the policies that turn it on. */
#define DRR_BASE .engine = ENG_DRR, .reconcile = true, .learn = true, .correct = true, \
                 .idle_reset = true
static const policy_def policies[FQ_SIM__NPOLICIES] = {
    [FQ_SIM_FIFO] = {"fifo", "one FIFO queue for every tenant",
                     .engine = ENG_FIFO, .learn = true, .correct = true, .idle_reset = true},
    [FQ_SIM_RR] = {"rr", "the design card's listing: a quantum per visit, one run per visit",
                   .engine = ENG_RR, .reconcile = true, .learn = true, .correct = true,
                   .idle_reset = true},
    [FQ_SIM_CAP] = {"cap", "FIFO with a hard per-tenant concurrency cap",
                    .engine = ENG_FIFO, .cap = true, .learn = true, .correct = true,
                    .idle_reset = true},
    [FQ_SIM_DRR] = {"drr", "fairq: token DRR, reconciled, estimates corrected, idle reset",
                    DRR_BASE},
    [FQ_SIM_DRR_NO_RECONCILE] = {"drr-no-reconcile", "drr charging estimates, actuals ignored",
                                 .engine = ENG_DRR, .correct = true, .idle_reset = true},
    [FQ_SIM_DRR_NO_CORRECTION] = {"drr-no-correction",
                                  "drr charging declared estimates as declared, reconciled",
                                  .engine = ENG_DRR, .reconcile = true, .learn = true,
                                  .idle_reset = true},
    [FQ_SIM_DRR_NO_IDLE_RESET] = {"drr-no-idle-reset", "drr keeping credit when a queue empties",
                                  .engine = ENG_DRR, .reconcile = true, .learn = true,
                                  .correct = true},
    [FQ_SIM_DRR_CAP] = {"drr-cap", "drr with each tenant's max_in_flight as a hard cap",
                        DRR_BASE, .tenant_cap = true},
    [FQ_SIM_DRR_BURST] = {"drr-burst", "drr-cap binding only while another tenant has "
                          "queued runs, burst_in_flight otherwise",
                          DRR_BASE, .tenant_cap = true, .burst = true},
    [FQ_SIM_DRR_RATE] = {"drr-rate", "drr with each tenant's tokens_per_minute (GCRA)",
                         DRR_BASE, .rate = true},
    [FQ_SIM_DRR_PRICED] = {"drr-priced", "drr reconciling each run's priced cost: input and "
                           "output tokens at their plan's prices",
                           DRR_BASE, .priced = true},
    [FQ_SIM_DRR_CLASS] = {"drr-class", "drr with priority classes within a tenant: its "
                          "interactive runs before its batch runs",
                          DRR_BASE, .classes = true},
    [FQ_SIM_DRR_SUB] = {"drr-sub", "drr with sub-tenants: a tenant's turns shared fairly "
                        "among its active sub-tenants",
                        DRR_BASE, .subs = true},
    [FQ_SIM_DRR_CLASS_SUB] = {"drr-class-sub", "drr with classes and sub-tenants: a tenant's "
                              "interactive runs first, its turns in each class shared fairly "
                              "among its active sub-tenants",
                              DRR_BASE, .classes = true, .subs = true},
    [FQ_SIM_DRR_REPLICAS] = {"drr-replicas", "drr on the scenario's proxies as replicas, "
                             "each over its tenants, windows shared by heartbeats",
                             DRR_BASE, .replicas = true},
};
#undef DRR_BASE

const char *fq_sim_policy_name(enum fq_sim_policy p)
{
    return (unsigned)p < FQ_SIM__NPOLICIES ? policies[p].name : NULL;
}

fq_status fq_sim_policy_parse(enum fq_sim_policy *out, size_t *n, const char *list,
                              char *err, size_t errlen)
{
    *n = 0;
    if (strcmp(list, "all") == 0) {
        for (int p = 0; p < FQ_SIM__NPOLICIES; p++)
            out[(*n)++] = (enum fq_sim_policy)p;
        return FQ_OK;
    }
    for (const char *w = list; *w;) {
        size_t len = strcspn(w, ",");
        int p = 0;
        while (p < FQ_SIM__NPOLICIES &&
               !(strlen(policies[p].name) == len && strncmp(policies[p].name, w, len) == 0))
            p++;
        if (p == FQ_SIM__NPOLICIES) {
            snprintf(err, errlen, "unknown policy '%.*s' (fifo, rr, cap, drr, "
                     "drr-no-reconcile, drr-no-correction, drr-no-idle-reset, drr-cap, "
                     "drr-burst, drr-rate, drr-priced, drr-class, drr-sub, drr-class-sub, "
                     "drr-replicas or all)",
                     (int)len, w);
            *n = 0;
            return FQ_EINVAL;
        }
        size_t i = 0;
        while (i < *n && out[i] != (enum fq_sim_policy)p)
            i++;
        if (i == *n)
            out[(*n)++] = (enum fq_sim_policy)p;
        w += len;
        if (*w == ',')
            w++;
    }
    if (!*n) {
        snprintf(err, errlen, "no policy named");
        return FQ_EINVAL;
    }
    return FQ_OK;
}

/* ---- the simulation's state -------------------------------------------- */

enum run_state { R_PENDING = 0, R_QUEUED, R_FLIGHT, R_DONE, R_REJECTED };

typedef struct sim_run {
    uint32_t charged;           /* estimate charged at admission */
    uint32_t next;              /* fifo, cap: the tenant's next queued run */
    uint32_t state;             /* enum run_state */
} sim_run;

typedef struct sim_slot {
    uint32_t run;
    uint64_t start;             /* ms */
    double remaining;           /* tokens still to process */
} sim_slot;

typedef struct sim_tenant {
    uint32_t qhead, qtail;      /* fifo, cap: queued runs in arrival order */
    uint32_t queued;            /* runs admitted and not dispatched */
    uint32_t in_flight;
    uint32_t cap;               /* cap: most runs in flight */
    fq_tenant *ft;              /* drr: the scheduler's tenant */
    uint32_t rep;               /* drr: the replica that owns it (0: the one) */
    double busy_v;              /* the GPS clock when its busy period began */
    double busy_sent;           /* tokens dispatched in that busy period */
} sim_tenant;

/* A replica: its scheduler and, under drr-replicas, its share. */
typedef struct sim_rep {
    fq_sched *sched;
    fq_share *share;            /* drr-replicas */
    uint64_t next_tick;         /* its next heartbeat, ms */
    bool closed;                /* its share is no run now */
} sim_rep;

typedef struct sim {
    const fq_scenario *sc;
    const policy_def *pd;
    fq_sim_result *res;
    sim_run *runs;
    sim_tenant *t;
    sim_slot *slots;
    uint32_t nslots;            /* the window in runs */
    uint32_t in_flight;
    uint64_t now;               /* ms */
    size_t next_arrival;        /* index of the next run to arrive */
    size_t fifo_pos;            /* fifo: no run before it is queued */
    uint64_t queued;
    sim_rep *rep;               /* drr: the replicas (one but under drr-replicas) */
    uint32_t nrep;
    uint32_t rep_first;         /* drr-replicas: who dispatches first, in turn */
    uint32_t *wq;               /* drr-replicas: dispatched runs awaiting a worker, FIFO */
    fq_share_beat *beats;       /* drr-replicas: those published at one instant */
    size_t wq_head, wq_len;
    fq_cardrr *rr;              /* rr */
    fq_cardrr_run *rr_runs;
    fq_est *est;
    double gps_v;               /* GPS clock: tokens a unit of weight is due */
    uint64_t active_weight;     /* weights of the tenants with queued runs */
    double service_sum;         /* ms, over completed runs */
    uint64_t completed_in_window;
} sim;

/* Tokens a ms one run in flight is processed at. */
static double slot_rate(const sim *s)
{
    const fq_scenario_capacity *c = &s->sc->capacity;
    if (c->workers)
        return c->worker_tokens_per_s / 1000.0;
    return c->tokens_per_s / 1000.0 / (s->in_flight ? s->in_flight : 1);
}

/* Tokens a ms the whole capacity processes. */
static double capacity_rate(const fq_scenario *sc)
{
    const fq_scenario_capacity *c = &sc->capacity;
    return c->workers ? c->workers * c->worker_tokens_per_s / 1000.0 : c->tokens_per_s / 1000.0;
}

/* ---- engines: admission, choice, completion ---------------------------- */

/* The estimate a run is charged at admission. */
static uint32_t charge(sim *s, const fq_scenario_run *r)
{
    if (!s->pd->correct && r->est)
        return r->est;
    return fq_est_charge(s->est, s->sc->tenants[r->tenant].id, s->sc->workflows[r->workflow],
                         r->est);
}

static int fifo_enqueue(sim *s, uint32_t i)
{
    sim_tenant *t = &s->t[s->sc->runs[i].tenant];
    uint32_t max = s->sc->tenants[s->sc->runs[i].tenant].max_pending;
    if (max && t->queued >= max)
        return 0;
    s->runs[i].next = NONE;
    if (t->qtail != NONE)
        s->runs[t->qtail].next = i;
    else
        t->qhead = i;
    t->qtail = i;
    return 1;
}

/* The oldest queued run among tenants below their cap. Runs are indexed in
 * arrival order, so without caps it is the first queued run after a cursor
 * (amortized O(1)); with caps, the smallest head index of the tenants below
 * their cap (O(tenants)). Either way it is its tenant's head. */
static uint32_t fifo_next(sim *s)
{
    uint32_t best = NONE;
    if (!s->pd->cap) {
        while (s->fifo_pos < s->next_arrival && s->runs[s->fifo_pos].state != R_QUEUED)
            s->fifo_pos++;
        if (s->fifo_pos < s->next_arrival)
            best = (uint32_t)s->fifo_pos;
    } else {
        for (size_t k = 0; k < s->sc->n_tenants; k++) {
            sim_tenant *t = &s->t[k];
            if (t->qhead != NONE && t->qhead < best && t->in_flight < t->cap)
                best = t->qhead;
        }
    }
    if (best != NONE) {
        sim_tenant *t = &s->t[s->sc->runs[best].tenant];
        t->qhead = s->runs[best].next;
        if (t->qhead == NONE)
            t->qtail = NONE;
    }
    return best;
}

static int rr_enqueue(sim *s, uint32_t i)
{
    const fq_scenario_run *r = &s->sc->runs[i];
    uint32_t max = s->sc->tenants[r->tenant].max_pending;
    if (max && s->t[r->tenant].queued >= max)
        return 0;
    s->rr_runs[i] = (fq_cardrr_run){.tenant = r->tenant, .est = s->runs[i].charged, .id = i};
    fq_cardrr_enqueue(s->rr, &s->rr_runs[i]);
    return 1;
}

/* The listing's caller: next() sweeps once and may find no head that fits
 * yet; every sweep adds quanta, so asking again always ends. */
static uint32_t rr_next(sim *s)
{
    for (;;) {
        fq_cardrr_run *r = fq_cardrr_next(s->rr);
        if (r)
            return (uint32_t)r->id;
    }
}

static int drr_enqueue(sim *s, uint32_t i)
{
    const fq_scenario_run *r = &s->sc->runs[i];
    sim_tenant *t = &s->t[r->tenant];
    fq_run *fr;
    char sub[16];
    int len = r->sub ? snprintf(sub, sizeof sub, "s%" PRIu32, r->sub) : 0;
    fq_sched *sc = s->rep[t->rep].sched;
    if (fq_sched_enqueue_sub(&fr, sc, t->ft, sub, s->pd->subs ? (size_t)len : 0,
                             s->pd->classes && !r->interactive, i, s->runs[i].charged, NULL,
                             s->now) != FQ_OK)
        return 0;
    s->runs[i].charged = fr->est;
    return 1;
}

static uint32_t drr_next(sim *s)
{
    fq_run *r = fq_sched_dispatch(s->rep[0].sched, s->now);
    return r ? (uint32_t)r->id : NONE;
}

static int engine_enqueue(sim *s, uint32_t i)
{
    switch (s->pd->engine) {
    case ENG_RR:
        return rr_enqueue(s, i);
    case ENG_DRR:
        return drr_enqueue(s, i);
    default:
        return fifo_enqueue(s, i);
    }
}

static uint32_t engine_next(sim *s)
{
    switch (s->pd->engine) {
    case ENG_RR:
        return rr_next(s);
    case ENG_DRR:
        return drr_next(s);
    default:
        return fifo_next(s);
    }
}

/* A run's cost at its tenant's prices: its actual tokens split into output
 * (the tenant's output_share) and input. */
static double priced_factor(const fq_scenario_tenant *t)
{
    double pi = t->prices.input ? t->prices.input : 1;
    double po = t->prices.output ? t->prices.output : 1;
    return (1 - t->output_share) + t->output_share * po / pi;
}

static uint64_t priced(const fq_scenario_tenant *t, uint32_t actual)
{
    uint64_t out = (uint64_t)llround(actual * t->output_share);
    return fq_price_cost(&t->prices, actual - out, out, 0);
}

static void engine_complete(sim *s, uint32_t i)
{
    const fq_scenario_run *r = &s->sc->runs[i];
    uint32_t charged = s->runs[i].charged;
    uint64_t spent = s->pd->priced ? priced(&s->sc->tenants[r->tenant], r->actual) : r->actual;
    uint64_t actual = s->pd->reconcile ? spent : charged;
    if (s->pd->engine == ENG_DRR)
        fq_sched_complete(NULL, s->rep[s->t[r->tenant].rep].sched, i, actual);
    else if (s->pd->engine == ENG_RR && s->pd->reconcile)
        fq_cardrr_reconcile(s->rr, r->tenant, charged, actual);
    if (s->pd->learn)
        fq_est_observe(s->est, s->sc->tenants[r->tenant].id, s->sc->workflows[r->workflow],
                       r->est, charged, spent);
}

/* ---- events ------------------------------------------------------------ */

static void admit(sim *s, uint32_t i)
{
    const fq_scenario_run *r = &s->sc->runs[i];
    fq_sim_tenant_stats *st = &s->res->tenants[r->tenant];
    sim_tenant *t = &s->t[r->tenant];
    st->submitted++;
    if (r->at < s->res->window)
        st->demand += r->actual;
    s->runs[i].charged = charge(s, r);
    if (!engine_enqueue(s, i)) {
        s->runs[i].state = R_REJECTED;
        s->res->runs[i].rejected = true;
        st->rejected++;
        return;
    }
    s->runs[i].state = R_QUEUED;
    if (t->queued++ == 0) {
        s->active_weight += s->sc->tenants[r->tenant].weight;
        t->busy_v = s->gps_v;
        t->busy_sent = 0;
    }
    s->queued++;
}

/* Move run i onto a free slot, and measure how far its tenant got ahead of
 * the service weighted fair queueing (GPS) would have given it. */
static void start(sim *s, uint32_t i)
{
    const fq_scenario_run *r = &s->sc->runs[i];
    sim_tenant *t = &s->t[r->tenant];
    fq_sim_tenant_stats *st = &s->res->tenants[r->tenant];
    uint32_t w = s->sc->tenants[r->tenant].weight;
    s->gps_v += (double)r->actual / (double)s->active_weight;
    t->busy_sent += r->actual;
    double lead = t->busy_sent - w * (s->gps_v - t->busy_v);
    if (lead > st->ahead)
        st->ahead = lead;
    if (--t->queued == 0)
        s->active_weight -= w;
    s->queued--;
    t->in_flight++;
    st->dispatched++;
    s->runs[i].state = R_FLIGHT;
    s->res->runs[i].dispatched = s->now;
    s->slots[s->in_flight++] = (sim_slot){.run = i, .start = s->now, .remaining = r->actual};
}

/* drr-replicas: every replica dispatches what its window allows, one run
 * each in turn, onto the workers' FIFO; free workers take from it. */
static void dispatch_replicas(sim *s)
{
    for (bool more = true; more;) {
        more = false;
        for (uint32_t k = 0; k < s->nrep; k++) {
            sim_rep *rp = &s->rep[(s->rep_first + k) % s->nrep];
            fq_run *r = rp->closed ? NULL : fq_sched_dispatch(rp->sched, s->now);
            if (r) {
                s->wq[(s->wq_head + s->wq_len++) % s->sc->n_runs] = (uint32_t)r->id;
                more = true;
            }
        }
    }
    s->rep_first = (s->rep_first + 1) % s->nrep;
    uint64_t out = s->in_flight + s->wq_len;
    if (out > s->res->peak_in_flight)
        s->res->peak_in_flight = out;
    while (s->in_flight < s->nslots && s->wq_len) {
        uint32_t i = s->wq[s->wq_head];
        s->wq_head = (s->wq_head + 1) % s->sc->n_runs;
        s->wq_len--;
        start(s, i);
    }
}

static void dispatch(sim *s)
{
    if (s->nrep > 1) {
        dispatch_replicas(s);
        return;
    }
    while (s->in_flight < s->nslots && s->queued) {
        uint32_t i = engine_next(s);
        if (i == NONE)
            return;
        start(s, i);
    }
}

/* Slots are kept dense: the last one moves into a freed place. */
static void complete_due(sim *s)
{
    for (uint32_t k = 0; k < s->in_flight;) {
        sim_slot *sl = &s->slots[k];
        if (sl->remaining > 1e-6) {
            k++;
            continue;
        }
        uint32_t i = sl->run;
        const fq_scenario_run *r = &s->sc->runs[i];
        s->service_sum += (double)(s->now - sl->start);
        if (s->now <= s->res->window)
            s->completed_in_window++;
        s->res->tenants[r->tenant].completed++;
        s->t[r->tenant].in_flight--;
        s->runs[i].state = R_DONE;
        *sl = s->slots[--s->in_flight];
        engine_complete(s, i);
    }
}

/* Let time pass to `to`: runs in flight progress, and what they process
 * within the window is each tenant's service. */
static void advance(sim *s, uint64_t to)
{
    double dt = (double)(to - s->now);
    if (s->queued)
        s->res->idle_queued_s += dt / 1000.0 *
            (s->sc->capacity.workers ? (double)(s->nslots - s->in_flight) / s->nslots
                                     : s->in_flight ? 0.0 : 1.0);
    double rate = slot_rate(s);
    int in_window = s->now < s->res->window;
    for (uint32_t k = 0; k < s->in_flight; k++) {
        sim_slot *sl = &s->slots[k];
        double done = rate * dt < sl->remaining ? rate * dt : sl->remaining;
        sl->remaining -= done;
        if (in_window) {
            uint32_t k = s->sc->runs[sl->run].tenant;
            s->res->tenants[k].served += done;
            s->res->tenants[k].served_priced += done * priced_factor(&s->sc->tenants[k]);
        }
    }
    s->now = to;
}

/* The next instant something happens: an arrival, a completion, or the end
 * of the window. UINT64_MAX when nothing will. */
static uint64_t next_event(const sim *s)
{
    uint64_t next = UINT64_MAX;
    if (s->next_arrival < s->sc->n_runs)
        next = s->sc->runs[s->next_arrival].at;
    double rate = slot_rate(s);
    for (uint32_t k = 0; k < s->in_flight; k++) {
        /* At least 1 ms ahead, so that float dust cannot stall time. */
        double ms = ceil(s->slots[k].remaining / rate - 1e-9);
        uint64_t at = s->now + (ms >= 1 ? (uint64_t)ms : 1);
        if (at < next)
            next = at;
    }
    /* A tenant over its token rate rejoins at a time of its own. */
    for (uint32_t k = 0; s->rep && s->queued && s->in_flight < s->nslots && k < s->nrep; k++) {
        uint64_t at = fq_sched_next_unpark(s->rep[k].sched);
        if (at < next)
            next = at > s->now ? at : s->now + 1;
    }
    /* Replicas beat while anything is left to happen. */
    if (s->nrep > 1 && next != UINT64_MAX)
        for (uint32_t k = 0; k < s->nrep; k++)
            if (s->rep[k].next_tick < next)
                next = s->rep[k].next_tick;
    if (next != UINT64_MAX && s->now < s->res->window && s->res->window < next)
        next = s->res->window;
    return next;
}

/* drr-replicas: the replicas whose heartbeat is due compute their windows
 * from what they heard and publish; every replica, each itself included,
 * hears the beats at once (the period is the lag that matters). */
static void beat(sim *s)
{
    if (s->nrep <= 1)
        return;
    uint32_t n = 0;
    uint64_t period = s->sc->proxies.heartbeat_ms ? s->sc->proxies.heartbeat_ms : 100;
    for (uint32_t k = 0; k < s->nrep; k++) {
        sim_rep *rp = &s->rep[k];
        if (rp->next_tick > s->now)
            continue;
        rp->next_tick += period;
        fq_sched_stats st;
        fq_sched_stats_get(rp->sched, &st);
        fq_share_local me = {.weight = st.active_weight, .queued_runs = st.queued,
                             .queued_tokens = st.queued_tokens, .runs = st.in_flight,
                             .tokens = st.in_flight_tokens, .round = s->now / period + 1};
        fq_share_limits l;
        fq_share_tick(&l, &s->beats[n++], rp->share, &me, s->now);
        rp->closed = !l.runs || !l.tokens;
        fq_sched_set_window(rp->sched,
                            l.runs == FQ_SHARE_UNLIMITED ? 0
                            : l.runs > UINT32_MAX ? UINT32_MAX : (uint32_t)l.runs,
                            l.tokens == FQ_SHARE_UNLIMITED ? 0 : l.tokens);
    }
    for (uint32_t b = 0; b < n; b++)
        for (uint32_t j = 0; j < s->nrep; j++)
            fq_share_heard(s->rep[j].share, &s->beats[b], s->now);
}

/* Until nothing more can happen, or the horizon: there, runs that end are
 * completed, and nothing new is admitted or dispatched. */
static void loop(sim *s)
{
    const fq_scenario *sc = s->sc;
    for (;;) {
        complete_due(s);
        if (sc->horizon && s->now >= sc->horizon)
            break;
        while (s->next_arrival < sc->n_runs && sc->runs[s->next_arrival].at <= s->now)
            admit(s, (uint32_t)s->next_arrival++);
        beat(s);
        dispatch(s);
        uint64_t next = next_event(s);
        if (next == UINT64_MAX)
            break;
        advance(s, sc->horizon && next > sc->horizon ? sc->horizon : next);
    }
}

/* ---- results ----------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank of sorted v[0..n). */
static uint64_t pct(const uint64_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)ceil(p * (double)n);
    return v[i ? i - 1 : 0];
}

/* Wait percentiles per tenant and overall. */
static fq_status waits(const sim *s)
{
    const fq_scenario *sc = s->sc;
    fq_sim_result *res = s->res;
    size_t nt = sc->n_tenants;
    size_t *off = calloc(nt + 1, sizeof(*off));
    uint64_t *w = malloc((sc->n_runs ? sc->n_runs : 1) * sizeof(*w));
    uint64_t *all = malloc((sc->n_runs ? sc->n_runs : 1) * sizeof(*all));
    if (!off || !w || !all) {
        free(off);
        free(w);
        free(all);
        return FQ_ENOMEM;
    }
    for (size_t k = 0; k < nt; k++)
        off[k + 1] = off[k] + res->tenants[k].dispatched;
    size_t n = 0;
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *r = &sc->runs[i];
        fq_sim_tenant_stats *st = &res->tenants[r->tenant];
        uint64_t d = res->runs[i].dispatched;
        if (st->first_wait == -2)
            st->first_wait = d == UINT64_MAX ? -1 : (int64_t)(d - r->at);
        if (d == UINT64_MAX)
            continue;
        w[off[r->tenant]++] = all[n++] = d - r->at;
    }
    for (size_t k = 0; k < nt; k++) {
        fq_sim_tenant_stats *st = &res->tenants[k];
        uint64_t *v = w + off[k] - st->dispatched;
        qsort(v, st->dispatched, sizeof(*v), cmp_u64);
        st->wait_p50 = pct(v, st->dispatched, 0.50);
        st->wait_p99 = pct(v, st->dispatched, 0.99);
        st->wait_max = st->dispatched ? v[st->dispatched - 1] : 0;
        if (st->first_wait == -2)
            st->first_wait = -1;
    }
    qsort(all, n, sizeof(*all), cmp_u64);
    res->wait_p50 = pct(all, n, 0.50);
    res->wait_p99 = pct(all, n, 0.99);
    res->wait_max = n ? all[n - 1] : 0;
    free(off);
    free(w);
    free(all);
    return FQ_OK;
}

/* A tenant's demand per unit of weight, for water-filling. */
typedef struct level {
    double v;
    size_t k;
} level;

static int cmp_level(const void *a, const void *b)
{
    const level *x = a, *y = b;
    return x->v < y->v ? -1 : x->v > y->v ? 1 : (x->k > y->k) - (x->k < y->k);
}

/* Weighted max-min fair shares of the service delivered in the window:
 * tenants that asked for less than their weighted part get what they asked
 * for, and the rest is split by weight among the others, the backlogged.
 * In raw tokens, or (priced) in priced cost: each tenant's service and
 * demand at its prices. */
static fq_status fair_shares_in(const fq_scenario *sc, fq_sim_result *res, bool priced)
{
    size_t nt = sc->n_tenants;
    level *idx = malloc((nt ? nt : 1) * sizeof(*idx));
    if (!idx)
        return FQ_ENOMEM;
    double total = 0, wsum = 0;
    for (size_t k = 0; k < nt; k++) {
        const fq_sim_tenant_stats *st = &res->tenants[k];
        double f = priced ? priced_factor(&sc->tenants[k]) : 1;
        idx[k] = (level){(double)st->demand * f / sc->tenants[k].weight, k};
        total += priced ? st->served_priced : st->served;
        if (st->demand)
            wsum += sc->tenants[k].weight;
    }
    qsort(idx, nt, sizeof(*idx), cmp_level);
    double left = total;
    double sx = 0, sxx = 0;
    uint32_t nb = 0;
    for (size_t n = 0; n < nt; n++) {
        size_t k = idx[n].k;
        fq_sim_tenant_stats *st = &res->tenants[k];
        double w = sc->tenants[k].weight;
        if (!st->demand)
            continue;
        double demand = (double)st->demand * (priced ? priced_factor(&sc->tenants[k]) : 1);
        double served = priced ? st->served_priced : st->served;
        double level = wsum > 0 ? left / wsum : 0;
        double fair = demand <= level * w ? demand : level * w;
        left -= fair;
        wsum -= w;
        *(priced ? &st->share_priced : &st->share) = total > 0 ? served / total : 0;
        *(priced ? &st->fair_priced : &st->fair) = total > 0 ? fair / total : 0;
        bool backlogged = demand > fair + 0.5;
        if (!priced)
            st->backlogged = backlogged;
        if (backlogged) {
            double x = served / w;
            sx += x;
            sxx += x * x;
            nb++;
        }
    }
    double jain = nb >= 2 && sxx > 0 ? sx * sx / (nb * sxx) : 1.0;
    if (priced) {
        res->jain_priced = jain;
    } else {
        res->jain = jain;
        res->n_backlogged = nb;
    }
    free(idx);
    return FQ_OK;
}

static fq_status fair_shares(const fq_scenario *sc, fq_sim_result *res)
{
    fq_status st = fair_shares_in(sc, res, false);
    return st == FQ_OK ? fair_shares_in(sc, res, true) : st;
}

static fq_status finish(sim *s)
{
    fq_sim_result *res = s->res;
    const fq_scenario *sc = s->sc;
    double served = 0;
    for (size_t k = 0; k < sc->n_tenants; k++) {
        fq_sim_tenant_stats *st = &res->tenants[k];
        st->queued_end = s->t[k].queued;
        served += st->served;
        res->submitted += st->submitted;
        res->rejected += st->rejected;
        res->dispatched += st->dispatched;
        res->completed += st->completed;
        res->queued_end += st->queued_end;
    }
    res->in_flight_end = s->in_flight;
    res->end = s->now;
    double window_s = res->window / 1000.0;
    res->tokens_per_s = served / window_s;
    res->runs_per_min = s->completed_in_window / (window_s / 60.0);
    res->utilization = served / (capacity_rate(sc) * (double)res->window);
    res->service_ms = res->completed ? s->service_sum / (double)res->completed : 0;
    fq_status st = waits(s);
    return st == FQ_OK ? fair_shares(sc, res) : st;
}

/* ---- lifecycle --------------------------------------------------------- */

void fq_sim_result_free(fq_sim_result *r)
{
    if (!r)
        return;
    free(r->tenants);
    free(r->runs);
    free(r);
}

/* The replica (0-based) that owns tenant t among n: its proxy, else the
 * server's partition function over n. */
static uint32_t replica_of(const fq_scenario_tenant *t, uint32_t n)
{
    return n <= 1 ? 0 : t->proxy ? t->proxy - 1 : fq_partition_of(t->id, strlen(t->id), n);
}

/* drr-replicas: each replica's share state, "r1" .. "rN", their heartbeats
 * spread over the period; the window is the simulation's. */
static fq_status sim_shares(sim *s)
{
    const fq_scenario_proxies *px = &s->sc->proxies;
    uint64_t period = px->heartbeat_ms ? px->heartbeat_ms : 100;
    uint64_t tokens = s->sc->capacity.max_in_flight_tokens;
    fq_share_opts so = {.max_runs = s->nslots, .max_tokens = tokens,
                        .reserve_runs = px->reserve_runs ? px->reserve_runs : 1,
                        .reserve_tokens = px->reserve_tokens ? px->reserve_tokens
                                        : (tokens + s->nslots - 1) / s->nslots,
                        .period = period};
    s->wq = malloc(s->sc->n_runs * sizeof(*s->wq));
    s->beats = malloc(s->nrep * sizeof(*s->beats));
    if (!s->wq || !s->beats)
        return FQ_ENOMEM;
    for (uint32_t k = 0; k < s->nrep; k++) {
        char id[16];
        snprintf(id, sizeof id, "r%" PRIu32, k + 1);
        fq_status st = fq_share_create(&s->rep[k].share, &so, id, 0);
        if (st != FQ_OK)
            return st;
        s->rep[k].next_tick = period * k / s->nrep;
    }
    return FQ_OK;
}

/* The design card's listing (lib/cardrr), the baseline policy. */
static fq_status sim_engine_rr(sim *s)
{
    const fq_scenario *sc = s->sc;
    uint32_t *w = malloc(sc->n_tenants * sizeof(*w));
    s->rr_runs = calloc(sc->n_runs ? sc->n_runs : 1, sizeof(*s->rr_runs));
    if (!w || !s->rr_runs) {
        free(w);
        return FQ_ENOMEM;
    }
    /* The listing's quantum x weight is 32 bits wide: refuse what
     * would wrap, rather than sweep for ever on a quantum of 0. */
    for (size_t k = 0; k < sc->n_tenants; k++) {
        w[k] = sc->tenants[k].weight;
        if ((uint64_t)sc->quantum * w[k] > UINT32_MAX) {
            free(w);
            return FQ_EINVAL;
        }
    }
    fq_status st = fq_cardrr_create(&s->rr, (uint32_t)sc->n_tenants, sc->quantum, w);
    free(w);
    return st;
}

static fq_status sim_engines(sim *s)
{
    const fq_scenario *sc = s->sc;
    fq_est_opts eo;
    fq_est_opts_init(&eo);
    eo.default_tokens = sc->estimator.default_tokens;
    eo.max_tokens = sc->max_est;
    eo.min_samples = sc->estimator.min_samples;
    eo.percentile = sc->estimator.percentile;
    fq_status st = fq_est_create(&s->est, &eo);
    if (st != FQ_OK)
        return st;
    if (s->pd->engine == ENG_RR)
        return sim_engine_rr(s);
    if (s->pd->engine != ENG_DRR)
        return FQ_OK;
    s->nrep = s->pd->replicas && sc->proxies.count > 1 ? sc->proxies.count : 1;
    s->rep = calloc(s->nrep, sizeof(*s->rep));
    if (!s->rep)
        return FQ_ENOMEM;
    fq_sched_opts o = {
        .quantum = sc->quantum, .max_est_tokens = sc->max_est, .max_in_flight = s->nslots,
        .max_in_flight_tokens = sc->capacity.max_in_flight_tokens,
        .keep_idle_credit = !s->pd->idle_reset, .nclasses = s->pd->classes ? 2 : 0,
        .max_subtenants = s->pd->subs ? FQ_SIM_MAX_SUBTENANTS : 0,
    };
    for (uint32_t k = 0; k < s->nrep; k++)
        if ((st = fq_sched_create(&s->rep[k].sched, &o)) != FQ_OK)
            return st;
    if (s->nrep > 1 && (st = sim_shares(s)) != FQ_OK)
        return st;
    for (size_t k = 0; k < sc->n_tenants; k++) {
        const fq_scenario_tenant *t = &sc->tenants[k];
        fq_tenant_policy p = {.weight = t->weight, .max_pending = t->max_pending,
                              .max_subtenants = s->pd->subs ? FQ_SIM_MAX_SUBTENANTS : 0};
        if (s->pd->tenant_cap)
            p.max_in_flight = t->max_in_flight;
        if (s->pd->burst)
            p.burst_in_flight = t->burst_in_flight;
        if (s->pd->rate)
            p.tokens_per_minute = t->tokens_per_minute;
        s->t[k].rep = replica_of(t, s->nrep);
        if ((st = fq_sched_tenant(&s->t[k].ft, s->rep[s->t[k].rep].sched, t->id, strlen(t->id),
                                  &p)) != FQ_OK)
            return st;
    }
    return FQ_OK;
}

static fq_status sim_init(sim *s, const fq_scenario *sc, enum fq_sim_policy p)
{
    size_t nt = sc->n_tenants, nr = sc->n_runs;
    *s = (sim){.sc = sc, .pd = &policies[p], .nslots = sc->capacity.max_in_flight};
    if (!nt || !nr || !s->nslots)
        return FQ_EINVAL;
    s->res = calloc(1, sizeof(*s->res));
    if (!s->res)
        return FQ_ENOMEM;
    s->res->policy = p;
    s->res->n_tenants = nt;
    s->res->window = sc->duration ? sc->duration : 1;
    s->res->tenants = calloc(nt, sizeof(*s->res->tenants));
    s->res->runs = calloc(nr, sizeof(*s->res->runs));
    s->runs = calloc(nr, sizeof(*s->runs));
    s->t = calloc(nt, sizeof(*s->t));
    s->slots = calloc(s->nslots, sizeof(*s->slots));
    if (!s->res->tenants || !s->res->runs || !s->runs || !s->t || !s->slots)
        return FQ_ENOMEM;
    for (size_t i = 0; i < nr; i++)
        s->res->runs[i].dispatched = UINT64_MAX;
    uint32_t fair_cap = s->nslots / (uint32_t)nt ? s->nslots / (uint32_t)nt : 1;
    for (size_t k = 0; k < nt; k++) {
        s->t[k].qhead = s->t[k].qtail = NONE;
        s->t[k].cap = s->pd->cap ? (sc->tenants[k].max_in_flight ? sc->tenants[k].max_in_flight
                                                                  : fair_cap) : 0;
        s->res->tenants[k].first_wait = -2;     /* not seen yet */
    }
    fq_status st = sim_engines(s);
    s->res->replicas = s->nrep ? s->nrep : 1;
    return st;
}

static void sim_fini(sim *s)
{
    for (uint32_t k = 0; s->rep && k < s->nrep; k++) {
        fq_sched_destroy(s->rep[k].sched);
        fq_share_destroy(s->rep[k].share);
    }
    free(s->rep);
    free(s->wq);
    free(s->beats);
    fq_cardrr_destroy(s->rr);
    fq_est_destroy(s->est);
    free(s->rr_runs);
    free(s->slots);
    free(s->t);
    free(s->runs);
}

fq_status fq_sim_run(fq_sim_result **out, const fq_scenario *sc, enum fq_sim_policy p)
{
    *out = NULL;
    if ((unsigned)p >= FQ_SIM__NPOLICIES)
        return FQ_EINVAL;
    sim s;
    fq_status st = sim_init(&s, sc, p);
    if (st == FQ_OK) {
        loop(&s);
        st = finish(&s);
    }
    sim_fini(&s);
    if (st != FQ_OK) {
        fq_sim_result_free(s.res);
        return st;
    }
    *out = s.res;
    return FQ_OK;
}

/* ---- reports ----------------------------------------------------------- */

fq_status fq_sim_format_parse(enum fq_sim_format *out, const char *name)
{
    static const char *const names[] = {"table", "csv", "json"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (enum fq_sim_format)i;
            return FQ_OK;
        }
    }
    return FQ_EINVAL;
}

/* A duration for people: 850ms, 12.3s, 41.5m, 3.2h. */
static const char *dur(char *buf, size_t cap, double ms)
{
    if (ms < 0)
        snprintf(buf, cap, "-");
    else if (ms < 1000)
        snprintf(buf, cap, "%.0fms", ms);
    else if (ms < 100000)
        snprintf(buf, cap, "%.1fs", ms / 1000);
    else if (ms < 6000000)
        snprintf(buf, cap, "%.1fm", ms / 60000);
    else
        snprintf(buf, cap, "%.1fh", ms / 3600000);
    return buf;
}

static void capacity_text(char *buf, size_t cap, const fq_scenario *sc)
{
    const fq_scenario_capacity *c = &sc->capacity;
    if (c->workers)
        snprintf(buf, cap, "%" PRIu32 " workers x %g tok/s", c->workers, c->worker_tokens_per_s);
    else
        snprintf(buf, cap, "%g tok/s shared by up to %" PRIu32 " runs", c->tokens_per_s,
                 c->max_in_flight);
}

/* The worst first-run wait of any tenant: what the card's small tenants
 * feel first. */
static int64_t worst_first(const fq_sim_result *r)
{
    int64_t w = -1;
    for (size_t k = 0; k < r->n_tenants; k++)
        if (r->tenants[k].first_wait > w)
            w = r->tenants[k].first_wait;
    return w;
}

/* Whether any tenant's runs are priced otherwise than by their tokens. */
static bool priced_scenario(const fq_scenario *sc)
{
    for (size_t k = 0; k < sc->n_tenants; k++)
        if (priced_factor(&sc->tenants[k]) != 1.0)
            return true;
    return false;
}

/* Whether any run is interactive. */
static bool class_scenario(const fq_scenario *sc)
{
    for (size_t i = 0; i < sc->n_runs; i++)
        if (sc->runs[i].interactive)
            return true;
    return false;
}

/* Per tenant whose runs name sub-tenants: its sub-tenants' first runs'
 * waits (each sub-tenant's earliest run). */
static void sub_first_waits(FILE *f, const fq_scenario *sc, const fq_sim_result *r)
{
    uint32_t maxsub = 0;
    for (size_t i = 0; i < sc->n_runs; i++)
        maxsub = sc->runs[i].sub > maxsub ? sc->runs[i].sub : maxsub;
    if (!maxsub)
        return;
    unsigned char *seen = calloc(sc->n_tenants * ((size_t)maxsub + 1), 1);
    uint64_t *w = malloc(((size_t)maxsub + 1) * sizeof(*w));
    for (size_t k = 0; seen && w && k < sc->n_tenants; k++) {
        size_t n = 0;
        for (size_t i = 0; i < sc->n_runs; i++) {
            const fq_scenario_run *sr = &sc->runs[i];
            unsigned char *at = &seen[k * ((size_t)maxsub + 1) + sr->sub];
            if (sr->tenant != k || !sr->sub || *at)
                continue;
            *at = 1;
            w[n++] = r->runs[i].dispatched == UINT64_MAX ? UINT64_MAX
                                                          : r->runs[i].dispatched - sr->at;
        }
        if (!n)
            continue;
        qsort(w, n, sizeof(*w), cmp_u64);
        char a[16], b[16];
        fprintf(f, "  sub-tenants of %s: %zu, first runs' wait p50 %s max %s\n",
                sc->tenants[k].id, n, dur(a, sizeof(a), (double)w[n / 2]),
                w[n - 1] == UINT64_MAX ? "never" : dur(b, sizeof(b), (double)w[n - 1]));
    }
    free(seen);
    free(w);
}

/* Waits of the interactive runs and of the batch runs, apart. */
static void class_waits(FILE *f, const fq_scenario *sc, const fq_sim_result *r)
{
    static const char *const names[2] = {"interactive", "batch"};
    uint64_t *w = malloc(sc->n_runs * sizeof(*w));
    if (!w)
        return;
    fprintf(f, "  class waits:");
    for (uint32_t c = 0; c < 2; c++) {
        size_t n = 0;
        for (size_t i = 0; i < sc->n_runs; i++)
            if (sc->runs[i].interactive == !c && r->runs[i].dispatched != UINT64_MAX)
                w[n++] = r->runs[i].dispatched - sc->runs[i].at;
        qsort(w, n, sizeof(*w), cmp_u64);
        char a[16], b[16];
        fprintf(f, " %s %zu runs p50 %s max %s%s", names[c], n,
                dur(a, sizeof(a), n ? (double)w[n / 2] : 0),
                dur(b, sizeof(b), n ? (double)w[n - 1] : 0), c ? "" : ";");
    }
    fprintf(f, "\n");
    free(w);
}

static void table_policy(FILE *f, const fq_scenario *sc, const fq_sim_result *r)
{
    char a[16], b[16], c[16], d[16];
    fprintf(f, "\npolicy %s: %s\n", policies[r->policy].name, policies[r->policy].text);
    fprintf(f, "  %-16s %-12s %5s %7s %6s %12s %7s %7s %6s %8s %8s %8s %8s %10s\n", "tenant",
            "plan", "w", "runs", "rej", "tokens", "share", "fair", "ratio", "wait p50", "p99",
            "max", "first", "ahead");
    for (size_t k = 0; k < r->n_tenants; k++) {
        const fq_sim_tenant_stats *t = &r->tenants[k];
        const fq_scenario_tenant *tn = &sc->tenants[k];
        fprintf(f, "  %-16s %-12s %5" PRIu32 " %7" PRIu64 " %6" PRIu64 " %12.0f %6.1f%% %6.1f%% "
                "%6.2f %8s %8s %8s %8s %10.0f%s\n", tn->id, tn->plan, tn->weight, t->submitted,
                t->rejected, t->served, 100 * t->share, 100 * t->fair,
                t->fair > 0 ? t->share / t->fair : 0, dur(a, sizeof(a), (double)t->wait_p50),
                dur(b, sizeof(b), (double)t->wait_p99), dur(c, sizeof(c), (double)t->wait_max),
                dur(d, sizeof(d), (double)t->first_wait), t->ahead, t->backlogged ? " *" : "");
    }
    if (class_scenario(sc))     /* only where a workflow is interactive */
        class_waits(f, sc, r);
    sub_first_waits(f, sc, r);  /* only where runs name sub-tenants */
    if (priced_scenario(sc)) {  /* only where prices or kinds are stated */
        fprintf(f, "  in priced cost (input tokens' worth):\n");
        for (size_t k = 0; k < r->n_tenants; k++) {
            const fq_sim_tenant_stats *t = &r->tenants[k];
            fprintf(f, "  %-16s %-12s %5s %7s %6s %12.0f %6.1f%% %6.1f%% %6.2f\n",
                    sc->tenants[k].id, "", "", "", "", t->served_priced,
                    100 * t->share_priced, 100 * t->fair_priced,
                    t->fair_priced > 0 ? t->share_priced / t->fair_priced : 0);
        }
        fprintf(f, "  Jain in priced cost %.3f\n", r->jain_priced);
    }
    fprintf(f, "  all: %" PRIu64 " runs, %" PRIu64 " done, %" PRIu64 " rejected, %" PRIu64
            " left | %.1f tok/s, %.1f runs/min | utilization %.1f%% | Jain %.3f over %" PRIu32
            " backlogged (*) | idle while queued %s | service %s | end %s\n", r->submitted,
            r->completed, r->rejected, r->queued_end + r->in_flight_end, r->tokens_per_s,
            r->runs_per_min, 100 * r->utilization, r->jain, r->n_backlogged,
            dur(a, sizeof(a), r->idle_queued_s * 1000), dur(b, sizeof(b), r->service_ms),
            dur(c, sizeof(c), (double)r->end));
    if (r->replicas > 1) {      /* drr-replicas: what each replica's tenants got */
        const fq_scenario_proxies *px = &sc->proxies;
        double all = 0;
        for (size_t k = 0; k < r->n_tenants; k++)
            all += r->tenants[k].served;
        fprintf(f, "  replicas: %" PRIu32 ", heartbeat %" PRIu32 "ms, reserve %" PRIu32
                " run%s; tokens served by replica:", r->replicas,
                px->heartbeat_ms ? px->heartbeat_ms : 100,
                px->reserve_runs ? px->reserve_runs : 1, px->reserve_runs > 1 ? "s" : "");
        for (uint32_t q = 0; q < r->replicas; q++) {
            double mine = 0;
            for (size_t k = 0; k < r->n_tenants; k++)
                if (replica_of(&sc->tenants[k], r->replicas) == q)
                    mine += r->tenants[k].served;
            fprintf(f, " r%" PRIu32 " %.1f%%", q + 1, all > 0 ? 100 * mine / all : 0.0);
        }
        fprintf(f, "; peak in flight %" PRIu64 " (window %" PRIu32 ")\n", r->peak_in_flight,
                sc->capacity.max_in_flight);
    }
}

/* The summary; where the scenario is priced (priced_scenario), Jain's
 * index in priced cost too. */
static void table_summary(FILE *f, const fq_scenario *sc, fq_sim_result *const *rs, size_t n)
{
    char a[16], b[16], c[16], d[16], e[16];
    bool priced = priced_scenario(sc);
    fprintf(f, "\n  %-18s %8s %8s %8s %11s %6s %7s %10s %8s%s\n", "summary", "wait p50", "p99",
            "max", "worst first", "Jain", "util", "idle+queue", "rejected",
            priced ? "  Jain in priced cost" : "");
    for (size_t i = 0; i < n; i++) {
        const fq_sim_result *r = rs[i];
        fprintf(f, "  %-18s %8s %8s %8s %11s %6.3f %6.1f%% %10s %8" PRIu64,
                policies[r->policy].name, dur(a, sizeof(a), (double)r->wait_p50),
                dur(b, sizeof(b), (double)r->wait_p99), dur(c, sizeof(c), (double)r->wait_max),
                dur(d, sizeof(d), (double)worst_first(r)), r->jain, 100 * r->utilization,
                dur(e, sizeof(e), r->idle_queued_s * 1000), r->rejected);
        if (priced)
            fprintf(f, " %20.3f", r->jain_priced);
        fprintf(f, "\n");
    }
}

static void table(FILE *f, const fq_scenario *sc, fq_sim_result *const *rs, size_t n)
{
    char cap[96], win[16];
    capacity_text(cap, sizeof(cap), sc);
    fprintf(f, "== scenario %s (seed %" PRIu64 "): %zu tenants, %zu runs, window %s; %s; "
            "quantum %" PRIu32 "\n", sc->name, sc->seed,
            sc->n_tenants, sc->n_runs, dur(win, sizeof(win), (double)(n ? rs[0]->window : 0)),
            cap, sc->quantum);
    for (size_t i = 0; i < n; i++)
        table_policy(f, sc, rs[i]);
    table_summary(f, sc, rs, n);
    fprintf(f, "\n");
}

static void csv_header(FILE *f)
{
    fprintf(f, "scenario,seed,policy,tenant,plan,weight,submitted,rejected,dispatched,completed,"
            "left,tokens_served,share,fair_share,backlogged,wait_p50_ms,wait_p99_ms,"
            "wait_max_ms,first_wait_ms,ahead_tokens,tokens_per_s,runs_per_min,utilization,"
            "jain,idle_queued_s,service_ms,end_ms,tokens_priced,share_priced,"
            "fair_share_priced,jain_priced\n");
}

static void csv(FILE *f, const fq_scenario *sc, fq_sim_result *const *rs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const fq_sim_result *r = rs[i];
        const char *pn = policies[r->policy].name;
        for (size_t k = 0; k < r->n_tenants; k++) {
            const fq_sim_tenant_stats *t = &r->tenants[k];
            const fq_scenario_tenant *tn = &sc->tenants[k];
            fprintf(f, "%s,%" PRIu64 ",%s,%s,%s,%" PRIu32 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                    ",%" PRIu64 ",%" PRIu64 ",%.0f,%.6f,%.6f,%d,%" PRIu64 ",%" PRIu64 ",%" PRIu64
                    ",%" PRId64 ",%.0f,,,,,,,,%.0f,%.6f,%.6f,\n", sc->name, sc->seed, pn, tn->id,
                    tn->plan, tn->weight, t->submitted, t->rejected, t->dispatched,
                    t->completed, t->queued_end, t->served, t->share, t->fair, t->backlogged,
                    t->wait_p50, t->wait_p99, t->wait_max, t->first_wait, t->ahead,
                    t->served_priced, t->share_priced, t->fair_priced);
        }
        double priced = 0;
        for (size_t k = 0; k < r->n_tenants; k++)
            priced += r->tenants[k].served_priced;
        double served = r->tokens_per_s * (double)r->window / 1000.0;
        fprintf(f, "%s,%" PRIu64 ",%s,*,,,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                ",%" PRIu64 ",%.0f,1,1,%" PRIu32 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRId64
                ",,%.3f,%.3f,%.6f,%.6f,%.3f,%.1f,%" PRIu64 ",%.0f,1,1,%.6f\n", sc->name,
                sc->seed, pn, r->submitted, r->rejected, r->dispatched, r->completed,
                r->queued_end + r->in_flight_end, served, r->n_backlogged, r->wait_p50,
                r->wait_p99, r->wait_max, worst_first(r), r->tokens_per_s, r->runs_per_min,
                r->utilization, r->jain, r->idle_queued_s, r->service_ms, r->end, priced,
                r->jain_priced);
    }
}

static void json(FILE *f, const fq_scenario *sc, fq_sim_result *const *rs, size_t n,
                 int first)
{
    const fq_scenario_capacity *c = &sc->capacity;
    fprintf(f, "%s\n  {\"scenario\": \"%s\", \"seed\": %" PRIu64 ", \"tenants\": %zu, "
            "\"runs\": %zu, \"window_ms\": %" PRIu64 ", \"quantum\": %" PRIu32 ", "
            "\"capacity\": {\"workers\": %" PRIu32 ", \"worker_tokens_per_s\": %g, "
            "\"tokens_per_s\": %g, \"max_in_flight\": %" PRIu32 "},\n   \"policies\": [",
            first ? "" : ",", sc->name, sc->seed, sc->n_tenants, sc->n_runs,
            n ? rs[0]->window : 0, sc->quantum, c->workers, c->worker_tokens_per_s,
            c->tokens_per_s, c->max_in_flight);
    for (size_t i = 0; i < n; i++) {
        const fq_sim_result *r = rs[i];
        fprintf(f, "%s\n    {\"policy\": \"%s\", \"overall\": {\"submitted\": %" PRIu64
                ", \"rejected\": %" PRIu64 ", \"dispatched\": %" PRIu64 ", \"completed\": %"
                PRIu64 ", \"left\": %" PRIu64 ", \"wait_p50_ms\": %" PRIu64 ", \"wait_p99_ms\": %"
                PRIu64 ", \"wait_max_ms\": %" PRIu64 ", \"worst_first_wait_ms\": %" PRId64
                ", \"tokens_per_s\": %.3f, \"runs_per_min\": %.3f, \"utilization\": %.6f, "
                "\"jain\": %.6f, \"jain_priced\": %.6f, \"backlogged\": %" PRIu32
                ", \"idle_queued_s\": %.3f, \"service_ms\": %.1f, \"end_ms\": %" PRIu64
                "},\n     \"tenants\": [",
                i ? "," : "", policies[r->policy].name, r->submitted, r->rejected,
                r->dispatched, r->completed, r->queued_end + r->in_flight_end, r->wait_p50,
                r->wait_p99, r->wait_max, worst_first(r), r->tokens_per_s, r->runs_per_min,
                r->utilization, r->jain, r->jain_priced, r->n_backlogged, r->idle_queued_s,
                r->service_ms, r->end);
        for (size_t k = 0; k < r->n_tenants; k++) {
            const fq_sim_tenant_stats *t = &r->tenants[k];
            const fq_scenario_tenant *tn = &sc->tenants[k];
            fprintf(f, "%s\n      {\"tenant\": \"%s\", \"plan\": \"%s\", \"weight\": %" PRIu32
                    ", \"submitted\": %" PRIu64 ", \"rejected\": %" PRIu64 ", \"dispatched\": %"
                    PRIu64 ", \"completed\": %" PRIu64 ", \"left\": %" PRIu64
                    ", \"tokens_served\": %.0f, \"share\": %.6f, \"fair_share\": %.6f, "
                    "\"backlogged\": %s, \"wait_p50_ms\": %" PRIu64 ", \"wait_p99_ms\": %" PRIu64
                    ", \"wait_max_ms\": %" PRIu64 ", \"first_wait_ms\": %" PRId64
                    ", \"ahead_tokens\": %.0f, \"tokens_priced\": %.0f, \"share_priced\": %.6f, "
                    "\"fair_share_priced\": %.6f}", k ? "," : "", tn->id, tn->plan, tn->weight,
                    t->submitted, t->rejected, t->dispatched, t->completed, t->queued_end,
                    t->served, t->share, t->fair, t->backlogged ? "true" : "false",
                    t->wait_p50, t->wait_p99, t->wait_max, t->first_wait, t->ahead,
                    t->served_priced, t->share_priced, t->fair_priced);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}");
}

void fq_sim_report_begin(fq_sim_report *rep, FILE *f, enum fq_sim_format format)
{
    *rep = (fq_sim_report){.f = f, .format = format};
    if (format == FQ_SIM_CSV)
        csv_header(f);
    else if (format == FQ_SIM_JSON)
        fprintf(f, "{\"scenarios\": [");
}

void fq_sim_report_add(fq_sim_report *rep, const fq_scenario *sc,
                       fq_sim_result *const *results, size_t n)
{
    switch (rep->format) {
    case FQ_SIM_CSV:
        csv(rep->f, sc, results, n);
        break;
    case FQ_SIM_JSON:
        json(rep->f, sc, results, n, rep->scenarios == 0);
        break;
    default:
        table(rep->f, sc, results, n);
        break;
    }
    rep->scenarios++;
}

fq_status fq_sim_report_end(fq_sim_report *rep)
{
    if (rep->format == FQ_SIM_JSON)
        fprintf(rep->f, "\n]}\n");
    return ferror(rep->f) ? FQ_EIO : FQ_OK;
}

void fq_sim_waits_header(FILE *f)
{
    fprintf(f, "scenario,policy,tenant,submitted_ms,dispatched_ms,wait_ms\n");
}

void fq_sim_waits(FILE *f, const fq_scenario *sc, fq_sim_result *const *results, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const fq_sim_result *r = results[i];
        for (size_t k = 0; k < sc->n_runs; k++) {
            uint64_t d = r->runs[k].dispatched;
            if (d == UINT64_MAX)
                continue;
            const fq_scenario_run *run = &sc->runs[k];
            fprintf(f, "%s,%s,%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", sc->name,
                    policies[r->policy].name, sc->tenants[run->tenant].id, run->at, d,
                    d - run->at);
        }
    }
}
