/* fairq-worker.c -- an example worker: take runs from fair.dispatch one at a time, "work", publish each completion, ack. */
/*
 * What every fairq worker does, in the order that loses nothing:
 *
 * - Pull from a durable consumer on FAIR_DISPATCH with explicit acks (the
 *   workers own it; any number of them share it by name). It is created
 *   once, if missing, and kept: its ack floor is the pool's progress.
 *   FAIR_DISPATCH is a limits stream that keeps every dispatched run for
 *   its max age (an hour by default; its de-duplication needs them after a
 *   server restart), taken or not, so a new durable starts with the runs
 *   dispatched from its creation on (--deliver new). Starting from the
 *   stream's first message (--deliver all) would run again everything
 *   dispatched in the last hour that other pools already ran; it suits
 *   only a deployment's first pool, come after the first dispatches.
 *
 * - Work: here, sleep est_tokens x factor / tokens-per-sec seconds, telling
 *   the server now and then that the run is in progress so that its ack
 *   wait does not run out and hand it to another worker.
 *
 * - Claim the run before working it: a KV create of <tenant>/<run_id> in
 *   a bucket the pool owns (--claim-bucket, fairq_claims_<durable> by
 *   default: a pool's claims must not make another pool skip), which
 *   only one worker can win. A nats-server killed with SIGKILL can reset the
 *   pool's durable and deliver again, with delivery count 1, every run
 *   FAIR_DISPATCH still holds (docs/protocol.md, section 8): the claim is
 *   what keeps those from being run twice. A run whose claim says done is
 *   acked and skipped; one claimed by a worker still working it too, unless
 *   JetStream delivered it again itself (delivery count above 1: its holder
 *   stopped extending the ack wait, so it died or lost the server), when it
 *   is taken over by a compare-and-set on the claim. Skipping a claim
 *   "working" holds only if its holder works the run: a claim that failed
 *   (perhaps stored, its PubAck lost) is asked again until it is known
 *   whose it is, never handed back unclaimed. The bucket's TTL is
 *   FAIR_DISPATCH's max age, so a claim lasts as long as the run can come
 *   back. On by default: an example is copied, and the copy should not run
 *   an hour of work again after a server crash; --no-claim turns it off.
 *
 * - Publish the completion to fair.done.<tenant> and wait for its PubAck
 *   (retried until stored: once claimed, no one else will complete it),
 *   mark the claim done, then ack the dispatch. A crash in between delivers
 *   the run again and the claim, or else the proxy, ignores it; acking
 *   first could lose it.
 */
#include <getopt.h>
#include <math.h>
#include <unistd.h>

#include "client.h"

static const char *prog = "fairq-worker";

#define WORKER_ACK_WAIT_S 60
#define WORKER_PROGRESS_S 10        /* a keep-alive this often while working */
#define WORKER_PULL_WAIT_MS 1000    /* a pull waits this long for a run */
#define WORKER_ERROR_PAUSE_MS 500   /* after a failed pull, a pause before the next */
#define WORKER_RETRY_MS 500         /* a completion or claim mark not stored is sent again after this */
#define WORKER_CLAIM_PAUSE_MS 250   /* a claim that failed is asked again after this */
#define WORKER_CLAIM_PREFIX "fairq_claims_"  /* + the durable: the default claim bucket */
#define WORKER_BUCKET_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
/* A claim key: the tenant (64), '/', and a run id of 128 bytes each
 * escaped to 3 at most. */
#define WORKER_CLAIM_KEY_MAX (FQ_TENANT_MAX + 1 + 3 * FQ_RUN_ID_MAX)

/* What the flags set. */
typedef struct worker_cfg {
    const char *url;
    const char *durable;        /* the shared consumer */
    const char *stream;         /* the dispatch stream */
    const char *dispatch;       /* its subject */
    const char *done_prefix;    /* completions go to PREFIX.<tenant> */
    double tokens_per_sec;      /* work speed; 0: no time */
    double factor;              /* actual tokens = estimate x factor */
    enum fq_done_status status; /* what the completions report */
    uint64_t count;             /* stop after this many runs; 0: never */
    jsDeliverPolicy deliver;    /* where a durable created here starts */
    bool deliver_given;         /* --deliver was on the command line */
    const char *claim_bucket;   /* claims go there; NULL: --no-claim */
    char claim_default[80];     /* the default bucket's name, claim_bucket's target */
    bool create_only;           /* make the durable and exit: as a user who may */
    const char *api_prefix;     /* FAIR_DISPATCH's JetStream API; NULL: $JS.API */
} worker_cfg;

/* The claims of one worker: where they go, and what they skipped. */
typedef struct worker_claims {
    kvStore *kv;                /* the pool's claim bucket; NULL: no claims */
    jsCtx *js;                  /* claims are JetStream publishes on it */
    const char *bucket;         /* its name */
    char owner[128];            /* "<host>:<pid>", the value's second word */
    uint64_t skipped;           /* runs acked unworked: claimed already */
    uint64_t taken_over;        /* runs whose dead holder's claim we took */
    uint64_t skipped_logged;    /* skipped as of the last log line */
    int64_t logged_ns;          /* when that line was written (monotonic) */
} worker_claims;

/* Create the pool's durable consumer, from where --deliver says; *ci and
 * *jerr as js_AddConsumer gives them. */
static natsStatus worker_create_durable(jsConsumerInfo **ci, jsCtx *js, const worker_cfg *c,
                                        jsErrCode *jerr)
{
    jsConsumerConfig cc;
    natsStatus s = NATS_OK;
    jsConsumerConfig_Init(&cc);
    cc.Durable = c->durable;
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = c->deliver;
    if (c->deliver == js_DeliverNew) {
        /* "new" as a start sequence, the stream's next: the same runs
         * at creation, but a durable whose state a server crash
         * resets starts there again, not after the stream's last run,
         * which would skip what the pool had not taken yet. */
        jsStreamInfo *si = NULL;
        s = js_GetStreamInfo(&si, js, c->stream, NULL, jerr);
        if (s == NATS_OK) {
            cc.DeliverPolicy = js_DeliverByStartSequence;
            cc.OptStartSeq = si->State.LastSeq + 1;
        }
        jsStreamInfo_Destroy(si);
    }
    cc.FilterSubject = c->dispatch;
    cc.AckWait = WORKER_ACK_WAIT_S * FQC_NS_PER_S;
    cc.MaxAckPending = 10000;
    if (s == NATS_OK)
        s = js_AddConsumer(ci, js, c->stream, &cc, NULL, jerr);
    if (s == NATS_OK)
        fprintf(stderr, "%s: created the durable consumer %s on %s, %s\n", prog, c->durable,
                c->stream, c->deliver == js_DeliverAll
                               ? "from the stream's first run (--deliver all)"
                               : "with the runs dispatched from now on (--deliver new)");
    return s;
}

/* Open the shared durable consumer, creating it if missing with the start
 * policy of --deliver. An existing durable goes on from its ack floor,
 * whatever --deliver says: JetStream does not change a consumer's start. */
static int worker_subscribe(fqc_pull *pull, natsConnection *nc, jsCtx *js, const worker_cfg *c)
{
    const char *need[] = {c->stream};
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s;

    if (fqc_streams_require(js, prog, need, 1) != 0)
        return -1;
    s = js_GetConsumerInfo(&ci, js, c->stream, c->durable, NULL, &jerr);
    if (s != NATS_OK && jerr == JSConsumerNotFoundErr) {
        jerr = 0;
        s = worker_create_durable(&ci, js, c, &jerr);
    } else if (s == NATS_OK && c->deliver_given) {
        fprintf(stderr, "%s: the durable consumer %s exists and goes on where it stopped; "
                "--deliver applies to a new one only\n", prog, c->durable);
    }
    jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK) {
        if (jerr == JSConsumerWQMultipleUnfilteredErr || jerr == JSConsumerWQConsumerNotUniqueErr)
            fprintf(stderr, "%s: %s already has a reader under another name: pass its name with "
                    "--durable\n", prog, c->stream);
        else if (s == NATS_NO_RESPONDERS || s == NATS_TIMEOUT)
            /* On the shipped config a worker may not create consumers:
             * the admin makes the pool's durable. */
            fprintf(stderr, "%s: the durable consumer %s does not exist and cannot be made here: "
                    "run fairq-worker --create-only as a user who may (docs/security.md)\n",
                    prog, c->durable);
        else
            fqc_perror(prog, "the workers' consumer", s);
        return -1;
    }
    if (c->create_only)
        return 0;
    s = fqc_pull_open(pull, nc, c->api_prefix, c->stream, c->durable);
    if (s != NATS_OK) {
        fqc_perror(prog, "subscribing to the workers' consumer", s);
        return -1;
    }
    return 0;
}

/* The claim key of a run: "<tenant>/<run_id>". KV keys allow only
 * [-/_=.A-Za-z0-9], a run id any printable ASCII: each byte of the run id
 * outside [-_A-Za-z0-9] is escaped as '=' and two upper-case hex digits
 * ("a.b/c" -> "a=2Eb=2Fc"), so that distinct run ids keep distinct keys
 * (no hash to collide), '.' never makes an empty or leading token, and the
 * key stays readable in `nats kv ls`. A tenant needs no escaping. */
static void worker_claim_key(char out[static WORKER_CLAIM_KEY_MAX + 1], const char *tenant,
                             const char *run_id)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = (size_t)snprintf(out, FQ_TENANT_MAX + 2, "%s/", tenant);

    for (const unsigned char *p = (const unsigned char *)run_id; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_') {
            out[n++] = (char)*p;
        } else {
            out[n++] = '=';
            out[n++] = hex[*p >> 4];
            out[n++] = hex[*p & 15];
        }
    }
    out[n] = '\0';
}

/* Open the pool's claim bucket on js, creating it if missing with
 * FAIR_DISPATCH's max age (asked on fjs, its own account's API) as its TTL:
 * a claim must outlive every delivery of its run, and the stream can
 * deliver a run again for as long as it holds it. An existing bucket is
 * used as it is, with a warning if its claims expire first. Returns 0, or
 * -1 with the reason printed. */
static int worker_claims_open(worker_claims *wc, jsCtx *js, jsCtx *fjs, const worker_cfg *c)
{
    jsStreamInfo *si = NULL;
    kvStatus *st = NULL;
    char host[64] = "";
    int64_t max_age = 0;
    natsStatus s;

    wc->js = js;
    wc->bucket = c->claim_bucket;
    gethostname(host, sizeof host - 1);
    snprintf(wc->owner, sizeof wc->owner, "%s:%ld", host, (long)getpid());
    s = js_GetStreamInfo(&si, fjs, c->stream, NULL, NULL);
    if (s == NATS_OK)
        max_age = si->Config->MaxAge;
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK) {
        fqc_perror(prog, c->stream, s);
        return -1;
    }
    s = js_KeyValue(&wc->kv, js, c->claim_bucket);
    if (s == NATS_NOT_FOUND) {
        kvConfig kc;
        kvConfig_Init(&kc);
        kc.Bucket = c->claim_bucket;
        kc.History = 1;
        kc.TTL = max_age;
        kc.StorageType = js_FileStorage;
        s = js_CreateKeyValue(&wc->kv, js, &kc);
        if (s != NATS_OK) /* another worker of the pool made it first */
            s = js_KeyValue(&wc->kv, js, c->claim_bucket);
        else
            fprintf(stderr, "%s: created the claim bucket %s, claims kept %lld s (%s's max age)\n",
                    prog, c->claim_bucket, (long long)(max_age / FQC_NS_PER_S), c->stream);
    }
    if (s != NATS_OK) {
        fqc_perror(prog, "the claim bucket", s);
        return -1;
    }
    if (kvStore_Status(&st, wc->kv) == NATS_OK && kvStatus_TTL(st) != 0 &&
        (max_age == 0 || kvStatus_TTL(st) < max_age))
        fprintf(stderr, "%s: warning: claims in %s expire after %lld s, before %s forgets its runs "
                "(%s): a run delivered again after its claim expired is run again\n", prog,
                c->claim_bucket, (long long)(kvStatus_TTL(st) / FQC_NS_PER_S), c->stream,
                max_age ? "its max age" : "it has no max age");
    kvStatus_Destroy(st);
    return 0;
}

/* Write value under key only if the key's last revision is last (0: the
 * key has no value), keeping the JetStream error that tells a claim lost
 * to another (JSStreamWrongLastSequenceErr) from a failure. kvStore_Create
 * does the same, but does not say which of the two it was. */
static natsStatus worker_claim_write(worker_claims *wc, const char *key, const char *value,
                                     uint64_t last, jsErrCode *jerr)
{
    char subject[WORKER_CLAIM_KEY_MAX + 80];
    jsPubOptions po;
    natsMsg *m = NULL;
    natsStatus s;

    jsPubOptions_Init(&po);
    po.ExpectNoMessage = last == 0;
    po.ExpectLastSubjectSeq = last;
    snprintf(subject, sizeof subject, "$KV.%s.%s", wc->bucket, key);
    s = natsMsg_Create(&m, subject, NULL, value, (int)strlen(value));
    if (s == NATS_OK)
        s = js_PublishMsg(NULL, wc->js, m, &po, jerr);
    natsMsg_Destroy(m);
    return s;
}

enum worker_claim_verdict { CLAIM_WORK, CLAIM_SKIP, CLAIM_ERROR };

/* Claim a run before working it. Ours if no one claimed it; skipped if its
 * claim says done, or someone else's claim is live; taken over (compare
 * and set) if JetStream itself delivered it again (a holder that lives
 * extends its ack wait, so it died or lost the server) or if the claim is
 * our own. A delivery of a reset durable comes with count 1 and is
 * skipped: its holder may still be working it. */
static enum worker_claim_verdict worker_claim(worker_claims *wc, natsMsg *m, const char *key,
                                              char *seen, size_t seenlen)
{
    char mine[sizeof wc->owner + 16], what[WORKER_CLAIM_KEY_MAX + 32];
    jsMsgMetaData *meta = NULL;
    kvEntry *e = NULL;
    jsErrCode jerr = 0;
    uint64_t rev = 0, delivered = 1;
    bool done;
    natsStatus s;

    snprintf(mine, sizeof mine, "working %s", wc->owner);
    s = worker_claim_write(wc, key, mine, 0, &jerr);
    if (s == NATS_OK)
        return CLAIM_WORK;
    if (jerr != JSStreamWrongLastSequenceErr) {
        snprintf(what, sizeof what, "claiming the run %s", key);
        fqc_perror(prog, what, s);
        return CLAIM_ERROR;
    }
    s = kvStore_Get(&e, wc->kv, key);
    if (s != NATS_OK) {
        snprintf(what, sizeof what, "reading the claim of %s", key);
        fqc_perror(prog, what, s);
        return CLAIM_ERROR;
    }
    snprintf(seen, seenlen, "%.*s", kvEntry_ValueLen(e), (const char *)kvEntry_Value(e));
    rev = kvEntry_Revision(e);
    kvEntry_Destroy(e);
    done = strncmp(seen, "done ", 5) == 0;
    if (!done && natsMsg_GetMetaData(&meta, m) == NATS_OK)
        delivered = meta->NumDelivered;
    jsMsgMetaData_Destroy(meta);
    /* Our own claim "working" is this run's: this worker works one run at
     * a time (a claim stored whose PubAck the crash lost, asked again). */
    if (done || (delivered < 2 && strcmp(seen, mine) != 0))
        return CLAIM_SKIP;
    jerr = 0;
    s = worker_claim_write(wc, key, mine, rev, &jerr);
    if (s == NATS_OK) {
        wc->taken_over++;
        fprintf(stderr, "%s: took over the claim on %s from '%s' (delivered %llu times)\n", prog,
                key, seen, (unsigned long long)delivered);
        return CLAIM_WORK;
    }
    if (jerr == JSStreamWrongLastSequenceErr) /* another worker took it over first */
        return CLAIM_SKIP;
    snprintf(what, sizeof what, "taking over the claim of %s", key);
    fqc_perror(prog, what, s);
    return CLAIM_ERROR;
}

/* A run skipped for its claim: acked, so it is not delivered again, and
 * counted; one line a second at most, since a reset durable replays up to
 * an hour of runs at once. */
static void worker_skipped(worker_claims *wc, fqc_pull *pull, natsMsg *m, const char *key,
                           const char *seen)
{
    int64_t now = fqc_mono_ns();

    fqc_ack(pull, m, "+ACK");
    wc->skipped++;
    if (wc->logged_ns == 0 || now - wc->logged_ns >= FQC_NS_PER_S) {
        fprintf(stderr, "%s: skipped %llu runs claimed already (%llu in all; the last %s, claim '%s')\n",
                prog, (unsigned long long)(wc->skipped - wc->skipped_logged),
                (unsigned long long)wc->skipped, key, seen);
        wc->skipped_logged = wc->skipped;
        wc->logged_ns = now;
    }
}

/* Sleep for secs, keeping the run's ack wait alive. false if a signal
 * came first. */
static bool worker_work(fqc_pull *pull, natsMsg *m, double secs)
{
    int64_t end = fqc_mono_ns() + (int64_t)(secs * 1e9);

    for (;;) {
        int64_t now = fqc_mono_ns(), next = now + WORKER_PROGRESS_S * FQC_NS_PER_S;
        if (fqc_stopping())
            return false;
        if (now >= end)
            return true;
        fqc_sleep_until(next < end ? next : end);
        if (fqc_mono_ns() < end)
            fqc_ack(pull, m, "+WPI");
    }
}

/* Work one run through: claim, print, work, complete, mark the claim done,
 * ack. 1 if it was done, 0 if it was handed back, refused or skipped, -1
 * on a NATS error. */
/* Claim the run under key: 1 to work it, else what worker_run returns (0:
 * another worker's, skipped; -1: stopping, handed back). */
static int worker_claim_run(worker_claims *wc, fqc_pull *pull, natsMsg *m, const char *key)
{
    char seen[256] = "";
    enum worker_claim_verdict v;
    /* A claim that failed may be stored all the same (a server killed
     * after storing it, before its PubAck): asked again, after a pause
     * so that a server away does not make a loop of it, until it is
     * known whose it is. Handed back instead, it would be "working" in
     * our name while no one works it, and a reset durable's delivery
     * (count 1) to another worker skips it: a run its pool never
     * completes. */
    while ((v = worker_claim(wc, m, key, seen, sizeof seen)) == CLAIM_ERROR &&
           !fqc_stopping())
        fqc_sleep_until(fqc_mono_ns() + WORKER_CLAIM_PAUSE_MS * FQC_NS_PER_MS);
    switch (v) {
    case CLAIM_WORK: return 1;
    case CLAIM_SKIP: worker_skipped(wc, pull, m, key, seen); return 0;
    case CLAIM_ERROR: break;    /* stopping: handed back, its claim perhaps ours */
    }
    fqc_ack(pull, m, "-NAK");
    return -1;
}

/* Store the worked run's completion, then (with claims) mark its claim
 * key done; each retried until stored or stopping. NATS_OK once the
 * completion is stored. */
static natsStatus worker_store_done(jsCtx *js, const worker_cfg *c, worker_claims *wc,
                                    const char *tenant, const char *key,
                                    const fq_completion *done)
{
    char subject[256], body[512];
    size_t len = fq_completion_format(body, sizeof body, done);
    natsStatus s;
    snprintf(subject, sizeof subject, "%s.%s", c->done_prefix, tenant);
    /* The run is worked: its completion is retried until stored (the
     * client reconnects by itself), not left to a redelivery that would
     * work it again, or, claimed, skip it uncompleted. */
    while ((s = len ? js_Publish(NULL, js, subject, body, (int)len, NULL, NULL)
                    : NATS_INVALID_ARG) != NATS_OK && len && !fqc_stopping()) {
        fqc_perror(prog, "publishing the completion (retrying)", s);
        fqc_sleep_until(fqc_mono_ns() + WORKER_RETRY_MS * FQC_NS_PER_MS);
    }
    if (s == NATS_OK && wc->kv) {
        /* Retried as the completion is: a claim left "working" would let a
         * redelivery take the run over, and this worker's own, work it
         * again. Stopping first leaves just that. */
        char mark[sizeof wc->owner + 8];
        natsStatus ks;
        snprintf(mark, sizeof mark, "done %s", wc->owner);
        while ((ks = kvStore_PutString(NULL, wc->kv, key, mark)) != NATS_OK && !fqc_stopping()) {
            fqc_perror(prog, "marking the claim done (retrying)", ks);
            fqc_sleep_until(fqc_mono_ns() + WORKER_RETRY_MS * FQC_NS_PER_MS);
        }
    }
    return s;
}

static int worker_run(jsCtx *js, fqc_pull *pull, const worker_cfg *c, worker_claims *wc, natsMsg *m)
{
    static const char *const names[] = {"ok", "error", "cancelled"};
    const char *tenant = fqc_hdr(m, FQ_HDR_TENANT), *run_id = fqc_hdr(m, FQ_HDR_RUN_ID);
    const char *workflow = fqc_hdr(m, FQ_HDR_WORKFLOW);
    fq_completion done = {.status = c->status};
    char key[WORKER_CLAIM_KEY_MAX + 1] = "";
    uint64_t est = 0;
    int claimed;
    natsStatus s;

    if (!tenant || !fq_tenant_id_valid(tenant, strlen(tenant)) || !run_id ||
        !fq_msg_name_valid(run_id, strlen(run_id), FQ_RUN_ID_MAX)) {
        fprintf(stderr, "%s: a message without a valid %s header is not a fairq run: "
                "terminated\n", prog, tenant ? FQ_HDR_RUN_ID : FQ_HDR_TENANT);
        fqc_ack(pull, m, "+TERM");
        return 0;
    }
    if (wc->kv) {
        worker_claim_key(key, tenant, run_id);
        if ((claimed = worker_claim_run(wc, pull, m, key)) != 1)
            return claimed;
    }
    fqc_hdr_u64(m, FQ_HDR_EST_TOKENS, UINT32_MAX, &est);
    /* The completion names the run and what it spent; the proxy reconciles
     * against the charge it made, so nothing of the dispatch is echoed. */
    done.actual_tokens = (uint64_t)llround((double)est * c->factor);
    snprintf(done.run_id, sizeof done.run_id, "%s", run_id);
    if (!workflow || !fq_msg_name_valid(workflow, strlen(workflow), FQ_WORKFLOW_MAX))
        workflow = "";
    double secs = c->tokens_per_sec > 0 ? (double)done.actual_tokens / c->tokens_per_sec : 0;
    printf("run tenant=%s run_id=%s workflow=%s est_tokens=%llu bytes=%d work_s=%.3f\n", tenant,
           run_id, workflow, (unsigned long long)est, natsMsg_GetDataLength(m), secs);
    fflush(stdout);
    if (!worker_work(pull, m, secs)) {
        fqc_ack(pull, m, "-NAK");
        printf("handed back run_id=%s (stopping)\n", run_id);
        return 0;
    }
    if ((s = worker_store_done(js, c, wc, tenant, key, &done)) != NATS_OK) {
        /* Stopping, the completion unstored: the run comes back after the
         * ack wait, and its claim (ours, "working") is taken over. */
        fqc_perror(prog, "completing the run", s);
        return -1;
    }
    /* Completed once the completion is stored, whatever becomes of the ack. */
    printf("done tenant=%s run_id=%s actual_tokens=%llu status=%s\n", tenant, run_id,
           (unsigned long long)done.actual_tokens, names[c->status]);
    fflush(stdout);
    s = fqc_ack_sync(pull, m, 5000);
    if (s != NATS_OK) {
        /* Not acked: the run comes back after the ack wait, and is skipped
         * for its claim (done) or, without claims, worked again. */
        fqc_perror(prog, "acking the completed run", s);
        return -1;
    }
    return 1;
}

static void worker_usage(FILE *f)
{
    fprintf(f,
            "usage: %s [--nats URL] [--durable NAME] [--tokens-per-sec R] [--actual-factor F]\n"
            "                    [--count N] [--status ok|error|cancelled] [--stream NAME]\n"
            "                    [--dispatch SUBJECT] [--done-prefix P] [--deliver new|all]\n"
            "                    [--claim-bucket NAME | --no-claim] [--create-only]\n"
            "                    [--api-prefix P]\n"
            "Takes runs from " FQ_SUBJECT_DISPATCH " one at a time, works each for actual/R seconds,\n"
            "publishes its completion to " FQ_SUBJECT_DONE ".<tenant> and acks it.\n"
            "  --nats URL            server (default $FAIRQ_NATS_URL, else " FQC_DEFAULT_URL ")\n"
            "  --durable NAME        the workers' shared consumer (default fairq-workers)\n"
            "  --tokens-per-sec R    work speed; 0: no time (default 1000)\n"
            "  --actual-factor F     actual tokens = Fair-Est-Tokens x F (default 1)\n"
            "  --count N             exit after N runs (default: run until SIGINT/SIGTERM)\n"
            "  --deliver new|all     where the durable starts if it does not exist yet: new\n"
            "                        (default) takes the runs dispatched from its creation on;\n"
            "                        all replays what the stream still holds (its max age, an\n"
            "                        hour by default), for a deployment's first pool only.\n"
            "                        An existing durable goes on where it stopped.\n"
            FQC_INBOX_PREFIX_HELP
            "  --claim-bucket NAME   claim each run in this KV bucket before working it, and\n"
            "                        skip a run claimed already, so that a run delivered\n"
            "                        again (a server crash can replay the durable) is not\n"
            "                        worked twice (default " WORKER_CLAIM_PREFIX "<durable>; created if\n"
            "                        missing with the dispatch stream's max age as its TTL).\n"
            "                        One bucket per pool (durable): a pool skips the runs\n"
            "                        claimed in its bucket.\n"
            "  --no-claim            work every run delivered, claimed or not\n"
            "  --api-prefix P        FAIR_DISPATCH's JetStream API prefix (default $JS.API); on\n"
            "                        the shipped NATS config JS.FAIRQ.API, where the workers'\n"
            "                        account imports fairq's durable and its claim bucket is in\n"
            "                        its own account's JetStream\n"
            "  --create-only         create the durable if missing (as --deliver says) and exit,\n"
            "                        as a user who may: on the shipped NATS config the admin,\n"
            "                        since a worker may not create consumers\n",
            prog);
}

/* A flag's word and the value it stands for; a list ends with a NULL word. */
typedef struct worker_word_of {
    const char *word;
    int value;
} worker_word_of;

/* The value of word in list into *v; false if it is none of them. */
static bool worker_word(int *v, const char *word, const worker_word_of *list)
{
    for (; list->word; list++) {
        if (strcmp(word, list->word) == 0) {
            *v = list->value;
            return true;
        }
    }
    return false;
}

/* The default claim bucket (from the durable's name) once the flags are
 * read: it must be a bucket name unless --claim-bucket or --no-claim said
 * otherwise. 0 if ok and it is; else -1. */
static int worker_parse_check(worker_cfg *c, bool ok)
{
    snprintf(c->claim_default, sizeof c->claim_default, WORKER_CLAIM_PREFIX "%s", c->durable);
    if (ok && c->claim_bucket == c->claim_default &&
        (strlen(c->claim_default) > 64 ||
         strspn(c->claim_default, WORKER_BUCKET_CHARS) != strlen(c->claim_default))) {
        fprintf(stderr, "%s: the durable's name does not make a bucket name (" WORKER_CLAIM_PREFIX
                "<durable>, 1 to 64 of [A-Za-z0-9_-]): pass --claim-bucket or --no-claim\n", prog);
        ok = false;
    }
    return ok ? 0 : -1;
}

/* The flags, for getopt_long. */
static const struct option worker_opts[] = {
    {"nats", required_argument, NULL, 'n'},           {"durable", required_argument, NULL, 'd'},
    {"tokens-per-sec", required_argument, NULL, 'T'}, {"actual-factor", required_argument, NULL, 'f'},
    {"count", required_argument, NULL, 'c'},          {"status", required_argument, NULL, 's'},
    {"stream", required_argument, NULL, 'S'},         {"dispatch", required_argument, NULL, 'D'},
    {"done-prefix", required_argument, NULL, 'p'},    {"deliver", required_argument, NULL, 'l'},
    {"inbox-prefix", required_argument, NULL, 'I'},
    {"claim-bucket", required_argument, NULL, 'k'},   {"no-claim", no_argument, NULL, 'K'},
    {"create-only", no_argument, NULL, 'C'},          {"api-prefix", required_argument, NULL, 'A'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int worker_parse(worker_cfg *c, int argc, char **argv)
{
    static const worker_word_of statuses[] = {
        {"ok", FQ_DONE_OK}, {"error", FQ_DONE_ERROR}, {"cancelled", FQ_DONE_CANCELLED}, {NULL, 0}};
    static const worker_word_of delivers[] = {
        {"new", js_DeliverNew}, {"all", js_DeliverAll}, {NULL, 0}};
    int o, idx = 0, v;
    bool ok = true;

    *c = (worker_cfg){.durable = "fairq-workers", .stream = FQ_DEFAULT_STREAM_DISPATCH,
                      .dispatch = FQ_SUBJECT_DISPATCH, .done_prefix = FQ_SUBJECT_DONE,
                      .tokens_per_sec = 1000, .factor = 1, .status = FQ_DONE_OK,
                      .deliver = js_DeliverNew};
    c->claim_bucket = c->claim_default;
    while (ok && (o = getopt_long(argc, argv, "h", worker_opts, &idx)) != -1) {
        switch (o) {
        case 'n': c->url = optarg; break;
        case 'd': c->durable = optarg; break;
        case 'S': c->stream = optarg; break;
        case 'D': c->dispatch = optarg; break;
        case 'p': c->done_prefix = optarg; break;
        case 'T': ok = fqc_parse_double(optarg, 0, 1e12, &c->tokens_per_sec); break;
        case 'f': ok = fqc_parse_double(optarg, 0, 1e6, &c->factor); break;
        case 'c': ok = fqc_parse_u64(optarg, 1, UINT64_MAX, &c->count); break;
        case 's':
            if ((ok = worker_word(&v, optarg, statuses)))
                c->status = (enum fq_done_status)v;
            break;
        case 'l':
            c->deliver_given = true;
            if ((ok = worker_word(&v, optarg, delivers)))
                c->deliver = (jsDeliverPolicy)v;
            break;
        case 'I':
            if (!fqc_inbox_prefix_set(prog, optarg))
                return -1;
            break;
        case 'k': /* a bucket name: 1 to 64 of [A-Za-z0-9_-] */
            c->claim_bucket = optarg;
            ok = *optarg && strlen(optarg) <= 64 && strspn(optarg, WORKER_BUCKET_CHARS) == strlen(optarg);
            break;
        case 'K': c->claim_bucket = NULL; break;
        case 'C': c->create_only = true; break;
        case 'A': c->api_prefix = optarg; ok = *optarg != '\0'; break;
        case 'h': worker_usage(stdout); exit(0);
        default: worker_usage(stderr); return -1;
        }
        if (!ok)
            fprintf(stderr, "%s: --%s: '%s' is not valid (see --help)\n", prog, worker_opts[idx].name, optarg);
        idx = 0;
    }
    if (ok && optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        ok = false;
    }
    return worker_parse_check(c, ok);
}

/* Work the runs the pool's consumer delivers until stopped or c->count
 * are done, then say what the claims skipped. */
static void worker_serve(jsCtx *js, fqc_pull *pull, const worker_cfg *c, worker_claims *claims)
{
    uint64_t done = 0;
    fprintf(stderr, "%s: waiting for runs on %s (consumer %s, %s%s)\n", prog, c->dispatch,
            c->durable, c->claim_bucket ? "claims in " : "no claims",
            c->claim_bucket ? c->claim_bucket : "");
    while (!fqc_stopping() && (c->count == 0 || done < c->count)) {
        natsMsg *m = NULL;
        int n = 0;
        if (!fqc_pull_next(pull, prog, &m, 1, WORKER_PULL_WAIT_MS, WORKER_ERROR_PAUSE_MS, &n))
            continue;
        if (worker_run(js, pull, c, claims, m) > 0)
            done++;
        natsMsg_Destroy(m);
    }
    if (claims->kv)
        fprintf(stderr, "%s: claims: %llu runs skipped, claimed already; %llu taken over\n", prog,
                (unsigned long long)claims->skipped, (unsigned long long)claims->taken_over);
}

int main(int argc, char **argv)
{
    worker_cfg cfg;
    natsConnection *nc = NULL;
    jsCtx *js = NULL, *fjs = NULL;
    fqc_pull pull = {0};
    worker_claims claims = {0};
    natsStatus s;
    int rc = 1;

    if (worker_parse(&cfg, argc, argv) != 0)
        return 2;
    fqc_catch_signals();
    s = fqc_connect(&nc, &js, fqc_url(cfg.url), prog, NULL, false);
    if (s != NATS_OK) {
        fqc_perror(prog, fqc_url(cfg.url), s);
        return 1;
    }
    if (cfg.api_prefix) {
        jsOptions jo;
        jsOptions_Init(&jo);
        jo.Prefix = cfg.api_prefix;
        s = natsConnection_JetStream(&fjs, nc, &jo);
        if (s != NATS_OK) {
            fqc_perror(prog, "--api-prefix", s);
            goto out;
        }
    }
    if (worker_subscribe(&pull, nc, fjs ? fjs : js, &cfg) != 0)
        goto out;
    if (cfg.create_only) {
        rc = 0;
        goto out;
    }
    if (cfg.claim_bucket && worker_claims_open(&claims, js, fjs ? fjs : js, &cfg) != 0)
        goto out;
    worker_serve(js, &pull, &cfg, &claims);
    rc = 0;
out:
    kvStore_Destroy(claims.kv);
    fqc_pull_close(&pull);
    jsCtx_Destroy(fjs);
    fqc_disconnect(nc, js);
    nats_Close();
    return rc;
}
