#!/usr/bin/env bash
# tests/bench/views_bench.sh [BUILD_DIR [WORK_DIR]]
#
# Latency of csp-views on the two shapes of the views issue:
#   wide: 16,384 profiles (4,096 ranks x 4 threads) of a ~5,000-node CCT;
#   deep: a CCT of >= 1,000,000 nodes (8 ranks, one call-path group).
# Databases are built once with csp-gen + csp-prof-mpi (two processes) and kept in WORK_DIR
# (delete it to rebuild). Each command runs REPEAT times (default 3); the best and the median
# wall-clock times are reported, plus peak memory of the best run. Targets (docs/views.md):
# calling context < 1 s, --flat < 2 s, --callers top level < 2 s.
set -euo pipefail
build=$(realpath "${1:-build}")
work=${2:-/tmp/csp-views-bench}
repeat=${REPEAT:-3}
gen=$build/launcher/csp-gen
prof=$build/launcher/csp-prof-mpi
views=$build/launcher/csp-views
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"

make_db() {  # name, csp-gen options...
  local name=$1; shift
  [[ -d $work/$name-db ]] && return
  echo "building $name database: csp-gen $*" >&2
  local t0=$SECONDS
  "$gen" -q "$@" -o "$work/$name-meas" --force
  mpirun --oversubscribe -np 2 "$prof" -q "$work/$name-meas" -o "$work/$name-db"
  rm -rf "$work/$name-meas"
  echo "  built in $((SECONDS - t0)) s" >&2
}

make_db wide --ranks 4096 --threads 4 --nodes 5000 --seed 1
make_db deep --ranks 8 --threads 1 --nodes 1000000 --groups 1 --seed 1

# time_cmd label args...: best and median of $repeat runs, output discarded.
time_cmd() {
  local label=$1; shift
  local times=() rss
  for ((i = 0; i < repeat; ++i)); do
    local out
    out=$( { /usr/bin/time -f '%e %M' "$views" "$@" > /dev/null; } 2>&1 | tail -1)
    times+=("${out% *}")
    rss=${out#* }
  done
  local sorted
  sorted=$(printf '%s\n' "${times[@]}" | sort -g)
  local best median
  best=$(echo "$sorted" | head -1)
  median=$(echo "$sorted" | sed -n "$(( (repeat + 1) / 2 ))p")
  printf '%-7s %-38s best %6.2f s  median %6.2f s  peak %6d MB\n' "$shape" "$label" "$best" "$median" $((rss / 1024))
}

for shape in wide deep; do
  db=$work/$shape-db
  nodes=$("$views" --info --format json "$db" | sed -n 's/.*"cct_nodes": \([0-9]*\).*/\1/p')
  profiles=$("$views" --info --format json "$db" | sed -n 's/.*"threads": \([0-9]*\).*/\1/p')
  echo "# $shape: $profiles profiles, $nodes CCT nodes, $(du -sh "$db" | cut -f1) on disk"
  time_cmd "calling context (default)" "$db"
  time_cmd "calling context --format json" --format json "$db"
  time_cmd "--flat" --flat "$db"
  time_cmd "--flat --top 20" --flat --top 20 "$db"
  time_cmd "--callers --depth 1 (top level)" --callers --depth 1 "$db"
  time_cmd "--callers (depth 2)" --callers "$db"
  time_cmd "--node 1 (per-thread drill-down)" --node 1 "$db"
  time_cmd "--regions" --regions "$db"
done
