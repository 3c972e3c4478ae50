#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fuzz.sh BUILD_DIR SECONDS: runs every fuzz_* program of BUILD_DIR for SECONDS each, starting
# from its checked-in seeds in fuzz/corpus/<name>/ (read-only: new inputs go to a temp dir).
# A crash, leak or timeout fails (exit 1) and leaves the input in $FUZZ_ARTIFACTS (default
# BUILD_DIR/fuzz-artifacts) to replay: BUILD_DIR/fuzz_x ARTIFACT.
set -eu
build=${1:?usage: fuzz.sh BUILD_DIR SECONDS}
secs=${2:-60}
here=$(cd "$(dirname "$0")/.." && pwd)
art=${FUZZ_ARTIFACTS:-$build/fuzz-artifacts}
mkdir -p "$art"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
failed=0
for f in "$build"/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    seeds="$here/fuzz/corpus/$name"
    mkdir -p "$work/$name"
    printf '== %s (%ss, seeds %s)\n' "$name" "$secs" "$(ls "$seeds" 2>/dev/null | wc -l)"
    if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$f" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 -max_len=16384 \
        -print_final_stats=0 -artifact_prefix="$art/$name-" "$work/$name" "$seeds" \
        >"$work/$name.log" 2>&1; then
        tail -40 "$work/$name.log"
        echo "FAIL $name: input in $art/"
        failed=1
    else
        grep -E '^#[0-9]+.*DONE' "$work/$name.log" | tail -1 || true
    fi
done
exit $failed
