#!/bin/bash
# test/lib/npm_ci.sh DIR — npm ci of DIR's pinned packages (its
# package-lock.json) into DIR/node_modules, again only when the lock file
# changed; one run at a time per folder (tests on parallel lanes share it).
set -euo pipefail
here=$(cd "$1" && pwd)
exec 9>"$here/.install.lock"
flock 9
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$here/node_modules/.installed-lock.sha256" 2>/dev/null)" != "$want" ]; then
	(cd "$here" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent)
	echo "$want" >"$here/node_modules/.installed-lock.sha256"
fi
