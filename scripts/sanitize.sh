#!/usr/bin/env bash
# scripts/sanitize.sh [--build-only] [BUILD_DIR]: the sanitizer tree and its tests.
#   Builds, with clang in BUILD_DIR (default build-sanitize, Debug), AddressSanitizer +
#   UndefinedBehaviorSanitizer, libFuzzer's coverage hooks in the fuzzed libraries: the tests labelled
#   `sanitize` (profile reader, generator, database, metrics, loop recovery) and the fuzz targets
#   (scripts/fuzz.sh runs them), then runs those tests. One tree for both: the libraries under
#   test are compiled once, and clang compiles them instrumented in about half of gcc's time.
#   The loop-recovery tests check the loops of the test programs as gcc compiles them: they read
#   the Release tree's programs (build/tests/apps), which this script builds first when missing.
#   CSP_TEST_JOBS=N   tests run side by side (default: 2 per core)
set -euo pipefail
cd "$(dirname "$0")/.."
tests=1
if [[ "${1:-}" == "--build-only" ]]; then
  tests=0
  shift
fi
bdir=${1:-build-sanitize}
apps=build/tests/apps
for app in csp-app-loops-O2 csp-app-loops-O3 csp-app-loops-nounwind csp-app-loops-clang; do
  if [[ ! -x $apps/$app ]]; then
    bash scripts/build.sh build Release -- csp-app-loops-O2 csp-app-loops-O3 csp-app-loops-nounwind csp_app_loops_clang
    break
  fi
done
# Line tables are all the debug information a sanitizer's report needs (function, file, line of each
# frame); full debug information made the compiles a fifth slower.
bash scripts/build.sh "$bdir" Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCSP_SANITIZE=ON \
  -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only \
  -DCSP_FUZZ=ON -DCSP_BUILD_BENCH=OFF -DCSP_LOOP_APPS_DIR="$PWD/$apps" -- \
  csp_profile_tests csp_synth_tests csp_db_tests csp_db_test_writer csp_metrics_tests csp_structure_tests \
  profile_reader_fuzz metrics_fuzz csp-gen
[[ $tests == 1 ]] || exit 0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$bdir" --output-on-failure -j "${CSP_TEST_JOBS:-$(($(nproc) * 2))}" -L sanitize
