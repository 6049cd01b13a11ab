/* owner.c -- which partitions this replica owns: a registry of live replicas, a lease per partition, balanced assignment, planned moves one at a time.
 *
 * Principles (owner.h says what the keys are and why):
 *  - Decisions only, as lib/lease.c, whose leases this drives one per key:
 *    the caller performs every read and write and reports its outcome;
 *    time is the caller's monotonic milliseconds.
 *  - Safety is the leases': a partition is acted on only while its lease
 *    is fresh, and the keys' compare-and-set lets one replica hold a key.
 *    The views (registry, holders) only steer who tries what, so views
 *    that disagree for a while cost a refused write, never two owners.
 *  - With P > 1, a lease stale past the TTL is a partition lost: its key
 *    may have aged out and been taken, so what we knew of it is not to be
 *    trusted; if it is still ours to take, it is taken again in a new term
 *    and adopted. With P = 1 the lease is today's leader lease, unchanged:
 *    stale, it renews when it can (in a new term if the key aged out
 *    meanwhile), and lost to another holder it is lost for good.
 *  - The assignment is recomputed only when the live set changes, and a
 *    replica only tries the keys assigned to it, so a stable deployment
 *    does one renewal per key every ttl/3 and nothing else.
 *  - One key's silence costs the others nothing, nor the caller's loop:
 *    every read and write is sent without waiting (lib/leader.c), one at
 *    a time per key, and its answer handed back by its number when it
 *    comes; an answer past its deadline, or to an operation superseded
 *    since, is not believed (lib/lease.c).
 */
#include "owner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OW_NONE UINT32_MAX      /* no replica assigned (none live) */

typedef struct ow_slot {
    fq_lease lease;             /* lib/lease.c's state of this key */
    int32_t part;               /* 0..P-1, FQ_OWNER_DUTY or FQ_OWNER_REGISTRY */
    bool owned;                 /* GAINED said and no LOST since */
    bool handing;               /* a planned LOST said: released once handed */
    bool handed;                /* the caller settled it: release when no op is out */
    bool drop;                  /* lost: a standby again once no op is out */
    bool gate;                  /* at the last tick: ours to take and free in the view */
    uint64_t polled;            /* when we last read the key */
    char vholder[FQ_OWNER_ID_MAX + 1];  /* the view: its holder, "" when free */
    uint64_t vseen;             /* when the watch last delivered it; 0 never */
} ow_slot;

typedef struct ow_replica {
    char id[FQ_OWNER_ID_MAX + 1];       /* a registry key's id */
    uint64_t seen;              /* when its key was last delivered */
    bool gone;                  /* released or deleted */
} ow_replica;

struct fq_owner {
    uint32_t parts;             /* P */
    uint32_t bound;             /* partitions we hold or try at most (fq_owner_bound) */
    uint32_t nslots;            /* P = 1: 1 ("leader"); else P, the duty, the registry */
    uint64_t ttl;               /* the bucket's max age */
    char id[FQ_OWNER_ID_MAX + 1];       /* ours */
    ow_slot *slots;
    ow_replica reg[FQ_OWNER_REPLICAS_MAX];  /* the registry as the watch delivered it */
    size_t nreg;
    char live[FQ_OWNER_REPLICAS_MAX + 1][FQ_OWNER_ID_MAX + 1];  /* live ids, sorted */
    uint32_t nlive;
    uint32_t self;              /* our index in live; OW_NONE when not registered */
    uint32_t *target;           /* per partition: an index in live, or OW_NONE */
    char regval[FQ_LEASE_ID_MAX + 1];   /* r.<id>'s value: id@instance (id alone without one) */
    uint64_t dup_since;         /* when r.<id> was first read under another instance; 0: not */
    uint64_t dup_rev;           /* ... its revision then */
    char dup[FQ_LEASE_ID_MAX + 1];      /* another instance seen renewing r.<id>; "": none */
    bool synced;                /* the watch delivered every key once */
    bool stopping;              /* fq_owner_stop: take nothing, release everything */
    fq_owner_act *q;            /* actions not yet drained */
    size_t qcap, qlen, qpos;
    fq_owner_stats st;
};

bool fq_owner_id_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (!n || n > FQ_OWNER_ID_MAX || strcmp(id, FQ_LEASE_RELEASED) == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

void fq_owner_id_make(char *out, const char *host, long pid, int64_t unix_ms)
{
    size_t n = 0;
    for (; host && host[n] && n < 20; n++) {
        char c = host[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_';
        out[n] = ok ? c : '-';
    }
    if (!n)
        out[n++] = 'h';
    out[n++] = '-';
    char d[24];
    snprintf(d, sizeof d, "%ld", pid < 0 ? -pid : pid);
    if (strlen(d) > 10)
        d[10] = '\0';   /* pids have at most 10 digits */
    memcpy(out + n, d, strlen(d));
    n += strlen(d);
    out[n++] = '-';
    char t[16];
    size_t k = 0;
    uint64_t v = unix_ms < 0 ? 0 : (uint64_t)unix_ms;
    do {
        t[k++] = "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36];
        v /= 36;
    } while (v && k < sizeof t);
    while (k)
        out[n++] = t[--k];
    out[n] = '\0';
}

static uint32_t ow_slot_of(const fq_owner *o, int32_t part)
{
    if (part >= 0)
        return (uint32_t)part < o->parts ? (uint32_t)part : OW_NONE;
    if (part == FQ_OWNER_DUTY)
        return o->parts == 1 ? 0 : o->parts;
    if (part == FQ_OWNER_REGISTRY && o->parts > 1)
        return o->parts + 1;
    return OW_NONE;
}

static fq_status ow_slot_init(fq_owner *o, ow_slot *s)
{
    fq_lease_opts lo;
    fq_lease_opts_for(&lo, o->ttl);
    char key[FQ_LEASE_KEY_MAX + 1];
    if (s->part >= 0 && o->parts > 1)
        snprintf(key, sizeof key, "p.%d", (int)s->part);
    else if (s->part == FQ_OWNER_REGISTRY)
        snprintf(key, sizeof key, "r.%s", o->id);
    else
        snprintf(key, sizeof key, "%s", FQ_OWNER_KEY_DUTY);
    s->owned = s->handing = s->handed = s->drop = s->gate = false;
    /* The numbers go on from the lease the slot had: an answer to one of
     * its operations that comes late is not the new lease's (lease.h). */
    uint64_t req = s->lease.req;
    /* P = 1's leader key holds <id>@<instance>, as r.<id> does: without
     * the instance a second process given our id would read the key as its
     * own, take it, and both would lead (ow_same_id) */
    fq_status st = fq_lease_init(&s->lease, key,
                                 s->part == FQ_OWNER_REGISTRY || o->parts == 1 ? o->regval : o->id,
                                 &lo);
    s->lease.req = req;
    return st;
}

fq_status fq_owner_create(fq_owner **out, uint32_t partitions, const char *id,
                          const char *instance, uint64_t ttl_ms)
{
    *out = NULL;
    if (!partitions || partitions > 1024 || !fq_owner_id_valid(id) ||
        ttl_ms < FQ_LEASE_TTL_MIN_MS || (instance && *instance && !fq_owner_id_valid(instance)))
        return FQ_EINVAL;
    fq_owner *o = calloc(1, sizeof *o);
    if (!o)
        return FQ_ENOMEM;
    o->parts = partitions;
    o->bound = partitions;
    o->nslots = partitions == 1 ? 1 : partitions + 2;
    o->ttl = ttl_ms;
    snprintf(o->id, sizeof o->id, "%s", id);
    snprintf(o->regval, sizeof o->regval, "%s%s%s", id, instance && *instance ? "@" : "",
             instance ? instance : "");
    o->self = OW_NONE;
    o->qcap = 3 * (size_t)o->nslots + 16;
    o->slots = calloc(o->nslots, sizeof *o->slots);
    o->target = malloc(partitions * sizeof *o->target);
    o->q = calloc(o->qcap, sizeof *o->q);
    if (!o->slots || !o->target || !o->q) {
        fq_owner_destroy(o);
        return FQ_ENOMEM;
    }
    for (uint32_t i = 0; i < o->nslots; i++) {
        ow_slot *s = &o->slots[i];
        s->part = i < partitions ? (int32_t)i : i == partitions ? FQ_OWNER_DUTY : FQ_OWNER_REGISTRY;
        ow_slot_init(o, s);
    }
    for (uint32_t k = 0; k < partitions; k++)
        o->target[k] = OW_NONE;
    *out = o;
    return FQ_OK;
}

void fq_owner_destroy(fq_owner *o)
{
    if (!o)
        return;
    free(o->slots);
    free(o->target);
    free(o->q);
    free(o);
}

/* The caller drains after every call, and a call queues at most two
 * actions a slot (an operation and a GAINED or LOST), so qcap holds them. */
static fq_owner_act *ow_push(fq_owner *o, enum fq_owner_kind kind, const ow_slot *s)
{
    if (o->qlen == o->qcap)
        return NULL;
    fq_owner_act *a = &o->q[o->qlen++];
    *a = (fq_owner_act){.kind = kind, .slot = (uint32_t)(s - o->slots), .part = s->part};
    return a;
}

bool fq_owner_next(fq_owner_act *a, fq_owner *o)
{
    if (o->qpos == o->qlen) {
        o->qpos = o->qlen = 0;
        return false;
    }
    *a = o->q[o->qpos++];
    return true;
}

static void ow_lost(fq_owner *o, ow_slot *s, bool planned)
{
    if (s->owned && s->part != FQ_OWNER_REGISTRY) {
        fq_owner_act *a = ow_push(o, FQ_OWNER_LOST, s);
        if (a)
            a->planned = planned;
        if (s->part >= 0) {
            o->st.lost++;
            o->st.moves += planned;
        }
    }
    s->owned = false;
}

/* What a lease step asks, as actions. */
static void ow_step(fq_owner *o, ow_slot *s, const fq_lease_step *ls, uint64_t now)
{
    /* A late answer to what was sent before LOST was said may take the
     * key (it aged out meanwhile): a slot dropped (a standby again at the
     * next tick) or being handed off (released once the caller settled
     * it). Not a partition gained, or it would be let go without a LOST;
     * a dropped slot's standby reads the key, ours, and takes it in a new
     * term, and a handed-off one releases it. */
    if (ls->lead && (s->drop || s->handing)) {
        fq_lease_step quiet = *ls;
        quiet.lead = false;
        ow_step(o, s, &quiet, now);
        return;
    }
    if (ls->lead && s->part != FQ_OWNER_REGISTRY) {
        fq_owner_act *a = ow_push(o, FQ_OWNER_GAINED, s);
        if (a) {
            a->term = ls->term;
            a->again = s->owned;
        }
        if (s->part >= 0 && !s->owned)
            o->st.gained++;
    }
    if (ls->lead)
        s->owned = true;
    if (ls->lost) {
        ow_lost(o, s, false);
        s->drop = true;
    }
    if (ls->op == FQ_LEASE_OP_NONE)
        return;
    enum fq_owner_kind k = ls->op == FQ_LEASE_OP_GET      ? FQ_OWNER_GET
                           : ls->op == FQ_LEASE_OP_CREATE ? FQ_OWNER_CREATE
                                                          : FQ_OWNER_UPDATE;
    fq_owner_act *a = ow_push(o, k, s);
    if (!a)
        return;
    a->req = ls->req;
    a->key = s->lease.key;
    a->value = ls->value;
    a->expect = ls->expect;
    a->renewal = k == FQ_OWNER_UPDATE && s->lease.state == FQ_LEASE_LEADING &&
                 !s->lease.taking && !s->lease.releasing;
    if (k == FQ_OWNER_GET)
        s->polled = now;
}

static int ow_cmp_id(const void *a, const void *b)
{
    return strcmp(a, b);
}

typedef struct ow_pair {
    uint64_t score;             /* rendezvous: replica i's score for partition k */
    uint32_t k, i;
} ow_pair;

static int ow_cmp_pair(const void *a, const void *b)
{
    const ow_pair *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->k != y->k ? (x->k < y->k ? -1 : 1) : (x->i < y->i ? -1 : x->i > y->i);
}

static uint64_t ow_hash(uint64_t k0, const char *id)
{
    return fq_siphash(k0, 0x6f776e6572ull /* "owner" */, id, strlen(id));
}

/* The balanced assignment of partitions to the live replicas: capacities
 * of floor(P/n) and ceil(P/n), the ceil to the P mod n replicas whose ids
 * hash lowest, none above the bound (every replica has ours: a
 * deployment-wide setting); then every (partition, replica) pair by
 * score, highest first, each partition to the first replica with room.
 * Those left when every replica is full (P above n times the bound) go
 * to none: unowned until a replica joins. */
static void ow_assign(fq_owner *o)
{
    uint32_t n = o->nlive, P = o->parts;
    for (uint32_t k = 0; k < P; k++)
        o->target[k] = OW_NONE;
    if (!n)
        return;
    uint32_t cap[FQ_OWNER_REPLICAS_MAX + 1];
    uint64_t h[FQ_OWNER_REPLICAS_MAX + 1];
    for (uint32_t i = 0; i < n; i++) {
        h[i] = ow_hash(UINT64_MAX, o->live[i]);
        cap[i] = P / n;
    }
    for (uint32_t extra = 0; extra < P % n; extra++) {
        uint32_t best = OW_NONE;
        for (uint32_t i = 0; i < n; i++)
            if (cap[i] == P / n && (best == OW_NONE || h[i] < h[best]))
                best = i;
        cap[best]++;
    }
    for (uint32_t i = 0; i < n; i++)
        cap[i] = cap[i] < o->bound ? cap[i] : o->bound;
    ow_pair *pairs = malloc((size_t)P * n * sizeof *pairs);
    if (!pairs) {
        o->nlive = 0;   /* computed again at the next tick */
        return;
    }
    size_t np = 0;
    for (uint32_t k = 0; k < P; k++)
        for (uint32_t i = 0; i < n; i++)
            pairs[np++] = (ow_pair){ow_hash(k, o->live[i]), k, i};
    qsort(pairs, np, sizeof *pairs, ow_cmp_pair);
    for (size_t j = 0; j < np; j++)
        if (o->target[pairs[j].k] == OW_NONE && cap[pairs[j].i]) {
            o->target[pairs[j].k] = pairs[j].i;
            cap[pairs[j].i]--;
        }
    free(pairs);
}

static bool ow_registered(const fq_owner *o)
{
    return o->parts == 1 || o->slots[o->parts + 1].lease.state == FQ_LEASE_LEADING;
}

/* The live set at now: us once registered, and every replica whose key
 * was delivered less than a TTL ago and not released; the assignment
 * again when it changed. */
static void ow_live(fq_owner *o, uint64_t now)
{
    char ids[FQ_OWNER_REPLICAS_MAX + 1][FQ_OWNER_ID_MAX + 1];
    uint32_t n = 0;
    if (ow_registered(o) && o->synced && !o->stopping)
        memcpy(ids[n++], o->id, sizeof o->id);
    for (size_t i = 0; i < o->nreg; i++) {
        const ow_replica *r = &o->reg[i];
        if (!r->gone && now < r->seen + o->ttl && strcmp(r->id, o->id) != 0)
            memcpy(ids[n++], r->id, sizeof r->id);
    }
    qsort(ids, n, sizeof ids[0], ow_cmp_id);
    if (n == o->nlive && memcmp(ids, o->live, n * sizeof ids[0]) == 0)
        return;
    memcpy(o->live, ids, n * sizeof ids[0]);
    o->nlive = n;
    o->self = OW_NONE;
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(ids[i], o->id) == 0)
            o->self = i;
    ow_assign(o);
}

/* Ours to try: the duty by anyone registered, a partition by the replica
 * it is assigned to; with P = 1 the one key by anyone. */
static bool ow_wanted(const fq_owner *o, const ow_slot *s)
{
    if (o->stopping)
        return false;
    if (o->parts == 1)
        return true;
    if (!o->synced || !ow_registered(o))
        return false;
    if (s->part == FQ_OWNER_DUTY)
        return true;
    return o->self != OW_NONE && o->target[s->part] == o->self;
}

static bool ow_view_free(const fq_owner *o, const ow_slot *s, uint64_t now)
{
    return !s->vholder[0] || now >= s->vseen + o->ttl;
}

/* Who holds partition k: us while our lease holds it, else the view's
 * holder, "" when free. */
static const char *ow_holder(const fq_owner *o, uint32_t k, uint64_t now)
{
    const ow_slot *s = &o->slots[k];
    if (s->lease.state == FQ_LEASE_LEADING)
        return o->id;
    /* our id in a key we do not hold: an earlier run of ours, about to be
     * taken back */
    return ow_view_free(o, s, now) || strcmp(s->vholder, o->id) == 0 ? "" : s->vholder;
}

static bool ow_view_free(const fq_owner *o, const ow_slot *s, uint64_t now);

/* Whether partition slot s is ours: held, or being handed off. */
static bool ow_mine(const ow_slot *s)
{
    return s->owned || s->handing || s->lease.state == FQ_LEASE_LEADING;
}

/* Partitions that count against our bound at now: ours, and those that
 * may become ours before the next tick (a read or a write out, which may
 * take the key; tried and free in the view, which will be read). */
static uint32_t ow_held(const fq_owner *o, uint64_t now)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < o->parts; k++) {
        const ow_slot *s = &o->slots[k];
        n += ow_mine(s) || s->lease.op != FQ_LEASE_OP_NONE || (s->gate && ow_view_free(o, s, now));
    }
    return n;
}

/* Into cnt, how many partitions each live replica holds in our view. */
static void ow_counts(uint32_t *cnt, const fq_owner *o, uint64_t now)
{
    memset(cnt, 0, o->nlive * sizeof *cnt);
    for (uint32_t k = 0; k < o->parts; k++) {
        const char *h = ow_holder(o, k, now);
        const char(*at)[FQ_OWNER_ID_MAX + 1] =
            *h ? bsearch(h, o->live, o->nlive, sizeof o->live[0], ow_cmp_id) : NULL;
        if (at)
            cnt[at - o->live]++;
    }
    if (o->self != OW_NONE) {
        cnt[o->self] = 0;
        for (uint32_t k = 0; k < o->parts; k++)
            cnt[o->self] += ow_mine(&o->slots[k]);
    }
}

/* One planned move at a time, deployment-wide: the lowest-numbered
 * partition whose holder is not its assigned replica moves, if we hold
 * it; if a lower one is between owners, nothing moves yet. A replica at
 * its bound (in our view) takes nothing, so one between owners that is
 * assigned to it does not hold the others up. With P above what the live
 * replicas may hold, every replica ends at its bound whichever partitions
 * it holds: so nothing moves to a full replica, and a partition assigned
 * to none stays with its holder; with fewer, a partition assigned to none
 * that we hold (our view lagging) moves too. */
static void ow_move(fq_owner *o, uint64_t now)
{
    if (o->parts == 1 || !o->synced || o->self == OW_NONE || o->stopping)
        return;
    for (uint32_t k = 0; k < o->parts; k++) {
        const ow_slot *s = &o->slots[k];
        if (s->handing || (s->lease.state == FQ_LEASE_LOST && s->lease.op != FQ_LEASE_OP_NONE))
            return;     /* ours under way: its release not sent or answered */
    }
    bool capped = (uint64_t)o->nlive * o->bound < o->parts;
    uint32_t cnt[FQ_OWNER_REPLICAS_MAX + 1];
    bool counted = false;
    for (uint32_t k = 0; k < o->parts; k++) {
        uint32_t t = o->target[k];
        ow_slot *s = &o->slots[k];
        bool ours = s->owned && s->lease.state == FQ_LEASE_LEADING;
        if (t == OW_NONE && (capped || !ours))
            continue;
        const char *h = ow_holder(o, k, now);
        if (t != OW_NONE && strcmp(h, o->live[t]) == 0)
            continue;
        bool full = false;
        if (t != OW_NONE && o->bound < o->parts) {
            if (!counted)
                ow_counts(cnt, o, now);
            counted = true;
            full = cnt[t] >= o->bound;
        }
        if (capped && full)
            continue;
        if (t != o->self && ours) {
            ow_lost(o, s, true);
            s->handing = true;
            return;
        }
        if (!h[0] && full)
            continue;
        return;
    }
}

/* A stop: the registry key goes once every partition's release is sent. */
static bool ow_partitions_released(const fq_owner *o)
{
    for (uint32_t i = 0; i < o->nslots; i++) {
        const ow_slot *s = &o->slots[i];
        if (s->part != FQ_OWNER_REGISTRY && (s->handing || s->lease.state == FQ_LEASE_LEADING))
            return false;
    }
    return true;
}

static void ow_tick_slot(fq_owner *o, ow_slot *s, uint64_t now, uint32_t *held)
{
    fq_lease *l = &s->lease;
    fq_lease_step ls;
    fq_lease_expire(l, now);    /* what waits for no operation out goes on at its deadline */
    if (s->drop || (l->state == FQ_LEASE_LOST && !s->handing)) {
        if (o->parts == 1)
            return;     /* lost for good, as the one leader lease always was */
        if (l->op == FQ_LEASE_OP_NONE) {
            ow_slot_init(o, s);
            s->polled = now;    /* a fresh read waits for the view, or a TTL */
        }
        return;
    }
    if (s->handing) {
        if (s->handed && l->op == FQ_LEASE_OP_NONE) {
            s->handing = s->handed = false;
            fq_lease_release(&ls, l, now);
            ow_step(o, s, &ls, now);
        } else if (l->state == FQ_LEASE_LEADING) {
            fq_lease_tick(&ls, l, now);         /* renewed while the caller settles it */
            ow_step(o, s, &ls, now);
        }
        return;
    }
    if (s->part == FQ_OWNER_REGISTRY) {
        if (o->stopping && l->state == FQ_LEASE_LEADING) {
            if (ow_partitions_released(o) && l->op == FQ_LEASE_OP_NONE) {
                fq_lease_release(&ls, l, now);
                ow_step(o, s, &ls, now);
            }
            return;
        }
        if (!o->stopping) {
            fq_lease_tick(&ls, l, now);
            ow_step(o, s, &ls, now);
        }
        return;
    }
    if (l->state == FQ_LEASE_LEADING) {
        if (o->parts > 1 && s->owned && now >= l->confirmed_sent + o->ttl) {
            /* Stale past the TTL: the key may be another's by now. */
            ow_lost(o, s, false);
            s->drop = true;
            return;
        }
        fq_lease_tick(&ls, l, now);
        ow_step(o, s, &ls, now);
        return;
    }
    bool gate = ow_wanted(o, s) &&
                (o->parts == 1 || ow_view_free(o, s, now) || now >= s->polled + o->ttl);
    /* A read may take the key: one not counted in held (ow_held) is sent
     * only below our bound, and counted from now on. */
    bool counted = s->gate && ow_view_free(o, s, now);
    if (gate && !s->gate)
        l->next_at = 0;         /* just became ours to take: read it now */
    if (gate && s->part >= 0 && !counted && l->op == FQ_LEASE_OP_NONE && now >= l->next_at) {
        if (*held >= o->bound)
            gate = false;       /* at our bound: no more until one is let go */
        else
            ++*held;
    }
    s->gate = gate;
    if (gate) {
        fq_lease_tick(&ls, l, now);
        ow_step(o, s, &ls, now);
    }
}

void fq_owner_tick(fq_owner *o, uint64_t now)
{
    if (o->parts > 1)
        ow_tick_slot(o, &o->slots[o->parts + 1], now, NULL); /* registered first */
    for (uint32_t i = 0; o->parts > 1 && !o->stopping && !ow_registered(o) && i <= o->parts;
         i++) {
        /* Our registry key holds another instance of our id now (we were
         * frozen past the TTL, say): it may take the keys that hold our id
         * as its own, so nothing is ours any more. */
        ow_slot *s = &o->slots[i];
        if (s->owned && !s->drop) {
            ow_lost(o, s, false);
            s->drop = true;
        }
    }
    if (o->parts > 1)
        ow_live(o, now);
    uint32_t n = o->parts == 1 ? 1 : o->parts + 1, held = ow_held(o, now);
    for (uint32_t i = 0; i < n; i++)
        ow_tick_slot(o, &o->slots[i], now, &held);
    ow_move(o, now);
}

/* Whether a key's value names our id under another instance than ours
 * (<id>@<other>, or <id> alone written without one). */
static bool ow_same_id(const fq_owner *o, const char *value)
{
    size_t n = strlen(o->id);
    return strcmp(value, o->regval) != 0 && strncmp(value, o->id, n) == 0 &&
           (value[n] == '@' || value[n] == '\0');
}

/* Our registry key read (P = 1: the leader key, when it names our id):
 * another instance of our id holds it if it is neither ours nor released. A dead one's key ages out within a TTL; one
 * still there a TTL after we first saw it, at a revision that moved, was
 * renewed since: a live process with our id. */
static void ow_registry_read(fq_owner *o, uint64_t now, const char *value, uint64_t rev)
{
    if (!*value || strcmp(value, o->regval) == 0 || strcmp(value, FQ_LEASE_RELEASED) == 0) {
        o->dup_since = 0;
        return;
    }
    if (!o->dup_since) {
        o->dup_since = now ? now : 1;
        o->dup_rev = rev;
    } else if (rev != o->dup_rev && now >= o->dup_since + o->ttl && !o->dup[0]) {
        snprintf(o->dup, sizeof o->dup, "%s", value);
    }
}

void fq_owner_on_get(fq_owner *o, uint32_t slot, uint64_t req, uint64_t now, fq_status st,
                     const char *value, uint64_t rev)
{
    if (slot >= o->nslots)
        return;
    ow_slot *s = &o->slots[slot];
    fq_lease_step ls;
    if (!fq_lease_on_get(&ls, &s->lease, req, now, st, value ? value : "", rev))
        return;     /* late, or superseded */
    const char *v = value ? value : "";
    if (s->part == FQ_OWNER_REGISTRY || o->parts == 1) {
        if (st == FQ_OK && (s->part == FQ_OWNER_REGISTRY || ow_same_id(o, v)))
            ow_registry_read(o, now, v, rev);
        else if (st == FQ_OK || st == FQ_ENOTFOUND)
            o->dup_since = 0;   /* free, or (P = 1) another replica's */
    }
    /* A standby read the key still held by the replica the view saw write
     * it last, at vseen: the server ages that write out at vseen + ttl, a
     * little later when loaded, so a read that came just before is made
     * again soon, not a whole retry later (that retry was most of what a
     * dead replica's partitions waited past the TTL). Only until a retry
     * past that time: a holder whose renewals the watch does not deliver
     * costs a few reads, not a read every few ticks. */
    if (o->parts > 1 && s->part >= 0 && st == FQ_OK && s->lease.state == FQ_LEASE_STANDBY &&
        ls.op == FQ_LEASE_OP_NONE && s->vseen && strcmp(v, s->vholder) == 0) {
        uint64_t due = s->vseen + o->ttl, soon = now + o->ttl / 20;
        if (due < s->lease.next_at && now < due + s->lease.o.retry_ms)
            s->lease.next_at = due > soon ? due : soon;
    }
    ow_step(o, s, &ls, now);
}

void fq_owner_on_write(fq_owner *o, uint32_t slot, uint64_t req, uint64_t now, fq_status st,
                       uint64_t rev)
{
    if (slot >= o->nslots)
        return;
    ow_slot *s = &o->slots[slot];
    fq_lease *l = &s->lease;
    bool renewal = l->op == FQ_LEASE_OP_UPDATE && l->state == FQ_LEASE_LEADING && !l->taking;
    uint64_t sent = l->op_sent;
    fq_lease_step ls;
    if (!fq_lease_on_write(&ls, l, req, now, st, rev))
        return;     /* late, or superseded */
    if (renewal && st == FQ_OK && s->part >= 0) {
        uint64_t ms = now > sent ? now - sent : 0;
        o->st.renewals++;
        o->st.renew_ms_last = ms;
        o->st.renew_ms_sum += ms;
        if (ms > o->st.renew_ms_max)
            o->st.renew_ms_max = ms;
    }
    ow_step(o, s, &ls, now);
}

static void ow_copy_id(char *dst, const char *v)
{
    size_t n = strlen(v);
    if (n > FQ_OWNER_ID_MAX)
        n = FQ_OWNER_ID_MAX;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

void fq_owner_on_key(fq_owner *o, uint64_t now, const char *key, const char *value,
                     uint64_t age_ms)
{
    /* when it was written, by our clock; at least 1, 0 being never */
    uint64_t seen = now - (age_ms < o->ttl ? age_ms : o->ttl);
    seen = now > seen && seen ? seen : now;
    bool freed = !value || !*value || strcmp(value, FQ_LEASE_RELEASED) == 0;
    if (o->parts == 1 || !key)
        return;
    if (strncmp(key, "r.", 2) == 0) {
        const char *id = key + 2;
        if (!fq_owner_id_valid(id)) {
            o->st.refused++;
            return;
        }
        ow_replica *r = NULL;
        for (size_t i = 0; i < o->nreg && !r; i++)
            if (strcmp(o->reg[i].id, id) == 0)
                r = &o->reg[i];
        for (size_t i = 0; i < o->nreg && !r; i++)      /* a gone one's place */
            if (o->reg[i].gone || now >= o->reg[i].seen + o->ttl)
                r = &o->reg[i];
        if (!r && o->nreg < FQ_OWNER_REPLICAS_MAX)
            r = &o->reg[o->nreg++];
        if (!r)
            return;
        snprintf(r->id, sizeof r->id, "%s", id);
        r->seen = seen;
        r->gone = freed;
        return;
    }
    ow_slot *s = NULL;
    if (strcmp(key, FQ_OWNER_KEY_DUTY) == 0) {
        s = &o->slots[o->parts];
    } else if (key[0] == 'p' && key[1] == '.' && key[2] >= '0' && key[2] <= '9') {
        char *end;
        unsigned long k = strtoul(key + 2, &end, 10);
        if (*end || k >= o->parts || (key[2] == '0' && key[3])) {
            o->st.refused++;    /* not a partition of this deployment */
            return;
        }
        s = &o->slots[k];
    }
    if (!s) {
        o->st.refused++;        /* no key fairq writes */
        return;
    }
    if (freed)
        s->vholder[0] = '\0';
    else
        ow_copy_id(s->vholder, value);
    if (!freed && !fq_owner_id_valid(value))
        o->st.refused++;        /* a holder that is no replica id */
    s->vseen = seen;
    if (freed && s->lease.state == FQ_LEASE_STANDBY)
        s->lease.next_at = 0;   /* released: whoever it is assigned to reads it now */
}

void fq_owner_bound(fq_owner *o, uint32_t max)
{
    o->bound = max && max < o->parts ? max : o->parts;
    o->nlive = 0;       /* the assignment again at the next tick */
}

void fq_owner_synced(fq_owner *o)
{
    o->synced = true;
}

void fq_owner_handoff(fq_owner *o, int32_t part)
{
    uint32_t i = ow_slot_of(o, part);
    if (i == OW_NONE)
        return;
    ow_slot *s = &o->slots[i];
    if (!s->handing && part >= 0 && o->parts > 1 && s->owned && !s->drop &&
        s->lease.state == FQ_LEASE_LEADING) {
        /* Let go by the caller on its own (its journal fenced): renewed
         * still, it would stay ours and unserved; released, whoever it is
         * assigned to takes it in a new term, us included. */
        ow_lost(o, s, true);
        s->handing = true;
    }
    if (s->handing)
        s->handed = true;
}

void fq_owner_stop(fq_owner *o, uint64_t now)
{
    (void)now;
    if (o->stopping)
        return;
    o->stopping = true;
    for (uint32_t i = 0; i < o->nslots; i++) {
        ow_slot *s = &o->slots[i];
        if (s->part == FQ_OWNER_REGISTRY || s->handing || !s->owned ||
            s->lease.state != FQ_LEASE_LEADING)
            continue;
        bool duty = s->part == FQ_OWNER_DUTY;
        ow_lost(o, s, true);
        s->handing = true;
        s->handed = duty;       /* nothing to settle for the duty */
    }
}

bool fq_owner_stopped(const fq_owner *o)
{
    if (!o->stopping)
        return false;
    for (uint32_t i = 0; i < o->nslots; i++) {
        const ow_slot *s = &o->slots[i];
        if (s->handing || s->lease.state == FQ_LEASE_LEADING || s->lease.op != FQ_LEASE_OP_NONE)
            return false;
    }
    return true;
}

bool fq_owner_fresh(const fq_owner *o, int32_t part, uint64_t now)
{
    uint32_t i = ow_slot_of(o, part);
    return i != OW_NONE && !o->slots[i].drop && fq_lease_fresh(&o->slots[i].lease, now);
}

uint64_t fq_owner_fresh_until(const fq_owner *o, int32_t part)
{
    uint32_t i = ow_slot_of(o, part);
    return i != OW_NONE && !o->slots[i].drop ? fq_lease_fresh_until(&o->slots[i].lease) : 0;
}

uint64_t fq_owner_term(const fq_owner *o, int32_t part)
{
    uint32_t i = ow_slot_of(o, part);
    return i != OW_NONE && o->slots[i].lease.state == FQ_LEASE_LEADING ? o->slots[i].lease.term
                                                                        : 0;
}

const char *fq_owner_assigned(const fq_owner *o, int32_t part)
{
    if (part < 0 || (uint32_t)part >= o->parts || o->parts == 1)
        return o->parts == 1 && part == 0 ? o->id : "";
    uint32_t t = o->target[part];
    return t == OW_NONE ? "" : o->live[t];
}

const char *fq_owner_holder(const fq_owner *o, int32_t part, uint64_t now)
{
    if (part < 0 || (uint32_t)part >= o->parts || o->parts == 1)
        return "";
    /* the bucket's value, untrusted: the admin plane puts it in a subject */
    const char *h = ow_holder(o, (uint32_t)part, now);
    return fq_owner_id_valid(h) ? h : "";
}

const fq_lease *fq_owner_lease(const fq_owner *o, int32_t part)
{
    uint32_t i = ow_slot_of(o, part);
    return i == OW_NONE ? NULL : &o->slots[i].lease;
}

const char *fq_owner_duplicate(const fq_owner *o)
{
    return o->dup[0] ? o->dup : NULL;
}

const char *fq_owner_live_at(const fq_owner *o, size_t i)
{
    if (o->parts == 1)
        return i == 0 ? o->id : NULL;
    return i < o->nlive ? o->live[i] : NULL;
}

void fq_owner_stats_get(fq_owner_stats *s, const fq_owner *o)
{
    *s = o->st;
    s->owned = s->assigned = 0;
    for (uint32_t k = 0; k < o->parts; k++) {
        s->owned += o->slots[k].owned;
        s->assigned += o->self != OW_NONE && o->target[k] == o->self;
    }
    if (o->parts == 1)
        s->assigned = 1;
    s->live = o->parts == 1 ? 1 : o->nlive;
    s->bound = o->bound;
    s->unassigned = 0;
    for (uint32_t k = 0; o->parts > 1 && o->nlive && k < o->parts; k++)
        s->unassigned += o->target[k] == OW_NONE;
}
