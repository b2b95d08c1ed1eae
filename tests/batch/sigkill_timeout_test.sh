#!/usr/bin/env bash
# csp-measure.sbatch and csp-prof.sbatch give mpirun time between the SIGTERM it passes on (a
# time limit) and its SIGKILL: OMPI_MCA_odls_base_sigkill_timeout=10 unless the environment sets
# it (Open MPI's default, 1 s, lost whole ranks' profiles on a loaded node). mpirun passes the
# variable on to its ranks, where the programs here read it. Also: csp-prof.sbatch -j T above 1
# unbinds mpirun's processes (the stand-in csp-prof-mpi records the CPUs it may run on).
#   sigkill_timeout_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
work=$(mktemp -d /tmp/csp-sigkill-timeout.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail=0

# The measured program: records what its rank was given (bash: it ends with exit(), which
# writes its profile; dash's _exit writes none, and the script wants profiles).
cat >"$work/record.sh" <<'EOS'
#!/bin/bash
echo "${OMPI_MCA_odls_base_sigkill_timeout:-unset}" >"$RECORD.$OMPI_COMM_WORLD_RANK"
EOS
chmod +x "$work/record.sh"
# A stand-in csp-prof-mpi: records the same and writes the database directory.
mkdir -p "$work/bin"
cat >"$work/bin/csp-prof-mpi" <<'EOS'
#!/bin/sh
echo "${OMPI_MCA_odls_base_sigkill_timeout:-unset}" >"$RECORD.$OMPI_COMM_WORLD_RANK"
grep Cpus_allowed_list /proc/self/status | cut -f2 >"$RECORD.cpus.$OMPI_COMM_WORLD_RANK"
for a; do out=$a; done
mkdir -p "$out"
EOS
chmod +x "$work/bin/csp-prof-mpi"

expect() {  # WHAT FILE VALUE
  local got
  got=$(cat "$2" 2>/dev/null || echo missing)
  if [[ "$got" != "$3" ]]; then echo "FAIL: $1: the rank saw '$got', expected '$3'"; fail=1; fi
}

for setting in default 4; do
  want=10
  env=()
  if [[ $setting != default ]]; then want=$setting; env=(OMPI_MCA_odls_base_sigkill_timeout=$setting); fi
  run="$work/run-$setting"
  out=$(env "${env[@]}" RECORD="$work/measure-$setting" CSP_BIN="$build/launcher" \
        CSP_MPIRUN_ARGS=--oversubscribe timeout -k 5 120 \
        bash "$src/batch-scripts/csp-measure.sbatch" --launcher mpirun -n 2 "$run" -- "$work/record.sh" 2>&1)
  [[ $? -eq 0 ]] || { echo "FAIL: csp-measure.sbatch ($setting):"; echo "$out"; fail=1; }
  expect "csp-measure.sbatch, $setting, rank 0" "$work/measure-$setting.0" "$want"
  expect "csp-measure.sbatch, $setting, rank 1" "$work/measure-$setting.1" "$want"
  out=$(env "${env[@]}" RECORD="$work/prof-$setting" CSP_BIN="$work/bin" CSP_MPIRUN_ARGS=--oversubscribe \
        timeout -k 5 120 bash "$src/batch-scripts/csp-prof.sbatch" --launcher mpirun -n 2 "$run" 2>&1)
  [[ $? -eq 0 ]] || { echo "FAIL: csp-prof.sbatch ($setting):"; echo "$out"; fail=1; }
  expect "csp-prof.sbatch, $setting, rank 0" "$work/prof-$setting.0" "$want"
done
# With more than one worker thread per process, csp-prof.sbatch leaves the placement to the
# kernel (--bind-to none): Open MPI binds each of two processes to one core, where csp-prof-mpi
# would run one thread. With a binding in the mpirun arguments, it adds none.
prof_sbatch() {  # RECORD MPIRUN_ARGS SBATCH_ARGS...: csp-prof.sbatch on 2 processes of the stand-in; output in $out
  local record=$1 mpirun_args=$2
  shift 2
  out=$(RECORD="$record" CSP_BIN="$work/bin" CSP_MPIRUN_ARGS="$mpirun_args" timeout -k 5 120 \
        bash "$src/batch-scripts/csp-prof.sbatch" --launcher mpirun -n 2 "$@" --force "$work/run-default" 2>&1)
}
if [[ $(nproc) -ge 2 ]]; then
  for threads in 1 2; do
    prof_sbatch "$work/bind-$threads" --oversubscribe -j "$threads" ||
      { echo "FAIL: csp-prof.sbatch -j $threads:"; echo "$out"; fail=1; }
    cpus=$(cat "$work/bind-$threads.cpus.0" 2>/dev/null || echo missing)
    if [[ $threads == 1 && "$cpus" =~ [-,] ]]; then echo "FAIL: -j 1: rank 0 may run on CPUs $cpus, expected mpirun's one"; fail=1; fi
    if [[ $threads == 2 && ! "$cpus" =~ [-,] ]]; then echo "FAIL: -j 2: rank 0 may run on CPUs '$cpus' only"; fail=1; fi
  done
  prof_sbatch "$work/bound" "--oversubscribe --bind-to core" -j 2
  [[ "$out" == *"--bind-to none"* ]] && { echo "FAIL: --bind-to none added to the user's binding:"; echo "$out"; fail=1; }
fi
[[ $fail == 0 ]] && echo "PASS"
exit $fail
