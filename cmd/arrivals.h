/* arrivals.h -- fairq-load's arrival model: a small source interface, and the steady mix its flags describe. */
#ifndef FQ_ARRIVALS_H
#define FQ_ARRIVALS_H

/*
 * The load generator asks a source for runs in time order and publishes
 * each at its time; it knows nothing else of how they were made. The steady
 * source here is what the flags describe (a rate, tenants chosen uniformly,
 * a cost mix); a source reading scenario files (bursts, idle periods, a
 * tenant's estimate error) plugs in behind the same two functions.
 */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "client.h"

/* One run to submit. */
typedef struct fql_arrival {
    int64_t at_us;              /* when, from the start of the load; 0 with rate 0 */
    uint32_t tenant;            /* index into the source's tenants */
    const char *workflow;       /* "" for none; valid until the next call */
    uint32_t est_tokens;        /* declared in Fair-Est-Tokens */
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
    out->tenant = (uint32_t)(fql_uniform(&s->rng) * src->ntenants);
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

#endif
