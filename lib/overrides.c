/* overrides.c -- tenants' runtime overrides as the overrides bucket holds them: which is in force, what a change writes, what may be forgotten. */
#include "overrides.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"

_Static_assert(FQ_PRICE_MAX == FQ_POLICY_MAX_PRICE, "one bound for prices");

/*
 * Principles
 *
 * - No I/O and no clock: entries come in, decisions and the policy's
 *   override layer go out; the proxy writes the bucket and logs.
 * - Within a watch revisions only grow: an entry whose revision is not
 *   past the record's of the same watch is the echo of a write already in
 *   force, and changes nothing.
 * - A record is kept only while something depends on its revision: a
 *   value in force, or a deletion the watch has not delivered yet.
 */

/* A tenant's override as the bucket holds it. */
typedef struct ovr_rec {
    fq_tenant_entry e;          /* the fields in force; all unset: none */
    uint64_t rev;               /* bucket revision last seen; 0: the key has none */
    uint64_t epoch;             /* the watch epoch that last delivered it */
    fq_strmap_node node;        /* in the table, keyed by e.id */
} ovr_rec;

struct fq_ovr_set {
    fq_strmap *recs;            /* ovr_rec by tenant id */
    uint64_t epoch;             /* the newest watch epoch seen */
    bool synced;                /* the bucket has been read whole once */
};

static ovr_rec *ovr_of(fq_strmap_node *n)
{
    return n ? FQ_STRMAP_ENTRY(n, ovr_rec, node) : NULL;
}

static void ovr_release(fq_strmap_node *n)
{
    free(ovr_of(n));
}

static ovr_rec *ovr_find(const fq_ovr_set *s, const char *id)
{
    return ovr_of(fq_strmap_find(s->recs, id, strlen(id)));
}

/* The record of tenant id (a valid id), created empty when new; NULL when
 * out of memory. */
static ovr_rec *ovr_get(fq_ovr_set *s, const char *id)
{
    ovr_rec *o = ovr_find(s, id);
    if (o)
        return o;
    if (fq_strmap_reserve(s->recs) != FQ_OK || !(o = calloc(1, sizeof *o)))
        return NULL;
    snprintf(o->e.id, sizeof o->e.id, "%s", id);
    fq_strmap_insert(s->recs, &o->node, strlen(o->e.id));
    return o;
}

static void ovr_forget(fq_ovr_set *s, ovr_rec *o)
{
    fq_strmap_remove(s->recs, &o->node);
    free(o);
}

fq_status fq_ovr_create(fq_ovr_set **out, uint64_t seed)
{
    *out = NULL;
    fq_ovr_set *s = calloc(1, sizeof *s);
    if (!s)
        return FQ_ENOMEM;
    fq_status st = fq_strmap_create(&s->recs, FQ_STRMAP_KEY_OFFSET(ovr_rec, node, e.id), 64, seed);
    if (st != FQ_OK) {
        free(s);
        return st;
    }
    *out = s;
    return FQ_OK;
}

void fq_ovr_destroy(fq_ovr_set *s)
{
    if (!s)
        return;
    fq_strmap_destroy(s->recs, ovr_release);
    free(s);
}

bool fq_ovr_entry_empty(const fq_tenant_entry *e)
{
    return !e->plan[0] && !e->weight && !e->max_in_flight && !e->max_pending &&
           !e->burst_in_flight && !e->tokens_per_minute && !e->prices.input &&
           !e->prices.output && !e->prices.cached && !e->max_subtenants &&
           !e->class_weights.set && !e->class_max_pending.set;
}

static bool ovr_entry_equal(const fq_tenant_entry *a, const fq_tenant_entry *b)
{
    return strcmp(a->plan, b->plan) == 0 && a->weight == b->weight &&
           a->max_in_flight == b->max_in_flight && a->max_pending == b->max_pending &&
           a->burst_in_flight == b->burst_in_flight &&
           a->tokens_per_minute == b->tokens_per_minute &&
           a->max_subtenants == b->max_subtenants &&
           memcmp(&a->prices, &b->prices, sizeof a->prices) == 0 &&
           a->class_weights.set == b->class_weights.set &&
           memcmp(a->class_weights.w, b->class_weights.w, sizeof a->class_weights.w) == 0 &&
           memcmp(&a->class_max_pending, &b->class_max_pending,
                  sizeof a->class_max_pending) == 0;
}

static void ovr_patch_field(uint32_t *dst, uint32_t v, const fq_override_patch *pt, unsigned bit)
{
    if (pt->set & bit)
        *dst = v;
    else if (pt->removed & bit)
        *dst = 0;
}

/* e with the merge patch pt applied. */
static void ovr_patch_apply(fq_tenant_entry *e, const fq_override_patch *pt)
{
    if (pt->set & FQ_OVR_PLAN)
        snprintf(e->plan, sizeof e->plan, "%s", pt->plan);
    else if (pt->removed & FQ_OVR_PLAN)
        e->plan[0] = '\0';
    ovr_patch_field(&e->weight, pt->weight, pt, FQ_OVR_WEIGHT);
    ovr_patch_field(&e->max_in_flight, pt->max_in_flight, pt, FQ_OVR_MAX_IN_FLIGHT);
    ovr_patch_field(&e->max_pending, pt->max_pending, pt, FQ_OVR_MAX_PENDING);
    ovr_patch_field(&e->burst_in_flight, pt->burst_in_flight, pt, FQ_OVR_BURST_IN_FLIGHT);
    ovr_patch_field(&e->tokens_per_minute, pt->tokens_per_minute, pt,
                    FQ_OVR_TOKENS_PER_MINUTE);
    ovr_patch_field(&e->prices.input, pt->price_input, pt, FQ_OVR_PRICE_INPUT);
    ovr_patch_field(&e->prices.output, pt->price_output, pt, FQ_OVR_PRICE_OUTPUT);
    ovr_patch_field(&e->prices.cached, pt->price_cached, pt, FQ_OVR_PRICE_CACHED);
    ovr_patch_field(&e->max_subtenants, pt->max_subtenants, pt, FQ_OVR_MAX_SUBTENANTS);
    if (pt->set & FQ_OVR_CLASS_WEIGHTS)
        e->class_weights = pt->class_weights;
    else if (pt->removed & FQ_OVR_CLASS_WEIGHTS)
        memset(&e->class_weights, 0, sizeof e->class_weights);
    if (pt->set & FQ_OVR_CLASS_MAX_PENDING)
        e->class_max_pending = pt->class_max_pending;
    else if (pt->removed & FQ_OVR_CLASS_MAX_PENDING)
        memset(&e->class_max_pending, 0, sizeof e->class_max_pending);
}

void fq_ovr_entry_json(fq_json *w, const fq_tenant_entry *e)
{
    fq_json_begin_object(w);
    if (e->plan[0]) {
        fq_json_key(w, "plan");
        fq_json_string(w, e->plan);
    }
    const char *keys[] = {"weight", "max_in_flight", "max_pending", "burst_in_flight",
                          "tokens_per_minute", "price_input", "price_output", "price_cached",
                          "max_subtenants"};
    uint32_t vals[] = {e->weight, e->max_in_flight, e->max_pending, e->burst_in_flight,
                       e->tokens_per_minute, e->prices.input, e->prices.output,
                       e->prices.cached, e->max_subtenants};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        if (vals[i]) {
            fq_json_key(w, keys[i]);
            fq_json_int(w, vals[i]);
        }
    }
    if (e->class_weights.set) {
        char cw[48];
        fq_class_weights_format(cw, sizeof cw, &e->class_weights);
        fq_json_key(w, "class_weights");
        fq_json_string(w, cw);
    }
    if (e->class_max_pending.set) {
        char cp[48];
        fq_class_pending_format(cp, sizeof cp, &e->class_max_pending);
        fq_json_key(w, "class_max_pending");
        fq_json_string(w, cp);
    }
    fq_json_end_object(w);
}

/* Whether e's class weights and class max_pending fit pol's classes; if
 * not, err says why. */
static bool ovr_fits(const fq_policy *pol, const fq_tenant_entry *e, char *err, size_t errlen)
{
    if (!fq_policy_class_weights_fit(pol, &e->class_weights)) {
        snprintf(err, errlen, "class_weights: give one weight per class configured in "
                 "scheduler.classes, or \"strict\"");
        return false;
    }
    if (!fq_policy_class_pending_fit(pol, &e->class_max_pending)) {
        snprintf(err, errlen, "class_max_pending: give one max_pending per class configured "
                 "in scheduler.classes");
        return false;
    }
    return true;
}

/* Put ne in force as o's override in pol (none when it sets nothing). On
 * error nothing changes and err says why. */
static fq_status ovr_apply(fq_policy *pol, ovr_rec *o, const fq_tenant_entry *ne, char *err,
                           size_t errlen)
{
    fq_status s = FQ_OK;
    if (!ovr_fits(pol, ne, err, errlen))
        return FQ_EINVAL;
    if (fq_ovr_entry_empty(ne))
        fq_policy_clear_override(pol, o->e.id);   /* FQ_ENOTFOUND: it had none */
    else if ((s = fq_policy_set_override(pol, ne)) == FQ_ENOTFOUND)
        snprintf(err, errlen, "plan %s is not defined in the config", ne->plan);
    else if (s != FQ_OK)
        snprintf(err, errlen, "%s", fq_status_text(s));
    if (s == FQ_OK)
        o->e = *ne;
    return s;
}

enum fq_ovr_outcome fq_ovr_on_kv(fq_ovr_set *s, fq_policy *pol, const fq_ovr_kv *kv, char *err,
                                 size_t errlen)
{
    err[0] = '\0';
    if (kv->epoch > s->epoch)
        s->epoch = kv->epoch;
    if (!fq_tenant_id_valid(kv->key, strlen(kv->key))) {
        snprintf(err, errlen, "the key is not a tenant id (" FQ_TENANT_RULE ")");
        return FQ_OVR_REFUSED;
    }
    ovr_rec *o = ovr_find(s, kv->key);
    if (o && kv->epoch == o->epoch && kv->rev <= o->rev) {
        /* The echo of a write in force; once it echoes a deletion, nothing
         * needs the record any more. */
        if (kv->rev == o->rev && kv->deleted && fq_ovr_entry_empty(&o->e))
            ovr_forget(s, o);
        return FQ_OVR_SAME;
    }
    if (!o && kv->deleted)
        return FQ_OVR_SAME;     /* no record, nothing in force: nothing to keep */
    if (!o && !(o = ovr_get(s, kv->key))) {
        snprintf(err, errlen, "out of memory");
        return FQ_OVR_REFUSED;
    }
    o->rev = kv->rev;
    o->epoch = kv->epoch;
    fq_tenant_entry ne = {0};
    memcpy(ne.id, o->e.id, sizeof ne.id);
    fq_override_patch pt;
    if (!kv->deleted &&
        fq_override_patch_parse(&pt, kv->value, kv->len, FQ_PATCH_VALUE, FQ_POLICY_MAX_WEIGHT, err,
                                errlen) == FQ_OK) {
        if (pt.tenant[0] && strcmp(pt.tenant, o->e.id) != 0)
            snprintf(err, errlen, "its tenant field names another tenant than its key");
        else
            ovr_patch_apply(&ne, &pt);
    }
    enum fq_ovr_outcome r = FQ_OVR_SAME;
    if (!err[0] && !ovr_entry_equal(&ne, &o->e))
        r = ovr_apply(pol, o, &ne, err, errlen) == FQ_OK ? FQ_OVR_CHANGED : FQ_OVR_REFUSED;
    if (err[0])
        r = FQ_OVR_REFUSED;
    if (kv->deleted && fq_ovr_entry_empty(&o->e))
        ovr_forget(s, o);
    return r;
}

void fq_ovr_on_synced(fq_ovr_set *s, fq_policy *pol, uint64_t epoch,
                      void (*fn)(void *arg, const fq_tenant_entry *e, uint64_t rev), void *arg)
{
    fq_strmap_node *n = fq_strmap_first(s->recs);
    while (n) {
        fq_strmap_node *next = fq_strmap_next(s->recs, n);
        ovr_rec *o = ovr_of(n);
        if (o->epoch < epoch) {
            fq_tenant_entry none = {0};
            memcpy(none.id, o->e.id, sizeof none.id);
            char err[128];
            bool was = !fq_ovr_entry_empty(&o->e);
            if (ovr_apply(pol, o, &none, err, sizeof err) == FQ_OK && was && fn)
                fn(arg, &o->e, 0);
            ovr_forget(s, o);
        }
        n = next;
    }
    if (epoch > s->epoch)
        s->epoch = epoch;
    s->synced = true;
}

bool fq_ovr_synced(const fq_ovr_set *s)
{
    return s->synced;
}

const fq_tenant_entry *fq_ovr_find(const fq_ovr_set *s, const char *tenant, uint64_t *rev)
{
    const ovr_rec *o = ovr_find(s, tenant);
    if (!o || fq_ovr_entry_empty(&o->e))
        return NULL;
    if (rev)
        *rev = o->rev;
    return &o->e;
}

size_t fq_ovr_in_force(const fq_ovr_set *s)
{
    size_t n = 0;
    for (fq_strmap_node *x = fq_strmap_first(s->recs); x; x = fq_strmap_next(s->recs, x))
        n += !fq_ovr_entry_empty(&ovr_of(x)->e);
    return n;
}

size_t fq_ovr_records(const fq_ovr_set *s)
{
    return fq_strmap_count(s->recs);
}

fq_status fq_ovr_carry(const fq_ovr_set *s, fq_policy *np, const char *bucket, char *err,
                       size_t errlen)
{
    for (fq_strmap_node *x = fq_strmap_first(s->recs); x; x = fq_strmap_next(s->recs, x)) {
        const ovr_rec *o = ovr_of(x);
        if (fq_ovr_entry_empty(&o->e))
            continue;
        fq_status st = fq_policy_set_override(np, &o->e);
        if (st == FQ_ENOTFOUND)
            snprintf(err, errlen, "the override of tenant %s (bucket %s) names plan %s, "
                     "which the new config does not define: change or remove the override "
                     "first", o->e.id, bucket, o->e.plan);
        else if (st != FQ_OK)
            snprintf(err, errlen, "the override of tenant %s: %s", o->e.id, fq_status_text(st));
        if (st != FQ_OK)
            return st;
    }
    return FQ_OK;
}

fq_status fq_ovr_plan(fq_ovr_write *w, const fq_ovr_set *s, const fq_policy *pol,
                      const fq_override_patch *pt, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if ((pt->set & FQ_OVR_PLAN) && !fq_policy_plan(pol, pt->plan)) {
        snprintf(err, errlen, "plan: %s is not defined in the config", pt->plan);
        return FQ_EINVAL;
    }
    const ovr_rec *o = ovr_find(s, pt->tenant);
    if (o) {
        w->e = o->e;
        w->expect = o->rev;
    } else {
        snprintf(w->e.id, sizeof w->e.id, "%s", pt->tenant);
    }
    fq_tenant_entry was = w->e;
    ovr_patch_apply(&w->e, pt);
    w->changes = !ovr_entry_equal(&w->e, &was);
    w->del = fq_ovr_entry_empty(&w->e);
    if (!w->changes || w->del)
        return FQ_OK;
    /* Refused here, not once stored: fq_ovr_stored would refuse it, with
     * the bucket left holding it (and the next change expecting no value
     * would find it there). */
    if (!ovr_fits(pol, &w->e, err, errlen))
        return FQ_EINVAL;
    fq_json j;
    fq_json_init(&j, w->value, sizeof w->value);
    fq_ovr_entry_json(&j, &w->e);
    if (fq_json_finish(&j, &w->len) != FQ_OK) {
        snprintf(err, errlen, "the override does not fit in %d bytes", FQ_OVR_VALUE_MAX);
        return FQ_EINVAL;
    }
    return FQ_OK;
}

fq_status fq_ovr_stored(fq_ovr_set *s, fq_policy *pol, const fq_ovr_write *w, uint64_t rev,
                        char *err, size_t errlen)
{
    bool known = ovr_find(s, w->e.id) != NULL;
    ovr_rec *o = ovr_get(s, w->e.id);
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return FQ_ENOMEM;
    }
    fq_status st = ovr_apply(pol, o, &w->e, err, errlen);
    if (st != FQ_OK) {
        if (!known)
            ovr_forget(s, o);
        return st;
    }
    o->rev = rev;
    o->epoch = s->epoch;
    return FQ_OK;
}
