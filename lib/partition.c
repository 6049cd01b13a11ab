/* partition.c -- nats-server's partition function, computed by fairq (see partition.h). */
#include <stdio.h>
#include <string.h>

#include "partition.h"

/*
 * Principles
 *
 * - The server's function, not one like it: a tenant whose partition we
 *   computed differently from the server would have its runs refused, so
 *   the unit test pins known values and tests/it_partition.c compares
 *   with a real nats-server for hundreds of names, odd bytes included.
 * - No I/O, no allocation: called once per submit and completion.
 */

/* 32-bit FNV-1a, as Go's hash/fnv New32a. */
#define PT_FNV_OFFSET 2166136261u
#define PT_FNV_PRIME 16777619u

uint32_t fq_partition_of(const char *token, size_t len, uint32_t n)
{
    uint32_t h = PT_FNV_OFFSET;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)token[i];
        h *= PT_FNV_PRIME;
    }
    return n ? h % n : 0;
}

fq_status fq_partition_tenant(const char **tenant, size_t *len, const char *subject,
                              const char *prefix, uint32_t n, char *err, size_t errlen)
{
    size_t pl = strlen(prefix);
    *tenant = NULL;
    *len = 0;
    if (strncmp(subject, prefix, pl) != 0 || subject[pl] != '.') {
        snprintf(err, errlen, "the subject is not under %s", prefix);
        return FQ_EINVAL;
    }
    const char *rest = subject + pl + 1, *t = strrchr(rest, '.');
    if (n <= 1) {
        *tenant = t ? t + 1 : rest;
        *len = strlen(*tenant);
        return FQ_OK;
    }
    /* prefix.<k>.<tenant>: k is the only token between them */
    if (!t || memchr(rest, '.', (size_t)(t - rest))) {
        snprintf(err, errlen, "the subject is not %s.<partition>.<tenant> (%u partitions)",
                 prefix, n);
        return FQ_EINVAL;
    }
    *tenant = t + 1;
    *len = strlen(*tenant);
    char want[16];
    int wl = snprintf(want, sizeof want, "%u", fq_partition_of(*tenant, *len, n));
    size_t kl = (size_t)(t - rest);
    if (kl != (size_t)wl || memcmp(rest, want, kl) != 0) {
        /* neither token is shown: the tenant is not validated yet */
        snprintf(err, errlen, "the subject's partition token is not its tenant's: the server "
                 "maps that tenant to partition %s of %u", want, n);
        *tenant = NULL;
        *len = 0;
        return FQ_EINVAL;
    }
    return FQ_OK;
}
