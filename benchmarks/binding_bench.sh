#!/usr/bin/env bash
# The Horovod-style synthetic ResNet-18 benchmark (synthetic_resnet.py) at
# np 1 and np 2 under accordrun, under `mpirun --bind-to none` and as plain
# Python: what each launcher's binding and thread count give a rank.
#
#   benchmarks/binding_bench.sh BUILD_DIR [ROUNDS] [OLD_ACCORDRUN]
#
# BUILD_DIR holds the accord build (its accordrun and staged Python
# package); OLD_ACCORDRUN, when given, is another accordrun (e.g. one built
# from an earlier commit) run the same way, labelled accordrun_old. Each
# configuration runs ROUNDS times (default 2), one after another; every run
# prints one SYNTHETIC line (JSON) with its label.
set -euo pipefail
build="$(cd "${1:?usage: binding_bench.sh BUILD_DIR [ROUNDS] [OLD_ACCORDRUN]}" && pwd)"
rounds="${2:-2}"
old="${3:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench="$here/synthetic_resnet.py"
python=/usr/bin/python3
export PYTHONPATH="$build/python"
unset OMP_NUM_THREADS
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)

run() {  # label, command...
  local label=$1
  shift
  "$@" "$python" "$bench" --label "$label" 2>/dev/null | grep '^SYNTHETIC'
}

for round in $(seq "$rounds"); do
  run plain_np1 env
  run plain_np1_omp2 env OMP_NUM_THREADS=2
  run mpirun_bind_none_np1 mpirun "${root[@]}" -np 1 --bind-to none
  run accordrun_np1 "$build/launcher/accordrun" -np 1
  [[ -n "$old" ]] && run accordrun_old_np1 "$old" -np 1
  run mpirun_bind_none_np2 mpirun "${root[@]}" -np 2 --bind-to none
  run accordrun_np2 "$build/launcher/accordrun" -np 2
  [[ -n "$old" ]] && run accordrun_old_np2 "$old" -np 2
done
