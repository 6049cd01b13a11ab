#!/usr/bin/env bash
# bench-stats.sh [BUILD_DIR]: what a stats request costs the proxy with many tenants known.
#
# For each state, a nats-server of its own (scripts/nats-up.sh, a fresh
# store), fairq-proxy on it, TENANTS tenants with one run each submitted by
# fairq-load (no workers), then `fairq-admin --time TIMES stats BODY` for the
# overall section alone, the first page of 500, a page at offset 40,000 and
# the page nine tenths of the way down the tenants known:
# the median, least and most round trip of the answered requests. A stats
# request is served on the proxy's loop, so its round trip (less about a
# millisecond of transport, the overall section's) is what it held dispatch.
#
#   queued  a window of one: every tenant but one has a run queued
#   idle    a window larger than the runs and no worker: every run is in
#           flight, nothing is queued (tenants known, as after a busy hour)
#
# STATES (default "queued idle") picks the states measured.
# With BASELINE=PATH, a second fairq-proxy binary is measured the same way
# after this one (impl=base), e.g. one built from the commit before a change.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=$(cd "${1:-$root/build}" && pwd)
TENANTS=${TENANTS:-50000}
TIMES=${TIMES:-15}
BASELINE=${BASELINE:-}
STATES=${STATES:-queued idle}

tmp=$(mktemp -d)
proxy_pid=
cleanup() {
    [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
    "$here/nats-down.sh" "$tmp/nats" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# measure IMPL PROXY_BIN STATE WINDOW
measure() {
    local impl=$1 proxy=$2 state=$3 window=$4 url
    rm -rf "$tmp/nats"
    url=$("$here/nats-up.sh" "$tmp/nats")
    printf 'nats:\n  url: %s\nhttp:\n  listen: ""\nlog:\n  level: warn\nscheduler:\n  default_plan: free\nwindow:\n  max_in_flight: %s\nplans:\n  - name: free\n    weight: 1\n' \
        "$url" "$window" >"$tmp/proxy.yaml"
    "$proxy" -c "$tmp/proxy.yaml" >"$tmp/proxy.log" 2>&1 &
    proxy_pid=$!
    "$bin/fairq-admin" --nats "$url" stats '{"limit":0}' >/dev/null 2>&1 ||
        { sleep 1; "$bin/fairq-admin" --nats "$url" stats '{"limit":0}' >/dev/null; }
    "$bin/fairq-load" --nats "$url" --tenants "$TENANTS" --count "$TENANTS" --in-turn --rate 0 \
        --workers 0 --drain 0 --max-outstanding 0 --body-size 64 >/dev/null
    for _ in $(seq 1 300); do
        "$bin/fairq-admin" --nats "$url" stats '{"limit":0}' | grep -q "\"submitted\":$TENANTS," && break
        sleep 0.2
    done
    known=$("$bin/fairq-admin" --nats "$url" stats '{"limit":0}' |
        sed -n 's/.*"tenants_total":\([0-9]*\).*/\1/p')
    for body in '{"limit":0}' '{"limit":500}' '{"offset":40000,"limit":500}' \
        "{\"offset\":$((known * 9 / 10)),\"limit\":500}"; do
        printf 'impl=%s state=%s tenants=%s known=%s request=%s ' "$impl" "$state" "$TENANTS" "$known" "$body"
        "$bin/fairq-admin" --nats "$url" --time "$TIMES" stats "$body" 2>&1 >/dev/null |
            sed 's/.*round trip //'
    done
    kill "$proxy_pid"
    wait "$proxy_pid" || true
    proxy_pid=
    "$here/nats-down.sh" "$tmp/nats"
}

for state in $STATES; do
    window=1
    [ "$state" = idle ] && window=$((TENANTS * 2))
    measure proxy "$bin/fairq-proxy" "$state" "$window"
    [ -n "$BASELINE" ] && measure base "$BASELINE" "$state" "$window"
done
