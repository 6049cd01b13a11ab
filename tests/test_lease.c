/* test_lease.c -- the ownership lease in virtual time: taking, renewing, freshness, clock jumps, late confirmations, loss. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lease.h"

#define TTL 3000
#define MARGIN 500
#define RENEW 1000
#define RETRY 500

static const fq_lease_opts opts = {.ttl_ms = TTL, .margin_ms = MARGIN, .renew_ms = RENEW,
                                   .retry_ms = RETRY, .answer_ms = TTL - MARGIN};

/* The options of a TTL (streams.lease_ttl_ms) keep the 3 s lease's
 * ratios: the default is exactly the lease measured, and a 10 s lease
 * renews every 3.3 s, is fresh until 1.66 s before its end, and a standby
 * reads every 1.66 s; the shortest allowed still has a margin and a
 * renewal that may fail twice before it is stale. */
static void test_opts_for_a_ttl(void **state)
{
    (void)state;
    fq_lease_opts o;
    fq_lease_opts_for(&o, FQ_LEASE_TTL_DEFAULT_MS);
    assert_memory_equal(&o, &opts, sizeof o);
    fq_lease_opts_for(&o, 10000);
    assert_int_equal(o.ttl_ms, 10000);
    assert_int_equal(o.renew_ms, 3333);
    assert_int_equal(o.margin_ms, 1666);
    assert_int_equal(o.retry_ms, 1666);
    fq_lease l;
    assert_int_equal(fq_lease_init(&l, "leader", "me", &o), FQ_OK);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 1000);
    fq_lease_on_get(&s, &l, l.req, 1001, FQ_ENOTFOUND, NULL, 0);
    fq_lease_on_write(&s, &l, l.req, 1002, FQ_OK, 5);      /* the create, sent at 1001 */
    assert_true(s.lead);
    assert_true(fq_lease_fresh(&l, 1001 + 10000 - 1666 - 1));
    assert_false(fq_lease_fresh(&l, 1001 + 10000 - 1666));
    fq_lease_tick(&s, &l, 1001 + 3333 - 1);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    fq_lease_tick(&s, &l, 1001 + 3333);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    fq_lease_opts_for(&o, FQ_LEASE_TTL_MIN_MS);
    assert_true(o.margin_ms > 0 && o.margin_ms < o.ttl_ms);
    assert_true(o.ttl_ms - o.margin_ms > 2 * o.renew_ms);
    assert_int_equal(fq_lease_init(&l, "leader", "me", &o), FQ_OK);
}

/* A standby at t that finds the key absent and takes it with revision rev. */
static void take(fq_lease *l, uint64_t t, uint64_t rev)
{
    assert_int_equal(fq_lease_init(l, "leader", "me", &opts), FQ_OK);
    fq_lease_step s;
    fq_lease_tick(&s, l, t);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    fq_lease_on_get(&s, l, l->req, t + 1, FQ_ENOTFOUND, NULL, 0);
    assert_int_equal(s.op, FQ_LEASE_OP_CREATE);
    assert_string_equal(s.value, "me");
    fq_lease_on_write(&s, l, l->req, t + 2, FQ_OK, rev);
    assert_true(s.lead);
    assert_int_equal(s.term, rev);
    assert_int_equal(l->state, FQ_LEASE_LEADING);
}

static void test_init_refuses_what_cannot_work(void **state)
{
    (void)state;
    fq_lease l;
    fq_lease_opts o = opts;
    assert_int_equal(fq_lease_init(&l, "leader", FQ_LEASE_RELEASED, &o), FQ_EINVAL);
    assert_int_equal(fq_lease_init(&l, "", "me", &o), FQ_EINVAL);
    o.margin_ms = TTL;
    assert_int_equal(fq_lease_init(&l, "leader", "me", &o), FQ_EINVAL);
    o = opts;
    o.renew_ms = 0;
    assert_int_equal(fq_lease_init(&l, "leader", "me", &o), FQ_EINVAL);
    assert_int_equal(fq_lease_init(&l, "partition-7", "me", &opts), FQ_OK);
    assert_false(fq_lease_fresh(&l, 1000));
}

/* Fresh is measured from the send time of the taking write, and ends
 * ttl - margin after it. */
static void test_fresh_from_the_send_time(void **state)
{
    (void)state;
    fq_lease l;
    take(&l, 1000, 7);
    /* The create was sent at 1001. */
    assert_true(fq_lease_fresh(&l, 1002));
    assert_true(fq_lease_fresh(&l, 1001 + TTL - MARGIN - 1));
    assert_false(fq_lease_fresh(&l, 1001 + TTL - MARGIN));
    assert_int_equal(fq_lease_fresh_until(&l), 1001 + TTL - MARGIN);
    assert_int_equal(fq_lease_age(&l, 1501), 500);
}

/* A renewal every renew_ms, one at a time, each expecting the revision
 * last written; each confirmed one moves fresh on. */
static void test_renewals(void **state)
{
    (void)state;
    fq_lease l;
    take(&l, 1000, 7);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 1500);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    fq_lease_tick(&s, &l, 2001);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 7);
    assert_string_equal(s.value, "me");
    /* Outstanding: nothing more is sent, however long it takes. */
    fq_lease_tick(&s, &l, 3100);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    fq_lease_on_write(&s, &l, l.req, 2010, FQ_OK, 9);
    assert_false(s.lead);           /* the same term */
    assert_int_equal(l.term, 7);
    assert_true(fq_lease_fresh(&l, 2001 + TTL - MARGIN - 1));
    fq_lease_tick(&s, &l, 3001);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 9);
}

/* A renewal answered after its deadline (sent plus ttl - margin: the end
 * of the freshness it could give) is not believed, whether a tick gave it
 * up first or not: it proves nothing we could still act on. Given up on,
 * it may have been applied all the same: the next renewal, expecting the
 * revision last confirmed, is refused, the key read (ours) and the term
 * goes on. An answer to an operation superseded since is ignored too. */
static void test_renewal_answered_after_its_deadline(void **state)
{
    (void)state;
    fq_lease l;
    take(&l, 1000, 7);          /* the create sent at 1001 */
    fq_lease_step s;
    fq_lease_tick(&s, &l, 2001);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    uint64_t late = s.req;
    assert_false(fq_lease_fresh(&l, 3600));    /* waiting on it, fresh ran out */
    fq_lease_tick(&s, &l, 4500);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);  /* still waited for */
    assert_int_equal(l.op, FQ_LEASE_OP_UPDATE);
    /* answered at its deadline, no tick between: not believed */
    assert_false(fq_lease_on_write(&s, &l, late, 4501, FQ_OK, 8));
    assert_int_equal(l.op, FQ_LEASE_OP_NONE);
    assert_false(fq_lease_fresh(&l, 4501));
    assert_int_equal(fq_lease_age(&l, 4501), 4501 - 1001);
    /* the next renewal after a retry; the late one answered again: no */
    fq_lease_tick(&s, &l, 4501 + RETRY - 1);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    fq_lease_tick(&s, &l, 4501 + RETRY);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 7);
    assert_true(s.req != late);
    assert_false(fq_lease_on_write(&s, &l, late, 5002, FQ_OK, 8));
    assert_int_equal(l.op, FQ_LEASE_OP_UPDATE);     /* the new one still awaited */
    /* the late write was applied: refused, read, ours, the term goes on */
    assert_true(fq_lease_on_write(&s, &l, l.req, 5003, FQ_EEXIST, 0));
    fq_lease_tick(&s, &l, 5004);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    assert_true(fq_lease_on_get(&s, &l, l.req, 5005, FQ_OK, "me", 8));
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 8);
    assert_true(fq_lease_on_write(&s, &l, l.req, 5006, FQ_OK, 9));
    assert_false(s.lead);
    assert_int_equal(l.term, 7);
    assert_true(fq_lease_fresh(&l, 5006));
}

/* An operation never answered fails at its deadline: a standby's read,
 * then a take (its write may have been applied: the key, read again,
 * holds our id, and is taken expecting that revision). */
static void test_unanswered_operations_fail_at_their_deadline(void **state)
{
    (void)state;
    fq_lease l;
    assert_int_equal(fq_lease_init(&l, "leader", "me", &opts), FQ_OK);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 1000);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    fq_lease_tick(&s, &l, 1000 + TTL - MARGIN - 1);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    assert_false(fq_lease_expire(&l, 1000 + TTL - MARGIN - 1));
    assert_true(fq_lease_expire(&l, 1000 + TTL - MARGIN));
    assert_int_equal(l.op, FQ_LEASE_OP_NONE);
    fq_lease_tick(&s, &l, 1000 + TTL - MARGIN + RETRY);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    assert_true(fq_lease_on_get(&s, &l, l.req, 4001, FQ_ENOTFOUND, NULL, 0));
    assert_int_equal(s.op, FQ_LEASE_OP_CREATE);
    assert_int_equal(s.expect, 0);
    uint64_t take = s.req;
    fq_lease_tick(&s, &l, 4001 + TTL - MARGIN);     /* given up on */
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    assert_int_equal(l.state, FQ_LEASE_STANDBY);
    assert_false(fq_lease_on_write(&s, &l, take, 6600, FQ_OK, 3));
    assert_int_equal(l.state, FQ_LEASE_STANDBY);
    fq_lease_tick(&s, &l, 4001 + TTL - MARGIN + RETRY);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    assert_true(fq_lease_on_get(&s, &l, l.req, 7002, FQ_OK, "me", 3));
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 3);
    assert_true(fq_lease_on_write(&s, &l, l.req, 7003, FQ_OK, 4));
    assert_true(s.lead);
    assert_int_equal(s.term, 4);
}

/* A key read absent over a delete marker is created expecting that
 * marker's revision (a write over a key with no entry at all expects 0). */
static void test_create_over_a_delete_marker(void **state)
{
    (void)state;
    fq_lease l;
    assert_int_equal(fq_lease_init(&l, "leader", "me", &opts), FQ_OK);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 1000);
    assert_true(fq_lease_on_get(&s, &l, l.req, 1001, FQ_ENOTFOUND, NULL, 12));
    assert_int_equal(s.op, FQ_LEASE_OP_CREATE);
    assert_int_equal(s.expect, 12);
}

/* The process froze (SIGSTOP, a VM pause): the clock jumps past the ttl.
 * Not fresh at once, before any I/O; the renewal is refused (the key aged
 * out and another took it) and the lease is lost for good. */
static void test_clock_jump_then_loss(void **state)
{
    (void)state;
    fq_lease l;
    take(&l, 1000, 7);
    assert_true(fq_lease_fresh(&l, 1800));
    uint64_t t = 1000 + 60000;
    assert_false(fq_lease_fresh(&l, t));
    fq_lease_step s;
    fq_lease_tick(&s, &l, t);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    fq_lease_on_write(&s, &l, l.req, t + 1, FQ_EEXIST, 0);
    assert_false(s.lost);       /* not yet: it may be our own late renewal */
    assert_false(fq_lease_fresh(&l, t + 1));
    fq_lease_tick(&s, &l, t + 2);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    fq_lease_on_get(&s, &l, l.req, t + 3, FQ_OK, "other", 12);
    assert_true(s.lost);
    assert_int_equal(l.state, FQ_LEASE_LOST);
    assert_string_equal(l.holder, "other");
    assert_false(fq_lease_fresh(&l, t + 3));
    fq_lease_tick(&s, &l, t + 100000);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
}

/* A renewal refused because our own earlier one was applied after its
 * PubAck was given up on: the key still holds our id, the term goes on. */
static void test_refused_renewal_that_was_our_own(void **state)
{
    (void)state;
    fq_lease l;
    take(&l, 1000, 7);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 2001);
    fq_lease_on_write(&s, &l, l.req, 7001, FQ_EIO, 0);   /* timed out; applied all the same */
    fq_lease_tick(&s, &l, 7001);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);    /* retry_ms after a failure */
    fq_lease_tick(&s, &l, 7501);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 7);
    fq_lease_on_write(&s, &l, l.req, 7502, FQ_EEXIST, 0);
    fq_lease_tick(&s, &l, 7503);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    fq_lease_on_get(&s, &l, l.req, 7504, FQ_OK, "me", 8);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 8);
    fq_lease_on_write(&s, &l, l.req, 7505, FQ_OK, 11);
    assert_false(s.lead);
    assert_false(s.lost);
    assert_int_equal(l.term, 7);
    assert_true(fq_lease_fresh(&l, 7505));
    assert_int_equal(fq_lease_fresh_until(&l), 7504 + TTL - MARGIN);
}

/* Cut off past the ttl and nobody took it: the key aged out, so it is
 * taken again, in a new term (someone may have led in between). */
static void test_aged_out_is_taken_in_a_new_term(void **state)
{
    (void)state;
    fq_lease l;
    take(&l, 1000, 7);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 9000);
    fq_lease_on_write(&s, &l, l.req, 9001, FQ_EEXIST, 0);
    fq_lease_tick(&s, &l, 9002);
    fq_lease_on_get(&s, &l, l.req, 9003, FQ_ENOTFOUND, NULL, 0);
    assert_int_equal(s.op, FQ_LEASE_OP_CREATE);
    fq_lease_on_write(&s, &l, l.req, 9004, FQ_OK, 20);
    assert_true(s.lead);
    assert_int_equal(s.term, 20);
    assert_true(fq_lease_fresh(&l, 9004));
}

/* A standby waits while another holds the key, reading it every retry_ms,
 * and takes it once it is released, expecting the released revision. */
static void test_standby_takes_a_released_key(void **state)
{
    (void)state;
    fq_lease l;
    assert_int_equal(fq_lease_init(&l, "leader", "me", &opts), FQ_OK);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 1000);
    fq_lease_on_get(&s, &l, l.req, 1001, FQ_OK, "other", 3);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    assert_false(s.lost);
    assert_string_equal(l.holder, "other");
    fq_lease_tick(&s, &l, 1400);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    fq_lease_tick(&s, &l, 1501);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    fq_lease_on_get(&s, &l, l.req, 1502, FQ_OK, FQ_LEASE_RELEASED, 4);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 4);
    /* Another standby was quicker: refused, read again later. */
    fq_lease_on_write(&s, &l, l.req, 1503, FQ_EEXIST, 0);
    assert_false(s.lead);
    assert_int_equal(l.state, FQ_LEASE_STANDBY);
    assert_false(fq_lease_fresh(&l, 1503));
    fq_lease_tick(&s, &l, 2003);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
    fq_lease_on_get(&s, &l, l.req, 2004, FQ_ENOTFOUND, NULL, 0);
    fq_lease_on_write(&s, &l, l.req, 2005, FQ_OK, 6);
    assert_true(s.lead);
    assert_int_equal(s.term, 6);
}

/* A standby that cannot read the key does nothing but read again. */
static void test_standby_read_failure(void **state)
{
    (void)state;
    fq_lease l;
    assert_int_equal(fq_lease_init(&l, "leader", "me", &opts), FQ_OK);
    fq_lease_step s;
    fq_lease_tick(&s, &l, 1000);
    fq_lease_on_get(&s, &l, l.req, 6000, FQ_EIO, NULL, 0);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    fq_lease_tick(&s, &l, 6001);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    fq_lease_tick(&s, &l, 6500);
    assert_int_equal(s.op, FQ_LEASE_OP_GET);
}

/* Releasing writes released against our revision; from then on the lease
 * is never fresh and nothing more is sent. */
static void test_release(void **state)
{
    (void)state;
    fq_lease l;
    take(&l, 1000, 7);
    fq_lease_step s;
    fq_lease_release(&s, &l, 1200);
    assert_int_equal(s.op, FQ_LEASE_OP_UPDATE);
    assert_int_equal(s.expect, 7);
    assert_string_equal(s.value, FQ_LEASE_RELEASED);
    assert_false(fq_lease_fresh(&l, 1200));
    fq_lease_on_write(&s, &l, l.req, 1201, FQ_OK, 8);
    assert_false(s.lead);
    assert_int_equal(l.state, FQ_LEASE_LOST);
    fq_lease_tick(&s, &l, 5000);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    /* With a renewal outstanding nothing is sent: the key ages out. */
    take(&l, 1000, 7);
    fq_lease_tick(&s, &l, 2001);
    fq_lease_release(&s, &l, 2002);
    assert_int_equal(s.op, FQ_LEASE_OP_NONE);
    assert_false(fq_lease_fresh(&l, 2002));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_refuses_what_cannot_work),
        cmocka_unit_test(test_opts_for_a_ttl),
        cmocka_unit_test(test_fresh_from_the_send_time),
        cmocka_unit_test(test_renewals),
        cmocka_unit_test(test_renewal_answered_after_its_deadline),
        cmocka_unit_test(test_unanswered_operations_fail_at_their_deadline),
        cmocka_unit_test(test_create_over_a_delete_marker),
        cmocka_unit_test(test_clock_jump_then_loss),
        cmocka_unit_test(test_refused_renewal_that_was_our_own),
        cmocka_unit_test(test_aged_out_is_taken_in_a_new_term),
        cmocka_unit_test(test_standby_takes_a_released_key),
        cmocka_unit_test(test_standby_read_failure),
        cmocka_unit_test(test_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
