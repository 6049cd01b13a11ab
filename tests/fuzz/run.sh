#!/usr/bin/env bash
# run.sh BINARY FUZZ_DIR OUT_DIR: run one libFuzzer target of tests/fuzz
# (ctest label fuzz, docs/fuzzing.md). It replays the committed corpus
# FUZZ_DIR/corpus/NAME (NAME: the binary's name less fuzz_), then fuzzes for
# FUZZ_SECS seconds (default 10; 0 replays only). New inputs go to
# OUT_DIR/NAME/new and crashes to OUT_DIR/NAME/, never into the corpus;
# `make fuzz-merge` folds new inputs into the corpus.
set -euo pipefail
bin=$1
dir=$2
out=$3
name=$(basename "$bin")
name=${name#fuzz_}
secs=${FUZZ_SECS:-10}
corpus=$dir/corpus/$name
scratch=$out/$name
mkdir -p "$scratch/new"
[ -d "$corpus" ] || { echo "fuzz $name: no corpus $corpus" >&2; exit 1; }

args=(-timeout=20 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1
      -artifact_prefix="$scratch/")
[ -f "$dir/$name.dict" ] && args+=(-dict="$dir/$name.dict")
if [ "$secs" -gt 0 ]; then
    args+=(-max_total_time="$secs")
else
    args+=(-runs=0)
fi
log=$scratch/log
rc=0
# The first directory given takes what the fuzzer finds; the second is only read.
nice -n 19 "$bin" "${args[@]}" "$scratch/new" "$corpus" >"$log" 2>&1 || rc=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
time=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
verdict=ok
[ "$rc" -eq 0 ] || verdict=FAILED
echo "fuzz $name: ${runs:-?} executions in ${time:-?} s, corpus $(ls "$corpus" | wc -l) files," \
     "$(ls "$scratch/new" | wc -l) new, $verdict" | tee "$scratch/summary"
if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz $name: FAILED (exit $rc); the input is in $scratch/, the log in $log" >&2
    exit "$rc"
fi
