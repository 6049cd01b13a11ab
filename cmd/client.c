/* client.c -- what fairq's client programs share (client.h says what and why). */
#include "client.h"

int64_t fqc_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t fqc_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * FQC_NS_PER_S + ts.tv_nsec;
}

void fqc_sleep_until(int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / FQC_NS_PER_S,
                          .tv_nsec = deadline_ns % FQC_NS_PER_S};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/* Set by SIGINT and SIGTERM; the programs' loops poll it. */
static volatile sig_atomic_t fqc_stop;

bool fqc_stopping(void) { return fqc_stop != 0; }

static void fqc_on_signal(int sig)
{
    (void)sig;
    fqc_stop = 1;
}

void fqc_pub_perror(const char *prog, const char *what, const jsPubAckErr *pae)
{
    fprintf(stderr, "%s: %s failed: %s\n", prog, what,
            pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err));
}

void fqc_on_pub_error(jsCtx *js, jsPubAckErr *pae, void *closure)
{
    fqc_pub_errors *e = closure;
    (void)js;
    if (atomic_fetch_add(&e->n, 1) == 0)
        fqc_pub_perror(e->prog, e->what, pae);
}

void fqc_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fqc_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void fqc_perror(const char *prog, const char *what, natsStatus s)
{
    natsStatus last_s = NATS_OK;
    const char *last = nats_GetLastError(&last_s);

    if (last && *last && last_s == s && !strstr(last, natsStatus_GetText(s)))
        fprintf(stderr, "%s: %s: %s (%s)\n", prog, what, natsStatus_GetText(s), last);
    else
        fprintf(stderr, "%s: %s: %s\n", prog, what, natsStatus_GetText(s));
}

const char *fqc_url(const char *flag)
{
    const char *env = getenv("FAIRQ_NATS_URL");
    if (flag && *flag)
        return flag;
    return env && *env ? env : FQC_DEFAULT_URL;
}

/* The inbox prefix of every connection this program makes; NULL: nats.c's
 * "_INBOX". */
static const char *fqc_inbox_prefix;

bool fqc_inbox_prefix_set(const char *prog, const char *p)
{
    bool ok = *p && p[strlen(p) - 1] != '.' && *p != '.' && !strstr(p, "..") &&
              !strpbrk(p, "*> \t\r\n");
    if (!ok) {
        fprintf(stderr, "%s: --inbox-prefix: '%s' is not a subject without wildcards\n", prog, p);
        return false;
    }
    fqc_inbox_prefix = p;
    return true;
}

natsStatus fqc_inbox(char *buf, size_t cap)
{
    natsInbox *inbox = NULL;
    natsStatus s = natsInbox_Create(&inbox);
    if (s != NATS_OK)
        return s;
    const char *unique = strchr((const char *)inbox, '.');
    const char *prefix = fqc_inbox_prefix;
    int k = snprintf(buf, cap, "%s.%s", prefix ? prefix : FQ_INBOX_PREFIX,
                     unique ? unique + 1 : (const char *)inbox);
    natsInbox_Destroy(inbox);
    return k > 0 && (size_t)k < cap ? NATS_OK : NATS_ERR;
}

/* nats.c's asynchronous errors: a publish or subscription the server
 * refused for want of a permission is said at once (the call that made it
 * only times out), with the subject; closure is the program's name. */
static void fqc_on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus err,
                               void *closure)
{
    const char *text = NULL;
    (void)sub;
    if (err != NATS_NOT_PERMITTED)
        return;
    natsConnection_GetLastError(nc, &text);
    fprintf(stderr, "%s: the server refused: %s\n", (const char *)closure,
            text && *text ? text : "a permissions violation");
}

natsStatus fqc_connect(natsConnection **nc, jsCtx **js, const char *url,
                       const char *name, jsOptions *jo, bool send_asap)
{
    natsOptions *o = NULL;
    natsStatus s = natsOptions_Create(&o);

    *nc = NULL;
    *js = NULL;
    if (s == NATS_OK) s = natsOptions_SetURL(o, url);
    if (s == NATS_OK) s = natsOptions_SetName(o, name);
    if (s == NATS_OK) s = natsOptions_SetTimeout(o, 2000);
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(o, -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(o, 250);
    if (s == NATS_OK) s = natsOptions_SetSendAsap(o, send_asap);
    if (s == NATS_OK) s = natsOptions_SetErrorHandler(o, fqc_on_async_error, (void *)name);
    if (s == NATS_OK && fqc_inbox_prefix)
        s = natsOptions_SetCustomInboxPrefix(o, fqc_inbox_prefix);
    /* A credentials file (a user JWT and its seed) for servers in operator
     * mode: $FAIRQ_NATS_CREDS, so that no secret is on the command line. */
    const char *creds = getenv("FAIRQ_NATS_CREDS");
    if (s == NATS_OK && creds && *creds)
        s = natsOptions_SetUserCredentialsFromFiles(o, creds, NULL);
    if (s == NATS_OK) s = natsConnection_Connect(nc, o);
    if (s == NATS_OK) s = natsConnection_JetStream(js, *nc, jo);
    if (s != NATS_OK) {
        natsConnection_Destroy(*nc);
        *nc = NULL;
    }
    natsOptions_Destroy(o);
    return s;
}

void fqc_disconnect(natsConnection *nc, jsCtx *js)
{
    jsCtx_Destroy(js);
    if (nc)
        natsConnection_Close(nc);
    natsConnection_Destroy(nc);
}

/* 1 if the stream exists, 0 if not, -1 on another error (printed). */
static int fqc_stream_exists(jsCtx *js, const char *prog, const char *stream)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);

    jsStreamInfo_Destroy(si);
    if (s == NATS_OK)
        return 1;
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return 0;
    fqc_perror(prog, stream, s);
    return -1;
}

int fqc_streams_require(jsCtx *js, const char *prog, const char *const *names,
                        size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int e = fqc_stream_exists(js, prog, names[i]);
        if (e < 0)
            return -1;
        if (e == 0) {
            fprintf(stderr,
                    "%s: stream %s does not exist: start fairq-proxy first, it creates the "
                    "fairq streams (or fairq-relay, for the FIFO baseline)\n",
                    prog, names[i]);
            return -1;
        }
    }
    return 0;
}

/* Create one stream unless it exists. */
static int fqc_stream_ensure(jsCtx *js, const char *prog, jsStreamConfig *cfg)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    int e = fqc_stream_exists(js, prog, cfg->Name);
    natsStatus s;

    if (e != 0)
        return e > 0 ? 0 : -1;
    s = js_AddStream(&si, js, cfg, NULL, &jerr);
    jsStreamInfo_Destroy(si);
    if (s == NATS_OK || jerr == JSStreamNameExistErr)
        return 0;
    fqc_perror(prog, cfg->Name, s);
    return -1;
}

int fqc_streams_ensure(jsCtx *js, const char *prog, int replicas)
{
    const char *submit[] = {FQ_SUBJECT_SUBMIT ".*"};
    const char *dispatch[] = {FQ_SUBJECT_DISPATCH};
    const char *done[] = {FQ_SUBJECT_DONE ".*"};
    const char *rejected[] = {FQ_SUBJECT_REJECTED ".*"};
    const int64_t ms = FQC_NS_PER_MS;
    jsStreamConfig c[4];

    for (int i = 0; i < 4; i++) {
        jsStreamConfig_Init(&c[i]);
        c[i].Storage = js_FileStorage;
        c[i].Replicas = replicas;
    }
    c[0].Name = FQ_DEFAULT_STREAM_SUBMIT;
    c[0].Subjects = submit;
    c[0].Retention = js_WorkQueuePolicy;
    c[0].AllowDirect = true;
    c[0].MaxMsgsPerSubject = FQ_DEFAULT_SUBMIT_MAX_MSGS_PER_TENANT;
    c[0].MaxBytes = (int64_t)FQ_DEFAULT_SUBMIT_MAX_BYTES;
    c[0].Discard = js_DiscardNew;
    c[0].DiscardNewPerSubject = true;
    c[1].Name = FQ_DEFAULT_STREAM_DISPATCH;
    c[1].Subjects = dispatch;
    c[1].Retention = js_LimitsPolicy;
    c[1].Duplicates = FQ_DEFAULT_DUPLICATE_WINDOW_MS * ms;
    c[1].MaxAge = 3600 * 1000 * ms;
    c[2].Name = FQ_DEFAULT_STREAM_DONE;
    c[2].Subjects = done;
    c[2].Retention = js_WorkQueuePolicy;
    c[3].Name = FQ_DEFAULT_STREAM_REJECTED;
    c[3].Subjects = rejected;
    c[3].Retention = js_LimitsPolicy;
    c[3].MaxAge = (int64_t)FQ_DEFAULT_REJECTED_MAX_AGE_MS * ms;
    c[3].MaxMsgsPerSubject = FQ_DEFAULT_REJECTED_MAX_MSGS_PER_TENANT;
    c[3].MaxBytes = (int64_t)FQ_DEFAULT_REJECTED_MAX_BYTES;
    for (int i = 0; i < 4; i++) {
        c[i].SubjectsLen = 1;
        if (fqc_stream_ensure(js, prog, &c[i]) != 0)
            return -1;
    }
    return 0;
}

natsStatus fqc_pull_open(fqc_pull *p, natsConnection *nc, const char *api_prefix,
                         const char *stream, const char *consumer)
{
    char inbox[sizeof p->pull.inbox];
    int ns = NATS_ERR;

    memset(p, 0, sizeof *p);
    natsStatus s = fqc_inbox(inbox, sizeof inbox);
    if (s != NATS_OK)
        return s;
    if (fq_nio_pull_open(&p->pull, nc, inbox, api_prefix, stream, consumer, &ns) != FQ_OK)
        return (natsStatus)ns;
    p->nc = nc;
    return NATS_OK;
}

void fqc_pull_close(fqc_pull *p)
{
    fq_nio_pull_close(&p->pull);
}

/* Up to max deliveries into out[]: what the consumer has now, or else the
 * first to come within timeout_ms (one request with no_wait and expires:
 * nats-server 2.9 then answers at once with what it has, or waits for the
 * first message and ends the request after it). Deliveries left from an
 * earlier request are handed out first, without a new request. *n is how
 * many; NATS_TIMEOUT when none came. The caller owns out[0..*n). */
static natsStatus fqc_pull_fetch(fqc_pull *p, natsMsg **out, int max, int64_t timeout_ms, int *n)
{
    int ns = NATS_ERR;

    *n = fq_nio_pull_queued(&p->pull, (void **)out, max);
    if (*n > 0)
        return NATS_OK;
    if (timeout_ms < 1)
        timeout_ms = 1;
    if (fq_nio_pull_request(&p->pull, (void **)out, max, true, timeout_ms, n, &ns) != FQ_OK)
        return (natsStatus)ns;
    return *n ? NATS_OK : NATS_TIMEOUT;
}

bool fqc_pull_next(fqc_pull *p, const char *prog, natsMsg **out, int max,
                   int64_t timeout_ms, int pause_ms, int *n)
{
    natsStatus s = fqc_pull_fetch(p, out, max, timeout_ms, n);

    if (s == NATS_OK)
        return true;
    if (s != NATS_TIMEOUT) {
        fqc_perror(prog, "fetch", s);
        fqc_sleep_until(fqc_mono_ns() + pause_ms * FQC_NS_PER_MS);
    }
    return false;
}

natsStatus fqc_ack(fqc_pull *p, natsMsg *m, const char *kind)
{
    return natsConnection_PublishString(p->nc, natsMsg_GetReply(m), kind);
}

natsStatus fqc_ack_sync(fqc_pull *p, natsMsg *m, int64_t timeout_ms)
{
    natsMsg *r = NULL;
    natsStatus s = natsConnection_RequestString(&r, p->nc, natsMsg_GetReply(m), "+ACK", timeout_ms);
    natsMsg_Destroy(r);
    return s;
}

natsStatus fqc_msg_meta(natsMsg *m, uint64_t *stream_seq, int64_t *stored_ns)
{
    jsMsgMetaData *meta = NULL;
    natsStatus s = natsMsg_GetMetaData(&meta, m);

    if (s == NATS_OK) {
        *stream_seq = meta->Sequence.Stream;
        *stored_ns = meta->Timestamp;
    }
    jsMsgMetaData_Destroy(meta);
    return s;
}

const char *fqc_hdr(natsMsg *m, const char *key)
{
    const char *v = NULL;
    return natsMsgHeader_Get(m, key, &v) == NATS_OK ? v : NULL;
}

bool fqc_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (!s || !*s)
        return false;
    for (; *s; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool fqc_parse_double(const char *s, double min, double max, double *out)
{
    char *end = NULL;
    double v;

    if (!s || !*s)
        return false;
    errno = 0;
    v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool fqc_hdr_u64(natsMsg *m, const char *key, uint64_t max, uint64_t *out)
{
    return fqc_parse_u64(fqc_hdr(m, key), 0, max, out);
}

natsStatus fqc_hdr_set_u64(natsMsg *m, const char *key, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    return natsMsgHeader_Set(m, key, num);
}

const char *fqc_last_token(const char *subject)
{
    const char *dot = strrchr(subject, '.');
    return dot ? dot + 1 : subject;
}

/* One entry of a cost mix, "[workflow=]tokens[:weight]" in item (which
 * it cuts up), into c's entry c->n (not counted yet) and *w. */
static bool fqc_cost_entry(fqc_costs *c, double *w, char *item, uint32_t max_tokens, char *err,
                           size_t errlen)
{
    char *name = NULL, *tok = item, *weight, *eq;
    uint64_t t;
    if ((eq = strchr(item, '=')) != NULL) {
        *eq = '\0';
        name = item;
        tok = eq + 1;
        if (!fq_msg_name_valid(name, strlen(name), FQ_WORKFLOW_MAX)) {
            snprintf(err, errlen, "cost entry %d: the workflow name is not 1 to %d printable characters",
                     c->n + 1, FQ_WORKFLOW_MAX);
            return false;
        }
    }
    if ((weight = strchr(tok, ':')) != NULL)
        *weight++ = '\0';
    if (!fqc_parse_u64(tok, 1, max_tokens, &t)) {
        snprintf(err, errlen, "cost entry %d: tokens must be an integer from 1 to %u",
                 c->n + 1, max_tokens);
        return false;
    }
    if (weight && (!fqc_parse_double(weight, 0, INFINITY, w) || *w <= 0)) {
        snprintf(err, errlen, "cost entry %d: the weight must be a positive number", c->n + 1);
        return false;
    }
    c->tokens[c->n] = (uint32_t)t;
    if (name)
        memcpy(c->workflow[c->n], name, strlen(name) + 1);
    return true;
}

bool fqc_costs_parse(fqc_costs *out, const char *spec, uint32_t max_tokens,
                     char *err, size_t errlen)
{
    fqc_costs c;
    char item[128];
    double total = 0;
    const char *p = spec;

    memset(&c, 0, sizeof c);
    if (!spec || !*spec) {
        snprintf(err, errlen, "the cost mix is empty");
        return false;
    }
    while (*p) {
        size_t len = strcspn(p, ",");
        double w = 1;

        if (c.n == FQC_COSTS_MAX) {
            snprintf(err, errlen, "the cost mix has more than %d entries", FQC_COSTS_MAX);
            return false;
        }
        if (len == 0 || len >= sizeof item) {
            snprintf(err, errlen, "cost entry %d is %s", c.n + 1, len ? "too long" : "empty");
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        p += len + (p[len] == ',');
        if (!*p && p[-1] == ',') {
            snprintf(err, errlen, "the cost mix ends with a comma");
            return false;
        }
        if (!fqc_cost_entry(&c, &w, item, max_tokens, err, errlen))
            return false;
        total += w;
        c.cum[c.n++] = total;
    }
    for (int i = 0; i < c.n; i++)
        c.cum[i] /= total;
    c.cum[c.n - 1] = 1.0;
    *out = c;
    return true;
}

int fqc_costs_pick(const fqc_costs *c, double u)
{
    for (int i = 0; i < c->n - 1; i++)
        if (u < c->cum[i])
            return i;
    return c->n - 1;
}

fq_status fqc_samples_add(fqc_samples *s, int64_t us)
{
    if (fq_grow(&s->v, &s->cap, s->n + 1, sizeof *s->v) != FQ_OK)
        return FQ_ENOMEM;
    s->v[s->n++] = us < 0 ? 0 : us > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    return FQ_OK;
}

static int fqc_u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void fqc_samples_sort(fqc_samples *s)
{
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, fqc_u32_cmp);
}

uint32_t fqc_samples_quantile(const fqc_samples *s, double q)
{
    size_t rank;

    if (s->n == 0)
        return 0;
    rank = (size_t)ceil(q * (double)s->n);
    if (rank < 1)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    return s->v[rank - 1];
}

void fqc_samples_free(fqc_samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}
