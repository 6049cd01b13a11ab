/* window.c -- the in-flight window: dispatched runs, their leases, and the global limits.
 *
 * Principles:
 *  - Every lease has the same length, so dispatch order is deadline order:
 *    the lease list is a FIFO and expiry only ever looks at its head. A run
 *    keeps its dispatch time and the deadline is computed from the timeout
 *    in force, so changing the timeout at run time keeps that order.
 *  - The window counts a run's slot from dispatch until its completion or
 *    its lease's end, whichever is first; an expired run keeps its record
 *    (bounded by max_expired, and in time by keep) so a late completion
 *    still reconciles once. Its eviction is handed to the caller, who owns
 *    what the run's handle refers to: nothing of a run is forgotten behind
 *    the caller's back.
 *  - Lookup by id is one index (lib/u64map, through the run's hnode) shared
 *    by FLIGHT and EXPIRED runs; it grows by doubling and never shrinks, so
 *    its cost is amortized over the runs. A caller that indexes its runs
 *    itself (the ledger, by submit sequence) has the window keep none: a run
 *    is indexed once per key, not by the caller and the window both.
 */
#include "window.h"

#define FQ_WINDOW_MIN_SLOTS 32

fq_status fq_window_init(fq_window *w, uint32_t max_runs, uint64_t max_tokens,
                         uint64_t timeout, uint32_t max_expired, bool by_id)
{
    *w = (fq_window){0};
    /* Ids are stream sequences or the scheduler's: no seed to hide. */
    if (by_id && fq_u64map_create(&w->by_id, FQ_U64MAP_KEY_OFFSET(fq_run, hnode, id),
                                  FQ_WINDOW_MIN_SLOTS, 0) != FQ_OK)
        return FQ_ENOMEM;
    fq_window_set_limits(w, max_runs, max_tokens, timeout, max_expired);
    return FQ_OK;
}

void fq_window_fini(fq_window *w)
{
    fq_u64map_destroy(w->by_id, NULL);
    w->by_id = NULL;
}

void fq_window_set_limits(fq_window *w, uint32_t max_runs, uint64_t max_tokens,
                          uint64_t timeout, uint32_t max_expired)
{
    w->max_runs = max_runs;
    w->max_tokens = max_tokens;
    w->timeout = timeout;
    w->max_expired = max_expired;
}

void fq_window_set_keep(fq_window *w, uint64_t keep)
{
    w->keep = keep;
}

bool fq_window_fits(const fq_window *w, uint32_t est)
{
    if (w->max_runs && w->runs >= w->max_runs)
        return false;
    if (w->max_tokens && w->runs && w->tokens + est > w->max_tokens)
        return false;
    return true;
}

/* Doubly linked FIFO helpers for the lease and expired lists. */
static void list_append(fq_run **head, fq_run **tail, fq_run *r)
{
    r->next = NULL;
    r->prev = *tail;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static void list_unlink(fq_run **head, fq_run **tail, fq_run *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        *head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        *tail = r->prev;
    r->next = r->prev = NULL;
}

static fq_status index_add(fq_window *w, fq_run *r)
{
    if (!w->by_id)
        return FQ_OK;
    if (fq_u64map_reserve(w->by_id) != FQ_OK)
        return FQ_ENOMEM;
    fq_u64map_insert(w->by_id, &r->hnode);
    return FQ_OK;
}

fq_status fq_window_add(fq_window *w, fq_run *r, uint64_t now)
{
    if (index_add(w, r) != FQ_OK)
        return FQ_ENOMEM;
    r->state = FQ_RUN_FLIGHT;
    r->t = now;
    list_append(&w->lease_head, &w->lease_tail, r);
    w->runs++;
    w->tokens += r->est;
    return FQ_OK;
}

fq_status fq_window_add_expired(fq_window *w, fq_run *r, uint64_t expired_at)
{
    if (index_add(w, r) != FQ_OK)
        return FQ_ENOMEM;
    r->state = FQ_RUN_EXPIRED;
    r->t = expired_at;
    list_append(&w->exp_head, &w->exp_tail, r);
    w->expired++;
    return FQ_OK;
}

fq_run *fq_window_find(const fq_window *w, uint64_t id)
{
    fq_u64map_node *n = w->by_id ? fq_u64map_find(w->by_id, id) : NULL;
    return n ? FQ_U64MAP_ENTRY(n, fq_run, hnode) : NULL;
}

static void release_slot(fq_window *w, fq_run *r)
{
    w->runs--;
    w->tokens -= r->est;
}

void fq_window_remove(fq_window *w, fq_run *r)
{
    if (w->by_id)
        fq_u64map_remove(w->by_id, &r->hnode);
    if (r->state == FQ_RUN_FLIGHT) {
        list_unlink(&w->lease_head, &w->lease_tail, r);
        release_slot(w, r);
    } else {
        list_unlink(&w->exp_head, &w->exp_tail, r);
        w->expired--;
    }
    r->state = FQ_RUN_FREE;
}

void fq_window_restart(fq_window *w, fq_run *r, uint64_t now)
{
    fq_run **head = r->state == FQ_RUN_FLIGHT ? &w->lease_head : &w->exp_head;
    fq_run **tail = r->state == FQ_RUN_FLIGHT ? &w->lease_tail : &w->exp_tail;
    list_unlink(head, tail, r);
    r->t = now;
    list_append(head, tail, r);
}

fq_run *fq_window_expire_one(fq_window *w, uint64_t now)
{
    fq_run *r = w->lease_head;
    if (!r || !w->timeout || r->t + w->timeout > now)
        return NULL;
    list_unlink(&w->lease_head, &w->lease_tail, r);
    release_slot(w, r);
    r->t += w->timeout;         /* from now on: when its lease ended */
    r->state = FQ_RUN_EXPIRED;
    list_append(&w->exp_head, &w->exp_tail, r);
    w->expired++;
    return r;
}

fq_run *fq_window_evict_one(fq_window *w, uint64_t now)
{
    fq_run *r = w->exp_head;
    if (!r)
        return NULL;
    bool old = w->keep && r->t <= now && now - r->t >= w->keep;
    if (w->expired <= w->max_expired && !old)
        return NULL;
    fq_window_remove(w, r);
    return r;
}

uint64_t fq_window_next_deadline(const fq_window *w)
{
    return w->lease_head && w->timeout ? w->lease_head->t + w->timeout : UINT64_MAX;
}
