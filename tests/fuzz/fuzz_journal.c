/* fuzz_journal.c -- fq_journal_decode: a message of the runs journal as a
 * restarted proxy reads it back (whatever a NATS client stored there). Each
 * record it hands out must be valid, and written again in a batch must
 * decode to the same records with nothing refused. */
#include "fuzz.h"
#include "journal.h"

#define MAX_RECS 256

typedef struct recs {
    fq_jrec r[MAX_RECS];
    size_t n;                   /* records handed out (may exceed MAX_RECS) */
} recs;

static void keep(void *arg, const fq_jrec *r)
{
    recs *k = arg;
    const char *why = NULL;
    FUZZ_CHECK(fq_jrec_valid(r, &why));
    if (k->n < MAX_RECS)
        k->r[k->n] = *r;
    k->n++;
}

static int same(const fq_jrec *a, const fq_jrec *b)
{
    return a->type == b->type && strcmp(a->tenant, b->tenant) == 0 &&
           strcmp(a->run_id, b->run_id) == 0 && strcmp(a->workflow, b->workflow) == 0 &&
           a->est == b->est && a->declared == b->declared && a->seq == b->seq &&
           a->deficit == b->deficit && a->at_ms == b->at_ms;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static recs in, out;
    in.n = out.n = 0;
    fq_jcounts c;
    memset(&c, 0, sizeof c);
    fq_status st = fq_journal_decode(size ? data : NULL, size, keep, &in, &c);
    FUZZ_CHECK(st == FQ_OK || st == FQ_EINVAL);
    FUZZ_CHECK(c.records == in.n && strnlen(c.why, sizeof c.why) < sizeof c.why);
    FUZZ_CHECK(st == FQ_OK || (in.n == 0 && c.invalid == 1));
    FUZZ_CHECK(!(c.invalid || c.unknown) || c.why[0]);
    if (in.n == 0 || in.n > MAX_RECS)
        return 0;

    fq_jbatch b;
    memset(&b, 0, sizeof b);
    for (size_t i = 0; i < in.n; i++)
        FUZZ_CHECK(fq_jbatch_append(&b, &in.r[i]) == FQ_OK);
    size_t len = 0;
    const char *text = fq_jbatch_text(&b, &len);
    FUZZ_CHECK(text);
    memset(&c, 0, sizeof c);
    FUZZ_CHECK(fq_journal_decode(text, len, keep, &out, &c) == FQ_OK);
    FUZZ_CHECK(c.invalid == 0 && c.unknown == 0 && out.n == in.n);
    for (size_t i = 0; i < in.n; i++)
        FUZZ_CHECK(same(&in.r[i], &out.r[i]));
    fq_jbatch_free(&b);
    return 0;
}
