/* journal.h -- the runs journal's records: typed, written in batches as JSON, read back validated. */
#ifndef FQ_JOURNAL_H
#define FQ_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fq.h"

/*
 * The journal (FAIRQ_RUNS, docs/protocol.md section 8) is a limits stream of
 * batches, one message per turn of the proxy's loop:
 *
 *   {"v":1,"entries":[record, ...]}
 *
 * with records
 *
 *   {"st":"flight","t":tenant,"r":run_id,"w":workflow,"e":est,"d":declared,"s":seq,"at":ms}
 *   {"st":"done","t":tenant,"r":run_id,"s":seq,"at":ms[,"u":true]}
 *   {"st":"debt","t":tenant,"df":deficit,"at":ms}
 *   {"st":"expired", the members of flight}
 *   {"st":"refused","t":tenant,"s":seq,"c":code,"at":ms}
 *
 * ("w" is left out when there is no workflow; "u", unconfirmed, is there
 * only when the run completed before its dispatch was seen stored). Whatever is read back was
 * stored by a NATS client, perhaps not fairq: the decoder trusts nothing,
 * checks every field's type and range, and refuses (and counts) a record
 * that fails, and any record type it does not know. The writer checks the
 * same, so what it writes always reads back.
 */

/* A record's type. */
enum fq_jrec_type {
    FQ_JREC_FLIGHT = 1, /* a run dispatched: it holds a window slot */
    FQ_JREC_DONE,       /* a run completed: its id is remembered */
    FQ_JREC_DEBT,       /* a tenant's debt, as of its last change */
    FQ_JREC_EXPIRED,    /* a run's lease ran out: a late completion may still
                           reconcile it; the fields of its flight record */
    FQ_JREC_REFUSED,    /* a submit refused for the state of the moment: delivered
                           again, it is refused again, not decided anew */
};

/* Limits of the numeric fields. Every integer is at most 2^53, so JSON's
 * doubles read it back exactly; a deficit saturates at -2^62 (lib/drr.c),
 * where a double is still exact enough for a debt. */
#define FQ_JOURNAL_MAX_INT ((int64_t)1 << 53)
#define FQ_JOURNAL_MIN_DEFICIT (-((int64_t)1 << 62))

/* One record. Fields a type does not use are zero or "". */
typedef struct fq_jrec {
    enum fq_jrec_type type;
    char tenant[FQ_TENANT_MAX + 1];     /* a valid tenant id */
    char run_id[FQ_RUN_ID_MAX + 1];     /* flight, done, expired: a valid run id */
    char workflow[FQ_WORKFLOW_MAX + 1]; /* flight, expired: "" if none */
    uint32_t est;                       /* flight, expired: tokens charged, >= 1 */
    uint32_t declared;                  /* flight, expired: the producer's est_tokens, 0 if none */
    uint64_t seq;                       /* flight, done, expired: submit sequence (<= 2^53),
                                           0 if none */
    int64_t deficit;                    /* debt: the tenant's deficit, FQ_JOURNAL_MIN_DEFICIT..0 */
    int64_t at_ms;                      /* unix ms, 0..2^53: the dispatch (flight), the
                                           completion (done), the debt's last change (debt),
                                           the lease's end (expired) */
    fq_status refusal;                  /* refused: why, FQ_EEXIST (duplicate), FQ_EFULL
                                           (tenant_full) or FQ_EOVERLOAD (overload),
                                           written as its code; FQ_OK in other records */
    bool unconfirmed;                   /* done: the run completed before its dispatch was
                                           seen stored (read back, or its PubAck still to
                                           come): its submit, come again, is published again
                                           under its Nats-Msg-Id, not taken as done */
} fq_jrec;

#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Whether r obeys the rules above; if not, why (a static sentence). */
bool fq_jrec_valid(const fq_jrec *r, const char **why);
#endif

/* A batch being written: the text of one message. */
typedef struct fq_jbatch {
    fq_buf text;                /* the text so far, without the closing "]}" */
    size_t records;             /* records appended since the last clear */
} fq_jbatch;

/* Append r. FQ_EINVAL if r is not valid, FQ_ENOMEM: nothing appended. */
fq_status fq_jbatch_append(fq_jbatch *b, const fq_jrec *r);
/* The batch's text (its length in *len), or NULL if it holds no record.
 * Valid until the next append or clear; appending after it continues the
 * same batch. */
const char *fq_jbatch_text(fq_jbatch *b, size_t *len);
/* Empty the batch for the next one; memory is kept. */
void fq_jbatch_clear(fq_jbatch *b);
/* Free its memory. Safe on a zeroed batch. */
void fq_jbatch_free(fq_jbatch *b);

/* What a decode found. Counts add up over calls. */
typedef struct fq_jcounts {
    uint64_t records;           /* valid records handed to the callback */
    uint64_t invalid;           /* refused: a message or record that is not valid */
    uint64_t unknown;           /* refused: a record of a type not known */
    char why[160];              /* the first refusal's reason; "" if none */
} fq_jcounts;

typedef void (*fq_jrec_fn)(void *arg, const fq_jrec *r);

/* Decode one message data[0..len) (not NUL-terminated): each valid record,
 * in order, to fn. A message that is not a batch of version 1 counts as one
 * invalid and gives nothing (FQ_EINVAL); otherwise FQ_OK, each refused
 * record counted in *counts and skipped. */
fq_status fq_journal_decode(const void *data, size_t len, fq_jrec_fn fn, void *arg,
                            fq_jcounts *counts);

#endif
