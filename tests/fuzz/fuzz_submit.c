/* fuzz_submit.c -- fq_submit_parse: a run request on fair.submit.<tenant>,
 * its body and its Fair-Run-Id, Fair-Workflow, Fair-Est-Tokens and Fair-Class
 * and Fair-Subtenant headers.
 *
 * Input: a byte of flags, then the value of each header its bits 0 to 2, 6
 * and 7 give (run id, workflow, estimate, class, sub-tenant) up to a NUL,
 * then the body. Bit 3 passes an
 * empty body as NULL (as nats.c may), bit 4 parses without cJSON's arena,
 * bit 5 lowers max_est to 1000.
 *
 * The body is also read by ref_parse, the cJSON reading lib/msg.c used before
 * its one-pass scanner (kept here only, as the reference): both must agree on
 * whether the body is a JSON object, on the fields, and on which field an
 * error names. */
#include <stdbool.h>

#include "fuzz.h"
#include "msg.h"
#include "submit_ref.h"

#define TENANT "acme"

/* The value of the next header: up to a NUL or the end, as a string of its
 * own so that a read past it shows. */
static char *next_value(const uint8_t **p, const uint8_t *end)
{
    const uint8_t *nul = memchr(*p, '\0', (size_t)(end - *p));
    size_t n = nul ? (size_t)(nul - *p) : (size_t)(end - *p);
    char *v = fuzz_strndup(*p, n);
    *p += nul ? n + 1 : n;
    return v;
}

static int name_ok(const char *s, size_t max)
{
    return !*s || fq_msg_name_valid(s, strlen(s), max);
}

/* The new parser's reading of the body alone must be the reference's. */
static void check_reference(const void *body, size_t len, uint32_t max_est)
{
    ref_result r;
    fq_submit s;
    char err[256] = "";

    ref_parse(&r, body, len, TENANT, max_est);
    fq_status st = fq_submit_parse(&s, TENANT, body, len, NULL, max_est, err, sizeof err);
    FUZZ_CHECK(st == r.st);
    if (st == FQ_OK) {
        FUZZ_CHECK(s.opaque == r.opaque);
        FUZZ_CHECK(strcmp(s.run_id, r.s.run_id) == 0);
        FUZZ_CHECK(strcmp(s.workflow, r.s.workflow) == 0);
        FUZZ_CHECK(s.est_tokens == r.s.est_tokens);
        FUZZ_CHECK(strcmp(s.cls, r.s.cls) == 0);
        FUZZ_CHECK(!s.cls_err[0] == !r.cls_bad);
        FUZZ_CHECK(strcmp(s.subtenant, r.s.subtenant) == 0);
    } else {
        size_t n = strlen(r.field);
        FUZZ_CHECK(strncmp(err, r.field, n) == 0 && err[n] == ':');
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    const uint8_t *p = data + 1, *end = data + size;
    char *v[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        if (flags & (1u << i))
            v[i] = next_value(&p, end);
    if (flags & 64)
        v[3] = next_value(&p, end);
    if (flags & 128)
        v[4] = next_value(&p, end);
    fq_submit_headers h = {.run_id = v[0], .workflow = v[1], .est_tokens = v[2], .cls = v[3],
                           .subtenant = v[4]};
    size_t len = (size_t)(end - p);
    void *body = NULL;
    if (len || !(flags & 8)) {
        body = malloc(len ? len : 1);   /* exactly the body: no NUL after it */
        FUZZ_CHECK(body);
        memcpy(body, p, len);
    }
    uint32_t max_est = flags & 32 ? 1000 : 1000000;
    fq_msg_set_arena(!(flags & 16));

    fq_submit s;
    char err[256] = "";
    fq_status st = fq_submit_parse(&s, TENANT, body, len, (flags & 199) ? &h : NULL, max_est,
                                   err, sizeof err);
    if (st == FQ_OK) {
        FUZZ_CHECK(name_ok(s.run_id, FQ_RUN_ID_MAX));
        FUZZ_CHECK(name_ok(s.workflow, FQ_WORKFLOW_MAX));
        FUZZ_CHECK(s.est_tokens <= max_est);
        FUZZ_CHECK(name_ok(s.cls, FQ_CLASS_MAX));
        FUZZ_CHECK(!s.cls[0] || !s.cls_err[0]);
        FUZZ_CHECK(!s.cls_err[0] || fuzz_sentence_ok(s.cls_err, sizeof s.cls_err));
        FUZZ_CHECK(!s.opaque || (!s.est_tokens || v[2]));
        FUZZ_CHECK(name_ok(s.subtenant, FQ_SUBTENANT_MAX));
        FUZZ_CHECK(!s.opaque || !s.subtenant[0] || v[4]);
    } else {
        FUZZ_CHECK(st == FQ_EINVAL);
        FUZZ_CHECK(fuzz_sentence_ok(err, sizeof err));
        FUZZ_CHECK(!s.run_id[0] && !s.workflow[0] && !s.est_tokens);
    }
    check_reference(body, len, max_est);
    fq_msg_set_arena(true);
    free(body);
    for (int i = 0; i < 5; i++)
        free(v[i]);
    return 0;
}
