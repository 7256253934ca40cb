#!/usr/bin/env bash
# multihost_bench.sh: the multi-host figures of docs/benchmarks.md, on the
# test bed of network namespaces (tests/multihost/bed.sh), as root.
#
#   benchmarks/multihost_bench.sh BUILD_DIR [RATES] [LAYOUTS] [OUT]
#
# RATES (default "1gbit 10gbit") shape every host's link with tc tbf;
# LAYOUTS (default "2x1 2x2") are hosts x ranks per host. For each rate it
# measures the link's raw capacity (one TCP stream, benchmarks/tcp_capacity.py),
# then for each layout runs benchmarks/python_bench.py (W2 at 16 and 64 MiB,
# W4) twice, accord flat and accord hierarchical
# (ACCORD_HIERARCHICAL_ALLREDUCE=1), each beside mpi4py and torch.distributed
# (gloo) in the same run. (At 2x1 the allreduce runs flat even when two
# levels are asked for, one rank per host: its "hierarchical" run is a
# second flat one with the allgather in two levels.) Every ACCORD_PYBENCH /
# TCP_CAPACITY line goes to OUT (default multihost_bench.jsonl) with the
# rate, layout and mode added; the bed is torn down at the end, also after
# a failure. Ranks are not bound:
# every emulated host sees the same cores, so binding by local rank would put
# the first rank of every host on core 0 (docs/multihost.md, "The test bed").
# ACCORD_BENCH_ARGS replaces python_bench.py's arguments. A run that takes
# longer than ACCORD_BENCH_TIMEOUT seconds (default 1800) is killed and
# fails the script: one hung in gloo's DDP once (docs/benchmarks.md, "What the
# CPUs allow").
set -euo pipefail

here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
repo="$(dirname "${here}")"
bed="${repo}/tests/multihost/bed.sh"
build="$(readlink -f "${1:?usage: multihost_bench.sh BUILD_DIR [RATES] [LAYOUTS] [OUT]}")"
rates="${2:-1gbit 10gbit}"
layouts="${3:-2x1 2x2}"
out="${4:-multihost_bench.jsonl}"
bench_args=(${ACCORD_BENCH_ARGS:---workloads=w2,w4 --w2-sizes-mib=16,64 --w2-reps=10 --w4-rounds=3})
limit="${ACCORD_BENCH_TIMEOUT:-1800}"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONPATH="${build}/python"
trap '"${bed}" down >/dev/null' EXIT
: >"${out}"

tag() {  # tag RATE LAYOUT MODE: adds the three fields to each JSON line read
  python3 -c '
import json, sys
rate, layout, mode = sys.argv[1:4]
for line in sys.stdin:
    for prefix in ("ACCORD_PYBENCH ", "TCP_CAPACITY "):
        if line.startswith(prefix):
            record = json.loads(line[len(prefix):])
            record.update(kind=prefix.strip(), rate=rate, layout=layout, mode=mode)
            print(json.dumps(record), flush=True)
' "$@"
}

for rate in ${rates}; do
  "${bed}" up 2 --rate "${rate}"
  ip netns exec h2 python3 "${here}/tcp_capacity.py" serve 5999 >/tmp/accord_capacity.txt &
  server=$!
  ip netns exec h1 python3 "${here}/tcp_capacity.py" send 10.77.0.2 5999 1024
  wait "${server}"
  tag "${rate}" link tcp </tmp/accord_capacity.txt | tee -a "${out}"
  for layout in ${layouts}; do
    case "${layout}" in
      2x1) np=2 hosts=h1,h2 ;;
      2x2) np=4 hosts=h1:2,h2:2 ;;
      *) echo "multihost_bench.sh: unknown layout ${layout}" >&2; exit 2 ;;
    esac
    for mode in flat hierarchical; do
      hier=0
      [[ "${mode}" == hierarchical ]] && hier=1
      echo "== ${rate} ${layout} accord ${mode}" >&2
      ACCORD_HIERARCHICAL_ALLREDUCE="${hier}" ACCORD_HIERARCHICAL_ALLGATHER="${hier}" \
        timeout --kill-after=30 "${limit}" "${repo}/tests/multihost/run_on_bed.sh" -np "${np}" -H "${hosts}" --bind-to none -x GLOO_SOCKET_IFNAME=eth0 \
        /usr/bin/python3 "${here}/python_bench.py" --master-addr 10.77.0.1 "${bench_args[@]}" \
        | tee /dev/stderr | tag "${rate}" "${layout}" "${mode}" >>"${out}"
    done
  done
done
echo "multihost_bench.sh: figures in ${out}" >&2
