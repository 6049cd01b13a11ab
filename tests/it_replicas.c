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

#include "proxyfixture.h"

#define P 8
#define TTL_MS 3000

static const char yaml_fmt[] =
    "partitions: 8\n"
    "replica_id: %s\n"
    "scheduler:\n  default_plan: free\n"
    "window:\n  max_in_flight: 8\n"
    "plans:\n  - name: free\n";

static char dir[] = "/tmp/fairq-it-replicas-XXXXXX";
static char conf[256];
static pt_proxy more[3];        /* rep-b, rep-c, rep-d; the fixture's proxy is rep-a */

static int setup(void **state)
{
    if (!mkdtemp(dir))
        return -1;
    snprintf(conf, sizeof conf, "%s/mapping.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f, "mappings {\n"
               "  \"fair.submit.*\": \"fair.submit.{{partition(8,1)}}.{{wildcard(1)}}\"\n"
               "  \"fair.done.*\": \"fair.done.{{partition(8,1)}}.{{wildcard(1)}}\"\n"
               "}\n");
    fclose(f);
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, "rep-a");
    pt_worker_opts wo = {.concurrency = 8, .service_ms = 1};
    return pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, yaml, &wo);
}

static int teardown(void **state)
{
    for (int i = 0; i < 3; i++)
        if (nt_proc_alive(&more[i].proc))
            pt_proxy_stop(&more[i]);
    pf_teardown(state, false);
    remove(conf);
    rmdir(dir);
    return 0;
}

static void start(pt_proxy *px, pf_fixture *f, const char *id)
{
    char yaml[512];
    snprintf(yaml, sizeof yaml, yaml_fmt, id);
    assert_int_equal(pt_proxy_start(px, f->srv, id, yaml), 0);
    assert_int_equal(pt_log_wait(px, "fairq-proxy running", 15000), 0);
}

/* Each partition's owner as the lease bucket says now ("" for none or
 * released), and when its key was last written (its stream sequence). */
static void owners(pf_fixture *f, char own[P][64], uint64_t seq[P])
{
    memset(own, 0, (size_t)P * 64);
    memset(seq, 0, (size_t)P * sizeof seq[0]);
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "KV_fairq_lease", &m, &n), 0);
    for (size_t i = 0; i < n; i++) {
        int k = -1;
        if (sscanf(m[i].subject, "$KV.fairq_lease.p.%d", &k) != 1 || k < 0 || k >= P)
            continue;
        snprintf(own[k], 64, "%.*s", (int)m[i].len, m[i].data ? m[i].data : "");
        if (strcmp(own[k], "released") == 0)
            own[k][0] = '\0';
        seq[k] = m[i].seq;
    }
    pt_msgs_free(m, n);
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
    uint64_t seq[P];
    for (;;) {
        owners(f, own, seq);
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

static void test_replicas_share_take_over_and_join(void **state)
{
    pf_fixture *f = *state;
    start(&more[0], f, "rep-b");
    start(&more[1], f, "rep-c");
    const char *three[] = {"rep-a", "rep-b", "rep-c"};
    wait_shared(f, three, 3, 15000);
    char own[P][64];
    uint64_t seq[P];
    owners(f, own, seq);
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
        uint64_t now_seq[P];
        owners(f, now_own, now_seq);
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

    /* rep-d joins under load: it takes its share, nothing lost or doubled */
    pf_submit_runs(f, 80, 40, 16);
    moves mv;
    moves_start(&mv, f);
    start(&more[2], f, "rep-d");
    const char *joined[] = {"rep-a", "rep-b", "rep-d"};
    wait_shared(f, joined, 3, 15000);
    assert_int_equal(pt_worker_wait_completed(f->w, 120, 20000), 0);
    serve(f, 120, 40, 120);
    owners(f, own, seq);
    print_message("joined: a %d, b %d, d %d\n", count(own, "rep-a"), count(own, "rep-b"),
                  count(own, "rep-d"));
    pf_wait_empty(f, "FAIR_SUBMIT");
    pf_assert_each_dispatched_once(f, 160);
    /* the joiner's share came by handovers, one at a time */
    moves_read(&mv);
    print_message("%d planned moves, at most %d at once\n", mv.count, mv.most);
    assert_true(mv.count >= count(own, "rep-d"));
    assert_int_equal(mv.most, 1);
    natsSubscription_Destroy(mv.sub);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replicas_share_take_over_and_join, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
