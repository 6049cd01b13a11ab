#!/usr/bin/env bash
# clients_test.sh -- the example producer and worker, the FIFO relay and the load generator against a real nats-server.
#
# Checks, on a server of its own (scripts/nats-up.sh):
#   - the worker refuses clearly when the streams do not exist;
#   - producer -> relay -> worker: each run arrives once with its run id, tenant
#     and estimate, and is completed;
#   - a worker durable created after runs were dispatched and completed does
#     not get them again (FAIR_DISPATCH keeps them an hour): it starts with the
#     next run, and only --deliver all replays what the stream holds;
#   - relay + load for a few seconds: every submitted run is dispatched and
#     completed exactly once, none is missing, and each tenant's runs leave in
#     submit order (one FIFO);
#   - the relay stops on SIGTERM with status 0 and leaves the submit stream free;
#   - fairq-proxy takes over the streams the relay created without a warning,
#     and the same load through it completes every run exactly once.
set -euo pipefail

src=${FAIRQ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FAIRQ_BUILD_DIR:-$src/build}
tmp=$(mktemp -d)
bg_pid=""          # the relay, later the proxy, in the background
fresh_pid=""       # a worker in the background

cleanup() {
    if [ -n "$bg_pid" ]; then kill "$bg_pid" 2>/dev/null || true; fi
    if [ -n "$fresh_pid" ]; then kill "$fresh_pid" 2>/dev/null || true; fi
    "$src/scripts/nats-down.sh" "$tmp"
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "clients_test: FAIL: $*" >&2
    for f in "$tmp"/*.out "$tmp"/*.err; do
        [ -s "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
    done
    exit 1
}

# The value of key in the first line of file that starts with prefix.
field() {
    awk -v p="$2" -v k="$3" '$1 == p { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) { print kv[2]; exit } } }' "$1"
}

url=$("$src/scripts/nats-up.sh" "$tmp")
echo "clients_test: nats-server at $url"

# 1. No streams yet: the worker says who creates them.
if "$bin/fairq-worker" --nats "$url" --count 1 >"$tmp/noworker.out" 2>"$tmp/noworker.err"; then
    fail "fairq-worker ran without FAIR_DISPATCH"
fi
grep -q "FAIR_DISPATCH does not exist: start fairq-proxy" "$tmp/noworker.err" ||
    fail "fairq-worker did not say the stream is missing"

# 2. The relay creates the streams.
"$bin/fairq-relay" --nats "$url" >"$tmp/relay.out" 2>"$tmp/relay.err" &
bg_pid=$!
for _ in $(seq 1 50); do grep -q "relaying" "$tmp/relay.err" && break; sleep 0.1; done
grep -q "relaying" "$tmp/relay.err" || fail "fairq-relay did not start"

# 3. Three runs from the example producer reach the example worker once each.
#    They were dispatched before the first worker came: the deployment's first
#    pool takes them with --deliver all.
"$bin/fairq-producer" --nats "$url" --tenant acme --est 40 --count 3 --run-id t3 \
    --body "hello" >"$tmp/producer.out" 2>"$tmp/producer.err" || fail "fairq-producer failed"
[ "$(grep -c '^sent ' "$tmp/producer.out")" -eq 3 ] || fail "the producer did not report 3 runs"
timeout 30 "$bin/fairq-worker" --nats "$url" --count 3 --tokens-per-sec 0 --actual-factor 2 \
    --deliver all >"$tmp/worker.out" 2>"$tmp/worker.err" || fail "fairq-worker failed"
for i in 1 2 3; do
    grep -q "^run tenant=acme run_id=t3-$i .*est_tokens=40 " "$tmp/worker.out" ||
        fail "run t3-$i was not received with its tenant and estimate"
    grep -q "^done tenant=acme run_id=t3-$i actual_tokens=80 status=ok" "$tmp/worker.out" ||
        fail "run t3-$i was not completed"
done
[ "$(grep -c '^done ' "$tmp/worker.out")" -eq 3 ] || fail "the worker completed other than 3 runs"

# 3b. A new pool (a durable created now) does not run t3-1..3 again, though
#     FAIR_DISPATCH still holds them: it starts with the next run, t4.
"$bin/fairq-worker" --nats "$url" --durable fresh-pool --count 1 --tokens-per-sec 0 \
    >"$tmp/fresh.out" 2>"$tmp/fresh.err" &
fresh_pid=$!
for _ in $(seq 1 50); do grep -q "waiting for runs" "$tmp/fresh.err" && break; sleep 0.1; done
grep -q "created the durable consumer fresh-pool .*--deliver new" "$tmp/fresh.err" ||
    fail "fairq-worker did not create fresh-pool with --deliver new"
"$bin/fairq-producer" --nats "$url" --tenant acme --est 40 --count 1 --run-id t4 \
    --body "later" >"$tmp/producer4.out" 2>"$tmp/producer4.err" || fail "fairq-producer failed"
status=0
timeout 30 tail --pid="$fresh_pid" -f /dev/null || status=$?
[ "$status" -eq 0 ] || fail "the fresh pool did not take t4"
wait "$fresh_pid" || fail "the fresh pool's worker failed"
fresh_pid=""
[ "$(grep -c '^run ' "$tmp/fresh.out")" -eq 1 ] && grep -q "^run tenant=acme run_id=t4 " "$tmp/fresh.out" ||
    fail "the fresh pool took other than t4 alone: $(grep '^run ' "$tmp/fresh.out" | tr '\n' ' ')"
#     Replaying is explicit: a pool created with --deliver all gets all four.
timeout 30 "$bin/fairq-worker" --nats "$url" --durable replay-pool --deliver all --count 4 \
    --tokens-per-sec 0 >"$tmp/replay.out" 2>"$tmp/replay.err" || fail "the replaying worker failed"
[ "$(grep -c '^run tenant=acme run_id=t[34]' "$tmp/replay.out")" -eq 4 ] ||
    fail "--deliver all did not replay t3-1..3 and t4"
#     An existing durable goes on where it stopped, whatever --deliver says.
"$bin/fairq-worker" --nats "$url" --durable fresh-pool --deliver all --count 1 --tokens-per-sec 0 \
    >"$tmp/fresh2.out" 2>"$tmp/fresh2.err" &
fresh_pid=$!
for _ in $(seq 1 50); do grep -q "waiting for runs" "$tmp/fresh2.err" && break; sleep 0.1; done
grep -q "fresh-pool exists and goes on where it stopped" "$tmp/fresh2.err" ||
    fail "fairq-worker did not say that --deliver does not apply to an existing durable"
sleep 1
[ ! -s "$tmp/fresh2.out" ] || fail "the existing fresh-pool durable replayed: $(cat "$tmp/fresh2.out")"
kill -TERM "$fresh_pid"
wait "$fresh_pid" || true
fresh_pid=""

# 4. A few seconds of load through the relay: every run exactly once.
"$bin/fairq-load" --nats "$url" --rate 2000 --duration 3 --tenants 5 \
    --costs 100:0.9,5000:0.1 --workers 32 --tokens-per-sec 2000000 --drain 30 \
    >"$tmp/load.out" 2>"$tmp/load.err" || fail "fairq-load failed"
submitted=$(field "$tmp/load.out" runs submitted)
[ -n "$submitted" ] && [ "$submitted" -ge 3000 ] || fail "too few runs submitted: '$submitted'"
[ "$(field "$tmp/load.out" runs completed_once)" = "$submitted" ] ||
    fail "completed once: $(field "$tmp/load.out" runs completed_once) of $submitted"
for k in submit_errors rejected completed_more missing dispatched_more foreign out_of_order complete_errors; do
    [ "$(field "$tmp/load.out" runs "$k")" = 0 ] || fail "$k is $(field "$tmp/load.out" runs "$k"), not 0"
done
[ "$(field "$tmp/load.out" runs dispatched)" = "$submitted" ] || fail "dispatched differs from submitted"
[ "$(grep -c '^latency tenant=t' "$tmp/load.out")" -eq 5 ] || fail "not one latency line per tenant"

# 5. SIGTERM: the relay exits 0, having relayed everything, and frees FAIR_SUBMIT.
kill -TERM "$bg_pid"
status=0
wait "$bg_pid" || status=$?
bg_pid=""
[ "$status" -eq 0 ] || fail "fairq-relay exited $status on SIGTERM"
[ "$(field "$tmp/relay.out" relay relayed)" = "$((submitted + 4))" ] ||
    fail "the relay relayed $(field "$tmp/relay.out" relay relayed), expected $((submitted + 4))"
"$bin/fairq-relay" --nats "$url" >"$tmp/relay2.out" 2>"$tmp/relay2.err" &
bg_pid=$!
for _ in $(seq 1 50); do grep -q "relaying" "$tmp/relay2.err" && break; sleep 0.1; done
grep -q "relaying" "$tmp/relay2.err" || fail "a second relay could not take FAIR_SUBMIT over"

# 6. The proxy takes over the streams the relay made, finds nothing to warn
#    about in them, and the same load through it completes every run once.
kill -TERM "$bg_pid"
wait "$bg_pid" || true
bg_pid=""
"$bin/fairq-proxy" -c "$src/config/bench.yaml" --nats "$url" >"$tmp/proxy.out" 2>"$tmp/proxy.err" &
bg_pid=$!
"$bin/fairq-load" --nats "$url" --rate 2000 --duration 2 --tenants 5 \
    --costs 100:0.9,5000:0.1 --workers 32 --tokens-per-sec 2000000 --drain 30 \
    >"$tmp/load2.out" 2>"$tmp/load2.err" || fail "fairq-load through the proxy failed"
submitted2=$(field "$tmp/load2.out" runs submitted)
[ -n "$submitted2" ] && [ "$submitted2" -ge 2000 ] || fail "too few runs submitted to the proxy"
[ "$(field "$tmp/load2.out" runs completed_once)" = "$submitted2" ] ||
    fail "through the proxy, completed once: $(field "$tmp/load2.out" runs completed_once) of $submitted2"
for k in completed_more missing dispatched_more out_of_order; do
    [ "$(field "$tmp/load2.out" runs "$k")" = 0 ] || fail "through the proxy, $k is not 0"
done
if grep -q "differs" "$tmp/proxy.err"; then fail "the proxy finds the relay's streams differ"; fi
kill -TERM "$bg_pid"
status=0
wait "$bg_pid" || status=$?
bg_pid=""
[ "$status" -eq 0 ] || fail "fairq-proxy exited $status on SIGTERM"

echo "clients_test: ok ($submitted runs through the relay and $submitted2 through the proxy, each completed once)"
