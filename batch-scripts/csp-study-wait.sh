#!/usr/bin/env bash
# csp-study-wait.sh: wait for the Slurm jobs of a scaling study submitted by
# csp-scaling-study.sh, then report them.
#
#   csp-study-wait.sh [--timeout S] [--poll S] STUDY_DIR
#
# Prints the jobs' states as they change, then a table of step, job id, final state, exit code
# and log. If the chain failed it names the job that failed, its state, exit code and log (with
# its last lines), and the jobs Slurm cancelled because of it.
# Exit status: 0 every job completed, 1 a job failed, 2 timeout or bad arguments.
#   --timeout S   give up waiting after S seconds [0: never]
#   --poll S      seconds between polls [5]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/study.sh source-path=SCRIPTDIR
source "$here/lib/study.sh"
die() { echo "csp-study-wait: error: $*" >&2; exit 2; }

timeout=0 poll=5 study=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --timeout) timeout=${2:?$1 needs a value}; shift 2 ;;
    --poll) poll=${2:?$1 needs a value}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *) [[ -z "$study" ]] || die "one STUDY_DIR expected"; study=$1; shift ;;
  esac
done
[[ -n "$study" ]] || die "no STUDY_DIR given"
[[ "$timeout" =~ ^[0-9]+$ ]] || die "--timeout: '$timeout' is not a number"
[[ "$poll" =~ ^[1-9][0-9]*$ ]] || die "--poll: '$poll' is not a positive number"
command -v scontrol >/dev/null || die "scontrol not found (is this a Slurm machine?)"
study_wait "$study" "$timeout" "$poll"
