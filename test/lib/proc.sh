# shellcheck shell=bash
# test/lib/proc.sh — signalling processes a test started.  Sourced.
#
# pf_kill_ours SIGNAL PID...   signal each PID that is still a child of this
#                              shell, and leave any other alone
#
# Why: a PID remembered from earlier may belong to a process that has exited
# and been reaped, and PIDs are recycled quickly (pid_max is 32768 on these
# machines, and a test run starts thousands of processes).  A blind kill -9
# at clean-up can then hit another test's emulator or, worse, a PostgreSQL
# backend, which makes the postmaster restart the whole cluster.  The
# processes tests start in the background are children of the test's own
# shell; a recycled PID almost never is.

pf_kill_ours() {
	local sig=$1 pid ppid
	shift
	for pid in "$@"; do
		ppid=$(awk '/^PPid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || continue
		[ "$ppid" = "$$" ] || continue
		kill "-$sig" "$pid" 2>/dev/null || true
	done
}
