/* http.h -- the metrics and probe server (libmicrohttpd), and the --health probe client. */
#ifndef FQ_HTTP_H
#define FQ_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fq.h"

/*
 * GET /metrics    200, whatever the metrics callback renders
 * GET /healthz    200 "ok" while the proxy's loop beats (fq_http_heartbeat)
 *                 within heartbeat_timeout_ms; else 503 and the reason
 * GET /readyz     200 "ready" (or the one line the ready callback wrote)
 *                 when the loop beats and the callback says so; else 503
 *                 and a one-line reason
 * other paths     404; methods other than GET and HEAD: 405
 *
 * The server runs one thread of its own (libmicrohttpd's internal polling
 * thread): the metrics callback runs on it, one call at a time, so it may
 * reuse one snapshot; it must take the caller's own lock to read the
 * proxy's state.
 *
 * A client address holds at most FQ_HTTP_PER_IP_LIMIT connections, so slow
 * clients from one address cannot starve the others. With probe_listen, a
 * second server with a thread of its own answers /healthz and /readyz
 * there (everything else 404), whatever holds the first one's connections:
 * the ready callback may then run on either thread, even at once, so it
 * must read only what is safe to read so (an atomic).
 */

typedef struct fq_http fq_http;

/* Append the /metrics body to out. A status other than FQ_OK answers 500. */
typedef fq_status (*fq_http_metrics_fn)(fq_buf *out, void *arg);
/* Return true when ready, writing into why what to say instead of "ready"
 * if anything (a standby says so); otherwise write a one-line reason. */
typedef bool (*fq_http_ready_fn)(char *why, size_t whylen, void *arg);
/* A monotonic clock in milliseconds; tests pass their own. */
typedef uint64_t (*fq_http_clock_fn)(void *arg);

typedef struct fq_http_opts {
    const char *listen;             /* "host:port", "[v6]:port" or ":port"
                                       (every interface); NULL or "": no server */
    const char *probe_listen;       /* the probes' own server, in the same forms;
                                       NULL or "": none */
    fq_http_metrics_fn metrics;     /* NULL: /metrics answers 404 */
    fq_http_ready_fn ready;         /* NULL: ready whenever healthy */
    void *arg;                      /* passed to both callbacks */
    uint64_t heartbeat_timeout_ms;  /* 0: FQ_HTTP_HEARTBEAT_TIMEOUT_MS */
    fq_http_clock_fn clock;         /* NULL: CLOCK_MONOTONIC */
    void *clock_arg;
} fq_http_opts;

#define FQ_HTTP_HEARTBEAT_TIMEOUT_MS 10000
#define FQ_HTTP_PER_IP_LIMIT 8          /* connections one client address may hold */

/* Bind and start serving. With no listen address, *out is NULL and FQ_OK is
 * returned (every fq_http_* function accepts that NULL). An address that
 * cannot be parsed is FQ_EINVAL, one that cannot be bound (in use, not
 * local) FQ_EIO; err then says which and why, and nothing is left open. */
fq_status fq_http_start(fq_http **out, const fq_http_opts *o, char *err, size_t errlen);

/* Stop serving and free everything; requests under way are ended. Safe on
 * NULL. */
void fq_http_stop(fq_http *h);

/* The proxy's loop calls this on each turn (at least every few seconds,
 * including while it waits for NATS): /healthz is 200 while the last beat
 * is recent. Safe from any thread; cheap (one atomic store). */
void fq_http_heartbeat(fq_http *h);

/* The port bound, useful when listen asked for port 0. 0 for NULL. */
uint16_t fq_http_port(const fq_http *h);
/* The same for probe_listen; 0 without one. */
uint16_t fq_http_probe_port(const fq_http *h);

/*
 * The probe client behind `fairq-proxy --health URL`, for images that have
 * no curl: GET an http:// URL (no TLS, no redirects) within timeout_ms.
 * FQ_OK if the server answered; *status is then its HTTP status and reason
 * (if given) the first line of its body. FQ_EINVAL for a URL it cannot
 * read, FQ_EIO when nothing answered in time; err says why.
 */
fq_status fq_http_probe(int *status, char *reason, size_t reasonlen, const char *url,
                        int timeout_ms, char *err, size_t errlen);

#endif
