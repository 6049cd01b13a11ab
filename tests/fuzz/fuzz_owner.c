/* fuzz_owner.c -- lib/owner.c over the lease bucket's keys and values: what
 * a watch of the bucket delivers (fq_owner_on_key: any key, any value, any
 * age) and what a read of a key answers (fq_owner_on_get), as a buggy or
 * hostile writer could leave them, beside a small honest bucket.
 *
 * The harness keeps the bucket (value, revision, time of the last write;
 * a key ages out ttl after it), answers each action of the replica "me" as
 * the server would, in an order and at times the input chooses, and lets
 * the input write keys too: a rival's honest write (only to a key that has
 * aged out or is free, as a replica does) or a stray one (anything, at any
 * time: a key so written is no longer checked for exclusivity). After
 * every step it checks what owner.c promises: actions name a valid slot,
 * key and value; a partition is GAINED at a revision that our own write
 * stored, LOST only once GAINED, and never GAINED twice without a LOST
 * unless said "again"; and while fq_owner_fresh says a partition is ours,
 * the bucket (not written by strays) holds our id in its key.
 *
 * Input: a byte for P (1 to 8), then steps of an opcode byte and operands. */
#include "fuzz.h"
#include "owner.h"

#define TTL 3000
#define KEYS 64             /* the replica's keys (at most 10) and those the input writes */
#define KEYS_INPUT 40       /* ... of which the input's new keys at most */
#define PENDING 64

typedef struct kv {
    char key[32];
    char value[80];         /* "" when absent */
    uint64_t rev;
    uint64_t written;       /* when */
    uint64_t ours;          /* the last revision our write stored; 0 none */
    bool stray;             /* written by a stray writer: not checked */
} kv;

typedef struct op {
    fq_owner_act a;
    char key[32];
    char value[80];
    uint64_t sent;
} op;

static kv bucket[KEYS];
static size_t nkeys;
static uint64_t head_rev;

static kv *find(const char *key)
{
    for (size_t i = 0; i < nkeys; i++)
        if (strcmp(bucket[i].key, key) == 0)
            return &bucket[i];
    if (nkeys == KEYS)
        return NULL;
    kv *k = &bucket[nkeys++];
    memset(k, 0, sizeof *k);
    snprintf(k->key, sizeof k->key, "%s", key);
    return k;
}

static bool live(const kv *k, uint64_t now)
{
    return k->value[0] && now < k->written + TTL;
}

/* Take bytes as a NUL-terminated string of at most cap - 1. */
static size_t take_str(char *out, size_t cap, const uint8_t **d, size_t *n)
{
    size_t i = 0;
    while (*n && **d && i + 1 < cap) {
        out[i++] = (char)**d;
        (*d)++;
        (*n)--;
    }
    if (*n) {
        (*d)++;
        (*n)--;
    }
    out[i] = '\0';
    return i;
}

static uint8_t take(const uint8_t **d, size_t *n)
{
    if (!*n)
        return 0;
    (*n)--;
    return *(*d)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    uint32_t P = 1 + data[0] % 8;
    data++;
    size--;
    nkeys = 0;
    head_rev = 0;
    fq_owner *o;
    FUZZ_CHECK(fq_owner_create(&o, P, "me", NULL, TTL) == FQ_OK);
    op pend[PENDING];
    size_t npend = 0;
    bool owned[8 + 1] = {0};
    uint64_t now = 1;
    int steps = 0;

    while (size && steps++ < 400) {
        uint8_t opc = take(&data, &size);
        switch (opc % 6) {
        case 0:     /* time passes, then a tick */
            now += 1 + (uint64_t)take(&data, &size) * 20;
            fq_owner_tick(o, now);
            break;
        case 1: {   /* a watch delivers a key, maybe written by a rival or a stray */
            char key[40], value[80];
            uint8_t how = take(&data, &size);
            uint64_t age = (uint64_t)take(&data, &size) * 20;
            take_str(key, sizeof key, &data, &size);
            take_str(value, sizeof value, &data, &size);
            kv *k = nkeys < KEYS_INPUT ? find(key) : NULL;
            if (k && (how & 1)) {   /* a write to the bucket */
                bool rival_ok = !live(k, now);
                if (!(how & 2) && !rival_ok)
                    break;          /* an honest rival waits for the key to age */
                k->stray |= (how & 2) != 0;
                snprintf(k->value, sizeof k->value, "%s", value);
                k->rev = ++head_rev;
                k->written = now;
                age = 0;
            }
            fq_owner_on_key(o, now, key, (how & 4) ? NULL : value, age);
            break;
        }
        case 2:     /* the oldest pending operation answered, or given up */
        case 3: {
            if (!npend)
                break;
            size_t i = opc % 6 == 2 ? 0 : take(&data, &size) % npend;
            op p = pend[i];
            memmove(&pend[i], &pend[i + 1], (npend - i - 1) * sizeof pend[0]);
            npend--;
            bool lost = take(&data, &size) % 8 == 0;   /* no answer */
            kv *k = find(p.key);
            FUZZ_CHECK(k != NULL);
            if (p.a.kind == FQ_OWNER_GET) {
                if (lost)
                    fq_owner_on_get(o, p.a.slot, p.a.req, now, FQ_EIO, NULL, 0);
                else if (!live(k, now))
                    fq_owner_on_get(o, p.a.slot, p.a.req, now, FQ_ENOTFOUND, NULL, 0);
                else
                    fq_owner_on_get(o, p.a.slot, p.a.req, now, FQ_OK, k->value, k->rev);
                break;
            }
            bool ok = p.a.kind == FQ_OWNER_CREATE ? !live(k, now)
                                                  : live(k, now) && k->rev == p.a.expect;
            if (ok && !(lost && (opc & 0x80))) {
                snprintf(k->value, sizeof k->value, "%s", p.value);
                k->rev = ++head_rev;
                k->written = now;
                if (strcmp(p.value, "me") == 0)
                    k->ours = k->rev;
            }
            if (lost)
                fq_owner_on_write(o, p.a.slot, p.a.req, now, FQ_EIO, 0);
            else
                fq_owner_on_write(o, p.a.slot, p.a.req, now, ok ? FQ_OK : FQ_EEXIST,
                                  ok ? k->rev : 0);
            break;
        }
        case 4:
            fq_owner_synced(o);
            break;
        case 5: {
            uint8_t b = take(&data, &size);
            if (b == 0xff)
                fq_owner_stop(o, now);
            else
                fq_owner_handoff(o, (int32_t)(b % (P + 1)) - (b % (P + 1) == P));
            break;
        }
        }
        /* drain, as the caller does after every call */
        fq_owner_act a;
        while (fq_owner_next(&a, o)) {
            FUZZ_CHECK(a.part == FQ_OWNER_DUTY || a.part == FQ_OWNER_REGISTRY ||
                       (a.part >= 0 && (uint32_t)a.part < P));
            int idx = a.part >= 0 ? a.part : (int)P;    /* the duty's flag after the parts */
            switch (a.kind) {
            case FQ_OWNER_GET:
            case FQ_OWNER_CREATE:
            case FQ_OWNER_UPDATE:
                FUZZ_CHECK(a.key && strlen(a.key) < 32);
                FUZZ_CHECK(a.kind == FQ_OWNER_GET || (a.value && (strcmp(a.value, "me") == 0 ||
                                                                 strcmp(a.value, "released") == 0)));
                if (npend < PENDING) {
                    op *p = &pend[npend++];
                    p->a = a;
                    snprintf(p->key, sizeof p->key, "%s", a.key);
                    snprintf(p->value, sizeof p->value, "%s", a.value ? a.value : "");
                    p->sent = now;
                } else {        /* more than the harness keeps: never answered */
                    if (a.kind == FQ_OWNER_GET)
                        fq_owner_on_get(o, a.slot, a.req, now, FQ_EIO, NULL, 0);
                    else
                        fq_owner_on_write(o, a.slot, a.req, now, FQ_EIO, 0);
                }
                break;
            case FQ_OWNER_GAINED: {
                FUZZ_CHECK(a.part != FQ_OWNER_REGISTRY);
                FUZZ_CHECK(!owned[idx] || a.again);
                char key[32];
                if (P == 1)
                    snprintf(key, sizeof key, "leader");
                else if (a.part >= 0)
                    snprintf(key, sizeof key, "p.%d", a.part);
                else
                    snprintf(key, sizeof key, "leader");
                kv *k = find(key);
                FUZZ_CHECK(k && (k->stray || (a.term && a.term == k->ours)));
                owned[idx] = true;
                break;
            }
            case FQ_OWNER_LOST:
                FUZZ_CHECK(owned[idx]);
                owned[idx] = false;
                break;
            }
        }
        /* fresh: the bucket holds our id in the key */
        for (uint32_t k = 0; k < P; k++) {
            if (!fq_owner_fresh(o, (int32_t)k, now))
                continue;
            char key[32];
            if (P == 1)
                snprintf(key, sizeof key, "leader");
            else
                snprintf(key, sizeof key, "p.%u", k);
            kv *b = find(key);
            FUZZ_CHECK(b && (b->stray || (live(b, now) && strcmp(b->value, "me") == 0)));
        }
        fq_owner_stats st;
        fq_owner_stats_get(&st, o);
        FUZZ_CHECK(st.owned <= P);
    }
    fq_owner_destroy(o);
    return 0;
}
