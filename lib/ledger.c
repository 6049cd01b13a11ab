/* ledger.c -- the run ledger: everything fairq decides about runs, as a state machine without I/O.
 *
 * Principles:
 *  - One lifecycle per run: the scheduler (lib/drr.c, lib/window.c) knows
 *    where a run is (queued, in flight, expired, or FQ_RUN_FREE once it
 *    lets go of it) and tells us when a lease ends and when an expired run
 *    is forgotten; the ledger reads a run's state there and keeps no copy
 *    of it, nor counts of its own (the window counts the expired runs). It
 *    keeps only what the core does not know: the run's names, its body or
 *    its sequence, the publishes its submit's ack waits for, the indexes
 *    by sequence and by run key, and two bits of a run's life that the
 *    core cannot see. reading: taken into the window, its body being read;
 *    in flight to the scheduler (it hands a run over as it leaves its
 *    queue and waits for no I/O) but queued to everyone else, since its
 *    dispatch is not out. loaded: read back from the journal as
 *    dispatched, not handed to the scheduler yet (it takes the runs in
 *    once the journal is read, within its limits). Any other run the
 *    scheduler does not hold is over (completed, refused, cancelled,
 *    forgotten, or let go with its partition: then in gone while its
 *    dispatch is unanswered), kept only while an index or a publish
 *    refers to it. A run is one record: the ledger's lg_run embeds the
 *    scheduler's fq_run (caller_runs), handed over as the run is queued or
 *    adopted, so its sequence is the scheduler's id, not a copy of it; and
 *    one index per key: the window keeps no index by id of its own, the
 *    ledger's by sequence links the run through the fq_run's own node, and
 *    the ledger names a run to the scheduler by its record.
 *  - A submit is acked only once what it became is stored: its dispatch
 *    and its flight record (two PubAcks, counted in pending), or its
 *    refusal. A refusal for the state of the moment (duplicate, full,
 *    overload) is a decision kept: its refused record is stored first,
 *    then the refusal goes out (from a copy), and a submit delivered again
 *    is refused again by that record, never decided anew and dispatched.
 *    Runs are indexed by submit sequence while their submit is
 *    unacked (a redelivery of a held run is not queued twice) and by run
 *    key from admission to completion (completions and duplicate ids find
 *    them).
 *  - The journal is written in batches, one in flight at a time: the next
 *    one's Nats-Expected-Last-Sequence is this one's PubAck. What a batch
 *    settles (dispatched runs' submits, completions' acks) waits for it.
 *  - Nothing allocates per run once the pools, the tables and the action
 *    list have grown to the working set; a kept submit is one block of the
 *    caller's allocator (size-class pools): its run id and workflow, its
 *    producer's header lines and its body. Names of their own (the names
 *    pool) only from dispatch on, when the block goes.
 *  - A completion of a run not held yet is refused (counted, copied), and
 *    remembered unacked (by run key, FQ_LEDGER_EARLY_MAX at most, for
 *    keep_done_ms): a leader before us may have dispatched the run without
 *    storing its flight record, and a worker's completion can reach us
 *    before the run's submit does. It is applied only if that run's
 *    dispatch comes back a Nats-Msg-Id duplicate (an earlier leader really
 *    dispatched it), and acked with its done record; acked unapplied once
 *    the run's dispatch is stored as new, or its time or room runs out: a
 *    forged one pre-completes no future run. Unacked, it comes back to the
 *    next leader if we die first.
 *  - Such a leader's dispatch is stored unknown to the journal, and its
 *    submit comes to us as new. A submit stored before our submit consumer
 *    was first made (by FAIR_SUBMIT's sequence, not a clock:
 *    fq_ledger_consumer_made) is inherited: a consumer
 *    before ours may have given it to a leader before us. Its run, and a
 *    run of ours whose dispatch went unanswered and that an error answer
 *    to a later copy queued again, may be stored already: dispatched past
 *    the duplicate window of its submit, it is marked
 *    Fair-Possible-Duplicate (maybe_sent). Marked, not known: an intent
 *    journalled before each dispatch would tell the next leader which runs
 *    may be out, but make every dispatch wait for a journal round trip and
 *    stop with the journal; marking costs a comparison at admission, and
 *    marks a takeover's backlog past the window whether it went out or not
 *    (docs/protocol.md section 8).
 *  - No I/O and no clock: time comes in with each input.
 */
#include "ledger.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition.h"
#include "kept.h"
#include "pool.h"
#include "u64map.h"

#define LG_POOL_CHUNK 1024         /* records a pool chunk holds */
#define LG_TOKEN_HELD (1ULL << 59)  /* in a refused completion's token: acked by its early
                                       completion, not by the copy's PubAck */
#define LG_TOKEN_PART_SHIFT 48      /* a refusal's or a batch's token: its partition in bits
                                       48 to 58, the sequence or batch id below */
#define LG_TOKEN_LOW ((1ULL << LG_TOKEN_PART_SHIFT) - 1)

/* What a run must remember from dispatch (or from admission, while its
 * body is kept) until it is forgotten. */
typedef struct lg_names {
    char run_id[FQ_RUN_ID_MAX + 1];
    char workflow[FQ_WORKFLOW_MAX + 1];
    char subtenant[FQ_SUBTENANT_MAX + 1]; /* its dispatch's Fair-Subtenant; "" if none */
    uint32_t declared;          /* the producer's est_tokens, 0 if none */
    struct lg_names *dead;      /* given up: freed once the actions that may point at its
                                   names are drained */
} lg_names;

/* A run the ledger holds. */
typedef struct lg_run {
    fq_run run;                 /* the scheduler's record of it (handed over as it is
                                   queued or adopted: one record a run); run.id is its
                                   submit stream sequence (or synthetic), set here first;
                                   run.hnode links it by sequence (by_seq, or gone), the
                                   one index by sequence, which the scheduler leaves to
                                   us; run.next the runs read back, until taken in */
    uint64_t key;               /* the run key's keyed hash */
    fq_u64map_node key_node;    /* by run key, from admission to completion */
    fq_ledger_tenant *lt;
    lg_names *names;            /* from dispatch on (while queued, a kept body's block
                                   holds them) */
    unsigned char *body;        /* one block (lg_block, then its run id, workflow, header
                                   lines and body); NULL: index only */
    uint32_t delivered;         /* its submit's last delivery: delivery count */
    uint16_t part;              /* its tenant's partition (set when indexed) */
    uint64_t cseq;              /* ... and consumer sequence */
    int64_t submitted_ms;       /* JetStream's timestamp of the submit */
    uint32_t est;               /* tokens charged */
    uint8_t pending;            /* publishes to settle before its submit is acked */
    bool in_seq : 1, in_key : 1;
    bool retained : 1;          /* its body kept, counted in buffered_bytes */
    bool indexed : 1;           /* held without its body, counted in index_only */
    bool reading : 1;           /* a READ of its body is asked for: the scheduler took it
                                   into the window, but its dispatch is not out */
    bool resent : 1;            /* its dispatch was published again for a redelivery */
    bool stored : 1;            /* its dispatch's PubAck came in this process: a redelivery
                                   of its settled submit (an ack lost) is acked again */
    bool loaded : 1;            /* read back from the journal as dispatched (no done record
                                   since), not handed to the scheduler yet */
    bool read_expired : 1;      /* read back: an expired record (submitted_ms: its expiry) */
    bool refusing : 1;          /* refused for the moment's state: its refusal goes out once
                                   its refused record is stored (body: an lg_kept_refusal) */
    bool maybe_sent : 1;        /* a dispatch of it may be in FAIR_DISPATCH already, unknown
                                   to us: its submit was stored before our consumer was made
                                   (a leader before us may have stored its dispatch and died
                                   before its flight record), or an attempt of ours went
                                   unanswered and it was queued again since. Dispatched past
                                   the duplicate window of its submit, it is marked */
} lg_run;

/* What a kept body's block begins with: the fields only a kept body needs,
 * so that a run held without its body (index only) does not carry them
 * (its record is 88 bytes, not 104). */
typedef struct lg_block {
    uint32_t size;              /* bytes of its dispatch: what a kept body counts */
    uint32_t hdr_len, body_len;
    uint32_t declared;          /* the producer's est_tokens, 0 if none */
    uint8_t id_len, wf_len;     /* bytes of the run id and the workflow after this */
    uint8_t sub_len;            /* ... and of the sub-tenant after them */
} lg_block;

/* What a refusal waiting for its refused record keeps (a refusing run's
 * body): the refusal as it will go out, then its sentence (NUL-ended),
 * the producer's header lines and the body. */
typedef struct lg_kept_refusal {
    uint32_t hdr_len, body_len;
    uint16_t text_len;          /* the sentence's bytes, its NUL not counted */
    uint8_t code;               /* fq_status */
    uint64_t wait_ms;           /* an overload's estimated wait (Fair-Wait-Ms) */
} lg_kept_refusal;

/* A submit refused for the state of the moment (duplicate, tenant_full,
 * overload), remembered with its refused record: delivered again (its ack
 * lost), it is refused again, not decided anew. */
typedef struct lg_refused {
    fq_kept_node k;             /* key: the submit's sequence; until: when it is forgotten */
    uint32_t part;              /* its tenant's partition */
    fq_status code;
} lg_refused;

_Static_assert(sizeof(void *) != 8 || sizeof(lg_run) <= 136,
               "a run held index only costs its record, the scheduler's in it: keep it "
               "within 136 bytes");
_Static_assert(offsetof(lg_run, run) == 0, "a run's fq_run is its record's start");

/* The run read back after x (the loaded list links through run.next,
 * which the scheduler uses only once x is handed over). */
static lg_run *lg_loaded_next(const lg_run *x)
{
    return (lg_run *)(void *)x->run.next;
}

/* Whether the scheduler holds x in its window (in flight or expired): it
 * sets a run's state as it takes it in and lets it go. */
static bool lg_in_window(const lg_run *x)
{
    return x->run.state == FQ_RUN_FLIGHT || x->run.state == FQ_RUN_EXPIRED;
}

/* Whether x is queued as far as anyone outside can tell: in its tenant's
 * queue, or taken into the window while its body is read (its lease may
 * have run out meanwhile), its dispatch not out yet: a completion of it
 * waits, a journal batch of an earlier attempt settling acks nothing. */
static bool lg_queued(const lg_run *x)
{
    return x->run.state == FQ_RUN_QUEUED || (x->reading && lg_in_window(x));
}

/* Whether x's dispatch is out and the scheduler holds it: in flight, or
 * its lease expired. */
static bool lg_dispatched(const lg_run *x)
{
    return lg_in_window(x) && !lg_queued(x);
}

/* Whether x is over: completed, refused, cancelled, forgotten or let go
 * (or never queued: a kept refusal, a completed run's dispatch sent again).
 * The scheduler holds it no more, and the ledger keeps it only while an
 * index or a publish refers to it. */
static bool lg_over(const lg_run *x)
{
    return x->run.state == FQ_RUN_FREE && !x->loaded;
}

/* The delivery of x's submit an ack or a nak names. */
static fq_ledger_ackref lg_ackref(const lg_run *x)
{
    return (fq_ledger_ackref){.sseq = x->run.id, .cseq = x->cseq, .delivered = x->delivered,
                              .part = x->part};
}

static void lg_delivery(lg_run *x, const fq_ledger_ackref *a)
{
    x->cseq = a->cseq;
    x->delivered = a->delivered;
}

/* A run key completed recently: a completion repeated, or the same run
 * submitted again, within the duplicate window changes nothing. */
typedef struct lg_done {
    fq_kept_node k;             /* key: the run key's hash; until: when it may be forgotten,
                                   by the monotonic clock, not the wall clock, which a step
                                   forward would make forget it while JetStream (by the
                                   server's clock) still de-duplicates its run's
                                   Nats-Msg-Id */
    uint64_t seq;               /* the submit it came from */
    uint32_t part;              /* its tenant's partition */
    bool unconfirmed;           /* it completed before its dispatch was seen stored (read
                                   back, or its PubAck still to come): the completion may
                                   be forged, or of an earlier submit of its run id, so its
                                   submit, come again, is published again under its
                                   Nats-Msg-Id rather than taken as done */
} lg_done;

/* A completion that came before its run was held (see the principles):
 * what it reported, until its run's dispatch tells whether it counts. */
typedef struct lg_early {
    fq_kept_node k;             /* key: the run key's hash; until: when it is forgotten
                                   (acked); INT64_MIN: taken, out of the map */
    uint64_t actual, input, output, cached;    /* tokens reported */
    bool kinds;                 /* input, output, cached given: they price it */
    uint8_t status;             /* enum fq_done_status */
    fq_ledger_ackref ack;       /* its delivery, held unacked */
} lg_early;

_Static_assert(offsetof(lg_done, k) == 0 && offsetof(lg_early, k) == 0 &&
                   offsetof(lg_refused, k) == 0,
               "a remembered record begins with its fq_kept_node");

/* A journal batch: the records of the turns since the last one sent, and
 * what waits for it to be stored. */
typedef struct lg_batch {
    uint64_t id;
    lg_run **runs;              /* dispatched: settled on its PubAck */
    size_t nruns, cap_runs;
    uint64_t *dones;            /* completions (done seq) to ack */
    size_t ndones, cap_dones;
    fq_jbatch jb;               /* its text */
    bool sent;                  /* published, awaiting its PubAck */
    uint64_t retry_at;          /* monotonic ms it is sent again after a failure; 0: not */
} lg_batch;

enum lg_part_state {
    LG_PART_FREE = 0,   /* not ours */
    LG_PART_LOADING,    /* adopted, its journal being read back */
    LG_PART_OWNED,      /* ours: its submits and completions are taken */
};

/* A partition: the unit of ownership (docs/partitions.md), with a journal
 * subject of its own, its batches, its fence and its marker. */
typedef struct lg_part {
    lg_batch bat[2];            /* the one being written and the one in flight */
    lg_batch *cur, *sent;       /* NULL: none */
    uint64_t jseq;              /* its journal subject's last sequence: the next batch
                                   expects it */
    uint64_t term;              /* the term it was adopted at */
    uint64_t jfail_since;       /* monotonic ms its batches began failing; 0: not */
    uint32_t gone;              /* runs let go at its release whose dispatch is unanswered */
    uint8_t state;              /* enum lg_part_state */
    bool jmarked;               /* its term's marker is stored: jseq is known */
    bool fenced;                /* another owner wrote its journal */
    bool full;                  /* its unsent batch is as large as one may be */
    bool jstalled;              /* its batches fail for FQ_LEDGER_STALL_MS */
    bool listed;                /* on the list of partitions with a batch unsent or unanswered */
    uint64_t fence;             /* monotonic ms from which its lease is not known fresh, as
                                   last told (fq_ledger_set_part_fence); UINT64_MAX: not
                                   told, the ledger's fresh alone. Its acks, naks, batches
                                   and its tenants' dispatches wait for it, not for the
                                   others' */
    uint32_t nlater;            /* its acks and naks held in l->later */
    uint64_t inherit_seq;       /* FAIR_SUBMIT's sequence at or below which a submit may have
                                   been fetched by a consumer before ours (the stream's last
                                   once its submit consumer was first made): UINT64_MAX from
                                   its adoption until that is known (fq_ledger_consumer_made) */
} lg_part;

/* A run given back to FAIR_SUBMIT (over its tenant's share, or behind
 * one that was), awaited in its tenant's order. */
typedef struct fq_ledger_back {
    uint64_t seq;               /* its submit's sequence */
    fq_u64map_node node;        /* by sequence */
    fq_ledger_ackref ack;       /* its last delivery: asking it back naks that */
    uint64_t recalled_at;       /* monotonic ms it was last asked back; 0: not since */
    uint32_t tries;             /* asked back without coming, in a row */
    struct fq_ledger_back *next;/* its tenant's next, by sequence */
} lg_back;

/* An ack or a nak held back while not fresh (an ack also when refused by
 * the caller's natsio). */
typedef struct lg_later {
    enum fq_ledger_cons cons;
    fq_ledger_ackref a;
    bool nak;                   /* a nak, after delay_ms; else an ack */
    uint32_t delay_ms;
} lg_later;

/* A body block to give back once no action points at it. */
typedef struct lg_grave {
    void *block;
    size_t size;
} lg_grave;

/* An action as the list holds it: the text its pointers are filled from
 * when it is handed out (so the list may grow meanwhile). */
typedef struct lg_act {
    fq_ledger_act a;
    fq_ledger_dhdrs d;          /* DISPATCH */
    char text[400];             /* REFUSE: the sentence */
} lg_act;

struct fq_ledger {
    fq_ledger_opts o;
    fq_u64map *by_seq, *by_key;
    fq_kept done;               /* lg_done by run key */
    fq_kept early;              /* lg_early by run key */
    fq_kept refused;            /* lg_refused by submit sequence */
    fq_opool run_pool, names_pool, back_pool;

    lg_part *parts;             /* the deployment's partitions, owned or not */
    uint32_t nparts;
    uint32_t *jlist;            /* partitions with a batch unsent or unanswered */
    uint32_t njlist;
    lg_part *jlast;             /* the partition last appended to; NULL: none */
    uint32_t nfenced, nfull, njstalled; /* partitions fenced, full, stalled */
    uint64_t bat_next;          /* next batch id */
    bool journal_full;          /* some partition's unsent batch is full */
    fq_u64map *gone;            /* runs let go with their partition whose dispatch is
                                   unanswered, by sequence */
    lg_run **scratch;           /* a release's runs */
    size_t nscratch, scratch_cap;

    fq_ledger_tenant *dirty;    /* tenants reconciled this turn */
    fq_ledger_tenant *debt_head, *debt_tail;
    uint64_t debtors;

    lg_later *later;
    size_t nlater, later_cap;
    bool fresh;

    lg_act *acts;
    size_t nacts, next_act, acts_cap;
    lg_grave *graves;           /* bodies given up while actions may still point at them:
                                   freed once the actions are drained */
    size_t ngraves, graves_cap;
    size_t nbodies;             /* bodies held by runs: graves_cap is kept at least
                                   ngraves + nbodies, so that burying one cannot fail */
    lg_names *names_dead;       /* names given up likewise */

    uint64_t held, index_only, buffered_bytes;
    uint64_t holders;           /* tenants holding submits (held > 0) */
    fq_u64map *back;            /* runs given back, by sequence */
    fq_ledger_tenant *gate_head, *gate_tail;    /* tenants with runs given back */
    uint64_t ngates;            /* those tenants */
    bool fetch_paused;
    bool paused[2];             /* as last told: FQ_LEDGER_SUBMIT, FQ_LEDGER_DONE */
    double rate_tokens;
    uint64_t fail_since;        /* monotonic ms dispatch failures began; 0: none */
    bool stalled;
    uint64_t done_copy_sec;     /* monotonic second of the copies below */
    uint32_t done_copies;
    uint64_t synth;             /* next synthetic id */
    lg_run *loaded;             /* runs read back, in order, until fq_ledger_recovered */
    lg_run *loaded_tail;
    uint64_t now;               /* of the call under way (monotonic ms) */
    int64_t now_ms;             /* ... unix ms */
    fq_ledger_counters c;
};

/* ---- helpers ------------------------------------------------------------- */

/* Room for need elements in *arr (fq_grow). */
static bool lg_grow(void *arr, size_t *cap, size_t need, size_t size)
{
    return fq_grow(arr, cap, need, size) == FQ_OK;
}

/* A new action at the list's tail, zeroed but for its type; NULL when out
 * of memory (the action is lost: an ack costs a redelivery, de-duplicated;
 * a publish is retried by whoever waits for it). */
static fq_ledger_act *lg_act_new(fq_ledger *l, enum fq_ledger_act_type type)
{
    if (!lg_grow(&l->acts, &l->acts_cap, l->nacts + 1, sizeof *l->acts))
        return NULL;
    lg_act *x = &l->acts[l->nacts++];
    memset(&x->a, 0, sizeof x->a);
    x->text[0] = '\0';
    x->a.type = type;
    return &x->a;
}

static lg_act *lg_act_of(fq_ledger_act *a)
{
    return (lg_act *)(void *)a;     /* a is the first member */
}

static fq_ledger_act *lg_note(fq_ledger *l, enum fq_ledger_note note)
{
    fq_ledger_act *a = lg_act_new(l, FQ_LACT_NOTE);
    if (a)
        a->note = note;
    return a;
}

static void lg_free(fq_ledger *l, void *p, size_t n);
static void lg_ack(fq_ledger *l, enum fq_ledger_cons cons, const fq_ledger_ackref *a);

static void lg_graves_free(fq_ledger *l)
{
    for (size_t i = 0; i < l->ngraves; i++)
        lg_free(l, l->graves[i].block, l->graves[i].size);
    l->ngraves = 0;
    for (lg_names *n = l->names_dead, *nx; n; n = nx) {
        nx = n->dead;
        fq_opool_free(&l->names_pool, n);
    }
    l->names_dead = NULL;
}

const fq_ledger_act *fq_ledger_next(fq_ledger *l)
{
    if (l->next_act == l->nacts) {
        l->nacts = l->next_act = 0;
        lg_graves_free(l);
        return NULL;
    }
    lg_act *x = &l->acts[l->next_act++];
    if (x->a.type == FQ_LACT_DISPATCH) {
        fq_ledger_dispatch_hdrs(&x->d, x->a.tenant, x->a.run_id, x->a.workflow,
                                x->a.subtenant, x->a.est,
                                x->a.submitted_ms > 0 ? (uint64_t)x->a.submitted_ms : 0,
                                x->a.dispatched_ms > 0 ? (uint64_t)x->a.dispatched_ms : 0,
                                x->a.possible_dup);
        x->a.hdrs = x->d.h;
        x->a.n_hdrs = x->d.n;
    }
    if (x->a.type == FQ_LACT_REFUSE)
        x->a.sentence = x->text;
    return &x->a;
}

bool fq_ledger_token_ours(uint64_t token)
{
    int k = FQ_LEDGER_TOKEN_KIND(token);
    return k >= FQ_LTK_DISPATCH && k < FQ_LTK_CALLER;
}

void fq_ledger_dispatch_hdrs(fq_ledger_dhdrs *d, const char *tenant, const char *run_id,
                             const char *workflow, const char *subtenant, uint64_t est,
                             uint64_t submitted_ms, uint64_t dispatched_ms, bool possible_dup)
{
    fq_u64_dec(d->est, est);
    fq_u64_dec(d->sat, submitted_ms);
    fq_u64_dec(d->dat, dispatched_ms);
    size_t tl = strnlen(tenant, FQ_TENANT_MAX), rl = strnlen(run_id, FQ_RUN_ID_MAX);
    memcpy(d->msgid, tenant, tl);
    d->msgid[tl] = '/';
    memcpy(d->msgid + tl + 1, run_id, rl);
    d->msgid[tl + 1 + rl] = '\0';
    d->h[0] = (fq_ledger_hdr){"Nats-Msg-Id", d->msgid};
    d->h[1] = (fq_ledger_hdr){FQ_HDR_TENANT, tenant};
    d->h[2] = (fq_ledger_hdr){FQ_HDR_RUN_ID, run_id};
    d->h[3] = (fq_ledger_hdr){FQ_HDR_EST_TOKENS, d->est};
    d->h[4] = (fq_ledger_hdr){FQ_HDR_SUBMITTED_AT, d->sat};
    d->h[5] = (fq_ledger_hdr){FQ_HDR_DISPATCHED_AT, d->dat};
    d->n = 6;
    if (workflow[0])
        d->h[d->n++] = (fq_ledger_hdr){FQ_HDR_WORKFLOW, workflow};
    if (subtenant[0])
        d->h[d->n++] = (fq_ledger_hdr){FQ_HDR_SUBTENANT, subtenant};
    if (possible_dup)
        d->h[d->n++] = (fq_ledger_hdr){FQ_HDR_POSSIBLE_DUPLICATE, "true"};
}

/* The hash of (tenant, run_id) under the ledger's key, never 0. The
 * completed set decides on this hash alone, so a client must not be able
 * to choose a run id whose hash is another tenant's run's: hence a keyed
 * hash, with a key drawn for each process (every table it keys is rebuilt
 * at start). */
static uint64_t lg_key(const fq_ledger *l, const char *tenant, const char *run_id)
{
    char k[FQ_TENANT_MAX + 1 + FQ_RUN_ID_MAX];
    size_t tl = strnlen(tenant, FQ_TENANT_MAX), rl = strnlen(run_id, FQ_RUN_ID_MAX);
    memcpy(k, tenant, tl);
    k[tl] = (char)0xff;         /* a separator no id contains */
    memcpy(k + tl + 1, run_id, rl);
    uint64_t h = fq_siphash(l->o.hash_key[0], l->o.hash_key[1], k, tl + 1 + rl);
    return h ? h : 1;
}

/* ---- partitions -------------------------------------------------------- */

uint32_t fq_ledger_part_of(const fq_ledger *l, const char *tenant)
{
    return l->nparts > 1 ? fq_partition_of(tenant, strnlen(tenant, FQ_TENANT_MAX), l->nparts)
                         : 0;
}

/* lt's partition, computed once. */
static uint32_t lg_lt_part(const fq_ledger *l, fq_ledger_tenant *lt)
{
    if (l->nparts <= 1)
        return 0;
    if (!lt->part1)
        lt->part1 = fq_ledger_part_of(l, lt->id) + 1;
    return lt->part1 - 1;
}

static lg_part *lg_pp(fq_ledger *l, fq_ledger_tenant *lt)
{
    return &l->parts[lg_lt_part(l, lt)];
}

static bool lg_unowned(fq_ledger *l, const char *tenant, const fq_ledger_ackref *ack);
static bool lg_reading(const fq_ledger *l, uint32_t part);
static lg_run *lg_gone_find(const fq_ledger *l, uint64_t seq);
static void lg_gone_settle(fq_ledger *l, lg_run *x);

/* A token of a refusal or a batch: its partition beside v. */
static uint64_t lg_token(int kind, uint32_t part, uint64_t v)
{
    return FQ_LEDGER_TOKEN(kind, ((uint64_t)part << LG_TOKEN_PART_SHIFT) | (v & LG_TOKEN_LOW));
}

static uint32_t lg_token_part(uint64_t v)
{
    return (uint32_t)((v & ~LG_TOKEN_HELD) >> LG_TOKEN_PART_SHIFT);
}

/* The run id a run goes by: the producer's, or one derived from the submit
 * stream (its creation time keeps ids apart if the stream is recreated). */
void fq_ledger_run_id(char *out, const fq_ledger *l, const fq_submit *sub, uint64_t seq)
{
    if (sub->run_id[0])
        snprintf(out, FQ_RUN_ID_MAX + 1, "%s", sub->run_id);
    else
        snprintf(out, FQ_RUN_ID_MAX + 1, "fq-%" PRId64 "-%" PRIu64,
                 l->o.submit_created_ms / 1000, seq);
}

/* ---- pools --------------------------------------------------------------- */

static lg_run *lg_run_alloc(fq_ledger *l)
{
    lg_run *x = fq_opool_alloc(&l->run_pool);
    if (x)
        memset(x, 0, sizeof *x);
    return x;
}

static void *lg_alloc(fq_ledger *l, size_t n)
{
    return l->o.alloc.alloc ? l->o.alloc.alloc(l->o.alloc.arg, n) : malloc(n);
}

static void lg_free(fq_ledger *l, void *p, size_t n)
{
    if (!p)
        return;
    if (l->o.alloc.free)
        l->o.alloc.free(l->o.alloc.arg, p, n);
    else
        free(p);
}

/* The fields at the front of x's block, which x has. */
static const lg_block *lg_blk(const lg_run *x)
{
    return (const lg_block *)(const void *)x->body;
}

/* Bytes of x's block; 0: none. */
static size_t lg_block_size(const lg_run *x)
{
    if (x->refusing && x->body) {
        const lg_kept_refusal *f = (const lg_kept_refusal *)(const void *)x->body;
        return sizeof *f + f->text_len + 1u + f->hdr_len + f->body_len;
    }
    const lg_block *b = lg_blk(x);
    return b ? sizeof *b + b->id_len + b->wf_len + b->sub_len + b->hdr_len + b->body_len : 0;
}

/* x's kept bytes as a dispatch carries them. */
static fq_ledger_bytes lg_block_bytes(const lg_run *x)
{
    const lg_block *b = lg_blk(x);
    const unsigned char *h = x->body + sizeof *b + b->id_len + b->wf_len + b->sub_len;
    return (fq_ledger_bytes){h, b->hdr_len, h + b->hdr_len, b->body_len};
}

/* Give back x's body block, if it has one, once the actions that may
 * point at it are drained. */
static void lg_body_drop(fq_ledger *l, lg_run *x)
{
    if (!x->body)
        return;
    /* Room reserved when the body was taken (lg_body_room): never freed
     * here, where a refusal's action may still point at it. The check
     * only keeps a broken count from writing past the array. */
    if (l->ngraves < l->graves_cap)
        l->graves[l->ngraves++] = (lg_grave){x->body, lg_block_size(x)};
    else
        lg_free(l, x->body, lg_block_size(x));
    l->nbodies--;
    x->body = NULL;
}

/* Room in the graveyard for one more body, reserved before it is taken,
 * so that lg_body_drop cannot fail (strmap's reserve, then an insert that
 * cannot fail); false when out of memory: the body is not taken. */
static bool lg_body_room(fq_ledger *l)
{
    return lg_grow(&l->graves, &l->graves_cap, l->ngraves + l->nbodies + 1, sizeof *l->graves);
}

/* Free x once no index and no pending publish refers to it. */
static void lg_maybe_free(fq_ledger *l, lg_run *x)
{
    if (x->in_seq || x->in_key || x->pending)
        return;
    lg_body_drop(l, x);
    if (x->names) {
        x->names->dead = l->names_dead;
        l->names_dead = x->names;
    }
    fq_opool_free(&l->run_pool, x);
}

/* x, taken by the scheduler, goes back to the head of its tenant's queue
 * (fq_sched_requeue_run): its next dispatch is another, not stored yet. */
static void lg_requeue_run(fq_ledger *l, lg_run *x)
{
    x->stored = false;
    fq_sched_requeue_run(l->o.sched, &x->run);
}

/* ---- indexes ------------------------------------------------------------- */

static lg_run *lg_find_seq(const fq_ledger *l, uint64_t seq)
{
    fq_u64map_node *n = fq_u64map_find(l->by_seq, seq);
    return n ? FQ_U64MAP_ENTRY(n, lg_run, run.hnode) : NULL;
}

/* Whether x goes by run_id: its names, else its kept block's; a queued
 * run whose body is not in memory has neither, and is matched by tenant
 * and hash alone. */
static bool lg_is_run_id(const lg_run *x, const char *run_id)
{
    if (x->names)
        return strcmp(x->names->run_id, run_id) == 0;
    if (!x->body)
        return true;
    const lg_block *b = lg_blk(x);
    return strlen(run_id) == b->id_len && memcmp(b + 1, run_id, b->id_len) == 0;
}

/* The run of key (tenant, run_id), hash h: queued or dispatched. */
static lg_run *lg_find_key(const fq_ledger *l, const char *tenant, const char *run_id, uint64_t h)
{
    for (fq_u64map_node *n = fq_u64map_find(l->by_key, h); n; n = fq_u64map_find_next(l->by_key, n)) {
        lg_run *x = FQ_U64MAP_ENTRY(n, lg_run, key_node);
        if (strcmp(x->lt->id, tenant) == 0 && lg_is_run_id(x, run_id))
            return x;
    }
    return NULL;
}

static bool lg_seq_add(fq_ledger *l, lg_run *x)
{
    x->part = (uint16_t)lg_lt_part(l, x->lt);
    if (fq_u64map_reserve(l->by_seq) != FQ_OK)
        return false;
    fq_u64map_insert(l->by_seq, &x->run.hnode);
    x->in_seq = true;
    return true;
}

static void lg_seq_del(fq_ledger *l, lg_run *x)
{
    if (x->in_seq) {
        fq_u64map_remove(l->by_seq, &x->run.hnode);
        x->in_seq = false;
    }
}

/* Index x by its key, unless out of memory. */
static void lg_key_add(fq_ledger *l, lg_run *x)
{
    x->part = (uint16_t)lg_lt_part(l, x->lt);
    if (fq_u64map_reserve(l->by_key) != FQ_OK)
        return;
    fq_u64map_insert(l->by_key, &x->key_node);
    x->in_key = true;
    x->lt->keyed++;
}

static void lg_key_del(fq_ledger *l, lg_run *x)
{
    if (x->in_key) {
        fq_u64map_remove(l->by_key, &x->key_node);
        x->in_key = false;
        x->lt->keyed--;
    }
}

/* ---- the set of completed run keys ------------------------------------- */

/* Until when (monotonic ms) what is remembered now for keep_done_ms is:
 * completed ids, refusals, early completions. Not by the wall clock: a step
 * of it forward would forget a completed id while JetStream, by the
 * server's clock, still de-duplicates its run's Nats-Msg-Id, and a submit
 * reusing the id would be admitted, its dispatch answered a duplicate and
 * acked undelivered. FQ_LEDGER_CLOCK_MARGIN_MS longer, for what still
 * separates our monotonic clock from the server's within one window (the
 * rates' drift, a step back of the server's wall clock, which lengthens
 * its window): the assumption is that those add up to less than the
 * margin, as the lease assumes its own margin covers them (lib/lease.h). */
static int64_t lg_keep_until(const fq_ledger *l)
{
    return (int64_t)(l->now + l->o.keep_done_ms + FQ_LEDGER_CLOCK_MARGIN_MS);
}

/* The same for a record read back, stored at stored_ms (the server's unix
 * ms): what is left of its keep_done_ms by the wall clock now, from now on
 * the monotonic clock (the one reading of the two clocks against each
 * other, at read-back), with the same margin: it covers our wall clock
 * ahead of the server's by less than it, less what the monotonic clocks
 * use of it afterwards. The timestamp, not the stream sequence (which
 * orders debts, lg_load_debt): what is bounded is an age, which a
 * sequence does not carry. stored_ms is the clock of the node that led the
 * stream then; one behind ours (a leader changed to a node whose clock
 * lags) shortens what is left by as much, and the margin covers that too:
 * within it, in all, as for NTP-kept clocks (docs/protocol.md section 8). */
static int64_t lg_stored_until(const fq_ledger *l, int64_t stored_ms)
{
    return (int64_t)l->now + (stored_ms + (int64_t)l->o.keep_done_ms +
                              FQ_LEDGER_CLOCK_MARGIN_MS - l->now_ms);
}

static lg_done *lg_done_find(const fq_ledger *l, uint64_t h)
{
    return (lg_done *)(void *)fq_kept_find(&l->done, h);
}

/* Remember key h (of submit seq, partition part) as completed until
 * until (monotonic ms), its dispatch unconfirmed or not. Out of memory it is not
 * remembered: a duplicate may then be dispatched again, and JetStream's
 * de-duplication still stops it within its window. */
static void lg_done_add(fq_ledger *l, uint64_t h, uint64_t seq, int64_t until, uint32_t part,
                        bool unconfirmed)
{
    lg_done *d = lg_done_find(l, h);
    if (d) {
        /* Kept in its place in the FIFO: remembered longer is harmless. */
        d->seq = seq;
        d->unconfirmed = unconfirmed;
        if (until > d->k.until)
            d->k.until = until;
        return;
    }
    if (!(d = (lg_done *)(void *)fq_kept_add(&l->done, h, until)))
        return;
    d->seq = seq;
    d->part = part;
    d->unconfirmed = unconfirmed;
}

/* Forget the completed keys whose time has come, oldest first. */
static void lg_done_forget(fq_ledger *l, int64_t now)
{
    while (fq_kept_due(&l->done, now))
        fq_kept_drop(&l->done);
}

/* ---- completions that came before their run --------------------------- */

/* Forget the oldest early completion; unless lg_early_take took it
 * already, ack it unapplied. */
static void lg_early_drop_head(fq_ledger *l)
{
    lg_early *e = (lg_early *)(void *)l->early.head;
    if (e->k.until != INT64_MIN)
        lg_ack(l, FQ_LEDGER_DONE, &e->ack);
    fq_kept_drop(&l->early);
}

static lg_early *lg_early_find(const fq_ledger *l, uint64_t h)
{
    return (lg_early *)(void *)fq_kept_find(&l->early, h);
}

/* Remember completion c (delivery ack, stored in FAIR_DONE at stored_ms,
 * unix ms, 0: unknown) of run key h, which came before its run, unacked;
 * the oldest is acked and forgotten past FQ_LEDGER_EARLY_MAX (a flood of
 * forged ones holds no more memory, nor more of the done consumer's
 * MaxAckPending). Kept keep_done_ms from its storing, not from our first
 * sight: its run's dispatch was stored before it, so past that a dispatch
 * of the run is stored new, never answered duplicate; and counted from
 * each leader's own first sight, with leaders changing faster than
 * keep_done_ms none of them was ever acked, and a worker's late completion
 * came back behind them too late (dst_ledger seeds 859 and 1344). false:
 * not remembered (one for h is already, or no memory): the caller acks it. */
static bool lg_early_add(fq_ledger *l, uint64_t h, const fq_completion *c,
                         const fq_ledger_ackref *ack, int64_t stored_ms)
{
    lg_early *e;
    if (lg_early_find(l, h))
        return false;
    while (l->early.head && fq_kept_count(&l->early) >= FQ_LEDGER_EARLY_MAX)
        lg_early_drop_head(l);
    int64_t until = lg_keep_until(l);
    if (stored_ms > 0 && lg_stored_until(l, stored_ms) < until)
        until = lg_stored_until(l, stored_ms);
    if (!(e = (lg_early *)(void *)fq_kept_add(&l->early, h, until)))
        return false;
    e->actual = c->actual_tokens;
    e->input = c->input_tokens;
    e->output = c->output_tokens;
    e->cached = c->cached_tokens;
    e->kinds = c->kinds;
    e->status = (uint8_t)c->status;
    e->ack = *ack;
    l->c.completions_early++;
    return true;
}

/* Take e out of the map: the caller applies or acks it. It stays valid
 * until lg_early_forget reaches it in the FIFO. */
static void lg_early_take(fq_ledger *l, lg_early *e)
{
    fq_kept_take(&l->early, &e->k);
}

/* Forget the early completions whose time has come (and those taken). */
static void lg_early_forget(fq_ledger *l, int64_t now)
{
    while (fq_kept_due(&l->early, now))
        lg_early_drop_head(l);
}

/* ---- submits refused for the state of the moment ------------------------ */

static lg_refused *lg_refused_find(const fq_ledger *l, uint64_t seq)
{
    return (lg_refused *)(void *)fq_kept_find(&l->refused, seq);
}

/* Remember submit seq (partition part) as refused for code until
 * until (monotonic ms); past FQ_LEDGER_REFUSED_MAX the oldest is forgotten (counted),
 * and out of memory it is not remembered: delivered again, it is then
 * decided anew. */
static void lg_refused_add(fq_ledger *l, uint64_t seq, fq_status code, uint32_t part,
                           int64_t until)
{
    lg_refused *r = lg_refused_find(l, seq);
    if (r) {
        r->code = code;
        if (until > r->k.until)
            r->k.until = until;
        return;
    }
    while (l->refused.head && fq_kept_count(&l->refused) >= FQ_LEDGER_REFUSED_MAX) {
        fq_kept_drop(&l->refused);
        l->c.refusals_forgotten_early++;
    }
    if (!(r = (lg_refused *)(void *)fq_kept_add(&l->refused, seq, until)))
        return;
    r->part = part;
    r->code = code;
}

static void lg_refused_forget(fq_ledger *l, int64_t now)
{
    while (fq_kept_due(&l->refused, now))
        fq_kept_drop(&l->refused);
}

/* ---- acks ---------------------------------------------------------------- */

/* Whether partition part was let go (or is none of the deployment's): its
 * consumer is gone, and what it delivered is the next owner's to answer. */
static bool lg_let_go(const fq_ledger *l, uint32_t part)
{
    return part >= l->nparts || l->parts[part].state == LG_PART_FREE;
}

/* Whether partition part may act now (ack, nak, journal, dispatch its
 * tenants' runs): the ledger fresh and, once told, part's own lease
 * fresh at l->now. Another partition's stale lease holds nothing of
 * part's. */
static bool lg_fresh(const fq_ledger *l, uint32_t part)
{
    return l->fresh && (part >= l->nparts || l->now < l->parts[part].fence);
}

static void lg_hold(fq_ledger *l, enum fq_ledger_cons cons, const fq_ledger_ackref *a, bool nak,
                    uint32_t delay_ms)
{
    if (lg_let_go(l, a->part))
        return;
    if (!lg_grow(&l->later, &l->later_cap, l->nlater + 1, sizeof *l->later))
        return;     /* out of memory: a lost ack costs a redelivery, de-duplicated */
    l->later[l->nlater++] = (lg_later){cons, *a, nak, delay_ms};
    l->parts[a->part].nlater++;
}

/* Ack a delivery; held back, in its partition's order, while its
 * partition is not fresh: if the lease is lost instead, the next owner's
 * consumer gets the message again and its journal says it was handled. */
static void lg_ack(fq_ledger *l, enum fq_ledger_cons cons, const fq_ledger_ackref *a)
{
    if (lg_let_go(l, a->part))
        return;
    if (l->parts[a->part].nlater || !lg_fresh(l, a->part)) {
        lg_hold(l, cons, a, false, 0);
        return;
    }
    fq_ledger_act *x = lg_act_new(l, FQ_LACT_ACK);
    if (x) {
        x->cons = cons;
        x->ack = *a;
    }
}

static void lg_ack_seq(fq_ledger *l, enum fq_ledger_cons cons, uint64_t seq, uint32_t part)
{
    fq_ledger_ackref a = {.sseq = seq, .delivered = 1, .part = part};
    lg_ack(l, cons, &a);
}

/* Ack the message a refusal's token v names. */
static void lg_ack_token(fq_ledger *l, enum fq_ledger_cons cons, uint64_t v)
{
    lg_ack_seq(l, cons, v & LG_TOKEN_LOW, lg_token_part(v));
}

/* A nak changes shared state like an ack: held back while not fresh, and
 * sent once fresh again. Dropped, the delivery would come back only after
 * its consumer's AckWait (an hour) when no consumer reset comes: the lease
 * renewed late, in the same term (dst_ledger seed 3937, a refusal not
 * queued). */
static void lg_nak(fq_ledger *l, enum fq_ledger_cons cons, const fq_ledger_ackref *a,
                   uint32_t delay_ms)
{
    if (lg_let_go(l, a->part))
        return;
    if (!lg_fresh(l, a->part)) {
        lg_hold(l, cons, a, true, delay_ms);
        return;
    }
    fq_ledger_act *x = lg_act_new(l, FQ_LACT_NAK);
    if (x) {
        x->cons = cons;
        x->ack = *a;
        x->delay_ms = delay_ms;
    }
}

void fq_ledger_ack_failed(fq_ledger *l, const fq_ledger_act *a)
{
    if (a->type == FQ_LACT_ACK) {
        fq_ledger_ackref ack = a->ack;  /* a may live in the list */
        lg_hold(l, a->cons, &ack, false, 0);
    }
}

/* Send the acks and naks held of each partition fresh now, in order; a
 * stale partition's stay held, in order, and hold nothing of the others'. */
static void lg_acks_later(fq_ledger *l)
{
    if (!l->fresh || !l->nlater)
        return;
    size_t n = l->nlater, kept = 0;
    bool full = false;
    for (size_t i = 0; i < n; i++) {
        lg_later *h = &l->later[i];
        fq_ledger_act *x = NULL;
        if (!full && lg_fresh(l, h->a.part))
            full = !(x = lg_act_new(l, h->nak ? FQ_LACT_NAK : FQ_LACT_ACK));
        if (!x) {
            /* Kept, in order, for a later turn (out of memory: the rest
             * too). */
            l->later[kept++] = *h;
            continue;
        }
        x->cons = h->cons;
        x->ack = h->a;
        x->delay_ms = h->delay_ms;
        l->parts[h->a.part].nlater--;
    }
    l->nlater = kept;
}

void fq_ledger_set_fresh(fq_ledger *l, bool fresh)
{
    l->fresh = fresh;
}

void fq_ledger_set_part_fence(fq_ledger *l, uint32_t part, uint64_t until)
{
    if (part < l->nparts)
        l->parts[part].fence = until;
}

/* ---- fetching paused ----------------------------------------------------- */

static void lg_pause(fq_ledger *l, enum fq_ledger_cons cons, bool paused)
{
    if (l->paused[cons] == paused)
        return;
    fq_ledger_act *a = lg_act_new(l, FQ_LACT_PAUSE);
    if (!a)
        return;
    l->paused[cons] = paused;
    a->cons = cons;
    a->paused = paused;
}

static void lg_pause_check(fq_ledger *l)
{
    bool full = l->held >= l->o.max_buffered_runs;
    if (full != l->fetch_paused) {
        l->fetch_paused = full;
        if (full) {
            l->c.fetch_pauses++;
            fq_ledger_act *a = lg_note(l, FQ_LNOTE_FETCH_PAUSED);
            if (a)
                a->n = l->held;
        }
    }
    lg_pause(l, FQ_LEDGER_SUBMIT, l->fetch_paused || l->journal_full);
}

/* ---- the buffer shared ---------------------------------------------------- */

/* One submit more (or less) held, of tenant lt. */
static void lg_held(fq_ledger *l, fq_ledger_tenant *lt, bool more)
{
    if (more) {
        l->held++;
        l->holders += lt->held++ == 0;
    } else {
        l->held--;
        l->holders -= --lt->held == 0;
    }
}

/* Past this many held the buffer is shared: three quarters of
 * max_buffered_runs, the last quarter kept for tenants under their share. */
static uint64_t lg_fill_line(const fq_ledger *l)
{
    return l->o.max_buffered_runs - l->o.max_buffered_runs / 4;
}

/* Past the fill line a tenant that holds runs is admitted (under its
 * share) only up to half way to max_buffered_runs: the rest is for tenants
 * that hold nothing, however the others' runs came in below the line. */
static uint64_t lg_holders_line(const fq_ledger *l)
{
    uint64_t line = lg_fill_line(l);
    return line + (l->o.max_buffered_runs - line + 1) / 2;
}

/* lt's share of a full buffer: the fill line divided among the tenants
 * holding runs (lt among them), at least FQ_LEDGER_SHARE_FLOOR. */
static uint64_t lg_share(const fq_ledger *l, const fq_ledger_tenant *lt)
{
    uint64_t n = l->holders + (lt->held == 0);
    uint64_t share = lg_fill_line(l) / n;
    return share > FQ_LEDGER_SHARE_FLOOR ? share : FQ_LEDGER_SHARE_FLOOR;
}

/* Whether a submit of lt is held now: below the fill line, or under its
 * share and, if it holds any, below the holders' line. A tenant holding
 * nothing is held however full the buffer, even at max_buffered_runs
 * (fetching paused, what was fetched before arriving): one run each. */
static bool lg_under_share(const fq_ledger *l, const fq_ledger_tenant *lt)
{
    if (l->held < lg_fill_line(l) || !lt->held)
        return true;
    return lt->held < lg_share(l, lt) && l->held < lg_holders_line(l);
}

/* Runs lt may be given now: up to the fill line, or up to its share. */
static uint64_t lg_room(const fq_ledger *l, const fq_ledger_tenant *lt)
{
    uint64_t line = lg_fill_line(l), share = lg_share(l, lt);
    uint64_t cap = lt->held ? lg_holders_line(l) : l->o.max_buffered_runs;
    uint64_t room = l->held < line ? line - l->held : 0;
    if (share > lt->held && l->held < cap) {
        uint64_t r = share - lt->held < cap - l->held ? share - lt->held : cap - l->held;
        room = r > room ? r : room;
    }
    return room;
}

static void lg_gate_link(fq_ledger *l, fq_ledger_tenant *lt)
{
    l->ngates++;
    lt->gate_next = NULL;
    lt->gate_prev = l->gate_tail;
    if (l->gate_tail)
        l->gate_tail->gate_next = lt;
    else
        l->gate_head = lt;
    l->gate_tail = lt;
}

static void lg_gate_unlink(fq_ledger *l, fq_ledger_tenant *lt)
{
    l->ngates--;
    if (lt->gate_prev)
        lt->gate_prev->gate_next = lt->gate_next;
    else
        l->gate_head = lt->gate_next;
    if (lt->gate_next)
        lt->gate_next->gate_prev = lt->gate_prev;
    else
        l->gate_tail = lt->gate_prev;
    lt->gate_prev = lt->gate_next = NULL;
}

static lg_back *lg_back_find(const fq_ledger *l, uint64_t seq)
{
    fq_u64map_node *n = fq_u64map_find(l->back, seq);
    return n ? FQ_U64MAP_ENTRY(n, lg_back, node) : NULL;
}

/* Remember run seq of lt as given back, in its place by sequence (a new
 * one is the last: the stream is fetched in order). NULL: no memory. */
static lg_back *lg_back_add(fq_ledger *l, fq_ledger_tenant *lt, uint64_t seq)
{
    lg_back *b;
    if (fq_u64map_reserve(l->back) != FQ_OK || !(b = fq_opool_alloc(&l->back_pool)))
        return NULL;
    *b = (lg_back){.seq = seq};
    fq_u64map_insert(l->back, &b->node);
    if (!lt->back_head) {
        lt->back_head = lt->back_tail = b;
        lg_gate_link(l, lt);
    } else if (seq > lt->back_tail->seq) {
        lt->back_tail->next = b;
        lt->back_tail = b;
    } else if (seq < lt->back_head->seq) {
        b->next = lt->back_head;
        lt->back_head = b;
    } else {
        /* Between (naked before for another reason): rare, walked. */
        lg_back *p = lt->back_head;
        while (p->next && p->next->seq < seq)
            p = p->next;
        b->next = p->next;
        p->next = b;
    }
    lt->back++;
    return b;
}

/* lt's first run given back is admitted, or lost. */
static void lg_back_pop(fq_ledger *l, fq_ledger_tenant *lt)
{
    lg_back *b = lt->back_head;
    lt->back_head = b->next;
    if (!lt->back_head) {
        lt->back_tail = NULL;
        lg_gate_unlink(l, lt);
    }
    lt->back--;
    fq_u64map_remove(l->back, &b->node);
    fq_opool_free(&l->back_pool, b);
}

/* The delay of a run given back: FQ_LEDGER_BACK_MS, doubling with each
 * delivery up to FQ_LEDGER_BACK_MAX_MS. What brings it back sooner is a
 * recall, once its tenant has room. */
static uint32_t lg_back_delay(uint32_t delivered)
{
    uint32_t k = delivered > 1 ? delivered - 1 : 0;
    uint64_t d = (uint64_t)FQ_LEDGER_BACK_MS << (k < 8 ? k : 8);
    return d < FQ_LEDGER_BACK_MAX_MS ? (uint32_t)d : FQ_LEDGER_BACK_MAX_MS;
}

/* Whether submit sseq of tenant lt is given back rather than held: it
 * comes after a run of lt given back and not yet admitted, or the buffer is
 * past its fill line and lt holds its share (or holds runs and the buffer
 * is past the holders' line). Changes nothing. */
static bool lg_gives_back(const fq_ledger *l, const fq_ledger_tenant *lt, uint64_t sseq)
{
    const lg_back *head = lt->back_head;
    if (head && sseq < head->seq)
        return false;           /* before all of them: in its place */
    return !lg_under_share(l, lt) || (head && sseq != head->seq);
}

/* Submit sseq of lt is not given back: if it is lt's first run given
 * back, come again with room, it is admitted and awaited no longer. */
static void lg_back_came(fq_ledger *l, fq_ledger_tenant *lt, uint64_t sseq)
{
    if (lt->back_head && lt->back_head->seq == sseq)
        lg_back_pop(l, lt);
}

/* Give submit a of lt back to FAIR_SUBMIT (a nak with a delay), awaited
 * in its place among lt's runs given back. */
static void lg_give_back(fq_ledger *l, fq_ledger_tenant *lt, const fq_ledger_ackref *a)
{
    lg_back *b = lt->back_head ? lg_back_find(l, a->sseq) : NULL;
    if (!b)
        b = lg_back_add(l, lt, a->sseq);
    if (b) {
        b->ack = *a;
        b->recalled_at = 0;
        b->tries = 0;
    }
    /* Without memory to remember it, it is given back all the same: its
     * order is then kept only if it comes before lt's later runs. */
    l->c.given_back++;
    lg_nak(l, FQ_LEDGER_SUBMIT, a, lg_back_delay(a->delivered));
}

/* Ask back, in order, the runs given back of tenants that have room now
 * (a nak without delay: redelivered at once, before new messages, in the
 * order of the naks), FQ_LEDGER_GATES_PER_TURN tenants a tick in turn. A
 * first one asked FQ_LEDGER_RECALL_TRIES times without coming is gone
 * from the stream (purged): forgotten, so that the others move on. */
static void lg_recall(fq_ledger *l)
{
    if (!l->fresh || l->paused[FQ_LEDGER_SUBMIT])
        return;
    uint64_t todo = l->ngates < FQ_LEDGER_GATES_PER_TURN ? l->ngates : FQ_LEDGER_GATES_PER_TURN;
    for (uint64_t k = 0; k < todo && l->gate_head; k++) {
        fq_ledger_tenant *lt = l->gate_head;
        if (!lg_fresh(l, lg_lt_part(l, lt))) {
            /* its partition stale: asked back once it is fresh, its tries
             * not spent meanwhile */
            lg_gate_unlink(l, lt);
            lg_gate_link(l, lt);
            continue;
        }
        lg_back *h = lt->back_head;
        while (h && h->tries >= FQ_LEDGER_RECALL_TRIES &&
               l->now - h->recalled_at >= FQ_LEDGER_RECALL_AGAIN_MS) {
            l->c.given_back_lost++;
            lg_back_pop(l, lt);
            h = lt->back_head;
        }
        if (!lt->back_head)
            continue;           /* unlinked by its last pop */
        uint64_t room = lg_room(l, lt);
        uint32_t n = 0;
        for (lg_back *b = lt->back_head; b && n < room && n < FQ_LEDGER_RECALL_MAX; b = b->next, n++) {
            if (b->recalled_at && l->now - b->recalled_at < FQ_LEDGER_RECALL_AGAIN_MS)
                continue;
            b->recalled_at = l->now ? l->now : 1;
            b->tries++;
            l->c.recalled++;
            lg_nak(l, FQ_LEDGER_SUBMIT, &b->ack, 0);
        }
        /* Its turn is over: to the tail. */
        lg_gate_unlink(l, lt);
        lg_gate_link(l, lt);
    }
}

/* ---- the journal --------------------------------------------------------- */

static void lg_settled(fq_ledger *l, lg_run *x);

/* List pp among the partitions with a batch unsent or unanswered. */
static void lg_jlist_add(fq_ledger *l, lg_part *pp)
{
    if (pp->listed)
        return;
    pp->listed = true;
    l->jlist[l->njlist++] = (uint32_t)(pp - l->parts);
}

/* The batch being written in pp, begun when none is. */
static lg_batch *lg_batch_cur(fq_ledger *l, lg_part *pp)
{
    if (pp->cur)
        return pp->cur;
    lg_batch *b = &pp->bat[0] == pp->sent ? &pp->bat[1] : &pp->bat[0];
    b->id = l->bat_next++;
    b->nruns = b->ndones = 0;
    b->sent = false;
    b->retry_at = 0;
    fq_jbatch_clear(&b->jb);
    pp->cur = b;
    lg_jlist_add(l, pp);
    return b;
}

/* Append r to pp's batch; false (nothing appended) out of memory, or if pp
 * is not ours. */
static bool lg_journal_add(fq_ledger *l, lg_part *pp, const fq_jrec *r)
{
    if (pp->state == LG_PART_FREE)
        return false;
    l->jlast = pp;
    return fq_jbatch_append(&lg_batch_cur(l, pp)->jb, r) == FQ_OK;
}

/* Append run x's record of type (flight or expired) at at_ms. */
static bool lg_journal_run(fq_ledger *l, lg_run *x, enum fq_jrec_type type, int64_t at_ms)
{
    fq_jrec r = {.type = type, .est = x->est, .declared = x->names->declared,
                 .seq = x->run.id < FQ_LEDGER_SYNTH_ID ? x->run.id : 0, .at_ms = at_ms > 0 ? at_ms : 0};
    snprintf(r.tenant, sizeof r.tenant, "%s", x->lt->id);
    memcpy(r.run_id, x->names->run_id, sizeof r.run_id);
    memcpy(r.workflow, x->names->workflow, sizeof r.workflow);
    return lg_journal_add(l, &l->parts[x->part], &r);
}

/* The flight record of x, dispatched just now; its submit ack waits for it. */
static void lg_journal_flight(fq_ledger *l, lg_run *x, int64_t now_ms)
{
    lg_part *pp = &l->parts[x->part];
    if (!lg_journal_run(l, x, FQ_JREC_FLIGHT, now_ms) ||
        !lg_grow(&pp->cur->runs, &pp->cur->cap_runs, pp->cur->nruns + 1, sizeof(lg_run *)))
        return;     /* out of memory: it will not be adopted after a restart */
    pp->cur->runs[pp->cur->nruns++] = x;
    x->pending++;
}

/* Pause fetching while some partition's unsent batch is as large as one
 * may be, and resume after. */
static void lg_journal_check_part(fq_ledger *l, lg_part *pp)
{
    size_t len = 0;
    if (pp->cur)
        fq_jbatch_text(&pp->cur->jb, &len);
    bool full = len >= l->o.journal_room && pp->state != LG_PART_FREE;
    if (full != pp->full) {
        pp->full = full;
        l->nfull += full ? 1 : (uint32_t)-1;
    }
    full = l->nfull > 0;
    if (full != l->journal_full) {
        l->journal_full = full;
        lg_pause(l, FQ_LEDGER_SUBMIT, full || l->fetch_paused);
        lg_pause(l, FQ_LEDGER_DONE, full);
    }
}

/* ... of the partition last appended to (a dispatch's). */
static void lg_journal_check(fq_ledger *l)
{
    if (l->jlast)
        lg_journal_check_part(l, l->jlast);
}

/* ... of every partition with a batch (journal_room changed). */
static void lg_journal_check_all(fq_ledger *l)
{
    for (uint32_t i = 0; i < l->njlist; i++)
        lg_journal_check_part(l, &l->parts[l->jlist[i]]);
    lg_journal_check(l);
}

static void lg_journal_emit(fq_ledger *l, lg_part *pp, lg_batch *b)
{
    size_t len = 0;
    const char *text = fq_jbatch_text(&b->jb, &len);
    fq_ledger_act *a = lg_act_new(l, FQ_LACT_JOURNAL);
    if (!a) {
        b->retry_at = l->now + FQ_LEDGER_RETRY_MS;
        return;
    }
    uint32_t part = (uint32_t)(pp - l->parts);
    a->token = lg_token(FQ_LTK_JOURNAL, part, b->id);
    a->text = text;
    a->len = len;
    a->batch = b->id;
    a->expect_seq = pp->jseq;
    a->part = part;
    a->term = pp->term;
    b->retry_at = 0;
}

/* Send pp's current batch once the one before it is stored, expecting that
 * one's sequence; send again the one in flight when its retry is due.
 * Fenced by pp's own lease, not by every partition's (a renewal of
 * another's answered late held every partition's batches, and with them
 * a planned move's settling). */
static void lg_journal_flush_part(fq_ledger *l, lg_part *pp)
{
    if (!lg_fresh(l, (uint32_t)(pp - l->parts)) || pp->fenced || !pp->jmarked ||
        pp->state != LG_PART_OWNED)
        return;
    if (pp->sent) {
        if (pp->sent->retry_at && pp->sent->retry_at <= l->now)
            lg_journal_emit(l, pp, pp->sent);
        return;
    }
    size_t len = 0;
    if (!pp->cur || !fq_jbatch_text(&pp->cur->jb, &len))
        return;
    lg_batch *b = pp->cur;
    pp->cur = NULL;
    pp->sent = b;
    b->sent = true;
    lg_journal_emit(l, pp, b);
}

/* Flush every listed partition; one with nothing unsent or unanswered
 * leaves the list. */
static void lg_journal_flush(fq_ledger *l)
{
    for (uint32_t i = 0; i < l->njlist;) {
        lg_part *pp = &l->parts[l->jlist[i]];
        lg_journal_flush_part(l, pp);
        lg_journal_check_part(l, pp);
        if (pp->cur || pp->sent) {
            i++;
            continue;
        }
        pp->listed = false;
        l->jlist[i] = l->jlist[--l->njlist];
    }
}

static void lg_part_mark(lg_part *pp, uint64_t seq)
{
    pp->jseq = seq;
    pp->jmarked = true;
}

bool fq_ledger_part_marked(fq_ledger *l, uint32_t part, uint64_t term, uint64_t seq)
{
    if (part >= l->nparts)
        return false;
    lg_part *pp = &l->parts[part];
    /* A marker of an adoption let go since (its PubAck came late) marks
     * nothing: the adoption of now stores its own, after which an earlier
     * owner's batches are refused, and its first batch expects that one. */
    if (pp->state == LG_PART_FREE || pp->term != term || pp->jmarked)
        return false;
    lg_part_mark(pp, seq);
    return true;
}

void fq_ledger_journal_marked(fq_ledger *l, uint64_t seq)
{
    lg_part_mark(&l->parts[0], seq);
}

/* A journal batch of pp was not stored (a full store, a timeout): it is
 * sent again as it was. Failing for FQ_LEDGER_STALL_MS, the journal is
 * stalled: no submit or completion of pp is settled meanwhile. */
static void lg_journal_failed(fq_ledger *l, lg_part *pp, int js_err)
{
    if (!pp->jfail_since)
        pp->jfail_since = l->now;
    if (pp->sent)
        pp->sent->retry_at = l->now + FQ_LEDGER_RETRY_MS;
    if (l->now - pp->jfail_since >= FQ_LEDGER_STALL_MS && !pp->jstalled) {
        pp->jstalled = true;
        if (l->njstalled++)
            return;     /* noted as stalled already, for another partition */
        fq_ledger_act *a = lg_note(l, FQ_LNOTE_JOURNAL_STALLED);
        if (a) {
            a->js_err = js_err;
            a->n = l->now - pp->jfail_since;
            a->part = (uint32_t)(pp - l->parts);
        }
    }
}

/* pp's batches are stored again (or pp is let go): the journal is no
 * longer stalled once no partition's is. */
static void lg_journal_again(fq_ledger *l, lg_part *pp)
{
    if (pp->jstalled && !--l->njstalled) {
        fq_ledger_act *a = lg_note(l, FQ_LNOTE_JOURNAL_AGAIN);
        if (a)
            a->n = l->now - pp->jfail_since;
    }
    pp->jstalled = false;
    pp->jfail_since = 0;
}

/* The answer to journal batch v (its token's value). */
static void lg_journal_answer(fq_ledger *l, uint64_t v, enum fq_ledger_pub outcome, int js_err,
                              uint64_t seq)
{
    uint32_t part = lg_token_part(v);
    if (part >= l->nparts)
        return;
    lg_part *pp = &l->parts[part];
    lg_batch *b = pp->sent;
    bool mine = b && b->id == (v & LG_TOKEN_LOW) && pp->state != LG_PART_FREE;
    if (outcome == FQ_LEDGER_PUB_ERROR && js_err == FQ_LEDGER_ERR_WRONG_LAST) {
        if (pp->state == LG_PART_FREE || pp->fenced)
            return;
        fq_ledger_act *a = lg_note(l, FQ_LNOTE_FENCED);
        if (a) {
            a->n = pp->jseq;
            a->part = part;
        }
        pp->fenced = true;
        l->nfenced++;
        return;
    }
    if (outcome != FQ_LEDGER_PUB_STORED && outcome != FQ_LEDGER_PUB_DUPLICATE) {
        l->c.pub_failures++;
        if (mine)
            lg_journal_failed(l, pp, js_err);
        return;
    }
    if (!mine)
        return;
    pp->jseq = seq;
    lg_journal_again(l, pp);
    pp->sent = NULL;
    b->sent = false;
    for (size_t i = 0; i < b->nruns; i++)
        lg_settled(l, b->runs[i]);
    for (size_t i = 0; i < b->ndones; i++)
        lg_ack_seq(l, FQ_LEDGER_DONE, b->dones[i], part);
    b->nruns = b->ndones = 0;
}

/* ---- debts in the journal ------------------------------------------------ */

/*
 * A tenant keeps its debt when its queue empties, and through the journal
 * across restarts: when a completion has reconciled its deficit, a debt
 * record with the deficit if negative, or 0 once a debt recorded is
 * cleared, goes out with the turn's batch, one per tenant a turn at most,
 * none for a tenant that never had a debt. The journal keeps records
 * keep_done_ms + 1 min, so a debtor's record is written again every
 * lg_debt_refresh_ms, FQ_LEDGER_DEBT_PER_TURN a turn at most. A record
 * keeps the time the debt last changed, so that a debt is forgiven once
 * its tenant has held nothing for debt_forget_ms since, restarts or not.
 */

static uint64_t lg_debt_refresh_ms(const fq_ledger *l)
{
    uint64_t r = l->o.keep_done_ms / 2, life = l->o.debt_forget_ms;
    return r < life ? r : life;
}

static void lg_debt_unlink(fq_ledger *l, fq_ledger_tenant *t)
{
    if (!t->debt_listed)
        return;
    if (t->debt_prev)
        t->debt_prev->debt_next = t->debt_next;
    else
        l->debt_head = t->debt_next;
    if (t->debt_next)
        t->debt_next->debt_prev = t->debt_prev;
    else
        l->debt_tail = t->debt_prev;
    t->debt_prev = t->debt_next = NULL;
    t->debt_listed = false;
    l->debtors--;
}

/* List t last, due at due: every entry is due no earlier than those ahead. */
static void lg_debt_link(fq_ledger *l, fq_ledger_tenant *t, uint64_t due)
{
    lg_debt_unlink(l, t);
    t->debt_due = due;
    t->debt_prev = l->debt_tail;
    if (l->debt_tail)
        l->debt_tail->debt_next = t;
    else
        l->debt_head = t;
    l->debt_tail = t;
    t->debt_listed = true;
    l->debtors++;
}

/* Write t's debt record (debt <= 0, changed at t->debt_at_ms); a debtor is
 * listed for its refresh, a debt cleared leaves the list. Out of memory, it
 * is tried again shortly. */
static void lg_debt_write(fq_ledger *l, fq_ledger_tenant *t, int64_t debt)
{
    fq_jrec r = {.type = FQ_JREC_DEBT, .deficit = debt,
                 .at_ms = t->debt_at_ms > 0 ? t->debt_at_ms : 0};
    snprintf(r.tenant, sizeof r.tenant, "%s", t->id);
    if (!lg_journal_add(l, lg_pp(l, t), &r)) {
        lg_debt_link(l, t, l->now + FQ_LEDGER_RETRY_MS);
        return;
    }
    t->debt_written = debt;
    if (debt < 0)
        lg_debt_link(l, t, l->now + lg_debt_refresh_ms(l));
    else
        lg_debt_unlink(l, t);
}

/* t's deficit was just reconciled: a debt record may be due this turn. */
static void lg_debt_touch(fq_ledger *l, fq_ledger_tenant *t)
{
    if (t->debt_dirty)
        return;
    t->debt_dirty = true;
    t->dirty_next = l->dirty;
    l->dirty = t;
}

static int64_t lg_debt_of(const fq_ledger_tenant *t)
{
    fq_tenant_info ti;
    fq_tenant_info_get(t->t, &ti);
    return ti.deficit < 0 ? ti.deficit : 0;
}

/* A record for each tenant reconciled this turn whose debt is not the one
 * recorded. */
static void lg_debt_flush(fq_ledger *l)
{
    for (fq_ledger_tenant *t = l->dirty, *nx; t; t = nx) {
        nx = t->dirty_next;
        t->dirty_next = NULL;
        t->debt_dirty = false;
        int64_t debt = lg_debt_of(t);
        if (debt == t->debt_written)
            continue;
        t->debt_at_ms = l->now_ms;
        lg_debt_write(l, t, debt);
    }
    l->dirty = NULL;
}

/* The debtors whose record is due: each debt is forgiven if it has outlived
 * debt_forget_ms and its tenant holds nothing, else written again (as it
 * is now: dispatches move a busy debtor's deficit too) before the stream
 * ages its record out. A debtor of a partition still being read back
 * (listed due at once by its record) waits, and the sweep with it, until
 * the partition is owned: a later record of it may follow in the read,
 * and what it is so far, written meanwhile, would be stored after that
 * record and read back last. A read lasts seconds; a refresh is due every
 * keep_done_ms / 2. */
static void lg_debt_sweep(fq_ledger *l)
{
    for (unsigned n = 0; n < FQ_LEDGER_DEBT_PER_TURN && l->debt_head &&
                         l->debt_head->debt_due <= l->now &&
                         lg_pp(l, l->debt_head)->state == LG_PART_OWNED;
         n++) {
        fq_ledger_tenant *t = l->debt_head;
        int64_t debt = lg_debt_of(t);
        if (debt != t->debt_written) {
            t->debt_at_ms = l->now_ms;
        } else if (!t->keyed &&
                   fq_debt_forgiven(debt, t->debt_at_ms, l->now_ms, l->o.debt_forget_ms) &&
                   fq_tenant_set_debt(l->o.sched, t->t, 0) == FQ_OK) {
            l->c.debts_forgiven++;
            debt = 0;
            t->debt_at_ms = l->now_ms;
        }
        lg_debt_write(l, t, debt);
    }
}

/* ---- refusals ------------------------------------------------------------ */

/* Refuse a message: publish it to <rejected>.<tenant> with Fair-Error
 * "code: sentence" (the caller builds it); acked once stored (token). */
static fq_ledger_act *lg_refuse(fq_ledger *l, enum fq_ledger_cons cons, const fq_ledger_ackref *ack,
                                fq_ledger_tenant *lt, const char *tenant, const char *subject,
                                fq_status why, const char *sentence, const fq_ledger_bytes *raw)
{
    fq_ledger_act *a = lg_act_new(l, FQ_LACT_REFUSE);
    if (!a)
        return NULL;
    a->token = lg_token(cons == FQ_LEDGER_SUBMIT ? FQ_LTK_REJECT : FQ_LTK_DONE_REJECT,
                        ack->part, ack->sseq);
    a->cons = cons;
    a->ack = *ack;
    a->lt = lt;
    a->tenant = tenant;
    a->subject = subject;
    a->code = why;
    snprintf(lg_act_of(a)->text, sizeof lg_act_of(a)->text, "%s", sentence);
    if (raw)
        a->raw = *raw;
    return a;
}

/* Refuse a run (why, sentence) and count it. */
static fq_ledger_act *lg_refuse_run(fq_ledger *l, const fq_ledger_ackref *ack,
                                    fq_ledger_tenant *lt, const char *tenant, const char *subject, fq_status why,
                          const char *sentence, const fq_ledger_bytes *raw)
{
    l->c.rejected[why]++;
    return lg_refuse(l, FQ_LEDGER_SUBMIT, ack, lt, tenant, subject, why, sentence, raw);
}

/* ---- admission ----------------------------------------------------------- */

/* Whether run key (tenant, run_id), hash h, of submit seq was handled
 * before: held, in flight, expired or completed. *same: by this very
 * submit (a redelivery after a restart), else by another submit (a
 * duplicate run id). */
static bool lg_seen(const fq_ledger *l, const char *tenant, const char *run_id, uint64_t h,
                    uint64_t seq, bool *same)
{
    lg_run *x = lg_find_key(l, tenant, run_id, h);
    if (x) {
        *same = x->run.id == seq;
        return true;
    }
    const lg_done *d = lg_done_find(l, h);
    if (d) {
        *same = d->seq == seq;
        return true;
    }
    return false;
}

uint64_t fq_ledger_wait_ms(const fq_ledger *l, const fq_ledger_tenant *lt, uint32_t est,
                           uint64_t now, bool *known)
{
    uint64_t rate = fq_sched_rate_wait(l->o.sched, lt->t, est, now);
    *known = l->rate_tokens > 0.0;
    if (!*known)
        return rate;
    double ms = (double)fq_sched_tokens_ahead(l->o.sched, lt->t, est) * 1000.0 / l->rate_tokens;
    uint64_t drain = ms >= 1.8e19 ? UINT64_MAX : (uint64_t)ms;
    return drain > rate ? drain : rate;
}

/* Whether a run of est tokens would wait past max_wait_ms; *wait: its
 * estimated wait. While no drain rate is known only the token rate's wait
 * counts. */
static bool lg_overloaded(const fq_ledger *l, const fq_ledger_tenant *lt, uint32_t est,
                          uint64_t *wait)
{
    bool known;
    *wait = l->o.max_wait_ms ? fq_ledger_wait_ms(l, lt, est, l->now, &known) : 0;
    return l->o.max_wait_ms && *wait > l->o.max_wait_ms;
}

static void lg_names_set(const fq_ledger *l, lg_names *nm, const fq_submit *sub, uint64_t seq)
{
    fq_ledger_run_id(nm->run_id, l, sub, seq);
    memcpy(nm->workflow, sub->workflow, sizeof nm->workflow);
    memcpy(nm->subtenant, sub->subtenant, sizeof nm->subtenant);
    nm->declared = sub->est_tokens;
}

static fq_ledger_act *lg_dispatch_act(fq_ledger *l, lg_run *x, const fq_ledger_bytes *raw)
{
    fq_ledger_act *a = lg_act_new(l, FQ_LACT_DISPATCH);
    if (!a)
        return NULL;
    a->token = FQ_LEDGER_TOKEN(FQ_LTK_DISPATCH, x->run.id);
    a->seq = x->run.id;
    a->lt = x->lt;
    a->tenant = x->lt->id;
    a->run_id = x->names->run_id;
    a->workflow = x->names->workflow;
    a->subtenant = x->names->subtenant;
    a->est = x->est;
    a->submitted_ms = x->submitted_ms;
    a->dispatched_ms = l->now_ms;
    a->raw = *raw;
    return a;
}

/* Whether a dispatch sent again now, whose first may have been stored as
 * early as since_ms (unix ms), may be past JetStream's duplicate window:
 * then it is marked Fair-Possible-Duplicate. FQ_LEDGER_CLOCK_MARGIN_MS
 * early rather than late, for the proxy's and the server's clocks. */
static bool lg_past_window(const fq_ledger *l, int64_t since_ms)
{
    uint64_t w = l->o.dup_window_ms ? l->o.dup_window_ms : l->o.keep_done_ms;
    return l->now_ms + FQ_LEDGER_CLOCK_MARGIN_MS - since_ms >= (int64_t)w;
}

/* The submit s of run x, which the journal says was dispatched before a
 * restart, came again: its ack was lost, or its dispatch was never stored.
 * Which one is not known, so it is published again under its Nats-Msg-Id:
 * JetStream stores it once either way within the duplicate window, and the
 * PubAck acks the submit. Past the window (from its flight record's time,
 * which its first store cannot precede, or else its submit's) JetStream
 * may store it twice: it is sent all the same (it may never have reached
 * the workers), marked a possible duplicate, and counted. */
static void lg_resend(fq_ledger *l, lg_run *x, const fq_ledger_submit *s)
{
    int64_t since = s->ts_ms;
    if (x->run.state == FQ_RUN_FLIGHT && !x->read_expired && x->submitted_ms > since)
        since = x->submitted_ms;
    lg_delivery(x, &s->ack);
    x->submitted_ms = s->ts_ms;
    fq_ledger_act *a = NULL;
    if (!lg_seq_add(l, x) || !(a = lg_dispatch_act(l, x, &s->raw))) {
        /* Not now: JetStream delivers it again in a while. */
        lg_seq_del(l, x);
        lg_nak(l, FQ_LEDGER_SUBMIT, &s->ack, FQ_LEDGER_PARK_MAX_MS);
        return;
    }
    if (lg_past_window(l, since)) {
        a->possible_dup = true;
        l->c.possible_duplicates++;
    }
    x->resent = true;
    x->pending++;
    lg_held(l, x->lt, true);
    lg_pause_check(l);
}

/* The publish of a redelivery (lg_resend) failed: the run stays as it was,
 * and its submit, naked, comes again later. */
static void lg_unresend(fq_ledger *l, lg_run *x)
{
    x->resent = false;
    lg_held(l, x->lt, false);
    lg_seq_del(l, x);
    fq_ledger_ackref ack = lg_ackref(x);
    lg_nak(l, FQ_LEDGER_SUBMIT, &ack, FQ_LEDGER_PARK_MAX_MS);
    lg_pause_check(l);
}

/* The submit s of a run completed before its dispatch was seen stored
 * came again (key: its run key). Its completion may be forged, or of an
 * earlier submit with its run id, and its dispatch may have failed: it is
 * published again under its Nats-Msg-Id, as lg_resend does, and acked on
 * the PubAck, a duplicate (it had reached the workers) or stored now (it
 * reaches them now, once). false: not unconfirmed, or no memory (acked as
 * done, as before). */
static bool lg_resend_done(fq_ledger *l, const fq_ledger_submit *s, uint64_t key)
{
    lg_done *d = lg_done_find(l, key);
    fq_status why = FQ_OK;
    fq_ledger_tenant *lt;
    lg_run *x;
    if (!d || !d->unconfirmed ||
        !(lt = l->o.tenant(l->o.tenant_arg, s->tenant, strlen(s->tenant),
                           FQ_LEDGER_TENANT_RECORD, &why)) ||
        !(x = lg_run_alloc(l)))
        return false;
    *x = (lg_run){.run.id = s->ack.sseq, .lt = lt, .key = key, .submitted_ms = s->ts_ms,
                  .cseq = s->ack.cseq, .delivered = s->ack.delivered};
    if (!(x->names = fq_opool_alloc(&l->names_pool))) {
        lg_maybe_free(l, x);
        return false;
    }
    lg_names_set(l, x->names, s->sub, x->run.id);
    l->c.done_unconfirmed_resent++;
    lg_resend(l, x, s);
    if (!x->resent)
        lg_maybe_free(l, x);    /* not now: naked */
    return true;
}

/*
 * A submit is taken as a decision, then its effects. lg_submit_judge reads
 * the ledger and changes nothing: it says what the submit is before its
 * tenant is looked up (a redelivery, a run dispatched or completed before,
 * a refusal, or a run to admit). For one to admit, the tenant is looked
 * up (the caller's callback may create it) and lg_admit_judge, again
 * changing nothing, says whether it is given back, refused for its wait,
 * or queued; lg_submit_apply carries the verdict out.
 */

/* What a submit becomes. */
enum lg_take {
    LG_TAKE_REDELIVERED = 1,    /* held already: delivered again (a consumer reset) */
    LG_TAKE_ACK_AGAIN,          /* its dispatch was stored in this process; its ack lost */
    LG_TAKE_RESEND,             /* dispatched by the journal's account: published again */
    LG_TAKE_DONE,               /* completed before a restart, its ack lost */
    LG_TAKE_REFUSE,             /* refused: code and sentence */
    LG_TAKE_ADMIT,              /* a run to admit, its tenant permitting */
    LG_TAKE_GIVE_BACK,          /* over its tenant's share: given back to FAIR_SUBMIT */
    LG_TAKE_QUEUE,              /* queued: held, indexed, its body kept if it fits */
    LG_TAKE_NO_MEMORY,          /* not queued for lack of memory: left in JetStream */
    LG_TAKE_REFUSE_AGAIN,       /* refused for the moment's state before (its refused
                                   record), its ack lost: refused again, code as then */
};

/* The verdict on a submit. */
typedef struct lg_verdict {
    enum lg_take take;
    lg_run *x;                  /* REDELIVERED, RESEND: its run; QUEUE: the run queued */
    bool bad_subject;           /* REFUSE: the subject names no tenant */
    fq_status code;             /* REFUSE: why */
    char sentence[400];         /* REFUSE: the sentence after the code */
    uint64_t wait;              /* REFUSE for overload: the estimated wait */
    char run_id[FQ_RUN_ID_MAX + 1];    /* from ADMIT on: the run id it goes by */
    uint64_t key;               /* ... its run key's hash */
    uint32_t cls;               /* ... its priority class */
    uint32_t est;               /* QUEUE: tokens charged */
} lg_verdict;

/* Make v a refusal for code with the sentence fmt. true, for returning. */
__attribute__((format(printf, 3, 4)))
static bool lg_refusal(lg_verdict *v, fq_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->sentence, sizeof v->sentence, fmt, ap);
    va_end(ap);
    v->take = LG_TAKE_REFUSE;
    v->code = code;
    return true;
}

/* Whether v's run key was seen before: true with the verdict when it
 * decides the submit (this very submit dispatched or completed before,
 * or another submit's run id); false when the submit is new. */
static bool lg_judge_seen(lg_verdict *v, const fq_ledger *l, const fq_ledger_submit *s)
{
    uint64_t seq = s->ack.sseq;
    bool same = false, seen = lg_seen(l, s->tenant, v->run_id, v->key, seq, &same);
    /* This very submit, dispatched already by the journal's account (the
     * proxy restarted, or the submit's ack was lost): the scheduler holds
     * it, in flight or expired. (A run read back and not taken in is never
     * found here: its partition's submits come only once the scheduler has
     * taken in what the journal held, fq_ledger_recover_record.) */
    lg_run *x = seen && same ? lg_find_key(l, s->tenant, v->run_id, v->key) : NULL;
    if (x && (x->in_seq || !lg_dispatched(x)))
        x = NULL;
    if (x && x->stored) {
        /* This process saw its dispatch and its flight record stored and
         * acked it; the ack was lost (the consumer made again before it
         * came). Published again, past the duplicate window, it would
         * reach the workers twice. */
        v->take = LG_TAKE_ACK_AGAIN;
        return true;
    }
    if (x) {
        v->take = LG_TAKE_RESEND;
        v->x = x;
        return true;
    }
    if (seen && same) {
        v->take = LG_TAKE_DONE;     /* completed before a restart, its ack lost */
        return true;
    }
    if (seen)
        return lg_refusal(v, FQ_EEXIST, "run_id %s is held or was dispatched already",
                          v->run_id);
    return false;
}

/* Its class, where classes are configured (else it is not read): one
 * given must be one of them, none is the lowest. true: refused. */
static bool lg_judge_class(lg_verdict *v, const fq_ledger *l, const fq_submit *sub)
{
    const fq_classes *cl = &l->o.classes;
    v->cls = 0;         /* the one class there is without classes */
    if (!cl->n)
        return false;
    int c = (int)cl->n - 1;
    if (sub->cls_err[0])
        return lg_refusal(v, FQ_EINVAL, "%s", sub->cls_err);
    if (sub->cls[0] && (c = fq_classes_find(cl, sub->cls, strlen(sub->cls))) < 0) {
        char names[300];
        size_t n = 0;
        names[0] = '\0';
        for (uint32_t i = 0; i < cl->n && n < sizeof names; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "",
                                  cl->name[i]);
        return lg_refusal(v, FQ_EINVAL, "class: %s is not one of the classes (%s)", sub->cls,
                          names);
    }
    v->cls = (uint32_t)c;
    return false;
}

/* What submit s is before its tenant is looked up. Changes nothing. */
static void lg_submit_judge(lg_verdict *v, const fq_ledger *l, const fq_ledger_submit *s)
{
    v->take = LG_TAKE_ADMIT;
    v->x = NULL;
    v->bad_subject = false;
    v->code = FQ_OK;
    v->wait = v->key = 0;
    v->cls = v->est = 0;
    if ((v->x = lg_find_seq(l, s->ack.sseq))) {
        v->take = LG_TAKE_REDELIVERED;  /* a consumer reset: it is queued already */
        return;
    }
    const lg_refused *rf = s->tenant ? lg_refused_find(l, s->ack.sseq) : NULL;
    if (rf) {
        /* The decision is kept, not made again: made again, it might
         * dispatch a run the client was told is refused. */
        lg_refusal(v, rf->code, "refused already when first delivered (%s); the decision "
                   "is kept, not made again", fq_status_code(rf->code));
        v->take = LG_TAKE_REFUSE_AGAIN;
        return;
    }
    if (!s->tenant) {
        v->bad_subject = true;
        lg_refusal(v, FQ_EINVAL, "%s",
                   s->error ? s->error
                            : "the subject's last token is not a tenant id (" FQ_TENANT_RULE ")");
        return;
    }
    if (s->status != FQ_OK) {
        lg_refusal(v, s->status, "%s", s->error ? s->error : "");
        return;
    }
    fq_ledger_run_id(v->run_id, l, s->sub, s->ack.sseq);
    v->key = lg_key(l, s->tenant, v->run_id);
    if (!lg_judge_seen(v, l, s))
        lg_judge_class(v, l, s->sub);
}

/* The tenant of a run to admit (created if new and allowed: the caller's
 * callback); NULL with v made a refusal when there is none. */
static fq_ledger_tenant *lg_admit_tenant(fq_ledger *l, lg_verdict *v, const fq_ledger_submit *s)
{
    fq_status why = FQ_ENOMEM;
    fq_ledger_tenant *lt = l->o.tenant(l->o.tenant_arg, s->tenant,
                                       strnlen(s->tenant, FQ_TENANT_MAX + 1),
                                       FQ_LEDGER_TENANT_ADMIT, &why);
    if (lt)
        return lt;
    if (why == FQ_EUNKNOWN)
        lg_refusal(v, why, "tenant %s is not configured and unknown tenants are rejected",
                   s->tenant);
    else
        lg_refusal(v, why, "%s", fq_status_text(why));
    return NULL;
}

/* With its estimate charged: refused past max_wait_ms, else queued.
 * Changes nothing. */
static void lg_admit_judge(lg_verdict *v, const fq_ledger *l, const fq_ledger_tenant *lt)
{
    if (lg_overloaded(l, lt, v->est, &v->wait))
        lg_refusal(v, FQ_EOVERLOAD, "the estimated wait of %" PRIu64 " ms exceeds "
                   "scheduler.max_wait_ms (%" PRIu64 " ms)", v->wait, l->o.max_wait_ms);
    else
        v->take = LG_TAKE_QUEUE;
}

/* Admission of the run of v (ADMIT) with its tenant, which it returns
 * (NULL: none, v refused): given back over its share; else, as its first
 * run given back if it is one, it is no longer awaited, and its estimate
 * is charged (the estimator marks what it used: not for a run given back)
 * and judged. */
static fq_ledger_tenant *lg_admission(fq_ledger *l, lg_verdict *v, const fq_ledger_submit *s)
{
    fq_ledger_tenant *lt = lg_admit_tenant(l, v, s);
    if (!lt)
        return NULL;
    if (lg_gives_back(l, lt, s->ack.sseq)) {
        v->take = LG_TAKE_GIVE_BACK;
        return lt;
    }
    lg_back_came(l, lt, s->ack.sseq);
    v->est = fq_est_charge(l->o.est, s->tenant, s->sub->workflow, s->sub->est_tokens);
    lg_admit_judge(v, l, lt);
    return lt;
}

/* Whether tenant lt has the max_pending runs of class cls queued: its
 * policy's (class_max_pending), else scheduler.classes' (*cap; 0: no limit
 * of the class's own). The ledger's to say, not the scheduler's, since it
 * may differ by tenant. */
static bool lg_class_full(const fq_ledger *l, const fq_ledger_tenant *lt, uint32_t cls,
                          uint32_t *cap)
{
    const fq_classes *cl = &l->o.classes;
    fq_tenant_info ti;
    *cap = cls >= FQ_SCHED_MAX_CLASSES ? 0
         : lt->class_max_pending.set ? lt->class_max_pending.n[cls] : cl->max_pending[cls];
    return cl->n && *cap && (fq_tenant_info_get(lt->t, &ti), ti.class_queued[cls] >= *cap);
}

/* The refusal of v (QUEUE) when its tenant has max_pending runs queued,
 * of its class or in all. */
static void lg_full_refusal(lg_verdict *v, const fq_ledger *l, const fq_ledger_tenant *lt,
                            const char *tenant)
{
    uint32_t cap;
    if (lg_class_full(l, lt, v->cls, &cap))
        lg_refusal(v, FQ_EFULL, "tenant %s has its max_pending runs of class %s (%" PRIu32
                   ") queued already", tenant, l->o.classes.name[v->cls], cap);
    else
        lg_refusal(v, FQ_EFULL, "tenant %s has its max_pending runs queued already", tenant);
}

/* Queue the run of v (QUEUE) of tenant lt: its record, indexed by
 * sequence, into the scheduler in its class (v->x). The scheduler has the
 * last word: v becomes a refusal (max_pending) or NO_MEMORY. */
static void lg_enqueue(fq_ledger *l, lg_verdict *v, fq_ledger_tenant *lt,
                       const fq_ledger_submit *s)
{
    fq_status st;
    uint64_t seq = s->ack.sseq;
    lg_run *x = lg_run_alloc(l);
    if (x)
        *x = (lg_run){.run.id = seq, .lt = lt, .key = v->key, .submitted_ms = s->ts_ms,
                      .est = v->est, .cseq = s->ack.cseq, .delivered = s->ack.delivered};
    uint32_t cap;
    if (!x || !lg_seq_add(l, x)) {
        st = FQ_ENOMEM;
    } else if (l->o.classes.n && lg_class_full(l, lt, v->cls, &cap)) {
        st = FQ_EFULL;
    } else {
        fq_sched_give_run(l->o.sched, &x->run);     /* one record a run: x's */
        /* its tenant's share divided by class, then among its sub-tenants,
         * if it has any */
        st = fq_sched_enqueue_sub(NULL, l->o.sched, lt->t, s->sub->subtenant,
                                  strlen(s->sub->subtenant), v->cls, seq, v->est, x, l->now);
    }
    if (st == FQ_OK) {
        x->maybe_sent = s->ack.sseq <= lg_pp(l, lt)->inherit_seq;
        v->x = x;
        /* a name past the tenant's cap of sub-tenants is not refused (the
         * claim only divides the tenant's share) but counted; the lane the
         * run joined was written just now */
        fq_sub_info si;
        if (s->sub->subtenant[0] &&
            fq_sched_run_sub_info(&si, l->o.sched, &x->run) == FQ_OK && si.overflow)
            l->c.subtenant_overflow++;
        return;
    }
    if (x) {
        lg_seq_del(l, x);
        lg_maybe_free(l, x);
    }
    if (st == FQ_EFULL)
        lg_full_refusal(v, l, lt, s->tenant);
    else if (st == FQ_ENOMEM)
        v->take = LG_TAKE_NO_MEMORY;
    else
        lg_refusal(v, st, "%s", "");
}

/* Keep x's submit in one block with what dispatch needs of its parse, its
 * run id, workflow and sub-tenant (the few fields beside it are in x), if
 * it fits max_buffered_bytes; else x is held index only and read back. */
static void lg_keep_body(fq_ledger *l, lg_run *x, const char *run_id, const fq_ledger_submit *s)
{
    size_t id_len = strlen(run_id), wf_len = strnlen(s->sub->workflow, FQ_WORKFLOW_MAX);
    size_t sub_len = strnlen(s->sub->subtenant, FQ_SUBTENANT_MAX);
    size_t bytes = sizeof(lg_block) + id_len + wf_len + sub_len + s->raw.hdr_len +
                   s->raw.body_len;
    if (l->buffered_bytes + s->size > l->o.max_buffered_bytes ||
        s->raw.hdr_len > UINT32_MAX || s->raw.body_len > UINT32_MAX || !lg_body_room(l) ||
        !(x->body = lg_alloc(l, bytes))) {
        x->indexed = true;
        l->index_only++;
        return;
    }
    l->nbodies++;
    *(lg_block *)(void *)x->body = (lg_block){
        .size = (uint32_t)s->size, .hdr_len = (uint32_t)s->raw.hdr_len,
        .body_len = (uint32_t)s->raw.body_len, .declared = s->sub->est_tokens,
        .id_len = (uint8_t)id_len, .wf_len = (uint8_t)wf_len, .sub_len = (uint8_t)sub_len};
    unsigned char *b = x->body + sizeof(lg_block);
    memcpy(b, run_id, id_len);
    memcpy(b + id_len, s->sub->workflow, wf_len);
    memcpy(b + id_len + wf_len, s->sub->subtenant, sub_len);
    b += id_len + wf_len + sub_len;
    if (s->raw.hdr_len)
        memcpy(b, s->raw.hdr, s->raw.hdr_len);
    if (s->raw.body_len)
        memcpy(b + s->raw.hdr_len, s->raw.body, s->raw.body_len);
    x->retained = true;
    l->buffered_bytes += s->size;
}

/* Run x, queued, is held: by key from now on, so that a second run with
 * its id is refused at once and a completion for it (a worker's bug) is
 * told from an unheld one. */
static void lg_admitted(fq_ledger *l, lg_run *x, const char *run_id, const fq_ledger_submit *s)
{
    lg_held(l, x->lt, true);
    lg_key_add(l, x);
    lg_keep_body(l, x, run_id, s);
    lg_pause_check(l);
}

/* Refuse submit s for why (duplicate, tenant_full, overload: the state of
 * the moment), durably: its refused record goes into the journal first and
 * the refusal (sentence, wait_ms) is published once that record is stored,
 * from a copy kept meanwhile; its submit is acked on the refusal's PubAck.
 * A next leader that gets the submit again (its ack lost) reads the
 * record and refuses it again instead of deciding anew, which might
 * dispatch it. false: not kept (its tenant not known, no memory): refused
 * at once, as any refusal. */
static bool lg_refuse_kept(fq_ledger *l, const fq_ledger_submit *s, fq_ledger_tenant *lt,
                           fq_status why, const char *sentence, uint64_t wait_ms)
{
    fq_status st = FQ_OK;
    size_t tl = strnlen(sentence, UINT16_MAX - 1);
    if (s->raw.hdr_len > UINT32_MAX || s->raw.body_len > UINT32_MAX ||
        (!lt && !(lt = l->o.tenant(l->o.tenant_arg, s->tenant, strlen(s->tenant),
                                   FQ_LEDGER_TENANT_RECORD, &st))))
        return false;
    size_t size = sizeof(lg_kept_refusal) + tl + 1 + s->raw.hdr_len + s->raw.body_len;
    lg_run *x = lg_run_alloc(l);
    if (!x)
        return false;
    *x = (lg_run){.run.id = s->ack.sseq, .lt = lt, .cseq = s->ack.cseq,
                  .delivered = s->ack.delivered, .submitted_ms = s->ts_ms};
    if (!lg_seq_add(l, x) || !lg_body_room(l) || !(x->body = lg_alloc(l, size))) {
        lg_seq_del(l, x);
        lg_maybe_free(l, x);
        return false;
    }
    l->nbodies++;
    x->refusing = true;
    lg_kept_refusal *f = (lg_kept_refusal *)(void *)x->body;
    *f = (lg_kept_refusal){.hdr_len = (uint32_t)s->raw.hdr_len,
                           .body_len = (uint32_t)s->raw.body_len, .text_len = (uint16_t)tl,
                           .code = (uint8_t)why, .wait_ms = wait_ms};
    unsigned char *b = x->body + sizeof *f;
    memcpy(b, sentence, tl);
    b[tl] = '\0';
    if (s->raw.hdr_len)
        memcpy(b + tl + 1, s->raw.hdr, s->raw.hdr_len);
    if (s->raw.body_len)
        memcpy(b + tl + 1 + s->raw.hdr_len, s->raw.body, s->raw.body_len);
    fq_jrec r = {.type = FQ_JREC_REFUSED, .seq = x->run.id, .refusal = why,
                 .at_ms = l->now_ms > 0 ? l->now_ms : 0};
    snprintf(r.tenant, sizeof r.tenant, "%s", lt->id);
    lg_part *pp = &l->parts[x->part];
    if (!lg_journal_add(l, pp, &r) ||
        !lg_grow(&pp->cur->runs, &pp->cur->cap_runs, pp->cur->nruns + 1, sizeof(lg_run *))) {
        lg_seq_del(l, x);
        lg_maybe_free(l, x);
        return false;
    }
    pp->cur->runs[pp->cur->nruns++] = x;
    x->pending++;
    l->c.rejected[why]++;
    lg_refused_add(l, x->run.id, why, x->part, lg_keep_until(l));
    lg_held(l, lt, true);
    lg_pause_check(l);
    return true;
}

/* Refusing x's record is stored: its refusal goes out, from the copy, and
 * its PubAck acks the submit. */
static void lg_refusal_send(fq_ledger *l, lg_run *x)
{
    const lg_kept_refusal *f = (const lg_kept_refusal *)(const void *)x->body;
    const unsigned char *b = x->body + sizeof *f;
    fq_ledger_bytes raw = {b + f->text_len + 1, f->hdr_len, b + f->text_len + 1 + f->hdr_len,
                           f->body_len};
    fq_ledger_ackref ack = lg_ackref(x);
    fq_ledger_act *a = lg_refuse(l, FQ_LEDGER_SUBMIT, &ack, x->lt, x->lt->id, NULL,
                                 (fq_status)f->code, (const char *)b, &raw);
    if (a) {
        a->wait_ms = f->wait_ms;
        x->pending++;
    }
    lg_body_drop(l, x);     /* freed once the actions are drained */
    if (a)
        return;
    /* No memory for the action: let it come again, to be refused again. */
    lg_held(l, x->lt, false);
    lg_seq_del(l, x);
    lg_maybe_free(l, x);
    lg_nak(l, FQ_LEDGER_SUBMIT, &ack, FQ_LEDGER_PARK_MAX_MS);
    lg_pause_check(l);
}

static void lg_submit_refuse(fq_ledger *l, const fq_ledger_submit *s, const lg_verdict *v,
                             fq_ledger_tenant *lt)
{
    if ((v->code == FQ_EEXIST || v->code == FQ_EFULL || v->code == FQ_EOVERLOAD) &&
        !v->bad_subject &&
        lg_refuse_kept(l, s, lt, v->code, v->sentence, v->code == FQ_EOVERLOAD ? v->wait : 0))
        return;
    if (v->bad_subject)
        l->c.invalid_subject++;
    fq_ledger_act *a = lg_refuse_run(l, &s->ack, lt, v->bad_subject ? NULL : s->tenant,
                                     s->subject, v->code, v->sentence, &s->raw);
    if (a && v->code == FQ_EOVERLOAD)
        a->wait_ms = v->wait;
}

/* Not a client's fault: the submit is left in JetStream for later. */
static void lg_no_memory(fq_ledger *l, fq_ledger_tenant *lt, const fq_ledger_ackref *ack)
{
    fq_ledger_act *a = lg_note(l, FQ_LNOTE_NO_MEMORY);
    if (a) {
        a->lt = lt;
        a->tenant = lt->id;
    }
    lg_nak(l, FQ_LEDGER_SUBMIT, ack, FQ_LEDGER_PARK_MAX_MS);
}

/* Carry out verdict v on submit s (lt: its tenant, once looked up). */
static void lg_submit_apply(fq_ledger *l, const fq_ledger_submit *s, const lg_verdict *v,
                            fq_ledger_tenant *lt)
{
    if (v->take == LG_TAKE_REDELIVERED) {
        lg_delivery(v->x, &s->ack);
        l->c.redelivered++;
        return;
    }
    if (v->take == LG_TAKE_REFUSE_AGAIN) {
        l->c.redelivered++;
        l->c.refusals_repeated++;
        lg_refuse(l, FQ_LEDGER_SUBMIT, &s->ack, NULL, s->tenant, s->subject, v->code,
                  v->sentence, &s->raw);
        return;
    }
    l->c.submitted++;
    switch (v->take) {
    case LG_TAKE_ACK_AGAIN:
        l->c.redelivered++;
        lg_ack(l, FQ_LEDGER_SUBMIT, &s->ack);
        break;
    case LG_TAKE_RESEND:
        lg_resend(l, v->x, s);
        break;
    case LG_TAKE_DONE:
        if (lg_resend_done(l, s, v->key))
            break;              /* its dispatch not seen stored: published again */
        l->c.duplicates_acked++;
        lg_ack(l, FQ_LEDGER_SUBMIT, &s->ack);
        break;
    case LG_TAKE_REFUSE:
        lg_submit_refuse(l, s, v, lt);
        break;
    case LG_TAKE_GIVE_BACK:
        lg_give_back(l, lt, &s->ack);
        break;
    case LG_TAKE_NO_MEMORY:
        lg_no_memory(l, lt, &s->ack);
        break;
    case LG_TAKE_QUEUE:
        lg_admitted(l, v->x, v->run_id, s);
        break;
    case LG_TAKE_REDELIVERED:
    case LG_TAKE_REFUSE_AGAIN:
    case LG_TAKE_ADMIT:         /* decided before it reaches here */
        break;
    }
}

void fq_ledger_submit_in(fq_ledger *l, const fq_ledger_submit *s, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    if (lg_unowned(l, s->tenant, &s->ack))
        return;
    lg_verdict v;
    lg_submit_judge(&v, l, s);
    fq_ledger_tenant *lt = v.take == LG_TAKE_ADMIT ? lg_admission(l, &v, s) : NULL;
    if (v.take == LG_TAKE_QUEUE)
        lg_enqueue(l, &v, lt, s);
    lg_submit_apply(l, s, &v, lt);
}

/* ---- dispatch ------------------------------------------------------------ */

/* x's body, or its place in the index-only count, is no longer needed:
 * its dispatch is stored, or it is dropped. */
static void lg_unhold(fq_ledger *l, lg_run *x)
{
    if (x->retained) {
        l->buffered_bytes -= lg_blk(x)->size;
        x->retained = false;
        lg_body_drop(l, x);
    }
    if (x->indexed) {
        l->index_only--;
        x->indexed = false;
    }
}

/* Run x, just taken by the scheduler, leaves fairq without reaching the
 * workers (refused, or its body lost): its dispatch is taken back, so its
 * charge is refunded and it does not count as dispatched, and it is
 * forgotten. Its submit is acked by whoever stored why. */
static void lg_drop_dispatched(fq_ledger *l, lg_run *x)
{
    fq_sched_cancel_run(l->o.sched, &x->run);
    lg_unhold(l, x);
    lg_held(l, x->lt, false);
    lg_seq_del(l, x);
    lg_key_del(l, x);
    lg_maybe_free(l, x);
    lg_pause_check(l);
}

/* Run x, taken by the scheduler, was not dispatched: it goes back to the
 * head of its tenant's queue, in order, and the tenant is parked so that
 * the others are served meanwhile (FQ_LEDGER_RETRY_MS, doubling with each
 * failure in a row up to FQ_LEDGER_PARK_MAX_MS). */
static void lg_requeue(fq_ledger *l, lg_run *x, int js_err)
{
    fq_ledger_tenant *lt = x->lt;
    lg_requeue_run(l, x);
    uint32_t k = lt->fails < 16 ? lt->fails : 16;
    uint64_t wait = (uint64_t)FQ_LEDGER_RETRY_MS << k;
    if (wait > FQ_LEDGER_PARK_MAX_MS)
        wait = FQ_LEDGER_PARK_MAX_MS;
    lt->fails++;
    fq_sched_park(l->o.sched, lt->t, l->now + wait);
    fq_ledger_act *a = lg_note(l, FQ_LNOTE_DISPATCH_FAILED);
    if (a) {
        a->lt = lt;
        a->tenant = lt->id;
        a->run_id = x->names ? x->names->run_id : "";
        a->js_err = js_err;
        a->n = wait;
        a->n2 = lt->fails;
    }
}

/* Dispatch x with its bytes raw: the action, its flight record. */
static void lg_dispatch_send(fq_ledger *l, lg_run *x, const fq_ledger_bytes *raw)
{
    bool same = false;
    if (!x->in_key && lg_seen(l, x->lt->id, x->names->run_id, x->key, x->run.id, &same)) {
        /* Two queued runs with one run id, the second not indexed at
         * admission (out of memory): it is refused. */
        char why[256];
        snprintf(why, sizeof why, "run_id %s was dispatched already", x->names->run_id);
        fq_ledger_ackref ack = lg_ackref(x);
        lg_refuse_run(l, &ack, x->lt, x->lt->id, NULL, FQ_EEXIST, why, raw);
        lg_drop_dispatched(l, x);
        return;
    }
    fq_ledger_act *a = lg_dispatch_act(l, x, raw);
    if (!a) {
        lg_requeue(l, x, 0);
        return;
    }
    if (x->maybe_sent && lg_past_window(l, x->submitted_ms)) {
        /* A dispatch of it may be stored already, unknown to us, and its
         * submit is older than the window: JetStream may store it twice. */
        a->possible_dup = true;
        l->c.possible_duplicates++;
    }
    if (!x->in_key)
        lg_key_add(l, x);
    x->pending++;       /* a journal batch of an earlier attempt may still be pending */
    lg_journal_flight(l, x, l->now_ms);
    l->c.dispatched++;
}

/* Dispatch run x, which the scheduler just moved into the window. false:
 * its body must be read first (a READ action is out). */
static bool lg_dispatch_one(fq_ledger *l, lg_run *x)
{
    if (!x->retained) {
        x->reading = true;
        l->c.body_reads++;
        fq_ledger_act *a = lg_act_new(l, FQ_LACT_READ);
        if (!a) {
            x->reading = false;
            lg_requeue(l, x, 0);
            return false;
        }
        a->seq = x->run.id;
        a->lt = x->lt;
        a->tenant = x->lt->id;
        return false;
    }
    /* Parsed once, at admission: its names come from its block. */
    if (!x->names) {
        lg_names *nm = fq_opool_alloc(&l->names_pool);
        if (!nm) {
            lg_requeue(l, x, 0);
            return false;
        }
        const lg_block *b = lg_blk(x);
        const char *id = (const char *)(b + 1);
        memcpy(nm->run_id, id, b->id_len);
        nm->run_id[b->id_len] = '\0';
        memcpy(nm->workflow, id + b->id_len, b->wf_len);
        nm->workflow[b->wf_len] = '\0';
        memcpy(nm->subtenant, id + b->id_len + b->wf_len, b->sub_len);
        nm->subtenant[b->sub_len] = '\0';
        nm->declared = b->declared;
        x->names = nm;
    }
    fq_ledger_bytes raw = lg_block_bytes(x);
    lg_dispatch_send(l, x, &raw);
    return true;
}

void fq_ledger_body(fq_ledger *l, uint64_t seq, fq_status st, const fq_ledger_bytes *raw,
                    const fq_submit *sub, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    lg_run *x = lg_find_seq(l, seq);
    if (!x || !x->reading)
        return;
    x->reading = false;
    if (x->run.state == FQ_RUN_EXPIRED) {
        /* Its lease ran out while its body was read: queued again as it
         * was, to be read at its next turn. */
        lg_requeue_run(l, x);
        return;
    }
    if (x->run.state == FQ_RUN_FREE) {
        /* ... and it was forgotten since: its submit is left unacked, to
         * come back as new. */
        lg_unhold(l, x);
        lg_held(l, x->lt, false);
        lg_seq_del(l, x);
        lg_maybe_free(l, x);
        lg_pause_check(l);
        return;
    }
    if (st == FQ_ENOTFOUND) {
        /* Purged from the stream behind our back: nothing to send. */
        l->c.body_lost++;
        fq_ledger_act *a = lg_note(l, FQ_LNOTE_BODY_LOST);
        if (a) {
            a->lt = x->lt;
            a->tenant = x->lt->id;
            a->seq = seq;
        }
        lg_drop_dispatched(l, x);
        return;
    }
    if (st == FQ_OK && !x->names && (x->names = fq_opool_alloc(&l->names_pool)))
        lg_names_set(l, x->names, sub, x->run.id);
    if (st != FQ_OK || !x->names) {
        lg_requeue(l, x, 0);
        return;
    }
    lg_dispatch_send(l, x, raw);
}

/* Run x, just taken by the scheduler, is of a partition whose lease is
 * not fresh now: back to the head of its tenant's queue, its charge
 * refunded, and the tenant parked FQ_LEDGER_FENCE_PARK_MS, so that the
 * tenants of the partitions fresh are served meanwhile. Not a failure:
 * no note, no doubling. */
static void lg_fence_park(fq_ledger *l, lg_run *x)
{
    lg_requeue_run(l, x);
    fq_sched_park(l->o.sched, x->lt->t, l->now + FQ_LEDGER_FENCE_PARK_MS);
}

size_t fq_ledger_dispatch(fq_ledger *l, size_t budget, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    uint64_t before = l->c.dispatched;
    while (l->c.dispatched - before < budget && l->fresh && !l->nfenced && !l->journal_full) {
        fq_run *r = fq_sched_dispatch(l->o.sched, now);
        if (!r)
            break;
        lg_run *x = r->handle;
        if (!lg_fresh(l, x->part)) {
            lg_fence_park(l, x);
            continue;
        }
        if (!lg_dispatch_one(l, x))
            break;
        lg_journal_check(l);
    }
    return (size_t)(l->c.dispatched - before);
}

/* ---- PubAcks ------------------------------------------------------------- */

static void lg_reconcile(fq_ledger *l, lg_run *x, const fq_completion *c,
                         const fq_ledger_ackref *done_ack);

/* One of the publishes a dispatched run's ack waits for has settled. */
static void lg_settled(fq_ledger *l, lg_run *x)
{
    /* A run whose dispatch failed is queued again: the journal batch of
     * that attempt settling acks nothing; nor does it for a run refused
     * since (its refusal acks its submit). */
    if (--x->pending || lg_queued(x))
        return;
    if (x->refusing && x->body && x->in_seq) {
        lg_refusal_send(l, x);      /* its refused record is stored */
        return;
    }
    if (!x->in_seq) {
        lg_maybe_free(l, x);
        return;
    }
    fq_ledger_ackref ack = lg_ackref(x);
    lg_ack(l, FQ_LEDGER_SUBMIT, &ack);
    lg_held(l, x->lt, false);
    lg_seq_del(l, x);
    lg_maybe_free(l, x);
    lg_pause_check(l);
}

/* Dispatches are stored again. */
static void lg_dispatching_again(fq_ledger *l)
{
    if (!l->fail_since)
        return;
    if (l->stalled) {
        fq_ledger_act *a = lg_note(l, FQ_LNOTE_DISPATCH_AGAIN);
        if (a)
            a->n = l->now - l->fail_since;
    }
    l->stalled = false;
    l->fail_since = 0;
}

/* The dispatch of submit seq was not stored. Such failures pass: the run
 * is not refused but queued again, in order (its lease may have run out
 * meanwhile), and its tenant parked. false: the scheduler no longer holds
 * the run (its expired record was forgotten), and the publish is the
 * caller's to retry as it was. */
static bool lg_dispatch_failed(fq_ledger *l, uint64_t seq, int js_err, bool answered)
{
    l->c.dispatch_failures++;
    if (!l->fail_since)
        l->fail_since = l->now;
    if (l->now - l->fail_since >= FQ_LEDGER_STALL_MS) {
        fq_ledger_act *a = lg_note(l, FQ_LNOTE_DISPATCH_STALLED);
        if (a) {
            a->js_err = js_err;
            a->n = l->now - l->fail_since;
            a->first = !l->stalled;
        }
        l->stalled = true;
    }
    lg_run *x = lg_find_seq(l, seq);
    if (!x || !lg_dispatched(x))
        return false;
    if (x->resent) {
        /* A redelivery published again: it was dispatched before (the
         * journal says so, or this process acked it and the submit came
         * again before the ack reached the server), so the run stays where
         * it is and the caller publishes it again until it is stored, then
         * acks it. Not a nak: one not sent while the lease is not fresh
         * would leave the submit to its hour of AckWait. */
        return false;
    }
    if (!answered) {
        /* No answer (a PubAck timed out, the connection dropped): it may
         * be stored. Queued again, it could wait past the duplicate window
         * and be stored a second time; so it stays in flight and the
         * caller publishes it again as it was, under its Nats-Msg-Id,
         * until JetStream answers (stored, or a duplicate). An error
         * answer to a copy sent again says nothing of this one (a server
         * checks a full store before the Nats-Msg-Id in a cluster), so the
         * run, queued again then, is marked if it goes out past the
         * window. */
        l->c.dispatch_unanswered++;
        x->maybe_sent = true;
        return false;
    }
    x->pending--;
    lg_requeue(l, x, js_err);
    return true;
}

/*
 * A PubAck is taken as a decision, then its effects: lg_puback_judge reads
 * the ledger and changes nothing, saying what the outcome of a publish
 * settles; lg_puback_apply carries it out.
 */

/* What the outcome of one of the ledger's publishes settles. */
enum lg_settle {
    LG_SETTLE_NOTHING = 1,      /* what it was for is no longer awaited */
    LG_SETTLE_JOURNAL,          /* a journal batch's: its partition's journal decides */
    LG_SETTLE_GONE,             /* a dispatch of a run let go with its partition */
    LG_SETTLE_UNSTORED,         /* a refusal JetStream answered it will not store */
    LG_SETTLE_DISPATCH_FAILED,  /* a dispatch not stored */
    LG_SETTLE_RETRY,            /* a refusal not answered: published again as it was */
    LG_SETTLE_DISPATCHED,       /* a dispatch stored, new or a duplicate */
    LG_SETTLE_ACK,              /* a refusal stored: its message is acked */
};

/* The verdict on a PubAck. */
typedef struct lg_settle_verdict {
    enum lg_settle what;
    bool failed;                /* the publish failed (counted) */
    bool ack;                   /* UNSTORED, ACK: a message to ack (not one that an early
                                   completion holds) */
    enum fq_ledger_cons cons;   /* ... whose */
    lg_run *x;                  /* GONE, DISPATCHED: its run; ACK, UNSTORED: a kept
                                   refusal's run, which settles instead of an ack */
} lg_settle_verdict;

/* What the outcome of the publish of token settles. Changes nothing. */
static void lg_puback_judge(lg_settle_verdict *v, const fq_ledger *l, uint64_t token,
                            enum fq_ledger_pub outcome, int js_err)
{
    int kind = FQ_LEDGER_TOKEN_KIND(token);
    uint64_t val = FQ_LEDGER_TOKEN_VAL(token);
    bool refusal = kind == FQ_LTK_REJECT || kind == FQ_LTK_DONE_REJECT;
    *v = (lg_settle_verdict){.what = LG_SETTLE_NOTHING,
                             .cons = kind == FQ_LTK_REJECT ? FQ_LEDGER_SUBMIT : FQ_LEDGER_DONE};
    if (kind == FQ_LTK_JOURNAL) {
        v->what = LG_SETTLE_JOURNAL;
    } else if (kind == FQ_LTK_DISPATCH && (v->x = lg_gone_find(l, val))) {
        v->what = LG_SETTLE_GONE;
    } else if (refusal && lg_let_go(l, lg_token_part(val))) {
        /* A refusal of a partition let go: its message is the next owner's
         * to decide, not to be sent again from here, nor acked; a kept
         * refusal's run let go with it is freed on this answer. */
        lg_run *x = kind == FQ_LTK_REJECT ? lg_gone_find(l, val & LG_TOKEN_LOW) : NULL;
        if (x && x->refusing) {
            v->what = LG_SETTLE_GONE;
            v->x = x;
        }
        return;
    } else if (outcome == FQ_LEDGER_PUB_ERROR && js_err && refusal) {
        /* JetStream answered and will not store it (a limit of the rejected
         * stream or of the account). A refusal only informs: retried, it
         * would be refused again, for ever, while its run stayed unacked. */
        v->what = LG_SETTLE_UNSTORED;
        v->ack = !(val & LG_TOKEN_HELD);
    } else if (outcome != FQ_LEDGER_PUB_STORED && outcome != FQ_LEDGER_PUB_DUPLICATE) {
        v->failed = true;
        v->what = kind == FQ_LTK_DISPATCH ? LG_SETTLE_DISPATCH_FAILED : LG_SETTLE_RETRY;
    } else if (kind == FQ_LTK_DISPATCH) {
        v->x = lg_find_seq(l, val);
        if (v->x && !lg_queued(v->x))
            v->what = LG_SETTLE_DISPATCHED;
    } else if (refusal) {
        v->what = LG_SETTLE_ACK;
        v->ack = kind == FQ_LTK_REJECT || !(val & LG_TOKEN_HELD);
    }
    if ((v->what == LG_SETTLE_ACK || v->what == LG_SETTLE_UNSTORED) && kind == FQ_LTK_REJECT) {
        /* A kept refusal's: its run settles (it acks the submit), or was
         * let go with its partition. */
        lg_run *x = lg_find_seq(l, val & LG_TOKEN_LOW);
        if (x && x->refusing && !x->body)
            v->x = x;
        else if (!x && (x = lg_gone_find(l, val & LG_TOKEN_LOW)) && x->refusing)
            v->what = LG_SETTLE_GONE, v->x = x;
    }
}

/* A completion that came before run x was held counts only if an earlier
 * leader really dispatched it (its dispatch came back a duplicate), not
 * for a dispatch stored new: applied, or acked unapplied. */
static void lg_early_settle(fq_ledger *l, lg_run *x, bool duplicate)
{
    lg_early *e = x->in_key ? lg_early_find(l, x->key) : NULL;
    if (!e)
        return;
    lg_early_take(l, e);
    if (duplicate && !lg_over(x)) {
        fq_completion c = {.actual_tokens = e->actual, .input_tokens = e->input,
                           .output_tokens = e->output, .cached_tokens = e->cached,
                           .kinds = e->kinds, .status = (enum fq_done_status)e->status};
        l->c.completions_early_applied++;
        lg_reconcile(l, x, &c, &e->ack);
    } else {
        lg_ack(l, FQ_LEDGER_DONE, &e->ack);
    }
}

/* Run x's dispatch is stored (duplicate: stored before, it reached the
 * workers before a restart): its body is no longer needed, its tenant's
 * failures in a row end, and its submit's ack waits for one publish less. */
static void lg_dispatch_stored(fq_ledger *l, lg_run *x, bool duplicate)
{
    if (duplicate)
        l->c.dispatch_duplicates++;
    x->stored = true;   /* before an early completion's done record, which says so */
    lg_early_settle(l, x, duplicate);
    if (x->resent && !duplicate && !lg_over(x) &&
        fq_sched_redispatched_run(l->o.sched, &x->run, l->now) == FQ_OK) {
        /* Read back from a flight record, sent again and stored new: the
         * attempt that record told of never reached the workers, this
         * one did, now. Its lease runs from now and a flight record of
         * now says so (its submit's ack waits for it too): else the run
         * would expire, and be forgotten, by the failed attempt's time
         * while a worker has it, and its completion be unknown. */
        l->c.redispatched++;
        lg_journal_flight(l, x, l->now_ms);
    }
    lg_done *dn = lg_over(x) ? lg_done_find(l, x->key) : NULL;
    if (dn && dn->seq == x->run.id)
        dn->unconfirmed = false;    /* completed, and its dispatch is stored */
    x->lt->fails = 0;
    lg_dispatching_again(l);
    lg_unhold(l, x);
    x->resent = false;
    lg_settled(l, x);
}

/* A refusal JetStream will not store: counted, noted, its message acked
 * all the same (unless an early completion holds it). */
static void lg_refusal_unstored(fq_ledger *l, const lg_settle_verdict *v, uint64_t val,
                                int js_err)
{
    l->c.refusals_unstored++;
    fq_ledger_act *a = lg_note(l, FQ_LNOTE_REFUSAL_UNSTORED);
    if (a)
        a->js_err = js_err;
    if (v->x)
        lg_settled(l, v->x);
    else if (v->ack)
        lg_ack_token(l, v->cons, val);
}

/* Carry out verdict v on the outcome of the publish of token; returns
 * whether the caller publishes it again. */
static bool lg_puback_apply(fq_ledger *l, const lg_settle_verdict *v, uint64_t token,
                            enum fq_ledger_pub outcome, int js_err, uint64_t seq)
{
    uint64_t val = FQ_LEDGER_TOKEN_VAL(token);
    if (v->failed)
        l->c.pub_failures++;
    switch (v->what) {
    case LG_SETTLE_JOURNAL:
        lg_journal_answer(l, val, outcome, js_err, seq);
        break;
    case LG_SETTLE_GONE:
        lg_gone_settle(l, v->x);
        break;
    case LG_SETTLE_UNSTORED:
        lg_refusal_unstored(l, v, val, js_err);
        break;
    case LG_SETTLE_DISPATCH_FAILED:
        return !lg_dispatch_failed(l, val, js_err, outcome == FQ_LEDGER_PUB_ERROR);
    case LG_SETTLE_RETRY:
        return true;
    case LG_SETTLE_DISPATCHED:
        lg_dispatch_stored(l, v->x, outcome == FQ_LEDGER_PUB_DUPLICATE);
        break;
    case LG_SETTLE_ACK:
        if (v->x)
            lg_settled(l, v->x);    /* a kept refusal's run: it acks the submit */
        else if (v->ack)
            lg_ack_token(l, v->cons, val);
        break;
    case LG_SETTLE_NOTHING:
        break;
    }
    return false;
}

bool fq_ledger_puback(fq_ledger *l, uint64_t token, enum fq_ledger_pub outcome, int js_err,
                      uint64_t seq, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    lg_settle_verdict v;
    lg_puback_judge(&v, l, token, outcome, js_err);
    return lg_puback_apply(l, &v, token, outcome, js_err, seq);
}

/*
 * An action the caller could not even queue is taken as a decision, then
 * its effects: lg_unsent_judge reads the ledger and changes nothing,
 * saying what is left to do; lg_unsent_apply does it.
 */

/* What an action not sent leaves to do. */
enum lg_unsent {
    LG_UNSENT_NOTHING = 1,      /* what it was for is no longer awaited */
    LG_UNSENT_JOURNAL,          /* the batch in flight: sent again after a while */
    LG_UNSENT_REFUSAL,          /* a refusal: its message naked to come again (a kept
                                   refusal's run let go: refused again from its record) */
    LG_UNSENT_GONE,             /* a dispatch of a run let go with its partition */
    LG_UNSENT_DONE_RESENT,      /* a completed run's dispatch published again: given up */
    LG_UNSENT_RESENT,           /* a redelivery's dispatch published again: given up */
    LG_UNSENT_UNSENDABLE,       /* a dispatch that can never be sent: refused */
    LG_UNSENT_REQUEUE,          /* a dispatch NATS cannot take now, or one that can never
                                   be sent whose lease ran out before we were told (the
                                   scheduler cancels no expired run, and its window holds
                                   the record): queued again, refused at its next turn */
};

/* The verdict on an action not sent. */
typedef struct lg_unsent_verdict {
    enum lg_unsent what;
    lg_run *x;                  /* its run: REFUSAL (a kept refusal's, or NULL), GONE and
                                   the dispatches' */
    lg_batch *b;                /* JOURNAL: the batch */
} lg_unsent_verdict;

/* What action a, which the caller could not queue (st: why), leaves to
 * do. Changes nothing. */
static void lg_unsent_judge(lg_unsent_verdict *v, const fq_ledger *l, const fq_ledger_act *a,
                            fq_status st)
{
    *v = (lg_unsent_verdict){.what = LG_UNSENT_NOTHING};
    if (a->type == FQ_LACT_JOURNAL) {
        const lg_part *pp = a->part < l->nparts ? &l->parts[a->part] : NULL;
        if (pp && pp->sent && pp->sent->id == a->batch) {
            v->what = LG_UNSENT_JOURNAL;
            v->b = pp->sent;
        }
        return;
    }
    if (a->type == FQ_LACT_REFUSE) {
        lg_run *x = a->cons == FQ_LEDGER_SUBMIT ? lg_find_seq(l, a->ack.sseq) : NULL;
        v->what = LG_UNSENT_REFUSAL;
        v->x = x && x->refusing && !x->body ? x : NULL;
        return;
    }
    if (a->type != FQ_LACT_DISPATCH)
        return;
    if ((v->x = lg_gone_find(l, a->seq))) {
        v->what = LG_UNSENT_GONE;
        return;
    }
    lg_run *x = v->x = lg_find_seq(l, a->seq);
    if (x && lg_over(x) && x->resent)
        v->what = LG_UNSENT_DONE_RESENT;    /* published again by lg_resend_done */
    else if (!x || !lg_dispatched(x))
        v->what = LG_UNSENT_NOTHING;
    else if (x->resent)
        v->what = LG_UNSENT_RESENT;
    else if ((st == FQ_ETOOBIG || st == FQ_EINVAL) && x->run.state == FQ_RUN_FLIGHT)
        v->what = LG_UNSENT_UNSENDABLE;     /* else expired since: see LG_UNSENT_REQUEUE */
    else
        v->what = LG_UNSENT_REQUEUE;
}

/* A kept refusal's run whose refusal was not sent: let go; its submit,
 * come again, is refused again from its refused record. */
static void lg_refusing_unsent(fq_ledger *l, lg_run *x)
{
    x->pending--;
    lg_held(l, x->lt, false);
    lg_seq_del(l, x);
    lg_maybe_free(l, x);
    lg_pause_check(l);
}

/* Run x's dispatch can never be sent (admitted before the server's
 * max_payload shrank, say, st): refused, as admission would refuse it now.
 * Its flight record stays in the batch: adopted after a restart, it holds
 * a slot until its lease ends. */
static void lg_unsendable(fq_ledger *l, lg_run *x, fq_status st, const fq_ledger_bytes *raw)
{
    char why[256];
    snprintf(why, sizeof why, "its dispatch cannot be sent: %s",
             st == FQ_ETOOBIG ? "it exceeds the server's max_payload"
                              : "its headers cannot be read");
    l->c.dispatched -= l->c.dispatched > 0;
    fq_ledger_ackref ack = lg_ackref(x);
    lg_refuse_run(l, &ack, x->lt, x->lt->id, NULL, st, why, raw);
    lg_drop_dispatched(l, x);
}

/* Carry out verdict v on action a, not sent (st). */
static void lg_unsent_apply(fq_ledger *l, const lg_unsent_verdict *v, const fq_ledger_act *a,
                            fq_status st)
{
    lg_run *x = v->x;
    switch (v->what) {
    case LG_UNSENT_JOURNAL:
        v->b->retry_at = l->now + FQ_LEDGER_RETRY_MS;
        break;
    case LG_UNSENT_REFUSAL:
        /* Left unacked, and naked so that it comes back soon: the next
         * consumer reset may be an hour of AckWait away. */
        if (x)
            lg_refusing_unsent(l, x);
        lg_nak(l, a->cons, &a->ack, FQ_LEDGER_PARK_MAX_MS);
        break;
    case LG_UNSENT_GONE:
        lg_gone_settle(l, x);
        break;
    case LG_UNSENT_DONE_RESENT:
        x->pending--;
        lg_unresend(l, x);
        lg_maybe_free(l, x);
        break;
    case LG_UNSENT_RESENT:
        x->pending--;
        lg_unresend(l, x);
        break;
    case LG_UNSENT_UNSENDABLE:
        x->pending--;
        lg_unsendable(l, x, st, &a->raw);
        break;
    case LG_UNSENT_REQUEUE:
        /* NATS cannot take a publish now (disconnected, or too many
         * pending): the next turn tries again in the same order. Out of
         * memory parks the tenant. */
        x->pending--;
        l->c.dispatched -= l->c.dispatched > 0;
        if (st == FQ_ENOMEM)
            lg_requeue(l, x, 0);
        else
            lg_requeue_run(l, x);
        break;
    case LG_UNSENT_NOTHING:
        break;
    }
}

void fq_ledger_unsent(fq_ledger *l, const fq_ledger_act *act, fq_status st, uint64_t now,
                      int64_t now_ms)
{
    fq_ledger_act copy = *act;      /* act may live in the list, which may grow here */
    l->now = now;
    l->now_ms = now_ms;
    l->c.pub_failures++;
    lg_unsent_verdict v;
    lg_unsent_judge(&v, l, &copy, st);
    lg_unsent_apply(l, &v, &copy, st);
}

/* ---- completions ------------------------------------------------------- */

/* Remember (tenant, run_id) as completed, here and in the journal; the
 * completion is acked once its record is stored. */
static void lg_mark_done(fq_ledger *l, lg_run *x, const fq_ledger_ackref *done_ack)
{
    lg_done_add(l, x->key, x->run.id, lg_keep_until(l), x->part,
                !x->stored);
    fq_jrec r = {.type = FQ_JREC_DONE, .seq = x->run.id < FQ_LEDGER_SYNTH_ID ? x->run.id : 0,
                 .at_ms = l->now_ms > 0 ? l->now_ms : 0, .unconfirmed = !x->stored};
    snprintf(r.tenant, sizeof r.tenant, "%s", x->lt->id);
    memcpy(r.run_id, x->names->run_id, sizeof r.run_id);
    lg_part *pp = &l->parts[x->part];
    if (!lg_journal_add(l, pp, &r) ||
        !lg_grow(&pp->cur->dones, &pp->cur->cap_dones, pp->cur->ndones + 1,
                 sizeof(uint64_t))) {
        lg_ack(l, FQ_LEDGER_DONE, done_ack);    /* reconciled; only its record is lost */
        return;
    }
    pp->cur->dones[pp->cur->ndones++] = done_ack->sseq;
}

/* Whether a journal batch of partition part not yet stored acks
 * completion sseq. */
static bool lg_done_pending(const fq_ledger *l, uint32_t part, uint64_t sseq)
{
    const lg_part *pp = &l->parts[part < l->nparts ? part : 0];
    for (size_t b = 0; b < 2; b++)
        for (size_t i = 0; i < pp->bat[b].ndones; i++)
            if (pp->bat[b].dones[i] == sseq)
                return true;
    return false;
}

/* Refuse completion d for the reason err: a copy to <rejected>._invalid,
 * acked once stored. Past FQ_LEDGER_DONE_COPIES_PER_SEC copies in a second
 * the rest are acked at once without one. held: it is remembered as early,
 * and acked when that is decided, not here. */
static void lg_refuse_done(fq_ledger *l, const fq_ledger_done *d, const char *err, bool held)
{
    uint64_t sec = l->now / 1000;
    if (sec != l->done_copy_sec) {
        l->done_copy_sec = sec;
        l->done_copies = 0;
    }
    if (l->done_copies >= FQ_LEDGER_DONE_COPIES_PER_SEC) {
        l->c.completion_copies_skipped++;
        if (!held)
            lg_ack(l, FQ_LEDGER_DONE, &d->ack);
        return;
    }
    l->done_copies++;
    char why[400];
    snprintf(why, sizeof why, "invalid completion: %s", err);
    fq_ledger_act *a = lg_refuse(l, FQ_LEDGER_DONE, &d->ack, NULL, NULL, d->subject, FQ_EINVAL,
                                 why, &d->raw);
    if (a && held)      /* its copy's PubAck acks nothing: the early completion holds it */
        a->token = lg_token(FQ_LTK_DONE_REJECT, d->ack.part, d->ack.sseq) | LG_TOKEN_HELD;
}

/* Reconcile x, dispatched, with what its completion reported; done_ack:
 * the completion's delivery, acked once its done record is stored. */
static void lg_reconcile(fq_ledger *l, lg_run *x, const fq_completion *c,
                         const fq_ledger_ackref *done_ack)
{
    bool late = x->run.state == FQ_RUN_EXPIRED;
    /* Kinds reported price the run; actual_tokens alone is its cost. */
    uint64_t cost = c->kinds ? fq_price_cost(&x->lt->prices, c->input_tokens,
                                             c->output_tokens, c->cached_tokens)
                             : c->actual_tokens;
    /* The scheduler holds x: a run read back and not taken in yet (loaded)
     * sees no completion before its read-back ends (the contract of
     * fq_ledger_recover_record). */
    fq_sched_complete_run(NULL, l->o.sched, &x->run, c->actual_tokens, cost);
    if (late)
        l->c.completions_unheld++;
    else
        l->c.completions++;
    lg_debt_touch(l, x->lt);
    if (c->status == FQ_DONE_OK)
        fq_est_observe(l->o.est, x->lt->id, x->names->workflow, x->names->declared, x->est,
                       cost);
    fq_ledger_act *a = lg_act_new(l, FQ_LACT_RECONCILED);
    if (a) {
        a->lt = x->lt;
        a->tenant = x->lt->id;
        a->run_id = x->names->run_id;
        a->workflow = x->names->workflow;
        a->est = x->est;
        a->actual = c->actual_tokens;
        a->late = late;
    }
    lg_mark_done(l, x, done_ack);
    lg_key_del(l, x);
    lg_maybe_free(l, x);
}

/*
 * A completion is taken as a decision, then its effects: lg_done_judge
 * reads the ledger and changes nothing, saying what the completion is;
 * lg_done_apply carries it out.
 *
 * A completion counts only for a run fairq dispatched and still remembers,
 * on that run's tenant's subject: in flight, or expired within
 * keep_done_ms. Anything else changes no deficit, creates no tenant and
 * records no run id: counted as unknown and refused (and remembered as
 * early, until its run's dispatch says whether it counts). A completion of a
 * queued run waits (a nak) until the run is in flight, up to its
 * FQ_LEDGER_DONE_DEFER_MAX-th delivery: a leader before us may have
 * dispatched it unrecorded, and our dispatch of it is de-duplicated.
 */

/* What a completion becomes. */
enum lg_done_take {
    LG_DONE_HOLD_ON = 1,        /* held as early and delivered again, its run not
                                   dispatched yet: held on, until its dispatch is answered */
    LG_DONE_DEFER,              /* its run is queued: a nak, it comes again */
    LG_DONE_INVALID,            /* refused: not parsed, or no tenant in its subject */
    LG_DONE_QUEUED,             /* its run still queued past its deferral: refused, and
                                   held as early */
    LG_DONE_DUPLICATE,          /* its run completed already */
    LG_DONE_UNKNOWN,            /* no run fairq holds: refused, and held as early */
    LG_DONE_RECONCILE,          /* reconciles its run */
};

/* The verdict on a completion. */
typedef struct lg_done_verdict {
    enum lg_done_take take;
    lg_run *x;                  /* RECONCILE: its run */
    lg_early *e;                /* HOLD_ON: the early completion it is; RECONCILE: one of
                                   this very delivery, taken out of the early ones first */
    uint64_t key;               /* its run key's hash */
    char sentence[400];         /* INVALID, QUEUED, UNKNOWN: why it is refused */
} lg_done_verdict;

/* What completion d is. Changes nothing. */
static void lg_done_judge(lg_done_verdict *v, const fq_ledger *l, const fq_ledger_done *d)
{
    v->x = NULL;
    v->e = NULL;
    v->key = 0;
    if (d->status != FQ_OK || !d->tenant) {
        v->take = LG_DONE_INVALID;
        snprintf(v->sentence, sizeof v->sentence, "%s",
                 d->error ? d->error
                          : "the completion's subject has no valid tenant as its last token");
        return;
    }
    const char *run_id = d->c->run_id;
    v->key = lg_key(l, d->tenant, run_id);
    lg_run *x = lg_find_key(l, d->tenant, run_id, v->key);
    bool queued = x && lg_queued(x);
    lg_early *e = lg_early_find(l, v->key);
    if (e && e->ack.sseq == d->ack.sseq) {
        v->e = e;
        if (!x || queued) {
            v->take = LG_DONE_HOLD_ON;
            return;
        }
    }
    if (queued && d->ack.delivered < FQ_LEDGER_DONE_DEFER_MAX) {
        v->take = LG_DONE_DEFER;
    } else if (queued) {
        /* A worker's bug: a run not dispatched has not run. It stays
         * queued and is dispatched as if nothing came. Or a leader before
         * us dispatched it, and our dispatch is still to come (retried
         * through a full store, say): held as early, applied only if that
         * dispatch is answered duplicate. */
        v->take = LG_DONE_QUEUED;
        snprintf(v->sentence, sizeof v->sentence, "run_id %s is queued, not dispatched yet",
                 run_id);
    } else if (!x && lg_done_find(l, v->key)) {
        v->take = LG_DONE_DUPLICATE;
    } else if (!x) {
        v->take = LG_DONE_UNKNOWN;
        snprintf(v->sentence, sizeof v->sentence, "run_id %s is no run of tenant %s that "
                 "fairq dispatched and remembers (in flight, or expired within %" PRIu64
                 " ms)", run_id, d->tenant, l->o.keep_done_ms);
    } else {
        v->take = LG_DONE_RECONCILE;
        v->x = x;
    }
}

/* Carry out verdict v on completion d. */
static void lg_done_apply(fq_ledger *l, const fq_ledger_done *d, const lg_done_verdict *v)
{
    switch (v->take) {
    case LG_DONE_HOLD_ON:
        v->e->ack = d->ack;
        break;
    case LG_DONE_DEFER:
        l->c.completions_deferred++;
        lg_nak(l, FQ_LEDGER_DONE, &d->ack, FQ_LEDGER_DONE_DEFER_MS);
        break;
    case LG_DONE_INVALID:
        l->c.completions_invalid++;
        lg_refuse_done(l, d, v->sentence, false);
        break;
    case LG_DONE_QUEUED: {
        bool held = lg_early_add(l, v->key, d->c, &d->ack, d->ts_ms);
        l->c.completions_invalid++;
        lg_refuse_done(l, d, v->sentence, held);
        break;
    }
    case LG_DONE_DUPLICATE:
        l->c.completions_duplicate++;
        /* The same completion delivered again (its consumer made again)
         * while its done record waits for its batch: that batch acks it.
         * Acked now, it would be lost with the batch to a crash. */
        if (!lg_done_pending(l, d->ack.part, d->ack.sseq))
            lg_ack(l, FQ_LEDGER_DONE, &d->ack);
        break;
    case LG_DONE_UNKNOWN:
        l->c.completions_unknown++;
        lg_refuse_done(l, d, v->sentence, lg_early_add(l, v->key, d->c, &d->ack, d->ts_ms));
        break;
    case LG_DONE_RECONCILE:
        if (v->e)
            lg_early_take(l, v->e);
        lg_reconcile(l, v->x, d->c, &d->ack);
        break;
    }
}

void fq_ledger_done_in(fq_ledger *l, const fq_ledger_done *d, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    if (lg_unowned(l, d->tenant, &d->ack))
        return;
    lg_done_verdict v;
    lg_done_judge(&v, l, d);
    lg_done_apply(l, d, &v);
}

/* ---- leases that ran out ------------------------------------------------- */

/* Run x's lease ran out at at_ms (unix): its slot is free, and a late
 * completion may still reconcile it until the scheduler forgets it, also
 * after a restart (its expired record). note says how: FQ_LNOTE_EXPIRED
 * (in our window), FQ_LNOTE_READ_EXPIRED (read back so, past_window saying
 * why). */
static void lg_expired(fq_ledger *l, lg_run *x, int64_t at_ms, enum fq_ledger_note note,
                       bool past_window)
{
    l->c.expired++;
    fq_ledger_act *a = lg_note(l, note);
    if (a) {
        a->n = past_window;
        a->lt = x->lt;
        a->tenant = x->lt->id;
        a->run_id = x->names ? x->names->run_id : "";
    }
    /* Without names its body is read for its first dispatch: it has no
     * record. With names while reading (its body read a second time, an
     * attempt before failed) its dispatch is not out, yet the record is
     * written, and harmless: it follows that attempt's flight record, which
     * the journal keeps (that dispatch may be out: its PubAck may have
     * timed out), and tells a restart no more than it: the run read back is
     * adopted expired (it would be from that flight record too, whose lease
     * ended before this one), remembered from a later time, and its submit,
     * unacked, is published again under its Nats-Msg-Id (lg_resend), marked
     * past the window from its submit's time rather than the flight
     * record's: sooner, a mark not a loss. The next attempt's flight
     * record, later, supersedes it. */
    if (x->names)
        lg_journal_run(l, x, FQ_JREC_EXPIRED, at_ms);
}

typedef struct lg_expiring {
    fq_ledger *l;
    uint64_t early;             /* forgotten before keep_done_ms */
} lg_expiring;

static void lg_on_expiry(void *arg, const fq_run *r, enum fq_expiry what)
{
    lg_expiring *e = arg;
    fq_ledger *l = e->l;
    lg_run *x = r->handle;
    if (what == FQ_EXPIRY_LEASE) {
        lg_expired(l, x, l->now_ms, FQ_LNOTE_EXPIRED, false);
        return;
    }
    /* Forgotten: a late completion for it is unknown, as for any run
     * fairq does not remember. Forgotten early (past max_expired), its run
     * key is kept among the completed ones until it would have been
     * forgotten: a submit reusing its run id is refused, not admitted and
     * its dispatch taken for this one's by Nats-Msg-Id, and its own
     * submit, come again, is not dispatched anew. Its late completion is
     * then a duplicate: not reconciled, its charge stays as estimated.
     * Not a run whose body is being read: its dispatch is not out (an
     * earlier attempt's may be, within its Nats-Msg-Id's window), and its
     * submit, left unacked when the body comes, must come back as new, not
     * be taken for completed and published again without its flight record
     * (dst_ledger seed 1061, its bodies read slowly: acked with no flight
     * record stored). */
    if (r->t <= l->now && l->now - r->t < l->o.keep_done_ms) {
        e->early++;
        if (!x->reading)
            lg_done_add(l, x->key, x->run.id, (int64_t)(r->t + l->o.keep_done_ms), x->part,
                        !x->stored);
    }
    lg_key_del(l, x);
    lg_maybe_free(l, x);
}

void fq_ledger_tick(fq_ledger *l, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    lg_expiring e = {l, 0};
    fq_sched_expire(l->o.sched, now, lg_on_expiry, &e);
    if (e.early) {
        l->c.expired_forgotten_early += e.early;
        fq_ledger_act *a = lg_note(l, FQ_LNOTE_EXPIRED_EARLY);
        if (a)
            a->n = e.early;
    }
    lg_done_forget(l, (int64_t)now);
    lg_early_forget(l, (int64_t)now);
    lg_refused_forget(l, (int64_t)now);
    lg_acks_later(l);
    lg_recall(l);
}

void fq_ledger_flush(fq_ledger *l, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    lg_debt_flush(l);
    lg_debt_sweep(l);
    lg_journal_flush(l);
    lg_journal_check(l);
}

void fq_ledger_set_rate(fq_ledger *l, double tokens_per_sec)
{
    l->rate_tokens = tokens_per_sec;
}

/* ---- the journal read back ----------------------------------------------- */

/* The run of a flight or expired record, not held yet: held in the key
 * index until a done record for it follows. NULL if completed already or
 * out of memory. */
static lg_run *lg_load_run(fq_ledger *l, const fq_jrec *r, uint64_t h)
{
    fq_status why = FQ_OK;
    fq_ledger_tenant *lt = NULL;
    /* Completed already: this run, not an earlier one of the same run id
     * (reused once that was forgotten), whose done record says nothing
     * of this one. */
    const lg_done *d = lg_done_find(l, h);
    if ((d && (!r->seq || d->seq == r->seq)) ||
        !(lt = l->o.tenant(l->o.tenant_arg, r->tenant, strlen(r->tenant), FQ_LEDGER_TENANT_RECORD,
                            &why)))
        return NULL;
    lg_run *x = lg_run_alloc(l);
    lg_names *nm = x ? fq_opool_alloc(&l->names_pool) : NULL;
    if (!nm) {
        if (x)
            lg_maybe_free(l, x);
        return NULL;
    }
    *nm = (lg_names){.declared = r->declared};  /* no sub-tenant: the journal has none */
    memcpy(nm->run_id, r->run_id, sizeof nm->run_id);
    memcpy(nm->workflow, r->workflow, sizeof nm->workflow);
    *x = (lg_run){.run.id = r->seq ? r->seq : FQ_LEDGER_SYNTH_ID + l->synth++, .lt = lt,
                  .names = nm, .key = h, .submitted_ms = r->at_ms, .est = r->est,
                  .loaded = true};
    lg_key_add(l, x);
    if (!x->in_key) {
        lg_maybe_free(l, x);
        return NULL;
    }
    if (l->loaded_tail)
        l->loaded_tail->run.next = &x->run;
    else
        l->loaded = x;
    l->loaded_tail = x;
    return x;
}

/* A debt record: the tenant's deficit becomes the latest one stored (no
 * tenant holds a run while the journal is read): the last one read of a
 * subject, but after a change of P (debts_moved) a tenant's records are on
 * two subjects, read in either order (docs/partitions.md), so an older one
 * read later is left. Older by the stream's sequence, not its timestamp:
 * every subject is one stream's (FAIRQ_RUNS), whose sequence grows with
 * each message whichever node leads it, while a timestamp is the clock of
 * the node that led when it was stored, and a new leader's may be behind
 * the old one's (a record written after a leader change would then read
 * as the older and lose). A debtor is listed due at once: the stream's
 * copy of its record ages out from its first writing. */
static void lg_load_debt(fq_ledger *l, const fq_jrec *r, uint64_t seq, int64_t now_ms)
{
    fq_status why = FQ_OK;
    fq_ledger_tenant *lt = l->o.tenant(l->o.tenant_arg, r->tenant, strlen(r->tenant),
                                       r->deficit || l->o.debts_moved
                                                  ? FQ_LEDGER_TENANT_RECORD
                                                  : FQ_LEDGER_TENANT_FIND, &why);
    if (!lt || (l->o.debts_moved && seq < lt->debt_read_seq) ||
        fq_tenant_set_debt(l->o.sched, lt->t, r->deficit) != FQ_OK)
        return;
    lt->debt_read_seq = seq;
    lt->debt_written = r->deficit;
    lt->debt_at_ms = r->at_ms < now_ms ? r->at_ms : now_ms;   /* not in the future */
    if (r->deficit < 0)
        lg_debt_link(l, lt, 0);
    else
        lg_debt_unlink(l, lt);
}

void fq_ledger_recover_record(fq_ledger *l, const fq_jrec *r, int64_t stored_ms, uint64_t seq,
                              uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    uint32_t part = fq_ledger_part_of(l, r->tenant);
    if (!lg_reading(l, part)) {
        l->c.records_foreign++;
        return;
    }
    if (r->type == FQ_JREC_DEBT) {
        lg_load_debt(l, r, seq, now_ms);
        return;
    }
    uint64_t h = lg_key(l, r->tenant, r->run_id);
    lg_run *x = lg_find_key(l, r->tenant, r->run_id, h);
    switch (r->type) {
    case FQ_JREC_FLIGHT:
        if (!x) {
            lg_load_run(l, r, h);
        } else if (x->run.id == r->seq) {
            /* Its dispatch again, later (an attempt before it had failed):
             * in flight from this one. */
            x->read_expired = false;
            x->submitted_ms = r->at_ms;
        }
        return;
    case FQ_JREC_EXPIRED:
        /* Its flight record may have aged out before this one. */
        if (!x)
            x = lg_load_run(l, r, h);
        if (x) {
            x->read_expired = true;
            x->submitted_ms = r->at_ms;     /* from now on: when it expired */
        }
        return;
    case FQ_JREC_DONE:
        /* A done record without its submit sequence was written, before
         * fairq refused them, for a completion of a run it never held: it
         * makes no run id look used. */
        if (!x && !r->seq)
            return;
        lg_done_add(l, h, r->seq, lg_stored_until(l, stored_ms), part, r->unconfirmed);
        if (x) {
            lg_key_del(l, x);
            x->loaded = false;              /* never taken in: not counted */
        }
        return;
    case FQ_JREC_REFUSED:
        lg_refused_add(l, r->seq, r->refusal, part, lg_stored_until(l, stored_ms));
        return;
    case FQ_JREC_DEBT:
        return;
    }
}

/* Forget x, read back and not taken in. */
static void lg_unload(fq_ledger *l, lg_run *x)
{
    lg_key_del(l, x);
    x->loaded = false;
    lg_maybe_free(l, x);
}

/* Take in x, which expired at expired_ms (unix), as expired: a late
 * completion still reconciles it until it is forgotten. false: not taken
 * (out of memory), and forgotten. */
static bool lg_adopt_expired(fq_ledger *l, lg_run *x, int64_t expired_ms)
{
    uint64_t ago = l->now_ms > expired_ms ? (uint64_t)(l->now_ms - expired_ms) : 0;
    fq_sched_give_run(l->o.sched, &x->run);
    if (fq_sched_adopt_expired(NULL, l->o.sched, x->lt->t, x->run.id, x->est, x,
                               l->now > ago ? l->now - ago : 0) == FQ_OK)
        return true;
    lg_unload(l, x);
    return false;
}

/* Put run x, dispatched age ms before now, back into the window without
 * sending it again or charging its tenant twice: its lease runs from its
 * dispatch. Only up to the window's limits and its tenant's cap: the
 * records are not trusted, so a run past them is taken as expired at once,
 * and a late completion still reconciles it once. */
static void lg_adopt_one(fq_ledger *l, lg_run *x, uint64_t age)
{
    fq_sched_give_run(l->o.sched, &x->run);
    fq_status s = fq_sched_adopt(NULL, l->o.sched, x->lt->t, x->run.id, x->est, x,
                                 l->now > age ? l->now - age : 0);
    if (s == FQ_OK) {
        l->c.adopted++;
        return;
    }
    if (s == FQ_EFULL && lg_adopt_expired(l, x, l->now_ms)) {
        l->c.adopt_overflow++;
        lg_expired(l, x, l->now_ms, FQ_LNOTE_READ_EXPIRED, true);
        return;
    }
    if (s != FQ_EFULL)
        lg_unload(l, x);
}

void fq_ledger_recovered(fq_ledger *l, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    for (uint32_t k = 0; k < l->nparts; k++)
        if (l->parts[k].state == LG_PART_LOADING)
            l->parts[k].state = LG_PART_OWNED;
    uint64_t timeout = l->o.run_timeout_ms;
    for (lg_run *x = l->loaded, *nx; x; x = nx) {
        nx = lg_loaded_next(x);
        x->run.next = NULL;
        bool loaded = x->loaded;
        x->loaded = false;      /* off the list: the scheduler's, or forgotten */
        int64_t age = now_ms - x->submitted_ms;
        bool timed_out = timeout && age >= 0 && (uint64_t)age >= timeout;
        /* A run that expired while no proxy ran did so when its lease ran
         * out. */
        int64_t expired_at = x->submitted_ms + (int64_t)timeout;
        int64_t keep = (int64_t)l->o.keep_done_ms;
        bool flight = loaded && !x->read_expired;
        if (flight && !timed_out) {
            lg_adopt_one(l, x, age > 0 ? (uint64_t)age : 0);
        } else if (flight && expired_at + keep > now_ms) {
            if (lg_adopt_expired(l, x, expired_at))    /* counted, with its expired record */
                lg_expired(l, x, expired_at, FQ_LNOTE_READ_EXPIRED, false);
        } else if (loaded && x->submitted_ms + keep > now_ms) {
            /* Expired before the restart: a late completion still counts. */
            lg_adopt_expired(l, x, x->submitted_ms);
        } else {
            lg_unload(l, x);            /* completed, or expired past remembering */
        }
    }
    l->loaded = l->loaded_tail = NULL;
}

/* ---- partitions adopted and released -------------------------------------- */

/* Whether records of partition part are read back now: it is adopted and
 * not owned yet, or (one partition) owned from the start. */
static bool lg_reading(const fq_ledger *l, uint32_t part)
{
    const lg_part *pp = &l->parts[part];
    return pp->state == LG_PART_LOADING || (l->nparts == 1 && pp->state == LG_PART_OWNED);
}

/* Whether a delivery of tenant (NULL: no valid one, then its delivery's
 * partition) is of a partition not owned: dropped unanswered, counted.
 * Its consumer is being let go, and the next owner's gets it. */
static bool lg_unowned(fq_ledger *l, const char *tenant, const fq_ledger_ackref *ack)
{
    uint32_t part = l->nparts == 1 ? 0 : tenant ? fq_ledger_part_of(l, tenant) : ack->part;
    if (part < l->nparts && l->parts[part].state == LG_PART_OWNED)
        return false;
    l->c.unowned++;
    return true;
}

/* The run let go with its partition whose dispatch was submit seq's, or
 * NULL. */
static lg_run *lg_gone_find(const fq_ledger *l, uint64_t seq)
{
    fq_u64map_node *n = fq_u64map_count(l->gone) ? fq_u64map_find(l->gone, seq) : NULL;
    return n ? FQ_U64MAP_ENTRY(n, lg_run, run.hnode) : NULL;
}

bool fq_ledger_token_part(uint32_t *part, const fq_ledger *l, uint64_t token)
{
    uint64_t v = FQ_LEDGER_TOKEN_VAL(token);
    int kind = FQ_LEDGER_TOKEN_KIND(token);
    *part = 0;
    if (kind == FQ_LTK_JOURNAL || kind == FQ_LTK_REJECT || kind == FQ_LTK_DONE_REJECT) {
        *part = lg_token_part(v);
        return *part < l->nparts;
    }
    const lg_run *x = kind == FQ_LTK_DISPATCH ? lg_find_seq(l, v) : NULL;
    if (x)
        *part = x->part;
    return x != NULL;
}

/* The answer to the dispatch of x, a run let go with its partition:
 * counted off, and the run freed once none is awaited. */
static void lg_gone_settle(fq_ledger *l, lg_run *x)
{
    if (x->pending && --x->pending)
        return;
    fq_u64map_remove(l->gone, &x->run.hnode);
    l->parts[x->part].gone--;
    lg_maybe_free(l, x);
}

fq_status fq_ledger_adopt(fq_ledger *l, uint32_t part, uint64_t term)
{
    if (part >= l->nparts)
        return FQ_EINVAL;
    lg_part *pp = &l->parts[part];
    if (pp->state != LG_PART_FREE || pp->gone)
        return FQ_EEXIST;
    pp->jseq = 0;
    pp->jmarked = false;
    pp->term = term;
    pp->inherit_seq = UINT64_MAX;
    pp->state = LG_PART_LOADING;
    l->c.parts_adopted++;
    return FQ_OK;
}

bool fq_ledger_consumer_made(fq_ledger *l, uint32_t part, uint64_t term, uint64_t last_seq)
{
    if (part >= l->nparts)
        return false;
    lg_part *pp = &l->parts[part];
    if (pp->term && term != pp->term)
        return false;   /* a tenure's let go since */
    if (pp->state == LG_PART_FREE || pp->inherit_seq != UINT64_MAX)
        return false;
    pp->inherit_seq = last_seq;
    return true;
}

bool fq_ledger_owns(const fq_ledger *l, uint32_t part)
{
    return part < l->nparts && l->parts[part].state == LG_PART_OWNED;
}

/* What a release walks: the partition and its runs. */
typedef struct lg_releasing {
    fq_ledger *l;
    uint32_t part;
    uint64_t naked;             /* queued runs naked */
} lg_releasing;

static bool lg_release_which(void *arg, const fq_tenant *t)
{
    lg_releasing *r = arg;
    fq_tenant_info ti;
    fq_tenant_info_get(t, &ti);
    return fq_ledger_part_of(r->l, ti.id) == r->part;
}

/* A queued run of the partition let go: its submit naked, to come to the
 * next owner at once; each tenant's in its queue's order. */
static void lg_release_queued(void *arg, const fq_run *run)
{
    lg_releasing *r = arg;
    lg_run *x = run->handle;
    if (x->in_seq) {
        fq_ledger_ackref ack = lg_ackref(x);
        lg_nak(r->l, FQ_LEDGER_SUBMIT, &ack, 0);
    }
    r->naked++;
    if (!x->in_seq && !x->in_key)       /* not among those the release walks */
        lg_maybe_free(r->l, x);
}

/* Collect into l->scratch the runs of part that the indexes hold; false
 * out of memory. */
static bool lg_release_collect(fq_ledger *l, uint32_t part)
{
    l->nscratch = 0;
    for (fq_u64map_node *n = fq_u64map_first(l->by_seq); n; n = fq_u64map_next(l->by_seq, n)) {
        lg_run *x = FQ_U64MAP_ENTRY(n, lg_run, run.hnode);
        if (x->part != part)
            continue;
        if (!lg_grow(&l->scratch, &l->scratch_cap, l->nscratch + 1, sizeof *l->scratch))
            return false;
        l->scratch[l->nscratch++] = x;
    }
    for (fq_u64map_node *n = fq_u64map_first(l->by_key); n; n = fq_u64map_next(l->by_key, n)) {
        lg_run *x = FQ_U64MAP_ENTRY(n, lg_run, key_node);
        if (x->part != part || x->in_seq)
            continue;
        if (!lg_grow(&l->scratch, &l->scratch_cap, l->nscratch + 1, sizeof *l->scratch))
            return false;
        l->scratch[l->nscratch++] = x;
    }
    return true;
}

/* Forget the runs of part read back and not taken in yet (let go while
 * being read). */
static void lg_release_loaded(fq_ledger *l, uint32_t part)
{
    lg_run *head = NULL, *tail = NULL;
    for (lg_run *x = l->loaded, *nx; x; x = nx) {
        nx = lg_loaded_next(x);
        x->run.next = NULL;
        if (x->part == part) {
            lg_unload(l, x);
            continue;
        }
        if (tail)
            tail->run.next = &x->run;
        else
            head = x;
        tail = x;
    }
    l->loaded = head;
    l->loaded_tail = tail;
}

/* Drop part's tenants from the lists the ledger keeps of tenants: those
 * reconciled this turn, the debtors, those with runs given back. */
static void lg_release_tenants(fq_ledger *l, uint32_t part)
{
    fq_ledger_tenant **pt = &l->dirty;
    while (*pt) {
        fq_ledger_tenant *t = *pt;
        if (lg_lt_part(l, t) == part) {
            *pt = t->dirty_next;
            t->dirty_next = NULL;
            t->debt_dirty = false;
        } else {
            pt = &t->dirty_next;
        }
    }
    for (fq_ledger_tenant *t = l->debt_head, *nx; t; t = nx) {
        nx = t->debt_next;
        if (lg_lt_part(l, t) == part) {
            lg_debt_unlink(l, t);
            t->debt_written = 0;
            t->debt_at_ms = 0;
        }
    }
    for (fq_ledger_tenant *t = l->gate_head, *nx; t; t = nx) {
        nx = t->gate_next;
        if (lg_lt_part(l, t) == part)
            while (t->back_head)
                lg_back_pop(l, t);  /* naked already: the next owner's consumer has them */
    }
}

static bool lg_done_of_part(const fq_kept_node *n, const void *part)
{
    return ((const lg_done *)(const void *)n)->part == *(const uint32_t *)part;
}

static bool lg_refused_of_part(const fq_kept_node *n, const void *part)
{
    return ((const lg_refused *)(const void *)n)->part == *(const uint32_t *)part;
}

/* Drop what part holds of deliveries: acks held back, early completions
 * (unacked), and its done ids. */
static void lg_release_deliveries(fq_ledger *l, uint32_t part)
{
    size_t kept = 0;
    for (size_t i = 0; i < l->nlater; i++)
        if (l->later[i].a.part != part)
            l->later[kept++] = l->later[i];
    l->nlater = kept;
    l->parts[part].nlater = 0;
    for (fq_kept_node *n = l->early.head; n; n = n->next) {
        lg_early *e = (lg_early *)(void *)n;
        if (e->k.until != INT64_MIN && e->ack.part == part)
            lg_early_take(l, e);
    }
    fq_kept_drop_if(&l->done, lg_done_of_part, &part);
    fq_kept_drop_if(&l->refused, lg_refused_of_part, &part);
}

/* Drop part's journal: its batches unsent or unanswered, and its state. */
static void lg_release_journal(fq_ledger *l, lg_part *pp)
{
    for (size_t b = 0; b < 2; b++) {
        lg_batch *bt = &pp->bat[b];
        for (size_t i = 0; i < bt->nruns; i++) {
            lg_run *x = bt->runs[i];
            x->pending--;
            if (!x->in_seq && !x->in_key)
                lg_maybe_free(l, x);
        }
        bt->nruns = bt->ndones = 0;
        bt->sent = false;
        bt->retry_at = 0;
        fq_jbatch_clear(&bt->jb);
    }
    pp->cur = pp->sent = NULL;
    if (pp->fenced) {
        pp->fenced = false;
        l->nfenced--;
    }
    lg_journal_again(l, pp);
    pp->jmarked = false;
    if (l->jlast == pp)
        l->jlast = NULL;
}

/* Forget x, a run of a partition let go (the scheduler let go of it
 * already): its submit's hold, its indexes; a dispatch still unanswered
 * keeps it in gone until its answer comes. */
static void lg_release_forget(fq_ledger *l, lg_part *pp, lg_run *x)
{
    if (x->in_seq) {
        lg_unhold(l, x);
        lg_held(l, x->lt, false);
        lg_seq_del(l, x);
    }
    lg_key_del(l, x);
    x->resent = false;
    if (!x->pending) {
        lg_maybe_free(l, x);
    } else if (fq_u64map_reserve(l->gone) == FQ_OK) {
        /* Its dispatch is unanswered: freed when it is. */
        fq_u64map_insert(l->gone, &x->run.hnode);
        pp->gone++;
    } else {
        x->pending = 0;     /* out of memory: its answer finds nothing */
        lg_maybe_free(l, x);
    }
}

/* Let go of part's runs: the scheduler forgets the dispatched ones and
 * clears the queued ones (their submits naked, counted in *naked), then
 * the ledger forgets those its indexes hold. Returns the dispatched runs
 * let go. */
static uint64_t lg_release_runs(fq_ledger *l, lg_part *pp, uint32_t part, uint64_t *naked)
{
    lg_releasing r = {l, part, 0};
    uint64_t let_go = 0;
    if (!lg_release_collect(l, part))
        l->nscratch = 0;    /* out of memory: its runs stay held until they settle */
    for (size_t i = 0; i < l->nscratch; i++) {
        lg_run *x = l->scratch[i];
        x->reading = false;
        if (fq_sched_forget_run(l->o.sched, &x->run) == FQ_OK)
            let_go++;
    }
    fq_sched_clear(l->o.sched, lg_release_which, lg_release_queued, &r);
    for (size_t i = 0; i < l->nscratch; i++)
        lg_release_forget(l, pp, l->scratch[i]);
    l->nscratch = 0;
    *naked = r.naked;
    return let_go;
}

/* Count a release of part and tell of it. */
static void lg_released(fq_ledger *l, uint32_t part, uint64_t naked, uint64_t let_go)
{
    l->c.parts_released++;
    l->c.released_queued += naked;
    l->c.released_dispatched += let_go;
    fq_ledger_act *a = lg_note(l, FQ_LNOTE_PART_RELEASED);
    if (a) {
        a->part = part;
        a->n = naked;
        a->n2 = let_go;
    }
}

void fq_ledger_release(fq_ledger *l, uint32_t part, uint64_t now, int64_t now_ms)
{
    l->now = now;
    l->now_ms = now_ms;
    if (part >= l->nparts || l->parts[part].state == LG_PART_FREE)
        return;
    lg_part *pp = &l->parts[part];
    lg_release_journal(l, pp);
    lg_release_loaded(l, part);
    uint64_t naked = 0, let_go = lg_release_runs(l, pp, part, &naked);
    lg_release_tenants(l, part);
    lg_release_deliveries(l, part);
    /* Let go only now: its naks above went to its consumer; from here on
     * nothing is acked, naked or journalled for it. */
    pp->state = LG_PART_FREE;
    lg_journal_check_part(l, pp);
    lg_pause_check(l);
    lg_released(l, part, naked, let_go);
}

void fq_ledger_part_stats_get(fq_ledger_part_stats *out, const fq_ledger *l, uint32_t part)
{
    *out = (fq_ledger_part_stats){0};
    if (part >= l->nparts)
        return;
    const lg_part *pp = &l->parts[part];
    bool dirty = false;
    for (const fq_ledger_tenant *t = l->dirty; t && !dirty; t = t->dirty_next)
        dirty = t->part1 ? t->part1 - 1 == part : l->nparts == 1;
    *out = (fq_ledger_part_stats){
        .owned = pp->state == LG_PART_OWNED, .loading = pp->state == LG_PART_LOADING,
        .fenced = pp->fenced, .settled = !pp->cur && !pp->sent && !dirty, .term = pp->term,
        .expect_seq = pp->jseq};
}

/* ---- create and destroy -------------------------------------------------- */

void fq_ledger_tenant_init(fq_ledger_tenant *lt, fq_tenant *t, const char *id)
{
    *lt = (fq_ledger_tenant){.t = t, .id = id};
}

bool fq_ledger_tenant_busy(const fq_ledger_tenant *lt)
{
    return lt->keyed || lt->back || lt->debt_listed || lt->debt_dirty;
}

void fq_ledger_sched_opts(fq_sched_opts *o, const fq_ledger_opts *lo)
{
    o->caller_runs = true;      /* a run's record is the ledger's lg_run */
    o->run_timeout = lo->run_timeout_ms;
    o->max_expired = lo->max_expired;
    o->expired_keep = lo->keep_done_ms;
    o->nclasses = lo->classes.n;
    /* a class's max_pending is the ledger's to apply (lg_class_full): it
     * may be set per plan, tenant and override */
    memset(o->class_max_pending, 0, sizeof o->class_max_pending);
}

static bool lg_opts_valid(const fq_ledger_opts *o)
{
    return o->sched && o->est && o->tenant && o->max_buffered_runs >= 1 &&
           (!o->alloc.alloc) == (!o->alloc.free) && o->partitions <= FQ_PARTITIONS_MAX;
}

fq_status fq_ledger_create(fq_ledger **out, const fq_ledger_opts *o)
{
    *out = NULL;
    if (!lg_opts_valid(o))
        return FQ_EINVAL;
    fq_ledger *l = calloc(1, sizeof *l);
    if (!l)
        return FQ_ENOMEM;
    l->o = *o;
    FQ_OPOOL_INIT(&l->run_pool, lg_run, LG_POOL_CHUNK);
    FQ_OPOOL_INIT(&l->names_pool, lg_names, LG_POOL_CHUNK / 4);
    FQ_OPOOL_INIT(&l->back_pool, lg_back, LG_POOL_CHUNK);
    uint64_t seed = o->hash_key[0] ^ o->hash_key[1];
    if (fq_u64map_create(&l->by_seq, FQ_U64MAP_KEY_OFFSET(lg_run, run.hnode, run.id), 1024, seed) ||
        fq_u64map_create(&l->by_key, FQ_U64MAP_KEY_OFFSET(lg_run, key_node, key), 1024, seed) ||
        FQ_KEPT_INIT(&l->done, lg_done, 1024, seed) ||
        FQ_KEPT_INIT(&l->early, lg_early, 64, seed) ||
        FQ_KEPT_INIT(&l->refused, lg_refused, 64, seed) ||
        fq_u64map_create(&l->back, FQ_U64MAP_KEY_OFFSET(lg_back, node, seq), 64, seed) ||
        fq_u64map_create(&l->gone, FQ_U64MAP_KEY_OFFSET(lg_run, run.hnode, run.id), 64, seed)) {
        fq_ledger_destroy(l);
        return FQ_ENOMEM;
    }
    l->nparts = o->partitions > 1 ? o->partitions : 1;
    l->parts = calloc(l->nparts, sizeof *l->parts);
    l->jlist = calloc(l->nparts, sizeof *l->jlist);
    if (!l->parts || !l->jlist) {
        fq_ledger_destroy(l);
        return FQ_ENOMEM;
    }
    for (uint32_t i = 0; i < l->nparts; i++) {
        l->parts[i].inherit_seq = UINT64_MAX;
        l->parts[i].fence = UINT64_MAX;
    }
    if (l->nparts == 1)
        l->parts[0].state = LG_PART_OWNED;     /* one partition: ours from the start */
    l->fresh = true;
    *out = l;
    return FQ_OK;
}

fq_status fq_ledger_opts_check(const fq_ledger_opts *o)
{
    return lg_opts_valid(o) ? FQ_OK : FQ_EINVAL;
}

fq_status fq_ledger_set_opts(fq_ledger *l, const fq_ledger_opts *o)
{
    if (!lg_opts_valid(o))
        return FQ_EINVAL;
    fq_ledger_opts keep = l->o;
    l->o = *o;
    l->o.sched = keep.sched;
    l->o.est = keep.est;
    l->o.tenant = keep.tenant;
    l->o.tenant_arg = keep.tenant_arg;
    l->o.alloc = keep.alloc;
    memcpy(l->o.hash_key, keep.hash_key, sizeof l->o.hash_key);
    l->o.partitions = keep.partitions;
    lg_pause_check(l);          /* a new max_buffered_runs may pause or resume */
    lg_journal_check_all(l);
    return FQ_OK;
}

void fq_ledger_destroy(fq_ledger *l)
{
    if (!l)
        return;
    /* Bodies are held only by runs whose submit is unacked: in by_seq. */
    if (l->by_seq) {
        for (fq_u64map_node *n = fq_u64map_first(l->by_seq); n; n = fq_u64map_next(l->by_seq, n)) {
            lg_run *x = FQ_U64MAP_ENTRY(n, lg_run, run.hnode);
            lg_free(l, x->body, lg_block_size(x));
        }
    }
    lg_graves_free(l);
    free(l->graves);
    fq_u64map_destroy(l->by_seq, NULL);
    fq_u64map_destroy(l->by_key, NULL);
    fq_kept_fini(&l->done);
    fq_kept_fini(&l->early);
    fq_kept_fini(&l->refused);
    fq_u64map_destroy(l->back, NULL);
    fq_u64map_destroy(l->gone, NULL);
    for (uint32_t k = 0; l->parts && k < l->nparts; k++) {
        for (size_t i = 0; i < 2; i++) {
            free(l->parts[k].bat[i].runs);
            free(l->parts[k].bat[i].dones);
            fq_jbatch_free(&l->parts[k].bat[i].jb);
        }
    }
    free(l->parts);
    free(l->jlist);
    free(l->scratch);
    fq_opool_fini(&l->run_pool);
    fq_opool_fini(&l->names_pool);
    fq_opool_fini(&l->back_pool);
    free(l->later);
    free(l->acts);
    free(l);
}

/* ---- what it holds ----------------------------------------------------- */

const char *fq_ledger_where_name(enum fq_ledger_where w)
{
    static const char *const names[] = {
        [FQ_LW_UNKNOWN] = "unknown", [FQ_LW_QUEUED] = "queued", [FQ_LW_IN_FLIGHT] = "in_flight",
        [FQ_LW_EXPIRED] = "expired", [FQ_LW_DONE] = "done",
    };
    return (unsigned)w < sizeof names / sizeof names[0] ? names[w] : "unknown";
}

enum fq_ledger_where fq_ledger_run_where(const fq_ledger *l, const char *tenant,
                                         const char *run_id, uint32_t *est)
{
    uint64_t h = lg_key(l, tenant, run_id);
    const lg_run *x = lg_find_key(l, tenant, run_id, h);
    *est = 0;
    if (!x)
        return lg_done_find(l, h) ? FQ_LW_DONE : FQ_LW_UNKNOWN;
    *est = x->est;
    if (lg_queued(x))
        return FQ_LW_QUEUED;
    if (x->loaded || x->run.state == FQ_RUN_FLIGHT)
        return FQ_LW_IN_FLIGHT;
    return x->run.state == FQ_RUN_EXPIRED ? FQ_LW_EXPIRED : FQ_LW_DONE;
}

const fq_run *fq_ledger_dispatched_run(const fq_ledger *l, uint64_t seq)
{
    const lg_run *x = lg_find_seq(l, seq);
    for (fq_u64map_node *n = fq_u64map_first(l->by_key); n && !x; n = fq_u64map_next(l->by_key, n)) {
        const lg_run *y = FQ_U64MAP_ENTRY(n, lg_run, key_node);
        if (y->run.id == seq)
            x = y;
    }
    return x && lg_in_window(x) ? &x->run : NULL;
}

bool fq_ledger_run_subtenant(char *out, const fq_ledger *l, const char *tenant,
                             const char *run_id)
{
    const lg_run *x = lg_find_key(l, tenant, run_id, lg_key(l, tenant, run_id));
    const lg_block *b = x && !x->names ? lg_blk(x) : NULL;
    out[0] = '\0';
    if (x && x->names)
        memcpy(out, x->names->subtenant, sizeof x->names->subtenant);
    else if (b) {
        memcpy(out, (const char *)(b + 1) + b->id_len + b->wf_len, b->sub_len);
        out[b->sub_len] = '\0';
    }
    return x && (x->names || b);
}

const fq_run *fq_ledger_queued_run(const fq_ledger *l, const char *tenant, const char *run_id)
{
    const lg_run *x = lg_find_key(l, tenant, run_id, lg_key(l, tenant, run_id));
    return x && x->run.state == FQ_RUN_QUEUED ? &x->run : NULL;
}

const fq_ledger_counters *fq_ledger_counters_get(const fq_ledger *l)
{
    return &l->c;
}

void fq_ledger_stats_get(fq_ledger_stats *out, const fq_ledger *l)
{
    fq_sched_stats ss;
    fq_sched_stats_get(l->o.sched, &ss);     /* the window's count of expired runs */
    bool unsent = false;
    for (uint32_t i = 0; i < l->njlist && !unsent; i++) {
        const lg_part *pp = &l->parts[l->jlist[i]];
        unsent = pp->cur || (pp->sent && pp->sent->retry_at);
    }
    *out = (fq_ledger_stats){
        .held = l->held,
        .index_only = l->index_only,
        .buffered_bytes = l->buffered_bytes,
        .completed_remembered = fq_kept_count(&l->done),
        .expired_remembered = ss.expired_held,
        .debtors = l->debtors,
        .given_back = fq_u64map_count(l->back),
        .fetch_paused = l->fetch_paused,
        .journal_full = l->journal_full,
        .fenced = l->nfenced > 0,
        .dispatch_stalled = l->stalled,
        .journal_stalled = l->njstalled > 0,
        .settled = !unsent && !l->dirty,
    };
}
