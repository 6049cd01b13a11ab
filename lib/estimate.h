/* estimate.h -- cost estimates learned from each workflow's history of actual tokens. */
#ifndef FQ_ESTIMATE_H
#define FQ_ESTIMATE_H

#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/* Not thread-safe: one owner (the proxy's loop, a simulator, a test). */
typedef struct fq_est fq_est;

typedef struct fq_est_opts {
    uint32_t default_tokens;    /* the global default estimate; >= 1 */
    uint32_t max_tokens;        /* estimates are clamped to [1, max_tokens]; >= 1 */
    uint32_t min_samples;       /* samples before a history or ratio is trusted; 1..FQ_EST_MAX_MIN_SAMPLES */
    uint32_t percentile;        /* 0: charge the mean; 1..99: that percentile */
    uint32_t max_entries;       /* learned entries kept, 1..FQ_EST_MAX_ENTRIES: tenant
                                 * records, (tenant, workflow) histories and workflow
                                 * summaries together; when full, a new one is taken
                                 * from the tenant holding the most (see estimate.c) */
    uint32_t max_tenant_entries; /* entries charged to one tenant at most (its record,
                                 * histories, workflows only it reported), beyond
                                 * which it reuses its least recently used;
                                 * 1..FQ_EST_MAX_ENTRIES, in effect at most max_entries */
} fq_est_opts;

#define FQ_EST_MAX_MIN_SAMPLES (1u << 20)
#define FQ_EST_MAX_ENTRIES (1u << 24)

/* Fill o with the defaults: 1000 tokens, max 1,000,000, 8 samples, the
 * mean, 65,536 entries, 4096 per tenant. */
void fq_est_opts_init(fq_est_opts *o);

/* Create an estimator. On error (FQ_EINVAL for an option out of range,
 * FQ_ENOMEM) *out is NULL. */
fq_status fq_est_create(fq_est **out, const fq_est_opts *o);
/* Safe on NULL. */
void fq_est_destroy(fq_est *e);

/* The configured default for a workflow (estimates.workflows), clamped like
 * every estimate. Replaces a previous value. FQ_EINVAL if workflow is NULL
 * or longer than FQ_WORKFLOW_MAX, or tokens is 0; on error nothing is
 * changed. */
fq_status fq_est_set_workflow(fq_est *e, const char *workflow, uint32_t tokens);

/* The estimate to charge for a run of tenant/workflow (workflow may be ""
 * or NULL for none). declared is the producer's est_tokens, 0 if it gave
 * none. With a declared value: declared x the tenant's observed
 * actual/declared ratio for that workflow, once trusted (else declared as
 * is). Without: the (tenant, workflow) history's statistic once it has
 * min_samples, else the workflow's shared statistic (the median of the
 * statistics of the tenants that reported it, once 3 did, with min_samples
 * samples among them), else the workflow's configured default, else the
 * global default. Always in [1, max_tokens]. Never allocates; marks the
 * entries it reads as used.
 * A tenant or workflow that is NULL or too long has no history. */
uint32_t fq_est_charge(fq_est *e, const char *tenant, const char *workflow,
                       uint32_t declared);

/* Learn from a completion: actual tokens of a run whose producer declared
 * `declared` (0 if none) and which was charged `charged` (0 if unknown: the
 * estimate error is then not updated). actual == 0 (a run cancelled before
 * it spent anything) teaches nothing; absurd values are clamped to
 * max_tokens. Best effort: a key that is NULL or too long (or a tenant that
 * is empty), or an entry that cannot be had, is not learned. */
void fq_est_observe(fq_est *e, const char *tenant, const char *workflow,
                    uint32_t declared, uint32_t charged, uint64_t actual);

/* The tenant's estimate error, actual / charged tokens over its recent
 * completions (a decaying window); 1.0 when nothing has been seen. */
double fq_est_error(const fq_est *e, const char *tenant);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Learned entries held now (at most max_entries), and bytes of memory the
 * estimator uses in all. */
size_t fq_est_entries(const fq_est *e);
size_t fq_est_bytes(const fq_est *e);
/* Entries charged to the tenant now (at most max_tenant_entries): its
 * record, its histories and the workflows only it has reported; 0 for a
 * tenant with nothing learned. */
size_t fq_est_tenant_entries(const fq_est *e, const char *tenant);
#endif

#endif
