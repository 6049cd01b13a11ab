/* cardrr.c -- the design card's DeficitRoundRobin listing, ported literally: the baseline. */
#include "cardrr.h"

#include <stdlib.h>

typedef struct {
    uint64_t quantum;           /* quantumTokens: JS numbers do not wrap at 2^32 */
    int64_t deficit;
    fq_cardrr_run *head, *tail; /* pending */
} cardrr_queue;

struct fq_cardrr {
    cardrr_queue *queues;       /* queues, indexed as order is */
    uint32_t n;                 /* order.length */
    uint32_t cursor;
    uint64_t visits;            /* loop iterations of next(), for the benchmark */
};

fq_status fq_cardrr_create(fq_cardrr **out, uint32_t ntenants, uint32_t quantum,
                           const uint32_t *weight)
{
    *out = NULL;
    if (ntenants == 0 || quantum == 0)
        return FQ_EINVAL;
    fq_cardrr *c = calloc(1, sizeof(*c));
    if (!c || !(c->queues = calloc(ntenants, sizeof(*c->queues)))) {
        free(c);
        return FQ_ENOMEM;
    }
    c->n = ntenants;
    for (uint32_t i = 0; i < ntenants; i++)
        c->queues[i].quantum = (uint64_t)quantum * (weight ? weight[i] : 1);
    *out = c;
    return FQ_OK;
}

void fq_cardrr_destroy(fq_cardrr *c)
{
    if (!c)
        return;
    free(c->queues);
    free(c);
}

void fq_cardrr_enqueue(fq_cardrr *c, fq_cardrr_run *r)
{
    cardrr_queue *q = &c->queues[r->tenant];
    if (!q->head)
        q->deficit = 0;
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

fq_cardrr_run *fq_cardrr_next(fq_cardrr *c)
{
    for (uint32_t visited = 0; visited < c->n; visited++) {
        cardrr_queue *q = &c->queues[c->cursor];
        c->cursor = (c->cursor + 1) % c->n;
        c->visits++;
        if (!q->head)
            continue;
        q->deficit += (int64_t)q->quantum;
        fq_cardrr_run *head = q->head;
        if (head->est <= q->deficit) {
            q->deficit -= head->est;
            q->head = head->next;
            if (!q->head)
                q->tail = NULL;
            return head;
        }
    }
    return NULL;
}

void fq_cardrr_reconcile(fq_cardrr *c, uint32_t tenant, uint32_t est, uint64_t actual)
{
    c->queues[tenant].deficit -= (int64_t)actual - (int64_t)est;
}

int64_t fq_cardrr_deficit(const fq_cardrr *c, uint32_t tenant)
{
    return c->queues[tenant].deficit;
}

uint64_t fq_cardrr_visits(const fq_cardrr *c)
{
    return c->visits;
}
