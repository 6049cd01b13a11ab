#!/usr/bin/env bash
# demo_test.sh -- `make demo` (scripts/demo.sh) shows the card's Tuesday live, and leaves nothing running.
#
# Runs the demo at 300x (about 15 s a phase instead of 30) and checks, from
# what it prints:
#   - both phases complete every run exactly once (the demo stops otherwise);
#   - behind the FIFO relay the other tenants' worst first-run wait is at
#     least 30 minutes of scenario time (the card says 40: ~600 of A's runs
#     are ahead of them, so it cannot be shorter), and through fairq-proxy at
#     most 5 minutes (fairq-sim: 20 s; the margin is a machine stalled for a
#     second of real time);
#   - the proxy's stats: A's queue held runs during the load, and afterwards
#     the proxy dispatched and saw completed every run the scenario has;
#   - no process is left holding a file in the demo's temporary directory,
#     which is removed, after a whole run and after a SIGTERM mid-phase.
set -euo pipefail

src=${FAIRQ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FAIRQ_BUILD_DIR:-$src/build}
compress=300
t=$(mktemp -d)
demo_pid=""
trap '[ -z "$demo_pid" ] || kill "$demo_pid" 2>/dev/null || true; rm -rf "$t"' EXIT

fail() {
    echo "demo_test: FAIL: $*" >&2
    for f in "$t"/*.out "$t"/*.err; do [ -s "$f" ] && { echo "--- $f" >&2; tail -40 "$f" >&2; }; done
    exit 1
}

# Processes with a file open under the directory $1, or started with it in
# their command line (the demo's nats-servers keep their store there).
holders() {
    local p
    for p in /proc/[0-9]*; do
        [ "$p" != "/proc/$$" ] || continue
        if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF "$1" ||
            ls -l "$p/fd" 2>/dev/null | grep -qF "$1"; then
            echo "${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
        fi
    done
}

# The demo makes its own temporary directory under TMPDIR.
mkdir "$t/run" "$t/int"
TMPDIR=$t/run COMPRESS=$compress "$src/scripts/demo.sh" "$bin" >"$t/demo.out" 2>"$t/demo.err" ||
    fail "demo.sh exited with $?"

# The real milliseconds in brackets of the "worst of others" row: FIFO
# first, fairq first, FIFO p99, fairq p99.
row=$(grep '^worst of others' "$t/demo.out") || fail "no 'worst of others' row"
read -r fifo_first fairq_first fifo_p99 fairq_p99 <<<"$(echo "$row" | grep -o '([0-9]*)' | tr -d '()' | tr '\n' ' ')"
scen_min() { awk -v ms="$1" -v c="$compress" 'BEGIN { printf "%.2f", ms * c / 60000 }'; }
echo "demo_test: worst of others, scenario minutes: first run FIFO $(scen_min "$fifo_first")," \
     "fairq $(scen_min "$fairq_first"); p99 FIFO $(scen_min "$fifo_p99"), fairq $(scen_min "$fairq_p99")"
awk -v f="$(scen_min "$fifo_first")" 'BEGIN { exit !(f >= 30) }' ||
    fail "behind FIFO the others' worst first-run wait is $(scen_min "$fifo_first") min, not at least 30"
awk -v f="$(scen_min "$fairq_first")" 'BEGIN { exit !(f <= 5) }' ||
    fail "through fairq the others' worst first-run wait is $(scen_min "$fairq_first") min, not at most 5"
awk -v f="$(scen_min "$fifo_p99")" -v q="$(scen_min "$fairq_p99")" 'BEGIN { exit !(f >= 30 && q <= 5) }' ||
    fail "p99 of the others: FIFO $(scen_min "$fifo_p99") min (want >= 30), fairq $(scen_min "$fairq_p99") min (want <= 5)"

# The proxy's stats, as printed: A queued during the load; every run dispatched and completed.
a_queued=$(awk '/^tenant +queued/ { on = 1; next } on && $1 == "A" { print $2; exit }' "$t/demo.out")
[ -n "$a_queued" ] && [ "$a_queued" -gt 100 ] || fail "A had '$a_queued' runs queued in the proxy's stats, not over 100"
grep -q '^overall: submitted 954, dispatched 954, completions 954, refused 0, expired 0; window 10 runs$' "$t/demo.out" ||
    fail "the proxy's overall stats are not 954 runs dispatched and completed"
[ "$(grep -c 'each completed exactly once' "$t/demo.out")" = 2 ] || fail "a phase did not complete every run once"

left=$(holders "$t/run")
[ -z "$left" ] || fail "left running after the demo: $left"
[ -z "$(ls -A "$t/run")" ] || fail "the demo left files in its temporary directory: $(ls -A "$t/run")"

# A SIGTERM while the proxy is serving stops everything the demo started.
TMPDIR=$t/int COMPRESS=$compress "$src/scripts/demo.sh" "$bin" >"$t/int.out" 2>"$t/int.err" &
demo_pid=$!
for _ in $(seq 1 300); do
    grep -qs "fairq-proxy running" "$t"/int/*/proxy.log && break
    kill -0 "$demo_pid" 2>/dev/null || fail "the demo stopped before the proxy ran"
    sleep 0.1
done
grep -qs "fairq-proxy running" "$t"/int/*/proxy.log || fail "the proxy did not start within 30 s"
kill -TERM "$demo_pid"
rc=0
wait "$demo_pid" || rc=$?
demo_pid=""
[ "$rc" = 143 ] || fail "the demo exited with $rc on SIGTERM, not 143"
left=$(holders "$t/int")
[ -z "$left" ] || fail "left running after SIGTERM: $left"
[ -z "$(ls -A "$t/int")" ] || fail "the demo left files after SIGTERM: $(ls -A "$t/int")"
echo "demo_test: ok"
