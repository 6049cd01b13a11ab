/* fuzz_creds.c -- fq_creds_check_text: a NATS credentials file, checked after the server refused it.
 *
 * Input: the file's content. */
#include "creds.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    char why[400] = "";
    /* 2026-01-01: a JWT's exp and nbf fall on both sides of it */
    fq_status st = fq_creds_check_text(why, sizeof why, text, 1767225600);
    FUZZ_CHECK(st == FQ_OK || st == FQ_EINVAL);
    FUZZ_CHECK(fuzz_sentence_ok(why, sizeof why));
    free(text);
    return 0;
}
