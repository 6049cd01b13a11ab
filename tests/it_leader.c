/* it_leader.c -- the ownership keys' I/O against a real nats-server: the leader lease taken, stood by, renewed, fenced and handed back; replicas sharing partitions, a kill -9, a join. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "leader.h"
#include "natstest.h"

#define RENEW_TOKEN 101         /* the keys' requests' tokens start here */
#define BUCKET "it_lease"

/* One proxy's part: its connection, probes and leader. */
typedef struct side {
    fq_nio *n;
    fq_probes *pr;
    fq_leader *l;
    uint64_t term;              /* as the lead callback said */
    int leads;
} side;

typedef struct fixture {
    natstest *srv;
    side s[2];
} fixture;

static void on_lead(void *arg, int32_t part, uint64_t term, bool again)
{
    (void)again;
    assert_int_equal(part, 0);
    side *s = arg;
    s->term = term;
    s->leads++;
}

static int setup(void **state)
{
    static fixture f;
    memset(&f, 0, sizeof f);
    if (natstest_start(&f.srv, NULL) != 0)
        return -1;
    static const char *const ids[] = {"proxy-a", "proxy-b"};
    for (int i = 0; i < 2; i++) {
        side *s = &f.s[i];
        fq_nio_opts o = {.url = natstest_url(f.srv), .name = ids[i], .pub_wait_ms = 2000};
        char err[256];
        if (fq_nio_create(&s->n, &o, err, sizeof err) != FQ_OK ||
            fq_probes_create(&s->pr, 0, fq_nio_mono_ms) != FQ_OK)
            return -1;
        fq_leader_opts lo = {.bucket = BUCKET, .id = ids[i], .ttl_ms = 3000,
                             .renew_token = RENEW_TOKEN, .gained = on_lead, .arg = s};
        if (fq_leader_create(&s->l, s->n, s->pr, &lo) != FQ_OK)
            return -1;
    }
    char err[256];
    if (fq_nio_kv_ensure(f.s[0].n, BUCKET, 3000, 0, 0, 1, err, sizeof err) != FQ_OK)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    for (int i = 0; i < 2; i++) {
        fq_leader_destroy(f->s[i].l);
        fq_nio_destroy(f->s[i].n);
        fq_probes_destroy(f->s[i].pr);
    }
    natstest_destroy(f->srv);
    return 0;
}

/* s's events for up to 20 ms, the keys' answers handed to its leader;
 * then, with renew, its keys renewed as due (the proxy's turn). */
static void turn(side *s, bool renew)
{
    fq_nio_event ev[16];
    size_t k = fq_nio_poll(s->n, ev, 16, 20);
    for (size_t j = 0; j < k; j++) {
        if (ev[j].type == FQ_NIO_EV_KV_ANSWER)
            fq_leader_on_answer(s->l, &ev[j]);
        else
            fq_nio_msg_drop(s->n, ev[j].msg);
    }
    if (renew)
        fq_leader_renew(s->l, fq_nio_mono_ms(), true);
}

/* Turns of s (renewing) until its lease is in state, within 5 s. */
static void until_state(side *s, enum fq_lease_state state)
{
    long long end = nt_now_ms() + 5000;
    while (fq_leader_lease(s->l)->state != state && nt_now_ms() < end)
        turn(s, true);
    assert_int_equal(fq_leader_lease(s->l)->state, state);
}

static void test_take_standby_renew_fence_release(void **state)
{
    fixture *f = *state;
    side *a = &f->s[0], *b = &f->s[1];
    char why[256];

    until_state(a, FQ_LEASE_LEADING);
    assert_int_equal(a->leads, 1);
    assert_true(a->term > 0);
    assert_true(fq_leader_fresh(a->l, fq_nio_mono_ms()));
    fq_probes_phase(a->pr, FQ_PHASE_SERVING);
    assert_int_equal(fq_probes_ready_state(a->pr, fq_nio_mono_ms(), why, sizeof why),
                     FQ_READY_OK);

    /* The other stands by, and its probes say who leads. */
    long long end = nt_now_ms() + 5000;
    while (!fq_leader_lease(b->l)->holder[0] && nt_now_ms() < end)
        turn(b, true);
    assert_int_equal(fq_leader_lease(b->l)->state, FQ_LEASE_STANDBY);
    assert_int_equal(b->leads, 0);
    fq_probes_phase(b->pr, FQ_PHASE_STANDBY);
    assert_int_equal(fq_probes_ready_state(b->pr, fq_nio_mono_ms(), why, sizeof why),
                     FQ_READY_STANDBY);
    assert_string_equal(why, "standby: proxy-a holds the leader lease");

    /* Renewed as due: its answer confirms a later send. */
    uint64_t sent = fq_leader_lease(a->l)->confirmed_sent;
    end = nt_now_ms() + 3000;
    while (fq_leader_lease(a->l)->confirmed_sent == sent && nt_now_ms() < end)
        turn(a, true);
    assert_true(fq_leader_lease(a->l)->confirmed_sent > sent);
    assert_int_equal(fq_leader_lease(a->l)->state, FQ_LEASE_LEADING);

    /* Fenced: not fresh, and not ready from the next step on, whatever the
     * lease says. */
    fq_leader_fence(a->l);
    assert_false(fq_leader_fresh(a->l, fq_nio_mono_ms()));
    assert_true(fq_leader_renew(a->l, fq_nio_mono_ms(), true));
    assert_int_equal(fq_probes_ready_state(a->pr, fq_nio_mono_ms(), why, sizeof why),
                     FQ_READY_LEASE_STALE);

    /* Handed back at a stop (once a renewal under way is answered): the
     * standby takes it at its next read, in a later term. */
    end = nt_now_ms() + 5000;
    while (fq_leader_lease(a->l)->op != FQ_LEASE_OP_NONE && nt_now_ms() < end)
        turn(a, false);
    assert_true(fq_leader_release(a->l));
    assert_true(fq_leader_releasing(a->l));
    end = nt_now_ms() + 5000;
    while (fq_leader_releasing(a->l) && nt_now_ms() < end)
        turn(a, false);
    assert_false(fq_leader_releasing(a->l));
    until_state(b, FQ_LEASE_LEADING);
    assert_int_equal(b->leads, 1);
    assert_true(b->term > a->term);
}

/* ---- replicas sharing P partitions ------------------------------------- */

#define PARTS 8
#define PBUCKET "it_parts"
#define NREP 4

typedef struct replica {
    fq_nio *n;
    fq_probes *pr;
    fq_leader *l;
    bool live;
    bool owned[PARTS];          /* as gained and lost said */
    int gains;
} replica;

static void rep_gained(void *arg, int32_t part, uint64_t term, bool again)
{
    replica *r = arg;
    assert_true(term > 0);
    if (part < 0)
        return;
    assert_true(again || !r->owned[part]);
    r->owned[part] = true;
    r->gains++;
}

static void rep_lost(void *arg, int32_t part, bool planned)
{
    replica *r = arg;
    if (part >= 0)
        r->owned[part] = false;
    if (planned)
        fq_leader_handoff(r->l, part);  /* nothing to settle here */
}

/* Partition 1's fence is consumer 0's (as a proxy fences each partition's
 * consumers by that partition's lease alone). */
static void rep_fence(void *arg, int32_t part, uint64_t until)
{
    replica *r = arg;
    if (part == 1)
        fq_nio_fence_consumer(r->n, 0, until);
}

static void rep_start(replica *r, const char *url, const char *id)
{
    memset(r, 0, sizeof *r);
    fq_nio_opts o = {.url = url, .name = id, .pub_wait_ms = 2000};
    char err[256];
    assert_int_equal(fq_nio_create(&r->n, &o, err, sizeof err), FQ_OK);
    assert_int_equal(fq_probes_create(&r->pr, 0, fq_nio_mono_ms), FQ_OK);
    fq_leader_opts lo = {.bucket = PBUCKET, .id = id, .partitions = PARTS, .ttl_ms = 3000,
                         .renew_token = RENEW_TOKEN, .watch = 0, .gained = rep_gained,
                         .lost = rep_lost, .arg = r};
    assert_int_equal(fq_leader_create(&r->l, r->n, r->pr, &lo), FQ_OK);
    r->live = true;
}

/* kill -9: the connection closed, nothing handed back. */
static void rep_kill(replica *r)
{
    fq_leader_destroy(r->l);
    fq_nio_destroy(r->n);
    fq_probes_destroy(r->pr);
    memset(r, 0, sizeof *r);
}

/* One turn of a replica: its events, then its keys renewed. */
static void reps_turn_one(replica *r)
{
    fq_nio_event ev[16];
    size_t k = fq_nio_poll(r->n, ev, 16, 2);
    for (size_t j = 0; j < k; j++) {
        if (ev[j].type == FQ_NIO_EV_KV_ANSWER)
            fq_leader_on_answer(r->l, &ev[j]);
        else if (ev[j].type == FQ_NIO_EV_KV || ev[j].type == FQ_NIO_EV_KV_SYNCED)
            fq_leader_on_kv(r->l, &ev[j]);
        else
            fq_nio_msg_drop(r->n, ev[j].msg);
    }
    fq_leader_renew(r->l, fq_nio_mono_ms(), true);
}

/* One turn of every live replica. */
static void reps_turn(replica *rs)
{
    for (int i = 0; i < NREP; i++)
        if (rs[i].live)
            reps_turn_one(&rs[i]);
}

/* Partitions a fresh owner holds, per replica, and in all. */
static int reps_owned(replica *rs, int counts[NREP])
{
    int total = 0;
    uint64_t now = fq_nio_mono_ms();
    for (int i = 0; i < NREP; i++) {
        counts[i] = 0;
        for (int k = 0; k < PARTS && rs[i].live; k++)
            counts[i] += fq_leader_part_fresh(rs[i].l, k, now);
        total += counts[i];
    }
    return total;
}

static bool reps_balanced(replica *rs)
{
    int c[NREP], n = 0, lo = PARTS, hi = 0;
    if (reps_owned(rs, c) != PARTS)
        return false;
    for (int i = 0; i < NREP; i++) {
        if (!rs[i].live)
            continue;
        n++;
        lo = c[i] < lo ? c[i] : lo;
        hi = c[i] > hi ? c[i] : hi;
    }
    return n && hi - lo <= 1;
}

/* Three replicas share 8 partitions 3, 3, 2; kill -9 of one, and the two
 * left own all 8 within the TTL and a second; a fourth joins and takes
 * its share one partition at a time while the others keep theirs. */
static void test_replicas_share_partitions(void **state)
{
    fixture *f = *state;
    char err[256];
    assert_int_equal(fq_nio_kv_ensure(f->s[0].n, PBUCKET, 3000, 0, 0, 1, err, sizeof err),
                     FQ_OK);
    static replica rs[NREP];
    const char *url = natstest_url(f->srv);
    rep_start(&rs[0], url, "rep-a");
    rep_start(&rs[1], url, "rep-b");
    rep_start(&rs[2], url, "rep-c");
    long long end = nt_now_ms() + 15000;
    while (!reps_balanced(rs) && nt_now_ms() < end)
        reps_turn(rs);
    assert_true(reps_balanced(rs));
    int c[NREP];
    reps_owned(rs, c);
    print_message("shared: %d %d %d\n", c[0], c[1], c[2]);
    int duty = 0;
    for (int i = 0; i < 3; i++)
        duty += fq_leader_fresh(rs[i].l, fq_nio_mono_ms());
    assert_int_equal(duty, 1);

    /* kill -9 of one that owns partitions */
    int victim = c[2] ? 2 : 1;
    long long t0 = nt_now_ms(), back = 0;
    rep_kill(&rs[victim]);
    end = t0 + 10000;
    while (nt_now_ms() < end && !back) {
        reps_turn(rs);
        if (reps_owned(rs, c) == PARTS)
            back = nt_now_ms();
    }
    print_message("owned again %lld ms after the kill\n", back - t0);
    assert_true(back > 0);
    assert_true(back - t0 <= 3000 + 1000);
    while (!reps_balanced(rs) && nt_now_ms() < end)
        reps_turn(rs);
    assert_true(reps_balanced(rs));

    /* a joiner takes its share one partition at a time, and at most one
     * partition is without a fresh owner meanwhile */
    rep_start(&rs[3], url, "rep-d");
    end = nt_now_ms() + 15000;
    int had = 0, worst = 0;
    while (!reps_balanced(rs) && nt_now_ms() < end) {
        reps_turn(rs);
        int total = reps_owned(rs, c);
        assert_true(c[3] <= had + 1);
        had = c[3];
        worst = PARTS - total > worst ? PARTS - total : worst;
    }
    assert_true(reps_balanced(rs));
    assert_true(c[3] >= 2);
    assert_true(worst <= 1);
    print_message("joined: %d %d %d %d, at most %d without an owner\n", c[0], c[1], c[2],
                  c[3], worst);
    for (int i = 0; i < NREP; i++)
        if (rs[i].live)
            rep_kill(&rs[i]);
}

/* ---- one key's requests unanswered ------------------------------------- */

#define HBUCKET "it_hole"
#define HPARTS 4
#define HOLE 0                  /* the partition whose key is black-holed */
#define HTTL 2000

/* One replica alone over 4 partitions, on a server that lets it publish
 * nothing to partition 0's key: its take of p.0 is never answered, as when
 * the bucket's stream has lost its leader or a permission denies the key.
 * It takes 1, 2 and 3 and must keep them, with no loss said, across 3 TTLs
 * of trying p.0 again every retry; and the loop that renews them goes on
 * handing over a consumer's runs while p.0's take is in flight: when the
 * keys' reads and takes were waited for, none was (every partition of a
 * replica stopped for each one, 30 to 860 ms on a loaded cluster, 2.8 s
 * once), and a read or take waiting the API's 5 s lost them all. */
static void test_unanswered_key_costs_the_others_nothing(void **state)
{
    fixture *f = *state;
    char conf[600], err[256];
    snprintf(conf, sizeof conf, "%s/hole.conf", natstest_dir(f->srv));
    FILE *out = fopen(conf, "w");
    assert_non_null(out);
    fputs("authorization { users = [ { user: rep, password: rep, permissions: {\n"
          "  publish: { deny: [\"$KV." HBUCKET ".p.0\"] } } } ] }\n", out);
    fclose(out);
    natstest *srv = NULL;
    assert_int_equal(natstest_start(&srv, (const char *const[]){"-c", conf, NULL}), 0);
    static replica r;
    memset(&r, 0, sizeof r);
    fq_nio_opts o = {.url = natstest_url(srv), .name = "rep-h", .user = "rep",
                     .password = "rep", .pub_wait_ms = 2000};
    assert_int_equal(fq_nio_create(&r.n, &o, err, sizeof err), FQ_OK);
    assert_int_equal(fq_nio_kv_ensure(r.n, HBUCKET, HTTL, 0, 0, 1, err, sizeof err), FQ_OK);
    assert_int_equal(fq_probes_create(&r.pr, 0, fq_nio_mono_ms), FQ_OK);
    fq_leader_opts lo = {.bucket = HBUCKET, .id = "rep-h", .partitions = HPARTS,
                         .ttl_ms = HTTL, .renew_token = RENEW_TOKEN, .watch = 0,
                         .gained = rep_gained, .lost = rep_lost, .fence = rep_fence,
                         .arg = &r};
    assert_int_equal(fq_leader_create(&r.l, r.n, r.pr, &lo), FQ_OK);
    r.live = true;
    /* Runs that a consumer hands over one at a time (each acked first). */
    char warn[256];
    fq_nio_stream st = {.name = "HOLE", .subject = "hole.>", .replicas = 1};
    assert_int_equal(fq_nio_stream_ensure(r.n, &st, warn, sizeof warn), FQ_OK);
    for (int i = 0; i < 400; i++) {
        fq_nio_out m = {.subject = "hole.run", .data = "run", .len = 3};
        assert_int_equal(fq_nio_publish(r.n, &m, 1), FQ_OK);
    }
    fq_nio_consumer c = {.stream = "HOLE", .durable = "hole", .max_ack_pending = 1,
                         .ack_wait_ms = 60000, .batch = 1};
    fq_nio_fence_consumer(r.n, 0, 0);   /* partition 1's: fenced until it is taken */
    assert_int_equal(fq_nio_consume(r.n, 0, &c), FQ_OK);

    /* The others taken (p.0's take unanswered meanwhile). */
    long long end = nt_now_ms() + 15000;
    bool others = false;
    while (!others && nt_now_ms() < end) {
        reps_turn_one(&r);
        others = true;
        for (int k = 0; k < HPARTS; k++)
            others &= k == HOLE || fq_leader_part_fresh(r.l, k, fq_nio_mono_ms());
    }
    assert_true(others);
    int gains = r.gains;

    /* Kept, fresh at every turn, through 3 TTLs of p.0's takes; runs
     * handed over while one is in flight. */
    end = nt_now_ms() + 3 * HTTL;
    int turns = 0, runs = 0, runs_in_flight = 0;
    const fq_lease *hole = fq_owner_lease(fq_leader_owner(r.l), HOLE);
    while (nt_now_ms() < end) {
        fq_nio_event ev[16];
        size_t k = fq_nio_poll(r.n, ev, 16, 2);
        for (size_t j = 0; j < k; j++) {
            if (ev[j].type == FQ_NIO_EV_KV_ANSWER) {
                fq_leader_on_answer(r.l, &ev[j]);
            } else if (ev[j].type == FQ_NIO_EV_KV || ev[j].type == FQ_NIO_EV_KV_SYNCED) {
                fq_leader_on_kv(r.l, &ev[j]);
            } else {
                if (ev[j].type == FQ_NIO_EV_MSG) {
                    runs++;
                    runs_in_flight += hole->op != FQ_LEASE_OP_NONE;
                    assert_int_equal(fq_nio_ack(r.n, 0, &ev[j].ack), FQ_OK);
                }
                fq_nio_msg_drop(r.n, ev[j].msg);
            }
        }
        fq_leader_renew(r.l, fq_nio_mono_ms(), true);
        turns++;
        for (int k = 0; k < HPARTS; k++) {
            if (k == HOLE)
                continue;
            if (!fq_leader_part_fresh(r.l, k, fq_nio_mono_ms()) || !r.owned[k])
                fail_msg("partition %d lost after %d turns while p.%d went unanswered", k,
                         turns, HOLE);
        }
    }
    assert_false(fq_leader_part_fresh(r.l, HOLE, fq_nio_mono_ms()));
    assert_int_equal(r.gains, gains);
    print_message("3 partitions kept over %d turns, p.%d unanswered; %d runs handed over, %d "
                  "of them while its take was in flight\n", turns, HOLE, runs, runs_in_flight);
    assert_true(runs_in_flight > 0);
    rep_kill(&r);
    natstest_destroy(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_standby_renew_fence_release),
        cmocka_unit_test(test_replicas_share_partitions),
        cmocka_unit_test(test_unanswered_key_costs_the_others_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
