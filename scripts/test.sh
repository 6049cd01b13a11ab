#!/usr/bin/env bash
# test.sh BUILD_DIR [ctest args]: run the whole suite in BUILD_DIR with a nats-server of its own.
# The server listens on a free loopback port with a temporary store, and is stopped on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1; shift
tmp=$(mktemp -d)
trap '"$here/nats-down.sh" "$tmp"; rm -rf "$tmp"' EXIT
FAIRQ_TEST_NATS_URL=$("$here/nats-up.sh" "$tmp")
export FAIRQ_TEST_NATS_URL
echo "test.sh: nats-server at $FAIRQ_TEST_NATS_URL"
ctest --test-dir "$build" --output-on-failure "$@"
