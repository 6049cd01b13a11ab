/* fairq-proxy.c -- the fairness sidecar: reads its config, runs lib/proxy until SIGTERM or SIGINT, reloads on SIGHUP. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "http.h"
#include "log.h"
#include "proxy.h"

static fq_proxy *running;
static sem_t stopping;          /* posted on SIGTERM and SIGINT: the watchdog's start */

/* Both calls only set a flag: the proxy's loop does the work. */
static void on_signal(int sig)
{
    if (!running)
        return;
    if (sig == SIGHUP) {
        fq_proxy_reload(running);
    } else {
        fq_proxy_stop(running);
        sem_post(&stopping);
    }
}

/* docs/protocol.md promises the exit within FQ_PROXY_STOP_MS of SIGTERM.
 * The stop path bounds each of its own waits; this catches a library call
 * that does not (a reconnect's name lookup, say) before an orchestrator's
 * SIGKILL would. What the proxy still held stays in JetStream. */
static void *watchdog(void *arg)
{
    (void)arg;
    while (sem_wait(&stopping) != 0)
        ;
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    long ms = (long)FQ_PROXY_STOP_MS - 500;     /* room for the exit itself */
    at.tv_sec += ms / 1000;
    at.tv_nsec += (ms % 1000) * 1000000L;
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) != 0)
        ;
    fq_log(FQ_LOG_ERROR, "the graceful stop overran its time; exiting now",
           FQ_UINT("after_ms", (uint64_t)ms));
    _exit(FQ_PROXY_EXIT_OK);
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fairq-proxy [-c FILE] [--nats URL] [--check-config]\n"
            "       fairq-proxy --health URL | --version | --help\n"
            "\n"
            "Fairness proxy for NATS JetStream: consumes runs from <submit>.<tenant>,\n"
            "dispatches them to <dispatch> by token-metered deficit round robin, and\n"
            "reconciles estimates from completions on <done>.<tenant>.\n"
            "\n"
            "  -c, --config FILE   configuration file (default config/fairq.yaml)\n"
            "      --nats URL      NATS server URL; overrides FAIRQ_NATS_URL and nats.url\n"
            "      --check-config  validate the configuration and exit (0 if valid)\n"
            "      --health URL    GET URL (e.g. http://127.0.0.1:9464/healthz) and exit 0\n"
            "                      on a 2xx answer, 1 otherwise: a probe for images\n"
            "                      without curl\n"
            "      --version       print the version and exit\n"
            "  -h, --help          print this help and exit\n"
            "\n"
            "Environment: FAIRQ_NATS_URL overrides nats.url, FAIRQ_HTTP_LISTEN http.listen,\n"
            "FAIRQ_HTTP_PROBE_LISTEN http.probe_listen,\n"
            "FAIRQ_TENANTS_BUCKET streams.tenants_bucket (default %s), and\n"
            "FAIRQ_QUEUE_AGE_WARN_MS log.queue_age_warn_ms (default %u).\n"
            "\n"
            "SIGTERM or SIGINT stop it gracefully within 10 s, NATS up or not: fetching\n"
            "stops, dispatches under way finish and are acked, whatever is still queued\n"
            "stays in JetStream.\n"
            "SIGHUP reads the config file again (as a request on <admin>.reload does);\n"
            "an invalid file is refused whole and the config in force stays.\n",
            FQ_DEFAULT_TENANTS_BUCKET, FQ_DEFAULT_QUEUE_AGE_WARN_MS);
}

/* Replace *field by the flag, else by the environment variable if set (and
 * not empty, unless empty means something). */
static int override(char **field, const char *flag, const char *env_name, int empty_ok)
{
    const char *env = getenv(env_name);
    const char *v = flag ? flag : (env && (*env || empty_ok) ? env : NULL);
    if (!v)
        return 0;
    char *dup = strdup(v);
    if (!dup)
        return -1;
    free(*field);
    *field = dup;
    return 0;
}

/* What the command line says about the config, for the first load and
 * every reload. */
typedef struct cli {
    const char *path;
    const char *nats;           /* --nats, or NULL */
} cli;

/* FAIRQ_QUEUE_AGE_WARN_MS over log.queue_age_warn_ms, if set. */
static int override_age(uint64_t *field, char *err, size_t errlen)
{
    const char *age = getenv("FAIRQ_QUEUE_AGE_WARN_MS");
    if (!age || !*age)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(age, &end, 10);
    if (errno || *end || !v || age[0] < '0' || age[0] > '9' || v > FQ_CONFIG_MAX_MS) {
        snprintf(err, errlen, "FAIRQ_QUEUE_AGE_WARN_MS: '%s' is not a whole number of ms "
                 "from 1 to %llu", age, (unsigned long long)FQ_CONFIG_MAX_MS);
        return -1;
    }
    *field = v;
    return 0;
}

/* The config file with the command line's and the environment's
 * overrides: fq_proxy_load_fn. */
static fq_status load(fq_config *out, void *arg, char *err, size_t errlen)
{
    const cli *c = arg;
    fq_status s = fq_config_load(out, c->path, err, errlen);
    if (s != FQ_OK)
        return s;
    if (override(&out->nats.url, c->nats, "FAIRQ_NATS_URL", 0) != 0 ||
        override(&out->http.listen, NULL, "FAIRQ_HTTP_LISTEN", 1) != 0 ||
        override(&out->http.probe_listen, NULL, "FAIRQ_HTTP_PROBE_LISTEN", 1) != 0 ||
        override(&out->streams.tenants_bucket, NULL, "FAIRQ_TENANTS_BUCKET", 0) != 0) {
        fq_config_free(out);
        snprintf(err, errlen, "out of memory");
        return FQ_ENOMEM;
    }
    const char *b = out->streams.tenants_bucket;
    if (!fq_name_valid(b, strlen(b)) || strcmp(b, out->streams.lease_bucket) == 0) {
        snprintf(err, errlen, "FAIRQ_TENANTS_BUCKET: '%s' is not 1 to 64 of [A-Za-z0-9_-], "
                 "or is streams.lease_bucket", b);
        fq_config_free(out);
        return FQ_EINVAL;
    }
    if (override_age(&out->log.queue_age_warn_ms, err, errlen) != 0) {
        fq_config_free(out);
        return FQ_EINVAL;
    }
    return FQ_OK;
}

/* --health URL: 0 on a 2xx answer, 1 otherwise, the reason on stderr. */
static int health(const char *url)
{
    int status = 0;
    char reason[256] = "", err[256] = "";
    if (fq_http_probe(&status, reason, sizeof reason, url, 3000, err, sizeof err) != FQ_OK) {
        fprintf(stderr, "fairq-proxy: %s\n", err);
        return 1;
    }
    if (status < 200 || status > 299) {
        fprintf(stderr, "fairq-proxy: %s: HTTP %d %s\n", url, status, reason);
        return 1;
    }
    return 0;
}

/* The command line into c and *check; -1 to exit with *rc (help, version,
 * health or a usage error), else 0. */
static int parse_args(cli *c, int *check, int *rc, int argc, char **argv)
{
    enum { OPT_NATS = 256, OPT_CHECK, OPT_VERSION, OPT_HEALTH };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"nats", required_argument, NULL, OPT_NATS},
        {"check-config", no_argument, NULL, OPT_CHECK},
        {"health", required_argument, NULL, OPT_HEALTH},
        {"version", no_argument, NULL, OPT_VERSION},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    *rc = 0;
    while ((opt = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': c->path = optarg; break;
        case OPT_NATS: c->nats = optarg; break;
        case OPT_CHECK: *check = 1; break;
        case OPT_VERSION: printf("fairq-proxy %s\n", FAIRQ_VERSION); return -1;
        case OPT_HEALTH: *rc = health(optarg); return -1;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); *rc = 2; return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "fairq-proxy: unexpected argument: %s\n", argv[optind]);
        usage(stderr);
        *rc = 2;
        return -1;
    }
    return 0;
}

/* Run p until a signal stops it, with the stop watchdog and the signal
 * handlers in place; returns fq_proxy_run's exit code. */
static int run_until_stopped(fq_proxy *p)
{
    pthread_t dog;
    if (sem_init(&stopping, 0, 0) != 0 || pthread_create(&dog, NULL, watchdog, NULL) != 0) {
        fprintf(stderr, "fairq-proxy: cannot start the stop watchdog\n");
        return FQ_PROXY_EXIT_FATAL;
    }
    pthread_detach(dog);
    running = p;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = fq_proxy_run(p);
    running = NULL;
    return rc;
}

int main(int argc, char **argv)
{
    cli c = {.path = "config/fairq.yaml"};
    int check = 0, rc;
    if (parse_args(&c, &check, &rc, argc, argv) != 0)
        return rc;
    fq_config cfg;
    fq_proxy_ops ops = {.load = load, .load_arg = &c};
    char err[1024];
    if (load(&cfg, &c, err, sizeof err) != FQ_OK) {
        fprintf(stderr, "fairq-proxy: %s\n", err);
        return 2;
    }
    if (fq_log_init(cfg.log.level, cfg.log.format, err, sizeof err) != FQ_OK) {
        fprintf(stderr, "fairq-proxy: %s\n", err);
        fq_config_free(&cfg);
        return 2;
    }
    fq_proxy *p = NULL;
    if (fq_proxy_create(&p, &cfg, err, sizeof err) != FQ_OK) {
        fprintf(stderr, "fairq-proxy: %s: %s\n", c.path, err);
        fq_config_free(&cfg);
        return 2;
    }
    fq_proxy_set_ops(p, &ops);
    if (check) {
        printf("%s: ok\n", c.path);
        fq_proxy_destroy(p);
        fq_config_free(&cfg);
        return 0;
    }
    char desc[3072];
    fq_config_describe(&cfg, desc, sizeof desc);
    fq_log(FQ_LOG_INFO, "fairq-proxy starting", FQ_STR("version", FAIRQ_VERSION),
           FQ_STR("config", c.path), FQ_STR("effective", desc));
    fq_config_free(&cfg);
    rc = run_until_stopped(p);
    fq_proxy_destroy(p);
    return rc;
}
