/* kept.h -- keys remembered until a time: a map by 64-bit key and a FIFO by expiry, over one object pool. */
#ifndef FQ_KEPT_H
#define FQ_KEPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "pool.h"
#include "u64map.h"

/*
 * What a module remembers for a while by a key (a run key's hash, a submit
 * sequence): the ledger's done ids, refusals of the moment and early
 * completions. A record embeds an fq_kept_node as its first member; the
 * list allocates records from its own pool, finds them by key, and hands
 * them back oldest first once their time (monotonic ms: a step of the wall
 * clock must not make a record forgotten early) has come. Records are kept
 * in the order they were added: a record whose time is later than the
 * next one's waits for it (remembered longer is harmless), so expiry costs
 * nothing but a look at the head.
 *
 * A record may be taken out of the map early (fq_kept_take): it is then
 * found no more, and freed when the FIFO reaches it. What a module does
 * with a record as it goes (an ack) it does between fq_kept_due and
 * fq_kept_drop.
 *
 * Not thread-safe: one owner.
 */

typedef struct fq_kept_node {
    uint64_t key;
    int64_t until;              /* monotonic ms from which it is forgotten; INT64_MIN:
                                   taken, out of the map */
    fq_u64map_node node;        /* by key */
    struct fq_kept_node *next;  /* FIFO by addition */
} fq_kept_node;

typedef struct fq_kept {
    fq_u64map *map;             /* fq_kept_node by key */
    fq_kept_node *head, *tail;  /* the FIFO */
    fq_opool pool;              /* the records */
} fq_kept;

/* An empty list of records of size bytes aligned to align, each beginning
 * with an fq_kept_node; slots and seed as fq_u64map_create's. FQ_ENOMEM:
 * *k is left empty (fq_kept_fini safe). */
fq_status fq_kept_init(fq_kept *k, size_t size, size_t align, size_t slots, uint64_t seed);
#define FQ_KEPT_INIT(k, type, slots, seed) \
    fq_kept_init((k), sizeof(type), _Alignof(type), (slots), (seed))
/* Free every record and the map. Safe on a list fq_kept_init left empty. */
void fq_kept_fini(fq_kept *k);

/* The first record with key in the map, or NULL. */
fq_kept_node *fq_kept_find(const fq_kept *k, uint64_t key);
/* A new record for key, kept until until, at the FIFO's tail and in the
 * map; the caller fills what follows its node. NULL out of memory: nothing
 * is remembered. */
fq_kept_node *fq_kept_add(fq_kept *k, uint64_t key, int64_t until);
/* Take n out of the map: found no more, it stays valid until the FIFO
 * reaches it (at the next fq_kept_due). */
void fq_kept_take(fq_kept *k, fq_kept_node *n);
/* The oldest record if its time has come by now (or it was taken), else
 * NULL. */
fq_kept_node *fq_kept_due(const fq_kept *k, int64_t now);
/* Forget the oldest record (out of the map too unless taken) and free it. */
void fq_kept_drop(fq_kept *k);
/* Forget and free every record match(n, arg) is true of, wherever it is. */
void fq_kept_drop_if(fq_kept *k, bool (*match)(const fq_kept_node *n, const void *arg),
                     const void *arg);
/* Records in the map (taken ones not counted). */
size_t fq_kept_count(const fq_kept *k);

#endif
