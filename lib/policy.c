/* policy.c -- plans, tenants and runtime overrides, resolved in O(1) per tenant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "strmap.h"

/*
 * Principles
 *
 * - Three layers, each a small string hash table (strmap): plans by name,
 *   config tenant entries by id, overrides by id. Unseeded: keys come from
 *   the operator's config and the admin API, not from producers, so a keyed
 *   hash buys nothing here. A tenant's policy is resolved
 *   field by field, override over config over plan, at the moment it is
 *   asked for; nothing is precomputed, so replacing a plan or an override
 *   needs no sweep over tenants, and a resolve is three lookups.
 * - Nodes are allocated one by one and never move, so the plan name a
 *   resolve hands out stays valid while the table grows. Plans are never
 *   removed, so that pointer lives as long as the policy.
 * - Every setter validates first and changes the tables only once nothing
 *   can fail any more: on error, nothing is changed.
 */

typedef struct pol_plan {
    fq_strmap_node n;           /* key: plan.name */
    fq_plan plan;
} pol_plan;

typedef struct pol_tenant {
    fq_strmap_node n;           /* key: e.id */
    fq_tenant_entry e;
} pol_tenant;

struct fq_policy {
    fq_strmap *plans;           /* pol_plan by name */
    fq_strmap *tenants;         /* pol_tenant by id: the config layer */
    fq_strmap *overrides;       /* pol_tenant by id: the runtime layer */
    char default_plan[FQ_TENANT_MAX + 1];
    bool reject_unknown;        /* tenants listed nowhere are refused */
    uint32_t default_max_pending;   /* where no layer sets max_pending */
    uint32_t nclasses;          /* priority classes configured; 0: none */
};

#define POL_MIN_SLOTS 16

static fq_strmap_node *pol_find(const fq_strmap *t, const char *key)
{
    return fq_strmap_find(t, key, strlen(key));
}

/* Nodes are the first member of their allocation. */
static void pol_free(fq_strmap_node *n)
{
    free(n);
}

/* A plan name, or with tenant set a tenant id, held in a
 * char[FQ_TENANT_MAX + 1]: NUL-terminated within the array, and valid. */
static bool pol_name_valid(const char *s, bool tenant)
{
    size_t len = strnlen(s, FQ_TENANT_MAX + 1);
    return len <= FQ_TENANT_MAX &&
           (tenant ? fq_tenant_id_valid(s, len) : fq_name_valid(s, len));
}

/* 0 ("not set") or 1 .. FQ_POLICY_MAX_WEIGHT. */
static bool pol_weight_valid(uint32_t w)
{
    return w <= FQ_POLICY_MAX_WEIGHT;
}

/* Each price 0 ("not set") or 1 .. FQ_POLICY_MAX_PRICE. */
static bool pol_prices_valid(const fq_prices *p)
{
    return p->input <= FQ_POLICY_MAX_PRICE && p->output <= FQ_POLICY_MAX_PRICE &&
           p->cached <= FQ_POLICY_MAX_PRICE;
}

uint64_t fq_price_cost(const fq_prices *p, uint64_t input, uint64_t output, uint64_t cached)
{
    uint64_t pi = p->input ? p->input : 1, po = p->output ? p->output : 1;
    uint64_t pc = p->cached ? p->cached : 1;
    if (cached > input)
        cached = input;
    /* Kinds are bounded by the completion's parse (2^32 x 100 at most) and
     * prices by FQ_POLICY_MAX_PRICE, so the sum fits in 64 bits. */
    uint64_t sum = (input - cached) * pi + cached * pc + output * po;
    if (pi == 1)        /* in input tokens already: no divide per completion */
        return sum;
    return sum / pi + (sum % pi != 0);
}

fq_status fq_policy_create(fq_policy **out, const char *default_plan,
                           bool reject_unknown, uint32_t default_max_pending)
{
    *out = NULL;
    size_t len = default_plan ? strnlen(default_plan, FQ_TENANT_MAX + 1) : 0;
    if (!default_plan || !fq_name_valid(default_plan, len))
        return FQ_EINVAL;
    fq_policy *p = calloc(1, sizeof(*p));
    if (!p)
        return FQ_ENOMEM;
    if (fq_strmap_create(&p->plans, FQ_STRMAP_KEY_OFFSET(pol_plan, n, plan.name),
                         POL_MIN_SLOTS, 0) != FQ_OK ||
        fq_strmap_create(&p->tenants, FQ_STRMAP_KEY_OFFSET(pol_tenant, n, e.id),
                         POL_MIN_SLOTS, 0) != FQ_OK ||
        fq_strmap_create(&p->overrides, FQ_STRMAP_KEY_OFFSET(pol_tenant, n, e.id),
                         POL_MIN_SLOTS, 0) != FQ_OK) {
        fq_policy_destroy(p);
        return FQ_ENOMEM;
    }
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
    fq_strmap_destroy(p->overrides, pol_free);
    fq_strmap_destroy(p->tenants, pol_free);
    fq_strmap_destroy(p->plans, pol_free);
    free(p);
}

fq_status fq_policy_set_plan(fq_policy *p, const fq_plan *plan)
{
    if (!pol_name_valid(plan->name, false) || plan->weight == 0 ||
        !pol_weight_valid(plan->weight) || !pol_prices_valid(&plan->prices) ||
        plan->max_subtenants > FQ_POLICY_MAX_SUBTENANTS ||
        !fq_policy_class_weights_fit(p, &plan->class_weights) ||
        !fq_policy_class_pending_fit(p, &plan->class_max_pending))
        return FQ_EINVAL;
    pol_plan *n = (pol_plan *)pol_find(p->plans, plan->name);
    if (n) {
        n->plan = *plan;    /* in place: the name, and pointers to it, stay */
        return FQ_OK;
    }
    if (fq_strmap_reserve(p->plans) != FQ_OK || !(n = calloc(1, sizeof(*n))))
        return FQ_ENOMEM;
    n->plan = *plan;
    fq_strmap_insert(p->plans, &n->n, strlen(n->plan.name));
    return FQ_OK;
}

/* Add or replace a tenant entry in one layer, after checking it. */
static fq_status pol_set_entry(fq_policy *p, fq_strmap *t, const fq_tenant_entry *e)
{
    if (!pol_name_valid(e->id, true) || !pol_weight_valid(e->weight) ||
        !pol_prices_valid(&e->prices) || e->max_subtenants > FQ_POLICY_MAX_SUBTENANTS ||
        !fq_policy_class_weights_fit(p, &e->class_weights) ||
        !fq_policy_class_pending_fit(p, &e->class_max_pending))
        return FQ_EINVAL;
    if (e->plan[0]) {
        if (!pol_name_valid(e->plan, false))
            return FQ_EINVAL;
        if (!pol_find(p->plans, e->plan))
            return FQ_ENOTFOUND;
    }
    pol_tenant *n = (pol_tenant *)pol_find(t, e->id);
    if (n) {
        n->e = *e;
        return FQ_OK;
    }
    if (fq_strmap_reserve(t) != FQ_OK || !(n = calloc(1, sizeof(*n))))
        return FQ_ENOMEM;
    n->e = *e;
    fq_strmap_insert(t, &n->n, strlen(n->e.id));
    return FQ_OK;
}

fq_status fq_policy_set_tenant(fq_policy *p, const fq_tenant_entry *t)
{
    return pol_set_entry(p, p->tenants, t);
}

fq_status fq_policy_set_override(fq_policy *p, const fq_tenant_entry *t)
{
    return pol_set_entry(p, p->overrides, t);
}

fq_status fq_policy_clear_override(fq_policy *p, const char *tenant)
{
    fq_strmap_node *n = pol_find(p->overrides, tenant);
    if (!n)
        return FQ_ENOTFOUND;
    fq_strmap_remove(p->overrides, n);
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
    const pol_tenant *ovn = (const pol_tenant *)pol_find(p->overrides, tenant);
    const pol_tenant *ten = (const pol_tenant *)pol_find(p->tenants, tenant);
    const fq_tenant_entry *ov = ovn ? &ovn->e : NULL;
    const fq_tenant_entry *te = ten ? &ten->e : NULL;
    if (!ov && !te && p->reject_unknown)
        return FQ_EUNKNOWN;

    const char *name = ov && ov->plan[0] ? ov->plan
                     : te && te->plan[0] ? te->plan : p->default_plan;
    const pol_plan *pn = (const pol_plan *)pol_find(p->plans, name);
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
    out->p.burst_in_flight = pol_first(ov ? ov->burst_in_flight : 0,
                                       te ? te->burst_in_flight : 0, plan->burst_in_flight);
    out->p.tokens_per_minute = pol_first(ov ? ov->tokens_per_minute : 0,
                                         te ? te->tokens_per_minute : 0,
                                         plan->tokens_per_minute);
    out->p.max_subtenants = pol_first(ov ? ov->max_subtenants : 0,
                                      te ? te->max_subtenants : 0, plan->max_subtenants);
    const fq_class_weights *cw = ov && ov->class_weights.set ? &ov->class_weights
                               : te && te->class_weights.set ? &te->class_weights
                                                             : &plan->class_weights;
    memcpy(out->p.class_weight, cw->w, sizeof out->p.class_weight);
    out->class_max_pending = ov && ov->class_max_pending.set ? ov->class_max_pending
                           : te && te->class_max_pending.set ? te->class_max_pending
                                                             : plan->class_max_pending;
    out->prices.input = pol_first(ov ? ov->prices.input : 0, te ? te->prices.input : 0,
                                  plan->prices.input ? plan->prices.input : 1);
    out->prices.output = pol_first(ov ? ov->prices.output : 0, te ? te->prices.output : 0,
                                   plan->prices.output ? plan->prices.output : 1);
    out->prices.cached = pol_first(ov ? ov->prices.cached : 0, te ? te->prices.cached : 0,
                                   plan->prices.cached ? plan->prices.cached : 1);
    out->plan = plan->name;
    out->source = ov ? FQ_SRC_OVERRIDE : te ? FQ_SRC_CONFIG : FQ_SRC_DEFAULT;
    return FQ_OK;
}

const fq_plan *fq_policy_plan(const fq_policy *p, const char *name)
{
    const pol_plan *n = (const pol_plan *)pol_find(p->plans, name);
    return n ? &n->plan : NULL;
}

void fq_policy_foreach_override(const fq_policy *p,
                                void (*cb)(void *arg, const fq_tenant_entry *t),
                                void *arg)
{
    for (const fq_strmap_node *n = fq_strmap_first(p->overrides); n;
         n = fq_strmap_next(p->overrides, n))
        cb(arg, &((const pol_tenant *)n)->e);
}

const char *fq_policy_source_name(enum fq_policy_source s)
{
    static const char *const names[] = {
        [FQ_SRC_DEFAULT] = "default", [FQ_SRC_CONFIG] = "config", [FQ_SRC_OVERRIDE] = "override",
    };
    return (unsigned)s <= FQ_SRC_OVERRIDE ? names[s] : "unknown";
}

/* ---- priority classes ---- */

/* The decimal number at *p, blanks before and after it skipped, into *out:
 * false if there is none or it is above max. *p moves past it. */
static bool pol_number(uint32_t *out, const char **p, uint32_t max)
{
    const char *s = *p + strspn(*p, " ");
    uint64_t v = 0;
    size_t d = 0;
    for (; s[d] >= '0' && s[d] <= '9' && v <= max; d++)
        v = v * 10 + (uint64_t)(s[d] - '0');
    if (d == 0 || v > max)
        return false;
    *out = (uint32_t)v;
    *p = s + d + strspn(s + d, " ");
    return true;
}

/* A number per class, "a, b, ...": 2 to FQ_SCHED_MAX_CLASSES of them, each
 * in [min, max], into vals[0..*n). The one list syntax of class_weights and
 * class_max_pending. */
static fq_status pol_class_numbers(uint32_t *vals, uint32_t *n, const char *p, uint32_t min,
                                   uint32_t max)
{
    uint32_t k = 0;
    for (;;) {
        uint32_t v;
        if (k == FQ_SCHED_MAX_CLASSES || !pol_number(&v, &p, max) || v < min)
            return FQ_EINVAL;
        vals[k++] = v;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            return FQ_EINVAL;
    }
    if (k < 2)
        return FQ_EINVAL;
    *n = k;
    return FQ_OK;
}

fq_status fq_class_weights_parse(fq_class_weights *out, const char *text)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return FQ_OK;
    fq_class_weights cw = {.set = true};
    const char *p = text + strspn(text, " ");
    if (strncmp(p, "strict", 6) == 0 && p[6 + strspn(p + 6, " ")] == '\0') {
        *out = cw;
        return FQ_OK;
    }
    uint32_t w[FQ_SCHED_MAX_CLASSES], n;
    if (pol_class_numbers(w, &n, p, 1, FQ_SCHED_MAX_CLASS_WEIGHT) != FQ_OK)
        return FQ_EINVAL;
    for (uint32_t c = 0; c < n; c++)
        cw.w[c] = (uint16_t)w[c];
    *out = cw;
    return FQ_OK;
}

uint32_t fq_class_weights_count(const fq_class_weights *cw)
{
    uint32_t n = 0;
    while (n < FQ_SCHED_MAX_CLASSES && cw->w[n])
        n++;
    return n;
}

void fq_class_weights_format(char *buf, size_t cap, const fq_class_weights *cw)
{
    size_t len = 0;
    buf[0] = '\0';
    if (!cw->set)
        return;
    if (!cw->w[0]) {
        snprintf(buf, cap, "strict");
        return;
    }
    for (uint32_t c = 0; c < fq_class_weights_count(cw) && len < cap; c++) {
        int k = snprintf(buf + len, cap - len, "%s%u", c ? "," : "", (unsigned)cw->w[c]);
        if (k < 0)
            break;
        len += (size_t)k;
    }
}

fq_status fq_class_pending_parse(fq_class_pending *out, const char *text)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return FQ_OK;
    fq_class_pending cp = {.set = true};
    if (pol_class_numbers(cp.n, &cp.count, text, 0, UINT32_MAX) != FQ_OK)
        return FQ_EINVAL;
    *out = cp;
    return FQ_OK;
}

void fq_class_pending_format(char *buf, size_t cap, const fq_class_pending *cp)
{
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t c = 0; cp->set && c < cp->count && len < cap; c++) {
        int k = snprintf(buf + len, cap - len, "%s%u", c ? "," : "", (unsigned)cp->n[c]);
        if (k < 0)
            break;
        len += (size_t)k;
    }
}

bool fq_policy_class_pending_fit(const fq_policy *p, const fq_class_pending *cp)
{
    return !cp->set || cp->count == p->nclasses;
}

void fq_policy_set_nclasses(fq_policy *p, uint32_t n)
{
    p->nclasses = n;
}

bool fq_policy_class_weights_fit(const fq_policy *p, const fq_class_weights *cw)
{
    uint32_t n = fq_class_weights_count(cw);
    return n == 0 || n == p->nclasses;
}

fq_status fq_classes_parse(fq_classes *out, const char *text)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return FQ_OK;
    fq_classes c = {0};
    const char *p = text;
    for (;;) {
        while (*p == ' ')
            p++;
        size_t n = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-");
        if (n == 0 || n > FQ_CLASS_MAX || c.n == FQ_SCHED_MAX_CLASSES ||
            fq_classes_find(&c, p, n) >= 0)
            return FQ_EINVAL;
        memcpy(c.name[c.n], p, n);
        p += n;
        while (*p == ' ')
            p++;
        if (*p == ':') {
            p++;
            if (!pol_number(&c.max_pending[c.n], &p, UINT32_MAX) || c.max_pending[c.n] < 1)
                return FQ_EINVAL;
        }
        c.n++;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            return FQ_EINVAL;
    }
    if (c.n < 2)
        return FQ_EINVAL;
    *out = c;
    return FQ_OK;
}

int fq_classes_find(const fq_classes *c, const char *name, size_t len)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (strlen(c->name[i]) == len && memcmp(c->name[i], name, len) == 0)
            return (int)i;
    return -1;
}
