# shellcheck shell=bash
# test/lib/assert.sh — tiny assertion helpers for the shell-level tests.
# Sourced.  Each check prints one "ok"/"not ok" line (or "SKIP", pf_skip);
# pf_done exits non-zero if any failed.

PF_FAILURES=0

pf_ok() {
	local what=$1
	shift
	if "$@"; then
		echo "ok - $what"
	else
		echo "not ok - $what"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}

pf_eq() {
	local what=$1 expected=$2 actual=$3
	if [ "$expected" = "$actual" ]; then
		echo "ok - $what"
	else
		echo "not ok - $what (expected '$expected', got '$actual')"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}

# pf_wait_for SECONDS COMMAND...: polls until COMMAND succeeds
pf_wait_for() {
	local seconds=$1
	shift
	local deadline=$((SECONDS + seconds))
	while [ $SECONDS -lt $deadline ]; do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

# pf_skip WHAT WHY: a check that cannot run here (a tool, a privilege, a
# limit missing). It says SKIP, never "ok": a skipped check must not read as
# a pass. make check counts the lines appended to PF_SKIP_LOG and lists them
# in its summary.
pf_skip() {
	echo "SKIP - $1: $2"
	if [ -n "${PF_SKIP_LOG:-}" ]; then
		echo "$1: $2" >>"$PF_SKIP_LOG"
	fi
}

pf_done() {
	if [ $PF_FAILURES -ne 0 ]; then
		echo "$PF_FAILURES check(s) failed"
		exit 1
	fi
}
