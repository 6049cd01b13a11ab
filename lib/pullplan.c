/* pullplan.c -- which pull consumers of one fetch thread ask next, and for how many; what follows a create (pullplan.h). */
#include "pullplan.h"

#include <string.h>

size_t fq_pull_plan(fq_pull_req *out, size_t cap, fq_pull_cons *c, size_t n, size_t *cursor,
                    uint64_t budget, uint64_t now)
{
    if (!n)
        return 0;
    /* What batches hold: one-message requests are outside the budget. */
    uint64_t used = 0;
    for (size_t i = 0; i < n; i++)
        used += (uint64_t)c[i].queued + (c[i].granted > 1 ? c[i].asked : 0);
    size_t start = *cursor < n ? *cursor : 0, k = 0, next = start;
    bool left_out = false;
    for (size_t j = 0; j < n && k < cap; j++) {
        size_t i = (start + j) % n;
        fq_pull_cons *x = &c[i];
        if (!x->ready || x->open || now < x->retry_at ||
            x->queued >= (uint64_t)FQ_PULL_BACKLOG_BATCHES * x->batch)
            continue;
        uint32_t want = x->busy ? x->batch : 1;
        if (want > 1) {
            /* what is left of the budget, if anything: a smaller batch now
             * beats none; none left, one message, and first in the next
             * turn: a busy consumer is never without a request open */
            if (used + want > budget)
                want = used < budget ? (uint32_t)(budget - used) : 1;
            if (want > 1) {
                used += want;
                if (!left_out)
                    next = (i + 1) % n;
            } else if (!left_out) {
                next = i;
                left_out = true;
            }
        }
        x->open = true;
        x->asked = x->granted = want;
        x->got = 0;
        out[k++] = (fq_pull_req){.cons = (uint32_t)i, .want = want};
    }
    *cursor = next;
    return k;
}

void fq_pull_took(fq_pull_cons *c)
{
    if (c->asked)
        c->asked--;
    c->got++;
}

bool fq_pull_filled(const fq_pull_cons *c)
{
    return c->open && !c->asked;
}

void fq_pull_ended(fq_pull_cons *c)
{
    c->busy = c->got > 0;
    c->open = false;
    c->asked = c->granted = 0;
    c->got = 0;
}

void fq_pull_failed(fq_pull_cons *c, uint64_t retry_at)
{
    c->open = false;
    c->asked = c->granted = 0;
    c->got = 0;
    c->retry_at = retry_at;
}

void fq_pull_reset(fq_pull_cons *c)
{
    c->open = false;
    c->asked = c->granted = 0;
    c->got = 0;
    c->busy = true;
    c->retry_at = 0;
}

fq_pull_step_next fq_pull_step_decide(const fq_pull_step *s)
{
    if (!s->wanted)
        return FQ_PULL_STEP_STOPPED;
    return s->fenced ? FQ_PULL_STEP_HELD : FQ_PULL_STEP_ON;
}

fq_pull_create_step fq_pull_create_next(uint64_t *retry_at, const fq_pull_create *c,
                                        uint64_t now, uint64_t retry_ms)
{
    *retry_at = 0;
    if (c->answered && c->ok)
        return FQ_PULL_CREATE_MADE;
    if (c->wanted && !c->answered)
        return c->fenced ? FQ_PULL_CREATE_HELD : FQ_PULL_CREATE_AGAIN;
    if (c->wanted && c->err_code == FQ_PULL_WQ_NOT_UNIQUE && !c->newer && !c->unstaled &&
        !c->fenced)
        return FQ_PULL_CREATE_UNSTALE;
    if (c->wanted)
        *retry_at = now + retry_ms;
    return FQ_PULL_CREATE_FAILED;
}

bool fq_pull_term_name(const char *name, const char *durable, uint64_t *term)
{
    size_t dl = strlen(durable);
    *term = 0;
    if (strncmp(name, durable, dl) != 0)
        return false;
    if (!name[dl])
        return true;
    const char *p = name + dl + 1;
    if (name[dl] != '-' || !*p)
        return false;
    uint64_t t = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (t > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        t = t * 10 + (uint64_t)(*p - '0');
    }
    *term = t;
    return !*p;
}

void fq_pull_gone_note(fq_pull_gone *g, const char *durable, const char *name)
{
    size_t len = strlen(name), at = 0;
    uint64_t t;
    if (!len || len >= FQ_PULL_NAME_CAP || !fq_pull_term_name(name, durable, &t))
        return;
    for (size_t i = 0; i < FQ_PULL_GONE && g->name[i][0]; i++)
        if (strcmp(g->name[i], name) == 0)
            return;
    while (at < FQ_PULL_GONE && g->name[at][0] && g->term[at] >= t)
        at++;
    if (at == FQ_PULL_GONE)
        return;     /* older than every one kept, and no room */
    memmove(g->name[at + 1], g->name[at], (FQ_PULL_GONE - 1 - at) * sizeof g->name[0]);
    memmove(&g->term[at + 1], &g->term[at], (FQ_PULL_GONE - 1 - at) * sizeof g->term[0]);
    memcpy(g->name[at], name, len + 1);
    g->term[at] = t;
}

size_t fq_pull_gone_take(fq_pull_gone *g, const char *durable, uint64_t term, const char *text,
                         size_t len)
{
    size_t kept = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        while (p < end && *p == ' ')
            p++;
        const char *w = p;
        while (p < end && *p != ' ')
            p++;
        size_t wl = (size_t)(p - w);
        char buf[FQ_PULL_NAME_CAP];
        uint64_t t;
        if (!wl || wl >= sizeof buf)
            continue;
        memcpy(buf, w, wl);
        buf[wl] = '\0';
        if (strlen(buf) != wl || !fq_pull_term_name(buf, durable, &t) || t >= term)
            continue;
        fq_pull_gone_note(g, durable, buf);
        kept++;
    }
    return kept;
}

int fq_pull_gone_next(const fq_pull_gone *g, int i, const char *durable, uint64_t term,
                      uint64_t *t)
{
    for (; i >= 0 && i < FQ_PULL_GONE && g->name[i][0]; i++)
        if (fq_pull_term_name(g->name[i], durable, t) && *t < term)
            return i;
    return -1;
}

size_t fq_pull_gone_describe(char *out, size_t cap, const fq_pull_gone *g, const char *durable,
                             uint64_t term)
{
    size_t len = 0;
    out[0] = '\0';
    uint64_t t;
    for (int i = 0; (i = fq_pull_gone_next(g, i, durable, term, &t)) >= 0; i++) {
        size_t nl = strlen(g->name[i]);
        if (len + (len > 0) + nl >= cap)
            continue;
        if (len)
            out[len++] = ' ';
        memcpy(out + len, g->name[i], nl + 1);
        len += nl;
    }
    return len;
}
