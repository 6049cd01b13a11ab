/* strmap.c -- an intrusive chained hash table keyed by byte strings.
 *
 * Principles:
 *  - Chained, with a power-of-two number of chains that doubles when the
 *    nodes would outnumber them, so a chain holds one node on average and
 *    growth is amortized. It never shrinks: the tables it serves (tenants,
 *    plans, learned estimates) only ever reach a working size.
 *  - Growing is a separate step (fq_strmap_reserve) from linking: a caller
 *    that must change nothing on error reserves first, then allocates its
 *    node, then links it, which cannot fail.
 *  - Each node keeps its full hash, so rehashing never reads a key and a
 *    lookup compares keys only when the hashes agree.
 */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

struct fq_strmap {
    fq_strmap_node **slot;
    size_t mask;                /* chains - 1 */
    size_t n;                   /* nodes held */
    ptrdiff_t key_offset;       /* from a node to its key */
    uint64_t seed;
};

static const char *strmap_key(const fq_strmap *m, const fq_strmap_node *n)
{
    return (const char *)n + m->key_offset;
}

static fq_strmap_node **strmap_chain(const fq_strmap *m, uint32_t hash)
{
    return &m->slot[hash & m->mask];
}

uint32_t fq_strmap_hash(const fq_strmap *m, const char *key, size_t len)
{
    /* SipHash keyed by the seed: keys such as tenant ids come from clients,
     * and with a seed they cannot read, they cannot pick ids that share a
     * chain. Its low bits depend on every byte, so they pick the chain. */
    return (uint32_t)fq_siphash(m->seed, m->seed ^ 0x736d61705f6b3121ULL, key, len);
}

fq_status fq_strmap_create(fq_strmap **out, ptrdiff_t key_offset, size_t slots,
                           uint64_t seed)
{
    size_t n = 1;
    fq_strmap *m;

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

void fq_strmap_destroy(fq_strmap *m, void (*release)(fq_strmap_node *n))
{
    if (!m)
        return;
    if (release) {
        for (fq_strmap_node *n = fq_strmap_first(m), *nx; n; n = nx) {
            nx = fq_strmap_next(m, n);
            release(n);
        }
    }
    free(m->slot);
    free(m);
}

fq_strmap_node *fq_strmap_find_hashed(const fq_strmap *m, const char *key,
                                      size_t len, uint32_t hash)
{
    for (fq_strmap_node *n = *strmap_chain(m, hash); n; n = n->next)
        if (n->hash == hash && n->len == len && memcmp(strmap_key(m, n), key, len) == 0)
            return n;
    return NULL;
}

fq_strmap_node *fq_strmap_find(const fq_strmap *m, const char *key, size_t len)
{
    return fq_strmap_find_hashed(m, key, len, fq_strmap_hash(m, key, len));
}

fq_status fq_strmap_reserve(fq_strmap *m)
{
    if (m->n <= m->mask)
        return FQ_OK;
    size_t nb = (m->mask + 1) * 2;
    fq_strmap_node **slot = calloc(nb, sizeof(*slot));
    if (!slot)
        return FQ_ENOMEM;
    for (size_t i = 0; i <= m->mask; i++) {
        for (fq_strmap_node *n = m->slot[i], *nx; n; n = nx) {
            nx = n->next;
            n->next = slot[n->hash & (nb - 1)];
            slot[n->hash & (nb - 1)] = n;
        }
    }
    free(m->slot);
    m->slot = slot;
    m->mask = nb - 1;
    return FQ_OK;
}

void fq_strmap_insert_hashed(fq_strmap *m, fq_strmap_node *n, size_t len,
                             uint32_t hash)
{
    fq_strmap_node **head = strmap_chain(m, hash);

    n->hash = hash;
    n->len = (uint32_t)len;
    n->next = *head;
    *head = n;
    m->n++;
}

void fq_strmap_insert(fq_strmap *m, fq_strmap_node *n, size_t len)
{
    fq_strmap_insert_hashed(m, n, len, fq_strmap_hash(m, strmap_key(m, n), len));
}

void fq_strmap_remove(fq_strmap *m, fq_strmap_node *n)
{
    fq_strmap_node **pp = strmap_chain(m, n->hash);

    while (*pp != n)
        pp = &(*pp)->next;
    *pp = n->next;
    n->next = NULL;
    m->n--;
}

size_t fq_strmap_count(const fq_strmap *m)
{
    return m->n;
}

size_t fq_strmap_bytes(const fq_strmap *m)
{
    return sizeof(*m) + (m->mask + 1) * sizeof(*m->slot);
}

/* The first node of the first non-empty chain from chain i on, or NULL. */
static fq_strmap_node *strmap_from(const fq_strmap *m, size_t i)
{
    for (; i <= m->mask; i++)
        if (m->slot[i])
            return m->slot[i];
    return NULL;
}

fq_strmap_node *fq_strmap_first(const fq_strmap *m)
{
    return strmap_from(m, 0);
}

fq_strmap_node *fq_strmap_next(const fq_strmap *m, const fq_strmap_node *n)
{
    return n->next ? n->next : strmap_from(m, (n->hash & m->mask) + 1);
}
