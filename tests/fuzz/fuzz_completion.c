/* fuzz_completion.c -- fq_completion_parse: a worker's report on
 * fair.done.<tenant>. The whole input is the body. What parses is written
 * back with fq_completion_format and must parse to the same completion. */
#include "fuzz.h"
#include "msg.h"

#define MAX_EST 1000000u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fq_completion c;
    char err[256] = "";
    fq_status st = fq_completion_parse(&c, size ? data : NULL, size, MAX_EST, err, sizeof err);
    if (st != FQ_OK) {
        FUZZ_CHECK(st == FQ_EINVAL);
        FUZZ_CHECK(fuzz_sentence_ok(err, sizeof err));
        FUZZ_CHECK(!c.run_id[0] && !c.actual_tokens && !c.est_tokens && !c.workflow[0]);
        return 0;
    }
    FUZZ_CHECK(fq_msg_name_valid(c.run_id, strlen(c.run_id), FQ_RUN_ID_MAX));
    FUZZ_CHECK(!c.workflow[0] || fq_msg_name_valid(c.workflow, strlen(c.workflow),
                                                   FQ_WORKFLOW_MAX));
    FUZZ_CHECK(c.actual_tokens <= FQ_MAX_ACTUAL_TOKENS(MAX_EST) && c.est_tokens <= MAX_EST);
    FUZZ_CHECK(c.status == FQ_DONE_OK || c.status == FQ_DONE_ERROR ||
               c.status == FQ_DONE_CANCELLED);

    char buf[512];
    size_t n = fq_completion_format(buf, sizeof buf, &c);
    FUZZ_CHECK(n > 0 && n < sizeof buf);
    fq_completion back;
    FUZZ_CHECK(fq_completion_parse(&back, buf, n, MAX_EST, err, sizeof err) == FQ_OK);
    FUZZ_CHECK(strcmp(back.run_id, c.run_id) == 0 && strcmp(back.workflow, c.workflow) == 0 &&
               back.actual_tokens == c.actual_tokens && back.status == c.status &&
               back.est_tokens == c.est_tokens);
    return 0;
}
