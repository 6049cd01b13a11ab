/* scenario.h -- simulated workloads: tenant mixes from YAML scenarios (libcyaml), or replayed from trace CSV. */
#ifndef FQ_SCENARIO_H
#define FQ_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fq.h"
#include "policy.h"

/*
 * A scenario file names tenants (plan, weight), their arrival processes
 * (constant rate, Poisson, bursts, idle periods), per-workflow cost
 * distributions, each tenant's estimate error and the capacity of the
 * workers. Loading it generates its runs deterministically from a seed, so
 * a simulator, a load generator and a test all see the same workload. A
 * trace replaces the tenants and runs with recorded ones. docs/sim.md
 * describes both formats.
 */

/* Longest scenario name kept. */
#define FQ_SCENARIO_NAME_MAX 64

/* A tenant as the simulator applies it. */
typedef struct fq_scenario_tenant {
    char id[FQ_TENANT_MAX + 1];
    char plan[FQ_TENANT_MAX + 1];
    uint32_t weight;            /* quantum multiplier, >= 1 */
    uint32_t max_pending;       /* admission limit in queued runs; 0 = none */
    uint32_t max_in_flight;     /* the cap policy's per-tenant cap; 0 = none */
    uint32_t burst_in_flight;   /* drr-burst: the cap while no other tenant
                                   has queued runs; 0 = none */
    uint32_t tokens_per_minute; /* drr-rate: its token rate; 0 = none */
    double output_share;        /* of each run's actual tokens, output ones;
                                   the rest are input (none cached) */
    fq_prices prices;           /* drr-priced: its plan's; 0: 1 */
    uint32_t proxy;             /* drr-replicas: the replica that owns it, 1 to
                                   proxies.count; 0: by the server's partition
                                   function over proxies.count */
} fq_scenario_tenant;

/* A plan as stated in the scenario: what a tenant of the plan gets. */
typedef struct fq_scenario_plan {
    char name[FQ_TENANT_MAX + 1];
    uint32_t weight;            /* >= 1 */
    uint32_t max_pending;       /* 0: the scenario's max_pending */
    uint32_t max_in_flight;     /* 0: the scenario's cap_in_flight */
    uint32_t burst_in_flight;   /* 0: none */
    uint32_t tokens_per_minute; /* 0: none */
    fq_prices prices;           /* 0: 1 */
} fq_scenario_plan;

/* One run submitted by a producer. */
typedef struct fq_scenario_run {
    uint64_t at;                /* submit time, ms from the start */
    uint32_t tenant;            /* index into tenants */
    uint32_t workflow;          /* index into workflows */
    uint32_t est;               /* tokens the producer declared; 0 = none */
    uint32_t actual;            /* tokens the run really costs, >= 1 */
    uint32_t interactive;       /* drr-class: 1 if its workflow's runs go before
                                   its tenant's batch runs (0, as in a trace) */
    uint32_t sub;               /* drr-sub: its sub-tenant's number; 0: none */
} fq_scenario_run;

/* The workers. Exactly one of workers and tokens_per_s is set. */
typedef struct fq_scenario_capacity {
    uint32_t workers;           /* a fixed pool of workers ... */
    double worker_tokens_per_s; /* ... each processing this many tokens a second */
    double tokens_per_s;        /* or a token budget shared by the runs in flight */
    uint32_t max_in_flight;     /* window in runs (budget: required; pool: workers) */
    uint64_t max_in_flight_tokens; /* window in tokens; 0 = none */
} fq_scenario_capacity;

/* drr-replicas: fairq replicas, each a DRR over the tenants it owns, their
 * windows split by lib/share from heartbeats (docs/scaling.md). */
typedef struct fq_scenario_proxies {
    uint32_t count;             /* replicas; 0 or 1: one proxy */
    uint32_t heartbeat_ms;      /* heartbeat period; 0: 100 */
    uint32_t reserve_runs;      /* the shared reserve; 0: 1 */
    uint64_t reserve_tokens;    /* ... in tokens (with max_in_flight_tokens);
                                   0: the token window / the run window */
} fq_scenario_proxies;

typedef struct fq_scenario_spec fq_scenario_spec;

typedef struct fq_scenario {
    char name[FQ_SCENARIO_NAME_MAX + 1];
    uint64_t seed;              /* the seed runs were generated from */
    uint64_t duration;          /* ms: arrivals fall in [0, duration); shares are
                                   measured over it */
    uint64_t horizon;           /* ms: the simulation stops here; 0 = when drained */
    uint32_t quantum;           /* base quantum in tokens */
    uint32_t max_est;           /* charges are capped here */
    uint32_t max_pending;       /* for tenants whose plan says none; 0 = none */
    uint32_t cap_in_flight;     /* the cap policy's cap where no plan says */
    fq_scenario_capacity capacity;
    fq_scenario_proxies proxies;
    struct {
        uint32_t default_tokens;    /* charged when nothing is known */
        uint32_t min_samples;       /* completions before history is trusted */
        uint32_t percentile;        /* 0: the mean; else that percentile */
    } estimator;
    fq_scenario_plan *plans;
    size_t n_plans;
    fq_scenario_tenant *tenants;
    size_t n_tenants;
    char (*workflows)[FQ_WORKFLOW_MAX + 1];   /* "" is the workflow of none */
    size_t n_workflows;
    fq_scenario_run *runs;      /* sorted by time, then as generated or listed */
    size_t n_runs;
    fq_scenario_spec *spec;     /* the document as loaded; NULL for a trace */
} fq_scenario;

/* Load, validate and generate a scenario file with its own seed. On error
 * returns FQ_EINVAL (FQ_EIO, FQ_ENOMEM), writes "file:line:col: reason" or
 * "file: where: reason" into err, and leaves *out NULL. */
fq_status fq_scenario_load(fq_scenario **out, const char *path, char *err, size_t errlen);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The same from YAML in memory; name is used in messages. */
fq_status fq_scenario_parse(fq_scenario **out, const char *name, const char *yaml,
                            size_t len, char *err, size_t errlen);
#endif

/* Generate the runs again from another seed. On error nothing is changed.
 * FQ_EINVAL for a scenario read from a trace (it has no processes). */
fq_status fq_scenario_generate(fq_scenario *sc, uint64_t seed);

/* A scenario with defaults and no tenants, for replaying a trace without a
 * scenario file: 10 workers of 25 tokens/s, quantum 1000. */
fq_status fq_scenario_defaults(fq_scenario **out, const char *name);

/* Replace sc's tenants, workflows and runs with those of a trace CSV
 * (docs/sim.md), and its name with the trace's base name. A row's plan is
 * looked up in sc's plans (an error if sc has plans and not this one); a
 * tenant without a plan keeps what sc says of it, else weight 1. The
 * duration becomes the end of the last arrival unless sc has one. On error
 * nothing is changed and err says "name:line: reason". */
fq_status fq_scenario_read_trace(fq_scenario *sc, FILE *f, const char *name,
                                 char *err, size_t errlen);
/* Write sc's runs as a trace CSV, with the plan column. */
fq_status fq_scenario_write_trace(FILE *f, const fq_scenario *sc);

/* Safe on NULL. */
void fq_scenario_free(fq_scenario *sc);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Index of the tenant named id, or -1. */
long fq_scenario_tenant_index(const fq_scenario *sc, const char *id);
#endif

#endif
