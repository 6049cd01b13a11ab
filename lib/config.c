/* config.c -- fairq's YAML configuration: one declaration of its settings, which load, validation, describe and the restart diff walk. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cyaml/cyaml.h>
#include <yaml.h>

#include "config.h"
#include "buf.h"
#include "lease.h"
#include "owner.h"
#include "metrics.h"
#include "partition.h"
#include "yamlerr.h"

/*
 * Principles
 *
 * - One declaration. Every setting is one row of cfg_fields: its key, its
 *   member of fq_config, how it is read (range, default, words, the check
 *   of its text) and what it is (restart-only, secret, how it is shown).
 *   libcyaml's schema is built from those rows, validation reads them in
 *   order, describe shows them in order, and the restart diff and reload
 *   compare and keep those marked CFG_RESTART: a setting added there is
 *   loaded, checked, shown and diffed, and cannot be forgotten by one.
 * - Load, then validate. libcyaml maps the document onto a raw struct in
 *   which every key is optional and every scalar is a string; a separate
 *   pass checks required keys, parses numbers strictly, checks ranges and
 *   cross references, and fills in defaults. Integers are not left to
 *   libcyaml 1.3 because it reads "1.5" as 1 and "010" as 8, and a struct
 *   of plain integers cannot tell an absent key from a zero.
 * - Settings in file order, so that the first error is the first one a
 *   reader of the file meets. Checks across settings run right after the
 *   last setting they read (the row's `then`).
 * - Every error names file, line, column and key path: lib/yamlerr.c
 *   captures libcyaml's errors and places them, and the validation errors,
 *   by key path.
 * - Secrets (nats.creds, nats.tls.key, nats.password, nats.nkey_seed, a
 *   URL's user information) never leave this module as text.
 */

/* ---- The document as libcyaml loads it ---- */

/* The entries of the lists: NULL is an absent key. */
typedef struct raw_plan {
    char *name, *weight, *max_in_flight, *max_pending, *burst_in_flight, *tokens_per_minute;
    char *price_input, *price_output, *price_cached, *max_subtenants, *class_weights;
    char *class_max_pending;
} raw_plan;

typedef struct raw_tenant {
    char *id, *plan, *weight, *max_in_flight, *max_pending, *burst_in_flight,
        *tokens_per_minute;
    char *price_input, *price_output, *price_cached, *max_subtenants, *class_weights;
    char *class_max_pending;
} raw_tenant;

typedef struct raw_workflow {
    char *name, *tokens;
} raw_workflow;

#define CFG_FIELDS_MAX 64       /* rows of cfg_fields */

/* Every scalar setting as a string, in the slot of its row (NULL: absent),
 * and the lists as libcyaml loads them. */
typedef struct raw_config {
    char *text[CFG_FIELDS_MAX];
    raw_plan *plans;
    unsigned plans_count;
    raw_tenant *tenants;
    unsigned tenants_count;
    raw_workflow *workflows;
    unsigned workflows_count;
} raw_config;

#define CFG_STR(key, st, m) \
    CYAML_FIELD_STRING_PTR(key, CYAML_FLAG_OPTIONAL, st, m, 0, CYAML_UNLIMITED)

static const cyaml_schema_field_t plan_fields[] = {
    CFG_STR("name", raw_plan, name),
    CFG_STR("weight", raw_plan, weight),
    CFG_STR("max_in_flight", raw_plan, max_in_flight),
    CFG_STR("max_pending", raw_plan, max_pending),
    CFG_STR("burst_in_flight", raw_plan, burst_in_flight),
    CFG_STR("tokens_per_minute", raw_plan, tokens_per_minute),
    CFG_STR("price_input", raw_plan, price_input),
    CFG_STR("price_output", raw_plan, price_output),
    CFG_STR("price_cached", raw_plan, price_cached),
    CFG_STR("max_subtenants", raw_plan, max_subtenants),
    CFG_STR("class_weights", raw_plan, class_weights),
    CFG_STR("class_max_pending", raw_plan, class_max_pending),
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
    CFG_STR("burst_in_flight", raw_tenant, burst_in_flight),
    CFG_STR("tokens_per_minute", raw_tenant, tokens_per_minute),
    CFG_STR("price_input", raw_tenant, price_input),
    CFG_STR("price_output", raw_tenant, price_output),
    CFG_STR("price_cached", raw_tenant, price_cached),
    CFG_STR("max_subtenants", raw_tenant, max_subtenants),
    CFG_STR("class_weights", raw_tenant, class_weights),
    CFG_STR("class_max_pending", raw_tenant, class_max_pending),
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

/* ---- Error messages that name file, line, column and key path ---- */

/* Where a config comes from, and where its errors go. */
typedef struct cfg_ctx {
    const char *name;           /* file name, for messages */
    const char *yaml;           /* the source, to locate keys in */
    size_t len;
    char *err;                  /* the one error message */
    size_t errlen;
    const cyaml_schema_value_t *schema; /* the one it is loaded with */
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

/* ---- Reading values ---- */

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

/* A copy of s; NULL, and "" when empty_is_none (an optional path), are
 * stored as NULL. */
static fq_status cfg_str(const char *s, bool empty_is_none, char **out)
{
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
/* Whether subject is prefix and tokens more tokens (what <prefix>.* or
 * <prefix>.*.* captures). */
static bool cfg_subject_under(const char *subject, const char *prefix, uint32_t tokens)
{
    size_t n = strlen(prefix);
    if (strncmp(subject, prefix, n) != 0)
        return false;
    const char *s = subject + n;
    for (uint32_t i = 0; i < tokens; i++) {
        if (*s != '.')
            return false;
        const char *dot = strchr(s + 1, '.');
        s = dot ? dot : s + strlen(s);
    }
    return !*s;
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

/* weight, max_in_flight, max_pending, burst_in_flight and tokens_per_minute
 * at prefix. Absent leaves the default. */
static fq_status cfg_caps(const cfg_ctx *v, const char *prefix, const char *weight,
                          const char *max_in_flight, const char *max_pending,
                          const char *burst_in_flight, const char *tokens_per_minute,
                          uint32_t *w, uint32_t *mif, uint32_t *mp, uint32_t *burst,
                          uint32_t *tpm)
{
    fq_status s = cfg_u32(v, prefix, "weight", weight, 1, FQ_POLICY_MAX_WEIGHT, w);
    CFG_IFOK(s, cfg_u32(v, prefix, "max_in_flight", max_in_flight, 1, UINT32_MAX, mif));
    CFG_IFOK(s, cfg_u32(v, prefix, "max_pending", max_pending, 1, UINT32_MAX, mp));
    CFG_IFOK(s, cfg_u32(v, prefix, "burst_in_flight", burst_in_flight, 1, UINT32_MAX, burst));
    CFG_IFOK(s, cfg_u32(v, prefix, "tokens_per_minute", tokens_per_minute, 1, UINT32_MAX, tpm));
    return s;
}

/* max_subtenants at prefix: min (a plan's 0 is none, as the key left out;
 * an entry's would be "not set", so it starts at 1) to
 * FQ_POLICY_MAX_SUBTENANTS; with priority classes too, a tenant's runs are
 * divided by class first, then among its sub-tenants within a class. */
static fq_status cfg_subtenants(const cfg_ctx *v, const char *prefix,
                                const char *text, uint32_t min, uint32_t *out)
{
    return cfg_u32(v, prefix, "max_subtenants", text, min, FQ_POLICY_MAX_SUBTENANTS, out);
}

/* class_weights at prefix: "strict", or one weight per class of
 * scheduler.classes, highest first. */
static fq_status cfg_class_weights(const cfg_ctx *v, const fq_config *c, const char *prefix,
                                   const char *text, fq_class_weights *out)
{
    fq_classes cl;
    if (!text)
        return FQ_OK;
    if (fq_classes_parse(&cl, c->scheduler.classes) != FQ_OK || !cl.n)
        return cfg_fail(v, prefix, "class_weights", "needs scheduler.classes");
    if (fq_class_weights_parse(out, text) != FQ_OK || !*text ||
        (fq_class_weights_count(out) && fq_class_weights_count(out) != cl.n))
        return cfg_fail(v, prefix, "class_weights", "must be \"strict\" or one weight of 1 "
                        "to %u per class of scheduler.classes (%u), highest first, as in "
                        "\"3, 1\"", FQ_SCHED_MAX_CLASS_WEIGHT, (unsigned)cl.n);
    return FQ_OK;
}

/* class_max_pending at prefix: one max_pending per class of
 * scheduler.classes, highest first (0: none of the class's own). */
static fq_status cfg_class_pending(const cfg_ctx *v, const fq_config *c, const char *prefix,
                                   const char *text, fq_class_pending *out)
{
    fq_classes cl;
    if (!text)
        return FQ_OK;
    if (fq_classes_parse(&cl, c->scheduler.classes) != FQ_OK || !cl.n)
        return cfg_fail(v, prefix, "class_max_pending", "needs scheduler.classes");
    if (fq_class_pending_parse(out, text) != FQ_OK || out->count != cl.n)
        return cfg_fail(v, prefix, "class_max_pending", "must be one max_pending of 0 to "
                        "2^32-1 per class of scheduler.classes (%u), highest first, as in "
                        "\"100, 0\" (0: none of the class's own)", (unsigned)cl.n);
    return FQ_OK;
}

/* The prices of token kinds at prefix, for a plan and a tenant entry alike. */
static fq_status cfg_prices(const cfg_ctx *v, const char *prefix, const char *input,
                            const char *output, const char *cached, fq_prices *p)
{
    fq_status s = cfg_u32(v, prefix, "price_input", input, 1, FQ_POLICY_MAX_PRICE, &p->input);
    CFG_IFOK(s, cfg_u32(v, prefix, "price_output", output, 1, FQ_POLICY_MAX_PRICE, &p->output));
    CFG_IFOK(s, cfg_u32(v, prefix, "price_cached", cached, 1, FQ_POLICY_MAX_PRICE, &p->cached));
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
                             rp->burst_in_flight, rp->tokens_per_minute, &p->weight,
                             &p->max_in_flight, &p->max_pending, &p->burst_in_flight,
                             &p->tokens_per_minute));
        CFG_IFOK(s, cfg_prices(v, at, rp->price_input, rp->price_output, rp->price_cached,
                               &p->prices));
        CFG_IFOK(s, cfg_subtenants(v, at, rp->max_subtenants, 0, &p->max_subtenants));
        CFG_IFOK(s, cfg_class_weights(v, c, at, rp->class_weights, &p->class_weights));
        CFG_IFOK(s, cfg_class_pending(v, c, at, rp->class_max_pending, &p->class_max_pending));
        if (s == FQ_OK && p->burst_in_flight && p->burst_in_flight <= p->max_in_flight)
            s = cfg_fail(v, at, "burst_in_flight", "must be above max_in_flight (%u), or left "
                         "out", (unsigned)p->max_in_flight);
        if (s == FQ_OK && p->burst_in_flight && !p->max_in_flight)
            s = cfg_fail(v, at, "burst_in_flight", "needs max_in_flight: without a cap "
                         "there is nothing to burst past");
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
                             rt->burst_in_flight, rt->tokens_per_minute, &t->weight,
                             &t->max_in_flight, &t->max_pending, &t->burst_in_flight,
                             &t->tokens_per_minute));
        CFG_IFOK(s, cfg_prices(v, at, rt->price_input, rt->price_output, rt->price_cached,
                               &t->prices));
        CFG_IFOK(s, cfg_subtenants(v, at, rt->max_subtenants, 1, &t->max_subtenants));
        CFG_IFOK(s, cfg_class_weights(v, c, at, rt->class_weights, &t->class_weights));
        CFG_IFOK(s, cfg_class_pending(v, c, at, rt->class_max_pending, &t->class_max_pending));
    }
    CFG_IFOK(s, cfg_unique(v, "tenants", "id", r->tenants, r->tenants_count,
                           sizeof(raw_tenant), offsetof(raw_tenant, id)));
    return s;
}


static fq_status cfg_workflows(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    uint32_t max = c->scheduler.max_est_tokens;
    fq_status s = FQ_OK;
    if (r->workflows_count == 0)
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

/* ---- Checks across settings, each run after the last setting it reads ---- */

/* The ways to authenticate, after nats.*: pairs go together, one way only. */
static fq_status cfg_nats_auth(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    (void)r;
    bool cert = c->nats.tls_cert, key = c->nats.tls_key;
    if (cert != key)
        return cfg_fail(v, "nats.tls", cert ? "key" : "cert",
                        "required with nats.tls.%s: cert and key go together",
                        cert ? "cert" : "key");
    bool user = c->nats.user, password = c->nats.password;
    if (user != password)
        return cfg_fail(v, "nats", user ? "password" : "user",
                        "required with nats.%s: user and password go together",
                        user ? "user" : "password");
    const char *nk = c->nats.nkey;
    bool nkey = nk, seed = c->nats.nkey_seed;
    if (nkey != seed)
        return cfg_fail(v, "nats", nkey ? "nkey_seed" : "nkey",
                        "required with nats.%s: the public key and its seed file go together",
                        nkey ? "nkey" : "nkey_seed");
    if (nkey && (strlen(nk) != 56 || nk[0] != 'U' ||
                 strspn(nk, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != 56))
        return cfg_fail(v, "nats", "nkey", "not a user's public nkey: 56 characters of base32"
                        " beginning with U (the seed, SU..., goes in a file named by nkey_seed)");
    if ((c->nats.creds != NULL) + user + nkey > 1)
        return cfg_fail(v, "nats", user ? "user" : "nkey",
                        "one way to authenticate: creds, user and password, or nkey");
    return FQ_OK;
}

/* After subjects.*: the dispatch and journal streams must not overlap the
 * per-tenant streams (submit, done, rejected). */
static fq_status cfg_subjects_apart(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    (void)r;
    const struct {
        const char *key, *subject;
    } single[] = {{"dispatch", c->subjects.dispatch}, {"runs", c->subjects.runs},
                  {"share", c->subjects.share}},
      tenant[] = {{"submit", c->subjects.submit}, {"done", c->subjects.done},
                  {"rejected", c->subjects.rejected}};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++) {
            /* with partitions, submit and done capture <subject>.*.* */
            uint32_t tokens = j < 2 && c->partitions > 1 ? 2 : 1;
            if (cfg_subject_under(single[i].subject, tenant[j].subject, tokens))
                return cfg_fail(v, "subjects", single[i].key, "'%s' falls under "
                                "subjects.%s%s", single[i].subject, tenant[j].key,
                                tokens == 2 ? ".*.*" : ".*");
        }
    return FQ_OK;
}

/* After streams.dispatch_max_age_ms, if given (protocol.md, "Why
 * FAIR_DISPATCH is not a work queue"): after a server restart,
 * de-duplication knows only the ids of the messages the stream still holds,
 * so it must hold them for the whole window. */
static fq_status cfg_dispatch_age_check(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    (void)r;
    if (c->streams.dispatch_max_age_ms &&
        c->streams.dispatch_max_age_ms < c->streams.duplicate_window_ms)
        return cfg_fail(v, "streams", "dispatch_max_age_ms", "must be >= "
                        "streams.duplicate_window_ms (%llu): after a server restart only "
                        "the messages still held de-duplicate a retried dispatch",
                        (unsigned long long)c->streams.duplicate_window_ms);
    return FQ_OK;
}

/* After window.*: FAIR_DISPATCH's default max age, twice the longer of the
 * duplicate window and the run timeout, at least an hour, so that a
 * dispatch outlives both its de-duplication and its lease with room to
 * spare. */
static fq_status cfg_dispatch_age(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    (void)r, (void)v;
    uint64_t keep = c->streams.duplicate_window_ms > c->window.run_timeout_ms
                        ? c->streams.duplicate_window_ms : c->window.run_timeout_ms;
    uint64_t age = 2 * keep > 3600000 ? 2 * keep : 3600000;
    if (!c->streams.dispatch_max_age_ms)
        c->streams.dispatch_max_age_ms = age;
    return FQ_OK;
}

/* After plans: the default plan is one of them. */
static fq_status cfg_default_plan_known(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    (void)r;
    if (cfg_plan_index(c, c->scheduler.default_plan) < 0)
        return cfg_fail(v, "scheduler", "default_plan", "no plan named '%s' in plans",
                        c->scheduler.default_plan);
    return FQ_OK;
}

static bool cfg_one_line(const char *s)
{
    return !strpbrk(s, "\t\r\n");
}

static bool cfg_inbox_valid(const char *s)
{
    return cfg_subject_valid(s) && strlen(s) <= 64;
}

static bool cfg_bucket_valid(const char *s)
{
    return fq_name_valid(s, strlen(s));
}

static bool cfg_classes_valid(const char *s)
{
    fq_classes c;
    return fq_classes_parse(&c, s) == FQ_OK;
}

/* ---- The declaration ---- */

typedef struct cfg_out cfg_out;
static void cfg_show_plans(cfg_out *o, const fq_config *c);

/* How a setting's text is read, kept and shown. */
typedef enum cfg_type {
    CFG_TEXT,                   /* a string: as given, or its default */
    CFG_NUM,                    /* a whole number, into a uint32_t or uint64_t */
    CFG_WORD,                   /* one of words, kept as a string */
    CFG_BOOL,                   /* one of two words, kept as a bool: the second */
    CFG_LIST,                   /* entries of their own, read by `read` */
} cfg_type;

/* What a setting is. */
enum {
    CFG_RESTART = 1 << 0,       /* a change applies only at a restart: the diff
                                   names it and a reload keeps the value in force */
    CFG_SECRET = 1 << 1,        /* shown as "set" */
    CFG_EMPTY_NONE = 1 << 2,    /* "" is kept as NULL, none, like an absent key */
    CFG_URL = 1 << 3,           /* shown with each URL's user information as *** */
    CFG_ZERO_NONE = 1 << 4,     /* 0 (no limit) is shown as "none" */
    CFG_EMPTY_OFF = 1 << 5,     /* "" is shown as "off" */
    CFG_EMPTY_HIDE = 1 << 6,    /* "" is not shown */
};

/* Names that must differ from the others of their kind. */
enum { CFG_UNIQUE_NONE, CFG_UNIQUE_SUBJECT, CFG_UNIQUE_STREAM, CFG_UNIQUE_BUCKET };

typedef fq_status (*cfg_step_fn)(fq_config *c, const raw_config *r, const cfg_ctx *v);

/* One setting. */
typedef struct cfg_field {
    const char *key;            /* its path in the file: "streams.replicas" */
    cfg_type type;
    unsigned flags;             /* CFG_RESTART, CFG_SECRET, ... */
    size_t off, size;           /* its member of fq_config */
    const char *def;            /* TEXT: the default; NULL: none */
    uint64_t num;               /* NUM: the default; WORD, BOOL: the default's index */
    uint64_t min, max;          /* NUM: the range */
    size_t cap;                 /* NUM: offset of a uint32_t setting read before,
                                   which caps its range and default; 0: none */
    const char *required;       /* TEXT: what an absent key (or with
                                   CFG_EMPTY_NONE an empty one) is told */
    bool (*valid)(const char *s); /* TEXT: a check of the text, or NULL */
    const char *invalid;        /* its message: a format of the text ('%s') */
    int unique;                 /* TEXT: a CFG_UNIQUE_* group, or none */
    const char *const *words;   /* WORD, BOOL: the words, NULL-terminated */
    cfg_step_fn read;           /* LIST: reads the entries */
    size_t count_off, elem;     /* LIST: its count (a size_t) and entry size */
    size_t raw_off, raw_count_off; /* LIST: its place in raw_config */
    const cyaml_schema_value_t *entry; /* LIST: libcyaml's entry schema */
    void (*show)(cfg_out *o, const fq_config *c); /* LIST: its value; NULL: the count */
    cfg_step_fn then;           /* a check after it, of it and of what came before */
} cfg_field;

#define CFG_AT(m) .off = offsetof(fq_config, m), .size = sizeof(((fq_config *)0)->m)
#define CFG_LIST_AT(m, n, raw) CFG_AT(m), .count_off = offsetof(fq_config, n), \
    .elem = sizeof(*((fq_config *)0)->m), .raw_off = offsetof(raw_config, raw), \
    .raw_count_off = offsetof(raw_config, raw##_count)
#define CFG_XSTR(x) CFG_XSTR_(x)
#define CFG_XSTR_(x) #x

static const char *const cfg_admit_reject[] = {"admit", "reject", NULL};
static const char *const cfg_off_on[] = {"off", "on", NULL};
static const char *const cfg_levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const cfg_formats[] = {"logfmt", "json", NULL};

#define CFG_SUBJECT .valid = cfg_subject_valid, .unique = CFG_UNIQUE_SUBJECT, \
    .invalid = "'%s' is not a subject: dot-separated tokens, none empty, without white " \
               "space or wildcards"
#define CFG_STREAM_NAME .valid = cfg_stream_name_valid, \
    .invalid = "'%s' is not a JetStream name: 1 to " CFG_XSTR(FQ_CONFIG_NAME_MAX) \
               " printable characters without white space, '.', '*', '>', '/' or '\\'"
#define CFG_STREAM CFG_STREAM_NAME, .unique = CFG_UNIQUE_STREAM
#define CFG_BUCKET .valid = cfg_bucket_valid, .unique = CFG_UNIQUE_BUCKET, \
    .invalid = "'%s' is not a bucket name: 1 to 64 of [A-Za-z0-9_-]"
#define CFG_MS(lo) .min = (lo), .max = FQ_CONFIG_MAX_MS
#define CFG_OPT (CFG_RESTART | CFG_EMPTY_NONE)

/* Every setting, in file order (README.md, config/fairq.yaml). */
static const cfg_field cfg_fields[] = {
    {"nats.url", CFG_TEXT, CFG_OPT | CFG_URL, CFG_AT(nats.url),
     .required = "required (e.g. nats://127.0.0.1:4222)", .valid = cfg_one_line,
     .invalid = "must be on one line, without tabs"},
    {"nats.creds", CFG_TEXT, CFG_OPT | CFG_SECRET, CFG_AT(nats.creds)},
    {"nats.tls.ca", CFG_TEXT, CFG_OPT, CFG_AT(nats.tls_ca)},
    {"nats.tls.cert", CFG_TEXT, CFG_OPT, CFG_AT(nats.tls_cert)},
    {"nats.tls.key", CFG_TEXT, CFG_OPT | CFG_SECRET, CFG_AT(nats.tls_key)},
    {"nats.user", CFG_TEXT, CFG_OPT, CFG_AT(nats.user)},
    {"nats.password", CFG_TEXT, CFG_OPT | CFG_SECRET, CFG_AT(nats.password)},
    {"nats.nkey", CFG_TEXT, CFG_OPT, CFG_AT(nats.nkey)},
    {"nats.nkey_seed", CFG_TEXT, CFG_OPT | CFG_SECRET, CFG_AT(nats.nkey_seed)},
    {"nats.inbox_prefix", CFG_TEXT, CFG_RESTART, CFG_AT(nats.inbox_prefix),
     .def = FQ_INBOX_PREFIX, .valid = cfg_inbox_valid,
     .invalid = "'%s' is not an inbox prefix: 1 to 64 characters of dot-separated tokens,"
                " none empty, without white space or wildcards",
     .then = cfg_nats_auth},
    /* Fixed for the deployment's life: a tenant's partition is a function
     * of P (docs/partitions.md says how to change it, by draining). */
    {"partitions", CFG_NUM, CFG_RESTART, CFG_AT(partitions), .num = 1, .min = 1,
     .max = FQ_PARTITIONS_MAX},
    /* Kept while the records of the P before a change may still be in the
     * journal (its max age): a tenant's debt follows it to its new partition. */
    {"partitions_before", CFG_NUM, CFG_RESTART, CFG_AT(partitions_before), .num = 1, .min = 1,
     .max = FQ_PARTITIONS_MAX},
    /* Part of a key of the lease bucket (r.<id>), and every replica's
     * must differ: two of one id would take each other's keys. */
    {"replica_id", CFG_TEXT, CFG_OPT, CFG_AT(replica_id), .valid = fq_owner_id_valid,
     .invalid = "'%s' is not a replica id: 1 to 48 letters, digits, '-' or '_', not "
                "'released'"},
    {"subjects.submit", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.submit),
     .def = FQ_SUBJECT_SUBMIT, CFG_SUBJECT},
    {"subjects.dispatch", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.dispatch),
     .def = FQ_SUBJECT_DISPATCH, CFG_SUBJECT},
    {"subjects.done", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.done),
     .def = FQ_SUBJECT_DONE, CFG_SUBJECT},
    {"subjects.rejected", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.rejected),
     .def = FQ_SUBJECT_REJECTED, CFG_SUBJECT},
    {"subjects.admin", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.admin),
     .def = FQ_SUBJECT_ADMIN, CFG_SUBJECT},
    {"subjects.explain", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.explain),
     .def = FQ_SUBJECT_EXPLAIN, CFG_SUBJECT},
    {"subjects.runs", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.runs),
     .def = FQ_SUBJECT_RUNS, CFG_SUBJECT},
    {"subjects.share", CFG_TEXT, CFG_RESTART, CFG_AT(subjects.share),
     .def = FQ_SUBJECT_SHARE, CFG_SUBJECT, .then = cfg_subjects_apart},
    /* Two streams (or buckets) of one name would be one with two sets of
     * settings; the durable consumer is on two streams by design. */
    {"streams.submit", CFG_TEXT, CFG_RESTART, CFG_AT(streams.submit),
     .def = FQ_DEFAULT_STREAM_SUBMIT, CFG_STREAM},
    {"streams.dispatch", CFG_TEXT, CFG_RESTART, CFG_AT(streams.dispatch),
     .def = FQ_DEFAULT_STREAM_DISPATCH, CFG_STREAM},
    {"streams.done", CFG_TEXT, CFG_RESTART, CFG_AT(streams.done),
     .def = FQ_DEFAULT_STREAM_DONE, CFG_STREAM},
    {"streams.rejected", CFG_TEXT, CFG_RESTART, CFG_AT(streams.rejected),
     .def = FQ_DEFAULT_STREAM_REJECTED, CFG_STREAM},
    {"streams.runs", CFG_TEXT, CFG_RESTART, CFG_AT(streams.runs),
     .def = FQ_DEFAULT_STREAM_RUNS, CFG_STREAM},
    {"streams.durable", CFG_TEXT, CFG_RESTART, CFG_AT(streams.durable),
     .def = FQ_DEFAULT_DURABLE, CFG_STREAM_NAME},
    {"streams.lease_bucket", CFG_TEXT, CFG_RESTART, CFG_AT(streams.lease_bucket),
     .def = FQ_DEFAULT_LEASE_BUCKET, CFG_BUCKET},
    {"streams.lease_ttl_ms", CFG_NUM, CFG_RESTART, CFG_AT(streams.lease_ttl_ms),
     .num = FQ_LEASE_TTL_DEFAULT_MS, .min = FQ_LEASE_TTL_MIN_MS, .max = FQ_LEASE_TTL_MAX_MS},
    {"streams.tenants_bucket", CFG_TEXT, CFG_RESTART, CFG_AT(streams.tenants_bucket),
     .def = FQ_DEFAULT_TENANTS_BUCKET, CFG_BUCKET},
    {"streams.replicas", CFG_NUM, CFG_RESTART, CFG_AT(streams.replicas),
     .num = 1, .min = 1, .max = 5},
    {"streams.duplicate_window_ms", CFG_NUM, CFG_RESTART, CFG_AT(streams.duplicate_window_ms),
     .num = FQ_DEFAULT_DUPLICATE_WINDOW_MS, .min = 1000, .max = FQ_MAX_DUPLICATE_WINDOW_MS},
    /* 0 until window.run_timeout_ms is read: cfg_dispatch_age */
    {"streams.dispatch_max_age_ms", CFG_NUM, CFG_RESTART, CFG_AT(streams.dispatch_max_age_ms),
     .num = 0, CFG_MS(1000), .then = cfg_dispatch_age_check},
    {"streams.rejected_max_age_ms", CFG_NUM, CFG_RESTART, CFG_AT(streams.rejected_max_age_ms),
     .num = FQ_DEFAULT_REJECTED_MAX_AGE_MS, CFG_MS(1000)},
    /* Storage limits (0: none), as JetStream takes them: signed 64 bits. */
    {"streams.submit_max_msgs_per_tenant", CFG_NUM, CFG_RESTART | CFG_ZERO_NONE,
     CFG_AT(streams.submit_max_msgs_per_tenant),
     .num = FQ_DEFAULT_SUBMIT_MAX_MSGS_PER_TENANT, .max = INT64_MAX},
    {"streams.submit_max_bytes", CFG_NUM, CFG_RESTART | CFG_ZERO_NONE,
     CFG_AT(streams.submit_max_bytes), .num = FQ_DEFAULT_SUBMIT_MAX_BYTES, .max = INT64_MAX},
    {"streams.rejected_max_msgs_per_tenant", CFG_NUM, CFG_RESTART | CFG_ZERO_NONE,
     CFG_AT(streams.rejected_max_msgs_per_tenant),
     .num = FQ_DEFAULT_REJECTED_MAX_MSGS_PER_TENANT, .max = INT64_MAX},
    {"streams.rejected_max_bytes", CFG_NUM, CFG_RESTART | CFG_ZERO_NONE,
     CFG_AT(streams.rejected_max_bytes), .num = FQ_DEFAULT_REJECTED_MAX_BYTES, .max = INT64_MAX},
    {"scheduler.quantum_tokens", CFG_NUM, 0, CFG_AT(scheduler.quantum_tokens),
     .num = 1000, .min = 1, .max = FQ_POLICY_MAX_QUANTUM},
    {"scheduler.default_plan", CFG_TEXT, 0, CFG_AT(scheduler.default_plan),
     .required = "required (the plan of tenants that are not listed)"},
    {"scheduler.unknown_tenants", CFG_BOOL, 0, CFG_AT(scheduler.reject_unknown),
     .words = cfg_admit_reject},
    /* The estimator is built once, with the estimate bounds. */
    {"scheduler.max_est_tokens", CFG_NUM, CFG_RESTART, CFG_AT(scheduler.max_est_tokens),
     .num = 1000000, .min = 1, .max = UINT32_MAX},
    {"scheduler.max_wait_ms", CFG_NUM, CFG_ZERO_NONE, CFG_AT(scheduler.max_wait_ms),
     .num = 0, CFG_MS(0)},
    {"scheduler.debt_forget_ms", CFG_NUM, 0, CFG_AT(scheduler.debt_forget_ms),
     .num = FQ_DEFAULT_DEBT_FORGET_MS, CFG_MS(1000)},
    /* Queued runs are ordered by class: a new order applies at a restart. */
    {"scheduler.classes", CFG_TEXT, CFG_OPT, CFG_AT(scheduler.classes),
     .valid = cfg_classes_valid,
     .invalid = "'%s' is not a list of priority classes, highest first: 2 to "
                CFG_XSTR(FQ_SCHED_MAX_CLASSES) " distinct names of 1 to "
                CFG_XSTR(FQ_CLASS_MAX) " of [A-Za-z0-9_-], each with an optional "
                ":max_pending, separated by commas"},
    {"window.max_in_flight", CFG_NUM, 0, CFG_AT(window.max_in_flight),
     .num = 64, .min = 1, .max = UINT32_MAX},
    {"window.max_in_flight_tokens", CFG_NUM, CFG_ZERO_NONE, CFG_AT(window.max_in_flight_tokens),
     .num = 0, .max = UINT64_MAX},
    /* The journal's max age follows it, set at start. */
    {"window.run_timeout_ms", CFG_NUM, CFG_RESTART, CFG_AT(window.run_timeout_ms),
     .num = 600000, CFG_MS(1), .then = cfg_dispatch_age},
    {"window.share", CFG_BOOL, CFG_RESTART, CFG_AT(window.share), .words = cfg_off_on},
    {"window.share_reserve_runs", CFG_NUM, 0, CFG_AT(window.share_reserve_runs),
     .num = 1, .min = 1, .max = UINT32_MAX},
    {"window.share_reserve_tokens", CFG_NUM, 0, CFG_AT(window.share_reserve_tokens),
     .num = 0, .max = UINT64_MAX},
    {"limits.max_buffered_runs", CFG_NUM, 0, CFG_AT(limits.max_buffered_runs),
     .num = 1000000, .min = 1, .max = UINT64_MAX},
    {"limits.max_buffered_bytes", CFG_NUM, 0, CFG_AT(limits.max_buffered_bytes),
     .num = 256u << 20, .min = 1, .max = UINT64_MAX},
    {"plans", CFG_LIST, 0, CFG_LIST_AT(plans, n_plans, plans), .entry = &plan_entry,
     .read = cfg_plans, .show = cfg_show_plans, .then = cfg_default_plan_known},
    {"tenants", CFG_LIST, 0, CFG_LIST_AT(tenants, n_tenants, tenants), .entry = &tenant_entry,
     .read = cfg_tenants},
    {"estimates.default_tokens", CFG_NUM, CFG_RESTART, CFG_AT(estimates.default_tokens),
     .num = 1000, .min = 1, .max = UINT32_MAX,
     .cap = offsetof(fq_config, scheduler.max_est_tokens)},
    {"estimates.workflows", CFG_LIST, 0,
     CFG_LIST_AT(estimates.workflows, estimates.n_workflows, workflows),
     .entry = &workflow_entry, .read = cfg_workflows},
    {"http.listen", CFG_TEXT, CFG_RESTART | CFG_EMPTY_OFF, CFG_AT(http.listen),
     .def = "127.0.0.1:9464", .valid = cfg_listen_valid,
     .invalid = "'%s' is not host:port (port 1 to 65535), or \"\" to disable"},
    {"http.probe_listen", CFG_TEXT, CFG_RESTART | CFG_EMPTY_HIDE, CFG_AT(http.probe_listen),
     .def = "", .valid = cfg_listen_valid,
     .invalid = "'%s' is not host:port (port 1 to 65535), or \"\" for none"},
    {"http.max_tenant_series", CFG_NUM, CFG_RESTART, CFG_AT(http.max_tenant_series),
     .num = FQ_METRICS_MAX_TENANT_SERIES, .min = 1, .max = FQ_CONFIG_MAX_TENANT_SERIES},
    {"log.level", CFG_WORD, 0, CFG_AT(log.level), .num = 1, .words = cfg_levels},
    {"log.format", CFG_WORD, 0, CFG_AT(log.format), .num = 0, .words = cfg_formats},
    {"log.queue_age_warn_ms", CFG_NUM, 0, CFG_AT(log.queue_age_warn_ms),
     .num = FQ_DEFAULT_QUEUE_AGE_WARN_MS, CFG_MS(1)},
};
#define CFG_N_FIELDS (sizeof(cfg_fields) / sizeof(cfg_fields[0]))
_Static_assert(CFG_N_FIELDS <= CFG_FIELDS_MAX, "raw_config.text holds every setting");

/* The member of c that field i is kept in. */
static void *cfg_at(const fq_config *c, size_t i)
{
    return (char *)(uintptr_t)c + cfg_fields[i].off;
}

static const char *cfg_text_of(const fq_config *c, size_t i)
{
    const char *s;
    memcpy(&s, cfg_at(c, i), sizeof(s));
    return s;
}

/* A NUM or BOOL member, widened to 64 bits. */
static uint64_t cfg_num_of(const void *at, size_t size)
{
    uint32_t v32;
    uint64_t v64;
    bool b;
    if (size == sizeof(b)) {
        memcpy(&b, at, sizeof(b));
        return b;
    }
    if (size == sizeof(v32)) {
        memcpy(&v32, at, sizeof(v32));
        return v32;
    }
    memcpy(&v64, at, sizeof(v64));
    return v64;
}

static void cfg_num_put(void *at, size_t size, uint64_t n)
{
    uint32_t v32 = (uint32_t)n;
    bool b = n != 0;
    memcpy(at, size == sizeof(b) ? (void *)&b : size == sizeof(v32) ? (void *)&v32 : (void *)&n,
           size);
}

/* Read setting i from r into c: its default when absent. */
static fq_status cfg_read(fq_config *c, const raw_config *r, const cfg_ctx *v, size_t i)
{
    const cfg_field *f = &cfg_fields[i];
    const char *s = r->text[i];
    void *at = cfg_at(c, i);
    if (f->type == CFG_LIST)
        return f->read(c, r, v);
    if (f->type == CFG_NUM) {
        uint64_t n = f->num, max = f->max;
        if (f->cap) {
            uint64_t cap = cfg_num_of((const char *)c + f->cap, sizeof(uint32_t));
            max = max < cap ? max : cap;
            n = n < cap ? n : cap;
        }
        fq_status st = cfg_u64(v, NULL, f->key, s, f->min, max, &n);
        cfg_num_put(at, f->size, n);
        return st;
    }
    if (f->type == CFG_WORD || f->type == CFG_BOOL) {
        int k = (int)f->num;
        fq_status st = cfg_word(v, NULL, f->key, s, f->words, &k);
        if (st == FQ_OK && f->type == CFG_BOOL)
            cfg_num_put(at, f->size, (uint64_t)k);
        else if (st == FQ_OK)
            st = cfg_str(f->words[k], false, at);
        return st;
    }
    if (f->required && (!s || (!*s && (f->flags & CFG_EMPTY_NONE))))
        return cfg_fail(v, NULL, f->key, "%s", f->required);
    if (!s)
        s = f->def;
    if (s && f->valid && !f->valid(s))
        return cfg_fail(v, NULL, f->key, f->invalid, s);
    for (size_t j = 0; s && f->unique && j < i; j++)
        if (cfg_fields[j].unique == f->unique && strcmp(s, cfg_text_of(c, j)) == 0)
            return cfg_fail(v, NULL, f->key, "'%s' is %s already", s, cfg_fields[j].key);
    return cfg_str(s, f->flags & CFG_EMPTY_NONE, at);
}

/* Fill c from r, checking everything; on error c is left for the caller to
 * free. */
static fq_status cfg_build(fq_config *c, const raw_config *r, const cfg_ctx *v)
{
    fq_status s = FQ_OK;
    for (size_t i = 0; i < CFG_N_FIELDS && s == FQ_OK; i++) {
        s = cfg_read(c, r, v, i);
        if (s == FQ_OK && cfg_fields[i].then)
            s = cfg_fields[i].then(c, r, v);
    }
    return s;
}

/* ---- libcyaml's schema, built from the declaration ---- */

#define CFG_MAPS_MAX 16         /* the root and the sections the keys name */

/* Each section of the keys is a mapping, in the order of its first key,
 * placed at offset 0 of raw_config (not a struct of its own): its scalars
 * are strings in their rows' slots, its lists libcyaml's sequences of the
 * entry schemas above. */
typedef struct cfg_schema {
    cyaml_schema_field_t fields[CFG_FIELDS_MAX + 2 * CFG_MAPS_MAX];
    size_t n_fields;
    char names[CFG_MAPS_MAX][32]; /* the sections' keys */
    size_t n_names;
    cyaml_schema_value_t root;
} cfg_schema;

/* The mapping of the keys under prefix (plen bytes: "" or "nats."), after
 * those of its sections; NULL if the schema has no room. */
static const cyaml_schema_field_t *cfg_schema_map(cfg_schema *s, const char *prefix,
                                                  size_t plen)
{
    cyaml_schema_field_t mine[CFG_FIELDS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < CFG_N_FIELDS; i++) {
        const cfg_field *f = &cfg_fields[i];
        if (strncmp(f->key, prefix, plen) != 0)
            continue;
        const char *key = f->key + plen, *dot = strchr(key, '.');
        if (f->type == CFG_LIST && !dot) {
            mine[n++] = (cyaml_schema_field_t){
                .key = key, .data_offset = (uint32_t)f->raw_off,
                .count_offset = (uint32_t)f->raw_count_off, .count_size = sizeof(unsigned),
                .value = {.type = CYAML_SEQUENCE,
                          .flags = CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL,
                          .data_size = f->entry->data_size,
                          .sequence = {.entry = f->entry, .min = 0, .max = CYAML_UNLIMITED}}};
        } else if (!dot) {
            mine[n++] = (cyaml_schema_field_t){
                .key = key, .data_offset = (uint32_t)(offsetof(raw_config, text) +
                                                      i * sizeof(char *)),
                .value = {CYAML_VALUE_STRING(CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, char *,
                                             0, CYAML_UNLIMITED)}};
        } else {
            size_t klen = (size_t)(dot - key), j = 0;
            while (j < n && !(mine[j].value.type == CYAML_MAPPING &&
                              strncmp(mine[j].key, key, klen) == 0 && !mine[j].key[klen]))
                j++;
            if (j < n)
                continue;       /* a section seen already */
            if (s->n_names == CFG_MAPS_MAX || klen >= sizeof(s->names[0]))
                return NULL;
            char *name = s->names[s->n_names++];
            memcpy(name, key, klen);
            name[klen] = '\0';
            const cyaml_schema_field_t *sub = cfg_schema_map(s, f->key, plen + klen + 1);
            if (!sub)
                return NULL;
            mine[n++] = (cyaml_schema_field_t){
                .key = name, .data_offset = 0,
                .value = {.type = CYAML_MAPPING, .flags = CYAML_FLAG_OPTIONAL,
                          .data_size = sizeof(raw_config), .mapping = {.fields = sub}}};
        }
    }
    if (s->n_fields + n + 1 > sizeof(s->fields) / sizeof(s->fields[0]))
        return NULL;
    cyaml_schema_field_t *out = &s->fields[s->n_fields];
    memcpy(out, mine, n * sizeof(*out));
    out[n] = (cyaml_schema_field_t)CYAML_FIELD_END;
    s->n_fields += n + 1;
    return out;
}

/* The schema of the whole document into s; false if the declaration does
 * not hold together (a number wider than its member, more rows or sections
 * than CFG_FIELDS_MAX or CFG_MAPS_MAX allow). */
static bool cfg_schema_build(cfg_schema *s)
{
    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < CFG_N_FIELDS; i++)   /* a number must fit its member */
        if (cfg_fields[i].type == CFG_NUM && cfg_fields[i].size < sizeof(uint64_t) &&
            cfg_fields[i].max > UINT32_MAX)
            return false;
    const cyaml_schema_field_t *top = cfg_schema_map(s, "", 0);
    s->root = (cyaml_schema_value_t){
        CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, raw_config, top)};
    return top != NULL;
}

/* The mapping fields of the schema at path, or NULL. */
static const cyaml_schema_field_t *cfg_schema_at(const cyaml_schema_value_t *val,
                                                 const char *path)
{
    fq_yerr_step st[FQ_YERR_STEPS];
    size_t n = fq_yerr_steps(st, path, FQ_YERR_STEPS);
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
        const cyaml_schema_field_t *f = cfg_schema_at(v->schema, at);
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


/* ---- Load ---- */

fq_status fq_config_parse(fq_config *out, const char *name, const char *yaml,
                          size_t len, char *err, size_t errlen)
{
    cfg_schema schema;
    cfg_ctx v = {name, yaml, len, err, errlen, &schema.root};
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
    if (!cfg_schema_build(&schema)) {
        cfg_message(&v, NULL, 0, 0, "internal error: the declaration of the settings does "
                    "not hold together");
        return FQ_EINVAL;
    }
    fq_status s = cfg_scan(&v);
    if (s != FQ_OK)
        return s;
    cyaml_err_t ce = cyaml_load_data((const uint8_t *)yaml, len, &cy, &schema.root,
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
        cyaml_free(&cy, &schema.root, raw, 0);
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
    cfg_ctx v = {path, NULL, 0, err, errlen, NULL};
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


/* True for the settings kept as strings, which free and copy walk. */
static bool cfg_is_text(size_t i)
{
    return cfg_fields[i].type == CFG_TEXT || cfg_fields[i].type == CFG_WORD;
}

/* A list's count. */
static size_t cfg_count_of(const fq_config *c, size_t i)
{
    size_t n;
    memcpy(&n, (const char *)c + cfg_fields[i].count_off, sizeof(n));
    return n;
}

void fq_config_free(fq_config *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < CFG_N_FIELDS; i++) {
        void *p;
        if (!cfg_is_text(i) && cfg_fields[i].type != CFG_LIST)
            continue;
        memcpy(&p, cfg_at(c, i), sizeof(p));
        free(p);
    }
    memset(c, 0, sizeof(*c));
}

fq_status fq_config_copy(fq_config *dst, const fq_config *src)
{
    fq_config d = *src;
    bool ok = true;
    for (size_t i = 0; i < CFG_N_FIELDS; i++) {
        void *p = NULL;     /* a copy or NULL, never src's */
        if (cfg_is_text(i)) {
            const char *s = cfg_text_of(src, i);
            if (s && !(p = strdup(s)))
                ok = false;
        } else if (cfg_fields[i].type == CFG_LIST) {
            size_t n = cfg_count_of(src, i) * cfg_fields[i].elem;
            const void *from;
            memcpy(&from, cfg_at(src, i), sizeof(from));
            if (n && !(p = malloc(n)))
                ok = false;
            else if (n)
                memcpy(p, from, n);
        } else {
            continue;
        }
        memcpy(cfg_at(&d, i), &p, sizeof(p));
    }
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
    fq_classes cl;
    if (s == FQ_OK && fq_classes_parse(&cl, c->scheduler.classes) == FQ_OK)
        fq_policy_set_nclasses(p, cl.n);
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


static void cfg_show_plans(cfg_out *o, const fq_config *c)
{
    for (size_t i = 0; i < c->n_plans; i++)
        cfg_put(o, "%s%s:%u", i ? "," : "", c->plans[i].name, c->plans[i].weight);
}

size_t fq_config_describe(const fq_config *c, char *buf, size_t cap)
{
    cfg_out o = {buf, cap, 0};
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < CFG_N_FIELDS; i++) {
        const cfg_field *f = &cfg_fields[i];
        const char *s = cfg_is_text(i) ? cfg_text_of(c, i) : NULL;
        if ((f->flags & CFG_EMPTY_HIDE) && (!s || !*s))
            continue;
        cfg_put(&o, "%s%s=", i ? " " : "", f->key);
        if (f->type == CFG_LIST && f->show)
            f->show(&o, c);
        else if (f->type == CFG_LIST)
            cfg_put(&o, "%zu", cfg_count_of(c, i));
        else if (f->type == CFG_BOOL)
            cfg_put(&o, "%s", f->words[cfg_num_of(cfg_at(c, i), f->size) != 0]);
        else if (f->type == CFG_NUM && (f->flags & CFG_ZERO_NONE) &&
                 !cfg_num_of(cfg_at(c, i), f->size))
            cfg_put(&o, "none");
        else if (f->type == CFG_NUM)
            cfg_put(&o, "%llu", (unsigned long long)cfg_num_of(cfg_at(c, i), f->size));
        else if (f->flags & CFG_URL)
            cfg_put_url(&o, s ? s : "");
        else if ((f->flags & CFG_EMPTY_OFF) && (!s || !*s))
            cfg_put(&o, "off");
        else
            cfg_put_value(&o, !s ? "none" : f->flags & CFG_SECRET ? "set" : s);
    }
    return o.len;
}

void fq_config_keep_restart(fq_config *c, const fq_config *old)
{
    for (size_t i = 0; i < CFG_N_FIELDS; i++)
        if (cfg_fields[i].flags & CFG_RESTART)
            memcpy(cfg_at(c, i), cfg_at(old, i), cfg_fields[i].size);
}

size_t fq_config_diff_restart(const fq_config *old, const fq_config *new,
                              char *buf, size_t cap)
{
    cfg_out o = {buf, cap, 0};
    size_t n = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < CFG_N_FIELDS; i++) {
        const cfg_field *f = &cfg_fields[i];
        if (!(f->flags & CFG_RESTART))
            continue;
        if (cfg_is_text(i)) {
            const char *a = cfg_text_of(old, i), *b = cfg_text_of(new, i);
            if (strcmp(a ? a : "", b ? b : "") == 0)
                continue;
        } else if (cfg_num_of(cfg_at(old, i), f->size) == cfg_num_of(cfg_at(new, i), f->size)) {
            continue;
        }
        cfg_put(&o, "%s%s", n++ ? "," : "", f->key);
    }
    return n;
}
