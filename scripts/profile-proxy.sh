#!/usr/bin/env bash
# profile-proxy.sh [proxy|relay] [BINARY]: where a dispatcher's CPU goes, thread by thread.
#
# Starts a nats-server of its own (monitoring on, fresh store), the proxy
# (config/bench.yaml) or the relay, and the throughput load of
# bench-proxy.sh for DURATION seconds; then prints, per run submitted:
#   - each thread's CPU (us) and context switches, named by its stack when
#     gdb is installed (fq_nio_poll: the proxy's loop; natsSock_Read: nats.c's
#     reader; natsSub_nextMsg: a fetch thread; natsSub_deliverMsgs: a
#     subscription's delivery thread; the unnamed ones are nats.c's timer,
#     callback, collector and flusher threads);
#   - the server's messages and bytes in and out (its /varz).
# BINARY is another fairq-proxy or fairq-relay to profile (an older commit's,
# say): alternate the two to compare a change. Needs curl for /varz.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=${BUILD:-$root/build}
impl=${1:-proxy}
exe=${2:-$bin/fairq-$impl}
DURATION=${DURATION:-10}
tmp=$(mktemp -d)
pid=""
cleanup() {
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    [ ! -f "$tmp/nats.pid" ] || kill "$(cat "$tmp/nats.pid")" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

port=$("$here/free-port.sh")
mport=$("$here/free-port.sh")
nats-server -js -a 127.0.0.1 -p "$port" -m "$mport" -sd "$tmp/store" >"$tmp/nats.log" 2>&1 &
echo $! >"$tmp/nats.pid"
url=nats://127.0.0.1:$port
for _ in $(seq 1 100); do grep -q "Server is ready" "$tmp/nats.log" && break; sleep 0.1; done
varz() {
    curl -s "http://127.0.0.1:$mport/varz" |
        python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["in_msgs"], v["out_msgs"], v["in_bytes"], v["out_bytes"])'
}

case $impl in
relay) "$exe" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
proxy) "$exe" -c "$root/config/bench.yaml" --nats "$url" >"$tmp/impl.log" 2>&1 & ;;
*) echo "usage: $0 [proxy|relay] [BINARY]" >&2; exit 2 ;;
esac
pid=$!
for _ in $(seq 1 40); do
    "$bin/fairq-load" --nats "$url" --rate 0 --count 1 --duration 0 --tenants 1 --workers 1 \
        --drain 10 >/dev/null 2>&1 && break
    sleep 0.5
done

# "tid cpu_ticks ctx_switches" for each thread of pid.
threads() {
    for t in /proc/"$pid"/task/*; do
        echo "${t##*/} $(awk '{ print $14 + $15 }' "$t/stat") $(awk '/_ctxt_switches:/ { s += $2 } END { print s }' "$t/status")"
    done | sort
}
threads >"$tmp/before"
v0=$(varz)
"$bin/fairq-load" --nats "$url" --tenants 10 --costs 100:0.9,5000:0.1 --body-size 512 --rate 0 \
    --max-outstanding 10000 --warmup 2 --duration "$DURATION" --workers 256 >"$tmp/load.out"
threads >"$tmp/after"
v1=$(varz)
: >"$tmp/names"
if command -v gdb >/dev/null; then
    gdb -p "$pid" -batch -ex "thread apply all bt 8" 2>/dev/null |
        awk '/^Thread/ { match($0, /LWP [0-9]+/); t = substr($0, RSTART + 4, RLENGTH - 4); next }
             /^#[0-9]/ && t != "" && $0 ~ /nats|fq_|px_|nio|relay/ {
                 sub(/^#[0-9]+ +(0x[0-9a-f]+ in )?/, ""); sub(/ \(.*/, ""); a[t] = a[t] " " $0 }
             END { for (k in a) print k, a[k] }' | sort >"$tmp/names" || true
fi

grep -E "^runs|^throughput" "$tmp/load.out"
n=$(awk '$1 == "runs" { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "submitted") print kv[2] } }' "$tmp/load.out")
hz=$(getconf CLK_TCK)
join "$tmp/before" "$tmp/after" |
    awk -v n="$n" -v hz="$hz" '{ printf "%s cpu_us_per_run=%.2f ctx_per_run=%.3f\n", $1, ($4 - $2) * 1e6 / hz / n, ($5 - $3) / n }' |
    join -a1 - "$tmp/names" |
    awk '{ print "thread", $0; split($2, c, "="); split($3, x, "="); cpu += c[2]; ctx += x[2] }
         END { printf "total cpu_us_per_run=%.2f ctx_per_run=%.3f\n", cpu, ctx }'
echo "$v0 $v1" | awk -v n="$n" '{ printf "server in_msgs_per_run=%.2f out_msgs_per_run=%.2f in_bytes_per_run=%.0f out_bytes_per_run=%.0f\n", ($5 - $1) / n, ($6 - $2) / n, ($7 - $3) / n, ($8 - $4) / n }'
