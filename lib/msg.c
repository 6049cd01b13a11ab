/* msg.c -- the wire contract's message bodies: submit fields, completions, admin requests, and a JSON writer for replies. */
/*
 * Principles:
 *
 * - A body is bytes from a client and is read only through its length: NATS
 *   payloads are not NUL-terminated, so cJSON gets an explicit length and
 *   never the require_null_terminated option (which would read past it).
 *
 * - "Is it a JSON object?" must have one answer that a strict reader on the
 *   worker's side would share. cJSON is lenient where that matters, so a
 *   scan first refuses what it lets through: invalid UTF-8, raw control
 *   characters, and a byte order mark; cJSON then checks the structure, and
 *   anything after the object makes the body not an object either. Number
 *   syntax is left to cJSON (it reads "01" as 1), which changes no outcome.
 *
 * - cJSON cuts a string at a \u0000 escape, so "run_id\u0000x" would read as
 *   run_id. The scan notes such an escape in the top-level object's keys and
 *   string values, the only ones fairq reads, and the object is refused then
 *   rather than misread; deeper ones are the worker's business.
 *
 * - JSON numbers are doubles: a count must be finite, integral and in range.
 *
 * - A submit body is read without cJSON (fq_scan_object, below): it may be
 *   a megabyte a tenant chose, read on the proxy's loop thread, so nothing
 *   may grow with it but one pass over its bytes. Completions and admin
 *   bodies are refused unread past 4096 bytes, and still go through cJSON.
 *
 * - Error sentences go into the Fair-Error header, so they never quote a
 *   client's string, only its length or an offending byte in hex.
 *
 * - cJSON allocates every value and every key and frees each again, and the
 *   proxy parses each submit and each completion: malloc was a large part of
 *   its cost (docs/perf.md). So cJSON's hooks, installed once before main,
 *   take memory from a thread-local bump arena, but only between the start
 *   of a parse here and the deletion of its tree (fq_msg_object ...
 *   fq_msg_release), on the thread doing it; a tree never outlives that, and
 *   never leaves the thread. Anywhere else (other cJSON users in the process
 *   keep trees as long as they like) the hooks are malloc and free. Past the
 *   arena's end a parse falls back to malloc; the free hook ignores arena
 *   pointers and frees the rest.
 */
#include "msg.h"
#include "buf.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define FQ_MSG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FQ_MSG_ASAN 1
#endif
#endif
#ifdef FQ_MSG_ASAN
#include <sanitizer/asan_interface.h>
/* The arena is poisoned except for the blocks handed out during a parse, so
 * AddressSanitizer still sees an overrun of one and a use after the parse. */
#define FQ_ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define FQ_ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define FQ_ARENA_POISON(p, n) ((void)(p), (void)(n))
#define FQ_ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* 8 KiB holds the tree of a body of about 3 KB of short fields (a cJSON
 * value is 64 bytes, each key and string its length rounded up to 16). */
#define FQ_ARENA_SIZE 8192
#define FQ_ARENA_ALIGN 16

typedef struct fq_arena {
    _Alignas(FQ_ARENA_ALIGN) unsigned char buf[FQ_ARENA_SIZE];
    size_t used;
    bool active;        /* inside fq_msg_object ... fq_msg_release */
} fq_arena;

static _Thread_local fq_arena fq_msg_arena;
static bool fq_msg_arena_on = true;

static void *fq_arena_malloc(size_t n)
{
    fq_arena *a = &fq_msg_arena;

    if (a->active) {
        size_t need = n ? (n + FQ_ARENA_ALIGN - 1) & ~(size_t)(FQ_ARENA_ALIGN - 1)
                        : FQ_ARENA_ALIGN;
        if (n <= FQ_ARENA_SIZE && need <= FQ_ARENA_SIZE - a->used) {
            void *p = a->buf + a->used;
            a->used += need;
            FQ_ARENA_UNPOISON(p, n);
            return p;
        }
    }
    return malloc(n);
}

/* A pointer into this thread's arena is released with the whole arena; it
 * cannot be another thread's, since trees in an arena never leave the parse
 * that made them. Addresses are compared as integers: the pointer may belong
 * to another object altogether. */
static void fq_arena_free(void *p)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)fq_msg_arena.buf;

    if (u - b >= FQ_ARENA_SIZE)
        free(p);
}

/* Before main and any thread: cJSON_InitHooks writes a global that every
 * cJSON call reads. */
__attribute__((constructor))
static void fq_msg_hooks(void)
{
    cJSON_Hooks h = {.malloc_fn = fq_arena_malloc, .free_fn = fq_arena_free};

    cJSON_InitHooks(&h);
}

void fq_msg_set_arena(bool on)
{
    fq_msg_arena_on = on;
}

/* The start of a parse: cJSON allocates from the arena, empty, from now on. */
static void fq_msg_acquire(void)
{
    fq_arena *a = &fq_msg_arena;

    a->used = 0;
    a->active = fq_msg_arena_on;
    FQ_ARENA_POISON(a->buf, FQ_ARENA_SIZE);
}

/* The end of a parse: delete its tree (NULL is fine), then leave the arena. */
static void fq_msg_release(cJSON *root)
{
    fq_arena *a = &fq_msg_arena;

    cJSON_Delete(root);
    a->active = false;
    a->used = 0;
    FQ_ARENA_POISON(a->buf, FQ_ARENA_SIZE);
}

static const char *const fq_done_names[] = {
    [FQ_DONE_OK] = "ok",
    [FQ_DONE_ERROR] = "error",
    [FQ_DONE_CANCELLED] = "cancelled",
};
#define FQ_DONE_COUNT (sizeof fq_done_names / sizeof fq_done_names[0])

__attribute__((format(printf, 3, 4)))
static fq_status fq_msg_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return FQ_EINVAL;
}

static bool fq_json_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Whether none of the 8 bytes at p is one a string's scan must look at: a
 * control character, a quote, a backslash or a byte of a multibyte UTF-8
 * sequence. The bytes of strings are most of a body and were most of the
 * scan's time; this takes them 8 at a time. (w - 0x01..*n) & ~w & 0x80..
 * is nonzero if a byte of w is below n (n <= 0x80): the lowest such byte
 * wraps to a value with its top bit set, with no borrow from below it. A
 * false alarm would only send the bytes to the byte-wise path. */
static bool fq_msg_plain8(const unsigned char *p)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t v, q, b;

    memcpy(&v, p, 8);
    q = v ^ (ones * '"');       /* a zero byte where v has a quote */
    b = v ^ (ones * '\\');      /* a zero byte where v has a backslash */
    return ((((v - ones * 0x20) & ~v) | ((q - ones) & ~q) | ((b - ones) & ~b) | v)
            & high) == 0;
}

/* Check what cJSON does not in p[0..n): UTF-8 and control characters; note
 * in *nul_top a \u0000 escape in a string of the top-level object. Returns
 * NULL if the text may be JSON, else why it is not. */
static const char *fq_msg_scan(const unsigned char *p, size_t n, bool *nul_top)
{
    long depth = 0;
    bool in_str = false;

    *nul_top = false;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];

        if (in_str && n - i >= 8 && fq_msg_plain8(p + i)) {
            i += 8;
            continue;
        }
        if (c >= 0x80) {
            size_t k = fq_utf8_seq(p + i, n - i);
            if (!k)
                return "invalid UTF-8";
            i += k;
            continue;
        }
        if (c < 0x20 && (in_str || !fq_json_space(c)))
            return "a raw control character";
        if (in_str && c == '\\') {
            if (depth == 1 && n - i >= 6 && memcmp(p + i + 1, "u0000", 5) == 0)
                *nul_top = true;
            i += 2;     /* the escaped character cannot end the string */
            continue;
        }
        if (c == '"')
            in_str = !in_str;
        else if (!in_str && (c == '{' || c == '['))
            depth++;
        else if (!in_str && (c == '}' || c == ']'))
            depth--;
        i++;
    }
    return NULL;
}

/* Parse body[0..len) if it is strictly a JSON object. Returns the object (the
 * caller reads it on this thread, then hands it to fq_msg_release, even if it
 * is NULL) and whether the scan saw a top-level \u0000, or NULL with the
 * reason in *why. */
static cJSON *fq_msg_object(const void *body, size_t len, bool *nul_top,
                            const char **why)
{
    const unsigned char *p = body;
    const char *end = NULL;
    size_t i = 0;
    bool nul = false;
    cJSON *root;

    *nul_top = false;
    while (i < len && fq_json_space(p[i]))
        i++;
    if (i == len) {
        *why = "it is empty";
        return NULL;
    }
    if (p[i] != '{') {
        *why = "it does not start with {";
        return NULL;
    }
    if ((*why = fq_msg_scan(p + i, len - i, &nul)))
        return NULL;
    fq_msg_acquire();
    root = cJSON_ParseWithLengthOpts((const char *)p + i, len - i, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        fq_msg_release(root);
        *why = "it is not valid JSON";
        return NULL;
    }
    for (i = (size_t)((const unsigned char *)end - p); i < len; i++) {
        if (!fq_json_space(p[i])) {
            fq_msg_release(root);
            *why = "data follows the JSON object";
            return NULL;
        }
    }
    *nul_top = nul;
    return root;
}

/* Find in obj the members named names[0..n), into items[] (NULL if absent;
 * a null value counts as absent). A name given twice is refused: readers
 * that keep the first and ones that keep the last would disagree. */
static fq_status fq_msg_members(const cJSON **items, const char *const *names,
                                size_t n, const cJSON *obj, char *err, size_t errlen)
{
    bool seen[8] = {false};

    for (size_t k = 0; k < n; k++)
        items[k] = NULL;
    for (const cJSON *c = obj->child; c; c = c->next) {
        for (size_t k = 0; k < n; k++) {
            /* most members are none of names: their first byte says so */
            if (c->string[0] != names[k][0] || strcmp(c->string, names[k]) != 0)
                continue;
            if (seen[k])
                return fq_msg_fail(err, errlen, "%s: given twice in the body", names[k]);
            seen[k] = true;
            items[k] = cJSON_IsNull(c) ? NULL : c;
        }
    }
    return FQ_OK;
}

static const char *fq_msg_name_problem(const char *s, size_t len, size_t max,
                                       size_t *at)
{
    if (len == 0)
        return "is empty";
    if (len > max)
        return "is too long";
    for (*at = 0; *at < len; (*at)++)
        if ((unsigned char)s[*at] < 0x21 || (unsigned char)s[*at] > 0x7e)
            return "has a byte that is not allowed";
    return NULL;
}

int fq_msg_name_valid(const char *s, size_t len, size_t max)
{
    size_t at;

    return fq_msg_name_problem(s, len, max, &at) == NULL;
}

/* Copy the NUL-terminated name s into dst (max + 1 bytes) if it is valid. */
static fq_status fq_msg_name(char *dst, size_t max, const char *s,
                             const char *field, char *err, size_t errlen)
{
    size_t len = strnlen(s, max + 1), at = 0;
    const char *why = fq_msg_name_problem(s, len, max, &at);

    if (!why) {
        memcpy(dst, s, len + 1);
        return FQ_OK;
    }
    if (len == 0 || len > max)
        return fq_msg_fail(err, errlen, "%s: %s; it must be 1 to %zu bytes",
                           field, why, max);
    return fq_msg_fail(err, errlen, "%s: %s (0x%02x at offset %zu); it must be "
                       "printable ASCII without spaces or control characters",
                       field, why, (unsigned char)s[at], at);
}

static fq_status fq_msg_name_item(char *dst, size_t max, const cJSON *item,
                                  const char *field, char *err, size_t errlen)
{
    if (!cJSON_IsString(item))
        return fq_msg_fail(err, errlen, "%s: must be a string", field);
    return fq_msg_name(dst, max, item->valuestring, field, err, errlen);
}

/* A JSON number that must be an integer in [lo, hi] (hi < 2^53, so every
 * integer in range is exact as a double). */
static fq_status fq_msg_uint_item(uint64_t *dst, const cJSON *item, uint64_t lo,
                                  uint64_t hi, const char *field, char *err,
                                  size_t errlen)
{
    double v;

    if (!cJSON_IsNumber(item))
        return fq_msg_fail(err, errlen, "%s: must be a number, an integer from "
                           "%" PRIu64 " to %" PRIu64, field, lo, hi);
    v = item->valuedouble;
    if (!isfinite(v) || v < (double)lo || v > (double)hi || v != (double)(uint64_t)v)
        return fq_msg_fail(err, errlen, "%s: must be an integer from %" PRIu64
                           " to %" PRIu64 ", got %.15g", field, lo, hi, v);
    *dst = (uint64_t)v;
    return FQ_OK;
}

/* Header text that must be decimal digits only, of a value in [lo, hi]. */
static fq_status fq_msg_uint_text(uint64_t *dst, const char *s, uint64_t lo,
                                  uint64_t hi, const char *field, char *err,
                                  size_t errlen)
{
    uint64_t v = 0;
    size_t i;

    for (i = 0; s[i] >= '0' && s[i] <= '9'; i++)
        if (v <= hi)
            v = v * 10 + (uint64_t)(s[i] - '0');
    if (i == 0 || s[i] != '\0' || v < lo || v > hi)
        return fq_msg_fail(err, errlen, "%s: must be decimal digits only, "
                           "of an integer from %" PRIu64 " to %" PRIu64, field, lo, hi);
    *dst = v;
    return FQ_OK;
}

/* The submit body's scanner. A submit may be a megabyte of members fairq
 * never reads, parsed on the proxy's loop thread: building cJSON's tree of it
 * took 50 to 190 ms and stalled every tenant's dispatch. So a submit body is
 * read in one pass that builds nothing: it checks the whole text as the
 * cJSON path above does (fq_msg_object: the scan's UTF-8, control character
 * and \u0000 rules, then cJSON's grammar, quirks included: its numbers, its
 * escapes, its nesting limit) and notes where the four fields' values are;
 * only those are decoded. tests/fuzz/fuzz_submit.c holds the cJSON reading
 * it replaced and checks both give the same verdict and fields. */

/* cJSON's CJSON_NESTING_LIMIT: a container inside 1000 others is refused. */
#define FQ_SCAN_DEPTH 1000

enum fq_scan_type { FQ_SCAN_ABSENT, FQ_SCAN_STRING, FQ_SCAN_NUMBER, FQ_SCAN_OTHER };

/* The fields read: run_id, workflow, est_tokens, tenant, and class, which
 * is read only where priority classes are configured, so that a body's
 * class (unread before classes existed) refuses nothing here; subtenant. */
#define FQ_SCAN_FIELDS 6
#define FQ_SCAN_CLASS 4
#define FQ_SCAN_SUBTENANT 5

/* Where one of the fields' value is in the body. */
typedef struct fq_scan_field {
    enum fq_scan_type type;     /* ABSENT also for null */
    const unsigned char *s;     /* a string's content or a number's text */
    size_t len;                 /* its length in bytes */
} fq_scan_field;

static unsigned fq_hex4(const unsigned char *s)
{
    unsigned h = 0;

    /* as cJSON's parse_hex4: a non-hex digit makes the whole value 0 */
    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        if (c >= '0' && c <= '9')
            h = h << 4 | (unsigned)(c - '0');
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            h = h << 4 | (unsigned)((c | 0x20) - 'a' + 10);
        else
            return 0;
    }
    return h;
}

/* The \u escape at s (a surrogate pair as one code point) as UTF-8 into
 * b[0..*k); *adv: the escape's length. False if it is cut short, or a
 * surrogate is not in a pair. */
static bool fq_scan_u(unsigned char b[4], size_t *k, size_t *adv, const unsigned char *s,
                      const unsigned char *e)
{
    if (e - s < 6)
        return false;
    unsigned long cp = fq_hex4(s + 2);
    *adv = 6;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return false;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        unsigned lo;
        if (e - s - 6 < 6 || s[6] != '\\' || s[7] != 'u')
            return false;
        lo = fq_hex4(s + 8);
        if (lo < 0xdc00 || lo > 0xdfff)
            return false;
        cp = 0x10000 + (((cp & 0x3ff) << 10) | (lo & 0x3ff));
        *adv = 12;
    }
    if (cp < 0x80) {
        *k = 1;
        b[0] = (unsigned char)cp;
    } else if (cp < 0x800) {
        *k = 2;
        b[0] = (unsigned char)(0xc0 | cp >> 6);
    } else if (cp < 0x10000) {
        *k = 3;
        b[0] = (unsigned char)(0xe0 | cp >> 12);
    } else {
        *k = 4;
        b[0] = (unsigned char)(0xf0 | cp >> 18);
    }
    for (size_t j = 1; j < *k; j++)
        b[j] = (unsigned char)(0x80 | ((cp >> (6 * (*k - 1 - j))) & 0x3f));
    return true;
}

/* Decode a string's content s[0..e) as cJSON does (e is its closing quote),
 * into dst[0..cap) if dst: up to the first NUL, as cJSON's C string ends
 * there, and at most cap - 1 bytes, NUL-terminated. Returns false where
 * cJSON refuses the string. */
static bool fq_scan_unescape(char *dst, size_t cap, const unsigned char *s,
                             const unsigned char *e)
{
    size_t o = 0;
    bool cut = false;

    while (s < e) {
        unsigned char b[4];
        size_t k = 1, adv = 2;

        if (*s != '\\') {
            b[0] = *s;
            adv = 1;
        } else {
            switch (s[1]) {
            case 'b': b[0] = '\b'; break;
            case 'f': b[0] = '\f'; break;
            case 'n': b[0] = '\n'; break;
            case 'r': b[0] = '\r'; break;
            case 't': b[0] = '\t'; break;
            case '"': case '\\': case '/': b[0] = s[1]; break;
            case 'u':
                if (!fq_scan_u(b, &k, &adv, s, e))
                    return false;
                break;
            default:
                return false;
            }
        }
        for (size_t j = 0; dst && j < k && !cut; j++) {
            if (b[j] == 0)
                cut = true;
            else if (o + 1 < cap)
                dst[o++] = (char)b[j];
        }
        s += adv;
    }
    if (dst && cap)
        dst[o] = '\0';
    return true;
}

/* The string at p[*i] (a quote) as fq_msg_scan and cJSON read it: its end,
 * past which *i moves, and *nul_top if it is in the top-level object (top)
 * and holds a \u0000 escape; its content is [*s, *e). Returns NULL or why
 * the body is not a JSON object. */
static const char *fq_scan_string(const unsigned char *p, size_t n, size_t *i,
                                  bool top, bool *nul_top,
                                  const unsigned char **s, const unsigned char **e)
{
    size_t j = *i + 1;
    bool esc = false;

    for (;;) {
        unsigned char c;

        if (j >= n)
            return "it is not valid JSON";
        if (n - j >= 8 && fq_msg_plain8(p + j)) {
            j += 8;
            continue;
        }
        c = p[j];
        if (c >= 0x80) {
            size_t k = fq_utf8_seq(p + j, n - j);
            if (!k)
                return "invalid UTF-8";
            j += k;
            continue;
        }
        if (c < 0x20)
            return "a raw control character";
        if (c == '"')
            break;
        if (c == '\\') {
            if (top && n - j >= 6 && memcmp(p + j + 1, "u0000", 5) == 0)
                *nul_top = true;
            esc = true;
            j += 2;     /* the escaped character cannot end the string */
            continue;
        }
        j++;
    }
    *s = p + *i + 1;
    *e = p + j;
    *i = j + 1;
    if (esc && !fq_scan_unescape(NULL, 0, *s, *e))
        return "it is not valid JSON";
    return NULL;
}

static bool fq_scan_numchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == 'e' || c == 'E' ||
           c == '.';
}

static size_t fq_scan_digits(const unsigned char *p, size_t i, size_t m)
{
    size_t d = 0;

    while (i + d < m && p[i + d] >= '0' && p[i + d] <= '9')
        d++;
    return d;
}

/* The length of the number at p[0..n) (starting with '-' or a digit) as
 * cJSON reads it: strtod over the bytes of [0-9+-eE.] there; 0 if none.
 * (cJSON 1.7.15 as first released stopped at 63 bytes; Debian's updates
 * and later releases take them all, as here.) */
static size_t fq_scan_number(const unsigned char *p, size_t n)
{
    size_t m = 0, i = 0, d, f;

    while (m < n && fq_scan_numchar(p[m]))
        m++;
    if (p[0] == '-')
        i++;
    d = fq_scan_digits(p, i, m);
    i += d;
    if (i < m && p[i] == '.') {
        f = fq_scan_digits(p, i + 1, m);
        if (d || f) {
            i += 1 + f;
            d += f;
        }
    }
    if (!d)
        return 0;
    if (i < m && (p[i] == 'e' || p[i] == 'E')) {
        size_t j = i + 1;
        if (j < m && (p[j] == '+' || p[j] == '-'))
            j++;
        f = fq_scan_digits(p, j, m);
        if (f)
            i = j + f;
    }
    return i;
}

static size_t fq_scan_space(const unsigned char *p, size_t n, size_t i)
{
    while (i < n && fq_json_space(p[i]))
        i++;
    return i;
}

/* fq_scan_object's reading of one body: where it is, the containers open
 * around it, and what it found so far. */
typedef struct fq_scanner {
    const unsigned char *p;     /* the body */
    size_t n;                   /* its length */
    size_t i;                   /* the next byte to read */
    size_t depth;               /* containers open */
    unsigned char is_obj[FQ_SCAN_DEPTH / 8 + 1];    /* bit d: container d is an object */
    bool seen[FQ_SCAN_FIELDS];  /* names[m] met as a top-level member */
    int field;                  /* the top-level member whose value is next, or -1 */
    const char *const *names;   /* the members wanted */
    fq_scan_field *f;           /* their values */
    int *dup;                   /* the first wanted member given twice (not class), or -1 */
    bool *cls_twice;            /* class given twice */
    bool *nul_top;              /* a top-level string holds a NUL */
} fq_scanner;

/* What the scanner reads next. */
enum fq_scan_next { FQ_SCAN_VALUE, FQ_SCAN_KEY, FQ_SCAN_AFTER, FQ_SCAN_END };

/* An object or array opened at c: read on to its first key or value, or
 * past it if empty. */
static const char *fq_scan_open(fq_scanner *sc, unsigned char c, enum fq_scan_next *next)
{
    if (sc->depth >= FQ_SCAN_DEPTH)
        return "it nests too deep";
    if (c == '{')
        sc->is_obj[sc->depth / 8] |= (unsigned char)(1u << sc->depth % 8);
    else
        sc->is_obj[sc->depth / 8] &= (unsigned char)~(1u << sc->depth % 8);
    sc->depth++;
    sc->i = fq_scan_space(sc->p, sc->n, sc->i + 1);
    if (sc->i < sc->n && sc->p[sc->i] == (c == '{' ? '}' : ']')) {
        sc->depth--;
        sc->i++;
        *next = FQ_SCAN_AFTER;
    } else {
        *next = c == '{' ? FQ_SCAN_KEY : FQ_SCAN_VALUE;
    }
    return NULL;
}

/* A value: a wanted member's is kept (a string or number as it is, any
 * other as FQ_SCAN_OTHER, null as absent). */
static const char *fq_scan_value(fq_scanner *sc, enum fq_scan_next *next)
{
    const unsigned char *p = sc->p, *s, *e;
    size_t n = sc->n;
    fq_scan_field *to = sc->field >= 0 ? &sc->f[sc->field] : NULL;
    sc->field = -1;
    *next = FQ_SCAN_AFTER;
    sc->i = fq_scan_space(p, n, sc->i);
    if (sc->i == n)
        return "it is not valid JSON";
    unsigned char c = p[sc->i];
    if (c == '{' || c == '[') {
        if (to)
            to->type = FQ_SCAN_OTHER;
        return fq_scan_open(sc, c, next);
    }
    if (c == '"') {
        const char *why = fq_scan_string(p, n, &sc->i, sc->depth == 1, sc->nul_top, &s, &e);
        if (!why && to)
            *to = (fq_scan_field){FQ_SCAN_STRING, s, (size_t)(e - s)};
        return why;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t k = fq_scan_number(p + sc->i, n - sc->i);
        if (!k)
            return "it is not valid JSON";
        if (to)
            *to = (fq_scan_field){FQ_SCAN_NUMBER, p + sc->i, k};
        sc->i += k;
        return NULL;
    }
    static const struct { const char *word; size_t len; bool other; } words[] = {
        {"null", 4, false}, {"true", 4, true}, {"false", 5, true}};
    for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
        if (n - sc->i >= words[w].len && memcmp(p + sc->i, words[w].word, words[w].len) == 0) {
            if (to && words[w].other)
                to->type = FQ_SCAN_OTHER;
            sc->i += words[w].len;
            return NULL;
        }
    }
    return "it is not valid JSON";
}

/* After a value: close the containers it ends, then on to the next member
 * or element, or to the end. */
static const char *fq_scan_after(fq_scanner *sc, enum fq_scan_next *next)
{
    const unsigned char *p = sc->p;
    size_t n = sc->n;
    for (;;) {
        sc->i = fq_scan_space(p, n, sc->i);
        if (sc->depth == 0) {
            *next = FQ_SCAN_END;
            return sc->i == n ? NULL : "data follows the JSON object";
        }
        bool obj = sc->is_obj[(sc->depth - 1) / 8] >> (sc->depth - 1) % 8 & 1;
        if (sc->i < n && p[sc->i] == (obj ? '}' : ']')) {
            sc->depth--;
            sc->i++;
            continue;
        }
        if (sc->i == n || p[sc->i] != ',')
            return "it is not valid JSON";
        sc->i = fq_scan_space(p, n, sc->i + 1);
        *next = obj ? FQ_SCAN_KEY : FQ_SCAN_VALUE;
        return NULL;
    }
}

/* A member's name and its colon; a top-level one among names is noted. */
static const char *fq_scan_key(fq_scanner *sc, enum fq_scan_next *next)
{
    const unsigned char *p = sc->p, *s, *e;
    size_t n = sc->n;
    const char *why;
    if (sc->i == n || p[sc->i] != '"')
        return "it is not valid JSON";
    if ((why = fq_scan_string(p, n, &sc->i, sc->depth == 1, sc->nul_top, &s, &e)))
        return why;
    if (sc->depth == 1) {
        char k[12];
        fq_scan_unescape(k, sizeof k, s, e);
        for (int m = 0; m < FQ_SCAN_FIELDS; m++) {
            if (strcmp(k, sc->names[m]) != 0)
                continue;
            if (sc->seen[m] && m != FQ_SCAN_CLASS && *sc->dup < 0)
                *sc->dup = m;
            if (sc->seen[m] && m == FQ_SCAN_CLASS)
                *sc->cls_twice = true;
            sc->seen[m] = true;
            sc->f[m].type = FQ_SCAN_ABSENT;
            sc->field = m;
        }
    }
    sc->i = fq_scan_space(p, n, sc->i);
    if (sc->i == n || p[sc->i] != ':')
        return "it is not valid JSON";
    sc->i++;
    *next = FQ_SCAN_VALUE;
    return NULL;
}

/* Read p[0..n) (p[0] is '{') as fq_msg_object would, without a tree: NULL
 * if it is a JSON object, else why not. f[0..FQ_SCAN_FIELDS) get the values
 * of the members named names[]; *dup the first of them but class given
 * twice (-1 if none); *cls_twice whether class was. */
static const char *fq_scan_object(const unsigned char *p, size_t n,
                                  const char *const *names, fq_scan_field *f,
                                  int *dup, bool *cls_twice, bool *nul_top)
{
    fq_scanner sc = {.p = p, .n = n, .field = -1, .names = names, .f = f, .dup = dup,
                     .cls_twice = cls_twice, .nul_top = nul_top};
    *dup = -1;
    *cls_twice = false;
    *nul_top = false;
    enum fq_scan_next next = FQ_SCAN_VALUE;
    const char *why = NULL;
    while (!why && next != FQ_SCAN_END) {
        switch (next) {
        case FQ_SCAN_VALUE: why = fq_scan_value(&sc, &next); break;
        case FQ_SCAN_KEY: why = fq_scan_key(&sc, &next); break;
        case FQ_SCAN_AFTER: why = fq_scan_after(&sc, &next); break;
        case FQ_SCAN_END: break;
        }
    }
    return why;
}

/* The body's member f, if there, a string naming something of at most max
 * bytes (key says what, in err), into dst. */
static fq_status fq_submit_name(char *dst, size_t max, const fq_scan_field *f, const char *key,
                                char *err, size_t errlen)
{
    char v[FQ_RUN_ID_MAX + 2];  /* the longest name */
    if (!f->type)
        return FQ_OK;
    if (f->type != FQ_SCAN_STRING)
        return fq_msg_fail(err, errlen, "%s: must be a string", key);
    fq_scan_unescape(v, max + 2, f->s, f->s + f->len);
    return fq_msg_name(dst, max, v, key, err, errlen);
}

/* est_tokens, if there: an integer from 1 to max_est. */
static fq_status fq_submit_est(fq_submit *out, const fq_scan_field *f, uint32_t max_est,
                               char *err, size_t errlen)
{
    if (!f->type)
        return FQ_OK;
    if (f->type != FQ_SCAN_NUMBER)
        return fq_msg_fail(err, errlen, "est_tokens: must be a number, an integer from "
                           "1 to %" PRIu32, max_est);
    /* strtod needs a terminated copy; one longer than 63 bytes (zeros
     * a tenant added) is rare enough to be allocated */
    char small[64], *num = f->len < sizeof small ? small : malloc(f->len + 1);
    double d;
    if (!num)
        return fq_msg_fail(err, errlen, "est_tokens: no memory to read it");
    memcpy(num, f->s, f->len);
    num[f->len] = '\0';
    d = strtod(num, NULL);
    if (num != small)
        free(num);
    if (!isfinite(d) || d < 1 || d > (double)max_est || d != (double)(uint64_t)d)
        return fq_msg_fail(err, errlen, "est_tokens: must be an integer from 1 to %"
                           PRIu32 ", got %.15g", max_est, d);
    out->est_tokens = (uint32_t)d;
    return FQ_OK;
}

static fq_status fq_submit_body(fq_submit *out, const fq_scan_field *f, const char *tenant,
                                bool cls_twice, uint32_t max_est, char *err, size_t errlen)
{
    char v[FQ_TENANT_MAX + 2];
    fq_status st;

    if ((st = fq_submit_name(out->run_id, FQ_RUN_ID_MAX, &f[0], "run_id", err, errlen)) != FQ_OK ||
        (st = fq_submit_name(out->workflow, FQ_WORKFLOW_MAX, &f[1], "workflow", err,
                             errlen)) != FQ_OK ||
        (st = fq_submit_est(out, &f[2], max_est, err, errlen)) != FQ_OK)
        return st;
    /* a class that cannot be read is said in cls_err, not refused here */
    if (cls_twice)
        fq_msg_fail(out->cls_err, sizeof out->cls_err, "class: given twice in the body");
    else
        fq_submit_name(out->cls, FQ_CLASS_MAX, &f[FQ_SCAN_CLASS], "class", out->cls_err,
                       sizeof out->cls_err);
    if (f[3].type && f[3].type != FQ_SCAN_STRING)
        return fq_msg_fail(err, errlen, "tenant: must be a string");
    if (f[3].type) {
        fq_scan_unescape(v, FQ_TENANT_MAX + 2, f[3].s, f[3].s + f[3].len);
        if (strcmp(v, tenant) != 0)
            return fq_msg_fail(err, errlen, "tenant: the body names another tenant "
                               "than the subject's (%s)", tenant);
    }
    const fq_scan_field *u = &f[FQ_SCAN_SUBTENANT];
    out->subtenant_refused = u->type != FQ_SCAN_ABSENT;
    if ((st = fq_submit_name(out->subtenant, FQ_SUBTENANT_MAX, u, "subtenant", err,
                             errlen)) != FQ_OK)
        return st;
    out->subtenant_refused = false;
    return FQ_OK;
}

static fq_status fq_submit_hdrs(fq_submit *out, const fq_submit_headers *h,
                                uint32_t max_est, char *err, size_t errlen)
{
    uint64_t est = 0;
    fq_status st;

    if (h->twice) {
        out->subtenant_refused = strcmp(h->twice, FQ_HDR_SUBTENANT) == 0;
        return fq_msg_fail(err, errlen, "%s header: given twice (names compared without "
                           "regard to case)", h->twice);
    }
    if (h->cls_twice) {
        out->cls[0] = '\0';
        fq_msg_fail(out->cls_err, sizeof out->cls_err, FQ_HDR_CLASS " header: given twice "
                    "(names compared without regard to case)");
    }
    if (h->run_id && (st = fq_msg_name(out->run_id, FQ_RUN_ID_MAX, h->run_id,
                                       FQ_HDR_RUN_ID " header", err, errlen)) != FQ_OK)
        return st;
    if (h->workflow && (st = fq_msg_name(out->workflow, FQ_WORKFLOW_MAX, h->workflow,
                                         FQ_HDR_WORKFLOW " header", err, errlen)) != FQ_OK)
        return st;
    if (h->cls && !h->cls_twice) {
        out->cls[0] = out->cls_err[0] = '\0';
        fq_msg_name(out->cls, FQ_CLASS_MAX, h->cls, FQ_HDR_CLASS " header", out->cls_err,
                    sizeof out->cls_err);
    }
    if (h->subtenant) {
        /* The claim divides its tenant's share: two that differ are
         * refused rather than one believed. */
        char u[FQ_SUBTENANT_MAX + 1];
        out->subtenant_refused = true;
        if ((st = fq_msg_name(u, FQ_SUBTENANT_MAX, h->subtenant,
                              FQ_HDR_SUBTENANT " header", err, errlen)) != FQ_OK)
            return st;
        if (out->subtenant[0] && strcmp(out->subtenant, u) != 0)
            return fq_msg_fail(err, errlen, FQ_HDR_SUBTENANT " header: names another "
                               "sub-tenant than the body's subtenant field");
        memcpy(out->subtenant, u, sizeof u);
        out->subtenant_refused = false;
    }
    if (h->est_tokens) {
        if ((st = fq_msg_uint_text(&est, h->est_tokens, 1, max_est,
                                   FQ_HDR_EST_TOKENS " header", err, errlen)) != FQ_OK)
            return st;
        out->est_tokens = (uint32_t)est;
    }
    return FQ_OK;
}

fq_status fq_submit_parse(fq_submit *out, const char *tenant, const void *body,
                          size_t len, const fq_submit_headers *h,
                          uint32_t max_est, char *err, size_t errlen)
{
    static const char *const names[] = {"run_id", "workflow", "est_tokens", "tenant",
                                        "class", "subtenant"};
    const unsigned char *p = body;
    fq_scan_field f[FQ_SCAN_FIELDS] = {{0}};
    size_t i = 0;
    bool nul_top = false, cls_twice = false;
    int dup = -1;
    fq_status st = FQ_OK;

    memset(out, 0, sizeof *out);
    while (i < len && fq_json_space(p[i]))
        i++;
    out->opaque = i == len || p[i] != '{' ||
                  fq_scan_object(p + i, len - i, names, f, &dup, &cls_twice, &nul_top) != NULL;
    if (out->opaque)
        ;
    else if (nul_top)
        st = fq_msg_fail(err, errlen, "body: a top-level string holds a \\u0000 "
                         "escape, which fairq cannot read faithfully");
    else if (dup >= 0) {
        st = fq_msg_fail(err, errlen, "%s: given twice in the body", names[dup]);
        out->subtenant_refused = dup == FQ_SCAN_SUBTENANT;
    }
    else
        st = fq_submit_body(out, f, tenant, cls_twice, max_est, err, errlen);
    /* The body is read first so that a valid header overwrites its value. */
    if (st == FQ_OK && h)
        st = fq_submit_hdrs(out, h, max_est, err, errlen);
    if (st != FQ_OK) {
        bool refused = out->subtenant_refused;
        memset(out, 0, sizeof *out);
        out->subtenant_refused = refused;
    }
    return st;
}

static fq_status fq_completion_fields(fq_completion *out, const cJSON *root,
                                      uint32_t max_est, char *err, size_t errlen)
{
    static const char *const names[] = {"run_id", "actual_tokens", "status",
                                        "est_tokens", "workflow", "input_tokens",
                                        "output_tokens", "cached_tokens"};
    const cJSON *it[8];
    uint64_t v = 0, *kind[] = {&out->input_tokens, &out->output_tokens, &out->cached_tokens};
    fq_status st;
    size_t k;

    if ((st = fq_msg_members(it, names, 8, root, err, errlen)) != FQ_OK)
        return st;
    for (k = 0; k < 3; k++)
        if (!it[k])
            return fq_msg_fail(err, errlen, "%s: missing; a completion needs "
                               "run_id, actual_tokens and status", names[k]);
    if ((st = fq_msg_name_item(out->run_id, FQ_RUN_ID_MAX, it[0], "run_id",
                               err, errlen)) != FQ_OK)
        return st;
    if ((st = fq_msg_uint_item(&out->actual_tokens, it[1], 0, FQ_MAX_ACTUAL_TOKENS(max_est),
                               "actual_tokens", err, errlen)) != FQ_OK)
        return st;
    for (k = 0; cJSON_IsString(it[2]) && k < FQ_DONE_COUNT; k++)
        if (strcmp(it[2]->valuestring, fq_done_names[k]) == 0)
            break;
    if (!cJSON_IsString(it[2]) || k == FQ_DONE_COUNT)
        return fq_msg_fail(err, errlen, "status: must be \"ok\", \"error\" or \"cancelled\"");
    out->status = (enum fq_done_status)k;
    if (it[3] && (st = fq_msg_uint_item(&v, it[3], 1, max_est, "est_tokens",
                                        err, errlen)) != FQ_OK)
        return st;
    out->est_tokens = (uint32_t)v;
    if (it[4] && (st = fq_msg_name_item(out->workflow, FQ_WORKFLOW_MAX, it[4],
                                        "workflow", err, errlen)) != FQ_OK)
        return st;
    for (k = 0; k < 3; k++) {
        if (it[5 + k] && (st = fq_msg_uint_item(kind[k], it[5 + k], 0,
                                                FQ_MAX_ACTUAL_TOKENS(max_est), names[5 + k],
                                                err, errlen)) != FQ_OK)
            return st;
        out->kinds |= it[5 + k] != NULL;
    }
    if (out->cached_tokens > out->input_tokens)
        return fq_msg_fail(err, errlen, "cached_tokens: more than input_tokens, which "
                           "counts the cached ones too");
    return FQ_OK;
}

fq_status fq_completion_parse(fq_completion *out, const void *body, size_t len,
                              uint32_t max_est, char *err, size_t errlen)
{
    const char *why;
    bool nul_top;
    fq_status st;

    memset(out, 0, sizeof *out);
    if (len > FQ_COMPLETION_MAX_BYTES)
        return fq_msg_fail(err, errlen, "completion: its body is %zu bytes, at most %d", len,
                           FQ_COMPLETION_MAX_BYTES);
    cJSON *root = fq_msg_object(body, len, &nul_top, &why);
    if (!root)
        st = fq_msg_fail(err, errlen, "completion: not a JSON object (%s)", why);
    else if (nul_top)
        st = fq_msg_fail(err, errlen, "completion: a top-level string holds a "
                         "\\u0000 escape, which fairq cannot read faithfully");
    else
        st = fq_completion_fields(out, root, max_est, err, errlen);
    fq_msg_release(root);
    if (st != FQ_OK)
        memset(out, 0, sizeof *out);
    return st;
}

size_t fq_completion_format(char *buf, size_t cap, const fq_completion *c)
{
    fq_json w;
    size_t len;

    if ((unsigned)c->status >= FQ_DONE_COUNT)
        return 0;
    fq_json_init(&w, buf, cap);
    fq_json_begin_object(&w);
    fq_json_key(&w, "run_id");
    fq_json_stringn(&w, c->run_id, strnlen(c->run_id, sizeof c->run_id));
    fq_json_key(&w, "actual_tokens");
    fq_json_int(&w, (int64_t)c->actual_tokens);
    fq_json_key(&w, "status");
    fq_json_string(&w, fq_done_names[c->status]);
    if (c->est_tokens) {
        fq_json_key(&w, "est_tokens");
        fq_json_int(&w, c->est_tokens);
    }
    if (c->workflow[0]) {
        fq_json_key(&w, "workflow");
        fq_json_stringn(&w, c->workflow, strnlen(c->workflow, sizeof c->workflow));
    }
    if (c->kinds) {
        fq_json_key(&w, "input_tokens");
        fq_json_int(&w, (int64_t)c->input_tokens);
        fq_json_key(&w, "output_tokens");
        fq_json_int(&w, (int64_t)c->output_tokens);
        fq_json_key(&w, "cached_tokens");
        fq_json_int(&w, (int64_t)c->cached_tokens);
    }
    fq_json_end_object(&w);
    return fq_json_finish(&w, &len) == FQ_OK ? len : 0;
}

/* Override patches. The order of the names is the order of the FQ_OVR_*
 * bits; tenant comes last. */
static const char *const fq_ovr_names[] = {"plan", "weight", "max_in_flight",
                                           "max_pending", "burst_in_flight",
                                           "tokens_per_minute", "price_input",
                                           "price_output", "price_cached",
                                           "max_subtenants", "class_weights",
                                           "class_max_pending", "tenant"};
#define FQ_OVR_NAMES (sizeof fq_ovr_names / sizeof fq_ovr_names[0])

/* One field of those a patch may change: null removes it, a value sets it. */
static fq_status fq_override_field(fq_override_patch *out, size_t k, const cJSON *item,
                                   uint32_t max_weight, char *err, size_t errlen)
{
    static const uint64_t lo[] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    uint64_t hi[] = {0, max_weight, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX,
                     FQ_PRICE_MAX, FQ_PRICE_MAX, FQ_PRICE_MAX, FQ_MAX_SUBTENANTS}, v = 0;
    uint32_t *dst[] = {NULL, &out->weight, &out->max_in_flight, &out->max_pending,
                       &out->burst_in_flight, &out->tokens_per_minute, &out->price_input,
                       &out->price_output, &out->price_cached, &out->max_subtenants};
    fq_status st;

    if (cJSON_IsNull(item)) {
        out->removed |= 1u << k;
        return FQ_OK;
    }
    if (k == 0) {
        if (!cJSON_IsString(item) ||
            !fq_name_valid(item->valuestring, strlen(item->valuestring)))
            return fq_msg_fail(err, errlen, "plan: must be a plan name, 1 to %d of "
                               "[A-Za-z0-9_-], or null", FQ_TENANT_MAX);
        memcpy(out->plan, item->valuestring, strlen(item->valuestring) + 1);
    } else if (k == 10) {
        if (!cJSON_IsString(item) || !item->valuestring[0] ||
            fq_class_weights_parse(&out->class_weights, item->valuestring) != FQ_OK)
            return fq_msg_fail(err, errlen, "class_weights: must be \"strict\", or one "
                               "weight of 1 to %u per class, highest first (\"3, 1\"), "
                               "or null", FQ_SCHED_MAX_CLASS_WEIGHT);
    } else if (k == 11) {
        if (!cJSON_IsString(item) ||
            fq_class_pending_parse(&out->class_max_pending, item->valuestring) != FQ_OK ||
            !out->class_max_pending.set)
            return fq_msg_fail(err, errlen, "class_max_pending: must be one max_pending of "
                               "0 to 2^32-1 per class, highest first (\"100, 0\"), or null");
    } else {
        if ((st = fq_msg_uint_item(&v, item, lo[k], hi[k], fq_ovr_names[k], err,
                                   errlen)) != FQ_OK)
            return st;
        *dst[k] = (uint32_t)v;
    }
    out->set |= 1u << k;
    return FQ_OK;
}

static fq_status fq_override_fields(fq_override_patch *out, const cJSON *root,
                                    enum fq_patch_kind kind, uint32_t max_weight,
                                    char *err, size_t errlen)
{
    const cJSON *it[FQ_OVR_NAMES] = {NULL};
    fq_status st;
    size_t k;

    for (const cJSON *c = root->child; c; c = c->next) {
        for (k = 0; k < FQ_OVR_NAMES && strcmp(c->string, fq_ovr_names[k]) != 0; k++)
            ;
        if (k == FQ_OVR_NAMES)
            return fq_msg_fail(err, errlen, "the body has an unknown field; it takes only "
                               "tenant, plan, weight, max_in_flight, max_pending, "
                               "burst_in_flight, tokens_per_minute, price_input, "
                               "price_output, price_cached, max_subtenants, "
                               "class_weights and class_max_pending");
        if (it[k])
            return fq_msg_fail(err, errlen, "%s: given twice in the body", fq_ovr_names[k]);
        it[k] = c;
    }
    const cJSON *t = it[FQ_OVR_NAMES - 1];
    if (t && !cJSON_IsNull(t)) {
        if (!cJSON_IsString(t) || !fq_tenant_id_valid(t->valuestring, strlen(t->valuestring)))
            return fq_msg_fail(err, errlen, "tenant: must be a tenant id, " FQ_TENANT_RULE);
        memcpy(out->tenant, t->valuestring, strlen(t->valuestring) + 1);
    } else if (kind != FQ_PATCH_VALUE) {
        return fq_msg_fail(err, errlen, "tenant: missing; the body must name the tenant");
    }
    if (kind == FQ_PATCH_GET) {
        for (k = 0; k + 1 < FQ_OVR_NAMES; k++)
            if (it[k])
                return fq_msg_fail(err, errlen, "%s: tenant.get takes only tenant",
                                   fq_ovr_names[k]);
        return FQ_OK;
    }
    for (k = 0; k + 1 < FQ_OVR_NAMES; k++)
        if (it[k] && (st = fq_override_field(out, k, it[k], max_weight, err, errlen)) != FQ_OK)
            return st;
    if (!out->set && !out->removed)
        return fq_msg_fail(err, errlen, "the body changes nothing: give plan, weight, "
                           "max_in_flight, max_pending, burst_in_flight, tokens_per_minute, "
                           "price_input, price_output, price_cached, max_subtenants, "
                           "class_weights or class_max_pending (null removes one)");
    return FQ_OK;
}

fq_status fq_override_patch_parse(fq_override_patch *out, const void *body, size_t len,
                                  enum fq_patch_kind kind, uint32_t max_weight,
                                  char *err, size_t errlen)
{
    const char *why;
    bool nul_top;
    cJSON *root = fq_msg_object(body, len, &nul_top, &why);
    fq_status st;

    memset(out, 0, sizeof *out);
    if (!root)
        st = fq_msg_fail(err, errlen, "the body is not a JSON object (%s)", why);
    else if (nul_top)
        st = fq_msg_fail(err, errlen, "the body holds a \\u0000 escape in a top-level "
                         "string, which fairq cannot read faithfully");
    else
        st = fq_override_fields(out, root, kind, max_weight, err, errlen);
    fq_msg_release(root);
    if (st != FQ_OK)
        memset(out, 0, sizeof *out);
    return st;
}

/* An admin request's body into *root: FQ_OK with *root NULL when it is empty
 * (only white space: every field takes its default), FQ_OK with the tree
 * when it is a JSON object fairq can read faithfully, else the refusal,
 * naming the fields the request may hold (fields), with *root NULL. */
static fq_status fq_msg_request(cJSON **root, const void *body, size_t len,
                                const char *fields, char *err, size_t errlen)
{
    const unsigned char *p = body;
    size_t i = 0;
    *root = NULL;
    while (i < len && fq_json_space(p[i]))
        i++;
    if (i == len)
        return FQ_OK;
    const char *why;
    bool nul_top;
    *root = fq_msg_object(body, len, &nul_top, &why);
    if (!*root)
        return fq_msg_fail(err, errlen, "the request body must be empty or a JSON object "
                           "with %s (%s)", fields, why);
    if (nul_top) {
        fq_msg_release(*root);
        *root = NULL;
        return fq_msg_fail(err, errlen, "the body holds a \\u0000 escape in a top-level "
                           "string, which fairq cannot read faithfully");
    }
    return FQ_OK;
}

fq_status fq_stats_req_parse(fq_stats_req *out, const void *body, size_t len, char *err,
                             size_t errlen)
{
    *out = (fq_stats_req){.limit = SIZE_MAX};
    cJSON *root;
    fq_status st = fq_msg_request(&root, body, len,
                                  "\"tenant\", or \"limit\" and \"offset\"", err, errlen);
    const cJSON *e, *fields = st == FQ_OK ? root : NULL;
    cJSON_ArrayForEach(e, fields) {
        bool is_limit = strcmp(e->string, "limit") == 0;
        if (strcmp(e->string, "tenant") == 0) {
            if (!cJSON_IsString(e) || !*e->valuestring
                || strlen(e->valuestring) > FQ_TENANT_MAX)
                st = fq_msg_fail(err, errlen, "tenant: must be a string of 1 to %d bytes",
                                 FQ_TENANT_MAX);
            else
                snprintf(out->tenant, sizeof out->tenant, "%s", e->valuestring);
        } else if (is_limit || strcmp(e->string, "offset") == 0) {
            double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (v < 0 || v > 1e15 || v != (double)(int64_t)v)
                st = fq_msg_fail(err, errlen, "%s: must be a non-negative integer",
                                 is_limit ? "limit" : "offset");
            else if (is_limit)
                out->limit = (size_t)v;
            else
                out->offset = (size_t)v;
        } else {
            st = fq_msg_fail(err, errlen, "a stats request may hold only \"tenant\", "
                             "\"limit\" and \"offset\"; it has another field");
        }
        if (st != FQ_OK)
            break;
    }
    fq_msg_release(root);
    if (st != FQ_OK)
        *out = (fq_stats_req){.limit = SIZE_MAX};
    return st;
}

fq_status fq_explain_req_parse(fq_explain_req *out, const void *body, size_t len, char *err,
                               size_t errlen)
{
    *out = (fq_explain_req){0};
    cJSON *root;
    fq_status st = fq_msg_request(&root, body, len, "\"run_id\"", err, errlen);
    const cJSON *e, *fields = st == FQ_OK ? root : NULL;
    bool seen = false;
    cJSON_ArrayForEach(e, fields) {
        if (strcmp(e->string, "run_id") != 0)
            st = fq_msg_fail(err, errlen, "an explain request may hold only \"run_id\"; it "
                             "has another field");
        else if (seen)      /* which of two to answer for is not ours to pick */
            st = fq_msg_fail(err, errlen, "run_id: given twice");
        else if (!cJSON_IsString(e) ||
                 !fq_msg_name_valid(e->valuestring, strlen(e->valuestring), FQ_RUN_ID_MAX))
            st = fq_msg_fail(err, errlen, "run_id: must be a string of 1 to %d printable "
                             "ASCII bytes without spaces", FQ_RUN_ID_MAX);
        else
            snprintf(out->run_id, sizeof out->run_id, "%s", e->valuestring);
        if (st != FQ_OK)
            break;
        seen = true;
    }
    fq_msg_release(root);
    if (st != FQ_OK)
        *out = (fq_explain_req){0};
    return st;
}

fq_status fq_consumer_info_parse(uint64_t *pending, uint64_t *ack_pending, const void *body,
                                 size_t len)
{
    bool nul = false;
    const char *why = NULL;
    cJSON *root = fq_msg_object(body, len, &nul, &why);
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "num_pending");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(root, "num_ack_pending");
    fq_status st = FQ_EINVAL;
    if (cJSON_IsNumber(np) && cJSON_IsNumber(ap) && np->valuedouble >= 0 &&
        ap->valuedouble >= 0 && np->valuedouble < 1e18 && ap->valuedouble < 1e18) {
        *pending = (uint64_t)np->valuedouble;
        *ack_pending = (uint64_t)ap->valuedouble;
        st = FQ_OK;
    }
    fq_msg_release(root);
    return st;
}

/* A member of obj's member outer (outer.name), a sequence: into *out. */
static bool fq_msg_inner_seq(uint64_t *out, const cJSON *obj, const char *outer,
                             const char *name)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(obj, outer);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= 1e18)
        return false;
    *out = (uint64_t)v->valuedouble;
    return true;
}

/* The sequence at outer.inner of an API answer in body. */
static fq_status msg_api_seq_parse(uint64_t *seq, const void *body, size_t len, const char *outer,
                                   const char *inner)
{
    bool nul = false;
    const char *why = NULL;
    cJSON *root = fq_msg_object(body, len, &nul, &why);
    fq_status st = fq_msg_inner_seq(seq, root, outer, inner) ? FQ_OK : FQ_EINVAL;
    fq_msg_release(root);
    return st;
}

fq_status fq_consumer_floor_parse(uint64_t *floor, const void *body, size_t len)
{
    return msg_api_seq_parse(floor, body, len, "ack_floor", "stream_seq");
}

fq_status fq_stream_last_seq_parse(uint64_t *seq, const void *body, size_t len)
{
    return msg_api_seq_parse(seq, body, len, "state", "last_seq");
}

fq_status fq_msg_get_seq_parse(uint64_t *seq, const void *body, size_t len)
{
    bool nul = false;
    const char *why = NULL;
    uint64_t code = 0;
    cJSON *root = fq_msg_object(body, len, &nul, &why);
    fq_status st = fq_msg_inner_seq(seq, root, "message", "seq") && *seq ? FQ_OK
                   : fq_msg_inner_seq(&code, root, "error", "err_code") && code == 10037
                       ? FQ_ENOTFOUND
                       : FQ_EINVAL;
    fq_msg_release(root);
    return st;
}

/* A string member of a JWT's claims into dst (cut to fit); "" if absent. */
static bool fq_jwt_str(char *dst, size_t cap, const cJSON *obj, const char *name)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(obj, name);
    dst[0] = '\0';
    if (!e)
        return true;
    if (!cJSON_IsString(e))
        return false;
    snprintf(dst, cap, "%s", e->valuestring);
    return true;
}

/* A time member of a JWT's claims (Unix seconds); 0 if absent. */
static bool fq_jwt_time(int64_t *dst, const cJSON *obj, const char *name)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(obj, name);
    *dst = 0;
    if (!e)
        return true;
    double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
    if (v < 0 || v > 1e15 || v != (double)(int64_t)v)
        return false;
    *dst = (int64_t)v;
    return true;
}

fq_status fq_jwt_claims_parse(fq_jwt_claims *out, const void *json, size_t len, char *err,
                              size_t errlen)
{
    const char *why;
    bool nul_top;
    fq_status st = FQ_OK;
    *out = (fq_jwt_claims){0};
    cJSON *root = fq_msg_object(json, len, &nul_top, &why);
    if (!root)
        st = fq_msg_fail(err, errlen, "its claims are not a JSON object (%s)", why);
    else if (!fq_jwt_str(out->sub, sizeof out->sub, root, "sub") || !out->sub[0] ||
             !fq_jwt_str(out->iss, sizeof out->iss, root, "iss") || !out->iss[0])
        st = fq_msg_fail(err, errlen, "its claims lack \"sub\" or \"iss\"");
    else if (!fq_jwt_str(out->name, sizeof out->name, root, "name"))
        st = fq_msg_fail(err, errlen, "its \"name\" is not a string");
    else if (!fq_jwt_time(&out->exp, root, "exp") || !fq_jwt_time(&out->nbf, root, "nbf"))
        st = fq_msg_fail(err, errlen, "its \"exp\" or \"nbf\" is not a time in seconds");
    else {
        const cJSON *nats = cJSON_GetObjectItemCaseSensitive(root, "nats");
        if (nats && (!cJSON_IsObject(nats) || !fq_jwt_str(out->type, sizeof out->type, nats,
                                                           "type")))
            st = fq_msg_fail(err, errlen, "its \"nats\" claims are not an object with a "
                             "string \"type\"");
    }
    fq_msg_release(root);
    if (st != FQ_OK)
        *out = (fq_jwt_claims){0};
    return st;
}

/* The JSON writer. */

void fq_json_init(fq_json *w, char *buf, size_t cap)
{
    memset(w, 0, sizeof *w);
    w->buf = buf;
    w->cap = cap;
}

/* Append s[0..n) if it fits with room for the NUL; count it either way, so
 * once one write does not fit, none after it does. */
static void fq_json_put(fq_json *w, const char *s, size_t n)
{
    if (w->len < w->cap && n < w->cap - w->len)
        memcpy(w->buf + w->len, s, n);
    w->len += n;
}

/* Before a key (is_key) or a value: check the order, write the comma. */
static bool fq_json_sep(fq_json *w, bool is_key)
{
    uint32_t bit = 1u << w->depth;

    if (w->misuse)
        return false;
    if (w->in_object & bit) {
        if (is_key == w->want_value)
            return !(w->misuse = true);
        if (!is_key) {
            w->want_value = false;
            return true;
        }
    } else if (is_key || (w->depth == 0 && (w->has_items & bit))) {
        return !(w->misuse = true);
    }
    if (w->has_items & bit)
        fq_json_put(w, ",", 1);
    w->has_items |= bit;
    return true;
}

static void fq_json_begin(fq_json *w, bool object)
{
    uint32_t bit;

    if (w->depth == FQ_JSON_MAX_DEPTH)
        w->misuse = true;
    if (!fq_json_sep(w, false))
        return;
    fq_json_put(w, object ? "{" : "[", 1);
    bit = 1u << ++w->depth;
    w->in_object = object ? w->in_object | bit : w->in_object & ~bit;
    w->has_items &= ~bit;
}

static void fq_json_end(fq_json *w, bool object)
{
    bool is_object = (w->in_object & (1u << w->depth)) != 0;

    if (w->misuse || w->depth == 0 || is_object != object || w->want_value) {
        w->misuse = true;
        return;
    }
    fq_json_put(w, object ? "}" : "]", 1);
    w->depth--;
}

void fq_json_begin_object(fq_json *w) { fq_json_begin(w, true); }
void fq_json_end_object(fq_json *w) { fq_json_end(w, true); }
void fq_json_begin_array(fq_json *w) { fq_json_begin(w, false); }
void fq_json_end_array(fq_json *w) { fq_json_end(w, false); }

/* Write s[0..n) quoted: runs of plain bytes in one put, the rest escaped. */
static void fq_json_quote(fq_json *w, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0, i = 0, k;
    char esc[8];

    fq_json_put(w, "\"", 1);
    while (i < n) {
        const char *e = fq_json_escape(p + i, n - i, &k, esc);
        if (e) {
            fq_json_put(w, s + run, i - run);
            fq_json_put(w, e, strlen(e));
            run = i + k;
        }
        i += k;
    }
    fq_json_put(w, s + run, n - run);
    fq_json_put(w, "\"", 1);
}

void fq_json_key(fq_json *w, const char *key)
{
    if (!fq_json_sep(w, true))
        return;
    fq_json_quote(w, key, strlen(key));
    fq_json_put(w, ":", 1);
    w->want_value = true;
}

void fq_json_stringn(fq_json *w, const char *s, size_t len)
{
    if (fq_json_sep(w, false))
        fq_json_quote(w, s, len);
}

void fq_json_string(fq_json *w, const char *s)
{
    if (!s)
        fq_json_null(w);
    else
        fq_json_stringn(w, s, strlen(s));
}

/* A value already formatted, such as a number or a literal. */
static void fq_json_raw(fq_json *w, const char *s, size_t n)
{
    if (fq_json_sep(w, false))
        fq_json_put(w, s, n);
}

void fq_json_int(fq_json *w, int64_t v)
{
    /* Two per run in the journal: without snprintf. */
    char tmp[FQ_U64_DEC_MAX + 1];
    size_t n = 0;

    if (v < 0)
        tmp[n++] = '-';
    n += fq_u64_dec(tmp + n, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
    fq_json_raw(w, tmp, n);
}

void fq_json_double(fq_json *w, double v)
{
    char tmp[32];
    int n;

    if (!isfinite(v)) {
        fq_json_null(w);
        return;
    }
    n = snprintf(tmp, sizeof tmp, "%.15g", v);
    if (strtod(tmp, NULL) != v)
        n = snprintf(tmp, sizeof tmp, "%.17g", v);
    fq_json_raw(w, tmp, (size_t)n);
}

void fq_json_bool(fq_json *w, bool v)
{
    fq_json_raw(w, v ? "true" : "false", v ? 4 : 5);
}

void fq_json_null(fq_json *w)
{
    fq_json_raw(w, "null", 4);
}

fq_status fq_json_finish(fq_json *w, size_t *len)
{
    fq_status st = FQ_OK;

    if (w->misuse || w->depth != 0 || !(w->has_items & 1))
        st = FQ_EINVAL;
    else if (w->len >= w->cap)
        st = FQ_ETOOBIG;
    if (len)
        *len = st == FQ_EINVAL ? 0 : w->len;
    if (w->cap)
        w->buf[st == FQ_OK ? w->len : 0] = '\0';
    return st;
}

/* Heartbeats. The order of the names is the order read into the fields
 * below; every one is required. */
static const char *const fq_beat_names[] = {"id", "weight", "queued_runs", "queued_tokens",
                                            "runs", "tokens", "borrowed_runs",
                                            "borrowed_tokens"};
#define FQ_BEAT_NAMES (sizeof fq_beat_names / sizeof fq_beat_names[0])

static fq_status fq_share_beat_fields(fq_share_beat *out, const cJSON *root, char *err,
                                      size_t errlen)
{
    const cJSON *it[FQ_BEAT_NAMES];
    uint64_t v[FQ_BEAT_NAMES] = {0};
    size_t known = 0;
    fq_status st;

    if ((st = fq_msg_members(it, fq_beat_names, FQ_BEAT_NAMES, root, err, errlen)) != FQ_OK)
        return st;
    for (const cJSON *c = root->child; c; c = c->next)
        known++;
    for (size_t k = 0; k < FQ_BEAT_NAMES; k++) {
        if (!it[k])
            return fq_msg_fail(err, errlen, "heartbeat: %s: missing (or null)",
                               fq_beat_names[k]);
        known--;
    }
    if (known)
        return fq_msg_fail(err, errlen, "heartbeat: holds a field other than id, weight, "
                           "queued_runs, queued_tokens, runs, tokens, borrowed_runs and "
                           "borrowed_tokens");
    if ((st = fq_msg_name_item(out->id, FQ_SHARE_ID_MAX, it[0], "heartbeat: id", err,
                               errlen)) != FQ_OK)
        return st;
    for (size_t k = 1; k < FQ_BEAT_NAMES; k++) {
        bool runs = k == 4 || k == 6;
        if ((st = fq_msg_uint_item(&v[k], it[k], 0, runs ? UINT32_MAX : FQ_SHARE_MAX_VALUE,
                                   fq_beat_names[k], err, errlen)) != FQ_OK)
            return st;
    }
    if (v[6] > v[4] || v[7] > v[5])
        return fq_msg_fail(err, errlen, "heartbeat: borrows more than it holds in flight");
    out->weight = v[1];
    out->queued_runs = v[2];
    out->queued_tokens = v[3];
    out->runs = (uint32_t)v[4];
    out->tokens = v[5];
    out->borrowed_runs = (uint32_t)v[6];
    out->borrowed_tokens = v[7];
    return FQ_OK;
}

fq_status fq_share_beat_parse(fq_share_beat *out, const void *body, size_t len, char *err,
                              size_t errlen)
{
    const char *why;
    bool nul_top;
    fq_status st;

    memset(out, 0, sizeof *out);
    if (len > FQ_SHARE_BEAT_MAX_BYTES)
        return fq_msg_fail(err, errlen, "heartbeat: its body is %zu bytes, at most %d", len,
                           FQ_SHARE_BEAT_MAX_BYTES);
    cJSON *root = fq_msg_object(body, len, &nul_top, &why);
    if (!root)
        st = fq_msg_fail(err, errlen, "heartbeat: not a JSON object (%s)", why);
    else if (nul_top)
        st = fq_msg_fail(err, errlen, "heartbeat: a top-level string holds a \\u0000 "
                         "escape, which fairq cannot read faithfully");
    else
        st = fq_share_beat_fields(out, root, err, errlen);
    fq_msg_release(root);
    if (st != FQ_OK)
        memset(out, 0, sizeof *out);
    return st;
}

size_t fq_share_beat_format(char *buf, size_t cap, const fq_share_beat *b)
{
    const uint64_t v[FQ_BEAT_NAMES] = {0, b->weight, b->queued_runs, b->queued_tokens,
                                       b->runs, b->tokens, b->borrowed_runs,
                                       b->borrowed_tokens};
    fq_json w;
    size_t len;

    fq_json_init(&w, buf, cap);
    fq_json_begin_object(&w);
    fq_json_key(&w, "id");
    fq_json_stringn(&w, b->id, strnlen(b->id, sizeof b->id));
    for (size_t k = 1; k < FQ_BEAT_NAMES; k++) {
        fq_json_key(&w, fq_beat_names[k]);
        fq_json_int(&w, (int64_t)(v[k] < FQ_SHARE_MAX_VALUE ? v[k] : FQ_SHARE_MAX_VALUE));
    }
    fq_json_end_object(&w);
    return fq_json_finish(&w, &len) == FQ_OK ? len : 0;
}
