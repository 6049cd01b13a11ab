/* policy.c -- plans, tenants and runtime overrides, resolved in O(1) per tenant. */
#include <stdlib.h>
#include <string.h>

#include "policy.h"

/*
 * Principles
 *
 * - Three layers, each a small string hash table: plans by name, config
 *   tenant entries by id, overrides by id. A tenant's policy is resolved
 *   field by field, override over config over plan, at the moment it is
 *   asked for; nothing is precomputed, so replacing a plan or an override
 *   needs no sweep over tenants, and a resolve is three lookups.
 * - Nodes are allocated one by one and never move, so the plan name a
 *   resolve hands out stays valid while the table grows. Plans are never
 *   removed, so that pointer lives as long as the policy.
 * - Every setter validates first and changes the tables only once nothing
 *   can fail any more: on error, nothing is changed.
 */

/* A hash table node; embedded first in the plan and tenant nodes. */
typedef struct pol_node {
    struct pol_node *next;      /* bucket chain */
    uint64_t hash;              /* of key, kept to rehash and compare fast */
    const char *key;            /* points into the enclosing node */
} pol_node;

/* A chained hash table of nodes with string keys; power-of-two buckets. */
typedef struct pol_table {
    pol_node **slots;
    size_t mask;                /* buckets - 1; 0 with no buckets yet */
    size_t count;               /* nodes held */
} pol_table;

typedef struct pol_plan {
    pol_node n;
    fq_plan plan;
} pol_plan;

typedef struct pol_tenant {
    pol_node n;
    fq_tenant_entry e;
} pol_tenant;

struct fq_policy {
    pol_table plans;            /* pol_plan by name */
    pol_table tenants;          /* pol_tenant by id: the config layer */
    pol_table overrides;        /* pol_tenant by id: the runtime layer */
    char default_plan[FQ_TENANT_MAX + 1];
    bool reject_unknown;        /* tenants listed nowhere are refused */
    uint32_t default_max_pending;   /* where no layer sets max_pending */
};

#define POL_MIN_SLOTS 16

/* FNV-1a: keys are short and come from the operator's config and the admin
 * API, not from producers, so a keyed hash buys nothing here. */
static uint64_t pol_hash(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static pol_node *pol_find(const pol_table *t, const char *key)
{
    if (!t->slots)
        return NULL;
    uint64_t h = pol_hash(key);
    for (pol_node *n = t->slots[h & t->mask]; n; n = n->next)
        if (n->hash == h && strcmp(n->key, key) == 0)
            return n;
    return NULL;
}

/* Make room for one more node, doubling when the load would pass 1.
 * On error the table is unchanged. */
static fq_status pol_reserve(pol_table *t)
{
    size_t buckets = t->slots ? t->mask + 1 : 0;
    if (t->count + 1 <= buckets)
        return FQ_OK;
    size_t nb = buckets ? buckets * 2 : POL_MIN_SLOTS;
    pol_node **ns = calloc(nb, sizeof(*ns));
    if (!ns)
        return FQ_ENOMEM;
    for (size_t i = 0; i < buckets; i++) {
        pol_node *n = t->slots[i];
        while (n) {
            pol_node *next = n->next;
            n->next = ns[n->hash & (nb - 1)];
            ns[n->hash & (nb - 1)] = n;
            n = next;
        }
    }
    free(t->slots);
    t->slots = ns;
    t->mask = nb - 1;
    return FQ_OK;
}

/* Link a node whose key is set; pol_reserve must have succeeded. */
static void pol_link(pol_table *t, pol_node *n)
{
    n->hash = pol_hash(n->key);
    n->next = t->slots[n->hash & t->mask];
    t->slots[n->hash & t->mask] = n;
    t->count++;
}

static pol_node *pol_unlink(pol_table *t, const char *key)
{
    if (!t->slots)
        return NULL;
    uint64_t h = pol_hash(key);
    for (pol_node **pp = &t->slots[h & t->mask]; *pp; pp = &(*pp)->next) {
        pol_node *n = *pp;
        if (n->hash == h && strcmp(n->key, key) == 0) {
            *pp = n->next;
            t->count--;
            return n;
        }
    }
    return NULL;
}

static void pol_clear(pol_table *t)
{
    for (size_t i = 0; t->slots && i <= t->mask; i++) {
        pol_node *n = t->slots[i];
        while (n) {
            pol_node *next = n->next;
            free(n);    /* the node is the first member of its allocation */
            n = next;
        }
    }
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* A plan name or tenant id held in a char[FQ_TENANT_MAX + 1]: NUL-terminated
 * within the array, and of the tenant id alphabet. */
static bool pol_name_valid(const char *s)
{
    size_t len = strnlen(s, FQ_TENANT_MAX + 1);
    return len <= FQ_TENANT_MAX && fq_tenant_id_valid(s, len);
}

/* 0 ("not set") or 1 .. FQ_POLICY_MAX_WEIGHT. */
static bool pol_weight_valid(uint32_t w)
{
    return w <= FQ_POLICY_MAX_WEIGHT;
}

fq_status fq_policy_create(fq_policy **out, const char *default_plan,
                           bool reject_unknown, uint32_t default_max_pending)
{
    *out = NULL;
    size_t len = default_plan ? strnlen(default_plan, FQ_TENANT_MAX + 1) : 0;
    if (!default_plan || !fq_tenant_id_valid(default_plan, len))
        return FQ_EINVAL;
    fq_policy *p = calloc(1, sizeof(*p));
    if (!p)
        return FQ_ENOMEM;
    memcpy(p->default_plan, default_plan, len);
    p->reject_unknown = reject_unknown;
    p->default_max_pending = default_max_pending;
    *out = p;
    return FQ_OK;
}

void fq_policy_destroy(fq_policy *p)
{
    if (!p)
        return;
    pol_clear(&p->overrides);
    pol_clear(&p->tenants);
    pol_clear(&p->plans);
    free(p);
}

fq_status fq_policy_set_plan(fq_policy *p, const fq_plan *plan)
{
    if (!pol_name_valid(plan->name) || plan->weight == 0 ||
        !pol_weight_valid(plan->weight))
        return FQ_EINVAL;
    pol_plan *n = (pol_plan *)pol_find(&p->plans, plan->name);
    if (n) {
        n->plan = *plan;    /* in place: the name, and pointers to it, stay */
        return FQ_OK;
    }
    if (pol_reserve(&p->plans) != FQ_OK || !(n = calloc(1, sizeof(*n))))
        return FQ_ENOMEM;
    n->plan = *plan;
    n->n.key = n->plan.name;
    pol_link(&p->plans, &n->n);
    return FQ_OK;
}

/* Add or replace a tenant entry in one layer, after checking it. */
static fq_status pol_set_entry(fq_policy *p, pol_table *t, const fq_tenant_entry *e)
{
    if (!pol_name_valid(e->id) || !pol_weight_valid(e->weight))
        return FQ_EINVAL;
    if (e->plan[0]) {
        if (!pol_name_valid(e->plan))
            return FQ_EINVAL;
        if (!pol_find(&p->plans, e->plan))
            return FQ_ENOTFOUND;
    }
    pol_tenant *n = (pol_tenant *)pol_find(t, e->id);
    if (n) {
        n->e = *e;
        return FQ_OK;
    }
    if (pol_reserve(t) != FQ_OK || !(n = calloc(1, sizeof(*n))))
        return FQ_ENOMEM;
    n->e = *e;
    n->n.key = n->e.id;
    pol_link(t, &n->n);
    return FQ_OK;
}

fq_status fq_policy_set_tenant(fq_policy *p, const fq_tenant_entry *t)
{
    return pol_set_entry(p, &p->tenants, t);
}

fq_status fq_policy_set_override(fq_policy *p, const fq_tenant_entry *t)
{
    return pol_set_entry(p, &p->overrides, t);
}

fq_status fq_policy_clear_override(fq_policy *p, const char *tenant)
{
    pol_node *n = pol_unlink(&p->overrides, tenant);
    if (!n)
        return FQ_ENOTFOUND;
    free(n);
    return FQ_OK;
}

/* The first of the layers' values that is set (non-zero). */
static uint32_t pol_first(uint32_t override, uint32_t config, uint32_t plan)
{
    return override ? override : config ? config : plan;
}

fq_status fq_policy_resolve(fq_policy_resolved *out, const fq_policy *p,
                            const char *tenant)
{
    size_t len = strnlen(tenant, FQ_TENANT_MAX + 1);
    if (!fq_tenant_id_valid(tenant, len))
        return FQ_EINVAL;
    const pol_tenant *ovn = (const pol_tenant *)pol_find(&p->overrides, tenant);
    const pol_tenant *ten = (const pol_tenant *)pol_find(&p->tenants, tenant);
    const fq_tenant_entry *ov = ovn ? &ovn->e : NULL;
    const fq_tenant_entry *te = ten ? &ten->e : NULL;
    if (!ov && !te && p->reject_unknown)
        return FQ_EUNKNOWN;

    const char *name = ov && ov->plan[0] ? ov->plan
                     : te && te->plan[0] ? te->plan : p->default_plan;
    const pol_plan *pn = (const pol_plan *)pol_find(&p->plans, name);
    if (!pn)
        return FQ_ENOTFOUND;
    const fq_plan *plan = &pn->plan;

    out->p.weight = pol_first(ov ? ov->weight : 0, te ? te->weight : 0,
                              plan->weight);
    out->p.max_in_flight = pol_first(ov ? ov->max_in_flight : 0,
                                     te ? te->max_in_flight : 0,
                                     plan->max_in_flight);
    out->p.max_pending = pol_first(ov ? ov->max_pending : 0,
                                   te ? te->max_pending : 0,
                                   plan->max_pending ? plan->max_pending
                                                     : p->default_max_pending);
    out->plan = plan->name;
    out->source = ov ? FQ_SRC_OVERRIDE : te ? FQ_SRC_CONFIG : FQ_SRC_DEFAULT;
    return FQ_OK;
}

const fq_plan *fq_policy_plan(const fq_policy *p, const char *name)
{
    const pol_plan *n = (const pol_plan *)pol_find(&p->plans, name);
    return n ? &n->plan : NULL;
}

void fq_policy_foreach_override(const fq_policy *p,
                                void (*cb)(void *arg, const fq_tenant_entry *t),
                                void *arg)
{
    const pol_table *t = &p->overrides;
    for (size_t i = 0; t->slots && i <= t->mask; i++)
        for (const pol_node *n = t->slots[i]; n; n = n->next)
            cb(arg, &((const pol_tenant *)n)->e);
}
