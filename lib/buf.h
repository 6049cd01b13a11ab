/* buf.h -- a growable byte buffer, the UTF-8 check and the string escapes, header-only, for every writer of text. */
#ifndef FQ_BUF_H
#define FQ_BUF_H

/*
 * Header-only on purpose: the metrics renderer, the HTTP adapter, the log
 * writer, the JSON reader and writer, the journal and the config's summary
 * all need these few lines, and a header carries no link-order dependency
 * between their libraries.
 */

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fq.h"

/* A byte string that grows; p is NUL-terminated whenever cap > 0. A zeroed
 * fq_buf is an empty buffer. */
typedef struct fq_buf {
    char *p;        /* malloc'd; NULL until the first append */
    size_t len;     /* bytes used, excluding the NUL */
    size_t cap;     /* bytes allocated */
    int failed;     /* an append ran out of memory; the content is short */
} fq_buf;

/* Make room for extra more bytes (plus the NUL). On error nothing is
 * changed, failed is set and FQ_ENOMEM returned. */
static inline fq_status fq_buf_reserve(fq_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return FQ_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return FQ_ENOMEM;
    }
    b->p = p;
    b->cap = cap;
    return FQ_OK;
}

static inline void fq_buf_append(fq_buf *b, const char *s, size_t n)
{
    if (fq_buf_reserve(b, n) != FQ_OK)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static inline void fq_buf_puts(fq_buf *b, const char *s)
{
    fq_buf_append(b, s, strlen(s));
}

static inline void fq_buf_putc(fq_buf *b, char c)
{
    fq_buf_append(b, &c, 1);
}

__attribute__((format(printf, 2, 3)))
static inline void fq_buf_printf(fq_buf *b, const char *fmt, ...)
{
    va_list ap;
    char small[128];

    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        fq_buf_append(b, small, (size_t)n);
        return;
    }
    if (fq_buf_reserve(b, (size_t)n) != FQ_OK)
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Forget the content, keep the memory. */
static inline void fq_buf_reset(fq_buf *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->p)
        b->p[0] = '\0';
}

static inline void fq_buf_free(fq_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* The length of the well-formed UTF-8 sequence at s[0..n) (n >= 1), or 0
 * if the bytes there are not one (Unicode table 3-7: no overlong forms, no
 * surrogates, nothing past U+10FFFF). Writers replace a 0 with U+FFFD and
 * move on by one byte, so that text from clients always leaves as valid
 * UTF-8; the JSON reader refuses it. */
static inline size_t fq_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t k;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        k = 2;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        k = 3;
        lo = s[0] == 0xe0 ? 0xa0 : lo;
        hi = s[0] == 0xed ? 0x9f : hi;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        k = 4;
        lo = s[0] == 0xf0 ? 0x90 : lo;
        hi = s[0] == 0xf4 ? 0x8f : hi;
    } else {
        return 0;
    }
    if (n < k || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return k;
}

#define FQ_UTF8_REPLACEMENT "\xef\xbf\xbd"  /* U+FFFD */

/* The unit of a JSON string's inside that starts at p[0..n) (n >= 1): its
 * length in *step, and NULL if those bytes go out as they are, else the
 * escape that stands for them (NUL-terminated, in esc or static): \" \\
 * \n \r \t, \u00XX for other control characters and DEL, and U+FFFD
 * for a byte that does not begin well-formed UTF-8 (*step 1). The one
 * escaping of client text for the JSON writer and the log lines, which
 * quote logfmt values the same way. */
static inline const char *fq_json_escape(const unsigned char *p, size_t n, size_t *step,
                                         char esc[8])
{
    unsigned char c = p[0];

    *step = 1;
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
    }
    if (c < 0x20 || c == 0x7f) {
        snprintf(esc, 8, "\\u%04x", c);
        return esc;
    }
    if (c < 0x80)
        return NULL;
    if ((*step = fq_utf8_seq(p, n)) != 0)
        return NULL;
    *step = 1;
    return FQ_UTF8_REPLACEMENT;
}

/* Whether s can stand bare as a logfmt value: a non-empty run of printable
 * ASCII with no space, '=', '"' or '\'. Else it is quoted, its inside
 * escaped as a JSON string's (fq_json_escape). */
static inline bool fq_logfmt_bare(const char *s)
{
    if (!*s)
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= ' ' || *p >= 0x7f || *p == '=' || *p == '"' || *p == '\\')
            return false;
    return true;
}

#endif
