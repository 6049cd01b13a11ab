/* sharecheck.c -- the shares of issue 16 point 4, measured live (sharecheck.h). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "partition.h"
#include "sharecheck.h"

void sc_name_on(char *out, size_t cap, const char *prefix, int parts, int k)
{
    for (int n = 0;; n++) {
        snprintf(out, cap, "%s%d", prefix, n);
        if (fq_partition_of(out, strlen(out), (uint32_t)parts) == (uint32_t)k)
            return;
    }
}

/* n runs of tenant, est tokens each, run ids <tenant>-<i>. */
static void sc_backlog(pf_fixture *f, const char *tenant, int n, uint32_t est)
{
    char body[96], e[16];
    snprintf(e, sizeof e, "%u", est);
    const char *hdrs[] = {"Fair-Est-Tokens", e, NULL};
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof body, "{\"run_id\":\"%s-%d\"}", tenant, i);
        assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), hdrs), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
}

/* The tokens the workers processed for tenant within [t1, t2) (ms,
 * monotonic): each run's actual tokens, spread over its service. */
static double sc_served(pf_fixture *f, const sc_world *w, const char *tenant, long long t1,
                        long long t2)
{
    double sum = 0;
    size_t n = pt_worker_received(f->w);
    for (size_t i = 0; i < n; i++) {
        pt_seen s = pt_worker_seen(f->w, i);
        if (strcmp(s.tenant, tenant) != 0)
            continue;
        double start = (double)s.at_ms, len = (double)s.est * w->us_per_token / 1000.0;
        double from = start > (double)t1 ? start : (double)t1;
        double to = start + len < (double)t2 ? start + len : (double)t2;
        if (to > from && len > 0)
            sum += (double)(s.actual ? s.actual : s.est) * (to - from) / len;
    }
    return sum;
}

/*
 * The bound of docs/scaling.md for tokens processed over an interval of
 * T seconds in steady state, tenant a alone on replica A (weight wa), b
 * alone on B (wb), a window of g runs, workers of r tokens a second, the
 * shorter runs taking s seconds:
 *
 *   |S_a/wa - S_b/wb| <= r T |g_A/wa - g_B/wb| + r T (g/W) δ/(s + δ)
 *
 * g_X the replica's share of the window in whole runs, W = wa + wb, δ (d
 * here) the turnaround of a slot (a completion to the next run at a
 * worker), taken as one heartbeat period p. No DRR term: each replica has
 * one tenant.
 */
static double sc_bound(const sc_world *w, double T, int wa, int wb, double s)
{
    double r = 1e6 / w->us_per_token, d = w->period_ms / 1000.0;
    double W = wa + wb, ga = floor(w->window * wa / W + 0.5), gb = w->window - ga;
    return r * T * fabs(ga / wa - gb / wb) + r * T * (w->window / W) * d / (s + d);
}

/* The replicas' heartbeats (config/fairq.yaml's subjects.share; the
 * tests keep the default). */
#define SC_SHARE_SUBJECT "fairq.share"

/*
 * Wait, reading the heartbeats on beats, until a backlogged replica says it
 * holds at least n runs, then for that replica's next beat: by then every
 * replica has heard the first, a period ago. Up to 10 s; fails the test.
 * Whatever a replica decides on an older beat (the room the others leave
 * it) is up to a period stale; with runs of 50 s, what it takes on that
 * room it holds 50 s (docs/scaling.md, "The bound", point 5).
 */
static void sc_wait_heard_holding(natsSubscription *beats, uint64_t n)
{
    char id[80] = "";
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end;) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, beats, 200) != NATS_OK)
            continue;
        cJSON *b = cJSON_ParseWithLength(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
        natsMsg_Destroy(m);
        const cJSON *bid = cJSON_GetObjectItemCaseSensitive(b, "id");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(b, "weight");
        const cJSON *runs = cJSON_GetObjectItemCaseSensitive(b, "runs");
        bool full = cJSON_IsString(bid) && cJSON_IsNumber(w) && cJSON_IsNumber(runs) &&
                    w->valuedouble > 0 && runs->valuedouble >= (double)n;
        bool again = full && id[0] && strcmp(id, bid->valuestring) == 0;
        if (full && !id[0])
            snprintf(id, sizeof id, "%s", bid->valuestring);
        cJSON_Delete(b);
        if (again)
            return;
    }
    fail_msg("no replica said it holds %llu runs twice within 10 s", (unsigned long long)n);
}

/* Wait until the workers received n runs in all, up to 10 s. */
static void sc_wait_received(pf_fixture *f, size_t n)
{
    for (long long end = nt_now_ms() + 10000; pt_worker_received(f->w) < n && nt_now_ms() < end;)
        nt_sleep_ms(20);
}

int sc_shares(pf_fixture *f, const sc_world *w, const char *a, int wa, uint32_t est_a,
              const char *b, int wb, uint32_t est_b)
{
    /* enough runs for either tenant to fill the whole window throughout */
    double r = 1e6 / w->us_per_token;
    int secs = (2 * w->period_ms + 2000 + w->interval_ms) / 1000 + 2;
    int na = w->window + 2 + (int)(w->window * secs * r / est_a);
    int nb = w->window + 2 + (int)(w->window * secs * r / est_b);
    size_t base = pt_worker_received(f->w);
    natsSubscription *beats = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&beats, f->c.nc, SC_SHARE_SUBJECT), NATS_OK);
    sc_backlog(f, a, na, est_a);
    /* b's runs once a's replica holds the window and b's has heard it:
     * were b's the costlier and first, its replica would fill the window
     * with them and hold it a service time of theirs (docs/scaling.md,
     * "Measured live"); so would it on a beat of a's replica from before
     * that replica filled the window, as it did in 4 runs of 11 before
     * this wait (the 50 s runs held 7 slots of 8 throughout) */
    sc_wait_received(f, base + (size_t)w->window);
    sc_wait_heard_holding(beats, (uint64_t)w->window);
    natsSubscription_Destroy(beats);
    sc_backlog(f, b, nb, est_b);
    double s = (double)(est_a < est_b ? est_a : est_b) * w->us_per_token / 1e6;
    long long t1 = nt_now_ms() + 2 * w->period_ms + (long long)(s * 1000) + 1000;
    long long t2 = t1 + w->interval_ms;
    while (nt_now_ms() < t2)
        nt_sleep_ms(100);
    double sa = sc_served(f, w, a, t1, t2), sb = sc_served(f, w, b, t1, t2);
    double T = w->interval_ms / 1000.0, lim = sc_bound(w, T, wa, wb, s);
    double slots = (sa + sb) / (r * T);
    double q = sb > 0 ? (sa / wa) / (sb / wb) : 0;
    print_message("%s (w %d, %u-token runs): %.0f tokens, %.2f%% (one proxy %.2f%%); %s (w %d, "
                  "%u-token runs): %.0f; over %d ms: |S_a/w_a - S_b/w_b| = %.0f, bound %.0f; "
                  "(S_a/w_a)/(S_b/w_b) = %.3f; slots busy %.2f of %d\n",
                  a, wa, est_a, sa, sa + sb > 0 ? 100 * sa / (sa + sb) : 0, 100.0 * wa / (wa + wb),
                  b, wb, est_b, sb, w->interval_ms, fabs(sa / wa - sb / wb), lim, q, slots,
                  w->window);
    assert_true(sa > 0 && sb > 0);
    assert_true(fabs(sa / wa - sb / wb) <= lim);
    assert_true(fabs(q - 1) <= 0.10);
    return na + nb;
}

int sc_first_run(pf_fixture *f, const sc_world *w, const char *flood, uint32_t est,
                 const char *small)
{
    size_t base = pt_worker_received(f->w);
    pt_worker_hold(f->w, true);
    size_t done = pt_worker_completed(f->w);
    sc_backlog(f, flood, 4 * w->window, est);
    /* the whole window to the flood */
    sc_wait_received(f, base + (size_t)w->window);
    assert_int_equal(pt_worker_received(f->w), base + (size_t)w->window);
    long long t0 = nt_now_ms();
    sc_backlog(f, small, 1, est);
    sc_wait_received(f, base + (size_t)w->window + 1);
    assert_int_equal(pt_worker_received(f->w), base + (size_t)w->window + 1);
    pt_seen s = pt_worker_seen(f->w, base + (size_t)w->window);
    assert_string_equal(s.tenant, small);
    print_message("%s's first run received %lld ms after its submit, %s holding the window\n",
                  small, s.at_ms - t0, flood);
    assert_int_equal(pt_worker_completed(f->w), done);  /* the flood still holds the window */
    pt_worker_hold(f->w, false);
    /* and the flood is served on */
    assert_int_equal(pt_worker_wait_completed(f->w, done + (size_t)w->window + 2, 20000), 0);
    return 4 * w->window + 1;
}
