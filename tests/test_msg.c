/* test_msg.c -- submit bodies and headers, completions, and the JSON writer against the wire contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "msg.h"

#define MAX_EST 100000u
#define TENANT "acme"

/* Every body is copied into a buffer of exactly its length, with no NUL
 * after it, so that a read past the payload shows under AddressSanitizer.
 * The caller frees the copy. */
static void *exact_copy(const void *body, size_t len)
{
    void *copy = malloc(len ? len : 1);

    assert_non_null(copy);
    if (len)
        memcpy(copy, body, len);
    return copy;
}

static fq_status submit_n(fq_submit *out, const void *body, size_t len,
                          const fq_submit_headers *h, char *err)
{
    void *copy = exact_copy(body, len);
    fq_status st;

    err[0] = '\0';
    st = fq_submit_parse(out, TENANT, len ? copy : NULL, len, h, MAX_EST, err, 256);
    free(copy);
    return st;
}

static fq_status submit(fq_submit *out, const char *body, char *err)
{
    return submit_n(out, body, strlen(body), NULL, err);
}

static fq_status completion_n(fq_completion *out, const void *body, size_t len, char *err)
{
    void *copy = exact_copy(body, len);
    fq_status st;

    err[0] = '\0';
    st = fq_completion_parse(out, copy, len, MAX_EST, err, 256);
    free(copy);
    return st;
}

static fq_status completion(fq_completion *out, const char *body, char *err)
{
    return completion_n(out, body, strlen(body), err);
}

static void assert_defaults(const fq_submit *s)
{
    assert_string_equal(s->run_id, "");
    assert_string_equal(s->workflow, "");
    assert_int_equal(s->est_tokens, 0);
}

/* A refusal names the field, gives a reason, and is safe in a header. */
static void assert_refused(fq_status st, const char *err, const char *field)
{
    assert_int_equal(st, FQ_EINVAL);
    assert_non_null(strstr(err, field));
    assert_true(strlen(err) > strlen(field) + 8);
    for (const char *p = err; *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);
}

static void refuse_submit(const char *body, const char *field)
{
    fq_submit s;
    char err[256];

    assert_refused(submit(&s, body, err), err, field);
    assert_defaults(&s);
}

static void opaque_submit_n(const void *body, size_t len)
{
    fq_submit s;
    char err[256];

    assert_int_equal(submit_n(&s, body, len, NULL, err), FQ_OK);
    assert_true(s.opaque);
    assert_defaults(&s);
}

static void opaque_submit(const char *body)
{
    opaque_submit_n(body, strlen(body));
}

/* Submit bodies. */

static void test_submit_fields_read(void **state)
{
    fq_submit s;
    char err[256];

    (void)state;
    assert_int_equal(submit(&s, " {\"run_id\":\"r-1\",\"workflow\":\"summarize\","
                               "\"est_tokens\":1200,\"prompt\":{\"x\":[1,2]}} \n", err),
                     FQ_OK);
    assert_false(s.opaque);
    assert_string_equal(s.run_id, "r-1");
    assert_string_equal(s.workflow, "summarize");
    assert_int_equal(s.est_tokens, 1200);

    assert_int_equal(submit(&s, "{}", err), FQ_OK);
    assert_false(s.opaque);
    assert_defaults(&s);

    /* null is how many clients write an optional field they lack */
    assert_int_equal(submit(&s, "{\"run_id\":null,\"est_tokens\":null}", err), FQ_OK);
    assert_false(s.opaque);
    assert_defaults(&s);

    /* integral values written as doubles are integers */
    assert_int_equal(submit(&s, "{\"est_tokens\":1.5e3}", err), FQ_OK);
    assert_int_equal(s.est_tokens, 1500);
    assert_int_equal(submit(&s, "{\"tenant\":\"acme\"}", err), FQ_OK);
}

static void test_submit_bounds_accepted(void **state)
{
    char body[512], id[FQ_RUN_ID_MAX + 1], wf[FQ_WORKFLOW_MAX + 1];
    fq_submit s;
    char err[256];

    (void)state;
    memset(id, 'i', FQ_RUN_ID_MAX);
    id[FQ_RUN_ID_MAX] = '\0';
    memset(wf, 'w', FQ_WORKFLOW_MAX);
    wf[FQ_WORKFLOW_MAX] = '\0';
    snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"workflow\":\"%s\",\"est_tokens\":%u}",
             id, wf, MAX_EST);
    assert_int_equal(submit(&s, body, err), FQ_OK);
    assert_string_equal(s.run_id, id);
    assert_string_equal(s.workflow, wf);
    assert_int_equal(s.est_tokens, MAX_EST);
    assert_int_equal(submit(&s, "{\"est_tokens\":1,\"run_id\":\"!~\"}", err), FQ_OK);
    assert_int_equal(s.est_tokens, 1);
    assert_string_equal(s.run_id, "!~");
}

static void test_submit_opaque_bodies(void **state)
{
    (void)state;
    opaque_submit_n(NULL, 0);
    opaque_submit("");
    opaque_submit(" \t\r\n");
    opaque_submit("hello, worker");
    opaque_submit("{");
    opaque_submit("{\"run_id\":");
    opaque_submit("{\"run_id\":\"r\"");
    opaque_submit("{run_id: \"r\"}");
    opaque_submit("{'run_id':'r'}");
    opaque_submit("{\"run_id\":\"r\",}");
    opaque_submit("[{\"run_id\":\"r\"}]");
    opaque_submit("42");
    opaque_submit("\"run_id\"");
    opaque_submit("null");
    opaque_submit("true");
    /* JSON has no NaN or Infinity: such a body is not JSON */
    opaque_submit("{\"est_tokens\":NaN}");
    opaque_submit("{\"est_tokens\":Infinity}");
    /* an object followed by anything else is not one JSON object */
    opaque_submit("{\"run_id\":\"r\"} trailing");
    opaque_submit("{\"run_id\":\"r\"}{\"run_id\":\"s\"}");
    opaque_submit_n("{\"run_id\":\"r\"}\0", 15);
    /* a byte order mark is not JSON (RFC 8259 section 8.1) */
    opaque_submit("\xef\xbb\xbf{\"run_id\":\"r\"}");
    /* raw control characters, which cJSON lets through */
    opaque_submit("{\"run_id\":\"a\x01\"}");
    opaque_submit("{\x01\"run_id\":\"a\"}");
    /* a lone surrogate escape */
    opaque_submit("{\"run_id\":\"\\ud800\"}");
}

/* A submit body to the depth given: the object, then depth - 1 arrays in
 * a member "x", then a run_id. */
static char *nested_body(size_t depth, size_t *len)
{
    char *b = malloc(2 * depth + 64);
    size_t n = 0;

    assert_non_null(b);
    n += (size_t)sprintf(b, "{\"x\":");
    for (size_t i = 1; i < depth; i++)
        b[n++] = '[';
    for (size_t i = 1; i < depth; i++)
        b[n++] = ']';
    n += (size_t)sprintf(b + n, ",\"run_id\":\"r\"}");
    *len = n;
    return b;
}

/* The one-pass scanner reads what cJSON's tree read before it: escapes are
 * decoded before a key is matched, numbers are read as cJSON reads them, and
 * the nesting limit is cJSON's. */
static void test_submit_scanner_as_cjson(void **state)
{
    fq_submit s;
    char err[256], *b;
    size_t len;

    (void)state;
    /* an escaped key is the field it spells; other escapes are decoded */
    assert_int_equal(submit(&s, "{\"run\\u005fid\":\"r\\/1\",\"work\\u0066low\":"
                                "\"w\",\"p\":\"\\ud83d\\ude00\\n\\\"\"}", err), FQ_OK);
    assert_string_equal(s.run_id, "r/1");
    assert_string_equal(s.workflow, "w");
    /* a surrogate pair decodes to 4 bytes, which a run id may not hold */
    assert_int_equal(submit(&s, "{\"run_id\":\"a\\ud83d\\ude00\"}", err), FQ_EINVAL);
    assert_string_equal(err, "run_id: has a byte that is not allowed (0xf0 at offset 1); "
                        "it must be printable ASCII without spaces or control characters");
    /* a lone low surrogate, a high one without its pair, a bad escape */
    opaque_submit("{\"p\":\"\\udc00\"}");
    opaque_submit("{\"p\":\"\\ud800\\u0041\"}");
    opaque_submit("{\"p\":\"\\x41\"}");
    opaque_submit("{\"p\":\"\\u12\"}");
    /* cJSON reads \u with a non-hex digit as U+0000, which ends its string:
     * kept, so "run_id\uzzzz" is run_id, and a deeper \u0000 is no matter */
    assert_int_equal(submit(&s, "{\"run_id\\uzzzz\":\"r\",\"p\":[\"\\u0000\"]}", err),
                     FQ_OK);
    assert_string_equal(s.run_id, "r");
    assert_int_equal(submit(&s, "{\"run_id\":\"r\\u0000x\"}", err), FQ_EINVAL);
    assert_non_null(strstr(err, "\\u0000"));
    /* invalid UTF-8 in a string fairq never reads, and outside strings */
    opaque_submit("{\"p\":{\"q\":\"\xc3\"}}");
    opaque_submit("{\"p\":1\xc3\xa9}");
    /* numbers: strtod's reading of what cJSON takes for one */
    static const struct { const char *body; uint32_t est; } nums[] = {
        {"{\"est_tokens\":1e3}", 1000}, {"{\"est_tokens\":1.0}", 1},
        {"{\"est_tokens\":1E+2}", 100}, {"{\"est_tokens\":01}", 1},
        {"{\"est_tokens\":2.}", 2}, {"{\"est_tokens\":5e-0}", 5},
        {"{\"est_tokens\":1.0000000000000000000000000000000000000000000000000000000000000000000}",
         1},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        assert_int_equal(submit(&s, nums[i].body, err), FQ_OK);
        assert_false(s.opaque);
        assert_int_equal(s.est_tokens, nums[i].est);
    }
    assert_int_equal(submit(&s, "{\"est_tokens\":-0}", err), FQ_EINVAL);
    assert_string_equal(err, "est_tokens: must be an integer from 1 to 100000, got -0");
    assert_int_equal(submit(&s, "{\"est_tokens\":1.5}", err), FQ_EINVAL);
    assert_int_equal(submit(&s, "{\"est_tokens\":\"7\"}", err), FQ_EINVAL);
    assert_int_equal(submit(&s, "{\"est_tokens\":true}", err), FQ_EINVAL);
    assert_int_equal(submit(&s, "{\"run_id\":{\"run_id\":\"r\"}}", err), FQ_EINVAL);
    assert_string_equal(err, "run_id: must be a string");
    opaque_submit("{\"est_tokens\":+1}");
    opaque_submit("{\"est_tokens\":.5}");
    opaque_submit("{\"est_tokens\":1e}");
    opaque_submit("{\"est_tokens\":-}");
    opaque_submit("{\"est_tokens\":0x10}");
    /* a null counts as absent, but still as given */
    assert_int_equal(submit(&s, "{\"run_id\":null,\"p\":1,\"run_id\":\"r\"}", err), FQ_EINVAL);
    assert_string_equal(err, "run_id: given twice in the body");
    assert_int_equal(submit(&s, "{\"run_id\":\"r\",\"p\":{\"run_id\":\"s\"},\"q\":[{\"run_id\":1}]}",
                            err), FQ_OK);
    assert_string_equal(s.run_id, "r");
    /* whitespace around every token, and none */
    assert_int_equal(submit(&s, " \r\n\t{ \"run_id\" : \"r\" , \"p\" : [ 1 , true , null ] } \n",
                            err), FQ_OK);
    assert_string_equal(s.run_id, "r");
    assert_int_equal(submit(&s, "{}", err), FQ_OK);
    assert_false(s.opaque);
    opaque_submit("{\"p\":[1,]}");
    opaque_submit("{\"p\":tru}");
    opaque_submit("{\"p\" \"q\"}");
    opaque_submit("{\"p\":1\"q\":2}");
    opaque_submit("{\"p\":1}]");
    /* cJSON nests 1000 containers deep, the object included, and no more */
    b = nested_body(1000, &len);
    assert_int_equal(submit_n(&s, b, len, NULL, err), FQ_OK);
    assert_false(s.opaque);
    assert_string_equal(s.run_id, "r");
    free(b);
    b = nested_body(1001, &len);
    opaque_submit_n(b, len);
    free(b);
    b = nested_body(1000000, &len);     /* no recursion: no stack to run out of */
    opaque_submit_n(b, len);
    free(b);
}

static void test_submit_invalid_utf8_is_opaque(void **state)
{
    static const char *const bad[] = {
        "{\"run_id\":\"r\",\"p\":\"\xff\"}",         /* never valid */
        "{\"run_id\":\"r\",\"p\":\"\xc0\xaf\"}",     /* overlong '/' */
        "{\"run_id\":\"r\",\"p\":\"\xe0\x80\xaf\"}", /* overlong in 3 bytes */
        "{\"run_id\":\"r\",\"p\":\"\xf0\x80\x80\xaf\"}", /* and in 4 */
        "{\"run_id\":\"r\",\"p\":\"\xed\xa0\x80\"}", /* a surrogate */
        "{\"run_id\":\"r\",\"p\":\"\xf4\x90\x80\x80\"}", /* past U+10FFFF */
        "{\"run_id\":\"r\",\"p\":\"\xe2\x82\"}",     /* truncated */
        "{\"run_id\":\"r\",\"p\":\"\x80\"}",         /* a lone continuation */
        "{\"run_id\":\"r\"}\xe2",                    /* cut at the end */
    };
    fq_submit s;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        opaque_submit(bad[i]);
    /* well-formed multibyte text elsewhere in the object is fine */
    assert_int_equal(submit(&s, "{\"run_id\":\"r\",\"p\":\"h\xc3\xa9 \xe2\x82\xac "
                               "\xf0\x9f\x98\x80\"}", err), FQ_OK);
    assert_false(s.opaque);
    assert_string_equal(s.run_id, "r");
}

static void test_submit_megabyte_bodies(void **state)
{
    const char *tail = "\",\"run_id\":\"big\",\"est_tokens\":9}";
    size_t n = 1 << 20;
    char *blob = malloc(n);
    fq_submit s;
    char err[256];
    uint32_t x = 12345;

    (void)state;
    assert_non_null(blob);
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        blob[i] = (char)(x >> 16);
    }
    blob[0] = '{';      /* random bytes that look like an object at first */
    opaque_submit_n(blob, n);
    memset(blob, 'x', n);
    opaque_submit_n(blob, n);

    /* a large JSON object is still read: a prompt can be big */
    memset(blob, 'x', n);
    memcpy(blob, "{\"prompt\":\"", 11);
    memcpy(blob + n - strlen(tail), tail, strlen(tail));
    assert_int_equal(submit_n(&s, blob, n, NULL, err), FQ_OK);
    assert_false(s.opaque);
    assert_string_equal(s.run_id, "big");
    assert_int_equal(s.est_tokens, 9);
    free(blob);
}

/* The scan takes the plain bytes of a string 8 at a time: a byte it must
 * look at is found in every position of a word and in the tail after the
 * last whole word, and the scan goes on in the right state after it (the
 * tab after the string is allowed only outside one). */
static void test_submit_scan_every_position(void **state)
{
    static const struct {
        const char *ins;    /* put into a string of the top-level object */
        int outcome;        /* 0: read (run_id follows), 1: opaque, 2: refused */
    } cases[] = {
        {"\x01", 1}, {"\x1f", 1}, {"\t", 1}, {"\"", 1}, {"\xff", 1}, {"\xc3", 1},
        {"\xed\xa0\x80", 1},            /* a surrogate */
        {"\x7f", 0}, {" ", 0}, {"\\n", 0}, {"\\\"", 0}, {"\\\\", 0}, {"\\u00e9", 0},
        {"\xc3\xa9", 0}, {"\xf0\x9f\x98\x80", 0}, {"{[}]", 0},
        {"\\u0000", 2},
    };
    char body[128], err[256];
    fq_submit s;

    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t at = 0; at <= 17; at++) {
            int n = snprintf(body, sizeof body, "{\"pad\":\"%.*s%s%.*s\",\t\"run_id\":\"r1\"}",
                             (int)at, "xxxxxxxxxxxxxxxxxxxxxxxx", cases[c].ins,
                             (int)(17 - at), "yyyyyyyyyyyyyyyyyyyyyyyy");
            fq_status st = submit_n(&s, body, (size_t)n, NULL, err);

            if (cases[c].outcome == 2) {
                assert_refused(st, err, "u0000");
                continue;
            }
            assert_int_equal(st, FQ_OK);
            assert_int_equal(s.opaque, cases[c].outcome == 1);
            assert_string_equal(s.run_id, cases[c].outcome == 1 ? "" : "r1");
        }
    }
}

/* cJSON's memory comes from a per-thread arena during a parse, from malloc
 * without it: the outcome is the same for every kind of body, including
 * one whose tree is larger than the arena (the rest from malloc, freed:
 * LeakSanitizer would see it otherwise). */
static void test_arena_same_outcome(void **state)
{
    static const char *const bodies[] = {
        "{\"run_id\":\"r-1\",\"workflow\":\"w\",\"est_tokens\":12,\"x\":{\"y\":[1,2,null]}}",
        "{\"run_id\":\"r-1\",\"est_tokens\":0}",
        "{\"run_id\":\"r-1\",\"run_id\":\"r-2\"}",
        "{\"run_id\":\"r-1\"} x",
        "{\"run_id\":\"r-1\",",
        "[1,2]",
        "",
        "{\"run_id\":\"r-1\",\"actual_tokens\":5,\"status\":\"ok\"}",
    };
    size_t big_len = 64 * 1024;
    char *big = malloc(big_len + 64), err[2][256];
    fq_completion done[2];
    size_t n = 0;

    (void)state;
    assert_non_null(big);
    /* 2,000 members: a tree of about 200 KB, past any arena */
    n += (size_t)sprintf(big, "{");
    for (int i = 0; i < 2000; i++)
        n += (size_t)sprintf(big + n, "\"k%d\":[%d,\"v\"],", i, i);
    n += (size_t)sprintf(big + n, "\"run_id\":\"late\",\"actual_tokens\":7,\"status\":\"error\"}");
    assert_true(n < big_len);

    for (size_t b = 0; b <= sizeof bodies / sizeof bodies[0]; b++) {
        const char *body = b < sizeof bodies / sizeof bodies[0] ? bodies[b] : big;
        size_t len = body == big ? n : strlen(body);
        fq_submit sub[2];
        fq_status st[2], dst[2];

        for (int on = 0; on < 2; on++) {
            fq_msg_set_arena(on);
            memset(err[on], 0, sizeof err[on]);
            st[on] = submit_n(&sub[on], body, len, NULL, err[on]);
            dst[on] = completion_n(&done[on], body, len, err[on] + 128);
        }
        fq_msg_set_arena(true);
        assert_int_equal(st[0], st[1]);
        assert_int_equal(dst[0], dst[1]);
        assert_memory_equal(&sub[0], &sub[1], sizeof sub[0]);
        assert_memory_equal(&done[0], &done[1], sizeof done[0]);
        assert_memory_equal(err[0], err[1], sizeof err[0]);
        /* The big body was read whole as a submit (a completion that long
         * is refused unread, test_completion_too_long). */
        if (body == big)
            assert_string_equal(sub[0].run_id, "late");
    }
    free(big);
}

/* Other cJSON users in the process keep their trees as long as they like: a
 * tree parsed outside this module is untouched by the parses here (were it
 * in the arena, the next parse would write over it, and AddressSanitizer
 * would see it read after its parse). */
static void test_arena_leaves_other_trees(void **state)
{
    cJSON *kept = cJSON_Parse("{\"name\":\"kept\",\"list\":[1,2,3]}");
    fq_submit s;
    char err[256];

    (void)state;
    assert_non_null(kept);
    for (int i = 0; i < 3; i++)
        assert_int_equal(submit(&s, "{\"run_id\":\"overwrite-me\",\"pad\":\"zzzzzzzzzzzz\"}",
                                err), FQ_OK);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(kept, "name")->valuestring, "kept");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(kept, "list")), 3);
    cJSON_Delete(kept);
}

static void test_submit_length_is_respected(void **state)
{
    const char *full = "{\"run_id\":\"r\",\"est_tokens\":12}";
    fq_submit s;
    char err[256];

    (void)state;
    opaque_submit_n(full, strlen(full) - 1);
    /* the bytes after len, here in memory, belong to someone else */
    assert_int_equal(fq_submit_parse(&s, TENANT, "{\"est_tokens\":7}99", 16, NULL,
                                     MAX_EST, err, sizeof err), FQ_OK);
    assert_int_equal(s.est_tokens, 7);
    assert_int_equal(fq_submit_parse(&s, TENANT, "{\"est_tokens\":7} x", 17, NULL,
                                     MAX_EST, err, sizeof err), FQ_OK);
    assert_int_equal(s.est_tokens, 7);
    assert_int_equal(fq_submit_parse(&s, TENANT, "{\"est_tokens\":12}", 16, NULL,
                                     MAX_EST, err, sizeof err), FQ_OK);
    assert_true(s.opaque);
}

static void test_submit_wrong_types(void **state)
{
    (void)state;
    refuse_submit("{\"run_id\":5}", "run_id");
    refuse_submit("{\"run_id\":{}}", "run_id");
    refuse_submit("{\"run_id\":[\"r\"]}", "run_id");
    refuse_submit("{\"workflow\":true}", "workflow");
    refuse_submit("{\"est_tokens\":\"100\"}", "est_tokens");
    refuse_submit("{\"est_tokens\":[100]}", "est_tokens");
    refuse_submit("{\"est_tokens\":false}", "est_tokens");
    refuse_submit("{\"tenant\":7}", "tenant");
}

static void test_submit_est_tokens_out_of_range(void **state)
{
    char body[64];

    (void)state;
    refuse_submit("{\"est_tokens\":0}", "est_tokens");
    refuse_submit("{\"est_tokens\":-0.0}", "est_tokens");
    refuse_submit("{\"est_tokens\":-1}", "est_tokens");
    refuse_submit("{\"est_tokens\":1.5}", "est_tokens");
    refuse_submit("{\"est_tokens\":0.5}", "est_tokens");
    refuse_submit("{\"est_tokens\":1e30}", "est_tokens");
    refuse_submit("{\"est_tokens\":1e400}", "est_tokens");    /* inf in cJSON */
    refuse_submit("{\"est_tokens\":-1e400}", "est_tokens");
    refuse_submit("{\"est_tokens\":18446744073709551616}", "est_tokens");
    snprintf(body, sizeof body, "{\"est_tokens\":%u}", MAX_EST + 1);
    refuse_submit(body, "est_tokens");
    /* just above the maximum but below the next integer: not integral */
    snprintf(body, sizeof body, "{\"est_tokens\":%u.5}", MAX_EST - 1);
    refuse_submit(body, "est_tokens");
}

static void test_submit_bad_names(void **state)
{
    char body[512], s[FQ_RUN_ID_MAX + 2];

    (void)state;
    memset(s, 'i', FQ_RUN_ID_MAX + 1);
    s[FQ_RUN_ID_MAX + 1] = '\0';
    snprintf(body, sizeof body, "{\"run_id\":\"%s\"}", s);
    refuse_submit(body, "run_id");
    s[FQ_WORKFLOW_MAX + 1] = '\0';
    snprintf(body, sizeof body, "{\"workflow\":\"%s\"}", s);
    refuse_submit(body, "workflow");
    refuse_submit("{\"run_id\":\"\"}", "run_id");
    refuse_submit("{\"workflow\":\"\"}", "workflow");
    refuse_submit("{\"run_id\":\"a\\nb\"}", "run_id");
    refuse_submit("{\"run_id\":\"a\\r\\nNats-Msg-Id: x\"}", "run_id");
    refuse_submit("{\"run_id\":\"a\\u0001\"}", "run_id");
    refuse_submit("{\"run_id\":\"a b\"}", "run_id");
    refuse_submit("{\"run_id\":\" a\"}", "run_id");
    refuse_submit("{\"workflow\":\"sum\\u007f\"}", "workflow");
    refuse_submit("{\"workflow\":\"r\xc3\xa9sum\xc3\xa9\"}", "workflow");
}

static void test_submit_nul_escape(void **state)
{
    fq_submit s;
    char err[256];

    (void)state;
    /* cJSON would read these as run_id "a" and a member named run_id */
    refuse_submit("{\"run_id\":\"a\\u0000b\"}", "u0000");
    refuse_submit("{\"run_id\\u0000x\":\"a\"}", "u0000");
    /* deeper ones are not fairq's to read; an escaped backslash is not one */
    assert_int_equal(submit(&s, "{\"run_id\":\"r\",\"p\":{\"q\":\"\\u0000\"},"
                               "\"z\":[\"\\u0000\"]}", err), FQ_OK);
    assert_string_equal(s.run_id, "r");
    assert_int_equal(submit(&s, "{\"run_id\":\"r\",\"p\":\"\\\\u0000\"}", err), FQ_OK);
    assert_string_equal(s.run_id, "r");
    /* not JSON at all, so opaque rather than refused */
    opaque_submit("{\"run_id\":\"a\\u0000\"");
}

static void test_submit_tenant_field(void **state)
{
    fq_submit s;
    char err[256];

    (void)state;
    assert_int_equal(submit(&s, "{\"tenant\":\"acme\",\"run_id\":\"r\"}", err), FQ_OK);
    refuse_submit("{\"tenant\":\"globex\"}", "tenant");
    refuse_submit("{\"tenant\":\"ACME\"}", "tenant");
    refuse_submit("{\"tenant\":\"\"}", "tenant");
    assert_int_equal(submit(&s, "{\"tenant\":\"globex\"}", err), FQ_EINVAL);
    assert_non_null(strstr(err, TENANT));
    /* the other tenant's name is the client's text: not quoted */
    assert_null(strstr(err, "globex"));
}

static void test_submit_duplicate_fields(void **state)
{
    (void)state;
    refuse_submit("{\"run_id\":\"a\",\"run_id\":\"b\"}", "run_id");
    refuse_submit("{\"est_tokens\":null,\"est_tokens\":5}", "est_tokens");
    refuse_submit("{\"tenant\":\"acme\",\"tenant\":\"acme\"}", "tenant");
}


/* A class is read, or why not, and refuses nothing here: where classes are
 * not configured it is not read at all (the ledger judges it). */
static void test_submit_class_read_not_judged(void **state)
{
    fq_submit s;
    char err[256];
    const char *body = "{\"class\":\"interactive\",\"est_tokens\":5}";

    (void)state;
    assert_int_equal(submit_n(&s, body, strlen(body), NULL, err), FQ_OK);
    assert_string_equal(s.cls, "interactive");
    assert_string_equal(s.cls_err, "");
    fq_submit_headers h = {.cls = "batch"};
    assert_int_equal(submit_n(&s, body, strlen(body), &h, err), FQ_OK);
    assert_string_equal(s.cls, "batch");
    /* a bad header class is noted, even over a good body one */
    h = (fq_submit_headers){.cls = "bad class"};
    assert_int_equal(submit_n(&s, body, strlen(body), &h, err), FQ_OK);
    assert_string_equal(s.cls, "");
    assert_true(strncmp(s.cls_err, "Fair-Class header: ", 19) == 0);
    const char *bad[] = {"{\"class\":5}", "{\"class\":\"a\",\"class\":\"a\"}",
                         "{\"class\":\"123456789012345678901234567890123\"}",
                         "{\"class\":[\"x\"]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(submit_n(&s, bad[i], strlen(bad[i]), NULL, err), FQ_OK);
        assert_string_equal(s.cls, "");
        assert_true(strncmp(s.cls_err, "class: ", 7) == 0);
    }
    /* a class given twice is not a refusal, nor does it hide one */
    const char *twice = "{\"class\":\"a\",\"class\":\"b\",\"workflow\":\"w\",\"workflow\":\"w\"}";
    assert_refused(submit_n(&s, twice, strlen(twice), NULL, err), err, "workflow");
    body = "{\"class\":null}";
    assert_int_equal(submit_n(&s, body, strlen(body), NULL, err), FQ_OK);
    assert_string_equal(s.cls, "");
    assert_string_equal(s.cls_err, "");
}

/* A sub-tenant, from the body or the Fair-Subtenant header: a name of at
 * most FQ_SUBTENANT_MAX, and where both give one, the same; a refusal for
 * it says so (for the proxy's count). */
static void test_submit_subtenant(void **state)
{
    fq_submit s;
    char err[256];
    const char *body = "{\"subtenant\":\"user-7\",\"est_tokens\":5}";

    (void)state;
    assert_int_equal(submit_n(&s, body, strlen(body), NULL, err), FQ_OK);
    assert_string_equal(s.subtenant, "user-7");
    fq_submit_headers h = {.subtenant = "user-7"};
    assert_int_equal(submit_n(&s, body, strlen(body), &h, err), FQ_OK);
    assert_string_equal(s.subtenant, "user-7");
    assert_int_equal(submit_n(&s, "{}", 2, &h, err), FQ_OK);
    assert_string_equal(s.subtenant, "user-7");
    assert_int_equal(submit_n(&s, "not json", 8, &h, err), FQ_OK);   /* opaque too */
    assert_string_equal(s.subtenant, "user-7");
    assert_false(s.subtenant_refused);
    /* header and body disagree: refused, not one of them believed */
    h = (fq_submit_headers){.subtenant = "user-8"};
    assert_refused(submit_n(&s, body, strlen(body), &h, err), err, "Fair-Subtenant header");
    assert_non_null(strstr(err, "another sub-tenant"));
    assert_string_equal(s.subtenant, "");
    assert_true(s.subtenant_refused);
    h = (fq_submit_headers){.subtenant = "two words"};
    assert_refused(submit_n(&s, "{}", 2, &h, err), err, "Fair-Subtenant header");
    assert_true(s.subtenant_refused);
    const char *bad[] = {"{\"subtenant\":5}", "{\"subtenant\":\"a\",\"subtenant\":\"a\"}",
                         "{\"subtenant\":\"\"}", "{\"subtenant\":\"a\\nb\"}",
                         "{\"subtenant\":\"12345678901234567890123456789012345678901234567890"
                         "12345678901234567\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_refused(submit_n(&s, bad[i], strlen(bad[i]), NULL, err), err, "subtenant: ");
        assert_true(s.subtenant_refused);
        assert_defaults(&s);
    }
    /* 64 bytes is the longest; null is absent; another field's refusal is not its */
    body = "{\"subtenant\":\"1234567890123456789012345678901234567890123456789012345678901234\"}";
    assert_int_equal(submit_n(&s, body, strlen(body), NULL, err), FQ_OK);
    assert_int_equal(strlen(s.subtenant), FQ_SUBTENANT_MAX);
    body = "{\"subtenant\":null}";
    assert_int_equal(submit_n(&s, body, strlen(body), NULL, err), FQ_OK);
    assert_string_equal(s.subtenant, "");
    body = "{\"subtenant\":\"u\",\"est_tokens\":0}";
    assert_refused(submit_n(&s, body, strlen(body), NULL, err), err, "est_tokens");
    assert_false(s.subtenant_refused);
}

/* A claim header the adapter found twice (two spellings, or two values):
 * refused with the header named, counted as the sub-tenant's when it is
 * that one; Fair-Class twice is noted for the caller to judge, like the
 * body's class twice, and hides no other field. */
static void test_submit_header_twice(void **state)
{
    fq_submit s;
    char err[256];
    const char *body = "{\"run_id\":\"r\",\"subtenant\":\"u\"}";

    (void)state;
    fq_submit_headers h = {.twice = FQ_HDR_RUN_ID};
    assert_refused(submit_n(&s, body, strlen(body), &h, err), err, "Fair-Run-Id header");
    assert_non_null(strstr(err, "given twice"));
    assert_false(s.subtenant_refused);
    assert_defaults(&s);
    h = (fq_submit_headers){.twice = FQ_HDR_SUBTENANT};
    assert_refused(submit_n(&s, body, strlen(body), &h, err), err, "Fair-Subtenant header");
    assert_true(s.subtenant_refused);
    h = (fq_submit_headers){.cls = "batch", .cls_twice = true, .workflow = "w"};
    assert_int_equal(submit_n(&s, "{\"class\":\"interactive\"}", 23, &h, err), FQ_OK);
    assert_string_equal(s.cls, "");
    assert_string_equal(s.cls_err, "Fair-Class header: given twice (names compared without "
                        "regard to case)");
    assert_string_equal(s.workflow, "w");
}

/* Submit headers. */

static void test_headers_win_over_body(void **state)
{
    fq_submit_headers h = {.run_id = "hdr-1", .workflow = "hwf", .est_tokens = "77"};
    const char *body = "{\"run_id\":\"body-1\",\"workflow\":\"bwf\",\"est_tokens\":5}";
    fq_submit s;
    char err[256];

    (void)state;
    assert_int_equal(submit_n(&s, body, strlen(body), &h, err), FQ_OK);
    assert_string_equal(s.run_id, "hdr-1");
    assert_string_equal(s.workflow, "hwf");
    assert_int_equal(s.est_tokens, 77);

    /* one header: the others come from the body */
    h = (fq_submit_headers){.est_tokens = "9"};
    assert_int_equal(submit_n(&s, body, strlen(body), &h, err), FQ_OK);
    assert_string_equal(s.run_id, "body-1");
    assert_string_equal(s.workflow, "bwf");
    assert_int_equal(s.est_tokens, 9);

    /* an opaque body still takes the headers */
    h = (fq_submit_headers){.run_id = "r", .est_tokens = "100000"};
    assert_int_equal(submit_n(&s, "\x00\x01\x02", 3, &h, err), FQ_OK);
    assert_true(s.opaque);
    assert_string_equal(s.run_id, "r");
    assert_int_equal(s.est_tokens, MAX_EST);
    assert_int_equal(submit_n(&s, "", 0, &h, err), FQ_OK);
    assert_true(s.opaque);
    assert_string_equal(s.run_id, "r");
}

static void test_headers_do_not_hide_bad_body(void **state)
{
    fq_submit_headers h = {.est_tokens = "5"};
    const char *body = "{\"est_tokens\":1.5}";
    fq_submit s;
    char err[256];

    (void)state;
    assert_refused(submit_n(&s, body, strlen(body), &h, err), err, "est_tokens");
    assert_defaults(&s);
}

static void refuse_header(fq_submit_headers h, const char *field)
{
    const char *body = "{\"run_id\":\"r\",\"est_tokens\":5}";
    fq_submit s;
    char err[256];

    assert_refused(submit_n(&s, body, strlen(body), &h, err), err, field);
    assert_defaults(&s);
}

static void test_header_est_tokens_strict(void **state)
{
    static const char *const bad[] = {
        "", "0", "-5", "+5", " 5", "5 ", "5.0", "5.5", "1e3", "0x10", "five",
        "100001", "4294967297", "99999999999999999999999999", "5\t",
    };
    fq_submit_headers h = {0};
    fq_submit s;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h.est_tokens = bad[i];
        refuse_header(h, FQ_HDR_EST_TOKENS);
    }
    h.est_tokens = "007";
    assert_int_equal(submit_n(&s, "{}", 2, &h, err), FQ_OK);
    assert_int_equal(s.est_tokens, 7);
}

static void test_header_names_checked(void **state)
{
    char long_id[FQ_RUN_ID_MAX + 2];

    (void)state;
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    refuse_header((fq_submit_headers){.run_id = long_id}, FQ_HDR_RUN_ID);
    long_id[FQ_WORKFLOW_MAX + 1] = '\0';
    refuse_header((fq_submit_headers){.workflow = long_id}, FQ_HDR_WORKFLOW);
    refuse_header((fq_submit_headers){.run_id = ""}, FQ_HDR_RUN_ID);
    refuse_header((fq_submit_headers){.run_id = "a\r\nb"}, FQ_HDR_RUN_ID);
    refuse_header((fq_submit_headers){.workflow = "a\tb"}, FQ_HDR_WORKFLOW);
}

static void test_err_buffer_optional(void **state)
{
    fq_submit s;
    char small[8];

    (void)state;
    assert_int_equal(fq_submit_parse(&s, TENANT, "{\"est_tokens\":0}", 16, NULL,
                                     MAX_EST, NULL, 0), FQ_EINVAL);
    memset(small, 'z', sizeof small);
    assert_int_equal(fq_submit_parse(&s, TENANT, "{\"est_tokens\":0}", 16, NULL,
                                     MAX_EST, small, sizeof small), FQ_EINVAL);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static void test_name_valid(void **state)
{
    (void)state;
    assert_true(fq_msg_name_valid("run-1:a/b", 9, 128));
    assert_false(fq_msg_name_valid("", 0, 128));
    assert_false(fq_msg_name_valid("abc", 3, 2));
    assert_false(fq_msg_name_valid("a b", 3, 128));
    assert_false(fq_msg_name_valid("a\0b", 3, 128));
}

/* Completions. */

static void test_completion_valid(void **state)
{
    fq_completion c;
    char err[256];

    (void)state;
    assert_int_equal(completion(&c, "{\"run_id\":\"r-1\",\"actual_tokens\":950,"
                                    "\"status\":\"ok\",\"extra\":[1]}", err), FQ_OK);
    assert_string_equal(c.run_id, "r-1");
    assert_int_equal(c.actual_tokens, 950);
    assert_int_equal(c.status, FQ_DONE_OK);
    assert_int_equal(c.est_tokens, 0);
    assert_string_equal(c.workflow, "");

    assert_int_equal(completion(&c, "{\"status\":\"cancelled\",\"run_id\":\"x\","
                                    "\"actual_tokens\":0,\"est_tokens\":800,"
                                    "\"workflow\":\"sum\"}", err), FQ_OK);
    assert_int_equal(c.status, FQ_DONE_CANCELLED);
    assert_int_equal(c.actual_tokens, 0);
    assert_int_equal(c.est_tokens, 800);
    assert_string_equal(c.workflow, "sum");

    /* Up to FQ_ACTUAL_OVER_MAX_EST times the largest estimate. */
    assert_int_equal(completion(&c, "{\"run_id\":\"x\",\"actual_tokens\":1e7,"
                                    "\"status\":\"error\"}", err), FQ_OK);
    assert_int_equal(c.status, FQ_DONE_ERROR);
    assert_true(c.actual_tokens == FQ_MAX_ACTUAL_TOKENS(MAX_EST));
    assert_true(FQ_MAX_ACTUAL_TOKENS(MAX_EST) == 100 * (uint64_t)MAX_EST);
    assert_false(c.kinds);

    /* Token kinds beside actual_tokens, for priced costs. */
    assert_int_equal(completion(&c, "{\"run_id\":\"x\",\"actual_tokens\":1500,"
                                    "\"status\":\"ok\",\"input_tokens\":1000,"
                                    "\"output_tokens\":500,\"cached_tokens\":400}", err), FQ_OK);
    assert_true(c.kinds);
    assert_int_equal(c.input_tokens, 1000);
    assert_int_equal(c.output_tokens, 500);
    assert_int_equal(c.cached_tokens, 400);
    assert_int_equal(completion(&c, "{\"run_id\":\"x\",\"actual_tokens\":9,"
                                    "\"status\":\"ok\",\"output_tokens\":9}", err), FQ_OK);
    assert_true(c.kinds);
    assert_int_equal(c.input_tokens, 0);
    assert_int_equal(c.output_tokens, 9);
}

static void refuse_completion_n(const char *body, size_t len, const char *field)
{
    fq_completion c;
    char err[256];

    assert_refused(completion_n(&c, body, len, err), err, field);
    assert_string_equal(c.run_id, "");
    assert_int_equal(c.actual_tokens, 0);
}

static void refuse_completion(const char *body, const char *field)
{
    refuse_completion_n(body, strlen(body), field);
}

static void test_completion_not_object(void **state)
{
    (void)state;
    refuse_completion_n("", 0, "completion");
    refuse_completion("   ", "completion");
    refuse_completion("done", "completion");
    refuse_completion("[\"r\",5,\"ok\"]", "completion");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\"", "completion");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\"}x", "completion");
    refuse_completion("{\"run_id\":\"r\xff\",\"actual_tokens\":5,\"status\":\"ok\"}", "UTF-8");
    refuse_completion("{\"run_id\":\"r\\u0000s\",\"actual_tokens\":5,\"status\":\"ok\"}",
                      "u0000");
}

/* A valid completion padded with members fairq ignores: up to
 * FQ_COMPLETION_MAX_BYTES it is read, past it refused unread (a megabyte of
 * members took the loop about 100 ms to parse, from anyone). */
static void test_completion_too_long(void **state)
{
    (void)state;
    char body[FQ_COMPLETION_MAX_BYTES + 64];
    size_t k = (size_t)snprintf(body, sizeof body,
                                "{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\"");
    while (k + 12 < FQ_COMPLETION_MAX_BYTES)
        k += (size_t)snprintf(body + k, sizeof body - k, ",\"z\":[1,2]");
    body[k++] = '}';
    fq_completion c;
    char err[256];
    assert_int_equal(completion_n(&c, body, k, err), FQ_OK);
    assert_string_equal(c.run_id, "r");
    for (k--; k < FQ_COMPLETION_MAX_BYTES;)
        k += (size_t)snprintf(body + k, sizeof body - k, ",\"z\":[1,2]");
    body[k++] = '}';
    assert_true(k > FQ_COMPLETION_MAX_BYTES);
    refuse_completion_n(body, k, "at most 4096");
}

static void test_completion_missing_fields(void **state)
{
    (void)state;
    refuse_completion("{\"actual_tokens\":5,\"status\":\"ok\"}", "run_id");
    refuse_completion("{\"run_id\":\"r\",\"status\":\"ok\"}", "actual_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5}", "status");
    refuse_completion("{\"run_id\":null,\"actual_tokens\":5,\"status\":\"ok\"}", "run_id");
    refuse_completion("{}", "run_id");
}

static void test_completion_bad_fields(void **state)
{
    char body[512], id[FQ_RUN_ID_MAX + 2];

    (void)state;
    refuse_completion("{\"run_id\":7,\"actual_tokens\":5,\"status\":\"ok\"}", "run_id");
    refuse_completion("{\"run_id\":\"\",\"actual_tokens\":5,\"status\":\"ok\"}", "run_id");
    refuse_completion("{\"run_id\":\"a\\nb\",\"actual_tokens\":5,\"status\":\"ok\"}", "run_id");
    memset(id, 'i', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"actual_tokens\":5,\"status\":\"ok\"}", id);
    refuse_completion(body, "run_id");

    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":-1,\"status\":\"ok\"}", "actual_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":2.5,\"status\":\"ok\"}", "actual_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":\"5\",\"status\":\"ok\"}", "actual_tokens");
    /* One past FQ_ACTUAL_OVER_MAX_EST times MAX_EST, and what was once the
     * bound: a count no run could spend, whatever the run. */
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":10000001,\"status\":\"ok\"}",
                      "actual_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":1000000000000,\"status\":\"ok\"}",
                      "actual_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":1e300,\"status\":\"ok\"}", "actual_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":1e999,\"status\":\"ok\"}", "actual_tokens");

    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"OK\"}", "status");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"done\"}", "status");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":0}", "status");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok \"}", "status");

    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\",\"est_tokens\":0}",
                      "est_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\","
                      "\"est_tokens\":100001}", "est_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\",\"workflow\":1}",
                      "workflow");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\",\"workflow\":\"a b\"}",
                      "workflow");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\",\"run_id\":\"s\"}",
                      "run_id");

    /* Token kinds: whole numbers within the actual_tokens bound, given
     * once, cached ones among the input ones. */
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\","
                      "\"input_tokens\":-1}", "input_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\","
                      "\"output_tokens\":2.5}", "output_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\","
                      "\"output_tokens\":10000001}", "output_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\","
                      "\"cached_tokens\":\"3\"}", "cached_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\","
                      "\"input_tokens\":3,\"cached_tokens\":4}", "cached_tokens");
    refuse_completion("{\"run_id\":\"r\",\"actual_tokens\":5,\"status\":\"ok\","
                      "\"input_tokens\":3,\"input_tokens\":3}", "input_tokens");
}

static void round_trip(const fq_completion *in)
{
    char buf[1024], err[256];
    fq_completion out;
    size_t n = fq_completion_format(buf, sizeof buf, in);

    assert_true(n > 0);
    assert_int_equal(strlen(buf), n);
    assert_int_equal(completion_n(&out, buf, n, err), FQ_OK);
    assert_string_equal(out.run_id, in->run_id);
    assert_true(out.actual_tokens == in->actual_tokens);
    assert_int_equal(out.status, in->status);
    assert_int_equal(out.est_tokens, in->est_tokens);
    assert_string_equal(out.workflow, in->workflow);
    assert_int_equal(out.kinds, in->kinds);
    assert_true(out.input_tokens == in->input_tokens);
    assert_true(out.output_tokens == in->output_tokens);
    assert_true(out.cached_tokens == in->cached_tokens);
}

static void test_completion_round_trip(void **state)
{
    fq_completion c = {.run_id = "r-1", .actual_tokens = 1234, .status = FQ_DONE_OK};

    (void)state;
    round_trip(&c);
    c = (fq_completion){.run_id = "q\"uo\\te{}[],:", .actual_tokens = FQ_MAX_ACTUAL_TOKENS(MAX_EST),
                        .status = FQ_DONE_CANCELLED, .est_tokens = MAX_EST,
                        .workflow = "wf\\\"x"};
    round_trip(&c);
    c = (fq_completion){.actual_tokens = 0, .status = FQ_DONE_ERROR, .est_tokens = 1};
    memset(c.run_id, '~', FQ_RUN_ID_MAX);
    memset(c.workflow, '!', FQ_WORKFLOW_MAX);
    round_trip(&c);
    c = (fq_completion){.run_id = "k", .actual_tokens = 10, .status = FQ_DONE_OK,
                        .kinds = true, .input_tokens = 7, .output_tokens = 3,
                        .cached_tokens = 7};
    round_trip(&c);
}

static void test_completion_format_limits(void **state)
{
    fq_completion c = {.run_id = "r", .actual_tokens = 7, .status = FQ_DONE_OK};
    char buf[128];
    size_t n = fq_completion_format(buf, sizeof buf, &c);

    (void)state;
    assert_true(n > 0);
    assert_string_equal(buf, "{\"run_id\":\"r\",\"actual_tokens\":7,\"status\":\"ok\"}");
    assert_int_equal(fq_completion_format(buf, n + 1, &c), n);
    assert_int_equal(fq_completion_format(buf, n, &c), 0);
    assert_int_equal(fq_completion_format(buf, 0, &c), 0);
    c.status = (enum fq_done_status)3;
    assert_int_equal(fq_completion_format(buf, sizeof buf, &c), 0);
}

/* The JSON writer. */

static void test_json_structure(void **state)
{
    char buf[256];
    fq_json w;
    size_t n;

    (void)state;
    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_object(&w);
    fq_json_key(&w, "a");
    fq_json_int(&w, 1);
    fq_json_key(&w, "b");
    fq_json_begin_array(&w);
    fq_json_int(&w, INT64_MIN);
    fq_json_int(&w, INT64_MAX);
    fq_json_begin_object(&w);
    fq_json_key(&w, "c");
    fq_json_bool(&w, true);
    fq_json_key(&w, "d");
    fq_json_bool(&w, false);
    fq_json_end_object(&w);
    fq_json_begin_array(&w);
    fq_json_end_array(&w);
    fq_json_null(&w);
    fq_json_end_array(&w);
    fq_json_key(&w, "e");
    fq_json_begin_object(&w);
    fq_json_end_object(&w);
    fq_json_key(&w, "f");
    fq_json_string(&w, NULL);
    fq_json_end_object(&w);
    assert_int_equal(fq_json_finish(&w, &n), FQ_OK);
    assert_string_equal(buf, "{\"a\":1,\"b\":[-9223372036854775808,9223372036854775807,"
                             "{\"c\":true,\"d\":false},[],null],\"e\":{},\"f\":null}");
    assert_int_equal(n, strlen(buf));

    /* a scalar is a whole text too */
    fq_json_init(&w, buf, sizeof buf);
    fq_json_string(&w, "x");
    assert_int_equal(fq_json_finish(&w, &n), FQ_OK);
    assert_string_equal(buf, "\"x\"");
}

/* Write s as a JSON string, read it back with cJSON, return the text. */
static char *json_string_text(const char *s, size_t len, char *buf, size_t cap)
{
    fq_json w;
    size_t n;

    fq_json_init(&w, buf, cap);
    fq_json_stringn(&w, s, len);
    assert_int_equal(fq_json_finish(&w, &n), FQ_OK);
    return buf;
}

static void test_json_escaping(void **state)
{
    const char in[] = "q\"b\\s/\n\r\t\b\f\x01\x1f\x7f h\xc3\xa9 \xf0\x9f\x98\x80";
    char buf[256];
    cJSON *j;

    (void)state;
    json_string_text(in, sizeof in - 1, buf, sizeof buf);
    /* DEL too is escaped, as the log lines escape it: a terminal acts on it */
    assert_string_equal(buf, "\"q\\\"b\\\\s/\\n\\r\\t\\u0008\\u000c\\u0001\\u001f\\u007f h"
                             "\xc3\xa9 \xf0\x9f\x98\x80\"");
    j = cJSON_Parse(buf);
    assert_non_null(j);
    assert_string_equal(j->valuestring, in);
    cJSON_Delete(j);

    /* a NUL inside a counted string is escaped, not a terminator */
    json_string_text("a\0b", 3, buf, sizeof buf);
    assert_string_equal(buf, "\"a\\u0000b\"");

    /* invalid UTF-8 becomes U+FFFD, one per bad byte, written as UTF-8 as
     * the log lines write it */
    json_string_text("a\xff" "b\xc0\xaf" "c\xe2\x82", 8, buf, sizeof buf);
    assert_string_equal(buf, "\"a" FQ_UTF8_REPLACEMENT "b" FQ_UTF8_REPLACEMENT FQ_UTF8_REPLACEMENT
                             "c" FQ_UTF8_REPLACEMENT FQ_UTF8_REPLACEMENT "\"");

    /* keys are escaped the same way */
    {
        fq_json w;

        fq_json_init(&w, buf, sizeof buf);
        fq_json_begin_object(&w);
        fq_json_key(&w, "k\"\n");
        fq_json_string(&w, "v");
        fq_json_end_object(&w);
        assert_int_equal(fq_json_finish(&w, NULL), FQ_OK);
        assert_string_equal(buf, "{\"k\\\"\\n\":\"v\"}");
    }
}

static void test_json_doubles(void **state)
{
    const double vals[] = {0.0, -0.0, 0.1, 1.0 / 3.0, 2.5, -1e-300, 1e300,
                           123456789.125, 5e-324, 1.7976931348623157e308};
    char buf[64];
    fq_json w;

    (void)state;
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        fq_json_init(&w, buf, sizeof buf);
        fq_json_double(&w, vals[i]);
        assert_int_equal(fq_json_finish(&w, NULL), FQ_OK);
        assert_true(strtod(buf, NULL) == vals[i]);
        assert_null(strpbrk(buf, "ni"));        /* no nan, no inf */
    }
    fq_json_init(&w, buf, sizeof buf);
    fq_json_double(&w, 0.1);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_OK);
    assert_string_equal(buf, "0.1");            /* the short form when exact */

    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_array(&w);
    fq_json_double(&w, NAN);
    fq_json_double(&w, INFINITY);
    fq_json_double(&w, -INFINITY);
    fq_json_end_array(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_OK);
    assert_string_equal(buf, "[null,null,null]");
}

static void write_sample(fq_json *w)
{
    fq_json_begin_object(w);
    fq_json_key(w, "tenants");
    fq_json_begin_array(w);
    for (int i = 0; i < 3; i++) {
        fq_json_begin_object(w);
        fq_json_key(w, "id");
        fq_json_string(w, "t\"enant");
        fq_json_key(w, "queued");
        fq_json_int(w, i * 1000);
        fq_json_key(w, "share");
        fq_json_double(w, i / 7.0);
        fq_json_end_object(w);
    }
    fq_json_end_array(w);
    fq_json_end_object(w);
}

static void test_json_overflow(void **state)
{
    char full[512], buf[512 + 16];
    fq_json w;
    size_t need, n;

    (void)state;
    fq_json_init(&w, full, sizeof full);
    write_sample(&w);
    assert_int_equal(fq_json_finish(&w, &need), FQ_OK);

    /* every buffer too small says so, with the size needed, and writes
     * nothing past its capacity */
    for (size_t cap = 0; cap <= need; cap++) {
        memset(buf, '#', sizeof buf);
        fq_json_init(&w, buf, cap);
        write_sample(&w);
        assert_int_equal(fq_json_finish(&w, &n), FQ_ETOOBIG);
        assert_int_equal(n, need);
        if (cap)
            assert_int_equal(buf[0], '\0');
        for (size_t i = cap; i < sizeof buf; i++)
            assert_int_equal(buf[i], '#');
    }
    fq_json_init(&w, buf, need + 1);
    write_sample(&w);
    assert_int_equal(fq_json_finish(&w, &n), FQ_OK);
    assert_int_equal(n, need);
    assert_string_equal(buf, full);
}

static void test_json_misuse(void **state)
{
    char buf[64];
    fq_json w;
    size_t n = 99;

    (void)state;
    /* a value where a key is due */
    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_object(&w);
    fq_json_int(&w, 1);
    fq_json_end_object(&w);
    assert_int_equal(fq_json_finish(&w, &n), FQ_EINVAL);
    assert_int_equal(n, 0);
    assert_string_equal(buf, "");

    /* a key in an array */
    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_array(&w);
    fq_json_key(&w, "k");
    fq_json_end_array(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);

    /* two keys in a row; a key left without a value */
    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_object(&w);
    fq_json_key(&w, "a");
    fq_json_key(&w, "b");
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);
    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_object(&w);
    fq_json_key(&w, "a");
    fq_json_end_object(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);

    /* mismatched, missing and extra ends */
    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_object(&w);
    fq_json_end_array(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);
    fq_json_init(&w, buf, sizeof buf);
    fq_json_begin_array(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);
    fq_json_init(&w, buf, sizeof buf);
    fq_json_end_object(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);

    /* two top-level values; none at all */
    fq_json_init(&w, buf, sizeof buf);
    fq_json_int(&w, 1);
    fq_json_int(&w, 2);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);
    fq_json_init(&w, buf, sizeof buf);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);
}

static void test_json_depth(void **state)
{
    char buf[256];
    fq_json w;

    (void)state;
    fq_json_init(&w, buf, sizeof buf);
    for (int i = 0; i < FQ_JSON_MAX_DEPTH; i++)
        fq_json_begin_array(&w);
    for (int i = 0; i < FQ_JSON_MAX_DEPTH; i++)
        fq_json_end_array(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_OK);

    fq_json_init(&w, buf, sizeof buf);
    for (int i = 0; i <= FQ_JSON_MAX_DEPTH; i++)
        fq_json_begin_array(&w);
    for (int i = 0; i <= FQ_JSON_MAX_DEPTH; i++)
        fq_json_end_array(&w);
    assert_int_equal(fq_json_finish(&w, NULL), FQ_EINVAL);
}

/* Override patches (fair.admin.tenant.set and the overrides bucket). */

static fq_status patch(fq_override_patch *out, const char *body, enum fq_patch_kind kind,
                       char *err)
{
    size_t len = strlen(body);
    void *copy = exact_copy(body, len);
    fq_status st;

    err[0] = '\0';
    st = fq_override_patch_parse(out, copy, len, kind, 1000, err, 256);
    free(copy);
    return st;
}

static void test_override_patch_fields(void **state)
{
    (void)state;
    fq_override_patch p;
    char err[256];

    assert_int_equal(patch(&p, "{\"tenant\":\"acme\",\"plan\":\"gold\",\"weight\":1000,"
                               "\"max_in_flight\":8,\"max_pending\":4294967295,"
                               "\"burst_in_flight\":16,\"tokens_per_minute\":90000,"
                               "\"price_input\":1,\"price_output\":4,\"price_cached\":1,"
                               "\"max_subtenants\":10000,\"class_weights\":\"3, 1\","
                               "\"class_max_pending\":\"100, 0\"}",
                           FQ_PATCH_SET, err), FQ_OK);
    assert_true(p.class_max_pending.set);
    assert_int_equal(p.class_max_pending.count, 2);
    assert_int_equal(p.class_max_pending.n[0], 100);
    assert_int_equal(p.class_max_pending.n[1], 0);
    assert_true(p.class_weights.set);
    assert_int_equal(p.class_weights.w[0], 3);
    assert_int_equal(p.class_weights.w[1], 1);
    assert_int_equal(p.price_output, 4);
    assert_int_equal(p.max_subtenants, 10000);
    assert_int_equal(p.burst_in_flight, 16);
    assert_int_equal(p.tokens_per_minute, 90000);
    assert_string_equal(p.tenant, "acme");
    assert_string_equal(p.plan, "gold");
    assert_int_equal(p.weight, 1000);
    assert_int_equal(p.max_in_flight, 8);
    assert_int_equal(p.max_pending, 4294967295u);
    assert_int_equal(p.set, FQ_OVR_ALL);
    assert_int_equal(p.removed, 0);

    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"class_weights\":\"strict\"}",
                           FQ_PATCH_SET, err), FQ_OK);
    assert_true(p.class_weights.set);
    assert_int_equal(p.class_weights.w[0], 0);
    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"class_weights\":\"3\"}", FQ_PATCH_SET,
                           err), FQ_EINVAL);
    assert_non_null(strstr(err, "class_weights"));
    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"class_weights\":\"2,0\"}",
                           FQ_PATCH_SET, err), FQ_EINVAL);
    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"class_weights\":5}", FQ_PATCH_SET,
                           err), FQ_EINVAL);
    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"max_subtenants\":10001}", FQ_PATCH_SET,
                           err), FQ_EINVAL);
    assert_non_null(strstr(err, "max_subtenants"));
    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"max_subtenants\":0}", FQ_PATCH_SET, err),
                     FQ_EINVAL);
    /* class_max_pending: one number of 0 to 2^32-1 per class, 2 to 4 */
    static const char *const bad_cp[] = {"\"100\"", "\"\"", "\"1,2,3,4,5\"", "\"-1, 0\"",
                                         "\"4294967296, 0\"", "\"1;2\"", "\"1,,2\"", "100",
                                         "[1, 2]"};
    for (size_t i = 0; i < sizeof bad_cp / sizeof bad_cp[0]; i++) {
        char body[96];
        snprintf(body, sizeof body, "{\"tenant\":\"a\",\"class_max_pending\":%s}", bad_cp[i]);
        assert_int_equal(patch(&p, body, FQ_PATCH_SET, err), FQ_EINVAL);
        assert_non_null(strstr(err, "class_max_pending"));
    }
    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"class_max_pending\":\" 4294967295 ,1,0\"}",
                           FQ_PATCH_SET, err), FQ_OK);
    assert_int_equal(p.class_max_pending.count, 3);
    assert_int_equal(p.class_max_pending.n[0], 4294967295u);

    /* A merge patch: null removes a field, absent keeps it. */
    assert_int_equal(patch(&p, "{\"tenant\":\"a\",\"weight\":null,\"max_pending\":3}",
                           FQ_PATCH_SET, err), FQ_OK);
    assert_int_equal(p.set, FQ_OVR_MAX_PENDING);
    assert_int_equal(p.removed, FQ_OVR_WEIGHT);
    assert_int_equal(p.weight, 0);

    /* A bucket value names no tenant: the key does. */
    assert_int_equal(patch(&p, " {\"plan\":\"pro\"} ", FQ_PATCH_VALUE, err), FQ_OK);
    assert_string_equal(p.tenant, "");
    assert_int_equal(p.set, FQ_OVR_PLAN);
}

static void refuse_patch(const char *body, enum fq_patch_kind kind, const char *field)
{
    fq_override_patch p;
    char err[256];

    assert_refused(patch(&p, body, kind, err), err, field);
    assert_int_equal(p.set | p.removed, 0);
    assert_string_equal(p.tenant, "");
}

static void test_override_patch_refused(void **state)
{
    (void)state;
    refuse_patch("", FQ_PATCH_SET, "not a JSON object");
    refuse_patch("[1]", FQ_PATCH_SET, "not a JSON object");
    refuse_patch("{\"weight\":2", FQ_PATCH_SET, "not a JSON object");
    refuse_patch("{\"weight\":2}", FQ_PATCH_SET, "tenant");
    refuse_patch("{\"tenant\":null,\"weight\":2}", FQ_PATCH_SET, "tenant");
    refuse_patch("{\"tenant\":\"a b\",\"weight\":2}", FQ_PATCH_SET, "tenant");
    refuse_patch("{\"tenant\":7,\"weight\":2}", FQ_PATCH_SET, "tenant");
    refuse_patch("{\"tenant\":\"_invalid\",\"weight\":2}", FQ_PATCH_SET, "other than _invalid");
    refuse_patch("{\"tenant\":\"_other\"}", FQ_PATCH_GET, "other than _invalid and _other");
    refuse_patch("{\"tenant\":\"a\"}", FQ_PATCH_SET, "changes nothing");
    refuse_patch("{\"tenant\":\"a\",\"wieght\":2}", FQ_PATCH_SET, "unknown field");
    refuse_patch("{\"tenant\":\"a\",\"weight\":0}", FQ_PATCH_SET, "weight");
    refuse_patch("{\"tenant\":\"a\",\"weight\":1001}", FQ_PATCH_SET, "weight");
    refuse_patch("{\"tenant\":\"a\",\"weight\":1.5}", FQ_PATCH_SET, "weight");
    refuse_patch("{\"tenant\":\"a\",\"weight\":\"3\"}", FQ_PATCH_SET, "weight");
    refuse_patch("{\"tenant\":\"a\",\"max_in_flight\":-1}", FQ_PATCH_SET, "max_in_flight");
    refuse_patch("{\"tenant\":\"a\",\"max_pending\":4294967296}", FQ_PATCH_SET, "max_pending");
    refuse_patch("{\"tenant\":\"a\",\"plan\":\"\"}", FQ_PATCH_SET, "plan");
    refuse_patch("{\"tenant\":\"a\",\"plan\":\"no.dots\"}", FQ_PATCH_SET, "plan");
    refuse_patch("{\"tenant\":\"a\",\"plan\":3}", FQ_PATCH_SET, "plan");
    refuse_patch("{\"tenant\":\"a\",\"weight\":2,\"weight\":3}", FQ_PATCH_SET, "twice");
    refuse_patch("{\"tenant\":\"a\\u0000b\",\"weight\":2}", FQ_PATCH_SET, "\\u0000");
    refuse_patch("{\"tenant\":\"a\",\"weight\":2} x", FQ_PATCH_SET, "not a JSON object");
    /* A bucket value may name its tenant; a get names only the tenant. */
    refuse_patch("{\"tenant\":\"a\"}", FQ_PATCH_VALUE, "changes nothing");
    refuse_patch("{}", FQ_PATCH_GET, "tenant");
    refuse_patch("{\"tenant\":\"a\",\"weight\":2}", FQ_PATCH_GET, "only tenant");
}

static void test_override_patch_get(void **state)
{
    (void)state;
    fq_override_patch p;
    char err[256];

    /* Names like the reserved ones are tenants like any other. */
    assert_int_equal(patch(&p, "{\"tenant\":\"_others\"}", FQ_PATCH_GET, err), FQ_OK);
    assert_string_equal(p.tenant, "_others");
    assert_int_equal(patch(&p, "{\"tenant\":\"acme\"}", FQ_PATCH_GET, err), FQ_OK);
    assert_string_equal(p.tenant, "acme");
    assert_int_equal(p.set | p.removed, 0);
}

/* Parse a stats request from a copy of exactly its bytes. */
static fq_status stats_req(fq_stats_req *out, const char *body, char *err)
{
    size_t len = strlen(body);
    char *copy = malloc(len ? len : 1);
    memcpy(copy, body, len);
    fq_status st = fq_stats_req_parse(out, copy, len, err, 256);
    free(copy);
    return st;
}

static void test_stats_request(void **state)
{
    (void)state;
    fq_stats_req r;
    char err[256];

    /* Empty or blank: the overall section and every tenant that fits. */
    assert_int_equal(stats_req(&r, "", err), FQ_OK);
    assert_string_equal(r.tenant, "");
    assert_true(r.limit == SIZE_MAX && r.offset == 0);
    assert_int_equal(stats_req(&r, " \r\n\t", err), FQ_OK);
    assert_int_equal(stats_req(&r, "{\"tenant\":\"acme\"}", err), FQ_OK);
    assert_string_equal(r.tenant, "acme");
    assert_int_equal(stats_req(&r, "{\"limit\":0,\"offset\":40000}", err), FQ_OK);
    assert_true(r.limit == 0 && r.offset == 40000);

    /* Refused with the field and the reason, never the client's bytes. */
    const char *const bad[][2] = {
        {"[1]", "must be empty or a JSON object"},
        {"{\"tenant\":\"acme\"", "must be empty or a JSON object"},
        {"{\"tenant\":\"\"}", "tenant: must be a string of 1 to 64 bytes"},
        {"{\"tenant\":7}", "tenant: must be a string"},
        {"{\"tenant\":\"a\\u0000b\"}", "\\u0000"},
        {"{\"limit\":-1}", "limit: must be a non-negative integer"},
        {"{\"offset\":1.5}", "offset: must be a non-negative integer"},
        {"{\"offset\":1e16}", "offset: must be a non-negative integer"},
        {"{\"limit\":\"5\"}", "limit: must be"},
        {"{\"tenant\":\"acme\",\"\\u0001secret\":1}", "may hold only"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(stats_req(&r, bad[i][0], err), FQ_EINVAL);
        if (!strstr(err, bad[i][1]))
            fail_msg("%s: %s", bad[i][0], err);
        assert_null(strstr(err, "secret"));
        assert_string_equal(r.tenant, "");
        assert_true(r.limit == SIZE_MAX && r.offset == 0);
    }
    char long_tenant[128];
    snprintf(long_tenant, sizeof long_tenant, "{\"tenant\":\"%065d\"}", 0);
    assert_int_equal(stats_req(&r, long_tenant, err), FQ_EINVAL);
}

/* An explain request's body: empty (the tenant), or {"run_id": ...} and
 * nothing else; anything else refused with a sentence, the run id given
 * twice included (which of the two to answer for is not ours to pick). */
static void test_explain_request(void **state)
{
    (void)state;
    fq_explain_req r;
    char err[256];
    assert_int_equal(fq_explain_req_parse(&r, NULL, 0, err, sizeof err), FQ_OK);
    assert_string_equal(r.run_id, "");
    assert_int_equal(fq_explain_req_parse(&r, " \n", 2, err, sizeof err), FQ_OK);
    const char ok[] = "{\"run_id\":\"r-1\"}";
    assert_int_equal(fq_explain_req_parse(&r, ok, sizeof ok - 1, err, sizeof err), FQ_OK);
    assert_string_equal(r.run_id, "r-1");
    static const struct {
        const char *body, *why;
    } bad[] = {
        {"{\"run_id\":\"a\",\"run_id\":\"b\"}", "run_id: given twice"},
        {"{\"run_id\":\"a\",\"run_id\":7}", "run_id: given twice"},
        {"{\"run_id\":7}", "run_id: must be"},
        {"{\"run_id\":\"a b\"}", "run_id: must be"},
        {"{\"run_id\":\"\"}", "run_id: must be"},
        {"{\"run_id\":\"r\xff\"}", "invalid UTF-8"},
        {"{\"tenant\":\"b\"}", "may hold only"},
        {"[1]", "must be empty or a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(fq_explain_req_parse(&r, bad[i].body, strlen(bad[i].body), err,
                                              sizeof err), FQ_EINVAL);
        if (!strstr(err, bad[i].why))
            fail_msg("%s refused as: %s", bad[i].body, err);
        assert_string_equal(r.run_id, "");
    }
}

/* A consumer info answer's counts; an error answer or garbage is none. */
static void test_consumer_info_counts(void **state)
{
    (void)state;
    const char ok[] = "{\"type\":\"io.nats.jetstream.api.v1.consumer_info_response\","
                      "\"stream_name\":\"FAIR_SUBMIT\",\"name\":\"fairq-p9-4\","
                      "\"delivered\":{\"consumer_seq\":262,\"stream_seq\":262},"
                      "\"num_ack_pending\":259,\"num_redelivered\":0,\"num_waiting\":1,"
                      "\"num_pending\":138}";
    const char err[] = "{\"type\":\"io.nats.jetstream.api.v1.consumer_info_response\","
                       "\"error\":{\"code\":404,\"err_code\":10014,"
                       "\"description\":\"consumer not found\"}}";
    uint64_t pending = 1, unacked = 1;
    assert_int_equal(fq_consumer_info_parse(&pending, &unacked, ok, sizeof ok - 1), FQ_OK);
    assert_int_equal(pending, 138);
    assert_int_equal(unacked, 259);
    pending = unacked = 7;
    assert_int_equal(fq_consumer_info_parse(&pending, &unacked, err, sizeof err - 1), FQ_EINVAL);
    assert_int_equal(fq_consumer_info_parse(&pending, &unacked, "", 0), FQ_EINVAL);
    const char neg[] = "{\"num_pending\":-1,\"num_ack_pending\":2}";
    assert_int_equal(fq_consumer_info_parse(&pending, &unacked, neg, sizeof neg - 1), FQ_EINVAL);
    assert_int_equal(pending, 7);
    assert_int_equal(unacked, 7);
}

/* The ack floor of a consumer info, the sequence of a message got by
 * subject or JetStream's "no message found" told from other answers, and
 * a stream info's last sequence. */
static void test_floor_and_msg_get(void **state)
{
    (void)state;
    const char info[] = "{\"name\":\"fairq-p2-7\",\"delivered\":{\"consumer_seq\":9,"
                        "\"stream_seq\":412},\"ack_floor\":{\"consumer_seq\":9,"
                        "\"stream_seq\":411},\"num_pending\":0}";
    const char nofloor[] = "{\"name\":\"x\",\"num_pending\":0}";
    uint64_t v = 0;
    assert_int_equal(fq_consumer_floor_parse(&v, info, sizeof info - 1), FQ_OK);
    assert_int_equal(v, 411);
    assert_int_equal(fq_consumer_floor_parse(&v, nofloor, sizeof nofloor - 1), FQ_EINVAL);
    const char got[] = "{\"type\":\"io.nats.jetstream.api.v1.stream_msg_get_response\","
                       "\"message\":{\"subject\":\"fair.submit.2.acme\",\"seq\":37,"
                       "\"data\":\"e30=\",\"time\":\"2026-12-05T03:00:00Z\"}}";
    const char none[] = "{\"type\":\"io.nats.jetstream.api.v1.stream_msg_get_response\","
                        "\"error\":{\"code\":404,\"err_code\":10037,"
                        "\"description\":\"no message found\"}}";
    const char other[] = "{\"error\":{\"code\":503,\"err_code\":10008,"
                         "\"description\":\"JetStream system temporarily unavailable\"}}";
    assert_int_equal(fq_msg_get_seq_parse(&v, got, sizeof got - 1), FQ_OK);
    assert_int_equal(v, 37);
    assert_int_equal(fq_msg_get_seq_parse(&v, none, sizeof none - 1), FQ_ENOTFOUND);
    assert_int_equal(fq_msg_get_seq_parse(&v, other, sizeof other - 1), FQ_EINVAL);
    assert_int_equal(fq_msg_get_seq_parse(&v, "", 0), FQ_EINVAL);
    /* A stream info's last sequence (the cutoff of inherited submits). */
    const char sinfo[] = "{\"type\":\"io.nats.jetstream.api.v1.stream_info_response\","
                         "\"config\":{\"name\":\"FAIR_SUBMIT\"},\"state\":{\"messages\":3,"
                         "\"first_seq\":40,\"last_seq\":42,"
                         "\"last_ts\":\"2026-12-05T03:00:00Z\"}}";
    assert_int_equal(fq_stream_last_seq_parse(&v, sinfo, sizeof sinfo - 1), FQ_OK);
    assert_int_equal(v, 42);
    v = 7;
    assert_int_equal(fq_stream_last_seq_parse(&v, other, sizeof other - 1), FQ_EINVAL);
    assert_int_equal(fq_stream_last_seq_parse(&v, info, sizeof info - 1), FQ_EINVAL);
    assert_int_equal(v, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_submit_fields_read),
        cmocka_unit_test(test_submit_class_read_not_judged),
        cmocka_unit_test(test_submit_subtenant),
        cmocka_unit_test(test_submit_header_twice),
        cmocka_unit_test(test_submit_bounds_accepted),
        cmocka_unit_test(test_submit_opaque_bodies),
        cmocka_unit_test(test_submit_scanner_as_cjson),
        cmocka_unit_test(test_submit_invalid_utf8_is_opaque),
        cmocka_unit_test(test_submit_megabyte_bodies),
        cmocka_unit_test(test_submit_length_is_respected),
        cmocka_unit_test(test_submit_scan_every_position),
        cmocka_unit_test(test_arena_same_outcome),
        cmocka_unit_test(test_arena_leaves_other_trees),
        cmocka_unit_test(test_submit_wrong_types),
        cmocka_unit_test(test_submit_est_tokens_out_of_range),
        cmocka_unit_test(test_submit_bad_names),
        cmocka_unit_test(test_submit_nul_escape),
        cmocka_unit_test(test_submit_tenant_field),
        cmocka_unit_test(test_submit_duplicate_fields),
        cmocka_unit_test(test_headers_win_over_body),
        cmocka_unit_test(test_headers_do_not_hide_bad_body),
        cmocka_unit_test(test_header_est_tokens_strict),
        cmocka_unit_test(test_header_names_checked),
        cmocka_unit_test(test_err_buffer_optional),
        cmocka_unit_test(test_name_valid),
        cmocka_unit_test(test_completion_valid),
        cmocka_unit_test(test_completion_not_object),
        cmocka_unit_test(test_completion_too_long),
        cmocka_unit_test(test_completion_missing_fields),
        cmocka_unit_test(test_completion_bad_fields),
        cmocka_unit_test(test_completion_round_trip),
        cmocka_unit_test(test_completion_format_limits),
        cmocka_unit_test(test_override_patch_fields),
        cmocka_unit_test(test_override_patch_refused),
        cmocka_unit_test(test_override_patch_get),
        cmocka_unit_test(test_stats_request),
        cmocka_unit_test(test_json_structure),
        cmocka_unit_test(test_json_escaping),
        cmocka_unit_test(test_json_doubles),
        cmocka_unit_test(test_json_overflow),
        cmocka_unit_test(test_json_misuse),
        cmocka_unit_test(test_json_depth),
        cmocka_unit_test(test_explain_request),
        cmocka_unit_test(test_consumer_info_counts),
        cmocka_unit_test(test_floor_and_msg_get),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
