/* it_repartition.c -- a running deployment moved from P = 1 to P = 4 (and between P > 1) by draining, as docs/partitions.md ("Changing P") says: no run lost or served twice, every tenant's debt kept. */
/*
 * One nats-server, first without a mapping, and a proxy with P = 1 whose
 * workers report twice the estimated tokens (every tenant that ran is left
 * in debt). Runs are submitted, and while some are queued and some in
 * flight the producers stop (fairq-admin drained says not drained); the
 * deployment drains until fairq-admin drained exits 0 (FAIR_SUBMIT and
 * FAIR_DONE empty, nothing queued or in flight), the proxy is stopped,
 * FAIR_SUBMIT and FAIR_DONE deleted and FAIRQ_RUNS given the subject
 * fairq.runs.* beside fairq.runs by fairq-admin reshape (which refused
 * while the streams held runs), the server restarted with the mapping of
 * 4 partitions, and the proxy started with partitions: 4. Each tenant's
 * debt is then what it was (read back from fairq.runs by the partition
 * that owns the tenant now), and still once a second replica has taken
 * its share of the partitions (asked of each tenant's owner); every run
 * submitted before and after is stored once in FAIR_DISPATCH and has one
 * done record. The same with both replicas started at once after the
 * change, and from one P > 1 to another (4 to 8, 4 to 6, and 8 down to 4)
 * with partitions_before.
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

#include "partition.h"
#include "proxyfixture.h"

#define TENANTS 8
#define BEFORE 40       /* runs submitted at P = 1 */
#define AFTER 16        /* runs submitted at P = 4 */
#define PARTS 4

#define YAML(parts, id)                                                                      \
    "partitions: " parts "\n"                                                                \
    "replica_id: " id "\n"                                                                   \
    "scheduler:\n  default_plan: free\n"                                                     \
    "window:\n  max_in_flight: 4\n"                                                          \
    "estimates:\n  default_tokens: 300\n"                                                    \
    "plans:\n  - name: free\n"

static char dir[] = "/tmp/fairq-it-repartition-XXXXXX";
static pt_proxy second;         /* rep-b, started after the change */
static char conf[256];

/* The server's config without a mapping (P = 1), at the path
 * pf_write_mapping writes the mapping of P > 1 to later. */
static int write_conf_p1(void)
{
    snprintf(conf, sizeof conf, "%s/mapping.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f, "# P = 1: no mapping\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* Every run costs twice its estimate. */
static uint64_t overrun(void *arg, const char *tenant, uint32_t est)
{
    (void)arg;
    (void)tenant;
    return 2ull * est;
}

static int setup(void **state)
{
    strcpy(dir, "/tmp/fairq-it-repartition-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    if (write_conf_p1() != 0)
        return -1;
    pt_worker_opts wo = {.concurrency = 2, .service_ms = 60, .actual = overrun};
    return pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, YAML("1", "rep-a"), &wo);
}

static int teardown(void **state)
{
    if (nt_proc_alive(&second.proc))
        pt_proxy_stop(&second);
    assert_int_equal(pf_teardown(state, true), 0);
    char log[300];
    snprintf(log, sizeof log, "%s/admin.log", dir);
    remove(log);
    remove(conf);
    rmdir(dir);
    return 0;
}

/* A tenant's deficit, from the stats of its owner. */
static long deficit(pf_fixture *f, int t)
{
    char req[64];
    snprintf(req, sizeof req, "{\"tenant\":\"t%d\"}", t);
    cJSON *j = pf_stats(f, req, NULL);
    cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    if (!row) {
        char *text = cJSON_PrintUnformatted(j);
        fprintf(stderr, "t%d unknown: %s\n", t, text ? text : "?");
        free(text);
    }
    assert_non_null(row);
    long v = pf_num(row, "deficit");
    cJSON_Delete(j);
    return v;
}

/* Each tenant's debt is what it was, asked of its owner at once: the
 * replicas' keys show them sharing the partitions before they have read
 * them back, and until then the owner answers busy (asked again), not as
 * for a tenant it does not know (which failed 2 runs in 5 here). */
static void assert_debts(pf_fixture *f, const long before[TENANTS])
{
    for (int t = 0; t < TENANTS; t++)
        assert_int_equal(deficit(f, t), before[t]);
}

/* fairq-admin's exit status for request (drained, reshape), its output
 * in <dir>/admin.log (this run's alone). */
static int admin_run(pf_fixture *f, const char *request)
{
    char bin[512], log[300];
    snprintf(log, sizeof log, "%s/admin.log", dir);
    remove(log);
    const char *argv[] = {nt_build_path(bin, sizeof bin, "fairq-admin"), "--nats",
                          natstest_url(f->srv), request, NULL};
    nt_proc p = {0};
    assert_int_equal(nt_proc_spawn(&p, argv, log), 0);
    assert_int_equal(nt_proc_wait(&p, 20000), 0);
    return nt_proc_exit_code(&p);
}

/* fairq-admin drained's exit status: 0 when FAIR_SUBMIT and FAIR_DONE are
 * empty and no replica has a run queued or in flight. */
static int admin_drained(pf_fixture *f)
{
    return admin_run(f, "drained");
}

/* Whether <dir>/admin.log holds text. */
static bool admin_said(const char *text)
{
    char log[300], buf[4096] = "";
    snprintf(log, sizeof log, "%s/admin.log", dir);
    FILE *fp = fopen(log, "r");
    if (fp) {
        size_t n = fread(buf, 1, sizeof buf - 1, fp);
        buf[n] = '\0';
        fclose(fp);
    }
    return strstr(buf, text) != NULL;
}

/* Whether stream exists. */
static bool stream_exists(pf_fixture *f, const char *stream)
{
    jsStreamInfo *si = NULL;
    natsStatus s = js_GetStreamInfo(&si, f->c.js, stream, NULL, NULL);
    jsStreamInfo_Destroy(si);
    return s == NATS_OK;
}

/* Wait until fairq-admin drained says so (step 2 of the procedure), and
 * check that the stats and streams agree. */
static void wait_drained(pf_fixture *f)
{
    int rc = -1;
    for (long long end = nt_now_ms() + 30000; rc && nt_now_ms() < end;)
        if ((rc = admin_drained(f)) != 0)
            nt_sleep_ms(100);
    assert_int_equal(rc, 0);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "queued_runs") + pf_overall(j, "in_flight"), 0);
    cJSON_Delete(j);
    pf_wait_empty(f, "FAIR_SUBMIT");
    pf_wait_empty(f, "FAIR_DONE");
}

/* FAIRQ_RUNS's subjects: n of them, fairq.runs first then fairq.runs.*
 * (from P = 1: reshape kept the old first and added P > 1's), or
 * fairq.runs.* alone (made with P > 1). */
static void journal_has_subjects(pf_fixture *f, int n)
{
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIRQ_RUNS", NULL, NULL), NATS_OK);
    assert_int_equal(si->Config->SubjectsLen, n);
    if (n == 2) {
        assert_string_equal(si->Config->Subjects[0], "fairq.runs");
        assert_string_equal(si->Config->Subjects[1], "fairq.runs.*");
    } else {
        assert_string_equal(si->Config->Subjects[0], "fairq.runs.*");
    }
    jsStreamInfo_Destroy(si);
}

/* FAIRQ_RUNS's largest message: 8 bytes refuses every journal marker
 * (a partition taken is then never read back); -1, none. */
static void journal_max_msg_size(pf_fixture *f, int32_t size)
{
    jsStreamInfo *si = NULL, *up = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIRQ_RUNS", NULL, NULL), NATS_OK);
    si->Config->MaxMsgSize = size;
    assert_int_equal(js_UpdateStream(&up, f->c.js, si->Config, NULL, NULL), NATS_OK);
    jsStreamInfo_Destroy(up);
    jsStreamInfo_Destroy(si);
}

/* Done records of the journal. */
static int done_records(pf_fixture *f)
{
    return pf_journal_count(f, "\"st\":\"done\"");
}

/* Runs submitted (some queued, some in flight when the producers stop),
 * then the deployment drained: every tenant in debt, its deficit kept in
 * before[]. */
static void drain_in_debt(pf_fixture *f, long before[TENANTS])
{
    pt_worker_hold(f->w, true);     /* runs in flight and queued until the check below */
    pf_submit_runs(f, 0, BEFORE, TENANTS);
    long in_flight = 0, queued = 0;
    for (long long end = nt_now_ms() + 20000; !(in_flight && queued) && nt_now_ms() < end;) {
        cJSON *j = pf_stats(f, "", NULL);
        in_flight = pf_overall(j, "in_flight");
        queued = pf_overall(j, "queued_runs");
        cJSON_Delete(j);
    }
    assert_true(in_flight > 0 && queued > 0);
    assert_int_equal(admin_drained(f), 1);
    /* reshape refuses while a stream holds runs, and changes nothing */
    assert_int_equal(admin_run(f, "reshape"), 1);
    assert_true(admin_said("messages: not deleted"));
    assert_true(stream_exists(f, "FAIR_SUBMIT") && stream_exists(f, "FAIR_DONE"));
    pt_worker_hold(f->w, false);
    wait_drained(f);
    for (int t = 0; t < TENANTS; t++) {
        before[t] = deficit(f, t);
        assert_true(before[t] < 0);
    }
}

/* Runs submitted at P = from (some queued, some in flight when the
 * producers stop), the deployment drained (every tenant in debt: before),
 * the proxy stopped, FAIR_SUBMIT and FAIR_DONE deleted (from P = 1,
 * FAIRQ_RUNS given fairq.runs.* too) by fairq-admin reshape, which
 * refused while they held runs, the server restarted with the
 * mapping of to partitions. Returns how many tenants changed partition
 * number. */
static int drain_for(pf_fixture *f, long before[TENANTS], uint32_t from, uint32_t to)
{
    if (from > 1)
        assert_int_equal(pt_log_wait_n(&f->px, "consuming a partition", (int)from, 20000), 0);
    drain_in_debt(f, before);
    int moved = 0;
    for (int t = 0; t < TENANTS; t++) {
        char tn[16];
        snprintf(tn, sizeof tn, "t%d", t);
        moved += fq_partition_of(tn, strlen(tn), to) != fq_partition_of(tn, strlen(tn), from);
    }
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    /* FAIR_SUBMIT sealed as reshape seals it (here as if a reshape had
     * stopped after its seal): a submit to it gets an error, no PubAck, so
     * its producer retries rather than losing it with the stream */
    jsStreamInfo *si = NULL, *up = NULL;
    assert_int_equal(js_GetStreamInfo(&si, f->c.js, "FAIR_SUBMIT", NULL, NULL), NATS_OK);
    si->Config->Sealed = true;
    assert_int_equal(js_UpdateStream(&up, f->c.js, si->Config, NULL, NULL), NATS_OK);
    jsStreamInfo_Destroy(up);
    jsStreamInfo_Destroy(si);
    jsPubAck *pa = NULL;
    assert_int_not_equal(js_Publish(&pa, f->c.js, "fair.submit.t0", "{}", 2, NULL, NULL), NATS_OK);
    assert_null(pa);
    /* step 4 by fairq-admin reshape (the sealed, empty stream deleted too,
     * FAIR_DONE sealed before it goes: the server says it was updated);
     * again, it has nothing more to do */
    natsSubscription *upd = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&upd, f->c.nc,
                                                  "$JS.EVENT.ADVISORY.STREAM.UPDATED.FAIR_DONE"),
                     NATS_OK);
    assert_int_equal(natsConnection_Flush(f->c.nc), NATS_OK);
    assert_int_equal(admin_run(f, "reshape"), 0);
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, upd, 5000), NATS_OK);
    natsMsg_Destroy(m);
    natsSubscription_Destroy(upd);
    assert_true(admin_said(from == 1 ? "{\"ok\":true,\"deleted\":[\"FAIR_SUBMIT\",\"FAIR_DONE\"],"
                                       "\"journal_subject_added\":true}"
                                     : "{\"ok\":true,\"deleted\":[\"FAIR_SUBMIT\",\"FAIR_DONE\"],"
                                       "\"journal_subject_added\":false}"));
    assert_false(stream_exists(f, "FAIR_SUBMIT") || stream_exists(f, "FAIR_DONE"));
    journal_has_subjects(f, from == 1 ? 2 : 1);
    assert_int_equal(admin_run(f, "reshape"), 0);
    assert_true(admin_said("{\"ok\":true,\"deleted\":[],\"journal_subject_added\":false}"));
    journal_has_subjects(f, from == 1 ? 2 : 1);
    assert_int_equal(pf_write_mapping(conf, sizeof conf, dir, (int)to), 0);
    assert_int_equal(natstest_restart(f->srv), 0);
    return moved;
}

static void test_p1_to_p4_by_draining(void **state)
{
    pf_fixture *f = *state;
    long before[TENANTS];
    drain_for(f, before, 1, PARTS);
    assert_int_equal(pt_proxy_start(&f->px, f->srv, "proxy4", YAML("4", "rep-a")), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "consuming a partition", PARTS, 20000), 0);

    assert_debts(f, before);
    /* a second replica takes its share: the debts move with their partitions */
    assert_int_equal(pt_proxy_start(&second, f->srv, "rep-b", YAML("4", "rep-b")), 0);
    const char *const ids[] = {"rep-a", "rep-b"};
    assert_int_equal(pf_wait_shared(&f->c, "fairq_lease", PARTS, ids, 2, 30000), 0);
    assert_true(pt_log_count(&second, "consuming a partition") > 0);
    assert_debts(f, before);
    pf_submit_runs(f, BEFORE, AFTER, TENANTS);
    assert_int_equal(pt_worker_wait_completed(f->w, BEFORE + AFTER, 30000), 0);
    wait_drained(f);
    pf_assert_each_dispatched_once(f, BEFORE + AFTER);
    assert_int_equal(done_records(f), BEFORE + AFTER);
    cJSON *j = pf_stats(f, "", NULL);
    assert_int_equal(pf_overall(j, "journal_refused"), 0);
    cJSON_Delete(j);
}

/* From P = parts, with the mapping of parts partitions. */
static int setup_parts(void **state, int parts, const char *yaml)
{
    strcpy(dir, "/tmp/fairq-it-repartition-XXXXXX");
    if (!mkdtemp(dir) || pf_write_mapping(conf, sizeof conf, dir, parts) != 0)
        return -1;
    pt_worker_opts wo = {.concurrency = 2, .service_ms = 60, .actual = overrun};
    return pf_setup_server(state, (const char *const[]){"-c", conf, NULL}, yaml, &wo);
}

static int setup4(void **state)
{
    return setup_parts(state, PARTS, YAML("4", "rep-a"));
}

static int setup8(void **state)
{
    return setup_parts(state, 2 * PARTS, YAML("8", "rep-a"));
}

/* Every run of the change stored once in FAIR_DISPATCH with one done
 * record, and no journal record refused, on either replica. */
static void assert_served_once(pf_fixture *f, const char *const ids[2])
{
    pf_submit_runs(f, BEFORE, AFTER, TENANTS);
    assert_int_equal(pt_worker_wait_completed(f->w, BEFORE + AFTER, 30000), 0);
    wait_drained(f);
    pf_assert_each_dispatched_once(f, BEFORE + AFTER);
    assert_int_equal(done_records(f), BEFORE + AFTER);
    for (int i = 0; i < 2; i++) {
        char subject[64];
        snprintf(subject, sizeof subject, "fair.admin.replica.%s.stats", ids[i]);
        char *r = pt_request(&f->c, subject, "{\"limit\":0}", NULL);
        assert_non_null(r);
        cJSON *j = cJSON_Parse(r);
        free(r);
        assert_non_null(j);
        assert_int_equal(pf_overall(j, "journal_refused"), 0);
        cJSON_Delete(j);
    }
}

/* From one P > 1 to another, 4 to 8, by the same steps (docs/partitions.md,
 * "Changing P"): drained, stopped, FAIR_SUBMIT and FAIR_DONE deleted (the
 * journal's subjects fairq.runs.* serve both), the mapping of 8, one
 * replica started first. Half of the tenants move from partition k to
 * k + 4 (t1, t4, t6, t7), their records on fairq.runs.k: the replica
 * takes all 8 partitions and reads all 8 subjects, each record going to
 * its tenant's partition, so every debt is what it was, and still once a
 * second replica has taken its share (each tenant asked of its owner). No
 * run is lost or served twice across the change. */
static void test_p4_to_p8_by_draining(void **state)
{
    pf_fixture *f = *state;
    long before[TENANTS];
    assert_int_equal(drain_for(f, before, PARTS, 2 * PARTS), 4);
    assert_int_equal(pt_proxy_start(&f->px, f->srv, "proxy8", YAML("8", "rep-a")), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "consuming a partition", 2 * PARTS, 20000), 0);
    assert_debts(f, before);
    assert_int_equal(pt_proxy_start(&second, f->srv, "rep-b", YAML("8", "rep-b")), 0);
    const char *const ids[] = {"rep-a", "rep-b"};
    assert_int_equal(pf_wait_shared(&f->c, "fairq_lease", 2 * PARTS, ids, 2, 30000), 0);
    assert_debts(f, before);
    assert_served_once(f, ids);
}

/* P from from to to, both replicas started at once (with
 * partitions_before: from, when from > 1; docs/partitions.md, "Changing
 * P"): each takes its share at once, and the replica that takes a moved
 * tenant's partition is often not the one taking its old partition's
 * number, whose subject holds its records. Each debt is what it was (asked
 * of its owner): the replica taking partition k reads the subjects that
 * held k's tenants before too (from P = 1: fairq.runs), the latest record
 * of a tenant by the stream's sequence winning. Without the setting, the
 * replica taking k read only fairq.runs.k and the other dropped the moved
 * tenants' records as foreign: their debts were gone. */
static void change_together(pf_fixture *f, uint32_t from, uint32_t to, const char *yaml_a,
                            const char *yaml_b)
{
    long before[TENANTS];
    assert_true(drain_for(f, before, from, to) >= 2);
    assert_int_equal(pt_proxy_start(&f->px, f->srv, "proxy-a", yaml_a), 0);
    assert_int_equal(pt_proxy_start(&second, f->srv, "rep-b", yaml_b), 0);
    const char *const ids[] = {"rep-a", "rep-b"};
    assert_int_equal(pf_wait_shared(&f->c, "fairq_lease", (int)to, ids, 2, 30000), 0);
    assert_debts(f, before);
    assert_served_once(f, ids);
}

/* 4 to 8: a tenant of k is in k or k + 4. */
static void test_p4_to_p8_together(void **state)
{
    change_together(*state, PARTS, 2 * PARTS, "partitions_before: 4\n" YAML("8", "rep-a"),
                    "partitions_before: 4\n" YAML("8", "rep-b"));
}

/* 4 to 6, not a multiple: a tenant of k of 6 was in k mod 2 or k mod 2 + 2
 * of 4, and the subject of its old number may be read after its new one. */
static void test_p4_to_p6_together(void **state)
{
    change_together(*state, PARTS, 6, "partitions_before: 4\n" YAML("6", "rep-a"),
                    "partitions_before: 4\n" YAML("6", "rep-b"));
}

/* 1 to 4: every replica taking partitions reads fairq.runs first, each
 * record going to its tenant's partition if it is one being taken. */
static void test_p1_to_p4_together(void **state)
{
    change_together(*state, 1, PARTS, YAML("4", "rep-a"), YAML("4", "rep-b"));
}

/* 8 to 4, a shrink: a tenant of k of 4 was in k or k + 4 of 8, both
 * subjects read by k's owner, fairq.runs.k first. */
static void test_p8_to_p4_together(void **state)
{
    change_together(*state, 2 * PARTS, PARTS, "partitions_before: 8\n" YAML("4", "rep-a"),
                    "partitions_before: 8\n" YAML("4", "rep-b"));
}

/* A tenant asked of the replica that took its partition but has not read
 * it back yet: answered busy, saying so (fairq-admin asks again), not as a
 * tenant unknown (no row: its debt read as none); once read back, its debt.
 * The read-back is held by refusing the partitions' markers. */
static void test_debt_asked_while_read_back(void **state)
{
    pf_fixture *f = *state;
    long before[TENANTS];
    assert_int_equal(pt_log_wait_n(&f->px, "consuming a partition", PARTS, 20000), 0);
    drain_in_debt(f, before);
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    journal_max_msg_size(f, 8);
    assert_int_equal(pt_proxy_start(&f->px, f->srv, "proxy-again", YAML("4", "rep-a")), 0);
    const char *const ids[] = {"rep-a"};
    assert_int_equal(pf_wait_shared(&f->c, "fairq_lease", PARTS, ids, 1, 30000), 0);
    natsMsg *r = NULL;
    assert_int_equal(natsConnection_RequestString(&r, f->c.nc, "fair.admin.stats",
                                                  "{\"tenant\":\"t0\"}", 5000), NATS_OK);
    const char *text = natsMsg_GetData(r);
    fprintf(stderr, "t0 while read back: %s\n", text);
    assert_non_null(strstr(text, "\"ok\":false,\"busy\":true,\"retry_ms\":"));
    assert_non_null(strstr(text, "is being read back"));
    natsMsg_Destroy(r);
    journal_max_msg_size(f, -1);
    assert_debts(f, before);
    cJSON *j = pf_stats(f, "", NULL);
    assert_true(pf_overall(j, "admin_requests_busy") >= 1);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_p1_to_p4_by_draining, setup, teardown),
        cmocka_unit_test_setup_teardown(test_p4_to_p8_by_draining, setup4, teardown),
        cmocka_unit_test_setup_teardown(test_p4_to_p8_together, setup4, teardown),
        cmocka_unit_test_setup_teardown(test_p4_to_p6_together, setup4, teardown),
        cmocka_unit_test_setup_teardown(test_p1_to_p4_together, setup, teardown),
        cmocka_unit_test_setup_teardown(test_p8_to_p4_together, setup8, teardown),
        cmocka_unit_test_setup_teardown(test_debt_asked_while_read_back, setup4, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
