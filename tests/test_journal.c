/* test_journal.c -- the runs journal's codec: what is written reads back, and forged records are refused and counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"

/* The records a decode handed over. */
typedef struct got {
    fq_jrec r[64];
    size_t n;
} got;

static void collect(void *arg, const fq_jrec *r)
{
    got *g = arg;
    assert_true(g->n < 64);
    g->r[g->n++] = *r;
}

/* Decode text from a buffer of exactly its length (no NUL after it, so a
 * read past the message shows under AddressSanitizer). */
static fq_status decode(got *g, fq_jcounts *c, const char *text, size_t len)
{
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);
    fq_status s = fq_journal_decode(copy, len, collect, g, c);
    free(copy);
    return s;
}

/* Decode one batch holding the single entry `entry`. */
static void decode_entry(got *g, fq_jcounts *c, const char *entry)
{
    char text[2048];
    int n = snprintf(text, sizeof text, "{\"v\":1,\"entries\":[%s]}", entry);
    assert_true(n > 0 && (size_t)n < sizeof text);
    assert_int_equal(decode(g, c, text, (size_t)n), FQ_OK);
}

static fq_jrec flight(const char *tenant, const char *run_id, uint32_t est, uint64_t seq)
{
    fq_jrec r = {.type = FQ_JREC_FLIGHT, .est = est, .declared = 7, .seq = seq,
                 .at_ms = 1700000000123};
    snprintf(r.tenant, sizeof r.tenant, "%s", tenant);
    snprintf(r.run_id, sizeof r.run_id, "%s", run_id);
    return r;
}

static void assert_rec_equal(const fq_jrec *a, const fq_jrec *b)
{
    assert_int_equal(a->type, b->type);
    assert_string_equal(a->tenant, b->tenant);
    assert_string_equal(a->run_id, b->run_id);
    assert_string_equal(a->workflow, b->workflow);
    assert_int_equal(a->est, b->est);
    assert_int_equal(a->declared, b->declared);
    assert_int_equal(a->seq, b->seq);
    assert_int_equal(a->deficit, b->deficit);
    assert_int_equal(a->at_ms, b->at_ms);
    assert_int_equal(a->unconfirmed, b->unconfirmed);
    assert_int_equal(a->refusal, b->refusal);
}

/* Every type, with the extremes of every field, reads back as written, in
 * order; appending after the text was taken continues the same batch. */
static void test_round_trip(void **state)
{
    (void)state;
    fq_jrec in[11];
    in[0] = flight("acme", "r-1", 1, 0);
    in[1] = flight("globex_2-b", "run/with:odd~chars", UINT32_MAX, (uint64_t)FQ_JOURNAL_MAX_INT);
    in[1].declared = UINT32_MAX;
    snprintf(in[1].workflow, sizeof in[1].workflow, "triage");
    memset(in[1].run_id, 'x', FQ_RUN_ID_MAX);
    in[1].run_id[FQ_RUN_ID_MAX] = '\0';
    in[2] = (fq_jrec){.type = FQ_JREC_DONE, .seq = 42, .at_ms = 0};
    snprintf(in[2].tenant, sizeof in[2].tenant, "acme");
    snprintf(in[2].run_id, sizeof in[2].run_id, "r-1");
    in[3] = (fq_jrec){.type = FQ_JREC_DEBT, .deficit = -1, .at_ms = FQ_JOURNAL_MAX_INT};
    snprintf(in[3].tenant, sizeof in[3].tenant, "acme");
    in[4] = (fq_jrec){.type = FQ_JREC_DEBT, .deficit = FQ_JOURNAL_MIN_DEFICIT, .at_ms = 5};
    memset(in[4].tenant, 't', FQ_TENANT_MAX);
    in[5] = (fq_jrec){.type = FQ_JREC_DEBT, .deficit = 0, .at_ms = 6};   /* a debt cleared */
    snprintf(in[5].tenant, sizeof in[5].tenant, "b");
    in[6] = flight("acme", "r-2", 300, 12);               /* its lease ran out */
    in[6].type = FQ_JREC_EXPIRED;
    snprintf(in[6].workflow, sizeof in[6].workflow, "sum");
    in[7] = in[2];                                      /* completed before its dispatch */
    in[7].unconfirmed = true;                           /* was seen stored */
    static const fq_status refusals[] = {FQ_EEXIST, FQ_EFULL, FQ_EOVERLOAD};
    for (int i = 0; i < 3; i++) {                       /* refused for the moment's state */
        in[8 + i] = (fq_jrec){.type = FQ_JREC_REFUSED, .refusal = refusals[i],
                              .seq = i ? (uint64_t)FQ_JOURNAL_MAX_INT : 1, .at_ms = 7};
        snprintf(in[8 + i].tenant, sizeof in[8 + i].tenant, "acme");
    }

    fq_jbatch b = {0};
    size_t len = 0;
    assert_null(fq_jbatch_text(&b, &len));      /* nothing to send */
    for (int i = 0; i < 3; i++)
        assert_int_equal(fq_jbatch_append(&b, &in[i]), FQ_OK);
    const char *text = fq_jbatch_text(&b, &len);
    assert_non_null(text);
    got g = {.n = 0};
    fq_jcounts c = {0};
    assert_int_equal(decode(&g, &c, text, len), FQ_OK);
    assert_int_equal(g.n, 3);
    for (int i = 3; i < 11; i++)
        assert_int_equal(fq_jbatch_append(&b, &in[i]), FQ_OK);
    text = fq_jbatch_text(&b, &len);
    g.n = 0;
    c = (fq_jcounts){0};
    assert_int_equal(decode(&g, &c, text, len), FQ_OK);
    assert_int_equal(g.n, 11);
    assert_int_equal(c.records, 11);
    assert_int_equal(c.invalid + c.unknown, 0);
    assert_string_equal(c.why, "");
    for (int i = 0; i < 11; i++)
        assert_rec_equal(&g.r[i], &in[i]);
    assert_non_null(strstr(text, "\"st\":\"refused\",\"t\":\"acme\",\"s\":1,"
                                 "\"c\":\"duplicate\",\"at\":7"));
    assert_non_null(strstr(text, "\"u\":true"));     /* once: only where it is set */
    assert_null(strstr(strstr(text, "\"u\":true") + 1, "\"u\":"));
    /* a new batch starts empty */
    fq_jbatch_clear(&b);
    assert_null(fq_jbatch_text(&b, &len));
    assert_int_equal(fq_jbatch_append(&b, &in[3]), FQ_OK);
    text = fq_jbatch_text(&b, &len);
    g.n = 0;
    assert_int_equal(decode(&g, &c, text, len), FQ_OK);
    assert_int_equal(g.n, 1);
    assert_rec_equal(&g.r[0], &in[3]);
    fq_jbatch_free(&b);
    fq_jbatch_free(&b);         /* safe twice: zeroed */
}

/* The writer refuses what the reader would: it never writes a record that
 * does not read back. */
static void test_writer_refuses_invalid(void **state)
{
    (void)state;
    fq_jbatch b = {0};
    fq_jrec bad[14];
    bad[0] = flight("acme", "r", 0, 1);                 /* est 0 */
    bad[1] = flight("bad tenant", "r", 1, 1);
    bad[2] = flight("_invalid", "r", 1, 1);             /* reserved */
    bad[3] = flight("acme", "", 1, 1);                  /* no run id */
    bad[4] = flight("acme", "r", 1, (uint64_t)FQ_JOURNAL_MAX_INT + 1);
    bad[5] = (fq_jrec){.type = FQ_JREC_DEBT, .deficit = 1};  /* credit is not debt */
    snprintf(bad[5].tenant, sizeof bad[5].tenant, "acme");
    bad[6] = bad[5];
    bad[6].deficit = -5;
    snprintf(bad[6].run_id, sizeof bad[6].run_id, "r");      /* a debt has no run */
    bad[7] = flight("acme", "r", 1, 1);
    bad[7].type = (enum fq_jrec_type)9;
    bad[8] = flight("acme", "r", 1, 1);
    bad[8].at_ms = -1;
    bad[9] = flight("acme", "r", 1, 1);                 /* only a done record is */
    bad[9].unconfirmed = true;                          /* unconfirmed */
    bad[10] = (fq_jrec){.type = FQ_JREC_REFUSED, .refusal = FQ_EINVAL, .seq = 1};
    snprintf(bad[10].tenant, sizeof bad[10].tenant, "acme");    /* not of the moment */
    bad[11] = bad[10];
    bad[11].refusal = FQ_EFULL;
    bad[11].seq = 0;                                    /* a refusal is of a submit */
    bad[12] = bad[11];
    bad[12].seq = 1;
    snprintf(bad[12].run_id, sizeof bad[12].run_id, "r");     /* it names no run */
    bad[13] = flight("acme", "r", 1, 1);
    bad[13].refusal = FQ_EFULL;                         /* only a refused record has one */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = NULL;
        assert_false(fq_jrec_valid(&bad[i], &why));
        assert_non_null(why);
        assert_int_equal(fq_jbatch_append(&b, &bad[i]), FQ_EINVAL);
    }
    assert_int_equal(b.records, 0);
    fq_jbatch_free(&b);
}

/* Forged entries, each beside a valid one: each is refused and counted,
 * the valid one still read, nothing cast out of range. */
static void test_forged_records_refused(void **state)
{
    (void)state;
    static const char *const invalid[] = {
        /* no st: once counted as a done record */
        "{\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"at\":1}",
        "{\"st\":1,\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"at\":1}",
        /* an estimate that was cast to an unsigned */
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":1e30,\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":-1,\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":1.5,\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":0,\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":4294967296,\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":\"5\",\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":5,\"d\":0,\"s\":1e300,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":5,\"d\":0,\"s\":1,\"at\":-1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":5,\"d\":0,\"s\":1,\"at\":null}",
        /* a required member missing */
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"done\",\"t\":\"acme\",\"s\":1,\"at\":1}",
        /* a member given twice, or one its type does not have */
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"r-1\",\"r\":\"r-2\",\"s\":1,\"at\":1}",
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"at\":1,\"df\":-5}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":5,\"d\":0,\"s\":1,\"at\":1,\"u\":true}",
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"at\":1,\"u\":1}",
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"at\":1,\"u\":\"true\"}",
        /* refused records */
        "{\"st\":\"refused\",\"t\":\"acme\",\"s\":1,\"c\":\"invalid\",\"at\":1}",
        "{\"st\":\"refused\",\"t\":\"acme\",\"s\":1,\"c\":3,\"at\":1}",
        "{\"st\":\"refused\",\"t\":\"acme\",\"s\":1,\"at\":1}",
        "{\"st\":\"refused\",\"t\":\"acme\",\"s\":0,\"c\":\"overload\",\"at\":1}",
        "{\"st\":\"refused\",\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"c\":\"overload\",\"at\":1}",
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"c\":\"overload\",\"at\":1}",
        /* names */
        "{\"st\":\"done\",\"t\":\"a b\",\"r\":\"r-1\",\"s\":1,\"at\":1}",
        "{\"st\":\"done\",\"t\":\"_other\",\"r\":\"r-1\",\"s\":1,\"at\":1}",
        "{\"st\":\"done\",\"t\":[\"acme\"],\"r\":\"r-1\",\"s\":1,\"at\":1}",
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"\",\"s\":1,\"at\":1}",
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"r 1\",\"s\":1,\"at\":1}",
        "{\"st\":\"flight\",\"t\":\"acme\",\"r\":\"r-1\",\"w\":7,\"e\":5,\"d\":0,\"s\":1,\"at\":1}",
        /* an expired record is a flight record's fields */
        "{\"st\":\"expired\",\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"at\":1}",
        "{\"st\":\"expired\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":0,\"d\":0,\"s\":1,\"at\":1}",
        /* debts */
        "{\"st\":\"debt\",\"t\":\"acme\",\"df\":5,\"at\":1}",
        "{\"st\":\"debt\",\"t\":\"acme\",\"df\":-1e30,\"at\":1}",
        "{\"st\":\"debt\",\"t\":\"acme\",\"df\":-5,\"r\":\"r-1\",\"at\":1}",
        "{\"st\":\"debt\",\"t\":\"acme\",\"at\":1}",
        /* not an object */
        "\"flight\"",
        "[1,2]",
        "null",
    };
    static const char *const unknown[] = {
        "{\"st\":\"Flight\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":5,\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"fly\",\"t\":\"acme\",\"r\":\"r-1\",\"e\":5,\"d\":0,\"s\":1,\"at\":1}",
        "{\"st\":\"\",\"t\":\"acme\",\"r\":\"r-1\",\"s\":1,\"at\":1}",
    };
    static const char valid[] =
        "{\"st\":\"done\",\"t\":\"acme\",\"r\":\"r-9\",\"s\":9,\"at\":9,\"future\":[1]}";
    char entry[1024];
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        got g = {.n = 0};
        fq_jcounts c = {0};
        snprintf(entry, sizeof entry, "%s,%s", invalid[i], valid);
        decode_entry(&g, &c, entry);
        if (c.invalid != 1)
            fail_msg("entry %zu not refused: %s", i, invalid[i]);
        assert_int_equal(c.unknown, 0);
        assert_int_equal(c.records, 1);
        assert_int_equal(g.n, 1);
        assert_string_equal(g.r[0].run_id, "r-9");
        assert_true(c.why[0] != '\0');
    }
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        got g = {.n = 0};
        fq_jcounts c = {0};
        snprintf(entry, sizeof entry, "%s,%s", unknown[i], valid);
        decode_entry(&g, &c, entry);
        assert_int_equal(c.unknown, 1);
        assert_int_equal(c.invalid, 0);
        assert_int_equal(g.n, 1);
    }
}

/* A message that is not a batch is refused whole, counted once. */
static void test_bad_messages(void **state)
{
    (void)state;
    static const char *const msgs[] = {
        "", "{", "not json", "[]", "{\"entries\":[]}", "{\"v\":2,\"entries\":[]}",
        "{\"v\":\"1\",\"entries\":[]}", "{\"v\":1,\"entries\":{}}", "{\"v\":1}",
    };
    fq_jcounts c = {0};
    for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        got g = {.n = 0};
        assert_int_equal(decode(&g, &c, msgs[i], strlen(msgs[i])), FQ_EINVAL);
        assert_int_equal(g.n, 0);
    }
    assert_int_equal(c.invalid, sizeof msgs / sizeof msgs[0]);
    assert_string_equal(c.why, "a message is not a journal batch of version 1");
    got g = {.n = 0};
    assert_int_equal(fq_journal_decode(NULL, 0, collect, &g, &c), FQ_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_writer_refuses_invalid),
        cmocka_unit_test(test_forged_records_refused),
        cmocka_unit_test(test_bad_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
