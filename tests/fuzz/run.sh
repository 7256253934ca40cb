#!/usr/bin/env bash
# Builds accord's fuzz targets (tests/fuzz/README.md) and runs each for a
# bounded time on its corpus.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [BUILD_DIR]
#
# SECONDS_PER_TARGET defaults to 60, BUILD_DIR to <repo>/build-fuzz
# (configured with clang and -DACCORD_FUZZ=ON if it is not already).
# Targets run one after another, each on a working copy of its corpus under
# BUILD_DIR/fuzz-corpus/<target> (the tree's corpus/ is only read). Exits 1
# if any target crashed, leaked, timed out or broke a property; the input
# that did it is written to BUILD_DIR/fuzz-artifacts/<target>/ (replacing
# the previous run's) and the command to replay it is printed.
# FUZZ_TARGETS="a b" runs only those targets.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
seconds="${1:-60}"
build="${2:-$repo/build-fuzz}"
targets="${FUZZ_TARGETS:-negotiation_wire negotiation_coordinator config_env launcher dlpack_view}"

if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "run.sh: SECONDS_PER_TARGET must be a whole number of seconds, at least 1 (got '$seconds')" >&2
  exit 2
fi

start=$(date +%s)
if ! grep -qs '^ACCORD_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -DACCORD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DACCORD_BUILD_TESTS=OFF -DACCORD_BUILD_PYTHON=OFF -DACCORD_BUILD_TORCH=OFF \
    -DACCORD_BUILD_BENCHMARKS=OFF -DACCORD_BUILD_EXAMPLES=OFF >/dev/null
fi
cmake --build "$build" --target accord_fuzz -j"$(nproc)"
echo "run.sh: built in $(( $(date +%s) - start )) s"

failed=()
for target in $targets; do
  binary="$build/tests/fuzz/${target}_fuzz"
  seeds="$here/corpus/$target"
  work="$build/fuzz-corpus/$target"
  artifacts="$build/fuzz-artifacts/$target"
  log="$build/fuzz-logs/$target.log"
  rm -rf "$artifacts"  # the previous run's inputs were reported by that run
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  dict=()
  [ -f "$here/$target.dict" ] && dict=(-dict="$here/$target.dict")
  echo "run.sh: $target for ${seconds} s (log: $log)"
  status=0
  # -timeout: one input taking 10 s is a hang; -malloc_limit_mb: one
  # allocation of 256 MiB from inputs of at most 64 KiB is a decoder trusting
  # a count; -rss_limit_mb bounds the whole process.
  "$binary" -max_total_time="$seconds" -timeout=10 -max_len=65536 -malloc_limit_mb=256 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "$work" "$seeds" >"$log" 2>&1 || status=$?
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" | sed "s/^/  /" || true
  if [ "$status" -ne 0 ]; then
    failed+=("$target")
    echo "run.sh: $target FAILED (exit $status); the end of its log:" >&2
    tail -n 40 "$log" >&2
    for input in "$artifacts"/*; do
      [ -e "$input" ] && echo "run.sh: replay with: $binary $input" >&2
    done
  fi
done

echo "run.sh: finished in $(( $(date +%s) - start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "run.sh: failed: ${failed[*]}; inputs in $build/fuzz-artifacts/" >&2
  exit 1
fi
echo "run.sh: no target failed"
