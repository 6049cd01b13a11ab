/* config.h -- fairq's configuration: the YAML file (libcyaml) to plain C structs. */
#ifndef FQ_CONFIG_H
#define FQ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fq.h"
#include "policy.h"

typedef struct fq_workflow_default {
    char name[FQ_WORKFLOW_MAX + 1];
    uint32_t tokens;
} fq_workflow_default;

/* Every field has its default filled in by fq_config_load. Strings are
 * owned by the config and freed by fq_config_free. */
typedef struct fq_config {
    struct {
        char *url;                  /* default nats://127.0.0.1:4222 */
        char *creds;                /* NULL: none */
        char *tls_ca, *tls_cert, *tls_key;  /* NULL: none */
        uint32_t replicas;          /* stream replicas, default 1 */
    } nats;
    struct {
        char *submit;               /* "fair.submit" (producers add .<tenant>) */
        char *dispatch;             /* "fair.dispatch" */
        char *done;                 /* "fair.done" */
        char *rejected;             /* "fair.rejected" */
        char *admin;                /* "fair.admin" */
    } subjects;
    struct {
        uint32_t quantum_tokens;    /* default 1000 */
        char *default_plan;         /* required */
        bool reject_unknown;        /* unknown_tenants: admit (false) | reject */
        uint32_t max_est_tokens;    /* default 1,000,000 */
        uint64_t max_wait_ms;       /* 0: no limit (default) */
    } scheduler;
    struct {
        uint32_t max_in_flight;     /* default 64 */
        uint64_t max_in_flight_tokens; /* 0: no limit (default) */
        uint64_t run_timeout_ms;    /* default 600000 */
    } window;
    struct {
        uint64_t max_buffered_runs; /* default 1,000,000 */
        uint64_t max_buffered_bytes;/* default 256 MiB */
    } limits;
    struct {
        uint32_t default_tokens;    /* default 1000 */
        fq_workflow_default *workflows;
        size_t n_workflows;
    } estimates;
    struct {
        char *listen;               /* default "127.0.0.1:9464"; "" disables */
    } http;
    struct {
        char *level;                /* debug|info|warn|error, default info */
        char *format;               /* logfmt (default) | json */
    } log;
    fq_plan *plans;
    size_t n_plans;
    fq_tenant_entry *tenants;
    size_t n_tenants;
} fq_config;

#define FQ_DEFAULT_MAX_PENDING 100000   /* runs per tenant when no plan says */

/* Load and validate a YAML file. On error returns FQ_EINVAL (or FQ_EIO) and
 * writes "file:line:col: reason" into err (errlen bytes); *out untouched. */
fq_status fq_config_load(fq_config *out, const char *path, char *err, size_t errlen);
/* The same from a string in memory (name is used in messages). */
fq_status fq_config_parse(fq_config *out, const char *name, const char *yaml,
                          size_t len, char *err, size_t errlen);
/* Safe on a zeroed config. */
void fq_config_free(fq_config *c);

/* A policy built from the plans and tenants of c. */
fq_status fq_config_policy(fq_policy **out, const fq_config *c);

#endif
