#!/usr/bin/env bash
# tests/bench/ab_smoke.sh BUILD_DIR: tests/bench/ab.py as a user runs it, on two tiny inputs' worth
# of runs: the same binary twice gives identical databases (exit 0), with -np 1 and under mpirun;
# an option that changes the database is caught (exit 3, "DIFFERENT"); bad options are refused.
set -uo pipefail
build=$(realpath "${1:?usage: ab_smoke.sh BUILD_DIR}")
src=$(cd "$(dirname "$0")/../.." && pwd)
ab=("${PYTHON:-python3}" "$src/tests/bench/ab.py")
prof=$build/launcher/csp-prof-mpi
work=$(mktemp -d /tmp/csp-ab-smoke.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
check() {  # name, expected status, pattern, command...
  local name=$1 want=$2 pattern=$3; shift 3
  local out status
  out=$("$@" 2>&1); status=$?
  if [[ $status -ne $want ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL $name: status $status (want $want), output without '$pattern':"; echo "$out"; fail=1
  else
    echo "ok   $name"
  fi
}
"$build/launcher/csp-gen" --ranks 2 --threads 2 --nodes 60 --seed 4 -o "$work/in" >/dev/null 2>&1 || { echo "csp-gen failed"; exit 1; }
common=(--base "$prof" --new "$prof" --input "$work/in" --build "$build" --pairs 2 --work "$work/ab")
check "same binary, -np 1" 0 "databases: identical" "${ab[@]}" "${common[@]}"
check "same binary, -np 2" 0 "databases: identical" "${ab[@]}" "${common[@]}" --np 2
check "a different database" 3 "databases: DIFFERENT" "${ab[@]}" "${common[@]}" --new-args="--batch 1"
check "a different database allowed" 0 "databases: DIFFERENT" "${ab[@]}" "${common[@]}" --new-args="--batch 1" \
  --allow-different
check "the pairs alternate" 0 "| 2 | new |" "${ab[@]}" "${common[@]}"
check "no pairs" 2 "--pairs must be at least 1" "${ab[@]}" "${common[@]}" --pairs 0
check "no such binary" 2 "no executable file" "${ab[@]}" --base "$work/none" --new "$prof" --input "$work/in"
check "a failing run" 1 "failed" "${ab[@]}" "${common[@]}" --new-args="--no-such-option"
[[ $fail -eq 0 ]] && echo "ab.py smoke: OK"
exit $fail
