/* fairq-sim -- replay tenant mixes through fifo, the card's listing, caps and fairq's DRR, and compare. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenario.h"
#include "sim.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: fairq-sim [options] SCENARIO.yaml...\n"
        "       fairq-sim [options] --trace FILE.csv [SCENARIO.yaml]\n"
        "Simulates each scenario under each policy in virtual time and reports, per tenant,\n"
        "runs, tokens served against the weighted fair share, waits and rejections.\n"
        "  -p, --policy LIST     all (default), or a comma list of: fifo, rr, cap, drr,\n"
        "                        drr-no-reconcile, drr-no-correction, drr-no-idle-reset,\n"
        "                        drr-cap, drr-burst, drr-rate, drr-priced, drr-class,\n"
        "                        drr-sub, drr-class-sub, drr-replicas\n"
        "  -f, --format FMT      table (default), csv or json\n"
        "  -s, --seed N          generate the runs from seed N instead of the scenario's\n"
        "  -t, --trace FILE      replay a trace CSV with the scenario's capacity and plans\n"
        "                        (without one: 10 workers x 25 tokens/s, quantum 1000)\n"
        "      --emit-trace FILE write the scenario's runs as a trace CSV and exit\n"
        "  -w, --waits FILE      also write every run's wait as CSV (scripts/sim-chart.sh)\n"
        "  -o, --output FILE     write the report to FILE instead of standard output\n"
        "  -h, --help\n"
        "The formats are described in docs/sim.md.\n");
}

typedef struct opts {
    enum fq_sim_policy pol[FQ_SIM__NPOLICIES];
    size_t npol;
    enum fq_sim_format format;
    const char *seed, *trace, *emit, *waits, *output;
} opts;

static FILE *open_out(const char *path)
{
    FILE *f = path && strcmp(path, "-") != 0 ? fopen(path, "w") : stdout;
    if (!f)
        perror(path);
    return f;
}

/* The scenario at path (NULL: defaults), with the trace and seed applied. */
static fq_scenario *scenario(const opts *o, const char *path)
{
    char err[512];
    fq_scenario *sc = NULL;
    fq_status st = path ? fq_scenario_load(&sc, path, err, sizeof(err))
                        : fq_scenario_defaults(&sc, o->trace);
    if (st != FQ_OK) {
        fprintf(stderr, "fairq-sim: %s\n", path ? err : fq_status_text(st));
        return NULL;
    }
    if (o->trace) {
        FILE *f = fopen(o->trace, "r");
        if (!f) {
            perror(o->trace);
            fq_scenario_free(sc);
            return NULL;
        }
        st = fq_scenario_read_trace(sc, f, o->trace, err, sizeof(err));
        fclose(f);
        if (st != FQ_OK) {
            fprintf(stderr, "fairq-sim: %s\n", err);
            fq_scenario_free(sc);
            return NULL;
        }
    }
    if (o->seed) {
        char *end;
        unsigned long long seed = strtoull(o->seed, &end, 0);
        if (*end || !*o->seed || (st = fq_scenario_generate(sc, seed)) != FQ_OK) {
            fprintf(stderr, "fairq-sim: --seed %s: %s\n", o->seed,
                    o->trace ? "a trace has no processes to generate from" : "not a number");
            fq_scenario_free(sc);
            return NULL;
        }
    }
    return sc;
}

/* Simulate one scenario under every chosen policy and report it. */
static int simulate(const opts *o, const fq_scenario *sc, fq_sim_report *rep, FILE *waits)
{
    fq_sim_result *res[FQ_SIM__NPOLICIES] = {0};
    int rc = 0;
    for (size_t i = 0; i < o->npol && !rc; i++) {
        fq_status st = fq_sim_run(&res[i], sc, o->pol[i]);
        if (st != FQ_OK) {
            fprintf(stderr, "fairq-sim: %s under %s: %s\n", sc->name,
                    fq_sim_policy_name(o->pol[i]), fq_status_text(st));
            rc = 1;
        }
    }
    if (!rc) {
        fq_sim_report_add(rep, sc, res, o->npol);
        if (waits)
            fq_sim_waits(waits, sc, res, o->npol);
    }
    for (size_t i = 0; i < o->npol; i++)
        fq_sim_result_free(res[i]);
    return rc;
}

static int emit(const opts *o, const char *path)
{
    fq_scenario *sc = scenario(o, path);
    if (!sc)
        return 1;
    FILE *f = open_out(o->emit);
    int rc = !f || fq_scenario_write_trace(f, sc) != FQ_OK;
    if (f && f != stdout && fclose(f) != 0)
        rc = 1;
    fq_scenario_free(sc);
    return rc;
}

static int run(const opts *o, char **paths, int npaths)
{
    FILE *out = open_out(o->output), *waits = NULL;
    if (!out)
        return 1;
    if (o->waits && !(waits = open_out(o->waits))) {
        if (out != stdout)
            fclose(out);
        return 1;
    }
    if (waits)
        fq_sim_waits_header(waits);
    fq_sim_report rep;
    fq_sim_report_begin(&rep, out, o->format);
    int rc = 0;
    for (int i = 0; i < (npaths ? npaths : 1) && !rc; i++) {
        fq_scenario *sc = scenario(o, npaths ? paths[i] : NULL);
        rc = !sc || simulate(o, sc, &rep, waits);
        fq_scenario_free(sc);
    }
    if (fq_sim_report_end(&rep) != FQ_OK)
        rc = 1;
    if (out != stdout && fclose(out) != 0)
        rc = 1;
    if (waits && (ferror(waits) || (waits != stdout && fclose(waits) != 0)))
        rc = 1;
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"policy", required_argument, NULL, 'p'}, {"format", required_argument, NULL, 'f'},
        {"seed", required_argument, NULL, 's'},   {"trace", required_argument, NULL, 't'},
        {"emit-trace", required_argument, NULL, 'E'}, {"waits", required_argument, NULL, 'w'},
        {"output", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opts o = {.format = FQ_SIM_TABLE};
    char err[256];
    fq_sim_policy_parse(o.pol, &o.npol, "all", err, sizeof(err));
    int c;
    while ((c = getopt_long(argc, argv, "p:f:s:t:w:o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (fq_sim_policy_parse(o.pol, &o.npol, optarg, err, sizeof(err)) != FQ_OK) {
                fprintf(stderr, "fairq-sim: --policy: %s\n", err);
                return 2;
            }
            break;
        case 'f':
            if (fq_sim_format_parse(&o.format, optarg) != FQ_OK) {
                fprintf(stderr, "fairq-sim: --format: table, csv or json\n");
                return 2;
            }
            break;
        case 's': o.seed = optarg; break;
        case 't': o.trace = optarg; break;
        case 'E': o.emit = optarg; break;
        case 'w': o.waits = optarg; break;
        case 'o': o.output = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    int npaths = argc - optind;
    if ((!o.trace && npaths < 1) || npaths > (o.trace || o.emit ? 1 : argc)) {
        usage(stderr);
        return 2;
    }
    if (o.emit)
        return emit(&o, npaths ? argv[optind] : NULL);
    return run(&o, argv + optind, npaths);
}
