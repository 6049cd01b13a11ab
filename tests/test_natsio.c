/* test_natsio.c -- what the NATS adapter reads without a server: PubAck replies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "natsio.h"

/* PubAck replies as nats-server writes them, and what is not one. */
static void test_puback_parse(void **state)
{
    (void)state;
    fq_nio_event ev;
    const char *ok = "{\"stream\":\"S\",\"seq\":42}";
    fq_nio_parse_puback(&ev, ok, strlen(ok));
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(ev.seq, 42);
    assert_false(ev.duplicate);
    const char *dup = "{\"stream\":\"S\", \"seq\": 7,\"duplicate\": true}";
    fq_nio_parse_puback(&ev, dup, strlen(dup));
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(ev.seq, 7);
    assert_true(ev.duplicate);
    /* A key's name inside a string is escaped, so it is not the key. */
    const char *quoted = "{\"stream\":\"x\\\"seq\\\":5\",\"seq\":9}";
    fq_nio_parse_puback(&ev, quoted, strlen(quoted));
    assert_int_equal(ev.seq, 9);
    const char *err = "{\"error\":{\"code\":400,\"err_code\":10071,"
                      "\"description\":\"wrong last sequence: 3\"},\"seq\":0}";
    fq_nio_parse_puback(&ev, err, strlen(err));
    assert_int_equal(ev.status, FQ_EIO);
    assert_int_equal(ev.err_code, FQ_NIO_ERR_WRONG_LAST);
    /* Lengths are explicit: a number cut short by len is not read past it. */
    fq_nio_parse_puback(&ev, ok, strlen(ok) - 2);
    assert_int_equal(ev.status, FQ_OK);
    assert_int_equal(ev.seq, 4);
    const char *nodup = "{\"stream\":\"S\",\"domain\":\"hub\",\"seq\":7,\"duplicate\":false}";
    fq_nio_parse_puback(&ev, nodup, strlen(nodup));
    assert_int_equal(ev.seq, 7);
    assert_false(ev.duplicate);
    const char *bad[] = {"", "{}", "{\"seq\":0}", "{\"seq\":\"7\"}", "not json",
                         "{\"seq\":99999999999999999999999}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fq_nio_parse_puback(&ev, bad[i], strlen(bad[i]));
        assert_int_equal(ev.status, FQ_EIO);
        assert_int_equal(ev.err_code, 0);
    }
}

/* An empty reply (no responders) comes with NULL data from nats.c, or a
 * buffer of no bytes. Either is no PubAck, and NULL is not offset (NULL + 0
 * is undefined behaviour, which clang's UBSan reports). */
static void test_puback_parse_empty(void **state)
{
    (void)state;
    fq_nio_event ev = {.status = FQ_OK, .seq = 5, .duplicate = true, .err_code = 3};
    fq_nio_parse_puback(&ev, NULL, 0);
    assert_int_equal(ev.status, FQ_EIO);
    assert_int_equal(ev.seq, 0);
    assert_false(ev.duplicate);
    assert_int_equal(ev.err_code, 0);
    char *none = malloc(1);
    assert_non_null(none);
    ev = (fq_nio_event){.status = FQ_OK, .seq = 5};
    fq_nio_parse_puback(&ev, none, 0);
    assert_int_equal(ev.status, FQ_EIO);
    assert_int_equal(ev.seq, 0);
    free(none);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_puback_parse),
        cmocka_unit_test(test_puback_parse_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
