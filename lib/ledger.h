/* ledger.h -- the run ledger: everything fairq decides about runs, as a state machine without I/O. */
#ifndef FQ_LEDGER_H
#define FQ_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "drr.h"
#include "estimate.h"
#include "fq.h"
#include "journal.h"
#include "msg.h"
#include "policy.h"

/*
 * The ledger holds every run fairq has taken from FAIR_SUBMIT and not yet
 * let go: queued (by submit stream sequence, its body kept or to be read
 * back), dispatched (in flight or expired, by run key until its completion
 * or until it is forgotten), and the run keys completed within the
 * duplicate window. It decides admission (admit, refuse with a code and a
 * sentence, a duplicate), dispatch, what a PubAck settles, what a
 * completion reconciles, when a lease has run out, each tenant's debt as
 * journalled state, and the rebuild from the journal at start or takeover.
 * docs/protocol.md section 8 states the guarantees it keeps:
 *
 *  - a submit is acked only once what it became is stored: its dispatch
 *    and its flight record (two PubAcks), or its refusal (one for the
 *    state of the moment after its refused record, which a redelivery
 *    then repeats instead of deciding anew);
 *  - a completion reconciles its run's charge at most once, late or not,
 *    across restarts (the journal's done records);
 *  - a tenant's debt survives a restart as its last debt record.
 *
 * It does no I/O and reads no clock. Its inputs are the functions below,
 * each given the time (monotonic ms for leases, parking and retries; unix
 * ms for what is journalled or compared with JetStream's timestamps). Its
 * outputs are actions appended to a list the caller drains with
 * fq_ledger_next and performs in order: publish a dispatch, a refusal or a
 * journal batch, ack or nak a delivery, pause a consumer, read a body back,
 * and notes to log. Every pointer an action holds stays valid until the
 * next call into the ledger other than fq_ledger_next: drain the list
 * after each input, before the next.
 *
 * Publishes carry a token the caller hands back with their outcome
 * (fq_ledger_puback). The ledger's tokens have kinds 1 to 4 in their top
 * four bits (fq_ledger_token_ours); a caller's own publishes use kinds 5 to
 * 15 (FQ_LEDGER_TOKEN).
 *
 * Tenants are the caller's: it embeds an fq_ledger_tenant in its own
 * tenant record, creates the scheduler's tenant, and hands it over through
 * the tenant callback of the options; the ledger keeps per tenant only
 * what it decides (debt record, dispatch failures in a row, runs keyed).
 *
 * Not thread-safe: one owner, the proxy's loop (or a simulation).
 */

typedef struct fq_ledger fq_ledger;

/* The two consumers a delivery comes from and is acked on. */
enum fq_ledger_cons {
    FQ_LEDGER_SUBMIT = 0,       /* FAIR_SUBMIT: runs */
    FQ_LEDGER_DONE = 1,         /* FAIR_DONE: completions */
};

/* A delivery as acks need it: the ledger copies it into its actions. */
typedef struct fq_ledger_ackref {
    uint64_t sseq;              /* stream sequence */
    uint64_t cseq;              /* consumer sequence of this delivery (naks need it) */
    uint32_t delivered;         /* delivery count, >= 1 */
    uint32_t part;              /* the partition whose consumer delivered it, and is
                                   acked or naked (0 with one partition) */
} fq_ledger_ackref;

/* A message's bytes as they came: the producer's raw NATS header block
 * ("NATS/1.0\r\n...\r\n\r\n", or none) and the body. */
typedef struct fq_ledger_bytes {
    const void *hdr;
    size_t hdr_len;             /* 0: no headers */
    const void *body;
    size_t body_len;
} fq_ledger_bytes;

/* A header fairq sets on a dispatch. */
typedef struct fq_ledger_hdr {
    const char *name, *value;
} fq_ledger_hdr;

#define FQ_LEDGER_DISPATCH_HDRS 9

/* The headers fairq sets on a dispatch, and the text of their values:
 * Nats-Msg-Id (tenant/run_id, first, since JetStream reads a header where
 * its name first occurs and a producer's value may hold the text),
 * Fair-Tenant, Fair-Run-Id, Fair-Est-Tokens, Fair-Submitted-At,
 * Fair-Dispatched-At, Fair-Workflow unless workflow is "", and
 * Fair-Subtenant unless subtenant is "" (the producer's claim, validated,
 * from its header or its body, so that workers find it in one place), and
 * Fair-Possible-Duplicate: true when possible_dup (a run JetStream may
 * store twice: see the action's possible_dup). */
typedef struct fq_ledger_dhdrs {
    char est[FQ_U64_DEC_MAX], sat[FQ_U64_DEC_MAX], dat[FQ_U64_DEC_MAX];
    char msgid[FQ_TENANT_MAX + FQ_RUN_ID_MAX + 2];
    fq_ledger_hdr h[FQ_LEDGER_DISPATCH_HDRS];
    size_t n;
} fq_ledger_dhdrs;

/* Fill d for run run_id of tenant. Admission sizes a dispatch with
 * UINT64_MAX for the numbers it cannot know yet, and possible_dup true (a
 * dispatch sent again may carry that header); the ledger's dispatch
 * actions carry the real ones. */
void fq_ledger_dispatch_hdrs(fq_ledger_dhdrs *d, const char *tenant, const char *run_id,
                             const char *workflow, const char *subtenant, uint64_t est,
                             uint64_t submitted_ms, uint64_t dispatched_ms, bool possible_dup);

/* The run id submit seq goes by: the producer's (sub->run_id), or one
 * derived from the submit stream's creation and seq. out holds
 * FQ_RUN_ID_MAX + 1 bytes. For the caller's sizing of a dispatch at
 * admission, which must name the run as the dispatch will. */
void fq_ledger_run_id(char *out, const fq_ledger *l, const fq_submit *sub, uint64_t seq);

/* Per tenant, what the ledger keeps: embedded in the caller's tenant
 * record, initialised by fq_ledger_tenant_init, and untouched by the
 * caller afterwards except through the functions here. */
typedef struct fq_ledger_tenant {
    fq_tenant *t;               /* the scheduler's tenant */
    const char *id;             /* its id (the caller's copy; lives as long) */
    uint32_t keyed;             /* its runs held by run key (dispatched, or queued) */
    uint32_t fails;             /* its dispatches failed in a row: the parking doubles */
    int64_t debt_written;       /* the deficit its last debt record holds (<= 0) */
    int64_t debt_at_ms;         /* unix ms its debt last changed */
    uint64_t debt_read_seq;     /* the stream sequence of its debt record read back
                                   last: one stored before it is left */
    uint64_t debt_due;          /* monotonic ms its debt record is due again */
    bool debt_dirty;            /* reconciled this turn: a debt record may be due */
    bool debt_listed;           /* on the debtors' list */
    struct fq_ledger_tenant *dirty_next;            /* tenants reconciled this turn */
    struct fq_ledger_tenant *debt_prev, *debt_next; /* debtors, by debt_due */
    fq_prices prices;           /* of its token kinds (the caller's, from its
                                   policy): a completion that reports kinds
                                   is reconciled at its priced cost */
    fq_class_pending class_max_pending; /* its classes' max_pending (the
                                   caller's, from its policy); not set: the
                                   ledger's classes' */
    uint32_t held;              /* its submits held: its part of the buffer */
    uint32_t back;              /* its runs given back to FAIR_SUBMIT, awaited */
    struct fq_ledger_back *back_head, *back_tail;   /* those, by sequence */
    struct fq_ledger_tenant *gate_prev, *gate_next; /* tenants with runs given back */
    uint32_t part1;             /* its partition + 1, once the ledger computed it; 0: not yet */
} fq_ledger_tenant;

void fq_ledger_tenant_init(fq_ledger_tenant *lt, fq_tenant *t, const char *id);

/* Whether the ledger still needs lt: a run of it is held, or its debt
 * record is listed or due. The caller forgets a tenant only when not. */
bool fq_ledger_tenant_busy(const fq_ledger_tenant *lt);

/* Why the ledger asks for a tenant. */
enum fq_ledger_tenant_use {
    FQ_LEDGER_TENANT_ADMIT = 1, /* a run admitted now: created if new and allowed */
    FQ_LEDGER_TENANT_RECORD,    /* a run or a debt read back from the journal: the same */
    FQ_LEDGER_TENANT_FIND,      /* a debt of 0 read back: only if known, never created */
};

/* The tenant named id[0..len) (a valid tenant id). NULL with *why set when
 * there is none: FQ_EUNKNOWN (unknown tenants are refused, or it is no
 * longer listed), FQ_ENOTFOUND (FIND, not known), FQ_ENOMEM. */
typedef fq_ledger_tenant *(*fq_ledger_tenant_fn)(void *arg, const char *id, size_t len,
                                                 enum fq_ledger_tenant_use use, fq_status *why);

/* Allocation of the bodies the ledger keeps (size-class pools; sized
 * free). NULL: malloc and free. */
typedef struct fq_ledger_alloc {
    void *(*alloc)(void *arg, size_t size);
    void (*free)(void *arg, void *block, size_t size);
    void *arg;
} fq_ledger_alloc;

typedef struct fq_ledger_opts {
    fq_sched *sched;            /* borrowed: made with fq_ledger_sched_opts applied */
    fq_est *est;                /* borrowed: charges and learns estimates */
    fq_ledger_tenant_fn tenant; /* resolves tenants */
    void *tenant_arg;
    fq_ledger_alloc alloc;
    uint64_t hash_key[2];       /* the run keys' SipHash key: drawn at random per process */
    int64_t submit_created_ms;  /* FAIR_SUBMIT's creation: part of derived run ids */
    uint64_t max_buffered_runs; /* submits held before fetching pauses; >= 1 */
    uint64_t max_buffered_bytes;/* bodies kept in memory; past it, read back by sequence */
    uint64_t run_timeout_ms;    /* the lease; as the scheduler's run_timeout */
    uint64_t keep_done_ms;      /* completed ids and expired runs are remembered this long:
                                   max(duplicate window, run_timeout_ms) */
    uint64_t dup_window_ms;     /* FAIR_DISPATCH's duplicate window; 0: keep_done_ms */
    uint64_t debt_forget_ms;    /* a debt of a tenant holding nothing is forgiven after it */
    uint64_t max_wait_ms;       /* admission: refuse past this estimated wait; 0: never */
    uint32_t max_expired;       /* expired runs remembered at most */
    fq_classes classes;         /* priority classes within a tenant (n 0: none):
                                   a submit's class is judged against them */
    size_t journal_room;        /* bytes of an unsent batch past which fetching and
                                   dispatching wait (half of max_payload) */
    uint32_t partitions;        /* the deployment's P (docs/partitions.md): each partition
                                   has its own journal, fence and owner. 0 or 1: one,
                                   owned from the start (the journal as before
                                   partitions); above 1, none is owned until adopted
                                   (fq_ledger_adopt). Read at create only. */
    bool debts_moved;           /* P changed (partitions_before): a tenant's debt
                                   records may be on two subjects, read in either
                                   order, so a cleared debt's record is taken too */
} fq_ledger_opts;

/* Limits of the ledger's own (the proxy's constants of before). */
#define FQ_LEDGER_RETRY_MS 250          /* first parking after a failed dispatch */
#define FQ_LEDGER_PARK_MAX_MS 5000      /* longest parking; a nak's delay when not now */
#define FQ_LEDGER_FENCE_PARK_MS 100     /* a tenant of a partition whose lease is not fresh
                                           is parked this long (fq_ledger_set_part_fence) */
#define FQ_LEDGER_STALL_MS 1000         /* dispatches or batches failing this long: stalled */
#define FQ_LEDGER_CLOCK_MARGIN_MS 2000  /* a dispatch sent again is marked a possible duplicate
                                           this much before the duplicate window may end, and
                                           what is kept for keep_done_ms is kept this much
                                           longer, for the proxy's clock against the server's */
#define FQ_LEDGER_EXPIRED_MAX 100000    /* expired runs remembered at most, by default */
#define FQ_LEDGER_DONE_COPIES_PER_SEC 100   /* refused completions copied a second */
#define FQ_LEDGER_DONE_DEFER_MS 500     /* a deferred completion comes back after this */
#define FQ_LEDGER_DONE_DEFER_MAX 10     /* ... until its 10th delivery, then it is decided */
#define FQ_LEDGER_REFUSED_MAX 100000   /* submits refused for the moment's state remembered
                                          at most (for keep_done_ms) */
#define FQ_LEDGER_EARLY_MAX 10000      /* completions before their run remembered at most */
#define FQ_LEDGER_DEBT_PER_TURN 256     /* debt records refreshed or forgiven a tick at most */
#define FQ_LEDGER_SYNTH_ID (1ULL << 62) /* scheduler ids of runs read back without a sequence */
/* The buffer shared (docs/protocol.md section 8): past three quarters of
 * max_buffered_runs (the fill line), a submit of a tenant holding its share
 * or more (the fill line divided among the tenants holding runs, itself
 * included, at least FQ_LEDGER_SHARE_FLOOR), or holding any once half the
 * last quarter is taken, is given back to FAIR_SUBMIT (a nak with a delay)
 * so that the runs behind it in the stream are fetched; the rest of the
 * last quarter is for tenants that hold nothing. A tenant's runs are admitted in submit
 * order: one given back holds back its later ones, which are given back
 * too until it is admitted. Once a tenant has room again its runs given
 * back are asked back (a nak without delay: the server redelivers naks
 * before new messages, in the order of the naks). */
#define FQ_LEDGER_SHARE_FLOOR 1         /* runs any tenant may hold in a full buffer */
#define FQ_LEDGER_BACK_MS 10000         /* a run given back comes again after this, ... */
#define FQ_LEDGER_BACK_MAX_MS 120000    /* ... doubling with each delivery up to this */
#define FQ_LEDGER_BACK_MAX 65536        /* runs given back at once (MaxAckPending's part) */
#define FQ_LEDGER_RECALL_MAX 64         /* a tenant's runs asked back at once */
#define FQ_LEDGER_RECALL_AGAIN_MS 1000  /* asked back and not come: asked again after this */
#define FQ_LEDGER_RECALL_TRIES 5        /* ... this many times, then the first is lost */
#define FQ_LEDGER_GATES_PER_TURN 64     /* tenants with runs given back looked at a tick */

/* The scheduler options the ledger needs (expired runs remembered and for
 * how long), set into o, which holds the rest. */
void fq_ledger_sched_opts(fq_sched_opts *o, const fq_ledger_opts *lo);

/* Create a ledger. FQ_EINVAL: an option out of range; FQ_ENOMEM. On error
 * *out is NULL. */
fq_status fq_ledger_create(fq_ledger **out, const fq_ledger_opts *o);
/* Free everything it holds (not the borrowed scheduler or estimator; the
 * scheduler still holds runs whose handles were the ledger's: destroy or
 * rebuild it too). Safe on NULL. */
void fq_ledger_destroy(fq_ledger *l);
/* Apply changed options (a reload, a new max_payload): limits, times and
 * journal_room; sched, est, tenant, alloc and hash_key are kept as made.
 * New limits may pause or resume fetching: PAUSE actions to drain. The
 * scheduler's own options (fq_ledger_sched_opts) are the caller's to set. */
fq_status fq_ledger_set_opts(fq_ledger *l, const fq_ledger_opts *o);
/* FQ_OK if fq_ledger_set_opts would take o, FQ_EINVAL if not; changes
 * nothing, so that a caller can refuse a change before making any of it. */
fq_status fq_ledger_opts_check(const fq_ledger_opts *o);

/* ---- actions ------------------------------------------------------------ */

/* JetStream's error for a failed expectation (Nats-Expected-Last-Sequence):
 * a journal batch refused so means another proxy leads. */
#define FQ_LEDGER_ERR_WRONG_LAST 10071

/* Token kinds: the top four bits. */
#define FQ_LEDGER_TOKEN(kind, v) (((uint64_t)(kind) << 60) | ((v) & ((1ULL << 60) - 1)))
#define FQ_LEDGER_TOKEN_KIND(t) ((int)((t) >> 60))
#define FQ_LEDGER_TOKEN_VAL(t) ((t) & ((1ULL << 60) - 1))
enum fq_ledger_token_kind {
    FQ_LTK_DISPATCH = 1,        /* a dispatch; submit seq */
    FQ_LTK_JOURNAL,             /* a journal batch; batch id */
    FQ_LTK_REJECT,              /* a refused submit; submit seq */
    FQ_LTK_DONE_REJECT,         /* a refused completion; done seq */
    FQ_LTK_CALLER,              /* from here up: the caller's own */
};
bool fq_ledger_token_ours(uint64_t token);
/* The partition a publish of the ledger's is for, by its token: a
 * refusal's or a batch's own, a dispatch's run's while the ledger holds
 * it by its submit. False when not known (a run let go or forgotten, a
 * token not the ledger's). */
bool fq_ledger_token_part(uint32_t *part, const fq_ledger *l, uint64_t token);

enum fq_ledger_act_type {
    FQ_LACT_DISPATCH = 1,   /* publish to the dispatch subject */
    FQ_LACT_REFUSE,         /* publish a refusal to <rejected>.<tenant or _invalid> */
    FQ_LACT_JOURNAL,        /* publish a journal batch */
    FQ_LACT_ACK,            /* ack a delivery */
    FQ_LACT_NAK,            /* nak a delivery, to come back after delay_ms */
    FQ_LACT_PAUSE,          /* pause or resume fetching on a consumer */
    FQ_LACT_READ,           /* read a submit back by sequence: answer fq_ledger_body */
    FQ_LACT_RECONCILED,     /* a completion reconciled a run (for counters and rates) */
    FQ_LACT_NOTE,           /* something to log */
};

/* What a note says; its fields are those of the action below. */
enum fq_ledger_note {
    FQ_LNOTE_EXPIRED = 1,       /* a lease ran out: tenant, run_id */
    FQ_LNOTE_DISPATCH_FAILED, /* a dispatch failed, requeued and parked: tenant, run_id,
                               js_err, n = parked ms, n2 = failures in a row */
    FQ_LNOTE_DISPATCH_STALLED, /* dispatches fail for FQ_LEDGER_STALL_MS: js_err,
                               n = failing ms; first: the first of the spell */
    FQ_LNOTE_DISPATCH_AGAIN,/* dispatches are stored again: n = ms they failed */
    FQ_LNOTE_JOURNAL_STALLED, /* journal batches fail for FQ_LEDGER_STALL_MS: js_err, n */
    FQ_LNOTE_JOURNAL_AGAIN, /* the journal stores batches again: n */
    FQ_LNOTE_FENCED,        /* the journal refused a batch: another leads; stop.
                               n: the sequence the batch expected */
    FQ_LNOTE_BODY_LOST,     /* a held run vanished from FAIR_SUBMIT: tenant, seq */
    FQ_LNOTE_FETCH_PAUSED,  /* max_buffered_runs reached: n = held */
    FQ_LNOTE_EXPIRED_EARLY, /* expired runs forgotten past max_expired: n */
    FQ_LNOTE_REFUSAL_UNSTORED, /* a refusal was not stored, its message acked: js_err */
    FQ_LNOTE_NO_MEMORY,     /* a run was left in JetStream for lack of memory: tenant */
    FQ_LNOTE_PART_RELEASED, /* a partition was let go: part; n = its queued runs naked,
                               n2 = its dispatched runs let go */
    FQ_LNOTE_READ_EXPIRED,  /* a run read back in flight (a start, a partition taken)
                               was taken as expired, not into the window: tenant,
                               run_id; n = 1 when it did not fit the window or its
                               tenant's cap, 0 when its lease had ended meanwhile */
};

typedef struct fq_ledger_act {
    enum fq_ledger_act_type type;
    uint64_t token;             /* DISPATCH, REFUSE, JOURNAL: hand it back with the outcome */
    enum fq_ledger_cons cons;   /* REFUSE (whose message), ACK, NAK, PAUSE */
    fq_ledger_ackref ack;       /* ACK, NAK; REFUSE: the refused message's delivery */
    uint64_t seq;               /* DISPATCH, READ, BODY_LOST: the submit sequence */
    fq_ledger_tenant *lt;       /* DISPATCH, READ, RECONCILED, and REFUSE/notes when known */
    const char *tenant;         /* the tenant id; REFUSE: NULL for <rejected>._invalid */
    const char *run_id;         /* DISPATCH, EXPIRED, DISPATCH_FAILED, RECONCILED */
    const char *workflow;       /* DISPATCH, RECONCILED: "" if none */
    const char *subtenant;      /* DISPATCH: "" if none */
    fq_status code;             /* REFUSE: why (fq_status_code in Fair-Error) */
    const char *sentence;       /* REFUSE: the sentence after the code */
    uint64_t wait_ms;           /* REFUSE for overload: the estimated wait refused
                                   (Fair-Wait-Ms) */
    const char *subject;        /* REFUSE of a message just handed in: its subject, for
                                   Fair-Subject when tenant is NULL; else NULL */
    fq_ledger_bytes raw;        /* DISPATCH, REFUSE: the producer's headers and body */
    const fq_ledger_hdr *hdrs;  /* DISPATCH: fairq's headers (hdrs[0] is Nats-Msg-Id) */
    size_t n_hdrs;
    const char *text;           /* JOURNAL: the batch */
    size_t len;
    uint64_t batch;             /* JOURNAL: its id (for its Nats-Msg-Id) */
    uint64_t expect_seq;        /* JOURNAL: the last sequence of its partition's journal
                                   subject (Nats-Expected-Last-Subject-Sequence; with one
                                   partition, the stream's: Nats-Expected-Last-Sequence) */
    uint32_t part;              /* JOURNAL: its partition (its subject: the journal's,
                                   with one partition; else <journal>.<part>);
                                   FENCED, JOURNAL_STALLED, PART_RELEASED: the partition */
    uint64_t term;              /* JOURNAL: the term its partition was adopted at */
    uint32_t delay_ms;          /* NAK */
    bool paused;                /* PAUSE */
    uint32_t est;               /* DISPATCH, RECONCILED: tokens charged */
    int64_t submitted_ms;       /* DISPATCH: JetStream's time of the submit */
    int64_t dispatched_ms;      /* DISPATCH */
    bool possible_dup;          /* DISPATCH: JetStream may store it twice: sent again, its
                                   first dispatch perhaps older than the duplicate window, or
                                   one perhaps stored unknown to us, past the window of its
                                   submit (Fair-Possible-Duplicate) */
    uint64_t actual;            /* RECONCILED: the tokens reported */
    bool late;                  /* RECONCILED: its lease had run out */
    enum fq_ledger_note note;   /* NOTE */
    int js_err;                 /* notes: JetStream's error code */
    uint64_t n, n2;             /* notes: numbers, as the note says */
    bool first;                 /* notes: the first of its spell */
} fq_ledger_act;

/* The next action to perform, or NULL when none is left. */
const fq_ledger_act *fq_ledger_next(fq_ledger *l);

/* An ACK action the caller could not send (natsio refused it): it is held
 * with those not sent while the lease was not fresh, and sent again, in
 * order, by a later tick. A NAK not sent needs nothing: the delivery comes
 * back after its AckWait. */
void fq_ledger_ack_failed(fq_ledger *l, const fq_ledger_act *a);

/* A DISPATCH, REFUSE or JOURNAL action whose publish the caller could not
 * even queue (st: natsio's status). A dispatch that can never be sent
 * (FQ_ETOOBIG, FQ_EINVAL: the server's max_payload shrank since its
 * admission) is refused, told before a tick ran out its lease (else it is
 * queued again and refused at its next dispatch); otherwise it is queued
 * again in order (its tenant parked on FQ_ENOMEM) and the caller
 * dispatches no more this turn. A
 * journal batch is sent again by a later flush. A refusal stays unacked:
 * its submit comes back on the next consumer reset. */
void fq_ledger_unsent(fq_ledger *l, const fq_ledger_act *a, fq_status st, uint64_t now,
                      int64_t now_ms);

/* ---- inputs ------------------------------------------------------------- */

/* A delivery from the submit consumer. The caller has read what needs the
 * message (the subject's tenant, the parsed fields, whether its dispatch
 * would be stored) and says it here. */
typedef struct fq_ledger_submit {
    fq_ledger_ackref ack;       /* its delivery: ack.sseq is the run's sequence */
    int64_t ts_ms;              /* JetStream's timestamp of the submit */
    const char *tenant;         /* the subject's tenant id (valid); NULL: none */
    fq_status status;           /* FQ_OK: sub is parsed and it fits; else why it is refused */
    const char *error;          /* status != FQ_OK: the sentence */
    const fq_submit *sub;       /* status FQ_OK: its fields */
    uint32_t size;              /* status FQ_OK: bytes of its dispatch, fairq's headers in */
    const char *subject;        /* its subject, for a refusal's Fair-Subject */
    fq_ledger_bytes raw;        /* its bytes: copied if they fit max_buffered_bytes; must
                                   stay valid until this call's actions are drained */
} fq_ledger_submit;

/* Take a submit. A redelivery of a held one changes nothing; one the
 * journal says was dispatched is published again (de-duplicated by
 * JetStream); one completed already is acked; else it is queued or
 * refused. */
void fq_ledger_submit_in(fq_ledger *l, const fq_ledger_submit *s, uint64_t now, int64_t now_ms);

/* A delivery from the done consumer, parsed by the caller. */
typedef struct fq_ledger_done {
    fq_ledger_ackref ack;
    const char *tenant;         /* the subject's tenant id (valid); NULL: none */
    fq_status status;           /* FQ_OK: c is parsed; else why it is refused */
    const char *error;          /* status != FQ_OK: the sentence */
    const fq_completion *c;     /* status FQ_OK */
    const char *subject;        /* its subject, for a refusal's Fair-Subject */
    fq_ledger_bytes raw;        /* its bytes, for the refusal's copy (valid as above) */
    int64_t ts_ms;              /* FAIR_DONE's timestamp of it (unix ms, the server's clock);
                                   0: unknown */
} fq_ledger_done;

/* Take a completion: reconcile its run once (in flight, or expired and
 * remembered), defer it while its run is queued (a nak, up to
 * FQ_LEDGER_DONE_DEFER_MAX deliveries), ack a duplicate, refuse the rest
 * (a copy to <rejected>._invalid, FQ_LEDGER_DONE_COPIES_PER_SEC a second,
 * acked without a copy past that). One of a run not held yet is also
 * remembered (FQ_LEDGER_EARLY_MAX at most, for keep_done_ms): if that
 * run's dispatch comes back a duplicate (a leader before dispatched it
 * without its flight record stored), it is reconciled then; a dispatch
 * stored new forgets it. */
void fq_ledger_done_in(fq_ledger *l, const fq_ledger_done *d, uint64_t now, int64_t now_ms);

/* What became of a publish of the ledger's. */
enum fq_ledger_pub {
    FQ_LEDGER_PUB_STORED = 1,   /* stored (seq: its stream sequence) */
    FQ_LEDGER_PUB_DUPLICATE,    /* stored before: JetStream's duplicate window */
    FQ_LEDGER_PUB_ERROR,        /* JetStream answered with an error (js_err) */
    FQ_LEDGER_PUB_FAILED,       /* no answer: a timeout, a disconnection */
};

/* The outcome of the publish of token. true: the caller publishes it
 * again as it was, with the same token, after its retry delay, and reports
 * that outcome in turn (a refusal that failed without JetStream's answer,
 * a dispatch of a run the ledger no longer holds); false: nothing to do (a
 * journal batch that failed is sent again by a later flush). */
bool fq_ledger_puback(fq_ledger *l, uint64_t token, enum fq_ledger_pub outcome, int js_err,
                      uint64_t seq, uint64_t now, int64_t now_ms);

/* The answer to a READ action: the submit's bytes and its fields parsed
 * again (FQ_OK), FQ_ENOTFOUND (gone from the stream: the run is dropped),
 * or another status (not now: the run is requeued and its tenant parked).
 * raw must stay valid until this call's actions are drained. */
void fq_ledger_body(fq_ledger *l, uint64_t seq, fq_status st, const fq_ledger_bytes *raw,
                    const fq_submit *sub, uint64_t now, int64_t now_ms);

/* Dispatch by DRR while the window has room, at most budget publishes
 * (what NATS takes now), until a READ is asked for (answer it, then call
 * again) or the journal's unsent batch is full. Returns the dispatches. */
size_t fq_ledger_dispatch(fq_ledger *l, size_t budget, uint64_t now, int64_t now_ms);

/* At each turn before dispatching: expire leases, forget expired runs and
 * completed ids past their time, send the acks held back once fresh. */
void fq_ledger_tick(fq_ledger *l, uint64_t now, int64_t now_ms);

/* At each turn after dispatching: write the debt records due, and send the
 * journal batch (the turn's records) unless one is in flight. */
void fq_ledger_flush(fq_ledger *l, uint64_t now, int64_t now_ms);

/* The lease's state: while not fresh nothing is acked, naked, dispatched
 * or journalled (acks and naks are held, in order, and sent once fresh
 * again). With P = 1 the leader's lease; with P > 1 what holds every
 * partition (the process fenced), each partition's own lease being told
 * by fq_ledger_set_part_fence. */
void fq_ledger_set_fresh(fq_ledger *l, bool fresh);
/* Partition part's lease is fresh before until (monotonic ms, compared
 * with each input's now; 0: not held), as the lease said last (tell it
 * whenever that changes). An action for part (an ack or a nak of its
 * deliveries, its journal batches, a dispatch of its tenants' runs) needs
 * the ledger fresh and part's lease fresh, and no other partition's:
 * part's journal has its own subject, marker and fence, its consumers
 * their own term-named names and fence (fq_nio_fence_consumer), and its
 * batch settles only its runs and completions. Past until its acks and
 * naks are held, in order, its batches wait, and a run of its tenants
 * that deficit round robin picks goes back to the head of its queue,
 * uncharged, the tenant parked FQ_LEDGER_FENCE_PARK_MS, so the tenants of
 * the partitions fresh are served meanwhile. Never told (UINT64_MAX, the
 * default, and with P = 1): the ledger's fresh alone. */
void fq_ledger_set_part_fence(fq_ledger *l, uint32_t part, uint64_t until);

/* The admission's drain rate, tokens a second (0: unknown). */
void fq_ledger_set_rate(fq_ledger *l, double tokens_per_sec);

/* ---- the journal at start or takeover ------------------------------------ */

/* Our term's marker is stored at seq: the first batch expects it. Until
 * then no batch is sent. With one partition: fq_ledger_part_marked(l, 0, seq). */
void fq_ledger_journal_marked(fq_ledger *l, uint64_t seq);

/* Rebuild from the journal: each valid record read back, in order, with
 * the time its message was stored (unix ms, the stream leader's clock)
 * and its message's stream sequence (seq: records of one message share
 * it), and the clocks of now (now monotonic, now_ms unix, read together:
 * what a record is remembered for is counted on the monotonic clock from
 * then on); then fq_ledger_recovered.
 * Only before the first submit or completion (of the partition adopted:
 * a record of a partition not being read back is refused and counted).
 * The partitions owned are served meanwhile, records and their submits
 * and completions interleaved in any order (the proxy reads a partition
 * back off its loop). */
void fq_ledger_recover_record(fq_ledger *l, const fq_jrec *r, int64_t stored_ms, uint64_t seq,
                              uint64_t now, int64_t now_ms);
/* Put the runs read back into the window (up to its limits and each
 * tenant's cap; the rest count as expired) or among the expired; the
 * partitions adopted are owned from now on. */
void fq_ledger_recovered(fq_ledger *l, uint64_t now, int64_t now_ms);

/* ---- partitions ---------------------------------------------------------- */

/*
 * A deployment has P partitions (opts.partitions); a tenant lives in one,
 * fq_partition_of its id (lib/partition.h), and a replica owns a set of
 * them. The ledger keeps one scheduler over the tenants of every partition
 * it owns (one deficit round robin), but each partition has its own
 * journal subject, its own batches and Nats-Expected-Last-Subject-Sequence
 * fence, its own marker and its own read-back, so a new owner rebuilds only
 * that partition. With P = 1 the one partition is owned from the start and
 * journals on the journal's one subject, as before partitions existed.
 *
 * Taking a partition over: fq_ledger_adopt(k, term); its marker stored at
 * seq, fq_ledger_part_marked(k, seq); the records of its journal subject
 * read back, in order, through fq_ledger_recover_record (records of other
 * partitions are refused and counted); then fq_ledger_recovered, after
 * which its submits and completions are taken. Its flight records, done
 * ids and debts come back as at a restart: a tenant's debt survives the
 * handover; its positive credit does not (as when it goes idle).
 *
 * Letting one go: fq_ledger_release(k). Its queued runs are naked (without
 * delay, each tenant's in its queue's order), its dispatched runs leave the
 * window uncharged, its tenants are left idle with a deficit of zero, its
 * done ids, given-back runs, early completions and held acks are dropped,
 * and its unsent journal records are dropped unsent: nothing is lost, for
 * whatever was not stored left its submit or completion unacked, and the
 * next owner reads the journal back. Deliveries of a partition not owned
 * are dropped unanswered (counted as unowned).
 */

/* The partition of tenant (a valid id): 0 with one partition. */
uint32_t fq_ledger_part_of(const fq_ledger *l, const char *tenant);

/* Begin owning partition part at term (its lease's): FQ_OK; FQ_EINVAL, part
 * out of range; FQ_EEXIST, owned already, or publishes of its last release
 * are still unanswered (adopt it once they are). */
fq_status fq_ledger_adopt(fq_ledger *l, uint32_t part, uint64_t term);

/* Partition part's marker (an empty batch on its journal subject, with no
 * expectation), sent for its adoption at term, is stored at seq: its first
 * batch expects it. Until then none of its batches is sent. False, and
 * nothing changes, unless part is adopted at term and not marked yet: a
 * marker sent for an adoption let go since is not this one's, which the
 * caller sends (its batches would never go out, or expect a sequence
 * another owner's marker may have followed). */
bool fq_ledger_part_marked(fq_ledger *l, uint32_t part, uint64_t term, uint64_t seq);

/* Let partition part go (above): its actions follow, a PART_RELEASED note
 * last. Nothing if it is not owned. */
void fq_ledger_release(fq_ledger *l, uint32_t part, uint64_t now, int64_t now_ms);

/* Partition part's submit consumer was made (at start, at a takeover,
 * after a reconnect), and FAIR_SUBMIT's last sequence, asked of the server
 * once the make was answered, is last_seq. The first such answer since the
 * partition was adopted (with one partition: since the ledger was made)
 * fixes which submits are inherited: one stored at or below last_seq may
 * have been stored before our consumer was made, and fetched by a
 * consumer before ours, and its dispatch stored by a leader that died
 * before its flight record was (docs/protocol.md section 8). By the
 * stream's own sequence, not a time: a time of ours against the server's
 * timestamps depended on the two clocks agreeing (within a margin); a
 * sequence read after the make is at or above the one at the make, so
 * the cutoff errs only towards inheriting more. Such a run, dispatched
 * past the duplicate window of its submit, is marked
 * Fair-Possible-Duplicate and counted (possible_duplicates). Until the
 * first call every submit is inherited. term: the term the consumer is
 * named for; an adopted partition's consumer of another term than the
 * partition's (made in a tenure let go since, its event come late) is
 * ignored, or it would fix the cutoff before our consumer was made. True
 * when this call fixed it. */
bool fq_ledger_consumer_made(fq_ledger *l, uint32_t part, uint64_t term, uint64_t last_seq);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Whether partition part is owned (adopted and read back). */
bool fq_ledger_owns(const fq_ledger *l, uint32_t part);
#endif

/* One partition's journal, for the caller's handover and metrics. */
typedef struct fq_ledger_part_stats {
    bool owned;                 /* adopted and read back */
    bool loading;               /* adopted, being read back */
    bool fenced;                /* another owner wrote its journal */
    bool settled;               /* no record of it unsent or awaiting its PubAck: a
                                   planned release loses nothing to read back again */
    uint64_t term;              /* the term it was adopted at */
    uint64_t expect_seq;        /* the sequence its next batch expects */
} fq_ledger_part_stats;
void fq_ledger_part_stats_get(fq_ledger_part_stats *out, const fq_ledger *l, uint32_t part);

/* ---- what it holds ----------------------------------------------------- */

typedef struct fq_ledger_counters {
    uint64_t submitted, redelivered, invalid_subject, duplicates_acked;
    uint64_t rejected[FQ__COUNT];   /* refused runs by reason */
    uint64_t dispatched, dispatch_duplicates, body_reads, body_lost;
    uint64_t redispatched;      /* read back, sent again and stored new: the attempt its
                                   flight record told of had failed; its lease restarts */
    uint64_t done_unconfirmed_resent;   /* submits of runs completed before their dispatch
                                           was seen stored, come again: published again */
    uint64_t dispatch_unanswered;   /* dispatches whose PubAck did not come: published
                                       again as they were, not queued again */
    uint64_t refusals_repeated; /* submits refused for the moment's state, come again:
                                   refused again by their refused record */
    uint64_t possible_duplicates;   /* dispatches marked Fair-Possible-Duplicate: sent again
                                       past the duplicate window of their first, or of a run
                                       whose dispatch may be stored unknown to us (inherited
                                       at a takeover, or an attempt unanswered) sent past the
                                       window of its submit */
    uint64_t refusals_forgotten_early;  /* refused submits forgotten past
                                           FQ_LEDGER_REFUSED_MAX */
    uint64_t completions, completions_unheld, completions_duplicate, completions_invalid;
    uint64_t completions_unknown, completion_copies_skipped, completions_deferred;
    uint64_t completions_early;         /* unknown ones remembered: their run may come */
    uint64_t completions_early_applied; /* ... reconciled when its dispatch came back a
                                           duplicate: an earlier leader dispatched it */
    uint64_t expired, expired_forgotten_early, adopted, adopt_overflow;
    uint64_t dispatch_failures, refusals_unstored, debts_forgiven, pub_failures;
    uint64_t fetch_pauses;      /* times fetching paused for max_buffered_runs */
    uint64_t given_back;        /* submits given back to FAIR_SUBMIT: over their share */
    uint64_t recalled;          /* given back and asked back: room came */
    uint64_t given_back_lost;   /* given back and never came again (purged): forgotten */
    uint64_t parts_adopted, parts_released; /* partitions taken over and let go */
    uint64_t released_queued;   /* queued runs naked when their partition was let go */
    uint64_t released_dispatched; /* dispatched runs let go with their partition */
    uint64_t unowned;           /* deliveries of a partition not owned: dropped unanswered */
    uint64_t records_foreign;   /* journal records read back of a partition not being read */
    uint64_t subtenant_overflow; /* runs queued in their tenant's overflow sub-tenant: they
                                    named a new one past its max_subtenants */
} fq_ledger_counters;

typedef struct fq_ledger_stats {
    uint64_t held;              /* submits held (unacked) */
    uint64_t index_only;        /* of which without their body in memory */
    uint64_t buffered_bytes;    /* bodies held */
    uint64_t completed_remembered; /* run keys in the completed set */
    uint64_t expired_remembered;/* expired runs awaiting a late completion */
    uint64_t debtors;           /* tenants with a live debt record */
    uint64_t given_back;        /* runs given back now, awaited in order */
    bool fetch_paused;          /* max_buffered_runs reached */
    bool journal_full;          /* the unsent batch is full */
    bool fenced;                /* another leader wrote the journal */
    bool dispatch_stalled;      /* dispatches fail for FQ_LEDGER_STALL_MS */
    bool journal_stalled;       /* batches fail for FQ_LEDGER_STALL_MS */
    bool settled;               /* nothing left to send: no batch or debt record unsent
                                   (a batch in flight is the caller's to wait for) */
} fq_ledger_stats;

/* Where a run is, for <explain>.<tenant>. */
enum fq_ledger_where {
    FQ_LW_UNKNOWN = 0,  /* not held, nor completed within the duplicate window */
    FQ_LW_QUEUED,       /* in its tenant's queue */
    FQ_LW_IN_FLIGHT,    /* dispatched, holding a window slot */
    FQ_LW_EXPIRED,      /* its lease ran out; a late completion still counts */
    FQ_LW_DONE,         /* completed (or refused after it was held) recently */
};
const char *fq_ledger_where_name(enum fq_ledger_where w);

#ifdef FQ_TESTING   /* tests only */
/* The scheduler's record of the run from submit seq while it is dispatched
 * (in flight or expired), or NULL. The ledger indexes a run by sequence
 * only while its submit is unacked, so past that this walks every run
 * held: for tests, not the hot path. */
const fq_run *fq_ledger_dispatched_run(const fq_ledger *l, uint64_t seq);
#endif

/* Where run run_id of tenant is; *est: the tokens charged for it while held
 * (0 otherwise). By the run-key index: O(1). */
enum fq_ledger_where fq_ledger_run_where(const fq_ledger *l, const char *tenant,
                                         const char *run_id, uint32_t *est);

/* The estimated wait (ms) of a run of est tokens queued by lt now behind
 * its tenant's queued runs: the tokens deficit round robin serves before it
 * (fq_sched_tokens_ahead) at the admission's drain rate, or its tenant's
 * token rate alone (fq_sched_rate_wait) where longer. *known: a drain rate
 * is known (else the token rate's wait alone). Admission refuses past
 * max_wait_ms by it. */
uint64_t fq_ledger_wait_ms(const fq_ledger *l, const fq_ledger_tenant *lt, uint32_t est,
                           uint64_t now, bool *known);

/* The sub-tenant run run_id of tenant claims, into out (FQ_SUBTENANT_MAX +
 * 1 bytes; "" for none): false if not known here (not held, or queued with
 * its body not in memory). O(1). */
bool fq_ledger_run_subtenant(char *out, const fq_ledger *l, const char *tenant,
                             const char *run_id);

/* The scheduler's record of run run_id of tenant while it is queued (its
 * sub-tenant's lane, fq_sched_run_sub_info, whether or not its body is in
 * memory), or NULL. By the run-key index: O(1). */
const fq_run *fq_ledger_queued_run(const fq_ledger *l, const char *tenant, const char *run_id);

const fq_ledger_counters *fq_ledger_counters_get(const fq_ledger *l);
void fq_ledger_stats_get(fq_ledger_stats *out, const fq_ledger *l);

#endif
