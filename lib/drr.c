/* drr.c -- token-metered deficit round robin over per-tenant virtual queues.
 *
 * Principles:
 *  - Cost is metered in estimated tokens, never in requests: a tenant's
 *    signed deficit is charged each run's estimate, and corrected by the
 *    actual spend when the run completes (reconciliation).
 *  - Dequeue follows sch_fq_codel: the tenant at the head of the active list
 *    sends while its deficit is positive, then is granted its quantum
 *    (base quantum x plan weight) and moves to the tail. A run may cost more
 *    than a quantum; the overdraft is debt, repaid in later rounds.
 *  - Rounds are numbered. Every tenant on the active list carries the round
 *    in which it is served, and the list is ordered by it. A tenant whose
 *    debt needs k > 1 quanta to turn positive does not take k - 1 empty
 *    visits: it waits outside the rotation, keyed by the round in which it
 *    turns positive, and is granted those k quanta in one step when that
 *    round begins. When only debtors remain, the rounds that would only add
 *    quanta are skipped by jumping to the earliest such round.
 *  - A debtor whose round is less than FQ_WHEEL_SLOTS rounds ahead waits in
 *    a timing wheel with one slot per round, so filing, moving and waking it
 *    are O(1); that covers every debt a single run can make when
 *    max_est_tokens is at most about a thousand quanta (the default config).
 *    A debt beyond that horizon (a huge overrun found by reconciliation)
 *    waits in a heap, O(log n). Where a debtor waits does not show: it is
 *    served in the same round either way. Debtors woken from the wheel for
 *    one round join it in the order they began waiting there. So dispatch is
 *    O(1) list visits plus O(1) wheel work per run, whatever the number of
 *    tenants, the ratio of run cost to quantum, and however the debts are
 *    staggered.
 *  - Deficit is smoothing, not a savings account: when a tenant's queue goes
 *    empty its positive credit is dropped. Its debt is kept, so going idle
 *    between runs does not escape reconciliation; likewise a refund to an
 *    idle tenant lifts its deficit at most to zero. (This refines the design
 *    card's "reset the deficit when a queue goes empty" on purpose.)
 *  - A tenant at its max_in_flight leaves the rotation without being granted
 *    anything, and rejoins when a completion frees a slot. A burstable cap
 *    (burst_in_flight above max_in_flight) lets a tenant run up to its
 *    burst while no other tenant has queued runs; once one has, the tenant
 *    leaves the rotation at its next visit if it holds max_in_flight or
 *    more, and gives slots back only as its runs complete (nothing is
 *    preempted or reserved). The count of tenants with queued runs, kept
 *    anyway, decides it in O(1); the capped are listed so that the one left
 *    when the others' queues empty is found in O(1) too.
 *  - Priority classes (nclasses > 1) and sub-tenants (max_subtenants)
 *    order runs within a tenant only, classes first: a tenant's runs are
 *    kept in lanes, one per sub-tenant and class; its next run is of its
 *    highest class with queued runs (strict) or of the class whose turn it
 *    is by DRR at class weights (weighted, per tenant policy), and within
 *    the class of the sub-tenant at the head of the class's DRR in tokens
 *    (fq_codel's new and old lists: one that starts queuing goes first,
 *    unless it was served in the round under way). Both levels grant
 *    quanta of the largest estimate queued since the lanes were last
 *    empty, so one grant clears any debt a run leaves: O(1) per
 *    enqueue and dispatch, no empty visits. A sub-tenant is found in a
 *    per-tenant index of at most max_subtenants. The tenant's deficit,
 *    quantum and caps are untouched: its high-class runs and its users
 *    spend its own share, never its neighbours'.
 *  - Runs come from a pool grown in chunks, so the hot path does not call
 *    malloc per run once the pool has grown to the working set; or, with
 *    caller_runs, they are records the caller embeds in its own record of
 *    a run (the ledger's), handed over as each is taken in, so that a run
 *    is one record, not the caller's and the scheduler's side by side.
 *  - A tenant whose dispatch failed is parked: out of the rotation until a
 *    time the caller gives, its queue whole and in order, its deficit kept,
 *    so that what stops one tenant's run never stops the others. Parking is
 *    timed by the clock, not by rounds: the failures it waits out (a full
 *    store, a server restarting) pass with time, and rounds go by as fast as
 *    the other tenants are served, or at once when none is (dispatch skips
 *    the empty rounds), which would retry a failing run in a tight loop. The
 *    mark is checked when the tenant reaches the head of the list, so
 *    parking is O(1) wherever the tenant is; the parked wait in a heap by
 *    time, O(log n), and rejoin behind the tenants in the rotation.
 *  - A token rate (tokens_per_minute) is a guardrail, not the fairness: a
 *    GCRA per tenant, its theoretical arrival time (TAT) advanced by each
 *    charge at the rate and corrected by reconciliation, with a minute's
 *    tokens of burst. A tenant whose TAT is more than a minute ahead of now
 *    is parked (the same heap by time as fq_sched_park) until it is not:
 *    checked after each of its dispatches and when it reaches the head of
 *    the list, so it costs no visits while it waits.
 *  - The stats ranking (tenants with queued runs by queued tokens, then
 *    their oldest run, then id; the idle after them in creation order) is
 *    an order-statistic tree (lib/rank), so a page at any offset costs
 *    O(log n) plus its rows. Dispatch does not pay for it: a change to a
 *    tenant's queue only marks the tenant, O(1), and fq_sched_rank_sync
 *    puts each marked tenant back in place once, O(log n), however many
 *    of its runs came and went: when a page asks, or when the caller's
 *    turn ends with more marked than a page should wait for.
 */
#include "drr.h"

#include <stdlib.h>
#include <string.h>

#include "rank.h"
#include "strmap.h"
#include "window.h"

#define FQ_POOL_CHUNK 1024
#define FQ_TENANT_MIN_BUCKETS 64
/* Rounds the wheel reaches ahead of the current one; a power of two, above
 * the default config's max_est_tokens / quantum (1,000). */
#define FQ_WHEEL_SLOTS 1024u
#define FQ_WHEEL_WORDS (FQ_WHEEL_SLOTS / 64)

struct fq_tenant {
    fq_tenant *next;            /* ACTIVE: active list; WAITING in the wheel: its slot;
                                   CAPPED: the capped list */
    fq_tenant *prev;            /* WAITING in the wheel: its slot; CAPPED: the capped list */
    fq_run *qhead, *qtail;      /* FIFO of queued runs */
    struct fq_lane *hl;         /* with lanes: the one its next run is from
                                   (NULL: they are empty); its run is read
                                   only when dispatch comes to it, loaded
                                   ahead (prefetch_ahead), so that choosing
                                   the next lane reads no other sub-tenant */
    struct tenant_lanes *x;     /* with classes or sub-tenants: in the same
                                   allocation, after the tenant; NULL without.
                                   The FIFO then holds only runs back from the
                                   window; the rest are in x's lanes */
    int64_t deficit;            /* tokens it may still send; < 0 is debt */
    uint64_t round;             /* ACTIVE: round it is served in;
                                   WAITING: round one quantum would have served it */
    uint32_t wait_at;           /* WAITING: wheel slot, or FQ_WHEEL_SLOTS + heap index */
    uint32_t state;             /* enum fq_tenant_state */
    fq_tenant_policy pol;       /* weight and limits in force */
    uint32_t queued;            /* runs in the FIFO */
    uint32_t in_flight;         /* runs holding a window slot */
    uint32_t expired_held;      /* runs expired and still remembered */
    uint32_t hc;                /* with lanes: hl's class, so that its
                                   sub-tenant is found from it (sub_of_lane) */
    uint64_t queued_tokens;     /* sum of queued estimates */
    uint64_t dispatched;        /* counters for stats */
    uint64_t charged;
    uint64_t actual;
    uint64_t priced;
    uint64_t expired;
    uint64_t park_until;        /* not served before this time (the caller's unit) */
    int64_t rate_at;            /* token rate (GCRA): the time from which it may
                                   send again, its theoretical arrival time
                                   less a minute of burst, in 1/FQ_RATE_SCALE
                                   of the caller's unit */
    uint32_t requeued;          /* runs at the head of the FIFO back from the window */
    fq_run *rq_last;            /* the last of them, in dispatch order */
    fq_tenant *rk_next;         /* on the list of tenants to rank again (beside
                                   park_until, in a line dispatch reads anyway) */
    fq_tenant **rk_pprev;       /* what points to it there; NULL: not on it */
    uint64_t seq;               /* creation order among the scheduler's tenants */
    fq_rank_node rank;          /* in the stats ranking once synced (size 0: not in it) */
    uint64_t rk_tokens;         /* the key it is ranked by: queued tokens then (0: idle,
                                   as every queued run is charged at least 1) */
    uint64_t rk_oldest;         /* ... and its head run's enqueue time then */
    fq_strmap_node node;        /* in the tenant table, keyed by id */
    char id[FQ_TENANT_MAX + 1];
};

/* A link within a tenant's lanes, half a pointer, so that a lane is 32
 * bytes and a tenant's lanes, lists and index of sub-tenants sit on fewer
 * lines than with pointers (with mixed costs every knob on touched 14.6
 * lines an operation, docs/policy.md). Below FQ_LINK_FAR: the distance in
 * 8-byte words from its lanes' state (struct tenant_lanes) to a lane or
 * sub-tenant, 0: none (the state itself is neither). A sub-tenant allocated
 * apart that lies further away (sub_reach: an allocator may keep each size
 * of allocation far from the others) is linked through its tenant's table
 * of far ones: FQ_LINK_FAR + its slot there * 4 + the lane's class. */
typedef int32_t fq_link;
#define FQ_LINK_FAR 0x40000000
_Static_assert(FQ_SCHED_MAX_CLASSES <= 4, "a far link keeps the class in 2 bits");

/* One sub-tenant's runs of one class, and its place in its class's DRR
 * over the tenant's active sub-tenants (fq_codel's two lists: a lane that
 * starts queuing goes on the new list, served before the old one, and
 * moves to the old list's tail once it has spent its quantum). */
typedef struct fq_lane {
    fq_run *qhead, *qtail;      /* its FIFO; empty: on no list. Which list
                                   it is on shows from its class's heads: the
                                   one served is at one of them */
    int64_t deficit;            /* tokens it may still send in its turn */
    fq_link next;               /* on its class's new or old list (lane_at) */
    uint32_t round;             /* on the old list: the class's round it is
                                   served in; idle: 1 + the round it was
                                   last served in (0: never), so that one
                                   coming back in that round owes its turn;
                                   the low 32 bits (class_round) */
} fq_lane;

/* A sub-tenant: a lane per class, then its name (sub_name), so that
 * with one class what enqueue and dispatch read of it is 48 bytes (its
 * hash is in its tenant's index). */
typedef struct fq_sub {
    uint32_t queued;            /* runs over its lanes */
    uint8_t len;                /* bytes of its name */
    uint8_t named;              /* 1: in the index (not the default nor the overflow) */
    uint8_t inl;                /* 1 + its slot in its tenant's allocation; 0: apart */
    uint8_t far;                /* 1: apart and out of a near link's reach: in its
                                   tenant's table of far ones (slot after its name) */
    uint64_t head;              /* its name's first 8 bytes, zero padded: most
                                   names are compared without another line */
    fq_lane lane[];             /* one per class (one without classes); forgotten,
                                   lane[0].qhead links the free list */
} fq_sub;

/* A class of a tenant: its active lanes and its turn among the classes. */
struct class_ring {
    fq_link newh, newt;         /* lanes that started queuing, not yet served a quantum */
    fq_link oldh, oldt;         /* the rest of the active ones, by round */
    uint64_t round;             /* the round being served on the old list */
    int64_t deficit;            /* weighted classes: what it may still send in its turn */
    uint32_t queued;            /* runs of this class queued, those back from
                                   the window included (class_max_pending) */
    uint32_t lanes;             /* lanes on its lists */
};

/* Slots of a tenant's index kept with the tenant: up to 4 named sub-tenants
 * are found without reading another allocation. */
#define FQ_SUB_SMALL 8u
/* Sub-tenants kept in their tenant's allocation, after its default one:
 * the first few whose names are at most 8 bytes (all in head, so no name
 * is kept with them), so that the enqueue that names one finds it near
 * the tenant's lines, not on a line of its own elsewhere (with mixed
 * costs every knob on took 0.65 to 0.80 of the time, docs/policy.md). */
#define FQ_SUB_INLINE 4u

/* A slot of a tenant's index of sub-tenants: the hash beside the pointer,
 * so that probing past others reads no sub-tenant. */
struct sub_slot {
    uint32_t hash;
    fq_link u;                  /* sub_at; 0: free */
};

/* A tenant's classes and sub-tenants. */
struct tenant_lanes {
    uint64_t hwm;               /* the largest estimate queued in a lane since
                                   they were last all empty: the quantum of
                                   both levels, so one grant clears any debt
                                   and no visit is empty */
    uint32_t mask;              /* classes with active lanes */
    uint32_t cur;               /* weighted classes: the class whose turn it is */
    uint32_t nrings;            /* classes (1 without) */
    uint32_t known;             /* named and overflow sub-tenants remembered */
    uint32_t active;            /* sub-tenants with runs in their lanes, the
                                   default one (the runs naming none) included */
    uint32_t idle;              /* known ones with none */
    uint32_t inl_free;          /* bit i: slot i of the FQ_SUB_INLINE in the
                                   allocation is free */
    uint32_t index_cap;         /* slots of index, a power of two, at most half full */
    struct sub_slot *index;     /* the named ones, open addressing by hash: small
                                   up to FQ_SUB_SMALL slots, then on the heap */
    uint64_t scanned;           /* the sum of the rings' rounds when a search for
                                   an idle one to forget last found none */
    fq_sub *overflow;           /* where new ones past max_subtenants go; NULL: none now */
    fq_sub *dflt;               /* the runs that name no sub-tenant (every run
                                   without sub-tenants), after the rings; the
                                   FQ_SUB_INLINE slots after it */
    fq_sub **far;               /* sub-tenants out of a near link's reach, by slot;
                                   a free slot holds 1 + 2 * the next free's */
    uint32_t far_n;             /* slots used or freed */
    uint32_t far_free;          /* 1 + the first free slot; 0: none */
    size_t far_cap;             /* slots allocated */
    struct sub_slot small[FQ_SUB_SMALL]; /* the index of the first few, with
                                   the lanes' state that dispatch loads
                                   ahead, so that a tenant's enqueue after its
                                   dispatch finds it in cache */
    struct class_ring ring[];   /* one per class (one without classes) */
};

/* The lane or sub-tenant of x that link o names (fq_link). */
static inline fq_lane *lane_at(const struct tenant_lanes *x, fq_link o)
{
    if (o >= FQ_LINK_FAR)
        return &x->far[(uint32_t)(o - FQ_LINK_FAR) >> 2]->lane[o & 3];
    return o ? (fq_lane *)(void *)((char *)(uintptr_t)x + (ptrdiff_t)o * 8) : NULL;
}

static inline fq_sub *sub_at(const struct tenant_lanes *x, fq_link o)
{
    if (o >= FQ_LINK_FAR)
        return x->far[(uint32_t)(o - FQ_LINK_FAR) >> 2];
    return o ? (fq_sub *)(void *)((char *)(uintptr_t)x + (ptrdiff_t)o * 8) : NULL;
}

/* Where an apart sub-tenant keeps its slot in its tenant's table of far
 * ones: after its name (sub_size). */
static uint32_t *sub_far_slot(const struct tenant_lanes *x, fq_sub *u)
{
    return (uint32_t *)(void *)((char *)&u->lane[x->nrings] + FQ_SCHED_SUB_MAX);
}

/* The link to u's lane of class c, and to u itself (fq_link). */
static inline fq_link lane_link(const struct tenant_lanes *x, fq_sub *u, uint32_t c)
{
    if (u->far)
        return (fq_link)(FQ_LINK_FAR + (*sub_far_slot(x, u) << 2) + c);
    return (fq_link)(((const char *)&u->lane[c] - (const char *)x) / 8);
}

static fq_link sub_link(const struct tenant_lanes *x, fq_sub *u)
{
    return u->far ? (fq_link)(FQ_LINK_FAR + (*sub_far_slot(x, u) << 2))
                  : (fq_link)(((const char *)u - (const char *)x) / 8);
}

/* Link u, apart, from x: a near link if its lanes and name are within
 * 4 GiB of x, else a slot in x's table of far ones. FQ_ENOMEM: no room
 * for the slot. */
static fq_status sub_reach(struct tenant_lanes *x, fq_sub *u, size_t size)
{
    ptrdiff_t d = (const char *)u - (const char *)x;
    u->far = 0;
    if (d > -((ptrdiff_t)1 << 32) && d + (ptrdiff_t)size < ((ptrdiff_t)1 << 32))
        return FQ_OK;
    uint32_t slot;
    if (x->far_free) {
        slot = x->far_free - 1;
        x->far_free = (uint32_t)((uintptr_t)x->far[slot] >> 1);
    } else {
        if (x->far_n >= (1u << 27))
            return FQ_ENOMEM;
        if (fq_grow(&x->far, &x->far_cap, x->far_n + 1, sizeof(*x->far)) != FQ_OK)
            return FQ_ENOMEM;
        slot = x->far_n++;
    }
    x->far[slot] = u;
    *sub_far_slot(x, u) = slot;
    u->far = 1;
    return FQ_OK;
}

/* u, forgotten, leaves x's table of far ones. */
static void sub_unreach(struct tenant_lanes *x, fq_sub *u)
{
    if (!u->far)
        return;
    uint32_t slot = *sub_far_slot(x, u);
    x->far[slot] = (fq_sub *)(uintptr_t)(1 + 2 * (uintptr_t)x->far_free);
    x->far_free = slot + 1;
    u->far = 0;
}

/* The debtors that wake in one round, in filing order, linked by next and
 * prev. Both ends are kept so that filing touches only the last debtor. */
struct wheel_slot {
    fq_tenant *first, *last;
};

struct fq_sched {
    fq_sched_opts o;
    fq_tenant *head, *tail;     /* active list, ordered by round */
    fq_tenant *capped;          /* CAPPED tenants, linked by next and prev */
    uint64_t round;             /* the round being served */
    uint32_t nwheel;            /* debtors in the wheel */
    struct heap_ent *heap;      /* debtors beyond the wheel, earliest at [0] */
    uint32_t nheap, heap_cap;
    struct heap_ent *park;      /* parked tenants, by the time they may return; heap_cap */
    uint32_t npark;
    fq_strmap *tenants;         /* tenant table, by id */
    uint32_t nclasses;          /* classes of a tenant's lanes: 1 without classes */
    fq_sub *free_subs;          /* forgotten ones, kept for the next (by lane[0].qhead) */
    fq_window win;
    fq_run *free_runs;          /* pool free list */
    bool caller_runs;           /* runs are the caller's records: no pool */
    fq_run *given;              /* ... the one handed over for the next run taken in */
    void **chunks;              /* pool chunks, freed on destroy */
    size_t nchunks, chunks_cap;
    uint32_t active;            /* tenants with queued runs */
    uint64_t active_weight;     /* their weights summed */
    uint64_t queued, queued_tokens;
    uint64_t visits, dispatched, expired, wakeups;
    uint64_t lane_visits;       /* sub-tenants' lanes and index slots examined */
    uint64_t next_seq;          /* the next tenant's creation order */
    fq_rank rank;               /* every tenant synced, in the stats order (rank_cmp) */
    fq_tenant *rk_changed;      /* tenants whose rank key may have changed since */
    size_t nchanged;            /* ... how many */
    uint64_t wheel_bits[FQ_WHEEL_WORDS]; /* which wheel slots are non-empty */
    struct wheel_slot wheel[FQ_WHEEL_SLOTS]; /* debtors waking in round r, at r % slots */
};

/* ---- run pool ---------------------------------------------------------- */

static fq_run *run_alloc(fq_sched *s)
{
    if (s->caller_runs) {
        fq_run *r = s->given;
        s->given = NULL;
        return r;
    }
    if (!s->free_runs) {
        if (fq_grow(&s->chunks, &s->chunks_cap, s->nchunks + 1, sizeof(*s->chunks)) != FQ_OK)
            return NULL;
        fq_run *chunk = calloc(FQ_POOL_CHUNK, sizeof(*chunk));
        if (!chunk)
            return NULL;
        s->chunks[s->nchunks++] = chunk;
        for (size_t i = 0; i < FQ_POOL_CHUNK; i++) {
            chunk[i].next = s->free_runs;
            s->free_runs = &chunk[i];
        }
    }
    fq_run *r = s->free_runs;
    s->free_runs = r->next;
    return r;
}

static void run_free(fq_sched *s, fq_run *r)
{
    if (s->caller_runs)
        return;                 /* the caller's record: it reuses it */
    r->state = FQ_RUN_FREE;
    r->handle = NULL;
    r->next = s->free_runs;
    s->free_runs = r;
}

/* ---- classes and sub-tenants: the lanes within a tenant ----------------
 *
 * A tenant's runs (but those back from the window, which lead its FIFO)
 * are kept in lanes, one per sub-tenant and class. Its next run is of the
 * highest class with queued runs (strict), or of the class whose turn it
 * is in DRR over its classes by class weight (weighted); within the class,
 * of the lane at the head of the class's new list, else of its old list:
 * DRR in tokens over the class's active sub-tenants, each granted the same
 * quantum per turn. Both quanta are the largest estimate queued since the
 * lanes were last empty (times the class weight), so one grant always
 * clears a turn's debt: O(1) per dispatch, no empty visits. */

/* The quantum of both levels within a tenant: the largest estimate queued
 * since its lanes were last empty, so that a turn is about one run of the
 * largest (a colleague's first run waits behind at most that of each
 * sub-tenant ahead of it) and one grant clears what any run overdrew. */
static uint64_t lane_quantum(const struct tenant_lanes *x)
{
    return x->hwm ? x->hwm : 1;
}

/* Class round r as a lane keeps it: its low 32 bits. A lane's round is
 * only compared for equality with the round after the class's (or, on the
 * old list, where it is that or the class's own, for which of the two), so
 * the wrap matters only to a lane idle for a multiple of 2^32 rounds: it
 * comes back owing its turn, or as new. */
static uint32_t class_round(uint64_t r)
{
    return (uint32_t)r;
}

static bool classes_weighted(const fq_tenant *t)
{
    return t->pol.class_weight[0] != 0;
}

/* The first class with active lanes at or after c, cyclically; mask != 0. */
static uint32_t class_from(uint32_t mask, uint32_t c)
{
    uint32_t hi = mask & (~0u << c);
    return (uint32_t)__builtin_ctz(hi ? hi : mask);
}

/* The class t's next run is of; its lanes are not all empty. */
static uint32_t class_pick(const fq_tenant *t)
{
    const struct tenant_lanes *x = t->x;
    return classes_weighted(t) ? class_from(x->mask, x->cur)
                               : (uint32_t)__builtin_ctz(x->mask);
}

static fq_lane *lane_pick(const struct tenant_lanes *x, const struct class_ring *g)
{
    return lane_at(x, g->newh ? g->newh : g->oldh);
}

/* Put t's head lane and its class in the tenant, after its lanes changed. */
static void lanes_repick(fq_tenant *t)
{
    t->hc = t->x->mask ? class_pick(t) : 0;
    t->hl = t->x->mask ? lane_pick(t->x, &t->x->ring[t->hc]) : NULL;
}

/* t's next run: one back from the window first, else its lanes'. */
static fq_run *head_run(const fq_tenant *t)
{
    return t->qhead || !t->hl ? t->qhead : t->hl->qhead;
}

/* A sub-tenant's bytes apart: its header and first lane are 48, then its
 * name and its slot among its tenant's far ones (sub_far_slot). */
static size_t sub_size(const fq_sched *s)
{
    return sizeof(fq_sub) + s->nclasses * sizeof(fq_lane) + FQ_SCHED_SUB_MAX + sizeof(uint32_t);
}

static char *sub_name(const struct tenant_lanes *x, fq_sub *u)
{
    return (char *)&u->lane[x->nrings];
}

static fq_sub *sub_of_lane(fq_lane *l, uint32_t c)
{
    return (fq_sub *)(void *)((char *)(l - c) - offsetof(fq_sub, lane));
}

/* A name's first 8 bytes, zero padded: one load for a long name, a short
 * one's bytes in a loop (a copy of a length not known here is a call to
 * memcpy, on every enqueue by name). The same bytes give the same value. */
static inline uint64_t name_head(const char *k, size_t len)
{
    uint64_t w = 0;
    if (len >= 8) {
        memcpy(&w, k, 8);
        return w;
    }
    for (size_t i = 0; i < len; i++)
        w |= (uint64_t)(unsigned char)k[i] << (8 * i);
    return w;
}

/* A seeded multiplicative hash: cheap on short names (head is the first
 * 8 bytes, name_head). A tenant's index holds at most max_subtenants, so
 * even collisions planned by a producer cost at most that many probes, and
 * only on its own tenant's submits. */
static inline uint32_t sub_hash(const fq_sched *s, uint64_t head, const char *k, size_t len)
{
    uint64_t h = (((s->o.seed ^ 0x9E3779B97F4A7C15ULL) + len) ^ head) * 0xBF58476D1CE4E5B9ULL;
    for (size_t i = 8; i < len; i += 8) {
        h ^= h >> 31;
        h = (h ^ name_head(k + i, len - i)) * 0xBF58476D1CE4E5B9ULL;
    }
    h ^= h >> 29;
    h *= 0x94D049BB133111EBULL;
    return (uint32_t)(h ^ (h >> 32));
}

/* The named sub-tenant k[0..len) of x, or NULL; *seen counts the slots
 * probed. */
static inline fq_sub *index_find(const struct tenant_lanes *x, const char *k, size_t len,
                                 uint64_t head, uint32_t h, uint64_t *seen)
{
    if (!x->index)
        return NULL;
    uint32_t m = x->index_cap - 1;
    for (uint32_t i = h & m; ++*seen, x->index[i].u; i = (i + 1) & m) {
        fq_sub *u = sub_at(x, x->index[i].u);
        if (x->index[i].hash == h && u->len == len && u->head == head &&
            (len <= 8 || memcmp(sub_name(x, u) + 8, k + 8, len - 8) == 0))
            return u;
    }
    return NULL;
}

static void index_put(struct sub_slot *slots, uint32_t cap, struct sub_slot e)
{
    uint32_t i = e.hash & (cap - 1);
    while (slots[i].u)
        i = (i + 1) & (cap - 1);
    slots[i] = e;
}

/* Move x's index to cap slots (FQ_SUB_SMALL: the ones kept with the
 * tenant), reading its old slots (counted in *seen). */
static fq_status index_resize(struct tenant_lanes *x, uint32_t cap, uint64_t *seen)
{
    struct sub_slot *slots = cap == FQ_SUB_SMALL && x->index != x->small
                                 ? x->small : calloc(cap, sizeof(*slots));
    if (!slots)
        return FQ_ENOMEM;
    for (uint32_t i = 0; i < x->index_cap; i++)
        if (x->index[i].u)
            index_put(slots, cap, x->index[i]);
    *seen += x->index_cap;
    if (x->index == x->small)
        memset(x->small, 0, sizeof x->small);
    else
        free(x->index);
    x->index = slots;
    x->index_cap = cap;
    return FQ_OK;
}

/* Room for one more named sub-tenant, the index at most half full. */
static fq_status index_reserve(struct tenant_lanes *x, uint64_t *seen)
{
    if (2 * (x->known + 1) <= x->index_cap)
        return FQ_OK;
    if (!x->index_cap) {
        x->index = x->small;
        x->index_cap = FQ_SUB_SMALL;
        return FQ_OK;
    }
    return index_resize(x, 2 * x->index_cap, seen);
}

/* Unlink slot i's, shifting back the entries after it that probed past it. */
static void index_remove_at(struct tenant_lanes *x, uint32_t i)
{
    uint32_t m = x->index_cap - 1;
    x->index[i].u = 0;
    for (uint32_t j = (i + 1) & m; x->index[j].u; j = (j + 1) & m) {
        uint32_t home = x->index[j].hash & m;
        /* it stays if its home lies cyclically in (i, j] */
        if (((j - home) & m) < ((j - i) & m))
            continue;
        x->index[i] = x->index[j];
        x->index[j].u = 0;
        i = j;
    }
}

/* Whether an idle sub-tenant was served in a round of one of its classes
 * that is not over: coming back, it owes the rest of that round its turn. */
static bool sub_owes(const struct tenant_lanes *x, const fq_sub *u)
{
    for (uint32_t c = 0; c < x->nrings; c++)
        if (u->lane[c].round == class_round(x->ring[c].round + 1))
            return true;
    return false;
}

/* Forget an idle sub-tenant (the overflow one, or the index's at slot i):
 * it comes back as new. */
static void sub_forget(fq_sched *s, struct tenant_lanes *x, fq_sub *u, uint32_t i)
{
    if (u->named)
        index_remove_at(x, i);
    else
        x->overflow = NULL;
    x->known--;
    x->idle--;
    if (u->inl) {
        x->inl_free |= 1u << (u->inl - 1);
        return;
    }
    /* kept for the next: no allocation per sub-tenant coming back */
    sub_unreach(x, u);
    u->lane[0].qhead = (fq_run *)(void *)s->free_subs;   /* a link may not reach */
    s->free_subs = u;
}

/* Forget the idle sub-tenants that owe no turn (every idle one when all
 * is false), in one pass over the index: O(max_subtenants), paid when a
 * tenant's lanes empty or a new one finds the cap reached, and then not
 * again until a round has passed. */
static void sub_forget_idle(fq_sched *s, struct tenant_lanes *x, bool all)
{
    uint64_t stamp = 0;
    for (uint32_t c = 0; c < x->nrings; c++)
        stamp += x->ring[c].round;
    if (!all && x->scanned == stamp)
        return;
    uint32_t before = x->known;
    if (x->overflow && !x->overflow->queued && (all || !sub_owes(x, x->overflow)))
        sub_forget(s, x, x->overflow, 0);
    for (uint32_t i = 0; x->idle && i < x->index_cap;) {
        s->lane_visits++;
        fq_sub *u = sub_at(x, x->index[i].u);
        if (u && !u->queued && (all || !sub_owes(x, u)))
            sub_forget(s, x, u, i);     /* slot i may hold another now */
        else
            i++;
    }
    x->scanned = x->known < before ? UINT64_MAX : stamp;
    /* So that the next pass is as short as the working set: an index
     * grown for many that are forgotten since would be read whole at each
     * pass, one for each round of a single user. Shrunk to a quarter full
     * once an eighth full, it is read again only after as many have been
     * forgotten, or made, as it has slots. */
    if (!x->known && x->index != x->small) {
        free(x->index);
        x->index = NULL;
        x->index_cap = 0;
    } else if (x->index != x->small && 8 * x->known < x->index_cap) {
        uint32_t cap = FQ_SUB_SMALL;
        while (cap < 4 * x->known)
            cap *= 2;
        (void)index_resize(x, cap, &s->lane_visits);    /* no memory: it stays */
    }
}

/* The sub-tenant of t named sub[0..len), made if new (the overflow one
 * past max_subtenants); the default one for len 0 or without sub-tenants.
 * NULL: no memory. */
static fq_sub *sub_of(fq_sched *s, fq_tenant *t, const char *sub, size_t len)
{
    struct tenant_lanes *x = t->x;
    uint32_t cap = t->pol.max_subtenants < s->o.max_subtenants ? t->pol.max_subtenants
                                                                : s->o.max_subtenants;
    if (!len || !cap)
        return x->dflt;
    uint64_t head = name_head(sub, len);
    uint32_t h = sub_hash(s, head, sub, len);
    fq_sub *u = index_find(x, sub, len, head, h, &s->lane_visits);
    if (u)
        return u;
    /* at the cap, the idle ones that owe no turn make room */
    if (x->known - (x->overflow != NULL) >= cap && x->idle)
        sub_forget_idle(s, x, false);
    bool over = x->known - (x->overflow != NULL) >= cap;
    if (over && x->overflow)
        return x->overflow;
    if (!over && index_reserve(x, &s->lane_visits) != FQ_OK)
        return NULL;
    uint8_t inl = 0;
    if (x->inl_free && len <= 8) {  /* the name is all in head */
        uint32_t i = (uint32_t)__builtin_ctz(x->inl_free);
        x->inl_free &= ~(1u << i);
        inl = (uint8_t)(i + 1);
        u = (fq_sub *)(void *)((char *)&x->dflt->lane[x->nrings] +
                               i * (sizeof(fq_sub) + x->nrings * sizeof(fq_lane)));
    } else if ((u = s->free_subs)) {
        s->free_subs = (fq_sub *)(void *)u->lane[0].qhead;
    } else if (!(u = malloc(sub_size(s)))) {
        return NULL;
    }
    memset(u, 0, sizeof(*u) + x->nrings * sizeof(fq_lane));
    if (!inl && sub_reach(x, u, sub_size(s)) != FQ_OK) {
        u->lane[0].qhead = (fq_run *)(void *)s->free_subs;  /* kept for the next */
        s->free_subs = u;
        return NULL;
    }
    u->inl = inl;
    if (over) {
        x->overflow = u;
    } else {
        u->named = 1;
        u->len = (uint8_t)len;
        u->head = head;
        if (!inl)
            memcpy(sub_name(x, u), sub, len);
        index_put(x->index, x->index_cap, (struct sub_slot){h, sub_link(x, u)});
    }
    x->known++;
    x->idle++;          /* until its run is queued */
    return u;
}

/* Put l, linked from x by o, at the tail of list h..tl. */
static void lane_push(const struct tenant_lanes *x, fq_link *h, fq_link *tl, fq_lane *l,
                      fq_link o)
{
    l->next = 0;
    if (*tl)
        lane_at(x, *tl)->next = o;
    else
        *h = o;
    *tl = o;
}

/* Queue r in u's lane of class c. */
static void lane_add(struct tenant_lanes *x, fq_sub *u, uint32_t c, fq_run *r)
{
    struct class_ring *g = &x->ring[c];
    fq_lane *l = &u->lane[c];
    r->lane = l;
    bool was_empty = !l->qtail;
    if (l->qtail)
        l->qtail->next = r;
    else
        l->qhead = r;
    l->qtail = r;
    if (r->est > x->hwm)
        x->hwm = r->est;
    g->queued++;
    if (u->queued++ == 0) {
        x->active++;
        x->idle -= u != x->dflt;
    }
    if (!was_empty)
        return;
    /* It starts queuing: on the new list, served at its class's next turn
     * with a fresh quantum; or, served in this round already, on the old
     * list behind the round, with what it had left of its turn. */
    uint64_t q = lane_quantum(x);
    if (l->round && l->round == class_round(g->round + 1)) {
        l->deficit = (l->deficit < 0 ? l->deficit : 0) + (int64_t)q;
        lane_push(x, &g->oldh, &g->oldt, l, lane_link(x, u, c));
    } else {
        l->deficit = (int64_t)q;
        lane_push(x, &g->newh, &g->newt, l, lane_link(x, u, c));
    }
    if (g->lanes++ == 0)
        x->mask |= 1u << c;
}

/* The head run r of t's lane l of class c (its class's pick) was sent;
 * rest follows it there. */
/* Lane l, at the head of its class's new list (from_new) or old list,
 * leaves it: emptied, or its turn spent, when it goes to the old list's
 * tail with a quantum more for the next round. */
static void lane_leave_head(const struct tenant_lanes *x, struct class_ring *g, fq_lane *l,
                            fq_link o, bool from_new, bool empty, uint64_t q)
{
    if (from_new) {
        g->newh = l->next;
        if (!g->newh)
            g->newt = 0;
    } else {
        g->oldh = l->next;
        if (!g->oldh)
            g->oldt = 0;
    }
    /* served in this round; or, its turn spent, on the old list for the next */
    l->round = class_round(g->round + 1);
    if (!empty) {
        l->deficit += (int64_t)q;
        lane_push(x, &g->oldh, &g->oldt, l, o);
    }
}

static void lane_sent(fq_sched *s, fq_tenant *t, uint32_t c, fq_lane *l, const fq_run *r,
                      fq_run *rest)
{
    struct tenant_lanes *x = t->x;
    struct class_ring *g = &x->ring[c];
    fq_sub *u = sub_of_lane(l, c);
    uint64_t q = lane_quantum(x);
    bool weighted = classes_weighted(t);
    if (weighted && g->deficit <= 0) {  /* its class's turn begins */
        uint32_t w = t->pol.class_weight[c];
        g->deficit += (int64_t)(q * (w ? w : 1));
        x->cur = c;
    }
    l->qhead = rest;
    if (!rest)
        l->qtail = NULL;
    l->deficit -= r->est;
    if (weighted)
        g->deficit -= r->est;
    g->queued--;
    fq_link o = lane_link(x, u, c);
    bool from_new = g->newh == o;
    /* The old list holds the lanes of the class's round and, behind them,
     * those of the next (lane_add, lane_leave_head): its head is of the
     * next round once the round's are through. */
    if (!from_new && l->round == class_round(g->round + 1))
        g->round++;             /* the old list's next round begins */
    bool empty = !rest;
    if (empty || l->deficit <= 0)
        lane_leave_head(x, g, l, o, from_new, empty, q);
    if (empty && --g->lanes == 0) {
        /* The round goes on: one served in it that comes back still owes
         * the rest of it to those that start queuing meanwhile. */
        x->mask &= ~(1u << c);
        g->deficit = 0;
        if (!x->mask)
            x->hwm = 0;
    }
    if (weighted && x->mask && (!(x->mask & (1u << c)) || g->deficit <= 0))
        x->cur = class_from(x->mask, c + 1 < s->nclasses ? c + 1 : 0);
    if (--u->queued == 0) {
        x->active--;
        x->idle += u != x->dflt;
    }
    /* With its lanes empty the idle that owe no turn are forgotten. While
     * some lane has runs they are kept (up to the cap, where those that
     * owe nothing make room for new ones), so that users coming and going
     * cost no allocation and no search. */
    if (!x->mask && x->idle)
        sub_forget_idle(s, x, false);
}

/* ---- debt heap: debtors beyond the wheel, keyed by their wake round ----- */

/* The key sits in the heap array beside its tenant, so sifting compares
 * without touching tenant structs: with 10,000 debtors that is the
 * difference between a cache miss per level and none. */
typedef struct heap_ent {
    uint64_t wake;              /* round in which the tenant turns positive */
    fq_tenant *t;
} heap_ent;

static void heap_set(fq_sched *s, uint32_t i, heap_ent e)
{
    s->heap[i] = e;
    e.t->wait_at = FQ_WHEEL_SLOTS + i;
}

static uint32_t heap_idx(const fq_tenant *t)
{
    return t->wait_at - FQ_WHEEL_SLOTS;
}

static void heap_up(fq_sched *s, uint32_t i)
{
    heap_ent e = s->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (e.wake >= s->heap[p].wake)
            break;
        heap_set(s, i, s->heap[p]);
        i = p;
    }
    heap_set(s, i, e);
}

static void heap_down(fq_sched *s, uint32_t i)
{
    heap_ent e = s->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->nheap)
            break;
        if (c + 1 < s->nheap && s->heap[c + 1].wake < s->heap[c].wake)
            c++;
        if (s->heap[c].wake >= e.wake)
            break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, e);
}

/* The heap holds at most every tenant, and grows with the tenants
 * (tenant_reserve), so pushing never fails. */
static void heap_push(fq_sched *s, fq_tenant *t, uint64_t wake)
{
    heap_set(s, s->nheap++, (heap_ent){wake, t});
    heap_up(s, heap_idx(t));
}

/* Move a tenant's wake round within the heap. */
static void heap_rekey(fq_sched *s, fq_tenant *t, uint64_t wake)
{
    s->heap[heap_idx(t)].wake = wake;
    heap_down(s, heap_idx(t));
    heap_up(s, heap_idx(t));
}

static void heap_remove(fq_sched *s, fq_tenant *t)
{
    uint32_t i = heap_idx(t);
    heap_ent last = s->heap[--s->nheap];
    if (last.t != t) {
        heap_set(s, i, last);
        heap_down(s, i);
        heap_up(s, heap_idx(last.t));
    }
}

/* ---- parked tenants: a heap keyed by time, its key beside the tenant ---- */

static void park_push(fq_sched *s, fq_tenant *t)
{
    t->state = FQ_T_PARKED;
    heap_ent e = {t->park_until, t};
    uint32_t i = s->npark++;
    while (i > 0 && e.wake < s->park[(i - 1) / 2].wake) {
        s->park[i] = s->park[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->park[i] = e;
}

static fq_tenant *park_pop(fq_sched *s)
{
    fq_tenant *t = s->park[0].t;
    heap_ent e = s->park[--s->npark];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->npark)
            break;
        if (c + 1 < s->npark && s->park[c + 1].wake < s->park[c].wake)
            c++;
        if (s->park[c].wake >= e.wake)
            break;
        s->park[i] = s->park[c];
        i = c;
    }
    if (s->npark)
        s->park[i] = e;
    return t;
}

/* ---- timing wheel: debtors waking within FQ_WHEEL_SLOTS rounds ----------
 *
 * Slot r % FQ_WHEEL_SLOTS holds the debtors that wake in round r, so filing
 * at its tail and unlinking from anywhere are O(1). Invariant: every debtor
 * in the wheel wakes in a round w with round < w < round + FQ_WHEEL_SLOTS,
 * and no round is skipped while the wheel holds a debtor for it, so a slot
 * holds one round only. */

static uint32_t wheel_slot(uint64_t wake)
{
    return (uint32_t)(wake & (FQ_WHEEL_SLOTS - 1));
}

static int in_horizon(const fq_sched *s, uint64_t wake)
{
    return wake - s->round < FQ_WHEEL_SLOTS;
}

static void wheel_mark(fq_sched *s, uint32_t i, int nonempty)
{
    uint64_t bit = (uint64_t)1 << (i % 64);
    if (nonempty)
        s->wheel_bits[i / 64] |= bit;
    else
        s->wheel_bits[i / 64] &= ~bit;
}

static void wheel_insert(fq_sched *s, fq_tenant *t, uint64_t wake)
{
    uint32_t i = wheel_slot(wake);
    struct wheel_slot *w = &s->wheel[i];
    t->next = NULL;
    t->prev = w->last;
    if (w->last) {
        w->last->next = t;
    } else {
        w->first = t;
        wheel_mark(s, i, 1);
    }
    w->last = t;
    t->wait_at = i;
    s->nwheel++;
}

static void wheel_remove(fq_sched *s, fq_tenant *t)
{
    struct wheel_slot *w = &s->wheel[t->wait_at];
    if (t->prev)
        t->prev->next = t->next;
    else
        w->first = t->next;
    if (t->next)
        t->next->prev = t->prev;
    else
        w->last = t->prev;
    if (!w->first)
        wheel_mark(s, t->wait_at, 0);
    t->next = t->prev = NULL;
    s->nwheel--;
}

/* Take round r's slot out of the wheel: its debtors in filing order, linked
 * by next (and back by prev from *last), or NULL if it is empty. */
static fq_tenant *wheel_take(fq_sched *s, uint64_t r, fq_tenant **last)
{
    uint32_t i = wheel_slot(r);
    fq_tenant *first = s->wheel[i].first;
    *last = s->wheel[i].last;
    if (first) {
        s->wheel[i] = (struct wheel_slot){NULL, NULL};
        wheel_mark(s, i, 0);
    }
    return first;
}

/* The earliest round in which a debtor in the non-empty wheel wakes: the
 * first non-empty slot after the current round's, found a word at a time. */
static uint64_t wheel_next(const fq_sched *s)
{
    uint64_t from = s->round + 1;
    uint32_t i = wheel_slot(from), w = i / 64;
    uint64_t bits = s->wheel_bits[w] & (~(uint64_t)0 << (i % 64));
    while (!bits) {
        w = (w + 1) % FQ_WHEEL_WORDS;
        bits = s->wheel_bits[w];    /* back at i's word: its low slots are the last rounds */
    }
    uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(bits);
    return from + ((slot - i) & (FQ_WHEEL_SLOTS - 1));
}

/* ---- waiting debtors: the wheel, or the heap beyond its horizon --------- */

static void wait_insert(fq_sched *s, fq_tenant *t, uint64_t wake)
{
    t->state = FQ_T_WAITING;
    if (in_horizon(s, wake))
        wheel_insert(s, t, wake);
    else
        heap_push(s, t, wake);
}

static void wait_remove(fq_sched *s, fq_tenant *t)
{
    if (t->wait_at < FQ_WHEEL_SLOTS)
        wheel_remove(s, t);
    else
        heap_remove(s, t);
}

/* ---- active list and rounds -------------------------------------------- */

static uint64_t quantum_of(const fq_sched *s, const fq_tenant *t)
{
    return (uint64_t)s->o.quantum * t->pol.weight;
}

static void active_push(fq_sched *s, fq_tenant *t, uint64_t round)
{
    t->state = FQ_T_ACTIVE;
    t->round = round;
    t->next = NULL;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
}

static void active_pop(fq_sched *s)
{
    fq_tenant *t = s->head;
    s->head = t->next;
    if (!s->head)
        s->tail = NULL;
    t->next = NULL;
}

/* The round a tenant joins when it comes back into service now: behind
 * everything on the active list, or the current round if the list is empty. */
static uint64_t join_round(const fq_sched *s)
{
    return s->tail ? s->tail->round : s->round;
}

/* Quanta a deficit d needs to turn positive: 0 if it is positive already. */
static uint64_t quanta_needed(int64_t d, uint64_t q)
{
    return d > 0 ? 0 : (uint64_t)(-d) / q + 1;
}

/* Deficits saturate here: an absurd stream of overruns stays a huge debt
 * instead of wrapping into a huge credit. */
#define FQ_DEFICIT_MAX ((int64_t)1 << 62)

static void deficit_add(fq_tenant *t, int64_t delta)
{
    int64_t d = t->deficit;
    if (delta > 0)
        d = d > FQ_DEFICIT_MAX - delta ? FQ_DEFICIT_MAX : d + delta;
    else
        d = d < -FQ_DEFICIT_MAX - delta ? -FQ_DEFICIT_MAX : d + delta;
    t->deficit = d;
}

/* Bring a WAITING tenant back onto the active list in round r >= t->round, granting it
 * the quanta of every round since the one it left for: what visiting it once
 * per round would have granted, in one step. */
static void wake(fq_sched *s, fq_tenant *t, uint64_t r)
{
    t->deficit += (int64_t)((r - t->round + 1) * quantum_of(s, t));
    s->wakeups++;
    active_push(s, t, r);
}

/* Load the lines from a up to end ahead. */
static inline __attribute__((always_inline)) void prefetch_range(uintptr_t a, uintptr_t end)
{
    for (a &= ~(uintptr_t)63; a < end; a += 64)
        __builtin_prefetch((const void *)a);
}

/* While t, at the head of the list, is served, start loading what the
 * next visits read: with many tenants none of it is in cache any more,
 * and each line loaded only when dispatch reads it stalls dispatch. Each
 * step reads only what was asked for at the previous visit: the tenant
 * after t was asked for then, so its head run can be read now; the one
 * after it is asked for by address alone (its struct up to the ranking's
 * fields). With lanes this is one step deeper, since their head run is
 * found through the head lane: the next tenant's head run (its head lane
 * was asked for at the previous visit), the one after's head lane and the
 * header of its sub-tenant, and the third's struct with its lanes' state
 * (the small index of its sub-tenants in it) and rings, which follow it.
 * A wake cannot do this: a round's wakes come at once, and at 10,000
 * tenants what they would load is evicted again before the last of them
 * is served. Prefetches change nothing but time.
 * (Inlined by force: out of line, GCC finds the helper free of effects
 * and drops the call.) */
static inline __attribute__((always_inline)) void prefetch_ahead(const fq_sched *s,
                                                                  const fq_tenant *t)
{
    const fq_tenant *nx = t->next;
    if (!nx)
        return;
    __builtin_prefetch(head_run(nx));
    const fq_tenant *n2 = nx->next;
    if (!n2)
        return;
    if (!(s->o.nclasses > 1 || s->o.max_subtenants)) {
        prefetch_range((uintptr_t)n2, (uintptr_t)&n2->seq);
        return;
    }
    if (n2->hl) {                       /* a lane may straddle two lines */
        __builtin_prefetch(n2->hl);
        __builtin_prefetch((const char *)(n2->hl + 1) - 1);
        __builtin_prefetch(sub_of_lane(n2->hl, n2->hc));
    }
    const fq_tenant *n3 = n2->next;
    if (!n3)
        return;
    prefetch_range((uintptr_t)n3, (uintptr_t)(n3 + 1) + sizeof(struct tenant_lanes) +
                                      s->nclasses * sizeof(struct class_ring));
}

/* Put a tenant that has queued runs and a free slot back into service, as of
 * round b: the round in which one quantum would serve it. Positive credit
 * goes straight onto the list; debt that one quantum clears is granted now;
 * deeper debt waits until the round it turns positive. */
static void schedule(fq_sched *s, fq_tenant *t, uint64_t b)
{
    uint64_t q = quantum_of(s, t);
    uint64_t k = quanta_needed(t->deficit, q);
    if (k <= 1) {
        t->deficit += (int64_t)(k * q);
        active_push(s, t, b);
        return;
    }
    t->round = b;
    wait_insert(s, t, b + k - 1);
}

/* A WAITING tenant's deficit or quantum changed: move its wake round, or
 * wake it now if that round has passed. It is never served before round
 * t->round, the one it left for, even when a refund made it positive. A
 * debtor whose round did not change keeps its place in it. */
static void rekey(fq_sched *s, fq_tenant *t)
{
    uint64_t k = quanta_needed(t->deficit, quantum_of(s, t));
    uint64_t w = t->round + (k ? k : 1) - 1;
    int in_wheel = t->wait_at < FQ_WHEEL_SLOTS, fits = in_horizon(s, w);
    if (w <= s->round) {
        wait_remove(s, t);
        wake(s, t, join_round(s));
    } else if (fits && in_wheel) {
        if (t->wait_at != wheel_slot(w)) {
            wheel_remove(s, t);
            wheel_insert(s, t, w);
        }
    } else if (!fits && !in_wheel) {
        heap_rekey(s, t, w);
    } else {                            /* across the horizon */
        wait_remove(s, t);
        wait_insert(s, t, w);
    }
}

/* A WAITING tenant's quantum is about to change: hand it, at the quantum
 * still in force, the grants of the rounds it has already sat out, so the
 * new quantum applies only to rounds to come. */
static void settle(fq_sched *s, fq_tenant *t)
{
    if (s->round < t->round)
        return;
    deficit_add(t, (int64_t)((s->round - t->round + 1) * quantum_of(s, t)));
    t->round = s->round + 1;
}

/* Begin round r, which no debtor's wake round precedes: every debtor whose
 * round it is joins it, first those in its wheel slot, in filing order.
 * With many tenants each debtor of the slot is a miss, and each is found
 * through the one before: so the slot is also walked from its far end
 * (by prev, which waking leaves alone), a step for each debtor woken,
 * loading the debtors there until the two ends meet. Two misses are then
 * in flight instead of one, and the second half is woken from cache. */
static void advance(fq_sched *s, uint64_t r)
{
    s->round = r;
    fq_tenant *back;
    for (fq_tenant *t = wheel_take(s, r, &back), *nx; t; t = nx) {
        nx = t->next;
        if (back && back != t && back != nx) {
            back = back->prev;
            __builtin_prefetch(&back->pol);     /* the line of its state and weight */
        } else {
            back = NULL;
        }
        s->nwheel--;
        wake(s, t, r);
    }
    while (s->nheap && s->heap[0].wake <= r) {
        fq_tenant *t = s->heap[0].t;
        heap_remove(s, t);
        wake(s, t, r);
    }
}

/* The earliest round in which a waiting debtor wakes; some debtor waits. */
static uint64_t next_wake(const fq_sched *s)
{
    uint64_t w = s->nwheel ? wheel_next(s) : UINT64_MAX;
    return s->nheap && s->heap[0].wake < w ? s->heap[0].wake : w;
}

/* The cap in force for t: its max_in_flight while another tenant has
 * queued runs (s->active counts the tenants with queued runs, t among them
 * if it has any), else its burst_in_flight where that is larger. */
static uint32_t cap_of(const fq_sched *s, const fq_tenant *t)
{
    uint32_t cap = t->pol.max_in_flight;
    if (cap && t->pol.burst_in_flight > cap && s->active <= (t->queued ? 1u : 0u))
        return t->pol.burst_in_flight;
    return cap;
}

static int at_cap(const fq_sched *s, const fq_tenant *t)
{
    uint32_t cap = cap_of(s, t);
    return cap && t->in_flight >= cap;
}

/* t leaves the rotation at its cap. The capped are listed (by next and
 * prev, which no other state uses then) so that the one left when the
 * others' queues empty can be given its burst back without a search. */
static void cap_enter(fq_sched *s, fq_tenant *t)
{
    t->state = FQ_T_CAPPED;
    t->prev = NULL;
    t->next = s->capped;
    if (s->capped)
        s->capped->prev = t;
    s->capped = t;
}

/* t off the list of capped tenants (its state is FQ_T_CAPPED). */
static void capped_remove(fq_sched *s, fq_tenant *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        s->capped = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->next = t->prev = NULL;
}

/* A slot of t was freed, its cap rose, or the others' queues emptied: a
 * capped tenant with work rejoins the rotation. */
static void uncap(fq_sched *s, fq_tenant *t)
{
    if (t->state != FQ_T_CAPPED || at_cap(s, t))
        return;
    capped_remove(s, t);
    schedule(s, t, join_round(s));
}

/* ---- token rates: a GCRA per tenant ------------------------------------ */

#define FQ_RATE_SCALE 1024      /* rate_at's resolution: 1/1024 of the time unit */
#define FQ_RATE_NEVER (INT64_MIN / 4)   /* rate_at of a tenant that owes nothing */
#define FQ_RATE_MAX (INT64_MAX / 4)

static int64_t tau_of(const fq_sched *s)
{
    return (int64_t)(s->o.minute ? s->o.minute : 60000) * FQ_RATE_SCALE;
}

/* rate_at units that tokens take at t's rate (t has one), saturating. */
static int64_t rate_cost(const fq_sched *s, const fq_tenant *t, uint64_t tokens)
{
    double c = (double)tokens * (double)tau_of(s) / (double)t->pol.tokens_per_minute;
    return c >= (double)FQ_RATE_MAX ? FQ_RATE_MAX : (int64_t)c;
}

static int64_t rate_add(int64_t at, int64_t c)
{
    at += c;
    return at > FQ_RATE_MAX ? FQ_RATE_MAX : at < FQ_RATE_NEVER ? FQ_RATE_NEVER : at;
}

/* The time before which t may not send for its rate; 0 if none. */
static uint64_t rate_until(const fq_tenant *t)
{
    if (!t->pol.tokens_per_minute || t->rate_at <= 0)
        return 0;
    return ((uint64_t)t->rate_at + FQ_RATE_SCALE - 1) / FQ_RATE_SCALE;
}

/* Charge tokens sent at now to t's rate: a tenant that owed nothing has a
 * minute's tokens of burst before it. */
static void rate_charge(const fq_sched *s, fq_tenant *t, uint64_t tokens, uint64_t now)
{
    if (!t->pol.tokens_per_minute)
        return;
    int64_t floor = (int64_t)now * FQ_RATE_SCALE - tau_of(s);
    t->rate_at = rate_add(t->rate_at > floor ? t->rate_at : floor, rate_cost(s, t, tokens));
}

/* Correct t's rate by delta = estimate - actual: an overrun is charged, a
 * refund given back. */
static void rate_correct(const fq_sched *s, fq_tenant *t, int64_t delta)
{
    if (!t->pol.tokens_per_minute || !delta)
        return;
    int64_t c = rate_cost(s, t, delta < 0 ? (uint64_t)-delta : (uint64_t)delta);
    t->rate_at = rate_add(t->rate_at, delta < 0 ? c : -c);
}

/* ---- tenant table ------------------------------------------------------ */

static fq_tenant *tenant_of(fq_strmap_node *n)
{
    return n ? FQ_STRMAP_ENTRY(n, fq_tenant, node) : NULL;
}

static void tenant_free(fq_strmap_node *n)
{
    fq_tenant *t = tenant_of(n);
    if (t->x) {
        for (uint32_t i = 0; i < t->x->index_cap; i++)
            if (t->x->index[i].u && !sub_at(t->x, t->x->index[i].u)->inl)
                free(sub_at(t->x, t->x->index[i].u));
        if (t->x->overflow && !t->x->overflow->inl)
            free(t->x->overflow);
        if (t->x->index != t->x->small)
            free(t->x->index);
        free(t->x->far);
    }
    free(t);
}

/* Make room for one more tenant in the table and the heap, which holds at
 * most every tenant. On error the tenants are unchanged. */
static fq_status tenant_reserve(fq_sched *s)
{
    if (fq_strmap_count(s->tenants) == s->heap_cap) {
        uint32_t n = s->heap_cap * 2;
        heap_ent *nh = realloc(s->heap, n * sizeof(*nh));
        if (!nh)
            return FQ_ENOMEM;
        s->heap = nh;
        heap_ent *np = realloc(s->park, n * sizeof(*np));
        if (!np)
            return FQ_ENOMEM;
        s->park = np;
        s->heap_cap = n;
    }
    return fq_strmap_reserve(s->tenants);
}

/* ---- the stats ranking ------------------------------------------------- */

/* Tenants with queued runs first, by queued tokens (most first), then the
 * age of their head run (oldest first), then by id; then the idle ones in
 * creation order. Reads only the key stored at the tenant's last sync. */
static int rank_cmp(const fq_rank_node *a, const fq_rank_node *b)
{
    const fq_tenant *x = FQ_RANK_ENTRY(a, fq_tenant, rank);
    const fq_tenant *y = FQ_RANK_ENTRY(b, fq_tenant, rank);
    if (!x->rk_tokens || !y->rk_tokens) {
        if (x->rk_tokens || y->rk_tokens)
            return x->rk_tokens ? -1 : 1;
        return x->seq < y->seq ? -1 : 1;
    }
    if (x->rk_tokens != y->rk_tokens)
        return x->rk_tokens > y->rk_tokens ? -1 : 1;
    if (x->rk_oldest != y->rk_oldest)
        return x->rk_oldest < y->rk_oldest ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* t's queue changed: rank it again at the next sync. O(1). */
static void rank_mark(fq_sched *s, fq_tenant *t)
{
    if (t->rk_pprev)
        return;
    t->rk_next = s->rk_changed;
    if (t->rk_next)
        t->rk_next->rk_pprev = &t->rk_next;
    s->rk_changed = t;
    t->rk_pprev = &s->rk_changed;
    s->nchanged++;
}

static void rank_unmark(fq_sched *s, fq_tenant *t)
{
    s->nchanged--;
    *t->rk_pprev = t->rk_next;
    if (t->rk_next)
        t->rk_next->rk_pprev = t->rk_pprev;
    t->rk_next = NULL;
    t->rk_pprev = NULL;
}

void fq_sched_rank_sync(fq_sched *s, size_t backlog)
{
    if (s->nchanged <= backlog)
        return;
    for (fq_tenant *t; (t = s->rk_changed);) {
        rank_unmark(s, t);
        const fq_run *h = head_run(t);
        uint64_t tokens = t->queued_tokens, oldest = h ? h->t : 0;
        if (t->rank.size && tokens == t->rk_tokens && oldest == t->rk_oldest)
            continue;
        if (t->rank.size)
            fq_rank_remove(&s->rank, &t->rank);
        t->rk_tokens = tokens;
        t->rk_oldest = oldest;
        fq_rank_insert(&s->rank, &t->rank);
    }
}

fq_tenant *fq_sched_rank_at(fq_sched *s, size_t i)
{
    fq_sched_rank_sync(s, 0);
    fq_rank_node *n = fq_rank_at(&s->rank, i);
    return n ? FQ_RANK_ENTRY(n, fq_tenant, rank) : NULL;
}

fq_tenant *fq_sched_rank_next(fq_sched *s, const fq_tenant *t)
{
    fq_sched_rank_sync(s, 0);
    fq_rank_node *n = t->rank.size ? fq_rank_next(&t->rank) : NULL;
    return n ? FQ_RANK_ENTRY(n, fq_tenant, rank) : NULL;
}

/* ---- lifecycle --------------------------------------------------------- */

static int opts_valid(const fq_sched_opts *o)
{
    return o && o->quantum >= 1 && o->quantum <= FQ_SCHED_MAX_QUANTUM &&
           o->max_est_tokens >= 1 && o->nclasses <= FQ_SCHED_MAX_CLASSES;
}

fq_status fq_sched_create(fq_sched **out, const fq_sched_opts *o)
{
    *out = NULL;
    if (!opts_valid(o))
        return FQ_EINVAL;
    fq_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return FQ_ENOMEM;
    s->o = *o;
    s->caller_runs = o->caller_runs;
    s->heap = calloc(FQ_TENANT_MIN_BUCKETS, sizeof(*s->heap));
    s->park = calloc(FQ_TENANT_MIN_BUCKETS, sizeof(*s->park));
    if (fq_strmap_create(&s->tenants, FQ_STRMAP_KEY_OFFSET(fq_tenant, node, id),
                         FQ_TENANT_MIN_BUCKETS, o->seed) != FQ_OK || !s->heap || !s->park ||
        fq_window_init(&s->win, o->max_in_flight, o->max_in_flight_tokens,
                       o->run_timeout, o->max_expired, !o->caller_runs) != FQ_OK) {
        fq_sched_destroy(s);
        return FQ_ENOMEM;
    }
    fq_window_set_keep(&s->win, o->expired_keep);
    s->heap_cap = FQ_TENANT_MIN_BUCKETS;
    s->nclasses = o->nclasses > 1 ? o->nclasses : 1;
    fq_rank_init(&s->rank, rank_cmp, o->seed);
    *out = s;
    return FQ_OK;
}

void fq_sched_destroy(fq_sched *s)
{
    if (!s)
        return;
    for (fq_sub *u = s->free_subs, *next; u; u = next) {
        next = (fq_sub *)(void *)u->lane[0].qhead;
        free(u);
    }
    fq_strmap_destroy(s->tenants, tenant_free);
    for (size_t i = 0; i < s->nchunks; i++)
        free(s->chunks[i]);
    free(s->chunks);
    fq_window_fini(&s->win);
    free(s->heap);
    free(s->park);
    free(s);
}

void fq_sched_set_window(fq_sched *s, uint32_t max_in_flight, uint64_t max_in_flight_tokens)
{
    s->o.max_in_flight = max_in_flight;
    s->o.max_in_flight_tokens = max_in_flight_tokens;
    fq_window_set_limits(&s->win, max_in_flight, max_in_flight_tokens, s->o.run_timeout,
                         s->o.max_expired);
}

fq_status fq_sched_set_opts(fq_sched *s, const fq_sched_opts *o)
{
    if (!opts_valid(o))
        return FQ_EINVAL;
    /* A new quantum moves every debtor's wake round. Rekeying relinks the
     * wheel and reorders the heap, so walk a copy of both, the wheel in
     * round order. */
    uint32_t n = s->nwheel + s->nheap, k = 0;
    fq_tenant **waiting = n ? malloc(n * sizeof(*waiting)) : NULL;
    if (n && !waiting)
        return FQ_ENOMEM;
    for (uint32_t i = 1; i < FQ_WHEEL_SLOTS; i++)
        for (fq_tenant *t = s->wheel[wheel_slot(s->round + i)].first; t; t = t->next)
            waiting[k++] = t;
    for (uint32_t i = 0; i < s->nheap; i++)
        waiting[k++] = s->heap[i].t;
    for (uint32_t i = 0; i < n; i++)
        settle(s, waiting[i]);
    uint32_t nclasses = s->o.nclasses, max_subtenants = s->o.max_subtenants;
    s->o = *o;
    s->o.nclasses = nclasses;   /* read at create only */
    s->o.max_subtenants = max_subtenants;
    fq_window_set_limits(&s->win, o->max_in_flight, o->max_in_flight_tokens,
                         o->run_timeout, o->max_expired);
    fq_window_set_keep(&s->win, o->expired_keep);
    for (uint32_t i = 0; i < n; i++)
        if (waiting[i]->state == FQ_T_WAITING)
            rekey(s, waiting[i]);
    free(waiting);
    return FQ_OK;
}

/* ---- tenants ----------------------------------------------------------- */

static int policy_valid(const fq_tenant_policy *p)
{
    if (!p || p->weight < 1 || p->weight > FQ_SCHED_MAX_WEIGHT)
        return 0;
    for (int c = 0; c < FQ_SCHED_MAX_CLASSES; c++)
        if (p->class_weight[c] > FQ_SCHED_MAX_CLASS_WEIGHT)
            return 0;
    return 1;
}

fq_tenant *fq_sched_find(fq_sched *s, const char *id, size_t len)
{
    return tenant_of(fq_strmap_find(s->tenants, id, len));
}

fq_status fq_sched_tenant(fq_tenant **out, fq_sched *s, const char *id, size_t len,
                          const fq_tenant_policy *p)
{
    *out = NULL;
    if (!fq_tenant_id_valid(id, len))
        return FQ_EINVAL;
    uint32_t h = fq_strmap_hash(s->tenants, id, len);
    fq_tenant *t = tenant_of(fq_strmap_find_hashed(s->tenants, id, len, h));
    if (t) {
        *out = t;
        return FQ_OK;
    }
    if (!policy_valid(p))
        return FQ_EINVAL;
    bool lanes = s->o.nclasses > 1 || s->o.max_subtenants;
    /* With lanes: their state (the small index in it), then the default
     * sub-tenant. */
    size_t rings = sizeof(struct tenant_lanes) + s->nclasses * sizeof(struct class_ring);
    size_t dflt = sizeof(fq_sub) + s->nclasses * sizeof(fq_lane);
    if (tenant_reserve(s) != FQ_OK ||
        !(t = calloc(1, sizeof(*t) + (lanes ? rings + (1 + FQ_SUB_INLINE) * dflt : 0))))
        return FQ_ENOMEM;
    if (lanes) {
        t->x = (struct tenant_lanes *)(t + 1);
        t->x->nrings = s->nclasses;
        t->x->dflt = (fq_sub *)(void *)((char *)t->x + rings);
        t->x->inl_free = (1u << FQ_SUB_INLINE) - 1;
    }
    memcpy(t->id, id, len);
    t->pol = *p;
    t->state = FQ_T_IDLE;
    t->rate_at = FQ_RATE_NEVER;
    t->seq = s->next_seq++;
    rank_mark(s, t);
    fq_strmap_insert_hashed(s->tenants, &t->node, len, h);
    *out = t;
    return FQ_OK;
}

fq_status fq_tenant_set_policy(fq_sched *s, fq_tenant *t, const fq_tenant_policy *p)
{
    if (!policy_valid(p))
        return FQ_EINVAL;
    if (t->queued)
        s->active_weight += (uint64_t)p->weight - t->pol.weight;
    if (t->state == FQ_T_WAITING)
        settle(s, t);
    t->pol = *p;
    /* The new quantum is granted from the tenant's next visit; a debtor's
     * wake round is recomputed with it; a raised cap frees a capped tenant.
     * A capped tenant whose cap was lowered leaves at its next visit. */
    if (t->state == FQ_T_WAITING)
        rekey(s, t);
    else
        uncap(s, t);
    if (t->x)           /* strict and weighted classes pick apart */
        lanes_repick(t);
    return FQ_OK;
}

fq_status fq_sched_tenant_remove(fq_sched *s, fq_tenant *t)
{
    /* Idle with nothing queued, nothing in the window (an expired run's
     * late completion reconciles its tenant) and no debt to escape. A
     * positive deficit is dropped when a tenant goes idle, so an idle
     * tenant's is at most zero. */
    if (t->state != FQ_T_IDLE || t->queued || t->in_flight || t->expired_held || t->deficit)
        return FQ_EEXIST;
    if (t->rk_pprev)
        rank_unmark(s, t);
    if (t->rank.size)
        fq_rank_remove(&s->rank, &t->rank);
    if (t->x && t->x->idle)
        sub_forget_idle(s, t->x, true);
    fq_strmap_remove(s->tenants, &t->node);
    tenant_free(&t->node);
    return FQ_OK;
}

void fq_tenant_info_get(const fq_tenant *t, fq_tenant_info *out)
{
    *out = (fq_tenant_info){
        .id = t->id,
        .state = (enum fq_tenant_state)t->state,
        .weight = t->pol.weight,
        .deficit = t->deficit,
        .queued = t->queued,
        .queued_tokens = t->queued_tokens,
        .in_flight = t->in_flight,
        .oldest_enqueued = head_run(t) ? head_run(t)->t : 0,
        .dispatched = t->dispatched,
        .charged_tokens = t->charged,
        .actual_tokens = t->actual,
        .priced_tokens = t->priced,
        .expired = t->expired,
    };
    out->rate_until = rate_until(t);
    if (t->x) {
        for (uint32_t c = 0; t->x->nrings > 1 && c < t->x->nrings; c++)
            out->class_queued[c] = t->x->ring[c].queued;
        out->subtenants = t->x->known;
        out->active_subtenants = t->x->active;
    }
}

/* ---- queueing ---------------------------------------------------------- */

/* Every change to a tenant's queue comes through here: its runs, tokens
 * or head run (the stats ranking's key). */
static void queue_add_tokens(fq_sched *s, fq_tenant *t, int dir, uint32_t est)
{
    rank_mark(s, t);
    if (dir > 0) {
        if (t->queued++ == 0) {
            s->active++;
            s->active_weight += t->pol.weight;
        }
        t->queued_tokens += est;
        s->queued++;
        s->queued_tokens += est;
    } else {
        if (--t->queued == 0) {
            s->active--;
            s->active_weight -= t->pol.weight;
            /* No other tenant has queued runs now: the one capped (the
             * capped all have queued runs) may burst. */
            if (s->active == 1 && s->capped)
                uncap(s, s->capped);
        }
        t->queued_tokens -= est;
        s->queued--;
        s->queued_tokens -= est;
    }
}

static uint32_t charge_of(const fq_sched *s, uint32_t est)
{
    if (est < 1)
        return 1;
    return est > s->o.max_est_tokens ? s->o.max_est_tokens : est;
}

fq_status fq_sched_enqueue(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                           uint32_t est, void *handle, uint64_t now)
{
    return fq_sched_enqueue_sub(out, s, t, "", 0, s->nclasses - 1, id, est, handle, now);
}

fq_status fq_sched_enqueue_class(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                                 uint32_t cls, uint32_t est, void *handle, uint64_t now)
{
    return fq_sched_enqueue_sub(out, s, t, "", 0, cls, id, est, handle, now);
}

fq_status fq_sched_enqueue_sub(fq_run **out, fq_sched *s, fq_tenant *t, const char *sub,
                               size_t len, uint32_t cls, uint64_t id, uint32_t est,
                               void *handle, uint64_t now)
{
    if (out)
        *out = NULL;
    if (cls >= s->nclasses)
        return FQ_EINVAL;
    if (s->o.max_subtenants && t->pol.max_subtenants) {
        if (len > FQ_SCHED_SUB_MAX)
            return FQ_EINVAL;
        for (size_t i = 0; i < len; i++)
            if (sub[i] < 0x21 || sub[i] > 0x7e)
                return FQ_EINVAL;
    }
    if (t->pol.max_pending && t->queued >= t->pol.max_pending)
        return FQ_EFULL;
    struct tenant_lanes *x = t->x;
    if (s->o.nclasses > 1 && s->o.class_max_pending[cls] &&
        x->ring[cls].queued >= s->o.class_max_pending[cls])
        return FQ_EFULL;
    /* In lanes with classes, a cap of sub-tenants, or runs there still;
     * else the tenant's FIFO, exactly as without either. */
    bool lanes = x && (s->nclasses > 1 || (s->o.max_subtenants && t->pol.max_subtenants) ||
                       x->mask);
    fq_sub *u = lanes ? sub_of(s, t, sub, len) : NULL;
    fq_run *r = !lanes || u ? run_alloc(s) : NULL;
    if (!r)
        return FQ_ENOMEM;       /* a sub-tenant made for it stays idle: forgotten in turn */
    *r = (fq_run){.tenant = t, .handle = handle, .id = id, .t = now,
                  .est = charge_of(s, est), .state = FQ_RUN_QUEUED, .cls = (uint16_t)cls,
                  .hnode = r->hnode};   /* with caller_runs, the caller's index's */
    if (lanes) {
        s->lane_visits++;
        lane_add(x, u, cls, r);
        /* The head lane changes only to this one. */
        uint32_t hc = class_pick(t);
        fq_lane *hl = lane_pick(x, &x->ring[hc]);
        if (hl != t->hl) {
            t->hl = hl;
            t->hc = hc;
        }
    } else {
        if (t->qtail)
            t->qtail->next = r;
        else
            t->qhead = r;
        t->qtail = r;
        if (x)
            x->ring[cls].queued++;
    }
    queue_add_tokens(s, t, +1, r->est);
    if (t->state == FQ_T_IDLE)
        schedule(s, t, join_round(s));
    if (out)
        *out = r;
    return FQ_OK;
}

static void sub_info_of(fq_sub_info *out, const struct tenant_lanes *x, fq_sub *u)
{
    memset(out, 0, sizeof *out);
    out->overflow = u == x->overflow;
    if (u->named && u->inl)     /* its name is all in head */
        for (uint32_t i = 0; i < u->len; i++)
            out->name[i] = (char)(u->head >> (8 * i));
    else if (u->named)
        memcpy(out->name, sub_name(x, u), u->len);
    out->queued = u->queued;
}

fq_status fq_sched_sub_info(fq_sub_info *out, const fq_sched *s, const fq_tenant *t,
                            const char *sub, size_t len)
{
    memset(out, 0, sizeof *out);
    struct tenant_lanes *x = t->x;
    if (!x || !s->o.max_subtenants || len > FQ_SCHED_SUB_MAX)
        return FQ_ENOTFOUND;
    uint64_t head = name_head(sub, len);
    uint64_t seen = 0;          /* a look-up for stats: not the scheduler's work */
    fq_sub *u = len ? index_find(x, sub, len, head, sub_hash(s, head, sub, len), &seen)
                    : x->dflt;
    if (!u && !(u = x->overflow))
        return FQ_ENOTFOUND;
    sub_info_of(out, x, u);
    return FQ_OK;
}

fq_status fq_sched_run_sub_info(fq_sub_info *out, const fq_sched *s, const fq_run *r)
{
    memset(out, 0, sizeof *out);
    if (!s->o.max_subtenants || r->state != FQ_RUN_QUEUED || !r->lane)
        return FQ_ENOTFOUND;
    sub_info_of(out, r->tenant->x, sub_of_lane(r->lane, r->cls));
    return FQ_OK;
}

/* Put u in out[0..*k) of at most n, by queued runs, most first. */
static void sub_top_add(fq_sub_info *out, size_t n, size_t *k, const struct tenant_lanes *x,
                        fq_sub *u)
{
    if (!u || !u->queued || (*k == n && u->queued <= out[*k - 1].queued))
        return;
    size_t at = *k < n ? (*k)++ : *k - 1;   /* the last, or the one pushed out */
    while (at > 0 && out[at - 1].queued < u->queued) {
        out[at] = out[at - 1];
        at--;
    }
    sub_info_of(&out[at], x, u);
}

size_t fq_sched_sub_top(fq_sub_info *out, size_t n, const fq_sched *s, const fq_tenant *t)
{
    size_t k = 0;
    struct tenant_lanes *x = t->x;
    if (!x || !n || !s->o.max_subtenants)
        return 0;
    sub_top_add(out, n, &k, x, x->dflt);
    sub_top_add(out, n, &k, x, x->overflow);
    for (uint32_t i = 0; i < x->index_cap; i++)
        sub_top_add(out, n, &k, x, sub_at(x, x->index[i].u));
    return k;
}

/* ---- dispatch ---------------------------------------------------------- */

/* After t (at the head of the list) sent a run at now: it stays at the
 * head while its credit lasts, else leaves for idleness, its cap, its rate,
 * or the next round. */
static void after_send(fq_sched *s, fq_tenant *t, uint64_t now)
{
    uint64_t until;
    if (!t->queued) {
        active_pop(s);
        t->state = FQ_T_IDLE;
        if (t->deficit > 0 && !s->o.keep_idle_credit)
            t->deficit = 0;
    } else if ((until = rate_until(t)) > now) {
        active_pop(s);
        fq_sched_park(s, t, until);
        park_push(s, t);
    } else if (at_cap(s, t)) {
        active_pop(s);
        cap_enter(s, t);
    } else if (t->deficit <= 0) {
        active_pop(s);
        schedule(s, t, t->round + 1);
    }
}

void fq_sched_park(fq_sched *s, fq_tenant *t, uint64_t until)
{
    (void)s;
    if (until > t->park_until)
        t->park_until = until;
}

/* Bring back the parked tenants whose time has come, behind the tenants
 * in the rotation; one parked again meanwhile waits on. */
static void unpark(fq_sched *s, uint64_t now)
{
    while (s->npark && s->park[0].wake <= now) {
        fq_tenant *t = park_pop(s);
        if (t->park_until > now) {
            park_push(s, t);
        } else if (!t->queued) {
            t->state = FQ_T_IDLE;
            if (t->deficit > 0 && !s->o.keep_idle_credit)
                t->deficit = 0;
        } else if (at_cap(s, t)) {
            cap_enter(s, t);
        } else {
            schedule(s, t, join_round(s));
        }
    }
}

/* Take r, t's head run (head_run), out of t's queue; rest was its next
 * before anything relinked it. */
static void dequeue_head(fq_sched *s, fq_tenant *t, const fq_run *r, fq_run *rest)
{
    if (r != t->qhead) {        /* its lanes' */
        s->lane_visits++;
        lane_sent(s, t, r->cls, t->hl, r, rest);
        lanes_repick(t);
    } else {
        t->qhead = rest;
        if (!t->qhead)
            t->qtail = NULL;
        if (t->x)
            t->x->ring[r->cls].queued--;
        if (t->requeued && !--t->requeued)
            t->rq_last = NULL;
    }
    queue_add_tokens(s, t, -1, r->est);
}

void fq_sched_give_run(fq_sched *s, fq_run *r)
{
    s->given = r;
}

fq_run *fq_sched_dispatch(fq_sched *s, uint64_t now)
{
    if (s->npark)
        unpark(s, now);
    for (;;) {
        fq_tenant *t = s->head;
        if (!t) {
            if (!s->nwheel && !s->nheap)
                return NULL;
            /* Only debtors are left: skip the rounds that would only
             * grant quanta, in one step. */
            advance(s, next_wake(s));
            continue;
        }
        if (t->round > s->round) {
            advance(s, t->round);
            t = s->head;
        }
        s->visits++;
        prefetch_ahead(s, t);
        uint64_t until = rate_until(t);
        if (until > now)                /* over its rate since it joined */
            fq_sched_park(s, t, until);
        if (t->park_until > now) {      /* parked since it joined */
            active_pop(s);
            park_push(s, t);
            continue;
        }
        if (at_cap(s, t)) {             /* its cap was lowered while active,
                                           or others queued while it burst */
            active_pop(s);
            cap_enter(s, t);
            continue;
        }
        if (t->deficit <= 0) {          /* reconciliation put it in debt */
            active_pop(s);
            schedule(s, t, t->round + 1);
            continue;
        }
        fq_run *r = head_run(t), *rest = r->next;
        if (!fq_window_fits(&s->win, r->est) || fq_window_add(&s->win, r, now) != FQ_OK)
            return NULL;
        dequeue_head(s, t, r, rest);    /* the window relinked r: rest was read before */
        t->deficit -= r->est;
        t->in_flight++;
        t->dispatched++;
        t->charged += r->est;
        s->dispatched++;
        rate_charge(s, t, r->est, now);
        after_send(s, t, now);
        return r;
    }
}

/* ---- completion and reconciliation ------------------------------------- */

/* Correct t's deficit by delta = estimate - actual. */
static void reconcile(fq_sched *s, fq_tenant *t, int64_t delta)
{
    switch (t->state) {
    case FQ_T_IDLE:
        /* A refund to an idle tenant lifts it at most to zero: credit is
         * not banked through refunds either. Debt is always recorded. */
        if (delta > 0 && t->deficit + delta > 0 && !s->o.keep_idle_credit)
            t->deficit = t->deficit > 0 ? t->deficit : 0;
        else
            deficit_add(t, delta);
        break;
    case FQ_T_WAITING:
        deficit_add(t, delta);
        rekey(s, t);
        break;
    default:
        deficit_add(t, delta);
        break;
    }
}

/* One completion corrects the deficit by at most FQ_ACTUAL_MAX_FACTOR x the
 * run's estimate: an absurd report (a worker's bug, or a completion for a
 * run this proxy never held) cannot sink a tenant for hours, and the
 * estimator learns the overrun anyway. */
static int64_t delta_of(uint32_t est, uint64_t actual)
{
    uint64_t cap = (uint64_t)est * FQ_ACTUAL_MAX_FACTOR;
    return (int64_t)est - (int64_t)(actual < cap ? actual : cap);
}

void fq_tenant_reconcile_priced(fq_sched *s, fq_tenant *t, uint32_t est, uint64_t actual,
                                uint64_t cost)
{
    int64_t delta = delta_of(charge_of(s, est), cost);
    t->actual += actual;
    t->priced += cost;
    reconcile(s, t, delta);
    rate_correct(s, t, delta);
}

void fq_tenant_reconcile(fq_sched *s, fq_tenant *t, uint32_t est, uint64_t actual)
{
    fq_tenant_reconcile_priced(s, t, est, actual, actual);
}

/* A run left the window: its tenant's slot is free. */
static void slot_freed(fq_sched *s, fq_tenant *t)
{
    t->in_flight--;
    uncap(s, t);
}

fq_status fq_sched_complete(fq_done *out, fq_sched *s, uint64_t id, uint64_t actual)
{
    return fq_sched_complete_priced(out, s, id, actual, actual);
}

fq_status fq_sched_complete_priced(fq_done *out, fq_sched *s, uint64_t id, uint64_t actual,
                                   uint64_t cost)
{
    return fq_sched_complete_run(out, s, fq_window_find(&s->win, id), actual, cost);
}

/* Whether r is in the window: in flight, or expired. */
static bool dispatched(const fq_run *r)
{
    return r && (r->state == FQ_RUN_FLIGHT || r->state == FQ_RUN_EXPIRED);
}

fq_status fq_sched_complete_run(fq_done *out, fq_sched *s, fq_run *r, uint64_t actual,
                                uint64_t cost)
{
    if (!dispatched(r))
        return FQ_ENOTFOUND;
    fq_tenant *t = r->tenant;
    int held_slot = r->state == FQ_RUN_FLIGHT;
    if (out)
        *out = (fq_done){.tenant = t, .handle = r->handle, .est = r->est,
                         .expired = !held_slot};
    fq_window_remove(&s->win, r);
    t->actual += actual;
    t->priced += cost;
    int64_t delta = delta_of(r->est, cost);
    reconcile(s, t, delta);
    rate_correct(s, t, delta);
    if (held_slot)
        slot_freed(s, t);
    else
        t->expired_held--;
    run_free(s, r);
    return FQ_OK;
}

fq_status fq_tenant_set_debt(fq_sched *s, fq_tenant *t, int64_t debt)
{
    (void)s;
    if (debt > 0 || debt < -FQ_DEFICIT_MAX)
        return FQ_EINVAL;
    if (t->state != FQ_T_IDLE || t->queued || t->in_flight || t->expired_held)
        return FQ_EEXIST;
    t->deficit = debt;
    return FQ_OK;
}

bool fq_debt_forgiven(int64_t deficit, int64_t changed_at, int64_t now, uint64_t life)
{
    return deficit < 0 && now >= changed_at && (uint64_t)now - (uint64_t)changed_at >= life;
}

fq_status fq_sched_adopt(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                         uint32_t est, void *handle, uint64_t dispatched_at)
{
    if (out)
        *out = NULL;
    if (fq_window_find(&s->win, id))
        return FQ_EEXIST;
    if (!fq_window_fits(&s->win, charge_of(s, est)) || at_cap(s, t))
        return FQ_EFULL;
    fq_run *r = run_alloc(s);
    if (!r)
        return FQ_ENOMEM;
    *r = (fq_run){.tenant = t, .handle = handle, .id = id, .est = charge_of(s, est),
                  .hnode = r->hnode};
    if (fq_window_add(&s->win, r, dispatched_at) != FQ_OK) {
        run_free(s, r);
        return FQ_ENOMEM;
    }
    t->in_flight++;
    if (out)
        *out = r;
    return FQ_OK;
}

fq_status fq_sched_adopt_expired(fq_run **out, fq_sched *s, fq_tenant *t, uint64_t id,
                                 uint32_t est, void *handle, uint64_t expired_at)
{
    if (out)
        *out = NULL;
    if (fq_window_find(&s->win, id))
        return FQ_EEXIST;
    fq_run *r = run_alloc(s);
    if (!r)
        return FQ_ENOMEM;
    *r = (fq_run){.tenant = t, .handle = handle, .id = id, .est = charge_of(s, est),
                  .hnode = r->hnode};
    if (fq_window_add_expired(&s->win, r, expired_at) != FQ_OK) {
        run_free(s, r);
        return FQ_ENOMEM;
    }
    t->expired_held++;
    if (out)
        *out = r;
    return FQ_OK;
}

/* Take r out of the window as if it had never been dispatched: its slot and
 * its counts are undone (an adopted run was counted before a restart, not
 * here: the counts stop at zero). Its tenant's deficit is the caller's to
 * refund, since how depends on where r goes next. */
static fq_tenant *undispatch(fq_sched *s, fq_run *r)
{
    fq_tenant *t = r->tenant;
    if (r->state == FQ_RUN_FLIGHT)
        t->in_flight--;
    else
        t->expired_held--;
    fq_window_remove(&s->win, r);
    t->dispatched -= t->dispatched > 0;
    t->charged -= t->charged < r->est ? t->charged : r->est;
    s->dispatched -= s->dispatched > 0;
    return t;
}

fq_status fq_sched_cancel(fq_sched *s, uint64_t id)
{
    return fq_sched_cancel_run(s, fq_window_find(&s->win, id));
}

fq_status fq_sched_cancel_run(fq_sched *s, fq_run *r)
{
    if (!r || r->state != FQ_RUN_FLIGHT)
        return FQ_ENOTFOUND;
    fq_tenant *t = undispatch(s, r);
    reconcile(s, t, r->est);
    rate_correct(s, t, r->est);
    uncap(s, t);
    run_free(s, r);
    return FQ_OK;
}

fq_status fq_sched_forget(fq_sched *s, uint64_t id)
{
    return fq_sched_forget_run(s, fq_window_find(&s->win, id));
}

fq_status fq_sched_forget_run(fq_sched *s, fq_run *r)
{
    if (!dispatched(r))
        return FQ_ENOTFOUND;
    fq_tenant *t = r->tenant;
    if (r->state == FQ_RUN_FLIGHT)
        t->in_flight--;
    else
        t->expired_held--;
    fq_window_remove(&s->win, r);
    uncap(s, t);
    run_free(s, r);
    return FQ_OK;
}

/* The tenants fq_sched_clear empties that are on the active list or in the
 * park heap (where they cannot be unlinked in O(1)) leave them here, in
 * one pass over each, idle. */
static void clear_prune(fq_sched *s)
{
    fq_tenant *prev = NULL;
    for (fq_tenant *t = s->head, *nx; t; t = nx) {
        nx = t->next;
        if (t->queued) {
            prev = t;
            continue;
        }
        if (prev)
            prev->next = nx;
        else
            s->head = nx;
        t->next = NULL;
        t->state = FQ_T_IDLE;
    }
    s->tail = prev;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < s->npark; i++) {
        fq_tenant *t = s->park[i].t;
        if (t->queued)
            s->park[kept++] = s->park[i];
        else
            t->state = FQ_T_IDLE;
    }
    s->npark = kept;
    /* Heapify what is left, by time. */
    for (uint32_t i = kept / 2; i-- > 0;) {
        heap_ent e = s->park[i];
        uint32_t j = i;
        for (;;) {
            uint32_t c = 2 * j + 1;
            if (c >= kept)
                break;
            if (c + 1 < kept && s->park[c + 1].wake < s->park[c].wake)
                c++;
            if (s->park[c].wake >= e.wake)
                break;
            s->park[j] = s->park[c];
            j = c;
        }
        s->park[j] = e;
    }
}

size_t fq_sched_clear(fq_sched *s, bool (*which)(void *arg, const fq_tenant *t),
                      void (*cb)(void *arg, const fq_run *r), void *arg)
{
    size_t n = 0;
    bool prune = false;
    for (fq_strmap_node *nd = fq_strmap_first(s->tenants); nd;
         nd = fq_strmap_next(s->tenants, nd)) {
        fq_tenant *t = tenant_of(nd);
        if (!which(arg, t))
            continue;
        while (t->queued) {
            fq_run *r = head_run(t), *rest = r->next;
            dequeue_head(s, t, r, rest);
            r->state = FQ_RUN_FREE;     /* let go: a caller's record is its own again */
            if (cb)
                cb(arg, r);
            run_free(s, r);
            n++;
        }
        t->deficit = 0;
        t->rate_at = FQ_RATE_NEVER;
        t->park_until = 0;
        switch (t->state) {
        case FQ_T_WAITING:
            wait_remove(s, t);
            t->state = FQ_T_IDLE;
            break;
        case FQ_T_CAPPED:
            capped_remove(s, t);
            t->state = FQ_T_IDLE;
            break;
        case FQ_T_ACTIVE:
        case FQ_T_PARKED:
            prune = true;
            break;
        default:
            break;
        }
    }
    if (prune)
        clear_prune(s);
    return n;
}

/* Whether run a was queued before run b. */
static int requeue_before(const fq_run *a, const fq_run *b)
{
    return a->id < b->id;
}

fq_status fq_sched_requeue(fq_sched *s, uint64_t id)
{
    return fq_sched_requeue_run(s, fq_window_find(&s->win, id));
}

fq_status fq_sched_requeue_run(fq_sched *s, fq_run *r)
{
    if (!dispatched(r))
        return FQ_ENOTFOUND;
    fq_tenant *t = undispatch(s, r);
    deficit_add(t, r->est);
    rate_correct(s, t, r->est);
    r->state = FQ_RUN_QUEUED;
    r->lane = NULL;             /* in the FIFO: the window's link is gone */
    /* Runs back from the window lead the queue in the order of their ids
     * (the order they were queued in: see fq_sched_requeue), whatever
     * order their failures came in; the usual case, a failure after those
     * of the runs before it, is O(1) at the end of them. */
    fq_run **at = &t->qhead;
    if (t->rq_last && requeue_before(t->rq_last, r)) {
        at = &t->rq_last->next;
    } else {
        for (uint32_t i = 0; i < t->requeued && requeue_before(*at, r); i++)
            at = &(*at)->next;
    }
    r->next = *at;
    *at = r;
    if (!r->next)
        t->qtail = r;
    if (!t->rq_last || requeue_before(t->rq_last, r))
        t->rq_last = r;
    t->requeued++;
    if (t->x)
        t->x->ring[r->cls].queued++;
    queue_add_tokens(s, t, +1, r->est);
    if (t->state == FQ_T_IDLE)
        schedule(s, t, join_round(s));
    else if (t->state == FQ_T_WAITING)
        rekey(s, t);
    else
        uncap(s, t);
    return FQ_OK;
}

size_t fq_sched_expire(fq_sched *s, uint64_t now,
                       void (*cb)(void *arg, const fq_run *r, enum fq_expiry what),
                       void *arg)
{
    size_t n = 0;
    fq_run *r;
    while ((r = fq_window_expire_one(&s->win, now))) {
        n++;
        s->expired++;
        r->tenant->expired++;
        r->tenant->expired_held++;
        slot_freed(s, r->tenant);
        if (cb)
            cb(arg, r, FQ_EXPIRY_LEASE);
    }
    while ((r = fq_window_evict_one(&s->win, now))) {
        r->tenant->expired_held--;
        if (cb)
            cb(arg, r, FQ_EXPIRY_EVICTED);
        run_free(s, r);
    }
    return n;
}

uint64_t fq_sched_next_unpark(const fq_sched *s)
{
    return s->npark ? s->park[0].wake : UINT64_MAX;
}

uint64_t fq_sched_next_deadline(const fq_sched *s)
{
    return fq_window_next_deadline(&s->win);
}

fq_run *fq_sched_run(fq_sched *s, uint64_t id)
{
    return fq_window_find(&s->win, id);
}

fq_status fq_sched_redispatched(fq_sched *s, uint64_t id, uint64_t now)
{
    return fq_sched_redispatched_run(s, fq_window_find(&s->win, id), now);
}

fq_status fq_sched_redispatched_run(fq_sched *s, fq_run *r, uint64_t now)
{
    if (!dispatched(r))
        return FQ_ENOTFOUND;
    fq_window_restart(&s->win, r, now);
    return FQ_OK;
}

/* ---- introspection ----------------------------------------------------- */

uint64_t fq_sched_tokens_ahead(const fq_sched *s, const fq_tenant *t, uint32_t est)
{
    uint64_t w = s->active_weight + (t->queued ? 0 : t->pol.weight);
    uint64_t mine = t->queued_tokens + charge_of(s, est);
    uint64_t bound = mine * w / t->pol.weight;
    uint64_t all = s->queued_tokens + charge_of(s, est);
    return bound < all ? bound : all;
}

uint64_t fq_sched_rate_wait(const fq_sched *s, const fq_tenant *t, uint32_t est, uint64_t now)
{
    (void)est;      /* the run waits for the runs before it, not for itself */
    if (!t->pol.tokens_per_minute)
        return 0;
    int64_t n = (int64_t)now * FQ_RATE_SCALE, floor = n - tau_of(s);
    int64_t at = rate_add(t->rate_at > floor ? t->rate_at : floor,
                          rate_cost(s, t, t->queued_tokens));
    return at > n ? (uint64_t)(at - n + FQ_RATE_SCALE - 1) / FQ_RATE_SCALE : 0;
}

void fq_sched_stats_get(const fq_sched *s, fq_sched_stats *out)
{
    *out = (fq_sched_stats){
        .visits = s->visits,
        .dispatched = s->dispatched,
        .expired = s->expired,
        .wakeups = s->wakeups,
        .lane_visits = s->lane_visits,
        .active = s->active,
        .tenants = (uint32_t)fq_strmap_count(s->tenants),
        .queued = s->queued,
        .queued_tokens = s->queued_tokens,
        .in_flight = s->win.runs,
        .in_flight_tokens = s->win.tokens,
        .expired_held = s->win.expired,
        .round = s->round,
        .parked = s->npark,
        .active_weight = s->active_weight,
    };
}

void fq_sched_foreach(fq_sched *s, void (*cb)(void *arg, fq_tenant *t), void *arg)
{
    for (fq_strmap_node *n = fq_strmap_first(s->tenants); n;
         n = fq_strmap_next(s->tenants, n))
        cb(arg, tenant_of(n));
}

size_t fq_sched_tenant_bytes(void)
{
    /* the struct (with its wheel links), its bucket in the table and its
     * slot in the heap; the wheel itself is 2 x FQ_WHEEL_SLOTS pointers
     * (16 KiB) per scheduler, whatever the number of tenants */
    return sizeof(fq_tenant) + sizeof(void *) + sizeof(heap_ent);
}

size_t fq_sched_run_bytes(void)
{
    return sizeof(fq_run);
}
