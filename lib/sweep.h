/* sweep.h -- a list visited in bounded slices, one pass per period. */
#ifndef FQ_SWEEP_H
#define FQ_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Housekeeping that must look at every element of a long list (every
 * tenant, once a second) would stall whoever owns the list for as long as
 * the walk takes. A sweep splits the walk: a pass begins at most once per
 * period, and the owner takes the pass's nodes a bounded number at a time
 * between its other work, so no turn waits longer than one slice. Nodes
 * are appended at the tail at any time (a pass under way reaches them too)
 * and the node just taken may be dropped; no other node may leave the list
 * while a pass is under way. Time is the caller's, in any unit: tests drive
 * it by hand.
 */

/* Embedded in what the list holds. */
typedef struct fq_sweep_node {
    struct fq_sweep_node *next;     /* insertion order */
} fq_sweep_node;

typedef struct fq_sweep {
    fq_sweep_node *head, *tail;     /* in insertion order */
    size_t n;                       /* nodes in the list */
    fq_sweep_node *prev;            /* the pass's last kept node; NULL: before head */
    fq_sweep_node *cur;             /* the node last taken and not yet passed; NULL: none */
    uint64_t period;                /* a pass begins at most this often */
    uint64_t next_at;               /* when the next pass may begin */
    bool running;                   /* a pass is under way */
    uint64_t passes;                /* passes begun, for tests and stats */
} fq_sweep;

/* An empty list whose first pass may begin at once. */
void fq_sweep_init(fq_sweep *s, uint64_t period);
void fq_sweep_append(fq_sweep *s, fq_sweep_node *x);
/* Begin a pass if none is under way and one is due at now: true when one
 * began (the caller resets what it gathers per pass). Passes begin a
 * period apart, start to start, or at once after one that took longer. */
bool fq_sweep_begin(fq_sweep *s, uint64_t now);
bool fq_sweep_running(const fq_sweep *s);
/* The pass's next node, or NULL when the pass is over (or none is under
 * way): each node in the list when the pass began, or appended during it,
 * is taken once. */
fq_sweep_node *fq_sweep_next(fq_sweep *s);
/* Take the node the last fq_sweep_next returned out of the list; the
 * caller frees it. */
void fq_sweep_drop(fq_sweep *s);

#define FQ_SWEEP_ENTRY(n, type, member) \
    ((type *)(void *)((char *)(n) - offsetof(type, member)))

#endif
