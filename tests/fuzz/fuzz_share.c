/* fuzz_share.c -- fq_share_beat_parse (lib/msg.c): a heartbeat on the share
 * subject, which every replica hears, and what lib/share makes of the beats
 * that parse. What parses is written back with fq_share_beat_format and must
 * parse to the same beat; then it is heard by a replica, which ticks after
 * each beat and must keep docs/scaling.md's promises whatever the beats
 * claim: its share is within the window, and its limit within the room
 * the others leave (the window less what they hold outside the reserve)
 * plus the reserve, so that filling it all hold at most the window plus
 * the reserve once for it and once for each other that says it borrows
 * (the overshoot bound), however absurd the numbers.
 *
 * Input: 4 bytes of setup (the window in runs, its reserve, this replica's
 * backlogged weight and runs held: small, so that beats can outweigh them),
 * then the beats' bodies, separated by NUL bytes. */
#include "fuzz.h"
#include "msg.h"
#include "share.h"

#define PERIOD 100
#define PEERS 16
#define TOKEN_UNIT 1000000000ull   /* the token window is runs times this */

/* A peer's last beat, as the replica remembers it (until forgotten, which
 * the time steps here never reach). */
typedef struct seen {
    char id[FQ_SHARE_ID_MAX + 1];
    fq_share_beat b;
} seen;

static void check_limits(const fq_share_limits *l, const fq_share_beat *mine,
                         const fq_share_local *me, const seen *peers, size_t n, uint64_t g,
                         uint64_t res, bool tokens)
{
    uint64_t limit = tokens ? l->tokens : l->runs;
    uint64_t share = tokens ? l->share_tokens : l->share_runs;
    uint64_t held = tokens ? me->tokens : me->runs;
    uint64_t borrowed = tokens ? mine->borrowed_tokens : mine->borrowed_runs;
    FUZZ_CHECK(limit <= g + res);
    FUZZ_CHECK(share <= g || (!me->weight && share <= held));  /* idle: what it holds */
    FUZZ_CHECK(borrowed <= res && borrowed <= held);
    if (limit <= held)
        return;     /* it dispatches nothing more */
    /* What the others hold outside the reserve (what they say they hold on
     * it, believed up to the reserve) leaves the room; past it this
     * replica may add the reserve, no more. So once it has filled its
     * limit, all hold at most the window plus the reserve once for it and
     * once for each other that says it borrows, unless the others alone
     * held more than the window already (a window lowered by a reload). */
    unsigned __int128 outside = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = tokens ? peers[i].b.tokens : peers[i].b.runs;
        uint64_t b = tokens ? peers[i].b.borrowed_tokens : peers[i].b.borrowed_runs;
        outside += h - (b < res ? b : res);
    }
    unsigned __int128 room = outside < g ? g - outside : 0;
    FUZZ_CHECK(limit <= room + res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint32_t g = 1 + data[0] % 32;
    uint32_t res = data[1] % 4;
    fq_share_local me = {.weight = data[2] % 8, .runs = data[3] % (g + res + 1),
                         .queued_runs = data[2] % 8 ? 5 : 0, .round = data[1] >> 2};
    me.tokens = me.runs * TOKEN_UNIT;
    me.queued_tokens = me.queued_runs * TOKEN_UNIT;
    data += 4;
    size -= 4;

    fq_share_opts o = {.max_runs = g, .max_tokens = g * TOKEN_UNIT, .reserve_runs = res,
                       .reserve_tokens = res * TOKEN_UNIT, .period = PERIOD,
                       .max_peers = PEERS};
    fq_share *s;
    FUZZ_CHECK(fq_share_create(&s, &o, "me", 0) == FQ_OK);
    fq_share_beat self = {.id = "me"};
    FUZZ_CHECK(fq_share_heard(s, &self, 0) == FQ_OK);
    seen peers[PEERS];
    size_t npeers = 0;
    uint64_t now = 4 * PERIOD;  /* past starting: it heard itself, and listened */

    while (size) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t len = nul ? (size_t)(nul - data) : size;
        fq_share_beat b;
        char err[256] = "";
        fq_status st = fq_share_beat_parse(&b, len ? data : NULL, len, err, sizeof err);
        data += len + (nul != NULL);
        size -= len + (nul != NULL);
        if (st != FQ_OK) {
            FUZZ_CHECK(st == FQ_EINVAL);
            FUZZ_CHECK(fuzz_sentence_ok(err, sizeof err));
            FUZZ_CHECK(!b.id[0] && !b.weight && !b.runs && !b.tokens);
            continue;
        }
        FUZZ_CHECK(fq_msg_name_valid(b.id, strlen(b.id), FQ_SHARE_ID_MAX));
        FUZZ_CHECK(b.borrowed_runs <= b.runs && b.borrowed_tokens <= b.tokens);
        FUZZ_CHECK(b.weight <= FQ_SHARE_MAX_VALUE && b.queued_runs <= FQ_SHARE_MAX_VALUE &&
                   b.queued_tokens <= FQ_SHARE_MAX_VALUE && b.tokens <= FQ_SHARE_MAX_VALUE);

        char buf[FQ_SHARE_BEAT_MAX_BYTES + 1];
        size_t n = fq_share_beat_format(buf, sizeof buf, &b);
        FUZZ_CHECK(n > 0 && n <= FQ_SHARE_BEAT_MAX_BYTES);
        fq_share_beat back;
        FUZZ_CHECK(fq_share_beat_parse(&back, buf, n, err, sizeof err) == FQ_OK);
        FUZZ_CHECK(memcmp(&back, &b, sizeof b) == 0);

        /* heard, then a tick, as the proxy does every period */
        now += 1 + b.runs % PERIOD;
        self.weight = me.weight;
        FUZZ_CHECK(fq_share_heard(s, &self, now) == FQ_OK);
        if (fq_share_heard(s, &b, now) == FQ_OK && strcmp(b.id, "me") != 0) {
            size_t i = 0;
            while (i < npeers && strcmp(peers[i].id, b.id) != 0)
                i++;
            if (i == npeers)
                npeers++;
            FUZZ_CHECK(npeers <= PEERS);
            memcpy(peers[i].id, b.id, sizeof peers[i].id);
            peers[i].b = b;
        }
        fq_share_limits l;
        fq_share_beat mine;
        fq_share_tick(&l, &mine, s, &me, now);
        check_limits(&l, &mine, &me, peers, npeers, g, res, false);
        check_limits(&l, &mine, &me, peers, npeers, g * TOKEN_UNIT, res * TOKEN_UNIT, true);
        fq_share_stats stats;
        fq_share_stats_get(&stats, s);
        FUZZ_CHECK(stats.peers == npeers);
    }
    fq_share_destroy(s);
    return 0;
}
