/* proxytest.h -- integration-test support for fairq-proxy: a config, the proxy child, producers, simulated workers. */
#ifndef FQ_PROXYTEST_H
#define FQ_PROXYTEST_H

/*
 * Speaks only the wire contract (subjects, headers, JSON bodies) through
 * plain nats.c, as any client of fairq would; the simulated workers pull
 * through cmd/client.h's reader, as fairq-worker does (natsio.c's quirks
 * say why not natsSubscription_Fetch*), and take no more than their
 * concurrency has room for. Functions return 0 on success and -1 on
 * failure after writing the reason to stderr.
 */

#include <nats/nats.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "natstest.h"

/* A proxy under test: its config file, log and process. */
typedef struct pt_proxy {
    char config[512];
    char log[512];
    nt_proc proc;
} pt_proxy;

/* Write dir/name.yaml with nats.url = url, http.listen = "" and yaml_body
 * (the rest of the file, keys at the top level; indented lines at its
 * start extend the http mapping) and start fairq-proxy on it, its output
 * appended to dir/name.log. */
int pt_proxy_start(pt_proxy *px, const natstest *srv, const char *name, const char *yaml_body);
/* The same with nats.url = url (a relay's, say) instead of srv's. */
int pt_proxy_start_url(pt_proxy *px, const natstest *srv, const char *url, const char *name,
                       const char *yaml_body);
/* Start it again on the same config (after a kill). */
int pt_proxy_restart(pt_proxy *px);
/* SIGTERM and wait; returns its exit code, or -1. */
int pt_proxy_stop(pt_proxy *px);
/* kill -9 and wait. */
int pt_proxy_kill(pt_proxy *px);
/* Wait until the proxy's log contains text, up to timeout_ms. */
int pt_log_wait(const pt_proxy *px, const char *text, int timeout_ms);
/* The same for its n-th line holding text (logs are appended across restarts). */
int pt_log_wait_n(const pt_proxy *px, const char *text, int n, int timeout_ms);
/* Lines of the log holding text. */
int pt_log_count(const pt_proxy *px, const char *text);
/* The same, each line also written to stderr (what a test saw). */
int pt_log_print(const pt_proxy *px, const char *text);

/* How long a client waits for a PubAck or a JetStream API reply, and
 * keeps asking the proxy an admin request nothing answered: generous,
 * since a loaded machine takes seconds (nats.c waits 5 s by default). */
#define PT_JS_WAIT_MS 30000

/* A client connection with JetStream. */
typedef struct pt_client {
    natsConnection *nc;
    jsCtx *js;
} pt_client;

int pt_connect(pt_client *c, const natstest *srv);
void pt_close(pt_client *c);

/* Publish a run to fair.submit.<tenant> (subject given whole when tenant
 * starts with "=": "=fair.submit.x.y"), with optional headers
 * (NULL-terminated key, value pairs), waiting for its PubAck. */
int pt_submit(pt_client *c, const char *tenant, const void *body, size_t len,
              const char *const *hdrs);
/* The same without waiting; pt_submit_flush waits for every PubAck. */
int pt_submit_async(pt_client *c, const char *tenant, const void *body, size_t len,
                    const char *const *hdrs);
int pt_submit_flush(pt_client *c);

/* The reply to an admin request on subject with body ("" for none),
 * NUL-terminated, malloc'd; NULL if nothing answered for PT_JS_WAIT_MS
 * (a timeout or no responders is asked again until then). A busy reply is
 * not an answer: the request is sent again after the retry_ms it names, for
 * up to 5 s. *len (may be NULL): the reply's length in bytes. */
char *pt_request(pt_client *c, const char *subject, const char *body, size_t *len);

/* The fair.admin.stats reply, NUL-terminated, malloc'd; NULL on timeout. */
char *pt_stats(pt_client *c);
/* The same for a request with body req (a JSON text, "" for none); *len
 * (may be NULL) gets the reply's length in bytes. */
char *pt_stats_req(pt_client *c, const char *req, size_t *len);

/* A message read back from a stream. */
typedef struct pt_msg {
    uint64_t seq;
    char subject[256];
    char tenant[72];            /* Fair-Tenant */
    char run_id[136];           /* Fair-Run-Id */
    char error[512];            /* Fair-Error */
    char fsubject[256];         /* Fair-Subject */
    char wait_ms[24];           /* Fair-Wait-Ms */
    char subtenant[72];         /* Fair-Subtenant */
    uint32_t est;               /* Fair-Est-Tokens */
    int64_t submitted_at, dispatched_at;
    char *data;                 /* malloc'd copy of the body */
    size_t len;
} pt_msg;

/* Every message stream holds, in order; *out is malloc'd (free with
 * pt_msgs_free). */
int pt_stream_read(pt_client *c, const char *stream, pt_msg **out, size_t *n);
void pt_msgs_free(pt_msg *m, size_t n);
/* The last sequence of a stream (0 if empty or absent). */
uint64_t pt_stream_last(pt_client *c, const char *stream);

/* A simulated worker pool on fair.dispatch: a durable pull consumer of its
 * own, each run held service_ms (plus per_token_us per estimated token)
 * then completed on fair.done.<tenant> with actual tokens from actual()
 * (est if NULL). A run delivered again after it was completed is acked and
 * not completed twice, as an idempotent worker would. */
typedef uint64_t (*pt_actual_fn)(void *arg, const char *tenant, uint32_t est);

typedef struct pt_worker_opts {
    int concurrency;            /* runs held at once; >= 1 */
    int service_ms;
    int per_token_us;
    pt_actual_fn actual;
    void *arg;
} pt_worker_opts;

/* One dispatch as the worker saw it. */
typedef struct pt_seen {
    uint64_t dseq;              /* FAIR_DISPATCH sequence */
    char tenant[72];
    char run_id[136];
    uint32_t est;
    uint64_t actual;
    long long at_ms;            /* monotonic, when received */
    uint32_t len;               /* body bytes */
    uint32_t body_sum;          /* a checksum of the body */
} pt_seen;

typedef struct pt_worker pt_worker;

int pt_worker_start(pt_worker **out, const natstest *srv, const pt_worker_opts *o);
void pt_worker_stop(pt_worker *w);
/* Runs received so far (duplicates included) and completions sent. */
size_t pt_worker_received(pt_worker *w);
size_t pt_worker_completed(pt_worker *w);
/* Copy of the i-th reception. */
pt_seen pt_worker_seen(pt_worker *w, size_t i);
/* Change the pool's speed: a run is due service_ms plus per_token_us a
 * token after it was received, the runs held already included (one
 * overdue completes at once). */
void pt_worker_speed(pt_worker *w, int service_ms, int per_token_us);
/* Hold (true) or release runs: while held nothing is completed. A hold
 * returns once no completion is being sent: those sent before it (each
 * counted in pt_worker_completed once its PubAck came) are all there are
 * until the release. */
void pt_worker_hold(pt_worker *w, bool hold);
/* Wait until completed >= n, up to timeout_ms. */
int pt_worker_wait_completed(pt_worker *w, size_t n, int timeout_ms);

/* A body checksum as pt_seen computes it. */
uint32_t pt_sum(const void *data, size_t len);

#endif
