#!/bin/bash
# run_scheduler_for (what pg_cron older than 1.5 runs once a minute, the
# C-free flavour's scheduler on Debian 12) does not hold the database's
# xmin horizon back while it naps.
#
# It once slept its whole nap (a second) in one statement after a COMMIT:
# the snapshot of that transaction kept the xmin of its session fixed for
# the second, every second, and the rows the relay acked meanwhile could be
# neither pruned nor skipped by the outbox claim.  Now it sleeps in slices
# of 50 ms, each its own transaction.
#
# Checked: while the procedure runs, another session commits a transaction
# that takes an xid every 100 ms and reads the procedure session's
# backend_xmin each time.  A session that keeps one snapshot shows the same
# xmin for about ten readings in a row (a nap); one that takes a fresh
# snapshot every 50 ms shows a new one (or none) nearly every time.  No
# timing is measured: only whether the horizon moves.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh

db=pf_sched_horizon
work=$(mktemp -d)
call_pid=
cleanup() {
	[ -z "$call_pid" ] || kill "$call_pid" 2>/dev/null || true
	rm -rf "$work"
	pf_scratch_db_drop "$db"
}
trap cleanup EXIT
pf_scratch_db "$db"

# twelve seconds of passes, a nap of payflow.scheduler_naptime (1 s) between them:
# the readings below take three, or more on a loaded machine (make check runs
# tests side by side), and must all fall inside
PGAPPNAME=pf-horizon-check pf_psql -d "$db" -qc "CALL payflow.run_scheduler_for(12)" >"$work/call.out" 2>&1 &
call_pid=$!
started() { [ -n "$(pf_psql -d "$db" -Atqc "SELECT pid FROM pg_stat_activity WHERE application_name = 'pf-horizon-check'")" ]; }
pf_ok "run_scheduler_for is running" pf_wait_for 10 started
sleep 0.5

# 30 readings, 100 ms apart, each right after a committed xid (the
# notices carry them; psql prints them on stderr)
pf_psql -d "$db" -Atq 2>&1 >/dev/null <<-'SQL' | sed -n 's/.*NOTICE:  xmin //p' >"$work/readings.txt"
	DO $$
	BEGIN
		FOR i IN 1..30 LOOP
			PERFORM pg_sleep(0.1);
			COMMIT;
			PERFORM txid_current();
			COMMIT;
			-- "gone" when the procedure's session has ended, "-" between its transactions
			RAISE NOTICE 'xmin %', coalesce((SELECT coalesce(backend_xmin::text, '-') FROM pg_stat_activity
											  WHERE application_name = 'pf-horizon-check'), 'gone');
			COMMIT;
		END LOOP;
	END
	$$;
	SQL
readings=$(wc -l <"$work/readings.txt")
# a reading that shows the same xmin as the one before: the snapshot was kept
kept=$(awk '$1 != "-" && $1 != "gone" && $1 == prev { n++ } { prev = $1 } END { print n + 0 }' "$work/readings.txt")
held=$(grep -cv '^-$\|^gone$' "$work/readings.txt" || true)
echo "# $readings readings of the procedure's backend_xmin: $held with one, $kept the same as the reading before"
pf_eq "30 readings taken while the procedure ran" 30 "$readings"
pf_eq "the procedure's session lived through all of them" 0 "$(grep -c '^gone$' "$work/readings.txt" || true)"
# asleep in a slice, it holds that slice's snapshot: most readings see one
pf_ok "the procedure takes snapshots as it goes ($held of 30 readings saw one)" test "$held" -ge 10
pf_ok "the procedure's xmin moves while it naps ($kept of 29 readings kept the one before; one snapshot a nap keeps ~27)" \
	test "$kept" -le 8
call_status=0
wait "$call_pid" || call_status=$?
call_pid=
pf_eq "run_scheduler_for(12) returns" 0 "$call_status"
pf_done
