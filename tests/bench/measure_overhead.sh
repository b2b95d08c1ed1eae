#!/usr/bin/env bash
# tests/bench/measure_overhead.sh [BUILD_DIR [RUNS [UNITS [RATE [THREADS [LOCKS]]]]]]
# Overhead of csp-run on the compute-bound test app (tests/apps/compute.cpp): the program is run
# uninstrumented and under csp-run (cpu-time at RATE samples/s, default 200), alternately so that
# both see the same machine conditions, RUNS times each (default 5). Prints the median wall
# wall and CPU times side by side, the overhead in percent, and the unwind-failure rate over all measured
# samples (from csp-run --verbose). Targets: overhead < 3 %, unwind failures < 0.1 %.
# Then thread churn: THREADS (default 5,000) short threads one after the other
# (tests/apps/hostile.cpp `threads`), uninstrumented and under csp-run, each thread writing a
# profile of its own. Target: at most 1.3 x the uninstrumented wall time.
# Then lock-heavy threads (tests/apps/threads.cpp `heavy`): 4 threads take one mutex LOCKS times
# each (default 1,000,000), uninstrumented, under csp-run and under csp-run --idleness (mutex
# wrappers, lock blame). Target: --idleness within 5 % of csp-run's CPU time.
# Last, code without unwind tables (tests/apps/asm_frames.cpp `nocfi`: every sample stops in
# assembler without CFI and the handler scans the stack above it) against the compute app,
# both at cpu-time@1000: CPU time per sample (measured minus uninstrumented, over the samples).
# Then a dlopen/dlclose storm (tests/apps/hostile.cpp `dlopen-pairs`), uninstrumented and under
# csp-run -e none. Target: at most 5 us of CPU per dlopen/dlclose pair.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-5}
units=${3:-200}
rate=${4:-200}
threads=${5:-5000}
locks=${6:-1000000}
app=$build/tests/apps/csp-app-compute
locker=$build/tests/apps/csp-app-threads
hostile=$build/tests/apps/csp-app-hostile
asm=$build/tests/apps/csp-app-asm
csprun=$build/launcher/csp-run
for f in "$app" "$hostile" "$csprun" "$locker" "$asm"; do
  [[ -x $f ]] || { echo "measure_overhead: $f not built (ninja -C $build csp-run csp-app-compute csp-app-hostile csp-app-threads csp-app-asm)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Appends "wall cpu" seconds of "$@" to file $1 (cpu = user + system of the program). On a
# shared machine wall time also measures the neighbours; CPU time is the steadier figure.
timed() {
  local file=$1; shift
  local TIMEFORMAT='%R %U %S'
  { time "$@" >/dev/null 2>>"$work/verbose"; } 2>>"$work/time.tmp"
  awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$work/time.tmp" >>"$file"
  rm -f "$work/time.tmp"
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { print 100 * (b - a) / a }'; }  # overhead of b over a
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

"$app" 10 >/dev/null  # warm the page cache
: >"$work/plain" ; : >"$work/measured" ; : >"$work/verbose"
for ((i = 1; i <= runs; i++)); do
  timed "$work/plain" "$app" "$units"
  timed "$work/measured" "$csprun" -v -e "cpu-time@$rate" -o "$work/meas-$i" -- "$app" "$units"
done
plain=$(cut -d' ' -f1 "$work/plain" | median)
measured=$(cut -d' ' -f1 "$work/measured" | median)
plainCpu=$(cut -d' ' -f2 "$work/plain" | median)
measuredCpu=$(cut -d' ' -f2 "$work/measured" | median)
# Run i of both kinds ran back to back: the median of the paired ratios cancels slow drifts in
# machine load; the minimum is the run least disturbed by other jobs.
paired=$(paste -d' ' "$work/plain" "$work/measured" | awk '{ print 100 * ($3 - $1) / $1 }' | median)
plainMin=$(cut -d' ' -f1 "$work/plain" | sort -g | head -1)
measuredMin=$(cut -d' ' -f1 "$work/measured" | sort -g | head -1)
read -r samples failures < <(sed -n 's/^csp: .*: \([0-9]*\) samples, \([0-9]*\) unwind failures.*/\1 \2/p' "$work/verbose" |
  awk '{ s += $1; f += $2 } END { print s + 0, f + 0 }')
printf 'compute app, %s units, %s runs each, cpu-time@%s\n' "$units" "$runs" "$rate"
printf '  runs (wall cpu), uninstrumented: %s\n' "$(tr '\n' ',' <"$work/plain")"
printf '  runs (wall cpu), under csp-run:  %s\n' "$(tr '\n' ',' <"$work/measured")"
printf '  median wall      %.3f s  vs  %.3f s   overhead %+.2f %%\n' "$plain" "$measured" \
  "$(pct "$plain" "$measured")"
printf '  min wall         %.3f s  vs  %.3f s   overhead %+.2f %%\n' "$plainMin" "$measuredMin" \
  "$(pct "$plainMin" "$measuredMin")"
printf '  paired wall      median of per-pair overheads %+.2f %%\n' "$paired"
printf '  median cpu       %.3f s  vs  %.3f s   overhead %+.2f %%   (target < 3 %%)\n' "$plainCpu" "$measuredCpu" \
  "$(pct "$plainCpu" "$measuredCpu")"
if [[ $samples -gt 0 ]]; then
  printf '  unwind failures  %d of %d samples = %.4f %%   (target < 0.1 %%)\n' "$failures" "$samples" \
    "$(awk -v f="$failures" -v s="$samples" 'BEGIN { print 100 * f / s }')"
fi

# Thread churn.
: >"$work/churn-plain" ; : >"$work/churn-measured"
"$hostile" threads 100 20000 >/dev/null
for ((i = 1; i <= runs; i++)); do
  timed "$work/churn-plain" "$hostile" threads "$threads" 20000
  rm -rf "$work/churn-meas"
  timed "$work/churn-measured" "$csprun" -o "$work/churn-meas" -- "$hostile" threads "$threads" 20000
done
profiles=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import run; print(run.count_profiles(sys.argv[2]))' \
  "$(dirname "$0")" "$work/churn-meas")
cplain=$(cut -d' ' -f1 "$work/churn-plain" | median)
cmeasured=$(cut -d' ' -f1 "$work/churn-measured" | median)
cplainCpu=$(cut -d' ' -f2 "$work/churn-plain" | median)
cmeasuredCpu=$(cut -d' ' -f2 "$work/churn-measured" | median)
cpaired=$(paste -d' ' "$work/churn-plain" "$work/churn-measured" | awk '{ print $3 / $1 }' | median)
printf 'thread churn, %s threads one after the other, %s runs each, cpu-time@200 (%s profiles written)\n' \
  "$threads" "$runs" "$profiles"
printf '  runs (wall cpu), uninstrumented: %s\n' "$(tr '\n' ',' <"$work/churn-plain")"
printf '  runs (wall cpu), under csp-run:  %s\n' "$(tr '\n' ',' <"$work/churn-measured")"
printf '  median wall      %.3f s  vs  %.3f s   ratio %.2f x   (paired median %.2f x; target <= 1.3 x)\n' \
  "$cplain" "$cmeasured" "$(awk -v a="$cplain" -v b="$cmeasured" 'BEGIN { print b / a }')" "$cpaired"
printf '  median cpu       %.3f s  vs  %.3f s   ratio %.2f x\n' "$cplainCpu" "$cmeasuredCpu" \
  "$(awk -v a="$cplainCpu" -v b="$cmeasuredCpu" 'BEGIN { print b / a }')"

# Lock-heavy threads.
: >"$work/locks-plain" ; : >"$work/locks-csp" ; : >"$work/locks-idle"
"$locker" heavy 4 10000 >/dev/null
for ((i = 1; i <= runs; i++)); do
  timed "$work/locks-plain" "$locker" heavy 4 "$locks"
  timed "$work/locks-csp" "$csprun" -o "$work/locks-meas" -- "$locker" heavy 4 "$locks"
  timed "$work/locks-idle" "$csprun" --idleness -o "$work/locks-meas-idle" -- "$locker" heavy 4 "$locks"
done
lplainCpu=$(cut -d' ' -f2 "$work/locks-plain" | median)
lcspCpu=$(cut -d' ' -f2 "$work/locks-csp" | median)
lidleCpu=$(cut -d' ' -f2 "$work/locks-idle" | median)
lpaired=$(paste -d' ' "$work/locks-csp" "$work/locks-idle" | awk '{ print 100 * ($4 - $2) / $2 }' | median)
printf 'lock-heavy threads, 4 threads x %s acquisitions of one mutex, %s runs each, cpu-time@200\n' "$locks" "$runs"
printf '  runs (wall cpu), uninstrumented:         %s\n' "$(tr '\n' ',' <"$work/locks-plain")"
printf '  runs (wall cpu), under csp-run:          %s\n' "$(tr '\n' ',' <"$work/locks-csp")"
printf '  runs (wall cpu), csp-run --idleness:     %s\n' "$(tr '\n' ',' <"$work/locks-idle")"
printf '  median cpu       %.3f s  /  %.3f s  /  %.3f s\n' "$lplainCpu" "$lcspCpu" "$lidleCpu"
printf '  --idleness over csp-run: median cpu %+.2f %%, paired median %+.2f %%   (target <= 5 %%)\n' \
  "$(pct "$lcspCpu" "$lidleCpu")" "$lpaired"

# Code without unwind tables: CPU cost per sample.
# Prints "median-uninstrumented-cpu median-measured-cpu samples-per-run microseconds-per-sample".
perSample() {
  local name=$1; shift
  : >"$work/$name-plain" ; : >"$work/$name-measured" ; : >"$work/verbose"
  for ((i = 1; i <= runs; i++)); do
    timed "$work/$name-plain" "$@"
    timed "$work/$name-measured" "$csprun" -v -e cpu-time@1000 -o "$work/$name-meas-$i" -- "$@"
  done
  local p m n
  p=$(cut -d' ' -f2 "$work/$name-plain" | median)
  m=$(cut -d' ' -f2 "$work/$name-measured" | median)
  n=$(sed -n 's/^csp: .*: \([0-9]*\) samples, .*/\1/p' "$work/verbose" | awk '{ s += $1 } END { print s / NR }')
  awk -v p="$p" -v m="$m" -v n="$n" 'BEGIN { printf "%.3f %.3f %.0f %.1f\n", p, m, n, 1e6 * (m - p) / n }'
}
read -r cp cm cn cus < <(perSample compute "$app" "$units")
read -r ap am an aus < <(perSample asm "$asm" nocfi 60)
printf 'code without unwind tables, cpu-time@1000, %s runs each (median cpu: uninstrumented / csp-run, samples per run)\n' "$runs"
printf '  compute app (CFI everywhere)       %.3f s / %.3f s, %s samples: %.1f us per sample\n' "$cp" "$cm" "$cn" "$cus"
printf '  assembler without CFI (nocfi 60)   %.3f s / %.3f s, %s samples: %.1f us per sample (stack scans)\n' "$ap" "$am" "$an" "$aus"
# dlopen/dlclose storm: PAIRS pairs of the test plugin with 100 other copies of it loaded (a load
# map as large as an MPI program's), uninstrumented and under csp-run -e none (no sampling: what
# is left is the interposed dlclose, which records modules new to the load map). Target: at most
# 5 us of CPU per pair.
pairs=12300
plugin=$build/tests/apps/csp-app-plugin.so
mkdir -p "$work/resident"
for ((k = 1; k <= 100; k++)); do cp "$plugin" "$work/resident/p$k.so"; done
: >"$work/dl-plain" ; : >"$work/dl-none"
for ((i = 1; i <= runs; i++)); do
  timed "$work/dl-plain" "$hostile" dlopen-pairs "$plugin" "$pairs" 0 "$work"/resident/*.so
  timed "$work/dl-none" "$csprun" -e none -o "$work/dl-meas" -- "$hostile" dlopen-pairs "$plugin" "$pairs" 0 "$work"/resident/*.so
done
dplainCpu=$(cut -d' ' -f2 "$work/dl-plain" | median)
dnoneCpu=$(cut -d' ' -f2 "$work/dl-none" | median)
dpaired=$(paste -d' ' "$work/dl-plain" "$work/dl-none" | awk -v n="$pairs" '{ print 1e6 * ($4 - $2) / n }' | median)
printf 'dlopen/dlclose storm, %s pairs, 100 resident modules, %s runs each, csp-run -e none\n' "$pairs" "$runs"
printf '  runs (wall cpu), uninstrumented:  %s\n' "$(tr '\n' ',' <"$work/dl-plain")"
printf '  runs (wall cpu), csp-run -e none: %s\n' "$(tr '\n' ',' <"$work/dl-none")"
printf '  median cpu       %.3f s  vs  %.3f s   %+.1f us per pair (paired median %+.1f us; target <= 5 us)\n' \
  "$dplainCpu" "$dnoneCpu" "$(awk -v a="$dplainCpu" -v b="$dnoneCpu" -v n="$pairs" 'BEGIN { print 1e6 * (b - a) / n }')" \
  "$dpaired"
