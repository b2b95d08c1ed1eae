#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test. Usable on a fresh Debian 12.
#   scripts/test.sh            everything (Release suite, ASan/UBSan suite, short fuzz run)
#   CSP_FUZZ_SECONDS=N         length of the fuzz run (default 30; 0 skips it)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

bash scripts/install-deps.sh
bash scripts/build.sh build Release -DCSP_WERROR=ON

echo "== unit and integration tests (Release)"
ctest --test-dir build --output-on-failure -j 2 --timeout 900

echo "== profile reader, generator, database, metrics and loop-recovery tests under AddressSanitizer + UndefinedBehaviorSanitizer"
bash scripts/build.sh build-asan Debug -DCSP_SANITIZE=ON -DCSP_BUILD_BENCH=OFF -- csp_profile_tests csp_synth_tests csp_db_tests csp_db_test_writer csp_metrics_tests csp_structure_tests
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j 2 -L sanitize

fuzz_seconds=${CSP_FUZZ_SECONDS:-30}
if [[ "$fuzz_seconds" -gt 0 ]]; then
  echo "== fuzzing the profile reader and the metrics decoders/expressions, ${fuzz_seconds} s each"
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
