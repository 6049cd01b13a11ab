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
 * - Publish the completion to fair.done.<tenant> and wait for its PubAck,
 *   then ack the dispatch. A crash in between delivers the run again and
 *   the proxy ignores the second completion; acking first could lose it.
 */
#include <getopt.h>
#include <math.h>

#include "client.h"

static const char *prog = "fairq-worker";

#define WORKER_ACK_WAIT_S 60
#define WORKER_PROGRESS_S 10        /* a keep-alive this often while working */

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
} worker_cfg;

/* Open the shared durable consumer, creating it if missing with the start
 * policy of --deliver. An existing durable goes on from its ack floor,
 * whatever --deliver says: JetStream does not change a consumer's start. */
static int worker_subscribe(fqc_pull *pull, natsConnection *nc, jsCtx *js, const worker_cfg *c)
{
    const char *need[] = {c->stream};
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s;

    if (fqc_streams_require(js, prog, need, 1) != 0)
        return -1;
    s = js_GetConsumerInfo(&ci, js, c->stream, c->durable, NULL, &jerr);
    if (s != NATS_OK && jerr == JSConsumerNotFoundErr) {
        jsConsumerConfig_Init(&cc);
        cc.Durable = c->durable;
        cc.AckPolicy = js_AckExplicit;
        cc.DeliverPolicy = c->deliver;
        cc.FilterSubject = c->dispatch;
        cc.AckWait = WORKER_ACK_WAIT_S * FQC_NS_PER_S;
        cc.MaxAckPending = 10000;
        s = js_AddConsumer(&ci, js, c->stream, &cc, NULL, &jerr);
        if (s == NATS_OK)
            fprintf(stderr, "%s: created the durable consumer %s on %s, %s\n", prog, c->durable,
                    c->stream, c->deliver == js_DeliverAll
                                   ? "from the stream's first run (--deliver all)"
                                   : "with the runs dispatched from now on (--deliver new)");
    } else if (s == NATS_OK && c->deliver_given) {
        fprintf(stderr, "%s: the durable consumer %s exists and goes on where it stopped; "
                "--deliver applies to a new one only\n", prog, c->durable);
    }
    jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK) {
        if (jerr == JSConsumerWQMultipleUnfilteredErr || jerr == JSConsumerWQConsumerNotUniqueErr)
            fprintf(stderr, "%s: %s already has a reader under another name: pass its name with "
                    "--durable\n", prog, c->stream);
        else
            fqc_perror(prog, "the workers' consumer", s);
        return -1;
    }
    s = fqc_pull_open(pull, nc, c->stream, c->durable);
    if (s != NATS_OK) {
        fqc_perror(prog, "subscribing to the workers' consumer", s);
        return -1;
    }
    return 0;
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

/* Work one run through: print, work, complete, ack. 1 if it was done, 0
 * if it was handed back or refused, -1 on a NATS error. */
static int worker_run(jsCtx *js, fqc_pull *pull, const worker_cfg *c, natsMsg *m)
{
    static const char *const names[] = {"ok", "error", "cancelled"};
    const char *tenant = fqc_hdr(m, FQ_HDR_TENANT), *run_id = fqc_hdr(m, FQ_HDR_RUN_ID);
    const char *workflow = fqc_hdr(m, FQ_HDR_WORKFLOW);
    fq_completion done = {.status = c->status};
    char subject[256], body[512];
    uint64_t est = 0;
    double secs;
    size_t len;
    natsStatus s;

    if (!tenant || !fq_tenant_id_valid(tenant, strlen(tenant)) || !run_id ||
        !fq_msg_name_valid(run_id, strlen(run_id), FQ_RUN_ID_MAX)) {
        fprintf(stderr, "%s: a message without a valid %s header is not a fairq run: "
                "terminated\n", prog, tenant ? FQ_HDR_RUN_ID : FQ_HDR_TENANT);
        fqc_ack(pull, m, "+TERM");
        return 0;
    }
    fqc_hdr_u64(m, FQ_HDR_EST_TOKENS, UINT32_MAX, &est);
    /* The completion names the run and what it spent; the proxy reconciles
     * against the charge it made, so nothing of the dispatch is echoed. */
    done.actual_tokens = (uint64_t)llround((double)est * c->factor);
    snprintf(done.run_id, sizeof done.run_id, "%s", run_id);
    if (!workflow || !fq_msg_name_valid(workflow, strlen(workflow), FQ_WORKFLOW_MAX))
        workflow = "";
    secs = c->tokens_per_sec > 0 ? (double)done.actual_tokens / c->tokens_per_sec : 0;
    printf("run tenant=%s run_id=%s workflow=%s est_tokens=%llu bytes=%d work_s=%.3f\n", tenant,
           run_id, workflow, (unsigned long long)est, natsMsg_GetDataLength(m), secs);
    fflush(stdout);
    if (!worker_work(pull, m, secs)) {
        fqc_ack(pull, m, "-NAK");
        printf("handed back run_id=%s (stopping)\n", run_id);
        return 0;
    }
    len = fq_completion_format(body, sizeof body, &done);
    snprintf(subject, sizeof subject, "%s.%s", c->done_prefix, tenant);
    s = len ? js_Publish(NULL, js, subject, body, (int)len, NULL, NULL) : NATS_INVALID_ARG;
    if (s == NATS_OK)
        s = fqc_ack_sync(pull, m, 5000);
    if (s != NATS_OK) {
        /* Not acked: the run comes back after the ack wait. */
        fqc_perror(prog, "completing the run", s);
        return -1;
    }
    printf("done tenant=%s run_id=%s actual_tokens=%llu status=%s\n", tenant, run_id,
           (unsigned long long)done.actual_tokens, names[c->status]);
    fflush(stdout);
    return 1;
}

static void worker_usage(FILE *f)
{
    fprintf(f,
            "usage: %s [--nats URL] [--durable NAME] [--tokens-per-sec R] [--actual-factor F]\n"
            "                    [--count N] [--status ok|error|cancelled] [--stream NAME]\n"
            "                    [--dispatch SUBJECT] [--done-prefix P] [--deliver new|all]\n"
            "Takes runs from " FQC_DISPATCH " one at a time, works each for actual/R seconds,\n"
            "publishes its completion to " FQC_DONE_PREFIX ".<tenant> and acks it.\n"
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
            FQC_INBOX_PREFIX_HELP,
            prog);
}

static int worker_parse(worker_cfg *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"nats", required_argument, NULL, 'n'},           {"durable", required_argument, NULL, 'd'},
        {"tokens-per-sec", required_argument, NULL, 'T'}, {"actual-factor", required_argument, NULL, 'f'},
        {"count", required_argument, NULL, 'c'},          {"status", required_argument, NULL, 's'},
        {"stream", required_argument, NULL, 'S'},         {"dispatch", required_argument, NULL, 'D'},
        {"done-prefix", required_argument, NULL, 'p'},    {"deliver", required_argument, NULL, 'l'},
        {"inbox-prefix", required_argument, NULL, 'I'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o, idx = 0;
    bool ok = true;

    *c = (worker_cfg){.durable = "fairq-workers", .stream = FQ_DEFAULT_STREAM_DISPATCH,
                      .dispatch = FQC_DISPATCH, .done_prefix = FQC_DONE_PREFIX,
                      .tokens_per_sec = 1000, .factor = 1, .status = FQ_DONE_OK,
                      .deliver = js_DeliverNew};
    while (ok && (o = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
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
            if (strcmp(optarg, "ok") == 0) c->status = FQ_DONE_OK;
            else if (strcmp(optarg, "error") == 0) c->status = FQ_DONE_ERROR;
            else if (strcmp(optarg, "cancelled") == 0) c->status = FQ_DONE_CANCELLED;
            else ok = false;
            break;
        case 'l':
            c->deliver_given = true;
            if (strcmp(optarg, "new") == 0) c->deliver = js_DeliverNew;
            else if (strcmp(optarg, "all") == 0) c->deliver = js_DeliverAll;
            else ok = false;
            break;
        case 'I':
            if (!fqc_inbox_prefix_set(prog, optarg))
                return -1;
            break;
        case 'h': worker_usage(stdout); exit(0);
        default: worker_usage(stderr); return -1;
        }
        if (!ok)
            fprintf(stderr, "%s: --%s: '%s' is not valid (see --help)\n", prog, opts[idx].name, optarg);
        idx = 0;
    }
    if (ok && optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        ok = false;
    }
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    worker_cfg cfg;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    fqc_pull pull = {0};
    uint64_t done = 0;
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
    if (worker_subscribe(&pull, nc, js, &cfg) != 0)
        goto out;
    fprintf(stderr, "%s: waiting for runs on %s (consumer %s)\n", prog, cfg.dispatch, cfg.durable);
    while (!fqc_stopping() && (cfg.count == 0 || done < cfg.count)) {
        natsMsg *m = NULL;
        int n = 0;
        if (!fqc_pull_next(&pull, prog, &m, 1, 1000, 500, &n))
            continue;
        if (worker_run(js, &pull, &cfg, m) > 0)
            done++;
        natsMsg_Destroy(m);
    }
    rc = 0;
out:
    fqc_pull_close(&pull);
    fqc_disconnect(nc, js);
    nats_Close();
    return rc;
}
