/* test_owner.c -- partition ownership in virtual time: the registry, balanced assignment, planned moves one at a time, takeover after a death, and a seeded simulation of replicas joining, dying, freezing and jumping their clocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lease.h"
#include "owner.h"

#define TTL 3000

/* ---- a simulated world: a KV bucket, its watch, replicas ----------------
 *
 * The bucket is nats-server's as lib/owner.c sees it: keys with a value and
 * a revision from one counter, aged out TTL after their last write by the
 * server's clock (no event for that, as on 2.9.10), create only when
 * absent, update only on the revision. Every operation reaches the server
 * 1 to 40 ms after it was sent, and its answer comes 1 to 40 ms later;
 * every write reaches every replica's watch, in order, 1 to 30 ms after it
 * was applied. A replica runs a turn every 10 ms; its clock is the world's
 * plus an offset that a jump moves forward. A frozen replica does
 * nothing, and what comes for it waits until it runs again; what it sent
 * before still reaches the server. A dead replica's answers are lost.
 */

#define SW_KEYS 1100
#define SW_REPS 8
#define SW_EVENTS 8192
#define SW_BOUND_SETTLE 40000   /* bound worlds: a join's moves settle within */

typedef struct sw_key {
    char key[80];
    char val[64];
    uint64_t rev;
    uint64_t stored;            /* world ms of its last write */
    bool used;
    bool stop_release;          /* "released" written by a replica stopping */
} sw_key;

enum sw_ev_kind { EV_APPLY, EV_REPLY, EV_WATCH, EV_SYNCED, EV_HANDOFF };

typedef struct sw_ev {
    uint64_t at;
    enum sw_ev_kind kind;
    int r, gen;
    uint32_t slot;
    int32_t part;
    enum fq_owner_kind op;
    char key[80];
    char val[64];
    uint64_t expect;
    uint64_t req;               /* APPLY, REPLY: the operation's number */
    fq_status st;
    uint64_t rev;
    bool stopping;              /* APPLY: sent by a replica stopping */
    uint64_t stored;            /* WATCH: when the server wrote it */
} sw_ev;

enum sw_rep_state { R_OFF, R_RUN, R_FROZEN, R_STOPPING };

typedef struct sw_rep {
    fq_owner *o;
    char id[32];
    char val[48];               /* what it writes: P = 1 <id>@<instance>, else <id> */
    int gen;
    enum sw_rep_state state;
    uint64_t off;               /* local clock = world + off */
    uint64_t frozen_until;
    uint64_t stop_deadline;
    uint64_t last_watch;        /* the watch delivers in order */
    bool owned[1024];           /* what GAINED and LOST said */
    uint64_t gains;
    bool exits;                 /* P = 1: lost the leader key, exits */
    bool fenced[1024];          /* let go by the caller on its own (its journal fenced),
                                   not served until GAINED again */
} sw_rep;

typedef struct sw_world {
    uint64_t seed0, seed, now, rev;
    uint32_t parts;
    sw_key keys[SW_KEYS];
    sw_ev *ev;
    size_t nev;
    sw_rep rep[SW_REPS];
    int nextid;
    int nextinst;               /* instance tags, one per process start */
    /* checks */
    uint64_t disturbed_until;   /* no check of moves or pauses before */
    uint64_t last_event;
    uint64_t death_at, death_deadline;
    bool death_check;
    bool death_parts[1024];
    uint64_t owned_since[1024]; /* when a running replica was last seen fresh for k */
    uint64_t max_moving, takeovers_checked, balance_checked, moves;
    uint64_t expiry_lag;        /* the server ages a key out this long after its max age */
    int slow_r;                 /* its answers come 1.5 to 4 s late (some past their
                                   deadline) until slow_until */
    uint64_t slow_until;
    uint32_t bound;             /* fq_owner_bound of every replica; 0: none */
    int pkey[1024];             /* index + 1 of key p.<k> in keys; 0: not made */
    uint64_t bound_checked;     /* partitions gained that put a replica at its bound */
    uint64_t joined_at;         /* the last join's time */
} sw_world;

static bool sw_trace;  /* OWNER_TRACE set: say what happens */

static uint64_t sw_rand(sw_world *w)
{
    uint64_t z = (w->seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t sw_between(sw_world *w, uint64_t lo, uint64_t hi)
{
    return lo + sw_rand(w) % (hi - lo + 1);
}

static void sw_push(sw_world *w, const sw_ev *e)
{
    assert_true(w->nev < SW_EVENTS);
    size_t i = w->nev;
    while (i > 0 && w->ev[i - 1].at > e->at) {
        w->ev[i] = w->ev[i - 1];
        i--;
    }
    w->ev[i] = *e;
    w->nev++;
}

static sw_key *sw_find(sw_world *w, const char *key, bool make)
{
    /* p.<k> by index: a world of 1,024 partitions looks each up every
     * millisecond */
    char *end;
    unsigned long pk = strncmp(key, "p.", 2) == 0 ? strtoul(key + 2, &end, 10) : 1024;
    bool indexed = pk < 1024 && !*end;
    if (indexed && (w->pkey[pk] || !make))
        return w->pkey[pk] ? &w->keys[w->pkey[pk] - 1] : NULL;
    for (int i = 0; i < SW_KEYS && !indexed; i++)
        if (w->keys[i].used && strcmp(w->keys[i].key, key) == 0)
            return &w->keys[i];
    if (!make)
        return NULL;
    for (int i = 0; i < SW_KEYS; i++)
        if (!w->keys[i].used) {
            memset(&w->keys[i], 0, sizeof w->keys[i]);
            w->keys[i].used = true;
            snprintf(w->keys[i].key, sizeof w->keys[i].key, "%s", key);
            if (indexed)
                w->pkey[pk] = i + 1;
            return &w->keys[i];
        }
    fail();
    return NULL;
}

static bool sw_present(const sw_world *w, const sw_key *k)
{
    return k && k->used && k->val[0] && w->now < k->stored + TTL + w->expiry_lag;
}

static uint64_t sw_local(const sw_world *w, int r)
{
    return w->now + w->rep[r].off;
}

static bool sw_alive(const sw_rep *p)
{
    return p->state == R_RUN || p->state == R_FROZEN || p->state == R_STOPPING;
}

/* The owner's actions: operations go to the server, GAINED and LOST are
 * kept, a planned LOST is settled and handed off 0 to 200 ms later. */
static void sw_drain(sw_world *w, int r)
{
    sw_rep *p = &w->rep[r];
    fq_owner_act a;
    while (fq_owner_next(&a, p->o)) {
        sw_ev e = {.r = r, .gen = p->gen, .slot = a.slot, .part = a.part, .op = a.kind,
                   .req = a.req};
        switch (a.kind) {
        case FQ_OWNER_GET:
        case FQ_OWNER_CREATE:
        case FQ_OWNER_UPDATE:
            e.kind = EV_APPLY;
            e.at = w->now + sw_between(w, 1, 40);
            snprintf(e.key, sizeof e.key, "%s", a.key);
            snprintf(e.val, sizeof e.val, "%s", a.value ? a.value : "");
            e.expect = a.expect;
            e.stopping = p->state == R_STOPPING;
            sw_push(w, &e);
            break;
        case FQ_OWNER_GAINED:
            if (sw_trace)
                print_message("%" PRIu64 " %s gained %d term %" PRIu64 "%s\n", w->now, p->id,
                              a.part, a.term, a.again ? " again" : "");
            if (a.part >= 0) {
                assert_true(a.term > 0);
                if (!a.again)
                    assert_false(p->owned[a.part]);
                p->owned[a.part] = true;
                p->fenced[a.part] = false;
                /* the bound: no replica ever serves more partitions (the
                 * server may hold a key more for a while, a take whose
                 * answer came past its deadline: not ours, never served) */
                uint32_t n = 0;
                for (uint32_t k = 0; k < w->parts && w->bound; k++)
                    n += p->owned[k];
                if (w->bound && n > w->bound)
                    fail_msg("seed %" PRIu64 " t %" PRIu64 ": %s serves %u partitions, its "
                             "bound %u", w->seed0, w->now, p->id, n, w->bound);
                w->bound_checked += w->bound && n == w->bound;
                p->gains++;
            }
            break;
        case FQ_OWNER_LOST:
            if (sw_trace)
                print_message("%" PRIu64 " %s lost %d%s\n", w->now, p->id, a.part,
                              a.planned ? " planned" : "");
            if (sw_trace)
                for (uint32_t k = 0; k < w->parts; k++)
                    print_message("   %u: assigned %s lease %d holder %s\n", k,
                                  fq_owner_assigned(p->o, (int32_t)k),
                                  (int)fq_owner_lease(p->o, (int32_t)k)->state,
                                  fq_owner_lease(p->o, (int32_t)k)->holder);
            if (a.part >= 0) {
                assert_true(p->owned[a.part]);
                p->owned[a.part] = false;
            }
            if (w->parts == 1 && !a.planned)
                p->exits = true;    /* the proxy stops; another is started */
            if (a.planned) {
                e.kind = EV_HANDOFF;
                e.at = w->now + sw_between(w, 0, 200);
                sw_push(w, &e);
            }
            break;
        }
    }
}

/* Operation e at the server now: its status, and into rep the value read
 * and the revision; a write reaches every live replica's watch. */
static fq_status sw_exec(sw_world *w, const sw_ev *e, sw_ev *rep)
{
    sw_key *k = sw_find(w, e->key, e->op != FQ_OWNER_GET);
    bool present = sw_present(w, k);
    rep->val[0] = '\0';
    if (e->op == FQ_OWNER_GET) {
        if (present) {
            snprintf(rep->val, sizeof rep->val, "%s", k->val);
            rep->rev = k->rev;
        }
        return present ? FQ_OK : FQ_ENOTFOUND;
    }
    bool ok = e->op == FQ_OWNER_CREATE ? !present : present && k->rev == e->expect;
    if (!ok)
        return FQ_EEXIST;
    snprintf(k->val, sizeof k->val, "%s", e->val);
    k->rev = ++w->rev;
    k->stored = w->now;
    k->stop_release = e->stopping && strcmp(e->val, FQ_LEASE_RELEASED) == 0;
    rep->rev = k->rev;
    for (int r = 0; r < SW_REPS; r++) {
        sw_rep *p = &w->rep[r];
        if (!sw_alive(p))
            continue;
        sw_ev we = {.kind = EV_WATCH, .r = r, .gen = p->gen, .stored = w->now};
        we.at = w->now + sw_between(w, 1, 30);
        if (we.at < p->last_watch)
            we.at = p->last_watch;
        p->last_watch = we.at;
        snprintf(we.key, sizeof we.key, "%s", k->key);
        snprintf(we.val, sizeof we.val, "%s", k->val);
        sw_push(w, &we);
    }
    return FQ_OK;
}

static void sw_apply(sw_world *w, sw_ev *e)
{
    sw_ev rep = *e;
    rep.kind = EV_REPLY;
    rep.at = w->now + sw_between(w, 1, 40);
    if (e->r == w->slow_r && w->now < w->slow_until)
        rep.at = w->now + sw_between(w, 1500, 4000);
    rep.st = sw_exec(w, e, &rep);
    sw_push(w, &rep);
}

static void sw_event(sw_world *w, sw_ev *e)
{
    if (e->kind == EV_APPLY) {
        sw_apply(w, e);     /* sent: it reaches the server, dead sender or not */
        return;
    }
    sw_rep *p = &w->rep[e->r];
    if (p->gen != e->gen || !sw_alive(p))
        return;
    uint64_t now = sw_local(w, e->r);
    switch (e->kind) {
    case EV_REPLY:
        if (e->op == FQ_OWNER_GET)
            fq_owner_on_get(p->o, e->slot, e->req, now, e->st, e->val, e->rev);
        else
            fq_owner_on_write(p->o, e->slot, e->req, now, e->st, e->rev);
        break;
    case EV_WATCH:
        fq_owner_on_key(p->o, now, e->key, e->val, w->now - e->stored);
        break;
    case EV_SYNCED:
        fq_owner_synced(p->o);
        break;
    case EV_HANDOFF:
        fq_owner_handoff(p->o, e->part);
        break;
    default:
        break;
    }
    sw_drain(w, e->r);
}

/* Everything due now, in order; what is for a frozen replica waits. */
static void sw_events(sw_world *w)
{
    static sw_ev due[SW_EVENTS];
    size_t nd = 0, out = 0;
    for (size_t i = 0; i < w->nev; i++) {
        const sw_ev *e = &w->ev[i];
        if (e->at > w->now || (e->kind != EV_APPLY && w->rep[e->r].state == R_FROZEN))
            w->ev[out++] = *e;
        else
            due[nd++] = *e;
    }
    w->nev = out;
    for (size_t i = 0; i < nd; i++)
        sw_event(w, &due[i]);
}

/* Replica r (off) starts as id: a new process, its own clock. */
static void sw_start(sw_world *w, int r, const char *id)
{
    sw_rep *p = &w->rep[r];
    int gen = p->gen + 1;
    memset(p, 0, sizeof *p);
    p->gen = gen;
    p->state = R_RUN;
    p->off = sw_between(w, 0, 100000);
    snprintf(p->id, sizeof p->id, "%s", id);
    char inst[16];
    snprintf(inst, sizeof inst, "i%d", w->nextinst++);
    snprintf(p->val, sizeof p->val, w->parts == 1 ? "%s@%s" : "%s", p->id, inst);
    assert_int_equal(fq_owner_create(&p->o, w->parts, p->id, inst, TTL), FQ_OK);
    fq_owner_bound(p->o, w->bound);
    /* the watch: every key as it stands, then synced */
    uint64_t at = w->now + 1;
    for (int i = 0; i < SW_KEYS; i++) {
        sw_key *k = &w->keys[i];
        if (!sw_present(w, k))
            continue;
        sw_ev we = {.kind = EV_WATCH, .r = r, .gen = gen, .at = at, .stored = k->stored};
        snprintf(we.key, sizeof we.key, "%s", k->key);
        snprintf(we.val, sizeof we.val, "%s", k->val);
        sw_push(w, &we);
    }
    p->last_watch = at + 1;
    sw_push(w, &(sw_ev){.kind = EV_SYNCED, .r = r, .gen = gen, .at = at + 1});
}

/* A new replica, under an id never used before. */
static void sw_join(sw_world *w)
{
    int r = -1;
    for (int i = 0; i < SW_REPS && r < 0; i++)
        if (w->rep[i].state == R_OFF)
            r = i;
    if (r < 0)
        return;
    char id[32];
    snprintf(id, sizeof id, "rep-%d", w->nextid++);
    sw_start(w, r, id);
    w->joined_at = w->now;
}

static int sw_running(const sw_world *w)
{
    int n = 0;
    for (int r = 0; r < SW_REPS; r++)
        n += w->rep[r].state == R_RUN;
    return n;
}

static void sw_kill(sw_world *w, int r)
{
    sw_rep *p = &w->rep[r];
    w->death_check = true;
    w->death_at = w->now;
    w->death_deadline = w->now + TTL + 1000;
    for (uint32_t k = 0; k < w->parts; k++)
        w->death_parts[k] = fq_owner_fresh(p->o, (int32_t)k, sw_local(w, r));
    fq_owner_destroy(p->o);
    p->o = NULL;
    p->state = R_OFF;
    if (w->bound && (uint32_t)sw_running(w) * w->bound < w->parts)
        w->death_check = false;     /* the others are full: its partitions go to none */
}

static int sw_pick(sw_world *w, enum sw_rep_state st)
{
    int c[SW_REPS], n = 0;
    for (int r = 0; r < SW_REPS; r++)
        if (w->rep[r].state == st)
            c[n++] = r;
    return n ? c[sw_rand(w) % (uint64_t)n] : -1;
}

/* Replica r lets a partition it serves go on its own, as the proxy does
 * when the partition's journal refuses its batch (fenced), and hands it
 * off; false when it serves none. */
static bool sw_fence(sw_world *w, int r)
{
    sw_rep *p = &w->rep[r];
    for (uint32_t k = 0; k < w->parts && w->parts > 1; k++)
        if (p->owned[k] && !p->fenced[k] && fq_owner_fresh(p->o, (int32_t)k, sw_local(w, r))) {
            p->fenced[k] = true;
            fq_owner_handoff(p->o, (int32_t)k);
            sw_drain(w, r);
            return true;
        }
    return false;
}

/* A fault or a change, at random. */
static void sw_disturb(sw_world *w, bool faults)
{
    uint64_t what = sw_rand(w) % (faults ? 8 : 2);
    int running = sw_running(w);
    int r = sw_pick(w, R_RUN);
    if (sw_trace)
        print_message("%" PRIu64 " event %d on %s (running %d)\n", w->now, (int)what,
                      r >= 0 ? w->rep[r].id : "-", running);
    if (what == 0 && running < 5) {
        sw_join(w);
        return;     /* a join is no fault: moves and pauses stay checked */
    }
    if (r < 0 || running < 2)
        return;
    if (what == 1) {
        fq_owner_stop(w->rep[r].o, sw_local(w, r));
        w->rep[r].state = R_STOPPING;
        w->rep[r].stop_deadline = w->now + 2000;
        sw_drain(w, r);
    } else if (what == 2 || what == 3) {
        sw_kill(w, r);
    } else if (what == 6) {
        sw_fence(w, r);
    } else if (what == 7) {
        w->slow_r = r;      /* a loaded server: answers late, some past their deadline */
        w->slow_until = w->now + sw_between(w, 500, 5000);
        w->death_check = false;
    } else if (what == 4) {
        w->rep[r].state = R_FROZEN;
        w->rep[r].frozen_until = w->now + sw_between(w, 500, 8000);
        w->death_check = false;
    } else {
        w->rep[r].off += sw_between(w, 200, 6000);
        w->death_check = false;
    }
    w->disturbed_until = w->now + 3 * TTL;
}

/* What each replica thinks of partition k, when a check fails. */
static void sw_dump(sw_world *w, uint32_t k)
{
    for (int r = 0; r < SW_REPS; r++) {
        sw_rep *p = &w->rep[r];
        if (!p->o)
            continue;
        const fq_lease *l = fq_owner_lease(p->o, (int32_t)k);
        fq_owner_stats st;
        fq_owner_stats_get(&st, p->o);
        print_message("%s state %d: assigned %s, lease %d op %d holder '%s', live %u\n", p->id,
                      (int)p->state, fq_owner_assigned(p->o, (int32_t)k), (int)l->state,
                      (int)l->op, l->holder, st.live);
    }
    char key[16];
    snprintf(key, sizeof key, "p.%u", k);
    sw_key *sk = sw_find(w, key, false);
    if (sk)
        print_message("server: '%s' rev %" PRIu64 " stored %" PRIu64 "\n", sk->val, sk->rev,
                      sk->stored);
}

/* Whether the server holds k for a running replica. */
static bool sw_holder_running(const sw_world *w, const sw_key *k)
{
    if (!sw_present(w, k))
        return false;
    for (int r = 0; r < SW_REPS; r++)
        if (w->rep[r].state == R_RUN && strcmp(w->rep[r].val, k->val) == 0)
            return true;
    return false;
}

/* Into held, the partition keys each replica holds at the server. */
static void sw_held(sw_world *w, uint32_t *held)
{
    memset(held, 0, SW_REPS * sizeof *held);
    for (uint32_t k = 0; k < w->parts && w->parts > 1; k++) {
        char key[16];
        snprintf(key, sizeof key, "p.%u", k);
        sw_key *sk = sw_find(w, key, false);
        for (int r = 0; r < SW_REPS && sw_present(w, sk); r++)
            held[r] += sw_alive(&w->rep[r]) && strcmp(sk->val, w->rep[r].val) == 0;
    }
}

/* Whether the replica of id holds its bound at the server (held, counted
 * once a call). */
static bool sw_full(sw_world *w, const char *id, uint32_t *held, bool *counted)
{
    if (!*counted)
        sw_held(w, held);
    *counted = true;
    for (int r = 0; r < SW_REPS; r++)
        if (sw_alive(&w->rep[r]) && strcmp(w->rep[r].id, id) == 0)
            return held[r] >= w->bound;
    return true;        /* none: nobody takes it */
}

/* The invariants, at every world millisecond. */
static void sw_check(sw_world *w)
{
    uint32_t P = w->parts, unowned = 0, held[SW_REPS];
    bool counted = false;
    uint64_t moving = 0;
    int view = -1;      /* whose assignment says a key is moving: the first running */
    for (int r = SW_REPS - 1; r >= 0; r--)
        view = w->rep[r].state == R_RUN ? r : view;
    for (uint32_t k = 0; k < P; k++) {
        /* by index, not by name: this runs for every partition every
         * millisecond, and formatting and parsing 1,024 names a
         * millisecond was most of the test's time (too slow under ASan) */
        sw_key *sk = P == 1 ? sw_find(w, "leader", false)
                            : w->pkey[k] ? &w->keys[w->pkey[k] - 1] : NULL;
        int fresh = 0;
        for (int r = 0; r < SW_REPS; r++) {
            sw_rep *p = &w->rep[r];
            if (p->state != R_RUN && p->state != R_STOPPING)
                continue;
            if (!fq_owner_fresh(p->o, (int32_t)k, sw_local(w, r)))
                continue;
            fresh++;
            /* fresh: the server holds the key in our name */
            if (!sw_present(w, sk) || strcmp(sk->val, p->val) != 0)
                fail_msg("seed %" PRIu64 " t %" PRIu64 ": %s fresh for partition %u, the server "
                         "says '%s'", w->seed0, w->now, p->id, k, sk ? sk->val : "");
        }
        if (fresh > 1)
            fail_msg("seed %" PRIu64 " t %" PRIu64 ": %d fresh owners of partition %u",
                     w->seed0, w->now, fresh, k);
        if (fresh)
            w->owned_since[k] = w->now;
        else if (!sw_holder_running(w, sk))
            unowned++;  /* a taker whose write the server applied is on its way */
        /* released to a replica at its bound (it filled up meanwhile) is
         * no move under way: nobody takes it until one has room */
        if (sw_present(w, sk) && strcmp(sk->val, FQ_LEASE_RELEASED) == 0 && !sk->stop_release &&
            !(w->bound && view >= 0 &&
              sw_full(w, fq_owner_assigned(w->rep[view].o, (int32_t)k), held, &counted)))
            moving++;
    }
    /* what the running replicas cannot hold stays unowned; a replica that
     * joined takes the free partitions assigned to it at once, and those
     * the full ones hold one at a time (checked once quiet: sw_check_balance) */
    uint32_t run = (uint32_t)sw_running(w), cap = w->bound ? run * w->bound : P;
    uint32_t over = P > cap ? P - cap : 0;
    if (w->bound && w->now < w->joined_at + SW_BOUND_SETTLE)
        over = P;
    unowned = unowned > over ? unowned - over : 0;
    if (moving > w->max_moving && w->now >= w->disturbed_until)
        w->max_moving = moving;
    if (w->now >= w->disturbed_until && P > 1) {
        /* with a bound, a move may reach a replica that filled up
         * meanwhile (its view lagged): it takes that one once it moved one
         * of its own, so two are between owners for a moment */
        if (moving > 1 + (w->bound != 0))
            fail_msg("seed %" PRIu64 " t %" PRIu64 ": %" PRIu64 " planned moves at once",
                     w->seed0, w->now, moving);
        if (unowned > 1 && sw_trace)
            for (uint32_t k = 0; k < P; k++)
                sw_dump(w, k);
        if (unowned > 1)
            fail_msg("seed %" PRIu64 " t %" PRIu64 ": %u partitions without an owner with "
                     "no fault", w->seed0, w->now, unowned);
    }
    if (w->death_check && w->now >= w->death_deadline) {
        for (uint32_t k = 0; k < P; k++)
            if (w->death_parts[k] && w->owned_since[k] <= w->death_at) {
                sw_dump(w, k);
                fail_msg("seed %" PRIu64 ": partition %u of a replica killed at %" PRIu64
                         " not owned again by %" PRIu64, w->seed0, k, w->death_at, w->now);
            }
        w->death_check = false;
        w->takeovers_checked++;
    }
}

/* Once stable: every partition owned, each running replica within one of
 * an even share. */
static void sw_check_balance(sw_world *w)
{
    uint32_t P = w->parts, n = 0, cnt[SW_REPS] = {0};
    for (int r = 0; r < SW_REPS; r++) {
        sw_rep *p = &w->rep[r];
        if (p->state != R_RUN)
            continue;
        n++;
        for (uint32_t k = 0; k < P; k++)
            if (fq_owner_fresh(p->o, (int32_t)k, sw_local(w, r))) {
                if (!p->owned[k])
                    fail_msg("seed %" PRIu64 " t %" PRIu64 ": %s fresh for partition %u, never "
                             "told GAINED", w->seed0, w->now, p->id, k);
                if (p->fenced[k])
                    fail_msg("seed %" PRIu64 " t %" PRIu64 ": %s holds partition %u, let go "
                             "when its journal fenced it, and serves it not", w->seed0, w->now,
                             p->id, k);
                cnt[r]++;
            }
    }
    if (!n)
        return;
    uint32_t total = 0, lo = P == 1 ? 0 : P / n, hi = P == 1 ? 1 : (P + n - 1) / n;
    uint32_t all = P;
    if (w->bound && P > 1) {
        lo = lo < w->bound ? lo : w->bound;
        hi = hi < w->bound ? hi : w->bound;
        all = n * w->bound < P ? n * w->bound : P;
    }
    for (int r = 0; r < SW_REPS; r++) {
        if (w->rep[r].state != R_RUN)
            continue;
        total += cnt[r];
        if (cnt[r] < lo || cnt[r] > hi)
            fail_msg("seed %" PRIu64 " t %" PRIu64 ": %s owns %u of %u partitions over %u "
                     "replicas", w->seed0, w->now, w->rep[r].id, cnt[r], P, n);
    }
    if (total != all)
        fail_msg("seed %" PRIu64 " t %" PRIu64 ": %u of %u partitions owned (%u may be)",
                 w->seed0, w->now, total, P, all);
    for (int r = 0; r < SW_REPS; r++) {
        /* the unowned ones reported, in every running replica's view */
        fq_owner_stats st;
        if (w->rep[r].state != R_RUN)
            continue;
        fq_owner_stats_get(&st, w->rep[r].o);
        if (P > 1 && st.unassigned != P - all)
            fail_msg("seed %" PRIu64 " t %" PRIu64 ": %s reports %u partitions assigned to "
                     "none, %u are", w->seed0, w->now, w->rep[r].id, st.unassigned, P - all);
    }
    w->balance_checked++;
}

static void sw_step(sw_world *w)
{
    w->now++;
    for (int r = 0; r < SW_REPS; r++) {
        sw_rep *p = &w->rep[r];
        if (p->state == R_FROZEN && w->now >= p->frozen_until)
            p->state = R_RUN;
        if (p->state == R_STOPPING && (fq_owner_stopped(p->o) || w->now >= p->stop_deadline)) {
            fq_owner_destroy(p->o);
            p->o = NULL;
            p->state = R_OFF;
        }
    }
    sw_events(w);
    for (int r = 0; r < SW_REPS; r++) {
        sw_rep *p = &w->rep[r];
        if (p->o && p->exits) {
            fq_owner_destroy(p->o);
            p->o = NULL;
            p->state = R_OFF;
            sw_join(w);
        }
    }
    for (int r = 0; r < SW_REPS; r++) {
        sw_rep *p = &w->rep[r];
        if ((p->state == R_RUN || p->state == R_STOPPING) && (w->now + (uint64_t)r * 3) % 10 == 0) {
            fq_owner_tick(p->o, sw_local(w, r));
            sw_drain(w, r);
        }
    }
    sw_check(w);
}

static void sw_init(sw_world *w, uint64_t seed, uint32_t parts)
{
    memset(w, 0, sizeof *w);
    w->seed0 = w->seed = seed;
    w->parts = parts;
    w->now = 1000;
    w->ev = calloc(SW_EVENTS, sizeof *w->ev);
    assert_non_null(w->ev);
}

static void sw_free(sw_world *w)
{
    for (int r = 0; r < SW_REPS; r++)
        fq_owner_destroy(w->rep[r].o);
    free(w->ev);
}

static void sw_run(sw_world *w, uint64_t ms)
{
    for (uint64_t end = w->now + ms; w->now < end;)
        sw_step(w);
}

static uint32_t sw_owned(sw_world *w, int r)
{
    uint32_t n = 0;
    for (uint32_t k = 0; k < w->parts; k++)
        n += w->rep[r].state == R_RUN && fq_owner_fresh(w->rep[r].o, (int32_t)k, sw_local(w, r));
    return n;
}

/* ---- tests --------------------------------------------------------------- */

static void test_id_valid(void **state)
{
    (void)state;
    assert_true(fq_owner_id_valid("fairq-0"));
    assert_true(fq_owner_id_valid("A_b-9"));
    assert_false(fq_owner_id_valid(""));
    assert_false(fq_owner_id_valid(NULL));
    assert_false(fq_owner_id_valid("released"));
    assert_false(fq_owner_id_valid("a.b"));     /* a key's token separator */
    assert_false(fq_owner_id_valid("a b"));
    assert_false(fq_owner_id_valid("host:1"));
    char longid[FQ_OWNER_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_false(fq_owner_id_valid(longid));
    longid[FQ_OWNER_ID_MAX] = '\0';
    assert_true(fq_owner_id_valid(longid));
    /* made ids are valid whatever the host name */
    char made[FQ_OWNER_ID_MAX + 1];
    fq_owner_id_make(made, "worker-3.example", 4121, 1764892800000);
    assert_string_equal(made, "worker-3-example-4121-mis3ls00");
    assert_true(fq_owner_id_valid(made));
    fq_owner_id_make(made, "a:b c\xc3\xa9-very-long-host-name-of-many-letters", 2147483647,
                     INT64_MAX);
    assert_true(fq_owner_id_valid(made));
    fq_owner_id_make(made, "", 1, 0);
    assert_string_equal(made, "h-1-0");
    fq_owner *o;
    assert_int_equal(fq_owner_create(&o, 0, "a", NULL, TTL), FQ_EINVAL);
    assert_int_equal(fq_owner_create(&o, 1025, "a", NULL, TTL), FQ_EINVAL);
    assert_int_equal(fq_owner_create(&o, 4, "a.b", NULL, TTL), FQ_EINVAL);
    assert_int_equal(fq_owner_create(&o, 4, "a", NULL, 10), FQ_EINVAL);
    fq_owner_destroy(NULL);
}

/* A partition key's value is read from the bucket, and the admin plane
 * puts its holder into a subject (<admin>.replica.<holder>.stats): one that
 * is no replica id ('.', '*', '>', spaces, line ends) is no holder. */
static void test_holder_invalid_value(void **state)
{
    (void)state;
    fq_owner *o;
    assert_int_equal(fq_owner_create(&o, 8, "rep-0", NULL, TTL), FQ_OK);
    fq_owner_on_key(o, 1000, "p.3", "rep-1", 0);
    assert_string_equal(fq_owner_holder(o, 3, 1000), "rep-1");
    const char *bad[] = {"a.b", "a b\r\nPUB x 1", "*", ">", "a\tb", "released-"};
    fq_owner_stats st;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fq_owner_on_key(o, 1000, "p.3", bad[i], 0);
        const char *h = fq_owner_holder(o, 3, 1000);
        assert_true(!h[0] || fq_owner_id_valid(h));
        fq_owner_stats_get(&st, o);
        assert_int_equal(st.refused, fq_owner_id_valid(bad[i]) ? i : i + 1);
    }
    fq_owner_destroy(o);
}

/* Every key and value the watch delivers that fairq never writes is
 * counted, and changes nothing; what fairq writes is not counted. */
static void test_foreign_keys_counted(void **state)
{
    (void)state;
    fq_owner *o;
    assert_int_equal(fq_owner_create(&o, 8, "rep-0", NULL, TTL), FQ_OK);
    fq_owner_stats st;
    /* what replicas write: holders, releases, deletes, registry, duty */
    fq_owner_on_key(o, 1000, "p.3", "rep-1", 0);
    fq_owner_on_key(o, 1000, "p.4", FQ_LEASE_RELEASED, 0);
    fq_owner_on_key(o, 1000, "p.5", NULL, 0);
    fq_owner_on_key(o, 1000, "r.rep-1", "rep-1@i1", 0);
    fq_owner_on_key(o, 1000, "leader", "rep-1", 0);
    fq_owner_stats_get(&st, o);
    assert_int_equal(st.refused, 0);
    /* keys of no partition of P = 8, registry ids not valid, other names */
    const char *keys[] = {"p.8", "p.1024", "p.03", "p.x", "p.", "r.", "r.a.b", "zzz", "pp.1"};
    size_t n = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < n; i++)
        fq_owner_on_key(o, 1000, keys[i], "rep-1", 0);
    fq_owner_stats_get(&st, o);
    assert_int_equal(st.refused, n);
    assert_string_equal(fq_owner_holder(o, 3, 1000), "rep-1");
    for (int32_t k = 0; k < 8; k++)
        assert_true(k == 3 || !fq_owner_holder(o, k, 1000)[0]);
    fq_owner_destroy(o);
}

/* P = 1 is today's leader lease: the key "leader", no registry, no watch
 * needed, the first to take it keeps it; a second replica stands by and
 * takes over once the first stops renewing. */
static void test_p1_is_the_leader_key(void **state)
{
    (void)state;
    fq_owner *o;
    assert_int_equal(fq_owner_create(&o, 1, "one", NULL, TTL), FQ_OK);
    fq_owner_tick(o, 100);
    fq_owner_act a;
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_GET);
    assert_string_equal(a.key, "leader");
    assert_false(fq_owner_next(&a, o));
    fq_owner_on_get(o, a.slot, a.req, 101, FQ_ENOTFOUND, NULL, 0);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_CREATE);
    assert_string_equal(a.value, "one");
    fq_owner_on_write(o, a.slot, a.req, 102, FQ_OK, 7);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_GAINED);
    assert_int_equal(a.part, 0);
    assert_int_equal(a.term, 7);
    assert_false(a.again);
    assert_true(fq_owner_fresh(o, 0, 102));
    assert_true(fq_owner_fresh(o, FQ_OWNER_DUTY, 102));
    assert_int_equal(fq_owner_term(o, 0), 7);
    /* a renewal a third of the TTL after the create was sent */
    fq_owner_tick(o, 101 + TTL / 3 - 1);
    assert_false(fq_owner_next(&a, o));
    fq_owner_tick(o, 101 + TTL / 3);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_UPDATE);
    assert_true(a.renewal);
    assert_int_equal(a.expect, 7);
    fq_owner_on_write(o, a.slot, a.req, 101 + TTL / 3 + 4, FQ_OK, 9);
    assert_false(fq_owner_next(&a, o));
    fq_owner_stats st;
    fq_owner_stats_get(&st, o);
    assert_int_equal(st.owned, 1);
    assert_int_equal(st.renewals, 1);
    assert_int_equal(st.renew_ms_last, 4);
    assert_string_equal(fq_owner_live_at(o, 0), "one");     /* no registry: itself */
    assert_null(fq_owner_live_at(o, 1));
    /* a stop: LOST, planned; released once handed off */
    fq_owner_stop(o, 2000);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_LOST);
    assert_true(a.planned);
    fq_owner_tick(o, 2001);
    assert_false(fq_owner_next(&a, o));     /* not yet settled */
    assert_true(fq_owner_fresh(o, 0, 2001)); /* the caller settles while fresh */
    fq_owner_handoff(o, 0);
    fq_owner_tick(o, 2002);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_UPDATE);
    assert_string_equal(a.value, FQ_LEASE_RELEASED);
    assert_int_equal(a.expect, 9);
    assert_false(fq_owner_fresh(o, 0, 2002));
    assert_false(fq_owner_stopped(o));
    fq_owner_on_write(o, a.slot, a.req, 2003, FQ_OK, 10);
    assert_true(fq_owner_stopped(o));
    fq_owner_destroy(o);
}

/* P = 1: a holder whose renewal is refused and that then finds another's
 * id in the key has lost it for good, as the leader lease always had;
 * with P > 1 the same slot would stand by to take it again. */
static void test_p1_lost_for_good(void **state)
{
    (void)state;
    fq_owner *o;
    assert_int_equal(fq_owner_create(&o, 1, "one", NULL, TTL), FQ_OK);
    fq_owner_act a;
    fq_owner_tick(o, 100);
    assert_true(fq_owner_next(&a, o));
    fq_owner_on_get(o, a.slot, a.req, 101, FQ_ENOTFOUND, NULL, 0);
    assert_true(fq_owner_next(&a, o));
    fq_owner_on_write(o, a.slot, a.req, 102, FQ_OK, 7);
    while (fq_owner_next(&a, o))
        ;
    fq_owner_tick(o, 101 + TTL / 3);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_UPDATE);
    fq_owner_on_write(o, a.slot, a.req, 101 + TTL / 3 + 1, FQ_EEXIST, 0);
    assert_false(fq_owner_next(&a, o));
    fq_owner_tick(o, 101 + TTL / 3 + 2);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_GET);     /* read again: our own late write? */
    fq_owner_on_get(o, a.slot, a.req, 101 + TTL / 3 + 3, FQ_OK, "two", 9);
    assert_true(fq_owner_next(&a, o));
    assert_int_equal(a.kind, FQ_OWNER_LOST);
    assert_false(a.planned);
    assert_false(fq_owner_next(&a, o));
    assert_int_equal(fq_owner_lease(o, 0)->state, FQ_LEASE_LOST);
    assert_string_equal(fq_owner_lease(o, 0)->holder, "two");
    for (uint64_t t = 2000; t < 20000; t += 100) {
        fq_owner_tick(o, t);
        assert_false(fq_owner_next(&a, o));
        assert_false(fq_owner_fresh(o, 0, t));
    }
    fq_owner_destroy(o);
}

/* Three replicas share P = 8 as 3, 3, 2; the registry keys and the
 * partition keys are the ones owner.h names. */
static void test_three_share_eight(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 7, 8);
    for (int i = 0; i < 3; i++)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    uint32_t a = sw_owned(&w, 0), b = sw_owned(&w, 1), c = sw_owned(&w, 2);
    assert_int_equal(a + b + c, 8);
    assert_true(a >= 2 && a <= 3 && b >= 2 && b <= 3 && c >= 2 && c <= 3);
    assert_non_null(sw_find(&w, "r.rep-0", false));
    assert_non_null(sw_find(&w, "p.7", false));
    assert_non_null(sw_find(&w, "leader", false));
    /* one duty holder */
    int duty = 0;
    for (int r = 0; r < 3; r++)
        duty += fq_owner_fresh(w.rep[r].o, FQ_OWNER_DUTY, sw_local(&w, r));
    assert_int_equal(duty, 1);
    /* every replica computes the same assignment */
    for (int32_t k = 0; k < 8; k++) {
        assert_string_equal(fq_owner_assigned(w.rep[0].o, k), fq_owner_assigned(w.rep[1].o, k));
        assert_string_equal(fq_owner_assigned(w.rep[0].o, k), fq_owner_assigned(w.rep[2].o, k));
    }
    /* every replica knows who holds each partition (the admin plane
     * forwards a tenant's requests by it): the one whose term it is */
    for (int32_t k = 0; k < 8; k++) {
        int holder = -1;
        for (int r = 0; r < 3; r++)
            if (fq_owner_term(w.rep[r].o, k))
                holder = r;
        assert_true(holder >= 0);
        for (int r = 0; r < 3; r++)
            assert_string_equal(fq_owner_holder(w.rep[r].o, k, sw_local(&w, r)),
                                w.rep[holder].id);
    }
    assert_string_equal(fq_owner_holder(w.rep[0].o, 8, sw_local(&w, 0)), "");
    /* every replica lists the three live ones, sorted (the admin plane's
     * "replicas", which fairq-admin asks one by one) */
    for (int r = 0; r < 3; r++) {
        for (size_t i = 0; i < 3; i++)
            assert_string_equal(fq_owner_live_at(w.rep[r].o, i), w.rep[i].id);
        assert_null(fq_owner_live_at(w.rep[r].o, 3));
    }
    sw_free(&w);
}

/* A fourth replica joins: it takes its share one partition at a time (the
 * world checks at most one planned move under way and at most one
 * partition without an owner, every millisecond), and each partition
 * that moves was handed over (released) rather than left to age out. */
static void test_join_moves_one_at_a_time(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 11, 16);
    for (int i = 0; i < 3; i++)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    fq_owner_stats st;
    uint64_t moves0 = 0;
    for (int r = 0; r < 3; r++) {
        fq_owner_stats_get(&st, w.rep[r].o);
        moves0 += st.moves;
    }
    uint64_t t0 = w.now;
    sw_join(&w);
    uint64_t first = 0, last = 0;
    uint32_t had = 0;
    while (w.now < t0 + 10000) {
        sw_step(&w);
        uint32_t n = sw_owned(&w, 3);
        if (n > had) {
            assert_int_equal(n, had + 1);   /* one at a time */
            first = first ? first : w.now;
            last = w.now;
            had = n;
        }
    }
    assert_int_equal(had, 4);
    assert_true(first > t0 && last < t0 + 5000);     /* each step a handover, not a TTL */
    assert_int_equal(w.max_moving, 1);
    sw_check_balance(&w);
    fq_owner_stats_get(&st, w.rep[3].o);
    assert_int_equal(st.gained, 4);
    assert_int_equal(st.owned, 4);
    assert_int_equal(st.live, 4);
    uint64_t moves = 0;
    for (int r = 0; r < 3; r++) {
        fq_owner_stats_get(&st, w.rep[r].o);
        moves += st.moves;
    }
    assert_int_equal(moves - moves0, 4);
    sw_free(&w);
}

/* kill -9 of one of three: every partition it owned is owned again
 * within TTL + 1 s (the world checks it), all taken at once rather than
 * one at a time, and the survivors share P evenly. */
static void test_death_takeover(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 23, 8);
    for (int i = 0; i < 3; i++)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    uint32_t had = sw_owned(&w, 1);
    assert_true(had >= 2);
    sw_kill(&w, 1);
    w.disturbed_until = w.now + 3 * TTL;
    uint64_t t0 = w.now, all = 0;
    while (w.now < t0 + TTL + 1000) {
        sw_step(&w);
        if (!all && sw_owned(&w, 0) + sw_owned(&w, 2) == 8)
            all = w.now;
    }
    assert_int_equal(w.takeovers_checked, 1);
    assert_true(all > t0 + TTL - 1000);     /* not before its keys aged out */
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    /* the dead one is no longer listed */
    assert_string_equal(fq_owner_live_at(w.rep[0].o, 0), w.rep[0].id);
    assert_string_equal(fq_owner_live_at(w.rep[0].o, 1), w.rep[2].id);
    assert_null(fq_owner_live_at(w.rep[0].o, 2));
    sw_free(&w);
}

/* kill -9 of the holder just after it renewed partition k, the server
 * ageing keys out 100 ms late (its expiry timer, on a loaded machine): the
 * read made when the view says the key aged out finds it still there, and
 * the key is read again soon after, not a retry (TTL / 6) later. It failed
 * before: k owned again TTL + 500 ms and more after the kill. */
static void test_death_takeover_expiry_late(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 23, 8);
    w.expiry_lag = 100;
    for (int i = 0; i < 3; i++)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    int32_t k = -1;
    for (uint32_t j = 0; j < w.parts && k < 0; j++)
        if (fq_owner_fresh(w.rep[1].o, (int32_t)j, sw_local(&w, 1)))
            k = (int32_t)j;
    assert_true(k >= 0);
    char key[16];
    snprintf(key, sizeof key, "p.%d", k);
    sw_key *sk = sw_find(&w, key, false);
    assert_non_null(sk);
    uint64_t was = sk->stored;
    while (sk->stored == was)   /* its next renewal applied */
        sw_step(&w);
    assert_string_equal(sk->val, w.rep[1].id);
    sw_kill(&w, 1);
    w.disturbed_until = w.now + 3 * TTL;
    uint64_t t0 = w.now, back = 0;
    while (!back && w.now < t0 + TTL + 1000) {
        sw_step(&w);
        for (int r = 0; r < 3; r += 2)
            if (fq_owner_fresh(w.rep[r].o, k, sw_local(&w, r)))
                back = w.now;
    }
    print_message("partition %d owned again %" PRIu64 " ms after the kill\n", k, back - t0);
    assert_true(back > t0 + TTL);           /* not before it aged out */
    assert_true(back < t0 + TTL + 500);
    sw_free(&w);
}

/* A graceful stop hands every partition over at once (released, not aged
 * out): owned again long before a TTL. */
static void test_stop_releases(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 31, 8);
    for (int i = 0; i < 2; i++)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    fq_owner_stop(w.rep[0].o, sw_local(&w, 0));
    w.rep[0].state = R_STOPPING;
    w.rep[0].stop_deadline = w.now + 2000;
    sw_drain(&w, 0);
    w.disturbed_until = w.now + 3 * TTL;
    uint64_t t0 = w.now;
    while (w.rep[0].state != R_OFF)
        sw_step(&w);
    assert_true(w.now < t0 + 1000);     /* every release answered */
    sw_key *reg = sw_find(&w, "r.rep-0", false);
    assert_non_null(reg);
    assert_string_equal(reg->val, FQ_LEASE_RELEASED);
    while (sw_owned(&w, 1) < 8 && w.now < t0 + TTL)
        sw_step(&w);
    assert_true(w.now < t0 + 1500);
    assert_true(fq_owner_fresh(w.rep[1].o, FQ_OWNER_DUTY, sw_local(&w, 1)));
    sw_free(&w);
}

/* A replica frozen past its TTL comes back: it says LOST for what it
 * held, is never fresh for a key another took, registers again, and
 * gets its share back by planned moves. */
static void test_freeze_past_ttl(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 41, 8);
    for (int i = 0; i < 2; i++)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    w.rep[0].state = R_FROZEN;
    w.rep[0].frozen_until = w.now + 2 * TTL;
    w.disturbed_until = w.now + 5 * TTL;
    sw_run(&w, 2 * TTL - 1);
    assert_int_equal(sw_owned(&w, 1), 8);
    sw_run(&w, 6 * TTL);
    sw_check_balance(&w);
    assert_int_equal(sw_owned(&w, 0), 4);
    fq_owner_stats st;
    fq_owner_stats_get(&st, w.rep[0].o);
    assert_int_equal(st.lost, 4);
    assert_int_equal(st.gained, 8);
    sw_free(&w);
}

/* A partition whose journal fenced its holder, let go by the caller
 * on its own (no LOST said), is not left renewed and unserved: its key is
 * released and taken again in a new term by its assigned replica (here
 * the same one), and served again. */
static void test_fenced_released(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 53, 4);
    for (int i = 0; i < 2; i++)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    int32_t k = -1;
    for (int32_t j = 0; j < 4 && k < 0; j++)
        if (w.rep[0].owned[j])
            k = j;
    assert_true(k >= 0);
    uint64_t term = fq_owner_term(w.rep[0].o, k);
    assert_true(sw_fence(&w, 0));
    assert_true(w.rep[0].fenced[k]);
    sw_run(&w, TTL);
    assert_false(w.rep[0].fenced[k]);       /* GAINED again */
    assert_true(fq_owner_fresh(w.rep[0].o, k, sw_local(&w, 0)));
    assert_true(fq_owner_term(w.rep[0].o, k) > term);
    sw_check_balance(&w);
    sw_free(&w);
}

/* Two processes given one replica id: the second finds r.<id> held by
 * another instance, never registers nor takes a partition, and says so
 * once it saw that instance renew it (a TTL after it first read it); the
 * first keeps its partitions throughout. Without the instance tag the
 * second took r.<id> and then every partition key holding the id as its
 * own, and both were fresh owners. Then the first freezes past the TTL
 * and a third process with the id registers meanwhile: the first, back,
 * lets every partition go, and finds the other instance too. */
static void test_duplicate_id(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 61, 4);
    sw_start(&w, 0, "rep-a");
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    sw_start(&w, 1, "rep-a");
    uint64_t t0 = w.now, found = 0;
    while (w.now < t0 + 4 * TTL) {
        sw_step(&w);
        assert_int_equal(sw_owned(&w, 0), 4);
        assert_int_equal(sw_owned(&w, 1), 0);
        if (!found && fq_owner_duplicate(w.rep[1].o))
            found = w.now;
    }
    assert_true(found >= t0 + TTL && found <= t0 + 2 * TTL);
    assert_non_null(strstr(fq_owner_duplicate(w.rep[1].o), "rep-a@"));
    assert_null(fq_owner_duplicate(w.rep[0].o));
    fq_owner_stats st;
    fq_owner_stats_get(&st, w.rep[1].o);
    assert_int_equal(st.gained, 0);
    /* the duplicate stops (the proxy exits); the first freezes past the
     * TTL, and a new process with the id takes over meanwhile */
    fq_owner_destroy(w.rep[1].o);
    w.rep[1].o = NULL;
    w.rep[1].state = R_OFF;
    w.rep[0].state = R_FROZEN;
    w.rep[0].frozen_until = w.now + 3 * TTL;
    w.disturbed_until = w.now + 8 * TTL;
    sw_run(&w, TTL + 500);
    sw_start(&w, 1, "rep-a");
    while (w.rep[0].state == R_FROZEN)
        sw_step(&w);
    assert_int_equal(sw_owned(&w, 1), 4);
    sw_run(&w, 3 * TTL);
    assert_int_equal(sw_owned(&w, 0), 0);
    assert_int_equal(sw_owned(&w, 1), 4);
    assert_non_null(fq_owner_duplicate(w.rep[0].o));
    sw_free(&w);
}

/* One turn of a replica as lib/leader.c performs it: every read and
 * write sent without waiting, answered at once by the server, except what
 * is sent to key hole (a permission denying it), which is never answered:
 * only its deadline ends it. GAINED and LOST are kept in r's owned. */
static void hole_turn(sw_world *w, int r, const char *hole)
{
    sw_rep *p = &w->rep[r];
    fq_owner_tick(p->o, sw_local(w, r));
    fq_owner_act a;
    while (fq_owner_next(&a, p->o)) {
        if (a.kind == FQ_OWNER_GAINED || a.kind == FQ_OWNER_LOST) {
            if (a.part >= 0)
                p->owned[a.part] = a.kind == FQ_OWNER_GAINED;
            continue;
        }
        if (strcmp(a.key, hole) == 0)
            continue;
        sw_ev e = {.op = a.kind, .expect = a.expect}, rep = {0};
        snprintf(e.key, sizeof e.key, "%s", a.key);
        snprintf(e.val, sizeof e.val, "%s", a.value ? a.value : "");
        fq_status st = sw_exec(w, &e, &rep);
        if (a.kind == FQ_OWNER_GET)
            fq_owner_on_get(p->o, a.slot, a.req, sw_local(w, r), st, rep.val, rep.rev);
        else
            fq_owner_on_write(p->o, a.slot, a.req, sw_local(w, r), st, rep.rev);
    }
}

/* One replica alone over P = 4, the server answering nothing sent to one
 * partition's key (each in turn, and the duty's): every other key is
 * taken within a second and kept, fresh at every millisecond, through 3
 * TTLs of that key's reads tried again, each given up on at its deadline.
 * (When reads and takes were waited for, a turn sent no more once one went
 * unanswered, and with a fixed order of keys every key after the
 * unanswered one was starved.) */
static void test_unanswered_key_costs_the_others_nothing(void **state)
{
    (void)state;
    for (int32_t hole = -1; hole < 4; hole++) {
        char key[16];
        if (hole < 0)
            snprintf(key, sizeof key, "%s", FQ_OWNER_KEY_DUTY);
        else
            snprintf(key, sizeof key, "p.%d", (int)hole);
        sw_world w;
        sw_init(&w, 71 + (uint64_t)hole, 4);
        sw_start(&w, 0, "rep-a");
        uint64_t t0 = w.now, all = 0;
        while (w.now < t0 + 4 * TTL) {
            w.now++;
            sw_events(&w);
            if (w.now % 10 == 0)
                hole_turn(&w, 0, key);
            bool others = true;
            for (int32_t k = -1; k < 4; k++) {
                int32_t part = k < 0 ? FQ_OWNER_DUTY : k;
                others &= k == hole || fq_owner_fresh(w.rep[0].o, part, sw_local(&w, 0));
            }
            if (!all && others)
                all = w.now;
            if (all && !others)
                fail_msg("%s unanswered: a key taken at %" PRIu64 " is not fresh at %" PRIu64,
                         key, all - t0, w.now - t0);
        }
        if (!all || all > t0 + 1000)
            fail_msg("%s unanswered: the other keys taken at %" PRIu64 " ms (0: never)", key,
                     all ? all - t0 : 0);
        assert_false(fq_owner_fresh(w.rep[0].o, hole < 0 ? FQ_OWNER_DUTY : hole,
                                    sw_local(&w, 0)));
        fq_owner_stats st;
        fq_owner_stats_get(&st, w.rep[0].o);
        assert_int_equal(st.lost, 0);
        assert_int_equal(st.gained, hole < 0 ? 4 : 3);
        sw_free(&w);
    }
}

/* Each partition's fence is its own lease's (fq_owner_fresh_until, which
 * lib/leader.c hands to the consumers and the ledger), in virtual time:
 * one replica holds P = 4; from a TTL on the server answers nothing sent
 * to p.2's key. p.2's fence stays where its last confirmed renewal put it,
 * fresh exactly before it, passes, and once stale past the TTL it is
 * dropped (0); the other partitions' fences move on, ahead of now at every
 * millisecond, and they stay fresh: p.2's late renewals fence only p.2. */
static void test_fence_per_partition(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 83, 4);
    sw_start(&w, 0, "rep-a");
    const fq_owner *o = w.rep[0].o;
    uint64_t t0 = w.now;
    while (w.now < t0 + TTL) {
        w.now++;
        sw_events(&w);
        if (w.now % 10 == 0)
            hole_turn(&w, 0, "");
    }
    for (int32_t k = 0; k < 4; k++)
        assert_true(fq_owner_fresh_until(o, k) > sw_local(&w, 0));
    uint64_t stuck = fq_owner_fresh_until(o, 2), t1 = w.now;
    bool passed = false;
    while (w.now < t1 + 2 * TTL) {
        w.now++;
        sw_events(&w);
        if (w.now % 10 == 0)
            hole_turn(&w, 0, "p.2");
        uint64_t now = sw_local(&w, 0), f2 = fq_owner_fresh_until(o, 2);
        assert_true(f2 == stuck || f2 == 0);
        assert_true(fq_owner_fresh(o, 2, now) == (now < f2));
        passed |= f2 && now >= f2;
        for (int32_t k = 0; k < 4; k++)
            if (k != 2 && (fq_owner_fresh_until(o, k) <= now || !fq_owner_fresh(o, k, now)))
                fail_msg("p.%d not fresh at %" PRIu64 " ms while p.2 went unanswered",
                         (int)k, now - t1);
    }
    assert_true(passed);
    assert_int_equal(fq_owner_fresh_until(o, 2), 0);
    sw_free(&w);
}

/* P = 1, two processes given one replica id: the second reads the leader
 * key holding the id under another instance, stands by, and says so once
 * it saw that instance renew it; the first leads throughout. Without the
 * instance in the key the second read it as its own, took it, and both
 * led (the first's refused renewal read the key, its id, as its own late
 * write, and went on). Once the duplicate is gone and the first stops
 * renewing (killed), a new process with the id takes the key within a
 * TTL and a second. */
static void test_p1_duplicate_id(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 67, 1);
    sw_start(&w, 0, "rep-a");
    sw_run(&w, TTL);
    assert_int_equal(sw_owned(&w, 0), 1);
    sw_start(&w, 1, "rep-a");
    uint64_t t0 = w.now, found = 0;
    while (w.now < t0 + 4 * TTL) {
        sw_step(&w);
        assert_int_equal(sw_owned(&w, 0), 1);
        assert_int_equal(sw_owned(&w, 1), 0);
        if (!found && fq_owner_duplicate(w.rep[1].o))
            found = w.now;
    }
    assert_true(found >= t0 + TTL && found <= t0 + 2 * TTL);
    assert_non_null(strstr(fq_owner_duplicate(w.rep[1].o), "rep-a@"));
    assert_null(fq_owner_duplicate(w.rep[0].o));
    fq_owner_stats st;
    fq_owner_stats_get(&st, w.rep[1].o);
    assert_int_equal(st.gained, 0);
    /* the duplicate stops (the proxy exits); the first is killed, and a
     * restart under the id waits out its key */
    fq_owner_destroy(w.rep[1].o);
    w.rep[1].o = NULL;
    w.rep[1].state = R_OFF;
    sw_kill(&w, 0);
    sw_start(&w, 1, "rep-a");
    uint64_t t1 = w.now;
    while (!sw_owned(&w, 1) && w.now < t1 + 2 * TTL)
        sw_step(&w);
    assert_int_equal(sw_owned(&w, 1), 1);
    assert_true(w.now <= t1 + TTL + 1000);
    assert_null(fq_owner_duplicate(w.rep[1].o));
    sw_free(&w);
}

/* The seeded simulation: replicas join, stop, die, freeze, jump their
 * clocks and have a partition's journal fenced at random for 90 s, then stay quiet for 20 s; every millisecond
 * no two fresh owners of a partition and the server agrees with each;
 * with no fault for 3 TTLs, at most one planned move under way and at
 * most one partition without an owner; a dead replica's partitions owned
 * again within TTL + 1 s; after 15 s of quiet, balanced within one.
 * OWNER_SEED=<n> replays one world, OWNER_SEEDS=<k> runs k. */
/* The next action of o for part (other parts' actions answered as a
 * plain bucket would not matter here: they are skipped), or kind 0. */
static fq_owner_act next_of(fq_owner *o, int32_t part, enum fq_owner_kind kind)
{
    fq_owner_act a, found = {0};
    while (fq_owner_next(&a, o))
        if (a.part == part && a.kind == kind && !found.kind)
            found = a;
    return found;
}

/* Replica "one" of two partitions, registered at 3 ms, holding partition
 * 0 in term 2 from 6 ms (the key absent at its read): the start of the
 * late-answer cases below. */
static fq_owner *one_holding_p0(void)
{
    fq_owner *o;
    fq_owner_act a;
    assert_int_equal(fq_owner_create(&o, 2, "one", NULL, TTL), FQ_OK);
    fq_owner_tick(o, 1);
    a = next_of(o, FQ_OWNER_REGISTRY, FQ_OWNER_GET);
    fq_owner_on_get(o, a.slot, a.req, 2, FQ_ENOTFOUND, NULL, 0);
    a = next_of(o, FQ_OWNER_REGISTRY, FQ_OWNER_CREATE);
    fq_owner_on_write(o, a.slot, a.req, 3, FQ_OK, 1);
    fq_owner_synced(o);
    fq_owner_tick(o, 4);
    a = next_of(o, 0, FQ_OWNER_GET);
    assert_int_equal(a.kind, FQ_OWNER_GET);
    fq_owner_on_get(o, a.slot, a.req, 5, FQ_ENOTFOUND, NULL, 0);
    a = next_of(o, 0, FQ_OWNER_CREATE);
    fq_owner_on_write(o, a.slot, a.req, 6, FQ_OK, 2);
    a = next_of(o, 0, FQ_OWNER_GAINED);
    assert_int_equal(a.kind, FQ_OWNER_GAINED);
    assert_int_equal(a.term, 2);
    return o;
}

/* An answer to an operation sent before a partition was lost (its lease
 * stale past the TTL: LOST said, the slot to stand by again) comes late
 * and takes the key: no GAINED for a slot about to be let go, else the
 * caller adopts a partition that owner.c then forgets without a LOST, and
 * is told GAINED again (not "again") when it takes the key anew. Found by
 * fuzz_owner. */
static void test_late_answer_after_lost(void **state)
{
    (void)state;
    fq_owner *o = one_holding_p0();
    fq_owner_act a;
    /* the renewal refused (the key moved, say): read at once, no answer */
    fq_owner_tick(o, 5 + TTL / 3);
    a = next_of(o, 0, FQ_OWNER_UPDATE);
    assert_int_equal(a.kind, FQ_OWNER_UPDATE);
    fq_owner_on_write(o, a.slot, a.req, 6 + TTL / 3, FQ_EEXIST, 0);
    fq_owner_tick(o, 7 + TTL / 3);
    fq_owner_act get = next_of(o, 0, FQ_OWNER_GET);
    assert_int_equal(get.kind, FQ_OWNER_GET);
    /* stale past the TTL: LOST */
    fq_owner_tick(o, 5 + TTL);
    a = next_of(o, 0, FQ_OWNER_LOST);
    assert_int_equal(a.kind, FQ_OWNER_LOST);
    assert_false(fq_owner_fresh(o, 0, 5 + TTL));
    /* the read answered late: the key aged out; its create stored */
    fq_owner_on_get(o, get.slot, get.req, 10 + TTL, FQ_ENOTFOUND, NULL, 0);
    fq_owner_act cr = next_of(o, 0, FQ_OWNER_CREATE);
    if (cr.kind) {
        fq_owner_on_write(o, cr.slot, cr.req, 11 + TTL, FQ_OK, 5);
        a = next_of(o, 0, FQ_OWNER_GAINED);
        assert_int_equal(a.kind, 0);        /* not for a slot being let go */
    }
    /* it stands by, reads the key (ours), and takes it in a new term:
     * GAINED once, after the LOST */
    fq_owner_tick(o, 12 + TTL);
    fq_owner_tick(o, 13 + 2 * TTL);
    a = next_of(o, 0, FQ_OWNER_GET);
    assert_int_equal(a.kind, FQ_OWNER_GET);
    fq_owner_on_get(o, a.slot, a.req, 14 + 2 * TTL, FQ_OK, "one", 5);
    a = next_of(o, 0, FQ_OWNER_UPDATE);
    assert_int_equal(a.kind, FQ_OWNER_UPDATE);
    assert_int_equal(a.expect, 5);
    fq_owner_on_write(o, a.slot, a.req, 15 + 2 * TTL, FQ_OK, 6);
    a = next_of(o, 0, FQ_OWNER_GAINED);
    assert_int_equal(a.kind, FQ_OWNER_GAINED);
    assert_int_equal(a.term, 6);
    assert_false(a.again);
    assert_true(fq_owner_fresh(o, 0, 15 + 2 * TTL));
    fq_owner_destroy(o);
}

/* A slot that stood by again after a loss numbers its key operations on
 * from the lease it had: an answer to that lease's operation that comes
 * late (its deadline passed) is not taken for the answer to the new
 * lease's operation of the same number. Made anew from 1, the late "OK"
 * of the old renewal (number 3) answered the new lease's take (number 3
 * too): GAINED in the old renewal's revision and fresh, while the server
 * refused the take to it (another replica took the key). */
static void test_old_lease_answer_after_standing_by_again(void **state)
{
    (void)state;
    fq_owner *o = one_holding_p0();
    fq_owner_act a;
    /* a renewal whose answer is delayed past its deadline */
    fq_owner_tick(o, 5 + TTL / 3);
    fq_owner_act old = next_of(o, 0, FQ_OWNER_UPDATE);
    assert_int_equal(old.kind, FQ_OWNER_UPDATE);
    /* stale past the TTL: LOST; the renewal given up on; standing by */
    fq_owner_tick(o, 5 + TTL);
    a = next_of(o, 0, FQ_OWNER_LOST);
    assert_int_equal(a.kind, FQ_OWNER_LOST);
    uint64_t t = 5 + TTL / 3 + TTL;     /* past the renewal's deadline */
    fq_owner_tick(o, t);
    (void)next_of(o, 0, FQ_OWNER_GET);
    /* the new lease reads the key: another's, then released; it takes it */
    fq_owner_act get = {0};
    for (; !get.kind && t < 20 * TTL; t += 10) {
        fq_owner_tick(o, t);
        get = next_of(o, 0, FQ_OWNER_GET);
    }
    assert_int_equal(get.kind, FQ_OWNER_GET);
    fq_owner_on_get(o, get.slot, get.req, t, FQ_OK, "two", 9);
    get.kind = 0;
    for (; !get.kind && t < 40 * TTL; t += 10) {
        fq_owner_tick(o, t);
        get = next_of(o, 0, FQ_OWNER_GET);
    }
    assert_int_equal(get.kind, FQ_OWNER_GET);
    fq_owner_on_get(o, get.slot, get.req, t, FQ_OK, FQ_LEASE_RELEASED, 10);
    fq_owner_act take = next_of(o, 0, FQ_OWNER_UPDATE);
    assert_int_equal(take.kind, FQ_OWNER_UPDATE);
    assert_int_equal(take.expect, 10);
    /* the old renewal's answer comes now: not the take's */
    fq_owner_on_write(o, old.slot, old.req, t + 1, FQ_OK, 4);
    a = next_of(o, 0, FQ_OWNER_GAINED);
    assert_int_equal(a.kind, 0);
    assert_false(fq_owner_fresh(o, 0, t + 1));
    /* the take's own answer: refused, another replica took it first */
    fq_owner_on_write(o, take.slot, take.req, t + 2, FQ_EEXIST, 0);
    a = next_of(o, 0, FQ_OWNER_GAINED);
    assert_int_equal(a.kind, 0);
    assert_false(fq_owner_fresh(o, 0, t + 2));
    fq_owner_destroy(o);
}

static void sim_one(uint64_t seed, uint32_t parts, uint32_t bound)
{
    sw_world w;
    sw_init(&w, seed, parts);
    w.bound = bound;
    sw_join(&w);
    sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    uint64_t end = w.now + (bound ? 50000 : 90000), next = w.now + 5000;
    while (w.now < end) {
        sw_step(&w);
        if (w.now >= next) {
            if (w.now >= w.last_event + (bound ? SW_BOUND_SETTLE : 15000))
                sw_check_balance(&w);
            sw_disturb(&w, true);
            if (sw_running(&w) == 0)
                sw_join(&w);
            w.last_event = w.now;
            next = w.now + sw_between(&w, 1000, 16000);
        }
    }
    while (sw_running(&w) < 2)
        sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, bound ? SW_BOUND_SETTLE : 20000);
    sw_check_balance(&w);
    sw_free(&w);
}

/* Whether every partition is held fresh by a running replica. */
static bool sw_all_owned(sw_world *w)
{
    uint32_t n = 0;
    for (int r = 0; r < SW_REPS; r++)
        n += sw_owned(w, r);
    return n == w->parts;
}

/* A rolling restart, as an operator does it and it_cluster_replicas
 * does: n replicas under ids of their own, each in turn stopped
 * (SIGTERM), started again under the same id (a new instance) after a gap
 * of up to 2 s, and the next one restarted once every partition is owned
 * again (not once the shares are even), replicas running late now and
 * then meanwhile; then 15 s of quiet, and the shares are even within
 * one. The seeded simulation restarts none under its old id. */
static void roll_one(uint64_t seed, uint32_t parts, int n)
{
    sw_world w;
    sw_init(&w, seed, parts);
    char ids[SW_REPS][32];
    for (int r = 0; r < n; r++) {
        snprintf(ids[r], sizeof ids[r], "rep-%c", 'a' + r);
        sw_start(&w, r, ids[r]);
    }
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    for (int round = 0; round < 2; round++)
        for (int r = 0; r < n; r++) {
            sw_run(&w, sw_between(&w, 100, 3000));
            fq_owner_stop(w.rep[r].o, sw_local(&w, r));
            w.rep[r].state = R_STOPPING;
            w.rep[r].stop_deadline = w.now + 2000;
            w.disturbed_until = w.now + 3 * TTL;
            sw_drain(&w, r);
            while (w.rep[r].state != R_OFF)
                sw_step(&w);
            sw_run(&w, sw_between(&w, 0, 2000));
            sw_start(&w, r, ids[r]);
            uint64_t t0 = w.now;
            while (!sw_all_owned(&w) && w.now < t0 + TTL + 10000) {
                sw_step(&w);
                /* a loaded host: now and then a replica runs late, for less
                 * than its leases' margin */
                int q = sw_rand(&w) % 500 ? -1 : sw_pick(&w, R_RUN);
                if (q >= 0) {
                    w.rep[q].state = R_FROZEN;
                    w.rep[q].frozen_until = w.now + sw_between(&w, 50, TTL / 3);
                }
            }
            if (!sw_all_owned(&w))
                fail_msg("seed %" PRIu64 ": not every partition owned %d ms after %s restarted",
                         seed, TTL + 10000, ids[r]);
        }
    sw_run(&w, 15000);
    sw_check_balance(&w);
    sw_free(&w);
}

static void test_rolling_restart(void **state)
{
    (void)state;
    const char *one = getenv("OWNER_SEED"), *many = getenv("OWNER_SEEDS");
    sw_trace = getenv("OWNER_TRACE") != NULL;
    uint64_t lo = one ? strtoull(one, NULL, 10) : 1;
    uint64_t hi = one ? lo : many ? strtoull(many, NULL, 10) : 24;
    for (uint64_t s = lo; s <= hi; s++)
        roll_one(s, s % 3 == 0 ? 5 : s % 3 == 1 ? 8 : 16, 3 + (int)(s % 2));
}

/* P by seed: uneven (5), even (8), larger (16); 1000 and up P = 1. */
static uint32_t sim_parts(uint64_t seed)
{
    return seed >= 1000 ? 1 : seed % 3 == 0 ? 5 : seed % 3 == 1 ? 8 : 16;
}

static void test_simulation(void **state)
{
    (void)state;
    const char *one = getenv("OWNER_SEED"), *many = getenv("OWNER_SEEDS");
    sw_trace = getenv("OWNER_TRACE") != NULL;
    if (one) {
        uint64_t s = strtoull(one, NULL, 10);
        sim_one(s, sim_parts(s), 0);
        return;
    }
    uint64_t n = many ? strtoull(many, NULL, 10) : 24;
    for (uint64_t s = 1; s <= n; s++) {
        sim_one(s, sim_parts(s), 0);
    }
    sim_one(1000, sim_parts(1000), 0);
    sim_one(1001, sim_parts(1001), 0);
}

/* The bound, in seeded worlds of P = 1,024 with two to five replicas
 * joining, dying, freezing, jumping their clocks, answered late: no
 * replica ever serves more than its bound (checked at every GAINED);
 * after a quiet while each holds min(its share, the bound) and all that
 * the running replicas may hold are owned (with a bound of 300, all of
 * them once four run); every replica reports the rest as assigned to
 * none; a dead replica's partitions are owned again within TTL + 1 s.
 * OWNER_BOUND_SEED=s runs seed s alone. */
static void test_bound_simulation(void **state)
{
    (void)state;
    const char *one = getenv("OWNER_BOUND_SEED");
    sw_trace = getenv("OWNER_TRACE") != NULL;
    uint64_t lo = one ? strtoull(one, NULL, 10) : 1, hi = one ? lo : 2;
    for (uint64_t s = lo; s <= hi; s++)
        sim_one(5000 + s, 1024, s % 2 ? 128 : 300);
}

/* P = 1,024, a bound of 128: two replicas hold 128 each and report 768
 * assigned to none; as replicas join, one at a time, each takes 128 of
 * those, up to four; one killed, its 128 go to none (the others are
 * full), and one joining in its place takes 128 again. (Every partition
 * owned once replicas suffice: test_bound_simulation, bound 300.) */
static void test_bound_fills(void **state)
{
    (void)state;
    sw_world w;
    sw_init(&w, 23, 1024);
    w.bound = 128;
    sw_join(&w);
    sw_join(&w);
    w.disturbed_until = w.now + 3 * TTL;
    sw_run(&w, 3 * TTL);
    sw_check_balance(&w);
    fq_owner_stats st;
    fq_owner_stats_get(&st, w.rep[0].o);
    assert_int_equal(st.owned, 128);
    assert_int_equal(st.unassigned, 768);
    assert_int_equal(st.bound, 128);
    for (int n = 3; n <= 4; n++) {
        sw_join(&w);
        sw_run(&w, SW_BOUND_SETTLE);
        sw_check_balance(&w);
        uint32_t total = 0;
        for (int r = 0; r < n; r++)
            total += sw_owned(&w, r);
        assert_int_equal(total, 128 * (uint32_t)n);
    }
    fq_owner_stats_get(&st, w.rep[3].o);
    assert_int_equal(st.unassigned, 512);
    assert_int_equal(st.owned, 128);
    assert_true(w.bound_checked > 0);
    sw_kill(&w, 1);
    sw_run(&w, 2 * TTL);
    for (int r = 0; r < 4; r++)
        if (r != 1) {
            assert_int_equal(sw_owned(&w, r), 128);
            fq_owner_stats_get(&st, w.rep[r].o);
            assert_int_equal(st.unassigned, 640);
        }
    sw_join(&w);
    sw_run(&w, SW_BOUND_SETTLE);
    sw_check_balance(&w);
    fq_owner_stats_get(&st, w.rep[1].o);
    assert_int_equal(st.owned, 128);
    assert_int_equal(st.unassigned, 512);
    sw_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_valid),
        cmocka_unit_test(test_holder_invalid_value),
        cmocka_unit_test(test_foreign_keys_counted),
        cmocka_unit_test(test_p1_is_the_leader_key),
        cmocka_unit_test(test_p1_lost_for_good),
        cmocka_unit_test(test_three_share_eight),
        cmocka_unit_test(test_join_moves_one_at_a_time),
        cmocka_unit_test(test_death_takeover),
        cmocka_unit_test(test_death_takeover_expiry_late),
        cmocka_unit_test(test_stop_releases),
        cmocka_unit_test(test_freeze_past_ttl),
        cmocka_unit_test(test_late_answer_after_lost),
        cmocka_unit_test(test_old_lease_answer_after_standing_by_again),
        cmocka_unit_test(test_fenced_released),
        cmocka_unit_test(test_duplicate_id),
        cmocka_unit_test(test_unanswered_key_costs_the_others_nothing),
        cmocka_unit_test(test_fence_per_partition),
        cmocka_unit_test(test_p1_duplicate_id),
        cmocka_unit_test(test_simulation),
        cmocka_unit_test(test_rolling_restart),
        cmocka_unit_test(test_bound_fills),
        cmocka_unit_test(test_bound_simulation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
