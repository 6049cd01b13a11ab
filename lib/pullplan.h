/* pullplan.h -- which pull consumers of one fetch thread ask the server for messages next, and for how many; what follows a consumer's create. */
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

/*
 * The steps of a consumer's make before its create: a listing of its
 * stream's consumers, the delete of an earlier term's and of its own
 * name's. Each is sent when the one before is answered (or its wait runs
 * out); before the step the answer calls for, it is decided here whether
 * the make goes on:
 * - Its owner changed what it wants since the make began (stopped it, a
 *   partition let go, or named it for a new term): no step more, and the
 *   new want is brought about at once.
 * - Past the process's fence (its lease not renewed in time: a replica
 *   frozen past it reads the answer as it resumes, in the turn that
 *   straddles the fence), no step more, as for a create: the term may be
 *   another replica's by now, and a delete of ours could delete the
 *   consumer the next owner has just made, or our create refuse it. The
 *   make starts again from its listing at the first turn once the fence
 *   is lifted: what was listed before it may have changed.
 * - Else the step the answer calls for is sent (or the make failed, and
 *   is tried again after the retry delay).
 */
typedef struct fq_pull_step {
    bool wanted;                /* its owner wants now what it makes (no change since) */
    bool fenced;                /* the process's fence has passed: no request goes out */
} fq_pull_step;

typedef enum fq_pull_step_next {
    FQ_PULL_STEP_ON,            /* the step its answer calls for is sent */
    FQ_PULL_STEP_STOPPED,       /* no step more: made again at once, for the new want */
    FQ_PULL_STEP_HELD,          /* no step more: made again from its start once the fence
                                   is lifted */
} fq_pull_step_next;

/* Whether the make of step s goes on. */
fq_pull_step_next fq_pull_step_decide(const fq_pull_step *s);

/*
 * A consumer's create. The fetch thread sends a consumer's create without
 * waiting for its answer (on a 3-node cluster it comes once the consumer's
 * group has elected a leader); what follows its answer, or its silence
 * for the API's wait, is decided here:
 * - Made: the consumer is pulled from then on, if its owner still wants
 *   what it was made for (else it is due again, for the new want).
 * - Unanswered while its owner still wants it: the same create is sent
 *   again, under the same request number, so that the first one's answer
 *   counts too if it comes yet. JetStream takes a create of a consumer it
 *   has, with the same config, as an update that changes nothing
 *   (nats-server 2.9.10: jsClusteredConsumerRequest, addConsumerWithAssignment)
 *   and answers it, at once if the group has no leader yet. Deleted and
 *   made again instead, a consumer whose group lost its first vote (elected
 *   at the next election, 4 to 9 s on) started over with a new group, which
 *   could lose its first vote too.
 * - Refused as overlapping another consumer (JetStream's 10100) while no
 *   later term's was listed, and not yet after a stale copy was cleared:
 *   a node's stale copy of one of ours is cleared and the create sent once
 *   more (lib/natsio.c, nio_adopt_stale), only if the owner still wants
 *   that term: a partition lost meanwhile is the next owner's to make.
 * - Failed otherwise: made afresh after the retry delay, or at once when
 *   its owner changed what it wants meanwhile (that failure was of a want
 *   no longer asked, and says nothing of the new one).
 * - Past the process's fence (its lease not renewed in time, as a replica
 *   frozen past it finds when it resumes), no request goes out: the term
 *   may be another replica's by now, whose owner may just have deleted
 *   our consumer; made again by a create of ours, it would refuse the new
 *   owner's. Unanswered, the create is held until the fence is lifted,
 *   then looked at again; refused as overlapping, no stale copy is
 *   cleared (that makes and deletes consumers).
 */
#define FQ_PULL_WQ_NOT_UNIQUE 10100    /* JetStream's err_code: the filter overlaps another
                                          consumer's on a work-queue stream */

/* What the fetch thread knows of a create when its answer comes, or its
 * wait runs out. */
typedef struct fq_pull_create {
    bool answered;              /* an answer came; false: none within the API's wait */
    bool ok;                    /* the answer says made */
    int err_code;               /* its JetStream err_code when not, 0 if none */
    bool newer;                 /* a later term's consumer was listed when it was sent */
    bool unstaled;              /* it was sent again after a stale copy was cleared */
    bool wanted;                /* its owner wants now what it makes (no change since) */
    bool fenced;                /* the process's fence has passed: no request goes out */
} fq_pull_create;

typedef enum fq_pull_create_step {
    FQ_PULL_CREATE_MADE,        /* live */
    FQ_PULL_CREATE_AGAIN,       /* sent again as it was, under the same number */
    FQ_PULL_CREATE_UNSTALE,     /* a stale copy cleared, then sent once more */
    FQ_PULL_CREATE_FAILED,      /* made afresh from *retry_at */
    FQ_PULL_CREATE_HELD,        /* unanswered past the fence: looked at again once lifted */
} fq_pull_create_step;

/* What follows create c at time now; *retry_at (FAILED): when the
 * consumer is made afresh, 0 for at once, else now + retry_ms. */
fq_pull_create_step fq_pull_create_next(uint64_t *retry_at, const fq_pull_create *c,
                                        uint64_t now, uint64_t retry_ms);

/*
 * The names a node's stale copy may have. A restarted nats-server node can
 * keep a copy of a consumer deleted while it recovered, and refuse every
 * consumer on its filter (10100) until that consumer is made again under
 * its name and deleted (lib/natsio.c, nio_adopt_stale). Whoever deleted it
 * may not be the one refused: a replica that lost a partition and took it
 * again deletes its own earlier term's consumer, and the partition's next
 * owner deletes only the last. So each consumer is made with the names of
 * its durable's earlier terms its maker deleted, or learnt so, in its
 * description, and whoever deletes it reads them first: the names pass
 * from owner to owner with the consumers. A delete sent counts as done
 * whether or not its answer comes: one left unanswered may have been done
 * on the server. A name kept that was never deleted costs a refused
 * create at most. Pure, no allocation.
 */
#define FQ_PULL_GONE 8              /* names of earlier terms a consumer keeps: the latest terms' */
#define FQ_PULL_NAME_CAP 128        /* a consumer's name, NUL included */

typedef struct fq_pull_gone {
    char name[FQ_PULL_GONE][FQ_PULL_NAME_CAP];  /* by term, latest first; "" past the last */
    uint64_t term[FQ_PULL_GONE];                /* each one's term */
} fq_pull_gone;

/* Whether name is durable's, of some term: durable (*term 0), or
 * durable-<digits> (*term those digits). */
bool fq_pull_term_name(const char *name, const char *durable, uint64_t *term);
/* name, durable's, was deleted (or its delete sent): kept once, in the
 * order of terms (terms are a lease key's revisions: later ones are
 * larger), so that the FQ_PULL_GONE latest terms' names are kept; a name
 * not durable's is not. */
void fq_pull_gone_note(fq_pull_gone *g, const char *durable, const char *name);
/* The names in text[0..len) (a description written by fq_pull_gone_describe,
 * as read back from the server: untrusted) that are durable's, of a term
 * before term, are noted; anything else is skipped. Returns how many were
 * taken. */
size_t fq_pull_gone_take(fq_pull_gone *g, const char *durable, uint64_t term, const char *text,
                         size_t len);
/* The index, from i on, of g's next name that is durable's, of a term
 * before term (*t: that term), or -1. A consumer id may serve another
 * durable later (a partition's pair of ids is taken and freed as
 * partitions come and go): its names of the durable it served before
 * are never the new one's. */
int fq_pull_gone_next(const fq_pull_gone *g, int i, const char *durable, uint64_t term,
                      uint64_t *t);
/* g's names of durable's terms before term, latest first, separated by
 * spaces, into out (cap >= 1; those that fit): a consumer's description.
 * Returns its length. */
size_t fq_pull_gone_describe(char *out, size_t cap, const fq_pull_gone *g, const char *durable,
                             uint64_t term);

#endif
