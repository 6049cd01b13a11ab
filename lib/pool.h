/* pool.h -- size-class byte pools, and object pools of one type: no malloc per block once warm. */
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

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The bytes a request of size takes (its class); 0 when out of range. */
size_t fq_pool_class_size(const fq_pool *p, size_t size);
/* The pool's largest request. */
size_t fq_pool_max(const fq_pool *p);
void fq_pool_stats_get(fq_pool_stats *out, const fq_pool *p);
#endif

/*
 * An object pool: records of one type (one size), handed out from chunks of
 * many and recycled through a free list, for a module that keeps many small
 * records of a few kinds (the ledger's runs, names, done ids...). A chunk's
 * objects are cut on demand (a bump pointer), so a new chunk touches only
 * the pages it hands out; a freed object holds the free list's link in its
 * first bytes, so an object carries no field for it. Chunks are kept until
 * fq_opool_fini: a pool's memory is its high-water mark, and allocating and
 * freeing call no malloc once it is reached.
 *
 * Not thread-safe: one owner.
 */
typedef struct fq_opool {
    size_t size;                /* bytes an object takes: its type's, rounded up to its
                                   alignment, at least a pointer's */
    size_t per_chunk;           /* objects a chunk holds */
    size_t hdr;                 /* bytes before a chunk's first object (its link) */
    void *free;                 /* objects given back, linked through their first bytes */
    char *bump, *end;           /* the newest chunk's objects not handed out yet */
    void *chunks;               /* every chunk, linked through its header, for fini */
    size_t nchunks;             /* chunks made */
    size_t used;                /* objects handed out */
} fq_opool;

/* A pool of objects of size bytes aligned to align (a power of two, at most
 * malloc's), per_chunk (at least 1) to a chunk. Allocates nothing until the first object. */
void fq_opool_init(fq_opool *p, size_t size, size_t align, size_t per_chunk);
/* The same for objects of type. */
#define FQ_OPOOL_INIT(p, type, per_chunk) \
    fq_opool_init((p), sizeof(type), _Alignof(type), (per_chunk))
/* Free every chunk, objects still handed out included. The pool is empty
 * and usable again after. Safe on NULL. */
void fq_opool_fini(fq_opool *p);
/* An object, uninitialised; NULL when malloc failed. */
void *fq_opool_alloc(fq_opool *p);
/* Give back an object that fq_opool_alloc(p) returned. Safe on NULL. */
void fq_opool_free(fq_opool *p, void *obj);
/* Bytes of the chunks held. */
size_t fq_opool_bytes(const fq_opool *p);

#endif
