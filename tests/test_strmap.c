/* test_strmap.c -- unit tests of the intrusive string-keyed hash table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strmap.h"

/* A struct as a caller embeds the node: the key after it, a value around. */
typedef struct item {
    uint32_t value;
    fq_strmap_node node;
    int visits;
    char key[24];
    size_t len;
} item;

static const ptrdiff_t item_key = FQ_STRMAP_KEY_OFFSET(item, node, key);

static fq_strmap *map_new(size_t slots)
{
    fq_strmap *m = NULL;
    assert_int_equal(fq_strmap_create(&m, item_key, slots, 0x5eed), FQ_OK);
    assert_non_null(m);
    return m;
}

static void item_set(item *it, const char *key, size_t len, uint32_t value)
{
    memset(it, 0, sizeof(*it));
    memcpy(it->key, key, len);
    it->len = len;
    it->value = value;
}

static item *find(const fq_strmap *m, const char *key, size_t len)
{
    fq_strmap_node *n = fq_strmap_find(m, key, len);
    return n ? FQ_STRMAP_ENTRY(n, item, node) : NULL;
}

static void add(fq_strmap *m, item *it)
{
    assert_int_equal(fq_strmap_reserve(m), FQ_OK);
    fq_strmap_insert(m, &it->node, it->len);
}

/* n items keyed prefix0, prefix1, ..., valued by their index, each added
 * to m (after a reserve, unless reserve is false). */
static item *items_add(fq_strmap *m, const char *prefix, int n, bool reserve)
{
    item *it = calloc((size_t)n, sizeof(*it));
    assert_non_null(it);
    char k[24];
    for (int i = 0; i < n; i++) {
        int len = snprintf(k, sizeof(k), "%s%d", prefix, i);
        item_set(&it[i], k, (size_t)len, (uint32_t)i);
        if (reserve)
            add(m, &it[i]);
        else
            fq_strmap_insert(m, &it[i].node, it[i].len);
    }
    return it;
}

/* The item keyed prefix<i>, or NULL. */
static item *find_nth(const fq_strmap *m, const char *prefix, int i)
{
    char k[24];
    int len = snprintf(k, sizeof(k), "%s%d", prefix, i);
    return find(m, k, (size_t)len);
}

static void test_create_and_destroy(void **state)
{
    (void)state;
    fq_strmap *m = map_new(0);
    assert_int_equal(fq_strmap_count(m), 0);
    assert_null(fq_strmap_first(m));
    assert_null(fq_strmap_find(m, "a", 1));
    fq_strmap_destroy(m, NULL);
    fq_strmap_destroy(NULL, NULL);
}

/* Keys that differ only in length, or hold a NUL, are different keys. */
static void test_lengths_and_nul_bytes(void **state)
{
    (void)state;
    fq_strmap *m = map_new(4);
    item it[5];
    item_set(&it[0], "ab", 2, 0);
    item_set(&it[1], "abc", 3, 1);
    item_set(&it[2], "a\0b", 3, 2);
    item_set(&it[3], "a", 1, 3);
    item_set(&it[4], "", 0, 4);
    for (int i = 0; i < 5; i++)
        add(m, &it[i]);
    assert_ptr_equal(find(m, "ab", 2), &it[0]);
    assert_ptr_equal(find(m, "abc", 3), &it[1]);
    assert_ptr_equal(find(m, "a\0b", 3), &it[2]);
    assert_ptr_equal(find(m, "a", 1), &it[3]);
    assert_ptr_equal(find(m, "", 0), &it[4]);
    assert_null(find(m, "a\0", 2));
    assert_null(find(m, "abcd", 4));
    assert_null(find(m, "b", 1));
    fq_strmap_destroy(m, NULL);
}

/* With one chain and no reserve, every node collides: each is still found,
 * and removing from the head, the middle and the tail of the chain keeps
 * the others. */
static void test_collisions_in_one_chain(void **state)
{
    (void)state;
    fq_strmap *m = map_new(1);
    size_t one = fq_strmap_bytes(m);
    item *it = items_add(m, "k", 8, false);
    assert_int_equal(fq_strmap_count(m), 8);
    assert_int_equal(fq_strmap_bytes(m), one);     /* insert alone never grows */
    for (int i = 0; i < 8; i++)
        assert_ptr_equal(find_nth(m, "k", i), &it[i]);
    fq_strmap_remove(m, &it[7].node);    /* the head: inserted last */
    fq_strmap_remove(m, &it[4].node);
    fq_strmap_remove(m, &it[0].node);    /* the tail */
    assert_int_equal(fq_strmap_count(m), 5);
    for (int i = 0; i < 8; i++) {
        if (i == 7 || i == 4 || i == 0)
            assert_null(find_nth(m, "k", i));
        else
            assert_ptr_equal(find_nth(m, "k", i), &it[i]);
    }
    fq_strmap_destroy(m, NULL);
    free(it);
}

/* reserve doubles the chains only once the nodes would outnumber them, and
 * nodes keep their place in memory and are found after each growth. */
static void test_growth_by_doubling(void **state)
{
    (void)state;
    fq_strmap *m = map_new(3);          /* rounded up to 4 chains */
    size_t four = fq_strmap_bytes(m);
    item it[9];
    char k[8];
    for (int i = 0; i < 9; i++) {
        int len = snprintf(k, sizeof(k), "g%d", i);
        item_set(&it[i], k, (size_t)len, (uint32_t)i);
        add(m, &it[i]);
        size_t want = i < 4 ? 4 : i < 8 ? 8 : 16;
        assert_int_equal(fq_strmap_bytes(m) - four, (want - 4) * sizeof(void *));
        for (int j = 0; j <= i; j++)
            assert_ptr_equal(find_nth(m, "g", j), &it[j]);
    }
    fq_strmap_destroy(m, NULL);
}

/* The hashed variants agree with the plain ones. */
static void test_find_and_insert_hashed(void **state)
{
    (void)state;
    fq_strmap *m = map_new(2);
    item it;
    item_set(&it, "tenant-1", 8, 1);
    uint32_t h = fq_strmap_hash(m, "tenant-1", 8);
    assert_null(fq_strmap_find_hashed(m, "tenant-1", 8, h));
    assert_int_equal(fq_strmap_reserve(m), FQ_OK);
    fq_strmap_insert_hashed(m, &it.node, 8, h);
    assert_ptr_equal(find(m, "tenant-1", 8), &it);
    assert_ptr_equal(fq_strmap_find_hashed(m, "tenant-1", 8, h), &it.node);
    fq_strmap_destroy(m, NULL);
}

static void test_delete_then_reinsert(void **state)
{
    (void)state;
    fq_strmap *m = map_new(2);
    item a, b;
    item_set(&a, "a", 1, 1);
    item_set(&b, "b", 1, 2);
    add(m, &a);
    add(m, &b);
    fq_strmap_remove(m, &a.node);
    assert_null(find(m, "a", 1));
    assert_ptr_equal(find(m, "b", 1), &b);
    assert_int_equal(fq_strmap_count(m), 1);
    add(m, &a);
    assert_ptr_equal(find(m, "a", 1), &a);
    assert_int_equal(fq_strmap_count(m), 2);
    fq_strmap_destroy(m, NULL);
}

/* Iteration visits every node once, also when each is removed as it goes. */
static void test_iteration(void **state)
{
    (void)state;
    fq_strmap *m = map_new(4);
    enum { N = 300 };
    item *it = items_add(m, "i", N, true);
    for (fq_strmap_node *n = fq_strmap_first(m); n; n = fq_strmap_next(m, n))
        FQ_STRMAP_ENTRY(n, item, node)->visits++;
    for (int i = 0; i < N; i++)
        assert_int_equal(it[i].visits, 1);
    size_t seen = 0;
    for (fq_strmap_node *n = fq_strmap_first(m), *nx; n; n = nx) {
        nx = fq_strmap_next(m, n);
        FQ_STRMAP_ENTRY(n, item, node)->visits++;
        fq_strmap_remove(m, n);
        seen++;
    }
    assert_int_equal(seen, N);
    assert_int_equal(fq_strmap_count(m), 0);
    assert_null(fq_strmap_first(m));
    for (int i = 0; i < N; i++)
        assert_int_equal(it[i].visits, 2);
    fq_strmap_destroy(m, NULL);
    free(it);
}

static int released;

static void release_item(fq_strmap_node *n)
{
    released++;
    free(FQ_STRMAP_ENTRY(n, item, node));
}

/* Destroy hands every node held to release, and only those. */
static void test_destroy_releases_each_node(void **state)
{
    (void)state;
    fq_strmap *m = map_new(1);
    char k[16];
    for (int i = 0; i < 50; i++) {
        item *it = malloc(sizeof(*it));
        assert_non_null(it);
        int len = snprintf(k, sizeof(k), "r%d", i);
        item_set(it, k, (size_t)len, (uint32_t)i);
        add(m, it);
    }
    item *gone = find(m, "r7", 2);
    fq_strmap_remove(m, &gone->node);
    free(gone);
    released = 0;
    fq_strmap_destroy(m, release_item);
    assert_int_equal(released, 49);
}

/* 100,000 keys: all found with their values, half removed, the rest kept. */
static void test_many_keys(void **state)
{
    (void)state;
    enum { N = 100000 };
    fq_strmap *m = map_new(1);
    item *it = items_add(m, "tenant-", N, true);
    assert_int_equal(fq_strmap_count(m), N);
    for (int i = 0; i < N; i++) {
        item *x = find_nth(m, "tenant-", i);
        assert_non_null(x);
        assert_int_equal(x->value, i);
    }
    for (int i = 0; i < N; i += 2)
        fq_strmap_remove(m, &it[i].node);
    assert_int_equal(fq_strmap_count(m), N / 2);
    for (int i = 0; i < N; i++) {
        if (i % 2)
            assert_ptr_equal(find_nth(m, "tenant-", i), &it[i]);
        else
            assert_null(find_nth(m, "tenant-", i));
    }
    size_t seen = 0;
    for (fq_strmap_node *n = fq_strmap_first(m); n; n = fq_strmap_next(m, n))
        seen++;
    assert_int_equal(seen, N / 2);
    fq_strmap_destroy(m, NULL);
    free(it);
}

/* The seed changes the hash, and two tables of one seed hash alike, so a
 * seed of 0 lays a table out the same way every run. */
static void test_seed(void **state)
{
    (void)state;
    fq_strmap *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(fq_strmap_create(&a, 0, 8, 0), FQ_OK);
    assert_int_equal(fq_strmap_create(&b, 0, 8, 0), FQ_OK);
    assert_int_equal(fq_strmap_create(&c, 0, 8, 12345), FQ_OK);
    int differ = 0;
    char k[16];
    for (int i = 0; i < 16; i++) {
        int len = snprintf(k, sizeof(k), "s%d", i);
        assert_int_equal(fq_strmap_hash(a, k, (size_t)len), fq_strmap_hash(b, k, (size_t)len));
        differ += fq_strmap_hash(a, k, (size_t)len) != fq_strmap_hash(c, k, (size_t)len);
    }
    assert_true(differ > 0);
    fq_strmap_destroy(a, NULL);
    fq_strmap_destroy(b, NULL);
    fq_strmap_destroy(c, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_destroy),
        cmocka_unit_test(test_lengths_and_nul_bytes),
        cmocka_unit_test(test_collisions_in_one_chain),
        cmocka_unit_test(test_growth_by_doubling),
        cmocka_unit_test(test_find_and_insert_hashed),
        cmocka_unit_test(test_delete_then_reinsert),
        cmocka_unit_test(test_iteration),
        cmocka_unit_test(test_destroy_releases_each_node),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
