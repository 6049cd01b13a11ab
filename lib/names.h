/* names.h -- the default subjects, stream, consumer and bucket names of fairq's wire contract (docs/protocol.md). */
#ifndef FQ_NAMES_H
#define FQ_NAMES_H

/*
 * Principles
 *
 * - Spelled once. The proxy's config defaults (lib/config.c) and the
 *   example clients in cmd/ take these names from here, so that a client
 *   run without options talks to a proxy run with the shipped defaults.
 *   Every one of them can be changed in the config (subjects.*, streams.*,
 *   nats.inbox_prefix) and, in the clients, by an option.
 * - Plain string literals, so that they can be pasted into other literals
 *   (usage texts, "<prefix>.*" stream subjects).
 */

/* Subjects (subjects.*). A tenant's subject is the prefix + "." + its id. */
#define FQ_SUBJECT_SUBMIT "fair.submit"     /* producers publish runs here */
#define FQ_SUBJECT_DISPATCH "fair.dispatch" /* one subject: the workers' */
#define FQ_SUBJECT_DONE "fair.done"         /* workers report actual spend */
#define FQ_SUBJECT_REJECTED "fair.rejected" /* refusals, with their reason */
#define FQ_SUBJECT_ADMIN "fair.admin"       /* + ".stats", ".reload", ... */
#define FQ_SUBJECT_EXPLAIN "fair.explain"   /* + "." + tenant: why a run waits; a
                                               subject per tenant, so that NATS
                                               permissions give each its own */
#define FQ_SUBJECT_RUNS "fairq.runs"        /* the journal's one subject */
#define FQ_SUBJECT_SHARE "fairq.share"      /* replicas' heartbeats (window.share):
                                               core NATS, not stored */

/* The admin requests, each on FQ_SUBJECT_ADMIN + "." + its name. */
#define FQ_ADMIN_STATS "stats"
#define FQ_ADMIN_RELOAD "reload"
#define FQ_ADMIN_TENANT_GET "tenant.get"
#define FQ_ADMIN_TENANT_SET "tenant.set"

/* nats.c's own inbox prefix (nats.inbox_prefix, a client's --inbox-prefix). */
#define FQ_INBOX_PREFIX "_INBOX"

/* Streams, the proxy's durable consumer and its buckets (streams.*). */
#define FQ_DEFAULT_STREAM_SUBMIT "FAIR_SUBMIT"
#define FQ_DEFAULT_STREAM_DISPATCH "FAIR_DISPATCH"
#define FQ_DEFAULT_STREAM_DONE "FAIR_DONE"
#define FQ_DEFAULT_STREAM_REJECTED "FAIR_REJECTED"
#define FQ_DEFAULT_STREAM_RUNS "FAIRQ_RUNS"     /* the runs journal */
#define FQ_DEFAULT_DURABLE "fairq"              /* on submit and on done */
#define FQ_DEFAULT_LEASE_BUCKET "fairq_lease"   /* the leader lease */
#define FQ_DEFAULT_TENANTS_BUCKET "fairq_tenants" /* runtime overrides */

#endif
