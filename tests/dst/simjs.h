/* simjs.h -- a small, honest simulated JetStream for the deterministic simulation test (test code, not shipped). */
#ifndef DST_SIMJS_H
#define DST_SIMJS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * What it keeps, and why each thing is here: every behaviour of nats-server
 * 2.9.10 that fairq's delivery guarantees lean on (docs/protocol.md
 * sections 6 to 8, the measured notes), and nothing else.
 *
 * - Streams with stored messages and sequences; limits retention (kept for
 *   max_age) or work-queue retention (a message is removed when its
 *   consumer acks it).
 * - Nats-Msg-Id de-duplication within the stream's duplicate window, found
 *   the way the server finds a header: the first occurrence of the name's
 *   bytes in the header block (a producer header whose name merely holds
 *   Nats-Msg-Id hides fairq's own, as measured). It is checked before
 *   Nats-Expected-Last-Sequence (measured: a retried batch is answered
 *   duplicate even after another message was stored).
 * - A server restart rebuilds the de-duplication state from the messages
 *   the stream still stores: a work-queue stream forgets the ids of what
 *   its consumer removed, a limits stream keeps them for its max age.
 * - A per-subject limit with discard-new-per-subject (error 10077).
 * - Durable pull consumers with explicit acks: AckWait and redelivery (in
 *   stream order, delivery count up), MaxAckPending, nak with a delay.
 *   Acks name the consumer and the stream sequence only, as the ack
 *   subject does: an ack sent to a consumer that was deleted and made
 *   again under the same name applies to the new one. A work-queue stream
 *   admits one consumer over a subject.
 * - A durable whose state a server crash lost (sj_consumer_reset): it
 *   starts again from the stream's first message.
 * - Key-value buckets as the server makes them: a stream per bucket, a
 *   key's revision is its message's sequence, create and compare-and-set
 *   by Nats-Expected-Last-Subject-Sequence, keys aging out after max_age.
 *
 * It is synchronous and has no network: a publish is stored or refused at
 * once and its answer returned. Delays, losses, partitions and crashes of
 * clients are the driver's (tests/dst_ledger.c), which carries requests
 * and answers between them at the steps it draws. Time is the server's
 * clock, set by the driver (sj_set_now), which may jump. Nothing here
 * draws a random number.
 */

/* JetStream error codes it answers with (the server's). */
#define SJ_ERR_STORE_FULL 10023     /* insufficient resources: injected by the driver */
#define SJ_ERR_NOT_FOUND 10014      /* no such consumer */
#define SJ_ERR_NO_STREAM 10059      /* no stream matches the subject */
#define SJ_ERR_WRONG_LAST 10071     /* an expected last sequence did not hold */
#define SJ_ERR_PER_SUBJECT 10077    /* the subject is at max_msgs_per_subject */
#define SJ_ERR_WQ_OVERLAP 10100     /* a work-queue stream's consumers must not overlap */
#define SJ_ERR_EXISTS 10013         /* a consumer of that name exists already */

enum sj_retention { SJ_LIMITS = 0, SJ_WORKQUEUE };

typedef struct sj_stream_cfg {
    const char *name;
    const char *subjects;           /* one subject pattern, with * and > */
    enum sj_retention retention;
    uint64_t duplicate_window_ms;   /* 0: no de-duplication */
    uint64_t max_age_ms;            /* 0: none */
    uint64_t max_msgs_per_subject;  /* 0: none; past it a publish is refused (discard new) */
} sj_stream_cfg;

/* A stored message. Immutable once stored; counted references, since a
 * delivery or a read may outlive its removal from the stream. */
typedef struct sj_msg {
    uint64_t seq;
    char *subject;
    char *hdrs;                     /* "Key: Value\r\n" lines, in order; "" if none */
    char *data;
    size_t len;
    int64_t ts_ms;                  /* the server's clock when stored */
    char *msg_id;                   /* the Nats-Msg-Id the server read; NULL if none */
    unsigned refs;
} sj_msg;

typedef struct sj_hdr {
    const char *key, *value;
} sj_hdr;

/* A publish as a client sends it. */
typedef struct sj_pub {
    const char *subject;
    const sj_hdr *hdrs;             /* written in order */
    size_t nhdrs;
    const void *data;
    size_t len;
} sj_pub;

/* The server's answer to a publish. */
typedef struct sj_puback {
    int err;                        /* 0, or a JetStream error code */
    uint64_t seq;                   /* stored at (or, duplicate, the original's) */
    bool duplicate;
    const char *stream;             /* the stream that answered; NULL if none */
} sj_puback;

/* One message handed to a pull. */
typedef struct sj_delivery {
    sj_msg *msg;                    /* a reference: sj_msg_unref when done */
    uint64_t sseq, cseq;            /* stream and consumer sequence */
    uint32_t delivered;             /* delivery count, 1 on the first */
} sj_delivery;

typedef struct sj sj;

sj *sj_create(void);
void sj_destroy(sj *s);

/* The server's clock (unix ms), set by the driver; it may jump either way. */
void sj_set_now(sj *s, int64_t now_ms);
int64_t sj_now(const sj *s);

/* Add a stream (names unique). 0, or -1 if it cannot. */
int sj_stream_add(sj *s, const sj_stream_cfg *c);

/* Store a publish into the stream whose subjects match. */
sj_puback sj_publish(sj *s, const sj_pub *p);

/* The server restarts: clients' connections drop (the driver's part),
 * de-duplication is rebuilt from what the streams store. Durable consumers
 * keep their state unless sj_consumer_reset says otherwise. */
void sj_restart(sj *s);

/* Stream state. */
uint64_t sj_last_seq(const sj *s, const char *stream);
uint64_t sj_msgs(const sj *s, const char *stream);
/* The stored message at seq (a reference), or NULL: a direct get. */
sj_msg *sj_get(sj *s, const char *stream, uint64_t seq);
/* The first stored message after seq (not a reference: valid until the
 * next call that changes s), or NULL: for reading a stream whole. */
const sj_msg *sj_next(const sj *s, const char *stream, uint64_t after);
/* Remove a stored message (a purge by hand). 0, or -1 if not stored. */
int sj_delete(sj *s, const char *stream, uint64_t seq);

void sj_msg_ref(sj_msg *m);
void sj_msg_unref(sj_msg *m);
/* Header key's value of a stored message, found by exact name as a client
 * reads it, copied into out; false if absent. */
bool sj_msg_header(const sj_msg *m, const char *key, char *out, size_t cap);

/* Durable pull consumers, explicit acks, deliver all. */
int sj_consumer_add(sj *s, const char *stream, const char *name, const char *filter,
                    uint64_t ack_wait_ms, uint64_t max_ack_pending);
int sj_consumer_delete(sj *s, const char *stream, const char *name);
bool sj_consumer_exists(const sj *s, const char *stream, const char *name);
/* The names of stream's consumers into out[0..max) (valid until the next
 * change); returns how many there are. */
size_t sj_consumer_names(const sj *s, const char *stream, const char **out, size_t max);
/* The consumer's deliveries awaiting an ack. */
size_t sj_consumer_pending(const sj *s, const char *stream, const char *name);
/* A server crash lost the durable's state: it delivers from the stream's
 * first message again, delivery count 1. */
void sj_consumer_reset(sj *s, const char *stream, const char *name);
/* Pull up to max deliveries: those whose AckWait or nak delay ran out
 * first, in stream order, then new ones while fewer than MaxAckPending
 * await an ack. Returns how many went into out. */
size_t sj_fetch(sj *s, const char *stream, const char *name, size_t max, sj_delivery *out);
/* An ack as the server applies it: to whichever consumer now has the name,
 * by stream sequence. Ignored when that sequence is not pending there. */
void sj_ack(sj *s, const char *stream, const char *name, uint64_t sseq);
/* A nak: delivered again after delay_ms; ignored unless sseq is pending
 * and cseq is a delivery this consumer made. */
void sj_nak(sj *s, const char *stream, const char *name, uint64_t sseq, uint64_t cseq,
            int64_t delay_ms);

/* Key-value buckets: stream KV_<bucket> over $KV.<bucket>.>. */
int sj_kv_add(sj *s, const char *bucket, uint64_t ttl_ms);
/* 0 with the value and revision, or SJ_ERR_NOT_FOUND (absent, deleted or aged out). */
int sj_kv_get(sj *s, const char *bucket, const char *key, char *val, size_t cap, uint64_t *rev);
/* Write only if the key has no value: 0 with the revision, or SJ_ERR_WRONG_LAST. */
int sj_kv_create(sj *s, const char *bucket, const char *key, const char *val, uint64_t *rev);
/* Write only if the key's revision is still expect: 0 with the new one, or
 * SJ_ERR_WRONG_LAST. */
int sj_kv_update(sj *s, const char *bucket, const char *key, const char *val, uint64_t expect,
                 uint64_t *rev);

#endif
