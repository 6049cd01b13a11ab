/* fq.h -- the status type and limits shared by every fairq module. */
#ifndef FQ_H
#define FQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One status type, returned by every function that can fail. */
typedef enum fq_status {
    FQ_OK = 0,
    FQ_ENOMEM,          /* an allocation failed; nothing was changed */
    FQ_EINVAL,          /* an argument is out of its documented range */
    FQ_EFULL,           /* the tenant has max_pending runs queued already */
    FQ_EEXIST,          /* a run with that id is held already */
    FQ_ENOTFOUND,       /* no such run or tenant is held */
    FQ_EUNKNOWN,        /* tenant not configured and policy says reject */
    FQ_EOVERLOAD,       /* estimated wait exceeds scheduler.max_wait_ms */
    FQ_ETOOBIG,         /* the run cannot be forwarded (payload too large) */
    FQ_EIO,             /* the outside world failed (NATS, files) */
    FQ__COUNT
} fq_status;

/* A short stable code ("full", "unknown_tenant", ...) for a status, used in
 * the Fair-Error header and as a metrics label. Never NULL. */
const char *fq_status_code(fq_status s);

/* A sentence that explains a status to a person. Never NULL. */
const char *fq_status_text(fq_status s);

#define FQ_TENANT_MAX 64        /* bytes in a tenant id */
#define FQ_WORKFLOW_MAX 64      /* bytes in a workflow name */
#define FQ_RUN_ID_MAX 128       /* bytes in a run id */
#define FQ_CLASS_MAX 32         /* bytes in a priority class's name */
#define FQ_SUBTENANT_MAX 64     /* bytes in a sub-tenant's name (Fair-Subtenant) */
#define FQ_MAX_SUBTENANTS 10000u /* the most a plan or override lets a tenant know */

/* Names (tenant ids, plan names, bucket names) are 1 to 64 of
 * [A-Za-z0-9_-]. Returns 1 if s[0..len) is one. */
int fq_name_valid(const char *s, size_t len);

/* Two names are fairq's own and no tenant's: the refusals of runs whose
 * subject names no tenant go to <rejected>._invalid, and the metrics of the
 * tenants past the series limit are folded into tenant="_other". A tenant so
 * named would mix its refusals or its series with those. */
#define FQ_TENANT_INVALID "_invalid"
#define FQ_TENANT_OTHER "_other"
#define FQ_TENANT_RULE "1 to 64 of [A-Za-z0-9_-], other than _invalid and _other"

/* 1 if s[0..len) is one of the reserved names above. */
int fq_tenant_id_reserved(const char *s, size_t len);

/* Tenant ids are names that are not reserved. Returns 1 if s[0..len) is one. */
int fq_tenant_id_valid(const char *s, size_t len);

#define FQ_U64_DEC_MAX 21       /* bytes fq_u64_dec may write, NUL included */

/* Write v in decimal into out (FQ_U64_DEC_MAX bytes), NUL-terminated;
 * returns the digits written. For per-run headers and subjects, where
 * snprintf's format parsing costs more than the rest. */
size_t fq_u64_dec(char *out, uint64_t v);

/* Copy the string src into dst of cap >= 1 bytes, cut to fit, NUL
 * terminated; returns the bytes copied. For names copied for every tenant
 * each second (the metrics), where snprintf's "%s" costs several times the
 * copy. */
size_t fq_str_copy(char *dst, size_t cap, const char *src);

/* Grow the array *(T **)arrp of *cap elements of size bytes so that it
 * holds need, doubling from 16: amortised O(1) per element appended.
 * FQ_ENOMEM (also when need * size would overflow): nothing changed. */
fq_status fq_grow(void *arrp, size_t *cap, size_t need, size_t size);

/* FNV-1a of the string s, from the basis 1469598103934665603 (one digit
 * short of the published one: the scenario generator's seeds always used
 * it, and kept, every seed draws what it drew before). Fast and unkeyed:
 * for seeds and lossy caches, never for a table whose keys clients choose
 * (fq_siphash). */
uint64_t fq_fnv1a(const char *s);

/* SipHash-2-4 of data[0..len) under the 128-bit key (k0, k1): a keyed hash
 * that whoever chooses the data cannot make collide without the key, for
 * tables whose keys come from clients and whose matches are decided on the
 * hash alone. */
uint64_t fq_siphash(uint64_t k0, uint64_t k1, const void *data, size_t len);

/* A token bucket: at most burst takes at once, rate a second on average,
 * for work that clients can ask for faster than it may be done. Times are
 * milliseconds of the caller's monotonic clock; integer arithmetic. */
typedef struct fq_bucket {
    uint64_t milli;             /* tokens held, in thousandths */
    uint64_t at;                /* when it was last refilled */
    uint32_t rate;              /* tokens added a second; >= 1 */
    uint32_t burst;             /* tokens held at most; >= 1 */
} fq_bucket;

/* A full bucket at now. */
void fq_bucket_init(fq_bucket *b, uint32_t rate, uint32_t burst, uint64_t now);
/* Take a token at now: true if one was there. Otherwise false, and
 * *wait_ms (if not NULL) says how long until one is. */
bool fq_bucket_take(fq_bucket *b, uint64_t now, uint64_t *wait_ms);

#endif
