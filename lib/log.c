/* log.c -- structured event logs on stderr: one line per event, logfmt or JSON. */
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"

/*
 * Principles:
 *  - A line is built whole on the caller's stack, then written with one
 *    write(2) under a lock: threads never interleave, and a line is never
 *    longer than FQ_LOG_LINE_MAX, so a flood of client input cannot blow up
 *    a log line (it is cut, and says so).
 *  - Whatever is cut, the line stays well-formed: the room to close a
 *    value and add the truncated marker is reserved from the start.
 *  - Values are escaped one way for both formats (JSON string escapes,
 *    which logfmt readers accept inside quotes), so both read back alike.
 */

static const char *const fq_log_level_names[] = {"debug", "info", "warn", "error"};

static _Atomic int fq_log_min = FQ_LOG_INFO;
static _Atomic int fq_log_fmt = FQ_LOG_LOGFMT;
static pthread_mutex_t fq_log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *fq_log_sink;       /* NULL: stderr; guarded by fq_log_lock */

/* Room kept back for closing a cut value and the truncated marker. */
#define FQ_LOG_RESERVE 32

typedef struct fq_line {
    char b[FQ_LOG_LINE_MAX];
    size_t len;
    bool cut;           /* something did not fit: stop adding content */
    bool json;
} fq_line;

fq_status fq_log_level_parse(fq_log_level *out, const char *s)
{
    if (!s || !*s) {
        *out = FQ_LOG_INFO;
        return FQ_OK;
    }
    for (int i = FQ_LOG_DEBUG; i <= FQ_LOG_ERROR; i++) {
        if (strcmp(s, fq_log_level_names[i]) == 0) {
            *out = (fq_log_level)i;
            return FQ_OK;
        }
    }
    return FQ_EINVAL;
}

fq_status fq_log_format_parse(fq_log_format *out, const char *s)
{
    if (!s || !*s || strcmp(s, "logfmt") == 0)
        *out = FQ_LOG_LOGFMT;
    else if (strcmp(s, "json") == 0)
        *out = FQ_LOG_JSON;
    else
        return FQ_EINVAL;
    return FQ_OK;
}

fq_status fq_log_init(const char *level, const char *format, char *err, size_t errlen)
{
    fq_log_level l;
    fq_log_format f;

    if (fq_log_level_parse(&l, level) != FQ_OK) {
        snprintf(err, errlen, "log.level \"%s\" is not one of debug, info, warn, error", level);
        return FQ_EINVAL;
    }
    if (fq_log_format_parse(&f, format) != FQ_OK) {
        snprintf(err, errlen, "log.format \"%s\" is not one of logfmt, json", format);
        return FQ_EINVAL;
    }
    fq_log_set(l, f);
    return FQ_OK;
}

void fq_log_set(fq_log_level level, fq_log_format format)
{
    atomic_store(&fq_log_min, (int)level);
    atomic_store(&fq_log_fmt, (int)format);
}

void fq_log_set_sink(FILE *f)
{
    pthread_mutex_lock(&fq_log_lock);
    fq_log_sink = f;
    pthread_mutex_unlock(&fq_log_lock);
}

bool fq_log_enabled(fq_log_level level)
{
    return (int)level >= atomic_load(&fq_log_min);
}

/* Append n bytes if they fit below the reserve; otherwise mark the line cut. */
static bool line_put(fq_line *l, const char *s, size_t n)
{
    if (l->cut || l->len + n > sizeof l->b - FQ_LOG_RESERVE) {
        l->cut = true;
        return false;
    }
    memcpy(l->b + l->len, s, n);
    l->len += n;
    return true;
}

/* Append from the reserve: only for closing what was opened. */
static void line_close(fq_line *l, const char *s)
{
    size_t n = strlen(s);
    memcpy(l->b + l->len, s, n);
    l->len += n;
}

/* Append s escaped as the inside of a JSON string, stopping at the first
 * unit that does not fit. */
static void line_escaped(fq_line *l, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    char u[8];

    while (n > 0) {
        size_t step;
        const char *unit = fq_json_escape(p, n, &step, u);
        if (!line_put(l, unit ? unit : (const char *)p, unit ? strlen(unit) : step))
            return;
        p += step;
        n -= step;
    }
}

static void line_string(fq_line *l, const char *s)
{
    if (!s)
        s = "";
    if (!l->json && fq_logfmt_bare(s)) {
        line_put(l, s, strlen(s));
        return;
    }
    if (!line_put(l, "\"", 1))
        return;
    line_escaped(l, s);
    line_close(l, "\"");    /* opened, so closed even when cut */
}

/* Start a field: separator and key. Room for the key and a short value is
 * checked up front, so that a number is never split from its key. */
static bool line_key(fq_line *l, const char *key)
{
    size_t klen = key ? strlen(key) : 0;

    if (l->cut || l->len + 6 * klen + 40 > sizeof l->b - FQ_LOG_RESERVE) {
        l->cut = true;
        return false;
    }
    if (l->json) {
        line_put(l, ",\"", 2);
        line_escaped(l, key ? key : "");
        line_put(l, "\":", 2);
        return true;
    }
    line_put(l, " ", 1);
    if (klen == 0)
        line_put(l, "_", 1);
    for (size_t i = 0; i < klen; i++) {
        char c = key[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
        line_put(l, ok ? &key[i] : "_", 1);
    }
    line_put(l, "=", 1);
    return true;
}

static void line_double(fq_line *l, double d)
{
    char num[40];
    const char *word = NULL;

    if (isnan(d))
        word = "NaN";
    else if (isinf(d))
        word = d > 0 ? "+Inf" : "-Inf";
    if (word) {
        if (l->json)
            line_string(l, word);   /* JSON has no literal for these */
        else
            line_put(l, word, strlen(word));
        return;
    }
    line_put(l, num, (size_t)snprintf(num, sizeof num, "%.15g", d));
}

static void line_field(fq_line *l, const fq_log_field *f)
{
    char num[32];

    if (!line_key(l, f->key))
        return;
    switch (f->type) {
    case FQ_LOG_STR:
        line_string(l, f->v.s);
        break;
    case FQ_LOG_INT:
        line_put(l, num, (size_t)snprintf(num, sizeof num, "%" PRId64, f->v.i));
        break;
    case FQ_LOG_UINT:
        line_put(l, num, (size_t)snprintf(num, sizeof num, "%" PRIu64, f->v.u));
        break;
    case FQ_LOG_DOUBLE:
        line_double(l, f->v.d);
        break;
    case FQ_LOG_BOOL:
        line_put(l, f->v.b ? "true" : "false", f->v.b ? 4 : 5);
        break;
    }
}

/* RFC 3339 UTC with milliseconds: 2026-12-02T17:00:00.123Z */
static void line_timestamp(char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000L);
}

static void line_write(const fq_line *l)
{
    pthread_mutex_lock(&fq_log_lock);
    int fd = fq_log_sink ? fileno(fq_log_sink) : STDERR_FILENO;
    size_t off = 0;
    while (off < l->len) {
        ssize_t w = write(fd, l->b + off, l->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;      /* nowhere to report it: the line is lost */
        off += (size_t)w;
    }
    pthread_mutex_unlock(&fq_log_lock);
}

void fq_log_kv(fq_log_level level, const char *msg, const fq_log_field *fields, size_t n)
{
    if (!fq_log_enabled(level))
        return;
    if ((unsigned)level > FQ_LOG_ERROR)
        level = FQ_LOG_ERROR;

    fq_line l;
    char ts[40];
    l.len = 0;
    l.cut = false;
    l.json = atomic_load(&fq_log_fmt) == FQ_LOG_JSON;
    line_timestamp(ts, sizeof ts);

    if (l.json) {
        line_put(&l, "{\"ts\":", 6);
        line_string(&l, ts);
    } else {
        line_put(&l, "ts=", 3);
        line_put(&l, ts, strlen(ts));
    }
    line_field(&l, &FQ_STR("level", fq_log_level_names[level]));
    line_field(&l, &FQ_STR("msg", msg));
    for (size_t i = 0; i < n; i++)
        line_field(&l, &fields[i]);

    if (l.cut)
        line_close(&l, l.json ? ",\"truncated\":true" : " truncated=true");
    line_close(&l, l.json ? "}\n" : "\n");
    line_write(&l);
}

/* ---- rate limiter ---- */

typedef struct fq_limit_slot {
    uint64_t hash;          /* the key that holds the slot */
    uint64_t next;          /* earliest time its next event may be logged */
    uint64_t suppressed;    /* events refused since the last one allowed */
    bool used;
} fq_limit_slot;

struct fq_log_limiter {
    uint64_t interval;      /* least time between two events of a key */
    size_t mask;            /* slots - 1; slots is a power of two */
    fq_limit_slot slot[];
};

fq_status fq_log_limiter_create(fq_log_limiter **out, size_t slots, uint64_t interval)
{
    *out = NULL;
    if (slots == 0 || slots > ((size_t)1 << 24))
        return FQ_EINVAL;
    size_t n = 1;
    while (n < slots)
        n <<= 1;
    fq_log_limiter *l = calloc(1, sizeof *l + n * sizeof l->slot[0]);
    if (!l)
        return FQ_ENOMEM;
    l->interval = interval;
    l->mask = n - 1;
    *out = l;
    return FQ_OK;
}

void fq_log_limiter_destroy(fq_log_limiter *l)
{
    free(l);
}

bool fq_log_limiter_allow(fq_log_limiter *l, const char *key, uint64_t now,
                          uint64_t *suppressed)
{
    /* Unkeyed: a collision an attacker could plan only logs early. */
    uint64_t h = fq_fnv1a(key);
    fq_limit_slot *s = &l->slot[h & l->mask];
    uint64_t refused = 0;

    if (s->used && s->hash == h) {
        if (now < s->next) {
            s->suppressed++;
            return false;
        }
        refused = s->suppressed;
    }
    s->used = true;
    s->hash = h;
    s->next = now + l->interval;
    s->suppressed = 0;
    if (suppressed)
        *suppressed = refused;
    return true;
}
