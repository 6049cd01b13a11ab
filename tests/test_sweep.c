/* test_sweep.c -- a list visited in bounded slices, one pass per period. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "sweep.h"

typedef struct item {
    int id;
    int seen;                   /* times taken in the current pass */
    fq_sweep_node node;
} item;

static item *of(fq_sweep_node *n)
{
    return FQ_SWEEP_ENTRY(n, item, node);
}

/* The list's links agree with its head, tail and count, and hold the ids
 * in order. */
static void assert_list(const fq_sweep *s, const int *ids, size_t n)
{
    size_t i = 0;
    const fq_sweep_node *last = NULL;
    for (const fq_sweep_node *x = s->head; x; x = x->next, i++) {
        assert_true(i < n);
        assert_int_equal(FQ_SWEEP_ENTRY(x, const item, node)->id, ids[i]);
        last = x;
    }
    assert_int_equal(i, n);
    assert_int_equal(s->n, n);
    assert_ptr_equal(s->tail, last);
}

static void test_passes_begin_a_period_apart(void **state)
{
    (void)state;
    fq_sweep s;
    fq_sweep_init(&s, 1000);
    item a = {.id = 1};
    fq_sweep_append(&s, &a.node);
    assert_false(fq_sweep_running(&s));
    assert_null(fq_sweep_next(&s));          /* no pass: nothing to take */
    assert_true(fq_sweep_begin(&s, 5));      /* the first is due at once */
    assert_false(fq_sweep_begin(&s, 6));     /* one is under way */
    assert_ptr_equal(fq_sweep_next(&s), &a.node);
    assert_null(fq_sweep_next(&s));          /* over */
    assert_false(fq_sweep_running(&s));
    assert_false(fq_sweep_begin(&s, 1004));  /* start to start: due at 1005 */
    assert_true(fq_sweep_begin(&s, 1005));
    /* A pass that outlasts its period: the next begins as soon as it ends. */
    assert_false(fq_sweep_begin(&s, 2500));
    assert_ptr_equal(fq_sweep_next(&s), &a.node);
    assert_null(fq_sweep_next(&s));
    assert_true(fq_sweep_begin(&s, 2600));
    assert_int_equal(s.passes, 3);
}

/* Slices of three, driven turn by turn: every node is taken once a pass,
 * nodes appended during a pass are reached in it, and dropped ones leave
 * the list whole (the first, one in the middle, the last, then one appended
 * after the dropped last). */
static void test_slices_take_each_once_with_drops_and_appends(void **state)
{
    (void)state;
    enum { N = 10, SLICE = 3 };
    item it[N + 2];
    fq_sweep s;
    fq_sweep_init(&s, 100);
    for (int i = 0; i < N + 2; i++)
        it[i] = (item){.id = i};
    for (int i = 0; i < N; i++)
        fq_sweep_append(&s, &it[i].node);

    uint64_t now = 0;
    int turns = 0;
    assert_true(fq_sweep_begin(&s, now));
    while (fq_sweep_running(&s)) {
        for (int k = 0; k < SLICE; k++) {
            fq_sweep_node *x = fq_sweep_next(&s);
            if (!x)
                break;
            item *t = of(x);
            t->seen++;
            if (t->id == 0 || t->id == 4 || t->id == N - 1)
                fq_sweep_drop(&s);
            if (t->id == 5)                  /* mid-pass: reached in this pass */
                fq_sweep_append(&s, &it[N].node);
            if (t->id == N)                  /* after the old tail was dropped */
                fq_sweep_append(&s, &it[N + 1].node);
        }
        now += 10;
        turns++;
    }
    for (int i = 0; i < N + 2; i++)
        assert_int_equal(it[i].seen, 1);
    assert_int_equal(turns, 5);              /* 12 taken by 3, and the end found */
    static const int left[] = {1, 2, 3, 5, 6, 7, 8, 10, 11};
    assert_list(&s, left, sizeof left / sizeof left[0]);

    /* The next pass takes what is left, once each; appending after it ends
     * is reached by the pass after. */
    assert_false(fq_sweep_begin(&s, 99));
    assert_true(fq_sweep_begin(&s, 100));
    int taken = 0;
    for (fq_sweep_node *x; (x = fq_sweep_next(&s));)
        taken++;
    assert_int_equal(taken, 9);
    item late = {.id = 99};
    fq_sweep_append(&s, &late.node);
    assert_true(fq_sweep_begin(&s, 200));
    fq_sweep_node *x = NULL;
    for (fq_sweep_node *y; (y = fq_sweep_next(&s));)
        x = y;
    assert_ptr_equal(x, &late.node);
}

/* Dropping every node empties the list, and dropping with nothing taken
 * changes nothing. */
static void test_drop_everything(void **state)
{
    (void)state;
    item it[4];
    fq_sweep s;
    fq_sweep_init(&s, 1);
    fq_sweep_drop(&s);
    for (int i = 0; i < 4; i++) {
        it[i] = (item){.id = i};
        fq_sweep_append(&s, &it[i].node);
    }
    assert_true(fq_sweep_begin(&s, 0));
    int n = 0;
    for (fq_sweep_node *x; (x = fq_sweep_next(&s)); n++) {
        fq_sweep_drop(&s);
        fq_sweep_drop(&s);                   /* twice: the second does nothing */
    }
    assert_int_equal(n, 4);
    assert_list(&s, NULL, 0);
    assert_null(s.head);
    fq_sweep_append(&s, &it[2].node);
    static const int one[] = {2};
    assert_list(&s, one, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passes_begin_a_period_apart),
        cmocka_unit_test(test_slices_take_each_once_with_drops_and_appends),
        cmocka_unit_test(test_drop_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
