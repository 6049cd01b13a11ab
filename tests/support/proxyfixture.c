/* proxyfixture.c -- the fixture and checks the it_proxy tests share: a server, the proxy, a client and workers, on cmocka. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxyfixture.h"

int pf_setup(void **state, const char *yaml_body, const pt_worker_opts *wo)
{
    return pf_setup_server(state, NULL, yaml_body, wo);
}

int pf_setup_server(void **state, const char *const *server_args, const char *yaml_body,
                    const pt_worker_opts *wo)
{
    pf_fixture *f = calloc(1, sizeof *f);
    *state = f;
    if (!f || natstest_start(&f->srv, server_args) != 0 ||
        pt_proxy_start(&f->px, f->srv, "proxy", yaml_body) != 0 ||
        pt_log_wait(&f->px, "fairq-proxy running", 15000) != 0 || pt_connect(&f->c, f->srv) != 0)
        return -1;
    return wo ? pt_worker_start(&f->w, f->srv, wo) : 0;
}

int pf_teardown(void **state, bool must_run)
{
    pf_fixture *f = *state;
    int code = 0;
    if (!f)
        return 0;
    pt_worker_stop(f->w);
    bool alive = nt_proc_alive(&f->px.proc);
    if (alive)
        code = pt_proxy_stop(&f->px);
    pt_close(&f->c);
    natstest_destroy(f->srv);
    free(f);
    *state = NULL;
    /* Asserted once everything is stopped, so a failure leaks nothing. */
    if (must_run)
        assert_true(alive);
    return code;
}

cJSON *pf_stats(pf_fixture *f, const char *req, size_t *len)
{
    char *s = pt_stats_req(&f->c, req, len);
    assert_non_null(s);
    cJSON *j = cJSON_Parse(s);
    free(s);
    assert_non_null(j);
    return j;
}

long pf_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsNumber(v));
    return (long)v->valuedouble;
}

long pf_overall(const cJSON *j, const char *key)
{
    return pf_num(cJSON_GetObjectItemCaseSensitive(j, "overall"), key);
}

void pf_submit_runs(pf_fixture *f, int from, int n, int tenants)
{
    for (int i = from; i < from + n; i++) {
        char tenant[16], body[64];
        snprintf(tenant, sizeof tenant, "t%d", i % tenants);
        snprintf(body, sizeof body, "{\"run_id\":\"r-%d\"}", i);
        assert_int_equal(pt_submit_async(&f->c, tenant, body, strlen(body), NULL), 0);
    }
    assert_int_equal(pt_submit_flush(&f->c), 0);
}

void pf_assert_each_dispatched_once(pf_fixture *f, int n)
{
    pt_msg *m = NULL;
    size_t k = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIR_DISPATCH", &m, &k), 0);
    char *seen = calloc((size_t)n, 1);
    assert_non_null(seen);
    size_t ours = 0;
    for (size_t i = 0; i < k; i++) {
        int id = -1;
        if (strncmp(m[i].run_id, "r-", 2) != 0)
            continue;   /* another case's tenants' (it_cluster_replicas' shares) */
        assert_int_equal(sscanf(m[i].run_id, "r-%d", &id), 1);
        assert_true(id >= 0 && id < n);
        if (seen[id])
            fail_msg("run r-%d dispatched twice", id);
        seen[id] = 1;
        ours++;
    }
    assert_int_equal(ours, (size_t)n);
    free(seen);
    pt_msgs_free(m, k);
}

void pf_publish(pf_fixture *f, const char *subject, const char *body)
{
    jsPubAck *pa = NULL;
    assert_int_equal(js_Publish(&pa, f->c.js, subject, body, (int)strlen(body), NULL, NULL),
                     NATS_OK);
    jsPubAck_Destroy(pa);
}

void pf_wait_msgs(pf_fixture *f, const char *stream, uint64_t n)
{
    long long end = nt_now_ms() + 20000;
    while (nt_now_ms() < end) {
        jsStreamInfo *si = NULL;
        if (js_GetStreamInfo(&si, f->c.js, stream, NULL, NULL) == NATS_OK) {
            uint64_t have = si->State.Msgs;
            jsStreamInfo_Destroy(si);
            if (have >= n)
                return;
        }
        nt_sleep_ms(20);
    }
    fail_msg("%s holds fewer than %llu messages", stream, (unsigned long long)n);
}

void pf_wait_empty(pf_fixture *f, const char *stream)
{
    long long end = nt_now_ms() + 20000;
    uint64_t have = UINT64_MAX;
    while (nt_now_ms() < end) {
        jsStreamInfo *si = NULL;
        if (js_GetStreamInfo(&si, f->c.js, stream, NULL, NULL) == NATS_OK) {
            have = si->State.Msgs;
            jsStreamInfo_Destroy(si);
            if (have == 0)
                return;
        }
        nt_sleep_ms(20);
    }
    fail_msg("%s still holds %llu messages", stream, (unsigned long long)have);
}

int pf_write_mapping(char *conf, size_t cap, const char *dir, int parts)
{
    snprintf(conf, cap, "%s/mapping.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f, "mappings {\n"
               "  \"fair.submit.*\": \"fair.submit.{{partition(%d,1)}}.{{wildcard(1)}}\"\n"
               "  \"fair.done.*\": \"fair.done.{{partition(%d,1)}}.{{wildcard(1)}}\"\n"
               "}\n", parts, parts);
    return fclose(f) == 0 ? 0 : -1;
}

void pf_owners(pt_client *c, const char *bucket, int parts, char (*own)[PF_ID_MAX])
{
    memset(own, 0, (size_t)parts * PF_ID_MAX);
    char stream[128];
    snprintf(stream, sizeof stream, "KV_%s", bucket);
    /* Each key's last message, asked by its subject: a read of the whole
     * stream by sequence missed every key renewed while it went on (a
     * renewal stores the key anew and deletes its older message), so a
     * loaded machine read owners of none. */
    for (int k = 0; k < parts; k++) {
        char subject[192];
        snprintf(subject, sizeof subject, "$KV.%s.p.%d", bucket, k);
        natsMsg *m = NULL;
        natsStatus st = js_GetLastMsg(&m, c->js, stream, subject, NULL, NULL);
        if (st == NATS_NOT_FOUND)
            continue;   /* never written, or aged out */
        assert_int_equal(st, NATS_OK);
        snprintf(own[k], PF_ID_MAX, "%.*s", natsMsg_GetDataLength(m),
                 natsMsg_GetData(m) ? natsMsg_GetData(m) : "");
        natsMsg_Destroy(m);
        if (strcmp(own[k], "released") == 0)
            own[k][0] = '\0';
    }
}

int pf_owned_by(char (*own)[PF_ID_MAX], int parts, const char *id)
{
    int c = 0;
    for (int k = 0; k < parts; k++)
        c += strcmp(own[k], id) == 0;
    return c;
}

int pf_wait_shared(pt_client *c, const char *bucket, int parts, const char *const *ids, int n,
                   int timeout_ms)
{
    char (*own)[PF_ID_MAX] = calloc((size_t)parts, PF_ID_MAX);
    assert_non_null(own);
    long long end = nt_now_ms() + timeout_ms;
    for (;;) {
        pf_owners(c, bucket, parts, own);
        int total = 0, lo = parts, hi = 0;
        for (int i = 0; i < n; i++) {
            int k = pf_owned_by(own, parts, ids[i]);
            total += k;
            lo = k < lo ? k : lo;
            hi = k > hi ? k : hi;
        }
        if (total == parts && hi - lo <= 1)
            break;
        if (nt_now_ms() > end) {
            for (int k = 0; k < parts; k++)
                print_message("p.%d: '%s'\n", k, own[k]);
            free(own);
            print_message("the %d partitions are not shared by %d replicas\n", parts, n);
            return -1;
        }
        nt_sleep_ms(50);
    }
    free(own);
    return 0;
}

int pf_journal_count(pf_fixture *f, const char *needle)
{
    pt_msg *m = NULL;
    size_t n = 0;
    assert_int_equal(pt_stream_read(&f->c, "FAIRQ_RUNS", &m, &n), 0);
    int k = 0;
    for (size_t i = 0; i < n; i++)
        for (const char *q = m[i].data; q && (q = strstr(q, needle)); q += strlen(needle))
            k++;
    pt_msgs_free(m, n);
    return k;
}
