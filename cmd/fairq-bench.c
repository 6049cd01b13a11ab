/* fairq-bench -- nanoseconds and list visits per dispatch: fairq's DRR against the card's listing;
 * with --msg, nanoseconds per parse of the proxy's message bodies, cJSON's arena on and off.
 *
 * Each operation is one enqueue, one dispatch and one completion, with every
 * tenant kept backlogged. Costs are ratio x quantum, or drawn from 0.1 to 50
 * quanta per run ("mixed") so that debts differ from tenant to tenant. Both
 * implementations run the same cases in the same process; the figure of a
 * case is the median of --repeat runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cardrr.h"
#include "drr.h"
#include "msg.h"
#include "policy.h"
#include "../tests/fuzz/submit_ref.h"

#define QUANTUM 1000
#define MIXED (-1.0)

/* Policy features turned on for every tenant (--features), so that each
 * knob's cost per dispatch is measured against the core without it. */
enum { FEAT_BURST = 1, FEAT_RATE = 2, FEAT_PRICED = 4, FEAT_CLASS = 8, FEAT_SUB = 16 };
static unsigned features;

/* Runs each tenant has queued so far, by tenant number (the run's handle,
 * so that a dispatched run names its tenant's number). A tenant's runs
 * take their sub-tenant and class from its own count, not from the run id:
 * with 10,000 tenants served in turn a tenant's ids would all fall on the
 * same sub-tenant and class. */
static uint32_t *queued_by;

/* Queue a run of tenant number i; with classes, every other one of the
 * tenant's runs interactive (class 0), so that half the runs are queued
 * before their tenant's batch runs; with sub-tenants, the tenant's runs
 * name its four sub-tenants in turn, so that each run is in another
 * sub-tenant than the tenant's last and every dispatch switches lanes, the
 * worst case. Returns the tenant's count of runs queued. */
static uint32_t bench_enqueue(fq_sched *s, fq_tenant *t, uint32_t i, uint64_t id, uint32_t est)
{
    static const char subs[] = "abcd";
    uint32_t k = queued_by[i]++;
    void *h = (void *)(uintptr_t)i;
    if (features & (FEAT_CLASS | FEAT_SUB))
        fq_sched_enqueue_sub(NULL, s, t, &subs[k & 3], features & FEAT_SUB ? 1 : 0,
                             features & FEAT_CLASS ? (k & 1) : 0, id, est, h, 0);
    else
        fq_sched_enqueue(NULL, s, t, id, est, h, 0);
    return k + 1;
}

static uint64_t rng = 1;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint32_t cost(double ratio)
{
    if (ratio == MIXED)
        return (uint32_t)(QUANTUM / 10 + rnd() % (50 * QUANTUM - QUANTUM / 10 + 1));
    uint32_t c = (uint32_t)(ratio * QUANTUM);
    return c ? c : 1;
}

/* The process's CPU time, not the wall clock: on a machine shared with
 * other builds, time spent descheduled is not the scheduler's cost (what
 * other processes evict from the caches still counts). */
static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct {
    double ns;          /* per operation */
    double visits;      /* per dispatch */
} result;

static int die(const char *what)
{
    fprintf(stderr, "fairq-bench: %s\n", what);
    exit(1);
}

static result run_drr(uint32_t n, double ratio, uint64_t ops)
{
    fq_sched_opts o = {.quantum = QUANTUM, .max_est_tokens = 100 * QUANTUM,
                       .nclasses = features & FEAT_CLASS ? 2 : 0,
                       .max_subtenants = features & FEAT_SUB ? 64 : 0};
    fq_sched *s;
    if (fq_sched_create(&s, &o) != FQ_OK)
        die("cannot create the scheduler");
    fq_tenant **t = malloc(n * sizeof(*t));
    fq_tenant_policy p = {.weight = 1, .max_subtenants = features & FEAT_SUB ? 64 : 0};
    if (features & FEAT_BURST) {    /* every tenant may burst; none is alone */
        p.max_in_flight = 2;
        p.burst_in_flight = 8;
    }
    if (features & FEAT_RATE)       /* charged and checked, never binding: the
                                       benchmark's clock stands still */
        p.tokens_per_minute = UINT32_MAX;
    uint64_t id = 1;
    if (!(queued_by = calloc(n, sizeof(*queued_by))))
        die("no memory");
    for (uint32_t i = 0; i < n; i++) {
        char name[16];
        int len = snprintf(name, sizeof name, "t%u", i);
        if (fq_sched_tenant(&t[i], s, name, (size_t)len, &p) != FQ_OK)
            die("cannot create a tenant");
        for (int k = 0; k < 2; k++)
            bench_enqueue(s, t[i], i, id++, cost(ratio));
    }
    /* Warm up until the measured phase is steady state, whatever the
     * features: the run pool and the window's hash reach their size, and
     * every tenant has queued a run of each of its four sub-tenants (or
     * would have, without them), so that no sub-tenant is made (a malloc)
     * while the clock runs. With mixed costs tenants are served unevenly,
     * so that takes longer than with equal costs. */
    uint32_t young = n;     /* tenants that have queued fewer than 4 runs */
    for (uint64_t i = 0; i < ops / 10 || young; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        uint32_t owner = (uint32_t)(uintptr_t)r->handle;
        fq_sched_complete(NULL, s, r->id, r->est);
        young -= bench_enqueue(s, t[owner], owner, id++, cost(ratio)) == 4;
    }
    fq_sched_stats a, b;
    fq_sched_stats_get(s, &a);
    double t0 = now_ns();
    fq_prices prices = {1, 1, 1};   /* the cost is the estimate: the arithmetic alone */
    for (uint64_t i = 0; i < ops; i++) {
        fq_run *r = fq_sched_dispatch(s, 0);
        uint32_t owner = (uint32_t)(uintptr_t)r->handle;
        if (features & FEAT_PRICED)     /* what the ledger does per completion */
            fq_sched_complete_priced(NULL, s, r->id, r->est,
                                     fq_price_cost(&prices, r->est - r->est / 5, r->est / 5, 0));
        else
            fq_sched_complete(NULL, s, r->id, r->est);
        bench_enqueue(s, t[owner], owner, id++, cost(ratio));
    }
    double t1 = now_ns();
    fq_sched_stats_get(s, &b);
    result res = {(t1 - t0) / (double)ops,
                  (double)(b.visits + b.wakeups - a.visits - a.wakeups) / (double)(b.dispatched - a.dispatched)};
    free(t);
    free(queued_by);
    fq_sched_destroy(s);
    return res;
}

static result run_card(uint32_t n, double ratio, uint64_t ops)
{
    fq_cardrr *c;
    if (fq_cardrr_create(&c, n, QUANTUM, NULL) != FQ_OK)
        die("cannot create the baseline");
    /* The listing keeps runs in arrays; a pool of two per tenant plus the
     * one in hand stands in, so neither side calls malloc per run. */
    fq_cardrr_run *pool = calloc((size_t)n * 2, sizeof(*pool));
    for (uint32_t i = 0; i < 2 * n; i++) {
        pool[i].tenant = i % n;
        pool[i].est = cost(ratio);
        fq_cardrr_enqueue(c, &pool[i]);
    }
    uint64_t dispatched = 0;
    for (int phase = 0; phase < 2; phase++) {
        uint64_t count = phase == 0 ? ops / 10 : ops;
        uint64_t v0 = fq_cardrr_visits(c);
        double t0 = now_ns();
        for (uint64_t i = 0; i < count; i++) {
            fq_cardrr_run *r;
            while (!(r = fq_cardrr_next(c)))
                ;
            fq_cardrr_reconcile(c, r->tenant, r->est, r->est);
            r->est = cost(ratio);
            fq_cardrr_enqueue(c, r);
            dispatched++;
        }
        double t1 = now_ns();
        if (phase == 1) {
            result res = {(t1 - t0) / (double)count,
                          (double)(fq_cardrr_visits(c) - v0) / (double)count};
            free(pool);
            fq_cardrr_destroy(c);
            return res;
        }
    }
    return (result){0, 0};
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_case(const char *impl, uint32_t n, double ratio, uint64_t ops, int repeat)
{
    double ns[16], visits = 0;
    for (int i = 0; i < repeat; i++) {
        rng = 1;
        result r = strcmp(impl, "drr") == 0 ? run_drr(n, ratio, ops) : run_card(n, ratio, ops);
        ns[i] = r.ns;
        visits = r.visits;
    }
    qsort(ns, (size_t)repeat, sizeof(ns[0]), cmp_double);
    char rs[16];
    if (ratio == MIXED)
        snprintf(rs, sizeof rs, "mixed");
    else
        snprintf(rs, sizeof rs, "%g", ratio);
    printf("impl=%s tenants=%u ratio=%s ns_per_dispatch=%.1f visits_per_dispatch=%.3f\n",
           impl, n, rs, ns[repeat / 2], visits);
    fflush(stdout);
}

/* Bodies the proxy parses per run. A producer's submit of about 512 bytes
 * with the contract's fields and some of its own; the load generator's
 * (cmd/fairq-load: a run id and padding to 512 bytes), which the end-to-end
 * benchmark sends; a worker's completion as fq_completion_format writes it. */
static const char msg_submit[] =
    "{\"run_id\":\"run-20261203-0000042\",\"workflow\":\"summarize\",\"est_tokens\":1800,"
    "\"tenant\":\"acme\",\"priority\":3,\"model\":\"large-2\",\"temperature\":0.2,"
    "\"max_tokens\":1024,\"stream\":false,\"tags\":[\"nightly\",\"eu-west\",\"batch\"],"
    "\"input\":{\"document_id\":\"doc-77f3a2\",\"language\":\"en\",\"pages\":12,"
    "\"prompt\":\"Summarize the attached quarterly report in five bullet points, "
    "keeping every figure it gives for revenue, costs and headcount, "
    "and which changed most.\"},"
    "\"callback\":{\"subject\":\"app.results.acme\",\"correlation\":\"c-9a1b2c3d\"},"
    "\"submitted_by\":\"scheduler@acme\",\"attempt\":1}";
static const char msg_done[] =
    "{\"run_id\":\"run-20261203-0000042\",\"actual_tokens\":1734,\"status\":\"ok\","
    "\"est_tokens\":1800,\"workflow\":\"summarize\"}";

typedef enum { MSG_SUBMIT, MSG_DONE } msg_kind;

/* ns per parse of body[0..len) over n parses. */
static double run_msg(msg_kind kind, const char *body, size_t len, uint64_t n)
{
    char err[256];
    fq_submit sub;
    fq_completion c;
    fq_status st = FQ_OK;
    double t0 = now_ns();
    for (uint64_t i = 0; i < n && st == FQ_OK; i++)
        st = kind == MSG_SUBMIT ? fq_submit_parse(&sub, "acme", body, len, NULL, 100000, err, sizeof err)
                                : fq_completion_parse(&c, body, len, 100000, err, sizeof err);
    double t1 = now_ns();
    if (st != FQ_OK || (kind == MSG_SUBMIT && sub.opaque))
        die("a benchmark body does not parse");
    return (t1 - t0) / (double)n;
}

/* One body, arena off and on alternating, the median of repeat runs each. */
static void bench_msg(const char *name, msg_kind kind, const char *body, uint64_t n, int repeat)
{
    double ns[2][16];
    size_t len = strlen(body);
    run_msg(kind, body, len, n / 10);     /* warm up */
    for (int i = 0; i < repeat; i++)
        for (int on = 0; on < 2; on++) {
            fq_msg_set_arena(on);
            ns[on][i] = run_msg(kind, body, len, n);
        }
    fq_msg_set_arena(true);
    for (int on = 0; on < 2; on++)
        qsort(ns[on], (size_t)repeat, sizeof(ns[on][0]), cmp_double);
    double off = ns[0][repeat / 2], on = ns[1][repeat / 2];
    printf("msg=%s bytes=%zu ns_per_parse_malloc=%.1f ns_per_parse_arena=%.1f arena/malloc=%.2f\n",
           name, len, off, on, on / off);
    fflush(stdout);
}

/* ns per parse of a submit body over n parses: the scanner (old = 0) or the
 * cJSON reading it replaced (old = 1, tests/fuzz/submit_ref.h). */
static double run_submit(int old, const char *body, size_t len, uint64_t n)
{
    char err[256];
    fq_submit sub;
    ref_result r;
    int bad = 0;
    double t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        if (old) {
            ref_parse(&r, (const unsigned char *)body, len, "acme", 100000);
            bad |= r.st != FQ_OK || r.opaque;
        } else {
            bad |= fq_submit_parse(&sub, "acme", body, len, NULL, 100000, err, sizeof err)
                   != FQ_OK || sub.opaque;
        }
    }
    double t1 = now_ns();
    if (bad)
        die("a benchmark body does not parse");
    return (t1 - t0) / (double)n;
}

/* One submit body, old and new parse alternating, the median of repeat runs. */
static void bench_submit(const char *name, const char *body, uint64_t n, int repeat)
{
    double ns[2][16];
    size_t len = strlen(body);
    run_submit(0, body, len, n / 10 + 1);     /* warm up */
    run_submit(1, body, len, n / 10 + 1);
    for (int i = 0; i < repeat; i++)
        for (int old = 0; old < 2; old++)
            ns[old][i] = run_submit(old, body, len, n);
    for (int old = 0; old < 2; old++)
        qsort(ns[old], (size_t)repeat, sizeof(ns[old][0]), cmp_double);
    double nw = ns[0][repeat / 2], od = ns[1][repeat / 2];
    printf("submit=%s bytes=%zu members=%s ns_per_parse_cjson=%.1f ns_per_parse_scan=%.1f "
           "scan/cjson=%.3f\n", name, len, strcmp(name, "1mb") == 0 ? "90002" : "-", od, nw,
           nw / od);
    fflush(stdout);
}

static void bench_msgs(uint64_t n, int repeat)
{
    /* a tenant's megabyte: the contract's fields, then 90,000 of its own */
    size_t cap = 1100000, bk = 0;
    char *big = malloc(cap);
    if (!big)
        die("no memory");
    bk += (size_t)snprintf(big, cap, "{\"run_id\":\"r-1\",\"est_tokens\":1800");
    for (int i = 0; i < 90000; i++)
        bk += (size_t)snprintf(big + bk, cap - bk, ",\"k%05d\":%d", i, i % 100);
    memcpy(big + bk, "}", 2);
    bench_submit("typical", msg_submit, n, repeat);
    bench_submit("1mb", big, n / 10000 + 3, repeat);
    free(big);

    char pad[513];
    int k = snprintf(pad, sizeof pad, "{\"run_id\":\"run-20261203-0000042\",\"pad\":\"");
    memset(pad + k, 'x', sizeof pad - 3 - (size_t)k);
    memcpy(pad + sizeof pad - 3, "\"}", 3);
    bench_msg("submit", MSG_SUBMIT, msg_submit, n, repeat);
    bench_msg("submit_padded", MSG_SUBMIT, pad, n, repeat);
    bench_msg("completion", MSG_DONE, msg_done, n, repeat);
}

static void usage(void)
{
    puts("usage: fairq-bench [--repeat N] [--ops N] [--quick] [--tenants N] [--ratio R]\n"
         "                   [--features LIST]\n"
         "       fairq-bench --msg [--repeat N] [--ops N]\n"
         "  Prints one line per case: impl, tenants, ratio (run cost / quantum),\n"
         "  median ns per dispatch (enqueue + dispatch + complete) and list visits\n"
         "  per dispatch, for fairq's DRR and the design card's listing (card).\n"
         "  --quick runs 10 and 1,000 tenants only, for a smoke test; --tenants N\n"
         "  runs N tenants only; --ratio R (0.1, 1, 50 or mixed) that ratio only.\n"
         "  Times are the process's CPU time.\n"
         "  --features burst gives every tenant a burstable cap (max_in_flight 2,\n"
         "  burst_in_flight 8), rate a token rate (charged at every dispatch and\n"
         "  completion, never binding), priced completions priced by token kind,\n"
         "  class two priority classes (every other run interactive), sub four\n"
         "  sub-tenants a tenant (its runs in turn), to measure each feature's cost\n"
         "  per dispatch.\n"
         "  --msg instead times the proxy's parse of a submit body and a completion\n"
         "  (--ops parses per run), with cJSON's memory from malloc and from the arena.");
}

/* --features: the policy knobs a comma-separated list turns on, each
 * named once here. */
static const struct {
    const char *name;
    unsigned bit;
} feature_names[] = {
    {"burst", FEAT_BURST}, {"rate", FEAT_RATE}, {"priced", FEAT_PRICED},
    {"class", FEAT_CLASS}, {"sub", FEAT_SUB},
};

static int bench_features(char *list)
{
    for (char *w = strtok(list, ","); w; w = strtok(NULL, ",")) {
        size_t k = 0, n = sizeof feature_names / sizeof feature_names[0];
        while (k < n && strcmp(w, feature_names[k].name) != 0)
            k++;
        if (k == n) {
            fprintf(stderr, "fairq-bench: --features: unknown '%s' (burst, rate, priced, class, sub)\n",
                    w);
            return -1;
        }
        features |= feature_names[k].bit;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int repeat = 3, quick = 0, msg = 0;
    uint32_t only = 0;
    double only_ratio = 0;      /* 0: every ratio */
    uint64_t ops = 1000000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc)
            ops = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--msg") == 0)
            msg = 1;
        else if (strcmp(argv[i], "--tenants") == 0 && i + 1 < argc)
            only = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--ratio") == 0 && i + 1 < argc) {
            const char *r = argv[++i];
            only_ratio = strcmp(r, "mixed") == 0 ? MIXED : strtod(r, NULL);
            if (only_ratio != 0.1 && only_ratio != 1 && only_ratio != 50 && only_ratio != MIXED) {
                fprintf(stderr, "fairq-bench: --ratio is 0.1, 1, 50 or mixed\n");
                return 2;
            }
        }
        else if (strcmp(argv[i], "--features") == 0 && i + 1 < argc) {
            if (bench_features(argv[++i]) != 0)
                return 2;
        }
        else {
            usage();
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (repeat < 1 || repeat > 15 || ops < 10) {
        fprintf(stderr, "fairq-bench: --repeat is 1..15 and --ops at least 10\n");
        return 2;
    }
    if (msg) {
        bench_msgs(ops, repeat);
        return 0;
    }
    const uint32_t tenants[] = {10, 1000, 10000, 100000};
    const double ratios[] = {0.1, 1, 50, MIXED};
    size_t nt = quick ? 2 : sizeof(tenants) / sizeof(tenants[0]);
    printf("memory: scheduler_bytes_per_tenant=%zu scheduler_bytes_per_queued_run=%zu\n",
           fq_sched_tenant_bytes(), fq_sched_run_bytes());
    for (size_t i = 0; i < nt; i++)
        for (size_t j = 0; j < sizeof(ratios) / sizeof(ratios[0]); j++) {
            if ((only && tenants[i] != only) || (only_ratio && ratios[j] != only_ratio))
                continue;
            bench_case("drr", tenants[i], ratios[j], ops, repeat);
            bench_case("card", tenants[i], ratios[j], ops, repeat);
        }
    return 0;
}
