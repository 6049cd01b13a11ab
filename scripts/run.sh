#!/usr/bin/env bash
# run.sh BUILD_DIR CONFIG: run fairq-proxy in the foreground on CONFIG.
# Unless FAIRQ_NATS_URL names a server, a local nats-server with JetStream is
# started first on the shipped config/nats-server.conf (a user and
# permissions per role: docs/security.md), its data in the project's
# .nats-data/ folder (git-ignored),
# on 127.0.0.1:4222 if that port is free (else on a free one), and it is
# stopped when the proxy exits. Ctrl-C stops the proxy gracefully.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:?usage: run.sh BUILD_DIR CONFIG}
config=${2:?usage: run.sh BUILD_DIR CONFIG}
proxy="$build/fairq-proxy"
[ -x "$proxy" ] || { echo "run.sh: $proxy not built (make build)" >&2; exit 1; }
"$proxy" --check-config -c "$config" >/dev/null

server_pid=""
# The server has its own session, so that Ctrl-C reaches only the proxy,
# which still needs the server to finish its publishes and acks.
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$server_pid" 2>/dev/null || true
  server_pid=""
}

if [ -z "${FAIRQ_NATS_URL:-}" ]; then
  data="$root/.nats-data"
  mkdir -p "$data"
  port=4222
  # SO_REUSEADDR as nats-server binds: a port left in TIME_WAIT by the last
  # run is free to it, and `make run` should come back on 4222.
  if ! python3 -c 'import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1",4222)); s.listen()' 2>/dev/null; then
    port=$("$here/free-port.sh")
  fi
  rm -f "$data/nats.pid"
  setsid nats-server -c "$root/config/nats-server.conf" -a 127.0.0.1 -p "$port" \
    -sd "$data/store" -P "$data/nats.pid" \
    >"$data/nats.log" 2>&1 </dev/null &
  trap stop_server EXIT
  for _ in $(seq 1 100); do
    [ -z "$server_pid" ] && [ -s "$data/nats.pid" ] && server_pid=$(cat "$data/nats.pid")
    grep -q "Server is ready" "$data/nats.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "Server is ready" "$data/nats.log" || { cat "$data/nats.log" >&2; exit 1; }
  export FAIRQ_NATS_URL="nats://127.0.0.1:$port"
  echo "run.sh: nats-server with JetStream at $FAIRQ_NATS_URL on config/nats-server.conf, data in .nats-data/ (log: .nats-data/nats.log)" >&2
  echo "run.sh: clients connect as their role, with its demo password and inbox, e.g." >&2
  echo "  build/fairq-worker --nats nats://provisioner:provisioner-demo-password@127.0.0.1:$port --inbox-prefix _INBOX_provisioner --create-only --deliver all   # the pool's durable, once" >&2
  echo "  build/fairq-worker --nats nats://worker:worker-demo-password@127.0.0.1:$port --inbox-prefix _INBOX_worker --api-prefix JS.FAIRQ.API" >&2
  echo "  build/fairq-producer --nats nats://acme:acme-demo-password@127.0.0.1:$port --inbox-prefix _INBOX_acme --tenant acme" >&2
  echo "  build/fairq-admin --nats nats://admin:admin-demo-password@127.0.0.1:$port --inbox-prefix _INBOX_admin stats" >&2
else
  echo "run.sh: using the NATS server at FAIRQ_NATS_URL" >&2
fi

# The proxy runs as a child so the server can be stopped after it; signals
# are passed on so that it stops gracefully.
"$proxy" -c "$config" &
proxy_pid=$!
trap 'kill -TERM "$proxy_pid" 2>/dev/null || true' INT TERM
rc=0
while kill -0 "$proxy_pid" 2>/dev/null; do
  wait "$proxy_pid" && rc=0 || rc=$?
done
exit "$rc"
