/* test_log.c -- both log formats read back (logfmt by a parser here, JSON by cJSON), escaping, truncation, threads, rate limiting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "log.h"

/* Values a client could send us, with what they must read back as. */
static const struct {
    const char *in;
    const char *out;
} nasty[] = {
    {"plain", "plain"},
    {"", ""},
    {"two words", "two words"},
    {"a=b", "a=b"},
    {"say \"hi\"", "say \"hi\""},
    {"back\\slash", "back\\slash"},
    {"line\nbreak\r\ttab", "line\nbreak\r\ttab"},
    {"bell\x07 del\x7f", "bell\x07 del\x7f"},
    {"caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac"},
    {"bad\xff utf8\xc3", "bad\xef\xbf\xbd utf8\xef\xbf\xbd"},
    {"overlong\xc0\xaf", "overlong\xef\xbf\xbd\xef\xbf\xbd"},
};
#define N_NASTY (sizeof nasty / sizeof nasty[0])

/* ---- a logfmt reader, as strict as the ones collectors use ---- */

typedef struct kv {
    char key[64];
    char val[FQ_LOG_LINE_MAX];
    int quoted;
} kv;

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parse one line into at most max pairs; returns the count, or -1 if the
 * line is not well-formed logfmt. */
static int logfmt_parse(const char *line, kv *out, int max)
{
    const char *p = line;
    int n = 0;

    while (*p && *p != '\n') {
        if (n == max)
            return -1;
        kv *f = &out[n++];
        size_t k = 0;
        while (*p && *p != '=' && *p != ' ' && *p != '\n') {
            if (k + 1 >= sizeof f->key)
                return -1;
            f->key[k++] = *p++;
        }
        f->key[k] = '\0';
        if (k == 0 || *p != '=')
            return -1;
        p++;
        size_t v = 0;
        f->quoted = *p == '"';
        if (f->quoted) {
            p++;
            while (*p != '"') {
                if (!*p || *p == '\n')
                    return -1;  /* unterminated */
                char c = *p++;
                if (c == '\\') {
                    switch (*p++) {
                    case '"': c = '"'; break;
                    case '\\': c = '\\'; break;
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'u': {
                        int h[4];
                        for (int i = 0; i < 4; i++)
                            if ((h[i] = hexval(p[i])) < 0)
                                return -1;
                        if (h[0] || h[1])
                            return -1; /* the writer only escapes controls */
                        c = (char)(h[2] * 16 + h[3]);
                        p += 4;
                        break;
                    }
                    default:
                        return -1;
                    }
                } else if ((unsigned char)c < 0x20) {
                    return -1;  /* raw control inside quotes */
                }
                f->val[v++] = c;
            }
            p++;
        } else {
            while (*p && *p != ' ' && *p != '\n') {
                if (*p == '"' || *p == '=')
                    return -1;
                f->val[v++] = *p++;
            }
        }
        f->val[v] = '\0';
        if (*p == ' ')
            p++;
        else if (*p && *p != '\n')
            return -1;
    }
    return n;
}

static const kv *kv_find(const kv *f, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(f[i].key, key) == 0)
            return &f[i];
    return NULL;
}

/* ---- a sink the tests read back ---- */

static FILE *sink;

static int setup(void **state)
{
    (void)state;
    sink = tmpfile();
    assert_non_null(sink);
    fq_log_set_sink(sink);
    fq_log_set(FQ_LOG_DEBUG, FQ_LOG_LOGFMT);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fq_log_set_sink(NULL);
    fclose(sink);
    return 0;
}

/* Every line written so far, in order; the caller frees. */
static char **read_lines(size_t *n)
{
    static char line[2 * FQ_LOG_LINE_MAX];
    char **v = NULL;

    *n = 0;
    rewind(sink);
    while (fgets(line, sizeof line, sink)) {
        v = realloc(v, (*n + 1) * sizeof *v);
        v[(*n)++] = strdup(line);
    }
    return v;
}

static void free_lines(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void assert_ts(const char *ts)
{
    regex_t re;
    assert_int_equal(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$",
                             REG_EXTENDED | REG_NOSUB), 0);
    assert_int_equal(regexec(&re, ts, 0, NULL, 0), 0);
    regfree(&re);
}

static void test_logfmt_reads_back(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_NASTY; i++)
        fq_log(FQ_LOG_INFO, nasty[i].in, FQ_STR("tenant", "acme"), FQ_STR("value", nasty[i].in),
               FQ_INT("neg", -42), FQ_UINT("big", UINT64_MAX), FQ_DBL("ratio", 1.5),
               FQ_DBL("nan", NAN), FQ_BOOL("ok", true), FQ_STR("null", NULL),
               FQ_STR("bad key=\"x\"", "k"));

    size_t n;
    char **lines = read_lines(&n);
    assert_int_equal(n, N_NASTY);
    for (size_t i = 0; i < n; i++) {
        kv f[16];
        int nf = logfmt_parse(lines[i], f, 16);
        assert_int_equal(nf, 12);
        assert_string_equal(f[0].key, "ts");
        assert_ts(f[0].val);
        assert_string_equal(kv_find(f, nf, "level")->val, "info");
        assert_string_equal(kv_find(f, nf, "msg")->val, nasty[i].out);
        assert_string_equal(kv_find(f, nf, "value")->val, nasty[i].out);
        assert_string_equal(kv_find(f, nf, "tenant")->val, "acme");
        assert_false(kv_find(f, nf, "tenant")->quoted);
        assert_string_equal(kv_find(f, nf, "neg")->val, "-42");
        assert_string_equal(kv_find(f, nf, "big")->val, "18446744073709551615");
        assert_string_equal(kv_find(f, nf, "ratio")->val, "1.5");
        assert_string_equal(kv_find(f, nf, "nan")->val, "NaN");
        assert_string_equal(kv_find(f, nf, "ok")->val, "true");
        assert_string_equal(kv_find(f, nf, "null")->val, "");
        /* A key cannot be quoted in logfmt: its odd bytes are replaced. */
        assert_string_equal(kv_find(f, nf, "bad_key__x_")->val, "k");
    }
    free_lines(lines, n);
}

static void test_json_reads_back(void **state)
{
    (void)state;
    fq_log_set(FQ_LOG_DEBUG, FQ_LOG_JSON);
    for (size_t i = 0; i < N_NASTY; i++)
        fq_log(FQ_LOG_WARN, nasty[i].in, FQ_STR("value", nasty[i].in), FQ_INT("neg", -42),
               FQ_UINT("n", 7), FQ_DBL("ratio", 0.25), FQ_DBL("inf", INFINITY),
               FQ_BOOL("ok", false));

    size_t n;
    char **lines = read_lines(&n);
    assert_int_equal(n, N_NASTY);
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_Parse(lines[i]);
        assert_non_null(o);
        assert_true(cJSON_IsObject(o));
        assert_ts(cJSON_GetObjectItemCaseSensitive(o, "ts")->valuestring);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "level")->valuestring, "warn");
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "msg")->valuestring, nasty[i].out);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "value")->valuestring, nasty[i].out);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "neg")->valuedouble, -42);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "n")->valuedouble, 7);
        assert_true(cJSON_GetObjectItemCaseSensitive(o, "ratio")->valuedouble == 0.25);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "inf")->valuestring, "+Inf");
        assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "ok")));
        cJSON_Delete(o);
    }
    free_lines(lines, n);
}

static void test_level_filters(void **state)
{
    (void)state;
    char err[128];
    assert_int_equal(fq_log_init("warn", NULL, err, sizeof err), FQ_OK);
    assert_false(fq_log_enabled(FQ_LOG_INFO));
    fq_log(FQ_LOG_DEBUG, "hidden");
    fq_log(FQ_LOG_INFO, "hidden");
    fq_log(FQ_LOG_WARN, "shown");
    fq_log(FQ_LOG_ERROR, "shown");

    /* A bad setting is refused whole, with a reason, and changes nothing. */
    assert_int_equal(fq_log_init("info", "xml", err, sizeof err), FQ_EINVAL);
    assert_non_null(strstr(err, "xml"));
    assert_int_equal(fq_log_init("verbose", "json", err, sizeof err), FQ_EINVAL);
    assert_non_null(strstr(err, "verbose"));
    fq_log(FQ_LOG_INFO, "hidden");

    size_t n;
    char **lines = read_lines(&n);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        kv f[8];
        int nf = logfmt_parse(lines[i], f, 8);
        assert_true(nf >= 3);
        assert_string_equal(kv_find(f, nf, "msg")->val, "shown");
    }
    free_lines(lines, n);
}

/* A value far past the line limit is cut, and the line stays well-formed
 * in both formats and says it was cut. */
static void test_long_values_are_cut(void **state)
{
    (void)state;
    size_t big = 3 * FQ_LOG_LINE_MAX;
    char *v = malloc(big + 1);
    for (size_t i = 0; i < big; i++)
        v[i] = "a\"\n\xe2\x82\xac"[i % 6];     /* escapes and a 3-byte character */
    v[big] = '\0';

    fq_log(FQ_LOG_INFO, "long", FQ_STR("body", v), FQ_UINT("after", 1));
    fq_log_set(FQ_LOG_DEBUG, FQ_LOG_JSON);
    fq_log(FQ_LOG_INFO, "long", FQ_STR("body", v), FQ_UINT("after", 1));
    free(v);

    size_t n;
    char **lines = read_lines(&n);
    assert_int_equal(n, 2);
    assert_true(strlen(lines[0]) <= FQ_LOG_LINE_MAX);
    assert_true(strlen(lines[1]) <= FQ_LOG_LINE_MAX);

    static kv f[8];
    int nf = logfmt_parse(lines[0], f, 8);
    assert_int_equal(nf, 5);
    assert_string_equal(kv_find(f, nf, "truncated")->val, "true");
    assert_null(kv_find(f, nf, "after"));
    assert_true(strlen(kv_find(f, nf, "body")->val) > FQ_LOG_LINE_MAX / 2);

    cJSON *o = cJSON_Parse(lines[1]);
    assert_non_null(o);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "truncated")));
    assert_null(cJSON_GetObjectItemCaseSensitive(o, "after"));
    /* Cut on a character boundary: what is kept is a prefix of the value. */
    const char *body = cJSON_GetObjectItemCaseSensitive(o, "body")->valuestring;
    assert_true(strlen(body) > FQ_LOG_LINE_MAX / 4);
    for (size_t i = 0; body[i]; i++)
        assert_int_equal(body[i], "a\"\n\xe2\x82\xac"[i % 6]);
    cJSON_Delete(o);
    free_lines(lines, n);
}

#define THREADS 4
#define PER_THREAD 500

static void *log_many(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < PER_THREAD; i++)
        fq_log(FQ_LOG_INFO, "from a thread", FQ_INT("thread", id), FQ_INT("i", i),
               FQ_STR("pad", "some words \"quoted\" to make the line longer than a few bytes"));
    return NULL;
}

/* Lines from threads logging at once never interleave. */
static void test_threads_do_not_interleave(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, log_many, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);

    size_t n;
    char **lines = read_lines(&n);
    assert_int_equal(n, THREADS * PER_THREAD);
    int next[THREADS] = {0};
    for (size_t i = 0; i < n; i++) {
        kv f[8];
        assert_int_equal(logfmt_parse(lines[i], f, 8), 6);
        int id = atoi(kv_find(f, 6, "thread")->val);
        assert_true(id >= 0 && id < THREADS);
        /* each thread's lines appear in its own order */
        assert_int_equal(atoi(kv_find(f, 6, "i")->val), next[id]++);
    }
    free_lines(lines, n);
}

static void test_limiter_one_per_interval(void **state)
{
    (void)state;
    fq_log_limiter *l;
    uint64_t supp = 99;

    assert_int_equal(fq_log_limiter_create(&l, 0, 10), FQ_EINVAL);
    assert_null(l);
    assert_int_equal(fq_log_limiter_create(&l, 64, 1000), FQ_OK);

    assert_true(fq_log_limiter_allow(l, "acme", 5000, &supp));
    assert_int_equal(supp, 0);
    assert_false(fq_log_limiter_allow(l, "acme", 5001, &supp));
    assert_false(fq_log_limiter_allow(l, "acme", 5999, &supp));
    /* Keys are limited independently. */
    assert_true(fq_log_limiter_allow(l, "beta", 5999, &supp));
    assert_int_equal(supp, 0);
    /* After the interval the next event passes and reports what was held. */
    assert_true(fq_log_limiter_allow(l, "acme", 6000, &supp));
    assert_int_equal(supp, 2);
    assert_false(fq_log_limiter_allow(l, "acme", 6999, NULL));
    assert_true(fq_log_limiter_allow(l, "acme", 7000, &supp));
    assert_int_equal(supp, 1);
    fq_log_limiter_destroy(l);
    fq_log_limiter_destroy(NULL);
}

/* With one slot every key collides: the limiter never starves a key, it
 * only lets it log early. */
static void test_limiter_collisions_log_early(void **state)
{
    (void)state;
    fq_log_limiter *l;
    assert_int_equal(fq_log_limiter_create(&l, 1, 1000), FQ_OK);
    assert_true(fq_log_limiter_allow(l, "a", 0, NULL));
    assert_true(fq_log_limiter_allow(l, "b", 1, NULL));
    assert_true(fq_log_limiter_allow(l, "a", 2, NULL));
    assert_false(fq_log_limiter_allow(l, "a", 3, NULL));
    fq_log_limiter_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_logfmt_reads_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_reads_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_level_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_values_are_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_do_not_interleave, setup, teardown),
        cmocka_unit_test(test_limiter_one_per_interval),
        cmocka_unit_test(test_limiter_collisions_log_early),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
