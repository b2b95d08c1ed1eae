#!/usr/bin/env bash
# Installs every Debian 12 package CSP needs to build, test and run. Idempotent: packages
# already present are not touched and `apt-get update` runs only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin
  libtbb-dev
  capnproto libcapnp-dev
  librocksdb-dev
  libgtest-dev libgmock-dev
  libunwind-dev libdw-dev libelf-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libbenchmark-dev
  clang
  time procps
  python3 libgoogle-perftools-dev linux-perf
  libcapstone-dev libeigen3-dev libomp-dev ccache
  libxml2-dev
  clang-format clang-tidy
  libcpp-httplib-dev chromium valgrind
)
# The web viewer's front end is built with Node and npm (web/frontend/build.sh): Debian's, unless
# a node and npm are already there (a newer Node installed otherwise is kept).
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  packages+=(nodejs npm)
fi
if [[ "${CSP_WITH_SLURM:-1}" == 1 ]]; then
  packages+=(slurm-wlm munge)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
