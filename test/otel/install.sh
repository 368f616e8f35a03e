#!/bin/bash
# test/otel/install.sh — npm ci of the OTLP receiver's pinned packages
# (package-lock.json) into test/otel/node_modules, again only when the lock
# file changed.
exec "$(dirname "$0")/../lib/npm_ci.sh" "$(dirname "$0")"
