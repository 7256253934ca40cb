#!/usr/bin/env bash
# The multi-host test bed: N emulated hosts on this machine, each a network
# namespace (h1..hN) joined to a bridge by a veth pair, on a private subnet
# that exists only on that bridge. See docs/multihost.md, "The test bed".
#
#   bed.sh up N [--rate RATE]   create h1..hN (tears down any earlier bed
#                               first); RATE (e.g. 1gbit, 10gbit) shapes
#                               every host's link in both directions (tc tbf)
#   bed.sh down                 remove every host, the bridge and the shaping
#   bed.sh status               what exists now
#   bed.sh exec hK CMD...       run CMD on host hK (as the rsh agent would)
#
# Root only (namespaces, links and qdiscs are privileged): anyone else gets
# exit status 77, CTest's skip code. Idempotent: `up` and `down` may be
# repeated, and `down` removes whatever a failed run left.
# The subnet is ACCORD_BED_SUBNET (default 10.77.0; host k is .k, the bridge
# .254) and the bridge ACCORD_BED_BRIDGE (default accbr0).
#
# Each host hK also gets a /dev/shm of its own that lasts as long as the bed,
# as a real host's does: a tmpfs mounted on /run/accord-bed/hK/shm, which
# netns-rsh binds on /dev/shm for every command it starts on hK. So what one
# job leaves in a host's /dev/shm (elastic training's spill files, a killed
# rank's segments) is there for the next job on that host, and only there.
set -euo pipefail

subnet="${ACCORD_BED_SUBNET:-10.77.0}"
bridge="${ACCORD_BED_BRIDGE:-accbr0}"
here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
# The hosts' own /dev/shm: ${state_dir}/hK/shm (netns-rsh reads the same path).
state_dir=/run/accord-bed

die() { echo "bed.sh: $*" >&2; exit 2; }

need_root() {
  if [[ "$(id -u)" -ne 0 ]]; then
    echo "bed.sh: skipped: needs root (network namespaces and qdiscs are privileged)" >&2
    exit 77
  fi
  command -v ip >/dev/null || die "needs iproute2's ip"
}

hosts_now() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^h[0-9]+$' | sort -V || true; }

# tbf needs a burst of at least rate/HZ; 1 ms worth of the rate (at least
# 64 KiB) keeps shaping smooth at 1-10 Gbit/s without starving TCP.
shape() {  # shape NETNS-ARGS DEV RATE
  local -a ns=($1)
  local dev="$2" rate="$3" bits burst
  bits="$(rate_bits "${rate}")"
  burst=$((bits / 8 / 1000))
  ((burst < 65536)) && burst=65536
  ip "${ns[@]}" link set "${dev}" txqueuelen 1000
  tc "${ns[@]}" qdisc replace dev "${dev}" root tbf rate "${rate}" burst "${burst}" latency 20ms
}

rate_bits() {  # 1gbit -> 1000000000
  local r="${1,,}" n unit
  [[ "${r}" =~ ^([0-9]+)(k|m|g)?bit$ ]] || die "rate '$1' is not of the form <number>[k|m|g]bit (e.g. 1gbit)"
  n="${BASH_REMATCH[1]}"
  unit="${BASH_REMATCH[2]}"
  case "${unit}" in
    k) echo $((n * 1000)) ;;
    m) echo $((n * 1000000)) ;;
    g) echo $((n * 1000000000)) ;;
    *) echo "${n}" ;;
  esac
}

down() {
  need_root
  local h
  for h in $(hosts_now); do
    # Processes still running on the host (a failed test's ranks) die with it.
    local pids
    pids="$(ip netns pids "${h}" 2>/dev/null || true)"
    [[ -n "${pids}" ]] && kill -9 ${pids} 2>/dev/null || true
    ip netns delete "${h}" 2>/dev/null || true
  done
  # Root-side veth ends vanish with their peers; remove any left over.
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^acc-h[0-9]+$' || true); do
    ip link delete "${link}" 2>/dev/null || true
  done
  ip link delete "${bridge}" 2>/dev/null || true
  # The hosts' /dev/shm. Lazily: a process of a failed run that still holds a
  # file there (or a mount namespace bound to it) must not keep `down` from
  # finishing; the memory goes when the last user does.
  local shm
  for shm in "${state_dir}"/h*/shm; do
    [[ -d "${shm}" ]] || continue
    if mountpoint -q "${shm}"; then
      umount -l "${shm}" 2>/dev/null || true
    fi
  done
  rm -rf "${state_dir}" 2>/dev/null || echo "bed.sh: could not remove all of ${state_dir}" >&2
}

up() {
  need_root
  local n="${1:-}" rate=""
  shift || true
  [[ "${n}" =~ ^[1-9][0-9]*$ ]] || die "up: the number of hosts must be a positive integer, not '${n}'"
  ((n <= 200)) || die "up: at most 200 hosts"
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --rate) rate="${2:-}"; shift 2 || die "--rate needs a value"; rate_bits "${rate}" >/dev/null ;;
      --rate=*) rate="${1#--rate=}"; shift; rate_bits "${rate}" >/dev/null ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  down
  # A container without CAP_NET_ADMIN (or a kernel without namespaces)
  # cannot hold the bed: that is a skip, not a failure.
  if ! ip netns add accord-probe 2>/dev/null; then
    echo "bed.sh: skipped: cannot create network namespaces here (needs CAP_NET_ADMIN and CAP_SYS_ADMIN)" >&2
    exit 77
  fi
  ip netns delete accord-probe
  ip link add "${bridge}" type bridge
  ip addr add "${subnet}.254/24" dev "${bridge}"
  ip link set "${bridge}" up
  local k
  for ((k = 1; k <= n; ++k)); do
    local h="h${k}"
    ip netns add "${h}"
    ip link add "acc-${h}" type veth peer name eth0 netns "${h}"
    ip link set "acc-${h}" master "${bridge}" up
    ip -n "${h}" addr add "${subnet}.${k}/24" dev eth0
    ip -n "${h}" link set lo up
    ip -n "${h}" link set eth0 up
    mkdir -p "${state_dir}/${h}/shm"
    mount -t tmpfs -o size=50%,mode=1777 "accord-bed-${h}-shm" "${state_dir}/${h}/shm"
    if [[ -n "${rate}" ]]; then
      shape "-n ${h}" eth0 "${rate}"   # what the host sends
      shape "" "acc-${h}" "${rate}"    # what the host receives
    fi
  done
  echo "bed: ${n} host(s) h1..h${n} on ${subnet}.0/24 (bridge ${bridge} is ${subnet}.254)${rate:+, links shaped to ${rate}}"
}

status() {
  local hs
  hs="$(hosts_now | tr '\n' ' ')"
  if [[ -z "${hs}" ]]; then
    echo "bed: down"
    return 0
  fi
  echo "bed: hosts ${hs}"
  local h
  for h in ${hs}; do
    echo "  ${h}: $(ip -n "${h}" -o -4 addr show dev eth0 2>/dev/null | awk '{print $4}') \
$(tc -n "${h}" qdisc show dev eth0 2>/dev/null | grep -o 'tbf.*rate [^ ]*' || echo unshaped), \
/dev/shm ${state_dir}/${h}/shm ($(du -sh "${state_dir}/${h}/shm" 2>/dev/null | cut -f1 || echo missing))"
  done
}

cmd="${1:-}"
shift || true
case "${cmd}" in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  exec) need_root; exec "${here}/netns-rsh" "$@" ;;
  *) die "usage: bed.sh up N [--rate RATE] | down | status | exec hK CMD..." ;;
esac
