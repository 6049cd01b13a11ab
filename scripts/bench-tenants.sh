#!/usr/bin/env bash
# bench-tenants.sh [BUILD_DIR]: a small tenant's submit -> dispatch latency while the proxy knows many idle tenants.
#
# Three phases, each for the proxy of BUILD_DIR (impl=proxy) and, with
# BASELINE=PATH, another fairq-proxy binary (impl=base) in the same run:
#
#   few      the floor: as idle below with FEW_TENANTS tenants, what the
#            machine gives whatever the number of tenants;
#   idle     the proxy is made to know TENANTS tenants (fairq-load --in-turn:
#            one run each, completed, so they are idle and not yet forgotten:
#            that takes run_timeout_ms, 10 minutes in config/bench.yaml), then
#            one small tenant submits RATE runs a second for LAT_SECS seconds:
#            submit -> dispatch p50, p99 and max of its runs;
#   scrape   the same with SCRAPE_TENANTS known tenants while /metrics is
#            scraped in a loop (curl, SCRAPE_GAP seconds between scrapes,
#            default 0: back to back; the default http.max_tenant_series
#            folds the rest into _other): the same figures, and the scrapes
#            made and the size of one.
#
# PHASES (default "few idle scrape") picks the phases. The proxy's CPU
# time over each measurement and its RSS once the tenants are known are
# printed beside them. Every phase gets a nats-server of its own
# (scripts/nats-up.sh, a fresh store) and everything is stopped at the end. The figures of each run are printed as key=value lines, the medians
# of RUNS runs last.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$here/bench-lib.sh"
bin=$(cd "${1:-$root/build}" && pwd)
RUNS=${RUNS:-1}
TENANTS=${TENANTS:-200000}
SCRAPE_TENANTS=${SCRAPE_TENANTS:-50000}
FEW_TENANTS=${FEW_TENANTS:-1000}
SCRAPE_GAP=${SCRAPE_GAP:-0}
RATE=${RATE:-50}
LAT_SECS=${LAT_SECS:-15}
CONFIG=${CONFIG:-$root/config/bench.yaml}
BASELINE=${BASELINE:-}
# BASELINE's config: an older proxy refuses keys it does not know yet.
BASE_CONFIG=${BASE_CONFIG:-$CONFIG}
PHASES=${PHASES:-few idle scrape}

for b in fairq-proxy fairq-load; do
    [ -x "$bin/$b" ] || { echo "bench: $bin/$b is missing: build first (make build)" >&2; exit 1; }
done
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "bench: BASELINE $BASELINE is not executable" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench: curl is needed for the scrapes" >&2; exit 1; }

tmp=$(mktemp -d)
impl_pid=""
scrape_pid=""
cleanup() {
    stop_scrapes
    stop_impl
    "$here/nats-down.sh" "$tmp/nats" 2>/dev/null || true
    rm -rf "$tmp"
}
stop_impl() {
    stop_pid "$impl_pid"
    impl_pid=""
}
stop_scrapes() {
    [ -n "$scrape_pid" ] || return 0
    kill -TERM "$scrape_pid" 2>/dev/null || true
    wait "$scrape_pid" 2>/dev/null || true
    scrape_pid=""
}
trap cleanup EXIT

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$impl_pid/status"; }

# A fresh server and IMPL (proxy or base), serving /metrics on a free port.
start() {
    "$here/nats-down.sh" "$tmp/nats" 2>/dev/null || true
    rm -rf "$tmp/nats"
    url=$("$here/nats-up.sh" "$tmp/nats")
    port=$("$here/free-port.sh")
    local cfg=$CONFIG
    [ "$1" = proxy ] || cfg=$BASE_CONFIG
    sed "s/^\( *listen:\).*/\1 127.0.0.1:$port/" "$cfg" >"$tmp/proxy.yaml"
    case $1 in
    proxy) "$bin/fairq-proxy" -c "$tmp/proxy.yaml" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
    base) "$BASELINE" -c "$tmp/proxy.yaml" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
    esac
    impl_pid=$!
    for _ in $(seq 1 40); do
        if "$bin/fairq-load" --nats "$url" --rate 0 --count 1 --duration 0 --tenants ready \
            --workers 1 --drain 10 >"$tmp/probe.out" 2>&1 &&
            [ "$(field "$tmp/probe.out" runs completed_once)" = 1 ]; then
            return 0
        fi
        kill -0 "$impl_pid" 2>/dev/null || break
        sleep 0.5
    done
    echo "bench: $1 did not come up; its log:" >&2
    cat "$tmp/impl.log" >&2
    exit 1
}

# One run for each of N tenants t1..tN, all completed.
populate() {
    local n=$1 f=$tmp/populate.out
    "$bin/fairq-load" --nats "$url" --rate 0 --count "$n" --duration 0 --tenants "$n" --in-turn \
        --costs 100 --body-size 64 --workers 64 --drain 120 >"$f" 2>"$tmp/load.err" || {
        echo "bench: fairq-load failed:" >&2; cat "$tmp/load.err" >&2; exit 1; }
    [ "$(field "$f" runs completed_once)" = "$n" ] ||
        echo "bench: WARNING $(field "$f" runs completed_once) of $n runs completed once" >&2
}

# /metrics back to back until stopped; a line per scrape: bytes and seconds.
scrapes() {
    trap 'exit 0' TERM
    while :; do
        curl -s -o /dev/null -w '%{size_download} %{time_total}\n' "http://127.0.0.1:$port/metrics" ||
            sleep 0.1
        [ "$SCRAPE_GAP" = 0 ] || sleep "$SCRAPE_GAP"
    done
}

# The small tenant's runs, and the proxy's CPU meanwhile.
measure() {
    local out=$1 c0
    c0=$(cpu_ms "$impl_pid")
    "$bin/fairq-load" --nats "$url" --tenants small --rate "$RATE" --duration "$LAT_SECS" \
        --costs 100 --body-size 64 --workers 4 --send-asap --drain 30 >"$out" 2>"$tmp/load.err" || {
        echo "bench: fairq-load failed:" >&2; cat "$tmp/load.err" >&2; exit 1; }
    echo "cpu impl_ms=$(( $(cpu_ms "$impl_pid") - c0 ))" >>"$out"
}

echo "bench: $(nproc) cores; nats-server $(nats-server --version | awk '{print $2}');" \
     "runs=$RUNS few_tenants=$FEW_TENANTS tenants=$TENANTS scrape_tenants=$SCRAPE_TENANTS" \
     "rate=$RATE lat_s=$LAT_SECS scrape_gap_s=$SCRAPE_GAP phases=\"$PHASES\""

impls="proxy${BASELINE:+ base}"
# Phase by phase, proxy and base one after the other, so that a busy spell
# of the machine falls on both alike.
for n in $(seq 1 "$RUNS"); do
    for phase in $PHASES; do
        for impl in $impls; do
            case $phase in
            few) tenants=$FEW_TENANTS ;;
            idle) tenants=$TENANTS ;;
            scrape) tenants=$SCRAPE_TENANTS ;;
            *) echo "bench: unknown phase $phase" >&2; exit 1 ;;
            esac
            start "$impl"
            populate "$tenants"
            rss=$(rss_kb)
            f=$tmp/$phase-$impl-$n.out
            if [ "$phase" = scrape ]; then
                scrapes >"$tmp/scrapes.txt" &
                scrape_pid=$!
            fi
            measure "$f"
            stop_scrapes
            stop_impl
            extra=""
            if [ "$phase" = scrape ]; then
                awk '{ n++; b = $1; t += $2 } END { printf "scrapes n=%d bytes=%d mean_s=%.3f\n", n, b, n ? t / n : 0 }' \
                    "$tmp/scrapes.txt" >>"$f"
                extra="scrapes=$(field "$f" scrapes n) scrape_bytes=$(field "$f" scrapes bytes)"
                extra="$extra scrape_mean_s=$(field "$f" scrapes mean_s)"
            fi
            echo "bench phase=$phase impl=$impl run=$n tenants=$tenants rss_kb=$rss" \
                 "runs=$(field "$f" latency runs) p50_ms=$(field "$f" latency dispatch_p50_ms)" \
                 "p99_ms=$(field "$f" latency dispatch_p99_ms) max_ms=$(field "$f" latency dispatch_max_ms)" \
                 "cpu_ms=$(field "$f" cpu impl_ms) $extra"
        done
    done
done

med() { for n in $(seq 1 "$RUNS"); do field "$tmp/$1-$2-$n.out" "$3" "$4"; done | median; }
for phase in $PHASES; do
    for impl in $impls; do
        echo "bench summary phase=$phase impl=$impl" \
             "p50_ms=$(med "$phase" "$impl" latency dispatch_p50_ms)" \
             "p99_ms=$(med "$phase" "$impl" latency dispatch_p99_ms)" \
             "max_ms=$(med "$phase" "$impl" latency dispatch_max_ms) target_p99_ms=10"
    done
done
