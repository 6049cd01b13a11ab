/* scenario.c -- simulated workloads: tenant mixes from YAML scenarios (libcyaml), or replayed from trace CSV.
 *
 * Principles:
 *  - The schema is static and built bottom-up, one table per mapping; an
 *    unknown key, a wrong type or a bad enum value is an error that names
 *    the line and column, never a silent default.
 *  - Loading, validation and generation are separate steps: libcyaml checks
 *    shapes and types, validate() checks ranges and references with a path
 *    to the offending entry, generate() turns processes into runs.
 *  - Generation is deterministic for a seed and local to each process: every
 *    (tenant, process) pair draws from its own stream seeded from the seed,
 *    the tenant id and the process index, so adding a tenant or a process
 *    does not move anyone else's arrivals.
 */
#include "scenario.h"
#include "buf.h"
#include "yamlerr.h"

#include <cyaml/cyaml.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SCN_MAX_TOKENS 1000000000u      /* a run costs at most this */
#define SCN_MAX_WEIGHT 1000000u
#define SCN_MAX_REPLICAS 10000u
#define SCN_MAX_RUNS 5000000.0          /* expected runs a scenario may generate */
#define SCN_MAX_SECONDS (366.0 * 86400) /* durations and times, in seconds */
#define SCN_MAX_RATE 3600000.0          /* runs an hour: 1000 a second */
#define SCN_MAX_FILE_BYTES (64u << 20)  /* a scenario or trace file read whole, at most */
#define SCN_PI 3.14159265358979323846

/* ---- the document, as libcyaml loads it -------------------------------- */

enum scn_dist { SCN_FIXED, SCN_UNIFORM, SCN_LOGNORMAL };
enum scn_estimate { SCN_EST_DECLARED, SCN_EST_NONE };
enum scn_kind { SCN_CONSTANT, SCN_POISSON, SCN_BURST };

struct scn_cost {
    enum scn_dist dist;
    uint32_t tokens;            /* fixed: the cost; lognormal: the median */
    uint32_t min, max;          /* uniform: bounds; lognormal: optional clamp */
    double sigma;               /* lognormal: standard deviation of ln(cost) */
};

/* A workflow's priority class within its tenant (drr-class); absent: batch. */
enum scn_class { SCN_CLASS_BATCH = 0, SCN_CLASS_INTERACTIVE };

struct scn_workflow {
    char *name;
    struct scn_cost cost;
    enum scn_estimate estimate; /* whether producers declare est_tokens */
    enum scn_class cls;         /* its runs' priority class within their tenant */
};

struct scn_arrival {
    enum scn_kind kind;
    char *workflow;             /* NULL: the first workflow */
    double rate_per_hour;       /* constant, poisson */
    double start_s, end_s;      /* constant, poisson: window (end 0: duration); burst: start */
    uint32_t count;             /* burst: runs */
    double duration_s;          /* burst: spread evenly over this */
    uint32_t subtenant;         /* drr-sub: its runs' sub-tenants are numbered
                                   from subtenant + 1 ... */
    uint32_t subtenants;        /* ... this many, in turn; 0: none */
};

struct scn_period {
    double start_s, end_s;
};

struct scn_tenant {
    char *id;
    char *plan;                 /* NULL: weight alone (default 1) */
    uint32_t weight;            /* 0: the plan's */
    uint32_t replicas;          /* 0 or 1: one tenant; n: id-1 .. id-n */
    double error;               /* actual = error x declared; 0: 1 */
    uint32_t max_pending;       /* 0: the plan's, then the scenario's */
    uint32_t max_in_flight;     /* 0: the plan's, then the scenario's cap */
    uint32_t burst_in_flight;   /* 0: the plan's */
    uint32_t tokens_per_minute; /* 0: the plan's */
    double output_share;        /* of each run's tokens, output tokens; 0: none */
    uint32_t proxy;             /* drr-replicas: 1..proxies.count; 0: by partition */
    struct scn_arrival *arrivals;
    unsigned arrivals_count;
    struct scn_period *idle;
    unsigned idle_count;
};

struct scn_plan {
    char *name;
    uint32_t weight;
    uint32_t max_pending;
    uint32_t max_in_flight;
    uint32_t burst_in_flight;
    uint32_t tokens_per_minute;
    uint32_t price_input, price_output, price_cached;
};

struct scn_estimator {
    uint32_t default_tokens;
    uint32_t min_samples;
    uint32_t percentile;
};

struct fq_scenario_spec {
    char *name;
    char *description;
    uint64_t seed;
    double duration_s;
    double horizon_s;
    uint32_t quantum_tokens;
    uint32_t max_est_tokens;
    uint32_t max_pending;
    uint32_t cap_in_flight;
    fq_scenario_capacity capacity;
    fq_scenario_proxies proxies;
    struct scn_estimator estimator;
    struct scn_plan *plans;
    unsigned plans_count;
    struct scn_workflow *workflows;
    unsigned workflows_count;
    struct scn_tenant *tenants;
    unsigned tenants_count;
};

/* ---- the schema, bottom-up --------------------------------------------- */

#define OPT CYAML_FLAG_OPTIONAL
#define STR_FIELD(key, flags, type, member) \
    CYAML_FIELD_STRING_PTR(key, CYAML_FLAG_POINTER | (flags), type, member, 1, CYAML_UNLIMITED)

static const cyaml_strval_t dist_names[] = {
    {"fixed", SCN_FIXED}, {"uniform", SCN_UNIFORM}, {"lognormal", SCN_LOGNORMAL},
};
static const cyaml_strval_t estimate_names[] = {
    {"declared", SCN_EST_DECLARED}, {"none", SCN_EST_NONE},
};
static const cyaml_strval_t class_names[] = {
    {"batch", SCN_CLASS_BATCH}, {"interactive", SCN_CLASS_INTERACTIVE},
};
static const cyaml_strval_t kind_names[] = {
    {"constant", SCN_CONSTANT}, {"poisson", SCN_POISSON}, {"burst", SCN_BURST},
};

static const cyaml_schema_field_t cost_fields[] = {
    CYAML_FIELD_ENUM("dist", CYAML_FLAG_STRICT, struct scn_cost, dist, dist_names,
                     CYAML_ARRAY_LEN(dist_names)),
    CYAML_FIELD_UINT("tokens", OPT, struct scn_cost, tokens),
    CYAML_FIELD_UINT("min", OPT, struct scn_cost, min),
    CYAML_FIELD_UINT("max", OPT, struct scn_cost, max),
    CYAML_FIELD_FLOAT("sigma", OPT, struct scn_cost, sigma),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t workflow_fields[] = {
    STR_FIELD("name", 0, struct scn_workflow, name),
    CYAML_FIELD_MAPPING("cost", CYAML_FLAG_DEFAULT, struct scn_workflow, cost, cost_fields),
    CYAML_FIELD_ENUM("estimate", OPT | CYAML_FLAG_STRICT, struct scn_workflow, estimate,
                     estimate_names, CYAML_ARRAY_LEN(estimate_names)),
    CYAML_FIELD_ENUM("class", OPT | CYAML_FLAG_STRICT, struct scn_workflow, cls,
                     class_names, CYAML_ARRAY_LEN(class_names)),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t workflow_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct scn_workflow, workflow_fields),
};

static const cyaml_schema_field_t arrival_fields[] = {
    CYAML_FIELD_ENUM("kind", CYAML_FLAG_STRICT, struct scn_arrival, kind, kind_names,
                     CYAML_ARRAY_LEN(kind_names)),
    STR_FIELD("workflow", OPT, struct scn_arrival, workflow),
    CYAML_FIELD_FLOAT("rate_per_hour", OPT, struct scn_arrival, rate_per_hour),
    CYAML_FIELD_FLOAT("start_s", OPT, struct scn_arrival, start_s),
    CYAML_FIELD_FLOAT("end_s", OPT, struct scn_arrival, end_s),
    CYAML_FIELD_UINT("count", OPT, struct scn_arrival, count),
    CYAML_FIELD_FLOAT("duration_s", OPT, struct scn_arrival, duration_s),
    CYAML_FIELD_UINT("subtenant", OPT, struct scn_arrival, subtenant),
    CYAML_FIELD_UINT("subtenants", OPT, struct scn_arrival, subtenants),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t arrival_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct scn_arrival, arrival_fields),
};

static const cyaml_schema_field_t period_fields[] = {
    CYAML_FIELD_FLOAT("start_s", CYAML_FLAG_DEFAULT, struct scn_period, start_s),
    CYAML_FIELD_FLOAT("end_s", CYAML_FLAG_DEFAULT, struct scn_period, end_s),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t period_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct scn_period, period_fields),
};

static const cyaml_schema_field_t tenant_fields[] = {
    STR_FIELD("id", 0, struct scn_tenant, id),
    STR_FIELD("plan", OPT, struct scn_tenant, plan),
    CYAML_FIELD_UINT("weight", OPT, struct scn_tenant, weight),
    CYAML_FIELD_UINT("replicas", OPT, struct scn_tenant, replicas),
    CYAML_FIELD_FLOAT("error", OPT, struct scn_tenant, error),
    CYAML_FIELD_UINT("max_pending", OPT, struct scn_tenant, max_pending),
    CYAML_FIELD_UINT("max_in_flight", OPT, struct scn_tenant, max_in_flight),
    CYAML_FIELD_UINT("burst_in_flight", OPT, struct scn_tenant, burst_in_flight),
    CYAML_FIELD_UINT("tokens_per_minute", OPT, struct scn_tenant, tokens_per_minute),
    CYAML_FIELD_FLOAT("output_share", OPT, struct scn_tenant, output_share),
    CYAML_FIELD_UINT("proxy", OPT, struct scn_tenant, proxy),
    CYAML_FIELD_SEQUENCE("arrivals", CYAML_FLAG_POINTER, struct scn_tenant, arrivals,
                         &arrival_schema, 1, CYAML_UNLIMITED),
    CYAML_FIELD_SEQUENCE("idle", CYAML_FLAG_POINTER | OPT, struct scn_tenant, idle,
                         &period_schema, 0, CYAML_UNLIMITED),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t tenant_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct scn_tenant, tenant_fields),
};

static const cyaml_schema_field_t plan_fields[] = {
    STR_FIELD("name", 0, struct scn_plan, name),
    CYAML_FIELD_UINT("weight", CYAML_FLAG_DEFAULT, struct scn_plan, weight),
    CYAML_FIELD_UINT("max_pending", OPT, struct scn_plan, max_pending),
    CYAML_FIELD_UINT("max_in_flight", OPT, struct scn_plan, max_in_flight),
    CYAML_FIELD_UINT("burst_in_flight", OPT, struct scn_plan, burst_in_flight),
    CYAML_FIELD_UINT("tokens_per_minute", OPT, struct scn_plan, tokens_per_minute),
    CYAML_FIELD_UINT("price_input", OPT, struct scn_plan, price_input),
    CYAML_FIELD_UINT("price_output", OPT, struct scn_plan, price_output),
    CYAML_FIELD_UINT("price_cached", OPT, struct scn_plan, price_cached),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t plan_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct scn_plan, plan_fields),
};

static const cyaml_schema_field_t capacity_fields[] = {
    CYAML_FIELD_UINT("workers", OPT, fq_scenario_capacity, workers),
    CYAML_FIELD_FLOAT("worker_tokens_per_s", OPT, fq_scenario_capacity, worker_tokens_per_s),
    CYAML_FIELD_FLOAT("tokens_per_s", OPT, fq_scenario_capacity, tokens_per_s),
    CYAML_FIELD_UINT("max_in_flight", OPT, fq_scenario_capacity, max_in_flight),
    CYAML_FIELD_UINT("max_in_flight_tokens", OPT, fq_scenario_capacity, max_in_flight_tokens),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t proxies_fields[] = {
    CYAML_FIELD_UINT("count", OPT, fq_scenario_proxies, count),
    CYAML_FIELD_UINT("heartbeat_ms", OPT, fq_scenario_proxies, heartbeat_ms),
    CYAML_FIELD_UINT("reserve_runs", OPT, fq_scenario_proxies, reserve_runs),
    CYAML_FIELD_UINT("reserve_tokens", OPT, fq_scenario_proxies, reserve_tokens),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t estimator_fields[] = {
    CYAML_FIELD_UINT("default_tokens", OPT, struct scn_estimator, default_tokens),
    CYAML_FIELD_UINT("min_samples", OPT, struct scn_estimator, min_samples),
    CYAML_FIELD_UINT("percentile", OPT, struct scn_estimator, percentile),
    CYAML_FIELD_END
};

static const cyaml_schema_field_t spec_fields[] = {
    STR_FIELD("name", OPT, struct fq_scenario_spec, name),
    STR_FIELD("description", OPT, struct fq_scenario_spec, description),
    CYAML_FIELD_UINT("seed", OPT, struct fq_scenario_spec, seed),
    CYAML_FIELD_FLOAT("duration_s", CYAML_FLAG_DEFAULT, struct fq_scenario_spec, duration_s),
    CYAML_FIELD_FLOAT("horizon_s", OPT, struct fq_scenario_spec, horizon_s),
    CYAML_FIELD_UINT("quantum_tokens", OPT, struct fq_scenario_spec, quantum_tokens),
    CYAML_FIELD_UINT("max_est_tokens", OPT, struct fq_scenario_spec, max_est_tokens),
    CYAML_FIELD_UINT("max_pending", OPT, struct fq_scenario_spec, max_pending),
    CYAML_FIELD_UINT("cap_in_flight", OPT, struct fq_scenario_spec, cap_in_flight),
    CYAML_FIELD_MAPPING("capacity", CYAML_FLAG_DEFAULT, struct fq_scenario_spec, capacity,
                        capacity_fields),
    CYAML_FIELD_MAPPING("proxies", OPT, struct fq_scenario_spec, proxies, proxies_fields),
    CYAML_FIELD_MAPPING("estimator", OPT, struct fq_scenario_spec, estimator, estimator_fields),
    CYAML_FIELD_SEQUENCE("plans", CYAML_FLAG_POINTER | OPT, struct fq_scenario_spec, plans,
                         &plan_schema, 0, CYAML_UNLIMITED),
    CYAML_FIELD_SEQUENCE("workflows", CYAML_FLAG_POINTER, struct fq_scenario_spec, workflows,
                         &workflow_schema, 1, CYAML_UNLIMITED),
    CYAML_FIELD_SEQUENCE("tenants", CYAML_FLAG_POINTER, struct fq_scenario_spec, tenants,
                         &tenant_schema, 1, CYAML_UNLIMITED),
    CYAML_FIELD_END
};
static const cyaml_schema_value_t spec_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, struct fq_scenario_spec, spec_fields),
};

/* ---- errors ------------------------------------------------------------ */

/* Write the message to err. Returns FQ_EINVAL, which most callers return. */
static fq_status fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return FQ_EINVAL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return FQ_EINVAL;
}

/* ---- validation -------------------------------------------------------- */

static const struct scn_plan *find_plan(const struct fq_scenario_spec *s, const char *name)
{
    for (unsigned i = 0; i < s->plans_count; i++)
        if (strcmp(s->plans[i].name, name) == 0)
            return &s->plans[i];
    return NULL;
}

static long find_workflow(const struct fq_scenario_spec *s, const char *name)
{
    if (!name)
        return 0;
    for (unsigned i = 0; i < s->workflows_count; i++)
        if (strcmp(s->workflows[i].name, name) == 0)
            return (long)i;
    return -1;
}

static int seconds_ok(double v)
{
    return isfinite(v) && v >= 0 && v <= SCN_MAX_SECONDS;
}

static fq_status check_cost(const struct scn_workflow *w, char *err, size_t errlen,
                            const char *where)
{
    const struct scn_cost *c = &w->cost;
    const char *why = NULL;
    switch (c->dist) {
    case SCN_FIXED:
        if (c->tokens < 1 || c->tokens > SCN_MAX_TOKENS)
            why = "fixed cost needs tokens from 1 to 1000000000";
        break;
    case SCN_UNIFORM:
        if (c->min < 1 || c->max < c->min || c->max > SCN_MAX_TOKENS)
            why = "uniform cost needs 1 <= min <= max <= 1000000000";
        break;
    case SCN_LOGNORMAL:
        if (c->tokens < 1 || c->tokens > SCN_MAX_TOKENS)
            why = "lognormal cost needs tokens (the median) from 1 to 1000000000";
        else if (!isfinite(c->sigma) || c->sigma < 0 || c->sigma > 4)
            why = "lognormal cost needs sigma from 0 to 4";
        else if (c->max && (c->max < c->min || c->max > SCN_MAX_TOKENS))
            why = "lognormal clamp needs min <= max <= 1000000000";
        break;
    }
    if (why)
        return fail(err, errlen, "%s: workflow %s: %s", where, w->name, why);
    return FQ_OK;
}

/* Runs a process is expected to generate, for the size bound. */
static double expected_runs(const struct scn_arrival *a, double duration)
{
    if (a->kind == SCN_BURST)
        return a->count;
    double end = a->end_s > 0 ? a->end_s : duration;
    return end > a->start_s ? a->rate_per_hour * (end - a->start_s) / 3600.0 : 0;
}

static fq_status check_arrival(const struct fq_scenario_spec *s, const struct scn_tenant *t,
                               unsigned k, char *err, size_t errlen, const char *where)
{
    const struct scn_arrival *a = &t->arrivals[k];
    const char *why = NULL;
    if (find_workflow(s, a->workflow) < 0)
        why = "names a workflow that is not defined";
    else if (!seconds_ok(a->start_s) || !seconds_ok(a->end_s) || !seconds_ok(a->duration_s))
        why = "times must be seconds from 0 to a year";
    else if (a->kind == SCN_BURST && (a->count < 1 || a->rate_per_hour != 0 || a->end_s != 0))
        why = "a burst takes start_s, count >= 1 and duration_s";
    else if (a->kind != SCN_BURST &&
             (!isfinite(a->rate_per_hour) || a->rate_per_hour <= 0 ||
              a->rate_per_hour > SCN_MAX_RATE || a->count || a->duration_s != 0))
        why = "a rate takes rate_per_hour (0 to 3600000 exclusive of 0), start_s and end_s";
    else if (a->kind != SCN_BURST && a->end_s != 0 && a->end_s <= a->start_s)
        why = "end_s must be after start_s";
    if (why)
        return fail(err, errlen, "%s: tenant %s: arrivals[%u]: %s", where, t->id, k, why);
    return FQ_OK;
}

static int id_taken(const struct fq_scenario_spec *s, unsigned upto, const char *id)
{
    for (unsigned i = 0; i < upto; i++)
        if (strcmp(s->tenants[i].id, id) == 0)
            return 1;
    return 0;
}

static fq_status check_tenant(const struct fq_scenario_spec *s, unsigned i, double *runs,
                              char *err, size_t errlen, const char *where)
{
    const struct scn_tenant *t = &s->tenants[i];
    const char *why = NULL;
    size_t idlen = strlen(t->id);
    unsigned replicas = t->replicas ? t->replicas : 1;
    if (!fq_tenant_id_valid(t->id, idlen) || (t->replicas && idlen + 6 > FQ_TENANT_MAX))
        why = "id must be " FQ_TENANT_RULE " (58 bytes with replicas)";
    else if (id_taken(s, i, t->id))
        why = "id is listed twice";
    else if (t->plan && !find_plan(s, t->plan))
        why = "names a plan that is not defined";
    else if (t->weight > SCN_MAX_WEIGHT)
        why = "weight must be at most 1000000";
    else if (replicas > SCN_MAX_REPLICAS)
        why = "replicas must be at most 10000";
    else if (!isfinite(t->error) || t->error < 0 || t->error > 1000)
        why = "error (actual / declared) must be above 0 and at most 1000";
    else if (!isfinite(t->output_share) || t->output_share < 0 || t->output_share > 1)
        why = "output_share must be from 0 to 1";
    else if (t->proxy > (s->proxies.count ? s->proxies.count : 1))
        why = "proxy must be at most proxies.count (0: by partition)";
    if (why)
        return fail(err, errlen, "%s: tenant %s: %s", where, t->id, why);
    for (unsigned k = 0; k < t->idle_count; k++) {
        const struct scn_period *p = &t->idle[k];
        if (!seconds_ok(p->start_s) || !seconds_ok(p->end_s) || p->end_s <= p->start_s)
            return fail(err, errlen, "%s: tenant %s: idle[%u]: needs 0 <= start_s < end_s",
                        where, t->id, k);
    }
    for (unsigned k = 0; k < t->arrivals_count; k++) {
        if (check_arrival(s, t, k, err, errlen, where) != FQ_OK)
            return FQ_EINVAL;
        *runs += expected_runs(&t->arrivals[k], s->duration_s) * replicas;
    }
    return FQ_OK;
}

static fq_status check_capacity(const fq_scenario_capacity *c, char *err, size_t errlen,
                                const char *where)
{
    int pool = c->workers > 0;
    int budget = c->tokens_per_s != 0;
    const char *why = NULL;
    if (pool == budget)
        why = "give workers and worker_tokens_per_s, or tokens_per_s and max_in_flight";
    else if (pool && (!isfinite(c->worker_tokens_per_s) || c->worker_tokens_per_s <= 0 ||
                      c->worker_tokens_per_s > 1e9 || c->workers > 100000))
        why = "workers (1 to 100000) need worker_tokens_per_s above 0";
    else if (pool && c->max_in_flight)
        why = "a pool's window is its workers: max_in_flight is for a token budget";
    else if (budget && (!isfinite(c->tokens_per_s) || c->tokens_per_s < 0 ||
                        c->tokens_per_s > 1e12 || c->max_in_flight < 1 ||
                        c->max_in_flight > 100000))
        why = "a token budget needs tokens_per_s above 0 and max_in_flight from 1 to 100000";
    if (why)
        return fail(err, errlen, "%s: capacity: %s", where, why);
    return FQ_OK;
}

/* Ranges and references the schema cannot express. On error err names the
 * entry and the rule. */
static fq_status validate(const struct fq_scenario_spec *s, char *err, size_t errlen,
                          const char *where)
{
    if (s->name && !fq_name_valid(s->name, strlen(s->name)))
        return fail(err, errlen, "%s: name: 1 to 64 of [A-Za-z0-9_-]", where);
    if (!seconds_ok(s->duration_s) || s->duration_s <= 0 || !seconds_ok(s->horizon_s) ||
        (s->horizon_s != 0 && s->horizon_s < s->duration_s))
        return fail(err, errlen, "%s: duration_s must be above 0 and horizon_s, if given, "
                    "at least duration_s (both at most a year)", where);
    if (s->estimator.percentile > 99 || s->estimator.min_samples > (1u << 20))
        return fail(err, errlen, "%s: estimator: percentile is 0 (the mean) to 99, "
                    "min_samples at most 1048576", where);
    if (s->quantum_tokens > 1000000000u)
        return fail(err, errlen, "%s: quantum_tokens must be at most 1000000000", where);
    if (check_capacity(&s->capacity, err, errlen, where) != FQ_OK)
        return FQ_EINVAL;
    if (s->proxies.count > 1000 || s->proxies.heartbeat_ms > 60000 ||
        s->proxies.reserve_runs > 100000)
        return fail(err, errlen, "%s: proxies: count at most 1000, heartbeat_ms at most "
                    "60000, reserve_runs at most 100000", where);
    for (unsigned i = 0; i < s->plans_count; i++) {
        const struct scn_plan *p = &s->plans[i];
        if (!fq_name_valid(p->name, strlen(p->name)) || p->weight < 1 ||
            p->weight > SCN_MAX_WEIGHT || find_plan(s, p->name) != p)
            return fail(err, errlen, "%s: plan %s: needs a unique name of [A-Za-z0-9_-] "
                        "and a weight from 1 to 1000000", where, p->name);
    }
    for (unsigned i = 0; i < s->workflows_count; i++) {
        const struct scn_workflow *w = &s->workflows[i];
        if (strlen(w->name) > FQ_WORKFLOW_MAX || strpbrk(w->name, ",\"\r\n") ||
            find_workflow(s, w->name) != (long)i)
            return fail(err, errlen, "%s: workflow %s: needs a unique name of at most %d "
                        "bytes without commas or quotes", where, w->name, FQ_WORKFLOW_MAX);
        if (check_cost(w, err, errlen, where) != FQ_OK)
            return FQ_EINVAL;
    }
    double runs = 0;
    for (unsigned i = 0; i < s->tenants_count; i++)
        if (check_tenant(s, i, &runs, err, errlen, where) != FQ_OK)
            return FQ_EINVAL;
    if (runs > SCN_MAX_RUNS)
        return fail(err, errlen, "%s: the arrivals would generate about %.0f runs; "
                    "at most %.0f", where, runs, SCN_MAX_RUNS);
    return FQ_OK;
}

/* ---- random numbers ---------------------------------------------------- */

/* splitmix64: small, and the same sequence for a seed on every machine. */
static uint64_t rng_next(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so logarithms stay finite. */
static double rng_unit(uint64_t *st)
{
    return ((double)(rng_next(st) >> 11) + 0.5) * 0x1.0p-53;
}

/* The stream of process k of tenant id. */
static uint64_t rng_stream(uint64_t seed, const char *id, unsigned k)
{
    uint64_t st = seed ^ fq_fnv1a(id);
    st = rng_next(&st) ^ ((uint64_t)k << 32);
    return rng_next(&st);
}

static uint32_t clamp_tokens(double v, double lo, double hi)
{
    if (!(v >= lo))
        v = lo;
    if (v > hi)
        v = hi;
    return (uint32_t)llround(v);
}

static uint32_t draw_cost(const struct scn_cost *c, uint64_t *st)
{
    switch (c->dist) {
    case SCN_UNIFORM:
        return c->min + (uint32_t)(rng_next(st) % ((uint64_t)c->max - c->min + 1));
    case SCN_LOGNORMAL: {
        /* Box-Muller: one standard normal from two uniforms. */
        double n = sqrt(-2.0 * log(rng_unit(st))) * cos(2.0 * SCN_PI * rng_unit(st));
        double v = c->tokens * exp(c->sigma * n);
        return clamp_tokens(v, c->min ? c->min : 1, c->max ? c->max : SCN_MAX_TOKENS);
    }
    case SCN_FIXED:
    default:
        return c->tokens;
    }
}

/* ---- generation -------------------------------------------------------- */

/* A generated run with its sort key: time, then tenant, process, sequence. */
typedef struct gen_run {
    fq_scenario_run r;
    uint32_t process;
    uint32_t seq;
} gen_run;

typedef struct gen_buf {
    gen_run *v;
    size_t n, cap;
} gen_buf;

static int gen_push(gen_buf *b, const gen_run *g)
{
    if (fq_grow(&b->v, &b->cap, b->n + 1, sizeof(*b->v)) != FQ_OK)
        return -1;
    b->v[b->n++] = *g;
    return 0;
}

static int gen_cmp(const void *pa, const void *pb)
{
    const gen_run *a = pa, *b = pb;
    if (a->r.at != b->r.at)
        return a->r.at < b->r.at ? -1 : 1;
    if (a->r.tenant != b->r.tenant)
        return a->r.tenant < b->r.tenant ? -1 : 1;
    if (a->process != b->process)
        return a->process < b->process ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int idle_at(const struct scn_tenant *t, double at)
{
    for (unsigned i = 0; i < t->idle_count; i++)
        if (at >= t->idle[i].start_s && at < t->idle[i].end_s)
            return 1;
    return 0;
}

/* The time of the next arrival of process a after `at` (the first if i is
 * 0), or a negative number when it has no more. */
static double next_time(const struct scn_arrival *a, double at, uint32_t i, double end,
                        uint64_t *st)
{
    double t;
    switch (a->kind) {
    case SCN_BURST:
        if (i >= a->count)
            return -1;
        t = a->start_s + a->duration_s * i / a->count;
        break;
    case SCN_POISSON:
        t = (i ? at : a->start_s) - log(rng_unit(st)) * 3600.0 / a->rate_per_hour;
        break;
    case SCN_CONSTANT:
    default:
        t = a->start_s + 3600.0 * i / a->rate_per_hour;
        break;
    }
    return t < end ? t : -1;
}

static int gen_process(gen_buf *b, const struct fq_scenario_spec *s, const fq_scenario *sc,
                       const struct scn_tenant *st, uint32_t tenant, uint32_t k)
{
    const struct scn_arrival *a = &st->arrivals[k];
    long wf = find_workflow(s, a->workflow);
    const struct scn_workflow *w = &s->workflows[wf];
    double error = st->error > 0 ? st->error : 1.0;
    double end = a->kind != SCN_BURST && a->end_s > 0 ? a->end_s : s->duration_s;
    if (end > s->duration_s)
        end = s->duration_s;
    uint64_t rs = rng_stream(sc->seed, sc->tenants[tenant].id, k);
    double t = 0;
    for (uint32_t i = 0; (t = next_time(a, t, i, end, &rs)) >= 0; i++) {
        uint32_t cost = draw_cost(&w->cost, &rs);
        if (idle_at(st, t))
            continue;
        gen_run g = {
            .r = {.at = (uint64_t)llround(t * 1000.0), .tenant = tenant,
                  .workflow = (uint32_t)wf,
                  .est = w->estimate == SCN_EST_NONE ? 0 : cost,
                  .actual = clamp_tokens(cost * error, 1, SCN_MAX_TOKENS),
                  .interactive = w->cls == SCN_CLASS_INTERACTIVE,
                  .sub = a->subtenants ? a->subtenant + 1 + i % a->subtenants : 0},
            .process = k, .seq = i,
        };
        if (gen_push(b, &g) != 0)
            return -1;
    }
    return 0;
}

/* The spec tenant behind expanded tenant i. */
static const struct scn_tenant *spec_tenant_of(const struct fq_scenario_spec *s, size_t i)
{
    for (unsigned k = 0; k < s->tenants_count; k++) {
        unsigned n = s->tenants[k].replicas ? s->tenants[k].replicas : 1;
        if (i < n)
            return &s->tenants[k];
        i -= n;
    }
    return NULL;
}

fq_status fq_scenario_generate(fq_scenario *sc, uint64_t seed)
{
    const struct fq_scenario_spec *s = sc->spec;
    if (!s)
        return FQ_EINVAL;
    uint64_t old = sc->seed;
    sc->seed = seed;
    gen_buf b = {0};
    for (size_t i = 0; i < sc->n_tenants; i++) {
        const struct scn_tenant *st = spec_tenant_of(s, i);
        for (uint32_t k = 0; k < st->arrivals_count; k++) {
            if (gen_process(&b, s, sc, st, (uint32_t)i, k) != 0) {
                free(b.v);
                sc->seed = old;
                return FQ_ENOMEM;
            }
        }
    }
    fq_scenario_run *runs = malloc((b.n ? b.n : 1) * sizeof(*runs));
    if (!runs) {
        free(b.v);
        sc->seed = old;
        return FQ_ENOMEM;
    }
    if (b.n)        /* no runs: b.v is NULL, which qsort must not be given */
        qsort(b.v, b.n, sizeof(*b.v), gen_cmp);
    for (size_t i = 0; i < b.n; i++)
        runs[i] = b.v[i].r;
    free(b.v);
    free(sc->runs);
    sc->runs = runs;
    sc->n_runs = b.n;
    return FQ_OK;
}

/* ---- building ---------------------------------------------------------- */

/* libcyaml's configuration without logging: for freeing. Loading adds a
 * log function that keeps what libcyaml says for the error message. */
static const cyaml_config_t cy_quiet = {
    .log_fn = NULL, .mem_fn = cyaml_mem, .log_level = CYAML_LOG_ERROR,
};

static void spec_free(struct fq_scenario_spec *s)
{
    if (s)
        cyaml_free(&cy_quiet, &spec_schema, s, 0);
}

static fq_scenario *scenario_alloc(const char *name)
{
    fq_scenario *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return NULL;
    snprintf(sc->name, sizeof(sc->name), "%s", name);
    sc->quantum = 1000;
    sc->max_est = 1000000;
    sc->estimator.default_tokens = 1000;
    sc->estimator.min_samples = 8;
    return sc;
}

/* A scenario's name from its file name: the base name without extension,
 * with anything but [A-Za-z0-9_-] made '_', so that reports need no
 * quoting. */
static void name_from_path(char *out, size_t cap, const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strcspn(b, ".");
    if (n >= cap)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = fq_name_valid(b + i, 1) ? b[i] : '_';
    out[n] = '\0';
    if (!n)
        snprintf(out, cap, "scenario");
}

static fq_status build_tenants(fq_scenario *sc, const struct fq_scenario_spec *s)
{
    size_t n = 0;
    for (unsigned k = 0; k < s->tenants_count; k++)
        n += s->tenants[k].replicas ? s->tenants[k].replicas : 1;
    sc->tenants = calloc(n, sizeof(*sc->tenants));
    if (!sc->tenants)
        return FQ_ENOMEM;
    for (unsigned k = 0; k < s->tenants_count; k++) {
        const struct scn_tenant *st = &s->tenants[k];
        const struct scn_plan *p = st->plan ? find_plan(s, st->plan) : NULL;
        unsigned reps = st->replicas ? st->replicas : 1;
        for (unsigned r = 1; r <= reps; r++) {
            fq_scenario_tenant *t = &sc->tenants[sc->n_tenants++];
            if (st->replicas)
                snprintf(t->id, sizeof(t->id), "%s-%0*u", st->id,
                         reps >= 1000 ? 4 : reps >= 100 ? 3 : 2, r);
            else
                snprintf(t->id, sizeof(t->id), "%s", st->id);
            snprintf(t->plan, sizeof(t->plan), "%s", p ? p->name : "default");
            t->weight = st->weight ? st->weight : p ? p->weight : 1;
            t->max_pending = st->max_pending ? st->max_pending
                           : p && p->max_pending ? p->max_pending : s->max_pending;
            t->max_in_flight = st->max_in_flight ? st->max_in_flight
                             : p && p->max_in_flight ? p->max_in_flight : s->cap_in_flight;
            t->burst_in_flight = st->burst_in_flight ? st->burst_in_flight
                               : p ? p->burst_in_flight : 0;
            t->tokens_per_minute = st->tokens_per_minute ? st->tokens_per_minute
                                 : p ? p->tokens_per_minute : 0;
            t->output_share = st->output_share;
            t->proxy = st->proxy;
            if (p)
                t->prices = (fq_prices){p->price_input, p->price_output, p->price_cached};
        }
    }
    return FQ_OK;
}

/* Replicas may collide with a listed id ("a" x2 and "a-1"). */
static int tenants_unique(const fq_scenario *sc, char *err, size_t errlen, const char *where)
{
    for (size_t i = 0; i < sc->n_tenants; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(sc->tenants[i].id, sc->tenants[j].id) == 0) {
                fail(err, errlen, "%s: tenant %s: id is listed twice", where,
                     sc->tenants[i].id);
                return 0;
            }
    return 1;
}

/* The scenario's numbers as the spec says, defaults kept where it says
 * nothing. */
static void build_settings(fq_scenario *sc, const struct fq_scenario_spec *s)
{
    sc->seed = s->seed;
    sc->duration = (uint64_t)llround(s->duration_s * 1000.0);
    sc->horizon = (uint64_t)llround(s->horizon_s * 1000.0);
    if (s->quantum_tokens)
        sc->quantum = s->quantum_tokens;
    if (s->max_est_tokens)
        sc->max_est = s->max_est_tokens;
    sc->max_pending = s->max_pending;
    sc->cap_in_flight = s->cap_in_flight;
    sc->capacity = s->capacity;
    sc->proxies = s->proxies;
    if (sc->capacity.workers)
        sc->capacity.max_in_flight = sc->capacity.workers;
    if (s->estimator.default_tokens)
        sc->estimator.default_tokens = s->estimator.default_tokens;
    if (s->estimator.min_samples)
        sc->estimator.min_samples = s->estimator.min_samples;
    sc->estimator.percentile = s->estimator.percentile;
}

/* The spec's plans into sc->plans (room for them made). */
static void build_plans(fq_scenario *sc, const struct fq_scenario_spec *s)
{
    for (unsigned i = 0; i < s->plans_count; i++) {
        fq_scenario_plan *p = &sc->plans[sc->n_plans++];
        snprintf(p->name, sizeof(p->name), "%s", s->plans[i].name);
        p->weight = s->plans[i].weight;
        p->max_pending = s->plans[i].max_pending;
        p->max_in_flight = s->plans[i].max_in_flight;
        p->burst_in_flight = s->plans[i].burst_in_flight;
        p->tokens_per_minute = s->plans[i].tokens_per_minute;
        p->prices = (fq_prices){s->plans[i].price_input, s->plans[i].price_output,
                                s->plans[i].price_cached};
    }
}

static fq_status build(fq_scenario **out, struct fq_scenario_spec *s, const char *where,
                       char *err, size_t errlen)
{
    char name[FQ_SCENARIO_NAME_MAX + 1];
    if (s->name)
        snprintf(name, sizeof(name), "%s", s->name);
    else
        name_from_path(name, sizeof(name), where);
    fq_scenario *sc = scenario_alloc(name);
    if (!sc)
        return FQ_ENOMEM;
    sc->spec = s;
    build_settings(sc, s);
    fq_status st = FQ_ENOMEM;
    sc->plans = calloc(s->plans_count ? s->plans_count : 1, sizeof(*sc->plans));
    sc->workflows = calloc(s->workflows_count, sizeof(*sc->workflows));
    if (!sc->plans || !sc->workflows || build_tenants(sc, s) != FQ_OK)
        goto fail;
    build_plans(sc, s);
    for (unsigned i = 0; i < s->workflows_count; i++)
        snprintf(sc->workflows[sc->n_workflows++], FQ_WORKFLOW_MAX + 1, "%s",
                 s->workflows[i].name);
    if (!tenants_unique(sc, err, errlen, where)) {
        st = FQ_EINVAL;
        goto fail;
    }
    if ((st = fq_scenario_generate(sc, s->seed)) != FQ_OK)
        goto fail;
    *out = sc;
    return FQ_OK;
fail:
    sc->spec = NULL;            /* the caller frees it */
    fq_scenario_free(sc);
    return st;
}

fq_status fq_scenario_parse(fq_scenario **out, const char *name, const char *yaml,
                            size_t len, char *err, size_t errlen)
{
    *out = NULL;
    fq_yerr_log log = {0};
    cyaml_config_t cfg = cy_quiet;
    cfg.log_fn = fq_yerr_log_fn;
    cfg.log_ctx = &log;
    struct fq_scenario_spec *s = NULL;
    cyaml_err_t e = cyaml_load_data((const uint8_t *)yaml, len, &cfg, &spec_schema,
                                    (cyaml_data_t **)&s, NULL);
    if (e != CYAML_OK) {
        char path[FQ_YERR_PATH_MAX], key[256];
        size_t line, col;
        fq_yerr_place(&log, yaml, len, 1, path, sizeof path, key, sizeof key, &line, &col);
        fq_yerr_message(err, errlen, name, line, col, NULL,
                        log.reason[0] ? log.reason : cyaml_strerror(e));
        return e == CYAML_ERR_OOM ? FQ_ENOMEM : FQ_EINVAL;
    }
    if (!s)             /* libcyaml's answer to a file without a document */
        return fail(err, errlen, "%s: no scenario: the file is empty or only comments", name);
    fq_status st = validate(s, err, errlen, name);
    if (st == FQ_OK)
        st = build(out, s, name, err, errlen);
    if (st != FQ_OK)
        spec_free(s);
    return st;
}

fq_status fq_scenario_load(fq_scenario **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        return FQ_EIO;
    }
    fq_buf b = {0};
    for (;;) {
        size_t room = b.cap > b.len + 1 ? b.cap - b.len - 1 : 0;
        if (room == 0) {
            room = b.cap ? b.cap : 8192;
            if (b.len + room > SCN_MAX_FILE_BYTES || fq_buf_reserve(&b, room) != FQ_OK) {
                fq_buf_free(&b);
                fclose(f);
                fail(err, errlen, "%s: too large or out of memory", path);
                return FQ_ENOMEM;
            }
        }
        size_t n = fread(b.p + b.len, 1, room, f);
        b.len += n;
        if (n == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    fq_status st = FQ_EIO;
    if (bad)
        fail(err, errlen, "%s: read error", path);
    else
        st = fq_scenario_parse(out, path, b.p, b.len, err, errlen);
    fq_buf_free(&b);
    return st;
}

fq_status fq_scenario_defaults(fq_scenario **out, const char *name)
{
    char clean[FQ_SCENARIO_NAME_MAX + 1];
    name_from_path(clean, sizeof(clean), name);
    *out = scenario_alloc(clean);
    if (!*out)
        return FQ_ENOMEM;
    (*out)->capacity = (fq_scenario_capacity){
        .workers = 10, .worker_tokens_per_s = 25, .max_in_flight = 10,
    };
    return FQ_OK;
}

void fq_scenario_free(fq_scenario *sc)
{
    if (!sc)
        return;
    spec_free(sc->spec);
    free(sc->runs);
    free(sc->workflows);
    free(sc->tenants);
    free(sc->plans);
    free(sc);
}

long fq_scenario_tenant_index(const fq_scenario *sc, const char *id)
{
    for (size_t i = 0; i < sc->n_tenants; i++)
        if (strcmp(sc->tenants[i].id, id) == 0)
            return (long)i;
    return -1;
}

/* ---- traces ------------------------------------------------------------ */

enum { COL_TENANT, COL_AT, COL_WORKFLOW, COL_EST, COL_ACTUAL, COL_PLAN, NCOLS };
static const char *const col_names[NCOLS] = {
    "tenant", "submitted_at_ms", "workflow", "est_tokens", "actual_tokens", "plan",
};

/* What a trace is read into before it replaces the scenario's. */
typedef struct trace {
    fq_scenario_tenant *tenants;
    size_t n_tenants, cap_tenants;
    char (*workflows)[FQ_WORKFLOW_MAX + 1];
    size_t n_workflows, cap_workflows;
    gen_buf runs;
} trace;

static void trace_free(trace *t)
{
    free(t->tenants);
    free(t->workflows);
    free(t->runs.v);
}

/* Split line at commas into at most max fields; returns the count, or -1
 * if there are more or a field is quoted. */
static int split(char *line, char **f, int max)
{
    int n = 0;
    for (char *p = line;; p++) {
        if (n == max)
            return -1;
        f[n++] = p;
        p += strcspn(p, ",\"");
        if (*p == '"')
            return -1;
        if (!*p)
            return n;
        *p = '\0';
    }
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return -1;
    *out = v;
    return 0;
}

static long trace_tenant(trace *t, const fq_scenario *sc, const char *id, const char *plan,
                         const char **why)
{
    for (size_t i = 0; i < t->n_tenants; i++) {
        if (strcmp(t->tenants[i].id, id) == 0) {
            if (plan && strcmp(t->tenants[i].plan, plan) != 0) {
                *why = "the tenant's plan differs from its earlier rows";
                return -1;
            }
            return (long)i;
        }
    }
    if (fq_grow(&t->tenants, &t->cap_tenants, t->n_tenants + 1, sizeof(*t->tenants)) != FQ_OK) {
        *why = "out of memory";
        return -1;
    }
    fq_scenario_tenant *nt = &t->tenants[t->n_tenants];
    long known = fq_scenario_tenant_index(sc, id);
    if (known >= 0 && (!plan || strcmp(sc->tenants[known].plan, plan) == 0)) {
        /* A tenant the scenario lists keeps its weight and limits. */
        *nt = sc->tenants[known];
        return (long)t->n_tenants++;
    }
    *nt = (fq_scenario_tenant){.weight = 1, .max_pending = sc->max_pending,
                               .max_in_flight = sc->cap_in_flight};
    snprintf(nt->id, sizeof(nt->id), "%s", id);
    snprintf(nt->plan, sizeof(nt->plan), "%s", plan ? plan : "default");
    const fq_scenario_plan *p = NULL;
    for (size_t i = 0; i < sc->n_plans; i++)
        if (strcmp(sc->plans[i].name, nt->plan) == 0)
            p = &sc->plans[i];
    /* "default" is the plan of tenants that name none. */
    if (plan && sc->n_plans && !p && strcmp(plan, "default") != 0) {
        *why = "the plan is not defined in the scenario";
        return -1;
    }
    if (p) {
        nt->weight = p->weight;
        if (p->max_pending)
            nt->max_pending = p->max_pending;
        if (p->max_in_flight)
            nt->max_in_flight = p->max_in_flight;
        nt->burst_in_flight = p->burst_in_flight;
        nt->tokens_per_minute = p->tokens_per_minute;
        nt->prices = p->prices;
    }
    return (long)t->n_tenants++;
}

static long trace_workflow(trace *t, const char *name)
{
    for (size_t i = 0; i < t->n_workflows; i++)
        if (strcmp(t->workflows[i], name) == 0)
            return (long)i;
    if (fq_grow(&t->workflows, &t->cap_workflows, t->n_workflows + 1,
                sizeof(*t->workflows)) != FQ_OK)
        return -1;
    snprintf(t->workflows[t->n_workflows], FQ_WORKFLOW_MAX + 1, "%s", name);
    return (long)t->n_workflows++;
}

/* The header names the columns; plan is optional, any order. */
static const char *trace_header(char *line, int *col)
{
    char *f[NCOLS + 1];
    int n = split(line, f, NCOLS + 1);
    if (n < 0)
        return "the header has too many columns";
    for (int c = 0; c < NCOLS; c++)
        col[c] = -1;
    for (int i = 0; i < n; i++) {
        int c = 0;
        while (c < NCOLS && strcmp(f[i], col_names[c]) != 0)
            c++;
        if (c == NCOLS || col[c] >= 0)
            return "the header must name tenant, submitted_at_ms, workflow, est_tokens, "
                   "actual_tokens and optionally plan, once each";
        col[c] = i;
    }
    for (int c = 0; c < COL_PLAN; c++)
        if (col[c] < 0)
            return "the header must name tenant, submitted_at_ms, workflow, est_tokens, "
                   "actual_tokens and optionally plan, once each";
    return NULL;
}

static const char *trace_row(trace *t, const fq_scenario *sc, char *line, const int *col,
                             uint32_t seq)
{
    char *f[NCOLS + 1];
    int want = col[COL_PLAN] >= 0 ? NCOLS : NCOLS - 1;
    if (split(line, f, NCOLS + 1) != want)
        return "wrong number of fields, or a quoted field";
    const char *id = f[col[COL_TENANT]], *wf = f[col[COL_WORKFLOW]];
    const char *plan = col[COL_PLAN] >= 0 && *f[col[COL_PLAN]] ? f[col[COL_PLAN]] : NULL;
    uint64_t at, est, actual;
    if (!fq_tenant_id_valid(id, strlen(id)))
        return "tenant must be " FQ_TENANT_RULE;
    if (plan && !fq_name_valid(plan, strlen(plan)))
        return "plan must be 1 to 64 of [A-Za-z0-9_-]";
    if (strlen(wf) > FQ_WORKFLOW_MAX)
        return "workflow is longer than 64 bytes";
    if (parse_u64(f[col[COL_AT]], (uint64_t)1 << 53, &at))
        return "submitted_at_ms must be an integer from 0 to 2^53";
    if (parse_u64(f[col[COL_EST]], UINT32_MAX, &est))
        return "est_tokens must be an integer from 0 (none) to 4294967295";
    if (parse_u64(f[col[COL_ACTUAL]], UINT32_MAX, &actual) || actual == 0)
        return "actual_tokens must be an integer from 1 to 4294967295";
    const char *why = "out of memory";
    long ti = trace_tenant(t, sc, id, plan, &why);
    if (ti < 0)
        return why;
    long wi = trace_workflow(t, wf);
    if (wi < 0)
        return "out of memory";
    gen_run g = {.r = {.at = at, .tenant = (uint32_t)ti, .workflow = (uint32_t)wi,
                       .est = (uint32_t)est, .actual = (uint32_t)actual},
                 .seq = seq};
    if (gen_push(&t->runs, &g) != 0)
        return "out of memory";
    return NULL;
}

/* Rows keep their file order among equal times. */
static int trace_cmp(const void *pa, const void *pb)
{
    const gen_run *a = pa, *b = pb;
    if (a->r.at != b->r.at)
        return a->r.at < b->r.at ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Tenants the scenario lists come first, in its order, then the others as
 * they first appear: replaying a scenario's own trace then reproduces it,
 * down to the order in which round robin sweeps. Returns the map from old
 * index to new, and reorders t's tenants; NULL if out of memory. */
static uint32_t *trace_order(trace *t, const fq_scenario *sc)
{
    size_t n = t->n_tenants;
    uint32_t *map = malloc((n ? n : 1) * sizeof(*map));
    fq_scenario_tenant *sorted = malloc((n ? n : 1) * sizeof(*sorted));
    if (!map || !sorted) {
        free(map);
        free(sorted);
        return NULL;
    }
    size_t next = 0;
    for (size_t k = 0; k < sc->n_tenants; k++) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(t->tenants[i].id, sc->tenants[k].id) == 0) {
                map[i] = (uint32_t)next;
                sorted[next++] = t->tenants[i];
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (fq_scenario_tenant_index(sc, t->tenants[i].id) < 0) {
            map[i] = (uint32_t)next;
            sorted[next++] = t->tenants[i];
        }
    }
    free(t->tenants);
    t->tenants = sorted;
    t->cap_tenants = n;
    return map;
}

/* The trace's lines into t: a header naming the columns, then a run a
 * row; '#' lines and blank ones skipped. NULL, or why not, with *ln the
 * line it stopped at. */
static const char *trace_read_lines(trace *t, fq_scenario *sc, FILE *f, unsigned *ln)
{
    int col[NCOLS];
    int have_header = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    const char *why = NULL;
    while (!why && (n = getline(&line, &cap, f)) >= 0) {
        (*ln)++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0 || line[0] == '#')
            continue;
        if (!have_header) {
            why = trace_header(line, col);
            have_header = 1;
        } else {
            why = trace_row(t, sc, line, col, *ln);
        }
    }
    free(line);
    if (!why && ferror(f))
        why = "read error";
    if (!why && !t->runs.n)
        why = "no runs";
    return why;
}

/* sc takes what t read: its runs (in runs, sorted by time, their tenants
 * renumbered by map), tenants and workflows, in place of its own. */
static void trace_install(fq_scenario *sc, trace *t, fq_scenario_run *runs, const uint32_t *map,
                          const char *name)
{
    qsort(t->runs.v, t->runs.n, sizeof(*t->runs.v), trace_cmp);
    for (size_t i = 0; i < t->runs.n; i++) {
        runs[i] = t->runs.v[i].r;
        runs[i].tenant = map[runs[i].tenant];
    }
    free(sc->runs);
    free(sc->tenants);
    free(sc->workflows);
    spec_free(sc->spec);
    sc->spec = NULL;
    sc->runs = runs;
    sc->n_runs = t->runs.n;
    sc->tenants = t->tenants;
    sc->n_tenants = t->n_tenants;
    sc->workflows = t->workflows;
    sc->n_workflows = t->n_workflows;
    name_from_path(sc->name, sizeof(sc->name), name);
    if (!sc->duration)
        sc->duration = runs[t->runs.n - 1].at + 1;
    free(t->runs.v);
}

fq_status fq_scenario_read_trace(fq_scenario *sc, FILE *f, const char *name, char *err,
                                 size_t errlen)
{
    trace t = {0};
    unsigned ln = 0;
    const char *why = trace_read_lines(&t, sc, f, &ln);
    fq_scenario_run *runs = why ? NULL : malloc(t.runs.n * sizeof(*runs));
    if (!why && !runs)
        why = "out of memory";
    if (why) {
        fail(err, errlen, "%s:%u: %s", name, ln, why);
        trace_free(&t);
        return FQ_EINVAL;
    }
    uint32_t *map = trace_order(&t, sc);
    if (!map) {
        fail(err, errlen, "%s: out of memory", name);
        free(runs);
        trace_free(&t);
        return FQ_ENOMEM;
    }
    trace_install(sc, &t, runs, map, name);
    free(map);
    return FQ_OK;
}

fq_status fq_scenario_write_trace(FILE *f, const fq_scenario *sc)
{
    fprintf(f, "# %s, seed %" PRIu64 ": generated by fairq-sim --emit-trace\n", sc->name,
            sc->seed);
    fprintf(f, "tenant,submitted_at_ms,workflow,est_tokens,actual_tokens,plan\n");
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *r = &sc->runs[i];
        const fq_scenario_tenant *t = &sc->tenants[r->tenant];
        fprintf(f, "%s,%" PRIu64 ",%s,%" PRIu32 ",%" PRIu32 ",%s\n", t->id, r->at,
                sc->workflows[r->workflow], r->est, r->actual, t->plan);
    }
    return ferror(f) ? FQ_EIO : FQ_OK;
}
