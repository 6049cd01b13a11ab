/* sharecheck.h -- the shares of issue 16 point 4, measured live: two tenants backlogged on two replicas, the tokens the workers processed for each, checked against docs/scaling.md's bound and one proxy's shares; a small tenant's first run beside another replica's flood. */
#ifndef FQ_SHARECHECK_H
#define FQ_SHARECHECK_H

/*
 * For tests whose replicas run window.share on, on one nats-server
 * (it_replicas_fair) or on the 3-node cluster (it_cluster_replicas),
 * through a pf_fixture's client and workers; the workers spend
 * us_per_token a token (pt_worker_opts.per_token_us or pt_worker_speed)
 * and report what they spent. Tenants are named by lib/partition's
 * function, the server's mapping (it_partition checks that they agree).
 *
 * The tokens a tenant was served are those the workers processed for it
 * within the interval: a run received at t and taking est x us_per_token
 * counts the part of [t, t + its service] inside the interval, as
 * fairq-sim and scripts/bench-replicas.sh count them. Like proxyfixture's
 * checks, these fail the running cmocka test themselves.
 */

#include <stdint.h>

#include "proxyfixture.h"

/* What a measurement depends on. */
typedef struct sc_world {
    int parts;                  /* P, the server's mapping */
    int window;                 /* G: window.max_in_flight, in runs */
    int us_per_token;           /* the workers' speed: r = 10^6 / us_per_token tokens a second */
    int period_ms;              /* the replicas' heartbeat period, p */
    int interval_ms;            /* T: the interval measured */
} sc_world;

/* The first name prefix<n> whose partition of parts is k. */
void sc_name_on(char *out, size_t cap, const char *prefix, int parts, int k);

/* Tenant a (weight wa, runs of est_a tokens) and tenant b (wb, est_b),
 * owned by two replicas: a's backlog submitted first and b's once a's
 * replica holds the whole window and has said so twice on the heartbeat
 * subject (b's replica has heard it), each enough to stay backlogged
 * throughout; the shares let settle (each replica hears the other, 2p,
 * and the one whose share shrank drains, one service time of the shorter
 * runs, and a second), then measured over w->interval_ms. Asserts the
 * bound of docs/scaling.md ("The bound", point 2, the turnaround taken as
 * p) and that S_a/wa is within 10% of S_b/wb, as one proxy's DRR gives
 * them (issue 16 point 4). Returns the runs submitted; the workers still
 * have the rest of the backlogs to serve. */
int sc_shares(pf_fixture *f, const sc_world *w, const char *a, int wa, uint32_t est_a,
              const char *b, int wb, uint32_t est_b);

/* With the workers held, a flood of tenant flood (runs of est tokens)
 * holds the whole window, none of its runs completed; a small tenant's
 * first run, owned by another replica, is dispatched meanwhile, on the
 * shared reserve, where one proxy would make it wait for a completion
 * (docs/scaling.md, "The bound", point 4). Then the workers are released
 * and the flood served on. Returns the runs submitted. */
int sc_first_run(pf_fixture *f, const sc_world *w, const char *flood, uint32_t est,
                 const char *small);

#endif
