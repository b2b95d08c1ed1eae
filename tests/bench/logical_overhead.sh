#!/usr/bin/env bash
# tests/bench/logical_overhead.sh [BUILD_DIR [RUNS [TASKS [TASK_US [FIB_DEPTH]]]]]
# Cost of capturing OpenMP creation contexts (logical call paths, docs/measurement.md "OpenMP:
# logical call paths") on a task-heavy program (tests/apps/omp_logical.cpp `bench`: one thread
# creates TASKS tasks, default 1,000,000, of TASK_US microseconds of CPU time each, default 10, and
# all threads run them): csp-run with sampling alone (CSP_LOGICAL=0: no OMPT tool) against csp-run
# with the capture (the default), alternately so that both see the same machine, RUNS times each
# (default 3). Prints the CPU times (user + system of the whole process) side by side, their
# medians and the ratio. Target: capture <= 1.05 x sampling alone.
# Then the same for recursive fib-style tasks of depth FIB_DEPTH (default 20; `tasks` mode, leaves
# of 10 us): every task there has a logical path of its own, so each creation interns a new context
# (one unwind of the creator's frames).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-3}
tasks=${3:-1000000}
taskUs=${4:-10}
fibDepth=${5:-20}
app=$build/tests/apps/csp-app-omp-logical
csprun=$build/launcher/csp-run
for f in "$app" "$csprun"; do
  [[ -x $f ]] || { echo "logical_overhead: $f not built (ninja -C $build csp-run csp-measure csp_app_omp_logical)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Appends the CPU seconds (user + system) of "$@" to file $1.
timed() {
  local file=$1; shift
  local TIMEFORMAT='%U %S'
  { time "$@" >/dev/null 2>/dev/null; } 2>>"$work/time.tmp"
  awk '{ printf "%.3f\n", $1 + $2 }' "$work/time.tmp" >>"$file"
  rm -f "$work/time.tmp"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

compare() {  # name, then the program's arguments
  local name=$1; shift
  : >"$work/alone"; : >"$work/capture"
  for ((i = 1; i <= runs; i++)); do
    CSP_LOGICAL=0 timed "$work/alone" "$csprun" -o "$work/a-$i" -- "$app" "$@"
    timed "$work/capture" "$csprun" -o "$work/c-$i" -- "$app" "$@"
    rm -rf "$work/a-$i" "$work/c-$i"
  done
  local alone capture
  alone=$(median <"$work/alone")
  capture=$(median <"$work/capture")
  printf '%s (%s runs each, cpu-time@200, CPU s = user + system)\n' "$name" "$runs"
  printf '  sampling alone:       %s\n' "$(tr '\n' ' ' <"$work/alone")"
  printf '  sampling + capture:   %s\n' "$(tr '\n' ' ' <"$work/capture")"
  printf '  median %.3f s vs %.3f s: ratio %.3f   (target <= 1.05)\n' "$alone" "$capture" \
    "$(awk -v a="$alone" -v b="$capture" 'BEGIN { print b / a }')"
  printf '  paired ratios: %s\n' "$(paste -d' ' "$work/alone" "$work/capture" | awk '{ printf "%.3f ", $2 / $1 }')"
}

compare "$tasks tasks of $taskUs us created in a loop" bench "$tasks" "$taskUs"
compare "fib-style recursive tasks, depth $fibDepth, leaves of 10 us" tasks "$fibDepth" 0.01
