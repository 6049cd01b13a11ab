/* kept.c -- keys remembered until a time: a map by 64-bit key and a FIFO by expiry, over one object pool. */
/*
 * Principles:
 *  - One of each: the ledger's done ids, refusals and early completions
 *    were three copies of this list; what differs between them (what a
 *    record holds, what is done as it goes) stays with the caller.
 *  - No clock: time comes in with each call, as the caller's monotonic ms.
 *  - Nothing allocates once the pool and the map have grown to the working
 *    set.
 */
#include "kept.h"

#include <string.h>

#define KEPT_CHUNK 1024         /* records a pool chunk holds */

fq_status fq_kept_init(fq_kept *k, size_t size, size_t align, size_t slots, uint64_t seed)
{
    memset(k, 0, sizeof *k);
    fq_opool_init(&k->pool, size, align, KEPT_CHUNK);
    return fq_u64map_create(&k->map, FQ_U64MAP_KEY_OFFSET(fq_kept_node, node, key), slots,
                            seed);
}

void fq_kept_fini(fq_kept *k)
{
    fq_u64map_destroy(k->map, NULL);
    fq_opool_fini(&k->pool);
    k->map = NULL;
    k->head = k->tail = NULL;
}

fq_kept_node *fq_kept_find(const fq_kept *k, uint64_t key)
{
    fq_u64map_node *n = fq_u64map_find(k->map, key);
    return n ? FQ_U64MAP_ENTRY(n, fq_kept_node, node) : NULL;
}

fq_kept_node *fq_kept_add(fq_kept *k, uint64_t key, int64_t until)
{
    fq_kept_node *n;
    if (fq_u64map_reserve(k->map) != FQ_OK || !(n = fq_opool_alloc(&k->pool)))
        return NULL;
    *n = (fq_kept_node){.key = key, .until = until};
    fq_u64map_insert(k->map, &n->node);
    if (k->tail)
        k->tail->next = n;
    else
        k->head = n;
    k->tail = n;
    return n;
}

void fq_kept_take(fq_kept *k, fq_kept_node *n)
{
    fq_u64map_remove(k->map, &n->node);
    n->until = INT64_MIN;
}

fq_kept_node *fq_kept_due(const fq_kept *k, int64_t now)
{
    return k->head && k->head->until <= now ? k->head : NULL;
}

void fq_kept_drop(fq_kept *k)
{
    fq_kept_node *n = k->head;
    k->head = n->next;
    if (!k->head)
        k->tail = NULL;
    if (n->until != INT64_MIN)
        fq_u64map_remove(k->map, &n->node);
    fq_opool_free(&k->pool, n);
}

void fq_kept_drop_if(fq_kept *k, bool (*match)(const fq_kept_node *n, const void *arg),
                     const void *arg)
{
    fq_kept_node *prev = NULL;
    for (fq_kept_node *n = k->head, *nx; n; n = nx) {
        nx = n->next;
        if (!match(n, arg)) {
            prev = n;
            continue;
        }
        if (prev)
            prev->next = nx;
        else
            k->head = nx;
        if (n->until != INT64_MIN)
            fq_u64map_remove(k->map, &n->node);
        fq_opool_free(&k->pool, n);
    }
    k->tail = prev;
}

size_t fq_kept_count(const fq_kept *k)
{
    return fq_u64map_count(k->map);
}
