/* http.c -- the metrics and probe server (libmicrohttpd), and the --health probe client. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "log.h"

/*
 * Principles:
 *  - The listen socket is bound here, before libmicrohttpd sees it, so that
 *    an address in use is an error with the address and the reason, at
 *    startup, rather than a daemon that silently failed to start.
 *  - One internal thread serves every connection of a server: renders never
 *    run concurrently, and a slow scrape cannot multiply into many renders.
 *    Connections are few and time out, so a stuck client cannot pin it.
 *  - No client may hold more than a few connections: libmicrohttpd 0.9.75
 *    has no deadline for a request's headers, and its idle timer restarts
 *    on every line, so a client sending one header line every few seconds
 *    holds its connection for ever. Limited per address, slow clients from
 *    one address cannot take the server's connections from the probes.
 *  - Slow clients from many addresses still could: the probes can have a
 *    listener and a thread of their own (probe_listen), which serves
 *    nothing else, so the orchestrator's probes answer whatever the clients
 *    of /metrics do.
 *  - Liveness is a heartbeat the proxy's loop writes and the server thread
 *    reads: one atomic, no lock shared with the loop.
 */

#define FQ_HTTP_CONN_LIMIT 64         /* connections a server holds at once */
#define FQ_HTTP_CONN_TIMEOUT_S 10

/* What a server's requests are answered with: set before it starts. */
typedef struct http_server {
    struct fq_http *h;
    bool metrics;                   /* /metrics is served here */
} http_server;

struct fq_http {
    http_server main_sv, probe_sv;  /* the handler's cls for d and probe_d */
    struct MHD_Daemon *d;
    struct MHD_Daemon *probe_d;     /* probes only, on probe_listen; NULL: none */
    fq_http_metrics_fn metrics;
    fq_http_ready_fn ready;
    void *arg;
    uint64_t timeout_ms;            /* heartbeat age that means stalled */
    fq_http_clock_fn clock;
    void *clock_arg;
    _Atomic uint64_t beat;          /* clock at the last heartbeat */
    atomic_bool beating;            /* a heartbeat has been seen */
    uint16_t port;                  /* bound */
    uint16_t probe_port;            /* bound by probe_d; 0: none */
};

static uint64_t monotonic_ms(void *arg)
{
    (void)arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Split "host:port", "[v6]:port" or ":port" into host (NULL: every
 * interface) and port. FQ_EINVAL with a reason if it is none of these. */
static fq_status split_hostport(char *host, size_t hostlen, const char **hostp, char *port,
                                size_t portlen, const char *addr, char *err, size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t hl;

    if (!colon) {
        snprintf(err, errlen, "\"%s\" is not host:port", addr);
        return FQ_EINVAL;
    }
    hl = (size_t)(colon - addr);
    if (hl > 0 && addr[0] == '[') {
        if (addr[hl - 1] != ']') {
            snprintf(err, errlen, "\"%s\": an IPv6 address goes in brackets, [::1]:9464", addr);
            return FQ_EINVAL;
        }
        h++;
        hl -= 2;
    }
    const char *p = colon + 1;
    size_t pl = strlen(p);
    if (pl == 0 || pl > 5 || pl >= portlen || strspn(p, "0123456789") != pl || atoi(p) > 65535) {
        snprintf(err, errlen, "\"%s\": the port must be a number from 0 to 65535", addr);
        return FQ_EINVAL;
    }
    if (hl >= hostlen) {
        snprintf(err, errlen, "\"%s\": the host is too long", addr);
        return FQ_EINVAL;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    memcpy(port, p, pl + 1);
    *hostp = hl ? host : NULL;
    return FQ_OK;
}

/* A listening TCP socket on addr, or -1 with err set. */
static int bind_listen(const char *addr, uint16_t *port, fq_status *st, char *err, size_t errlen)
{
    char host[256], portstr[8];
    const char *hostp;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int fd = -1, saved = 0;

    *st = split_hostport(host, sizeof host, &hostp, portstr, sizeof portstr, addr, err, errlen);
    if (*st != FQ_OK)
        return -1;
    int rc = getaddrinfo(hostp, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s: cannot resolve \"%s\": %s", addr, host, gai_strerror(rc));
        *st = FQ_EINVAL;
        return -1;
    }
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        int one = 1;
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        /* Rebinding right after a restart, over TIME_WAIT, is fine; a live
         * listener on the port still fails with EADDRINUSE. The backlog is
         * the kernel's largest: a burst of connections from one client,
         * which the server accepts and closes past its per-address limit,
         * must not fill it and make the kernel drop a probe's connection
         * (retried only a second later). */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(saved));
        *st = FQ_EIO;
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
    *st = FQ_OK;
    return fd;
}

/* ---- answers ---- */

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body,
                                                             MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result answer_metrics(struct MHD_Connection *c, fq_http *h)
{
    fq_buf b = {0};
    fq_status st = h->metrics(&b, h->arg);

    if (st == FQ_OK && b.failed)
        st = FQ_ENOMEM;
    if (st != FQ_OK) {
        char msg[128];
        fq_buf_free(&b);
        snprintf(msg, sizeof msg, "metrics failed: %s\n", fq_status_text(st));
        fq_log(FQ_LOG_ERROR, "metrics render failed", FQ_STR("reason", fq_status_text(st)));
        return answer(c, MHD_HTTP_INTERNAL_SERVER_ERROR, msg);
    }
    /* The response takes the buffer and frees it when sent. */
    struct MHD_Response *r = MHD_create_response_from_buffer(b.len, b.p ? b.p : (void *)"",
                                                             b.p ? MHD_RESPMEM_MUST_FREE
                                                                 : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        fq_buf_free(&b);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Healthy while the loop beats; otherwise the reason, one line. */
static bool healthy(fq_http *h, char *why, size_t whylen)
{
    if (!atomic_load(&h->beating)) {
        snprintf(why, whylen, "starting: the proxy's loop has not run yet");
        return false;
    }
    uint64_t now = h->clock(h->clock_arg), beat = atomic_load(&h->beat);
    uint64_t age = now > beat ? now - beat : 0;
    if (age > h->timeout_ms) {
        snprintf(why, whylen, "stalled: the proxy's loop has not run for %llu ms",
                 (unsigned long long)age);
        return false;
    }
    return true;
}

static enum MHD_Result answer_probe(struct MHD_Connection *c, fq_http *h, bool readiness)
{
    char why[256] = "", body[300];

    if (!healthy(h, why, sizeof why))
        goto unavailable;
    if (!readiness)
        return answer(c, MHD_HTTP_OK, "ok\n");
    if (!h->ready || h->ready(why, sizeof why, h->arg)) {
        if (!why[0])
            return answer(c, MHD_HTTP_OK, "ready\n");
        why[strcspn(why, "\r\n")] = '\0';
        snprintf(body, sizeof body, "%s\n", why);
        return answer(c, MHD_HTTP_OK, body);
    }
    if (!why[0])
        snprintf(why, sizeof why, "not ready");
unavailable:
    why[strcspn(why, "\r\n")] = '\0';   /* one line, whatever the callback wrote */
    snprintf(body, sizeof body, "%s\n", why);
    return answer(c, MHD_HTTP_SERVICE_UNAVAILABLE, body);
}

/* Answer url on a server that renders metrics or, the probes' own, not. */
static enum MHD_Result route(struct MHD_Connection *c, fq_http *h, const char *url,
                             const char *method, bool metrics)
{
    bool is_metrics = metrics && h->metrics && strcmp(url, "/metrics") == 0;
    bool known = is_metrics || strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0;
    if (!known)
        return answer(c, MHD_HTTP_NOT_FOUND, "not found\n");
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    if (is_metrics)
        return answer_metrics(c, h);
    return answer_probe(c, h, strcmp(url, "/readyz") == 0);
}

/* One handler for both servers: cls is the server's own record, which
 * says whether it renders metrics. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_data_size,
                              void **con_cls)
{
    const http_server *sv = cls;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    return route(c, sv->h, url, method, sv->metrics);
}

/* libmicrohttpd's own messages are about single connections (malformed
 * requests, limits): debug detail, which a client must not be able to turn
 * into a flood of warnings. Startup failures are returned, not logged. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    fq_log(FQ_LOG_DEBUG, "http server", FQ_STR("reason", msg));
}

/* ---- lifecycle ---- */

/* A server on listen answering as sv says, its port in *port; NULL with
 * err and *st set when it cannot start. */
static struct MHD_Daemon *serve(http_server *sv, const char *listen, uint16_t *port,
                                fq_status *st, char *err, size_t errlen)
{
    int fd = bind_listen(listen, port, st, err, errlen);
    if (fd < 0)
        return NULL;
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG,
                         0, NULL, NULL, handle, sv,
                         MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                         MHD_OPTION_LISTEN_SOCKET, fd,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)FQ_HTTP_CONN_LIMIT,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)FQ_HTTP_PER_IP_LIMIT,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)FQ_HTTP_CONN_TIMEOUT_S,
                         MHD_OPTION_END);
    if (!d) {
        snprintf(err, errlen, "cannot start the HTTP server on %s", listen);
        close(fd);
        *st = FQ_EIO;
    }
    return d;
}

fq_status fq_http_start(fq_http **out, const fq_http_opts *o, char *err, size_t errlen)
{
    fq_status st = FQ_OK;
    *out = NULL;
    if (!o->listen || !*o->listen)
        return FQ_OK;

    fq_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "http: out of memory");
        return FQ_ENOMEM;
    }
    h->metrics = o->metrics;
    h->ready = o->ready;
    h->arg = o->arg;
    h->timeout_ms = o->heartbeat_timeout_ms ? o->heartbeat_timeout_ms : FQ_HTTP_HEARTBEAT_TIMEOUT_MS;
    h->clock = o->clock ? o->clock : monotonic_ms;
    h->clock_arg = o->clock_arg;

    h->main_sv = (http_server){h, true};
    h->probe_sv = (http_server){h, false};
    h->d = serve(&h->main_sv, o->listen, &h->port, &st, err, errlen);
    if (h->d && o->probe_listen && *o->probe_listen)
        h->probe_d = serve(&h->probe_sv, o->probe_listen, &h->probe_port, &st, err, errlen);
    if (st != FQ_OK) {
        fq_http_stop(h);
        return st;
    }
    *out = h;
    return FQ_OK;
}

void fq_http_stop(fq_http *h)
{
    if (!h)
        return;
    if (h->probe_d)
        MHD_stop_daemon(h->probe_d);
    if (h->d)
        MHD_stop_daemon(h->d);  /* closes the listen socket too */
    free(h);
}

void fq_http_heartbeat(fq_http *h)
{
    if (!h)
        return;
    atomic_store(&h->beat, h->clock(h->clock_arg));
    atomic_store(&h->beating, true);
}

uint16_t fq_http_port(const fq_http *h)
{
    return h ? h->port : 0;
}

uint16_t fq_http_probe_port(const fq_http *h)
{
    return h ? h->probe_port : 0;
}

/* ---- the probe client ---- */

/* Read "http://host[:port][/path]"; the port defaults to 80, the path to /. */
static fq_status parse_url(char *host, size_t hostlen, char *port, size_t portlen,
                           const char **path, const char *url, char *err, size_t errlen)
{
    static const char scheme[] = "http://";
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0) {
        snprintf(err, errlen, "\"%s\" is not an http:// URL", url ? url : "");
        return FQ_EINVAL;
    }
    const char *a = url + sizeof scheme - 1;
    size_t alen = strcspn(a, "/?#");
    char hostport[300];
    const char *hostp;
    if (alen == 0 || alen >= sizeof hostport) {
        snprintf(err, errlen, "\"%s\" has no host", url);
        return FQ_EINVAL;
    }
    *path = a[alen] == '/' ? a + alen : "/";
    memcpy(hostport, a, alen);
    hostport[alen] = '\0';
    if (!strrchr(hostport, ':') || hostport[alen - 1] == ']') {
        if (alen + 3 >= sizeof hostport) {
            snprintf(err, errlen, "\"%s\" has no host", url);
            return FQ_EINVAL;
        }
        strcat(hostport, ":80");
    }
    fq_status st = split_hostport(host, hostlen, &hostp, port, portlen, hostport, err, errlen);
    if (st == FQ_OK && !hostp) {
        snprintf(err, errlen, "\"%s\" has no host", url);
        return FQ_EINVAL;
    }
    return st;
}

/* Connect to the first address of host that answers within timeout_ms. */
static int connect_within(const char *host, const char *port, int timeout_ms, char *err,
                          size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int fd = -1, saved = ETIMEDOUT;

    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (errno != EINPROGRESS || poll(&p, 1, timeout_ms) != 1 ||
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr != 0) {
                saved = errno == EINPROGRESS ? (soerr ? soerr : ETIMEDOUT) : errno;
                close(fd);
                fd = -1;
            }
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s:%s: %s", host, port, strerror(saved));
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

fq_status fq_http_probe(int *status, char *reason, size_t reasonlen, const char *url,
                        int timeout_ms, char *err, size_t errlen)
{
    char host[256], port[8], req[1024], resp[1024];
    const char *path;
    size_t got = 0;

    *status = 0;
    if (reason && reasonlen)
        reason[0] = '\0';
    fq_status st = parse_url(host, sizeof host, port, sizeof port, &path, url, err, errlen);
    if (st != FQ_OK)
        return st;
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: fairq-probe\r\nConnection: close\r\n\r\n",
                     path, host);
    if (n < 0 || (size_t)n >= sizeof req) {
        snprintf(err, errlen, "\"%s\" is too long", url);
        return FQ_EINVAL;
    }
    int fd = connect_within(host, port, timeout_ms, err, errlen);
    if (fd < 0)
        return FQ_EIO;
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        snprintf(err, errlen, "cannot send to %s:%s: %s", host, port, strerror(errno));
        close(fd);
        return FQ_EIO;
    }
    /* The status line and the body's first line fit in one small read
     * for the answers this is meant for; read to the end or the limit. */
    for (ssize_t r; got < sizeof resp - 1 && (r = recv(fd, resp + got, sizeof resp - 1 - got, 0)) > 0;)
        got += (size_t)r;
    close(fd);
    resp[got] = '\0';
    int code;
    if (sscanf(resp, "HTTP/%*d.%*d %3d", &code) != 1) {
        snprintf(err, errlen, "no HTTP answer from %s:%s%s", host, port,
                 got ? "" : " (timed out or closed)");
        return FQ_EIO;
    }
    *status = code;
    const char *body = strstr(resp, "\r\n\r\n");
    if (reason && reasonlen && body) {
        body += 4;
        snprintf(reason, reasonlen, "%.*s", (int)strcspn(body, "\r\n"), body);
    }
    return FQ_OK;
}
