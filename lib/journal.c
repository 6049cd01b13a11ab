/* journal.c -- the runs journal's records: typed, written in batches as JSON, read back validated. */
/*
 * Principles:
 *
 * - One codec for both directions, so that the writer and the reader cannot
 *   drift apart: a record type is an enum, written and read by name, and a
 *   record the writer would refuse is one the reader refuses.
 *
 * - The reader trusts nothing: FAIRQ_RUNS is a stream any client with the
 *   permission could publish to, and a bad record read back at start could
 *   otherwise hold the window or poison a deficit. Every field is checked
 *   for its type and range before it becomes a C value (JSON numbers are
 *   doubles: finite, integral and in range first, then cast), a member given
 *   twice is refused (readers that keep the first and those that keep the
 *   last would disagree), and a type not known is refused, not taken for
 *   another. Members not known are ignored, for the next version's fields.
 *
 * - No I/O and no NATS: the proxy publishes the text and hands back what it
 *   reads, so the decoder can be tested, and fuzzed, on bytes alone.
 */
#include "journal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

static const char *const jr_type_name[] = {
    [FQ_JREC_FLIGHT] = "flight",
    [FQ_JREC_DONE] = "done",
    [FQ_JREC_DEBT] = "debt",
    [FQ_JREC_EXPIRED] = "expired",
    [FQ_JREC_REFUSED] = "refused",
};

static bool jr_type_known(int t)
{
    return t >= FQ_JREC_FLIGHT && t <= FQ_JREC_REFUSED;
}

/* The refusals a refused record may hold: those that depend on the moment. */
static bool jr_refusal_valid(fq_status s)
{
    return s == FQ_EEXIST || s == FQ_EFULL || s == FQ_EOVERLOAD;
}

/* A record of a run with its charge: flight, or expired. */
static bool jr_charged(enum fq_jrec_type t)
{
    return t == FQ_JREC_FLIGHT || t == FQ_JREC_EXPIRED;
}

bool fq_jrec_valid(const fq_jrec *r, const char **why)
{
    const char *w = NULL;
    size_t rl = strnlen(r->run_id, sizeof r->run_id);
    size_t wl = strnlen(r->workflow, sizeof r->workflow);
    bool has_run = jr_charged(r->type) || r->type == FQ_JREC_DONE;
    if (!jr_type_known((int)r->type))
        w = "the record type is not known";
    else if (!fq_tenant_id_valid(r->tenant, strnlen(r->tenant, sizeof r->tenant)))
        w = "t: not a valid tenant id";
    else if (has_run && !fq_msg_name_valid(r->run_id, rl, FQ_RUN_ID_MAX))
        w = "r: not a valid run id";
    else if (!has_run && rl)
        w = "r: a debt or refused record has no run";
    else if (wl && (!jr_charged(r->type) || !fq_msg_name_valid(r->workflow, wl,
                                                                FQ_WORKFLOW_MAX)))
        w = "w: not a valid workflow name";
    else if (jr_charged(r->type) ? r->est < 1 : r->est || r->declared)
        w = "e: a flight or expired record's estimate is 1 to 2^32-1, other records have none";
    else if (r->seq > (uint64_t)FQ_JOURNAL_MAX_INT || (r->type == FQ_JREC_DEBT && r->seq) ||
             (r->type == FQ_JREC_REFUSED && !r->seq))
        w = "s: a sequence is 0 to 2^53, a debt record has none, a refused record one from 1";
    else if (r->type == FQ_JREC_REFUSED ? !jr_refusal_valid(r->refusal) : r->refusal != FQ_OK)
        w = "c: a refused record's is duplicate, tenant_full or overload; other records have none";
    else if (r->deficit > 0 || r->deficit < FQ_JOURNAL_MIN_DEFICIT ||
             (r->type != FQ_JREC_DEBT && r->deficit))
        w = "df: a debt is -2^62 to 0, and only a debt record has one";
    else if (r->at_ms < 0 || r->at_ms > FQ_JOURNAL_MAX_INT)
        w = "at: a time is 0 to 2^53 ms";
    else if (r->unconfirmed && r->type != FQ_JREC_DONE)
        w = "u: only a done record is unconfirmed";
    if (why)
        *why = w;
    return !w;
}

/* ---- writing ------------------------------------------------------------ */

/* The members of a record, by JR_*: their names, which each type must
 * have and may have, and where each is in fq_jrec. Both the writer and the
 * reader walk these. */
enum { JR_ST, JR_T, JR_R, JR_W, JR_E, JR_D, JR_S, JR_DF, JR_AT, JR_U, JR_C, JR__N };
static const char *const jr_member[JR__N] = {
    [JR_ST] = "st", [JR_T] = "t", [JR_R] = "r", [JR_W] = "w", [JR_E] = "e",
    [JR_D] = "d", [JR_S] = "s", [JR_DF] = "df", [JR_AT] = "at", [JR_U] = "u", [JR_C] = "c",
};

/* Which members each type must have (bit JR_*) and may have. */
static const unsigned jr_required[] = {
    [FQ_JREC_FLIGHT] = 1u << JR_T | 1u << JR_R | 1u << JR_E | 1u << JR_D | 1u << JR_S | 1u << JR_AT,
    [FQ_JREC_DONE] = 1u << JR_T | 1u << JR_R | 1u << JR_S | 1u << JR_AT,
    [FQ_JREC_DEBT] = 1u << JR_T | 1u << JR_DF | 1u << JR_AT,
    [FQ_JREC_EXPIRED] = 1u << JR_T | 1u << JR_R | 1u << JR_E | 1u << JR_D | 1u << JR_S |
                        1u << JR_AT,
    [FQ_JREC_REFUSED] = 1u << JR_T | 1u << JR_S | 1u << JR_C | 1u << JR_AT,
};
static const unsigned jr_allowed[] = {
    [FQ_JREC_FLIGHT] = 1u << JR_W,
    [FQ_JREC_DONE] = 1u << JR_U,
    [FQ_JREC_DEBT] = 0,
    [FQ_JREC_EXPIRED] = 1u << JR_W,
    [FQ_JREC_REFUSED] = 0,
};

/* The members that are a field of fq_jrec as it is: names, then numbers,
 * each range-checked on reading in this order. */
static const struct jr_name_member {
    int k;                      /* JR_* */
    size_t off, max;            /* where in fq_jrec, and its longest */
    bool tenant;                /* a tenant id, not a run or workflow name */
    const char *why;
} jr_names[] = {
    {JR_T, offsetof(fq_jrec, tenant), FQ_TENANT_MAX, true, "t: not a valid tenant id"},
    {JR_R, offsetof(fq_jrec, run_id), FQ_RUN_ID_MAX, false, "r: not a valid run id"},
    {JR_W, offsetof(fq_jrec, workflow), FQ_WORKFLOW_MAX, false, "w: not a valid workflow name"},
};
enum jr_width { JR_U32, JR_U64, JR_I64 };
static const struct jr_num_member {
    int k;                      /* JR_* */
    int64_t lo, hi;             /* its range */
    size_t off;                 /* where in fq_jrec */
    enum jr_width width;        /* and of which type */
    const char *why;
} jr_nums[] = {
    {JR_E, 1, UINT32_MAX, offsetof(fq_jrec, est), JR_U32, "e: not an integer from 1 to 2^32-1"},
    {JR_D, 0, UINT32_MAX, offsetof(fq_jrec, declared), JR_U32,
     "d: not an integer from 0 to 2^32-1"},
    {JR_S, 0, FQ_JOURNAL_MAX_INT, offsetof(fq_jrec, seq), JR_U64,
     "s: not an integer from 0 to 2^53"},
    {JR_DF, FQ_JOURNAL_MIN_DEFICIT, 0, offsetof(fq_jrec, deficit), JR_I64,
     "df: not an integer from -2^62 to 0"},
    {JR_AT, 0, FQ_JOURNAL_MAX_INT, offsetof(fq_jrec, at_ms), JR_I64,
     "at: not an integer from 0 to 2^53"},
};

/* The members in the order they are written. */
static const int jr_write_order[] = {JR_ST, JR_T, JR_R, JR_W, JR_E, JR_D, JR_S, JR_DF, JR_C, JR_AT,
                                     JR_U};

/* Member k of r as JSON into w. */
static void jr_put(fq_json *w, const fq_jrec *r, int k)
{
    fq_json_key(w, jr_member[k]);
    switch (k) {
    case JR_ST: fq_json_string(w, jr_type_name[r->type]); return;
    case JR_C: fq_json_string(w, fq_status_code(r->refusal)); return;
    case JR_U: fq_json_bool(w, true); return;
    }
    for (size_t i = 0; i < sizeof jr_names / sizeof *jr_names; i++)
        if (jr_names[i].k == k)
            fq_json_string(w, (const char *)r + jr_names[i].off);
    for (size_t i = 0; i < sizeof jr_nums / sizeof *jr_nums; i++) {
        const struct jr_num_member *n = &jr_nums[i];
        const char *at = (const char *)r + n->off;
        uint32_t u32;
        uint64_t u64;
        int64_t i64;
        if (n->k != k)
            continue;
        switch (n->width) {
        case JR_U32: memcpy(&u32, at, sizeof u32); fq_json_int(w, u32); break;
        case JR_U64: memcpy(&u64, at, sizeof u64); fq_json_int(w, (int64_t)u64); break;
        case JR_I64: memcpy(&i64, at, sizeof i64); fq_json_int(w, i64); break;
        }
    }
}

static const char jr_head[] = "{\"v\":1,\"entries\":[";

fq_status fq_jbatch_append(fq_jbatch *b, const fq_jrec *r)
{
    if (!fq_jrec_valid(r, NULL))
        return FQ_EINVAL;
    /* what its type must have, a workflow if it has one, u if set */
    unsigned has = 1u << JR_ST | jr_required[r->type] |
                   (r->workflow[0] ? jr_allowed[r->type] & 1u << JR_W : 0) |
                   (r->unconfirmed ? 1u << JR_U : 0);
    char e[512];        /* the longest record is about 330 bytes */
    fq_json w;
    fq_json_init(&w, e, sizeof e);
    fq_json_begin_object(&w);
    for (size_t i = 0; i < sizeof jr_write_order / sizeof *jr_write_order; i++)
        if (has & 1u << jr_write_order[i])
            jr_put(&w, r, jr_write_order[i]);
    fq_json_end_object(&w);
    size_t len = 0;
    if (fq_json_finish(&w, &len) != FQ_OK)
        return FQ_EINVAL;
    /* the head or a comma, the record, and room for the closing "]}" */
    fq_buf *text = &b->text;
    if (fq_buf_reserve(text, (b->records ? 1 : sizeof jr_head) + len + 2) != FQ_OK)
        return FQ_ENOMEM;
    if (!b->records)
        fq_buf_append(text, jr_head, sizeof jr_head - 1);
    else
        fq_buf_putc(text, ',');
    fq_buf_append(text, e, len);
    b->records++;
    return FQ_OK;
}

const char *fq_jbatch_text(fq_jbatch *b, size_t *len)
{
    if (!b->records)
        return NULL;
    /* Room was kept by the append: the closing bytes go past len, so the
     * next append overwrites them and continues the batch. */
    memcpy(b->text.p + b->text.len, "]}", 3);
    *len = b->text.len + 2;
    return b->text.p;
}

void fq_jbatch_clear(fq_jbatch *b)
{
    fq_buf_reset(&b->text);
    b->records = 0;
}

void fq_jbatch_free(fq_jbatch *b)
{
    fq_buf_free(&b->text);
    b->records = 0;
}

/* ---- reading ------------------------------------------------------------ */

static void jr_refuse(fq_jcounts *c, bool unknown, const char *why)
{
    if (unknown)
        c->unknown++;
    else
        c->invalid++;
    if (!c->why[0])
        snprintf(c->why, sizeof c->why, "%s", why);
}

/* An integral number in [lo, hi] (|lo|, |hi| <= 2^62, exact as doubles). */
static bool jr_int(int64_t *out, const cJSON *v, int64_t lo, int64_t hi)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < (double)lo || d > (double)hi || d != floor(d))
        return false;
    *out = (int64_t)d;
    return true;
}

static bool jr_name(char *dst, size_t max, const cJSON *v, bool tenant)
{
    if (!cJSON_IsString(v))
        return false;
    size_t len = strnlen(v->valuestring, max + 1);
    if (tenant ? !fq_tenant_id_valid(v->valuestring, len)
               : !fq_msg_name_valid(v->valuestring, len, max))
        return false;
    memcpy(dst, v->valuestring, len + 1);
    return true;
}

/* v, checked against n's range, into its field of r. */
static void jr_store(fq_jrec *r, const struct jr_num_member *n, int64_t v)
{
    char *at = (char *)r + n->off;
    uint32_t u32 = (uint32_t)v;
    uint64_t u64 = (uint64_t)v;
    switch (n->width) {
    case JR_U32: memcpy(at, &u32, sizeof u32); break;
    case JR_U64: memcpy(at, &u64, sizeof u64); break;
    case JR_I64: memcpy(at, &v, sizeof v); break;
    }
}

/* e's members by JR_* into m, and which are there into *has; false and
 * why if e is not an object or has one twice. */
static bool jr_members(const cJSON **m, unsigned *has, const cJSON *e, const char **why)
{
    if (!cJSON_IsObject(e)) {
        *why = "a record is not a JSON object";
        return false;
    }
    for (const cJSON *c = e->child; c; c = c->next) {
        for (int k = 0; k < JR__N; k++) {
            if (strcmp(c->string, jr_member[k]) != 0)
                continue;
            if (*has & (1u << k)) {
                *why = "a record has a member twice";
                return false;
            }
            *has |= 1u << k;
            m[k] = c;
        }
    }
    return true;
}

/* r's type from st, and whether the members there are the ones it takes. */
static bool jr_type(fq_jrec *r, const cJSON *const *m, unsigned has, bool *unknown,
                    const char **why)
{
    if (!cJSON_IsString(m[JR_ST])) {
        *why = "st: missing or not a string";
        return false;
    }
    for (int t = FQ_JREC_FLIGHT; t <= FQ_JREC_REFUSED; t++)
        if (strcmp(m[JR_ST]->valuestring, jr_type_name[t]) == 0)
            r->type = (enum fq_jrec_type)t;
    if (!r->type) {
        *unknown = true;
        *why = "st: a record type that is not known";
        return false;
    }
    unsigned req = jr_required[r->type], ok = req | jr_allowed[r->type] | 1u << JR_ST;
    if ((has & req) != req || (has & ~ok)) {
        *why = "a record lacks a member its type needs, or has one it does not";
        return false;
    }
    return true;
}

/* The values of r's members, each checked. */
static bool jr_fields(fq_jrec *r, const cJSON *const *m, const char **why)
{
    for (size_t i = 0; i < sizeof jr_names / sizeof *jr_names; i++) {
        const struct jr_name_member *n = &jr_names[i];
        if (m[n->k] && !jr_name((char *)r + n->off, n->max, m[n->k], n->tenant)) {
            *why = n->why;
            return false;
        }
    }
    for (size_t i = 0; i < sizeof jr_nums / sizeof *jr_nums; i++) {
        const struct jr_num_member *n = &jr_nums[i];
        int64_t v;
        if (!m[n->k])
            continue;
        if (!jr_int(&v, m[n->k], n->lo, n->hi)) {
            *why = n->why;
            return false;
        }
        jr_store(r, n, v);
    }
    if (m[JR_C]) {
        static const fq_status refusals[] = {FQ_EEXIST, FQ_EFULL, FQ_EOVERLOAD};
        for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++)
            if (cJSON_IsString(m[JR_C]) &&
                strcmp(m[JR_C]->valuestring, fq_status_code(refusals[i])) == 0)
                r->refusal = refusals[i];
        if (r->refusal == FQ_OK) {
            *why = "c: not duplicate, tenant_full or overload";
            return false;
        }
    }
    if (m[JR_U] && !cJSON_IsBool(m[JR_U])) {
        *why = "u: not true or false";
        return false;
    }
    r->unconfirmed = m[JR_U] && cJSON_IsTrue(m[JR_U]);
    return true;
}

/* One entry: a valid record into *r, or false and why. *unknown: refused
 * for its type alone. */
static bool jr_entry(fq_jrec *r, const cJSON *e, bool *unknown, const char **why)
{
    const cJSON *m[JR__N] = {NULL};
    unsigned has = 0;
    *unknown = false;
    *r = (fq_jrec){0};
    return jr_members(m, &has, e, why) && jr_type(r, m, has, unknown, why) &&
           jr_fields(r, m, why) && fq_jrec_valid(r, why);
}

fq_status fq_journal_decode(const void *data, size_t len, fq_jrec_fn fn, void *arg,
                            fq_jcounts *counts)
{
    cJSON *o = data ? cJSON_ParseWithLength(data, len) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "v");
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(o, "entries");
    if (!cJSON_IsObject(o) || !cJSON_IsNumber(v) || v->valuedouble != 1 ||
        !cJSON_IsArray(entries)) {
        jr_refuse(counts, false, "a message is not a journal batch of version 1");
        cJSON_Delete(o);
        return FQ_EINVAL;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        fq_jrec r;
        bool unknown;
        const char *why = NULL;
        if (!jr_entry(&r, e, &unknown, &why)) {
            jr_refuse(counts, unknown, why);
            continue;
        }
        counts->records++;
        fn(arg, &r);
    }
    cJSON_Delete(o);
    return FQ_OK;
}
