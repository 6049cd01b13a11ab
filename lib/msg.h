/* msg.h -- the wire contract's message bodies (cJSON): submit fields, completions, replies. */
#ifndef FQ_MSG_H
#define FQ_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "policy.h"
#include "share.h"

/* Header names of the wire contract (docs/protocol.md). */
#define FQ_HDR_TENANT "Fair-Tenant"
#define FQ_HDR_RUN_ID "Fair-Run-Id"
#define FQ_HDR_WORKFLOW "Fair-Workflow"
#define FQ_HDR_EST_TOKENS "Fair-Est-Tokens"
#define FQ_HDR_CLASS "Fair-Class"
#define FQ_HDR_SUBTENANT "Fair-Subtenant"
#define FQ_HDR_SUBMITTED_AT "Fair-Submitted-At"
#define FQ_HDR_DISPATCHED_AT "Fair-Dispatched-At"
#define FQ_HDR_POSSIBLE_DUPLICATE "Fair-Possible-Duplicate"  /* a run JetStream may store
                                                           twice (docs/protocol.md) */
#define FQ_HDR_ERROR "Fair-Error"
#define FQ_HDR_SUBJECT "Fair-Subject"
#define FQ_HDR_WAIT_MS "Fair-Wait-Ms"   /* an overload refusal's estimated wait */

/* Whether parses here take cJSON's memory from a per-thread arena (the
 * default) or from malloc, the same outcome either way; for benchmarks, set
 * while no other thread parses. Linking this module installs cJSON hooks
 * before main (cJSON_InitHooks): outside this module's parses they are
 * malloc and free, so a program must not install hooks of its own. */
void fq_msg_set_arena(bool on);

/* Run ids and workflow names travel in NATS headers, logs and JSON, so they
 * are 1 to max bytes of printable ASCII without spaces (0x21 to 0x7e): no
 * control characters (a CR or LF would split a header), no leading or
 * trailing blanks (header parsers trim them), no bytes a log line would have
 * to escape. Returns 1 if s[0..len) is one, else 0. */
int fq_msg_name_valid(const char *s, size_t len, size_t max);

/* The optional fields of a run request, from its body and headers. */
typedef struct fq_submit {
    char run_id[FQ_RUN_ID_MAX + 1];     /* "" if absent */
    char workflow[FQ_WORKFLOW_MAX + 1]; /* "" if absent */
    uint32_t est_tokens;                /* 0 if absent */
    bool opaque;                        /* the body is not a JSON object */
    char cls[FQ_CLASS_MAX + 1];         /* its priority class; "" if absent or bad */
    char cls_err[160];                  /* "" or why the class given is not a
                                           name (fq_msg_name_valid, at most
                                           FQ_CLASS_MAX): a sentence naming the
                                           field, for the caller to refuse with
                                           where classes are configured */
    char subtenant[FQ_SUBTENANT_MAX + 1]; /* the sub-tenant it claims; "" if none */
    bool subtenant_refused;             /* FQ_EINVAL was for the sub-tenant claim
                                           (kept when *out is reset to defaults) */
} fq_submit;

/* Header values as the NATS adapter found them (NUL-terminated, as nats.c
 * returns them); NULL when absent. */
typedef struct fq_submit_headers {
    const char *run_id;                 /* Fair-Run-Id */
    const char *workflow;               /* Fair-Workflow */
    const char *est_tokens;             /* Fair-Est-Tokens: digits only */
    const char *cls;                    /* Fair-Class */
    const char *subtenant;              /* Fair-Subtenant */
    const char *twice;                  /* a claim header but Fair-Class given twice
                                           (in any case), NULL if none: refused */
    bool cls_twice;                     /* Fair-Class given twice: said in cls_err */
} fq_submit_headers;

/* Read the submit fields of body[0..len) (not NUL-terminated; body may be
 * NULL when len is 0) for tenant, the subject's valid tenant id; h may be
 * NULL. A body that is not strictly a JSON object (not JSON, another JSON
 * type, empty, invalid UTF-8) is opaque: its fields are defaults. In a JSON
 * object, run_id and workflow are strings obeying fq_msg_name_valid,
 * est_tokens an integral number in [1, max_est], and a tenant field must
 * equal tenant; other fields are ignored, null counts as absent. class (the
 * body's or the Fair-Class header's) refuses nothing here: it is read into
 * cls, or why not into cls_err, for the caller to judge. Every other field
 * present, in the body or the headers, must be valid; where both give one,
 * the header wins, but for the sub-tenant (the body's subtenant, the
 * Fair-Subtenant header, a name obeying fq_msg_name_valid of at most
 * FQ_SUBTENANT_MAX): where both give one they must be the same. On FQ_OK
 * *out holds the fields. On FQ_EINVAL (a field present but invalid, or given
 * twice, a header h->twice, or the sub-tenants differ) *out holds defaults and err a sentence
 * naming the field and the reason, safe to put in a header. */
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
    bool kinds;                         /* input, output or cached tokens given:
                                           they price the run (docs/policy.md) */
    uint64_t input_tokens;              /* every input token, cached ones included */
    uint64_t output_tokens;
    uint64_t cached_tokens;             /* of input_tokens, those read from a cache */
} fq_completion;

/* The largest actual_tokens a completion may report: FQ_ACTUAL_OVER_MAX_EST
 * times the largest estimate a run may carry (scheduler.max_est_tokens).
 * One run's actual spend is charged to its tenant whole, so a count past
 * any plausible run (a worker's bug, or a forged completion meant to sink
 * a neighbour in debt) is refused rather than believed. */
#define FQ_ACTUAL_OVER_MAX_EST 100u
#define FQ_MAX_ACTUAL_TOKENS(max_est) ((uint64_t)(max_est) * FQ_ACTUAL_OVER_MAX_EST)

/* A completion's body, at most: its fields fit in a few hundred bytes. A
 * longer one is refused unread, since parsing a megabyte of JSON members
 * costs the proxy's loop about 100 ms and anyone may publish completions. */
#define FQ_COMPLETION_MAX_BYTES 4096

/* Parse a completion from body[0..len) (not NUL-terminated). FQ_EINVAL with
 * a sentence in err if it is longer than FQ_COMPLETION_MAX_BYTES, or not a
 * JSON object with a valid run_id,
 * actual_tokens (integer 0..FQ_MAX_ACTUAL_TOKENS(max_est)) and status
 * ("ok", "error" or "cancelled"), or an echoed est_tokens (1..max_est) or
 * workflow is invalid, or input_tokens, output_tokens or cached_tokens
 * (each 0..FQ_MAX_ACTUAL_TOKENS(max_est); cached_tokens at most
 * input_tokens, which counts them) is, or one of these is given twice;
 * *out then holds zeroes. Other fields are ignored. */
fq_status fq_completion_parse(fq_completion *out, const void *body, size_t len,
                              uint32_t max_est, char *err, size_t errlen);

/* Write a completion body (for the example worker and the load generator),
 * leaving out est_tokens when 0 and workflow when "". Returns the length
 * written (a NUL follows), or 0 if it did not fit or c->status is not one. */
size_t fq_completion_format(char *buf, size_t cap, const fq_completion *c);

/*
 * A change to one tenant's runtime override (fair.admin.tenant.set), read as
 * a JSON merge patch (RFC 7386) of the override: a field with a value sets
 * it, a field given as null removes it from the override (the config's value
 * applies again), a field left out is kept. The same object, without nulls,
 * is what the overrides bucket stores under the tenant's id.
 */
/* The largest price of a token kind (lib/policy's FQ_POLICY_MAX_PRICE). */
#define FQ_PRICE_MAX 1000000u

#define FQ_OVR_PLAN 1u
#define FQ_OVR_WEIGHT 2u
#define FQ_OVR_MAX_IN_FLIGHT 4u
#define FQ_OVR_MAX_PENDING 8u
#define FQ_OVR_BURST_IN_FLIGHT 16u
#define FQ_OVR_TOKENS_PER_MINUTE 32u
#define FQ_OVR_PRICE_INPUT 64u
#define FQ_OVR_PRICE_OUTPUT 128u
#define FQ_OVR_PRICE_CACHED 256u
#define FQ_OVR_MAX_SUBTENANTS 512u
#define FQ_OVR_CLASS_WEIGHTS 1024u
#define FQ_OVR_CLASS_MAX_PENDING 2048u
#define FQ_OVR_ALL 4095u

typedef struct fq_override_patch {
    char tenant[FQ_TENANT_MAX + 1];     /* "" if the body names none */
    char plan[FQ_TENANT_MAX + 1];       /* a plan name (the tenant id rule) */
    uint32_t weight;                    /* 1..max_weight */
    uint32_t max_in_flight;             /* >= 1 */
    uint32_t max_pending;               /* >= 1 */
    uint32_t burst_in_flight;           /* >= 1 */
    uint32_t tokens_per_minute;         /* >= 1 */
    uint32_t price_input;               /* 1..1,000,000 */
    uint32_t price_output;              /* 1..1,000,000 */
    uint32_t price_cached;              /* 1..1,000,000 */
    uint32_t max_subtenants;            /* 1..FQ_MAX_SUBTENANTS */
    fq_class_weights class_weights;     /* "strict", or 2..4 weights (set) */
    fq_class_pending class_max_pending; /* 2..4 max_pending, one per class (set) */
    unsigned set;                       /* FQ_OVR_* fields given a value */
    unsigned removed;                   /* FQ_OVR_* fields given as null */
} fq_override_patch;

/* What a body must hold. */
enum fq_patch_kind {
    FQ_PATCH_SET = 0,   /* fair.admin.tenant.set: tenant and at least one field */
    FQ_PATCH_VALUE,     /* a bucket value: at least one field; tenant optional */
    FQ_PATCH_GET,       /* fair.admin.tenant.get: tenant and nothing else */
};

/* Read an override patch of kind from body[0..len) (not NUL-terminated). It
 * must be a JSON object whose members are only tenant (a valid tenant id),
 * plan, weight (1..max_weight), max_in_flight, max_pending,
 * burst_in_flight and tokens_per_minute (1..2^32-1), price_input,
 * price_output and price_cached (1..1,000,000), max_subtenants
 * (1..FQ_MAX_SUBTENANTS), class_weights (fq_class_weights_parse's text)
 * and class_max_pending (fq_class_pending_parse's; whether either fits the
 * classes configured is the policy's to say),
 * as kind requires. On FQ_EINVAL *out is zeroed and err holds a sentence
 * naming the field and the reason (never quoting the client). */
fq_status fq_override_patch_parse(fq_override_patch *out, const void *body, size_t len,
                                  enum fq_patch_kind kind, uint32_t max_weight,
                                  char *err, size_t errlen);

/* What a stats request (fair.admin.stats) asks for: one tenant, or a page
 * of the tenants in the order the proxy ranks them. */
typedef struct fq_stats_req {
    char tenant[FQ_TENANT_MAX + 1];     /* "": every tenant */
    size_t offset;                      /* tenants skipped from the top */
    size_t limit;                       /* at most this many; SIZE_MAX: what fits */
} fq_stats_req;

/* Read a stats request from body[0..len) (not NUL-terminated): empty or
 * blank, or a JSON object with "tenant" (a string of 1 to FQ_TENANT_MAX
 * bytes), or "limit" and "offset" (integers 0 to 10^15), and nothing else.
 * On FQ_EINVAL err holds a sentence naming the field and the reason (never
 * quoting the client). */
fq_status fq_stats_req_parse(fq_stats_req *out, const void *body, size_t len, char *err,
                             size_t errlen);

/* What an explain request (<explain>.<tenant>) asks about: one run of the
 * tenant, or the tenant as a whole. */
typedef struct fq_explain_req {
    char run_id[FQ_RUN_ID_MAX + 1];     /* "": the tenant */
} fq_explain_req;

/* Read an explain request from body[0..len) (not NUL-terminated): empty or
 * blank, or a JSON object with at most "run_id" (obeying
 * fq_msg_name_valid), and nothing else. On FQ_EINVAL err holds a sentence
 * naming the field and the reason (never quoting the client). */
fq_status fq_explain_req_parse(fq_explain_req *out, const void *body, size_t len, char *err,
                               size_t errlen);

/* The counts of a JetStream consumer info answer ($JS.API.CONSUMER.INFO):
 * messages its filter matches not delivered yet (num_pending) and
 * delivered but not acked (num_ack_pending). FQ_EINVAL: not such an
 * answer (an error answer, a consumer gone). */
fq_status fq_consumer_info_parse(uint64_t *pending, uint64_t *ack_pending, const void *body,
                                 size_t len);
/* The stream sequence of a consumer info answer's ack floor
 * (ack_floor.stream_seq): every message of its filter at or below it was
 * delivered and acked. FQ_EINVAL: not such an answer. */
fq_status fq_consumer_floor_parse(uint64_t *floor, const void *body, size_t len);
/* The last sequence of a stream info answer ($JS.API.STREAM.INFO:
 * state.last_seq): every message stored before the answer has a sequence
 * at or below it. FQ_EINVAL: not such an answer (an error answer). */
fq_status fq_stream_last_seq_parse(uint64_t *seq, const void *body, size_t len);
/* The stream sequence of a STREAM.MSG.GET answer's message (message.seq).
 * FQ_ENOTFOUND: the answer says no message matches (JetStream's 10037);
 * FQ_EINVAL: anything else (another error, not such an answer). */
fq_status fq_msg_get_seq_parse(uint64_t *seq, const void *body, size_t len);

/* The claims of a NATS JWT (nats-io/jwt v2) that say whose it is, who
 * signed it and when it is valid: read from a credentials file to say why
 * a server refused it (lib/creds.c). */
typedef struct fq_jwt_claims {
    char sub[64];               /* the subject's public nkey ("U..." for a user) */
    char iss[64];               /* the signer's public nkey (an account's "A...") */
    char name[64];              /* its name, cut to fit; "" if none */
    char type[16];              /* nats.type: "user", "account", ...; "" if none */
    int64_t exp;                /* expires at, Unix seconds; 0: never */
    int64_t nbf;                /* not valid before, Unix seconds; 0: at once */
} fq_jwt_claims;

/* Read the claims from json[0..len) (a JWT's decoded payload, not
 * NUL-terminated): a JSON object whose sub and iss are strings and exp and
 * nbf, if present, non-negative integers. On FQ_EINVAL *out is zeroed and
 * err holds the reason. */
fq_status fq_jwt_claims_parse(fq_jwt_claims *out, const void *json, size_t len, char *err,
                              size_t errlen);

/* A replica's heartbeat (lib/share), on the heartbeat subject: a JSON
 * object of id (a replica id: printable ASCII without spaces, 1 to
 * FQ_SHARE_ID_MAX bytes), weight, queued_runs, queued_tokens, tokens and
 * borrowed_tokens (integers 0..FQ_SHARE_MAX_VALUE), runs and borrowed_runs
 * (0..2^32-1; borrowed at most runs, borrowed_tokens at most tokens), all
 * required, none twice, nothing else. Whoever may publish on the subject is
 * heard, so a heartbeat is refused unread past FQ_SHARE_BEAT_MAX_BYTES.
 * On FQ_EINVAL *out is zeroed and err holds a sentence naming the field and
 * the reason (never quoting the sender). */
#define FQ_SHARE_BEAT_MAX_BYTES 1024
fq_status fq_share_beat_parse(fq_share_beat *out, const void *body, size_t len, char *err,
                              size_t errlen);
/* Write a heartbeat's body. Returns the length written (a NUL follows), or 0
 * if it did not fit. */
size_t fq_share_beat_format(char *buf, size_t cap, const fq_share_beat *b);

/* A JSON writer over the caller's buffer, for replies (fair.admin.stats,
 * admin errors): no allocation, commas tracked, strings escaped (invalid
 * UTF-8 becomes U+FFFD, so the text is always valid JSON). Calls out of
 * order (a value where a key is due, an unbalanced end, a second top-level
 * value, nesting past FQ_JSON_MAX_DEPTH) are remembered and reported by
 * fq_json_finish; once the buffer is full, later calls only count bytes. */
#define FQ_JSON_MAX_DEPTH 31

typedef struct fq_json {
    char *buf;              /* the caller's buffer */
    size_t cap;             /* its size, the final NUL included */
    size_t len;             /* bytes the text needs so far, may exceed cap */
    uint32_t depth;         /* containers open */
    uint32_t in_object;     /* bit d: the container at depth d is an object */
    uint32_t has_items;     /* bit d: depth d has a member already (bit 0: the top value) */
    bool want_value;        /* a key was written; its value is due */
    bool misuse;            /* a call was out of order */
} fq_json;

void fq_json_init(fq_json *w, char *buf, size_t cap);
void fq_json_begin_object(fq_json *w);
void fq_json_end_object(fq_json *w);
void fq_json_begin_array(fq_json *w);
void fq_json_end_array(fq_json *w);
void fq_json_key(fq_json *w, const char *key);
/* A string value; NULL writes null. */
void fq_json_string(fq_json *w, const char *s);
/* A string value of len bytes, which need not be NUL-terminated. */
void fq_json_stringn(fq_json *w, const char *s, size_t len);
void fq_json_int(fq_json *w, int64_t v);
/* The shortest of %.15g and %.17g that reads back exactly (LC_NUMERIC "C"
 * assumed); NaN and infinities, which JSON lacks, write null. */
void fq_json_double(fq_json *w, double v);
void fq_json_bool(fq_json *w, bool v);
void fq_json_null(fq_json *w);

/* End the text: NUL-terminate it and store its length (excluding the NUL)
 * in *len (len may be NULL). FQ_ETOOBIG if it did not fit: *len is then the
 * length it needs (a buffer of *len + 1 bytes will do). FQ_EINVAL if calls
 * were out of order or a container is still open: *len is 0. On error the
 * buffer holds "" (when cap > 0). */
fq_status fq_json_finish(fq_json *w, size_t *len);

#endif
