# shellcheck shell=bash
# shellcheck disable=SC2034  # relay_pid, worker_pid, run: read by the tests that source it
# test/integration/failover_common.bash — what the failover tests share
# (named .bash so make check does not run it as a test).  Sourced after cd
# to the repository, with test/lib/cluster.sh, assert.sh and proc.sh.
#
# Three throwaway clusters of their own, on ports PF_PGPORT + 1200/1300/1400:
# the legacy DBMS (L: it outlives the failover, as a real one would),
# payflow's primary A, and B, A's streaming standby (pg_basebackup -R);
# the emulator on 4650/4651; payflow-relay and a payment worker with the
# host list "A,B", started once.
#
#   a / b / legacy ARGS...    psql on A, B, the legacy database
#   submit ON FROM TO         payments $run-FROM … $run-TO on a or b; their
#                             ids appended to $work/ids (one a line, in order)
#   all_completed ON FROM TO  whether all of them are PAYMENT_COMPLETED there
#   charged FROM TO           whether the legacy DBMS charged each of them
#   cut_replication           B stops receiving WAL (and says so)
#   fail_over                 A crashes (immediate shutdown), B is promoted
#   reconcile_findings        payflow.reconcile() on B with the legacy
#                             charges and $work/ids: "finding payment-or-id"
#                             lines in $work/findings

base=$PF_PGPORT
L_PORT=$((base + 1200)) A_PORT=$((base + 1300)) B_PORT=$((base + 1400))
L_DIR=/tmp/payflow-fo-legacy-$L_PORT A_DIR=/tmp/payflow-fo-a-$A_PORT B_DIR=/tmp/payflow-fo-b-$B_PORT
work=$(mktemp -d /tmp/payflow-failover.XXXXXX)
run=fo$$
pids=()

# in_cluster PORT DIR CMD...: CMD with test/lib/cluster.sh pointed at that cluster
in_cluster() {
	local port=$1 dir=$2
	shift 2
	(
		export PF_PGPORT=$port PF_CLUSTER_DIR=$dir
		# shellcheck source=../lib/cluster.sh
		source test/lib/cluster.sh
		"$@"
	)
}
a() { in_cluster "$A_PORT" "$A_DIR" pf_psql -Atq "$@"; }
b() { in_cluster "$B_PORT" "$B_DIR" pf_psql -Atq "$@"; }
legacy() { in_cluster "$L_PORT" "$L_DIR" pf_psql -d legacy -Atq "$@"; }
pg_ctl_at() { pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$1/data" "${@:2}"; }

cleanup() {
	pf_kill_ours KILL "${pids[@]}"
	test/emulator/stop.sh >/dev/null 2>&1 || true
	pg_ctl_at "$B_DIR" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$B_DIR"
	in_cluster "$A_PORT" "$A_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
	in_cluster "$L_PORT" "$L_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# --- the clusters
in_cluster "$L_PORT" "$L_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
in_cluster "$A_PORT" "$A_DIR" pf_cluster_destroy >/dev/null 2>&1 || true
rm -rf "$B_DIR"
in_cluster "$L_PORT" "$L_DIR" pf_cluster_start
in_cluster "$A_PORT" "$A_DIR" pf_cluster_start
PAYFLOW_LEGACY_ODBC=$(in_cluster "$L_PORT" "$L_DIR" test/fixtures/legacy/setup.sh 2>"$work/legacy-setup.log")
mkdir -p "$B_DIR/sock"
chown -R postgres:postgres "$B_DIR"
pf_as_postgres "$PF_PGBIN/pg_basebackup" -h "$A_DIR/sock" -p "$A_PORT" -U postgres -D "$B_DIR/data" -R -X stream -c fast
pg_ctl_at "$B_DIR" -l "$B_DIR/postgres.log" -w -t 60 -o "-p $B_PORT -k $B_DIR/sock -c listen_addresses=127.0.0.1" start >/dev/null
pf_eq "B is A's standby" t "$(b -c 'SELECT pg_is_in_recovery()')"

# --- the edge programs, with the host list
export PAYFLOW_EMULATOR_PORT=4650 PAYFLOW_EMULATOR_BACKEND_PORT=4651 PAYFLOW_EMULATOR_RUN_DIR=$work/emulator
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$work/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS PAYFLOW_LEGACY_ODBC
export PAYFLOW_QUEUE_URL
PAYFLOW_QUEUE_URL=$(echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n 's/^payment-requests=//p')
export PAYFLOW_DATABASE_URL="host=127.0.0.1,127.0.0.1 port=$A_PORT,$B_PORT user=postgres dbname=$PF_DB"
export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
export PAYFLOW_LOG_LEVEL=info PAYFLOW_VISIBILITY_TIMEOUT=4 PAYFLOW_POLL_INTERVAL_MS=200
workers/bin/payflow-relay >"$work/relay.log" 2>&1 &
pids+=($!)
relay_pid=$!
PAYFLOW_WORKER_ID=fo-worker workers/bin/payflow-worker --role payment >"$work/worker.log" 2>&1 &
pids+=($!)
worker_pid=$!

# submit ON FROM TO: payments $run-FROM … $run-TO on cluster ON (a or b); their ids to $work/ids
submit() {
	"$1" -c "SELECT payflow.submit('$run-' || g, '{\"amount\": 5, \"currency\": \"EUR\"}'::jsonb)
			  FROM generate_series($2, $3) g" >>"$work/ids"
}
completed() {	# completed ON FROM TO: how many of those payments are PAYMENT_COMPLETED there
	"$1" -c "SELECT count(*) FROM payflow.operations WHERE status = 'PAYMENT_COMPLETED'
			  AND payment_id IN (SELECT '$run-' || g FROM generate_series($2, $3) g)"
}
all_completed() { [ "$(completed "$1" "$2" "$3")" = $(($3 - $2 + 1)) ]; }
charged() { [ "$(legacy -c "SELECT count(*) FROM charges WHERE payment_id IN (SELECT '$run-' || g FROM generate_series($1, $2) g)")" = $(($2 - $1 + 1)) ]; }

cut_replication() {
	b -c "ALTER SYSTEM SET primary_conninfo = ''" -c "SELECT pg_reload_conf()" >/dev/null
	not_receiving() { [ "$(b -c "SELECT count(*) FROM pg_stat_wal_receiver")" = 0 ]; }
	pf_ok "B stops receiving WAL" pf_wait_for 30 not_receiving
}

fail_over() {
	pg_ctl_at "$A_DIR" -m immediate stop >/dev/null
	pg_ctl_at "$B_DIR" -w -t 60 promote >/dev/null
	pf_eq "A crashed; B is the primary" f "$(b -c 'SELECT pg_is_in_recovery()')"
}

reconcile_findings() {
	legacy -c "SELECT coalesce(jsonb_agg(jsonb_build_object('idempotency_key', idempotency_key, 'payment_id', payment_id,
												 'charge_id', charge_id)), '[]') FROM charges" >"$work/charges.json"
	printf '%s\n' "SELECT finding || ' ' || coalesce(payment_id, operation_id)
				   FROM payflow.reconcile(:'charges'::jsonb, string_to_array(:'ids', ','))" |
		in_cluster "$B_PORT" "$B_DIR" pf_psql -Atq -v charges="$(cat "$work/charges.json")" \
			-v ids="$(paste -sd, "$work/ids")" >"$work/findings"
}
