#!/usr/bin/env bash
# Runs an MPI job across the test bed's hosts (bed.sh):
#
#   run_on_bed.sh [MPIRUN ARGS...] PROGRAM [ARGS...]
#
# e.g. run_on_bed.sh -np 4 -H h1:2,h2:2 -x ACCORD_HIERARCHICAL_ALLREDUCE=1 build/tests/x
#
# It adds what makes mpirun start ranks on the bed as on real hosts: the rsh
# agent (netns-rsh), Open MPI's TCP traffic (its control channel and the tcp
# data transport) pinned to the bed's subnet, and the variables the ranks
# need from this shell (-x PATH LD_LIBRARY_PATH PYTHONPATH and every
# ACCORD_*/HOROVOD_* set here), since the agent, like ssh, starts each host
# with a clean environment. If the bed lacks a host the job names, it is
# brought up for the run and torn down afterwards; a bed that was already up
# is left up. Exits 77 (CTest's skip code) when not root.
set -euo pipefail

here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
subnet="${ACCORD_BED_SUBNET:-10.77.0}"

if [[ "$(id -u)" -ne 0 ]]; then
  echo "run_on_bed.sh: skipped: the multi-host test bed needs root (network namespaces)" >&2
  exit 77
fi
if ! ip netns list >/dev/null 2>&1; then
  echo "run_on_bed.sh: skipped: this kernel or container does not allow network namespaces" >&2
  exit 77
fi

# The highest host the job names (-H h1:2,h3 / --host ...).
need=1
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    -H|--host|-host) list="${args[i + 1]:-}" ;;
    --host=*) list="${args[i]#--host=}" ;;
    *) continue ;;
  esac
  for h in ${list//,/ }; do
    h="${h%%:*}"
    [[ "${h}" =~ ^h([0-9]+)$ ]] && ((BASH_REMATCH[1] > need)) && need="${BASH_REMATCH[1]}"
  done
done

have="$(ip netns list | awk '{print $1}' | grep -cE '^h[0-9]+$' || true)"
if ((have < need)); then
  "${here}/bed.sh" up "${need}" >&2
  trap '"${here}/bed.sh" down' EXIT
fi

forward=()
while IFS='=' read -r name _; do
  forward+=(-x "${name}")
done < <(env | grep -E '^(PATH|LD_LIBRARY_PATH|PYTHONPATH|(ACCORD|HOROVOD)_[A-Za-z0-9_]*)=' || true)

status=0
mpirun --mca plm_rsh_agent "${here}/netns-rsh" \
  --mca oob_tcp_if_include "${subnet}.0/24" --mca btl_tcp_if_include "${subnet}.0/24" \
  "${forward[@]}" "$@" || status=$?
exit "${status}"
