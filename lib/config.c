/* config.c -- fairq's YAML configuration: a libcyaml schema, then validation and defaults. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cyaml/cyaml.h>
#include <yaml.h>

#include "config.h"
#include "buf.h"
#include "metrics.h"
#include "yamlerr.h"

/*
 * Principles
 *
 * - Load, then validate. libcyaml maps the document onto raw structs in
 *   which every key is optional and every scalar is a string; a separate
 *   pass checks required keys, parses numbers strictly, checks ranges and
 *   cross references, and fills in defaults. Integers are not left to
 *   libcyaml 1.3 because it reads "1.5" as 1 and "010" as 8, and a struct
 *   of plain integers cannot tell an absent key from a zero.
 * - Every error names file, line, column and key path: lib/yamlerr.c
 *   captures libcyaml's errors and places them, and the validation errors,
 *   by key path.
 * - Secrets (nats.creds, nats.tls.key, nats.password, nats.nkey_seed, a
 *   URL's user information) never leave this module as text.
 */

/* The document as libcyaml loads it: NULL is an absent key. */
typedef struct raw_tls {
    char *ca, *cert, *key;
} raw_tls;

typedef struct raw_nats {
    char *url, *creds, *user, *password, *nkey, *nkey_seed, *inbox_prefix;
    raw_tls *tls;
} raw_nats;

typedef struct raw_subjects {
    char *submit, *dispatch, *done, *rejected, *admin, *runs;
} raw_subjects;

typedef struct raw_streams {
    char *submit, *dispatch, *done, *rejected, *runs, *durable, *lease_bucket,
        *tenants_bucket, *replicas, *duplicate_window_ms, *dispatch_max_age_ms,
        *rejected_max_age_ms, *submit_max_msgs_per_tenant, *submit_max_bytes,
        *rejected_max_msgs_per_tenant, *rejected_max_bytes;
} raw_streams;

typedef struct raw_scheduler {
    char *quantum_tokens, *default_plan, *unknown_tenants, *max_est_tokens,
        *max_wait_ms, *debt_forget_ms;
} raw_scheduler;

typedef struct raw_window {
    char *max_in_flight, *max_in_flight_tokens, *run_timeout_ms;
} raw_window;

typedef struct raw_limits {
    char *max_buffered_runs, *max_buffered_bytes;
} raw_limits;

typedef struct raw_plan {
    char *name, *weight, *max_in_flight, *max_pending;
} raw_plan;

typedef struct raw_tenant {
    char *id, *plan, *weight, *max_in_flight, *max_pending;
} raw_tenant;

typedef struct raw_workflow {
    char *name, *tokens;
} raw_workflow;

typedef struct raw_estimates {
    char *default_tokens;
    raw_workflow *workflows;
    unsigned workflows_count;
} raw_estimates;

typedef struct raw_http {
    char *listen, *probe_listen, *max_tenant_series;
} raw_http;

typedef struct raw_log {
    char *level, *format, *queue_age_warn_ms;
} raw_log;

typedef struct raw_config {
    raw_nats *nats;
    raw_subjects *subjects;
    raw_streams *streams;
    raw_scheduler *scheduler;
    raw_window *window;
    raw_limits *limits;
    raw_plan *plans;
    unsigned plans_count;
    raw_tenant *tenants;
    unsigned tenants_count;
    raw_estimates *estimates;
    raw_http *http;
    raw_log *log;
} raw_config;

/* The schema, bottom-up. */
#define CFG_STR(key, st, m) \
    CYAML_FIELD_STRING_PTR(key, CYAML_FLAG_OPTIONAL, st, m, 0, CYAML_UNLIMITED)
#define CFG_MAP(key, st, m, fields) \
    CYAML_FIELD_MAPPING_PTR(key, CYAML_FLAG_OPTIONAL, st, m, fields)
#define CFG_SEQ(key, st, m, entry) \
    CYAML_FIELD_SEQUENCE(key, CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, st, m, \
                         entry, 0, CYAML_UNLIMITED)

static const cyaml_schema_field_t tls_fields[] = {
    CFG_STR("ca", raw_tls, ca),
    CFG_STR("cert", raw_tls, cert),
    CFG_STR("key", raw_tls, key),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t nats_fields[] = {
    CFG_STR("url", raw_nats, url),
    CFG_STR("creds", raw_nats, creds),
    CFG_MAP("tls", raw_nats, tls, tls_fields),
    CFG_STR("user", raw_nats, user),
    CFG_STR("password", raw_nats, password),
    CFG_STR("nkey", raw_nats, nkey),
    CFG_STR("nkey_seed", raw_nats, nkey_seed),
    CFG_STR("inbox_prefix", raw_nats, inbox_prefix),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t subjects_fields[] = {
    CFG_STR("submit", raw_subjects, submit),
    CFG_STR("dispatch", raw_subjects, dispatch),
    CFG_STR("done", raw_subjects, done),
    CFG_STR("rejected", raw_subjects, rejected),
    CFG_STR("admin", raw_subjects, admin),
    CFG_STR("runs", raw_subjects, runs),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t streams_fields[] = {
    CFG_STR("submit", raw_streams, submit),
    CFG_STR("dispatch", raw_streams, dispatch),
    CFG_STR("done", raw_streams, done),
    CFG_STR("rejected", raw_streams, rejected),
    CFG_STR("runs", raw_streams, runs),
    CFG_STR("durable", raw_streams, durable),
    CFG_STR("lease_bucket", raw_streams, lease_bucket),
    CFG_STR("tenants_bucket", raw_streams, tenants_bucket),
    CFG_STR("replicas", raw_streams, replicas),
    CFG_STR("duplicate_window_ms", raw_streams, duplicate_window_ms),
    CFG_STR("dispatch_max_age_ms", raw_streams, dispatch_max_age_ms),
    CFG_STR("rejected_max_age_ms", raw_streams, rejected_max_age_ms),
    CFG_STR("submit_max_msgs_per_tenant", raw_streams, submit_max_msgs_per_tenant),
    CFG_STR("submit_max_bytes", raw_streams, submit_max_bytes),
    CFG_STR("rejected_max_msgs_per_tenant", raw_streams, rejected_max_msgs_per_tenant),
    CFG_STR("rejected_max_bytes", raw_streams, rejected_max_bytes),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t scheduler_fields[] = {
    CFG_STR("quantum_tokens", raw_scheduler, quantum_tokens),
    CFG_STR("default_plan", raw_scheduler, default_plan),
    CFG_STR("unknown_tenants", raw_scheduler, unknown_tenants),
    CFG_STR("max_est_tokens", raw_scheduler, max_est_tokens),
    CFG_STR("max_wait_ms", raw_scheduler, max_wait_ms),
    CFG_STR("debt_forget_ms", raw_scheduler, debt_forget_ms),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t window_fields[] = {
    CFG_STR("max_in_flight", raw_window, max_in_flight),
    CFG_STR("max_in_flight_tokens", raw_window, max_in_flight_tokens),
    CFG_STR("run_timeout_ms", raw_window, run_timeout_ms),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t limits_fields[] = {
    CFG_STR("max_buffered_runs", raw_limits, max_buffered_runs),
    CFG_STR("max_buffered_bytes", raw_limits, max_buffered_bytes),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t plan_fields[] = {
    CFG_STR("name", raw_plan, name),
    CFG_STR("weight", raw_plan, weight),
    CFG_STR("max_in_flight", raw_plan, max_in_flight),
    CFG_STR("max_pending", raw_plan, max_pending),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t plan_entry = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, raw_plan, plan_fields),
};

static const cyaml_schema_field_t tenant_fields[] = {
    CFG_STR("id", raw_tenant, id),
    CFG_STR("plan", raw_tenant, plan),
    CFG_STR("weight", raw_tenant, weight),
    CFG_STR("max_in_flight", raw_tenant, max_in_flight),
    CFG_STR("max_pending", raw_tenant, max_pending),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t tenant_entry = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, raw_tenant, tenant_fields),
};

static const cyaml_schema_field_t workflow_fields[] = {
    CFG_STR("name", raw_workflow, name),
    CFG_STR("tokens", raw_workflow, tokens),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t workflow_entry = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, raw_workflow, workflow_fields),
};

static const cyaml_schema_field_t estimates_fields[] = {
    CFG_STR("default_tokens", raw_estimates, default_tokens),
    CFG_SEQ("workflows", raw_estimates, workflows, &workflow_entry),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t http_fields[] = {
    CFG_STR("listen", raw_http, listen),
    CFG_STR("probe_listen", raw_http, probe_listen),
    CFG_STR("max_tenant_series", raw_http, max_tenant_series),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t log_fields[] = {
    CFG_STR("level", raw_log, level),
    CFG_STR("format", raw_log, format),
    CFG_STR("queue_age_warn_ms", raw_log, queue_age_warn_ms),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t config_fields[] = {
    CFG_MAP("nats", raw_config, nats, nats_fields),
    CFG_MAP("subjects", raw_config, subjects, subjects_fields),
    CFG_MAP("streams", raw_config, streams, streams_fields),
    CFG_MAP("scheduler", raw_config, scheduler, scheduler_fields),
    CFG_MAP("window", raw_config, window, window_fields),
    CFG_MAP("limits", raw_config, limits, limits_fields),
    CFG_SEQ("plans", raw_config, plans, &plan_entry),
    CFG_SEQ("tenants", raw_config, tenants, &tenant_entry),
    CFG_MAP("estimates", raw_config, estimates, estimates_fields),
    CFG_MAP("http", raw_config, http, http_fields),
    CFG_MAP("log", raw_config, log, log_fields),
    CYAML_FIELD_END
};

static const cyaml_schema_value_t config_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, raw_config, config_fields),
};

/* ---- Error messages that name file, line, column and key path ---- */

/* Where a config comes from, and where its errors go. */
typedef struct cfg_ctx {
    const char *name;           /* file name, for messages */
    const char *yaml;           /* the source, to locate keys in */
    size_t len;
    char *err;                  /* the one error message */
    size_t errlen;
} cfg_ctx;

/* Write "name:line:col: path: reason" (parts that are unknown left out). */
static void cfg_message(const cfg_ctx *v, const char *path, size_t line,
                        size_t col, const char *reason)
{
    fq_yerr_message(v->err, v->errlen, v->name, line, col, path, reason);
}

/* Report an error at prefix.key (either may be NULL). Returns FQ_EINVAL. */
static fq_status cfg_fail(const cfg_ctx *v, const char *prefix, const char *key,
                          const char *fmt, ...)
{
    char path[FQ_YERR_PATH_MAX], reason[512];
    size_t line = 0, col = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "%s%s%s", prefix ? prefix : "",
             prefix && key ? "." : "", key ? key : "");
    if (!fq_yerr_locate(v->yaml, v->len, path, NULL, 1, &line, &col))
        line = col = 0;
    cfg_message(v, path, line, col, reason);
    return FQ_EINVAL;
}

/* The mapping fields of the schema at path, or NULL. */
static const cyaml_schema_field_t *cfg_schema_at(const char *path)
{
    fq_yerr_step st[FQ_YERR_STEPS];
    size_t n = fq_yerr_steps(st, path, FQ_YERR_STEPS);
    const cyaml_schema_value_t *val = &config_schema;
    for (size_t i = 0; i < n && val; i++) {
        if (!st[i].key) {
            val = val->type == CYAML_SEQUENCE ? val->sequence.entry : NULL;
            continue;
        }
        const cyaml_schema_field_t *f = val->type == CYAML_MAPPING ? val->mapping.fields : NULL;
        while (f && f->key && (strlen(f->key) != st[i].klen ||
                               memcmp(f->key, st[i].key, st[i].klen) != 0))
            f++;
        val = f && f->key ? &f->value : NULL;
    }
    return val && val->type == CYAML_MAPPING ? val->mapping.fields : NULL;
}

/* libcyaml's names for what it expected and what it found, in words. */
static const char *cfg_kind(const char *what)
{
    if (strncmp(what, "MAPPING", 7) == 0)
        return "a mapping";
    if (strncmp(what, "SEQUENCE", 8) == 0)
        return "a list";
    return "a single value";
}

/* Check that the source is well-formed YAML and one document, before
 * libcyaml reads it: libyaml places a syntax error exactly, where libcyaml
 * only names the enclosing key, and libcyaml would silently ignore every
 * document after the first. */
static fq_status cfg_scan(const cfg_ctx *v)
{
    yaml_parser_t p;
    yaml_event_t e;
    unsigned docs = 0;
    fq_status s = FQ_OK;
    if (!yaml_parser_initialize(&p))
        return FQ_ENOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)v->yaml, v->len);
    for (;;) {
        if (!yaml_parser_parse(&p, &e)) {
            char reason[256];
            snprintf(reason, sizeof(reason), "YAML syntax: %s%s%s",
                     p.problem ? p.problem : "invalid document",
                     p.context ? " " : "", p.context ? p.context : "");
            cfg_message(v, NULL, p.problem_mark.line + 1, p.problem_mark.column + 1,
                        reason);
            s = FQ_EINVAL;
            break;
        }
        yaml_event_type_t t = e.type;
        yaml_mark_t m = e.start_mark;
        yaml_event_delete(&e);
        if (t == YAML_DOCUMENT_START_EVENT && ++docs == 2) {
            cfg_message(v, NULL, m.line + 1, m.column + 1,
                        "a second YAML document: the config is one document");
            s = FQ_EINVAL;
            break;
        }
        if (t == YAML_STREAM_END_EVENT || t == YAML_NO_EVENT)
            break;
    }
    yaml_parser_delete(&p);
    return s;
}

/* Turn what libcyaml logged into one message in v->err. */
static void cfg_load_error(const cfg_ctx *v, const fq_yerr_log *l, cyaml_err_t err)
{
    char path[FQ_YERR_PATH_MAX], reason[512], key[256], expected[32], got[32];
    size_t line, col;
    bool twice = strncmp(l->reason, "Mapping field already seen", 26) == 0;
    fq_yerr_place(l, v->yaml, v->len, twice ? 2 : 1, path, sizeof(path), key, sizeof(key),
                  &line, &col);
    if (key[0]) {
        char known[384] = "";
        size_t k = 0;
        char at[FQ_YERR_PATH_MAX];          /* the mapping the key is unknown in */
        size_t plen = strlen(path) - strlen(key);
        snprintf(at, sizeof(at), "%.*s", (int)(plen ? plen - 1 : 0), path);
        const cyaml_schema_field_t *f = cfg_schema_at(at);
        for (; f && f->key && k < sizeof(known); f++)
            k += snprintf(known + k, sizeof(known) - k, "%s%s", k ? ", " : "", f->key);
        snprintf(reason, sizeof(reason), "unknown key (known here: %s)", known);
    } else if (twice) {
        snprintf(reason, sizeof(reason), "key given twice");
    } else if (sscanf(l->reason, "Expecting %31s got event: %31s", expected, got) == 2) {
        snprintf(reason, sizeof(reason), "expected %s, got %s",
                 cfg_kind(expected), cfg_kind(got));
    } else if (err == CYAML_ERR_ALIAS) {
        snprintf(reason, sizeof(reason), "YAML aliases (*name) are not supported");
    } else {
        snprintf(reason, sizeof(reason), "%s",
                 l->reason[0] ? l->reason : cyaml_strerror(err));
    }
    cfg_message(v, path, line, col, reason);
}

/* ---- Validation and defaults ---- */

#define CFG_IFOK(s, call) do { if ((s) == FQ_OK) (s) = (call); } while (0)

/* s, if given, as a decimal whole number in [min, max] (digits, '_' allowed
 * between them as in YAML); absent leaves *out, the default. */
static fq_status cfg_u64(const cfg_ctx *v, const char *prefix, const char *key,
                         const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (!s)
        return FQ_OK;
    uint64_t n = 0;
    bool ok = *s >= '0' && *s <= '9' && !(s[0] == '0' && s[1]);
    for (const char *c = s; ok && *c; c++) {
        if (*c == '_' && c[1] >= '0' && c[1] <= '9')
            continue;
        if (*c < '0' || *c > '9' || n > (UINT64_MAX - (uint64_t)(*c - '0')) / 10) {
            ok = false;
            break;
        }
        n = n * 10 + (uint64_t)(*c - '0');
    }
    if (!ok)
        return cfg_fail(v, prefix, key, "'%s' is not a whole number (digits only, "
                        "no sign, fraction or leading zero)", s);
    if (n < min)
        return cfg_fail(v, prefix, key, "must be >= %llu", (unsigned long long)min);
    if (n > max)
        return cfg_fail(v, prefix, key, "must be <= %llu", (unsigned long long)max);
    *out = n;
    return FQ_OK;
}

static fq_status cfg_u32(const cfg_ctx *v, const char *prefix, const char *key,
                         const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t n = *out;
    fq_status st = cfg_u64(v, prefix, key, s, min, max, &n);
    *out = (uint32_t)n;
    return st;
}

/* A copy of s, or of def when s is absent; "" is stored as NULL when
 * empty_is_none (an optional path). */
static fq_status cfg_str(const char *s, const char *def, bool empty_is_none, char **out)
{
    if (!s)
        s = def;
    if (!s || (empty_is_none && !*s)) {
        *out = NULL;
        return FQ_OK;
    }
    *out = strdup(s);
    return *out ? FQ_OK : FQ_ENOMEM;
}

/* s as the index of one of the words (NULL-terminated), or def if absent. */
static fq_status cfg_word(const cfg_ctx *v, const char *prefix, const char *key,
                          const char *s, const char *const *words, int *out)
{
    if (!s)
        return FQ_OK;
    char list[128] = "";
    size_t k = 0;
    for (int i = 0; words[i]; i++) {
        if (strcmp(s, words[i]) == 0) {
            *out = i;
            return FQ_OK;
        }
        k += snprintf(list + k, sizeof(list) - k, "%s%s", i ? ", " : "", words[i]);
    }
    return cfg_fail(v, prefix, key, "'%s' is not one of: %s", s, list);
}

/* A plan name, or with tenant set a tenant id, which may not be one of the
 * names fairq reserves. */
static fq_status cfg_name(const cfg_ctx *v, const char *prefix, const char *key,
                          const char *s, bool tenant, char out[FQ_TENANT_MAX + 1])
{
    if (!s)
        return cfg_fail(v, prefix, key, "required");
    if (!fq_name_valid(s, strlen(s)))
        return cfg_fail(v, prefix, key, "'%s' must be 1 to %d of A-Z a-z 0-9 _ -",
                        s, FQ_TENANT_MAX);
    if (tenant && fq_tenant_id_reserved(s, strlen(s)))
        return cfg_fail(v, prefix, key, "'%s' is reserved: fairq uses " FQ_TENANT_INVALID
                        " and " FQ_TENANT_OTHER " for runs without a tenant and for metrics "
                        "past the series limit", s);
    memcpy(out, s, strlen(s) + 1);
    return FQ_OK;
}

/* A NATS subject that fairq publishes or listens on: dot-separated tokens,
 * none empty, no wildcards, no white space. */
static bool cfg_subject_valid(const char *s)
{
    bool token_start = true;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '.') {
            if (token_start)
                return false;
            token_start = true;
            continue;
        }
        if (ch <= ' ' || ch == 0x7f || ch == '*' || ch == '>')
            return false;
        token_start = false;
    }
    return !token_start;
}

/* True if subject is prefix + "." + one token: a tenant subject under prefix. */
static bool cfg_subject_under(const char *subject, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(subject, prefix, n) == 0 && subject[n] == '.' &&
           !strchr(subject + n + 1, '.');
}

/* host:port with a port of 1 to 65535, or "" (disabled). */
static bool cfg_listen_valid(const char *s)
{
    const char *colon = strrchr(s, ':');
    if (!*s)
        return true;
    if (!colon || colon == s || !colon[1] || strlen(colon + 1) > 5 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return false;
    long port = strtol(colon + 1, NULL, 10);
    return port >= 1 && port <= 65535 && !strpbrk(s, " \t");
}

static fq_status cfg_nats(fq_config *c, const raw_nats *r, const cfg_ctx *v)
{
    const raw_tls *t = r->tls ? r->tls : &(raw_tls){0};
    fq_status s = FQ_OK;
    if (!r->url || !*r->url)
        return cfg_fail(v, "nats", "url", "required (e.g. nats://127.0.0.1:4222)");
    if (strpbrk(r->url, "\t\r\n"))
        return cfg_fail(v, "nats", "url", "must be on one line, without tabs");
    bool cert = t->cert && *t->cert, key = t->key && *t->key;
    if (cert != key)
        return cfg_fail(v, "nats.tls", cert ? "key" : "cert",
                        "required with nats.tls.%s: cert and key go together",
                        cert ? "cert" : "key");
    bool user = r->user && *r->user, password = r->password && *r->password;
    if (user != password)
        return cfg_fail(v, "nats", user ? "password" : "user",
                        "required with nats.%s: user and password go together",
                        user ? "user" : "password");
    bool nkey = r->nkey && *r->nkey, seed = r->nkey_seed && *r->nkey_seed;
    if (nkey != seed)
        return cfg_fail(v, "nats", nkey ? "nkey_seed" : "nkey",
                        "required with nats.%s: the public key and its seed file go together",
                        nkey ? "nkey" : "nkey_seed");
    if (nkey && (strlen(r->nkey) != 56 || r->nkey[0] != 'U' ||
                 strspn(r->nkey, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != 56))
        return cfg_fail(v, "nats", "nkey", "not a user's public nkey: 56 characters of base32"
                        " beginning with U (the seed, SU..., goes in a file named by nkey_seed)");
    if ((r->creds && *r->creds) + user + nkey > 1)
        return cfg_fail(v, "nats", user ? "user" : "nkey",
                        "one way to authenticate: creds, user and password, or nkey");
    const char *inbox = r->inbox_prefix ? r->inbox_prefix : FQ_INBOX_PREFIX;
    if (!cfg_subject_valid(inbox) || strlen(inbox) > 64)
        return cfg_fail(v, "nats", "inbox_prefix", "'%s' is not an inbox prefix: 1 to 64"
                        " characters of dot-separated tokens, none empty, without white space"
                        " or wildcards", inbox);
    CFG_IFOK(s, cfg_str(r->url, NULL, false, &c->nats.url));
    CFG_IFOK(s, cfg_str(r->creds, NULL, true, &c->nats.creds));
    CFG_IFOK(s, cfg_str(r->user, NULL, true, &c->nats.user));
    CFG_IFOK(s, cfg_str(r->password, NULL, true, &c->nats.password));
    CFG_IFOK(s, cfg_str(r->nkey, NULL, true, &c->nats.nkey));
    CFG_IFOK(s, cfg_str(r->nkey_seed, NULL, true, &c->nats.nkey_seed));
    CFG_IFOK(s, cfg_str(inbox, NULL, false, &c->nats.inbox_prefix));
    CFG_IFOK(s, cfg_str(t->ca, NULL, true, &c->nats.tls_ca));
    CFG_IFOK(s, cfg_str(t->cert, NULL, true, &c->nats.tls_cert));
    CFG_IFOK(s, cfg_str(t->key, NULL, true, &c->nats.tls_key));
    return s;
}

static fq_status cfg_subjects(fq_config *c, const raw_subjects *r, const cfg_ctx *v)
{
    static const char *const keys[] = {"submit", "dispatch", "done", "rejected", "admin",
                                       "runs"};
    const char *given[] = {r->submit, r->dispatch, r->done, r->rejected, r->admin, r->runs};
    const char *defs[] = {FQ_SUBJECT_SUBMIT, FQ_SUBJECT_DISPATCH, FQ_SUBJECT_DONE,
                          FQ_SUBJECT_REJECTED, FQ_SUBJECT_ADMIN, FQ_SUBJECT_RUNS};
    char **out[] = {&c->subjects.submit, &c->subjects.dispatch, &c->subjects.done,
                    &c->subjects.rejected, &c->subjects.admin, &c->subjects.runs};
    const size_t n = sizeof(keys) / sizeof(keys[0]);
    fq_status s = FQ_OK;
    for (size_t i = 0; i < n && s == FQ_OK; i++) {
        const char *subj = given[i] ? given[i] : defs[i];
        if (!cfg_subject_valid(subj))
            return cfg_fail(v, "subjects", keys[i], "'%s' is not a subject: dot-separated"
                            " tokens, none empty, without white space or wildcards", subj);
        for (size_t j = 0; j < i; j++)
            if (strcmp(subj, *out[j]) == 0)
                return cfg_fail(v, "subjects", keys[i], "'%s' is subjects.%s already",
                                subj, keys[j]);
        s = cfg_str(subj, NULL, false, out[i]);
    }
    /* The dispatch and journal streams must not overlap the per-tenant
     * streams (submit, done, rejected: indexes 0, 2, 3). */
    static const size_t single[] = {1, 5}, tenant[] = {0, 2, 3};
    for (size_t i = 0; i < 2 && s == FQ_OK; i++)
        for (size_t j = 0; j < 3; j++)
            if (cfg_subject_under(*out[single[i]], *out[tenant[j]]))
                return cfg_fail(v, "subjects", keys[single[i]], "'%s' falls under "
                                "subjects.%s.*", *out[single[i]], keys[tenant[j]]);
    return s;
}

/* A stream or consumer name as JetStream takes it: 1 to FQ_CONFIG_NAME_MAX
 * printable characters, none of them white space, '.', '*', '>' (they
 * would break the API subjects the name goes into) or a path separator
 * (the server makes a directory of it). */
static bool cfg_stream_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > FQ_CONFIG_NAME_MAX)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f || strchr(".*>/\\", *s))
            return false;
    return true;
}

static fq_status cfg_streams(fq_config *c, const raw_streams *r, const cfg_ctx *v)
{
    /* The names in file order, each of a kind: a stream, the durable
     * consumer, a bucket. Two streams (or buckets) of one name would be one
     * with two sets of settings. */
    enum { STREAM, DURABLE, BUCKET };
    static const char *const keys[] = {"submit", "dispatch", "done", "rejected", "runs",
                                       "durable", "lease_bucket", "tenants_bucket"};
    static const int kind[] = {STREAM, STREAM, STREAM, STREAM, STREAM, DURABLE, BUCKET,
                               BUCKET};
    static const char *const defs[] = {
        FQ_DEFAULT_STREAM_SUBMIT, FQ_DEFAULT_STREAM_DISPATCH, FQ_DEFAULT_STREAM_DONE,
        FQ_DEFAULT_STREAM_REJECTED, FQ_DEFAULT_STREAM_RUNS, FQ_DEFAULT_DURABLE,
        FQ_DEFAULT_LEASE_BUCKET, FQ_DEFAULT_TENANTS_BUCKET};
    const char *given[] = {r->submit, r->dispatch, r->done, r->rejected, r->runs,
                           r->durable, r->lease_bucket, r->tenants_bucket};
    char **out[] = {&c->streams.submit, &c->streams.dispatch, &c->streams.done,
                    &c->streams.rejected, &c->streams.runs, &c->streams.durable,
                    &c->streams.lease_bucket, &c->streams.tenants_bucket};
    fq_status s = FQ_OK;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && s == FQ_OK; i++) {
        const char *name = given[i] ? given[i] : defs[i];
        if (kind[i] != BUCKET && !cfg_stream_name_valid(name))
            return cfg_fail(v, "streams", keys[i], "'%s' is not a JetStream name: 1 to %d "
                            "printable characters without white space, '.', '*', '>', "
                            "'/' or '\\'", name, FQ_CONFIG_NAME_MAX);
        if (kind[i] == BUCKET && !fq_name_valid(name, strlen(name)))
            return cfg_fail(v, "streams", keys[i], "'%s' is not a bucket name: 1 to 64 of "
                            "[A-Za-z0-9_-]", name);
        for (size_t j = 0; j < i; j++)
            if (kind[j] == kind[i] && kind[i] != DURABLE && strcmp(name, *out[j]) == 0)
                return cfg_fail(v, "streams", keys[i], "'%s' is streams.%s already",
                                name, keys[j]);
        s = cfg_str(name, NULL, false, out[i]);
    }
    c->streams.replicas = 1;
    c->streams.duplicate_window_ms = FQ_DEFAULT_DUPLICATE_WINDOW_MS;
    c->streams.rejected_max_age_ms = FQ_DEFAULT_REJECTED_MAX_AGE_MS;
    c->streams.dispatch_max_age_ms = 0;     /* cfg_build fills it in from the window */
    CFG_IFOK(s, cfg_u32(v, "streams", "replicas", r->replicas, 1, 5, &c->streams.replicas));
    CFG_IFOK(s, cfg_u64(v, "streams", "duplicate_window_ms", r->duplicate_window_ms, 1000,
                        FQ_MAX_DUPLICATE_WINDOW_MS, &c->streams.duplicate_window_ms));
    CFG_IFOK(s, cfg_u64(v, "streams", "dispatch_max_age_ms", r->dispatch_max_age_ms, 1000,
                        FQ_CONFIG_MAX_MS, &c->streams.dispatch_max_age_ms));
    /* protocol.md, "Why FAIR_DISPATCH is not a work queue": after a server
     * restart, de-duplication knows only the ids of the messages the stream
     * still holds, so it must hold them for the whole window. */
    if (s == FQ_OK && r->dispatch_max_age_ms &&
        c->streams.dispatch_max_age_ms < c->streams.duplicate_window_ms)
        return cfg_fail(v, "streams", "dispatch_max_age_ms", "must be >= "
                        "streams.duplicate_window_ms (%llu): after a server restart only "
                        "the messages still held de-duplicate a retried dispatch",
                        (unsigned long long)c->streams.duplicate_window_ms);
    CFG_IFOK(s, cfg_u64(v, "streams", "rejected_max_age_ms", r->rejected_max_age_ms, 1000,
                        FQ_CONFIG_MAX_MS, &c->streams.rejected_max_age_ms));
    /* Storage limits (0: none), as JetStream takes them: signed 64 bits. */
    c->streams.submit_max_msgs_per_tenant = FQ_DEFAULT_SUBMIT_MAX_MSGS_PER_TENANT;
    c->streams.submit_max_bytes = FQ_DEFAULT_SUBMIT_MAX_BYTES;
    c->streams.rejected_max_msgs_per_tenant = FQ_DEFAULT_REJECTED_MAX_MSGS_PER_TENANT;
    c->streams.rejected_max_bytes = FQ_DEFAULT_REJECTED_MAX_BYTES;
    CFG_IFOK(s, cfg_u64(v, "streams", "submit_max_msgs_per_tenant",
                        r->submit_max_msgs_per_tenant, 0, INT64_MAX,
                        &c->streams.submit_max_msgs_per_tenant));
    CFG_IFOK(s, cfg_u64(v, "streams", "submit_max_bytes", r->submit_max_bytes, 0, INT64_MAX,
                        &c->streams.submit_max_bytes));
    CFG_IFOK(s, cfg_u64(v, "streams", "rejected_max_msgs_per_tenant",
                        r->rejected_max_msgs_per_tenant, 0, INT64_MAX,
                        &c->streams.rejected_max_msgs_per_tenant));
    CFG_IFOK(s, cfg_u64(v, "streams", "rejected_max_bytes", r->rejected_max_bytes, 0,
                        INT64_MAX, &c->streams.rejected_max_bytes));
    return s;
}

/* FAIR_DISPATCH's default max age: twice the longer of the duplicate window
 * and the run timeout, at least an hour, so that a dispatch outlives both
 * its de-duplication and its lease with room to spare. */
static uint64_t cfg_dispatch_age(const fq_config *c)
{
    uint64_t keep = c->streams.duplicate_window_ms > c->window.run_timeout_ms
                        ? c->streams.duplicate_window_ms : c->window.run_timeout_ms;
    uint64_t age = 2 * keep;
    return age > 3600000 ? age : 3600000;
}

static fq_status cfg_scheduler(fq_config *c, const raw_scheduler *r, const cfg_ctx *v)
{
    static const char *const policies[] = {"admit", "reject", NULL};
    int reject = 0;
    fq_status s = FQ_OK;
    c->scheduler.quantum_tokens = 1000;
    c->scheduler.max_est_tokens = 1000000;
    c->scheduler.max_wait_ms = 0;
    c->scheduler.debt_forget_ms = FQ_DEFAULT_DEBT_FORGET_MS;
    CFG_IFOK(s, cfg_u32(v, "scheduler", "quantum_tokens", r->quantum_tokens, 1,
                        FQ_POLICY_MAX_QUANTUM, &c->scheduler.quantum_tokens));
    CFG_IFOK(s, cfg_word(v, "scheduler", "unknown_tenants", r->unknown_tenants,
                         policies, &reject));
    CFG_IFOK(s, cfg_u32(v, "scheduler", "max_est_tokens", r->max_est_tokens, 1,
                        UINT32_MAX, &c->scheduler.max_est_tokens));
    CFG_IFOK(s, cfg_u64(v, "scheduler", "max_wait_ms", r->max_wait_ms, 0,
                        FQ_CONFIG_MAX_MS, &c->scheduler.max_wait_ms));
    CFG_IFOK(s, cfg_u64(v, "scheduler", "debt_forget_ms", r->debt_forget_ms, 1000,
                        FQ_CONFIG_MAX_MS, &c->scheduler.debt_forget_ms));
    if (s == FQ_OK && !r->default_plan)
        return cfg_fail(v, "scheduler", "default_plan", "required (the plan of "
                        "tenants that are not listed)");
    CFG_IFOK(s, cfg_str(r->default_plan, NULL, false, &c->scheduler.default_plan));
    c->scheduler.reject_unknown = reject == 1;
    return s;
}

static fq_status cfg_window(fq_config *c, const raw_window *r, const cfg_ctx *v)
{
    fq_status s = FQ_OK;
    c->window.max_in_flight = 64;
    c->window.max_in_flight_tokens = 0;
    c->window.run_timeout_ms = 600000;
    CFG_IFOK(s, cfg_u32(v, "window", "max_in_flight", r->max_in_flight, 1,
                        UINT32_MAX, &c->window.max_in_flight));
    CFG_IFOK(s, cfg_u64(v, "window", "max_in_flight_tokens", r->max_in_flight_tokens,
                        0, UINT64_MAX, &c->window.max_in_flight_tokens));
    CFG_IFOK(s, cfg_u64(v, "window", "run_timeout_ms", r->run_timeout_ms, 1,
                        FQ_CONFIG_MAX_MS, &c->window.run_timeout_ms));
    return s;
}

static fq_status cfg_limits(fq_config *c, const raw_limits *r, const cfg_ctx *v)
{
    fq_status s = FQ_OK;
    c->limits.max_buffered_runs = 1000000;
    c->limits.max_buffered_bytes = 256u << 20;
    CFG_IFOK(s, cfg_u64(v, "limits", "max_buffered_runs", r->max_buffered_runs, 1,
                        UINT64_MAX, &c->limits.max_buffered_runs));
    CFG_IFOK(s, cfg_u64(v, "limits", "max_buffered_bytes", r->max_buffered_bytes, 1,
                        UINT64_MAX, &c->limits.max_buffered_bytes));
    return s;
}

/* weight, max_in_flight and max_pending at prefix: a plan and a tenant entry
 * carry the same three, with the same ranges. Absent leaves the default. */
static fq_status cfg_caps(const cfg_ctx *v, const char *prefix, const char *weight,
                          const char *max_in_flight, const char *max_pending,
                          uint32_t *w, uint32_t *mif, uint32_t *mp)
{
    fq_status s = cfg_u32(v, prefix, "weight", weight, 1, FQ_POLICY_MAX_WEIGHT, w);
    CFG_IFOK(s, cfg_u32(v, prefix, "max_in_flight", max_in_flight, 1, UINT32_MAX, mif));
    CFG_IFOK(s, cfg_u32(v, prefix, "max_pending", max_pending, 1, UINT32_MAX, mp));
    return s;
}

/* Report the first name given twice among n entries of a sequence, each
 * entry `stride` bytes with its name a char * at `off`. */
typedef struct cfg_named {
    const char *name;
    size_t index;
} cfg_named;

static int cfg_named_cmp(const void *a, const void *b)
{
    const cfg_named *x = a, *y = b;
    int d = strcmp(x->name, y->name);
    return d ? d : (x->index > y->index) - (x->index < y->index);
}

static fq_status cfg_unique(const cfg_ctx *v, const char *seq, const char *field,
                            const void *base, size_t n, size_t stride, size_t off)
{
    if (n < 2)
        return FQ_OK;
    cfg_named *all = malloc(n * sizeof(*all));
    if (!all)
        return FQ_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        memcpy(&all[i].name, (const char *)base + i * stride + off, sizeof(char *));
        all[i].index = i;
    }
    qsort(all, n, sizeof(*all), cfg_named_cmp);
    fq_status s = FQ_OK;
    for (size_t i = 1; i < n && s == FQ_OK; i++) {
        if (strcmp(all[i].name, all[i - 1].name) != 0)
            continue;
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "%s[%zu]", seq, all[i].index);
        s = cfg_fail(v, prefix, field, "'%s' given twice (first at %s[%zu])",
                     all[i].name, seq, all[i - 1].index);
    }
    free(all);
    return s;
}

static fq_status cfg_plans(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    if (!r->plans || r->plans_count == 0)
        return cfg_fail(v, NULL, "plans", "required: at least one plan "
                        "(- name: free, weight: 1)");
    c->plans = calloc(r->plans_count, sizeof(*c->plans));
    if (!c->plans)
        return FQ_ENOMEM;
    c->n_plans = r->plans_count;
    fq_status s = FQ_OK;
    for (size_t i = 0; i < r->plans_count && s == FQ_OK; i++) {
        const raw_plan *rp = &r->plans[i];
        fq_plan *p = &c->plans[i];
        char at[32];
        snprintf(at, sizeof(at), "plans[%zu]", i);
        p->weight = 1;
        CFG_IFOK(s, cfg_name(v, at, "name", rp->name, false, p->name));
        CFG_IFOK(s, cfg_caps(v, at, rp->weight, rp->max_in_flight, rp->max_pending,
                             &p->weight, &p->max_in_flight, &p->max_pending));
    }
    CFG_IFOK(s, cfg_unique(v, "plans", "name", r->plans, r->plans_count,
                           sizeof(raw_plan), offsetof(raw_plan, name)));
    return s;
}

/* The index of the plan named name, or -1. Plans are few; tenants check
 * theirs once each, at load. */
static long cfg_plan_index(const fq_config *c, const char *name)
{
    for (size_t i = 0; i < c->n_plans; i++)
        if (strcmp(c->plans[i].name, name) == 0)
            return (long)i;
    return -1;
}

static fq_status cfg_tenants(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    if (r->tenants_count == 0)
        return FQ_OK;
    c->tenants = calloc(r->tenants_count, sizeof(*c->tenants));
    if (!c->tenants)
        return FQ_ENOMEM;
    c->n_tenants = r->tenants_count;
    fq_status s = FQ_OK;
    for (size_t i = 0; i < r->tenants_count && s == FQ_OK; i++) {
        const raw_tenant *rt = &r->tenants[i];
        fq_tenant_entry *t = &c->tenants[i];
        char at[32];
        snprintf(at, sizeof(at), "tenants[%zu]", i);
        CFG_IFOK(s, cfg_name(v, at, "id", rt->id, true, t->id));
        if (s == FQ_OK && rt->plan) {
            if (cfg_plan_index(c, rt->plan) < 0)
                return cfg_fail(v, at, "plan", "no plan named '%s' in plans", rt->plan);
            memcpy(t->plan, rt->plan, strlen(rt->plan) + 1);   /* a plan's name fits */
        }
        CFG_IFOK(s, cfg_caps(v, at, rt->weight, rt->max_in_flight, rt->max_pending,
                             &t->weight, &t->max_in_flight, &t->max_pending));
    }
    CFG_IFOK(s, cfg_unique(v, "tenants", "id", r->tenants, r->tenants_count,
                           sizeof(raw_tenant), offsetof(raw_tenant, id)));
    return s;
}

static fq_status cfg_estimates(fq_config *c, const raw_estimates *r, const cfg_ctx *v)
{
    uint32_t max = c->scheduler.max_est_tokens;
    fq_status s = FQ_OK;
    c->estimates.default_tokens = max < 1000 ? max : 1000;
    CFG_IFOK(s, cfg_u32(v, "estimates", "default_tokens", r->default_tokens, 1, max,
                        &c->estimates.default_tokens));
    if (s != FQ_OK || r->workflows_count == 0)
        return s;
    c->estimates.workflows = calloc(r->workflows_count, sizeof(*c->estimates.workflows));
    if (!c->estimates.workflows)
        return FQ_ENOMEM;
    c->estimates.n_workflows = r->workflows_count;
    for (size_t i = 0; i < r->workflows_count && s == FQ_OK; i++) {
        const raw_workflow *rw = &r->workflows[i];
        fq_workflow_default *w = &c->estimates.workflows[i];
        char at[48];
        snprintf(at, sizeof(at), "estimates.workflows[%zu]", i);
        if (!rw->name)
            return cfg_fail(v, at, "name", "required");
        if (!*rw->name || strlen(rw->name) > FQ_WORKFLOW_MAX)
            return cfg_fail(v, at, "name", "must be 1 to %d bytes", FQ_WORKFLOW_MAX);
        memcpy(w->name, rw->name, strlen(rw->name) + 1);
        if (!rw->tokens)
            return cfg_fail(v, at, "tokens", "required");
        s = cfg_u32(v, at, "tokens", rw->tokens, 1, max, &w->tokens);
    }
    CFG_IFOK(s, cfg_unique(v, "estimates.workflows", "name", r->workflows,
                           r->workflows_count, sizeof(raw_workflow),
                           offsetof(raw_workflow, name)));
    return s;
}

static fq_status cfg_misc(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
    static const char *const formats[] = {"logfmt", "json", NULL};
    const raw_http *h = r->http ? r->http : &(raw_http){0};
    const raw_log *l = r->log ? r->log : &(raw_log){0};
    int level = 1, format = 0;
    fq_status s = FQ_OK;
    if (h->listen && !cfg_listen_valid(h->listen))
        return cfg_fail(v, "http", "listen", "'%s' is not host:port (port 1 to "
                        "65535), or \"\" to disable", h->listen);
    if (h->probe_listen && !cfg_listen_valid(h->probe_listen))
        return cfg_fail(v, "http", "probe_listen", "'%s' is not host:port (port 1 to "
                        "65535), or \"\" for none", h->probe_listen);
    c->http.max_tenant_series = FQ_METRICS_MAX_TENANT_SERIES;
    c->log.queue_age_warn_ms = FQ_DEFAULT_QUEUE_AGE_WARN_MS;
    CFG_IFOK(s, cfg_u32(v, "http", "max_tenant_series", h->max_tenant_series, 1,
                        FQ_CONFIG_MAX_TENANT_SERIES, &c->http.max_tenant_series));
    CFG_IFOK(s, cfg_word(v, "log", "level", l->level, levels, &level));
    CFG_IFOK(s, cfg_word(v, "log", "format", l->format, formats, &format));
    CFG_IFOK(s, cfg_u64(v, "log", "queue_age_warn_ms", l->queue_age_warn_ms, 1,
                        FQ_CONFIG_MAX_MS, &c->log.queue_age_warn_ms));
    CFG_IFOK(s, cfg_str(h->listen, "127.0.0.1:9464", false, &c->http.listen));
    CFG_IFOK(s, cfg_str(h->probe_listen, "", false, &c->http.probe_listen));
    CFG_IFOK(s, cfg_str(levels[level], NULL, false, &c->log.level));
    CFG_IFOK(s, cfg_str(formats[format], NULL, false, &c->log.format));
    return s;
}

/* Fill c from r, checking everything; on error c is left for the caller to
 * free. Sections in file order, so that the first error is the first one a
 * reader of the file meets. */
static fq_status cfg_build(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    fq_status s = FQ_OK;
    CFG_IFOK(s, cfg_nats(c, r->nats ? r->nats : &(raw_nats){0}, v));
    CFG_IFOK(s, cfg_subjects(c, r->subjects ? r->subjects : &(raw_subjects){0}, v));
    CFG_IFOK(s, cfg_streams(c, r->streams ? r->streams : &(raw_streams){0}, v));
    CFG_IFOK(s, cfg_scheduler(c, r->scheduler ? r->scheduler : &(raw_scheduler){0}, v));
    CFG_IFOK(s, cfg_window(c, r->window ? r->window : &(raw_window){0}, v));
    if (s == FQ_OK && !c->streams.dispatch_max_age_ms)
        c->streams.dispatch_max_age_ms = cfg_dispatch_age(c);
    CFG_IFOK(s, cfg_limits(c, r->limits ? r->limits : &(raw_limits){0}, v));
    CFG_IFOK(s, cfg_plans(c, r, v));
    if (s == FQ_OK && cfg_plan_index(c, c->scheduler.default_plan) < 0)
        return cfg_fail(v, "scheduler", "default_plan", "no plan named '%s' in plans",
                        c->scheduler.default_plan);
    CFG_IFOK(s, cfg_tenants(c, r, v));
    CFG_IFOK(s, cfg_estimates(c, r->estimates ? r->estimates : &(raw_estimates){0}, v));
    CFG_IFOK(s, cfg_misc(c, r, v));
    return s;
}

fq_status fq_config_parse(fq_config *out, const char *name, const char *yaml,
                          size_t len, char *err, size_t errlen)
{
    cfg_ctx v = {name, yaml, len, err, errlen};
    fq_yerr_log log;
    memset(&log, 0, sizeof(log));
    const cyaml_config_t cy = {
        .log_fn = fq_yerr_log_fn,
        .log_ctx = &log,
        .mem_fn = cyaml_mem,
        .log_level = CYAML_LOG_ERROR,
        .flags = CYAML_CFG_NO_ALIAS,
    };
    raw_config *raw = NULL;
    fq_status s = cfg_scan(&v);
    if (s != FQ_OK)
        return s;
    cyaml_err_t ce = cyaml_load_data((const uint8_t *)yaml, len, &cy, &config_schema,
                                     (cyaml_data_t **)&raw, NULL);
    if (ce == CYAML_ERR_OOM) {
        cfg_message(&v, NULL, 0, 0, "out of memory");
        return FQ_ENOMEM;
    }
    if (ce != CYAML_OK) {
        cfg_load_error(&v, &log, ce);
        return FQ_EINVAL;
    }
    fq_config c;
    memset(&c, 0, sizeof(c));
    s = cfg_build(&c, raw ? raw : &(raw_config){0}, &v);
    if (raw)
        cyaml_free(&cy, &config_schema, raw, 0);
    if (s == FQ_ENOMEM)
        cfg_message(&v, NULL, 0, 0, "out of memory");
    if (s != FQ_OK) {
        fq_config_free(&c);
        return s;
    }
    *out = c;
    return FQ_OK;
}

fq_status fq_config_load(fq_config *out, const char *path, char *err, size_t errlen)
{
    cfg_ctx v = {path, NULL, 0, err, errlen};
    FILE *f = fopen(path, "rb");
    if (!f) {
        cfg_message(&v, NULL, 0, 0, strerror(errno));
        return FQ_EIO;
    }
    char *buf = malloc(FQ_CONFIG_MAX_BYTES + 1);
    size_t len = buf ? fread(buf, 1, FQ_CONFIG_MAX_BYTES + 1, f) : 0;
    fq_status s = FQ_OK;
    if (!buf) {
        s = FQ_ENOMEM;
        cfg_message(&v, NULL, 0, 0, "out of memory");
    } else if (ferror(f)) {
        s = FQ_EIO;
        cfg_message(&v, NULL, 0, 0, strerror(errno));
    } else if (len > FQ_CONFIG_MAX_BYTES) {
        s = FQ_EINVAL;
        cfg_message(&v, NULL, 0, 0, "larger than 16 MiB: not a config file?");
    }
    fclose(f);
    if (s == FQ_OK)
        s = fq_config_parse(out, path, buf, len, err, errlen);
    free(buf);
    return s;
}

/* Every string of a config, as offsets: what free and copy walk. */
static const size_t cfg_strings[] = {
    offsetof(fq_config, nats.url), offsetof(fq_config, nats.creds),
    offsetof(fq_config, nats.tls_ca), offsetof(fq_config, nats.tls_cert),
    offsetof(fq_config, nats.tls_key), offsetof(fq_config, nats.user),
    offsetof(fq_config, nats.password), offsetof(fq_config, nats.nkey),
    offsetof(fq_config, nats.nkey_seed), offsetof(fq_config, nats.inbox_prefix),
    offsetof(fq_config, subjects.submit),
    offsetof(fq_config, subjects.dispatch), offsetof(fq_config, subjects.done),
    offsetof(fq_config, subjects.rejected), offsetof(fq_config, subjects.admin),
    offsetof(fq_config, subjects.runs), offsetof(fq_config, streams.submit),
    offsetof(fq_config, streams.dispatch), offsetof(fq_config, streams.done),
    offsetof(fq_config, streams.rejected), offsetof(fq_config, streams.runs),
    offsetof(fq_config, streams.durable), offsetof(fq_config, streams.lease_bucket),
    offsetof(fq_config, streams.tenants_bucket), offsetof(fq_config, scheduler.default_plan),
    offsetof(fq_config, http.listen), offsetof(fq_config, http.probe_listen),
    offsetof(fq_config, log.level),
    offsetof(fq_config, log.format),
};
#define CFG_N_STRINGS (sizeof(cfg_strings) / sizeof(cfg_strings[0]))

static char **cfg_string_at(fq_config *c, size_t i)
{
    return (char **)(void *)((char *)c + cfg_strings[i]);
}

void fq_config_free(fq_config *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < CFG_N_STRINGS; i++)
        free(*cfg_string_at(c, i));
    free(c->estimates.workflows);
    free(c->tenants);
    free(c->plans);
    memset(c, 0, sizeof(*c));
}

/* A copy of n elements of size sz at src, or NULL (also for none). */
static void *cfg_memdup(const void *src, size_t n, size_t sz, bool *ok)
{
    if (!n)
        return NULL;
    void *d = malloc(n * sz);
    if (d)
        memcpy(d, src, n * sz);
    else
        *ok = false;
    return d;
}

fq_status fq_config_copy(fq_config *dst, const fq_config *src)
{
    fq_config d = *src;
    bool ok = true;
    for (size_t i = 0; i < CFG_N_STRINGS; i++) {
        char **f = cfg_string_at(&d, i);   /* a copy or NULL, never src's */
        if (*f && !(*f = strdup(*f)))
            ok = false;
    }
    d.estimates.workflows = cfg_memdup(src->estimates.workflows, src->estimates.n_workflows,
                                       sizeof(*d.estimates.workflows), &ok);
    d.plans = cfg_memdup(src->plans, src->n_plans, sizeof(*d.plans), &ok);
    d.tenants = cfg_memdup(src->tenants, src->n_tenants, sizeof(*d.tenants), &ok);
    *dst = d;
    if (ok)
        return FQ_OK;
    fq_config_free(dst);
    return FQ_ENOMEM;
}

fq_status fq_config_policy(fq_policy **out, const fq_config *c)
{
    fq_policy *p;
    fq_status s = fq_policy_create(&p, c->scheduler.default_plan,
                                   c->scheduler.reject_unknown, FQ_DEFAULT_MAX_PENDING);
    for (size_t i = 0; i < c->n_plans; i++)
        CFG_IFOK(s, fq_policy_set_plan(p, &c->plans[i]));
    for (size_t i = 0; i < c->n_tenants; i++)
        CFG_IFOK(s, fq_policy_set_tenant(p, &c->tenants[i]));
    if (s != FQ_OK) {
        fq_policy_destroy(p);
        p = NULL;
    }
    *out = p;
    return s;
}

/* ---- Describe and diff ---- */

/* An snprintf that appends: len counts every byte asked for, buf holds
 * what fits. */
typedef struct cfg_out {
    char *buf;
    size_t cap;
    size_t len;
} cfg_out;

static void cfg_put(cfg_out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

/* A logfmt value: bare when it can be, else quoted and escaped as the log
 * lines quote theirs. */
static void cfg_put_value(cfg_out *o, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), step;
    char esc[8];

    if (fq_logfmt_bare(s)) {
        cfg_put(o, "%s", s);
        return;
    }
    cfg_put(o, "\"");
    for (; n > 0; p += step, n -= step) {
        const char *e = fq_json_escape(p, n, &step, esc);
        cfg_put(o, "%.*s", e ? (int)strlen(e) : (int)step, e ? e : (const char *)p);
    }
    cfg_put(o, "\"");
}

/* Append n bytes of s to tmp (cap bytes), as far as they fit. */
static void cfg_cat(char *tmp, size_t cap, size_t *k, const char *s, size_t n)
{
    size_t room = cap - 1 - *k;
    n = n < room ? n : room;
    memcpy(tmp + *k, s, n);
    *k += n;
    tmp[*k] = '\0';
}

/* A URL, or a comma-separated list of them, with the user information of
 * each (user:password@ or token@) shown as ***. The user information runs
 * from "://" to the last '@' before the next "://", so that a password with
 * an unescaped '/', ',' or '@' is still hidden whole. */
static void cfg_put_url(cfg_out *o, const char *url)
{
    char tmp[1024] = "";
    size_t k = 0;
    const char *p = url;
    const char *auth = strstr(p, "://");
    auth = auth ? auth + 3 : p;
    for (;;) {
        const char *next = strstr(auth, "://");
        const char *lim = next ? next : auth + strlen(auth);
        const char *at = NULL;
        for (const char *q = auth; q < lim; q++)
            if (*q == '@')
                at = q;
        cfg_cat(tmp, sizeof(tmp), &k, p, (size_t)(auth - p));
        if (at)
            cfg_cat(tmp, sizeof(tmp), &k, "***", 3);
        p = at ? at : auth;
        if (!next)
            break;
        auth = next + 3;
    }
    cfg_cat(tmp, sizeof(tmp), &k, p, strlen(p));
    cfg_put_value(o, tmp);
}

/* "none", or the value (or "set" for a secret). */
static void cfg_put_opt(cfg_out *o, const char *key, const char *val, bool secret)
{
    cfg_put(o, " %s=", key);
    cfg_put_value(o, !val ? "none" : secret ? "set" : val);
}

static void cfg_put_limit(cfg_out *o, const char *key, uint64_t val)
{
    if (val)
        cfg_put(o, " %s=%llu", key, (unsigned long long)val);
    else
        cfg_put(o, " %s=none", key);
}

size_t fq_config_describe(const fq_config *c, char *buf, size_t cap)
{
    cfg_out o = {buf, cap, 0};
    if (cap)
        buf[0] = '\0';
    cfg_put(&o, "nats.url=");
    cfg_put_url(&o, c->nats.url ? c->nats.url : "");
    cfg_put_opt(&o, "nats.creds", c->nats.creds, true);
    cfg_put_opt(&o, "nats.tls.ca", c->nats.tls_ca, false);
    cfg_put_opt(&o, "nats.tls.cert", c->nats.tls_cert, false);
    cfg_put_opt(&o, "nats.tls.key", c->nats.tls_key, true);
    cfg_put_opt(&o, "nats.user", c->nats.user, false);
    cfg_put_opt(&o, "nats.password", c->nats.password, true);
    cfg_put_opt(&o, "nats.nkey", c->nats.nkey, false);
    cfg_put_opt(&o, "nats.nkey_seed", c->nats.nkey_seed, true);
    cfg_put_opt(&o, "nats.inbox_prefix", c->nats.inbox_prefix, false);
    cfg_put_opt(&o, "subjects.submit", c->subjects.submit, false);
    cfg_put_opt(&o, "subjects.dispatch", c->subjects.dispatch, false);
    cfg_put_opt(&o, "subjects.done", c->subjects.done, false);
    cfg_put_opt(&o, "subjects.rejected", c->subjects.rejected, false);
    cfg_put_opt(&o, "subjects.admin", c->subjects.admin, false);
    cfg_put_opt(&o, "subjects.runs", c->subjects.runs, false);
    cfg_put_opt(&o, "streams.submit", c->streams.submit, false);
    cfg_put_opt(&o, "streams.dispatch", c->streams.dispatch, false);
    cfg_put_opt(&o, "streams.done", c->streams.done, false);
    cfg_put_opt(&o, "streams.rejected", c->streams.rejected, false);
    cfg_put_opt(&o, "streams.runs", c->streams.runs, false);
    cfg_put_opt(&o, "streams.durable", c->streams.durable, false);
    cfg_put_opt(&o, "streams.lease_bucket", c->streams.lease_bucket, false);
    cfg_put_opt(&o, "streams.tenants_bucket", c->streams.tenants_bucket, false);
    cfg_put(&o, " streams.replicas=%u streams.duplicate_window_ms=%llu"
            " streams.dispatch_max_age_ms=%llu streams.rejected_max_age_ms=%llu",
            c->streams.replicas, (unsigned long long)c->streams.duplicate_window_ms,
            (unsigned long long)c->streams.dispatch_max_age_ms,
            (unsigned long long)c->streams.rejected_max_age_ms);
    cfg_put_limit(&o, "streams.submit_max_msgs_per_tenant",
                  c->streams.submit_max_msgs_per_tenant);
    cfg_put_limit(&o, "streams.submit_max_bytes", c->streams.submit_max_bytes);
    cfg_put_limit(&o, "streams.rejected_max_msgs_per_tenant",
                  c->streams.rejected_max_msgs_per_tenant);
    cfg_put_limit(&o, "streams.rejected_max_bytes", c->streams.rejected_max_bytes);
    cfg_put(&o, " scheduler.quantum_tokens=%u", c->scheduler.quantum_tokens);
    cfg_put_opt(&o, "scheduler.default_plan", c->scheduler.default_plan, false);
    cfg_put(&o, " scheduler.unknown_tenants=%s",
            c->scheduler.reject_unknown ? "reject" : "admit");
    cfg_put(&o, " scheduler.max_est_tokens=%u", c->scheduler.max_est_tokens);
    cfg_put_limit(&o, "scheduler.max_wait_ms", c->scheduler.max_wait_ms);
    cfg_put(&o, " scheduler.debt_forget_ms=%llu",
            (unsigned long long)c->scheduler.debt_forget_ms);
    cfg_put(&o, " window.max_in_flight=%u", c->window.max_in_flight);
    cfg_put_limit(&o, "window.max_in_flight_tokens", c->window.max_in_flight_tokens);
    cfg_put(&o, " window.run_timeout_ms=%llu",
            (unsigned long long)c->window.run_timeout_ms);
    cfg_put(&o, " limits.max_buffered_runs=%llu limits.max_buffered_bytes=%llu",
            (unsigned long long)c->limits.max_buffered_runs,
            (unsigned long long)c->limits.max_buffered_bytes);
    cfg_put(&o, " plans=");
    for (size_t i = 0; i < c->n_plans; i++)
        cfg_put(&o, "%s%s:%u", i ? "," : "", c->plans[i].name, c->plans[i].weight);
    cfg_put(&o, " tenants=%zu", c->n_tenants);
    cfg_put(&o, " estimates.default_tokens=%u estimates.workflows=%zu",
            c->estimates.default_tokens, c->estimates.n_workflows);
    cfg_put(&o, " http.listen=");
    cfg_put_value(&o, c->http.listen && *c->http.listen ? c->http.listen : "off");
    if (c->http.probe_listen && *c->http.probe_listen) {
        cfg_put(&o, " http.probe_listen=");
        cfg_put_value(&o, c->http.probe_listen);
    }
    cfg_put(&o, " http.max_tenant_series=%u", c->http.max_tenant_series);
    cfg_put_opt(&o, "log.level", c->log.level, false);
    cfg_put_opt(&o, "log.format", c->log.format, false);
    cfg_put(&o, " log.queue_age_warn_ms=%llu", (unsigned long long)c->log.queue_age_warn_ms);
    return o.len;
}

/* The settings that only a restart applies, as offsets of their strings. */
static const struct {
    const char *key;
    size_t off;
} cfg_restart_strs[] = {
    {"nats.url", offsetof(fq_config, nats.url)},
    {"nats.creds", offsetof(fq_config, nats.creds)},
    {"nats.tls.ca", offsetof(fq_config, nats.tls_ca)},
    {"nats.tls.cert", offsetof(fq_config, nats.tls_cert)},
    {"nats.tls.key", offsetof(fq_config, nats.tls_key)},
    {"nats.user", offsetof(fq_config, nats.user)},
    {"nats.password", offsetof(fq_config, nats.password)},
    {"nats.nkey", offsetof(fq_config, nats.nkey)},
    {"nats.nkey_seed", offsetof(fq_config, nats.nkey_seed)},
    {"nats.inbox_prefix", offsetof(fq_config, nats.inbox_prefix)},
    {"subjects.submit", offsetof(fq_config, subjects.submit)},
    {"subjects.dispatch", offsetof(fq_config, subjects.dispatch)},
    {"subjects.done", offsetof(fq_config, subjects.done)},
    {"subjects.rejected", offsetof(fq_config, subjects.rejected)},
    {"subjects.admin", offsetof(fq_config, subjects.admin)},
    {"subjects.runs", offsetof(fq_config, subjects.runs)},
    {"streams.submit", offsetof(fq_config, streams.submit)},
    {"streams.dispatch", offsetof(fq_config, streams.dispatch)},
    {"streams.done", offsetof(fq_config, streams.done)},
    {"streams.rejected", offsetof(fq_config, streams.rejected)},
    {"streams.runs", offsetof(fq_config, streams.runs)},
    {"streams.durable", offsetof(fq_config, streams.durable)},
    {"streams.lease_bucket", offsetof(fq_config, streams.lease_bucket)},
    {"streams.tenants_bucket", offsetof(fq_config, streams.tenants_bucket)},
    {"http.listen", offsetof(fq_config, http.listen)},
    {"http.probe_listen", offsetof(fq_config, http.probe_listen)},
};

/* ... and the numbers, each widened to 64 bits. */
static uint64_t cfg_u64_of(const void *p, size_t size)
{
    if (size == sizeof(uint32_t)) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        return v;
    }
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

#define CFG_NUM(key, field) {key, offsetof(fq_config, field), sizeof(((fq_config *)0)->field)}
static const struct {
    const char *key;
    size_t off, size;
} cfg_restart_nums[] = {
    CFG_NUM("streams.replicas", streams.replicas),
    CFG_NUM("streams.duplicate_window_ms", streams.duplicate_window_ms),
    CFG_NUM("streams.dispatch_max_age_ms", streams.dispatch_max_age_ms),
    CFG_NUM("streams.rejected_max_age_ms", streams.rejected_max_age_ms),
    CFG_NUM("streams.submit_max_msgs_per_tenant", streams.submit_max_msgs_per_tenant),
    CFG_NUM("streams.submit_max_bytes", streams.submit_max_bytes),
    CFG_NUM("streams.rejected_max_msgs_per_tenant", streams.rejected_max_msgs_per_tenant),
    CFG_NUM("streams.rejected_max_bytes", streams.rejected_max_bytes),
    CFG_NUM("http.max_tenant_series", http.max_tenant_series),
};

static const char *cfg_str_at(const fq_config *c, size_t off)
{
    const char *s;
    memcpy(&s, (const char *)c + off, sizeof(s));
    return s ? s : "";
}

size_t fq_config_diff_restart(const fq_config *old, const fq_config *new,
                              char *buf, size_t cap)
{
    cfg_out o = {buf, cap, 0};
    size_t n = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof(cfg_restart_strs) / sizeof(cfg_restart_strs[0]); i++) {
        if (strcmp(cfg_str_at(old, cfg_restart_strs[i].off),
                   cfg_str_at(new, cfg_restart_strs[i].off)) == 0)
            continue;
        cfg_put(&o, "%s%s", n++ ? "," : "", cfg_restart_strs[i].key);
    }
    for (size_t i = 0; i < sizeof(cfg_restart_nums) / sizeof(cfg_restart_nums[0]); i++) {
        size_t off = cfg_restart_nums[i].off, size = cfg_restart_nums[i].size;
        if (cfg_u64_of((const char *)old + off, size) == cfg_u64_of((const char *)new + off, size))
            continue;
        cfg_put(&o, "%s%s", n++ ? "," : "", cfg_restart_nums[i].key);
    }
    return n;
}
