#!/bin/bash
# The "payflow scheduler" background worker, with payflow preloaded: it runs
# run_scheduler() by itself (a due retry is re-emitted without anyone
# calling it), wakes LISTENing relays after commits that wrote the outbox,
# and purge is scheduled through pg_cron.  Then the SQL API without
# preloading, on a second cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh

q() { pf_psql -Atq "$@"; }

# purge through pg_cron: schedule first, check the run at the end (pg_cron
# 1.4 schedules by the minute)
job=$(q -c "SELECT payflow.schedule_purge('* * * * *')")
pf_eq "schedule_purge registers a pg_cron job" \
	"payflow-purge|SELECT payflow.purge()|$PF_DB" \
	"$(q -c "SELECT jobname, command, database FROM cron.job WHERE jobid = $job")"
pf_eq "scheduling again replaces the job" "$job" "$(q -c "SELECT payflow.schedule_purge('* * * * *')")"

scheduler_running() {
	[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'payflow scheduler' AND datname = '$PF_DB'")" = 1 ]
}
pf_ok "the scheduler worker runs in database $PF_DB" pf_wait_for 15 scheduler_running

# a due retry is re-emitted by the worker alone
q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '1 second' WHERE step_name = 'PROCESS_PAYMENT'"
op=$(q -c "SELECT payflow.submit('bgw-1-$$', '{\"amount\": 1}')")
q -c "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'bgw-test')" >/dev/null
q -c "SELECT payflow.fail_step('$op', 'PROCESS_PAYMENT', 'bgw-test', '{\"code\": \"HYT00\"}', true)" >/dev/null
reemitted() {
	[ "$(q -c "SELECT count(*) FROM payflow.outbox WHERE operation_id = '$op' AND (body->>'attempt')::int = 2")" = 1 ]
}
pf_ok "the worker re-emits a due retry by itself" pf_wait_for 20 reemitted
pf_eq "the step waits for its next claim" "PENDING" "$(q -c "SELECT status FROM payflow.steps WHERE operation_id = '$op'")"
q -c "UPDATE payflow.step_definitions SET retry_base_delay = NULL, retry_max_delay = NULL"

# an expired lease is handled by the worker too (a worker died)
op2=$(q -c "SELECT payflow.submit('bgw-2-$$', '{\"amount\": 2}')")
q -c "SELECT payflow.claim_step('$op2', 'PROCESS_PAYMENT', 'dies', 1)" >/dev/null
requeued() {
	[ "$(q -c "SELECT status || ':' || (last_error->>'code') FROM payflow.steps WHERE operation_id = '$op2'")" = "PENDING:lease_expired" ]
}
pf_ok "the worker requeues a step whose lease expired" pf_wait_for 20 requeued

# relays are woken by one NOTIFY from the worker, not by the writers
listen_out=$(mktemp)
( printf 'LISTEN payflow_outbox;\nSELECT pg_sleep(3);\n' | pf_psql -q >"$listen_out" 2>&1 ) &
listener=$!
sleep 1
q -c "SELECT payflow.submit('bgw-3-$$', '{\"amount\": 3}')" >/dev/null
wait $listener
pf_ok "a commit that wrote the outbox wakes LISTENing relays" \
	grep -q 'Asynchronous notification "payflow_outbox" received' "$listen_out"
rm -f "$listen_out"

# event streams are woken the same way after a status change
op3=$(q -c "SELECT payflow.submit('bgw-4-$$', '{\"amount\": 4}')")
listen_out=$(mktemp)
( printf 'LISTEN payflow_status;\nSELECT pg_sleep(3);\n' | pf_psql -q >"$listen_out" 2>&1 ) &
listener=$!
sleep 1
q -c "SELECT payflow.claim_step('$op3', 'PROCESS_PAYMENT', 'bgw-test')" >/dev/null
wait $listener
pf_ok "a commit that changed a status wakes LISTENing event streams" \
	grep -q 'Asynchronous notification "payflow_status" received' "$listen_out"
rm -f "$listen_out"

# Each wake-up comes from the commit itself (the worker's latch), not from
# its next pass: with passes a minute apart, two commits 1.5 s apart each
# get their NOTIFY within the listener's 4 s.  The second shows that the
# first NOTIFY re-armed the wake-up (the first commit after a NOTIFY sets
# the latch; later ones before the next NOTIFY leave the worker asleep).
naptime_reset() { q -c "ALTER SYSTEM RESET payflow.scheduler_naptime" -c "SELECT pg_reload_conf()" >/dev/null; }
trap naptime_reset EXIT
q -c "ALTER SYSTEM SET payflow.scheduler_naptime = '60s'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1.5	# the pass due under the old naptime, then the next a minute later
listen_out=$(mktemp)
( printf 'LISTEN payflow_outbox;\nSELECT pg_sleep(4);\n' | pf_psql -q >"$listen_out" 2>&1 ) &
listener=$!
sleep 0.5
q -c "SELECT payflow.submit('bgw-5-$$', '{\"amount\": 5}')" >/dev/null
sleep 1.5
q -c "SELECT payflow.submit('bgw-6-$$', '{\"amount\": 6}')" -c "SELECT payflow.submit('bgw-7-$$', '{\"amount\": 7}')" >/dev/null
wait $listener
pf_ok "with passes a minute apart, two commits 1.5 s apart get a NOTIFY each" \
	test "$(grep -c 'Asynchronous notification "payflow_outbox" received' "$listen_out")" -ge 2
rm -f "$listen_out"
naptime_reset
trap - EXIT

pf_eq "submit itself sends no NOTIFY (the worker does)" "0" \
	"$(q -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'payflow'::regnamespace AND prosrc ~* 'notify'")"

# pg_cron's run details of payflow's jobs are pruned by purge
q -c "INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, command, status, return_message, start_time, end_time)
	  VALUES ($job, 900000001, 1, '$PF_DB', 'postgres', 'SELECT payflow.purge()', 'succeeded', '1 row', now() - interval '2 days', now() - interval '2 days')"
q -c "SELECT payflow.purge()" >/dev/null
pf_eq "purge prunes cron.job_run_details of payflow jobs" "0" \
	"$(q -c "SELECT count(*) FROM cron.job_run_details WHERE runid = 900000001")"

cron_ran() {
	[ "$(q -c "SELECT count(*) FROM cron.job_run_details WHERE jobid = $job AND status = 'succeeded'")" -ge 1 ]
}
pf_ok "pg_cron runs payflow.purge() on schedule" pf_wait_for 75 cron_ran
q -c "SELECT cron.unschedule('payflow-purge')" >/dev/null

# Without shared_preload_libraries: a second cluster, the SQL API only
(
	export PF_PGPORT=$((PF_PGPORT + 1))
	export PF_CLUSTER_DIR=/tmp/payflow-nopreload-$PF_PGPORT
	export PF_CLUSTER_EXTRA_CONF="shared_preload_libraries = ''"
	source test/lib/cluster.sh
	pf_cluster_destroy
	trap pf_cluster_destroy EXIT
	mkdir -p "$PF_CLUSTER_DIR/sock" && chown -R postgres:postgres "$PF_CLUSTER_DIR"
	pf_as_postgres "$PF_PGBIN/initdb" -D "$PF_CLUSTER_DIR/data" -U postgres --auth=trust >/dev/null
	printf "port = %s\nunix_socket_directories = '%s'\nlisten_addresses = ''\n" "$PF_PGPORT" "$PF_CLUSTER_DIR/sock" \
		>>"$PF_CLUSTER_DIR/data/postgresql.conf"
	pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$PF_CLUSTER_DIR/data" -l "$PF_CLUSTER_DIR/log" -w start >/dev/null
	pf_psql -d postgres -Atqc "CREATE EXTENSION payflow" >/dev/null
	op=$(pf_psql -d postgres -Atqc "SELECT payflow.submit('np-1', '{\"amount\": 1}')")
	pf_eq "without preloading: submit and claim work" "run" \
		"$(pf_psql -d postgres -Atqc "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'w') ->> 'action'")"
	pf_eq "without preloading: GUCs exist once the library is loaded" "5" \
		"$(pf_psql -d postgres -Atqc "SELECT payflow._setting('max_attempts')")"
	# a fresh session whose first payflow call is authenticate(): the library
	# loads there and the tenant still lasts exactly one transaction
	key=$(pf_psql -d postgres -Atqc "SELECT payflow.create_api_key('np-tenant')")
	pf_eq "without preloading: authenticate binds the tenant for its transaction" "np-tenant|" \
		"$(pf_psql -d postgres -Atq -c "BEGIN" -c "SELECT payflow.authenticate('$key')" -c "SELECT payflow.submit('np-2', '{}') IS NOT NULL" \
			-c "COMMIT" -c "SELECT payflow._current_tenant()" | sed -n '1p;3p' | paste -sd'|')"
	pf_eq "without preloading: ... and the operation is that tenant's" "np-tenant" \
		"$(pf_psql -d postgres -Atqc "SELECT tenant FROM payflow.operations WHERE payment_id = 'np-2'")"
	pf_eq "without preloading: no scheduler worker" "0" \
		"$(pf_psql -d postgres -Atqc "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'payflow scheduler'")"
	pf_done
) || PF_FAILURES=$((PF_FAILURES + 1))

pf_done
