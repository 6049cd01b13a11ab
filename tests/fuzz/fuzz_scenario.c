/* fuzz_scenario.c -- fq_scenario_parse: a scenario file of fairq-sim and
 * fairq-load --scenario (fq_scenario_load reads the file and hands its bytes
 * here). A scenario that loads and generates a few runs is written as a trace,
 * which must read back into the same scenario as the same runs. */
#include "fuzz.h"
#include "scenario.h"

/* Round trips cost a write and a read per run: only for small scenarios, so
 * that the parse stays what is fuzzed. */
#define ROUND_TRIP_MAX_RUNS 2000

static void round_trip(const fq_scenario *sc, const uint8_t *data, size_t size)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FUZZ_CHECK(f && fq_scenario_write_trace(f, sc) == FQ_OK);
    fclose(f);
    fq_scenario *back = NULL;
    char err[512];
    FUZZ_CHECK(fq_scenario_parse(&back, "fuzz.yaml", (const char *)data, size, err,
                                 sizeof err) == FQ_OK);
    f = fmemopen(text, len, "r");
    FUZZ_CHECK(f);
    fq_status st = fq_scenario_read_trace(back, f, "fuzz.csv", err, sizeof err);
    fclose(f);
    if (st != FQ_OK)
        fprintf(stderr, "%s\n", err);
    FUZZ_CHECK(st == FQ_OK);
    FUZZ_CHECK(back->n_runs == sc->n_runs);
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *a = &sc->runs[i], *b = &back->runs[i];
        FUZZ_CHECK(a->at == b->at && a->est == b->est && a->actual == b->actual);
        FUZZ_CHECK(strcmp(sc->tenants[a->tenant].id, back->tenants[b->tenant].id) == 0);
        FUZZ_CHECK(strcmp(sc->workflows[a->workflow], back->workflows[b->workflow]) == 0);
    }
    fq_scenario_free(back);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fq_scenario *sc = NULL;
    char err[512] = "";
    fq_status st = fq_scenario_parse(&sc, "fuzz.yaml", (const char *)data, size, err, sizeof err);
    if (st != FQ_OK) {
        FUZZ_CHECK(st == FQ_EINVAL && !sc);
        FUZZ_CHECK(err[0] && strnlen(err, sizeof err) < sizeof err);
        return 0;
    }
    FUZZ_CHECK(sc);
    for (size_t i = 0; i < sc->n_runs; i++) {
        const fq_scenario_run *r = &sc->runs[i];
        FUZZ_CHECK(r->tenant < sc->n_tenants && r->workflow < sc->n_workflows);
        FUZZ_CHECK(r->actual >= 1 && (i == 0 || r[-1].at <= r->at));
    }
    if (sc->n_runs > 0 && sc->n_runs <= ROUND_TRIP_MAX_RUNS)  /* a trace has runs */
        round_trip(sc, data, size);
    fq_scenario_free(sc);
    return 0;
}
