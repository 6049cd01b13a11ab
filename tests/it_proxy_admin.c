/* it_proxy_admin.c -- a flood of admin requests, with and without a reply subject, while runs flood too: a small tenant's runs are still dispatched, and the flood is counted, not logged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxyfixture.h"

#define TENANTS 2000        /* known tenants: every stats page ranks them all */
#define BIG 6000            /* the flood of runs, queued by one tenant */
#define WINDOW 64           /* the big tenant's cap is 16 (yaml): the small one never
                               waits for a window slot, only for the proxy's loop */
#define SMALL_CALM 50       /* a small tenant's runs before the admin flood */
#define SMALL_FLOOD 100     /* ... and during it */
#define SMALL_EVERY_MS 20
#define REQUESTERS 4        /* waiting for their replies, as fast as they come */
#define NO_REPLY 20000      /* requests without a reply subject */

static const char yaml[] =
    "scheduler:\n  default_plan: free\n  quantum_tokens: 1000\n"
    "window:\n  max_in_flight: 64\n"
    "plans:\n  - name: free\n    weight: 1\n"
    "tenants:\n  - id: big\n    max_in_flight: 16\n";

static int setup(void **state)
{
    pt_worker_opts wo = {.concurrency = WINDOW, .service_ms = 25};
    if (pf_setup(state, yaml, &wo) != 0)
        return -1;
    pf_fixture *f = *state;
    for (int i = 0; i < TENANTS; i++) {
        char tenant[16];
        snprintf(tenant, sizeof tenant, "t%04d", i);
        if (pt_submit_async(&f->c, tenant, "{}", 2, NULL) != 0)
            return -1;
    }
    if (pt_submit_flush(&f->c) != 0 || pt_worker_wait_completed(f->w, TENANTS, 60000) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    return 0;
}

/* ---- the admin flood ---- */

typedef struct requester {
    const natstest *srv;
    int kind;                   /* 0: stats pages; 1: reload and tenant.set in turn */
    atomic_bool *stop;
    long ok, busy, refused, timeouts;
    pthread_t th;
} requester;

static const char busy[] = "{\"ok\":false,\"busy\":true,";

static void *request_loop(void *arg)
{
    requester *r = arg;
    pt_client c;
    if (pt_connect(&c, r->srv) != 0)
        return (void *)1;
    for (long i = 0; !atomic_load(r->stop); i++) {
        const char *subj = "fair.admin.stats", *body = "";
        char set[64];
        if (r->kind == 1 && i % 2 == 0) {
            subj = "fair.admin.reload";
        } else if (r->kind == 1) {
            subj = "fair.admin.tenant.set";
            snprintf(set, sizeof set, "{\"tenant\":\"t0001\",\"weight\":%ld}", 1 + i % 3);
            body = set;
        }
        natsMsg *m = NULL;
        if (natsConnection_RequestString(&m, c.nc, subj, body, 5000) != NATS_OK) {
            r->timeouts++;
            continue;
        }
        const char *d = natsMsg_GetData(m);
        if (strncmp(d, "{\"ok\":true", 10) == 0 || strncmp(d, "{\"overall\":", 11) == 0)
            r->ok++;
        else if (strncmp(d, busy, sizeof busy - 1) == 0)
            r->busy++;
        else
            r->refused++;   /* tenant.set raced with its own echo: changed meanwhile */
        natsMsg_Destroy(m);
    }
    pt_close(&c);
    return NULL;
}

/* Requests nobody waits for, round the three costly kinds. */
static void *no_reply_flood(void *arg)
{
    const natstest *srv = arg;
    pt_client c;
    if (pt_connect(&c, srv) != 0)
        return (void *)1;
    static const char *const subj[] = {"fair.admin.stats", "fair.admin.reload",
                                       "fair.admin.tenant.set"};
    static const char *const body[] = {"", "", "{\"tenant\":\"t0002\",\"weight\":2}"};
    for (int i = 0; i < NO_REPLY; i++)
        if (natsConnection_PublishString(c.nc, subj[i % 3], body[i % 3]) != NATS_OK)
            return (void *)1;
    natsConnection_Flush(c.nc);
    pt_close(&c);
    return NULL;
}

/* ---- the small tenant ---- */

static void submit_small(pf_fixture *f, int from, int n)
{
    for (int i = from; i < from + n; i++) {
        char id[32], body[64];
        snprintf(id, sizeof id, "small-%d", i);
        int len = snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"est_tokens\":100}", id);
        assert_int_equal(pt_submit(&f->c, "small", body, (size_t)len, NULL), 0);
        nt_sleep_ms(SMALL_EVERY_MS);     /* the tenant's pace, not synchronisation */
    }
}

/* Runs of tenant "small" the workers have received. */
static size_t small_received(pf_fixture *f)
{
    size_t n = 0, all = pt_worker_received(f->w);
    for (size_t i = 0; i < all; i++)
        n += strcmp(pt_worker_seen(f->w, i).tenant, "small") == 0;
    return n;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Submit-to-dispatch of small runs from..to-1, from FAIR_DISPATCH's
 * headers (ms): p50 and p99 into *p50, *p99. */
static void small_latency(const pt_msg *m, size_t n, int from, int to, long long *p50,
                          long long *p99)
{
    long long lat[SMALL_CALM + SMALL_FLOOD];
    int k = 0, i;
    for (size_t j = 0; j < n; j++)
        if (sscanf(m[j].run_id, "small-%d", &i) == 1 && i >= from && i < to)
            lat[k++] = m[j].dispatched_at - m[j].submitted_at;
    assert_int_equal(k, to - from);
    qsort(lat, (size_t)k, sizeof lat[0], cmp_ll);
    *p50 = lat[k / 2];
    *p99 = lat[(k * 99 + 99) / 100 - 1];
}

static void test_admin_flood_during_run_flood(void **state)
{
    pf_fixture *f = *state;
    for (int i = 0; i < BIG; i++) {
        char id[32], body[64];
        snprintf(id, sizeof id, "big-%d", i);
        int len = snprintf(body, sizeof body, "{\"run_id\":\"%s\",\"est_tokens\":1000}", id);
        assert_int_equal(pt_submit_async(&f->c, "big", body, (size_t)len, NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    /* Once the proxy holds the flood (fetching it is not what is measured). */
    long held = 0;
    for (long long until = nt_now_ms() + 20000; held < TENANTS + BIG && nt_now_ms() < until;) {
        cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
        held = pf_overall(j, "submitted");
        cJSON_Delete(j);
        if (held < TENANTS + BIG)
            nt_sleep_ms(50);
    }
    assert_int_equal(held, TENANTS + BIG);

    /* Calm: the flood of runs alone. */
    submit_small(f, 0, SMALL_CALM);

    /* The admin flood, until every small run has reached the workers. */
    atomic_bool stop = false;
    long long began = nt_now_ms();
    requester rq[REQUESTERS];
    for (int i = 0; i < REQUESTERS; i++) {
        rq[i] = (requester){.srv = f->srv, .kind = i == REQUESTERS - 1, .stop = &stop};
        assert_int_equal(pthread_create(&rq[i].th, NULL, request_loop, &rq[i]), 0);
    }
    pthread_t nr;
    assert_int_equal(pthread_create(&nr, NULL, no_reply_flood, (void *)f->srv), 0);
    submit_small(f, SMALL_CALM, SMALL_FLOOD);
    long long end = nt_now_ms() + 20000;
    while (small_received(f) < SMALL_CALM + SMALL_FLOOD && nt_now_ms() < end)
        nt_sleep_ms(20);
    size_t got = small_received(f);
    cJSON *bj = pf_stats(f, "{\"tenant\":\"big\"}", NULL);
    long big_left = pf_num(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(bj, "tenants"), 0),
                           "queued_runs");
    cJSON_Delete(bj);
    atomic_store(&stop, true);
    void *rc;
    long ok = 0, busy = 0, timeouts = 0, pages = 0;
    for (int i = 0; i < REQUESTERS; i++) {
        pthread_join(rq[i].th, &rc);
        assert_null(rc);
        pages += rq[i].kind == 0 ? rq[i].ok : 0;
        ok += rq[i].ok;
        busy += rq[i].busy;
        timeouts += rq[i].timeouts;
    }
    pthread_join(nr, &rc);
    assert_null(rc);
    /* Every small run was dispatched while the admin flood went on. */
    assert_int_equal(got, SMALL_CALM + SMALL_FLOOD);

    /* Every request with a reply subject got one: served, or told to wait. */
    assert_int_equal(timeouts, 0);
    assert_true(pages > 0);
    assert_true(busy > 0);
    /* Stats pages were served at their rate (5 a second, 1 at once), not
     * as fast as three requesters asked. */
    long long secs = (nt_now_ms() - began) / 1000 + 1;
    assert_true(pages <= 5 * secs + 1);

    /* Those without were dropped unread and counted, and not one was
     * logged (each used to be, as an unsent reply). */
    long no_reply = 0;
    for (end = nt_now_ms() + 10000; no_reply < NO_REPLY && nt_now_ms() < end;) {
        cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
        no_reply = pf_overall(j, "admin_requests_no_reply");
        assert_true(pf_overall(j, "admin_requests_busy") >= busy);
        cJSON_Delete(j);
        if (no_reply < NO_REPLY)
            nt_sleep_ms(100);
    }
    assert_int_equal(no_reply, NO_REPLY);
    assert_int_equal(pt_log_count(&f->px, "admin reply not sent"), 0);

    /* The flood of runs was still queued once the last small run was in. */
    assert_true(big_left > 0);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);

    long long calm50, calm99, flood50, flood99;
    small_latency(m, n, 0, SMALL_CALM, &calm50, &calm99);
    small_latency(m, n, SMALL_CALM, SMALL_CALM + SMALL_FLOOD, &flood50, &flood99);
    fprintf(stderr, "admin flood: small tenant submit-to-dispatch p50 %lld ms, p99 %lld ms "
            "(runs flood alone: p50 %lld ms, p99 %lld ms); %ld requests served, %ld answered "
            "busy, %d without a reply dropped; %ld big runs still queued\n", flood50, flood99,
            calm50, calm99, ok, busy, NO_REPLY, big_left);
    pt_msgs_free(m, n);
}

/* A request body of nearly a megabyte, every member of it valid: it was
 * parsed whole on the loop (a stats page, and tenant.get, which no rate
 * limits) before anything looked at its size. Refused unread now, with the
 * bound named, and counted. */
static void test_long_request_refused_unread(void **state)
{
    pf_fixture *f = *state;
    enum { MEMBERS = 80000 };
    size_t cap = 16 + MEMBERS * 12, k = 0;
    char *body = malloc(cap);
    assert_non_null(body);
    k += (size_t)snprintf(body + k, cap - k, "{\"limit\":1");
    for (int i = 1; i < MEMBERS; i++)
        k += (size_t)snprintf(body + k, cap - k, ",\"limit\":1");
    snprintf(body + k, cap - k, "}");
    const char *subjects[] = {"fair.admin.stats", "fair.admin.tenant.get",
                              "fair.admin.tenant.set"};
    for (size_t i = 0; i < sizeof subjects / sizeof subjects[0]; i++) {
        long long t0 = nt_now_ms();
        char *r = pt_request(&f->c, subjects[i], body, NULL);
        assert_non_null(r);
        fprintf(stderr, "%s with a %zu-byte body: answered in %lld ms\n", subjects[i],
                strlen(body), nt_now_ms() - t0);
        cJSON *j = cJSON_Parse(r);
        free(r);
        assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        assert_true(cJSON_IsString(e));
        assert_non_null(strstr(e->valuestring, "at most 4096 bytes"));
        cJSON_Delete(j);
    }
    free(body);
    cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
    assert_int_equal(pf_overall(j, "admin_requests_too_long"), 3);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_request_refused_unread),
        cmocka_unit_test(test_admin_flood_during_run_flood),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
