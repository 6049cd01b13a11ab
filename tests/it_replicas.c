/* it_replicas.c -- proxy replicas sharing the partitions of one deployment: each owns some, all are owned, a kill -9 hands its partitions to the others within the lease TTL and a second, a joiner takes its share, and every run is dispatched once. */
/*
 * One nats-server mapping fair.submit.* and fair.done.* to 8 partitions
 * (docs/partitions.md), three fairq-proxy replicas with partitions: 8 and
 * their own replica_id, and workers. Who owns what is read from the lease
 * bucket itself (the stream KV_fairq_lease: each p.<k> key's last value
 * is its owner's id), as an operator would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "opstest.h"
#include "partition.h"
#include "proxyfixture.h"

#define P 8
#define TTL_MS 3000

static const char yaml_fmt[] =
    "partitions: %d\n"
    "replica_id: %s\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 8\n"
    "plans:\n  - name: free\n";

static char dir[] = "/tmp/fairq-it-replicas-XXXXXX";
static char conf[256];
static pt_proxy more[3];        /* rep-b, rep-c, rep-d; the fixture's proxy is rep-a */
static int parts = P;           /* the deployment's, for the next setup */

/* The debtors' runs overrun their estimate: each ends in debt. */
static uint64_t actual_of(void *arg, const char *tenant, uint32_t est)
{
    (void)arg;
    return tenant[0] == 'd' ? est + 7000 : est;
}

static int setup(void **state)
{
    strcpy(dir, "/tmp/fairq-it-replicas-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);     /* every replica's probes */
    if (pf_write_mapping(conf, sizeof conf, dir, parts) != 0)
        return -1;
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, parts, "rep-a");
    pt_worker_opts wo = {.concurrency = 8, .service_ms = 1, .actual = actual_of};
    return pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, yaml, &wo);
}

/* partitions: 1, no mapping: a leader and standbys. */
static int setup_one(void **state)
{
    parts = 1;          /* back to P at the teardown */
    strcpy(dir, "/tmp/fairq-it-replicas-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, parts, "rep-a");
    return pf_setup(state, yaml, NULL);
}

/* 256 partitions, more than one replica may own. */
static int setup_256(void **state)
{
    parts = 256;        /* back to P at the teardown */
    return setup(state);
}

/* Two partitions for three replicas: one owns none. */
static int setup_two(void **state)
{
    parts = 2;          /* back to P at the teardown */
    return setup(state);
}

/* Two partitions, the mapping in an account whose user rep-b (user b)
 * may not use the JetStream consumer API on FAIR_SUBMIT and FAIR_DONE: it
 * can take a partition's key (and watch the buckets) but not list, delete
 * or make a partition's consumer. Everyone else connects without
 * credentials, as user t of the same account. */
static int setup_two_no_consumers_for_b(void **state)
{
    parts = 2;          /* back to P at the teardown */
    strcpy(dir, "/tmp/fairq-it-replicas-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(conf, sizeof conf, "%s/users.conf", dir);
    FILE *c = fopen(conf, "w");
    if (!c)
        return -1;
    fprintf(c, "accounts {\n  A {\n    jetstream: enabled\n"
               "    users = [\n      {user: t, password: t}\n"
               "      {user: b, password: b, permissions: {publish: {deny: ["
               "\"$JS.API.CONSUMER.*.FAIR_SUBMIT\", \"$JS.API.CONSUMER.*.FAIR_SUBMIT.>\", "
               "\"$JS.API.CONSUMER.*.*.FAIR_SUBMIT.>\", \"$JS.API.CONSUMER.*.FAIR_DONE\", "
               "\"$JS.API.CONSUMER.*.FAIR_DONE.>\", \"$JS.API.CONSUMER.*.*.FAIR_DONE.>\"]}}}\n"
               "    ]\n"
               "    mappings {\n"
               "      \"fair.submit.*\": \"fair.submit.{{partition(2,1)}}.{{wildcard(1)}}\"\n"
               "      \"fair.done.*\": \"fair.done.{{partition(2,1)}}.{{wildcard(1)}}\"\n"
               "    }\n  }\n}\nno_auth_user: t\n");
    if (fclose(c) != 0)
        return -1;
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, parts, "rep-a");
    pt_worker_opts wo = {.concurrency = 8, .service_ms = 1};
    return pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, yaml, &wo);
}

static int teardown(void **state)
{
    for (int i = 0; i < 3; i++)
        if (nt_proc_alive(&more[i].proc))
            pt_proxy_stop(&more[i]);
    pf_teardown(state, false);
    unsetenv("FAIRQ_HTTP_LISTEN");
    parts = P;
    remove(conf);
    rmdir(dir);
    return 0;
}

static void start(pt_proxy *px, pf_fixture *f, const char *id)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, parts, id);
    assert_int_equal(pt_proxy_start(px, f->srv, id, yaml), 0);
    assert_int_equal(pt_log_wait(px, "fairq-proxy running", 15000), 0);
}

/* Each partition's owner as the lease bucket says now ("" for none or
 * released). */
static void owners(pf_fixture *f, char own[P][64])
{
    pf_owners(&f->c, "fairq_lease", P, own);
}

/* How many partitions id owns. */
static int count(char own[P][64], const char *id)
{
    int c = 0;
    for (int k = 0; k < P; k++)
        c += strcmp(own[k], id) == 0;
    return c;
}

/* Wait until the partitions are shared by ids (n of them) within one of
 * even; fails after timeout_ms. */
static void wait_shared(pf_fixture *f, const char *const *ids, int n, int timeout_ms)
{
    long long end = nt_now_ms() + timeout_ms;
    char own[P][64];
    for (;;) {
        owners(f, own);
        int total = 0, lo = P, hi = 0;
        for (int i = 0; i < n; i++) {
            int c = count(own, ids[i]);
            total += c;
            lo = c < lo ? c : lo;
            hi = c > hi ? c : hi;
        }
        if (total == P && hi - lo <= 1)
            return;
        if (nt_now_ms() > end) {
            for (int k = 0; k < P; k++)
                print_message("p.%d: '%s'\n", k, own[k]);
            fail_msg("the %d partitions are not shared by %d replicas", P, n);
        }
        nt_sleep_ms(50);
    }
}

/* Submit runs from .. from + n - 1 and wait until the workers completed
 * done + n. */
static void serve(pf_fixture *f, int from, int n, size_t done)
{
    pf_submit_runs(f, from, n, 16);
    assert_int_equal(pt_worker_wait_completed(f->w, done + (size_t)n, 20000), 0);
}

/* The moves a join causes, as the server sees the partition keys written:
 * a core subscription to every write of $KV.fairq_lease.p.*, in the
 * server's order. A move is under way from its key's "released" to the
 * next write of another value (its taker's); at most one may be at a time.
 * (A write a compare-and-set refused reaches a core subscriber too: that
 * can only hide a move, never show two.) */
typedef struct moves {
    natsSubscription *sub;
    bool released[P];
    int under_way, most, count;
} moves;

static void moves_start(moves *m, pf_fixture *f)
{
    memset(m, 0, sizeof *m);
    assert_int_equal(natsConnection_SubscribeSync(&m->sub, f->c.nc, "$KV.fairq_lease.p.*"),
                     NATS_OK);
    assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
}

/* What was written since the start, until 200 ms pass without a write (or
 * 3 s, renewals keep coming). */
static void moves_read(moves *m)
{
    natsMsg *msg = NULL;
    long long end = nt_now_ms() + 3000;     /* renewals keep coming */
    while (nt_now_ms() < end && natsSubscription_NextMsg(&msg, m->sub, 200) == NATS_OK) {
        int k = -1;
        if (sscanf(natsMsg_GetSubject(msg), "$KV.fairq_lease.p.%d", &k) == 1 && k >= 0 &&
            k < P) {
            if (getenv("IT_REPLICAS_TRACE"))
                print_message("%s %.*s\n", natsMsg_GetSubject(msg), natsMsg_GetDataLength(msg),
                              natsMsg_GetData(msg));
            bool rel = natsMsg_GetDataLength(msg) == 8 &&
                       memcmp(natsMsg_GetData(msg), "released", 8) == 0;
            if (rel && !m->released[k]) {
                m->under_way++;
                m->count++;
            } else if (!rel && m->released[k]) {
                m->under_way--;
            }
            m->released[k] = rel;
            m->most = m->under_way > m->most ? m->under_way : m->most;
        }
        natsMsg_Destroy(msg);
    }
}

/* The value of line `name` (the whole series name, with its labels) of a
 * /metrics body; false if it has none. */
static bool metric_in(const char *body, const char *name, long long *out)
{
    size_t len = strlen(name);
    for (const char *at = body; (at = strstr(at, name)) != NULL; at += len)
        if ((at == body || at[-1] == '\n') && at[len] == ' ') {
            *out = atoll(at + len + 1);
            return true;
        }
    return false;
}

/* The /metrics body of the replica on port (the caller frees it); NULL if
 * none came. */
static char *metrics_body(int port)
{
    int status = 0;
    char *body = NULL;
    if (ot_http_get(port, "/metrics", &status, &body) == 0 && status == 200 && body)
        return body;
    free(body);
    return NULL;
}

/* The value of /metrics line `name` of the replica on port; false if it
 * has none now. */
static bool metric_of(int port, const char *name, long long *out)
{
    char *body = metrics_body(port);
    bool ok = body && metric_in(body, name, out);
    if (!ok && getenv("IT_REPLICAS_TRACE"))
        print_message("%s not in: %s\n", name, body ? body : "(none)");
    free(body);
    return ok;
}

/* Debtor d<n> of partition k: the first such name. */
static void debtor_of(char *out, size_t cap, int k)
{
    for (int n = 0;; n++) {
        snprintf(out, cap, "d%d", n);
        if (fq_partition_of(out, strlen(out), P) == (uint32_t)k)
            return;
    }
}

/* Tenant's series `family` at the replica's /metrics body into *out. */
static bool tenant_metric(const char *body, const char *family, const char *tenant,
                          long long *out)
{
    char name[128];
    snprintf(name, sizeof name, "%s{tenant=\"%s\",plan=\"free\"}", family, tenant);
    return metric_in(body, name, out);
}

/* Tenant's deficit at the replica on port once each of its `runs` runs is
 * reconciled there: its snapshot (one a second) shows them all dispatched
 * (runs < 0: any number, for a debt read back from the journal), none
 * queued or in flight, and a debt. A worker counts a run completed
 * once its completion is stored, before the proxy reconciles it: a debt
 * read then misses the runs not reconciled yet. Waited for up to 5 s;
 * false if it did not come. */
static bool debt_at(int port, const char *tenant, long long runs, long long *out)
{
    for (long long end = nt_now_ms() + 5000; nt_now_ms() < end; nt_sleep_ms(100)) {
        char *body = metrics_body(port);
        long long sent = -1, queued = -1, flying = -1;
        bool ok = body &&
                  tenant_metric(body, "fairq_tenant_dispatched_runs_total", tenant, &sent) &&
                  tenant_metric(body, "fairq_tenant_queued_runs", tenant, &queued) &&
                  tenant_metric(body, "fairq_tenant_in_flight_runs", tenant, &flying) &&
                  tenant_metric(body, "fairq_tenant_deficit_tokens", tenant, out);
        if (ok && getenv("IT_REPLICAS_TRACE"))
            print_message("%s: dispatched %lld, queued %lld, in flight %lld, deficit %lld\n",
                          tenant, sent, queued, flying, *out);
        free(body);
        if (ok && (runs < 0 || sent == runs) && queued == 0 && flying == 0 && *out < 0)
            return true;
    }
    return false;
}

static void test_replicas_share_take_over_and_join(void **state)
{
    pf_fixture *f = *state;
    start(&more[0], f, "rep-b");
    start(&more[1], f, "rep-c");
    const char *three[] = {"rep-a", "rep-b", "rep-c"};
    wait_shared(f, three, 3, 15000);
    char own[P][64];
    owners(f, own);
    print_message("shared: a %d, b %d, c %d\n", count(own, "rep-a"), count(own, "rep-b"),
                  count(own, "rep-c"));
    serve(f, 0, 40, 0);

    /* kill -9 of rep-c: its partitions owned again within the TTL and a
     * second, by the two left, and its runs served */
    bool was_c[P];
    for (int k = 0; k < P; k++)
        was_c[k] = strcmp(own[k], "rep-c") == 0;
    assert_true(count(own, "rep-c") >= 2);
    long long t0 = nt_now_ms(), back = 0;
    assert_int_equal(pt_proxy_kill(&more[1]), 0);
    while (!back && nt_now_ms() < t0 + 10000) {
        char now_own[P][64];
        owners(f, now_own);
        bool all = true;
        for (int k = 0; k < P; k++)
            if (was_c[k])
                all &= now_own[k][0] && strcmp(now_own[k], "rep-c") != 0;
        if (all)
            back = nt_now_ms();
        else
            nt_sleep_ms(20);
    }
    print_message("rep-c's partitions owned again %lld ms after kill -9\n", back - t0);
    assert_true(back > 0);
    assert_true(back - t0 <= TTL_MS + 1000);
    const char *two[] = {"rep-a", "rep-b"};
    wait_shared(f, two, 2, 10000);
    serve(f, 40, 40, 40);

    /* A debtor in each partition (runs r-160 to r-175), each ending in
     * debt, as its owner (rep-a or rep-b) reconciled it. */
    int port[4] = {ot_http_port(&f->px, 5000), ot_http_port(&more[0], 5000), 0, 0};
    assert_true(port[0] > 0 && port[1] > 0);
    char debtor[P][16];
    long long debt[P];
    owners(f, own);
    for (int k = 0; k < P; k++) {
        debtor_of(debtor[k], sizeof debtor[k], k);
        for (int i = 0; i < 2; i++) {
            char body[64];
            snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", 160 + 2 * k + i);
            assert_int_equal(pt_submit_async(&f->c, debtor[k], body, strlen(body), NULL), 0);
        }
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 80 + 2 * P, 20000), 0);
    for (int k = 0; k < P; k++)
        assert_true(debt_at(port[strcmp(own[k], "rep-a") == 0 ? 0 : 1], debtor[k], 2, &debt[k]));

    /* rep-d joins under load: it takes its share, nothing lost or doubled */
    pf_submit_runs(f, 80, 40, 16);
    moves mv;
    moves_start(&mv, f);
    start(&more[2], f, "rep-d");
    const char *joined[] = {"rep-a", "rep-b", "rep-d"};
    wait_shared(f, joined, 3, 15000);
    assert_int_equal(pt_worker_wait_completed(f->w, 120 + 2 * P, 20000), 0);
    serve(f, 120, 40, 120 + 2 * P);
    owners(f, own);
    print_message("joined: a %d, b %d, d %d\n", count(own, "rep-a"), count(own, "rep-b"),
                  count(own, "rep-d"));
    pf_wait_empty(f, "FAIR_SUBMIT");
    pf_assert_each_dispatched_once(f, 160 + 2 * P);
    /* Each debt survived its partition's planned move: rep-d has the
     * debt the old owner reconciled (its journal settled before the
     * handover, or what was unstored done again by the next owner). */
    port[3] = ot_http_port(&more[2], 5000);
    assert_true(port[3] > 0);
    for (int k = 0; k < P; k++) {
        if (strcmp(own[k], "rep-d") != 0)
            continue;
        long long now = 0;
        assert_true(debt_at(port[3], debtor[k], -1, &now));
        print_message("partition %d moved to rep-d: %s's debt %lld, was %lld\n", k, debtor[k],
                      now, debt[k]);
        assert_true(now == debt[k]);
    }
    /* each takeover read its partition's journal subject alone: no record
     * of another partition was read back (the whole journal was, before) */
    long long foreign = -1;
    assert_true(metric_of(port[3], "fairq_journal_foreign_records_total", &foreign));
    assert_true(foreign == 0);
    /* Each move waited for its journal to settle, or gave up after
     * PX_HANDOVER_SETTLE_MS: a loaded machine's PubAcks can take longer,
     * and the debts above are the next owner's all the same. The metric
     * counts the moves that gave up. */
    long long unsettled[2] = {-1, -1};
    for (int i = 0; i < 2; i++)
        assert_true(metric_of(port[i], "fairq_partition_handovers_unsettled_total",
                              &unsettled[i]));
    int settled = pt_log_print(&f->px, "journal settled for its move") +
                  pt_log_print(&more[0], "journal settled for its move");
    int gave_up = pt_log_print(&f->px, "journal did not settle for its move") +
                  pt_log_print(&more[0], "journal did not settle for its move");
    assert_true(settled + gave_up >= count(own, "rep-d"));
    assert_true(unsettled[0] + unsettled[1] == gave_up);
    /* the joiner's share came by handovers, one at a time */
    moves_read(&mv);
    print_message("%d planned moves, at most %d at once\n", mv.count, mv.most);
    assert_true(mv.count >= count(own, "rep-d"));
    assert_int_equal(mv.most, 1);
    natsSubscription_Destroy(mv.sub);
    /* and the replicas' metrics say it (issue 16 point 6): rep-d's
     * handovers count at least the partitions it took, the three
     * replicas' partitions owned add up to P, and a lease renewal's round
     * trip is well within the TTL */
    long long handovers = -1, owned[3] = {-1, -1, -1}, renew_max = -1;
    const int live[3] = {port[0], port[1], port[3]};
    for (long long end = nt_now_ms() + 10000;; nt_sleep_ms(100)) {
        for (int i = 0; i < 3; i++)
            assert_true(metric_of(live[i], "fairq_partitions_owned", &owned[i]));
        if (owned[0] + owned[1] + owned[2] == P || nt_now_ms() > end)
            break;
    }
    print_message("fairq_partitions_owned: a %lld, b %lld, d %lld\n", owned[0], owned[1],
                  owned[2]);
    assert_true(owned[0] + owned[1] + owned[2] == P);
    assert_true(metric_of(port[3], "fairq_partition_handovers_total", &handovers));
    assert_true(handovers >= count(own, "rep-d"));
    assert_true(metric_of(port[3], "fairq_lease_renew_max_seconds", &renew_max));
    assert_true(renew_max >= 0 && renew_max * 1000 < TTL_MS);
}

/* /readyz of the replica on port: its status, and whether its body holds text. */
static bool readyz(int port, int want_status, const char *text)
{
    int status = 0;
    char *body = NULL;
    bool ok = ot_http_get(port, "/readyz", &status, &body) == 0 && status == want_status &&
              body && strstr(body, text);
    if (!ok && getenv("IT_REPLICAS_TRACE"))
        print_message("/readyz: %d %s\n", status, body ? body : "");
    free(body);
    return ok;
}

/* With more replicas than partitions, one owns none: it is a standby, ready
 * (issue 12 point 4), saying who holds the partitions; fairq_ready says so
 * too. Once an owner dies it takes that partition and serves. */
static void test_replica_owning_none_is_a_ready_standby(void **state)
{
    pf_fixture *f = *state;
    pt_proxy *px[3] = {&f->px, &more[0], &more[1]};
    const char *ids[3] = {"rep-a", "rep-b", "rep-c"};
    start(&more[0], f, "rep-b");
    start(&more[1], f, "rep-c");
    int port[3];
    for (int i = 0; i < 3; i++)
        assert_true((port[i] = ot_http_port(px[i], 5000)) > 0);
    /* once the moves are over, the replica that owns none says so */
    char own[P][64], text[256];
    int idle = -1;
    bool ok = false;
    for (long long end = nt_now_ms() + 15000; !ok && nt_now_ms() < end; nt_sleep_ms(100)) {
        owners(f, own);
        idle = -1;
        for (int i = 0; i < 3 && own[0][0] && own[1][0]; i++)
            if (count(own, ids[i]) == 0)
                idle = i;
        snprintf(text, sizeof text, "standby: owns no partition; the 2 partitions are held "
                 "by %s (1), %s (1)", own[0], own[1]);
        /* /readyz and the metric read in one pass: a planned move still
         * under way can give the idle replica a partition between two
         * reads, so both are asked again until they agree on a standby */
        long long sb = 0, cons = 1;
        ok = idle >= 0 && readyz(port[idle], 200, text) &&
             metric_of(port[idle], "fairq_ready{reason=\"standby\"}", &sb) && sb == 1 &&
             metric_of(port[idle], "fairq_ready{reason=\"consumers\"}", &cons) && cons == 0;
    }
    assert_true(ok);
    /* partition 0's owner dies: the standby takes a partition, and serves */
    for (int i = 0; i < 3; i++)
        if (strcmp(own[0], ids[i]) == 0)
            assert_int_equal(pt_proxy_kill(px[i]), 0);
    ok = false;
    for (long long end = nt_now_ms() + TTL_MS + 5000; !ok && nt_now_ms() < end; nt_sleep_ms(100))
        ok = readyz(port[idle], 200, "ready") && !readyz(port[idle], 200, "standby");
    assert_true(ok);
}

/* P = 256 on replicas that own 128 at most each (natsio's consumers, two
 * a partition: lib/owner.h's bound): rep-a alone owns 128 and says the
 * other 128 are unowned (/readyz ready with the reason,
 * fairq_partitions_unassigned); rep-b joins and takes them, none is
 * unowned; a run of a tenant of a partition past 128 is served. Before,
 * fairq-proxy refused P > 128 at start. */
static void test_p256_on_two_replicas_of_128(void **state)
{
    pf_fixture *f = *state;
    int pa = ot_http_port(&f->px, 5000), pb;
    assert_true(pa > 0);
    long long owned = 0, un = 0, bound = 0, owned_b = 0, un_b = 0;
    bool ok = false;
    for (long long end = nt_now_ms() + 30000; !ok && nt_now_ms() < end; nt_sleep_ms(100))
        ok = metric_of(pa, "fairq_partitions_owned", &owned) && owned == 128 &&
             metric_of(pa, "fairq_partitions_unassigned", &un) && un == 128 &&
             readyz(pa, 200, "ready; 128 partitions unowned: every live replica owns its "
                    "bound of 128");
    print_message("rep-a alone: owns %lld, %lld unowned\n", owned, un);
    assert_true(ok);
    assert_true(metric_of(pa, "fairq_partitions_bound", &bound));
    assert_int_equal(bound, 128);
    start(&more[0], f, "rep-b");
    assert_true((pb = ot_http_port(&more[0], 5000)) > 0);
    ok = false;
    for (long long end = nt_now_ms() + 30000; !ok && nt_now_ms() < end; nt_sleep_ms(100))
        ok = metric_of(pa, "fairq_partitions_owned", &owned) && owned == 128 &&
             metric_of(pb, "fairq_partitions_owned", &owned_b) && owned_b == 128 &&
             metric_of(pa, "fairq_partitions_unassigned", &un) && un == 0 &&
             metric_of(pb, "fairq_partitions_unassigned", &un_b) && un_b == 0 &&
             readyz(pa, 200, "ready") && !readyz(pa, 200, "unowned");
    print_message("rep-a owns %lld, rep-b %lld, unowned %lld and %lld\n", owned, owned_b, un,
                  un_b);
    assert_true(ok);
    char t[16];
    for (int n = 0;; n++) {
        snprintf(t, sizeof t, "hi%d", n);
        if (fq_partition_of(t, strlen(t), 256) >= 128)
            break;
    }
    static const char body[] = "{\"run_id\":\"past-128\"}";
    assert_int_equal(pt_submit(&f->c, t, body, strlen(body), NULL), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 1, 20000), 0);
}

/* With P > 1, a journal batch refused (another wrote the partition's
 * journal) lets that partition go, at once, and only it: the replica keeps
 * serving the others instead of exiting, and counts it. Nobody took the
 * partition's key: it is released rather than renewed on, and taken again
 * in a new term by its assigned replica (the only one), which then serves
 * its runs again; before, the partition stayed owned and unserved. */
static void test_fenced_partition_let_go_alone(void **state)
{
    pf_fixture *f = *state;
    const char *one[] = {"rep-a"};
    wait_shared(f, one, 1, 15000);
    int port = ot_http_port(&f->px, 5000);
    assert_true(port > 0);
    /* partition 3 served (adopted, read back, consumed), then another
     * writer's marker on its journal subject, then a run of it */
    char fenced[16], body[64];
    debtor_of(fenced, sizeof fenced, 3);
    for (int i = 0; i < 2; i++) {
        if (i)
            pf_publish(f, "fairq.runs.3", "{\"v\":1,\"entries\":[]}");
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", 1000 + i);
        assert_int_equal(pt_submit_async(&f->c, fenced, body, strlen(body), NULL), 0);
        assert_int_equal(pt_submit_flush(&f->c), 0);
        if (!i)
            assert_int_equal(pt_worker_wait_completed(f->w, 1, 20000), 0);
    }
    assert_int_equal(pt_log_wait(&f->px, "a partition's journal refused our batch", 10000), 0);
    long long v = 0;
    bool ok = false;
    for (long long end = nt_now_ms() + 5000; !ok && nt_now_ms() < end; nt_sleep_ms(100))
        ok = metric_of(port, "fairq_partitions_fenced_total", &v) && v == 1;
    assert_true(ok);
    /* partition 3 taken again in a new term: a run of it is served */
    snprintf(body, sizeof body, "{\"run_id\":\"r-1002\"}");
    assert_int_equal(pt_submit_async(&f->c, fenced, body, strlen(body), NULL), 0);
    assert_int_equal(pt_submit_flush(&f->c), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 3, 20000), 0);
    assert_int_equal(pt_log_count(&f->px, "took a partition\" partition=3 "), 2);
    char own[P][64];
    owners(f, own);
    assert_string_equal(own[3], "rep-a");
    /* the other partitions' tenants are served on, by the same process */
    int n = 0;
    for (int i = 0; n < 12; i++) {
        char tenant[16];
        snprintf(tenant, sizeof tenant, "t%d", i);
        if (fq_partition_of(tenant, strlen(tenant), P) == 3)
            continue;
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", n++);
        assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 15, 20000), 0);
    assert_true(nt_proc_alive(&f->px.proc));
    assert_int_equal(pt_log_count(&f->px, "another proxy leads and wrote it"), 0);
}

/* A second proxy with rep-a's replica_id started beside it: it says so
 * and exits 1. */
static void twin_refused(pf_fixture *f)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, parts, "rep-a");
    assert_int_equal(pt_proxy_start(&more[0], f->srv, "rep-a-twin", yaml), 0);
    assert_int_equal(pt_log_wait(&more[0], "another running fairq-proxy has this replica_id",
                                 2 * TTL_MS + 5000), 0);
    assert_int_equal(nt_proc_wait(&more[0].proc, 5000), 0);
    assert_int_equal(nt_proc_exit_code(&more[0].proc), 1);
}

/* A second proxy given rep-a's replica_id: it never registers, owns
 * nothing, and stops with a line saying why once it saw the first renew
 * rep-a's registry key (within two TTLs); the first keeps every
 * partition. Before, it took rep-a's registry key and partition keys as
 * its own, and both served the same partitions. */
static void test_duplicate_replica_id_refused(void **state)
{
    pf_fixture *f = *state;
    const char *one[] = {"rep-a"};
    wait_shared(f, one, 1, 15000);
    twin_refused(f);
    assert_int_equal(pt_log_count(&more[0], "took a partition"), 0);
    char own[P][64];
    owners(f, own);
    assert_int_equal(count(own, "rep-a"), P);
    assert_int_equal(pt_log_count(&f->px, "lost a partition"), 0);
    assert_true(nt_proc_alive(&f->px.proc));
}

/* The same with partitions: 1: the twin stands by (the leader key holds
 * rep-a under the first's instance), never takes the key, and stops with
 * the same line once it saw the first renew it; the first leads on.
 * Before, the twin read the key as its own and took it, the first read
 * its refused renewal's key as its own late write and went on, and both
 * led. */
static void test_duplicate_replica_id_refused_p1(void **state)
{
    pf_fixture *f = *state;
    assert_int_equal(pt_log_wait(&f->px, "leader lease acquired", 15000), 0);
    twin_refused(f);
    assert_int_equal(pt_log_count(&more[0], "leader lease acquired"), 0);
    assert_true(nt_proc_alive(&f->px.proc));
    assert_int_equal(pt_log_count(&f->px, "lost the leader lease"), 0);
    /* it serves on */
    assert_int_equal(pt_submit(&f->c, "acme", "{\"run_id\":\"a-1\"}", 16, NULL), 0);
    pf_wait_msgs(f, "FAIR_DISPATCH", 1);
}

/* Whether stream lists consumer name. */
static bool consumer_listed(pf_fixture *f, const char *stream, const char *name)
{
    jsConsumerNamesList *l = NULL;
    assert_int_equal(js_ConsumerNames(&l, f->c.js, stream, NULL, NULL), NATS_OK);
    bool found = false;
    for (int i = 0; i < l->Count; i++)
        found |= strcmp(l->List[i], name) == 0;
    jsConsumerNamesList_Destroy(l);
    return found;
}

/* A partition let go (here by a planned move, as rep-b joins) keeps its
 * consumers on the server until its next owner deletes them before making
 * its own, as it does a dead owner's: the replica that deletes a
 * partition's consumer is then the one that makes the next, and knows its
 * name. A nats-server node restarted just before may keep a stale copy of
 * a deleted consumer and refuse every consumer on its filter until that
 * one is made again under its name and deleted (docs/operations.md,
 * it_cluster test_stale_consumer_copy_cleared); when the replica letting
 * the partition go deleted them, its next owner, refused, did not know
 * what to clear (the node-kill case of it_cluster_replicas: a partition
 * undispatched for minutes). rep-b may not use the consumer API: it takes
 * the partition, is refused its first consumer request and exits; rep-a's
 * consumers of that partition are still there, and rep-a, taking the
 * partition back in a new term once rep-b's keys aged out, deletes them and
 * serves it. Before, rep-a deleted them as it let the partition go. */
static void test_let_go_consumers_left_to_next_owner(void **state)
{
    pf_fixture *f = *state;
    static const char *const streams[] = {"FAIR_SUBMIT", "FAIR_DONE"};
    assert_int_equal(pf_wait_shared(&f->c, "fairq_lease", 2, (const char *[]){"rep-a"}, 1, 15000),
                     0);
    serve(f, 0, 16, 0);     /* both partitions' consumers made */
    /* each partition's consumers: fairq-p<k>-<term>, rep-a's term */
    char name[2][2][64] = {{"", ""}, {"", ""}};
    for (int s = 0; s < 2; s++) {
        jsConsumerNamesList *l = NULL;
        assert_int_equal(js_ConsumerNames(&l, f->c.js, streams[s], NULL, NULL), NATS_OK);
        for (int i = 0; i < l->Count; i++) {
            int p = -1;
            if (sscanf(l->List[i], "fairq-p%d-", &p) == 1 && p >= 0 && p < 2)
                snprintf(name[s][p], sizeof name[s][p], "%s", l->List[i]);
        }
        jsConsumerNamesList_Destroy(l);
    }
    char url[128], yaml[512];
    snprintf(url, sizeof url, "nats://b:b@127.0.0.1:%d", natstest_port(f->srv));
    snprintf(yaml, sizeof yaml, yaml_fmt, parts, "rep-b");
    assert_int_equal(pt_proxy_start_url(&more[0], f->srv, url, "rep-b", yaml), 0);
    /* rep-b takes a partition: rep-a let it go */
    int k = -1;
    char own[2][PF_ID_MAX];
    for (long long end = nt_now_ms() + 15000; k < 0 && nt_now_ms() < end; nt_sleep_ms(20)) {
        pf_owners(&f->c, "fairq_lease", 2, own);
        k = strcmp(own[0], "rep-b") == 0 ? 0 : strcmp(own[1], "rep-b") == 0 ? 1 : -1;
    }
    assert_true(k >= 0);
    /* refused the consumer API, rep-b exits; what rep-a left is there still
     * (unless rep-a has taken it back already, rep-b's key aged out) */
    assert_int_equal(nt_proc_wait(&more[0].proc, 15000), 0);
    print_message("rep-b exited %d\n", nt_proc_exit_code(&more[0].proc));
    for (int s = 0; s < 2; s++) {
        assert_true(name[s][k][0]);
        bool left = consumer_listed(f, streams[s], name[s][k]);
        pf_owners(&f->c, "fairq_lease", 2, own);    /* read after: rep-a's then too */
        print_message("p.%d taken by rep-b: rep-a's %s on %s %s; p.%d's holder now '%s'\n", k,
                      name[s][k], streams[s], left ? "left" : "deleted", k, own[k]);
        assert_true(left || strcmp(own[k], "rep-a") == 0);  /* rep-a's again: moot */
    }
    /* rep-a takes it back, deletes them, makes its own and serves */
    assert_int_equal(pf_wait_shared(&f->c, "fairq_lease", 2, (const char *[]){"rep-a"}, 1,
                                    3 * TTL_MS + 5000),
                     0);
    serve(f, 16, 16, 16);
    for (int s = 0; s < 2; s++)
        assert_false(consumer_listed(f, streams[s], name[s][k]));
}

/* The first name "<prefix><n>" of partition k of parts. */
static void tenant_in(char *out, size_t cap, const char *prefix, int k, int parts_of)
{
    for (int n = 0;; n++) {
        snprintf(out, cap, "%s%d", prefix, n);
        if (fq_partition_of(out, strlen(out), (uint32_t)parts_of) == (uint32_t)k)
            return;
    }
}

/* The value of field (with its '=') on the last line of px's log holding
 * text; -1 if none. */
static long long log_last_field(const pt_proxy *px, const char *text, const char *field)
{
    FILE *fp = fopen(px->log, "r");
    char line[4096];
    long long v = -1;
    while (fp && fgets(line, sizeof line, fp)) {
        const char *at = strstr(line, text) ? strstr(line, field) : NULL;
        if (at)
            v = atoll(at + strlen(field));
    }
    if (fp)
        fclose(fp);
    return v;
}

/* A replica taking a partition reads that partition's journal back while
 * it dispatches for its others. rep-a owns both partitions; a tenant of
 * partition 0 has a backlog that slowed workers take 8 at a time; another
 * writer's long journal on partition 1's subject (JOURNAL_MSGS debt
 * records) fences partition 1 at its next batch, and rep-a lets it go and
 * takes it again in a new term, reading all of that back: partition 0's
 * runs are dispatched as their slots come free during that read, as its
 * end says (dispatched_meanwhile). Before, the loop read the journal back
 * itself and dispatched nothing until the read had ended. */
static void test_others_served_while_a_journal_is_read_back(void **state)
{
    enum { JOURNAL_MSGS = 20000, BACKLOG = 1000 };
    pf_fixture *f = *state;
    assert_int_equal(pf_wait_shared(&f->c, "fairq_lease", 2, (const char *[]){"rep-a"}, 1, 15000),
                     0);
    serve(f, 0, 8, 0);      /* both partitions read back and consumed */
    char t0[16], t1[16], body[160];
    tenant_in(t0, sizeof t0, "a", 0, 2);
    tenant_in(t1, sizeof t1, "b", 1, 2);
    /* partition 1's journal made long by another writer; the read-backs
     * counted from before it (its fence may come from these records before
     * any submit of partition 1, and its read end before the submit) */
    int ends = pt_log_count(&f->px, "recovered state from NATS");
    long long at = nt_now_ms();
    for (int i = 0; i < JOURNAL_MSGS; i++) {
        snprintf(body, sizeof body,
                 "{\"v\":1,\"entries\":[{\"st\":\"debt\",\"t\":\"%s\",\"df\":-%d,"
                 "\"at\":%lld}]}", t1, 1 + i % 50, at);
        assert_int_equal(js_PublishAsync(f->c.js, "fairq.runs.1", body, (int)strlen(body), NULL),
                         NATS_OK);
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 30000;
    assert_int_equal(js_PublishAsyncComplete(f->c.js, &po), NATS_OK);
    /* partition 0's backlog, 8 in flight at a time, 20 ms each */
    pt_worker_speed(f->w, 20, 0);
    size_t done = pt_worker_completed(f->w);
    for (int i = 0; i < BACKLOG; i++) {
        snprintf(body, sizeof body, "{\"run_id\":\"p0-%d\"}", i);
        assert_int_equal(pt_submit_async(&f->c, t0, body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, done + 8, 20000), 0);    /* flowing */
    /* a run of partition 1: its journal batch refused, the partition let
     * go and taken again, its journal read back. A read as short as this
     * one (40 ms on a quiet machine) may end before any of partition 0's
     * slots frees when the workers run late under load: up to five
     * read-backs, another writer's record before each after the first,
     * and one of them must have dispatched meanwhile (before, none could) */
    long long meanwhile = 0;
    int p1 = 0;
    while (meanwhile <= 0 && p1 < 5) {
        if (p1) {
            ends = pt_log_count(&f->px, "recovered state from NATS");
            snprintf(body, sizeof body,
                     "{\"v\":1,\"entries\":[{\"st\":\"debt\",\"t\":\"%s\",\"df\":-1,"
                     "\"at\":%lld}]}", t1, nt_now_ms());
            assert_int_equal(js_Publish(NULL, f->c.js, "fairq.runs.1", body, (int)strlen(body),
                                        NULL, NULL), NATS_OK);
        }
        snprintf(body, sizeof body, "{\"run_id\":\"p1-%d\"}", ++p1);
        assert_int_equal(pt_submit(&f->c, t1, body, strlen(body), NULL), 0);
        assert_int_equal(pt_log_wait_n(&f->px, "recovered state from NATS", ends + 1, 30000), 0);
        /* the read that ended was of partition 1's long journal */
        assert_true(log_last_field(&f->px, "recovered state from NATS", "messages=") >=
                    JOURNAL_MSGS);
        meanwhile = log_last_field(&f->px, "recovered state from NATS", "dispatched_meanwhile=");
        size_t by_then = pt_worker_completed(f->w) - done;
        print_message("read-back %d: partition 0's runs dispatched meanwhile: %lld (%zu of %d "
                      "completed by its end)\n", p1, meanwhile, by_then, BACKLOG);
        assert_true(by_then < BACKLOG);     /* its backlog still there at the end */
    }
    pt_log_print(&f->px, "journal subject read back\" subject=fairq.runs.1");
    assert_true(meanwhile > 0);
    /* partition 1 served again, its runs too, and the backlog */
    assert_int_equal(pt_worker_wait_completed(f->w, done + BACKLOG + (size_t)p1, 30000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replicas_share_take_over_and_join, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replica_owning_none_is_a_ready_standby, setup_two,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fenced_partition_let_go_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_others_served_while_a_journal_is_read_back,
                                        setup_two, teardown),
        cmocka_unit_test_setup_teardown(test_p256_on_two_replicas_of_128, setup_256, teardown),
        cmocka_unit_test_setup_teardown(test_let_go_consumers_left_to_next_owner,
                                        setup_two_no_consumers_for_b, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_replica_id_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_replica_id_refused_p1, setup_one,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
