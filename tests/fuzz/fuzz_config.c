/* fuzz_config.c -- fq_config_parse: the proxy's YAML config file (fq_config_load
 * reads the file and hands its bytes here). What loads must also give a
 * policy, a description, a copy that describes the same, and no restart
 * keys against itself. */
#include "config.h"
#include "fuzz.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fq_config c;
    memset(&c, 0, sizeof c);
    char err[512] = "";
    fq_status st = fq_config_parse(&c, "fuzz.yaml", (const char *)data, size, err, sizeof err);
    if (st != FQ_OK) {
        FUZZ_CHECK(st == FQ_EINVAL);
        FUZZ_CHECK(err[0] && strnlen(err, sizeof err) < sizeof err);
        return 0;
    }
    fq_policy *p = NULL;
    FUZZ_CHECK(fq_config_policy(&p, &c) == FQ_OK);
    fq_policy_destroy(p);
    char a[4096], b[4096];
    size_t na = fq_config_describe(&c, a, sizeof a);
    fq_config d;
    FUZZ_CHECK(fq_config_copy(&d, &c) == FQ_OK);
    size_t nb = fq_config_describe(&d, b, sizeof b);
    FUZZ_CHECK(na == nb && strcmp(a, b) == 0);
    char keys[256];
    FUZZ_CHECK(fq_config_diff_restart(&c, &d, keys, sizeof keys) == 0);
    fq_config_free(&d);
    fq_config_free(&c);
    return 0;
}
