/* it_leader.c -- the leader lease's I/O against a real nats-server: taking it, standing by, renewing, fencing, handing it back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "leader.h"
#include "natstest.h"

#define RENEW_TOKEN 101
#define RELEASE_TOKEN 102
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

static void on_lead(void *arg, uint64_t term)
{
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
                             .renew_token = RENEW_TOKEN, .release_token = RELEASE_TOKEN,
                             .lead = on_lead, .arg = s};
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

/* Hand s's PubAcks to its leader until token's has come. */
static void settle(side *s, uint64_t token)
{
    long long end = nt_now_ms() + 5000;
    while (nt_now_ms() < end) {
        fq_nio_event ev;
        if (fq_nio_poll(s->n, &ev, 1, 50) == 0)
            continue;
        if (ev.type != FQ_NIO_EV_PUBACK)
            continue;
        fq_leader_on_puback(s->l, &ev);
        if (ev.token == token)
            return;
    }
    fail_msg("no PubAck of token %llu", (unsigned long long)token);
}

static void test_take_standby_renew_fence_release(void **state)
{
    fixture *f = *state;
    side *a = &f->s[0], *b = &f->s[1];
    char why[256];

    fq_leader_step(a->l, fq_nio_mono_ms());
    assert_int_equal(fq_leader_lease(a->l)->state, FQ_LEASE_LEADING);
    assert_int_equal(a->leads, 1);
    assert_true(a->term > 0);
    assert_true(fq_leader_fresh(a->l, fq_nio_mono_ms()));
    fq_probes_phase(a->pr, FQ_PHASE_SERVING);
    assert_int_equal(fq_probes_ready_state(a->pr, fq_nio_mono_ms(), why, sizeof why),
                     FQ_READY_OK);

    /* The other stands by, and its probes say who leads. */
    fq_leader_step(b->l, fq_nio_mono_ms());
    assert_int_equal(fq_leader_lease(b->l)->state, FQ_LEASE_STANDBY);
    assert_int_equal(b->leads, 0);
    fq_probes_phase(b->pr, FQ_PHASE_STANDBY);
    assert_int_equal(fq_probes_ready_state(b->pr, fq_nio_mono_ms(), why, sizeof why),
                     FQ_READY_STANDBY);
    assert_string_equal(why, "standby: proxy-a holds the leader lease");

    /* A renewal does not wait; its PubAck confirms a later send. */
    uint64_t sent = fq_leader_lease(a->l)->confirmed_sent;
    uint64_t due = fq_nio_mono_ms() + fq_leader_lease(a->l)->o.renew_ms;
    assert_true(fq_leader_renew(a->l, due, true));
    settle(a, RENEW_TOKEN);
    assert_true(fq_leader_lease(a->l)->confirmed_sent > sent);
    assert_int_equal(fq_leader_lease(a->l)->state, FQ_LEASE_LEADING);

    /* Fenced: not fresh, and not ready from the next step on, whatever the
     * lease says. */
    fq_leader_fence(a->l);
    assert_false(fq_leader_fresh(a->l, fq_nio_mono_ms()));
    assert_true(fq_leader_renew(a->l, fq_nio_mono_ms(), true));
    assert_int_equal(fq_probes_ready_state(a->pr, fq_nio_mono_ms(), why, sizeof why),
                     FQ_READY_LEASE_STALE);

    /* Handed back at a stop: the standby takes it at its next read, in a
     * later term. */
    assert_true(fq_leader_release(a->l));
    assert_true(fq_leader_releasing(a->l));
    settle(a, RELEASE_TOKEN);
    assert_false(fq_leader_releasing(a->l));
    fq_leader_step(b->l, fq_nio_mono_ms() + fq_leader_lease(b->l)->o.retry_ms); /* its read */
    assert_int_equal(fq_leader_lease(b->l)->state, FQ_LEASE_LEADING);
    assert_int_equal(b->leads, 1);
    assert_true(b->term > a->term);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_standby_renew_fence_release),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
