/* pullplan.h -- which pull consumers of one fetch thread ask the server for messages next, and for how many. */
#ifndef FQ_PULLPLAN_H
#define FQ_PULLPLAN_H

/*
 * Principles
 *
 * - One fetch thread serves many pull consumers (lib/natsio.c): it sends
 *   their pull requests and reads every delivery from one subscription.
 *   The decisions, who asks and for how many, live here, without I/O or
 *   clock, so that they can be driven in virtual time.
 * - A consumer has at most one request open. An idle one (its last request
 *   brought nothing) asks for one message and waits for it; a busy one
 *   asks for what is there now, up to a batch (natsio sends it no_wait:
 *   the server answers at once). The server answers each consumer's
 *   request on its own, as soon as a message is there: a quiet consumer's
 *   one-message request is open whatever the others do, so a flooded
 *   consumer cannot delay the quiet one's next delivery by more than what
 *   is already in the fetch thread's subscription (at most one batch per
 *   busy consumer).
 * - A consumer pulls no more while FQ_PULL_BACKLOG_BATCHES of its batches
 *   wait for the owner: what more it pulled would only wait in memory.
 * - Batches come out of a budget shared by all consumers (what their open
 *   requests may still bring plus what waits for the owner), so memory is
 *   bounded whatever the number of consumers. The budget is handed out in
 *   round robin from a cursor that moves past the last consumer served: a
 *   busy consumer that found the budget spent asks for one message
 *   meanwhile and is first in the next turn, so each busy consumer gets a
 *   batch within one cycle of the others. One-message requests are outside
 *   the budget (they cost a message each): no consumer that may pull is
 *   ever without a request open, so none waits for another's batch to
 *   expire before its next message is fetched (a batch request stays open
 *   until it is filled or expires: at a low rate, for its whole expiry).
 * - No allocation: the caller owns the arrays.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FQ_PULL_BACKLOG_BATCHES 2   /* a consumer pulls no more while this many of its batches
                                       wait for the owner */

/* One consumer as the planner sees it: the caller keeps it, the planner
 * and the functions below change it. */
typedef struct fq_pull_cons {
    bool ready;                 /* made, not paused: may pull (the caller's) */
    bool open;                  /* a request is outstanding */
    bool busy;                  /* its last request brought something: ask for a batch */
    uint32_t batch;             /* the most one request asks for, >= 1 (the caller's) */
    uint32_t queued;            /* its deliveries waiting for the owner (the caller's) */
    uint32_t asked;             /* what its open request may still bring */
    uint32_t granted;           /* what its open request asked for */
    uint32_t got;               /* what its open request brought so far */
    uint64_t retry_at;          /* it does not pull before this time (a pull failed) */
} fq_pull_cons;

/* A request to send: consumer index and how many messages it asks for. */
typedef struct fq_pull_req {
    uint32_t cons;
    uint32_t want;
} fq_pull_req;

/* Plan the requests to send at time now, at most cap, into out: for every
 * ready consumer without an open request, not behind and not waiting to
 * retry, in round robin from *cursor (advanced past the last batch
 * granted, or to the first busy consumer the budget left out, which asks
 * for one message instead). budget bounds the sum of queued and of what
 * open batch requests may bring, over all consumers. Each planned
 * consumer is marked open, asked = granted = want, got = 0.
 * Returns how many requests were planned. */
size_t fq_pull_plan(fq_pull_req *out, size_t cap, fq_pull_cons *c, size_t n, size_t *cursor,
                    uint64_t budget, uint64_t now);

/* A delivery of c's came: one less to come on its open request (a late
 * one, for a request already ended, changes only got). */
void fq_pull_took(fq_pull_cons *c);
/* Whether c's open request has brought all it asked for: it has ended. */
bool fq_pull_filled(const fq_pull_cons *c);
/* c's open request ended (filled, expired, or ended by the server): busy
 * if it brought anything. */
void fq_pull_ended(fq_pull_cons *c);
/* c's request could not be sent, or the server refused it: no request is
 * open and c pulls again from retry_at. */
void fq_pull_failed(fq_pull_cons *c, uint64_t retry_at);
/* c was (re)made or stopped: nothing is open; it starts busy, so that what
 * waits on a new consumer comes in batches at once. */
void fq_pull_reset(fq_pull_cons *c);

#endif
