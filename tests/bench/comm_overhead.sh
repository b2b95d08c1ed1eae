#!/bin/bash
# Cost of clocks across processes and communication events (docs/measurement.md "Clocks across
# processes"): tests/apps/mpi_causal.cpp `pingpong N` on 2 ranks, N round trips (4 recorded MPI
# calls and 2 region events per round trip and rank), under csp-run without and with
# --region-log; then the size of the comm_events family of the database.
#   bash tests/bench/comm_overhead.sh [BUILD=build] [N=2000] [RUNS=5] [MODE=pingpong]
# MODE ipingpong: the same with MPI_Isend/MPI_Irecv completed by MPI_Wait (recorded as 2 events
# per round trip and rank, from 4 wrapped calls each).
# On a loaded machine keep N small: two oversubscribed ranks that poll share time slices, and a
# loop longer than a slice measures the scheduler, not csp.
set -euo pipefail
build=${1:-build}
n=${2:-2000}
runs=${3:-5}
mode=${4:-pingpong}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
app="$build/tests/apps/csp-app-mpi-causal"
run() {  # prints rank 0's loop time in ns
  timeout -k 5 300 mpirun --oversubscribe -np 2 "$build/launcher/csp-run" -e none "$@" -o "$work/m-$RANDOM" -- \
    "$app" "$mode" "$n" 2>/dev/null | tail -1
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
plain=$(for i in $(seq "$runs"); do run; done | median)
logged=$(for i in $(seq "$runs"); do run --region-log; done | median)
echo "$mode $n round trips, median of $runs: without --region-log $plain ns, with $logged ns"
awk -v a="$plain" -v b="$logged" -v n="$n" \
  'BEGIN {printf "ratio %.3f; %.0f ns more per round trip (per rank: 2 recorded MPI calls + 2 region events)\n", b / a, (b - a) / n}'
rm -rf "$work"/m-*
timeout -k 5 300 mpirun --oversubscribe -np 2 "$build/launcher/csp-run" -e none --region-log -o "$work/m" -- \
  "$app" "$mode" "$n" >/dev/null 2>&1
timeout -k 5 300 "$build/launcher/csp-prof-mpi" -q "$work/m" -o "$work/db" >/dev/null
"$build/tests/csp-db-dump" "$work/db" 2>/dev/null | awk -v n="$n" '
  $1 == "comm_events" {bytes += (length($2) + length($3)) / 2} END {printf "comm_events: %d key+value bytes for %d events (%.1f bytes/event before compression)\n", bytes, 4 * n, bytes / (4 * n)}' || true
du -sb "$work/db" | awk '{printf "database: %d bytes on disk\n", $1}'
