/* proxytest.c -- integration-test support for fairq-proxy: a config, the proxy child, producers, simulated workers. */
#include "proxytest.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#define PT_DISPATCH_STREAM "FAIR_DISPATCH"

/* ---- the proxy process ------------------------------------------------- */

int pt_proxy_start(pt_proxy *px, const natstest *srv, const char *name, const char *yaml_body)
{
    return pt_proxy_start_url(px, srv, natstest_url(srv), name, yaml_body);
}

int pt_proxy_start_url(pt_proxy *px, const natstest *srv, const char *url, const char *name,
                       const char *yaml_body)
{
    memset(px, 0, sizeof *px);
    snprintf(px->config, sizeof px->config, "%s/%s.yaml", natstest_dir(srv), name);
    snprintf(px->log, sizeof px->log, "%s/%s.log", natstest_dir(srv), name);
    FILE *f = fopen(px->config, "w");
    if (!f) {
        perror(px->config);
        return -1;
    }
    fprintf(f, "nats:\n  url: %s\nhttp:\n  listen: \"\"\n%s", url, yaml_body);
    fclose(f);
    return pt_proxy_restart(px);
}

int pt_proxy_restart(pt_proxy *px)
{
    char bin[512];
    nt_build_path(bin, sizeof bin, "fairq-proxy");
    const char *argv[] = {bin, "-c", px->config, NULL};
    return nt_proc_spawn(&px->proc, argv, px->log);
}

int pt_proxy_stop(pt_proxy *px)
{
    if (nt_proc_signal_wait(&px->proc, SIGTERM, 20000) != 0)
        return -1;
    return nt_proc_exit_code(&px->proc);
}

int pt_proxy_kill(pt_proxy *px)
{
    return nt_proc_signal_wait(&px->proc, SIGKILL, 5000);
}

/* Lines of px's log holding text, each also written to stderr if echo. */
static int pt_log_lines(const pt_proxy *px, const char *text, bool echo)
{
    FILE *f = fopen(px->log, "r");
    if (!f)
        return 0;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, text)) {
            n++;
            if (echo)
                fprintf(stderr, "%s: %s", px->log, line);
        }
    fclose(f);
    return n;
}

int pt_log_count(const pt_proxy *px, const char *text)
{
    return pt_log_lines(px, text, false);
}

int pt_log_print(const pt_proxy *px, const char *text)
{
    return pt_log_lines(px, text, true);
}

int pt_log_wait_n(const pt_proxy *px, const char *text, int n, int timeout_ms)
{
    long long end = nt_now_ms() + timeout_ms;
    while (nt_now_ms() < end) {
        if (pt_log_count(px, text) >= n)
            return 0;
        nt_sleep_ms(20);
    }
    fprintf(stderr, "proxytest: \"%s\" not %d times in %s after %d ms\n", text, n, px->log,
            timeout_ms);
    return -1;
}

int pt_log_wait(const pt_proxy *px, const char *text, int timeout_ms)
{
    return pt_log_wait_n(px, text, 1, timeout_ms);
}

/* ---- clients ----------------------------------------------------------- */

int pt_connect(pt_client *c, const natstest *srv)
{
    memset(c, 0, sizeof *c);
    natsOptions *o = NULL;
    natsStatus s = natsOptions_Create(&o);
    if (s == NATS_OK)
        s = natsOptions_SetURL(o, natstest_url(srv));
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(o, 100);
    if (s == NATS_OK)
        s = natsConnection_Connect(&c->nc, o);
    natsOptions_Destroy(o);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = 4096;
    /* PubAcks and JetStream API replies (5 s by default) can take seconds
     * on a loaded machine: a test that fails is then a real failure. */
    jo.Wait = PT_JS_WAIT_MS;
    if (s == NATS_OK)
        s = natsConnection_JetStream(&c->js, c->nc, &jo);
    if (s != NATS_OK) {
        fprintf(stderr, "proxytest: connect: %s\n", natsStatus_GetText(s));
        return -1;
    }
    return 0;
}

void pt_close(pt_client *c)
{
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
    memset(c, 0, sizeof *c);
}

static natsMsg *pt_submit_msg(const char *tenant, const void *body, size_t len,
                              const char *const *hdrs)
{
    char subj[512];
    if (tenant[0] == '=')
        snprintf(subj, sizeof subj, "%s", tenant + 1);
    else
        snprintf(subj, sizeof subj, "fair.submit.%s", tenant);
    natsMsg *m = NULL;
    if (natsMsg_Create(&m, subj, NULL, body, (int)len) != NATS_OK)
        return NULL;
    for (size_t i = 0; hdrs && hdrs[i]; i += 2)
        natsMsgHeader_Add(m, hdrs[i], hdrs[i + 1]);
    return m;
}

int pt_submit(pt_client *c, const char *tenant, const void *body, size_t len,
              const char *const *hdrs)
{
    natsMsg *m = pt_submit_msg(tenant, body, len, hdrs);
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsStatus s = m ? js_PublishMsg(&pa, c->js, m, NULL, &jerr) : NATS_NO_MEMORY;
    jsPubAck_Destroy(pa);
    natsMsg_Destroy(m);
    if (s != NATS_OK) {
        fprintf(stderr, "proxytest: submit %s: %s (%d)\n", tenant, natsStatus_GetText(s), jerr);
        return -1;
    }
    return 0;
}

int pt_submit_async(pt_client *c, const char *tenant, const void *body, size_t len,
                    const char *const *hdrs)
{
    natsMsg *m = pt_submit_msg(tenant, body, len, hdrs);
    natsStatus s = m ? js_PublishMsgAsync(c->js, &m, NULL) : NATS_NO_MEMORY;
    natsMsg_Destroy(m);
    if (s != NATS_OK) {
        fprintf(stderr, "proxytest: async submit %s: %s\n", tenant, natsStatus_GetText(s));
        return -1;
    }
    return 0;
}

int pt_submit_flush(pt_client *c)
{
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 30000;
    natsStatus s = js_PublishAsyncComplete(c->js, &po);
    if (s != NATS_OK) {
        fprintf(stderr, "proxytest: flush: %s\n", natsStatus_GetText(s));
        return -1;
    }
    return 0;
}

char *pt_stats(pt_client *c)
{
    return pt_stats_req(c, "", NULL);
}

char *pt_stats_req(pt_client *c, const char *req, size_t *lenp)
{
    return pt_request(c, "fair.admin.stats", req, lenp);
}

char *pt_request(pt_client *c, const char *subject, const char *body, size_t *lenp)
{
    static const char busy[] = "{\"ok\":false,\"busy\":true";
    long long end = nt_now_ms() + 5000, answer_end = nt_now_ms() + PT_JS_WAIT_MS;
    for (;;) {
        natsMsg *r = NULL;
        natsStatus st = natsConnection_RequestString(&r, c->nc, subject, body, 5000);
        if ((st == NATS_TIMEOUT || st == NATS_NO_RESPONDERS) && nt_now_ms() < answer_end) {
            /* A loaded machine, or a proxy whose admin subscription the
             * server has not got yet: ask again, for up to PT_JS_WAIT_MS. */
            fprintf(stderr, "proxytest: request on %s: %s, asking again\n", subject,
                    natsStatus_GetText(st));
            nt_sleep_ms(100);
            continue;
        }
        if (st != NATS_OK) {
            fprintf(stderr, "proxytest: request on %s: %s\n", subject, natsStatus_GetText(st));
            return NULL;
        }
        size_t len = (size_t)natsMsg_GetDataLength(r);
        char *s = malloc(len + 1);
        if (s) {
            memcpy(s, natsMsg_GetData(r), len);
            s[len] = '\0';
        }
        natsMsg_Destroy(r);
        if (s && strncmp(s, busy, sizeof busy - 1) == 0 && nt_now_ms() < end) {
            /* Asked faster than the proxy allows: wait as it says. */
            const char *w = strstr(s, "\"retry_ms\":");
            int ms = w ? atoi(w + 11) : 100;
            free(s);
            nt_sleep_ms(ms > 0 && ms < 1000 ? ms : 100);
            continue;
        }
        if (lenp)
            *lenp = len;
        return s;
    }
}

/* ---- reading streams back ---------------------------------------------- */

uint64_t pt_stream_last(pt_client *c, const char *stream)
{
    jsStreamInfo *si = NULL;
    if (js_GetStreamInfo(&si, c->js, stream, NULL, NULL) != NATS_OK)
        return 0;
    uint64_t last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    return last;
}

static void pt_hdr(natsMsg *m, const char *key, char *out, size_t cap)
{
    const char *v = NULL;
    out[0] = '\0';
    if (natsMsgHeader_Get(m, key, &v) == NATS_OK && v)
        snprintf(out, cap, "%s", v);
}

static void pt_fill(pt_msg *o, natsMsg *m, uint64_t seq)
{
    memset(o, 0, sizeof *o);
    o->seq = seq;
    snprintf(o->subject, sizeof o->subject, "%s", natsMsg_GetSubject(m));
    pt_hdr(m, "Fair-Tenant", o->tenant, sizeof o->tenant);
    pt_hdr(m, "Fair-Run-Id", o->run_id, sizeof o->run_id);
    pt_hdr(m, "Fair-Error", o->error, sizeof o->error);
    pt_hdr(m, "Fair-Subject", o->fsubject, sizeof o->fsubject);
    pt_hdr(m, "Fair-Wait-Ms", o->wait_ms, sizeof o->wait_ms);
    pt_hdr(m, "Fair-Subtenant", o->subtenant, sizeof o->subtenant);
    char num[32];
    pt_hdr(m, "Fair-Est-Tokens", num, sizeof num);
    o->est = (uint32_t)strtoul(num, NULL, 10);
    pt_hdr(m, "Fair-Submitted-At", num, sizeof num);
    o->submitted_at = strtoll(num, NULL, 10);
    pt_hdr(m, "Fair-Dispatched-At", num, sizeof num);
    o->dispatched_at = strtoll(num, NULL, 10);
    o->len = (size_t)natsMsg_GetDataLength(m);
    o->data = malloc(o->len + 1);
    if (o->data) {
        memcpy(o->data, natsMsg_GetData(m) ? natsMsg_GetData(m) : "", o->len);
        o->data[o->len] = '\0';
    }
}

int pt_stream_read(pt_client *c, const char *stream, pt_msg **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    jsStreamInfo *si = NULL;
    if (js_GetStreamInfo(&si, c->js, stream, NULL, NULL) != NATS_OK) {
        fprintf(stderr, "proxytest: no stream %s\n", stream);
        return -1;
    }
    uint64_t first = si->State.FirstSeq, last = si->State.LastSeq, msgs = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    pt_msg *v = calloc(msgs + 1, sizeof *v);
    if (!v)
        return -1;
    size_t k = 0;
    for (uint64_t seq = first; msgs && seq <= last && k < msgs; seq++) {
        natsMsg *m = NULL;
        if (js_GetMsg(&m, c->js, stream, seq, NULL, NULL) != NATS_OK)
            continue;   /* deleted */
        pt_fill(&v[k++], m, seq);
        natsMsg_Destroy(m);
    }
    *out = v;
    *n = k;
    return 0;
}

void pt_msgs_free(pt_msg *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++)
        free(m[i].data);
    free(m);
}

uint32_t pt_sum(const void *data, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ ((const uint8_t *)data)[i]) * 16777619u;
    return h;
}

/* ---- the simulated workers --------------------------------------------- */

/* A run held by the worker until its completion is due. */
typedef struct pt_job {
    char tenant[72];
    char run_id[136];
    uint32_t est;
    long long at;               /* when received (monotonic ms): due at the pool's speed after */
} pt_job;

struct pt_worker {
    pt_worker_opts o;           /* its service_ms and per_token_us guarded by mu */
    pt_client c;
    fqc_pull pull;              /* the workers' consumer, read as fairq-worker reads it */
    bool open;                  /* pull is open (the proxy has made the stream) */
    natsMsg **batch;            /* one pull's deliveries: concurrency slots */
    size_t refused;             /* deliveries beyond the job table's room, nak'd (none expected) */
    pthread_t thread;
    pthread_mutex_t mu;         /* guards seen, counts, hold */
    pthread_mutex_t completing; /* held while completions are sent: a hold waits for it */
    pt_seen *seen;
    size_t nseen, cap;
    size_t completed;
    bool hold, stop;
    pt_job *jobs;               /* worker thread only */
    int njobs;
    char **done_ids;            /* run keys completed, for idempotence */
    size_t ndone, done_cap;
};

static bool pt_done_has(pt_worker *w, const char *key)
{
    for (size_t i = 0; i < w->ndone; i++)
        if (strcmp(w->done_ids[i], key) == 0)
            return true;
    return false;
}

static void pt_done_add(pt_worker *w, const char *key)
{
    if (w->ndone == w->done_cap) {
        w->done_cap = w->done_cap ? w->done_cap * 2 : 1024;
        w->done_ids = realloc(w->done_ids, w->done_cap * sizeof *w->done_ids);
    }
    w->done_ids[w->ndone++] = strdup(key);
}

/* JSON string escaping for run ids (printable ASCII, may hold " and \). */
static void pt_json_str(char *out, size_t cap, const char *s)
{
    size_t k = 0;
    for (; *s && k + 3 < cap; s++) {
        if (*s == '"' || *s == '\\')
            out[k++] = '\\';
        out[k++] = *s;
    }
    out[k] = '\0';
}

static void pt_complete(pt_worker *w, const pt_job *j)
{
    uint64_t actual = w->o.actual ? w->o.actual(w->o.arg, j->tenant, j->est) : j->est;
    char id[300], body[600], subj[128];
    pt_json_str(id, sizeof id, j->run_id);
    snprintf(body, sizeof body,
             "{\"run_id\":\"%s\",\"actual_tokens\":%" PRIu64 ",\"status\":\"ok\",\"est_tokens\":%u}",
             id, actual, j->est);
    snprintf(subj, sizeof subj, "fair.done.%s", j->tenant);
    /* Retry through a server restart: a completion must not be lost. */
    for (int attempt = 0; attempt < 200; attempt++) {
        jsPubAck *pa = NULL;
        natsStatus s = js_Publish(&pa, w->c.js, subj, body, (int)strlen(body), NULL, NULL);
        jsPubAck_Destroy(pa);
        if (s == NATS_OK)
            break;
        nt_sleep_ms(100);
    }
    char key[220];
    snprintf(key, sizeof key, "%s/%s", j->tenant, j->run_id);
    pthread_mutex_lock(&w->mu);
    pt_done_add(w, key);
    w->completed++;
    for (size_t i = w->nseen; i-- > 0;) {
        if (strcmp(w->seen[i].run_id, j->run_id) == 0 && strcmp(w->seen[i].tenant, j->tenant) == 0) {
            w->seen[i].actual = actual;
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
}

static void pt_receive(pt_worker *w, natsMsg *m)
{
    pt_seen s = {0};
    jsMsgMetaData *md = NULL;
    if (natsMsg_GetMetaData(&md, m) == NATS_OK) {
        s.dseq = md->Sequence.Stream;
        jsMsgMetaData_Destroy(md);
    }
    pt_hdr(m, "Fair-Tenant", s.tenant, sizeof s.tenant);
    pt_hdr(m, "Fair-Run-Id", s.run_id, sizeof s.run_id);
    char num[32];
    pt_hdr(m, "Fair-Est-Tokens", num, sizeof num);
    s.est = (uint32_t)strtoul(num, NULL, 10);
    s.at_ms = nt_now_ms();
    s.len = (uint32_t)natsMsg_GetDataLength(m);
    s.body_sum = pt_sum(natsMsg_GetData(m) ? natsMsg_GetData(m) : "", s.len);
    char key[220];
    snprintf(key, sizeof key, "%s/%s", s.tenant, s.run_id);
    pthread_mutex_lock(&w->mu);
    bool again = pt_done_has(w, key);
    for (int i = 0; !again && i < w->njobs; i++)
        again = strcmp(w->jobs[i].run_id, s.run_id) == 0 && strcmp(w->jobs[i].tenant, s.tenant) == 0;
    if (!again && w->njobs >= w->o.concurrency) {
        /* More than room: handed back for redelivery, never written past
         * the job table (the pull asks for room only, so not expected). */
        w->refused++;
        pthread_mutex_unlock(&w->mu);
        fqc_ack(&w->pull, m, "-NAK");
        return;
    }
    if (w->nseen == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 1024;
        w->seen = realloc(w->seen, w->cap * sizeof *w->seen);
    }
    w->seen[w->nseen++] = s;
    pthread_mutex_unlock(&w->mu);
    fqc_ack(&w->pull, m, "+ACK");
    if (again)
        return;
    pt_job *j = &w->jobs[w->njobs++];
    snprintf(j->tenant, sizeof j->tenant, "%s", s.tenant);
    snprintf(j->run_id, sizeof j->run_id, "%s", s.run_id);
    j->est = s.est;
    j->at = s.at_ms;
}

/* When job j is due at the pool's speed now (pt_worker_speed may change it). */
static long long pt_due(pt_worker *w, const pt_job *j)
{
    pthread_mutex_lock(&w->mu);
    long long d = j->at + w->o.service_ms + (long long)w->o.per_token_us * j->est / 1000;
    pthread_mutex_unlock(&w->mu);
    return d;
}

static void pt_complete_due(pt_worker *w)
{
    pthread_mutex_lock(&w->completing);
    pthread_mutex_lock(&w->mu);
    bool hold = w->hold;
    pthread_mutex_unlock(&w->mu);
    long long now = nt_now_ms();
    for (int i = 0; !hold && i < w->njobs;) {
        if (pt_due(w, &w->jobs[i]) <= now) {
            pt_complete(w, &w->jobs[i]);
            w->jobs[i] = w->jobs[--w->njobs];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&w->completing);
}

/* Make the workers' durable consumer if it is not there yet (the pool's
 * workers share it) and open a reader of it. */
static int pt_worker_subscribe(pt_worker *w)
{
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    jsConsumerConfig_Init(&cc);
    cc.Durable = "workers";
    cc.FilterSubject = "fair.dispatch";
    cc.AckPolicy = js_AckExplicit;
    cc.MaxAckPending = 100000;
    cc.AckWait = 60LL * 1000000000;
    natsStatus s = js_GetConsumerInfo(&ci, w->c.js, PT_DISPATCH_STREAM, "workers", NULL, &jerr);
    if (s != NATS_OK && jerr == JSConsumerNotFoundErr)
        s = js_AddConsumer(&ci, w->c.js, PT_DISPATCH_STREAM, &cc, NULL, &jerr);
    jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK || fqc_pull_open(&w->pull, w->c.nc, NULL, PT_DISPATCH_STREAM, "workers") != NATS_OK)
        return -1;
    w->open = true;
    return 0;
}

static void *pt_worker_main(void *arg)
{
    pt_worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        bool stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop)
            break;
        if (!w->open && pt_worker_subscribe(w) != 0) {
            nt_sleep_ms(50);    /* the proxy has not made the stream yet */
            continue;
        }
        pt_complete_due(w);
        int room = w->o.concurrency - w->njobs;
        if (room <= 0) {
            nt_sleep_ms(1);
            continue;
        }
        /* What the consumer has now, or else the first to come: wait no
         * longer than the next completion is due. */
        long long wait = 50, now = nt_now_ms();
        for (int i = 0; i < w->njobs; i++)
            if (pt_due(w, &w->jobs[i]) - now < wait)
                wait = pt_due(w, &w->jobs[i]) - now;
        int n = 0;
        if (!fqc_pull_next(&w->pull, "proxytest", w->batch, room, wait > 1 ? wait : 1, 50, &n))
            continue;
        if (n < 0 || n > room) {
            /* The reader's contract: never more than asked for. */
            fprintf(stderr, "proxytest: a pull for %d runs took %d\n", room, n);
            abort();
        }
        for (int i = 0; i < n; i++) {
            pt_receive(w, w->batch[i]);
            natsMsg_Destroy(w->batch[i]);
        }
    }
    return NULL;
}

int pt_worker_start(pt_worker **out, const natstest *srv, const pt_worker_opts *o)
{
    *out = NULL;
    pt_worker *w = calloc(1, sizeof *w);
    if (!w)
        return -1;
    w->o = *o;
    if (w->o.concurrency < 1)
        w->o.concurrency = 1;
    w->jobs = calloc((size_t)w->o.concurrency, sizeof *w->jobs);
    w->batch = calloc((size_t)w->o.concurrency, sizeof *w->batch);
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->completing, NULL);
    if (!w->jobs || !w->batch || pt_connect(&w->c, srv) != 0 ||
        pthread_create(&w->thread, NULL, pt_worker_main, w) != 0) {
        free(w->jobs);
        free(w->batch);
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void pt_worker_stop(pt_worker *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    fqc_pull_close(&w->pull);
    pt_close(&w->c);
    if (w->refused)
        fprintf(stderr, "proxytest: %zu deliveries beyond the job table's room were nak'd\n",
                w->refused);
    for (size_t i = 0; i < w->ndone; i++)
        free(w->done_ids[i]);
    free(w->done_ids);
    free(w->seen);
    free(w->jobs);
    free(w->batch);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->completing);
    free(w);
}

size_t pt_worker_received(pt_worker *w)
{
    pthread_mutex_lock(&w->mu);
    size_t n = w->nseen;
    pthread_mutex_unlock(&w->mu);
    return n;
}

size_t pt_worker_completed(pt_worker *w)
{
    pthread_mutex_lock(&w->mu);
    size_t n = w->completed;
    pthread_mutex_unlock(&w->mu);
    return n;
}

pt_seen pt_worker_seen(pt_worker *w, size_t i)
{
    pthread_mutex_lock(&w->mu);
    pt_seen s = i < w->nseen ? w->seen[i] : (pt_seen){0};
    pthread_mutex_unlock(&w->mu);
    return s;
}

void pt_worker_speed(pt_worker *w, int service_ms, int per_token_us)
{
    pthread_mutex_lock(&w->mu);
    w->o.service_ms = service_ms;
    w->o.per_token_us = per_token_us;
    pthread_mutex_unlock(&w->mu);
}

void pt_worker_hold(pt_worker *w, bool hold)
{
    pthread_mutex_lock(&w->completing);     /* after the completions being sent */
    pthread_mutex_lock(&w->mu);
    w->hold = hold;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_unlock(&w->completing);
}

int pt_worker_wait_completed(pt_worker *w, size_t n, int timeout_ms)
{
    long long end = nt_now_ms() + timeout_ms;
    while (nt_now_ms() < end) {
        if (pt_worker_completed(w) >= n)
            return 0;
        nt_sleep_ms(20);
    }
    fprintf(stderr, "proxytest: %zu of %zu runs completed after %d ms\n", pt_worker_completed(w),
            n, timeout_ms);
    return -1;
}
