/* adminall.h -- one admin request asked of every replica of a deployment, the answers gathered into one reply: whom to ask, when it is complete, what sums (fairq-admin stats --all, reload, drained). */
#ifndef FQ_ADMINALL_H
#define FQ_ADMINALL_H

/*
 * Every stats and reload reply names the replica that answered
 * ("replica") and the replicas alive in its view of the registry
 * ("replicas", docs/protocol.md). fairq-admin asks one replica through
 * the queue group, then each replica named on its own subject
 * (<admin>.replica.<id>.<request>), all at once; each answer may name
 * more, which are asked too: the set grows to every replica any view
 * knows, FQA_MAX at most. No I/O and no clock here: the caller sends,
 * waits up to its deadline and hands back each answer, or why a replica
 * did not answer. Whatever has not answered when the caller stops is
 * missing, with its reason, and the gathered reply says partial: a
 * deployment-wide view is only as good as the replicas it heard, and it
 * says which those were.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "owner.h"

#define FQA_MAX FQ_OWNER_REPLICAS_MAX   /* replicas one gathering knows at most */

typedef struct fqa_all fqa_all;

/* NULL: out of memory. */
fqa_all *fqa_all_create(void);
/* Safe on NULL. */
void fqa_all_destroy(fqa_all *g);

/* Add the replicas a reply names (body[0..len): its "replica" and its
 * "replicas") to those to ask; the number it named. */
size_t fqa_all_learn(fqa_all *g, const char *body, size_t len);
/* Keep body as the answer of replica idx (fqa_all_next's), or with idx
 * FQA_ANY of the replica the body says answered; and learn from it.
 * false: not a JSON object, or no replica to keep it for. */
#define FQA_ANY ((size_t)-1)
bool fqa_all_answer(fqa_all *g, size_t idx, const char *body, size_t len);
/* Replica idx will not answer: why, a sentence ("no responders"). */
void fqa_all_failed(fqa_all *g, size_t idx, const char *why);
/* The next replica named and not asked yet, marked asked: its index and
 * id. false when none. */
bool fqa_all_next(fqa_all *g, size_t *idx, const char **id);
/* Replicas named so far. */
size_t fqa_all_named(const fqa_all *g);
/* Every replica named has answered or failed. */
bool fqa_all_settled(const fqa_all *g);

/* The gathered reply, malloc'd JSON (NULL: out of memory): "ok" (every
 * replica named answered, none with "ok":false), "partial" (some did not
 * answer, or more were named than FQA_MAX), "replicas_named",
 * "replicas_answered", "missing" ([{"replica","why"}]; why is
 * missing_why for those neither answered nor failed), with deployment
 * the "deployment" section (each overall stats key of the answers folded
 * as fq_overall_rows' fold column says: summed, or the most), then
 * "answers", each replica's reply as it came, in order of id. */
char *fqa_all_json(const fqa_all *g, bool deployment, const char *missing_why);

/* Whether a deployment is drained, before its partitions change
 * (docs/partitions.md, "Changing P"): every replica named answered its
 * stats ("ok" of fqa_all_json), the deployment has no run queued and none
 * in flight ("queued_runs" and "in_flight" summed, each answered), and the
 * submit and done streams hold no message (submit_msgs and done_msgs, as
 * the caller read them: -1 when it could not). *drained says so; the
 * reply is fqa_all_json's with "drained", "submit_msgs" and "done_msgs"
 * added (NULL: out of memory, and *drained false). */
char *fqa_all_drained(bool *drained, const fqa_all *g, int64_t submit_msgs, int64_t done_msgs,
                      const char *missing_why);

#endif
