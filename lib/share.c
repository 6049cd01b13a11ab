/* share.c -- one fairness across replicas: each replica's share of the global in-flight window, from heartbeats.
 *
 * Principles:
 *  - No I/O and no clock: the caller hands in the beats it heard and the
 *    time, and publishes the beat computed here (lib/proxy over lib/natsio;
 *    the simulator in virtual time).
 *  - The same arithmetic in every replica over the same beats, so shares
 *    add up to the window; where the beats differ (one period of lag), the
 *    room rule and the reserve bound what that costs (docs/scaling.md).
 *  - A replica's share follows the weight of its backlogged tenants, the
 *    within-replica DRR then splits it by weight: a tenant gets what one
 *    proxy would give it, whichever replica owns it. Shares are capped at
 *    what a replica can use (held + queued), so a replica with one queued
 *    run does not hold half the window idle.
 *  - Losing heartbeats never widens a window: a silent peer keeps its last
 *    beat until forgotten, a replica that does not hear itself keeps its
 *    last limits (or an equal split), and a starting one takes the reserve.
 *  - A change of backlogged weight is told early (fq_share_due), rate-limited
 *    to one beat per min_gap, and a beat heard is taken in at once: a
 *    replica's first tenant does not wait periods for the others to learn
 *    of it and give way (docs/scaling.md).
 *  - Memory is allocated at create only (peers and scratch for max_peers).
 */
#include "share.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"

#define NEVER UINT64_MAX

typedef struct peer {
    fq_strmap_node node;        /* in peers, keyed by b.id */
    fq_share_beat b;            /* its last beat */
    uint64_t heard;             /* when */
    uint32_t next_free;         /* free list, by index; UINT32_MAX: end */
    bool used;
} peer;

/* One replica in a split, with what it holds and wants in one dimension. */
typedef struct ent {
    const char *id;
    uint64_t w;                 /* backlogged weight */
    uint64_t held;              /* in flight */
    uint64_t borrowed;          /* of held, on the reserve */
    uint64_t demand;            /* held + queued */
    double x;                   /* its share, fractional */
    double key;                 /* sort key */
    uint64_t alloc;             /* its share, whole */
    bool me;
} ent;

struct fq_share {
    fq_share_opts o;            /* with defaults filled in */
    char id[FQ_SHARE_ID_MAX + 1];
    peer *peers;                /* max_peers slots */
    uint32_t free_head;         /* first free slot; UINT32_MAX: none */
    fq_strmap *map;             /* id -> peer */
    ent *ents;                  /* scratch: max_peers + 1 */
    uint64_t created;           /* time of create */
    uint64_t self_heard;        /* last time its own beat came back; NEVER */
    uint64_t beat_at;           /* last time a beat was made (ticked with
                                   one); NEVER */
    uint64_t beat_weight;       /* ... the weight it said */
    fq_share_stats st;
};

/* A replica id travels in a heartbeat's JSON and in logs: 1 to
 * FQ_SHARE_ID_MAX bytes of printable ASCII without spaces, the rule of
 * lib/msg's fq_msg_name_valid, which the codec applies to heard ids (the
 * core does not link the JSON adapter). */
static bool id_valid(const char *id, size_t len)
{
    if (!len || len > FQ_SHARE_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)id[i] < 0x21 || (unsigned char)id[i] > 0x7e)
            return false;
    return true;
}

fq_status fq_share_create(fq_share **out, const fq_share_opts *o, const char *id,
                          uint64_t now)
{
    *out = NULL;
    size_t len = strlen(id);
    if (!o->period || !id_valid(id, len))
        return FQ_EINVAL;
    fq_share *s = calloc(1, sizeof(*s));
    if (!s)
        return FQ_ENOMEM;
    s->o = *o;
    if (!s->o.max_age)
        s->o.max_age = 3 * o->period;
    if (!s->o.forget)
        s->o.forget = 50 * o->period;
    if (!s->o.max_peers)
        s->o.max_peers = 1024;
    if (!s->o.min_gap)
        s->o.min_gap = o->period / 4 ? o->period / 4 : 1;
    memcpy(s->id, id, len + 1);
    s->created = now;
    s->self_heard = NEVER;
    s->beat_at = NEVER;
    s->peers = calloc(s->o.max_peers, sizeof(*s->peers));
    s->ents = calloc((size_t)s->o.max_peers + 1, sizeof(*s->ents));
    if (!s->peers || !s->ents ||
        fq_strmap_create(&s->map, FQ_STRMAP_KEY_OFFSET(peer, node, b.id), s->o.max_peers,
                         0) != FQ_OK) {
        fq_share_destroy(s);
        return FQ_ENOMEM;
    }
    for (uint32_t i = 0; i < s->o.max_peers; i++)
        s->peers[i].next_free = i + 1 < s->o.max_peers ? i + 1 : UINT32_MAX;
    s->free_head = 0;
    *out = s;
    return FQ_OK;
}

void fq_share_destroy(fq_share *s)
{
    if (!s)
        return;
    fq_strmap_destroy(s->map, NULL);
    free(s->peers);
    free(s->ents);
    free(s);
}

void fq_share_set_window(fq_share *s, uint32_t max_runs, uint64_t max_tokens,
                         uint32_t reserve_runs, uint64_t reserve_tokens)
{
    s->o.max_runs = max_runs;
    s->o.max_tokens = max_tokens;
    s->o.reserve_runs = reserve_runs;
    s->o.reserve_tokens = reserve_tokens;
}

fq_status fq_share_heard(fq_share *s, const fq_share_beat *b, uint64_t now)
{
    size_t len = strnlen(b->id, sizeof b->id);
    if (len == strlen(s->id) && memcmp(b->id, s->id, len) == 0) {
        s->self_heard = now;
        s->st.beats++;
        return FQ_OK;
    }
    fq_strmap_node *n = fq_strmap_find(s->map, b->id, len);
    peer *p;
    if (n) {
        p = FQ_STRMAP_ENTRY(n, peer, node);
    } else {
        if (s->free_head == UINT32_MAX) {
            s->st.refused++;
            return FQ_EFULL;
        }
        p = &s->peers[s->free_head];
        s->free_head = p->next_free;
        p->used = true;
        memcpy(p->b.id, b->id, len + 1);
        fq_strmap_insert(s->map, &p->node, len);    /* never grows: sized at create */
        s->st.peers++;
    }
    char keep[FQ_SHARE_ID_MAX + 1];
    memcpy(keep, p->b.id, sizeof keep);
    p->b = *b;
    memcpy(p->b.id, keep, sizeof keep);     /* the key stays as linked */
    p->heard = now;
    s->st.beats++;
    return FQ_OK;
}

static void forget(fq_share *s, peer *p)
{
    fq_strmap_remove(s->map, &p->node);
    p->used = false;
    p->next_free = s->free_head;
    s->free_head = (uint32_t)(p - s->peers);
    s->st.peers--;
    s->st.forgotten++;
}

static int by_level(const void *a, const void *b)
{
    const ent *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Largest fraction first, then by id: every replica breaks ties alike. */
static int by_fraction(const void *a, const void *b)
{
    const ent *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const ent *)a)->id, ((const ent *)b)->id);
}

/* Whole shares of the backlogged e[0..nb), whose fractional shares add up
 * to rest: systematic rounding, by id, at an offset that moves each round
 * (the golden ratio's multiples, spread evenly) and is the same in every
 * replica that round. Each share is its fraction rounded down or up, up
 * with the probability of its fraction over the rounds, and they add up to
 * rest at every round. */
static void split_round(ent *e, size_t nb, uint64_t rest, uint64_t round)
{
    qsort(e, nb, sizeof(*e), by_id);
    double theta = fmod((double)(round % 1000003) * 0.6180339887498949, 1.0);
    double c = theta;
    uint64_t sum = 0;
    for (size_t i = 0; i < nb; i++) {
        double lo = floor(c + 1e-9);
        c += e[i].x;
        double hi = floor(c + 1e-9);
        uint64_t a = hi > lo ? (uint64_t)(hi - lo) : 0;
        e[i].alloc = sum + a <= rest ? a : rest - sum;
        sum += e[i].alloc;
    }
}

/* Split a window of g among e[0..n) (docs in share.h); returns the share of
 * the entry marked me. */
static uint64_t split(ent *e, size_t n, uint64_t g, uint64_t round)
{
    uint64_t fixed = 0, wsum = 0;
    size_t nb = 0;
    /* idle replicas keep what they hold; the backlogged go first in the
     * array, by demand per weight */
    for (size_t i = 0; i < n; i++) {
        if (!e[i].w) {
            e[i].alloc = e[i].held;
            fixed += e[i].held;
            e[i].key = INFINITY;
        } else {
            wsum += e[i].w;
            e[i].key = (double)e[i].demand / (double)e[i].w;
            nb++;
        }
    }
    qsort(e, n, sizeof(*e), by_level);
    uint64_t rest = g > fixed ? g - fixed : 0;
    double left = (double)rest, wl = (double)wsum;
    size_t k = 0;
    for (; k < nb; k++) {       /* water-fill: the smallest demands first */
        double lvl = left / wl;
        if ((double)e[k].demand > lvl * (double)e[k].w)
            break;
        e[k].x = (double)e[k].demand;
        left -= e[k].x;
        wl -= (double)e[k].w;
    }
    for (size_t i = k; i < nb; i++)
        e[i].x = left * (double)e[i].w / wl;
    if (k == nb && nb) {        /* all satisfied: what is left, by weight */
        for (size_t i = 0; i < nb; i++)
            e[i].x += left * (double)e[i].w / (double)wsum;
    }
    uint64_t sum = 0;
    if (nb && round) {
        split_round(e, nb, rest, round);
        nb = 0;     /* done */
    }
    for (size_t i = 0; i < nb; i++) {
        double f = floor(e[i].x + 1e-9);
        e[i].alloc = f < (double)rest ? (uint64_t)f : rest;
        e[i].key = e[i].x - f;
        sum += e[i].alloc;
    }
    if (nb && sum < rest) {
        qsort(e, nb, sizeof(*e), by_fraction);
        for (size_t i = 0; i < nb && sum < rest; i++, sum++)
            e[i].alloc++;
    }
    for (size_t i = 0; i < n; i++)
        if (e[i].me)
            return e[i].alloc;
    return 0;
}

/* One dimension: the limit and what of the reserve this replica holds. */
static uint64_t dimension(fq_share *s, size_t n, uint64_t g, uint64_t reserve, bool idle,
                          uint64_t round, uint64_t *share, uint64_t *borrowed)
{
    ent *e = s->ents;
    uint64_t others_in = 0, others_borrowed = 0, held = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].me) {
            held = e[i].held;
            continue;
        }
        /* What a peer says it holds on the reserve is believed up to the
         * reserve: a beat saying more (a peer configured with a larger
         * reserve, or a bad beat) would widen the room past the window. */
        uint64_t b = e[i].borrowed < e[i].held ? e[i].borrowed : e[i].held;
        b = b < reserve ? b : reserve;
        others_in += e[i].held - b;
        others_borrowed += b;
    }
    *share = split(e, n, g, round);
    uint64_t room = g > others_in ? g - others_in : 0;
    uint64_t free_res = reserve > others_borrowed ? reserve - others_borrowed : 0;
    uint64_t over = held > room ? held - room : 0;
    *borrowed = over < free_res ? over : free_res;
    if (idle)   /* what it holds, and what arrives before its next tick from the reserve */
        return (held < room ? held : room) + free_res;
    return *share < room + free_res ? *share : room + free_res;
}

/* Fill the scratch entries for the runs (tokens false) or tokens. */
static size_t entries(fq_share *s, const fq_share_local *me, bool tokens)
{
    ent *e = s->ents;
    size_t n = 0;
    e[n++] = (ent){.id = s->id, .w = me->weight, .me = true,
                   .held = tokens ? me->tokens : me->runs,
                   .demand = tokens ? me->tokens + me->queued_tokens
                                    : me->runs + me->queued_runs};
    for (uint32_t i = 0; i < s->o.max_peers; i++) {
        const peer *p = &s->peers[i];
        if (!p->used)
            continue;
        const fq_share_beat *b = &p->b;
        e[n++] = (ent){.id = b->id, .w = b->weight,
                       .held = tokens ? b->tokens : b->runs,
                       .borrowed = tokens ? b->borrowed_tokens : b->borrowed_runs,
                       .demand = tokens ? b->tokens + b->queued_tokens
                                        : b->runs + b->queued_runs};
    }
    return n;
}

/* Count the peers heard within max_age, forgetting those silent past
 * forget (only while we hear ourselves: deaf, we cannot tell who is gone). */
static void share_count_live(fq_share *s, bool heard, uint64_t now)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < s->o.max_peers; i++) {
        peer *p = &s->peers[i];
        if (!p->used)
            continue;
        uint64_t age = now > p->heard ? now - p->heard : 0;
        if (heard && age > s->o.forget)
            forget(s, p);
        else if (age <= s->o.max_age)
            live++;
    }
    s->st.live = live;
}

/* l bounded by what this replica knows: alone and hearing itself, the
 * whole window; starting, the reserve; cut off, an equal split at most.
 * *br, *bt (borrowed) are zeroed when alone. */
static void share_bound(fq_share_limits *l, uint64_t *br, uint64_t *bt, const fq_share *s,
                        bool heard, bool starting)
{
    if (!starting && heard && !s->st.peers) {
        /* alone, and hearing itself: the whole window, as without shares */
        *l = (fq_share_limits){s->o.max_runs ? s->o.max_runs : FQ_SHARE_UNLIMITED,
                               s->o.max_tokens ? s->o.max_tokens : FQ_SHARE_UNLIMITED,
                               s->o.max_runs ? s->o.max_runs : FQ_SHARE_UNLIMITED,
                               s->o.max_tokens ? s->o.max_tokens : FQ_SHARE_UNLIMITED};
        *br = *bt = 0;
    } else if (starting) {
        /* it knows nothing of the others yet: the reserve, at least a run */
        uint64_t r = s->o.reserve_runs ? s->o.reserve_runs : 1;
        uint64_t t = s->o.reserve_tokens ? s->o.reserve_tokens : 1;
        l->runs = l->runs < r ? l->runs : r;
        l->tokens = l->tokens < t ? l->tokens : t;
    } else if (!heard) {
        /* cut off: the others may be taking their shares as they last
         * said, or more; it takes an equal split at most */
        uint64_t n = (uint64_t)s->st.peers + 1;
        if (s->o.max_runs && l->runs > s->o.max_runs / n)
            l->runs = s->o.max_runs / n;
        if (s->o.max_tokens && l->tokens > s->o.max_tokens / n)
            l->tokens = s->o.max_tokens / n;
    }
}

void fq_share_tick(fq_share_limits *out, fq_share_beat *beat, fq_share *s,
                   const fq_share_local *me, uint64_t now)
{
    bool heard = s->self_heard != NEVER && now - s->self_heard <= s->o.max_age;
    bool starting = s->self_heard == NEVER || now < s->created + s->o.max_age;
    share_count_live(s, heard, now);
    s->st.deaf = !heard || starting;

    fq_share_limits l = {FQ_SHARE_UNLIMITED, FQ_SHARE_UNLIMITED, FQ_SHARE_UNLIMITED,
                         FQ_SHARE_UNLIMITED};
    uint64_t br = 0, bt = 0;
    if (s->o.max_runs) {
        size_t n = entries(s, me, false);
        l.runs = dimension(s, n, s->o.max_runs, s->o.reserve_runs, !me->weight, me->round,
                           &l.share_runs, &br);

    }
    if (s->o.max_tokens) {
        size_t n = entries(s, me, true);
        l.tokens = dimension(s, n, s->o.max_tokens, s->o.reserve_tokens, !me->weight,
                             me->round, &l.share_tokens, &bt);

    }
    share_bound(&l, &br, &bt, s, heard, starting);
    if (out)
        *out = l;
    if (beat) {
        *beat = (fq_share_beat){.weight = me->weight, .queued_runs = me->queued_runs,
                                .queued_tokens = me->queued_tokens, .runs = me->runs,
                                .tokens = me->tokens, .borrowed_runs = (uint32_t)br,
                                .borrowed_tokens = bt};
        memcpy(beat->id, s->id, sizeof beat->id);
        s->beat_at = now;
        s->beat_weight = me->weight;
    }
}

bool fq_share_due(const fq_share *s, uint64_t weight, uint64_t now)
{
    if (s->beat_at == NEVER)
        return true;
    uint64_t since = now > s->beat_at ? now - s->beat_at : 0;
    return since >= s->o.period || (weight != s->beat_weight && since >= s->o.min_gap);
}

void fq_share_stats_get(fq_share_stats *out, const fq_share *s)
{
    *out = s->st;
}
