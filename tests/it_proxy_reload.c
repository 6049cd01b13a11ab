/* it_proxy_reload.c -- a reload whose limits the run ledger cannot take is refused whole: the proxy's library run in-process, its config given by a load function. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "proxy.h"
#include "proxytest.h"

/* fq_proxy_ops.load is the proxy's interface for a reload: whatever
 * config it fills in must be checked by the proxy itself, since a caller
 * need not have read it through fq_config_load's validation. */
typedef struct loader {
    char path[512];
    bool no_buffer;             /* fill limits.max_buffered_runs = 0, which the ledger refuses */
} loader;

static fq_status load(fq_config *out, void *arg, char *err, size_t errlen)
{
    const loader *l = arg;
    fq_status s = fq_config_load(out, l->path, err, errlen);
    if (s == FQ_OK && l->no_buffer)
        out->limits.max_buffered_runs = 0;
    return s;
}

static void write_config(const loader *l, const natstest *srv, int gold)
{
    FILE *f = fopen(l->path, "w");
    assert_non_null(f);
    fprintf(f,
            "nats:\n  url: %s\nhttp:\n  listen: \"\"\n"
            "scheduler:\n  default_plan: free\n"
            "plans:\n  - name: gold\n    weight: %d\n  - name: free\n    weight: 1\n"
            "tenants:\n  - id: b\n    plan: gold\n",
            natstest_url(srv), gold);
    assert_int_equal(fclose(f), 0);
}

/* One test's world: its server, the proxy running in a thread, a client. */
typedef struct fixture {
    natstest *srv;
    fq_proxy *p;
    pthread_t th;
    bool running;
    int rc;                     /* fq_proxy_run's, once joined */
    pt_client c;
    loader l;
} fixture;

static void *run(void *arg)
{
    fixture *f = arg;
    f->rc = fq_proxy_run(f->p);
    return NULL;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    *state = f;
    return f && natstest_start(&f->srv, NULL) == 0 ? 0 : -1;
}

/* Also after a failed assertion: no proxy thread or server left behind. */
static int teardown(void **state)
{
    fixture *f = *state;
    if (f->c.nc)
        pt_close(&f->c);
    if (f->running) {
        fq_proxy_stop(f->p);
        pthread_join(f->th, NULL);
    }
    fq_proxy_destroy(f->p);
    natstest_destroy(f->srv);
    free(f);
    return 0;
}

static void test_reload_refused_when_the_ledger_cannot_take_it(void **state)
{
    fixture *f = *state;
    loader *l = &f->l;
    snprintf(l->path, sizeof l->path, "%s/reload.yaml", natstest_dir(f->srv));
    write_config(l, f->srv, 2);
    fq_config cfg;
    char err[512];
    assert_int_equal(load(&cfg, l, err, sizeof err), FQ_OK);
    assert_int_equal(fq_proxy_create(&f->p, &cfg, err, sizeof err), FQ_OK);
    fq_config_free(&cfg);
    fq_proxy_ops ops = {.load = load, .load_arg = l};
    assert_int_equal(fq_proxy_set_ops(f->p, &ops), FQ_OK);
    assert_int_equal(pthread_create(&f->th, NULL, run, f), 0);
    f->running = true;
    assert_int_equal(pt_connect(&f->c, f->srv), 0);

    /* gold would weigh 3, but the buffer of no run is refused: all of it,
     * gold's weight included, and the reply says why. */
    write_config(l, f->srv, 3);
    l->no_buffer = true;
    char *r = pt_request(&f->c, "fair.admin.reload", "", NULL);
    assert_non_null(r);
    assert_non_null(strstr(r, "\"ok\":false"));
    assert_non_null(strstr(r, "the run ledger cannot take these limits"));
    free(r);
    r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"b\"}", NULL);
    assert_non_null(r);
    assert_non_null(strstr(r, "\"weight\":2"));
    free(r);

    /* the same file with its buffer: in force */
    l->no_buffer = false;
    r = pt_request(&f->c, "fair.admin.reload", "", NULL);
    assert_non_null(r);
    assert_non_null(strstr(r, "\"ok\":true"));
    free(r);
    r = pt_request(&f->c, "fair.admin.tenant.get", "{\"tenant\":\"b\"}", NULL);
    assert_non_null(r);
    assert_non_null(strstr(r, "\"weight\":3"));
    free(r);

    fq_proxy_stop(f->p);
    pthread_join(f->th, NULL);
    f->running = false;
    assert_int_equal(f->rc, FQ_PROXY_EXIT_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reload_refused_when_the_ledger_cannot_take_it,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
