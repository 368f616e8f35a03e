#!/bin/bash
# workers/console/vendor.sh — copies the console's chart library (uPlot,
# pinned by package-lock.json) from npm into vendor/, where payflow-api
# serves it: the console loads nothing from a CDN.  npm runs in a cache
# folder outside the served one (.cache/console-npm), and only when the
# lock file changed; the copy is redone when missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PAYFLOW_CACHE_DIR:-$here/../../.cache}/console-npm
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$cache/.installed" 2>/dev/null)" != "$want" ] || [ ! -f "$cache/node_modules/uplot/dist/uPlot.iife.min.js" ]; then
	cp "$here/package.json" "$here/package-lock.json" "$cache/"
	(cd "$cache" && npm ci --no-audit --no-fund --silent)
	echo "$want" >"$cache/.installed"
fi
mkdir -p "$here/vendor"
for f in uPlot.iife.min.js uPlot.min.css; do
	cmp -s "$cache/node_modules/uplot/dist/$f" "$here/vendor/$f" || cp "$cache/node_modules/uplot/dist/$f" "$here/vendor/$f"
done
cp "$cache/node_modules/uplot/LICENSE" "$here/vendor/uPlot.LICENSE.txt"
