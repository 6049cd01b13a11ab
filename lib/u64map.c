/* u64map.c -- an intrusive chained hash table keyed by 64-bit integers.
 *
 * Principles:
 *  - lib/strmap's layout for integers: a power-of-two number of chains that
 *    doubles when the nodes would be more than twice as many, never shrinks,
 *    and grows in a step of its own (fq_u64map_reserve) before a link that
 *    cannot fail. Chains hold one to two nodes on average once grown: the
 *    chains cost 4 to 8 bytes a node, not 8 to 16 (the ledger holds two
 *    tables of every run buffered), and a lookup walks one node more at
 *    most on average, of keys that the hash spreads evenly.
 *  - The chain is picked by Fibonacci hashing of the key xor the seed: the
 *    keys it serves are either sequential (stream sequences), which the
 *    multiply spreads, or already keyed hashes (run keys), which nothing
 *    outside can steer. The node keeps no hash: the key is one load away.
 */
#include "u64map.h"

#include <stdlib.h>

struct fq_u64map {
    fq_u64map_node **slot;
    size_t mask;                /* chains - 1 */
    size_t n;                   /* nodes held */
    ptrdiff_t key_offset;       /* from a node to its key */
    uint64_t seed;
};

static uint64_t u64map_key(const fq_u64map *m, const fq_u64map_node *n)
{
    const uint64_t *k = (const uint64_t *)(const void *)((const char *)n + m->key_offset);
    return *k;
}

static size_t u64map_index(uint64_t seed, size_t mask, uint64_t key)
{
    /* The high half of the product depends on every bit of the key. */
    return (size_t)(((key ^ seed) * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

static fq_u64map_node **u64map_chain(const fq_u64map *m, uint64_t key)
{
    return &m->slot[u64map_index(m->seed, m->mask, key)];
}

fq_status fq_u64map_create(fq_u64map **out, ptrdiff_t key_offset, size_t slots, uint64_t seed)
{
    size_t n = 1;
    fq_u64map *m;

    *out = NULL;
    while (n < slots)
        n <<= 1;
    m = calloc(1, sizeof(*m));
    if (!m)
        return FQ_ENOMEM;
    m->slot = calloc(n, sizeof(*m->slot));
    if (!m->slot) {
        free(m);
        return FQ_ENOMEM;
    }
    m->mask = n - 1;
    m->key_offset = key_offset;
    m->seed = seed;
    *out = m;
    return FQ_OK;
}

void fq_u64map_destroy(fq_u64map *m, void (*release)(fq_u64map_node *n))
{
    if (!m)
        return;
    if (release) {
        for (fq_u64map_node *n = fq_u64map_first(m), *nx; n; n = nx) {
            nx = fq_u64map_next(m, n);
            release(n);
        }
    }
    free(m->slot);
    free(m);
}

static fq_u64map_node *u64map_scan(const fq_u64map *m, fq_u64map_node *n, uint64_t key)
{
    for (; n; n = n->next)
        if (u64map_key(m, n) == key)
            return n;
    return NULL;
}

fq_u64map_node *fq_u64map_find(const fq_u64map *m, uint64_t key)
{
    return u64map_scan(m, *u64map_chain(m, key), key);
}

fq_u64map_node *fq_u64map_find_next(const fq_u64map *m, const fq_u64map_node *n)
{
    return u64map_scan(m, n->next, u64map_key(m, n));
}

fq_status fq_u64map_reserve(fq_u64map *m)
{
    if (m->n < 2 * (m->mask + 1))
        return FQ_OK;
    size_t nb = (m->mask + 1) * 2;
    fq_u64map_node **slot = calloc(nb, sizeof(*slot));
    if (!slot)
        return FQ_ENOMEM;
    for (size_t i = 0; i <= m->mask; i++) {
        for (fq_u64map_node *n = m->slot[i], *nx; n; n = nx) {
            nx = n->next;
            size_t j = u64map_index(m->seed, nb - 1, u64map_key(m, n));
            n->next = slot[j];
            slot[j] = n;
        }
    }
    free(m->slot);
    m->slot = slot;
    m->mask = nb - 1;
    return FQ_OK;
}

void fq_u64map_insert(fq_u64map *m, fq_u64map_node *n)
{
    fq_u64map_node **head = u64map_chain(m, u64map_key(m, n));

    n->next = *head;
    *head = n;
    m->n++;
}

void fq_u64map_remove(fq_u64map *m, fq_u64map_node *n)
{
    fq_u64map_node **pp = u64map_chain(m, u64map_key(m, n));

    while (*pp != n)
        pp = &(*pp)->next;
    *pp = n->next;
    n->next = NULL;
    m->n--;
}

size_t fq_u64map_count(const fq_u64map *m)
{
    return m->n;
}

size_t fq_u64map_bytes(const fq_u64map *m)
{
    return sizeof(*m) + (m->mask + 1) * sizeof(*m->slot);
}

/* The first node of the first non-empty chain from chain i on, or NULL. */
static fq_u64map_node *u64map_from(const fq_u64map *m, size_t i)
{
    for (; i <= m->mask; i++)
        if (m->slot[i])
            return m->slot[i];
    return NULL;
}

fq_u64map_node *fq_u64map_first(const fq_u64map *m)
{
    return u64map_from(m, 0);
}

fq_u64map_node *fq_u64map_next(const fq_u64map *m, const fq_u64map_node *n)
{
    return n->next ? n->next
                   : u64map_from(m, u64map_index(m->seed, m->mask, u64map_key(m, n)) + 1);
}
