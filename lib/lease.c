/* lease.c -- an ownership key held by renewal: who leads, from which term, and whether it may still act.
 *
 * Principles (lease.h says what fresh means and why the margin):
 *  - Decisions only: the caller performs every read and write and reports
 *    its outcome with the time it was sent; time is the caller's monotonic
 *    milliseconds, so the tests drive it in virtual time, jumps included.
 *  - One operation outstanding at a time, sent without waiting and given
 *    up on at its deadline. Two renewals in flight expecting the same
 *    revision would refuse each other, and a refusal reads as "someone
 *    else wrote the key". An answer is believed only for the operation
 *    outstanding (by its number) and before its deadline: one given up on
 *    and answered late may have been applied all the same, which the
 *    next write expecting the old revision finds out (below).
 *  - A refused renewal is not yet a loss: our own renewal, applied after
 *    its PubAck was given up on, moves the revision too. The key is read:
 *    still our id, and we go on in the same term (nobody else wrote it
 *    since, or its value would be theirs); absent or released, and we take
 *    it again in a new term, since someone may have led in between; any
 *    other holder, and it is lost for good.
 *  - Freshness is measured from the send time of the last write the server
 *    confirmed, never from the confirmation.
 */
#include "lease.h"

#include <string.h>

void fq_lease_opts_for(fq_lease_opts *o, uint64_t ttl_ms)
{
    *o = (fq_lease_opts){.ttl_ms = ttl_ms, .margin_ms = ttl_ms / 6, .renew_ms = ttl_ms / 3,
                         .retry_ms = ttl_ms / 6, .answer_ms = ttl_ms - ttl_ms / 6};
}

fq_status fq_lease_init(fq_lease *l, const char *key, const char *id, const fq_lease_opts *o)
{
    if (!key || !id || strlen(key) > FQ_LEASE_KEY_MAX || !*key || strlen(id) > FQ_LEASE_ID_MAX ||
        !*id || strcmp(id, FQ_LEASE_RELEASED) == 0 || o->margin_ms >= o->ttl_ms ||
        !o->renew_ms)
        return FQ_EINVAL;
    *l = (fq_lease){.o = *o, .state = FQ_LEASE_STANDBY};
    if (!l->o.answer_ms)
        l->o.answer_ms = o->ttl_ms - o->margin_ms;
    memcpy(l->key, key, strlen(key) + 1);
    memcpy(l->id, id, strlen(id) + 1);
    return FQ_OK;
}

static void lease_send(fq_lease_step *s, fq_lease *l, uint64_t now, enum fq_lease_op op,
                       uint64_t expect, const char *value)
{
    s->op = op;
    s->req = ++l->req;
    s->expect = expect;
    s->value = value;
    l->op = op;
    l->op_sent = now;
}

static void lease_get(fq_lease_step *s, fq_lease *l, uint64_t now, fq_status st,
                      const char *value, uint64_t rev);
static void lease_write(fq_lease_step *s, fq_lease *l, uint64_t now, fq_status st,
                        uint64_t rev);

bool fq_lease_expire(fq_lease *l, uint64_t now)
{
    if (l->op == FQ_LEASE_OP_NONE || now < l->op_sent + l->o.answer_ms)
        return false;
    fq_lease_step s;    /* a failure asks for nothing at once */
    if (l->op == FQ_LEASE_OP_GET)
        lease_get(&s, l, now, FQ_EIO, "", 0);
    else
        lease_write(&s, l, now, FQ_EIO, 0);
    return true;
}

/* Whether an answer numbered req is the operation outstanding's, in time;
 * one past its deadline fails it instead. */
static bool lease_awaited(fq_lease_step *s, fq_lease *l, uint64_t req, uint64_t now)
{
    *s = (fq_lease_step){0};
    return !fq_lease_expire(l, now) && l->op != FQ_LEASE_OP_NONE && req == l->req;
}

void fq_lease_tick(fq_lease_step *s, fq_lease *l, uint64_t now)
{
    *s = (fq_lease_step){0};
    fq_lease_expire(l, now);
    if (l->op != FQ_LEASE_OP_NONE || now < l->next_at)
        return;
    if (l->state == FQ_LEASE_STANDBY || (l->state == FQ_LEASE_LEADING && l->recheck))
        lease_send(s, l, now, FQ_LEASE_OP_GET, 0, NULL);
    else if (l->state == FQ_LEASE_LEADING && now >= l->confirmed_sent + l->o.renew_ms)
        lease_send(s, l, now, FQ_LEASE_OP_UPDATE, l->rev, l->id);
}

bool fq_lease_on_get(fq_lease_step *s, fq_lease *l, uint64_t req, uint64_t now, fq_status st,
                     const char *value, uint64_t rev)
{
    if (!lease_awaited(s, l, req, now))
        return false;
    lease_get(s, l, now, st, value, rev);
    return true;
}

static void lease_get(fq_lease_step *s, fq_lease *l, uint64_t now, fq_status st,
                      const char *value, uint64_t rev)
{
    *s = (fq_lease_step){0};
    l->op = FQ_LEASE_OP_NONE;
    if (l->state == FQ_LEASE_LOST)
        return;
    if (st == FQ_ENOTFOUND) {
        l->holder[0] = '\0';
        l->taking = true;
        lease_send(s, l, now, FQ_LEASE_OP_CREATE, rev, l->id);
        return;
    }
    if (st != FQ_OK) {
        l->next_at = now + l->o.retry_ms;
        return;
    }
    bool ours = strcmp(value, l->id) == 0;
    if (ours || strcmp(value, FQ_LEASE_RELEASED) == 0) {
        /* Ours while leading: our own late renewal; the term goes on. */
        l->taking = !(ours && l->state == FQ_LEASE_LEADING);
        lease_send(s, l, now, FQ_LEASE_OP_UPDATE, rev, l->id);
        return;
    }
    size_t n = strlen(value);
    if (n > FQ_LEASE_ID_MAX)
        n = FQ_LEASE_ID_MAX;
    memcpy(l->holder, value, n);
    l->holder[n] = '\0';
    if (l->state == FQ_LEASE_LEADING) {
        l->state = FQ_LEASE_LOST;
        s->lost = true;
        return;
    }
    l->next_at = now + l->o.retry_ms;
}

bool fq_lease_on_write(fq_lease_step *s, fq_lease *l, uint64_t req, uint64_t now, fq_status st,
                       uint64_t rev)
{
    if (!lease_awaited(s, l, req, now))
        return false;
    lease_write(s, l, now, st, rev);
    return true;
}

static void lease_write(fq_lease_step *s, fq_lease *l, uint64_t now, fq_status st,
                        uint64_t rev)
{
    *s = (fq_lease_step){0};
    enum fq_lease_op op = l->op;
    l->op = FQ_LEASE_OP_NONE;
    if (op == FQ_LEASE_OP_NONE || op == FQ_LEASE_OP_GET || l->state == FQ_LEASE_LOST) {
        l->releasing = false;
        return;
    }
    bool taking = l->taking;
    l->taking = false;
    if (st == FQ_OK) {
        l->rev = rev;
        l->confirmed_sent = l->op_sent;
        l->recheck = false;
        if (taking) {
            l->state = FQ_LEASE_LEADING;
            l->term = rev;
            l->holder[0] = '\0';
            s->lead = true;
            s->term = rev;
        }
        return;
    }
    if (st == FQ_EEXIST && l->state == FQ_LEASE_LEADING) {
        l->recheck = true;      /* read the key at once */
        return;
    }
    l->next_at = now + l->o.retry_ms;
}

void fq_lease_release(fq_lease_step *s, fq_lease *l, uint64_t now)
{
    *s = (fq_lease_step){0};
    bool can = l->state == FQ_LEASE_LEADING && l->op == FQ_LEASE_OP_NONE;
    l->state = FQ_LEASE_LOST;
    if (!can)
        return;
    l->releasing = true;
    lease_send(s, l, now, FQ_LEASE_OP_UPDATE, l->rev, FQ_LEASE_RELEASED);
}

uint64_t fq_lease_fresh_until(const fq_lease *l)
{
    if (l->state != FQ_LEASE_LEADING || !l->confirmed_sent)
        return 0;
    return l->confirmed_sent + (l->o.ttl_ms - l->o.margin_ms);
}

bool fq_lease_fresh(const fq_lease *l, uint64_t now)
{
    return now >= l->confirmed_sent && now < fq_lease_fresh_until(l);
}

uint64_t fq_lease_age(const fq_lease *l, uint64_t now)
{
    return l->confirmed_sent && now > l->confirmed_sent ? now - l->confirmed_sent : 0;
}
