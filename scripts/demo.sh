#!/usr/bin/env bash
# The demo main job. On a fresh Debian 12 machine it installs what CSP needs, builds it, and runs
# the CSP workflow: it writes measurement directories with
# csp-gen (a synthetic SPMD run at two scales and the exact profiles of thesis Fig. 7.5), then
# runs the scaling study of batch-scripts/ on an MPI program with a known scaling problem
# (tests/batch/scaling_app.cpp): measured at 2 and 4 processes, post-processed in parallel,
# diffed, with the Flat view of one run and the Callers view of the scaling loss. The study uses
# Slurm when a Slurm controller answers (CSP_DEMO_SLURM=local starts a private one with
# batch-scripts/local-slurm.sh), plain mpirun otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash scripts/install-deps.sh
bash scripts/build.sh build Release

out=${CSP_DEMO_DIR:-demo-output}
mkdir -p "$out"
bin=build/launcher
echo
echo "== synthetic SPMD measurements at two scales (64 and 256 ranks x 2 threads)"
"$bin/csp-gen" --force --ranks 64 --threads 2 --nodes 2000 --imbalance 0.3 --regions --seed 1 -o "$out/run-p64/meas"
"$bin/csp-gen" --force --ranks 256 --threads 2 --nodes 2000 --imbalance 0.3 --regions --seed 1 -o "$out/run-p256/meas"
echo
echo "== exact profiles from a JSON description (thesis Fig. 7.5)"
"$bin/csp-gen" --force --from-json tests/data/fig75.json -o "$out/fig75/meas"

echo
echo "== scaling study: csp-app-scaling at 2 and 4 processes (batch-scripts/csp-scaling-study.sh)"
bash scripts/demo-study.sh "$out/scaling-study"
