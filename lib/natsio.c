/* natsio.c -- fairq's one NATS adapter: connection, streams, pull consumers, async publishes, KV. */
#include "natsio.h"
#include "creds.h"
#include "names.h"
#include "pullplan.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <nats/nats.h>

/*
 * Quirks of nats.c 3.4.1 and nats-server 2.9.10 handled here:
 *
 * - natsSubscription_Fetch/FetchRequest is not used. A fetch that starts
 *   with deliveries left from an earlier one (a request whose deadline
 *   passed while the server was still sending) compares its count with the
 *   already reduced batch, waits out its timeout, and writes past the array
 *   it returns when more arrive. The fetch thread sends its own pull
 *   requests ({batch, expires, no_wait}: nats-server 2.9 answers at once
 *   with what it has, or with the first message to come) to a plain
 *   subscription, each with its own reply subject so that an earlier
 *   request's end status is told apart; it counts what it took itself.
 * - A pull delivery comes with the stream's subject, not the request's
 *   reply subject (only the subscription it arrives on says which request
 *   it answers). One subscription serves every consumer here, so a
 *   delivery is told apart by the stream and consumer its ack subject
 *   names; statuses (404, 408, 409) do come on the request's reply subject.
 * - MaxAckPending -1 makes pulls time out: callers give a finite value.
 * - js_PublishMsgAsync is not used. Its PubAck handler gets the published
 *   natsMsg, not a token, so it needs a map from address to token under a
 *   lock; it destroys each PubAck reply alone, waking nats.c's collector
 *   thread once per run; and it allocates a reply subject and a jsPubAck per
 *   publish. Publishes here are plain core publishes whose reply subject is
 *   <inbox>.<publish number>: the number indexes a ring of what is pending,
 *   owned by the owner thread, which also times PubAcks out.
 * - Acks are published by subject. The consumer sequence is sent as 0: the
 *   server takes the delivery sequence from its pending record by stream
 *   sequence (consumer.go processAckMsg), while a stale one, from before the
 *   consumer was recreated, could move the new consumer's ack floor.
 * - natsMsg_Destroy frees nothing itself: it hands every message, received
 *   or created, to nats.c's collector thread and signals that thread for
 *   each one while it sleeps, even within a burst, so each run cost the
 *   proxy a futex wake per message and about 0.5 context switches, and
 *   every free crossed threads, which defeats malloc's per-thread caches.
 *   Messages natsio owns outright (received and dropped by the owner,
 *   published and settled, PubAck replies) are freed by natsMsg_free, the
 *   collector's own function, on the owner thread. libnats exports it
 *   without declaring it; the build checks that it is there and falls back
 *   to natsMsg_Destroy when it is not.
 * - natsMsgHeader_Set keeps headers in a map: a map, a key copy, a value
 *   and its copy per header, built, encoded at the publish and freed, some
 *   thirty allocations per dispatch. A published message's header block
 *   ("NATS/1.0", "Key: Value" lines, a blank line) is written here instead
 *   and the message built around it by natsMsg_create, the constructor
 *   libnats uses for what it receives (exported, not declared; checked by
 *   the build, with the header map as the fallback).
 * - nats-server 2.9.10 reads a header of a published message (Nats-Msg-Id,
 *   Nats-Expected-*) where its name first occurs in the block, and takes it
 *   only if CRLF precedes and a colon follows: a carried
 *   X-Nats-Msg-Id-Decoy, or a value holding the name, written before the
 *   real one hides it (measured: the dispatch was stored twice). Headers
 *   the caller sets are written first, and fq_nio_out_size flags carried
 *   ones that hold the name. JetStream refuses a header block longer than
 *   65,535 bytes (js_err 10097), measured at 65,535 and 65,540.
 * - nats.c 3.4.1 parses a received message's headers on their first read,
 *   in place. A block it cannot parse (a header with an empty value last
 *   makes one: "no value found") fails that read, and is left half read:
 *   later reads answer from the half as if nothing were wrong. Only what
 *   nats.c could read is carried, so nothing unread reaches a stream; a
 *   first read that fails so is made again (nio_carry_walk), since nats.c
 *   3.4.1 itself sends a header set empty so (measured: it_proxy_inputs'
 *   empty Fair-Run-Id, which counts as absent).
 * - nats.c hands a received message's header names out of a hash map,
 *   whose order changes with how many names it holds: a submit read back
 *   by sequence, which carries the stream's Nats-* headers too, came out
 *   in another order than as fetched (measured). Carried headers are
 *   written in the order they first occur in the block instead (see
 *   nio_keys), so either gives the same bytes.
 * - kvConfig.TTL and jsStreamConfig durations are nanoseconds; Fetch
 *   timeouts and jsPubOptions.MaxWait are milliseconds.
 */

#define NIO_MAX_SUBS 6
#define NIO_MAX_WATCHES 2
#define NIO_NS_PER_MS 1000000LL
#define NIO_FLUSH_MS 1000           /* fq_nio_destroy's flush, when not closed before */
#define NIO_CLOSED_WAIT_MS 1000     /* longest wait for the closed callback */
#define NIO_PULL_WAIT_MS 500        /* a pull request waits this long for a run, at most */
#define NIO_IDLE_POLL_MS 20         /* a paused or disconnected thread looks again after this */
#define NIO_BACKLOG_POLL_MS 2       /* a consumer held back (behind, or out of budget) is looked
                                       at again after this */
#define NIO_BUDGET_BATCHES 4        /* batches of the largest that all consumers hold at most,
                                       open and waiting for the owner (lib/pullplan.h) */
#define NIO_NAME_CAP 128            /* a stream's or a consumer's name, NUL included */
#define NIO_SUBJECT_CAP 320         /* a filter or an API subject, NUL included */
#define NIO_TAB 1024                /* consumers' lookup table: a power of 2, 4 x the most */
#define NIO_READ_MAX 256            /* messages the fetch thread reads and hands over at once */
#define NIO_RECREATE_RETRY_MS 500   /* a consumer or watch not made is tried again after this */
#define NIO_INFO_WAIT_MS 1000       /* an earlier term's consumer info waited for before its
                                       delete, at most (nio_api_answer) */
#define NIO_FETCH_RETRY_MS 100      /* a failed pull is tried again after this */
#define NIO_API_TOKEN "api."        /* <inbox>.api.<id>.<number>: a listing's, an info's or a
                                       delete's answer (nio_api_request) */
#define NIO_SCAN_QUEUED_MAX 64      /* a read's messages waiting for the owner at most */
#define NIO_WATCH_WAIT_MS 250       /* a watch waits this long for a change between looks
                                       at the connection; a failed one is made again after it */

/* What the owner wants a consumer to be (fq_nio_consume, _term, _stop):
 * copied whole by the fetch thread when it makes the consumer. */
typedef struct nio_cwant {
    bool on;                    /* consume; false: stopped */
    char stream[NIO_NAME_CAP], durable[NIO_NAME_CAP], filter[NIO_SUBJECT_CAP];
    int64_t max_ack_pending, ack_wait_ms;
    int batch;
    uint64_t term;
} nio_cwant;

/* A consumer's JetStream API request other than its create, in flight
 * (nio_api_send). */
enum nio_api {
    NIO_API_NONE,
    NIO_API_LIST,               /* making it: a page of its stream's consumer names */
    NIO_API_INFO,               /* making it: an earlier term's consumer's info, read for the
                                   names in its description before its delete */
    NIO_API_DEL_OTHER,          /* making it: an earlier term's consumer deleted */
    NIO_API_DEL_OWN,            /* making it: its own name's, before it is created afresh */
};

/* A durable pull consumer, served by the one fetch thread. */
typedef struct nio_consumer {
    nio_cwant want;             /* under n->mu */
    uint64_t version;           /* bumped by every change of want; under n->mu */
    uint64_t asked;             /* n->asks at the latest change of want: consumers due are
                                   made in this order; under n->mu */
    size_t queued;              /* MSG events in the queue: while the owner is behind, nats.c's
                                   messages wait there, a KiB each; under n->mu */
    atomic_bool paused;
    atomic_uint_fast64_t fence_until;   /* monotonic ms from which it is left alone
                                           (fq_nio_fence_consumer), besides the process's */
    char ack[320];              /* $JS.ACK.<stream>.<name>. : acks' subjects begin so; owner only */
    size_t ack_len;
    /* The fetch thread's own. */
    nio_cwant made;             /* what was made (or deleted) last */
    bool live;                  /* made, and not stopped since */
    uint64_t made_version;      /* the version of want that made is */
    uint64_t made_gen;          /* the connection generation it was made in */
    uint64_t retry_at;          /* monotonic ms: a failed make or delete is tried again then */
    /* Its create request in flight, if any (see nio_reconcile_one). */
    uint64_t create_req;        /* its number (the request numbers' counter); 0: none */
    uint64_t create_end;        /* monotonic ms after which it is taken as failed */
    uint64_t create_version;    /* the version of want it makes */
    uint64_t create_gen;        /* the connection generation it was sent in */
    bool create_newer;          /* a later term's consumer was on the stream when it was sent */
    uint64_t create_stale;      /* the earlier term whose stale copy was cleared before it was
                                   sent again (nio_adopt_stale), 0 if none */
    /* Its listing or delete in flight, if any (nio_api_send): a step of
     * making it before its create, or its delete once stopped. */
    enum nio_api api;           /* which; NIO_API_NONE: none */
    uint64_t api_req;           /* its number (the request numbers' counter); 0: none */
    uint64_t api_end;           /* monotonic ms after which it is taken as failed */
    uint64_t api_version;       /* the version of want it serves */
    uint64_t api_gen;           /* the connection generation it was sent in */
    uint64_t api_from;          /* making: earlier terms from this one on are still deleted */
    bool api_more;              /* NIO_API_DEL_OTHER: another earlier term was listed */
    bool api_newer;             /* making: a later term's consumer was listed */
    char api_name[NIO_NAME_CAP];    /* NIO_API_INFO, _DEL_*: the consumer it reads or deletes */
    char name[NIO_NAME_CAP];    /* <durable>-<term>, or <durable> */
    fq_pull_gone gone;          /* durable's consumers deleted, by us or as the descriptions
                                   of those we deleted say: what a node may keep a stale copy
                                   of (nio_adopt_stale); its description when made */
    char key[2 * NIO_NAME_CAP]; /* <stream>.<name>: how its deliveries' ack subjects name it */
    char next[NIO_SUBJECT_CAP]; /* $JS.API.CONSUMER.MSG.NEXT.<stream>.<name> */
    uint64_t request;           /* the number of its latest pull request */
    uint64_t request_end;       /* monotonic ms after which that request is taken as over */
} nio_consumer;

/* The one thread that fetches for every consumer: it sends each consumer's
 * pull requests (lib/pullplan.h decides whose and how many) and reads
 * every delivery and every status from one subscription. */
typedef struct nio_fetch {
    pthread_t thread;
    bool started;
    natsSubscription *sub;      /* <inbox>.>: what the server sends for every request */
    char inbox[128];            /* requests' reply subjects are <inbox>.<id>.<number> */
    size_t inbox_len;
    size_t cursor;              /* fq_pull_plan's round robin */
    atomic_int used;            /* consumers 0..used-1 have been started once (set by the owner) */
    fq_pull_cons plan[FQ_NIO_MAX_CONSUMERS];
    fq_pull_req reqs[FQ_NIO_MAX_CONSUMERS];
    int16_t tab[NIO_TAB];       /* by hash of key: 1 + consumer id, 0 empty (live ones) */
    bool tab_stale;             /* a consumer's liveness changed this turn: rebuild tab */
    fq_nio_event evs[NIO_READ_MAX]; /* the deliveries read in one turn */
} nio_fetch;

/* A core subscription whose messages become REQUEST events. */
typedef struct nio_sub {
    fq_nio *n;
    int id;
    natsSubscription *sub;
    size_t max_queued;          /* requests waiting for the owner at most; 0: no bound */
    const char *busy_reply;     /* the answer past max_queued (the caller's); NULL: none */
    bool plain;                 /* fq_nio_listen: messages without a reply are taken */
    size_t queued;              /* REQUEST events in the queue; under n->mu */
    atomic_uint_fast64_t no_reply; /* requests dropped: no reply subject */
    atomic_uint_fast64_t busy;  /* requests answered busy_reply: no room */
} nio_sub;

/* A watched key-value bucket and the thread that reads its changes. */
typedef struct nio_watch {
    fq_nio *n;
    int id;
    char *bucket;               /* owned */
    pthread_t thread;
    bool started;
} nio_watch;

/* The read back the owner wants of a stream (fq_nio_scan_start, _stop),
 * and the thread that does it. */
typedef struct nio_scan {
    pthread_t thread;
    bool started;               /* the thread runs (made at the first read wanted) */
    pthread_cond_t cv;          /* signalled on a change of want, on room in the queue, at
                                   close */
    /* Under n->mu. */
    uint64_t want;              /* bumped by every start and stop: a read made for an
                                   earlier one hands nothing more over */
    uint64_t done;              /* the latest want read to its end */
    bool on;                    /* want is a read, not a stop */
    uint64_t token;             /* the caller's: on each event of the read */
    char stream[NIO_NAME_CAP];
    char subject[NIO_SUBJECT_CAP]; /* "": the whole stream */
    size_t queued;              /* its SCAN events in the queue */
    natsSubscription *stale;    /* scan thread only: a read's subscription not yet freed,
                                   its unsubscribe not confirmed (see nio_scan_unsub) */
} nio_scan;

/* Messages waiting to be destroyed together (see nio_graves_flush). */
typedef struct nio_graves {
    natsMsg **m;
    size_t n, cap;
} nio_graves;

/* A publish waiting for its PubAck: a slot of the pending ring. */
typedef struct nio_pub {
    uint64_t id;                /* publish number, the reply subject's last token */
    uint64_t token;             /* the caller's */
    natsMsg *msg;               /* ours until settled (handed back on failure); NULL: settled */
    uint64_t sent_ms;           /* monotonic */
} nio_pub;

/* A key-value request in flight (fq_nio_kv_get_async, fq_nio_kv_write_async). */
typedef struct nio_kvreq {
    uint64_t num;               /* its number, the reply subject's last token */
    uint64_t token;             /* the caller's */
    uint64_t end_ms;            /* monotonic: unanswered then, it has failed */
    bool live;                  /* not answered or failed yet */
} nio_kvreq;
#define NIO_KV_REQS 4096        /* in flight at most, a power of two (one per lease key) */

struct fq_nio {
    natsConnection *nc;
    natsOptions *nopts;
    jsCtx *js;
    fq_nio_opts o;
    char *url, *creds, *tls_ca, *tls_cert, *tls_key, *name; /* owned copies */
    char *user, *password, *nkey, *nkey_seed, *inbox_prefix; /* owned copies */
    int64_t max_payload;
    atomic_bool connected;
    atomic_uint_fast64_t generation;    /* bumped on each reconnect */
    atomic_bool stopping;
    atomic_uint_fast64_t fence_until;   /* monotonic ms from which consumers are left alone */
    bool closed;                /* the closed callback ran: no callback follows; under mu */
    bool close_done;            /* fq_nio_close ran; owner thread only */
    bool close_ok;              /* ... and the closed callback came in time */

    pthread_mutex_t mu;         /* guards everything below */
    uint64_t asks;              /* changes of consumers' wants so far (nio_consumer.asked) */
    uint64_t denied;            /* permissions violations reported */
    char denied_last[256];      /* the latest one's text */
    pthread_cond_t cv;          /* signalled when events are queued */
    fq_nio_event *q;            /* ring of events */
    size_t q_cap, q_head, q_len;
    nio_graves acked;           /* PubAck replies, to destroy in the owner's burst */
    nio_graves spare;           /* an emptied array for acked; owner thread only */
    nio_graves dropped;         /* the owner's (fq_nio_msg_drop); owner thread only */

    /* Pending publishes; owner thread only. Slot id & pubs_mask holds
     * publish id while tail <= id < head. */
    natsSubscription *acks;     /* <ack_prefix>*: every PubAck reply */
    char ack_prefix[128];       /* <inbox>. */
    size_t ack_prefix_len;
    nio_pub *pubs;
    uint64_t pubs_mask;
    uint64_t pub_head, pub_tail;    /* next publish id; oldest maybe unsettled */
    int64_t pubs_live;
    /* Key-value requests in flight (nio_kv_send); owner thread only. Slot
     * num & (NIO_KV_REQS - 1) holds number num while live. Their answers
     * come to the PubAck subscription too, on <ack_prefix>g<num> (a read)
     * or <ack_prefix>w<num> (a write), and wait in kvq (under mu). */
    nio_kvreq *kvreqs;
    uint64_t kv_head, kv_tail;  /* next number; the oldest maybe live */
    uint64_t kv_due;            /* the earliest end of those live; UINT64_MAX: none */
    fq_nio_event *kvq;          /* ring of NIO_KV_REQS answers; under mu */
    size_t kvq_head, kvq_len;
    fq_buf scratch;         /* a message being built; owner thread only */

    nio_consumer cons[FQ_NIO_MAX_CONSUMERS];
    nio_fetch fetch;
    uint64_t fetch_requests;    /* pull requests sent: each one's number; fetch thread only */
    nio_sub subs[NIO_MAX_SUBS];
    nio_watch watches[NIO_MAX_WATCHES];
    nio_scan scan;
};

uint64_t fq_nio_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int64_t fq_nio_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The unsigned decimal number at p, before end (NULL: up to the first
 * byte that is not a digit); returns where it ends, or NULL if there is no
 * digit or the number exceeds max. */
static const char *nio_num(const char *p, const char *end, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    const char *s = p;
    for (; (!end || p < end) && *p >= '0' && *p <= '9'; p++) {
        if (x > (max - (uint64_t)(*p - '0')) / 10)
            return NULL;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *v = x;
    return p > s ? p : NULL;
}

/* The reason nats.c gave for the last failure of this thread, into err. */
static void nio_errtext(char *err, size_t errlen, const char *what, natsStatus s)
{
    if (!err || !errlen)
        return;
    natsStatus ls = NATS_OK;
    const char *last = nats_GetLastError(&ls);
    /* The thread's last error text may be older than s: show it only if it
     * is about the same failure. */
    if (ls != s || !last)
        last = "";
    snprintf(err, errlen, "%s: %s%s%s", what, natsStatus_GetText(s), *last ? ": " : "", last);
}

/* ---- deferred destroys ----------------------------------------------------- */

/*
 * Messages the owner is done with are kept and freed together once per turn
 * of its loop, on its own thread (see the quirk about natsMsg_Destroy).
 */

/* Keep m in g to destroy later; destroy it now if g cannot grow. */
static void nio_graves_add(nio_graves *g, natsMsg *m)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 256;
        natsMsg **a = realloc(g->m, cap * sizeof *a);
        if (!a) {
            natsMsg_Destroy(m);
            return;
        }
        g->m = a;
        g->cap = cap;
    }
    g->m[g->n++] = m;
}

#ifdef FQ_NATS_DIRECT_FREE
/* What nats.c's collector thread calls on each message; exported by
 * libnats, not declared by its headers (see the quirks above). */
void natsMsg_free(void *object);
#define nio_msg_free(m) natsMsg_free(m)
#else
#define nio_msg_free(m) natsMsg_Destroy(m)
#endif

static void nio_graves_flush(nio_graves *g)
{
    for (size_t i = 0; i < g->n; i++)
        nio_msg_free(g->m[i]);
    g->n = 0;
}

void fq_nio_msg_drop(fq_nio *n, fq_nio_msg *m)
{
    if (m)
        nio_graves_add(&n->dropped, (natsMsg *)m);
}

/* ---- the event queue ---------------------------------------------------- */

/* Append an event; the caller holds mu. On allocation failure the event is
 * lost (false), which only an out-of-memory process sees. */
static bool nio_push_locked(fq_nio *n, const fq_nio_event *ev)
{
    if (n->q_len == n->q_cap) {
        size_t cap = n->q_cap ? n->q_cap * 2 : 1024;
        fq_nio_event *q = malloc(cap * sizeof *q);
        if (!q)
            return false;
        for (size_t i = 0; i < n->q_len; i++)
            q[i] = n->q[(n->q_head + i) % n->q_cap];
        free(n->q);
        n->q = q;
        n->q_cap = cap;
        n->q_head = 0;
    }
    n->q[(n->q_head + n->q_len) % n->q_cap] = *ev;
    n->q_len++;
    return true;
}

static void nio_push(fq_nio *n, const fq_nio_event *ev)
{
    pthread_mutex_lock(&n->mu);
    nio_push_locked(n, ev);
    pthread_mutex_unlock(&n->mu);
    pthread_cond_signal(&n->cv);
}

static size_t nio_pubs_settle(fq_nio *n, fq_nio_event *ev, size_t k, size_t cap,
                              bool drained);
static size_t nio_kvq_take_locked(fq_nio *n, fq_nio_event *ev, size_t cap);
static size_t nio_kv_settle(fq_nio *n, fq_nio_event *ev, size_t k, size_t cap, bool drained);

size_t fq_nio_poll(fq_nio *n, fq_nio_event *ev, size_t cap, int timeout_ms)
{
    pthread_mutex_lock(&n->mu);
    if (n->q_len == 0 && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (n->q_len == 0 && n->kvq_len == 0 &&
               pthread_cond_timedwait(&n->cv, &n->mu, &ts) != ETIMEDOUT)
            ;
    }
    size_t k = nio_kvq_take_locked(n, ev, cap);  /* the lease keys' answers first */
    bool kv_drained = n->kvq_len == 0;
    for (; k < cap && n->q_len > 0; k++) {
        ev[k] = n->q[n->q_head];
        n->q_head = (n->q_head + 1) % n->q_cap;
        n->q_len--;
        if (ev[k].type == FQ_NIO_EV_REQUEST)
            n->subs[ev[k].source].queued--;
        else if (ev[k].type == FQ_NIO_EV_MSG)
            n->cons[ev[k].source].queued--;
        else if (ev[k].type == FQ_NIO_EV_SCAN && n->scan.queued-- == NIO_SCAN_QUEUED_MAX)
            pthread_cond_signal(&n->scan.cv);   /* room for the read's next message */
    }
    /* Take the PubAck replies over whole: the PubAck thread refills an
     * empty array while the owner destroys them. */
    nio_graves acked = n->acked;
    n->acked = n->spare;
    n->spare = (nio_graves){0};
    bool drained = n->q_len == 0;
    pthread_mutex_unlock(&n->mu);
    k = nio_pubs_settle(n, ev, k, cap, drained);
    k = nio_kv_settle(n, ev, k, cap, kv_drained);
    nio_graves_flush(&acked);
    nio_graves_flush(&n->dropped);
    n->spare = acked;
    return k;
}

/* ---- pending publishes ----------------------------------------------------- */

fq_status fq_nio_flush(fq_nio *n, int timeout_ms)
{
    return natsConnection_FlushTimeout(n->nc, timeout_ms) == NATS_OK ? FQ_OK : FQ_EIO;
}

int64_t fq_nio_pending_pubs(const fq_nio *n)
{
    return n->pubs_live;
}

/* Where needle ends in the len bytes at d, blanks after it skipped, or NULL. */
static const char *nio_find(const char *d, size_t len, const char *needle)
{
    const char *end = d + len;
    size_t k = strlen(needle);
    for (const char *p = d; (size_t)(end - p) >= k; p++) {
        if (!(p = memchr(p, needle[0], (size_t)(end - p) - k + 1)))
            return NULL;
        if (memcmp(p, needle, k) == 0) {
            for (p += k; p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r');)
                p++;
            return p;
        }
    }
    return NULL;
}

void fq_nio_parse_puback(fq_nio_event *ev, const void *data, size_t len)
{
    /* The server writes {"stream":..,"seq":N[,"duplicate":true]} (with
     * blanks after some colons: 2.9.10 writes a duplicate's by hand) or
     * {"error":{"code":..,"err_code":N,"description":..},...}. A key is
     * found by its quoted name and colon: inside a JSON string a quote is
     * escaped, so that text can only be the key itself. */
    const char *d = data, *end, *v;
    uint64_t x = 0;
    ev->status = FQ_EIO;
    ev->seq = 0;
    ev->duplicate = false;
    ev->err_code = 0;
    if (!d || !len)
        return;         /* no responders: no stream has the subject */
    end = d + len;      /* only now: NULL + 0 is undefined behaviour */
    if (nio_find(d, len, "\"error\":")) {
        if ((v = nio_find(d, len, "\"err_code\":")) && nio_num(v, end, 99999, &x))
            ev->err_code = (int)x;
        return;
    }
    if (!(v = nio_find(d, len, "\"seq\":")) || !nio_num(v, end, UINT64_MAX, &x) || !x)
        return;
    ev->status = FQ_OK;
    ev->seq = x;
    v = nio_find(d, len, "\"duplicate\":");
    ev->duplicate = v && end - v >= 4 && memcmp(v, "true", 4) == 0;
}

static void nio_kv_answer(fq_nio *n, natsMsg *msg, char kind, uint64_t num);

/* nats.c's delivery thread for the PubAck subscription: hand the outcome
 * to the owner under the publish number (ev.token); fq_nio_poll turns the
 * number into the caller's token. The reply is destroyed in the owner's
 * next burst. */
static void nio_on_puback(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    fq_nio *n = closure;
    const char *subj = natsMsg_GetSubject(msg);
    uint64_t id = 0;
    char kind = strlen(subj) > n->ack_prefix_len ? subj[n->ack_prefix_len] : '\0';
    if ((kind == 'g' || kind == 'w') &&
        nio_num(subj + n->ack_prefix_len + 1, NULL, UINT64_MAX, &id)) {
        nio_kv_answer(n, msg, kind, id);    /* a key-value request's */
        return;
    }
    bool ours = strlen(subj) > n->ack_prefix_len &&
                nio_num(subj + n->ack_prefix_len, NULL, UINT64_MAX, &id) != NULL;
    fq_nio_event ev = {.type = FQ_NIO_EV_PUBACK, .token = id};
    if (ours)
        fq_nio_parse_puback(&ev, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg));
    pthread_mutex_lock(&n->mu);
    if (ours)
        nio_push_locked(n, &ev);
    nio_graves_add(&n->acked, msg);
    pthread_mutex_unlock(&n->mu);
    /* Signalled after the unlock, so that the owner does not wake only to
     * wait for the lock. */
    if (ours)
        pthread_cond_signal(&n->cv);
}

/* Settle the publish in slot s with the outcome in ev: the caller's token
 * goes in ev, and the message back to the caller on a failure. */
static void nio_pub_settle(fq_nio *n, nio_pub *s, fq_nio_event *ev)
{
    ev->token = s->token;
    if (ev->status == FQ_OK)
        nio_graves_add(&n->dropped, s->msg);
    else
        ev->msg = (fq_nio_msg *)s->msg;
    s->msg = NULL;
    n->pubs_live--;
}

/* Give PUBACK events in ev[0..k) the caller's tokens, dropping those of
 * publishes settled already (timed out), then, if the queue was drained
 * (so no PubAck that came is still waiting in it), append a failure for
 * every publish whose PubAck is overdue, while cap allows. Returns the new
 * count. */
static size_t nio_pubs_settle(fq_nio *n, fq_nio_event *ev, size_t k, size_t cap,
                              bool drained)
{
    size_t out = 0;
    for (size_t i = 0; i < k; i++) {
        if (ev[i].type == FQ_NIO_EV_PUBACK) {
            uint64_t id = ev[i].token;
            nio_pub *s = n->pubs ? &n->pubs[id & n->pubs_mask] : NULL;
            if (!s || s->id != id || !s->msg || id < n->pub_tail || id >= n->pub_head)
                continue;
            nio_pub_settle(n, s, &ev[i]);
        }
        ev[out++] = ev[i];
    }
    uint64_t now = fq_nio_mono_ms();
    for (; n->pub_tail < n->pub_head; n->pub_tail++) {
        nio_pub *s = &n->pubs[n->pub_tail & n->pubs_mask];
        if (!s->msg)
            continue;
        if (!drained || s->sent_ms + (uint64_t)n->o.pub_wait_ms > now || out == cap)
            break;
        ev[out] = (fq_nio_event){.type = FQ_NIO_EV_PUBACK, .status = FQ_EIO};
        nio_pub_settle(n, s, &ev[out++]);
    }
    return out;
}

/* Publish m (ours) with token under the next publish number. On success
 * the ring owns m; else it stays the caller's. */
static fq_status nio_publish_msg(fq_nio *n, natsMsg *m, uint64_t token)
{
    uint64_t id = n->pub_head;
    nio_pub *s = &n->pubs[id & n->pubs_mask];
    natsStatus ps = natsConnection_PublishMsg(n->nc, m);
    if (ps != NATS_OK)
        return ps == NATS_MAX_PAYLOAD ? FQ_ETOOBIG : FQ_EIO;
    *s = (nio_pub){.id = id, .token = token, .msg = m, .sent_ms = fq_nio_mono_ms()};
    n->pub_head++;
    n->pubs_live++;
    return FQ_OK;
}

/* The reply subject of the next publish into buf (which holds
 * sizeof ack_prefix + FQ_U64_DEC_MAX); false when max_pending_pubs are
 * pending, or when the oldest one still pending is a whole ring behind. */
static bool nio_next_reply(fq_nio *n, char *buf)
{
    if (n->pubs_live >= n->o.max_pending_pubs || n->pub_head - n->pub_tail > n->pubs_mask)
        return false;
    memcpy(buf, n->ack_prefix, n->ack_prefix_len);
    fq_u64_dec(buf + n->ack_prefix_len, n->pub_head);
    return true;
}

/* ---- connection ---------------------------------------------------------- */

static void nio_conn_event(fq_nio *n, bool up)
{
    if (up)
        atomic_fetch_add(&n->generation, 1);
    atomic_store(&n->connected, up);
    fq_nio_event ev = {.type = FQ_NIO_EV_CONN, .connected = up};
    nio_push(n, &ev);
}

static void nio_on_disconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    nio_conn_event(closure, false);
}

static void nio_on_reconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    nio_conn_event(closure, true);
}

/* The library's last connection callback: after it, none can touch n. */
static void nio_on_closed(natsConnection *nc, void *closure)
{
    fq_nio *n = closure;
    (void)nc;
    pthread_mutex_lock(&n->mu);
    n->closed = true;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

/* Tell every thread of ours to stop, write what is buffered (up to
 * flush_ms, and only while connected: a flush to a server that is gone
 * waits its whole timeout), then close the connection. natsConnection_Close
 * fails at once every request still waiting for its reply, so a fetch or
 * watch thread blocked in an API call returns now, not after api_wait_ms,
 * and a watcher destroyed afterwards does not ask the server to delete its
 * consumer (a request that cannot be answered while the server is gone).
 * Then wait (NIO_CLOSED_WAIT_MS at most) until the library's callbacks are
 * done: it delivers the disconnected and closed ones later, on its own
 * thread, which must not find n freed. False if they did not come. */
static bool nio_close(fq_nio *n, int flush_ms)
{
    atomic_store(&n->stopping, true);
    pthread_mutex_lock(&n->mu);
    pthread_cond_broadcast(&n->scan.cv);    /* a read waiting for room or work */
    pthread_mutex_unlock(&n->mu);
    if (!n->nc)
        return true;
    if (flush_ms > 0 && atomic_load(&n->connected))
        natsConnection_FlushTimeout(n->nc, flush_ms);
    natsConnection_Close(n->nc);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(NIO_CLOSED_WAIT_MS % 1000) * 1000000L;
    until.tv_sec += NIO_CLOSED_WAIT_MS / 1000 + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&n->mu);
    while (!n->closed && pthread_cond_timedwait(&n->cv, &n->mu, &until) == 0)
        ;
    bool closed = n->closed;
    pthread_mutex_unlock(&n->mu);
    return closed;
}

void fq_nio_close(fq_nio *n, int flush_ms)
{
    if (n && !n->close_done) {
        n->close_done = true;
        n->close_ok = nio_close(n, flush_ms);
    }
}

/* nats.c's handler of asynchronous errors: a permissions violation (a
 * publish or subscription the server refused) is remembered and handed to
 * the owner, since the call that caused it only times out. */
static void nio_on_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
    (void)sub;
    fq_nio *n = closure;
    if (err != NATS_NOT_PERMITTED)
        return;
    const char *text = NULL;
    natsConnection_GetLastError(nc, &text);
    pthread_mutex_lock(&n->mu);
    n->denied++;
    snprintf(n->denied_last, sizeof n->denied_last, "%s",
             text && *text ? text : "Permissions Violation");
    fq_nio_event ev = {.type = FQ_NIO_EV_DENIED, .seq = n->denied};
    nio_push_locked(n, &ev);
    pthread_mutex_unlock(&n->mu);
    pthread_cond_signal(&n->cv);
}

uint64_t fq_nio_denied(fq_nio *n, char *last, size_t cap)
{
    pthread_mutex_lock(&n->mu);
    uint64_t k = n->denied;
    if (last && cap)
        snprintf(last, cap, "%s", n->denied_last);
    pthread_mutex_unlock(&n->mu);
    return k;
}

/* A new inbox under the configured prefix, "<prefix>.<unique>", into buf:
 * what nats.c makes for its own requests with a custom inbox prefix, for
 * the subjects natsio subscribes to itself. */
static natsStatus nio_inbox(const fq_nio *n, char *buf, size_t cap)
{
    natsInbox *inbox = NULL;
    natsStatus s = natsInbox_Create(&inbox);
    if (s != NATS_OK)
        return s;
    /* natsInbox_Create writes "_INBOX.<unique>". */
    const char *unique = strchr((const char *)inbox, '.');
    int k = snprintf(buf, cap, "%s.%s", n->inbox_prefix ? n->inbox_prefix : FQ_INBOX_PREFIX,
                     unique ? unique + 1 : (const char *)inbox);
    natsInbox_Destroy(inbox);
    return k > 0 && (size_t)k < cap ? NATS_OK : NATS_ERR;
}

/* " (nats.creds: <why the server may refuse it>)" into out. */
static void nio_creds_why(char *out, size_t cap, const char *path)
{
    char why[400];
    if (fq_creds_check(why, sizeof why, path, (int64_t)time(NULL)) == FQ_OK)
        snprintf(out, cap, " (nats.creds holds %s: the server does not accept it: the account "
                 "revoked this user, or the server does not trust the account that signed it)", why);
    else
        snprintf(out, cap, " (nats.creds: %s)", why);
}

static char *nio_strdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

#define NIO_MAX_URLS 16           /* servers in a comma-separated nats.url */

/* nats.url: one URL, or a comma-separated list of a cluster's nodes.
 * nats.c 3.4.1 given such a list by natsOptions_SetURL connects to none of
 * them ("No server available", measured against nats-server 2.9.10, one
 * node or three); natsOptions_SetServers takes the list. */
static natsStatus nio_set_url(natsOptions *o, const char *url)
{
    if (!strchr(url, ','))
        return natsOptions_SetURL(o, url);
    char *copy = strdup(url);
    if (!copy)
        return NATS_NO_MEMORY;
    const char *list[NIO_MAX_URLS];
    int n = 0;
    for (char *p = copy, *next; p && n < NIO_MAX_URLS; p = next) {
        next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        while (*p == ' ')
            p++;
        if (*p)
            list[n++] = p;
    }
    natsStatus s = n ? natsOptions_SetServers(o, list, n) : NATS_INVALID_ARG;
    free(copy);
    return s;
}

static natsStatus nio_set_options(fq_nio *n)
{
    natsOptions *o = n->nopts;
    natsStatus s = nio_set_url(o, n->url);
    if (s == NATS_OK && n->name)
        s = natsOptions_SetName(o, n->name);
    if (s == NATS_OK && n->creds)
        s = natsOptions_SetUserCredentialsFromFiles(o, n->creds, NULL);
    if (s == NATS_OK && n->user)
        s = natsOptions_SetUserInfo(o, n->user, n->password);
    if (s == NATS_OK && n->nkey)
        s = natsOptions_SetNKeyFromSeed(o, n->nkey, n->nkey_seed);
    if (s == NATS_OK && n->inbox_prefix)
        s = natsOptions_SetCustomInboxPrefix(o, n->inbox_prefix);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(o, nio_on_error, n);
    if (s == NATS_OK && (n->tls_ca || n->tls_cert))
        s = natsOptions_SetSecure(o, true);
    if (s == NATS_OK && n->tls_ca)
        s = natsOptions_LoadCATrustedCertificates(o, n->tls_ca);
    if (s == NATS_OK && n->tls_cert)
        s = natsOptions_LoadCertificatesChain(o, n->tls_cert, n->tls_key);
    /* A sidecar never gives up on its server. */
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(o, 250);
    if (s == NATS_OK)
        s = natsOptions_SetPingInterval(o, 5000);
    if (s == NATS_OK)
        s = natsOptions_SetMaxPingsOut(o, 3);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(o, 64 * 1024 * 1024);

    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(o, nio_on_disconnected, n);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(o, nio_on_reconnected, n);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(o, nio_on_closed, n);
    return s;
}

/* The ring of pending publishes and the subscription their PubAcks come
 * to: <inbox>.<publish number>, one subscription for all. */
static natsStatus nio_acks_start(fq_nio *n)
{
    /* Four times the publishes that may be pending, so that one whose
     * PubAck was lost does not stop the rest before it times out: at 20,000
     * publishes a second and the default 5 s, the ids run 100,000 ahead of
     * it, within the 262,144 slots of the default (8 MiB, touched as used). */
    uint64_t cap = 1;
    while (cap < 4 * (uint64_t)n->o.max_pending_pubs)
        cap <<= 1;
    if (!(n->pubs = calloc(cap, sizeof *n->pubs)))
        return NATS_NO_MEMORY;
    n->pubs_mask = cap - 1;
    n->pub_head = n->pub_tail = 1;
    n->kvreqs = calloc(NIO_KV_REQS, sizeof *n->kvreqs);
    fq_nio_event *kvq = calloc(NIO_KV_REQS, sizeof *kvq);
    if (!n->kvreqs || !kvq) {
        free(kvq);
        return NATS_NO_MEMORY;
    }
    n->kvq = kvq;       /* before the subscription that fills it */
    n->kv_head = n->kv_tail = 1;
    n->kv_due = UINT64_MAX;
    natsStatus s = nio_inbox(n, n->ack_prefix, sizeof n->ack_prefix - 1);
    if (s == NATS_OK) {
        n->ack_prefix_len = strlen(n->ack_prefix);
        n->ack_prefix[n->ack_prefix_len++] = '.';
        n->ack_prefix[n->ack_prefix_len] = '\0';
    }
    char subj[sizeof n->ack_prefix + 1];
    snprintf(subj, sizeof subj, "%s*", n->ack_prefix);
    if (s == NATS_OK)
        s = natsConnection_Subscribe(&n->acks, n->nc, subj, nio_on_puback, n);
    /* At most one reply per pending publish: the ring bounds it. */
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(n->acks, -1, -1);
    return s;
}

/* Connect n as its options say: options, connection, JetStream, the
 * PubAck subscription. *what: the step that failed. */
static natsStatus nio_connect(fq_nio *n, const char **what)
{
    *what = "nats options";
    natsStatus s = natsOptions_Create(&n->nopts);
    if (s == NATS_OK)
        s = nio_set_options(n);
    if (s == NATS_OK) {
        *what = "connect";
        s = natsConnection_Connect(&n->nc, n->nopts);
    }
    if (s == NATS_OK) {
        jsOptions jo;
        jsOptions_Init(&jo);
        jo.Wait = n->o.api_wait_ms;
        *what = "jetstream";
        s = natsConnection_JetStream(&n->js, n->nc, &jo);
    }
    if (s == NATS_OK) {
        *what = "puback subscription";
        s = nio_acks_start(n);
    }
    return s;
}

/* Why connecting failed at what (s), into err: nats.c's words, and what
 * they leave out where the options tell it. */
static void nio_connect_why(char *err, size_t errlen, const fq_nio *n, const char *what,
                            natsStatus s)
{
    nio_errtext(err, errlen, what, s);
    /* A server that refuses the client's certificate (none, expired, or of
     * a CA it does not trust) closes the connection once the handshake is
     * over, and nats.c reports only the missing PONG. */
    size_t k = err ? strlen(err) : 0;
    if (k + 1 < errlen && (n->tls_ca || n->tls_cert) &&
        (s == NATS_PROTOCOL_ERROR || s == NATS_CONNECTION_CLOSED))
        snprintf(err + k, errlen - k, " (the server closed the TLS connection: it may refuse "
                 "this client's certificate, nats.tls.cert: none, expired, or signed by a CA "
                 "it does not trust)");
    /* nats-server refuses every bad user JWT with the same words; say what
     * the credentials file shows, or that the rest is the server's to
     * tell. */
    if (k + 1 < errlen && n->creds && s == NATS_CONNECTION_AUTH_FAILED)
        nio_creds_why(err + k, errlen - k, n->creds);
}

fq_status fq_nio_create(fq_nio **out, const fq_nio_opts *o, char *err, size_t errlen)
{
    *out = NULL;
    fq_nio *n = calloc(1, sizeof *n);
    if (!n)
        return FQ_ENOMEM;
    n->o = *o;
    atomic_store(&n->fence_until, UINT64_MAX);
    for (int i = 0; i < FQ_NIO_MAX_CONSUMERS; i++)
        atomic_store(&n->cons[i].fence_until, UINT64_MAX);
    if (!n->o.api_wait_ms)
        n->o.api_wait_ms = 5000;
    if (!n->o.pub_wait_ms)
        n->o.pub_wait_ms = 5000;
    if (!n->o.max_pending_pubs)
        n->o.max_pending_pubs = 65536;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    pthread_cond_init(&n->scan.cv, NULL);
    n->url = nio_strdup(o->url);
    n->creds = nio_strdup(o->creds);
    n->tls_ca = nio_strdup(o->tls_ca);
    n->tls_cert = nio_strdup(o->tls_cert);
    n->tls_key = nio_strdup(o->tls_key);
    n->name = nio_strdup(o->name);
    n->user = nio_strdup(o->user);
    n->password = nio_strdup(o->password);
    n->nkey = nio_strdup(o->nkey);
    n->nkey_seed = nio_strdup(o->nkey_seed);
    n->inbox_prefix = nio_strdup(o->inbox_prefix);
    for (int i = 0; i < NIO_MAX_SUBS; i++)
        n->subs[i] = (nio_sub){.n = n, .id = i};
    for (int i = 0; i < NIO_MAX_WATCHES; i++)
        n->watches[i] = (nio_watch){.n = n, .id = i};
    const char *what;
    natsStatus s = nio_connect(n, &what);
    if (s != NATS_OK) {
        nio_connect_why(err, errlen, n, what, s);
        fq_nio_destroy(n);
        return FQ_EIO;
    }
    n->max_payload = natsConnection_GetMaxPayload(n->nc);
    atomic_store(&n->connected, true);
    *out = n;
    return FQ_OK;
}

void fq_nio_destroy(fq_nio *n)
{
    if (!n)
        return;
    /* Closed first, so that no thread joined below waits on the server. */
    fq_nio_close(n, NIO_FLUSH_MS);
    if (n->fetch.started)
        pthread_join(n->fetch.thread, NULL);
    natsSubscription_Destroy(n->fetch.sub);
    for (int i = 0; i < NIO_MAX_SUBS; i++)
        natsSubscription_Destroy(n->subs[i].sub);
    natsSubscription_Destroy(n->acks);
    for (int i = 0; i < NIO_MAX_WATCHES; i++) {
        if (n->watches[i].started)
            pthread_join(n->watches[i].thread, NULL);
        free(n->watches[i].bucket);
    }
    if (n->scan.started)
        pthread_join(n->scan.thread, NULL);
    natsSubscription_Destroy(n->scan.stale);   /* the connection is closed */
    /* The library may still call back into n: leave it allocated. */
    if (!n->close_ok)
        return;
    jsCtx_Destroy(n->js);
    natsConnection_Destroy(n->nc);
    natsOptions_Destroy(n->nopts);
    /* Events still queued may hold messages. */
    for (size_t i = 0; i < n->q_len; i++) {
        fq_nio_event *ev = &n->q[(n->q_head + i) % n->q_cap];
        natsMsg_Destroy((natsMsg *)ev->msg);
        fq_nio_kv_entry_destroy(ev->kv);
    }
    free(n->q);
    for (size_t i = 0; n->kvq && i < n->kvq_len; i++)
        fq_nio_kv_entry_destroy(n->kvq[(n->kvq_head + i) % NIO_KV_REQS].kv);
    free(n->kvq);
    free(n->kvreqs);
    nio_graves_flush(&n->acked);
    nio_graves_flush(&n->dropped);
    free(n->acked.m);
    free(n->spare.m);
    free(n->dropped.m);
    for (uint64_t id = n->pub_tail; n->pubs && id < n->pub_head; id++)
        natsMsg_Destroy(n->pubs[id & n->pubs_mask].msg);
    free(n->pubs);
    free(n->scratch.p);
    free(n->url);
    free(n->creds);
    free(n->tls_ca);
    free(n->tls_cert);
    free(n->tls_key);
    free(n->name);
    free(n->user);
    free(n->password);
    free(n->nkey);
    free(n->nkey_seed);
    free(n->inbox_prefix);
    pthread_cond_destroy(&n->scan.cv);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

int64_t fq_nio_max_payload(const fq_nio *n)
{
    /* The server's INFO of the latest connection: a server restarted with
     * a new max_payload announces it. */
    int64_t v = natsConnection_GetMaxPayload(n->nc);
    return v > 0 ? v : n->max_payload;
}

/* ---- streams ------------------------------------------------------------- */

static void nio_warn(char *warn, size_t warnlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void nio_warn(char *warn, size_t warnlen, const char *fmt, ...)
{
    size_t used = strlen(warn);
    if (used + 1 >= warnlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warn + used, warnlen - used, fmt, ap);
    va_end(ap);
}

static void nio_stream_cfg(jsStreamConfig *c, const fq_nio_stream *s, const char **subj)
{
    jsStreamConfig_Init(c);
    c->Name = s->name;
    subj[0] = s->subject;
    c->Subjects = subj;
    c->SubjectsLen = 1;
    c->Retention = s->retention == FQ_NIO_WORKQUEUE ? js_WorkQueuePolicy : js_LimitsPolicy;
    c->Storage = js_FileStorage;
    c->MaxAge = (int64_t)s->max_age_ms * NIO_NS_PER_MS;
    c->Duplicates = (int64_t)s->duplicates_ms * NIO_NS_PER_MS;
    c->Replicas = s->replicas ? s->replicas : 1;
    c->AllowDirect = s->allow_direct;
    c->MaxMsgsPerSubject = s->max_msgs_per_subject > 0 ? s->max_msgs_per_subject : -1;
    c->MaxBytes = s->max_bytes > 0 ? s->max_bytes : -1;
    /* Without DiscardNewPerSubject a per-subject limit deletes that
     * subject's oldest message whatever Discard says (nats-server 2.9.10:
     * measured); the server refuses the flag without a per-subject limit. */
    c->Discard = s->discard_new ? js_DiscardNew : js_DiscardOld;
    c->DiscardNewPerSubject = s->discard_new && c->MaxMsgsPerSubject > 0;
}

/* What a stream does past its limits, in words. */
static const char *nio_discard_text(const jsStreamConfig *c)
{
    if (c->Discard != js_DiscardNew)
        return "deletes the oldest";
    if (c->MaxMsgsPerSubject > 0 && !c->DiscardNewPerSubject)
        return "refuses new ones, but deletes a subject's oldest past max_msgs_per_subject";
    return "refuses new ones";
}

/* Differences between the stream found and the one wanted, into warn. */
static fq_status nio_stream_compare(const jsStreamConfig *have, const jsStreamConfig *want,
                                    char *warn, size_t warnlen)
{
    bool covers = false;
    for (int i = 0; i < have->SubjectsLen; i++)
        covers |= strcmp(have->Subjects[i], want->Subjects[0]) == 0;
    if (!covers) {
        nio_warn(warn, warnlen, "stream %s does not have the subject %s; ", want->Name,
                 want->Subjects[0]);
        return FQ_EINVAL;
    }
    if (have->Retention != want->Retention)
        nio_warn(warn, warnlen, "retention is %s, expected %s; ",
                 have->Retention == js_WorkQueuePolicy ? "workqueue" : "not workqueue",
                 want->Retention == js_WorkQueuePolicy ? "workqueue" : "limits");
    if (have->Storage != want->Storage)
        nio_warn(warn, warnlen, "storage is not file; ");
    if (want->MaxAge && have->MaxAge != want->MaxAge)
        nio_warn(warn, warnlen, "max_age is %lld ms, expected %lld ms; ",
                 (long long)(have->MaxAge / NIO_NS_PER_MS), (long long)(want->MaxAge / NIO_NS_PER_MS));
    if (want->Duplicates && have->Duplicates != want->Duplicates)
        nio_warn(warn, warnlen, "duplicate window is %lld ms, expected %lld ms; ",
                 (long long)(have->Duplicates / NIO_NS_PER_MS),
                 (long long)(want->Duplicates / NIO_NS_PER_MS));
    if (have->Replicas != want->Replicas)
        nio_warn(warn, warnlen, "replicas %" PRId64 ", expected %" PRId64 "; ",
                 have->Replicas, want->Replicas);
    if (want->AllowDirect && !have->AllowDirect)
        nio_warn(warn, warnlen, "direct gets are off (reads fall back to the stream API); ");
    /* Limits are compared, never changed here: tightening one on a stream
     * that holds more makes the server delete what is over it. */
    int64_t hp = have->MaxMsgsPerSubject > 0 ? have->MaxMsgsPerSubject : -1;
    int64_t hb = have->MaxBytes > 0 ? have->MaxBytes : -1;
    if (hp != want->MaxMsgsPerSubject)
        nio_warn(warn, warnlen, "max_msgs_per_subject is %" PRId64 ", expected %" PRId64
                 " (-1: none); ", hp, want->MaxMsgsPerSubject);
    if (hb != want->MaxBytes)
        nio_warn(warn, warnlen, "max_bytes is %" PRId64 ", expected %" PRId64 " (-1: none); ",
                 hb, want->MaxBytes);
    if (strcmp(nio_discard_text(have), nio_discard_text(want)) != 0)
        nio_warn(warn, warnlen, "past its limits it %s, expected: %s; ", nio_discard_text(have),
                 nio_discard_text(want));
    return FQ_OK;
}

/* A JetStream error that a cluster gives while it is not ready, rather than
 * a refusal of what was asked: too few peers known or online to place the
 * replicas (a node down, or one the meta leader has not heard from yet
 * just after the cluster formed), or JetStream busy electing. */
static bool nio_cluster_not_ready(jsErrCode jerr)
{
    return jerr == JSClusterNoPeersErr || jerr == JSClusterNotAvailErr;
}

fq_status fq_nio_stream_ensure(fq_nio *n, const fq_nio_stream *s, char *warn, size_t warnlen)
{
    if (warn && warnlen)
        warn[0] = '\0';
    const char *subj[1];
    jsStreamConfig want;
    nio_stream_cfg(&want, s, subj);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_GetStreamInfo(&si, n->js, s->name, NULL, &jerr);
    if (st == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) {
        jerr = 0;
        st = js_AddStream(&si, n->js, &want, NULL, &jerr);
        jsStreamInfo_Destroy(si);
        if (st != NATS_OK) {
            nio_errtext(warn, warnlen, s->name, st);
            return jerr && !nio_cluster_not_ready(jerr) ? FQ_EINVAL : FQ_EIO;
        }
        return FQ_OK;
    }
    if (st != NATS_OK) {
        nio_errtext(warn, warnlen, s->name, st);
        return FQ_EIO;
    }
    fq_status r = nio_stream_compare(si->Config, &want, warn, warnlen);
    jsStreamInfo_Destroy(si);
    return r;
}

fq_status fq_nio_stream_created(int64_t *out, fq_nio *n, const char *stream)
{
    jsStreamInfo *si = NULL;
    natsStatus st = js_GetStreamInfo(&si, n->js, stream, NULL, NULL);
    if (st != NATS_OK) {
        return st == NATS_NOT_FOUND ? FQ_ENOTFOUND : FQ_EIO;
    }
    *out = si->Created / NIO_NS_PER_MS;
    jsStreamInfo_Destroy(si);
    return FQ_OK;
}

/* ---- pull consumers ------------------------------------------------------ */

/* The delivery facts in a JetStream reply subject, v1
 * ($JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>) or v2
 * ($JS.ACK.<domain>.<hash>.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>.<rand>). */
static bool nio_parse_reply(const char *r, fq_nio_ackref *a, int64_t *ts_ms, const char **key,
                            size_t *key_len)
{
    if (!r || strncmp(r, "$JS.ACK.", 8) != 0)
        return false;
    const char *tok[12];
    int k = 0;
    tok[k++] = r;
    for (const char *p = r; *p && k < 12; p++)
        if (*p == '.')
            tok[k++] = p + 1;
    int base = k == 9 ? 4 : (k >= 11 ? 6 : -1);
    if (base < 0)
        return false;
    uint64_t dc, sseq, cseq, ts;
    if (!nio_num(tok[base], NULL, UINT64_MAX, &dc) ||
        !nio_num(tok[base + 1], NULL, UINT64_MAX, &sseq) ||
        !nio_num(tok[base + 2], NULL, UINT64_MAX, &cseq) ||
        !nio_num(tok[base + 3], NULL, UINT64_MAX, &ts))
        return false;
    a->sseq = sseq;
    a->cseq = cseq;
    a->delivered = (uint32_t)dc;
    *ts_ms = (int64_t)(ts / (uint64_t)NIO_NS_PER_MS);
    /* "<stream>.<consumer>", which names the consumer it came from */
    *key = tok[base - 2];
    *key_len = (size_t)(tok[base] - tok[base - 2] - 1);
    return true;
}

static void nio_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Whether the fence has passed: consumers are then left alone. */
static bool nio_fenced(fq_nio *n)
{
    return fq_nio_mono_ms() >= atomic_load(&n->fence_until);
}

/* When consumer id's fence passes: its own or the process's, the earlier. */
static uint64_t nio_cons_until(fq_nio *n, int id)
{
    uint64_t a = atomic_load(&n->fence_until), b = atomic_load(&n->cons[id].fence_until);
    return a < b ? a : b;
}

/* Whether consumer id's fence has passed at now: it is then left alone (no
 * pull, no make or delete, no ack or nak), whatever the others'. */
static bool nio_cons_fenced(fq_nio *n, int id, uint64_t now)
{
    return now >= nio_cons_until(n, id);
}

/* The name of a consumer of durable in term: durable-term, or durable
 * alone for term 0. */
static void nio_consumer_name(char *out, size_t cap, const char *durable, uint64_t term)
{
    if (term)
        snprintf(out, cap, "%s-%" PRIu64, durable, term);
    else
        snprintf(out, cap, "%s", durable);
}

static bool nio_not_found(natsStatus s, jsErrCode jerr)
{
    return s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr;
}

/* The work queue refused c, config cc, as overlapping another consumer
 * while the stream lists none of durable's other terms. On nats-server
 * 2.9.10 a node killed and restarted can keep a copy of a consumer
 * deleted after its restart, which no API lists and a delete by name no
 * longer reaches (not found), and refuse every consumer on its filter for
 * good (docs/operations.md); measured on a 3-node loopback cluster, it
 * was still refused after 40 s of tries under new names, of stream info
 * calls, or after the stream's leader stepped down. Made again under its
 * own name, the node takes that copy for it (the server's update of an
 * existing consumer, before any check of filters); deleted then, it is
 * gone from every node, and c is made at once. The names tried are those
 * of durable's earlier terms deleted last, by c or by the owners before
 * it (the copy was of one of them in every case reproduced; lib/pullplan.h,
 * fq_pull_gone), latest first. *term: the term whose copy was cleared, 0
 * when none was. Fetch thread only. */
static void nio_adopt_stale(fq_nio *n, nio_consumer *c, const jsConsumerConfig *cc,
                            uint64_t *term)
{
    *term = 0;
    uint64_t t;
    /* only durable's earlier terms: never another's consumer, nor the
     * durable this id served before */
    for (int i = 0; (i = fq_pull_gone_next(&c->gone, i, c->made.durable, c->made.term, &t)) >= 0;
         i++) {
        jsConsumerConfig old = *cc;
        old.Durable = c->gone.name[i];
        jsConsumerInfo *ci = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_AddConsumer(&ci, n->js, c->made.stream, &old, NULL, &jerr);
        jsConsumerInfo_Destroy(ci);
        if (s != NATS_OK)
            continue;   /* not that one's copy: refused the same */
        s = js_DeleteConsumer(n->js, c->made.stream, c->gone.name[i], NULL, &jerr);
        if (s == NATS_OK || nio_not_found(s, jerr)) {
            *term = t;
            return;
        }
    }
}

/* The config c is made with, as nats.c takes it (its strings c's). */
static void nio_consumer_config(jsConsumerConfig *cc, nio_consumer *c)
{
    jsConsumerConfig_Init(cc);
    cc->Durable = c->name;
    cc->AckPolicy = js_AckExplicit;
    cc->AckWait = c->made.ack_wait_ms * NIO_NS_PER_MS;
    cc->MaxAckPending = c->made.max_ack_pending;
    cc->MaxDeliver = -1;
    cc->DeliverPolicy = js_DeliverAll;
    cc->FilterSubject = c->made.filter[0] ? c->made.filter : NULL;
}

/* Send consumer id's API request on subject (body, len), its answer to
 * come to the fetch subscription on <inbox>.<id>.<request number> (a
 * create's, req its create_req) or <inbox>.api.<id>.<request number> (a
 * listing's or a delete's, req its api_req): num,
 * to send a request again whose answer may come yet, or 0 for a new
 * number, in *req; *end: when it is taken as unanswered (the API's wait).
 * Fetch thread only. */
static natsStatus nio_api_request(fq_nio *n, int id, const char *subject, const char *body,
                                  int len, uint64_t num, uint64_t *req, uint64_t *end)
{
    char reply[sizeof n->fetch.inbox + 48];
    uint64_t k = num ? num : ++n->fetch_requests;
    snprintf(reply, sizeof reply, "%s.%s%d.%" PRIu64, n->fetch.inbox,
             req == &n->cons[id].api_req ? NIO_API_TOKEN : "", id, k);
    natsStatus s = natsConnection_PublishRequest(n->nc, subject, reply, body, len);
    if (s == NATS_OK) {
        *req = k;
        *end = fq_nio_mono_ms() + (uint64_t)(n->o.api_wait_ms > 0 ? n->o.api_wait_ms : 5000);
    }
    return s;
}

/* Send consumer id's create as made (nio_consumer_config's, written by
 * hand: fq_nio_consume refused names and a filter that would need
 * escaping), its description the names of its durable's earlier terms
 * deleted (fq_pull_gone: read by whoever deletes it), its answer to come
 * to the fetch subscription on <inbox>.<id>.<request number>
 * (nio_create_answer): num, to send a create
 * again whose answer may come yet, or 0 for a new number. Fetch thread
 * only. */
static natsStatus nio_create_send(fq_nio *n, int id, uint64_t num)
{
    nio_consumer *c = &n->cons[id];
    char subject[NIO_SUBJECT_CAP], body[3 * NIO_SUBJECT_CAP + sizeof c->gone.name];
    char gone[sizeof c->gone.name];
    fq_pull_gone_describe(gone, sizeof gone, &c->gone, c->made.durable, c->made.term);
    int k1 = snprintf(subject, sizeof subject, "$JS.API.CONSUMER.DURABLE.CREATE.%s.%s",
                      c->made.stream, c->name);
    int k2 = snprintf(body, sizeof body,
                      "{\"stream_name\":\"%s\",\"config\":{\"durable_name\":\"%s\","
                      "\"description\":\"%s\","
                      "\"deliver_policy\":\"all\",\"ack_policy\":\"explicit\","
                      "\"ack_wait\":%" PRId64 ",\"max_deliver\":-1,\"replay_policy\":\"instant\","
                      "\"max_ack_pending\":%" PRId64 "%s%s%s}}",
                      c->made.stream, c->name, gone,
                      (int64_t)(c->made.ack_wait_ms * NIO_NS_PER_MS),
                      c->made.max_ack_pending, c->made.filter[0] ? ",\"filter_subject\":\"" : "",
                      c->made.filter, c->made.filter[0] ? "\"" : "");
    if (k1 < 0 || (size_t)k1 >= sizeof subject || k2 < 0 || (size_t)k2 >= sizeof body)
        return NATS_INVALID_ARG;
    return nio_api_request(n, id, subject, body, k2, num, &c->create_req, &c->create_end);
}

/* Send consumer id's listing or delete (kind) on subject (body, len), its
 * answer to come to nio_api_answer, like its create's to
 * nio_create_answer: the fetch thread waits for none of them, so a
 * listing or a delete that a loaded cluster answers late, or not at all,
 * costs the other consumers' pulls nothing (waited for, a delete that a
 * 3-node loopback cluster under load left unanswered for the API's 5 s
 * stopped every other partition's pulls of the replica handing one over,
 * measured). Fetch thread only. */
static natsStatus nio_api_send(fq_nio *n, int id, enum nio_api kind, const char *subject,
                               const char *body, int len)
{
    nio_consumer *c = &n->cons[id];
    natsStatus s = nio_api_request(n, id, subject, body, len, 0, &c->api_req, &c->api_end);
    if (s == NATS_OK)
        c->api = kind;
    return s;
}

/* Ask for the page of c's stream's consumer names from offset on. */
static natsStatus nio_list_send(fq_nio *n, int id, uint64_t offset)
{
    nio_consumer *c = &n->cons[id];
    char subject[NIO_SUBJECT_CAP], body[48];
    int k = snprintf(subject, sizeof subject, "$JS.API.CONSUMER.NAMES.%s", c->made.stream);
    int b = snprintf(body, sizeof body, "{\"offset\":%" PRIu64 "}", offset);
    if (k < 0 || (size_t)k >= sizeof subject)
        return NATS_INVALID_ARG;
    return nio_api_send(n, id, NIO_API_LIST, subject, body, b);
}

/* Send $JS.API.CONSUMER.<verb> for consumer name of c's stream (kind
 * says why), its name kept for the answer. */
static natsStatus nio_name_send(fq_nio *n, int id, enum nio_api kind, const char *verb,
                                const char *name)
{
    nio_consumer *c = &n->cons[id];
    char subject[NIO_SUBJECT_CAP];
    int k = snprintf(subject, sizeof subject, "$JS.API.CONSUMER.%s.%s.%s", verb, c->made.stream,
                     name);
    if (k < 0 || (size_t)k >= sizeof subject)
        return NATS_INVALID_ARG;
    snprintf(c->api_name, sizeof c->api_name, "%s", name);
    return nio_api_send(n, id, kind, subject, NULL, 0);
}

/* Delete consumer name of c's stream (kind says why). */
static natsStatus nio_del_send(fq_nio *n, int id, enum nio_api kind, const char *name)
{
    nio_consumer *c = &n->cons[id];
    natsStatus s = nio_name_send(n, id, kind, "DELETE", name);
    if (s == NATS_OK)
        fq_pull_gone_note(&c->gone, c->made.durable, name);    /* answered or not */
    return s;
}

/* Ask for consumer name's info (of c's stream), for the names its
 * description carries (fq_pull_gone), before it is deleted: waited for
 * NIO_INFO_WAIT_MS at most (a consumer whose group has no leader, as
 * after a node's kill, may not answer), then deleted anyway. */
static natsStatus nio_info_send(fq_nio *n, int id, const char *name)
{
    nio_consumer *c = &n->cons[id];
    natsStatus s = nio_name_send(n, id, NIO_API_INFO, "INFO", name);
    uint64_t end = fq_nio_mono_ms() + NIO_INFO_WAIT_MS;
    if (s == NATS_OK && c->api_end > end)
        c->api_end = end;
    return s;
}

/* Start making c (as made) again for version of its want in connection
 * generation gen: named for the term the owner set, the stream's
 * consumers of earlier terms deleted first (a work-queue stream admits one
 * consumer per subject, and deleting the old term's returns what it had
 * delivered and not seen acked, and makes the server refuse its holder's
 * pulls and acks; a later term's is never deleted, api_newer set: a holder
 * that went stale while it was making its consumers, frozen or answered
 * after a partition, would otherwise delete the live owner's, which then
 * pulls from nothing), then its own name's, so that everything it had
 * delivered and not seen acked is delivered again now, then its create.
 * Each step is sent when the one before is answered (nio_api_answer): a
 * listing, an earlier term's info and delete (or two), its own name's
 * delete, then the create, whose answer on a 3-node
 * cluster waits for its consumer's group to elect a leader, 0.13 to
 * 0.8 s; 32 creates made one after the other took 15 s, sent together
 * 0.8 s (measured, nats-server 2.9.10). Fetch thread only. */
static natsStatus nio_make_start(fq_nio *n, int id, uint64_t version, uint64_t gen)
{
    nio_consumer *c = &n->cons[id];
    uint64_t term = c->made.term;
    char name[sizeof c->name], key[sizeof c->key], next[sizeof c->next];
    nio_consumer_name(name, sizeof name, c->made.durable, term);
    int k1 = snprintf(key, sizeof key, "%s.%s", c->made.stream, name);
    int k2 = snprintf(next, sizeof next, "$JS.API.CONSUMER.MSG.NEXT.%s.%s", c->made.stream, name);
    if (k1 < 0 || (size_t)k1 >= sizeof key || k2 < 0 || (size_t)k2 >= sizeof next)
        return NATS_INVALID_ARG;    /* fq_nio_consume checked the lengths */
    memcpy(c->name, name, sizeof name);
    memcpy(c->key, key, sizeof key);
    memcpy(c->next, next, sizeof next);
    c->api_version = version;
    c->api_gen = gen;
    c->api_from = 0;
    c->api_newer = false;
    c->create_stale = 0;
    return term ? nio_list_send(n, id, 0) : nio_del_send(n, id, NIO_API_DEL_OWN, c->name);
}

/* A page of c's stream's consumer names (d, len: the answer's JSON) while
 * c is made: the next step sent. The earliest of durable's earlier terms
 * listed from api_from on is read (its info: the names its description
 * carries, nio_info_send) and deleted (then the stream is listed again
 * from its start if another was listed, or the page was not the last);
 * with none, the next page is asked for, or, past the last, c's own
 * name's consumer is deleted. api_from only grows, so a name listed again
 * after its delete (answered "not found") is not deleted twice. Names that
 * JSON escapes are never ours (fq_nio_consume refuses them) and are
 * skipped. NATS_ERR: the answer is not a listing. */
static natsStatus nio_list_take(fq_nio *n, int id, const char *d, size_t len)
{
    nio_consumer *c = &n->cons[id];
    const char *end = d + len, *p = nio_find(d, len, "\"total\":"), *v;
    uint64_t total = 0, offset = 0, count = 0, pick = 0;
    bool found = false, more = false;
    char pick_name[NIO_NAME_CAP];
    if (!p || !nio_num(p, end, UINT64_MAX, &total))
        return NATS_ERR;
    if ((v = nio_find(d, len, "\"offset\":")))
        nio_num(v, end, UINT64_MAX, &offset);
    p = nio_find(d, len, "\"consumers\":");
    p = p && p < end && *p == '[' ? p + 1 : NULL;   /* null: none */
    while (p && p < end) {
        while (p < end && (*p == ' ' || *p == ',' || *p == '\n' || *p == '\r' || *p == '\t'))
            p++;
        if (p < end && *p == ']')
            break;
        if (p >= end || *p != '"')
            return NATS_ERR;
        const char *name = ++p;
        bool plain = true;
        for (; p < end && *p != '"'; p++)
            if (*p == '\\') {
                plain = false;
                p++;
            }
        if (p >= end)
            return NATS_ERR;
        size_t nl = (size_t)(p++ - name);
        count++;
        char buf[NIO_NAME_CAP];
        uint64_t t;
        if (!plain || nl >= sizeof buf)
            continue;
        memcpy(buf, name, nl);
        buf[nl] = '\0';
        if (!fq_pull_term_name(buf, c->made.durable, &t) || t == c->made.term || t < c->api_from)
            continue;
        if (t > c->made.term) {
            c->api_newer = true;
        } else if (!found || t < pick) {
            more |= found;
            found = true;
            pick = t;
            memcpy(pick_name, buf, nl + 1);
        } else {
            more = true;
        }
    }
    bool last = !count || offset + count >= total;
    if (found) {
        c->api_from = pick + 1;
        c->api_more = more || !last;
        return nio_info_send(n, id, pick_name);
    }
    return last ? nio_del_send(n, id, NIO_API_DEL_OWN, c->name)
                : nio_list_send(n, id, offset + count);
}

/* The outcome of consumer id's listing or delete while it is made (m
 * the server's answer, or NULL: none came in time): the next step is sent
 * (the create last: nio_create_answer takes it from there); failed, its
 * owner hears of it (FQ_NIO_EV_CONSUMER, unless it changed want meanwhile)
 * and the make is tried again from its start after NIO_RECREATE_RETRY_MS.
 * A want changed meanwhile ends the make, whatever the answer, and is
 * brought about at once; the fence passed ends it too, made again from its
 * start once the fence is lifted (fq_pull_step_decide).
 * Fetch thread only. */
static void nio_api_answer(fq_nio *n, int id, natsMsg *m, uint64_t now)
{
    nio_consumer *c = &n->cons[id];
    const char *d = m ? natsMsg_GetData(m) : NULL, *v;
    size_t len = m ? (size_t)natsMsg_GetDataLength(m) : 0;
    enum nio_api kind = c->api;
    uint64_t code = 0;
    /* {"type":"io.nats.jetstream.api.v1.consumer_delete_response",...}
     * (or _names_), or the same with "error":{...,"err_code":N,...}; no
     * data: a status (no responders: no JetStream) */
    bool ok = len &&
              nio_find(d, len, kind == NIO_API_LIST   ? "consumer_names_response"
                               : kind == NIO_API_INFO ? "consumer_info_response"
                                                      : "consumer_delete_response") &&
              !nio_find(d, len, "\"error\":");
    if (!ok && len && (v = nio_find(d, len, "\"err_code\":")))
        nio_num(v, d + len, 99999, &code);
    bool gone = ok || code == JSConsumerNotFoundErr;
    c->api = NIO_API_NONE;
    c->api_req = 0;
    pthread_mutex_lock(&n->mu);
    fq_pull_step st = {.wanted = c->version == c->api_version,
                       .fenced = nio_cons_fenced(n, id, now)};
    bool wanted = st.wanted;
    pthread_mutex_unlock(&n->mu);
    if (fq_pull_step_decide(&st) != FQ_PULL_STEP_ON) {
        /* its owner changed what it wants since the make began (stopped
         * it, a partition let go, or named it for a new term): no step
         * more, so no consumer of a want no longer asked is made (a term
         * left is the next owner's to make); the new want is brought
         * about at once (as a create's: fq_pull_create_next). Past the
         * fence (in the turn that straddles it) no step more either: the
         * fetch thread's turns wait for the fence to lift, and the make
         * starts again from its listing then. */
        c->retry_at = 0;
        return;
    }
    natsStatus s = NATS_ERR;
    if (kind == NIO_API_LIST && ok) {
        s = nio_list_take(n, id, d, len);
    } else if (kind == NIO_API_INFO) {
        /* the names its description carries (if it answered, and said
         * any), then its delete, whatever the answer: a consumer not
         * deleted would refuse ours */
        char name[sizeof c->api_name];
        memcpy(name, c->api_name, sizeof name);
        const char *q = ok ? nio_find(d, len, "\"description\":\"") : NULL, *e = q;
        while (e && e < d + len && *e != '"')
            e++;
        if (q && e < d + len)
            fq_pull_gone_take(&c->gone, c->made.durable, c->made.term, q, (size_t)(e - q));
        s = nio_del_send(n, id, NIO_API_DEL_OTHER, name);
    } else if (kind == NIO_API_DEL_OTHER && gone)
        s = c->api_more ? nio_list_send(n, id, 0) : nio_del_send(n, id, NIO_API_DEL_OWN, c->name);
    else if (kind == NIO_API_DEL_OWN && gone) {
        c->create_version = c->api_version;
        c->create_gen = c->api_gen;
        c->create_newer = c->api_newer;
        s = nio_create_send(n, id, 0);
    }
    if (s == NATS_OK)
        return;
    /* a want changed meanwhile is brought about at once, not after the
     * retry's delay (as a create's: fq_pull_create_next) */
    fq_nio_event ev = {.type = FQ_NIO_EV_CONSUMER, .source = id, .seq = c->made.term,
                       .status = c->api_newer ? FQ_EEXIST : FQ_EIO, .err_code = (int)code};
    c->retry_at = wanted ? now + NIO_RECREATE_RETRY_MS : 0;
    pthread_mutex_lock(&n->mu);
    wanted = c->version == c->api_version;
    if (wanted)
        nio_push_locked(n, &ev);
    pthread_mutex_unlock(&n->mu);
    if (wanted)
        pthread_cond_signal(&n->cv);
}

/* A JetStream delivery carries its ack subject as reply; the server's
 * status messages (end of request, heartbeat) carry none. */
static bool nio_is_delivery(natsMsg *m)
{
    const char *r = natsMsg_GetReply(m);
    return r && strncmp(r, "$JS.ACK.", 8) == 0;
}

fq_status fq_nio_pull_open(fq_nio_pull *p, void *nc, const char *inbox, const char *api_prefix,
                           const char *stream, const char *consumer, int *nats_status)
{
    char wildcard[sizeof p->inbox + 2];
    natsSubscription *sub = NULL;

    memset(p, 0, sizeof *p);
    int k = snprintf(p->next, sizeof p->next, "%s.CONSUMER.MSG.NEXT.%s.%s",
                     api_prefix ? api_prefix : "$JS.API", stream, consumer);
    if (k < 0 || (size_t)k >= sizeof p->next || strlen(inbox) >= sizeof p->inbox)
        return FQ_EINVAL;
    memcpy(p->inbox, inbox, strlen(inbox) + 1);
    snprintf(wildcard, sizeof wildcard, "%s.*", p->inbox);
    natsStatus s = natsConnection_SubscribeSync(&sub, nc, wildcard);
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(sub, -1, -1);
    if (s != NATS_OK) {
        natsSubscription_Destroy(sub);
        if (nats_status)
            *nats_status = s;
        return FQ_EIO;
    }
    p->nc = nc;
    p->sub = sub;
    return FQ_OK;
}

void fq_nio_pull_close(fq_nio_pull *p)
{
    if (p->sub) {
        natsSubscription_Unsubscribe(p->sub);
        natsSubscription_Destroy(p->sub);
    }
    p->sub = NULL;
}

int fq_nio_pull_queued(fq_nio_pull *p, void **out, int max)
{
    int queued = 0, count = 0;
    natsSubscription_GetPending(p->sub, &queued, NULL);
    while (count < max && queued-- > 0) {
        natsMsg *m = NULL;
        if (natsSubscription_NextMsg(&m, p->sub, 1) != NATS_OK)
            break;
        if (nio_is_delivery(m))
            out[count++] = m;
        else
            natsMsg_Destroy(m);
    }
    return count;
}

fq_status fq_nio_pull_request(fq_nio_pull *p, void **out, int want, bool no_wait,
                              int64_t timeout_ms, int *count, int *nats_status)
{
    char reply[sizeof p->inbox + 24], req[96];
    snprintf(reply, sizeof reply, "%s.%" PRIu64, p->inbox, ++p->request);
    snprintf(req, sizeof req, "{\"batch\":%d,\"expires\":%" PRId64 "%s}", want - *count,
             (int64_t)(timeout_ms * NIO_NS_PER_MS), no_wait ? ",\"no_wait\":true" : "");
    natsStatus s = natsConnection_PublishRequestString(p->nc, p->next, reply, req);
    /* The server ends the request at its expiry; waiting a little longer
     * sees that end rather than leaving its runs for the next pull. */
    int64_t deadline = fq_nio_mono_ms() + timeout_ms + 100;
    while (s == NATS_OK && *count < want) {
        int64_t left = deadline - fq_nio_mono_ms();
        natsMsg *m = NULL;
        if (left <= 0)
            break;
        s = natsSubscription_NextMsg(&m, p->sub, left);
        if (s == NATS_TIMEOUT) {
            s = NATS_OK;
            break;
        }
        if (s != NATS_OK)
            break;
        if (nio_is_delivery(m)) {
            out[(*count)++] = m;
            continue;
        }
        /* A status: this request's end (404, 408) or refusal (409) stops
         * it; heartbeats and earlier requests' ends do not. */
        const char *status = NULL;
        bool ours = strcmp(natsMsg_GetSubject(m), reply) == 0;
        natsMsgHeader_Get(m, "Status", &status);
        bool refused = ours && status && strncmp(status, "409", 3) == 0;
        bool ended = ours && status && strncmp(status, "100", 3) != 0;
        natsMsg_Destroy(m);
        if (refused)
            s = NATS_ERR;
        else if (ended)
            break;
    }
    if (*count || s == NATS_OK)
        return FQ_OK;
    if (nats_status)
        *nats_status = s;
    return FQ_EIO;
}

/* ---- the fetch thread ------------------------------------------------------ */

/* FNV-1a of a consumer's key, for the lookup table. */
static uint32_t nio_key_hash(const char *k, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)k[i]) * 16777619u;
    return h;
}

/* The table of live consumers by key, rebuilt whenever one is made or
 * stopped (rarely), so that a delivery finds its consumer in one probe or
 * two whatever their number. Fetch thread only. */
static void nio_tab_rebuild(fq_nio *n, int used)
{
    nio_fetch *f = &n->fetch;
    memset(f->tab, 0, sizeof f->tab);
    for (int i = 0; i < used; i++) {
        if (!n->cons[i].live)
            continue;
        uint32_t h = nio_key_hash(n->cons[i].key, strlen(n->cons[i].key)) & (NIO_TAB - 1);
        while (f->tab[h])
            h = (h + 1) & (NIO_TAB - 1);
        f->tab[h] = (int16_t)(i + 1);
    }
}

/* The live consumer whose key is key[0..len), or -1. */
static int nio_tab_find(const fq_nio *n, const char *key, size_t len)
{
    const nio_fetch *f = &n->fetch;
    for (uint32_t h = nio_key_hash(key, len) & (NIO_TAB - 1); f->tab[h];
         h = (h + 1) & (NIO_TAB - 1)) {
        const char *k = n->cons[f->tab[h] - 1].key;
        if (strncmp(k, key, len) == 0 && !k[len])
            return f->tab[h] - 1;
    }
    return -1;
}

/* Whether c, its want at version and on, differs from what the fetch thread
 * made last: the owner changed it (stopped it, named it for a new term,
 * started it), or it was made before the latest reconnect. Fetch thread
 * (version and on read under mu). */
static bool nio_due(const nio_consumer *c, uint64_t version, bool on, uint64_t gen)
{
    return version != c->made_version || (on && c->made_gen != gen);
}

/* Whether c is made as its owner wants it now: only then is it pulled and
 * are its deliveries handed over. A consumer due (nio_due) is live still
 * from what was made before, under the same id, until the fetch thread
 * gets to it: pulled meanwhile, a stopped one would take runs its owner
 * let go (kept on the server unread until their ack wait), and one named
 * for a new term would bring the old term's deliveries as the new one's.
 * Fetch thread, under mu. */
static bool nio_pullable_locked(const nio_consumer *c, uint64_t gen)
{
    return c->live && !nio_due(c, c->version, c->want.on, gen);
}

/* Whether consumer a, due, is brought to its owner's want before b: one
 * not failed yet before one tried again (its tries may each wait the API's
 * timeout, and it must not keep the others from being made), those by
 * when their owner asked, these by when they failed. Under mu. */
static bool nio_reconcile_before(const nio_consumer *a, const nio_consumer *b)
{
    if ((a->retry_at != 0) != (b->retry_at != 0))
        return !a->retry_at;
    if (a->retry_at != b->retry_at)
        return a->retry_at < b->retry_at;
    return a->asked < b->asked;
}

/* The consumer to bring to what its owner wants next, or -1: of those due,
 * not waiting to retry and without a request in flight (changed meanwhile,
 * it is brought to its new want once that is answered), the one whose
 * owner asked first, so that what an owner asks for together (a
 * partition's two consumers) is made together, but one that failed only
 * after those not tried yet, and in turn with the others that failed
 * (nio_reconcile_before). *more: another is due too. Fetch thread. */
static int nio_reconcile_next(fq_nio *n, int used, uint64_t gen, uint64_t now, bool *more)
{
    int next = -1, due = 0;
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < used; i++) {
        const nio_consumer *c = &n->cons[i];
        if (!nio_due(c, c->version, c->want.on, gen) || now < c->retry_at || c->create_req ||
            c->api_req || nio_cons_fenced(n, i, now))
            continue;
        due++;
        if (next < 0 || nio_reconcile_before(c, &n->cons[next]))
            next = i;
    }
    pthread_mutex_unlock(&n->mu);
    *more = due > 1;
    return next;
}

/* Bring consumer c to what its owner wants: make it (again after each
 * reconnect, and under a new term's name), or stop it and delete it on the
 * server. For one consumer a turn of the fetch thread, which waits for no
 * answer: the first request is only sent, and each answer sends the next
 * (nio_api_answer, nio_create_answer), while every other consumer is
 * pulled. True when c's liveness changed. Fetch thread only. */
static bool nio_reconcile_one(fq_nio *n, int id, uint64_t gen, uint64_t now)
{
    nio_consumer *c = &n->cons[id];
    pthread_mutex_lock(&n->mu);
    uint64_t version = c->version;
    nio_cwant w = c->want;
    pthread_mutex_unlock(&n->mu);
    if (!nio_due(c, version, w.on, gen) || now < c->retry_at)
        return false;
    bool was = c->live;
    c->live = false;
    fq_pull_reset(&n->fetch.plan[id]);
    if (!w.on) {
        /* Stopped: the consumer made last is left on the server, for
         * whoever consumes the subjects next to delete (fq_nio_consume_stop). */
        c->made = w;
        c->name[0] = '\0';
        c->made_version = version;
        c->retry_at = 0;
        return was;
    }
    c->made = w;
    if (nio_make_start(n, id, version, gen) == NATS_OK)
        return was;     /* live once its create is answered (nio_create_answer) */
    fq_nio_event ev = {.type = FQ_NIO_EV_CONSUMER, .source = id, .seq = w.term,
                       .status = FQ_EIO};
    c->retry_at = now + NIO_RECREATE_RETRY_MS;
    nio_push(n, &ev);
    return was;
}

/* The outcome of consumer id's create request (m the server's answer, or
 * NULL: none came in time), as fq_pull_create_next decides: made, it is
 * live and pulled from now on, as made for the version of want the
 * request was sent for (a change of want meanwhile makes it due again,
 * and unpulled); unanswered, sent again as it was (past the fence, held
 * until it is lifted); refused as overlapping another consumer while no
 * later term's was listed, a node's stale copy of one of ours is cleared
 * first (nio_adopt_stale) and the create sent once more; failed, made
 * afresh later. The owner hears of it
 * (FQ_NIO_EV_CONSUMER) unless it changed want meanwhile. Fetch thread
 * only. */
static void nio_create_answer(fq_nio *n, int id, natsMsg *m, uint64_t now)
{
    nio_consumer *c = &n->cons[id];
    const char *d = m ? natsMsg_GetData(m) : NULL, *v;
    size_t len = m ? (size_t)natsMsg_GetDataLength(m) : 0;
    uint64_t code = 0;
    /* {"type":"io.nats.jetstream.api.v1.consumer_create_response",...}, or
     * the same with "error":{"code":..,"err_code":N,...}; no data: a status
     * (no responders: no JetStream) */
    bool ok = len && nio_find(d, len, "consumer_create_response") && !nio_find(d, len, "\"error\":");
    if (!ok && len && (v = nio_find(d, len, "\"err_code\":")))
        nio_num(v, d + len, 99999, &code);
    pthread_mutex_lock(&n->mu);
    fq_pull_create cr = {.answered = m != NULL, .ok = ok, .err_code = (int)code,
                         .newer = c->create_newer, .unstaled = c->create_stale != 0,
                         .wanted = c->version == c->create_version,
                         .fenced = nio_cons_fenced(n, id, now)};
    pthread_mutex_unlock(&n->mu);
    uint64_t num = c->create_req, retry_at = 0;
    c->create_req = 0;
    fq_pull_create_step step = fq_pull_create_next(&retry_at, &cr, now, NIO_RECREATE_RETRY_MS);
    if (step == FQ_PULL_CREATE_HELD) {
        /* past the fence: looked at again at the first turn after it */
        c->create_req = num;
        c->create_end = now;
        return;
    }
    if (step == FQ_PULL_CREATE_AGAIN && nio_create_send(n, id, num) != NATS_OK) {
        step = FQ_PULL_CREATE_FAILED;   /* not sent (the connection lost): made afresh */
        retry_at = now + NIO_RECREATE_RETRY_MS;
    }
    if (step == FQ_PULL_CREATE_UNSTALE) {
        /* refused as overlapping: a node's stale copy of one of ours,
         * cleared (waited for, rare), and the create sent once more */
        jsConsumerConfig cc;
        nio_consumer_config(&cc, c);
        nio_adopt_stale(n, c, &cc, &c->create_stale);
        if (c->create_stale && nio_create_send(n, id, 0) == NATS_OK)
            return;
        cr.unstaled = true;
        step = fq_pull_create_next(&retry_at, &cr, now, NIO_RECREATE_RETRY_MS);
    }
    fq_nio_event ev = {.type = FQ_NIO_EV_CONSUMER, .source = id, .seq = c->made.term,
                       .status = ok ? FQ_OK : c->create_newer ? FQ_EEXIST : FQ_EIO,
                       .err_code = (int)code, .token = c->create_stale};
    if (step == FQ_PULL_CREATE_MADE) {
        c->live = true;
        c->made_version = c->create_version;
        c->made_gen = c->create_gen;
        c->retry_at = 0;
        n->fetch.tab_stale = true;
    } else if (step == FQ_PULL_CREATE_FAILED) {
        c->retry_at = retry_at;
    }
    pthread_mutex_lock(&n->mu);
    bool wanted = c->version == c->create_version;
    if (wanted)
        nio_push_locked(n, &ev);
    pthread_mutex_unlock(&n->mu);
    if (wanted)
        pthread_cond_signal(&n->cv);
}

/* Send the pull requests lib/pullplan.h grants now. True when a consumer
 * that may pull was held back (behind, out of budget, or to retry): it is
 * looked at again soon. */
static bool nio_fetch_requests(fq_nio *n, int used, uint64_t gen, uint64_t now)
{
    nio_fetch *f = &n->fetch;
    uint32_t most = 1;
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < used; i++) {
        f->plan[i].queued = (uint32_t)n->cons[i].queued;
        f->plan[i].ready = nio_pullable_locked(&n->cons[i], gen) &&
                           !atomic_load(&n->cons[i].paused) && !nio_cons_fenced(n, i, now);
    }
    pthread_mutex_unlock(&n->mu);
    for (int i = 0; i < used; i++) {
        nio_consumer *c = &n->cons[i];
        f->plan[i].batch = (uint32_t)c->made.batch;
        if (f->plan[i].ready && f->plan[i].batch > most)
            most = f->plan[i].batch;
    }
    size_t k = fq_pull_plan(f->reqs, (size_t)used, f->plan, (size_t)used, &f->cursor,
                            (uint64_t)NIO_BUDGET_BATCHES * most, now);
    for (size_t j = 0; j < k; j++) {
        int id = (int)f->reqs[j].cons;
        nio_consumer *c = &n->cons[id];
        /* A pull asks for nothing past its consumer's fence. */
        uint64_t until = nio_cons_until(n, id);
        int64_t wait = until - now < NIO_PULL_WAIT_MS ? (int64_t)(until - now) : NIO_PULL_WAIT_MS;
        char reply[sizeof f->inbox + 2 * FQ_U64_DEC_MAX + 4], req[96];
        c->request = ++n->fetch_requests;
        snprintf(reply, sizeof reply, "%s.%d.%" PRIu64, f->inbox, id, c->request);
        /* A batch takes what is there now (nats-server 2.9 answers at once,
         * then ends the request); one message waits for the next to come. */
        snprintf(req, sizeof req, "{\"batch\":%" PRIu32 ",\"expires\":%" PRId64 "%s}",
                 f->reqs[j].want, (int64_t)(wait * NIO_NS_PER_MS),
                 f->reqs[j].want > 1 ? ",\"no_wait\":true" : "");
        /* The server ends the request at its expiry; waiting a little
         * longer for that end keeps its runs from a next request's count. */
        c->request_end = now + (uint64_t)wait + 100;
        if (natsConnection_PublishRequestString(n->nc, c->next, reply, req) != NATS_OK)
            fq_pull_failed(&f->plan[id], now + NIO_FETCH_RETRY_MS);
    }
    for (int i = 0; i < used; i++)
        if (f->plan[i].ready && !f->plan[i].open)
            return true;
    return false;
}

/* Take one message read from the subscription: a delivery is kept in
 * f->evs for its live consumer (found by the consumer its ack subject
 * names: a stopped one's, or an earlier term's, is dropped); a status ends
 * or fails the request it answers; an answer to a consumer's create makes
 * it live, or not. */
static void nio_fetch_take(fq_nio *n, natsMsg *m, int *count)
{
    nio_fetch *f = &n->fetch;
    fq_nio_event ev = {.type = FQ_NIO_EV_MSG, .msg = (fq_nio_msg *)m};
    const char *key = NULL;
    size_t key_len = 0;
    if (nio_parse_reply(natsMsg_GetReply(m), &ev.ack, &ev.ts_ms, &key, &key_len)) {
        ev.source = nio_tab_find(n, key, key_len);
        if (ev.source < 0) {
            natsMsg_Destroy(m);
            return;
        }
        fq_pull_cons *pc = &f->plan[ev.source];
        fq_pull_took(pc);
        if (fq_pull_filled(pc))
            fq_pull_ended(pc);
        f->evs[(*count)++] = ev;
        return;
    }
    /* A status comes on <inbox>.<id>.<number>: that request's end (404,
     * 408) or refusal (409; 503, no responders: the consumer has no leader,
     * as when a create sent again was answered before its group elected
     * one) stops it; heartbeats and earlier requests' ends do not. */
    const char *subj = natsMsg_GetSubject(m), *status = NULL;
    uint64_t id = 0, num = 0;
    const char *p = strncmp(subj, f->inbox, f->inbox_len) == 0 && subj[f->inbox_len] == '.'
                        ? subj + f->inbox_len + 1
                        : NULL;
    bool api = p && strncmp(p, NIO_API_TOKEN, sizeof NIO_API_TOKEN - 1) == 0;
    if (api)
        p += sizeof NIO_API_TOKEN - 1;
    if (p)
        p = nio_num(p, NULL, FQ_NIO_MAX_CONSUMERS - 1, &id);
    if (p && *p == '.')
        p = nio_num(p + 1, NULL, UINT64_MAX, &num);
    else
        p = NULL;
    if (p && !*p && num && api && n->cons[id].api_req == num) {
        nio_api_answer(n, (int)id, m, fq_nio_mono_ms());
        natsMsg_Destroy(m);
        return;
    }
    if (p && !*p && num && !api && n->cons[id].create_req == num) {
        nio_create_answer(n, (int)id, m, fq_nio_mono_ms());
        natsMsg_Destroy(m);
        return;
    }
    if (p && !*p && !api && n->cons[id].request == num && f->plan[id].open) {
        natsMsgHeader_Get(m, "Status", &status);
        if (status && (strncmp(status, "409", 3) == 0 || strncmp(status, "503", 3) == 0))
            fq_pull_failed(&f->plan[id], fq_nio_mono_ms() + NIO_FETCH_RETRY_MS);
        else if (status && strncmp(status, "100", 3) != 0)
            fq_pull_ended(&f->plan[id]);
    }
    natsMsg_Destroy(m);
}

/* Read what the server sent, waiting up to wait_ms for the first, and
 * hand the deliveries to the owner in one lock: each only while its
 * consumer is made as its owner wants (nio_pullable_locked: the owner
 * stops one, or names it for a new term, under the same lock). */
static void nio_fetch_read(fq_nio *n, int wait_ms)
{
    nio_fetch *f = &n->fetch;
    natsMsg *m = NULL;
    if (natsSubscription_NextMsg(&m, f->sub, wait_ms) != NATS_OK)
        return;
    int pending = 0, count = 0;
    natsSubscription_GetPending(f->sub, &pending, NULL);
    for (;;) {
        nio_fetch_take(n, m, &count);
        m = NULL;
        if (count == NIO_READ_MAX || pending-- <= 0 ||
            natsSubscription_NextMsg(&m, f->sub, 1) != NATS_OK)
            break;
    }
    if (!count)
        return;
    uint64_t gen = atomic_load(&n->generation);
    pthread_mutex_lock(&n->mu);
    for (int i = 0; i < count; i++) {
        nio_consumer *c = &n->cons[f->evs[i].source];
        if (nio_pullable_locked(c, gen) && nio_push_locked(n, &f->evs[i]))
            c->queued++;
        else
            natsMsg_Destroy((natsMsg *)f->evs[i].msg);  /* stopped meanwhile, or no memory:
                                                           delivered again */
    }
    pthread_mutex_unlock(&n->mu);
    pthread_cond_signal(&n->cv);
}

static void *nio_fetch_main(void *arg)
{
    fq_nio *n = arg;
    nio_fetch *f = &n->fetch;
    while (!atomic_load(&n->stopping)) {
        if (!atomic_load(&n->connected) || nio_fenced(n)) {
            nio_sleep_ms(NIO_IDLE_POLL_MS);
            continue;
        }
        int used = atomic_load(&f->used);
        uint64_t gen = atomic_load(&n->generation), now = fq_nio_mono_ms();
        /* One consumer brought to its owner's want a turn (its first
         * request sent: the listing of its earlier terms, their deletes
         * and its create each follow the answer before, in later turns),
         * and the consumers made pulled in between: a replica that made
         * its 32 one after the other before its next pull (after a
         * reconnect, or a freeze past its lease) fetched nothing for 8 to
         * 14 s on a 3-node cluster. */
        /* A request sent before the latest reconnect (a create, a listing,
         * a delete) is not waited for (its answer, if it comes, went with
         * the connection lost; one made then would be made again anyway):
         * its consumer is due now, like the others, not after the API's
         * wait, and a late answer's number is no longer asked. */
        for (int i = 0; i < used; i++) {
            if (n->cons[i].create_req && n->cons[i].create_gen != gen)
                n->cons[i].create_req = 0;
            if (n->cons[i].api_req && n->cons[i].api_gen != gen) {
                n->cons[i].api_req = 0;
                n->cons[i].api = NIO_API_NONE;
            }
        }
        bool more = false;
        int id = nio_reconcile_next(n, used, gen, now, &more);
        if (id >= 0 && nio_reconcile_one(n, id, gen, now))
            nio_tab_rebuild(n, used);
        bool held = nio_fetch_requests(n, used, gen, fq_nio_mono_ms());
        nio_fetch_read(n, held || more ? NIO_BACKLOG_POLL_MS : NIO_IDLE_POLL_MS);
        /* A request whose end never came (lost in a reconnect) is over; a
         * create not answered in time failed. */
        now = fq_nio_mono_ms();
        for (int i = 0; i < used; i++) {
            if (f->plan[i].open && now >= n->cons[i].request_end)
                fq_pull_ended(&f->plan[i]);
            if (n->cons[i].create_req && now >= n->cons[i].create_end)
                nio_create_answer(n, i, NULL, now);
            if (n->cons[i].api_req && now >= n->cons[i].api_end)
                nio_api_answer(n, i, NULL, now);
        }
        if (f->tab_stale) {
            f->tab_stale = false;
            nio_tab_rebuild(n, used);
        }
    }
    return NULL;
}

/* The fetch thread and its subscription, at the first consumer. Owner. */
static fq_status nio_fetch_start(fq_nio *n)
{
    nio_fetch *f = &n->fetch;
    if (f->started)
        return FQ_OK;
    char wildcard[sizeof f->inbox + 2];
    if (nio_inbox(n, f->inbox, sizeof f->inbox - 2) != NATS_OK)
        return FQ_EIO;
    f->inbox_len = strlen(f->inbox);
    snprintf(wildcard, sizeof wildcard, "%s.>", f->inbox);
    natsStatus s = natsConnection_SubscribeSync(&f->sub, n->nc, wildcard);
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(f->sub, -1, -1);
    if (s != NATS_OK) {
        natsSubscription_Destroy(f->sub);
        f->sub = NULL;
        return FQ_EIO;
    }
    if (pthread_create(&f->thread, NULL, nio_fetch_main, n) != 0)
        return FQ_ENOMEM;
    f->started = true;
    return FQ_OK;
}

/* Copy src into dst (cap bytes): false when it does not fit. */
static bool nio_copy(char *dst, size_t cap, const char *src)
{
    size_t len = src ? strlen(src) : 0;
    if (len >= cap)
        return false;
    memcpy(dst, src ? src : "", len + 1);
    return true;
}

/* Whether s can be written in a JSON string as it is (a consumer's create
 * request is written by hand): no quote, backslash or control byte. */
static bool nio_json_plain(const char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            return false;
    return true;
}

/* Acks' subject prefix for c named for term: false when a name built from
 * w does not fit (the consumer's, its key, its API subject). Owner. */
static bool nio_ack_prefix(nio_consumer *c, const nio_cwant *w, uint64_t term)
{
    char name[NIO_NAME_CAP + FQ_U64_DEC_MAX + 2];
    nio_consumer_name(name, sizeof name, w->durable, term);
    size_t len = strlen(name);
    if (len >= NIO_NAME_CAP || strlen(w->stream) + len + 32 >= NIO_SUBJECT_CAP)
        return false;
    int k = snprintf(c->ack, sizeof c->ack, "$JS.ACK.%s.%s.", w->stream, name);
    if (k < 0 || (size_t)k >= sizeof c->ack)
        return false;
    c->ack_len = (size_t)k;
    return true;
}

fq_status fq_nio_consume(fq_nio *n, int id, const fq_nio_consumer *cfg)
{
    if (id < 0 || id >= FQ_NIO_MAX_CONSUMERS || cfg->batch < 1 || cfg->max_ack_pending < 1)
        return FQ_EINVAL;
    nio_consumer *c = &n->cons[id];
    nio_cwant w = {.on = true, .max_ack_pending = cfg->max_ack_pending,
                   .ack_wait_ms = cfg->ack_wait_ms, .batch = cfg->batch, .term = cfg->term};
    if (!cfg->stream || !cfg->durable || !nio_copy(w.stream, sizeof w.stream, cfg->stream) ||
        !nio_copy(w.durable, sizeof w.durable, cfg->durable) ||
        !nio_copy(w.filter, sizeof w.filter, cfg->filter) || !nio_json_plain(w.stream) ||
        !nio_json_plain(w.durable) || !nio_json_plain(w.filter))
        return FQ_EINVAL;
    pthread_mutex_lock(&n->mu);
    bool on = c->want.on;
    pthread_mutex_unlock(&n->mu);
    if (on || !nio_ack_prefix(c, &w, w.term))
        return FQ_EINVAL;
    fq_status s = nio_fetch_start(n);
    if (s != FQ_OK)
        return s;
    atomic_store(&c->paused, false);
    pthread_mutex_lock(&n->mu);
    c->want = w;
    c->version++;
    c->asked = ++n->asks;
    pthread_mutex_unlock(&n->mu);
    if (atomic_load(&n->fetch.used) <= id)
        atomic_store(&n->fetch.used, id + 1);
    return FQ_OK;
}

fq_status fq_nio_consume_term(fq_nio *n, int id, uint64_t term)
{
    if (id < 0 || id >= FQ_NIO_MAX_CONSUMERS)
        return FQ_EINVAL;
    nio_consumer *c = &n->cons[id];
    pthread_mutex_lock(&n->mu);
    nio_cwant w = c->want;
    pthread_mutex_unlock(&n->mu);
    if (!w.on || !nio_ack_prefix(c, &w, term))
        return FQ_EINVAL;
    pthread_mutex_lock(&n->mu);
    c->want.term = term;
    c->version++;
    c->asked = ++n->asks;
    pthread_mutex_unlock(&n->mu);
    return FQ_OK;
}

fq_status fq_nio_consumer_info_ask(fq_nio *n, int id, const char *reply)
{
    if (id < 0 || id >= FQ_NIO_MAX_CONSUMERS)
        return FQ_EINVAL;
    pthread_mutex_lock(&n->mu);
    nio_cwant w = n->cons[id].want;
    pthread_mutex_unlock(&n->mu);
    if (!w.on)
        return FQ_EINVAL;
    char name[NIO_NAME_CAP + FQ_U64_DEC_MAX + 1], subject[NIO_SUBJECT_CAP];
    nio_consumer_name(name, sizeof name, w.durable, w.term);
    int k = snprintf(subject, sizeof subject, "$JS.API.CONSUMER.INFO.%s.%s", w.stream, name);
    if (k < 0 || (size_t)k >= sizeof subject)
        return FQ_EINVAL;
    natsStatus s = natsConnection_PublishRequest(n->nc, subject, reply, NULL, 0);
    return s == NATS_OK ? FQ_OK : FQ_EIO;
}

fq_status fq_nio_stream_info_ask(fq_nio *n, const char *stream, const char *reply)
{
    char subject[NIO_SUBJECT_CAP];
    int k = snprintf(subject, sizeof subject, "$JS.API.STREAM.INFO.%s", stream);
    if (k < 0 || (size_t)k >= sizeof subject)
        return FQ_EINVAL;
    natsStatus s = natsConnection_PublishRequest(n->nc, subject, reply, NULL, 0);
    return s == NATS_OK ? FQ_OK : FQ_EIO;
}

fq_status fq_nio_first_stored_ask(fq_nio *n, const char *stream, const char *filter,
                                  const char *reply)
{
    char subject[NIO_SUBJECT_CAP], body[NIO_SUBJECT_CAP + 48];
    int k = snprintf(subject, sizeof subject, "$JS.API.STREAM.MSG.GET.%s", stream);
    int b = snprintf(body, sizeof body, "{\"seq\":1,\"next_by_subj\":\"%s\"}", filter);
    if (k < 0 || (size_t)k >= sizeof subject || b < 0 || (size_t)b >= sizeof body)
        return FQ_EINVAL;
    natsStatus s = natsConnection_PublishRequest(n->nc, subject, reply, body, b);
    return s == NATS_OK ? FQ_OK : FQ_EIO;
}

/* Drop the MSG events of consumer id still queued. Under mu. */
static void nio_purge_locked(fq_nio *n, int id)
{
    size_t kept = 0;
    for (size_t i = 0; i < n->q_len; i++) {
        fq_nio_event ev = n->q[(n->q_head + i) % n->q_cap];
        if (ev.type == FQ_NIO_EV_MSG && ev.source == id)
            natsMsg_Destroy((natsMsg *)ev.msg);
        else
            n->q[(n->q_head + kept++) % n->q_cap] = ev;
    }
    n->q_len = kept;
    n->cons[id].queued = 0;
}

fq_status fq_nio_consume_stop(fq_nio *n, int id)
{
    if (id < 0 || id >= FQ_NIO_MAX_CONSUMERS)
        return FQ_EINVAL;
    nio_consumer *c = &n->cons[id];
    pthread_mutex_lock(&n->mu);
    bool on = c->want.on;
    if (on) {
        c->want.on = false;
        c->version++;
        c->asked = ++n->asks;
        nio_purge_locked(n, id);
    }
    pthread_mutex_unlock(&n->mu);
    return on ? FQ_OK : FQ_EINVAL;
}

void fq_nio_fence(fq_nio *n, uint64_t until)
{
    atomic_store(&n->fence_until, until);
}

void fq_nio_fence_consumer(fq_nio *n, int id, uint64_t until)
{
    if (id >= 0 && id < FQ_NIO_MAX_CONSUMERS)
        atomic_store(&n->cons[id].fence_until, until);
}

void fq_nio_consume_pause(fq_nio *n, int id, bool paused)
{
    if (id >= 0 && id < FQ_NIO_MAX_CONSUMERS)
        atomic_store(&n->cons[id].paused, paused);
}

/* Two acks a run: the subject is put together without snprintf. */
static fq_status nio_ack_send(fq_nio *n, int id, const fq_nio_ackref *a, const char *body)
{
    if (id < 0 || id >= FQ_NIO_MAX_CONSUMERS || !n->cons[id].ack_len)
        return FQ_EINVAL;
    if (nio_cons_fenced(n, id, fq_nio_mono_ms()))
        return FQ_EIO;
    const nio_consumer *c = &n->cons[id];
    char subj[sizeof c->ack + 3 * FQ_U64_DEC_MAX + 8];
    size_t k = c->ack_len;
    memcpy(subj, c->ack, k);
    k += fq_u64_dec(subj + k, a->delivered ? a->delivered : 1);
    subj[k++] = '.';
    k += fq_u64_dec(subj + k, a->sseq);
    /* The server drops a nak whose consumer sequence is not one it has
     * delivered and not yet acked past (an ack needs only the stream's). */
    subj[k++] = '.';
    k += fq_u64_dec(subj + k, a->cseq);
    memcpy(subj + k, ".0.0", sizeof ".0.0");
    natsStatus s = natsConnection_Publish(n->nc, subj, body, (int)strlen(body));
    if (s != NATS_OK) {
        return FQ_EIO;
    }
    return FQ_OK;
}

fq_status fq_nio_ack(fq_nio *n, int id, const fq_nio_ackref *a)
{
    return nio_ack_send(n, id, a, "+ACK");
}

fq_status fq_nio_nak(fq_nio *n, int id, const fq_nio_ackref *a, int64_t delay_ms)
{
    if (delay_ms <= 0)
        return nio_ack_send(n, id, a, "-NAK");
    /* JetStream takes the delay in nanoseconds. */
    char body[64];
    snprintf(body, sizeof body, "-NAK {\"delay\":%" PRId64 "}",
             (int64_t)(delay_ms * NIO_NS_PER_MS));
    return nio_ack_send(n, id, a, body);
}

/* ---- a stream read back, on a thread of its own ------------------------ */

/* What the scan thread reads: the want it was made for. */
typedef struct nio_scan_job {
    uint64_t want, token;
    char stream[NIO_NAME_CAP], subject[NIO_SUBJECT_CAP];
    uint64_t msgs;              /* handed over so far */
} nio_scan_job;

/* Drop the read's events still queued (the caller holds mu): no event of
 * a read stopped or replaced is polled after. Owner thread only (their
 * messages go to its graves). */
static void nio_scan_purge_locked(fq_nio *n)
{
    size_t kept = 0;
    for (size_t i = 0; i < n->q_len; i++) {
        fq_nio_event *ev = &n->q[(n->q_head + i) % n->q_cap];
        if (ev->type == FQ_NIO_EV_SCAN || ev->type == FQ_NIO_EV_SCAN_END) {
            fq_nio_msg_drop(n, ev->msg);
            continue;
        }
        n->q[(n->q_head + kept++) % n->q_cap] = *ev;
    }
    n->q_len = kept;
    n->scan.queued = 0;
}

/* Hand m, the read's message at a, over as a SCAN event once the queue
 * holds fewer than NIO_SCAN_QUEUED_MAX of them, so that a long read costs
 * the owner's loop a slice per poll and memory for that many. False (m
 * destroyed) when the read was stopped or replaced meanwhile, or n stops. */
static bool nio_scan_hand(fq_nio *n, nio_scan_job *j, natsMsg *m, const fq_nio_ackref *a,
                          int64_t ts_ms)
{
    nio_scan *r = &n->scan;
    fq_nio_event ev = {.type = FQ_NIO_EV_SCAN, .msg = (fq_nio_msg *)m, .token = j->token,
                       .seq = a->sseq, .ts_ms = ts_ms};
    pthread_mutex_lock(&n->mu);
    while (r->want == j->want && r->queued >= NIO_SCAN_QUEUED_MAX &&
           !atomic_load(&n->stopping))
        pthread_cond_wait(&r->cv, &n->mu);
    bool ok = r->want == j->want && !atomic_load(&n->stopping) && nio_push_locked(n, &ev);
    r->queued += ok;
    pthread_mutex_unlock(&n->mu);
    if (!ok) {
        natsMsg_Destroy(m);
        return false;
    }
    pthread_cond_signal(&n->cv);
    j->msgs++;
    return true;
}

/* Whether the read was stopped or replaced, or n stops. */
static bool nio_scan_gone(fq_nio *n, const nio_scan_job *j)
{
    pthread_mutex_lock(&n->mu);
    bool gone = n->scan.want != j->want;
    pthread_mutex_unlock(&n->mu);
    return gone || atomic_load(&n->stopping);
}

/* End the read's subscription sub. nats.c 3.4.1's reader thread looks a
 * subscription up under the connection's lock and then uses it without
 * holding a reference (natsConn_processMsg), so a subscription freed while
 * a message for it arrives is used after free (measured: the stop or
 * replacement of a read midway, while the server still pushes, crashed
 * it_natsio about 1 run in 8). So it is unsubscribed first, and freed only
 * once a flush has come back: the reader thread handles the PONG after any
 * message it looked the subscription up for. Unconfirmed, it is kept until
 * the next read ends, or until n is destroyed, its connection closed. */
static void nio_scan_unsub(fq_nio *n, natsSubscription *sub)
{
    if (!sub)
        return;
    natsSubscription_Unsubscribe(sub);
    if (natsConnection_FlushTimeout(n->nc, n->o.api_wait_ms) != NATS_OK) {
        natsSubscription_Destroy(n->scan.stale);   /* a whole read ago */
        n->scan.stale = sub;
        return;
    }
    natsSubscription_Destroy(n->scan.stale);
    n->scan.stale = NULL;
    natsSubscription_Destroy(sub);
}

/* Read j's stream (subject "": whole; else that subject only) up to its
 * last message now, in order, through an ordered consumer, each message
 * handed over. FQ_EIO too when stopped or replaced midway. */
static fq_status nio_scan_read(fq_nio *n, nio_scan_job *j)
{
    const char *stream = j->stream, *subject = j->subject[0] ? j->subject : NULL;
    jsStreamInfo *si = NULL;
    natsStatus s = js_GetStreamInfo(&si, n->js, stream, NULL, NULL);
    if (s != NATS_OK)
        return s == NATS_NOT_FOUND ? FQ_ENOTFOUND : FQ_EIO;
    uint64_t last = si->State.LastSeq, msgs = si->State.Msgs;
    char subj[512], whole[512];
    snprintf(whole, sizeof whole, "%s", si->Config->SubjectsLen ? si->Config->Subjects[0] : ">");
    snprintf(subj, sizeof subj, "%s", subject ? subject : whole);
    jsStreamInfo_Destroy(si);
    if (subject && msgs) {
        /* the subject's own last message bounds the read */
        natsMsg *lm = NULL;
        jsErrCode jerr = 0;
        s = js_GetLastMsg(&lm, n->js, stream, subject, NULL, &jerr);
        if (s == NATS_OK || s == NATS_NOT_FOUND) {
            last = s == NATS_OK ? natsMsg_GetSequence(lm) : 0;   /* 0: nothing on it */
            msgs = last;
            s = NATS_OK;
        } else {
            /* not answered: the whole stream is read, up to its last,
             * and the caller takes what it needs of it */
            snprintf(subj, sizeof subj, "%s", whole);
            s = NATS_OK;
        }
        natsMsg_Destroy(lm);
    }
    natsSubscription *sub = NULL;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    if (s == NATS_OK && msgs && !nio_scan_gone(n, j))
        s = js_SubscribeSync(&sub, n->js, subj, NULL, &so, NULL);
    bool gone = false;
    /* Waited for in slices, so that a read stopped midway ends within one
     * (the API's wait without a message fails it). */
    int64_t waited = 0;
    for (uint64_t seq = 0; s == NATS_OK && msgs && seq < last && !(gone = nio_scan_gone(n, j));) {
        natsMsg *m = NULL;
        s = natsSubscription_NextMsg(&m, sub, NIO_WATCH_WAIT_MS);
        if (s == NATS_TIMEOUT && (waited += NIO_WATCH_WAIT_MS) < n->o.api_wait_ms) {
            s = NATS_OK;
            continue;
        }
        if (s != NATS_OK)
            break;
        waited = 0;
        fq_nio_ackref a;
        int64_t ts = 0;
        const char *key;
        size_t key_len;
        if (!nio_parse_reply(natsMsg_GetReply(m), &a, &ts, &key, &key_len)) {
            natsMsg_Destroy(m);
            continue;
        }
        seq = a.sseq;
        if (!nio_scan_hand(n, j, m, &a, ts))
            gone = true;
        if (gone)
            break;
    }
    nio_scan_unsub(n, sub);
    return s == NATS_OK && !gone ? FQ_OK : FQ_EIO;
}

/* The scan thread: each read wanted, to its end (FQ_NIO_EV_SCAN_END) unless
 * stopped or replaced first. */
static void *nio_scan_main(void *arg)
{
    fq_nio *n = arg;
    nio_scan *r = &n->scan;
    nio_scan_job j;
    pthread_mutex_lock(&n->mu);
    while (!atomic_load(&n->stopping)) {
        if (!r->on || r->done == r->want) {
            pthread_cond_wait(&r->cv, &n->mu);
            continue;
        }
        j = (nio_scan_job){.want = r->want, .token = r->token};
        memcpy(j.stream, r->stream, sizeof j.stream);
        memcpy(j.subject, r->subject, sizeof j.subject);
        pthread_mutex_unlock(&n->mu);
        fq_status st = nio_scan_read(n, &j);
        pthread_mutex_lock(&n->mu);
        if (r->want != j.want || atomic_load(&n->stopping))
            continue;   /* stopped or replaced: no end of it is told */
        r->done = j.want;
        fq_nio_event ev = {.type = FQ_NIO_EV_SCAN_END, .token = j.token, .status = st,
                           .seq = j.msgs};
        nio_push_locked(n, &ev);
        pthread_cond_signal(&n->cv);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

/* Set what the scan thread reads (on: stream and subject), or that it reads
 * nothing; a read under way is given up, and its events still queued are
 * dropped. */
static void nio_scan_want(fq_nio *n, bool on, uint64_t token, const char *stream,
                          const char *subject)
{
    nio_scan *r = &n->scan;
    pthread_mutex_lock(&n->mu);
    nio_scan_purge_locked(n);
    r->want++;
    r->on = on;
    r->token = token;
    if (on) {
        nio_copy(r->stream, sizeof r->stream, stream);
        nio_copy(r->subject, sizeof r->subject, subject ? subject : "");
    }
    pthread_mutex_unlock(&n->mu);
    pthread_cond_broadcast(&r->cv);
}

fq_status fq_nio_scan_start(fq_nio *n, uint64_t token, const char *stream, const char *subject)
{
    if (strlen(stream) >= NIO_NAME_CAP || (subject && strlen(subject) >= NIO_SUBJECT_CAP))
        return FQ_EINVAL;
    if (!n->scan.started) {
        if (pthread_create(&n->scan.thread, NULL, nio_scan_main, n) != 0)
            return FQ_ENOMEM;
        n->scan.started = true;
    }
    nio_scan_want(n, true, token, stream, subject);
    return FQ_OK;
}

void fq_nio_scan_stop(fq_nio *n)
{
    nio_scan_want(n, false, 0, NULL, NULL);
}

/* ---- core subscriptions -------------------------------------------------- */

/* On nats.c's thread, before the owner sees anything: a request nobody
 * waits for is dropped, and one past the bound is answered busy here, so
 * that a flood of either costs the owner's loop nothing and queues nothing. */
static void nio_on_request(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    (void)sub;
    nio_sub *ns = closure;
    fq_nio *n = ns->n;
    const char *reply = natsMsg_GetReply(msg);
    if ((!reply || !*reply) && !ns->plain) {
        atomic_fetch_add(&ns->no_reply, 1);
        natsMsg_Destroy(msg);
        return;
    }
    fq_nio_event ev = {.type = FQ_NIO_EV_REQUEST, .source = ns->id, .msg = (fq_nio_msg *)msg};
    pthread_mutex_lock(&n->mu);
    bool queued = (!ns->max_queued || ns->queued < ns->max_queued) && nio_push_locked(n, &ev);
    if (queued)
        ns->queued++;
    pthread_mutex_unlock(&n->mu);
    if (queued) {
        pthread_cond_signal(&n->cv);
        return;
    }
    atomic_fetch_add(&ns->busy, 1);
    if (ns->busy_reply && reply && *reply)
        natsConnection_PublishString(nc, reply, ns->busy_reply);
    natsMsg_Destroy(msg);
}

fq_status fq_nio_subscribe(fq_nio *n, int id, const char *subject, size_t max_queued,
                           const char *busy_reply)
{
    return fq_nio_subscribe_queue(n, id, subject, NULL, max_queued, busy_reply);
}

fq_status fq_nio_subscribe_queue(fq_nio *n, int id, const char *subject, const char *queue,
                                 size_t max_queued, const char *busy_reply)
{
    if (id < 0 || id >= NIO_MAX_SUBS || n->subs[id].sub)
        return FQ_EINVAL;
    n->subs[id].max_queued = max_queued;
    n->subs[id].busy_reply = busy_reply;
    natsStatus s = queue ? natsConnection_QueueSubscribe(&n->subs[id].sub, n->nc, subject, queue,
                                                         nio_on_request, &n->subs[id])
                         : natsConnection_Subscribe(&n->subs[id].sub, n->nc, subject,
                                                    nio_on_request, &n->subs[id]);
    if (s != NATS_OK) {
        return FQ_EIO;
    }
    return FQ_OK;
}

fq_status fq_nio_listen(fq_nio *n, int id, const char *subject, size_t max_queued)
{
    if (id < 0 || id >= NIO_MAX_SUBS || n->subs[id].sub)
        return FQ_EINVAL;
    n->subs[id].plain = true;
    return fq_nio_subscribe(n, id, subject, max_queued, NULL);
}

fq_status fq_nio_core_publish(fq_nio *n, const char *subject, const void *data, size_t len)
{
    natsStatus s = natsConnection_Publish(n->nc, subject, data, (int)len);
    if (s == NATS_OK)
        return FQ_OK;
    return s == NATS_MAX_PAYLOAD ? FQ_ETOOBIG : FQ_EIO;
}

void fq_nio_sub_stats_get(fq_nio_sub_stats *out, fq_nio *n, int id)
{
    *out = (fq_nio_sub_stats){0};
    if (!n || id < 0 || id >= NIO_MAX_SUBS)
        return;
    out->no_reply = atomic_load(&n->subs[id].no_reply);
    out->busy = atomic_load(&n->subs[id].busy);
}

fq_status fq_nio_unsubscribe(fq_nio *n, int id)
{
    if (id < 0 || id >= NIO_MAX_SUBS || !n->subs[id].sub)
        return FQ_EINVAL;
    natsSubscription_Unsubscribe(n->subs[id].sub);
    natsSubscription_Destroy(n->subs[id].sub);
    n->subs[id].sub = NULL;
    n->subs[id].plain = false;
    return FQ_OK;
}

fq_status fq_nio_reply(fq_nio *n, const fq_nio_msg *req, const void *data, size_t len)
{
    const char *reply = natsMsg_GetReply((natsMsg *)req);
    if (!reply || !*reply)
        return FQ_EINVAL;
    natsStatus s = natsConnection_Publish(n->nc, reply, data, (int)len);
    if (s == NATS_OK)
        return FQ_OK;
    return s == NATS_MAX_PAYLOAD ? FQ_ETOOBIG : FQ_EIO;
}

fq_status fq_nio_forward(fq_nio *n, const fq_nio_msg *req, const char *subject,
                         const char *reply)
{
    natsMsg *m = (natsMsg *)req;
    natsStatus s = natsConnection_PublishRequest(n->nc, subject, reply, natsMsg_GetData(m),
                                                 natsMsg_GetDataLength(m));
    return s == NATS_OK ? FQ_OK : FQ_EIO;
}

/* ---- publishes ----------------------------------------------------------- */

/* Whether o sets header key[0..klen) itself. */
static bool nio_hdr_listed(const fq_nio_out *o, const char *key, size_t klen)
{
    for (size_t i = 0; i < o->n_hdrs; i++)
        if (strncasecmp(o->hdrs[i].key, key, klen) == 0 && o->hdrs[i].key[klen] == '\0')
            return true;
    return false;
}

/* JetStream acts on the headers named Nats-*. */
static bool nio_is_nats(const char *key, size_t klen)
{
    return klen >= 5 && strncasecmp(key, "Nats-", 5) == 0;
}

/* Whether a message built from o carries header key[0..klen) of o->carry
 * or o->carry_lines: every one when carry_all, else all but Nats-* and
 * those o sets itself. o NULL: all but Nats-* (what carried lines keep). */
static bool nio_carried(const fq_nio_out *o, const char *key, size_t klen)
{
    if (o && o->carry_all)
        return true;
    return !nio_is_nats(key, klen) && !(o && nio_hdr_listed(o, key, klen));
}

/* One "Key: Value\r\n" line, as nio_buf_hdr writes it. */
static size_t nio_line_bytes(size_t klen, size_t vlen)
{
    return klen + 2 + vlen + 2;
}

#define NIO_STATUS_LINE "NATS/1.0\r\n"

size_t fq_nio_header_bytes(const fq_nio_hdr *hdrs, size_t n, size_t carried)
{
    size_t bytes = carried;
    for (size_t i = 0; i < n; i++)
        bytes += nio_line_bytes(strlen(hdrs[i].key), strlen(hdrs[i].value));
    /* Without a line there is no block at all (a plain message). */
    return bytes ? sizeof NIO_STATUS_LINE - 1 + bytes + 2 : 0;
}

bool fq_nio_header_name_valid(const char *s, size_t len)
{
    /* RFC 9110's token: visible ASCII but for the delimiters. */
    static const char delim[] = "\"(),/:;<=>?@[\\]{}";
    if (!len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] <= 0x20 || s[i] >= 0x7f || memchr(delim, s[i], sizeof delim - 1))
            return false;
    return true;
}

/* Whether s holds needle, in any case. */
static bool nio_holds(const char *s, const char *needle)
{
    size_t k = strlen(needle);
    for (; *s; s++)
        if (strncasecmp(s, needle, k) == 0)
            return true;
    return false;
}

/* name, made safe to quote in a sentence, a header value and a log line:
 * printable ASCII kept, other bytes as \xNN, at most about 64 bytes. */
static void nio_quote(char *out, size_t cap, const char *name)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && k + 8 < cap && k < 64; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\')
            out[k++] = (char)*p;
        else
            k += (size_t)snprintf(out + k, cap - k, "\\x%02x", *p);
    }
    if (*name && k >= 64)
        k += (size_t)snprintf(out + k, cap - k, "...");
    out[k] = '\0';
}

/* Append s (len bytes) to b; CR and LF become spaces when clean, as
 * nats.c's header encoder makes them. */
static bool nio_buf_put(fq_buf *b, const char *s, size_t len, bool clean)
{
    if (fq_buf_reserve(b, len) != FQ_OK)
        return false;
    char *d = b->p + b->len;
    memcpy(d, s, len);
    if (clean)
        for (size_t i = 0; i < len; i++)
            if (d[i] == '\r' || d[i] == '\n')
                d[i] = ' ';
    b->len += len;
    return true;
}

static bool nio_buf_hdr(fq_buf *b, const char *key, const char *val)
{
    return nio_buf_put(b, key, strlen(key), true) && nio_buf_put(b, ": ", 2, false) &&
           nio_buf_put(b, val, strlen(val), true) && nio_buf_put(b, "\r\n", 2, false);
}

/* Keys by address, for qsort. */
static int nio_key_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(const char *const *)a, y = (uintptr_t)*(const char *const *)b;
    return x < y ? -1 : x > y;
}

/* m's header names (a calloc'd array the caller frees), in the order they
 * first occur in its header block when nats.c read them from one: nats.c
 * keeps them in a hash map, whose order depends on how many it holds, but
 * parses the block in place, so each name points into it, where it first
 * occurs (nats.c's message is one allocation: the struct, subject, reply,
 * header block, body; a direct get points the subject into the block). So
 * the same headers come out in the same order whichever
 * message holds them: a submit as fetched, or read back by sequence with
 * the stream's Nats-* headers appended. Names made otherwise (set through
 * the map) keep the map's order. NATS_NOT_FOUND: none. */
static natsStatus nio_keys(natsMsg *m, const char ***keys, int *nk)
{
    natsStatus s = natsMsgHeader_Keys(m, keys, nk);
    if (s != NATS_OK || *nk < 2)
        return s;
    uintptr_t lo = (uintptr_t)m, hi = (uintptr_t)natsMsg_GetData(m);
    for (int i = 0; i < *nk; i++)
        if ((uintptr_t)(*keys)[i] < lo || (uintptr_t)(*keys)[i] >= hi)
            return NATS_OK;
    qsort((void *)*keys, (size_t)*nk, sizeof **keys, nio_key_cmp);
    return NATS_OK;
}

/* Which of cl's names key is (without regard to case), or -1. */
static int nio_claim_of(const fq_nio_claims *cl, const char *key)
{
    for (size_t i = 0; cl && i < cl->n && i < 32; i++)
        if (strcasecmp(key, cl->names[i]) == 0)
            return (int)i;
    return -1;
}

/* Header key of claim i, with its values vals[0..nv), read into cl: a
 * second one (another spelling, or a second value) marks it twice. */
static void nio_claim_note(fq_nio_claims *cl, int i, const char **vals, int nv)
{
    if (cl->vals[i] || nv > 1)
        cl->twice |= 1u << i;
    else if (nv == 1)
        cl->vals[i] = vals[0];              /* the message's, not the array's */
}

/* One pass over m's headers, in nio_keys's order, each checked
 * on the way: bad (160 bytes) says why the first unfit one is (see
 * fq_nio_out_size). The lines of those a message built from o carries (o
 * NULL: all but Nats-*) are counted into *carried and, when lines is not
 * NULL, written to it as a publish writes them; the claims of cl (when not
 * NULL) read into it, past an unfit header too. NATS_NO_MEMORY: lines
 * could not grow. */
static natsStatus nio_carry_walk(size_t *carried, fq_buf *lines, char *bad, natsMsg *m,
                                 const fq_nio_out *o, fq_nio_claims *cl)
{
    const char **keys = NULL;
    int nk = 0;
    natsStatus s = nio_keys(m, &keys, &nk);
    if (s == NATS_PROTOCOL_ERROR)
        s = nio_keys(m, &keys, &nk);        /* the half read: see the quirks above */
    if (s == NATS_NOT_FOUND)
        s = NATS_OK;
    if (s != NATS_OK)
        snprintf(bad, 160, "its header block cannot be read (%s)", natsStatus_GetText(s));
    char q[96];
    int i = 0;
    for (; s == NATS_OK && i < nk; i++) {
        const char *key = keys[i];
        size_t klen = strlen(key);
        nio_quote(q, sizeof q, key);
        if (!fq_nio_header_name_valid(key, klen)) {
            snprintf(bad, 160, "header \"%s\": its name is not a header token", q);
            s = NATS_INVALID_ARG;
            break;
        }
        /* A Nats-* header is never carried to a stream but by the proxy
         * itself; any other one naming Nats-Msg-Id could be read as one. */
        bool nats = nio_is_nats(key, klen);
        if (!nats && nio_holds(key, "Nats-Msg-Id")) {
            snprintf(bad, 160, "header \"%s\": its name holds Nats-Msg-Id", q);
            s = NATS_INVALID_ARG;
            break;
        }
        const char **vals = NULL;
        int nv = 0;
        s = natsMsgHeader_Values(m, key, &vals, &nv);
        int c = s == NATS_OK ? nio_claim_of(cl, key) : -1;
        if (s != NATS_OK)
            snprintf(bad, 160, "header \"%s\" cannot be read", q);
        else if (c >= 0)
            nio_claim_note(cl, c, vals, nv);
        bool carry = nio_carried(o, key, klen);
        for (int j = 0; s == NATS_OK && j < nv; j++) {
            if (!nats && nio_holds(vals[j], "Nats-Msg-Id")) {
                snprintf(bad, 160, "header \"%s\": its value holds Nats-Msg-Id", q);
                s = NATS_INVALID_ARG;
            } else if (carry) {
                *carried += nio_line_bytes(klen, strlen(vals[j]));
                if (lines && !nio_buf_hdr(lines, key, vals[j]))
                    s = NATS_NO_MEMORY;
            }
        }
        free((void *)vals);
    }
    /* Past an unfit header the claims are read all the same, so that a bad
     * claim is refused for itself. */
    for (int c; cl && i < nk; i++) {
        const char **vals = NULL;
        int nv = 0;
        if ((c = nio_claim_of(cl, keys[i])) >= 0 &&
            natsMsgHeader_Values(m, keys[i], &vals, &nv) == NATS_OK)
            nio_claim_note(cl, c, vals, nv);
        free((void *)vals);
    }
    free((void *)keys);
    return s;
}

/* The next line of carried lines p[0..end): its length, and its key's in
 * *klen; 0 when what is left is not a "Key: Value\r\n" line. */
static size_t nio_line_next(const char *p, const char *end, size_t *klen)
{
    const char *colon = memchr(p, ':', (size_t)(end - p));
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!colon || !nl || colon > nl || nl == p || nl[-1] != '\r')
        return 0;
    *klen = (size_t)(colon - p);
    return (size_t)(nl - p) + 1;
}

/* The lines of o->carry_lines, in [*p, *end): a whole header block
 * ("NATS/1.0\r\n", lines, "\r\n") is taken too, as its lines. */
static void nio_lines_span(const fq_nio_out *o, const char **p, const char **end)
{
    static const char pre[] = NIO_STATUS_LINE;
    *p = o->carry_lines;
    *end = *p + o->carry_len;
    if (o->carry_len >= sizeof pre - 1 + 2 && memcmp(*p, pre, sizeof pre - 1) == 0 &&
        memcmp(*end - 2, "\r\n", 2) == 0) {
        *p += sizeof pre - 1;
        *end -= 2;
    }
}

/* Bytes of the lines of o->carry_lines that a message built from o
 * carries; false when they are not lines at all. */
static bool nio_lines_carried(size_t *carried, const fq_nio_out *o)
{
    const char *p, *end;
    size_t klen, len;
    nio_lines_span(o, &p, &end);
    for (; p < end; p += len) {
        if (!(len = nio_line_next(p, end, &klen)))
            return false;
        if (nio_carried(o, p, klen))
            *carried += len;
    }
    return true;
}

fq_status fq_nio_out_size(fq_nio_size *out, const fq_nio_out *o)
{
    *out = (fq_nio_size){0};
    natsStatus s = NATS_OK;
    if (o->carry) {
        s = nio_carry_walk(&out->carried, NULL, out->bad, (natsMsg *)o->carry, o, NULL);
    } else if (o->carry_len && !nio_lines_carried(&out->carried, o)) {
        snprintf(out->bad, sizeof out->bad, "its carried header lines are not header lines");
        s = NATS_INVALID_ARG;
    }
    out->header = fq_nio_header_bytes(o->hdrs, o->n_hdrs, out->carried);
    out->total = out->header + o->len;
    return s == NATS_OK ? FQ_OK : FQ_EINVAL;
}

fq_status fq_nio_msg_carry_lines(fq_buf *out, char bad[160], fq_nio_claims *claims,
                                 const fq_nio_msg *m)
{
    size_t carried = 0;
    out->len = 0;
    bad[0] = '\0';
    for (size_t i = 0; claims && i < claims->n; i++)
        claims->vals[i] = NULL;
    if (claims)
        claims->twice = 0;
    natsStatus s = nio_carry_walk(&carried, out, bad, (natsMsg *)m, NULL, claims);
    for (size_t i = 0; claims && i < claims->n && i < 32; i++)
        if (claims->twice & (1u << i))
            claims->vals[i] = NULL;
    return s == NATS_OK ? FQ_OK : s == NATS_NO_MEMORY ? FQ_ENOMEM : FQ_EINVAL;
}

#ifdef FQ_NATS_RAW_HEADERS
/* libnats's own constructor of received messages: the headers come as
 * their wire block, the first hdr_len bytes of buf (see the quirks above). */
natsStatus natsMsg_create(natsMsg **m, const char *subj, int subj_len, const char *reply,
                          int reply_len, const char *buf, int buf_len, int hdr_len);

/* One pass of the headers o carries into b: pass 0 its Nats-* ones (for a
 * message sent again), pass 1 the others it carries; from carry's header
 * map (its keys[0..nk)), or o's carried lines copied as they are (they
 * were written so). *ok turns false when b cannot grow. */
static natsStatus nio_put_carried(fq_buf *b, bool *ok, const fq_nio_out *o, int pass,
                                  const char **keys, int nk)
{
    natsStatus s = NATS_OK;
    for (int i = 0; *ok && s == NATS_OK && i < nk; i++) {
        size_t klen = strlen(keys[i]);
        bool nats = nio_is_nats(keys[i], klen);
        if (pass == 0 ? !nats : nats || !nio_carried(o, keys[i], klen))
            continue;
        const char **vals = NULL;
        int nv = 0;
        s = natsMsgHeader_Values((natsMsg *)o->carry, keys[i], &vals, &nv);
        for (int j = 0; *ok && s == NATS_OK && j < nv; j++)
            *ok = nio_buf_hdr(b, keys[i], vals[j]);
        free((void *)vals);
    }
    const char *p = NULL, *end = NULL;
    size_t klen, len;
    if (!o->carry && o->carry_len)
        nio_lines_span(o, &p, &end);
    for (; *ok && p && p < end; p += len) {
        if (!(len = nio_line_next(p, end, &klen)))
            return NATS_INVALID_ARG;
        if (pass == 0 ? nio_is_nats(p, klen) : !nio_is_nats(p, klen) && nio_carried(o, p, klen))
            *ok = nio_buf_put(b, p, len, false);
    }
    return s;
}

/* o as a message with reply (or none): the header block written once, by
 * hand, in b, instead of a header map of allocations per header that
 * nats.c would build, encode and free. */
static natsStatus nio_msg_build(natsMsg **m, fq_buf *b, const fq_nio_out *o,
                                const char *reply)
{
    static const char line[] = NIO_STATUS_LINE;
    if (!o->subject || !*o->subject)
        return NATS_INVALID_ARG;
    b->len = 0;
    bool ok = nio_buf_put(b, line, sizeof line - 1, false);
    /* fairq's own headers first: JetStream reads a header at the first
     * place its name occurs in the block, so nothing carried may come
     * before them (nats-server 2.9.10 stored a dispatch twice when a
     * carried X-Nats-Msg-Id-Decoy preceded its Nats-Msg-Id). */
    for (size_t i = 0; ok && i < o->n_hdrs; i++)
        ok = nio_buf_hdr(b, o->hdrs[i].key, o->hdrs[i].value);
    const char **keys = NULL;
    int nk = 0;
    natsStatus s = o->carry ? nio_keys((natsMsg *)o->carry, &keys, &nk) : NATS_OK;
    if (s == NATS_NOT_FOUND)
        s = NATS_OK;                        /* nothing to carry */
    /* A message sent again (carry_all) keeps its Nats-* headers ahead of
     * the others for the same reason: a pass for them, then the rest. */
    for (int pass = o->carry_all ? 0 : 1; pass < 2 && s == NATS_OK; pass++)
        s = nio_put_carried(b, &ok, o, pass, keys, nk);
    free((void *)keys);
    if (s != NATS_OK)
        return s;       /* a carried header lost would lose its Nats-Msg-Id */
    if (b->len == sizeof line - 1)
        b->len = 0;                         /* no header at all: a plain message */
    else
        ok = ok && nio_buf_put(b, "\r\n", 2, false);
    size_t hdr_len = b->len;
    ok = ok && nio_buf_put(b, o->data ? o->data : "", o->len, false);
    if (!ok || b->len > INT32_MAX)
        return NATS_NO_MEMORY;
    return natsMsg_create(m, o->subject, (int)strlen(o->subject), reply,
                          reply ? (int)strlen(reply) : 0, b->p, (int)b->len, (int)hdr_len);
}
#else
/* Copy carry's headers except Nats-* and those o sets itself. */
static natsStatus nio_carry_headers(natsMsg *m, const fq_nio_out *o)
{
    natsMsg *src = (natsMsg *)o->carry;
    const char **keys = NULL;
    int nk = 0;
    natsStatus s = nio_keys(src, &keys, &nk);
    if (s == NATS_NOT_FOUND) {
        return NATS_OK;
    }
    for (int i = 0; s == NATS_OK && i < nk; i++) {
        if (!nio_carried(o, keys[i], strlen(keys[i])))
            continue;
        const char **vals = NULL;
        int nv = 0;
        s = natsMsgHeader_Values(src, keys[i], &vals, &nv);
        for (int j = 0; s == NATS_OK && j < nv; j++)
            s = natsMsgHeader_Add(m, keys[i], vals[j]);
        free((void *)vals);
    }
    free((void *)keys);
    return s;
}

/* Add o->carry_lines but those o sets itself. */
static natsStatus nio_carry_lines(natsMsg *m, const fq_nio_out *o)
{
    const char *p, *end;
    size_t klen, len;
    natsStatus s = NATS_OK;
    nio_lines_span(o, &p, &end);
    for (; s == NATS_OK && p < end; p += len) {
        if (!(len = nio_line_next(p, end, &klen)))
            return NATS_INVALID_ARG;
        if (!nio_carried(o, p, klen))
            continue;
        /* "Key: Value\r\n" as two strings */
        char *kv = malloc(len);
        if (!kv)
            return NATS_NO_MEMORY;
        memcpy(kv, p, len - 2);
        kv[len - 2] = '\0';
        kv[klen] = '\0';
        const char *v = kv + klen + 1;
        s = natsMsgHeader_Add(m, kv, *v == ' ' ? v + 1 : v);
        free(kv);
    }
    return s;
}

/* o as a message with reply (or none), its headers set through nats.c's
 * header map. */
static natsStatus nio_msg_build(natsMsg **m, fq_buf *b, const fq_nio_out *o,
                                const char *reply)
{
    (void)b;
    natsStatus s = natsMsg_Create(m, o->subject, reply, o->data, (int)o->len);
    for (size_t i = 0; s == NATS_OK && i < o->n_hdrs; i++)
        s = natsMsgHeader_Set(*m, o->hdrs[i].key, o->hdrs[i].value);
    if (s == NATS_OK && o->carry)
        s = nio_carry_headers(*m, o);
    else if (s == NATS_OK && o->carry_len)
        s = nio_carry_lines(*m, o);
    if (s != NATS_OK) {
        natsMsg_Destroy(*m);
        *m = NULL;
    }
    return s;
}
#endif

fq_status fq_nio_publish(fq_nio *n, const fq_nio_out *o, uint64_t token)
{
    char reply[sizeof n->ack_prefix + FQ_U64_DEC_MAX];
    if (!nio_next_reply(n, reply))
        return FQ_EIO;
    natsMsg *m = NULL;
    natsStatus s = nio_msg_build(&m, &n->scratch, o, reply);
    if (s != NATS_OK)
        return s == NATS_NO_MEMORY ? FQ_ENOMEM : FQ_EINVAL;
    fq_status r = nio_publish_msg(n, m, token);
    if (r != FQ_OK)
        nio_msg_free(m);
    return r;
}

fq_status fq_nio_natsmsg_create(void **out, const fq_nio_out *o, fq_buf *scratch)
{
    natsMsg *m = NULL;
    natsStatus s = nio_msg_build(&m, scratch, o, NULL);
    *out = m;
    return s == NATS_OK ? FQ_OK : s == NATS_NO_MEMORY ? FQ_ENOMEM : FQ_EINVAL;
}

fq_status fq_nio_republish(fq_nio *n, fq_nio_msg **m, uint64_t token)
{
    /* A new publish number needs a new reply subject, which a natsMsg
     * cannot change: a copy goes out. Failures are rare. */
    natsMsg *old = (natsMsg *)*m;
    fq_nio_out o = {.subject = natsMsg_GetSubject(old), .data = natsMsg_GetData(old),
                    .len = (size_t)natsMsg_GetDataLength(old), .carry = *m, .carry_all = true};
    fq_status r = fq_nio_publish(n, &o, token);
    if (r == FQ_OK) {
        nio_graves_add(&n->dropped, old);
        *m = NULL;
    }
    return r;
}

/* ---- reads by sequence --------------------------------------------------- */

fq_status fq_nio_get(fq_nio_msg **out, fq_nio *n, const char *stream, uint64_t seq)
{
    natsMsg *m = NULL;
    jsDirectGetMsgOptions dg;
    jsDirectGetMsgOptions_Init(&dg);
    dg.Sequence = seq;
    natsStatus s = js_DirectGetMsg(&m, n->js, stream, NULL, &dg);
    if (s != NATS_OK && s != NATS_NOT_FOUND) {
        /* Direct gets are off for this stream: the stream API reads it. */
        jsErrCode jerr = 0;
        s = js_GetMsg(&m, n->js, stream, seq, NULL, &jerr);
        if (jerr == JSNoMessageFoundErr)
            s = NATS_NOT_FOUND;
    }
    if (s != NATS_OK) {
        return s == NATS_NOT_FOUND ? FQ_ENOTFOUND : FQ_EIO;
    }
    *out = (fq_nio_msg *)m;
    return FQ_OK;
}

fq_status fq_nio_restore(bool *stored, fq_nio *n, const char *stream, uint64_t seq,
                         const char *msgid)
{
    fq_nio_msg *got = NULL;
    *stored = false;
    fq_status r = fq_nio_get(&got, n, stream, seq);
    if (r != FQ_OK)
        return r;
    natsMsg *old = (natsMsg *)got, *m = NULL;
    const char *subject = natsMsg_GetSubject(old);
    if (!subject || !*subject) {
        natsMsg_Destroy(old);
        return FQ_EIO;      /* never stored again where no consumer reads it */
    }
    fq_nio_hdr h[] = {{"Nats-Msg-Id", msgid}};
    fq_nio_out o = {.subject = subject, .data = natsMsg_GetData(old),
                    .len = (size_t)natsMsg_GetDataLength(old), .hdrs = h, .n_hdrs = 1,
                    .carry = got};
    natsStatus s = nio_msg_build(&m, &n->scratch, &o, NULL);
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    if (s == NATS_OK)
        s = js_PublishMsg(&pa, n->js, m, NULL, &jerr);
    *stored = s == NATS_OK;
    jsPubAck_Destroy(pa);
    natsMsg_Destroy(m);
    natsMsg_Destroy(old);
    if (s == NATS_OK)
        s = js_DeleteMsg(n->js, stream, seq, NULL, &jerr);
    return s == NATS_OK || (*stored && nio_not_found(s, jerr)) ? FQ_OK : FQ_EIO;
}

/* ---- key-value ----------------------------------------------------------- */

static fq_status nio_kv_open(kvStore **kv, fq_nio *n, const char *bucket)
{
    natsStatus s = js_KeyValue(kv, n->js, bucket);
    if (s != NATS_OK) {
        return s == NATS_NOT_FOUND ? FQ_ENOTFOUND : FQ_EIO;
    }
    return FQ_OK;
}

fq_status fq_nio_kv_ensure(fq_nio *n, const char *bucket, uint64_t ttl_ms, int64_t max_bytes,
                           int32_t max_value, uint32_t replicas, char *err, size_t errlen)
{
    kvStore *kv = NULL;
    kvConfig kc;
    kvConfig_Init(&kc);
    kc.Bucket = bucket;
    kc.History = 1;
    kc.TTL = (int64_t)ttl_ms * NIO_NS_PER_MS;
    kc.MaxBytes = max_bytes > 0 ? max_bytes : -1;
    kc.MaxValueSize = max_value > 0 ? max_value : -1;
    kc.StorageType = js_FileStorage;
    kc.Replicas = replicas ? (int)replicas : 1;
    natsStatus s = js_CreateKeyValue(&kv, n->js, &kc);
    if (s != NATS_OK) {
        nio_errtext(err, errlen, bucket, s);
        /* It exists with another configuration: use it as it is. */
        if (nio_kv_open(&kv, n, bucket) != FQ_OK)
            return FQ_EIO;
    } else if (err && errlen) {
        err[0] = '\0';
    }
    kvStore_Destroy(kv);
    return FQ_OK;
}

fq_status fq_nio_kv_config(uint64_t *ttl_ms, bool *direct, fq_nio *n, const char *bucket)
{
    char name[300];
    *ttl_ms = 0;
    *direct = false;
    int k = snprintf(name, sizeof name, "KV_%s", bucket);
    if (k < 0 || (size_t)k >= sizeof name)
        return FQ_EINVAL;
    jsStreamInfo *si = NULL;
    natsStatus s = js_GetStreamInfo(&si, n->js, name, NULL, NULL);
    if (s == NATS_OK) {
        int64_t ns = si->Config->MaxAge;     /* the entries' TTL, in ns */
        *ttl_ms = ns > 0 ? (uint64_t)ns / NIO_NS_PER_MS : 0;
        *direct = si->Config->AllowDirect;
    }
    jsStreamInfo_Destroy(si);
    return s == NATS_OK ? FQ_OK : FQ_EIO;
}

static fq_status nio_kv_status(natsStatus s, jsErrCode jerr)
{
    if (s == NATS_OK)
        return FQ_OK;
    if (jerr == JSStreamWrongLastSequenceErr)
        return FQ_EEXIST;
    return s == NATS_NOT_FOUND ? FQ_ENOTFOUND : FQ_EIO;
}

/* A KV write (a delete marker when del) that expects the key's last
 * revision (0: no value yet), as kvStore_Update does, but keeping the
 * JetStream error code that tells a lost race (FQ_EEXIST) from a failure. */
static fq_status nio_kv_write(uint64_t *rev, fq_nio *n, const char *bucket, const char *key,
                              const void *val, size_t len, uint64_t last, bool del)
{
    char subj[512];
    int k = snprintf(subj, sizeof subj, "$KV.%s.%s", bucket, key);
    if (k < 0 || (size_t)k >= sizeof subj)
        return FQ_EINVAL;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.ExpectNoMessage = last == 0;
    po.ExpectLastSubjectSeq = last;
    jsCtx *js = n->js;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsMsg *m = NULL;
    natsStatus s = natsMsg_Create(&m, subj, NULL, val, (int)len);
    if (s == NATS_OK && del)
        s = natsMsgHeader_Set(m, "KV-Operation", "DEL");
    if (s == NATS_OK)
        s = js_PublishMsg(&pa, js, m, &po, &jerr);
    natsMsg_Destroy(m);
    if (s == NATS_OK && rev)
        *rev = pa->Sequence;
    jsPubAck_Destroy(pa);
    return nio_kv_status(s, jerr);
}

/* The revision of key's delete or purge marker: FQ_ENOTFOUND when its last
 * entry is a value, or it has none. */
static fq_status nio_kv_marker(uint64_t *rev, fq_nio *n, const char *bucket, const char *key)
{
    char stream[256], subj[512];
    int a = snprintf(stream, sizeof stream, "KV_%s", bucket);
    int b = snprintf(subj, sizeof subj, "$KV.%s.%s", bucket, key);
    if (a < 0 || (size_t)a >= sizeof stream || b < 0 || (size_t)b >= sizeof subj)
        return FQ_EINVAL;
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetLastMsg(&m, n->js, stream, subj, NULL, &jerr);
    if (s != NATS_OK)
        return s == NATS_NOT_FOUND ? FQ_ENOTFOUND : FQ_EIO;
    const char *op = NULL;
    fq_status r = FQ_ENOTFOUND;
    if (natsMsgHeader_Get(m, "KV-Operation", &op) == NATS_OK && op &&
        (strcmp(op, "DEL") == 0 || strcmp(op, "PURGE") == 0)) {
        *rev = natsMsg_GetSequence(m);
        r = FQ_OK;
    }
    natsMsg_Destroy(m);
    return r;
}

fq_status fq_nio_kv_create(uint64_t *rev, fq_nio *n, const char *bucket, const char *key,
                           const void *val, size_t len)
{
    fq_status r = nio_kv_write(rev, n, bucket, key, val, len, 0, false);
    uint64_t marker = 0;
    /* A delete marker holds no value: write over it, expecting it. */
    if (r == FQ_EEXIST && nio_kv_marker(&marker, n, bucket, key) == FQ_OK)
        r = nio_kv_write(rev, n, bucket, key, val, len, marker, false);
    return r;
}

fq_status fq_nio_kv_update(uint64_t *rev, fq_nio *n, const char *bucket, const char *key,
                           const void *val, size_t len, uint64_t last)
{
    if (!last)
        return FQ_EINVAL;
    return nio_kv_write(rev, n, bucket, key, val, len, last, false);
}

fq_status fq_nio_kv_delete(uint64_t *rev, fq_nio *n, const char *bucket, const char *key,
                           uint64_t last)
{
    return nio_kv_write(rev, n, bucket, key, NULL, 0, last, true);
}

/* ---- key-value watches ----------------------------------------------------- */

void fq_nio_kv_entry_destroy(fq_nio_kv_entry *e)
{
    free(e);
}

/* An entry and its strings in one block, so the owner frees it with one
 * call whatever it holds. */
static fq_nio_kv_entry *nio_kv_entry(kvEntry *ke, uint64_t epoch)
{
    const char *key = kvEntry_Key(ke);
    kvOperation op = kvEntry_Operation(ke);
    bool del = op == kvOp_Delete || op == kvOp_Purge;
    size_t klen = strlen(key), vlen = del ? 0 : (size_t)kvEntry_ValueLen(ke);
    fq_nio_kv_entry *e = malloc(sizeof *e + klen + 1 + vlen + 1);
    if (!e)
        return NULL;
    char *k = (char *)(e + 1), *v = k + klen + 1;
    memcpy(k, key, klen + 1);
    if (vlen)
        memcpy(v, kvEntry_Value(ke), vlen);
    v[vlen] = '\0';
    *e = (fq_nio_kv_entry){.key = k, .value = v, .len = vlen, .rev = kvEntry_Revision(ke),
                           .epoch = epoch, .deleted = del,
                           .created_ms = kvEntry_Created(ke) / 1000000};
    return e;
}

static void nio_watch_close(kvStore **kv, kvWatcher **kw)
{
    kvWatcher_Destroy(*kw);
    kvStore_Destroy(*kv);
    *kw = NULL;
    *kv = NULL;
}

static void *nio_watch_main(void *arg)
{
    nio_watch *w = arg;
    fq_nio *n = w->n;
    kvStore *kv = NULL;
    kvWatcher *kw = NULL;
    uint64_t gen = UINT64_MAX, epoch = 0;
    while (!atomic_load(&n->stopping)) {
        if (!atomic_load(&n->connected)) {
            nio_sleep_ms(NIO_IDLE_POLL_MS);
            continue;
        }
        /* A reconnect may follow a server restart that lost the watch's
         * consumer: start again, from every key's current value. */
        uint64_t g = atomic_load(&n->generation);
        if (!kw || gen != g) {
            nio_watch_close(&kv, &kw);
            if (js_KeyValue(&kv, n->js, w->bucket) != NATS_OK ||
                kvStore_WatchAll(&kw, kv, NULL) != NATS_OK) {
                nio_watch_close(&kv, &kw);
                nio_sleep_ms(NIO_RECREATE_RETRY_MS);
                continue;
            }
            gen = g;
            epoch++;
        }
        kvEntry *ke = NULL;
        natsStatus s = kvWatcher_Next(&ke, kw, NIO_WATCH_WAIT_MS);
        if (s == NATS_TIMEOUT)
            continue;
        if (s != NATS_OK) {
            nio_watch_close(&kv, &kw);
            nio_sleep_ms(NIO_WATCH_WAIT_MS);
            continue;
        }
        fq_nio_event ev = {.type = ke ? FQ_NIO_EV_KV : FQ_NIO_EV_KV_SYNCED, .source = w->id,
                           .seq = epoch};
        if (ke) {
            ev.kv = nio_kv_entry(ke, epoch);
            kvEntry_Destroy(ke);
            if (!ev.kv)
                continue;   /* out of memory: the next epoch delivers it again */
        }
        nio_push(n, &ev);
    }
    nio_watch_close(&kv, &kw);
    return NULL;
}

fq_status fq_nio_kv_watch(fq_nio *n, int id, const char *bucket)
{
    if (id < 0 || id >= NIO_MAX_WATCHES || n->watches[id].started)
        return FQ_EINVAL;
    nio_watch *w = &n->watches[id];
    if (!(w->bucket = strdup(bucket)))
        return FQ_ENOMEM;
    if (pthread_create(&w->thread, NULL, nio_watch_main, w) != 0) {
        free(w->bucket);
        w->bucket = NULL;
        return FQ_ENOMEM;
    }
    w->started = true;
    return FQ_OK;
}

/* ---- key-value requests without waiting ----------------------------------- */

/*
 * The lease keys' reads and writes run on the owner's loop, which also
 * dispatches every partition it holds: waited for, each cost that loop a
 * round trip (30 to 860 ms on a loaded 3-node cluster, once 2.8 s), and
 * every partition of the replica stopped meanwhile. So they are sent like
 * the consumers' API requests (a request number in the reply subject, a
 * deadline, the answer matched by its number) and answered as events:
 * the PubAck subscription's thread parses each answer, and fq_nio_poll
 * (or fq_nio_kv_poll) gives it the caller's token, drops one whose
 * request was given up on, and fails one past its deadline.
 */

#define NIO_KV_REPLY_CAP (sizeof((fq_nio *)0)->ack_prefix + 1 + FQ_U64_DEC_MAX)

/* The next request's slot, its reply subject <ack_prefix><kind><number>
 * into reply (NIO_KV_REPLY_CAP bytes); NULL when the slot is still in
 * flight (NIO_KV_REQS behind). */
static nio_kvreq *nio_kv_next(fq_nio *n, char kind, char *reply)
{
    nio_kvreq *r = &n->kvreqs[n->kv_head & (NIO_KV_REQS - 1)];
    if (r->live)
        return NULL;
    snprintf(reply, NIO_KV_REPLY_CAP, "%s%c%" PRIu64, n->ack_prefix, kind, n->kv_head);
    return r;
}

/* Request r was sent: answered or failed within timeout_ms. */
static void nio_kv_sent(fq_nio *n, nio_kvreq *r, uint64_t token, int64_t timeout_ms)
{
    uint64_t end = fq_nio_mono_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : n->o.api_wait_ms);
    *r = (nio_kvreq){.num = n->kv_head++, .token = token, .end_ms = end, .live = true};
    if (end < n->kv_due)
        n->kv_due = end;
}

fq_status fq_nio_kv_get_async(fq_nio *n, const char *bucket, const char *key, uint64_t token,
                              int64_t timeout_ms)
{
    /* The last entry of the key's subject, from any replica of the
     * stream: a direct get (nats.c makes buckets that allow them, and reads
     * them so). */
    char subj[600], reply[NIO_KV_REPLY_CAP];
    int k = snprintf(subj, sizeof subj, "$JS.API.DIRECT.GET.KV_%s.$KV.%s.%s", bucket, bucket, key);
    if (k < 0 || (size_t)k >= sizeof subj)
        return FQ_EINVAL;
    nio_kvreq *r = nio_kv_next(n, 'g', reply);
    if (!r || natsConnection_PublishRequest(n->nc, subj, reply, NULL, 0) != NATS_OK)
        return FQ_EIO;
    nio_kv_sent(n, r, token, timeout_ms);
    return FQ_OK;
}

fq_status fq_nio_kv_write_async(fq_nio *n, const char *bucket, const char *key, const void *val,
                                size_t len, uint64_t last, uint64_t token, int64_t timeout_ms)
{
    char subj[512], seq[FQ_U64_DEC_MAX], reply[NIO_KV_REPLY_CAP];
    int k = snprintf(subj, sizeof subj, "$KV.%s.%s", bucket, key);
    if (k < 0 || (size_t)k >= sizeof subj)
        return FQ_EINVAL;
    fq_u64_dec(seq, last);
    /* "0": the subject holds no entry at all (nats.c's ExpectNoMessage) */
    fq_nio_hdr h[] = {{"Nats-Expected-Last-Subject-Sequence", seq}};
    fq_nio_out o = {.subject = subj, .data = val, .len = len, .hdrs = h, .n_hdrs = 1};
    nio_kvreq *r = nio_kv_next(n, 'w', reply);
    if (!r)
        return FQ_EIO;
    natsMsg *m = NULL;
    natsStatus s = nio_msg_build(&m, &n->scratch, &o, reply);
    if (s != NATS_OK)
        return s == NATS_NO_MEMORY ? FQ_ENOMEM : FQ_EINVAL;
    s = natsConnection_PublishMsg(n->nc, m);
    nio_graves_add(&n->dropped, m);
    if (s != NATS_OK)
        return s == NATS_MAX_PAYLOAD ? FQ_ETOOBIG : FQ_EIO;
    nio_kv_sent(n, r, token, timeout_ms);
    return FQ_OK;
}

/* A read's answer m into ev: the entry (status FQ_OK, seq its revision,
 * kv its value), FQ_ENOTFOUND (no entry: status 404; or a delete or purge
 * marker, seq its revision), else FQ_EIO (no responders: 503, or a reply
 * that is no entry). PubAck thread. */
static void nio_kv_got(fq_nio_event *ev, natsMsg *m)
{
    const char *st = NULL, *seq = NULL, *op = NULL;
    uint64_t rev = 0;
    if (natsMsgHeader_Get(m, "Status", &st) == NATS_OK && st) {
        if (strcmp(st, "404") == 0)
            ev->status = FQ_ENOTFOUND;
        return;
    }
    if (natsMsgHeader_Get(m, "Nats-Sequence", &seq) != NATS_OK || !seq ||
        !nio_num(seq, NULL, UINT64_MAX, &rev) || !rev)
        return;
    ev->seq = rev;
    if (natsMsgHeader_Get(m, "KV-Operation", &op) == NATS_OK && op &&
        (strcmp(op, "DEL") == 0 || strcmp(op, "PURGE") == 0)) {
        ev->status = FQ_ENOTFOUND;
        return;
    }
    size_t len = (size_t)natsMsg_GetDataLength(m);
    fq_nio_kv_entry *e = malloc(sizeof *e + 1 + len + 1);
    if (!e)
        return;
    char *k = (char *)(e + 1), *v = k + 1;
    k[0] = '\0';
    if (len)
        memcpy(v, natsMsg_GetData(m), len);
    v[len] = '\0';
    *e = (fq_nio_kv_entry){.key = k, .value = v, .len = len, .rev = rev};
    ev->kv = e;
    ev->status = FQ_OK;
}

/* The answer to key-value request num (kind 'g' or 'w'), parsed for the
 * owner into kvq (an answer past its room is lost: its request fails at
 * its deadline). PubAck thread; msg is destroyed in the owner's burst. */
static void nio_kv_answer(fq_nio *n, natsMsg *msg, char kind, uint64_t num)
{
    fq_nio_event ev = {.type = FQ_NIO_EV_KV_ANSWER, .token = num, .status = FQ_EIO};
    if (kind == 'g') {
        nio_kv_got(&ev, msg);
    } else {
        fq_nio_parse_puback(&ev, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg));
        ev.duplicate = false;
        if (ev.err_code == FQ_NIO_ERR_WRONG_LAST)
            ev.status = FQ_EEXIST;
    }
    pthread_mutex_lock(&n->mu);
    bool room = n->kvq && n->kvq_len < NIO_KV_REQS;
    if (room)
        n->kvq[(n->kvq_head + n->kvq_len++) % NIO_KV_REQS] = ev;
    nio_graves_add(&n->acked, msg);
    pthread_mutex_unlock(&n->mu);
    if (room)
        pthread_cond_signal(&n->cv);
    else
        fq_nio_kv_entry_destroy(ev.kv);
}

/* Move up to cap answers from kvq to ev; the caller holds mu. */
static size_t nio_kvq_take_locked(fq_nio *n, fq_nio_event *ev, size_t cap)
{
    size_t k = 0;
    for (; k < cap && n->kvq_len; k++, n->kvq_len--) {
        ev[k] = n->kvq[n->kvq_head];
        n->kvq_head = (n->kvq_head + 1) % NIO_KV_REQS;
    }
    return k;
}

/* Give KV_ANSWER events in ev[0..k) the caller's tokens, dropping those of
 * requests no longer in flight (failed at their deadline), then, if every
 * answer that came was taken (drained), append a failure for every
 * request past its deadline, while cap allows. Returns the new count.
 * Owner thread. */
static size_t nio_kv_settle(fq_nio *n, fq_nio_event *ev, size_t k, size_t cap, bool drained)
{
    size_t out = 0;
    for (size_t i = 0; i < k; i++) {
        if (ev[i].type == FQ_NIO_EV_KV_ANSWER) {
            nio_kvreq *r = &n->kvreqs[ev[i].token & (NIO_KV_REQS - 1)];
            if (!r->live || r->num != ev[i].token) {
                fq_nio_kv_entry_destroy(ev[i].kv);
                continue;
            }
            r->live = false;
            ev[i].token = r->token;
        }
        ev[out++] = ev[i];
    }
    uint64_t now = fq_nio_mono_ms();
    if (!drained || now < n->kv_due)
        return out;
    n->kv_due = UINT64_MAX;
    for (uint64_t num = n->kv_tail; num < n->kv_head; num++) {
        nio_kvreq *r = &n->kvreqs[num & (NIO_KV_REQS - 1)];
        if (!r->live || r->num != num)
            continue;
        if (r->end_ms <= now && out < cap) {
            r->live = false;
            ev[out++] = (fq_nio_event){.type = FQ_NIO_EV_KV_ANSWER, .token = r->token,
                                       .status = FQ_EIO};
        } else if (r->end_ms < n->kv_due) {
            n->kv_due = r->end_ms;
        }
    }
    while (n->kv_tail < n->kv_head && !n->kvreqs[n->kv_tail & (NIO_KV_REQS - 1)].live)
        n->kv_tail++;
    return out;
}

size_t fq_nio_kv_poll(fq_nio *n, fq_nio_event *ev, size_t cap)
{
    pthread_mutex_lock(&n->mu);
    size_t k = nio_kvq_take_locked(n, ev, cap);
    bool drained = n->kvq_len == 0;
    pthread_mutex_unlock(&n->mu);
    return nio_kv_settle(n, ev, k, cap, drained);
}

fq_status fq_nio_kv_get(char *buf, size_t cap, uint64_t *rev, fq_nio *n, const char *bucket,
                        const char *key)
{
    kvStore *kv = NULL;
    fq_status r = nio_kv_open(&kv, n, bucket);
    if (r != FQ_OK)
        return r;
    kvEntry *e = NULL;
    natsStatus s = kvStore_Get(&e, kv, key);
    if (s == NATS_OK) {
        size_t len = (size_t)kvEntry_ValueLen(e);
        if (len >= cap)
            len = cap - 1;
        memcpy(buf, kvEntry_Value(e), len);
        buf[len] = '\0';
        if (rev)
            *rev = kvEntry_Revision(e);
    }
    kvEntry_Destroy(e);
    kvStore_Destroy(kv);
    return nio_kv_status(s, 0);
}

/* ---- received messages --------------------------------------------------- */

const char *fq_nio_msg_subject(const fq_nio_msg *m)
{
    return natsMsg_GetSubject((natsMsg *)m);
}

const void *fq_nio_msg_data(const fq_nio_msg *m)
{
    const char *d = natsMsg_GetData((natsMsg *)m);
    return d ? d : "";
}

size_t fq_nio_msg_len(const fq_nio_msg *m)
{
    return (size_t)natsMsg_GetDataLength((natsMsg *)m);
}

const char *fq_nio_msg_header(const fq_nio_msg *m, const char *key)
{
    const char *v = NULL;
    if (natsMsgHeader_Get((natsMsg *)m, key, &v) != NATS_OK) {
        return NULL;
    }
    return v;
}

void fq_nio_msg_destroy(fq_nio_msg *m)
{
    natsMsg_Destroy((natsMsg *)m);
}

void fq_nio_natsmsg_free(void *natsmsg)
{
    if (natsmsg)
        nio_msg_free(natsmsg);
}
