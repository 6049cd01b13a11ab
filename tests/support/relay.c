/* relay.c -- integration-test support: a TCP relay on loopback that a test pauses, to cut a client off its server without closing anything. */
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RELAY_MAX_PAIRS 32
#define RELAY_POLL_MS 20

/* A client's connection and the relay's to the server. */
typedef struct relay_pair {
    int fd[2];                  /* [0] the client's, [1] the server's; -1: closed */
} relay_pair;

struct nt_relay {
    int listen_fd;
    int port, to_port;
    atomic_bool paused, stop;
    pthread_t thread;
    relay_pair pairs[RELAY_MAX_PAIRS];  /* the thread's own */
};

static void relay_close(relay_pair *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->fd[i] >= 0)
            close(p->fd[i]);
        p->fd[i] = -1;
    }
}

/* Accept a client and connect it to the server. */
static void relay_accept(nt_relay *r)
{
    int c = accept(r->listen_fd, NULL, NULL);
    if (c < 0)
        return;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->to_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        close(c);
        if (s >= 0)
            close(s);
        return;
    }
    for (int i = 0; i < RELAY_MAX_PAIRS; i++) {
        if (r->pairs[i].fd[0] < 0) {
            r->pairs[i] = (relay_pair){{c, s}};
            return;
        }
    }
    close(c);
    close(s);
}

/* Move what fd[from] has to fd[1 - from]; false when either side closed. */
static bool relay_move(relay_pair *p, int from)
{
    char buf[65536];
    ssize_t n = read(p->fd[from], buf, sizeof buf);
    if (n <= 0)
        return n < 0 && (errno == EINTR || errno == EAGAIN);
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(p->fd[1 - from], buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        off += w;
    }
    return true;
}

static void *relay_main(void *arg)
{
    nt_relay *r = arg;
    while (!atomic_load(&r->stop)) {
        if (atomic_load(&r->paused)) {
            poll(NULL, 0, RELAY_POLL_MS);
            continue;
        }
        struct pollfd pf[1 + 2 * RELAY_MAX_PAIRS];
        int map[1 + 2 * RELAY_MAX_PAIRS], n = 0;
        pf[n] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
        map[n++] = -1;
        for (int i = 0; i < RELAY_MAX_PAIRS; i++) {
            for (int k = 0; k < 2 && r->pairs[i].fd[0] >= 0; k++) {
                pf[n] = (struct pollfd){.fd = r->pairs[i].fd[k], .events = POLLIN};
                map[n++] = 2 * i + k;
            }
        }
        if (poll(pf, (nfds_t)n, RELAY_POLL_MS) <= 0)
            continue;
        for (int j = 0; j < n && !atomic_load(&r->paused); j++) {
            if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (map[j] < 0) {
                relay_accept(r);
                continue;
            }
            relay_pair *p = &r->pairs[map[j] / 2];
            if (p->fd[0] >= 0 && !relay_move(p, map[j] % 2))
                relay_close(p);
        }
    }
    return NULL;
}

int nt_relay_start(nt_relay **out, int to_port)
{
    *out = NULL;
    nt_relay *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    for (int i = 0; i < RELAY_MAX_PAIRS; i++)
        r->pairs[i] = (relay_pair){{-1, -1}};
    r->to_port = to_port;
    r->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (r->listen_fd < 0 || bind(r->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(r->listen_fd, 64) != 0 ||
        getsockname(r->listen_fd, (struct sockaddr *)&a, &len) != 0) {
        perror("relay");
        if (r->listen_fd >= 0)
            close(r->listen_fd);
        free(r);
        return -1;
    }
    r->port = ntohs(a.sin_port);
    if (pthread_create(&r->thread, NULL, relay_main, r) != 0) {
        fprintf(stderr, "relay: cannot start its thread\n");
        close(r->listen_fd);
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

int nt_relay_port(const nt_relay *r)
{
    return r->port;
}

void nt_relay_pause(nt_relay *r, bool paused)
{
    atomic_store(&r->paused, paused);
}

void nt_relay_destroy(nt_relay *r)
{
    if (!r)
        return;
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    for (int i = 0; i < RELAY_MAX_PAIRS; i++)
        relay_close(&r->pairs[i]);
    close(r->listen_fd);
    free(r);
}
