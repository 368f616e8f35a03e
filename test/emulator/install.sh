#!/usr/bin/env bash
# Install the emulator's pinned npm packages (fauxqs, the SigV4 signer, the
# AWS SDK clients) into a cache directory outside the source tree.
#
# The cache survives between runs and is reused while package-lock.json is
# unchanged, so only the first run on a machine talks to the npm registry.
# `npm ci` installs exactly what the committed lock file names.
#
# Usage: test/emulator/install.sh [--force]
# Cache: $PAYFLOW_EMULATOR_CACHE_DIR, else $PAYFLOW_CACHE_DIR/emulator,
#        else <repo>/.cache/emulator (gitignored).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

force=0
case "${1:-}" in
	'') ;;
	--force) force=1 ;;
	*) emulator_die "usage: $0 [--force]" ;;
esac

command -v node >/dev/null || emulator_die "node is not installed (Node 20 or later is needed)"
command -v npm >/dev/null || emulator_die "npm is not installed"
node_major=$(node -p 'process.versions.node.split(".")[0]')
# fauxqs 1.9.x needs Node 20; its 2.x line would need 22.
[ "$node_major" -ge 20 ] || emulator_die "Node $node_major is too old: fauxqs 1.9 needs Node 20 or later"

cache=$PAYFLOW_EMULATOR_CACHE_DIR
mkdir -p "$cache"

# Tests may start several emulators at once: one installer at a time, and
# the others find the finished install when they get the lock.
exec 9>"$cache/.install.lock"
flock 9

want=$(sha256sum "$emulator_dir/package-lock.json" | cut -d' ' -f1)
have=$(cat "$cache/.installed-lock.sha256" 2>/dev/null || true)
if [ "$force" = 0 ] && [ "$want" = "$have" ] && [ -f "$cache/node_modules/fauxqs/package.json" ]; then
	exit 0
fi

emulator_log "installing pinned npm packages into $cache"
rm -f "$cache/.installed-lock.sha256"
cp "$emulator_dir/package.json" "$emulator_dir/package-lock.json" "$cache/"
# --ignore-scripts: none of these packages needs an install script, and the
# emulator should not run code at install time that it does not need.
# fastify's light-my-request asks for Node 22 through cookie 2.x; fauxqs never
# loads it (it serves fastify.inject only), so the engine warning is harmless.
npm ci --prefix "$cache" --ignore-scripts --no-audit --no-fund --loglevel=error >&2
printf '%s\n' "$want" >"$cache/.installed-lock.sha256"
emulator_log "installed fauxqs $(node -p "require('$cache/node_modules/fauxqs/package.json').version")"
