#!/usr/bin/env bash
# merge.sh BUILD: fold the inputs `make fuzz` found (BUILD/fuzz-out/NAME/new)
# into the committed corpus tests/fuzz/corpus/NAME, keeping only those that
# add coverage (libFuzzer -merge=1), then empty the scratch directories.
set -euo pipefail
build=$1
dir=$(cd "$(dirname "$0")" && pwd)
for bin in "$build"/fuzz_*; do
    name=$(basename "$bin")
    name=${name#fuzz_}
    new=$build/fuzz-out/$name/new
    [ -d "$new" ] && [ -n "$(ls -A "$new")" ] || continue
    before=$(ls "$dir/corpus/$name" | wc -l)
    nice -n 19 "$bin" -merge=1 -max_len=8192 -timeout=20 "$dir/corpus/$name" "$new" \
        >"$build/fuzz-out/$name/merge.log" 2>&1
    rm -rf "$new" && mkdir -p "$new"
    echo "merge $name: $before -> $(ls "$dir/corpus/$name" | wc -l) files"
done
