/* lease.h -- an ownership key held by renewal: who leads, from which term, and whether it may still act. */
#ifndef FQ_LEASE_H
#define FQ_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/*
 * A lease is one key of a key-value bucket whose entries age out after
 * ttl_ms (the bucket's max age). The holder writes its id into the key
 * and rewrites it every renew_ms, each write compare-and-set on the
 * revision it wrote last; whoever finds the key absent, or "released",
 * takes it by writing it. The revision of that taking write is the
 * holder's term: it names the holder's consumers (lib/proxy.c), so a
 * newer term's consumers fence an older one's at the server.
 *
 * The module does no I/O and reads no clock (the style of lib/drr.c): the
 * caller asks fq_lease_tick what to do now, sends it (a get, a create,
 * an update expecting a revision) without waiting, and hands its answer
 * back when it comes, with the operation's number. One operation is
 * outstanding at a time, each with a deadline: answer_ms after it was
 * sent it has failed (as if the server had said so), and an answer that
 * comes after that, or that answers an operation since superseded, is
 * not believed (the numbers tell them apart). The deadline is the end of
 * the freshness the operation could give (ttl_ms - margin_ms after it
 * was sent): a renewal answered later proves nothing we could still act
 * on, so it is not waited for.
 *
 * Fresh, a pure function of now and the last write the server confirmed:
 * that write was SENT less than ttl_ms - margin_ms ago. The server stored
 * the key no earlier than it was sent, so it keeps it until at least
 * sent + ttl_ms by the server's clock, and nobody else can take it
 * before then; a confirmation that arrives late proves nothing about the
 * time between sending and confirming, so its send time is what counts.
 * The margin covers what separates our monotonic clock from the server's
 * expiry of the key: the rate drift of the two clocks over one ttl (well
 * under a millisecond at NTP's 500 ppm), the server's expiry running on
 * a timer, a small step of its wall clock, and the time between asking
 * fresh and the change it gates reaching the server (a publish queued in
 * this process, then written). 500 ms of a 3 s ttl is far above the
 * first three and about a turn of the loop under load for the last, but
 * only while the connection delivers: a write held in a partition (TCP
 * alive, nothing passing) or a frozen process's socket reaches the server
 * after any margin. Neither that nor a larger step of the server's clock
 * is covered by timing, which is why the changes that matter are fenced
 * by the server too (term-named consumers, the journal's expected last
 * sequence, dispatches by Nats-Msg-Id): timing keeps a stale holder from
 * acting, the server refuses it if it does. What is not fenced so is
 * listed in docs/protocol.md, section 7.
 */

#define FQ_LEASE_RELEASED "released"    /* the value a holder leaves at a graceful stop */
#define FQ_LEASE_TTL_DEFAULT_MS 3000    /* streams.lease_ttl_ms: a silent holder loses it after */
#define FQ_LEASE_TTL_MIN_MS 1000        /* ... its range: a margin of 166 ms at least */
#define FQ_LEASE_TTL_MAX_MS 60000       /* ... and a takeover within a minute at most */
#define FQ_LEASE_KEY_MAX 64
#define FQ_LEASE_ID_MAX 128

typedef struct fq_lease_opts {
    uint64_t ttl_ms;            /* the bucket's max age: an unrenewed key is gone after it */
    uint64_t margin_ms;         /* fresh ends this long before ttl_ms (see above) */
    uint64_t renew_ms;          /* a renewal is sent this long after the last was sent */
    uint64_t retry_ms;          /* a standby, or a failed read, tries again after this */
    uint64_t answer_ms;         /* an operation unanswered this long after it was sent has
                                   failed; 0: ttl_ms - margin_ms */
} fq_lease_opts;

enum fq_lease_state {
    FQ_LEASE_STANDBY = 0,       /* not holding it; reading the key to take it */
    FQ_LEASE_LEADING,           /* holding it from term */
    FQ_LEASE_LOST,              /* another holder took it, or we released it: stop */
};

/* What the caller performs now. */
enum fq_lease_op {
    FQ_LEASE_OP_NONE = 0,
    FQ_LEASE_OP_GET,            /* read the key: fq_lease_on_get */
    FQ_LEASE_OP_CREATE,         /* write our id only if the key holds no value, its last entry
                                   still expect (a delete marker's revision; 0: none at all) */
    FQ_LEASE_OP_UPDATE,         /* write value only if the key's revision is still expect */
};

typedef struct fq_lease_step {
    enum fq_lease_op op;
    uint64_t req;               /* the operation's number, handed back with its answer */
    uint64_t expect;            /* UPDATE: the revision the key must still have; CREATE: the
                                   revision of the delete marker it writes over, 0 if none */
    const char *value;          /* CREATE, UPDATE: what to write (our id, or released) */
    bool lead;                  /* we lead from now on, in a new term */
    uint64_t term;              /* with lead: the term (the key's revision) */
    bool lost;                  /* the lease is another's now: change nothing, stop */
} fq_lease_step;

typedef struct fq_lease {
    char key[FQ_LEASE_KEY_MAX + 1];     /* the ownership key ("leader", or a partition) */
    char id[FQ_LEASE_ID_MAX + 1];       /* our value in it */
    char holder[FQ_LEASE_ID_MAX + 1];   /* the holder last read; "" if none */
    fq_lease_opts o;
    enum fq_lease_state state;
    uint64_t term;              /* LEADING: the revision of the write that took it */
    uint64_t rev;               /* LEADING: the revision of our last confirmed write */
    uint64_t confirmed_sent;    /* monotonic ms our last confirmed write was sent; 0: none */
    enum fq_lease_op op;        /* the operation outstanding; NONE: none */
    uint64_t op_sent;           /* monotonic ms it was sent */
    uint64_t req;               /* its number (1, 2, ...: one per operation sent) */
    bool releasing;             /* the outstanding update writes released */
    bool taking;                /* the outstanding write takes the key (a new term) */
    bool recheck;               /* LEADING: a renewal was refused; read the key next */
    uint64_t next_at;           /* monotonic ms before which the next read waits */
} fq_lease;

/* The options of a lease of ttl_ms, the others in the ratios of the 3 s
 * lease they were measured for: a renewal every third of it (two may fail
 * before it is stale), fresh until a sixth of it before its end (500 ms),
 * a standby's read every sixth of it, an answer waited for until fresh
 * would end (2.5 s). */
void fq_lease_opts_for(fq_lease_opts *o, uint64_t ttl_ms);

/* Start as a standby for key (at most FQ_LEASE_KEY_MAX bytes) with our id
 * (at most FQ_LEASE_ID_MAX bytes, not FQ_LEASE_RELEASED). FQ_EINVAL when
 * they do not fit, or margin_ms >= ttl_ms, or renew_ms is 0. */
fq_status fq_lease_init(fq_lease *l, const char *key, const char *id, const fq_lease_opts *o);

/* What to do at now: a read while standing by (every retry_ms) or after a
 * refused renewal, a renewal every renew_ms while leading; NONE while an
 * operation is outstanding (fq_lease_expire first). An operation returned
 * is outstanding from now (its send time) until its answer is handed back
 * or its deadline passes. */
void fq_lease_tick(fq_lease_step *s, fq_lease *l, uint64_t now);

/* The operation outstanding has failed if answer_ms passed since it was
 * sent: it is over (a standby reads again after retry_ms, a renewal is
 * sent again), and its answer will not be believed. True if it was. */
bool fq_lease_expire(fq_lease *l, uint64_t now);

/* The answer to GET number req: st FQ_OK with the key's value and
 * revision, FQ_ENOTFOUND (absent or aged out; rev: the delete marker's
 * revision, 0 if none), or another status (the server did not answer).
 * *s: what to do now (a write, at now), or lost. Ignored (*s empty, false)
 * unless req is the operation outstanding and its deadline has not
 * passed. */
bool fq_lease_on_get(fq_lease_step *s, fq_lease *l, uint64_t req, uint64_t now, fq_status st,
                     const char *value, uint64_t rev);

/* The answer to CREATE or UPDATE number req: st FQ_OK with the revision
 * written, FQ_EEXIST (the key had a value or its revision had moved), or
 * another status (unknown whether it was written). *s: lead, in a new
 * term, when the write took the key. Ignored as fq_lease_on_get. */
bool fq_lease_on_write(fq_lease_step *s, fq_lease *l, uint64_t req, uint64_t now, fq_status st,
                       uint64_t rev);

/* At a graceful stop: an UPDATE that writes FQ_LEASE_RELEASED (NONE when
 * not leading or an operation is outstanding); from now on the lease is
 * LOST and never fresh. */
void fq_lease_release(fq_lease_step *s, fq_lease *l, uint64_t now);

/* Whether we lead and the last confirmed write was sent less than
 * ttl_ms - margin_ms before now. */
bool fq_lease_fresh(const fq_lease *l, uint64_t now);
/* The monotonic ms at which fresh ends (0 if not leading). */
uint64_t fq_lease_fresh_until(const fq_lease *l);
/* Ms since our last confirmed write was sent; 0 if none. */
uint64_t fq_lease_age(const fq_lease *l, uint64_t now);

#endif
