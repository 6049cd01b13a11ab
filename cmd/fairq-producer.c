/* fairq-producer.c -- an example producer: submit runs for one tenant, each acknowledged by JetStream, and print them. */
/*
 * It speaks the wire contract as any client would: a run is a message on
 * fair.submit.<tenant>. Without --body the body is a JSON object carrying
 * the optional fields (run_id, workflow, est_tokens); with --body the text
 * goes as it is and the fields go in the Fair-* headers instead. Each run's
 * Nats-Msg-Id is its run id, so submitting the same run twice within the
 * stream's duplicate window stores it once.
 */
#include <getopt.h>

#include "client.h"

static const char *prog = "fairq-producer";

/* What the flags set. */
typedef struct producer_cfg {
    const char *url;
    const char *tenant;
    const char *workflow;       /* NULL: let the proxy's estimator decide */
    const char *body;           /* NULL: a JSON body with the fields */
    const char *run_id;         /* NULL: made up */
    const char *prefix;         /* submit subject prefix */
    uint32_t est;               /* 0: none declared */
    uint64_t count;             /* runs to submit */
} producer_cfg;

/* The JSON body of a run: the fields the flags gave. */
static size_t producer_json(char *buf, size_t cap, const producer_cfg *c, const char *run_id)
{
    fq_json w;
    size_t len = 0;

    fq_json_init(&w, buf, cap);
    fq_json_begin_object(&w);
    fq_json_key(&w, "run_id");
    fq_json_string(&w, run_id);
    if (c->workflow) {
        fq_json_key(&w, "workflow");
        fq_json_string(&w, c->workflow);
    }
    if (c->est) {
        fq_json_key(&w, "est_tokens");
        fq_json_int(&w, c->est);
    }
    fq_json_end_object(&w);
    return fq_json_finish(&w, &len) == FQ_OK ? len : 0;
}

/* Submit run i and print it. */
static int producer_send(jsCtx *js, const producer_cfg *c, uint64_t i, const char *stamp)
{
    char subject[256], run_id[FQ_RUN_ID_MAX + 1], json[512];
    const char *body = c->body;
    size_t len = body ? strlen(body) : 0;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsMsg *m = NULL;
    natsStatus s;

    if (c->run_id && c->count == 1)
        snprintf(run_id, sizeof run_id, "%s", c->run_id);
    else
        snprintf(run_id, sizeof run_id, "%s-%llu", c->run_id ? c->run_id : stamp,
                 (unsigned long long)i + 1);
    if (!body) {
        len = producer_json(json, sizeof json, c, run_id);
        body = json;
    }
    snprintf(subject, sizeof subject, "%s.%s", c->prefix, c->tenant);
    s = natsMsg_Create(&m, subject, NULL, body, (int)len);
    if (s == NATS_OK && c->body) {
        s = natsMsgHeader_Set(m, FQ_HDR_RUN_ID, run_id);
        if (s == NATS_OK && c->workflow) s = natsMsgHeader_Set(m, FQ_HDR_WORKFLOW, c->workflow);
        if (s == NATS_OK && c->est) s = fqc_hdr_set_u64(m, FQ_HDR_EST_TOKENS, c->est);
    }
    if (s == NATS_OK) s = natsMsgHeader_Set(m, FQC_HDR_MSG_ID, run_id);
    if (s == NATS_OK) s = js_PublishMsg(&pa, js, m, NULL, &jerr);
    natsMsg_Destroy(m);
    if (s == NATS_NO_RESPONDERS) {
        fprintf(stderr, "%s: no stream stores %s: start fairq-proxy first, it creates %s\n", prog,
                subject, FQ_DEFAULT_STREAM_SUBMIT);
        return -1;
    }
    if (s != NATS_OK) {
        fqc_perror(prog, subject, s);
        return -1;
    }
    printf("sent subject=%s run_id=%s workflow=%s est_tokens=%u bytes=%zu stream=%s seq=%llu%s\n",
           subject, run_id, c->workflow ? c->workflow : "", c->est, len, pa->Stream,
           (unsigned long long)pa->Sequence, pa->Duplicate ? " duplicate=true" : "");
    if (len <= 200 && !memchr(body, '\n', len))
        printf("     body=%.*s\n", (int)len, body);
    jsPubAck_Destroy(pa);
    return 0;
}

static void producer_usage(FILE *f)
{
    fprintf(f,
            "usage: %s --tenant T [--nats URL] [--workflow W] [--est N] [--count N]\n"
            "                      [--body TEXT] [--run-id ID] [--subject-prefix P]\n"
            "Submits runs to " FQ_SUBJECT_SUBMIT ".<T> and waits for each one's JetStream ack.\n"
            "Without --body the body is a JSON object with run_id, workflow and est_tokens;\n"
            "with --body, TEXT is the body and those fields travel in Fair-* headers.\n"
            "  --nats URL       server (default $FAIRQ_NATS_URL, else " FQC_DEFAULT_URL ")\n"
            "  --est N          declared cost in tokens (default: none, the proxy estimates)\n"
            "  --count N        runs to submit (default 1)\n"
            "  --run-id ID      the run id (with --count above 1: ID-1, ID-2, ...)\n"
            FQC_INBOX_PREFIX_HELP,
            prog);
}

/* The flags, for getopt_long. */
static const struct option producer_opts[] = {
    {"nats", required_argument, NULL, 'n'},     {"tenant", required_argument, NULL, 't'},
    {"workflow", required_argument, NULL, 'w'}, {"est", required_argument, NULL, 'e'},
    {"count", required_argument, NULL, 'c'},    {"body", required_argument, NULL, 'b'},
    {"run-id", required_argument, NULL, 'r'},   {"subject-prefix", required_argument, NULL, 'p'},
    {"inbox-prefix", required_argument, NULL, 'I'},
    {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
};

static int producer_parse(producer_cfg *c, int argc, char **argv)
{
    uint64_t v;
    int o;

    *c = (producer_cfg){.prefix = FQ_SUBJECT_SUBMIT, .count = 1};
    while ((o = getopt_long(argc, argv, "h", producer_opts, NULL)) != -1) {
        switch (o) {
        case 'n': c->url = optarg; break;
        case 't': c->tenant = optarg; break;
        case 'w': c->workflow = optarg; break;
        case 'b': c->body = optarg; break;
        case 'r': c->run_id = optarg; break;
        case 'p': c->prefix = optarg; break;
        case 'I':
            if (!fqc_inbox_prefix_set(prog, optarg))
                return -1;
            break;
        case 'e':
            if (!fqc_parse_u64(optarg, 1, UINT32_MAX, &v)) {
                fprintf(stderr, "%s: --est: '%s' is not a whole number of tokens from 1 to %u\n",
                        prog, optarg, UINT32_MAX);
                return -1;
            }
            c->est = (uint32_t)v;
            break;
        case 'c':
            if (!fqc_parse_u64(optarg, 1, 100000000, &c->count)) {
                fprintf(stderr, "%s: --count: '%s' is not a number from 1 to 100000000\n", prog, optarg);
                return -1;
            }
            break;
        case 'h': producer_usage(stdout); exit(0);
        default: producer_usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        return -1;
    }
    if (!c->tenant || !fq_tenant_id_valid(c->tenant, strlen(c->tenant))) {
        fprintf(stderr, "%s: --tenant must be " FQ_TENANT_RULE "%s\n", prog,
                c->tenant ? "" : " (it is required)");
        return -1;
    }
    if (c->workflow && !fq_msg_name_valid(c->workflow, strlen(c->workflow), FQ_WORKFLOW_MAX)) {
        fprintf(stderr, "%s: --workflow must be 1 to %d printable characters, no spaces\n", prog,
                FQ_WORKFLOW_MAX);
        return -1;
    }
    /* Room for "-<count>" after a given id. */
    if (c->run_id && !fq_msg_name_valid(c->run_id, strlen(c->run_id), FQ_RUN_ID_MAX - 10)) {
        fprintf(stderr, "%s: --run-id must be 1 to %d printable characters, no spaces\n", prog,
                FQ_RUN_ID_MAX - 10);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    producer_cfg cfg;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    char stamp[FQ_TENANT_MAX + 24];
    natsStatus s;
    int rc = 0;

    if (producer_parse(&cfg, argc, argv) != 0)
        return 2;
    s = fqc_connect(&nc, &js, fqc_url(cfg.url), prog, NULL, false);
    if (s != NATS_OK) {
        fqc_perror(prog, fqc_url(cfg.url), s);
        return 1;
    }
    /* Made-up run ids: the tenant and the time, unique enough for an example. */
    snprintf(stamp, sizeof stamp, "%s-%llx", cfg.tenant, (unsigned long long)fqc_wall_us());
    for (uint64_t i = 0; i < cfg.count && rc == 0; i++)
        rc = producer_send(js, &cfg, i, stamp);
    fqc_disconnect(nc, js);
    nats_Close();
    return rc ? 1 : 0;
}
