/* proxy.c -- fairq-proxy's daemon: NATS in, token-metered DRR, NATS out, reconciliation. */
#include "proxy.h"

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "admin.h"
#include "drr.h"
#include "estimate.h"
#include "http.h"
#include "journal.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "msg.h"
#include "natsio.h"
#include "overrides.h"
#include "policy.h"
#include "pool.h"
#include "probes.h"
#include "strmap.h"
#include "sweep.h"

/*
 * Principles
 *
 * - One thread owns everything: the scheduler, the estimator, the indexes.
 *   natsio turns whatever nats.c does on its threads (fetched runs,
 *   completions, PubAcks, admin requests, reconnects) into events that this
 *   thread drains; nothing here is locked.
 * - A submit is acked only once JetStream has stored what it became: its
 *   dispatch and its in-flight record (two PubAcks), or its refusal. Until
 *   then it stays in FAIR_SUBMIT, so a crash at any moment loses nothing;
 *   Nats-Msg-Id on the dispatch makes the retry after a crash harmless.
 * - Runs are indexed by submit sequence while their submit is unacked (a
 *   redelivery of a held run is not queued twice) and by run key
 *   (tenant, run id) from dispatch to completion (completions and duplicate
 *   run ids find them).
 * - What must survive a restart lives in NATS: the streams, the fairq_runs
 *   bucket (a record per run in flight, overwritten by a done marker), the
 *   lease. The proxy keeps nothing on disk.
 * - Memory is bounded without giving up FIFO order: past max_buffered_bytes
 *   a run keeps only its index entry and its body is read back by sequence
 *   when it is dispatched; past max_buffered_runs fetching stops.
 * - The hot path allocates no memory of its own per run once the pools have
 *   grown to the working set (nats.c allocates its messages). A body kept
 *   in memory is copied at ingest, with the few fields dispatch needs, into
 *   one block of a size-class pool (lib/pool.h), and nats.c's message (its
 *   struct, reply subject, header map and block) is given back at once.
 * - Policy changes (a reload, an override) apply from each tenant's next
 *   visit and never touch a queued or in-flight run: a queue stays whole
 *   and in order even when its new limits are lower than what it holds.
 *   An invalid change is refused whole and the policy in force stays.
 * - Overrides live in a KV bucket, so any NATS client may write them and
 *   every proxy and restart sees the same; the bucket is watched, and the
 *   proxy's own writes are compare-and-set, so two writers never silently
 *   undo each other.
 */

#define PX_CONS_SUBMIT 0
#define PX_CONS_DONE 1
#define PX_SUB_ADMIN 0              /* <admin>.> */
#define PX_WATCH_TENANTS 0          /* the overrides bucket */
#define PX_KV_SYNC_WAIT_MS 5000     /* at start, longest wait for the overrides */
#define PX_EVENTS 1024              /* events drained per poll */
#define PX_POLL_MS 50               /* longest sleep between housekeeping */
#define PX_MAX_PUBS 32768           /* our publishes awaiting PubAck before dispatch waits */
#define PX_RETRY_MS 250             /* a failed publish is tried again after this */
#define PX_PARK_MAX_MS 5000         /* longest a tenant is parked after failed dispatches */
#define PX_STALL_MS 1000            /* dispatches failing this long: not ready */
#define PX_EXPIRED_MAX 100000       /* expired runs remembered for late completions, at most */
#define PX_DONE_COPIES_PER_SEC 100  /* refused completions copied to the rejected subject */
#define PX_DONE_DEFER_MS 500        /* a deferred completion comes back after this */
#define PX_DONE_DEFER_MAX 10        /* ... until its 10th delivery, then it is decided */
#define PX_POOL_CHUNK 1024
#define PX_SYNTH_ID (1ULL << 62)    /* scheduler ids of adopted runs without a sequence */
/* A graceful stop fits FQ_PROXY_STOP_MS from the signal, NATS up or not:
 * the PubAcks of what is under way, then the lease's release and a flush of
 * the acks only when they can still get through, then the close. */
#define PX_STOP_PUBACK_MS 7000      /* longest wait for PubAcks, from the signal */
#define PX_STOP_OFFLINE_MS 1000     /* ... cut short once NATS is unreachable this long */
#define PX_STOP_RELEASE_MS 500      /* the lease release's PubAck */
#define PX_STOP_FLUSH_MS 500        /* the acks written before the close */
#define PX_LEASE_RELEASE 1          /* TK_LEASE value of the release (renewals: 0) */
#define PX_LEASE_MARGIN_MS 500      /* fresh ends this long before the TTL: lib/lease.h */
#define PX_LEASE_RENEW_MS 1000      /* a renewal a second: two may fail before it is stale */
#define PX_LEASE_RETRY_MS 500       /* a standby reads the key twice a second */
#define PX_SUBMIT_ACK_WAIT_MS (3600LL * 1000)  /* px_start_consumers says why */
#define PX_FETCH_BATCH 256          /* deliveries one pull request asks for at most */
#define PX_DONE_MAX_ACK_PENDING 100000  /* completions delivered and not yet acked, at most */
#define PX_DONE_ACK_WAIT_MS 60000   /* an unacked completion is delivered again after this */
#define PX_JOURNAL_AGE_SLACK_MS 60000   /* the journal keeps a record this long past
                                           px_keep_done_ms, so that a done record outlives
                                           the flight record it ends */
#define PX_STANDBY_LOG_MS 10000     /* a standby says why this often */
#define PX_RATE_ALPHA 0.3           /* weight of the newest second in the rates */
#define PX_LIGHT_LOAD 16            /* events a turn below which writes are flushed at once */
#define PX_SWEEP_MS 1000            /* a sweep of every tenant begins this often */
#define PX_SWEEP_SLICE 512          /* tenants a sweep visits per turn of the loop at most */
#define PX_REFUSAL_LOGS 20          /* "run refused" lines a second at most, all tenants */

/* Publish tokens: kind in the top four bits, a stream sequence below. */
enum px_token {
    TK_DISPATCH = 1,    /* a run to the dispatch subject; submit seq */
    TK_JOURNAL,         /* a batch of the runs journal; batch id */
    TK_REJECT,          /* a refused submit; submit seq */
    TK_DONE_REJECT,     /* a refused completion; done seq */
    TK_LEASE,           /* a renewal of the leader lease */
    TK_JMARK,           /* the journal's term marker, at the start of leading */
};
#define TK_MAKE(k, v) (((uint64_t)(k) << 60) | ((v) & ((1ULL << 60) - 1)))
#define TK_KIND(t) ((int)((t) >> 60))
#define TK_VAL(t) ((t) & ((1ULL << 60) - 1))

enum px_state {
    PX_QUEUED = 1,      /* in its tenant's queue */
    PX_FLIGHT,          /* dispatched, holding a window slot */
    PX_EXPIRED,         /* lease expired: slot freed, a late completion still counts */
    PX_DONE,            /* completed or refused; freed once nothing refers to it */
};

/* What a dispatched run must remember until its completion. */
typedef struct px_names {
    char run_id[FQ_RUN_ID_MAX + 1];
    char workflow[FQ_WORKFLOW_MAX + 1];
    uint32_t declared;          /* the producer's est_tokens, 0 if none */
    int64_t forget_ms;          /* once expired: unix ms from which it is forgotten */
    struct px_names *next;      /* free list */
} px_names;

/* A queued run's submit kept in memory: one block of the bodies' pool,
 * the fields dispatch needs and then the submit's bytes. */
typedef struct px_body {
    uint32_t lines;             /* bytes of the producer's headers, as carried lines */
    uint32_t len;               /* bytes of the body */
    uint32_t declared;          /* the producer's est_tokens, 0 if none */
    uint8_t run_id_len;         /* bytes of the run id; 0 once the run has its names */
    uint8_t workflow_len;       /* bytes of the workflow */
    char bytes[];               /* run id, workflow, lines (fq_nio_msg_carry_lines), body */
} px_body;

/* The largest block: fields, names, a header block JetStream would store,
 * and the largest max_payload a server may have (64 MiB). */
#define PX_BODY_MAX (offsetof(px_body, bytes) + 2 * UINT8_MAX + FQ_NIO_MAX_HEADER_BYTES + \
                     ((size_t)64 << 20))

/* The proxy's own view of a tenant: the scheduler's handle and counters the
 * scheduler does not keep. */
typedef struct px_tenant {
    char id[FQ_TENANT_MAX + 1];
    fq_tenant *t;
    char plan[FQ_TENANT_MAX + 1];
    enum fq_policy_source source;   /* which layer set its policy */
    bool unlisted;                  /* no layer lists it now and unknown tenants are
                                       refused: its queue drains, new runs are refused */
    uint64_t rejected[FQ__COUNT];   /* refused runs by reason */
    uint64_t completed;             /* completions reconciled */
    uint64_t age_warn_next;         /* monotonic ms from which its queue may be
                                       logged as old again; 0: any time */
    uint64_t age_suppressed;        /* old-queue checks held back since the last line */
    uint32_t keyed;                 /* its runs in the key index: each may read this */
    uint64_t idle_since;            /* monotonic ms a sweep first found it forgettable; 0: not */
    uint64_t idle_dispatched;       /* its dispatches then: one since makes it busy */
    uint32_t fails;                 /* its dispatches failed in a row: the parking doubles */
    int64_t debt_written;           /* the deficit its last debt record holds (<= 0) */
    int64_t debt_at_ms;             /* unix ms its debt last changed */
    uint64_t debt_due;              /* monotonic ms its debt record is due again */
    bool debt_dirty;                /* reconciled this turn: a debt record may be due */
    bool debt_listed;               /* on the debtors' list */
    struct px_tenant *dirty_next;   /* tenants reconciled this turn */
    struct px_tenant *debt_prev, *debt_next; /* debtors' list, by debt_due */
    fq_hist wait;                   /* submit (stream time) to dispatch */
    fq_strmap_node node;            /* in the tenant table, keyed by id */
    fq_sweep_node later;            /* in creation order: swept, and the metrics' order */
} px_tenant;

/* A run the proxy holds. */
typedef struct px_run {
    uint64_t seq;               /* submit stream sequence: the scheduler's id */
    px_body *body;              /* the submit while queued in memory; NULL: index only */
    struct px_run *seq_next;    /* sequence index chain; free list */
    struct px_run *key_next;    /* run-key index chain */
    struct px_run *exp_next;    /* expired FIFO */
    px_tenant *pt;
    px_names *names;            /* from dispatch on */
    uint64_t key_hash;
    int64_t submitted_ms;       /* unix ms, JetStream's timestamp of the submit */
    uint32_t size;              /* bytes of the submit, body and headers */
    uint32_t delivered;         /* deliveries of the submit so far */
    uint32_t est;               /* tokens charged */
    uint8_t state;              /* enum px_state */
    uint8_t pending;            /* publishes to settle before the submit is acked */
    bool in_seq, in_key, in_exp, retained;
} px_run;

/* A chained hash of runs, by sequence or by run key. */
typedef struct px_index {
    px_run **b;
    size_t nb, n;
} px_index;

/* Run keys completed recently: a completion repeated within the duplicate
 * window changes nothing. Open addressing on the key's 64-bit hash. */
typedef struct px_done_ent {
    uint64_t hash;              /* 0: empty */
    uint64_t seq;               /* the submit it came from */
    int64_t until_ms;           /* unix ms when it may be forgotten */
} px_done_ent;

typedef struct px_doneset {
    px_done_ent *e;
    size_t cap, n;
} px_doneset;

/* A publish that failed, to be tried again as it was. */
typedef struct px_retry {
    uint64_t token;
    fq_nio_msg *msg;
    uint64_t at;                /* monotonic ms */
} px_retry;

/* A batch of the runs journal: the records of the runs dispatched and
 * completed in one turn of the loop, stored as one message. What waits for
 * it: dispatched runs (their submit ack) and completions (their ack). */
typedef struct px_batch {
    uint64_t id;
    px_run **runs;              /* dispatched: settled on the PubAck */
    size_t nruns, cap_runs;
    uint64_t *dones;            /* completions (done seq) to ack */
    size_t ndones, cap_dones;
    struct px_batch *next;      /* pending list, free list */
} px_batch;

/* An ack held back while the lease was not fresh. */
typedef struct px_later {
    int cons;                   /* PX_CONS_* */
    fq_nio_ackref a;
} px_later;

/* Counters for stats; monotonic. */
typedef struct px_counters {
    uint64_t submitted, redelivered, invalid_subject, duplicates_acked;
    uint64_t rejected[FQ__COUNT];   /* refused runs by reason, tenant known or not */
    uint64_t dispatched, dispatch_duplicates, body_reads, body_lost;
    uint64_t completions, completions_unheld, completions_duplicate, completions_invalid;
    uint64_t completions_unknown, expired, pub_failures, fetch_pauses, reconnects;
    uint64_t adopted, reloads, reload_failures, overrides_refused;
    uint64_t adopt_overflow;        /* flight records read back past the window: expired */
    uint64_t journal_refused;       /* journal records refused at start: invalid or unknown */
    uint64_t dispatch_failures;     /* dispatches that could not be stored, run requeued */
    uint64_t refusals_unstored;     /* refusals JetStream would not store, acked all the same */
    uint64_t debts_forgiven;        /* debts forgiven after scheduler.debt_forget_ms */
    uint64_t expired_forgotten_early; /* expired runs forgotten past PX_EXPIRED_MAX */
    uint64_t completion_copies_skipped; /* refused completions acked without a copy,
                                       past PX_DONE_COPIES_PER_SEC */
    uint64_t completions_deferred;  /* completions naked for a later look (px_done_defer) */
} px_counters;

struct fq_proxy {
    fq_config cfg;              /* our copy: strings duplicated */
    fq_policy *policy;
    fq_sched *sched;
    fq_est *est;
    fq_nio *nio;
    atomic_bool stop;
    atomic_uint_fast64_t stop_at; /* monotonic ms of the first fq_proxy_stop; 0: none */

    char submit_filter[256], done_filter[256], rejected_filter[256], admin_filter[256];
    int64_t submit_created_ms;  /* FAIR_SUBMIT's creation: part of derived run ids */
    int64_t max_payload;
    uint64_t hash_key[2];       /* px_hash's key, drawn at create */

    fq_strmap *tenants;         /* px_tenant by id */
    fq_sweep sweep;             /* every tenant in creation order, visited in slices */
    unsigned sweep_warned;      /* the pass's old-queue lines so far */
    uint64_t sweep_unwarned;    /* the pass's old queues left for a later pass */
    px_index by_seq, by_key;
    px_doneset done;
    px_run *run_free;           /* pools */
    px_names *names_free;
    fq_pool *bodies;            /* px_body blocks */
    fq_buf carry;               /* the carried header lines of the submit being taken in */
    bool carry_ok;              /* ... are there (else out of memory: not kept) */
    void **chunks;              /* every pool chunk, for destroy */
    size_t nchunks, chunks_cap;
    px_run *exp_head, *exp_tail;
    size_t nexp;
    px_retry *retry;
    size_t nretry, retry_cap;
    fq_nio_event *ev;
    px_batch *cur;              /* the journal batch being written */
    px_batch *bat_head, *bat_tail; /* published, awaiting their PubAck */
    px_batch *bat_free;
    uint64_t bat_next;          /* next batch id */
    fq_jbatch jb;               /* the current batch's text */
    px_tenant *dirty;           /* tenants reconciled this turn (px_debt_touch) */
    px_tenant *debt_head, *debt_tail; /* tenants with a live debt record, by debt_due */

    uint64_t held;              /* submits held (unacked) */
    uint64_t index_only;        /* of which without their body in memory */
    uint64_t buffered_bytes;    /* bodies held */
    uint64_t pubs;              /* our publishes awaiting PubAck */
    uint64_t synth;             /* next synthetic id */
    bool fetch_paused, leader, connected;
    bool journal_full;          /* the unsent batch is as large as one may be: fetching and
                                   dispatching wait for the one in flight */
    uint64_t jseq;              /* the journal's last sequence as we know it: the next batch
                                   expects it (Nats-Expected-Last-Sequence) */
    bool jmarked;               /* our term's marker is stored: jseq is known */
    bool jmark_sent;            /* ... and is in flight */
    bool fenced;                /* the server refused our journal batch: another leads */

    char lease_id[128];
    fq_lease lease;             /* the leader lease; lib/lease.c decides, we do its I/O */
    uint64_t term;              /* the term we lead in: our consumers' names carry it */
    bool consuming;             /* the consumers are started */
    bool stale;                 /* leading but not fresh: changing nothing (logged once) */
    bool releasing;             /* the release at a stop awaits its PubAck */
    px_later *later;            /* acks held back while not fresh, in order */
    size_t nlater, later_cap;
    fq_nio_event *held_ev;      /* deliveries that came while not fresh, in order */
    size_t nheld_ev, held_ev_cap;
    uint64_t next_second;       /* monotonic ms of the next rate sample */
    fq_bucket refusal_logs;     /* "run refused" lines, PX_REFUSAL_LOGS a second */
    uint64_t refusals_unlogged; /* refusals not logged since the last such line */
    uint64_t done_copy_sec;     /* monotonic second of the copies below */
    uint32_t done_copies;       /* refused completions copied in that second */
    uint64_t sec_dispatched, sec_tokens, sec_completed, sec_actual;
    double rate_runs, rate_tokens, rate_completed, rate_actual; /* per second */
    px_counters c;
    fq_log_limiter *lim;

    fq_proxy_ops ops;           /* the loader; bucket and threshold below */
    atomic_bool reload_asked;   /* set by fq_proxy_reload (a signal handler) */
    fq_ovr_set *ovr;            /* the overrides bucket as we know it (lib/overrides.c) */
    fq_admin *admin;            /* the admin plane (lib/admin.c) */

    fq_http *http;
    fq_probes *probes;          /* metrics snapshots and readiness (lib/probes.c) */
    uint64_t fail_since;        /* monotonic ms dispatches began to fail; 0: they succeed */
    uint64_t jfail_since;       /* monotonic ms journal batches began to fail; 0: they succeed */
    bool consumer_ok[2];        /* PX_CONS_*: the last (re)creation succeeded */
    bool served;                /* both consumers were made once: start is over */
    bool denied_fatal;          /* NATS refused a permission before that */
};

/* ---- small helpers ------------------------------------------------------ */

/* A key for px_hash: from the kernel's random source, or, should that fail,
 * from what differs between processes and runs. */
static void px_hash_key(uint64_t key[2])
{
    if (getrandom(key, 2 * sizeof key[0], 0) == (ssize_t)(2 * sizeof key[0]))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    key[0] = (uint64_t)ts.tv_nsec << 32 ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)key;
    key[1] = fq_siphash(key[0], (uint64_t)getpid(), &ts, sizeof ts);
}

/* The hash of a (a tenant id) and b (a run id, or "") under the proxy's
 * key, never 0. The completed set decides on this hash alone, so a client
 * must not be able to choose a run id whose hash is another tenant's run's
 * (that run would be refused as a duplicate): hence a keyed hash and a key
 * drawn for each process. Every table it keys is rebuilt at start (the
 * completed set from the journal), so a new key costs nothing. */
static uint64_t px_hash(const fq_proxy *p, const char *a, size_t alen, const char *b,
                        size_t blen)
{
    char k[FQ_TENANT_MAX + 1 + FQ_RUN_ID_MAX];
    if (alen > FQ_TENANT_MAX)
        alen = FQ_TENANT_MAX;   /* ids are checked before; bounded anyway */
    if (blen > FQ_RUN_ID_MAX)
        blen = FQ_RUN_ID_MAX;
    memcpy(k, a, alen);
    k[alen] = (char)0xff;       /* a separator no id contains */
    memcpy(k + alen + 1, b, blen);
    uint64_t h = fq_siphash(p->hash_key[0], p->hash_key[1], k, alen + 1 + blen);
    return h ? h : 1;
}

static uint64_t px_key_hash(const fq_proxy *p, const char *tenant, const char *run_id)
{
    return px_hash(p, tenant, strlen(tenant), run_id, strlen(run_id));
}

/* Log a warning about key at most once a second. */
static bool px_warn_ok(fq_proxy *p, const char *key)
{
    return fq_log_limiter_allow(p->lim, key, fq_nio_mono_ms(), NULL);
}

/* ---- pools -------------------------------------------------------------- */

static bool px_chunk_keep(fq_proxy *p, void *chunk)
{
    if (p->nchunks == p->chunks_cap) {
        size_t cap = p->chunks_cap ? p->chunks_cap * 2 : 64;
        void **c = realloc(p->chunks, cap * sizeof *c);
        if (!c)
            return false;
        p->chunks = c;
        p->chunks_cap = cap;
    }
    p->chunks[p->nchunks++] = chunk;
    return true;
}

static px_run *px_run_alloc(fq_proxy *p)
{
    if (!p->run_free) {
        px_run *c = calloc(PX_POOL_CHUNK, sizeof *c);
        if (!c || !px_chunk_keep(p, c)) {
            free(c);
            return NULL;
        }
        for (size_t i = 0; i < PX_POOL_CHUNK; i++) {
            c[i].seq_next = p->run_free;
            p->run_free = &c[i];
        }
    }
    px_run *r = p->run_free;
    p->run_free = r->seq_next;
    memset(r, 0, sizeof *r);
    return r;
}

static px_names *px_names_alloc(fq_proxy *p)
{
    if (!p->names_free) {
        px_names *c = calloc(PX_POOL_CHUNK / 4, sizeof *c);
        if (!c || !px_chunk_keep(p, c)) {
            free(c);
            return NULL;
        }
        for (size_t i = 0; i < PX_POOL_CHUNK / 4; i++) {
            c[i].next = p->names_free;
            p->names_free = &c[i];
        }
    }
    px_names *n = p->names_free;
    p->names_free = n->next;
    return n;
}

static size_t px_body_bytes(const px_body *b)
{
    return offsetof(px_body, bytes) + b->run_id_len + b->workflow_len + b->lines + b->len;
}

static const char *px_body_lines(const px_body *b)
{
    return b->bytes + b->run_id_len + b->workflow_len;
}

static const char *px_body_data(const px_body *b)
{
    return px_body_lines(b) + b->lines;
}

/* Keep run_id, workflow, declared, the carried header lines lines[0..nl)
 * and the body data[0..len) as x's body. false: out of memory, or too large
 * for the pool (the run is then read back by sequence). */
static bool px_body_keep(fq_proxy *p, px_run *x, const char *run_id, const char *workflow,
                         uint32_t declared, const char *lines, size_t nl, const void *data,
                         size_t len)
{
    size_t rl = strlen(run_id), wl = strlen(workflow);     /* both bounded */
    if (nl > UINT32_MAX || len > UINT32_MAX)
        return false;
    px_body *b = fq_pool_alloc(p->bodies, offsetof(px_body, bytes) + rl + wl + nl + len);
    if (!b)
        return false;
    b->lines = (uint32_t)nl;
    b->len = (uint32_t)len;
    b->declared = declared;
    b->run_id_len = (uint8_t)rl;
    b->workflow_len = (uint8_t)wl;
    memcpy(b->bytes, run_id, rl);
    memcpy(b->bytes + rl, workflow, wl);
    if (nl)
        memcpy(b->bytes + rl + wl, lines, nl);
    if (len)
        memcpy(b->bytes + rl + wl + nl, data, len);
    x->body = b;
    return true;
}

static void px_body_drop(fq_proxy *p, px_run *x)
{
    if (x->body) {
        fq_pool_free(p->bodies, x->body, px_body_bytes(x->body));
        x->body = NULL;
    }
}

/* Free x once no index, list or pending publish refers to it. */
static void px_maybe_free(fq_proxy *p, px_run *x)
{
    if (x->in_seq || x->in_key || x->in_exp || x->pending)
        return;
    px_body_drop(p, x);
    if (x->names) {
        x->names->next = p->names_free;
        p->names_free = x->names;
    }
    x->seq_next = p->run_free;
    p->run_free = x;
}

/* ---- indexes -------------------------------------------------------------- */

static px_run **px_link(px_run *x, bool by_key)
{
    return by_key ? &x->key_next : &x->seq_next;
}

static uint64_t px_ikey(const px_run *x, bool by_key)
{
    return by_key ? x->key_hash : x->seq * 0x9E3779B97F4A7C15ULL;
}

static bool px_index_grow(px_index *ix, bool by_key)
{
    if (ix->n < ix->nb)
        return true;
    size_t nb = ix->nb ? ix->nb * 2 : 1024;
    px_run **b = calloc(nb, sizeof *b);
    if (!b)
        return false;
    for (size_t i = 0; i < ix->nb; i++) {
        for (px_run *x = ix->b[i], *nx; x; x = nx) {
            nx = *px_link(x, by_key);
            size_t j = (size_t)(px_ikey(x, by_key) >> 20) & (nb - 1);
            *px_link(x, by_key) = b[j];
            b[j] = x;
        }
    }
    free(ix->b);
    ix->b = b;
    ix->nb = nb;
    return true;
}

static bool px_index_add(px_index *ix, px_run *x, bool by_key)
{
    if (!px_index_grow(ix, by_key))
        return false;
    size_t j = (size_t)(px_ikey(x, by_key) >> 20) & (ix->nb - 1);
    *px_link(x, by_key) = ix->b[j];
    ix->b[j] = x;
    ix->n++;
    return true;
}

static void px_index_del(px_index *ix, px_run *x, bool by_key)
{
    size_t j = (size_t)(px_ikey(x, by_key) >> 20) & (ix->nb - 1);
    for (px_run **pp = &ix->b[j]; *pp; pp = px_link(*pp, by_key)) {
        if (*pp == x) {
            *pp = *px_link(x, by_key);
            ix->n--;
            return;
        }
    }
}

static px_run *px_find_seq(fq_proxy *p, uint64_t seq)
{
    if (!p->by_seq.nb)
        return NULL;
    uint64_t h = seq * 0x9E3779B97F4A7C15ULL;
    for (px_run *x = p->by_seq.b[(size_t)(h >> 20) & (p->by_seq.nb - 1)]; x; x = x->seq_next)
        if (x->seq == seq)
            return x;
    return NULL;
}

/* The run of key (tenant, run_id), hash h: queued (from ingest) or
 * dispatched. A queued run whose body is not in memory has no names: it
 * is matched by tenant and hash. */
/* Whether x's run id is run_id, as far as x knows it (a run read back by
 * sequence has only its key's hash until its dispatch). */
static bool px_run_id_is(const px_run *x, const char *run_id)
{
    if (x->names)
        return strcmp(x->names->run_id, run_id) == 0;
    if (x->body && x->body->run_id_len)
        return strlen(run_id) == x->body->run_id_len &&
               memcmp(x->body->bytes, run_id, x->body->run_id_len) == 0;
    return true;
}

static px_run *px_find_key(fq_proxy *p, const char *tenant, const char *run_id, uint64_t h)
{
    if (!p->by_key.nb)
        return NULL;
    for (px_run *x = p->by_key.b[(size_t)(h >> 20) & (p->by_key.nb - 1)]; x; x = x->key_next)
        if (x->key_hash == h && strcmp(x->pt->id, tenant) == 0 && px_run_id_is(x, run_id))
            return x;
    return NULL;
}

static void px_seq_del(fq_proxy *p, px_run *x)
{
    if (x->in_seq) {
        px_index_del(&p->by_seq, x, false);
        x->in_seq = false;
    }
}

/* Index x by its key (x->key_hash), unless out of memory. */
static void px_key_add(fq_proxy *p, px_run *x)
{
    if ((x->in_key = px_index_add(&p->by_key, x, true)))
        x->pt->keyed++;
}

static void px_key_del(fq_proxy *p, px_run *x)
{
    if (x->in_key) {
        px_index_del(&p->by_key, x, true);
        x->in_key = false;
        x->pt->keyed--;
    }
}

/* ---- the set of completed run keys --------------------------------------- */

static px_done_ent *px_done_slot(px_doneset *d, uint64_t h)
{
    size_t mask = d->cap - 1;
    for (size_t j = (size_t)h & mask;; j = (j + 1) & mask)
        if (d->e[j].hash == h || d->e[j].hash == 0)
            return &d->e[j];
}

/* Rebuild without what has expired, growing when still half full. */
static bool px_done_rehash(px_doneset *d, int64_t now_ms)
{
    size_t live = 0;
    for (size_t i = 0; i < d->cap; i++)
        live += d->e[i].hash && d->e[i].until_ms > now_ms;
    size_t cap = 4096;
    while (cap < (live + 1) * 4)
        cap *= 2;
    px_done_ent *e = calloc(cap, sizeof *e);
    if (!e)
        return false;
    px_doneset nd = {e, cap, 0};
    for (size_t i = 0; i < d->cap; i++) {
        if (d->e[i].hash && d->e[i].until_ms > now_ms) {
            *px_done_slot(&nd, d->e[i].hash) = d->e[i];
            nd.n++;
        }
    }
    free(d->e);
    *d = nd;
    return true;
}

static void px_done_add(px_doneset *d, uint64_t h, uint64_t seq, int64_t until_ms)
{
    if ((d->n + 1) * 2 > d->cap && !px_done_rehash(d, fq_nio_unix_ms()))
        return;
    px_done_ent *e = px_done_slot(d, h);
    if (!e->hash)
        d->n++;
    *e = (px_done_ent){h, seq, until_ms};
}

/* The done entry of key h, or NULL. Expired entries are still reported
 * until swept: remembering longer than promised is harmless. */
static const px_done_ent *px_done_find(const px_doneset *d, uint64_t h)
{
    if (!d->cap)
        return NULL;
    const px_done_ent *e = px_done_slot((px_doneset *)d, h);
    return e->hash ? e : NULL;
}

/* ---- tenants ----------------------------------------------------------- */

static px_tenant *px_tenant_of(fq_strmap_node *n)
{
    return n ? FQ_STRMAP_ENTRY(n, px_tenant, node) : NULL;
}

static void px_tenant_release(fq_strmap_node *n)
{
    free(px_tenant_of(n));
}

/* The tenant after t in creation order, or the first if t is NULL. */
static px_tenant *px_tenant_next(const fq_proxy *p, const px_tenant *t)
{
    fq_sweep_node *n = t ? t->later.next : p->sweep.head;
    return n ? FQ_SWEEP_ENTRY(n, px_tenant, later) : NULL;
}

static px_tenant *px_tenant_find(fq_proxy *p, const char *id, size_t len)
{
    return px_tenant_of(fq_strmap_find(p->tenants, id, len));
}

/* The tenant named id[0..len), created with its policy when new.
 * FQ_EUNKNOWN when unknown tenants are refused (*out is set if it is known
 * from before a reload that stopped listing it). */
static fq_status px_tenant_get(px_tenant **out, fq_proxy *p, const char *id, size_t len)
{
    *out = px_tenant_find(p, id, len);
    if (*out)
        return (*out)->unlisted ? FQ_EUNKNOWN : FQ_OK;
    char name[FQ_TENANT_MAX + 1];
    memcpy(name, id, len);
    name[len] = '\0';
    fq_policy_resolved pr;
    fq_status s = fq_policy_resolve(&pr, p->policy, name);
    if (s != FQ_OK)
        return s;
    if (fq_strmap_reserve(p->tenants) != FQ_OK)
        return FQ_ENOMEM;
    px_tenant *t = calloc(1, sizeof *t);
    if (!t)
        return FQ_ENOMEM;
    s = fq_sched_tenant(&t->t, p->sched, name, len, &pr.p);
    if (s != FQ_OK) {
        free(t);
        return s;
    }
    memcpy(t->id, name, len + 1);
    snprintf(t->plan, sizeof t->plan, "%s", pr.plan ? pr.plan : "");
    t->source = pr.source;
    fq_sweep_append(&p->sweep, &t->later);
    fq_strmap_insert(p->tenants, &t->node, len);
    *out = t;
    return FQ_OK;
}

/* Bring a known tenant to its policy as now resolved, from its next visit,
 * keeping its place and its queued runs. A tenant no layer lists any more
 * while unknown tenants are refused keeps its old policy to drain its
 * queue, and new runs are refused. */
static void px_tenant_apply(fq_proxy *p, px_tenant *t)
{
    fq_policy_resolved pr;
    fq_status s = fq_policy_resolve(&pr, p->policy, t->id);
    t->unlisted = s == FQ_EUNKNOWN;
    if (s != FQ_OK || fq_tenant_set_policy(p->sched, t->t, &pr.p) != FQ_OK)
        return;
    snprintf(t->plan, sizeof t->plan, "%s", pr.plan ? pr.plan : "");
    t->source = pr.source;
}

/* ---- runtime overrides ------------------------------------------------- */

static void px_ovr_log(const fq_tenant_entry *e, uint64_t rev, const char *from)
{
    char v[256];
    fq_json w;
    fq_json_init(&w, v, sizeof v);
    fq_ovr_entry_json(&w, e);
    fq_json_finish(&w, NULL);
    fq_log(FQ_LOG_INFO, fq_ovr_entry_empty(e) ? "tenant override removed" : "tenant override in force",
           FQ_STR("tenant", e->id), FQ_STR("from", from), FQ_STR("override", v),
           FQ_UINT("rev", rev));
}

/* An override in force changed: the tenant follows from its next visit. */
static void px_ovr_changed(void *arg, const fq_tenant_entry *e, uint64_t rev)
{
    fq_proxy *p = arg;
    px_tenant *t = px_tenant_find(p, e->id, strlen(e->id));
    if (t)
        px_tenant_apply(p, t);
    px_ovr_log(e, rev, "bucket");
}

/* A key of the overrides bucket changed (or was delivered by a new watch).
 * A value that is not a valid override is refused whole: the tenant's
 * policy stays as it was, and the refusal is logged and counted. */
static void px_on_kv(fq_proxy *p, fq_nio_kv_entry *e)
{
    char err[256];
    fq_ovr_kv kv = {.key = e->key, .value = e->value, .len = e->len, .rev = e->rev,
                    .epoch = e->epoch, .deleted = e->deleted};
    enum fq_ovr_outcome r = fq_ovr_on_kv(p->ovr, p->policy, &kv, err, sizeof err);
    if (r == FQ_OVR_CHANGED) {
        uint64_t rev = e->rev;
        const fq_tenant_entry *in = fq_ovr_find(p->ovr, e->key, &rev);
        fq_tenant_entry none = {0};
        if (!in) {
            snprintf(none.id, sizeof none.id, "%s", e->key);
            in = &none;
        }
        px_ovr_changed(p, in, rev);
    } else if (r == FQ_OVR_REFUSED) {
        p->c.overrides_refused++;
        if (px_warn_ok(p, "override"))
            fq_log(FQ_LOG_WARN, "override refused; the tenant's policy is unchanged",
                   FQ_STR("bucket", p->cfg.streams.tenants_bucket), FQ_STR("key", e->key),
                   FQ_UINT("rev", e->rev), FQ_STR("reason", err));
    }
    fq_nio_kv_entry_destroy(e);
}

/* A watch has delivered every key: an override it did not deliver has
 * vanished from the bucket (purged while we were cut off). */
static void px_on_kv_synced(fq_proxy *p, uint64_t epoch)
{
    fq_ovr_on_synced(p->ovr, p->policy, epoch, px_ovr_changed, p);
}

/* ---- publishing ---------------------------------------------------------- */

static void px_retry_add(fq_proxy *p, uint64_t token, fq_nio_msg *msg)
{
    if (p->nretry == p->retry_cap) {
        size_t cap = p->retry_cap ? p->retry_cap * 2 : 256;
        px_retry *r = realloc(p->retry, cap * sizeof *r);
        if (!r) {
            /* Nothing acked is lost: the submit or completion stays in
             * JetStream and comes back after the next consumer reset. */
            fq_nio_msg_drop(p->nio, msg);
            return;
        }
        p->retry = r;
        p->retry_cap = cap;
    }
    p->retry[p->nretry++] = (px_retry){token, msg, fq_nio_mono_ms() + PX_RETRY_MS};
}

static fq_status px_publish(fq_proxy *p, const fq_nio_out *o, uint64_t token)
{
    fq_status s = fq_nio_publish(p->nio, o, token);
    if (s == FQ_OK)
        p->pubs++;
    return s;
}

/* Refuse a run (counted by the caller) or a completion: publish it to <rejected>.<tenant>
 * with its body and headers, Fair-Error "code: sentence" and, for a subject
 * without a valid tenant, Fair-Subject. The message is acked once the
 * refusal is stored (token). src: the message as it came (its subject,
 * body, and its headers to carry: carry, or carry_lines of a kept body). */
static void px_refuse_src(fq_proxy *p, const fq_nio_out *src, const char *tenant,
                          fq_status why, const char *sentence, uint64_t token)
{
    char subj[FQ_TENANT_MAX + 256], err[512];
    snprintf(subj, sizeof subj, "%s.%s", p->cfg.subjects.rejected, tenant ? tenant : "_invalid");
    snprintf(err, sizeof err, "%s: %s", fq_status_code(why), sentence);
    fq_nio_hdr h[2] = {{FQ_HDR_ERROR, err}, {FQ_HDR_SUBJECT, src->subject}};
    fq_nio_out o = {.subject = subj, .data = src->data, .len = src->len, .hdrs = h,
                    .n_hdrs = tenant ? 1 : 2, .carry = src->carry,
                    .carry_lines = src->carry_lines, .carry_len = src->carry_len};
    /* A completion refused for its length is copied without its body:
     * anyone may send them, and its copy need not be longer than a short
     * one's. */
    if (TK_KIND(token) == TK_DONE_REJECT && o.len > FQ_COMPLETION_MAX_BYTES) {
        o.len = 0;
        size_t k = strlen(err);
        snprintf(err + k, sizeof err - k, " (copied without its body)");
    }
    /* A refusal that could never be stored would leave its submit to come
     * back for ever: it goes without the producer's headers when they are
     * unfit or too long, and without the body too when that is too long,
     * as the sentence says. */
    fq_nio_size sz;
    size_t room = p->max_payload > 0 ? (size_t)p->max_payload : SIZE_MAX;
    if (fq_nio_out_size(&sz, &o) != FQ_OK || sz.header > FQ_NIO_MAX_HEADER_BYTES ||
        sz.total > room) {
        o.carry = NULL;
        o.carry_len = 0;
        bool body = fq_nio_header_bytes(h, o.n_hdrs, 0) + o.len <= room;
        if (!body)
            o.len = 0;
        size_t k = strlen(err);
        snprintf(err + k, sizeof err - k, " (refused without the run's headers%s)",
                 body ? "" : " and body");
    }
    fq_status s = px_publish(p, &o, token);
    if ((s == FQ_ETOOBIG || s == FQ_EINVAL) && (o.carry || o.carry_len)) {
        /* The server's limit shrank since, or a header could not be read
         * after all: without the headers, then without the body. */
        o.carry = NULL;
        o.carry_len = 0;
        size_t k = strlen(err);
        snprintf(err + k, sizeof err - k, " (refused without the run's headers)");
        s = px_publish(p, &o, token);
    }
    if (s == FQ_ETOOBIG && o.len) {
        o.len = 0;
        char *at = strstr(err, " (refused without the run's headers)");
        if (at)
            *at = '\0';
        size_t k = strlen(err);
        snprintf(err + k, sizeof err - k, " (refused without the run's headers and body)");
        s = px_publish(p, &o, token);
    }
    if (s != FQ_OK) {
        /* Not even queued: leave it unacked; it comes back on the next
         * consumer reset. */
        p->c.pub_failures++;
    }
    if (!fq_log_enabled(FQ_LOG_INFO))
        return;
    /* A line a tenant a second, and PX_REFUSAL_LOGS a second over all: a
     * flood of runs to as many new tenant ids writes no line each. */
    if (px_warn_ok(p, tenant ? tenant : "_invalid") &&
        fq_bucket_take(&p->refusal_logs, fq_nio_mono_ms(), NULL)) {
        fq_log(FQ_LOG_INFO, "run refused", FQ_STR("tenant", tenant ? tenant : "_invalid"),
               FQ_STR("subject", src->subject), FQ_STR("error", err),
               FQ_UINT("unlogged_before", p->refusals_unlogged));
        p->refusals_unlogged = 0;
    } else {
        p->refusals_unlogged++;
    }
}

static void px_refuse(fq_proxy *p, const fq_nio_msg *m, const char *tenant, fq_status why,
                      const char *sentence, uint64_t token)
{
    fq_nio_out src = {.subject = fq_nio_msg_subject(m), .data = fq_nio_msg_data(m),
                      .len = fq_nio_msg_len(m), .carry = m};
    px_refuse_src(p, &src, tenant, why, sentence, token);
}

/* Count a refused run (why) overall and on its tenant pt or, when pt is
 * NULL, on the tenant named tenant (NULL: the subject names none) if it is
 * known or a layer of the policy lists it (then it is created as for an
 * admitted run). An id nothing lists and no run was admitted for is
 * counted overall only: a flood of refused runs to new ids must not grow
 * memory. */
static void px_count_refusal(fq_proxy *p, px_tenant *pt, const char *tenant, fq_status why)
{
    p->c.rejected[why]++;
    fq_policy_resolved pr;
    if (!pt && tenant && !(pt = px_tenant_find(p, tenant, strlen(tenant))) &&
        fq_policy_resolve(&pr, p->policy, tenant) == FQ_OK && pr.source != FQ_SRC_DEFAULT)
        px_tenant_get(&pt, p, tenant, strlen(tenant));
    if (pt)
        pt->rejected[why]++;
}

static bool px_grow(void **v, size_t *cap, size_t need, size_t size);

/* Whether we may change shared state now: we lead and the lease is fresh
 * (lib/lease.h). Every fetch, ack, journal append, dispatch, retry,
 * consumer change and admin write is gated on it. */
static bool px_fresh(const fq_proxy *p)
{
    return !p->fenced && fq_lease_fresh(&p->lease, fq_nio_mono_ms());
}

static void px_ack(fq_proxy *p, int cons, uint64_t seq, uint32_t delivered)
{
    fq_nio_ackref a = {.sseq = seq, .delivered = delivered ? delivered : 1};
    /* Not fresh: held back, in order, until the lease is renewed; if it is
     * lost instead, the next leader's consumer (a new term) gets the
     * message again and its journal says it was handled. */
    if (!p->nlater && px_fresh(p) && fq_nio_ack(p->nio, cons, &a) == FQ_OK)
        return;
    if (!px_grow((void **)&p->later, &p->later_cap, p->nlater + 1, sizeof *p->later))
        return;     /* out of memory: a lost ack costs a redelivery, de-duplicated */
    p->later[p->nlater++] = (px_later){cons, a};
}

/* Send the acks held back, once fresh again. */
static void px_acks_later(fq_proxy *p)
{
    size_t i = 0;
    while (i < p->nlater && px_fresh(p) &&
           fq_nio_ack(p->nio, p->later[i].cons, &p->later[i].a) == FQ_OK)
        i++;
    if (!i)
        return;
    memmove(p->later, p->later + i, (p->nlater - i) * sizeof *p->later);
    p->nlater -= i;
}

/* ---- the runs journal --------------------------------------------------- */

/*
 * FAIRQ_RUNS is a limits stream of batches; lib/journal.c writes and reads
 * the records. A run's flight record goes out with the turn that
 * dispatched it, its expired record with the turn its lease ran out, and
 * its done record with the turn that saw its completion; read back in
 * order at start they give the runs still in flight, the expired runs a
 * late completion may still reconcile, and the run ids completed within
 * the duplicate window. Only runs fairq dispatched get records. One
 * message per turn instead of one per run keeps the server's work per run
 * close to the
 * relay's.
 */

static bool px_grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *n = realloc(*v, c * size);
    if (!n)
        return false;
    *v = n;
    *cap = c;
    return true;
}

static px_batch *px_batch_cur(fq_proxy *p)
{
    if (p->cur)
        return p->cur;
    px_batch *b = p->bat_free;
    if (b)
        p->bat_free = b->next;
    else if (!(b = calloc(1, sizeof *b)))
        return NULL;
    b->id = p->bat_next++;
    b->nruns = b->ndones = 0;
    b->next = NULL;
    fq_jbatch_clear(&p->jb);
    p->cur = b;
    return b;
}

/* Append one record to the current batch. */
static bool px_journal_add(fq_proxy *p, const fq_jrec *r)
{
    return px_batch_cur(p) && fq_jbatch_append(&p->jb, r) == FQ_OK;
}

/* Append run x's record of type (flight or expired) at at_ms. */
static bool px_journal_run(fq_proxy *p, px_run *x, enum fq_jrec_type type, int64_t at_ms)
{
    fq_jrec r = {.type = type, .est = x->est, .declared = x->names->declared,
                 .seq = x->seq < PX_SYNTH_ID ? x->seq : 0, .at_ms = at_ms};
    memcpy(r.tenant, x->pt->id, sizeof r.tenant);
    memcpy(r.run_id, x->names->run_id, sizeof r.run_id);
    memcpy(r.workflow, x->names->workflow, sizeof r.workflow);
    return px_journal_add(p, &r);
}

/* The flight record of x, dispatched just now; its submit ack waits for it. */
static void px_journal_flight(fq_proxy *p, px_run *x, int64_t now_ms)
{
    if (!px_journal_run(p, x, FQ_JREC_FLIGHT, now_ms) ||
        !px_grow((void **)&p->cur->runs, &p->cur->cap_runs, p->cur->nruns + 1, sizeof(px_run *)))
        return;     /* out of memory: it will not be adopted after a restart */
    p->cur->runs[p->cur->nruns++] = x;
    x->pending++;
}

/*
 * Fencing. Each batch carries Nats-Expected-Last-Sequence, the sequence of
 * the batch stored before it, and a Nats-Msg-Id of its own; a new leader
 * first stores a marker (an empty batch) with no expectation. A stale
 * leader's next batch then expects a sequence that is no longer last and
 * the server refuses it (js_err 10071): nothing it settles on that batch
 * (submit and completion acks) happens, and it stops. One batch is in
 * flight at a time, since the next one's expectation is the PubAck of
 * this one; the records of the turns meanwhile go into the next batch, so
 * batches grow with load instead of multiplying. A batch sent again after
 * a lost PubAck that was stored after all is a duplicate by its Msg-Id
 * (JetStream checks it before the expectation), not a refusal. Why not a
 * chain of message ids (Nats-Expected-Last-Msg-Id), which would allow
 * several in flight: a refusal of one batch would refuse every later one
 * in flight, so a lost publish would read as a fence, and the sequence is
 * what the stream keeps across a server restart. docs/protocol.md
 * section 8.
 */

/* The largest an unsent batch grows before fetching and dispatching wait:
 * half of max_payload, so what was fetched already still fits. */
static size_t px_journal_room(const fq_proxy *p)
{
    return p->max_payload > 0 ? (size_t)p->max_payload / 2 : 512 * 1024;
}

/* Pause fetching while the unsent batch is full, and resume after. */
static void px_journal_check(fq_proxy *p)
{
    bool full = p->cur && p->jb.text.len >= px_journal_room(p);
    if (full == p->journal_full)
        return;
    p->journal_full = full;
    fq_nio_consume_pause(p->nio, PX_CONS_SUBMIT, full || p->fetch_paused);
    fq_nio_consume_pause(p->nio, PX_CONS_DONE, full);
}

/* Send the current batch once the one before it is stored, expecting that
 * one's sequence. On a failure to send, it stays current and is tried
 * again with the next turn's records. */
static void px_journal_flush(fq_proxy *p)
{
    px_batch *b = p->cur;
    size_t len = 0;
    const char *text = b && !p->bat_head && p->jmarked ? fq_jbatch_text(&p->jb, &len) : NULL;
    if (!text || !px_fresh(p))
        return;
    char exp[FQ_U64_DEC_MAX], id[FQ_LEASE_ID_MAX + 2 * FQ_U64_DEC_MAX + 4];
    fq_u64_dec(exp, p->jseq);
    snprintf(id, sizeof id, "%s/%" PRIu64 "/%" PRIu64, p->lease_id, p->term, b->id);
    fq_nio_hdr h[2] = {{"Nats-Msg-Id", id}, {"Nats-Expected-Last-Sequence", exp}};
    fq_nio_out o = {.subject = p->cfg.subjects.runs, .data = text, .len = len, .hdrs = h,
                    .n_hdrs = 2};
    if (px_publish(p, &o, TK_MAKE(TK_JOURNAL, b->id)) != FQ_OK) {
        p->c.pub_failures++;
        return;
    }
    p->cur = NULL;
    if (p->bat_tail)
        p->bat_tail->next = b;
    else
        p->bat_head = b;
    p->bat_tail = b;
}

/* ---- debts in the journal ------------------------------------------------ */

/*
 * A tenant keeps its debt when its queue empties (README, the scheduler's
 * rules), and through the journal across restarts: when a completion has
 * reconciled its deficit, a debt record with the deficit if negative, or 0
 * once a debt recorded is cleared, goes out with the turn's batch, one per
 * tenant a turn at most, none for a tenant that never had a debt. The
 * journal is a limits stream whose max age (px_keep_done_ms + 1 min) bounds
 * what is read back at every start, so it stays short and a debtor's record
 * is written again every px_debt_refresh_ms instead, PX_DEBT_PER_TURN a turn
 * at most. A record keeps the time the debt last changed, so that a debt is
 * forgiven once its tenant has held nothing for scheduler.debt_forget_ms
 * since, restarts or not; the idle tenant can then be forgotten.
 */

#define PX_DEBT_PER_TURN 256        /* debt records refreshed or forgiven a turn at most */

static uint64_t px_keep_done_ms(const fq_proxy *p);

/* Half the journal's retention, and no later than a debt may be forgiven. */
static uint64_t px_debt_refresh_ms(const fq_proxy *p)
{
    uint64_t r = px_keep_done_ms(p) / 2, life = p->cfg.scheduler.debt_forget_ms;
    return r < life ? r : life;
}

static void px_debt_unlink(fq_proxy *p, px_tenant *t)
{
    if (!t->debt_listed)
        return;
    if (t->debt_prev)
        t->debt_prev->debt_next = t->debt_next;
    else
        p->debt_head = t->debt_next;
    if (t->debt_next)
        t->debt_next->debt_prev = t->debt_prev;
    else
        p->debt_tail = t->debt_prev;
    t->debt_prev = t->debt_next = NULL;
    t->debt_listed = false;
}

/* List t last, due at due: every entry is due no earlier than those ahead. */
static void px_debt_link(fq_proxy *p, px_tenant *t, uint64_t due)
{
    px_debt_unlink(p, t);
    t->debt_due = due;
    t->debt_prev = p->debt_tail;
    if (p->debt_tail)
        p->debt_tail->debt_next = t;
    else
        p->debt_head = t;
    p->debt_tail = t;
    t->debt_listed = true;
}

/* Write t's debt record (debt <= 0, changed at t->debt_at_ms); a debtor is
 * listed for its refresh, a debt cleared leaves the list. Out of memory, it
 * is tried again shortly. */
static void px_debt_write(fq_proxy *p, px_tenant *t, int64_t debt, uint64_t now)
{
    fq_jrec r = {.type = FQ_JREC_DEBT, .deficit = debt, .at_ms = t->debt_at_ms};
    memcpy(r.tenant, t->id, sizeof r.tenant);
    if (!px_journal_add(p, &r)) {
        px_debt_link(p, t, now + PX_RETRY_MS);
        return;
    }
    t->debt_written = debt;
    if (debt < 0)
        px_debt_link(p, t, now + px_debt_refresh_ms(p));
    else
        px_debt_unlink(p, t);
}

/* t's deficit was just reconciled: a debt record may be due this turn. */
static void px_debt_touch(fq_proxy *p, px_tenant *t)
{
    if (t->debt_dirty)
        return;
    t->debt_dirty = true;
    t->dirty_next = p->dirty;
    p->dirty = t;
}

/* Before the turn's batch is sent: a record for each tenant reconciled this
 * turn whose debt is not the one recorded. */
static void px_debt_flush(fq_proxy *p, uint64_t now)
{
    int64_t now_ms = p->dirty ? fq_nio_unix_ms() : 0;
    for (px_tenant *t = p->dirty, *nx; t; t = nx) {
        nx = t->dirty_next;
        t->dirty_next = NULL;
        t->debt_dirty = false;
        fq_tenant_info ti;
        fq_tenant_info_get(t->t, &ti);
        int64_t debt = ti.deficit < 0 ? ti.deficit : 0;
        if (debt == t->debt_written)
            continue;
        t->debt_at_ms = now_ms;
        px_debt_write(p, t, debt, now);
    }
    p->dirty = NULL;
}

/* The debtors whose record is due: each debt is forgiven if it has outlived
 * scheduler.debt_forget_ms and its tenant holds nothing, else written again
 * (as it is now: dispatches move a busy debtor's deficit too) before the
 * stream ages its record out. */
static void px_debt_sweep(fq_proxy *p, uint64_t now)
{
    if (!p->debt_head || p->debt_head->debt_due > now)
        return;
    int64_t now_ms = fq_nio_unix_ms();
    for (unsigned n = 0; n < PX_DEBT_PER_TURN && p->debt_head && p->debt_head->debt_due <= now;
         n++) {
        px_tenant *t = p->debt_head;
        fq_tenant_info ti;
        fq_tenant_info_get(t->t, &ti);
        int64_t debt = ti.deficit < 0 ? ti.deficit : 0;
        if (debt != t->debt_written) {
            t->debt_at_ms = now_ms;
        } else if (!t->keyed &&
                   fq_debt_forgiven(debt, t->debt_at_ms, now_ms,
                                    p->cfg.scheduler.debt_forget_ms) &&
                   fq_tenant_set_debt(p->sched, t->t, 0) == FQ_OK) {
            p->c.debts_forgiven++;
            debt = 0;
            t->debt_at_ms = now_ms;
        }
        px_debt_write(p, t, debt, now);
    }
}

static px_batch *px_batch_take(fq_proxy *p, uint64_t id)
{
    for (px_batch **pp = &p->bat_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        px_batch *b = *pp;
        if (b->id != id)
            continue;
        *pp = b->next;
        if (p->bat_tail == b)
            p->bat_tail = prev;
        return b;
    }
    return NULL;
}

/* ---- ingest ----------------------------------------------------------- */

static void px_run_id(char *out, size_t cap, const fq_proxy *p, const fq_submit *sub,
                      uint64_t seq);

static void px_names_set(const fq_proxy *p, px_names *nm, const fq_submit *sub, uint64_t seq)
{
    px_run_id(nm->run_id, sizeof nm->run_id, p, sub, seq);
    memcpy(nm->workflow, sub->workflow, sizeof nm->workflow);
    nm->declared = sub->est_tokens;
}

/* The subject's last token, if it follows prefix and a dot. */
static const char *px_subject_tenant(const char *subject, const char *prefix, size_t *len)
{
    size_t pl = strlen(prefix);
    if (strncmp(subject, prefix, pl) != 0 || subject[pl] != '.')
        return NULL;
    const char *t = strrchr(subject, '.') + 1;
    *len = strlen(t);
    return t;
}

/* A header with an empty value counts as absent: clients differ in whether
 * they send one at all. */
static const char *px_header(const fq_nio_msg *m, const char *key)
{
    const char *v = fq_nio_msg_header(m, key);
    return v && *v ? v : NULL;
}

static void px_submit_headers(fq_submit_headers *h, const fq_nio_msg *m)
{
    h->run_id = px_header(m, FQ_HDR_RUN_ID);
    h->workflow = px_header(m, FQ_HDR_WORKFLOW);
    h->est_tokens = px_header(m, FQ_HDR_EST_TOKENS);
}

/* The run id a run goes by: the producer's, or one derived from the submit
 * stream (its creation time keeps ids apart if the stream is recreated). */
static void px_run_id(char *out, size_t cap, const fq_proxy *p, const fq_submit *sub,
                      uint64_t seq)
{
    if (sub->run_id[0])
        snprintf(out, cap, "%s", sub->run_id);
    else
        snprintf(out, cap, "fq-%" PRId64 "-%" PRIu64, p->submit_created_ms / 1000, seq);
}

/* Whether run key (tenant, run_id), hash h, of submit seq was handled
 * before: held, in flight, expired or completed, all of them runs fairq
 * held (a completion for a run it did not hold records nothing). *same: by
 * this very submit (a redelivery after a restart), else by another submit
 * (a duplicate run id). */
static bool px_seen(fq_proxy *p, const char *tenant, const char *run_id, uint64_t h, uint64_t seq,
                    bool *same)
{
    px_run *x = px_find_key(p, tenant, run_id, h);
    if (x) {
        *same = x->seq == seq;
        return true;
    }
    const px_done_ent *d = px_done_find(&p->done, h);
    if (d) {
        *same = d->seq == seq;
        return true;
    }
    return false;
}

/* The headers fairq sets on a dispatch, and the text of their values. */
typedef struct px_dhdrs {
    char est[FQ_U64_DEC_MAX], sat[FQ_U64_DEC_MAX], dat[FQ_U64_DEC_MAX];
    char msgid[FQ_TENANT_MAX + FQ_RUN_ID_MAX + 2];
    fq_nio_hdr h[7];
    size_t n;
} px_dhdrs;

/* Fill d with the dispatch headers of run run_id of tenant (workflow ""
 * for none): one function for the dispatch and for admission, which sizes
 * the dispatch with UINT64_MAX for the numbers it cannot know yet.
 * Nats-Msg-Id comes first: JetStream reads a header where its name first
 * occurs in the block, and a tenant, run id or workflow may hold the text. */
static void px_dispatch_hdrs(px_dhdrs *d, const char *tenant, const char *run_id,
                             const char *workflow, uint64_t est, uint64_t submitted_ms,
                             uint64_t dispatched_ms)
{
    fq_u64_dec(d->est, est);
    fq_u64_dec(d->sat, submitted_ms);
    fq_u64_dec(d->dat, dispatched_ms);
    size_t tl = strlen(tenant), rl = strlen(run_id);    /* both bounded */
    memcpy(d->msgid, tenant, tl);
    d->msgid[tl] = '/';
    memcpy(d->msgid + tl + 1, run_id, rl + 1);
    d->h[0] = (fq_nio_hdr){"Nats-Msg-Id", d->msgid};
    d->h[1] = (fq_nio_hdr){FQ_HDR_TENANT, tenant};
    d->h[2] = (fq_nio_hdr){FQ_HDR_RUN_ID, run_id};
    d->h[3] = (fq_nio_hdr){FQ_HDR_EST_TOKENS, d->est};
    d->h[4] = (fq_nio_hdr){FQ_HDR_SUBMITTED_AT, d->sat};
    d->h[5] = (fq_nio_hdr){FQ_HDR_DISPATCHED_AT, d->dat};
    d->h[6] = (fq_nio_hdr){FQ_HDR_WORKFLOW, workflow};
    d->n = workflow[0] ? 7 : 6;
}

/* Whether the dispatch of submit m as run run_id would be stored: its
 * producer's headers fit to carry, its header block within JetStream's
 * limit and the whole within max_payload. One pass over m's headers, which
 * leaves them in p->carry as lines to carry; on FQ_OK *size is the
 * dispatch's bytes, else err says why. */
static fq_status px_dispatch_fits(size_t *size, fq_proxy *p, const fq_nio_msg *m,
                                  const char *tenant, const char *run_id, const char *workflow,
                                  char *err, size_t errlen)
{
    px_dhdrs d;
    px_dispatch_hdrs(&d, tenant, run_id, workflow, UINT64_MAX, UINT64_MAX, UINT64_MAX);
    fq_nio_out o = {.subject = p->cfg.subjects.dispatch, .len = fq_nio_msg_len(m), .hdrs = d.h,
                    .n_hdrs = d.n};
    fq_nio_size sz;
    *size = 0;
    /* Its headers as they will be carried (p->carry), checked on the way:
     * what a kept body holds instead of the message. */
    char bad[160];
    fq_status s = fq_nio_msg_carry_lines(&p->carry, bad, m);
    p->carry_ok = s == FQ_OK;
    if (s == FQ_EINVAL) {
        snprintf(err, errlen, "%s", bad);
        return FQ_EINVAL;
    }
    if (p->carry_ok) {
        o.carry_lines = p->carry.p;
        o.carry_len = p->carry.len;
    } else {
        o.carry = m;    /* out of memory: sized from the message, read back later */
    }
    if (fq_nio_out_size(&sz, &o) != FQ_OK) {
        snprintf(err, errlen, "%s", sz.bad);
        return FQ_EINVAL;
    }
    if (sz.header > FQ_NIO_MAX_HEADER_BYTES) {
        snprintf(err, errlen, "its dispatch's header block would be %zu bytes with fairq's "
                 "headers; JetStream stores at most %u", sz.header, FQ_NIO_MAX_HEADER_BYTES);
        return FQ_ETOOBIG;
    }
    if (p->max_payload > 0 && sz.total > (uint64_t)p->max_payload) {
        snprintf(err, errlen, "its dispatch would be %zu bytes with fairq's headers; the "
                 "server's max_payload is %" PRId64, sz.total, p->max_payload);
        return FQ_ETOOBIG;
    }
    *size = sz.total;
    return FQ_OK;
}

/* Tokens a second the queue drains at; 0 while unknown. */
static bool px_overloaded(fq_proxy *p, px_tenant *pt, uint32_t est)
{
    if (!p->cfg.scheduler.max_wait_ms || p->rate_tokens <= 0.0)
        return false;
    double ahead = (double)fq_sched_tokens_ahead(p->sched, pt->t, est);
    return ahead * 1000.0 / p->rate_tokens > (double)p->cfg.scheduler.max_wait_ms;
}

static void px_pause_check(fq_proxy *p)
{
    bool full = p->held >= p->cfg.limits.max_buffered_runs;
    if (full != p->fetch_paused) {
        p->fetch_paused = full;
        fq_nio_consume_pause(p->nio, PX_CONS_SUBMIT, full || p->journal_full);
        if (full) {
            p->c.fetch_pauses++;
            fq_log(FQ_LOG_WARN, "fetching paused: max_buffered_runs reached",
                   FQ_UINT("held", p->held));
        }
    }
}

/* The submit m (ev) of run x, which the runs journal says was dispatched
 * before a restart, came again: its ack was lost, or its dispatch was never
 * stored (it failed, and the proxy stopped before it was sent again). Which
 * one is not known, so it is published again under its Nats-Msg-Id:
 * JetStream stores it once either way, and the PubAck acks the submit (a
 * failed one queues the run again like any failed dispatch). */
static void px_resend(fq_proxy *p, px_run *x, fq_nio_msg *m, const fq_nio_event *ev)
{
    int64_t now_ms = fq_nio_unix_ms();
    px_dhdrs dh;
    px_dispatch_hdrs(&dh, x->pt->id, x->names->run_id, x->names->workflow, x->est,
                     ev->ts_ms > 0 ? (uint64_t)ev->ts_ms : 0, now_ms > 0 ? (uint64_t)now_ms : 0);
    fq_nio_out o = {.subject = p->cfg.subjects.dispatch, .data = fq_nio_msg_data(m),
                    .len = fq_nio_msg_len(m), .hdrs = dh.h, .n_hdrs = dh.n, .carry = m};
    x->delivered = ev->ack.delivered;
    if (!(x->in_seq = px_index_add(&p->by_seq, x, false)) ||
        px_publish(p, &o, TK_MAKE(TK_DISPATCH, x->seq)) != FQ_OK) {
        /* Not now: JetStream delivers it again in a while. */
        px_seq_del(p, x);
        fq_nio_nak(p->nio, PX_CONS_SUBMIT, &ev->ack, PX_PARK_MAX_MS);
        fq_nio_msg_drop(p->nio, m);
        return;
    }
    x->pending++;
    p->held++;
    fq_nio_msg_drop(p->nio, m);
    px_pause_check(p);
}

static void px_on_submit(fq_proxy *p, fq_nio_event *ev)
{
    fq_nio_msg *m = ev->msg;
    uint64_t seq = ev->ack.sseq;
    px_run *held = px_find_seq(p, seq);
    if (held) {
        /* Delivered again (a consumer reset): it is queued already. */
        held->delivered = ev->ack.delivered;
        p->c.redelivered++;
        fq_nio_msg_drop(p->nio, m);
        return;
    }
    p->c.submitted++;
    uint64_t tok = TK_MAKE(TK_REJECT, seq);
    size_t tlen = 0;
    const char *tid = px_subject_tenant(fq_nio_msg_subject(m), p->cfg.subjects.submit, &tlen);
    if (!tid || !fq_tenant_id_valid(tid, tlen)) {
        p->c.invalid_subject++;
        px_count_refusal(p, NULL, NULL, FQ_EINVAL);
        px_refuse(p, m, NULL, FQ_EINVAL,
                  "the subject's last token is not a tenant id (" FQ_TENANT_RULE ")", tok);
        fq_nio_msg_drop(p->nio, m);
        return;
    }
    char tenant[FQ_TENANT_MAX + 1];
    memcpy(tenant, tid, tlen);
    tenant[tlen] = '\0';
    fq_submit sub;
    fq_submit_headers h;
    px_submit_headers(&h, m);
    char err[256];
    fq_status s = fq_submit_parse(&sub, tenant, fq_nio_msg_data(m), fq_nio_msg_len(m), &h,
                                  p->cfg.scheduler.max_est_tokens, err, sizeof err);
    px_tenant *pt = NULL;
    size_t size = 0;            /* bytes of its dispatch, body and headers */
    char run_id[FQ_RUN_ID_MAX + 1];
    bool same = false;
    uint64_t key = 0;
    if (s == FQ_OK) {
        /* What can never be dispatched is refused now, not found out at
         * its dispatch, where it would block its tenant for ever. */
        px_run_id(run_id, sizeof run_id, p, &sub, seq);
        s = px_dispatch_fits(&size, p, m, tenant, run_id, sub.workflow, err, sizeof err);
    }
    if (s == FQ_OK) {
        key = px_key_hash(p, tenant, run_id);
        bool seen = px_seen(p, tenant, run_id, key, seq, &same);
        /* This very submit, dispatched already by the runs journal (the
         * proxy restarted, or the submit's ack was lost). */
        px_run *x = seen && same ? px_find_key(p, tenant, run_id, key) : NULL;
        if (x && (x->in_seq || (x->state != PX_FLIGHT && x->state != PX_EXPIRED)))
            x = NULL;
        if (x && fq_sched_run(p->sched, x->seq)) {
            px_resend(p, x, m, ev);
            return;
        }
        if (x) {
            /* Past the window at start, the scheduler holds nothing of
             * it: admitted afresh, in its place among its tenant's runs
             * (sent again, JetStream stores it once). */
            px_key_del(p, x);
            x->state = PX_DONE;
            px_maybe_free(p, x);
            seen = false;
        }
        if (seen) {
            if (same) {
                /* Completed before a restart, its ack lost: done already. */
                p->c.duplicates_acked++;
                px_ack(p, PX_CONS_SUBMIT, seq, ev->ack.delivered);
                fq_nio_msg_drop(p->nio, m);
                return;
            }
            s = FQ_EEXIST;
            snprintf(err, sizeof err, "run_id %s is held or was dispatched already", run_id);
        }
    }
    if (s == FQ_OK) {
        s = px_tenant_get(&pt, p, tenant, tlen);
        if (s == FQ_EUNKNOWN)
            snprintf(err, sizeof err, "tenant %s is not configured and unknown tenants are "
                     "rejected", tenant);
        else if (s != FQ_OK)
            snprintf(err, sizeof err, "%s", fq_status_text(s));
    }
    uint32_t est = 0;
    if (s == FQ_OK) {
        est = fq_est_charge(p->est, tenant, sub.workflow, sub.est_tokens);
        if (px_overloaded(p, pt, est)) {
            s = FQ_EOVERLOAD;
            snprintf(err, sizeof err, "the estimated wait exceeds scheduler.max_wait_ms (%"
                     PRIu64 " ms)", p->cfg.scheduler.max_wait_ms);
        }
    }
    px_run *x = NULL;
    if (s == FQ_OK) {
        x = px_run_alloc(p);
        if (x)
            *x = (px_run){.seq = seq, .pt = pt, .key_hash = key, .submitted_ms = ev->ts_ms,
                          .est = est, .delivered = ev->ack.delivered, .state = PX_QUEUED,
                          .size = (uint32_t)size};
        if (!x || !(x->in_seq = px_index_add(&p->by_seq, x, false))) {
            s = FQ_ENOMEM;
        } else {
            s = fq_sched_enqueue(NULL, p->sched, pt->t, seq, est, x, fq_nio_mono_ms());
        }
        if (s != FQ_OK && x) {
            px_seq_del(p, x);
            px_maybe_free(p, x);
            x = NULL;
        }
        if (s == FQ_EFULL)
            snprintf(err, sizeof err, "tenant %s has its max_pending runs queued already", tenant);
        else if (s == FQ_ENOMEM) {
            /* Not a client's fault: leave it in JetStream for later. */
            fq_log(FQ_LOG_ERROR, "out of memory holding a run", FQ_STR("tenant", tenant));
            fq_nio_nak(p->nio, PX_CONS_SUBMIT, &ev->ack, PX_PARK_MAX_MS);
            fq_nio_msg_drop(p->nio, m);
            return;
        }
    }
    if (s != FQ_OK) {
        px_count_refusal(p, pt, tenant, s);
        px_refuse(p, m, tenant, s, err, tok);
        fq_nio_msg_drop(p->nio, m);
        return;
    }
    p->held++;
    /* By key from now on: a second run with its id is refused at once, and
     * a completion for it (a worker's bug) is told from an unheld one. */
    px_key_add(p, x);
    /* Kept with what dispatch needs of its parse, so that it need not read
     * the body again; the message goes back to nats.c either way. */
    if (p->buffered_bytes + x->size <= p->cfg.limits.max_buffered_bytes && p->carry_ok &&
        px_body_keep(p, x, run_id, sub.workflow, sub.est_tokens, p->carry.p, p->carry.len,
                     fq_nio_msg_data(m), fq_nio_msg_len(m))) {
        x->retained = true;
        p->buffered_bytes += x->size;
    } else {
        p->index_only++;
    }
    fq_nio_msg_drop(p->nio, m);
    px_pause_check(p);
}

/* ---- dispatch ----------------------------------------------------------- */

static void px_release_body(fq_proxy *p, px_run *x)
{
    if (x->retained) {
        p->buffered_bytes -= x->size;
        x->retained = false;
    } else {
        p->index_only--;
    }
    px_body_drop(p, x);
}

/* Run x, just taken by the scheduler, leaves fairq without reaching the
 * workers (refused, or its body lost): its dispatch is taken back, so its
 * charge is refunded and it does not count as dispatched, and it is
 * forgotten. Its submit is acked by whoever stored why. */
static void px_drop_dispatched(fq_proxy *p, px_run *x)
{
    fq_sched_cancel(p->sched, x->seq);
    x->state = PX_DONE;
    px_release_body(p, x);
    p->held--;
    px_seq_del(p, x);
    px_key_del(p, x);
    px_maybe_free(p, x);
    px_pause_check(p);
}

/* The names of run x: from its body while that is in memory (kept at
 * ingest), else read from m (its body read back). NULL when out of memory. */
static px_names *px_names_of(fq_proxy *p, px_run *x, const fq_nio_msg *m)
{
    if (x->names)
        return x->names;
    px_names *nm = px_names_alloc(p);
    if (!nm)
        return NULL;
    if (x->body) {
        const px_body *b = x->body;
        memcpy(nm->run_id, b->bytes, b->run_id_len);
        nm->run_id[b->run_id_len] = '\0';
        memcpy(nm->workflow, b->bytes + b->run_id_len, b->workflow_len);
        nm->workflow[b->workflow_len] = '\0';
        nm->declared = b->declared;
        x->names = nm;
        return nm;
    }
    fq_submit sub;
    fq_submit_headers h;
    px_submit_headers(&h, m);
    char err[256];
    /* Valid: it was checked when it came in. */
    fq_submit_parse(&sub, x->pt->id, fq_nio_msg_data(m), fq_nio_msg_len(m), &h,
                    p->cfg.scheduler.max_est_tokens, err, sizeof err);
    px_names_set(p, nm, &sub, x->seq);
    x->names = nm;
    return nm;
}

/* Run x, taken by the scheduler, was not dispatched: it goes back to the
 * head of its tenant's queue, in order, and the tenant is parked, so that
 * the others are served meanwhile (PX_RETRY_MS, doubling with each failure
 * in a row up to PX_PARK_MAX_MS). js_err: JetStream's error code, if any. */
static void px_requeue(fq_proxy *p, px_run *x, uint64_t now, int js_err)
{
    px_tenant *pt = x->pt;
    fq_sched_requeue(p->sched, x->seq);
    uint32_t k = pt->fails < 16 ? pt->fails : 16;
    uint64_t wait = (uint64_t)PX_RETRY_MS << k;
    if (wait > PX_PARK_MAX_MS)
        wait = PX_PARK_MAX_MS;
    pt->fails++;
    fq_sched_park(p->sched, pt->t, now + wait);
    if (px_warn_ok(p, pt->id))
        fq_log(FQ_LOG_WARN, "a dispatch failed: the run is queued again and its tenant parked",
               FQ_STR("tenant", pt->id), FQ_STR("run_id", x->names ? x->names->run_id : ""),
               FQ_INT("js_err", js_err), FQ_UINT("parked_ms", wait),
               FQ_UINT("failures_in_a_row", pt->fails));
}

/* Dispatches are stored again: the proxy is ready, if it was not. */
static void px_dispatching_again(fq_proxy *p)
{
    if (!p->fail_since)
        return;
    if (fq_probes_stall(p->probes, FQ_STALL_DISPATCH, false, 0))
        fq_log(FQ_LOG_INFO, "dispatching again",
               FQ_UINT("failed_for_ms", fq_nio_mono_ms() - p->fail_since));
    p->fail_since = 0;
}

/* The dispatch of submit seq was not stored (ev: its failed PubAck, a full
 * store or a timeout, say). Such failures pass: the run is not refused but
 * queued again, in order (its lease may have run out meanwhile), its body
 * the message that failed, and its tenant parked. Dispatches that keep
 * failing make the proxy not ready, with a line in the log. false: the
 * scheduler no longer holds the run (its expired record was forgotten) and
 * the message is the caller's to retry as it is. */
static bool px_dispatch_failed(fq_proxy *p, uint64_t seq, fq_nio_event *ev)
{
    uint64_t now = fq_nio_mono_ms();
    p->c.dispatch_failures++;
    if (!p->fail_since)
        p->fail_since = now;
    if (now - p->fail_since >= PX_STALL_MS) {
        bool first = !fq_probes_stall(p->probes, FQ_STALL_DISPATCH, true, ev->err_code);
        if (px_warn_ok(p, "not dispatching") || first) {
            fq_sched_stats ss;
            fq_sched_stats_get(p->sched, &ss);
            fq_log(FQ_LOG_ERROR, "not dispatching: publishes to the dispatch stream keep failing",
                   FQ_STR("stream", p->cfg.streams.dispatch), FQ_INT("js_err", ev->err_code),
                   FQ_UINT("failing_for_ms", now - p->fail_since),
                   FQ_UINT("tenants_parked", ss.parked));
        }
    }
    px_run *x = px_find_seq(p, seq);
    if (!x || (x->state != PX_FLIGHT && x->state != PX_EXPIRED) || !fq_sched_run(p->sched, seq))
        return false;
    x->state = PX_QUEUED;
    x->pending--;
    /* What failed is the body and headers the next attempt needs: built
     * from it, the dispatch is the same (fairq's own headers in it are set
     * anew). Its names are x's already. */
    char bad[160];
    if (ev->msg && fq_nio_msg_carry_lines(&p->carry, bad, ev->msg) == FQ_OK &&
        px_body_keep(p, x, "", "", 0, p->carry.p, p->carry.len, fq_nio_msg_data(ev->msg),
                     fq_nio_msg_len(ev->msg))) {
        x->retained = true;
        p->buffered_bytes += x->size;
    } else {
        p->index_only++;
    }
    fq_nio_msg_drop(p->nio, ev->msg);
    ev->msg = NULL;
    px_requeue(p, x, now, ev->err_code);
    return true;
}

/* Dispatch run x, which the scheduler just moved into the window. Returns
 * false when NATS cannot take it now (x is back at the head of its queue). */
static bool px_dispatch_one(fq_proxy *p, px_run *x)
{
    fq_nio_msg *read = NULL;
    if (!x->body) {
        fq_status s = fq_nio_get(&read, p->nio, p->cfg.streams.submit, x->seq);
        p->c.body_reads++;
        if (s == FQ_ENOTFOUND) {
            /* Purged from the stream behind our back: nothing to send. */
            p->c.body_lost++;
            fq_log(FQ_LOG_ERROR, "a held run vanished from the submit stream",
                   FQ_STR("tenant", x->pt->id), FQ_UINT("seq", x->seq));
            px_drop_dispatched(p, x);
            return true;
        }
        if (s != FQ_OK) {
            px_requeue(p, x, fq_nio_mono_ms(), 0);
            return false;
        }
    }
    /* The submit as kept, or as read back: the same bytes go out. */
    char subj[FQ_TENANT_MAX + 256];
    fq_nio_out src;
    if (x->body) {
        snprintf(subj, sizeof subj, "%s.%s", p->cfg.subjects.submit, x->pt->id);
        src = (fq_nio_out){.subject = subj, .data = px_body_data(x->body), .len = x->body->len,
                           .carry_lines = px_body_lines(x->body), .carry_len = x->body->lines};
    } else {
        src = (fq_nio_out){.subject = fq_nio_msg_subject(read), .data = fq_nio_msg_data(read),
                           .len = fq_nio_msg_len(read), .carry = read};
    }
    px_names *nm = px_names_of(p, x, read);
    if (!nm) {
        fq_nio_msg_drop(p->nio, read);
        px_requeue(p, x, fq_nio_mono_ms(), 0);
        return false;
    }
    bool same = false;
    if (!x->in_key && px_seen(p, x->pt->id, nm->run_id, x->key_hash, x->seq, &same)) {
        /* Two queued runs with one run id, the second not indexed at
         * ingest (out of memory): it is refused. */
        char why[256];
        snprintf(why, sizeof why, "run_id %s was dispatched already", nm->run_id);
        px_count_refusal(p, x->pt, NULL, FQ_EEXIST);
        px_refuse_src(p, &src, x->pt->id, FQ_EEXIST, why, TK_MAKE(TK_REJECT, x->seq));
        fq_nio_msg_drop(p->nio, read);
        px_drop_dispatched(p, x);
        return true;
    }
    int64_t now_ms = fq_nio_unix_ms();
    px_dhdrs dh;
    px_dispatch_hdrs(&dh, x->pt->id, nm->run_id, nm->workflow, x->est,
                     x->submitted_ms > 0 ? (uint64_t)x->submitted_ms : 0,
                     now_ms > 0 ? (uint64_t)now_ms : 0);
    fq_nio_out o = src;
    o.subject = p->cfg.subjects.dispatch;
    o.hdrs = dh.h;
    o.n_hdrs = dh.n;
    fq_status s = px_publish(p, &o, TK_MAKE(TK_DISPATCH, x->seq));
    if (s == FQ_EINVAL || s == FQ_ETOOBIG) {
        /* It can never be sent (admitted before the server's max_payload
         * shrank, say): refused, as admission would refuse it now. */
        char why[256];
        snprintf(why, sizeof why, "its dispatch cannot be sent: %s",
                 s == FQ_ETOOBIG ? "it exceeds the server's max_payload"
                                 : "its headers cannot be read");
        px_count_refusal(p, x->pt, NULL, s);
        px_refuse_src(p, &src, x->pt->id, s, why, TK_MAKE(TK_REJECT, x->seq));
        fq_nio_msg_drop(p->nio, read);
        px_drop_dispatched(p, x);
        return true;
    }
    fq_nio_msg_drop(p->nio, read);
    if (s != FQ_OK) {
        /* NATS cannot take any publish now (disconnected, or too many
         * pending): nothing to do with this tenant; the next turn tries
         * again in the same order. Out of memory parks the tenant. */
        if (s == FQ_ENOMEM)
            px_requeue(p, x, fq_nio_mono_ms(), 0);
        else
            fq_sched_requeue(p->sched, x->seq);
        return false;
    }
    if (!x->in_key)
        px_key_add(p, x);
    x->state = PX_FLIGHT;
    x->pending++;       /* a journal batch of an earlier attempt may still be pending */
    px_release_body(p, x);
    px_journal_flight(p, x, now_ms);
    p->c.dispatched++;
    p->sec_dispatched++;
    p->sec_tokens += x->est;
    int64_t waited = now_ms - x->submitted_ms;
    fq_hist_observe(&x->pt->wait, waited > 0 ? (uint64_t)waited * 1000 : 0);
    return true;
}

static void px_dispatch(fq_proxy *p)
{
    uint64_t now = fq_nio_mono_ms();
    while (p->pubs < PX_MAX_PUBS && !p->journal_full) {
        fq_run *r = fq_sched_dispatch(p->sched, now);
        if (!r)
            break;
        if (!px_dispatch_one(p, r->handle))
            break;
        px_journal_check(p);
    }
}

/* ---- PubAcks ------------------------------------------------------------- */

/* One of the publishes a dispatched run's ack waits for has settled. */
static void px_settled(fq_proxy *p, px_run *x)
{
    /* A run whose dispatch failed is queued again: the journal batch of
     * that attempt settling acks nothing. */
    if (--x->pending || x->state == PX_QUEUED)
        return;
    px_ack(p, PX_CONS_SUBMIT, x->seq, x->delivered);
    p->held--;
    px_seq_del(p, x);
    px_maybe_free(p, x);
    px_pause_check(p);
}

static void px_on_lease(fq_proxy *p, const fq_nio_event *ev);

/* A journal batch was not stored (a full store, a timeout): it is sent
 * again as it was. Failing for PX_STALL_MS, the proxy is not ready: no
 * submit or completion is settled meanwhile. */
static void px_journal_failed(fq_proxy *p, int js_err)
{
    uint64_t now = fq_nio_mono_ms();
    if (!p->jfail_since)
        p->jfail_since = now;
    if (now - p->jfail_since >= PX_STALL_MS &&
        !fq_probes_stall(p->probes, FQ_STALL_JOURNAL, true, js_err))
        fq_log(FQ_LOG_ERROR, "the runs journal refuses our batches; nothing is settled until it "
               "stores them", FQ_STR("stream", p->cfg.streams.runs), FQ_INT("js_err", js_err),
               FQ_UINT("failing_for_ms", now - p->jfail_since));
}

static void px_on_puback(fq_proxy *p, fq_nio_event *ev)
{
    if (p->pubs)
        p->pubs--;
    int kind = TK_KIND(ev->token);
    uint64_t v = TK_VAL(ev->token);
    if (kind == TK_LEASE) {
        px_on_lease(p, ev);
        return;
    }
    if (kind == TK_JMARK) {
        p->jmark_sent = false;
        p->jmarked = ev->status == FQ_OK;
        p->jseq = ev->seq;
        if (!p->jmarked && px_warn_ok(p, "journal marker"))
            fq_log(FQ_LOG_WARN, "cannot store the journal's term marker; not serving until it "
                   "is stored", FQ_STR("stream", p->cfg.streams.runs),
                   FQ_INT("js_err", ev->err_code));
        fq_nio_msg_drop(p->nio, ev->msg);
        return;
    }
    if (kind == TK_JOURNAL && ev->status != FQ_OK && ev->err_code == FQ_NIO_ERR_WRONG_LAST) {
        if (!p->fenced)
            fq_log(FQ_LOG_ERROR, "the runs journal refused our batch: another proxy leads and "
                   "wrote it; changing nothing more, stopping", FQ_UINT("term", p->term),
                   FQ_UINT("expected_last_seq", p->jseq));
        p->fenced = true;
        fq_nio_msg_drop(p->nio, ev->msg);
        return;
    }
    if (ev->status != FQ_OK && ev->err_code && (kind == TK_REJECT || kind == TK_DONE_REJECT)) {
        /* JetStream answered and will not store it (a limit of the rejected
         * stream or of the account). A refusal only informs: retried, it
         * would be refused again, for ever, while its run stayed unacked. */
        p->c.refusals_unstored++;
        if (px_warn_ok(p, "refusal"))
            fq_log(FQ_LOG_WARN, "a refusal was not stored; its message is acked all the same",
                   FQ_INT("js_err", ev->err_code),
                   FQ_STR("subject", ev->msg ? fq_nio_msg_subject(ev->msg) : ""));
        fq_nio_msg_drop(p->nio, ev->msg);
        px_ack(p, kind == TK_REJECT ? PX_CONS_SUBMIT : PX_CONS_DONE, v, 1);
        return;
    }
    if (ev->status != FQ_OK) {
        p->c.pub_failures++;
        if (kind == TK_DISPATCH && px_dispatch_failed(p, v, ev))
            return;
        if (kind == TK_JOURNAL)
            px_journal_failed(p, ev->err_code);
        if (px_warn_ok(p, "publish"))
            fq_log(FQ_LOG_WARN, "a publish failed; retrying", FQ_INT("kind", kind),
                   FQ_INT("js_err", ev->err_code));
        px_retry_add(p, ev->token, ev->msg);
        return;
    }
    switch (kind) {
    case TK_DISPATCH: {
        px_run *x = px_find_seq(p, v);
        if (!x)
            return;
        if (ev->duplicate)
            p->c.dispatch_duplicates++;     /* it reached the workers before a restart */
        x->pt->fails = 0;
        px_dispatching_again(p);
        px_settled(p, x);
        return;
    }
    case TK_JOURNAL: {
        px_batch *b = px_batch_take(p, v);
        if (!b)
            return;
        p->jseq = ev->seq;
        if (p->jfail_since && fq_probes_stall(p->probes, FQ_STALL_JOURNAL, false, 0))
            fq_log(FQ_LOG_INFO, "the runs journal stores our batches again",
                   FQ_UINT("failed_for_ms", fq_nio_mono_ms() - p->jfail_since));
        p->jfail_since = 0;
        for (size_t i = 0; i < b->nruns; i++)
            px_settled(p, b->runs[i]);
        for (size_t i = 0; i < b->ndones; i++)
            px_ack(p, PX_CONS_DONE, b->dones[i], 1);
        b->next = p->bat_free;
        p->bat_free = b;
        return;
    }
    case TK_REJECT:
        px_ack(p, PX_CONS_SUBMIT, v, 1);
        return;
    case TK_DONE_REJECT:
        px_ack(p, PX_CONS_DONE, v, 1);
        return;
    }
}

static void px_retry_due(fq_proxy *p)
{
    if (!p->nretry || !p->connected || !px_fresh(p))
        return;
    uint64_t now = fq_nio_mono_ms();
    size_t k = 0;
    for (size_t i = 0; i < p->nretry; i++) {
        px_retry *r = &p->retry[i];
        if (r->at <= now && fq_nio_republish(p->nio, &r->msg, r->token) == FQ_OK) {
            p->pubs++;
            continue;
        }
        if (r->at <= now)
            r->at = now + PX_RETRY_MS;
        p->retry[k++] = *r;
    }
    p->nretry = k;
}

/* ---- completions ---------------------------------------------------------- */

/* How long a completed run id is remembered: the duplicate window, or the
 * run timeout if longer. */
static uint64_t px_keep_done_ms(const fq_proxy *p)
{
    uint64_t dup = p->cfg.streams.duplicate_window_ms;
    return dup > p->cfg.window.run_timeout_ms ? dup : p->cfg.window.run_timeout_ms;
}

static int64_t px_done_until(const fq_proxy *p, int64_t now_ms)
{
    return now_ms + (int64_t)px_keep_done_ms(p);
}

/* Remember (tenant, run_id) as completed, here and in the journal; the
 * completion (done seq) is acked once its record is stored. */
static void px_mark_done(fq_proxy *p, const char *tenant, const px_names *nm, uint64_t h,
                         uint64_t seq, uint64_t done_seq)
{
    int64_t now_ms = fq_nio_unix_ms();
    px_done_add(&p->done, h, seq, px_done_until(p, now_ms));
    fq_jrec r = {.type = FQ_JREC_DONE, .seq = seq, .at_ms = now_ms};
    memcpy(r.tenant, tenant, strlen(tenant) + 1);     /* a valid id: bounded */
    memcpy(r.run_id, nm->run_id, sizeof r.run_id);
    if (!px_journal_add(p, &r) ||
        !px_grow((void **)&p->cur->dones, &p->cur->cap_dones, p->cur->ndones + 1,
                 sizeof(uint64_t))) {
        px_ack(p, PX_CONS_DONE, done_seq, 1);   /* reconciled; only its record is lost */
        return;
    }
    p->cur->dones[p->cur->ndones++] = done_seq;
}

/* Refuse completion m (done seq done_seq; counted by the caller) for the
 * reason err: a copy to <rejected>._invalid, acked once stored. Past
 * PX_DONE_COPIES_PER_SEC copies in a second the rest are acked at once
 * without one, so that a flood of bogus completions costs the rejected
 * stream and the loop no more than that. */
static void px_refuse_done(fq_proxy *p, const fq_nio_msg *m, const char *err, uint64_t done_seq)
{
    uint64_t sec = fq_nio_mono_ms() / 1000;
    if (sec != p->done_copy_sec) {
        p->done_copy_sec = sec;
        p->done_copies = 0;
    }
    if (p->done_copies >= PX_DONE_COPIES_PER_SEC) {
        p->c.completion_copies_skipped++;
        px_ack(p, PX_CONS_DONE, done_seq, 1);
        return;
    }
    p->done_copies++;
    char why[400];
    snprintf(why, sizeof why, "invalid completion: %s", err);
    px_refuse(p, m, NULL, FQ_EINVAL, why, TK_MAKE(TK_DONE_REJECT, done_seq));
}

/*
 * Whether completion ev of a queued run is left for later rather than
 * refused now: naked to come back in PX_DONE_DEFER_MS, held nowhere but in
 * the done stream (its MaxAckPending bounds how many wait). A completion
 * comes before its run is in flight here when a leader before us
 * dispatched the run but never settled it (its journal batch refused or
 * lost): the run is queued again, its dispatch stored already, so the one
 * we send is de-duplicated and no worker completes it again. Such a
 * completion waits until the run is in flight, up to its
 * PX_DONE_DEFER_MAX-th delivery; then it is refused as before.
 */
static bool px_done_defer(fq_proxy *p, const fq_nio_event *ev)
{
    if (ev->ack.delivered >= PX_DONE_DEFER_MAX)
        return false;
    p->c.completions_deferred++;
    /* A nak changes shared state like an ack: only while fresh. Not sent,
     * the completion comes back after the consumer's AckWait instead. */
    if (px_fresh(p))
        fq_nio_nak(p->nio, PX_CONS_DONE, &ev->ack, PX_DONE_DEFER_MS);
    return true;
}

/*
 * A completion counts only for a run fairq dispatched and still remembers,
 * on that run's tenant's subject: in flight, or expired within
 * px_keep_done_ms (across restarts through the journal, at most
 * PX_EXPIRED_MAX of them). It corrects the charge fairq made, never one a
 * worker states. Anything else (a run never dispatched, another tenant's,
 * one forgotten) changes no deficit, creates no tenant and records no run
 * id: counted as unknown and dropped, so that whoever may publish
 * completions cannot lift its own deficit, sink a neighbour's, make run
 * ids look used, or grow fairq's memory and journal.
 */
static void px_on_done(fq_proxy *p, fq_nio_event *ev)
{
    fq_nio_msg *m = ev->msg;
    uint64_t dseq = ev->ack.sseq;
    size_t tlen = 0;
    const char *tid = px_subject_tenant(fq_nio_msg_subject(m), p->cfg.subjects.done, &tlen);
    char err[320];
    fq_completion c;
    fq_status s = FQ_EINVAL;
    if (!tid || !fq_tenant_id_valid(tid, tlen))
        snprintf(err, sizeof err, "the completion's subject has no valid tenant as its last token");
    else
        s = fq_completion_parse(&c, fq_nio_msg_data(m), fq_nio_msg_len(m),
                                p->cfg.scheduler.max_est_tokens, err, sizeof err);
    char tenant[FQ_TENANT_MAX + 1] = "";
    uint64_t h = 0;
    px_run *x = NULL;
    if (s == FQ_OK) {
        memcpy(tenant, tid, tlen);     /* tid points into m */
        tenant[tlen] = '\0';
        h = px_key_hash(p, tenant, c.run_id);
        x = px_find_key(p, tenant, c.run_id, h);
    }
    if (x && x->state == PX_QUEUED && px_done_defer(p, ev)) {
        fq_nio_msg_drop(p->nio, m);
        return;
    }
    if (x && x->state == PX_QUEUED) {
        /* A worker's bug: a run not dispatched has not run. It stays
         * queued and is dispatched as if nothing came. */
        s = FQ_EINVAL;
        snprintf(err, sizeof err, "run_id %s is queued, not dispatched yet", c.run_id);
    }
    if (s != FQ_OK) {
        p->c.completions_invalid++;
        px_refuse_done(p, m, err, dseq);
        fq_nio_msg_drop(p->nio, m);
        return;
    }
    if (!x && px_done_find(&p->done, h)) {
        p->c.completions_duplicate++;
        fq_nio_msg_drop(p->nio, m);
        px_ack(p, PX_CONS_DONE, dseq, 1);
        return;
    }
    if (!x) {
        p->c.completions_unknown++;
        snprintf(err, sizeof err, "run_id %s is no run of tenant %s that fairq dispatched "
                 "and remembers (in flight, or expired within %" PRIu64 " ms)", c.run_id,
                 tenant, px_keep_done_ms(p));
        px_refuse_done(p, m, err, dseq);
        fq_nio_msg_drop(p->nio, m);
        return;
    }
    fq_nio_msg_drop(p->nio, m);
    if (x->state == PX_FLIGHT) {
        fq_sched_complete(NULL, p->sched, x->seq, c.actual_tokens);
        p->c.completions++;
    } else {
        /* Late: its lease ran out and its slot is free already. */
        fq_tenant_reconcile(p->sched, x->pt->t, x->est, c.actual_tokens);
        p->c.completions_unheld++;
    }
    px_debt_touch(p, x->pt);
    if (c.status == FQ_DONE_OK)
        fq_est_observe(p->est, tenant, x->names->workflow, x->names->declared, x->est,
                       c.actual_tokens);
    x->pt->completed++;
    p->sec_completed++;
    p->sec_actual += c.actual_tokens;
    x->state = PX_DONE;
    px_mark_done(p, tenant, x->names, h, x->seq, dseq);
    px_key_del(p, x);
    px_maybe_free(p, x);
}

/* ---- leases that ran out -------------------------------------------------- */

static void px_forget_expired(fq_proxy *p)
{
    px_run *x = p->exp_head;
    p->exp_head = x->exp_next;
    if (!p->exp_head)
        p->exp_tail = NULL;
    p->nexp--;
    x->in_exp = false;
    if (x->state == PX_EXPIRED)
        px_key_del(p, x);
    px_maybe_free(p, x);
}

/* Remember expired run x, its forget_ms set, for a late completion. */
static void px_exp_link(fq_proxy *p, px_run *x)
{
    x->state = PX_EXPIRED;
    if (x->in_exp)
        return;     /* expired before, requeued and sent again: listed once */
    x->in_exp = true;
    x->exp_next = NULL;
    if (p->exp_tail)
        p->exp_tail->exp_next = x;
    else
        p->exp_head = x;
    p->exp_tail = x;
    p->nexp++;
}

/* Run x's lease ran out at at_ms (unix): its slot is free, and a late
 * completion may still reconcile it until px_keep_done_ms later, also
 * after a restart (its expired record). */
static void px_expired(fq_proxy *p, px_run *x, int64_t at_ms)
{
    p->c.expired++;
    if (px_warn_ok(p, x->pt->id))
        fq_log(FQ_LOG_WARN, "run timed out: its window slot is freed",
               FQ_STR("tenant", x->pt->id), FQ_STR("run_id", x->names->run_id),
               FQ_UINT("run_timeout_ms", p->cfg.window.run_timeout_ms));
    x->names->forget_ms = px_done_until(p, at_ms);
    px_journal_run(p, x, FQ_JREC_EXPIRED, at_ms);
    px_exp_link(p, x);
}

static void px_on_expired(void *arg, const fq_run *r, enum fq_expiry what)
{
    fq_proxy *p = arg;
    if (what != FQ_EXPIRY_LEASE)
        return;     /* max_expired is 0: the proxy keeps its own expired runs */
    px_expired(p, r->handle, fq_nio_unix_ms());
}

/* Expire the runs whose lease ran out, and forget the expired runs past
 * their time, or the oldest past PX_EXPIRED_MAX: a late completion for
 * one forgotten is unknown, as for any run fairq does not remember. */
static void px_expire(fq_proxy *p)
{
    fq_sched_expire(p->sched, fq_nio_mono_ms(), px_on_expired, p);
    if (!p->exp_head)
        return;
    int64_t now_ms = fq_nio_unix_ms();
    size_t early = 0;
    while (p->exp_head && p->exp_head->names->forget_ms <= now_ms)
        px_forget_expired(p);
    for (; p->nexp > PX_EXPIRED_MAX; early++)
        px_forget_expired(p);
    p->c.expired_forgotten_early += early;
    if (early && px_warn_ok(p, "expired_max"))
        fq_log(FQ_LOG_WARN, "too many expired runs to remember: the oldest are forgotten "
               "early, and a late completion for them changes nothing",
               FQ_UINT("forgotten", early), FQ_UINT("remembered", PX_EXPIRED_MAX));
}

/* ---- the proxy as a whole -------------------------------------------- */

/* The proxy as a whole now, for the stats reply and the metrics snapshot. */
static void px_overall(fq_metrics_overall *a, fq_proxy *p)
{
    fq_sched_stats ss;
    fq_sched_stats_get(p->sched, &ss);
    fq_nio_sub_stats ns;
    fq_nio_sub_stats_get(&ns, p->nio, PX_SUB_ADMIN);
    const fq_admin_counters *ac = fq_admin_counters_get(p->admin);
    *a = (fq_metrics_overall){
        .in_flight_runs = ss.in_flight, .in_flight_tokens = ss.in_flight_tokens,
        .queued_runs = ss.queued, .queued_tokens = ss.queued_tokens, .tenants = ss.tenants,
        .active_tenants = ss.active, .window_runs = p->cfg.window.max_in_flight,
        .window_tokens = p->cfg.window.max_in_flight_tokens,
        .expired_leases = p->c.expired, .buffered_runs = p->held,
        .buffered_bytes = p->buffered_bytes, .fetch_paused = p->fetch_paused,
        .fetch_pauses = p->c.fetch_pauses, .nats_connected = p->connected,
        .nats_reconnects = p->c.reconnects, .invalid_subject_runs = p->c.invalid_subject,
        .config_reloads = p->c.reloads, .config_reload_failures = p->c.reload_failures,
        .lease_held = p->leader, .dispatch_rate = p->rate_runs,
        .dispatch_token_rate = p->rate_tokens, .completion_rate = p->rate_completed,
        .actual_token_rate = p->rate_actual, .submitted_runs = p->c.submitted,
        .redelivered_runs = p->c.redelivered, .duplicates_acked = p->c.duplicates_acked,
        .dispatched_runs = p->c.dispatched,
        .dispatch_duplicates = p->c.dispatch_duplicates, .adopted_runs = p->c.adopted,
        .journal_refused_records = p->c.journal_refused,
        .debts_forgiven = p->c.debts_forgiven,
        .expired_forgotten_early = p->c.expired_forgotten_early,
        .completion_copies_skipped = p->c.completion_copies_skipped,
        .completions_deferred = p->c.completions_deferred,
        .index_only_runs = p->index_only, .body_reads = p->c.body_reads,
        .body_lost = p->c.body_lost,
        .completions = {[FQ_COMPLETION_HELD] = p->c.completions,
                        [FQ_COMPLETION_UNHELD] = p->c.completions_unheld,
                        [FQ_COMPLETION_DUPLICATE] = p->c.completions_duplicate,
                        [FQ_COMPLETION_INVALID] = p->c.completions_invalid,
                        [FQ_COMPLETION_UNKNOWN] = p->c.completions_unknown},
        .publish_failures = p->c.pub_failures, .refusals_unstored = p->c.refusals_unstored,
        .overrides_refused = p->c.overrides_refused,
        .dispatch_failures = p->c.dispatch_failures, .parked_tenants = ss.parked,
        .dispatch_stalled = fq_probes_stalled(p->probes, FQ_STALL_DISPATCH),
        .admin_reply_failures = ac->reply_failures,
        .admin_requests_busy = ac->busy + ns.busy,
        .admin_requests_no_reply = ns.no_reply,
        .admin_requests_too_long = ac->too_long,
        .max_payload = p->max_payload > 0 ? (uint64_t)p->max_payload : 0};
    memcpy(a->rejected_runs, p->c.rejected, sizeof a->rejected_runs);
}

/* ---- configuration and reload ------------------------------------------- */

static fq_sched_opts px_sched_opts(const fq_config *c)
{
    return (fq_sched_opts){.quantum = c->scheduler.quantum_tokens,
                           .max_est_tokens = c->scheduler.max_est_tokens,
                           .max_in_flight = c->window.max_in_flight,
                           .max_in_flight_tokens = c->window.max_in_flight_tokens,
                           .run_timeout = c->window.run_timeout_ms,
                           .max_expired = 0};
}

/* Put nc in force, keeping the settings only a restart applies as they are,
 * strings included: the NATS adapter holds on to the stream and durable
 * names its consumers were started with. Takes nc's memory. */
static void px_config_replace(fq_proxy *p, fq_config *nc)
{
    fq_config old = p->cfg;
    p->cfg = *nc;
    fq_config_keep_restart(&p->cfg, &old);
    fq_config_keep_restart(&old, nc);      /* what p->cfg no longer uses */
    fq_config_free(&old);
    memset(nc, 0, sizeof *nc);
}

/* Give the policy np the overrides in force. An override naming a plan np
 * lacks refuses the reload: it would silently change that tenant. */
/* Everything that can fail is done before anything changes. */
static fq_status px_reload_try(fq_proxy *p, char *restart, size_t rcap, char *err, size_t errlen)
{
    restart[0] = err[0] = '\0';
    if (!p->ops.load) {
        snprintf(err, errlen, "this proxy was given no config file to read again");
        return FQ_EINVAL;
    }
    fq_config nc;
    memset(&nc, 0, sizeof nc);
    fq_status s = p->ops.load(&nc, p->ops.load_arg, err, errlen);
    fq_policy *np = NULL;
    fq_log_level lv = FQ_LOG_INFO;
    fq_log_format lf = FQ_LOG_LOGFMT;
    fq_config merged = nc;
    fq_config_keep_restart(&merged, &p->cfg);
    fq_sched_opts so = px_sched_opts(&merged);
    if (s == FQ_OK && (s = fq_config_policy(&np, &nc)) != FQ_OK)
        snprintf(err, errlen, "cannot build the policy: %s", fq_status_text(s));
    if (s == FQ_OK)
        s = fq_ovr_carry(p->ovr, np, p->cfg.streams.tenants_bucket, err, errlen);
    if (s == FQ_OK && (fq_log_level_parse(&lv, nc.log.level) != FQ_OK ||
                       fq_log_format_parse(&lf, nc.log.format) != FQ_OK)) {
        s = FQ_EINVAL;
        snprintf(err, errlen, "log: unknown level or format");
    }
    if (s == FQ_OK)
        s = fq_sched_set_opts(p->sched, &so);
    if (s != FQ_OK) {
        if (!err[0])
            snprintf(err, errlen, "%s", fq_status_text(s));
        fq_policy_destroy(np);
        fq_config_free(&nc);
        return s;
    }
    fq_config_diff_restart(&p->cfg, &nc, restart, rcap);
    for (size_t i = 0; i < nc.estimates.n_workflows; i++)
        fq_est_set_workflow(p->est, nc.estimates.workflows[i].name,
                            nc.estimates.workflows[i].tokens);
    fq_policy_destroy(p->policy);
    p->policy = np;
    px_config_replace(p, &nc);
    for (px_tenant *t = px_tenant_next(p, NULL); t; t = px_tenant_next(p, t))
        px_tenant_apply(p, t);
    fq_log_set(lv, lf);
    px_pause_check(p);
    return FQ_OK;
}

/* Read the config again and put it in force: new weights and quanta from
 * each tenant's next visit, new plans and tenants at once, lower limits
 * without dropping what is queued. FQ_OK with the settings that only a
 * restart applies (kept as they were) in restart, comma-separated;
 * otherwise nothing changed and err says why. Logged and counted. */
static fq_status px_reload(fq_proxy *p, const char *trigger, char *restart, size_t rcap,
                           char *err, size_t errlen)
{
    fq_status s = px_reload_try(p, restart, rcap, err, errlen);
    if (s != FQ_OK) {
        p->c.reload_failures++;
        fq_log(FQ_LOG_ERROR, "config reload refused; the config in force stays",
               FQ_STR("trigger", trigger), FQ_STR("reason", err));
    } else if (restart[0]) {
        p->c.reloads++;
        fq_log(FQ_LOG_WARN, "config reloaded; some changed settings take effect only after a "
               "restart", FQ_STR("trigger", trigger), FQ_STR("restart_needed", restart));
    } else {
        p->c.reloads++;
        fq_log(FQ_LOG_INFO, "config reloaded", FQ_STR("trigger", trigger));
    }
    return s;
}

/* ---- admin requests: lib/admin.c, through these ------------------------- */

static const void *px_admin_tenant_next(void *arg, const void *t)
{
    return px_tenant_next(arg, t);
}

static const void *px_admin_tenant_find(void *arg, const char *id)
{
    return px_tenant_find(arg, id, strlen(id));
}

static void px_admin_tenant_view(void *arg, const void *t, bool full, fq_admin_tenant *out)
{
    fq_proxy *p = arg;
    const px_tenant *pt = t;
    fq_tenant_info_get(pt->t, &out->info);
    out->id = pt->id;
    if (!full)
        return;
    out->plan = pt->plan;
    out->source = pt->source;
    out->rejected = pt->rejected;
    out->completed = pt->completed;
    out->estimate_error = fq_est_error(p->est, pt->id);
}

static void px_admin_overall(void *arg, fq_metrics_overall *out)
{
    px_overall(out, arg);
}

static const fq_policy *px_admin_policy(void *arg)
{
    return ((fq_proxy *)arg)->policy;
}

static bool px_admin_fresh(void *arg)
{
    return px_fresh(arg);
}

static fq_status px_admin_reply(void *arg, const void *req, const char *data, size_t len)
{
    return fq_nio_reply(((fq_proxy *)arg)->nio, req, data, len);
}

static fq_status px_admin_reload(void *arg, char *restart, size_t rcap, char *err, size_t errlen)
{
    return px_reload(arg, "admin request", restart, rcap, err, errlen);
}

/* Write w into the overrides bucket, compare-and-set against the revision
 * it expects (a delete when it sets nothing), then put it in force here:
 * the tenant follows from its next visit. */
static fq_status px_ovr_write(void *arg, const fq_ovr_write *w, char *err, size_t errlen)
{
    fq_proxy *p = arg;
    const char *bucket = p->cfg.streams.tenants_bucket;
    uint64_t rev = 0;
    fq_status s = w->del ? fq_nio_kv_delete(&rev, p->nio, bucket, w->e.id, w->expect)
                  : !w->expect ? fq_nio_kv_create(&rev, p->nio, bucket, w->e.id, w->value, w->len)
                  : fq_nio_kv_update(&rev, p->nio, bucket, w->e.id, w->value, w->len, w->expect);
    if (s == FQ_EEXIST)
        snprintf(err, errlen, "the tenant's override changed in the bucket meanwhile: "
                 "read it again (tenant.get) and retry");
    else if (s != FQ_OK)
        snprintf(err, errlen, "cannot write to the overrides bucket %s: %s", bucket,
                 fq_status_text(s));
    if (s != FQ_OK || (s = fq_ovr_stored(p->ovr, p->policy, w, rev, err, errlen)) != FQ_OK)
        return s;
    px_tenant *t = px_tenant_find(p, w->e.id, strlen(w->e.id));
    if (t)
        px_tenant_apply(p, t);
    px_ovr_log(&w->e, rev, "admin request");
    return FQ_OK;
}

/* Requests on <admin>.>. Only the leader subscribes. */
static void px_on_request(fq_proxy *p, fq_nio_event *ev)
{
    fq_admin_request(p->admin, fq_nio_msg_subject(ev->msg), fq_nio_msg_data(ev->msg),
                     fq_nio_msg_len(ev->msg), ev->msg, fq_nio_mono_ms());
    fq_nio_msg_drop(p->nio, ev->msg);
}

/* ---- metrics and probes ------------------------------------------------- */

/* Copy a tenant into the snapshot being filled: a row of its own while the
 * snapshot has fewer than max_tenant_series, else folded at once into its
 * plan's _other row, so that the snapshot does not grow with the tenants
 * (and what a folded row does not show is not looked up). */
static void px_metrics_tenant(fq_proxy *p, const px_tenant *t, const fq_tenant_info *ti,
                              uint64_t now)
{
    fq_metrics_snapshot *sn = fq_probes_filling(p->probes);
    fq_metrics_tenant folded, *m = &folded;
    if (sn->n_tenants < sn->max_tenant_series) {
        if (!(m = fq_metrics_snapshot_add(sn)))
            return;
    } else {
        memset(m, 0, sizeof *m);
    }
    fq_metrics_tenant_set_info(m, ti, now, 1e-3);
    fq_str_copy(m->plan, sizeof m->plan, t->plan);
    m->source = t->source;
    memcpy(m->rejected, t->rejected, sizeof m->rejected);
    m->submit_to_dispatch = t->wait;
    if (m == &folded)
        fq_metrics_snapshot_fold(sn, m);
    else
        m->estimate_error = fq_est_error(p->est, t->id);
}

/* At a pass's end: the proxy as a whole into the filled snapshot, which
 * then becomes the waiting one. */
static void px_metrics_publish(fq_proxy *p)
{
    px_overall(&fq_probes_filling(p->probes)->all, p);
    fq_probes_publish(p->probes);
}

static void px_phase(fq_proxy *p, enum fq_phase ph)
{
    fq_probes_phase(p->probes, ph);
}

/* The leader is ready while connected with both consumers in place. */
static void px_phase_leader(fq_proxy *p)
{
    px_phase(p, !p->connected ? FQ_PHASE_DISCONNECTED
                : p->consumer_ok[PX_CONS_SUBMIT] && p->consumer_ok[PX_CONS_DONE] ? FQ_PHASE_SERVING
                : FQ_PHASE_CONSUMERS);
}

/* Warn about a tenant whose oldest queued run has waited longer than the
 * threshold: once a minute per tenant at most, with the number of checks
 * held back since. The time is kept on the tenant, so the limit holds
 * whatever the number of tenants; and a sweep's pass writes at most
 * FQ_QUEUE_AGE_WARN_LINES tenant lines plus one that counts the rest
 * (px_warn_old_queues_end), which keep their turn for a later pass, so
 * that 200,000 old queues still make a few lines a second. */
static void px_warn_old_queue(fq_proxy *p, px_tenant *t, const fq_tenant_info *ti,
                              uint64_t now)
{
    uint64_t limit = p->cfg.log.queue_age_warn_ms;
    if (!fq_log_enabled(FQ_LOG_WARN) || !ti->queued || now < ti->oldest_enqueued + limit)
        return;
    if (now < t->age_warn_next) {
        t->age_suppressed++;
        return;
    }
    if (p->sweep_warned == FQ_QUEUE_AGE_WARN_LINES) {
        p->sweep_unwarned++;
        return;
    }
    p->sweep_warned++;
    fq_log(FQ_LOG_WARN, "tenant queue is old", FQ_STR("tenant", t->id),
           FQ_STR("plan", t->plan), FQ_UINT("age_ms", now - ti->oldest_enqueued),
           FQ_UINT("queued_runs", ti->queued), FQ_UINT("threshold_ms", limit),
           FQ_UINT("suppressed", t->age_suppressed));
    t->age_warn_next = now + FQ_QUEUE_AGE_WARN_EVERY_MS;
    t->age_suppressed = 0;
}

static void px_warn_old_queues_end(fq_proxy *p)
{
    if (p->sweep_unwarned)
        fq_log(FQ_LOG_WARN, "more tenant queues are old; each is logged in a later second",
               FQ_UINT("tenants", p->sweep_unwarned),
               FQ_UINT("threshold_ms", p->cfg.log.queue_age_warn_ms));
}

/* Forget t, the sweep's current tenant, if no layer of the policy lists it
 * and it holds nothing: a tenant with one run would otherwise cost its
 * record (about 2 KB) for good. One goes once every pass for
 * px_keep_done_ms, the longest fairq remembers anything of a run, found it
 * idle, with no run held and a deficit of zero (a debt is forgiven first,
 * by px_debt_sweep, and its record written), and no dispatch of it came
 * between; if it comes back it starts anew, as any new tenant does, its
 * counters from zero. True: t is freed. */
static bool px_forget_idle(fq_proxy *p, px_tenant *t, const fq_tenant_info *ti, uint64_t now)
{
    if (t->source != FQ_SRC_DEFAULT || t->unlisted || t->keyed || ti->queued ||
        ti->in_flight || ti->deficit || t->debt_listed || t->debt_dirty ||
        ti->dispatched != t->idle_dispatched) {
        t->idle_since = 0;
        t->idle_dispatched = ti->dispatched;
    } else if (!t->idle_since) {
        t->idle_since = now;
    } else if (now - t->idle_since >= px_keep_done_ms(p) &&
               fq_sched_tenant_remove(p->sched, t->t) == FQ_OK) {
        fq_sweep_drop(&p->sweep);
        fq_strmap_remove(p->tenants, &t->node);
        free(t);
        return true;
    }
    return false;
}

/* Per-second rates, smoothed. The token rate, which admission control
 * divides by, is sampled only while there is work to drain, so an idle
 * spell does not make it look like the workers stopped. */
static void px_rates(fq_proxy *p, uint64_t now)
{
    if (now < p->next_second)
        return;
    double a = PX_RATE_ALPHA;
    p->rate_runs = a * (double)p->sec_dispatched + (1 - a) * p->rate_runs;
    p->rate_completed = a * (double)p->sec_completed + (1 - a) * p->rate_completed;
    p->rate_actual = a * (double)p->sec_actual + (1 - a) * p->rate_actual;
    fq_sched_stats ss;
    fq_sched_stats_get(p->sched, &ss);
    if (p->sec_tokens || ss.queued)
        p->rate_tokens = p->rate_tokens > 0 ? a * (double)p->sec_tokens + (1 - a) * p->rate_tokens
                                            : (double)p->sec_tokens;
    p->sec_dispatched = p->sec_tokens = p->sec_completed = p->sec_actual = 0;
    p->next_second = now + 1000;
}

/* A slice of the sweep over every tenant, a pass of which begins each
 * PX_SWEEP_MS: old-queue warnings, forgetting the idle, the metrics
 * snapshot. A turn visits PX_SWEEP_SLICE tenants at most and the loop
 * does not sleep while a pass is under way, so 200,000 tenants are a few
 * hundred short turns, each of which handles its events first, rather
 * than one walk that every submit waits behind. */
static void px_sweep(fq_proxy *p, uint64_t now)
{
    if (fq_sweep_begin(&p->sweep, now)) {
        p->sweep_warned = 0;
        p->sweep_unwarned = 0;
        if (p->http)
            fq_metrics_snapshot_clear(fq_probes_filling(p->probes));
    }
    if (!fq_sweep_running(&p->sweep))
        return;
    for (size_t i = 0; i < PX_SWEEP_SLICE; i++) {
        fq_sweep_node *n = fq_sweep_next(&p->sweep);
        if (!n) {
            px_warn_old_queues_end(p);
            if (p->http)
                px_metrics_publish(p);
            return;
        }
        px_tenant *t = FQ_SWEEP_ENTRY(n, px_tenant, later);
        fq_tenant_info ti;
        fq_tenant_info_get(t->t, &ti);
        px_warn_old_queue(p, t, &ti, now);
        if (!px_forget_idle(p, t, &ti, now) && p->http)
            px_metrics_tenant(p, t, &ti, now);
    }
}

/* ---- the leader lease ----------------------------------------------------- */

static void px_lease_fence(fq_proxy *p);

/* We lead from term: the consumers carry it in their names. A new term
 * while serving means the key aged out and we took it back: the consumers
 * are made again under the new name, which deletes the old term's. */
static void px_lease_lead(fq_proxy *p, uint64_t term)
{
    p->term = term;
    if (!p->consuming)
        return;
    fq_nio_consume_term(p->nio, PX_CONS_SUBMIT, term);
    fq_nio_consume_term(p->nio, PX_CONS_DONE, term);
    fq_log(FQ_LOG_WARN, "leader lease taken again in a new term after it aged out",
           FQ_UINT("term", term));
}

/* Do what the lease asks (lib/lease.c decides). Reads, and the writes that
 * follow them, wait for the server; a renewal (async) does not, and its
 * PubAck settles it in px_on_lease. */
static void px_lease_act(fq_proxy *p, fq_lease_step *s, bool async)
{
    const char *bucket = p->cfg.streams.lease_bucket, *key = p->lease.key;
    for (;;) {
        if (s->lead)
            px_lease_lead(p, s->term);
        if (s->lost)
            fq_log(FQ_LOG_ERROR, "lost the leader lease to another proxy; stopping",
                   FQ_STR("holder", p->lease.holder), FQ_UINT("term", p->term));
        uint64_t rev = 0;
        fq_status st = FQ_EIO;
        if (s->op == FQ_LEASE_OP_NONE)
            break;
        if (s->op == FQ_LEASE_OP_GET) {
            char v[FQ_LEASE_ID_MAX + 1] = "";
            st = fq_nio_kv_get(v, sizeof v, &rev, p->nio, bucket, key);
            fq_lease_on_get(s, &p->lease, fq_nio_mono_ms(), st, v, rev);
            async = false;
            continue;
        }
        if (s->op == FQ_LEASE_OP_CREATE) {
            st = fq_nio_kv_create(&rev, p->nio, bucket, key, s->value, strlen(s->value));
        } else if (!async) {
            st = fq_nio_kv_update(&rev, p->nio, bucket, key, s->value, strlen(s->value),
                                  s->expect);
        } else if (fq_nio_kv_update_async(p->nio, bucket, key, s->value, strlen(s->value),
                                          s->expect, TK_MAKE(TK_LEASE, 0)) == FQ_OK) {
            p->pubs++;
            break;
        }
        fq_lease_on_write(s, &p->lease, fq_nio_mono_ms(), st, rev);
    }
    px_lease_fence(p);
}

/* natsio leaves the consumers alone from the end of freshness on; the
 * probes read it too. */
static void px_lease_fence(fq_proxy *p)
{
    uint64_t until = p->fenced ? 0 : fq_lease_fresh_until(&p->lease);
    fq_nio_fence(p->nio, until);
    fq_probes_lease(p->probes, until,
                    p->lease.state == FQ_LEASE_LEADING ? p->lease.confirmed_sent : 0,
                    p->lease.state == FQ_LEASE_STANDBY ? p->lease.holder : NULL);
}

/* Renew the lease when due, without waiting. Returns false once it is
 * lost. Logs once when it stops being fresh, and when it is again. */
static bool px_lease_renew(fq_proxy *p, uint64_t now)
{
    if (p->connected) {
        fq_lease_step s;
        fq_lease_tick(&s, &p->lease, now);
        px_lease_act(p, &s, true);
    }
    bool fresh = fq_lease_fresh(&p->lease, fq_nio_mono_ms());
    if (fresh == p->stale && p->lease.state == FQ_LEASE_LEADING) {
        p->stale = !fresh;
        fq_log(fresh ? FQ_LOG_INFO : FQ_LOG_WARN,
               fresh ? "leader lease renewed; serving again"
                     : "cannot renew the leader lease; changing nothing until it is",
               FQ_UINT("lease_age_ms", fq_lease_age(&p->lease, now)));
    }
    return p->lease.state != FQ_LEASE_LOST;
}

static void px_on_lease(fq_proxy *p, const fq_nio_event *ev)
{
    if (TK_VAL(ev->token) == PX_LEASE_RELEASE)
        p->releasing = false;   /* failed or not: the lease ages out anyway */
    fq_nio_msg_drop(p->nio, ev->msg);
    fq_status st = ev->status == FQ_OK ? FQ_OK
                   : ev->err_code == FQ_NIO_ERR_WRONG_LAST ? FQ_EEXIST : FQ_EIO;
    fq_lease_step s;
    fq_lease_on_write(&s, &p->lease, fq_nio_mono_ms(), st, ev->seq);
    px_lease_act(p, &s, false);
}

static size_t px_drain(fq_proxy *p, int timeout_ms);

/* Hand the lease back at a stop, so that a standby takes over at once,
 * waiting for the PubAck until `until` at most: unanswered, the lease ages
 * out within FQ_LEASE_TTL_MS all the same. */
static void px_lease_release(fq_proxy *p, uint64_t until)
{
    fq_lease_step s;
    fq_lease_release(&s, &p->lease, fq_nio_mono_ms());
    px_lease_fence(p);
    if (s.op != FQ_LEASE_OP_UPDATE ||
        fq_nio_kv_update_async(p->nio, p->cfg.streams.lease_bucket, p->lease.key, s.value,
                               strlen(s.value), s.expect,
                               TK_MAKE(TK_LEASE, PX_LEASE_RELEASE)) != FQ_OK)
        return;
    p->pubs++;
    p->releasing = true;
    while (p->releasing && fq_nio_mono_ms() < until)
        px_drain(p, 10);
}

/* A permission NATS refused: what fairq does then only times out, so the
 * refusal is said with its subject. Before the proxy has served, it is a
 * deployment error and start fails (px_denied_at_start); after, a warning. */
static void px_on_denied(fq_proxy *p)
{
    char last[256];
    uint64_t k = fq_nio_denied(p->nio, last, sizeof last);
    if (!p->served)
        p->denied_fatal = true;
    else if (px_warn_ok(p, "denied"))
        fq_log(FQ_LOG_ERROR, "NATS refused fairq a publish or subscription; its user lacks a "
               "permission (docs/security.md)", FQ_STR("reason", last), FQ_UINT("violations", k));
}

/* At start, any permission NATS refused: logged with its subject; true
 * when start must fail. */
static bool px_denied_at_start(fq_proxy *p)
{
    char last[256];
    uint64_t k = p->nio ? fq_nio_denied(p->nio, last, sizeof last) : 0;
    if (!k)
        return false;
    p->denied_fatal = true;
    fq_log(FQ_LOG_ERROR, "NATS refuses fairq a permission it needs: grant it to fairq's user "
           "(docs/security.md)", FQ_STR("reason", last), FQ_UINT("violations", k));
    return true;
}

/* ---- start-up --------------------------------------------------------- */

static bool px_sleep_unless_stopped(fq_proxy *p, int ms)
{
    struct timespec step = {0, 50 * 1000000L};
    for (int i = 0; i < ms / 50 && !atomic_load(&p->stop); i++) {
        fq_http_heartbeat(p->http);     /* waiting is not hanging */
        nanosleep(&step, NULL);
    }
    return !atomic_load(&p->stop);
}

static fq_status px_connect(fq_proxy *p)
{
    fq_nio_opts o = {.url = p->cfg.nats.url, .creds = p->cfg.nats.creds,
                     .tls_ca = p->cfg.nats.tls_ca, .tls_cert = p->cfg.nats.tls_cert,
                     .tls_key = p->cfg.nats.tls_key, .user = p->cfg.nats.user,
                     .password = p->cfg.nats.password, .nkey = p->cfg.nats.nkey,
                     .nkey_seed = p->cfg.nats.nkey_seed,
                     .inbox_prefix = p->cfg.nats.inbox_prefix, .name = "fairq-proxy"};
    char err[512];
    for (int attempt = 0;; attempt++) {
        if (fq_nio_create(&p->nio, &o, err, sizeof err) == FQ_OK)
            return FQ_OK;
        if (attempt == 0 || px_warn_ok(p, "connect"))
            fq_log(FQ_LOG_WARN, "cannot reach NATS; retrying", FQ_STR("reason", err));
        if (!px_sleep_unless_stopped(p, 1000))
            return FQ_EIO;
    }
}

static fq_status px_streams(fq_proxy *p)
{
    const fq_config *c = &p->cfg;
    uint32_t rep = c->streams.replicas;
    /* FAIR_DISPATCH keeps what it stored for its max age, taken or not:
     * see docs/protocol.md for why it is not a work queue. */
    /* A tenant is a subject of FAIR_SUBMIT and FAIR_REJECTED, so a
     * per-subject limit bounds what one tenant stores (docs/protocol.md,
     * section 6). FAIR_SUBMIT refuses what is past its limits, so the
     * producer's PubAck says so and no run is deleted unseen; FAIR_REJECTED
     * keeps each tenant's newest refusals, which only inform. */
    const fq_nio_stream streams[] = {
        {.name = c->streams.submit, .subject = p->submit_filter, .retention = FQ_NIO_WORKQUEUE,
         .replicas = rep, .allow_direct = true,
         .max_msgs_per_subject = (int64_t)c->streams.submit_max_msgs_per_tenant,
         .max_bytes = (int64_t)c->streams.submit_max_bytes, .discard_new = true},
        {.name = c->streams.dispatch, .subject = c->subjects.dispatch, .retention = FQ_NIO_LIMITS,
         .max_age_ms = c->streams.dispatch_max_age_ms,
         .duplicates_ms = c->streams.duplicate_window_ms, .replicas = rep},
        {.name = c->streams.done, .subject = p->done_filter, .retention = FQ_NIO_WORKQUEUE,
         .replicas = rep},
        {.name = c->streams.rejected, .subject = p->rejected_filter, .retention = FQ_NIO_LIMITS,
         .max_age_ms = c->streams.rejected_max_age_ms, .replicas = rep,
         .max_msgs_per_subject = (int64_t)c->streams.rejected_max_msgs_per_tenant,
         .max_bytes = (int64_t)c->streams.rejected_max_bytes},
        {.name = c->streams.runs, .subject = c->subjects.runs, .retention = FQ_NIO_LIMITS,
         .max_age_ms = px_keep_done_ms(p) + PX_JOURNAL_AGE_SLACK_MS, .replicas = rep},
    };
    char warn[1024];
    /* The server has answered the connection's subscriptions (its PubAck
     * inbox) by now: one it refused fails start here, not at a timeout. */
    fq_nio_flush(p->nio, 2000);
    if (px_denied_at_start(p))
        return FQ_EINVAL;
    for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
        fq_status s;
        while ((s = fq_nio_stream_ensure(p->nio, &streams[i], warn, sizeof warn)) == FQ_EIO) {
            if (px_denied_at_start(p))
                return FQ_EINVAL;
            fq_log(FQ_LOG_WARN, "stream not ready; retrying", FQ_STR("stream", streams[i].name),
                   FQ_STR("reason", warn));
            if (!px_sleep_unless_stopped(p, 1000))
                return FQ_EIO;
        }
        if (s != FQ_OK) {
            fq_log(FQ_LOG_ERROR, "stream cannot serve", FQ_STR("stream", streams[i].name),
                   FQ_STR("reason", warn));
            return s;
        }
        if (warn[0])
            fq_log(FQ_LOG_WARN, "stream differs from what fairq expects",
                   FQ_STR("stream", streams[i].name), FQ_STR("differences", warn));
    }
    if (fq_nio_stream_created(&p->submit_created_ms, p->nio, c->streams.submit) != FQ_OK)
        return FQ_EIO;
    if (fq_nio_kv_ensure(p->nio, c->streams.lease_bucket, FQ_LEASE_TTL_MS, 0, 0, rep, warn,
                         sizeof warn) != FQ_OK) {
        if (px_denied_at_start(p))
            return FQ_EINVAL;
        fq_log(FQ_LOG_ERROR, "cannot create the lease bucket",
               FQ_STR("bucket", c->streams.lease_bucket), FQ_STR("reason", warn));
        return FQ_EIO;
    }
    return FQ_OK;
}

/* The runs journal read back at start. */
typedef struct px_loaded {
    fq_proxy *p;
    px_run **adopt;             /* flight records, in order; some completed later */
    size_t n, cap;
    int64_t ts_ms;              /* the message being read was stored then (unix ms) */
    fq_jcounts counts;          /* records read and refused */
} px_loaded;

/* The run of a flight or expired record, not held yet: held in the key
 * index until a done record for it follows. NULL if completed already or
 * out of memory. */
static px_run *px_load_run(px_loaded *L, const fq_jrec *r, uint64_t h)
{
    fq_proxy *p = L->p;
    px_tenant *pt = NULL;
    if (px_done_find(&p->done, h) || px_tenant_get(&pt, p, r->tenant, strlen(r->tenant)) != FQ_OK ||
        !px_grow((void **)&L->adopt, &L->cap, L->n + 1, sizeof(px_run *)))
        return NULL;
    px_run *x = px_run_alloc(p);
    px_names *nm = x ? px_names_alloc(p) : NULL;
    if (!nm) {
        if (x)
            px_maybe_free(p, x);
        return NULL;
    }
    memcpy(nm->run_id, r->run_id, sizeof nm->run_id);
    memcpy(nm->workflow, r->workflow, sizeof nm->workflow);
    nm->declared = r->declared;
    *x = (px_run){.seq = r->seq ? r->seq : PX_SYNTH_ID + p->synth++, .pt = pt, .names = nm,
                  .key_hash = h, .submitted_ms = r->at_ms, .est = r->est, .state = PX_FLIGHT};
    px_key_add(p, x);
    L->adopt[L->n++] = x;
    return x;
}

/* A debt record: the tenant's deficit becomes the last one read (no
 * tenant holds a run while the journal is read). A debtor is listed due at
 * once: the stream's copy of its record ages out from its first writing. */
static void px_load_debt(px_loaded *L, const fq_jrec *r)
{
    fq_proxy *p = L->p;
    size_t len = strlen(r->tenant);
    px_tenant *pt = px_tenant_find(p, r->tenant, len);
    if ((!pt && (!r->deficit || px_tenant_get(&pt, p, r->tenant, len) != FQ_OK)) ||
        fq_tenant_set_debt(p->sched, pt->t, r->deficit) != FQ_OK)
        return;
    int64_t now_ms = fq_nio_unix_ms();
    pt->debt_written = r->deficit;
    pt->debt_at_ms = r->at_ms < now_ms ? r->at_ms : now_ms;   /* not in the future */
    if (r->deficit < 0)
        px_debt_link(p, pt, 0);
    else
        px_debt_unlink(p, pt);
}

static void px_load_rec(void *arg, const fq_jrec *r)
{
    px_loaded *L = arg;
    fq_proxy *p = L->p;
    uint64_t h = px_key_hash(p, r->tenant, r->run_id);
    px_run *x = r->type == FQ_JREC_DEBT ? NULL : px_find_key(p, r->tenant, r->run_id, h);
    switch (r->type) {
    case FQ_JREC_FLIGHT:
        if (!x)
            px_load_run(L, r, h);
        return;
    case FQ_JREC_EXPIRED:
        /* Its flight record may have aged out before this one. */
        if (!x)
            x = px_load_run(L, r, h);
        if (x) {
            x->state = PX_EXPIRED;
            x->names->forget_ms = px_done_until(p, r->at_ms);
        }
        return;
    case FQ_JREC_DONE:
        /* A done record without its submit sequence was written, before
         * fairq refused them, for a completion of a run it never held: it
         * makes no run id look used. */
        if (!x && !r->seq)
            return;
        px_done_add(&p->done, h, r->seq, px_done_until(p, L->ts_ms));
        if (x) {
            px_key_del(p, x);
            x->state = PX_DONE;
        }
        return;
    case FQ_JREC_DEBT:
        px_load_debt(L, r);
        return;
    }
}

static void px_load_cb(void *arg, const void *data, size_t len, int64_t ts_ms)
{
    px_loaded *L = arg;
    L->ts_ms = ts_ms;
    fq_journal_decode(data, len, px_load_rec, L, &L->counts);
    /* A long read back must not cost the lease: it is renewed as due,
     * waiting for each renewal (no event is handled meanwhile). */
    fq_lease_step s;
    fq_lease_tick(&s, &L->p->lease, fq_nio_mono_ms());
    px_lease_act(L->p, &s, false);
}

/* Put run x, dispatched age ms before now (both monotonic), back into the
 * window without sending it again or charging its tenant twice: its lease
 * runs from its dispatch. Only up to the window's limits and its tenant's
 * cap: the records are not trusted (anyone allowed to publish to the
 * journal's subject could forge them), so a run past them is taken as
 * expired at once, and a late completion still reconciles it once. */
static void px_adopt_one(fq_proxy *p, px_run *x, uint64_t now, uint64_t age)
{
    fq_status s = fq_sched_adopt(NULL, p->sched, x->pt->t, x->seq, x->est, x,
                                 now > age ? now - age : 0);
    if (s == FQ_OK) {
        p->c.adopted++;
        return;
    }
    if (s == FQ_EFULL) {
        p->c.adopt_overflow++;
        px_on_expired(p, &(fq_run){.handle = x}, FQ_EXPIRY_LEASE);
        return;
    }
    px_key_del(p, x);
    px_maybe_free(p, x);
}

static uint64_t px_debtors(const fq_proxy *p)
{
    uint64_t n = 0;
    for (const px_tenant *t = p->debt_head; t; t = t->debt_next)
        n++;
    return n;
}

/* Rebuild the in-flight window and the completed set from the runs journal,
 * so the window does not start from zero while workers are busy with runs
 * dispatched before the restart. */
static fq_status px_recover(fq_proxy *p)
{
    px_loaded L = {.p = p};
    fq_status s = fq_nio_stream_scan(p->nio, p->cfg.streams.runs, px_load_cb, &L);
    if (s != FQ_OK) {
        free(L.adopt);
        return s;
    }
    uint64_t now = fq_nio_mono_ms();
    int64_t now_ms = fq_nio_unix_ms();
    for (size_t i = 0; i < L.n; i++) {
        px_run *x = L.adopt[i];
        int64_t age = now_ms - x->submitted_ms;
        uint64_t timeout = p->cfg.window.run_timeout_ms;
        bool timed_out = age >= 0 && (uint64_t)age >= timeout;
        /* A run that expired while no proxy ran did so when its lease ran
         * out. */
        int64_t expired_at = x->submitted_ms + (int64_t)timeout;
        if (x->state == PX_FLIGHT && !timed_out) {
            px_adopt_one(p, x, now, age > 0 ? (uint64_t)age : 0);
        } else if (x->state == PX_FLIGHT && px_done_until(p, expired_at) > now_ms) {
            px_expired(p, x, expired_at);
        } else if (x->state == PX_EXPIRED && x->names->forget_ms > now_ms) {
            px_exp_link(p, x);          /* a late completion still counts */
        } else {
            px_key_del(p, x);           /* completed, or expired past remembering */
            px_maybe_free(p, x);
        }
    }
    free(L.adopt);
    p->c.journal_refused += L.counts.invalid + L.counts.unknown;
    fq_log(FQ_LOG_INFO, "recovered state from NATS", FQ_UINT("in_flight", p->c.adopted),
           FQ_UINT("completed_remembered", p->done.n), FQ_UINT("expired", p->nexp),
           FQ_UINT("past_the_window", p->c.adopt_overflow), FQ_UINT("debtors", px_debtors(p)));
    if (L.counts.invalid || L.counts.unknown)
        fq_log(FQ_LOG_WARN, "journal records refused", FQ_STR("stream", p->cfg.streams.runs),
               FQ_UINT("invalid", L.counts.invalid), FQ_UINT("unknown_type", L.counts.unknown),
               FQ_STR("first_reason", L.counts.why));
    return FQ_OK;
}

/* ---- the loop ---------------------------------------------------------- */

/* A delivery that comes while the lease is not fresh (a pull sent before
 * it ran out) is held aside, in order, and handled once it is fresh again:
 * handling it may refuse or ack. Lost instead, it goes with the process,
 * and the next leader's consumer delivers it again. */
static bool px_defer(fq_proxy *p, fq_nio_event *ev)
{
    if (!p->nheld_ev && px_fresh(p))
        return false;
    if (!px_grow((void **)&p->held_ev, &p->held_ev_cap, p->nheld_ev + 1, sizeof *p->held_ev)) {
        fq_nio_msg_drop(p->nio, ev->msg);   /* unacked: delivered again after AckWait */
        return true;
    }
    p->held_ev[p->nheld_ev++] = *ev;
    return true;
}

static void px_on_delivery(fq_proxy *p, fq_nio_event *ev)
{
    if (ev->source == PX_CONS_SUBMIT)
        px_on_submit(p, ev);
    else
        px_on_done(p, ev);
}

/* Handle the deliveries held aside, in order, while fresh. */
static void px_undefer(fq_proxy *p)
{
    size_t i = 0;
    while (i < p->nheld_ev && px_fresh(p))
        px_on_delivery(p, &p->held_ev[i++]);
    if (!i)
        return;
    memmove(p->held_ev, p->held_ev + i, (p->nheld_ev - i) * sizeof *p->held_ev);
    p->nheld_ev -= i;
}

static void px_on_event(fq_proxy *p, fq_nio_event *ev)
{
    switch (ev->type) {
    case FQ_NIO_EV_MSG:
        if (!px_defer(p, ev))
            px_on_delivery(p, ev);
        break;
    case FQ_NIO_EV_PUBACK:
        px_on_puback(p, ev);
        break;
    case FQ_NIO_EV_REQUEST:
        px_on_request(p, ev);
        break;
    case FQ_NIO_EV_CONN:
        p->connected = ev->connected;
        if (p->leader)
            px_phase_leader(p);
        if (ev->connected) {
            p->c.reconnects++;
            /* Admission sizes runs against the server's limit of now. */
            p->max_payload = fq_nio_max_payload(p->nio);
        }
        fq_log(ev->connected ? FQ_LOG_INFO : FQ_LOG_WARN,
               ev->connected ? "reconnected to NATS" : "disconnected from NATS",
               FQ_INT("max_payload", p->max_payload));
        break;
    case FQ_NIO_EV_CONSUMER:
        p->consumer_ok[ev->source == PX_CONS_DONE ? PX_CONS_DONE : PX_CONS_SUBMIT] =
            ev->status == FQ_OK;
        p->served |= p->consumer_ok[PX_CONS_SUBMIT] && p->consumer_ok[PX_CONS_DONE];
        if (p->leader)
            px_phase_leader(p);
        if (ev->status != FQ_OK && px_warn_ok(p, "consumer"))
            fq_log(FQ_LOG_WARN, ev->status == FQ_EEXIST
                       ? "cannot create a consumer: a later term's is on the stream (another "
                         "proxy leads, or the lease bucket was deleted: then delete that "
                         "consumer by hand); retrying"
                       : "cannot create a consumer; retrying",
                   FQ_STR("stream", ev->source == PX_CONS_SUBMIT ? p->cfg.streams.submit
                                                                  : p->cfg.streams.done),
                   FQ_UINT("term", p->term));
        break;
    case FQ_NIO_EV_KV:
        px_on_kv(p, ev->kv);
        break;
    case FQ_NIO_EV_KV_SYNCED:
        px_on_kv_synced(p, ev->seq);
        break;
    case FQ_NIO_EV_DENIED:
        px_on_denied(p);
        break;
    }
}

/* Handle the events that came; returns how many. */
static size_t px_drain(fq_proxy *p, int timeout_ms)
{
    size_t n = fq_nio_poll(p->nio, p->ev, PX_EVENTS, timeout_ms);
    for (size_t i = 0; i < n; i++)
        px_on_event(p, &p->ev[i]);
    return n;
}

static fq_status px_start_consumers(fq_proxy *p)
{
    /* MaxAckPending bounds what the server hands over beyond what we hold. */
    int64_t pend = (int64_t)p->cfg.limits.max_buffered_runs + PX_MAX_PUBS;
    /* Named <durable>-<term>: making them deletes every other term's, which
     * returns what a dead or fenced leader held to these at once, and makes
     * the server refuse that leader's pulls and acks. AckWait then matters
     * only within our own term: a submit is held unacked while it is
     * queued, so an AckWait shorter than a queue's wait only costs a
     * redelivery that is recognised by its sequence (an hour of backlog,
     * once an hour); what we drop without acking (out of memory) comes back
     * within it. No longer a day: a dead proxy's runs no longer wait for it. */
    fq_nio_consumer sc = {.stream = p->cfg.streams.submit, .durable = p->cfg.streams.durable,
                          .filter = p->submit_filter, .max_ack_pending = pend,
                          .ack_wait_ms = PX_SUBMIT_ACK_WAIT_MS, .batch = PX_FETCH_BATCH, .term = p->term};
    fq_nio_consumer dc = {.stream = p->cfg.streams.done, .durable = p->cfg.streams.durable,
                          .filter = p->done_filter, .max_ack_pending = PX_DONE_MAX_ACK_PENDING,
                          .ack_wait_ms = PX_DONE_ACK_WAIT_MS, .batch = PX_FETCH_BATCH,
                          .term = p->term};
    fq_status s = fq_nio_consume(p->nio, PX_CONS_SUBMIT, &sc);
    if (s == FQ_OK)
        s = fq_nio_consume(p->nio, PX_CONS_DONE, &dc);
    p->consuming = s == FQ_OK;
    if (s == FQ_OK)
        s = fq_nio_subscribe(p->nio, PX_SUB_ADMIN, p->admin_filter, FQ_ADMIN_QUEUED,
                             fq_admin_busy_queued);
    /* Once the proxy says it runs, the server has its admin subscription:
     * a request sent then gets an answer, not "no responders". A loaded
     * machine can take seconds to answer the flush: say so if it did not. */
    if (s == FQ_OK && fq_nio_flush(p->nio, 5000) != FQ_OK)
        fq_log(FQ_LOG_WARN, "the server has not confirmed the admin subscription within 5 s");
    return s;
}

/* Read the overrides bucket whole before the first dispatch, then keep
 * watching it. Without it the proxy still serves, on the config alone,
 * unless NATS refused a permission (FQ_EINVAL: start fails). */
static fq_status px_overrides_start(fq_proxy *p)
{
    char why[512] = "";
    if (fq_nio_kv_ensure(p->nio, p->cfg.streams.tenants_bucket, 0, FQ_OVR_BUCKET_MAX_BYTES,
                         FQ_OVR_VALUE_MAX, p->cfg.streams.replicas, why, sizeof why) != FQ_OK ||
        fq_nio_kv_watch(p->nio, PX_WATCH_TENANTS, p->cfg.streams.tenants_bucket) != FQ_OK) {
        fq_log(FQ_LOG_ERROR, "cannot watch the overrides bucket; overrides are off until a restart",
               FQ_STR("bucket", p->cfg.streams.tenants_bucket), FQ_STR("reason", why));
        return px_denied_at_start(p) ? FQ_EINVAL : FQ_OK;
    }
    uint64_t end = fq_nio_mono_ms() + PX_KV_SYNC_WAIT_MS;
    while (!fq_ovr_synced(p->ovr) && !p->denied_fatal && fq_nio_mono_ms() < end &&
           !atomic_load(&p->stop)) {
        fq_http_heartbeat(p->http);
        px_drain(p, PX_POLL_MS);
        px_lease_renew(p, fq_nio_mono_ms());
    }
    size_t live = fq_ovr_in_force(p->ovr);
    if (px_denied_at_start(p))
        return FQ_EINVAL;
    if (fq_ovr_synced(p->ovr))
        fq_log(FQ_LOG_INFO, "overrides read", FQ_STR("bucket", p->cfg.streams.tenants_bucket),
               FQ_UINT("in_force", live));
    else
        fq_log(FQ_LOG_WARN, "the overrides bucket is not read whole yet; its overrides apply as "
               "they arrive", FQ_STR("bucket", p->cfg.streams.tenants_bucket));
    return FQ_OK;
}

/* Store our term's marker in the journal (an empty batch, with no
 * expectation), so that a stale leader's next batch is refused, and learn
 * the sequence our first batch expects. False if stopped first. */
static bool px_journal_mark(fq_proxy *p)
{
    static const char mark[] = "{\"v\":1,\"entries\":[]}";
    while (!p->jmarked && !atomic_load(&p->stop)) {
        fq_http_heartbeat(p->http);
        if (!p->jmark_sent && px_fresh(p)) {
            fq_nio_out o = {.subject = p->cfg.subjects.runs, .data = mark, .len = sizeof mark - 1};
            p->jmark_sent = px_publish(p, &o, TK_MAKE(TK_JMARK, 0)) == FQ_OK;
        }
        px_drain(p, PX_POLL_MS);
        px_lease_renew(p, fq_nio_mono_ms());
        if (p->lease.state == FQ_LEASE_LOST || px_denied_at_start(p))
            return false;
    }
    return p->jmarked;
}

/* Wait until we hold the lease; false if stopped first. A standby changes
 * nothing but the lease key: it only reads it, and writes it to take it.
 * It sees its connection's events and publishes a metrics snapshot once a
 * second, so that its /metrics says what it knows (connected or not, the
 * lease not held) instead of the zeros of a snapshot never filled. */
static bool px_become_leader(fq_proxy *p)
{
    for (uint64_t next_log = 0, next_snap = 0;;) {
        fq_lease_step s;
        uint64_t now = fq_nio_mono_ms();
        fq_lease_tick(&s, &p->lease, now);
        px_lease_act(p, &s, false);
        if (p->lease.state == FQ_LEASE_LEADING)
            return true;
        if (px_denied_at_start(p))
            return false;
        if (now >= next_log) {
            fq_log(FQ_LOG_WARN,
                   p->lease.holder[0] ? "standing by: another proxy holds the leader lease on "
                                        "these streams; taking over when it stops renewing it"
                                      : "standing by: cannot read the leader lease",
                   FQ_STR("holder", p->lease.holder), FQ_UINT("lease_ttl_ms", FQ_LEASE_TTL_MS));
            next_log = now + PX_STANDBY_LOG_MS;
        }
        if (p->http && now >= next_snap) {
            fq_metrics_snapshot_clear(fq_probes_filling(p->probes));
            px_metrics_publish(p);
            next_snap = now + 1000;
        }
        fq_http_heartbeat(p->http);
        px_drain(p, 100);
        if (atomic_load(&p->stop))
            return false;
    }
}

/* Graceful stop: no new fetches or dispatches; the publishes under way
 * settle and their submits and completions are acked, for PX_STOP_PUBACK_MS
 * after the signal at most, and only while NATS can answer: once it has
 * been unreachable for PX_STOP_OFFLINE_MS nothing more can settle. True
 * when everything settled. */
static bool px_finish(fq_proxy *p, uint64_t t0)
{
    fq_nio_consume_pause(p->nio, PX_CONS_SUBMIT, true);
    fq_nio_consume_pause(p->nio, PX_CONS_DONE, true);
    uint64_t end = t0 + PX_STOP_PUBACK_MS, offline = 0;
    /* A lease renewal under way acks nothing: not waited for. Without the
     * lease nothing may settle: no wait. */
    while (p->pubs > (p->lease.op == FQ_LEASE_OP_UPDATE) || p->nretry || p->cur || p->dirty) {
        uint64_t now = fq_nio_mono_ms();
        offline = p->connected ? 0 : offline ? offline : now;
        if (now >= end || (offline && now >= offline + PX_STOP_OFFLINE_MS) ||
            p->lease.state == FQ_LEASE_LOST)
            break;
        px_debt_flush(p, now);
        px_journal_flush(p);
        px_drain(p, PX_POLL_MS);
        px_retry_due(p);
    }
    if (p->pubs <= (p->lease.op == FQ_LEASE_OP_UPDATE) && !p->nretry)
        return true;
    fq_log(FQ_LOG_WARN, "stopping with publishes unsettled; JetStream keeps their runs",
           FQ_UINT("pending", p->pubs), FQ_UINT("retrying", p->nretry),
           FQ_STR("nats", p->connected ? "not answering" : "unreachable"));
    return false;
}

/* Serve /metrics, /healthz and /readyz when http.listen is set, and the
 * probes alone on http.probe_listen when that is. */
static fq_status px_http_start(fq_proxy *p)
{
    fq_http_opts ho = {.listen = p->cfg.http.listen, .probe_listen = p->cfg.http.probe_listen,
                       .metrics = fq_probes_metrics, .ready = fq_probes_ready,
                       .arg = p->probes};
    char err[256];
    fq_status s = fq_http_start(&p->http, &ho, err, sizeof err);
    if (s != FQ_OK)
        fq_log(FQ_LOG_ERROR, "cannot serve metrics and probes", FQ_STR("reason", err));
    else if (p->http)
        fq_log(FQ_LOG_INFO, "serving metrics and probes", FQ_STR("listen", p->cfg.http.listen),
               FQ_UINT("port", fq_http_port(p->http)),
               FQ_UINT("probe_port", fq_http_probe_port(p->http)));
    return s;
}

/* Everything before the loop: HTTP, NATS, the streams, the lease, the
 * journal, the consumers. FQ_OK when serving; otherwise an exit code is
 * due (*rc). */
static fq_status px_start(fq_proxy *p, int *rc)
{
    *rc = FQ_PROXY_EXIT_FATAL;
    if (px_http_start(p) != FQ_OK)
        return FQ_EIO;
    px_phase(p, FQ_PHASE_CONNECTING);
    fq_status s = px_connect(p);
    if (s == FQ_OK) {
        p->connected = true;
        p->max_payload = fq_nio_max_payload(p->nio);
        px_phase(p, FQ_PHASE_STREAMS);
        s = px_streams(p);
    }
    if (s == FQ_OK) {
        px_phase(p, FQ_PHASE_STANDBY);
        s = px_become_leader(p) ? FQ_OK : FQ_EIO;
    }
    if (s == FQ_OK) {
        p->leader = true;
        fq_log(FQ_LOG_INFO, "leader lease acquired", FQ_STR("id", p->lease_id),
               FQ_UINT("term", p->term));
        s = px_overrides_start(p);
    }
    if (s == FQ_OK) {
        px_phase(p, FQ_PHASE_RECOVERING);
        if (!px_journal_mark(p))
            s = FQ_EIO;
        while (s == FQ_OK && (s = px_recover(p)) == FQ_EIO && !px_denied_at_start(p) &&
               px_sleep_unless_stopped(p, 1000))
            ;
    }
    if (s == FQ_OK && p->lease.state != FQ_LEASE_LEADING)
        s = FQ_EIO;     /* lost while starting: exit 3 */
    if (s == FQ_OK && (s = px_start_consumers(p)) != FQ_OK)
        fq_log(FQ_LOG_ERROR, "cannot start consuming");
    if (p->lease.state == FQ_LEASE_LOST)
        *rc = FQ_PROXY_EXIT_LEASE_LOST;
    if (atomic_load(&p->stop))
        *rc = FQ_PROXY_EXIT_OK;
    return atomic_load(&p->stop) ? FQ_EIO : s;
}

int fq_proxy_run(fq_proxy *p)
{
    int rc;
    if (px_start(p, &rc) != FQ_OK)
        return rc;
    px_phase_leader(p);
    fq_log(FQ_LOG_INFO, "fairq-proxy running", FQ_STR("submit", p->submit_filter),
           FQ_STR("dispatch", p->cfg.subjects.dispatch),
           FQ_INT("max_payload", p->max_payload));
    rc = FQ_PROXY_EXIT_OK;
    while (!atomic_load(&p->stop)) {
        size_t busy = px_drain(p, fq_sweep_running(&p->sweep) ? 0 : PX_POLL_MS);
        uint64_t sent = p->c.dispatched;
        uint64_t now = fq_nio_mono_ms();
        if (atomic_exchange(&p->reload_asked, false)) {
            char restart[512], err[1024];
            px_reload(p, "signal", restart, sizeof restart, err, sizeof err);
        }
        fq_http_heartbeat(p->http);
        if (!px_lease_renew(p, now) || p->fenced) {
            rc = FQ_PROXY_EXIT_LEASE_LOST;
            break;
        }
        if (p->denied_fatal) {
            px_denied_at_start(p);
            rc = FQ_PROXY_EXIT_FATAL;
            break;
        }
        px_expire(p);
        px_retry_due(p);
        px_rates(p, now);
        px_sweep(p, now);
        px_undefer(p);
        px_acks_later(p);
        if (p->connected && px_fresh(p))
            px_dispatch(p);
        px_debt_flush(p, now);
        px_debt_sweep(p, now);
        px_journal_flush(p);
        px_journal_check(p);
        /* Under light load, send now what nats.c would hold a millisecond
         * to batch: latency from submit to dispatch is then a round trip.
         * Under load the batching is worth more than the wait. */
        if (busy < PX_LIGHT_LOAD && p->c.dispatched != sent)
            fq_nio_flush(p->nio, 2);
    }
    px_phase(p, FQ_PHASE_STOPPING);
    uint64_t t0 = atomic_load(&p->stop_at);
    /* Unsettled means NATS does not answer: a release or a flush would
     * wait out their time for nothing. */
    bool settled = px_finish(p, t0 ? t0 : fq_nio_mono_ms());
    if (rc == FQ_PROXY_EXIT_OK && settled && p->connected)
        px_lease_release(p, fq_nio_mono_ms() + PX_STOP_RELEASE_MS);
    fq_nio_close(p->nio, settled ? PX_STOP_FLUSH_MS : 0);
    fq_log(FQ_LOG_INFO, "fairq-proxy stopped", FQ_UINT("dispatched", p->c.dispatched),
           FQ_UINT("held_for_next_start", p->held),
           FQ_UINT("stop_ms", t0 ? fq_nio_mono_ms() - t0 : 0));
    return rc;
}

void fq_proxy_stop(fq_proxy *p)
{
    uint_fast64_t none = 0;     /* the first request's time counts */
    atomic_compare_exchange_strong(&p->stop_at, &none, fq_nio_mono_ms());
    atomic_store(&p->stop, true);
}

void fq_proxy_reload(fq_proxy *p)
{
    atomic_store(&p->reload_asked, true);
}

/* ---- create and destroy ------------------------------------------------ */

fq_status fq_proxy_create(fq_proxy **out, const fq_config *cfg, char *err, size_t errlen)
{
    *out = NULL;
    fq_proxy *p = calloc(1, sizeof *p);
    if (!p)
        return FQ_ENOMEM;
    px_hash_key(p->hash_key);
    fq_status s = fq_config_copy(&p->cfg, cfg);
    /* Seeded from px_hash's key, as the tables were before strmap: clients
     * choose tenant ids, so they must not be able to plan the chains. */
    if (s == FQ_OK)
        s = fq_strmap_create(&p->tenants, FQ_STRMAP_KEY_OFFSET(px_tenant, node, id), 256,
                             p->hash_key[0]);
    if (s == FQ_OK)
        s = fq_ovr_create(&p->ovr, p->hash_key[1]);
    fq_admin_ops ao = {.arg = p, .tenant_next = px_admin_tenant_next,
                       .tenant_find = px_admin_tenant_find, .tenant_view = px_admin_tenant_view,
                       .overall = px_admin_overall, .policy = px_admin_policy,
                       .fresh = px_admin_fresh, .reply = px_admin_reply,
                       .reload = px_admin_reload, .ovr_write = px_ovr_write};
    if (s == FQ_OK)
        s = fq_admin_create(&p->admin, cfg->subjects.admin, p->ovr, &ao, fq_nio_mono_ms());
    if (s == FQ_OK)
        s = fq_config_policy(&p->policy, cfg);
    fq_sched_opts so = px_sched_opts(cfg);
    so.seed = p->hash_key[1] ^ p->hash_key[0];  /* tenant ids come from clients */
    if (s == FQ_OK)
        s = fq_sched_create(&p->sched, &so);
    fq_est_opts eo;
    fq_est_opts_init(&eo);
    eo.default_tokens = cfg->estimates.default_tokens;
    eo.max_tokens = cfg->scheduler.max_est_tokens;
    if (s == FQ_OK)
        s = fq_est_create(&p->est, &eo);
    for (size_t i = 0; s == FQ_OK && i < cfg->estimates.n_workflows; i++)
        s = fq_est_set_workflow(p->est, cfg->estimates.workflows[i].name,
                                cfg->estimates.workflows[i].tokens);
    if (s == FQ_OK)
        s = fq_log_limiter_create(&p->lim, 1024, 1000);
    if (s == FQ_OK)
        s = fq_pool_create(&p->bodies, PX_BODY_MAX);
    if (s == FQ_OK)
        s = fq_proxy_set_ops(p, &(fq_proxy_ops){0});
    fq_sweep_init(&p->sweep, PX_SWEEP_MS);
    if (s == FQ_OK)
        s = fq_probes_create(&p->probes, p->cfg.http.max_tenant_series, fq_nio_mono_ms);
    fq_bucket_init(&p->refusal_logs, PX_REFUSAL_LOGS, PX_REFUSAL_LOGS, 0);
    if (s == FQ_OK && !(p->ev = calloc(PX_EVENTS, sizeof *p->ev)))
        s = FQ_ENOMEM;
    if (s != FQ_OK) {
        snprintf(err, errlen, "cannot build the proxy: %s", fq_status_text(s));
        fq_proxy_destroy(p);
        return s;
    }
    snprintf(p->submit_filter, sizeof p->submit_filter, "%s.*", cfg->subjects.submit);
    snprintf(p->done_filter, sizeof p->done_filter, "%s.*", cfg->subjects.done);
    snprintf(p->rejected_filter, sizeof p->rejected_filter, "%s.*", cfg->subjects.rejected);
    snprintf(p->admin_filter, sizeof p->admin_filter, "%s.>", cfg->subjects.admin);
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    snprintf(p->lease_id, sizeof p->lease_id, "%s:%ld:%" PRId64, host, (long)getpid(),
             fq_nio_unix_ms());
    fq_lease_opts lo = {.ttl_ms = FQ_LEASE_TTL_MS, .margin_ms = PX_LEASE_MARGIN_MS,
                        .renew_ms = PX_LEASE_RENEW_MS, .retry_ms = PX_LEASE_RETRY_MS};
    if (fq_lease_init(&p->lease, "leader", p->lease_id, &lo) != FQ_OK) {
        snprintf(err, errlen, "cannot build the proxy: the lease id %s is too long", p->lease_id);
        fq_proxy_destroy(p);
        *out = NULL;
        return FQ_EINVAL;
    }
    *out = p;
    return FQ_OK;
}

fq_status fq_proxy_set_ops(fq_proxy *p, const fq_proxy_ops *o)
{
    p->ops = *o;
    return FQ_OK;
}

void fq_proxy_destroy(fq_proxy *p)
{
    if (!p)
        return;
    fq_http_stop(p->http);     /* its thread reads the snapshot */
    fq_nio_destroy(p->nio);
    for (size_t i = 0; i < p->nretry; i++)
        fq_nio_msg_destroy(p->retry[i].msg);
    free(p->retry);
    free(p->later);
    for (size_t i = 0; i < p->nheld_ev; i++)
        fq_nio_msg_destroy(p->held_ev[i].msg);
    free(p->held_ev);
    px_batch *lists[] = {p->cur, p->bat_head, p->bat_free};
    for (size_t i = 0; i < 3; i++) {
        for (px_batch *b = lists[i], *nx; b; b = nx) {
            nx = b->next;
            free(b->runs);
            free(b->dones);
            free(b);
        }
    }
    fq_jbatch_free(&p->jb);
    fq_pool_destroy(p->bodies);     /* held bodies */
    fq_buf_free(&p->carry);
    fq_strmap_destroy(p->tenants, px_tenant_release);
    free(p->by_seq.b);
    free(p->by_key.b);
    free(p->done.e);
    for (size_t i = 0; i < p->nchunks; i++)
        free(p->chunks[i]);
    free(p->chunks);
    free(p->ev);
    fq_log_limiter_destroy(p->lim);
    fq_admin_destroy(p->admin);
    fq_ovr_destroy(p->ovr);
    fq_probes_destroy(p->probes);
    fq_est_destroy(p->est);
    fq_sched_destroy(p->sched);
    fq_policy_destroy(p->policy);
    fq_config_free(&p->cfg);
    free(p);
}
