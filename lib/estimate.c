/* estimate.c -- cost estimates learned from each workflow's history of actual tokens. */
#include "estimate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strmap.h"

/*
 * Principles.
 *
 * - What is learned lives in entries of three kinds in one hash table,
 *   bounded together by max_entries: a tenant's record (its estimate
 *   error), a (tenant, workflow) history, and a workflow's summary over the
 *   tenants that ran it. Only a completion creates an entry; a charge only
 *   looks up, so charging never allocates. Configured per-workflow defaults
 *   are kept apart: they are configuration, never evicted.
 *
 * - Memory is charged to tenants. A tenant's record, its histories and the
 *   summaries of workflows only it has reported are its entries, in an LRU
 *   list of its own, at most max_tenant_entries of them; a tenant that has
 *   completed nothing has no entry and costs nothing. A summary reported by
 *   two tenants or more is shared: it leaves its first reporter's list for
 *   a shared LRU of at most max_entries / 8, which one tenant alone cannot
 *   enter, so one tenant's new workflow names cannot churn it.
 *
 * - The bound is split max-min fairly. When a tenant needs an entry and
 *   none is free, the entry is taken from the tenant holding the most (the
 *   least recently used of those), and from the tenant itself if it holds
 *   as many as any: an entry goes to another tenant only while its holder
 *   holds more than that tenant (or both hold only their record). So one
 *   tenant's stream of unique workflow names recycles its own histories
 *   once it holds as many as the largest holder: a tenant holding less
 *   than the average of those holding entries loses nothing to it. A
 *   tenant whose last history is taken loses its record with it (an error
 *   record alone is little worth keeping), so under a pressure of more
 *   tenants than entries whole tenants go, least recently used first.
 *   Finding the largest holder is O(1): tenants are listed by entries
 *   held, and that changes by one at a time.
 *
 * - A history is a log-scale histogram of actual tokens: four buckets per
 *   power of two (exact below 4), as many as max_tokens needs (76 for a
 *   million), plus the count and the sum for the mean. A percentile is the
 *   nearest rank, placed by linear interpolation inside its bucket: it lies
 *   in the same bucket as the true value, so it is off by less than a
 *   quarter of it. The statistic is computed when a sample arrives, so a
 *   charge reads it in O(1).
 *
 * - A workflow's shared statistic, charged to a tenant without a trusted
 *   history of its own, is the median of its contributors' own statistics
 *   (the mean or percentile of each one's history): each tenant counts
 *   once, however many runs it reports, among the 16 that reported most
 *   recently, and the statistic is used only once 3 tenants have
 *   contributed, with min_samples samples among them. So one tenant,
 *   whatever it reports, moves it at most one rank among the others'
 *   values: it stays between the two of them next to their median (for an
 *   even number of others, their middle pair; for an odd number, the
 *   midpoints beside their median), never outside their range. A tenant
 *   is known among the contributors by a keyed hash of its id.
 *
 * - The producer's declaration is corrected by sum(actual)/sum(declared)
 *   over the tenant's recent runs of that workflow: weighted by tokens, so
 *   over the window the corrected charges add up to the actual tokens. It
 *   learns actual/declared, not actual/charged, so the correction does not
 *   feed back on itself. One run's actual counts as at most 64x and at least
 *   1/64x its declaration, so a single absurd completion cannot swing the
 *   ratio far. The ratio is the tenant's own: no other tenant moves it.
 *
 * - Everything decays: a histogram halves its counters when it reaches
 *   max(1024, 4 x min_samples) samples, a ratio its sums at max(64,
 *   2 x min_samples). Estimates thus follow a tenant whose runs change, no
 *   counter overflows, and a trusted history stays trusted after halving.
 *
 * - actual == 0 is a run cancelled before it spent anything. It is no
 *   sample: it says nothing about what the workflow costs, and counting it
 *   would let cancelled runs drag estimates down for the runs that do run.
 *   Nor is it an estimate error: the estimate was not wrong about a run that
 *   did not run. (Reconciliation in drr still refunds its charge.)
 *
 * - Absurd values are clamped: actuals and declarations to [1, max_tokens]
 *   before they are learned, every estimate to [1, max_tokens].
 */

#define FQ_EST_SUB_BITS 2                       /* 4 buckets per power of two */
#define FQ_EST_SUB (1u << FQ_EST_SUB_BITS)
#define FQ_EST_HIST_WINDOW 1024                 /* samples before a histogram halves */
#define FQ_EST_RATIO_WINDOW 64                  /* samples before a ratio halves */
#define FQ_EST_RATIO_BOUND 64.0                 /* one run's actual/declared, at most */
#define FQ_EST_DEFAULTS_SLOTS 16                /* first size of the defaults table */
#define FQ_EST_CONTRIBUTORS 16                  /* tenants a workflow's summary keeps */
#define FQ_EST_QUORUM 3                         /* contributors before it is charged */
#define FQ_EST_SHARED_PART 8                    /* shared summaries: max_entries / this */

enum fq_est_kind {
    FQ_EST_PAIR = 1,        /* (tenant, workflow): fq_est_pair */
    FQ_EST_WORKFLOW,        /* ("", workflow): fq_est_workflow, over its contributors */
    FQ_EST_TENANT,          /* (tenant, ""): fq_est_tenant */
    FQ_EST_DEFAULT,         /* ("", workflow): fq_est_workflow, configured stat only */
};

/* sum(num)/sum(den) over a decaying window of samples. */
typedef struct fq_est_ratio {
    double num;                 /* actual tokens */
    double den;                 /* declared or charged tokens */
    uint32_t n;                 /* samples in the window */
} fq_est_ratio;

/* An entry's key: its kind, tenant, a NUL, and workflow, in one string. */
#define FQ_EST_KEY_MAX (1 + FQ_TENANT_MAX + 1 + FQ_WORKFLOW_MAX)

/* What every entry starts with. */
typedef struct fq_est_entry {
    fq_strmap_node node;            /* in fq_est.learned or fq_est.defaults */
    struct fq_est_entry *newer;     /* its LRU list (see fq_est_touch), towards the most recent */
    struct fq_est_entry *older;     /* towards the least recent */
    struct fq_est_tenant *owner;    /* PAIR, WORKFLOW reported by one tenant: the tenant
                                     * charged with it; else NULL */
    char key[FQ_EST_KEY_MAX];       /* see fq_est_key_make */
} fq_est_entry;

/* An LRU list of entries. */
typedef struct fq_est_list {
    fq_est_entry *mru;              /* most recently used, NULL if empty */
    fq_est_entry *lru;              /* least recently used */
} fq_est_list;

/* A tenant's record: what it holds and its estimate error. */
typedef struct fq_est_tenant {
    fq_est_entry h;                 /* listed in fq_est.by_held[held] */
    fq_est_list items;              /* its PAIR entries and the WORKFLOW ones it owns */
    uint32_t held;                  /* entries charged to it: 1 (this record) + items */
    uint32_t id;                    /* its key's hash: who it is among contributors */
    fq_est_ratio ratio;             /* actual/charged, the estimate error */
} fq_est_tenant;

/* A (tenant, workflow) history. */
typedef struct fq_est_pair {
    fq_est_entry h;                 /* in its owner's items */
    fq_est_ratio ratio;             /* actual/declared */
    uint64_t sum;                   /* histogram: tokens of its samples */
    uint32_t n;                     /* histogram: samples */
    uint32_t stat;                  /* the statistic charged */
    uint32_t bucket[];              /* histogram counters, fq_est.nbuckets */
} fq_est_pair;

/* One tenant's part in a workflow's summary. */
typedef struct fq_est_contrib {
    uint32_t tenant;                /* fq_est_tenant.id */
    uint32_t stat;                  /* its history's statistic, when it last reported */
    uint32_t n;                     /* its history's samples then */
    uint32_t seen;                  /* fq_est.clock then: the oldest slot is reused */
} fq_est_contrib;

/* A workflow's summary over its contributors, or its configured default. */
typedef struct fq_est_workflow {
    fq_est_entry h;                 /* one contributor: in its owner's items; more:
                                     * in fq_est.shared */
    uint32_t stat;                  /* median of the contributors' stat; DEFAULT: configured */
    uint32_t samples;               /* sum of the contributors' n */
    uint32_t ncontrib;              /* slots of contrib in use */
    fq_est_contrib contrib[FQ_EST_CONTRIBUTORS];  /* not allocated for a DEFAULT */
} fq_est_workflow;

/* A lookup key, built on the stack, and its hash in the table it is for. */
typedef struct fq_est_key {
    char s[FQ_EST_KEY_MAX];
    size_t len;
    uint32_t hash;
} fq_est_key;

struct fq_est {
    fq_est_opts o;
    fq_strmap *learned;             /* TENANT, PAIR and WORKFLOW entries */
    fq_strmap *defaults;            /* DEFAULT entries */
    fq_est_list *by_held;           /* [0, tenant_cap]: tenants by entries held, each by use */
    uint32_t max_held;              /* the highest non-empty by_held; 0 if none */
    uint32_t tenant_cap;            /* min(max_tenant_entries, max_entries) */
    fq_est_list shared;             /* WORKFLOW entries with two contributors or more */
    uint32_t nshared;               /* entries in shared */
    uint32_t shared_cap;            /* max(1, max_entries / FQ_EST_SHARED_PART) */
    uint32_t clock;                 /* completions learned from: orders contributors */
    size_t learned_bytes;           /* of the entries in learned */
    size_t pair_size;               /* of a PAIR entry, with its counters */
    uint32_t nbuckets;              /* histogram counters per PAIR */
    uint32_t hist_window;           /* samples before a histogram halves */
    uint32_t ratio_window;          /* samples before a ratio halves */
};

void fq_est_opts_init(fq_est_opts *o)
{
    o->default_tokens = 1000;
    o->max_tokens = 1000000;
    o->min_samples = 8;
    o->percentile = 0;
    o->max_entries = 65536;
    o->max_tenant_entries = 4096;
}

/* floor(log2(v)) for v >= 1. */
static unsigned fq_est_log2(uint32_t v)
{
    unsigned e = 0;

    for (unsigned s = 16; s > 0; s >>= 1) {
        if (v >> s) {
            v >>= s;
            e += s;
        }
    }
    return e;
}

/* The histogram bucket of v, 1 <= v. */
static uint32_t fq_est_bucket(uint32_t v)
{
    if (v < FQ_EST_SUB)
        return v;
    unsigned shift = fq_est_log2(v) - FQ_EST_SUB_BITS;
    return (shift + 1) * FQ_EST_SUB + ((v >> shift) & (FQ_EST_SUB - 1));
}

/* The values bucket b holds: [*lo, *lo + *width). */
static void fq_est_bucket_range(uint32_t b, double *lo, double *width)
{
    if (b < FQ_EST_SUB) {
        *lo = b;
        *width = 1;
        return;
    }
    unsigned shift = b / FQ_EST_SUB - 1;
    *lo = (double)((uint64_t)(FQ_EST_SUB + b % FQ_EST_SUB) << shift);
    *width = (double)((uint64_t)1 << shift);
}

/* The nearest integer to v in [1, max_tokens]. */
static uint32_t fq_est_clamp(const fq_est *e, double v)
{
    if (!(v >= 1.0))
        return 1;
    if (v >= e->o.max_tokens)
        return e->o.max_tokens;
    return (uint32_t)(v + 0.5);
}

/* Fill k for the table t. Returns 0 if a string is NULL or too long, or the
 * tenant is empty where the kind needs one. The tenant cannot hold a NUL,
 * so the one after it keeps (tenant, workflow) pairs apart. */
static int fq_est_key_make(const fq_strmap *t, fq_est_key *k, enum fq_est_kind kind,
                           const char *tenant, const char *workflow)
{
    size_t tlen, wlen;

    if (!workflow)
        workflow = "";
    if (!tenant)
        return 0;
    tlen = strnlen(tenant, FQ_TENANT_MAX + 1);
    wlen = strnlen(workflow, FQ_WORKFLOW_MAX + 1);
    if (tlen > FQ_TENANT_MAX || wlen > FQ_WORKFLOW_MAX)
        return 0;
    if ((kind == FQ_EST_PAIR || kind == FQ_EST_TENANT) && tlen == 0)
        return 0;
    k->s[0] = (char)kind;
    memcpy(k->s + 1, tenant, tlen);
    k->s[1 + tlen] = '\0';
    memcpy(k->s + 2 + tlen, workflow, wlen);
    k->len = 2 + tlen + wlen;
    k->hash = fq_strmap_hash(t, k->s, k->len);
    return 1;
}

static fq_est_entry *fq_est_table_find(const fq_strmap *t, const fq_est_key *k)
{
    fq_strmap_node *n = fq_strmap_find_hashed(t, k->s, k->len, k->hash);

    return n ? FQ_STRMAP_ENTRY(n, fq_est_entry, node) : NULL;
}

static void fq_est_entry_free(fq_strmap_node *n)
{
    free(FQ_STRMAP_ENTRY(n, fq_est_entry, node));
}

static void fq_est_list_unlink(fq_est_list *l, fq_est_entry *x)
{
    if (x->newer)
        x->newer->older = x->older;
    else
        l->mru = x->older;
    if (x->older)
        x->older->newer = x->newer;
    else
        l->lru = x->newer;
}

static void fq_est_list_push(fq_est_list *l, fq_est_entry *x)
{
    x->newer = NULL;
    x->older = l->mru;
    if (l->mru)
        l->mru->newer = x;
    else
        l->lru = x;
    l->mru = x;
}

static void fq_est_list_move_up(fq_est_list *l, fq_est_entry *x)
{
    if (x != l->mru) {
        fq_est_list_unlink(l, x);
        fq_est_list_push(l, x);
    }
}

/* Set what t holds (0: it is going) and mark it most recently used. held
 * changes by one at a time, so max_held moves by at most one step. */
static void fq_est_held_set(fq_est *e, fq_est_tenant *t, uint32_t held)
{
    if (t->held > 0)
        fq_est_list_unlink(&e->by_held[t->held], &t->h);
    t->held = held;
    if (held > 0) {
        fq_est_list_push(&e->by_held[held], &t->h);
        if (held > e->max_held)
            e->max_held = held;
    }
    while (e->max_held > 0 && !e->by_held[e->max_held].mru)
        e->max_held--;
}

/* Mark x most recently used: in its owner's items and its owner among the
 * tenants, in the shared list, or a tenant among the tenants. */
static void fq_est_touch(fq_est *e, fq_est_entry *x)
{
    if (x->key[0] == FQ_EST_TENANT) {
        fq_est_list_move_up(&e->by_held[((fq_est_tenant *)x)->held], x);
    } else if (x->owner) {
        fq_est_list_move_up(&x->owner->items, x);
        fq_est_list_move_up(&e->by_held[x->owner->held], &x->owner->h);
    } else {
        fq_est_list_move_up(&e->shared, x);
    }
}

/* The learned entry for k, marked used, or NULL. */
static fq_est_entry *fq_est_use(fq_est *e, const fq_est_key *k)
{
    fq_est_entry *x = fq_est_table_find(e->learned, k);

    if (x)
        fq_est_touch(e, x);
    return x;
}

/* A new learned entry of size bytes for k, zeroed, in no list; NULL if
 * memory cannot be had. The caller has made room for it. */
static fq_est_entry *fq_est_alloc(fq_est *e, const fq_est_key *k, size_t size)
{
    fq_est_entry *x = malloc(size);

    if (!x)
        return NULL;
    memset(x, 0, size);
    memcpy(x->key, k->s, k->len);
    fq_strmap_insert_hashed(e->learned, &x->node, k->len, k->hash);
    e->learned_bytes += size;
    return x;
}

static size_t fq_est_size(const fq_est *e, const fq_est_entry *x)
{
    switch (x->key[0]) {
    case FQ_EST_PAIR:
        return e->pair_size;
    case FQ_EST_TENANT:
        return sizeof(fq_est_tenant);
    default:
        return sizeof(fq_est_workflow);
    }
}

static void fq_est_free(fq_est *e, fq_est_entry *x)
{
    fq_strmap_remove(e->learned, &x->node);
    e->learned_bytes -= fq_est_size(e, x);
    free(x);
}

/* Charge x to t, as its most recently used item. */
static void fq_est_item_add(fq_est *e, fq_est_tenant *t, fq_est_entry *x)
{
    x->owner = t;
    fq_est_list_push(&t->items, x);
    fq_est_held_set(e, t, t->held + 1);
}

/* Take x off its owner's items. */
static void fq_est_item_drop(fq_est *e, fq_est_entry *x)
{
    fq_est_tenant *t = x->owner;

    fq_est_list_unlink(&t->items, x);
    x->owner = NULL;
    fq_est_held_set(e, t, t->held - 1);
}

/* Forget a PAIR or WORKFLOW entry. */
static void fq_est_evict(fq_est *e, fq_est_entry *x)
{
    if (x->owner) {
        fq_est_item_drop(e, x);
    } else {
        fq_est_list_unlink(&e->shared, x);
        e->nshared--;
    }
    fq_est_free(e, x);
}

/* Forget a tenant that holds nothing but its record. */
static void fq_est_tenant_free(fq_est *e, fq_est_tenant *t)
{
    fq_est_held_set(e, t, 0);
    fq_est_free(e, &t->h);
}

/* Make room for one more entry charged to t (NULL: for a new tenant's
 * record), without evicting keep: see the principles. 0 if there is none
 * to be had. */
static int fq_est_room(fq_est *e, fq_est_tenant *t, const fq_est_entry *keep)
{
    fq_est_tenant *v;

    if (t && t->held >= e->tenant_cap) {
        if (!t->items.lru || t->items.lru == keep)
            return 0;
        fq_est_evict(e, t->items.lru);
        return 1;
    }
    if (fq_strmap_count(e->learned) < e->o.max_entries)
        return 1;
    if (t && t->held >= e->max_held && t->items.lru) {
        if (t->items.lru == keep)
            return 0;
        fq_est_evict(e, t->items.lru);
        return 1;
    }
    /* The least recently used of the largest holders, other than t (which
     * then holds only its record, as many as they). */
    v = (fq_est_tenant *)e->by_held[e->max_held].lru;
    if (v && v == t)
        v = (fq_est_tenant *)v->h.newer;
    if (!v)
        return 0;
    if (v->items.lru)
        fq_est_evict(e, v->items.lru);
    if (!v->items.lru)
        fq_est_tenant_free(e, v);
    return 1;
}

/* The tenant's record, marked used, created if missing; NULL if the id is
 * invalid or no room or memory can be had. */
static fq_est_tenant *fq_est_tenant_obtain(fq_est *e, const char *tenant)
{
    fq_est_key k;
    fq_est_tenant *t;

    if (!fq_est_key_make(e->learned, &k, FQ_EST_TENANT, tenant, ""))
        return NULL;
    if ((t = (fq_est_tenant *)fq_est_use(e, &k)))
        return t;
    if (!fq_est_room(e, NULL, NULL) ||
        !(t = (fq_est_tenant *)fq_est_alloc(e, &k, sizeof(*t))))
        return NULL;
    t->id = k.hash;
    fq_est_held_set(e, t, 1);
    return t;
}

/* t's history of workflow, marked used, created if missing; NULL if the
 * name is invalid or no room or memory can be had. */
static fq_est_pair *fq_est_pair_obtain(fq_est *e, fq_est_tenant *t, const char *tenant,
                                       const char *workflow)
{
    fq_est_key k;
    fq_est_pair *p;

    if (!fq_est_key_make(e->learned, &k, FQ_EST_PAIR, tenant, workflow))
        return NULL;
    if ((p = (fq_est_pair *)fq_est_use(e, &k)))
        return p;
    if (!fq_est_room(e, t, NULL) ||
        !(p = (fq_est_pair *)fq_est_alloc(e, &k, e->pair_size)))
        return NULL;
    fq_est_item_add(e, t, &p->h);
    return p;
}

/* The median of the contributors' statistics, and their samples. */
static void fq_est_workflow_stat(fq_est_workflow *w)
{
    uint32_t v[FQ_EST_CONTRIBUTORS];
    uint32_t n = w->ncontrib;

    w->samples = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = w->contrib[i].stat, j = i;

        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
        w->samples += w->contrib[i].n;
    }
    w->stat = n % 2 ? v[n / 2] : (uint32_t)(((uint64_t)v[n / 2 - 1] + v[n / 2] + 1) / 2);
}

/* t reports its history p of workflow to the workflow's summary. A new
 * summary is charged to t; a second contributor makes it shared. */
static void fq_est_contribute(fq_est *e, fq_est_tenant *t, const char *workflow,
                              const fq_est_pair *p)
{
    fq_est_key k;
    fq_est_workflow *w;
    uint32_t i;

    if (!fq_est_key_make(e->learned, &k, FQ_EST_WORKFLOW, "", workflow))
        return;
    if (!(w = (fq_est_workflow *)fq_est_use(e, &k))) {
        if (!fq_est_room(e, t, &p->h) ||
            !(w = (fq_est_workflow *)fq_est_alloc(e, &k, sizeof(*w))))
            return;
        fq_est_item_add(e, t, &w->h);
    }
    for (i = 0; i < w->ncontrib && w->contrib[i].tenant != t->id; i++)
        ;
    if (i == w->ncontrib) {
        if (w->ncontrib < FQ_EST_CONTRIBUTORS) {
            w->ncontrib++;
        } else {
            i = 0;
            for (uint32_t j = 1; j < w->ncontrib; j++)
                if (e->clock - w->contrib[j].seen > e->clock - w->contrib[i].seen)
                    i = j;
        }
        if (w->h.owner && w->h.owner != t) {
            /* A second tenant: no longer charged to the first. */
            fq_est_item_drop(e, &w->h);
            if (e->nshared >= e->shared_cap)
                fq_est_evict(e, e->shared.lru);
            fq_est_list_push(&e->shared, &w->h);
            e->nshared++;
        }
    }
    w->contrib[i] = (fq_est_contrib){.tenant = t->id, .stat = p->stat, .n = p->n,
                                     .seen = e->clock};
    fq_est_workflow_stat(w);
}

/* The configured statistic of a histogram with at least one sample. */
static uint32_t fq_est_hist_stat(const fq_est *e, const fq_est_pair *x)
{
    if (e->o.percentile == 0)
        return fq_est_clamp(e, (double)x->sum / x->n);

    uint64_t rank = ((uint64_t)x->n * e->o.percentile + 99) / 100;
    uint64_t below = 0;
    uint32_t b = 0;

    while (below + x->bucket[b] < rank)
        below += x->bucket[b++];

    /* The k-th of c samples in a bucket is taken from the middle of the
     * k-th of c equal cells; less a half, since a sample is an integer, the
     * left edge of its unit cell: exact when a bucket is filled evenly. */
    double lo, width;
    fq_est_bucket_range(b, &lo, &width);
    return fq_est_clamp(e, lo + ((double)(rank - below) - 0.5) * width / x->bucket[b] - 0.5);
}

/* Halve a histogram, keeping its mean. */
static void fq_est_hist_halve(fq_est_pair *x, uint32_t nbuckets)
{
    uint32_t n = 0;

    for (uint32_t b = 0; b < nbuckets; b++) {
        x->bucket[b] >>= 1;
        n += x->bucket[b];
    }
    x->sum = (uint64_t)((double)x->sum * n / x->n);
    x->n = n;
}

static void fq_est_hist_add(const fq_est *e, fq_est_pair *x, uint32_t tokens)
{
    if (x->n >= e->hist_window)
        fq_est_hist_halve(x, e->nbuckets);
    x->bucket[fq_est_bucket(tokens)]++;
    x->n++;
    x->sum += tokens;
    x->stat = fq_est_hist_stat(e, x);
}

static void fq_est_ratio_add(fq_est_ratio *r, uint32_t window, double num, double den)
{
    if (r->n >= window) {
        r->num /= 2;
        r->den /= 2;
        r->n /= 2;
    }
    r->num += num;
    r->den += den;
    r->n++;
}

fq_status fq_est_create(fq_est **out, const fq_est_opts *o)
{
    fq_est *e;
    /* Chains not planned from outside: tenants and workflows come from
     * producers. */
    uint64_t seed;

    if (!out)
        return FQ_EINVAL;
    *out = NULL;
    if (!o || o->default_tokens == 0 || o->max_tokens == 0 ||
        o->min_samples == 0 || o->min_samples > FQ_EST_MAX_MIN_SAMPLES ||
        o->percentile > 99 ||
        o->max_entries == 0 || o->max_entries > FQ_EST_MAX_ENTRIES ||
        o->max_tenant_entries == 0 || o->max_tenant_entries > FQ_EST_MAX_ENTRIES)
        return FQ_EINVAL;
    e = calloc(1, sizeof(*e));
    if (!e)
        return FQ_ENOMEM;
    seed = (uint64_t)(uintptr_t)e ^ ((uint64_t)time(NULL) << 20);
    e->o = *o;
    e->tenant_cap = o->max_tenant_entries < o->max_entries ? o->max_tenant_entries
                                                           : o->max_entries;
    e->shared_cap = o->max_entries / FQ_EST_SHARED_PART ? o->max_entries / FQ_EST_SHARED_PART
                                                        : 1;
    e->nbuckets = fq_est_bucket(o->max_tokens) + 1;
    e->pair_size = sizeof(fq_est_pair) + e->nbuckets * sizeof(uint32_t);
    e->hist_window = o->min_samples > FQ_EST_HIST_WINDOW / 4 ? 4 * o->min_samples
                                                            : FQ_EST_HIST_WINDOW;
    e->ratio_window = o->min_samples > FQ_EST_RATIO_WINDOW / 2 ? 2 * o->min_samples
                                                              : FQ_EST_RATIO_WINDOW;
    e->by_held = calloc((size_t)e->tenant_cap + 1, sizeof(*e->by_held));
    if (!e->by_held ||
        fq_strmap_create(&e->learned, FQ_STRMAP_KEY_OFFSET(fq_est_entry, node, key),
                         o->max_entries, seed) != FQ_OK ||
        fq_strmap_create(&e->defaults, FQ_STRMAP_KEY_OFFSET(fq_est_entry, node, key),
                         FQ_EST_DEFAULTS_SLOTS, seed) != FQ_OK) {
        fq_est_destroy(e);
        return FQ_ENOMEM;
    }
    *out = e;
    return FQ_OK;
}

void fq_est_destroy(fq_est *e)
{
    if (!e)
        return;
    fq_strmap_destroy(e->defaults, fq_est_entry_free);
    fq_strmap_destroy(e->learned, fq_est_entry_free);
    free(e->by_held);
    free(e);
}

/* Bytes of a DEFAULT entry: no contributors. */
#define FQ_EST_DEFAULT_SIZE offsetof(fq_est_workflow, contrib)

fq_status fq_est_set_workflow(fq_est *e, const char *workflow, uint32_t tokens)
{
    fq_est_key k;
    fq_est_workflow *x;

    if (!workflow || tokens == 0 ||
        !fq_est_key_make(e->defaults, &k, FQ_EST_DEFAULT, "", workflow))
        return FQ_EINVAL;
    x = (fq_est_workflow *)fq_est_table_find(e->defaults, &k);
    if (!x) {
        if (fq_strmap_reserve(e->defaults) != FQ_OK)
            return FQ_ENOMEM;
        x = calloc(1, FQ_EST_DEFAULT_SIZE);
        if (!x)
            return FQ_ENOMEM;
        memcpy(x->h.key, k.s, k.len);
        fq_strmap_insert_hashed(e->defaults, &x->h.node, k.len, k.hash);
    }
    x->stat = fq_est_clamp(e, tokens);
    return FQ_OK;
}

uint32_t fq_est_charge(fq_est *e, const char *tenant, const char *workflow,
                       uint32_t declared)
{
    const uint32_t min = e->o.min_samples;
    fq_est_pair *p = NULL;
    fq_est_workflow *w;
    fq_est_key k;

    if (fq_est_key_make(e->learned, &k, FQ_EST_PAIR, tenant, workflow))
        p = (fq_est_pair *)fq_est_use(e, &k);
    if (declared > 0) {
        if (p && p->ratio.n >= min)
            return fq_est_clamp(e, declared * (p->ratio.num / p->ratio.den));
        return fq_est_clamp(e, declared);
    }
    if (p && p->n >= min)
        return p->stat;
    if (fq_est_key_make(e->learned, &k, FQ_EST_WORKFLOW, "", workflow) &&
        (w = (fq_est_workflow *)fq_est_use(e, &k)) &&
        w->ncontrib >= FQ_EST_QUORUM && w->samples >= min)
        return w->stat;
    if (fq_est_key_make(e->defaults, &k, FQ_EST_DEFAULT, "", workflow) &&
        (w = (fq_est_workflow *)fq_est_table_find(e->defaults, &k)))
        return w->stat;
    return fq_est_clamp(e, e->o.default_tokens);
}

void fq_est_observe(fq_est *e, const char *tenant, const char *workflow,
                    uint32_t declared, uint32_t charged, uint64_t actual)
{
    fq_est_tenant *t;
    fq_est_pair *p;
    uint32_t tokens;

    if (actual == 0)
        return;     /* cancelled before it spent anything: see the principles */
    tokens = actual > e->o.max_tokens ? e->o.max_tokens : (uint32_t)actual;
    e->clock++;

    /* The tenant's record first: its history and summary are charged to
     * it. Making room never takes the tenant's record, nor the history the
     * summary is fed from. */
    if (!(t = fq_est_tenant_obtain(e, tenant)))
        return;
    if (charged > 0)
        fq_est_ratio_add(&t->ratio, e->ratio_window, tokens, fq_est_clamp(e, charged));
    if (!(p = fq_est_pair_obtain(e, t, tenant, workflow)))
        return;
    fq_est_hist_add(e, p, tokens);
    if (declared > 0) {
        double d = fq_est_clamp(e, declared);
        double a = tokens;

        if (a > d * FQ_EST_RATIO_BOUND)
            a = d * FQ_EST_RATIO_BOUND;
        if (a < d / FQ_EST_RATIO_BOUND)
            a = d / FQ_EST_RATIO_BOUND;
        fq_est_ratio_add(&p->ratio, e->ratio_window, a, d);
    }
    fq_est_contribute(e, t, workflow, p);
}

/* The tenant's record, not marked used, or NULL. */
static const fq_est_tenant *fq_est_tenant_find(const fq_est *e, const char *tenant)
{
    fq_est_key k;

    if (!fq_est_key_make(e->learned, &k, FQ_EST_TENANT, tenant, ""))
        return NULL;
    return (const fq_est_tenant *)fq_est_table_find(e->learned, &k);
}

double fq_est_error(const fq_est *e, const char *tenant)
{
    const fq_est_tenant *t = fq_est_tenant_find(e, tenant);

    return t && t->ratio.n > 0 ? t->ratio.num / t->ratio.den : 1.0;
}

size_t fq_est_entries(const fq_est *e)
{
    return fq_strmap_count(e->learned);
}

size_t fq_est_tenant_entries(const fq_est *e, const char *tenant)
{
    const fq_est_tenant *t = fq_est_tenant_find(e, tenant);

    return t ? t->held : 0;
}

size_t fq_est_bytes(const fq_est *e)
{
    return sizeof(*e) + fq_strmap_bytes(e->learned) + fq_strmap_bytes(e->defaults) +
           ((size_t)e->tenant_cap + 1) * sizeof(*e->by_held) + e->learned_bytes +
           fq_strmap_count(e->defaults) * FQ_EST_DEFAULT_SIZE;
}
