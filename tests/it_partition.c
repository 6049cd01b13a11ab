/* it_partition.c -- fairq's partition function against a real nats-server's {{partition(P,1)}} mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <nats/nats.h>

#include "natstest.h"
#include "partition.h"

/*
 * A nats-server whose account maps fair.submit.* and fair.done.* through
 * {{partition(16,1)}} (the mapping docs/partitions.md ships) and a third
 * subject through {{partition(7,1)}}. For a few hundred tenant names,
 * odd bytes among them, the partition the server chose (read off the
 * mapped subject a subscriber receives) is the one fq_partition_of
 * computes, and fq_partition_tenant accepts the mapped subject.
 */

#define PT_NAMES 400

/* Tenant name i: plain ids, then odd bytes that a subject token may hold
 * (anything but '.', '*', '>', white space and NUL), UTF-8 and not. */
static void pt_name(char *out, size_t cap, int i)
{
    static const char *const odd[] = {"acme", "globex", "initech", "a", "A", "0", "-", "_",
                                      "~!@#$%^&()", "t\xc3\xa9nant", "\xe2\x82\xac", "\xff\xfe",
                                      "\x01\x7f", "{{partition}}", "a,b;c", "x/y\\z", "\"q\"",
                                      "tenant-with-a-rather-long-name-of-sixty-four-bytes-0123456789ab"};
    size_t n = sizeof odd / sizeof odd[0];
    if ((size_t)i < n) {
        snprintf(out, cap, "%s", odd[i]);
        return;
    }
    /* the rest: ids and a high byte, varying in length */
    int k = snprintf(out, cap, "tenant-%d", i);
    if (i % 3 == 0 && (size_t)k + 2 < cap) {
        out[k++] = (char)(0x80 + i % 128);
        out[k] = '\0';
    }
}


static void pt_check(natsConnection *nc, const char *pub_prefix, const char *sub_filter,
                     uint32_t n)
{
    natsSubscription *sub = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&sub, nc, sub_filter), NATS_OK);
    assert_int_equal(natsConnection_Flush(nc), NATS_OK);
    char subj[256], name[128];
    for (int i = 0; i < PT_NAMES; i++) {
        pt_name(name, sizeof name, i);
        snprintf(subj, sizeof subj, "%s.%s", pub_prefix, name);
        assert_int_equal(natsConnection_PublishString(nc, subj, name), NATS_OK);
    }
    assert_int_equal(natsConnection_Flush(nc), NATS_OK);
    int per[64] = {0};
    for (int i = 0; i < PT_NAMES; i++) {
        natsMsg *m = NULL;
        assert_int_equal(natsSubscription_NextMsg(&m, sub, 5000), NATS_OK);
        /* the body is the tenant as published; the subject the server's mapping */
        const char *tenant = natsMsg_GetData(m), *s = natsMsg_GetSubject(m);
        size_t tl = (size_t)natsMsg_GetDataLength(m), pl = strlen(pub_prefix);
        assert_memory_equal(s, pub_prefix, pl);
        unsigned k = 0;
        int used = 0;
        assert_int_equal(sscanf(s + pl, ".%u.%n", &k, &used), 1);
        assert_string_equal(s + pl + used, tenant);
        uint32_t ours = fq_partition_of(tenant, tl, n);
        if (ours != k)
            fail_msg("tenant #%d (%zu bytes): the server chose partition %u, fairq %u", i, tl,
                     k, ours);
        per[k]++;
        const char *t = NULL;
        size_t len = 0;
        char err[256];
        assert_int_equal(fq_partition_tenant(&t, &len, s, pub_prefix, n, err, sizeof err), FQ_OK);
        assert_int_equal(len, tl);
        natsMsg_Destroy(m);
    }
    /* every partition is used: the names do spread */
    for (uint32_t k = 0; k < n; k++)
        assert_true(per[k] > 0);
    natsSubscription_Destroy(sub);
}

static void test_server_partition_is_ours(void **state)
{
    (void)state;
    char conf[512], dir[] = "/tmp/fairq-it-partition-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(conf, sizeof conf, "%s/mapping.conf", dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f, "mappings {\n"
               "  \"fair.submit.*\": \"fair.submit.{{partition(16,1)}}.{{wildcard(1)}}\"\n"
               "  \"fair.done.*\": \"fair.done.{{partition(16,1)}}.{{wildcard(1)}}\"\n"
               "  \"seven.*\": \"seven.{{partition(7,1)}}.{{wildcard(1)}}\"\n"
               "}\n");
    fclose(f);
    const char *args[] = {"-c", conf, NULL};
    natstest *srv = NULL;
    assert_int_equal(natstest_start(&srv, args), 0);
    natsConnection *nc = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, natstest_url(srv)), NATS_OK);
    pt_check(nc, "fair.submit", "fair.submit.*.>", 16);
    pt_check(nc, "fair.done", "fair.done.*.>", 16);
    pt_check(nc, "seven", "seven.*.>", 7);
    natsConnection_Destroy(nc);
    natstest_destroy(srv);
    remove(conf);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_partition_is_ours),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
