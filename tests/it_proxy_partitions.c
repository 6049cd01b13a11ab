/* it_proxy_partitions.c -- fairq with partitions: the server maps tenants' subjects, fairq serves them, and refuses a partition token that is not the tenant's. */
/*
 * One nats-server whose account maps fair.submit.* and fair.done.* through
 * {{partition(16,1)}} (docs/partitions.md), and a proxy configured with
 * partitions: 16. Producers and workers keep their 3-token subjects: runs
 * are served end to end. Whoever may publish a 4-token subject itself can
 * name any partition (on this open server anyone can; the shipped
 * permissions forbid it, tests/it_lockdown.c): fairq recomputes the
 * server's partition and refuses a submit or completion whose partition
 * token is not its tenant's, with a reason, counted. The proxy owns every
 * partition: a consumer pair per partition, each delivery acked and naked
 * on the consumer it came from.
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
#include "names.h"
#include "partition.h"
#include "proxyfixture.h"

static const char yaml[] =
    "partitions: 16\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 4\n"
    "plans:\n  - name: free\n";

static char dir[] = "/tmp/fairq-it-partitions-XXXXXX";
static char conf[256];

/* The server's config: the mapping of 16 partitions. */
static int write_mapping(void)
{
    memcpy(dir + sizeof dir - 7, "XXXXXX", 6);     /* the template again, for each test */
    if (!mkdtemp(dir))
        return -1;
    return pf_write_mapping(conf, sizeof conf, dir, 16);
}

/* With partitions a replica runs before it owns any: it takes them once
 * it has registered and read who else is there (docs/scaling.md). Alone,
 * it takes all 16, each with its consumers: wait for that. */
static int owns_all(pf_fixture *f)
{
    return pt_log_wait_n(&f->px, "consuming a partition", 16, 15000);
}

static int setup(void **state)
{
    if (write_mapping() != 0)
        return -1;
    pt_worker_opts wo = {.concurrency = 4, .service_ms = 1};
    if (pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, yaml, &wo) != 0)
        return -1;
    return owns_all(*state);
}

static int teardown(void **state)
{
    assert_int_equal(pf_teardown(state, true), 0);
    remove(conf);
    rmdir(dir);
    return 0;
}

/* stream's consumers are one per partition, fairq-p<k>-<term>, filtered to
 * <prefix>.<k>.*, each of the term its partition was taken in (its key's
 * revision), none with a delivery left unacked.
 * (nats-server 2.9.10 counts a work-queue message acked on every consumer
 * once any consumer of the stream acks it, measured: naks tell a misrouted
 * one apart, test_given_back_runs_come_again.) */
static void assert_consumer_per_partition(pf_fixture *f, const char *stream, const char *prefix)
{
    jsConsumerNamesList *l = NULL;
    assert_int_equal(js_ConsumerNames(&l, f->c.js, stream, NULL, NULL), NATS_OK);
    assert_int_equal(l->Count, 16);
    bool seen[16] = {false};
    for (int i = 0; i < l->Count; i++) {
        unsigned k = 99;
        unsigned long long term = 0;
        int end = 0;
        assert_int_equal(sscanf(l->List[i], "fairq-p%u-%llu%n", &k, &term, &end), 2);
        assert_int_equal(end, (int)strlen(l->List[i]));
        assert_true(k < 16 && !seen[k] && term > 0);    /* each partition's own term */
        seen[k] = true;
        char filter[64];
        snprintf(filter, sizeof filter, "%s.%u.*", prefix, k);
        jsConsumerInfo *ci = NULL;
        int pending = -1;
        for (long long end_ms = nt_now_ms() + 10000; pending && nt_now_ms() < end_ms;) {
            jsConsumerInfo_Destroy(ci);
            ci = NULL;
            assert_int_equal(js_GetConsumerInfo(&ci, f->c.js, stream, l->List[i], NULL, NULL),
                             NATS_OK);
            pending = (int)ci->NumAckPending;
            if (pending)
                nt_sleep_ms(50);
        }
        assert_string_equal(ci->Config->FilterSubject, filter);
        assert_int_equal(pending, 0);
        jsConsumerInfo_Destroy(ci);
    }
    jsConsumerNamesList_Destroy(l);
}

/* The stats reply once overall.key is at least want, waiting up to 20 s. */
static cJSON *stats_when(pf_fixture *f, const char *key, long want)
{
    long long end = nt_now_ms() + 20000;
    for (;;) {
        cJSON *j = pf_stats(f, "", NULL);
        if (pf_overall(j, key) >= want)
            return j;
        cJSON_Delete(j);
        if (nt_now_ms() > end)
            fail_msg("overall.%s did not reach %ld", key, want);
        nt_sleep_ms(20);
    }
}

static void test_partitioned_runs_served_forged_token_refused(void **state)
{
    pf_fixture *f = *state;
    /* Producers and workers on their usual subjects: the server maps them. */
    pf_submit_runs(f, 0, 40, 8);
    assert_int_equal(pt_worker_wait_completed(f->w, 40, 20000), 0);
    pf_assert_each_dispatched_once(f, 40);
    cJSON_Delete(stats_when(f, "completions", 40));
    /* One consumer pair per partition, every delivery acked where it came
     * from, on natsio's one fetch thread. */
    assert_consumer_per_partition(f, "FAIR_SUBMIT", "fair.submit");
    assert_consumer_per_partition(f, "FAIR_DONE", "fair.done");

    /* acme is partition 15 of 16: a submit published on partition 3 */
    const char forged[] = "{\"run_id\":\"forged-1\"}";
    assert_int_equal(pt_submit(&f->c, "=fair.submit.3.acme", forged, strlen(forged), NULL), 0);
    cJSON *j = stats_when(f, "invalid_subject", 1);
    assert_int_equal(pf_overall(j, "invalid_subject"), 1);
    cJSON_Delete(j);
    pf_wait_msgs(f, "FAIR_REJECTED", 1);
    pt_msg *r = NULL;
    size_t nr = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nr, 1);
    assert_string_equal(r[0].subject, "fair.rejected._invalid");
    assert_string_equal(r[0].fsubject, "fair.submit.3.acme");
    assert_non_null(strstr(r[0].error, "partition 15 of 16"));
    pt_msgs_free(r, nr);

    /* A completion forged the same way is refused and counted; it would
     * otherwise reach a second owner of acme once partitions are owned. */
    pf_publish(f, "fair.done.3.acme",
               "{\"run_id\":\"r-0\",\"actual_tokens\":1,\"status\":\"ok\"}");
    j = stats_when(f, "completions_invalid", 1);
    assert_int_equal(pf_overall(j, "completions_invalid"), 1);
    assert_int_equal(pf_overall(j, "completions"), 40);
    cJSON_Delete(j);
    pf_wait_msgs(f, "FAIR_REJECTED", 2);
    assert_int_equal(pt_stream_read(&f->c, "FAIR_REJECTED", &r, &nr), 0);
    assert_int_equal(nr, 2);
    assert_non_null(strstr(r[1].error, "partition 15 of 16"));
    pt_msgs_free(r, nr);

    /* The forged run was never dispatched; acme's own runs are served. */
    assert_int_equal(pt_submit(&f->c, "acme", "{\"run_id\":\"a-1\"}", 16, NULL), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 41, 20000), 0);
    size_t n = pt_worker_received(f->w);
    for (size_t i = 0; i < n; i++)
        assert_string_not_equal(pt_worker_seen(f->w, i).run_id, "forged-1");
}

/* A small buffer: runs past it are given back to FAIR_SUBMIT (a nak with
 * a delay) and asked back once there is room (a nak without): naks that
 * must reach the consumer that delivered, the partition's. */
static const char yaml_small[] =
    "partitions: 16\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 3\n"
    "limits:\n  max_buffered_runs: 6\n"
    "plans:\n  - name: free\n";

static int setup_small(void **state)
{
    if (write_mapping() != 0)
        return -1;
    pt_worker_opts wo = {.concurrency = 6, .service_ms = 1};
    if (pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, yaml_small, &wo) != 0 ||
        owns_all(*state) != 0)
        return -1;
    pt_worker_hold(((pf_fixture *)*state)->w, true);
    return 0;
}

/* Runs of t0, t1 and t2 (partitions 9, 6 and 3 of 16) past the buffer are
 * given back and come again once the workers make room: every run is
 * dispatched once. A nak sent to another partition's consumer would be
 * dropped by the server, and the run would wait out its hour of AckWait. */
static void test_given_back_runs_come_again(void **state)
{
    pf_fixture *f = *state;
    enum { RUNS = 30 };
    /* One at a time, each taken in before the next is sent, so that the
     * buffer fills run by run: a burst fetched in one batch fills it at
     * once and pauses fetching instead of giving runs back (a publish's
     * PubAck says the server stored it, not that the proxy has it). */
    for (int i = 0; i < RUNS; i++) {
        char tenant[8], body[32];
        snprintf(tenant, sizeof tenant, "t%d", i % 3);
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
        assert_int_equal(pt_submit(&f->c, tenant, body, strlen(body), NULL), 0);
        cJSON_Delete(stats_when(f, "submitted", i + 1));
    }
    cJSON *j = stats_when(f, "given_back", RUNS / 2);
    cJSON_Delete(j);
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, RUNS, 30000), 0);
    pf_assert_each_dispatched_once(f, RUNS);
    j = stats_when(f, "completions", RUNS);
    assert_int_equal(pf_overall(j, "given_back_runs"), 0);
    cJSON_Delete(j);
}

/* A partition's backlog is what its submit consumer has not had acked,
 * as the server counts it: with the buffer full and fetching paused the
 * runs held in memory (partition_queued_runs, at most max_buffered_runs)
 * are a few of t0's, fairq_partition_backlog_runs all of them not yet
 * dispatched; once the workers complete them it is 0. */
static void test_partition_backlog_counts_the_stream(void **state)
{
    pf_fixture *f = *state;
    enum { RUNS = 400 };
    char body[32];
    for (int i = 0; i < RUNS; i++) {    /* a burst: fetched in batches, then paused */
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
        assert_int_equal(pt_submit_async(&f->c, "t0", body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    cJSON *j = NULL;
    long backlog = 0, queued = 0, inflight = 0;
    for (long long end = nt_now_ms() + 20000; nt_now_ms() < end; nt_sleep_ms(100)) {
        cJSON_Delete(j);
        j = pf_stats(f, "", NULL);
        backlog = pf_overall(j, "partition_backlog_runs");
        queued = pf_overall(j, "partition_queued_runs");
        inflight = pf_overall(j, "in_flight");
        if (inflight == 3 && backlog + inflight == RUNS)
            break;
    }
    cJSON_Delete(j);
    print_message("t0's partition: %ld queued in memory, a backlog of %ld, %ld in flight, of "
                  "%d\n", queued, backlog, inflight, RUNS);
    assert_int_equal(inflight, 3);
    assert_int_equal(backlog, RUNS - 3);
    assert_true(queued > 0 && queued < backlog);    /* a few held in memory */
    pt_worker_hold(f->w, false);
    assert_int_equal(pt_worker_wait_completed(f->w, RUNS, 60000), 0);
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(100)) {
        j = pf_stats(f, "", NULL);
        backlog = pf_overall(j, "partition_backlog_runs");
        cJSON_Delete(j);
        if (!backlog)
            break;
    }
    assert_int_equal(backlog, 0);
}

/* A request about a tenant another replica holds, reaching a replica with
 * 64 requests handed on and waiting already, is answered busy at once
 * with the reason, and counted; not from this replica's own view, where
 * the tenant is not known. The holder is a "ghost" written into acme's
 * partition key (15 of 16) that never answers what it is handed. */
static void test_forwards_past_64_answered_busy(void **state)
{
    pf_fixture *f = *state;
    enum { REQS = 72, WAITING = 64 };
    natsSubscription *ghost = NULL, *replies = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&ghost, f->c.nc, "fair.admin.replica.ghost.>"),
                     NATS_OK);
    assert_int_equal(natsConnection_SubscribeSync(&replies, f->c.nc, "_INBOX.it16.*"), NATS_OK);
    assert_int_equal(natsSubscription_SetPendingLimits(replies, -1, -1), NATS_OK);
    /* The ghost takes p.15: the proxy's next renewal is refused, it reads
     * the key, and partition 15 is lost to the ghost. */
    assert_int_equal(ot_kv_put(&f->c, "fairq_lease", "p.15", "ghost"), 0);
    assert_int_equal(pt_log_wait(&f->px, "lost a partition", 10000), 0);
    assert_int_equal(ot_kv_put(&f->c, "fairq_lease", "p.15", "ghost"), 0);  /* fresh: a TTL */
    const char body[] = "{\"tenant\":\"acme\"}";
    for (int i = 0; i < REQS; i++) {
        char inbox[64];
        snprintf(inbox, sizeof inbox, "_INBOX.it16.%d", i);
        assert_int_equal(natsConnection_PublishRequestString(f->c.nc, "fair.admin.stats", inbox,
                                                             body), NATS_OK);
        if (i % 8 == 7) {   /* paced: within natsio's 64 queued, well within 2 s */
            assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
            nt_sleep_ms(10);
        }
    }
    assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
    int expired = 0, fwd_busy = 0, queued_busy = 0, other = 0;
    for (int i = 0; i < REQS; i++) {
        natsMsg *m = NULL;
        assert_int_equal(natsSubscription_NextMsg(&m, replies, 10000), NATS_OK);
        cJSON *j = cJSON_ParseWithLength(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
        const char *e = cJSON_IsString(err) ? err->valuestring : "";
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "busy")) &&
            strstr(e, "handed on") && strstr(e, "held by ghost"))
            fwd_busy++;
        else if (strstr(e, "ghost") && strstr(e, "did not answer"))
            expired++;
        else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "busy")) &&
                 strstr(e, "too many admin requests are waiting"))
            queued_busy++;     /* natsio's bound, before the loop read them */
        else
            other++, print_message("not a forward's answer: %.160s\n", natsMsg_GetData(m));
        cJSON_Delete(j);
        natsMsg_Destroy(m);
    }
    print_message("%d requests: %d handed on and expired, %d busy past the forwards, %d busy "
                  "queued, %d other\n", REQS, expired, fwd_busy, queued_busy, other);
    /* none answered from this replica's view (an unknown tenant) */
    assert_int_equal(other, 0);
    assert_true(expired <= WAITING && fwd_busy >= 1);
    assert_int_equal(expired + fwd_busy + queued_busy, REQS);
    /* counted, and the forwards as such */
    cJSON *j = pf_stats(f, "{\"limit\":0}", NULL);
    assert_true(pf_overall(j, "admin_requests_busy") >= fwd_busy + queued_busy);
    assert_true(pf_overall(j, "admin_forwarded") >= expired);
    assert_int_equal(pf_overall(j, "lease_values_refused"), 0);
    cJSON_Delete(j);
    /* keys in the lease bucket that fairq never writes: counted, ignored */
    assert_int_equal(ot_kv_put(&f->c, "fairq_lease", "p.16", "ghost"), 0);
    assert_int_equal(ot_kv_put(&f->c, "fairq_lease", "r.a=b", "x"), 0);
    assert_int_equal(ot_kv_put(&f->c, "fairq_lease", "zzz", "ghost"), 0);
    cJSON_Delete(stats_when(f, "lease_values_refused", 3));
    natsSubscription_Destroy(ghost);
    natsSubscription_Destroy(replies);
}

/* The server's config for the fence case: the mapping of 2 partitions,
 * one user for every connection (publish: allow everything but deny, if
 * deny is not NULL: only the proxy publishes there), and, for a reload,
 * the store -sd gave. */
static void fence_conf(const char *store, const char *deny)
{
    FILE *c = fopen(conf, "w");
    assert_non_null(c);
    fprintf(c, "mappings {\n"
               "  \"fair.submit.*\": \"fair.submit.{{partition(2,1)}}.{{wildcard(1)}}\"\n"
               "  \"fair.done.*\": \"fair.done.{{partition(2,1)}}.{{wildcard(1)}}\"\n"
               "}\n"
               "authorization { users = [\n"
               "  { user: open, password: open%s%s%s }\n"
               "] }\n"
               "no_auth_user: open\n",
            deny ? ", permissions: { publish: { allow: \">\", deny: [\"" : "", deny ? deny : "",
            deny ? "\"] } }" : "");
    if (store)
        fprintf(c, "jetstream { store_dir: \"%s\" }\n", store);
    assert_int_equal(fclose(c), 0);
}

/* A tenant of partition k of 2, into buf. */
static const char *tenant_of(char *buf, size_t cap, uint32_t k)
{
    for (unsigned n = 0;; n++) {
        snprintf(buf, cap, "ten%u", n);
        if (fq_partition_of(buf, strlen(buf), 2) == k)
            return buf;
    }
}

static int setup_fence(void **state)
{
    memcpy(dir + sizeof dir - 7, "XXXXXX", 6);
    if (!mkdtemp(dir))
        return -1;
    snprintf(conf, sizeof conf, "%s/fence.conf", dir);
    fence_conf(NULL, NULL);
    static const char y[] = "partitions: 2\n"
                            "streams:\n  lease_ttl_ms: 6000\n"
                            "scheduler:\n  default_plan: free\n"
                            "window:\n  max_in_flight: 4\n"
                            "plans:\n  - name: free\n";
    pt_worker_opts wo = {.concurrency = 4, .service_ms = 1};
    if (pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, y, &wo) != 0)
        return -1;
    return pt_log_wait_n(&((pf_fixture *)*state)->px, "consuming a partition", 2, 15000);
}

/* Each partition is fenced by its own lease (issue 16, point 2). One
 * replica holds both partitions of P = 2 at a 6 s lease; then the server
 * stops answering the renewals of partition 1's key (a permission taken
 * away by a reload: they go unanswered). Once partition 1's lease is not
 * fresh (5 s after its last renewal confirmed), a run of a tenant of
 * partition 0 is still fetched, dispatched, completed and acked before
 * partition 1 is let go (stale past the TTL, 1 s later), while the run of
 * partition 1's tenant waits. Before, the fence was the process's: every
 * partition waited until partition 1 was renewed or let go, and the run of
 * partition 0 came after the loss (about 2 s later). */
static void test_stale_partition_fences_only_itself(void **state)
{
    pf_fixture *f = *state;
    char t0[16], t1[16], store[600];
    tenant_of(t0, sizeof t0, 0);
    tenant_of(t1, sizeof t1, 1);
    assert_int_equal(pt_submit(&f->c, t0, "{\"run_id\":\"a0\"}", 15, NULL), 0);
    assert_int_equal(pt_submit(&f->c, t1, "{\"run_id\":\"a1\"}", 15, NULL), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 2, 20000), 0);
    snprintf(store, sizeof store, "%s/store", natstest_dir(f->srv));
    fence_conf(store, "$KV." FQ_DEFAULT_LEASE_BUCKET ".p.1");
    assert_int_equal(natstest_reload(f->srv), 0);
    assert_int_equal(pt_log_wait(&f->px, "a partition's lease is not fresh", 20000), 0);
    long long t0_ms = nt_now_ms();
    assert_int_equal(pt_submit(&f->c, t1, "{\"run_id\":\"b1\"}", 15, NULL), 0);
    assert_int_equal(pt_submit(&f->c, t0, "{\"run_id\":\"b0\"}", 15, NULL), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 3, 20000), 0);
    long long done_ms = nt_now_ms();
    pf_wait_msgs(f, "FAIR_DISPATCH", 3);
    print_message("partition 1 not fresh: partition 0's run completed %lld ms after its "
                  "submit, with partition 1 let go %s\n", done_ms - t0_ms,
                  pt_log_count(&f->px, "lost a partition") ? "before" : "not yet");
    /* partition 0's run done and partition 1 still held, stale */
    assert_int_equal(pt_log_count(&f->px, "lost a partition"), 0);
    assert_int_equal(pt_worker_completed(f->w), 3);
    pt_msg *m = NULL;
    size_t k = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    assert_int_equal(k, 3);
    assert_string_equal(m[2].run_id, "b0");
    pt_msgs_free(m, k);
    /* Let go at its TTL; partition 0 goes on. */
    assert_int_equal(pt_log_wait(&f->px, "lost a partition", 20000), 0);
    print_message("partition 1 let go %lld ms after the runs' submit\n", nt_now_ms() - t0_ms);
    assert_int_equal(pt_submit(&f->c, t0, "{\"run_id\":\"c0\"}", 15, NULL), 0);
    assert_int_equal(pt_worker_wait_completed(f->w, 4, 20000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_partitioned_runs_served_forged_token_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_forwards_past_64_answered_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_given_back_runs_come_again, setup_small, teardown),
        cmocka_unit_test_setup_teardown(test_partition_backlog_counts_the_stream, setup_small,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stale_partition_fences_only_itself, setup_fence,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
