/* test_pool.c -- unit tests of the size-class byte pools. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "pool.h"

static fq_pool *pool_new(size_t max)
{
    fq_pool *p = NULL;
    assert_int_equal(fq_pool_create(&p, max), FQ_OK);
    assert_non_null(p);
    return p;
}

static fq_pool_stats stats(const fq_pool *p)
{
    fq_pool_stats st;
    fq_pool_stats_get(&st, p);
    return st;
}

/* A small deterministic generator (xorshift64*), so a failure repeats. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

/* Every request up to max has a class at least its size, a multiple of 16,
 * wasting at most a sixteenth of it (or 15 bytes), and classes never
 * shrink as requests grow. */
static void test_classes(void **state)
{
    (void)state;
    size_t max = (size_t)1 << 20;
    fq_pool *p = pool_new(max);
    size_t prev = 0;
    for (size_t n = 1; n <= max; n += n < 4096 ? 1 : 61) {
        size_t c = fq_pool_class_size(p, n);
        assert_true(c >= n);
        assert_int_equal(c % 16, 0);
        assert_true(c - n <= 15 || (c - n) * 16 <= c);
        assert_true(c >= prev);
        prev = c;
    }
    assert_int_equal(fq_pool_class_size(p, 1), 16);
    assert_int_equal(fq_pool_class_size(p, 129), 144);
    assert_int_equal(fq_pool_class_size(p, 257), 272);
    assert_int_equal(fq_pool_class_size(p, 541), 544);
    assert_int_equal(fq_pool_class_size(p, 600), 608);
    assert_int_equal(fq_pool_class_size(p, max), max);
    assert_int_equal(fq_pool_class_size(p, 0), 0);
    assert_int_equal(fq_pool_class_size(p, max + 1), 0);
    assert_int_equal(fq_pool_max(p), max);
    fq_pool_destroy(p);
}

static void test_create_range(void **state)
{
    (void)state;
    fq_pool *p = (fq_pool *)1;
    assert_int_equal(fq_pool_create(&p, 0), FQ_EINVAL);
    assert_null(p);
    p = (fq_pool *)1;
    assert_int_equal(fq_pool_create(&p, ((size_t)1 << 30) + 1), FQ_EINVAL);
    assert_null(p);
    fq_pool_destroy(NULL);
}

static void test_out_of_range(void **state)
{
    (void)state;
    fq_pool *p = pool_new(1000);
    assert_null(fq_pool_alloc(p, 0));
    assert_null(fq_pool_alloc(p, 1001));
    void *b = fq_pool_alloc(p, 1000);
    assert_non_null(b);
    memset(b, 0xab, 1000);
    fq_pool_free(p, b, 1000);
    fq_pool_free(p, NULL, 10);
    assert_int_equal(stats(p).blocks, 0);
    fq_pool_destroy(p);
}

/* Many live blocks of random sizes, each filled with its own pattern:
 * none overlaps another (every pattern survives), each is 16-byte
 * aligned, and the counters add up at every step. */
static void test_blocks_are_disjoint(void **state)
{
    (void)state;
    enum { N = 4000 };
    size_t max = 300000;
    fq_pool *p = pool_new(max);
    unsigned char *b[N];
    size_t len[N];
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    size_t used = 0, requested = 0;
    for (int i = 0; i < N; i++) {
        /* mostly small, sometimes up to max */
        size_t r = rnd(&seed);
        len[i] = 1 + (i % 50 == 0 ? r % max : r % 2048);
        b[i] = fq_pool_alloc(p, len[i]);
        assert_non_null(b[i]);
        assert_int_equal((uintptr_t)b[i] % 16, 0);
        memset(b[i], (int)(i & 0xff), len[i]);
        used += fq_pool_class_size(p, len[i]);
        requested += len[i];
    }
    fq_pool_stats st = stats(p);
    assert_int_equal(st.blocks, N);
    assert_int_equal(st.used, used);
    assert_int_equal(st.requested, requested);
    assert_true(st.reserved >= st.used);
    /* free every other one, reallocate them with other sizes */
    for (int i = 0; i < N; i += 2) {
        fq_pool_free(p, b[i], len[i]);
        len[i] = 1 + rnd(&seed) % 4096;
        b[i] = fq_pool_alloc(p, len[i]);
        assert_non_null(b[i]);
        memset(b[i], (int)(i & 0xff), len[i]);
    }
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < len[i]; k++)
            assert_int_equal(b[i][k], (unsigned char)(i & 0xff));
    for (int i = 0; i < N; i++)
        fq_pool_free(p, b[i], len[i]);
    st = stats(p);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.requested, 0);
    fq_pool_destroy(p);
}

/* Once warm, a steady churn (a queue of runs, each freed as a new one
 * comes) reserves nothing more: no slab is made or given back. */
static void test_warm_churn_reserves_nothing(void **state)
{
    (void)state;
    enum { LIVE = 3000, STEPS = 200000 };
    fq_pool *p = pool_new(1 << 20);
    void *ring[LIVE];
    size_t len[LIVE];
    uint64_t seed = 42;
    for (int i = 0; i < LIVE; i++) {
        len[i] = 500 + rnd(&seed) % 200;      /* 512-byte bodies and their headers */
        ring[i] = fq_pool_alloc(p, len[i]);
        assert_non_null(ring[i]);
    }
    /* one lap to reach every class's working set */
    for (int i = 0; i < LIVE; i++) {
        fq_pool_free(p, ring[i], len[i]);
        len[i] = 500 + rnd(&seed) % 200;
        ring[i] = fq_pool_alloc(p, len[i]);
    }
    fq_pool_stats warm = stats(p);
    size_t max_reserved = warm.reserved;
    for (int s = 0; s < STEPS; s++) {
        int i = s % LIVE;
        fq_pool_free(p, ring[i], len[i]);
        len[i] = 500 + rnd(&seed) % 200;
        ring[i] = fq_pool_alloc(p, len[i]);
        assert_non_null(ring[i]);
        fq_pool_stats st = stats(p);
        if (st.reserved > max_reserved)
            max_reserved = st.reserved;
    }
    /* the mix of sizes drifts a little between classes: at most a slab
     * per class touched (7 classes from 512 to 704) more */
    assert_true(max_reserved <= warm.reserved + 7 * (64u << 10));
    /* and the blocks fill the slabs: at most a sixteenth lost at a slab's
     * end, plus a partly used slab per class */
    fq_pool_stats st = stats(p);
    assert_true(st.reserved <= st.used + st.used / 16 + 7 * (64u << 10));
    for (int i = 0; i < LIVE; i++)
        fq_pool_free(p, ring[i], len[i]);
    fq_pool_destroy(p);
}

/* A queue of blocks, each freed in the order it was taken (runs dispatched
 * in turn): once warm, no slab is made or given back. */
static void test_fifo_makes_no_slab(void **state)
{
    (void)state;
    enum { LIVE = 1000, STEPS = 100000 };
    fq_pool *p = pool_new(1 << 20);
    void *q[LIVE];
    for (int i = 0; i < LIVE; i++)
        assert_non_null(q[i] = fq_pool_alloc(p, 541));
    for (int s = 0; s < LIVE; s++) {
        fq_pool_free(p, q[s % LIVE], 541);
        q[s % LIVE] = fq_pool_alloc(p, 541);
    }
    fq_pool_stats warm = stats(p);
    for (int s = 0; s < STEPS; s++) {
        fq_pool_free(p, q[s % LIVE], 541);
        assert_non_null(q[s % LIVE] = fq_pool_alloc(p, 541));
    }
    fq_pool_stats st = stats(p);
    assert_int_equal(st.made, warm.made);
    assert_int_equal(st.slabs, warm.slabs);
    /* 120 blocks of 544 to a 64 KiB slab: 9 slabs hold the queue */
    assert_true(st.slabs <= LIVE / 120 + 2);
    for (int i = 0; i < LIVE; i++)
        fq_pool_free(p, q[i], 541);
    fq_pool_destroy(p);
}

/* The same block comes back for the same class: a free list, no malloc. */
static void test_free_then_alloc_reuses(void **state)
{
    (void)state;
    fq_pool *p = pool_new(1 << 20);
    void *a = fq_pool_alloc(p, 600);
    void *b = fq_pool_alloc(p, 600);
    fq_pool_stats st = stats(p);
    assert_int_equal(st.slabs, 1);
    fq_pool_free(p, a, 600);
    assert_ptr_equal(fq_pool_alloc(p, 605), a);     /* same class, 608 */
    assert_int_equal(stats(p).slabs, 1);
    /* a block past 256 KiB has a slab of its own, kept once freed */
    void *big = fq_pool_alloc(p, 700000);
    assert_non_null(big);
    memset(big, 1, 700000);
    assert_int_equal(stats(p).slabs, 2);
    fq_pool_free(p, big, 700000);
    assert_int_equal(stats(p).slabs, 2);
    assert_ptr_equal(fq_pool_alloc(p, 700000), big);
    fq_pool_free(p, big, 700000);
    fq_pool_free(p, a, 605);
    fq_pool_free(p, b, 600);
    fq_pool_destroy(p);
}

/* A burst drained gives its slabs back, but for one per class used. */
static void test_drained_burst_is_returned(void **state)
{
    (void)state;
    enum { N = 20000 };
    fq_pool *p = pool_new(1 << 20);
    void **b = calloc(N, sizeof(*b));
    assert_non_null(b);
    for (int i = 0; i < N; i++)
        assert_non_null(b[i] = fq_pool_alloc(p, 700));
    fq_pool_stats full = stats(p);
    assert_true(full.slabs > 100);
    assert_true(full.reserved >= (size_t)N * 704);
    /* free in an order unlike the allocation's */
    for (int i = 0; i < N; i += 2)
        fq_pool_free(p, b[i], 700);
    for (int i = N - 1; i > 0; i -= 2)
        fq_pool_free(p, b[i], 700);
    fq_pool_stats st = stats(p);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.slabs, 1);
    assert_int_equal(st.reserved, 64u << 10);
    free(b);
    fq_pool_destroy(p);
}

/* Destroy frees blocks still handed out (ASan builds check the leak). */
static void test_destroy_with_live_blocks(void **state)
{
    (void)state;
    fq_pool *p = pool_new(1 << 20);
    for (int i = 1; i < 3000; i++)
        assert_non_null(fq_pool_alloc(p, (size_t)i * 37 % 900000 + 1));
    fq_pool_destroy(p);
}

/* ---- object pools ---------------------------------------------------------- */

/* A record like the ledger's: a pointer, a few fields, an odd size. */
typedef struct orec {
    uint64_t a;
    void *p;
    uint32_t b;
    uint8_t c;
} orec;

/* Objects are disjoint, aligned to their type, cut from chunks of
 * per_chunk (one malloc each), and a pool allocates nothing before its
 * first object. */
static void test_opool_disjoint(void **state)
{
    (void)state;
    fq_opool p;
    FQ_OPOOL_INIT(&p, orec, 7);
    assert_int_equal(p.size, 24);
    assert_int_equal(fq_opool_bytes(&p), 0);
    enum { N = 100 };
    orec *o[N];
    for (int i = 0; i < N; i++) {
        o[i] = fq_opool_alloc(&p);
        assert_non_null(o[i]);
        assert_int_equal((uintptr_t)o[i] % _Alignof(orec), 0);
        *o[i] = (orec){.a = (uint64_t)i, .p = o[i], .b = (uint32_t)i * 3, .c = (uint8_t)i};
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(o[i]->a, (uint64_t)i);
        assert_ptr_equal(o[i]->p, o[i]);
        assert_int_equal(o[i]->b, (uint32_t)i * 3);
    }
    assert_int_equal(p.nchunks, (N + 6) / 7);
    assert_int_equal(p.used, N);
    assert_int_equal(fq_opool_bytes(&p), p.nchunks * (p.hdr + 7 * p.size));
    fq_opool_fini(&p);
    assert_int_equal(fq_opool_bytes(&p), 0);
    assert_int_equal(p.used, 0);
    /* Usable again after fini. */
    assert_non_null(fq_opool_alloc(&p));
    fq_opool_fini(&p);
    fq_opool_fini(NULL);
}

/* An object freed is the next one handed out, and churn below the
 * high-water mark makes no chunk. */
static void test_opool_reuse(void **state)
{
    (void)state;
    fq_opool p;
    FQ_OPOOL_INIT(&p, orec, 16);
    void *live[40];
    for (int i = 0; i < 40; i++)
        live[i] = fq_opool_alloc(&p);
    size_t chunks = p.nchunks;
    fq_opool_free(&p, live[5]);
    fq_opool_free(&p, live[9]);
    assert_ptr_equal(fq_opool_alloc(&p), live[9]);
    assert_ptr_equal(fq_opool_alloc(&p), live[5]);
    uint64_t s = 42;
    for (int k = 0; k < 100000; k++) {
        int i = (int)(rnd(&s) % 40);
        fq_opool_free(&p, live[i]);
        live[i] = fq_opool_alloc(&p);
        assert_non_null(live[i]);
    }
    assert_int_equal(p.nchunks, chunks);
    assert_int_equal(p.used, 40);
    for (int i = 0; i < 40; i++)
        for (int j = i + 1; j < 40; j++)
            assert_ptr_not_equal(live[i], live[j]);
    fq_opool_free(&p, NULL);
    assert_int_equal(p.used, 40);
    fq_opool_fini(&p);
}

/* Under AddressSanitizer an object freed, and one not cut yet, is
 * poisoned (but for the free list's link) until handed out: a record used
 * after its free is reported though the pool keeps its memory. Without
 * ASan there is nothing to see (skipped). */
static void test_opool_poisoned_under_asan(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    fq_opool p;
    FQ_OPOOL_INIT(&p, orec, 4);
    char *a = fq_opool_alloc(&p);
    assert_false(__asan_region_is_poisoned(a, p.size));
    assert_true(__asan_address_is_poisoned(a + p.size));     /* the next, not cut yet */
    fq_opool_free(&p, a);
    assert_false(__asan_address_is_poisoned(a));             /* the link */
    assert_true(__asan_address_is_poisoned(a + sizeof(void *)));
    assert_ptr_equal(fq_opool_alloc(&p), a);
    assert_false(__asan_region_is_poisoned(a, p.size));
    fq_opool_fini(&p);
#else
    skip();
#endif
}

/* Sizes round up to the alignment and to a pointer (a free object holds
 * the list's link). */
static void test_opool_sizes(void **state)
{
    (void)state;
    fq_opool p;
    fq_opool_init(&p, 1, 1, 4);
    assert_int_equal(p.size, sizeof(void *));
    fq_opool_init(&p, 36, 8, 4);
    assert_int_equal(p.size, 40);
    fq_opool_init(&p, 36, 16, 0);
    assert_int_equal(p.size, 48);
    assert_int_equal(p.per_chunk, 1);
    void *a = fq_opool_alloc(&p), *b = fq_opool_alloc(&p);
    assert_int_equal((uintptr_t)a % 16, 0);
    assert_int_equal((uintptr_t)b % 16, 0);
    assert_int_equal(p.nchunks, 2);
    fq_opool_fini(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_create_range),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_blocks_are_disjoint),
        cmocka_unit_test(test_warm_churn_reserves_nothing),
        cmocka_unit_test(test_free_then_alloc_reuses),
        cmocka_unit_test(test_fifo_makes_no_slab),
        cmocka_unit_test(test_drained_burst_is_returned),
        cmocka_unit_test(test_destroy_with_live_blocks),
        cmocka_unit_test(test_opool_disjoint),
        cmocka_unit_test(test_opool_reuse),
        cmocka_unit_test(test_opool_poisoned_under_asan),
        cmocka_unit_test(test_opool_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
