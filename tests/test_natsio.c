/* test_natsio.c -- what the NATS adapter does without a server: PubAck replies, header names, and the size of what a publish writes, against what it writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <nats/nats.h>

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

#ifdef FQ_NATS_RAW_HEADERS
/* libnats's constructor of received messages, which natsio uses too (it
 * exports it without declaring it; the build checks): a message whose
 * header block is the first hdr_len bytes of buf, as a producer wrote it. */
natsStatus natsMsg_create(natsMsg **m, const char *subj, int subj_len, const char *reply,
                          int reply_len, const char *buf, int buf_len, int hdr_len);
#endif

/* A received message with header block hdr (as written) and body. */
static fq_nio_msg *raw(const char *hdr, const char *body)
{
#ifndef FQ_NATS_RAW_HEADERS
    (void)hdr;
    (void)body;
    skip();     /* this libnats cannot make one */
    return NULL;
#else
    size_t hl = strlen(hdr), bl = strlen(body);
    char *buf = malloc(hl + bl + 1);
    assert_non_null(buf);
    memcpy(buf, hdr, hl);
    memcpy(buf + hl, body, bl);
    natsMsg *m = NULL;
    assert_int_equal(natsMsg_create(&m, "fair.submit.a", 13, NULL, 0, buf, (int)(hl + bl), (int)hl),
                     NATS_OK);
    free(buf);
    return (fq_nio_msg *)m;
#endif
}

static void test_header_names(void **state)
{
    (void)state;
    static const char *const good[] = {"Fair-Tenant", "X-1", "a", "!#$%&'*+-.^_`|~09AZaz"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(fq_nio_header_name_valid(good[i], strlen(good[i])));
    static const char *const bad[] = {"", "Fair-Tenant ", " X", "a b", "a:b", "a\tb", "a\r\nb",
                                      "(x)", "a,b", "a/b", "a;b", "a=b", "a\"b", "a{b", "\x7f",
                                      "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(fq_nio_header_name_valid(bad[i], strlen(bad[i])));
    /* the length rules, not a NUL: a name with a NUL inside is not one */
    assert_false(fq_nio_header_name_valid("a\0b", 3));
}

static void test_header_bytes(void **state)
{
    (void)state;
    fq_nio_hdr h[] = {{"A", "b"}, {"Key", "value"}};
    assert_int_equal(fq_nio_header_bytes(NULL, 0, 0), 0);
    /* "NATS/1.0\r\n" "A: b\r\n" "\r\n" */
    assert_int_equal(fq_nio_header_bytes(h, 1, 0), 10 + 6 + 2);
    assert_int_equal(fq_nio_header_bytes(h, 2, 0), 10 + 6 + 12 + 2);
    assert_int_equal(fq_nio_header_bytes(NULL, 0, 6), 10 + 6 + 2);
    assert_int_equal(fq_nio_header_bytes(h, 2, 100), 10 + 6 + 12 + 100 + 2);
}

/* Size o, build it as a publish would, and compare: the size is exact, the
 * block starts with o's own headers and holds every carried line. */
static void check_built(const fq_nio_out *o, size_t want_carried)
{
    fq_nio_size sz;
    assert_int_equal(fq_nio_out_size(&sz, o), FQ_OK);
    assert_string_equal(sz.bad, "");
    assert_int_equal(sz.carried, want_carried);
    assert_int_equal(sz.header, fq_nio_header_bytes(o->hdrs, o->n_hdrs, want_carried));
    fq_buf b = {0};
    void *m = NULL;
    assert_int_equal(fq_nio_natsmsg_create(&m, o, &b), FQ_OK);
    assert_int_equal(b.len, sz.total);
    assert_int_equal(sz.total, sz.header + o->len);
    if (o->n_hdrs) {
        char first[256];
        snprintf(first, sizeof first, "NATS/1.0\r\n%s: %s\r\n", o->hdrs[0].key, o->hdrs[0].value);
        assert_memory_equal(b.p, first, strlen(first));
    }
    fq_nio_natsmsg_free(m);
    free(b.p);
}

static void test_size_is_what_is_written(void **state)
{
    (void)state;
    /* Written compactly ("k:v"), folded, with a value given twice, a
     * Nats-* header (dropped), a header the publish sets itself (dropped,
     * in any case) and one with CR and LF in its value as a producer may
     * not write them but as nats.c reads them. */
    fq_nio_msg *c = raw("NATS/1.0\r\n"
                        "a:b\r\n"
                        "Multi: one\r\n"
                        "Multi: two\r\n"
                        "Nats-Msg-Id: mine\r\n"
                        "fair-tenant: victim\r\n"
                        "Folded: x\r\n y\r\n"
                        "\r\n",
                        "the body");
    fq_nio_hdr own[] = {{"Nats-Msg-Id", "a/r-1"}, {"Fair-Tenant", "a"}, {"Fair-Run-Id", "r-1"}};
    fq_nio_out o = {.subject = "fair.dispatch", .data = "the body", .len = 8, .hdrs = own,
                    .n_hdrs = 3, .carry = c};
    /* "a: b\r\n" (one byte more than as sent), "Multi: one\r\n" twice,
     * "Folded: x y\r\n" */
    check_built(&o, 6 + 12 + 12 + 13);
    /* Without headers of its own: the same lines, no more. */
    o.n_hdrs = 0;
    check_built(&o, 6 + 12 + 12 + 13 + 21);
    /* Carrying every header (a message sent again). */
    o.carry_all = true;
    check_built(&o, 6 + 12 + 12 + 13 + 21 + 19);
    fq_nio_natsmsg_free(c);
    /* Nothing to carry, nothing of its own: a plain message. */
    fq_nio_out plain = {.subject = "s", .data = "xy", .len = 2};
    check_built(&plain, 0);
    fq_nio_msg *none = raw("", "xy");
    plain.carry = none;
    check_built(&plain, 0);
    fq_nio_natsmsg_free(none);
}

/* Headers no message may carry are found, named and said why. */
static void test_unfit_headers(void **state)
{
    (void)state;
    static const struct {
        const char *block, *why;
    } cases[] = {
        {"NATS/1.0\r\n: x\r\n\r\n", "header \"\": its name is not a header token"},
        {"NATS/1.0\r\nFair-Tenant : victim\r\n\r\n",
         "header \"Fair-Tenant \": its name is not a header token"},
        {"NATS/1.0\r\nX-Nats-Msg-Id-Decoy: 1\r\n\r\n",
         "header \"X-Nats-Msg-Id-Decoy\": its name holds Nats-Msg-Id"},
        {"NATS/1.0\r\nX-Note: see nats-msg-id: 7\r\n\r\n",
         "header \"X-Note\": its value holds Nats-Msg-Id"},
        {"NATS/1.0\r\nFair-Run-Id: Nats-Msg-Id\r\n\r\n",
         "header \"Fair-Run-Id\": its value holds Nats-Msg-Id"},
    };
    fq_nio_hdr own[] = {{"Nats-Msg-Id", "a/r-1"}, {"Fair-Run-Id", "r-1"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fq_nio_msg *c = raw(cases[i].block, "b");
        fq_nio_out o = {.subject = "fair.dispatch", .data = "b", .len = 1, .hdrs = own,
                        .n_hdrs = 2, .carry = c};
        fq_nio_size sz;
        assert_int_equal(fq_nio_out_size(&sz, &o), FQ_EINVAL);
        if (strncmp(sz.bad, cases[i].why, strlen(cases[i].why)) != 0)
            fail_msg("case %zu: \"%s\", expected \"%s\"", i, sz.bad, cases[i].why);
        fq_nio_natsmsg_free(c);
    }
    /* A Nats-* header may hold it: it is never carried. */
    fq_nio_msg *c = raw("NATS/1.0\r\nNats-Msg-Id: x\r\nNats-Expected-Stream: Nats-Msg-Id\r\n\r\n",
                        "b");
    fq_nio_out o = {.subject = "fair.dispatch", .data = "b", .len = 1, .hdrs = own, .n_hdrs = 2,
                    .carry = c};
    check_built(&o, 0);
    fq_nio_natsmsg_free(c);
    /* A name made of bytes a header or a log line cannot hold is quoted safely. */
    c = raw("NATS/1.0\r\nX\x01\"\\: v\r\n\r\n", "b");
    o.carry = c;
    fq_nio_size sz;
    assert_int_equal(fq_nio_out_size(&sz, &o), FQ_EINVAL);
    assert_string_equal(sz.bad, "header \"X\\x01\\x22\\x5c\": its name is not a header token");
    fq_nio_natsmsg_free(c);
}

/* What fq_nio_publish would write for o (its scratch buffer: header block
 * and body), as a malloc'd copy of *len bytes. */
static char *built(const fq_nio_out *o, size_t *len)
{
    fq_buf b = {0};
    void *m = NULL;
    assert_int_equal(fq_nio_natsmsg_create(&m, o, &b), FQ_OK);
    fq_nio_natsmsg_free(m);
    *len = b.len;
    return b.p;
}

/* A message kept as its carried lines and body, instead of itself, is
 * published byte for byte as it would have been (whatever headers the
 * publish sets itself), and sized alike. */
static void check_lines_same(fq_nio_msg *c, const char *body, const fq_nio_hdr *own, size_t n_own)
{
    fq_buf lines = {0};
    char bad[160];
    assert_int_equal(fq_nio_msg_carry_lines(&lines, bad, NULL, c), FQ_OK);
    assert_string_equal(bad, "");
    for (size_t k = 0; k <= n_own; k++) {
        fq_nio_out a = {.subject = "fair.dispatch", .data = body, .len = strlen(body),
                        .hdrs = own, .n_hdrs = k, .carry = c};
        fq_nio_out b = a;
        b.carry = NULL;
        b.carry_lines = lines.p;
        b.carry_len = lines.len;
        fq_nio_size sa, sb;
        assert_int_equal(fq_nio_out_size(&sa, &a), FQ_OK);
        assert_int_equal(fq_nio_out_size(&sb, &b), FQ_OK);
        assert_int_equal(sa.carried, sb.carried);
        assert_int_equal(sa.total, sb.total);
        size_t la, lb;
        char *pa = built(&a, &la), *pb = built(&b, &lb);
        assert_int_equal(la, lb);
        assert_int_equal(lb, sb.total);
        assert_memory_equal(pa, pb, la);
        free(pa);
        /* the same lines as a header block */
        char *blk = malloc(lines.len + 12);
        assert_non_null(blk);
        memcpy(blk, "NATS/1.0\r\n", 10);
        if (lines.len)
            memcpy(blk + 10, lines.p, lines.len);
        memcpy(blk + 10 + lines.len, "\r\n", 2);
        b.carry_lines = blk;
        b.carry_len = lines.len + 12;
        assert_int_equal(fq_nio_out_size(&sb, &b), FQ_OK);
        assert_int_equal(sa.total, sb.total);
        pa = built(&b, &la);
        assert_int_equal(la, lb);
        assert_memory_equal(pa, pb, la);
        free(pa);
        free(blk);
        free(pb);
    }
    free(lines.p);
}

static void test_carry_lines(void **state)
{
    (void)state;
    fq_nio_msg *c = raw("NATS/1.0\r\n"
                        "a:b\r\n"
                        "Multi: one\r\n"
                        "Multi: two\r\n"
                        "Nats-Msg-Id: mine\r\n"
                        "fair-tenant: victim\r\n"
                        "Folded: x\r\n y\r\n"
                        "\r\n",
                        "the body");
    fq_buf lines = {0};
    char bad[160];
    assert_int_equal(fq_nio_msg_carry_lines(&lines, bad, NULL, c), FQ_OK);
    /* every line but Nats-Msg-Id's, as a publish writes them, in the
     * order of the block */
    static const char want[] = "a: b\r\nMulti: one\r\nMulti: two\r\nfair-tenant: victim\r\n"
                               "Folded: x y\r\n";
    assert_int_equal(lines.len, sizeof want - 1);
    assert_memory_equal(lines.p, want, sizeof want - 1);
    free(lines.p);
    /* the same headers with more names after them (as a read back by
     * sequence has): the same lines, though nats.c's map holds them in
     * another order */
    fq_nio_msg *more = raw("NATS/1.0\r\n"
                           "a:b\r\n"
                           "Multi: one\r\n"
                           "Multi: two\r\n"
                           "Nats-Msg-Id: mine\r\n"
                           "fair-tenant: victim\r\n"
                           "Folded: x\r\n y\r\n"
                           "Nats-Stream: S\r\nNats-Subject: fair.submit.a\r\n"
                           "Nats-Sequence: 7\r\nNats-Time-Stamp: 2026-12-04T00:00:00Z\r\n"
                           "\r\n",
                           "the body");
    lines = (fq_buf){0};
    assert_int_equal(fq_nio_msg_carry_lines(&lines, bad, NULL, more), FQ_OK);
    assert_int_equal(lines.len, sizeof want - 1);
    assert_memory_equal(lines.p, want, sizeof want - 1);
    free(lines.p);
    fq_nio_natsmsg_free(more);
    fq_nio_hdr own[] = {{"Nats-Msg-Id", "a/r-1"}, {"Fair-Tenant", "a"}, {"Multi", "m"},
                        {"Fair-Run-Id", "r-1"}};
    check_lines_same(c, "the body", own, 4);
    fq_nio_natsmsg_free(c);
    /* none at all, or only Nats-*: no lines, a plain message */
    c = raw("", "xy");
    check_lines_same(c, "xy", own, 2);
    fq_nio_natsmsg_free(c);
    c = raw("NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n", "xy");
    lines = (fq_buf){0};
    assert_int_equal(fq_nio_msg_carry_lines(&lines, bad, NULL, c), FQ_OK);
    assert_int_equal(lines.len, 0);
    free(lines.p);
    check_lines_same(c, "xy", own, 0);
    fq_nio_natsmsg_free(c);
}

/* A header unfit to carry is refused by the same sentence whether its
 * message is sized or turned into lines. */
static void test_carry_lines_unfit(void **state)
{
    (void)state;
    static const char *const blocks[] = {
        "NATS/1.0\r\nFair-Tenant : victim\r\n\r\n",
        "NATS/1.0\r\nX-Nats-Msg-Id-Decoy: 1\r\n\r\n",
        "NATS/1.0\r\nX-Note: see nats-msg-id: 7\r\n\r\n",
    };
    fq_nio_hdr own[] = {{"Nats-Msg-Id", "a/r-1"}};
    for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++) {
        fq_nio_msg *c = raw(blocks[i], "b");
        fq_nio_out o = {.subject = "s", .data = "b", .len = 1, .hdrs = own, .n_hdrs = 1,
                        .carry = c};
        fq_nio_size sz;
        assert_int_equal(fq_nio_out_size(&sz, &o), FQ_EINVAL);
        fq_nio_natsmsg_free(c);
        /* a fresh message: nats.c reads a block it cannot parse once */
        c = raw(blocks[i], "b");
        fq_buf lines = {0};
        char bad[160];
        assert_int_equal(fq_nio_msg_carry_lines(&lines, bad, NULL, c), FQ_EINVAL);
        assert_string_equal(bad, sz.bad);
        free(lines.p);
        fq_nio_natsmsg_free(c);
    }
    /* Bytes that are not lines are refused, not read past. */
    static const char *const junk[] = {"X: 1", "X 1\r\n", "X: 1\n", "\r\n", "X: 1\r\nY"};
    for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
        fq_nio_out o = {.subject = "s", .data = "b", .len = 1, .hdrs = own, .n_hdrs = 1,
                        .carry_lines = junk[i], .carry_len = strlen(junk[i])};
        fq_nio_size sz;
        assert_int_equal(fq_nio_out_size(&sz, &o), FQ_EINVAL);
        fq_buf b = {0};
        void *m = NULL;
        assert_int_equal(fq_nio_natsmsg_create(&m, &o, &b), FQ_EINVAL);
        assert_null(m);
        free(b.p);
    }
}

/* The claims read on the carry pass, from a message's lines as the lines
 * are written, whatever the lines' fate. */
static fq_status claims_of(const char **v, uint32_t *twice, fq_buf *lines, const char *block)
{
    static const char *const names[] = {"Fair-Run-Id", "Fair-Subtenant", "Fair-Class"};
    fq_nio_claims cl = {.names = names, .n = 3, .vals = v, .twice = 7};
    fq_nio_msg *c = raw(block, "b");
    char bad[160];
    fq_status s = fq_nio_msg_carry_lines(lines, bad, &cl, c);
    /* the values are the message's: copied before it goes */
    static char keep[3][64];
    for (int i = 0; i < 3; i++)
        v[i] = v[i] ? strcpy(keep[i], v[i]) : NULL;
    *twice = cl.twice;
    fq_nio_natsmsg_free(c);
    return s;
}

static void test_carry_lines_claims(void **state)
{
    (void)state;
    const char *v[3];
    uint32_t twice;
    fq_buf lines = {0};
    /* in any case, on the pass that writes the lines, which stay as they
     * were */
    assert_int_equal(claims_of(v, &twice, &lines,
                               "NATS/1.0\r\nfair-subtenant: x\r\nX-Other: 1\r\n"
                               "FAIR-RUN-ID: r-1\r\nNats-Msg-Id: m\r\n\r\n"),
                     FQ_OK);
    static const char want[] = "fair-subtenant: x\r\nX-Other: 1\r\nFAIR-RUN-ID: r-1\r\n";
    assert_int_equal(lines.len, sizeof want - 1);
    assert_memory_equal(lines.p, want, sizeof want - 1);
    assert_string_equal(v[0], "r-1");
    assert_string_equal(v[1], "x");
    assert_null(v[2]);
    assert_int_equal(twice, 0);
    /* twice: in two spellings, or as two values of one; none believed */
    assert_int_equal(claims_of(v, &twice, &lines,
                               "NATS/1.0\r\nFair-Class: a\r\nfair-class: b\r\n"
                               "Fair-Subtenant: s\r\nFair-Subtenant: s\r\n"
                               "Fair-Run-Id: r-2\r\n\r\n"),
                     FQ_OK);
    assert_int_equal(twice, 6);
    assert_string_equal(v[0], "r-2");
    assert_null(v[1]);
    assert_null(v[2]);
    /* past a header unfit to carry: read all the same, so that a bad
     * claim is refused for itself */
    assert_int_equal(claims_of(v, &twice, &lines,
                               "NATS/1.0\r\nX-Nats-Msg-Id-Decoy: 1\r\n"
                               "fair-subtenant: not one\r\nFair-Class: c\r\nfair-CLASS: d\r\n"
                               "\r\n"),
                     FQ_EINVAL);
    assert_string_equal(v[1], "not one");
    assert_null(v[2]);
    assert_int_equal(twice, 4);
    /* a block nats.c cannot parse (a header with an empty value last, as
     * nats.c sends one set empty): what it could read, claims too */
    assert_int_equal(claims_of(v, &twice, &lines,
                               "NATS/1.0\r\nFair-Subtenant: y\r\nX-Ok: 1\r\n"
                               "Fair-Run-Id: \r\n\r\n"),
                     FQ_OK);
    static const char half[] = "Fair-Subtenant: y\r\nX-Ok: 1\r\n";
    assert_int_equal(lines.len, sizeof half - 1);
    assert_memory_equal(lines.p, half, sizeof half - 1);
    assert_string_equal(v[1], "y");
    assert_null(v[0]);
    assert_int_equal(claims_of(v, &twice, &lines, "NATS/1.0\r\nX-Ok: 1\r\nno colon here\r\n\r\n"),
                     FQ_OK);
    assert_int_equal(lines.len, strlen("X-Ok: 1\r\n"));
    /* none at all */
    assert_int_equal(claims_of(v, &twice, &lines, ""), FQ_OK);
    assert_int_equal(lines.len, 0);
    assert_null(v[0]);
    assert_null(v[1]);
    assert_int_equal(twice, 0);
    free(lines.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_puback_parse),
        cmocka_unit_test(test_puback_parse_empty),
        cmocka_unit_test(test_header_names),
        cmocka_unit_test(test_header_bytes),
        cmocka_unit_test(test_size_is_what_is_written),
        cmocka_unit_test(test_unfit_headers),
        cmocka_unit_test(test_carry_lines),
        cmocka_unit_test(test_carry_lines_unfit),
        cmocka_unit_test(test_carry_lines_claims),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
