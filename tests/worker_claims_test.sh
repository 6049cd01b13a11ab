#!/usr/bin/env bash
# worker_claims_test.sh -- the workers' side of a nats-server crash: a durable reset replays runs, a claim keeps them from being worked twice.
#
# On a nats-server of its own, fairq-proxy dispatches while four worker pools
# (two fairq-worker processes each, one durable a pool) work every run:
#   all    --deliver all  --no-claim        all-c  --deliver all  (claims)
#   new    --deliver new  --no-claim        new-c  --deliver new  (claims)
# A producer submits under load; once the pools have worked a few hundred
# runs, nats-server is killed with SIGKILL and restarted on the same store and
# port, and more runs are submitted.
#
# A kill -9 of nats-server 2.9.10 once reset a workers' durable to its start
# (81,125 runs delivered again with delivery count 1), but a plain kill -9
# here seldom does: it needs the server to die while it rewrites a
# durable's state file. So that the test sees the reset every time, it
# removes the durables' state files (o.dat) while the server is down: the
# durables come back with their configuration and without their state, as
# a reset one does. Then:
#   - every run the producer had acked is completed by every pool (nothing
#     lost: --deliver new restarts at its creation's start sequence, not
#     after the stream's last run);
#   - with the claim, no run's work started twice, run ids of any printable
#     characters included (escaped into the claim key);
#   - without it, the runs worked before the crash are worked again (> 0).
# The counts are printed.
set -euo pipefail

src=${FAIRQ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FAIRQ_BUILD_DIR:-$src/build}
tmp=$(mktemp -d)
pools="all new all-c new-c"
nats_pid=""
pids=()      # every process started here
workers=()   # the fairq-workers among them

cleanup() {
    for p in "${pids[@]}" $nats_pid; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "worker_claims_test: FAIL: $*" >&2
    for f in "$tmp"/*.err "$tmp"/nats.log; do
        [ -s "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }
    done
    exit 1
}

port=$("$src/scripts/free-port.sh")
url="nats://127.0.0.1:$port"

# nats-server on the same port and store each time, its pid in nats_pid.
start_nats() {
    : >"$tmp/nats.log"
    nats-server -js -a 127.0.0.1 -p "$port" -sd "$tmp/store" >"$tmp/nats.log" 2>&1 &
    nats_pid=$!
    for _ in $(seq 1 100); do grep -q "Server is ready" "$tmp/nats.log" && return 0; sleep 0.1; done
    fail "nats-server did not start"
}

# Runs whose work started, "tenant run_id" a line, one line per start.
worked() { cat "$tmp"/w."$1".*.out | awk '$1 == "run" { print $2, $3 }' | sort; }

start_nats
"$bin/fairq-proxy" -c "$src/config/bench.yaml" --nats "$url" >"$tmp/proxy.out" 2>"$tmp/proxy.err" &
pids+=($!)
# The proxy answers stats once it leads, its streams made.
for _ in $(seq 1 100); do
    "$bin/fairq-admin" --nats "$url" stats >/dev/null 2>&1 && break
    sleep 0.1
done
"$bin/fairq-admin" --nats "$url" stats >/dev/null 2>&1 || fail "fairq-proxy does not answer"
for pool in $pools; do
    case $pool in *-c) claim=(--claim-bucket "claims_$pool");; *) claim=(--no-claim);; esac
    for i in 1 2; do
        "$bin/fairq-worker" --nats "$url" --durable "pool-$pool" --deliver "${pool%-c}" \
            --tokens-per-sec 0 "${claim[@]}" >"$tmp/w.$pool.$i.out" 2>"$tmp/w.$pool.$i.err" &
        pids+=($!)
        workers+=($!)
    done
done
for pool in $pools; do
    for i in 1 2; do
        for _ in $(seq 1 100); do grep -q "waiting for runs" "$tmp/w.$pool.$i.err" && break; sleep 0.1; done
        grep -q "waiting for runs" "$tmp/w.$pool.$i.err" || fail "worker $pool.$i did not start"
    done
done

# Load: the producer waits for each PubAck, the pools keep up with it.
"$bin/fairq-producer" --nats "$url" --tenant acme --est 10 --count 3000 --run-id a --body x \
    >"$tmp/p1.out" 2>"$tmp/p1.err" &
producer=$!
for _ in $(seq 1 200); do [ "$(worked all | wc -l)" -ge 300 ] && break; sleep 0.05; done
[ "$(worked all | wc -l)" -ge 300 ] || fail "the pools did not work 300 runs"
kill -9 "$nats_pid"
wait "$nats_pid" 2>/dev/null || true
before=$(worked all | wc -l)
rm -f "$tmp"/store/jetstream/*/streams/FAIR_DISPATCH/obs/pool-*/o.dat
start_nats
wait "$producer" || true  # it stops at the first PubAck the crash loses
"$bin/fairq-producer" --nats "$url" --tenant acme --est 10 --count 300 --run-id b --body x \
    >"$tmp/p2.out" 2>"$tmp/p2.err" || fail "the producer failed after the restart"
# Run ids a claim key must escape; p.q and p=2Eq would share a key if '='
# itself were not escaped, and the second would be skipped, never worked.
for id in p.q p=2Eq 'a/b.c*>~'; do
    "$bin/fairq-producer" --nats "$url" --tenant acme --est 10 --run-id "$id" --body x \
        >>"$tmp/p3.out" 2>>"$tmp/p3.err" || fail "the producer failed on run id $id"
done
awk '$1 == "sent" { for (i = 2; i <= NF; i++) if ($i ~ /^run_id=/) print "tenant=acme", $i }' \
    "$tmp/p1.out" "$tmp/p2.out" "$tmp/p3.out" | sort -u >"$tmp/sent"
sent=$(wc -l <"$tmp/sent")
[ "$sent" -ge 600 ] || fail "only $sent runs were acked to the producer"

# Every acked run completed by every pool (the four pools each get every run).
for pool in $pools; do
    for _ in $(seq 1 300); do
        cat "$tmp"/w."$pool".*.out | awk '$1 == "done" { print $2, $3 }' | sort -u >"$tmp/done.$pool"
        [ -z "$(comm -23 "$tmp/sent" "$tmp/done.$pool")" ] && break
        sleep 0.1
    done
    missing=$(comm -23 "$tmp/sent" "$tmp/done.$pool" | wc -l)
    [ "$missing" -eq 0 ] || fail "pool $pool never completed $missing of the $sent acked runs" \
        "($(comm -23 "$tmp/sent" "$tmp/done.$pool" | head -3 | tr '\n' ' '))"
done
sleep 1  # the replays are over by now; let a straggler show
# Stopped, each worker says how many runs it skipped for their claims.
for p in "${workers[@]}"; do kill -TERM "$p"; done
for p in "${workers[@]}"; do wait "$p" || fail "a worker did not exit 0 on SIGTERM"; done

report=""
for pool in $pools; do
    twice=$(worked "$pool" | uniq -d | wc -l)
    skipped=$(cat "$tmp"/w."$pool".*.err | awk '/claims: [0-9]+ runs skipped/ { s += $3 } END { print s + 0 }')
    report="$report $pool: worked_twice=$twice skipped=$skipped;"
    case $pool in
    *-c) [ "$twice" -eq 0 ] || fail "pool $pool worked $twice runs twice despite the claim";;
    *) [ "$twice" -gt 0 ] || fail "pool $pool worked no run twice: the reset did not happen";;
    esac
done
echo "worker_claims_test: ok ($sent runs acked, $before worked before the kill;$report)"
