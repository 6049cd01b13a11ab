/* test_admin.c -- unit tests of the admin plane: routing, refusals, rate limits in virtual time, stats pages, tenant.set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "admin.h"

#define NT 6

/* The proxy as the module sees it: tenants, counters, and what it did. */
/* A tenant of the fake proxy. */
typedef struct frow {
    char id[16];
    fq_tenant_info info;
    uint64_t rejected[FQ__COUNT];
} frow;

typedef struct fake {
    frow t[NT];                 /* in creation order */
    size_t nt;
    size_t rank[NT];            /* the ranking, as the scheduler keeps it: indexes of t */
    int at_calls, after_calls;  /* lookups of the ranking */
    fq_metrics_overall all;
    fq_policy *pol;
    fq_ovr_set *ovr;
    bool fresh;
    int writes, reloads;
    fq_explain ex;              /* what the proxy knows, for explain */
    int explains;               /* explain lookups made */
    int subs_calls;             /* sub-tenant listings asked */
    char reply[65536];          /* the last reply */
    int replies;
    fq_admin *a;
} fake;

static const void *f_at(void *arg, size_t i)
{
    fake *f = arg;
    f->at_calls++;
    return i < f->nt ? &f->t[f->rank[i]] : NULL;
}

static const void *f_after(void *arg, const void *t)
{
    fake *f = arg;
    f->after_calls++;
    size_t i = 0;
    while (i < f->nt && &f->t[f->rank[i]] != t)
        i++;
    assert_true(i < f->nt);
    return i + 1 < f->nt ? &f->t[f->rank[i + 1]] : NULL;
}

static const void *f_find(void *arg, const char *id)
{
    fake *f = arg;
    for (size_t i = 0; i < f->nt; i++)
        if (strcmp(f->t[i].id, id) == 0)
            return &f->t[i];
    return NULL;
}

static void f_view(void *arg, const void *t, bool full, fq_admin_tenant *out)
{
    (void)arg;
    const frow *r = t;
    memset(out, 0, sizeof *out);
    out->id = r->id;
    out->info = r->info;
    if (full) {
        out->plan = "free";
        out->source = FQ_SRC_DEFAULT;
        out->rejected = r->rejected;
        out->completed = 1;
        out->estimate_error = 1.0;
    }
}

static void f_overall(void *arg, fq_metrics_overall *out)
{
    fake *f = arg;
    *out = f->all;
    const fq_admin_counters *c = fq_admin_counters_get(f->a);
    out->admin_requests_busy = c->busy;
    out->admin_requests_too_long = c->too_long;
    out->admin_requests_invalid = c->invalid;
}

static const fq_policy *f_policy(void *arg)
{
    return ((fake *)arg)->pol;
}

static bool f_fresh(void *arg)
{
    return ((fake *)arg)->fresh;
}

static fq_status f_reply(void *arg, const void *req, const char *data, size_t len)
{
    fake *f = arg;
    (void)req;
    assert_true(len < sizeof f->reply);
    memcpy(f->reply, data, len);
    f->reply[len] = '\0';
    f->replies++;
    return FQ_OK;
}

static fq_status f_reload(void *arg, char *restart, size_t rcap, char *err, size_t errlen)
{
    fake *f = arg;
    (void)err;
    (void)errlen;
    f->reloads++;
    f->all.config_reloads++;
    snprintf(restart, rcap, "nats.url,http.listen");
    return FQ_OK;
}

static fq_status f_write(void *arg, const fq_ovr_write *w, char *err, size_t errlen)
{
    fake *f = arg;
    f->writes++;
    return fq_ovr_stored(f->ovr, f->pol, w, (uint64_t)(10 + f->writes), err, errlen);
}

/* Every tenant has the same three sub-tenants with queued runs. */
static size_t f_subs(void *arg, const void *t, fq_sub_info *out, size_t n)
{
    fake *f = arg;
    (void)t;
    f->subs_calls++;
    const fq_sub_info all[] = {{.name = "u1", .queued = 9}, {.name = "u2", .queued = 4},
                               {.overflow = true, .queued = 2}};
    size_t k = n < 3 ? n : 3;
    memcpy(out, all, k * sizeof *out);
    return k;
}

static void f_explain(void *arg, const char *tenant, const char *run_id, fq_explain *out,
                      uint64_t now)
{
    fake *f = arg;
    (void)now;
    f->explains++;
    *out = f->ex;
    out->tenant = tenant;
    out->run_id = run_id;
}

/* Three replicas alive, this one rep-b. */
static const char *f_replica_id(void *arg)
{
    (void)arg;
    return "rep-b";
}

static const char *f_replica_at(void *arg, size_t i)
{
    static const char *const live[] = {"rep-a", "rep-b", "rep-c"};
    (void)arg;
    return i < 3 ? live[i] : NULL;
}

static int setup(void **state)
{
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(fq_policy_create(&f->pol, "free", false, 0), FQ_OK);
    fq_plan pl[] = {{.name = "free", .weight = 1}, {.name = "pro", .weight = 3}};
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(fq_policy_set_plan(f->pol, &pl[i]), FQ_OK);
    assert_int_equal(fq_ovr_create(&f->ovr, 7), FQ_OK);
    /* t0..t5 in creation order; t1, t3 and t4 have queued runs, and rank
     * first (lib/drr.c ranks them: test_drr). */
    static const size_t rank[NT] = {3, 4, 1, 0, 2, 5};
    static const uint64_t queued_tokens[NT] = {0, 500, 0, 900, 500, 0};
    static const uint64_t oldest[NT] = {0, 20, 0, 30, 10, 0};
    f->nt = NT;
    for (size_t i = 0; i < NT; i++) {
        snprintf(f->t[i].id, sizeof f->t[i].id, "t%zu", i);
        f->t[i].info.queued_tokens = queued_tokens[i];
        f->t[i].info.queued = queued_tokens[i] ? 1 : 0;
        f->t[i].info.oldest_enqueued = oldest[i];
        f->t[i].info.weight = 1;
        f->rank[i] = rank[i];
    }
    f->all.tenants = NT;
    f->all.active_tenants = 3;
    f->all.max_payload = 1 << 20;
    f->all.publish_failures = 7;
    f->fresh = true;
    fq_admin_ops ops = {.arg = f, .tenant_at = f_at, .tenant_after = f_after, .tenant_find = f_find,
                        .tenant_view = f_view, .overall = f_overall, .policy = f_policy,
                        .fresh = f_fresh, .reply = f_reply, .reload = f_reload,
                        .ovr_write = f_write, .explain = f_explain, .tenant_subs = f_subs,
                        .replica_id = f_replica_id, .replica_at = f_replica_at};
    assert_int_equal(fq_admin_create(&f->a, "fair.admin", f->ovr, &ops, 0), FQ_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fake *f = *state;
    fq_admin_destroy(f->a);
    fq_ovr_destroy(f->ovr);
    fq_policy_destroy(f->pol);
    free(f);
    return 0;
}

/* Send a request at now; the reply, parsed (the caller deletes it). */
static cJSON *ask(fake *f, const char *what, const char *body, uint64_t now)
{
    char subj[64];
    snprintf(subj, sizeof subj, "fair.admin.%s", what);
    int before = f->replies;
    fq_admin_request(f->a, subj, body, strlen(body), NULL, now);
    assert_int_equal(f->replies, before + 1);
    cJSON *j = cJSON_Parse(f->reply);
    assert_non_null(j);
    return j;
}

static bool ok_of(const cJSON *j)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok"));
}

static const char *str_of(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num_of(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* A page: the tenants in the scheduler's ranking; pages continue where the
 * last one stopped, and each finds its first row once, not by walking the
 * rows before it. */
static void test_stats_pages(void **state)
{
    fake *f = *state;
    static const char *const order[] = {"t3", "t4", "t1", "t0", "t2", "t5"};
    size_t seen = 0;
    uint64_t now = 1000;
    for (int off = 0; off < NT; off += 4, now += 1000) {
        char body[64];
        snprintf(body, sizeof body, "{\"limit\":4,\"offset\":%d}", off);
        cJSON *j = ask(f, "stats", body, now);
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "tenants");
        const cJSON *t;
        cJSON_ArrayForEach(t, ts)
            assert_string_equal(str_of(t, "tenant"), order[seen++]);
        assert_int_equal(f->at_calls, 1);
        assert_true(f->after_calls <= 4);
        f->at_calls = f->after_calls = 0;
        assert_int_equal(num_of(j, "tenants_total"), NT);
        assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "truncated")),
                         off == 0);
        const cJSON *all = cJSON_GetObjectItemCaseSensitive(j, "overall");
        assert_int_equal(num_of(all, "publish_failures"), 7);
        assert_int_equal(num_of(all, "tenants"), NT);
        cJSON_Delete(j);
    }
    assert_int_equal(seen, NT);
    /* One tenant, and one not known. */
    cJSON *j = ask(f, "stats", "{\"tenant\":\"t4\"}", now);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "tenants")), 1);
    cJSON_Delete(j);
    j = ask(f, "stats", "{\"tenant\":\"nobody\"}", now);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "tenants")), 0);
    cJSON_Delete(j);
}

/* A tenant's values come from the one table /metrics walks too, under
 * their stats keys: charged tokens as dispatched_tokens, the oldest run's
 * age in whole ms. */
static void test_stats_tenant_values(void **state)
{
    fake *f = *state;
    f->t[3].info.charged_tokens = 1234;
    f->t[3].info.deficit = -50;
    f->t[3].info.expired = 2;
    f->t[3].info.in_flight = 4;
    cJSON *j = ask(f, "stats", "{\"tenant\":\"t3\"}", 1000);
    const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    assert_non_null(t);
    assert_int_equal(num_of(t, "dispatched_tokens"), 1234);
    assert_int_equal(num_of(t, "deficit"), -50);
    assert_int_equal(num_of(t, "expired_runs"), 2);
    assert_int_equal(num_of(t, "in_flight"), 4);
    assert_int_equal(num_of(t, "queued_tokens"), 900);
    assert_int_equal(num_of(t, "oldest_queued_age_ms"), 970);
    assert_int_equal(num_of(t, "completed_runs"), 1);
    assert_int_equal(num_of(t, "estimate_error"), 1);
    assert_int_equal(num_of(t, "weight"), 1);
    assert_null(cJSON_GetObjectItemCaseSensitive(t, "rate_wait_ms"));
    cJSON_Delete(j);
}

/* A reply is bounded by max_payload: fewer tenants, and where to go on. */
static void test_stats_fit_max_payload(void **state)
{
    fake *f = *state;
    f->all.max_payload = 3200;
    cJSON *j = ask(f, "stats", "", 0);
    int shown = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "tenants"));
    assert_true(shown >= 1 && shown < NT);
    assert_true(strlen(f->reply) < 3200);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "truncated")));
    assert_int_equal(num_of(j, "next_offset"), shown);
    cJSON_Delete(j);
}

/* A stats page is one at once and five a second: the next is busy with how
 * long to wait, and allowed once that has passed. The overall section
 * alone is never limited. */
static void test_stats_rate_limited(void **state)
{
    fake *f = *state;
    cJSON *j = ask(f, "stats", "{\"limit\":2}", 5000);
    assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "overall")));
    cJSON_Delete(j);
    j = ask(f, "stats", "{\"limit\":2}", 5000);
    assert_false(ok_of(j));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "busy")));
    double wait = num_of(j, "retry_ms");
    assert_true(wait > 0 && wait <= 200);
    cJSON_Delete(j);
    j = ask(f, "stats", "{\"limit\":0}", 5000);
    assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "overall")));
    cJSON_Delete(j);
    j = ask(f, "stats", "{\"limit\":2}", 5000 + (uint64_t)wait);
    assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "overall")));
    cJSON_Delete(j);
    assert_int_equal(fq_admin_counters_get(f->a)->busy, 1);
}

/* Refusals: a long body unread, a body that is not a request, an unknown
 * subject; each with a reason. */
static void test_refusals(void **state)
{
    fake *f = *state;
    char big[FQ_ADMIN_BODY_MAX + 2];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cJSON *j = ask(f, "stats", big, 0);
    assert_false(ok_of(j));
    assert_non_null(strstr(str_of(j, "error"), "at most 4096 bytes"));
    cJSON_Delete(j);
    assert_int_equal(fq_admin_counters_get(f->a)->too_long, 1);
    j = ask(f, "stats", "{\"limit\":\"x\"}", 0);
    assert_false(ok_of(j));
    assert_non_null(strstr(str_of(j, "error"), "limit"));
    cJSON_Delete(j);
    j = ask(f, "nonsense", "", 0);
    assert_non_null(strstr(str_of(j, "error"), "unknown admin request"));
    cJSON_Delete(j);
    j = ask(f, "tenant.get", "{}", 0);
    assert_false(ok_of(j));
    cJSON_Delete(j);
    j = ask(f, "tenant.set", "{\"tenant\":\"t1\",\"price_output\":0}", 0);
    assert_false(ok_of(j));
    cJSON_Delete(j);
    /* counted: the long one apart, the four others as invalid */
    assert_int_equal(fq_admin_counters_get(f->a)->too_long, 1);
    assert_int_equal(fq_admin_counters_get(f->a)->invalid, 4);
}

/* The explain reply of e at now, parsed. */
static cJSON *explain_json(const fq_explain *e, uint64_t now)
{
    char buf[4096];
    size_t len = 0;
    assert_int_equal(fq_admin_explain_json(buf, sizeof buf, &len, e, now), FQ_OK);
    assert_int_equal(strlen(buf), len);
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    return j;
}

/* A queued run of a tenant with 5 queued: where it is, the bound of runs
 * and tokens ahead, and the first thing that holds it, as the tenant's
 * state and the window change. */
static void test_explain_answer(void **state)
{
    (void)state;
    fq_explain e = {.tenant = "acme", .run_id = "r7", .known = true, .where = FQ_LW_QUEUED,
                    .est = 300, .tokens_ahead = 4200, .wait_ms = 2100, .wait_known = true,
                    .drain_tokens_per_sec = 2000.0, .window_runs = 3, .window_max_runs = 8,
                    .window_tokens = 900, .policy = {.weight = 2, .max_in_flight = 2,
                                                     .burst_in_flight = 4}};
    e.info = (fq_tenant_info){.id = "acme", .state = FQ_T_ACTIVE, .weight = 2, .deficit = 150,
                              .queued = 5, .queued_tokens = 1500, .in_flight = 1};
    e.others_queued = 1;
    cJSON *j = explain_json(&e, 1000);
    assert_true(ok_of(j));
    assert_string_equal(str_of(j, "where"), "queued");
    assert_string_equal(str_of(j, "state"), "active");
    assert_int_equal(num_of(j, "runs_ahead_at_most"), 4);
    assert_int_equal(num_of(j, "tokens_ahead_at_most"), 4200);
    assert_int_equal(num_of(j, "estimated_wait_ms"), 2100);
    assert_int_equal(num_of(j, "debt"), 0);
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(j, "cap");
    assert_int_equal(num_of(cap, "in_force"), 2);       /* another tenant has queued runs */
    assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cap, "bursting")));
    assert_non_null(strstr(str_of(j, "why"), "in the rotation: at most 4200 tokens"));
    cJSON_Delete(j);

    /* Alone, its burst is in force; at it, the cap is what holds it. */
    e.others_queued = 0;
    e.info.in_flight = 4;
    e.info.state = FQ_T_CAPPED;
    j = explain_json(&e, 1000);
    cap = cJSON_GetObjectItemCaseSensitive(j, "cap");
    assert_int_equal(num_of(cap, "in_force"), 4);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cap, "at_cap")));
    assert_non_null(strstr(str_of(j, "why"), "4 runs in flight, its cap (burst_in_flight)"));
    cJSON_Delete(j);

    /* Under its cap, in debt. */
    e.info.in_flight = 0;
    e.info.state = FQ_T_WAITING;
    e.info.deficit = -700;
    j = explain_json(&e, 1000);
    assert_int_equal(num_of(j, "debt"), 700);
    assert_non_null(strstr(str_of(j, "why"), "in debt (700 tokens"));
    cJSON_Delete(j);

    /* Over its token rate. */
    e.policy.tokens_per_minute = 6000;
    e.rate_wait_ms = 9000;
    e.info.state = FQ_T_PARKED;
    e.info.rate_until = 10000;
    j = explain_json(&e, 1000);
    assert_int_equal(num_of(j, "rate_wait_ms"), 9000);
    assert_non_null(strstr(str_of(j, "why"), "over its token rate (6000 tokens a minute)"));
    cJSON_Delete(j);

    /* In the rotation, the window full. */
    e.rate_wait_ms = 0;
    e.info.rate_until = 0;
    e.info.state = FQ_T_ACTIVE;
    e.info.deficit = 0;
    e.window_runs = 8;
    j = explain_json(&e, 1000);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "window"), "full")));
    assert_non_null(strstr(str_of(j, "why"), "window is full"));
    cJSON_Delete(j);

    /* No drain rate yet: the wait is not known. */
    e.wait_known = false;
    e.wait_ms = 0;
    j = explain_json(&e, 1000);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "estimated_wait_ms")));
    cJSON_Delete(j);

    /* A run dispatched, or unknown: no wait, no bound ahead. */
    e.where = FQ_LW_IN_FLIGHT;
    j = explain_json(&e, 1000);
    assert_string_equal(str_of(j, "where"), "in_flight");
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "estimated_wait_ms"));
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "runs_ahead_at_most"));
    cJSON_Delete(j);
    e.where = FQ_LW_UNKNOWN;
    j = explain_json(&e, 1000);
    assert_non_null(strstr(str_of(j, "why"), "holds no such run"));
    cJSON_Delete(j);

    /* The tenant as a whole: a new run waits behind all 5. */
    e.run_id = "";
    e.where = FQ_LW_QUEUED;
    j = explain_json(&e, 1000);
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "run_id"));
    assert_int_equal(num_of(j, "runs_ahead_at_most"), 5);
    cJSON_Delete(j);
}

/* Sub-tenants: counted for every tenant that has some, listed (the few
 * with most queued) only in a reply about one tenant; a run placed in its
 * sub-tenant by explain. */
static void test_subtenants_shown(void **state)
{
    fake *f = *state;
    f->t[3].info.subtenants = 3;
    f->t[3].info.active_subtenants = 3;
    cJSON *j = ask(f, "stats", "", 1000);
    assert_int_equal(f->subs_calls, 0);
    const cJSON *t3 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    assert_string_equal(str_of(t3, "tenant"), "t3");
    assert_int_equal(num_of(t3, "subtenants"), 3);
    assert_null(cJSON_GetObjectItemCaseSensitive(t3, "top_subtenants"));
    const cJSON *t4 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 1);
    assert_null(cJSON_GetObjectItemCaseSensitive(t4, "subtenants"));
    cJSON_Delete(j);
    j = ask(f, "stats", "{\"tenant\":\"t3\"}", 2000);
    assert_int_equal(f->subs_calls, 1);
    t3 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(t3, "top_subtenants");
    assert_int_equal(cJSON_GetArraySize(top), 3);
    assert_string_equal(str_of(cJSON_GetArrayItem(top, 0), "subtenant"), "u1");
    assert_int_equal(num_of(cJSON_GetArrayItem(top, 0), "queued_runs"), 9);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(top, 2),
                                                              "overflow")));
    cJSON_Delete(j);

    fq_explain e = {.tenant = "acme", .run_id = "r7", .known = true, .where = FQ_LW_QUEUED,
                    .sub_known = true, .subtenant = "zed",
                    .sub = {.overflow = true, .queued = 6}};
    e.info = (fq_tenant_info){.id = "acme", .state = FQ_T_ACTIVE, .weight = 1, .queued = 20,
                              .subtenants = 4, .active_subtenants = 4};
    j = explain_json(&e, 1000);
    assert_string_equal(str_of(j, "subtenant"), "zed");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(j, "subtenant_position");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pos, "overflow")));
    assert_int_equal(num_of(pos, "queued_runs"), 6);
    assert_int_equal(num_of(pos, "runs_ahead_at_most"), 5);
    assert_int_equal(num_of(pos, "others_active"), 3);
    cJSON_Delete(j);
    e.where = FQ_LW_IN_FLIGHT;      /* in flight: no place in a queue */
    j = explain_json(&e, 1000);
    pos = cJSON_GetObjectItemCaseSensitive(j, "subtenant_position");
    assert_null(cJSON_GetObjectItemCaseSensitive(pos, "runs_ahead_at_most"));
    cJSON_Delete(j);
    e.sub_known = false;            /* its body not in memory: not placed */
    e.subtenant[0] = '\0';
    j = explain_json(&e, 1000);
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "subtenant_position"));
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "subtenant"));
    cJSON_Delete(j);
}

/* Send an explain request on subject at now; the reply, parsed. */
static cJSON *ask_explain(fake *f, const char *subject, const char *body, uint64_t now)
{
    int before = f->replies;
    fq_admin_explain(f->a, "fair.explain", subject, body, strlen(body), NULL, now);
    assert_int_equal(f->replies, before + 1);
    cJSON *j = cJSON_Parse(f->reply);
    assert_non_null(j);
    return j;
}

/* The subject names the tenant, the body at most a run id; anything else
 * is refused with a reason and costs no lookup; past the burst, busy. */
static void test_explain_requests(void **state)
{
    fake *f = *state;
    f->ex.known = true;
    f->ex.where = FQ_LW_IN_FLIGHT;
    cJSON *j = ask_explain(f, "fair.explain.acme", "{\"run_id\":\"r-1\"}", 0);
    assert_true(ok_of(j));
    assert_string_equal(str_of(j, "tenant"), "acme");
    assert_string_equal(str_of(j, "run_id"), "r-1");
    cJSON_Delete(j);
    static const struct {
        const char *subject, *body, *why;
    } bad[] = {
        {"fair.explain._invalid", "", "names no valid tenant"},
        {"fair.explain", "", "names no valid tenant"},
        {"fair.explain.acme", "{\"run_id\":\"a b\"}", "run_id: must be"},
        {"fair.explain.acme", "{\"run_id\":\"\"}", "run_id: must be"},
        {"fair.explain.acme", "{\"limit\":1}", "may hold only"},
        {"fair.explain.acme", "\"r-1\"", "must be empty or a JSON object"},
        {"fair.explain.acme", "{\"run_id\":\"a\\u0000b\"}", "u0000"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = ask_explain(f, bad[i].subject, bad[i].body, 0);
        assert_false(ok_of(j));
        assert_non_null(strstr(str_of(j, "error"), bad[i].why));
        cJSON_Delete(j);
    }
    assert_int_equal(f->explains, 1);
    assert_int_equal(fq_admin_counters_get(f->a)->invalid, sizeof bad / sizeof bad[0]);
    /* A tenant's own burst is 3, one used: 2 more at once, then busy for
     * it (5 a second: 200 ms), not for the others. */
    for (int i = 0; i < 2; i++) {
        j = ask_explain(f, "fair.explain.acme", "", 0);
        assert_true(ok_of(j));
        cJSON_Delete(j);
    }
    j = ask_explain(f, "fair.explain.acme", "", 0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "busy")));
    assert_non_null(strstr(str_of(j, "error"), "a second for one tenant"));
    double wait = num_of(j, "retry_ms");
    assert_true(wait > 0 && wait <= 200);
    cJSON_Delete(j);
    /* The others share the burst of 10 over all: 7 left. */
    char subject[64];
    for (int i = 0; i < 7; i++) {
        snprintf(subject, sizeof subject, "fair.explain.b%d", i);
        j = ask_explain(f, subject, "", 0);
        assert_true(ok_of(j));
        cJSON_Delete(j);
    }
    j = ask_explain(f, "fair.explain.c", "", 0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "busy")));
    assert_null(strstr(str_of(j, "error"), "for one tenant"));
    cJSON_Delete(j);
    j = ask_explain(f, "fair.explain.acme", "", (uint64_t)wait);
    assert_true(ok_of(j));
    cJSON_Delete(j);
    assert_int_equal(f->explains, 11);
    assert_int_equal(fq_admin_counters_get(f->a)->busy, 2);
    assert_int_equal(fq_admin_counters_get(f->a)->invalid, sizeof bad / sizeof bad[0]);
}

/* tenant.set writes through the proxy and replies as tenant.get; nothing
 * is written while the lease is not fresh, or when nothing changes. */
static void test_tenant_set(void **state)
{
    fake *f = *state;
    f->fresh = false;
    cJSON *j = ask(f, "tenant.set", "{\"tenant\":\"t1\",\"plan\":\"pro\"}", 0);
    assert_false(ok_of(j));
    assert_non_null(strstr(str_of(j, "error"), "leader lease"));
    cJSON_Delete(j);
    assert_int_equal(f->writes, 0);
    f->fresh = true;
    j = ask(f, "tenant.set", "{\"tenant\":\"t1\",\"plan\":\"pro\"}", 0);
    assert_true(ok_of(j));
    assert_string_equal(str_of(j, "plan"), "pro");
    assert_int_equal(num_of(j, "weight"), 3);
    assert_string_equal(str_of(j, "source"), "override");
    cJSON_Delete(j);
    assert_int_equal(f->writes, 1);
    j = ask(f, "tenant.set", "{\"tenant\":\"t1\",\"plan\":\"pro\"}", 0);
    assert_true(ok_of(j));
    cJSON_Delete(j);
    assert_int_equal(f->writes, 1);
    j = ask(f, "tenant.set", "{\"tenant\":\"t1\",\"plan\":\"gold\"}", 0);
    assert_non_null(strstr(str_of(j, "error"), "gold is not defined"));
    cJSON_Delete(j);
    j = ask(f, "tenant.get", "{\"tenant\":\"t2\"}", 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "override")));
    assert_string_equal(str_of(j, "source"), "default");
    cJSON_Delete(j);
}

/* reload says what only a restart applies, and the reloads so far. */
static void test_reload(void **state)
{
    fake *f = *state;
    cJSON *j = ask(f, "reload", "", 0);
    assert_true(ok_of(j));
    const cJSON *rn = cJSON_GetObjectItemCaseSensitive(j, "restart_needed");
    assert_int_equal(cJSON_GetArraySize(rn), 2);
    assert_string_equal(cJSON_GetArrayItem(rn, 1)->valuestring, "http.listen");
    assert_int_equal(num_of(j, "reloads"), 1);
    cJSON_Delete(j);
}

/* The stats and reload replies say which replica answered and which are
 * alive in its view (fairq-admin asks each of those for stats --all and
 * reload); the overall section alone is not rate limited, so asking every
 * replica for it costs no busy answers. */
static void test_replies_name_the_replicas(void **state)
{
    fake *f = *state;
    for (int i = 0; i < 2; i++) {
        cJSON *j = ask(f, i ? "reload" : "stats", i ? "" : "{\"limit\":0}", 0);
        assert_true(i == 0 || ok_of(j));
        assert_string_equal(str_of(j, "replica"), "rep-b");
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "replicas");
        assert_int_equal(cJSON_GetArraySize(rs), 3);
        assert_string_equal(cJSON_GetArrayItem(rs, 0)->valuestring, "rep-a");
        assert_string_equal(cJSON_GetArrayItem(rs, 2)->valuestring, "rep-c");
        cJSON_Delete(j);
    }
    for (int i = 0; i < 20; i++) {
        cJSON *j = ask(f, "stats", "{\"limit\":0}", 0);
        assert_non_null(cJSON_GetObjectItemCaseSensitive(j, "overall"));
        cJSON_Delete(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stats_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_tenant_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_fit_max_payload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_rate_limited, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_explain_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subtenants_shown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_explain_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_set, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replies_name_the_replicas, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
