#!/usr/bin/env bash
# Builds accord with sanitizers and runs its C++ suites under them: the unit
# tests (core and launcher) and the multi-rank suites (ctest -L mpi, 1-4
# ranks under mpiexec).
#
#   tests/sanitizers/run.sh address|thread [BUILD_DIR [CMAKE_ARGS...]]
#
#   address  AddressSanitizer (with leak checking) and UndefinedBehaviorSanitizer
#   thread   ThreadSanitizer
#
# BUILD_DIR defaults to build-asan or build-tsan in the repository root;
# CMAKE_ARGS are added to the configure step, after the defaults below.
#
# The build is tuned for a short turnaround (about 3 minutes on 2 cores,
# against 25 with the defaults of a release build): -O1 with line tables only
# (-gline-tables-only: every report still names file:line in every frame,
# and asserts stay on), and CUDA and NCCL off: nvcc compiles the kernels
# unsanitized anyway, and the GPU path's tests run on the host emulation of
# the device either way (-DACCORD_WITH_CUDA=ON in CMAKE_ARGS puts them back).
# The compiler is clang unless CC and CXX say otherwise; JOBS (default: the
# number of cores) sets the build's and ctest's parallelism. STEPS (default
# "build test") runs only some of the two steps: STEPS=build configures and
# builds, STEPS=test runs the tests of an earlier build (.ci/run starts the
# fuzz targets' build between the two). Every sanitizer
# report fails its test; the script exits non-zero if the build or any test
# failed. The options and suppressions are in this directory (see
# CMakeLists.txt, ACCORD_SANITIZE).
set -euo pipefail

usage() {
  echo "usage: $0 address|thread [BUILD_DIR [CMAKE_ARGS...]]" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
sanitizer=$1
case "$sanitizer" in
  address) default_dir=build-asan ;;
  thread) default_dir=build-tsan ;;
  *)
    echo "$0: unknown sanitizer '$sanitizer': expected address or thread" >&2
    usage
    ;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${2:-$root/$default_dir}
shift $(($# < 2 ? $# : 2))
jobs=${JOBS:-$(nproc)}
steps=${STEPS:-build test}
for step in $steps; do
  [[ "$step" == build || "$step" == test ]] || { echo "$0: unknown step '$step' in STEPS: expected build, test or both" >&2; exit 2; }
done
export CC=${CC:-clang} CXX=${CXX:-clang++}

start=$(date +%s)
built=$start
if [[ " $steps " == *" build "* ]]; then
  echo "== configure $build_dir (ACCORD_SANITIZE=$sanitizer, $CXX)"
  cmake -S "$root" -B "$build_dir" \
    -DACCORD_SANITIZE="$sanitizer" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
    -DACCORD_WITH_CUDA=OFF \
    -DACCORD_WITH_NCCL=OFF \
    -DACCORD_BUILD_BENCHMARKS=OFF \
    -DACCORD_BUILD_EXAMPLES=OFF \
    "$@"
  echo "== build"
  cmake --build "$build_dir" -j "$jobs"
  built=$(date +%s)
fi
if [[ " $steps " != *" test "* ]]; then
  echo "== $sanitizer: build $((built - start)) s"
  exit 0
fi

# Two selections: the single-process unit tests, then the multi-rank suites.
# Both run even when the first fails, so one run reports everything.
status=0
echo "== unit tests"
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure \
  -R '^(unit_tests|launcher_unit_tests)$' || status=1
echo "== multi-rank suites"
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure -L mpi || status=1

end=$(date +%s)
took="tests $((end - built)) s"
[[ " $steps " != *" build "* ]] || took="build $((built - start)) s, $took"
echo "== $sanitizer: $took, $([[ $status -eq 0 ]] && echo passed || echo FAILED)"
exit $status
