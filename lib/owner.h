/* owner.h -- which partitions this replica owns: a registry of live replicas, a lease per partition, balanced assignment, planned moves one at a time. */
#ifndef FQ_OWNER_H
#define FQ_OWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "lease.h"

/*
 * Several fairq-proxy replicas share a deployment's P partitions
 * (docs/partitions.md). Every key lives in the lease bucket, whose max age
 * is streams.lease_ttl_ms (on nats-server 2.9.10 every key of a bucket
 * shares it, so one TTL serves them all):
 *
 *   r.<id>   the registry: one key per live replica, its value
 *            <id>@<instance> (a tag drawn at each process start), held
 *            and renewed as a lib/lease.c lease (a renewal every ttl/3,
 *            1 s of the default 3 s); a replica whose key has not been
 *            seen renewed for ttl_ms is dead to the others, and one that
 *            wrote "released" (a graceful stop) is gone at once. The
 *            instance tells two processes given one id apart: a replica
 *            registers only once r.<id> is free, released or its own, so
 *            a restart waits out a dead predecessor's key (a TTL at most),
 *            and one that finds the key renewed by another instance a TTL
 *            after it first read it says so (fq_owner_duplicate) and never
 *            registers; one whose key another instance took (it was frozen
 *            past the TTL) lets every partition go. Without this both
 *            would take the partition keys, which hold the id alone, as
 *            their own.
 *   p.<k>    the ownership key of partition k (0 <= k < P): a lib/lease.c
 *            lease, compare-and-set, renewed every ttl/3, released on a
 *            stop, taken over when its owner stops renewing it. The
 *            revision that took it is the owner's term, which names the
 *            partition's consumers.
 *   leader   the deployment-wide duties, held by one replica at a time:
 *            the admin and explain requests, and anything else that must
 *            happen once per deployment rather than once per partition.
 *            With P = 1 it is also partition 0's key, so a P = 1
 *            deployment is exactly today's leader and standby: no
 *            registry, no moves, the first to take the key keeps it, and
 *            a holder that finds another's id in it has lost it for good
 *            (its lease stays FQ_LEASE_LOST: the proxy stops). Its value
 *            is <id>@<instance>, as r.<id>'s, so that a second process
 *            given the leader's id stands by instead of reading the key
 *            as its own, and says so (fq_owner_duplicate) once it saw the
 *            key renewed by that instance a TTL after it first read it; a
 *            restart under the id waits out a dead predecessor's key (a
 *            TTL at most) unless it was released.
 *
 * Assignment: every replica computes, from the same registry, the same
 * balanced assignment of partitions to live replicas: each replica gets
 * floor(P/n) or ceil(P/n) partitions (the ceil going to those whose id
 * hashes lowest), and within those capacities each partition goes to the
 * replica that scores it highest (rendezvous hashing: a keyed hash of the
 * id and k), taken in order of score over all pairs, so a replica that
 * joins or leaves moves few partitions. A replica only tries to take the
 * partitions assigned to it, and only once the key is free in its view
 * (released, or not seen renewed for ttl_ms) or ttl_ms since it last
 * looked; safety never rests on the views agreeing, only on the keys'
 * compare-and-set.
 *
 * Moves. A partition whose owner is alive but is not its assigned
 * replica (one joined, say) is moved on purpose, one at a time across the
 * deployment: only the lowest-numbered misplaced partition moves, and
 * only while no other is between owners (a released key not yet taken is
 * misplaced too, and lower ones first), so each step pauses one
 * partition, and the others go on dispatching. Its owner says LOST with
 * planned set, the caller settles the partition (gives back what it holds
 * for it) and calls fq_owner_handoff; the key is then written "released",
 * and the assigned replica, which sees that in its view, takes it at
 * once. The partitions of a replica that died are free as soon as their
 * keys age out, and every survivor takes those assigned to it at once.
 *
 * The bound (fq_owner_bound): a replica holds at most that many
 * partitions (its consumers, two a partition, are what natsio limits).
 * The assignment gives none more; with P above n times the bound the
 * partitions left over go to none and stay unowned (counted:
 * fq_owner_stats.unassigned) until a replica joins. A replica that holds
 * its bound takes nothing, even a partition assigned to it, until one it
 * holds moved. With P above n times the bound every replica ends at its
 * bound, so nothing moves to a full replica: a replica keeps what it
 * holds, even partitions assigned to none, and one that joins takes the
 * free partitions assigned to it at once and the others' one at a time,
 * until it is full.
 *
 * No I/O and no clock, as lib/lease.c: the caller performs the actions
 * (key reads and writes), hands each outcome back with the slot it
 * concerns, feeds in what a watch of the bucket delivers
 * (fq_owner_on_key), and drains the actions after every call.
 */

#define FQ_OWNER_ID_MAX 48              /* a replica id: 1 to this many bytes (r.<id> is a key) */
#define FQ_OWNER_REPLICAS_MAX 256       /* replicas a registry view keeps */
#define FQ_OWNER_DUTY (-1)              /* GAINED, LOST: the deployment-wide key */
#define FQ_OWNER_REGISTRY (-2)          /* an action on our registry key */
#define FQ_OWNER_KEY_DUTY "leader"

enum fq_owner_kind {
    FQ_OWNER_GET = 1,           /* read key: fq_owner_on_get */
    FQ_OWNER_CREATE,            /* write value only if the key holds none: fq_owner_on_write */
    FQ_OWNER_UPDATE,            /* write value only if key's revision is still expect: on_write */
    FQ_OWNER_GAINED,            /* part is ours from term on: adopt it */
    FQ_OWNER_LOST,              /* part is not ours any more: stop acting on it */
};

typedef struct fq_owner_act {
    enum fq_owner_kind kind;
    uint32_t slot;              /* the key's slot, handed back with the outcome */
    uint64_t req;               /* GET, CREATE, UPDATE: its number, handed back too */
    int32_t part;               /* 0..P-1, FQ_OWNER_DUTY or FQ_OWNER_REGISTRY */
    const char *key;            /* GET, CREATE, UPDATE: the key (valid until the next call) */
    const char *value;          /* CREATE, UPDATE: what to write */
    uint64_t expect;            /* UPDATE: the revision the key must still have; CREATE: the
                                   delete marker's it writes over, 0: the key has no entry */
    uint64_t term;              /* GAINED: the revision that took the key */
    bool renewal;               /* UPDATE: a renewal of a key we hold */
    bool planned;               /* LOST: on purpose (a move, a stop): settle, then handoff */
    bool again;                 /* GAINED: ours already; its key aged out and was taken back */
} fq_owner_act;

typedef struct fq_owner_stats {
    uint32_t owned;             /* partitions we hold now */
    uint32_t live;              /* replicas alive in our view (us included once registered) */
    uint32_t assigned;          /* partitions the assignment gives us */
    uint32_t bound;             /* partitions we hold at most (fq_owner_bound) */
    uint32_t unassigned;        /* partitions the assignment gives to none: P above what
                                   the live replicas may hold (their bound each), unowned
                                   until one joins; 0 before the first assignment */
    uint64_t gained;            /* partitions taken, since start */
    uint64_t lost;              /* partitions given up or lost, since start */
    uint64_t moves;             /* of those, handed over on purpose */
    uint64_t renewals;          /* renewals confirmed */
    uint64_t renew_ms_last;     /* the last confirmed renewal's round trip */
    uint64_t renew_ms_max;      /* the longest since start */
    uint64_t renew_ms_sum;      /* their sum (a mean with renewals) */
    uint64_t refused;           /* keys and values the watch delivered that fairq never
                                   writes, ignored: a key not of this deployment (a
                                   partition past P, a registry id not valid, another
                                   name), a holder that is not a replica id */
} fq_owner_stats;

typedef struct fq_owner fq_owner;

/* Whether id can be a replica id: 1 to FQ_OWNER_ID_MAX bytes of letters,
 * digits, '-' and '_' (it is part of a key), not "released". */
bool fq_owner_id_valid(const char *id);

/* A replica id for a process that was given none: host (its characters
 * outside fq_owner_id_valid's made '-', at most 20 of them), pid and the
 * start time in base 36, e.g. "worker-3-4121-mj1z8k0q". Into out, at least
 * FQ_OWNER_ID_MAX + 1 bytes; always valid. */
void fq_owner_id_make(char *out, const char *host, long pid, int64_t unix_ms);

/* partitions P (1..FQ_PARTITIONS_MAX), our id (fq_owner_id_valid), this
 * process's instance tag (fq_owner_id_valid; NULL or "": none, r.<id>
 * then holds the id alone), the bucket's ttl_ms. FQ_EINVAL when out of
 * range, FQ_ENOMEM. */
fq_status fq_owner_create(fq_owner **out, uint32_t partitions, const char *id,
                          const char *instance, uint64_t ttl_ms);
/* Safe on NULL. */
void fq_owner_destroy(fq_owner *o);
/* Hold at most max partitions (0 or P and above: no bound, the default):
 * the assignment gives none more, and a replica at its bound takes none
 * until one it holds moved. Every replica of a deployment should have the
 * same (the assignment is computed from it); one that differs costs
 * refused writes, never two owners. */
void fq_owner_bound(fq_owner *o, uint32_t max);

/* What to do at now: registration, renewals, reads of keys assigned to us
 * and free, a planned move, losses of keys stale past ttl_ms, releases at
 * a stop. Then drain with fq_owner_next. */
void fq_owner_tick(fq_owner *o, uint64_t now);
/* The next action; false when none. Drain after every call. The caller
 * sends each GET, CREATE and UPDATE without waiting for its answer. */
bool fq_owner_next(fq_owner_act *a, fq_owner *o);

/* The answer to GET number req of slot: FQ_OK with value and rev,
 * FQ_ENOTFOUND (rev: the delete marker's revision, 0 if none), or another
 * status (no answer, or not sent). An answer to an operation given up on
 * (its deadline passed: lib/lease.h) or superseded is ignored. */
void fq_owner_on_get(fq_owner *o, uint32_t slot, uint64_t req, uint64_t now, fq_status st,
                     const char *value, uint64_t rev);
/* The answer to CREATE or UPDATE number req of slot: FQ_OK with its
 * revision, FQ_EEXIST (the key held a value, or its revision moved), or
 * another status (no answer, or not sent), as for fq_owner_on_get. */
void fq_owner_on_write(fq_owner *o, uint32_t slot, uint64_t req, uint64_t now, fq_status st,
                       uint64_t rev);

/* A key's value as a watch of the bucket delivered it at now, written
 * age_ms before (the server's time of the write against our wall clock,
 * 0 when not known): value NULL or "" for a delete or purge. The age
 * matters for what a watch delivers when it starts: a dead replica's key
 * written 2.9 s ago is dead in 0.1 s, not in a TTL. A wrong age costs a
 * refused write or a late takeover, never two owners. Keys not ours to
 * read are ignored, and counted (fq_owner_stats.refused), as is a
 * partition's holder that is not a replica id (kept in the view as a
 * holder, so the key is not taken before it ages out; never named as
 * one: fq_owner_holder). */
void fq_owner_on_key(fq_owner *o, uint64_t now, const char *key, const char *value,
                     uint64_t age_ms);
/* The watch has delivered every key once: from now on the views count,
 * and partitions are assigned and taken. (P = 1 needs no watch.) */
void fq_owner_synced(fq_owner *o);

/* The caller settled partition part after a planned LOST, or let it go
 * on its own while we hold it (its journal fenced: another wrote it, or
 * our own batch was stored twice): its key is released at the next tick,
 * so that whoever it is assigned to takes it in a new term, us included.
 * In the second case LOST, planned, is said first (the caller's view of
 * what it holds stays the owner's), and handing it off again is harmless. */
void fq_owner_handoff(fq_owner *o, int32_t part);
/* A graceful stop: every partition owned is LOST with planned set (hand
 * each off), the duty key released, the registry key released once every
 * partition's key is; nothing is taken from now on. */
void fq_owner_stop(fq_owner *o, uint64_t now);
/* Stopping and every release answered (or nothing held). */
bool fq_owner_stopped(const fq_owner *o);

/* Whether we hold part (0..P-1, or FQ_OWNER_DUTY) and its lease is fresh
 * at now (lib/lease.h): what gates every change to it. */
bool fq_owner_fresh(const fq_owner *o, int32_t part, uint64_t now);
/* Until when (monotonic ms, excluded) part is fresh as things stand: its
 * lease's fq_lease_fresh_until while we hold it and it is not dropped
 * (lost, stale past ttl_ms, or our registry key another instance's); 0
 * when not. Each partition's own: another's late renewal moves it not.
 * Its fence (lib/leader.c), which changes only with a call into this
 * module. */
uint64_t fq_owner_fresh_until(const fq_owner *o, int32_t part);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The term we hold part from; 0 when not held. */
uint64_t fq_owner_term(const fq_owner *o, int32_t part);
/* The replica the assignment gives part to, in our view ("" before it is
 * computed). */
const char *fq_owner_assigned(const fq_owner *o, int32_t part);
#endif
/* The replica holding partition part at now in our view: our id while we
 * hold it, "" when free or not known (a view lags a handover by a watch's
 * delivery: the admin plane forwards a tenant's requests by it). */
const char *fq_owner_holder(const fq_owner *o, int32_t part, uint64_t now);
/* The lease of part (state, holder last read), or NULL. */
const fq_lease *fq_owner_lease(const fq_owner *o, int32_t part);
/* The value of r.<id> (P = 1: of the leader key), <id>@<instance>, of
 * another live process with our id, which kept renewing it for a TTL
 * after we first read it; NULL while none is known. We never register
 * (P = 1: take the key) meanwhile: the caller stops, since the deployment
 * has two replicas with one id. */
const char *fq_owner_duplicate(const fq_owner *o);
/* The i-th replica alive in our view (ids sorted, ours among them once
 * registered), or NULL past the last; with P = 1 (no registry) our id
 * alone. Valid until the next tick. */
const char *fq_owner_live_at(const fq_owner *o, size_t i);
void fq_owner_stats_get(fq_owner_stats *s, const fq_owner *o);

#endif
