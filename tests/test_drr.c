/* test_drr.c -- the DRR scheduler in virtual time: fairness, metering, reconciliation, caps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "drr.h"

#define Q 1000

/* A small deterministic PRNG (splitmix64), so every run is the same. */
static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static uint64_t rnd_in(uint64_t lo, uint64_t hi) { return lo + rnd() % (hi - lo + 1); }

/* ---- harness ----------------------------------------------------------- */

static uint64_t next_id = 1;

static fq_sched *mk_opts(const fq_sched_opts *o)
{
    fq_sched *s = NULL;
    assert_int_equal(fq_sched_create(&s, o), FQ_OK);
    next_id = 1;
    return s;
}

static fq_sched *mk(uint32_t max_in_flight, uint64_t max_tokens, uint64_t timeout)
{
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .max_in_flight = max_in_flight,
                       .max_in_flight_tokens = max_tokens, .run_timeout = timeout,
                       .max_expired = 16};
    return mk_opts(&o);
}

static fq_tenant *ten(fq_sched *s, const char *id, uint32_t weight, uint32_t cap, uint32_t pending)
{
    /* sub-tenants as many as the scheduler allows (none without) */
    fq_tenant_policy p = {.weight = weight, .max_in_flight = cap, .max_pending = pending,
                          .max_subtenants = UINT32_MAX};
    fq_tenant *t = NULL;
    assert_int_equal(fq_sched_tenant(&t, s, id, strlen(id), &p), FQ_OK);
    return t;
}

/* Tenant prefix+i (t0, t1, ...), one of many. */
static fq_tenant *ten_i(fq_sched *s, const char *prefix, int i, uint32_t weight, uint32_t cap)
{
    char id[16];
    snprintf(id, sizeof id, "%s%d", prefix, i);
    return ten(s, id, weight, cap, 0);
}

static uint64_t enq(fq_sched *s, fq_tenant *t, uint32_t est)
{
    uint64_t id = next_id++;
    assert_int_equal(fq_sched_enqueue(NULL, s, t, id, est, NULL, 0), FQ_OK);
    return id;
}

static void done(fq_sched *s, fq_run *r, uint64_t actual)
{
    assert_int_equal(fq_sched_complete(NULL, s, r->id, actual), FQ_OK);
}

static fq_tenant_info info(fq_tenant *t)
{
    fq_tenant_info i;
    fq_tenant_info_get(t, &i);
    return i;
}

static double visits_per_dispatch(fq_sched *s)
{
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    return (double)(st.visits + st.wakeups) / (double)st.dispatched;
}

/* ---- the design card's Tuesday ---------------------------------------- */

static void test_card_scenario(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "A", 1, 0, 0), *b = ten(s, "B", 1, 0, 0), *c = ten(s, "C", 1, 0, 0);
    for (int i = 0; i < 900; i++)
        enq(s, a, Q);
    enq(s, b, Q);
    enq(s, c, Q);
    int pos_b = -1, pos_c = -1;
    for (int i = 0; i < 902; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        assert_non_null(r);
        if (r->tenant == b)
            pos_b = i;
        if (r->tenant == c)
            pos_c = i;
        done(s, r, r->est);
    }
    /* first round: A, B, C each send one quantum's worth */
    assert_in_range(pos_b, 0, 2);
    assert_in_range(pos_c, 0, 2);
    assert_null(fq_sched_dispatch(s, 0));
    fq_sched_destroy(s);
}

/* ---- token metering and weights ---------------------------------------- */

/* Two always-backlogged tenants; returns tokens served to each after n
 * dispatches. */
static void backlogged_pair(uint32_t wa, uint32_t ca, uint32_t wb, uint32_t cb, int n,
                            uint64_t *ta, uint64_t *tb, uint64_t *ra, uint64_t *rb)
{
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", wa, 0, 0), *b = ten(s, "b", wb, 0, 0);
    *ta = *tb = *ra = *rb = 0;
    for (int i = 0; i < 4; i++) {
        enq(s, a, ca);
        enq(s, b, cb);
    }
    for (int i = 0; i < n; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        assert_non_null(r);
        if (r->tenant == a) {
            *ta += r->est, (*ra)++;
            enq(s, a, ca);
        } else {
            *tb += r->est, (*rb)++;
            enq(s, b, cb);
        }
        done(s, r, r->est);
    }
    assert_true(visits_per_dispatch(s) <= 2.0);
    fq_sched_destroy(s);
}

static void test_token_metering_not_request_counting(void **state)
{
    (void)state;
    uint64_t ta, tb, ra, rb;
    backlogged_pair(1, 100, 1, 1000, 20000, &ta, &tb, &ra, &rb);
    /* equal token shares within the DRR bound: 3Q + 2M */
    uint64_t diff = ta > tb ? ta - tb : tb - ta;
    assert_true(diff <= 3 * Q + 2 * 1000);
    /* and about ten times the runs for the cheap tenant */
    assert_true(ra > 9 * rb && ra < 11 * rb);
}

static void test_weights_give_token_shares(void **state)
{
    (void)state;
    uint64_t ta, tb, ra, rb;
    backlogged_pair(3, 700, 1, 700, 20000, &ta, &tb, &ra, &rb);
    /* S_a/3 and S_b/1 within the bound */
    int64_t d = (int64_t)(ta / 3) - (int64_t)tb;
    assert_true(llabs(d) <= 3 * Q + 700 + 700);
    double ratio = (double)ta / (double)tb;
    assert_true(ratio > 2.97 && ratio < 3.03);
}

/* ---- the fairness bound over a long random run ------------------------- */

#define NT 8

/* For every pair of tenants continuously backlogged over an interval, the
 * weighted service S_i/w_i - S_j/w_j stays within a bound.
 *
 * Derivation for this form of DRR (send while deficit > 0, then the quantum
 * w*Q is granted once per round; a debtor's grants for the rounds it sits
 * out in the heap are handed over when it wakes, so counting them as
 * granted per round is exact): over an interval in which tenant i is
 * backlogged, S_i = G_i - (D_i(end) - D_i(start)), with G_i the quanta
 * granted and D_i the deficit counting those pending grants. A tenant only
 * sends while D_i > 0 and a run costs at most M, so D_i > -M; it is granted
 * only when D_i <= 0, so D_i <= w_i Q. Both tenants receive one grant per
 * round, so at any instant their grant counts differ by at most one:
 * |G_i/w_i - G_j/w_j| <= Q. Hence
 *   |S_i/w_i - S_j/w_j| <= Q + (M + w_i Q)/w_i + (M + w_j Q)/w_j
 *                       = 3Q + M/w_i + M/w_j,
 * which is the safe 3Q + 2M with weights of 1, and tighter with larger
 * weights. That is what is asserted, pair by pair. */
static void test_random_fairness_bound(void **state)
{
    (void)state;
    rng_state = 42;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *t[NT];
    uint32_t w[NT];
    uint32_t maxc = 5 * Q;
    for (int i = 0; i < NT; i++) {
        w[i] = (uint32_t)rnd_in(1, 4);
        t[i] = ten_i(s, "t", i, w[i], 0);
    }
    uint64_t served[NT] = {0};
    /* base[i][j]: served[i] when the pair's common backlog began; -1 none */
    int64_t base_i[NT][NT], base_j[NT][NT];
    for (int i = 0; i < NT; i++)
        for (int j = 0; j < NT; j++)
            base_i[i][j] = base_j[i][j] = -1;
    double worst = 0;
    uint64_t checks = 0;
    for (int step = 0; step < 200000; step++) {
        /* arrivals: bursts and idles, mixed costs from 1 to 5 quanta */
        int k = (int)rnd_in(0, NT - 1);
        if (rnd() % 3 == 0) {
            int burst = (int)rnd_in(1, 6);
            for (int b = 0; b < burst; b++)
                enq(s, t[k], (uint32_t)rnd_in(1, maxc));
        }
        fq_run *r = fq_sched_dispatch(s, 0);
        if (r) {
            for (int i = 0; i < NT; i++)
                if (r->tenant == t[i])
                    served[i] += r->est;
            done(s, r, r->est);
        }
        for (int i = 0; i < NT; i++) {
            for (int j = i + 1; j < NT; j++) {
                int both = info(t[i]).queued > 0 && info(t[j]).queued > 0;
                if (!both) {
                    base_i[i][j] = -1;
                    continue;
                }
                if (base_i[i][j] < 0) {
                    /* the pair became backlogged; the run just sent, if it
                     * was one of theirs, belongs to the interval */
                    base_i[i][j] = (int64_t)served[i];
                    base_j[i][j] = (int64_t)served[j];
                    if (r && r->tenant == t[i])
                        base_i[i][j] -= r->est;
                    if (r && r->tenant == t[j])
                        base_j[i][j] -= r->est;
                }
                double si = (double)((int64_t)served[i] - base_i[i][j]) / w[i];
                double sj = (double)((int64_t)served[j] - base_j[i][j]) / w[j];
                double gap = si > sj ? si - sj : sj - si;
                double bound = 3.0 * Q + (double)maxc / w[i] + (double)maxc / w[j];
                if (gap / bound > worst)
                    worst = gap / bound;
                checks++;
                if (gap > bound)
                    fail_msg("pair %d,%d gap %.0f > bound %.0f at step %d", i, j, gap, bound, step);
            }
        }
    }
    assert_true(checks > 100000);
    print_message("fairness: worst gap was %.2f of the bound over %llu checks\n", worst,
                  (unsigned long long)checks);
    assert_true(visits_per_dispatch(s) <= 4.0);
    fq_sched_destroy(s);
}

/* ---- idleness ----------------------------------------------------------- */

static void test_idle_return_gains_at_most_one_quantum(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    for (int i = 0; i < 10; i++)
        enq(s, a, 100);
    /* b sends one small run and goes idle with most of a quantum unspent */
    enq(s, b, 10);
    for (int i = 0; i < 20000; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        assert_non_null(r);
        if (r->tenant == a)
            enq(s, a, 100);
        done(s, r, r->est);
    }
    fq_tenant_info ib = info(b);
    assert_int_equal(ib.state, FQ_T_IDLE);
    assert_int_equal(ib.deficit, 0);    /* credit dropped, not banked */
    /* b returns with a burst after "an hour" of a's traffic */
    for (int i = 0; i < 100; i++)
        enq(s, b, 100);
    assert_true(info(b).deficit <= Q);
    uint64_t sa = 0, sb = 0;
    int64_t worst = 0;
    for (int i = 0; i < 150; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        if (r->tenant == a) {
            sa += r->est;
            enq(s, a, 100);
        } else {
            sb += r->est;
        }
        done(s, r, r->est);
        if ((int64_t)(sb - sa) > worst)
            worst = (int64_t)(sb - sa);
    }
    /* its advantage over the backlogged peer never exceeds one quantum */
    assert_true(worst <= Q);
    fq_sched_destroy(s);
}

static void test_debt_survives_idle_and_duplicates_change_nothing(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    uint64_t id = enq(s, a, 100);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id);
    assert_int_equal(info(a).state, FQ_T_IDLE);
    assert_int_equal(info(a).deficit, 0);       /* 1000 - 100 dropped at idle */
    fq_done d;
    assert_int_equal(fq_sched_complete(&d, s, id, 5100), FQ_OK);
    assert_int_equal(d.est, 100);
    assert_false(d.expired);
    assert_int_equal(info(a).deficit, -5000);   /* the overrun is debt */
    assert_int_equal(fq_sched_complete(&d, s, id, 5100), FQ_ENOTFOUND);
    assert_int_equal(fq_sched_complete(&d, s, id, 1), FQ_ENOTFOUND);
    assert_int_equal(info(a).deficit, -5000);
    assert_int_equal(info(a).actual_tokens, 5100);
    /* back with work: a waits out its debt while b is served */
    enq(s, a, 100);
    for (int i = 0; i < 10; i++)
        enq(s, b, 1000);
    assert_int_equal(info(a).state, FQ_T_WAITING);
    int b_first = 0;
    for (fq_run *x; (x = fq_sched_dispatch(s, 0)) && x->tenant == b;)
        b_first++, done(s, x, x->est);
    assert_int_equal(b_first, 6);   /* six quanta repay 5000 and turn positive */
    fq_sched_destroy(s);
}

static void test_refund_to_idle_tenant_is_not_banked(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t id1 = enq(s, a, 3000);
    uint64_t id2 = enq(s, a, 3000);
    fq_run *r1 = fq_sched_dispatch(s, 0), *r2;
    assert_int_equal(r1->id, id1);
    assert_int_equal(info(a).deficit, -2000);
    r2 = fq_sched_dispatch(s, 0);      /* debt skipped in one step */
    assert_int_equal(r2->id, id2);
    assert_int_equal(info(a).state, FQ_T_IDLE);
    assert_int_equal(info(a).deficit, -2000);  /* 1000 +2000 granted, -3000 */
    assert_int_equal(fq_sched_complete(NULL, s, id1, 1000), FQ_OK);  /* +2000 */
    assert_int_equal(info(a).deficit, 0);
    assert_int_equal(fq_sched_complete(NULL, s, id2, 0), FQ_OK);     /* +3000 */
    assert_int_equal(info(a).deficit, 0);
    fq_sched_destroy(s);
}

/* ---- reconciliation against a chronic over-runner ---------------------- */

/* a declares 100 and spends 300; b declares 100 and spends 100. Both stay
 * backlogged; workers complete runs in dispatch order through a window of 4. */
static void over_runner(int reconcile, uint64_t *act_a, uint64_t *act_b)
{
    fq_sched *s = mk(4, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    for (int i = 0; i < 8; i++)
        enq(s, a, 100), enq(s, b, 100);
    uint64_t ring[4];
    int n = 0;
    *act_a = *act_b = 0;
    for (int step = 0; step < 40000; step++) {
        fq_run *r;
        while ((r = fq_sched_dispatch(s, 0)))
            ring[n++] = r->id;
        /* the oldest in flight completes */
        fq_run *o = fq_sched_run(s, ring[0]);
        int is_a = o->tenant == a;
        uint64_t actual = is_a ? 300 : 100;
        *(is_a ? act_a : act_b) += actual;
        assert_int_equal(fq_sched_complete(NULL, s, ring[0], reconcile ? actual : o->est), FQ_OK);
        memmove(ring, ring + 1, --n * sizeof(ring[0]));
        enq(s, is_a ? a : b, 100);
    }
    fq_sched_destroy(s);
}

static void test_reconciliation_evens_actual_spend(void **state)
{
    (void)state;
    uint64_t a, b;
    over_runner(1, &a, &b);
    double ratio = (double)a / (double)b;
    assert_true(ratio > 0.95 && ratio < 1.05);
    over_runner(0, &a, &b);
    ratio = (double)a / (double)b;
    assert_true(ratio > 2.85 && ratio < 3.15);
}

/* ---- limits --------------------------------------------------------------- */

static void test_max_pending_refuses_whole(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 3);
    for (int i = 0; i < 3; i++)
        enq(s, a, 10);
    assert_int_equal(fq_sched_enqueue(NULL, s, a, 99, 10, NULL, 0), FQ_EFULL);
    assert_int_equal(info(a).queued, 3);
    assert_int_equal(info(a).queued_tokens, 30);
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.queued, 3);
    fq_sched_destroy(s);
}

static void test_tenant_cap_leaves_rotation(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 2, 0), *b = ten(s, "b", 1, 0, 0);
    for (int i = 0; i < 50; i++)
        enq(s, a, 100);
    fq_run *r1 = fq_sched_dispatch(s, 0), *r2 = fq_sched_dispatch(s, 0);
    assert_ptr_equal(r1->tenant, a);
    assert_ptr_equal(r2->tenant, a);
    assert_int_equal(info(a).state, FQ_T_CAPPED);
    int64_t d = info(a).deficit;
    assert_null(fq_sched_dispatch(s, 0));       /* only a has work, and it is capped */
    /* b is served alone while a is capped; a is not visited nor granted */
    fq_sched_stats st0, st1;
    for (int i = 0; i < 1000; i++)
        enq(s, b, 100);
    fq_sched_stats_get(s, &st0);
    for (int i = 0; i < 1000; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        assert_ptr_equal(r->tenant, b);
        done(s, r, r->est);
    }
    fq_sched_stats_get(s, &st1);
    assert_true(st1.visits - st0.visits <= 1000);
    assert_int_equal(info(a).deficit, d);
    /* a completion frees a slot: a rejoins */
    done(s, r1, 100);
    assert_int_equal(info(a).state, FQ_T_ACTIVE);
    fq_run *r3 = fq_sched_dispatch(s, 0);
    assert_ptr_equal(r3->tenant, a);
    assert_int_equal(info(a).in_flight, 2);
    fq_sched_destroy(s);
}

/* A burstable cap: max_in_flight binds only while another tenant has
 * queued runs, burst_in_flight otherwise; slots come back as runs
 * complete, none is taken back. */
static void test_burst_cap_binds_only_under_contention(void **state)
{
    (void)state;
    fq_sched *s = mk(10, 0, 0);
    fq_tenant_policy pa = {.weight = 1, .max_in_flight = 2, .burst_in_flight = 8};
    fq_tenant *a = NULL, *b = ten(s, "b", 1, 0, 0);
    assert_int_equal(fq_sched_tenant(&a, s, "a", 1, &pa), FQ_OK);
    fq_run *ra[8];
    for (int i = 0; i < 20; i++)
        enq(s, a, 100);
    /* alone: a runs up to its burst, not its cap, and then waits capped */
    for (int i = 0; i < 8; i++) {
        ra[i] = fq_sched_dispatch(s, 0);
        assert_ptr_equal(ra[i]->tenant, a);
    }
    assert_null(fq_sched_dispatch(s, 0));
    assert_int_equal(info(a).state, FQ_T_CAPPED);
    /* b arrives: a keeps its 8 (no preemption), b takes the free slots */
    fq_run *rb[5];
    for (int i = 0; i < 5; i++)
        enq(s, b, 100);
    for (int i = 0; i < 2; i++)
        assert_ptr_equal((rb[i] = fq_sched_dispatch(s, 0))->tenant, b);
    assert_null(fq_sched_dispatch(s, 0));       /* the window is full */
    assert_int_equal(info(a).in_flight, 8);
    /* a's completions give its slots to b while b has queued runs */
    for (int i = 0; i < 3; i++) {
        done(s, ra[i], 100);
        assert_int_equal(info(a).state, FQ_T_CAPPED);
        assert_ptr_equal((rb[2 + i] = fq_sched_dispatch(s, 0))->tenant, b);
    }
    /* b's queue is empty: a may burst again into the slots that free */
    assert_int_equal(info(a).state, FQ_T_ACTIVE);
    done(s, rb[0], 100);
    assert_ptr_equal(fq_sched_dispatch(s, 0)->tenant, a);
    assert_int_equal(info(a).in_flight, 6);
    /* b queues again while a is at 6: a is capped at its next visit and
     * comes back only below max_in_flight while b still has work */
    for (int i = 0; i < 20; i++)
        enq(s, b, 100);
    for (int i = 1; i < 5; i++)
        done(s, rb[i], 100);
    for (int i = 0; i < 4; i++)
        assert_ptr_equal(fq_sched_dispatch(s, 0)->tenant, b);
    assert_int_equal(info(a).state, FQ_T_CAPPED);
    assert_int_equal(info(a).in_flight, 6);
    fq_sched_destroy(s);
}

/* A tenant that finds another queued never bursts past max_in_flight. */
static void test_burst_cap_not_when_others_queue(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant_policy pa = {.weight = 1, .max_in_flight = 2, .burst_in_flight = 8};
    fq_tenant *a = NULL, *b = ten(s, "b", 1, 1, 0);
    assert_int_equal(fq_sched_tenant(&a, s, "a", 1, &pa), FQ_OK);
    for (int i = 0; i < 10; i++) {
        enq(s, a, 100);
        enq(s, b, 100);
    }
    int na = 0, nb = 0;
    for (fq_run *r; (r = fq_sched_dispatch(s, 0));)
        r->tenant == a ? na++ : nb++;
    assert_int_equal(na, 2);
    assert_int_equal(nb, 1);
    fq_sched_destroy(s);
}

/* A token rate: a minute's tokens of burst, then one run per
 * tokens / rate; a tenant over its rate is parked by time, costs no visits
 * while it waits, is corrected by reconciliation and is never refused. */
static void test_token_rate_parks_by_time(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);      /* time in ms: a minute is 60,000 */
    fq_tenant_policy pa = {.weight = 1, .tokens_per_minute = 6000};
    fq_tenant *a = NULL, *b = ten(s, "b", 1, 0, 0);
    assert_int_equal(fq_sched_tenant(&a, s, "a", 1, &pa), FQ_OK);
    for (int i = 0; i < 20; i++)
        enq(s, a, 1000);
    /* a minute's 6,000 tokens of burst, and the run that crosses it */
    fq_run *last = NULL;
    for (int i = 0; i < 7; i++) {
        last = fq_sched_dispatch(s, 0);
        assert_ptr_equal(last->tenant, a);
    }
    assert_null(fq_sched_dispatch(s, 0));
    assert_int_equal(info(a).state, FQ_T_PARKED);
    assert_int_equal(info(a).rate_until, 10000);     /* 1,000 tokens at 100 a second */
    assert_int_equal(fq_sched_next_unpark(s), 10000);
    /* waiting costs no visits; b is served meanwhile */
    fq_sched_stats st0, st1;
    fq_sched_stats_get(s, &st0);
    assert_null(fq_sched_dispatch(s, 5000));
    enq(s, b, 1000);
    assert_ptr_equal(fq_sched_dispatch(s, 5000)->tenant, b);
    assert_null(fq_sched_dispatch(s, 9999));
    fq_sched_stats_get(s, &st1);
    assert_int_equal(st1.visits - st0.visits, 1);
    /* the admission estimate counts the rate: 13 runs queued before a new one */
    assert_int_equal(fq_sched_rate_wait(s, a, 1000, 5000), 5000 + 13 * 10000);
    /* its time comes: one run, then parked again */
    assert_ptr_equal(fq_sched_dispatch(s, 10000)->tenant, a);
    assert_null(fq_sched_dispatch(s, 10000));
    assert_int_equal(info(a).rate_until, 20000);
    /* an overrun found by reconciliation pushes its time back: 2,000
     * tokens more at 100 a second */
    done(s, last, 3000);
    assert_int_equal(info(a).rate_until, 40000);
    assert_null(fq_sched_dispatch(s, 39999));
    assert_ptr_equal(fq_sched_dispatch(s, 40000)->tenant, a);
    /* never refused for its rate */
    assert_int_equal(fq_sched_enqueue(NULL, s, a, next_id++, 1000, NULL, 40000), FQ_OK);
    fq_sched_destroy(s);
}

/* Without a rate nothing changes: no parking, no rate time. */
static void test_token_rate_off_changes_nothing(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    for (int i = 0; i < 100; i++)
        enq(s, a, 1000);
    for (int i = 0; i < 100; i++)
        assert_non_null(fq_sched_dispatch(s, 0));
    assert_int_equal(info(a).rate_until, 0);
    assert_int_equal(fq_sched_rate_wait(s, a, 1000, 0), 0);
    assert_int_equal(fq_sched_next_unpark(s), UINT64_MAX);
    fq_sched_destroy(s);
}

/* A priced completion: its cost is reconciled, its tokens counted as
 * reported; the plain completion is both. */
static void test_priced_completion_reconciles_cost(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    enq(s, a, 500);
    enq(s, a, 500);
    fq_run *r1 = fq_sched_dispatch(s, 0), *r2 = fq_sched_dispatch(s, 0);
    assert_int_equal(info(a).deficit, 0);       /* 1,000 granted, 1,000 charged */
    assert_int_equal(fq_sched_complete_priced(NULL, s, r1->id, 500, 2000), FQ_OK);
    assert_int_equal(info(a).deficit, -1500);
    assert_int_equal(info(a).actual_tokens, 500);
    assert_int_equal(info(a).priced_tokens, 2000);
    done(s, r2, 500);
    assert_int_equal(info(a).deficit, -1500);
    assert_int_equal(info(a).actual_tokens, 1000);
    assert_int_equal(info(a).priced_tokens, 2500);
    fq_tenant_reconcile_priced(s, a, 500, 100, 900);
    assert_int_equal(info(a).deficit, -1900);
    assert_int_equal(info(a).actual_tokens, 1100);
    assert_int_equal(info(a).priced_tokens, 3400);
    fq_sched_destroy(s);
}

static void test_window_runs_and_tokens(void **state)
{
    (void)state;
    fq_sched *s = mk(3, 1000, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    for (int i = 0; i < 6; i++)
        enq(s, a, 300);
    fq_run *r[4];
    for (int i = 0; i < 3; i++)
        assert_non_null(r[i] = fq_sched_dispatch(s, 0));
    assert_null(fq_sched_dispatch(s, 0));       /* 3 runs, 900 tokens: full */
    done(s, r[0], 300);
    assert_non_null(r[3] = fq_sched_dispatch(s, 0));
    assert_null(fq_sched_dispatch(s, 0));
    fq_sched_destroy(s);

    /* a run larger than the whole token window goes alone once it is empty */
    s = mk(10, 1000, 0);
    a = ten(s, "a", 1, 0, 0);
    enq(s, a, 400);
    enq(s, a, 5000);
    enq(s, a, 400);
    fq_run *x = fq_sched_dispatch(s, 0);
    assert_int_equal(x->est, 400);
    assert_null(fq_sched_dispatch(s, 0));       /* 5000 waits for an empty window */
    done(s, x, 400);
    fq_run *big = fq_sched_dispatch(s, 0);
    assert_int_equal(big->est, 5000);
    assert_null(fq_sched_dispatch(s, 0));
    done(s, big, 5000);
    assert_non_null(fq_sched_dispatch(s, 0));
    fq_sched_destroy(s);

    /* charges are capped at max_est_tokens */
    s = mk_opts(&(fq_sched_opts){.quantum = Q, .max_est_tokens = 2000});
    a = ten(s, "a", 1, 0, 0);
    fq_run *c;
    assert_int_equal(fq_sched_enqueue(&c, s, a, 1, 4000000000u, NULL, 0), FQ_OK);
    assert_int_equal(c->est, 2000);
    fq_sched_destroy(s);
}

static void test_lease_expiry_and_late_completion(void **state)
{
    (void)state;
    fq_sched *s = mk(1, 0, 100);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t id1 = enq(s, a, 500);
    enq(s, a, 500);
    fq_run *r = fq_sched_dispatch(s, 10);
    assert_int_equal(r->id, id1);
    assert_int_equal(fq_sched_next_deadline(s), 110);
    assert_null(fq_sched_dispatch(s, 20));
    assert_int_equal(fq_sched_expire(s, 109, NULL, NULL), 0);
    assert_int_equal(fq_sched_expire(s, 110, NULL, NULL), 1);
    assert_int_equal(info(a).expired, 1);
    assert_int_equal(info(a).in_flight, 0);
    assert_non_null(fq_sched_dispatch(s, 111));  /* the slot is free */
    int64_t d = info(a).deficit;
    fq_done dn;
    assert_int_equal(fq_sched_complete(&dn, s, id1, 800), FQ_OK);
    assert_true(dn.expired);
    assert_int_equal(dn.est, 500);
    assert_int_equal(info(a).deficit, d - 300);  /* reconciled against its charge */
    assert_int_equal(info(a).in_flight, 1);      /* the other run's slot untouched */
    assert_int_equal(fq_sched_complete(&dn, s, id1, 800), FQ_ENOTFOUND);
    assert_int_equal(info(a).deficit, d - 300);
    fq_sched_destroy(s);
}

/* A tenant is forgotten only when it holds nothing: not while a run is
 * queued, in flight, or expired and awaiting its late completion, nor while
 * in debt. */
/* The order fq_sched_foreach visits 64 tenants in, as their indexes. */
static void seed_order_cb(void *arg, fq_tenant *t)
{
    fq_tenant_info i;
    fq_tenant_info_get(t, &i);
    char *order = arg;
    order[strlen(order)] = (char)(' ' + atoi(i.id + 1));
}

static void order_under_seed(uint64_t seed, char order[65])
{
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .seed = seed};
    fq_sched *s = mk_opts(&o);
    for (int i = 0; i < 64; i++)
        ten_i(s, "t", i, 1, 0);
    for (int i = 0; i < 64; i++) {
        char id[16];
        snprintf(id, sizeof id, "t%d", i);
        assert_non_null(fq_sched_find(s, id, strlen(id)));
    }
    memset(order, 0, 65);
    fq_sched_foreach(s, seed_order_cb, order);
    assert_int_equal(strlen(order), 64);
    fq_sched_destroy(s);
}

/* The seed keys the tenant table's hash (clients choose tenant ids, and must
 * not be able to choose ids that share a chain): another seed places the same
 * tenants otherwise, the same seed alike, and every tenant is found under any. */
static void test_seed_keys_the_tenant_table(void **state)
{
    (void)state;
    char a[65], b[65], c[65];
    order_under_seed(1, a);
    order_under_seed(1, b);
    order_under_seed(0x9e3779b97f4a7c15ULL, c);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
}

static void test_tenant_remove_only_when_it_holds_nothing(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 100);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t id = enq(s, a, 400);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_EEXIST);     /* queued */
    assert_non_null(fq_sched_dispatch(s, 0));
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_EEXIST);     /* in flight */
    assert_int_equal(fq_sched_expire(s, 100, NULL, NULL), 1);
    assert_int_equal(info(a).in_flight, 0);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_EEXIST);     /* expired */
    assert_int_equal(fq_sched_complete(NULL, s, id, 2000), FQ_OK);  /* late, over */
    assert_true(info(a).deficit < 0);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_EEXIST);     /* in debt */

    fq_tenant *b = ten(s, "b", 1, 0, 0);
    id = enq(s, b, 400);
    assert_non_null(fq_sched_dispatch(s, 200));
    assert_int_equal(fq_sched_complete(NULL, s, id, 400), FQ_OK);
    assert_int_equal(info(b).deficit, 0);      /* its credit dropped at idle */
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.tenants, 2);
    assert_int_equal(fq_sched_tenant_remove(s, b), FQ_OK);
    assert_null(fq_sched_find(s, "b", 1));
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.tenants, 1);
    /* The id comes back new. */
    b = ten(s, "b", 1, 0, 0);
    assert_int_equal(info(b).dispatched, 0);
    id = enq(s, b, 400);
    fq_run *r = fq_sched_dispatch(s, 300);
    assert_int_equal(r->id, id);

    /* An expired run evicted from memory no longer holds its tenant. */
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .run_timeout = 100,
                       .max_expired = 1};
    fq_sched *s2 = mk_opts(&o);
    fq_tenant *c = ten(s2, "c", 1, 0, 0), *d = ten(s2, "d", 1, 0, 0);
    enq(s2, c, 1000);
    assert_non_null(fq_sched_dispatch(s2, 0));
    assert_int_equal(fq_sched_expire(s2, 100, NULL, NULL), 1);
    enq(s2, d, 1000);
    assert_non_null(fq_sched_dispatch(s2, 100));
    assert_int_equal(fq_sched_expire(s2, 200, NULL, NULL), 1);  /* c's record evicted */
    assert_int_equal(fq_sched_tenant_remove(s2, c), FQ_OK);
    assert_int_equal(fq_sched_tenant_remove(s2, d), FQ_EEXIST);
    fq_sched_destroy(s2);
    fq_sched_destroy(s);
}

static void test_expired_records_are_bounded(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 10);         /* max_expired 16 */
    fq_tenant *a = ten(s, "a", 100, 0, 0);
    uint64_t first = 0;
    for (int i = 0; i < 40; i++) {
        uint64_t id = enq(s, a, 10);
        if (!first)
            first = id;
        assert_non_null(fq_sched_dispatch(s, 0));
    }
    assert_int_equal(fq_sched_expire(s, 10, NULL, NULL), 40);
    assert_null(fq_sched_run(s, first));        /* the oldest were forgotten */
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.expired_held, 16);      /* what the ledger reports as remembered */
    assert_int_equal(fq_sched_complete(NULL, s, first, 10), FQ_ENOTFOUND);
    assert_int_equal(fq_sched_complete(NULL, s, first + 39, 10), FQ_OK);
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.expired_held, 15);
    fq_sched_destroy(s);
}

/* What fq_sched_expire reported, in order. */
typedef struct expiries {
    uint64_t id[8];
    enum fq_expiry what[8];
    size_t n;
} expiries;

static void note_expiry(void *arg, const fq_run *r, enum fq_expiry what)
{
    expiries *e = arg;
    assert_true(e->n < 8);
    e->id[e->n] = r->id;
    e->what[e->n++] = what;
}

/* The caller hears of every eviction as of every expiry: by count, by age
 * (expired_keep after the lease's end), and of runs read back as expired,
 * which a late completion reconciles once like any expired run. */
static void test_evictions_are_reported(void **state)
{
    (void)state;
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .run_timeout = 100,
                       .max_expired = 2, .expired_keep = 50};
    fq_sched *s = mk_opts(&o);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t x = enq(s, a, 10), y = enq(s, a, 10), z = enq(s, a, 10);
    assert_non_null(fq_sched_dispatch(s, 0));
    assert_non_null(fq_sched_dispatch(s, 0));
    assert_non_null(fq_sched_dispatch(s, 20));
    expiries e = {0};
    assert_int_equal(fq_sched_expire(s, 120, note_expiry, &e), 3);
    /* Three expired, two remembered: the oldest is evicted at once. */
    assert_int_equal(e.n, 4);
    assert_int_equal(e.id[0], x);
    assert_int_equal(e.what[0], FQ_EXPIRY_LEASE);
    assert_int_equal(e.id[2], z);
    assert_int_equal(e.what[2], FQ_EXPIRY_LEASE);
    assert_int_equal(e.id[3], x);
    assert_int_equal(e.what[3], FQ_EXPIRY_EVICTED);
    assert_null(fq_sched_run(s, x));
    /* y's lease ended at 100: forgotten at 150; z's (120) at 170. */
    e.n = 0;
    assert_int_equal(fq_sched_expire(s, 149, note_expiry, &e), 0);
    assert_int_equal(e.n, 0);
    assert_int_equal(fq_sched_expire(s, 150, note_expiry, &e), 0);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.id[0], y);
    assert_int_equal(e.what[0], FQ_EXPIRY_EVICTED);
    /* A run read back as expired at 160 is reconciled once, late. */
    fq_run *r = NULL;
    assert_int_equal(fq_sched_adopt_expired(&r, s, a, 900, 10, NULL, 160), FQ_OK);
    assert_int_equal(fq_sched_adopt_expired(NULL, s, a, 900, 10, NULL, 160), FQ_EEXIST);
    assert_int_equal(r->state, FQ_RUN_EXPIRED);
    assert_int_equal(info(a).in_flight, 0);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_EEXIST);
    int64_t before = info(a).deficit;
    fq_done d;
    assert_int_equal(fq_sched_complete(&d, s, 900, 30), FQ_OK);
    assert_true(d.expired);
    assert_int_equal(info(a).deficit, before - 20);
    assert_int_equal(fq_sched_complete(NULL, s, 900, 30), FQ_ENOTFOUND);
    assert_int_equal(fq_sched_adopt_expired(NULL, s, a, 901, 10, NULL, 160), FQ_OK);
    e.n = 0;
    assert_int_equal(fq_sched_expire(s, 210, note_expiry, &e), 0);
    assert_int_equal(e.n, 2);
    assert_int_equal(e.id[0], z);
    assert_int_equal(e.id[1], 901);
    assert_int_equal(e.what[1], FQ_EXPIRY_EVICTED);
    assert_null(fq_sched_run(s, 901));
    fq_sched_destroy(s);
}

/* ---- large runs and list visits ---------------------------------------- */

static void test_huge_runs_starve_no_one(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    for (int i = 0; i < 3; i++) {
        enq(s, a, 50 * Q);
        enq(s, b, Q / 10);
    }
    uint64_t sa = 0, sb = 0;
    int gap = 0, worst_gap = 0;
    for (int i = 0; i < 100000; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        if (r->tenant == a) {
            sa += r->est, gap++;
            enq(s, a, 50 * Q);
        } else {
            sb += r->est, gap = 0;
            enq(s, b, Q / 10);
        }
        if (gap > worst_gap)
            worst_gap = gap;
        done(s, r, r->est);
    }
    assert_true(worst_gap <= 1);        /* b is never behind two huge runs */
    double ratio = (double)sa / (double)sb;
    assert_true(ratio > 0.9 && ratio < 1.1);
    assert_true(visits_per_dispatch(s) <= 4.0);
    fq_sched_destroy(s);
}

/* Many tenants, costs from 0.1 to 50 quanta so debts are staggered, some
 * capped; list visits (and heap wake-ups) per dispatch stay bounded. */
static void test_visits_per_dispatch_bounded(void **state)
{
    (void)state;
    rng_state = 7;
    fq_sched *s = mk(64, 0, 0);
    enum { N = 1000 };
    fq_tenant *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = ten_i(s, "t", i, (uint32_t)rnd_in(1, 5), i % 7 == 0 ? 1 : 0);
        for (int k = 0; k < 3; k++)
            enq(s, t[i], (uint32_t)rnd_in(Q / 10, 50 * Q));
    }
    uint64_t flight[64];
    int n = 0;
    for (int step = 0; step < 200000; step++) {
        fq_run *r;
        while ((r = fq_sched_dispatch(s, 0))) {
            flight[n++] = r->id;
            enq(s, r->tenant, (uint32_t)rnd_in(Q / 10, 50 * Q));
        }
        int k = (int)(rnd() % (uint64_t)n);
        assert_int_equal(fq_sched_complete(NULL, s, flight[k], rnd_in(Q / 10, 50 * Q)), FQ_OK);
        flight[k] = flight[--n];
    }
    double v = visits_per_dispatch(s);
    print_message("visits per dispatch (staggered debts, caps): %.3f\n", v);
    assert_true(v <= 4.0);
    fq_sched_destroy(s);
}

static void test_ratio_one_is_one_visit(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    enum { N = 100 };
    fq_tenant *t[N];
    for (int i = 0; i < N; i++) {
        t[i] = ten_i(s, "t", i, 1, 0);
        enq(s, t[i], Q);
    }
    for (int i = 0; i < 100000; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        enq(s, r->tenant, Q);
        done(s, r, Q);
    }
    assert_true(visits_per_dispatch(s) <= 1.01);
    fq_sched_destroy(s);
}

/* ---- debtors waiting out their debt, near and beyond the wheel's horizon -
 *
 * A debtor waits outside the rotation in a timing wheel when its round is
 * near, and in a heap when it is further off than the wheel reaches (1,024
 * rounds). Where it waits must not show: it is served in the round in which
 * its deficit turns positive, and granted the quanta of the rounds it sat
 * out. These tests drive debts on both sides of the horizon and across it. */

/* Charges up to 10,000 quanta, no window. */
static fq_sched *mk_wide(void)
{
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 10000 * Q};
    return mk_opts(&o);
}

static uint64_t round_now(fq_sched *s)
{
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    return st.round;
}

/* Serve only the peer, completing its runs at their estimate and keeping it
 * backlogged (it has two queued when it sends one), until round r is under
 * way. */
static void serve_peer_until(fq_sched *s, fq_tenant *peer, uint64_t r)
{
    while (round_now(s) < r) {
        fq_run *x = fq_sched_dispatch(s, 0);
        assert_non_null(x);
        assert_ptr_equal(x->tenant, peer);
        enq(s, peer, x->est);
        done(s, x, x->est);
    }
}

/* Tenants a and b: a queues a run of `quanta` quanta and two of one token, b
 * two of one quantum. Returns a's big run, dispatched first. */
static fq_run *debtor_and_peer(fq_sched *s, fq_tenant **a, fq_tenant **b, uint64_t quanta)
{
    *a = ten(s, "a", 1, 0, 0);
    *b = ten(s, "b", 1, 0, 0);
    enq(s, *a, (uint32_t)(quanta * Q));
    enq(s, *a, 1);
    enq(s, *a, 1);
    enq(s, *b, Q);
    enq(s, *b, Q);
    fq_run *big = fq_sched_dispatch(s, 0);
    assert_ptr_equal(big->tenant, *a);
    return big;
}

/* Dispatch, keeping the peer backlogged and completing every run at its
 * estimate, until each of the n debtors has sent one run: at[i] is the
 * round in which d[i] sent it, after[i] d[i]'s deficit just after. */
static void serve_debtors(fq_sched *s, fq_tenant *peer, fq_tenant **d, int n,
                          uint64_t *at, int64_t *after)
{
    int left = n;
    for (int i = 0; i < n; i++)
        at[i] = UINT64_MAX;
    for (int step = 0; left > 0; step++) {
        assert_true(step < 100000);
        fq_run *x = fq_sched_dispatch(s, 0);
        assert_non_null(x);
        for (int i = 0; i < n; i++) {
            if (x->tenant == d[i] && at[i] == UINT64_MAX) {
                at[i] = round_now(s);
                after[i] = info(d[i]).deficit;
                left--;
            }
        }
        if (x->tenant == peer)
            enq(s, peer, x->est);
        done(s, x, x->est);
    }
}

/* a sends a run of m + 1 quanta with its one quantum and owes m; it left for
 * round 1 and turns positive after m + 1 grants, in round m + 1. A peer with
 * one-quantum runs sends once in every round from 0 to m + 1 meanwhile
 * (ahead of a in round m + 1, which a joins behind it): m + 2 runs. Debts
 * of 5,000 quanta lie far beyond the wheel; 1,022 to 1,025 straddle its
 * edge. */
static void test_debt_beyond_the_wheel_horizon(void **state)
{
    (void)state;
    const uint64_t debts[] = {2, 1022, 1023, 1024, 1025, 4999, 5000};
    for (size_t k = 0; k < sizeof(debts) / sizeof(debts[0]); k++) {
        uint64_t m = debts[k];
        fq_sched *s = mk_wide();
        fq_tenant *a, *b;
        fq_run *x = debtor_and_peer(s, &a, &b, m + 1);
        done(s, x, x->est);
        assert_int_equal(info(a).state, FQ_T_WAITING);
        assert_int_equal(info(a).deficit, -(int64_t)(m * Q));
        uint64_t peer_runs = 0;
        while ((x = fq_sched_dispatch(s, 0))->tenant == b) {
            assert_true(++peer_runs <= m + 2);
            enq(s, b, Q);
            done(s, x, x->est);
        }
        assert_int_equal(peer_runs, m + 2);
        assert_int_equal(round_now(s), m + 1);
        /* granted m + 1 quanta in one step, then charged 1 */
        assert_int_equal(info(a).deficit, Q - 1);
        assert_true(visits_per_dispatch(s) <= 2.0);
        fq_sched_destroy(s);

        /* alone, a skips the m rounds it owes in one step each time (the
         * wheel wraps round by the third run when m is 1022) */
        s = mk_wide();
        a = ten(s, "a", 1, 0, 0);
        for (int i = 0; i < 4; i++)
            enq(s, a, (uint32_t)((m + 1) * Q));
        for (uint64_t i = 0; i < 4; i++) {
            assert_non_null(fq_sched_dispatch(s, 0));
            assert_int_equal(round_now(s), i * (m + 1));
        }
        assert_int_equal(info(a).state, FQ_T_IDLE);
        assert_int_equal(info(a).deficit, -(int64_t)(m * Q));
        assert_true(visits_per_dispatch(s) <= 2.0);
        fq_sched_destroy(s);
    }
}

/* Only debtors, each always backlogged with runs of m_i + 1 quanta: every
 * service leaves it owing m_i quanta, so its services are exactly m_i + 1
 * rounds apart, whatever the others owe, as the scheduler jumps from one
 * wake round to the next (wrapping round the wheel, and past its edge). */
static void test_only_debtors_jump_to_their_rounds(void **state)
{
    (void)state;
    enum { N = 5 };
    /* no debt of 1,023 quanta: its rounds, multiples of 1,024, would
     * always come first where the others wrap round the wheel */
    const uint64_t m[N] = {300, 700, 1000, 1022, 1500};
    fq_sched *s = mk_wide();
    fq_tenant *t[N];
    uint64_t last[N], served[N] = {0};
    for (int i = 0; i < N; i++) {
        t[i] = ten_i(s, "d", i, 1, 0);
        enq(s, t[i], (uint32_t)((m[i] + 1) * Q));
        enq(s, t[i], (uint32_t)((m[i] + 1) * Q));
    }
    for (int step = 0; step < 3000; step++) {
        fq_run *x = fq_sched_dispatch(s, 0);
        assert_non_null(x);
        int i = 0;
        while (x->tenant != t[i])
            i++;
        uint64_t r = round_now(s);
        if (served[i]++)
            assert_int_equal(r - last[i], m[i] + 1);
        else
            assert_int_equal(r, 0);
        last[i] = r;
        enq(s, t[i], x->est);
        done(s, x, x->est);
    }
    for (int i = 0; i < N; i++)
        assert_true(served[i] >= 100);     /* ~1/(m_i + 1) of some 400,000 rounds */
    assert_true(visits_per_dispatch(s) <= 2.0);
    fq_sched_destroy(s);
}

/* Five debtors owe 150 to 3,000 quanta (in the wheel and beyond it) when,
 * in round 100, the quantum changes to q. Rounds 1 to 100, already sat out,
 * are granted at the old quantum; the new one applies from round 101. So
 * with D = debt - 100 quanta left, each waits for the round in which D turns
 * positive under q, 101 + D / q, and is granted q for each round from 101. */
static void quantum_change(uint32_t q)
{
    enum { N = 5 };
    const uint64_t m[N] = {150, 600, 1000, 1500, 3000};
    fq_sched *s = mk_wide();
    fq_tenant *d[N];
    for (int i = 0; i < N; i++) {
        d[i] = ten_i(s, "d", i, 1, 0);
        enq(s, d[i], (uint32_t)((m[i] + 1) * Q));
        enq(s, d[i], 1);
        enq(s, d[i], 1);
    }
    fq_tenant *b = ten(s, "b", 1, 0, 0);
    enq(s, b, Q / 2);
    enq(s, b, Q / 2);
    for (int i = 0; i < N; i++) {
        fq_run *x = fq_sched_dispatch(s, 0);
        assert_ptr_equal(x->tenant, d[i]);
        done(s, x, x->est);
        assert_int_equal(info(d[i]).state, FQ_T_WAITING);
    }
    serve_peer_until(s, b, 100);
    fq_sched_opts o = {.quantum = q, .max_est_tokens = 10000 * Q};
    assert_int_equal(fq_sched_set_opts(s, &o), FQ_OK);
    uint64_t at[N];
    int64_t after[N];
    serve_debtors(s, b, d, N, at, after);
    for (int i = 0; i < N; i++) {
        uint64_t debt = (m[i] - 100) * Q, wake = 101 + debt / q;
        assert_int_equal(at[i], wake);
        assert_int_equal(after[i], (int64_t)((at[i] - 100) * q) - (int64_t)debt - 1);
    }
    fq_sched_destroy(s);
}

static void test_quantum_change_moves_waiting_debtors(void **state)
{
    (void)state;
    quantum_change(2 * Q);      /* rounds come sooner: heap to wheel, or now */
    quantum_change(Q / 2);      /* later: wheel to heap */
}

/* Reconciliation moves a waiting debtor: a refund from beyond the wheel
 * into it, or to now; an overrun from the wheel to beyond it. Each is then
 * served in the round its corrected deficit turns positive (it left for
 * round 1), and granted a quantum for every round from 1 on. */
static void test_reconcile_moves_debtor_across_the_horizon(void **state)
{
    (void)state;
    struct {
        uint64_t est, actual;   /* quanta */
        uint64_t served;        /* round, or 0: joins at once, in 10 or 11 */
    } c[] = {
        {5000, 100, 100},       /* owes 4999 -> 99: beyond the wheel into it */
        {50, 3011, 3011},       /* owes 49 -> 3010: out of the wheel */
        {20, 1044, 1044},       /* owes 19 -> 1043: out, though to the same slot */
        {2000, 0, 0},           /* owes 1999 -> +1 quantum: joins now */
        {600, 300, 300},        /* owes 599 -> 299: within the wheel */
    };
    for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
        fq_sched *s = mk_wide();
        fq_tenant *a, *b;
        fq_run *big = debtor_and_peer(s, &a, &b, c[k].est);
        serve_peer_until(s, b, 10);
        done(s, big, c[k].actual * Q);
        int64_t owed = (int64_t)((c[k].actual - 1) * Q);
        if (c[k].served) {
            assert_int_equal(info(a).state, FQ_T_WAITING);
            assert_int_equal(info(a).deficit, -owed);
        } else {
            assert_int_equal(info(a).state, FQ_T_ACTIVE);
        }
        uint64_t at;
        int64_t after;
        serve_debtors(s, b, &a, 1, &at, &after);
        if (c[k].served)
            assert_int_equal(at, c[k].served);
        else
            assert_in_range(at, 10, 11);
        assert_int_equal(after, (int64_t)(at * Q) - owed - 1);
        /* woken once, in its round: not early, only to wait again */
        fq_sched_stats st;
        fq_sched_stats_get(s, &st);
        assert_int_equal(st.wakeups, 1);
        fq_sched_destroy(s);
    }
}

/* ---- policy changes and requeue ----------------------------------------- */

static void test_policy_change_keeps_place_and_runs(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    uint64_t first_a = enq(s, a, 500);
    for (int i = 0; i < 999; i++)
        enq(s, a, 500);
    for (int i = 0; i < 1000; i++)
        enq(s, b, 500);
    fq_tenant_policy p = {.weight = 4};
    assert_int_equal(fq_tenant_set_policy(s, a, &p), FQ_OK);
    uint64_t sa = 0, sb = 0, expect = first_a;
    for (int i = 0; i < 1000; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        if (r->tenant == a) {
            assert_int_equal(r->id, expect);    /* FIFO within the tenant */
            expect++;
            sa += r->est;
        } else {
            sb += r->est;
        }
        done(s, r, r->est);
    }
    double ratio = (double)sa / (double)sb;
    assert_true(ratio > 3.8 && ratio < 4.2);
    assert_int_equal(info(a).queued + info(b).queued, 1000);
    fq_sched_destroy(s);
}

static void test_requeue_returns_run_to_head(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t id1 = enq(s, a, 400);
    enq(s, a, 400);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id1);
    int64_t d = info(a).deficit;
    assert_int_equal(fq_sched_requeue(s, id1), FQ_OK);
    assert_int_equal(info(a).deficit, d + 400);
    assert_int_equal(info(a).in_flight, 0);
    assert_int_equal(info(a).dispatched, 0);
    r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id1);
    assert_int_equal(fq_sched_requeue(s, 12345), FQ_ENOTFOUND);
    fq_sched_destroy(s);
}

/* A dispatch taken back for good: refunded, not counted, slot freed; the
 * refund to a tenant gone idle is not banked. */
static void test_cancel_refunds_and_uncounts(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 1, 0), *b = ten(s, "b", 1, 0, 0);
    uint64_t id1 = enq(s, a, 400), id2 = enq(s, a, 400);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id1);
    assert_int_equal(info(a).state, FQ_T_CAPPED);
    int64_t d = info(a).deficit;
    assert_int_equal(fq_sched_cancel(s, id1), FQ_OK);
    assert_int_equal(info(a).deficit, d + 400);
    assert_int_equal(info(a).in_flight, 0);
    assert_int_equal(info(a).dispatched, 0);
    assert_int_equal(info(a).charged_tokens, 0);
    assert_null(fq_sched_run(s, id1));
    assert_int_equal(fq_sched_cancel(s, id1), FQ_ENOTFOUND);
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.dispatched, 0);
    assert_int_equal(st.in_flight, 0);
    /* The slot is free: a's next run goes, not only b's. */
    r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id2);

    /* b, idle once its only run left, in debt from it: the refund lifts
     * it to zero, no higher. */
    uint64_t id3 = enq(s, b, 3000);
    r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id3);
    assert_int_equal(info(b).state, FQ_T_IDLE);
    assert_int_equal(info(b).deficit, -2000);
    assert_int_equal(fq_sched_cancel(s, id3), FQ_OK);
    assert_int_equal(info(b).deficit, 0);
    fq_sched_destroy(s);
}

static void test_tokens_ahead_bound(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0), *c = ten(s, "c", 2, 0, 0);
    for (int i = 0; i < 100; i++)
        enq(s, a, 1000);
    /* a newcomer shares with a: it waits for about its own run's worth of a */
    assert_int_equal(fq_sched_tokens_ahead(s, b, 500), 1000);
    /* a itself waits behind its whole backlog */
    assert_int_equal(fq_sched_tokens_ahead(s, a, 500), 100500);
    /* weight 2 halves what it waits for per token of its own */
    assert_int_equal(fq_sched_tokens_ahead(s, c, 1000), 1500);
    fq_sched_destroy(s);
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    fq_sched *s = NULL;
    fq_sched_opts bad = {.quantum = 0, .max_est_tokens = 10};
    assert_int_equal(fq_sched_create(&s, &bad), FQ_EINVAL);
    assert_null(s);
    fq_sched_destroy(NULL);
    s = mk(0, 0, 0);
    fq_tenant *t = NULL;
    fq_tenant_policy p = {.weight = 1};
    assert_int_equal(fq_sched_tenant(&t, s, "bad tenant", 10, &p), FQ_EINVAL);
    assert_null(t);
    /* fairq's reserved names are no tenant's. */
    assert_int_equal(fq_sched_tenant(&t, s, "_invalid", 8, &p), FQ_EINVAL);
    assert_int_equal(fq_sched_tenant(&t, s, "_other", 6, &p), FQ_EINVAL);
    assert_null(t);
    fq_tenant_policy zero = {.weight = 0};
    assert_int_equal(fq_sched_tenant(&t, s, "ok", 2, &zero), FQ_EINVAL);
    assert_null(fq_sched_find(s, "ok", 2));
    fq_sched_destroy(s);
}

/* ---- quantum changes, saturation, requeue age -------------------------- */

/* A weight raised while a debtor waits applies from its next grant: the
 * rounds it already sat out were granted at the old weight. */
static void test_weight_raise_while_waiting_is_not_retroactive(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    enq(s, a, 50 * Q);                  /* a will owe 49 quanta */
    enq(s, a, Q);
    for (int i = 0; i < 200; i++)
        enq(s, b, Q);
    for (int i = 0; i < 41; i++) {      /* a's big run, then 40 of b's rounds */
        fq_run *r = fq_sched_dispatch(s, 0);
        done(s, r, r->est);
    }
    assert_int_equal(info(a).state, FQ_T_WAITING);
    fq_tenant_policy p = {.weight = 100};
    assert_int_equal(fq_tenant_set_policy(s, a, &p), FQ_OK);
    /* 40 rounds at weight 1 leave -9,000; one grant at weight 100 follows */
    assert_true(info(a).deficit <= 100 * Q);
    fq_sched_destroy(s);
}

/* The same for a new base quantum from set_opts. */
static void test_quantum_change_while_waiting_is_not_retroactive(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    enq(s, a, 50 * Q);
    enq(s, a, Q);
    for (int i = 0; i < 200; i++)
        enq(s, b, Q);
    for (int i = 0; i < 41; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        done(s, r, r->est);
    }
    fq_sched_opts o = {.quantum = 100 * Q, .max_est_tokens = 1000000};
    assert_int_equal(fq_sched_set_opts(s, &o), FQ_OK);
    assert_true(info(a).deficit <= 100 * Q);
    fq_sched_destroy(s);
}

/* A requeued run's queue age counts from its dispatch, not from its lease's
 * end (the window keeps the dispatch time while a run is in flight). */
static void test_requeue_age_counts_from_dispatch(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 100);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    assert_int_equal(fq_sched_enqueue(NULL, s, a, 1, 10, NULL, 5), FQ_OK);
    fq_run *r = fq_sched_dispatch(s, 10);
    assert_int_equal(fq_sched_requeue(s, r->id), FQ_OK);
    assert_int_equal(info(a).oldest_enqueued, 10);
    fq_sched_destroy(s);
}

/* A tenant whose dispatch failed is parked: its run goes back to the head
 * of its queue, the others are served meanwhile, and it comes back at its
 * time, behind them, with its queue whole and in order. */
static void test_parked_tenant_stops_no_one(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0), *c = ten(s, "c", 1, 0, 0);
    uint64_t a1 = enq(s, a, 100), a2 = enq(s, a, 100);
    uint64_t b1 = enq(s, b, 100), b2 = enq(s, b, 100), c1 = enq(s, c, 100);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, a1);
    /* The publish of a1 failed at t=0: back at a's head, a parked until 100. */
    assert_int_equal(fq_sched_requeue(s, a1), FQ_OK);
    fq_sched_park(s, a, 100);
    uint64_t want[] = {b1, b2, c1};
    for (size_t i = 0; i < 3; i++) {
        r = fq_sched_dispatch(s, 10 + i);
        assert_non_null(r);
        assert_int_equal(r->id, want[i]);
    }
    assert_int_equal(info(a).state, FQ_T_PARKED);
    assert_int_equal(info(a).queued, 2);
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.parked, 1);
    /* Nothing before its time, however often dispatch asks. */
    for (int i = 0; i < 5; i++)
        assert_null(fq_sched_dispatch(s, 99));
    /* A later failure extends the parking; an earlier time does not shorten it. */
    fq_sched_park(s, a, 150);
    fq_sched_park(s, a, 120);
    assert_null(fq_sched_dispatch(s, 100));
    uint64_t b3 = enq(s, b, 100);
    r = fq_sched_dispatch(s, 140);
    assert_int_equal(r->id, b3);
    assert_null(fq_sched_dispatch(s, 149));
    /* At its time it comes back, its runs in order. */
    r = fq_sched_dispatch(s, 150);
    assert_non_null(r);
    assert_int_equal(r->id, a1);
    r = fq_sched_dispatch(s, 150);
    assert_int_equal(r->id, a2);
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.parked, 0);
    assert_int_equal(info(a).dispatched, 2);
    fq_sched_destroy(s);
}

/* Parking a tenant that is not at the head takes effect when it gets
 * there, wherever it waits meanwhile (here: as a debtor), and a tenant
 * parked and back keeps its share. */
static void test_park_reaches_a_waiting_tenant(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    uint64_t a1 = enq(s, a, 3 * Q);
    uint64_t a2 = enq(s, a, 100);
    enq(s, b, 100);
    enq(s, b, 100);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, a1);
    assert_int_equal(info(a).state, FQ_T_WAITING);
    fq_sched_park(s, a, 1000);
    /* b is served; a's debt would bring it back in a few rounds, but it is parked. */
    for (int i = 0; i < 2; i++) {
        r = fq_sched_dispatch(s, 10);
        assert_non_null(r);
        assert_ptr_equal(r->tenant, b);
    }
    assert_null(fq_sched_dispatch(s, 10));
    assert_int_equal(info(a).state, FQ_T_PARKED);
    r = fq_sched_dispatch(s, 1000);
    assert_non_null(r);
    assert_int_equal(r->id, a2);
    fq_sched_destroy(s);
}

/* Runs that come back from the window lead their queue in the order they
 * were queued, whatever order their failures come in, and a run that fails
 * again goes back before those still waiting behind it. */
static void test_requeue_keeps_dispatch_order(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 100, 0, 0);
    uint64_t id[6];
    for (int i = 0; i < 6; i++)
        id[i] = enq(s, a, 10);
    for (int i = 0; i < 4; i++)
        assert_int_equal(fq_sched_dispatch(s, (uint64_t)i)->id, id[i]);
    /* Failures of 1, 0, 3 come back out of order; 2 reached the workers. */
    assert_int_equal(fq_sched_requeue(s, id[1]), FQ_OK);
    assert_int_equal(fq_sched_requeue(s, id[0]), FQ_OK);
    assert_int_equal(fq_sched_requeue(s, id[3]), FQ_OK);
    uint64_t want[] = {id[0], id[1], id[3], id[4], id[5]};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(fq_sched_dispatch(s, 10)->id, want[i]);
    /* Again, once the requeued ones have left: 4 fails, then 0. */
    assert_int_equal(fq_sched_requeue(s, id[4]), FQ_OK);
    assert_int_equal(fq_sched_requeue(s, id[0]), FQ_OK);
    assert_int_equal(fq_sched_requeue(s, id[1]), FQ_OK);
    /* 0 is sent again and fails again while 1 and 4 wait: it leads again. */
    assert_int_equal(fq_sched_dispatch(s, 20)->id, id[0]);
    assert_int_equal(fq_sched_requeue(s, id[0]), FQ_OK);
    assert_int_equal(fq_sched_dispatch(s, 30)->id, id[0]);
    assert_int_equal(fq_sched_dispatch(s, 30)->id, id[1]);
    assert_int_equal(fq_sched_dispatch(s, 30)->id, id[4]);
    assert_null(fq_sched_dispatch(s, 30));
    assert_int_equal(info(a).queued, 0);
    fq_sched_destroy(s);
}

/* A run whose lease ran out before its failed publish came back is
 * requeued all the same: its expired record goes, it is sent again. */
static void test_requeue_of_an_expired_run(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 100);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t id1 = enq(s, a, 10), id2 = enq(s, a, 10);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, id1);
    assert_int_equal(fq_sched_expire(s, 100, NULL, NULL), 1);
    assert_int_equal(fq_sched_run(s, id1)->state, FQ_RUN_EXPIRED);
    assert_int_equal(fq_sched_requeue(s, id1), FQ_OK);
    assert_null(fq_sched_run(s, id1));
    assert_int_equal(info(a).queued, 2);
    assert_int_equal(fq_sched_dispatch(s, 110)->id, id1);
    assert_int_equal(fq_sched_dispatch(s, 110)->id, id2);
    /* Nothing is held but the two in flight: the tenant can be forgotten
     * once they complete. */
    assert_int_equal(fq_sched_complete(NULL, s, id1, 10), FQ_OK);
    assert_int_equal(fq_sched_complete(NULL, s, id2, 10), FQ_OK);
    assert_int_equal(info(a).in_flight, 0);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_OK);
    fq_sched_destroy(s);
}

/* Absurd actuals saturate the debt instead of overflowing int64 (which
 * wraps to a huge credit without sanitizers). */
static void test_debt_saturates(void **state)
{
    (void)state;
    fq_sched *s = mk_opts(&(fq_sched_opts){.quantum = Q, .max_est_tokens = UINT32_MAX});
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    /* each call adds 63 x 2^32 of debt: 2^62 is reached after ~17 million */
    for (int i = 0; i < 20000000; i++)
        fq_tenant_reconcile(s, a, UINT32_MAX, UINT64_MAX);
    assert_int_equal(info(a).deficit, -((int64_t)1 << 62));
    fq_tenant_reconcile(s, a, 1000000, 0);      /* a refund still moves it */
    assert_int_equal(info(a).deficit, -((int64_t)1 << 62) + 1000000);
    fq_sched_destroy(s);
}

/* quantum x weight beyond int64 is refused, not an endless dispatch loop. */
static void test_quantum_times_weight_is_bounded(void **state)
{
    (void)state;
    fq_sched *s = NULL;
    fq_sched_opts o = {.quantum = UINT32_MAX, .max_est_tokens = 1000};
    fq_tenant_policy p = {.weight = UINT32_MAX};
    fq_tenant *t = NULL;
    assert_int_equal(fq_sched_create(&s, &o), FQ_EINVAL);
    o.quantum = FQ_SCHED_MAX_QUANTUM;
    assert_int_equal(fq_sched_create(&s, &o), FQ_OK);
    assert_int_equal(fq_sched_tenant(&t, s, "a", 1, &p), FQ_EINVAL);
    p.weight = FQ_SCHED_MAX_WEIGHT;
    assert_int_equal(fq_sched_tenant(&t, s, "a", 1, &p), FQ_OK);
    assert_int_equal(fq_sched_enqueue(NULL, s, t, 1, 1000, NULL, 0), FQ_OK);
    assert_non_null(fq_sched_dispatch(s, 0));
    fq_sched_destroy(s);
}

/* Runs dispatched before a restart take their slots back without a second
 * charge, count against caps, and complete, expire or refuse duplicates;
 * none fills the window or a tenant's cap past its limit. */
static void test_adopt_restores_the_window(void **state)
{
    (void)state;
    fq_sched *s = mk(2, 0, 100);
    fq_tenant *a = ten(s, "a", 1, 1, 0), *b = ten(s, "b", 1, 0, 0);
    assert_int_equal(fq_sched_adopt(NULL, s, a, 500, 300, NULL, 10), FQ_OK);
    assert_int_equal(fq_sched_adopt(NULL, s, a, 500, 300, NULL, 10), FQ_EEXIST);
    assert_int_equal(fq_sched_adopt(NULL, s, b, 501, 300, NULL, 20), FQ_OK);
    assert_int_equal(fq_sched_adopt(NULL, s, b, 502, 300, NULL, 20), FQ_EFULL); /* past the window */
    assert_null(fq_sched_run(s, 502));
    assert_int_equal(info(b).in_flight, 1);
    assert_int_equal(info(a).in_flight, 1);
    assert_int_equal(info(a).deficit, 0);       /* charged before the restart */
    assert_int_equal(info(a).dispatched, 0);
    enq(s, b, 100);
    assert_null(fq_sched_dispatch(s, 30));      /* 2 in flight, window of 2 */
    assert_int_equal(fq_sched_complete(NULL, s, 501, 300), FQ_OK);
    assert_int_equal(fq_sched_adopt(NULL, s, a, 503, 300, NULL, 30), FQ_EFULL); /* a's cap of 1 */
    enq(s, a, 100);
    fq_run *r = fq_sched_dispatch(s, 40);
    assert_ptr_equal(r->tenant, b);             /* a is at its cap of 1 */
    assert_null(fq_sched_dispatch(s, 40));
    assert_int_equal(fq_sched_expire(s, 110, NULL, NULL), 1);   /* 500's lease */
    assert_non_null(r = fq_sched_dispatch(s, 111));
    assert_ptr_equal(r->tenant, a);
    assert_int_equal(fq_sched_complete(NULL, s, 500, 900), FQ_OK);  /* late, reconciles */
    assert_int_equal(info(a).deficit, -600);     /* idle at 0, then the overrun */
    fq_sched_destroy(s);
}

/* A debt has a bounded life: in virtual time, an idle debtor's debt is
 * forgiven once it is `life` old and not before, never while the tenant
 * holds a run, and then the tenant can be forgotten; a debt read back after
 * a restart is restored as it was, and credit never is. */
static void test_debt_life(void **state)
{
    (void)state;
    const uint64_t life = 3600000;
    fq_sched *s = mk(0, 0, 100);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t id = enq(s, a, 100);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id);
    int64_t changed = 1000;                      /* when the overrun was reconciled */
    done(s, r, 350);
    int64_t debt = info(a).deficit;
    assert_true(debt < 0);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_EEXIST);  /* debt is not escaped */
    assert_false(fq_debt_forgiven(debt, changed, changed, life));
    assert_false(fq_debt_forgiven(debt, changed, changed + (int64_t)life - 1, life));
    assert_true(fq_debt_forgiven(debt, changed, changed + (int64_t)life, life));
    assert_false(fq_debt_forgiven(0, changed, changed + 10 * (int64_t)life, life));
    assert_false(fq_debt_forgiven(debt, changed, changed - 1, life));   /* clock stepped back */
    /* it holds a run: nothing is forgiven, or restored */
    enq(s, a, 100);
    assert_int_equal(fq_tenant_set_debt(s, a, 0), FQ_EEXIST);
    r = fq_sched_dispatch(s, 10);
    assert_int_equal(fq_tenant_set_debt(s, a, 0), FQ_EEXIST);   /* in flight */
    assert_int_equal(fq_sched_expire(s, 200, NULL, NULL), 1);
    assert_int_equal(fq_tenant_set_debt(s, a, 0), FQ_EEXIST);   /* expired, awaiting */
    assert_int_equal(fq_sched_complete(NULL, s, r->id, 400), FQ_OK);   /* late, overran */
    debt = info(a).deficit;
    assert_int_equal(debt, -300);     /* the quantum on joining repaid the first debt */
    /* idle again: forgiven, then forgotten */
    assert_int_equal(fq_tenant_set_debt(s, a, 1), FQ_EINVAL);   /* no banked credit */
    assert_int_equal(fq_tenant_set_debt(s, a, INT64_MIN), FQ_EINVAL);
    assert_int_equal(info(a).deficit, debt);
    assert_int_equal(fq_tenant_set_debt(s, a, 0), FQ_OK);
    assert_int_equal(info(a).deficit, 0);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_OK);
    /* after a restart: a new tenant takes its debt back, and pays it */
    fq_tenant *b = ten(s, "b", 1, 0, 0), *c = ten(s, "c", 1, 0, 0);
    assert_int_equal(fq_tenant_set_debt(s, b, -3 * (int64_t)Q), FQ_OK);
    assert_int_equal(info(b).deficit, -3 * (int64_t)Q);
    for (int i = 0; i < 4; i++)
        enq(s, c, Q);
    enq(s, b, Q);
    int before = 0;
    for (fq_run *x; (x = fq_sched_dispatch(s, 300)) && x->tenant == c;)
        before++, done(s, x, x->est);
    assert_int_equal(before, 4);                 /* c goes first while b repays */
    fq_sched_destroy(s);
}

/* One absurd completion, held or not, moves the deficit by at most 63 x
 * the estimate: the tenant is not starved for hours by a worker's bug. */
static void test_absurd_actual_is_bounded(void **state)
{
    (void)state;
    fq_sched *s = mk(0, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    fq_tenant_reconcile(s, a, 1, 1000000000000ULL);     /* a run it never held */
    assert_int_equal(info(a).deficit, -63);
    assert_int_equal(info(a).actual_tokens, 1000000000000ULL);   /* still reported */
    uint64_t id = enq(s, a, 100);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, id);
    assert_int_equal(fq_sched_complete(NULL, s, id, UINT64_MAX), FQ_OK);
    assert_int_equal(info(a).deficit, -6300);   /* the -63 was repaid on joining */
    /* against a backlogged peer, a is served again within 8 rounds */
    for (int i = 0; i < 20; i++)
        enq(s, b, Q);
    enq(s, a, 100);
    int before = 0;
    for (fq_run *x; (x = fq_sched_dispatch(s, 0)) && x->tenant == b;)
        before++, done(s, x, x->est);
    assert_true(before <= 8);
    fq_sched_destroy(s);
}

/* The simulator's switch: without the idle reset, credit and refunds to an
 * idle tenant are banked, which is what the default forbids. */
static void test_keep_idle_credit_banks(void **state)
{
    (void)state;
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .keep_idle_credit = true};
    fq_sched *s = mk_opts(&o);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t id = enq(s, a, 100);
    assert_non_null(fq_sched_dispatch(s, 0));
    assert_int_equal(info(a).state, FQ_T_IDLE);
    assert_int_equal(info(a).deficit, 900);
    assert_int_equal(fq_sched_complete(NULL, s, id, 0), FQ_OK);
    assert_int_equal(info(a).deficit, 1000);
    fq_sched_destroy(s);
}

/* ---- the stats ranking ------------------------------------------------- */

/* A tenant as the reference ranks it. */
typedef struct rank_ref {
    fq_tenant *t;
    fq_tenant_info i;
    uint64_t born;              /* creation order, as the test made them */
} rank_ref;

/* What drr.h promises: queued first, by tokens (most first), then the head
 * run's enqueue time, then id; the idle by creation. */
static int rank_ref_cmp(const void *a, const void *b)
{
    const rank_ref *x = a, *y = b;
    if (!x->i.queued != !y->i.queued)
        return x->i.queued ? -1 : 1;
    if (!x->i.queued)
        return x->born < y->born ? -1 : 1;
    if (x->i.queued_tokens != y->i.queued_tokens)
        return x->i.queued_tokens > y->i.queued_tokens ? -1 : 1;
    if (x->i.oldest_enqueued != y->i.oldest_enqueued)
        return x->i.oldest_enqueued < y->i.oldest_enqueued ? -1 : 1;
    return strcmp(x->i.id, y->i.id);
}

/* The ranking walked from position from, and every position looked up,
 * agree with a sort of the tenants' views. */
static void assert_ranking(fq_sched *s, fq_tenant **t, const uint64_t *born, size_t n)
{
    rank_ref ref[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++)
        ref[i] = (rank_ref){t[i], info(t[i]), born[i]};
    qsort(ref, n, sizeof *ref, rank_ref_cmp);
    size_t from = (size_t)rnd_in(0, n);
    fq_tenant *w = fq_sched_rank_at(s, from);
    for (size_t i = 0; i < n; i++) {
        assert_ptr_equal(fq_sched_rank_at(s, i), ref[i].t);
        if (i >= from) {
            assert_ptr_equal(w, ref[i].t);
            w = fq_sched_rank_next(s, w);
        }
    }
    assert_null(w);
    assert_null(fq_sched_rank_at(s, n));
}

/* Through enqueues, dispatches, completions, requeues, tenants forgotten
 * and made again (last in creation order), with ties in tokens and in
 * time, the ranking is synced only now and then (several changes to one
 * tenant between syncs, as in a turn of the proxy's loop) and always
 * agrees with the reference. */
static void test_rank_follows_the_queues(void **state)
{
    (void)state;
    enum { RT = 40, STEPS = 6000 };
    rng_state = 11;
    fq_sched *s = mk(8, 0, 0);
    fq_tenant *t[RT];
    uint64_t born[RT], nborn = 0, flight[8], now = 1;
    size_t nflight = 0;
    for (int i = 0; i < RT; i++) {
        t[i] = ten_i(s, "r", i, (uint32_t)rnd_in(1, 3), 0);
        born[i] = nborn++;
    }
    assert_ranking(s, t, born, RT);
    for (int step = 0; step < STEPS; step++) {
        int k = (int)rnd_in(0, RT - 1);
        now += rnd_in(0, 1);
        switch (rnd_in(0, 5)) {
        case 0:
        case 1:
            assert_int_equal(fq_sched_enqueue(NULL, s, t[k], next_id++, (uint32_t)rnd_in(1, 4),
                                              NULL, now), FQ_OK);
            break;
        case 2: {
            fq_run *r = fq_sched_dispatch(s, now);
            if (r)
                flight[nflight++] = r->id;
            break;
        }
        case 3:
        case 4:
            if (nflight) {
                size_t j = (size_t)rnd_in(0, nflight - 1);
                fq_run *r = fq_sched_run(s, flight[j]);
                if (rnd_in(0, 1))
                    assert_int_equal(fq_sched_complete(NULL, s, flight[j], r->est), FQ_OK);
                else
                    assert_int_equal(fq_sched_requeue(s, flight[j]), FQ_OK);
                flight[j] = flight[--nflight];
            }
            break;
        default: {
            char id[16];
            snprintf(id, sizeof id, "r%d", k);
            if (fq_sched_tenant_remove(s, t[k]) == FQ_OK) {
                t[k] = ten(s, id, 1, 0, 0);
                born[k] = nborn++;
            }
        }
        }
        if (rnd_in(0, 7) == 0)
            assert_ranking(s, t, born, RT);
    }
    assert_true(nborn > RT);    /* some were forgotten and came back */
    assert_ranking(s, t, born, RT);
    fq_sched_destroy(s);
}

/* Priority classes: within a tenant, its highest class queued leaves first
 * (FIFO within a class); across tenants nothing changes. The same arrivals
 * and completions, with random classes, on a scheduler without classes and
 * one with: the tenants are served in the same sequence, run for run, and
 * each tenant's runs leave in class order. */
static fq_sched *mk_classes(uint32_t n, const uint32_t *maxp)
{
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .max_in_flight = 8,
                       .max_expired = 16, .nclasses = n};
    for (uint32_t c = 0; maxp && c < n; c++)
        o.class_max_pending[c] = maxp[c];
    return mk_opts(&o);
}

static void test_classes_order_within_a_tenant_only(void **state)
{
    (void)state;
    enum { T = 5, N = 4000 };
    fq_sched *plain = mk(8, 0, 0), *cls = mk_classes(3, NULL);
    fq_tenant *tp[T], *tc[T];
    for (int i = 0; i < T; i++) {
        tp[i] = ten_i(plain, "t", i, (uint32_t)(i % 3 + 1), 0);
        tc[i] = ten_i(cls, "t", i, (uint32_t)(i % 3 + 1), 0);
    }
    /* the reference: each tenant's queued ids per class, in order */
    static uint64_t q[T][3][N];
    size_t qh[T][3] = {{0}}, qt[T][3] = {{0}};
    uint64_t cls_of[N + 1];
    uint64_t id = 1;
    rng_state = 17;
    size_t sent = 0;
    for (int step = 0; step < 3 * N && id <= N; step++) {
        if (rnd() % 3) {
            int i = (int)rnd_in(0, T - 1);
            /* one cost per tenant, so that which of its runs leaves
             * first does not change its deficit */
            uint32_t c = (uint32_t)rnd_in(0, 2), est = (uint32_t)(700 * i + 300);
            assert_int_equal(fq_sched_enqueue(NULL, plain, tp[i], id, est, NULL, 0), FQ_OK);
            assert_int_equal(fq_sched_enqueue_class(NULL, cls, tc[i], id, c, est, NULL, 0), FQ_OK);
            cls_of[id] = c;
            q[i][c][qt[i][c]++] = id++;
        } else {
            fq_run *a = fq_sched_dispatch(plain, 0), *b = fq_sched_dispatch(cls, 0);
            assert_int_equal(a == NULL, b == NULL);
            if (!a)
                continue;
            assert_string_equal(info(a->tenant).id, info(b->tenant).id);
            int i = atoi(info(b->tenant).id + 1);
            uint32_t c = 0;
            while (qh[i][c] == qt[i][c])
                c++;
            assert_int_equal(b->id, q[i][c][qh[i][c]++]);
            assert_int_equal(cls_of[b->id], c);
            /* both complete what they sent, at the cost the first was charged */
            uint64_t actual = a->est;
            assert_int_equal(fq_sched_complete(NULL, plain, a->id, actual), FQ_OK);
            assert_int_equal(fq_sched_complete(NULL, cls, b->id, actual), FQ_OK);
            sent++;
        }
    }
    assert_true(sent > N / 3);
    fq_sched_destroy(plain);
    fq_sched_destroy(cls);
}

/* A tenant's interactive run waits behind none of its own 900 batch runs,
 * and takes its tenant's turn, not a neighbour's. */
static void test_class_jumps_its_tenants_backlog(void **state)
{
    (void)state;
    fq_sched *s = mk_classes(2, NULL);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    for (int i = 0; i < 900; i++) {
        assert_int_equal(fq_sched_enqueue(NULL, s, a, next_id++, Q, NULL, 0), FQ_OK);
        assert_int_equal(fq_sched_enqueue(NULL, s, b, next_id++, Q, NULL, 0), FQ_OK);
    }
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_ptr_equal(r->tenant, a);     /* a's turn, one batch run */
    done(s, r, Q);
    uint64_t urgent = next_id++;
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, urgent, 0, Q, NULL, 1), FQ_OK);
    r = fq_sched_dispatch(s, 1);
    assert_ptr_equal(r->tenant, b);     /* b's turn is b's */
    done(s, r, Q);
    r = fq_sched_dispatch(s, 2);
    assert_int_equal(r->id, urgent);    /* a's next turn: before its 899 */
    done(s, r, Q);
    for (int i = 0; i < 100; i++) {
        r = fq_sched_dispatch(s, 3);
        assert_ptr_equal(r->tenant, i % 2 ? a : b);
        done(s, r, Q);
    }
    /* a's one turn more is the first, before b's */
    assert_int_equal(info(a).dispatched, info(b).dispatched + 1);
    fq_sched_destroy(s);
}

/* Each class has its own max_pending, under the tenant's; a class out of
 * range is refused; runs back from the window still lead. */
static void test_class_max_pending_and_requeue(void **state)
{
    (void)state;
    uint32_t maxp[2] = {2, 0};
    fq_sched *s = mk_classes(2, maxp);
    fq_tenant *a = ten(s, "a", 1, 0, 5);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 1, 1, 10, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 2, 0, 10, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 3, 0, 10, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 4, 0, 10, NULL, 0), FQ_EFULL);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 4, 2, 10, NULL, 0), FQ_EINVAL);
    assert_int_equal(fq_sched_enqueue(NULL, s, a, 4, 10, NULL, 0), FQ_OK);     /* class 1 */
    assert_int_equal(fq_sched_enqueue(NULL, s, a, 5, 10, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue(NULL, s, a, 6, 10, NULL, 0), FQ_EFULL); /* tenant's 5 */
    assert_int_equal(info(a).queued, 5);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, 2);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 6, 0, 10, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, 3);
    /* 2 and 3 fail: they lead, then class 0's 6, then class 1 */
    assert_int_equal(fq_sched_requeue(s, 3), FQ_OK);
    assert_int_equal(fq_sched_requeue(s, 2), FQ_OK);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 7, 1, 10, NULL, 0), FQ_EFULL);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, 2);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 8, 0, 10, NULL, 0), FQ_EFULL);
    uint64_t want[] = {3, 6, 1, 4, 5};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(fq_sched_dispatch(s, 0)->id, want[i]);
    assert_null(fq_sched_dispatch(s, 0));
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 9, 1, 10, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_class(NULL, s, a, 10, 0, 10, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, 10);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, 9);
    fq_sched_destroy(s);
}

/* Sub-tenants: a user flooding its tenant with 900 runs delays none of
 * its colleagues' first runs past the tenant's next turn; the tenant's
 * share is what it was; new ones past the cap share one; idle ones are
 * forgotten. */
static fq_sched *mk_subs(uint32_t max_subs)
{
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .max_in_flight = 0,
                       .max_expired = 16, .max_subtenants = max_subs};
    return mk_opts(&o);
}

static uint64_t enq_sub(fq_sched *s, fq_tenant *t, const char *sub, uint32_t est)
{
    uint64_t id = next_id++;
    assert_int_equal(fq_sched_enqueue_sub(NULL, s, t, sub, strlen(sub), 0, id, est, NULL, 0),
                     FQ_OK);
    return id;
}

static void test_subtenant_flood_delays_no_first_run(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(64);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    for (int i = 0; i < 900; i++)
        enq_sub(s, a, "flood", Q);
    enq(s, b, Q);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_ptr_equal(r->tenant, a);     /* flood's first */
    done(s, r, Q);
    uint64_t first[5];
    char name[16];       /* "u" and any int: -O1 (make asan) checks the width */
    for (int u = 0; u < 5; u++) {
        snprintf(name, sizeof name, "u%d", u);
        first[u] = enq_sub(s, a, name, Q);
        enq(s, b, Q);
    }
    /* a's next five turns are its colleagues', one each, in order */
    for (int u = 0; u < 5; u++) {
        r = fq_sched_dispatch(s, 1);
        assert_ptr_equal(r->tenant, b);
        done(s, r, Q);
        r = fq_sched_dispatch(s, 1);
        assert_int_equal(r->id, first[u]);
        done(s, r, Q);
    }
    fq_tenant_info i = info(a);
    assert_int_equal(i.subtenants, 6);
    assert_int_equal(i.active_subtenants, 1);
    assert_int_equal(i.dispatched, info(b).dispatched + 1);   /* a went first */
    fq_sched_destroy(s);
}

static void test_subtenants_divide_a_share(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(64);
    fq_tenant *many = ten(s, "many", 1, 0, 0), *one = ten(s, "one", 1, 0, 0);
    char name[16];       /* "u" and any int: -O1 (make asan) checks the width */
    rng_state = 5;
    for (int k = 0; k < 20; k++) {
        for (int u = 0; u < 50; u++) {
            snprintf(name, sizeof name, "u%d", u);
            enq_sub(s, many, name, (uint32_t)rnd_in(100, 3000));
        }
        for (int u = 0; u < 50; u++)
            enq_sub(s, one, "solo", (uint32_t)rnd_in(100, 3000));
    }
    uint64_t tok[2] = {0, 0}, per[50] = {0};
    for (int n = 0; n < 1500; n++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        bool m = r->tenant == many;
        tok[m] += r->est;
        if (m) {
            /* whose: ids were given u0..u49 then solo's 50, in rounds of 100 */
            per[(r->id - 1) % 100] += r->est;
        }
        done(s, r, r->est);
    }
    /* tenants: equal tokens, within a quantum and a run */
    uint64_t gap = tok[0] > tok[1] ? tok[0] - tok[1] : tok[1] - tok[0];
    assert_true(gap <= Q + 3000);
    /* users of many: equal tokens, within a run or two */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int u = 0; u < 50; u++) {
        lo = per[u] < lo ? per[u] : lo;
        hi = per[u] > hi ? per[u] : hi;
    }
    assert_true(hi - lo <= 2 * 3000);
    fq_sched_destroy(s);
}

static void test_subtenants_capped_and_forgotten(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(2);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    enq_sub(s, a, "x", Q);
    enq_sub(s, a, "y", Q);
    enq_sub(s, a, "z", Q);      /* past the cap: the overflow one */
    enq_sub(s, a, "w", Q);      /* ... shared */
    assert_int_equal(info(a).subtenants, 3);
    assert_int_equal(info(a).active_subtenants, 3);
    assert_int_equal(fq_sched_enqueue_sub(NULL, s, a, "b d", 3, 0, 99, Q, NULL, 0), FQ_EINVAL);
    /* a run back from the window leads */
    fq_run *r = fq_sched_dispatch(s, 0);
    uint64_t back = r->id;
    assert_int_equal(fq_sched_requeue(s, back), FQ_OK);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, back);
    done(s, fq_sched_run(s, back), Q);
    for (int k = 0; k < 3; k++)
        done(s, fq_sched_dispatch(s, 0), Q);
    assert_null(fq_sched_dispatch(s, 0));
    assert_int_equal(info(a).queued, 0);
    assert_int_equal(info(a).active_subtenants, 0);
    /* with nothing queued those that owe no turn are forgotten; the
     * overflow one, served last in the round under way, owes the rest */
    assert_int_equal(info(a).subtenants, 1);
    /* while some have runs the idle are kept up to the cap; there the
     * idle ones that owe no turn make room */
    fq_tenant *c = ten(s, "c", 1, 0, 0);
    for (int k = 0; k < 3; k++)
        enq_sub(s, c, "x", Q);
    enq_sub(s, c, "y", Q);
    done(s, fq_sched_dispatch(s, 0), Q);        /* x's */
    done(s, fq_sched_dispatch(s, 0), Q);        /* y's: y idle, owes its round */
    assert_int_equal(info(c).subtenants, 2);
    enq_sub(s, c, "v", Q);                      /* y owes: v overflows */
    assert_int_equal(info(c).subtenants, 3);
    done(s, fq_sched_dispatch(s, 0), Q);        /* the overflow's (new) */
    done(s, fq_sched_dispatch(s, 0), Q);        /* x's: the next round */
    enq_sub(s, c, "w", Q);                      /* y owes nothing now: w takes its place */
    assert_int_equal(info(c).subtenants, 2);    /* x and w: y and the overflow, idle
                                                   and owing nothing, forgotten */
    done(s, fq_sched_dispatch(s, 0), Q);        /* w's */
    done(s, fq_sched_dispatch(s, 0), Q);        /* x's, its last: the next round */
    assert_int_equal(info(c).subtenants, 1);    /* x owes the rest of it */
    assert_int_equal(fq_sched_tenant_remove(s, c), FQ_OK);
    enq_sub(s, a, "x", Q);
    /* a tenant forgotten forgets its sub-tenants (ASan sees any leak) */
    done(s, fq_sched_dispatch(s, 0), Q);
    assert_int_equal(fq_sched_tenant_remove(s, a), FQ_OK);
    fq_sched_destroy(s);
}

/* A sub-tenant served on the new list that comes back in the same round
 * waits behind the old list: a closed loop of one run at a time cannot
 * keep its colleagues waiting by going idle between its runs. */
static void test_subtenant_coming_back_owes_its_round(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(64);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    uint64_t p[3];
    for (int k = 0; k < 3; k++)
        p[k] = enq_sub(s, a, "p", Q);
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, p[0]);      /* p spent its quantum: the old list */
    done(s, r, Q);
    uint64_t x = enq_sub(s, a, "x", Q);
    r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, x);         /* new: before p */
    done(s, r, Q);
    x = enq_sub(s, a, "x", Q);          /* back in the same round */
    r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, p[1]);      /* p's turn first */
    done(s, r, Q);
    r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->id, x);
    done(s, r, Q);
    assert_int_equal(info(a).subtenants, 2);
    fq_sched_destroy(s);
}

/* Classes and sub-tenants together: classes first, then sub-tenants
 * within a class. An interactive run of any user of a tenant leaves before
 * that tenant's batch runs; within each class the users share by tokens;
 * the tenant's share is what it is without either. */
static void test_classes_then_subtenants(void **state)
{
    (void)state;
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .max_expired = 16,
                       .nclasses = 2, .max_subtenants = 8};
    fq_sched *s = mk_opts(&o);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    for (int k = 0; k < 50; k++) {
        assert_int_equal(fq_sched_enqueue_sub(NULL, s, a, "flood", 5, 1, next_id++, Q, NULL, 0),
                         FQ_OK);
        enq(s, b, Q);
    }
    uint64_t i1 = next_id++, i2 = next_id++, i3 = next_id++;
    assert_int_equal(fq_sched_enqueue_sub(NULL, s, a, "u1", 2, 0, i1, Q, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_sub(NULL, s, a, "u1", 2, 0, i2, Q, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_sub(NULL, s, a, "u2", 2, 0, i3, Q, NULL, 0), FQ_OK);
    assert_int_equal(info(a).class_queued[0], 3);
    assert_int_equal(info(a).active_subtenants, 3);
    /* a's turns: the interactive runs first, u1's and u2's in turn; b's
     * turns between them are b's */
    uint64_t want[] = {i1, i3, i2};
    for (int k = 0; k < 3; k++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        assert_int_equal(r->id, want[k]);
        done(s, r, Q);
        r = fq_sched_dispatch(s, 0);
        assert_ptr_equal(r->tenant, b);
        done(s, r, Q);
    }
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_int_equal(r->cls, 1);        /* then flood's batch */
    assert_int_equal(info(a).dispatched, info(b).dispatched + 1);
    fq_sched_destroy(s);
}

/* Weighted classes (a tenant policy's class_weight): within the tenant
 * both classes are served, by tokens at their weights; strict serves the
 * higher first. Either way the tenant's share across tenants is the same. */
static void test_weighted_classes(void **state)
{
    (void)state;
    fq_sched *s = mk_classes(2, NULL);
    fq_tenant_policy w = {.weight = 1, .class_weight = {3, 1}};
    fq_tenant *a = NULL, *b = ten(s, "b", 1, 0, 0);
    assert_int_equal(fq_sched_tenant(&a, s, "a", 1, &w), FQ_OK);
    rng_state = 3;
    for (int k = 0; k < 400; k++) {
        assert_int_equal(fq_sched_enqueue_class(NULL, s, a, next_id++, (uint32_t)(k & 1),
                                                (uint32_t)rnd_in(100, 2000), NULL, 0), FQ_OK);
        enq(s, b, 1000);
    }
    uint64_t tok[2] = {0, 0}, ta = 0, tb = 0;
    for (int n = 0; n < 300; n++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        if (r->tenant == a) {
            tok[r->cls] += r->est;
            ta += r->est;
        } else {
            tb += r->est;
        }
        done(s, r, r->est);
    }
    assert_true(tok[1] > 0);
    /* 3:1 within two quanta of the largest run */
    assert_true(tok[0] + 2 * 2000 * 4 >= 3 * tok[1] && tok[0] <= 3 * tok[1] + 2 * 2000 * 4);
    assert_true((ta > tb ? ta - tb : tb - ta) <= Q + 2000);
    /* back to strict: interactive runs only, while a has them */
    w.class_weight[0] = 0;
    assert_int_equal(fq_tenant_set_policy(s, a, &w), FQ_OK);
    uint64_t before = tok[1];
    for (int n = 0; n < 40; n++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        if (r->tenant == a)
            tok[r->cls] += r->est;
        done(s, r, r->est);
    }
    assert_int_equal(tok[1], before);
    w.class_weight[1] = FQ_SCHED_MAX_CLASS_WEIGHT + 1;
    assert_int_equal(fq_tenant_set_policy(s, a, &w), FQ_EINVAL);
    fq_sched_destroy(s);
}

/* A tenant's own cap: the lower of its policy's and the scheduler's; 0 is
 * none (one FIFO, names ignored, as without sub-tenants); lowered to 0
 * while its sub-tenants have runs queued, they leave before the FIFO's. */
static void test_subtenants_tenant_cap(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(8);
    fq_tenant_policy one = {.weight = 1, .max_subtenants = 1}, off = {.weight = 1};
    fq_tenant *a = NULL, *b = NULL;
    assert_int_equal(fq_sched_tenant(&a, s, "a", 1, &one), FQ_OK);
    assert_int_equal(fq_sched_tenant(&b, s, "b", 1, &off), FQ_OK);
    enq_sub(s, a, "x", Q);
    enq_sub(s, a, "y", Q);      /* past a's cap of 1: the overflow one */
    enq_sub(s, a, "z", Q);
    assert_int_equal(info(a).subtenants, 2);
    /* b has none: its runs are one FIFO, whatever they name */
    uint64_t fifo[3] = {enq_sub(s, b, "p", Q), enq_sub(s, b, "q", Q), enq_sub(s, b, "p", Q)};
    assert_int_equal(info(b).subtenants, 0);
    for (int k = 0; k < 3; k++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        if (r->tenant == a) {
            done(s, r, Q);
            r = fq_sched_dispatch(s, 0);
        }
        assert_int_equal(r->id, fifo[k]);
        done(s, r, Q);
    }
    /* a's cap lowered to 0 with its sub-tenants' runs queued: x's two
     * stay x's, and "w" is a run that names none (a sub-tenant of its
     * own), sharing a's turns with x's until they are gone; then a's runs
     * join its FIFO */
    while (info(a).queued)
        done(s, fq_sched_dispatch(s, 0), Q);
    uint64_t x1 = enq_sub(s, a, "x", Q), x2 = enq_sub(s, a, "x", Q);
    assert_int_equal(fq_tenant_set_policy(s, a, &off), FQ_OK);
    uint64_t w = enq_sub(s, a, "w", Q);
    assert_int_equal(info(a).active_subtenants, 2);
    uint64_t got[3];
    for (int k = 0; k < 3; k++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        got[k] = r->id;
        done(s, r, Q);
    }
    /* w did not join the FIFO, which would have led: x's first goes first */
    assert_int_equal(got[0], x1);
    assert_true((got[1] == x2 && got[2] == w) || (got[1] == w && got[2] == x2));
    uint64_t f1 = enq_sub(s, a, "v", Q), f2 = enq_sub(s, a, "x", Q);
    assert_int_equal(info(a).active_subtenants, 0);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, f1);
    assert_int_equal(fq_sched_dispatch(s, 0)->id, f2);
    fq_sched_destroy(s);
}

/* ---- tenants let go (their partition moved) ------------------------------ */

typedef struct clear_seen {
    fq_tenant *let_go[4];
    uint64_t last[4];           /* per tenant let go: the last run id seen */
    size_t runs;
} clear_seen;

static int clear_ix(const clear_seen *c, const fq_tenant *t)
{
    for (int i = 0; i < 4; i++)
        if (c->let_go[i] == t)
            return i;
    return -1;
}

static bool clear_which(void *arg, const fq_tenant *t)
{
    return clear_ix(arg, t) >= 0;
}

static void clear_run(void *arg, const fq_run *r)
{
    clear_seen *c = arg;
    int i = clear_ix(c, r->tenant);
    assert_true(i >= 0);
    assert_true(r->id > c->last[i]);    /* each tenant's in its queue's order */
    c->last[i] = r->id;
    c->runs++;
}

/* Tenants let go wherever they are (in the rotation, waiting in debt, at
 * their cap, parked) leave it idle with nothing queued and no deficit; their
 * dispatched runs forgotten, they can be removed; the tenant kept is served
 * as before, alone. */
static void test_clear_tenants_let_go(void **state)
{
    (void)state;
    fq_sched *s = mk(6, 0, 0);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0), *c = ten(s, "c", 1, 1, 0);
    fq_tenant *d = ten(s, "d", 1, 0, 0), *e = ten(s, "e", 2, 0, 0);
    assert_int_equal(fq_tenant_set_debt(s, b, -40 * (int64_t)Q), FQ_OK);
    fq_tenant *all[] = {a, b, c, d, e};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 5; i++)
            enq(s, all[i], 400);
    fq_run *sent[6];
    size_t n = 0;
    for (fq_run *r; n < 3 && (r = fq_sched_dispatch(s, 1));)
        sent[n++] = r;
    fq_sched_park(s, d, 1000000);
    for (fq_run *r; n < 6 && (r = fq_sched_dispatch(s, 2));)
        sent[n++] = r;
    assert_int_equal(info(b).state, FQ_T_WAITING);
    assert_int_equal(info(c).state, FQ_T_CAPPED);
    assert_int_equal(info(d).state, FQ_T_PARKED);
    assert_int_equal(info(a).state, FQ_T_ACTIVE);
    /* Their dispatched runs first, then the tenants. */
    uint64_t kept_in_flight = 0;
    for (size_t i = 0; i < n; i++) {
        if (sent[i]->tenant == e) {
            kept_in_flight++;
            continue;
        }
        assert_int_equal(fq_sched_forget(s, sent[i]->id), FQ_OK);
    }
    clear_seen cs = {.let_go = {a, b, c, d}};
    size_t freed = fq_sched_clear(s, clear_which, clear_run, &cs);
    assert_int_equal(freed, cs.runs);
    fq_sched_stats st;
    fq_sched_stats_get(s, &st);
    assert_int_equal(st.in_flight, kept_in_flight);
    assert_int_equal(st.queued, 4 - kept_in_flight);
    assert_int_equal(freed + n - kept_in_flight, 16);
    for (int i = 0; i < 4; i++) {
        fq_tenant_info ti = info(all[i]);
        assert_int_equal(ti.state, FQ_T_IDLE);
        assert_int_equal(ti.queued, 0);
        assert_int_equal(ti.deficit, 0);
        assert_int_equal(ti.in_flight, 0);
        assert_int_equal(fq_sched_tenant_remove(s, all[i]), FQ_OK);
    }
    /* e alone, served to its end; the rounds and lists hold no one let go. */
    size_t more = 0;
    for (fq_run *r; (r = fq_sched_dispatch(s, 3)); more++)
        assert_ptr_equal(r->tenant, e);
    assert_int_equal(more, 4 - kept_in_flight);
    assert_int_equal(fq_sched_forget(s, 999999), FQ_ENOTFOUND);
    fq_sched_destroy(s);
}

/* What stats and explain read of sub-tenants: one by name (the overflow
 * one past the cap), and the few with the most queued. */
static void test_subtenants_info_and_top(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(2);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0);
    for (int k = 0; k < 5; k++)
        enq_sub(s, a, "x", Q);
    enq_sub(s, a, "y", Q);
    for (int k = 0; k < 3; k++)
        enq_sub(s, a, "", Q);   /* the runs naming none: not one of the cap's */
    enq_sub(s, a, "p", Q);      /* past the cap of 2: the overflow one */
    enq_sub(s, a, "q", Q);
    fq_sub_info i, top[3];
    assert_int_equal(fq_sched_sub_info(&i, s, a, "x", 1), FQ_OK);
    assert_string_equal(i.name, "x");
    assert_int_equal(i.queued, 5);
    assert_false(i.overflow);
    assert_int_equal(fq_sched_sub_info(&i, s, a, "zz", 2), FQ_OK);   /* would join it */
    assert_true(i.overflow);
    assert_int_equal(i.queued, 2);
    assert_int_equal(fq_sched_sub_info(&i, s, b, "x", 1), FQ_ENOTFOUND);
    assert_int_equal(fq_sched_sub_top(top, 3, s, a), 3);
    assert_string_equal(top[0].name, "x");
    assert_int_equal(top[0].queued, 5);
    assert_int_equal(top[1].queued, 3);
    assert_false(top[1].overflow);   /* the runs naming none */
    assert_string_equal(top[1].name, "");
    assert_int_equal(top[2].queued, 2);
    assert_true(top[2].overflow);
    assert_int_equal(fq_sched_sub_top(top, 1, s, a), 1);
    assert_int_equal(top[0].queued, 5);
    assert_int_equal(fq_sched_sub_top(top, 3, s, b), 0);
    fq_sched_destroy(s);
}

/* Sub-tenants kept in their tenant's allocation (names of up to 8 bytes,
 * the first few) and those apart read the same: their names, counts and
 * runs, as they are forgotten and others take their place. */
static void test_subtenants_inline_and_apart(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(6);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    const char *first[] = {"a", "bb", "cccccccc", "ddddddddd", "e", "f"};
    const char *then[] = {"g", "hhhhhhhhhhhh", "i", "jjjjjjjj", "k"};
    for (int k = 0; k < 6; k++)
        for (int n = 0; n <= k; n++)
            enq_sub(s, a, first[k], Q);
    fq_sub_info i;
    for (int k = 0; k < 6; k++) {
        assert_int_equal(fq_sched_sub_info(&i, s, a, first[k], strlen(first[k])), FQ_OK);
        assert_string_equal(i.name, first[k]);
        assert_int_equal(i.queued, k + 1);
        assert_false(i.overflow);
    }
    for (int k = 0; k < 21; k++)
        assert_non_null(fq_sched_dispatch(s, 0));
    assert_null(fq_sched_dispatch(s, 0));
    for (int k = 0; k < 5; k++)
        enq_sub(s, a, then[k], Q);
    for (int k = 0; k < 5; k++) {
        assert_int_equal(fq_sched_sub_info(&i, s, a, then[k], strlen(then[k])), FQ_OK);
        assert_string_equal(i.name, then[k]);
        assert_int_equal(i.queued, 1);
        assert_false(i.overflow);
    }
    for (int k = 0; k < 5; k++)
        assert_non_null(fq_sched_dispatch(s, 0));
    assert_null(fq_sched_dispatch(s, 0));
    fq_sched_destroy(s);
}

/* Lanes and index slots examined per dispatch between two snapshots. */
static double lane_visits_between(const fq_sched_stats *a, const fq_sched_stats *b)
{
    return (double)(b->lane_visits - a->lane_visits) / (double)(b->dispatched - a->dispatched);
}

/* Sub-tenant level work per dispatch stays O(1) with 10,000 sub-tenants,
 * as list visits do with 10,000 tenants: a tenant whose runs name 10,000
 * sub-tenants at random, and names past its cap (the overflow one, and
 * passes forgetting the idle to make room); then, its index grown, one
 * user of it sending a run at a time, its tenant's lanes emptying at each
 * dispatch (a pass each time its round moves). Beside it two tenants
 * whose runs name none. Costs from 0.1 to 50 quanta. */
static void test_lane_visits_per_dispatch_bounded(void **state)
{
    (void)state;
    enum { SUBS = 10000 };
    rng_state = 11;
    fq_sched *s = mk_subs(SUBS);
    fq_tenant *a = ten(s, "a", 1, 0, 0), *b = ten(s, "b", 1, 0, 0), *c = ten(s, "c", 2, 0, 0);
    char name[24];
    for (int u = 0; u < SUBS; u++) {
        snprintf(name, sizeof name, "user-%d", u);
        enq_sub(s, a, name, (uint32_t)rnd_in(Q / 10, 50 * Q));
    }
    for (int k = 0; k < 4; k++) {
        enq(s, b, (uint32_t)rnd_in(Q / 10, 50 * Q));
        enq(s, c, (uint32_t)rnd_in(Q / 10, 50 * Q));
    }
    assert_int_equal(info(a).subtenants, SUBS);
    fq_sched_stats st0, st1, st2;
    fq_sched_stats_get(s, &st0);
    /* a's runs name one of its 10,000, or one of 10,000 more past its cap */
    for (int i = 0; i < 200000; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        assert_non_null(r);
        fq_tenant *t = r->tenant;
        done(s, r, rnd_in(Q / 10, 50 * Q));
        if (t == a) {
            snprintf(name, sizeof name, "user-%d", (int)rnd_in(0, i % 4 ? SUBS - 1 : 2 * SUBS - 1));
            enq_sub(s, a, name, (uint32_t)rnd_in(Q / 10, 50 * Q));
        } else {
            enq(s, t, (uint32_t)rnd_in(Q / 10, 50 * Q));
        }
    }
    fq_sched_stats_get(s, &st1);
    double many = lane_visits_between(&st0, &st1);
    /* a's backlog drains; then one user of it sends a run at a time */
    bool sent = false;
    for (int i = 0; i < 200000; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        assert_non_null(r);
        fq_tenant *t = r->tenant;
        done(s, r, rnd_in(Q / 10, 50 * Q));
        if (t != a)
            enq(s, t, (uint32_t)rnd_in(Q / 10, 50 * Q));
        if (!info(a).queued) {
            if (!sent)
                fq_sched_stats_get(s, &st1);
            sent = true;
            enq_sub(s, a, "user-0", (uint32_t)rnd_in(Q / 10, 50 * Q));
        }
    }
    assert_true(sent);
    fq_sched_stats_get(s, &st2);
    double one = lane_visits_between(&st1, &st2);
    print_message("lane visits per dispatch: 10,000 sub-tenants %.3f, then one %.3f\n", many,
                  one);
    /* a run's lane in and out, and about one index slot to find its
     * sub-tenant; a's lanes empty at each of its dispatches in the second
     * part: a pass over its index, shrunk to the slots kept with it once
     * the 10,000 are forgotten (before, it read all 32,768 slots of the
     * index they had grown: 8,459 per dispatch) */
    assert_true(many <= 4.0);
    assert_true(one <= 8.0);
    fq_sched_destroy(s);
}

/* A queued run's sub-tenant from the run alone (explain, for a run whose
 * claim the caller did not keep): its lane's, named, naming none or the
 * overflow one, and none once the run has left its lane (dispatched, or
 * back from the window at its tenant's head), nor without sub-tenants. */
static void test_run_sub_info(void **state)
{
    (void)state;
    fq_sched *s = mk_subs(1);
    fq_tenant *a = ten(s, "a", 1, 0, 0);
    fq_run *x = NULL, *x2 = NULL, *none = NULL, *over = NULL;
    assert_int_equal(fq_sched_enqueue_sub(&x, s, a, "x", 1, 0, 1, Q, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_sub(&none, s, a, "", 0, 0, 2, Q, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_enqueue_sub(&over, s, a, "past-the-cap", 12, 0, 3, Q, NULL, 0),
                     FQ_OK);
    assert_int_equal(fq_sched_enqueue_sub(&x2, s, a, "x", 1, 0, 4, Q, NULL, 0), FQ_OK);
    fq_sub_info i;
    assert_int_equal(fq_sched_run_sub_info(&i, s, x2), FQ_OK);
    assert_string_equal(i.name, "x");
    assert_false(i.overflow);
    assert_int_equal(i.queued, 2);
    assert_int_equal(fq_sched_run_sub_info(&i, s, none), FQ_OK);
    assert_string_equal(i.name, "");
    assert_false(i.overflow);
    assert_int_equal(i.queued, 1);
    assert_int_equal(fq_sched_run_sub_info(&i, s, over), FQ_OK);
    assert_string_equal(i.name, "");
    assert_true(i.overflow);
    /* x leaves first (new list, in submit order): out of its lane */
    fq_run *r = fq_sched_dispatch(s, 0);
    assert_ptr_equal(r, x);
    assert_int_equal(fq_sched_run_sub_info(&i, s, x), FQ_ENOTFOUND);
    assert_int_equal(fq_sched_run_sub_info(&i, s, x2), FQ_OK);
    assert_int_equal(i.queued, 1);
    /* back from the window it leads its tenant's queue, in no lane */
    assert_int_equal(fq_sched_requeue(s, x->id), FQ_OK);
    assert_int_equal(x->state, FQ_RUN_QUEUED);
    assert_int_equal(fq_sched_run_sub_info(&i, s, x), FQ_ENOTFOUND);
    fq_sched_destroy(s);

    s = mk_subs(0);             /* no sub-tenants: nothing to say */
    a = ten(s, "a", 1, 0, 0);
    assert_int_equal(fq_sched_enqueue_sub(&x, s, a, "x", 1, 0, 1, Q, NULL, 0), FQ_OK);
    assert_int_equal(fq_sched_run_sub_info(&i, s, x), FQ_ENOTFOUND);
    fq_sched_destroy(s);
}

/* Runs in the caller's records (caller_runs): each run taken in is the
 * record handed over, the scheduler allocates none, and a record it lets
 * go (completed, cancelled, evicted) or refused stays the caller's as it
 * was left: nothing written into it after, its state FQ_RUN_FREE. The
 * scheduler keeps no index by id (the caller names runs by record) and
 * never touches a record's hnode, the caller's link in its own index. */
typedef struct caller_rec {
    fq_run run;                 /* the scheduler's while it holds the run */
    uint64_t tag;               /* the caller's own */
} caller_rec;

static void on_evict(void *arg, const fq_run *r, enum fq_expiry what)
{
    if (what == FQ_EXPIRY_EVICTED)
        *(const fq_run **)arg = r;
}

static void test_caller_runs(void **state)
{
    (void)state;
    fq_sched_opts o = {.quantum = Q, .max_est_tokens = 1000000, .max_in_flight = 4,
                       .run_timeout = 100, .max_expired = 1, .caller_runs = true};
    fq_sched *s = mk_opts(&o);
    fq_tenant *a = ten(s, "a", 1, 0, 2);
    caller_rec rec[4];
    memset(rec, 0, sizeof rec);
    for (int i = 0; i < 4; i++) {
        rec[i].tag = 100 + (uint64_t)i;
        rec[i].run.hnode.next = (fq_u64map_node *)(void *)&rec[i].tag;
    }
    fq_run *r = NULL;
    /* Nothing handed over: none is allocated. */
    assert_int_equal(fq_sched_enqueue(&r, s, a, 1, 10, &rec[0], 0), FQ_ENOMEM);
    fq_sched_give_run(s, &rec[0].run);
    assert_int_equal(fq_sched_enqueue(&r, s, a, 1, 10, &rec[0], 0), FQ_OK);
    assert_ptr_equal(r, &rec[0].run);
    fq_sched_give_run(s, &rec[1].run);
    assert_int_equal(fq_sched_enqueue(&r, s, a, 2, 20, &rec[1], 0), FQ_OK);
    assert_ptr_equal(r, &rec[1].run);
    /* Refused (max_pending 2): the record handed over is not taken. */
    rec[2].run.id = 77;
    fq_sched_give_run(s, &rec[2].run);
    assert_int_equal(fq_sched_enqueue(&r, s, a, 3, 30, &rec[2], 0), FQ_EFULL);
    assert_int_equal(rec[2].run.id, 77);
    /* Dispatched in order, the records themselves. */
    fq_run *d0 = fq_sched_dispatch(s, 1), *d1 = fq_sched_dispatch(s, 1);
    assert_ptr_equal(d0, &rec[0].run);
    assert_ptr_equal(d1, &rec[1].run);
    assert_int_equal(rec[1].run.state, FQ_RUN_FLIGHT);
    assert_null(fq_sched_run(s, 2));                                /* no index by id */
    assert_int_equal(fq_sched_complete(NULL, s, 1, 10), FQ_ENOTFOUND);
    /* Completed: let go, and never written again (no free list reuses it). */
    assert_int_equal(fq_sched_complete_run(NULL, s, &rec[0].run, 10, 10), FQ_OK);
    assert_int_equal(rec[0].run.state, FQ_RUN_FREE);
    assert_int_equal(fq_sched_complete_run(NULL, s, &rec[0].run, 10, 10), FQ_ENOTFOUND);
    caller_rec done = rec[0];
    /* Adopted into a record handed over; the lease of id 2 runs out, and
     * past max_expired it is evicted: the callback sees the record. */
    fq_sched_give_run(s, &rec[3].run);
    assert_int_equal(fq_sched_adopt(&r, s, a, 4, 40, &rec[3], 50), FQ_OK);
    assert_ptr_equal(r, &rec[3].run);
    const fq_run *evicted = NULL;
    fq_sched_expire(s, 101, on_evict, &evicted);
    assert_null(evicted);
    fq_sched_expire(s, 151, on_evict, &evicted);
    assert_ptr_equal(evicted, &rec[1].run);
    assert_int_equal(rec[1].run.state, FQ_RUN_FREE);
    caller_rec gone = rec[1];
    /* More runs taken in, dispatched and completed: the records let go
     * stay as they were left. */
    fq_sched_give_run(s, &rec[2].run);
    assert_int_equal(fq_sched_enqueue(&r, s, a, 3, 30, &rec[2], 200), FQ_OK);
    assert_ptr_equal(fq_sched_dispatch(s, 200), &rec[2].run);
    assert_int_equal(fq_sched_complete_run(NULL, s, &rec[2].run, 30, 30), FQ_OK);
    assert_int_equal(fq_sched_enqueue(&r, s, a, 5, 50, &rec[2], 200), FQ_ENOMEM);
    assert_memory_equal(&rec[0], &done, sizeof done);
    assert_memory_equal(&rec[1], &gone, sizeof gone);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(rec[i].tag, 100 + (uint64_t)i);
        assert_ptr_equal(rec[i].run.hnode.next, &rec[i].tag);
    }
    fq_sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_card_scenario),
        cmocka_unit_test(test_token_metering_not_request_counting),
        cmocka_unit_test(test_weights_give_token_shares),
        cmocka_unit_test(test_random_fairness_bound),
        cmocka_unit_test(test_idle_return_gains_at_most_one_quantum),
        cmocka_unit_test(test_debt_survives_idle_and_duplicates_change_nothing),
        cmocka_unit_test(test_refund_to_idle_tenant_is_not_banked),
        cmocka_unit_test(test_reconciliation_evens_actual_spend),
        cmocka_unit_test(test_max_pending_refuses_whole),
        cmocka_unit_test(test_classes_order_within_a_tenant_only),
        cmocka_unit_test(test_class_jumps_its_tenants_backlog),
        cmocka_unit_test(test_class_max_pending_and_requeue),
        cmocka_unit_test(test_subtenant_flood_delays_no_first_run),
        cmocka_unit_test(test_subtenants_divide_a_share),
        cmocka_unit_test(test_subtenants_capped_and_forgotten),
        cmocka_unit_test(test_subtenants_tenant_cap),
        cmocka_unit_test(test_subtenants_info_and_top),
        cmocka_unit_test(test_run_sub_info),
        cmocka_unit_test(test_subtenants_inline_and_apart),
        cmocka_unit_test(test_lane_visits_per_dispatch_bounded),
        cmocka_unit_test(test_subtenant_coming_back_owes_its_round),
        cmocka_unit_test(test_classes_then_subtenants),
        cmocka_unit_test(test_weighted_classes),
        cmocka_unit_test(test_tenant_cap_leaves_rotation),
        cmocka_unit_test(test_burst_cap_binds_only_under_contention),
        cmocka_unit_test(test_burst_cap_not_when_others_queue),
        cmocka_unit_test(test_token_rate_parks_by_time),
        cmocka_unit_test(test_token_rate_off_changes_nothing),
        cmocka_unit_test(test_priced_completion_reconciles_cost),
        cmocka_unit_test(test_window_runs_and_tokens),
        cmocka_unit_test(test_lease_expiry_and_late_completion),
        cmocka_unit_test(test_expired_records_are_bounded),
        cmocka_unit_test(test_evictions_are_reported),
        cmocka_unit_test(test_huge_runs_starve_no_one),
        cmocka_unit_test(test_visits_per_dispatch_bounded),
        cmocka_unit_test(test_ratio_one_is_one_visit),
        cmocka_unit_test(test_debt_beyond_the_wheel_horizon),
        cmocka_unit_test(test_only_debtors_jump_to_their_rounds),
        cmocka_unit_test(test_quantum_change_moves_waiting_debtors),
        cmocka_unit_test(test_reconcile_moves_debtor_across_the_horizon),
        cmocka_unit_test(test_policy_change_keeps_place_and_runs),
        cmocka_unit_test(test_requeue_returns_run_to_head),
        cmocka_unit_test(test_cancel_refunds_and_uncounts),
        cmocka_unit_test(test_tenant_remove_only_when_it_holds_nothing),
        cmocka_unit_test(test_seed_keys_the_tenant_table),
        cmocka_unit_test(test_tokens_ahead_bound),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_weight_raise_while_waiting_is_not_retroactive),
        cmocka_unit_test(test_quantum_change_while_waiting_is_not_retroactive),
        cmocka_unit_test(test_requeue_age_counts_from_dispatch),
        cmocka_unit_test(test_parked_tenant_stops_no_one),
        cmocka_unit_test(test_park_reaches_a_waiting_tenant),
        cmocka_unit_test(test_requeue_keeps_dispatch_order),
        cmocka_unit_test(test_requeue_of_an_expired_run),
        cmocka_unit_test(test_debt_saturates),
        cmocka_unit_test(test_quantum_times_weight_is_bounded),
        cmocka_unit_test(test_adopt_restores_the_window),
        cmocka_unit_test(test_debt_life),
        cmocka_unit_test(test_absurd_actual_is_bounded),
        cmocka_unit_test(test_keep_idle_credit_banks),
        cmocka_unit_test(test_rank_follows_the_queues),
        cmocka_unit_test(test_clear_tenants_let_go),
        cmocka_unit_test(test_caller_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
