#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test. Usable on a fresh Debian 12.
#   scripts/test.sh            the Release suite: every ctest test (unit and integration tests,
#                              real mpirun, RocksDB, a private Slurm, the browser tests, a smoke
#                              run of the benchmarks), the code format, clang-tidy on the last
#                              commit's changes
#   scripts/test.sh --all      also the ASan/UBSan suite (built and run beside the Release tests)
#                              and a short fuzz run after them: what CI runs (.ci/run)
#   scripts/test.sh --quick    the edit-test loop: the Release build and the tests without whole
#                              measured programs, batch jobs or benchmarks (labels integration,
#                              batch, slurm, bench left out)
#   CSP_FUZZ_SECONDS=N         with --all: length of each fuzz run (default 10; 0 skips them)
#   CSP_TEST_JOBS=N            tests run side by side (default: 3 per core; most tests wait for
#                              the processes they start more than they compute)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
quick=0 all=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --all) all=1 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (--all, --quick, --help)" >&2; exit 2 ;;
  esac
done
if [[ $quick == 1 && $all == 1 ]]; then
  echo "test.sh: --quick and --all exclude each other" >&2
  exit 2
fi
jobs=${CSP_TEST_JOBS:-$(($(nproc) * 3))}
started=$SECONDS
stage() { echo "== [$((SECONDS - started)) s] $*"; }

stage "dependencies"
bash scripts/install-deps.sh
stage "code format (.clang-format; scripts/lint.sh also runs clang-tidy on changed files)"
bash scripts/lint.sh --format-only
stage "Release build"
bash scripts/build.sh build Release -DCSP_WERROR=ON
if [[ $quick == 1 ]]; then
  stage "clang-tidy (.clang-tidy) on the library and tool sources the last commit changed"
  bash scripts/lint.sh HEAD~1
  stage "unit tests (Release; --quick leaves out labels integration, batch, slurm, bench)"
  ctest --test-dir build --output-on-failure -j "$jobs" -LE 'integration|batch|slurm|bench'
  stage "done"
  exit 0
fi

# What does not need the Release tests' machine runs beside them at the lowest priority: the
# tests leave about a quarter of the CPUs idle (they wait for the programs they start), and the
# compilers take that instead of a stage of their own. Each job's output is shown when it ends.
logs=build/test-logs
mkdir -p "$logs"
fuzz_seconds=${CSP_FUZZ_SECONDS:-10}
declare -A pids
background() {  # background NAME COMMAND...: runs it niced in its own process group; output in $logs/NAME.log
  local name=$1
  shift
  setsid nice -n 19 "$@" >"$logs/$name.log" 2>&1 &
  pids[$name]=$!
}
stop_background() {  # a failing stage ends the run: nothing of it goes on compiling
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap stop_background EXIT
finish() {  # finish NAME TITLE: waits for the job, shows its output, stops the run if it failed
  local status=0
  wait "${pids[$1]}" || status=$?
  stage "$2 (ran beside the tests; exit $status)"
  if [[ $status -ne 0 ]]; then
    tail -n 60 "$logs/$1.log"
    echo "test.sh: $2 failed (whole output in $logs/$1.log)" >&2
    exit "$status"
  fi
  grep -vE '^\[[0-9]+/[0-9]+\] ' "$logs/$1.log" | tail -n 20 || true
  unset "pids[$1]"
}
background tidy bash scripts/lint.sh HEAD~1
beside="clang-tidy runs beside them"
if [[ $all == 1 ]]; then
  background sanitize bash scripts/sanitize.sh
  beside="clang-tidy and the sanitizer tree's build and tests run beside them"
fi

stage "unit and integration tests (Release; $beside)"
ctest --test-dir build --output-on-failure -j "$jobs"

finish tidy "clang-tidy (.clang-tidy) on the library and tool sources the last commit changed"
[[ $all == 1 ]] || { stage "done (scripts/test.sh --all also runs the sanitizer suite and the fuzzers)"; exit 0; }
finish sanitize "profile reader, generator, database, metrics and loop-recovery tests under AddressSanitizer + UndefinedBehaviorSanitizer (clang; scripts/sanitize.sh)"
if [[ "$fuzz_seconds" -gt 0 ]]; then
  # After the tests: the fuzzers run for a wall-clock time, which the tests' load would shorten.
  stage "fuzzing the profile reader and the metrics decoders/expressions, ${fuzz_seconds} s side by side"
  bash scripts/fuzz.sh --no-build "$fuzz_seconds"
fi
stage "done"
