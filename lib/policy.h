/* policy.h -- plans, tenants and their weights: fairness as stated policy. */
#ifndef FQ_POLICY_H
#define FQ_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "drr.h"
#include "fq.h"

typedef struct fq_policy fq_policy;

/* Which layer set a tenant's effective policy, for stats and metrics. */
enum fq_policy_source {
    FQ_SRC_DEFAULT = 0,     /* the default plan: tenant not listed */
    FQ_SRC_CONFIG,          /* the tenants sequence of the config file */
    FQ_SRC_OVERRIDE,        /* a runtime override (admin request or KV) */
};

typedef struct fq_plan {
    char name[FQ_TENANT_MAX + 1];
    uint32_t weight;            /* >= 1 */
    uint32_t max_in_flight;     /* 0 = none */
    uint32_t max_pending;       /* 0 = the policy default */
} fq_plan;

/* A tenant entry: plan by name; weight/max_in_flight/max_pending of 0 take
 * the plan's value. */
typedef struct fq_tenant_entry {
    char id[FQ_TENANT_MAX + 1];
    char plan[FQ_TENANT_MAX + 1];
    uint32_t weight;
    uint32_t max_in_flight;
    uint32_t max_pending;
} fq_tenant_entry;

typedef struct fq_policy_resolved {
    fq_tenant_policy p;
    const char *plan;           /* plan name, valid until the policy changes */
    enum fq_policy_source source;
} fq_policy_resolved;

fq_status fq_policy_create(fq_policy **out, const char *default_plan,
                           bool reject_unknown, uint32_t default_max_pending);
void fq_policy_destroy(fq_policy *p);

/* Add or replace a plan / a config tenant entry / an override. An entry that
 * names a plan that does not exist is FQ_ENOTFOUND and changes nothing. */
fq_status fq_policy_set_plan(fq_policy *p, const fq_plan *plan);
fq_status fq_policy_set_tenant(fq_policy *p, const fq_tenant_entry *t);
fq_status fq_policy_set_override(fq_policy *p, const fq_tenant_entry *t);
fq_status fq_policy_clear_override(fq_policy *p, const char *tenant);

/* The effective policy of a tenant: override, else config entry, else the
 * default plan. FQ_EUNKNOWN: not listed, and unknown tenants are rejected. */
fq_status fq_policy_resolve(fq_policy_resolved *out, const fq_policy *p,
                            const char *tenant);

#endif
