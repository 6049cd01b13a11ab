/* estimate.c -- cost estimates learned from each workflow's history of actual tokens. */
#include "estimate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strmap.h"

/*
 * Principles.
 *
 * - What is learned lives in entries of three kinds that share one hash
 *   table and one LRU list, bounded together by max_entries: a (tenant,
 *   workflow) history, a workflow's history over all tenants, and a tenant's
 *   estimate error. Only a completion creates an entry; a charge only looks
 *   up, so charging never allocates. Once the table is full a new entry
 *   takes over the least recently used one, so then nothing allocates.
 *   Configured per-workflow defaults are kept apart: they are configuration,
 *   never evicted.
 *
 * - A history is a log-scale histogram of actual tokens: four buckets per
 *   power of two (exact below 4), as many as max_tokens needs (76 for a
 *   million), plus the count and the sum for the mean. A percentile is the
 *   nearest rank, placed by linear interpolation inside its bucket: it lies
 *   in the same bucket as the true value, so it is off by less than a
 *   quarter of it. The statistic is computed when a sample arrives, so a
 *   charge reads it in O(1).
 *
 * - The producer's declaration is corrected by sum(actual)/sum(declared)
 *   over the tenant's recent runs of that workflow: weighted by tokens, so
 *   over the window the corrected charges add up to the actual tokens. It
 *   learns actual/declared, not actual/charged, so the correction does not
 *   feed back on itself. One run's actual counts as at most 64x and at least
 *   1/64x its declaration, so a single absurd completion cannot swing the
 *   ratio far.
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

enum fq_est_kind {
    FQ_EST_PAIR = 1,        /* (tenant, workflow): histogram, actual/declared */
    FQ_EST_WORKFLOW,        /* ("", workflow): histogram over all tenants */
    FQ_EST_TENANT,          /* (tenant, ""): actual/charged, the estimate error */
    FQ_EST_DEFAULT,         /* ("", workflow): configured default, in stat */
};

/* sum(num)/sum(den) over a decaying window of samples. */
typedef struct fq_est_ratio {
    double num;                 /* actual tokens */
    double den;                 /* declared or charged tokens */
    uint32_t n;                 /* samples in the window */
} fq_est_ratio;

/* An entry's key: its kind, tenant, a NUL, and workflow, in one string. */
#define FQ_EST_KEY_MAX (1 + FQ_TENANT_MAX + 1 + FQ_WORKFLOW_MAX)

typedef struct fq_est_entry {
    fq_strmap_node node;            /* in fq_est.learned or fq_est.defaults */
    struct fq_est_entry *newer;     /* LRU list, towards the most recent */
    struct fq_est_entry *older;     /* LRU list, towards the least recent */
    uint64_t sum;                   /* histogram: tokens of its samples */
    uint32_t n;                     /* histogram: samples */
    uint32_t stat;                  /* the statistic charged (or the default) */
    fq_est_ratio ratio;             /* PAIR: actual/declared; TENANT: actual/charged */
    char key[FQ_EST_KEY_MAX];       /* see fq_est_key_make */
    uint32_t bucket[];              /* histogram counters, fq_est.nbuckets */
} fq_est_entry;

/* A lookup key, built on the stack, and its hash in the table it is for. */
typedef struct fq_est_key {
    char s[FQ_EST_KEY_MAX];
    size_t len;
    uint32_t hash;
} fq_est_key;

struct fq_est {
    fq_est_opts o;
    fq_strmap *learned;             /* PAIR, WORKFLOW and TENANT entries */
    fq_strmap *defaults;            /* DEFAULT entries, without counters */
    fq_est_entry *mru;              /* LRU list ends, over learned */
    fq_est_entry *lru;
    size_t entry_size;              /* of a learned entry, with its counters */
    uint32_t nbuckets;              /* histogram counters per entry */
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

/* Link x, whose key is set from k. */
static void fq_est_table_insert(fq_strmap *t, fq_est_entry *x, const fq_est_key *k)
{
    fq_strmap_insert_hashed(t, &x->node, k->len, k->hash);
}

static void fq_est_entry_free(fq_strmap_node *n)
{
    free(FQ_STRMAP_ENTRY(n, fq_est_entry, node));
}

static void fq_est_lru_unlink(fq_est *e, fq_est_entry *x)
{
    if (x->newer)
        x->newer->older = x->older;
    else
        e->mru = x->older;
    if (x->older)
        x->older->newer = x->newer;
    else
        e->lru = x->newer;
}

static void fq_est_lru_push(fq_est *e, fq_est_entry *x)
{
    x->newer = NULL;
    x->older = e->mru;
    if (e->mru)
        e->mru->newer = x;
    else
        e->lru = x;
    e->mru = x;
}

static void fq_est_entry_init(fq_est_entry *x, size_t size, const fq_est_key *k)
{
    memset(x, 0, size);
    memcpy(x->key, k->s, k->len);
}

/* The learned entry for k, marked most recently used, or NULL. */
static fq_est_entry *fq_est_use(fq_est *e, const fq_est_key *k)
{
    fq_est_entry *x = fq_est_table_find(e->learned, k);

    if (x && x != e->mru) {
        fq_est_lru_unlink(e, x);
        fq_est_lru_push(e, x);
    }
    return x;
}

/* fq_est_use for a key given by its parts; NULL if they are invalid. */
static fq_est_entry *fq_est_lookup(fq_est *e, enum fq_est_kind kind,
                                   const char *tenant, const char *workflow)
{
    fq_est_key k;

    return fq_est_key_make(e->learned, &k, kind, tenant, workflow) ? fq_est_use(e, &k) : NULL;
}

/* The learned entry for k, marked most recently used, created if missing:
 * once max_entries are held, by taking over the least recently used entry.
 * NULL if the key is invalid or memory cannot be had. The learned table has
 * a slot for each of max_entries from the start, so it never grows. */
static fq_est_entry *fq_est_obtain(fq_est *e, enum fq_est_kind kind,
                                   const char *tenant, const char *workflow)
{
    fq_est_key k;
    fq_est_entry *x;

    if (!fq_est_key_make(e->learned, &k, kind, tenant, workflow))
        return NULL;
    if ((x = fq_est_use(e, &k)))
        return x;
    if (fq_strmap_count(e->learned) < e->o.max_entries) {
        x = malloc(e->entry_size);
        if (!x)
            return NULL;
    } else {
        x = e->lru;
        fq_strmap_remove(e->learned, &x->node);
        fq_est_lru_unlink(e, x);
    }
    fq_est_entry_init(x, e->entry_size, &k);
    fq_est_table_insert(e->learned, x, &k);
    fq_est_lru_push(e, x);
    return x;
}

/* The configured statistic of a histogram with at least one sample. */
static uint32_t fq_est_hist_stat(const fq_est *e, const fq_est_entry *x)
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
static void fq_est_hist_halve(fq_est_entry *x, uint32_t nbuckets)
{
    uint32_t n = 0;

    for (uint32_t b = 0; b < nbuckets; b++) {
        x->bucket[b] >>= 1;
        n += x->bucket[b];
    }
    x->sum = (uint64_t)((double)x->sum * n / x->n);
    x->n = n;
}

static void fq_est_hist_add(const fq_est *e, fq_est_entry *x, uint32_t tokens)
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
        o->max_entries == 0 || o->max_entries > FQ_EST_MAX_ENTRIES)
        return FQ_EINVAL;
    e = calloc(1, sizeof(*e));
    if (!e)
        return FQ_ENOMEM;
    seed = (uint64_t)(uintptr_t)e ^ ((uint64_t)time(NULL) << 20);
    e->o = *o;
    e->nbuckets = fq_est_bucket(o->max_tokens) + 1;
    e->entry_size = sizeof(fq_est_entry) + e->nbuckets * sizeof(uint32_t);
    e->hist_window = o->min_samples > FQ_EST_HIST_WINDOW / 4 ? 4 * o->min_samples
                                                            : FQ_EST_HIST_WINDOW;
    e->ratio_window = o->min_samples > FQ_EST_RATIO_WINDOW / 2 ? 2 * o->min_samples
                                                              : FQ_EST_RATIO_WINDOW;
    if (fq_strmap_create(&e->learned, FQ_STRMAP_KEY_OFFSET(fq_est_entry, node, key),
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
    free(e);
}

fq_status fq_est_set_workflow(fq_est *e, const char *workflow, uint32_t tokens)
{
    fq_est_key k;
    fq_est_entry *x;

    if (!workflow || tokens == 0 ||
        !fq_est_key_make(e->defaults, &k, FQ_EST_DEFAULT, "", workflow))
        return FQ_EINVAL;
    x = fq_est_table_find(e->defaults, &k);
    if (!x) {
        if (fq_strmap_reserve(e->defaults) != FQ_OK)
            return FQ_ENOMEM;
        x = malloc(sizeof(*x));
        if (!x)
            return FQ_ENOMEM;
        fq_est_entry_init(x, sizeof(*x), &k);
        fq_est_table_insert(e->defaults, x, &k);
    }
    x->stat = fq_est_clamp(e, tokens);
    return FQ_OK;
}

uint32_t fq_est_charge(fq_est *e, const char *tenant, const char *workflow,
                       uint32_t declared)
{
    const uint32_t min = e->o.min_samples;
    fq_est_entry *x;
    fq_est_key k;

    if (declared > 0) {
        x = fq_est_lookup(e, FQ_EST_PAIR, tenant, workflow);
        if (x && x->ratio.n >= min)
            return fq_est_clamp(e, declared * (x->ratio.num / x->ratio.den));
        return fq_est_clamp(e, declared);
    }
    x = fq_est_lookup(e, FQ_EST_PAIR, tenant, workflow);
    if (x && x->n >= min)
        return x->stat;
    x = fq_est_lookup(e, FQ_EST_WORKFLOW, "", workflow);
    if (x && x->n >= min)
        return x->stat;
    if (fq_est_key_make(e->defaults, &k, FQ_EST_DEFAULT, "", workflow) &&
        (x = fq_est_table_find(e->defaults, &k)))
        return x->stat;
    return fq_est_clamp(e, e->o.default_tokens);
}

void fq_est_observe(fq_est *e, const char *tenant, const char *workflow,
                    uint32_t declared, uint32_t charged, uint64_t actual)
{
    fq_est_entry *x;
    uint32_t tokens;

    if (actual == 0)
        return;     /* cancelled before it spent anything: see the principles */
    tokens = actual > e->o.max_tokens ? e->o.max_tokens : (uint32_t)actual;

    /* Each entry is finished with before the next is obtained, which may
     * take over the one before. */
    if ((x = fq_est_obtain(e, FQ_EST_PAIR, tenant, workflow))) {
        fq_est_hist_add(e, x, tokens);
        if (declared > 0) {
            double d = fq_est_clamp(e, declared);
            double a = tokens;

            if (a > d * FQ_EST_RATIO_BOUND)
                a = d * FQ_EST_RATIO_BOUND;
            if (a < d / FQ_EST_RATIO_BOUND)
                a = d / FQ_EST_RATIO_BOUND;
            fq_est_ratio_add(&x->ratio, e->ratio_window, a, d);
        }
    }
    if ((x = fq_est_obtain(e, FQ_EST_WORKFLOW, "", workflow)))
        fq_est_hist_add(e, x, tokens);
    if (charged > 0 && (x = fq_est_obtain(e, FQ_EST_TENANT, tenant, "")))
        fq_est_ratio_add(&x->ratio, e->ratio_window, tokens, fq_est_clamp(e, charged));
}

double fq_est_error(const fq_est *e, const char *tenant)
{
    fq_est_key k;
    const fq_est_entry *x;

    if (!fq_est_key_make(e->learned, &k, FQ_EST_TENANT, tenant, ""))
        return 1.0;
    x = fq_est_table_find(e->learned, &k);
    return x && x->ratio.n > 0 ? x->ratio.num / x->ratio.den : 1.0;
}

size_t fq_est_entries(const fq_est *e)
{
    return fq_strmap_count(e->learned);
}

size_t fq_est_bytes(const fq_est *e)
{
    return sizeof(*e) + fq_strmap_bytes(e->learned) + fq_strmap_bytes(e->defaults) +
           fq_strmap_count(e->learned) * e->entry_size +
           fq_strmap_count(e->defaults) * sizeof(fq_est_entry);
}
