/* window.h -- the in-flight window: dispatched runs, their leases, and the global limits. */
#ifndef FQ_WINDOW_H
#define FQ_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "run.h"

/* Runs are owned by the scheduler's pool; the window only links them. A run
 * in the window is FLIGHT (holds a slot, on the lease list in dispatch
 * order) or EXPIRED (slot freed, on the expired list awaiting a late
 * completion). Both are found by id through one index, unless the caller
 * indexes its runs itself (then a run has one index, the caller's, through
 * its hnode, and the caller names runs by record). An EXPIRED run is
 * remembered until more than max_expired are held or keep has passed since
 * its lease ended, whichever is first; fq_window_evict_one hands it back
 * then, so the caller learns of each eviction as of each expiry. */
typedef struct fq_window {
    uint32_t max_runs;          /* slots; 0 = unlimited */
    uint64_t max_tokens;        /* token budget; 0 = unlimited */
    uint64_t timeout;           /* lease length; 0 = leases never expire */
    uint32_t max_expired;       /* expired runs remembered */
    uint64_t keep;              /* ... for this long past their lease's end; 0: no limit */
    uint32_t runs;              /* FLIGHT runs */
    uint64_t tokens;            /* their estimates */
    uint32_t expired;           /* EXPIRED runs held */
    fq_run *lease_head, *lease_tail;    /* FLIGHT, oldest deadline first */
    fq_run *exp_head, *exp_tail;        /* EXPIRED, oldest first */
    fq_u64map *by_id;           /* FLIGHT and EXPIRED runs by id (their hnode); NULL:
                                   the caller indexes them */
} fq_window;

/* by_id: keep an index by id (fq_window_find); false: the caller finds its
 * runs, and their hnode is the caller's. */
fq_status fq_window_init(fq_window *w, uint32_t max_runs, uint64_t max_tokens,
                         uint64_t timeout, uint32_t max_expired, bool by_id);
void fq_window_fini(fq_window *w);
void fq_window_set_limits(fq_window *w, uint32_t max_runs, uint64_t max_tokens,
                          uint64_t timeout, uint32_t max_expired);

/* Remember an EXPIRED run for keep past its lease's end at most (0: no
 * limit but max_expired); applies to those held already too. */
void fq_window_set_keep(fq_window *w, uint64_t keep);

/* Whether a run of est tokens may be dispatched now. A run larger than the
 * whole token budget fits when the window is empty, so it is never blocked
 * for ever. */
bool fq_window_fits(const fq_window *w, uint32_t est);

/* Admit a run: it takes a slot, and r->t becomes its dispatch time (its
 * lease ends at r->t + timeout).
 * FQ_ENOMEM if the index could not grow; nothing is changed then. */
fq_status fq_window_add(fq_window *w, fq_run *r, uint64_t now);

/* The FLIGHT or EXPIRED run with this id, or NULL (always without an
 * index by id). */
fq_run *fq_window_find(const fq_window *w, uint64_t id);

/* Take a run out of the window, freeing its slot if it held one; its
 * state becomes FQ_RUN_FREE (the caller may requeue it). */
void fq_window_remove(fq_window *w, fq_run *r);

/* Start r's time again at now (a run whose dispatch reached the workers
 * only now): a FLIGHT run's lease runs from now, an EXPIRED run is
 * remembered as if its lease ended now. It goes to the end of its list,
 * which stays in the order of its times since now is the latest. */
void fq_window_restart(fq_window *w, fq_run *r, uint64_t now);

/* Take in a run whose lease ended at expired_at, as EXPIRED (a run read
 * back after a restart): r->t becomes expired_at. It is listed after the
 * EXPIRED runs held. FQ_ENOMEM if the index could not grow; nothing is
 * changed then. */
fq_status fq_window_add_expired(fq_window *w, fq_run *r, uint64_t expired_at);

/* The oldest FLIGHT run if its lease ended at or before now: it loses its
 * slot and becomes EXPIRED, and r->t becomes the time its lease ended. NULL
 * if no lease has ended. */
fq_run *fq_window_expire_one(fq_window *w, uint64_t now);

/* The oldest EXPIRED run if more than max_expired are held, or if its
 * lease ended keep or longer before now (keep set), taken out of the window
 * for the caller to free; else NULL. The runs are looked at in the order
 * they expired, so one that expired later but is due earlier (a shorter
 * keep since) waits for those before it. */
fq_run *fq_window_evict_one(fq_window *w, uint64_t now);

/* The earliest lease deadline, or UINT64_MAX if none or leases never end. */
uint64_t fq_window_next_deadline(const fq_window *w);

#endif
