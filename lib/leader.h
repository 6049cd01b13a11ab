/* leader.h -- the ownership keys' I/O: lib/owner.c decides (the leader key, or a deployment's partitions), this does what it asks through natsio and says what follows. */
#ifndef FQ_LEADER_H
#define FQ_LEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "lease.h"
#include "natsio.h"
#include "owner.h"
#include "probes.h"

/*
 * A proxy holds keys of the lease bucket (lib/owner.h says which and
 * how): with P = 1 the one key "leader", as it always did; with P > 1 a
 * registry key, the keys of the partitions assigned to it and, for one
 * replica, the deployment-wide "leader" key. This module owns that state
 * machine and performs its actions, none waited for: every read and write
 * is sent through natsio, and its answer comes back as an event
 * (fq_leader_on_answer), so that a slow key costs the caller's loop, and
 * the partitions it dispatches, nothing. With P > 1 it watches the bucket
 * (the caller hands the watch's events to fq_leader_on_kv). After each
 * step it sets natsio's fence (the consumers are left alone from the end
 * of freshness on: with P = 1 the process's; with P > 1 each partition's
 * own, through the caller's fence callback, so that one partition's late
 * renewal stops no other) and what the probes say of the lease. A partition
 * taken (or a new term of the leader key) and a partition given up are
 * handed to the caller, whose consumers carry the term.
 */

typedef struct fq_leader fq_leader;

typedef struct fq_leader_opts {
    const char *bucket;         /* the lease bucket (copied) */
    const char *id;             /* our value in the keys (fq_owner_id_valid) */
    const char *instance;       /* this process's tag in r.<id> (fq_owner_create); NULL: none */
    uint32_t partitions;        /* P; 0 is 1 */
    uint32_t bound;             /* partitions we own at most (fq_owner_bound); 0: none */
    uint64_t ttl_ms;            /* the bucket's: a silent holder loses a key after it */
    uint64_t renew_token;       /* the keys' requests' tokens: renew_token and up, 59 bits
                                   (fq_leader_on_answer's) */
    int watch;                  /* P > 1: the natsio watch id for the bucket */
    /* part is ours from term (P = 1: part 0, the leader key; again: ours
     * already, its key aged out and taken back in a new term). */
    void (*gained)(void *arg, int32_t part, uint64_t term, bool again);
    /* part is not ours any more (P > 1 only; with P = 1 the lease says
     * LOST). planned: a move; settle it, then fq_leader_handoff. */
    void (*lost)(void *arg, int32_t part, bool planned);
    /* P > 1: partition part's fence moved to until (monotonic ms,
     * fq_owner_fresh_until: its lease is fresh before it; 0: not ours):
     * what its consumers (fq_nio_fence_consumer) and the ledger need. Said
     * for every partition at the first step, then at each change. NULL:
     * none told. */
    void (*fence)(void *arg, int32_t part, uint64_t until);
    void *arg;
} fq_leader_opts;

/* nio and probes are the caller's and outlive it. FQ_EINVAL: the id does
 * not fit, or P is out of range. */
fq_status fq_leader_create(fq_leader **out, fq_nio *nio, fq_probes *probes,
                           const fq_leader_opts *o);
/* Safe on NULL. */
void fq_leader_destroy(fq_leader *l);

/* The leader key's lease as it stands (state, term, holder, op under
 * way): with P = 1 the proxy's, with P > 1 the deployment-wide duties'. */
const fq_lease *fq_leader_lease(const fq_leader *l);
/* The state machine, for its views and counters. */
const fq_owner *fq_leader_owner(const fq_leader *l);
/* Fresh at now: the leader key held, not fenced, its last confirmed
 * write recent. */
bool fq_leader_fresh(const fq_leader *l, uint64_t now);
/* The same for partition part (P = 1: part 0 is the leader key): what
 * its journal batches need. */
bool fq_leader_part_fresh(const fq_leader *l, int32_t part, uint64_t now);
/* P > 1: not fenced and every partition key we hold fresh (true when we
 * hold none): what /readyz says. */
bool fq_leader_parts_fresh(const fq_leader *l, uint64_t now);
/* Another proxy wrote what only the leader writes (the journal): not
 * fresh from now on, whatever the lease says; natsio, the probes and the
 * fence callback are told now. */
void fq_leader_fence(fq_leader *l);

/* The answers that came for the keys (fq_nio_kv_poll: no other event),
 * then whatever the keys ask at now, sent: for a caller that handles no
 * other event meanwhile (standing by, or starting). */
void fq_leader_step(fq_leader *l, uint64_t now);
/* Whatever the keys ask at now, sent (only when connected). Logs once
 * when the leader key stops being fresh, and when it is again. False once
 * the leader key is lost (P = 1). */
bool fq_leader_renew(fq_leader *l, uint64_t now, bool connected);
/* An FQ_NIO_EV_KV_ANSWER of one of our tokens (its kv is freed). */
void fq_leader_on_answer(fq_leader *l, const fq_nio_event *ev);
/* An event of the bucket's watch (FQ_NIO_EV_KV, whose entry is freed, or
 * FQ_NIO_EV_KV_SYNCED). */
void fq_leader_on_kv(fq_leader *l, const fq_nio_event *ev);
/* The caller settled part after a planned loss, or let it go on its own
 * while its key is ours (its journal fenced): its key is released
 * (fq_owner_handoff). */
void fq_leader_handoff(fq_leader *l, int32_t part);
/* Hand every key back at a stop, so that others take over at once: true
 * while their PubAcks are awaited (fq_leader_releasing). */
bool fq_leader_release(fq_leader *l);
bool fq_leader_releasing(const fq_leader *l);

#endif
