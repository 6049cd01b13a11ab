/* adminall.c -- one admin request asked of every replica of a deployment, the answers gathered into one reply: whom to ask, when it is complete, what sums (fairq-admin stats --all, reload). */
#include "adminall.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* One replica named by some answer. */
typedef struct fqa_rep {
    char id[FQ_OWNER_ID_MAX + 1];
    bool asked;                 /* handed out by fqa_all_next (or answered unasked) */
    cJSON *answer;              /* its reply; NULL: none yet */
    char why[128];              /* "": no failure said */
} fqa_rep;

struct fqa_all {
    fqa_rep rep[FQA_MAX];       /* in the order they were named */
    size_t n;
    size_t unlisted;            /* ids named past FQA_MAX: never asked */
};

fqa_all *fqa_all_create(void)
{
    return calloc(1, sizeof(fqa_all));
}

void fqa_all_destroy(fqa_all *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n; i++)
        cJSON_Delete(g->rep[i].answer);
    free(g);
}

/* The index of id, added if new and valid; FQA_ANY if neither. */
static size_t fqa_add(fqa_all *g, const char *id)
{
    if (!id || !fq_owner_id_valid(id))
        return FQA_ANY;     /* a reply is untrusted: its ids go into subjects */
    for (size_t i = 0; i < g->n; i++)
        if (strcmp(g->rep[i].id, id) == 0)
            return i;
    if (g->n == FQA_MAX) {
        g->unlisted++;
        return FQA_ANY;
    }
    fqa_rep *r = &g->rep[g->n];
    memset(r, 0, sizeof *r);
    memcpy(r->id, id, strlen(id) + 1);
    return g->n++;
}

static const char *fqa_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static size_t fqa_learn_json(fqa_all *g, const cJSON *j)
{
    size_t named = fqa_add(g, fqa_str(j, "replica")) != FQA_ANY;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "replicas"))
        named += cJSON_IsString(e) && fqa_add(g, e->valuestring) != FQA_ANY;
    return named;
}

size_t fqa_all_learn(fqa_all *g, const char *body, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(body, len);
    size_t named = cJSON_IsObject(j) ? fqa_learn_json(g, j) : 0;
    cJSON_Delete(j);
    return named;
}

bool fqa_all_answer(fqa_all *g, size_t idx, const char *body, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return false;
    }
    fqa_learn_json(g, j);
    if (idx == FQA_ANY)
        idx = fqa_add(g, fqa_str(j, "replica"));
    if (idx >= g->n) {
        cJSON_Delete(j);
        return false;
    }
    fqa_rep *r = &g->rep[idx];
    cJSON_Delete(r->answer);    /* a second answer replaces the first */
    r->answer = j;
    r->asked = true;
    r->why[0] = '\0';
    return true;
}

void fqa_all_failed(fqa_all *g, size_t idx, const char *why)
{
    if (idx < g->n && !g->rep[idx].answer)
        snprintf(g->rep[idx].why, sizeof g->rep[idx].why, "%s", why);
}

bool fqa_all_next(fqa_all *g, size_t *idx, const char **id)
{
    for (size_t i = 0; i < g->n; i++) {
        if (!g->rep[i].asked) {
            g->rep[i].asked = true;
            *idx = i;
            *id = g->rep[i].id;
            return true;
        }
    }
    return false;
}

size_t fqa_all_named(const fqa_all *g)
{
    return g->n;
}

bool fqa_all_settled(const fqa_all *g)
{
    for (size_t i = 0; i < g->n; i++)
        if (!g->rep[i].answer && !g->rep[i].why[0])
            return false;
    return g->n > 0;
}

/* Each overall stats key the answers have, folded across them. */
static void fqa_deployment(cJSON *out, const fqa_all *g)
{
    cJSON *d = cJSON_AddObjectToObject(out, "deployment");
    for (size_t k = 0; k < fq_overall_nrows; k++) {
        const fq_overall_row *row = &fq_overall_rows[k];
        enum fq_tenant_fold fold = row->fold;
        if (!row->stats_key || fold == FQ_FOLD_NONE)
            continue;
        double v = 0;
        bool seen = false;
        for (size_t i = 0; i < g->n; i++) {
            const cJSON *o = cJSON_GetObjectItemCaseSensitive(g->rep[i].answer, "overall");
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, row->stats_key);
            double y = cJSON_IsBool(x) ? cJSON_IsTrue(x) : cJSON_IsNumber(x) ? x->valuedouble
                                                                              : -1;
            if (y < 0)
                continue;   /* not there, or not a count: not folded */
            v = fold == FQ_FOLD_MAX && seen ? (y > v ? y : v) : v + y;
            seen = true;
        }
        if (seen)
            cJSON_AddNumberToObject(d, row->stats_key, v);
    }
}

static int fqa_cmp(const void *a, const void *b)
{
    return strcmp((*(const fqa_rep *const *)a)->id, (*(const fqa_rep *const *)b)->id);
}

/* fqa_all_json's reply, as a tree (NULL: out of memory). */
static cJSON *fqa_tree(const fqa_all *g, bool deployment, const char *missing_why)
{
    const fqa_rep *by_id[FQA_MAX];
    size_t answered = 0;
    bool refused = false;
    for (size_t i = 0; i < g->n; i++) {
        by_id[i] = &g->rep[i];
        answered += g->rep[i].answer != NULL;
        refused |= cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(g->rep[i].answer, "ok"));
    }
    qsort(by_id, g->n, sizeof by_id[0], fqa_cmp);
    bool partial = answered < g->n || g->unlisted || !g->n;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddBoolToObject(out, "ok", !partial && !refused);
    cJSON_AddBoolToObject(out, "partial", partial);
    cJSON_AddNumberToObject(out, "replicas_named", (double)(g->n + g->unlisted));
    cJSON_AddNumberToObject(out, "replicas_answered", (double)answered);
    cJSON *missing = cJSON_AddArrayToObject(out, "missing");
    for (size_t i = 0; i < g->n; i++) {
        if (by_id[i]->answer)
            continue;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "replica", by_id[i]->id);
        cJSON_AddStringToObject(m, "why", by_id[i]->why[0] ? by_id[i]->why : missing_why);
        cJSON_AddItemToArray(missing, m);
    }
    if (g->unlisted)
        cJSON_AddNumberToObject(out, "replicas_not_asked", (double)g->unlisted);
    if (deployment)
        fqa_deployment(out, g);
    cJSON *answers = cJSON_AddArrayToObject(out, "answers");
    for (size_t i = 0; i < g->n; i++)
        if (by_id[i]->answer)
            cJSON_AddItemReferenceToArray(answers, by_id[i]->answer);
    return out;
}

char *fqa_all_json(const fqa_all *g, bool deployment, const char *missing_why)
{
    cJSON *out = fqa_tree(g, deployment, missing_why);
    char *text = out ? cJSON_PrintUnformatted(out) : NULL;
    cJSON_Delete(out);
    return text;
}

/* The deployment's count key, or -1 when no answer had it. */
static double fqa_sum(const cJSON *out, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(out, "deployment"), key);
    return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

char *fqa_all_drained(bool *drained, const fqa_all *g, int64_t submit_msgs, int64_t done_msgs,
                      const char *missing_why)
{
    *drained = false;
    cJSON *out = fqa_tree(g, true, missing_why);
    if (!out)
        return NULL;
    *drained = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok")) &&
               fqa_sum(out, "queued_runs") == 0 && fqa_sum(out, "in_flight") == 0 &&
               submit_msgs == 0 && done_msgs == 0;
    cJSON_AddBoolToObject(out, "drained", *drained);
    cJSON_AddNumberToObject(out, "submit_msgs", (double)submit_msgs);
    cJSON_AddNumberToObject(out, "done_msgs", (double)done_msgs);
    char *text = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return text;
}
