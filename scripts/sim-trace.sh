#!/usr/bin/env bash
# sim-trace.sh [BUILD_DIR]: regenerate the example trace, config/traces/tuesday.csv, from the tuesday scenario.
# The trace is generated, never edited by hand: tests/test_sim.c checks that it is what this writes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
mkdir -p "$root/config/traces"
"$build/fairq-sim" --emit-trace "$root/config/traces/tuesday.csv" "$root/config/scenarios/tuesday.yaml"
echo "sim-trace.sh: wrote config/traces/tuesday.csv"
