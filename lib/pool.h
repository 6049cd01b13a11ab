/* pool.h -- size-class byte pools: blocks of many sizes, no malloc per block once warm. */
#ifndef FQ_POOL_H
#define FQ_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/*
 * A pool hands out blocks of up to max bytes (its largest request, e.g. the
 * server's max_payload plus what a caller keeps beside it) from slabs, each
 * slab cut into blocks of one size class. Classes are multiples of 16 up to
 * 256, then spaced sixteen to a doubling (272, 288, ... 512, 544, ...), so
 * a block wastes at most a sixteenth of its size (at most 15 bytes up to
 * 256). A block
 * freed goes back to its slab's free list, and the next request of its class
 * takes it: once a working set is reached, allocating and freeing call no
 * malloc. A slab that empties is given back to the system unless it is
 * the only one of its class with room, so a burst's memory is returned
 * once it drains, and a pool that hovers at a slab's edge does not make and
 * give back the same slab in turn.
 *
 * Blocks are aligned to 16 bytes. The caller frees a block with the size it
 * asked for (a sized free, as C23's free_sized): the pool keeps no header
 * per block, and finds the block's slab from its address and its class.
 *
 * Not thread-safe: one owner.
 */

typedef struct fq_pool fq_pool;

/* What a pool holds, in bytes. */
typedef struct fq_pool_stats {
    size_t reserved;            /* slabs allocated from malloc, their headers included */
    size_t used;                /* blocks handed out, each counted at its class size */
    size_t requested;           /* what was asked for those blocks (used - requested: rounding) */
    size_t blocks;              /* blocks handed out */
    size_t slabs;               /* slabs held */
    uint64_t made;              /* slabs made so far: each one malloc or mapping */
} fq_pool_stats;

/* A pool for blocks of 1 to max bytes (max at least 1, at most 1 GiB).
 * On error (FQ_ENOMEM, FQ_EINVAL) *out is NULL. */
fq_status fq_pool_create(fq_pool **out, size_t max);
/* Free every slab, blocks still handed out included. Safe on NULL. */
void fq_pool_destroy(fq_pool *p);

/* A block of size bytes (1 to the pool's max), 16-byte aligned,
 * uninitialised; NULL when size is out of range or malloc failed. */
void *fq_pool_alloc(fq_pool *p, size_t size);
/* Give back a block that fq_pool_alloc(p, size) returned, with that same
 * size. Safe on NULL. */
void fq_pool_free(fq_pool *p, void *block, size_t size);

/* The bytes a request of size takes (its class); 0 when out of range. */
size_t fq_pool_class_size(const fq_pool *p, size_t size);
/* The pool's largest request. */
size_t fq_pool_max(const fq_pool *p);
void fq_pool_stats_get(fq_pool_stats *out, const fq_pool *p);

#endif
