/* submit_ref.h -- the reading of a submit body lib/msg.c had before its
 * one-pass scanner: cJSON's tree after a scan for what cJSON lets through.
 * Kept only as a reference: tests/fuzz/fuzz_submit.c checks the scanner
 * against it, and fairq-bench --msg times both. */
#ifndef FQ_SUBMIT_REF_H
#define FQ_SUBMIT_REF_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "msg.h"

/* The reference: fq_utf8_len, fq_msg_scan, fq_msg_object and fq_submit_body
 * as lib/msg.c had them, byte for byte in what they decide. */
static size_t ref_utf8_len(const unsigned char *s, size_t n)
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

static bool ref_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool ref_scan(const unsigned char *p, size_t n, bool *nul_top)
{
    long depth = 0;
    bool in_str = false;

    *nul_top = false;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c >= 0x80) {
            size_t k = ref_utf8_len(p + i, n - i);
            if (!k)
                return false;
            i += k;
            continue;
        }
        if (c < 0x20 && (in_str || !ref_space(c)))
            return false;
        if (in_str && c == '\\') {
            if (depth == 1 && n - i >= 6 && memcmp(p + i + 1, "u0000", 5) == 0)
                *nul_top = true;
            i += 2;
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
    return true;
}

typedef struct ref_result {
    fq_status st;
    bool opaque;
    fq_submit s;
    char field[16];     /* the field an error names: its sentence up to ':' */
    bool cls_bad;       /* a class given, but twice or not a name */
} ref_result;

static void ref_fail(ref_result *r, const char *field)
{
    r->st = FQ_EINVAL;
    snprintf(r->field, sizeof r->field, "%s", field);
}

static bool ref_name(char *dst, size_t max, const cJSON *it)
{
    if (!cJSON_IsString(it))
        return false;
    size_t n = strlen(it->valuestring);
    if (!fq_msg_name_valid(it->valuestring, n, max))
        return false;
    memcpy(dst, it->valuestring, n + 1);
    return true;
}

static void ref_parse(ref_result *r, const unsigned char *p, size_t len, const char *tenant,
                      uint32_t max_est)
{
    static const char *const names[] = {"run_id", "workflow", "est_tokens", "tenant",
                                        "subtenant"};
    const char *end = NULL;
    size_t i = 0;
    bool nul = false, seen[5] = {false};
    const cJSON *it[5] = {NULL}, *cls = NULL;
    int ncls = 0;

    memset(r, 0, sizeof *r);
    r->opaque = true;
    while (i < len && ref_space(p[i]))
        i++;
    if (i == len || p[i] != '{' || !ref_scan(p + i, len - i, &nul))
        return;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)p + i, len - i, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return;
    }
    for (i = (size_t)((const unsigned char *)end - p); i < len; i++) {
        if (!ref_space(p[i])) {
            cJSON_Delete(root);
            return;
        }
    }
    r->opaque = false;
    if (nul) {
        ref_fail(r, "body");
        goto out;
    }
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "class") == 0) {
            ncls++;
            cls = cJSON_IsNull(c) ? NULL : c;
        }
        for (size_t k = 0; k < 5; k++) {
            if (strcmp(c->string, names[k]) != 0)
                continue;
            if (seen[k]) {
                ref_fail(r, names[k]);
                goto out;
            }
            seen[k] = true;
            it[k] = cJSON_IsNull(c) ? NULL : c;
        }
    }
    if (it[0] && !ref_name(r->s.run_id, FQ_RUN_ID_MAX, it[0])) {
        ref_fail(r, "run_id");
        goto out;
    }
    if (it[1] && !ref_name(r->s.workflow, FQ_WORKFLOW_MAX, it[1])) {
        ref_fail(r, "workflow");
        goto out;
    }
    if (it[2]) {
        double v = cJSON_IsNumber(it[2]) ? it[2]->valuedouble : NAN;
        if (!isfinite(v) || v < 1 || v > (double)max_est || v != (double)(uint64_t)v) {
            ref_fail(r, "est_tokens");
            goto out;
        }
        r->s.est_tokens = (uint32_t)v;
    }
    if (it[3] && (!cJSON_IsString(it[3]) || strcmp(it[3]->valuestring, tenant) != 0)) {
        ref_fail(r, "tenant");
        goto out;
    }
    if (it[4] && !ref_name(r->s.subtenant, FQ_SUBTENANT_MAX, it[4])) {
        ref_fail(r, "subtenant");
        goto out;
    }
    /* class: read or noted bad, never a refusal */
    if (ncls > 1 || (cls && !ref_name(r->s.cls, FQ_CLASS_MAX, cls)))
        r->cls_bad = true;
out:
    cJSON_Delete(root);
    if (r->st != FQ_OK)
        memset(&r->s, 0, sizeof r->s);
}

#endif
