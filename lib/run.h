/* run.h -- a run as the scheduling core holds it, shared by drr and window. */
#ifndef FQ_RUN_H
#define FQ_RUN_H

#include <stdint.h>

#include "u64map.h"

struct fq_tenant;

enum fq_run_state {
    FQ_RUN_FREE = 0,    /* on the scheduler's free list */
    FQ_RUN_QUEUED,      /* in its tenant's FIFO */
    FQ_RUN_FLIGHT,      /* dispatched, lease running, slot held */
    FQ_RUN_EXPIRED,     /* lease expired: slot freed, still awaiting completion */
};

struct fq_lane;

/* 64 bytes: the whole per-run cost of the core. Queued runs use next (and
 * lane); the id index and the doubly linked lease list serve dispatched
 * runs. */
typedef struct fq_run {
    struct fq_run *next;        /* tenant FIFO; lease list; free list */
    union {
        struct fq_run *prev;    /* dispatched: lease list */
        struct fq_lane *lane;   /* queued: the lane of its sub-tenant and
                                   class (lib/drr), so that explain finds its
                                   sub-tenant from the run alone; NULL in its
                                   tenant's FIFO */
    };
    fq_u64map_node hnode;       /* its link in the index by id: the window's; with
                                   caller_runs (fq_sched_opts) the caller's, whose index
                                   the core never touches (the window keeps none then) */
    struct fq_tenant *tenant;   /* owner */
    void *handle;               /* the caller's, opaque to the core */
    uint64_t id;                /* the caller's unique run key */
    uint64_t t;                 /* queued: enqueue time; in flight: dispatch time;
                                   expired: when its lease ended */
    uint32_t est;               /* estimate charged, capped at max_est_tokens */
    uint16_t state;             /* enum fq_run_state */
    uint16_t cls;               /* its priority class within its tenant (0: the
                                   highest; 0 when no classes are configured) */
} fq_run;

#endif
