/* arrivals.h -- fairq-load's arrival model: a small source interface, the steady mix its flags describe, and scenario files. */
#ifndef FQ_ARRIVALS_H
#define FQ_ARRIVALS_H

/*
 * The load generator asks a source for runs in time order and publishes
 * each at its time; it knows nothing else of how they were made. Two
 * sources plug in behind the same two functions:
 *
 * - the steady one is what the flags describe (a rate, tenants chosen
 *   uniformly, a cost mix);
 *
 * - the scenario one replays the runs a scenario file generates
 *   (lib/scenario: bursts, idle periods, Poisson arrivals, a tenant's
 *   estimate error), the very runs fairq-sim simulates, time-compressed:
 *   a run submitted at t in the scenario is submitted at t / compress here,
 *   and a worker works compress times faster, so every wait, read in real
 *   time, is the scenario's divided by compress.
 */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "client.h"
#include "scenario.h"

/* One run to submit. */
typedef struct fql_arrival {
    int64_t at_us;              /* when, from the start of the load; 0 with rate 0 */
    uint32_t tenant;            /* index into the source's tenants */
    const char *workflow;       /* "" for none; valid until the next call */
    uint32_t est_tokens;        /* declared in Fair-Est-Tokens; 0: none declared */
    uint64_t actual_tokens;     /* what the simulated worker will spend */
} fql_arrival;

typedef struct fql_source fql_source;
struct fql_source {
    /* The next arrival, in time order; false once there are no more. */
    bool (*next)(fql_source *src, fql_arrival *out);
    /* Free the source. */
    void (*destroy)(fql_source *src);
    const char *const *tenants; /* tenant ids, indexed by fql_arrival.tenant */
    uint32_t ntenants;          /* at least 1 */
};

/* splitmix64: small, fast, and the same sequence for a seed everywhere. */
static inline uint64_t fql_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double fql_uniform(uint64_t *state)
{
    return (double)(fql_rand(state) >> 11) * 0x1.0p-53;
}

/* What the flags describe. */
typedef struct fql_steady_cfg {
    double rate;                /* runs a second over all tenants; 0: back to back */
    int64_t duration_us;        /* no arrival at or after this (rate > 0 only) */
    uint64_t count;             /* at most this many runs; 0: no limit */
    bool poisson;               /* exponential gaps; else evenly spaced */
    bool in_turn;               /* tenants in turn; else one at random */
    double actual_factor;       /* actual tokens = estimate x factor */
    uint64_t seed;              /* the same seed gives the same runs */
    fqc_costs costs;            /* the cost mix */
} fql_steady_cfg;

typedef struct fql_steady {
    fql_source base;            /* first: a fql_source * is a fql_steady * */
    fql_steady_cfg cfg;
    uint64_t rng;               /* generator state */
    uint64_t made;              /* arrivals returned so far */
    double t_us;                /* time of the next arrival */
} fql_steady;

static inline bool fql_steady_next(fql_source *src, fql_arrival *out)
{
    fql_steady *s = (fql_steady *)src;
    const fql_steady_cfg *c = &s->cfg;
    int k;

    if (c->count && s->made >= c->count)
        return false;
    if (c->rate > 0 && s->t_us >= (double)c->duration_us)
        return false;
    k = fqc_costs_pick(&c->costs, fql_uniform(&s->rng));
    out->at_us = (int64_t)s->t_us;
    out->tenant = c->in_turn ? (uint32_t)(s->made % src->ntenants)
                             : (uint32_t)(fql_uniform(&s->rng) * src->ntenants);
    out->workflow = c->costs.workflow[k];
    out->est_tokens = c->costs.tokens[k];
    out->actual_tokens = (uint64_t)llround(c->costs.tokens[k] * c->actual_factor);
    if (c->rate > 0) {
        double gap = 1e6 / c->rate;
        s->t_us += c->poisson ? -log(1.0 - fql_uniform(&s->rng)) * gap : gap;
    }
    s->made++;
    return true;
}

static inline void fql_steady_destroy(fql_source *src)
{
    free(src);
}

/* A steady source over tenants[0..n) (not copied: they must outlive it).
 * FQ_EINVAL if n is 0 or the rate or factor is negative or not finite. */
static inline fq_status fql_steady_create(fql_source **out, const fql_steady_cfg *cfg,
                                          const char *const *tenants, uint32_t n)
{
    fql_steady *s;

    if (n == 0 || !(cfg->rate >= 0) || !isfinite(cfg->rate) || !(cfg->actual_factor >= 0) ||
        !isfinite(cfg->actual_factor) || cfg->costs.n == 0)
        return FQ_EINVAL;
    if (!(s = calloc(1, sizeof *s)))
        return FQ_ENOMEM;
    s->base.next = fql_steady_next;
    s->base.destroy = fql_steady_destroy;
    s->base.tenants = tenants;
    s->base.ntenants = n;
    s->cfg = *cfg;
    s->rng = cfg->seed;
    *out = &s->base;
    return FQ_OK;
}

/* A scenario's runs, in its time order, compressed. */
typedef struct fql_scenario {
    fql_source base;            /* first: a fql_source * is a fql_scenario * */
    fq_scenario *sc;            /* the scenario, its runs generated */
    const char **ids;           /* tenant ids, pointing into sc->tenants */
    double compress;            /* scenario seconds per real second, > 0 */
    size_t next;                /* index of the next run in sc->runs */
} fql_scenario;

static inline bool fql_scenario_next(fql_source *src, fql_arrival *out)
{
    fql_scenario *s = (fql_scenario *)src;
    const fq_scenario_run *r;

    if (s->next >= s->sc->n_runs)
        return false;
    r = &s->sc->runs[s->next++];
    out->at_us = llround((double)r->at * 1000.0 / s->compress);
    out->tenant = r->tenant;
    out->workflow = s->sc->workflows[r->workflow];
    out->est_tokens = r->est;
    out->actual_tokens = r->actual;
    return true;
}

static inline void fql_scenario_destroy(fql_source *src)
{
    fql_scenario *s = (fql_scenario *)src;
    fq_scenario_free(s->sc);
    free(s->ids);
    free(s);
}

/* A source replaying the runs of the scenario file at path, generated from
 * *seed (NULL: the file's own seed), compress times faster than the
 * scenario's clock. On error
 * returns FQ_EINVAL (a bad file or compress not a finite number > 0: err
 * says why, "file:line:col: reason" for the file), FQ_EIO or FQ_ENOMEM, and
 * *out is unchanged. */
static inline fq_status fql_scenario_create(fql_source **out, const char *path, double compress,
                                            const uint64_t *seed, char *err, size_t errlen)
{
    fql_scenario *s;
    fq_scenario *sc = NULL;
    fq_status st;

    if (!(compress > 0) || !isfinite(compress)) {
        snprintf(err, errlen, "the compression must be a number above 0");
        return FQ_EINVAL;
    }
    if ((st = fq_scenario_load(&sc, path, err, errlen)) != FQ_OK)
        return st;
    if (seed && (st = fq_scenario_generate(sc, *seed)) != FQ_OK) {
        snprintf(err, errlen, "%s: cannot generate the runs from seed %llu: %s", path,
                 (unsigned long long)*seed, fq_status_text(st));
        fq_scenario_free(sc);
        return st;
    }
    /* The loader refuses a scenario without tenants. */
    s = calloc(1, sizeof *s);
    if (!s || !(s->ids = calloc(sc->n_tenants, sizeof *s->ids))) {
        snprintf(err, errlen, "out of memory");
        free(s);
        fq_scenario_free(sc);
        return FQ_ENOMEM;
    }
    for (size_t t = 0; t < sc->n_tenants; t++)
        s->ids[t] = sc->tenants[t].id;
    s->base.next = fql_scenario_next;
    s->base.destroy = fql_scenario_destroy;
    s->base.tenants = s->ids;
    s->base.ntenants = (uint32_t)sc->n_tenants;
    s->sc = sc;
    s->compress = compress;
    *out = &s->base;
    return FQ_OK;
}

/* The scenario's worker capacity as a pool of simulated workers, each
 * compress times faster: a pool is mirrored as it is; a token budget
 * shared by up to max_in_flight runs becomes max_in_flight workers with an
 * equal part each. That is what the budget gives each run while it is full;
 * with fewer runs in flight the budget runs them faster and the pool does
 * not, so at light load a budget scenario's runs take longer here than in
 * fairq-sim. */
static inline void fql_scenario_workers(const fql_source *src, uint32_t *workers,
                                        double *tokens_per_sec)
{
    const fql_scenario *s = (const fql_scenario *)src;
    const fq_scenario_capacity *c = &s->sc->capacity;

    if (c->workers) {
        *workers = c->workers;
        *tokens_per_sec = c->worker_tokens_per_s * s->compress;
    } else {
        *workers = c->max_in_flight;
        *tokens_per_sec = c->tokens_per_s / c->max_in_flight * s->compress;
    }
}

#endif
