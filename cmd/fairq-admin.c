/* fairq-admin.c -- one admin request to the running fairq-proxy (stats, reload, tenant.get, tenant.set, explain, drained), and the streams' reshaping when P changes, for hosts without the nats CLI. */
#include <getopt.h>

#include "adminall.h"
#include "client.h"
#include "owner.h"

#define PROG "fairq-admin"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [--nats URL] [--admin PREFIX] [--replica ID] [--time N] REQUEST [BODY]\n"
            "       " PROG " [--nats URL] [--admin PREFIX] [--timeout MS] stats --all\n"
            "       " PROG " [--nats URL] [--explain PREFIX] [--replica ID] explain TENANT [RUN-ID]\n"
            "       " PROG " [--nats URL] [--admin PREFIX] [--api-prefix P] [--timeout MS] drained\n"
            "                  [SUBMIT DONE]\n"
            "       " PROG " [--nats URL] [--api-prefix P] reshape [SUBMIT DONE RUNS]\n"
            "\n"
            "Sends one request to <admin>.REQUEST and prints the proxy's JSON reply.\n"
            "\n"
            "  stats                                   the stats snapshot\n"
            "  stats --all                             every replica's overall section, asked\n"
            "                                          of each, and the deployment's: what\n"
            "                                          sums summed, the replicas that did not\n"
            "                                          answer named (\"partial\":true)\n"
            "  reload                                  read the config file again: with\n"
            "                                          partitions every replica, each asked\n"
            "                                          on its own subject, each answer\n"
            "                                          printed, those that did not named\n"
            "  tenant.get '{\"tenant\":\"acme\"}'          a tenant's policy and where it comes from\n"
            "  tenant.set '{\"tenant\":\"acme\",\"weight\":5}' change its override (a merge\n"
            "                                          patch: null removes a field)\n"
            "  drained [SUBMIT DONE]                   before partitions change: every replica's\n"
            "                                          stats (as stats --all) and the streams\n"
            "                                          SUBMIT and DONE (default " FQ_DEFAULT_STREAM_SUBMIT "\n"
            "                                          and " FQ_DEFAULT_STREAM_DONE "); exit 0 only when every\n"
            "                                          replica answered, none has a run queued\n"
            "                                          or in flight and both streams are empty\n"
            "  reshape [SUBMIT DONE RUNS]              when P changes, every replica stopped\n"
            "                                          after drained: seal, then delete the\n"
            "                                          streams SUBMIT and DONE (refused unless\n"
            "                                          empty, before and after the seal;\n"
            "                                          fairq makes them again with the new\n"
            "                                          subjects), and give the journal RUNS\n"
            "                                          (default " FQ_DEFAULT_STREAM_RUNS ") the subject\n"
            "                                          <its first>.* after its first when it\n"
            "                                          has none (P = 1 to P > 1); again does\n"
            "                                          nothing more\n"
            "  explain acme [run-7]                    why a run of acme (or a run acme\n"
            "                                          submits now) waits: asked on\n"
            "                                          <explain>.acme, which a tenant's own\n"
            "                                          NATS user may ask too\n"
            "\n"
            "  --nats URL      NATS server URL (default $FAIRQ_NATS_URL, else %s)\n"
            "  --admin PREFIX  the proxy's subjects.admin (default " FQ_SUBJECT_ADMIN ")\n"
            "  --explain PREFIX  the proxy's subjects.explain (default " FQ_SUBJECT_EXPLAIN ")\n"
            "  --replica ID    ask the replica ID itself, on <admin>.replica.ID.REQUEST\n"
            "                  (explain: .explain.TENANT), where a reload reloads that\n"
            "                  replica alone; without it, one replica answers (a tenant's\n"
            "                  stats and explain come from its partition's owner)\n"
            "  --timeout MS    stats --all, reload and drained: how long to wait for the\n"
            "                  replicas' answers (default 2000)\n"
            "  --api-prefix P  drained, reshape: the JetStream API prefix the streams are\n"
            "                  asked under (default $JS.API); the shipped server config\n"
            "                  gives the admin FAIRQ's under JS.FAIRQ.API\n"
            FQC_INBOX_PREFIX_HELP
            "  --time N        send it N times and print on stderr the round trips of\n"
            "                  the answered ones (median, least, most), in ms\n"
            "\n"
            "A busy reply (the proxy limits how often each request is served) is\n"
            "retried after the wait it names, for up to five seconds.\n"
            "\n"
            "Exit status: 0 on a reply that does not say \"ok\":false, 1 when it does or\n"
            "nothing answered (no proxy is the leader), 2 on a usage error. Asked of\n"
            "every replica, \"ok\" is false when one did not answer or said it.\n"
            "drained: 0 when drained, else 1 (\"drained\":false says why in its counts).\n"
            "reshape: 0 when the streams are as P > 1 needs them, else 1 (said why).\n",
            FQC_DEFAULT_URL);
}

/* Send the request until it is answered other than busy (the proxy
 * rate-limits admin work and says when to ask again), for up to five
 * seconds of waiting; *rtt_ns is the answered request's round trip. */
static natsStatus ask(natsMsg **reply, int64_t *rtt_ns, natsConnection *nc, const char *subject,
                      const char *body, int timeout_ms)
{
    natsStatus s;
    for (int waited = 0;;) {
        int64_t t0 = fqc_mono_ns();
        s = natsConnection_Request(reply, nc, subject, body, (int)strlen(body), timeout_ms);
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

/* Send request to each replica g names, at once, on its own subject,
 * each with its own reply subject <inbox>.<index>; learn more replicas
 * from the answers and ask those too, until every one named has answered
 * or failed, or timeout_ms has passed since start_ns. */
static void gather(fqa_all *g, natsConnection *nc, const char *admin, const char *request,
                   const char *body, int64_t start_ns, int timeout_ms)
{
    char inbox[256], filter[300], subject[512], reply[300];
    natsSubscription *sub = NULL;
    natsStatus s = fqc_inbox(inbox, sizeof inbox);
    snprintf(filter, sizeof filter, "%s.*", inbox);
    if (s == NATS_OK)
        s = natsConnection_SubscribeSync(&sub, nc, filter);
    if (s != NATS_OK) {
        fqc_perror(PROG, filter, s);
        return;
    }
    for (;;) {
        size_t idx;
        const char *id;
        while (fqa_all_next(g, &idx, &id)) {
            snprintf(subject, sizeof subject, "%s.replica.%s.%s", admin, id, request);
            snprintf(reply, sizeof reply, "%s.%zu", inbox, idx);
            s = natsConnection_PublishRequestString(nc, subject, reply, body);
            if (s != NATS_OK)
                fqa_all_failed(g, idx, natsStatus_GetText(s));
        }
        int64_t left = timeout_ms - (fqc_mono_ns() - start_ns) / FQC_NS_PER_MS;
        if (fqa_all_settled(g) || left <= 0)
            break;
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, sub, left) != NATS_OK)
            break;      /* the time is up */
        const char *tail = natsMsg_GetSubject(m) + strlen(inbox) + 1;
        char *end;
        idx = strtoul(tail, &end, 10);
        if (*end)
            ;   /* not one of ours */
        else if (natsMsg_IsNoResponders(m))
            fqa_all_failed(g, idx, "no responders: nothing subscribes to its subject (it "
                           "stopped, or is not a replica of this deployment)");
        else if (!fqa_all_answer(g, idx, natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m)))
            fqa_all_failed(g, idx, "its answer is not a JSON object");
        natsMsg_Destroy(m);
    }
    natsSubscription_Destroy(sub);
}

/* A stats reply from any replica, the one the queue group picks, maybe
 * one that hangs: asked again, a quarter of the time at a time, while
 * time is left of timeout_ms from t0. */
static natsStatus ask_any(natsMsg **reply, natsConnection *nc, const char *subject, int64_t t0,
                          int timeout_ms)
{
    int per_try = timeout_ms >= 400 ? timeout_ms / 4 : timeout_ms;
    int64_t rtt;
    natsStatus s;
    for (int64_t left = timeout_ms;;) {
        s = ask(reply, &rtt, nc, subject, "{\"limit\":0}", (int)(per_try < left ? per_try : left));
        left = timeout_ms - (fqc_mono_ns() - t0) / FQC_NS_PER_MS;
        if (s != NATS_TIMEOUT || left <= 0)
            return s;
    }
}

/* request asked of every replica (gather), those named by a stats answer
 * from any of them first: the answers, or NULL when none answered (said).
 * *named is false when that answer named no replica (a proxy older than
 * this program): then none was asked. */
static fqa_all *gather_all(bool *named, natsConnection *nc, const char *admin,
                           const char *request, int timeout_ms)
{
    bool stats = strcmp(request, FQ_ADMIN_STATS) == 0;
    const char *body = stats ? "{\"limit\":0}" : "";
    char subject[512];
    int64_t t0 = fqc_mono_ns();
    natsMsg *reply = NULL;
    snprintf(subject, sizeof subject, "%s.%s", admin, FQ_ADMIN_STATS);
    natsStatus s = ask_any(&reply, nc, subject, t0, timeout_ms);
    if (s != NATS_OK) {
        fqc_perror(PROG, subject, s);
        return NULL;
    }
    fqa_all *g = fqa_all_create();
    if (!g) {
        natsMsg_Destroy(reply);
        fprintf(stderr, PROG ": out of memory\n");
        return NULL;
    }
    const char *data = natsMsg_GetData(reply);
    size_t len = (size_t)natsMsg_GetDataLength(reply);
    *named = stats ? fqa_all_answer(g, FQA_ANY, data, len) : fqa_all_learn(g, data, len) > 0;
    natsMsg_Destroy(reply);
    if (*named)
        gather(g, nc, admin, request, body, t0, timeout_ms);
    return g;
}

/* stats --all, or reload without --replica: request asked of every
 * replica (gather_all). Prints the gathered reply; the exit status. A
 * proxy whose answer names no replica (older than this program) gets the
 * request once, as without --all. */
static int ask_all(natsConnection *nc, const char *admin, const char *request, int timeout_ms)
{
    bool named = false;
    fqa_all *g = gather_all(&named, nc, admin, request, timeout_ms);
    if (!g)
        return 1;
    int rc = 1;
    if (!named) {
        bool stats = strcmp(request, FQ_ADMIN_STATS) == 0;
        char subject[512];
        int64_t rtt;
        natsMsg *reply = NULL;
        fprintf(stderr, PROG ": the proxy's answer names no replica: asked once\n");
        snprintf(subject, sizeof subject, "%s.%s", admin, request);
        natsStatus s = ask(&reply, &rtt, nc, subject, stats ? "{\"limit\":0}" : "", timeout_ms);
        if (s == NATS_OK) {
            const char *data = natsMsg_GetData(reply) ? natsMsg_GetData(reply) : "";
            printf("%.*s\n", natsMsg_GetDataLength(reply), data);
            rc = strncmp(data, "{\"ok\":false", 11) == 0;
        } else {
            fqc_perror(PROG, subject, s);
        }
        natsMsg_Destroy(reply);
        fqa_all_destroy(g);
        return rc;
    }
    char why[64];
    snprintf(why, sizeof why, "no answer within %d ms", timeout_ms);
    char *out = fqa_all_json(g, strcmp(request, FQ_ADMIN_STATS) == 0, why);
    if (out) {
        printf("%s\n", out);
        rc = strncmp(out, "{\"ok\":true", 10) != 0;
    }
    free(out);
    fqa_all_destroy(g);
    return rc;
}

/* The messages stream holds now, or -1 (said) when it cannot be read,
 * asked under api_prefix (NULL: $JS.API). */
static int64_t stream_msgs(jsCtx *js, const char *api_prefix, const char *stream)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
    if (s != NATS_OK) {
        fqc_perror(PROG, stream, s);
        /* a request the server refuses this user is dropped: a timeout */
        fprintf(stderr, PROG ": %s's info was asked on %s.STREAM.INFO.%s (--api-prefix; the "
                "shipped server config gives the admin JS.FAIRQ.API)\n", stream,
                api_prefix ? api_prefix : "$JS.API", stream);
        return -1;
    }
    int64_t n = (int64_t)si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
}

/* drained: every replica's stats (gather_all) and the submit and done
 * streams' messages; prints the reply, 0 only when the deployment is
 * drained (fqa_all_drained). */
static int ask_drained(natsConnection *nc, jsCtx *js, const char *api_prefix, const char *admin,
                       int timeout_ms, const char *submit, const char *done)
{
    bool named = false;
    fqa_all *g = gather_all(&named, nc, admin, FQ_ADMIN_STATS, timeout_ms);
    if (!g)
        return 1;
    if (!named) {
        fprintf(stderr, PROG ": the proxy's answer names no replica: drained cannot tell\n");
        fqa_all_destroy(g);
        return 1;
    }
    char why[64];
    snprintf(why, sizeof why, "no answer within %d ms", timeout_ms);
    bool drained = false;
    char *out = fqa_all_drained(&drained, g, stream_msgs(js, api_prefix, submit),
                                stream_msgs(js, api_prefix, done), why);
    if (out)
        printf("%s\n", out);
    else
        fprintf(stderr, PROG ": out of memory\n");
    free(out);
    fqa_all_destroy(g);
    return drained ? 0 : 1;
}

/* reshape, step 4 of docs/partitions.md "Changing P": stream (SUBMIT or
 * DONE) checked to hold no message, then (seal) sealed, then (delete)
 * checked again and deleted if sealed; absent already is fine; into *gone whether it
 * was deleted. The seal is why nothing is lost: producers may go on
 * publishing while P changes, and a publish stored between the check and
 * the delete would be acknowledged and then deleted with the stream; a
 * sealed stream refuses it (an error, not an acknowledgement: the producer
 * retries into the stream fairq makes again). 0, else 1 (said). */
static int reshape_delete(bool *gone, jsCtx *js, const char *stream, bool seal, bool delete)
{
    jsStreamInfo *si = NULL, *up = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
    *gone = false;
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return 0;
    if (s != NATS_OK) {
        fqc_perror(PROG, stream, s);
        return 1;
    }
    uint64_t msgs = si->State.Msgs;
    bool sealed = si->Config->Sealed;
    if (seal && !msgs && !sealed) {
        si->Config->Sealed = true;
        s = js_UpdateStream(&up, js, si->Config, NULL, &jerr);
        jsStreamInfo_Destroy(up);
        if (s != NATS_OK) {
            jsStreamInfo_Destroy(si);
            fqc_perror(PROG, stream, s);
            return 1;
        }
    }
    jsStreamInfo_Destroy(si);
    if (delete && !sealed)
        return 0;       /* not sealed: what stopped the change said so */
    if (msgs && sealed) {
        /* stored after the first check, before the seal: acknowledged to
         * their producers, and a sealed stream can neither be unsealed nor
         * drained (its acks delete nothing) */
        fprintf(stderr, PROG ": %s is sealed and holds %" PRIu64 " messages acknowledged to "
                "their producers: not deleted (republish each to its subject once fairq "
                "runs at the new P, then delete the stream)\n", stream, msgs);
        return 1;
    }
    if (msgs) {
        fprintf(stderr, PROG ": %s holds %" PRIu64 " messages: not deleted (drain first: "
                "fairq-admin drained)\n", stream, msgs);
        return 1;
    }
    if (!delete)
        return 0;
    if ((s = js_DeleteStream(js, stream, NULL, &jerr)) != NATS_OK) {
        fqc_perror(PROG, stream, s);
        return 1;
    }
    *gone = true;
    return 0;
}

/* reshape: the journal runs given <first>.* after its first subject when
 * it has no such subject (P = 1's journal, a P > 1 replica's per-partition
 * subjects); into *added whether it did. 0, else 1 (said). */
static int reshape_journal(bool *added, jsCtx *js, const char *runs)
{
    jsStreamInfo *si = NULL, *up = NULL;
    jsErrCode jerr = 0;
    *added = false;
    natsStatus s = js_GetStreamInfo(&si, js, runs, NULL, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return 0;       /* fairq makes it with both */
    if (s != NATS_OK) {
        fqc_perror(PROG, runs, s);
        return 1;
    }
    jsStreamConfig *c = si->Config;
    char want[300] = "";
    if (c->SubjectsLen >= 1)
        snprintf(want, sizeof want, "%s.*", c->Subjects[0]);
    bool has = !want[0] || strstr(want, "*.*") || strchr(c->Subjects[0], '>');
    for (int i = 0; i < c->SubjectsLen && !has; i++)
        has = strcmp(c->Subjects[i], want) == 0;
    int rc = 0;
    if (!has) {
        const char **subjects = calloc((size_t)c->SubjectsLen + 1, sizeof *subjects);
        if (!subjects) {
            jsStreamInfo_Destroy(si);
            fprintf(stderr, PROG ": out of memory\n");
            return 1;
        }
        memcpy(subjects, c->Subjects, (size_t)c->SubjectsLen * sizeof *subjects);
        subjects[c->SubjectsLen] = want;    /* after the first: it stays first */
        const char **had = c->Subjects;
        c->Subjects = subjects;
        c->SubjectsLen++;
        s = js_UpdateStream(&up, js, c, NULL, &jerr);
        c->Subjects = had;
        c->SubjectsLen--;
        free(subjects);
        if (s != NATS_OK) {
            fqc_perror(PROG, runs, s);
            rc = 1;
        }
        *added = rc == 0;
    }
    jsStreamInfo_Destroy(up);
    jsStreamInfo_Destroy(si);
    return rc;
}

/* reshape: SUBMIT and DONE sealed and deleted when empty, RUNS given its
 * partitions' subject; prints what it did. The exit status. */
static int reshape(jsCtx *js, const char *submit, const char *done, const char *runs)
{
    bool sg = false, dg = false, added = false;
    /* both checked before either goes: one that still holds a run leaves
     * the deployment as it was */
    int rc = reshape_delete(&sg, js, submit, false, false) |
             reshape_delete(&dg, js, done, false, false);
    /* both sealed (each seen empty again first) before either goes, then
     * each sealed one seen empty once more and deleted; also when the
     * other stopped the change: a sealed, empty stream holds and takes
     * nothing (producers' submits would fail for ever), and fairq makes
     * it again at its start */
    if (!rc)
        rc = reshape_delete(&sg, js, submit, true, false) |
             reshape_delete(&dg, js, done, true, false);
    rc |= reshape_delete(&sg, js, submit, false, true) |
          reshape_delete(&dg, js, done, false, true);
    if (!rc)
        rc = reshape_journal(&added, js, runs);
    char list[600];
    snprintf(list, sizeof list, "%s%s%s%s%s%s%s", sg ? "\"" : "", sg ? submit : "",
             sg ? "\"" : "", sg && dg ? "," : "", dg ? "\"" : "", dg ? done : "",
             dg ? "\"" : "");
    printf("{\"ok\":%s,\"deleted\":[%s],\"journal_subject_added\":%s}\n",
           rc ? "false" : "true", list, added ? "true" : "false");
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* What the command line says, flags first. */
typedef struct admin_cli {
    const char *url, *admin, *explain;
    const char *replica;        /* --replica, or NULL */
    const char *api_prefix;     /* --api-prefix (drained's stream info), or NULL: $JS.API */
    long times, timeout_ms;     /* --time, --timeout */
    bool all;                   /* --all */
} admin_cli;

/* The flags into a; optind is then at the request. -1: exit with *rc
 * (--help, or a usage error said). */
static int admin_flags(admin_cli *a, int *rc, int argc, char **argv)
{
    enum { OPT_NATS = 256, OPT_ADMIN, OPT_TIME, OPT_INBOX, OPT_EXPLAIN, OPT_REPLICA, OPT_ALL,
           OPT_TIMEOUT, OPT_API_PREFIX };
    static const struct option longopts[] = {
        {"nats", required_argument, NULL, OPT_NATS},
        {"admin", required_argument, NULL, OPT_ADMIN},
        {"explain", required_argument, NULL, OPT_EXPLAIN},
        {"replica", required_argument, NULL, OPT_REPLICA},
        {"time", required_argument, NULL, OPT_TIME},
        {"all", no_argument, NULL, OPT_ALL},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"inbox-prefix", required_argument, NULL, OPT_INBOX},
        {"api-prefix", required_argument, NULL, OPT_API_PREFIX},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    char *end;
    *rc = 2;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_NATS: a->url = optarg; break;
        case OPT_ADMIN: a->admin = optarg; break;
        case OPT_EXPLAIN: a->explain = optarg; break;
        case OPT_REPLICA:
            if (!fq_owner_id_valid(optarg)) {
                fprintf(stderr, PROG ": --replica: '%s' is not a replica id\n", optarg);
                return -1;
            }
            a->replica = optarg;
            break;
        case OPT_INBOX:
            if (!fqc_inbox_prefix_set(PROG, optarg))
                return -1;
            break;
        case OPT_TIME:
            a->times = strtol(optarg, &end, 10);
            if (*end || a->times < 1 || a->times > 100000) {
                fprintf(stderr, PROG ": --time: '%s' is not a count from 1 to 100000\n", optarg);
                return -1;
            }
            break;
        case OPT_ALL: a->all = true; break;
        case OPT_API_PREFIX:
            if (!*optarg) {
                fprintf(stderr, PROG ": --api-prefix: empty\n");
                return -1;
            }
            a->api_prefix = optarg;
            break;
        case OPT_TIMEOUT:
            a->timeout_ms = strtol(optarg, &end, 10);
            if (*end || a->timeout_ms < 1 || a->timeout_ms > 600000) {
                fprintf(stderr, PROG ": --timeout: '%s' is not ms from 1 to 600000\n", optarg);
                return -1;
            }
            break;
        case 'h': usage(stdout); *rc = 0; return -1;
        default: usage(stderr); return -1;
        }
    }
    return 0;
}

/* Where request goes (into subject) and what it sends (*body; explain's
 * is written into ebody): explain TENANT [RUN-ID] asks on the tenant's
 * subject with the run id the body's one field (escaped: the proxy says
 * what it thinks of it). 0, or 2 when the run id does not fit. */
static int admin_target(char *subject, size_t cap, char *ebody, size_t ecap, const char **body,
                        const admin_cli *a, const char *request, int argc, char **argv)
{
    char prefix[300];
    if (a->replica)     /* the replica's own subjects, explain's among them */
        snprintf(prefix, sizeof prefix, "%s.replica.%s", a->admin, a->replica);
    snprintf(subject, cap, "%s.%s", a->replica ? prefix : a->admin, request);
    if (strcmp(request, "explain") != 0)
        return 0;
    if (a->replica)
        snprintf(subject, cap, "%s.explain.%s", prefix, argv[optind + 1]);
    else
        snprintf(subject, cap, "%s.%s", a->explain, argv[optind + 1]);
    *body = ebody;
    if (optind + 2 < argc) {
        fq_json w;
        size_t n = 0;
        fq_json_init(&w, ebody, ecap);
        fq_json_begin_object(&w);
        fq_json_key(&w, "run_id");
        fq_json_string(&w, argv[optind + 2]);
        fq_json_end_object(&w);
        if (fq_json_finish(&w, &n) != FQ_OK) {
            fprintf(stderr, PROG ": explain: the run id is too long\n");
            return 2;
        }
    }
    return 0;
}

/* Ask subject times times; print the last reply, and with --time the
 * answered ones' round trips. The exit status. */
static int ask_times(natsConnection *nc, const char *subject, const char *body, long times)
{
    int64_t *rtt = calloc((size_t)times, sizeof *rtt);
    if (!rtt) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    natsMsg *reply = NULL;
    natsStatus s = NATS_OK;
    long answered = 0;
    for (long i = 0; i < times; i++) {
        natsMsg_Destroy(reply);
        reply = NULL;
        s = ask(&reply, &rtt[answered], nc, subject, body, 5000);
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
    return rc;
}

int main(int argc, char **argv)
{
    admin_cli a = {.admin = FQ_SUBJECT_ADMIN, .explain = FQ_SUBJECT_EXPLAIN, .times = 1,
                   .timeout_ms = 2000};
    int rc;
    if (admin_flags(&a, &rc, argc, argv) != 0)
        return rc;
    bool is_explain = optind < argc && strcmp(argv[optind], "explain") == 0;
    bool is_drained = optind < argc && strcmp(argv[optind], "drained") == 0;
    bool is_reshape = optind < argc && strcmp(argv[optind], "reshape") == 0;
    if (optind >= argc || argc - optind > 2 + is_explain + is_drained + 2 * is_reshape ||
        (is_explain && argc - optind < 2) || (is_drained && argc - optind == 2) ||
        (is_reshape && argc - optind != 1 && argc - optind != 4)) {
        usage(stderr);
        return 2;
    }
    const char *request = argv[optind], *body = optind + 1 < argc ? argv[optind + 1] : "";
    /* stats --all, and reload of the whole deployment, ask every replica */
    bool every = !a.replica && a.times == 1 && (a.all || strcmp(request, FQ_ADMIN_RELOAD) == 0);
    if (a.all && (strcmp(request, FQ_ADMIN_STATS) != 0 || a.replica || a.times > 1 ||
                  optind + 1 < argc)) {
        fprintf(stderr, PROG ": --all: only stats, without a body, --replica or --time\n");
        return 2;
    }
    if (a.api_prefix && !is_drained && !is_reshape) {
        fprintf(stderr, PROG ": --api-prefix: only with drained or reshape\n");
        return 2;
    }
    if ((is_drained || is_reshape) && (a.all || a.replica || a.times > 1)) {
        fprintf(stderr, PROG ": %s: without --all, --replica or --time\n", request);
        return 2;
    }
    char subject[512], ebody[FQ_RUN_ID_MAX * 6 + 32] = "";
    if (!is_drained && !is_reshape && admin_target(subject, sizeof subject, ebody, sizeof ebody, &body, &a, request, argc,
                     argv) != 0)
        return 2;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Prefix = a.api_prefix;
    natsStatus s = fqc_connect(&nc, &js, fqc_url(a.url), PROG, a.api_prefix ? &jo : NULL, false);
    if (s != NATS_OK) {
        fqc_perror(PROG, "connect", s);
        return 1;
    }
    if (is_reshape)
        rc = reshape(js, argc - optind == 4 ? argv[optind + 1] : FQ_DEFAULT_STREAM_SUBMIT,
                     argc - optind == 4 ? argv[optind + 2] : FQ_DEFAULT_STREAM_DONE,
                     argc - optind == 4 ? argv[optind + 3] : FQ_DEFAULT_STREAM_RUNS);
    else if (is_drained)
        rc = ask_drained(nc, js, a.api_prefix, a.admin, (int)a.timeout_ms,
                         argc - optind == 3 ? argv[optind + 1] : FQ_DEFAULT_STREAM_SUBMIT,
                         argc - optind == 3 ? argv[optind + 2] : FQ_DEFAULT_STREAM_DONE);
    else
        rc = every ? ask_all(nc, a.admin, request, (int)a.timeout_ms)
                   : ask_times(nc, subject, body, a.times);
    fqc_disconnect(nc, js);
    return rc;
}
