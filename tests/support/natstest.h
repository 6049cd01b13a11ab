/* natstest.h -- integration-test support: a private nats-server and child processes. */
#ifndef FQ_NATSTEST_H
#define FQ_NATSTEST_H

/*
 * Each integration test owns its nats-server: a child process with
 * JetStream on a free loopback port and a temporary store, so that the test
 * can stop, kill -9 and restart it on the same port and store without
 * disturbing any other test. The proxy under test runs as a child process
 * too (nt_proc_*), found through FAIRQ_BUILD_DIR.
 *
 * Every function returns 0 on success and -1 on failure, after writing the
 * reason to stderr: a test asserts on the return value and the log says why.
 */

#include <stdbool.h>
#include <sys/types.h>

typedef struct natstest natstest;

/* Start nats-server -js on a free loopback port with a fresh temporary
 * store and wait until it accepts clients. extra_args (NULL-terminated, or
 * NULL) are appended to its command line, e.g. {"-c", file} for a
 * config file that sets max_payload (2.9 has no flag for it). */
int natstest_start(natstest **out, const char *const *extra_args);
/* Stop the server (SIGTERM, then SIGKILL after 5 s), remove its store and
 * free t. Safe on NULL. */
void natstest_destroy(natstest *t);

/* "nats://127.0.0.1:PORT", valid until natstest_destroy. */
const char *natstest_url(const natstest *t);
int natstest_port(const natstest *t);
/* The temporary directory holding the store and the server's log. */
const char *natstest_dir(const natstest *t);

/* Graceful stop (SIGTERM, waited for; a paused server is resumed first).
 * The store and port are kept. */
int natstest_stop(natstest *t);
/* kill -9, waited for. The store and port are kept. */
int natstest_kill(natstest *t);
/* Pause the server (SIGSTOP) or resume it (SIGCONT). A paused server keeps
 * its connections open and answers nothing, as a hung host does; the
 * clients notice only when their pings go unanswered. */
int natstest_pause(natstest *t, bool paused);
/* Ask the server to read its config file again (SIGHUP): changed
 * permissions apply to the connections it has. Returns once signalled. */
int natstest_reload(natstest *t);
/* Start again on the same port and store (after stop or kill), waiting
 * until it accepts clients. */
int natstest_restart(natstest *t);
bool natstest_running(const natstest *t);

/* A child process. */
typedef struct nt_proc {
    pid_t pid;          /* 0 when not running */
    int status;         /* wait status once reaped */
} nt_proc;

/* Start argv[0] (searched in PATH if it has no '/') with argv, its stdout
 * and stderr appended to log_path (or inherited if NULL). */
int nt_proc_spawn(nt_proc *p, const char *const *argv, const char *log_path);
/* Send sig and wait up to timeout_ms for the process to exit; p->status
 * holds its wait status. -1 if it did not exit in time (it keeps running). */
int nt_proc_signal_wait(nt_proc *p, int sig, int timeout_ms);
/* Wait up to timeout_ms for an exit without signalling. */
int nt_proc_wait(nt_proc *p, int timeout_ms);
/* 1 if the process is still running (not reaped). */
int nt_proc_alive(nt_proc *p);
/* The exit code of a process that exited normally, -1 otherwise. */
int nt_proc_exit_code(const nt_proc *p);

/* FAIRQ_BUILD_DIR/name, or "./name" without it, written into buf. */
const char *nt_build_path(char *buf, size_t cap, const char *name);

/* A loopback port nobody listens on now, or -1. The kernel picks it; the
 * tiny race until a server binds it is acceptable in a test. */
int nt_free_port(void);

/* Monotonic milliseconds, for test deadlines (never for assertions). */
long long nt_now_ms(void);
/* Sleep ms milliseconds: to pace a test, or between polls of a condition. */
void nt_sleep_ms(int ms);

#endif
