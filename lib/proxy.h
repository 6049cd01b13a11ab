/* proxy.h -- fairq-proxy's daemon: NATS in, token-metered DRR, NATS out, reconciliation. */
#ifndef FQ_PROXY_H
#define FQ_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "fq.h"

typedef struct fq_proxy fq_proxy;

/* Stream, consumer and bucket names and the streams' limits come from
 * the config (streams.*); these are fixed. */
#define FQ_PROXY_STOP_MS 10000u         /* a graceful stop, from the signal to the exit */
#define FQ_QUEUE_AGE_WARN_EVERY_MS 60000u /* ... at most once per tenant per this */
#define FQ_QUEUE_AGE_WARN_LINES 10u     /* ... and for this many tenants a second at most,
                                           the others summed up in one line */

/* Exit codes of fq_proxy_run, for cmd/fairq-proxy. */
enum fq_proxy_exit {
    FQ_PROXY_EXIT_OK = 0,           /* stopped on request */
    FQ_PROXY_EXIT_FATAL = 1,        /* could not start, or a stream cannot serve */
    FQ_PROXY_EXIT_LEASE_LOST = 3,   /* another proxy took the lease: restart as a standby */
};

/* Read the configuration again for a reload, as at start (the command
 * line's overrides applied): fill *out as fq_config_load does, or return
 * an error with a one-line reason ("file:line:col: key: reason") in err. */
typedef fq_status (*fq_proxy_load_fn)(fq_config *out, void *arg, char *err, size_t errlen);

/* What the config file does not say. */
typedef struct fq_proxy_ops {
    fq_proxy_load_fn load;      /* NULL: reloads are refused, saying why */
    void *load_arg;
} fq_proxy_ops;

/* Build a proxy for cfg (copied where needed; cfg may be freed after).
 * Nothing touches NATS until fq_proxy_run. On error *out is NULL and err
 * says why. */
fq_status fq_proxy_create(fq_proxy **out, const fq_config *cfg, char *err, size_t errlen);
/* Safe on NULL. */
void fq_proxy_destroy(fq_proxy *p);
/* Set the options before fq_proxy_run. */
fq_status fq_proxy_set_ops(fq_proxy *p, const fq_proxy_ops *o);

/* Connect (retrying until stopped), ensure the streams and buckets, wait
 * for the leader lease, rebuild the in-flight window from NATS, then fetch,
 * dispatch and reconcile until fq_proxy_stop. Returns an fq_proxy_exit. */
int fq_proxy_run(fq_proxy *p);

/* Ask the running proxy to read its config again (as <admin>.reload does):
 * its loop does it on its next turn. Safe from a signal handler and from
 * any thread. */
void fq_proxy_reload(fq_proxy *p);

/* Ask fq_proxy_run to stop gracefully: stop fetching, finish the publishes
 * under way, ack what they covered, release the lease, close the
 * connection, return; within FQ_PROXY_STOP_MS of the first call (less
 * what fq_proxy_destroy takes), whether NATS answers or not. Safe from a
 * signal handler and from any thread. */
void fq_proxy_stop(fq_proxy *p);

#endif
