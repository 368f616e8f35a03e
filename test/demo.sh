#!/bin/bash
# make demo: the whole pipeline on this machine, end to end.
#
# Starts a throwaway PostgreSQL cluster (payflow + pg_cron, purge scheduled
# through payflow.schedule_purge), the local SQS/S3 emulator with its queues
# and DLQs, the legacy DBMS fixture (reached through psqlODBC), the invoice
# API stand-in, the relay and the workers; submits payments with transient
# faults and one permanent fault injected; shows live progress until every
# operation has settled; prints a summary; stops everything.
#
#   make demo                 # as root on a fresh Debian 12 machine
#   make demo KEEP=1          # leave the stack running, print how to use it
#   make demo PAYMENTS=500
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

PAYMENTS=${PAYMENTS:-300}
KEEP=${KEEP:-0}
export PF_PGPORT=${PF_DEMO_PGPORT:-54359}
export PF_CLUSTER_DIR=/tmp/payflow-demo-cluster
RUN=$REPO/.cache/run/demo
export PAYFLOW_EMULATOR_PORT=${PAYFLOW_DEMO_EMULATOR_PORT:-4600}
export PAYFLOW_EMULATOR_BACKEND_PORT=$((PAYFLOW_EMULATOR_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$RUN/emulator
INVOICE_PORT=${PAYFLOW_DEMO_INVOICE_PORT:-4590}

source test/lib/deps.sh
source test/lib/cluster.sh
source test/lib/proc.sh

say() { printf '\033[1m%s\033[0m\n' "$*"; }
q() { pf_psql -Atq "$@"; }

PIDS=()
stop_all() {
	local pid
	pf_kill_ours TERM "${PIDS[@]}"
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	pf_cluster_destroy
}

say "== installing and building"
pf_install_deps
make -s >/dev/null && make -s install >/dev/null
make -s -C workers >/dev/null
mkdir -p "$RUN"

say "== starting PostgreSQL 15 with payflow and pg_cron (port $PF_PGPORT)"
pf_cluster_destroy
if [ "$KEEP" != 1 ]; then trap stop_all EXIT; fi
pf_cluster_start
echo "purge scheduled with pg_cron: job $(q -c "SELECT payflow.schedule_purge('*/5 * * * *')")"
# short retries so the demo's transient faults resolve in seconds, not minutes
q -c "ALTER SYSTEM SET payflow.retry_base_delay = '1s'" -c "ALTER SYSTEM SET payflow.retry_max_delay = '5s'" \
	-c "SELECT pg_reload_conf()" >/dev/null

say "== starting the SQS/S3 emulator behind a SigV4-checking front (port $PAYFLOW_EMULATOR_PORT)"
eval "$(test/emulator/start.sh 2>"$RUN/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
echo "queues: $(echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed 's/=.*//' | tr '\n' ' ')(each with a DLQ)"

say "== starting the legacy DBMS fixture (database legacy, through psqlODBC)"
export PAYFLOW_LEGACY_ODBC
PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh --reset)
export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$PF_DB"
export PAYFLOW_LOG_LEVEL=${PAYFLOW_LOG_LEVEL:-info}

if [ -x test/fixtures/invoice-api/start.sh ]; then
	say "== starting the invoice API stand-in (port $INVOICE_PORT)"
	PAYFLOW_INVOICE_API_PORT=$INVOICE_PORT test/fixtures/invoice-api/start.sh >/dev/null
fi

start_process() {
	local name=$1
	shift
	"$@" >"$RUN/$name.log" 2>&1 &
	PIDS+=($!)
	echo "$name: pid $!"
}

say "== starting the edge processes"
start_process relay workers/bin/payflow-relay
queue_of() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
ROLES=""
if [ -x workers/bin/payflow-worker ]; then
	for role in payment postprocess invoice; do
		queue=payment-requests
		[ $role = postprocess ] && queue=payment-completed
		[ $role = invoice ] && queue=invoice-requests
		if workers/bin/payflow-worker --role "$role" --check-role >/dev/null 2>&1; then
			PAYFLOW_QUEUE_URL=$(queue_of $queue) PAYFLOW_WORKER_ID=demo-$role PAYFLOW_CONCURRENCY=16 \
				PAYFLOW_VISIBILITY_TIMEOUT=30 \
				PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)' \
				PAYFLOW_INVOICE_URL=http://127.0.0.1:$INVOICE_PORT/invoices \
				PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)' \
				start_process "worker-$role" workers/bin/payflow-worker --role "$role"
			ROLES="$ROLES $role"
		fi
	done
fi
# The step the demo waits for: the last one whose role runs here.
case "$ROLES" in
	*invoice*) FINAL=COMPLETED ;;
	*postprocess*) FINAL=INVOICE_PENDING ;;
	*payment*) FINAL=PAYMENT_COMPLETED ;;
	*) FINAL=PENDING ;;
esac
[ "$FINAL" = COMPLETED ] || echo "note: roles running:${ROLES:- none}; operations settle at $FINAL in this build"

say "== submitting $PAYMENTS payments"
# Faults: transient ones in the legacy DBMS (retried with backoff) and in
# the invoice API (503, retried), and one permanent rejection (card declined).
RETRIED=demo-7
DECLINED=demo-13
pf_psql -d legacy -Atq -c "SELECT set_fault('transient', payment_id => '$RETRIED', count => 2)" \
	-c "SELECT set_fault('transient', payment_id => 'demo-11', count => 1)" \
	-c "SELECT set_fault('permanent', payment_id => '$DECLINED', count => 1)" >/dev/null
curl -fsS -X POST -H 'Content-Type: application/json' -d '{"mode":"status","status":503,"count":3}' \
	"http://127.0.0.1:$INVOICE_PORT/_faults" >/dev/null || echo "note: could not inject invoice API faults"
START=$(date +%s.%N)
for batch in $(seq 0 9); do
	q -c "SELECT count(payflow.submit('demo-' || n,
			jsonb_build_object('amount', 100 + n, 'currency', 'EUR', 'customer', 'C-' || (n % 17)),
			correlation_id => 'demo-req-' || n))
		  FROM generate_series($((batch * PAYMENTS / 10 + 1)), $(((batch + 1) * PAYMENTS / 10))) n" >/dev/null
done

settled_sql="SELECT count(*) FILTER (WHERE status IN ('$FINAL', 'COMPLETED', 'FAILED', 'CANCELLED')) FROM payflow.operations"
bar() {
	local done=$1 total=$2 width=40
	local filled=$((done * width / total))
	printf '[%s%s] %3d%%' "$(printf '#%.0s' $(seq 1 $filled) 2>/dev/null)" \
		"$(printf '.%.0s' $(seq 1 $((width - filled))) 2>/dev/null)" $((done * 100 / total))
}
say "== progress (operations per status)"
deadline=$((SECONDS + ${DEMO_TIMEOUT:-300}))
while :; do
	line=$(q -c "SELECT string_agg(status || ' ' || n, '  ' ORDER BY status) FROM (SELECT status, count(*) n FROM payflow.operations GROUP BY 1) s")
	settled=$(q -c "$settled_sql")
	printf '\r%s  %-90s' "$(bar "$settled" "$PAYMENTS")" "$line"
	[ "$settled" -ge "$PAYMENTS" ] && break
	if [ $SECONDS -ge $deadline ]; then echo; echo "demo: not settled after ${DEMO_TIMEOUT:-300}s"; break; fi
	sleep 0.5
done
echo
ELAPSED=$(awk -v s="$START" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

say "== summary"
q -F ' ' <<-SQL
	SELECT 'operations submitted:      ' || count(*) FROM payflow.operations;
	SELECT 'settled at $FINAL:' || repeat(' ', greatest(1, 9 - length('$FINAL'))) || count(*) FILTER (WHERE status = '$FINAL' OR status = 'COMPLETED') FROM payflow.operations;
	SELECT 'failed:                    ' || count(*) FILTER (WHERE status = 'FAILED') FROM payflow.operations;
	SELECT 'throughput:                ' || round($PAYMENTS / $ELAPSED, 1) || ' operations/s over ${ELAPSED}s';
	WITH t AS (SELECT o.id, extract(epoch FROM h.at - o.created_at) AS s
				 FROM payflow.operations o JOIN payflow.operation_history h ON h.operation_id = o.id AND h.to_status = '$FINAL')
	SELECT 'submit to $FINAL:' || repeat(' ', greatest(1, 9 - length('$FINAL'))) || 'p50 ' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY s)::numeric, 3)
		   || ' s, p95 ' || round(percentile_cont(0.95) WITHIN GROUP (ORDER BY s)::numeric, 3) || ' s' FROM t;
	SELECT 'retries:                   ' || coalesce(sum(greatest(attempt - 1, 0)), 0) FROM payflow.steps;
	SELECT 'dead letters:              ' || count(*) FROM payflow.dead_letters;
	SQL
if [ -n "$ROLES" ]; then
	echo "legacy charges:            $(pf_psql -d legacy -Atqc "SELECT charge_count()") (duplicates: $(pf_psql -d legacy -Atqc "SELECT count(*) FROM duplicate_charges()"))"
	echo "invoices:                  $(curl -fsS "http://127.0.0.1:$INVOICE_PORT/_stats" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);console.log(j.invoices+" (replays answered: "+j.duplicatesAvoided+")")})')"
fi

say "== payflow.status() of the declined payment ($DECLINED)"
q -c "SELECT jsonb_pretty(payflow.status(id)) FROM payflow.operations WHERE payment_id = '$DECLINED'"
pf_psql -c "SELECT source, step_name, error ->> 'code' AS code, error ->> 'message' AS message, attempts FROM payflow.dead_letters"
say "== payflow.history() of a payment whose legacy call failed twice ($RETRIED)"
pf_psql -c "SELECT at, from_status, to_status, reason, actor FROM payflow.history((SELECT id FROM payflow.operations WHERE payment_id = '$RETRIED'))"
pf_psql -c "SELECT step_name, status, attempt AS attempts, last_error FROM payflow.steps WHERE operation_id = (SELECT id FROM payflow.operations WHERE payment_id = '$RETRIED') ORDER BY created_at"
say "== payflow.metrics()"
q -c "SELECT jsonb_pretty(payflow.metrics())"

if [ "$KEEP" = 1 ]; then
	say "== the stack keeps running"
	cat <<-EOF
	psql:      psql -h $PGHOST -p $PF_PGPORT -U postgres $PF_DB
	submit:    SELECT payflow.submit('my-payment', '{"amount": 10, "currency": "EUR"}');
	queues:    $PAYFLOW_QUEUE_URLS
	logs:      $RUN/*.log
	stop:      kill ${PIDS[*]}; test/fixtures/invoice-api/stop.sh; PAYFLOW_EMULATOR_RUN_DIR=$RUN/emulator test/emulator/stop.sh; \\
	           PF_PGPORT=$PF_PGPORT PF_CLUSTER_DIR=$PF_CLUSTER_DIR bash -c 'source test/lib/cluster.sh; pf_cluster_destroy'
	EOF
fi
