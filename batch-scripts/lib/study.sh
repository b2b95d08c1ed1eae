# shellcheck shell=bash
# batch-scripts/lib/study.sh: functions shared by csp-scaling-study.sh and csp-study-wait.sh.
# A study directory records its jobs in STUDY_DIR/jobs.tsv, one line per job:
#   step <TAB> job id (or "local") <TAB> log file <TAB> description

# study_job_info ID: prints "STATE EXITCODE REASON" for a Slurm job, from squeue/scontrol while
# the controller remembers the job, else from sacct (accounting), else "UNKNOWN - -".
study_job_info() {
  local id=$1 line state exitcode reason
  line=$(scontrol show job -o "$id" 2>/dev/null || true)
  if [[ "$line" == *JobState=* ]]; then
    state=$(sed -n 's/.*JobState=\([^ ]*\).*/\1/p' <<<"$line")
    exitcode=$(sed -n 's/.* ExitCode=\([^ ]*\).*/\1/p' <<<"$line")
    reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<<"$line")
    echo "${state:-UNKNOWN} ${exitcode:--} ${reason:--}"
    return
  fi
  if command -v sacct >/dev/null; then
    line=$(sacct -n -X -P -j "$id" -o State,ExitCode,Reason 2>/dev/null | head -n 1 || true)
    if [[ -n "$line" ]]; then
      IFS='|' read -r state exitcode reason <<<"$line"
      echo "${state%% *} ${exitcode:--} ${reason:--}"
      return
    fi
  fi
  echo "UNKNOWN - -"
}

study_terminal() {
  case "$1" in
    PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUED|RESIZING|SUSPENDED|STAGE_OUT|SIGNALING) return 1 ;;
    *) return 0 ;;
  esac
}

# study_wait STUDY_DIR [TIMEOUT_SECONDS [POLL_SECONDS]]: waits until every job of the study has
# ended, then prints a table and, for a failed chain, which job failed, why, and its log (with
# its last lines). Returns 0 when every job completed, 1 when one failed, 2 on timeout.
study_wait() {
  local dir=$1 timeout=${2:-0} poll=${3:-5} start now
  local -a steps ids jlogs descs
  local step id log desc state exitcode reason i all_done failed=0 shown_state=""
  [[ -f "$dir/jobs.tsv" ]] || { echo "csp-study: error: $dir/jobs.tsv not found (not a submitted study?)" >&2; return 2; }
  while IFS=$'\t' read -r step id log desc; do
    steps+=("$step"); ids+=("$id"); jlogs+=("$log"); descs+=("$desc")
  done <"$dir/jobs.tsv"
  start=$(date +%s)
  while :; do
    all_done=1
    local summary=""
    for i in "${!ids[@]}"; do
      [[ "${ids[$i]}" == local ]] && continue
      read -r state exitcode reason <<<"$(study_job_info "${ids[$i]}")"
      summary+="${steps[$i]}=$state "
      study_terminal "$state" || all_done=0
    done
    if [[ "$summary" != "$shown_state" ]]; then
      echo "csp-study: $(date -u +%T) ${summary% }"
      shown_state=$summary
    fi
    [[ $all_done == 1 ]] && break
    now=$(date +%s)
    if [[ "$timeout" -gt 0 && $((now - start)) -ge "$timeout" ]]; then
      echo "csp-study: error: the study's jobs did not finish within ${timeout} s (still queued or running; see squeue)" >&2
      return 2
    fi
    sleep "$poll"
  done

  echo
  printf '%-14s %-10s %-22s %-9s %s\n' step job state exit log
  for i in "${!ids[@]}"; do
    read -r state exitcode reason <<<"$(study_job_info "${ids[$i]}")"
    log=${jlogs[$i]}
    [[ -e "$log" ]] || log="(none: the job never ran)"
    printf '%-14s %-10s %-22s %-9s %s\n' "${steps[$i]}" "${ids[$i]}" "$state" "$exitcode" "$log"
  done
  for i in "${!ids[@]}"; do
    read -r state exitcode reason <<<"$(study_job_info "${ids[$i]}")"
    [[ "$state" == COMPLETED ]] && continue
    failed=1
    if [[ "$state" == CANCELLED* && ( "$reason" == Dependency* || "$reason" == *Dependency* ) ]]; then
      echo "csp-study: job ${ids[$i]} (${steps[$i]}) was cancelled because a job it depends on failed" >&2
      continue
    fi
    echo "csp-study: error: job ${ids[$i]} (${steps[$i]}: ${descs[$i]}) ended $state (exit code $exitcode, reason $reason)" >&2
    echo "csp-study: its log is ${jlogs[$i]}" >&2
    if [[ -f "${jlogs[$i]}" ]]; then
      echo "---- last lines of ${jlogs[$i]}" >&2
      tail -n 15 "${jlogs[$i]}" >&2
      echo "----" >&2
    fi
  done
  return $failed
}
