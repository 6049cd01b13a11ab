/* natscluster.c -- a 3-node JetStream cluster on loopback for integration tests (see natscluster.h). */
#define _XOPEN_SOURCE 700
#include "natscluster.h"

#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct natscluster {
    natstest *node[NC_NODES];
    char dir[256];                  /* the shared config's temporary directory */
    char conf[300];                 /* dir/cluster.conf */
    char name[NC_NODES][16];        /* -n: each node's server name */
    char listen[NC_NODES][64];      /* --cluster: its route listen URL */
    const char *args[NC_NODES][8];  /* its extra arguments, borrowed by natstest */
    char urls[NC_NODES * 40];       /* the client URLs, comma-separated */
};

/* Until JetStream answers an account info request through node i: a
 * clustered JetStream serves only once its meta group has a leader. */
static int nc_js_ready(natstest *t, int timeout_ms)
{
    long long end = nt_now_ms() + timeout_ms;
    while (nt_now_ms() < end) {
        natsConnection *nc = NULL;
        jsCtx *js = NULL;
        jsAccountInfo *ai = NULL;
        jsErrCode jerr = 0;
        int ok = natsConnection_ConnectTo(&nc, natstest_url(t)) == NATS_OK &&
                 natsConnection_JetStream(&js, nc, NULL) == NATS_OK &&
                 js_GetAccountInfo(&ai, js, NULL, &jerr) == NATS_OK;
        jsAccountInfo_Destroy(ai);
        jsCtx_Destroy(js);
        natsConnection_Destroy(nc);
        if (ok)
            return 0;
        nt_sleep_ms(100);
    }
    fprintf(stderr, "natscluster: JetStream did not answer on %s\n", natstest_url(t));
    return -1;
}

int natscluster_start(natscluster **out, const char *extra_conf)
{
    *out = NULL;
    natscluster *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/fairq-nc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(c->dir)) {
        perror("natscluster: mkdtemp");
        free(c);
        return -1;
    }
    snprintf(c->conf, sizeof c->conf, "%s/cluster.conf", c->dir);
    int route[NC_NODES];
    for (int i = 0; i < NC_NODES; i++)
        if ((route[i] = nt_free_port()) < 0) {
            natscluster_destroy(c);
            return -1;
        }
    FILE *f = fopen(c->conf, "w");
    if (!f) {
        perror("natscluster: config");
        natscluster_destroy(c);
        return -1;
    }
    /* A route to itself is noticed and dropped by each node. */
    fprintf(f, "cluster {\n  name: fairq-test\n  routes: [\n");
    for (int i = 0; i < NC_NODES; i++)
        fprintf(f, "    nats-route://127.0.0.1:%d\n", route[i]);
    fprintf(f, "  ]\n}\n%s\n", extra_conf ? extra_conf : "");
    fclose(f);
    size_t ul = 0;
    for (int i = 0; i < NC_NODES; i++) {
        snprintf(c->name[i], sizeof c->name[i], "n%d", i);
        snprintf(c->listen[i], sizeof c->listen[i], "nats://127.0.0.1:%d", route[i]);
        const char *a[] = {"-c", c->conf, "-n", c->name[i], "--cluster", c->listen[i], NULL};
        memcpy(c->args[i], a, sizeof a);
        if (natstest_start(&c->node[i], c->args[i]) != 0) {
            natscluster_destroy(c);
            return -1;
        }
        ul += (size_t)snprintf(c->urls + ul, sizeof c->urls - ul, "%s%s", i ? "," : "",
                               natstest_url(c->node[i]));
    }
    for (int i = 0; i < NC_NODES; i++)
        if (nc_js_ready(c->node[i], 20000) != 0) {
            natscluster_destroy(c);
            return -1;
        }
    *out = c;
    return 0;
}

void natscluster_destroy(natscluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < NC_NODES; i++)
        natstest_destroy(c->node[i]);
    remove(c->conf);
    rmdir(c->dir);
    free(c);
}

natstest *natscluster_node(natscluster *c, int i)
{
    return i >= 0 && i < NC_NODES ? c->node[i] : NULL;
}

const char *natscluster_urls(const natscluster *c)
{
    return c->urls;
}
