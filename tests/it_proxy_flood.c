/* it_proxy_flood.c -- the design card's scenario end to end: one tenant floods 900 runs, ten others are not put behind it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxyfixture.h"

#define FLOOD 900
#define SMALL 10
#define WINDOW 8
#define QUANTUM 1000   /* scheduler.quantum_tokens */
#define EST 1000       /* estimates.default_tokens: every run's estimate (its actual too) */
#define BODY 512

static int teardown(void **state)
{
    pf_teardown(state, false);
    return 0;
}

static int start(void **state, const char *limits)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "scheduler:\n  default_plan: free\n  quantum_tokens: %d\n"
             "estimates:\n  default_tokens: %d\n"
             "window:\n  max_in_flight: %d\n%s"
             "plans:\n  - name: free\n    weight: 1\n",
             QUANTUM, EST, WINDOW, limits);
    pt_worker_opts wo = {.concurrency = 2 * WINDOW, .service_ms = 10};
    return pf_setup(state, yaml, &wo);
}

static int setup_memory(void **state)
{
    return start(state, "");
}

/* Far below the flood: about seven bodies fit, the rest are index entries. */
static int setup_small_buffer(void **state)
{
    return start(state, "limits:\n  max_buffered_bytes: 4096\n");
}

/* The body of a run: JSON naming it, padded to BODY bytes. */
static size_t body_of(char *buf, const char *run_id)
{
    int k = snprintf(buf, BODY + 1, "{\"run_id\":\"%s\",\"pad\":\"", run_id);
    for (; k < BODY - 2; k++)
        buf[k] = (char)('a' + k % 26);
    buf[k++] = '"';
    buf[k++] = '}';
    buf[k] = '\0';
    return (size_t)k;
}

/* Hold the workers and wait until nothing can be dispatched until they go
 * on: the window full (WINDOW runs in flight), every completion they sent
 * taken in, every dispatch stored. Returns FAIR_DISPATCH's last sequence
 * then. A state, not a time: what the proxy does next depends on nothing
 * that the machine's load can stretch. */
static uint64_t freeze(pf_fixture *f)
{
    pt_worker_hold(f->w, true);
    for (int i = 0; i < 4000; i++) {
        size_t sent = pt_worker_completed(f->w);
        cJSON *j = pf_stats(f, "", NULL);
        long in_flight = pf_overall(j, "in_flight"), dispatched = pf_overall(j, "dispatched");
        long taken = pf_overall(j, "completions") + pf_overall(j, "completions_unheld");
        cJSON_Delete(j);
        uint64_t last = pt_stream_last(&f->c, "FAIR_DISPATCH");
        if (in_flight == WINDOW && (size_t)taken == sent && last == (uint64_t)dispatched)
            return last;
        nt_sleep_ms(5);
    }
    fail_msg("the proxy's window did not fill with the workers held");
    return 0;
}

/* Wait until the proxy has taken in n submits. */
static void wait_submitted(pf_fixture *f, long n)
{
    for (int i = 0; i < 4000; i++) {
        cJSON *j = pf_stats(f, "", NULL);
        long got = pf_overall(j, "submitted");
        cJSON_Delete(j);
        if (got >= n)
            return;
        nt_sleep_ms(5);
    }
    fail_msg("the proxy did not take in submit %ld", n);
}

/* Wait until the workers have received run_id. */
static void wait_received(pf_fixture *f, const char *run_id)
{
    for (int i = 0; i < 4000; i++) {
        for (size_t k = pt_worker_received(f->w); k-- > 0;)
            if (strcmp(pt_worker_seen(f->w, k).run_id, run_id) == 0)
                return;
        nt_sleep_ms(5);
    }
    fail_msg("%s was not dispatched", run_id);
}

static void card_scenario(pf_fixture *f)
{
    char body[BODY + 1], id[64];
    for (int i = 0; i < FLOOD; i++) {
        snprintf(id, sizeof id, "loud-%d", i);
        assert_int_equal(pt_submit_async(&f->c, "loud", body, body_of(body, id), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
    /* Small tenants arrive while the flood is being served, one at a
     * time: each taken in by the proxy while its window is full of the
     * flood's runs and nothing can be dispatched, so that the dispatches
     * counted from then on are the scheduler's order alone, not how long
     * the submit took to reach the proxy (under load, that was enough
     * dispatches to miss the bound). Then the workers go on until the
     * small run has been dispatched. */
    uint64_t before[SMALL];
    for (int k = 0; k < SMALL; k++) {
        char tenant[24];
        snprintf(tenant, sizeof tenant, "small%d", k);
        snprintf(id, sizeof id, "small-%d", k);
        before[k] = freeze(f);
        assert_int_equal(pt_submit(&f->c, tenant, body, body_of(body, id), NULL), 0);
        wait_submitted(f, FLOOD + k + 1);
        pt_worker_hold(f->w, false);
        wait_received(f, id);
    }
    assert_int_equal(pt_worker_wait_completed(f->w, FLOOD + SMALL, 60000), 0);

    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &n), 0);
    /* Every run dispatched exactly once, its body intact. */
    assert_int_equal(n, FLOOD + SMALL);
    static char seen[FLOOD + SMALL];
    memset(seen, 0, sizeof seen);
    uint64_t small_at[SMALL] = {0};
    for (size_t i = 0; i < n; i++) {
        int k;
        if (sscanf(m[i].run_id, "loud-%d", &k) == 1) {
            assert_string_equal(m[i].tenant, "loud");
            assert_true(k >= 0 && k < FLOOD);
        } else {
            assert_int_equal(sscanf(m[i].run_id, "small-%d", &k), 1);
            assert_true(k >= 0 && k < SMALL);
            small_at[k] = m[i].seq;
            k += FLOOD;
        }
        assert_int_equal(seen[k], 0);
        seen[k] = 1;
        assert_int_equal(m[i].len, body_of(body, m[i].run_id));
        assert_memory_equal(m[i].data, body, m[i].len);
        assert_true(m[i].dispatched_at >= m[i].submitted_at);
    }
    /* Each small run is among the first dispatches after it was taken in,
     * where FIFO would put it behind the flood's remaining hundreds. The
     * bound is deficit round robin's on this configuration: taken in with
     * nothing dispatchable and the earlier small runs dispatched, the small
     * tenant waits for the one other tenant with runs queued, the flood,
     * whose turn dispatches at most ceil(QUANTUM / EST) runs (equal
     * weights; the workers report actual = estimate, so the estimate stays
     * EST), then its run goes. */
    const uint64_t bound = (QUANTUM + EST - 1) / EST + 1;
    uint64_t loud_after_last_small = 0, worst = 0;
    for (int k = 0; k < SMALL; k++) {
        assert_true(small_at[k] > before[k]);
        if (small_at[k] - before[k] > worst)
            worst = small_at[k] - before[k];
        if (small_at[k] - before[k] > bound)
            fail_msg("small%d dispatched %llu after it was taken in; bound %llu", k,
                     (unsigned long long)(small_at[k] - before[k]), (unsigned long long)bound);
    }
    for (size_t i = 0; i < n; i++)
        loud_after_last_small += m[i].seq > small_at[SMALL - 1] && strcmp(m[i].tenant, "loud") == 0;
    /* The flood was still there: FIFO would have put every small run
     * behind these. */
    assert_true(loud_after_last_small > 300);
    fprintf(stderr, "card scenario: worst small-tenant run dispatched %llu dispatches after it "
            "was taken in (bound %llu); %llu flood runs still went after the last one\n",
            (unsigned long long)worst, (unsigned long long)bound,
            (unsigned long long)loud_after_last_small);
    pt_msgs_free(m, n);
}

static void test_card_scenario(void **state)
{
    pf_fixture *f = *state;
    card_scenario(f);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "dispatched"), FLOOD + SMALL);
    assert_int_equal(pf_overall(j, "body_reads"), 0);
    assert_int_equal(pf_overall(j, "buffered_runs"), 0);
    cJSON_Delete(j);
}

static void test_card_scenario_small_buffer(void **state)
{
    pf_fixture *f = *state;
    card_scenario(f);
    cJSON *j = pf_stats(f, "", NULL);
    /* Most bodies were read back by sequence at dispatch. */
    assert_true(pf_overall(j, "body_reads") > FLOOD / 2);
    assert_int_equal(pf_overall(j, "body_lost"), 0);
    assert_int_equal(pf_overall(j, "buffered_bytes"), 0);
    assert_int_equal(pf_overall(j, "index_only_runs"), 0);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_card_scenario, setup_memory, teardown),
        cmocka_unit_test_setup_teardown(test_card_scenario_small_buffer, setup_small_buffer,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
