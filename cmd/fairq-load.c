/* fairq-load.c -- the load generator: producers driven by an arrival model, a simulated worker pool, and what came out as key=value lines. */
/*
 * Principles:
 *
 * - One process is both ends of the pipe, so a run's submit time is this
 *   process's own clock (kept in the run table), and its dispatch time is
 *   the timestamp the server gave the dispatch message when it stored it:
 *   submit to dispatch in microseconds, on one host's wall clock, whatever
 *   sits in between (fairq-proxy or fairq-relay). The Fair-Submitted-At and
 *   Fair-Dispatched-At headers (milliseconds) are reported beside it as a
 *   cross-check.
 *
 * - Every run has an entry in the run table, found from its run id, and
 *   its dispatches and completions are counted: "each run completed exactly
 *   once" is checked, not assumed.
 *
 * - The producer and the workers have a connection and a JetStream context
 *   each, so that waiting for the completions' PubAcks never waits behind
 *   submits.
 *
 * - The workers are a fixed pool; each run takes actual_tokens divided by
 *   a worker's token rate (no time at all when the rate is 0). A fetch asks
 *   for no more runs than there are idle workers, as real workers would.
 *   A completion is published, its PubAck awaited, and only then is the
 *   dispatch message acked.
 *
 * - What to submit and when comes from a fql_source (arrivals.h): the
 *   steady mix of the flags, or the runs of a scenario file (--scenario),
 *   time-compressed, with the scenario's worker capacity mirrored by the
 *   pool. Then the waits a worker sees are those of fairq-sim's scenario
 *   divided by the compression, on real NATS through whatever dispatches.
 *
 * - A dispatcher's own view can be put beside the load's: --proxy-stats
 *   prints fairq-proxy's fair.admin.stats as key=value lines after the
 *   drain (and --stats-at once during the load), every field it has, so
 *   the proxy's counts of runs and tokens per tenant can be checked
 *   against what the load submitted and its workers spent.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <unistd.h>

#include "arrivals.h"
#include "client.h"

static const char *prog = "fairq-load";

#define LOAD_TENANTS_MAX 1024                   /* ids in a --tenants list */
#define LOAD_TENANTS_NUM_MAX 1000000            /* --tenants N: enough to make a proxy
                                                   know hundreds of thousands */
#define LOAD_CHUNK_BITS 16                      /* runs per table chunk: 65,536 */
#define LOAD_CHUNKS 4096                        /* table capacity: 268 million runs */
#define LOAD_FETCH_MAX 256

/* What the flags set. */
typedef struct load_cfg {
    const char *url;
    const char *submit_prefix, *dispatch, *dispatch_stream, *done_prefix, *rejected_prefix;
    const char *durable;        /* a shared durable consumer; NULL: a private one */
    const char *admin_prefix;   /* the proxy's admin subjects (stats) */
    fql_steady_cfg steady;      /* rate, count, mix, seed */
    const char *scenario;       /* a scenario file to replay; NULL: the steady mix */
    double compress;            /* scenario seconds per real second */
    bool seed_set;              /* --seed given: regenerate the scenario's runs */
    bool proxy_stats;           /* print the proxy's stats after the drain */
    double stats_at_s;          /* and once this long after the start; < 0: not */
    double duration_s;          /* submitting stops after this; 0: no limit */
    uint32_t body_bytes;        /* submit body size (at least the JSON fields) */
    uint32_t workers;           /* simulated workers; 0: submit only */
    double tokens_per_sec;      /* a worker's speed; 0: runs take no time */
    uint64_t max_outstanding;   /* submitted, not yet completed; 0: no limit */
    double drain_s;             /* wait this long for the last runs */
    double warmup_s;            /* the steady rate is measured after this */
    bool send_asap;             /* write each message at once (latency runs) */
    bool verbose;               /* a progress line a second on stderr */
    bool workers_set;           /* --workers given: not the scenario's */
    bool tokens_per_sec_set;    /* --tokens-per-sec given: not the scenario's */
    bool duration_set;          /* --duration given: not the scenario's end */
    bool compress_set;          /* --compress given: --scenario's only */
} load_cfg;

/* One submitted run. Written by the producer before it is published (see
 * load_table.published), then only by the worker loop, except rejected,
 * which a NATS callback sets. */
typedef struct load_run {
    int64_t sent_us;            /* wall clock just before the submit publish */
    uint64_t actual_tokens;     /* what the simulated worker spends */
    uint32_t tenant;            /* index into the source's tenants */
    uint8_t dispatched;         /* times a worker received it */
    uint8_t completed;          /* completions stored (PubAck'ed) */
    atomic_uchar rejected;      /* seen on the rejected subject */
    atomic_uchar submit_failed; /* its submit publish failed */
} load_run;

/* Runs by index, in chunks that never move, so readers need no lock. */
typedef struct load_table {
    load_run *chunk[LOAD_CHUNKS];
    atomic_uint_fast64_t published; /* entries [0, published) are complete */
} load_table;

/* Per tenant, kept by the worker loop. */
typedef struct load_tenant {
    fqc_samples dispatch_us;    /* submit -> stored in the dispatch stream */
    fqc_samples receive_us;     /* submit -> received by a worker */
    fqc_samples header_ms;      /* Fair-Dispatched-At - Fair-Submitted-At */
    uint64_t runs;              /* dispatches received */
    uint64_t last_idx;          /* run index dispatched last, +1 (0: none yet) */
    uint64_t out_of_order;      /* dispatched before a run submitted earlier */
    uint64_t first_idx;         /* its earliest-submitted run seen, +1 (0: none) */
    int64_t first_us;           /* that run's submit -> dispatch */
    int64_t first_receive_us;   /* that run's submit -> received by a worker */
} load_tenant;

/* A run a simulated worker is busy with. */
typedef struct load_job {
    int64_t finish_ns;          /* monotonic time it is done */
    natsMsg *msg;               /* the dispatch message, acked when done */
    int64_t idx;                /* run index, -1 if not ours */
    uint64_t actual_tokens;
} load_job;

typedef struct load {
    load_cfg cfg;
    fql_source *src;
    const fq_scenario *scenario; /* the scenario src replays; NULL: steady */
    char tag[9];                /* this load's run id prefix */
    load_table table;
    natsConnection *pnc, *wnc;  /* producer's and workers' connections */
    jsCtx *pjs, *wjs;
    fqc_pull pull;              /* the workers' reader of the dispatch consumer */
    natsSubscription *rejected_sub;
    bool own_consumer;          /* delete the consumer at exit */
    char consumer[64];          /* the workers' durable consumer */
    char rejected_subject[256]; /* PREFIX.> */

    pthread_mutex_t mu;         /* guards the wait for outstanding room */
    pthread_cond_t room;
    atomic_uint_fast64_t submitted, completed, rejected, submit_errors;
    atomic_bool producing;      /* the producer is still submitting */
    int64_t t0_ns;              /* start (monotonic) */
    int64_t produce_end_ns;     /* when the producer stopped (monotonic) */

    /* Worker loop state and counters. */
    load_job *heap;             /* busy workers, earliest finish first */
    uint32_t busy;
    load_tenant *tenants;
    uint64_t dispatched, foreign, complete_errors, last_done_ns;
    uint64_t warm_count, end_count;
    int64_t warm_ns, end_ns;
    bool stats_taken;           /* the --stats-at snapshot is printed */
} load;

/* The run table. */

static load_run *load_run_at(load *l, uint64_t idx)
{
    return &l->table.chunk[idx >> LOAD_CHUNK_BITS][idx & ((1u << LOAD_CHUNK_BITS) - 1)];
}

/* The entry for the next run, allocating its chunk if needed. NULL when out
 * of memory or capacity. */
static load_run *load_run_new(load *l, uint64_t idx)
{
    uint64_t c = idx >> LOAD_CHUNK_BITS;
    if (c >= LOAD_CHUNKS)
        return NULL;
    if (!l->table.chunk[c] && !(l->table.chunk[c] = calloc(1u << LOAD_CHUNK_BITS, sizeof(load_run))))
        return NULL;
    return load_run_at(l, idx);
}

/* The index of one of our run ids, or -1 for a run that is not ours or
 * not yet published. */
static int64_t load_run_index(load *l, const char *run_id)
{
    uint64_t idx;
    if (!run_id || strncmp(run_id, l->tag, 8) != 0 || run_id[8] != '-' ||
        !fqc_parse_u64(run_id + 9, 0, UINT64_MAX, &idx))
        return -1;
    if (idx >= atomic_load_explicit(&l->table.published, memory_order_acquire))
        return -1;
    return (int64_t)idx;
}

static void load_wake_producer(load *l)
{
    pthread_mutex_lock(&l->mu);
    pthread_cond_signal(&l->room);
    pthread_mutex_unlock(&l->mu);
}

/* The producer. */

static void load_on_submit_error(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    load *l = closure;
    int64_t idx = load_run_index(l, fqc_hdr(pae->Msg, FQ_HDR_RUN_ID));
    (void)js;
    if (atomic_fetch_add(&l->submit_errors, 1) == 0)
        fqc_pub_perror(prog, "a submit", pae);
    if (idx >= 0)
        atomic_store(&load_run_at(l, (uint64_t)idx)->submit_failed, 1);
    load_wake_producer(l);
}

/* Write the submit body: a JSON object with the run id, padded with a
 * filler field to the configured size. Returns its length. */
static int load_body(char *buf, size_t cap, const char *run_id)
{
    int n = snprintf(buf, cap, "{\"run_id\":\"%s\",\"pad\":\"", run_id);
    size_t want = cap - 1 > (size_t)n + 2 ? cap - 1 : (size_t)n + 2;
    memset(buf + n, 'x', want - 2 - (size_t)n);
    memcpy(buf + want - 2, "\"}", 2);
    buf[want] = '\0';
    return (int)want;
}

/* Block while max_outstanding runs are out; false if told to stop. */
static bool load_wait_room(load *l)
{
    uint64_t cap = l->cfg.max_outstanding;
    if (cap == 0 || l->cfg.workers == 0)
        return !fqc_stopping();
    pthread_mutex_lock(&l->mu);
    while (!fqc_stopping() &&
           atomic_load(&l->submitted) - atomic_load(&l->completed) - atomic_load(&l->rejected) -
                   atomic_load(&l->submit_errors) >= cap) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * FQC_NS_PER_MS;
        if (ts.tv_nsec >= FQC_NS_PER_S) {
            ts.tv_sec++;
            ts.tv_nsec -= FQC_NS_PER_S;
        }
        pthread_cond_timedwait(&l->room, &l->mu, &ts);
    }
    pthread_mutex_unlock(&l->mu);
    return !fqc_stopping();
}

/* Publish one arrival as run idx. */
static natsStatus load_submit(load *l, uint64_t idx, const fql_arrival *a, char *body, size_t cap)
{
    const char *tenant = l->src->tenants[a->tenant];
    char subject[256], run_id[32];
    load_run *r = load_run_new(l, idx);
    natsMsg *m = NULL;
    natsStatus s;
    int len;

    if (!r)
        return NATS_NO_MEMORY;
    snprintf(run_id, sizeof run_id, "%s-%llu", l->tag, (unsigned long long)idx);
    snprintf(subject, sizeof subject, "%s.%s", l->cfg.submit_prefix, tenant);
    len = load_body(body, cap, run_id);
    r->tenant = a->tenant;
    r->actual_tokens = a->actual_tokens;
    s = natsMsg_Create(&m, subject, NULL, body, len);
    if (s == NATS_OK) s = natsMsgHeader_Set(m, FQ_HDR_RUN_ID, run_id);
    if (s == NATS_OK && a->est_tokens) s = fqc_hdr_set_u64(m, FQ_HDR_EST_TOKENS, a->est_tokens);
    if (s == NATS_OK && a->workflow[0]) s = natsMsgHeader_Set(m, FQ_HDR_WORKFLOW, a->workflow);
    if (s == NATS_OK) s = natsMsgHeader_Set(m, FQC_HDR_MSG_ID, run_id);
    r->sent_us = fqc_wall_us();
    atomic_store_explicit(&l->table.published, idx + 1, memory_order_release);
    /* A full async window returns a timeout after the stall wait: retry. */
    while (s == NATS_OK || s == NATS_TIMEOUT) {
        s = js_PublishMsgAsync(l->pjs, &m, NULL);
        if (s != NATS_TIMEOUT || fqc_stopping())
            break;
    }
    natsMsg_Destroy(m);
    return s;
}

static void *load_produce(void *arg)
{
    load *l = arg;
    int64_t end_ns = l->cfg.duration_s > 0 ? l->t0_ns + (int64_t)(l->cfg.duration_s * 1e9) : INT64_MAX;
    size_t cap = (size_t)l->cfg.body_bytes + 1 > 64 ? (size_t)l->cfg.body_bytes + 1 : 64;
    char *body = malloc(cap);
    fql_arrival a;
    jsPubOptions po;

    while (body && load_wait_room(l) && l->src->next(l->src, &a)) {
        int64_t at = l->t0_ns + a.at_us * 1000;
        if (at >= end_ns)
            break;
        if (at > fqc_mono_ns())
            fqc_sleep_until(at);
        if (fqc_stopping() || fqc_mono_ns() >= end_ns)
            break;
        uint64_t idx = atomic_load(&l->submitted);
        natsStatus s = load_submit(l, idx, &a, body, cap);
        if (s != NATS_OK) {
            if (!fqc_stopping())
                fqc_perror(prog, "submit", s);
            break;
        }
        atomic_store(&l->submitted, idx + 1);
    }
    jsPubOptions_Init(&po);
    po.MaxWait = 30000;
    natsStatus s = js_PublishAsyncComplete(l->pjs, &po);
    if (s != NATS_OK)
        fqc_perror(prog, "waiting for the submits' PubAcks", s);
    free(body);
    l->produce_end_ns = fqc_mono_ns();
    atomic_store(&l->producing, false);
    return NULL;
}

/* Refused runs, seen on the rejected subject, count as outstanding no more. */
static void load_on_rejected(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *closure)
{
    load *l = closure;
    int64_t idx = load_run_index(l, fqc_hdr(m, FQ_HDR_RUN_ID));
    (void)nc;
    (void)sub;
    if (idx >= 0 && atomic_exchange(&load_run_at(l, (uint64_t)idx)->rejected, 1) == 0) {
        atomic_fetch_add(&l->rejected, 1);
        load_wake_producer(l);
    }
    natsMsg_Destroy(m);
}

/* The simulated workers. */

static void load_heap_push(load *l, load_job j)
{
    uint32_t i = l->busy++;
    while (i > 0 && l->heap[(i - 1) / 2].finish_ns > j.finish_ns) {
        l->heap[i] = l->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    l->heap[i] = j;
}

static load_job load_heap_pop(load *l)
{
    load_job top = l->heap[0], last = l->heap[--l->busy];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= l->busy)
            break;
        if (c + 1 < l->busy && l->heap[c + 1].finish_ns < l->heap[c].finish_ns)
            c++;
        if (last.finish_ns <= l->heap[c].finish_ns)
            break;
        l->heap[i] = l->heap[c];
        i = c;
    }
    if (l->busy)
        l->heap[i] = last;
    return top;
}

/* Record a dispatch and make it a job. */
static load_job load_receive(load *l, natsMsg *m, int64_t now_ns)
{
    const char *run_id = fqc_hdr(m, FQ_HDR_RUN_ID);
    int64_t idx = load_run_index(l, run_id), now_us = fqc_wall_us();
    load_job j = {.msg = m, .idx = idx};
    uint64_t est = 0, sub_ms, disp_ms, seq;
    int64_t stored_ns;

    l->dispatched++;
    fqc_hdr_u64(m, FQ_HDR_EST_TOKENS, UINT32_MAX, &est);
    if (idx < 0) {
        l->foreign++;
        j.actual_tokens = (uint64_t)llround((double)est * l->cfg.steady.actual_factor);
    } else {
        load_run *r = load_run_at(l, (uint64_t)idx);
        load_tenant *t = &l->tenants[r->tenant];
        if (r->dispatched < UINT8_MAX)
            r->dispatched++;
        if ((uint64_t)idx + 1 < t->last_idx)
            t->out_of_order++;
        else
            t->last_idx = (uint64_t)idx + 1;
        t->runs++;
        int64_t wait = now_us - r->sent_us;
        if (fqc_msg_meta(m, &seq, &stored_ns) == NATS_OK) {
            wait = stored_ns / 1000 - r->sent_us;
            fqc_samples_add(&t->dispatch_us, wait);
        }
        if (!t->first_idx || (uint64_t)idx + 1 < t->first_idx) {
            t->first_idx = (uint64_t)idx + 1;
            t->first_us = wait;
            t->first_receive_us = now_us - r->sent_us;
        }
        fqc_samples_add(&t->receive_us, now_us - r->sent_us);
        if (fqc_hdr_u64(m, FQ_HDR_SUBMITTED_AT, UINT64_MAX, &sub_ms) &&
            fqc_hdr_u64(m, FQ_HDR_DISPATCHED_AT, UINT64_MAX, &disp_ms))
            fqc_samples_add(&t->header_ms, (int64_t)(disp_ms - sub_ms));
        j.actual_tokens = r->actual_tokens;
    }
    j.finish_ns = now_ns;
    if (l->cfg.tokens_per_sec > 0)
        j.finish_ns += (int64_t)((double)j.actual_tokens / l->cfg.tokens_per_sec * 1e9);
    return j;
}

/* Publish the completion of a finished job (not waiting for its PubAck). */
static natsStatus load_complete(load *l, const load_job *j)
{
    natsMsg *m = j->msg;
    const char *tenant = fqc_hdr(m, FQ_HDR_TENANT), *run_id = fqc_hdr(m, FQ_HDR_RUN_ID);
    const char *workflow = fqc_hdr(m, FQ_HDR_WORKFLOW);
    fq_completion c = {.actual_tokens = j->actual_tokens, .status = FQ_DONE_OK};
    char subject[256], body[512];
    uint64_t est = 0;
    size_t len;

    if (!tenant || !run_id) {
        fprintf(stderr, "%s: a dispatch without %s: not a fairq run\n", prog,
                tenant ? FQ_HDR_RUN_ID : FQ_HDR_TENANT);
        return NATS_INVALID_ARG;
    }
    if (fqc_hdr_u64(m, FQ_HDR_EST_TOKENS, UINT32_MAX, &est))
        c.est_tokens = (uint32_t)est;
    snprintf(c.run_id, sizeof c.run_id, "%s", run_id);
    if (workflow)
        snprintf(c.workflow, sizeof c.workflow, "%s", workflow);
    len = fq_completion_format(body, sizeof body, &c);
    snprintf(subject, sizeof subject, "%s.%s", l->cfg.done_prefix, tenant);
    if (len == 0)
        return NATS_INVALID_ARG;
    return js_PublishAsync(l->wjs, subject, body, (int)len, NULL);
}

static fqc_pub_errors load_complete_failures = {.prog = "fairq-load",
                                                 .what = "a completion publish"};

/* Complete every job finished by now: publish the completions, wait for
 * their PubAcks, then ack the dispatches (or nak them all, so that they
 * come back, if a completion was not stored). */
static void load_finish_due(load *l, int64_t now_ns)
{
    load_job done[LOAD_FETCH_MAX];
    int n = 0;
    natsStatus s = NATS_OK;
    jsPubOptions po;

    while (l->busy && l->heap[0].finish_ns <= now_ns && n < LOAD_FETCH_MAX)
        done[n++] = load_heap_pop(l);
    if (n == 0)
        return;
    atomic_store(&load_complete_failures.n, 0);
    for (int i = 0; s == NATS_OK && i < n; i++)
        s = load_complete(l, &done[i]);
    jsPubOptions_Init(&po);
    po.MaxWait = 10000;
    if (s == NATS_OK)
        s = js_PublishAsyncComplete(l->wjs, &po);
    if (s != NATS_OK || atomic_load(&load_complete_failures.n)) {
        natsMsgList pending;
        if (s != NATS_OK)
            fqc_perror(prog, "completions", s);
        if (js_PublishAsyncGetPendingList(&pending, l->wjs) == NATS_OK)
            natsMsgList_Destroy(&pending);
        l->complete_errors += (uint64_t)n;
        for (int i = 0; i < n; i++) {
            fqc_ack(&l->pull, done[i].msg, "-NAK");
            natsMsg_Destroy(done[i].msg);
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        fqc_ack(&l->pull, done[i].msg, "+ACK");
        natsMsg_Destroy(done[i].msg);
        if (done[i].idx >= 0) {
            load_run *r = load_run_at(l, (uint64_t)done[i].idx);
            if (r->completed < UINT8_MAX)
                r->completed++;
            if (r->completed == 1)
                atomic_fetch_add(&l->completed, 1);
        }
    }
    l->last_done_ns = (uint64_t)now_ns;
    load_wake_producer(l);
}

/* The proxy's stats. */

/* Print each field of a stats object as " key=value": numbers, names
 * (blanks made '_'), booleans as 0 or 1, and an object of counts (the
 * refusals by code) as their sum. */
static void load_print_fields(const cJSON *o)
{
    const cJSON *f;

    cJSON_ArrayForEach(f, o) {
        if (cJSON_IsNumber(f)) {
            double v = f->valuedouble;
            if (v == floor(v) && fabs(v) < 1e15)
                printf(" %s=%lld", f->string, (long long)v);
            else
                printf(" %s=%.4g", f->string, v);
        } else if (cJSON_IsString(f)) {
            printf(" %s=", f->string);
            for (const char *c = f->valuestring; *c; c++)
                putchar(*c == ' ' || *c == '=' ? '_' : *c);
        } else if (cJSON_IsBool(f)) {
            printf(" %s=%d", f->string, cJSON_IsTrue(f));
        } else if (cJSON_IsObject(f)) {
            double sum = 0;
            const cJSON *k;
            cJSON_ArrayForEach(k, f)
                sum += cJSON_IsNumber(k) ? k->valuedouble : 0;
            printf(" %s=%.0f", f->string, sum);
        }
    }
}

/* Whether a stats reply says the proxy holds nothing: no run queued and
 * none in flight, so it has handled the completion of every run it
 * dispatched. */
static bool load_proxy_settled(const cJSON *root)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "overall");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(o, "queued_runs");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "in_flight");
    return cJSON_IsNumber(q) && cJSON_IsNumber(f) && q->valuedouble == 0 && f->valuedouble == 0;
}

/* Ask the proxy for its stats and print them: "proxy snapshot=NAME
 * at_s=SECONDS" then a line per tenant and one overall (tenant=*). Says
 * on stderr why not when nothing answers (a relay has no stats). With
 * settle, asks again until the proxy holds nothing, up to
 * LOAD_SETTLE_MS: the last completions were stored in the completions
 * stream when the load saw their PubAcks, but the proxy reads that stream
 * on its own time, and on a busy machine a request sent at once can
 * overtake them (the "end" snapshot counted 953 completions of 954). */
#define LOAD_SETTLE_MS 10000
static void load_proxy_stats(load *l, const char *snapshot, bool settle)
{
    int64_t settle_end = fqc_mono_ns() + (int64_t)LOAD_SETTLE_MS * FQC_NS_PER_MS;
    double at;
    char subject[256];
    natsMsg *reply = NULL;
    const cJSON *t;
    cJSON *root;
    natsStatus s;

    snprintf(subject, sizeof subject, "%s." FQ_ADMIN_STATS, l->cfg.admin_prefix);
    for (;;) {
        at = (double)(fqc_mono_ns() - l->t0_ns) / 1e9;
        s = natsConnection_RequestString(&reply, l->wnc, subject, "", 5000);
        if (s != NATS_OK) {
            fqc_perror(prog, subject, s);
            return;
        }
        root = cJSON_ParseWithLength(natsMsg_GetData(reply), (size_t)natsMsg_GetDataLength(reply));
        natsMsg_Destroy(reply);
        reply = NULL;
        if (!settle || load_proxy_settled(root) || fqc_mono_ns() >= settle_end || fqc_stopping())
            break;
        cJSON_Delete(root);
        fqc_sleep_until(fqc_mono_ns() + 50 * FQC_NS_PER_MS);
    }
    if (!cJSON_IsObject(root)) {
        fprintf(stderr, "%s: %s: the reply is not a JSON object\n", prog, subject);
        cJSON_Delete(root);
        return;
    }
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(root, "tenants")) {
        printf("proxy snapshot=%s at_s=%.3f", snapshot, at);
        load_print_fields(t);
        putchar('\n');
    }
    printf("proxy snapshot=%s at_s=%.3f tenant=*", snapshot, at);
    load_print_fields(cJSON_GetObjectItemCaseSensitive(root, "overall"));
    putchar('\n');
    fflush(stdout);
    cJSON_Delete(root);
}

/* Runs the producer submitted that are neither completed nor refused. */
static uint64_t load_outstanding(load *l)
{
    return atomic_load(&l->submitted) - atomic_load(&l->completed) - atomic_load(&l->rejected) -
           atomic_load(&l->submit_errors);
}

static void load_progress(load *l, int64_t now_ns, int64_t *next_ns)
{
    if (!l->cfg.verbose || now_ns < *next_ns)
        return;
    *next_ns = now_ns + FQC_NS_PER_S;
    fprintf(stderr, "%s: t=%.1fs submitted=%llu dispatched=%llu completed=%llu rejected=%llu busy=%u\n",
            prog, (double)(now_ns - l->t0_ns) / 1e9, (unsigned long long)atomic_load(&l->submitted),
            (unsigned long long)l->dispatched, (unsigned long long)atomic_load(&l->completed),
            (unsigned long long)atomic_load(&l->rejected), l->busy);
}

/* Take the counts the steady rate is measured between. */
static void load_mark(load *l, int64_t now_ns)
{
    int64_t warm = l->t0_ns + (int64_t)(l->cfg.warmup_s * 1e9);
    if (!l->warm_ns && now_ns >= warm) {
        l->warm_ns = now_ns;
        l->warm_count = atomic_load(&l->completed);
    }
    if (!l->end_ns && !atomic_load(&l->producing)) {
        l->end_ns = now_ns;
        l->end_count = atomic_load(&l->completed);
    }
}

/* The worker loop, until the producer is done and every run came back (or
 * the drain time ran out, or a signal came). */
static void load_work(load *l)
{
    int64_t drain_deadline = 0, next_progress = 0;

    for (;;) {
        int64_t now = fqc_mono_ns();
        load_finish_due(l, now);
        load_mark(l, now);
        load_progress(l, now, &next_progress);
        if (!l->stats_taken && l->cfg.stats_at_s >= 0 &&
            now >= l->t0_ns + (int64_t)(l->cfg.stats_at_s * 1e9)) {
            l->stats_taken = true;
            load_proxy_stats(l, "during", false);
        }
        if (fqc_stopping())
            break;
        if (!atomic_load(&l->producing)) {
            if (!drain_deadline)
                drain_deadline = now + (int64_t)(l->cfg.drain_s * 1e9);
            if ((load_outstanding(l) == 0 && l->busy == 0) || now >= drain_deadline)
                break;
        }
        uint32_t idle = l->cfg.workers - l->busy;
        int64_t wait_ms = 50;
        if (l->busy) {
            int64_t until = (l->heap[0].finish_ns - now) / FQC_NS_PER_MS;
            wait_ms = until < 1 ? 1 : until < wait_ms ? until : wait_ms;
        }
        if (idle == 0) {
            fqc_sleep_until(l->heap[0].finish_ns);
            continue;
        }
        natsMsg *got[LOAD_FETCH_MAX];
        int n = 0;
        if (!fqc_pull_next(&l->pull, prog, got, idle < LOAD_FETCH_MAX ? (int)idle : LOAD_FETCH_MAX,
                           wait_ms, 100, &n))
            continue;
        now = fqc_mono_ns();
        for (int i = 0; i < n; i++)
            load_heap_push(l, load_receive(l, got[i], now));
    }
    /* Runs still held go back, so that a later worker gets them at once. */
    while (l->busy) {
        load_job j = load_heap_pop(l);
        fqc_ack(&l->pull, j.msg, "-NAK");
        natsMsg_Destroy(j.msg);
    }
}

/* Setup. */

/* Bind the worker pool to the dispatch stream: a shared durable consumer
 * (created if missing, from the first message on), or one of its own that
 * starts at the next message and is deleted at exit. */
static int load_subscribe(load *l)
{
    const load_cfg *cfg = &l->cfg;
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s;

    jsConsumerConfig_Init(&cc);
    if (cfg->durable) {
        snprintf(l->consumer, sizeof l->consumer, "%s", cfg->durable);
        cc.DeliverPolicy = js_DeliverAll;
    } else {
        snprintf(l->consumer, sizeof l->consumer, "fairq-load-%s", l->tag);
        cc.DeliverPolicy = js_DeliverNew;
        l->own_consumer = true;
    }
    cc.Durable = l->consumer;
    cc.AckPolicy = js_AckExplicit;
    cc.FilterSubject = cfg->dispatch;
    cc.AckWait = 300 * FQC_NS_PER_S;
    cc.MaxAckPending = 1000000;
    cc.MaxRequestBatch = LOAD_FETCH_MAX;
    s = js_GetConsumerInfo(&ci, l->wjs, cfg->dispatch_stream, l->consumer, NULL, &jerr);
    if (s != NATS_OK && jerr == JSConsumerNotFoundErr)
        s = js_AddConsumer(&ci, l->wjs, cfg->dispatch_stream, &cc, NULL, &jerr);
    jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK) {
        if (jerr == JSConsumerWQConsumerNotDeliverAllErr || jerr == JSConsumerWQMultipleUnfilteredErr ||
            jerr == JSConsumerWQConsumerNotUniqueErr)
            fprintf(stderr, "%s: %s is a work-queue stream with a reader already: pass --durable "
                    "with that consumer's name\n", prog, cfg->dispatch_stream);
        else
            fqc_perror(prog, "creating the workers' consumer", s);
        l->own_consumer = false;
        return -1;
    }
    s = fqc_pull_open(&l->pull, l->wnc, NULL, cfg->dispatch_stream, l->consumer);
    if (s == NATS_OK)
        s = natsConnection_Subscribe(&l->rejected_sub, l->wnc, l->rejected_subject, load_on_rejected, l);
    if (s != NATS_OK) {
        fqc_perror(prog, "subscribing", s);
        return -1;
    }
    return 0;
}

/* The report. */

/* One latency line; first_us and first_receive_us are the waits of the
 * tenant's first run (for all tenants: the longest of those). */
static void load_latency_line(const char *tenant, uint64_t runs, int64_t first_us,
                              int64_t first_receive_us, fqc_samples *d, fqc_samples *r,
                              fqc_samples *h)
{
    fqc_samples_sort(d);
    fqc_samples_sort(r);
    fqc_samples_sort(h);
    printf("latency tenant=%s runs=%llu first_ms=%.3f dispatch_p50_ms=%.3f dispatch_p99_ms=%.3f "
           "dispatch_max_ms=%.3f first_receive_ms=%.3f receive_p50_ms=%.3f receive_p99_ms=%.3f "
           "receive_max_ms=%.3f header_p50_ms=%u header_p99_ms=%u\n",
           tenant, (unsigned long long)runs, (double)first_us / 1e3, fqc_samples_quantile(d, 0.5) / 1e3,
           fqc_samples_quantile(d, 0.99) / 1e3, fqc_samples_quantile(d, 1.0) / 1e3,
           (double)first_receive_us / 1e3, fqc_samples_quantile(r, 0.5) / 1e3,
           fqc_samples_quantile(r, 0.99) / 1e3, fqc_samples_quantile(r, 1.0) / 1e3,
           fqc_samples_quantile(h, 0.5), fqc_samples_quantile(h, 0.99));
}

static void load_merge(fqc_samples *all, const fqc_samples *one)
{
    for (size_t i = 0; i < one->n; i++)
        fqc_samples_add(all, one->v[i]);
}

/* What became of the runs published, counted once the load is over. */
typedef struct load_tally {
    uint64_t once, more;        /* completed once, more than once */
    uint64_t missing;           /* neither completed, refused nor failed to submit */
    uint64_t redisp;            /* dispatched more than once */
    uint64_t rejected, failed;  /* refused by the proxy; failed to submit */
} load_tally;

static load_tally load_count(load *l)
{
    load_tally k = {0};
    uint64_t n = atomic_load(&l->table.published);
    for (uint64_t i = 0; i < n; i++) {
        load_run *r = load_run_at(l, i);
        bool rej = atomic_load(&r->rejected), fail = atomic_load(&r->submit_failed);
        k.rejected += rej;
        k.failed += fail;
        k.once += r->completed == 1;
        k.more += r->completed > 1;
        k.redisp += r->dispatched > 1;
        k.missing += r->completed == 0 && !rej && !fail;
    }
    return k;
}

/* The latency lines: all tenants merged ("*"), then each. */
static void load_report_latency(load *l)
{
    fqc_samples d = {0}, r = {0}, h = {0};
    uint64_t runs = 0;
    int64_t worst_first = 0, worst_first_receive = 0;
    for (uint32_t t = 0; t < l->src->ntenants; t++) {
        load_merge(&d, &l->tenants[t].dispatch_us);
        load_merge(&r, &l->tenants[t].receive_us);
        load_merge(&h, &l->tenants[t].header_ms);
        runs += l->tenants[t].runs;
        if (l->tenants[t].first_us > worst_first)
            worst_first = l->tenants[t].first_us;
        if (l->tenants[t].first_receive_us > worst_first_receive)
            worst_first_receive = l->tenants[t].first_receive_us;
    }
    load_latency_line("*", runs, worst_first, worst_first_receive, &d, &r, &h);
    fqc_samples_free(&d);
    fqc_samples_free(&r);
    fqc_samples_free(&h);
    for (uint32_t t = 0; t < l->src->ntenants; t++) {
        load_tenant *lt = &l->tenants[t];
        load_latency_line(l->src->tenants[t], lt->runs, lt->first_us, lt->first_receive_us,
                          &lt->dispatch_us, &lt->receive_us, &lt->header_ms);
    }
}

static void load_report(load *l)
{
    const load_cfg *c = &l->cfg;
    load_tally k = load_count(l);
    uint64_t out_of_order = 0, submitted = atomic_load(&l->submitted);
    int64_t end = l->last_done_ns ? (int64_t)l->last_done_ns : l->produce_end_ns;
    double elapsed = (double)(end - l->t0_ns) / 1e9;
    double produce = (double)(l->produce_end_ns - l->t0_ns) / 1e9;
    double steady = 0;

    if (l->end_ns > l->warm_ns && l->warm_ns)
        steady = (double)(l->end_count - l->warm_count) / ((double)(l->end_ns - l->warm_ns) / 1e9);
    printf("load tag=%s tenants=%u", l->tag, l->src->ntenants);
    if (l->scenario)
        printf(" scenario=%s seed=%llu runs_planned=%zu compress=%g", l->scenario->name,
               (unsigned long long)l->scenario->seed, l->scenario->n_runs, c->compress);
    else
        printf(" rate=%g duration_s=%g", c->steady.rate, c->duration_s);
    printf(" workers=%u tokens_per_sec=%g body_bytes=%u max_outstanding=%llu\n", c->workers,
           c->tokens_per_sec, c->body_bytes, (unsigned long long)c->max_outstanding);
    if (!c->workers) {
        printf("runs submitted=%llu submit_errors=%llu rejected=%llu\n", (unsigned long long)submitted,
               (unsigned long long)k.failed, (unsigned long long)k.rejected);
        printf("throughput elapsed_s=%.3f submit_per_s=%.0f\n", produce,
               produce > 0 ? (double)submitted / produce : 0.0);
        return;
    }
    for (uint32_t t = 0; t < l->src->ntenants; t++)
        out_of_order += l->tenants[t].out_of_order;
    printf("runs submitted=%llu submit_errors=%llu rejected=%llu dispatched=%llu foreign=%llu "
           "completed_once=%llu completed_more=%llu missing=%llu dispatched_more=%llu "
           "out_of_order=%llu complete_errors=%llu\n",
           (unsigned long long)submitted, (unsigned long long)k.failed,
           (unsigned long long)k.rejected, (unsigned long long)l->dispatched,
           (unsigned long long)l->foreign, (unsigned long long)k.once,
           (unsigned long long)k.more, (unsigned long long)k.missing,
           (unsigned long long)k.redisp, (unsigned long long)out_of_order,
           (unsigned long long)l->complete_errors);
    printf("throughput elapsed_s=%.3f submit_per_s=%.0f completed_per_s=%.0f steady_per_s=%.0f\n",
           elapsed, produce > 0 ? (double)submitted / produce : 0.0,
           elapsed > 0 ? (double)(k.once + k.more) / elapsed : 0.0, steady);
    load_report_latency(l);
}

/* Flags. */

static void load_usage(FILE *f)
{
    fprintf(f,
        "usage: %s [--nats URL] [--rate R] [--duration S] [--count N] [--tenants N|A,B,...]\n"
        "                  [--costs SPEC] [--arrivals const|poisson] [--in-turn] [--actual-factor F]\n"
        "                  | --scenario FILE [--compress F]\n"
        "                  [--body-size B] [--workers N] [--tokens-per-sec R] [--seed N]\n"
        "                  [--max-outstanding N] [--drain S] [--warmup S] [--durable NAME]\n"
        "                  [--proxy-stats] [--stats-at S] [--send-asap] [--verbose]\n"
        "Submits runs to fair.submit.<tenant>, works them off fair.dispatch with a pool of\n"
        "simulated workers that publish completions to fair.done.<tenant>, and reports\n"
        "throughput and submit->dispatch latency per tenant as key=value lines.\n"
        "  --rate R            runs a second over all tenants; 0: as fast as\n"
        "                      --max-outstanding allows (default 1000)\n"
        "  --duration S        seconds of submitting; 0: until --count, or with --scenario\n"
        "                      the whole scenario (default 10; with --scenario 0)\n"
        "  --count N           submit at most N runs (default: no limit)\n"
        "  --tenants N|LIST    N tenants t1..tN (up to 1,000,000), or a comma-separated\n"
        "                      list of up to 1024 (default 10)\n"
        "  --costs SPEC        [NAME=]TOKENS[:WEIGHT],... e.g. 100:0.9,5000:0.1 (default 1000)\n"
        "  --arrivals KIND     const (evenly spaced) or poisson (default const)\n"
        "  --in-turn           each run to the next tenant in turn, not one at random:\n"
        "                      --count N over N tenants gives each one run\n"
        "  --actual-factor F   actual tokens = estimate x F (default 1)\n"
        "  --scenario FILE     instead of the flags above, the runs of a scenario file\n"
        "                      (docs/sim.md): its tenants, submit times, workflows, declared\n"
        "                      and actual tokens; the workers mirror its capacity unless\n"
        "                      --workers or --tokens-per-sec say otherwise\n"
        "  --compress F        scenario seconds per real second: submit times / F, worker\n"
        "                      speed x F (default 1)\n"
        "  --body-size B       submit body bytes, at least the JSON run id (default 512)\n"
        "  --workers N         simulated workers; 0: submit only (default 16)\n"
        "  --tokens-per-sec R  a worker's speed; 0: runs take no time (default 0)\n"
        "  --seed N            the same seed gives the same runs (default 1; with\n"
        "                      --scenario, the file's)\n"
        "  --max-outstanding N runs submitted and not completed, at most; 0: no limit\n"
        "                      (default 10000)\n"
        "  --drain S           after the last submit, wait this long for completions (30)\n"
        "  --warmup S          steady_per_s is measured from S seconds on (default 1)\n"
        "  --durable NAME      work from this shared durable consumer (created if missing)\n"
        "                      instead of a private one deleted at exit\n"
        "  --proxy-stats       after the drain, print fairq-proxy's own stats (its reply\n"
        "                      on <admin-prefix>.stats) as 'proxy' lines, once it holds\n"
        "                      nothing queued or in flight (waiting up to 10 s)\n"
        "  --stats-at S        print them also S seconds after the start\n"
        "  --send-asap         write each message at once; nats.c otherwise holds writes\n"
        "                      up to 1 ms to batch them (use it to measure latency)\n"
        "  --submit-prefix P, --dispatch SUBJECT, --dispatch-stream NAME, --done-prefix P,\n"
        "  --rejected-prefix P, --admin-prefix P\n"
        "                      the wire contract's names (defaults as docs/protocol.md)\n"
        FQC_INBOX_PREFIX_HELP,
        prog);
}

/* Turn --tenants into ids: "N" makes t1..tN. */
static int load_tenants(char ***out, uint32_t *n, const char *spec)
{
    uint64_t count;
    char **ids;
    bool num = fqc_parse_u64(spec, 1, LOAD_TENANTS_NUM_MAX, &count);

    if (!(ids = calloc(num ? count : LOAD_TENANTS_MAX, sizeof *ids)))
        return -1;
    *out = ids;
    *n = 0;
    if (num) {
        for (; *n < count; (*n)++) {
            if (!(ids[*n] = malloc(24)))
                return -1;
            snprintf(ids[*n], 24, "t%u", *n + 1);
        }
        return 0;
    }
    if (!*spec) {
        fprintf(stderr, "%s: --tenants: give a number or a comma-separated list of ids\n", prog);
        return -1;
    }
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, ",");
        if (!fq_tenant_id_valid(p, len) || *n == LOAD_TENANTS_MAX) {
            fprintf(stderr, "%s: --tenants: '%.*s' is not a tenant id (" FQ_TENANT_RULE ")"
                    " or there are more than %d\n", prog, (int)len, p, LOAD_TENANTS_MAX);
            return -1;
        }
        if (!(ids[*n] = strndup(p, len)))
            return -1;
        (*n)++;
        p += len + (p[len] == ',');
    }
    return *n ? 0 : -1;
}

/* How a flag's value is read, and into what field of load_cfg. */
enum load_kind {
    LK_STR,                     /* the text as it is (const char *) */
    LK_DBL,                     /* a number in [dlo, dhi] (double) */
    LK_U64,                     /* a whole number in [ulo, uhi] (uint64_t) */
    LK_U32,                     /* the same into a uint32_t (uhi fits) */
    LK_TRUE,                    /* no value: the bool is set */
    LK_OTHER,                   /* load_flag_other reads it */
};

/* One flag: its name, what it takes and sets. */
typedef struct load_flag {
    const char *name;
    int val;                    /* getopt_long's: a short option, or a number of its own */
    enum load_kind kind;
    size_t off;                 /* its field of load_cfg (not LK_OTHER) */
    double dlo, dhi;            /* LK_DBL's range */
    uint64_t ulo, uhi;          /* LK_U64's and LK_U32's */
    size_t given;               /* a bool of load_cfg set when given; 0: none */
    bool steady;                /* a flag of the steady mix: not with --scenario */
} load_flag;

#define LF_AT(field) offsetof(load_cfg, field)
#define LF_STR(n, v, field) {n, v, LK_STR, LF_AT(field), 0, 0, 0, 0, 0, false}
#define LF_TRUE(n, v, field) {n, v, LK_TRUE, LF_AT(field), 0, 0, 0, 0, 0, false}
#define LF_DBL(n, v, field, lo, hi, given, steady) \
    {n, v, LK_DBL, LF_AT(field), lo, hi, 0, 0, given, steady}
#define LF_U64(n, v, kind, field, lo, hi, given, steady) \
    {n, v, kind, LF_AT(field), 0, 0, lo, hi, given, steady}
#define LF_OTHER(n, v, steady) {n, v, LK_OTHER, 0, 0, 0, 0, 0, 0, steady}

static const load_flag load_flags[] = {
    LF_STR("nats", 'n', url),
    LF_DBL("rate", 'r', steady.rate, 0, 1e7, 0, true),
    LF_DBL("duration", 'd', duration_s, 0, 1e6, LF_AT(duration_set), false),
    LF_U64("count", 'c', LK_U64, steady.count, 1, UINT64_MAX, 0, true),
    LF_OTHER("tenants", 't', true),
    LF_OTHER("costs", 'C', true),
    LF_OTHER("arrivals", 'a', true),
    LF_U64("body-size", 'b', LK_U32, body_bytes, 0, 64 << 20, 0, false),
    LF_U64("workers", 'w', LK_U32, workers, 0, 100000, LF_AT(workers_set), false),
    LF_DBL("tokens-per-sec", 'T', tokens_per_sec, 0, 1e12, LF_AT(tokens_per_sec_set), false),
    LF_DBL("actual-factor", 'f', steady.actual_factor, 0, 1e6, 0, true),
    LF_U64("max-outstanding", 'm', LK_U64, max_outstanding, 0, UINT64_MAX, 0, false),
    LF_DBL("drain", 'D', drain_s, 0, 1e6, 0, false),
    LF_DBL("warmup", 'W', warmup_s, 0, 1e6, 0, false),
    LF_U64("seed", 's', LK_U64, steady.seed, 0, UINT64_MAX, LF_AT(seed_set), false),
    LF_STR("durable", 'u', durable),
    LF_STR("submit-prefix", 1, submit_prefix),
    LF_STR("dispatch", 2, dispatch),
    LF_STR("dispatch-stream", 3, dispatch_stream),
    LF_STR("done-prefix", 4, done_prefix),
    LF_STR("rejected-prefix", 5, rejected_prefix),
    LF_TRUE("verbose", 'v', verbose),
    LF_TRUE("send-asap", 6, send_asap),
    LF_OTHER("help", 'h', false),
    LF_STR("scenario", 7, scenario),
    LF_DBL("compress", 8, compress, 1e-6, 1e9, LF_AT(compress_set), false),
    LF_TRUE("proxy-stats", 9, proxy_stats),
    LF_DBL("stats-at", 10, stats_at_s, 0, 1e6, 0, false),
    LF_STR("admin-prefix", 11, admin_prefix),
    {"in-turn", 12, LK_TRUE, LF_AT(steady.in_turn), 0, 0, 0, 0, 0, true},
    LF_OTHER("inbox-prefix", 13, false),
};
#define LOAD_NFLAGS (sizeof load_flags / sizeof *load_flags)

/* The flags that are not a field set as they are. */
static bool load_flag_other(load_cfg *c, char **tenant_spec, const char **costs, int val,
                            char *arg)
{
    switch (val) {
    case 't': *tenant_spec = arg; return true;
    case 'C': *costs = arg; return true;
    case 'a':
        c->steady.poisson = arg[0] == 'p';
        return strcmp(arg, "const") == 0 || strcmp(arg, "poisson") == 0;
    case 13: return fqc_inbox_prefix_set(prog, arg);
    default: load_usage(stdout); exit(0);       /* 'h' */
    }
}

/* Flag f with value arg into c; false if arg is not what f takes. */
static bool load_flag_set(load_cfg *c, char **tenant_spec, const char **costs,
                          const load_flag *f, char *arg)
{
    char *at = (char *)c + f->off;
    uint64_t u;
    bool ok = true;
    switch (f->kind) {
    case LK_STR: *(const char **)(void *)at = arg; break;
    case LK_DBL: ok = fqc_parse_double(arg, f->dlo, f->dhi, (double *)(void *)at); break;
    case LK_U64: ok = fqc_parse_u64(arg, f->ulo, f->uhi, (uint64_t *)(void *)at); break;
    case LK_U32:
        ok = fqc_parse_u64(arg, f->ulo, f->uhi, &u);
        *(uint32_t *)(void *)at = (uint32_t)u;
        break;
    case LK_TRUE: *(bool *)(void *)at = true; break;
    case LK_OTHER: ok = load_flag_other(c, tenant_spec, costs, f->val, arg); break;
    }
    if (f->given)
        *(bool *)(void *)((char *)c + f->given) = true;
    return ok;
}

/* What no one flag can say alone: the steady mix's flags and --compress
 * against --scenario, and an end. -1 (said on stderr) if they disagree. */
static int load_parse_check(load_cfg *c, const char *steady_flag)
{
    if (c->scenario && steady_flag) {
        fprintf(stderr, "%s: --%s: the scenario gives the tenants, arrivals and costs\n", prog,
                steady_flag);
        return -1;
    }
    if (!c->scenario && c->compress_set) {
        fprintf(stderr, "%s: --compress applies to --scenario only\n", prog);
        return -1;
    }
    if (c->scenario && !c->duration_set)
        c->duration_s = 0;
    if (!c->scenario && c->duration_s == 0 && c->steady.count == 0) {
        fprintf(stderr, "%s: --duration 0 needs --count, or it would never stop\n", prog);
        return -1;
    }
    c->steady.duration_us = c->duration_s > 0 ? (int64_t)(c->duration_s * 1e6) : INT64_MAX;
    return 0;
}

static int load_parse(load_cfg *c, char **tenant_spec, const char **costs, int argc, char **argv)
{
    struct option opts[LOAD_NFLAGS + 1];
    for (size_t i = 0; i < LOAD_NFLAGS; i++)
        opts[i] = (struct option){load_flags[i].name,
                                  load_flags[i].kind == LK_TRUE || load_flags[i].val == 'h'
                                      ? no_argument : required_argument,
                                  NULL, load_flags[i].val};
    opts[LOAD_NFLAGS] = (struct option){NULL, 0, NULL, 0};
    const char *steady_flag = NULL; /* a flag of the steady mix, given */
    int o, idx = 0;

    *c = (load_cfg){.submit_prefix = FQ_SUBJECT_SUBMIT, .dispatch = FQ_SUBJECT_DISPATCH,
                    .dispatch_stream = FQ_DEFAULT_STREAM_DISPATCH, .done_prefix = FQ_SUBJECT_DONE,
                    .rejected_prefix = FQ_SUBJECT_REJECTED, .admin_prefix = FQ_SUBJECT_ADMIN,
                    .duration_s = 10, .body_bytes = 512, .workers = 16, .max_outstanding = 10000,
                    .drain_s = 30, .warmup_s = 1, .compress = 1, .stats_at_s = -1};
    c->steady = (fql_steady_cfg){.rate = 1000, .actual_factor = 1, .seed = 1};
    *tenant_spec = "10";
    *costs = "1000";
    while ((o = getopt_long(argc, argv, "hv", opts, &idx)) != -1) {
        const load_flag *f = NULL;
        for (size_t i = 0; i < LOAD_NFLAGS && !f; i++)
            if (load_flags[i].val == o)
                f = &load_flags[i];
        if (!f) {
            load_usage(stderr);
            return -1;
        }
        if (f->steady)
            steady_flag = f->name;
        if (!load_flag_set(c, tenant_spec, costs, f, optarg)) {
            fprintf(stderr, "%s: --%s: '%s' is not valid (see --help)\n", prog, f->name, optarg);
            return -1;
        }
        idx = 0;
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return -1;
    }
    return load_parse_check(c, steady_flag);
}

/* A run id prefix of 8 hex digits, new for each load, so that one load's
 * runs never collide with an earlier one's in a duplicate window. */
static void load_make_tag(char tag[9])
{
    uint64_t seed = (uint64_t)fqc_wall_us() ^ ((uint64_t)getpid() << 32);
    snprintf(tag, 9, "%08llx", (unsigned long long)(fql_rand(&seed) & 0xffffffffu));
}

/* The scenario source, and the worker pool mirroring its capacity where
 * the flags do not say otherwise. */
static int load_open_scenario(load *l)
{
    load_cfg *c = &l->cfg;
    char err[512];
    uint32_t workers;
    double rate;

    if (fql_scenario_create(&l->src, c->scenario, c->compress, c->seed_set ? &c->steady.seed : NULL,
                            err, sizeof err) != FQ_OK) {
        fprintf(stderr, "%s: --scenario: %s\n", prog, err);
        return -1;
    }
    l->scenario = ((const fql_scenario *)l->src)->sc;
    fql_scenario_workers(l->src, &workers, &rate);
    if (!c->workers_set)
        c->workers = workers;
    if (!c->tokens_per_sec_set)
        c->tokens_per_sec = rate;
    return 0;
}

static int load_connect(load *l)
{
    const char *url = fqc_url(l->cfg.url);
    jsOptions jo;
    natsStatus s;

    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = 4096;
    jo.PublishAsync.ErrHandler = load_on_submit_error;
    jo.PublishAsync.ErrHandlerClosure = l;
    s = fqc_connect(&l->pnc, &l->pjs, url, "fairq-load-producer", &jo, l->cfg.send_asap);
    if (s == NATS_OK) {
        jsOptions_Init(&jo);
        jo.PublishAsync.MaxPending = 4 * LOAD_FETCH_MAX;
        jo.PublishAsync.ErrHandler = fqc_on_pub_error;
        jo.PublishAsync.ErrHandlerClosure = &load_complete_failures;
        s = fqc_connect(&l->wnc, &l->wjs, url, "fairq-load-workers", &jo, l->cfg.send_asap);
    }
    if (s != NATS_OK) {
        fqc_perror(prog, url, s);
        return -1;
    }
    return 0;
}

static void load_destroy(load *l)
{
    fqc_pull_close(&l->pull);
    if (l->rejected_sub) {
        natsSubscription_Unsubscribe(l->rejected_sub);
        natsSubscription_Destroy(l->rejected_sub);
    }
    if (l->own_consumer)
        js_DeleteConsumer(l->wjs, l->cfg.dispatch_stream, l->consumer, NULL, NULL);
    fqc_disconnect(l->wnc, l->wjs);
    fqc_disconnect(l->pnc, l->pjs);
    if (l->tenants)
        for (uint32_t t = 0; t < l->src->ntenants; t++) {
            fqc_samples_free(&l->tenants[t].dispatch_us);
            fqc_samples_free(&l->tenants[t].receive_us);
            fqc_samples_free(&l->tenants[t].header_ms);
        }
    free(l->tenants);
    free(l->heap);
    for (size_t c = 0; c < LOAD_CHUNKS; c++)
        free(l->table.chunk[c]);
    if (l->src)
        l->src->destroy(l->src);
    pthread_cond_destroy(&l->room);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* The arrivals: the scenario's, or the steady mix the flags give (its
 * tenants into *tenants, *ntenants). 0, or the exit code. */
static int load_source(load *l, char ***tenants, uint32_t *ntenants, const char *tenant_spec,
                       const char *costs)
{
    char err[160];
    if (l->cfg.scenario)
        return load_open_scenario(l) != 0 ? 1 : 0;
    if (!fqc_costs_parse(&l->cfg.steady.costs, costs, 1000000000u, err, sizeof err)) {
        fprintf(stderr, "%s: --costs: %s\n", prog, err);
        return 2;
    }
    if (load_tenants(tenants, ntenants, tenant_spec) != 0)
        return 2;
    if (fql_steady_create(&l->src, &l->cfg.steady, (const char *const *)*tenants, *ntenants) !=
        FQ_OK) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    load *l = calloc(1, sizeof *l);
    char **tenants = NULL, *tenant_spec;
    const char *costs;
    uint32_t ntenants = 0;
    pthread_t producer;
    int rc = 1;

    if (!l)
        return 1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->room, NULL);
    if (load_parse(&l->cfg, &tenant_spec, &costs, argc, argv) != 0) {
        load_destroy(l);
        return 2;
    }
    int src_rc = load_source(l, &tenants, &ntenants, tenant_spec, costs);
    if (src_rc != 0) {
        rc = src_rc;
        goto out;
    }
    fqc_catch_signals();
    load_make_tag(l->tag);
    snprintf(l->rejected_subject, sizeof l->rejected_subject, "%s.>", l->cfg.rejected_prefix);
    if (load_connect(l) != 0)
        goto out;
    if (l->cfg.workers) {
        const char *need[] = {l->cfg.dispatch_stream};
        l->heap = calloc(l->cfg.workers, sizeof *l->heap);
        l->tenants = calloc(l->src->ntenants, sizeof *l->tenants);
        if (!l->heap || !l->tenants || fqc_streams_require(l->wjs, prog, need, 1) != 0 ||
            load_subscribe(l) != 0)
            goto out;
    }
    l->t0_ns = fqc_mono_ns();
    atomic_store(&l->producing, true);
    if (pthread_create(&producer, NULL, load_produce, l) != 0) {
        fprintf(stderr, "%s: cannot start the producer thread\n", prog);
        goto out;
    }
    if (l->cfg.workers)
        load_work(l);
    pthread_join(producer, NULL);
    if (l->cfg.proxy_stats)
        load_proxy_stats(l, "end", true);
    load_report(l);
    rc = 0;
out:
    load_destroy(l);
    if (tenants)
        for (uint32_t t = 0; t < ntenants; t++)
            free(tenants[t]);
    free(tenants);
    nats_Close();
    return rc;
}
