#!/usr/bin/env bash
# scripts/lint.sh [--format-only] [BASE]: the code's format and the clang-tidy checks.
#   Every C and C++ file of the repository must be formatted as .clang-format says (clang-format
#   14 from Debian 12; `clang-format -i FILE` fixes one). Then, unless --format-only, clang-tidy
#   (.clang-tidy: function size, bugprone and performance checks) runs on the C++ sources that
#   changed since BASE (default: the previous commit), with build/compile_commands.json.
# Exits non-zero naming every file and finding.
set -euo pipefail
cd "$(dirname "$0")/.."
format_only=0 base=HEAD~1
for arg in "$@"; do
  case $arg in
    --format-only) format_only=1 ;;
    -*) echo "lint.sh: unknown option '$arg'" >&2; exit 2 ;;
    *) base=$arg ;;
  esac
done
command -v clang-format >/dev/null || { echo "lint.sh: clang-format is not installed (scripts/install-deps.sh)" >&2; exit 1; }

mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
# Files in batches, one clang-format per core at a time; the ones not formatted are printed.
mapfile -t bad < <(printf '%s\0' "${sources[@]}" | xargs -0 -n 16 -P "$(nproc)" sh -c \
  'for f; do clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"; done' _ | sort)
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "lint: not formatted as .clang-format says (fix with clang-format -i):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "lint: ${#sources[@]} files formatted as .clang-format says"
[[ $format_only == 1 ]] && exit 0

command -v clang-tidy >/dev/null || { echo "lint.sh: clang-tidy is not installed (scripts/install-deps.sh)" >&2; exit 1; }
[[ -f build/compile_commands.json ]] || { echo "lint.sh: build/compile_commands.json missing (bash scripts/build.sh first)" >&2; exit 1; }
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  echo "lint: $base is not in this clone (a shallow clone?): no change to run clang-tidy on"
  exit 0
fi
mapfile -t changed < <(git diff --name-only --diff-filter=AM "$base" -- '*.cpp' | grep -v '^tests/' || true)
if [[ ${#changed[@]} -eq 0 ]]; then
  echo "lint: no C++ source of the libraries or tools changed since $base"
  exit 0
fi
echo "lint: clang-tidy on ${#changed[@]} file(s) changed since $base"
# A unity build (CSP_UNITY, the default) lists its generated batch files in compile_commands.json,
# not the sources: each source gets the command of the batch that includes it, in build/lint/.
python3 - <<'EOF'
import json, os, re
entries = json.load(open("build/compile_commands.json"))
listed = {e["file"] for e in entries}
for e in list(entries):
    if "/Unity/unity_" not in e["file"]:
        continue
    with open(e["file"]) as batch:
        for source in re.findall(r'^#include "(.+)"$', batch.read(), re.M):
            if source not in listed:
                listed.add(source)
                entries.append(dict(e, command=e["command"].replace(e["file"], source), file=source))
os.makedirs("build/lint", exist_ok=True)
with open("build/lint/compile_commands.json", "w") as out:
    json.dump(entries, out)
EOF
# One clang-tidy per core; each prints its findings, and the run fails if any file had one.
findings=$(printf '%s\n' "${changed[@]}" |
  xargs -P "$(nproc)" -I{} sh -c 'clang-tidy -p build/lint --quiet "$1" 2>/dev/null | grep -E "^/.*(warning|error):" || true' _ {})
if [[ -n "$findings" ]]; then
  echo "$findings"
  exit 1
fi
echo "lint: no clang-tidy finding"
