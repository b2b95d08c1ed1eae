#!/usr/bin/env bash
# local-slurm.sh: a private single-node Slurm on this machine, for tests and demos.
#
#   local-slurm.sh start  [options]   start munged, slurmctld and slurmd on 127.0.0.1
#   local-slurm.sh stop   [options]   cancel jobs, stop the daemons by PID, remove nothing else
#   local-slurm.sh status [options]   say whether it runs; show sinfo/squeue
#   local-slurm.sh env    [options]   print `export SLURM_CONF=...` for eval
#
# Options (or environment):
#   --dir DIR     (CSP_SLURM_DIR)   private directory for config, keys, state, logs
#                                   [/tmp/csp-slurm-UID]; yours, no symlink, not writable by others
#   --cpus N      (CSP_SLURM_CPUS)  CPUs the node advertises (may exceed the real ones) [8]
#   --port P      (CSP_SLURM_PORT)  slurmctld port; slurmd uses P+1 [16817]
#   --timeout S   (CSP_SLURM_TIMEOUT) seconds to wait for the node to become idle [60]
#   --stop-with PID   start: also start a watchdog that stops this instance as soon as process
#                 PID has ended (e.g. a test killed by a timeout before it could clean up)
#
# Everything lives under DIR: slurm.conf, a munge key and socket of its own, state and spool
# directories, logs, and the PIDs of the three daemons. The system's /etc/slurm and
# /etc/munge, and any munged or Slurm already running, are never touched: the daemons and the
# client commands are pointed at DIR/slurm.conf (-f and SLURM_CONF), which names DIR's munge
# socket. To use it from a shell:   eval "$(batch-scripts/local-slurm.sh env)"
#
# The configuration is the one known to work in containers and VMs without cgroups:
# proctrack/linuxproc, task/none, select/cons_tres with CR_CPU, MpiDefault=pmix (srun --mpi=pmix
# works with Debian's Open MPI 4; pmi2 does not), SlurmdParameters=config_overrides so the node
# may advertise more CPUs than it has, slurmd -N localhost, no accounting database.
set -euo pipefail

prog=local-slurm
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

cmd=${1:-}
[[ -n "$cmd" ]] || { usage >&2; exit 2; }
shift
case "$cmd" in
  -h|--help|help) usage; exit 0 ;;
  start|stop|status|env) ;;
  *) echo "$prog: error: unknown command '$cmd' (start, stop, status, env)" >&2; exit 2 ;;
esac

dir=${CSP_SLURM_DIR:-/tmp/csp-slurm-$(id -u)}
cpus=${CSP_SLURM_CPUS:-8}
port=${CSP_SLURM_PORT:-16817}
timeout=${CSP_SLURM_TIMEOUT:-60}
stop_with=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --cpus) cpus=${2:?--cpus needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
    --stop-with) stop_with=${2:?--stop-with needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$prog: error: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "--cpus: '$cpus' is not a positive integer"
[[ "$port" =~ ^[1-9][0-9]*$ && "$port" -lt 65535 ]] || die "--port: '$port' is not a port number"
[[ "$timeout" =~ ^[1-9][0-9]*$ ]] || die "--timeout: '$timeout' is not a positive integer"
[[ -z "$stop_with" || "$stop_with" =~ ^[1-9][0-9]*$ ]] || die "--stop-with: '$stop_with' is not a PID"
[[ "$dir" = /* ]] || dir="$PWD/$dir"
while [[ "$dir" == */ && "$dir" != / ]]; do dir=${dir%/}; done

conf="$dir/slurm.conf"
socket="$dir/munge/munge.socket"
daemons=(slurmd slurmctld munged)   # stop order

# Whether process PID exists and is not a zombie (an orphaned daemon that has exited stays a
# zombie until init reaps it, which in some containers takes a while).
alive() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ "${stat%% *}" != Z ]]
}

# The PID recorded for DAEMON, if that process is still alive (and is that daemon).
live_pid() {
  local f="$dir/pids/$1.pid" pid
  [[ -f "$f" ]] || return 1
  pid=$(<"$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  if [[ "$1" == watchdog ]]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "local-slurm-watchdog $dir" || return 1
  else
    grep -q "$1" "/proc/$pid/comm" 2>/dev/null || return 1
  fi
  echo "$pid"
}

slurm_env() { export SLURM_CONF="$conf"; }

# Processes (slurmstepd and job steps' helpers) that carry our instance's marker in their
# environment: the daemons export CSP_LOCAL_SLURM=DIR, which slurmstepd inherits from slurmd.
marked_pids() {
  local e pid
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}; pid=${pid%/environ}
    if { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qxF "CSP_LOCAL_SLURM=$dir"; then
      echo "$pid"
    fi
  done
}

stop_all() {
  local name pid i any
  # The watchdog first (unless it is the one stopping us: it execs this script).
  if pid=$(live_pid watchdog) && [[ "$pid" != "$$" ]]; then
    kill -TERM "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pids/watchdog.pid"
  if live_pid slurmctld >/dev/null && command -v scancel >/dev/null; then
    SLURM_CONF="$conf" timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
      [[ -z "$(SLURM_CONF="$conf" timeout 5 squeue -h -o %i 2>/dev/null)" ]] && break
      sleep 0.5
    done
  fi
  for name in "${daemons[@]}"; do
    if pid=$(live_pid "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      for ((i = 0; i < 40; i++)); do alive "$pid" || break; sleep 0.25; done
      if alive "$pid"; then
        echo "$prog: $name (pid $pid) ignored SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
      echo "$prog: stopped $name (pid $pid)"
    fi
    rm -f "$dir/pids/$name.pid"
  done
  # Leftover step daemons and tasks of this instance, by PID.
  any=$(marked_pids || true)
  if [[ -n "$any" ]]; then
    echo "$prog: killing leftover processes of this instance: $(echo "$any" | tr '\n' ' ')" >&2
    # shellcheck disable=SC2086
    kill -KILL $any 2>/dev/null || true
  fi
}

show_logs() {
  local f
  for f in "$dir"/log/*.log; do
    [[ -s "$f" ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

fail_start() {
  echo "$prog: error: $*" >&2
  show_logs
  stop_all >&2
  exit 1
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_conf() {
  local user; user=$(id -un)
  cat >"$conf" <<EOF
# Generated by batch-scripts/local-slurm.sh: a private single-node Slurm on loopback.
ClusterName=csplocal
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=pmix
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
SchedulerParameters=sched_interval=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  : >"$dir/plugstack.conf"
}

node_state() { SLURM_CONF="$conf" timeout 5 sinfo -h -n localhost -o %T 2>/dev/null | head -n 1; }

# DIR gets a munge key and the daemons' state, and start removes parts of it: it must be this
# user's own directory, no symbolic link (anyone can plant a name in /tmp), writable by nobody
# else. A missing DIR is created exclusively (mkdir without -p), so a name planted meanwhile
# fails instead of being used.
private_dir() {
  local mode
  [[ -L "$dir" ]] && die "$dir: is a symbolic link; --dir must name a directory of your own"
  if [[ -e "$dir" ]]; then
    [[ -d "$dir" ]] || die "$dir: exists and is not a directory; choose another --dir"
    [[ -O "$dir" ]] || die "$dir: is owned by another user; choose another --dir"
    mode=$(stat -c %a -- "$dir")
    (( (8#$mode & 8#022) == 0 )) || die "$dir: is writable by other users (mode $mode); choose another --dir"
  else
    mkdir -p -- "$(dirname -- "$dir")" && mkdir -m 700 -- "$dir" || die "$dir: cannot be created"
  fi
}

start() {
  local b pid state i
  private_dir
  for b in munged mungekey munge slurmctld slurmd sinfo sbatch srun; do
    command -v "$b" >/dev/null || [[ -x "/usr/sbin/$b" ]] || die "'$b' not found; install the Debian packages slurm-wlm and munge (scripts/install-deps.sh)"
  done
  export PATH="$PATH:/usr/sbin"
  if live_pid slurmctld >/dev/null || live_pid slurmd >/dev/null || live_pid munged >/dev/null; then
    if [[ "$(node_state)" =~ ^(idle|mixed|allocated) ]]; then
      echo "$prog: already running in $dir (SLURM_CONF=$conf)"
      return 0
    fi
    die "a partial instance runs in $dir; run '$0 stop --dir $dir' first"
  fi
  port_busy "$port" && die "port $port (slurmctld) is in use; choose another with --port"
  port_busy $((port + 1)) && die "port $((port + 1)) (slurmd) is in use; choose another with --port"

  rm -rf "$dir/state" "$dir/spool" "$dir/run" "$dir/log" "$dir/munge"
  mkdir -p "$dir"/{state,spool,run,log,pids,munge}
  chmod 711 "$dir" "$dir/munge"   # munged wants its socket directory searchable by all

  mungekey --create --keyfile="$dir/munge/munge.key" --bits=1024 >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$dir/munge/munge.key"
  write_conf

  setsid munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$socket" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" </dev/null >>"$dir/log/munged.out.log" 2>&1 &
  echo $! >"$dir/pids/munged.pid"
  for ((i = 0; i < 50; i++)); do [[ -S "$socket" ]] && break; sleep 0.1; done
  munge --socket="$socket" -n 2>/dev/null | unmunge --socket="$socket" >/dev/null 2>&1 ||
    fail_start "munged did not start (socket $socket)"

  slurm_env
  CSP_LOCAL_SLURM="$dir" setsid slurmctld -D -c -f "$conf" </dev/null >>"$dir/log/slurmctld.out.log" 2>&1 &
  echo $! >"$dir/pids/slurmctld.pid"
  for ((i = 0; i < 50; i++)); do
    timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' && break
    live_pid slurmctld >/dev/null || fail_start "slurmctld exited"
    sleep 0.2
  done
  timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' || fail_start "slurmctld does not answer"

  CSP_LOCAL_SLURM="$dir" setsid slurmd -D -N localhost -f "$conf" </dev/null >>"$dir/log/slurmd.out.log" 2>&1 &
  echo $! >"$dir/pids/slurmd.pid"
  state=""
  for ((i = 0; i < timeout * 2; i++)); do
    live_pid slurmd >/dev/null || fail_start "slurmd exited"
    state=$(node_state || true)
    case "$state" in
      idle*) break ;;
      down*|drain*|fail*) timeout 5 scontrol update nodename=localhost state=resume 2>/dev/null || true ;;
    esac
    sleep 0.5
  done
  [[ "$state" == idle* ]] || fail_start "node localhost did not become idle within ${timeout} s (state: ${state:-unknown})"
  if [[ -n "$stop_with" ]]; then
    # shellcheck disable=SC2016  # expanded by the watchdog's shell
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; exec bash "$2" stop --dir "$3"' \
      local-slurm-watchdog "$stop_with" "$(cd "$(dirname "$0")" && pwd)/$(basename "$0")" "$dir" \
      local-slurm-watchdog "$dir" </dev/null >>"$dir/log/watchdog.log" 2>&1 &
    echo $! >"$dir/pids/watchdog.pid"
    echo "$prog: a watchdog (pid $!) stops this instance when process $stop_with ends"
  fi
  pid=$(live_pid slurmctld)
  echo "$prog: running in $dir: slurmctld pid $pid, slurmd pid $(live_pid slurmd), munged pid $(live_pid munged)"
  echo "$prog: node localhost, $cpus CPUs, partition 'local'; use it with: export SLURM_CONF=$conf"
}

status() {
  local name pid rc=0
  for name in munged slurmctld slurmd; do
    if pid=$(live_pid "$name"); then echo "$name: running (pid $pid)"; else echo "$name: not running"; rc=3; fi
  done
  if [[ $rc -eq 0 ]]; then
    SLURM_CONF="$conf" sinfo || true
    SLURM_CONF="$conf" squeue || true
  fi
  return $rc
}

case "$cmd" in
  start) start ;;
  stop)
    if [[ ! -d "$dir/pids" ]]; then echo "$prog: nothing to stop in $dir"; exit 0; fi
    stop_all ;;
  status) status ;;
  env) echo "export SLURM_CONF=$(printf %q "$conf")" ;;
esac
