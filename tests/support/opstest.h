/* opstest.h -- integration-test support for operating fairq-proxy: HTTP probes, admin requests, the overrides bucket, config rewrites, log checks. */
#ifndef FQ_OPSTEST_H
#define FQ_OPSTEST_H

/*
 * Like proxytest, it speaks only what an operator's tools would: HTTP to
 * the metrics port, NATS requests to the admin subjects, plain nats.c KV
 * writes, signals, and the files the proxy reads and writes. Functions
 * return 0 on success and -1 on failure after writing the reason to stderr.
 */

#include "proxytest.h"

/* GET http://127.0.0.1:port/path. *status is the HTTP status; *body (if
 * given) a malloc'd, NUL-terminated copy of the body. */
int ot_http_get(int port, const char *path, int *status, char **body);

/* The port the proxy logged as serving metrics and probes on (start it with
 * FAIRQ_HTTP_LISTEN=127.0.0.1:0), waiting up to timeout_ms; -1 if none. */
int ot_http_port(const pt_proxy *px, int timeout_ms);


/* Run fairq-admin against srv with request and body; its output (the
 * reply) malloc'd in *out. Returns its exit code, -1 if it did not run. */
int ot_admin(const natstest *srv, const char *request, const char *body, char **out);

/* Put value under key in bucket as any NATS client would (kvStore_Put). */
int ot_kv_put(pt_client *c, const char *bucket, const char *key, const char *value);

/* Replace what follows the header pt_proxy_start wrote into the proxy's
 * config file (its nats and http keys) with yaml_body. */
int ot_config_rewrite(const pt_proxy *px, const char *yaml_body);

/* Send sig to the proxy (SIGHUP: reload). */
int ot_proxy_signal(const pt_proxy *px, int sig);

/* Run tests/support/opscheck.py with args (NULL-terminated): the real
 * parsers (prometheus_client, json, a strict logfmt reader) check what the
 * proxy wrote. 0 if it passed. */
int ot_check(const char *const *args);

#endif
