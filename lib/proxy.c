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
#include "ledger.h"
#include "leader.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "msg.h"
#include "natsio.h"
#include "overrides.h"
#include "partition.h"
#include "policy.h"
#include "pool.h"
#include "probes.h"
#include "share.h"
#include "strand.h"
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
 * - What is decided about runs (admission, dispatch, what a PubAck
 *   settles, completions, leases, debts, the journal and its rebuild) is
 *   the run ledger's (lib/ledger.c), a state machine without I/O: the loop
 *   turns natsio's events into its inputs and performs its actions.
 * - What must survive a restart lives in NATS: the streams, the fairq_runs
 *   bucket (a record per run in flight, overwritten by a done marker), the
 *   lease. The proxy keeps nothing on disk.
 * - Memory is bounded without giving up FIFO order: past max_buffered_bytes
 *   a run keeps only its index entry and its body is read back by sequence
 *   when it is dispatched; past three quarters of max_buffered_runs a
 *   tenant holding its share has its submits given back to the stream
 *   (the ledger's buffer shared), past max_buffered_runs fetching stops.
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

#define PX_CONS_SUBMIT 0            /* natsio's consumer ids: partition k's are */
#define PX_CONS_DONE 1              /* px_cons(p, PX_CONS_*, k) */
#define PX_OWN_MAX (FQ_NIO_MAX_CONSUMERS / 2) /* partitions one proxy owns at most: a pair
                                                 of natsio's consumers each (owner's bound) */
#define PX_PARTS_MAX FQ_PARTITIONS_MAX /* the per-partition arrays: any k of P */
#define PX_SUB_ADMIN 0              /* <admin>.> */
#define PX_SUB_EXPLAIN 1            /* <explain>.* */
#define PX_SUB_SHARE 2              /* <share>: replicas' heartbeats (window.share) */
#define PX_SUB_REPLICA 3            /* P > 1: <admin>.replica.<id>.>, this replica's own */
#define PX_SUB_RELOAD 4             /* P > 1: <admin>.reload, on every replica (deployment-wide) */
#define PX_SUB_FWD 5                /* <fwd_prefix>.*: answers to requests this replica sent,
                                       handed on (P > 1) or consumer infos */
#define PX_FWD_MAX FQ_ADMIN_QUEUED  /* requests handed on awaiting their answer, at most */
#define PX_FWD_WAIT_MS 2000         /* ... each this long, then answered with why not */
#define PX_READ_RETRY_MS 1000       /* a journal read back that failed is made again after this */
#define PX_LOADING_RETRY_MS 100     /* a request about a tenant of a partition being read back:
                                       answered busy, to ask again after this */
#define PX_ADMIN_QUEUE "fairq-admin" /* P > 1: the queue group of <admin>.> and <explain>.* */
#define PX_SHARE_PERIOD_MS 100      /* a heartbeat at least this often (issue 16) */
#define PX_SHARE_QUEUED 4096        /* heartbeats waiting at most: 100 replicas' for 4 s */
#define PX_WATCH_TENANTS 0          /* the overrides bucket */
#define PX_WATCH_LEASES 1           /* P > 1: the lease bucket, who owns what (lib/owner.h) */
#define PX_KV_SYNC_WAIT_MS 5000     /* at start, longest wait for the overrides */
#define PX_EVENTS 1024              /* events drained per poll */
#define PX_STRAND_CHECK_MS 10000    /* each owned partition checked for stranded submits so often */
#define PX_REFUSED_BOUND_MS 30000   /* a submit consumer refused so long is reported */
#define PX_POLL_MS 50               /* longest sleep between housekeeping */
#define PX_MAX_PUBS 32768           /* our publishes awaiting PubAck before dispatch waits */
#define PX_JS_WQ_NOT_UNIQUE 10100   /* js_err: a consumer's filter overlaps another's on a
                                       work-queue stream */
#define PX_RETRY_MS 250             /* a failed publish is tried again after this */
#define PX_EXPIRED_MAX FQ_LEDGER_EXPIRED_MAX /* expired runs remembered for late completions */
/* A graceful stop fits FQ_PROXY_STOP_MS from the signal, NATS up or not:
 * the PubAcks of what is under way, then the lease's release and a flush of
 * the acks only when they can still get through, then the close. */
#define PX_STOP_PUBACK_MS 7000      /* longest wait for PubAcks, from the signal */
#define PX_STOP_OFFLINE_MS 1000     /* ... cut short once NATS is unreachable this long */
#define PX_STOP_RELEASE_MS 500      /* the lease release's PubAck */
#define PX_STOP_FLUSH_MS 500        /* the acks written before the close */
#define PX_HANDOVER_SETTLE_MS 2000  /* a planned move waits this long at most for its journal */
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
#define PX_RANK_BACKLOG 256         /* tenants whose queues changed left out of the stats
                                       order until a page asks for it: a page ranks at most
                                       these and a turn's, and dispatch ranks none while
                                       only a few tenants are busy */
#define PX_REFUSAL_LOGS 20          /* "run refused" lines a second at most, all tenants */

/* Publish tokens: kind in the top four bits, a value below. The ledger's
 * own (dispatches, journal batches, refusals) come first (lib/ledger.h). */
enum px_token {
    TK_LEASE = FQ_LTK_CALLER,   /* a lease key's read or write (lib/leader.c) */
    TK_JMARK,                   /* the journal's term marker, at the start of leading */
};
#define TK_MAKE(k, v) FQ_LEDGER_TOKEN(k, v)
#define TK_KIND(t) FQ_LEDGER_TOKEN_KIND(t)
#define TK_VAL(t) FQ_LEDGER_TOKEN_VAL(t)

/* The largest block the ledger keeps: a header block JetStream would store,
 * and the largest max_payload a server may have (64 MiB). */
#define PX_BODY_MAX (FQ_NIO_MAX_HEADER_BYTES + ((size_t)64 << 20))

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
    uint64_t idle_since;            /* monotonic ms a sweep first found it forgettable; 0: not */
    uint64_t idle_dispatched;       /* its dispatches then: one since makes it busy */
    fq_ledger_tenant lt;            /* what the ledger keeps of it */
    fq_hist wait;                   /* submit (stream time) to dispatch */
    fq_strmap_node node;            /* in the tenant table, keyed by id */
    fq_sweep_node later;            /* in creation order: swept, and the metrics' order */
} px_tenant;

/* A publish that failed, to be tried again as it was. */
typedef struct px_retry {
    uint64_t token;
    fq_nio_msg *msg;
    uint64_t at;                /* monotonic ms */
} px_retry;

/* P > 1: a request about a tenant handed on to the replica holding its
 * partition, whose answer is relayed to the requester. Not handed on with
 * the requester's reply subject: through a service import (the operator's
 * account, a tenant's) that is _R_.*, which the server lets no client
 * publish with (a "Publish Violation ... Reply"). */
typedef struct px_fwd {
    fq_nio_msg *req;            /* the request, held until answered; NULL: a free slot */
    uint64_t seq;               /* its answer comes on <fwd_prefix>.<seq> */
    uint64_t until;             /* then it is answered with why not (monotonic ms) */
    char holder[FQ_OWNER_ID_MAX + 1]; /* the replica it was handed to */
} px_fwd;

/* Counters for stats; monotonic. The runs' are the ledger's
 * (fq_ledger_counters), the admin plane's lib/admin.c's. */
typedef struct px_counters {
    uint64_t reconnects, reloads, reload_failures, overrides_refused;
    uint64_t admin_forwarded;   /* P > 1: requests handed on to a tenant's holder */
    uint64_t admin_fwd_busy;    /* ... answered busy instead: PX_FWD_MAX waiting already, or
                                   the tenant's partition ours but not read back yet */
    uint64_t journal_refused;       /* journal records refused at start: invalid or unknown */
    uint64_t subtenant_refused;     /* submits refused for their sub-tenant claim */
    uint64_t share_refused;         /* heartbeats refused: invalid, or a peer too many */
    uint64_t parts_fenced;          /* partitions let go because their journal fenced us */
    uint64_t handovers_unsettled;   /* planned moves whose journal did not settle in time */
    uint64_t submits_stranded;      /* partitions' submits found stranded and delivered again */
} px_counters;

/* The journal read back (px_read_*): of every partition loading when it
 * began (with P = 1, of the whole journal at start), one subject at a
 * time on natsio's scan thread, its messages decoded into the ledger on
 * the loop as they come. */
typedef struct px_readback {
    bool on;                    /* under way */
    bool ended;                 /* every subject read: taken in at the next turn */
    bool lost;                  /* a partition of it was let go meanwhile */
    fq_status status;           /* P = 1 at start: how the last one ended */
    uint64_t token;             /* the read of the subject under way: its events carry it */
    int32_t at;                 /* that subject: -1 P = 1's (with P = 1, the whole journal),
                                   else a partition's, under partitions or partitions_before */
    bool subj[FQ_PARTITIONS_MAX]; /* the partitions' subjects it reads (px_read_set) */
    uint64_t again_at;          /* monotonic ms: one that failed is made again from then */
    uint64_t began, subj_began; /* monotonic ms: it and the subject under way began */
    uint64_t dispatched;        /* runs the ledger had dispatched when it began */
    uint64_t msgs, bytes;       /* messages read, and their bytes */
    uint64_t subj_msgs, subj_bytes, subj_records; /* ... when the subject under way began */
    int64_t ts_ms;              /* the message being decoded was stored then (unix ms) */
    uint64_t seq;               /* ... at this stream sequence */
    uint64_t now;               /* the clocks it is decoded at (monotonic ms) */
    int64_t now_ms;             /* ... unix ms, read at the same moment */
    fq_jcounts counts;          /* records read and refused */
} px_readback;

struct fq_proxy {
    fq_config cfg;              /* our copy: strings duplicated */
    fq_policy *policy;
    fq_sched *sched;
    fq_est *est;
    fq_nio *nio;
    fq_share *share;            /* window.share: this replica's part of the window;
                                   NULL: the window is not shared */
    fq_share_limits share_lim;  /* ... as the last tick set it */
    uint64_t share_next;        /* monotonic ms of the next heartbeat */
    bool share_closed;          /* its part is no run (or no token) now: no dispatch */
    bool share_heard;           /* a beat heard since the limits were last set */
    atomic_bool stop;
    atomic_uint_fast64_t stop_at; /* monotonic ms of the first fq_proxy_stop; 0: none */

    char submit_filter[256], done_filter[256], rejected_filter[256], admin_filter[256];
    char explain_filter[256];   /* <explain>.* */
    char replica_prefix[256];   /* <admin>.replica.<id>, this replica's admin subjects */
    char fwd_prefix[300];       /* <inbox prefix>.fwd.<id>: answers to requests handed on
                                   (.<seq>) and to consumer infos (.c<k>t<term>) */
    px_fwd fwd[PX_FWD_MAX];     /* requests handed on, awaiting their answer */
    uint64_t fwd_seq;           /* the last handed on */
    size_t nfwd;                /* slots of fwd in use */
    char runs_filter[256];      /* the journal's subjects: <runs>, or <runs>.* with partitions */
    int64_t submit_created_ms;  /* FAIR_SUBMIT's creation: part of derived run ids */
    int64_t max_payload;
    uint64_t hash_key[2];       /* px_hash's key, drawn at create */

    fq_strmap *tenants;         /* px_tenant by id */
    fq_sweep sweep;             /* every tenant in creation order, visited in slices */
    unsigned sweep_warned;      /* the pass's old-queue lines so far */
    uint64_t sweep_unwarned;    /* the pass's old queues left for a later pass */
    fq_ledger *ledger;          /* the runs (lib/ledger.h) */
    fq_pool *bodies;            /* the submits the ledger keeps */
    fq_buf carry;               /* the carried header lines of the submit being taken in */
    fq_buf carry_read;          /* ... of a submit read back by sequence */
    const fq_nio_msg *cur_msg;  /* the delivery whose actions are performed: refusals copy it */
    bool read_asked;            /* the ledger asked for a body this turn */
    bool unsent;                /* a dispatch could not be queued this turn: no more */
    const fq_nio_msg *puback_msg; /* the failed publish whose PubAck is being handled */
    px_retry *retry;
    size_t nretry, retry_cap;
    fq_nio_event *ev;

    uint64_t pubs;              /* our publishes awaiting PubAck */
    bool leader, connected;
    bool jmarked;               /* our term's markers are stored (the ledger knows their seqs) */
    uint32_t jmarks;            /* partitions whose marker is stored (P > 1: one each) */
    uint32_t jmark_sent;        /* markers in flight */
    bool part_marked[PX_PARTS_MAX]; /* partition k's marker is stored */
    px_readback rb;             /* the journal read back, of partitions taken */
    uint64_t part_mark_term[PX_PARTS_MAX]; /* P > 1: the term k's last marker was sent for */
    char jmsgid[FQ_LEASE_ID_MAX + 2 * FQ_U64_DEC_MAX + 4]; /* the batch in flight's Msg-Id */
    uint64_t jmsgid_batch;      /* ... and its batch id ("": none yet) */
    bool fenced;                /* the server refused our journal batch: another leads */

    char lease_id[128];
    char instance[FQ_OWNER_ID_MAX + 16]; /* this process's tag in its registry key (owner.h) */
    fq_leader *ld;              /* the leader lease and its I/O (lib/leader.c); from connect */
    uint64_t term;              /* the term we lead in: our consumers' names carry it */
    bool consuming;             /* the consumers are started */
    fq_nio_event *held_ev;      /* deliveries that came while their partition was not fresh,
                                   in order */
    size_t nheld_ev, held_ev_cap;
    uint32_t part_held[PX_PARTS_MAX];   /* ... of partition k */
    uint64_t next_second;       /* monotonic ms of the next rate sample */
    fq_bucket refusal_logs;     /* "run refused" lines, PX_REFUSAL_LOGS a second */
    uint64_t refusals_unlogged; /* refusals not logged since the last such line */
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
    bool consumer_ok[FQ_NIO_MAX_CONSUMERS]; /* by natsio id: its last (re)creation succeeded */
    uint64_t part_term[PX_PARTS_MAX];  /* the term partition k's consumers carry; 0: not ours */
    uint64_t part_fill[PX_PARTS_MAX];  /* runs queued by partition, summed by the pass under way */
    uint64_t part_queued[PX_PARTS_MAX]; /* ... by the last pass done (fairq_partition_queued_runs) */
    uint64_t part_backlog[PX_PARTS_MAX]; /* its submit consumer's num_pending + num_ack_pending,
                                   as last answered (fairq_partition_backlog_runs) */
    uint64_t part_floor[PX_PARTS_MAX]; /* its submit consumer's ack floor (stream sequence),
                                   as last answered: stored at or below it is stranded */
    fq_strand part_strand[PX_PARTS_MAX]; /* its stranded submits and refused consumer */
    int64_t strand_check_at;    /* monotonic ms of the next check for stranded submits */
    /* P > 1, what the ownership said, done at the next turn (px_parts_apply) */
    uint64_t part_want[PX_PARTS_MAX];  /* gained at this term, not adopted yet; 0: none */
    uint64_t part_loading[PX_PARTS_MAX]; /* adopted at this term: marker, then read back */
    bool part_drop[PX_PARTS_MAX];      /* lost: to let go */
    bool part_planned[PX_PARTS_MAX];   /* ... on purpose: settled first, then its key handed off */
    bool part_release[PX_PARTS_MAX];   /* ... fenced: its key released once let go, for its
                                          assigned replica (us too) to take in a new term */
    uint16_t part_slot[PX_PARTS_MAX];  /* partition k's pair of natsio consumer ids, + 1
                                          (px_cons); 0: none (not ours) */
    uint16_t slot_part[PX_OWN_MAX];    /* ... and back: the partition of pair j, + 1; 0: free */
    uint16_t slot_next;                /* the pair a gain tries first: freed pairs are
                                          taken again last */
    uint64_t part_fence[PX_PARTS_MAX]; /* its fence as last said (px_lease_fence), for the
                                          pair it gets */
    uint64_t part_settle_until[PX_PARTS_MAX]; /* settling for a planned move until (mono ms):
                                           its submits not fetched; 0: not settling */
    uint64_t owners_next;              /* mono ms: the standby's phase and owners looked at */
    int duty_want;                     /* the leader key: 1 gained, -1 lost, 0 as it was */
    bool duty;                         /* we hold it: the admin requests are answered here */
    bool fetch_paused[2];       /* PX_CONS_*: the ledger paused fetching (every partition's) */
    bool served;                /* both consumers were made once: start is over */
    bool denied_fatal;          /* NATS refused a permission before that */
};

/* ---- small helpers ------------------------------------------------------ */

/* The partitions of the deployment (P). */
static uint32_t px_parts(const fq_proxy *p)
{
    return p->cfg.partitions > 1 ? p->cfg.partitions : 1;
}

/* Partition k's natsio consumer id of kind (PX_CONS_*): its pair's; -1
 * while it has none (not ours). */
static int px_cons(const fq_proxy *p, int kind, uint32_t k)
{
    return k < PX_PARTS_MAX && p->part_slot[k] ? kind + 2 * (p->part_slot[k] - 1) : -1;
}

/* The partition natsio consumer id source serves; PX_PARTS_MAX when none. */
static uint32_t px_cons_part(const fq_proxy *p, int source)
{
    if (source < 0 || source / 2 >= PX_OWN_MAX || !p->slot_part[source / 2])
        return PX_PARTS_MAX;
    return p->slot_part[source / 2] - 1u;
}

/* The partition whose consumer delivered ev (px_cons_part). */
static uint32_t px_ev_part(const fq_proxy *p, const fq_nio_event *ev)
{
    uint32_t k = px_cons_part(p, ev->source);
    return k < PX_PARTS_MAX ? k : 0;
}

/* The run keys' hash key (lib/ledger.h): from the kernel's random source, or, should that fail,
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

/* Log a warning about key at most once a second. */
static bool px_warn_ok(fq_proxy *p, const char *key)
{
    return fq_log_limiter_allow(p->lim, key, fq_nio_mono_ms(), NULL);
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
    fq_ledger_tenant_init(&t->lt, t->t, t->id);
    t->lt.prices = pr.prices;
    t->lt.class_max_pending = pr.class_max_pending;
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
    t->lt.prices = pr.prices;
    t->lt.class_max_pending = pr.class_max_pending;
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

/* Count a refused run on its tenant pt or, when pt is NULL, on the tenant
 * named tenant (NULL: the subject names none) if it is known or a layer of
 * the policy lists it (then it is created as for an admitted run). An id
 * nothing lists and no run was admitted for is counted overall only (the
 * ledger's count): a flood of refused runs to new ids must not grow
 * memory. */
static void px_count_refusal(fq_proxy *p, px_tenant *pt, const char *tenant, fq_status why)
{
    fq_policy_resolved pr;
    if (!pt && tenant && !(pt = px_tenant_find(p, tenant, strlen(tenant))) &&
        fq_policy_resolve(&pr, p->policy, tenant) == FQ_OK && pr.source != FQ_SRC_DEFAULT)
        px_tenant_get(&pt, p, tenant, strlen(tenant));
    if (pt)
        pt->rejected[why]++;
}

static px_tenant *px_tenant_of_lt(fq_ledger_tenant *lt)
{
    return lt ? (px_tenant *)(void *)((char *)lt - offsetof(px_tenant, lt)) : NULL;
}

/* Whether we may change shared state now: we lead and the lease is fresh
 * (lib/lease.h); with P > 1, every partition's lease we hold. With P = 1
 * every fetch, ack, journal append, dispatch, retry, consumer change and
 * admin write is gated on it; with P > 1 an admin write, and what concerns
 * a partition on that partition's own lease alone (px_part_fresh). */
static bool px_fresh(const fq_proxy *p)
{
    if (p->ld && px_parts(p) > 1)   /* every partition we hold */
        return fq_leader_parts_fresh(p->ld, fq_nio_mono_ms());
    return p->ld && fq_leader_fresh(p->ld, fq_nio_mono_ms());
}

/* Whether partition k may act now (fetch, ack, journal, dispatch its
 * tenants' runs, retry its publishes, make its marker): its own lease
 * fresh, whatever the others'; with P = 1, the leader's (px_fresh). The
 * consumers and the ledger are fenced the same way, by the leader's fence
 * callback (px_lease_fence). */
static bool px_part_fresh(const fq_proxy *p, uint32_t k)
{
    if (p->ld && px_parts(p) > 1)
        return fq_leader_part_fresh(p->ld, (int32_t)k, fq_nio_mono_ms());
    return px_fresh(p);
}

/* A publish carries the producer's headers: the message itself (m), or the
 * lines the ledger kept. Carry none. */
static void px_carry_none(fq_nio_out *o)
{
    o->carry = NULL;
    o->carry_lines = NULL;
    o->carry_len = 0;
}

/* A refusal as it goes out: its subject, headers and error sentence, and
 * the message built from them (o points into the rest, so it is filled in
 * place and never copied). */
typedef struct {
    char subj[FQ_TENANT_MAX + 256];     /* <rejected>.<tenant> */
    char err[512];                      /* Fair-Error: "code: sentence", and what was left out */
    char from[FQ_TENANT_MAX + 256];     /* a held run's submit subject */
    char wait[24];                      /* Fair-Wait-Ms of an overload refusal */
    const char *subject;                /* the subject refused (Fair-Subject, the log line) */
    fq_nio_hdr h[3];                    /* Fair-Error, Fair-Subject, Fair-Wait-Ms as they apply */
    fq_nio_out o;                       /* the publish */
} px_refusal;

/* Build the refusal of a (pure): the message refused is the delivery
 * handed in, or a held run's submit. A refusal that could never be stored
 * would leave its submit to come back for ever: it goes without the
 * producer's headers when they are unfit or too long, and without the body
 * too when that is too long, as the sentence says. */
static void px_refusal_build(px_refusal *r, const fq_proxy *p, const fq_ledger_act *a)
{
    const char *tenant = a->tenant;
    snprintf(r->subj, sizeof r->subj, "%s.%s", p->cfg.subjects.rejected,
             tenant ? tenant : "_invalid");
    snprintf(r->err, sizeof r->err, "%s: %s", fq_status_code(a->code), a->sentence);
    snprintf(r->from, sizeof r->from, "%s.%s", p->cfg.subjects.submit, tenant ? tenant : "");
    r->subject = a->subject ? a->subject : r->from;
    /* An overload refusal says the wait it was refused for in a header too. */
    snprintf(r->wait, sizeof r->wait, "%" PRIu64, a->wait_ms);
    r->h[0] = (fq_nio_hdr){FQ_HDR_ERROR, r->err};
    r->h[1] = (fq_nio_hdr){FQ_HDR_SUBJECT, r->subject};
    size_t nh = tenant ? 1 : 2;
    if (a->code == FQ_EOVERLOAD)
        r->h[nh++] = (fq_nio_hdr){FQ_HDR_WAIT_MS, r->wait};
    r->o = (fq_nio_out){.subject = r->subj, .data = a->raw.body, .len = a->raw.body_len,
                        .hdrs = r->h, .n_hdrs = nh};
    if (p->cur_msg)
        r->o.carry = p->cur_msg;
    else
        r->o.carry_lines = a->raw.hdr, r->o.carry_len = a->raw.hdr_len;
    /* A completion refused for its length is copied without its body:
     * anyone may send them, and its copy need not be longer than a short
     * one's. */
    if (a->cons == FQ_LEDGER_DONE && r->o.len > FQ_COMPLETION_MAX_BYTES) {
        r->o.len = 0;
        size_t k = strlen(r->err);
        snprintf(r->err + k, sizeof r->err - k, " (copied without its body)");
    }
    fq_nio_size sz;
    size_t room = p->max_payload > 0 ? (size_t)p->max_payload : SIZE_MAX;
    if (fq_nio_out_size(&sz, &r->o) != FQ_OK || sz.header > FQ_NIO_MAX_HEADER_BYTES ||
        sz.total > room) {
        px_carry_none(&r->o);
        bool body = fq_nio_header_bytes(r->h, r->o.n_hdrs, 0) + r->o.len <= room;
        if (!body)
            r->o.len = 0;
        size_t k = strlen(r->err);
        snprintf(r->err + k, sizeof r->err - k, " (refused without the run's headers%s)",
                 body ? "" : " and body");
    }
}

/* Publish a refusal built, acked once stored (a's token). The server's
 * limit may have shrunk since, or a header could not be read after all:
 * then it goes again without the headers, then without the body. */
static void px_refusal_send(fq_proxy *p, px_refusal *r, const fq_ledger_act *a)
{
    fq_status s = px_publish(p, &r->o, a->token);
    if ((s == FQ_ETOOBIG || s == FQ_EINVAL) && (r->o.carry || r->o.carry_len)) {
        px_carry_none(&r->o);
        size_t k = strlen(r->err);
        snprintf(r->err + k, sizeof r->err - k, " (refused without the run's headers)");
        s = px_publish(p, &r->o, a->token);
    }
    if (s == FQ_ETOOBIG && r->o.len) {
        r->o.len = 0;
        char *at = strstr(r->err, " (refused without the run's headers)");
        if (at)
            *at = '\0';
        size_t k = strlen(r->err);
        snprintf(r->err + k, sizeof r->err - k, " (refused without the run's headers and body)");
        s = px_publish(p, &r->o, a->token);
    }
    if (s != FQ_OK) {
        /* Not even queued: the ledger naks its message, to come again
         * (once the lease is fresh, if it is not now). */
        fq_ledger_unsent(p->ledger, a, s, fq_nio_mono_ms(), fq_nio_unix_ms());
    }
}

/* A line a tenant a second, and PX_REFUSAL_LOGS a second over all: a
 * flood of runs to as many new tenant ids writes no line each. */
static void px_refusal_log(fq_proxy *p, const char *tenant, const px_refusal *r)
{
    if (!fq_log_enabled(FQ_LOG_INFO))
        return;
    if (px_warn_ok(p, tenant ? tenant : "_invalid") &&
        fq_bucket_take(&p->refusal_logs, fq_nio_mono_ms(), NULL)) {
        fq_log(FQ_LOG_INFO, "run refused", FQ_STR("tenant", tenant ? tenant : "_invalid"),
               FQ_STR("subject", r->subject), FQ_STR("error", r->err),
               FQ_UINT("unlogged_before", p->refusals_unlogged));
        p->refusals_unlogged = 0;
    } else {
        p->refusals_unlogged++;
    }
}

/* Refuse a run or a completion (a REFUSE action): publish it to
 * <rejected>.<tenant> with its body and headers, Fair-Error "code:
 * sentence" and, for a subject without a valid tenant, Fair-Subject. The
 * message is acked once the refusal is stored (its token). A refused run
 * is counted on its tenant. */
static void px_refuse(fq_proxy *p, const fq_ledger_act *a)
{
    if (a->cons == FQ_LEDGER_SUBMIT)
        px_count_refusal(p, px_tenant_of_lt(a->lt), a->tenant, a->code);
    px_refusal r;
    px_refusal_build(&r, p, a);
    px_refusal_send(p, &r, a);
    px_refusal_log(p, a->tenant, &r);
}

/* ---- the ledger's actions ------------------------------------------------ */

/*
 * The ledger (lib/ledger.h) decides; this performs. Every input is
 * followed by px_actions, which takes each action out in order and turns
 * it into a natsio call; a publish natsio cannot even queue, and an ack it
 * refuses, go back to the ledger at once. FAIRQ_RUNS is a limits stream of
 * batches (lib/journal.c writes and reads the records): each batch carries
 * Nats-Expected-Last-Sequence, the sequence of the batch stored before it,
 * and a Nats-Msg-Id of its own; a new leader first stores a marker (an
 * empty batch) with no expectation, so a stale leader's next batch is
 * refused (js_err 10071) and it stops. docs/protocol.md section 8.
 */

static void px_actions(fq_proxy *p);

/* The ledger's lease state: with P = 1 the leader's; with P > 1 each
 * partition's own, told as it changes (px_lease_fence). */
static void px_ledger_fresh(fq_proxy *p)
{
    fq_ledger_set_fresh(p->ledger, px_parts(p) > 1 ? p->ld != NULL : px_fresh(p));
}

/* The turn's debt records and journal batches out: with P > 1, each
 * partition's batches fenced by its own lease (fq_ledger_set_part_fence),
 * so that one whose lease is fresh does not wait for another's renewal. */
static void px_ledger_flush(fq_proxy *p, uint64_t now, int64_t now_ms)
{
    px_ledger_fresh(p);
    fq_ledger_flush(p->ledger, now, now_ms);
}

static void px_dispatch_send(fq_proxy *p, const fq_ledger_act *a)
{
    fq_nio_hdr h[FQ_LEDGER_DISPATCH_HDRS];
    for (size_t i = 0; i < a->n_hdrs; i++)
        h[i] = (fq_nio_hdr){a->hdrs[i].name, a->hdrs[i].value};
    fq_nio_out o = {.subject = p->cfg.subjects.dispatch, .data = a->raw.body,
                    .len = a->raw.body_len, .hdrs = h, .n_hdrs = a->n_hdrs,
                    .carry_lines = a->raw.hdr, .carry_len = a->raw.hdr_len};
    fq_status s = px_publish(p, &o, a->token);
    if (s != FQ_OK) {
        /* NATS cannot take it now: the ledger queues it again (or refuses
         * it, when it can never be sent), and no more go this turn. */
        p->unsent = true;
        fq_ledger_unsent(p->ledger, a, s, fq_nio_mono_ms(), fq_nio_unix_ms());
        return;
    }
    px_tenant *pt = px_tenant_of_lt(a->lt);
    p->sec_dispatched++;
    p->sec_tokens += a->est;
    int64_t waited = a->dispatched_ms - a->submitted_ms;
    fq_hist_observe(&pt->wait, waited > 0 ? (uint64_t)waited * 1000 : 0);
}

/* Partition k's journal subject: <runs>.<k>, or <runs> with P = 1. */
static void px_journal_subject(char *out, size_t cap, const fq_proxy *p, uint32_t k)
{
    if (px_parts(p) > 1)
        snprintf(out, cap, "%s.%" PRIu32, p->cfg.subjects.runs, k);
    else
        snprintf(out, cap, "%s", p->cfg.subjects.runs);
}

/* A journal batch, under the Nats-Msg-Id of its first sending: sent again
 * after a lost PubAck, perhaps in a later term, it must be the duplicate
 * JetStream recognises, not a write that the expectation refuses. */
static void px_journal_send(fq_proxy *p, const fq_ledger_act *a)
{
    char exp[FQ_U64_DEC_MAX];
    fq_u64_dec(exp, a->expect_seq);
    if (px_parts(p) > 1) {
        /* Partition a->part's subject, fenced on it alone; the Msg-Id
         * names the partition and the term it was adopted at, which a
         * batch sent again keeps. */
        char subject[320], msgid[sizeof p->jmsgid + FQ_U64_DEC_MAX + 2];
        px_journal_subject(subject, sizeof subject, p, a->part);
        snprintf(msgid, sizeof msgid, "%s/p%" PRIu32 "/%" PRIu64 "/%" PRIu64, p->lease_id,
                 a->part, a->term, a->batch);
        fq_nio_hdr h[2] = {{"Nats-Msg-Id", msgid}, {"Nats-Expected-Last-Subject-Sequence", exp}};
        fq_nio_out o = {.subject = subject, .data = a->text, .len = a->len, .hdrs = h,
                        .n_hdrs = 2};
        fq_status s = px_publish(p, &o, a->token);
        if (s != FQ_OK)
            fq_ledger_unsent(p->ledger, a, s, fq_nio_mono_ms(), fq_nio_unix_ms());
        return;
    }
    if (!p->jmsgid[0] || p->jmsgid_batch != a->batch) {
        snprintf(p->jmsgid, sizeof p->jmsgid, "%s/%" PRIu64 "/%" PRIu64, p->lease_id, p->term,
                 a->batch);
        p->jmsgid_batch = a->batch;
    }
    fq_nio_hdr h[2] = {{"Nats-Msg-Id", p->jmsgid}, {"Nats-Expected-Last-Sequence", exp}};
    fq_nio_out o = {.subject = p->cfg.subjects.runs, .data = a->text, .len = a->len, .hdrs = h,
                    .n_hdrs = 2};
    fq_status s = px_publish(p, &o, a->token);
    if (s != FQ_OK)
        fq_ledger_unsent(p->ledger, a, s, fq_nio_mono_ms(), fq_nio_unix_ms());
}

static fq_status px_submit_headers(fq_submit_headers *h, fq_buf *lines, char bad[160],
                                   const fq_nio_msg *m);

/* The ledger asks for a body it does not keep: read back by sequence,
 * parsed again, and handed over; what that decides is performed before the
 * message read goes. */
static void px_read_body(fq_proxy *p, const fq_ledger_act *a)
{
    uint64_t seq = a->seq;
    px_tenant *pt = px_tenant_of_lt(a->lt);
    p->read_asked = true;
    fq_nio_msg *m = NULL;
    fq_status s = fq_nio_get(&m, p->nio, p->cfg.streams.submit, seq);
    fq_submit sub = {0};
    fq_ledger_bytes raw = {0};
    char bad[160];
    fq_submit_headers h;
    if (s == FQ_OK && px_submit_headers(&h, &p->carry_read, bad, m) != FQ_OK)
        s = FQ_EIO;     /* it was fit when it came: out of memory */
    if (s == FQ_OK) {
        char err[256];
        /* Valid: it was checked when it came in. */
        fq_submit_parse(&sub, pt->id, fq_nio_msg_data(m), fq_nio_msg_len(m), &h,
                        p->cfg.scheduler.max_est_tokens, err, sizeof err);
        raw = (fq_ledger_bytes){p->carry_read.p, p->carry_read.len, fq_nio_msg_data(m),
                               fq_nio_msg_len(m)};
    }
    fq_ledger_body(p->ledger, seq, s, &raw, &sub, fq_nio_mono_ms(), fq_nio_unix_ms());
    px_actions(p);
    fq_nio_msg_drop(p->nio, m);
}

/* A note on the proxy's health: a stream that keeps refusing our
 * publishes, or stores them again, moves the probes; a fenced term stops
 * us. Whether a was one. */
static bool px_note_health(fq_proxy *p, const fq_ledger_act *a)
{
    switch (a->note) {
    case FQ_LNOTE_DISPATCH_STALLED: {
        bool first = !fq_probes_stall(p->probes, FQ_STALL_DISPATCH, true, a->js_err);
        if (px_warn_ok(p, "not dispatching") || first) {
            fq_sched_stats ss;
            fq_sched_stats_get(p->sched, &ss);
            fq_log(FQ_LOG_ERROR, "not dispatching: publishes to the dispatch stream keep failing",
                   FQ_STR("stream", p->cfg.streams.dispatch), FQ_INT("js_err", a->js_err),
                   FQ_UINT("failing_for_ms", a->n), FQ_UINT("tenants_parked", ss.parked));
        }
        return true;
    }
    case FQ_LNOTE_DISPATCH_AGAIN:
        fq_probes_stall(p->probes, FQ_STALL_DISPATCH, false, 0);
        fq_log(FQ_LOG_INFO, "dispatching again", FQ_UINT("failed_for_ms", a->n));
        return true;
    case FQ_LNOTE_JOURNAL_STALLED:
        fq_probes_stall(p->probes, FQ_STALL_JOURNAL, true, a->js_err);
        fq_log(FQ_LOG_ERROR, "the runs journal refuses our batches; nothing is settled until it "
               "stores them", FQ_STR("stream", p->cfg.streams.runs), FQ_INT("js_err", a->js_err),
               FQ_UINT("failing_for_ms", a->n));
        return true;
    case FQ_LNOTE_JOURNAL_AGAIN:
        fq_probes_stall(p->probes, FQ_STALL_JOURNAL, false, 0);
        fq_log(FQ_LOG_INFO, "the runs journal stores our batches again",
               FQ_UINT("failed_for_ms", a->n));
        return true;
    case FQ_LNOTE_FENCED:
        if (px_parts(p) > 1 && a->part < PX_PARTS_MAX) {
            /* Another owner wrote this partition's journal: only this one
             * is lost, let go at the next turn as a lost lease is, and its
             * key released (a planned move that was settling it is handed
             * off all the same); the others are ours still. */
            fq_log(FQ_LOG_ERROR, "a partition's journal refused our batch: another replica "
                   "wrote it, or a batch of ours whose answer was lost was stored; letting "
                   "it go and releasing its key", FQ_INT("partition", (int)a->part),
                   FQ_UINT("expected_last_seq", a->n));
            p->c.parts_fenced++;
            p->part_drop[a->part] = true;
            p->part_release[a->part] = true;
            return true;
        }
        fq_log(FQ_LOG_ERROR, "the runs journal refused our batch: another proxy leads and "
               "wrote it; changing nothing more, stopping", FQ_UINT("term", p->term),
               FQ_UINT("expected_last_seq", a->n));
        p->fenced = true;
        fq_leader_fence(p->ld);
        return true;
    default:
        return false;
    }
}

/* A note on one run or on the buffer: a line, rate-limited where a
 * tenant could cause many. */
static void px_note_run(fq_proxy *p, const fq_ledger_act *a)
{
    switch (a->note) {
    case FQ_LNOTE_EXPIRED:
        if (px_warn_ok(p, a->tenant))
            fq_log(FQ_LOG_WARN, "run timed out: its window slot is freed",
                   FQ_STR("tenant", a->tenant), FQ_STR("run_id", a->run_id),
                   FQ_UINT("run_timeout_ms", p->cfg.window.run_timeout_ms));
        return;
    case FQ_LNOTE_READ_EXPIRED:
        /* Not a lease that ran out here: the run was read back (a start,
         * a partition taken) and its slot never held. */
        if (!px_warn_ok(p, a->tenant))
            return;
        if (a->n)
            fq_log(FQ_LOG_WARN, "a run in flight read back did not fit the window or its "
                   "tenant's cap: taken as expired, with no slot, though a worker may still "
                   "run it; a late completion reconciles it",
                   FQ_STR("tenant", a->tenant), FQ_STR("run_id", a->run_id));
        else
            fq_log(FQ_LOG_WARN, "a run in flight read back had timed out while no proxy "
                   "held it: taken as expired; a late completion reconciles it",
                   FQ_STR("tenant", a->tenant), FQ_STR("run_id", a->run_id),
                   FQ_UINT("run_timeout_ms", p->cfg.window.run_timeout_ms));
        return;
    case FQ_LNOTE_DISPATCH_FAILED:
        if (px_warn_ok(p, a->tenant))
            fq_log(FQ_LOG_WARN, "a dispatch failed: the run is queued again and its tenant parked",
                   FQ_STR("tenant", a->tenant), FQ_STR("run_id", a->run_id),
                   FQ_INT("js_err", a->js_err), FQ_UINT("parked_ms", a->n),
                   FQ_UINT("failures_in_a_row", a->n2));
        return;
    case FQ_LNOTE_BODY_LOST:
        fq_log(FQ_LOG_ERROR, "a held run vanished from the submit stream",
               FQ_STR("tenant", a->tenant), FQ_UINT("seq", a->seq));
        return;
    case FQ_LNOTE_FETCH_PAUSED:
        fq_log(FQ_LOG_WARN, "fetching paused: max_buffered_runs reached", FQ_UINT("held", a->n));
        return;
    case FQ_LNOTE_EXPIRED_EARLY:
        if (px_warn_ok(p, "expired_max"))
            fq_log(FQ_LOG_WARN, "too many expired runs to remember: the oldest are forgotten "
                   "early, and a late completion for them changes nothing",
                   FQ_UINT("forgotten", a->n), FQ_UINT("remembered", PX_EXPIRED_MAX));
        return;
    case FQ_LNOTE_REFUSAL_UNSTORED:
        if (px_warn_ok(p, "refusal"))
            fq_log(FQ_LOG_WARN, "a refusal was not stored; its message is acked all the same",
                   FQ_INT("js_err", a->js_err),
                   FQ_STR("subject", p->puback_msg ? fq_nio_msg_subject(p->puback_msg) : ""));
        return;
    case FQ_LNOTE_NO_MEMORY:
        fq_log(FQ_LOG_ERROR, "out of memory holding a run", FQ_STR("tenant", a->tenant));
        return;
    default:
        return;
    }
}

/* The ledger's NOTE action: what it saw, logged, and the probes or the
 * fence moved where it says our health changed. */
static void px_note(fq_proxy *p, const fq_ledger_act *a)
{
    if (!px_note_health(p, a))
        px_note_run(p, a);
}

/* Pause or resume fetching on the consumers of kind (PX_CONS_*) of every
 * partition we own, and of those we gain later. */
static void px_pause(fq_proxy *p, int kind, bool paused)
{
    p->fetch_paused[kind] = paused;
    for (uint32_t k = 0; k < px_parts(p) && k < PX_PARTS_MAX; k++)
        if (p->part_term[k] && !(kind == PX_CONS_SUBMIT && p->part_settle_until[k]))
            fq_nio_consume_pause(p->nio, px_cons(p, kind, k), paused);
}

/* Perform the ledger's actions, in order, until none is left. */
static void px_actions(fq_proxy *p)
{
    const fq_ledger_act *next;
    while ((next = fq_ledger_next(p->ledger))) {
        fq_ledger_act a = *next;    /* the list may grow while it is performed */
        fq_nio_ackref ref = {.sseq = a.ack.sseq, .cseq = a.ack.cseq, .delivered = a.ack.delivered};
        switch (a.type) {
        case FQ_LACT_DISPATCH:
            px_dispatch_send(p, &a);
            break;
        case FQ_LACT_REFUSE:
            px_refuse(p, &a);
            break;
        case FQ_LACT_JOURNAL:
            px_journal_send(p, &a);
            break;
        case FQ_LACT_ACK:
            /* to the consumer that delivered it: its partition's */
            if (fq_nio_ack(p->nio, px_cons(p, a.cons, a.ack.part), &ref) != FQ_OK)
                fq_ledger_ack_failed(p->ledger, &a);
            break;
        case FQ_LACT_NAK:
            fq_nio_nak(p->nio, px_cons(p, a.cons, a.ack.part), &ref, a.delay_ms);
            break;
        case FQ_LACT_PAUSE:
            px_pause(p, a.cons, a.paused);
            break;
        case FQ_LACT_READ:
            px_read_body(p, &a);
            break;
        case FQ_LACT_RECONCILED: {
            px_tenant *pt = px_tenant_of_lt(a.lt);
            pt->completed++;
            p->sec_completed++;
            p->sec_actual += a.actual;
            break;
        }
        case FQ_LACT_NOTE:
            px_note(p, &a);
            break;
        }
    }
}

/* ---- ingest ----------------------------------------------------------- */

/* The subject's tenant token (lib/partition.h: its last, and with
 * partitions the partition token before it must be the tenant's); NULL
 * with err saying why. */
static const char *px_subject_tenant(const fq_proxy *p, const char *subject, const char *prefix,
                                     size_t *len, char *err, size_t errlen)
{
    const char *t = NULL;
    fq_partition_tenant(&t, len, subject, prefix, p->cfg.partitions, err, errlen);
    return t;
}

/* The claim headers, in the order of px_submit_headers. */
static const char *const px_claim_names[] = {FQ_HDR_RUN_ID, FQ_HDR_WORKFLOW, FQ_HDR_EST_TOKENS,
                                             FQ_HDR_SUBTENANT, FQ_HDR_CLASS};
#define PX_CLAIMS (sizeof px_claim_names / sizeof *px_claim_names)

/* Submit m's header lines into lines, its claim headers (read in any case,
 * on the same pass) into *h; FQ_EINVAL (bad says why: a header unfit to
 * carry) or FQ_ENOMEM as fq_nio_msg_carry_lines, *h read all the same. A
 * header with an empty value counts as absent: clients differ in whether
 * they send one at all. */
static fq_status px_submit_headers(fq_submit_headers *h, fq_buf *lines, char bad[160],
                                   const fq_nio_msg *m)
{
    const char *v[PX_CLAIMS];
    fq_nio_claims cl = {.names = px_claim_names, .n = PX_CLAIMS, .vals = v};
    fq_status s = fq_nio_msg_carry_lines(lines, bad, &cl, m);
    for (size_t i = 0; i < PX_CLAIMS; i++)
        v[i] = v[i] && *v[i] ? v[i] : NULL;
    *h = (fq_submit_headers){.run_id = v[0], .workflow = v[1], .est_tokens = v[2],
                             .subtenant = v[3], .cls = v[4], .cls_twice = cl.twice >> 4 & 1};
    for (size_t i = 0; i < 4 && !h->twice; i++)
        h->twice = cl.twice >> i & 1 ? px_claim_names[i] : NULL;
    return s;
}

/* Whether the dispatch of a submit (body of len bytes, its producer's
 * headers the carried lines in p->carry) as run run_id would be stored:
 * its header block within JetStream's limit and the whole within
 * max_payload. On FQ_OK *size is the dispatch's bytes, else err says why. */
static fq_status px_dispatch_fits(size_t *size, fq_proxy *p, size_t len, const char *tenant,
                                  const char *run_id, const fq_submit *sub, char *err,
                                  size_t errlen)
{
    fq_ledger_dhdrs d;
    fq_ledger_dispatch_hdrs(&d, tenant, run_id, sub->workflow, sub->subtenant, UINT64_MAX,
                            UINT64_MAX, UINT64_MAX, true);
    fq_nio_hdr h[FQ_LEDGER_DISPATCH_HDRS];
    for (size_t i = 0; i < d.n; i++)
        h[i] = (fq_nio_hdr){d.h[i].name, d.h[i].value};
    fq_nio_out o = {.subject = p->cfg.subjects.dispatch, .len = len, .hdrs = h, .n_hdrs = d.n,
                    .carry_lines = p->carry.p, .carry_len = p->carry.len};
    fq_nio_size sz;
    *size = 0;
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

/* What submit m's subject and fields say, into in: its tenant (into
 * tenant), its fields (into *sub), its producer's header lines (into
 * p->carry), or why it is refused (in->status, the sentence in err: a bad
 * field before a header unfit to carry). false: no memory for its header
 * lines, not a client's fault: it is left in JetStream. */
static bool px_submit_parse(fq_ledger_submit *in, fq_submit *sub, char *tenant, char *err,
                            size_t errlen, fq_proxy *p, const fq_nio_msg *m)
{
    size_t tlen = 0;
    const char *tid = px_subject_tenant(p, in->subject, p->cfg.subjects.submit, &tlen, err,
                                        errlen);
    if (!tid) {
        in->status = FQ_EINVAL; /* counted as an invalid subject, refused with err */
        in->error = err;
        return true;
    }
    if (!fq_tenant_id_valid(tid, tlen)) {
        in->status = FQ_EINVAL;
        in->error = "the subject's last token is not a tenant id (" FQ_TENANT_RULE ")";
        return true;
    }
    memcpy(tenant, tid, tlen);
    tenant[tlen] = '\0';
    in->tenant = tenant;
    fq_submit_headers h;
    char bad[160];
    fq_status hs = px_submit_headers(&h, &p->carry, bad, m);
    if (hs == FQ_ENOMEM)
        return false;
    in->status = fq_submit_parse(sub, tenant, fq_nio_msg_data(m), fq_nio_msg_len(m), &h,
                                 p->cfg.scheduler.max_est_tokens, err, errlen);
    in->sub = sub;
    in->error = err;
    if (in->status == FQ_OK && hs != FQ_OK) {
        in->status = FQ_EINVAL;
        snprintf(err, errlen, "%s", bad);
    }
    return true;
}

/* Submit m, parsed into in, its dispatch sized, or why it is refused
 * (in->status, err). What can never be dispatched is refused now, not
 * found out at its dispatch, where it would block its tenant for ever. */
static void px_submit_fits(fq_ledger_submit *in, char *err, size_t errlen, fq_proxy *p,
                           fq_nio_msg *m, const fq_submit *sub)
{
    if (in->status != FQ_OK)
        return;
    size_t size = 0;
    char run_id[FQ_RUN_ID_MAX + 1];
    fq_ledger_run_id(run_id, p->ledger, sub, in->ack.sseq);
    in->status = px_dispatch_fits(&size, p, fq_nio_msg_len(m), in->tenant, run_id, sub, err,
                                  errlen);
    in->size = (uint32_t)size;
    in->raw.hdr = p->carry.p;
    in->raw.hdr_len = p->carry.len;
}

/* A submit: what can never be dispatched (no tenant in its subject, a body
 * or headers that do not parse, a dispatch too large) is found here, where
 * the message is, and the ledger decides the rest. */
static void px_on_submit(fq_proxy *p, fq_nio_event *ev)
{
    fq_nio_msg *m = ev->msg;
    fq_ledger_submit in = {.ack = {.sseq = ev->ack.sseq, .cseq = ev->ack.cseq,
                                   .delivered = ev->ack.delivered,
                                   .part = px_ev_part(p, ev)},
                           .ts_ms = ev->ts_ms, .subject = fq_nio_msg_subject(m),
                           .status = FQ_OK,
                           .raw = {.body = fq_nio_msg_data(m), .body_len = fq_nio_msg_len(m)}};
    char tenant[FQ_TENANT_MAX + 1], err[256];
    fq_submit sub;
    if (!px_submit_parse(&in, &sub, tenant, err, sizeof err, p, m)) {
        if (px_part_fresh(p, in.ack.part))
            fq_nio_nak(p->nio, ev->source, &ev->ack, FQ_LEDGER_PARK_MAX_MS);
    } else {
        p->c.subtenant_refused += in.sub && in.status != FQ_OK && sub.subtenant_refused;
        px_submit_fits(&in, err, sizeof err, p, m, &sub);
        px_ledger_fresh(p);
        fq_ledger_submit_in(p->ledger, &in, fq_nio_mono_ms(), fq_nio_unix_ms());
        p->cur_msg = m;
        px_actions(p);
        p->cur_msg = NULL;
    }
    fq_nio_msg_drop(p->nio, m);
}

/* ---- dispatch ----------------------------------------------------------- */

static void px_dispatch(fq_proxy *p)
{
    p->unsent = false;
    do {
        p->read_asked = false;
        fq_ledger_dispatch(p->ledger, p->pubs < PX_MAX_PUBS ? PX_MAX_PUBS - p->pubs : 0,
                           fq_nio_mono_ms(), fq_nio_unix_ms());
        px_actions(p);
    } while (p->read_asked && !p->unsent && p->pubs < PX_MAX_PUBS);
}

/* ---- PubAcks ------------------------------------------------------------- */

static void px_on_puback(fq_proxy *p, fq_nio_event *ev)
{
    int kind = TK_KIND(ev->token);
    if (p->pubs)
        p->pubs--;
    if (kind == TK_JMARK) {
        uint32_t k = (uint32_t)TK_VAL(ev->token);
        if (p->jmark_sent)
            p->jmark_sent--;
        /* P > 1: a marker marks only the adoption it was sent for (one let
         * go while it was in flight is not ours: the next sends its own) */
        bool marks = ev->status == FQ_OK && k < PX_PARTS_MAX && !p->part_marked[k];
        if (marks && px_parts(p) > 1)
            marks = fq_ledger_part_marked(p->ledger, k, p->part_mark_term[k], ev->seq);
        else if (marks)
            fq_ledger_journal_marked(p->ledger, ev->seq);
        if (marks) {
            p->part_marked[k] = true;
            p->jmarks++;
        }
        p->jmarked = p->jmarks == px_parts(p);
        if (ev->status != FQ_OK && px_warn_ok(p, "journal marker"))
            fq_log(FQ_LOG_WARN, "cannot store the journal's term marker; not serving until it "
                   "is stored", FQ_STR("stream", p->cfg.streams.runs),
                   FQ_INT("js_err", ev->err_code));
        fq_nio_msg_drop(p->nio, ev->msg);
        return;
    }
    if (!fq_ledger_token_ours(ev->token)) {
        fq_nio_msg_drop(p->nio, ev->msg);
        return;
    }
    enum fq_ledger_pub outcome = ev->status == FQ_OK ? (ev->duplicate ? FQ_LEDGER_PUB_DUPLICATE
                                                                       : FQ_LEDGER_PUB_STORED)
                                 : ev->err_code ? FQ_LEDGER_PUB_ERROR
                                                : FQ_LEDGER_PUB_FAILED;
    px_ledger_fresh(p);
    p->puback_msg = ev->msg;
    bool retry = fq_ledger_puback(p->ledger, ev->token, outcome, ev->err_code, ev->seq,
                                  fq_nio_mono_ms(), fq_nio_unix_ms());
    px_actions(p);
    p->puback_msg = NULL;
    if (retry || (outcome >= FQ_LEDGER_PUB_ERROR && kind == FQ_LTK_JOURNAL && !p->fenced))
        if (px_warn_ok(p, "publish"))
            fq_log(FQ_LOG_WARN, "a publish failed; retrying", FQ_INT("kind", kind),
                   FQ_INT("js_err", ev->err_code));
    if (retry) {
        px_retry_add(p, ev->token, ev->msg);
        return;
    }
    fq_nio_msg_drop(p->nio, ev->msg);
}

/* Whether the publish of token may be sent again now: while its
 * partition's lease is fresh (P > 1: the ledger knows which, and it is
 * ours), else while every lease we hold is. */
static bool px_retry_fresh(const fq_proxy *p, uint64_t token)
{
    uint32_t k;
    if (px_parts(p) > 1 && fq_ledger_token_part(&k, p->ledger, token) && k < PX_PARTS_MAX &&
        p->part_term[k])
        return px_part_fresh(p, k);
    return px_fresh(p);
}

static void px_retry_due(fq_proxy *p)
{
    if (!p->nretry || !p->connected)
        return;
    uint64_t now = fq_nio_mono_ms();
    size_t k = 0;
    for (size_t i = 0; i < p->nretry; i++) {
        px_retry *r = &p->retry[i];
        if (r->at <= now && px_retry_fresh(p, r->token) &&
            fq_nio_republish(p->nio, &r->msg, r->token) == FQ_OK) {
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
static uint64_t px_keep_done_of(const fq_config *c)
{
    uint64_t dup = c->streams.duplicate_window_ms;
    return dup > c->window.run_timeout_ms ? dup : c->window.run_timeout_ms;
}

static uint64_t px_keep_done_ms(const fq_proxy *p)
{
    return px_keep_done_of(&p->cfg);
}

/*
 * A completion counts only for a run fairq dispatched and still remembers,
 * on that run's tenant's subject (the ledger decides, docs/protocol.md
 * section 3). What needs the message is read here: its subject's tenant and
 * its body.
 */
static void px_on_done(fq_proxy *p, fq_nio_event *ev)
{
    fq_nio_msg *m = ev->msg;
    size_t tlen = 0;
    char tenant[FQ_TENANT_MAX + 1], err[320];
    const char *tid = px_subject_tenant(p, fq_nio_msg_subject(m), p->cfg.subjects.done, &tlen,
                                        err, sizeof err);
    fq_completion c;
    fq_ledger_done in = {.ack = {.sseq = ev->ack.sseq, .cseq = ev->ack.cseq,
                                 .delivered = ev->ack.delivered,
                                 .part = px_ev_part(p, ev)},
                         .status = FQ_EINVAL, .error = err, .c = &c,
                         .subject = fq_nio_msg_subject(m),
                         .raw = {.body = fq_nio_msg_data(m), .body_len = fq_nio_msg_len(m)},
                         .ts_ms = ev->ts_ms};
    if (!tid) {
        /* err says why: a partition token that is not the tenant's */
    } else if (!fq_tenant_id_valid(tid, tlen)) {
        snprintf(err, sizeof err, "the completion's subject has no valid tenant as its last token");
    } else {
        memcpy(tenant, tid, tlen);     /* tid points into m */
        tenant[tlen] = '\0';
        in.tenant = tenant;
        in.status = fq_completion_parse(&c, fq_nio_msg_data(m), fq_nio_msg_len(m),
                                        p->cfg.scheduler.max_est_tokens, err, sizeof err);
    }
    px_ledger_fresh(p);
    fq_ledger_done_in(p->ledger, &in, fq_nio_mono_ms(), fq_nio_unix_ms());
    p->cur_msg = m;
    px_actions(p);
    p->cur_msg = NULL;
    fq_nio_msg_drop(p->nio, m);
}

/* ---- the proxy as a whole -------------------------------------------- */

/* ---- one window across replicas (lib/share, docs/scaling.md) ------------ */

/* This replica's id in heartbeats: its replica id (replica_id, else the
 * one made at start), or a hash of it if longer than a heartbeat's id. */
static void px_share_id(char out[FQ_SHARE_ID_MAX + 1], const char *lease_id)
{
    size_t n = strlen(lease_id);
    if (n <= FQ_SHARE_ID_MAX)
        memcpy(out, lease_id, n + 1);   /* not snprintf: -O1 cannot see the length checked */
    else
        snprintf(out, FQ_SHARE_ID_MAX + 1, "fairq-%016" PRIx64, fq_fnv1a(lease_id));
}

/* The reserve in tokens: as configured, else one average run's share of
 * the token window. */
static uint64_t px_share_reserve_tokens(const fq_config *c)
{
    uint64_t t = c->window.max_in_flight_tokens, r = c->window.max_in_flight;
    if (c->window.share_reserve_tokens)
        return c->window.share_reserve_tokens;
    return t && r ? (t + r - 1) / r : 0;
}

/* With window.share on: listen to the heartbeats, the first beat at the
 * next turn. Off, nothing changes: the window is the config's. */
static fq_status px_share_start(fq_proxy *p)
{
    if (!p->cfg.window.share)
        return FQ_OK;
    char id[FQ_SHARE_ID_MAX + 1];
    px_share_id(id, p->lease_id);
    fq_share_opts so = {.max_runs = p->cfg.window.max_in_flight,
                        .max_tokens = p->cfg.window.max_in_flight_tokens,
                        .reserve_runs = p->cfg.window.share_reserve_runs,
                        .reserve_tokens = px_share_reserve_tokens(&p->cfg),
                        .period = PX_SHARE_PERIOD_MS};
    fq_status s = fq_share_create(&p->share, &so, id, fq_nio_mono_ms());
    if (s == FQ_OK)
        s = fq_nio_listen(p->nio, PX_SUB_SHARE, p->cfg.subjects.share, PX_SHARE_QUEUED);
    p->share_next = 0;
    return s;
}

/* The scheduler's window is this replica's part as the last tick set it. */
static void px_share_apply(fq_proxy *p)
{
    const fq_share_limits *l = &p->share_lim;
    p->share_closed = !l->runs || !l->tokens;
    /* 0 is no limit to the scheduler: closed, it keeps one and is not asked */
    uint32_t runs = l->runs == FQ_SHARE_UNLIMITED ? 0 : l->runs ? (uint32_t)l->runs : 1;
    fq_sched_set_window(p->sched, runs,
                        l->tokens == FQ_SHARE_UNLIMITED ? 0 : l->tokens ? l->tokens : 1);
}

/* Every period, and early when its backlogged weight changed
 * (fq_share_due): this replica's part of the window from what it heard,
 * applied to the scheduler, and its heartbeat published. In the turn a
 * beat was heard, the part again without a beat. */
static void px_share_tick(fq_proxy *p, uint64_t now)
{
    if (!p->share)
        return;
    fq_sched_stats ss;
    fq_sched_stats_get(p->sched, &ss);
    bool due = now >= p->share_next || fq_share_due(p->share, ss.active_weight, now);
    if (!due && !p->share_heard)
        return;
    p->share_heard = false;
    if (due)
        p->share_next = now + PX_SHARE_PERIOD_MS;
    fq_share_set_window(p->share, p->cfg.window.max_in_flight,
                        p->cfg.window.max_in_flight_tokens, p->cfg.window.share_reserve_runs,
                        px_share_reserve_tokens(&p->cfg));
    /* the round from the wall clock, one number for every replica at once */
    int64_t unix_ms = fq_nio_unix_ms();
    fq_share_local me = {.weight = ss.active_weight, .queued_runs = ss.queued,
                         .queued_tokens = ss.queued_tokens, .runs = ss.in_flight,
                         .tokens = ss.in_flight_tokens,
                         .round = unix_ms > 0 ? (uint64_t)unix_ms / PX_SHARE_PERIOD_MS : 0};
    fq_share_beat b;
    fq_share_tick(&p->share_lim, due ? &b : NULL, p->share, &me, now);
    px_share_apply(p);
    if (!due)
        return;
    char buf[FQ_SHARE_BEAT_MAX_BYTES];
    size_t n = fq_share_beat_format(buf, sizeof buf, &b);
    if (n && p->connected &&
        fq_nio_core_publish(p->nio, p->cfg.subjects.share, buf, n) != FQ_OK &&
        px_warn_ok(p, "heartbeat"))
        fq_log(FQ_LOG_WARN, "cannot publish the heartbeat",
               FQ_STR("subject", p->cfg.subjects.share));
}

/* A heartbeat heard: anyone allowed on the subject may send one, so it is
 * read as untrusted, refused with its reason (logged at a bounded rate)
 * and counted. The caller drops the message. */
static void px_on_beat(fq_proxy *p, fq_nio_event *ev)
{
    fq_share_beat b;
    char err[256];
    if (fq_share_beat_parse(&b, fq_nio_msg_data(ev->msg), fq_nio_msg_len(ev->msg), err,
                            sizeof err) != FQ_OK) {
        p->c.share_refused++;
        if (px_warn_ok(p, "heartbeat refused"))
            fq_log(FQ_LOG_WARN, "heartbeat refused", FQ_STR("subject", p->cfg.subjects.share),
                   FQ_STR("reason", err));
    } else if (fq_share_heard(p->share, &b, fq_nio_mono_ms()) != FQ_OK) {
        p->c.share_refused++;
        if (px_warn_ok(p, "heartbeat refused"))
            fq_log(FQ_LOG_WARN, "heartbeat refused: no room for another replica",
                   FQ_STR("id", b.id));
    } else {
        p->share_heard = true;  /* taken into the limits this turn (px_share_tick) */
    }
}

static uint64_t px_share_peers(fq_proxy *p)
{
    fq_share_stats st = {0};
    if (p->share)
        fq_share_stats_get(&st, p->share);
    return st.live;
}

/* Heartbeats dropped on arrival, too many waiting. */
static uint64_t px_share_dropped(fq_proxy *p)
{
    fq_nio_sub_stats st;
    fq_nio_sub_stats_get(&st, p->nio, PX_SUB_SHARE);
    return st.busy;
}

/* The overall figures the run ledger keeps: its counters and its state. */
static void px_overall_ledger(fq_metrics_overall *a, const fq_ledger *l)
{
    const fq_ledger_counters *lc = fq_ledger_counters_get(l);
    fq_ledger_stats ls;
    fq_ledger_stats_get(&ls, l);
    a->expired_leases = lc->expired;
    a->buffered_runs = ls.held;
    a->buffered_bytes = ls.buffered_bytes;
    a->fetch_paused = ls.fetch_paused;
    a->fetch_pauses = lc->fetch_pauses;
    a->given_back_runs = ls.given_back;
    a->given_back = lc->given_back;
    a->given_back_lost = lc->given_back_lost;
    a->invalid_subject_runs = lc->invalid_subject;
    a->submitted_runs = lc->submitted;
    a->redelivered_runs = lc->redelivered;
    a->duplicates_acked = lc->duplicates_acked;
    a->dispatched_runs = lc->dispatched;
    a->dispatch_duplicates = lc->dispatch_duplicates;
    a->adopted_runs = lc->adopted;
    a->debts_forgiven = lc->debts_forgiven;
    a->expired_forgotten_early = lc->expired_forgotten_early;
    a->completion_copies_skipped = lc->completion_copies_skipped;
    a->completions_deferred = lc->completions_deferred;
    a->completions_early_applied = lc->completions_early_applied;
    a->redispatched = lc->redispatched;
    a->done_unconfirmed_resent = lc->done_unconfirmed_resent;
    a->dispatch_unanswered = lc->dispatch_unanswered;
    a->refusals_repeated = lc->refusals_repeated;
    a->unowned = lc->unowned;
    a->possible_duplicates = lc->possible_duplicates;
    a->subtenant_overflow = lc->subtenant_overflow;
    a->records_foreign = lc->records_foreign;
    a->parts_adopted = lc->parts_adopted;
    a->parts_released = lc->parts_released;
    a->released_queued = lc->released_queued;
    a->released_dispatched = lc->released_dispatched;
    a->index_only_runs = ls.index_only;
    a->body_reads = lc->body_reads;
    a->body_lost = lc->body_lost;
    a->completions[FQ_COMPLETION_HELD] = lc->completions;
    a->completions[FQ_COMPLETION_UNHELD] = lc->completions_unheld;
    a->completions[FQ_COMPLETION_DUPLICATE] = lc->completions_duplicate;
    a->completions[FQ_COMPLETION_INVALID] = lc->completions_invalid;
    a->completions[FQ_COMPLETION_UNKNOWN] = lc->completions_unknown;
    a->publish_failures = lc->pub_failures;
    a->refusals_unstored = lc->refusals_unstored;
    a->dispatch_failures = lc->dispatch_failures;
    memcpy(a->rejected_runs, lc->rejected, sizeof a->rejected_runs);
}

static uint64_t px_refused_count(const fq_proxy *p);

/* The proxy as a whole now, for the stats reply and the metrics snapshot. */
static void px_overall(fq_metrics_overall *a, fq_proxy *p)
{
    fq_sched_stats ss;
    fq_sched_stats_get(p->sched, &ss);
    fq_nio_sub_stats ns, xs;
    fq_nio_sub_stats_get(&ns, p->nio, PX_SUB_ADMIN);
    fq_nio_sub_stats_get(&xs, p->nio, PX_SUB_EXPLAIN);
    ns.busy += xs.busy;
    ns.no_reply += xs.no_reply;
    const fq_admin_counters *ac = fq_admin_counters_get(p->admin);
    fq_owner_stats os = {0};
    if (p->ld)
        fq_owner_stats_get(&os, fq_leader_owner(p->ld));
    fq_probes_unowned(p->probes, px_parts(p) > 1 ? os.unassigned : 0, os.bound);
    *a = (fq_metrics_overall){
        .in_flight_runs = ss.in_flight, .in_flight_tokens = ss.in_flight_tokens,
        .queued_runs = ss.queued, .queued_tokens = ss.queued_tokens, .tenants = ss.tenants,
        .active_tenants = ss.active, .window_runs = p->cfg.window.max_in_flight,
        .window_tokens = p->cfg.window.max_in_flight_tokens, .nats_connected = p->connected,
        .nats_reconnects = p->c.reconnects, .config_reloads = p->c.reloads,
        .config_reload_failures = p->c.reload_failures, .lease_held = p->leader,
        .dispatch_rate = p->rate_runs, .partitions_owned = os.owned,
        .partitions_bound = px_parts(p) > 1 ? os.bound : 1,
        .partitions_unassigned = os.unassigned,
        .partition_handovers = os.gained + os.lost, .partitions_fenced = p->c.parts_fenced,
        .handovers_unsettled = p->c.handovers_unsettled,
        .submits_stranded = p->c.submits_stranded, .consumers_refused = px_refused_count(p),
        .lease_values_refused = os.refused,
        .lease_renew_seconds = (double)os.renew_ms_last / 1000.0,
        .lease_renew_max_seconds = (double)os.renew_ms_max / 1000.0,
        .dispatch_token_rate = p->rate_tokens, .completion_rate = p->rate_completed,
        .actual_token_rate = p->rate_actual, .journal_refused_records = p->c.journal_refused,
        .overrides_refused = p->c.overrides_refused,
        .subtenant_refused = p->c.subtenant_refused,
        .share_runs = p->share && p->share_lim.runs != FQ_SHARE_UNLIMITED ? p->share_lim.runs
                                                                           : 0,
        .share_tokens = p->share && p->share_lim.tokens != FQ_SHARE_UNLIMITED
                        ? p->share_lim.tokens : 0,
        .share_peers = px_share_peers(p),
        .share_refused = p->c.share_refused + px_share_dropped(p),
        .admin_forwarded = p->c.admin_forwarded, .parked_tenants = ss.parked,
        .dispatch_stalled = fq_probes_stalled(p->probes, FQ_STALL_DISPATCH),
        .admin_reply_failures = ac->reply_failures, .admin_requests_busy = ac->busy + ns.busy + p->c.admin_fwd_busy,
        .admin_requests_no_reply = ns.no_reply, .admin_requests_too_long = ac->too_long,
        .admin_requests_invalid = ac->invalid,
        .max_payload = p->max_payload > 0 ? (uint64_t)p->max_payload : 0};
    px_overall_ledger(a, p->ledger);
    _Static_assert(PX_OWN_MAX <= FQ_METRICS_PARTS, "a series for every partition owned");
    for (uint32_t j = 0; j < PX_OWN_MAX; j++) {
        uint32_t k = p->slot_part[j] ? p->slot_part[j] - 1u : 0;
        bool owned = p->slot_part[j] && p->part_term[k] != 0;
        a->parts.owned[j] = a->parts_backlog.owned[j] = owned;
        a->parts.part[j] = a->parts_backlog.part[j] = k;
        a->parts.queued[j] = owned ? p->part_queued[k] : 0;
        a->parts_backlog.queued[j] = owned ? p->part_backlog[k] : 0;
    }
}

/* ---- configuration and reload ------------------------------------------- */

/* scheduler.classes, checked when the config was loaded. */
static fq_classes px_classes(const fq_config *c)
{
    fq_classes cl;
    fq_classes_parse(&cl, c->scheduler.classes);
    return cl;
}

/* What the ledger and its scheduler must agree on, as config c says: the
 * scheduler takes it through fq_ledger_sched_opts, not a copy of its own. */
static void px_ledger_shared(fq_ledger_opts *lo, const fq_config *c)
{
    lo->run_timeout_ms = c->window.run_timeout_ms;
    lo->keep_done_ms = px_keep_done_of(c);
    lo->dup_window_ms = c->streams.duplicate_window_ms;
    lo->max_expired = PX_EXPIRED_MAX;
    lo->classes = px_classes(c);
}

static fq_sched_opts px_sched_opts(const fq_config *c)
{
    fq_sched_opts o = {.quantum = c->scheduler.quantum_tokens,
                       .max_est_tokens = c->scheduler.max_est_tokens,
                       .max_in_flight = c->window.max_in_flight,
                       .max_in_flight_tokens = c->window.max_in_flight_tokens};
    fq_ledger_opts lo = {0};
    px_ledger_shared(&lo, c);
    fq_ledger_sched_opts(&o, &lo);
    /* Sub-tenants as many as any plan or override may allow: each tenant's
     * own cap (0: none, its runs one FIFO) is its policy's, so plans and
     * overrides change it without a restart. With classes too, classes
     * first, then sub-tenants within a class. */
    o.max_subtenants = FQ_POLICY_MAX_SUBTENANTS;
    return o;
}

/* The ledger's options as config c and the server's max_payload say. */
static fq_ledger_opts px_ledger_opts(fq_proxy *p, const fq_config *c);

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

/* Everything that can fail is done before anything changes. The new
 * policy is given the overrides in force (fq_ovr_carry): an override
 * naming a plan it lacks refuses the reload, as it would silently change
 * that tenant. */
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
    fq_ledger_opts lo = px_ledger_opts(p, &merged);
    if (s == FQ_OK && (s = fq_ledger_opts_check(&lo)) != FQ_OK)
        snprintf(err, errlen, "the run ledger cannot take these limits (limits.*, window.*): %s",
                 fq_status_text(s));
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
    (void)fq_ledger_set_opts(p->ledger, &lo);  /* checked above: it cannot fail */
    /* the scheduler took the config's window: this replica's part again,
     * and a new split of the new window at the next turn */
    if (p->share) {
        px_share_apply(p);
        p->share_next = 0;
    }
    px_actions(p);
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

/* The proxy's tenant of a scheduler's tenant: each is made with the other
 * (px_tenant_get) and forgotten with it (px_forget_idle). */
static const px_tenant *px_tenant_of_sched(fq_proxy *p, const fq_tenant *ft)
{
    if (!ft)
        return NULL;
    fq_tenant_info ti;
    fq_tenant_info_get(ft, &ti);
    return px_tenant_find(p, ti.id, strlen(ti.id));
}

static const void *px_admin_tenant_at(void *arg, size_t i)
{
    fq_proxy *p = arg;
    return px_tenant_of_sched(p, fq_sched_rank_at(p->sched, i));
}

static const void *px_admin_tenant_after(void *arg, const void *t)
{
    fq_proxy *p = arg;
    return px_tenant_of_sched(p, fq_sched_rank_next(p->sched, ((const px_tenant *)t)->t));
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

static size_t px_admin_tenant_subs(void *arg, const void *t, fq_sub_info *out, size_t n)
{
    return fq_sched_sub_top(out, n, ((fq_proxy *)arg)->sched, ((const px_tenant *)t)->t);
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

static const char *px_admin_replica_id(void *arg)
{
    return ((fq_proxy *)arg)->lease_id;
}

/* The replicas alive in this one's view of the registry; with P = 1 the
 * leader alone, the one that answers admin requests. */
static const char *px_admin_replica_at(void *arg, size_t i)
{
    fq_proxy *p = arg;
    if (!p->ld)
        return i == 0 ? p->lease_id : NULL;
    return fq_owner_live_at(fq_leader_owner(p->ld), i);
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

/* What <explain>.<tenant> tells of tenant and its run run_id: each fact
 * read in O(1), from the scheduler, the ledger and the window. */
static void px_admin_explain(void *arg, const char *tenant, const char *run_id, fq_explain *out,
                             uint64_t now)
{
    fq_proxy *p = arg;
    const px_tenant *pt = px_tenant_find(p, tenant, strlen(tenant));
    fq_sched_stats ss;
    fq_sched_stats_get(p->sched, &ss);
    out->where = run_id[0] ? fq_ledger_run_where(p->ledger, tenant, run_id, &out->est)
                 : FQ_LW_QUEUED;
    out->drain_tokens_per_sec = p->rate_tokens;
    out->window_runs = ss.in_flight;
    out->window_tokens = ss.in_flight_tokens;
    out->window_max_runs = p->cfg.window.max_in_flight;
    out->window_max_tokens = p->cfg.window.max_in_flight_tokens;
    /* the window this replica may fill is its part (shown while it is one
     * run or more: a part of none reads as no limit here) */
    const fq_share_limits *l = &p->share_lim;
    if (p->share && l->runs && l->runs < UINT32_MAX)
        out->window_max_runs = (uint32_t)l->runs;
    if (p->share && l->tokens && l->tokens != FQ_SHARE_UNLIMITED)
        out->window_max_tokens = l->tokens;
    fq_policy_resolved pr;
    if (fq_policy_resolve(&pr, p->policy, tenant) == FQ_OK)
        out->policy = pr.p;
    if (!pt)
        return;
    out->known = true;
    fq_tenant_info_get(pt->t, &out->info);
    out->others_queued = ss.active - (out->info.queued > 0);
    /* A queued run's own tokens are among its tenant's queued ones; a run
     * submitted now is counted without its own. Both bounds from above. */
    const uint32_t est = 0;
    out->tokens_ahead = fq_sched_tokens_ahead(p->sched, pt->t, est);
    out->rate_wait_ms = fq_sched_rate_wait(p->sched, pt->t, est, now);
    out->wait_ms = fq_ledger_wait_ms(p->ledger, &pt->lt, est, now, &out->wait_known);
    const fq_run *r;
    if (run_id[0] && fq_ledger_run_subtenant(out->subtenant, p->ledger, tenant, run_id)) {
        out->sub_known = fq_sched_sub_info(&out->sub, p->sched, pt->t, out->subtenant,
                                           strlen(out->subtenant)) == FQ_OK;
    } else if (run_id[0] && (r = fq_ledger_queued_run(p->ledger, tenant, run_id)) &&
               fq_sched_run_sub_info(&out->sub, p->sched, r) == FQ_OK) {
        /* queued with its body not in memory: its claim is its lane's
         * sub-tenant (none named where it is the overflow one) */
        out->sub_known = true;
        fq_str_copy(out->subtenant, sizeof out->subtenant, out->sub.name);
    }
}

/* A request about a tenant held by another replica while PX_FWD_MAX are
 * handed on already: answered busy, with when the first of them ends, and
 * counted (fairq_admin_requests_busy_total). Answered here instead, it
 * would read as this replica's view, which does not hold the tenant. */
static void px_fwd_busy(fq_proxy *p, const fq_nio_msg *req, const char *holder, uint64_t now)
{
    uint64_t first = UINT64_MAX;
    for (size_t i = 0; i < PX_FWD_MAX; i++)
        if (p->fwd[i].req && p->fwd[i].until < first)
            first = p->fwd[i].until;
    uint64_t wait = first > now && first != UINT64_MAX ? first - now : 1;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"ok\":false,\"busy\":true,\"retry_ms\":%" PRIu64
                     ",\"replica\":\"%s\",\"error\":\"busy: %d requests handed on to the "
                     "replicas holding their tenants' partitions are waiting for an answer; "
                     "the tenant's is held by %s; retry in %" PRIu64 " ms\"}", wait, p->lease_id,
                     PX_FWD_MAX, holder, wait);
    p->c.admin_fwd_busy++;
    if (n > 0 && (size_t)n < sizeof buf)
        fq_nio_reply(p->nio, req, buf, (size_t)n);
}

/* P > 1: a request about tenant[0..len), whose partition k we hold but
 * have not read back yet (taken, its journal being read), is answered busy
 * (fairq-admin asks again after retry_ms) and counted: answered now, its
 * tenant would read as unknown, its debt as none. Whether it was. */
static bool px_admin_loading(fq_proxy *p, const fq_nio_msg *req, const char *tenant, size_t len)
{
    if (px_parts(p) == 1 || !fq_tenant_id_valid(tenant, len))
        return false;
    uint32_t k = fq_partition_of(tenant, len, px_parts(p));
    if (k >= PX_PARTS_MAX || !(p->part_want[k] || p->part_loading[k]))
        return false;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "{\"ok\":false,\"busy\":true,\"retry_ms\":%d,"
                     "\"replica\":\"%s\",\"error\":\"busy: partition %" PRIu32 ", which holds "
                     "the tenant, was taken by this replica and is being read back from its "
                     "journal; retry in %d ms\"}", PX_LOADING_RETRY_MS, p->lease_id, k,
                     PX_LOADING_RETRY_MS);
    p->c.admin_fwd_busy++;
    if (n > 0 && (size_t)n < sizeof buf)
        fq_nio_reply(p->nio, req, buf, (size_t)n);
    return true;
}

/* P > 1: a request about tenant[0..len) handed on to the replica that
 * holds its partition, at <admin>.replica.<holder>.<what>, if that is not
 * us and we know who: its answer comes back here and is relayed
 * (px_fwd_answer). With PX_FWD_MAX waiting already, answered busy here
 * (px_fwd_busy). Whether it was handed on or answered; if handed on, *req
 * is held (NULL). */
static bool px_admin_forward(fq_proxy *p, fq_nio_msg **req, const char *tenant, size_t len,
                             const char *what)
{
    if (!fq_tenant_id_valid(tenant, len))
        return false;   /* answered here, with the refusal's reason */
    uint32_t k = fq_partition_of(tenant, len, px_parts(p));
    uint64_t now = fq_nio_mono_ms();
    const char *h = fq_owner_holder(fq_leader_owner(p->ld), (int32_t)k, now);
    if (!h[0] || strcmp(h, p->lease_id) == 0)
        return px_admin_loading(p, *req, tenant, len);
    if (p->nfwd == PX_FWD_MAX) {
        px_fwd_busy(p, *req, h, now);
        return true;
    }
    px_fwd *f = p->fwd;
    while (f->req)
        f++;
    char subject[512], reply[sizeof p->fwd_prefix + FQ_U64_DEC_MAX + 2];
    snprintf(subject, sizeof subject, "%s.replica.%s.%s", p->cfg.subjects.admin, h, what);
    snprintf(reply, sizeof reply, "%s.%" PRIu64, p->fwd_prefix, p->fwd_seq + 1);
    if (fq_nio_forward(p->nio, *req, subject, reply) != FQ_OK)
        return false;
    *f = (px_fwd){.req = *req, .seq = ++p->fwd_seq, .until = now + PX_FWD_WAIT_MS};
    fq_str_copy(f->holder, sizeof f->holder, h);
    *req = NULL;
    p->nfwd++;
    p->c.admin_forwarded++;
    return true;
}

/* Ask for partition k's first stored submit: on <fwd_prefix>.g<k>. */
static void px_strand_ask(fq_proxy *p, uint32_t k)
{
    char reply[sizeof p->fwd_prefix + 16], filter[320];
    snprintf(reply, sizeof reply, "%s.g%" PRIu32, p->fwd_prefix, k);
    if (px_parts(p) > 1)
        snprintf(filter, sizeof filter, "%s.%" PRIu32 ".*", p->cfg.subjects.submit, k);
    else
        snprintf(filter, sizeof filter, "%s", p->submit_filter);
    fq_nio_first_stored_ask(p->nio, p->cfg.streams.submit, filter, reply);
}

/* Ask owned partition k's submit consumer for its counts: the answer
 * comes on <fwd_prefix>.c<k>t<term> (px_backlog_answer), so that one asked
 * of an earlier term's consumer (k lost and taken again meanwhile) is not
 * taken for this term's. */
static void px_backlog_ask_one(fq_proxy *p, uint32_t k)
{
    char reply[sizeof p->fwd_prefix + 40];
    if (!p->connected || k >= PX_PARTS_MAX || !p->part_term[k])
        return;
    snprintf(reply, sizeof reply, "%s.c%" PRIu32 "t%" PRIu64, p->fwd_prefix, k,
             p->part_term[k]);
    fq_nio_consumer_info_ask(p->nio, px_cons(p, PX_CONS_SUBMIT, k), reply);
}

/* Ask each owned partition's submit consumer for its counts, once a pass
 * over the tenants (about a second), and once as it is made: the
 * partition's whole backlog in FAIR_SUBMIT, of which the runs held in
 * memory (part_queued) are only a part. */
static void px_backlog_ask(fq_proxy *p)
{
    for (uint32_t k = 0; p->connected && k < px_parts(p) && k < PX_PARTS_MAX; k++)
        px_backlog_ask_one(p, k);
    int64_t now = (int64_t)fq_nio_mono_ms();
    if (now < p->strand_check_at)
        return;
    p->strand_check_at = now + PX_STRAND_CHECK_MS;
    for (uint32_t k = 0; p->connected && k < px_parts(p) && k < PX_PARTS_MAX; k++)
        if (p->part_term[k])
            px_strand_ask(p, k);
}

/* Partition k's submit consumer was made for term: FAIR_SUBMIT's last
 * sequence asked now, on <fwd_prefix>.s<k>t<term> (px_inherit_answer): a
 * submit stored at or below it is inherited (fq_ledger_consumer_made).
 * Unanswered, every submit of k stays inherited, as before the make. */
static void px_inherit_ask(fq_proxy *p, uint32_t k, uint64_t term)
{
    char reply[sizeof p->fwd_prefix + 40];
    snprintf(reply, sizeof reply, "%s.s%" PRIu32 "t%" PRIu64, p->fwd_prefix, k, term);
    fq_nio_stream_info_ask(p->nio, p->cfg.streams.submit, reply);
}

/* FAIR_SUBMIT's stream info, asked once partition k's submit consumer was
 * made for term: the ledger's cutoff of inherited submits (it ignores an
 * answer for a term not k's now). An error answer changes nothing. */
static void px_inherit_answer(fq_proxy *p, uint32_t k, uint64_t term, const fq_nio_msg *m)
{
    uint64_t last = 0;
    if (fq_stream_last_seq_parse(&last, fq_nio_msg_data(m), fq_nio_msg_len(m)) == FQ_OK &&
        fq_ledger_consumer_made(p->ledger, k, term, last))
        fq_log(FQ_LOG_INFO, "submits stored before a partition's consumer was made are "
               "inherited: marked if they go out past their duplicate window",
               FQ_INT("partition", (int)k), FQ_UINT("term", term), FQ_UINT("up_to_seq", last));
}

/* Partition k's first stored submit answered (0: none): stored at or
 * below its consumer's ack floor over two checks, its consumer will never
 * deliver it (a nats-server 2.9.10 defect after a node's restart,
 * docs/operations.md), so it is stored again at the stream's end, where
 * the consumer delivers it, and the original deleted; then the next is
 * asked for at once. A run the copy repeats that was dispatched already
 * is caught by FAIR_DISPATCH's Nats-Msg-Id (<tenant>/<run id>). An error
 * answer changes nothing. */
static void px_strand_answer(fq_proxy *p, uint32_t k, const fq_nio_msg *m)
{
    uint64_t first = 0, from = 0;
    fq_status st = fq_msg_get_seq_parse(&first, fq_nio_msg_data(m), fq_nio_msg_len(m));
    if (k >= PX_PARTS_MAX || !p->part_term[k] || (st != FQ_OK && st != FQ_ENOTFOUND))
        return;
    fq_strand *sd = &p->part_strand[k];
    bool draining = sd->drain_floor != 0;
    if (fq_strand_check(&from, sd, st == FQ_OK ? first : 0, p->part_floor[k]) !=
        FQ_STRAND_STRANDED)
        return;
    char msgid[64];
    bool stored = false;
    snprintf(msgid, sizeof msgid, "fairq-restored-%" PRIu64, from);
    fq_status r = fq_nio_restore(&stored, p->nio, p->cfg.streams.submit, from, msgid);
    if (stored)
        p->c.submits_stranded++;
    if (!draining || r != FQ_OK)
        fq_log(r == FQ_OK ? FQ_LOG_ERROR : FQ_LOG_WARN,
               r == FQ_OK ? "a partition's submit was stored below its consumer's ack floor, "
                            "never to be delivered (see docs/operations.md): stored again "
                            "at the stream's end; those after it below the floor follow"
                          : "cannot store again a submit stranded below its consumer's ack "
                            "floor; retrying at the next check",
               FQ_INT("partition", k), FQ_UINT("seq", from),
               FQ_UINT("ack_floor", sd->drain_floor), FQ_UINT("term", p->part_term[k]),
               FQ_BOOL("stored", stored));
    if (r == FQ_OK)
        px_strand_ask(p, k);
    else
        *sd = (fq_strand){.refused_since_ms = sd->refused_since_ms,
                          .refused_reported = sd->refused_reported};
}

/* Owned partitions whose submit consumer has been refused past the bound. */
static uint64_t px_refused_count(const fq_proxy *p)
{
    uint64_t n = 0;
    int64_t now = (int64_t)fq_nio_mono_ms();
    for (uint32_t k = 0; k < px_parts(p) && k < PX_PARTS_MAX; k++)
        n += p->part_term[k] && fq_strand_refused(&p->part_strand[k], now, PX_REFUSED_BOUND_MS);
    return n;
}

/* Partition k's consumer info answered, asked in term: its backlog, not
 * yet dispatched (not delivered, or delivered and not acked). An error
 * answer (a consumer being replaced), or one asked in another term than
 * k's now (of a consumer deleted since), changes nothing. */
static void px_backlog_answer(fq_proxy *p, uint32_t k, uint64_t term, const fq_nio_msg *m)
{
    uint64_t pending = 0, unacked = 0;
    if (k < PX_PARTS_MAX && p->part_term[k] && p->part_term[k] == term &&
        fq_consumer_info_parse(&pending, &unacked, fq_nio_msg_data(m), fq_nio_msg_len(m)) ==
            FQ_OK) {
        p->part_backlog[k] = pending + unacked;
        fq_consumer_floor_parse(&p->part_floor[k], fq_nio_msg_data(m), fq_nio_msg_len(m));
    }
}

/* Answer a request handed on with data, and let it go. */
static void px_fwd_end(fq_proxy *p, px_fwd *f, const char *data, size_t len)
{
    if (fq_nio_reply(p->nio, f->req, data, len) != FQ_OK && px_warn_ok(p, "relay"))
        fq_log(FQ_LOG_WARN, "cannot relay the answer to a request handed on",
               FQ_STR("holder", f->holder), FQ_INT("bytes", (int64_t)len));
    fq_nio_msg_drop(p->nio, f->req);
    f->req = NULL;
    p->nfwd--;
}

/* Why a request handed on to f->holder is not answered by it: into buf. */
static size_t px_fwd_why(char *buf, size_t cap, const fq_proxy *p, const px_fwd *f,
                         const char *what)
{
    int n = snprintf(buf, cap, "{\"ok\":false,\"replica\":\"%s\",\"error\":\"the replica %s, "
                     "which holds the tenant's partition, %s: retry\"}", p->lease_id, f->holder,
                     what);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* An answer on <fwd_prefix>.<seq>: relayed to the request handed on as
 * seq, if it still waits (an empty one is the server's "no responders":
 * the holder is gone); on <fwd_prefix>.c<k>t<term>: partition k's consumer
 * info; on .s<k>t<term>: FAIR_SUBMIT's info for k's inherited submits. */
static void px_fwd_answer(fq_proxy *p, const fq_nio_msg *m)
{
    const char *subject = fq_nio_msg_subject(m);
    size_t pl = strlen(p->fwd_prefix);
    char *end = NULL;
    bool ours = strncmp(subject, p->fwd_prefix, pl) == 0 && subject[pl] == '.';
    if (ours && subject[pl + 1] == 'c') {   /* a consumer info: .c<k>t<term> */
        unsigned long k = strtoul(subject + pl + 2, &end, 10);
        uint64_t term = *end == 't' ? strtoull(end + 1, &end, 10) : 0;
        if (!*end)
            px_backlog_answer(p, (uint32_t)k, term, m);
        return;
    }
    if (ours && subject[pl + 1] == 's') {   /* FAIR_SUBMIT's info: .s<k>t<term> */
        unsigned long k = strtoul(subject + pl + 2, &end, 10);
        uint64_t term = *end == 't' ? strtoull(end + 1, &end, 10) : 0;
        if (!*end)
            px_inherit_answer(p, (uint32_t)k, term, m);
        return;
    }
    if (ours && subject[pl + 1] == 'g') {   /* a first stored submit: .g<k> */
        unsigned long k = strtoul(subject + pl + 2, &end, 10);
        if (!*end)
            px_strand_answer(p, (uint32_t)k, m);
        return;
    }
    uint64_t seq = ours ? strtoull(subject + pl + 1, &end, 10) : 0;
    for (size_t i = 0; seq && end && !*end && i < PX_FWD_MAX; i++) {
        px_fwd *f = &p->fwd[i];
        if (!f->req || f->seq != seq)
            continue;
        char why[512];
        if (fq_nio_msg_len(m))
            px_fwd_end(p, f, fq_nio_msg_data(m), fq_nio_msg_len(m));
        else
            px_fwd_end(p, f, why, px_fwd_why(why, sizeof why, p, f, "has no admin subscription "
                                             "(it stopped)"));
        return;
    }
}

/* Requests handed on past PX_FWD_WAIT_MS: answered with why not. */
static void px_fwd_expire(fq_proxy *p, uint64_t now)
{
    for (size_t i = 0; p->nfwd && i < PX_FWD_MAX; i++) {
        px_fwd *f = &p->fwd[i];
        char why[512], what[64];
        snprintf(what, sizeof what, "did not answer within %d ms", PX_FWD_WAIT_MS);
        if (f->req && now >= f->until)
            px_fwd_end(p, f, why, px_fwd_why(why, sizeof why, p, f, what));
    }
}

/* What the admin plane does with a request before the admin module sees
 * it; true if that is all. With P > 1 (px_admin_start): dropped
 * (<admin>.reload and <admin>.replica.* reach their own subscriptions
 * too), forwarded to a tenant's holder, or answered as this replica's own
 * request. With P = 1 the leader's <admin>.> has <admin>.replica.*: its
 * own answered as such (fairq-admin asks every replica by its subject),
 * another's dropped (a standby answers nothing). */
static bool px_admin_route(fq_proxy *p, fq_nio_event *ev)
{
    const char *subject = fq_nio_msg_subject(ev->msg);
    const char *body = fq_nio_msg_data(ev->msg);
    size_t blen = fq_nio_msg_len(ev->msg), al = strlen(p->cfg.subjects.admin);
    uint64_t now = fq_nio_mono_ms();
    char buf[512];
    bool own = ev->source == PX_SUB_REPLICA;
    if (px_parts(p) == 1 && ev->source == PX_SUB_ADMIN &&
        strncmp(subject, p->cfg.subjects.admin, al) == 0 &&
        strncmp(subject + al, ".replica.", 9) == 0) {
        size_t pl = strlen(p->replica_prefix);
        own = strncmp(subject, p->replica_prefix, pl) == 0 && subject[pl] == '.';
        if (!own) {
            char why[384];
            int n = snprintf(why, sizeof why, "{\"ok\":false,\"replica\":\"%s\",\"error\":"
                             "\"with partitions: 1 only the leader answers admin requests, "
                             "and this is the leader, not the replica named\"}", p->lease_id);
            if (n > 0 && (size_t)n < sizeof why)
                fq_nio_reply(p->nio, ev->msg, why, (size_t)n);
            return true;
        }
    }
    fq_stats_req q;
    char err[160];
    if (own) {
        /* <admin>.replica.<id>.<rest>: answered here, as <rest> (a
         * tenant's once its partition is read back) */
        size_t pl = strlen(p->replica_prefix);
        const char *rest = strlen(subject) > pl + 1 ? subject + pl + 1 : "";
        if (strncmp(rest, "explain.", 8) == 0 ? px_admin_loading(p, ev->msg, rest + 8, strlen(rest + 8))
            : strcmp(rest, "stats") == 0 &&
                  fq_stats_req_parse(&q, body, blen, err, sizeof err) == FQ_OK && q.tenant[0] &&
                  px_admin_loading(p, ev->msg, q.tenant, strlen(q.tenant)))
            return true;
        if (strncmp(rest, "explain.", 8) == 0) {
            snprintf(buf, sizeof buf, "%s.%s", p->cfg.subjects.explain, rest + 8);
            fq_admin_explain(p->admin, p->cfg.subjects.explain, buf, body, blen, ev->msg, now);
        } else {
            snprintf(buf, sizeof buf, "%s.%s", p->cfg.subjects.admin, rest);
            fq_admin_request(p->admin, buf, body, blen, ev->msg, now);
        }
        return true;
    }
    if (px_parts(p) == 1)
        return false;
    if (ev->source == PX_SUB_EXPLAIN) {
        size_t el = strlen(p->cfg.subjects.explain);
        const char *tenant = strlen(subject) > el + 1 ? subject + el + 1 : "";
        snprintf(buf, sizeof buf, "explain.%s", tenant);
        return px_admin_forward(p, &ev->msg, tenant, strlen(tenant), buf);
    }
    if (ev->source != PX_SUB_ADMIN || strncmp(subject, p->cfg.subjects.admin, al) != 0 ||
        subject[al] != '.')
        return false;
    const char *what = subject + al + 1;
    if (strcmp(what, "reload") == 0 || strncmp(what, "replica.", 8) == 0)
        return true;
    if (strcmp(what, "stats") == 0 &&
        fq_stats_req_parse(&q, body, blen, err, sizeof err) == FQ_OK && q.tenant[0])
        return px_admin_forward(p, &ev->msg, q.tenant, strlen(q.tenant), "stats");
    return false;
}

/* Requests on <admin>.> and <explain>.*: only the leader subscribes with
 * P = 1; every replica with P > 1 (px_admin_start). */
static void px_on_request(fq_proxy *p, fq_nio_event *ev)
{
    if (ev->source == PX_SUB_SHARE)
        px_on_beat(p, ev);
    else if (ev->source == PX_SUB_FWD)
        px_fwd_answer(p, ev->msg);
    else if (px_admin_route(p, ev))
        ;   /* dropped, forwarded (and held), answered or answered busy */
    else if (ev->source == PX_SUB_EXPLAIN)
        fq_admin_explain(p->admin, p->cfg.subjects.explain, fq_nio_msg_subject(ev->msg),
                         fq_nio_msg_data(ev->msg), fq_nio_msg_len(ev->msg), ev->msg,
                         fq_nio_mono_ms());
    else
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

/* Whether every partition we own has both its consumers in place (and we
 * own one at least). */
static bool px_consumers_ok(const fq_proxy *p)
{
    bool any = false;
    for (uint32_t k = 0; k < px_parts(p) && k < PX_PARTS_MAX; k++) {
        int sid = px_cons(p, PX_CONS_SUBMIT, k);
        if (!p->part_term[k] || sid < 0)
            continue;
        if (!p->consumer_ok[sid] || !p->consumer_ok[sid + 1])
            return false;
        any = true;
    }
    return any;
}

/* With partitions: whether we own none, nor are taking or letting one go. */
static bool px_owns_none(const fq_proxy *p)
{
    for (uint32_t k = 0; k < px_parts(p) && k < PX_PARTS_MAX; k++)
        if (p->part_term[k] || p->part_want[k] || p->part_loading[k] || p->part_drop[k])
            return false;
    return true;
}

/* Who holds the partitions in our view, for a standby's /readyz: "the 8
 * partitions are held by rep-a (3), rep-b (5)". "" before any is seen. */
static void px_owners_text(char *out, size_t cap, fq_proxy *p)
{
    const fq_owner *o = fq_leader_owner(p->ld);
    uint64_t now = fq_nio_mono_ms();
    uint32_t P = px_parts(p), held = 0;
    size_t len = (size_t)snprintf(out, cap, "the %" PRIu32 " partitions are held by", P);
    /* each holder once, counted at its first partition: P x holders */
    for (uint32_t k = 0; k < P && len < cap; k++) {
        const char *h = fq_owner_holder(o, (int32_t)k, now);
        bool first = h[0] != '\0';
        for (uint32_t j = 0; j < k && first; j++)
            first = strcmp(fq_owner_holder(o, (int32_t)j, now), h) != 0;
        if (!first)
            continue;
        uint32_t n = 0;
        for (uint32_t j = k; j < P; j++)
            n += strcmp(fq_owner_holder(o, (int32_t)j, now), h) == 0;
        held += n;
        len += (size_t)snprintf(out + len, cap - len, "%s %s (%" PRIu32 ")", held > n ? "," : "",
                                h, n);
    }
    if (!held)
        out[0] = '\0';
    else if (held < P && len < cap)
        snprintf(out + len, cap - len, "; %" PRIu32 " not held", P - held);
}

/* The leader is ready while connected with the consumers of every
 * partition it owns in place. With partitions, a replica that owns none
 * stands by, ready (a healthy sidecar doing its job): its /readyz says who
 * holds them. */
static void px_phase_leader(fq_proxy *p)
{
    if (p->connected && px_parts(p) > 1 && p->ld && px_owns_none(p)) {
        char owners[512];
        px_owners_text(owners, sizeof owners, p);
        fq_probes_owners(p->probes, owners);
        px_phase(p, FQ_PHASE_STANDBY);
        return;
    }
    px_phase(p, !p->connected ? FQ_PHASE_DISCONNECTED
                : px_consumers_ok(p) ? FQ_PHASE_SERVING : FQ_PHASE_CONSUMERS);
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
 * by the ledger, and its record written), and no dispatch of it came
 * between; if it comes back it starts anew, as any new tenant does, its
 * counters from zero. True: t is freed. */
static bool px_forget_idle(fq_proxy *p, px_tenant *t, const fq_tenant_info *ti, uint64_t now)
{
    if (t->source != FQ_SRC_DEFAULT || t->unlisted || fq_ledger_tenant_busy(&t->lt) ||
        ti->queued || ti->in_flight || ti->deficit ||
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
            /* each partition's queued runs and backlog for the stats too,
             * with or without /metrics */
            memcpy(p->part_queued, p->part_fill, sizeof p->part_queued);
            memset(p->part_fill, 0, sizeof p->part_fill);
            px_backlog_ask(p);
            if (p->http)
                px_metrics_publish(p);
            return;
        }
        px_tenant *t = FQ_SWEEP_ENTRY(n, px_tenant, later);
        fq_tenant_info ti;
        fq_tenant_info_get(t->t, &ti);
        px_warn_old_queue(p, t, &ti, now);
        if (px_forget_idle(p, t, &ti, now))
            continue;
        uint32_t k = fq_ledger_part_of(p->ledger, t->id);
        if (k < PX_PARTS_MAX)
            p->part_fill[k] += ti.queued;
        if (p->http)
            px_metrics_tenant(p, t, &ti, now);
    }
}

/* ---- partitions owned: their consumers ----------------------------------- */

/*
 * Each partition we own has its own two pull consumers, on FAIR_SUBMIT and
 * FAIR_DONE, filtered to it (<submit>.<k>.*, <done>.<k>.*) and named for
 * the term we own it in, <durable>-p<k>-<term>: making them deletes the
 * consumers of k's earlier terms, which returns what a stale owner held to
 * ours and makes the server refuse its pulls and acks (natsio.h,
 * fq_nio_consume_term). With P = 1 the one pair is <durable>-<term> on
 * <submit>.* and <done>.*, as before partitions. All of them are served by
 * natsio's one fetch thread. natsio has FQ_NIO_MAX_CONSUMERS ids, so a
 * replica owns at most PX_OWN_MAX partitions (the owner's bound), whatever
 * P is (up to FQ_PARTITIONS_MAX): a partition gained gets a free pair of
 * ids j (px_cons: kind + 2j), the pair freed with it taken again last, so
 * a delivery's partition is its pair's (px_cons_part), and the ledger's
 * acks name the partition (fq_ledger_ackref.part).
 */

/* Partition k's consumers' fence (natsio's, by id): the last said for it
 * (px_lease_fence), once it has a pair of ids. */
static void px_lease_fence_set(fq_proxy *p, uint32_t k)
{
    if (px_cons(p, PX_CONS_SUBMIT, k) < 0)
        return;
    fq_nio_fence_consumer(p->nio, px_cons(p, PX_CONS_SUBMIT, k), p->part_fence[k]);
    fq_nio_fence_consumer(p->nio, px_cons(p, PX_CONS_DONE, k), p->part_fence[k]);
}

/* Partition k's pair of consumer ids is free again (P = 1 keeps pair 0). */
static void px_slot_free(fq_proxy *p, uint32_t k)
{
    if (px_parts(p) == 1 || !p->part_slot[k])
        return;
    p->slot_part[p->part_slot[k] - 1] = 0;
    p->part_slot[k] = 0;
}

/* Partition k is ours from term: its consumers are made, filtered to it
 * and named for term, or, ours already, named for the new term. The
 * ownership of partitions calls it for each one gained; today the leader
 * gains every partition at its term. FQ_EINVAL: k is past P; FQ_EFULL: we
 * own PX_OWN_MAX already (the owner's bound keeps us below it). */
static fq_status px_part_gain(fq_proxy *p, uint32_t k, uint64_t term)
{
    if (k >= px_parts(p) || k >= PX_PARTS_MAX || !term)
        return FQ_EINVAL;
    for (uint32_t i = 0; !p->part_slot[k] && i < PX_OWN_MAX; i++) {
        uint32_t j = (p->slot_next + i) % PX_OWN_MAX;
        if (!p->slot_part[j]) {
            p->slot_part[j] = (uint16_t)(k + 1);
            p->part_slot[k] = (uint16_t)(j + 1);
            p->slot_next = (uint16_t)((j + 1) % PX_OWN_MAX);
            px_lease_fence_set(p, k);
        }
    }
    if (!p->part_slot[k])
        return FQ_EFULL;
    int sid = px_cons(p, PX_CONS_SUBMIT, k), did = px_cons(p, PX_CONS_DONE, k);
    if (p->part_term[k]) {
        p->part_term[k] = term;
        fq_nio_consume_term(p->nio, sid, term);
        fq_nio_consume_term(p->nio, did, term);
        return FQ_OK;
    }
    char durable[160], submit[320], done[320];
    if (px_parts(p) > 1) {
        snprintf(durable, sizeof durable, "%s-p%" PRIu32, p->cfg.streams.durable, k);
        snprintf(submit, sizeof submit, "%s.%" PRIu32 ".*", p->cfg.subjects.submit, k);
        snprintf(done, sizeof done, "%s.%" PRIu32 ".*", p->cfg.subjects.done, k);
    } else {
        snprintf(durable, sizeof durable, "%s", p->cfg.streams.durable);
        snprintf(submit, sizeof submit, "%s", p->submit_filter);
        snprintf(done, sizeof done, "%s", p->done_filter);
    }
    /* MaxAckPending bounds what the server hands over beyond what we hold
     * and what we gave back (a nak with a delay keeps a run pending): past
     * it the server sends only redeliveries, so the runs given back are
     * bounded by it. */
    uint64_t back = p->cfg.limits.max_buffered_runs < FQ_LEDGER_BACK_MAX
                        ? p->cfg.limits.max_buffered_runs : FQ_LEDGER_BACK_MAX;
    int64_t pend = (int64_t)(p->cfg.limits.max_buffered_runs + back) + PX_MAX_PUBS;
    /* AckWait then matters only within our own term: a submit is held
     * unacked while it is queued, so an AckWait shorter than a queue's wait
     * only costs a redelivery that is recognised by its sequence (an hour of
     * backlog, once an hour); what we drop without acking (out of memory)
     * comes back within it. No longer a day: a dead proxy's runs no longer
     * wait for it. */
    fq_nio_consumer sc = {.stream = p->cfg.streams.submit, .durable = durable, .filter = submit,
                          .max_ack_pending = pend, .ack_wait_ms = PX_SUBMIT_ACK_WAIT_MS,
                          .batch = PX_FETCH_BATCH, .term = term};
    fq_nio_consumer dc = {.stream = p->cfg.streams.done, .durable = durable, .filter = done,
                          .max_ack_pending = PX_DONE_MAX_ACK_PENDING,
                          .ack_wait_ms = PX_DONE_ACK_WAIT_MS, .batch = PX_FETCH_BATCH,
                          .term = term};
    fq_status s = fq_nio_consume(p->nio, sid, &sc);
    if (s == FQ_OK && (s = fq_nio_consume(p->nio, did, &dc)) != FQ_OK)
        fq_nio_consume_stop(p->nio, sid);
    if (s != FQ_OK) {
        px_slot_free(p, k);
        return s;
    }
    p->consumer_ok[sid] = p->consumer_ok[did] = false;
    p->part_term[k] = term;
    fq_nio_consume_pause(p->nio, sid, p->fetch_paused[PX_CONS_SUBMIT]);
    fq_nio_consume_pause(p->nio, did, p->fetch_paused[PX_CONS_DONE]);
    return FQ_OK;
}

/* Partition k is not ours any more: its consumers stop fetching, and
 * their deliveries not yet handled are dropped unanswered. They are left
 * on the server: k's next owner deletes them before it makes its own
 * (natsio deletes every earlier term's), as it does a dead owner's, and
 * what they held unacked goes to it then. So the replica that deletes a
 * partition's consumer is always the one that makes the next, and knows
 * the name a nats-server node restarted meanwhile may keep a stale copy
 * of, refusing the next consumer on that filter until the copy is
 * cleared under that name (natsio's nio_adopt_stale; docs/operations.md);
 * the names its predecessors deleted it reads in the descriptions of the
 * consumers it deletes (lib/pullplan.h, fq_pull_gone).
 * Deleted here, the copy's name was known only to us, and the next owner
 * was refused for good. The ledger lets the partition go on its own
 * (fq_ledger_release). */
static void px_part_lose(fq_proxy *p, uint32_t k)
{
    if (k >= PX_PARTS_MAX || !p->part_term[k])
        return;
    int sid = px_cons(p, PX_CONS_SUBMIT, k), did = px_cons(p, PX_CONS_DONE, k);
    fq_nio_consume_stop(p->nio, sid);
    fq_nio_consume_stop(p->nio, did);
    p->part_term[k] = 0;
    p->part_backlog[k] = 0;
    p->part_floor[k] = 0;
    p->part_strand[k] = (fq_strand){0};
    p->consumer_ok[sid] = p->consumer_ok[did] = false;
    size_t kept = 0;
    for (size_t i = 0; i < p->nheld_ev; i++) {
        if (p->held_ev[i].source == sid || p->held_ev[i].source == did)
            fq_nio_msg_drop(p->nio, p->held_ev[i].msg);
        else
            p->held_ev[kept++] = p->held_ev[i];
    }
    p->nheld_ev = kept;
    p->part_held[k] = 0;
    px_slot_free(p, k);
}

/* ---- the leader lease: lib/leader.c, through this ---------------------- */

/* P > 1: partition part's lease is fresh before until (0: not ours), as
 * it changes: its two consumers are left alone from then on, and the
 * ledger holds its acks, batches and dispatches from then on, whatever
 * the other partitions' leases say (each has its own consumers, journal
 * subject and term). */
static void px_lease_fence(void *arg, int32_t part, uint64_t until)
{
    fq_proxy *p = arg;
    if (part < 0 || (uint32_t)part >= PX_PARTS_MAX)
        return;
    p->part_fence[part] = until;
    px_lease_fence_set(p, (uint32_t)part);
    fq_ledger_set_part_fence(p->ledger, (uint32_t)part, until);
}

/* We lead from term: the consumers carry it in their names. A new term
 * while serving means the key aged out and we took it back: the consumers
 * are made again under the new name, which deletes the old term's. */
static void px_lease_lead(void *arg, int32_t part, uint64_t term, bool again)
{
    fq_proxy *p = arg;
    if (px_parts(p) > 1) {
        /* A partition (or the leader key) is ours: taken up at the next
         * turn (px_parts_apply), not here, inside the lease's own step. A
         * partition taken again after its key aged out may have had
         * another owner meanwhile: let go and adopted anew. */
        if (part == FQ_OWNER_DUTY) {
            p->duty_want = 1;
        } else if (part >= 0 && (uint32_t)part < PX_PARTS_MAX) {
            p->part_drop[part] |= again;
            p->part_planned[part] &= !again;
            p->part_release[part] &= !again;
            p->part_want[part] = term;
        }
        return;
    }
    p->term = term;
    if (!p->consuming)
        return;
    for (uint32_t k = 0; k < px_parts(p) && k < PX_PARTS_MAX; k++)
        if (p->part_term[k])
            px_part_gain(p, k, term);
    fq_log(FQ_LOG_WARN, "leader lease taken again in a new term after it aged out",
           FQ_UINT("term", term));
}

static size_t px_drain(fq_proxy *p, int timeout_ms);

/* P > 1: a partition (or the leader key) is not ours any more; let go at
 * the next turn, and, planned, its key handed off once settled. */
static void px_lease_lost(void *arg, int32_t part, bool planned)
{
    fq_proxy *p = arg;
    if (part == FQ_OWNER_DUTY) {
        p->duty_want = -1;
    } else if (part >= 0 && (uint32_t)part < PX_PARTS_MAX) {
        p->part_want[part] = 0;
        p->part_drop[part] = true;
        p->part_planned[part] = planned;
    }
}

/* Hand the lease back at a stop, so that a standby takes over at once,
 * waiting for the PubAck until `until` at most: unanswered, the lease ages
 * out within streams.lease_ttl_ms all the same. */
static void px_lease_release(fq_proxy *p, uint64_t until)
{
    if (!fq_leader_release(p->ld))
        return;
    while (fq_leader_releasing(p->ld) && fq_nio_mono_ms() < until)
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

/* The leader lease's wiring, once there is a connection to do its I/O. */
static fq_status px_leader_create(fq_proxy *p)
{
    fq_leader_opts lo = {.bucket = p->cfg.streams.lease_bucket, .id = p->lease_id,
                         .instance = p->instance, .ttl_ms = p->cfg.streams.lease_ttl_ms,
                         .renew_token = TK_MAKE(TK_LEASE, 0), .partitions = px_parts(p),
                         .watch = PX_WATCH_LEASES, .bound = PX_OWN_MAX,
                         .gained = px_lease_lead,
                         .lost = px_lease_lost, .fence = px_lease_fence, .arg = p};
    fq_status s = fq_leader_create(&p->ld, p->nio, p->probes, &lo);
    if (s != FQ_OK)
        fq_log(FQ_LOG_ERROR, "cannot take part in the leader lease", FQ_STR("id", p->lease_id),
               FQ_STR("bucket", p->cfg.streams.lease_bucket), FQ_STR("reason", fq_status_text(s)));
    return s;
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
            return px_leader_create(p);
        if (attempt == 0 || px_warn_ok(p, "connect"))
            fq_log(FQ_LOG_WARN, "cannot reach NATS; retrying", FQ_STR("reason", err));
        if (!px_sleep_unless_stopped(p, 1000))
            return FQ_EIO;
    }
}

#define PX_NSTREAMS 5    /* submit, dispatch, done, rejected, runs */

/* The streams fairq needs, as the configuration asks (pure). */
static void px_stream_specs(fq_nio_stream out[PX_NSTREAMS], const fq_proxy *p)
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
    const fq_nio_stream streams[PX_NSTREAMS] = {
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
        {.name = c->streams.runs, .subject = p->runs_filter, .retention = FQ_NIO_LIMITS,
         .max_age_ms = px_keep_done_ms(p) + PX_JOURNAL_AGE_SLACK_MS, .replicas = rep},
    };
    memcpy(out, streams, sizeof streams);
}

/* Make or check one stream, retrying while the server is not ready:
 * FQ_OK, or the status start stops with (logged). */
static fq_status px_stream_ensure(fq_proxy *p, const fq_nio_stream *st)
{
    char warn[1024];
    fq_status s;
    while ((s = fq_nio_stream_ensure(p->nio, st, warn, sizeof warn)) == FQ_EIO) {
        if (px_denied_at_start(p))
            return FQ_EINVAL;
        fq_log(FQ_LOG_WARN, "stream not ready; retrying", FQ_STR("stream", st->name),
               FQ_STR("reason", warn));
        if (!px_sleep_unless_stopped(p, 1000))
            return FQ_EIO;
    }
    if (s != FQ_OK) {
        fq_log(FQ_LOG_ERROR, "stream cannot serve", FQ_STR("stream", st->name),
               FQ_STR("reason", warn));
        return s;
    }
    if (warn[0])
        fq_log(FQ_LOG_WARN, "stream differs from what fairq expects",
               FQ_STR("stream", st->name), FQ_STR("differences", warn));
    return FQ_OK;
}

/* Make or open the lease bucket, and check its TTL is lease_ttl_ms. */
static fq_status px_lease_bucket(fq_proxy *p)
{
    const fq_config *c = &p->cfg;
    uint32_t rep = c->streams.replicas;
    char warn[1024];
    /* Retried as the streams are: a cluster that cannot place its
     * replicas yet (a node down or not yet known) is not ready, not a
     * bucket that cannot be made. */
    while (fq_nio_kv_ensure(p->nio, c->streams.lease_bucket, c->streams.lease_ttl_ms, 0, 0,
                            rep, warn, sizeof warn) != FQ_OK) {
        if (px_denied_at_start(p))
            return FQ_EINVAL;
        fq_log(FQ_LOG_WARN, "lease bucket not ready; retrying",
               FQ_STR("bucket", c->streams.lease_bucket), FQ_STR("reason", warn));
        if (!px_sleep_unless_stopped(p, 1000))
            return FQ_EIO;
    }
    /* A bucket made before keeps its TTL. Freshness counts on the key
     * living lease_ttl_ms: a bucket that ages keys out sooner would let a
     * standby take the lease while we still act on it. */
    uint64_t ttl = 0;
    bool direct = false;
    if (fq_nio_kv_config(&ttl, &direct, p->nio, c->streams.lease_bucket) != FQ_OK) {
        /* Not an answer (a cluster electing the bucket's leader, say): the
         * bucket was just made or opened; the fences of section 7 hold
         * whatever its TTL. */
        fq_log(FQ_LOG_WARN, "cannot read the lease bucket's TTL to compare it with "
               "streams.lease_ttl_ms", FQ_STR("bucket", c->streams.lease_bucket));
    } else if (ttl != c->streams.lease_ttl_ms) {
        fq_log(FQ_LOG_ERROR, "the lease bucket's TTL is not streams.lease_ttl_ms: stop every "
               "proxy, delete the bucket (it holds only the lease), and start them with one "
               "lease_ttl_ms", FQ_STR("bucket", c->streams.lease_bucket),
               FQ_UINT("bucket_ttl_ms", ttl), FQ_UINT("lease_ttl_ms", c->streams.lease_ttl_ms));
        return FQ_EINVAL;
    } else if (!direct) {
        /* Its keys are read by direct gets (sent without waiting), which
         * nothing answers on such a bucket: every proxy would stand by. */
        fq_log(FQ_LOG_ERROR, "the lease bucket does not allow direct gets, by which its keys "
               "are read: stop every proxy, delete the bucket (it holds only the lease), and "
               "start them, or set allow_direct on its stream",
               FQ_STR("bucket", c->streams.lease_bucket));
        return FQ_EINVAL;
    }
    return FQ_OK;
}

/* At start: the streams made or checked, then the lease bucket. */
static fq_status px_streams(fq_proxy *p)
{
    const fq_config *c = &p->cfg;
    fq_nio_stream streams[PX_NSTREAMS];
    px_stream_specs(streams, p);
    /* The server has answered the connection's subscriptions (its PubAck
     * inbox) by now: one it refused fails start here, not at a timeout. */
    fq_nio_flush(p->nio, 2000);
    if (px_denied_at_start(p))
        return FQ_EINVAL;
    for (size_t i = 0; i < PX_NSTREAMS; i++) {
        fq_status s = px_stream_ensure(p, &streams[i]);
        if (s != FQ_OK)
            return s;
    }
    if (fq_nio_stream_created(&p->submit_created_ms, p->nio, c->streams.submit) != FQ_OK)
        return FQ_EIO;
    fq_ledger_opts lo = px_ledger_opts(p, &p->cfg);     /* derived run ids need the creation */
    fq_ledger_set_opts(p->ledger, &lo);
    return px_lease_bucket(p);
}

/*
 * The runs journal read back: with P = 1 the whole journal at start; with
 * P > 1 the journal subjects of the partitions being taken, each on its
 * own, so that a takeover costs what they hold, not what the deployment's
 * journal does. It rebuilds the in-flight window, the expired runs, the
 * completed set and the debts (the ledger decides), so the window does
 * not start from zero while workers are busy with runs dispatched before.
 * The read runs on natsio's scan thread, one subject at a time, and each
 * message comes as an event the loop decodes into the ledger among its
 * other events: the partitions owned already are served meanwhile
 * (before, the loop waited for the whole read, 0.4 to 1.4 s on a loaded
 * cluster, dispatching for none of them). A read covers the partitions
 * loading when it began: one gained meanwhile is adopted once it ends,
 * and read next. A partition lost meanwhile is let go by the ledger as
 * any other (what was read of it forgotten), and its subject is not read
 * on; every one of them lost, the read is given up.
 *
 * Which subjects: with P > 1, first the one subject of P = 1, which a
 * deployment that moved from P = 1 by draining keeps (usually nothing:
 * no message on it), its records taken by the partitions being read
 * (docs/partitions.md, "Changing P"); then each partition's own; with
 * partitions_before, also the subjects that held the partitions' tenants
 * under that P: a tenant of partition k (its hash h, k = h mod P) was in
 * m = h mod P', so m = k modulo gcd(P, P'). Each subject is read once; a
 * tenant's debt is its latest record by the stream's sequence, whichever
 * subject is read last.
 */

static void px_read_rec(void *arg, const fq_jrec *r)
{
    fq_proxy *p = arg;
    fq_ledger_recover_record(p->ledger, r, p->rb.ts_ms, p->rb.seq, p->rb.now, p->rb.now_ms);
}

/* The subjects to read for the partitions loading now, into read (by
 * partition number, of P or of partitions_before, whichever is larger). */
static void px_read_set(const fq_proxy *p, bool *read)
{
    uint32_t P = px_parts(p), before = p->cfg.partitions_before > 1 ? p->cfg.partitions_before : 0;
    uint32_t g = P, r = before;
    while (r) {     /* gcd(P, before) */
        uint32_t t = g % r;
        g = r;
        r = t;
    }
    memset(read, 0, FQ_PARTITIONS_MAX * sizeof *read);
    for (uint32_t k = 0; P > 1 && k < P && k < PX_PARTS_MAX; k++) {
        read[k] |= p->part_loading[k] != 0;
        for (uint32_t m = k % g; before && p->part_loading[k] && m < before; m += g)
            read[m] = true;
    }
}

/* Read the subject at p->rb.at on the scan thread. */
static void px_read_scan(fq_proxy *p)
{
    px_readback *rb = &p->rb;
    char subject[320];
    const char *subj = NULL;    /* P = 1: the whole journal */
    if (rb->at >= 0)
        px_journal_subject(subject, sizeof subject, p, (uint32_t)rb->at);
    if (rb->at >= 0)
        subj = subject;
    else if (px_parts(p) > 1)
        subj = p->cfg.subjects.runs;    /* P = 1's subject, kept after P changed */
    rb->subj_began = fq_nio_mono_ms();
    rb->subj_msgs = rb->msgs;
    rb->subj_bytes = rb->bytes;
    rb->subj_records = rb->counts.records;
    if (fq_nio_scan_start(p->nio, ++rb->token, p->cfg.streams.runs, subj) != FQ_OK) {
        rb->ended = rb->on = false;     /* a name too long: config refuses those */
        rb->status = FQ_EINVAL;
    }
}

/* Begin reading back the partitions loading (P = 1: the whole journal). */
static void px_read_begin(fq_proxy *p)
{
    px_readback *rb = &p->rb;
    uint64_t token = rb->token;
    *rb = (px_readback){.on = true, .at = -1, .token = token, .began = fq_nio_mono_ms(),
                        .dispatched = fq_ledger_counters_get(p->ledger)->dispatched};
    px_read_set(p, rb->subj);
    uint32_t n = px_parts(p) == 1;
    for (uint32_t k = 0; px_parts(p) > 1 && k < px_parts(p) && k < PX_PARTS_MAX; k++)
        n += p->part_loading[k] != 0;
    fq_log(FQ_LOG_INFO, "reading the journal back", FQ_UINT("partitions", n));
    px_read_scan(p);
}

/* The subject under way read whole (said, with its size and time) or
 * given up; the next. */
static void px_read_next(fq_proxy *p, bool whole)
{
    px_readback *rb = &p->rb;
    char subject[320];
    if (rb->at >= 0)
        px_journal_subject(subject, sizeof subject, p, (uint32_t)rb->at);
    if (whole)
        fq_log(FQ_LOG_INFO, "a journal subject read back",
               FQ_STR("subject", rb->at >= 0 ? subject : p->cfg.subjects.runs),
               FQ_UINT("messages", rb->msgs - rb->subj_msgs),
               FQ_UINT("bytes", rb->bytes - rb->subj_bytes),
               FQ_UINT("records", rb->counts.records - rb->subj_records),
               FQ_UINT("ms", fq_nio_mono_ms() - rb->subj_began));
    uint32_t P = px_parts(p), before = p->cfg.partitions_before;
    uint32_t end = P > 1 ? (before > P ? before : P) : 0;
    do
        rb->at++;
    while ((uint32_t)rb->at < end && !rb->subj[rb->at]);
    if ((uint32_t)rb->at < end)
        px_read_scan(p);
    else
        rb->ended = true;
}

/* A message of the read, or its end, from natsio's scan thread. */
static void px_on_scan(fq_proxy *p, const fq_nio_event *ev)
{
    px_readback *rb = &p->rb;
    bool ours = rb->on && !rb->ended && ev->token == rb->token;
    if (ev->type == FQ_NIO_EV_SCAN) {
        if (ours) {
            const void *data = fq_nio_msg_data(ev->msg);
            size_t len = fq_nio_msg_len(ev->msg);
            rb->ts_ms = ev->ts_ms;
            rb->seq = ev->seq;
            rb->now = fq_nio_mono_ms();
            rb->now_ms = fq_nio_unix_ms();
            rb->msgs++;
            rb->bytes += len;
            fq_journal_decode(data ? data : "", len, px_read_rec, p, &rb->counts);
        }
        fq_nio_msg_drop(p->nio, ev->msg);
        return;
    }
    if (!ours)
        return;
    if (ev->status == FQ_OK) {
        px_read_next(p, true);
        return;
    }
    /* Read again from the start a second later, at start as at a
     * takeover: what was read so far is read again (the ledger takes a
     * record read twice as once). */
    rb->on = false;
    rb->status = ev->status;
    rb->again_at = fq_nio_mono_ms() + PX_READ_RETRY_MS;
    if (px_warn_ok(p, "read back"))
        fq_log(FQ_LOG_WARN, ev->status == FQ_ENOTFOUND
                   ? "cannot read the journal back: no such stream; retrying"
                   : "cannot read the journal back: the server did not answer; retrying",
               FQ_STR("stream", p->cfg.streams.runs));
}

/* The read over, its runs taken into the window, its partitions owned;
 * said, with its size, its time and what the others dispatched meanwhile. */
static void px_read_end(fq_proxy *p)
{
    px_readback *rb = &p->rb;
    rb->on = rb->ended = false;
    rb->status = FQ_OK;
    fq_ledger_recovered(p->ledger, fq_nio_mono_ms(), fq_nio_unix_ms());
    px_actions(p);
    const fq_ledger_counters *lc = fq_ledger_counters_get(p->ledger);
    fq_ledger_stats ls;
    fq_ledger_stats_get(&ls, p->ledger);
    p->c.journal_refused += rb->counts.invalid + rb->counts.unknown;
    fq_log(FQ_LOG_INFO, "recovered state from NATS", FQ_UINT("messages", rb->msgs),
           FQ_UINT("records", rb->counts.records), FQ_UINT("ms", fq_nio_mono_ms() - rb->began),
           FQ_UINT("dispatched_meanwhile", lc->dispatched - rb->dispatched),
           FQ_UINT("in_flight", lc->adopted),
           FQ_UINT("completed_remembered", ls.completed_remembered),
           FQ_UINT("expired", ls.expired_remembered),
           FQ_UINT("past_the_window", lc->adopt_overflow), FQ_UINT("debtors", ls.debtors));
    if (rb->counts.invalid || rb->counts.unknown)
        fq_log(FQ_LOG_WARN, "journal records refused", FQ_STR("stream", p->cfg.streams.runs),
               FQ_UINT("invalid", rb->counts.invalid),
               FQ_UINT("unknown_type", rb->counts.unknown),
               FQ_STR("first_reason", rb->counts.why));
}

static void px_start_turn(fq_proxy *p);

/* P = 1 at start: the journal read back whole, the lease renewed
 * meanwhile (px_start_turn); each failure retried a second later.
 * FQ_ENOTFOUND (no journal stream) and a refusal fail the start;
 * FQ_EIO when stopped or the lease lost first. */
static fq_status px_recover(fq_proxy *p)
{
    for (;;) {
        px_read_begin(p);
        while (p->rb.on && !p->rb.ended && !atomic_load(&p->stop) &&
               fq_leader_lease(p->ld)->state != FQ_LEASE_LOST)
            px_start_turn(p);
        if (p->rb.ended) {
            px_read_end(p);
            return FQ_OK;
        }
        if (p->rb.on) {
            fq_nio_scan_stop(p->nio);
            p->rb.on = false;
            return FQ_EIO;
        }
        if (p->rb.status != FQ_EIO || px_denied_at_start(p) || !px_sleep_unless_stopped(p, 1000))
            return p->rb.status;
    }
}

/* ---- the loop ---------------------------------------------------------- */


/* A delivery that comes while its partition's lease is not fresh (a pull
 * sent before it ran out) is held aside, in its partition's order, and
 * handled once that lease is fresh again: handling it may refuse or ack.
 * Lost instead, it goes with its partition, and the next owner's consumer
 * delivers it again. Another partition's deliveries are not held. */
static bool px_defer(fq_proxy *p, fq_nio_event *ev)
{
    uint32_t k = px_ev_part(p, ev);
    if (!p->part_held[k] && px_part_fresh(p, k))
        return false;
    if (fq_grow(&p->held_ev, &p->held_ev_cap, p->nheld_ev + 1, sizeof *p->held_ev) != FQ_OK) {
        fq_nio_msg_drop(p->nio, ev->msg);   /* unacked: delivered again after AckWait */
        return true;
    }
    p->held_ev[p->nheld_ev++] = *ev;
    p->part_held[k]++;
    return true;
}

static void px_on_delivery(fq_proxy *p, fq_nio_event *ev)
{
    if (ev->source % 2 == PX_CONS_SUBMIT)
        px_on_submit(p, ev);
    else
        px_on_done(p, ev);
}

/* Handle the deliveries held aside of each partition fresh now, in
 * order; a stale partition's stay, in order (freshness only ends while
 * this runs: a later one of a partition is never handled before an
 * earlier one kept). */
static void px_undefer(fq_proxy *p)
{
    size_t n = p->nheld_ev, kept = 0;
    for (size_t i = 0; i < n; i++) {
        fq_nio_event ev = p->held_ev[i];
        uint32_t k = px_ev_part(p, &ev);
        if (!px_part_fresh(p, k)) {
            p->held_ev[kept++] = ev;
            continue;
        }
        p->part_held[k]--;
        px_on_delivery(p, &ev);
    }
    p->nheld_ev = kept;
}

/* The connection lost or back. */
static void px_on_conn(fq_proxy *p, bool connected)
{
    p->connected = connected;
    if (p->leader)
        px_phase_leader(p);
    if (connected) {
        p->c.reconnects++;
        /* Admission sizes runs against the server's limit of now. */
        p->max_payload = fq_nio_max_payload(p->nio);
        fq_ledger_opts lo = px_ledger_opts(p, &p->cfg);
        fq_ledger_set_opts(p->ledger, &lo);
    }
    fq_log(connected ? FQ_LOG_INFO : FQ_LOG_WARN,
           connected ? "reconnected to NATS" : "disconnected from NATS",
           FQ_INT("max_payload", p->max_payload));
}

/* A consumer made, or not (ev->status): served once each is. */
/* A partition's submit consumer made or refused: one refused past the
 * bound is said once, as an error (its runs wait undispatched), and
 * counted by fairq_partitions_consumer_refused until it is made. */
static void px_refused_note(fq_proxy *p, const fq_nio_event *ev)
{
    uint32_t k = px_cons_part(p, ev->source);
    if (ev->source < 0 || ev->source % 2 != PX_CONS_SUBMIT || k >= PX_PARTS_MAX ||
        !p->part_term[k])
        return;
    if (ev->status == FQ_OK) {
        p->part_floor[k] = 0;   /* the new consumer's is read afresh */
        px_backlog_ask_one(p, (uint32_t)k);     /* and its backlog now, not in a second */
    }
    if (fq_strand_consumer(&p->part_strand[k], ev->status == FQ_OK, (int64_t)fq_nio_mono_ms(),
                           PX_REFUSED_BOUND_MS))
        fq_log(FQ_LOG_ERROR, "a partition's submit consumer has been refused for over 30 s: "
               "its runs wait in the stream undispatched (see docs/operations.md)",
               FQ_UINT("partition", k), FQ_UINT("term", p->part_term[k]),
               FQ_INT("js_err", ev->err_code));
}

static void px_on_consumer(fq_proxy *p, const fq_nio_event *ev)
{
    if (ev->source >= 0 && ev->source < FQ_NIO_MAX_CONSUMERS)
        p->consumer_ok[ev->source] = ev->status == FQ_OK;
    uint32_t k = px_cons_part(p, ev->source);
    if (ev->status == FQ_OK && k < PX_PARTS_MAX && ev->source % 2 == PX_CONS_SUBMIT)
        px_inherit_ask(p, k, ev->seq);
    px_refused_note(p, ev);
    if (ev->status == FQ_OK && ev->token)
        fq_log(FQ_LOG_WARN, "a consumer was refused as overlapping a nats-server node's stale "
               "copy of an earlier term's, deleted while that node recovered; made that one "
               "again, deleted it, and made this one (see docs/operations.md)",
               FQ_STR("stream", ev->source % 2 == PX_CONS_SUBMIT ? p->cfg.streams.submit
                                                                  : p->cfg.streams.done),
               FQ_INT("partition", k < PX_PARTS_MAX ? (int64_t)k : -1), FQ_UINT("term", ev->seq),
               FQ_UINT("stale_term", ev->token));
    p->served |= px_consumers_ok(p);
    if (p->leader)
        px_phase_leader(p);
    if (ev->status != FQ_OK && px_warn_ok(p, "consumer"))
        fq_log(FQ_LOG_WARN, ev->status == FQ_EEXIST
                   ? "cannot create a consumer: a later term's is on the stream (another "
                     "proxy leads, or the lease bucket was deleted: then delete that "
                     "consumer by hand); retrying"
               : ev->err_code == PX_JS_WQ_NOT_UNIQUE
                   ? "cannot create a consumer: the work-queue stream says another "
                     "consumer's filter overlaps it (if no consumer listed on the stream "
                     "has that filter, see docs/operations.md: seen after a nats-server "
                     "node's restart); retrying"
                   : "cannot create a consumer; retrying",
               FQ_STR("stream", ev->source % 2 == PX_CONS_SUBMIT ? p->cfg.streams.submit
                                                                  : p->cfg.streams.done),
               FQ_INT("partition", k < PX_PARTS_MAX ? (int64_t)k : -1),
               FQ_UINT("term", px_parts(p) > 1 && k < PX_PARTS_MAX ? p->part_term[k] : p->term),
               FQ_INT("js_err", ev->err_code));
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
        px_on_conn(p, ev->connected);
        break;
    case FQ_NIO_EV_CONSUMER:
        px_on_consumer(p, ev);
        break;
    case FQ_NIO_EV_KV:
        if (ev->source == PX_WATCH_LEASES)
            fq_leader_on_kv(p->ld, ev);
        else
            px_on_kv(p, ev->kv);
        break;
    case FQ_NIO_EV_KV_SYNCED:
        if (ev->source == PX_WATCH_LEASES)
            fq_leader_on_kv(p->ld, ev);
        else
            px_on_kv_synced(p, ev->seq);
        break;
    case FQ_NIO_EV_DENIED:
        px_on_denied(p);
        break;
    case FQ_NIO_EV_KV_ANSWER:
        if (TK_KIND(ev->token) == TK_LEASE)
            fq_leader_on_answer(p->ld, ev);
        else
            fq_nio_kv_entry_destroy(ev->kv);
        break;
    case FQ_NIO_EV_SCAN:
    case FQ_NIO_EV_SCAN_END:
        px_on_scan(p, ev);
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

/* Answers to the requests this replica sends itself: requests handed on
 * (P > 1) and its consumers' infos (px_backlog_ask). */
static fq_status px_fwd_listen(fq_proxy *p)
{
    char fwd[sizeof p->fwd_prefix + 2];
    snprintf(fwd, sizeof fwd, "%s.*", p->fwd_prefix);
    return fq_nio_listen(p->nio, PX_SUB_FWD, fwd, PX_FWD_MAX + PX_OWN_MAX);
}

/*
 * P > 1: the admin plane across replicas. Every replica subscribes to
 * <admin>.> and <explain>.* in one queue group, so that one of them
 * answers each request; to <admin>.replica.<id>.>, its own subjects (any
 * request as <admin>.replica.<id>.<request>, explain as
 * <admin>.replica.<id>.explain.<tenant>); and to <admin>.reload outside the
 * group, so that a reload there reaches every replica (the requester reads
 * the first answer; each replica logs its own). A request about one
 * tenant (explain, stats of a tenant) that reaches a replica not holding
 * the tenant's partition is handed on to the holder's own subject, and
 * its answer, which comes back on <fwd_prefix>.<seq> (a subscription of
 * this replica's own, under its inbox prefix), relayed to the requester
 * (px_admin_forward says why).
 */
static fq_status px_admin_start(fq_proxy *p)
{
    char own[300], reload[300];
    snprintf(own, sizeof own, "%s.>", p->replica_prefix);
    snprintf(reload, sizeof reload, "%s.reload", p->cfg.subjects.admin);
    fq_status s = fq_nio_subscribe_queue(p->nio, PX_SUB_ADMIN, p->admin_filter, PX_ADMIN_QUEUE,
                                         FQ_ADMIN_QUEUED, fq_admin_busy_queued);
    if (s == FQ_OK)
        s = fq_nio_subscribe_queue(p->nio, PX_SUB_EXPLAIN, p->explain_filter, PX_ADMIN_QUEUE,
                                   FQ_ADMIN_QUEUED, fq_admin_busy_queued);
    if (s == FQ_OK)
        s = fq_nio_subscribe(p->nio, PX_SUB_REPLICA, own, FQ_ADMIN_QUEUED, fq_admin_busy_queued);
    if (s == FQ_OK)
        s = fq_nio_subscribe(p->nio, PX_SUB_RELOAD, reload, FQ_ADMIN_QUEUED,
                             fq_admin_busy_queued);
    if (s == FQ_OK)
        s = px_fwd_listen(p);
    return s;
}

static fq_status px_start_consumers(fq_proxy *p)
{
    if (px_parts(p) > 1) {
        p->consuming = true;    /* each partition's as it is gained */
        fq_status s = px_admin_start(p);
        if (s == FQ_OK)
            s = px_share_start(p);
        if (s == FQ_OK && fq_nio_flush(p->nio, 5000) != FQ_OK)
            fq_log(FQ_LOG_WARN, "the server has not confirmed the admin subscription within 5 s");
        return s;
    }
    /* One proxy leads every partition, in its term. */
    fq_status s = FQ_OK;
    for (uint32_t k = 0; s == FQ_OK && k < px_parts(p); k++)
        s = px_part_gain(p, k, p->term);
    p->consuming = s == FQ_OK;
    if (s == FQ_OK)
        s = fq_nio_subscribe(p->nio, PX_SUB_ADMIN, p->admin_filter, FQ_ADMIN_QUEUED,
                             fq_admin_busy_queued);
    if (s == FQ_OK)
        s = fq_nio_subscribe(p->nio, PX_SUB_EXPLAIN, p->explain_filter, FQ_ADMIN_QUEUED,
                             fq_admin_busy_queued);
    if (s == FQ_OK)
        s = px_fwd_listen(p);
    if (s == FQ_OK)
        s = px_share_start(p);
    /* Once the proxy says it runs, the server has its admin subscription:
     * a request sent then gets an answer, not "no responders". A loaded
     * machine can take seconds to answer the flush: say so if it did not. */
    if (s == FQ_OK && fq_nio_flush(p->nio, 5000) != FQ_OK)
        fq_log(FQ_LOG_WARN, "the server has not confirmed the admin subscription within 5 s");
    return s;
}

/* One turn of waiting at start with the leader lease held (P = 1): its
 * renewals answered and sent, the health probe told we are not hanging.
 * With P > 1 the keys are not renewed: that would register us and take
 * partitions that nothing serves until the start ends (for as long as
 * the overrides bucket cannot be placed), which no other replica could
 * take meanwhile. */
static void px_start_turn(fq_proxy *p)
{
    fq_http_heartbeat(p->http);
    px_drain(p, PX_POLL_MS);
    if (px_parts(p) == 1)
        fq_leader_renew(p->ld, fq_nio_mono_ms(), p->connected);
}

/* Read the overrides bucket whole before the first dispatch, then keep
 * watching it. A bucket not made is retried each second, as the streams
 * and the lease bucket are (a cluster that cannot place its replicas yet,
 * a node down or not yet known, is not ready; gave up, overrides stayed
 * off until a restart), unless NATS refused a permission (FQ_EINVAL:
 * start fails). A watch that cannot start leaves the proxy serving on the
 * config alone. */
static fq_status px_overrides_start(fq_proxy *p)
{
    char why[512] = "";
    while (fq_nio_kv_ensure(p->nio, p->cfg.streams.tenants_bucket, 0, FQ_OVR_BUCKET_MAX_BYTES,
                            FQ_OVR_VALUE_MAX, p->cfg.streams.replicas, why, sizeof why) != FQ_OK) {
        if (px_denied_at_start(p))
            return FQ_EINVAL;
        fq_log(FQ_LOG_WARN, "overrides bucket not ready; retrying",
               FQ_STR("bucket", p->cfg.streams.tenants_bucket), FQ_STR("reason", why));
        uint64_t again = fq_nio_mono_ms() + 1000;
        while (fq_nio_mono_ms() < again && !atomic_load(&p->stop))
            px_start_turn(p);
        if (atomic_load(&p->stop))
            return FQ_EIO;
    }
    if (fq_nio_kv_watch(p->nio, PX_WATCH_TENANTS, p->cfg.streams.tenants_bucket) != FQ_OK) {
        fq_log(FQ_LOG_ERROR, "cannot watch the overrides bucket; overrides are off until a restart",
               FQ_STR("bucket", p->cfg.streams.tenants_bucket));
        return px_denied_at_start(p) ? FQ_EINVAL : FQ_OK;
    }
    uint64_t end = fq_nio_mono_ms() + PX_KV_SYNC_WAIT_MS;
    while (!fq_ovr_synced(p->ovr) && !p->denied_fatal && fq_nio_mono_ms() < end &&
           !atomic_load(&p->stop))
        px_start_turn(p);
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
 * the sequence our first batch expects. With P > 1, every partition is
 * adopted at our term first, and each has its marker on its own subject
 * <runs>.<k> (lib/ledger.h, partitions). False if stopped first. */
static bool px_journal_mark(fq_proxy *p)
{
    static const char mark[] = "{\"v\":1,\"entries\":[]}";
    for (uint32_t k = 0; px_parts(p) > 1 && k < px_parts(p); k++)
        fq_ledger_adopt(p->ledger, k, p->term);     /* FQ_EEXIST: adopted already */
    while (!p->jmarked && !atomic_load(&p->stop)) {
        fq_http_heartbeat(p->http);
        for (uint32_t k = 0; !p->jmark_sent && px_fresh(p) && k < px_parts(p); k++) {
            char subject[320];
            px_journal_subject(subject, sizeof subject, p, k);
            fq_nio_out o = {.subject = subject, .data = mark, .len = sizeof mark - 1};
            if (!p->part_marked[k] && px_publish(p, &o, TK_MAKE(TK_JMARK, k)) == FQ_OK) {
                p->jmark_sent++;
                p->part_mark_term[k] = p->term;
            }
        }
        px_drain(p, PX_POLL_MS);
        fq_leader_renew(p->ld, fq_nio_mono_ms(), p->connected);
        if (fq_leader_lease(p->ld)->state == FQ_LEASE_LOST || px_denied_at_start(p))
            return false;
    }
    return p->jmarked;
}

/* ---- P > 1: partitions gained and lost (lib/owner.h) -------------------- */

/*
 * The ownership (lib/leader.c) says which partitions are ours; its
 * callbacks only note it, and each turn does what follows, in this order:
 *  - a partition lost is let go: the ledger releases it (its queued runs
 *    naked, in each tenant's order, to its consumers while they still
 *    exist), then its consumers are stopped and deleted (what they held
 *    goes to the next owner's at once); lost on purpose, its key is handed
 *    off once the ledger says its journal is settled (nothing unsent or
 *    unanswered), so the next owner reads back all of it;
 *  - a partition gained is adopted by the ledger at its term (not while a
 *    read back is under way: once it ends), its marker stored on its
 *    journal subject (fencing an earlier owner's batches); once every
 *    adopted partition's marker is, the journal is read back off the loop
 *    (px_read_begin: the ledger takes the records of the partitions it is
 *    loading, the others served meanwhile), and once it ended each gets
 *    its consumers, named by its term;
 *  - the leader key gained, the admin and explain requests are answered
 *    here; lost, no longer.
 */

/* The leader key is held or not; it carries no request of its own: every
 * replica answers the admin plane (px_admin_start). */
static void px_duty_apply(fq_proxy *p)
{
    if (p->duty_want)
        p->duty = p->duty_want > 0;
    p->duty_want = 0;
}

/* A planned move of partition k settles first: its submits are no longer
 * fetched, its completions and PubAcks still served, until the ledger says
 * its journal is settled (every record stored and answered), so that the
 * next owner reads back all of it (its latest debts too), or until
 * PX_HANDOVER_SETTLE_MS passed (what is unsent then stays unacked for the
 * next owner). True while it waits. */
static bool px_part_settling(fq_proxy *p, uint32_t k, uint64_t now)
{
    if (!p->part_planned[k] || !p->part_term[k])
        return false;
    if (!p->part_settle_until[k]) {
        p->part_settle_until[k] = now + PX_HANDOVER_SETTLE_MS;
        fq_nio_consume_pause(p->nio, px_cons(p, PX_CONS_SUBMIT, k), true);
        return true;
    }
    fq_ledger_part_stats ps;
    fq_ledger_part_stats_get(&ps, p->ledger, k);
    bool settled = ps.settled || ps.fenced || !ps.owned;
    if (!settled && now < p->part_settle_until[k])
        return true;
    p->c.handovers_unsettled += !settled;
    fq_log(settled ? FQ_LOG_INFO : FQ_LOG_WARN,
           settled ? "a partition's journal settled for its move; handing it over"
                   : "a partition's journal did not settle for its move in time; handing it "
                     "over, its next owner does again what was not stored",
           FQ_INT("partition", (int)k), FQ_BOOL("settled", settled),
           FQ_BOOL("fresh", fq_leader_part_fresh(p->ld, (int32_t)k, now)),  /* not: its batches
                                                                               were not sent */
           FQ_UINT("waited_ms", now + PX_HANDOVER_SETTLE_MS - p->part_settle_until[k]));
    return false;
}

/* Partition k let go: the ledger's part, then its consumers, then, on a
 * planned move, its key handed off. */
static void px_part_drop(fq_proxy *p, uint32_t k)
{
    p->part_drop[k] = false;
    p->part_settle_until[k] = 0;
    fq_ledger_release(p->ledger, k, fq_nio_mono_ms(), fq_nio_unix_ms());
    px_actions(p);
    px_part_lose(p, k);
    if (p->part_marked[k]) {
        p->part_marked[k] = false;
        p->jmarks--;
    }
    p->rb.lost |= p->rb.on && p->part_loading[k];
    p->part_loading[k] = 0;
    /* A fenced partition's key, still ours if nobody else took it, is
     * released too: renewed, it would stay ours and unserved. */
    if (p->part_planned[k] || p->part_release[k])
        fq_leader_handoff(p->ld, (int32_t)k);
    p->part_planned[k] = p->part_release[k] = false;
    if (p->leader)
        px_phase_leader(p);
}

/* The partitions read back get their consumers. */
static void px_parts_consume(fq_proxy *p)
{
    for (uint32_t k = 0; k < px_parts(p) && k < PX_PARTS_MAX; k++) {
        if (!p->part_loading[k])
            continue;
        if (px_part_gain(p, k, p->part_loading[k]) != FQ_OK)
            fq_log(FQ_LOG_ERROR, "cannot consume a partition taken", FQ_INT("partition", (int)k));
        else
            fq_log(FQ_LOG_INFO, "consuming a partition", FQ_INT("partition", (int)k),
                   FQ_UINT("term", p->part_loading[k]));
        p->part_loading[k] = 0;
    }
}

/* A read back under way, at a turn: partitions of it let go meanwhile
 * are not read on (the subject under way given up if it is only theirs),
 * and with none left it is given up; ended, it is taken in and its
 * partitions consumed. */
static void px_read_check(fq_proxy *p, bool loading)
{
    px_readback *rb = &p->rb;
    if (rb->lost && !loading) {
        fq_nio_scan_stop(p->nio);
        rb->on = rb->ended = rb->lost = false;
        fq_log(FQ_LOG_INFO, "a journal read back given up: its partitions were let go",
               FQ_UINT("messages", rb->msgs), FQ_UINT("ms", fq_nio_mono_ms() - rb->began));
        return;
    }
    if (rb->lost) {
        bool still[FQ_PARTITIONS_MAX];
        rb->lost = false;
        px_read_set(p, still);
        for (size_t m = 0; m < FQ_PARTITIONS_MAX; m++)
            rb->subj[m] &= still[m];
        if (!rb->ended && rb->at >= 0 && !rb->subj[rb->at]) {
            fq_nio_scan_stop(p->nio);
            px_read_next(p, false);
        }
    }
    if (rb->on && rb->ended) {
        px_read_end(p);
        px_parts_consume(p);
    }
}

static void px_parts_apply(fq_proxy *p)
{
    static const char mark[] = "{\"v\":1,\"entries\":[]}";
    uint32_t P = px_parts(p) < PX_PARTS_MAX ? px_parts(p) : PX_PARTS_MAX;
    bool loading = false, unmarked = false;
    px_duty_apply(p);
    uint64_t now = fq_nio_mono_ms();
    if (now >= p->owners_next) {
        /* a standby's word on who holds what, kept current */
        p->owners_next = now + 1000;
        px_phase_leader(p);
    }
    for (uint32_t k = 0; k < P; k++) {
        if (p->part_drop[k] && !px_part_settling(p, k, now))
            px_part_drop(p, k);
        if (p->part_want[k] && !p->part_drop[k] && !p->rb.on &&
            fq_ledger_adopt(p->ledger, k, p->part_want[k]) == FQ_OK) {
            p->part_loading[k] = p->part_want[k];
            p->part_want[k] = 0;
        }
        loading |= p->part_loading[k] != 0;
        unmarked |= p->part_loading[k] && !p->part_marked[k];
    }
    if (p->rb.on) {
        px_read_check(p, loading);
        return;
    }
    if (!loading || now < p->rb.again_at)
        return;
    if (unmarked) {
        /* each partition's marker, once (again if its PubAck failed), while
         * its own lease is fresh */
        for (uint32_t k = 0; !p->jmark_sent && k < P; k++) {
            if (!p->part_loading[k] || p->part_marked[k] || !px_part_fresh(p, k))
                continue;
            char subject[320];
            px_journal_subject(subject, sizeof subject, p, k);
            fq_nio_out o = {.subject = subject, .data = mark, .len = sizeof mark - 1};
            if (px_publish(p, &o, TK_MAKE(TK_JMARK, k)) == FQ_OK) {
                p->jmark_sent++;
                p->part_mark_term[k] = p->part_loading[k];
            }
        }
        return;
    }
    for (uint32_t k = 0; k < P; k++)
        if (p->part_loading[k] && !px_part_fresh(p, k))
            return;     /* read back once every partition being taken is fresh */
    px_read_begin(p);
}

/* Whether another live process has our replica id (lib/owner.h,
 * fq_owner_duplicate: it keeps renewing r.<id>, or with P = 1 the leader
 * key, under another instance); said once, the caller stops. */
static bool px_duplicate(fq_proxy *p)
{
    const char *dup = fq_owner_duplicate(fq_leader_owner(p->ld));
    if (dup)
        fq_log(FQ_LOG_ERROR, "another running fairq-proxy has this replica_id: it keeps "
               "renewing its key in the lease bucket; give each replica its own replica_id "
               "(or none); stopping", FQ_STR("replica_id", p->lease_id),
               FQ_STR("instance", p->instance), FQ_STR("other", dup),
               FQ_STR("key", px_parts(p) == 1 ? FQ_OWNER_KEY_DUTY : "r.<id>"));
    return dup != NULL;
}

/* Wait until we hold the lease; false if stopped first, or on a fatal (a
 * permission refused, our replica id another process's). A standby changes
 * nothing but the lease key: it only reads it, and writes it to take it.
 * It sees its connection's events and publishes a metrics snapshot once a
 * second, so that its /metrics says what it knows (connected or not, the
 * lease not held) instead of the zeros of a snapshot never filled. */
static bool px_become_leader(fq_proxy *p)
{
    for (uint64_t next_log = 0, next_snap = 0;;) {
        uint64_t now = fq_nio_mono_ms();
        const fq_lease *ls = fq_leader_lease(p->ld);
        fq_leader_step(p->ld, now);
        if (ls->state == FQ_LEASE_LEADING)
            return true;
        if (px_denied_at_start(p) || px_duplicate(p))
            return false;
        /* Say so once the key was read, not while the first read is out:
         * a proxy that takes the lease at its first read never stood by. */
        if (now >= next_log && ls->op == FQ_LEASE_OP_NONE && ls->req > 0) {
            fq_log(FQ_LOG_WARN,
                   ls->holder[0] ? "standing by: another proxy holds the leader lease on "
                                   "these streams; taking over when it stops renewing it"
                                 : "standing by: cannot read the leader lease",
                   FQ_STR("holder", ls->holder), FQ_UINT("lease_ttl_ms", p->cfg.streams.lease_ttl_ms));
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
    px_pause(p, PX_CONS_SUBMIT, true);
    px_pause(p, PX_CONS_DONE, true);
    uint64_t end = t0 + PX_STOP_PUBACK_MS, offline = 0;
    /* A lease renewal under way acks nothing: not waited for. Without the
     * lease nothing may settle: no wait. */
    fq_ledger_stats ls;
    for (;;) {
        fq_ledger_stats_get(&ls, p->ledger);
        if (!p->pubs && !p->nretry && ls.settled)
            break;
        uint64_t now = fq_nio_mono_ms();
        offline = p->connected ? 0 : offline ? offline : now;
        if (now >= end || (offline && now >= offline + PX_STOP_OFFLINE_MS) ||
            fq_leader_lease(p->ld)->state == FQ_LEASE_LOST)
            break;
        px_ledger_flush(p, now, fq_nio_unix_ms());
        px_actions(p);
        px_drain(p, PX_POLL_MS);
        px_retry_due(p);
    }
    fq_ledger_stats_get(&ls, p->ledger);
    if (!p->pubs && !p->nretry && ls.settled)
        return true;
    /* Retrying: ours, and a journal batch the ledger sends again. */
    fq_log(FQ_LOG_WARN, "stopping with publishes unsettled; JetStream keeps their runs",
           FQ_UINT("pending", p->pubs), FQ_UINT("retrying", p->nretry + !ls.settled),
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
    if (s == FQ_OK && px_parts(p) > 1) {
        /* Replicas share the partitions: each serves those it gains as
         * they come (px_parts_apply), none waits for the leader key. */
        fq_leader_step(p->ld, fq_nio_mono_ms());
    } else if (s == FQ_OK) {
        px_phase(p, FQ_PHASE_STANDBY);
        s = px_become_leader(p) ? FQ_OK : FQ_EIO;
    }
    if (s == FQ_OK) {
        p->leader = true;
        if (px_parts(p) == 1)
            fq_log(FQ_LOG_INFO, "leader lease acquired", FQ_STR("id", p->lease_id),
                   FQ_UINT("term", p->term));
        else
            fq_log(FQ_LOG_INFO, "sharing the partitions with the other replicas",
                   FQ_STR("replica_id", p->lease_id), FQ_UINT("partitions", px_parts(p)));
        s = px_overrides_start(p);
    }
    if (s == FQ_OK && px_parts(p) == 1) {
        px_phase(p, FQ_PHASE_RECOVERING);
        s = px_journal_mark(p) ? px_recover(p) : FQ_EIO;
    }
    if (s == FQ_OK && px_parts(p) == 1 && fq_leader_lease(p->ld)->state != FQ_LEASE_LEADING)
        s = FQ_EIO;     /* lost while starting: exit 3 */
    if (s == FQ_OK && (s = px_start_consumers(p)) != FQ_OK)
        fq_log(FQ_LOG_ERROR, "cannot start consuming");
    if (p->ld && fq_leader_lease(p->ld)->state == FQ_LEASE_LOST)
        *rc = FQ_PROXY_EXIT_LEASE_LOST;
    if (atomic_load(&p->stop))
        *rc = FQ_PROXY_EXIT_OK;
    return atomic_load(&p->stop) ? FQ_EIO : s;
}

/* One turn of the loop: what came in drained, then the lease renewed, the
 * ledger ticked, retries, rates and sweeps, a dispatch and the journal
 * flushed. False, with the exit code in rc, when the proxy must stop. */
static bool px_turn(fq_proxy *p, const fq_ledger_counters *lc, int *rc)
{
    size_t busy = px_drain(p, fq_sweep_running(&p->sweep) ? 0 : PX_POLL_MS);
    uint64_t sent = lc->dispatched;
    uint64_t now = fq_nio_mono_ms();
    int64_t now_ms = fq_nio_unix_ms();
    if (atomic_exchange(&p->reload_asked, false)) {
        char restart[512], err[1024];
        px_reload(p, "signal", restart, sizeof restart, err, sizeof err);
    }

    fq_http_heartbeat(p->http);
    if (!fq_leader_renew(p->ld, now, p->connected) || p->fenced) {
        *rc = FQ_PROXY_EXIT_LEASE_LOST;
        return false;
    }
    if (px_duplicate(p)) {
        *rc = FQ_PROXY_EXIT_FATAL;
        return false;
    }
    if (px_parts(p) > 1)
        px_parts_apply(p);
    if (p->denied_fatal) {
        px_denied_at_start(p);
        *rc = FQ_PROXY_EXIT_FATAL;
        return false;
    }
    px_ledger_fresh(p);
    fq_ledger_tick(p->ledger, now, now_ms);
    px_actions(p);
    px_retry_due(p);
    px_rates(p, now);
    fq_ledger_set_rate(p->ledger, p->rate_tokens);
    px_sweep(p, now);
    px_undefer(p);
    px_ledger_fresh(p);
    px_share_tick(p, now);
    px_fwd_expire(p, now);
    /* With P > 1 the ledger dispatches the runs of each partition whose
     * lease is fresh, whatever the others' (fq_ledger_set_part_fence). */
    if (p->connected && (px_parts(p) > 1 || px_fresh(p)) && !p->share_closed)
        px_dispatch(p);
    px_ledger_flush(p, now, now_ms);
    px_actions(p);
    /* Under light load, send now what nats.c would hold a millisecond
     * to batch: latency from submit to dispatch is then a round trip.
     * Under load the batching is worth more than the wait. */
    if (busy < PX_LIGHT_LOAD && lc->dispatched != sent)
        fq_nio_flush(p->nio, 2);
    /* Changed queues ranked for stats pages once many wait. */
    fq_sched_rank_sync(p->sched, PX_RANK_BACKLOG);
    return true;
}

/* Stopping: what is in flight settled, the lease given up, NATS closed. */
static void px_stopped(fq_proxy *p, const fq_ledger_counters *lc, int rc)
{
    px_phase(p, FQ_PHASE_STOPPING);
    /* The lease lost, every partition is: nothing more is fetched (natsio
     * deletes nothing past the fence; the next owner's consumers delete
     * ours). */
    for (uint32_t k = 0; rc == FQ_PROXY_EXIT_LEASE_LOST && k < PX_PARTS_MAX; k++)
        px_part_lose(p, k);
    uint64_t t0 = atomic_load(&p->stop_at);
    /* Unsettled means NATS does not answer: a release or a flush would
     * wait out their time for nothing. */
    bool settled = px_finish(p, t0 ? t0 : fq_nio_mono_ms());
    if (rc == FQ_PROXY_EXIT_OK && settled && p->connected)
        px_lease_release(p, fq_nio_mono_ms() + PX_STOP_RELEASE_MS);
    fq_nio_close(p->nio, settled ? PX_STOP_FLUSH_MS : 0);
    fq_ledger_stats ls;
    fq_ledger_stats_get(&ls, p->ledger);
    fq_log(FQ_LOG_INFO, "fairq-proxy stopped", FQ_UINT("dispatched", lc->dispatched),
           FQ_UINT("held_for_next_start", ls.held),
           FQ_UINT("stop_ms", t0 ? fq_nio_mono_ms() - t0 : 0));
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
    const fq_ledger_counters *lc = fq_ledger_counters_get(p->ledger);
    while (!atomic_load(&p->stop) && px_turn(p, lc, &rc))
        continue;
    px_stopped(p, lc, rc);
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

/* The ledger's tenants are ours (px_tenant_get): created on a run's
 * admission or a record read back, as the policy allows. */
static fq_ledger_tenant *px_ledger_tenant(void *arg, const char *id, size_t len,
                                          enum fq_ledger_tenant_use use, fq_status *why)
{
    fq_proxy *p = arg;
    px_tenant *pt = px_tenant_find(p, id, len);
    if (use == FQ_LEDGER_TENANT_FIND) {
        *why = FQ_ENOTFOUND;
        return pt ? &pt->lt : NULL;
    }
    *why = px_tenant_get(&pt, p, id, len);
    return *why == FQ_OK ? &pt->lt : NULL;
}

static void *px_body_alloc(void *arg, size_t size)
{
    return fq_pool_alloc(arg, size);
}

static void px_body_free(void *arg, void *block, size_t size)
{
    fq_pool_free(arg, block, size);
}

static fq_ledger_opts px_ledger_opts(fq_proxy *p, const fq_config *c)
{
    fq_ledger_opts lo = {
        .sched = p->sched, .est = p->est, .tenant = px_ledger_tenant, .tenant_arg = p,
        .alloc = {px_body_alloc, px_body_free, p->bodies},
        .hash_key = {p->hash_key[0], p->hash_key[1]},
        .submit_created_ms = p->submit_created_ms,
        .max_buffered_runs = c->limits.max_buffered_runs,
        .max_buffered_bytes = c->limits.max_buffered_bytes,
        .debt_forget_ms = c->scheduler.debt_forget_ms, .max_wait_ms = c->scheduler.max_wait_ms,
        .partitions = c->partitions,
        .debts_moved = c->partitions > 1 && c->partitions_before > 1 &&
                       c->partitions_before != c->partitions,
        /* Half of max_payload: what was fetched already still fits. */
        .journal_room = p->max_payload > 0 ? (size_t)p->max_payload / 2 : 512 * 1024};
    px_ledger_shared(&lo, c);
    return lo;
}

/* The decisions' state machines: the policy, the scheduler and the
 * estimator with its workflows. */
static fq_status px_create_scheduling(fq_proxy *p, const fq_config *cfg)
{
    fq_status s = fq_config_policy(&p->policy, cfg);
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
    return s;
}

/* What the proxy owns, built in turn; the first failure stops it, and
 * fq_proxy_destroy frees what was built. */
static fq_status px_create_parts(fq_proxy *p, const fq_config *cfg)
{
    fq_status s = FQ_OK;
    /* Seeded from px_hash's key, as the tables were before strmap: clients
     * choose tenant ids, so they must not be able to plan the chains. */
    if (s == FQ_OK)
        s = fq_strmap_create(&p->tenants, FQ_STRMAP_KEY_OFFSET(px_tenant, node, id), 256,
                             p->hash_key[0]);
    if (s == FQ_OK)
        s = fq_ovr_create(&p->ovr, p->hash_key[1]);
    fq_admin_ops ao = {.arg = p, .tenant_at = px_admin_tenant_at,
                       .tenant_after = px_admin_tenant_after,
                       .tenant_find = px_admin_tenant_find, .tenant_view = px_admin_tenant_view,
                       .tenant_subs = px_admin_tenant_subs,
                       .overall = px_admin_overall, .policy = px_admin_policy,
                       .fresh = px_admin_fresh, .reply = px_admin_reply,
                       .reload = px_admin_reload, .ovr_write = px_ovr_write,
                       .explain = px_admin_explain, .replica_id = px_admin_replica_id,
                       .replica_at = px_admin_replica_at};
    if (s == FQ_OK)
        s = fq_admin_create(&p->admin, cfg->subjects.admin, p->ovr, &ao, fq_nio_mono_ms());
    if (s == FQ_OK)
        s = px_create_scheduling(p, cfg);
    if (s == FQ_OK)
        s = fq_log_limiter_create(&p->lim, 1024, 1000);
    if (s == FQ_OK)
        s = fq_pool_create(&p->bodies, PX_BODY_MAX);
    fq_ledger_opts ledger_opts = px_ledger_opts(p, &p->cfg);
    if (s == FQ_OK)
        s = fq_ledger_create(&p->ledger, &ledger_opts);
    if (s == FQ_OK)
        s = fq_proxy_set_ops(p, &(fq_proxy_ops){0});
    fq_sweep_init(&p->sweep, PX_SWEEP_MS);
    if (s == FQ_OK)
        s = fq_probes_create(&p->probes, p->cfg.http.max_tenant_series, fq_nio_mono_ms);
    fq_bucket_init(&p->refusal_logs, PX_REFUSAL_LOGS, PX_REFUSAL_LOGS, 0);
    if (s == FQ_OK && !(p->ev = calloc(PX_EVENTS, sizeof *p->ev)))
        s = FQ_ENOMEM;
    return s;
}

/* The subjects consumed and the lease holder's id, from the configuration. */
static void px_create_names(fq_proxy *p, const fq_config *cfg)
{
    /* with partitions, the server maps <submit>.<tenant> to <submit>.<k>.<tenant> */
    const char *tail = cfg->partitions > 1 ? "*.*" : "*";
    snprintf(p->submit_filter, sizeof p->submit_filter, "%s.%s", cfg->subjects.submit, tail);
    snprintf(p->done_filter, sizeof p->done_filter, "%s.%s", cfg->subjects.done, tail);
    /* with partitions, each has its own journal subject <runs>.<k> */
    snprintf(p->runs_filter, sizeof p->runs_filter, "%s%s", cfg->subjects.runs,
             cfg->partitions > 1 ? ".*" : "");
    snprintf(p->rejected_filter, sizeof p->rejected_filter, "%s.*", cfg->subjects.rejected);
    snprintf(p->admin_filter, sizeof p->admin_filter, "%s.>", cfg->subjects.admin);
    snprintf(p->explain_filter, sizeof p->explain_filter, "%s.*", cfg->subjects.explain);
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    if (cfg->replica_id)
        snprintf(p->lease_id, sizeof p->lease_id, "%s", cfg->replica_id);
    else
        fq_owner_id_make(p->lease_id, host, (long)getpid(), fq_nio_unix_ms());
    /* the instance: where this process runs, and random bits, so that two
     * processes given one replica_id are told apart (and found) */
    uint64_t r[2];
    px_hash_key(r);
    char made[FQ_OWNER_ID_MAX + 1];
    fq_owner_id_make(made, host, (long)getpid(), fq_nio_unix_ms());
    snprintf(p->instance, sizeof p->instance, "%.*s-%08" PRIx32, FQ_OWNER_ID_MAX - 9, made,
             (uint32_t)r[0]);
    snprintf(p->replica_prefix, sizeof p->replica_prefix, "%s.replica.%s", cfg->subjects.admin,
             p->lease_id);
    snprintf(p->fwd_prefix, sizeof p->fwd_prefix, "%s.fwd.%s",
             cfg->nats.inbox_prefix && *cfg->nats.inbox_prefix ? cfg->nats.inbox_prefix : FQ_INBOX_PREFIX,
             p->lease_id);
}

fq_status fq_proxy_create(fq_proxy **out, const fq_config *cfg, char *err, size_t errlen)
{
    *out = NULL;
    fq_proxy *p = calloc(1, sizeof *p);
    if (!p)
        return FQ_ENOMEM;
    px_hash_key(p->hash_key);
    for (uint32_t k = 0; k < PX_PARTS_MAX; k++)
        p->part_fence[k] = UINT64_MAX;  /* natsio's default: none of its own (P = 1) */
    fq_status s = fq_config_copy(&p->cfg, cfg);
    if (s == FQ_OK)
        s = px_create_parts(p, cfg);
    if (s != FQ_OK) {
        snprintf(err, errlen, "cannot build the proxy: %s", fq_status_text(s));
        fq_proxy_destroy(p);
        return s;
    }
    px_create_names(p, cfg);
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
    fq_leader_destroy(p->ld);
    fq_nio_destroy(p->nio);
    fq_share_destroy(p->share);
    for (size_t i = 0; i < p->nretry; i++)
        fq_nio_msg_destroy(p->retry[i].msg);
    free(p->retry);
    for (size_t i = 0; i < p->nheld_ev; i++)
        fq_nio_msg_destroy(p->held_ev[i].msg);
    free(p->held_ev);
    for (size_t i = 0; i < PX_FWD_MAX; i++)
        fq_nio_msg_destroy(p->fwd[i].req);
    fq_ledger_destroy(p->ledger);
    fq_pool_destroy(p->bodies);     /* held bodies */
    fq_buf_free(&p->carry);
    fq_buf_free(&p->carry_read);
    fq_strmap_destroy(p->tenants, px_tenant_release);
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
