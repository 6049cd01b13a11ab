/* fairq-admin.c -- one admin request to the running fairq-proxy (stats, reload, tenant.get, tenant.set, explain), for hosts without the nats CLI. */
#include <getopt.h>

#include "client.h"
#include "owner.h"

#define PROG "fairq-admin"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [--nats URL] [--admin PREFIX] [--replica ID] [--time N] REQUEST [BODY]\n"
            "       " PROG " [--nats URL] [--explain PREFIX] [--replica ID] explain TENANT [RUN-ID]\n"
            "\n"
            "Sends one request to <admin>.REQUEST and prints the proxy's JSON reply.\n"
            "\n"
            "  stats                                   the stats snapshot\n"
            "  reload                                  read the config file again\n"
            "  tenant.get '{\"tenant\":\"acme\"}'          a tenant's policy and where it comes from\n"
            "  tenant.set '{\"tenant\":\"acme\",\"weight\":5}' change its override (a merge\n"
            "                                          patch: null removes a field)\n"
            "  explain acme [run-7]                    why a run of acme (or a run acme\n"
            "                                          submits now) waits: asked on\n"
            "                                          <explain>.acme, which a tenant's own\n"
            "                                          NATS user may ask too\n"
            "\n"
            "  --nats URL      NATS server URL (default $FAIRQ_NATS_URL, else %s)\n"
            "  --admin PREFIX  the proxy's subjects.admin (default " FQ_SUBJECT_ADMIN ")\n"
            "  --explain PREFIX  the proxy's subjects.explain (default " FQ_SUBJECT_EXPLAIN ")\n"
            "  --replica ID    with partitions, ask the replica ID itself, on\n"
            "                  <admin>.replica.ID.REQUEST (explain: .explain.TENANT), where\n"
            "                  a reload reloads that replica alone; without it, one\n"
            "                  replica answers (a reload reloads every replica, a\n"
            "                  tenant's stats and explain come from its partition's owner)\n"
            FQC_INBOX_PREFIX_HELP
            "  --time N        send it N times and print on stderr the round trips of\n"
            "                  the answered ones (median, least, most), in ms\n"
            "\n"
            "A busy reply (the proxy limits how often each request is served) is\n"
            "retried after the wait it names, for up to five seconds.\n"
            "\n"
            "Exit status: 0 on a reply that does not say \"ok\":false, 1 when it does or\n"
            "nothing answered (no proxy is the leader), 2 on a usage error.\n",
            FQC_DEFAULT_URL);
}

/* Send the request until it is answered other than busy (the proxy
 * rate-limits admin work and says when to ask again), for up to five
 * seconds of waiting; *rtt_ns is the answered request's round trip. */
static natsStatus ask(natsMsg **reply, int64_t *rtt_ns, natsConnection *nc, const char *subject,
                      const char *body)
{
    natsStatus s;
    for (int waited = 0;;) {
        int64_t t0 = fqc_mono_ns();
        s = natsConnection_Request(reply, nc, subject, body, (int)strlen(body), 5000);
        *rtt_ns = fqc_mono_ns() - t0;
        const char *d = s == NATS_OK ? natsMsg_GetData(*reply) : NULL;
        const char *w = d && strncmp(d, "{\"ok\":false,\"busy\":true,", 24) == 0
                            ? strstr(d, "\"retry_ms\":") : NULL;
        int ms = w ? atoi(w + 11) : 0;
        if (!w || waited >= 5000)
            return s;
        ms = ms > 0 && ms < 1000 ? ms : 100;
        natsMsg_Destroy(*reply);
        *reply = NULL;
        nats_Sleep(ms);
        waited += ms;
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *url = NULL, *admin = FQ_SUBJECT_ADMIN, *explain = FQ_SUBJECT_EXPLAIN;
    const char *replica = NULL;
    long times = 1;
    enum { OPT_NATS = 256, OPT_ADMIN, OPT_TIME, OPT_INBOX, OPT_EXPLAIN, OPT_REPLICA };
    static const struct option longopts[] = {
        {"nats", required_argument, NULL, OPT_NATS},
        {"admin", required_argument, NULL, OPT_ADMIN},
        {"explain", required_argument, NULL, OPT_EXPLAIN},
        {"replica", required_argument, NULL, OPT_REPLICA},
        {"time", required_argument, NULL, OPT_TIME},
        {"inbox-prefix", required_argument, NULL, OPT_INBOX},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_NATS: url = optarg; break;
        case OPT_ADMIN: admin = optarg; break;
        case OPT_EXPLAIN: explain = optarg; break;
        case OPT_REPLICA:
            if (!fq_owner_id_valid(optarg)) {
                fprintf(stderr, PROG ": --replica: '%s' is not a replica id\n", optarg);
                return 2;
            }
            replica = optarg;
            break;
        case OPT_INBOX:
            if (!fqc_inbox_prefix_set(PROG, optarg))
                return 2;
            break;
        case OPT_TIME:
            times = strtol(optarg, &end, 10);
            if (*end || times < 1 || times > 100000) {
                fprintf(stderr, PROG ": --time: '%s' is not a count from 1 to 100000\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    bool is_explain = optind < argc && strcmp(argv[optind], "explain") == 0;
    if (optind >= argc || argc - optind > 2 + is_explain || (is_explain && argc - optind < 2)) {
        usage(stderr);
        return 2;
    }
    const char *request = argv[optind], *body = optind + 1 < argc ? argv[optind + 1] : "";
    char subject[512], ebody[FQ_RUN_ID_MAX * 6 + 32] = "";
    char prefix[300];
    if (replica)    /* the replica's own subjects, explain's among them */
        snprintf(prefix, sizeof prefix, "%s.replica.%s", admin, replica);
    snprintf(subject, sizeof subject, "%s.%s", replica ? prefix : admin, request);
    if (is_explain) {
        /* explain TENANT [RUN-ID]: the tenant is the subject's last token,
         * the run id the body's one field (escaped: the proxy says what
         * it thinks of it). */
        if (replica)
            snprintf(subject, sizeof subject, "%s.explain.%s", prefix, argv[optind + 1]);
        else
            snprintf(subject, sizeof subject, "%s.%s", explain, argv[optind + 1]);
        body = ebody;
        if (optind + 2 < argc) {
            fq_json w;
            size_t n = 0;
            fq_json_init(&w, ebody, sizeof ebody);
            fq_json_begin_object(&w);
            fq_json_key(&w, "run_id");
            fq_json_string(&w, argv[optind + 2]);
            fq_json_end_object(&w);
            if (fq_json_finish(&w, &n) != FQ_OK) {
                fprintf(stderr, PROG ": explain: the run id is too long\n");
                return 2;
            }
        }
    }
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsStatus s = fqc_connect(&nc, &js, fqc_url(url), PROG, NULL, false);
    if (s != NATS_OK) {
        fqc_perror(PROG, "connect", s);
        return 1;
    }
    int64_t *rtt = calloc((size_t)times, sizeof *rtt);
    if (!rtt) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    natsMsg *reply = NULL;
    long answered = 0;
    for (long i = 0; i < times; i++) {
        natsMsg_Destroy(reply);
        reply = NULL;
        s = ask(&reply, &rtt[answered], nc, subject, body);
        answered += s == NATS_OK;
    }
    int rc = 1;
    if (s == NATS_OK) {
        const char *data = natsMsg_GetData(reply) ? natsMsg_GetData(reply) : "";
        printf("%.*s\n", natsMsg_GetDataLength(reply), data);
        rc = strncmp(data, "{\"ok\":false", 11) == 0 ? 1 : 0;
    } else {
        fqc_perror(PROG, subject, s);
    }
    if (times > 1 && answered) {
        qsort(rtt, (size_t)answered, sizeof *rtt, cmp_i64);
        fprintf(stderr, PROG ": %s answered %ld of %ld: round trip median %.2f ms, least %.2f, "
                "most %.2f\n", subject, answered, times, (double)rtt[answered / 2] / 1e6,
                (double)rtt[0] / 1e6, (double)rtt[answered - 1] / 1e6);
    }
    free(rtt);
    natsMsg_Destroy(reply);
    fqc_disconnect(nc, js);
    return rc;
}
