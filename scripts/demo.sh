#!/usr/bin/env bash
# demo.sh [BUILD_DIR]: the card's Tuesday live on NATS, through fairq-proxy and through a plain FIFO relay, side by side.
#
# The scenario (config/scenarios/tuesday.yaml, the one fairq-sim replays in
# virtual time) is played in real time, COMPRESS times faster: fairq-load
# submits each of its runs at its scenario time / COMPRESS, with its tenant,
# workflow and declared tokens, and its simulated workers (as many as the
# scenario's, each COMPRESS times its token rate) spend the run's actual
# tokens and publish the completion. Two phases, the same runs:
#
#   1. fairq-proxy (config/demo.yaml: the scenario's quantum, and a window of
#      as many runs as there are workers) between the producers and the
#      workers; its own stats (fair.admin.stats) are read during the load
#      (STATS_AT_S, in scenario seconds) and after it;
#   2. fairq-relay, one FIFO: every run goes to the workers' stream at once,
#      in arrival order.
#
# Each phase gets a nats-server of its own (scripts/nats-up.sh: JetStream, a
# temporary store, a free loopback port), so the relay does not inherit the
# proxy's streams and consumers. Waits are printed in scenario time (real
# milliseconds x COMPRESS) with the real milliseconds beside them. Whatever
# it started is stopped on exit, Ctrl-C included.
#
# Environment: COMPRESS (150: the whole scenario, drain included, in about
# 30 s a phase), STATS_AT_S (1860: a minute after A's burst ends), SCENARIO,
# CONFIG.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=$(cd "${1:-$root/build}" && pwd)
SCENARIO=${SCENARIO:-$root/config/scenarios/tuesday.yaml}
CONFIG=${CONFIG:-$root/config/demo.yaml}
COMPRESS=${COMPRESS:-150}
STATS_AT_S=${STATS_AT_S:-1860}

for b in fairq-proxy fairq-relay fairq-load; do
    [ -x "$bin/$b" ] || { echo "demo: $bin/$b is missing: build first (make build)" >&2; exit 1; }
done
command -v nats-server >/dev/null || { echo "demo: nats-server is missing (make deps)" >&2; exit 1; }

tmp=$(mktemp -d)
impl_pid=""        # the proxy or the relay
load_pid=""
server_dir=""      # the running phase's nats-server

# Stop a process we started: TERM, up to 10 s to finish, then KILL.
stop_pid() {
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
stop_phase() {
    stop_pid "$load_pid"
    load_pid=""
    stop_pid "$impl_pid"
    impl_pid=""
    [ -z "$server_dir" ] || "$here/nats-down.sh" "$server_dir"
    server_dir=""
}
cleanup() {
    stop_phase
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

die() {
    echo "demo: $1" >&2
    [ -z "${2:-}" ] || { echo "--- $2" >&2; tail -20 "$2" >&2; }
    exit 1
}

# The value of key on the first line of file whose first word is prefix.
field() {
    awk -v p="$2" -v k="$3" '$1 == p {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) { print kv[2]; exit } } }' "$1"
}

# Run phase NAME (proxy or relay): a fresh server, the dispatcher, the load.
phase() {
    local name=$1 url log ready
    server_dir=$tmp/nats-$name
    url=$("$here/nats-up.sh" "$server_dir")
    log=$tmp/$name.log
    case $name in
    proxy)
        "$bin/fairq-proxy" -c "$CONFIG" --nats "$url" >"$log" 2>&1 &
        ready="fairq-proxy running" ;;
    relay)
        "$bin/fairq-relay" --nats "$url" >"$log" 2>&1 &
        ready="relaying" ;;
    esac
    impl_pid=$!
    for _ in $(seq 1 100); do
        grep -q "$ready" "$log" && break
        kill -0 "$impl_pid" 2>/dev/null || die "fairq-$name stopped at start" "$log"
        sleep 0.1
    done
    grep -q "$ready" "$log" || die "fairq-$name did not start in 10 s" "$log"
    local stats=() at
    at=$(awk -v s="$STATS_AT_S" -v c="$COMPRESS" 'BEGIN { print s / c }')
    [ "$name" = relay ] || stats=(--proxy-stats --stats-at "$at")
    # In the background, so that a signal to this script is handled at once.
    "$bin/fairq-load" --nats "$url" --scenario "$SCENARIO" --compress "$COMPRESS" --send-asap \
        "${stats[@]}" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    load_pid=$!
    wait "$load_pid" || die "fairq-load failed against fairq-$name" "$tmp/$name.err"
    load_pid=""
    stop_phase
    local f=$tmp/$name.out sub once
    sub=$(field "$f" runs submitted)
    once=$(field "$f" runs completed_once)
    [ "$sub" = "$once" ] && [ "$(field "$f" runs missing)" = 0 ] ||
        die "through fairq-$name $once of $sub runs completed once" "$f"
    echo "demo: $sub runs submitted, each completed exactly once, in $(field "$f" throughput elapsed_s) s"
}

sc=$(basename "$SCENARIO" .yaml)
echo "demo: the scenario $sc live on NATS, ${COMPRESS}x faster than its clock, twice"
echo "demo: phase 1 of 2: through fairq-proxy ($(basename "$CONFIG"))"
phase proxy
echo "demo: phase 2 of 2: through fairq-relay (one FIFO)"
phase relay
echo "demo: both phases done; the proxy, the relay and both nats-servers are stopped"
echo

# The report: both loads' latency lines and the proxy's stats lines, joined
# by tenant. The tenant with the most runs is the loud one; the worst waits
# of the others come last.
awk -v c="$COMPRESS" -v at="$STATS_AT_S" '
BEGIN {
    WAITS = "%-10s %5s   %-15s %-15s   %-15s %s\n"
    DURING = "%-10s %8s %15s %9s %10s\n"
    AFTER = "%-10s %10s %15s %15s %9s %7s %9s\n"
}
# Real milliseconds as scenario time, the way fairq-sim prints it.
function scen(real_ms,   ms) {
    ms = real_ms * c
    if (ms < 1000) return sprintf("%dms", ms)
    if (ms < 60000) return sprintf("%.1fs", ms / 1000)
    return sprintf("%.1fm", ms / 60000)
}
function both(real_ms) { return sprintf("%s (%.0f)", scen(real_ms), real_ms) }
function kv(line, key,   i, n, f, p) {
    n = split(line, f, " ")
    for (i = 2; i <= n; i++) {
        p = index(f[i], "=")
        if (substr(f[i], 1, p - 1) == key) return substr(f[i], p + 1)
    }
    return ""
}
function worse(a, k, v) { if (v + 0 > a[k] + 0) a[k] = v + 0 }
FNR == 1 { phase = FILENAME ~ /proxy\.out$/ ? "proxy" : "relay" }
$1 == "load" { head = $0 }
$1 == "latency" && kv($0, "tenant") != "*" {
    t = kv($0, "tenant")
    if (!(t in runs)) { order[++n] = t; runs[t] = kv($0, "runs") }
    first[phase, t] = kv($0, "first_receive_ms")
    p99[phase, t] = kv($0, "receive_p99_ms")
    if (runs[t] + 0 > runs[loud] + 0) loud = t
}
$1 == "proxy" { stat[kv($0, "snapshot"), kv($0, "tenant")] = $0 }
END {
    printf "The %s scenario (seed %s): %s runs from %s tenants; %s workers of %s tokens/s here\n",
        kv(head, "scenario"), kv(head, "seed"), kv(head, "runs_planned"), kv(head, "tenants"),
        kv(head, "workers"), kv(head, "tokens_per_sec")
    printf "(the scenario\047s, %sx faster). Wait from submit to a worker taking the run,\n", c
    printf "in scenario time (real ms in brackets):\n\n"
    printf WAITS, "", "", "first run", "", "p99", ""
    printf WAITS, "tenant", "runs", "FIFO relay", "fairq-proxy", "FIFO relay", "fairq-proxy"
    for (i = 1; i <= n; i++) {
        t = order[i]
        printf WAITS, t, runs[t], both(first["relay", t]), both(first["proxy", t]),
            both(p99["relay", t]), both(p99["proxy", t])
        if (t == loud) continue
        worse(wf, "relay", first["relay", t]); worse(wf, "proxy", first["proxy", t])
        worse(wp, "relay", p99["relay", t]); worse(wp, "proxy", p99["proxy", t])
    }
    printf "%-16s   %-15s %-15s   %-15s %s\n", "worst of others", both(wf["relay"]),
        both(wf["proxy"]), both(wp["relay"]), both(wp["proxy"])

    printf "\nfairq-proxy\047s own stats (fair.admin.stats), %s into the scenario (%.1f s here):\n\n",
        scen(at * 1000 / c), at / c
    printf DURING, "tenant", "queued", "oldest queued", "in flight", "dispatched"
    for (i = 1; i <= n; i++) {
        l = stat["during", order[i]]
        if (l == "") continue
        printf DURING, order[i], kv(l, "queued_runs"),
            kv(l, "queued_runs") + 0 ? scen(kv(l, "oldest_queued_age_ms")) : "-",
            kv(l, "in_flight"), kv(l, "dispatched_runs")
    }
    printf "\nand after the load:\n\n"
    printf AFTER, "tenant", "dispatched", "tokens charged", "actual tokens", "completed", "refused",
        "est error"
    for (i = 1; i <= n; i++) {
        l = stat["end", order[i]]
        printf AFTER, order[i], kv(l, "dispatched_runs"), kv(l, "dispatched_tokens"),
            kv(l, "actual_tokens"), kv(l, "completed_runs"), kv(l, "rejected"), kv(l, "estimate_error")
    }
    l = stat["end", "*"]
    printf "overall: submitted %s, dispatched %s, completions %s, refused %s, expired %s; window %s runs\n",
        kv(l, "submitted"), kv(l, "dispatched"), kv(l, "completions"), kv(l, "rejected"),
        kv(l, "expired"), kv(l, "window_max_in_flight")
}' "$tmp/proxy.out" "$tmp/relay.out"
