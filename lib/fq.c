/* fq.c -- status codes and the tenant id rule shared by every fairq module. */
#include "fq.h"

#include <string.h>

static const struct {
    const char *code;
    const char *text;
} fq_statuses[FQ__COUNT] = {
    [FQ_OK]        = {"ok", "success"},
    [FQ_ENOMEM]    = {"no_memory", "out of memory"},
    [FQ_EINVAL]    = {"invalid", "invalid argument"},
    [FQ_EFULL]     = {"tenant_full", "the tenant has max_pending runs queued already"},
    [FQ_EEXIST]    = {"duplicate", "a run with this id is held already"},
    [FQ_ENOTFOUND] = {"not_found", "no such run or tenant"},
    [FQ_EUNKNOWN]  = {"unknown_tenant", "the tenant is not configured and unknown tenants are rejected"},
    [FQ_EOVERLOAD] = {"overload", "the estimated wait exceeds scheduler.max_wait_ms"},
    [FQ_ETOOBIG]   = {"too_big", "the run is larger than the server's max_payload allows"},
    [FQ_EIO]       = {"io", "input/output error"},
};

const char *fq_status_code(fq_status s)
{
    return (unsigned)s < FQ__COUNT ? fq_statuses[s].code : "unknown_status";
}

const char *fq_status_text(fq_status s)
{
    return (unsigned)s < FQ__COUNT ? fq_statuses[s].text : "unknown status";
}

int fq_name_valid(const char *s, size_t len)
{
    if (len == 0 || len > FQ_TENANT_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int fq_tenant_id_reserved(const char *s, size_t len)
{
    static const char *const reserved[] = {FQ_TENANT_INVALID, FQ_TENANT_OTHER};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (len == strlen(reserved[i]) && memcmp(s, reserved[i], len) == 0)
            return 1;
    return 0;
}

int fq_tenant_id_valid(const char *s, size_t len)
{
    return fq_name_valid(s, len) && !fq_tenant_id_reserved(s, len);
}

size_t fq_u64_dec(char *out, uint64_t v)
{
    char t[FQ_U64_DEC_MAX];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = t[n - 1 - i];
    out[n] = '\0';
    return n;
}
