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
# CMAKE_ARGS are added to the configure step (e.g. -DACCORD_WITH_CUDA=OFF:
# the CUDA kernels are compiled by nvcc, unsanitized, and the GPU path's
# tests run on the host emulation of the device either way). The
# compiler is clang unless CC and CXX say otherwise; JOBS (default: the
# number of cores) sets the build's and ctest's parallelism. Every sanitizer
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
export CC=${CC:-clang} CXX=${CXX:-clang++}

start=$(date +%s)
echo "== configure $build_dir (ACCORD_SANITIZE=$sanitizer, $CXX)"
cmake -S "$root" -B "$build_dir" \
  -DACCORD_SANITIZE="$sanitizer" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DACCORD_BUILD_BENCHMARKS=OFF \
  -DACCORD_BUILD_EXAMPLES=OFF \
  "$@"
echo "== build"
cmake --build "$build_dir" -j "$jobs"
built=$(date +%s)

# Two selections: the single-process unit tests, then the multi-rank suites.
# Both run even when the first fails, so one run reports everything.
status=0
echo "== unit tests"
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure \
  -R '^(unit_tests|launcher_unit_tests)$' || status=1
# Under ASan, the suites that split every MPI call into calls of at most 7
# elements (ACCORD_MPI_MAX_COUNT=7, *_splitcalls*) are left out: each of
# their hundreds of thousands of MPI calls allocates, and the full stack that
# the leak suppressions need (fast_unwind_on_malloc=0) makes them outlast
# their timeout. ThreadSanitizer and the regular build run them.
exclude=()
[[ $sanitizer == address ]] && exclude=(-E '_splitcalls')
echo "== multi-rank suites"
ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure -L mpi "${exclude[@]}" || status=1

end=$(date +%s)
echo "== $sanitizer: build $((built - start)) s, tests $((end - built)) s, $([[ $status -eq 0 ]] && echo passed || echo FAILED)"
exit $status
