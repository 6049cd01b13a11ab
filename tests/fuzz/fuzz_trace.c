/* fuzz_trace.c -- fq_scenario_read_trace: a trace CSV replayed by fairq-sim
 * and fairq-load. Input: a byte whose low bit reads the trace into a
 * scenario with plans (whose rows must name one of them) instead of the
 * defaults, then the CSV. What reads is written out again and must read
 * back as the same runs. */
#include "fuzz.h"
#include "scenario.h"

static const char plans_yaml[] =
    "duration_s: 60\n"
    "capacity: {workers: 2, worker_tokens_per_s: 100}\n"
    "plans:\n"
    "  - {name: gold, weight: 5, max_pending: 9}\n"
    "  - {name: free, weight: 1}\n"
    "workflows:\n"
    "  - name: w\n"
    "    cost: {dist: fixed, tokens: 100}\n"
    "tenants:\n"
    "  - id: a\n"
    "    plan: gold\n"
    "    arrivals: [{kind: burst, count: 1}]\n";

static fq_scenario *base(int with_plans)
{
    fq_scenario *sc = NULL;
    char err[256];
    if (with_plans)
        FUZZ_CHECK(fq_scenario_parse(&sc, "plans.yaml", plans_yaml, sizeof plans_yaml - 1, err,
                                     sizeof err) == FQ_OK);
    else
        FUZZ_CHECK(fq_scenario_defaults(&sc, "fuzz") == FQ_OK);
    return sc;
}

static fq_status read_text(fq_scenario *sc, char *text, size_t len, char *err, size_t errlen)
{
    FILE *f = fmemopen(text, len, "r");
    FUZZ_CHECK(f);
    fq_status st = fq_scenario_read_trace(sc, f, "fuzz.csv", err, errlen);
    fclose(f);
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int with_plans = data[0] & 1;
    char *csv = malloc(size);   /* exactly the CSV, no NUL after it */
    FUZZ_CHECK(csv);
    memcpy(csv, data + 1, size - 1);
    fq_scenario *sc = base(with_plans);
    char err[512] = "";
    fq_status st = read_text(sc, csv, size - 1, err, sizeof err);
    free(csv);
    if (st != FQ_OK) {
        FUZZ_CHECK(st == FQ_EINVAL);
        FUZZ_CHECK(err[0] && strnlen(err, sizeof err) < sizeof err);
        fq_scenario_free(sc);
        return 0;
    }
    FUZZ_CHECK(fq_scenario_generate(sc, 1) == FQ_EINVAL);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FUZZ_CHECK(f && fq_scenario_write_trace(f, sc) == FQ_OK);
    fclose(f);
    fq_scenario *back = base(with_plans);
    st = read_text(back, text, len, err, sizeof err);
    if (st != FQ_OK)
        fprintf(stderr, "%s\n", err);
    FUZZ_CHECK(st == FQ_OK && back->n_runs == sc->n_runs);
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *a = &sc->runs[i], *b = &back->runs[i];
        FUZZ_CHECK(a->at == b->at && a->est == b->est && a->actual == b->actual);
        FUZZ_CHECK(strcmp(sc->tenants[a->tenant].id, back->tenants[b->tenant].id) == 0);
        FUZZ_CHECK(strcmp(sc->tenants[a->tenant].plan, back->tenants[b->tenant].plan) == 0);
        FUZZ_CHECK(strcmp(sc->workflows[a->workflow], back->workflows[b->workflow]) == 0);
    }
    fq_scenario_free(back);
    free(text);
    fq_scenario_free(sc);
    return 0;
}
