#!/usr/bin/env bash
# scripts/demo-study.sh STUDY_DIR: the demo's scaling study (called by scripts/demo.sh after the
# build). Runs batch-scripts/csp-scaling-study.sh on build/tests/batch/csp-app-scaling, an MPI
# program with a known strong-scaling problem, at 2 and 4 processes; shows the Flat view of the
# 2-process run and the Callers view of the scaling loss; ends with commands to try next.
#   CSP_DEMO_SLURM=auto   (default) Slurm if a controller answers `scontrol ping`, else mpirun
#   CSP_DEMO_SLURM=local  start a private single-node Slurm (batch-scripts/local-slurm.sh) for the
#                         demo and stop it afterwards
#   CSP_DEMO_SLURM=no     plain mpirun
set -euo pipefail
cd "$(dirname "$0")/.."
study=${1:?usage: demo-study.sh STUDY_DIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CSP_BIN="${CSP_BIN:-$PWD/build/launcher}"
app="$PWD/build/tests/batch/csp-app-scaling"
lines=${CSP_DEMO_VIEW_LINES:-40}

missing=()
for t in csp-run csp-prof-mpi csp-diff csp-views; do
  [[ -x "$CSP_BIN/$t" ]] || missing+=("$t")
done
[[ -x "$app" ]] || missing+=("tests/batch/csp-app-scaling")
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "demo: the scaling study needs ${missing[*]}, not built in this version of CSP; skipped."
  echo "demo: (the study is batch-scripts/csp-scaling-study.sh; see docs/batch.md)"
  exit 0
fi

mode=local slurm_dir=""
case "${CSP_DEMO_SLURM:-auto}" in
  auto) if command -v sbatch >/dev/null && timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then mode=slurm; fi ;;
  local)
    slurm_dir=$(mktemp -d /tmp/csp-demo-slurm.XXXXXX)
    trap 'bash batch-scripts/local-slurm.sh stop --dir "$slurm_dir" >/dev/null || true; rm -rf "$slurm_dir"' EXIT
    bash batch-scripts/local-slurm.sh start --dir "$slurm_dir" --port $((20000 + (RANDOM % 2000) * 2)) --stop-with $$
    export SLURM_CONF="$slurm_dir/slurm.conf"
    mode=slurm ;;
  no) ;;
  *) echo "demo: error: CSP_DEMO_SLURM must be auto, local or no" >&2; exit 2 ;;
esac

args=(--force -p 2 -q 4 --prof-tasks 2 --prof-threads 1 --strong)
[[ $mode == slurm ]] && args+=(--mode slurm --wait --timeout 600)
[[ $mode == local ]] && args+=(--mode local)
bash batch-scripts/csp-scaling-study.sh "${args[@]}" "$study" -- "$app" 2000 100

show() {  # show TITLE COMMAND...: the first $lines lines of a view
  local out
  echo
  echo "== $1"
  echo "\$ ${*:2}"
  out=$("${@:2}")
  sed -n "1,${lines}p" <<<"$out"
  local n; n=$(wc -l <<<"$out")
  [[ $n -le $lines ]] || echo "... ($((n - lines)) more lines)"
}
show "Flat view of the 2-process run: where the time goes (solve_share: the divided work)" \
  "$CSP_BIN/csp-views" --flat --top 8 "$study/run-p2/db"
show "Callers view of the scaling loss from 2 to 4 processes, by exclusive loss: replicated_setup,
   repeated by every rank, does not scale, nor does combine_on_root, rank 0's serial combination
   of one result per rank (the rest is MPI start-up, which varies from run to run)" \
  "$CSP_BIN/csp-views" --callers --sort sum:exclusive --top 6 "$study/scaling-db"

cat <<EOT

The demo's results are in $study (databases, scaling-loss database, job logs). Try next:
  $CSP_BIN/csp-views --help
  $CSP_BIN/csp-views --flat $study/run-p4/db
  $CSP_BIN/csp-views --callers $study/scaling-db
  $CSP_BIN/csp-views --hot-path $study/run-p4/db       # top-down, following the hottest path
  $CSP_BIN/csp-web $study/run-p4/db $study/scaling-db   # both in a browser: open the URL it prints (docs/web.md)
  batch-scripts/csp-scaling-study.sh --help          # the same study on your program, with sbatch
  CSP_DEMO_SLURM=local bash scripts/demo.sh          # this demo through sbatch on a private local Slurm
  mpirun -np 4 $CSP_BIN/csp-run -o my-run/meas -- ./my_app   # measure your own MPI program
  mpirun -np 2 $CSP_BIN/csp-prof-mpi my-run/meas -o my-run/db
EOT
