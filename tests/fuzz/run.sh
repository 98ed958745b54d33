#!/bin/sh
# run.sh FUZZER OUTDIR RUNS SEED... — one libFuzzer run for the suite `fuzz`:
# RUNS executions starting from the committed seeds (directories or files
# that exist) and nothing else — OUTDIR (in the build directory) is emptied
# first, so a warm tree explores exactly as a fresh clone does (-seed=1);
# new inputs land in OUTDIR, a crash there as crash-* and the run failed.
# Copy a crash into tests/fuzz/crashes/NAME/ to make it a regression test of
# the normal suite. Long exploration that keeps what it finds is
# `scripts/ember-dev fuzz` (its own directory, found/).
set -eu
fuzzer=$1 out=$2 runs=$3
shift 3
rm -rf "$out" "$out.files"
mkdir -p "$out"
seeds=""
files=""
for s in "$@"; do
    if [ -d "$s" ]; then
        seeds="$seeds $s"
    elif [ -f "$s" ]; then
        files="$files $s"
    fi
done
if [ -n "$files" ]; then   # single seed files: into a directory of their own
    mkdir -p "$out.files"
    # shellcheck disable=SC2086
    cp $files "$out.files/"
    seeds="$seeds $out.files"
fi
# the Vulkan driver's own allocations are not ember's leaks (fuzz_http)
LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
# shellcheck disable=SC2086
exec "$fuzzer" -runs="$runs" -seed=1 -max_len=65536 -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$out/" "$out" $seeds
