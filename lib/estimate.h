/* estimate.h -- cost estimates learned from each workflow's history of actual tokens. */
#ifndef FQ_ESTIMATE_H
#define FQ_ESTIMATE_H

#include <stddef.h>
#include <stdint.h>

#include "fq.h"

typedef struct fq_est fq_est;

typedef struct fq_est_opts {
    uint32_t default_tokens;    /* the global default estimate; >= 1 */
    uint32_t max_tokens;        /* estimates are clamped to [1, max_tokens] */
    uint32_t min_samples;       /* samples before a history is trusted; >= 1 */
    uint32_t percentile;        /* 0: charge the mean; 1..99: that percentile */
    uint32_t max_entries;       /* (tenant, workflow) histories kept; LRU beyond */
} fq_est_opts;

/* Create an estimator. On error *out is NULL. */
fq_status fq_est_create(fq_est **out, const fq_est_opts *o);
/* Safe on NULL. */
void fq_est_destroy(fq_est *e);

/* The configured default for a workflow (estimates.workflows). Replaces a
 * previous value. */
fq_status fq_est_set_workflow(fq_est *e, const char *workflow, uint32_t tokens);

/* The estimate to charge for a run of tenant/workflow (workflow may be ""
 * for none). declared is the producer's est_tokens, 0 if it gave none.
 * With a declared value: declared x the tenant's observed actual/declared
 * ratio for that workflow, once trusted (else declared as is). Without:
 * the (tenant, workflow) history's statistic once it has min_samples, else
 * the workflow's history over all tenants, else the workflow's configured
 * default, else the global default. Always in [1, max_tokens]. */
uint32_t fq_est_charge(fq_est *e, const char *tenant, const char *workflow,
                       uint32_t declared);

/* Learn from a completion: actual tokens of a run whose producer declared
 * `declared` (0 if none) and which was charged `charged`. */
void fq_est_observe(fq_est *e, const char *tenant, const char *workflow,
                    uint32_t declared, uint32_t charged, uint64_t actual);

/* The tenant's estimate error, actual / charged over its recent completions
 * (an exponentially weighted mean); 1.0 when nothing has been seen. */
double fq_est_error(const fq_est *e, const char *tenant);

/* Histories held now, and bytes of memory they use. */
size_t fq_est_entries(const fq_est *e);
size_t fq_est_bytes(const fq_est *e);

#endif
