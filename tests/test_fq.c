/* test_fq.c -- fq's shared helpers: the name and tenant id rules, decimal formatting, SipHash, the token bucket. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fq.h"

/* fq_u64_dec writes what snprintf's %llu would, at both ends of the range
 * and across digit-count boundaries, and says how many digits. */
static void test_u64_dec_matches_printf(void **state)
{
    (void)state;
    const uint64_t v[] = {0, 1, 9, 10, 99, 100, 4294967295ULL, 4294967296ULL,
                          1764748800123ULL, 9999999999999999999ULL, UINT64_MAX};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char got[FQ_U64_DEC_MAX], want[32];
        memset(got, '#', sizeof got);
        int k = snprintf(want, sizeof want, "%llu", (unsigned long long)v[i]);
        assert_int_equal(fq_u64_dec(got, v[i]), (size_t)k);
        assert_string_equal(got, want);
    }
}

/* fq_str_copy copies whole what fits, cuts what does not, and always ends
 * the copy with a NUL. */
static void test_str_copy(void **state)
{
    (void)state;
    char d[5];
    memset(d, '#', sizeof d);
    assert_int_equal(fq_str_copy(d, sizeof d, "abc"), 3);
    assert_string_equal(d, "abc");
    assert_int_equal(fq_str_copy(d, sizeof d, "abcd"), 4);
    assert_string_equal(d, "abcd");
    assert_int_equal(fq_str_copy(d, sizeof d, "abcdefgh"), 4);
    assert_string_equal(d, "abcd");
    assert_int_equal(fq_str_copy(d, sizeof d, ""), 0);
    assert_string_equal(d, "");
    assert_int_equal(fq_str_copy(d, 1, "abc"), 0);
    assert_string_equal(d, "");
}

/* Names are 1 to 64 of [A-Za-z0-9_-]; tenant ids are names other than the
 * two fairq reserves, compared whole and by length (s need not end in NUL). */
static void test_name_and_tenant_rules(void **state)
{
    (void)state;
    char longest[FQ_TENANT_MAX + 1];
    memset(longest, 'a', sizeof longest);

    assert_true(fq_name_valid("acme_1-x", 8));
    assert_true(fq_name_valid(longest, FQ_TENANT_MAX));
    assert_false(fq_name_valid(longest, FQ_TENANT_MAX + 1));
    assert_false(fq_name_valid("", 0));
    assert_false(fq_name_valid("a.b", 3));
    assert_false(fq_name_valid("a b", 3));
    assert_true(fq_tenant_id_valid(longest, FQ_TENANT_MAX));

    static const char *const reserved[] = {"_invalid", "_other"};
    for (size_t i = 0; i < 2; i++) {
        size_t n = strlen(reserved[i]);
        assert_true(fq_name_valid(reserved[i], n));
        assert_true(fq_tenant_id_reserved(reserved[i], n));
        assert_false(fq_tenant_id_valid(reserved[i], n));
        /* A prefix or an extension of a reserved name is a tenant. */
        assert_true(fq_tenant_id_valid(reserved[i], n - 1));
        assert_false(fq_tenant_id_reserved(reserved[i], n - 1));
    }
    assert_true(fq_tenant_id_valid("_others", 7));
    assert_true(fq_tenant_id_valid("_other.x", 6) == 0);    /* "_other" by length */
    assert_true(fq_tenant_id_valid("_Other", 6));           /* case counts */
}

/* The reference vectors (key 00..0f, messages 00, 00 01, ...), and a key
 * change that changes the hash. */
static void test_siphash_reference_vectors(void **state)
{
    (void)state;
    const uint64_t k0 = 0x0706050403020100ULL, k1 = 0x0f0e0d0c0b0a0908ULL;
    uint8_t msg[16];
    for (int i = 0; i < 16; i++)
        msg[i] = (uint8_t)i;
    assert_true(fq_siphash(k0, k1, msg, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(fq_siphash(k0, k1, msg, 1) == 0x74f839c593dc67fdULL);
    assert_true(fq_siphash(k0, k1, msg, 8) == 0x93f5f5799a932462ULL);
    assert_true(fq_siphash(k0, k1, msg, 15) == 0xa129ca6149be45e5ULL);
    assert_true(fq_siphash(k0 ^ 1, k1, msg, 15) != 0xa129ca6149be45e5ULL);
}

/* A bucket gives its burst at once, then one take per 1/rate second; the
 * wait it names is exactly when the next take succeeds; idleness refills it
 * only up to its burst. Virtual time. */
static void test_bucket(void **state)
{
    (void)state;
    fq_bucket b;
    uint64_t wait = 0;
    fq_bucket_init(&b, 4, 2, 1000);
    assert_true(fq_bucket_take(&b, 1000, NULL));
    assert_true(fq_bucket_take(&b, 1000, NULL));
    assert_false(fq_bucket_take(&b, 1000, &wait));
    assert_int_equal(wait, 250);
    assert_false(fq_bucket_take(&b, 1000 + 249, &wait));
    assert_int_equal(wait, 1);
    assert_true(fq_bucket_take(&b, 1000 + 250, NULL));
    assert_false(fq_bucket_take(&b, 1000 + 250, NULL));
    /* A long idle spell refills two, not more. */
    assert_true(fq_bucket_take(&b, 1000000, NULL));
    assert_true(fq_bucket_take(&b, 1000000, NULL));
    assert_false(fq_bucket_take(&b, 1000000, NULL));
    /* A clock that goes back refills nothing and breaks nothing. */
    assert_false(fq_bucket_take(&b, 5, &wait));
    assert_int_equal(wait, 250);
    /* Over a second of steady asking, rate takes and the burst. */
    fq_bucket_init(&b, 10, 3, 0);
    int took = 0;
    for (uint64_t t = 0; t <= 1000; t++)
        took += fq_bucket_take(&b, t, NULL);
    assert_int_equal(took, 3 + 10);
}

/* fq_grow keeps what the array held, grows only when asked for more than
 * it has, and refuses a size that would overflow without touching it. */
static void test_grow(void **state)
{
    (void)state;
    uint32_t *v = NULL;
    size_t cap = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        assert_int_equal(fq_grow(&v, &cap, i + 1, sizeof *v), FQ_OK);
        assert_true(cap >= i + 1);
        v[i] = i * 7;
    }
    for (uint32_t i = 0; i < 1000; i++)
        assert_int_equal(v[i], i * 7);
    uint32_t *same = v;
    size_t had = cap;
    assert_int_equal(fq_grow(&v, &cap, had, sizeof *v), FQ_OK);
    assert_ptr_equal(v, same);
    assert_int_equal(cap, had);
    assert_int_equal(fq_grow(&v, &cap, SIZE_MAX / 2, sizeof *v), FQ_ENOMEM);
    assert_int_equal(fq_grow(&v, &cap, SIZE_MAX, 1), FQ_ENOMEM);
    assert_ptr_equal(v, same);
    assert_int_equal(cap, had);
    assert_int_equal(v[999], 999 * 7);
    free(v);
}

/* fq_fnv1a is the seeds' hash of old, value for value: a change would
 * change every generated scenario. */
static void test_fnv1a(void **state)
{
    (void)state;
    assert_true(fq_fnv1a("") == 1469598103934665603ULL);
    assert_true(fq_fnv1a("acme") == 0xc758f1ba579a8409ULL);
    assert_true(fq_fnv1a("acme") != fq_fnv1a("acmf"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_and_tenant_rules),
        cmocka_unit_test(test_u64_dec_matches_printf),
        cmocka_unit_test(test_str_copy),
        cmocka_unit_test(test_siphash_reference_vectors),
        cmocka_unit_test(test_bucket),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_fnv1a),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
