/* natstest.c -- a private nats-server per integration test, and child processes. */
#define _XOPEN_SOURCE 700   /* nftw */
#include "natstest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NT_MAX_ARGS 32

struct natstest {
    nt_proc server;             /* the nats-server child */
    int port;                   /* fixed for the life of t */
    char dir[256];              /* temp dir: store/ and nats.log */
    char url[64];
    const char *extra[NT_MAX_ARGS]; /* extra_args, borrowed from the caller */
};

long long nt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nt_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int nt_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int nt_proc_spawn(nt_proc *p, const char *const *argv, const char *log_path)
{
    int fd = -1;
    if (log_path) {
        fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0) {
            fprintf(stderr, "natstest: open %s: %s\n", log_path, strerror(errno));
            return -1;
        }
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "natstest: fork: %s\n", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (pid == 0) {
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "natstest: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (fd >= 0)
        close(fd);
    p->pid = pid;
    p->status = 0;
    return 0;
}

int nt_proc_wait(nt_proc *p, int timeout_ms)
{
    if (p->pid == 0)
        return 0;
    long long deadline = nt_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            p->status = st;
            p->pid = 0;
            return 0;
        }
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "natstest: waitpid %d: %s\n", (int)p->pid, strerror(errno));
            p->pid = 0;
            return -1;
        }
        if (nt_now_ms() >= deadline)
            return -1;
        nt_sleep_ms(10);
    }
}

int nt_proc_signal_wait(nt_proc *p, int sig, int timeout_ms)
{
    if (p->pid == 0)
        return 0;
    kill(p->pid, sig);
    if (nt_proc_wait(p, timeout_ms) != 0) {
        fprintf(stderr, "natstest: pid %d did not exit within %d ms of signal %d\n",
                (int)p->pid, timeout_ms, sig);
        return -1;
    }
    return 0;
}

int nt_proc_alive(nt_proc *p)
{
    if (p->pid == 0)
        return 0;
    int st;
    if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
        p->status = st;
        p->pid = 0;
        return 0;
    }
    return 1;
}

int nt_proc_exit_code(const nt_proc *p)
{
    return (p->pid == 0 && WIFEXITED(p->status)) ? WEXITSTATUS(p->status) : -1;
}

const char *nt_build_path(char *buf, size_t cap, const char *name)
{
    const char *dir = getenv("FAIRQ_BUILD_DIR");
    snprintf(buf, cap, "%s/%s", dir && *dir ? dir : ".", name);
    return buf;
}

/* 1 once this launch's log says the server, JetStream included, is ready
 * (it prints that after the client listener is up). */
static int nt_ready(const natstest *t)
{
    char path[300];
    snprintf(path, sizeof path, "%s/nats.log", t->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    int ready = 0;
    while (!ready && fgets(line, sizeof line, f))
        ready = strstr(line, "Server is ready") != NULL;
    fclose(f);
    return ready;
}

static int nt_launch(natstest *t)
{
    char log[300], store[300], port[16];
    snprintf(log, sizeof log, "%s/nats.log", t->dir);
    snprintf(store, sizeof store, "%s/store", t->dir);
    snprintf(port, sizeof port, "%d", t->port);
    /* A fresh log per launch, so readiness is that of this launch. */
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
        close(fd);
    const char *argv[NT_MAX_ARGS + 12] = {"nats-server", "-js", "-a", "127.0.0.1",
                                         "-p", port, "-sd", store};
    size_t n = 8;
    for (size_t i = 0; t->extra[i]; i++)
        argv[n++] = t->extra[i];
    argv[n] = NULL;
    if (nt_proc_spawn(&t->server, argv, log) != 0)
        return -1;
    long long deadline = nt_now_ms() + 10000;
    while (nt_now_ms() < deadline) {
        if (nt_ready(t))
            return 0;
        if (!nt_proc_alive(&t->server))
            break;
        nt_sleep_ms(20);
    }
    fprintf(stderr, "natstest: nats-server on port %d did not become ready; see %s\n",
            t->port, log);
    nt_proc_signal_wait(&t->server, SIGKILL, 2000);
    return -1;
}

int natstest_start(natstest **out, const char *const *extra_args)
{
    *out = NULL;
    natstest *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    size_t n = 0;
    for (; extra_args && extra_args[n] && n + 1 < NT_MAX_ARGS; n++)
        t->extra[n] = extra_args[n];
    const char *tmp = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/fairq-nt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(t->dir)) {
        fprintf(stderr, "natstest: mkdtemp %s: %s\n", t->dir, strerror(errno));
        free(t);
        return -1;
    }
    /* A port can be taken between probe and bind: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        t->port = nt_free_port();
        snprintf(t->url, sizeof t->url, "nats://127.0.0.1:%d", t->port);
        if (t->port > 0 && nt_launch(t) == 0) {
            *out = t;
            return 0;
        }
    }
    natstest_destroy(t);
    return -1;
}

static int nt_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void natstest_destroy(natstest *t)
{
    if (!t)
        return;
    natstest_stop(t);
    if (!getenv("FAIRQ_KEEP_NATS"))
        nftw(t->dir, nt_rm, 16, FTW_DEPTH | FTW_PHYS);
    free(t);
}

const char *natstest_url(const natstest *t) { return t->url; }
int natstest_port(const natstest *t) { return t->port; }
const char *natstest_dir(const natstest *t) { return t->dir; }
bool natstest_running(const natstest *t) { return t->server.pid != 0; }

int natstest_stop(natstest *t)
{
    if (t->server.pid == 0)
        return 0;
    kill(t->server.pid, SIGCONT);   /* a paused server acts on SIGTERM once resumed */
    if (nt_proc_signal_wait(&t->server, SIGTERM, 5000) == 0)
        return 0;
    return nt_proc_signal_wait(&t->server, SIGKILL, 5000);
}

int natstest_kill(natstest *t)
{
    return nt_proc_signal_wait(&t->server, SIGKILL, 5000);
}

int natstest_pause(natstest *t, bool paused)
{
    if (t->server.pid == 0 || kill(t->server.pid, paused ? SIGSTOP : SIGCONT) != 0) {
        fprintf(stderr, "natstest: cannot %s the server\n", paused ? "pause" : "resume");
        return -1;
    }
    return 0;
}

int natstest_reload(natstest *t)
{
    if (t->server.pid == 0 || kill(t->server.pid, SIGHUP) != 0) {
        fprintf(stderr, "natstest: cannot signal the server to reload\n");
        return -1;
    }
    return 0;
}

int natstest_restart(natstest *t)
{
    if (t->server.pid != 0 && natstest_stop(t) != 0)
        return -1;
    /* The port may linger briefly after a kill; retry for a few seconds. */
    for (int attempt = 0; attempt < 10; attempt++) {
        if (nt_launch(t) == 0)
            return 0;
        nt_sleep_ms(300);
    }
    return -1;
}
