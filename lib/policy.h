/* policy.h -- plans, tenants and their weights: fairness as stated policy. */
#ifndef FQ_POLICY_H
#define FQ_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "drr.h"
#include "fq.h"

/* A policy is not locked: one thread owns it (the proxy's loop), and
 * changes from other threads (a KV watcher) are handed to that thread. */
typedef struct fq_policy fq_policy;

/* The largest weight a plan, tenant or override may state: the scheduler
 * grants quantum x weight in a signed 64-bit deficit, and with quanta up to
 * FQ_POLICY_MAX_QUANTUM this keeps the product far from overflow. */
#define FQ_POLICY_MAX_WEIGHT FQ_SCHED_MAX_WEIGHT
#define FQ_POLICY_MAX_QUANTUM FQ_SCHED_MAX_QUANTUM

/* Prices of token kinds, relative to one another: a run's priced cost is
 * in input tokens' worth (docs/policy.md). Each 1 .. FQ_POLICY_MAX_PRICE;
 * 0 in a plan or entry is "not set at this layer", finally 1. */
#define FQ_POLICY_MAX_PRICE 1000000u
/* The most sub-tenants a plan, tenant or override may let a tenant know
 * (the scheduler's own bound in the proxy). */
#define FQ_POLICY_MAX_SUBTENANTS FQ_MAX_SUBTENANTS

typedef struct fq_prices {
    uint32_t input, output, cached;
} fq_prices;

/* Priority classes within a tenant (scheduler.classes, docs/policy.md):
 * names, highest first, each with its own max_pending per tenant. A run
 * naming none is in the last (lowest). */
typedef struct fq_classes {
    uint32_t n;                 /* 0: none configured; else 2..FQ_SCHED_MAX_CLASSES */
    char name[FQ_SCHED_MAX_CLASSES][FQ_CLASS_MAX + 1]; /* [A-Za-z0-9_-], distinct */
    uint32_t max_pending[FQ_SCHED_MAX_CLASSES]; /* per tenant; 0: none */
} fq_classes;

/* Read text, "name[:max_pending],..." (2 to FQ_SCHED_MAX_CLASSES names of 1
 * to FQ_CLASS_MAX of [A-Za-z0-9_-], distinct, highest first, max_pending
 * 1..2^32-1, blanks around the parts allowed); NULL or "" is none. FQ_EINVAL
 * on anything else: *out is then none. */
fq_status fq_classes_parse(fq_classes *out, const char *text);
/* The index of the class named name[0..len), or -1 if none is so named. */
int fq_classes_find(const fq_classes *c, const char *name, size_t len);

/* How a tenant's classes share its turns: strict priority (the highest
 * class with queued runs first), or DRR in tokens at a weight per class.
 * In a plan or entry, set 0 is "not set at this layer" (finally strict). */
typedef struct fq_class_weights {
    bool set;                   /* set at this layer */
    uint16_t w[FQ_SCHED_MAX_CLASSES]; /* [0] 0: strict; else each class's
                                   weight, 1 .. FQ_SCHED_MAX_CLASS_WEIGHT */
} fq_class_weights;

/* Read text: "strict", or one weight per class, highest class first
 * ("3, 1": 2 to FQ_SCHED_MAX_CLASSES weights of 1 to
 * FQ_SCHED_MAX_CLASS_WEIGHT, separated by commas, blanks around them
 * allowed); NULL or "" is not set. FQ_EINVAL on anything else: *out is
 * then not set. */
fq_status fq_class_weights_parse(fq_class_weights *out, const char *text);
/* Its weights (0: strict or not set). */
uint32_t fq_class_weights_count(const fq_class_weights *cw);
/* It as text ("strict", "3,1") in buf[0..cap), "" when not set. */
void fq_class_weights_format(char *buf, size_t cap, const fq_class_weights *cw);

/* Each class's max_pending for a tenant, highest class first, over
 * scheduler.classes' own (0: no limit of the class's own, under the
 * tenant's max_pending). In a plan or entry, not set is "not set at this
 * layer" (finally scheduler.classes'). */
typedef struct fq_class_pending {
    bool set;                   /* set at this layer */
    uint32_t count;             /* classes given: 2 .. FQ_SCHED_MAX_CLASSES */
    uint32_t n[FQ_SCHED_MAX_CLASSES];
} fq_class_pending;

/* Read text: one max_pending per class, highest class first ("100, 0": 2
 * to FQ_SCHED_MAX_CLASSES numbers of 0 to 2^32-1, separated by commas,
 * blanks around them allowed); NULL or "" is not set. FQ_EINVAL on
 * anything else: *out is then not set. */
fq_status fq_class_pending_parse(fq_class_pending *out, const char *text);
/* It as text ("100,0") in buf[0..cap), "" when not set. */
void fq_class_pending_format(char *buf, size_t cap, const fq_class_pending *cp);

/* A run's priced cost from the kinds its completion reported: input tokens
 * (cached ones included) less the cached, at the input price, plus the
 * cached at theirs and the output at theirs, over the input price, rounded
 * up. cached above input is taken as every input token cached (msg refuses
 * such a completion).
 * With every price 1 it is input + output. */
uint64_t fq_price_cost(const fq_prices *p, uint64_t input, uint64_t output, uint64_t cached);

/* Which layer set a tenant's effective policy, for stats and metrics. */
enum fq_policy_source {
    FQ_SRC_DEFAULT = 0,     /* the default plan: tenant not listed */
    FQ_SRC_CONFIG,          /* the tenants sequence of the config file */
    FQ_SRC_OVERRIDE,        /* a runtime override (admin request or KV) */
};

/* The source's name ("default", "config", "override"; "unknown" past them),
 * as the stats reply and the metrics' source label say it. */
const char *fq_policy_source_name(enum fq_policy_source s);

/* A plan. Its name follows the tenant id rule (1 to 64 of [A-Za-z0-9_-]),
 * since it appears in subjects, KV values and metric labels. */
typedef struct fq_plan {
    char name[FQ_TENANT_MAX + 1];
    uint32_t weight;            /* 1 .. FQ_POLICY_MAX_WEIGHT */
    uint32_t max_in_flight;     /* 0 = none */
    uint32_t max_pending;       /* 0 = the policy default */
    uint32_t burst_in_flight;   /* the cap while no other tenant has queued
                                   runs, where above max_in_flight; 0 = none */
    uint32_t tokens_per_minute; /* a tenant's token rate; 0 = none */
    uint32_t max_subtenants;    /* sub-tenants a tenant's runs are shared among,
                                   at most FQ_POLICY_MAX_SUBTENANTS; 0 = none */
    fq_prices prices;           /* of token kinds; 0: 1 */
    fq_class_weights class_weights; /* not set: strict */
    fq_class_pending class_max_pending; /* not set: scheduler.classes' */
} fq_plan;

/* A tenant entry, used both for the config's tenants and for overrides.
 * Every field that is empty or 0 is "not set at this layer": plan "" is the
 * layer below's plan (finally the default plan); weight, max_in_flight,
 * max_pending, burst_in_flight, tokens_per_minute and max_subtenants of 0
 * take the layer below's value, finally the plan's. */
typedef struct fq_tenant_entry {
    char id[FQ_TENANT_MAX + 1];
    char plan[FQ_TENANT_MAX + 1];
    uint32_t weight;
    uint32_t max_in_flight;
    uint32_t max_pending;
    uint32_t burst_in_flight;
    uint32_t tokens_per_minute;
    uint32_t max_subtenants;
    fq_prices prices;
    fq_class_weights class_weights; /* set: this layer's, over the layer below's */
    fq_class_pending class_max_pending; /* set: this layer's, over the layer below's */
} fq_tenant_entry;

typedef struct fq_policy_resolved {
    fq_tenant_policy p;
    fq_prices prices;           /* each kind's, 1 where no layer sets one */
    fq_class_pending class_max_pending; /* set: a layer's, else scheduler.classes' */
    const char *plan;           /* plan name, valid until the policy is destroyed */
    enum fq_policy_source source;   /* the highest layer that lists the tenant */
} fq_policy_resolved;

/* Create an empty policy. default_plan names the plan of tenants that are
 * not listed (it may be added after); reject_unknown refuses them instead;
 * default_max_pending applies where no layer sets max_pending (0 = none).
 * On error *out is NULL: FQ_EINVAL for an invalid plan name. */
fq_status fq_policy_create(fq_policy **out, const char *default_plan,
                           bool reject_unknown, uint32_t default_max_pending);
/* Safe on NULL. */
void fq_policy_destroy(fq_policy *p);

/* Add or replace a plan / a config tenant entry / an override. An entry that
 * names a plan that does not exist is FQ_ENOTFOUND; an invalid name or id, or
 * a weight above FQ_POLICY_MAX_WEIGHT (or a plan weight of 0), is FQ_EINVAL.
 * On error, nothing is changed. Replacing a plan changes, from their next
 * resolve, every tenant on it. */
fq_status fq_policy_set_plan(fq_policy *p, const fq_plan *plan);
fq_status fq_policy_set_tenant(fq_policy *p, const fq_tenant_entry *t);
fq_status fq_policy_set_override(fq_policy *p, const fq_tenant_entry *t);
/* Drop a tenant's override; FQ_ENOTFOUND if it has none. */
fq_status fq_policy_clear_override(fq_policy *p, const char *tenant);

/* The effective policy of a tenant, field by field: the override's value if
 * set, else the config entry's, else the plan's (the plan itself resolved the
 * same way, ending at the default plan). O(1): three hash lookups.
 * FQ_EUNKNOWN: listed in no layer, and unknown tenants are rejected.
 * FQ_EINVAL: not a valid tenant id. FQ_ENOTFOUND: the default plan does not
 * exist. On error *out is untouched. */
fq_status fq_policy_resolve(fq_policy_resolved *out, const fq_policy *p,
                            const char *tenant);

/* The priority classes configured (scheduler.classes; 0: none), which
 * class weights must match. */
void fq_policy_set_nclasses(fq_policy *p, uint32_t n);
/* Whether cw may be set: not set, strict, or one weight per class. */
bool fq_policy_class_weights_fit(const fq_policy *p, const fq_class_weights *cw);
/* Whether cp may be set: not set, or one max_pending per class. */
bool fq_policy_class_pending_fit(const fq_policy *p, const fq_class_pending *cp);

/* The plan named name, or NULL. Valid until the policy is destroyed. */
const fq_plan *fq_policy_plan(const fq_policy *p, const char *name);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Visit every override, in no particular order, e.g. to carry them over to
 * the policy built from a reloaded config. cb must not change p. */
void fq_policy_foreach_override(const fq_policy *p,
                                void (*cb)(void *arg, const fq_tenant_entry *t),
                                void *arg);
#endif

#endif
