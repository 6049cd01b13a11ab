/* it_lockdown.c -- fairq on the shipped config/nats-server.conf: every role does its work, and nothing else. */
#define _GNU_SOURCE             /* strcasestr */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "opstest.h"
#include "proxytest.h"

/*
 * One nats-server on the repository's own config/nats-server.conf (the
 * file `make run` and docker-compose.yml use), the proxy as its user
 * "fairq", and the example clients (fairq-producer, fairq-worker,
 * fairq-admin) as theirs. Then each confined role tries what it must not:
 * the server refuses it, and its client hears of it as a permissions
 * violation naming the subject. A refused publish is dropped by the server,
 * so the violation is the proof that nothing happened.
 */

/* A client connection as one user of the shipped config, which collects
 * the permissions violations the server reports. */
typedef struct lk_client {
    natsConnection *nc;
    jsCtx *js;
    pthread_mutex_t mu;
    char denied[64][256];       /* the violations' texts, in order */
    int n;
} lk_client;

typedef struct fixture {
    natstest *srv;
    pt_proxy px;
    pt_proxy px2;               /* a second replica; pid 0: none */
    char conf[512];             /* the shipped server config */
    natstest *srv2;             /* a second server, on a copy of it; NULL: none */
} fixture;

static void lk_on_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
    (void)sub;
    lk_client *c = closure;
    const char *text = NULL;
    if (err != NATS_NOT_PERMITTED)
        return;
    natsConnection_GetLastError(nc, &text);
    pthread_mutex_lock(&c->mu);
    if (c->n < 64)
        snprintf(c->denied[c->n++], sizeof c->denied[0], "%s", text ? text : "");
    pthread_mutex_unlock(&c->mu);
}

/* Connect as user, with its demo password and its own inbox prefix. */
static lk_client *lk_connect(const natstest *srv, const char *user)
{
    lk_client *c = calloc(1, sizeof *c);
    char pw[64], inbox[64];
    natsOptions *o = NULL;
    pthread_mutex_init(&c->mu, NULL);
    snprintf(pw, sizeof pw, "%s-demo-password", user);
    snprintf(inbox, sizeof inbox, "_INBOX_%s", user);
    assert_int_equal(natsOptions_Create(&o), NATS_OK);
    assert_int_equal(natsOptions_SetURL(o, natstest_url(srv)), NATS_OK);
    assert_int_equal(natsOptions_SetUserInfo(o, user, pw), NATS_OK);
    assert_int_equal(natsOptions_SetCustomInboxPrefix(o, inbox), NATS_OK);
    assert_int_equal(natsOptions_SetErrorHandler(o, lk_on_error, c), NATS_OK);
    natsStatus s = natsConnection_Connect(&c->nc, o);
    natsOptions_Destroy(o);
    assert_int_equal(s, NATS_OK);
    assert_int_equal(natsConnection_JetStream(&c->js, c->nc, NULL), NATS_OK);
    return c;
}

static void lk_close(lk_client *c)
{
    if (!c)
        return;
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Whether the server reported a violation naming subject within 2 s. */
static bool lk_denied(lk_client *c, const char *kind, const char *subject)
{
    char want[320];
    snprintf(want, sizeof want, "%s to \"%s\"", kind, subject);
    for (long long end = nt_now_ms() + 2000; nt_now_ms() < end; nt_sleep_ms(10)) {
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < c->n; i++) {
            if (strcasestr(c->denied[i], want)) {
                pthread_mutex_unlock(&c->mu);
                return true;
            }
        }
        pthread_mutex_unlock(&c->mu);
    }
    fprintf(stderr, "it_lockdown: no violation reported for %s to \"%s\"\n", kind, subject);
    return false;
}

/* Publishing to each subject is refused, the subject named. */
static void lk_assert_publish_denied(lk_client *c, const char *const *subjects)
{
    for (size_t i = 0; subjects[i]; i++) {
        assert_int_equal(natsConnection_PublishString(c->nc, subjects[i], "{\"seq\":1}"), NATS_OK);
        assert_int_equal(natsConnection_Flush(c->nc), NATS_OK);
        assert_true(lk_denied(c, "Publish", subjects[i]));
    }
}

/* Subscribing to each subject is refused, the subject named. */
static void lk_assert_subscribe_denied(lk_client *c, const char *const *subjects)
{
    for (size_t i = 0; subjects[i]; i++) {
        natsSubscription *sub = NULL;
        assert_int_equal(natsConnection_SubscribeSync(&sub, c->nc, subjects[i]), NATS_OK);
        assert_int_equal(natsConnection_Flush(c->nc), NATS_OK);
        assert_true(lk_denied(c, "Subscription", subjects[i]));
        natsSubscription_Destroy(sub);
    }
}

/* Lines of path holding every one of the texts (NULL-terminated). */
static int lk_lines(const char *path, const char *const *texts)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    int n = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        bool all = true;
        for (size_t i = 0; texts[i] && all; i++)
            all = strstr(line, texts[i]) != NULL;
        n += all;
    }
    fclose(f);
    return n;
}

/* The server's violations by user "fairq" in its current log. */
static int lk_proxy_violations(const fixture *f)
{
    char log[600];
    snprintf(log, sizeof log, "%s/nats.log", natstest_dir(f->srv));
    return lk_lines(log, (const char *const[]){"Violation", "User \"fairq\"", NULL});
}

/* Write a proxy config for user on srv (its inbox prefix _INBOX_<inbox>)
 * with extra YAML, and start it. */
static void lk_proxy_start(pt_proxy *px, const natstest *srv, const char *name,
                           const char *inbox, const char *extra)
{
    memset(px, 0, sizeof *px);
    snprintf(px->config, sizeof px->config, "%s/%s.yaml", natstest_dir(srv), name);
    snprintf(px->log, sizeof px->log, "%s/%s.log", natstest_dir(srv), name);
    FILE *f = fopen(px->config, "w");
    assert_non_null(f);
    fprintf(f,
            "nats:\n  url: %s\n  user: fairq\n  password: fairq-demo-password\n"
            "  inbox_prefix: %s\n"
            "http: {listen: \"\"}\n"
            "scheduler: {default_plan: free}\n"
            "plans: [{name: free}]\n%s",
            natstest_url(srv), inbox, extra);
    fclose(f);
    assert_int_equal(pt_proxy_restart(px), 0);
}

/* Run an example client to its end; its exit code (-1 if it hung), its
 * output appended to the fixture's client log. */
static int lk_run(const natstest *srv, const char *const *args)
{
    const char *argv[32];
    char bin[512], log[600];
    size_t n = 0;
    argv[n++] = nt_build_path(bin, sizeof bin, args[0]);
    for (size_t i = 1; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    snprintf(log, sizeof log, "%s/clients.log", natstest_dir(srv));
    nt_proc p;
    if (nt_proc_spawn(&p, argv, log) != 0 || nt_proc_wait(&p, 20000) != 0) {
        nt_proc_signal_wait(&p, 9, 2000);
        return -1;
    }
    return nt_proc_exit_code(&p);
}

/* The URL of user with its demo password. */
static const char *lk_url(const natstest *srv, const char *user, char *buf, size_t cap)
{
    snprintf(buf, cap, "nats://%s:%s-demo-password@127.0.0.1:%d", user, user,
             natstest_port(srv));
    return buf;
}

/* A worker pool's durable, made by the provisioner from the stream's first
 * run (a worker may not create consumers). */
static void lk_create_pool(const natstest *srv, const char *durable)
{
    char prov[160];
    lk_url(srv, "provisioner", prov, sizeof prov);
    assert_int_equal(lk_run(srv, (const char *const[]){"fairq-worker", "--nats", prov,
        "--inbox-prefix", "_INBOX_provisioner", "--deliver", "all", "--durable", durable,
        "--create-only", NULL}), 0);
}

/* The default pool's durable, fairq-workers. */
static void lk_create_durable(const natstest *srv)
{
    lk_create_pool(srv, "fairq-workers");
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    const char *src = getenv("FAIRQ_SOURCE_DIR");
    *state = f;
    snprintf(f->conf, sizeof f->conf, "%s/config/nats-server.conf", src && *src ? src : ".");
    const char *args[] = {"-c", f->conf, NULL};
    return natstest_start(&f->srv, args);
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->px.proc.pid)
        pt_proxy_stop(&f->px);
    if (f->px2.proc.pid && nt_proc_alive(&f->px2.proc))
        pt_proxy_stop(&f->px2);
    natstest_destroy(f->srv2);
    natstest_destroy(f->srv);
    free(f);
    return 0;
}

/* Everything the proxy does today, as "fairq" under its permissions:
 * streams and buckets created, the lease taken, the overrides watched and
 * written, runs taken and dispatched, a body read back by its sequence
 * (max_buffered_bytes holds none), a refusal published, completions taken,
 * admin requests answered, a reload, a reconnect after the server
 * restarts, and a restart that reads its journal back. The example clients
 * work as their own users. The server reports no violation by fairq. */
static void test_every_role_does_its_work(void **state)
{
    fixture *f = *state;
    char worker[160], acme[160], globex[160], admin[160];
    lk_url(f->srv, "worker", worker, sizeof worker);
    lk_url(f->srv, "acme", acme, sizeof acme);
    lk_url(f->srv, "globex", globex, sizeof globex);
    lk_url(f->srv, "admin", admin, sizeof admin);
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "limits: {max_buffered_bytes: 64}\n");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);

    /* acme watches its own refusals: a core subscription it may make. */
    lk_client *a = lk_connect(f->srv, "acme");
    natsSubscription *refusals = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&refusals, a->nc, "fair.rejected.acme"), NATS_OK);
    assert_int_equal(natsConnection_Flush(a->nc), NATS_OK);

    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-producer", "--nats", acme,
        "--inbox-prefix", "_INBOX_acme", "--tenant", "acme", "--count", "3",
        "--body", "a body longer than the proxy buffers, read back by its sequence", NULL}), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-producer", "--nats", globex,
        "--inbox-prefix", "_INBOX_globex", "--tenant", "globex", "--count", "2", NULL}), 0);
    /* Past scheduler.max_est_tokens: refused, on fair.rejected.acme. */
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-producer", "--nats", acme,
        "--inbox-prefix", "_INBOX_acme", "--tenant", "acme", "--est", "2000000", NULL}), 0);
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, refusals, 10000), NATS_OK);
    natsMsg_Destroy(m);
    natsSubscription_Destroy(refusals);

    /* A worker may not create it: without the durable it says who does. */
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-worker", "--nats", worker,
        "--inbox-prefix", "_INBOX_worker", "--api-prefix", "JS.FAIRQ.API", "--tokens-per-sec", "0", "--count", "1", NULL}), 1);
    lk_create_durable(f->srv);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-worker", "--nats", worker,
        "--inbox-prefix", "_INBOX_worker", "--api-prefix", "JS.FAIRQ.API", "--tokens-per-sec", "0", "--count", "5", NULL}), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-admin", "--nats", admin,
        "--inbox-prefix", "_INBOX_admin", "stats", NULL}), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-admin", "--nats", admin,
        "--inbox-prefix", "_INBOX_admin", "tenant.set", "{\"tenant\":\"globex\",\"weight\":2}",
        NULL}), 0);
    assert_int_equal(pt_log_wait(&f->px, "tenant override in force", 5000), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-admin", "--nats", admin,
        "--inbox-prefix", "_INBOX_admin", "reload", NULL}), 0);
    assert_int_equal(pt_log_wait(&f->px, "config reloaded", 5000), 0);
    /* The operator asks why any tenant's run waits. */
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-admin", "--nats", admin,
        "--inbox-prefix", "_INBOX_admin", "explain", "globex", "r1", NULL}), 0);
    assert_int_equal(lk_proxy_violations(f), 0);
    lk_close(a);

    /* The server restarts: the proxy reconnects, makes its consumers and
     * its watch again, and serves. */
    assert_int_equal(natstest_stop(f->srv), 0);
    assert_int_equal(natstest_restart(f->srv), 0);
    assert_int_equal(pt_log_wait(&f->px, "reconnected to NATS", 15000), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-producer", "--nats", globex,
        "--inbox-prefix", "_INBOX_globex", "--tenant", "globex", NULL}), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-worker", "--nats", worker,
        "--inbox-prefix", "_INBOX_worker", "--api-prefix", "JS.FAIRQ.API", "--tokens-per-sec", "0", "--count", "1", NULL}), 0);

    /* A restart reads the journal back and takes the lease again. */
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    assert_int_equal(pt_proxy_restart(&f->px), 0);
    assert_int_equal(pt_log_wait_n(&f->px, "fairq-proxy running", 2, 15000), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-admin", "--nats", admin,
        "--inbox-prefix", "_INBOX_admin", "stats", NULL}), 0);
    assert_int_equal(lk_proxy_violations(f), 0);
    assert_int_equal(pt_log_count(&f->px, "permission"), 0);
}

/* A producer publishes its own tenant's runs and reads its own PubAcks;
 * nothing else. */
static void test_a_producer_is_confined_to_its_tenant(void **state)
{
    fixture *f = *state;
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    lk_client *a = lk_connect(f->srv, "acme");
    jsPubAck *pa = NULL;
    assert_int_equal(js_Publish(&pa, a->js, "fair.submit.acme", "{\"run_id\":\"own\"}", 16, NULL,
                                NULL), NATS_OK);
    assert_string_equal(pa->Stream, "FAIR_SUBMIT");
    jsPubAck_Destroy(pa);
    assert_int_equal(a->n, 0);
    /* It may ask why its own runs wait, through its own explain subject. */
    natsMsg *x = NULL;
    assert_int_equal(natsConnection_RequestString(&x, a->nc, "fair.explain.acme",
                                                  "{\"run_id\":\"own\"}", 5000), NATS_OK);
    assert_non_null(strstr(natsMsg_GetData(x), "{\"ok\":true,\"tenant\":\"acme\",\"run_id\":\"own\""));
    natsMsg_Destroy(x);
    assert_int_equal(a->n, 0);
    lk_assert_publish_denied(a, (const char *const[]){
        "fair.explain.globex",                  /* why another tenant's runs wait */
        "fair.explain.initech",
        "fair.submit.globex",                   /* another tenant's runs */
        "fair.submit.acme.x",                   /* a 4-token submit subject */
        "fair.done.acme",                       /* a completion */
        "fair.dispatch",                        /* a dispatch */
        "fair.admin.tenant.set",                /* admin */
        "fair.admin.stats",
        "$KV.fairq_tenants.acme",               /* the overrides bucket */
        "$KV.fairq_lease.leader",               /* the lease: stop the leader */
        "fairq.runs",                           /* the journal */
        "$JS.API.DIRECT.GET.FAIR_SUBMIT",       /* other tenants' bodies */
        "$JS.API.STREAM.MSG.GET.FAIR_SUBMIT",
        "$JS.API.STREAM.INFO.FAIR_SUBMIT",      /* stream state, tenants' subjects */
        "$JS.API.CONSUMER.CREATE.FAIR_SUBMIT",  /* a consumer reading every tenant */
        "$JS.API.CONSUMER.CREATE.FAIR_DISPATCH",
        "$JS.API.STREAM.PURGE.FAIR_SUBMIT",
        "$JS.API.STREAM.DELETE.FAIR_SUBMIT",
        NULL});
    lk_assert_subscribe_denied(a, (const char *const[]){
        "_INBOX.>",                             /* the default inbox of everyone */
        "_INBOX_globex.>",                      /* another producer's PubAcks */
        "_INBOX_fairq.>",                       /* the proxy's replies */
        "_INBOX_admin.>",                       /* admin replies */
        ">",
        "fair.submit.>",
        "fair.dispatch",
        "fair.rejected.globex",
        NULL});
    /* The proxy still leads and answers: nothing acme tried reached it. */
    lk_client *ad = lk_connect(f->srv, "admin");
    natsMsg *r = NULL;
    assert_int_equal(natsConnection_RequestString(&r, ad->nc, "fair.admin.tenant.get",
                                                  "{\"tenant\":\"acme\"}", 5000), NATS_OK);
    assert_non_null(strstr(natsMsg_GetData(r), "\"weight\":1,"));
    natsMsg_Destroy(r);
    assert_int_equal(ad->n, 0);
    assert_int_equal(pt_log_count(&f->px, "leader lease acquired"), 1);
    assert_int_equal(pt_log_count(&f->px, "lost"), 0);
    lk_close(ad);
    lk_close(a);
}

/* A producer's own submit, with a reply subject naming fairq's state: the
 * server sends the PubAck to that reply in the publisher's account without
 * asking its permissions, so a producer sharing fairq's account wrote the
 * lease (the leader stopped), submitted as globex, wrote an override and
 * the journal, and reached the admin's inbox. In an account of its own the
 * reply stays there: none of these is written, and the proxy still leads. */
static void test_a_producer_reply_reaches_nothing_of_fairq(void **state)
{
    fixture *f = *state;
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    lk_client *a = lk_connect(f->srv, "acme");
    lk_client *ad = lk_connect(f->srv, "admin");
    natsSubscription *stolen = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&stolen, ad->nc, "_INBOX_admin.stolen"), NATS_OK);
    assert_int_equal(natsConnection_Flush(ad->nc), NATS_OK);
    const char *const replies[] = {"$KV.fairq_lease.leader", "fair.submit.globex", "fairq.runs",
                                   "$KV.fairq_tenants.acme", "fair.done.globex",
                                   "_INBOX_admin.stolen", NULL};
    for (size_t i = 0; replies[i]; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"run_id\":\"reply-%zu\"}", i);
        assert_int_equal(natsConnection_PublishRequestString(a->nc, "fair.submit.acme", replies[i],
                                                             body), NATS_OK);
    }
    /* Its next PubAck comes after the server has sent those. */
    jsPubAck *pa = NULL;
    assert_int_equal(js_Publish(&pa, a->js, "fair.submit.acme", "{\"run_id\":\"after\"}", 18,
                                NULL, NULL), NATS_OK);
    jsPubAck_Destroy(pa);
    assert_int_equal(a->n, 0);
    assert_int_equal(natsConnection_Flush(ad->nc), NATS_OK);
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, stolen, 500), NATS_TIMEOUT);
    natsSubscription_Destroy(stolen);

    /* Read as fairq: the lease holds the proxy's record, nothing was
     * stored as globex's, no override was written. */
    lk_client *q = lk_connect(f->srv, "fairq");
    jsErrCode jerr = 0;
    assert_int_equal(js_GetLastMsg(&m, q->js, "KV_fairq_lease", "$KV.fairq_lease.leader", NULL,
                                   &jerr), NATS_OK);
    assert_null(strstr(natsMsg_GetData(m), "\"stream\""));
    natsMsg_Destroy(m);
    m = NULL;
    assert_int_not_equal(js_GetLastMsg(&m, q->js, "FAIR_SUBMIT", "fair.submit.globex", NULL, &jerr),
                         NATS_OK);
    assert_null(m);
    jsStreamInfo *si = NULL;
    assert_int_equal(js_GetStreamInfo(&si, q->js, "KV_fairq_tenants", NULL, &jerr), NATS_OK);
    assert_int_equal(si->State.Msgs, 0);
    jsStreamInfo_Destroy(si);
    assert_int_equal(q->n, 0);
    assert_int_equal(ad->n, 0);

    /* The proxy still leads and answers; globex is unknown to it. */
    natsMsg *r = NULL;
    assert_int_equal(natsConnection_RequestString(&r, ad->nc, "fair.admin.stats", "{}", 5000),
                     NATS_OK);
    assert_null(strstr(natsMsg_GetData(r), "globex"));
    natsMsg_Destroy(r);
    assert_int_equal(pt_log_count(&f->px, "lost"), 0);
    assert_int_equal(pt_log_count(&f->px, "leader lease acquired"), 1);
    lk_close(q);
    lk_close(ad);
    lk_close(a);
}

/* Workers take dispatches and send completions; they read no stream by
 * sequence, submit nothing, and touch neither the lease nor admin. */
static void test_a_worker_is_confined_to_its_work(void **state)
{
    fixture *f = *state;
    lk_client *w = lk_connect(f->srv, "worker");
    lk_assert_publish_denied(w, (const char *const[]){
        "$JS.API.DIRECT.GET.FAIR_SUBMIT",
        "$JS.API.STREAM.MSG.GET.FAIR_SUBMIT",
        "$JS.API.DIRECT.GET.FAIR_DISPATCH",
        "$JS.API.STREAM.MSG.GET.FAIR_DISPATCH",
        "$JS.API.STREAM.PURGE.FAIR_DISPATCH",
        "$JS.API.CONSUMER.DURABLE.CREATE.FAIR_SUBMIT.x",
        "$JS.API.CONSUMER.CREATE.FAIR_DISPATCH.x",  /* consumers: the admin's to make */
        "$JS.API.CONSUMER.DURABLE.CREATE.FAIR_DISPATCH.x",
        "$JS.API.CONSUMER.CREATE.FAIR_DISPATCH.x.fair.dispatch",
        "$JS.API.CONSUMER.MSG.NEXT.FAIR_DISPATCH.other",    /* another pool's durable */
        "$JS.API.STREAM.CREATE.x",              /* streams other than its claim bucket */
        "fair.submit.acme",
        "fair.dispatch",
        "fair.admin.stats",
        "$KV.fairq_lease.leader",
        "$KV.fairq_tenants.acme",
        "fairq.runs",
        NULL});
    lk_assert_subscribe_denied(w, (const char *const[]){"_INBOX.>", "_INBOX_acme.>",
                                                        "fair.submit.>", NULL});
    lk_close(w);
}

/* A worker's completion with a reply naming fairq's lease: in fairq's
 * account the server's PubAck went there, the lease was written and the
 * leader stopped. In the workers' own account the reply stays there. */
static void test_a_worker_reply_reaches_nothing_of_fairq(void **state)
{
    fixture *f = *state;
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    lk_client *w = lk_connect(f->srv, "worker");
    const char *body = "{\"run_id\":\"r1\",\"actual_tokens\":1,\"status\":\"ok\"}";
    assert_int_equal(natsConnection_PublishRequestString(w->nc, "fair.done.acme",
                                                         "$KV.fairq_lease.leader", body), NATS_OK);
    /* Its next PubAck comes after the server has sent that one. */
    jsPubAck *pa = NULL;
    assert_int_equal(js_Publish(&pa, w->js, "fair.done.acme", body, (int)strlen(body), NULL,
                                NULL), NATS_OK);
    assert_string_equal(pa->Stream, "FAIR_DONE");
    jsPubAck_Destroy(pa);
    assert_int_equal(w->n, 0);

    lk_client *q = lk_connect(f->srv, "fairq");
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    assert_int_equal(js_GetLastMsg(&m, q->js, "KV_fairq_lease", "$KV.fairq_lease.leader", NULL,
                                   &jerr), NATS_OK);
    assert_null(strstr(natsMsg_GetData(m), "\"stream\""));
    natsMsg_Destroy(m);
    lk_client *ad = lk_connect(f->srv, "admin");
    natsMsg *r = NULL;
    assert_int_equal(natsConnection_RequestString(&r, ad->nc, "fair.admin.stats", "{}", 5000),
                     NATS_OK);
    natsMsg_Destroy(r);
    assert_int_equal(pt_log_count(&f->px, "lost"), 0);
    assert_int_equal(pt_log_count(&f->px, "leader lease acquired"), 1);
    assert_true(nt_proc_alive(&f->px.proc));
    lk_close(ad);
    lk_close(q);
    lk_close(w);
}

/* A worker may not create a consumer on FAIR_DISPATCH: a push consumer's
 * deliver subject would send every dispatched run anywhere. */
static void test_a_worker_cannot_redirect_dispatches(void **state)
{
    fixture *f = *state;
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    lk_client *w = lk_connect(f->srv, "worker");
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsOptions jo;
    jsConsumerConfig_Init(&cc);
    cc.Durable = "stolen";
    cc.DeliverSubject = "_INBOX_worker.stolen";
    cc.AckPolicy = js_AckNone;
    jsOptions_Init(&jo);
    jo.Wait = 1000;
    assert_int_not_equal(js_AddConsumer(&ci, w->js, "FAIR_DISPATCH", &cc, &jo, NULL), NATS_OK);
    assert_null(ci);
    assert_true(lk_denied(w, "Publish", "$JS.API.CONSUMER.DURABLE.CREATE.FAIR_DISPATCH.stolen"));
    /* As fairq: FAIR_DISPATCH has no consumer. */
    lk_client *q = lk_connect(f->srv, "fairq");
    jsErrCode jerr = 0;
    assert_int_not_equal(js_GetConsumerInfo(&ci, q->js, "FAIR_DISPATCH", "stolen", NULL, &jerr),
                         NATS_OK);
    lk_close(q);
    lk_close(w);
}

/* A stream create carries its subjects in its body, which no permission
 * checks: a worker's claim bucket made in fairq's account captured the
 * admin's requests and inboxes. Made in the workers' claims account, it
 * captures nothing of fairq's: an admin request does not land in it. */
static void test_a_worker_stream_captures_nothing_of_fairq(void **state)
{
    fixture *f = *state;
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    lk_client *w = lk_connect(f->srv, "worker");
    jsStreamConfig sc;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    const char *subjects[] = {"fair.admin.>", "_INBOX_admin.>", "_INBOX_fairq.>"};
    jsStreamConfig_Init(&sc);
    sc.Name = "KV_fairq_claims_fairq-workers";
    sc.Subjects = subjects;
    sc.SubjectsLen = 3;
    sc.Storage = js_FileStorage;
    assert_int_equal(js_AddStream(&si, w->js, &sc, NULL, &jerr), NATS_OK);
    jsStreamInfo_Destroy(si);
    si = NULL;
    lk_client *ad = lk_connect(f->srv, "admin");
    natsMsg *r = NULL;
    assert_int_equal(natsConnection_RequestString(&r, ad->nc, "fair.admin.stats", "{}", 5000),
                     NATS_OK);
    natsMsg_Destroy(r);
    assert_int_equal(js_GetStreamInfo(&si, w->js, "KV_fairq_claims_fairq-workers", NULL, &jerr),
                     NATS_OK);
    assert_int_equal(si->State.Msgs, 0);
    jsStreamInfo_Destroy(si);
    assert_int_equal(w->n, 0);
    assert_int_equal(ad->n, 0);
    lk_close(ad);
    lk_close(w);
}

/* Two worker pools, each a durable the provisioner made and a user of its
 * own: each takes every run, and neither may pull, ack or claim from the
 * other's durable and bucket, nor read the other's inbox. */
static void test_two_pools_each_do_their_own_work(void **state)
{
    fixture *f = *state;
    char acme[160], worker[160], batch[160];
    lk_url(f->srv, "acme", acme, sizeof acme);
    lk_url(f->srv, "worker", worker, sizeof worker);
    lk_url(f->srv, "worker-batch", batch, sizeof batch);
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-producer", "--nats", acme,
        "--inbox-prefix", "_INBOX_acme", "--tenant", "acme", "--count", "2", NULL}), 0);
    lk_create_pool(f->srv, "fairq-workers");
    lk_create_pool(f->srv, "batch");
    /* each pool works both runs, its claims in its own bucket */
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-worker", "--nats", worker,
        "--inbox-prefix", "_INBOX_worker", "--api-prefix", "JS.FAIRQ.API", "--tokens-per-sec",
        "0", "--count", "2", NULL}), 0);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-worker", "--nats", batch,
        "--inbox-prefix", "_INBOX_worker-batch", "--api-prefix", "JS.FAIRQ.API", "--durable",
        "batch", "--tokens-per-sec", "0", "--count", "2", NULL}), 0);
    lk_client *w = lk_connect(f->srv, "worker");
    lk_client *b = lk_connect(f->srv, "worker-batch");
    const char *const buckets[] = {"KV_fairq_claims_fairq-workers", "KV_fairq_claims_batch"};
    for (int i = 0; i < 2; i++) {
        jsStreamInfo *si = NULL;
        jsErrCode jerr = 0;
        assert_int_equal(js_GetStreamInfo(&si, i ? b->js : w->js, buckets[i], NULL, &jerr),
                         NATS_OK);
        assert_int_equal(si->State.Msgs, 2);
        jsStreamInfo_Destroy(si);
    }
    /* as batch, the default pool's durable is refused */
    assert_int_not_equal(lk_run(f->srv, (const char *const[]){"fairq-worker", "--nats", batch,
        "--inbox-prefix", "_INBOX_worker-batch", "--api-prefix", "JS.FAIRQ.API",
        "--tokens-per-sec", "0", "--count", "1", NULL}), 0);
    lk_assert_publish_denied(b, (const char *const[]){
        "JS.FAIRQ.API.CONSUMER.MSG.NEXT.FAIR_DISPATCH.fairq-workers",
        "JS.FAIRQ.API.CONSUMER.INFO.FAIR_DISPATCH.fairq-workers",
        "$JS.ACK.FAIR_DISPATCH.fairq-workers.1.1.1.1.1.1",
        "$KV.fairq_claims_fairq-workers.x",
        "$JS.API.STREAM.CREATE.KV_fairq_claims_fairq-workers",
        "$JS.API.DIRECT.GET.KV_fairq_claims_fairq-workers.x",
        NULL});
    lk_assert_subscribe_denied(b, (const char *const[]){"_INBOX_worker.>", NULL});
    lk_assert_publish_denied(w, (const char *const[]){
        "JS.FAIRQ.API.CONSUMER.MSG.NEXT.FAIR_DISPATCH.batch",
        "$JS.ACK.FAIR_DISPATCH.batch.1.1.1.1.1.1",
        "$KV.fairq_claims_batch.x",
        NULL});
    lk_assert_subscribe_denied(w, (const char *const[]){"_INBOX_worker-batch.>", NULL});
    assert_int_equal(lk_proxy_violations(f), 0);
    lk_close(b);
    lk_close(w);
}

/* The operator does what fairq-admin does, watches and reads refusals, and
 * nothing else: no consumer (a push consumer delivers anywhere in FAIRQ),
 * no write to a stream or bucket of fairq's. */
static void test_the_admin_is_confined_to_the_admin_plane(void **state)
{
    fixture *f = *state;
    char acme[160];
    lk_url(f->srv, "acme", acme, sizeof acme);
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    lk_client *ad = lk_connect(f->srv, "admin");
    natsSubscription *refusals = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&refusals, ad->nc, "fair.rejected.*"), NATS_OK);
    assert_int_equal(natsConnection_Flush(ad->nc), NATS_OK);
    assert_int_equal(lk_run(f->srv, (const char *const[]){"fairq-producer", "--nats", acme,
        "--inbox-prefix", "_INBOX_acme", "--tenant", "acme", "--est", "2000000", NULL}), 0);
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, refusals, 10000), NATS_OK);
    assert_string_equal(natsMsg_GetSubject(m), "fair.rejected.acme");
    natsMsg_Destroy(m);
    natsSubscription_Destroy(refusals);
    /* the stored refusal, read by its sequence through FAIRQ's API */
    jsCtx *fjs = NULL;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Prefix = "JS.FAIRQ.API";
    jo.Wait = 5000;
    assert_int_equal(natsConnection_JetStream(&fjs, ad->nc, &jo), NATS_OK);
    jsErrCode jerr = 0;
    m = NULL;
    assert_int_equal(js_GetMsg(&m, fjs, "FAIR_REJECTED", 1, NULL, &jerr), NATS_OK);
    assert_string_equal(natsMsg_GetSubject(m), "fair.rejected.acme");
    natsMsg_Destroy(m);
    assert_int_equal(ad->n, 0);
    /* no push consumer on FAIR_DISPATCH */
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsConsumerConfig_Init(&cc);
    cc.Durable = "stolen";
    cc.DeliverSubject = "fair.submit.globex";
    cc.AckPolicy = js_AckNone;
    jo.Wait = 1000;
    assert_int_not_equal(js_AddConsumer(&ci, fjs, "FAIR_DISPATCH", &cc, &jo, NULL), NATS_OK);
    assert_null(ci);
    assert_true(lk_denied(ad, "Publish",
                          "JS.FAIRQ.API.CONSUMER.DURABLE.CREATE.FAIR_DISPATCH.stolen"));
    jsCtx_Destroy(fjs);
    lk_assert_publish_denied(ad, (const char *const[]){
        "$JS.API.CONSUMER.DURABLE.CREATE.FAIR_DISPATCH.x",
        "$JS.API.CONSUMER.CREATE.FAIR_DISPATCH.x",
        "$JS.API.CONSUMER.CREATE.FAIR_REJECTED",
        "$JS.API.CONSUMER.CREATE.KV_fairq_tenants",
        "$KV.fairq_tenants.acme",               /* overrides: fair.admin.tenant.set */
        "$KV.fairq_lease.leader",
        "fair.submit.acme",
        "fair.dispatch",
        "fair.done.acme",
        "fairq.runs",
        "$JS.API.DIRECT.GET.FAIR_SUBMIT",
        "$JS.API.STREAM.MSG.GET.FAIR_SUBMIT",
        NULL});
    lk_assert_subscribe_denied(ad, (const char *const[]){"_INBOX_fairq.>", "_INBOX_acme.>",
                                                         "fair.submit.>", "fair.dispatch", NULL});
    /* FAIR_DISPATCH has no consumer */
    lk_client *q = lk_connect(f->srv, "fairq");
    assert_int_not_equal(js_GetConsumerInfo(&ci, q->js, "FAIR_DISPATCH", "stolen", NULL, &jerr),
                         NATS_OK);
    lk_close(q);
    lk_close(ad);
}

/* An admin request whose reply names fairq's state: the proxy answers any
 * reply it is sent (allow_responses), so with the admin a user of FAIRQ
 * the answer to stats went onto the lease (the leader stopped) or was
 * stored as a submit of globex's. From its own account the reply stays
 * there: nothing of fairq's is written, and the proxy still leads. */
static void test_an_admin_reply_reaches_nothing_of_fairq(void **state)
{
    fixture *f = *state;
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    lk_client *ad = lk_connect(f->srv, "admin");
    const char *const replies[] = {"$KV.fairq_lease.leader", "fair.submit.globex", "fairq.runs",
                                   NULL};
    for (size_t i = 0; replies[i]; i++)
        assert_int_equal(natsConnection_PublishRequestString(ad->nc, "fair.admin.stats",
                                                             replies[i], "{}"), NATS_OK);
    /* Its next answer comes after the proxy has answered those. */
    natsMsg *r = NULL;
    assert_int_equal(natsConnection_RequestString(&r, ad->nc, "fair.admin.stats", "{}", 5000),
                     NATS_OK);
    natsMsg_Destroy(r);
    assert_int_equal(ad->n, 0);
    lk_client *q = lk_connect(f->srv, "fairq");
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    assert_int_equal(js_GetLastMsg(&m, q->js, "KV_fairq_lease", "$KV.fairq_lease.leader", NULL,
                                   &jerr), NATS_OK);
    assert_null(strstr(natsMsg_GetData(m), "\"overall\""));
    natsMsg_Destroy(m);
    m = NULL;
    assert_int_not_equal(js_GetLastMsg(&m, q->js, "FAIR_SUBMIT", "fair.submit.globex", NULL, &jerr),
                         NATS_OK);
    assert_null(m);
    assert_int_equal(pt_log_count(&f->px, "lost"), 0);
    assert_int_equal(pt_log_count(&f->px, "leader lease acquired"), 1);
    assert_true(nt_proc_alive(&f->px.proc));
    lk_close(q);
    lk_close(ad);
}

static int lk_admin_as(const natstest *srv, const char *user, const char *const *args,
                       cJSON **out);

/* Step 4 of a change of P (docs/partitions.md), fairq stopped: the
 * provisioner seals and deletes FAIR_SUBMIT and FAIR_DONE and gives FAIRQ_RUNS its
 * subject per partition after its own (fairq-admin reshape), and may
 * delete or change no other stream; the operator may do none of it (it is
 * not an admin request). */
static void test_the_provisioner_reshapes_the_streams(void **state)
{
    fixture *f = *state;
    lk_proxy_start(&f->px, f->srv, "proxy", "_INBOX_fairq", "");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    assert_int_equal(pt_proxy_stop(&f->px), 0);
    lk_client *ad = lk_connect(f->srv, "admin");
    lk_assert_publish_denied(ad, (const char *const[]){
        "JS.FAIRQ.API.STREAM.DELETE.FAIR_SUBMIT", "$JS.API.STREAM.DELETE.FAIR_SUBMIT",
        "JS.FAIRQ.API.STREAM.UPDATE.FAIRQ_RUNS", NULL});
    lk_close(ad);
    /* fairq-admin reshape, as the provisioner: both streams seen empty,
     * sealed, seen empty again and deleted, FAIRQ_RUNS given its subject
     * per partition after its own */
    cJSON *out = NULL;
    assert_int_equal(lk_admin_as(f->srv, "provisioner", (const char *const[]){"reshape", NULL},
                                 &out), 0);
    assert_non_null(out);
    char *said = cJSON_PrintUnformatted(out);
    assert_string_equal(said, "{\"ok\":true,\"deleted\":[\"FAIR_SUBMIT\",\"FAIR_DONE\"],"
                              "\"journal_subject_added\":true}");
    free(said);
    cJSON_Delete(out);
    lk_client *p = lk_connect(f->srv, "provisioner");
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    assert_int_equal(js_GetStreamInfo(&si, p->js, "FAIRQ_RUNS", NULL, &jerr), NATS_OK);
    assert_int_equal(si->Config->SubjectsLen, 2);
    assert_string_equal(si->Config->Subjects[0], "fairq.runs");
    assert_string_equal(si->Config->Subjects[1], "fairq.runs.*");
    jsStreamInfo_Destroy(si);
    si = NULL;
    assert_int_equal(p->n, 0);
    lk_assert_publish_denied(p, (const char *const[]){
        "$JS.API.STREAM.DELETE.FAIR_DISPATCH", "$JS.API.STREAM.DELETE.FAIRQ_RUNS",
        "$JS.API.STREAM.DELETE.KV_fairq_lease", "$JS.API.STREAM.UPDATE.FAIR_DISPATCH",
        "$JS.API.STREAM.PURGE.FAIR_DISPATCH", "$JS.API.STREAM.CREATE.FAIR_SUBMIT", NULL});
    lk_close(p);
    /* the two gone, as fairq sees it: it makes them again at its start */
    lk_client *q = lk_connect(f->srv, "fairq");
    assert_int_not_equal(js_GetStreamInfo(&si, q->js, "FAIR_SUBMIT", NULL, &jerr), NATS_OK);
    assert_int_not_equal(js_GetStreamInfo(&si, q->js, "FAIR_DONE", NULL, &jerr), NATS_OK);
    lk_close(q);
}

/* A copy of the shipped config at path with text (its first mention after
 * the first of after, e.g. "user: fairq"; NULL: none) blanked out. */
static void lk_conf_without(const fixture *f, const char *path, const char *after,
                            const char *text)
{
    FILE *in = fopen(f->conf, "r");
    assert_non_null(in);
    static char buf[64 * 1024];
    size_t len = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[len] = '\0';
    if (text) {
        char *from = after ? strstr(buf, after) : buf;
        assert_non_null(from);
        char *at = strstr(from, text);
        assert_non_null(at);
        memset(at, ' ', strlen(text));
    }
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    fputs(buf, out);
    fclose(out);
}

/* A permission the proxy lacks is a start-up error naming the subject,
 * not a silent failure behind a ready proxy: here the overrides watch's
 * $JS.API.STREAM.NAMES, taken out of a copy of the shipped config, and an
 * inbox prefix the server does not let fairq subscribe to. */
static void test_a_missing_permission_fails_start(void **state)
{
    fixture *f = *state;
    /* The shipped config without $JS.API.STREAM.NAMES for fairq. */
    char conf[600];
    snprintf(conf, sizeof conf, "%s/no-names.conf", natstest_dir(f->srv));
    lk_conf_without(f, conf, "user: fairq", "\"$JS.API.STREAM.NAMES\",");
    assert_int_equal(natstest_start(&f->srv2, (const char *const[]){"-c", conf, NULL}), 0);
    lk_proxy_start(&f->px, f->srv2, "proxy-no-names", "_INBOX_fairq", "");
    assert_int_equal(nt_proc_wait(&f->px.proc, 20000), 0);
    assert_int_equal(nt_proc_exit_code(&f->px.proc), 1);
    assert_int_equal(pt_log_count(&f->px, "NATS refuses fairq a permission it needs"), 1);
    assert_int_equal(pt_log_count(&f->px, "Publish to \\\"$JS.API.STREAM.NAMES\\\""), 1);
    assert_int_equal(pt_log_count(&f->px, "fairq-proxy running"), 0);

    /* The default inbox prefix: fairq may not subscribe to _INBOX.> */
    lk_proxy_start(&f->px, f->srv, "proxy-default-inbox", "_INBOX", "");
    assert_int_equal(nt_proc_wait(&f->px.proc, 20000), 0);
    assert_int_equal(nt_proc_exit_code(&f->px.proc), 1);
    assert_int_equal(pt_log_count(&f->px, "NATS refuses fairq a permission it needs"), 1);
    assert_int_equal(pt_log_count(&f->px, "Subscription to \\\"_INBOX."), 1);
}

/* A permission taken away while the proxy serves (the server's config
 * reloaded without fair.rejected.*): the refusal it then cannot publish is
 * logged as an error naming the subject, and the proxy goes on serving the
 * others. */
static void test_a_permission_lost_later_is_logged(void **state)
{
    fixture *f = *state;
    char conf[600], acme[160], globex[160];
    snprintf(conf, sizeof conf, "%s/served.conf", natstest_dir(f->srv));
    lk_conf_without(f, conf, NULL, NULL);
    /* A server of its own on that copy, which lives in f->srv's directory. */
    assert_int_equal(natstest_start(&f->srv2, (const char *const[]){"-c", conf, NULL}), 0);
    lk_url(f->srv2, "acme", acme, sizeof acme);
    lk_url(f->srv2, "globex", globex, sizeof globex);
    setenv("FAIRQ_HTTP_LISTEN", "127.0.0.1:0", 1);
    lk_proxy_start(&f->px, f->srv2, "proxy", "_INBOX_fairq", "");
    unsetenv("FAIRQ_HTTP_LISTEN");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    /* "Later" is once the proxy has served: it logs "running" before its
     * consumers are made (they are made without waiting), and a refusal
     * until both are is a start-up error that stops it (docs/security.md).
     * Reloaded before, a loaded machine had the refusal come first now and
     * then: ready says both are made. */
    int port = ot_http_port(&f->px, 5000);
    assert_true(port > 0);
    long long t0 = nt_now_ms(), end = t0 + 15000;
    int status = 0;
    while ((ot_http_get(port, "/readyz", &status, NULL) != 0 || status != 200) &&
           nt_now_ms() < end)
        nt_sleep_ms(20);
    assert_int_equal(status, 200);
    print_message("ready %lld ms after \"fairq-proxy running\" was read\n", nt_now_ms() - t0);
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-producer", "--nats", globex,
        "--inbox-prefix", "_INBOX_globex", "--tenant", "globex", NULL}), 0);
    lk_conf_without(f, conf, "user: fairq", "\"fair.rejected.*\",");
    /* A reload compares the store directory too: the file must name the
     * one -sd gave. */
    FILE *c = fopen(conf, "a");
    assert_non_null(c);
    fprintf(c, "jetstream { store_dir: \"%s/store\" }\n", natstest_dir(f->srv2));
    fclose(c);
    assert_int_equal(natstest_reload(f->srv2), 0);
    char log[600];
    snprintf(log, sizeof log, "%s/nats.log", natstest_dir(f->srv2));
    for (long long end = nt_now_ms() + 5000;
         !lk_lines(log, (const char *const[]){"Reloaded", NULL}) && nt_now_ms() < end;)
        nt_sleep_ms(20);
    /* Refused for its estimate: the refusal cannot be published now. */
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-producer", "--nats", acme,
        "--inbox-prefix", "_INBOX_acme", "--tenant", "acme", "--est", "2000000", NULL}), 0);
    assert_int_equal(pt_log_wait(&f->px, "NATS refused fairq a publish or subscription", 10000), 0);
    assert_int_equal(pt_log_count(&f->px, "Publish to \\\"fair.rejected.acme\\\""), 1);
    assert_true(nt_proc_alive(&f->px.proc));
    assert_int_equal(pt_log_count(&f->px, "NATS refuses fairq a permission it needs"), 0);
    /* ... and the others are served: globex's runs before and after. */
    char worker[160];
    lk_url(f->srv2, "worker", worker, sizeof worker);
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-producer", "--nats", globex,
        "--inbox-prefix", "_INBOX_globex", "--tenant", "globex", NULL}), 0);
    lk_create_durable(f->srv2);
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-worker", "--nats", worker,
        "--inbox-prefix", "_INBOX_worker", "--api-prefix", "JS.FAIRQ.API", "--tokens-per-sec", "0", "--count", "2", NULL}), 0);
    /* Its refusal is still retried: a graceful stop would wait for it. */
    assert_int_equal(pt_proxy_kill(&f->px), 0);
}

/* f->srv2 on the shipped config with partitions on (its include of
 * nats-partitions.conf uncommented). */
static void lk_partitioned_server(fixture *f)
{
    char conf[600], part[600], src[600];
    snprintf(conf, sizeof conf, "%s/partitioned.conf", natstest_dir(f->srv));
    lk_conf_without(f, conf, "#include \"nats-partitions.conf\"", "#");
    /* the included file, next to the copy that includes it */
    snprintf(src, sizeof src, "%.*s/nats-partitions.conf",
             (int)(strrchr(f->conf, '/') - f->conf), f->conf);
    snprintf(part, sizeof part, "%s/nats-partitions.conf", natstest_dir(f->srv));
    FILE *in = fopen(src, "r"), *out = fopen(part, "w");
    assert_non_null(in);
    assert_non_null(out);
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, in)) > 0;)
        fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
    assert_int_equal(natstest_start(&f->srv2, (const char *const[]){"-c", conf, NULL}), 0);
}

/* With partitions on (the shipped config's include uncommented, fairq's
 * partitions: 16): producers and workers on their usual subjects are
 * served through the server's mapping, and neither may publish a 4-token
 * subject, which would name a partition itself. */
static void test_partitions_served_and_confined(void **state)
{
    fixture *f = *state;
    char acme[160], globex[160], worker[160];
    lk_partitioned_server(f);
    lk_url(f->srv2, "acme", acme, sizeof acme);
    lk_url(f->srv2, "globex", globex, sizeof globex);
    lk_url(f->srv2, "worker", worker, sizeof worker);
    lk_proxy_start(&f->px, f->srv2, "proxy", "_INBOX_fairq", "partitions: 16\n");
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-producer", "--nats", acme,
        "--inbox-prefix", "_INBOX_acme", "--tenant", "acme", "--count", "3", NULL}), 0);
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-producer", "--nats", globex,
        "--inbox-prefix", "_INBOX_globex", "--tenant", "globex", "--count", "2", NULL}), 0);
    lk_create_durable(f->srv2);
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-worker", "--nats", worker,
        "--inbox-prefix", "_INBOX_worker", "--api-prefix", "JS.FAIRQ.API", "--tokens-per-sec",
        "0", "--count", "5", NULL}), 0);
    /* every completion, mapped like its run, reconciled; none refused */
    lk_client *adm = lk_connect(f->srv2, "admin");
    cJSON *j = NULL;
    for (long long end = nt_now_ms() + 10000; nt_now_ms() < end; nt_sleep_ms(50)) {
        natsMsg *r = NULL;
        cJSON_Delete(j);
        j = NULL;
        if (natsConnection_RequestString(&r, adm->nc, "fair.admin.stats", "", 5000) != NATS_OK)
            continue;
        j = cJSON_Parse(natsMsg_GetData(r));
        natsMsg_Destroy(r);
        const cJSON *o = cJSON_GetObjectItem(j, "overall");
        if (cJSON_GetNumberValue(cJSON_GetObjectItem(o, "completions")) >= 5)
            break;
    }
    const cJSON *o = cJSON_GetObjectItem(j, "overall");
    assert_int_equal((long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "completions")), 5);
    assert_int_equal((long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "invalid_subject")), 0);
    assert_int_equal((long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "completions_invalid")),
                     0);
    cJSON_Delete(j);
    lk_close(adm);
    /* acme is partition 15 of 16 */
    lk_client *a = lk_connect(f->srv2, "acme");
    lk_assert_publish_denied(a, (const char *const[]){"fair.submit.15.acme",
                                                     "fair.submit.3.acme", NULL});
    lk_close(a);
    lk_client *w = lk_connect(f->srv2, "worker");
    lk_assert_publish_denied(w, (const char *const[]){"fair.done.3.acme", NULL});
    lk_close(w);
}

/* Run fairq-admin as user of srv with args (NULL-terminated); its exit
 * code, and the JSON line it printed parsed into *out (NULL if none). */
static int lk_admin_as(const natstest *srv, const char *user, const char *const *args,
                       cJSON **out)
{
    const char *argv[24];
    char bin[512], url[160], path[600], inbox[64];
    size_t n = 0;
    snprintf(inbox, sizeof inbox, "_INBOX_%s", user);
    argv[n++] = nt_build_path(bin, sizeof bin, "fairq-admin");
    argv[n++] = "--nats";
    argv[n++] = lk_url(srv, user, url, sizeof url);
    argv[n++] = "--inbox-prefix";
    argv[n++] = inbox;
    for (size_t i = 0; args[i] && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    snprintf(path, sizeof path, "%s/admin.out", natstest_dir(srv));
    remove(path);
    nt_proc p;
    *out = NULL;
    if (nt_proc_spawn(&p, argv, path) != 0 || nt_proc_wait(&p, 20000) != 0) {
        nt_proc_signal_wait(&p, 9, 2000);
        return -1;
    }
    FILE *f = fopen(path, "r");
    static char line[256 * 1024];
    while (f && !*out && fgets(line, sizeof line, f))
        if (line[0] == '{')
            *out = cJSON_Parse(line);
    if (f)
        fclose(f);
    return nt_proc_exit_code(&p);
}

/* lk_admin_as the operator, user "admin". */
static int lk_admin(const natstest *srv, const char *const *args, cJSON **out)
{
    return lk_admin_as(srv, "admin", args, out);
}

static long lk_num(const cJSON *o, const char *key)
{
    return (long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* overall.key of replica id's stats, as the admin user asks it on the
 * replica's own subject; -1 without an answer. */
static long lk_replica_overall(lk_client *ad, const char *id, const char *key)
{
    char subject[128];
    natsMsg *r = NULL;
    snprintf(subject, sizeof subject, "fair.admin.replica.%s.stats", id);
    if (natsConnection_RequestString(&r, ad->nc, subject, "{\"limit\":0}", 5000) != NATS_OK)
        return -1;
    cJSON *j = cJSON_Parse(natsMsg_GetData(r));
    natsMsg_Destroy(r);
    long v = lk_num(cJSON_GetObjectItemCaseSensitive(j, "overall"), key);
    cJSON_Delete(j);
    return v;
}

/* Two replicas with partitions, under the shipped permissions: a request
 * about a tenant that the queue group gives to the replica not owning
 * its partition is forwarded to the owner (fairq may publish
 * fair.admin.replica.>, and the owner's answer reaches the requester in
 * the ADMIN account, or in the tenant's own through its service import):
 * explain asked by the operator and by the tenant itself, and a tenant's
 * stats, always answer as the owner. fairq-admin stats --all gathers both
 * replicas (each asked on its own subject: through the service import one
 * request gets one answer, so a broadcast would give the first only), a
 * reload reaches both and prints both answers. The operator's drain
 * check of a change of P, fairq-admin drained (both replicas' stats and
 * FAIR_SUBMIT's and FAIR_DONE's info through FAIRQ's API), says not
 * drained while runs are held and drained once a worker completed them;
 * one replica asked on its own subject answers as itself. Producers and
 * workers may do none of it. With one replica gone the gathered stats are
 * partial, naming it. The server reports no violation by fairq. */
static void test_partitions_admin_across_replicas(void **state)
{
    fixture *f = *state;
    char acme[160], globex[160], initech[160];
    static const char extra_fmt[] =
        "partitions: 16\nreplica_id: %s\n"
        /* the stopped replica stays in the registry for the last case */
        "streams: {lease_ttl_ms: 30000}\n";
    char extra[256];
    lk_partitioned_server(f);
    snprintf(extra, sizeof extra, extra_fmt, "rep-a");
    lk_proxy_start(&f->px, f->srv2, "proxy", "_INBOX_fairq", extra);
    assert_int_equal(pt_log_wait(&f->px, "fairq-proxy running", 15000), 0);
    snprintf(extra, sizeof extra, extra_fmt, "rep-b");
    lk_proxy_start(&f->px2, f->srv2, "proxy-b", "_INBOX_fairq", extra);
    assert_int_equal(pt_log_wait(&f->px2, "fairq-proxy running", 15000), 0);
    /* the partitions shared, 8 and 8 */
    lk_client *ad = lk_connect(f->srv2, "admin");
    long long end = nt_now_ms() + 30000;
    while ((lk_replica_overall(ad, "rep-a", "partitions_owned") != 8 ||
            lk_replica_overall(ad, "rep-b", "partitions_owned") != 8) && nt_now_ms() < end)
        nt_sleep_ms(100);
    assert_int_equal(lk_replica_overall(ad, "rep-a", "partitions_owned"), 8);
    assert_int_equal(lk_replica_overall(ad, "rep-b", "partitions_owned"), 8);
    /* runs held (no worker completes them), so that each tenant's owner
     * knows it */
    lk_url(f->srv2, "acme", acme, sizeof acme);
    lk_url(f->srv2, "globex", globex, sizeof globex);
    lk_url(f->srv2, "initech", initech, sizeof initech);
    const char *const urls[] = {acme, globex, initech};
    const char *const tenants[] = {"acme", "globex", "initech"};
    for (int t = 0; t < 3; t++) {
        char inbox[32];
        snprintf(inbox, sizeof inbox, "_INBOX_%s", tenants[t]);
        assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-producer", "--nats",
            urls[t], "--inbox-prefix", inbox, "--tenant", tenants[t], "--count", "2", NULL}), 0);
    }
    end = nt_now_ms() + 10000;      /* each taken by its owner */
    for (long held = 0; held != 6 && nt_now_ms() < end; nt_sleep_ms(50)) {
        held = 0;
        for (int r = 0; r < 2; r++) {
            const char *id = r ? "rep-b" : "rep-a";
            held += lk_replica_overall(ad, id, "in_flight") +
                    lk_replica_overall(ad, id, "queued_runs");
        }
    }
    lk_client *a = lk_connect(f->srv2, "acme");
    /* explain allows 5 requests a second for one tenant: 4 here */
    for (int i = 0; i < 6; i++, nt_sleep_ms(500)) {
        for (int t = 0; t < 3; t++) {
            char subject[64], body[64];
            natsMsg *r = NULL;
            snprintf(subject, sizeof subject, "fair.explain.%s", tenants[t]);
            assert_int_equal(natsConnection_RequestString(&r, ad->nc, subject, "", 5000),
                             NATS_OK);
            cJSON *j = cJSON_Parse(natsMsg_GetData(r));
            natsMsg_Destroy(r);
            assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "known")));
            assert_int_equal(lk_num(j, "queued_runs") + lk_num(j, "in_flight"), 2);
            cJSON_Delete(j);
            snprintf(body, sizeof body, "{\"tenant\":\"%s\"}", tenants[t]);
            assert_int_equal(natsConnection_RequestString(&r, ad->nc, "fair.admin.stats", body,
                                                          5000), NATS_OK);
            j = cJSON_Parse(natsMsg_GetData(r));
            natsMsg_Destroy(r);
            assert_int_equal(lk_num(j, "tenants_returned"), 1);
            cJSON_Delete(j);
        }
        /* acme asks of its own runs, from its own account */
        natsMsg *r = NULL;
        assert_int_equal(natsConnection_RequestString(&r, a->nc, "fair.explain.acme", "", 5000),
                         NATS_OK);
        if (!strstr(natsMsg_GetData(r), "\"known\":true"))
            fail_msg("acme's explain: %s", natsMsg_GetData(r));
        natsMsg_Destroy(r);
    }
    assert_int_equal(a->n, 0);
    assert_int_equal(ad->n, 0);
    lk_close(a);
    /* some of the 42 reached the replica not owning the tenant: forwarded */
    long forwarded = lk_replica_overall(ad, "rep-a", "admin_forwarded") +
                     lk_replica_overall(ad, "rep-b", "admin_forwarded");
    print_message("42 requests about a tenant, %ld forwarded to its owner\n", forwarded);
    assert_true(forwarded > 0);

    /* the deployment's stats, both replicas asked */
    cJSON *j = NULL;
    assert_int_equal(lk_admin(f->srv2, (const char *const[]){"stats", "--all", NULL}, &j), 0);
    assert_non_null(j);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "partial")));
    assert_int_equal(lk_num(j, "replicas_answered"), 2);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "deployment");
    assert_int_equal(lk_num(d, "partitions_owned"), 16);
    assert_int_equal(lk_num(d, "queued_runs") + lk_num(d, "in_flight"), 6);
    assert_int_equal(lk_num(d, "nats_connected"), 2);   /* a flag: how many have it */
    cJSON_Delete(j);

    /* a reload: both replicas reload, both answers printed */
    int before_a = pt_log_count(&f->px, "config reloaded");
    int before_b = pt_log_count(&f->px2, "config reloaded");
    assert_int_equal(lk_admin(f->srv2, (const char *const[]){"reload", NULL}, &j), 0);
    assert_non_null(j);
    const cJSON *ans = cJSON_GetObjectItemCaseSensitive(j, "answers");
    assert_int_equal(cJSON_GetArraySize(ans), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetArrayItem(ans, i);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "ok")));
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(x, "replica")->valuestring,
                            i ? "rep-b" : "rep-a");
    }
    cJSON_Delete(j);
    assert_int_equal(pt_log_count(&f->px, "config reloaded"), before_a + 1);
    assert_int_equal(pt_log_count(&f->px2, "config reloaded"), before_b + 1);

    /* one replica asked itself: its own stats, its reload alone */
    assert_int_equal(lk_admin(f->srv2, (const char *const[]){"--replica", "rep-b", "stats",
                                                             "{\"limit\":0}", NULL}, &j), 0);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "replica")->valuestring, "rep-b");
    cJSON_Delete(j);
    assert_int_equal(lk_admin(f->srv2, (const char *const[]){"--replica", "rep-b", "reload",
                                                             NULL}, &j), 0);
    cJSON_Delete(j);
    assert_int_equal(pt_log_count(&f->px, "config reloaded"), before_a + 1);
    assert_int_equal(pt_log_wait_n(&f->px2, "config reloaded", before_b + 2, 5000), 0);

    /* drained, as the operator: 6 runs held, so not drained, the streams
     * read (without FAIRQ's API prefix they cannot be: not drained
     * either, saying so) */
    static const char *const drained[] = {"--api-prefix", "JS.FAIRQ.API", "drained", NULL};
    assert_int_equal(lk_admin(f->srv2, drained, &j), 1);
    assert_non_null(j);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "drained")));
    assert_int_equal(lk_num(j, "replicas_answered"), 2);
    assert_true(lk_num(j, "submit_msgs") >= 0 && lk_num(j, "done_msgs") >= 0);
    d = cJSON_GetObjectItemCaseSensitive(j, "deployment");
    assert_int_equal(lk_num(d, "queued_runs") + lk_num(d, "in_flight"), 6);
    cJSON_Delete(j);
    assert_int_equal(lk_admin(f->srv2, (const char *const[]){"drained", NULL}, &j), 1);
    assert_non_null(j);
    assert_int_equal(lk_num(j, "submit_msgs"), -1);
    cJSON_Delete(j);
    /* neither a producer nor a worker may ask it, or any admin request */
    const char *const others[] = {"acme", "worker"};
    for (int u = 0; u < 2; u++) {
        j = NULL;
        assert_int_equal(lk_admin_as(f->srv2, others[u], drained, &j), 1);
        assert_null(j);     /* no replica answered it: nothing printed */
        lk_client *c = lk_connect(f->srv2, others[u]);
        lk_assert_publish_denied(c, (const char *const[]){
            "fair.admin.stats", "fair.admin.replica.rep-a.stats", "fair.admin.replica.rep-b.reload",
            "fair.admin.tenant.set", "JS.FAIRQ.API.STREAM.INFO.FAIR_SUBMIT",
            "$JS.API.STREAM.INFO.FAIR_SUBMIT", "$JS.API.STREAM.INFO.FAIR_DONE", NULL});
        lk_close(c);
    }
    /* a worker completes the 6: drained */
    char worker[160];
    lk_url(f->srv2, "worker", worker, sizeof worker);
    lk_create_durable(f->srv2);
    assert_int_equal(lk_run(f->srv2, (const char *const[]){"fairq-worker", "--nats", worker,
        "--inbox-prefix", "_INBOX_worker", "--api-prefix", "JS.FAIRQ.API", "--tokens-per-sec",
        "0", "--count", "6", NULL}), 0);
    int rc = 1;
    for (end = nt_now_ms() + 10000; rc != 0 && nt_now_ms() < end; nt_sleep_ms(200)) {
        cJSON_Delete(j);
        rc = lk_admin(f->srv2, drained, &j);
    }
    assert_int_equal(rc, 0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "drained")));
    assert_int_equal(lk_num(j, "submit_msgs"), 0);
    assert_int_equal(lk_num(j, "done_msgs"), 0);
    cJSON_Delete(j);
    j = NULL;

    /* rep-b gone (kill -9): still in rep-a's view of the registry (its key
     * lives a TTL), so asked, and said missing; the stats partial, exit
     * status 1 */
    assert_int_equal(pt_proxy_kill(&f->px2), 0);
    assert_int_equal(lk_admin(f->srv2, (const char *const[]){"--timeout", "3000", "stats",
                                                             "--all", NULL}, &j), 1);
    assert_non_null(j);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "partial")));
    assert_int_equal(lk_num(j, "replicas_named"), 2);
    assert_int_equal(lk_num(j, "replicas_answered"), 1);
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "missing"), 0);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "replica")->valuestring, "rep-b");
    /* (the others' <admin>.> takes its subject too, and drops it: no
     * "no responders", the deadline says it) */
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m, "why")->valuestring,
                        "no answer within 3000 ms");
    assert_int_equal(lk_num(cJSON_GetObjectItemCaseSensitive(j, "deployment"),
                            "partitions_owned"), 8);
    cJSON_Delete(j);
    lk_close(ad);
    char log[600];
    snprintf(log, sizeof log, "%s/nats.log", natstest_dir(f->srv2));
    assert_int_equal(lk_lines(log, (const char *const[]){"Violation", "User \"fairq\"", NULL}),
                     0);
    assert_int_equal(pt_log_count(&f->px, "permission"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_role_does_its_work, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_producer_is_confined_to_its_tenant, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_producer_reply_reaches_nothing_of_fairq, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_worker_is_confined_to_its_work, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_worker_reply_reaches_nothing_of_fairq, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_worker_cannot_redirect_dispatches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_worker_stream_captures_nothing_of_fairq, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_two_pools_each_do_their_own_work, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_admin_is_confined_to_the_admin_plane, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_an_admin_reply_reaches_nothing_of_fairq, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_provisioner_reshapes_the_streams, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_missing_permission_fails_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_permission_lost_later_is_logged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partitions_served_and_confined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partitions_admin_across_replicas, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
