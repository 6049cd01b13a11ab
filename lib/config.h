/* config.h -- fairq's configuration: the YAML file (libcyaml) to plain C structs. */
#ifndef FQ_CONFIG_H
#define FQ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "names.h"
#include "policy.h"

typedef struct fq_workflow_default {
    char name[FQ_WORKFLOW_MAX + 1];
    uint32_t tokens;
} fq_workflow_default;

/* Every field has its default filled in by fq_config_load. Strings are
 * owned by the config and freed by fq_config_free. Only nats.url, plans and
 * scheduler.default_plan are required in the file. */
typedef struct fq_config {
    struct {
        char *url;                  /* required; may carry credentials */
        char *creds;                /* NULL: none; a secret, never printed */
        char *tls_ca, *tls_cert;    /* NULL: none */
        char *tls_key;              /* NULL: none; a secret, never printed */
        char *user;                 /* NULL: none; with password */
        char *password;             /* NULL: none; a secret, never printed */
        char *nkey;                 /* an nkey user's public key (U...), or NULL */
        char *nkey_seed;            /* the file holding its seed (SU...), with nkey;
                                       a secret, never printed */
        char *inbox_prefix;         /* every inbox the proxy makes is under it;
                                       default FQ_INBOX_PREFIX (nats.c's) */
    } nats;
    char *replica_id;               /* this replica's id among those sharing the
                                       partitions (lib/owner.h); NULL: made at start
                                       from host, pid and time */
    uint32_t partitions;            /* P, the tenants' partitions: 1 (default, no
                                       mapping) to FQ_PARTITIONS_MAX; with P > 1 the
                                       server maps <submit>.<tenant> and
                                       <done>.<tenant> to <...>.<k>.<tenant>
                                       (lib/partition.h, docs/partitions.md) */
    uint32_t partitions_before;     /* the P before a change of P (docs/partitions.md,
                                       "Changing P"): a partition taken reads, besides
                                       its own journal subject, those that held its
                                       tenants' records under it; 1 (default): none */
    struct {
        char *submit;               /* FQ_SUBJECT_SUBMIT (producers add .<tenant>) */
        char *dispatch;             /* FQ_SUBJECT_DISPATCH */
        char *done;                 /* FQ_SUBJECT_DONE */
        char *rejected;             /* FQ_SUBJECT_REJECTED */
        char *admin;                /* FQ_SUBJECT_ADMIN */
        char *explain;              /* FQ_SUBJECT_EXPLAIN: + "." + tenant */
        char *runs;                 /* FQ_SUBJECT_RUNS: the journal's one subject */
        char *share;                /* FQ_SUBJECT_SHARE: replicas' heartbeats */
    } subjects;
    /* What fairq keeps in JetStream. Stream and consumer names are 1 to
     * FQ_CONFIG_NAME_MAX printable characters without '.', '*', '>', '/',
     * '\' (JetStream's rule); bucket names 1 to 64 of [A-Za-z0-9_-]. */
    struct {
        char *submit;               /* FQ_DEFAULT_STREAM_SUBMIT */
        char *dispatch;             /* FQ_DEFAULT_STREAM_DISPATCH */
        char *done;                 /* FQ_DEFAULT_STREAM_DONE */
        char *rejected;             /* FQ_DEFAULT_STREAM_REJECTED */
        char *runs;                 /* FQ_DEFAULT_STREAM_RUNS: the runs journal */
        char *durable;              /* FQ_DEFAULT_DURABLE: the proxy's consumer
                                       on submit and on done */
        char *lease_bucket;         /* FQ_DEFAULT_LEASE_BUCKET: the leader lease */
        uint64_t lease_ttl_ms;      /* its TTL: a silent holder loses it after this,
                                       FQ_LEASE_TTL_DEFAULT_MS, 1 s to 1 min */
        char *tenants_bucket;       /* FQ_DEFAULT_TENANTS_BUCKET: runtime overrides */
        uint32_t replicas;          /* of every stream and bucket, 1 to 5, default 1 */
        uint64_t duplicate_window_ms; /* dispatch de-duplication, default
                                       FQ_DEFAULT_DUPLICATE_WINDOW_MS, 1 s to 1 day */
        uint64_t dispatch_max_age_ms; /* default max(1 h, 2 x max(duplicate window,
                                       window.run_timeout_ms)); >= duplicate window */
        uint64_t rejected_max_age_ms; /* default FQ_DEFAULT_REJECTED_MAX_AGE_MS */
        /* Storage bounds, 0: none (each at most INT64_MAX). The submit
         * stream refuses a publish past them (the producer's PubAck is an
         * error); the rejected stream deletes its oldest refusals. */
        uint64_t submit_max_msgs_per_tenant; /* runs a tenant's subject holds;
                                       FQ_DEFAULT_SUBMIT_MAX_MSGS_PER_TENANT */
        uint64_t submit_max_bytes;  /* the whole submit stream; FQ_DEFAULT_SUBMIT_MAX_BYTES */
        uint64_t rejected_max_msgs_per_tenant; /* refusals kept per tenant (the
                                       newest); FQ_DEFAULT_REJECTED_MAX_MSGS_PER_TENANT */
        uint64_t rejected_max_bytes; /* FQ_DEFAULT_REJECTED_MAX_BYTES */
    } streams;
    struct {
        uint32_t quantum_tokens;    /* default 1000, at most FQ_POLICY_MAX_QUANTUM */
        char *default_plan;         /* required; names one of plans */
        bool reject_unknown;        /* unknown_tenants: admit (false) | reject */
        uint32_t max_est_tokens;    /* default 1,000,000 */
        uint64_t max_wait_ms;       /* 0: no limit (default); at most FQ_CONFIG_MAX_MS */
        uint64_t debt_forget_ms;    /* a tenant idle this long since its debt last
                                       changed has it forgiven; default
                                       FQ_DEFAULT_DEBT_FORGET_MS, 1 s to FQ_CONFIG_MAX_MS */
        char *classes;              /* priority classes within a tenant, highest
                                       first, as fq_classes_parse reads them
                                       ("interactive:100,batch"); NULL: none.
                                       Restart only */
    } scheduler;
    struct {
        uint32_t max_in_flight;     /* default 64 */
        uint64_t max_in_flight_tokens; /* 0: no limit (default) */
        uint64_t run_timeout_ms;    /* default 600000; 1 to FQ_CONFIG_MAX_MS */
        bool share;                 /* split the window across replicas by
                                       heartbeats (lib/share, docs/scaling.md);
                                       default off. Restart only */
        uint32_t share_reserve_runs; /* the shared reserve; default 1, >= 1 */
        uint64_t share_reserve_tokens; /* ... in tokens; 0: max_in_flight_tokens /
                                       max_in_flight, rounded up (default) */
    } window;
    struct {
        uint64_t max_buffered_runs; /* default 1,000,000 */
        uint64_t max_buffered_bytes;/* default 256 MiB */
    } limits;
    struct {
        uint32_t default_tokens;    /* default 1000 (or max_est_tokens if lower) */
        fq_workflow_default *workflows; /* tokens <= max_est_tokens */
        size_t n_workflows;
    } estimates;
    struct {
        char *listen;               /* default "127.0.0.1:9464"; "" disables */
        char *probe_listen;         /* /healthz and /readyz alone, on a server of
                                       their own; default "": none */
        uint32_t max_tenant_series; /* tenants with series of their own, the rest
                                       folded into "_other"; default 10,000, 1 to
                                       FQ_CONFIG_MAX_TENANT_SERIES */
    } http;
    struct {
        char *level;                /* debug|info|warn|error, default info */
        char *format;               /* logfmt (default) | json */
        uint64_t queue_age_warn_ms; /* a tenant whose oldest queued run is older is
                                       logged at warn; default 60,000, at most
                                       FQ_CONFIG_MAX_MS */
    } log;
    fq_plan *plans;                 /* at least one; weight default 1 */
    size_t n_plans;
    fq_tenant_entry *tenants;       /* plan "": the default plan */
    size_t n_tenants;
} fq_config;

#define FQ_DEFAULT_MAX_PENDING 100000   /* runs per tenant when no plan says */
#define FQ_DEFAULT_DUPLICATE_WINDOW_MS 600000u  /* ten minutes */
#define FQ_MAX_DUPLICATE_WINDOW_MS 86400000u    /* a day: completed run ids are
                                                   remembered that long */
#define FQ_DEFAULT_REJECTED_MAX_AGE_MS 604800000u /* a week */
#define FQ_DEFAULT_SUBMIT_MAX_MSGS_PER_TENANT 100000u /* as FQ_DEFAULT_MAX_PENDING */
#define FQ_DEFAULT_SUBMIT_MAX_BYTES (1ull << 30)       /* 1 GiB */
#define FQ_DEFAULT_REJECTED_MAX_MSGS_PER_TENANT 10000u
#define FQ_DEFAULT_REJECTED_MAX_BYTES (256ull << 20)   /* 256 MiB */
#define FQ_CONFIG_NAME_MAX 64           /* a stream or consumer name */
#define FQ_CONFIG_MAX_TENANT_SERIES 1000000u
#define FQ_DEFAULT_QUEUE_AGE_WARN_MS 60000u /* log.queue_age_warn_ms */
#define FQ_DEFAULT_DEBT_FORGET_MS 3600000u  /* scheduler.debt_forget_ms: an hour */
#define FQ_CONFIG_MAX_MS 31536000000ull /* one year: bounds every duration */
#define FQ_CONFIG_MAX_BYTES (16u << 20) /* a config file larger than this is refused */

/* Load, then validate a YAML file and fill in defaults. On error returns
 * FQ_EINVAL (FQ_EIO if the file cannot be read, FQ_ENOMEM) and writes one
 * line into err (errlen bytes), "file:line:col: key.path: reason", e.g.
 * "fairq.yaml:12:5: plans[2].weight: must be >= 1" (entries counted from 0;
 * no line:col when the key is absent); *out is untouched. Unknown keys,
 * keys given twice, a plan, tenant or workflow named twice, a tenant on an
 * unknown plan and values that are not what their key takes are errors. */
fq_status fq_config_load(fq_config *out, const char *path, char *err, size_t errlen);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* The same from a string in memory (name is used in messages). */
fq_status fq_config_parse(fq_config *out, const char *name, const char *yaml,
                          size_t len, char *err, size_t errlen);
#endif
/* Safe on a zeroed config; leaves it zeroed. */
void fq_config_free(fq_config *c);

/* A policy built from the plans and tenants of c (with FQ_DEFAULT_MAX_PENDING
 * where neither sets max_pending). On error *out is NULL. */
fq_status fq_config_policy(fq_policy **out, const fq_config *c);

/* The effective config as one line of logfmt key=value pairs, for the
 * startup log: secrets are shown as "set" (creds, TLS key) and a URL's user
 * information as "***". Writes at most cap bytes, always NUL-terminated when
 * cap > 0; returns the length of the whole line, as snprintf does. */
size_t fq_config_describe(const fq_config *c, char *buf, size_t cap);

/* A deep copy of src into *dst (zeroed first), to be freed with
 * fq_config_free. On FQ_ENOMEM *dst is zeroed. */
fq_status fq_config_copy(fq_config *dst, const fq_config *src);

/* The settings that differ between old and new but only take effect at a
 * restart (nats.*, subjects.*, streams.*, scheduler.max_est_tokens,
 * window.run_timeout_ms, estimates.default_tokens and http.*), as a
 * comma-separated list of key names (never their values) in file order in
 * buf, truncated to cap as snprintf does. Returns how many differ. */
size_t fq_config_diff_restart(const fq_config *old, const fq_config *new,
                              char *buf, size_t cap);

/* Put the settings of old that only a restart applies (those
 * fq_config_diff_restart compares) into c, shallow: strings are shared. */
void fq_config_keep_restart(fq_config *c, const fq_config *old);

#endif
