/* fuzz_stats.c -- fq_stats_req_parse: the admin request fair.admin.stats.
 *
 * Input: the body. */
#include "fuzz.h"
#include "msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fq_stats_req r;
    char err[256] = "";
    fq_status st = fq_stats_req_parse(&r, size ? data : NULL, size, err, sizeof err);
    if (st != FQ_OK) {
        FUZZ_CHECK(st == FQ_EINVAL);
        FUZZ_CHECK(fuzz_sentence_ok(err, sizeof err));
        FUZZ_CHECK(!r.tenant[0] && r.limit == SIZE_MAX && !r.offset);
        return 0;
    }
    size_t n = strnlen(r.tenant, sizeof r.tenant);
    FUZZ_CHECK(n < sizeof r.tenant);
    FUZZ_CHECK(r.offset <= (size_t)1e15);
    FUZZ_CHECK(r.limit == SIZE_MAX || r.limit <= (size_t)1e15);
    return 0;
}
