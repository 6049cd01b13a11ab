/* probes.h -- what the proxy says of itself over HTTP: /metrics from snapshots its loop fills, /readyz from the state it publishes. */
#ifndef FQ_PROBES_H
#define FQ_PROBES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fq.h"
#include "metrics.h"

/*
 * Two threads meet here and nowhere else. The loop fills a metrics
 * snapshot over a sweep's pass and publishes it, and sets what readiness
 * depends on (its phase, stalls, the lease); the HTTP threads render the
 * newest snapshot and answer /readyz from that state. Three snapshots
 * change hands: the loop fills one and swaps it for the waiting one at
 * the pass's end; a render swaps the waiting one for its own if newer.
 * Neither holds the lock longer than a swap; readiness reads atomics, and
 * the lease holder's name under a lock of its own.
 */

/* What the proxy is doing, as /readyz reports it. */
enum fq_phase {
    FQ_PHASE_CONNECTING = 0,
    FQ_PHASE_STREAMS,
    FQ_PHASE_STANDBY,
    FQ_PHASE_RECOVERING,
    FQ_PHASE_SERVING,
    FQ_PHASE_CONSUMERS,
    FQ_PHASE_DISCONNECTED,
    FQ_PHASE_STOPPING,
};

/* Writes that keep failing, each making the proxy not ready. */
enum fq_stall {
    FQ_STALL_DISPATCH = 0,      /* publishes to the dispatch stream */
    FQ_STALL_JOURNAL,           /* batches of the runs journal */
    FQ_STALL__COUNT
};

typedef struct fq_probes fq_probes;

/* max_tenant_series: the snapshots' (0: FQ_METRICS_MAX_TENANT_SERIES);
 * now_ms: the monotonic clock the loop's times are on. */
fq_status fq_probes_create(fq_probes **out, size_t max_tenant_series, uint64_t (*now_ms)(void));
/* Safe on NULL. Only once no HTTP thread calls in any more. */
void fq_probes_destroy(fq_probes *pr);

/* ---- the loop's side ---- */

/* The snapshot being filled (fq_metrics_snapshot_clear it at a pass's
 * start); fq_probes_publish makes it the newest, and hands a new one. */
fq_metrics_snapshot *fq_probes_filling(fq_probes *pr);
void fq_probes_publish(fq_probes *pr);
void fq_probes_phase(fq_probes *pr, enum fq_phase ph);
/* Mark which as failing with js_err (stalled) or not: returns whether it
 * was marked failing before. */
bool fq_probes_stall(fq_probes *pr, enum fq_stall which, bool stalled, int js_err);
bool fq_probes_stalled(const fq_probes *pr, enum fq_stall which);
/* The lease: fresh until (monotonic ms; 0: not leading), the send time of
 * its last write the server confirmed (0: none), and who holds it while
 * standing by (NULL: unchanged; "": not known). */
void fq_probes_lease(fq_probes *pr, uint64_t fresh_until, uint64_t sent, const char *holder);
/* Partitions no live replica may own (P above the live replicas times
 * their bound, lib/owner.h), and that bound: /readyz stays ready (this
 * replica serves all it may) and says so. */
void fq_probes_unowned(fq_probes *pr, uint32_t unowned, uint32_t bound);
/* With partitions, a replica that owns none stands by (FQ_PHASE_STANDBY):
 * who holds them, for /readyz's body ("": not known yet, not ready). */
void fq_probes_owners(fq_probes *pr, const char *owners);

/* ---- the HTTP threads' side: fq_http's callbacks, with pr as arg ---- */

/* The newest snapshot's text (rendered once a pass, copied each scrape),
 * then the readiness families. */
fq_status fq_probes_metrics(fq_buf *out, void *arg);
/* /readyz: ready (a standby too); why says why not, or who leads. */
bool fq_probes_ready(char *why, size_t whylen, void *arg);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Why /readyz answers as it does at now, and what it says (why; "" for
 * ready). */
enum fq_ready_reason fq_probes_ready_state(fq_probes *pr, uint64_t now, char *why,
                                           size_t whylen);
#endif

#endif
