#!/usr/bin/env bash
# W3 (benchmarks/horovod_w3.py: a step = 256 async in-place allreduces of 4096
# float32, then a synchronize of each handle) under Horovod 0.28.1 and under
# accord.torch, side by side, at two ranks bound to cores:
#
#   benchmarks/horovod_w3.sh [ROUNDS] [VENV] [-- HOROVOD_W3_ARGS...]
#
# ROUNDS (default 8): each round runs both sides, one after the other, each as
# its own job,
#
#   mpirun --allow-run-as-root -np 2 --bind-to core PYTHON benchmarks/horovod_w3.py --module=M
#
# with the order alternating (odd rounds Horovod first, even rounds accord
# first). Horovod's PYTHON is VENV/bin/python (VENV default /tmp/hvd: a venv
# with --system-site-packages holding horovod 0.28.1 built with PyTorch and
# MPI); accord's is /usr/bin/python3 with PYTHONPATH=${ACCORD_PYTHONPATH:-build/python}
# (relative to the repository root). Arguments after -- go to horovod_w3.py
# on both sides (e.g. -- --steps 100 --tensors 64).
#
# Each round prints both rates (steps/s, rank 0's clock) and the ratio
# accord/horovod (above 1: accord is faster); at the end, the median ratio
# with its min and max over the rounds, and each side's median rate.
#
# Settings: both libraries run at their defaults (Horovod 0.28.1: cycle time
# 1 ms, fusion threshold 128 MiB, response cache 1024, no autotune). accord
# reads HOROVOD_* variables as fallbacks for its own knobs, so every HOROVOD_*
# variable of the caller's environment is removed from both sides (a warning
# names them); ACCORD_* variables of the caller's environment do reach accord's
# side. Variants are given per side, as space-separated VAR=VALUE words:
#
#   HVD_ENV="HOROVOD_CYCLE_TIME=0.1" benchmarks/horovod_w3.sh        # Horovod at 0.1 ms
#   ACCORD_ENV="ACCORD_CYCLE_TIME_MS=0.1" benchmarks/horovod_w3.sh   # accord at 0.1 ms
#
# Other knobs: NP (default 2), BIND (mpirun's --bind-to, default core; e.g.
# none as a variant), TIMEOUT (seconds per job, default 600). A job
# that fails (wrong results make horovod_w3.py exit 1) or prints no HVD_W3
# line stops the script with its output and status 1. Needs one idle core per
# rank for meaningful numbers. Bound to a core, each library's background
# thread shares its rank's core with the Python thread (Horovod's synchronize
# spins on std::this_thread::yield while it waits).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
rounds=8
venv=/tmp/hvd
[[ $# -gt 0 && $1 != -- ]] && { rounds=$1; shift; }
[[ $# -gt 0 && $1 != -- ]] && { venv=$1; shift; }
[[ $# -gt 0 && $1 == -- ]] && shift
w3_args=("$@")
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
np="${NP:-2}"
bind="${BIND:-core}"
job_timeout="${TIMEOUT:-600}"
read -r -a hvd_env <<< "${HVD_ENV:-}"
read -r -a accord_env <<< "${ACCORD_ENV:-}"
for word in "${hvd_env[@]}" "${accord_env[@]}"; do
  [[ $word =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "HVD_ENV / ACCORD_ENV take VAR=VALUE words, not '$word'" >&2; exit 2; }
done

hvd_python="$venv/bin/python"
accord_python=/usr/bin/python3
accord_path="${ACCORD_PYTHONPATH:-build/python}"
[[ $accord_path == /* ]] || accord_path="$repo/$accord_path"
cd "$repo"

# Keep the caller's HOROVOD_* settings away from both sides (see above), and
# this script's own variables too.
stripped=(-u HVD_ENV -u ACCORD_ENV -u ACCORD_PYTHONPATH)
caller_hvd=()
for var in $(compgen -e); do
  if [[ $var == HOROVOD_* ]]; then
    stripped+=(-u "$var")
    caller_hvd+=("$var")
  fi
done
if [[ ${#caller_hvd[@]} -gt 0 ]]; then
  echo "warning: ignoring the caller's ${caller_hvd[*]} (use HVD_ENV / ACCORD_ENV)" >&2
fi

"$hvd_python" -c 'import horovod.torch as hvd, sys; sys.exit(0 if hvd.mpi_built() else 1)' \
  || { echo "horovod.torch in $venv is missing or not built with MPI" >&2; exit 1; }
PYTHONPATH="$accord_path" "$accord_python" -c 'import accord.torch' \
  || { echo "accord.torch is not importable from $accord_path" >&2; exit 1; }

work="$(mktemp -d /tmp/horovod_w3.XXXXXX)"
trap 'rm -rf "$work"' EXIT

mpi=(mpirun -np "$np" --bind-to "$bind")
[[ $(id -u) -eq 0 ]] && mpi=(mpirun --allow-run-as-root -np "$np" --bind-to "$bind")
echo "horovod: ${hvd_env[*]:+${hvd_env[*]} }${mpi[*]} $hvd_python benchmarks/horovod_w3.py --module=horovod.torch ${w3_args[*]:-}"
echo "accord:  PYTHONPATH=$accord_path ${accord_env[*]:+${accord_env[*]} }${mpi[*]} $accord_python benchmarks/horovod_w3.py --module=accord.torch ${w3_args[*]:-}"
accord_vars="$(compgen -e | grep '^ACCORD_' | grep -Ev '^ACCORD_(PYTHONPATH|ENV)$' | tr '\n' ' ' || true)"
[[ -n $accord_vars ]] && echo "accord also gets the caller's: $accord_vars"

rate=  # run_side's result
run_side() {  # side (horovod|accord), round: sets rate (steps/s), or stops the script
  local side=$1 round=$2 log="$work/$1.$2.log" rc=0
  local -a cmd
  if [[ $side == horovod ]]; then
    cmd=(env "${stripped[@]}" "${hvd_env[@]}" "${mpi[@]}" "$hvd_python" benchmarks/horovod_w3.py --module=horovod.torch)
  else
    cmd=(env "${stripped[@]}" PYTHONPATH="$accord_path" "${accord_env[@]}"
         "${mpi[@]}" "$accord_python" benchmarks/horovod_w3.py --module=accord.torch)
  fi
  timeout "$job_timeout" "${cmd[@]}" "${w3_args[@]}" > "$log" 2>&1 || rc=$?
  local line
  line="$(grep -m1 '^HVD_W3 ' "$log" || true)"
  if [[ $rc -ne 0 || -z $line ]]; then
    { echo "round $round: $side failed (status $rc); its output:"; cat "$log"; } >&2
    exit 1
  fi
  rate="$("$accord_python" -c 'import json, sys; print(json.loads(sys.argv[1][7:])["steps_per_s"])' "$line")"
}

for ((round = 1; round <= rounds; round++)); do
  if ((round % 2)); then order=(horovod accord); else order=(accord horovod); fi
  declare -A rates=()
  for side in "${order[@]}"; do
    run_side "$side" "$round"
    rates[$side]=$rate
  done
  echo "$round ${order[0]} ${rates[horovod]} ${rates[accord]}" >> "$work/rounds"
  printf 'round %d (%s first): horovod %.1f steps/s, accord %.1f steps/s, accord/horovod %.3f\n' \
    "$round" "${order[0]}" "${rates[horovod]}" "${rates[accord]}" \
    "$(awk -v a="${rates[accord]}" -v h="${rates[horovod]}" 'BEGIN { print a / h }')"
done

"$accord_python" - "$work/rounds" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
hvd = [float(r[2]) for r in rows]
acc = [float(r[3]) for r in rows]
ratios = [a / h for a, h in zip(acc, hvd)]
print(f"accord/horovod over {len(rows)} rounds: median {statistics.median(ratios):.3f}, "
      f"min {min(ratios):.3f}, max {max(ratios):.3f}")
print(f"median steps/s: horovod {statistics.median(hvd):.1f}, accord {statistics.median(acc):.1f}")
EOF
