/* test_rank.c -- the ranking (lib/rank): order, positions and shape against a sorted reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "rank.h"

typedef struct item {
    uint32_t key;               /* ranks by key, then id */
    uint32_t id;
    int in;                     /* in the ranking */
    fq_rank_node node;
} item;

static const item *of(const fq_rank_node *n)
{
    return FQ_RANK_ENTRY(n, const item, node);
}

static int item_cmp(const fq_rank_node *a, const fq_rank_node *b)
{
    const item *x = of(a), *y = of(b);
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int ref_cmp(const void *a, const void *b)
{
    return item_cmp(&(*(item *const *)a)->node, &(*(item *const *)b)->node);
}

/* The subtree under n: links back to its parent, exact sizes, priorities
 * no higher than the parent's, keys in order; appends it in order to out.
 * Returns its depth. */
static size_t check_sub(const fq_rank_node *n, const fq_rank_node *up, const item **out,
                        size_t *k)
{
    if (!n)
        return 0;
    assert_ptr_equal(n->up, up);
    if (up)
        assert_true(n->prio <= up->prio);
    size_t d0 = check_sub(n->kid[0], n, out, k);
    out[(*k)++] = of(n);
    size_t d1 = check_sub(n->kid[1], n, out, k);
    uint32_t s0 = n->kid[0] ? n->kid[0]->size : 0, s1 = n->kid[1] ? n->kid[1]->size : 0;
    assert_int_equal(n->size, 1 + s0 + s1);
    return 1 + (d0 > d1 ? d0 : d1);
}

/* r holds exactly the items marked in, in the reference order, and every
 * position, index and successor agrees with it. Returns the depth. */
static size_t check(const fq_rank *r, item *it, size_t n)
{
    item **ref = malloc(n * sizeof *ref);
    const item **got = malloc(n * sizeof *got);
    assert_non_null(ref);
    assert_non_null(got);
    size_t m = 0, k = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].in)
            ref[m++] = &it[i];
    qsort(ref, m, sizeof *ref, ref_cmp);
    size_t depth = check_sub(r->root, NULL, got, &k);
    assert_int_equal(k, m);
    assert_int_equal(fq_rank_size(r), m);
    const fq_rank_node *walk = m ? fq_rank_at(r, 0) : NULL;
    for (size_t i = 0; i < m; i++) {
        assert_ptr_equal(got[i], ref[i]);
        assert_ptr_equal(fq_rank_at(r, i), &ref[i]->node);
        assert_int_equal(fq_rank_index(&ref[i]->node), i);
        assert_ptr_equal(walk, &ref[i]->node);
        walk = fq_rank_next(walk);
    }
    assert_null(walk);
    assert_null(fq_rank_at(r, m));
    assert_null(fq_rank_at(r, m + 1000));
    free(ref);
    free(got);
    return depth;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random insertions, removals and changes of key (out, changed, back in),
 * with many equal keys told apart by id, checked against a sorted copy
 * after every step. */
static void test_random_against_reference(void **state)
{
    (void)state;
    enum { N = 300, STEPS = 3000 };
    item *it = calloc(N, sizeof *it);
    assert_non_null(it);
    for (uint32_t i = 0; i < N; i++)
        it[i].id = i;
    fq_rank r;
    fq_rank_init(&r, item_cmp, 42);
    check(&r, it, N);
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int step = 0; step < STEPS; step++) {
        item *x = &it[rnd(&s) % N];
        uint32_t op = (uint32_t)(rnd(&s) % 3);
        if (!x->in) {
            x->key = (uint32_t)(rnd(&s) % 20);
            fq_rank_insert(&r, &x->node);
            x->in = 1;
        } else if (op == 0) {
            fq_rank_remove(&r, &x->node);
            x->in = 0;
        } else {
            /* The key may change before it goes out: removal compares nothing. */
            x->key = (uint32_t)(rnd(&s) % 20);
            fq_rank_remove(&r, &x->node);
            fq_rank_insert(&r, &x->node);
        }
        check(&r, it, N);
    }
    /* Everything out, then the ranking is empty and usable again. */
    for (size_t i = 0; i < N; i++)
        if (it[i].in) {
            fq_rank_remove(&r, &it[i].node);
            it[i].in = 0;
        }
    check(&r, it, N);
    assert_null(r.root);
    fq_rank_insert(&r, &it[7].node);
    it[7].in = 1;
    check(&r, it, N);
    free(it);
}

/* Keys inserted in order, ascending then descending (a plain search tree
 * would be a list), and a position near the end of 100,000 found by a short
 * path: the depth stays near 2 ln n whatever order the keys come in. */
static void test_shape_ignores_key_order(void **state)
{
    (void)state;
    enum { N = 100000 };
    item *it = calloc(N, sizeof *it);
    assert_non_null(it);
    for (int pass = 0; pass < 2; pass++) {
        fq_rank r;
        fq_rank_init(&r, item_cmp, (uint64_t)pass);
        for (uint32_t i = 0; i < N; i++) {
            item *x = &it[pass ? N - 1 - i : i];
            *x = (item){.key = pass ? N - 1 - i : i, .id = 0, .in = 1};
            fq_rank_insert(&r, &x->node);
        }
        size_t depth = check(&r, it, N);
        assert_true(depth <= 60);   /* 2 ln n is 23; log2 n is 17 */
        assert_ptr_equal(fq_rank_at(&r, 80000), &it[80000].node);
        /* Half out, every other one: still exact and shallow. */
        for (uint32_t i = 0; i < N; i += 2) {
            fq_rank_remove(&r, &it[i].node);
            it[i].in = 0;
        }
        depth = check(&r, it, N);
        assert_true(depth <= 60);
        assert_ptr_equal(fq_rank_at(&r, 40000), &it[80001].node);
    }
    free(it);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_shape_ignores_key_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
