#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test. Usable on a fresh Debian 12.
#   scripts/test.sh            everything: the Release suite (unit and integration tests, real
#                              mpirun, RocksDB, a private Slurm), the ASan/UBSan suite, a short
#                              fuzz run
#   scripts/test.sh --quick    the edit-test loop: the Release build and the tests without whole
#                              measured programs, batch jobs or benchmarks (labels integration,
#                              batch, slurm, bench left out)
#   CSP_FUZZ_SECONDS=N         length of each fuzz run (default 20; 0 skips them)
#   CSP_TEST_JOBS=N            tests run side by side (default: 2 per core; most tests wait for
#                              the processes they start more than they compute)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (--quick, --help)" >&2; exit 2 ;;
  esac
done
jobs=${CSP_TEST_JOBS:-$(($(nproc) * 2))}
started=$SECONDS
stage() { echo "== [$((SECONDS - started)) s] $*"; }

stage "dependencies"
bash scripts/install-deps.sh
stage "code format (.clang-format; scripts/lint.sh also runs clang-tidy on changed files)"
bash scripts/lint.sh --format-only
stage "Release build"
bash scripts/build.sh build Release -DCSP_WERROR=ON

if [[ $quick == 1 ]]; then
  stage "unit tests (Release; --quick leaves out labels integration, batch, slurm, bench)"
  ctest --test-dir build --output-on-failure -j "$jobs" -LE 'integration|batch|slurm|bench'
  stage "done"
  exit 0
fi

stage "unit and integration tests (Release)"
ctest --test-dir build --output-on-failure -j "$jobs"

stage "profile reader, generator, database, metrics and loop-recovery tests under AddressSanitizer + UndefinedBehaviorSanitizer"
bash scripts/build.sh build-asan Debug -DCSP_SANITIZE=ON -DCSP_BUILD_BENCH=OFF -- csp_profile_tests csp_synth_tests csp_db_tests csp_db_test_writer csp_metrics_tests csp_structure_tests
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L sanitize

fuzz_seconds=${CSP_FUZZ_SECONDS:-20}
if [[ "$fuzz_seconds" -gt 0 ]]; then
  stage "fuzzing the profile reader and the metrics decoders/expressions, ${fuzz_seconds} s each"
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
stage "done"
