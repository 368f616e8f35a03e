#!/usr/bin/env bash
# Installs the pinned npm packages of the job queues make bench runs beside
# payflow (package-lock.json: graphile-worker, pg-boss, pg) into a cache
# directory outside the source tree, and prints that directory.
#
# Reused while package-lock.json is unchanged, so only the first run on a
# machine talks to the npm registry; `npm ci` installs exactly what the lock
# file names, without install scripts (none of these packages needs one).
#
# Cache: $PAYFLOW_BENCH_PEERS_CACHE_DIR, else $PAYFLOW_CACHE_DIR/bench-peers,
#        else <repo>/.cache/bench-peers (gitignored).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../../.." && pwd)
cache=${PAYFLOW_BENCH_PEERS_CACHE_DIR:-${PAYFLOW_CACHE_DIR:-$repo_root/.cache}/bench-peers}

die() { echo "bench peers: $*" >&2; exit 1; }
command -v node >/dev/null || die "node is not installed (Node 20 or later is needed)"
command -v npm >/dev/null || die "npm is not installed"
# pg-boss 10 needs Node 20 (its 11 and later, 22); graphile-worker 0.17, 14.
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || die "Node $(node --version) is too old: pg-boss 10 needs Node 20"

mkdir -p "$cache"
exec 9>"$cache/.install.lock"
flock 9
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
have=$(cat "$cache/.installed-lock.sha256" 2>/dev/null || true)
if [ "$want" != "$have" ] || [ ! -f "$cache/node_modules/pg-boss/package.json" ]; then
	echo "bench peers: installing pinned npm packages into $cache" >&2
	rm -f "$cache/.installed-lock.sha256"
	cp "$here/package.json" "$here/package-lock.json" "$cache/"
	npm ci --prefix "$cache" --ignore-scripts --no-audit --no-fund --loglevel=error >&2
	printf '%s\n' "$want" >"$cache/.installed-lock.sha256"
fi
echo "$cache"
