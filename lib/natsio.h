/* natsio.h -- fairq's one NATS adapter: every nats.c call and quirk lives behind it. */
#ifndef FQ_NATSIO_H
#define FQ_NATSIO_H

/*
 * Principles
 *
 * - One thread owns fairq's state. Everything nats.c hands over on its own
 *   threads (fetched messages, PubAcks and publish errors, requests,
 *   connection events) becomes an fq_nio_event in one lock-protected queue
 *   that the owner drains with fq_nio_poll. Nothing here calls back into
 *   the caller.
 * - Publishes are asynchronous JetStream publishes tagged with the caller's
 *   64-bit token; their PubAck (or error, or timeout) comes back as an
 *   event with that token. A failed publish hands its message back so the
 *   caller can retry it as is (same Nats-Msg-Id, so JetStream de-duplicates).
 *   The owner thread, the one that polls, is the only one that publishes:
 *   what is pending is its own, without a lock.
 * - Every pull consumer is fed by one fetch thread (nats.c 3.4.1 has no
 *   asynchronous pull, and a thread per consumer does not scale to two
 *   consumers per partition): it sends each consumer's pull requests, with
 *   an expiry, replies to one subscription, and tells the deliveries apart
 *   by the consumer their ack subject names. lib/pullplan.h decides who
 *   pulls and for how much, so that a flooded consumer cannot starve a
 *   quiet one. Consumers are added and stopped at run time; a consumer is
 *   deleted and recreated when it is added and after every reconnect, so
 *   that whatever was fetched and not acked is delivered again at once
 *   instead of after the ack wait. The fetch thread takes one consumer a
 *   turn, those due in the order their owner asked for them (a
 *   partition's two come up together): deletes its earlier terms' and
 *   sends its create, whose answer comes in a later turn, so that the
 *   creates of many overlap (each waits for its group's leader election
 *   on a cluster); and it pulls for the ones made in between: a replica
 *   that makes all its consumers at once (after a reconnect, or a freeze
 *   past its lease) fetches for each as soon as it is made, not after the
 *   last. A consumer is pulled, and its deliveries
 *   handed over, only while it is made as its owner wants: stopped, or
 *   named for a new term, it is not pulled from that call on until the
 *   fetch thread has carried the change out.
 * - A watched key-value bucket is read by a thread of its own too, which
 *   hands each change over as an event, and watches afresh after every
 *   reconnect (each watch an epoch), saying when it has delivered what the
 *   bucket held, so the owner can forget keys that vanished meanwhile.
 *   A key's reads and compare-and-set writes (the lease keys') are sent
 *   without waiting, as the consumers' API requests are: each with a
 *   number in its reply subject and a deadline, its answer an event.
 * - A stream read back (a partition's journal when it is taken) is read by
 *   a thread of its own too, its messages handed over as events a few
 *   dozen at a time, so the owner's loop serves everything else meanwhile
 *   instead of waiting for the read's requests and messages.
 * - Acks need only a message's sequences (fq_nio_ackref), not the message,
 *   so a caller can drop a body and still ack it later.
 * - Units at this interface are milliseconds; nats.c mixes milliseconds and
 *   nanoseconds field by field, and the conversions are made here.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fq.h"

typedef struct fq_nio fq_nio;
/* A received message (a fetched JetStream message, a request, a direct get
 * or a publish handed back): opaque, destroyed with fq_nio_msg_destroy. */
typedef struct fq_nio_msg fq_nio_msg;

typedef struct fq_nio_opts {
    const char *url;            /* one URL or a comma-separated list */
    const char *creds;          /* user credentials file, or NULL */
    const char *tls_ca;         /* CA file, or NULL */
    const char *tls_cert;       /* client certificate and key, or NULL */
    const char *tls_key;
    const char *user;           /* user and password, or NULL */
    const char *password;
    const char *nkey;           /* an nkey user's public key and its seed file, or NULL */
    const char *nkey_seed;
    /* Every inbox this connection makes (request replies, PubAcks, pull
     * deliveries, watches) is <inbox_prefix>.<unique>, so that a server
     * can let this user, and no other, subscribe to its replies; NULL:
     * nats.c's "_INBOX". */
    const char *inbox_prefix;
    const char *name;           /* connection name shown by the server */
    int64_t api_wait_ms;        /* JetStream API request timeout; 0: 5000 */
    int64_t pub_wait_ms;        /* PubAck timeout of async publishes; 0: 5000 */
    int64_t max_pending_pubs;   /* async publishes in flight before a stall; 0: 65536 */
} fq_nio_opts;

/* How a stream must be: fq_nio_stream_ensure creates it, or checks it. */
enum fq_nio_retention { FQ_NIO_LIMITS = 0, FQ_NIO_WORKQUEUE };

typedef struct fq_nio_stream {
    const char *name;
    const char *subject;        /* one subject, wildcards allowed */
    enum fq_nio_retention retention;
    uint64_t max_age_ms;        /* 0: none */
    uint64_t duplicates_ms;     /* de-duplication window; 0: server default */
    uint32_t replicas;          /* >= 1 */
    bool allow_direct;          /* direct gets by sequence */
    int64_t max_msgs_per_subject; /* 0: none */
    int64_t max_bytes;          /* 0: none; JetStream reserves this much of its store */
    /* Past a limit, refuse the publish (an error PubAck, code
     * FQ_NIO_ERR_STREAM_LIMIT), per subject too, rather than delete the
     * oldest messages (of that subject, for max_msgs_per_subject). */
    bool discard_new;
} fq_nio_stream;
#define FQ_NIO_ERR_STREAM_LIMIT 10077   /* JetStream: a limit of the stream refused a publish */

/* Consumers one fq_nio serves at most, on its one fetch thread: two per
 * partition a replica owns, for 126 partitions, and a few more. The bound
 * is the cost of a reconnect: each consumer is then made again, two or
 * three JetStream API calls waited for on the fetch thread (a listing and
 * deletes, a few ms each) and a create answered later (a group's leader
 * election on a cluster, 0.13 to 0.8 s, the creates overlapping); and
 * each is server state (and a Raft group on a cluster). */
#define FQ_NIO_MAX_CONSUMERS 256

/* A durable pull consumer served by the fetch thread. */
typedef struct fq_nio_consumer {
    const char *stream;
    const char *durable;
    const char *filter;         /* filter subject, or NULL */
    int64_t max_ack_pending;    /* finite: -1 makes Fetch time out (nats.c 3.4.1) */
    int64_t ack_wait_ms;
    int batch;                  /* messages per Fetch */
    uint64_t term;              /* 0: the consumer is named durable; else durable-term, and
                                   the stream's consumers of durable's earlier terms are
                                   deleted before it is made (fq_nio_consume_term) */
} fq_nio_consumer;

/* Where a message came from, and the ack that covers it. */
typedef struct fq_nio_ackref {
    uint64_t sseq;              /* stream sequence */
    uint64_t cseq;              /* consumer sequence of this delivery (for logs) */
    uint32_t delivered;         /* delivery count */
} fq_nio_ackref;

enum fq_nio_event_type {
    FQ_NIO_EV_MSG = 1,          /* a fetched message: msg, ack, ts_ms, source */
    FQ_NIO_EV_PUBACK,           /* a publish settled: token, status, seq, duplicate */
    FQ_NIO_EV_REQUEST,          /* a core request: msg (reply with fq_nio_reply), source */
    FQ_NIO_EV_CONN,             /* connection state changed: connected */
    FQ_NIO_EV_CONSUMER,         /* a consumer was (re)created: source, status (FQ_EEXIST:
                                   not, and a later term's is on its stream) */
    FQ_NIO_EV_KV,               /* a key of a watched bucket changed: kv, source */
    FQ_NIO_EV_KV_SYNCED,        /* a watch has delivered every key the bucket held when it
                                   (re)started: source, seq = the watch's epoch */
    FQ_NIO_EV_DENIED,           /* the server refused a publish or subscription for want
                                   of a permission: seq = violations so far
                                   (fq_nio_denied says which) */
    FQ_NIO_EV_KV_ANSWER,        /* a key-value request answered, or failed at its deadline
                                   (fq_nio_kv_get_async, fq_nio_kv_write_async): token,
                                   status, seq = the revision, err_code; kv = a read's
                                   entry (the caller's) */
    FQ_NIO_EV_SCAN,             /* a message of the read back (fq_nio_scan_start): msg,
                                   token, seq = its stream sequence, ts_ms */
    FQ_NIO_EV_SCAN_END,         /* the read back is over: token, status (FQ_OK: every
                                   message came; FQ_ENOTFOUND: no such stream; FQ_EIO),
                                   seq = its messages handed over */
};

/* A key of a watched bucket as it is now, handed over whole (the caller's,
 * destroyed with fq_nio_kv_entry_destroy). */
typedef struct fq_nio_kv_entry {
    const char *key;
    const void *value;          /* NUL-terminated copy; "" when deleted */
    size_t len;
    uint64_t rev;               /* the bucket's revision of this change */
    uint64_t epoch;             /* the watch it came from: 1, 2, ... one per (re)start */
    bool deleted;               /* a delete or purge marker */
    int64_t created_ms;         /* when the server stored it, by its wall clock (unix ms) */
} fq_nio_kv_entry;
void fq_nio_kv_entry_destroy(fq_nio_kv_entry *e);

typedef struct fq_nio_event {
    enum fq_nio_event_type type;
    int source;                 /* MSG/CONSUMER: consumer id; REQUEST: subscription id */
    fq_nio_msg *msg;            /* MSG, REQUEST, SCAN, and a failed PUBACK's message: the
                                   caller's */
    fq_nio_kv_entry *kv;        /* KV, and a KV_ANSWER with a value: the caller's */
    uint64_t token;             /* PUBACK, KV_ANSWER; SCAN, SCAN_END: the read's;
                                   CONSUMER: the earlier term of ours whose stale copy
                                   on a node refused it (js_err 10100) and was cleared
                                   first, 0 if none */
    fq_status status;           /* PUBACK: FQ_OK, or FQ_EIO (error or timeout) */
    bool duplicate;             /* PUBACK: JetStream had the Nats-Msg-Id already */
    bool connected;             /* CONN */
    uint64_t seq;               /* PUBACK: stream sequence stored; KV_SYNCED: epoch;
                                   CONSUMER: the term it was made for (0: none); SCAN: its
                                   stream sequence; SCAN_END: messages handed over */
    fq_nio_ackref ack;          /* MSG */
    int64_t ts_ms;              /* MSG, SCAN: the stream's timestamp, unix ms */
    int err_code;               /* PUBACK, CONSUMER (not made): JetStream error code, 0 if
                                   none */
} fq_nio_event;

/* A header to set on an outgoing message. */
typedef struct fq_nio_hdr {
    const char *key;
    const char *value;
} fq_nio_hdr;

/* An outgoing JetStream message. */
typedef struct fq_nio_out {
    const char *subject;
    const void *data;
    size_t len;
    const fq_nio_hdr *hdrs;     /* set in order */
    size_t n_hdrs;
    /* If set, its headers are carried over after hdrs, except those named
     * Nats-* (JetStream would act on them) and those listed in hdrs. */
    const fq_nio_msg *carry;
    /* Else, if carry_len: header lines carried the same way, as
     * fq_nio_msg_carry_lines wrote them, so that a caller that kept those
     * bytes instead of the message publishes what carry would have (the
     * same lines as a header block, "NATS/1.0\r\n" ... "\r\n", do too). */
    const char *carry_lines;
    size_t carry_len;
    bool carry_all;             /* carry every header, Nats-* too (a message sent again) */
} fq_nio_out;

/* JetStream refuses to store a message whose header block is longer
 * (nats-server 2.9.10: js_err 10097 past 65,535 bytes, measured). */
#define FQ_NIO_MAX_HEADER_BYTES 65535u

/* What fq_nio_publish would build for an fq_nio_out. */
typedef struct fq_nio_size {
    size_t carried;             /* bytes of the header lines carried from o->carry */
    size_t header;              /* the header block: fq_nio_header_bytes(hdrs, carried) */
    size_t total;               /* header block and body */
    char bad[160];              /* why o->carry's headers are unfit to carry; "" if they are fit */
} fq_nio_size;

/* Bytes of the header block a publish writes for hdrs[0..n) followed by
 * carried bytes of carried lines: "NATS/1.0\r\n", a "Key: Value\r\n" line
 * per header (CR and LF in them become blanks), "\r\n"; 0 when there is no
 * line at all. Pure: what fq_nio_out_size and every publish write. */
size_t fq_nio_header_bytes(const fq_nio_hdr *hdrs, size_t n, size_t carried);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Whether s[0..len) is a header name a header block can carry as it is
 * written: a token (RFC 9110: 1 or more visible ASCII bytes, no delimiter
 * of "(),/:;<=>?@[\]{} and no blank). */
bool fq_nio_header_name_valid(const char *s, size_t len);
#endif
/* The size of the message fq_nio_publish would build for o, read in one
 * pass over o->carry's headers, which are checked on the way: FQ_EINVAL,
 * with out->bad naming the first unfit header (quoted safely) and why,
 * when one has a name that is not a token, a name or value other than of
 * a Nats-* header that holds Nats-Msg-Id in any case (JetStream finds a
 * header by searching the block for its name), or the block cannot be read
 * at all; or when o->carry_lines are not lines. Carried lines were checked
 * when written: they are only counted. Sizes count what could be read. */
fq_status fq_nio_out_size(fq_nio_size *out, const fq_nio_out *o);

/* A producer's claim headers, read on the pass that writes a message's
 * carried lines (nats.c finds a name only as spelled, and lists the names
 * at an allocation per call: one pass lists them once). */
typedef struct fq_nio_claims {
    const char *const *names;   /* the claims' names, compared without regard to case */
    size_t n;                   /* how many (at most 32) */
    const char **vals;          /* out, n of them: vals[i] names[i]'s value (the
                                   message's memory), NULL when absent or twice */
    uint32_t twice;             /* out: bit i when names[i] came more than once (in
                                   two spellings, or with two values, empty ones
                                   counted too): which one a reader would believe
                                   is not fairq's to pick */
} fq_nio_claims;

/* The headers m carries onward, as the lines a publish writes them
 * ("Key: Value\r\n" each, CR and LF in them blanked; headers in the order
 * they first occur in m's block, each with its values in order, which is
 * how a publish carrying m writes them), its Nats-* headers left out: bytes
 * a caller may copy and keep in place of m, and hand back as
 * fq_nio_out.carry_lines. A submit as fetched and as read back by sequence
 * (fq_nio_get, which adds the stream's Nats-* headers) give the same
 * bytes. Written to out (from out->len = 0; its memory the caller's,
 * reused from call to call). FQ_EINVAL, with
 * bad saying why as fq_nio_out_size would, when a header is unfit to carry
 * (m's headers are read and checked in the same one pass); FQ_ENOMEM. When
 * claims is not NULL, its names are read on the same pass, whatever it
 * returns (past an unfit header too). */
fq_status fq_nio_msg_carry_lines(fq_buf *out, char bad[160], fq_nio_claims *claims,
                                 const fq_nio_msg *m);

/* Connect (reconnecting forever once connected) and open JetStream.
 * FQ_EIO with the reason in err when no server can be reached now; the
 * caller retries. */
fq_status fq_nio_create(fq_nio **out, const fq_nio_opts *o, char *err, size_t errlen);
/* Stop every thread of n, write what is buffered (up to flush_ms, only
 * while connected) and close the connection, failing at once every call
 * still waiting on the server. Bounded whether the server answers or not:
 * flush_ms, then up to 0.5 s of the library's own flush while connected,
 * or the end of a reconnect attempt under way (its 2 s connect timeout,
 * plus a name lookup, which nothing bounds), then up to 1 s for the
 * library's closed callback. Only fq_nio_destroy may follow. Safe on NULL;
 * once only. */
void fq_nio_close(fq_nio *n, int flush_ms);
/* Close (if not closed yet, with a flush of up to 1 s), join the threads,
 * free. Safe on NULL. Unsettled publishes are abandoned (JetStream keeps
 * what it stored). Should the library not confirm the close within a
 * second, n is left allocated rather than freed under its callbacks. */
void fq_nio_destroy(fq_nio *n);

/* Permissions violations the server reported on this connection (a
 * publish or subscription it refused: JetStream API calls then time out),
 * and the text of the latest, 'Permissions Violation for Publish to
 * "<subject>"', into last (cap bytes; "" when none). Any thread. Each
 * one also comes as an FQ_NIO_EV_DENIED event. */
uint64_t fq_nio_denied(fq_nio *n, char *last, size_t cap);

/* The server's max_payload in bytes (headers count too), as the server of
 * the latest connection announced it. */
int64_t fq_nio_max_payload(const fq_nio *n);

/* Create the stream, or compare it with s. FQ_OK when it exists or was
 * made; differences that matter are described in warn (empty when none).
 * FQ_EINVAL when the stream cannot serve (its subjects do not cover
 * s->subject); FQ_EIO when the server did not answer, or a cluster is not
 * ready to place it (no suitable peers for its replicas: a node down or
 * not yet known; JetStream unavailable): both pass, so retry. */
fq_status fq_nio_stream_ensure(fq_nio *n, const fq_nio_stream *s, char *warn, size_t warnlen);
/* The stream's creation time (unix ms), stable until it is recreated. */
fq_status fq_nio_stream_created(int64_t *out, fq_nio *n, const char *stream);
/* Read stream back on natsio's scan thread: every message it holds now
 * (subject NULL), or those of subject only (an ordered consumer filtered
 * to it, up to its last message when the read began, so that reading one
 * subject costs what it holds, not what the stream does), in order, each
 * as an FQ_NIO_EV_SCAN event: its stream sequence, which orders the
 * stream's messages whatever their subjects and whichever node led, and
 * its store time, unix ms, by the clock of the stream's leader when it was
 * stored. Then FQ_NIO_EV_SCAN_END. Messages stored after the read began
 * may come too (the whole stream's are read up to its last message then).
 * The owner's loop goes on meanwhile: at most a few dozen of the read's
 * messages wait in the queue, the thread reading on as they are polled.
 * One read at a time: a read under way when another starts (or at
 * fq_nio_scan_stop) is given up, and no event of it is polled after the
 * call. token is the caller's, on each event of the read. FQ_EINVAL: a
 * name too long. */
fq_status fq_nio_scan_start(fq_nio *n, uint64_t token, const char *stream, const char *subject);
void fq_nio_scan_stop(fq_nio *n);

/* Start consumer id (0..FQ_NIO_MAX_CONSUMERS - 1) on the fetch thread;
 * its messages arrive as FQ_NIO_EV_MSG with source = id. The consumer is
 * deleted and recreated first, and again after each reconnect, each time
 * followed by FQ_NIO_EV_CONSUMER. c's strings are copied. FQ_EINVAL when
 * id consumes already (stop it first), or a name is too long. Owner. */
fq_status fq_nio_consume(fq_nio *n, int id, const fq_nio_consumer *c);
/* Stop consumer id: nothing more is fetched for it and its deliveries
 * still queued are dropped (none arrives after this returns, until id is
 * started again). It is left on the server: whoever consumes its subjects
 * next deletes it (an earlier term's, or its own name's) as it makes its
 * own, and gets what it held unacked then. Acks still go to its name.
 * FQ_EINVAL if it was not consuming. Owner. */
fq_status fq_nio_consume_stop(fq_nio *n, int id);
/* Name consumer id for term from now on: its fetch thread deletes the
 * stream's consumers named durable or durable-<n> for any n < term (never
 * a later term's: see FQ_NIO_EV_CONSUMER), each read first for the names
 * its description carries, then makes durable-term, whose description
 * names the earlier terms' consumers deleted (lib/pullplan.h,
 * fq_pull_gone), and acks go to it. Until it is made, id is not pulled and nothing its old
 * name delivers is handed over. Owner thread. */
fq_status fq_nio_consume_term(fq_nio *n, int id, uint64_t term);
/* From monotonic ms until on, consumers are left alone: no pull, no
 * consumer made or deleted, and acks and naks fail (FQ_EIO); a pull asks
 * for nothing past it. UINT64_MAX (the default): no fence. The holder of
 * a lease sets it to the end of its freshness (lib/lease.h). */
void fq_nio_fence(fq_nio *n, uint64_t until);
/* The same for consumer id alone, from monotonic ms until on (its own
 * fence, besides the process's: the earlier holds): no pull, no make or
 * delete of it, its acks and naks fail, and its pulls ask for nothing
 * past it, while the other consumers go on. UINT64_MAX (the default): none
 * of its own. A partition's owner sets its two consumers' to the end of
 * that partition's lease's freshness, so that one partition's late
 * renewal stops only its own. Kept across fq_nio_consume_stop and
 * fq_nio_consume. */
void fq_nio_fence_consumer(fq_nio *n, int id, uint64_t until);
/* Stop fetching for consumer id (messages fetched already still arrive),
 * or resume. Acks keep working. */
void fq_nio_consume_pause(fq_nio *n, int id, bool paused);
/* Ack a message of consumer id by its reference. */
fq_status fq_nio_ack(fq_nio *n, int id, const fq_nio_ackref *a);
/* Ask for redelivery (a nak) after delay_ms (0: at once), for a message
 * the caller lets go of without a verdict; a as it came with the message
 * (the server heeds a nak only with the delivery's consumer sequence). */
fq_status fq_nio_nak(fq_nio *n, int id, const fq_nio_ackref *a, int64_t delay_ms);

/* Core subscription whose messages arrive as FQ_NIO_EV_REQUEST with
 * source = id. On arrival, before the owner sees it or anything is queued:
 * a message without a reply subject (nobody waits for an answer) is
 * dropped and counted; with max_queued requests of this subscription
 * waiting in the event queue already, a new one is answered busy_reply at
 * once (if not NULL; the caller's, outliving n) and counted. max_queued 0:
 * no bound. */
fq_status fq_nio_subscribe(fq_nio *n, int id, const char *subject, size_t max_queued,
                           const char *busy_reply);
/* The same in queue group queue: each request goes to one member of the
 * group, whichever connection (replica) that is. */
fq_status fq_nio_subscribe_queue(fq_nio *n, int id, const char *subject, const char *queue,
                                 size_t max_queued, const char *busy_reply);

/* Core subscription whose messages, replies or not, arrive as
 * FQ_NIO_EV_REQUEST with source = id (heartbeats: lib/share): with
 * max_queued of this subscription waiting in the event queue already, a
 * new one is dropped on arrival and counted as busy. max_queued 0: no
 * bound. */
fq_status fq_nio_listen(fq_nio *n, int id, const char *subject, size_t max_queued);
/* Core NATS publish of data[0..len) on subject: not stored, no PubAck.
 * FQ_ETOOBIG past max_payload, FQ_EIO if the connection refused it. Owner
 * thread. */
fq_status fq_nio_core_publish(fq_nio *n, const char *subject, const void *data, size_t len);

/* What a subscription refused on arrival, since it was made. */
typedef struct fq_nio_sub_stats {
    uint64_t no_reply;          /* dropped: no reply subject */
    uint64_t busy;              /* answered busy_reply: max_queued were waiting */
} fq_nio_sub_stats;
/* Safe from any thread; zeros for a NULL n. */
void fq_nio_sub_stats_get(fq_nio_sub_stats *out, fq_nio *n, int id);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* End subscription id (it may be subscribed again). FQ_EINVAL if none. */
fq_status fq_nio_unsubscribe(fq_nio *n, int id);
#endif
/* Ask the server about consumer id (its current name: durable and
 * term), the answer, $JS.API.CONSUMER.INFO's JSON, to come on reply, a
 * subject the caller listens to (fq_consumer_info_parse reads its
 * counts). Owner thread. FQ_EINVAL: not consuming; FQ_EIO: not sent. */
fq_status fq_nio_consumer_info_ask(fq_nio *n, int id, const char *reply);
/* Ask the server about stream, the answer, $JS.API.STREAM.INFO's JSON, to
 * come on reply, a subject the caller listens to (fq_stream_last_seq_parse
 * reads its last sequence). FQ_EINVAL: the name too long; FQ_EIO: not
 * sent. */
fq_status fq_nio_stream_info_ask(fq_nio *n, const char *stream, const char *reply);
/* Ask the server for the first message stored on stream with a subject
 * filter matches, from sequence 1: a STREAM.MSG.GET by subject, its
 * answer's JSON to come on reply, a subject the caller listens to
 * (fq_msg_get_seq_parse reads it). FQ_EINVAL: names too long; FQ_EIO:
 * not sent. */
fq_status fq_nio_first_stored_ask(fq_nio *n, const char *stream, const char *filter,
                                  const char *reply);
/* Store again, at the end of stream, the message stored at seq (its
 * subject, body and headers but JetStream's, under Nats-Msg-Id msgid),
 * then delete the one at seq: a message its consumers will never deliver
 * (stored below their ack floor) becomes one they deliver. Synchronous:
 * up to three round trips. FQ_ENOTFOUND: nothing at seq; FQ_EIO: not
 * stored again, or not deleted (then *stored says whether the copy was). */
fq_status fq_nio_restore(bool *stored, fq_nio *n, const char *stream, uint64_t seq,
                         const char *msgid);
/* Reply to a request (core NATS publish to its reply subject). FQ_EINVAL:
 * the request has no reply subject; FQ_ETOOBIG: len exceeds max_payload;
 * FQ_EIO: the publish failed otherwise. */
fq_status fq_nio_reply(fq_nio *n, const fq_nio_msg *req, const void *data, size_t len);
/* Hand a request on to subject, its body as it came, with reply subject
 * reply: whoever answers it there answers reply, not the requester (a
 * client may not publish with the reply subject of a service import's
 * request, _R_.*, which the server reserves: the forwarder relays the
 * answer). FQ_EIO: the publish failed. */
fq_status fq_nio_forward(fq_nio *n, const fq_nio_msg *req, const char *subject,
                         const char *reply);

/* Asynchronous JetStream publish; the outcome comes as FQ_NIO_EV_PUBACK
 * with token, a failure after pub_wait_ms without a PubAck. FQ_EIO if it
 * could not be sent now: the connection refused it, max_pending_pubs are
 * pending already, or the oldest still pending is 4 x max_pending_pubs
 * publishes behind (nothing is pending then); FQ_ETOOBIG if it exceeds
 * max_payload; FQ_EINVAL if it cannot be built (a carried header cannot
 * be read). Owner thread only, as are the three below. */
fq_status fq_nio_publish(fq_nio *n, const fq_nio_out *o, uint64_t token);
/* Publish again a message handed back by a failed PUBACK event; on
 * success it is consumed, else it stays the caller's. */
fq_status fq_nio_republish(fq_nio *n, fq_nio_msg **m, uint64_t token);
/* Write what nats.c has buffered now and wait for the server to have read
 * it (a PING round trip). nats.c otherwise holds writes about a millisecond
 * to batch them, which a lone run would wait out. */
fq_status fq_nio_flush(fq_nio *n, int timeout_ms);
#ifdef FQ_TESTING   /* tests only: no program calls it */
/* Publishes still waiting for their PubAck. */
int64_t fq_nio_pending_pubs(const fq_nio *n);
/* Read a JetStream PubAck reply's data into ev's status, seq, duplicate and
 * err_code (FQ_EIO and 0 for anything that is not a PubAck). For tests. */
void fq_nio_parse_puback(fq_nio_event *ev, const void *data, size_t len);
#endif

/* Read message seq of stream (a direct get when the stream allows it).
 * FQ_ENOTFOUND if the stream no longer has it. */
fq_status fq_nio_get(fq_nio_msg **out, fq_nio *n, const char *stream, uint64_t seq);

/* Key-value buckets. ttl_ms 0: no expiry; max_bytes (the bucket) and
 * max_value (a value) 0: no bound. A bucket that exists is used as it is. */
fq_status fq_nio_kv_ensure(fq_nio *n, const char *bucket, uint64_t ttl_ms, int64_t max_bytes,
                           int32_t max_value, uint32_t replicas, char *err, size_t errlen);
/* The TTL of bucket's entries, ms (0: none), and whether the bucket allows
 * direct gets (fq_nio_kv_get_async reads by one). */
fq_status fq_nio_kv_config(uint64_t *ttl_ms, bool *direct, fq_nio *n, const char *bucket);
/* Create key only if it holds no value (never written, aged out, or
 * deleted: a delete marker is read back and written over, expecting its
 * revision): FQ_EEXIST when it has a value. *rev is the new revision. */
fq_status fq_nio_kv_create(uint64_t *rev, fq_nio *n, const char *bucket, const char *key,
                           const void *val, size_t len);
/* Write key only if its revision is still last: FQ_EEXIST when it moved. */
fq_status fq_nio_kv_update(uint64_t *rev, fq_nio *n, const char *bucket, const char *key,
                           const void *val, size_t len, uint64_t last);
#define FQ_NIO_ERR_WRONG_LAST 10071     /* JetStream: wrong last sequence */
/* Put a delete marker on key only if its revision is still last (0: it
 * never had a value). FQ_EEXIST when it moved. */
fq_status fq_nio_kv_delete(uint64_t *rev, fq_nio *n, const char *bucket, const char *key,
                           uint64_t last);
/* Watch every key of bucket (which must exist) on a thread of its own, from
 * each key's current value on: FQ_NIO_EV_KV per key, then
 * FQ_NIO_EV_KV_SYNCED, then FQ_NIO_EV_KV per change, all with source = id
 * (0..1). After each reconnect the watch starts again in a new epoch and
 * delivers every key again. bucket is copied. */
fq_status fq_nio_kv_watch(fq_nio *n, int id, const char *bucket);
/* Key-value requests sent without waiting (the lease keys': their loop
 * also dispatches): each answer comes as FQ_NIO_EV_KV_ANSWER with token,
 * from fq_nio_poll or fq_nio_kv_poll, or a failure (FQ_EIO) once
 * timeout_ms passed unanswered (0: api_wait_ms), after which a late answer
 * is dropped. FQ_EIO: not sent (4,096 in flight already, or the
 * connection refused it); FQ_EINVAL: names too long. Owner thread.
 *
 * A read of key's last entry (a direct get: the bucket must allow them,
 * as buckets nats.c makes do): status FQ_OK, seq its revision, kv its
 * value; FQ_ENOTFOUND, seq 0 when the key has no entry, or the revision
 * of its delete or purge marker; FQ_EIO. */
fq_status fq_nio_kv_get_async(fq_nio *n, const char *bucket, const char *key, uint64_t token,
                              int64_t timeout_ms);
/* A write of val to key only if its last entry's revision is still last
 * (0: only if it has none at all): status FQ_OK, seq the new revision;
 * FQ_EEXIST when that revision moved; FQ_EIO (err_code JetStream's, if
 * any). */
fq_status fq_nio_kv_write_async(fq_nio *n, const char *bucket, const char *key, const void *val,
                                size_t len, uint64_t last, uint64_t token, int64_t timeout_ms);
/* Move up to cap of the KV_ANSWER events that came (and the failures due)
 * into ev, and no other event: for a caller that must not handle the
 * rest now (reading a journal back). Returns how many. Owner thread. */
size_t fq_nio_kv_poll(fq_nio *n, fq_nio_event *ev, size_t cap);
/* Read key into buf (cap bytes, NUL-terminated). FQ_ENOTFOUND if absent. */
fq_status fq_nio_kv_get(char *buf, size_t cap, uint64_t *rev, fq_nio *n,
                        const char *bucket, const char *key);

/* Wait up to timeout_ms for events and move up to cap of them into ev.
 * Returns how many. */
size_t fq_nio_poll(fq_nio *n, fq_nio_event *ev, size_t cap, int timeout_ms);

/* Received messages. */
const char *fq_nio_msg_subject(const fq_nio_msg *m);
const void *fq_nio_msg_data(const fq_nio_msg *m);
size_t fq_nio_msg_len(const fq_nio_msg *m);
/* A header's first value, or NULL. */
const char *fq_nio_msg_header(const fq_nio_msg *m, const char *key);
void fq_nio_msg_destroy(fq_nio_msg *m);
/* Build o as a nats.c message (a natsMsg *, no reply subject) the way
 * fq_nio_publish builds its messages, using scratch as working space. For
 * programs that publish through nats.c directly: the baseline relay. */
fq_status fq_nio_natsmsg_create(void **out, const fq_nio_out *o, fq_buf *scratch);
/* A reader of a durable pull consumer that sends its pull requests by hand
 * (natsio.c's quirks say why not natsSubscription_Fetch): one subscription
 * on <inbox>.*, each request with its own reply subject <inbox>.<number>,
 * so that an earlier request's end status is told apart and ignored while
 * the runs it still delivers are taken. The proxy's fetch threads and the
 * example clients share it. A delivery is a message whose reply subject is
 * a JetStream ack subject ($JS.ACK.); the server's statuses carry none,
 * and a run's own headers cannot make it look like one. nats.c types are
 * void * here: only natsio.c includes nats.h. One thread at a time. */
typedef struct fq_nio_pull {
    void *nc;                   /* natsConnection *: the requests go out on it */
    void *sub;                  /* natsSubscription * on <inbox>.*: every delivery to us */
    char inbox[128];            /* <inbox> */
    char next[320];             /* <api prefix>.CONSUMER.MSG.NEXT.<stream>.<consumer> */
    uint64_t request;           /* the latest request's number */
} fq_nio_pull;
/* Open a reader of consumer on stream (both exist) on nc (a
 * natsConnection *), with deliveries to inbox (a subject without
 * wildcards, unique to this reader) and requests under api_prefix (NULL:
 * $JS.API). FQ_EINVAL if a name does not fit, FQ_EIO if nats.c refused
 * (its status in *nats_status when not NULL); nothing is left open then. */
fq_status fq_nio_pull_open(fq_nio_pull *p, void *nc, const char *inbox, const char *api_prefix,
                           const char *stream, const char *consumer, int *nats_status);
/* Safe on a zeroed reader. */
void fq_nio_pull_close(fq_nio_pull *p);
/* Deliveries already queued (those of a request given up on) into
 * out[0..max) as natsMsg *, without a request; statuses are dropped.
 * Returns how many; the caller owns them. */
int fq_nio_pull_queued(fq_nio_pull *p, void **out, int max);
/* One pull request for up to want - *count deliveries, appended to out
 * (natsMsg *) from *count on: with no_wait what the consumer has now, or
 * else the first to come; the server ends the request after timeout_ms.
 * *count never passes want. FQ_OK when deliveries came or the request
 * ended or timed out empty; FQ_EIO when none came and nats.c failed or the
 * server refused the request (409), with nats.c's status in *nats_status
 * when not NULL. */
fq_status fq_nio_pull_request(fq_nio_pull *p, void **out, int want, bool no_wait,
                              int64_t timeout_ms, int *count, int *nats_status);
/* Free a nats.c message (a natsMsg *) the caller owns outright, now and on
 * this thread rather than through nats.c's collector thread (natsio.c says
 * why). For programs that use nats.c directly: the baseline relay. */
void fq_nio_natsmsg_free(void *natsmsg);
/* Destroy m with the others dropped in this turn, on the next fq_nio_poll
 * (owner thread only): nats.c wakes a thread of its own for each message
 * destroyed alone. Safe on NULL. */
void fq_nio_msg_drop(fq_nio *n, fq_nio_msg *m);

/* Monotonic and wall clocks in milliseconds. */
uint64_t fq_nio_mono_ms(void);
int64_t fq_nio_unix_ms(void);

#endif
