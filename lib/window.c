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
 *  - Lookup by id is one hash shared by FLIGHT and EXPIRED runs; it grows by
 *    doubling and never shrinks, so its cost is amortized over the runs.
 */
#include "window.h"

#include <stdlib.h>

#define FQ_WINDOW_MIN_BUCKETS 64

static size_t slot_of(const fq_window *w, uint64_t id)
{
    /* Fibonacci hashing spreads sequential ids (stream sequences). */
    return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> 32) & (w->nbuckets - 1);
}

fq_status fq_window_init(fq_window *w, uint32_t max_runs, uint64_t max_tokens,
                         uint64_t timeout, uint32_t max_expired)
{
    *w = (fq_window){0};
    w->buckets = calloc(FQ_WINDOW_MIN_BUCKETS, sizeof(*w->buckets));
    if (!w->buckets)
        return FQ_ENOMEM;
    w->nbuckets = FQ_WINDOW_MIN_BUCKETS;
    fq_window_set_limits(w, max_runs, max_tokens, timeout, max_expired);
    return FQ_OK;
}

void fq_window_fini(fq_window *w)
{
    free(w->buckets);
    w->buckets = NULL;
    w->nbuckets = 0;
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

static fq_status grow(fq_window *w)
{
    size_t n = w->nbuckets * 2;
    fq_run **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return FQ_ENOMEM;
    fq_run **old = w->buckets;
    size_t on = w->nbuckets;
    w->buckets = nb;
    w->nbuckets = n;
    for (size_t i = 0; i < on; i++) {
        for (fq_run *r = old[i], *nx; r; r = nx) {
            nx = r->hnext;
            size_t b = slot_of(w, r->id);
            r->hnext = nb[b];
            nb[b] = r;
        }
    }
    free(old);
    return FQ_OK;
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

static fq_status hash_add(fq_window *w, fq_run *r)
{
    if (w->held >= w->nbuckets && grow(w) != FQ_OK)
        return FQ_ENOMEM;
    size_t b = slot_of(w, r->id);
    r->hnext = w->buckets[b];
    w->buckets[b] = r;
    w->held++;
    return FQ_OK;
}

fq_status fq_window_add(fq_window *w, fq_run *r, uint64_t now)
{
    if (hash_add(w, r) != FQ_OK)
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
    if (hash_add(w, r) != FQ_OK)
        return FQ_ENOMEM;
    r->state = FQ_RUN_EXPIRED;
    r->t = expired_at;
    list_append(&w->exp_head, &w->exp_tail, r);
    w->expired++;
    return FQ_OK;
}

fq_run *fq_window_find(const fq_window *w, uint64_t id)
{
    for (fq_run *r = w->buckets[slot_of(w, id)]; r; r = r->hnext)
        if (r->id == id)
            return r;
    return NULL;
}

static void unhash(fq_window *w, fq_run *r)
{
    fq_run **pp = &w->buckets[slot_of(w, r->id)];
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;
    r->hnext = NULL;
    w->held--;
}

static void release_slot(fq_window *w, fq_run *r)
{
    w->runs--;
    w->tokens -= r->est;
}

void fq_window_remove(fq_window *w, fq_run *r)
{
    unhash(w, r);
    if (r->state == FQ_RUN_FLIGHT) {
        list_unlink(&w->lease_head, &w->lease_tail, r);
        release_slot(w, r);
    } else {
        list_unlink(&w->exp_head, &w->exp_tail, r);
        w->expired--;
    }
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
