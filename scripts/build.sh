#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR [BUILD_TYPE [cmake options...] [-- targets...]]]
# Configures (once) and builds CSP with CMake + Ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
type=${1:-Release}; shift || true
opts=(); targets=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == "--" ]]; then shift; targets=("$@"); break; fi
  opts+=("$1"); shift
done
# The tests share a precompiled header: ccache caches compilations that use one only with these.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "${opts[@]}" >/dev/null
jobs=$(nproc)
ninja -C "$dir" -j "$jobs" "${targets[@]}"
