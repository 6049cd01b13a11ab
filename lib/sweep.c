/* sweep.c -- a list visited in bounded slices, one pass per period.
 *
 * Principles:
 *  - The cursor is the last node the pass kept, not the next one to take:
 *    the next is always cursor->next, read when it is taken, so a node
 *    appended meanwhile is reached and a dropped one never dangles.
 *  - Only the node just taken may be dropped; that is all a sweep that
 *    forgets what it visits needs, and it keeps dropping O(1) on a singly
 *    linked list.
 */
#include "sweep.h"

void fq_sweep_init(fq_sweep *s, uint64_t period)
{
    *s = (fq_sweep){.period = period};
}

void fq_sweep_append(fq_sweep *s, fq_sweep_node *x)
{
    x->next = NULL;
    if (s->tail)
        s->tail->next = x;
    else
        s->head = x;
    s->tail = x;
    s->n++;
}

bool fq_sweep_begin(fq_sweep *s, uint64_t now)
{
    if (s->running || now < s->next_at)
        return false;
    s->running = true;
    s->prev = s->cur = NULL;
    s->next_at = now + s->period;
    s->passes++;
    return true;
}

bool fq_sweep_running(const fq_sweep *s)
{
    return s->running;
}

fq_sweep_node *fq_sweep_next(fq_sweep *s)
{
    if (!s->running)
        return NULL;
    if (s->cur)
        s->prev = s->cur;   /* the last one taken was kept */
    s->cur = s->prev ? s->prev->next : s->head;
    if (!s->cur)
        s->running = false;
    return s->cur;
}

void fq_sweep_drop(fq_sweep *s)
{
    fq_sweep_node *x = s->cur;
    if (!x)
        return;
    if (s->prev)
        s->prev->next = x->next;
    else
        s->head = x->next;
    if (s->tail == x)
        s->tail = s->prev;
    s->n--;
    s->cur = NULL;
}
