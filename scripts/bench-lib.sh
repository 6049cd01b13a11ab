# bench-lib.sh: what the benchmark scripts share; sourced (. bench-lib.sh), not run.
#
# field FILE PREFIX KEY   the value of KEY on the first line of FILE whose
#                         first word is PREFIX (the key=value reports of
#                         fairq-load, the scripts and nats-tap.py)
# median                  the median of the numbers on stdin, one a line
# cpu_ms PID              CPU time (user + system) the process used so far, ms
# ctx_switches PID        context switches of all its threads so far: each is
#                         a thread put to sleep and woken again
# stop_pid PID            SIGTERM, up to 10 s to exit, then SIGKILL; reaped

field() {
    awk -v p="$2" -v k="$3" '$1 == p { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) { print kv[2]; exit } } }' "$1"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
hz=$(getconf CLK_TCK)
cpu_ms() { awk -v hz="$hz" '{ sub(/.*\) /, ""); print int(($12 + $13) * 1000 / hz) }' "/proc/$1/stat"; }
ctx_switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null | awk '/_ctxt_switches:/ { s += $2 } END { print s + 0 }'
}
stop_pid() {
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
