#!/usr/bin/env bash
# web/frontend/build.sh SRC OUT: the web viewer's page. Installs the npm packages of
# package-lock.json into OUT/npm (again only when the lock file changed), bundles src/main.js
# with esbuild and inlines the bundle and the styles into OUT/csp-web.html, which the C++ build
# embeds. Without node, npm or the npm registry it does not fail the build: it writes an empty
# page and OUT/assets-status.txt saying why (csp-web then says so), prints that, and leaves out
# OUT/assets.stamp so that the next build tries again. Nothing is fetched at run time.
set -uo pipefail
src=$1
out=$2
mkdir -p "$out/npm"

# Moves file $2 to $1, or drops it when $1 has the same bytes (the C++ build recompiles what
# embeds $1 when it changes).
replace() {
  if cmp -s "$2" "$1"; then rm -f "$2"; else mv "$2" "$1"; fi
}
put() {
  printf '%s' "$2" > "$1.new"
  replace "$1" "$1.new"
}
skip() {
  echo "web: the viewer's page is NOT built: $1" >&2
  put "$out/csp-web.html" ""
  put "$out/assets-status.txt" "$1"
  rm -f "$out/assets.stamp"
  exit 0
}

command -v node > /dev/null || skip "node is not installed (scripts/install-deps.sh installs Debian's nodejs and npm)"
command -v npm > /dev/null || skip "npm is not installed (scripts/install-deps.sh installs Debian's nodejs and npm)"

modules="$out/npm/node_modules"
if ! cmp -s "$src/package-lock.json" "$out/npm/package-lock.json" || [[ ! -x "$modules/.bin/esbuild" ]]; then
  rm -f "$out/npm/package-lock.json"
  cp "$src/package.json" "$src/package-lock.json" "$out/npm/" || skip "cannot copy package.json to $out/npm"
  echo "web: npm ci (the packages of web/frontend/package-lock.json)" >&2
  if ! (cd "$out/npm" && timeout -k 5 600 npm ci --no-audit --no-fund --fetch-retries=1 --fetch-timeout=30000 > npm-ci.log 2>&1); then
    rm -f "$out/npm/package-lock.json"  # try again next build
    skip "npm ci failed (is the npm registry reachable?): $(grep -m1 -i 'err' "$out/npm/npm-ci.log" | cut -c1-200) (log: $out/npm/npm-ci.log)"
  fi
fi

# A mistake in the front end's own code fails the build.
NODE_PATH="$modules" "$modules/.bin/esbuild" "$src/src/main.js" --bundle --minify --format=iife --target=es2020 \
  --legal-comments=none --log-level=warning --outfile="$out/app.js" || exit 1
node "$src/inline.mjs" "$src/src/index.html" "$out/app.js" "$src/src/style.css" "$out/csp-web.html.built" || exit 1
replace "$out/csp-web.html" "$out/csp-web.html.built"
put "$out/assets-status.txt" "built with node $(node --version) and the packages of web/frontend/package-lock.json"
touch "$out/assets.stamp"
