/* test_creds.c -- a credentials file checked as a client can: expiry in virtual time, the seed's key, the JWT's signer, the file's shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "creds.h"

/*
 * The keys and JWTs were made by tests/support/nkey.py (python3-cryptography),
 * an implementation independent of lib/creds.c; nats-server accepts what it
 * makes (tests/auth_test.py). A user of an account, its JWT expiring at
 * 2000000000 (2033-05-18T03:33:20Z), a second user's seed, the account's
 * seed, and the account's own JWT (signed by an operator).
 */
#define USER_PUB "UD5OICJ4MEZ5NZO5SGWN47EE4PCDTNO2NGLWZMGZTTYOICUPQPQC7SSL"
#define USER_SEED "SUAF7CIPKJXUOVKX4IULB2LUGDY54EPJSPDPRRLCSQIZIIMFGSVDW3GINU"
#define OTHER_PUB "UCX55IA3VIF7CBT7TCGLFQ5SXLQFUTVAMNGWPBFG4J2Y3AZK2HTLUVMX"
#define OTHER_SEED "SUAJ7WLRWKFH4W5CDQPQOFHORSEVIATXLA5X6UJPT2BJEEKVADE5SCZVYA"
#define ACCOUNT_PUB "ADV7QS53VEY3GPXOJJACC3QNPEPNBNVXBFDFJIKV3F5LOA4BMW7B335N"
#define ACCOUNT_SEED "SAAK6OIMU5FORPEIBBMSX6WPGX3QPOGKSYAPDIWC7JKMGBKAKIJ2YE44NQ"
#define JWT_HEAD "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ."
#define JWT_USER JWT_HEAD \
    "eyJpYXQiOjE3MDAwMDAwMDAsImlzcyI6IkFEVjdRUzUzVkVZM0dQWE9KSkFDQzNRTlBFUE5CTlZYQkZERkpJS1YzRjVM" \
    "T0E0Qk1XN0IzMzVOIiwianRpIjoiNUZZNzdHUVpGQ1BVNk9BVTJJSkNQVEpFUlJJSERXWDRWMkJQQU1RVjdKN0ZVVlJH" \
    "WkJBUSIsIm5hbWUiOiJmYWlycSIsInN1YiI6IlVENU9JQ0o0TUVaNU5aTzVTR1dONDdFRTRQQ0RUTk8yTkdMV1pNR1pU" \
    "VFlPSUNVUFFQUUM3U1NMIiwiZXhwIjoyMDAwMDAwMDAwLCJuYXRzIjp7InR5cGUiOiJ1c2VyIiwicHViIjp7fSwic3Vi" \
    "Ijp7fSwic3VicyI6LTEsImRhdGEiOi0xLCJwYXlsb2FkIjotMSwidmVyc2lvbiI6Mn19." \
    "UOXnshBT4tBeSqQfu-i9CB40ajjOtPQ5JqjytPN7KRq0KZnb1TJanjE7SEaPoZhOnoEKzMNxVJvAUiik2tzzBQ"
/* The same with one character of its signature changed. */
#define JWT_USER_BADSIG JWT_HEAD \
    "eyJpYXQiOjE3MDAwMDAwMDAsImlzcyI6IkFEVjdRUzUzVkVZM0dQWE9KSkFDQzNRTlBFUE5CTlZYQkZERkpJS1YzRjVM" \
    "T0E0Qk1XN0IzMzVOIiwianRpIjoiNUZZNzdHUVpGQ1BVNk9BVTJJSkNQVEpFUlJJSERXWDRWMkJQQU1RVjdKN0ZVVlJH" \
    "WkJBUSIsIm5hbWUiOiJmYWlycSIsInN1YiI6IlVENU9JQ0o0TUVaNU5aTzVTR1dONDdFRTRQQ0RUTk8yTkdMV1pNR1pU" \
    "VFlPSUNVUFFQUUM3U1NMIiwiZXhwIjoyMDAwMDAwMDAwLCJuYXRzIjp7InR5cGUiOiJ1c2VyIiwicHViIjp7fSwic3Vi" \
    "Ijp7fSwic3VicyI6LTEsImRhdGEiOi0xLCJwYXlsb2FkIjotMSwidmVyc2lvbiI6Mn19." \
    "VOXnshBT4tBeSqQfu-i9CB40ajjOtPQ5JqjytPN7KRq0KZnb1TJanjE7SEaPoZhOnoEKzMNxVJvAUiik2tzzBQ"
#define JWT_ACCOUNT JWT_HEAD \
    "eyJpYXQiOjE3OTY0MTY0OTQsImlzcyI6Ik9DWFFKQVY2Q1hRUFlaNUo1TzJNSFg2WDZQS0tONUFNUVkyTEdQQjY2QlVY" \
    "Q0FUSU1PWVQ3V000IiwianRpIjoiUlo2NEc0M09GS0g1SlpFTFFBRTRISTU2R0dLQllWVFYzTE1KQklWWkhTUTVSNFFK" \
    "STRUQSIsIm5hbWUiOiJGQUlSUSIsInN1YiI6IkFEVjdRUzUzVkVZM0dQWE9KSkFDQzNRTlBFUE5CTlZYQkZERkpJS1Yz" \
    "RjVMT0E0Qk1XN0IzMzVOIiwibmF0cyI6eyJ0eXBlIjoiYWNjb3VudCIsImxpbWl0cyI6eyJzdWJzIjotMSwiZGF0YSI6" \
    "LTEsInBheWxvYWQiOi0xLCJpbXBvcnRzIjotMSwiZXhwb3J0cyI6LTEsIndpbGRjYXJkcyI6dHJ1ZSwiY29ubiI6LTEs" \
    "ImxlYWYiOi0xLCJtZW1fc3RvcmFnZSI6LTEsImRpc2tfc3RvcmFnZSI6LTEsInN0cmVhbXMiOi0xLCJjb25zdW1lciI6" \
    "LTF9LCJkZWZhdWx0X3Blcm1pc3Npb25zIjp7InB1YiI6e30sInN1YiI6e319LCJ2ZXJzaW9uIjoyfX0." \
    "PpyjayJ9tvQKTqGdSczsOzufPYufxoOU5DYuMuyvHc6npDNTvz_eB-0F2WT4SWlhbYNZJrV0hvooeUEmQvN3Dg"

#define EXP 2000000000LL

/* A credentials file as nsc writes it, of jwt and seed; its path in buf. */
static const char *creds_file(char *buf, size_t cap, const char *jwt, const char *seed)
{
    snprintf(buf, cap, "/tmp/fairq-test-creds-%d.creds", (int)getpid());
    FILE *f = fopen(buf, "w");
    assert_non_null(f);
    fprintf(f, "-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"
               "************************* IMPORTANT *************************\n"
               "NKEY Seed printed below can be used to sign and prove identity.\n\n"
               "-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n\n"
               "*************************************************************\n", jwt, seed);
    fclose(f);
    return buf;
}

/* Check jwt and seed at now: the status, the reason in why (never a seed). */
static fq_status check(char *why, size_t cap, const char *jwt, const char *seed, int64_t now)
{
    char path[128];
    fq_status st = fq_creds_check(why, cap, creds_file(path, sizeof path, jwt, seed), now);
    unlink(path);
    assert_null(strstr(why, seed));
    return st;
}

static void test_a_good_file_names_its_user_until_it_expires(void **state)
{
    (void)state;
    char why[512];
    assert_int_equal(check(why, sizeof why, JWT_USER, USER_SEED, EXP - 1), FQ_OK);
    assert_string_equal(why, "user fairq (" USER_PUB ") signed by " ACCOUNT_PUB
                             ", expires 2033-05-18T03:33:20Z, its seed matching");
    /* nats-io/jwt: expired once now is past exp */
    assert_int_equal(check(why, sizeof why, JWT_USER, USER_SEED, EXP), FQ_OK);
    assert_int_equal(check(why, sizeof why, JWT_USER, USER_SEED, EXP + 1), FQ_EINVAL);
    assert_string_equal(why, "its user JWT (" USER_PUB ") expired at 2033-05-18T03:33:20Z: "
                             "issue the user a new one");
}

static void test_a_seed_of_another_key_is_named(void **state)
{
    (void)state;
    char why[512];
    assert_int_equal(check(why, sizeof why, JWT_USER, OTHER_SEED, EXP - 1), FQ_EINVAL);
    assert_non_null(strstr(why, "its nkey seed is not the key of its user JWT: the seed's public "
                                "key is " OTHER_PUB ", the JWT is for " USER_PUB));
    assert_int_equal(check(why, sizeof why, JWT_USER, ACCOUNT_SEED, EXP - 1), FQ_EINVAL);
    assert_non_null(strstr(why, "not a user's seed"));
    /* one character changed: the checksum */
    assert_int_equal(check(why, sizeof why, JWT_USER,
                           "SUAF7CIPKJXUOVLX4IULB2LUGDY54EPJSPDPRRLCSQIZIIMFGSVDW3GINU", EXP - 1),
                     FQ_EINVAL);
    assert_non_null(strstr(why, "checksum"));
    assert_int_equal(check(why, sizeof why, JWT_USER, USER_PUB, EXP - 1), FQ_EINVAL);
    assert_non_null(strstr(why, "its nkey seed is not usable"));
}

static void test_a_jwt_not_its_issuers_or_not_a_users_is_named(void **state)
{
    (void)state;
    char why[512];
    assert_int_equal(check(why, sizeof why, JWT_USER_BADSIG, USER_SEED, EXP - 1), FQ_EINVAL);
    assert_string_equal(why, "its user JWT (" USER_PUB ") is not signed by the key it names as "
                             "its issuer (" ACCOUNT_PUB "): altered, or not a NATS JWT");
    assert_int_equal(check(why, sizeof why, JWT_ACCOUNT, USER_SEED, EXP - 1), FQ_EINVAL);
    assert_string_equal(why, "its JWT is an account's (" ACCOUNT_PUB "), not a user's");
    assert_int_equal(check(why, sizeof why, "not.a.jwt!", USER_SEED, EXP - 1), FQ_EINVAL);
    assert_non_null(strstr(why, "its user JWT"));
    assert_int_equal(check(why, sizeof why, JWT_HEAD "e30.", USER_SEED, EXP - 1), FQ_EINVAL);
    assert_non_null(strstr(why, "lack \"sub\" or \"iss\""));
}

static void test_a_file_that_is_not_a_credentials_file_is_named(void **state)
{
    (void)state;
    char why[512], path[128];
    assert_int_equal(fq_creds_check(why, sizeof why, "/nonexistent/fairq.creds", 0), FQ_EIO);
    assert_string_equal(why, "cannot read it: No such file or directory");
    snprintf(path, sizeof path, "/tmp/fairq-test-creds-%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(JWT_USER "\n", f);
    fclose(f);
    assert_int_equal(fq_creds_check(why, sizeof why, path, 0), FQ_EINVAL);
    assert_non_null(strstr(why, "no user JWT in it"));
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("-----BEGIN NATS USER JWT-----\n" JWT_USER "\n------END NATS USER JWT------\n", f);
    fclose(f);
    assert_int_equal(fq_creds_check(why, sizeof why, path, 0), FQ_EINVAL);
    assert_non_null(strstr(why, "no nkey seed in it"));
    unlink(path);
    /* a short buffer is cut, not overrun */
    char small[8];
    assert_int_equal(check(small, sizeof small, JWT_USER, OTHER_SEED, 0), FQ_EINVAL);
    assert_int_equal(strlen(small), sizeof small - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_good_file_names_its_user_until_it_expires),
        cmocka_unit_test(test_a_seed_of_another_key_is_named),
        cmocka_unit_test(test_a_jwt_not_its_issuers_or_not_a_users_is_named),
        cmocka_unit_test(test_a_file_that_is_not_a_credentials_file_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
