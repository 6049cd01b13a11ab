/* cardrr.h -- the design card's DeficitRoundRobin listing, ported literally: the baseline. */
#ifndef FQ_CARDRR_H
#define FQ_CARDRR_H

#include <stdint.h>

#include "fq.h"

/* Kept as the card wrote it, flaws included, so that benchmarks and the
 * simulator can compare fairq against it: next() grants a quantum on every
 * visit but sends at most one run per visit (round robin by request count
 * for small runs), sweeps every tenant, and enqueue() resets the deficit of
 * an empty queue, erasing debt that reconcile() recorded. Not for use. */

typedef struct fq_cardrr fq_cardrr;

typedef struct fq_cardrr_run {
    struct fq_cardrr_run *next; /* pending FIFO */
    uint32_t tenant;            /* index given at creation */
    uint32_t est;               /* estTokens */
    uint64_t id;
    void *handle;
} fq_cardrr_run;

/* ntenants tenants, indexed 0..n-1, each with quantum quantum x weight[i]
 * (weight may be NULL: all 1). */
fq_status fq_cardrr_create(fq_cardrr **out, uint32_t ntenants, uint32_t quantum,
                           const uint32_t *weight);
void fq_cardrr_destroy(fq_cardrr *c);

/* enqueue(req): the caller owns r until next() returns it. */
void fq_cardrr_enqueue(fq_cardrr *c, fq_cardrr_run *r);
/* next(): one sweep over every tenant; NULL if none could send. */
fq_cardrr_run *fq_cardrr_next(fq_cardrr *c);
/* reconcile(tenantId, estimated, actual) */
void fq_cardrr_reconcile(fq_cardrr *c, uint32_t tenant, uint32_t est, uint64_t actual);

#ifdef FQ_TESTING   /* tests only: no program calls it */
int64_t fq_cardrr_deficit(const fq_cardrr *c, uint32_t tenant);
#endif
uint64_t fq_cardrr_visits(const fq_cardrr *c);

#endif
