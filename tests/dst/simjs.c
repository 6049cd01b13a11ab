/* simjs.c -- a small, honest simulated JetStream (simjs.h says what it keeps and why). */
#include "simjs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fq.h"

/*
 * Principles
 *
 * - Plain data and linear scans where the simulation keeps things small
 *   (a consumer's pending list, a bucket's messages); hash maps where a
 *   run of the simulation grows them (de-duplication ids, per-subject
 *   counts). Test code: an allocation that fails aborts.
 * - Every rule the server applies to a publish is applied in the server's
 *   order: the stream by subject, the message id, the expected sequences,
 *   the per-subject limit, then the store.
 */

static void *sj_xalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "simjs: out of memory\n");
        abort();
    }
    return p;
}

static void *sj_xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "simjs: out of memory\n");
        abort();
    }
    return p;
}

static char *sj_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = sj_xalloc(n);
    memcpy(d, s, n);
    return d;
}

/* ---- a string-keyed map of two numbers ----------------------------------- */

typedef struct sj_ent {
    char *key;
    uint64_t a, b;
    struct sj_ent *next;
} sj_ent;

typedef struct sj_map {
    sj_ent **b;
    size_t nb, n;
} sj_map;

static sj_ent *sj_map_find(const sj_map *m, const char *key)
{
    if (!m->nb)
        return NULL;
    for (sj_ent *e = m->b[fq_fnv1a(key) & (m->nb - 1)]; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static sj_ent *sj_map_put(sj_map *m, const char *key)
{
    sj_ent *e = sj_map_find(m, key);
    if (e)
        return e;
    if (m->n >= m->nb) {
        size_t nb = m->nb ? m->nb * 2 : 64;
        sj_ent **b = sj_xalloc(nb * sizeof *b);
        for (size_t i = 0; i < m->nb; i++)
            for (sj_ent *x = m->b[i], *nx; x; x = nx) {
                nx = x->next;
                size_t k = fq_fnv1a(x->key) & (nb - 1);
                x->next = b[k];
                b[k] = x;
            }
        free(m->b);
        m->b = b;
        m->nb = nb;
    }
    e = sj_xalloc(sizeof *e);
    e->key = sj_xstrdup(key);
    size_t k = fq_fnv1a(key) & (m->nb - 1);
    e->next = m->b[k];
    m->b[k] = e;
    m->n++;
    return e;
}

/* Drop every entry keep() refuses. */
static void sj_map_filter(sj_map *m, bool (*keep)(const sj_ent *e, const void *arg), const void *arg)
{
    for (size_t i = 0; i < m->nb; i++)
        for (sj_ent **pp = &m->b[i]; *pp;) {
            sj_ent *e = *pp;
            if (keep && keep(e, arg)) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            free(e->key);
            free(e);
            m->n--;
        }
}

static void sj_map_free(sj_map *m)
{
    sj_map_filter(m, NULL, NULL);
    free(m->b);
    m->b = NULL;
    m->nb = 0;
}

/* ---- the server ----------------------------------------------------------- */

typedef struct sj_pend {
    uint64_t sseq, cseq;            /* the message, and its latest delivery */
    uint32_t delivered;
    int64_t due;                    /* server ms it is delivered again */
} sj_pend;

typedef struct sj_consumer {
    char *name, *filter;
    uint64_t ack_wait_ms, max_ack_pending;
    uint64_t next_seq;              /* the next stream sequence never delivered */
    uint64_t dseq;                  /* deliveries made: the last consumer sequence */
    sj_pend *p;                     /* awaiting an ack, by stream sequence */
    size_t np, cap;
} sj_consumer;

typedef struct sj_stream {
    sj_stream_cfg c;                /* strings owned */
    bool kv;                        /* a bucket's: its messages carry KV-Operation */
    uint64_t last_seq;
    uint64_t *seqs;                 /* seqs[i]: the sequence of msgs[i]; NULL msgs[i]: removed */
    sj_msg **msgs;
    size_t n, cap, dead;
    uint64_t live;
    sj_map dedupe;                  /* msg id -> (seq, ts) */
    sj_map per_subject;             /* subject -> live messages */
    sj_consumer **cons;
    size_t ncons;
} sj_stream;

struct sj {
    int64_t now;
    sj_stream **st;
    size_t nst;
    size_t purge_at;                /* de-duplication entries past which expired ones go */
};

sj *sj_create(void)
{
    sj *s = sj_xalloc(sizeof *s);
    s->purge_at = 4096;
    return s;
}

void sj_msg_ref(sj_msg *m)
{
    m->refs++;
}

void sj_msg_unref(sj_msg *m)
{
    if (!m || --m->refs)
        return;
    free(m->subject);
    free(m->hdrs);
    free(m->data);
    free(m->msg_id);
    free(m);
}

static void sj_consumer_free(sj_consumer *c)
{
    free(c->name);
    free(c->filter);
    free(c->p);
    free(c);
}

void sj_destroy(sj *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nst; i++) {
        sj_stream *t = s->st[i];
        for (size_t k = 0; k < t->n; k++)
            sj_msg_unref(t->msgs[k]);
        for (size_t k = 0; k < t->ncons; k++)
            sj_consumer_free(t->cons[k]);
        free(t->cons);
        free(t->seqs);
        free(t->msgs);
        sj_map_free(&t->dedupe);
        sj_map_free(&t->per_subject);
        free((char *)t->c.name);
        free((char *)t->c.subjects);
        free(t);
    }
    free(s->st);
    free(s);
}

int64_t sj_now(const sj *s)
{
    return s->now;
}

/* NATS subject matching: * one token, > the rest (at least one token). */
static bool sj_match(const char *pat, const char *subj)
{
    while (*pat && *subj) {
        if (pat[0] == '>' && !pat[1])
            return true;
        if (pat[0] == '*' && (!pat[1] || pat[1] == '.')) {
            while (*subj && *subj != '.')
                subj++;
            pat++;
        } else {
            while (*pat && *pat != '.' && *pat == *subj)
                pat++, subj++;
            if ((*pat && *pat != '.') || (*subj && *subj != '.'))
                return false;
        }
        if (!*pat && !*subj)
            return true;
        if (*pat != '.' || *subj != '.')
            return false;
        pat++, subj++;
    }
    return !*pat && !*subj;
}

/* Whether two filters can match a common subject, for a work queue's rule. */
static bool sj_overlap(const char *a, const char *b)
{
    while (*a && *b) {
        if ((a[0] == '>' && !a[1]) || (b[0] == '>' && !b[1]))
            return true;
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");
        bool wild = (la == 1 && a[0] == '*') || (lb == 1 && b[0] == '*');
        if (!wild && (la != lb || memcmp(a, b, la) != 0))
            return false;
        a += la, b += lb;
        if (!*a || !*b)
            return !*a && !*b;
        a++, b++;
    }
    return !*a && !*b;
}

static sj_stream *sj_stream_find(const sj *s, const char *name)
{
    for (size_t i = 0; i < s->nst; i++)
        if (strcmp(s->st[i]->c.name, name) == 0)
            return s->st[i];
    return NULL;
}

static sj_stream *sj_stream_by_subject(const sj *s, const char *subject)
{
    for (size_t i = 0; i < s->nst; i++)
        if (sj_match(s->st[i]->c.subjects, subject))
            return s->st[i];
    return NULL;
}

int sj_stream_add(sj *s, const sj_stream_cfg *c)
{
    if (!c->name || !c->subjects || sj_stream_find(s, c->name))
        return -1;
    sj_stream *t = sj_xalloc(sizeof *t);
    t->c = *c;
    t->c.name = sj_xstrdup(c->name);
    t->c.subjects = sj_xstrdup(c->subjects);
    s->st = sj_xrealloc(s->st, (s->nst + 1) * sizeof *s->st);
    s->st[s->nst++] = t;
    return 0;
}

/* Index of seq in t's arrays, or t->n. */
static size_t sj_index(const sj_stream *t, uint64_t seq)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->seqs[mid] < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n && t->seqs[lo] == seq ? lo : t->n;
}

/* Drop the slots of removed messages once they are most of the array. */
static void sj_compact(sj_stream *t)
{
    if (t->dead < 64 || t->dead * 2 < t->n)
        return;
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->msgs[i]) {
            t->msgs[k] = t->msgs[i];
            t->seqs[k++] = t->seqs[i];
        }
    t->n = k;
    t->dead = 0;
}

static void sj_remove_at(sj_stream *t, size_t i)
{
    sj_msg *m = t->msgs[i];
    if (!m)
        return;
    sj_ent *e = sj_map_find(&t->per_subject, m->subject);
    if (e && e->a)
        e->a--;
    t->msgs[i] = NULL;
    t->dead++;
    t->live--;
    sj_msg_unref(m);
}

static bool sj_dedupe_live(const sj_ent *e, const void *arg)
{
    const sj_stream *t = ((const void *const *)arg)[0];
    int64_t now = *(const int64_t *)((const void *const *)arg)[1];
    return (int64_t)e->b + (int64_t)t->c.duplicate_window_ms > now;
}

void sj_set_now(sj *s, int64_t now_ms)
{
    s->now = now_ms;
    for (size_t i = 0; i < s->nst; i++) {
        sj_stream *t = s->st[i];
        if (t->c.max_age_ms) {
            /* Aged out from the front, as the server's expiry walks it. */
            size_t k = 0;
            while (k < t->n && (!t->msgs[k] || t->msgs[k]->ts_ms + (int64_t)t->c.max_age_ms <=
                                                   now_ms)) {
                sj_remove_at(t, k);
                k++;
            }
            sj_compact(t);
        }
        if (t->dedupe.n > s->purge_at) {
            const void *arg[2] = {t, &s->now};
            sj_map_filter(&t->dedupe, sj_dedupe_live, arg);
        }
    }
    size_t most = 0;
    for (size_t i = 0; i < s->nst; i++)
        if (s->st[i]->dedupe.n > most)
            most = s->st[i]->dedupe.n;
    s->purge_at = most * 2 > 4096 ? most * 2 : 4096;
}

/* A JetStream header as the server finds it: the first occurrence of the
 * name's bytes in the block, which must be followed by ':'; the value to
 * the end of its line, blanks trimmed. */
static bool sj_server_header(const char *block, const char *key, char *out, size_t cap)
{
    const char *at = strstr(block, key);
    if (!at || at[strlen(key)] != ':')
        return false;
    const char *v = at + strlen(key) + 1;
    while (*v == ' ')
        v++;
    size_t n = strcspn(v, "\r\n");
    while (n && v[n - 1] == ' ')
        n--;
    if (n + 1 > cap)
        n = cap - 1;
    memcpy(out, v, n);
    out[n] = '\0';
    return true;
}

bool sj_msg_header(const sj_msg *m, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    for (const char *l = m->hdrs; *l;) {
        size_t n = strcspn(l, "\r\n");
        if (n > kl && strncmp(l, key, kl) == 0 && l[kl] == ':') {
            const char *v = l + kl + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(l + n - v);
            if (vl + 1 > cap)
                vl = cap - 1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return true;
        }
        l += n;
        while (*l == '\r' || *l == '\n')
            l++;
    }
    return false;
}

static uint64_t sj_parse_u64(const char *s, bool *ok)
{
    uint64_t v = 0;
    *ok = *s != '\0';
    for (; *s; s++) {
        if (*s < '0' || *s > '9') {
            *ok = false;
            return 0;
        }
        v = v * 10 + (uint64_t)(*s - '0');
    }
    return v;
}

/* The sequence of the last stored message on subject, 0 if none. */
static uint64_t sj_last_on_subject(const sj_stream *t, const char *subject)
{
    for (size_t i = t->n; i-- > 0;)
        if (t->msgs[i] && strcmp(t->msgs[i]->subject, subject) == 0)
            return t->seqs[i];
    return 0;
}

sj_puback sj_publish(sj *s, const sj_pub *p)
{
    sj_puback a = {0};
    sj_stream *t = sj_stream_by_subject(s, p->subject);
    if (!t) {
        a.err = SJ_ERR_NO_STREAM;
        return a;
    }
    a.stream = t->c.name;
    size_t hl = 1;
    for (size_t i = 0; i < p->nhdrs; i++)
        hl += strlen(p->hdrs[i].key) + strlen(p->hdrs[i].value) + 4;
    char *hdrs = sj_xalloc(hl);
    size_t k = 0;
    for (size_t i = 0; i < p->nhdrs; i++)
        k += (size_t)snprintf(hdrs + k, hl - k, "%s: %s\r\n", p->hdrs[i].key, p->hdrs[i].value);
    char id[512], num[64];
    bool has_id = t->c.duplicate_window_ms && sj_server_header(hdrs, "Nats-Msg-Id", id, sizeof id) &&
                  id[0];
    if (has_id) {
        sj_ent *e = sj_map_find(&t->dedupe, id);
        if (e && (int64_t)e->b + (int64_t)t->c.duplicate_window_ms > s->now) {
            free(hdrs);
            a.seq = e->a;
            a.duplicate = true;
            return a;
        }
    }
    bool ok;
    if (sj_server_header(hdrs, "Nats-Expected-Last-Sequence", num, sizeof num)) {
        uint64_t want = sj_parse_u64(num, &ok);
        if (!ok || want != t->last_seq) {
            free(hdrs);
            a.err = SJ_ERR_WRONG_LAST;
            return a;
        }
    }
    if (sj_server_header(hdrs, "Nats-Expected-Last-Subject-Sequence", num, sizeof num)) {
        uint64_t want = sj_parse_u64(num, &ok);
        if (!ok || want != sj_last_on_subject(t, p->subject)) {
            free(hdrs);
            a.err = SJ_ERR_WRONG_LAST;
            return a;
        }
    }
    sj_ent *ps = NULL;
    if (t->c.max_msgs_per_subject) {
        ps = sj_map_put(&t->per_subject, p->subject);
        if (ps->a >= t->c.max_msgs_per_subject) {
            free(hdrs);
            a.err = SJ_ERR_PER_SUBJECT;
            return a;
        }
    } else {
        ps = sj_map_put(&t->per_subject, p->subject);
    }
    sj_msg *m = sj_xalloc(sizeof *m);
    m->seq = ++t->last_seq;
    m->subject = sj_xstrdup(p->subject);
    m->hdrs = hdrs;
    m->data = sj_xalloc(p->len + 1);
    if (p->len)
        memcpy(m->data, p->data, p->len);
    m->len = p->len;
    m->ts_ms = s->now;
    m->msg_id = has_id ? sj_xstrdup(id) : NULL;
    m->refs = 1;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        t->seqs = sj_xrealloc(t->seqs, t->cap * sizeof *t->seqs);
        t->msgs = sj_xrealloc(t->msgs, t->cap * sizeof *t->msgs);
    }
    t->seqs[t->n] = m->seq;
    t->msgs[t->n++] = m;
    t->live++;
    ps->a++;
    if (has_id) {
        sj_ent *e = sj_map_put(&t->dedupe, id);
        e->a = m->seq;
        e->b = (uint64_t)s->now;
    }
    a.seq = m->seq;
    return a;
}

void sj_restart(sj *s)
{
    for (size_t i = 0; i < s->nst; i++) {
        sj_stream *t = s->st[i];
        /* Rebuilt from what is stored, within the window of now. */
        sj_map_free(&t->dedupe);
        if (!t->c.duplicate_window_ms)
            continue;
        for (size_t k = 0; k < t->n; k++) {
            sj_msg *m = t->msgs[k];
            if (!m || !m->msg_id || m->ts_ms + (int64_t)t->c.duplicate_window_ms <= s->now)
                continue;
            sj_ent *e = sj_map_put(&t->dedupe, m->msg_id);
            e->a = m->seq;
            e->b = (uint64_t)m->ts_ms;
        }
    }
}

uint64_t sj_last_seq(const sj *s, const char *stream)
{
    const sj_stream *t = sj_stream_find(s, stream);
    return t ? t->last_seq : 0;
}

uint64_t sj_msgs(const sj *s, const char *stream)
{
    const sj_stream *t = sj_stream_find(s, stream);
    return t ? t->live : 0;
}

sj_msg *sj_get(sj *s, const char *stream, uint64_t seq)
{
    sj_stream *t = sj_stream_find(s, stream);
    if (!t)
        return NULL;
    size_t i = sj_index(t, seq);
    if (i == t->n || !t->msgs[i])
        return NULL;
    sj_msg_ref(t->msgs[i]);
    return t->msgs[i];
}

const sj_msg *sj_next(const sj *s, const char *stream, uint64_t after)
{
    const sj_stream *t = sj_stream_find(s, stream);
    if (!t)
        return NULL;
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->seqs[mid] <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < t->n; lo++)
        if (t->msgs[lo])
            return t->msgs[lo];
    return NULL;
}

int sj_delete(sj *s, const char *stream, uint64_t seq)
{
    sj_stream *t = sj_stream_find(s, stream);
    if (!t)
        return -1;
    size_t i = sj_index(t, seq);
    if (i == t->n || !t->msgs[i])
        return -1;
    sj_remove_at(t, i);
    sj_compact(t);
    return 0;
}

/* ---- consumers ------------------------------------------------------------ */

static sj_consumer *sj_cons_find(const sj_stream *t, const char *name, size_t *at)
{
    for (size_t i = 0; t && i < t->ncons; i++)
        if (strcmp(t->cons[i]->name, name) == 0) {
            if (at)
                *at = i;
            return t->cons[i];
        }
    return NULL;
}

/* The stream's first stored sequence, or the next one if it holds none. */
static uint64_t sj_first_seq(const sj_stream *t)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->msgs[i])
            return t->seqs[i];
    return t->last_seq + 1;
}

int sj_consumer_add(sj *s, const char *stream, const char *name, const char *filter,
                    uint64_t ack_wait_ms, uint64_t max_ack_pending)
{
    sj_stream *t = sj_stream_find(s, stream);
    if (!t)
        return SJ_ERR_NO_STREAM;
    if (sj_cons_find(t, name, NULL))
        return SJ_ERR_EXISTS;
    const char *f = filter && *filter ? filter : t->c.subjects;
    if (t->c.retention == SJ_WORKQUEUE)
        for (size_t i = 0; i < t->ncons; i++)
            if (sj_overlap(t->cons[i]->filter, f))
                return SJ_ERR_WQ_OVERLAP;
    sj_consumer *c = sj_xalloc(sizeof *c);
    c->name = sj_xstrdup(name);
    c->filter = sj_xstrdup(f);
    c->ack_wait_ms = ack_wait_ms;
    c->max_ack_pending = max_ack_pending;
    c->next_seq = sj_first_seq(t);
    t->cons = sj_xrealloc(t->cons, (t->ncons + 1) * sizeof *t->cons);
    t->cons[t->ncons++] = c;
    return 0;
}

int sj_consumer_delete(sj *s, const char *stream, const char *name)
{
    sj_stream *t = sj_stream_find(s, stream);
    size_t at = 0;
    sj_consumer *c = sj_cons_find(t, name, &at);
    if (!c)
        return SJ_ERR_NOT_FOUND;
    sj_consumer_free(c);
    t->cons[at] = t->cons[--t->ncons];
    return 0;
}

bool sj_consumer_exists(const sj *s, const char *stream, const char *name)
{
    return sj_cons_find(sj_stream_find(s, stream), name, NULL) != NULL;
}

size_t sj_consumer_names(const sj *s, const char *stream, const char **out, size_t max)
{
    const sj_stream *t = sj_stream_find(s, stream);
    if (!t)
        return 0;
    for (size_t i = 0; i < t->ncons && i < max; i++)
        out[i] = t->cons[i]->name;
    return t->ncons;
}

size_t sj_consumer_pending(const sj *s, const char *stream, const char *name)
{
    const sj_consumer *c = sj_cons_find(sj_stream_find(s, stream), name, NULL);
    return c ? c->np : 0;
}

void sj_consumer_reset(sj *s, const char *stream, const char *name)
{
    sj_stream *t = sj_stream_find(s, stream);
    sj_consumer *c = sj_cons_find(t, name, NULL);
    if (!c)
        return;
    c->np = 0;
    c->dseq = 0;
    c->next_seq = sj_first_seq(t);
}

static sj_pend *sj_pend_find(sj_consumer *c, uint64_t sseq, size_t *at)
{
    size_t lo = 0, hi = c->np;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->p[mid].sseq < sseq)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (at)
        *at = lo;
    return lo < c->np && c->p[lo].sseq == sseq ? &c->p[lo] : NULL;
}

static void sj_pend_del(sj_consumer *c, size_t at)
{
    memmove(c->p + at, c->p + at + 1, (c->np - at - 1) * sizeof *c->p);
    c->np--;
}

static void sj_deliver(sj *s, sj_consumer *c, sj_pend *p, sj_msg *m, sj_delivery *out)
{
    p->cseq = ++c->dseq;
    p->due = s->now + (int64_t)c->ack_wait_ms;
    sj_msg_ref(m);
    *out = (sj_delivery){.msg = m, .sseq = p->sseq, .cseq = p->cseq, .delivered = p->delivered};
}

size_t sj_fetch(sj *s, const char *stream, const char *name, size_t max, sj_delivery *out)
{
    sj_stream *t = sj_stream_find(s, stream);
    sj_consumer *c = sj_cons_find(t, name, NULL);
    if (!c)
        return 0;
    size_t got = 0;
    /* Redeliveries first, in stream order; a message gone from the stream
     * meanwhile (aged out, purged) is dropped from pending. */
    for (size_t i = 0; i < c->np && got < max;) {
        sj_pend *p = &c->p[i];
        size_t k = sj_index(t, p->sseq);
        if (k == t->n || !t->msgs[k]) {
            sj_pend_del(c, i);
            continue;
        }
        if (p->due <= s->now) {
            p->delivered++;
            sj_deliver(s, c, p, t->msgs[k], &out[got++]);
        }
        i++;
    }
    if (c->next_seq < sj_first_seq(t))
        c->next_seq = sj_first_seq(t);
    while (got < max && c->np < c->max_ack_pending && c->next_seq <= t->last_seq) {
        uint64_t seq = c->next_seq++;
        size_t k = sj_index(t, seq);
        if (k == t->n || !t->msgs[k] || !sj_match(c->filter, t->msgs[k]->subject))
            continue;
        size_t at;
        if (sj_pend_find(c, seq, &at))
            continue;
        if (c->np == c->cap) {
            c->cap = c->cap ? c->cap * 2 : 16;
            c->p = sj_xrealloc(c->p, c->cap * sizeof *c->p);
        }
        memmove(c->p + at + 1, c->p + at, (c->np - at) * sizeof *c->p);
        c->np++;
        c->p[at] = (sj_pend){.sseq = seq, .delivered = 1};
        sj_deliver(s, c, &c->p[at], t->msgs[k], &out[got++]);
    }
    return got;
}

void sj_ack(sj *s, const char *stream, const char *name, uint64_t sseq)
{
    sj_stream *t = sj_stream_find(s, stream);
    sj_consumer *c = sj_cons_find(t, name, NULL);
    size_t at;
    if (!c || !sj_pend_find(c, sseq, &at))
        return;
    sj_pend_del(c, at);
    if (t->c.retention == SJ_WORKQUEUE) {
        size_t k = sj_index(t, sseq);
        if (k < t->n && t->msgs[k]) {
            sj_remove_at(t, k);
            sj_compact(t);
        }
    }
}

void sj_nak(sj *s, const char *stream, const char *name, uint64_t sseq, uint64_t cseq,
            int64_t delay_ms)
{
    sj_consumer *c = sj_cons_find(sj_stream_find(s, stream), name, NULL);
    sj_pend *p = c ? sj_pend_find(c, sseq, NULL) : NULL;
    if (!p || !cseq || cseq > c->dseq)
        return;
    p->due = s->now + (delay_ms > 0 ? delay_ms : 0);
}

/* ---- key-value buckets ------------------------------------------------------- */

int sj_kv_add(sj *s, const char *bucket, uint64_t ttl_ms)
{
    char name[256], subj[256];
    snprintf(name, sizeof name, "KV_%s", bucket);
    snprintf(subj, sizeof subj, "$KV.%s.>", bucket);
    sj_stream_cfg c = {.name = name, .subjects = subj, .retention = SJ_LIMITS,
                       .duplicate_window_ms = 0, .max_age_ms = ttl_ms};
    if (sj_stream_add(s, &c) != 0)
        return -1;
    sj_stream_find(s, name)->kv = true;
    return 0;
}

int sj_kv_get(sj *s, const char *bucket, const char *key, char *val, size_t cap, uint64_t *rev)
{
    char name[256], subj[256];
    snprintf(name, sizeof name, "KV_%s", bucket);
    snprintf(subj, sizeof subj, "$KV.%s.%s", bucket, key);
    sj_stream *t = sj_stream_find(s, name);
    if (!t)
        return SJ_ERR_NO_STREAM;
    uint64_t seq = sj_last_on_subject(t, subj);
    if (!seq)
        return SJ_ERR_NOT_FOUND;
    const sj_msg *m = t->msgs[sj_index(t, seq)];
    char op[16];
    if (sj_msg_header(m, "KV-Operation", op, sizeof op))
        return SJ_ERR_NOT_FOUND;
    size_t n = m->len < cap ? m->len : cap - 1;
    memcpy(val, m->data, n);
    val[n] = '\0';
    *rev = seq;
    return 0;
}

static int sj_kv_put(sj *s, const char *bucket, const char *key, const char *val, uint64_t expect,
                     uint64_t *rev)
{
    char subj[256], exp[32];
    snprintf(subj, sizeof subj, "$KV.%s.%s", bucket, key);
    snprintf(exp, sizeof exp, "%llu", (unsigned long long)expect);
    sj_hdr h = {"Nats-Expected-Last-Subject-Sequence", exp};
    sj_pub p = {.subject = subj, .hdrs = &h, .nhdrs = 1, .data = val, .len = strlen(val)};
    sj_puback a = sj_publish(s, &p);
    if (a.err)
        return a.err;
    *rev = a.seq;
    return 0;
}

int sj_kv_create(sj *s, const char *bucket, const char *key, const char *val, uint64_t *rev)
{
    return sj_kv_put(s, bucket, key, val, 0, rev);
}

int sj_kv_update(sj *s, const char *bucket, const char *key, const char *val, uint64_t expect,
                 uint64_t *rev)
{
    return sj_kv_put(s, bucket, key, val, expect, rev);
}
