/* test_u64map.c -- unit tests of the intrusive u64-keyed hash table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "u64map.h"

/* A struct as a caller embeds the node: the key after it, a value around. */
typedef struct item {
    uint32_t value;
    fq_u64map_node node;
    int visits;
    uint64_t key;
} item;

static const ptrdiff_t item_key = FQ_U64MAP_KEY_OFFSET(item, node, key);

static fq_u64map *map_new(size_t slots, uint64_t seed)
{
    fq_u64map *m = NULL;
    assert_int_equal(fq_u64map_create(&m, item_key, slots, seed), FQ_OK);
    assert_non_null(m);
    return m;
}

static item *find(const fq_u64map *m, uint64_t key)
{
    fq_u64map_node *n = fq_u64map_find(m, key);
    return n ? FQ_U64MAP_ENTRY(n, item, node) : NULL;
}

static void add(fq_u64map *m, item *it)
{
    assert_int_equal(fq_u64map_reserve(m), FQ_OK);
    fq_u64map_insert(m, &it->node);
}

static void test_create_and_destroy(void **state)
{
    (void)state;
    fq_u64map *m = map_new(0, 0);
    assert_int_equal(fq_u64map_count(m), 0);
    assert_null(fq_u64map_first(m));
    assert_null(fq_u64map_find(m, 0));
    assert_null(fq_u64map_find(m, UINT64_MAX));
    fq_u64map_destroy(m, NULL);
    fq_u64map_destroy(NULL, NULL);
}

/* Sequential keys (stream sequences), with and without a seed, grow the
 * table by doubling only once nodes are more than twice the chains, and
 * every one is found in its place after each growth; keys around them are
 * not. */
static void test_sequences_grow_and_are_found(void **state)
{
    (void)state;
    uint64_t seeds[] = {0, 0x5eedULL, UINT64_MAX};
    for (size_t s = 0; s < 3; s++) {
        fq_u64map *m = map_new(3, seeds[s]);     /* rounded up to 4 chains */
        size_t four = fq_u64map_bytes(m);
        enum { N = 5000 };
        item *it = calloc(N, sizeof(*it));
        assert_non_null(it);
        for (size_t i = 0; i < N; i++) {
            it[i].key = 1 + i;
            it[i].value = (uint32_t)i;
            add(m, &it[i]);
            if (i < 17) {
                size_t want = i < 8 ? 4 : i < 16 ? 8 : 16;
                assert_int_equal(fq_u64map_bytes(m) - four, (want - 4) * sizeof(void *));
            }
        }
        assert_int_equal(fq_u64map_count(m), N);
        for (size_t i = 0; i < N; i++)
            assert_ptr_equal(find(m, 1 + i), &it[i]);
        assert_null(find(m, 0));
        assert_null(find(m, N + 1));
        fq_u64map_destroy(m, NULL);
        free(it);
    }
}

/* With one chain and no reserve every node collides: each is still found,
 * and removing from the head, the middle and the tail keeps the others. */
static void test_collisions_in_one_chain(void **state)
{
    (void)state;
    fq_u64map *m = map_new(1, 0);
    size_t one = fq_u64map_bytes(m);
    item it[8];
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 8; i++) {
        it[i].key = (uint64_t)i << 40;
        fq_u64map_insert(m, &it[i].node);
    }
    assert_int_equal(fq_u64map_bytes(m), one);     /* insert alone never grows */
    fq_u64map_remove(m, &it[7].node);   /* the head: inserted last */
    fq_u64map_remove(m, &it[4].node);
    fq_u64map_remove(m, &it[0].node);   /* the tail */
    assert_int_equal(fq_u64map_count(m), 5);
    for (int i = 0; i < 8; i++) {
        if (i == 7 || i == 4 || i == 0)
            assert_null(find(m, (uint64_t)i << 40));
        else
            assert_ptr_equal(find(m, (uint64_t)i << 40), &it[i]);
    }
    fq_u64map_destroy(m, NULL);
}

/* Nodes sharing a key (two run keys whose hashes agree) are all reached
 * through find and find_next, and no node of another key is. */
static void test_shared_keys(void **state)
{
    (void)state;
    fq_u64map *m = map_new(2, 7);
    item it[6];
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 6; i++) {
        it[i].key = i % 2 ? 42 : 1000 + (uint64_t)i;
        it[i].value = (uint32_t)i;
        add(m, &it[i]);
    }
    int seen = 0;
    for (fq_u64map_node *n = fq_u64map_find(m, 42); n; n = fq_u64map_find_next(m, n)) {
        item *x = FQ_U64MAP_ENTRY(n, item, node);
        assert_int_equal(x->key, 42);
        assert_int_equal(x->value % 2, 1);
        seen |= 1 << x->value;
    }
    assert_int_equal(seen, (1 << 1) | (1 << 3) | (1 << 5));
    fq_u64map_remove(m, &it[3].node);
    seen = 0;
    for (fq_u64map_node *n = fq_u64map_find(m, 42); n; n = fq_u64map_find_next(m, n))
        seen |= 1 << FQ_U64MAP_ENTRY(n, item, node)->value;
    assert_int_equal(seen, (1 << 1) | (1 << 5));
    assert_null(fq_u64map_find_next(m, &it[0].node));   /* 1000 is held once */
    fq_u64map_destroy(m, NULL);
}

/* Iteration visits every node once, also when each is removed as it goes,
 * and destroy hands every node still held to release. */
static int released;
static void release(fq_u64map_node *n)
{
    FQ_U64MAP_ENTRY(n, item, node)->visits += 100;
    released++;
}

static void test_iteration_and_release(void **state)
{
    (void)state;
    fq_u64map *m = map_new(4, 3);
    enum { N = 300 };
    item *it = calloc(N, sizeof(*it));
    assert_non_null(it);
    for (int i = 0; i < N; i++) {
        it[i].key = (uint64_t)i * 0x100000001ULL;
        add(m, &it[i]);
    }
    for (fq_u64map_node *n = fq_u64map_first(m); n; n = fq_u64map_next(m, n))
        FQ_U64MAP_ENTRY(n, item, node)->visits++;
    for (int i = 0; i < N; i++)
        assert_int_equal(it[i].visits, 1);
    /* Remove every other node while walking. */
    for (fq_u64map_node *n = fq_u64map_first(m), *nx; n; n = nx) {
        nx = fq_u64map_next(m, n);
        item *x = FQ_U64MAP_ENTRY(n, item, node);
        if (x->key % 2 == 0)
            fq_u64map_remove(m, n);
    }
    assert_int_equal(fq_u64map_count(m), N / 2);
    released = 0;
    fq_u64map_destroy(m, release);
    assert_int_equal(released, N / 2);
    for (int i = 0; i < N; i++)
        assert_int_equal(it[i].visits, 1 + (i % 2 ? 100 : 0));
    free(it);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_destroy),
        cmocka_unit_test(test_sequences_grow_and_are_found),
        cmocka_unit_test(test_collisions_in_one_chain),
        cmocka_unit_test(test_shared_keys),
        cmocka_unit_test(test_iteration_and_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
