/* leader.h -- the leader lease's I/O: lib/lease.c decides, this does what it asks through natsio and says what follows. */
#ifndef FQ_LEADER_H
#define FQ_LEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "lease.h"
#include "natsio.h"
#include "probes.h"

/*
 * The proxy leads while it holds one key of the lease bucket (lib/lease.h
 * says how). This module owns that lease and performs its steps: reads
 * and the writes that follow them wait for the server, a renewal does not
 * (its PubAck comes back to fq_leader_on_puback). After each step it sets
 * natsio's fence (the consumers are left alone from the end of freshness
 * on) and what the probes say of the lease. A new term (the key aged out
 * and was taken back) is handed to the caller, whose consumers carry it.
 */

typedef struct fq_leader fq_leader;

typedef struct fq_leader_opts {
    const char *bucket;         /* the lease bucket (copied) */
    const char *id;             /* our value in the key (at most FQ_LEASE_ID_MAX bytes) */
    uint64_t ttl_ms;            /* the bucket's: a silent holder loses the lease after it */
    uint64_t renew_token;       /* the PubAck token of a renewal */
    uint64_t release_token;     /* ... of the release at a stop */
    /* We lead from term (the first time, or again after the key aged out). */
    void (*lead)(void *arg, uint64_t term);
    void *arg;
} fq_leader_opts;

/* nio and probes are the caller's and outlive it. FQ_EINVAL: the id is
 * too long. */
fq_status fq_leader_create(fq_leader **out, fq_nio *nio, fq_probes *probes,
                           const fq_leader_opts *o);
/* Safe on NULL. */
void fq_leader_destroy(fq_leader *l);

/* The lease as it stands (state, term, holder, op under way). */
const fq_lease *fq_leader_lease(const fq_leader *l);
/* Fresh at now: leading, not fenced, its last confirmed write recent. */
bool fq_leader_fresh(const fq_leader *l, uint64_t now);
/* Another proxy wrote what only the leader writes (the journal): not
 * fresh from now on, whatever the lease says; natsio and the probes are
 * told at the next step (the caller's loop renews right after). */
void fq_leader_fence(fq_leader *l);

/* Whatever the lease asks at now, waited for (taking it, a renewal while
 * reading the journal back). */
void fq_leader_step(fq_leader *l, uint64_t now);
/* Renew when due at now, without waiting (only when connected). Logs once
 * when it stops being fresh, and when it is again. False once lost. */
bool fq_leader_renew(fq_leader *l, uint64_t now, bool connected);
/* A PubAck of renew_token or release_token (ev->msg is dropped). */
void fq_leader_on_puback(fq_leader *l, const fq_nio_event *ev);
/* Hand the lease back at a stop, so that a standby takes over at once:
 * true while its PubAck is awaited (fq_leader_releasing). */
bool fq_leader_release(fq_leader *l);
bool fq_leader_releasing(const fq_leader *l);

#endif
