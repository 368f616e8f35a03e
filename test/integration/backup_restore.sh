#!/bin/bash
# A backup that restores: pg_dump -Fc of a database running payflow (the C
# extension) with operations in every state, pg_restore into a database of
# a second, new cluster, then every row and every history equal, sequences
# that go on after the restored rows, and the edge programs, started on the
# restored database, finishing its open operations with one charge each.
#
# Before 0.4.1 no table was marked with pg_extension_config_dump: such a
# dump held CREATE EXTENSION payflow and not one operation.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"
# shellcheck source=../lib/restored_rows.sh
source test/lib/restored_rows.sh

SRC=pf_backup_src
RESTORE_PORT=${PAYFLOW_TEST_RESTORE_PGPORT:-54372}
RESTORED=payflow_restored
work=$(mktemp -d /tmp/payflow-backup.XXXXXX)

# the restore's cluster: a subshell of its own settings (test/lib/cluster.sh)
in_restore_cluster() {
	(
		# the scheduler runs in payflow_scratch: nothing but the edge programs
		# changes the restored database between the restore and the comparison
		export PF_PGPORT=$RESTORE_PORT PF_CLUSTER_DIR=/tmp/payflow-cluster-$RESTORE_PORT PF_DB=payflow_scratch
		# shellcheck source=../lib/cluster.sh
		source test/lib/cluster.sh
		"$@"
	)
}
r() { in_restore_cluster pf_psql -d "$RESTORED" -Atq "$@"; }
s() { pf_psql -d "$SRC" -Atq "$@"; }

wk_init backup-restore "${PAYFLOW_TEST_EMULATOR_PORT:-4694}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4695}" 5
cleanup_backup() {
	in_restore_cluster pf_cluster_destroy >/dev/null 2>&1 || true
	pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $SRC" >/dev/null 2>&1 || true
	rm -rf "$work"
	wk_cleanup
}
trap cleanup_backup EXIT

# ---- a database with operations in every state
pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $SRC" -c "CREATE DATABASE $SRC" >/dev/null
s -c "CREATE EXTENSION payflow" >/dev/null
p=bk-$WK_RUN
submit() { s -c "SELECT payflow.submit('$p-$1', '{\"amount\": 12.50, \"currency\": \"EUR\"}')"; }
completed=$(submit completed)
failed=$(submit failed)
for step in PROCESS_PAYMENT POST_PROCESS CREATE_INVOICE; do
	s -c "SELECT payflow.claim_step('$completed', '$step', 'w-before', 30)" \
		-c "SELECT payflow.complete_step('$completed', '$step', 'w-before', '{\"charge_id\": \"ch-before\"}')" >/dev/null
done
s -c "SELECT payflow.claim_step('$failed', 'PROCESS_PAYMENT', 'w-before', 30)" \
	-c "SELECT payflow.fail_step('$failed', 'PROCESS_PAYMENT', 'w-before', '{\"code\": \"card_declined\"}', false)" >/dev/null
# their events relayed (the published log, operation_events), a webhook delivery that failed
# (a claim takes one event per message group, a payment's events one after the other)
relayed=()
for _ in 1 2 3 4 5; do
	relayed+=(-c "INSERT INTO claimed SELECT *, false FROM payflow.outbox_claim(1000, 'relay-before', 30)"
		-c "SELECT payflow.outbox_ack(array_agg(event_id), array_agg('msg-' || event_id), 'relay-before')
			  FROM claimed WHERE NOT acked HAVING count(*) > 0"
		-c "UPDATE claimed SET acked = true")
done
s -c "CREATE TEMP TABLE claimed AS SELECT *, false AS acked FROM payflow.outbox_claim(1, 'relay-before', 30) WITH NO DATA" \
	"${relayed[@]}" \
	-c "SELECT payflow.record_webhook_failure(event_id, '$failed', body, 5, '{\"code\": \"timeout\"}')
		  FROM claimed WHERE destination = 'operation-events' AND strpos(body, '$failed') > 0" >/dev/null
pf_eq "the outbox is empty: every event so far relayed" 0 "$(s -c "SELECT count(*) FROM payflow.outbox")"
# purge makes the days' partitions (extension/sql/partitions.sql), moving
# the rows so far into today's; they are no members of the extension, and
# the dump must keep them, rows and all
s -c "SELECT payflow.purge()" >/dev/null
pf_ok "today's partitions hold the rows so far" \
	test "$(s -c "SELECT count(*) FROM payflow.step_results WHERE tableoid::regclass::text ~ '_d[0-9]{8}$'")" -gt 0
pf_ok "... the outbox log's too" \
	test "$(s -c "SELECT count(*) FROM payflow.outbox_events WHERE tableoid::regclass::text ~ '_d[0-9]{8}$'")" -gt 0
pf_ok "... and the next hour's partition of the published batches is made" \
	test "$(s -c "SELECT count(*) FROM payflow._hour_partitions() WHERE hour > now()")" -eq 1
pending=$(submit pending)
running=$(submit running)
retrying=$(submit retrying)
# a lease that has run out by the time the restored database runs
s -c "SELECT payflow.claim_step('$running', 'PROCESS_PAYMENT', 'w-before', 3)" >/dev/null
s -c "SELECT payflow.claim_step('$retrying', 'PROCESS_PAYMENT', 'w-before', 30)" \
	-c "SELECT payflow.fail_step('$retrying', 'PROCESS_PAYMENT', 'w-before', '{\"code\": \"timeout\"}', true)" >/dev/null
s -c "SELECT payflow.record_dead_letter('payment-requests', 'not json', '{\"code\": \"bad_message\"}')" >/dev/null
s -c "SELECT payflow.create_api_key('tenant-a', 'shop backend')" -c "SELECT payflow.create_admin_key('ops')" \
	-c "SELECT payflow.set_webhook('tenant-a', 'https://hooks.example.test/payflow')" >/dev/null
# a pipeline version of the operator's own (the seeded version 1 is the install's)
s -c "SELECT payflow.add_destination('fraud-requests', 'risk checks')" \
	-c "SELECT payflow.add_step('NOTIFY_CUSTOMER', 'NotifyCustomerRequested', 'fraud-requests',
		after_step => 'CREATE_INVOICE', ready_status => 'NOTIFY_PENDING', running_status => 'NOTIFYING')" >/dev/null
pf_eq "the source holds operations in five states" "COMPLETED FAILED PAYMENT_PROCESSING PENDING RETRY_WAIT" \
	"$(s -c "SELECT string_agg(st, ' ' ORDER BY st) FROM (
		SELECT DISTINCT CASE WHEN s.status = 'RETRY_WAIT' THEN 'RETRY_WAIT' ELSE o.status END AS st
		  FROM payflow.operations o JOIN payflow.steps s ON s.operation_id = o.id AND s.step_name = o.current_step) x")"
pf_ok "... with a dead letter of each kind" test "$(s -c "SELECT count(DISTINCT source) FROM payflow.dead_letters")" = 2
pf_ok "... a failed webhook delivery and published events" \
	test "$(s -c "SELECT (SELECT count(*) FROM payflow.webhook_failures) * (SELECT count(*) FROM payflow.outbox_published)")" -gt 0

# ---- dump, and restore into a new cluster
"$PF_PGBIN/pg_dump" -h "$PGHOST" -p "$PGPORT" -U postgres -Fc -f "$work/payflow.dump" "$SRC"
pf_ok "the dump holds the operations' rows" \
	sh -c "'$PF_PGBIN/pg_restore' -f - --data-only '$work/payflow.dump' | grep -q '$p-pending'"
in_restore_cluster pf_cluster_destroy >/dev/null 2>&1 || true
in_restore_cluster pf_cluster_start
in_restore_cluster pf_psql -d postgres -qc "CREATE DATABASE $RESTORED" >/dev/null
pf_ok "pg_restore into a new database of a new cluster" \
	in_restore_cluster "$PF_PGBIN/pg_restore" -U postgres --exit-on-error -d "$RESTORED" "$work/payflow.dump"

# ---- every row the same
pf_same_restored_rows "" s r
pf_eq "the partitions are restored, attached to their tables" \
	"$(s -c "SELECT string_agg(name, ' ' ORDER BY name) FROM (SELECT name FROM payflow._day_partitions()
			 UNION ALL SELECT name FROM payflow._hour_partitions()) p")" \
	"$(r -c "SELECT string_agg(name, ' ' ORDER BY name) FROM (SELECT name FROM payflow._day_partitions()
			 UNION ALL SELECT name FROM payflow._hour_partitions()) p")"
before=$(r -c "SELECT max(id) FROM payflow.dead_letters")
after=$(r -c "SELECT payflow.record_dead_letter('payment-requests', 'after the restore', '{\"code\": \"bad_message\"}')")
pf_ok "the sequences go on after the restored rows ($after > $before)" test "$after" -gt "$before"
pf_eq "the restored pipeline is the operator's version 2" 2 "$(r -c "SELECT max(version) FROM payflow.pipelines")"
pf_eq "the tenant's API key is restored, not revoked" t \
	"$(r -c "SELECT count(*) = 1 FROM payflow.api_keys WHERE tenant = 'tenant-a' AND revoked_at IS NULL")"
# a restore into a database that has payflow already is refused, and changes nothing
rows=$(r -c "SELECT count(*) FROM payflow.operations")
refused=0
in_restore_cluster "$PF_PGBIN/pg_restore" -U postgres --exit-on-error -d "$RESTORED" "$work/payflow.dump" \
	2>"$work/again.err" || refused=1
sed 's/^/# /' "$work/again.err" | head -n 3
pf_eq "a second restore into the same database is refused" 1 "$refused"
pf_eq "... and leaves its rows as they were" "$rows" "$(r -c "SELECT count(*) FROM payflow.operations")"

# ---- the edge programs finish the open operations on the restored database
export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$RESTORE_PORT/$RESTORED"
r -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'
	  WHERE step_name = 'PROCESS_PAYMENT'" >/dev/null
wk_start_relay
wk_start_worker restored
# the scheduler's passes, here by hand (the cluster's background worker runs
# in payflow_scratch): the retry comes due, the expired lease is requeued
(while :; do r -c "SELECT payflow.run_scheduler()" >/dev/null 2>&1 || true; sleep 0.5; done) &
scheduler_loop=$!
paid() {
	[ "$(r -c "SELECT count(*) FROM payflow.operations o JOIN payflow.steps s ON s.operation_id = o.id
			   WHERE o.id IN ('$pending', '$running', '$retrying') AND s.step_name = 'PROCESS_PAYMENT'
			     AND s.status = 'SUCCEEDED'")" = 3 ]
}
pf_ok "pending, running (lease expired) and retrying operations all get paid" pf_wait_for 90 paid
kill "$scheduler_loop" 2>/dev/null || true
wait "$scheduler_loop" 2>/dev/null || true
for op in "$pending" "$running" "$retrying"; do
	pf_eq "$op: charged exactly once" 1 "$(legacy -c "SELECT charge_count(payment_id) FROM (
		SELECT '$(r -c "SELECT payment_id FROM payflow.operations WHERE id = '$op'")' AS payment_id) x")"
done
pf_eq "the completed and the failed operation stay as they were" "COMPLETED FAILED" \
	"$(r -c "SELECT string_agg(status, ' ' ORDER BY status) FROM payflow.operations WHERE id IN ('$completed', '$failed')")"
pf_eq "duplicate_charges() is empty" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_done
