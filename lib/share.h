/* share.h -- one fairness across replicas: each replica's share of the global in-flight window, from heartbeats. */
#ifndef FQ_SHARE_H
#define FQ_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/*
 * Every replica publishes a heartbeat at least every period (core NATS, no
 * store) saying what it holds and wants; from the heartbeats it has heard,
 * each computes its own share of the global window (runs and tokens), the
 * same arithmetic everywhere, so that the shares add up to the window when
 * the replicas have heard the same beats. docs/scaling.md derives the bound
 * this gives and states the overshoot the reserve allows.
 */

/* The longest replica id (printable ASCII without spaces, as run ids). */
#define FQ_SHARE_ID_MAX 64
/* The largest weight sum and token count a heartbeat may carry: far above
 * any deployment (10^6 tenants of weight 10^6 is 10^12), below 2^53 so that
 * JSON numbers carry them exactly. */
#define FQ_SHARE_MAX_VALUE 1000000000000000ull

/* One replica's heartbeat, as published and as heard. */
typedef struct fq_share_beat {
    char id[FQ_SHARE_ID_MAX + 1];   /* the replica's id */
    uint64_t weight;            /* sum of the weights of its tenants with queued runs */
    uint64_t queued_runs;       /* runs queued (what it wants beyond what it holds) */
    uint64_t queued_tokens;     /* ... their estimates */
    uint32_t runs;              /* runs in flight (holding a window slot) */
    uint64_t tokens;            /* ... their estimates */
    uint32_t borrowed_runs;     /* of those, held on the shared reserve */
    uint64_t borrowed_tokens;
} fq_share_beat;

typedef struct fq_share_opts {
    uint32_t max_runs;          /* the global window in runs; 0: unlimited (not split) */
    uint64_t max_tokens;        /* ... in tokens; 0: unlimited (not split) */
    uint32_t reserve_runs;      /* the shared reserve, over the window */
    uint64_t reserve_tokens;
    uint64_t period;            /* heartbeat period, in the caller's time unit; > 0 */
    uint64_t max_age;           /* a peer not heard for longer is silent, and so
                                   is this replica if it does not hear its own
                                   beat back; 0: 3 periods */
    uint64_t forget;            /* a silent peer is forgotten after this long
                                   unheard (not while this replica is silent
                                   itself); 0: 50 periods. Set it above the
                                   lease timeout, after which a dead replica's
                                   partitions have a new owner */
    uint32_t max_peers;         /* other replicas remembered; 0: 1024 */
    uint64_t min_gap;           /* an early beat (fq_share_due) comes at least
                                   this long after the last beat; 0: a quarter
                                   period. At most period / min_gap beats a
                                   period, whatever the tenants do */
} fq_share_opts;

/* What this replica holds and wants, now. */
typedef struct fq_share_local {
    uint64_t weight;            /* sum of the weights of its tenants with queued runs */
    uint64_t queued_runs;
    uint64_t queued_tokens;
    uint32_t runs;              /* in flight */
    uint64_t tokens;
    uint64_t round;             /* the heartbeat round: one number for every
                                   replica at one moment (wall-clock time /
                                   period), which moves which shares round up;
                                   0: by fraction, then id, always alike */
} fq_share_local;

/* This replica's window. FQ_SHARE_UNLIMITED where the global window is
 * unlimited in that dimension; 0: dispatch nothing now. */
#define FQ_SHARE_UNLIMITED UINT64_MAX
typedef struct fq_share_limits {
    uint64_t runs;
    uint64_t tokens;
    uint64_t share_runs;        /* its share before the room left by others and
                                   the reserve (the metric) */
    uint64_t share_tokens;
} fq_share_limits;

typedef struct fq_share_stats {
    uint32_t peers;             /* other replicas remembered */
    uint32_t live;              /* ... of them heard within max_age */
    bool deaf;                  /* this replica has not heard its own beat
                                   within max_age (or is starting): it takes
                                   an equal split (the reserve) at most */
    uint64_t beats;             /* heartbeats taken in (its own included) */
    uint64_t refused;           /* refused: no room for another peer */
    uint64_t forgotten;         /* silent peers forgotten */
} fq_share_stats;

typedef struct fq_share fq_share;

/* Create the state of replica id (fq_msg_name_valid, at most
 * FQ_SHARE_ID_MAX bytes) at time now. Until it has heard its own beat and
 * max_age has passed since now (every live peer has been heard by then),
 * its limits are the reserve (at least one run and one token): a replica
 * that starts knows nothing of the others yet. FQ_EINVAL on a bad id or a
 * period of 0; on error *out is NULL. */
fq_status fq_share_create(fq_share **out, const fq_share_opts *o, const char *id,
                          uint64_t now);
/* Safe on NULL. */
void fq_share_destroy(fq_share *s);

/* Change the window and the reserve (a reload); the next tick splits the
 * new one. */
void fq_share_set_window(fq_share *s, uint32_t max_runs, uint64_t max_tokens,
                         uint32_t reserve_runs, uint64_t reserve_tokens);

/* Take in a heartbeat heard at now (the caller has validated it: lib/msg's
 * fq_share_beat_parse). Its own beat tells the replica it is heard. A beat
 * replaces the peer's last. FQ_EFULL: a new peer and max_peers are known
 * (counted in refused; nothing changes). */
fq_status fq_share_heard(fq_share *s, const fq_share_beat *b, uint64_t now);

/* Compute this replica's limits at now from me and the beats heard, and the
 * beat to publish (out, beat: either may be NULL). Call it every period.
 *
 * The window (each dimension the same way) goes first to the replicas with
 * no queued runs, as much as they hold; the rest is water-filled over the
 * others by weight, each capped at what it holds plus what it has queued,
 * and what none of them can use is split by weight; the shares are rounded
 * so that they add up to the window: with a round, each down or up by
 * systematic rounding at an offset of that round (over the rounds, a share
 * of 7.5 runs is 7 half the time and 8 the other half, where a fixed rule
 * would give one replica the half run for good); without, down, and the
 * remainders to the largest fractions (ties by id). A replica's limit is its share, but no more
 * than the room the others leave (the window less what they hold outside
 * the reserve) plus what of the reserve they do not hold: the reserve lets
 * a replica whose share grew dispatch before the others have drained. A
 * replica with no queued runs keeps what it holds and may add the reserve
 * left free, so that a run queued before its next tick goes at once. A
 * replica that knows no other (and hears itself) has the whole window, as
 * one proxy without shares.
 * Silent peers count with their last beat until they are forgotten; a
 * replica that has not heard its own beat within max_age (cut off) takes
 * no more than an equal split of the window among the replicas it knows,
 * itself included, and forgets none of them meanwhile. */
void fq_share_tick(fq_share_limits *out, fq_share_beat *beat, fq_share *s,
                   const fq_share_local *me, uint64_t now);

/* Whether to publish a beat now, weight being the backlogged weight now
 * (fq_share_local's): the first beat, a period since the last beat
 * published (a tick given a beat), or, early, the weight differs from the
 * last beat's and min_gap has passed since it. A tenant becoming
 * backlogged or idle is told at once, not up to a period later; a tenant
 * flapping makes no more than one beat per min_gap. The caller that hears
 * a beat ticks at once (its beat NULL) to take it into its limits. */
bool fq_share_due(const fq_share *s, uint64_t weight, uint64_t now);

void fq_share_stats_get(fq_share_stats *out, const fq_share *s);

#endif
