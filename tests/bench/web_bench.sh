#!/usr/bin/env bash
# tests/bench/web_bench.sh [BUILD_DIR [WORK_DIR]]
#
# The web viewer on a CCT of >= 1,000,000 nodes (csp-gen --ranks 8 --nodes 1000000 --groups 1,
# the "deep" database of views_bench.sh, reused when WORK_DIR already holds it):
#   - csp-web's start (databases opened) until it prints its URL;
#   - the first view: the bytes sent (the page, its first answers); the page's first requests (/api/databases, the Calling Context view's top),
#     over HTTP with curl, REPEAT times (the first in a fresh server is the cold one);
#   - expanding a node: /api/children of the nodes on the hottest path, one after the other;
#   - the same in the browser (headless chromium, playwright-core): navigation until the first
#     rows are shown, and a click on a node until its children are shown;
#   - the Flat and Callers views' first pages (built from two scans of the database, in the
#     background from csp-web's start);
#   - the server's resident memory (VmHWM, VmRSS).
# Targets (docs/web.md): first view <= 1 s, expanding a node <= 100 ms. Figures only: nothing
# here fails on time.
set -euo pipefail
build=$(realpath "${1:-build}")
work=${2:-/tmp/csp-views-bench}
repeat=${REPEAT:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$work"
db=$work/deep-db
if [[ ! -d $db ]]; then
  echo "building the deep database (csp-gen --ranks 8 --nodes 1000000 --groups 1)" >&2
  "$build/launcher/csp-gen" -q --ranks 8 --threads 1 --nodes 1000000 --groups 1 --seed 1 -o "$work/deep-meas" --force
  mpirun --oversubscribe -np 2 "$build/launcher/csp-prof-mpi" -q "$work/deep-meas" -o "$db"
  rm -rf "$work/deep-meas"
fi

log=$(mktemp)
start=$(date +%s.%N)
"$build/launcher/csp-web" -q "$db" > "$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do grep -q token= "$log" && break; sleep 0.05; done
ready=$(date +%s.%N)
url=$(grep -o 'http://[^ ]*' "$log")
base=${url%%/\?*}
token=${url##*token=}
echo "csp-web start until its URL: $(echo "$ready - $start" | bc) s"

get() { curl -s -o /dev/null -w '%{time_total}' -H "X-CSP-Token: $token" "$base$1"; }
size() { curl -s -o /dev/null -w '%{size_download}' -H "X-CSP-Token: $token" "$base$1"; }
body() { curl -s -H "X-CSP-Token: $token" "$base$1"; }
report() {  # label times...
  local label=$1; shift
  printf '%-44s' "$label"
  printf ' %s' "$@"
  printf '  (s; best %s)\n' "$(printf '%s\n' "$@" | sort -g | head -1)"
}

firsts=()
for _ in $(seq "$repeat"); do
  a=$(get '/api/databases')
  b=$(get '/api/view?db=0&kind=cc&depth=1')
  firsts+=("$(echo "$a + $b" | bc)")
done
report "first view (databases + cc top), HTTP" "${firsts[@]}"
# Bytes sent for the first view: the page (scripts and styles inline, once) and its first answers.
echo "bytes sent for the first view: page $(size '/') + databases $(size '/api/databases') + cc top $(size '/api/view?db=0&kind=cc&depth=1')"

# The hottest path: the first child of each node, opened one after the other.
expands=()
expand_bytes=()
id=$(body '/api/view?db=0&kind=cc&depth=1' | python3 -c 'import json,sys; n=json.load(sys.stdin)["answer"]["nodes"]; print([x["id"] for x in n if x["parent"]==0][0])')
for _ in $(seq 12); do
  expands+=("$(get "/api/children?db=0&kind=cc&id=$id")")
  expand_bytes+=("$(size "/api/children?db=0&kind=cc&id=$id")")
  id=$(body "/api/children?db=0&kind=cc&id=$id" | python3 -c 'import json,sys,os
n=json.load(sys.stdin)["answer"]["nodes"]; k=[x["id"] for x in n[1:] if x["parent"]==n[0]["id"]]; print(k[0] if k else "")')
  [[ -z $id ]] && break
done
report "expand a node (children), HTTP" "${expands[@]}"
echo "bytes sent per expanded node: ${expand_bytes[*]}"

# csp-web builds the Flat and Callers views in the background from its start: the first request
# waits for what remains of that build.
report "flat view top (first, then again)" "$(get '/api/view?db=0&kind=flat&depth=1')" "$(get '/api/view?db=0&kind=flat&depth=1')"
echo "flat view answered $(echo "$(date +%s.%N) - $start" | bc) s after csp-web started"
report "callers view top (first, then again)" "$(get '/api/view?db=0&kind=callers&depth=1')" "$(get '/api/view?db=0&kind=callers&depth=1')"

modules=$build/web/npm/node_modules
if [[ -d $modules/playwright-core && -x /usr/bin/chromium ]]; then
  CSP_WEB_NODE_MODULES=$modules node "$(dirname "$0")/web_bench_browser.mjs" "$url" || echo "browser measurement failed"
else
  echo "browser measurement not run: playwright-core or /usr/bin/chromium missing"
fi
grep -E 'VmHWM|VmRSS' "/proc/$server/status" | tr -s ' ' | sed 's/^/server memory: /'
echo "database: $(du -sh "$db" | cut -f1), $(python3 -c "import json,subprocess,sys; print(json.loads(subprocess.run(['$build/launcher/csp-views','--info','--format','json','$db'],capture_output=True,text=True).stdout)['cct_nodes'])") CCT nodes"
