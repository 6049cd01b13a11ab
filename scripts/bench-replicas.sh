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
#   fairness    point 4 live, RUNS times, each case of FAIR_CASES on N
#               replicas (each N >= 2 of REPLICAS) and then on one replica
#               alone with the same tenants (once for every N that picked
#               the same ones), a window of FAIR_WINDOW runs, FAIR_WORKERS
#               workers. fairq-load replays a scenario file made here:
#               each tenant's runs come in a burst in the first second, more
#               than the whole window could serve, so each stays backlogged;
#               its workers take actual_tokens / FAIR_TPS seconds a run and
#               report actual_tokens. Tenants are picked by the server's
#               partition function on partitions of rep-1 and rep-2.
#                 equal    two tenants, weight 1, FAIR_COST-token runs
#                 costs50  the same, the second's runs 50 x FAIR_COST
#                          tokens, its burst a second later
#                 weights  the first of weight 3 (a plan of proxy_yaml)
#                 tuesday  a flood of 0.8 to 1.2 x FAIR_COST-token runs on
#                          rep-1 (at FAIR_TUESDAY_TPS: about a second a
#                          run), then FAIR_SMALL small tenants on rep-2 with
#                          one run each, FAIR_WARM s in
#               The tap counts the tokens the workers processed for each
#               tenant over FAIR_SECS seconds after FAIR_WARM (a second
#               more for costs50): each completion's actual_tokens spread
#               over its service, a run in flight at the end from its
#               dispatch. Reported: the first tenant's share (equal,
#               costs50), the weight-3 tenant's tokens per the other's
#               (weights), the small tenants' longest first wait (tuesday:
#               submit to dispatch, fairq-load's first_ms), each beside one
#               replica's, and medians over the runs. A measurement
#               is void (left out) when a tenant had no dispatch or a
#               partition's key changed hands (moved=) or was lost
#               (lost=: a replica unscheduled past the lease TTL); with
#               KEEP=1 each one's proxy logs and tap report stay in the
#               temporary directory (fair-CASE-IMPL-RUN.out.*).
#   freeze      (not run by default) RUNS times, one replica alone under a
#               steady FREEZE_RATE runs a second over TENANTS tenants (runs
#               take no time), stopped (SIGSTOP) FREEZE_AT s in for
#               FREEZE_SECS s, past the lease TTL (3 s), then resumed: it
#               loses every key, takes them back in new terms and makes its
#               2 x PARTITIONS consumers again. A tenant's longest wait
#               (submit to dispatch) is a run's submitted just after the
#               stop: less FREEZE_SECS, it is how long after the resume its
#               partition dispatched again (give or take the interval
#               between its submits, TENANTS / FREEZE_RATE s). Reported: the
#               least of that over the tenants (the first partition back),
#               the median and the most (the last), and the leases lost.
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
FAIR_CASES=${FAIR_CASES:-equal costs50 weights tuesday}
FAIR_TUESDAY_TPS=${FAIR_TUESDAY_TPS:-1000}
FAIR_SMALL=${FAIR_SMALL:-10}
FREEZE_AT=${FREEZE_AT:-4}
FREEZE_SECS=${FREEZE_SECS:-4}
FREEZE_RATE=${FREEZE_RATE:-200}
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
owners_at_start=""
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
# The tenants h1 .. h64 are on a plan of weight 3 (the fairness phase's
# weights case picks one of them).
proxy_yaml() {
    local h
    sed -e "s/^\( *max_in_flight:\).*/\1 $2/" -e '/^window:/a\  share: on' \
        -e '/^plans:/a\  - name: heavy\n    weight: 3\n    max_pending: 1000000' "$CONFIG"
    printf 'partitions: %s\nreplica_id: %s\nstreams:\n  replicas: 3\ntenants:\n' "$PARTITIONS" "$1"
    for h in $(seq 1 64); do printf '  - id: h%s\n    plan: heavy\n' "$h"; done
}

# Start impl (relay, or rN: N replicas with window $2) on a fresh cluster,
# the tap subscribed ($3: its extra flags), and wait until one run goes
# through and, for replicas, the partitions are all owned, within one of even.
start() {
    local impl=$1 i n
    if [ "$impl" = relay ]; then cluster_up plain; else cluster_up mapped; fi
    rm -f "$tmp/tap.out" "$tmp/tap.out.owners" "$tmp"/impl-*.log
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
            # balanced, and no key changed hands for two seconds: the
            # planned moves are over (one may still be to come between two
            # balanced looks)
            local was="" same=0 now
            for _ in $(seq 1 60); do
                if balanced "$n"; then
                    now=$(owners_now)
                    if [ "$now" = "$was" ]; then same=$((same + 1)); else same=0; fi
                    was=$now
                    [ "$same" -lt 2 ] || { owners_at_start=$now; return 0; }
                else
                    was="" same=0
                fi
                sleep 1
            done
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

# The fairness cases (FAIR_CASES), each a scenario file that fairq-load
# replays: every tenant's runs submitted in the first second (a burst), far
# more than the whole window could serve over the measurement, so that each
# stays backlogged throughout whatever its share; workers that take
# actual_tokens / FAIR_TPS seconds a run and report actual_tokens.
# fair_scenario FILE DURATION_S TPS ID:COST:COUNT:START_S:SPREAD_S ...
# (COST: tokens, or LO-HI for uniform between)
fair_scenario() {
    local f=$1 d=$2 tps=$3 t id cost count at spread
    shift 3
    {
        printf 'name: fairness\nseed: 1\nduration_s: %s\n' "$d"
        printf 'capacity: {workers: %s, worker_tokens_per_s: %s}\nworkflows:\n' "$FAIR_WORKERS" "$tps"
        for t in "$@"; do echo "$t" | cut -d: -f2; done | sort -u | while read -r cost; do
            case $cost in
                *-*) printf '  - {name: c%s, cost: {dist: uniform, min: %s, max: %s}}\n' \
                        "$cost" "${cost%-*}" "${cost#*-}" ;;
                *) printf '  - {name: c%s, cost: {dist: fixed, tokens: %s}}\n' "$cost" "$cost" ;;
            esac
        done
        printf 'tenants:\n'
        for t in "$@"; do
            IFS=: read -r id cost count at spread <<<"$t"
            printf '  - id: %s\n    arrivals:\n' "$id"
            printf '      - {kind: burst, workflow: c%s, start_s: %s, count: %s, duration_s: %s}\n' \
                "$cost" "$at" "$count" "$spread"
        done
    } >"$f"
}
# Runs of COST tokens (or LO-HI) that keep a tenant backlogged for S
# seconds even if it had the whole window to itself, at TPS tokens a
# second a worker.
backlog() {
    awk -v c="${1%%-*}" -v s="$2" -v t="$3" -v g="$FAIR_WINDOW" 'BEGIN { print int(g * t / c * s * 1.2) + g + 2 }'
}
# Every partition's owner as the tap last saw it, "k=owner" words.
owners_now() {
    awk '{ o[$2] = $3 } END { for (k in o) print k "=" o[k] }' "$tmp/tap.out.owners" | sort | tr '\n' ' '
}
# The first $3 (default 1) tenant ids $2<i> (by the server's partition
# function: 32-bit FNV-1a of the id, modulo P) on partitions that replica
# $1 owns, as the tap last saw the keys; one a line.
tenants_on() {
    local got
    got=$(python3 -c 'import sys
for i in range(1, 2001):
    t = "%s%d" % (sys.argv[1], i)
    h = 2166136261
    for b in t.encode(): h = ((h ^ b) * 16777619) & 0xffffffff
    print(t, h % int(sys.argv[2]))' "$2" "$PARTITIONS" |
        awk -v rep="$1" -v want="${3:-1}" 'NR == FNR { o[$2] = $3; next }
            o[$2] == rep && n < want { print $1; n++ }' "$tmp/tap.out.owners" -)
    [ "$(echo "$got" | grep -c .)" = "${3:-1}" ] || { echo "bench: too few tenants on $1" >&2; exit 1; }
    echo "$got"
}
# When the interval of case $1 starts, s after the load: FAIR_WARM, a
# second more with 50-fold costs, whose costly backlog comes a second
# after the other. (In the other order the costly tenant's replica, alone
# backlogged for a moment, fills the whole window with runs that take 50
# times longer, and keeps them until they complete: the start would be
# one of its runs' service time, docs/scaling.md "The bound", 3.)
fair_warm() {
    case $1 in
        costs50) echo $((FAIR_WARM + 1)) ;;
        *) echo "$FAIR_WARM" ;;
    esac
}
# The tenants of case $1 on the replicas just started: one line of
# ID:COST:COUNT:START_S:SPREAD_S words for fair_scenario, the measured
# tenants first.
fair_tenants() {
    local a b c=$FAIR_COST span=$(($(fair_warm "$1") + FAIR_SECS))
    case $1 in
        equal)
            a=$(tenants_on rep-1 f); b=$(tenants_on rep-2 f)
            echo "$a:$c:$(backlog "$c" "$span" "$FAIR_TPS"):0:1 $b:$c:$(backlog "$c" "$span" "$FAIR_TPS"):0:1" ;;
        costs50)
            a=$(tenants_on rep-1 f); b=$(tenants_on rep-2 f)
            echo "$a:$c:$(backlog "$c" "$span" "$FAIR_TPS"):0:1" \
                 "$b:$((50 * c)):$(backlog $((50 * c)) "$span" "$FAIR_TPS"):1:1" ;;
        weights)
            # h<i> are on the plan of weight 3 (proxy_yaml)
            a=$(tenants_on rep-1 h); b=$(tenants_on rep-2 f)
            echo "$a:$c:$(backlog "$c" "$span" "$FAIR_TPS"):0:1 $b:$c:$(backlog "$c" "$span" "$FAIR_TPS"):0:1" ;;
        tuesday)
            # the card's Tuesday: a flood of tickets of 800 to 1,200 tokens
            # on rep-1, then FAIR_SMALL small tenants on rep-2 with one
            # run each, FAIR_WARM s in
            a=$(tenants_on rep-1 f)
            c=$((FAIR_COST * 4 / 5))-$((FAIR_COST * 6 / 5))
            printf '%s' "$a:$c:$(backlog "$c" $((FAIR_WARM + 6)) "$FAIR_TUESDAY_TPS"):0:1"
            for b in $(tenants_on rep-2 s "$FAIR_SMALL"); do printf ' %s' "$b:$FAIR_COST:1:$FAIR_WARM:0"; done
            echo ;;
        *) echo "bench: no fairness case $1" >&2; exit 1 ;;
    esac
}
# One fairness measurement of case $2 on impl $1 (started), run $3, the
# tenants $4 (fair_tenants' line): a line of key=value pairs to stdout.
fair_run() {
    local impl=$1 cs=$2 run=$3 spec=$4 f=$tmp/fair-$2-$1-$3.out tps=$FAIR_TPS dur drain t id
    if [ "$cs" = tuesday ]; then
        tps=$FAIR_TUESDAY_TPS dur=$((FAIR_WARM + 1)) drain=4
    else
        # the bursts end within a second; the workers go on past the
        # interval (a run still in flight when the tap stops counts from
        # its dispatch)
        dur=$(($(fair_warm "$cs") + FAIR_SECS)) drain=$(($(fair_warm "$cs") + FAIR_SECS + 1))
    fi
    # shellcheck disable=SC2086
    fair_scenario "$tmp/fair-$cs.yaml" "$dur" "$tps" $spec
    tap_reset
    "$bin/fairq-load" --nats "$url" --scenario "$tmp/fair-$cs.yaml" --body-size "$BODY" \
        --workers "$FAIR_WORKERS" --tokens-per-sec "$tps" --max-outstanding 0 --drain "$drain" \
        --warmup 1 >"$f" 2>"$tmp/load.err" || {
        echo "bench: fairq-load failed:" >&2; cat "$tmp/load.err" >&2; exit 1; }
    # partitions that changed hands during the load (none expected: a
    # move would put the tenants' runs behind a handover)
    local moved
    moved=$(printf '%s\n%s\n' "$owners_at_start" "$(owners_now)" | tr ' ' '\n' | grep . | sort | uniq -u |
        cut -d= -f1 | sort -u | grep -c . || true)
    stop_tap
    stop_impls
    # the proxies' logs and the tap's report of this measurement, kept (KEEP=1)
    for t in "$tmp"/impl-*.log "$tmp/tap.out" "$tmp/tap.out.owners"; do
        [ ! -f "$t" ] || cp "$t" "$f.${t##*/}"
    done
    [ "$moved" = 0 ] || echo "bench: WARNING fairness $cs $impl run $run: $moved partitions changed hands" >&2
    # leases lost: a replica not scheduled for a lease TTL (3 s) loses all
    # its keys; taking them back keeps the same holder, so "moved" misses it,
    # and it serves nothing until it has made its consumers again, one by one
    local lost
    lost=$(cat "$tmp"/impl-*.log 2>/dev/null | grep -c 'msg="lost a partition"' || true)
    [ "$lost" = 0 ] || echo "bench: WARNING fairness $cs $impl run $run: $lost partition leases lost" \
        "(a replica unscheduled past the lease TTL; its log: $f.impl-rep-*.log with KEEP=1)" >&2
    # a tenant none of whose runs was dispatched makes the measurement void
    # (seen at load averages of 21 and 31 on 2 cores: one replica dispatched
    # nothing; a replica frozen past the lease TTL does that, see lost)
    local valid=1
    for t in $spec; do
        [ "$(awk -v t="${t%%:*}" '$1 == "latency" && $2 == "tenant=" t { sub(/runs=/, "", $3); print $3 }' "$f")" != 0 ] ||
            valid=0
    done
    [ "$moved" = 0 ] && [ "$lost" = 0 ] || valid=0
    [ "$valid" = 1 ] || echo "bench: WARNING fairness $cs $impl run $run: void (a tenant had no dispatch, or a lease changed hands or was lost)" >&2
    printf 'fair case=%s impl=%s run=%s load=%s moved=%s lost=%s valid=%s in_flight_mean=%s in_flight_peak=%s' \
        "$cs" "$impl" "$run" "$(uptime_load)" "$moved" "$lost" "$valid" \
        "$(field "$tmp/tap.out" tap in_flight_mean)" "$(field "$tmp/tap.out" tap in_flight_peak)"
    for t in $spec; do
        id=${t%%:*}
        printf ' served_%s=%s tokens_%s=%s first_ms_%s=%s' "$id" "$(field "$tmp/tap.out" tap "served_$id")" \
            "$id" "$(field "$tmp/tap.out" tap "tokens_$id")" \
            "$id" "$(awk -v t="$id" '$1 == "latency" && $2 == "tenant=" t { sub(/first_ms=/, "", $4); print $4 }' "$f")"
    done
    echo
}
# What a measurement line $2 says for case $1 (its tenants $3): the first
# tenant's share of the tokens served in the interval (equal, costs50),
# its tokens per the second's (weights), the longest first wait of the
# small tenants, ms (tuesday).
fair_metric() {
    local a b
    a=$(echo "$3" | awk '{ split($1, w, ":"); print w[1] }')
    b=$(echo "$3" | awk '{ split($2, w, ":"); print w[1] }')
    case $1 in
        equal|costs50)
            echo "$2" | awk -v a="$a" -v b="$b" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
                END { s = v["served_" a] + v["served_" b]; printf "%.4f", s ? v["served_" a] / s : 0 }' ;;
        weights)
            echo "$2" | awk -v a="$a" -v b="$b" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
                END { printf "%.3f", v["served_" b] ? v["served_" a] / v["served_" b] : 0 }' ;;
        tuesday)
            echo "$2" | awk -v a="$a" '{ m = -1; for (i = 1; i <= NF; i++) { split($i, kv, "=")
                    if (kv[1] ~ /^first_ms_/ && kv[1] != "first_ms_" a && kv[2] != "") { if (kv[2] + 0 > m) m = kv[2] + 0 } }
                    printf "%.1f", m }' ;;
    esac
}

fair_tap() {
    local tps=$FAIR_TPS
    [ "$1" != tuesday ] || tps=$FAIR_TUESDAY_TPS
    echo "--dispatch fair.dispatch --from $(fair_warm "$1") --to $(($(fair_warm "$1") + FAIR_SECS)) --rate $tps"
}
has_phase fairness && for run in $(seq 1 "$RUNS"); do
    for cs in $FAIR_CASES; do
        one_spec=""
        for n in $REPLICAS; do
            [ "$n" -ge 2 ] || continue
            start "r$n" "$FAIR_WINDOW" "$(fair_tap "$cs")"
            spec=$(fair_tenants "$cs")
            line_n=$(fair_run "r$n" "$cs" "$run" "$spec")
            echo "bench $line_n" >&2
            if [ "$one_spec" != "$spec" ]; then
                start r1 "$FAIR_WINDOW" "$(fair_tap "$cs")"
                line_1=$(fair_run r1 "$cs" "$run" "$spec")
                echo "bench $line_1" >&2
                one_spec=$spec
            fi
            m_n=$(fair_metric "$cs" "$line_n" "$spec")
            m_1=$(fair_metric "$cs" "$line_1" "$spec")
            valid=1
            case "$line_n $line_1" in *valid=0*) valid=0 ;; esac
            echo "bench phase=fairness case=$cs replicas=$n run=$run tenants=$(echo "$spec" |
                awk '{ for (i = 1; i <= NF; i++) { split($i, w, ":"); printf "%s%s", (i > 1 ? "," : ""), w[1] } }')" \
                 "valid=$valid value=$m_n one_proxy=$m_1" \
                 "relative_error=$(awk -v x="$m_n" -v y="$m_1" 'BEGIN { d = (x - y) / (y ? y : 1); printf "%.3f", d < 0 ? -d : d }')" |
                tee "$tmp/fairsum-$cs-$n-$run.line"
        done
    done
done
# Key $3 of the valid fairness lines of case $1, replicas $2, over the runs.
fkv() {
    cat "$tmp"/fairsum-"$1"-"$2"-*.line 2>/dev/null | grep ' valid=1 ' |
        awk -v k="$3" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }'
}
has_phase fairness && for cs in $FAIR_CASES; do
    for n in $REPLICAS; do
        [ "$n" -ge 2 ] || continue
        case $cs in
            equal) what="first tenant's share of tokens served, equal weights and costs (one proxy: 0.5)"
                   target="relative_error<=0.10" ;;
            costs50) what="share of the tenant with ${FAIR_COST}-token runs, the other's 50 times larger, equal weights"
                   target="relative_error<=0.10" ;;
            weights) what="tokens served weight 3 : weight 1 (one proxy: 3)"
                   target="relative_error<=0.10" ;;
            tuesday) what="longest first wait (ms) of $FAIR_SMALL small tenants, the flood on another replica"
                   target="value<=one_proxy+$((1000 * FAIR_COST / FAIR_TUESDAY_TPS))ms" ;;
        esac
        echo "bench summary fairness case=$cs replicas=$n runs=$(fkv "$cs" "$n" value | grep -c .)" \
             "window=$FAIR_WINDOW" \
             "interval_s=$FAIR_SECS after_s=$(fair_warm "$cs") value=$(fkv "$cs" "$n" value | median)" \
             "one_proxy=$(fkv "$cs" "$n" one_proxy | median)" \
             "relative_error=$(fkv "$cs" "$n" relative_error | median) target: $target; $what"
    done
done

# Medians over the runs, each replica count against the relay run just
# before it (drift on a shared machine cancels within a pair).
# Key $2 of the throughput lines of impl $1 (of run $3 only, if given).
kv() {
    for l in "$tmp"/thr-"$1"-${3:-*}.out.line; do
        awk -v k="$2" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$l"
    done
}
has_phase freeze && for run in $(seq 1 "$RUNS"); do
    start r1 50000
    f=$tmp/freeze-$run.out
    "$bin/fairq-load" --nats "$url" --tenants "$TENANTS" --rate "$FREEZE_RATE" \
        --duration $((FREEZE_AT + FREEZE_SECS + 15)) --workers 16 --drain 30 >"$f" 2>"$f.err" &
    load_pid=$!
    sleep "$FREEZE_AT"
    kill -STOP "${impl_pids[0]}"
    sleep "$FREEZE_SECS"
    kill -CONT "${impl_pids[0]}"
    wait "$load_pid" || { echo "bench: fairq-load failed:" >&2; cat "$f.err" >&2; exit 1; }
    lost=$(grep -c 'msg="lost a partition"' "$tmp/impl-rep-1.log" || true)
    stop_tap
    stop_impls
    awk -v fz="$FREEZE_SECS" '$1 == "latency" && $2 != "tenant=*" {
        for (i = 3; i <= NF; i++) if ($i ~ /^dispatch_max_ms=/) { sub(/.*=/, "", $i); print $i - fz * 1000 } }' \
        "$f" | sort -g >"$f.back"
    echo "bench phase=freeze run=$run load=$(uptime_load) freeze_s=$FREEZE_SECS lost=$lost" \
         "first_back_ms=$(head -n 1 "$f.back") median_back_ms=$(median <"$f.back")" \
         "last_back_ms=$(tail -n 1 "$f.back") submitted=$(field "$f" runs submitted)" \
         "completed_once=$(field "$f" runs completed_once) missing=$(field "$f" runs missing)" \
         "dispatched_more=$(field "$f" runs dispatched_more)"
done

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
