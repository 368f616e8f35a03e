#!/bin/bash
# test/browser/install.sh — npm ci of the browser tests' and the OpenAPI
# check's pinned packages (package-lock.json) into test/browser/node_modules,
# again only when the lock file changed.  The browser is Debian's chromium
# (test/lib/deps.sh), driven through playwright-core: no browser download.
exec "$(dirname "$0")/../lib/npm_ci.sh" "$(dirname "$0")"
