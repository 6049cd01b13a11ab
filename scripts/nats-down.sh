#!/usr/bin/env bash
# nats-down.sh DIR: stop the nats-server that nats-up.sh started in DIR.
dir=$1
[ -f "$dir/nats.pid" ] || exit 0
pid=$(cat "$dir/nats.pid")
kill "$pid" 2>/dev/null || true
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null || true
rm -f "$dir/nats.pid"
