#!/usr/bin/env bash
# tests/bench/memory_overhead.sh [BUILD_DIR [N [RUNS]]]
# Slowdown of csp-run --memory (the csp-mem Valgrind tool, docs/memory-profiles.md) on
# tests/apps/memory.cpp `overhead N` (the quadratic routine over N ints, 4 times: 4 N^2 reads),
# against the program alone and against Valgrind's own tools: none (nulgrind, the cost of
# Valgrind itself), memcheck and lackey. Median wall time and peak resident memory of RUNS runs
# each (default 3), and the ratios to native and to nulgrind. Nothing is asserted.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
n=${2:-3000}
runs=${3:-3}
app=$build/tests/apps/csp-app-memory
lib=$build/measure/valgrind/lib
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# median wall seconds and max RSS (KiB) of RUNS runs of the command
measure() {
  local walls=() rss=0
  for ((i = 0; i < runs; ++i)); do
    local line
    /usr/bin/time -o "$out/time" -f "%e %M" "$@" >/dev/null 2>&1
    line=$(tail -1 "$out/time")
    walls+=("${line% *}")
    ((${line#* } > rss)) && rss=${line#* }
  done
  printf '%s %s\n' "$(printf '%s\n' "${walls[@]}" | sort -g | sed -n "$(((runs + 1) / 2))p")" "$rss"
}

declare -A wall mem
run() {
  local name=$1
  shift
  read -r wall[$name] mem[$name] < <(measure "$@")
}
run native "$app" overhead "$n"
run none valgrind -q --tool=none "$app" overhead "$n"
run memcheck valgrind -q --tool=memcheck "$app" overhead "$n"
run lackey valgrind -q --tool=lackey "$app" overhead "$n"
run csp-mem-nofp env VALGRIND_LIB="$lib" valgrind -q --tool=csp-mem --footprint=no --out-dir="$out" "$app" overhead "$n"
run csp-mem-fp50 env VALGRIND_LIB="$lib" valgrind -q --tool=csp-mem --footprint-precision=50 --out-dir="$out" "$app" overhead "$n"
run csp-mem-fp90 env VALGRIND_LIB="$lib" valgrind -q --tool=csp-mem --footprint-precision=90 --out-dir="$out" "$app" overhead "$n"

printf '%-14s %10s %10s %10s %12s\n' run "wall s" "x native" "x none" "max RSS MiB"
for name in native none memcheck lackey csp-mem-nofp csp-mem-fp50 csp-mem-fp90; do
  printf '%-14s %10s %10.1f %10.2f %12.1f\n' "$name" "${wall[$name]}" \
    "$(echo "${wall[$name]} / ${wall[native]}" | bc -l)" "$(echo "${wall[$name]} / ${wall[none]}" | bc -l)" \
    "$(echo "${mem[$name]} / 1024" | bc -l)"
done
