/* strand.h -- whether a partition's submits are stranded in FAIR_SUBMIT, or its consumer refused too long. */
#ifndef FQ_STRAND_H
#define FQ_STRAND_H

/*
 * Principles
 *
 * - nats-server 2.9.10 was seen, after a node's kill and restart, to leave
 *   a partition's submits in its work-queue stream below the sequence its
 *   consumer said it had delivered and seen acked: never delivered, never
 *   dispatched, and no error anywhere (docs/operations.md). On a work
 *   queue an acked message is removed, so a submit stored at or below its
 *   consumer's ack floor is one that consumer will never deliver. That is
 *   the test, read cheaply: the partition's first stored submit (one
 *   STREAM.MSG.GET by subject) against its consumer's ack floor (the
 *   consumer info the backlog asks anyway), at a slow cadence.
 * - An ack is applied by the consumer before the stream removes the
 *   message, and the two answers are read at different moments: a submit
 *   acked just now may still be stored at the floor. So one sighting is
 *   only a suspicion; the same first sequence at or below the floor on
 *   FQ_STRAND_SIGHTINGS checks in a row is stranded.
 * - The remedy is the caller's: the submit stored again at the stream's
 *   end (above every floor), its stranded original deleted. Once one is
 *   found, the partition drains: each next submit stored at or below the
 *   floor the finding saw is stranded too, without waiting for a second
 *   sighting, so that a run of them (89 were seen) goes in a round trip
 *   each, not a check period each. A submit above that floor is the
 *   consumer's to deliver, never touched.
 * - A consumer made again (a reconnect, a new term) has a floor of its own
 *   and delivers from the first stored submit: what was seen of the old
 *   one is forgotten, so that a submit the new one delivers is never
 *   stored twice.
 * - A consumer the server refuses (a work queue's "filtered consumer not
 *   unique", seen for minutes after a node's restart) is timed from its
 *   first refusal to its creation: past a bound it is reported once.
 * - No I/O, no clock: times are the caller's monotonic ms.
 */

#include <stdbool.h>
#include <stdint.h>

/* Checks in a row that must see the same submit at or below the floor. */
#define FQ_STRAND_SIGHTINGS 2

/* One partition's state. Zeroed is fresh. */
typedef struct fq_strand {
    uint64_t seen_seq;          /* first stored submit at or below the floor last check; 0 none */
    uint32_t sightings;         /* checks in a row that saw seen_seq so */
    uint64_t drain_floor;       /* draining: the floor the finding saw; 0 not draining */
    int64_t refused_since_ms;   /* first refusal of its consumer since it was last made; 0 none */
    bool refused_reported;      /* the refusal has been reported past the bound */
} fq_strand;

/* What a check found. */
enum fq_strand_verdict {
    FQ_STRAND_NONE = 0,         /* nothing stored below the floor */
    FQ_STRAND_SUSPECT,          /* seen once: wait for the next check */
    FQ_STRAND_STRANDED,         /* *from is stranded: store it again, then check again at
                                   once (drain_floor set) */
};

/* A check of partition s: first_seq is the first stored submit of its
 * subject (0: none stored), ack_floor the stream sequence of its
 * consumer's ack floor (0: none read yet). On STRANDED *from is the
 * stranded submit's sequence. */
enum fq_strand_verdict fq_strand_check(uint64_t *from, fq_strand *s, uint64_t first_seq,
                                       uint64_t ack_floor);

/* The partition's consumer was made (made true: s's refusal ends, and
 * what was seen of the consumer before is forgotten) or refused at now_ms. True once, when a refusal has lasted past bound_ms:
 * the caller reports it. */
bool fq_strand_consumer(fq_strand *s, bool made, int64_t now_ms, int64_t bound_ms);

/* Whether s's consumer has been refused past bound_ms at now_ms. */
bool fq_strand_refused(const fq_strand *s, int64_t now_ms, int64_t bound_ms);

#endif
