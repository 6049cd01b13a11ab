/* pool.c -- size-class byte pools, and object pools of one type.
 *
 * Principles:
 *  - A slab serves one class. A slab of several blocks is a power of two of
 *    bytes (at least 64 KiB, room for at least 8 blocks) aligned to its own
 *    size, so a block's slab is its address with the low bits cleared; a
 *    block too large for that (past 256 KiB) has a slab of its own, the
 *    block just past the slab's header. Either way the class, which the
 *    sized free gives, says which: no header per block.
 *  - Aligned slabs are mapped from the system (twice their size, the rest
 *    unmapped), not taken from aligned_alloc: glibc serves a 64 KiB slab
 *    aligned to 64 KiB from a mapping of its own with a page of
 *    bookkeeping in front, which cost 13% more resident memory than the
 *    blocks (measured, 576-byte blocks); a mapping costs what is touched.
 *  - A slab's blocks are cut on demand (a bump offset), then recycled
 *    through the slab's own free list, so a new slab touches only the pages
 *    it hands out and an empty slab can be given back whole.
 *  - A class lists its slabs with room (taken from first) and its full ones,
 *    both doubly linked, so every step is O(1).
 *  - An object pool is the same idea for one size without the classes: a
 *    record freed goes to the front of the free list and is the next one
 *    handed out (warm in the cache); its chunks are never given back before
 *    fini, since the records it serves (a run's, a done id's) come and go
 *    with the backlog, never all at once.
 */
#define _DEFAULT_SOURCE         /* MAP_ANONYMOUS */
#include "pool.h"

#include <stdlib.h>
#include <sys/mman.h>

/* Under AddressSanitizer an object given back is poisoned until handed out
 * again (all but its free-list link), and a chunk's uncut objects too: a
 * record used after it was freed is reported, as malloc's would be, though
 * the pool never gives it back to malloc. Nothing otherwise. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define OPOOL_POISON(a, n) ASAN_POISON_MEMORY_REGION((a), (n))
#define OPOOL_UNPOISON(a, n) ASAN_UNPOISON_MEMORY_REGION((a), (n))
#else
#define OPOOL_POISON(a, n) ((void)(a), (void)(n))
#define OPOOL_UNPOISON(a, n) ((void)(a), (void)(n))
#endif

#define POOL_SLAB_MIN ((size_t)64 << 10)       /* bytes of the smallest slab */
#define POOL_SLAB_MAX ((size_t)4 << 20)        /* past this a block gets a slab of its own */
#define POOL_SLAB_BLOCKS 16                    /* blocks a shared slab holds at least */
#define POOL_MAX ((size_t)1 << 30)             /* the largest block a pool serves */

typedef struct pool_slab {
    struct pool_slab *next, *prev;  /* in its class's list of slabs with room, or of full ones */
    void *free;                     /* recycled blocks, linked through their first bytes */
    uint32_t used;                  /* blocks handed out */
    uint32_t carved;                /* blocks cut from the slab so far */
} pool_slab;

/* Blocks start this far into a slab, 16-byte aligned. */
#define POOL_HDR ((sizeof(pool_slab) + 15) & ~(size_t)15)

typedef struct pool_class {
    pool_slab *room;                /* slabs with a free or uncut block */
    pool_slab *full;                /* slabs without */
    size_t size;                    /* bytes of a block */
    size_t slab_bytes;              /* bytes of a slab, its header included */
    uint32_t cap;                   /* blocks a slab holds */
} pool_class;

struct fq_pool {
    pool_class *cls;
    size_t n_cls;
    size_t max;                     /* the largest request */
    fq_pool_stats st;
};

/* Classes: multiples of 16 up to 256, then sixteen to a doubling. */
static size_t pool_class_of(size_t n)
{
    if (n <= 256)
        return (n + 15) / 16 - 1;
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1));
    size_t step_bits = k - 4;
    size_t m = (n - ((size_t)1 << k) + ((size_t)1 << step_bits) - 1) >> step_bits;
    return 16 + (k - 8) * 16 + m - 1;
}

static size_t pool_size_of(size_t idx)
{
    if (idx < 16)
        return 16 * (idx + 1);
    size_t j = idx - 16, k = 8 + j / 16, m = j % 16 + 1;
    return ((size_t)1 << k) + (m << (k - 4));
}

fq_status fq_pool_create(fq_pool **out, size_t max)
{
    *out = NULL;
    if (max < 1 || max > POOL_MAX)
        return FQ_EINVAL;
    fq_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return FQ_ENOMEM;
    p->max = max;
    p->n_cls = pool_class_of(max) + 1;
    p->cls = calloc(p->n_cls, sizeof(*p->cls));
    if (!p->cls) {
        free(p);
        return FQ_ENOMEM;
    }
    for (size_t i = 0; i < p->n_cls; i++) {
        pool_class *c = &p->cls[i];
        c->size = pool_size_of(i);
        if (POOL_HDR + POOL_SLAB_BLOCKS * c->size <= POOL_SLAB_MAX) {
            size_t b = POOL_SLAB_MIN;
            while (b < POOL_HDR + POOL_SLAB_BLOCKS * c->size)
                b <<= 1;
            c->slab_bytes = b;
            c->cap = (uint32_t)((b - POOL_HDR) / c->size);
        } else {
            c->slab_bytes = POOL_HDR + c->size;
            c->cap = 1;
        }
    }
    *out = p;
    return FQ_OK;
}

static void pool_unlink(pool_slab **head, pool_slab *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        *head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

static void pool_push(pool_slab **head, pool_slab *s)
{
    s->prev = NULL;
    s->next = *head;
    if (*head)
        (*head)->prev = s;
    *head = s;
}

/* A slab's memory: aligned to its size when it holds several blocks. */
static void *pool_map(const pool_class *c)
{
    if (c->cap == 1)
        return malloc(c->slab_bytes);
    size_t b = c->slab_bytes;
    char *m = mmap(NULL, 2 * b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)m + b - 1) & ~(uintptr_t)(b - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (a < m + b)
        munmap(a + b, (size_t)(m + b - a));
    return a;
}

static void pool_unmap(const pool_class *c, pool_slab *s)
{
    if (c->cap == 1)
        free(s);
    else
        munmap(s, c->slab_bytes);
}

static void pool_free_list(const pool_class *c, pool_slab *s)
{
    for (pool_slab *nx; s; s = nx) {
        nx = s->next;
        pool_unmap(c, s);
    }
}

void fq_pool_destroy(fq_pool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_cls; i++) {
        pool_free_list(&p->cls[i], p->cls[i].room);
        pool_free_list(&p->cls[i], p->cls[i].full);
    }
    free(p->cls);
    free(p);
}

static pool_slab *pool_slab_new(fq_pool *p, pool_class *c)
{
    pool_slab *s = pool_map(c);
    if (!s)
        return NULL;
    s->next = s->prev = NULL;
    s->free = NULL;
    s->used = 0;
    s->carved = 0;
    p->st.reserved += c->slab_bytes;
    p->st.slabs++;
    p->st.made++;
    return s;
}

void *fq_pool_alloc(fq_pool *p, size_t size)
{
    if (size < 1 || size > p->max)
        return NULL;
    pool_class *c = &p->cls[pool_class_of(size)];
    pool_slab *s = c->room;
    if (!s) {
        if (!(s = pool_slab_new(p, c)))
            return NULL;
        pool_push(&c->room, s);
    }
    void *b;
    if (s->free) {
        b = s->free;
        s->free = *(void **)b;
    } else {
        b = (char *)s + POOL_HDR + (size_t)s->carved * c->size;
        s->carved++;
    }
    if (++s->used == c->cap) {
        pool_unlink(&c->room, s);
        pool_push(&c->full, s);
    }
    p->st.used += c->size;
    p->st.requested += size;
    p->st.blocks++;
    return b;
}

void fq_pool_free(fq_pool *p, void *block, size_t size)
{
    if (!block)
        return;
    pool_class *c = &p->cls[pool_class_of(size)];
    pool_slab *s = c->cap > 1
        ? (pool_slab *)((uintptr_t)block & ~(uintptr_t)(c->slab_bytes - 1))
        : (pool_slab *)(void *)((char *)block - POOL_HDR);
    *(void **)block = s->free;
    s->free = block;
    if (s->used-- == c->cap) {
        pool_unlink(&c->full, s);
        pool_push(&c->room, s);
    }
    p->st.used -= c->size;
    p->st.requested -= size;
    p->st.blocks--;
    /* An empty slab goes back to the system when another of its class has
     * room: the last one with room stays, so that the next request maps
     * nothing. */
    if (s->used == 0 && (c->room != s || s->next)) {
        pool_unlink(&c->room, s);
        pool_unmap(c, s);
        p->st.reserved -= c->slab_bytes;
        p->st.slabs--;
    }
}

size_t fq_pool_class_size(const fq_pool *p, size_t size)
{
    if (size < 1 || size > p->max)
        return 0;
    return p->cls[pool_class_of(size)].size;
}

size_t fq_pool_max(const fq_pool *p)
{
    return p->max;
}

void fq_pool_stats_get(fq_pool_stats *out, const fq_pool *p)
{
    *out = p->st;
}

/* ---- object pools -------------------------------------------------------- */

static size_t opool_round(size_t n, size_t align)
{
    return (n + align - 1) & ~(align - 1);
}

void fq_opool_init(fq_opool *p, size_t size, size_t align, size_t per_chunk)
{
    if (align < _Alignof(void *))
        align = _Alignof(void *);   /* a free object holds a pointer */
    if (size < sizeof(void *))
        size = sizeof(void *);
    *p = (fq_opool){.size = opool_round(size, align), .per_chunk = per_chunk ? per_chunk : 1,
                    .hdr = opool_round(sizeof(void *), align)};
}

void fq_opool_fini(fq_opool *p)
{
    if (!p)
        return;
    for (void *c = p->chunks, *nx; c; c = nx) {
        nx = *(void **)c;
        OPOOL_UNPOISON(c, p->hdr + p->size * p->per_chunk);
        free(c);
    }
    p->chunks = p->free = NULL;
    p->bump = p->end = NULL;
    p->nchunks = p->used = 0;
}

void *fq_opool_alloc(fq_opool *p)
{
    void *o = p->free;
    if (o) {
        p->free = *(void **)o;
        OPOOL_UNPOISON(o, p->size);
    } else {
        if (p->bump == p->end) {
            char *c = malloc(p->hdr + p->size * p->per_chunk);
            if (!c)
                return NULL;
            *(void **)(void *)c = p->chunks;
            p->chunks = c;
            p->nchunks++;
            p->bump = c + p->hdr;
            p->end = p->bump + p->size * p->per_chunk;
            OPOOL_POISON(p->bump, p->size * p->per_chunk);
        }
        o = p->bump;
        p->bump += p->size;
        OPOOL_UNPOISON(o, p->size);
    }
    p->used++;
    return o;
}

void fq_opool_free(fq_opool *p, void *obj)
{
    if (!obj)
        return;
    *(void **)obj = p->free;
    p->free = obj;
    p->used--;
    OPOOL_POISON((char *)obj + sizeof(void *), p->size - sizeof(void *));
}

size_t fq_opool_bytes(const fq_opool *p)
{
    return p->nchunks * (p->hdr + p->size * p->per_chunk);
}
