/* test_pullplan.c -- who of many pull consumers on one fetch thread asks next, and for how many, in virtual time; what follows a create. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pullplan.h"

#define N 8

static void init(fq_pull_cons *c, size_t n, uint32_t batch, bool busy)
{
    memset(c, 0, n * sizeof *c);
    for (size_t i = 0; i < n; i++) {
        c[i].ready = true;
        c[i].batch = batch;
        c[i].busy = busy;
    }
}

/* The server answers request r with k deliveries, then ends it. */
static void answer(fq_pull_cons *c, uint32_t k)
{
    for (uint32_t i = 0; i < k; i++) {
        fq_pull_took(c);
        if (fq_pull_filled(c))
            fq_pull_ended(c);
    }
    if (c->open)
        fq_pull_ended(c);     /* expired with less */
}

/* Idle consumers ask for one message each, whatever the budget: none waits
 * for it to start pulling. Busy ones ask for a batch, or for one message
 * while the budget is spent; none asks twice. */
static void test_idle_ask_one_busy_a_batch(void **state)
{
    (void)state;
    fq_pull_cons c[N];
    fq_pull_req r[N];
    size_t cur = 0;
    init(c, N, 64, false);
    c[3].busy = true;
    size_t k = fq_pull_plan(r, N, c, N, &cur, 0, 0);
    assert_int_equal(k, N);         /* the busy one finds no budget: one message */
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(r[i].want, 1);
        assert_true(c[r[i].cons].open);
    }
    assert_int_equal(cur, 3);       /* first in the next turn */
    assert_int_equal(fq_pull_plan(r, N, c, N, &cur, 1000, 0), 0);
    answer(&c[3], 1);
    assert_int_equal(fq_pull_plan(r, N, c, N, &cur, 1000, 0), 1);
    assert_int_equal(r[0].cons, 3);
    assert_int_equal(r[0].want, 64);
    assert_int_equal(fq_pull_plan(r, N, c, N, &cur, 1000, 0), 0);
    /* An idle consumer's one message makes it busy: a batch next. */
    answer(&c[5], 1);
    assert_true(c[5].busy);
    assert_int_equal(fq_pull_plan(r, N, c, N, &cur, 1000, 0), 1);
    assert_int_equal(r[0].cons, 5);
    assert_int_equal(r[0].want, 64);
    /* A request that brought nothing makes it idle again. */
    answer(&c[5], 0);
    assert_false(c[5].busy);
    assert_int_equal(fq_pull_plan(r, N, c, N, &cur, 1000, 0), 1);
    assert_int_equal(r[0].want, 1);
}

/* A consumer pulls no more while two of its batches wait for the owner,
 * nor while it is not ready (paused, not made), nor before its retry. */
static void test_behind_paused_retry(void **state)
{
    (void)state;
    fq_pull_cons c[3];
    fq_pull_req r[3];
    size_t cur = 0;
    init(c, 3, 10, true);
    c[0].queued = 2 * 10;
    c[1].ready = false;
    fq_pull_failed(&c[2], 500);
    assert_int_equal(fq_pull_plan(r, 3, c, 3, &cur, 1000, 499), 0);
    c[0].queued = 2 * 10 - 1;
    assert_int_equal(fq_pull_plan(r, 3, c, 3, &cur, 1000, 500), 2);
    assert_int_equal(r[0].cons, 0);
    assert_int_equal(r[1].cons, 2);
    assert_false(c[1].open);
}

/* Busy consumers share the budget in round robin: with room for one batch
 * at a time, each of eight flooded consumers gets the batch once in every
 * eight turns, in order, and never twice before the others; meanwhile
 * the others pull one message each. */
static void test_budget_round_robin(void **state)
{
    (void)state;
    fq_pull_cons c[N];
    fq_pull_req r[N];
    size_t cur = 0;
    int served[N] = {0};
    init(c, N, 100, true);
    for (int turn = 0; turn < 8 * N; turn++) {
        size_t k = fq_pull_plan(r, N, c, N, &cur, 100, (uint64_t)turn);
        assert_int_equal(k, N);
        int batches = 0;
        for (size_t i = 0; i < k; i++) {
            if (r[i].want == 1)
                continue;
            batches++;
            assert_int_equal(r[i].cons, (uint32_t)(turn % N));
            assert_int_equal(r[i].want, 100);
            served[r[i].cons]++;
        }
        assert_int_equal(batches, 1);
        for (int i = 0; i < N; i++)
            answer(&c[i], c[i].asked);  /* still flooded: busy */
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(served[i], 8);
}

/* What waits for the owner counts against the budget: the rest of it is
 * granted as a smaller batch rather than nothing. */
static void test_budget_counts_queued(void **state)
{
    (void)state;
    fq_pull_cons c[2];
    fq_pull_req r[2];
    size_t cur = 0;
    init(c, 2, 100, true);
    c[0].queued = 150;
    assert_int_equal(fq_pull_plan(r, 2, c, 2, &cur, 200, 0), 2);
    assert_int_equal(r[0].cons, 0);
    assert_int_equal(r[0].want, 50);
    assert_int_equal(r[1].cons, 1);
    assert_int_equal(r[1].want, 1);     /* left out: one message meanwhile */
    assert_int_equal(cur, 1);
    assert_int_equal(fq_pull_plan(r, 2, c, 2, &cur, 200, 0), 0);
    /* One-message requests hold no budget: once c0's batch is in, c1 gets
     * what c0's queue leaves. */
    answer(&c[1], 1);
    answer(&c[0], 50);
    c[0].queued = 190;
    assert_int_equal(fq_pull_plan(r, 2, c, 2, &cur, 200, 0), 2);
    assert_int_equal(r[0].cons, 1);
    assert_int_equal(r[0].want, 10);
    assert_int_equal(r[1].cons, 0);
    assert_int_equal(r[1].want, 1);
}

/* A flooded consumer does not starve a quiet one: however much of the
 * budget the flooded one holds (two batches waiting for the owner, one
 * open), the quiet one has a request open after every turn, a one-message
 * request while idle and a batch after it got something. */
static void test_flood_does_not_starve_quiet(void **state)
{
    (void)state;
    fq_pull_cons c[2];
    fq_pull_req r[2];
    size_t cur = 0;
    init(c, 2, 256, false);
    c[0].busy = true;   /* flooded */
    int batches = 0;
    for (int turn = 0; turn < 100; turn++) {
        c[0].queued = 2 * 256 - 1 - (uint32_t)(turn % 2); /* the owner is always behind */
        fq_pull_plan(r, 2, c, 2, &cur, 4 * 256, (uint64_t)turn);
        assert_true(c[1].open);
        batches += c[1].asked == 256;
        if (c[0].open)
            answer(&c[0], c[0].asked);
        /* a quiet message now and then; the request otherwise expires */
        answer(&c[1], turn % 10 == 0 ? 1 : 0);
    }
    assert_int_equal(batches, 10);
}

/* A late delivery, for a request already over, counts but takes nothing
 * from the next request; a reset consumer starts busy with nothing open. */
static void test_late_and_reset(void **state)
{
    (void)state;
    fq_pull_cons c;
    init(&c, 1, 8, false);
    fq_pull_took(&c);
    assert_int_equal(c.asked, 0);
    assert_false(fq_pull_filled(&c));
    c.open = true;
    c.asked = 3;
    fq_pull_reset(&c);
    assert_false(c.open);
    assert_int_equal(c.asked, 0);
    assert_true(c.busy);
}

#define NOW 10000
#define RETRY 500

/* The steps of a make before its create, in their order. */
enum { MK_LIST, MK_DEL_OTHER, MK_DEL_OWN, MK_CREATE };

/* A make started at start, its steps' answers each 100 ms after the one
 * before, with the fence passing at fence: the last step sent (the
 * create, or a step whose answer came past the fence). */
static int make_until(uint64_t start, uint64_t fence, bool wanted)
{
    int sent = MK_LIST;
    uint64_t t = start;
    for (int step = MK_LIST; step < MK_CREATE; step++) {
        t += 100;               /* its answer comes */
        fq_pull_step s = {.wanted = wanted, .fenced = t >= fence};
        fq_pull_step_next next = fq_pull_step_decide(&s);
        if (!wanted)
            assert_int_equal(next, FQ_PULL_STEP_STOPPED);
        else if (t >= fence)
            assert_int_equal(next, FQ_PULL_STEP_HELD);
        if (next != FQ_PULL_STEP_ON)
            break;
        sent = step + 1;
    }
    return sent;
}

/* A step of a make (its listing's or a delete's answer, or its wait run
 * out) sends the next one only before the fence passes, as a create is
 * sent (test_create_past_the_fence_sends_nothing): in the turn that
 * straddles the fence (a replica frozen past its lease reads an answer as
 * it resumes), neither a delete, which could delete the next owner's
 * consumer, nor a create goes out. Here the fence passes between the
 * listing's answer and the first delete's: that delete was sent, nothing
 * after it. Once the fence is lifted (its lease renewed) the make starts
 * again from its listing and goes on to its create; its owner's want
 * changed, no step goes out, fenced or not. */
static void test_make_step_past_the_fence_sends_nothing(void **state)
{
    (void)state;
    assert_int_equal(make_until(NOW, NOW + 1000, true), MK_CREATE);
    assert_int_equal(make_until(NOW, NOW + 150, true), MK_DEL_OTHER);
    assert_int_equal(make_until(NOW, NOW + 100, true), MK_LIST);    /* the first answer */
    /* a freeze past the fence: the answer read long after */
    assert_int_equal(make_until(NOW + 60000, NOW + 150, true), MK_LIST);
    /* lifted (renewed until NOW + 63000), made again from its start */
    assert_int_equal(make_until(NOW + 60000, NOW + 63000, true), MK_CREATE);
    assert_int_equal(make_until(NOW, NOW + 1000, false), MK_LIST);
    assert_int_equal(make_until(NOW, NOW + 150, false), MK_LIST);
}

/* What follows a create, its answer come (ok, or err_code) or not, sent
 * for a want its owner still asks for, or changed since. */
static fq_pull_create_step create_next(uint64_t *retry_at, bool answered, bool ok, int err_code,
                                       bool wanted)
{
    fq_pull_create c = {.answered = answered, .ok = ok, .err_code = err_code,
                        .wanted = wanted};
    *retry_at = 1;  /* set by the call */
    return fq_pull_create_next(retry_at, &c, NOW, RETRY);
}

/* A create answered "made" makes the consumer live, whatever its owner
 * wants now (a changed want makes it due again, lib/natsio.c). */
static void test_create_made(void **state)
{
    (void)state;
    uint64_t at;
    assert_int_equal(create_next(&at, true, true, 0, true), FQ_PULL_CREATE_MADE);
    assert_int_equal(create_next(&at, true, true, 0, false), FQ_PULL_CREATE_MADE);
}

/* A create unanswered for the API's wait is sent again as it was while
 * its owner still wants it: the consumer is not deleted and made afresh
 * (a group that lost its first vote elects a leader at its next election;
 * a new group may lose its first vote too). Its owner changed what it
 * wants meanwhile, it is made afresh at once, for the new want. */
static void test_create_unanswered_sent_again(void **state)
{
    (void)state;
    uint64_t at;
    assert_int_equal(create_next(&at, false, false, 0, true), FQ_PULL_CREATE_AGAIN);
    assert_int_equal(create_next(&at, false, false, 0, false), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, 0);
}

/* A create refused is tried again after the retry delay; but refused after
 * its owner changed what it wants (the owner named the consumer for a new
 * term, or stopped it, after the create was sent and before its answer),
 * the failure was of a want no longer asked: the new want is brought about
 * at once, not RETRY later. */
static void test_create_failed_after_the_want_changed_not_delayed(void **state)
{
    (void)state;
    uint64_t at;
    /* the owner's change after the answer: the failure is its own */
    assert_int_equal(create_next(&at, true, false, 10013, true), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, NOW + RETRY);
    /* the owner's change before the answer */
    assert_int_equal(create_next(&at, true, false, 10013, false), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, 0);
    /* an answer without a JetStream error (no responders) alike */
    assert_int_equal(create_next(&at, true, false, 0, false), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, 0);
}

/* Refused as overlapping another consumer (10100) with no later term's
 * listed: a node's stale copy of one of ours is cleared and the create
 * sent once more, only while its owner still wants that term. The owner
 * let it go before the answer came (a partition lost): no copy is
 * cleared, no create sent (it would make a consumer of a term the owner
 * left, for the next owner to delete), and the new want is brought about
 * at once. A later term's listed, or a copy cleared already: failed. */
static void test_stale_copy_cleared_only_for_the_wanted_term(void **state)
{
    (void)state;
    uint64_t at;
    assert_int_equal(create_next(&at, true, false, FQ_PULL_WQ_NOT_UNIQUE, true),
                     FQ_PULL_CREATE_UNSTALE);
    assert_int_equal(create_next(&at, true, false, FQ_PULL_WQ_NOT_UNIQUE, false),
                     FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, 0);
    fq_pull_create c = {.answered = true, .err_code = FQ_PULL_WQ_NOT_UNIQUE, .newer = true,
                        .wanted = true};
    assert_int_equal(fq_pull_create_next(&at, &c, NOW, RETRY), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, NOW + RETRY);
    c.newer = false;
    c.unstaled = true;
    assert_int_equal(fq_pull_create_next(&at, &c, NOW, RETRY), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, NOW + RETRY);
}

/* Past the process's fence (its lease not renewed in time: a replica
 * frozen past it, whose fetch thread reads a create's answer, or sees its
 * wait run out, as it resumes) natsio sends no request: that term may be
 * another replica's by now, and a create of ours sent again could make
 * again the consumer the next owner has just deleted, refusing its own
 * (a work queue admits one consumer per subject). Unanswered, the create
 * is held and looked at again once the fence is lifted (sent again if its
 * owner still wants it, or made afresh at once for the new want); refused
 * as overlapping, no stale copy is cleared (that makes and deletes
 * consumers): it is made afresh after the retry delay. Made, it is live
 * (pulls wait for the fence). */
static void test_create_past_the_fence_sends_nothing(void **state)
{
    (void)state;
    uint64_t at = 1;
    fq_pull_create c = {.answered = false, .wanted = true, .fenced = true};
    assert_int_equal(fq_pull_create_next(&at, &c, NOW, RETRY), FQ_PULL_CREATE_HELD);
    c.wanted = false;
    assert_int_equal(fq_pull_create_next(&at, &c, NOW, RETRY), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, 0);
    c = (fq_pull_create){.answered = true, .err_code = FQ_PULL_WQ_NOT_UNIQUE, .wanted = true,
                         .fenced = true};
    assert_int_equal(fq_pull_create_next(&at, &c, NOW, RETRY), FQ_PULL_CREATE_FAILED);
    assert_int_equal(at, NOW + RETRY);
    c = (fq_pull_create){.answered = true, .ok = true, .wanted = true, .fenced = true};
    assert_int_equal(fq_pull_create_next(&at, &c, NOW, RETRY), FQ_PULL_CREATE_MADE);
}

/* The names a stale copy may have: a partition's earlier terms' consumers
 * deleted, kept by term (the latest FQ_PULL_GONE), passed on in a
 * consumer's description and taken back from it by its next owner, who
 * then knows what its previous owner deleted before it (a replica that
 * took a partition twice deleted its own earlier term's consumer, and the
 * next owner knew only the last term's: refused for good by a node's
 * stale copy of the other). */
static void test_deleted_names_passed_on(void **state)
{
    (void)state;
    uint64_t t;
    assert_true(fq_pull_term_name("sub-p1-42", "sub-p1", &t));
    assert_int_equal(t, 42);
    assert_true(fq_pull_term_name("sub-p1", "sub-p1", &t));
    assert_int_equal(t, 0);
    assert_false(fq_pull_term_name("sub-p10-42", "sub-p1", &t));
    assert_false(fq_pull_term_name("sub-p1-", "sub-p1", &t));
    assert_false(fq_pull_term_name("sub-p1-4x", "sub-p1", &t));
    assert_false(fq_pull_term_name("sub-p1-99999999999999999999", "sub-p1", &t));
    /* rep-b: takes the partition at 163 (deleting rep-a's 100), loses it
     * and takes it again at 244 (deleting its own 163) */
    fq_pull_gone b = {0};
    fq_pull_gone_note(&b, "sub-p1", "sub-p1-100");
    fq_pull_gone_note(&b, "sub-p1", "sub-p1-163");
    fq_pull_gone_note(&b, "sub-p1", "sub-p1-163");     /* once */
    fq_pull_gone_note(&b, "sub-p1", "sub-p1-244");     /* its own name's delete, before its create */
    fq_pull_gone_note(&b, "sub-p1", "other-p1-7");     /* not its durable's: never ours */
    char desc[FQ_PULL_GONE * FQ_PULL_NAME_CAP];
    assert_int_equal(fq_pull_gone_describe(desc, sizeof desc, &b, "sub-p1", 244), 21);
    assert_string_equal(desc, "sub-p1-163 sub-p1-100");
    /* the same id serving another partition's durable later: none of
     * the names it kept is that durable's */
    assert_int_equal(fq_pull_gone_next(&b, 0, "sub-p2", 500, &t), -1);
    assert_int_equal(fq_pull_gone_describe(desc, sizeof desc, &b, "sub-p2", 500), 0);
    int at = fq_pull_gone_next(&b, 0, "sub-p1", 244, &t);
    assert_string_equal(b.name[at], "sub-p1-163");
    assert_int_equal(t, 163);
    at = fq_pull_gone_next(&b, at + 1, "sub-p1", 244, &t);
    assert_string_equal(b.name[at], "sub-p1-100");
    assert_int_equal(fq_pull_gone_next(&b, at + 1, "sub-p1", 244, &t), -1);
    /* rep-d, at 300: reads 244's description, then deletes 244 */
    fq_pull_gone d = {0};
    const char *said = "sub-p1-163 sub-p1-100 sub-p1-400 other-5 sub-p1-1x  \\u0041";
    assert_int_equal(fq_pull_gone_take(&d, "sub-p1", 300, said, strlen(said)), 2);
    fq_pull_gone_note(&d, "sub-p1", "sub-p1-244");
    assert_int_equal(fq_pull_gone_describe(desc, sizeof desc, &d, "sub-p1", 300), 32);
    assert_string_equal(desc, "sub-p1-244 sub-p1-163 sub-p1-100");
    assert_string_equal(d.name[0], "sub-p1-244");
    assert_int_equal(d.term[2], 100);
    /* full: the latest FQ_PULL_GONE terms are kept, whatever the order
     * they were learnt in */
    for (uint64_t k = 1; k <= 2 * FQ_PULL_GONE; k++) {
        char name[32];
        snprintf(name, sizeof name, "sub-p1-%llu", (unsigned long long)(1000 - k));
        fq_pull_gone_note(&d, "sub-p1", name);
    }
    fq_pull_gone_note(&d, "sub-p1", "sub-p1-1");
    for (int i = 0; i < FQ_PULL_GONE; i++)
        assert_int_equal(d.term[i], 999 - (uint64_t)i);
    /* a description that does not fit is cut at a name */
    char small[24];
    assert_int_equal(fq_pull_gone_describe(small, sizeof small, &d, "sub-p1", 2000), 21);
    assert_string_equal(small, "sub-p1-999 sub-p1-998");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_ask_one_busy_a_batch),
        cmocka_unit_test(test_behind_paused_retry),
        cmocka_unit_test(test_budget_round_robin),
        cmocka_unit_test(test_budget_counts_queued),
        cmocka_unit_test(test_flood_does_not_starve_quiet),
        cmocka_unit_test(test_late_and_reset),
        cmocka_unit_test(test_make_step_past_the_fence_sends_nothing),
        cmocka_unit_test(test_create_made),
        cmocka_unit_test(test_create_unanswered_sent_again),
        cmocka_unit_test(test_create_failed_after_the_want_changed_not_delayed),
        cmocka_unit_test(test_stale_copy_cleared_only_for_the_wanted_term),
        cmocka_unit_test(test_create_past_the_fence_sends_nothing),
        cmocka_unit_test(test_deleted_names_passed_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
