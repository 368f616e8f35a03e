#!/bin/bash
# make lint: the static checks, first in CI (.ci/run runs it before make
# check).  Each linter prints its findings and the run fails on any:
#
#   ShellCheck: every shell script (-S warning; .shellcheckrc says where
#               sourced files are; a deliberate exception carries a
#               "# shellcheck disable=… # why" next to it)
#   ESLint:     the console's JavaScript and every Node program (.mjs):
#               eslint's recommended rules (test/lint/eslint.config.mjs),
#               installed from test/lint/package-lock.json into .cache/lint
#   plpgsql_check: every PL/pgSQL function of both flavours, on a throwaway
#               cluster, each finding explained (test/lint/plpgsql_check.sh)
#   C layout:   every .c and .h laid out as pgindent does, by pg_bsd_indent
#               (test/lint/c_format.sh; --write applies it)
set -euo pipefail
cd "$(dirname "$0")/.."
source test/lib/deps.sh

failed=0
step() {	# step NAME CMD...: run one linter, say how it went
	local name=$1 t0=$SECONDS
	shift
	if "$@"; then
		echo "lint: $name ok ($((SECONDS - t0)) s)"
	else
		echo "lint: $name FAILED"
		failed=1
	fi
}

shell_scripts() { git ls-files '*.sh' '*.bash' .ci/run; }
run_shellcheck() {	# ten files per shellcheck, one per core at a time
	shell_scripts | xargs -n 10 -P "$(nproc)" shellcheck -x -S warning
}

# eslint_install: npm ci of the pinned eslint into .cache/lint, skipped while
# the lock file is unchanged
eslint_install() {
	local cache=${PAYFLOW_CACHE_DIR:-$PWD/.cache}/lint want
	mkdir -p "$cache"
	want=$(sha256sum test/lint/package-lock.json | cut -d' ' -f1)
	if [ "$(cat "$cache/.installed-lock.sha256" 2>/dev/null || true)" != "$want" ] ||
		[ ! -x "$cache/node_modules/.bin/eslint" ]; then
		cp test/lint/package.json test/lint/package-lock.json "$cache/"
		npm ci --prefix "$cache" --ignore-scripts --no-audit --no-fund --loglevel=error >&2
		echo "$want" >"$cache/.installed-lock.sha256"
	fi
	# the config imports its plugins: it must sit beside their node_modules
	cp test/lint/eslint.config.mjs "$cache/"
	ESLINT_DIR=$cache
}
run_eslint() {
	eslint_install
	# shellcheck disable=SC2046  # file names without blanks
	"$ESLINT_DIR/node_modules/.bin/eslint" -c "$ESLINT_DIR/eslint.config.mjs" --no-warn-ignored \
		$(git ls-files 'workers/console/*.js' '*.mjs')
}

pf_install_deps
step shellcheck run_shellcheck
step eslint run_eslint
step "C layout" test/lint/c_format.sh
step plpgsql_check test/lint/plpgsql_check.sh
[ "$failed" = 0 ] && echo "make lint: all linters passed"
exit "$failed"
