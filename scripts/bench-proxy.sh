#!/usr/bin/env bash
# bench-proxy.sh [BUILD_DIR]: fairq-proxy against the plain relay, same load, same workers, same server.
#
# Three measurements, each for the relay (cmd/fairq-relay: fetch 256, publish
# asynchronously, wait for the PubAcks, ack the batch) and the proxy
# (build/fairq-proxy -c config/bench.yaml), alternating relay, proxy, relay,
# ... RUNS times so that a noisy neighbour on the machine hits both alike:
#
#   throughput  fairq-load submitting as fast as MAX_OUT outstanding runs allow,
#               its simulated workers completing each run at once: runs a
#               second end to end (submit, dispatch, completion; the proxy also
#               reconciles), measured after a warm-up;
#   latency     RATE_LOW runs a second: submit -> dispatch p50 and p99;
#               Also the CPU time the relay or proxy and nats-server used per
#               run, which a busy neighbour on the machine disturbs far less
#               than it disturbs a rate, and the dispatcher's context switches
#               per run (every thread put to sleep and woken again);
#   memory      the proxy alone with no workers: RSS before and after it has
#               fetched MEM_RUNS runs, with the bodies in memory and with only
#               index entries (max_buffered_bytes 1 MiB).
#
# With BASELINE=PATH, a second fairq-proxy binary joins the throughput
# and latency phases as impl=base (relay, proxy, base, relay, ...), and the memory phase
# (proxy, then base, with bodies and then index only), so that a change to
# the proxy is measured against the commit before it in the same run.
# PHASES (default "throughput latency memory") picks the phases to run.
#
# With PARTITIONS=P (> 1), the same proxy configured with partitions: P
# joins the throughput and latency phases as impl=parts (relay, proxy,
# parts, ...), on a server that maps tenants' subjects to P partitions as
# config/nats-partitions.conf does, its streams made for P: one replica
# owning every partition, 2P consumers on natsio's one fetch thread,
# against the same proxy with P = 1 in the same run.
#
# Every phase gets a nats-server of its own (scripts/nats-up.sh, the same
# binary and flags, a fresh store), so no phase inherits another's streams,
# consumers or files. The medians of the runs are printed last; the raw
# figures of each run before them, as key=value lines.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$here/bench-lib.sh"
bin=$(cd "${1:-$root/build}" && pwd)
RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
TENANTS=${TENANTS:-10}
COSTS=${COSTS:-100:0.9,5000:0.1}
WORKERS=${WORKERS:-256}
BODY=${BODY:-512}
MAX_OUT=${MAX_OUT:-10000}
RATE_LOW=${RATE_LOW:-200}
LAT_SECS=${LAT_SECS:-10}
MEM_RUNS=${MEM_RUNS:-200000}
CONFIG=${CONFIG:-$root/config/bench.yaml}
# Another fairq-proxy binary (an older commit's, say) to measure in the
# throughput phase too, as impl=base, alternating with the other two.
BASELINE=${BASELINE:-}
PHASES=${PHASES:-throughput latency memory}
PARTITIONS=${PARTITIONS:-}
has_phase() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

for b in fairq-proxy fairq-relay fairq-load; do
    [ -x "$bin/$b" ] || { echo "bench: $bin/$b is missing: build first (make build)" >&2; exit 1; }
done
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "bench: BASELINE $BASELINE is not executable" >&2; exit 1; }

tmp=$(mktemp -d)
impl_pid=""
cleanup() {
    stop_impl
    "$here/nats-down.sh" "$tmp/nats" 2>/dev/null || true
    rm -rf "$tmp"
}
stop_impl() {
    stop_pid "$impl_pid"
    impl_pid=""
}
trap cleanup EXIT


# Start a fresh server and IMPL (relay, proxy, or a proxy config file, run
# by the proxy binary $2 if given).
start() {
    "$here/nats-down.sh" "$tmp/nats" 2>/dev/null || true
    rm -rf "$tmp/nats"
    local srv_args=()
    [ "$1" != parts ] || srv_args=(-c "$tmp/mapping.conf")
    url=$("$here/nats-up.sh" "$tmp/nats" "${srv_args[@]}")
    case $1 in
    relay) "$bin/fairq-relay" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
    proxy) "$bin/fairq-proxy" -c "$CONFIG" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
    base) "$BASELINE" -c "$CONFIG" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
    parts) "$bin/fairq-proxy" -c "$tmp/parts.yaml" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
    *) "${2:-$bin/fairq-proxy}" -c "$1" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
    esac
    impl_pid=$!
}

# Wait until one run goes all the way through (submit, dispatch, completion).
ready() {
    for _ in $(seq 1 40); do
        if "$bin/fairq-load" --nats "$url" --rate 0 --count 1 --duration 0 --tenants 1 \
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

# Run the load against IMPL and keep its report as $tmp/PHASE-IMPL-N.out.
load() {
    local phase=$1 impl=$2 n=$3; shift 3
    start "$impl"
    ready "$impl"
    local impl0 srv0 ctx0
    impl0=$(cpu_ms "$impl_pid")
    ctx0=$(ctx_switches "$impl_pid")
    srv0=$(cpu_ms "$(cat "$tmp/nats/nats.pid")")
    "$bin/fairq-load" --nats "$url" --tenants "$TENANTS" --costs "$COSTS" --body-size "$BODY" \
        "$@" >"$tmp/$phase-$impl-$n.out" 2>"$tmp/load.err" || {
        echo "bench: fairq-load failed:" >&2; cat "$tmp/load.err" >&2; exit 1; }
    echo "cpu impl_ms=$(( $(cpu_ms "$impl_pid") - impl0 ))" \
         "server_ms=$(( $(cpu_ms "$(cat "$tmp/nats/nats.pid")") - srv0 ))" \
         "impl_ctx=$(( $(ctx_switches "$impl_pid") - ctx0 ))" >>"$tmp/$phase-$impl-$n.out"
    stop_impl
    local f=$tmp/$phase-$impl-$n.out
    local sub once miss
    sub=$(field "$f" runs submitted)
    once=$(field "$f" runs completed_once)
    miss=$(field "$f" runs missing)
    [ "$sub" = "$once" ] && [ "$miss" = 0 ] ||
        echo "bench: WARNING $phase $impl run $n: $once of $sub runs completed once, $miss missing" >&2
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$impl_pid/status"; }
# CPU microseconds per submitted run of one process, from a load report.
per_run() {
    awk -v ms="$(field "$1" cpu "$2")" -v n="$(field "$1" runs submitted)" 'BEGIN { printf "%.1f", n ? ms * 1000 / n : 0 }'
}
# Context switches per submitted run of the dispatcher, from a load report.
ctx_per_run() {
    awk -v c="$(field "$1" cpu impl_ctx)" -v n="$(field "$1" runs submitted)" 'BEGIN { printf "%.2f", n ? c / n : 0 }'
}

# RSS growth of the proxy (or the binary $3, impl=base) while it fetches
# MEM_RUNS runs and no worker runs.
memory() {
    local cfg=$1 label=$2 before after last stable=0 impl=proxy
    [ -z "${3:-}" ] || impl=base
    start "$cfg" "${3:-}"
    sleep 3
    before=$(rss_kb)
    "$bin/fairq-load" --nats "$url" --rate 0 --count "$MEM_RUNS" --duration 0 --workers 0 \
        --tenants "$TENANTS" --costs "$COSTS" --body-size "$BODY" >"$tmp/mem-$label.out" 2>&1 ||
        { cat "$tmp/mem-$label.out" >&2; exit 1; }
    last=$(rss_kb)
    for _ in $(seq 1 120); do
        sleep 0.5
        after=$(rss_kb)
        if [ "$after" -le "$last" ]; then stable=$((stable + 1)); else stable=0; fi
        last=$after
        [ "$stable" -ge 6 ] && break
    done
    stop_impl
    echo "bench phase=memory impl=$impl buffering=$label runs=$MEM_RUNS body_bytes=$BODY rss_before_kb=$before" \
        "rss_after_kb=$after bytes_per_run=$(( (after - before) * 1024 / MEM_RUNS ))"
}

echo "bench: $(nproc) cores; nats-server $(nats-server --version | awk '{print $2}');" \
     "runs=$RUNS duration_s=$DURATION tenants=$TENANTS costs=$COSTS workers=$WORKERS" \
     "body_bytes=$BODY max_outstanding=$MAX_OUT rate_low=$RATE_LOW mem_runs=$MEM_RUNS"

if [ -n "$PARTITIONS" ]; then
    { cat "$CONFIG"; printf 'partitions: %s\n' "$PARTITIONS"; } >"$tmp/parts.yaml"
    sed "s/partition(16,1)/partition($PARTITIONS,1)/" "$root/config/nats-partitions.conf" \
        >"$tmp/mapping.conf"
fi
thr_impls="relay proxy${BASELINE:+ base}${PARTITIONS:+ parts}"
lat_impls="relay proxy${BASELINE:+ base}${PARTITIONS:+ parts}"
has_phase throughput && for n in $(seq 1 "$RUNS"); do
    for impl in $thr_impls; do
        load thr "$impl" "$n" --rate 0 --duration "$DURATION" --workers "$WORKERS" \
            --max-outstanding "$MAX_OUT" --warmup 2
        f=$tmp/thr-$impl-$n.out
        echo "bench phase=throughput impl=$impl run=$n steady_per_s=$(field "$f" throughput steady_per_s)" \
             "cpu_us_per_run_$impl=$(per_run "$f" impl_ms) cpu_us_per_run_server=$(per_run "$f" server_ms)" \
             "ctx_per_run_$impl=$(ctx_per_run "$f")" \
             "completed_per_s=$(field "$f" throughput completed_per_s) submitted=$(field "$f" runs submitted)" \
             "completed_once=$(field "$f" runs completed_once) missing=$(field "$f" runs missing)" \
             "dispatched_more=$(field "$f" runs dispatched_more)"
    done
done
has_phase latency && for n in $(seq 1 "$RUNS"); do
    for impl in $lat_impls; do
        load lat "$impl" "$n" --rate "$RATE_LOW" --duration "$LAT_SECS" --workers 16 --send-asap
        f=$tmp/lat-$impl-$n.out
        echo "bench phase=latency impl=$impl run=$n rate=$RATE_LOW" \
             "runs=$(field "$f" latency runs) p50_ms=$(field "$f" latency dispatch_p50_ms)" \
             "p99_ms=$(field "$f" latency dispatch_p99_ms) max_ms=$(field "$f" latency dispatch_max_ms)"
    done
done

# The memory phase holds runs buffered, not in flight: a window of 64.
if has_phase memory; then
    sed 's/^\( *max_in_flight:\).*/\1 64/' "$CONFIG" >"$tmp/mem-full.yaml"
    { cat "$tmp/mem-full.yaml"; printf 'limits:\n  max_buffered_bytes: 1048576\n'; } >"$tmp/mem-index.yaml"
    memory "$tmp/mem-full.yaml" bodies | tee "$tmp/mem.txt"
    memory "$tmp/mem-index.yaml" index | tee -a "$tmp/mem.txt"
    if [ -n "$BASELINE" ]; then
        memory "$tmp/mem-full.yaml" bodies "$BASELINE" | tee -a "$tmp/mem.txt"
        memory "$tmp/mem-index.yaml" index "$BASELINE" | tee -a "$tmp/mem.txt"
    fi
fi

# bytes_per_run of the memory line of impl and buffering.
mem_of() {
    awk -v i="impl=$1" -v b="buffering=$2" '$0 ~ i" " && $0 ~ b" " { for (k = 1; k <= NF; k++) if ($k ~ /^bytes_per_run=/) { sub(/.*=/, "", $k); print $k } }' "$tmp/mem.txt"
}
med() { for n in $(seq 1 "$RUNS"); do field "$tmp/$1-$2-$n.out" "$3" "$4"; done | median; }
has_phase throughput && {
relay_thr=$(med thr relay throughput steady_per_s)
proxy_thr=$(med thr proxy throughput steady_per_s)
# Each proxy run against the relay run just before it: drift on a shared
# machine cancels within a pair.
pairs=$(for n in $(seq 1 "$RUNS"); do
    awk -v p="$(field "$tmp/thr-proxy-$n.out" throughput steady_per_s)" \
        -v r="$(field "$tmp/thr-relay-$n.out" throughput steady_per_s)" 'BEGIN { print r ? p / r : 0 }'
done | median)
if [ -n "$BASELINE" ]; then
    base_thr=$(med thr base throughput steady_per_s)
    base_pairs=$(for n in $(seq 1 "$RUNS"); do
        awk -v p="$(field "$tmp/thr-base-$n.out" throughput steady_per_s)" \
            -v r="$(field "$tmp/thr-relay-$n.out" throughput steady_per_s)" 'BEGIN { print r ? p / r : 0 }'
    done | median)
    echo "bench summary throughput_base=$base_thr" \
         "ratio_base=$(awk -v p="$base_thr" -v r="$relay_thr" 'BEGIN { printf "%.2f", r ? p / r : 0 }')" \
         "ratio_pairs_base=$(printf '%.2f' "$base_pairs")"
fi
echo "bench summary throughput_relay=$relay_thr throughput_proxy=$proxy_thr" \
     "ratio=$(awk -v p="$proxy_thr" -v r="$relay_thr" 'BEGIN { printf "%.2f", r ? p / r : 0 }')" \
     "ratio_pairs=$(printf '%.2f' "$pairs") target_ratio=0.8"
for impl in $thr_impls; do
    echo "bench summary cpu_impl=$impl" \
         "us_per_run_$impl=$(for n in $(seq 1 "$RUNS"); do per_run "$tmp/thr-$impl-$n.out" impl_ms; echo; done | median)" \
         "us_per_run_server=$(for n in $(seq 1 "$RUNS"); do per_run "$tmp/thr-$impl-$n.out" server_ms; echo; done | median)" \
         "ctx_per_run_$impl=$(for n in $(seq 1 "$RUNS"); do ctx_per_run "$tmp/thr-$impl-$n.out"; echo; done | median)"
done
}
has_phase latency && for impl in $lat_impls; do
    echo "bench summary latency_impl=$impl rate=$RATE_LOW p50_ms=$(med lat "$impl" latency dispatch_p50_ms)" \
         "p99_ms=$(med lat "$impl" latency dispatch_p99_ms) target_p99_ms=2"
done
# P partitions against P = 1: each parts run against the proxy run just
# before it, and the medians.
[ -n "$PARTITIONS" ] && {
has_phase throughput && echo "bench summary partitions=$PARTITIONS" \
    "throughput_p1=$(med thr proxy throughput steady_per_s)" \
    "throughput_p$PARTITIONS=$(med thr parts throughput steady_per_s)" \
    "ratio_pairs=$(for n in $(seq 1 "$RUNS"); do
        awk -v p="$(field "$tmp/thr-parts-$n.out" throughput steady_per_s)" \
            -v r="$(field "$tmp/thr-proxy-$n.out" throughput steady_per_s)" 'BEGIN { print r ? p / r : 0 }'
    done | median | xargs printf '%.2f')"
has_phase latency && echo "bench summary partitions=$PARTITIONS" \
    "p99_ms_p1=$(med lat proxy latency dispatch_p99_ms)" \
    "p99_ms_p$PARTITIONS=$(med lat parts latency dispatch_p99_ms)" \
    "p99_ratio_pairs=$(for n in $(seq 1 "$RUNS"); do
        awk -v p="$(field "$tmp/lat-parts-$n.out" latency dispatch_p99_ms)" \
            -v r="$(field "$tmp/lat-proxy-$n.out" latency dispatch_p99_ms)" 'BEGIN { print r ? p / r : 0 }'
    done | median | xargs printf '%.2f')"
}
has_phase memory && {
echo "bench summary memory_bodies_bytes_per_run=$(mem_of proxy bodies)" \
     "memory_index_bytes_per_run=$(mem_of proxy index)"
[ -z "$BASELINE" ] || echo "bench summary memory_bodies_bytes_per_run_base=$(mem_of base bodies)" \
     "memory_index_bytes_per_run_base=$(mem_of base index)"
}
true
