#!/usr/bin/env bash
# nats-up.sh DIR [ARGS...]: start nats-server with JetStream on a free loopback port, its store in DIR,
# ARGS appended to its command line (-c FILE: a config of its own).
# Prints the URL; the pid is in DIR/nats.pid. Stop it with nats-down.sh DIR.
set -euo pipefail
dir=$1
shift
mkdir -p "$dir"
port=$("$(dirname "$0")/free-port.sh")
nats-server -js -a 127.0.0.1 -p "$port" -sd "$dir/store" "$@" >"$dir/nats.log" 2>&1 &
echo $! >"$dir/nats.pid"
for _ in $(seq 1 100); do
  if grep -q "Server is ready" "$dir/nats.log" 2>/dev/null; then
    echo "nats://127.0.0.1:$port"; exit 0
  fi
  sleep 0.1
done
echo "nats-up: nats-server did not start; its log:" >&2
cat "$dir/nats.log" >&2
exit 1
