/* client.h -- what fairq's client programs share: connecting, the streams, fetching, headers, flags, percentiles. */
#ifndef FQ_CLIENT_H
#define FQ_CLIENT_H

/*
 * A small library (cmd/client.c, fairq_client): cmd/NAME.c is one binary
 * each, and these helpers serve five of them (the admin tool, the example
 * producer and worker, the baseline relay, the load generator).
 *
 * Principles:
 *
 * - The clients speak the wire contract of docs/protocol.md and nothing
 *   only nats.c could produce: subjects, headers and JSON bodies.
 *
 * - The proxy owns the streams' configuration. fqc_streams_ensure creates
 *   them, the same way, only where the proxy is absent (the relay baseline,
 *   tests); it never changes a stream that exists.
 *
 * - A pull returns as soon as something came, and never through
 *   natsSubscription_Fetch. That one long-polls for the whole batch once
 *   the stream is empty, so a lone run waits for the full timeout; and in
 *   nats.c 3.4.1 a fetch that starts with deliveries left over from an
 *   earlier one (a request given up on just before the server answered)
 *   compares its running total with the already reduced batch, so it waits
 *   out its timeout and, if more deliveries arrive, writes past the array
 *   it returns (a heap overflow, seen under load here). fqc_pull sends the
 *   pull requests itself and counts what it took, through natsio's pull
 *   reader, the one the proxy's fetch threads use.
 */

#include <errno.h>
#include <math.h>
#include <nats/nats.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fq.h"
#include "msg.h"
#include "names.h"
#include "natsio.h"
#include "proxy.h"

/* The default subjects and stream names of the wire contract are the
 * proxy's (names.h). */
#define FQC_HDR_MSG_ID "Nats-Msg-Id"
#define FQC_DEFAULT_URL "nats://127.0.0.1:4222"

#define FQC_NS_PER_MS 1000000LL
#define FQC_NS_PER_S 1000000000LL

/* Clocks. Latencies between processes use the wall clock, since the
 * server's timestamps are wall-clock too; intervals use the monotonic one. */
int64_t fqc_wall_us(void);

int64_t fqc_mono_ns(void);

/* Sleep until the monotonic clock reads deadline_ns (returns early on a
 * signal, so the caller re-checks fqc_stopping()). */
void fqc_sleep_until(int64_t deadline_ns);

/* Whether SIGINT or SIGTERM came since fqc_catch_signals: the programs'
 * loops poll it. */
bool fqc_stopping(void);

/* Report a failed asynchronous publish, from a PublishAsync error handler:
 * "prog: what failed: reason". Handlers report only the first failure of a
 * batch, so that a broken connection prints one line, not one per run. */
void fqc_pub_perror(const char *prog, const char *what, const jsPubAckErr *pae);

/* A connection's failed asynchronous publishes, for a loop that publishes a
 * batch and then checks it: set fqc_on_pub_error as the PublishAsync
 * ErrHandler with this as its closure, zero n before a batch and read it
 * after. */
typedef struct fqc_pub_errors {
    atomic_uint n;              /* failures since n was zeroed */
    const char *prog;
    const char *what;           /* what was published, for the message */
} fqc_pub_errors;

void fqc_on_pub_error(jsCtx *js, jsPubAckErr *pae, void *closure);

/* Catch SIGINT and SIGTERM for fqc_stopping, without SA_RESTART: a
 * sleeping loop wakes up to see the flag. */
void fqc_catch_signals(void);

/* Print "prog: what: status (details)" to stderr, with nats.c's last error
 * when it is about this status and says more than the status does. */
void fqc_perror(const char *prog, const char *what, natsStatus s);

/* The server URL: the flag, else $FAIRQ_NATS_URL, else the local default. */
const char *fqc_url(const char *flag);

/* The inbox prefix every connection of this program uses (--inbox-prefix;
 * unset: nats.c's "_INBOX"): a server that scopes each user's inbox, as
 * config/nats-server.conf does, delivers replies only under the user's
 * own prefix. The option: a subject without wildcards; p is kept. */
#define FQC_INBOX_PREFIX_HELP \
    "  --inbox-prefix P  inbox prefix of this client's replies (default " FQ_INBOX_PREFIX "); the\n" \
    "                   shipped server config gives each user _INBOX_<user>\n"
bool fqc_inbox_prefix_set(const char *prog, const char *p);
/* A new inbox under that prefix into buf: "<prefix>.<unique>". */
natsStatus fqc_inbox(char *buf, size_t cap);

/* Connect to url as name, reconnecting for ever, and make a JetStream
 * context with jo (NULL for the defaults). nats.c holds writes back for up
 * to a millisecond to batch them; send_asap writes each publish (and each
 * fetch request and ack) at once instead, for latency at low rates at the
 * cost of a system call each. On error nothing is left open. */
natsStatus fqc_connect(natsConnection **nc, jsCtx **js, const char *url,
                       const char *name, jsOptions *jo, bool send_asap);

/* Close and free what fqc_connect made. Safe on NULL. */
void fqc_disconnect(natsConnection *nc, jsCtx *js);

/* Check that every stream of names[] exists; if one does not, say who
 * creates it. Returns 0 if all exist. */
int fqc_streams_require(jsCtx *js, const char *prog, const char *const *names, size_t n);

/* Create the four fairq streams with the default subjects where they are
 * missing, as fairq-proxy with its default config would (lib/proxy.c
 * px_streams owns this configuration: change it there first, then here).
 * FAIR_DISPATCH keeps limits retention for an hour, so a Nats-Msg-Id it saw
 * survives a server restart; FAIR_SUBMIT and FAIR_REJECTED carry the
 * default per-tenant storage bounds, each with replicas copies (1 to 5, as
 * streams.replicas). Returns 0 on success. */
int fqc_streams_ensure(jsCtx *js, const char *prog, int replicas);

/* A reader of a durable pull consumer: natsio's (natsio.h says how). */
typedef struct fqc_pull {
    natsConnection *nc;             /* requests and acks go out on it */
    fq_nio_pull pull;               /* the pull requests and their inbox */
} fqc_pull;

/* Open a reader of consumer on stream (both exist already). On error
 * nothing is left open. */
natsStatus fqc_pull_open(fqc_pull *p, natsConnection *nc, const char *api_prefix,
                         const char *stream, const char *consumer);

/* Safe on a zeroed reader. */
void fqc_pull_close(fqc_pull *p);

/* Up to max deliveries into out[], for a client's main loop: what the
 * consumer has now, or else the first to come within timeout_ms. True with
 * *n deliveries in out[] (the caller owns them); false when this turn has
 * none: a timeout, or an error (a disconnection, most likely, which the
 * library repairs by itself), then printed and followed by a pause of
 * pause_ms so the loop does not spin. */
bool fqc_pull_next(fqc_pull *p, const char *prog, natsMsg **out, int max,
                   int64_t timeout_ms, int pause_ms, int *n);

/* Acknowledge a delivery: "+ACK", "-NAK", "+TERM", or "+WPI" (in
 * progress), published to its ack subject without waiting. */
natsStatus fqc_ack(fqc_pull *p, natsMsg *m, const char *kind);

/* Acknowledge and wait until the server has recorded it. */
natsStatus fqc_ack_sync(fqc_pull *p, natsMsg *m, int64_t timeout_ms);

/* A consumed JetStream message's stream sequence and the time the server
 * stored it (wall clock, ns), from its reply subject. natsMsg_GetSequence
 * and natsMsg_GetTime answer only for js_GetMsg, so they are not used. */
natsStatus fqc_msg_meta(natsMsg *m, uint64_t *stream_seq, int64_t *stored_ns);

/* A header's value, or NULL when the message has none. */
const char *fqc_hdr(natsMsg *m, const char *key);

/* Strict unsigned decimal in [min, max]: digits only, no sign, no blanks.
 * On error *out is unchanged and false is returned. */
bool fqc_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* A finite decimal in [min, max]. On error *out is unchanged. */
bool fqc_parse_double(const char *s, double min, double max, double *out);

/* A header holding an unsigned decimal in [0, max]; false if absent or not one. */
bool fqc_hdr_u64(natsMsg *m, const char *key, uint64_t max, uint64_t *out);

/* Set a header to a decimal. */
natsStatus fqc_hdr_set_u64(natsMsg *m, const char *key, uint64_t v);

/* The last token of a subject ("t1" of "fair.submit.t1"). */
const char *fqc_last_token(const char *subject);

/* A cost mix: "TOKENS[:WEIGHT][,...]" with an optional "NAME=" before the
 * tokens, naming the entry's workflow ("chat=100:0.9,batch=5000:0.1"). */
#define FQC_COSTS_MAX 16

typedef struct fqc_costs {
    uint32_t tokens[FQC_COSTS_MAX];                     /* each entry's estimate */
    char workflow[FQC_COSTS_MAX][FQ_WORKFLOW_MAX + 1];   /* "" if unnamed */
    double cum[FQC_COSTS_MAX];                          /* cumulative share, last is 1 */
    int n;                                              /* entries */
} fqc_costs;

/* Parse spec into *out. Tokens are integers in [1, max_tokens], weights
 * finite and positive (1 when left out), names valid workflow names. On
 * error *out is unchanged and err holds a sentence. */
bool fqc_costs_parse(fqc_costs *out, const char *spec, uint32_t max_tokens,
                     char *err, size_t errlen);

/* The entry that u, uniform in [0, 1), falls on. */
int fqc_costs_pick(const fqc_costs *c, double u);

/* Latency samples in microseconds, sorted once at the end. Growth doubles,
 * so adding is amortised O(1) with no allocation per sample. */
typedef struct fqc_samples {
    uint32_t *v;        /* values; sorted after fqc_samples_sort */
    size_t n;           /* used */
    size_t cap;         /* allocated */
} fqc_samples;

/* Add one sample, clamped to [0, UINT32_MAX] us. On ENOMEM nothing changes. */
fq_status fqc_samples_add(fqc_samples *s, int64_t us);

void fqc_samples_sort(fqc_samples *s);

/* The q-quantile (0 < q <= 1) of sorted samples by the nearest-rank method:
 * the smallest sample with at least q of them at or below it. 0 if empty. */
uint32_t fqc_samples_quantile(const fqc_samples *s, double q);

void fqc_samples_free(fqc_samples *s);

#endif
