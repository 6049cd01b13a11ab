/* it_cluster_replicas.c -- three fairq replicas on a 3-node JetStream cluster under a flood: a replica killed, frozen past its lease, a server node killed, a fourth replica joining, every replica restarted in turn; every run dispatched once and reconciled once. */
/*
 * One world for every case, in order (issue 16 point 5): three
 * nats-server nodes routed on loopback (tests/support/natscluster.h), each
 * mapping fair.submit.* and fair.done.* to P = 8 partitions as
 * config/nats-partitions.conf does; fairq-proxy replicas rep-a, rep-b and
 * rep-c with partitions: 8, streams.replicas: 3 (every stream and bucket
 * on all three nodes) and every node's URL; a producer thread submitting
 * a steady flood from 24 tenants on node 1, and simulated workers on
 * node 2 completing each run. Each case ends with the whole history
 * checked: every run r-0 .. r-(n-1) submitted so far is stored once in
 * FAIR_DISPATCH, and has one done record in the journal FAIRQ_RUNS (each
 * completion reconciled once, whichever replica owned its tenant then);
 * the workers' own redeliveries are printed, not counted as dispatches.
 * The replicas run window.share on, as config/fairq-cluster.yaml ships
 * them; the shares case, the flood stopped, measures the shares of point 4
 * (tests/support/sharecheck.h).
 * Bounds come from the config: a lease's TTL plus a second for a takeover,
 * a second of silence at most for a partition not moving during a join.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "natscluster.h"
#include "partition.h"
#include "proxyfixture.h"
#include "sharecheck.h"

#define P 8                 /* partitions */
/* streams.lease_ttl_ms: the default 3 s, which the bounds are
 * stated at. The test ran 6 s while a join at 3 s left a partition that did
 * not move silent 1,436 ms (1 run in 5, load 24): the fetch thread waited
 * for consumers' listings and deletes, 30 to 270 ms each on a loaded
 * cluster and now and then unanswered for the API's 5 s, pulling for no
 * other partition meanwhile; it no longer waits (lib/natsio.c). Since, at
 * 3 s: docs/operations.md, "The tests". */
#define TTL_MS 3000
#define TENANTS 24
#define RATE 100            /* runs a second the producer submits */
#define REPLICAS 4          /* rep-a .. rep-d; rep-d joins later */
#define BUCKET "fairq_lease"
#define PAUSE_MAX_MS 1000   /* longest silence a join may add to a partition not moving */

/* window.run_timeout_ms: an hour, not the default 10 minutes. The journal
 * keeps a record for the longer of the run timeout and the duplicate
 * window, and a minute more (FAIRQ_RUNS's max age, 11 minutes by default),
 * and each case checks the done record of every run since the world
 * started: with FAIRQ_TEST_NODE_KILL_ROUNDS, whichever case was under way
 * 11 minutes in failed with "run r-0 has no done record", aged out, not
 * lost (each of round 8's three cases in a run of 8 rounds; most likely
 * the freeze case's missing done record seen once before). A run here
 * completes in milliseconds, so the timeout changes nothing else. */
static const char yaml_fmt[] =
    "partitions: 8\n"
    "replica_id: %s\n"
    "streams:\n  replicas: 3\n  lease_ttl_ms: 3000\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 8\n  run_timeout_ms: 3600000\n  share: on\n"
    "plans:\n  - name: free\n  - name: heavy\n    weight: 3\n"
    "tenants:\n  - id: big\n    plan: heavy\n";

static const char mapping[] =
    "mappings {\n"
    "  \"fair.submit.*\": \"fair.submit.{{partition(8,1)}}.{{wildcard(1)}}\"\n"
    "  \"fair.done.*\": \"fair.done.{{partition(8,1)}}.{{wildcard(1)}}\"\n"
    "}\n";

static const char *const ids[REPLICAS] = {"rep-a", "rep-b", "rep-c", "rep-d"};

/* The streams fairq uses, the lease bucket's included. */
static const char *const streams[] = {"FAIR_SUBMIT", "FAIR_DISPATCH", "FAIR_DONE", "FAIRQ_RUNS",
                                      "KV_fairq_lease"};

/* The producer: a steady flood on a connection of its own. */
typedef struct load {
    pt_client c;
    pthread_t th;
    atomic_bool stop;
    atomic_int next;            /* runs r-0 .. r-(next-1) were submitted (PubAck'd) */
    atomic_int failed;          /* submits given up on */
    bool running;
} load;

static struct world {
    natscluster *cl;
    pt_proxy px[REPLICAS];
    bool started[REPLICAS];
    pf_fixture f;               /* c on node 1, w on node 2; f.px unused */
    size_t extra;               /* runs the workers completed not r-<n>: the shares case's */
    load ld;
} W;

/* ---- the flood ------------------------------------------------------- */

static void *load_main(void *arg)
{
    load *l = arg;
    long long t0 = nt_now_ms();
    long long sent = 0;
    while (!atomic_load(&l->stop)) {
        /* RATE a second, in steps of 10 ms (pacing, not waiting for anything) */
        long long due = (nt_now_ms() - t0) * RATE / 1000;
        for (; sent < due && !atomic_load(&l->stop); sent++) {
            int i = atomic_load(&l->next);
            char tenant[16], body[64], id[32];
            snprintf(tenant, sizeof tenant, "t%d", i % TENANTS);
            snprintf(id, sizeof id, "r-%d", i);
            snprintf(body, sizeof body, "{\"run_id\":\"%s\"}", id);
            /* a node dying may leave a submit's PubAck lost: sent again
             * under the same Nats-Msg-Id, which JetStream stores once, as
             * a careful producer does */
            const char *hdrs[] = {"Nats-Msg-Id", id, NULL};
            long long end = nt_now_ms() + 20000;
            while (pt_submit(&l->c, tenant, body, strlen(body), hdrs) != 0) {
                if (nt_now_ms() > end) {
                    atomic_fetch_add(&l->failed, 1);
                    break;
                }
                nt_sleep_ms(100);
            }
            atomic_fetch_add(&l->next, 1);
        }
        nt_sleep_ms(10);
    }
    return NULL;
}

static int load_stop(void);

static void load_start(void)
{
    if (W.ld.running)      /* left running by a case that failed */
        load_stop();
    atomic_store(&W.ld.stop, false);
    assert_int_equal(pthread_create(&W.ld.th, NULL, load_main, &W.ld), 0);
    W.ld.running = true;
}

/* Stop the flood; the runs submitted. */
static int load_stop(void)
{
    if (W.ld.running) {
        atomic_store(&W.ld.stop, true);
        pthread_join(W.ld.th, NULL);
        W.ld.running = false;
    }
    assert_int_equal(atomic_load(&W.ld.failed), 0);
    return atomic_load(&W.ld.next);
}

/* Wait until the flood has submitted n runs more than now. */
static void load_wait(int n)
{
    int want = atomic_load(&W.ld.next) + n;
    long long end = nt_now_ms() + 30000;
    while (atomic_load(&W.ld.next) < want) {
        assert_true(nt_now_ms() < end);
        nt_sleep_ms(10);
    }
}

/* ---- checks ---------------------------------------------------------- */

/* Done records per run in the journal (FAIRQ_RUNS, every partition's
 * subject): done[i] for run r-i, i < n; the total of them. */
static int journal_done(int n, unsigned char *done)
{
    memset(done, 0, (size_t)n);
    pt_msg *m = NULL;
    size_t k = 0;
    assert_int_equal(pt_stream_read(&W.f.c, "FAIRQ_RUNS", &m, &k), 0);
    int total = 0;
    for (size_t i = 0; i < k; i++) {
        cJSON *j = cJSON_ParseWithLength(m[i].data, m[i].len);
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "entries"))
        {
            const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "st"));
            const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "r"));
            int id = -1;
            if (!st || !r || strcmp(st, "done") != 0 || sscanf(r, "r-%d", &id) != 1)
                continue;
            assert_true(id >= 0 && id < n);
            if (done[id]++)
                fail_msg("run r-%d reconciled twice (two done records)", id);
            total++;
        }
        cJSON_Delete(j);
    }
    pt_msgs_free(m, k);
    return total;
}

static void consumers_dump(const char *stream);

/* What FAIR_SUBMIT holds and where each of its consumers is. */
static void submit_dump(void)
{
    pt_msg *m = NULL;
    size_t k = 0;
    if (pt_stream_read(&W.f.c, "FAIR_SUBMIT", &m, &k) == 0)
        for (size_t i = 0; i < k; i++)
            print_message("left: seq %llu %s %s\n", (unsigned long long)m[i].seq, m[i].subject,
                          m[i].run_id[0] ? m[i].run_id : m[i].data);
    pt_msgs_free(m, k);
    consumers_dump("FAIR_SUBMIT");
}

/* Where each consumer of stream is, and each stream's leader. */
static void consumers_dump(const char *stream)
{
    jsConsumerInfoList *cl = NULL;
    if (js_Consumers(&cl, W.f.c.js, stream, NULL, NULL) == NATS_OK)
        for (int i = 0; i < cl->Count; i++) {
            const jsConsumerInfo *ci = cl->List[i];
            print_message("consumer %s (%s): pending %llu, unacked %lld, delivered up to %llu, "
                          "acked up to %llu, waiting pulls %lld, leader %s\n",
                          ci->Name, ci->Config->FilterSubject ? ci->Config->FilterSubject : "",
                          (unsigned long long)ci->NumPending, (long long)ci->NumAckPending,
                          (unsigned long long)ci->Delivered.Stream,
                          (unsigned long long)ci->AckFloor.Stream, (long long)ci->NumWaiting,
                          ci->Cluster && ci->Cluster->Leader ? ci->Cluster->Leader : "none");
        }
    jsConsumerInfoList_Destroy(cl);
    /* each stream's leader (nodes n0 .. n2; n0 is the one killed) */
    for (size_t i = 0; i < sizeof streams / sizeof *streams; i++) {
        jsStreamInfo *si = NULL;
        if (js_GetStreamInfo(&si, W.f.c.js, streams[i], NULL, NULL) == NATS_OK)
            print_message("stream %s: leader %s\n", streams[i],
                          si->Cluster && si->Cluster->Leader ? si->Cluster->Leader : "none");
        jsStreamInfo_Destroy(si);
    }
}

/* Wait until FAIR_SUBMIT holds no more than before (every submit acked by
 * its owner), up to 20 s. An ack is a core publish nobody confirms: one
 * lost with a dying node, or sent by a replica whose consumer was just
 * deleted, leaves its submit unacked until the consumer's AckWait (an
 * hour) redelivers it to be recognised. So what is left is said, with
 * where each consumer is, and tolerated: the checks that follow fail if
 * such a run was not dispatched once, or not reconciled once. */
static void submit_drained(void)
{
    static uint64_t before;     /* unacked submits tolerated so far */
    uint64_t left = 0;
    for (long long end = nt_now_ms() + 20000; nt_now_ms() < end; nt_sleep_ms(50)) {
        jsStreamInfo *si = NULL;
        if (js_GetStreamInfo(&si, W.f.c.js, "FAIR_SUBMIT", NULL, NULL) != NATS_OK)
            continue;
        left = si->State.Msgs;
        jsStreamInfo_Destroy(si);
        if (left <= before)
            return;
    }
    submit_dump();
    print_message("FAIR_SUBMIT holds %llu submits unacked (their acks lost)\n",
                  (unsigned long long)left);
    before = left;
}

/* Runs not all completed: say which were not dispatched, what FAIR_SUBMIT
 * holds, and what the replicas warned of, then fail. */
static void stuck(int n)
{
    pt_msg *m = NULL;
    size_t k = 0;
    char *seen = calloc((size_t)n, 1);
    assert_non_null(seen);
    if (pt_stream_read(&W.f.c, "FAIR_DISPATCH", &m, &k) == 0)
        for (size_t i = 0; i < k; i++) {
            int id = -1;
            if (sscanf(m[i].run_id, "r-%d", &id) == 1 && id >= 0 && id < n)
                seen[id] = 1;
        }
    pt_msgs_free(m, k);
    int missing = 0;
    for (int i = 0; i < n; i++)
        if (!seen[i] && missing++ < 20)
            print_message("not dispatched: r-%d (t%d)\n", i, i % TENANTS);
    print_message("%d runs not dispatched, %zu dispatches stored\n", missing, k);
    free(seen);
    submit_dump();
    for (int i = 0; i < REPLICAS; i++) {
        FILE *f = W.started[i] ? fopen(W.px[i].log, "r") : NULL;
        char line[2048];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, "level=warn") || strstr(line, "level=error"))
                print_message("%s: %s", ids[i], line);
        if (f)
            fclose(f);
    }
    fail_msg("%zu of %d runs completed", pt_worker_completed(W.f.w), n);
}

/* Runs completed without a done record 20 s later: say which (20 at
 * most), and whether their records come within the done consumers' ack
 * wait and 10 s (a completion delivered and left unacked comes again
 * after it), where FAIR_DONE's consumers are and what the replicas warned
 * of; then fail. */
static void done_missing(int n, const unsigned char *done)
{
    unsigned char *now = malloc((size_t)n);
    assert_non_null(now);
    long long t0 = nt_now_ms();
    int missing = 0;
    for (int i = 0; i < n; i++)
        if (!done[i] && missing++ < 20) {
            char t[16];
            snprintf(t, sizeof t, "t%d", i % TENANTS);
            print_message("no done record: r-%d (%s, partition %u)\n", i, t,
                          fq_partition_of(t, strlen(t), P));
        }
    pt_msg *m = NULL;
    size_t k = 0;
    if (pt_stream_read(&W.f.c, "FAIR_DONE", &m, &k) == 0)     /* completions not acked */
        for (size_t i = 0; i < k; i++)
            print_message("FAIR_DONE holds: seq %llu %s %s\n", (unsigned long long)m[i].seq,
                          m[i].subject, m[i].run_id[0] ? m[i].run_id : m[i].data);
    pt_msgs_free(m, k);
    consumers_dump("FAIR_DONE");
    int got = 0;
    while ((got = journal_done(n, now)) < n && nt_now_ms() < t0 + 70000)
        nt_sleep_ms(500);
    for (int i = 0; i < n; i++)
        if (!done[i])
            print_message("r-%d: %s\n", i, now[i] ? "its done record came later" : "none yet");
    print_message("%d done records missing 20 s after the runs completed; %d of them still "
                  "missing %lld ms later\n",
                  missing, n - got, nt_now_ms() - t0);
    for (int i = 0; i < REPLICAS; i++) {
        FILE *f = W.started[i] ? fopen(W.px[i].log, "r") : NULL;
        char line[2048];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, "level=warn") || strstr(line, "level=error"))
                print_message("%s: %s", ids[i], line);
        if (f)
            fclose(f);
    }
    free(now);
    fail_msg("%d runs have no done record", missing);
}

/* Stop the flood and check the whole history: every run completed,
 * stored once in FAIR_DISPATCH, reconciled once; n the runs so far. */
static int all_once(const char *what)
{
    int n = load_stop();
    if (pt_worker_wait_completed(W.f.w, (size_t)n + W.extra, 60000) != 0)
        stuck(n);
    submit_drained();
    pf_assert_each_dispatched_once(&W.f, n);
    unsigned char *done = malloc((size_t)n);
    assert_non_null(done);
    int got = 0;
    for (long long end = nt_now_ms() + 20000; (got = journal_done(n, done)) < n;
         nt_sleep_ms(50))
        if (nt_now_ms() > end)
            break;
    if (got < n)
        done_missing(n, done);
    free(done);
    size_t rx = pt_worker_received(W.f.w), cx = pt_worker_completed(W.f.w);
    print_message("%s: %d runs, each dispatched once and reconciled once; workers' redeliveries "
                  "%zu\n",
                  what, n, rx - cx);
    return n;
}

/* ---- the replicas ---------------------------------------------------- */

static int start(int i)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, ids[i]);
    /* every node's URL (nats.c picks among them at random) */
    if (pt_proxy_start_url(&W.px[i], natscluster_node(W.cl, i % NC_NODES), natscluster_urls(W.cl),
                           ids[i], yaml) != 0 ||
        pt_log_wait(&W.px[i], "fairq-proxy running", 30000) != 0)
        return -1;
    W.started[i] = true;
    return 0;
}

static void owners(char (*own)[PF_ID_MAX])
{
    pf_owners(&W.f.c, BUCKET, P, own);
}

/* Wait until the replicas who[0 .. n-1] share the partitions; if they do
 * not, print what each replica's log says of its partitions, and fail. */
static void wait_shared(int n, const int *who)
{
    const char *names[REPLICAS];
    for (int i = 0; i < n; i++)
        names[i] = ids[who[i]];
    if (pf_wait_shared(&W.f.c, BUCKET, P, names, n, 20000) == 0)
        return;
    for (int i = 0; i < REPLICAS; i++) {
        FILE *f = W.started[i] ? fopen(W.px[i].log, "r") : NULL;
        char line[2048];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, "partition") || strstr(line, "replica") || strstr(line, "lease"))
                print_message("%s: %s", ids[i], line);
        if (f)
            fclose(f);
    }
    fail_msg("the partitions are not shared by %d replicas", n);
}

/* Wait until no partition is id's and every one is owned (id "": every
 * one is owned); the time it took from t0, -1 past timeout_ms. */
static long long wait_taken_from(const char *id, long long t0, int timeout_ms)
{
    char own[P][PF_ID_MAX];
    for (;;) {
        owners(own);
        bool all = true;
        for (int k = 0; k < P; k++)
            all &= own[k][0] && strcmp(own[k], id) != 0;
        if (all)
            return nt_now_ms() - t0;
        if (nt_now_ms() > t0 + timeout_ms)
            return -1;
        nt_sleep_ms(20);
    }
}

/* The producer's JetStream context waits 2 s for a PubAck, not the
 * fixture's 30: a submit whose PubAck a dying node lost is sent again
 * soon. */
static int load_js(pt_client *c)
{
    jsOptions o;
    jsOptions_Init(&o);
    o.Wait = 2000;
    jsCtx_Destroy(c->js);
    c->js = NULL;
    return natsConnection_JetStream(&c->js, c->nc, &o) == NATS_OK ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    pt_worker_opts wo = {.concurrency = 16, .service_ms = 20};
    if (natscluster_start(&W.cl, mapping) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (start(i) != 0)
            return -1;
    W.f.srv = natscluster_node(W.cl, 1);
    if (pt_connect(&W.f.c, natscluster_node(W.cl, 1)) != 0 ||
        pt_connect(&W.ld.c, natscluster_node(W.cl, 1)) != 0 ||
        load_js(&W.ld.c) != 0 ||
        pt_worker_start(&W.f.w, natscluster_node(W.cl, 2), &wo) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (W.ld.running) {
        atomic_store(&W.ld.stop, true);
        pthread_join(W.ld.th, NULL);
    }
    pt_worker_stop(W.f.w);
    for (int i = 0; i < REPLICAS; i++)
        if (W.started[i] && nt_proc_alive(&W.px[i].proc)) {
            kill(W.px[i].proc.pid, SIGCONT);
            pt_proxy_stop(&W.px[i]);
        }
    /* what each partition taken cost its replica to read back */
    for (int i = 0; i < REPLICAS; i++)
        if (W.px[i].log[0]) {
            pt_log_print(&W.px[i], "journal subject read back");
            pt_log_print(&W.px[i], "recovered state from NATS");
        }
    pt_close(&W.ld.c);
    pt_close(&W.f.c);
    natscluster_destroy(W.cl);
    return 0;
}

/* ---- the cases, in order, on the one world --------------------------- */

/* A request's reply, parsed; fails the test without one. */
static cJSON *ask(const char *subject, const char *body)
{
    char *r = pt_request(&W.f.c, subject, body, NULL);
    assert_non_null(r);
    cJSON *j = cJSON_Parse(r);
    if (!j)
        fail_msg("%s: not JSON: %s", subject, r);
    free(r);
    return j;
}

/* The stats of tenant t as the replica asked answers them (subject
 * <admin>.stats, or <admin>.replica.<id>.stats): its completed runs, -1
 * if that replica does not know the tenant. */
static long tenant_completed(const char *subject, const char *t)
{
    char body[64];
    snprintf(body, sizeof body, "{\"tenant\":\"%s\"}", t);
    cJSON *j = ask(subject, body);
    long n = -1;
    if (pf_num(j, "tenants_returned") == 1)
        n = pf_num(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0),
                   "completed_runs");
    cJSON_Delete(j);
    return n;
}

/* The admin plane across replicas: any replica answers; a tenant's stats
 * and explain come from the replica owning its partition, whichever
 * replica the queue group picks; <admin>.reload reloads every replica,
 * <admin>.replica.<id>.reload that one alone. */
static void test_admin_any_replica(void **state)
{
    (void)state;
    wait_shared(3, (const int[]){0, 1, 2});
    load_start();
    load_wait(RATE);
    int n = all_once("before the admin requests");
    char own[P][PF_ID_MAX];
    owners(own);
    for (int t = 0; t < 8; t++) {
        char tenant[16], subject[128];
        snprintf(tenant, sizeof tenant, "t%d", t);
        const char *owner = own[fq_partition_of(tenant, strlen(tenant), P)];
        long runs = n / TENANTS + (t < n % TENANTS);    /* runs r-i with i % TENANTS == t */
        for (int i = 0; i < 3; i++) {
            snprintf(subject, sizeof subject, "fair.admin.replica.%s.stats", ids[i]);
            long c = tenant_completed(subject, tenant);
            if (strcmp(ids[i], owner) == 0)
                assert_int_equal(c, runs);      /* the owner knows it all */
            else
                assert_int_equal(c, -1);        /* the others not at all */
        }
        /* asked of whichever replica the group picks: the owner's answer */
        assert_int_equal(tenant_completed("fair.admin.stats", tenant), runs);
        snprintf(subject, sizeof subject, "fair.explain.%s", tenant);
        cJSON *x = ask(subject, "");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "known")));
        cJSON_Delete(x);
    }
    long forwarded = 0;
    for (int i = 0; i < 3; i++) {
        char subject[128];
        snprintf(subject, sizeof subject, "fair.admin.replica.%s.stats", ids[i]);
        cJSON *j = ask(subject, "{\"limit\":0}");
        forwarded += pf_overall(j, "admin_forwarded");
        cJSON_Delete(j);
    }
    print_message("16 requests about a tenant, %ld forwarded to its owner\n", forwarded);
    assert_true(forwarded > 0);
    /* reload: deployment-wide, then one replica's */
    int before[3];
    for (int i = 0; i < 3; i++)
        before[i] = pt_log_count(&W.px[i], "config reloaded");
    cJSON *r = ask("fair.admin.reload", "");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pt_log_wait_n(&W.px[i], "config reloaded", before[i] + 1, 10000), 0);
    r = ask("fair.admin.replica.rep-b.reload", "");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")));
    cJSON_Delete(r);
    assert_int_equal(pt_log_count(&W.px[1], "config reloaded"), before[1] + 2);
    assert_int_equal(pt_log_count(&W.px[0], "config reloaded"), before[0] + 1);
    assert_int_equal(pt_log_count(&W.px[2], "config reloaded"), before[2] + 1);
}

/* kill -9 of rep-c mid-flood: its partitions owned again within the TTL
 * and a second; nothing lost, nothing doubled. */
static void test_replica_killed(void **state)
{
    (void)state;
    load_start();
    load_wait(RATE);                    /* a second of flood under way */
    char own[P][PF_ID_MAX];
    owners(own);
    assert_true(pf_owned_by(own, P, "rep-c") >= 2);
    long long t0 = nt_now_ms();
    assert_int_equal(pt_proxy_kill(&W.px[2]), 0);
    long long took = wait_taken_from("rep-c", t0, TTL_MS + 10000);
    print_message("rep-c's partitions owned again %lld ms after kill -9 (bound %d)\n", took,
                  TTL_MS + 1000);
    assert_true(took >= 0);
    assert_true(took <= TTL_MS + 1000);
    wait_shared(2, (const int[]){0, 1});
    load_wait(RATE);
    all_once("kill -9 of a replica");
    /* back for the next cases */
    assert_int_equal(pt_proxy_restart(&W.px[2]), 0);
    assert_int_equal(pt_log_wait_n(&W.px[2], "fairq-proxy running", 2, 30000), 0);
    wait_shared(3, (const int[]){0, 1, 2});
}

/* SIGSTOP of rep-b past its lease, then SIGCONT: the others take its
 * partitions; resumed, it can fetch, ack and append for none of them:
 * nothing dispatched twice, nothing lost. */
static void test_replica_frozen(void **state)
{
    (void)state;
    load_start();
    load_wait(RATE);
    long long t0 = nt_now_ms();
    assert_int_equal(kill(W.px[1].proc.pid, SIGSTOP), 0);
    long long took = wait_taken_from("rep-b", t0, TTL_MS + 10000);
    print_message("frozen rep-b's partitions owned again %lld ms after SIGSTOP\n", took);
    assert_true(took >= 0 && took <= TTL_MS + 1000);
    load_wait(RATE / 2);                /* runs of its former partitions served by others */
    assert_int_equal(kill(W.px[1].proc.pid, SIGCONT), 0);
    load_wait(RATE);
    all_once("SIGSTOP past the lease, then SIGCONT");
    /* resumed, it either rejoins or has left (exit 3, its lease lost):
     * started again then */
    if (!nt_proc_alive(&W.px[1].proc)) {
        print_message("rep-b exited %d when resumed\n", nt_proc_exit_code(&W.px[1].proc));
        assert_int_equal(pt_proxy_restart(&W.px[1]), 0);
        assert_int_equal(pt_log_wait_n(&W.px[1], "fairq-proxy running", 2, 30000), 0);
    }
    wait_shared(3, (const int[]){0, 1, 2});
}

/* Move the leader of every stream fairq uses (and the lease bucket's) to
 * node n0, the one the node's kill kills, by asking its leader to step
 * down until n0 is elected (a few tries each): every stream then elects a
 * leader after the kill, not only those n0 happened to lead. */
static void leaders_to_n0(void)
{
    for (size_t i = 0; i < sizeof streams / sizeof *streams; i++)
        for (int tries = 0; tries < 12; tries++) {
            jsStreamInfo *si = NULL;
            bool there = false;
            if (js_GetStreamInfo(&si, W.f.c.js, streams[i], NULL, NULL) == NATS_OK)
                there = si->Cluster && si->Cluster->Leader &&
                        strcmp(si->Cluster->Leader, "n0") == 0;
            jsStreamInfo_Destroy(si);
            if (there)
                break;
            char subj[128];
            snprintf(subj, sizeof subj, "$JS.API.STREAM.LEADER.STEPDOWN.%s", streams[i]);
            natsMsg *r = NULL;
            natsConnection_RequestString(&r, W.f.c.nc, subj, "", 2000);
            natsMsg_Destroy(r);
            nt_sleep_ms(500);
        }
}

static long long longest_silence(size_t from, int k, long long t0, long long t1,
                                  long long *end);

/* kill -9 of nats-server node 0 mid-flood, and its restart: the replicas
 * connected to it reconnect to the others, the streams (3 replicas) keep
 * a quorum; nothing lost or doubled. */
static void test_server_node_killed(void **state)
{
    (void)state;
    /* FAIRQ_TEST_NODE_KILL=0 skips it. Every stream's leader is moved to
     * n0 first, so that every stream elects a leader after the kill. A
     * restarted node keeps a copy of a consumer deleted just after its
     * restart, listed nowhere, and refuses every consumer on its filter
     * (js_err 10100) until that consumer is made again under its name and
     * deleted, which natsio does for the names of the partition's earlier
     * consumers it knows: those it deleted, and those their descriptions
     * say their makers deleted (lib/pullplan.h, fq_pull_gone); a
     * partition's consumers are deleted by its next owner, who makes the
     * next (docs/operations.md). Before, it failed now and then: 1 node
     * kill in 6 or 7 left a partition's consumer refused for the rest of
     * the run while a replica letting a partition go deleted its
     * consumers; then once in a make test, a partition's previous owner
     * having taken it twice during the kill, deleting its own earlier
     * term's consumer, a name its next owner did not know. Since, 19 node
     * kills of 19 passed (load 7 to 21). Run last: the shares case after
     * it failed 2 runs in 4 (docs/operations.md, "The tests"). */
    const char *on = getenv("FAIRQ_TEST_NODE_KILL");
    if (on && strcmp(on, "0") == 0)
        skip();
    pt_worker_speed(W.f.w, 20, 0);     /* as setup's, after the shares case's */
    load_start();
    load_wait(RATE);
    leaders_to_n0();
    natstest *n0 = natscluster_node(W.cl, 0);
    size_t from = pt_worker_received(W.f.w);
    long long t0 = nt_now_ms();
    assert_int_equal(natstest_kill(n0), 0);
    load_wait(2 * RATE);
    assert_int_equal(natstest_restart(n0), 0);
    load_wait(RATE);
    /* how long the partitions went without a dispatch, from the kill to
     * a second of flood after the restart (printed, not asserted) */
    long long t1 = nt_now_ms(), worst = 0;
    int worst_k = 0;
    bool held[P] = {false};     /* partitions with a tenant of the flood's */
    for (int i = 0; i < TENANTS; i++) {
        char tenant[16];
        snprintf(tenant, sizeof tenant, "t%d", i);
        held[fq_partition_of(tenant, strlen(tenant), P)] = true;
    }
    for (int k = 0; k < P; k++) {
        long long g = held[k] ? longest_silence(from, k, t0, t1, NULL) : 0;
        if (g > worst) {
            worst = g;
            worst_k = k;
        }
    }
    print_message("after the node's kill, the longest a partition went without a dispatch: "
                  "%lld ms (partition %d, over %lld ms)\n", worst, worst_k, t1 - t0);
    all_once("kill -9 of a server node and its restart");
    int who[REPLICAS], n = 0;
    for (int i = 0; i < REPLICAS; i++)
        if (W.started[i])
            who[n++] = i;
    wait_shared(n, who);
    int stale = 0;
    for (int i = 0; i < REPLICAS; i++)
        stale += W.started[i] ? pt_log_count(&W.px[i], "stale copy") : 0;
    print_message("consumers made after clearing a node's stale copy of an earlier one so far: "
                  "%d\n", stale);
}

/* The partition of each run the workers received from index from on, and
 * when; the longest silence of partition k between t0 and t1 (ms), and
 * (end, if not NULL) when it ended. */
static long long longest_silence(size_t from, int k, long long t0, long long t1,
                                  long long *end)
{
    long long last = t0, gap = 0, at = t0;
    size_t n = pt_worker_received(W.f.w);
    for (size_t i = from; i < n; i++) {
        pt_seen s = pt_worker_seen(W.f.w, i);
        if (s.at_ms < t0 || s.at_ms > t1 ||
            (int)fq_partition_of(s.tenant, strlen(s.tenant), P) != k)
            continue;
        if (s.at_ms - last > gap) {
            gap = s.at_ms - last;
            at = s.at_ms;
        }
        last = s.at_ms;
    }
    if (t1 - last > gap) {
        gap = t1 - last;
        at = t1;
    }
    if (end)
        *end = at;
    return gap;
}

/* Wait until every partition is owned and no owner changed for quiet_ms
 * (planned moves go one at a time, each well under a second), up to
 * timeout_ms; own holds the owners then. Shares even (wait_shared) is not
 * settled: a move of the earlier cases may still be under way then, and
 * a join compared with such a state counts as moved partitions it did not
 * move. */
static void wait_settled(char (*own)[PF_ID_MAX], int quiet_ms, int timeout_ms)
{
    char now[P][PF_ID_MAX];
    long long t0 = nt_now_ms(), since = t0;
    owners(own);
    for (;;) {
        nt_sleep_ms(50);
        owners(now);
        bool all = true;
        for (int k = 0; k < P; k++)
            all &= now[k][0] != '\0';
        if (!all || memcmp(now, own, sizeof now) != 0) {
            memcpy(own, now, sizeof now);
            since = nt_now_ms();
        } else if (nt_now_ms() - since >= quiet_ms) {
            return;
        }
        if (nt_now_ms() > t0 + timeout_ms)
            fail_msg("the partitions' owners did not settle for %d ms", quiet_ms);
    }
}

/* rep-d joins under load: it takes its share by planned moves, and a
 * partition that does not move is never silent for more than a second
 * longer than it already was, under the same load, in the seconds before
 * the join: on two loaded cores a partition's runs come with gaps of
 * their own (1.3 s measured at load 20), which are the machine's, not the
 * join's. */
static void test_replica_joins(void **state)
{
    (void)state;
    char before[P][PF_ID_MAX], after[P][PF_ID_MAX];
    load_start();
    load_wait(RATE);
    size_t base_from = pt_worker_received(W.f.w);
    long long b0 = nt_now_ms();
    load_wait(3 * RATE);
    long long b1 = nt_now_ms();
    wait_settled(before, 2000, 20000);
    size_t from = pt_worker_received(W.f.w);
    long long t0 = nt_now_ms();
    {
        /* when, as the replicas' log lines say it */
        struct timespec ts;
        struct tm tm;
        char at[32];
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        strftime(at, sizeof at, "%H:%M:%S", &tm);
        print_message("rep-d starts at %s.%03ldZ\n", at, ts.tv_nsec / 1000000);
    }
    assert_int_equal(start(3), 0);
    wait_shared(4, (const int[]){0, 1, 2, 3});
    long long t1 = nt_now_ms();
    wait_settled(after, 2000, 20000);
    long long t2 = nt_now_ms();
    long long worst = 0, base = 0;
    int kept = 0;
    for (int k = 0; k < P; k++) {
        if (strcmp(before[k], after[k]) != 0)
            continue;
        kept++;
        long long end = 0;
        long long g = longest_silence(from, k, t0, t2, &end);
        print_message("p.%d (%s): silent %lld ms, from %+lld to %+lld ms of the join\n", k,
                      after[k], g, end - g - t0, end - t0);
        worst = g > worst ? g : worst;
        g = longest_silence(base_from, k, b0, b1, NULL);
        base = g > base ? g : base;
    }
    print_message("rep-d took %d partitions in %lld ms; the %d that stayed were silent %lld ms "
                  "at most (%lld ms in the %lld ms before the join)\n",
                  pf_owned_by(after, P, "rep-d"), t1 - t0, kept, worst, base, b1 - b0);
    for (int k = 0; k < P && !kept; k++)
        print_message("p.%d: %s before the join, %s after\n", k, before[k], after[k]);
    assert_true(pf_owned_by(after, P, "rep-d") >= P / 4);
    assert_true(kept > 0);
    assert_true(worst <= PAUSE_MAX_MS + base);
    all_once("a fourth replica joining");
}

/* rep-d stops (SIGTERM) and the others share its partitions again: the
 * next round's join starts from three. */
static void test_replica_leaves(void **state)
{
    (void)state;
    assert_int_equal(pt_proxy_stop(&W.px[3]), 0);
    W.started[3] = false;
    wait_shared(3, (const int[]){0, 1, 2});
}

/* Every replica stopped (SIGTERM) and started again, one after the other,
 * each waited for until every partition is owned again: under load,
 * nothing lost or doubled, and, 20 s after the last restart at most, the
 * shares even again. Not waited for: the shares even before the next
 * restart. In 3 runs of about 15 (with the node-kill case on) a replica
 * had taken no partition back 20 s after the roll: a partition whose
 * journal fenced its owner while its planned move settled was never
 * handed off, and every planned move of the deployment waited for it
 * (fixed: docs/operations.md, "The tests"). */
static void test_rolling_restart(void **state)
{
    (void)state;
    load_start();
    for (int i = 0; i < REPLICAS; i++) {
        load_wait(RATE / 2);
        int runs = pt_log_count(&W.px[i], "fairq-proxy running");
        assert_int_equal(pt_proxy_stop(&W.px[i]), 0);
        assert_int_equal(pt_proxy_restart(&W.px[i]), 0);
        assert_int_equal(pt_log_wait_n(&W.px[i], "fairq-proxy running", runs + 1, 30000), 0);
        long long took = wait_taken_from("", nt_now_ms(), TTL_MS + 10000);
        assert_true(took >= 0);
    }
    load_wait(RATE / 2);
    char own[P][PF_ID_MAX];
    owners(own);
    print_message("after the roll: a %d, b %d, c %d, d %d\n", pf_owned_by(own, P, "rep-a"),
                  pf_owned_by(own, P, "rep-b"), pf_owned_by(own, P, "rep-c"),
                  pf_owned_by(own, P, "rep-d"));
    wait_shared(4, (const int[]){0, 1, 2, 3});
    all_once("a rolling restart");
}

/* ---- the shares of point 4 ----------------------------------------- */

#define US_PER_TOKEN 1000   /* the workers' speed in the shares case: 1,000 tokens a second */
#define COST 1000           /* a run of the light tenants: s = 1 s */

/* The measurement of tests/support/sharecheck.h: the window of yaml_fmt,
 * heartbeats every 100 ms (lib/share), a 4 s interval. */
static const sc_world shares_world = {.parts = P, .window = 8, .us_per_token = US_PER_TOKEN,
                                      .period_ms = 100, .interval_ms = 4000};

/* The first partition replica id owns (own: the owners). */
static int partition_of(char (*own)[PF_ID_MAX], const char *id)
{
    for (int k = 0; k < P; k++)
        if (strcmp(own[k], id) == 0)
            return k;
    fail_msg("%s owns no partition", id);
    return -1;
}

/* Serve what is left of the n runs a shares case submitted at full speed
 * (the costly ones take 50 s each), until the workers completed done + n;
 * then back to US_PER_TOKEN: the next case starts with nothing queued or
 * in flight. */
static size_t shares_drained(size_t done, int n)
{
    pt_worker_speed(W.f.w, 0, 0);
    assert_int_equal(pt_worker_wait_completed(W.f.w, done + (size_t)n, 30000), 0);
    W.extra += (size_t)n;
    pt_worker_speed(W.f.w, 0, US_PER_TOKEN);
    return done + (size_t)n;
}

/* The shares of issue 16 point 4 on the cluster, with window.share on as
 * config/fairq-cluster.yaml ships it, the flood stopped and the workers
 * spending a millisecond a token: equal weights on two replicas, runs of
 * equal cost and then 50-fold costlier on one, get the tokens one proxy
 * gives them (S_a/w_a within 10% of S_b/w_b, and within docs/scaling.md's
 * bound), 3:1 weights 3:1; a small tenant's first run is dispatched, on
 * the reserve, while a flood on another replica holds the whole window
 * and none of its runs has completed, where one proxy would make it wait
 * for a completion. Each pair on partitions of two different replicas;
 * the replicas are those the earlier cases left (rep-a .. rep-d). */
static void test_shares_across_replicas(void **state)
{
    (void)state;
    long long t0 = nt_now_ms();
    char own[P][PF_ID_MAX];
    wait_settled(own, 2000, 20000);     /* no move while measuring */
    pt_worker_speed(W.f.w, 0, US_PER_TOKEN);
    size_t done = pt_worker_completed(W.f.w);
    char a[32], b[32];
    /* equal weights, equal costs: rep-a's tenant and rep-b's */
    sc_name_on(a, sizeof a, "even", P, partition_of(own, "rep-a"));
    sc_name_on(b, sizeof b, "odd", P, partition_of(own, "rep-b"));
    done = shares_drained(done, sc_shares(&W.f, &shares_world, a, 1, COST, b, 1, COST));
    /* equal weights, runs 50-fold costlier: rep-b's and rep-c's */
    sc_name_on(a, sizeof a, "chat", P, partition_of(own, "rep-b"));
    sc_name_on(b, sizeof b, "research", P, partition_of(own, "rep-c"));
    done = shares_drained(done, sc_shares(&W.f, &shares_world, a, 1, COST, b, 1, 50 * COST));
    /* 3:1: big (the heavy plan) and a light tenant of another replica */
    int kbig = (int)fq_partition_of("big", 3, P);
    for (int k = 0; k < P; k++)
        if (strcmp(own[k], own[kbig]) != 0) {
            sc_name_on(b, sizeof b, "light", P, k);
            break;
        }
    print_message("big is %s's, %s %s's\n", own[kbig], b,
                  own[fq_partition_of(b, strlen(b), P)]);
    done = shares_drained(done, sc_shares(&W.f, &shares_world, "big", 3, COST, b, 1, COST));
    /* the first run: a flood on rep-c, a small tenant on rep-a */
    sc_name_on(a, sizeof a, "flood", P, partition_of(own, "rep-c"));
    sc_name_on(b, sizeof b, "small", P, partition_of(own, "rep-a"));
    shares_drained(done, sc_first_run(&W.f, &shares_world, a, COST, b));
    print_message("the shares case took %lld ms\n", nt_now_ms() - t0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admin_any_replica),
        cmocka_unit_test(test_replica_killed),
        cmocka_unit_test(test_replica_frozen),
        cmocka_unit_test(test_replica_joins),
        cmocka_unit_test(test_rolling_restart),
        cmocka_unit_test(test_shares_across_replicas),
        /* last: what a node's kill leaves behind (consumers made again,
         * stranded submits stored again) is not measured by the shares
         * case (its one failure in 3 runs with the kill before it: the
         * 50-fold pair at 22% instead of 50%, cause not found) */
        cmocka_unit_test(test_server_node_killed),
    };
    /* FAIRQ_TEST_JOIN_ROUNDS=N: rep-d joins and leaves N times in one
     * world, to measure the join's silences */
    const char *jr = getenv("FAIRQ_TEST_JOIN_ROUNDS");
    if (jr) {
        static struct CMUnitTest rt[64];
        size_t m = 0;
        for (int i = 0; i < atoi(jr) && m + 2 <= 64; i++) {
            rt[m++] = (struct CMUnitTest)cmocka_unit_test(test_replica_joins);
            rt[m++] = (struct CMUnitTest)cmocka_unit_test(test_replica_leaves);
        }
        return _cmocka_run_group_tests("join rounds", rt, m, setup, teardown);
    }
    /* FAIRQ_TEST_NODE_KILL_ROUNDS=N: a
     * replica's kill, a freeze and a node's kill, N times in one world, to
     * reproduce what the node's kill rarely does */
    const char *rounds = getenv("FAIRQ_TEST_NODE_KILL_ROUNDS");
    if (rounds) {
        static struct CMUnitTest rt[64];
        int k = atoi(rounds);
        size_t m = 0;
        rt[m++] = (struct CMUnitTest)cmocka_unit_test(test_admin_any_replica);
        for (int i = 0; i < k && m + 3 <= 64; i++) {
            rt[m++] = (struct CMUnitTest)cmocka_unit_test(test_replica_killed);
            rt[m++] = (struct CMUnitTest)cmocka_unit_test(test_replica_frozen);
            rt[m++] = (struct CMUnitTest)cmocka_unit_test(test_server_node_killed);
        }
        return _cmocka_run_group_tests("rounds", rt, m, setup, teardown);
    }
    return cmocka_run_group_tests(tests, setup, teardown);
}
