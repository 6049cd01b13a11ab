/* test_window.c -- the in-flight window: limits, lookups, leases and expired records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "window.h"

static fq_run *runs(size_t n, uint32_t est)
{
    fq_run *r = calloc(n, sizeof(*r));
    assert_non_null(r);
    for (size_t i = 0; i < n; i++) {
        r[i].id = 1000 + i;
        r[i].est = est;
    }
    return r;
}

static void test_limits_in_runs_and_tokens(void **state)
{
    (void)state;
    fq_window w;
    assert_int_equal(fq_window_init(&w, 2, 1000, 0, 0, true), FQ_OK);
    fq_run *r = runs(3, 400);
    assert_true(fq_window_fits(&w, 5000));     /* empty: anything goes, alone */
    assert_int_equal(fq_window_add(&w, &r[0], 0), FQ_OK);
    assert_false(fq_window_fits(&w, 601));     /* 400 + 601 > 1000 */
    assert_true(fq_window_fits(&w, 600));
    assert_int_equal(fq_window_add(&w, &r[1], 0), FQ_OK);
    assert_false(fq_window_fits(&w, 1));       /* 2 runs: full */
    assert_int_equal(w.runs, 2);
    assert_int_equal(w.tokens, 800);
    fq_window_remove(&w, &r[0]);
    assert_int_equal(w.runs, 1);
    assert_int_equal(w.tokens, 400);
    assert_null(fq_window_find(&w, r[0].id));
    assert_ptr_equal(fq_window_find(&w, r[1].id), &r[1]);
    fq_window_set_limits(&w, 0, 0, 0, 0);      /* unlimited */
    assert_true(fq_window_fits(&w, 4000000000u));
    fq_window_fini(&w);
    free(r);
}

static void test_hash_grows_and_finds_everything(void **state)
{
    (void)state;
    fq_window w;
    assert_int_equal(fq_window_init(&w, 0, 0, 0, 0, true), FQ_OK);
    enum { N = 10000 };
    fq_run *r = runs(N, 1);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(fq_window_add(&w, &r[i], 0), FQ_OK);
    assert_int_equal(fq_u64map_count(w.by_id), N);
    for (size_t i = 0; i < N; i++)
        assert_ptr_equal(fq_window_find(&w, r[i].id), &r[i]);
    for (size_t i = 0; i < N; i += 2)
        fq_window_remove(&w, &r[i]);
    for (size_t i = 0; i < N; i++)
        assert_true((fq_window_find(&w, r[i].id) != NULL) == (i % 2 == 1));
    assert_int_equal(w.runs, N / 2);
    assert_int_equal(fq_u64map_count(w.by_id), N / 2);
    assert_int_equal(r[0].state, FQ_RUN_FREE);  /* let go */
    assert_null(fq_window_find(&w, 7));
    fq_window_fini(&w);
    free(r);
}

static void test_leases_expire_in_order(void **state)
{
    (void)state;
    fq_window w;
    assert_int_equal(fq_window_init(&w, 0, 0, 100, 2, true), FQ_OK);
    fq_run *r = runs(4, 10);
    for (int i = 0; i < 4; i++)
        assert_int_equal(fq_window_add(&w, &r[i], (uint64_t)i * 10), FQ_OK);
    assert_int_equal(fq_window_next_deadline(&w), 100);
    assert_null(fq_window_expire_one(&w, 99));
    /* completing the oldest moves the next deadline on */
    fq_window_remove(&w, &r[0]);
    assert_int_equal(fq_window_next_deadline(&w), 110);
    assert_ptr_equal(fq_window_expire_one(&w, 125), &r[1]);
    assert_ptr_equal(fq_window_expire_one(&w, 125), &r[2]);
    assert_null(fq_window_expire_one(&w, 125));
    assert_int_equal(r[1].state, FQ_RUN_EXPIRED);
    assert_int_equal(w.runs, 1);               /* expired runs hold no slot */
    assert_int_equal(w.tokens, 10);
    assert_ptr_equal(fq_window_find(&w, r[1].id), &r[1]);  /* but are found */
    assert_null(fq_window_evict_one(&w, 125));     /* 2 expired, max 2 */
    assert_ptr_equal(fq_window_expire_one(&w, 1000), &r[3]);
    assert_ptr_equal(fq_window_evict_one(&w, 1000), &r[1]);     /* the oldest goes */
    assert_null(fq_window_find(&w, r[1].id));
    assert_int_equal(w.expired, 2);
    fq_window_remove(&w, &r[2]);               /* a late completion */
    assert_int_equal(w.expired, 1);
    assert_int_equal(w.runs, 0);
    assert_int_equal(fq_window_next_deadline(&w), UINT64_MAX);
    fq_window_fini(&w);
    free(r);
}

/* An expired run is handed back for eviction once its lease ended keep
 * ago, as well as past max_expired, in the order the runs expired; runs
 * read back as expired join that order with the time their lease ended. */
static void test_expired_runs_are_evicted_by_age(void **state)
{
    (void)state;
    fq_window w;
    assert_int_equal(fq_window_init(&w, 0, 0, 100, 1000, true), FQ_OK);
    fq_window_set_keep(&w, 50);
    fq_run *r = runs(4, 10);
    assert_int_equal(fq_window_add(&w, &r[0], 0), FQ_OK);
    assert_int_equal(fq_window_add(&w, &r[1], 30), FQ_OK);
    assert_ptr_equal(fq_window_expire_one(&w, 130), &r[0]);
    assert_ptr_equal(fq_window_expire_one(&w, 130), &r[1]);
    assert_int_equal(r[0].t, 100);             /* when its lease ended */
    assert_int_equal(r[1].t, 130);
    /* Read back after a restart: its lease ended at 120. */
    assert_int_equal(fq_window_add_expired(&w, &r[2], 120), FQ_OK);
    assert_int_equal(r[2].state, FQ_RUN_EXPIRED);
    assert_ptr_equal(fq_window_find(&w, r[2].id), &r[2]);
    assert_int_equal(w.expired, 3);
    assert_int_equal(w.runs, 0);
    assert_null(fq_window_evict_one(&w, 149));
    assert_ptr_equal(fq_window_evict_one(&w, 150), &r[0]);
    assert_null(fq_window_evict_one(&w, 150));  /* r[1] ended at 130 */
    assert_ptr_equal(fq_window_evict_one(&w, 180), &r[1]);
    assert_ptr_equal(fq_window_evict_one(&w, 180), &r[2]);  /* ended at 120 */
    assert_null(fq_window_evict_one(&w, 180));
    assert_int_equal(w.expired, 0);
    assert_null(fq_window_find(&w, r[2].id));
    /* Without keep, only the count evicts. */
    fq_window_set_keep(&w, 0);
    assert_int_equal(fq_window_add_expired(&w, &r[3], 0), FQ_OK);
    assert_null(fq_window_evict_one(&w, UINT64_MAX));
    fq_window_set_limits(&w, 0, 0, 100, 0);
    assert_ptr_equal(fq_window_evict_one(&w, 0), &r[3]);
    fq_window_fini(&w);
    free(r);
}

static void test_no_timeout_means_no_expiry(void **state)
{
    (void)state;
    fq_window w;
    assert_int_equal(fq_window_init(&w, 0, 0, 0, 0, true), FQ_OK);
    fq_run r = {.id = 1, .est = 5};
    assert_int_equal(fq_window_add(&w, &r, 123), FQ_OK);
    assert_null(fq_window_expire_one(&w, UINT64_MAX - 1));
    fq_window_fini(&w);
}

/* Without an index by id the window finds nothing by id and leaves every
 * run's hnode to the caller: runs held in the caller's own index through
 * it stay found while the window adds, expires, restarts, evicts and
 * removes them, and a run let go says so by its state. */
static void test_caller_indexes(void **state)
{
    (void)state;
    fq_window w;
    assert_int_equal(fq_window_init(&w, 0, 0, 100, 1, false), FQ_OK);
    assert_null(w.by_id);
    enum { N = 8 };
    fq_run *r = runs(N, 1);
    fq_u64map *mine = NULL;
    assert_int_equal(fq_u64map_create(&mine, FQ_U64MAP_KEY_OFFSET(fq_run, hnode, id), 2, 0),
                     FQ_OK);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(fq_u64map_reserve(mine), FQ_OK);
        fq_u64map_insert(mine, &r[i].hnode);
        assert_int_equal(fq_window_add(&w, &r[i], i < N / 2 ? 0 : 50), FQ_OK);
    }
    assert_null(fq_window_find(&w, r[0].id));
    assert_int_equal(w.runs, N);
    fq_window_restart(&w, &r[1], 10);
    assert_ptr_equal(fq_window_expire_one(&w, 100), &r[0]);
    assert_ptr_equal(fq_window_expire_one(&w, 100), &r[2]);
    assert_ptr_equal(fq_window_evict_one(&w, 100), &r[0]);     /* past max_expired */
    assert_int_equal(r[0].state, FQ_RUN_FREE);
    assert_int_equal(r[2].state, FQ_RUN_EXPIRED);
    fq_window_remove(&w, &r[5]);
    assert_int_equal(r[5].state, FQ_RUN_FREE);
    for (size_t i = 0; i < N; i++)
        assert_ptr_equal(fq_u64map_find(mine, r[i].id), &r[i].hnode);
    assert_int_equal(fq_u64map_count(mine), N);
    fq_u64map_destroy(mine, NULL);
    fq_window_fini(&w);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_in_runs_and_tokens),
        cmocka_unit_test(test_hash_grows_and_finds_everything),
        cmocka_unit_test(test_leases_expire_in_order),
        cmocka_unit_test(test_expired_runs_are_evicted_by_age),
        cmocka_unit_test(test_no_timeout_means_no_expiry),
        cmocka_unit_test(test_caller_indexes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
