#!/usr/bin/env bash
# bench-replicas.sh [BUILD_DIR]: fairq with 1, 2 and 3 replicas against the plain relay, on a 3-node JetStream cluster.
#
# Issue 16 point 7. Every measurement gets a fresh cluster of three
# nats-server nodes on loopback (scripts/nats-up.sh each, free ports,
# temporary stores, routes between them), streams and buckets with 3
# replicas. Two phases (PHASES, default "throughput fairness"):
#
#   throughput  RUNS times, alternating impl=relay, r1, r2, r3 (REPLICAS) so
#               that a noisy neighbour hits all alike: fairq-load submitting
#               as fast as MAX_OUT outstanding runs allow over TENANTS
#               tenants, its WORKERS simulated workers completing each run at
#               once (bench-proxy.sh's throughput phase). The relay
#               (cmd/fairq-relay --replicas 3) runs on a cluster without the
#               partition mapping (its stream takes fair.submit.<tenant>);
#               rN is N fairq-proxy replicas with partitions: PARTITIONS
#               (16), window.share on, streams.replicas 3, on a cluster that
#               maps every tenant's subjects to PARTITIONS partitions in each
#               node's config (config/nats-partitions.conf). Measured
#               after all partitions are owned and shared within one of even:
#               runs a second (steady, after WARMUP s: the
#               replicas take seconds to reach their rate), the CPU per run
#               of each replica and of the three nodes together (/proc), and,
#               from a core subscriber to $KV.> and fairq.share
#               (scripts/nats-tap.py), the KV writes a second (partition
#               lease renewals, registry renewals, the leader key) and the
#               heartbeats a second with their bytes.
#   fairness    point 4 live: two tenants with equal weights and equal run
#               costs (FAIR_COST tokens), submitted in turn and kept
#               backlogged (FAIR_OUT outstanding), a window of FAIR_WINDOW
#               runs, FAIR_WORKERS workers at FAIR_TPS tokens a second. For
#               each N >= 2 of REPLICAS: N replicas, the two tenants picked
#               (by the server's partition function) in partitions owned by
#               two different replicas, then one replica alone with the same
#               two tenants (once for every N that picked the same two). Each tenant's tokens dispatched (Fair-Tenant,
#               Fair-Est-Tokens of every dispatch, read by the tap) over
#               FAIR_SECS seconds after FAIR_WARM seconds; the error is the
#               difference of the first tenant's share from one proxy's.
#
# On a machine with few cores the replicas, the three nodes and the load
# share the same cores, so absolute throughput cannot grow with replicas:
# read the ratios and the CPU per run. Raw lines first, medians last, as
# key=value lines. Nothing is left running: every process it started is
# stopped on exit.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$here/bench-lib.sh"
bin=$(cd "${1:-$root/build}" && pwd)
RUNS=${RUNS:-1}
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-3}
TENANTS=${TENANTS:-48}
COSTS=${COSTS:-100:0.9,5000:0.1}
WORKERS=${WORKERS:-256}
BODY=${BODY:-512}
MAX_OUT=${MAX_OUT:-10000}
PARTITIONS=${PARTITIONS:-16}
REPLICAS=${REPLICAS:-1 2 3}
CONFIG=${CONFIG:-$root/config/bench.yaml}
FAIR_SECS=${FAIR_SECS:-10}
FAIR_WARM=${FAIR_WARM:-3}
FAIR_WINDOW=${FAIR_WINDOW:-16}
FAIR_WORKERS=${FAIR_WORKERS:-64}
FAIR_TPS=${FAIR_TPS:-10000}
FAIR_COST=${FAIR_COST:-1000}
FAIR_OUT=${FAIR_OUT:-600}
PHASES=${PHASES:-throughput fairness}
has_phase() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

for b in fairq-proxy fairq-relay fairq-load; do
    [ -x "$bin/$b" ] || { echo "bench: $bin/$b is missing: build first (make build)" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "bench: curl is needed (the nodes' /jsz)" >&2; exit 1; }

tmp=$(mktemp -d)
mon=()
impl_pids=()
tap_pid=""
cleanup() {
    stop_tap
    stop_impls
    cluster_down
    if [ -n "${KEEP:-}" ]; then echo "bench: its files are in $tmp" >&2; else rm -rf "$tmp"; fi
}
stop_tap() {
    [ -n "$tap_pid" ] || return 0
    kill -TERM "$tap_pid" 2>/dev/null || true
    wait "$tap_pid" 2>/dev/null || true
    tap_pid=""
}
# All at once: each replica's graceful stop hands its keys over.
stop_impls() {
    local p
    for p in "${impl_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${impl_pids[@]}"; do stop_pid "$p"; done
    impl_pids=()
}
cluster_down() {
    local i
    for i in 0 1 2; do "$here/nats-down.sh" "$tmp/n$i" 2>/dev/null || true; done
}
trap cleanup EXIT

# A fresh 3-node cluster, with the partition mapping if $1 is "mapped";
# sets urls (every node's, comma-separated), url (node 0's) and mon (the
# nodes' monitoring ports).
cluster_up() {
    cluster_down
    rm -rf "$tmp"/n?
    local i route=() u=()
    for i in 0 1 2; do route[i]=$("$here/free-port.sh"); done
    {
        printf 'cluster {\n  name: fairq-bench\n  routes: [\n'
        for i in 0 1 2; do printf '    nats-route://127.0.0.1:%s\n' "${route[i]}"; done
        printf '  ]\n}\n'
        [ "$1" != mapped ] || sed "s/partition(16,1)/partition($PARTITIONS,1)/" \
            "$root/config/nats-partitions.conf"
    } >"$tmp/cluster.conf"
    for i in 0 1 2; do
        mon[i]=$("$here/free-port.sh")
        u[i]=$("$here/nats-up.sh" "$tmp/n$i" -c "$tmp/cluster.conf" -n "n$i" \
            --cluster "nats://127.0.0.1:${route[i]}" -m "${mon[i]}")
    done
    urls=$(IFS=,; echo "${u[*]}")
    # fairq-proxy takes the list; the relay, fairq-load and the tap one URL.
    url=${u[0]}
    # Clustered JetStream serves once its meta group has a leader, and
    # places 3 replicas once the leader has heard both other nodes.
    for _ in $(seq 1 100); do
        for i in 0 1 2; do
            curl -s "http://127.0.0.1:${mon[i]}/jsz" >"$tmp/jsz" || true
            [ "$(grep -Eo '"current": *true' "$tmp/jsz" | wc -l)" -ge 2 ] && return 0
        done
        sleep 0.2
    done
    echo "bench: the cluster's JetStream has no meta leader with 3 peers" >&2
    exit 1
}
srv_cpu_ms() {
    local i s=0
    for i in 0 1 2; do s=$((s + $(cpu_ms "$(cat "$tmp/n$i/nats.pid")"))); done
    echo "$s"
}

# The proxy's config for replica $1: $2 the window (runs), share on.
proxy_yaml() {
    sed -e "s/^\( *max_in_flight:\).*/\1 $2/" -e '/^window:/a\  share: on' "$CONFIG"
    printf 'partitions: %s\nreplica_id: %s\nstreams:\n  replicas: 3\n' "$PARTITIONS" "$1"
}

# Start impl (relay, or rN: N replicas with window $2) on a fresh cluster,
# the tap subscribed ($3: its extra flags), and wait until one run goes
# through and, for replicas, the partitions are all owned, within one of even.
start() {
    local impl=$1 i n
    if [ "$impl" = relay ]; then cluster_up plain; else cluster_up mapped; fi
    rm -f "$tmp/tap.out" "$tmp/tap.out.owners"
    python3 "$here/nats-tap.py" "$url" "$tmp/tap.out" ${3:-} 2>"$tmp/tap.err" &
    tap_pid=$!
    if [ "$impl" = relay ]; then
        "$bin/fairq-relay" --nats "$url" --replicas 3 >"$tmp/impl-relay.log" 2>&1 &
        impl_pids=($!)
    else
        n=${impl#r}
        for i in $(seq 1 "$n"); do
            proxy_yaml "rep-$i" "$2" >"$tmp/rep-$i.yaml"
            "$bin/fairq-proxy" -c "$tmp/rep-$i.yaml" --nats "$urls" >"$tmp/impl-rep-$i.log" 2>&1 &
            impl_pids+=($!)
        done
    fi
    for _ in $(seq 1 60); do
        if "$bin/fairq-load" --nats "$url" --rate 0 --count 1 --duration 0 --tenants 1 \
            --workers 1 --drain 10 >"$tmp/probe.out" 2>&1 &&
            [ "$(field "$tmp/probe.out" runs completed_once)" = 1 ]; then
            [ "$impl" = relay ] && return 0
            for _ in $(seq 1 60); do balanced "$n" && return 0; sleep 0.5; done
            echo "bench: $impl: the partitions were not shared within 30 s; the keys' last" \
                 "writes:" $(awk '{ o[$2] = $3 } END { for (k in o) printf " p.%s=%s", k, o[k] }' \
                 "$tmp/tap.out.owners" 2>/dev/null) >&2
            cat "$tmp/tap.err" >&2
            break
        fi
        sleep 0.5
    done
    echo "bench: $impl did not come up; its logs:" >&2
    tail -n 20 "$tmp"/impl-*.log >&2
    exit 1
}

# Every partition's key (its last write the tap saw) held by one of the n
# replicas, each holding within one of the others.
balanced() {
    [ -f "$tmp/tap.out.owners" ] || return 1
    awk -v P="$PARTITIONS" -v n="$1" '{ o[$2] = $3 }
        END {
            for (k = 0; k < P; k++) { if (!(k in o) || o[k] !~ /^rep-/) exit 1; c[o[k]]++ }
            lo = P; hi = 0; m = 0
            for (id in c) { m++; if (c[id] < lo) lo = c[id]; if (c[id] > hi) hi = c[id] }
            exit !(m == n && hi - lo <= 1)
        }' "$tmp/tap.out.owners"
}
# The owner of partition $1, as the tap last saw it.
owner_of() { awk -v k="$1" '$2 == k { o = $3 } END { print o }' "$tmp/tap.out.owners"; }
# The first of the tenant ids f1, f2, ... whose partition (nats-server's
# function: 32-bit FNV-1a of the id, modulo P) is owned by replica $1.
tenant_on() {
    local id k
    for i in $(seq 1 500); do
        id=f$i
        k=$(python3 -c 'import sys
h = 2166136261
for b in sys.argv[1].encode(): h = ((h ^ b) * 16777619) & 0xffffffff
print(h % int(sys.argv[2]))' "$id" "$PARTITIONS")
        [ "$(owner_of "$k")" = "$1" ] && { echo "$id"; return 0; }
    done
    echo "bench: no tenant found on $1" >&2
    exit 1
}
# Zero the tap's counts now.
tap_reset() { kill -USR1 "$tap_pid"; sleep 0.2; }

uptime_load() { awk '{ print $1 "/" $2 "/" $3 }' /proc/loadavg; }
echo "bench: $(nproc) cores; load average $(uptime_load) (1/5/15 min); nats-server" \
     "$(nats-server --version | awk '{print $2}'), 3 nodes; runs=$RUNS duration_s=$DURATION" \
     "tenants=$TENANTS costs=$COSTS workers=$WORKERS body_bytes=$BODY max_outstanding=$MAX_OUT" \
     "partitions=$PARTITIONS replicas=\"$REPLICAS\""

impls="relay"
for n in $REPLICAS; do impls="$impls r$n"; done
has_phase throughput && for run in $(seq 1 "$RUNS"); do
    for impl in $impls; do
        start "$impl" 50000
        f=$tmp/thr-$impl-$run.out
        tap_reset
        cpu0=()
        for p in "${impl_pids[@]}"; do cpu0+=("$(cpu_ms "$p")"); done
        srv0=$(srv_cpu_ms)
        "$bin/fairq-load" --nats "$url" --tenants "$TENANTS" --costs "$COSTS" --body-size "$BODY" \
            --rate 0 --duration "$DURATION" --workers "$WORKERS" --max-outstanding "$MAX_OUT" \
            --warmup "$WARMUP" --verbose >"$f" 2>"$f.err" || {
            echo "bench: fairq-load failed:" >&2; cat "$f.err" >&2; exit 1; }
        srv=$(( $(srv_cpu_ms) - srv0 ))
        sub=$(field "$f" runs submitted)
        per=() sum=0 i=0
        for p in "${impl_pids[@]}"; do
            ms=$(( $(cpu_ms "$p") - cpu0[i] )); i=$((i + 1)); sum=$((sum + ms))
            per+=("$(awk -v ms="$ms" -v n="$sub" 'BEGIN { printf "%.1f", n ? ms * 1000 / n : 0 }')")
        done
        stop_tap
        stop_impls
        us() { awk -v ms="$1" -v n="$sub" 'BEGIN { printf "%.1f", n ? ms * 1000 / n : 0 }'; }
        t=$tmp/tap.out
        echo "bench phase=throughput impl=$impl run=$run load=$(uptime_load)" \
             "steady_per_s=$(field "$f" throughput steady_per_s)" \
             "completed_per_s=$(field "$f" throughput completed_per_s)" \
             "cpu_us_per_run_impl=$(us "$sum") cpu_us_per_run_replicas=$(IFS=/; echo "${per[*]}")" \
             "cpu_us_per_run_servers=$(us "$srv")" \
             "kv_writes_per_s=$(field "$t" tap kv_writes_per_s)" \
             "kv_partition_per_s=$(field "$t" tap kv_partition_per_s)" \
             "kv_registry_per_s=$(field "$t" tap kv_registry_per_s)" \
             "kv_leader_per_s=$(field "$t" tap kv_leader_per_s)" \
             "share_msgs_per_s=$(field "$t" tap share_msgs_per_s)" \
             "share_bytes_per_s=$(field "$t" tap share_bytes_per_s)" \
             "share_wire_bytes_per_s=$(field "$t" tap share_wire_bytes_per_s)" \
             "submitted=$sub completed_once=$(field "$f" runs completed_once)" \
             "missing=$(field "$f" runs missing) dispatched_more=$(field "$f" runs dispatched_more)" |
            tee "$f.line"
        [ "$(field "$f" runs missing)" = 0 ] && [ "$(field "$f" runs completed_more)" = 0 ] ||
            echo "bench: WARNING throughput $impl run $run: runs missing or completed twice" >&2
    done
done

# One fairness measurement: impl with the tenants $2 and $3; prints the
# first tenant's share of the tokens dispatched in the interval.
fair_run() {
    local impl=$1 a=$2 b=$3 f=$tmp/fair-$1-$2-$3.out
    "$bin/fairq-load" --nats "$url" --tenants "$a,$b" --in-turn --costs "$FAIR_COST" \
        --body-size "$BODY" --rate 0 --duration $((FAIR_WARM + FAIR_SECS)) \
        --workers "$FAIR_WORKERS" --tokens-per-sec "$FAIR_TPS" --max-outstanding "$FAIR_OUT" \
        --warmup 1 >"$f" 2>"$tmp/load.err" || {
        echo "bench: fairq-load failed:" >&2; cat "$tmp/load.err" >&2; exit 1; }
    stop_tap
    stop_impls
    local ta tb
    ta=$(field "$tmp/tap.out" tap "tokens_$a")
    tb=$(field "$tmp/tap.out" tap "tokens_$b")
    echo "bench phase=fairness impl=$impl load=$(uptime_load) tenants=$a,$b" \
         "interval_s=$FAIR_SECS tokens_$a=${ta:-0} tokens_$b=${tb:-0}" \
         "in_flight_mean=$(field "$tmp/tap.out" tap in_flight_mean)" \
         "in_flight_peak=$(field "$tmp/tap.out" tap in_flight_peak)" \
         "share_$a=$(awk -v a="${ta:-0}" -v b="${tb:-0}" 'BEGIN { printf "%.4f", a + b ? a / (a + b) : 0 }')" \
         "missing=$(field "$f" runs missing) completed_more=$(field "$f" runs completed_more)" >&2
    awk -v a="${ta:-0}" -v b="${tb:-0}" 'BEGIN { printf "%.4f", a + b ? a / (a + b) : 0 }'
}

fair_tap="--dispatch fair.dispatch --from $FAIR_WARM --to $((FAIR_WARM + FAIR_SECS))"
has_phase fairness && for n in $REPLICAS; do
    [ "$n" -ge 2 ] || continue
    start "r$n" "$FAIR_WINDOW" "$fair_tap"
    a=$(tenant_on rep-1)
    b=$(tenant_on rep-2)
    tap_reset
    share_n=$(fair_run "r$n" "$a" "$b")
    if [ "${one_pair:-}" != "$a,$b" ]; then
        start r1 "$FAIR_WINDOW" "$fair_tap"
        tap_reset
        share_1=$(fair_run "r1" "$a" "$b")
        one_pair=$a,$b
    fi
    echo "bench summary fairness replicas=$n tenants=$a(rep-1),$b(rep-2) weights=1:1" \
         "cost_tokens=$FAIR_COST window=$FAIR_WINDOW interval_s=$FAIR_SECS" \
         "share_$a=$share_n share_${a}_one_proxy=$share_1" \
         "error=$(awk -v x="$share_n" -v y="$share_1" 'BEGIN { d = x - y; printf "%.4f", d < 0 ? -d : d }')" \
         "relative_error=$(awk -v x="$share_n" -v y="$share_1" 'BEGIN { d = (x - y) / (y ? y : 1); printf "%.3f", d < 0 ? -d : d }')" \
         "target_relative_error=0.10"
done

# Medians over the runs, each replica count against the relay run just
# before it (drift on a shared machine cancels within a pair).
# Key $2 of the throughput lines of impl $1 (of run $3 only, if given).
kv() {
    for l in "$tmp"/thr-"$1"-${3:-*}.out.line; do
        awk -v k="$2" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$l"
    done
}
has_phase throughput && {
for impl in $impls; do
    ratio=$(for run in $(seq 1 "$RUNS"); do
        awk -v p="$(kv "$impl" steady_per_s "$run")" -v r="$(kv relay steady_per_s "$run")" \
            'BEGIN { print r ? p / r : 0 }'
    done | median)
    n=1
    [ "$impl" = relay ] || n=${impl#r}
    echo "bench summary throughput impl=$impl steady_per_s=$(kv "$impl" steady_per_s | median)" \
         "ratio_to_relay=$(printf '%.2f' "$ratio") cpu_us_per_run_impl=$(kv "$impl" cpu_us_per_run_impl | median)" \
         "cpu_us_per_run_per_replica=$(kv "$impl" cpu_us_per_run_impl | median | awk -v n="$n" '{ printf "%.1f", $1 / n }')" \
         "cpu_us_per_run_servers=$(kv "$impl" cpu_us_per_run_servers | median)" \
         "kv_writes_per_s=$(kv "$impl" kv_writes_per_s | median)" \
         "kv_partition_per_s=$(kv "$impl" kv_partition_per_s | median)" \
         "kv_registry_per_s=$(kv "$impl" kv_registry_per_s | median)" \
         "share_msgs_per_s=$(kv "$impl" share_msgs_per_s | median)" \
         "share_bytes_per_s=$(kv "$impl" share_bytes_per_s | median)"
done
}
echo "bench: load average at the end $(uptime_load)"
