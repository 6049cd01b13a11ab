/* buf.h -- a growable byte buffer and a UTF-8 check, header-only, for the text renderers. */
#ifndef FQ_BUF_H
#define FQ_BUF_H

/*
 * Header-only on purpose: the metrics renderer, the HTTP adapter and the
 * log writer all need these few lines, and a header carries no link-order
 * dependency between their libraries.
 */

#include <stdarg.h>
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

/* The length of the well-formed UTF-8 sequence at s[0..n), or 0 if the
 * bytes there are not one (overlong forms, surrogates and code points past
 * U+10FFFF are not). Callers replace a 0 with U+FFFD and move on by one
 * byte, so that text from clients always leaves as valid UTF-8. */
static inline size_t fq_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    unsigned cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2; cp = c & 0x1f; min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3; cp = c & 0x0f; min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4; cp = c & 0x07; min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

#define FQ_UTF8_REPLACEMENT "\xef\xbf\xbd"  /* U+FFFD */

#endif
