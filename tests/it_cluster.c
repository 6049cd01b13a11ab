/* it_cluster.c -- fairq on a 3-node JetStream cluster: streams replicated on every node, runs served end to end. */
/*
 * The fixture the scale-out work (issue 16) builds on: three nats-server
 * nodes routed on loopback (tests/support/natscluster.h), fairq-proxy
 * given all three URLs and streams.replicas: 3, one partition. Producers
 * and workers connect to different nodes than the proxy's first.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "natscluster.h"
#include "natsio.h"
#include "proxyfixture.h"

static const char yaml[] =
    "streams:\n  replicas: 3\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 8\n"
    "plans:\n  - name: free\n";

typedef struct cl_fixture {
    natscluster *cl;
    pf_fixture f;
} cl_fixture;

/* Stop what x started; whether the proxy still ran, and its exit code. */
static bool cl_stop(cl_fixture *x, int *code)
{
    pt_worker_stop(x->f.w);
    bool alive = x->f.px.proc.pid && nt_proc_alive(&x->f.px.proc);
    *code = alive ? pt_proxy_stop(&x->f.px) : 0;
    pt_close(&x->f.c);
    natscluster_destroy(x->cl);
    free(x);
    return alive;
}

/* Until the proxy says it runs, or it exits (its last log lines printed:
 * a start that failed is a failure now, not a wait for a line that will
 * never come). The deadline is a safety net; progress is the log. */
static int cl_wait_running_n(pt_proxy *px, int n, int timeout_ms)
{
    for (long long end = nt_now_ms() + timeout_ms; nt_now_ms() < end; nt_sleep_ms(20)) {
        if (pt_log_count(px, "fairq-proxy running") >= n)
            return 0;
        if (!nt_proc_alive(&px->proc)) {
            fprintf(stderr, "it_cluster: the proxy exited while starting; its log:\n");
            char cmd[600];
            snprintf(cmd, sizeof cmd, "tail -n 5 %s >&2", px->log);
            if (system(cmd) != 0)
                fprintf(stderr, "it_cluster: cannot show %s\n", px->log);
            return -1;
        }
    }
    fprintf(stderr, "it_cluster: \"fairq-proxy running\" not %d times in %s after %d ms\n", n,
            px->log, timeout_ms);
    return -1;
}

static int cl_wait_running(pt_proxy *px, int timeout_ms)
{
    return cl_wait_running_n(px, 1, timeout_ms);
}

static int setup(void **state)
{
    cl_fixture *x = calloc(1, sizeof *x);
    *state = NULL;
    if (!x)
        return -1;
    pt_worker_opts wo = {.concurrency = 4, .service_ms = 1};
    int code;
    if (natscluster_start(&x->cl, NULL) != 0 ||
        pt_proxy_start_url(&x->f.px, natscluster_node(x->cl, 0), natscluster_urls(x->cl),
                           "proxy", yaml) != 0 ||
        cl_wait_running(&x->f.px, 60000) != 0 ||
        pt_connect(&x->f.c, natscluster_node(x->cl, 1)) != 0 ||
        pt_worker_start(&x->f.w, natscluster_node(x->cl, 2), &wo) != 0) {
        /* cmocka runs no teardown after a failed setup */
        cl_stop(x, &code);
        return -1;
    }
    x->f.srv = natscluster_node(x->cl, 1);  /* the client's node */
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    int code = 0;
    bool alive = *state && cl_stop(*state, &code);
    assert_true(alive);
    assert_int_equal(code, 0);
    return 0;
}

static void test_runs_served_on_a_cluster(void **state)
{
    cl_fixture *x = *state;
    pf_fixture *f = &x->f;
    /* Every stream fairq made is on all three nodes. */
    static const char *const streams[] = {"FAIR_SUBMIT", "FAIR_DISPATCH", "FAIR_DONE",
                                          "FAIR_REJECTED", "FAIRQ_RUNS"};
    for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
        jsStreamInfo *si = NULL;
        jsErrCode jerr = 0;
        assert_int_equal(js_GetStreamInfo(&si, f->c.js, streams[i], NULL, &jerr), NATS_OK);
        assert_int_equal(si->Config->Replicas, 3);
        assert_non_null(si->Cluster);
        assert_non_null(si->Cluster->Leader);
        assert_int_equal(si->Cluster->ReplicasLen, 2);  /* besides the leader */
        jsStreamInfo_Destroy(si);
    }
    pf_submit_runs(f, 0, 60, 6);
    assert_int_equal(pt_worker_wait_completed(f->w, 60, 30000), 0);
    pf_assert_each_dispatched_once(f, 60);
    pf_wait_empty(f, "FAIR_SUBMIT");
    cJSON *j = NULL;
    for (long long end = nt_now_ms() + 20000; nt_now_ms() < end; nt_sleep_ms(20)) {
        cJSON_Delete(j);
        j = pf_stats(f, "", NULL);
        if (pf_overall(j, "completions") >= 60)
            break;
    }
    assert_int_equal(pf_overall(j, "completions"), 60);
    cJSON_Delete(j);
}

/* A node down (or one the meta leader has not heard from yet, as on a
 * loaded machine just after the cluster formed): JetStream cannot place
 * three replicas and says "no suitable peers for placement". That is a
 * cluster not ready, not a configuration fairq cannot serve: the proxy
 * waits, saying why, and starts once the node is back (it exited with
 * "stream cannot serve" at once, and it_cluster failed when the cluster
 * had formed but a peer was not yet known). */
typedef struct cl_bare {
    natscluster *cl;
    pt_proxy px;
} cl_bare;

static int setup_bare(void **state)
{
    cl_bare *b = calloc(1, sizeof *b);
    *state = b;
    return b && natscluster_start(&b->cl, NULL) == 0 ? 0 : -1;
}

static int teardown_bare(void **state)
{
    cl_bare *b = *state;
    if (b && b->px.proc.pid && nt_proc_alive(&b->px.proc))
        pt_proxy_stop(&b->px);
    if (b)
        natscluster_destroy(b->cl);
    free(b);
    return 0;
}

static void test_start_waits_for_a_node_down(void **state)
{
    cl_bare *b = *state;
    assert_int_equal(natstest_stop(natscluster_node(b->cl, 2)), 0);
    assert_int_equal(pt_proxy_start_url(&b->px, natscluster_node(b->cl, 0),
                                        natscluster_urls(b->cl), "proxy", yaml),
                     0);
    assert_int_equal(pt_log_wait(&b->px, "no suitable peers for placement", 30000), 0);
    assert_int_equal(pt_log_wait(&b->px, "stream not ready; retrying", 5000), 0);
    assert_true(nt_proc_alive(&b->px.proc));
    assert_int_equal(natstest_restart(natscluster_node(b->cl, 2)), 0);
    assert_int_equal(cl_wait_running(&b->px, 60000), 0);
    assert_int_equal(pt_log_count(&b->px, "stream cannot serve"), 0);
    assert_int_equal(pt_proxy_stop(&b->px), 0);
}

/* A proxy (id, config y) run once, so that the streams and buckets
 * exist; then bucket deleted and node 2 stopped, so that it cannot be
 * placed again, and the proxy started anew. c is left connected to node 0. */
static void cl_start_without_bucket(cl_bare *b, pt_client *c, const char *id, const char *y,
                                    const char *bucket)
{
    assert_int_equal(pt_proxy_start_url(&b->px, natscluster_node(b->cl, 0),
                                        natscluster_urls(b->cl), id, y),
                     0);
    assert_int_equal(cl_wait_running(&b->px, 60000), 0);
    assert_int_equal(pt_proxy_stop(&b->px), 0);
    assert_int_equal(pt_connect(c, natscluster_node(b->cl, 0)), 0);
    assert_int_equal(js_DeleteKeyValue(c->js, bucket), NATS_OK);
    assert_int_equal(natstest_stop(natscluster_node(b->cl, 2)), 0);
    assert_int_equal(pt_proxy_start_url(&b->px, natscluster_node(b->cl, 0),
                                        natscluster_urls(b->cl), id, y),
                     0);
}

/* The same for the lease bucket, made after the streams: with the streams
 * there (a proxy ran before) and the bucket gone, a node down leaves the
 * bucket unplaceable while every stream serves. The proxy waits, saying
 * why, and starts once the node is back (it exited with "cannot create
 * the lease bucket"). */
static void test_start_waits_for_the_lease_bucket(void **state)
{
    cl_bare *b = *state;
    pt_client c;
    cl_start_without_bucket(b, &c, "proxy", yaml, "fairq_lease");
    pt_close(&c);
    assert_int_equal(pt_log_wait(&b->px, "lease bucket not ready; retrying", 30000), 0);
    assert_true(nt_proc_alive(&b->px.proc));
    assert_int_equal(natstest_restart(natscluster_node(b->cl, 2)), 0);
    assert_int_equal(cl_wait_running_n(&b->px, 2, 60000), 0);
    assert_int_equal(pt_log_count(&b->px, "cannot create the lease bucket"), 0);
    assert_int_equal(pt_proxy_stop(&b->px), 0);
}

/* The same for the overrides bucket, made once the lease is held: with
 * the streams and the lease bucket there and the overrides bucket gone, a
 * node down leaves it unplaceable. The proxy waits, saying why, keeping
 * its lease, and watches the bucket once the node is back (it gave up at
 * the first failure: "overrides are off until a restart"). */
static void test_start_waits_for_the_overrides_bucket(void **state)
{
    cl_bare *b = *state;
    pt_client c;
    cl_start_without_bucket(b, &c, "proxy", yaml, "fairq_tenants");
    assert_int_equal(pt_log_wait(&b->px, "overrides bucket not ready; retrying", 30000), 0);
    assert_true(nt_proc_alive(&b->px.proc));
    assert_int_equal(natstest_restart(natscluster_node(b->cl, 2)), 0);
    assert_int_equal(cl_wait_running_n(&b->px, 2, 60000), 0);
    assert_int_equal(pt_log_count(&b->px, "overrides are off"), 0);
    assert_int_equal(pt_log_wait_n(&b->px, "overrides read", 2, 10000), 0);
    kvStore *kv = NULL;
    assert_int_equal(js_KeyValue(&kv, c.js, "fairq_tenants"), NATS_OK);   /* made */
    kvStore_Destroy(kv);
    pt_close(&c);
    assert_int_equal(pt_proxy_stop(&b->px), 0);
}

/* The same with partitions: while it waits for the overrides bucket, a
 * replica takes no partition. Its start serves nothing yet: a partition
 * it took then would be renewed and unserved for as long as the bucket
 * cannot be placed, and no other replica could take it (it took its share
 * and renewed it, the node down or not). */
static void test_parts_wait_for_the_overrides_bucket_owning_none(void **state)
{
    static const char parts_yaml[] =
        "replica_id: rep-a\n"
        "partitions: 4\n"
        "streams:\n  replicas: 3\n"
        "scheduler:\n  default_plan: free\n"
        "window:\n  max_in_flight: 8\n"
        "plans:\n  - name: free\n";
    cl_bare *b = *state;
    pt_client c;
    cl_start_without_bucket(b, &c, "rep-a", parts_yaml, "fairq_tenants");
    /* seven retries, a second each: time to wait out our registry key's last
     * instance (a TTL, 3 s) and take all 4 */
    assert_int_equal(pt_log_wait_n(&b->px, "overrides bucket not ready; retrying", 8, 40000), 0);
    char own[4][PF_ID_MAX];
    assert_int_equal(pt_log_count(&b->px, "took a partition"), 4);     /* the first run's */
    pf_owners(&c, "fairq_lease", 4, own);
    assert_int_equal(pf_owned_by(own, 4, "rep-a"), 0);
    assert_int_equal(natstest_restart(natscluster_node(b->cl, 2)), 0);
    assert_int_equal(cl_wait_running_n(&b->px, 2, 60000), 0);
    pt_close(&c);
    assert_int_equal(pt_proxy_stop(&b->px), 0);
}

/* The next event of type from n, up to ms; false if none came. */
static bool cl_event(fq_nio *n, enum fq_nio_event_type type, fq_nio_event *ev, int ms)
{
    for (long long end = nt_now_ms() + ms; nt_now_ms() < end;) {
        if (fq_nio_poll(n, ev, 1, 50) == 0)
            continue;
        if (ev->type == type)
            return true;
        fq_nio_msg_destroy(ev->msg);
    }
    return false;
}

/* Until stream's info, asked through js, names n0 as its leader or (not
 * leading) as a current replica (caught up after its restart); false
 * after ms (asked once at least). */
static bool cl_n0(jsCtx *js, const char *stream, bool leading, int ms)
{
    long long end = nt_now_ms() + ms;
    for (;;) {
        jsStreamInfo *si = NULL;
        bool ok = false;
        if (js_GetStreamInfo(&si, js, stream, NULL, NULL) == NATS_OK && si->Cluster) {
            ok = si->Cluster->Leader && strcmp(si->Cluster->Leader, "n0") == 0;
            for (int i = 0; i < si->Cluster->ReplicasLen && !leading; i++)
                ok |= strcmp(si->Cluster->Replicas[i]->Name, "n0") == 0 &&
                      si->Cluster->Replicas[i]->Current;
        }
        jsStreamInfo_Destroy(si);
        if (ok)
            return true;
        if (nt_now_ms() >= end)
            return false;
        nt_sleep_ms(200);
    }
}

/* The start of a node's stale copy (nats-server 2.9.10): a work-queue
 * stream STALE led by n0; natsio's consumer (*n, id 0, durable sub on
 * stale.1) for term 5 made; n0 killed, and while it is down other
 * consumers made and deleted (as a node's kill makes the replicas do); n0
 * restarted and caught up. A consumer deleted now is kept by n0, listed
 * nowhere, and refuses every consumer on its filter as overlapping it
 * (js_err 10100) for as long as it is tried (every try of this sequence
 * by hand; over 40 s where tried that long), until it is made again under
 * its name and deleted. *nc, *js: a connection to node 1. */
static void stale_start(cl_bare *b, fq_nio **n, natsConnection **nc, jsCtx **js)
{
    char err[256], warn[512];
    fq_nio_opts o = {.url = natscluster_urls(b->cl), .name = "it_cluster_stale"};
    assert_int_equal(fq_nio_create(n, &o, err, sizeof err), FQ_OK);
    fq_nio_stream st = {.name = "STALE", .subject = "stale.*", .retention = FQ_NIO_WORKQUEUE,
                        .replicas = 3};
    /* A fresh cluster under load may not place a stream yet (FQ_EIO: no
     * meta leader, no peers current, or no answer in time), which the
     * proxy retries (px_stream_ensure): so does the test. */
    fq_status s;
    for (long long end = nt_now_ms() + 30000;
         (s = fq_nio_stream_ensure(*n, &st, warn, sizeof warn)) == FQ_EIO && nt_now_ms() < end;
         nt_sleep_ms(1000))
        print_message("stream STALE not made yet: %s\n", warn);
    assert_int_equal(s, FQ_OK);
    fq_nio_consumer c = {.stream = "STALE", .durable = "sub", .filter = "stale.1",
                         .max_ack_pending = 1000, .ack_wait_ms = 60000, .batch = 16,
                         .term = 5};
    assert_int_equal(fq_nio_consume(*n, 0, &c), FQ_OK);
    fq_nio_event ev;
    /* A fresh cluster under load may refuse or leave unanswered the first
     * make's listing; natsio tries it again (NIO_RECREATE_RETRY_MS). */
    bool first = false;
    for (long long end = nt_now_ms() + 20000; !first && nt_now_ms() < end;) {
        if (!cl_event(*n, FQ_NIO_EV_CONSUMER, &ev, 1000) || ev.seq != 5)
            continue;
        first = ev.status == FQ_OK;
        if (!first)
            print_message("term 5's consumer refused, js_err %d\n", ev.err_code);
    }
    assert_true(first);
    assert_int_equal(natsConnection_ConnectTo(nc, natstest_url(natscluster_node(b->cl, 1))),
                     NATS_OK);
    assert_int_equal(natsConnection_JetStream(js, *nc, NULL), NATS_OK);
    for (int tries = 0; tries < 12 && !cl_n0(*js, "STALE", true, 0); tries++) {
        natsMsg *r = NULL;      /* n0 to lead the stream: ask the leader to step down */
        natsConnection_RequestString(&r, *nc, "$JS.API.STREAM.LEADER.STEPDOWN.STALE", "", 2000);
        natsMsg_Destroy(r);
        cl_n0(*js, "STALE", true, 1000);
    }
    natstest *n0 = natscluster_node(b->cl, 0);
    assert_int_equal(natstest_kill(n0), 0);
    for (int i = 0; i < 6; i++) {
        char name[32];
        snprintf(name, sizeof name, "other-%d", i);
        jsConsumerConfig cc;
        jsConsumerConfig_Init(&cc);
        cc.Durable = name;
        cc.AckPolicy = js_AckExplicit;
        cc.FilterSubject = "stale.2";
        jsConsumerInfo *ci = NULL;
        js_AddConsumer(&ci, *js, "STALE", &cc, NULL, NULL);    /* answered or not */
        jsConsumerInfo_Destroy(ci);
        js_DeleteConsumer(*js, "STALE", name, NULL, NULL);
    }
    assert_int_equal(natstest_restart(n0), 0);
    assert_true(cl_n0(*js, "STALE", false, 30000));
}

/* Until n's consumer 0 is made for term, up to 20 s: whether it was; *stale:
 * the earlier term whose stale copy was cleared first, 0 if none. */
static bool stale_made(fq_nio *n, uint64_t term, uint64_t *stale)
{
    fq_nio_event ev;
    bool made = false;
    int refused = 0;
    *stale = 0;
    for (long long end = nt_now_ms() + 20000; !made && nt_now_ms() < end;) {
        if (!cl_event(n, FQ_NIO_EV_CONSUMER, &ev, 1000) || ev.seq != term)
            continue;
        made = ev.status == FQ_OK;
        *stale = ev.token;
        refused += !made;
        if (!made)
            print_message("term %llu's consumer refused, js_err %d\n", (unsigned long long)term,
                          ev.err_code);
    }
    print_message("term %llu's consumer %s after %d refusals; a stale copy of term %llu's "
                  "cleared first (0: none was kept)\n",
                  (unsigned long long)term, made ? "made" : "not made", refused,
                  (unsigned long long)*stale);
    return made;
}

/* The stream's one consumer is name. */
static void stale_only(jsCtx *js, const char *name)
{
    jsConsumerNamesList *l = NULL;
    assert_int_equal(js_ConsumerNames(&l, js, "STALE", NULL, NULL), NATS_OK);
    assert_int_equal(l->Count, 1);
    assert_string_equal(l->List[0], name);
    jsConsumerNamesList_Destroy(l);
}

/* After stale_start, the consumer named for term 6 deletes term 5's and is
 * made: without the remedy, n0 kept a copy of term 5's and refused term
 * 6's. natsio makes term 5's again under its name, deletes it and then
 * makes term 6's. When n0 kept no copy (the state is the server's, not
 * made on demand), term 6's is made at once and the test says so. */
static void test_stale_consumer_copy_cleared(void **state)
{
    cl_bare *b = *state;
    fq_nio *n = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    stale_start(b, &n, &nc, &js);
    assert_int_equal(fq_nio_consume_term(n, 0, 6), FQ_OK);
    uint64_t stale = 0;
    assert_true(stale_made(n, 6, &stale));
    assert_true(stale == 0 || stale == 5);
    stale_only(js, "sub-6");
    fq_nio_destroy(n);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* The same copy, of a consumer another replica deleted: after
 * stale_start, term 5's is deleted by another (the test, playing a
 * replica that took the partition at term 6 while n0 recovered), whose
 * term 6 consumer says so in its description (filtered elsewhere: the
 * copy would refuse it on stale.1; in the cluster test such a consumer
 * was made before the copy refused). natsio, making term 7, deletes term
 * 6's, reading its description first, and is refused by the copy of term
 * 5's, a name it learnt only from that description (on an adapter of
 * its own: a replica that never held the partition): it clears the copy
 * under it and is made. Before, it knew only term 6's name, and was
 * refused for good (a partition's submit consumer refused for the rest
 * of a cluster test after its previous owner took it twice while a node
 * recovered). */
static void test_stale_copy_of_a_name_learnt_cleared(void **state)
{
    cl_bare *b = *state;
    fq_nio *n = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    stale_start(b, &n, &nc, &js);
    fq_nio_destroy(n);      /* term 5's holder gone, its consumer left on the stream */
    assert_int_equal(js_DeleteConsumer(js, "STALE", "sub-5", NULL, NULL), NATS_OK);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = "sub-6";
    cc.Description = "sub-5";
    cc.AckPolicy = js_AckExplicit;
    cc.FilterSubject = "stale.9";
    jsConsumerInfo *ci = NULL;
    assert_int_equal(js_AddConsumer(&ci, js, "STALE", &cc, NULL, NULL), NATS_OK);
    jsConsumerInfo_Destroy(ci);
    fq_nio_consumer c = {.stream = "STALE", .durable = "sub", .filter = "stale.1",
                         .max_ack_pending = 1000, .ack_wait_ms = 60000, .batch = 16,
                         .term = 7};
    char err[256];
    fq_nio_opts o = {.url = natscluster_urls(b->cl), .name = "it_cluster_stale_next"};
    assert_int_equal(fq_nio_create(&n, &o, err, sizeof err), FQ_OK);
    assert_int_equal(fq_nio_consume(n, 0, &c), FQ_OK);
    uint64_t stale = 0;
    assert_true(stale_made(n, 7, &stale));
    assert_true(stale == 0 || stale == 5);
    stale_only(js, "sub-7");
    fq_nio_destroy(n);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_runs_served_on_a_cluster, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_waits_for_a_node_down, setup_bare,
                                        teardown_bare),
        cmocka_unit_test_setup_teardown(test_start_waits_for_the_lease_bucket, setup_bare,
                                        teardown_bare),
        cmocka_unit_test_setup_teardown(test_start_waits_for_the_overrides_bucket, setup_bare,
                                        teardown_bare),
        cmocka_unit_test_setup_teardown(test_parts_wait_for_the_overrides_bucket_owning_none,
                                        setup_bare, teardown_bare),
        cmocka_unit_test_setup_teardown(test_stale_consumer_copy_cleared, setup_bare,
                                        teardown_bare),
        cmocka_unit_test_setup_teardown(test_stale_copy_of_a_name_learnt_cleared, setup_bare,
                                        teardown_bare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
