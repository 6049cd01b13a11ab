/* proxyfixture.h -- the fixture and checks the it_proxy tests share: a server, the proxy, a client and workers, on cmocka. */
#ifndef FQ_PROXYFIXTURE_H
#define FQ_PROXYFIXTURE_H

/*
 * What every it_proxy test sets up before its scenario, and the checks
 * several of them make, so that a test file states only its scenario.
 * Unlike proxytest, these fail the running cmocka test themselves.
 */

#include <cjson/cJSON.h>

#include "proxytest.h"

/* One scenario's world: its own nats-server, fairq-proxy on it, a client
 * connection, and a simulated worker pool (NULL when started without). */
typedef struct pf_fixture {
    natstest *srv;
    pt_proxy px;
    pt_client c;
    pt_worker *w;
} pf_fixture;

/* A cmocka setup: start a fresh nats-server, fairq-proxy (named "proxy") on
 * yaml_body as pt_proxy_start takes it, wait until it runs, connect a
 * client, and start workers with wo (none if wo is NULL). *state is the
 * fixture, also when it fails (-1), so that the teardown frees it. */
int pf_setup(void **state, const char *yaml_body, const pt_worker_opts *wo);
/* The same with server_args appended to nats-server's command line
 * (natstest_start's extra_args: {"-c", file} for a config of its own). */
int pf_setup_server(void **state, const char *const *server_args, const char *yaml_body,
                    const pt_worker_opts *wo);

/* A cmocka teardown's work: stop the workers, then the proxy if it still
 * runs (asserting first that it does, if must_run), the client and the
 * server, and free the fixture. Returns pt_proxy_stop's exit code, 0 if
 * the proxy was not running. */
int pf_teardown(void **state, bool must_run);

/* The fair.admin.stats reply to req ("" for none), parsed; *len (may be
 * NULL) its length in bytes. Fails the test without a reply or JSON. */
cJSON *pf_stats(pf_fixture *f, const char *req, size_t *len);
/* The number o.key; fails the test if it is not one. */
long pf_num(const cJSON *o, const char *key);
/* The number j.overall.key of a stats reply; fails the test if none. */
long pf_overall(const cJSON *j, const char *key);

/* Submit runs from .. from + n - 1 without waiting, then wait for every
 * PubAck: run i has run id "r-i" and tenant "t<i % tenants>". */
void pf_submit_runs(pf_fixture *f, int from, int n, int tenants);

/* FAIR_DISPATCH holds every run r-0 .. r-(n-1) exactly once: no run was
 * lost and none reached the workers twice. Runs not named r-<n> (another
 * case's tenants' in the same world) are not counted. */
void pf_assert_each_dispatched_once(pf_fixture *f, int n);

/* Publish body to subject through JetStream and wait for its PubAck, as a
 * worker sends a completion. */
void pf_publish(pf_fixture *f, const char *subject, const char *body);

/* Wait until stream holds at least n messages, up to 20 s. */
void pf_wait_msgs(pf_fixture *f, const char *stream, uint64_t n);
/* Wait until stream holds no message, up to 20 s: a run's submit is acked
 * after its dispatch and its journal batch are stored (and held back while
 * the lease is not fresh), so a worker may complete the run first. */
void pf_wait_empty(pf_fixture *f, const char *stream);

/* The server's config for P partitions (docs/partitions.md's mapping of
 * fair.submit.* and fair.done.*) written to <dir>/mapping.conf, its path
 * into conf (cap bytes): 0, or -1 when it cannot be written. */
int pf_write_mapping(char *conf, size_t cap, const char *dir, int parts);

/* How many times needle occurs in the journal stream FAIRQ_RUNS, read
 * whole (records of one kind: "\"st\":\"done\"", say). */
int pf_journal_count(pf_fixture *f, const char *needle);

/* Partitions' owners, as an operator reads them from the lease bucket
 * (the stream KV_<bucket>: each p.<k> key's last value, asked by its
 * subject, is its owner's replica id): own[k] for k < parts, "" for none
 * or released. */
#define PF_ID_MAX 64
void pf_owners(pt_client *c, const char *bucket, int parts, char (*own)[PF_ID_MAX]);
/* How many of own[0 .. parts-1] are id. */
int pf_owned_by(char (*own)[PF_ID_MAX], int parts, const char *id);
/* Wait until the n replicas ids own every one of the parts partitions,
 * each within one of the others' count; -1 after timeout_ms, having
 * printed who owns what. */
int pf_wait_shared(pt_client *c, const char *bucket, int parts, const char *const *ids, int n,
                   int timeout_ms);

#endif
