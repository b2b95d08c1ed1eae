#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: builds the libFuzzer targets with clang and runs each for SECONDS:
# the profile reader (seeded with valid profiles from csp-gen), then the metrics decoders and
# expression parsers. Exits non-zero if a fuzzer finds a crash, keeping the reproducer.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bash scripts/build.sh build-fuzz Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCSP_FUZZ=ON -DCSP_BUILD_BENCH=OFF -- profile_reader_fuzz metrics_fuzz csp-gen
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/seeds"
build-fuzz/launcher/csp-gen -q --ranks 2 --threads 2 --nodes 60 --regions -o "$work/seeds/synthetic"
build-fuzz/launcher/csp-gen -q --from-json tests/data/fig75.json -o "$work/seeds/fig75"
cp "$work"/seeds/*/*.cspprof "$work/corpus/"
fuzz() {  # fuzz NAME BINARY CORPUS...
  local name=$1 binary=$2
  shift 2
  local tag=${name// /-} status=0
  "$binary" -max_total_time="$seconds" -max_len=65536 -artifact_prefix="$work/$tag-" "$@" \
    >"$work/$tag.log" 2>&1 || status=$?
  grep -E '^Done|ERROR|SUMMARY' "$work/$tag.log" || true
  if [[ $status -ne 0 ]]; then
    tail -n 40 "$work/$tag.log" >&2
    echo "fuzz: $name crashed; reproducer and log in $work (kept)" >&2
    trap - EXIT
    exit 1
  fi
  echo "fuzz: $name ${seconds} s, no crash"
}
mkdir -p "$work/metrics-corpus"
fuzz "profile reader" build-fuzz/tests/fuzz/profile_reader_fuzz "$work/corpus"
fuzz "metrics decoders and expressions" build-fuzz/tests/metrics/metrics_fuzz "$work/metrics-corpus"
