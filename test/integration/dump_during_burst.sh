#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# A long pg_dump during a burst (issue 30): a real pg_dump -Fc of payflow's
# database is held open in the middle of its work (its output goes into a
# pipe nobody reads yet), with its snapshot and the ACCESS SHARE locks it
# takes on every table, while 200 payments are submitted, relayed, claimed
# and completed, and the scheduler and purge run.  Checked: every operation
# completes while the dump still runs (nothing in the hot path waits for
# the dump's locks or is slowed to a stop by its snapshot); purge and
# run_scheduler return within a statement time-out, purge leaving the old
# hour of published batches the dump holds to its next call, which drops
# it; then the dump finishes, and it holds the database as of its start:
# none of the burst.
#
# This is what a partition drop or any DDL in the hot path would break
# (ACCESS EXCLUSIVE waits for the dump, and everything else queues behind
# it), so it guards retention by partition (issue 25) too.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init dump-during-burst "${PAYFLOW_TEST_EMULATOR_PORT:-4648}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4649}" 5
p=ddb-$WK_RUN
dump_dir=$WK_DIR/dump
mkdir -p "$dump_dir"

# enough rows that the dump cannot fit in the pipe's buffer (64 KiB) and so
# stops, with its transaction open, until the reader starts
q -c "SELECT count(*) FROM payflow.submit_many((SELECT jsonb_agg(jsonb_build_object(
		'payment_id', '$p-old-' || g, 'details', jsonb_build_object('amount', g, 'currency', 'EUR', 'note', repeat('x', 200))))
		FROM generate_series(1, 1000) g))" >/dev/null
# (their requests are not part of the burst: no worker is to charge them)
q -c "DELETE FROM payflow.outbox WHERE message_group_id LIKE '$p-old-%'" >/dev/null
# an hour of published batches past retention_published, which purge drops
# whole (partitions.sql), once nothing holds it
q -c "SELECT payflow._make_hour_partition(now() - interval '3 hours')" \
	-c "INSERT INTO payflow.outbox_batches (published_at, first_seq, last_seq, seqs, message_ids)
		VALUES (now() - interval '3 hours', -1, -1, '{-1}', '{$p-old-batch}')" >/dev/null

# the dump, its output held back until $dump_dir/go exists
(
	set -o pipefail
	"$PF_PGBIN/pg_dump" -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -Fc -Z0 -d "$PF_DB" |
		{ while [ ! -e "$dump_dir/go" ]; do sleep 0.2; done; cat >"$dump_dir/payflow.dump"; }
	echo $? >"$dump_dir/rc"
) &
dump_job=$!
# its session: in the middle of its transaction, with its snapshot
dump_waits() {
	[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_dump'
				AND state IN ('active', 'idle in transaction') AND backend_xmin IS NOT NULL")" = 1 ]
}
pf_ok "pg_dump is in the middle of its dump, its output held back" pf_wait_for 30 dump_waits
dump_xmin=$(q -c "SELECT backend_xmin FROM pg_stat_activity WHERE application_name = 'pg_dump'")
pf_ok "... holding its snapshot (xmin $dump_xmin)" test -n "$dump_xmin"

# pg_dump locks each extension table only when it copies its rows, so the
# one above holds some of them yet; a second session holds what a dump
# holds by its end: ACCESS SHARE on every payflow table, in a repeatable
# read snapshot
"$PF_PGBIN/psql" -X -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$PF_DB" -q \
	-c "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" \
	-c "SET application_name = 'dump-locks'" \
	-c "DO \$\$ BEGIN EXECUTE (SELECT 'LOCK TABLE ' || string_agg(c.oid::regclass::text, ', ') || ' IN ACCESS SHARE MODE'
			 FROM pg_class c WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind IN ('r', 'p')); END \$\$" \
	-c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
locks_job=$!
all_locked() {
	[ "$(q -c "SELECT count(*) = (SELECT count(*) FROM pg_class WHERE relnamespace = 'payflow'::regnamespace AND relkind IN ('r', 'p'))
				FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid JOIN pg_class c ON c.oid = l.relation
				WHERE a.application_name = 'dump-locks' AND l.mode = 'AccessShareLock' AND l.granted
				  AND c.relnamespace = 'payflow'::regnamespace AND c.relkind IN ('r', 'p')")" = t ]
}
pf_ok "another session holds ACCESS SHARE on every payflow table, as a dump does by its end" pf_wait_for 30 all_locked

wk_start_relay
wk_start_worker a PAYFLOW_CONCURRENCY=16
for i in $(seq 1 200); do echo "$p-burst-$i"; done |
	jq -Rn '[inputs | {payment_id: ., details: {amount: 10, currency: "EUR"}}]' >"$WK_DIR/burst.json"
echo "SELECT count(*) FROM payflow.submit_many(:'burst'::jsonb)" | q -v burst="$(cat "$WK_DIR/burst.json")" >/dev/null
completed() { q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-burst-%' AND status = 'PAYMENT_COMPLETED'"; }
all_completed() { [ "$(completed)" = 200 ]; }
pf_ok "the 200 payments complete while the dump holds its snapshot and locks" pf_wait_for 120 all_completed
pf_ok "... the dump is still waiting (nothing waited for it to end)" dump_waits
pf_ok "run_scheduler returns meanwhile" q -c "SET statement_timeout = '10s'" -c "SELECT payflow.run_scheduler()"
pf_eq "purge returns meanwhile, leaving the old hour of batches the dump holds for later" "t 0" \
	"$(q -F ' ' -c "SET statement_timeout = '10s'" \
		-c "SELECT (p -> 'partitions' ->> 'busy')::int > 0, p -> 'partitions' -> 'publishedHours' ->> 'dropped'
			  FROM payflow.purge() p")"
pf_eq "no session of the pipeline waits for a lock" 0 \
	"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = '$PF_DB'")"

pf_ok "... and so does the session holding every table's lock" all_locked
q -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'dump-locks'" >/dev/null
wait "$locks_job" 2>/dev/null || true
touch "$dump_dir/go"
wait "$dump_job" || true
pf_eq "then the dump finishes" 0 "$(cat "$dump_dir/rc" 2>/dev/null || echo missing)"
pf_eq "... and the next purge drops the old hour of batches" 1 \
	"$(q -c "SELECT p -> 'partitions' -> 'publishedHours' ->> 'dropped' FROM payflow.purge() p")"
pf_eq "... its batch with it" 0 "$(q -c "SELECT count(*) FROM payflow.outbox_batches WHERE message_ids[1] = '$p-old-batch'")"
"$PF_PGBIN/pg_restore" -f "$dump_dir/operations.sql" --data-only -t operations "$dump_dir/payflow.dump"
pf_eq "it holds the operations written before it started" 1000 "$(grep -c -- "$p-old-" "$dump_dir/operations.sql" || true)"
pf_eq "... and none of the burst (one snapshot from its start)" 0 "$(grep -c -- "$p-burst-" "$dump_dir/operations.sql" || true)"

# the rows made for size are no one's work: ended, their events dropped
q -c "SELECT count(payflow.cancel(id, 'test data of dump_during_burst')) FROM payflow.operations
	  WHERE payment_id LIKE '$p-old-%' AND status = 'PENDING'" -c "DELETE FROM payflow.outbox WHERE message_group_id LIKE '$p-old-%'" >/dev/null
burst_ops=$(q -c "SELECT string_agg(id, ' ') FROM payflow.operations WHERE payment_id LIKE '$p-burst-%'")
# shellcheck disable=SC2086  # one operation id per word
wk_invariants $burst_ops
pf_done
