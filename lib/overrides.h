/* overrides.h -- tenants' runtime overrides as the overrides bucket holds them: which is in force, what a change writes, what may be forgotten. */
#ifndef FQ_OVERRIDES_H
#define FQ_OVERRIDES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "msg.h"
#include "policy.h"

/*
 * Overrides live in a KV bucket, so any NATS client may write them and
 * every proxy and restart sees the same. This module keeps what the proxy
 * knows of that bucket and decides; it does no I/O. The proxy feeds it
 * the watch's entries (fq_ovr_on_kv, fq_ovr_on_synced), and for a change
 * asked of it (tenant.set) asks what to write (fq_ovr_plan), writes it
 * compare-and-set, and hands back the revision stored (fq_ovr_stored).
 * Putting an override in force means the policy's override layer; the
 * proxy's tenants follow from their next visit (the caller's part).
 *
 * A record per key is kept while its value is in force, or while a
 * deletion is not yet echoed by the watch: its revision is what the next
 * compare-and-set expects. A deleted key is forgotten once the watch has
 * delivered its deletion (any later entry of that watch has a higher
 * revision), so the records are bounded by the live keys, which the
 * bucket's bounds below limit. A change to a key without a record writes
 * "no value expected": fq_nio_kv_create reads the key's last revision
 * from the bucket again when a delete marker stands there, and refuses
 * when a value does (the watch has not delivered it yet: retry).
 */

/* The bucket's bounds (fq_nio_kv_ensure): a value is a small JSON object
 * (plan and three numbers, under 200 bytes), so 16 MiB holds the
 * overrides of about a hundred thousand tenants; past it the server
 * refuses new keys, and tenant.set says so. */
#define FQ_OVR_BUCKET_MAX_BYTES (16LL << 20)
#define FQ_OVR_VALUE_MAX 1024

typedef struct fq_ovr_set fq_ovr_set;

/* A key of the bucket as the watch delivered it. */
typedef struct fq_ovr_kv {
    const char *key;
    const void *value;          /* the value's bytes; ignored when deleted */
    size_t len;
    uint64_t rev;               /* the bucket's revision of this change */
    uint64_t epoch;             /* the watch it came from: 1, 2, ... one per (re)start */
    bool deleted;               /* a delete or purge marker */
} fq_ovr_kv;

/* What an entry did. */
enum fq_ovr_outcome {
    FQ_OVR_SAME = 0,            /* nothing in force changed (an echo, an equal value) */
    FQ_OVR_CHANGED,             /* the key's override in force changed: fq_ovr_find */
    FQ_OVR_REFUSED,             /* not a valid override: nothing changed, err says why */
};

/* seed keys the table's hash (tenant ids come from clients). */
fq_status fq_ovr_create(fq_ovr_set **out, uint64_t seed);
/* Safe on NULL. */
void fq_ovr_destroy(fq_ovr_set *s);

/* A key of the bucket changed (or was delivered by a new watch): put what
 * it holds in force in pol, unless it is an echo of what is in force
 * already. A value that is not a valid override is refused whole
 * (FQ_OVR_REFUSED, err says why) and the tenant's policy stays. */
enum fq_ovr_outcome fq_ovr_on_kv(fq_ovr_set *s, fq_policy *pol, const fq_ovr_kv *kv, char *err,
                                 size_t errlen);
/* A watch of epoch has delivered every key: an override it did not deliver
 * has vanished from the bucket (purged while the watch was cut off); it is
 * cleared from pol and fn(arg, its entry with nothing set, its last
 * revision) is called for each, before it is forgotten. */
void fq_ovr_on_synced(fq_ovr_set *s, fq_policy *pol, uint64_t epoch,
                      void (*fn)(void *arg, const fq_tenant_entry *e, uint64_t rev), void *arg);
/* The bucket has been read whole once. */
bool fq_ovr_synced(const fq_ovr_set *s);

/* The override in force for tenant (an entry with fields set), or NULL;
 * *rev (if not NULL) its revision. Valid until the set next changes. */
const fq_tenant_entry *fq_ovr_find(const fq_ovr_set *s, const char *tenant, uint64_t *rev);
/* Overrides in force; records kept (those plus deletions not yet echoed). */
size_t fq_ovr_in_force(const fq_ovr_set *s);
#ifdef FQ_TESTING   /* tests only: no program calls it */
size_t fq_ovr_records(const fq_ovr_set *s);
#endif

/* Give the policy np (built from a reloaded config) the overrides in
 * force. One naming a plan np lacks refuses the reload (err says which,
 * naming bucket): it would silently change that tenant. */
fq_status fq_ovr_carry(const fq_ovr_set *s, fq_policy *np, const char *bucket, char *err,
                       size_t errlen);

/* The fields of e that are set, as a JSON object: what the bucket stores. */
void fq_ovr_entry_json(fq_json *w, const fq_tenant_entry *e);
/* e sets nothing: no override. */
bool fq_ovr_entry_empty(const fq_tenant_entry *e);

/* A change of one tenant's override, as fq_ovr_plan decides it. */
typedef struct fq_ovr_write {
    fq_tenant_entry e;          /* what would be in force after it */
    bool changes;               /* false: e is in force already, nothing to write */
    bool del;                   /* write a delete marker: e sets nothing */
    uint64_t expect;            /* the revision the write expects; 0: no value */
    char value[FQ_OVR_VALUE_MAX]; /* the value to write (JSON), unless del */
    size_t len;
} fq_ovr_write;

/* What the merge patch pt (a valid tenant.set, tenant named) writes, given
 * the plans and classes of pol. FQ_EINVAL (err says why) when it names a
 * plan pol lacks, or the class weights it leaves do not fit pol's classes:
 * nothing is to be written. Changes nothing. */
fq_status fq_ovr_plan(fq_ovr_write *w, const fq_ovr_set *s, const fq_policy *pol,
                      const fq_override_patch *pt, char *err, size_t errlen);
/* The bucket stored w at rev: put w->e in force in pol, so that the watch's
 * echo of it changes nothing. On error (out of memory; a plan pol no
 * longer has) nothing changes in force and err says why. */
fq_status fq_ovr_stored(fq_ovr_set *s, fq_policy *pol, const fq_ovr_write *w, uint64_t rev,
                        char *err, size_t errlen);

#endif
