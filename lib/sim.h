/* sim.h -- a discrete-event simulator of producers, the scheduler and workers, in virtual time. */
#ifndef FQ_SIM_H
#define FQ_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fq.h"
#include "scenario.h"

/* The policies compared, in the order reports list them. */
enum fq_sim_policy {
    FQ_SIM_FIFO = 0,            /* one FIFO queue for every tenant */
    FQ_SIM_RR,                  /* the design card's listing (lib/cardrr) */
    FQ_SIM_CAP,                 /* FIFO with a hard per-tenant concurrency cap */
    FQ_SIM_DRR,                 /* fairq as built: lib/drr + lib/estimate */
    FQ_SIM_DRR_NO_RECONCILE,    /* estimates charged, actuals ignored */
    FQ_SIM_DRR_NO_CORRECTION,   /* declared estimates charged as declared */
    FQ_SIM_DRR_NO_IDLE_RESET,   /* credit kept when a queue goes empty */
    FQ_SIM_DRR_CAP,             /* drr with each tenant's max_in_flight as a hard cap */
    FQ_SIM_DRR_BURST,           /* drr-cap, with burst_in_flight while no other queues */
    FQ_SIM_DRR_RATE,            /* drr with each tenant's tokens_per_minute */
    FQ_SIM_DRR_PRICED,          /* drr reconciling priced costs of token kinds */
    FQ_SIM_DRR_CLASS,           /* drr with priority classes within a tenant */
    FQ_SIM_DRR_SUB,             /* drr with sub-tenants sharing their tenant's turn */
    FQ_SIM_DRR_CLASS_SUB,       /* drr-class and drr-sub together: classes first */
    FQ_SIM_DRR_REPLICAS,        /* drr on the scenario's proxies, windows by lib/share */
    FQ_SIM__NPOLICIES
};

/* "drr-no-reconcile", ...; NULL if p is out of range. */
const char *fq_sim_policy_name(enum fq_sim_policy p);
/* Parse "all" or a comma-separated list of names into out (room for
 * FQ_SIM__NPOLICIES), in the order given, without duplicates. FQ_EINVAL
 * names the unknown word in err. */
fq_status fq_sim_policy_parse(enum fq_sim_policy *out, size_t *n, const char *list,
                              char *err, size_t errlen);

/* What one tenant got. Tokens are actual tokens; times are ms. */
typedef struct fq_sim_tenant_stats {
    uint64_t submitted;         /* runs */
    uint64_t rejected;          /* refused at admission (max_pending) */
    uint64_t dispatched;
    uint64_t completed;
    uint64_t queued_end;        /* still queued when the horizon stopped it */
    uint64_t demand;            /* tokens submitted within the window */
    double served;              /* tokens processed within the window */
    double served_priced;       /* their priced cost (docs/policy.md) */
    double share;               /* served / everyone's served */
    double fair;                /* weighted max-min fair share of that service */
    bool backlogged;            /* wanted more than its fair share */
    double share_priced;        /* the same two in priced cost: served_priced / */
    double fair_priced;         /* everyone's, and the fair share of that */
    uint64_t wait_p50, wait_p99, wait_max;  /* submit to dispatch */
    int64_t first_wait;         /* of its first run; -1 if never dispatched */
    double ahead;               /* most tokens dispatched ahead of its weighted
                                   fair (GPS) service within a busy period */
} fq_sim_tenant_stats;

/* The outcome of one run, for the wait chart. */
typedef struct fq_sim_outcome {
    uint64_t dispatched;        /* ms; UINT64_MAX if never */
    bool rejected;
} fq_sim_outcome;

typedef struct fq_sim_result {
    enum fq_sim_policy policy;
    size_t n_tenants;
    fq_sim_tenant_stats *tenants;   /* indexed as the scenario's tenants */
    fq_sim_outcome *runs;           /* indexed as the scenario's runs */
    uint64_t submitted, rejected, dispatched, completed, queued_end, in_flight_end;
    uint64_t wait_p50, wait_p99, wait_max;  /* over every dispatched run */
    uint64_t end;               /* ms: when the last event happened */
    uint64_t window;            /* ms: the measurement window [0, window) */
    double tokens_per_s;        /* served within the window, per second */
    double runs_per_min;        /* runs completed within the window, per minute */
    double utilization;         /* served / capacity over the window */
    double idle_queued_s;       /* seconds of full capacity left idle while runs
                                   were queued, over the whole run */
    double jain;                /* Jain's index of served/weight over backlogged
                                   tenants; 1 when fewer than two */
    uint32_t n_backlogged;
    double jain_priced;         /* the same over priced cost (docs/policy.md) */
    double service_ms;          /* mean service time of a completed run */
    uint32_t replicas;          /* drr-replicas: how many; else 1 */
    uint64_t peak_in_flight;    /* drr-replicas: most runs dispatched and not
                                   completed at once (the window overshot by
                                   what exceeds capacity.max_in_flight) */
} fq_sim_result;

/* Simulate the scenario's runs under policy p. Deterministic: the same
 * scenario gives the same result. On error *out is NULL. */
fq_status fq_sim_run(fq_sim_result **out, const fq_scenario *sc, enum fq_sim_policy p);
/* Safe on NULL. */
void fq_sim_result_free(fq_sim_result *r);

enum fq_sim_format { FQ_SIM_TABLE = 0, FQ_SIM_CSV, FQ_SIM_JSON };
fq_status fq_sim_format_parse(enum fq_sim_format *out, const char *name);

/* A report over several scenarios: begin, one add per scenario with its
 * results under each policy, end. */
typedef struct fq_sim_report {
    FILE *f;
    enum fq_sim_format format;
    size_t scenarios;           /* added so far */
} fq_sim_report;

void fq_sim_report_begin(fq_sim_report *rep, FILE *f, enum fq_sim_format format);
void fq_sim_report_add(fq_sim_report *rep, const fq_scenario *sc,
                       fq_sim_result *const *results, size_t n);
/* FQ_EIO if writing failed. */
fq_status fq_sim_report_end(fq_sim_report *rep);

/* The wait of every dispatched run as CSV (scenario, policy, tenant,
 * submitted_ms, dispatched_ms, wait_ms), for scripts/sim-chart.sh. */
void fq_sim_waits_header(FILE *f);
void fq_sim_waits(FILE *f, const fq_scenario *sc, fq_sim_result *const *results, size_t n);

#endif
