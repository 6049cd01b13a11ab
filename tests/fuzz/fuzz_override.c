/* fuzz_override.c -- fq_override_patch_parse: the admin requests
 * fair.admin.tenant.set and fair.admin.tenant.get, and the values of the
 * overrides bucket (read back at start and from its watch).
 *
 * Input: a byte whose value modulo 3 is the patch kind, then the body. */
#include "fuzz.h"
#include "msg.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum fq_patch_kind kind = (enum fq_patch_kind)(data[0] % 3);
    size_t len = size - 1;
    fq_override_patch pt;
    char err[256] = "";
    fq_status st = fq_override_patch_parse(&pt, len ? data + 1 : NULL, len, kind,
                                           FQ_POLICY_MAX_WEIGHT, err, sizeof err);
    if (st != FQ_OK) {
        FUZZ_CHECK(st == FQ_EINVAL);
        FUZZ_CHECK(fuzz_sentence_ok(err, sizeof err));
        FUZZ_CHECK(!pt.tenant[0] && !pt.set && !pt.removed && !pt.weight);
        return 0;
    }
    FUZZ_CHECK(!(pt.set & pt.removed) && !((pt.set | pt.removed) & ~FQ_OVR_ALL));
    FUZZ_CHECK(!pt.tenant[0] || fq_tenant_id_valid(pt.tenant, strlen(pt.tenant)));
    FUZZ_CHECK(kind == FQ_PATCH_VALUE || pt.tenant[0]);
    FUZZ_CHECK(kind == FQ_PATCH_GET ? !(pt.set | pt.removed) : (pt.set | pt.removed) != 0);
    FUZZ_CHECK(!(pt.set & FQ_OVR_PLAN) || fq_name_valid(pt.plan, strlen(pt.plan)));
    FUZZ_CHECK(!(pt.set & FQ_OVR_WEIGHT) ||
               (pt.weight >= 1 && pt.weight <= FQ_POLICY_MAX_WEIGHT));
    FUZZ_CHECK(!(pt.set & FQ_OVR_MAX_IN_FLIGHT) || pt.max_in_flight >= 1);
    FUZZ_CHECK(!(pt.set & FQ_OVR_MAX_PENDING) || pt.max_pending >= 1);
    return 0;
}
