#!/usr/bin/env bash
# batch-scripts/local-slurm.sh start refuses a --dir that someone else could have planted or can
# change (its default lives in /tmp): a symbolic link, a directory of another user, a directory
# others may write. Nothing under such a directory is removed or written, and no daemon starts.
#   local_slurm_dir_test.sh SOURCE_DIR
set -uo pipefail
src=$1
script="$src/batch-scripts/local-slurm.sh"
work=$(mktemp -d /tmp/csp-local-slurm-dir.XXXXXX)
port=$((30000 + (RANDOM % 1000) * 2))
fail=0
cleanup() {
  # Whatever a broken script started is stopped by the PIDs it recorded.
  for d in "$work"/victim "$work"/open; do
    [[ -d "$d/pids" ]] && bash "$script" stop --dir "$d" >/dev/null 2>&1
  done
  rm -rf "$work"
}
trap cleanup EXIT

expect_refusal() {  # DIR MESSAGE
  local out rc
  out=$(timeout 120 bash "$script" start --dir "$1" --port "$port" --timeout 20 2>&1); rc=$?
  if [[ $rc -ne 1 || "$out" != *"$2"* ]]; then
    echo "FAIL: start --dir $1: exit $rc, expected 1 and '$2'; output:"; echo "$out"; fail=1
  fi
}

# A symbolic link to a directory of the user's, holding files named like the instance's.
mkdir -p "$work/victim/state" "$work/victim/log"
echo keep >"$work/victim/state/keep"
echo keep >"$work/victim/log/keep"
ln -s "$work/victim" "$work/link"
expect_refusal "$work/link" "$work/link: is a symbolic link"
expect_refusal "$work/link/" "$work/link: is a symbolic link"
[[ -f "$work/victim/state/keep" && -f "$work/victim/log/keep" ]] || { echo "FAIL: files behind the link were removed"; fail=1; }
[[ ! -e "$work/victim/slurm.conf" && ! -e "$work/victim/munge" ]] || { echo "FAIL: files written behind the link"; fail=1; }

# A directory others may write to.
mkdir -p "$work/open/state"
echo keep >"$work/open/state/keep"
chmod 777 "$work/open"
expect_refusal "$work/open" "$work/open: is writable by other users (mode 777)"
[[ -f "$work/open/state/keep" ]] || { echo "FAIL: files in the open directory were removed"; fail=1; }

# A directory of another user: / for everyone but root; as root, one given to nobody.
if [[ $(id -u) -eq 0 ]]; then
  mkdir "$work/theirs"
  chown nobody "$work/theirs"
  expect_refusal "$work/theirs" "$work/theirs: is owned by another user"
else
  expect_refusal / "/: is owned by another user"
fi

# Not a directory at all.
echo x >"$work/file"
expect_refusal "$work/file" "$work/file: exists and is not a directory"
[[ "$(cat "$work/file")" == x ]] || { echo "FAIL: the file was changed"; fail=1; }

[[ $fail -eq 0 ]] && echo "local-slurm.sh --dir checks: OK"
exit $fail
