/* test_share.c -- one fairness across replicas: shares of the global window from heartbeats, in virtual time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "msg.h"
#include "share.h"

#define P 100   /* the heartbeat period, ms */

static fq_share *mk(const char *id, uint32_t g, uint64_t gt, uint32_t res, uint64_t rest,
                    uint64_t now)
{
    fq_share_opts o = {.max_runs = g, .max_tokens = gt, .reserve_runs = res,
                       .reserve_tokens = rest, .period = P};
    fq_share *s;
    assert_int_equal(fq_share_create(&s, &o, id, now), FQ_OK);
    return s;
}

/* A replica as the tests drive it: its state, what it has, its last beat. */
typedef struct rep {
    fq_share *s;
    fq_share_local me;
    fq_share_beat beat;
    fq_share_limits lim;
} rep;

/* One heartbeat period for every replica: each ticks, then every beat is
 * heard by all (its own included). */
static void period(rep *r, size_t n, uint64_t now)
{
    for (size_t i = 0; i < n; i++)
        fq_share_tick(&r[i].lim, &r[i].beat, r[i].s, &r[i].me, now);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            assert_int_equal(fq_share_heard(r[j].s, &r[i].beat, now), FQ_OK);
}

/* Tick again at now without publishing, to read the limits after the beats. */
static void settle(rep *r, size_t n, uint64_t now)
{
    for (size_t i = 0; i < n; i++)
        fq_share_tick(&r[i].lim, &r[i].beat, r[i].s, &r[i].me, now);
}

static void destroy(rep *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fq_share_destroy(r[i].s);
}

static fq_share_local backlog(uint64_t w, uint32_t runs, uint64_t queued)
{
    return (fq_share_local){.weight = w, .runs = runs, .tokens = runs * 1000ull,
                            .queued_runs = queued, .queued_tokens = queued * 1000};
}

static void test_create_refuses_bad_ids_and_period(void **state)
{
    (void)state;
    fq_share_opts o = {.max_runs = 10, .period = P};
    fq_share *s = (fq_share *)1;
    assert_int_equal(fq_share_create(&s, &o, "", 0), FQ_EINVAL);
    assert_null(s);
    assert_int_equal(fq_share_create(&s, &o, "has space", 0), FQ_EINVAL);
    char long_id[FQ_SHARE_ID_MAX + 2];
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0;
    assert_int_equal(fq_share_create(&s, &o, long_id, 0), FQ_EINVAL);
    o.period = 0;
    assert_int_equal(fq_share_create(&s, &o, "a", 0), FQ_EINVAL);
    fq_share_destroy(NULL);
}

/* A replica that starts takes the reserve until it has heard itself and
 * listened for max_age; alone, it then takes the whole window. */
static void test_alone_starts_small_then_takes_the_window(void **state)
{
    (void)state;
    rep r[1] = {{.s = mk("a", 10, 50000, 2, 3000, 0), .me = backlog(1, 0, 100)}};
    period(r, 1, 0);
    assert_int_equal(r[0].lim.runs, 2);
    assert_int_equal(r[0].lim.tokens, 3000);
    fq_share_stats st;
    fq_share_stats_get(&st, r[0].s);
    assert_true(st.deaf);
    for (uint64_t t = P; t <= 3 * P; t += P)
        period(r, 1, t);
    assert_int_equal(r[0].lim.runs, 10);
    assert_int_equal(r[0].lim.tokens, 50000);
    assert_int_equal(r[0].lim.share_runs, 10);
    fq_share_stats_get(&st, r[0].s);
    assert_false(st.deaf);
    destroy(r, 1);
}

/* Alone (after it has heard itself and listened), a replica has the whole
 * window whatever it holds or wants: one proxy with shares on is one proxy
 * without. With a peer, an idle replica may add the reserve at once. */
static void test_alone_has_the_whole_window_even_idle(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 50000, 1, 1000, 0), .me = backlog(0, 0, 0)},
                {.s = mk("b", 10, 50000, 1, 1000, 0), .me = backlog(1, 10, 100)}};
    for (uint64_t t = 0; t <= 4 * P; t += P)
        period(r, 1, t);
    assert_int_equal(r[0].lim.runs, 10);
    assert_int_equal(r[0].lim.tokens, 50000);
    for (uint64_t t = 5 * P; t <= 9 * P; t += P)
        period(r, 2, t);
    assert_int_equal(r[0].lim.runs, 1);        /* b holds the window: the reserve */
    assert_int_equal(r[0].lim.tokens, 1000);
    assert_int_equal(r[1].lim.runs, 10);
    destroy(r, 2);
}

/* An unlimited dimension is not split. */
static void test_unlimited_dimension_is_not_split(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(1, 0, 100)},
                {.s = mk("b", 10, 0, 1, 0, 0), .me = backlog(1, 0, 100)}};
    for (uint64_t t = 0; t <= 4 * P; t += P)
        period(r, 2, t);
    assert_int_equal(r[0].lim.runs, 5);
    assert_int_equal(r[0].lim.tokens, FQ_SHARE_UNLIMITED);
    destroy(r, 2);
}

/* Backlogged replicas share by weight, in runs and in tokens; the shares
 * add up to the window, the remainders going by fraction, then by id. */
static void test_shares_follow_backlogged_weight(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 20, 100000, 1, 1000, 0), .me = backlog(3, 0, 1000)},
                {.s = mk("b", 20, 100000, 1, 1000, 0), .me = backlog(1, 0, 1000)}};
    for (uint64_t t = 0; t <= 4 * P; t += P)
        period(r, 2, t);
    assert_int_equal(r[0].lim.runs, 15);
    assert_int_equal(r[1].lim.runs, 5);
    assert_int_equal(r[0].lim.tokens, 75000);
    assert_int_equal(r[1].lim.tokens, 25000);
    /* 10 runs at 3:1 is 7.5:2.5: one of the halves goes to "a", by id */
    fq_share_destroy(r[0].s);
    fq_share_destroy(r[1].s);
    r[0].s = mk("a", 10, 0, 0, 0, 0);
    r[1].s = mk("b", 10, 0, 0, 0, 0);
    for (uint64_t t = 0; t <= 4 * P; t += P)
        period(r, 2, t);
    assert_int_equal(r[0].lim.runs, 8);
    assert_int_equal(r[1].lim.runs, 2);
    destroy(r, 2);
}

/* With a round, shares round down or up by turns, the same way in every
 * replica: they add up to the window at every round, and over the rounds
 * each holds its fraction (3:1 of 10 runs: 7.5 and 2.5), where rounding
 * by fraction and id gives "a" 8 of 10 for good. */
static void test_rounds_spread_the_remainder(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 0, 0, 0, 0), .me = backlog(3, 0, 1000)},
                {.s = mk("b", 10, 0, 0, 0, 0), .me = backlog(1, 0, 1000)}};
    uint64_t t = 0;
    for (; t <= 4 * P; t += P)
        period(r, 2, t);
    uint64_t sum[2] = {0, 0};
    enum { ROUNDS = 1000 };
    for (uint64_t k = 1; k <= ROUNDS; k++, t += P) {
        for (int i = 0; i < 2; i++) {
            r[i].me.round = k;
            fq_share_tick(&r[i].lim, NULL, r[i].s, &r[i].me, t);
            assert_true(r[i].lim.share_runs == (i ? 2 : 7) ||
                        r[i].lim.share_runs == (i ? 3 : 8));
            sum[i] += r[i].lim.share_runs;
        }
        assert_int_equal(r[0].lim.share_runs + r[1].lim.share_runs, 10);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                fq_share_heard(r[j].s, &r[i].beat, t);
    }
    assert_true(llabs((long long)sum[0] - 7500) <= 10);
    assert_true(llabs((long long)sum[1] - 2500) <= 10);
    destroy(r, 2);
}

/* Shares are capped at what a replica can use: one with one queued run
 * does not hold half the window idle; one with none keeps what it holds. */
static void test_shares_are_capped_by_demand(void **state)
{
    (void)state;
    rep r[3] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(1, 0, 600)},
                {.s = mk("b", 10, 0, 1, 0, 0), .me = backlog(1, 0, 1)},
                {.s = mk("c", 10, 0, 1, 0, 0), .me = backlog(0, 2, 0)}};
    for (uint64_t t = 0; t <= 4 * P; t += P)
        period(r, 3, t);
    assert_int_equal(r[1].lim.share_runs, 1);
    assert_int_equal(r[2].lim.share_runs, 2);
    assert_int_equal(r[0].lim.share_runs, 7);
    /* nobody wants more than there is: the rest goes by weight, so every
     * backlogged replica has room for what arrives before the next beat */
    r[0].me = backlog(1, 0, 1);
    for (uint64_t t = 5 * P; t <= 6 * P; t += P)
        period(r, 3, t);
    assert_int_equal(r[0].lim.share_runs + r[1].lim.share_runs + r[2].lim.share_runs, 10);
    assert_int_equal(r[0].lim.share_runs, 4);
    assert_int_equal(r[1].lim.share_runs, 4);
    destroy(r, 3);
}

/* A replica whose backlog begins while another holds the whole window
 * borrows the reserve at once, and only the reserve: the window is
 * exceeded by the reserve at most; the holder stops refilling as soon as
 * it hears, and the newcomer's limit grows as the holder drains. */
static void test_newcomer_borrows_the_reserve_while_the_holder_drains(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(1, 0, 500)},
                {.s = mk("b", 10, 0, 1, 0, 0), .me = backlog(0, 0, 0)}};
    uint64_t t = 0;
    for (; t <= 4 * P; t += P)
        period(r, 2, t);
    r[0].me = backlog(1, 10, 490);     /* a holds the window */
    period(r, 2, t);
    t += P;
    assert_int_equal(r[0].lim.runs, 10);
    r[1].me = backlog(1, 0, 50);       /* b's tenants queue */
    fq_share_tick(&r[1].lim, &r[1].beat, r[1].s, &r[1].me, t);
    assert_int_equal(r[1].lim.share_runs, 5);
    assert_int_equal(r[1].lim.runs, 1);    /* room 0 + the reserve */
    r[1].me.runs = 1;                  /* it dispatches one, over the window */
    r[1].me.queued_runs--;
    fq_share_tick(&r[1].lim, &r[1].beat, r[1].s, &r[1].me, t);
    assert_int_equal(r[1].beat.borrowed_runs, 1);
    for (int i = 0; i < 2; i++)
        fq_share_heard(r[0].s, &r[1].beat, t), fq_share_heard(r[1].s, &r[1].beat, t);
    fq_share_tick(&r[0].lim, &r[0].beat, r[0].s, &r[0].me, t);
    assert_int_equal(r[0].lim.runs, 5);    /* a does not refill past its share */
    uint32_t peak = 0;
    /* a drains one run a period, b takes what a frees */
    for (int k = 0; k < 8; k++) {
        t += P;
        if (r[0].me.runs > r[0].lim.runs && r[0].me.runs)
            r[0].me.runs--;
        period(r, 2, t);
        while (r[1].me.runs < r[1].lim.runs) {
            r[1].me.runs++;
            r[1].me.queued_runs--;
        }
        while (r[0].me.runs < r[0].lim.runs) {
            r[0].me.runs++;
            r[0].me.queued_runs--;
        }
        uint32_t total = r[0].me.runs + r[1].me.runs;
        peak = total > peak ? total : peak;
    }
    assert_true(peak <= 11);
    assert_int_equal(r[0].me.runs, 5);
    assert_int_equal(r[1].me.runs, 5);
    settle(r, 2, t);
    assert_int_equal(r[1].beat.borrowed_runs, 0);   /* given back once at its share */
    destroy(r, 2);
}

/* The reserve is one: a replica that hears another holding it may not
 * borrow it too. */
static void test_reserve_held_by_another_is_not_borrowed(void **state)
{
    (void)state;
    rep r[1] = {{.s = mk("a", 10, 0, 2, 0, 0), .me = backlog(1, 0, 50)}};
    for (uint64_t t = 0; t <= 3 * P; t += P)
        period(r, 1, t);
    fq_share_beat b = {.id = "b", .weight = 1, .runs = 10, .borrowed_runs = 2,
                       .queued_runs = 10};
    fq_share_heard(r[0].s, &b, 3 * P);
    settle(r, 1, 3 * P);
    assert_int_equal(r[0].lim.share_runs, 5);
    assert_int_equal(r[0].lim.runs, 2);    /* room 10 - (10 - 2); no reserve left */
    b.borrowed_runs = 1;
    fq_share_heard(r[0].s, &b, 3 * P);
    settle(r, 1, 3 * P);
    assert_int_equal(r[0].lim.runs, 2);    /* room 1 + the one left of the reserve */
    destroy(r, 1);
}

/* A peer that falls silent keeps its last share until it is forgotten;
 * then the others take the window. */
static void test_silent_peer_keeps_its_share_until_forgotten(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(1, 0, 100)},
                {.s = mk("b", 10, 0, 1, 0, 0), .me = backlog(1, 0, 100)}};
    uint64_t t = 0;
    for (; t <= 4 * P; t += P)
        period(r, 2, t);
    assert_int_equal(r[0].lim.runs, 5);
    /* b's beats stop reaching anyone; a still hears itself */
    for (; t < 4 * P + 50 * P; t += P) {
        fq_share_tick(&r[0].lim, &r[0].beat, r[0].s, &r[0].me, t);
        fq_share_heard(r[0].s, &r[0].beat, t);
        assert_int_equal(r[0].lim.runs, 5);
    }
    fq_share_stats st;
    fq_share_stats_get(&st, r[0].s);
    assert_int_equal(st.peers, 1);
    assert_int_equal(st.live, 0);
    t += 2 * P;
    fq_share_tick(&r[0].lim, &r[0].beat, r[0].s, &r[0].me, t);
    assert_int_equal(r[0].lim.runs, 10);
    fq_share_stats_get(&st, r[0].s);
    assert_int_equal(st.peers, 0);
    assert_int_equal(st.forgotten, 1);
    destroy(r, 2);
}

/* A replica that hears nobody, itself included, is cut off: it forgets
 * no one and takes no more than an equal split of the window among the
 * replicas it knows. */
static void test_deaf_replica_never_takes_the_whole_window(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(1, 0, 100)},
                {.s = mk("b", 10, 0, 1, 0, 0), .me = backlog(3, 0, 100)}};
    uint64_t t = 0;
    for (; t <= 4 * P; t += P)
        period(r, 2, t);
    assert_int_equal(r[0].lim.runs, 3);    /* 2.5 and 7.5: the tie goes to "a" by id */
    /* a hears nothing from now on, however long: b keeps its last share */
    for (t += P; t < 200 * P; t += P) {
        fq_share_tick(&r[0].lim, &r[0].beat, r[0].s, &r[0].me, t);
        assert_int_equal(r[0].lim.runs, 3);
    }
    fq_share_stats st;
    fq_share_stats_get(&st, r[0].s);
    assert_true(st.deaf);
    assert_int_equal(st.peers, 1);
    /* heard again, both idle: b's beat shows nothing */
    r[0].me = backlog(0, 0, 0);
    r[1].me = backlog(0, 0, 0);
    period(r, 2, t);
    settle(r, 2, t);
    assert_int_equal(r[0].lim.runs, 1);    /* what it holds and the reserve */
    /* a goes deaf, then its tenants queue: alone in its view it would take
     * the window, but it takes an equal split of two */
    r[0].me = backlog(1, 0, 100);
    uint64_t last = t;
    for (t += P; t < 400 * P; t += P) {
        fq_share_tick(&r[0].lim, &r[0].beat, r[0].s, &r[0].me, t);
        /* within max_age it trusts its view (b idle, so all is its); past
         * it, it knows it is cut off */
        assert_true(t <= last + 3 * P ? r[0].lim.runs == 10 : r[0].lim.runs <= 5);
    }
    assert_int_equal(r[0].lim.runs, 5);
    assert_int_equal(r[0].lim.share_runs, 10);
    destroy(r, 2);
}

/* A peer's beat saying it holds more on the reserve than the reserve (a
 * peer configured with a larger one, or a bad beat) is believed up to the
 * reserve: all replicas together stay within the window plus the reserve
 * once per replica (docs/scaling.md's overshoot), whatever it says. */
static void test_borrowed_past_the_reserve_not_believed(void **state)
{
    (void)state;
    rep r[1] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(5, 0, 100)}};
    for (uint64_t t = 0; t <= 4 * P; t += P)
        period(r, 1, t);
    assert_int_equal(r[0].lim.runs, 10);           /* alone: the window */
    fq_share_beat b = {.id = "b", .weight = 1, .queued_runs = 100, .runs = 10,
                       .borrowed_runs = 3};        /* the whole window, 3 "on the reserve" */
    assert_int_equal(fq_share_heard(r[0].s, &b, 4 * P), FQ_OK);
    settle(r, 1, 4 * P);
    /* b holds 10 of 10 + 1 (1 believed on the reserve): a has the room
     * left, 1 run; believing 3 it had 3, and the two held 13 */
    assert_int_equal(r[0].lim.runs, 1);
    assert_int_equal(r[0].beat.borrowed_runs, 0);
    destroy(r, 1);
}

static void test_peer_table_is_bounded(void **state)
{
    (void)state;
    fq_share_opts o = {.max_runs = 10, .period = P, .max_peers = 4};
    fq_share *s;
    assert_int_equal(fq_share_create(&s, &o, "me", 0), FQ_OK);
    fq_share_beat b = {.weight = 1};
    for (int i = 0; i < 4; i++) {
        snprintf(b.id, sizeof b.id, "p%d", i);
        assert_int_equal(fq_share_heard(s, &b, 0), FQ_OK);
    }
    assert_int_equal(fq_share_heard(s, &b, 1), FQ_OK);     /* known: replaced */
    snprintf(b.id, sizeof b.id, "p9");
    assert_int_equal(fq_share_heard(s, &b, 1), FQ_EFULL);
    fq_share_stats st;
    fq_share_stats_get(&st, s);
    assert_int_equal(st.peers, 4);
    assert_int_equal(st.refused, 1);
    fq_share_destroy(s);
}

/* Random replicas that have all heard the same beats: the shares add up
 * to the window whenever someone is backlogged and the idle hold less than
 * it, no backlogged replica's share exceeds its demand while another's is
 * short of its weighted part, and every limit is within share. */
static uint64_t rng = 7;
static uint64_t rnd(uint64_t n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (rng >> 33) % n;
}

static void test_random_shares_add_up(void **state)
{
    (void)state;
    enum { N = 6 };
    for (int round = 0; round < 300; round++) {
        uint32_t g = (uint32_t)(1 + rnd(64));
        rep r[N];
        char id[16];   /* fits any int: -O1 warns otherwise */
        for (int i = 0; i < N; i++) {
            snprintf(id, sizeof id, "r%d", i);
            r[i].s = mk(id, g, 0, 1, 0, 0);
        }
        uint64_t t = 0;
        for (; t <= 4 * P; t += P) {
            for (int i = 0; i < N; i++) {
                uint64_t w = rnd(3) ? rnd(5) : 0;
                r[i].me = (fq_share_local){.weight = w, .queued_runs = w ? 1 + rnd(40) : 0,
                                           .runs = 0};
            }
            period(r, N, t);
        }
        for (int i = 0; i < N; i++)     /* the same beats everywhere */
            fq_share_tick(&r[i].lim, NULL, r[i].s, &r[i].me, t - P);
        uint64_t sum = 0, wsum = 0, demand = 0;
        for (int i = 0; i < N; i++) {
            sum += r[i].lim.share_runs;
            wsum += r[i].me.weight;
            demand += r[i].me.queued_runs;
            /* an idle replica holds nothing here: the reserve at most */
            assert_true(r[i].lim.runs <= r[i].lim.share_runs + !r[i].me.weight);
            if (!r[i].me.weight)
                assert_int_equal(r[i].lim.share_runs, 0);
        }
        if (wsum)
            assert_int_equal(sum, g);
        if (demand >= g) {
            for (int i = 0; i < N; i++)
                if (r[i].me.weight)
                    assert_true(r[i].lim.share_runs <= r[i].me.queued_runs);
        }
        destroy(r, N);
    }
}

/* ---- the heartbeat's codec ---------------------------------------------- */

static void test_beat_round_trip(void **state)
{
    (void)state;
    fq_share_beat b = {.id = "host-1:4242:17", .weight = 1000000000000ull,
                       .queued_runs = 12, .queued_tokens = 34000, .runs = 7,
                       .tokens = 7000, .borrowed_runs = 1, .borrowed_tokens = 1000}, c;
    char buf[FQ_SHARE_BEAT_MAX_BYTES], err[256];
    size_t n = fq_share_beat_format(buf, sizeof buf, &b);
    assert_true(n > 0 && n < 300);
    assert_int_equal(fq_share_beat_parse(&c, buf, n, err, sizeof err), FQ_OK);
    assert_string_equal(b.id, c.id);
    assert_true(b.weight == c.weight && b.queued_runs == c.queued_runs &&
                b.queued_tokens == c.queued_tokens && b.runs == c.runs &&
                b.tokens == c.tokens && b.borrowed_runs == c.borrowed_runs &&
                b.borrowed_tokens == c.borrowed_tokens);
    assert_int_equal(fq_share_beat_format(buf, 20, &b), 0);
}

static void refused(const char *body, const char *why)
{
    fq_share_beat b;
    char err[256] = "";
    assert_int_equal(fq_share_beat_parse(&b, body, strlen(body), err, sizeof err), FQ_EINVAL);
    if (!strstr(err, why))
        fail_msg("%s: expected \"%s\" in \"%s\"", body, why, err);
    assert_int_equal(b.weight, 0);
    assert_int_equal(b.id[0], 0);
}

#define FULL "\"weight\":1,\"queued_runs\":0,\"queued_tokens\":0,\"runs\":2,\"tokens\":9," \
             "\"borrowed_runs\":0,\"borrowed_tokens\":0"

static void test_beat_refusals(void **state)
{
    (void)state;
    refused("", "not a JSON object");
    refused("[1]", "not a JSON object");
    refused("{\"id\":\"a\"," FULL "} x", "data follows");
    refused("{" FULL "}", "id: missing");
    refused("{\"id\":\"a b\"," FULL "}", "id: has a byte");
    refused("{\"id\":\"\"," FULL "}", "id: is empty");
    refused("{\"id\":7," FULL "}", "id: must be a string");
    refused("{\"id\":null," FULL "}", "id: missing");
    refused("{\"id\":\"a\",\"weight\":1}", "queued_runs: missing");
    refused("{\"id\":\"a\"," FULL ",\"extra\":1}", "a field other than");
    refused("{\"id\":\"a\",\"id\":\"b\"," FULL "}", "given twice");
    refused("{\"id\":\"a\",\"weight\":-1,\"queued_runs\":0,\"queued_tokens\":0,\"runs\":2,"
            "\"tokens\":9,\"borrowed_runs\":0,\"borrowed_tokens\":0}", "weight: must be");
    refused("{\"id\":\"a\",\"weight\":1.5,\"queued_runs\":0,\"queued_tokens\":0,\"runs\":2,"
            "\"tokens\":9,\"borrowed_runs\":0,\"borrowed_tokens\":0}", "weight: must be");
    refused("{\"id\":\"a\",\"weight\":1e16,\"queued_runs\":0,\"queued_tokens\":0,\"runs\":2,"
            "\"tokens\":9,\"borrowed_runs\":0,\"borrowed_tokens\":0}", "weight: must be");
    refused("{\"id\":\"a\",\"weight\":1,\"queued_runs\":0,\"queued_tokens\":0,"
            "\"runs\":4294967296,\"tokens\":9,\"borrowed_runs\":0,\"borrowed_tokens\":0}",
            "runs: must be");
    refused("{\"id\":\"a\",\"weight\":1,\"queued_runs\":0,\"queued_tokens\":0,\"runs\":2,"
            "\"tokens\":9,\"borrowed_runs\":3,\"borrowed_tokens\":0}", "borrows more");
    refused("{\"id\":\"a\",\"weight\":\"1\",\"queued_runs\":0,\"queued_tokens\":0,\"runs\":2,"
            "\"tokens\":9,\"borrowed_runs\":0,\"borrowed_tokens\":0}", "weight: must be a number");
    char big[FQ_SHARE_BEAT_MAX_BYTES + 2];
    memset(big, ' ', sizeof big - 1);
    big[0] = '{';
    big[sizeof big - 1] = 0;
    refused(big, "at most 1024");
}

/* Virtual milliseconds from..to: each millisecond, every replica whose
 * beat is due (fq_share_due) publishes it and every replica hears it;
 * then each takes in what it heard (a tick without a beat), as the proxy
 * does in the same turn. Returns the beats published by r[i], added to
 * beats[i]. */
static void run_ms(rep *r, size_t n, uint64_t from, uint64_t to, uint64_t *beats)
{
    for (uint64_t t = from; t < to; t++) {
        bool heard = false;
        for (size_t i = 0; i < n; i++) {
            if (!fq_share_due(r[i].s, r[i].me.weight, t))
                continue;
            fq_share_tick(&r[i].lim, &r[i].beat, r[i].s, &r[i].me, t);
            beats[i]++;
            heard = true;
            for (size_t j = 0; j < n; j++)
                assert_int_equal(fq_share_heard(r[j].s, &r[i].beat, t), FQ_OK);
        }
        for (size_t i = 0; heard && i < n; i++)
            fq_share_tick(&r[i].lim, NULL, r[i].s, &r[i].me, t);
    }
}

/* An idle replica whose first tenant arrives tells the others within a
 * quarter period, not at its next periodic beat, and the flooding replica
 * gives way as soon as it hears it (issue 16 point 4: the small tenant's
 * first wait was about 4 periods longer than behind one proxy). With no
 * change, the beats stay one a period. */
static void test_first_tenant_is_told_early(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(1, 10, 490)},
                {.s = mk("b", 10, 0, 1, 0, 0), .me = backlog(0, 0, 0)}};
    uint64_t beats[2] = {0, 0};
    run_ms(r, 2, 0, 901, beats);
    assert_int_equal(beats[0], 10);    /* steady: one beat a period */
    assert_int_equal(beats[1], 10);
    assert_int_equal(r[0].lim.runs, 10);   /* a floods the whole window */
    /* b's first tenants arrive a millisecond after b's periodic beat */
    uint64_t t = 901;
    r[1].me = backlog(1, 0, 50);
    uint64_t told = 0;
    for (uint64_t u = t; u < t + P && !told; u++) {
        run_ms(r, 2, u, u + 1, beats);
        if (r[0].lim.runs <= 5)
            told = u;
    }
    assert_true(told);
    assert_true(told - t <= P / 4);
    assert_int_equal(r[0].lim.share_runs, 5);
    assert_int_equal(r[1].lim.share_runs, 5);
    destroy(r, 2);
}

/* A tenant flapping between backlogged and idle every millisecond makes
 * at most one beat per quarter period: 40 a second, not 1,000. */
static void test_flapping_tenant_beats_bounded(void **state)
{
    (void)state;
    rep r[2] = {{.s = mk("a", 10, 0, 1, 0, 0), .me = backlog(1, 5, 100)},
                {.s = mk("b", 10, 0, 1, 0, 0), .me = backlog(0, 0, 0)}};
    uint64_t beats[2] = {0, 0};
    run_ms(r, 2, 0, 500, beats);
    beats[0] = beats[1] = 0;
    for (uint64_t t = 500; t < 1500; t++) {
        r[1].me = t % 2 ? backlog(1, 0, 1) : backlog(0, 0, 0);
        run_ms(r, 2, t, t + 1, beats);
    }
    assert_true(beats[1] <= 1000 / (P / 4));
    assert_true(beats[1] > 1000 / P);      /* early beats did happen */
    assert_int_equal(beats[0], 1000 / P);  /* a's own weight never changed */
    destroy(r, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_refuses_bad_ids_and_period),
        cmocka_unit_test(test_alone_starts_small_then_takes_the_window),
        cmocka_unit_test(test_alone_has_the_whole_window_even_idle),
        cmocka_unit_test(test_unlimited_dimension_is_not_split),
        cmocka_unit_test(test_shares_follow_backlogged_weight),
        cmocka_unit_test(test_shares_are_capped_by_demand),
        cmocka_unit_test(test_rounds_spread_the_remainder),
        cmocka_unit_test(test_newcomer_borrows_the_reserve_while_the_holder_drains),
        cmocka_unit_test(test_reserve_held_by_another_is_not_borrowed),
        cmocka_unit_test(test_silent_peer_keeps_its_share_until_forgotten),
        cmocka_unit_test(test_deaf_replica_never_takes_the_whole_window),
        cmocka_unit_test(test_borrowed_past_the_reserve_not_believed),
        cmocka_unit_test(test_peer_table_is_bounded),
        cmocka_unit_test(test_random_shares_add_up),
        cmocka_unit_test(test_beat_round_trip),
        cmocka_unit_test(test_beat_refusals),
        cmocka_unit_test(test_first_tenant_is_told_early),
        cmocka_unit_test(test_flapping_tenant_beats_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
