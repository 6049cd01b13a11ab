/* partition.h -- nats-server's partition function, computed by fairq: which of n partitions a tenant's subjects are mapped to. */
#ifndef FQ_PARTITION_H
#define FQ_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "fq.h"

/*
 * A deployment of P > 1 partitions has nats-server map each tenant's
 * subjects, in the server's configuration (docs/partitions.md):
 *
 *   "fair.submit.*": "fair.submit.{{partition(P,1)}}.{{wildcard(1)}}"
 *   "fair.done.*":   "fair.done.{{partition(P,1)}}.{{wildcard(1)}}"
 *
 * Partition tokens are not authenticated: whoever may publish
 * fair.submit.3.acme itself bypasses the mapping. So fairq recomputes the
 * server's function for every submit and completion and refuses a subject
 * whose partition token is not the tenant's.
 *
 * The function is nats-server 2.9.10's (server/accounts.go,
 * getHashPartition): the 32-bit FNV-1a hash of the token's bytes, modulo
 * P, written in decimal. P = 1 is no mapping at all: the subject is
 * prefix.<tenant>, as before partitions existed.
 */

#define FQ_PARTITIONS_MAX 1024u     /* config's partitions: 1 to this */

/* The partition, 0 to n - 1, that nats-server's {{partition(n,1)}} picks
 * for a subject whose wildcard token is the len bytes at token; n >= 1. */
uint32_t fq_partition_of(const char *token, size_t len, uint32_t n);

/*
 * The tenant token of subject, a subject of FAIR_SUBMIT or FAIR_DONE under
 * prefix ("fair.submit") in a deployment of n partitions: with n = 1,
 * prefix.<tenant> (the last token); with n > 1, prefix.<k>.<tenant> where
 * k is fq_partition_of(tenant) in decimal. On FQ_OK *tenant points into
 * subject and *len is its length (the caller checks it is a valid tenant
 * id); else FQ_EINVAL and err (errlen bytes) says why, e.g. a partition
 * token that is not the tenant's.
 */
fq_status fq_partition_tenant(const char **tenant, size_t *len, const char *subject,
                              const char *prefix, uint32_t n, char *err, size_t errlen);

#endif
