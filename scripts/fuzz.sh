#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: builds the libFuzzer target for the profile reader with clang and
# runs it, seeded with valid profiles from csp-gen. Exits non-zero if the fuzzer finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bash scripts/build.sh build-fuzz Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCSP_FUZZ=ON -DCSP_BUILD_BENCH=OFF -- profile_reader_fuzz csp-gen
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/seeds"
build-fuzz/launcher/csp-gen -q --ranks 2 --threads 2 --nodes 60 --regions -o "$work/seeds/synthetic"
build-fuzz/launcher/csp-gen -q --from-json tests/data/fig75.json -o "$work/seeds/fig75"
cp "$work"/seeds/*/*.cspprof "$work/corpus/"
status=0
build-fuzz/tests/fuzz/profile_reader_fuzz -max_total_time="$seconds" -max_len=65536 \
  -artifact_prefix="$work/" "$work/corpus" >"$work/fuzz.log" 2>&1 || status=$?
grep -E '^Done|ERROR|SUMMARY' "$work/fuzz.log" || true
if [[ $status -ne 0 ]]; then
  tail -n 40 "$work/fuzz.log" >&2
  echo "fuzz: the profile reader crashed; reproducer and log in $work (kept)" >&2
  trap - EXIT
  exit 1
fi
echo "fuzz: ${seconds} s, no crash"
