# shellcheck shell=bash
# shellcheck disable=SC2034  # relay_pid, worker_pid, run: read by the tests that source it
# test/integration/failover_common.bash — what the failover tests share
# (named .bash so make check does not run it as a test).  Sourced after cd
# to the repository, with test/lib/cluster.sh, assert.sh and proc.sh.
#
# Three throwaway clusters of their own, on ports PF_PGPORT + 1200/1300/1400:
# the legacy DBMS (L: it outlives the failover, as a real one would),
# payflow's primary A, and B, A's streaming standby (pg_basebackup -R);
# the emulator on 4650/4651, the invoice API fixture on 4654; the whole
# pipeline (payflow-relay, the payment, post-processing and invoice
# workers, payflow-api on 4655), every program with the host list "A,B",
# started once.
#
#   a / b / legacy ARGS...    psql on A, B, the legacy database
#   submit FROM TO            payments $run-FROM … $run-TO through POST /payments;
#                             the ids returned appended to $work/ids (in order)
#   all_completed ON FROM TO  whether all of them are COMPLETED on a or b
#   charged FROM TO           whether the legacy DBMS charged each of them
#   invoices_once N           the invoice API made N invoices, none twice
#   programs_running          none of the five programs exited
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
	test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
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
# before the base backup, so B has them: the API's key, retries in a second
key=$(a -c "SELECT payflow.create_api_key('fo-tenant', 'failover')")
a -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'" >/dev/null
pf_standby_start "$A_DIR/sock" "$A_PORT" "$B_DIR" "$B_PORT"
pf_eq "B is A's standby" t "$(b -c 'SELECT pg_is_in_recovery()')"

# --- the whole pipeline, every program with the host list
export PAYFLOW_EMULATOR_PORT=4650 PAYFLOW_EMULATOR_BACKEND_PORT=4651 PAYFLOW_EMULATOR_RUN_DIR=$work/emulator
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$work/emulator-start.log")"
export PAYFLOW_INVOICE_API_PORT=4654 PAYFLOW_INVOICE_API_RUN_DIR=$work/invoice-api
eval "$(test/fixtures/invoice-api/start.sh 2>"$work/invoice-api-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
export PAYFLOW_LEGACY_ODBC PAYFLOW_INVOICE_URL
export PAYFLOW_DATABASE_URL="host=127.0.0.1,127.0.0.1 port=$A_PORT,$B_PORT user=postgres dbname=$PF_DB"
export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
export PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
export PAYFLOW_LOG_LEVEL=info PAYFLOW_VISIBILITY_TIMEOUT=4 PAYFLOW_POLL_INTERVAL_MS=200
queue_of() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
workers/bin/payflow-relay >"$work/relay.log" 2>&1 &
pids+=($!)
relay_pid=$!
worker_pids=()
for role in payment:payment-requests postprocess:payment-completed invoice:invoice-requests; do
	PAYFLOW_QUEUE_URL=$(queue_of "${role#*:}") PAYFLOW_WORKER_ID=fo-${role%%:*} \
		workers/bin/payflow-worker --role "${role%%:*}" >"$work/${role%%:*}.log" 2>&1 &
	pids+=($!)
	worker_pids+=($!)
done
PAYFLOW_LISTEN=127.0.0.1:4655 workers/bin/payflow-api 2>"$work/api.log" &
pids+=($!)
api_pid=$!
api_up() { curl -fsS -o /dev/null http://127.0.0.1:4655/healthz; }
pf_ok "payflow-api answers" pf_wait_for 20 api_up

# programs_running: the relay, the three workers and the API, none restarted
programs_running() { kill -0 "$relay_pid" "${worker_pids[@]}" "$api_pid"; }

# submit FROM TO: payments $run-FROM … $run-TO through POST /payments (to
# whichever database the API is connected to); the ids it returned are
# appended to $work/ids, one a line, in order
submit() {
	local g
	for g in $(seq "$1" "$2"); do
		curl -fsS -X POST http://127.0.0.1:4655/payments -H "Authorization: Bearer $key" \
			-H 'Content-Type: application/json' \
			-d "{\"paymentId\": \"$run-$g\", \"details\": {\"amount\": 5, \"currency\": \"EUR\"}}" |
			jq -r .operationId >>"$work/ids"
	done
}
completed() {	# completed ON FROM TO: how many of those payments are COMPLETED there
	"$1" -c "SELECT count(*) FROM payflow.operations WHERE status = 'COMPLETED'
			  AND payment_id IN (SELECT '$run-' || g FROM generate_series($2, $3) g)"
}
all_completed() { [ "$(completed "$1" "$2" "$3")" = $(($3 - $2 + 1)) ]; }
charged() { [ "$(legacy -c "SELECT count(*) FROM charges WHERE payment_id IN (SELECT '$run-' || g FROM generate_series($1, $2) g)")" = $(($2 - $1 + 1)) ]; }
# invoices_once N: the invoice API made exactly N invoices, none twice for a key
invoices_once() {
	[ "$(curl -fsS "http://127.0.0.1:$PAYFLOW_INVOICE_API_PORT/_invoices" | jq '[.invoices[].idempotencyKey] | [length, (unique | length)] | map(tostring) | join("|")' -r)" = "$1|$1" ]
}

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
