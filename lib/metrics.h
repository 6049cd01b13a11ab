/* metrics.h -- fairq's Prometheus metrics: a snapshot the proxy fills, rendered as text exposition. */
#ifndef FQ_METRICS_H
#define FQ_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "drr.h"
#include "fq.h"
#include "policy.h"

/*
 * The proxy copies its state into a snapshot under its own lock, lets go,
 * and renders outside it: rendering is a pure function of the snapshot, so
 * a scrape never holds the dispatch loop, and tests render made-up states.
 * The families, their labels and the fold rules are listed in
 * docs/metrics.md; tests/metrics_test.py checks the two agree.
 */

/* Tenants past this many get no series of their own: their values are
 * folded, per plan, into tenant="_other". */
#define FQ_METRICS_MAX_TENANT_SERIES 10000
#define FQ_METRICS_OTHER FQ_TENANT_OTHER

/* Submit-to-dispatch latency: fixed buckets from 1 ms to 1 h. */
#define FQ_HIST_BUCKETS 20
#ifdef FQ_TESTING   /* tests only: no program calls it */
extern const uint64_t fq_hist_bounds_us[FQ_HIST_BUCKETS];
#endif

/* A histogram accumulator: fixed size, no allocation per observation. Not
 * locked: update it where the tenant's other state is updated. */
typedef struct fq_hist {
    uint64_t bucket[FQ_HIST_BUCKETS + 1];  /* observations per bucket, not
                                              cumulative; the last is +Inf */
    uint64_t sum_us;                       /* sum of observations */
} fq_hist;

/* Count one observation of us microseconds. */
void fq_hist_observe(fq_hist *h, uint64_t us);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Observations counted so far. */
uint64_t fq_hist_count(const fq_hist *h);
#endif

/* One tenant's values. Strings are copied in, so a snapshot holds no
 * pointer into the proxy's live state. */
typedef struct fq_metrics_tenant {
    char tenant[FQ_TENANT_MAX + 1];
    char plan[FQ_TENANT_MAX + 1];
    enum fq_policy_source source;   /* which layer set the policy in force */
    uint32_t weight;                /* in force */
    uint64_t queued_runs;
    uint64_t queued_tokens;         /* estimates of the queued runs */
    uint64_t in_flight_runs;
    int64_t deficit_tokens;         /* negative: in debt */
    double oldest_age_seconds;      /* oldest queued run; 0 if none */
    double rate_wait_seconds;       /* until its token rate lets it send; 0 if it may */
    uint64_t dispatched_runs;       /* counters from here on */
    uint64_t charged_tokens;        /* estimates charged at dispatch */
    uint64_t actual_tokens;         /* reported by completions */
    uint64_t priced_tokens;         /* their priced cost, reconciled */
    uint64_t completed_runs;        /* completions reconciled */
    uint64_t expired_runs;          /* leases that expired */
    uint64_t rejected[FQ__COUNT];   /* refused runs by reason (fq_status) */
    double estimate_error;          /* actual / charged; NaN: not known */
    fq_hist submit_to_dispatch;
} fq_metrics_tenant;

/* How a per-tenant value is stored, and how tenants folded into _other
 * combine (fq_overall_row.fold: how replicas' values combine). 0 is no
 * rule, so that a row written without one is found (tests/test_metrics). */
enum fq_tenant_kind { FQ_TV_U64, FQ_TV_I64, FQ_TV_F64 };
enum fq_tenant_fold { FQ_FOLD_SUM = 1, FQ_FOLD_MAX, FQ_FOLD_NONE };

/* One per-tenant value, spelled once: its Prometheus family (type, help),
 * where it is in fq_metrics_tenant, how folded tenants combine, and its
 * key in a tenant of the stats reply. Both fq_metrics_render and the
 * stats reply walk fq_tenant_rows; the weight (labelled by source), the
 * refusals (by reason) and the latency histogram are written apart. */
typedef struct fq_tenant_row {
    const char *name;           /* the family; NULL: the stats reply only */
    const char *type;
    const char *help;
    size_t off;                 /* of the value in fq_metrics_tenant */
    enum fq_tenant_kind kind;
    enum fq_tenant_fold fold;
    const char *stats_key;      /* NULL: /metrics only */
    double stats_scale;         /* FQ_TV_F64: the stats reply has the value times
                                   this, rounded (seconds as ms); 0: as it is */
} fq_tenant_row;
extern const fq_tenant_row fq_tenant_rows[];
extern const size_t fq_tenant_nrows;

/* What became of a completion (label outcome of fairq_completions_total). */
enum fq_metrics_completion {
    FQ_COMPLETION_HELD,             /* its run in flight: reconciled */
    FQ_COMPLETION_UNHELD,           /* late, its run's lease expired (before or
                                       across a restart): reconciled against
                                       the charge fairq remembered */
    FQ_COMPLETION_DUPLICATE,        /* for a run completed already: ignored */
    FQ_COMPLETION_INVALID,          /* not a valid completion: to rejected */
    FQ_COMPLETION_UNKNOWN,          /* for no run fairq dispatched and
                                       remembers, on that tenant's subject:
                                       ignored, to rejected */
    FQ_COMPLETION__COUNT
};

/* Why /readyz answers as it does now (label reason of fairq_ready). */
enum fq_ready_reason {
    FQ_READY_OK = 0,                /* leading, serving: 200 */
    FQ_READY_STANDBY,               /* standing by while another leads: 200 */
    FQ_READY_STARTING,              /* connecting, checking the streams: 503 */
    FQ_READY_RECOVERING,            /* reading the journal back: 503 */
    FQ_READY_CONSUMERS,             /* the consumers are not in place: 503 */
    FQ_READY_DISCONNECTED,          /* cut off from NATS: 503 */
    FQ_READY_LEASE_STALE,           /* leading, but the lease cannot be renewed: 503 */
    FQ_READY_DISPATCH_STALLED,      /* the dispatch stream refuses writes: 503 */
    FQ_READY_JOURNAL_STALLED,       /* the journal refuses writes: 503 */
    FQ_READY_STOPPING,              /* 503 */
    FQ_READY__COUNT
};
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The label value of a reason ("ready", "standby", "lease_stale", ...). */
const char *fq_ready_reason_name(enum fq_ready_reason r);
#endif
/* Append the families that say how the proxy stands at this very scrape,
 * read as the probes read it rather than from a snapshot (a standby fills
 * none): fairq_ready{reason}, 1 for r and 0 for the others, and
 * fairq_lease_age_seconds (lease_age_ms: since the send of the last lease
 * write the server confirmed; 0 when not leading). */
void fq_metrics_render_ready(fq_buf *out, enum fq_ready_reason r, uint64_t lease_age_ms);

/* Partitions labelled at most: a replica owns no more (lib/proxy.c's
 * PX_OWN_MAX, natsio's consumers; docs/partitions.md), so the series of
 * fairq_partition_queued_runs and _backlog_runs are bounded by 128
 * whatever P is. */
#define FQ_METRICS_PARTS 128

/* Each partition's backlog, for the partitions this replica owns, by the
 * proxy's pair of consumers (any order). */
typedef struct fq_metrics_parts {
    uint64_t queued[FQ_METRICS_PARTS]; /* runs queued in memory, its tenants' */
    bool owned[FQ_METRICS_PARTS];   /* owned: a series of its own */
    uint32_t part[FQ_METRICS_PARTS]; /* its partition (0..P-1): the series' label */
} fq_metrics_parts;

/* The proxy as a whole. Every field has one row in fq_overall_rows
 * (lib/metrics.c), which names it for the stats reply and for /metrics. */
typedef struct fq_metrics_overall {
    uint64_t in_flight_runs;
    uint64_t in_flight_tokens;
    uint64_t queued_runs;           /* every tenant's */
    uint64_t queued_tokens;         /* estimates of the queued runs */
    uint64_t tenants;               /* tenants the scheduler knows */
    uint64_t active_tenants;        /* of which with queued runs */
    uint64_t window_runs;           /* capacity; 0: unlimited */
    uint64_t window_tokens;         /* capacity; 0: unlimited */
    uint64_t share_runs;            /* window.share: this replica's window now;
                                       0: not shared (the window applies) */
    uint64_t share_tokens;          /* ... in tokens; 0: not shared or unlimited */
    uint64_t share_peers;           /* window.share: other replicas heard lately */
    uint64_t share_refused;         /* counter: heartbeats refused (invalid, or
                                       one replica too many) or dropped (too many
                                       waiting) */
    uint64_t admin_forwarded;       /* counter: P > 1, admin and explain requests
                                       handed on to the replica holding their
                                       tenant's partition */
    uint64_t expired_leases;        /* counter */
    uint64_t buffered_runs;         /* held in memory, body or index only */
    uint64_t buffered_bytes;        /* bodies held in memory */
    bool fetch_paused;              /* at max_buffered_runs: not fetching */
    uint64_t fetch_pauses;          /* counter: times fetching paused */
    uint64_t given_back_runs;       /* given back to the submit stream now, awaited */
    uint64_t given_back;            /* counter: submits given back over their share */
    uint64_t given_back_lost;       /* counter: given back, never came again: forgotten */
    bool nats_connected;
    uint64_t nats_reconnects;       /* counter */
    uint64_t config_reloads;        /* counter: reloads that took effect */
    uint64_t config_reload_failures;/* counter: reloads refused */
    uint64_t invalid_subject_runs;  /* counter: refused, no valid tenant */
    uint64_t rejected_runs[FQ__COUNT]; /* counters: every refused run by reason
                                       (fq_status), tenant known or not */
    bool lease_held;                /* this proxy is the dispatcher */
    uint64_t partitions_owned;      /* partitions whose ownership key we hold (lib/owner.h) */
    uint64_t partitions_bound;      /* partitions one replica owns at most (owner's bound) */
    uint64_t partitions_unassigned; /* partitions no live replica may own: P above what
                                       they hold at their bound (fq_owner_stats.unassigned) */
    uint64_t partition_handovers;   /* counter: partitions taken or given up */
    uint64_t partitions_fenced;     /* counter: let go when their journal fenced us */
    uint64_t handovers_unsettled;   /* counter: planned moves handed off unsettled */
    uint64_t submits_stranded;      /* counter: partitions' submits found stranded below their
                                       consumer's ack floor, and delivered again */
    uint64_t consumers_refused;     /* partitions whose submit consumer the server has refused
                                       for over PX_REFUSED_BOUND_MS */
    uint64_t lease_values_refused;  /* counter: lease bucket keys and values refused
                                       (lib/owner.h, fq_owner_stats.refused) */
    double lease_renew_seconds;     /* the last confirmed renewal's round trip */
    double lease_renew_max_seconds; /* the longest since start */
    double dispatch_rate;           /* runs a second, smoothed */
    double dispatch_token_rate;     /* estimated tokens dispatched a second, smoothed */
    double completion_rate;         /* completions a second, smoothed */
    double actual_token_rate;       /* actual tokens reported a second, smoothed */
    uint64_t submitted_runs;        /* counter: runs fetched (first delivery) */
    uint64_t redelivered_runs;      /* counter: deliveries of runs held already */
    uint64_t duplicates_acked;      /* counter: submits acked with no dispatch,
                                       dispatched before a restart */
    uint64_t dispatched_runs;       /* counter: runs dispatched */
    uint64_t dispatch_duplicates;   /* counter: dispatches JetStream de-duplicated */
    uint64_t adopted_runs;          /* counter: runs in flight read back at start */
    uint64_t journal_refused_records; /* counter: journal records refused at start
                                       (not valid, or of a type not known) */
    uint64_t debts_forgiven;        /* counter: debts forgiven after scheduler.debt_forget_ms */
    uint64_t expired_forgotten_early; /* counter: expired runs forgotten before their
                                       time, past the 100,000 remembered */
    uint64_t completion_copies_skipped; /* counter: invalid or unknown completions
                                       acked without a copy, past 100 a second */
    uint64_t completions_deferred;  /* counter: completions naked to be looked at again,
                                       their run not in flight yet (protocol.md, 3) */
    uint64_t completions_early_applied; /* counter: completions held before their run was
                                       in flight, reconciled on its duplicate dispatch */
    uint64_t redispatched;          /* counter: runs read back sent again and stored new:
                                       the attempt their flight record told of had failed */
    uint64_t done_unconfirmed_resent; /* counter: submits of runs completed before their
                                       dispatch was seen stored, come again: sent again */
    uint64_t dispatch_unanswered;   /* counter: dispatches whose PubAck did not come,
                                       published again as they were */
    uint64_t refusals_repeated;     /* counter: submits refused for the moment's state, come
                                       again: refused again by their refused record */
    uint64_t possible_duplicates;   /* counter: dispatches marked Fair-Possible-Duplicate
                                       (lib/ledger.h's possible_duplicates) */
    uint64_t unowned;               /* counter: deliveries of a partition not owned, dropped
                                       unanswered */
    uint64_t records_foreign;       /* counter: journal records read back of another
                                       partition than the one being read */
    uint64_t parts_adopted;         /* counter: partitions the ledger adopted */
    uint64_t parts_released;        /* counter: partitions the ledger let go */
    uint64_t released_queued;       /* counter: queued runs naked, their partition let go */
    uint64_t released_dispatched;   /* counter: dispatched runs let go with their partition */
    uint64_t index_only_runs;       /* held without their body in memory */
    uint64_t body_reads;            /* counter: bodies read back at dispatch */
    uint64_t body_lost;             /* counter: bodies gone from the stream */
    uint64_t completions[FQ_COMPLETION__COUNT]; /* counters, by outcome */
    uint64_t publish_failures;      /* counter */
    uint64_t dispatch_failures;     /* counter: dispatches not stored, their run queued again */
    uint64_t parked_tenants;        /* out of the rotation after a failed dispatch */
    bool dispatch_stalled;          /* dispatches keep failing: not ready */
    uint64_t refusals_unstored;     /* counter: refusals the rejected stream refused */
    uint64_t overrides_refused;     /* counter: invalid values in the bucket */
    uint64_t subtenant_refused;     /* counter: runs refused for their sub-tenant claim */
    uint64_t subtenant_overflow;    /* counter: runs queued in their tenant's overflow
                                       sub-tenant, past its max_subtenants */
    uint64_t admin_reply_failures;  /* counter: admin replies not sent */
    uint64_t admin_requests_busy;   /* counter: admin requests answered busy: over
                                       their rate, too many waiting, or too many
                                       handed on to other replicas waiting */
    uint64_t admin_requests_no_reply; /* counter: admin requests without a reply
                                       subject, dropped unread */
    uint64_t admin_requests_too_long; /* counter: admin requests past 4 KiB of body,
                                       refused unread */
    uint64_t admin_requests_invalid; /* counter: admin and explain requests refused for
                                       their subject, body or a field */
    uint64_t max_payload;           /* the server's, in bytes; 0: not known yet */
    fq_metrics_parts parts;         /* gauge by partition owned; their sum in the stats */
    fq_metrics_parts parts_backlog; /* gauge by partition owned: in queued, its submit
                                       consumer's num_pending + num_ack_pending; their sum
                                       in the stats */
} fq_metrics_overall;

/* How a value of fq_metrics_overall is stored and written. */
enum fq_overall_kind {
    FQ_OV_COUNTER = 0,  /* uint64_t: a counter */
    FQ_OV_GAUGE,        /* uint64_t: a gauge */
    FQ_OV_FLAG,         /* bool: a gauge of 0 or 1; true or false in the stats */
    FQ_OV_CAPACITY,     /* uint64_t, 0 for unlimited: a gauge, +Inf when 0 */
    FQ_OV_RATE,         /* double: a gauge */
    FQ_OV_REASONS,      /* uint64_t[FQ__COUNT] by fq_status: a counter labelled
                           reason (those not 0); their sum in the stats */
    FQ_OV_PARTS,        /* fq_metrics_parts: a gauge labelled partition (those
                           owned); their sum in the stats */
};

/* One value of the proxy as a whole, spelled once: where it is, its key
 * in the stats reply's "overall" object, its Prometheus family, the
 * family's type (from kind) and help, and how it folds across replicas.
 * The stats reply, fq_metrics_render and fairq-admin's deployment view
 * (stats --all) walk fq_overall_rows. */
typedef struct fq_overall_row {
    enum fq_overall_kind kind;
    size_t off;                 /* of the value in fq_metrics_overall */
    const char *stats_key;      /* NULL: not in the stats reply */
    const char *metric;         /* NULL: not in /metrics */
    const char *label;          /* the sample's label pair, as written (outcome="held");
                                   NULL: none. Rows of one family follow each other,
                                   and the first one's help is the family's */
    const char *help;
    enum fq_tenant_fold fold;   /* how replicas' values fold into the deployment's
                                   (fairq-admin stats --all): FQ_FOLD_SUM for what each
                                   replica holds or counts of its own (a flag: how many
                                   have it set), FQ_FOLD_MAX for a round trip's latency,
                                   FQ_FOLD_NONE for what is the same everywhere or one
                                   replica's view (a capacity, share_peers, max_payload) */
} fq_overall_row;

extern const fq_overall_row fq_overall_rows[];
extern const size_t fq_overall_nrows;
/* The row's value in a: a count or gauge; REASONS: their sum; FLAG: 0 or 1;
 * RATE: the rate rounded down (fq_overall_rate has it whole). */
uint64_t fq_overall_u64(const fq_overall_row *r, const fq_metrics_overall *a);
double fq_overall_rate(const fq_overall_row *r, const fq_metrics_overall *a);

typedef struct fq_metrics_scratch fq_metrics_scratch;

typedef struct fq_metrics_snapshot {
    fq_metrics_overall all;
    fq_metrics_tenant *tenants;     /* tenants added, in a stable order
                                       (creation order): the first
                                       max_tenant_series get series */
    size_t n_tenants;
    size_t cap_tenants;
    size_t max_tenant_series;
    fq_metrics_tenant *folded;      /* tenants folded in as they were filled
                                       (fq_metrics_snapshot_fold): a row per plan */
    size_t n_folded_rows, cap_folded_rows;
    size_t n_folded;                /* tenants folded in as they were filled */
    double *folded_ages;            /* their oldest queued ages, of those with
                                       queued runs: the skew counts them */
    size_t n_folded_ages, cap_folded_ages;
    fq_metrics_scratch *scratch;    /* the renderer's, reused across renders */
} fq_metrics_snapshot;

/* max_tenant_series 0 takes FQ_METRICS_MAX_TENANT_SERIES. On error *out is
 * NULL. */
fq_status fq_metrics_snapshot_create(fq_metrics_snapshot **out, size_t max_tenant_series);
/* Safe on NULL. */
void fq_metrics_snapshot_destroy(fq_metrics_snapshot *s);
/* Empty it for the next fill; memory is kept. */
void fq_metrics_snapshot_clear(fq_metrics_snapshot *s);
/* Append a zeroed tenant (estimate_error NaN), or NULL when out of memory
 * (the snapshot is unchanged). Valid until the next add or clear. */
fq_metrics_tenant *fq_metrics_snapshot_add(fq_metrics_snapshot *s);
/* Fold m into the _other row of its plan now rather than adding it: what
 * a filler does with tenants past max_tenant_series (once n_tenants has
 * reached it), so that a snapshot's memory is bounded by the series limit
 * and the plans whatever the number of tenants, and rendering renders the
 * same text. m's id is not read. FQ_ENOMEM: the snapshot is unchanged. */
fq_status fq_metrics_snapshot_fold(fq_metrics_snapshot *s, const fq_metrics_tenant *m);

/* Copy the scheduler's view of a tenant into m: id, weight, deficit,
 * queue, in flight and totals; the oldest run's age from now, with now and
 * the scheduler's times in one unit of unit_seconds seconds (1e-3 for ms).
 * Plan, source, rejections, estimate error and the histogram are the
 * caller's to set. */
void fq_metrics_tenant_set_info(fq_metrics_tenant *m, const fq_tenant_info *ti,
                                uint64_t now, double unit_seconds);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The queue-age skew across tenants, in seconds: the oldest queued run's
 * age of the most delayed tenant minus the median of the same age over
 * every tenant with queued work; 0 with fewer than two such tenants. A
 * difference, not a ratio, because the median is often near 0 and a ratio
 * would swing wildly on it; in seconds, because that is what an operator
 * sets an alert on. Large skew means a few tenants are backlogged while the
 * typical one is not: under FIFO, everyone would wait behind them. */
double fq_metrics_queue_age_skew(fq_metrics_snapshot *s);
#endif

/* Append the text exposition (format 0.0.4) of s to out. FQ_ENOMEM if out
 * could not grow; out then holds a partial text to discard. */
fq_status fq_metrics_render(fq_buf *out, fq_metrics_snapshot *s);

#define FQ_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
