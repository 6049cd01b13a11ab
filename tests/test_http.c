/* test_http.c -- the metrics and probe server on a free port, driven by a plain socket client; the probe client; startup errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http.h"

/* ---- the server's world, as the test controls it ---- */

static _Atomic uint64_t fake_now = 1000;    /* ms */
static atomic_bool is_ready;
static atomic_int renders, inside, overlaps;
static atomic_bool render_fails;

static uint64_t fake_clock(void *arg)
{
    (void)arg;
    return atomic_load(&fake_now);
}

static fq_status render(fq_buf *out, void *arg)
{
    if (atomic_exchange(&inside, 1))
        atomic_fetch_add(&overlaps, 1);
    atomic_fetch_add(&renders, 1);
    fq_buf_printf(out, "# TYPE fairq_test gauge\nfairq_test{arg=\"%s\"} %d\n",
                  (const char *)arg, atomic_load(&renders));
    atomic_store(&inside, 0);
    return atomic_load(&render_fails) ? FQ_ENOMEM : FQ_OK;
}

static atomic_bool is_standby;

static bool ready(char *why, size_t whylen, void *arg)
{
    (void)arg;
    if (atomic_load(&is_standby)) {
        snprintf(why, whylen, "standby: holder=a\nsecond line must not show");
        return true;
    }
    if (atomic_load(&is_ready))
        return true;
    snprintf(why, whylen, "not connected to NATS\nsecond line must not show");
    return false;
}

static fq_http *start(const char *listen)
{
    fq_http_opts o = {
        .listen = listen, .metrics = render, .ready = ready, .arg = "x",
        .heartbeat_timeout_ms = 5000, .clock = fake_clock,
    };
    fq_http *h = NULL;
    char err[256] = "";
    assert_int_equal(fq_http_start(&h, &o, err, sizeof err), FQ_OK);
    assert_non_null(h);
    assert_true(fq_http_port(h) > 0);
    return h;
}

static int setup(void **state)
{
    atomic_store(&fake_now, 1000);
    atomic_store(&is_ready, false);
    atomic_store(&render_fails, false);
    atomic_store(&renders, 0);
    *state = start("127.0.0.1:0");
    return 0;
}

static int teardown(void **state)
{
    fq_http_stop(*state);
    return 0;
}

/* ---- a plain socket client ---- */

typedef struct reply {
    int status;
    char head[2048];
    char body[4096];
} reply;

static void request(reply *r, uint16_t port, const char *raw)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    char buf[8192];
    size_t got = 0;
    ssize_t n;

    assert_true(fd >= 0);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(send(fd, raw, strlen(raw), MSG_NOSIGNAL), (ssize_t)strlen(raw));
    while (got < sizeof buf - 1 && (n = recv(fd, buf + got, sizeof buf - 1 - got, 0)) > 0)
        got += (size_t)n;
    close(fd);
    buf[got] = '\0';
    memset(r, 0, sizeof *r);
    assert_int_equal(sscanf(buf, "HTTP/1.%*d %d", &r->status), 1);
    char *sep = strstr(buf, "\r\n\r\n");
    assert_non_null(sep);
    snprintf(r->head, sizeof r->head, "%.*s", (int)(sep - buf), buf);
    snprintf(r->body, sizeof r->body, "%s", sep + 4);
}

static void get(reply *r, fq_http *h, const char *path)
{
    char raw[512];
    snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", path);
    request(r, fq_http_port(h), raw);
}

/* ---- tests ---- */

static void test_healthz_follows_the_heartbeat(void **state)
{
    fq_http *h = *state;
    reply r;

    get(&r, h, "/healthz");
    assert_int_equal(r.status, 503);        /* no beat yet: starting */
    assert_non_null(strstr(r.body, "starting"));

    fq_http_heartbeat(h);
    get(&r, h, "/healthz");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ok\n");
    assert_non_null(strstr(r.head, "Content-Type: text/plain"));

    atomic_store(&fake_now, 1000 + 5000);   /* at the limit: still alive */
    get(&r, h, "/healthz");
    assert_int_equal(r.status, 200);
    atomic_store(&fake_now, 1000 + 5001);   /* past it: stalled */
    get(&r, h, "/healthz");
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "stalled"));
    assert_non_null(strstr(r.body, "5001 ms"));

    fq_http_heartbeat(h);                   /* the loop came back */
    get(&r, h, "/healthz?verbose=1");       /* a query string changes nothing */
    assert_int_equal(r.status, 200);
}

static void test_readyz_needs_health_and_readiness(void **state)
{
    fq_http *h = *state;
    reply r;

    atomic_store(&is_ready, true);
    get(&r, h, "/readyz");
    assert_int_equal(r.status, 503);        /* ready says yes, but no beat */

    fq_http_heartbeat(h);
    get(&r, h, "/readyz");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "ready\n");

    atomic_store(&is_ready, false);
    get(&r, h, "/readyz");
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "not connected to NATS\n");    /* one line */

    /* Ready with something to say (a standby): 200 and its one line. */
    atomic_store(&is_standby, true);
    get(&r, h, "/readyz");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "standby: holder=a\n");
    atomic_store(&is_standby, false);

    atomic_store(&is_ready, true);
    atomic_store(&fake_now, 1000 + 60000);
    get(&r, h, "/readyz");
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "stalled"));
}

static void test_metrics_route(void **state)
{
    fq_http *h = *state;
    reply r;

    get(&r, h, "/metrics");
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.head, "Content-Type: text/plain; version=0.0.4"));
    assert_string_equal(r.body, "# TYPE fairq_test gauge\nfairq_test{arg=\"x\"} 1\n");
    get(&r, h, "/metrics");
    assert_non_null(strstr(r.body, "} 2\n"));     /* rendered afresh per scrape */

    atomic_store(&render_fails, true);
    get(&r, h, "/metrics");
    assert_int_equal(r.status, 500);
    assert_null(strstr(r.body, "fairq_test"));    /* no partial text */
}

static void test_other_paths_and_methods(void **state)
{
    fq_http *h = *state;
    reply r;

    get(&r, h, "/");
    assert_int_equal(r.status, 404);
    get(&r, h, "/metrics/");
    assert_int_equal(r.status, 404);
    get(&r, h, "/healthz/../metrics");
    assert_int_equal(r.status, 404);

    request(&r, fq_http_port(h), "POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                                 "Connection: close\r\n\r\nhello");
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.head, "Allow: GET, HEAD"));
    request(&r, fq_http_port(h), "DELETE /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(r.status, 405);

    fq_http_heartbeat(h);
    request(&r, fq_http_port(h), "HEAD /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "");

    /* Not HTTP at all: the server answers 400 and keeps serving. */
    request(&r, fq_http_port(h), "\x01\x02 garbage\r\n\r\n");
    assert_int_equal(r.status, 400);
    get(&r, h, "/healthz");
    assert_int_equal(r.status, 200);
}

#define CLIENTS 4
#define PER_CLIENT 25

static void *scrape_many(void *arg)
{
    fq_http *h = arg;
    for (int i = 0; i < PER_CLIENT; i++) {
        reply r;
        get(&r, h, "/metrics");
        if (r.status != 200)
            return (void *)1;
    }
    return NULL;
}

/* Scrapes from many clients at once: every one is answered, and the
 * render callback never runs twice at the same time. */
static void test_callbacks_never_overlap(void **state)
{
    fq_http *h = *state;
    pthread_t t[CLIENTS];

    atomic_store(&overlaps, 0);
    for (int i = 0; i < CLIENTS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, scrape_many, h), 0);
    for (int i = 0; i < CLIENTS; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        assert_null(rc);
    }
    assert_int_equal(atomic_load(&renders), CLIENTS * PER_CLIENT);
    assert_int_equal(atomic_load(&overlaps), 0);
}

static void test_probe_client(void **state)
{
    fq_http *h = *state;
    char url[128], reason[128], err[256];
    int status;

    snprintf(url, sizeof url, "http://127.0.0.1:%u/healthz", fq_http_port(h));
    assert_int_equal(fq_http_probe(&status, reason, sizeof reason, url, 2000, err, sizeof err), FQ_OK);
    assert_int_equal(status, 503);
    assert_non_null(strstr(reason, "starting"));

    fq_http_heartbeat(h);
    assert_int_equal(fq_http_probe(&status, reason, sizeof reason, url, 2000, err, sizeof err), FQ_OK);
    assert_int_equal(status, 200);
    assert_string_equal(reason, "ok");

    snprintf(url, sizeof url, "http://localhost:%u/nope", fq_http_port(h));
    assert_int_equal(fq_http_probe(&status, NULL, 0, url, 2000, err, sizeof err), FQ_OK);
    assert_int_equal(status, 404);

    static const char *const bad[] = {"https://127.0.0.1/healthz", "http://", "http:///x",
                                      "127.0.0.1:9464/healthz", "http://h:99999/", "http://h:x/", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(fq_http_probe(&status, NULL, 0, bad[i], 2000, err, sizeof err), FQ_EINVAL);
        assert_true(err[0] != '\0');
        assert_int_equal(status, 0);
    }
}

/* Nothing listens on a port just freed: the probe fails, with a reason. */
static void test_probe_refused(void **state)
{
    (void)state;
    fq_http *h = start("127.0.0.1:0");
    uint16_t port = fq_http_port(h);
    char url[128], err[256] = "";
    int status;

    fq_http_stop(h);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/healthz", port);
    assert_int_equal(fq_http_probe(&status, NULL, 0, url, 2000, err, sizeof err), FQ_EIO);
    assert_non_null(strstr(err, "refused"));
}

static void test_address_in_use_is_a_clear_error(void **state)
{
    fq_http *h = *state, *h2 = (fq_http *)1;
    char listen[64], err[256] = "";
    fq_http_opts o = {.listen = listen, .metrics = render, .arg = "y"};

    snprintf(listen, sizeof listen, "127.0.0.1:%u", fq_http_port(h));
    assert_int_equal(fq_http_start(&h2, &o, err, sizeof err), FQ_EIO);
    assert_null(h2);
    assert_non_null(strstr(err, listen));
    assert_non_null(strstr(err, "in use"));

    /* Stopped, the server frees its port at once. */
    fq_http_stop(h);
    h = start(listen);
    assert_int_equal(fq_http_port(h), atoi(strchr(listen, ':') + 1));
    *state = h;
}

static void test_bad_listen_addresses(void **state)
{
    (void)state;
    static const char *const bad[] = {"9464", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http",
                                      "[::1:9464", "127.0.0.1:-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fq_http *h = (fq_http *)1;
        char err[256] = "";
        fq_http_opts o = {.listen = bad[i]};
        assert_int_equal(fq_http_start(&h, &o, err, sizeof err), FQ_EINVAL);
        assert_null(h);
        assert_non_null(strstr(err, bad[i]));
    }
}

static void test_empty_listen_disables(void **state)
{
    (void)state;
    fq_http *h = (fq_http *)1;
    char err[64] = "";
    fq_http_opts o = {.listen = ""};
    assert_int_equal(fq_http_start(&h, &o, err, sizeof err), FQ_OK);
    assert_null(h);
    fq_http_heartbeat(h);
    assert_int_equal(fq_http_port(h), 0);
    fq_http_stop(h);
    o.listen = NULL;
    assert_int_equal(fq_http_start(&h, &o, err, sizeof err), FQ_OK);
    assert_null(h);
}

static void test_ipv6_loopback(void **state)
{
    (void)state;
    fq_http *h = NULL;
    char err[256], url[128], reason[64];
    int status;
    fq_http_opts o = {.listen = "[::1]:0", .metrics = render, .arg = "v6"};
    if (fq_http_start(&h, &o, err, sizeof err) != FQ_OK)
        skip();     /* no IPv6 on this host */
    fq_http_heartbeat(h);
    snprintf(url, sizeof url, "http://[::1]:%u/healthz", fq_http_port(h));
    assert_int_equal(fq_http_probe(&status, reason, sizeof reason, url, 2000, err, sizeof err), FQ_OK);
    assert_int_equal(status, 200);
    fq_http_stop(h);
}

/* ---- slow clients ---- */

#define SLOW 100            /* slow connections */
#define SLOW_LINE_MS 2000   /* one header line this often, as a slowloris sends */

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* SLOW connections to port, the i-th from 127.0.0.<2 + i % addrs>, each
 * sending a request line and never the blank line that ends its headers.
 * Connects do not wait: once the server stops accepting, the backlog
 * takes the rest or drops them. */
static void slow_open(int *fds, uint16_t port, int addrs)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    for (int i = 0; i < SLOW; i++) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        from.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(i % addrs));
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(bind(fds[i], (struct sockaddr *)&from, sizeof from), 0);
        int rc = connect(fds[i], (struct sockaddr *)&to, sizeof to);
        assert_true(rc == 0 || errno == EINPROGRESS);
    }
}

/* One more line on every slow connection; those the server closed or has
 * not accepted fail, which is their business. */
static void slow_send(const int *fds, const char *line)
{
    for (int i = 0; i < SLOW; i++)
        (void)!send(fds[i], line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* While SLOW slow clients from addrs addresses hold on to flood_port, for
 * a little longer than one of their lines, /healthz and /readyz on
 * probe_port from 127.0.0.1 answer 200 within a second, every time. */
static void probes_outlast_slow_clients(fq_http *h, uint16_t flood_port, int addrs,
                                        uint16_t probe_port)
{
    int fds[SLOW];
    char url[128], err[256];
    int status, probes = 0;

    atomic_store(&is_ready, true);
    slow_open(fds, flood_port, addrs);
    slow_send(fds, "GET /healthz HTTP/1.1\r\n");
    long long start = mono_ms(), next_line = start + SLOW_LINE_MS;
    while (mono_ms() < start + SLOW_LINE_MS + 700) {
        if (mono_ms() >= next_line) {
            slow_send(fds, "X-Slow: 1\r\n");
            next_line += SLOW_LINE_MS;
        }
        fq_http_heartbeat(h);
        snprintf(url, sizeof url, "http://127.0.0.1:%u/%s", probe_port,
                 probes % 2 ? "readyz" : "healthz");
        err[0] = '\0';
        fq_status s = fq_http_probe(&status, NULL, 0, url, 1000, err, sizeof err);
        if (s != FQ_OK)
            fail_msg("probe %d of %s: %s", probes, url, err);
        assert_int_equal(status, 200);
        probes++;
        struct timespec pause = {0, 200 * 1000000L};   /* pacing, not synchronisation */
        nanosleep(&pause, NULL);
    }
    assert_true(probes >= 10);
    for (int i = 0; i < SLOW; i++)
        close(fds[i]);
}

/* 100 connections from 127.0.0.2 that each send a header line every two
 * seconds held every connection the server had (32), and every probe
 * timed out. One address now holds at most a few. */
static void test_slow_clients_from_one_address(void **state)
{
    fq_http *h = *state;
    probes_outlast_slow_clients(h, fq_http_port(h), 1, fq_http_port(h));
}

/* Slow clients from a hundred addresses can fill the server; the probes'
 * own listener, which they do not reach, still answers, and serves only
 * the probes. */
static void test_probe_listener_outlasts_many_addresses(void **state)
{
    (void)state;
    fq_http_opts o = {.listen = "127.0.0.1:0", .probe_listen = "127.0.0.1:0",
                      .metrics = render, .ready = ready, .arg = "p",
                      .heartbeat_timeout_ms = 5000, .clock = fake_clock};
    fq_http *h = NULL;
    char err[256] = "", url[128];
    int status;
    assert_int_equal(fq_http_start(&h, &o, err, sizeof err), FQ_OK);
    assert_true(fq_http_probe_port(h) > 0);
    assert_int_not_equal(fq_http_probe_port(h), fq_http_port(h));
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics", fq_http_probe_port(h));
    assert_int_equal(fq_http_probe(&status, NULL, 0, url, 2000, err, sizeof err), FQ_OK);
    assert_int_equal(status, 404);
    probes_outlast_slow_clients(h, fq_http_port(h), SLOW, fq_http_probe_port(h));
    fq_http_stop(h);
}

/* A probe listener that cannot be bound fails the start whole. */
static void test_probe_listener_in_use(void **state)
{
    fq_http *h = *state, *h2 = (fq_http *)1;
    char busy[64], err[256] = "";
    snprintf(busy, sizeof busy, "127.0.0.1:%u", fq_http_port(h));
    fq_http_opts o = {.listen = "127.0.0.1:0", .probe_listen = busy};
    assert_int_equal(fq_http_start(&h2, &o, err, sizeof err), FQ_EIO);
    assert_null(h2);
    assert_non_null(strstr(err, busy));
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_healthz_follows_the_heartbeat),
        T(test_readyz_needs_health_and_readiness),
        T(test_metrics_route),
        T(test_other_paths_and_methods),
        T(test_callbacks_never_overlap),
        T(test_probe_client),
        cmocka_unit_test(test_probe_refused),
        T(test_address_in_use_is_a_clear_error),
        cmocka_unit_test(test_bad_listen_addresses),
        cmocka_unit_test(test_empty_listen_disables),
        cmocka_unit_test(test_ipv6_loopback),
        T(test_slow_clients_from_one_address),
        cmocka_unit_test(test_probe_listener_outlasts_many_addresses),
        T(test_probe_listener_in_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
