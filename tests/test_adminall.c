/* test_adminall.c -- unit tests of gathering an admin request's answers from every replica: whom to ask, partial answers, what sums. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "adminall.h"

/* A stats answer (limit 0) of replica id, naming the replicas of its view. */
static const char *stats_of(char *buf, size_t cap, const char *id, const char *view,
                            int in_flight, bool leader, double renew)
{
    snprintf(buf, cap,
             "{\"overall\":{\"in_flight\":%d,\"leader\":%s,\"lease_renew_seconds\":%g,"
             "\"window_max_in_flight\":8,\"share_peers\":2,\"rejected\":1,"
             "\"partition_queued_runs\":5},"
             "\"replica\":\"%s\",\"replicas\":[%s],\"tenants_total\":0}",
             in_flight, leader ? "true" : "false", renew, id, view);
    return buf;
}

static const char *next_id(fqa_all *g, size_t *idx)
{
    const char *id = NULL;
    return fqa_all_next(g, idx, &id) ? id : NULL;
}

static cJSON *gathered(const fqa_all *g, bool deployment)
{
    char *text = fqa_all_json(g, deployment, "no answer within 2000 ms");
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* The first answer names three replicas: the other two are asked, once
 * each; one of them names a fourth, asked too. With every one answered
 * the gathered reply is whole: counts summed, latencies their most,
 * flags counted, a capacity and one replica's view left per replica. */
static void test_every_replica_asked_and_folded(void **state)
{
    (void)state;
    char b[512];
    fqa_all *g = fqa_all_create();
    assert_non_null(g);
    const char *a = stats_of(b, sizeof b, "rep-b", "\"rep-a\",\"rep-b\",\"rep-c\"", 3, false,
                             0.002);
    assert_true(fqa_all_answer(g, FQA_ANY, a, strlen(a)));
    assert_int_equal(fqa_all_named(g), 3);
    size_t ia, ic, id, none;
    assert_string_equal(next_id(g, &ia), "rep-a");
    assert_string_equal(next_id(g, &ic), "rep-c");
    assert_null(next_id(g, &none));
    assert_false(fqa_all_settled(g));
    a = stats_of(b, sizeof b, "rep-a", "\"rep-a\",\"rep-b\",\"rep-c\",\"rep-d\"", 4, true,
                 0.009);
    assert_true(fqa_all_answer(g, ia, a, strlen(a)));
    assert_string_equal(next_id(g, &id), "rep-d");     /* a view knew one more */
    assert_null(next_id(g, &none));
    a = stats_of(b, sizeof b, "rep-c", "\"rep-b\",\"rep-c\"", 0, false, 0.001);
    assert_true(fqa_all_answer(g, ic, a, strlen(a)));
    assert_false(fqa_all_settled(g));
    a = stats_of(b, sizeof b, "rep-d", "\"rep-d\"", 1, false, 0.004);
    assert_true(fqa_all_answer(g, id, a, strlen(a)));
    assert_true(fqa_all_settled(g));
    cJSON *j = gathered(g, true);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "partial")));
    assert_int_equal(num(j, "replicas_named"), 4);
    assert_int_equal(num(j, "replicas_answered"), 4);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "missing")), 0);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "deployment");
    assert_int_equal(num(d, "in_flight"), 8);
    assert_int_equal(num(d, "leader"), 1);              /* how many hold the duty */
    assert_int_equal(num(d, "rejected"), 4);
    assert_int_equal(num(d, "partition_queued_runs"), 20);
    assert_true(num(d, "lease_renew_seconds") == 0.009);
    assert_null(cJSON_GetObjectItemCaseSensitive(d, "window_max_in_flight"));
    assert_null(cJSON_GetObjectItemCaseSensitive(d, "share_peers"));
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(j, "answers");
    assert_int_equal(cJSON_GetArraySize(ans), 4);
    static const char *const order[] = {"rep-a", "rep-b", "rep-c", "rep-d"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ans, i), "replica")->valuestring,
            order[i]);
    cJSON_Delete(j);
    fqa_all_destroy(g);
}

/* One replica does not answer, another has no responders: the reply is
 * partial and not ok, names both with their reasons, and sums only what
 * answered. */
static void test_missing_replicas_said(void **state)
{
    (void)state;
    char b[512];
    fqa_all *g = fqa_all_create();
    const char *a = stats_of(b, sizeof b, "rep-a", "\"rep-a\",\"rep-b\",\"rep-c\"", 2, true,
                             0.001);
    assert_true(fqa_all_answer(g, FQA_ANY, a, strlen(a)));
    size_t ib, ic;
    assert_string_equal(next_id(g, &ib), "rep-b");
    assert_string_equal(next_id(g, &ic), "rep-c");
    fqa_all_failed(g, ic, "no responders");
    assert_false(fqa_all_settled(g));   /* rep-b may still answer */
    cJSON *j = gathered(g, true);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "partial")));
    assert_int_equal(num(j, "replicas_named"), 3);
    assert_int_equal(num(j, "replicas_answered"), 1);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "missing");
    assert_int_equal(cJSON_GetArraySize(m), 2);
    const cJSON *m0 = cJSON_GetArrayItem(m, 0), *m1 = cJSON_GetArrayItem(m, 1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m0, "replica")->valuestring, "rep-b");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m0, "why")->valuestring,
                        "no answer within 2000 ms");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m1, "why")->valuestring, "no responders");
    assert_int_equal(num(cJSON_GetObjectItemCaseSensitive(j, "deployment"), "in_flight"), 2);
    cJSON_Delete(j);
    fqa_all_destroy(g);
}

/* reload: the replicas learnt from a stats answer, none of them answered
 * by it; each answer printed, one refusal makes the whole not ok (though
 * complete); no deployment section. Ids that are not replica ids (they go
 * into subjects) are not asked, and garbage is no answer. */
static void test_reload_answers_each(void **state)
{
    (void)state;
    char b[512];
    fqa_all *g = fqa_all_create();
    const char *a = stats_of(b, sizeof b, "rep-a", "\"rep-a\",\"rep-b\",\"x.>\",\"\"", 0, true,
                             0);
    assert_int_equal(fqa_all_learn(g, a, strlen(a)), 3);
    assert_int_equal(fqa_all_named(g), 2);
    size_t ia, ib, none;
    assert_string_equal(next_id(g, &ia), "rep-a");     /* the answerer too: not reloaded yet */
    assert_string_equal(next_id(g, &ib), "rep-b");
    assert_null(next_id(g, &none));
    assert_false(fqa_all_answer(g, ia, "not json", 8));
    const char ok[] = "{\"ok\":true,\"replica\":\"rep-a\",\"replicas\":[\"rep-a\"],"
                      "\"restart_needed\":[],\"reloads\":1}";
    const char bad[] = "{\"ok\":false,\"error\":\"scheduler.quantum: not a number\"}";
    assert_true(fqa_all_answer(g, ia, ok, sizeof ok - 1));
    assert_true(fqa_all_answer(g, ib, bad, sizeof bad - 1));
    assert_true(fqa_all_settled(g));
    cJSON *j = gathered(g, false);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "ok")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "partial")));
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "deployment"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "answers")), 2);
    cJSON_Delete(j);
    fqa_all_destroy(g);
}

/* No replica named at all: nothing to ask, and partial. */
static void test_nothing_named_is_partial(void **state)
{
    (void)state;
    fqa_all *g = fqa_all_create();
    const char old[] = "{\"overall\":{\"in_flight\":1},\"tenants_total\":0}";
    assert_false(fqa_all_answer(g, FQA_ANY, old, sizeof old - 1));
    assert_false(fqa_all_settled(g));
    cJSON *j = gathered(g, true);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "partial")));
    cJSON_Delete(j);
    fqa_all_destroy(g);
}

/* Two replicas' stats, each with queued and in_flight runs; the drained
 * reply and answer for submit and done messages. */
static bool drained_of(int queued_a, int in_flight_b, bool b_answers, int64_t submit,
                       int64_t done)
{
    char b[512];
    fqa_all *g = fqa_all_create();
    snprintf(b, sizeof b, "{\"overall\":{\"queued_runs\":%d,\"in_flight\":0},"
             "\"replica\":\"rep-a\",\"replicas\":[\"rep-a\",\"rep-b\"]}", queued_a);
    assert_true(fqa_all_answer(g, FQA_ANY, b, strlen(b)));
    size_t ib;
    assert_string_equal(next_id(g, &ib), "rep-b");
    snprintf(b, sizeof b, "{\"overall\":{\"queued_runs\":0,\"in_flight\":%d},"
             "\"replica\":\"rep-b\",\"replicas\":[\"rep-a\",\"rep-b\"]}", in_flight_b);
    if (b_answers)
        assert_true(fqa_all_answer(g, ib, b, strlen(b)));
    bool drained = true;
    char *text = fqa_all_drained(&drained, g, submit, done, "no answer within 2000 ms");
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    assert_true(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "drained")));
    assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "drained")), drained);
    assert_int_equal(num(j, "submit_msgs"), submit);
    assert_int_equal(num(j, "done_msgs"), done);
    cJSON_Delete(j);
    fqa_all_destroy(g);
    return drained;
}

/* Drained only with every replica answered, nothing queued or in flight
 * on any, and both streams empty (read, not -1). */
static void test_drained_needs_everything_empty(void **state)
{
    (void)state;
    assert_true(drained_of(0, 0, true, 0, 0));
    assert_false(drained_of(1, 0, true, 0, 0));     /* queued on rep-a */
    assert_false(drained_of(0, 2, true, 0, 0));     /* in flight on rep-b */
    assert_false(drained_of(0, 0, false, 0, 0));    /* rep-b did not answer */
    assert_false(drained_of(0, 0, true, 3, 0));     /* submits in the stream */
    assert_false(drained_of(0, 0, true, 0, 1));     /* completions not taken */
    assert_false(drained_of(0, 0, true, -1, 0));    /* the stream not read */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_replica_asked_and_folded),
        cmocka_unit_test(test_missing_replicas_said),
        cmocka_unit_test(test_reload_answers_each),
        cmocka_unit_test(test_nothing_named_is_partial),
        cmocka_unit_test(test_drained_needs_everything_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
