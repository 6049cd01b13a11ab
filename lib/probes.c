/* probes.c -- what the proxy says of itself over HTTP: /metrics from snapshots its loop fills, /readyz from the state it publishes. */
#include "probes.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lease.h"
#include "log.h"

/*
 * Principles
 *
 * - The loop never waits for a scrape, and a scrape never waits for the
 *   loop longer than a pointer swap.
 * - A pass's snapshot is rendered once, on the first scrape after it;
 *   later scrapes until the next pass copy the same text.
 * - A standby is a healthy sidecar doing its job: ready, so that an
 *   orchestrator does not take its pod down. A leader is not ready while
 *   its lease is not fresh (it changes nothing then) or a store refuses
 *   its writes.
 */

#define PR_RENDER_ROUND (1u << 20)  /* a scrape's copy of the text: its size rounded up to this */
#define PR_HTTP_NICE 10             /* the HTTP thread's nice value, from its first render */

static const char *const pr_phase_text[] = {
    [FQ_PHASE_CONNECTING] = "connecting to NATS",
    [FQ_PHASE_STREAMS] = "checking the streams",
    [FQ_PHASE_STANDBY] = "standing by: another proxy holds the leader lease",
    [FQ_PHASE_RECOVERING] = "reading the runs journal back",
    [FQ_PHASE_SERVING] = "ready",
    [FQ_PHASE_CONSUMERS] = "creating the consumers on FAIR_SUBMIT and FAIR_DONE",
    [FQ_PHASE_DISCONNECTED] = "disconnected from NATS",
    [FQ_PHASE_STOPPING] = "stopping",
};

struct fq_probes {
    uint64_t (*now_ms)(void);   /* the loop's monotonic clock */
    fq_metrics_snapshot *fill;  /* the loop's, being filled */
    pthread_mutex_t snap_mu;    /* guards snap and snap_gen */
    fq_metrics_snapshot *snap;  /* the newest whole one, waiting */
    uint64_t snap_gen;          /* passes published; snap is the newest */
    fq_metrics_snapshot *render; /* the HTTP thread's from here down */
    uint64_t render_gen;        /* the pass render holds */
    fq_buf text;                /* its text, served again until a newer pass */
    uint64_t text_gen;          /* the pass text is of; UINT64_MAX: none */
    bool niced;                 /* the HTTP thread runs at PR_HTTP_NICE */
    atomic_int phase;           /* enum fq_phase */
    atomic_int stalled[FQ_STALL__COUNT]; /* the last js_err + 1 of failing writes; 0: not */
    atomic_uint_fast64_t fresh_until;   /* the lease's fresh end; 0: not leading */
    atomic_uint_fast64_t lease_sent;    /* send time of its last confirmed write; 0: none */
    atomic_uint_fast64_t unowned;       /* partitions no live replica may own (fq_probes_unowned) */
    atomic_uint_fast64_t bound;         /* ... their bound each */
    pthread_mutex_t holder_mu;  /* guards holder and owners */
    char holder[FQ_LEASE_ID_MAX + 1];   /* standing by: who holds the lease; "": not known */
    char owners[512];           /* partitions, none ours: who holds them; "": not known */
};

fq_status fq_probes_create(fq_probes **out, size_t max_tenant_series, uint64_t (*now_ms)(void))
{
    *out = NULL;
    fq_probes *pr = calloc(1, sizeof *pr);
    if (!pr)
        return FQ_ENOMEM;
    pr->now_ms = now_ms;
    pr->text_gen = UINT64_MAX;
    pthread_mutex_init(&pr->snap_mu, NULL);
    pthread_mutex_init(&pr->holder_mu, NULL);
    fq_metrics_snapshot **sns[] = {&pr->fill, &pr->snap, &pr->render};
    fq_status s = FQ_OK;
    for (size_t i = 0; s == FQ_OK && i < 3; i++)
        s = fq_metrics_snapshot_create(sns[i], max_tenant_series);
    if (s != FQ_OK) {
        fq_probes_destroy(pr);
        return s;
    }
    *out = pr;
    return FQ_OK;
}

void fq_probes_destroy(fq_probes *pr)
{
    if (!pr)
        return;
    fq_metrics_snapshot_destroy(pr->fill);
    fq_metrics_snapshot_destroy(pr->snap);
    fq_metrics_snapshot_destroy(pr->render);
    fq_buf_free(&pr->text);
    pthread_mutex_destroy(&pr->snap_mu);
    pthread_mutex_destroy(&pr->holder_mu);
    free(pr);
}

/* ---- the loop's side ---- */

fq_metrics_snapshot *fq_probes_filling(fq_probes *pr)
{
    return pr->fill;
}

void fq_probes_publish(fq_probes *pr)
{
    pthread_mutex_lock(&pr->snap_mu);
    fq_metrics_snapshot *sn = pr->fill;
    pr->fill = pr->snap;
    pr->snap = sn;
    pr->snap_gen++;
    pthread_mutex_unlock(&pr->snap_mu);
}

void fq_probes_phase(fq_probes *pr, enum fq_phase ph)
{
    atomic_store(&pr->phase, (int)ph);
}

bool fq_probes_stall(fq_probes *pr, enum fq_stall which, bool stalled, int js_err)
{
    return atomic_exchange(&pr->stalled[which], stalled ? js_err + 1 : 0) != 0;
}

bool fq_probes_stalled(const fq_probes *pr, enum fq_stall which)
{
    return atomic_load(&((fq_probes *)pr)->stalled[which]) != 0;
}

void fq_probes_lease(fq_probes *pr, uint64_t fresh_until, uint64_t sent, const char *holder)
{
    atomic_store(&pr->fresh_until, fresh_until);
    atomic_store(&pr->lease_sent, sent);
    if (!holder)
        return;
    pthread_mutex_lock(&pr->holder_mu);
    /* the holder's replica id: the key may hold <id>@<instance> (owner.h) */
    snprintf(pr->holder, sizeof pr->holder, "%.*s", (int)strcspn(holder, "@"), holder);
    pthread_mutex_unlock(&pr->holder_mu);
}

void fq_probes_unowned(fq_probes *pr, uint32_t unowned, uint32_t bound)
{
    atomic_store(&pr->unowned, unowned);
    atomic_store(&pr->bound, bound);
}

void fq_probes_owners(fq_probes *pr, const char *owners)
{
    pthread_mutex_lock(&pr->holder_mu);
    snprintf(pr->owners, sizeof pr->owners, "%s", owners);
    pthread_mutex_unlock(&pr->holder_mu);
}

/* ---- the HTTP threads' side ---- */

/* Take the newest snapshot if one came since the last render, and render
 * it once: scrapes until the next pass get the same text, so a scrape
 * loop costs one render a pass and copies besides. */
static fq_status pr_text(fq_probes *pr)
{
    pthread_mutex_lock(&pr->snap_mu);
    if (pr->render_gen != pr->snap_gen) {
        fq_metrics_snapshot *sn = pr->render;
        pr->render = pr->snap;
        pr->snap = sn;
        pr->render_gen = pr->snap_gen;
    }
    pthread_mutex_unlock(&pr->snap_mu);
    if (pr->text_gen == pr->render_gen)
        return FQ_OK;
    fq_buf_reset(&pr->text);
    if (fq_metrics_render(&pr->text, pr->render) != FQ_OK) {
        pr->text_gen = UINT64_MAX;
        return FQ_ENOMEM;
    }
    pr->text_gen = pr->render_gen;
    return FQ_OK;
}

/* Standing by: who leads, if the lease could be read; with partitions, who
 * holds them. */
static enum fq_ready_reason pr_standby(fq_probes *pr, char *why, size_t whylen)
{
    pthread_mutex_lock(&pr->holder_mu);
    if (pr->owners[0])
        snprintf(why, whylen, "standby: owns no partition; %s", pr->owners);
    else if (pr->holder[0])
        snprintf(why, whylen, "standby: %s holds the leader lease", pr->holder);
    pthread_mutex_unlock(&pr->holder_mu);
    if (why[0])
        return FQ_READY_STANDBY;
    snprintf(why, whylen, "standing by: cannot read the leader lease");
    return FQ_READY_STARTING;
}

enum fq_ready_reason fq_probes_ready_state(fq_probes *pr, uint64_t now, char *why,
                                           size_t whylen)
{
    static const enum fq_ready_reason of_phase[] = {
        [FQ_PHASE_CONNECTING] = FQ_READY_STARTING, [FQ_PHASE_STREAMS] = FQ_READY_STARTING,
        [FQ_PHASE_STANDBY] = FQ_READY_STANDBY, [FQ_PHASE_RECOVERING] = FQ_READY_RECOVERING,
        [FQ_PHASE_SERVING] = FQ_READY_OK, [FQ_PHASE_CONSUMERS] = FQ_READY_CONSUMERS,
        [FQ_PHASE_DISCONNECTED] = FQ_READY_DISCONNECTED, [FQ_PHASE_STOPPING] = FQ_READY_STOPPING};
    int ph = atomic_load(&pr->phase), stalled = atomic_load(&pr->stalled[FQ_STALL_DISPATCH]);
    int jstalled = atomic_load(&pr->stalled[FQ_STALL_JOURNAL]);
    uint64_t until = atomic_load(&pr->fresh_until), sent = atomic_load(&pr->lease_sent);
    why[0] = '\0';
    if (ph == FQ_PHASE_STANDBY)
        return pr_standby(pr, why, whylen);
    if (ph != FQ_PHASE_SERVING && ph != FQ_PHASE_CONSUMERS && ph != FQ_PHASE_DISCONNECTED) {
        snprintf(why, whylen, "%s", pr_phase_text[ph]);
        return of_phase[ph];
    }
    if (now >= until) {
        snprintf(why, whylen, "cannot renew the leader lease: last renewed %" PRIu64
                 " ms ago; changing nothing until it is", sent && now > sent ? now - sent : 0);
        return FQ_READY_LEASE_STALE;
    }
    if (ph != FQ_PHASE_SERVING) {
        snprintf(why, whylen, "%s", pr_phase_text[ph]);
        return of_phase[ph];
    }
    if (stalled) {
        snprintf(why, whylen, "not dispatching: publishes to the dispatch stream keep failing "
                 "(js_err %d)", stalled - 1);
        return FQ_READY_DISPATCH_STALLED;
    }
    if (jstalled) {
        snprintf(why, whylen, "the runs journal refuses writes (js_err %d): no run or "
                 "completion is settled", jstalled - 1);
        return FQ_READY_JOURNAL_STALLED;
    }
    uint64_t unowned = atomic_load(&pr->unowned);
    if (unowned)    /* ready: this replica serves all it may; the deployment is short */
        snprintf(why, whylen, "ready; %" PRIu64 " partitions unowned: every live replica owns "
                 "its bound of %" PRIu64 ", start more replicas", unowned,
                 (uint64_t)atomic_load(&pr->bound));
    return FQ_READY_OK;
}

fq_status fq_probes_metrics(fq_buf *out, void *arg)
{
    fq_probes *pr = arg;
#ifdef __linux__
    /* A scrape of 50,000 tenants copies tens of megabytes: on two cores,
     * scrapes back to back would take CPU the loop needs to dispatch.
     * Linux keeps a nice value per thread, and who 0 is the calling one:
     * this thread alone yields to the loop. */
    if (!pr->niced) {
        pr->niced = true;
        if (setpriority(PRIO_PROCESS, 0, PR_HTTP_NICE) != 0)
            fq_log(FQ_LOG_DEBUG, "cannot lower the HTTP thread's priority");
    }
#endif
    if (pr_text(pr) != FQ_OK)
        return FQ_ENOMEM;
    /* The copy's buffer is sized to the text (rounded to PR_RENDER_ROUND),
     * not grown by doubling: past 32 MiB glibc maps a buffer afresh and
     * unmaps it when freed, every scrape, and each of its page faults and
     * the unmap take the process's memory map lock, which the loop's own
     * faults then wait on. Below it, the next scrape reuses the freed one. */
    size_t need = out->len + pr->text.len + 1;
    if (need > out->cap) {
        need = (need + PR_RENDER_ROUND - 1) / PR_RENDER_ROUND * PR_RENDER_ROUND;
        char *q = realloc(out->p, need);
        if (!q)
            return FQ_ENOMEM;
        out->p = q;
        out->cap = need;
    }
    fq_buf_append(out, pr->text.p, pr->text.len);
    char why[256];
    uint64_t sent = atomic_load(&pr->lease_sent), now = pr->now_ms();
    fq_metrics_render_ready(out, fq_probes_ready_state(pr, now, why, sizeof why),
                            sent && now > sent ? now - sent : 0);
    return out->failed ? FQ_ENOMEM : FQ_OK;
}

bool fq_probes_ready(char *why, size_t whylen, void *arg)
{
    fq_probes *pr = arg;
    enum fq_ready_reason r = fq_probes_ready_state(pr, pr->now_ms(), why, whylen);
    return r == FQ_READY_OK || r == FQ_READY_STANDBY;
}
