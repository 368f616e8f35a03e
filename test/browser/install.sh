#!/bin/bash
# test/browser/install.sh — npm ci of the browser tests' and the OpenAPI
# check's pinned packages (package-lock.json) into test/browser/node_modules,
# again only when the lock file changed.  The browser is Debian's chromium
# (test/lib/deps.sh), driven through playwright-core: no browser download.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec 9>"$here/.install.lock"
flock 9
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$here/node_modules/.installed-lock.sha256" 2>/dev/null)" != "$want" ]; then
	(cd "$here" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent)
	echo "$want" >"$here/node_modules/.installed-lock.sha256"
fi
