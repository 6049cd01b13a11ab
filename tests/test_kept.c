/* test_kept.c -- unit tests of the remembered-key list (lib/kept). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kept.h"

typedef struct rec {
    fq_kept_node k;
    uint32_t part;
} rec;

static fq_kept kept_new(void)
{
    fq_kept k;
    assert_int_equal(FQ_KEPT_INIT(&k, rec, 4, 7), FQ_OK);
    return k;
}

static rec *add(fq_kept *k, uint64_t key, int64_t until, uint32_t part)
{
    rec *r = (rec *)(void *)fq_kept_add(k, key, until);
    assert_non_null(r);
    r->part = part;
    return r;
}

/* Keys added in order are found until their time, then handed back oldest
 * first, one at a time, never before their time. */
static void test_found_until_due(void **state)
{
    (void)state;
    fq_kept k = kept_new();
    for (uint64_t i = 0; i < 100; i++)
        add(&k, 1000 + i, (int64_t)(10 + i), (uint32_t)i);
    assert_int_equal(fq_kept_count(&k), 100);
    assert_null(fq_kept_due(&k, 9));
    for (uint64_t i = 0; i < 100; i++) {
        rec *r = (rec *)(void *)fq_kept_find(&k, 1000 + i);
        assert_non_null(r);
        assert_int_equal(r->part, i);
    }
    assert_null(fq_kept_find(&k, 999));
    int64_t now = 59;       /* keys 1000..1049 are due */
    size_t dropped = 0;
    for (fq_kept_node *n; (n = fq_kept_due(&k, now)); dropped++) {
        assert_int_equal(n->key, 1000 + dropped);
        fq_kept_drop(&k);
    }
    assert_int_equal(dropped, 50);
    assert_null(fq_kept_find(&k, 1049));
    assert_non_null(fq_kept_find(&k, 1050));
    assert_int_equal(fq_kept_count(&k), 50);
    fq_kept_fini(&k);
}

/* A record taken is found no more and not counted, yet stays in the FIFO
 * until it is reached there, whatever its time was; a later one behind a
 * longer-kept head waits for it. */
static void test_taken_then_dropped(void **state)
{
    (void)state;
    fq_kept k = kept_new();
    rec *a = add(&k, 1, 1000, 0);
    add(&k, 2, 5, 0);
    fq_kept_take(&k, &a->k);
    assert_null(fq_kept_find(&k, 1));
    assert_int_equal(fq_kept_count(&k), 1);
    assert_ptr_equal(fq_kept_due(&k, 0), &a->k);   /* taken: due at once */
    fq_kept_drop(&k);
    assert_null(fq_kept_due(&k, 4));
    assert_non_null(fq_kept_due(&k, 5));
    fq_kept_drop(&k);
    assert_null(fq_kept_due(&k, INT64_MAX));
    assert_int_equal(fq_kept_count(&k), 0);
    /* empty again, it works as new */
    add(&k, 3, 1, 0);
    assert_non_null(fq_kept_find(&k, 3));
    fq_kept_fini(&k);
}

static bool of_part(const fq_kept_node *n, const void *part)
{
    return ((const rec *)(const void *)n)->part == *(const uint32_t *)part;
}

/* Dropping by a predicate keeps the others in order, the tail included
 * (an add after it links behind the last one kept). */
static void test_drop_if_keeps_order(void **state)
{
    (void)state;
    fq_kept k = kept_new();
    for (uint64_t i = 0; i < 20; i++)
        add(&k, i, (int64_t)i, (uint32_t)(i % 3));
    rec *t = (rec *)(void *)fq_kept_find(&k, 7);
    fq_kept_take(&k, &t->k);        /* a taken one of part 1 goes too */
    uint32_t part = 1;
    fq_kept_drop_if(&k, of_part, &part);
    add(&k, 100, 100, 1);
    uint64_t want[] = {0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 100};
    size_t i = 0;
    for (fq_kept_node *n; (n = fq_kept_due(&k, INT64_MAX)); i++) {
        assert_true(i < sizeof want / sizeof want[0]);
        assert_int_equal(n->key, want[i]);
        fq_kept_drop(&k);
    }
    assert_int_equal(i, sizeof want / sizeof want[0]);
    assert_int_equal(fq_kept_count(&k), 0);
    part = 0;
    fq_kept_drop_if(&k, of_part, &part);    /* on an empty list */
    add(&k, 5, 5, 0);
    fq_kept_drop_if(&k, of_part, &part);    /* its only record: empty, tail too */
    add(&k, 6, 6, 0);
    assert_ptr_equal(k.head, k.tail);
    fq_kept_fini(&k);
}

/* Churn past the working set allocates no more chunks: records are reused. */
static void test_churn_reuses(void **state)
{
    (void)state;
    fq_kept k = kept_new();
    int64_t now = 0;
    for (uint64_t i = 0; i < 3000; i++)
        add(&k, i, now + 100, 0);
    size_t chunks = k.pool.nchunks;
    for (uint64_t i = 3000; i < 100000; i++, now++) {
        while (fq_kept_due(&k, now))
            fq_kept_drop(&k);
        if (fq_kept_count(&k) < 3000)
            add(&k, i, now + 100, 0);
    }
    assert_int_equal(k.pool.nchunks, chunks);
    fq_kept_fini(&k);
    fq_kept_fini(&k);       /* twice is safe */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_found_until_due),
        cmocka_unit_test(test_taken_then_dropped),
        cmocka_unit_test(test_drop_if_keeps_order),
        cmocka_unit_test(test_churn_reuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
