#!/usr/bin/env bash
# scripts/sanitize.sh [BUILD_DIR]: builds the AddressSanitizer + UndefinedBehaviorSanitizer subset
# (gcc, Debug, default build-asan: the profile reader, generator, database, metrics and
# loop-recovery tests) and runs the tests labelled `sanitize` in it. The loop-recovery tests check
# the loops of the test programs as gcc compiles them, so this tree uses the Release compiler;
# the fuzz targets need clang and have their own tree (scripts/fuzz.sh).
#   CSP_TEST_JOBS=N   tests run side by side (default: 2 per core)
set -euo pipefail
cd "$(dirname "$0")/.."
bdir=${1:-build-asan}
bash scripts/build.sh "$bdir" Debug -DCSP_SANITIZE=ON -DCSP_BUILD_BENCH=OFF -- \
  csp_profile_tests csp_synth_tests csp_db_tests csp_db_test_writer csp_metrics_tests csp_structure_tests
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$bdir" --output-on-failure -j "${CSP_TEST_JOBS:-$(($(nproc) * 2))}" -L sanitize
