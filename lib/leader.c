/* leader.c -- the ownership keys' I/O: lib/owner.c decides (the leader key, or a deployment's partitions), this does what it asks through natsio and says what follows. */
#include "leader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/*
 * Principles
 *
 * - Decisions are lib/owner.c's (and its leases' lib/lease.c's); this file
 *   only performs its actions, one helper for every key, and hands each
 *   outcome back with the slot it concerns.
 * - After every step the fence follows: natsio stops touching the
 *   consumers, and /readyz says not ready, from the end of freshness on
 *   (with P > 1, /readyz from the first partition held to go stale, each
 *   partition's consumers from the end of its own).
 */

struct fq_leader {
    fq_owner *own;              /* lib/owner.c's state */
    fq_nio *nio;                /* the caller's */
    fq_probes *probes;          /* the caller's */
    char bucket[256];           /* the lease bucket */
    fq_leader_opts o;           /* tokens, watch and callbacks (bucket, id, instance: not kept) */
    bool fenced;                /* another wrote what only the leader writes */
    bool stale;                 /* leading but not fresh (logged once) */
    bool watching;              /* P > 1: the bucket's watch started */
    bool stopping;              /* fq_leader_release was called */
    uint64_t *fence;            /* P > 1: each partition's fence as last told (o.fence);
                                   UINT64_MAX: not told yet */
    bool *part_stale;           /* P > 1: each partition held but not fresh (logged once) */
};

fq_status fq_leader_create(fq_leader **out, fq_nio *nio, fq_probes *probes,
                           const fq_leader_opts *o)
{
    *out = NULL;
    uint32_t parts = o->partitions ? o->partitions : 1;
    if (strlen(o->bucket) >= sizeof((fq_leader *)0)->bucket)
        return FQ_EINVAL;
    fq_leader *l = calloc(1, sizeof *l);
    if (!l)
        return FQ_ENOMEM;
    fq_status s = fq_owner_create(&l->own, parts, o->id, o->instance, o->ttl_ms);
    if (s != FQ_OK) {
        free(l);
        return s;
    }
    fq_owner_bound(l->own, o->bound);
    if (parts > 1 && (!(l->fence = malloc(parts * sizeof *l->fence)) ||
                      !(l->part_stale = calloc(parts, sizeof *l->part_stale)))) {
        fq_owner_destroy(l->own);
        free(l->fence);
        free(l);
        return FQ_ENOMEM;
    }
    for (uint32_t k = 0; parts > 1 && k < parts; k++)
        l->fence[k] = UINT64_MAX;
    l->nio = nio;
    l->probes = probes;
    snprintf(l->bucket, sizeof l->bucket, "%s", o->bucket);
    l->o = *o;
    l->o.partitions = parts;
    l->o.bucket = l->o.id = l->o.instance = NULL;
    *out = l;
    return FQ_OK;
}

void fq_leader_destroy(fq_leader *l)
{
    if (!l)
        return;
    fq_owner_destroy(l->own);
    free(l->fence);
    free(l->part_stale);
    free(l);
}

const fq_lease *fq_leader_lease(const fq_leader *l)
{
    return fq_owner_lease(l->own, FQ_OWNER_DUTY);
}

const fq_owner *fq_leader_owner(const fq_leader *l)
{
    return l->own;
}

bool fq_leader_fresh(const fq_leader *l, uint64_t now)
{
    return !l->fenced && fq_owner_fresh(l->own, FQ_OWNER_DUTY, now);
}

bool fq_leader_part_fresh(const fq_leader *l, int32_t part, uint64_t now)
{
    return !l->fenced && fq_owner_fresh(l->own, part, now);
}

bool fq_leader_parts_fresh(const fq_leader *l, uint64_t now)
{
    if (l->fenced)
        return false;
    for (uint32_t k = 0; k < l->o.partitions; k++) {
        const fq_lease *p = fq_owner_lease(l->own, (int32_t)k);
        if (p->state == FQ_LEASE_LEADING && !fq_lease_fresh(p, now))
            return false;
    }
    return true;
}

/* natsio leaves the consumers alone from the end of freshness on: with
 * P = 1 all of them; with P > 1 each partition's from the end of its own
 * lease's (the caller's fence callback), the process's fence lifted but
 * when fenced. The probes read the partition held whose freshness ends
 * first. */
static void ld_fence(fq_leader *l)
{
    const fq_lease *s = fq_leader_lease(l);
    uint64_t until = 0, sent = 0;
    if (l->o.partitions == 1) {
        until = fq_lease_fresh_until(s);
        sent = s->state == FQ_LEASE_LEADING ? s->confirmed_sent : 0;
    } else {
        for (uint32_t k = 0; k < l->o.partitions; k++) {
            const fq_lease *p = fq_owner_lease(l->own, (int32_t)k);
            uint64_t u = fq_lease_fresh_until(p);
            if (p->state == FQ_LEASE_LEADING && (!until || u < until)) {
                until = u;
                sent = p->confirmed_sent;
            }
            uint64_t f = l->fenced ? 0 : fq_owner_fresh_until(l->own, (int32_t)k);
            if (f != l->fence[k]) {
                l->fence[k] = f;
                if (l->o.fence)
                    l->o.fence(l->o.arg, (int32_t)k, f);
            }
        }
    }
    if (l->fenced)
        until = 0;
    fq_nio_fence(l->nio, l->o.partitions == 1 || l->fenced ? until : UINT64_MAX);
    fq_probes_lease(l->probes, until, sent,
                    s->state == FQ_LEASE_STANDBY && l->o.partitions == 1 ? s->holder : NULL);
}

void fq_leader_fence(fq_leader *l)
{
    l->fenced = true;
    ld_fence(l);
}

/* A key operation's token: the slot below LD_SLOT_BITS, then whether it
 * is a read, then its number (the answer names all three; one superseded
 * is known by its number). */
#define LD_SLOT_BITS 16
#define LD_GET (1ULL << LD_SLOT_BITS)
#define LD_TOKEN_REQS ((1ULL << (59 - LD_SLOT_BITS)) - 1)

/* One key operation sent through natsio without waiting: its answer comes
 * as an event (fq_leader_on_answer), or a failure at its deadline, the
 * lease's (lib/lease.h: past it the answer would not be believed). One
 * not sent is answered FQ_EIO at once (tried again after retry_ms). */
static void ld_op(fq_leader *l, const fq_owner_act *a)
{
    fq_nio *n = l->nio;
    const fq_lease *ls = fq_owner_lease(l->own, a->part);
    int64_t wait = ls ? (int64_t)ls->o.answer_ms : 0;
    uint64_t token = l->o.renew_token + ((a->req & LD_TOKEN_REQS) << (LD_SLOT_BITS + 1)) +
                     (a->kind == FQ_OWNER_GET ? LD_GET : 0) + a->slot;
    fq_status st;
    if (a->kind == FQ_OWNER_GET)
        st = fq_nio_kv_get_async(n, l->bucket, a->key, token, wait);
    else
        st = fq_nio_kv_write_async(n, l->bucket, a->key, a->value, strlen(a->value), a->expect,
                                   token, wait);
    if (st == FQ_OK)
        return;
    if (a->kind == FQ_OWNER_GET)
        fq_owner_on_get(l->own, a->slot, a->req, fq_nio_mono_ms(), FQ_EIO, NULL, 0);
    else
        fq_owner_on_write(l->own, a->slot, a->req, fq_nio_mono_ms(), FQ_EIO, 0);
}

/* Do what the state machine asks, until it asks nothing more, waiting for
 * no answer. */
static void ld_act(fq_leader *l)
{
    fq_owner_act a;
    while (fq_owner_next(&a, l->own)) {
        const fq_lease *ls = fq_owner_lease(l->own, a.part);
        switch (a.kind) {
        case FQ_OWNER_GAINED:
            if (l->o.partitions > 1)
                fq_log(FQ_LOG_INFO, a.part == FQ_OWNER_DUTY
                                        ? "took the deployment's leader key"
                                        : "took a partition",
                       FQ_INT("partition", a.part), FQ_UINT("term", a.term),
                       FQ_STR("again", a.again ? "yes" : "no"));
            if (l->o.gained)
                l->o.gained(l->o.arg, a.part, a.term, a.again);
            break;
        case FQ_OWNER_LOST:
            if (l->o.partitions == 1 && !a.planned)
                fq_log(FQ_LOG_ERROR, "lost the leader lease to another proxy; stopping",
                       FQ_STR("holder", ls->holder), FQ_UINT("term", ls->term));
            else if (l->o.partitions > 1)
                fq_log(a.planned ? FQ_LOG_INFO : FQ_LOG_WARN,
                       a.part == FQ_OWNER_DUTY ? "gave up the deployment's leader key"
                       : a.planned             ? "handing a partition over"
                                               : "lost a partition",
                       FQ_INT("partition", a.part), FQ_STR("holder", ls->holder));
            if (l->o.lost && l->o.partitions > 1)
                l->o.lost(l->o.arg, a.part, a.planned);
            break;
        default:
            ld_op(l, &a);
            break;
        }
    }
    ld_fence(l);
}

/* P > 1: the bucket watched once it exists (the caller made it first). */
static void ld_watch(fq_leader *l)
{
    if (l->o.partitions > 1 && !l->watching)
        l->watching = fq_nio_kv_watch(l->nio, l->o.watch, l->bucket) == FQ_OK;
}

/* The answers that came for the keys, handed to the state machine. */
static void ld_answers(fq_leader *l)
{
    fq_nio_event ev[64];
    size_t k;
    while ((k = fq_nio_kv_poll(l->nio, ev, sizeof ev / sizeof ev[0])) > 0)
        for (size_t i = 0; i < k; i++)
            fq_leader_on_answer(l, &ev[i]);
}

void fq_leader_step(fq_leader *l, uint64_t now)
{
    ld_answers(l);
    ld_watch(l);
    fq_owner_tick(l->own, now);
    ld_act(l);
}

/* P > 1: said once when a partition held stops being fresh (it alone
 * waits: its consumers, acks, batches and dispatches), and when it is
 * fresh again. */
static void ld_stale_log(fq_leader *l, uint64_t now)
{
    for (uint32_t k = 0; l->o.partitions > 1 && k < l->o.partitions; k++) {
        uint64_t until = fq_owner_fresh_until(l->own, (int32_t)k);
        bool stale = until && now >= until;
        if (stale == l->part_stale[k] || (!stale && !until)) {
            l->part_stale[k] = stale;
            continue;
        }
        l->part_stale[k] = stale;
        const fq_lease *s = fq_owner_lease(l->own, (int32_t)k);
        fq_log(stale ? FQ_LOG_WARN : FQ_LOG_INFO,
               stale ? "a partition's lease is not fresh: it alone waits (fetches, acks, "
                       "journal, dispatches) until it is renewed"
                     : "a partition's lease is fresh again",
               FQ_INT("partition", (int)k), FQ_UINT("lease_age_ms", fq_lease_age(s, now)));
    }
}

bool fq_leader_renew(fq_leader *l, uint64_t now, bool connected)
{
    if (connected) {
        ld_watch(l);
        fq_owner_tick(l->own, now);
        ld_act(l);
    }
    ld_stale_log(l, fq_nio_mono_ms());
    const fq_lease *s = fq_leader_lease(l);
    bool fresh = fq_lease_fresh(s, fq_nio_mono_ms());
    if (fresh == l->stale && s->state == FQ_LEASE_LEADING) {
        l->stale = !fresh;
        fq_log(fresh ? FQ_LOG_INFO : FQ_LOG_WARN,
               fresh ? "leader lease renewed; serving again"
                     : "cannot renew the leader lease; changing nothing until it is",
               FQ_UINT("lease_age_ms", fq_lease_age(s, now)));
    }
    return s->state != FQ_LEASE_LOST || l->o.partitions > 1;
}

void fq_leader_on_answer(fq_leader *l, const fq_nio_event *ev)
{
    uint64_t v = ev->token - l->o.renew_token;
    uint32_t slot = (uint32_t)(v & (LD_GET - 1));
    uint64_t req = v >> (LD_SLOT_BITS + 1);
    uint64_t now = fq_nio_mono_ms();
    if (v & LD_GET)
        fq_owner_on_get(l->own, slot, req, now, ev->status,
                        ev->kv ? (const char *)ev->kv->value : NULL, ev->seq);
    else
        fq_owner_on_write(l->own, slot, req, now, ev->status, ev->seq);
    fq_nio_kv_entry_destroy(ev->kv);
    if (fq_leader_releasing(l))
        fq_owner_tick(l->own, now);     /* the releases that waited for it */
    ld_act(l);
}

void fq_leader_on_kv(fq_leader *l, const fq_nio_event *ev)
{
    if (ev->type == FQ_NIO_EV_KV_SYNCED) {
        fq_owner_synced(l->own);
        return;
    }
    const fq_nio_kv_entry *e = ev->kv;
    if (!e)
        return;
    int64_t age = e->created_ms ? fq_nio_unix_ms() - e->created_ms : 0;
    fq_owner_on_key(l->own, fq_nio_mono_ms(), e->key, e->deleted ? NULL : e->value,
                    age > 0 ? (uint64_t)age : 0);
    fq_nio_kv_entry_destroy(ev->kv);
}

void fq_leader_handoff(fq_leader *l, int32_t part)
{
    fq_owner_handoff(l->own, part);
}

bool fq_leader_release(fq_leader *l)
{
    uint64_t now = fq_nio_mono_ms();
    l->stopping = true;
    fq_owner_stop(l->own, now);
    fq_owner_act a;
    /* The caller settled everything before: every key handed off at once. */
    while (fq_owner_next(&a, l->own))
        if (a.kind == FQ_OWNER_LOST)
            fq_owner_handoff(l->own, a.part);
    fq_owner_tick(l->own, now);         /* the partitions' and the leader key's */
    ld_act(l);
    fq_owner_tick(l->own, now);         /* then the registry's */
    ld_act(l);
    return fq_leader_releasing(l);
}

bool fq_leader_releasing(const fq_leader *l)
{
    return l->stopping && !fq_owner_stopped(l->own);
}
