/* leader.c -- the leader lease's I/O: lib/lease.c decides, this does what it asks through natsio and says what follows. */
#include "leader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/*
 * Principles
 *
 * - Decisions are lib/lease.c's; this file only performs its steps and
 *   hands each outcome back with the time its request was sent.
 * - After every step the fence follows: natsio stops touching the
 *   consumers, and /readyz says not ready, from the end of freshness on.
 */

struct fq_leader {
    fq_lease lease;             /* lib/lease.c's state */
    fq_nio *nio;                /* the caller's */
    fq_probes *probes;          /* the caller's */
    char bucket[256];           /* the lease bucket */
    fq_leader_opts o;           /* tokens and the lead callback (bucket, id: not kept) */
    bool fenced;                /* another wrote what only the leader writes */
    bool stale;                 /* leading but not fresh (logged once) */
    bool releasing;             /* the release at a stop awaits its PubAck */
};

fq_status fq_leader_create(fq_leader **out, fq_nio *nio, fq_probes *probes,
                           const fq_leader_opts *o)
{
    *out = NULL;
    if (strlen(o->bucket) >= sizeof((fq_leader *)0)->bucket)
        return FQ_EINVAL;
    fq_leader *l = calloc(1, sizeof *l);
    if (!l)
        return FQ_ENOMEM;
    fq_lease_opts lo;
    fq_lease_opts_for(&lo, o->ttl_ms);  /* renewal, margin and retry in the TTL's ratios */
    if (fq_lease_init(&l->lease, "leader", o->id, &lo) != FQ_OK) {
        free(l);
        return FQ_EINVAL;
    }
    l->nio = nio;
    l->probes = probes;
    snprintf(l->bucket, sizeof l->bucket, "%s", o->bucket);
    l->o = *o;
    l->o.bucket = l->o.id = NULL;
    *out = l;
    return FQ_OK;
}

void fq_leader_destroy(fq_leader *l)
{
    free(l);
}

const fq_lease *fq_leader_lease(const fq_leader *l)
{
    return &l->lease;
}

bool fq_leader_fresh(const fq_leader *l, uint64_t now)
{
    return !l->fenced && fq_lease_fresh(&l->lease, now);
}

/* natsio leaves the consumers alone from the end of freshness on; the
 * probes read it too. */
static void ld_fence(fq_leader *l)
{
    const fq_lease *s = &l->lease;
    uint64_t until = l->fenced ? 0 : fq_lease_fresh_until(s);
    fq_nio_fence(l->nio, until);
    fq_probes_lease(l->probes, until, s->state == FQ_LEASE_LEADING ? s->confirmed_sent : 0,
                    s->state == FQ_LEASE_STANDBY ? s->holder : NULL);
}

void fq_leader_fence(fq_leader *l)
{
    l->fenced = true;
}

/* Do what the lease asks. Reads, and the writes that follow them, wait for
 * the server; a renewal (async) does not, and its PubAck settles it in
 * fq_leader_on_puback. */
static void ld_act(fq_leader *l, fq_lease_step *s, bool async)
{
    const char *key = l->lease.key;
    for (;;) {
        if (s->lead && l->o.lead)
            l->o.lead(l->o.arg, s->term);
        if (s->lost)
            fq_log(FQ_LOG_ERROR, "lost the leader lease to another proxy; stopping",
                   FQ_STR("holder", l->lease.holder), FQ_UINT("term", l->lease.term));
        uint64_t rev = 0;
        fq_status st = FQ_EIO;
        if (s->op == FQ_LEASE_OP_NONE)
            break;
        if (s->op == FQ_LEASE_OP_GET) {
            char v[FQ_LEASE_ID_MAX + 1] = "";
            st = fq_nio_kv_get(v, sizeof v, &rev, l->nio, l->bucket, key);
            fq_lease_on_get(s, &l->lease, fq_nio_mono_ms(), st, v, rev);
            async = false;
            continue;
        }
        if (s->op == FQ_LEASE_OP_CREATE)
            st = fq_nio_kv_create(&rev, l->nio, l->bucket, key, s->value, strlen(s->value));
        else if (!async)
            st = fq_nio_kv_update(&rev, l->nio, l->bucket, key, s->value, strlen(s->value),
                                  s->expect);
        else if (fq_nio_kv_update_async(l->nio, l->bucket, key, s->value, strlen(s->value),
                                        s->expect, l->o.renew_token) == FQ_OK)
            break;
        fq_lease_on_write(s, &l->lease, fq_nio_mono_ms(), st, rev);
    }
    ld_fence(l);
}

void fq_leader_step(fq_leader *l, uint64_t now)
{
    fq_lease_step s;
    fq_lease_tick(&s, &l->lease, now);
    ld_act(l, &s, false);
}

bool fq_leader_renew(fq_leader *l, uint64_t now, bool connected)
{
    if (connected) {
        fq_lease_step s;
        fq_lease_tick(&s, &l->lease, now);
        ld_act(l, &s, true);
    }
    bool fresh = fq_lease_fresh(&l->lease, fq_nio_mono_ms());
    if (fresh == l->stale && l->lease.state == FQ_LEASE_LEADING) {
        l->stale = !fresh;
        fq_log(fresh ? FQ_LOG_INFO : FQ_LOG_WARN,
               fresh ? "leader lease renewed; serving again"
                     : "cannot renew the leader lease; changing nothing until it is",
               FQ_UINT("lease_age_ms", fq_lease_age(&l->lease, now)));
    }
    return l->lease.state != FQ_LEASE_LOST;
}

void fq_leader_on_puback(fq_leader *l, const fq_nio_event *ev)
{
    if (ev->token == l->o.release_token)
        l->releasing = false;   /* failed or not: the lease ages out anyway */
    fq_nio_msg_drop(l->nio, ev->msg);
    fq_status st = ev->status == FQ_OK ? FQ_OK
                   : ev->err_code == FQ_NIO_ERR_WRONG_LAST ? FQ_EEXIST : FQ_EIO;
    fq_lease_step s;
    fq_lease_on_write(&s, &l->lease, fq_nio_mono_ms(), st, ev->seq);
    ld_act(l, &s, false);
}

bool fq_leader_release(fq_leader *l)
{
    fq_lease_step s;
    fq_lease_release(&s, &l->lease, fq_nio_mono_ms());
    ld_fence(l);
    l->releasing = s.op == FQ_LEASE_OP_UPDATE &&
                   fq_nio_kv_update_async(l->nio, l->bucket, l->lease.key, s.value,
                                          strlen(s.value), s.expect, l->o.release_token) == FQ_OK;
    return l->releasing;
}

bool fq_leader_releasing(const fq_leader *l)
{
    return l->releasing;
}
