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

# time_cmd label args...: best and median wall-clock time of $repeat runs (output discarded),
# the smallest CPU time (user + sys: what the run costs without other load on the machine) and
# the peak resident memory.
time_cmd() {
  local label=$1; shift
  local walls=() cpus=() rss=0
  for ((i = 0; i < repeat; ++i)); do
    local out
    out=$( { /usr/bin/time -f '%e %M %U %S' "$views" "$@" > /dev/null; } 2>&1 | tail -1)
    read -r wall mem user sys <<< "$out"
    walls+=("$wall")
    cpus+=("$(echo "$user + $sys" | bc)")
    (( mem > rss )) && rss=$mem
  done
  local best median cpu
  best=$(printf '%s\n' "${walls[@]}" | sort -g | head -1)
  median=$(printf '%s\n' "${walls[@]}" | sort -g | sed -n "$(( (repeat + 1) / 2 ))p")
  cpu=$(printf '%s\n' "${cpus[@]}" | sort -g | head -1)
  printf '%-5s %-36s wall best %6.2f s median %6.2f s | cpu %5.2f s | peak %5d MB\n' \
    "$shape" "$label" "$best" "$median" "$cpu" $((rss / 1024))
}

echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
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

# Every view and format must run on both shapes (exit status only; outputs discarded).
failures=0
for shape in wide deep; do
  db=$work/$shape-db
  for args in "" "--flat" "--callers" "--regions"; do
    for format in text csv json folded speedscope; do
      if [[ ( $format == folded || $format == speedscope ) && ( $args == --flat || $args == --callers ) ]]; then continue; fi
      # shellcheck disable=SC2086
      "$views" $args --format "$format" "$db" > /dev/null || { echo "FAILED: $shape $args --format $format"; failures=1; }
    done
  done
  for args in "--info" "--info --format json" "--node 1" "--node 1 --format csv" "--node 1 --format json" "--hot-path" \
              "--flat --top 20 --stat mean,max,imbalance" "--callers --top 10 --depth 3"; do
    # shellcheck disable=SC2086
    "$views" $args "$db" > /dev/null || { echo "FAILED: $shape $args"; failures=1; }
  done
done
echo "# every view and format: $([[ $failures == 0 ]] && echo ok || echo FAILURES)"
exit $failures
