/* strmap.h -- an intrusive chained hash table keyed by byte strings. */
#ifndef FQ_STRMAP_H
#define FQ_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/*
 * The table links nodes the caller embeds in its own structs and never
 * allocates or frees them, so a lookup allocates nothing and a struct found
 * stays where it is while the table grows. A node's key lives in the
 * enclosing struct at a fixed distance from the node, given once to
 * fq_strmap_create (as in Linux's rhashtable): the table reads it there, so
 * a node costs 16 bytes and the key is stored once.
 *
 * Keys are byte strings with a length (they may contain NUL, so a key may be
 * several fields joined). The stored key must stay unchanged while its node
 * is in the table.
 *
 * Not thread-safe: one owner.
 */

typedef struct fq_strmap_node {
    struct fq_strmap_node *next;    /* chain */
    uint32_t hash;                  /* of the key, to rehash and compare fast */
    uint32_t len;                   /* bytes of the key */
} fq_strmap_node;

typedef struct fq_strmap fq_strmap;

/* Where a struct's key lies, relative to its embedded node: use as
 * FQ_STRMAP_KEY_OFFSET(struct tenant, node, id). */
#define FQ_STRMAP_KEY_OFFSET(type, node_member, key_member) \
    ((ptrdiff_t)offsetof(type, key_member) - (ptrdiff_t)offsetof(type, node_member))

/* The struct that embeds node n as its member `member`. */
#define FQ_STRMAP_ENTRY(n, type, member) \
    ((type *)(void *)((char *)(n) - offsetof(type, member)))

/* Create an empty table. key_offset: where a node's key lies from the node
 * (FQ_STRMAP_KEY_OFFSET). slots: the first number of chains, rounded up to
 * a power of two (at least 1); a table that never holds more nodes than
 * slots never grows. seed: mixed into the hash; a seed the outside cannot
 * guess keeps chains from being planned by whoever chooses the keys, 0
 * gives the same layout every run. On error (FQ_ENOMEM) *out is NULL. */
fq_status fq_strmap_create(fq_strmap **out, ptrdiff_t key_offset, size_t slots,
                           uint64_t seed);

/* Free the table. If release is not NULL it is handed every node still
 * held first (in no particular order), e.g. to free its struct. Safe on
 * NULL. */
void fq_strmap_destroy(fq_strmap *m, void (*release)(fq_strmap_node *n));

/* The hash of key[0..len) for this table, for fq_strmap_find_hashed and
 * fq_strmap_insert_hashed when a caller looks up a key and then inserts it. */
uint32_t fq_strmap_hash(const fq_strmap *m, const char *key, size_t len);

/* The node whose key is key[0..len), or NULL. Allocates nothing. */
fq_strmap_node *fq_strmap_find(const fq_strmap *m, const char *key, size_t len);
/* The same, with hash = fq_strmap_hash(m, key, len). */
fq_strmap_node *fq_strmap_find_hashed(const fq_strmap *m, const char *key,
                                      size_t len, uint32_t hash);

/* Make room for one more node, doubling the chains when the nodes would
 * outnumber them. FQ_ENOMEM if that fails; the table is unchanged then and
 * still works. */
fq_status fq_strmap_reserve(fq_strmap *m);

/* Link n, whose key (len bytes, at most UINT32_MAX) is already in place in
 * its struct. No node with the same key may be held. Never fails and never
 * allocates: it may only let the chains grow longer, so call
 * fq_strmap_reserve first wherever the table may grow. */
void fq_strmap_insert(fq_strmap *m, fq_strmap_node *n, size_t len);
/* The same, with hash = fq_strmap_hash(m, key, len). */
void fq_strmap_insert_hashed(fq_strmap *m, fq_strmap_node *n, size_t len,
                             uint32_t hash);

/* Unlink n, which the table holds. The table never shrinks. */
void fq_strmap_remove(fq_strmap *m, fq_strmap_node *n);

/* Nodes held. */
size_t fq_strmap_count(const fq_strmap *m);
/* Bytes of the table itself (its struct and chains), not of the nodes. */
size_t fq_strmap_bytes(const fq_strmap *m);

/* Iteration, in no particular order: for (n = fq_strmap_first(m); n;
 * n = fq_strmap_next(m, n)). The table must not change meanwhile, except
 * that n may be removed or freed once fq_strmap_next(m, n) has been had. */
fq_strmap_node *fq_strmap_first(const fq_strmap *m);
fq_strmap_node *fq_strmap_next(const fq_strmap *m, const fq_strmap_node *n);

#endif
