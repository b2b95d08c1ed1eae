#!/usr/bin/env bash
# csp-scaling-study.sh: measure an MPI application at two process counts p < q, post-process
# both runs in parallel, and compute where scaling is lost, as a chain of Slurm jobs (or
# directly with mpirun when sbatch is absent).
#
#   csp-scaling-study.sh [options] STUDY_DIR -- PROGRAM [ARGS...]
#
# With Slurm it submits five jobs chained with --dependency=afterok and
# --kill-on-invalid-dep=yes (a failed job cancels everything that depends on it):
#   measure-pP   csp-measure.sbatch, P tasks        -> STUDY_DIR/run-pP/meas
#   measure-pQ   csp-measure.sbatch, Q tasks        -> STUDY_DIR/run-pQ/meas
#   prof-pP      csp-prof.sbatch after measure-pP   -> STUDY_DIR/run-pP/db
#   prof-pQ      csp-prof.sbatch after measure-pQ   -> STUDY_DIR/run-pQ/db
#   diff         csp-diff.sbatch after both profs   -> STUDY_DIR/scaling-db, STUDY_DIR/views/
# prints the job ids and where the results and logs will appear, records the jobs in
# STUDY_DIR/jobs.tsv, and returns (or with --wait, waits and reports; csp-study-wait.sh
# STUDY_DIR does the same later). Without Slurm it runs the same five steps one after another
# with mpirun and stops at the first failure.
#
# Options (environment variable in parentheses):
#   -p P                   (CSP_P)            smaller process count [2]
#   -q Q                   (CSP_Q)            larger process count [4]
#   --cpus-per-rank C      (CSP_CPUS_PER_RANK) cpus-per-task of the measured ranks [1]
#   -e, --event E          (CSP_RUN_EVENTS, comma separated) csp-run event, repeatable
#   --prof-tasks N         (CSP_PROF_TASKS)   csp-prof-mpi processes per run [2]
#   --prof-threads T       (CSP_PROF_THREADS) worker threads per csp-prof-mpi process = its
#                                             cpus-per-task [2]
#   --strong | --weak      (CSP_SCALING)      strong: same total problem at p and q; weak:
#                                             same problem per process [strong]
#   --mode M               (CSP_MODE)         auto | slurm | local [auto: slurm if sbatch exists
#                                             and `scontrol ping` finds a controller, else local]
#   --launcher L           (CSP_LAUNCHER)     inside Slurm jobs: srun | mpirun [srun]
#   --mpi TYPE             (CSP_SRUN_MPI)     srun --mpi=TYPE [the cluster's MpiDefault]
#   --sbatch-args "ARGS"   (CSP_SBATCH_ARGS)  added to every sbatch (e.g. "-p debug -A proj -t 30")
#   --mpirun-args "ARGS"   (CSP_MPIRUN_ARGS)  added to every mpirun [--oversubscribe with Open
#                                             MPI when a step needs more processes than cores]
#   --wait                                    Slurm: wait for the chain and report; exit 1 if a
#                                             job failed (names it and its log)
#   --timeout S            (CSP_STUDY_TIMEOUT) with --wait: give up after S seconds [0: never]
#   --force                                   replace the results of an earlier study in STUDY_DIR
#   -n, --dry-run                             print the commands, run and submit nothing
#   -h, --help
# Tools: CSP_BIN (the directory holding csp-run, csp-prof-mpi, csp-diff, csp-views) if set,
# else ../build/launcher next to this script if built, else PATH.
set -euo pipefail

prog=csp-scaling-study
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/study.sh source-path=SCRIPTDIR
source "$here/lib/study.sh"
die() { echo "$prog: error: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

p=${CSP_P:-2}
q=${CSP_Q:-4}
cpus_per_rank=${CSP_CPUS_PER_RANK:-1}
prof_tasks=${CSP_PROF_TASKS:-2}
prof_threads=${CSP_PROF_THREADS:-2}
scaling=${CSP_SCALING:-strong}
mode=${CSP_MODE:-auto}
launcher=${CSP_LAUNCHER:-srun}
srun_mpi=${CSP_SRUN_MPI:-}
sbatch_args=${CSP_SBATCH_ARGS:-}
mpirun_args=${CSP_MPIRUN_ARGS:-}
timeout=${CSP_STUDY_TIMEOUT:-0}
wait=0 force=0 dry=0
events=()
if [[ -n "${CSP_RUN_EVENTS:-}" ]]; then IFS=, read -r -a events <<<"$CSP_RUN_EVENTS"; fi
study=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -p) p=${2:?$1 needs a value}; shift 2 ;;
    -q) q=${2:?$1 needs a value}; shift 2 ;;
    --cpus-per-rank) cpus_per_rank=${2:?$1 needs a value}; shift 2 ;;
    -e|--event) events+=("${2:?$1 needs a value}"); shift 2 ;;
    --prof-tasks) prof_tasks=${2:?$1 needs a value}; shift 2 ;;
    --prof-threads) prof_threads=${2:?$1 needs a value}; shift 2 ;;
    --strong) scaling=strong; shift ;;
    --weak) scaling=weak; shift ;;
    --mode) mode=${2:?$1 needs a value}; shift 2 ;;
    --launcher) launcher=${2:?$1 needs a value}; shift 2 ;;
    --mpi) srun_mpi=${2:?$1 needs a value}; shift 2 ;;
    --sbatch-args) sbatch_args=${2?$1 needs a value}; shift 2 ;;
    --mpirun-args) mpirun_args=${2?$1 needs a value}; shift 2 ;;
    --wait) wait=1; shift ;;
    --timeout) timeout=${2:?$1 needs a value}; shift 2 ;;
    --force) force=1; shift ;;
    -n|--dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [[ -z "$study" ]] || die "unexpected argument '$1': put the program after '--'"
       study=$1; shift ;;
  esac
done
[[ -n "$study" ]] || die "no STUDY_DIR given (usage: csp-scaling-study.sh [options] STUDY_DIR -- PROGRAM [ARGS...])"
[[ $# -gt 0 ]] || die "no program given after '--'"
for v in p q cpus_per_rank prof_tasks prof_threads; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "${v//_/-}: '${!v}' is not a positive integer"
done
[[ "$timeout" =~ ^[0-9]+$ ]] || die "--timeout: '$timeout' is not a number of seconds"
[[ "$p" -lt "$q" ]] || die "-p $p must be smaller than -q $q"
[[ "$scaling" == strong || "$scaling" == weak ]] || die "CSP_SCALING: '$scaling' is not strong or weak"
[[ "$launcher" == srun || "$launcher" == mpirun ]] || die "--launcher: '$launcher' is not srun or mpirun"
case "$mode" in
  auto) # Slurm if sbatch is installed and a controller answers (an installed but unconfigured
        # Slurm, as on a workstation, means: no Slurm).
        if command -v sbatch >/dev/null && timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
          mode=slurm
        else
          mode=local
        fi ;;
  slurm) command -v sbatch >/dev/null || die "--mode slurm: sbatch not found" ;;
  local) ;;
  *) die "--mode: '$mode' is not auto, slurm or local" ;;
esac
if [[ $mode == local ]]; then
  command -v mpirun >/dev/null || [[ "$q" == 1 ]] || die "no sbatch and no mpirun: cannot run $q processes"
fi

# The CSP tools.
if [[ -z "${CSP_BIN:-}" ]]; then
  if [[ -x "$here/../build/launcher/csp-prof-mpi" ]]; then CSP_BIN=$(cd "$here/../build/launcher" && pwd)
  elif command -v csp-prof-mpi >/dev/null; then CSP_BIN=$(dirname "$(command -v csp-prof-mpi)")
  else die "csp-prof-mpi not found: build CSP (scripts/build.sh), put its tools in PATH or set CSP_BIN"; fi
fi
CSP_BIN=$(cd "$CSP_BIN" 2>/dev/null && pwd) || die "CSP_BIN=$CSP_BIN is not a directory"
export CSP_BIN
for t in csp-run csp-prof-mpi csp-diff csp-views; do
  [[ -x "$CSP_BIN/$t" ]] || die "$t not found in $CSP_BIN (every step of the study needs csp-run, csp-prof-mpi, csp-diff and csp-views)"
done

# The program, resolved now so that the jobs do not depend on PATH or the working directory.
program=$1; shift
if [[ "$program" == */* ]]; then
  [[ -e "$program" ]] || die "program '$program' does not exist"
  [[ -f "$program" && -x "$program" ]] || die "program '$program' is not an executable file"
  program=$(cd "$(dirname "$program")" && pwd)/$(basename "$program")
else
  resolved=$(command -v "$program") || die "program '$program' not found in PATH"
  program=$resolved
fi
app_args=("$@")

mkdir -p "$study" || die "cannot create STUDY_DIR '$study'"
study=$(cd "$study" && pwd)
run_p="$study/run-p$p"
run_q="$study/run-p$q"
out_db="$study/scaling-db"
views="$study/views"
logs="$study/logs"
for old in "$run_p" "$run_q" "$out_db" "$views" "$study/jobs.tsv"; do
  if [[ -e "$old" ]]; then
    [[ $force == 1 ]] || die "$old exists from an earlier study; use --force to replace it (or another STUDY_DIR)"
  fi
done
if [[ $dry == 0 && $force == 1 ]]; then rm -rf "$run_p" "$run_q" "$out_db" "$views" "$logs" "$study/jobs.tsv"; fi
[[ $dry == 1 ]] || mkdir -p "$logs"

measure_opts=()
for e in "${events[@]}"; do measure_opts+=(--event "$e"); done
[[ -n "$srun_mpi" ]] && measure_opts+=(--mpi "$srun_mpi")

print_results() {
  cat <<EOF

Results will appear in $study:
  measurements     $run_p/meas   $run_q/meas
  databases        $run_p/db   $run_q/db
  scaling loss     $out_db   ($scaling scaling, p=$p, q=$q)
  views            $views/flat-run-p$p.txt   $views/callers-scaling-db.txt
  job logs         $logs/
Then look at them with:
  $CSP_BIN/csp-views --flat $run_p/db
  $CSP_BIN/csp-views --callers $out_db
EOF
}

# The csp-diff report from the diff step's log (the views that follow it are in $views).
report_of() { sed -n '/^csp-diff-job: views written/q; p' "$1"; }

# ---------------------------------------------------------------------------- with Slurm
if [[ $mode == slurm ]]; then
  # shellcheck disable=SC2206  # word splitting of a user-given option string is intended
  common=(--parsable --kill-on-invalid-dep=yes $sbatch_args)
  [[ $dry == 1 ]] || : >"$study/jobs.tsv.tmp"
  submit() {  # submit STEP DESCRIPTION SBATCH-ARGS... -- SCRIPT ARGS...
    local step=$1 desc=$2; shift 2
    local -a sargs=()
    while [[ "$1" != -- ]]; do sargs+=("$1"); shift; done
    shift
    local log="$logs/$step-%j.out" out id
    if [[ $dry == 1 ]]; then
      echo "sbatch ${common[*]} -J csp-$step -o $log ${sargs[*]} $*" >&2
      echo "DRY-$step"
      return
    fi
    if ! out=$(sbatch "${common[@]}" -J "csp-$step" -o "$log" "${sargs[@]}" "$@" 2>&1); then
      echo "$prog: error: sbatch refused the $step job: $out" >&2
      if [[ -s "$study/jobs.tsv.tmp" ]]; then
        echo "$prog: cancelling the jobs already submitted" >&2
        cut -f2 "$study/jobs.tsv.tmp" | xargs -r scancel || true
      fi
      exit 1
    fi
    id=${out%%;*}
    id=${id##*$'\n'}
    [[ "$id" =~ ^[0-9]+$ ]] || { echo "$prog: error: unexpected sbatch output for $step: $out" >&2; exit 1; }
    printf '%s\t%s\t%s\t%s\n' "$step" "$id" "${log//%j/$id}" "$desc" >>"$study/jobs.tsv.tmp"
    echo "$id"
  }
  mp=$(submit "measure-p$p" "$p ranks of $(basename "$program") under csp-run" -n "$p" -c "$cpus_per_rank" -- \
       "$here/csp-measure.sbatch" --launcher "$launcher" "${measure_opts[@]}" "$run_p" -- "$program" "${app_args[@]}")
  mq=$(submit "measure-p$q" "$q ranks of $(basename "$program") under csp-run" -n "$q" -c "$cpus_per_rank" -- \
       "$here/csp-measure.sbatch" --launcher "$launcher" "${measure_opts[@]}" "$run_q" -- "$program" "${app_args[@]}")
  pp=$(submit "prof-p$p" "csp-prof-mpi of run-p$p" -n "$prof_tasks" -c "$prof_threads" --dependency="afterok:$mp" -- \
       "$here/csp-prof.sbatch" --launcher "$launcher" "$run_p")
  pq=$(submit "prof-p$q" "csp-prof-mpi of run-p$q" -n "$prof_tasks" -c "$prof_threads" --dependency="afterok:$mq" -- \
       "$here/csp-prof.sbatch" --launcher "$launcher" "$run_q")
  dj=$(submit diff "csp-diff --$scaling and views" -n 1 -c 1 --dependency="afterok:$pp:$pq" -- \
       "$here/csp-diff.sbatch" "--$scaling" --views-dir "$views" "$run_p" "$run_q" -o "$out_db")
  if [[ $dry == 1 ]]; then exit 0; fi
  mv "$study/jobs.tsv.tmp" "$study/jobs.tsv"
  echo "$prog: submitted the scaling study of $(basename "$program") at p=$p and q=$q:"
  while IFS=$'\t' read -r step id log _; do
    printf '  %-12s job %-8s log %s\n' "$step" "$id" "$log"
  done <"$study/jobs.tsv"
  echo "  chain: $mp -> $pp, $mq -> $pq, ($pp, $pq) -> $dj  (afterok; a failed job cancels its dependants)"
  print_results
  if [[ $wait == 1 ]]; then
    echo
    echo "$prog: waiting for the jobs (Ctrl-C stops waiting, not the jobs)"
    status=0
    study_wait "$study" "$timeout" 2 || status=$?
    if [[ $status -eq 0 ]]; then
      echo "$prog: all five jobs completed; the scaling-loss database is $out_db"
      [[ -f "$logs/diff-$dj.out" ]] && { echo; report_of "$logs/diff-$dj.out"; }
    fi
    exit $status
  else
    echo "Follow the jobs with: squeue -j $mp,$mq,$pp,$pq,$dj   or wait with: $here/csp-study-wait.sh $study"
  fi
  exit 0
fi

# ---------------------------------------------------------------------------- without Slurm
cores=$(nproc 2>/dev/null || echo 1)
mpirun_for() {  # mpirun_for NPROCS: the mpirun arguments for a step of NPROCS processes
  local n=$1 args=$mpirun_args
  if [[ -z "$args" && "$n" -gt "$cores" ]] && mpirun --version 2>&1 | grep -q 'Open MPI'; then
    args="--oversubscribe"
  fi
  echo "$args"
}
steps_total=5 step_no=0
[[ $dry == 1 ]] || : >"$study/jobs.tsv.tmp"
run_step() {  # run_step STEP DESCRIPTION COMMAND...
  local step=$1 desc=$2; shift 2
  local log="$logs/$step.out" t0 status=0
  step_no=$((step_no + 1))
  if [[ $dry == 1 ]]; then echo "$*"; return; fi
  printf '%s\tlocal\t%s\t%s\n' "$step" "$log" "$desc" >>"$study/jobs.tsv.tmp"
  printf '[%d/%d] %-12s %s ... ' "$step_no" "$steps_total" "$step" "$desc"
  t0=$(date +%s)
  "$@" >"$log" 2>&1 || status=$?
  if [[ $status -ne 0 ]]; then
    echo "FAILED"
    echo "$prog: error: step $step ($desc) failed with exit status $status; its log is $log" >&2
    echo "---- last lines of $log" >&2
    tail -n 15 "$log" >&2
    echo "----" >&2
    echo "$prog: the remaining steps were not run" >&2
    mv "$study/jobs.tsv.tmp" "$study/jobs.tsv"
    exit 1
  fi
  echo "ok ($(( $(date +%s) - t0 )) s, log $log)"
}
echo "$prog: no Slurm (mode local): running the five steps with mpirun on this machine"
run_step "measure-p$p" "$p ranks of $(basename "$program") under csp-run" \
  env CSP_MPIRUN_ARGS="$(mpirun_for "$p")" bash "$here/csp-measure.sbatch" -n "$p" "${measure_opts[@]}" "$run_p" -- "$program" "${app_args[@]}"
run_step "measure-p$q" "$q ranks of $(basename "$program") under csp-run" \
  env CSP_MPIRUN_ARGS="$(mpirun_for "$q")" bash "$here/csp-measure.sbatch" -n "$q" "${measure_opts[@]}" "$run_q" -- "$program" "${app_args[@]}"
prof_launch=mpirun
[[ "$prof_tasks" == 1 ]] && prof_launch=none
run_step "prof-p$p" "csp-prof-mpi of run-p$p ($prof_tasks x $prof_threads threads)" \
  env CSP_MPIRUN_ARGS="$(mpirun_for "$prof_tasks")" bash "$here/csp-prof.sbatch" --launcher "$prof_launch" -n "$prof_tasks" -j "$prof_threads" "$run_p"
run_step "prof-p$q" "csp-prof-mpi of run-p$q ($prof_tasks x $prof_threads threads)" \
  env CSP_MPIRUN_ARGS="$(mpirun_for "$prof_tasks")" bash "$here/csp-prof.sbatch" --launcher "$prof_launch" -n "$prof_tasks" -j "$prof_threads" "$run_q"
run_step diff "csp-diff --$scaling and views" \
  bash "$here/csp-diff.sbatch" "--$scaling" --views-dir "$views" "$run_p" "$run_q" -o "$out_db"
[[ $dry == 1 ]] && exit 0
mv "$study/jobs.tsv.tmp" "$study/jobs.tsv"
echo "$prog: all five steps completed"
print_results
echo
report_of "$logs/diff.out"
