#!/usr/bin/env bash
# sim-chart.sh: chart each tenant's queue wait over time, one panel per policy, with gnuplot.
#   scripts/sim-chart.sh [-b BUILD] [-p POLICIES] SCENARIO.yaml OUT.png|OUT.svg   simulate, then chart
#   scripts/sim-chart.sh WAITS.csv OUT.png|OUT.svg                               chart fairq-sim --waits output
# With several scenarios in the CSV, the first is charted. The tenant with the most runs is drawn
# in grey behind the others.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
policies=all
while getopts "b:p:" o; do
    case $o in
    b) build=$OPTARG ;;
    p) policies=$OPTARG ;;
    *) sed -n '2,6p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -ne 2 ]; then
    sed -n '2,6p' "$0" >&2
    exit 2
fi
in=$1 out=$2
command -v gnuplot >/dev/null || { echo "sim-chart.sh: gnuplot is missing (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $in in
*.yaml | *.yml)
    "$build/fairq-sim" -p "$policies" --waits "$tmp/waits.csv" -o /dev/null "$in"
    waits=$tmp/waits.csv ;;
*) waits=$in ;;
esac
# The first scenario's policies and tenants, in the order they appear.
read -r scen < <(awk -F, 'NR == 2 { print $1; exit }' "$waits")
[ -n "$scen" ] || { echo "sim-chart.sh: $waits has no runs" >&2; exit 1; }
pols=$(awk -F, -v s="$scen" 'NR > 1 && $1 == s && !seen[$2]++ { printf "%s ", $2 }' "$waits")
tens=$(awk -F, -v s="$scen" 'NR > 1 && $1 == s && !seen[$3]++ { printf "%s ", $3 }' "$waits" |
    tr ' ' '\n' | sort -V | tr '\n' ' ')
big=$(awk -F, -v s="$scen" -v p="${pols%% *}" 'NR > 1 && $1 == s && $2 == p { n[$3]++ }
    END { for (t in n) if (n[t] > m) { m = n[t]; b = t }; print b }' "$waits")
gnuplot -c "$root/scripts/sim-chart.gp" "$waits" "$out" "$scen" "$pols" "$tens" "$big"
echo "sim-chart.sh: wrote $out"
