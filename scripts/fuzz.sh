#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS [BUILD_DIR]]: builds the libFuzzer targets with clang (ASan + UBSan, and
# libFuzzer's coverage hooks in every library they link; the sanitizer tree of scripts/sanitize.sh)
# and runs each for SECONDS, side by side: the profile reader (seeded with valid profiles from
# csp-gen) and the metrics decoders and expression parsers. Exits non-zero if a fuzzer finds a
# crash (keeping the reproducer) or if a target never gets past its early checks (it prints how
# far its inputs got).
# BUILD_DIR: the clang build tree (default build-sanitize).
# scripts/fuzz.sh --build-only [BUILD_DIR]: only the build.
# scripts/fuzz.sh --no-build SECONDS [BUILD_DIR]: only the run, of targets built before.
set -euo pipefail
cd "$(dirname "$0")/.."
build=1 run=1
case "${1:-}" in
  --build-only) run=0; shift; set -- 0 "$@" ;;
  --no-build) build=0; shift ;;
esac
seconds=${1:-60}
bdir=${2:-build-sanitize}
if [[ $build == 1 ]]; then
  bash scripts/sanitize.sh --build-only "$bdir"
fi
[[ $run == 0 ]] && exit 0
work=$(mktemp -d)
declare -A fuzzers
# A fuzzer still running when the script stops (the other one failed) is stopped with it.
trap 'kill "${fuzzers[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/seeds"
"$bdir"/launcher/csp-gen -q --ranks 2 --threads 2 --nodes 60 --regions -o "$work/seeds/synthetic"
"$bdir"/launcher/csp-gen -q --from-json tests/data/fig75.json -o "$work/seeds/fig75"
# Each seed gets the target's selector byte (tests/fuzz/profile_reader_fuzz.cpp): 0x01 = skip the
# checksum, so that mutations of valid profiles reach the parser and the structural checks.
for f in "$work"/seeds/*/*.cspprof; do
  cp "$f" "$work/corpus/$(basename "$(dirname "$f")")-$(basename "$f")"
  printf '\001' >>"$work/corpus/$(basename "$(dirname "$f")")-$(basename "$f")"
done
# Bundle seeds (selector 0x11: a bundle, checksum skipped): three synthetic profiles one after the
# other, as csp-run appends the threads that end while their process runs.
some=("$work"/seeds/synthetic/*.cspprof)
cat "${some[@]:0:3}" >"$work/corpus/bundle-of-3"
printf '\021' >>"$work/corpus/bundle-of-3"
fuzz() {  # fuzz NAME BINARY CORPUS...: runs in the background; `verdict NAME` checks it
  local name=$1 binary=$2
  shift 2
  local tag=${name// /-}
  "$binary" -max_total_time="$seconds" -max_len=65536 -artifact_prefix="$work/$tag-" "$@" \
    >"$work/$tag.log" 2>&1 &
  fuzzers[$tag]=$!
}
verdict() {  # verdict NAME
  local name=$1 tag=${1// /-} status=0
  wait "${fuzzers[$tag]}" || status=$?
  unset "fuzzers[$tag]"
  grep -E '^Done|ERROR|SUMMARY' "$work/$tag.log" || true
  if [[ $status -ne 0 ]]; then
    tail -n 40 "$work/$tag.log" >&2
    echo "fuzz: $name crashed; reproducer and log in $work (kept)" >&2
    trap 'kill "${fuzzers[@]}" 2>/dev/null || true' EXIT
    exit 1
  fi
  echo "fuzz: $name ${seconds} s, no crash"
}
mkdir -p "$work/metrics-corpus"
# Seeds for the metrics target: stored accumulators of a small database (selector byte 0: integer
# accumulators of raw metrics, 1: real accumulators of a derived metric), made with the Release
# tools when they are built (scripts/test.sh builds them first).
if [[ -x build/launcher/csp-prof-mpi && -x build/tests/csp-db-dump ]]; then
  build/launcher/csp-prof-mpi -q --derive 'r = `cpu-time` / 3' "$work/seeds/synthetic" -o "$work/seed-db"
  # One pass over the dump: the first 400 summaries and the first 400 distributions.
  build/tests/csp-db-dump "$work/seed-db" | python3 -c '
import sys
def split(b):  # a distributions value: the accumulator and the histogram, each varint length + bytes
    out, at = [], 0
    while at < len(b):
        n, shift = 0, 0
        while True:
            c = b[at]; at += 1; n |= (c & 0x7F) << shift; shift += 7
            if c < 0x80: break
        out.append(b[at:at + n]); at += n
    return out
def put(name, data):
    with open(sys.argv[1] + "/" + name, "wb") as f:
        f.write(data)
seen = {"summaries": 0, "distributions": 0}
for line in sys.stdin:
    fields = line.split()
    if len(fields) < 3 or seen.get(fields[0], 400) >= 400:
        continue
    i = seen[fields[0]] = seen[fields[0]] + 1
    value = bytes.fromhex(fields[2])
    if fields[0] == "summaries":
        # The first byte of an accumulator is its tag: integer (0x11) or real (0x21).
        if value[:1] in (b"\x11", b"\x21"):
            put("acc-%d" % i, (b"\x00" if value[0] == 0x11 else b"\x01") + value)
        continue
    acc, hist = split(value)
    if hist:
        put("hist-%d" % i, b"\x02" + hist)
    if acc and acc[0] == 0x11:
        put("class-acc-%d" % i, b"\x00" + acc)
' "$work/metrics-corpus"
fi
# Seeds for the expression parser (selector 3) and the summary formulas (selector 4): without them
# a 10-second run may never mutate its way to a valid definition ('name = expression' with quoted
# statistic references), and the check below would fail on luck, not on a bug.
i=0
for e in 'a + b * 2' '(x - y) / `cpu-time` * 2' 'max(a, b) / min(1e6, -c)' '`cpu-time` / 1e9 - 0.5'; do
  printf '\003%s' "$e" >"$work/metrics-corpus/expression-$((i += 1))"
done
for f in 'imb = `cpu-time.max` / `cpu-time.mean` - 1' 'r = `cpu-time.all.sum` / 2' \
  'cv = `cpu-time.stddev` / `cpu-time.present.mean`' 's = (`a.sum` + `b.min`) * 1e-9'; do
  printf '\004%s' "$f" >"$work/metrics-corpus/formula-$((i += 1))"
done
fuzz "profile reader" "$bdir"/tests/fuzz/profile_reader_fuzz "$work/corpus"
fuzz "metrics decoders and expressions" "$bdir"/tests/metrics/metrics_fuzz "$work/metrics-corpus"
verdict "profile reader"
# The reader target must get past its early checks: some inputs parse, some fail the structural
# checks behind the decoder (a run stuck at the checksum or the header would show zeros here).
stats=$(grep -E '^profile_reader_fuzz: ' "$work/profile-reader.log" | tail -n 1 || true)
echo "${stats:-profile_reader_fuzz: no statistics printed}"
read -r parsed structural < <(sed -E 's/.* ([0-9]+) parsed, ([0-9]+) rejected by the structural.*/\1 \2/' <<<"$stats")
if [[ -z "$stats" || "${parsed:-0}" -eq 0 || "${structural:-0}" -eq 0 ]]; then
  echo "fuzz: the profile reader target never got past its early checks" >&2
  exit 1
fi
verdict "metrics decoders and expressions"
stats=$(grep -E '^metrics_fuzz: accepted' "$work/metrics-decoders-and-expressions.log" | tail -n 1 || true)
echo "${stats:-metrics_fuzz: no statistics printed}"
if [[ -z "$stats" ]] || grep -qE ' 0( |$)' <<<"$stats"; then
  echo "fuzz: an entry point of the metrics target never accepted an input" >&2
  exit 1
fi
