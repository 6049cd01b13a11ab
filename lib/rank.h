/* rank.h -- an intrusive ordered set that finds the i-th element in O(log n): a ranking. */
#ifndef FQ_RANK_H
#define FQ_RANK_H

#include <stddef.h>
#include <stdint.h>

/*
 * A page of a long ranking (the stats reply's tenants, 500 at offset
 * 40,000 of 200,000) must cost its own rows, not a walk or a sort of
 * everything before it. A ranking keeps its elements ordered by the
 * caller's comparison in a tree whose nodes count their subtree, so the
 * element at a position, and the position of an element, are found in
 * O(log n), and the next one in O(1) amortised. The tree is a treap: its
 * shape follows priorities drawn from the ranking's own generator, not the
 * keys, so no order of insertions (an adversary's tenant ids, runs queued
 * in ascending sizes) makes it deep: O(log n) expected depth whatever the
 * keys.
 *
 * Nodes are embedded in the caller's structs and never allocated or freed
 * here. The comparison must be a strict total order over the elements in
 * the ranking (no two compare equal), and an element's key must not change
 * while it is in: take it out, change it, put it back (fq_rank_remove
 * compares nothing, so the key may already have changed when it goes out).
 * Not thread-safe: one owner.
 */

typedef struct fq_rank_node {
    struct fq_rank_node *up;        /* parent; NULL at the root */
    struct fq_rank_node *kid[2];    /* [0]: ranks before, [1]: after */
    uint32_t size;                  /* nodes in this subtree, itself included */
    uint32_t prio;                  /* a parent's is at least its children's */
} fq_rank_node;

/* < 0 when a ranks before b, > 0 after; never 0 for two elements. */
typedef int (*fq_rank_cmp)(const fq_rank_node *a, const fq_rank_node *b);

typedef struct fq_rank {
    fq_rank_node *root;             /* NULL: empty */
    fq_rank_cmp cmp;
    uint64_t rng;                   /* the priorities' generator (splitmix64) */
} fq_rank;

/* The struct that embeds node n as its member `member`. */
#define FQ_RANK_ENTRY(n, type, member) \
    ((type *)(void *)((char *)(n) - offsetof(type, member)))

/* An empty ranking ordered by cmp; seed starts its priorities. */
void fq_rank_init(fq_rank *r, fq_rank_cmp cmp, uint64_t seed);
/* Put x, which is in no ranking, in its place. O(log n). */
void fq_rank_insert(fq_rank *r, fq_rank_node *x);
/* Take x, which is in r, out. Compares nothing. O(log n). */
void fq_rank_remove(fq_rank *r, fq_rank_node *x);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Elements in the ranking. */
size_t fq_rank_size(const fq_rank *r);
#endif
/* The element at position i (0: the first), or NULL past the last. O(log n). */
fq_rank_node *fq_rank_at(const fq_rank *r, size_t i);
/* The element after x, or NULL if x is the last. O(1) amortised over a walk. */
fq_rank_node *fq_rank_next(const fq_rank_node *x);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* x's position. O(log n). */
size_t fq_rank_index(const fq_rank_node *x);
#endif

#endif
