/* msg.h -- the wire contract's message bodies (cJSON): submit fields, completions, replies. */
#ifndef FQ_MSG_H
#define FQ_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/* The optional fields of a run request, from its body and headers. */
typedef struct fq_submit {
    char run_id[FQ_RUN_ID_MAX + 1];     /* "" if absent */
    char workflow[FQ_WORKFLOW_MAX + 1]; /* "" if absent */
    uint32_t est_tokens;                /* 0 if absent */
    bool opaque;                        /* the body is not a JSON object */
} fq_submit;

/* Header values as the NATS adapter found them; NULL when absent. */
typedef struct fq_submit_headers {
    const char *run_id;
    const char *workflow;
    const char *est_tokens;
} fq_submit_headers;

/* Read the submit fields of body[0..len) for tenant (from the subject);
 * headers win over the body. A body that is not a JSON object is opaque:
 * FQ_OK with defaults. A field present but invalid (wrong type, out of
 * range [1, max_est], fractional, over-long, a tenant that disagrees)
 * returns FQ_EINVAL with a sentence in err. */
fq_status fq_submit_parse(fq_submit *out, const char *tenant, const void *body,
                          size_t len, const fq_submit_headers *h,
                          uint32_t max_est, char *err, size_t errlen);

enum fq_done_status { FQ_DONE_OK = 0, FQ_DONE_ERROR, FQ_DONE_CANCELLED };

/* A completion from a worker on fair.done.<tenant>. */
typedef struct fq_completion {
    char run_id[FQ_RUN_ID_MAX + 1];
    uint64_t actual_tokens;
    enum fq_done_status status;
    uint32_t est_tokens;                /* echoed; 0 if absent */
    char workflow[FQ_WORKFLOW_MAX + 1]; /* echoed; "" if absent */
} fq_completion;

#define FQ_MAX_ACTUAL_TOKENS 1000000000000ULL   /* larger is absurd: refused */

/* Parse a completion. FQ_EINVAL with a sentence in err if it is not a JSON
 * object with a valid run_id, actual_tokens (integer 0..FQ_MAX_ACTUAL_TOKENS)
 * and status, or an echoed field is invalid. */
fq_status fq_completion_parse(fq_completion *out, const void *body, size_t len,
                              uint32_t max_est, char *err, size_t errlen);

/* Write a completion body (for the example worker and the load generator).
 * Returns the length written (excluding NUL), or 0 if it did not fit. */
size_t fq_completion_format(char *buf, size_t cap, const fq_completion *c);

#endif
