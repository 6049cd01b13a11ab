/* natscluster.h -- integration-test support: a 3-node JetStream cluster of nats-server on loopback. */
#ifndef FQ_NATSCLUSTER_H
#define FQ_NATSCLUSTER_H

/*
 * Three nats-server processes (natstest's, each with its own free client
 * port and temporary store) routed into one JetStream cluster: a shared
 * config file names the cluster and every node's route port, each node's
 * command line its own name and cluster listen port. Started and stopped
 * by the test that uses it, like natstest's single server; a node can be
 * stopped, killed and restarted through natscluster_node.
 *
 * Functions return 0 on success and -1 on failure after writing the reason
 * to stderr.
 */

#include "natstest.h"

#define NC_NODES 3

typedef struct natscluster natscluster;

/* Start the cluster, extra_conf (NULL or text, e.g. a mappings block)
 * appended to the shared config, and wait until JetStream has a meta
 * leader and answers on every node. */
int natscluster_start(natscluster **out, const char *extra_conf);
/* Stop every node, remove their stores and the shared config; safe on NULL. */
void natscluster_destroy(natscluster *c);

/* Node i, 0 to NC_NODES - 1. */
natstest *natscluster_node(natscluster *c, int i);
/* Every node's client URL, comma-separated, as fairq's nats.url and
 * nats.c take a server list. */
const char *natscluster_urls(const natscluster *c);

#endif
