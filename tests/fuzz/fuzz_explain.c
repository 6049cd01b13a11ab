/* fuzz_explain.c -- fq_explain_req_parse: the body of a request on fair.explain.<tenant>, which any producer may send.
 *
 * Input: the body. */
#include "fuzz.h"
#include "msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fq_explain_req r;
    char err[256] = "";
    fq_status st = fq_explain_req_parse(&r, size ? data : NULL, size, err, sizeof err);
    if (st != FQ_OK) {
        FUZZ_CHECK(st == FQ_EINVAL);
        FUZZ_CHECK(fuzz_sentence_ok(err, sizeof err));
        FUZZ_CHECK(!r.run_id[0]);
        return 0;
    }
    size_t n = strnlen(r.run_id, sizeof r.run_id);
    FUZZ_CHECK(n < sizeof r.run_id);
    FUZZ_CHECK(!n || fq_msg_name_valid(r.run_id, n, FQ_RUN_ID_MAX));
    return 0;
}
