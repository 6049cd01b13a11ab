/* opstest.c -- integration-test support for operating fairq-proxy: HTTP probes, admin requests, the overrides bucket, config rewrites, log checks. */
#include "opstest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OT_HTTP_TIMEOUT_S 5

/* ---- HTTP ---------------------------------------------------------------- */

static int ot_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {OT_HTTP_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Read until the server closes (HTTP/1.0); NUL-terminated. */
static char *ot_read_all(int fd)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            if (!(buf = b))
                break;
        }
        ssize_t k = read(fd, buf + n, cap - n - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    if (buf)
        buf[n] = '\0';
    return buf;
}

int ot_http_get(int port, const char *path, int *status, char **body)
{
    if (body)
        *body = NULL;
    int fd = ot_connect(port);
    if (fd < 0) {
        fprintf(stderr, "opstest: connect to port %d: %s\n", port, strerror(errno));
        return -1;
    }
    char req[512];
    int k = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    char *resp = write(fd, req, (size_t)k) == k ? ot_read_all(fd) : NULL;
    close(fd);
    char *end = resp ? strstr(resp, "\r\n\r\n") : NULL;
    if (!end || sscanf(resp, "HTTP/1.%*d %d", status) != 1) {
        fprintf(stderr, "opstest: GET %s: no HTTP answer\n", path);
        free(resp);
        return -1;
    }
    if (body) {
        *body = strdup(end + 4);
        if (!*body) {
            free(resp);
            return -1;
        }
    }
    free(resp);
    return 0;
}

int ot_http_port(const pt_proxy *px, int timeout_ms)
{
    if (pt_log_wait(px, "serving metrics and probes", timeout_ms) != 0)
        return -1;
    FILE *f = fopen(px->log, "r");
    if (!f)
        return -1;
    char line[8192];
    int port = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "serving metrics and probes"))
            continue;
        /* The last start's line: logfmt port=N or JSON "port":N. */
        const char *at = strstr(line, " port=");
        const char *js = strstr(line, "\"port\":");
        if (at)
            port = atoi(at + 6);
        else if (js)
            port = atoi(js + 7);
    }
    fclose(f);
    if (port <= 0)
        fprintf(stderr, "opstest: no port in %s\n", px->log);
    return port > 0 ? port : -1;
}

/* ---- NATS ---------------------------------------------------------------- */

int ot_admin(const natstest *srv, const char *request, const char *body, char **out)
{
    char bin[512], path[600];
    nt_build_path(bin, sizeof bin, "fairq-admin");
    snprintf(path, sizeof path, "%s/admin.out", natstest_dir(srv));
    remove(path);
    const char *argv[] = {bin, "--nats", natstest_url(srv), request, body, NULL};
    nt_proc proc;
    *out = NULL;
    if (nt_proc_spawn(&proc, argv, path) != 0 || nt_proc_wait(&proc, 15000) != 0)
        return -1;
    FILE *f = fopen(path, "r");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    *out = strdup(buf);
    return nt_proc_exit_code(&proc);
}

int ot_kv_put(pt_client *c, const char *bucket, const char *key, const char *value)
{
    kvStore *kv = NULL;
    uint64_t rev = 0;
    natsStatus s = js_KeyValue(&kv, c->js, bucket);
    if (s == NATS_OK)
        s = kvStore_PutString(&rev, kv, key, value);
    kvStore_Destroy(kv);
    if (s != NATS_OK) {
        fprintf(stderr, "opstest: put %s/%s: %s\n", bucket, key, natsStatus_GetText(s));
        return -1;
    }
    return 0;
}

/* ---- the proxy's files and process ------------------------------------- */

int ot_config_rewrite(const pt_proxy *px, const char *yaml_body)
{
    static const char end_of_header[] = "  listen: \"\"\n";
    FILE *f = fopen(px->config, "r");
    char head[2048];
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f)
        fclose(f);
    head[n] = '\0';
    char *cut = strstr(head, end_of_header);
    if (!cut) {
        fprintf(stderr, "opstest: %s does not start as pt_proxy_start writes it\n", px->config);
        return -1;
    }
    cut[sizeof end_of_header - 1] = '\0';
    /* Written aside and renamed, as a deployment tool would: a reload never
     * reads a half-written file. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", px->config);
    f = fopen(tmp, "w");
    if (!f || fputs(head, f) < 0 || fputs(yaml_body, f) < 0 || fclose(f) != 0 ||
        rename(tmp, px->config) != 0) {
        fprintf(stderr, "opstest: rewrite %s: %s\n", px->config, strerror(errno));
        return -1;
    }
    return 0;
}

int ot_proxy_signal(const pt_proxy *px, int sig)
{
    if (!px->proc.pid || kill(px->proc.pid, sig) != 0) {
        fprintf(stderr, "opstest: cannot signal the proxy\n");
        return -1;
    }
    return 0;
}

int ot_check(const char *const *args)
{
    const char *src = getenv("FAIRQ_SOURCE_DIR");
    char script[1024];
    snprintf(script, sizeof script, "%s/tests/support/opscheck.py", src && *src ? src : ".");
    const char *argv[32] = {script};
    size_t k = 1;
    for (size_t i = 0; args[i] && k + 1 < sizeof argv / sizeof argv[0]; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    nt_proc proc;
    if (nt_proc_spawn(&proc, argv, NULL) != 0 || nt_proc_wait(&proc, 60000) != 0)
        return -1;
    return nt_proc_exit_code(&proc) == 0 ? 0 : -1;
}
