/* rank.c -- an intrusive ordered set that finds the i-th element in O(log n): a ranking.
 *
 * Principles:
 *  - A treap with parent links and subtree sizes: the keys order it as a
 *    search tree, the priorities as a max-heap, so its shape is that of a
 *    tree built from a random insertion order (expected depth about
 *    2 ln n) whatever order the keys come in.
 *  - Rotations are the only change of shape and each keeps both orders;
 *    a rotation fixes the two sizes it changes, and inserting or removing
 *    fixes the sizes on the path to the root, so every size is always
 *    exact.
 *  - Removal rotates the node down to a leaf by its children's priorities
 *    and unlinks it: it compares no keys, so a caller may take out a node
 *    whose key has already changed.
 */
#include "rank.h"

static uint32_t rk_size(const fq_rank_node *n)
{
    return n ? n->size : 0;
}

/* splitmix64: every bit of the output depends on every bit of the state. */
static uint32_t rk_prio(fq_rank *r)
{
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* Make n the child (or the root) that old was. */
static void rk_replace(fq_rank *r, fq_rank_node *old, fq_rank_node *n)
{
    fq_rank_node *p = old->up;
    if (!p)
        r->root = n;
    else
        p->kid[p->kid[1] == old] = n;
    if (n)
        n->up = p;
}

/* Lift x above its parent, keeping the order: x's inner subtree moves to
 * the parent, which becomes x's child. */
static void rk_rotate_up(fq_rank *r, fq_rank_node *x)
{
    fq_rank_node *p = x->up;
    int d = p->kid[1] == x;
    fq_rank_node *inner = x->kid[!d];
    rk_replace(r, p, x);
    p->kid[d] = inner;
    if (inner)
        inner->up = p;
    x->kid[!d] = p;
    p->up = x;
    x->size = p->size;
    p->size = 1 + rk_size(p->kid[0]) + rk_size(p->kid[1]);
}

void fq_rank_init(fq_rank *r, fq_rank_cmp cmp, uint64_t seed)
{
    *r = (fq_rank){.cmp = cmp, .rng = seed};
}

void fq_rank_insert(fq_rank *r, fq_rank_node *x)
{
    *x = (fq_rank_node){.size = 1, .prio = rk_prio(r)};
    fq_rank_node *p = NULL, **at = &r->root;
    while (*at) {
        p = *at;
        p->size++;
        at = &p->kid[r->cmp(x, p) > 0];
    }
    *at = x;
    x->up = p;
    while (x->up && x->up->prio < x->prio)
        rk_rotate_up(r, x);
}

void fq_rank_remove(fq_rank *r, fq_rank_node *x)
{
    while (x->kid[0] && x->kid[1])
        rk_rotate_up(r, x->kid[x->kid[1]->prio > x->kid[0]->prio]);
    fq_rank_node *p = x->up;
    rk_replace(r, x, x->kid[0] ? x->kid[0] : x->kid[1]);
    for (; p; p = p->up)
        p->size--;
    *x = (fq_rank_node){0};
}

size_t fq_rank_size(const fq_rank *r)
{
    return rk_size(r->root);
}

fq_rank_node *fq_rank_at(const fq_rank *r, size_t i)
{
    fq_rank_node *n = r->root;
    while (n) {
        size_t left = rk_size(n->kid[0]);
        if (i == left)
            return n;
        if (i < left) {
            n = n->kid[0];
        } else {
            i -= left + 1;
            n = n->kid[1];
        }
    }
    return NULL;
}

fq_rank_node *fq_rank_next(const fq_rank_node *x)
{
    if (x->kid[1]) {
        x = x->kid[1];
        while (x->kid[0])
            x = x->kid[0];
        return (fq_rank_node *)x;
    }
    while (x->up && x->up->kid[1] == x)
        x = x->up;
    return x->up;
}

size_t fq_rank_index(const fq_rank_node *x)
{
    size_t i = rk_size(x->kid[0]);
    for (; x->up; x = x->up)
        if (x->up->kid[1] == x)
            i += rk_size(x->up->kid[0]) + 1;
    return i;
}
