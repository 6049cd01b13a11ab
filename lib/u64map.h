/* u64map.h -- an intrusive chained hash table keyed by 64-bit integers. */
#ifndef FQ_U64MAP_H
#define FQ_U64MAP_H

#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/*
 * The sibling of lib/strmap for integer keys: stream sequences, and the
 * keyed hashes of run keys (tenant, run id). It links nodes the caller
 * embeds in its own structs and never allocates or frees them, so a lookup
 * allocates nothing and a struct found stays where it is while the table
 * grows. A node's key lives in the enclosing struct at a fixed distance
 * from the node, given once to fq_u64map_create, so a node costs one
 * pointer (8 bytes) and the key is stored once.
 *
 * Several nodes may share a key (two run keys whose 64-bit hashes agree):
 * fq_u64map_find gives the first, fq_u64map_find_next the others, and the
 * caller tells them apart by what else its struct holds. The stored key
 * must stay unchanged while its node is in the table.
 *
 * Not thread-safe: one owner.
 */

typedef struct fq_u64map_node {
    struct fq_u64map_node *next;    /* chain */
} fq_u64map_node;

typedef struct fq_u64map fq_u64map;

/* Where a struct's key (a uint64_t) lies, relative to its embedded node:
 * use as FQ_U64MAP_KEY_OFFSET(struct run, by_seq, seq). */
#define FQ_U64MAP_KEY_OFFSET(type, node_member, key_member) \
    ((ptrdiff_t)offsetof(type, key_member) - (ptrdiff_t)offsetof(type, node_member))

/* The struct that embeds node n as its member `member`. */
#define FQ_U64MAP_ENTRY(n, type, member) \
    ((type *)(void *)((char *)(n) - offsetof(type, member)))

/* Create an empty table. key_offset: where a node's key lies from the node
 * (FQ_U64MAP_KEY_OFFSET). slots: the first number of chains, rounded up to
 * a power of two (at least 1); a table that never holds more than twice as
 * many nodes as chains never grows. seed: mixed into the hash (0: the same layout every
 * run). On error (FQ_ENOMEM) *out is NULL. */
fq_status fq_u64map_create(fq_u64map **out, ptrdiff_t key_offset, size_t slots, uint64_t seed);

/* Free the table. If release is not NULL it is handed every node still
 * held first (in no particular order). Safe on NULL. */
void fq_u64map_destroy(fq_u64map *m, void (*release)(fq_u64map_node *n));

/* The first node whose key is key, or NULL. Allocates nothing. */
fq_u64map_node *fq_u64map_find(const fq_u64map *m, uint64_t key);
/* The next node after n (which the table holds) with n's key, or NULL. */
fq_u64map_node *fq_u64map_find_next(const fq_u64map *m, const fq_u64map_node *n);

/* Make room for one more node, doubling the chains when the nodes would be
 * more than twice as many. FQ_ENOMEM if that fails; the table is unchanged then and
 * still works. */
fq_status fq_u64map_reserve(fq_u64map *m);

/* Link n, whose key is already in place in its struct. Never fails and
 * never allocates: it may only let the chains grow longer, so call
 * fq_u64map_reserve first wherever the table may grow. */
void fq_u64map_insert(fq_u64map *m, fq_u64map_node *n);

/* Unlink n, which the table holds. The table never shrinks. */
void fq_u64map_remove(fq_u64map *m, fq_u64map_node *n);

/* Nodes held. */
size_t fq_u64map_count(const fq_u64map *m);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Bytes of the table itself (its struct and chains), not of the nodes. */
size_t fq_u64map_bytes(const fq_u64map *m);
#endif

/* Iteration, in no particular order: for (n = fq_u64map_first(m); n;
 * n = fq_u64map_next(m, n)). The table must not change meanwhile, except
 * that n may be removed or freed once fq_u64map_next(m, n) has been had. */
fq_u64map_node *fq_u64map_first(const fq_u64map *m);
fq_u64map_node *fq_u64map_next(const fq_u64map *m, const fq_u64map_node *n);

#endif
