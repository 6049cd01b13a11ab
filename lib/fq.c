/* fq.c -- status codes, the tenant id rule and small helpers shared by every fairq module. */
#include "fq.h"

#include <stdint.h>
#include <stdlib.h>
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

size_t fq_str_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
    return n;
}

#define FQ_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define FQ_SIPROUND                                                         \
    do {                                                                    \
        v0 += v1; v1 = FQ_ROTL(v1, 13); v1 ^= v0; v0 = FQ_ROTL(v0, 32);     \
        v2 += v3; v3 = FQ_ROTL(v3, 16); v3 ^= v2;                           \
        v0 += v3; v3 = FQ_ROTL(v3, 21); v3 ^= v0;                           \
        v2 += v1; v1 = FQ_ROTL(v1, 17); v1 ^= v2; v2 = FQ_ROTL(v2, 32);     \
    } while (0)

/* As in the reference implementation (Aumasson and Bernstein, 2012). */
uint64_t fq_siphash(uint64_t k0, uint64_t k1, const void *data, size_t len)
{
    const uint8_t *in = data;
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    uint64_t m;
    size_t whole = len - len % 8;
    for (size_t i = 0; i < whole; i += 8) {
        m = 0;
        for (int j = 7; j >= 0; j--)
            m = m << 8 | in[i + (size_t)j];
        v3 ^= m;
        FQ_SIPROUND;
        FQ_SIPROUND;
        v0 ^= m;
    }
    m = (uint64_t)len << 56;
    for (size_t j = 0; j < len % 8; j++)
        m |= (uint64_t)in[whole + j] << (8 * j);
    v3 ^= m;
    FQ_SIPROUND;
    FQ_SIPROUND;
    v0 ^= m;
    v2 ^= 0xff;
    for (int r = 0; r < 4; r++)
        FQ_SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

void fq_bucket_init(fq_bucket *b, uint32_t rate, uint32_t burst, uint64_t now)
{
    b->rate = rate ? rate : 1;
    b->burst = burst ? burst : 1;
    b->milli = (uint64_t)b->burst * 1000;
    b->at = now;
}

bool fq_bucket_take(fq_bucket *b, uint64_t now, uint64_t *wait_ms)
{
    uint64_t full = (uint64_t)b->burst * 1000;
    if (now > b->at) {
        /* rate a second is rate thousandths a millisecond */
        uint64_t add = (now - b->at) * b->rate;
        b->milli = add >= full - b->milli ? full : b->milli + add;
        b->at = now;
    }
    if (b->milli >= 1000) {
        b->milli -= 1000;
        return true;
    }
    if (wait_ms)
        *wait_ms = (1000 - b->milli + b->rate - 1) / b->rate;
    return false;
}

fq_status fq_grow(void *arrp, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return FQ_OK;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return FQ_ENOMEM;
        n *= 2;
    }
    if (size && n > SIZE_MAX / size)
        return FQ_ENOMEM;
    void *q = realloc(*(void **)arrp, n * size);
    if (!q)
        return FQ_ENOMEM;
    *(void **)arrp = q;
    *cap = n;
    return FQ_OK;
}

uint64_t fq_fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return h;
}
