/* log.h -- structured event logs on stderr: one line per event, logfmt or JSON. */
#ifndef FQ_LOG_H
#define FQ_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fq.h"

typedef enum fq_log_level {
    FQ_LOG_DEBUG = 0,
    FQ_LOG_INFO,
    FQ_LOG_WARN,
    FQ_LOG_ERROR,
} fq_log_level;

typedef enum fq_log_format {
    FQ_LOG_LOGFMT = 0,  /* ts=... level=info msg="..." key=value */
    FQ_LOG_JSON,        /* {"ts":"...","level":"info","msg":"...","key":value} */
} fq_log_format;

/* Longest line written, newline included: one write(2) of at most this is
 * atomic on a pipe (PIPE_BUF), so lines from many threads never interleave
 * even where a log collector reads stderr through a pipe. A line that would
 * be longer is cut inside a value and ends with truncated=true. */
#define FQ_LOG_LINE_MAX 4096

enum fq_log_type { FQ_LOG_STR, FQ_LOG_INT, FQ_LOG_UINT, FQ_LOG_DOUBLE, FQ_LOG_BOOL };

/* One key=value field. Keys are the program's own ([A-Za-z0-9_.-]); values
 * may be anything, client input included: they are quoted and escaped as
 * the format needs, and bytes that are not UTF-8 become U+FFFD. */
typedef struct fq_log_field {
    const char *key;
    enum fq_log_type type;
    union {
        const char *s;      /* NULL is written as an empty string */
        int64_t i;
        uint64_t u;
        double d;           /* NaN and infinities: strings in JSON */
        bool b;
    } v;
} fq_log_field;

#define FQ_STR(k, x)  ((fq_log_field){.key = (k), .type = FQ_LOG_STR, .v.s = (x)})
#define FQ_INT(k, x)  ((fq_log_field){.key = (k), .type = FQ_LOG_INT, .v.i = (x)})
#define FQ_UINT(k, x) ((fq_log_field){.key = (k), .type = FQ_LOG_UINT, .v.u = (x)})
#define FQ_DBL(k, x)  ((fq_log_field){.key = (k), .type = FQ_LOG_DOUBLE, .v.d = (x)})
#define FQ_BOOL(k, x) ((fq_log_field){.key = (k), .type = FQ_LOG_BOOL, .v.b = (x)})

/* Parse "debug|info|warn|error" and "logfmt|json"; NULL or "" is the
 * default (info, logfmt). On error *out is unchanged. */
fq_status fq_log_level_parse(fq_log_level *out, const char *s);
fq_status fq_log_format_parse(fq_log_format *out, const char *s);

/* Set level and format from the config's log.level and log.format strings
 * (NULL takes the default). On error nothing is changed and err says why. */
fq_status fq_log_init(const char *level, const char *format, char *err, size_t errlen);

/* Set level and format directly. Safe from any thread. */
void fq_log_set(fq_log_level level, fq_log_format format);

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Where lines go: stderr unless set (tests pass a tmpfile). NULL: stderr. */
void fq_log_set_sink(FILE *f);
#endif

/* Whether an event at level would be written: guard costly field setup. */
bool fq_log_enabled(fq_log_level level);

/* Write one event. Safe from any thread (nats.c callbacks log too); each
 * call writes one whole line. Never fails the caller: a line that cannot be
 * written is lost. */
void fq_log_kv(fq_log_level level, const char *msg, const fq_log_field *fields, size_t n);

/* fq_log(FQ_LOG_WARN, "queue is old", FQ_STR("tenant", id), FQ_UINT("age_ms", a));
 * The leading empty field lets the list be empty. */
#define fq_log(level, msg, ...)                                              \
    fq_log_kv((level), (msg),                                                \
              (const fq_log_field[]){{0}, __VA_ARGS__} + 1,                  \
              sizeof((const fq_log_field[]){{0}, __VA_ARGS__}) / sizeof(fq_log_field) - 1)

/*
 * A rate limiter for repeated warnings about many keys (tenants): at most
 * one event per key per interval, counting what it suppressed so the next
 * line can say so. Pure: the caller supplies now, in any unit it likes, and
 * the interval in the same unit; no clock, no lock (use it from one thread
 * or under the caller's lock). Memory is fixed at create: keys hash into
 * slots, and a key that lands in a slot held by another takes it over, so
 * under heavy collision a key may be logged early, never starved.
 */
typedef struct fq_log_limiter fq_log_limiter;

/* slots: keys tracked at once (rounded up to a power of two); interval: the
 * least time between two events of one key. On error *out is NULL. */
fq_status fq_log_limiter_create(fq_log_limiter **out, size_t slots, uint64_t interval);
void fq_log_limiter_destroy(fq_log_limiter *l);

/* May an event for key at now be logged? If so, *suppressed (if given) is
 * the number of events of this key refused since the last one allowed. */
bool fq_log_limiter_allow(fq_log_limiter *l, const char *key, uint64_t now,
                          uint64_t *suppressed);

#endif
