#!/bin/bash
# A partition that purge cannot make or drop, for a lock another session
# holds past purge's lock_timeout, is counted "busy" and left for the next
# call (partitions.sql).  The server log then says who holds the lock: pid,
# application, lock mode and transaction start, never the holder's query
# (it may hold a payment's details), so that an operator can tell a long
# report or a stuck transaction from autovacuum.
#
# Checked in a scratch database with a day of step_results long past
# retention, its partition empty, and a session holding ACCESS SHARE on
# payflow.step_results: purge answers busy, and its LOG line (sent to the
# client here) names that session's pid, application and lock mode and not
# its query's text; once the lock is gone, the next purge drops the day,
# none busy.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh

db=pf_purge_busy
work=$(mktemp -d)
holder=
cleanup() {
	[ -z "$holder" ] || kill "$holder" 2>/dev/null || true
	rm -rf "$work"
	pf_scratch_db_drop "$db"
}
trap cleanup EXIT
pf_scratch_db "$db"
old_day=$(pf_psql -d "$db" -Atqc "SELECT to_char(current_date - 30, 'YYYYMMDD')")
pf_eq "a day of step_results thirty days ago, empty" "t" \
	"$(pf_psql -d "$db" -Atqc "SELECT payflow._make_day_partition(p.parent, p.key_prefix, current_date - 30)
								 FROM payflow._day_partitioned() p WHERE p.parent = 'step_results'")"

marker="pf-purge-busy-query-text"
PGAPPNAME=pf-busy-holder pf_psql -d "$db" -Atq -c "BEGIN" -c "LOCK TABLE payflow.step_results IN ACCESS SHARE MODE" \
	-c "SELECT '$marker', pg_sleep(60)" >/dev/null 2>&1 &
holder=$!
holder_pid=""
for _ in $(seq 1 100); do
	holder_pid=$(pf_psql -d "$db" -Atqc "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.application_name = 'pf-busy-holder' AND l.relation = 'payflow.step_results'::regclass
		  AND l.mode = 'AccessShareLock' AND l.granted")
	[ -z "$holder_pid" ] || break
	sleep 0.1
done
pf_ok "a session holds ACCESS SHARE on payflow.step_results (as a report reading it does) (pid ${holder_pid:-none})" test -n "$holder_pid"

pf_psql -d "$db" -Atq -c "SET client_min_messages = log" \
	-c "SELECT 'busy=' || (p -> 'partitions' ->> 'busy') FROM payflow.purge() p" >"$work/purge.out" 2>&1 || true
pf_ok "purge counts what the lock put off as busy ($(grep -o 'busy=[0-9]*' "$work/purge.out" || echo none))" \
	grep -Eq '^busy=[1-9]' "$work/purge.out"
pf_ok "its LOG line names the partition purge could not drop" \
	grep -q "payflow.purge: dropping step_results_d$old_day busy, left for the next call" "$work/purge.out"
pf_ok "... and the session that holds the lock: its pid, application and lock mode" \
	grep -q "pid $holder_pid (pf-busy-holder, AccessShareLock, transaction since " "$work/purge.out"
pf_eq "... and not that session's query" "0" "$(grep -c "$marker" "$work/purge.out" || true)"

pf_psql -d "$db" -qc "SELECT pg_terminate_backend($holder_pid)" >/dev/null 2>&1 || true
wait "$holder" 2>/dev/null || true
holder=
pf_eq "with the lock gone, the next purge drops the day, none busy" "0|true" \
	"$(pf_psql -d "$db" -Atqc "SELECT (p -> 'partitions' ->> 'busy') || '|' || ((p -> 'partitions' ->> 'dropped')::int > 0)
								 FROM payflow.purge() p")"
pf_eq "... and its partition is gone" "0" \
	"$(pf_psql -d "$db" -Atqc "SELECT count(*) FROM pg_class WHERE relname = 'step_results_d$old_day'")"
pf_done
