/* fairq-relay.c -- the baseline with no scheduling: FAIR_SUBMIT relayed in stream order to the dispatch subject. */
/*
 * The fastest honest relay (issue 4 point 9), and the demo's plain FIFO:
 *
 * - Fetch up to a batch (256) from a durable pull consumer on FAIR_SUBMIT,
 *   publish each run asynchronously to the dispatch subject with the
 *   headers a proxy dispatch carries, wait for every PubAck, then ack the
 *   batch. A submit message is acked only once its dispatch is stored, so
 *   nothing is lost; a batch with a failed publish is nak'ed whole and comes
 *   back, and its Nats-Msg-Id keeps the runs that did get through from
 *   reaching the workers twice.
 *
 * - It reads headers only: no JSON, no queues, no window, no completions.
 *   What it does not do is what the proxy is measured against.
 *
 * - A work-queue stream admits one reader, so the consumer is recreated at
 *   start (whatever a previous relay left unacked comes back at once) and
 *   deleted at a clean exit, leaving the stream to the proxy.
 */
#include <getopt.h>
#include <stdatomic.h>

#include "client.h"
#include "natsio.h"

static const char *prog = "fairq-relay";

/* What the flags set. */
typedef struct relay_cfg {
    const char *url;            /* NULL: $FAIRQ_NATS_URL or the default */
    const char *stream;         /* the submit stream */
    const char *durable;        /* its consumer */
    const char *dispatch;       /* where runs go */
    int batch;                  /* most runs per fetch */
    uint32_t default_est;       /* Fair-Est-Tokens when the producer gave none */
    int replicas;               /* of the streams it creates (a cluster's benchmark: 3) */
} relay_cfg;

/* Publish errors the library reported since the batch began. */
static fqc_pub_errors relay_pub_errors = {.prog = "fairq-relay", .what = "a dispatch publish"};

/* Where dispatch messages are built; the main thread's alone. */
static fq_buf relay_scratch;

/* Build the dispatch message of one submit message: the body byte for
 * byte, the headers of the wire contract. */
static natsStatus relay_dispatch_msg(natsMsg **out, const relay_cfg *cfg, natsMsg *in,
                                     int64_t now_ms)
{
    const char *tenant = fqc_last_token(natsMsg_GetSubject(in));
    const char *run_id = fqc_hdr(in, FQ_HDR_RUN_ID);
    const char *workflow = fqc_hdr(in, FQ_HDR_WORKFLOW);
    char derived[32], msg_id[FQ_TENANT_MAX + FQ_RUN_ID_MAX + 16];
    uint64_t est, seq = 0;
    int64_t stored_ns = 0;
    natsStatus s = fqc_msg_meta(in, &seq, &stored_ns);

    if (s != NATS_OK)
        return s;
    if (!run_id) {
        snprintf(derived, sizeof derived, "s%llu", (unsigned long long)seq);
        run_id = derived;
    }
    if (!fqc_hdr_u64(in, FQ_HDR_EST_TOKENS, UINT32_MAX, &est) || est == 0)
        est = cfg->default_est;
    snprintf(msg_id, sizeof msg_id, "fairq:%s:%s", tenant, run_id);

    /* Built as the proxy builds its dispatches; the producer's headers are
     * carried over except the Nats- ones and those set here. */
    char est_s[FQ_U64_DEC_MAX], submitted[FQ_U64_DEC_MAX], dispatched[FQ_U64_DEC_MAX];
    fq_u64_dec(est_s, est);
    fq_u64_dec(submitted, (uint64_t)(stored_ns / FQC_NS_PER_MS));
    fq_u64_dec(dispatched, (uint64_t)now_ms);
    fq_nio_hdr h[] = {{FQ_HDR_TENANT, tenant},           {FQ_HDR_RUN_ID, run_id},
                      {FQ_HDR_EST_TOKENS, est_s},        {FQ_HDR_SUBMITTED_AT, submitted},
                      {FQ_HDR_DISPATCHED_AT, dispatched}, {FQC_HDR_MSG_ID, msg_id},
                      {FQ_HDR_WORKFLOW, workflow}};
    fq_nio_out o = {.subject = cfg->dispatch, .data = natsMsg_GetData(in),
                    .len = (size_t)natsMsg_GetDataLength(in), .hdrs = h,
                    .n_hdrs = workflow ? 7 : 6, .carry = (const fq_nio_msg *)in};
    void *m = NULL;
    fq_status fs = fq_nio_natsmsg_create(&m, &o, &relay_scratch);
    *out = m;
    s = fs == FQ_OK ? NATS_OK : fs == FQ_ENOMEM ? NATS_NO_MEMORY : NATS_INVALID_ARG;
    return s;
}

/* Take back whatever the library still holds after a failed wait, so the
 * next batch starts clean; those runs are nak'ed with their batch. */
static void relay_drop_pending(jsCtx *js)
{
    natsMsgList pending;
    if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK)
        natsMsgList_Destroy(&pending);
}

/* Relay one fetched batch of n. Returns how many runs went out, or -1 if
 * the batch was nak'ed. */
static int relay_batch(jsCtx *js, fqc_pull *pull, const relay_cfg *cfg, natsMsg **msgs, int n)
{
    int64_t now_ms = fqc_wall_us() / 1000;
    jsPubOptions po;
    natsStatus s = NATS_OK;

    atomic_store(&relay_pub_errors.n, 0);
    for (int i = 0; s == NATS_OK && i < n; i++) {
        natsMsg *out = NULL;
        s = relay_dispatch_msg(&out, cfg, msgs[i], now_ms);
        if (s == NATS_OK)
            s = js_PublishMsgAsync(js, &out, NULL);
        natsMsg_Destroy(out);
    }
    jsPubOptions_Init(&po);
    po.MaxWait = 10000;
    if (s == NATS_OK)
        s = js_PublishAsyncComplete(js, &po);
    if (s != NATS_OK || atomic_load(&relay_pub_errors.n)) {
        if (s != NATS_OK)
            fqc_perror(prog, "dispatch batch", s);
        relay_drop_pending(js);
        for (int i = 0; i < n; i++)
            fqc_ack(pull, msgs[i], "-NAK");
        return -1;
    }
    for (int i = 0; i < n; i++)
        fqc_ack(pull, msgs[i], "+ACK");
    return n;
}

/* Recreate the durable pull consumer on the submit stream and open it. */
static int relay_subscribe(fqc_pull *pull, natsConnection *nc, jsCtx *js, const relay_cfg *cfg)
{
    jsConsumerConfig cc;
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    natsStatus s;

    js_DeleteConsumer(js, cfg->stream, cfg->durable, NULL, NULL);
    jsConsumerConfig_Init(&cc);
    cc.Durable = cfg->durable;
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = 30 * FQC_NS_PER_S;
    cc.MaxAckPending = 65536;
    cc.MaxRequestBatch = cfg->batch;
    s = js_AddConsumer(&ci, js, cfg->stream, &cc, NULL, &jerr);
    jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK) {
        if (jerr == JSConsumerWQMultipleUnfilteredErr || jerr == JSConsumerWQConsumerNotUniqueErr)
            fprintf(stderr, "%s: %s already has a reader (is fairq-proxy running?): a work-queue "
                    "stream admits one\n", prog, cfg->stream);
        else
            fqc_perror(prog, "creating the submit consumer", s);
        return -1;
    }
    s = fqc_pull_open(pull, nc, NULL, cfg->stream, cfg->durable);
    if (s != NATS_OK) {
        fqc_perror(prog, "subscribing to the submit consumer", s);
        return -1;
    }
    return 0;
}

static void relay_usage(FILE *f)
{
    fprintf(f,
            "usage: %s [--nats URL] [--stream NAME] [--durable NAME] [--dispatch SUBJECT]\n"
            "                   [--batch N] [--default-est N] [--replicas N]\n"
            "Relays runs from the submit stream (default " FQ_DEFAULT_STREAM_SUBMIT ") to the dispatch\n"
            "subject (default " FQ_SUBJECT_DISPATCH ") in arrival order, with no scheduling: the\n"
            "baseline fairq-proxy is benchmarked against, and the demo's plain FIFO.\n"
            "Creates the fairq streams if they are missing. Stops on SIGINT or SIGTERM.\n"
            "  --nats URL         server (default $FAIRQ_NATS_URL, else " FQC_DEFAULT_URL ")\n"
            "  --batch N          runs per fetch, 1 to 4096 (default 256)\n"
            "  --default-est N    Fair-Est-Tokens when a run declares none (default 1000)\n"
            "  --replicas N       replicas of the streams it creates, 1 to 5 (default 1)\n"
            FQC_INBOX_PREFIX_HELP,
            prog);
}

static int relay_parse(relay_cfg *cfg, int argc, char **argv)
{
    static const struct option opts[] = {
        {"nats", required_argument, NULL, 'n'},    {"stream", required_argument, NULL, 's'},
        {"durable", required_argument, NULL, 'd'}, {"dispatch", required_argument, NULL, 'D'},
        {"batch", required_argument, NULL, 'b'},   {"default-est", required_argument, NULL, 'e'},
        {"inbox-prefix", required_argument, NULL, 'I'}, {"replicas", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    uint64_t v;
    int c;

    *cfg = (relay_cfg){.stream = FQ_DEFAULT_STREAM_SUBMIT, .durable = "fairq-relay",
                       .dispatch = FQ_SUBJECT_DISPATCH, .batch = 256, .default_est = 1000,
                       .replicas = 1};
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': cfg->url = optarg; break;
        case 's': cfg->stream = optarg; break;
        case 'd': cfg->durable = optarg; break;
        case 'D': cfg->dispatch = optarg; break;
        case 'b':
            if (!fqc_parse_u64(optarg, 1, 4096, &v))
                goto bad;
            cfg->batch = (int)v;
            break;
        case 'e':
            if (!fqc_parse_u64(optarg, 1, UINT32_MAX, &v))
                goto bad;
            cfg->default_est = (uint32_t)v;
            break;
        case 'r':
            if (!fqc_parse_u64(optarg, 1, 5, &v))
                goto bad;
            cfg->replicas = (int)v;
            break;
        case 'I':
            if (!fqc_inbox_prefix_set(prog, optarg))
                return -1;
            break;
        case 'h': relay_usage(stdout); exit(0);
        default: relay_usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return -1;
    }
    return 0;
bad:
    fprintf(stderr, "%s: --%s: '%s' is not an integer in range (see --help)\n", prog,
            c == 'b' ? "batch" : c == 'r' ? "replicas" : "default-est", optarg);
    return -1;
}

int main(int argc, char **argv)
{
    relay_cfg cfg;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    fqc_pull pull = {0};
    natsMsg **msgs = NULL;
    jsOptions jo;
    uint64_t relayed = 0;
    int64_t t0;
    natsStatus s;
    int rc = 1;

    if (relay_parse(&cfg, argc, argv) != 0)
        return 2;
    fqc_catch_signals();
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = 4 * cfg.batch;
    jo.PublishAsync.ErrHandler = fqc_on_pub_error;
    jo.PublishAsync.ErrHandlerClosure = &relay_pub_errors;
    s = fqc_connect(&nc, &js, fqc_url(cfg.url), prog, &jo, false);
    if (s != NATS_OK) {
        fqc_perror(prog, fqc_url(cfg.url), s);
        return 1;
    }
    if (!(msgs = calloc((size_t)cfg.batch, sizeof *msgs))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        goto out;
    }
    if (fqc_streams_ensure(js, prog, cfg.replicas) != 0 || relay_subscribe(&pull, nc, js, &cfg) != 0)
        goto out;
    fprintf(stderr, "%s: relaying %s to %s\n", prog, cfg.stream, cfg.dispatch);
    t0 = fqc_mono_ns();
    while (!fqc_stopping()) {
        int n = 0;
        if (!fqc_pull_next(&pull, prog, msgs, cfg.batch, 100, 100, &n))
            continue;
        int sent = relay_batch(js, &pull, &cfg, msgs, n);
        if (sent > 0)
            relayed += (uint64_t)sent;
        for (int i = 0; i < n; i++)
            fq_nio_natsmsg_free(msgs[i]);   /* as the proxy frees what it owns */
    }
    double secs = (double)(fqc_mono_ns() - t0) / 1e9;
    printf("relay relayed=%llu elapsed_s=%.3f rate=%.0f\n", (unsigned long long)relayed, secs,
           secs > 0 ? (double)relayed / secs : 0.0);
    rc = 0;
out:
    if (pull.pull.sub) {
        fqc_pull_close(&pull);
        js_DeleteConsumer(js, cfg.stream, cfg.durable, NULL, NULL);
    }
    free(msgs);
    free(relay_scratch.p);
    fqc_disconnect(nc, js);
    nats_Close();
    return rc;
}
