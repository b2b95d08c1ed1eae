#!/usr/bin/env bash
# The demo main job. On a fresh Debian 12 machine it installs what CSP needs, builds it, and runs
# the CSP workflow: first the exclusive/inclusive example of thesis Fig. 7.5 from exact profiles
# (csp-gen -> csp-prof-mpi -> csp-views), then the scaling study of batch-scripts/ on an MPI program with a known scaling problem
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
echo "== the exclusive/inclusive example of thesis Fig. 7.5, from exact profiles (csp-gen --from-json)"
"$bin/csp-gen" -q --force --from-json tests/data/fig75.json -o "$out/fig75/meas"
"$bin/csp-prof-mpi" -q --force "$out/fig75/meas" -o "$out/fig75/db"
"$bin/csp-views" "$out/fig75/db"

echo
echo "== scaling study: csp-app-scaling at 2 and 4 processes (batch-scripts/csp-scaling-study.sh)"
bash scripts/demo-study.sh "$out/scaling-study"
