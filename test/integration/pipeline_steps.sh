#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# Steps added by SQL alone, run by the generic roles (issue 14):
#
#   RISK_CHECK       before PROCESS_PAYMENT, payflow-worker --role http
#                    --step RISK_CHECK against an idempotent HTTP service (a
#                    second invoice API stand-in, test/fixtures/invoice-api,
#                    which keeps one answer per Idempotency-Key)
#   NOTIFY_CUSTOMER  after CREATE_INVOICE, payflow-worker --role sql --step
#                    NOTIFY_CUSTOMER running notify.send(text,jsonb), a SQL
#                    function of this test, in the completing transaction
#
# with the shipped roles for the rest (payment over psqlODBC, postprocess
# with no hook setting, so the shipped payflow.default_postprocess, invoice)
# and the C relay, on a database of its own (add_step changes the newest
# pipeline of its database; the others' tests keep theirs). The test runs
# payflow.run_scheduler() itself every half second there (the scheduler
# background worker serves make check's database only). The HTTP step
# sends a bearer token from PAYFLOW_STEP_AUTHORIZATION: every call carries
# it, no log holds it.
#
# Faults fixed in advance: RISK_CHECK answers 503 twice for one payment
# (retried, third attempt done), 422 for another (permanent: FAILED at
# RISK_CHECK, never charged); NOTIFY_CUSTOMER raises for one operation
# (P0001, permanent: FAILED at NOTIFY_CUSTOMER after charge and invoice);
# a malformed message on the new step's queue ends in its DLQ and in
# payflow.dead_letters. Checks statuses and history (the new statuses in
# order), the events on the queues of the new steps, the Idempotency-Keys,
# retries, charges = invoices = notifications, one each, and that an
# operation submitted before the change finishes on its own pipeline
# version.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/proc.sh

N=${PIPELINE_STEPS_OPERATIONS:-40}
TIMEOUT=${PIPELINE_STEPS_TIMEOUT:-90}
EMU_PORT=${PIPELINE_STEPS_EMULATOR_PORT:-4701}
RISK_PORT=${PIPELINE_STEPS_RISK_PORT:-4703}
INV_PORT=${PIPELINE_STEPS_INVOICE_PORT:-4705}
DB=pf_pipeline_steps
RUN=$$
P=steps-$RUN
RISK_RETRIED=7
RISK_REFUSED=13
NOTIFY_REFUSED=21

DIR=$(mktemp -d /tmp/payflow-pipeline-steps.XXXXXX)
PIDS=()
q() { pf_psql -d "$DB" -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }
say() { printf '# %s\n' "$*"; }
cleanup() {
	local pid
	pf_kill_ours 9 "${PIDS[@]}"
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
		rm -f "/tmp/psqlodbc_payflow-worker_$(id -un)$pid.log"
	done
	PAYFLOW_INVOICE_API_RUN_DIR=$DIR/risk-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator test/emulator/stop.sh >/dev/null 2>&1 || true
	pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
	if [ "$PF_FAILURES" -ne 0 ]; then
		for f in "$DIR"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $(basename "$f") (last 25 lines)"
			tail -n 25 "$f" | cut -c1-400
		done
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT

for bin in payflow-worker payflow-relay; do
	[ -x "workers/bin/$bin" ] || { echo "not ok - workers/bin/$bin is missing (make -C workers)"; exit 1; }
done

# ---- a database of its own, and the steps added by SQL ----
pf_psql -d postgres -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null 2>&1
q -c "CREATE EXTENSION payflow CASCADE" >/dev/null
# retries in a second or two
q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'" >/dev/null

# one operation on the shipped pipeline, submitted before the change (and
# left waiting in PENDING until the workers run): it must finish on version 1
q -c "SELECT payflow.submit('$P-before', '{\"amount\": \"9.90\", \"currency\": \"EUR\"}')" >/dev/null

# the SQL step's work: record the notification once per operation
q >/dev/null <<'SQL'
CREATE SCHEMA notify;
CREATE TABLE notify.sent (operation_id text PRIMARY KEY, input jsonb NOT NULL, sent_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE notify.unreachable (operation_id text PRIMARY KEY);
CREATE FUNCTION notify.send(operation_id text, input jsonb) RETURNS jsonb
	LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT FROM notify.unreachable u WHERE u.operation_id = send.operation_id) THEN
		RAISE EXCEPTION 'customer of % cannot be reached', operation_id USING ERRCODE = 'P0001';
	END IF;
	INSERT INTO notify.sent (operation_id, input) VALUES (send.operation_id, input) ON CONFLICT DO NOTHING;
	RETURN jsonb_build_object('notified', true, 'channel', 'email');
END
$$;
SQL

v1=$(q -c "SELECT (payflow.pipeline() ->> 'version')")
q -c "SELECT payflow.add_destination('risk-requests', 'the risk service')" \
	-c "SELECT payflow.add_destination('notify-requests')" >/dev/null
v2=$(q -c "SELECT payflow.add_step('RISK_CHECK', 'RiskCheckRequested', 'risk-requests',
		before_step => 'PROCESS_PAYMENT', running_status => 'RISK_CHECKING', done_status => 'RISK_CHECKED',
		max_attempts => 4, retry_base_delay => '1 second', retry_max_delay => '2 seconds',
		note => 'pipeline_steps.sh')")
v3=$(q -c "SELECT payflow.add_step('NOTIFY_CUSTOMER', 'NotifyCustomerRequested', 'notify-requests',
		after_step => 'CREATE_INVOICE', ready_status => 'NOTIFY_PENDING', running_status => 'NOTIFYING',
		result_name => 'notification.json', retry_base_delay => '1 second', retry_max_delay => '2 seconds')")
pf_eq "two add_step calls made two new versions" "$((v1 + 1)) $((v1 + 2))" "$v2 $v3"
pf_eq "the newest pipeline: RISK_CHECK first, NOTIFY_CUSTOMER last" \
	"RISK_CHECK>PROCESS_PAYMENT>POST_PROCESS>CREATE_INVOICE>NOTIFY_CUSTOMER" \
	"$(q -c "SELECT string_agg(s ->> 'step', '>' ORDER BY (s ->> 'position')::int) FROM jsonb_array_elements(payflow.pipeline() -> 'steps') s")"

# ---- the stack ----
export PAYFLOW_EMULATOR_PORT=$EMU_PORT PAYFLOW_EMULATOR_BACKEND_PORT=$((EMU_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=3
export PAYFLOW_EMULATOR_EXTRA_QUEUES=risk-requests,notify-requests
eval "$(test/emulator/start.sh 2>"$DIR/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
queue_url() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
dlq_url() { echo "$PAYFLOW_DLQ_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
pf_ok "the emulator has the new steps' queues" test -n "$(queue_url risk-requests)" -a -n "$(queue_url notify-requests)"

stand_in() { # NAME PORT: an invoice API stand-in; prints its URL
	PAYFLOW_INVOICE_API_PORT=$2 PAYFLOW_INVOICE_API_RUN_DIR=$DIR/$1 test/fixtures/invoice-api/start.sh \
		2>"$DIR/$1-start.log" | sed -n 's/^export PAYFLOW_INVOICE_URL=//p'
}
api() { # PORT METHOD PATH [BODY]
	local args=(-fsS -X "$2" "http://127.0.0.1:$1$3")
	[ -z "${4:-}" ] || args+=(-H 'Content-Type: application/json' -d "$4")
	curl "${args[@]}"
}
RISK_URL=$(stand_in risk-api "$RISK_PORT")
INVOICE_URL=$(stand_in invoice-api "$INV_PORT")
api "$RISK_PORT" POST /_faults "{\"mode\": \"status\", \"status\": 503, \"count\": 2, \"match\": {\"customer\": \"C-$RISK_RETRIED\"}}" >/dev/null
api "$RISK_PORT" POST /_faults "{\"mode\": \"status\", \"status\": 422, \"count\": null, \"match\": {\"customer\": \"C-$RISK_REFUSED\"}}" >/dev/null

export PAYFLOW_LEGACY_ODBC
PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh 2>"$DIR/legacy-setup.log")
export PAYFLOW_DATABASE_URL="postgresql://postgres@127.0.0.1:$PF_PGPORT/$DB"
export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
export PAYFLOW_LOG_LEVEL=info PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_VISIBILITY_TIMEOUT=4 PAYFLOW_CONCURRENCY=4

start() { # NAME COMMAND...: in the background, log in $DIR/NAME.log
	local name=$1
	shift
	"$@" >"$DIR/$name.log" 2>&1 &
	PIDS+=($!)
	printf -v "PID_$name" '%s' "$!"
}
worker() { # NAME QUEUE ARGS...
	local name=$1 queue=$2
	shift 2
	PAYFLOW_QUEUE_URL=$(queue_url "$queue") PAYFLOW_WORKER_ID=steps-$name-$RUN start "$name" workers/bin/payflow-worker "$@"
}
start relay workers/bin/payflow-relay
# the risk service wants a bearer token: a secret setting, sent as the header and logged nowhere
RISK_TOKEN=risk-token-$RUN-$RANDOM
PAYFLOW_STEP_URL=$RISK_URL PAYFLOW_STEP_AUTHORIZATION="Bearer $RISK_TOKEN" \
	worker risk risk-requests --role http --step RISK_CHECK
worker payment payment-requests --role payment
unset PAYFLOW_POSTPROCESS_FUNCTION PAYFLOW_POSTPROCESS_URL # the shipped default hook
worker postprocess payment-completed --role postprocess
PAYFLOW_INVOICE_URL=$INVOICE_URL worker invoice invoice-requests --role invoice
PAYFLOW_STEP_FUNCTION='notify.send(text,jsonb)' worker notify notify-requests --role sql --step NOTIFY_CUSTOMER
for name in risk payment postprocess invoice notify; do
	pf_ok "the $name worker started" pf_wait_for 20 grep -q '"payflow-worker started"' "$DIR/$name.log"
done
pf_ok "the generic HTTP worker learnt RISK_CHECK's request event from the database" \
	grep -q '"requestEvent":"RiskCheckRequested"' "$DIR/risk.log"
pf_ok "the postprocess worker says it runs the shipped default hook" \
	grep -q 'the shipped payflow.default_postprocess(text,jsonb)' "$DIR/postprocess.log"
# the scheduler of this database: retries, expired leases
( while :; do q -c "SELECT payflow.run_scheduler()" >/dev/null 2>&1 || true; sleep 0.5; done ) &
PIDS+=($!)

# ---- operations on the new pipeline, and a poison message on the new queue ----
q -c "SELECT count(payflow.submit('$P-' || n,
		jsonb_build_object('amount', (10 + n) || '.25', 'currency', 'EUR', 'customer', 'C-' || n),
		correlation_id => 'corr-$P-' || n))
	  FROM generate_series(1, $N) n" >/dev/null
q -c "INSERT INTO notify.unreachable SELECT id FROM payflow.operations WHERE payment_id = '$P-$NOTIFY_REFUSED'"
echo '{"destination":"risk-requests","body":"{\"eventType\":\"RiskCheckRequested\",\"eventVersion\":1,"}' |
	node test/soak/sqs-send.mjs >/dev/null
open_ops() { q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$P-%' AND terminal_at IS NULL"; }
deadline=$((SECONDS + TIMEOUT))
while [ "$(open_ops)" != 0 ] && [ $SECONDS -lt $deadline ]; do
	sleep 0.5
done
say "$(q -c "SELECT string_agg(status || ' ' || n, ', ' ORDER BY status) FROM
	(SELECT status, count(*) n FROM payflow.operations WHERE payment_id LIKE '$P-%' GROUP BY status) s")"

# ---- statuses and history ----
pf_eq "every operation ended" 0 "$(open_ops)"
completed=$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$P-%' AND status = 'COMPLETED'")
pf_eq "every operation COMPLETED but the two refused ones (and the one submitted before)" $((N - 2 + 1)) "$completed"
pf_eq "the operation submitted before the change finished on version $v1, the shipped way" \
	"$v1|PENDING>PAYMENT_PROCESSING>PAYMENT_COMPLETED>POST_PROCESSING>INVOICE_PENDING>COMPLETED" \
	"$(q -c "SELECT o.pipeline_version || '|' || (SELECT string_agg(h.to_status, '>' ORDER BY h.n) FROM payflow.history(o.id) WITH ORDINALITY h(at, from_status, to_status, reason, actor, n))
			 FROM payflow.operations o WHERE payment_id = '$P-before'")"
pf_eq "the new operations went through the new statuses, in order" "$((N - 2))" \
	"$(q -c "SELECT count(*) FROM payflow.operations o WHERE payment_id LIKE '$P-%' AND payment_id <> '$P-before'
			 AND status = 'COMPLETED' AND pipeline_version = $v3
			 AND (SELECT string_agg(h.to_status, '>' ORDER BY h.n) FROM payflow.history(o.id) WITH ORDINALITY h(at, from_status, to_status, reason, actor, n)) =
			 'PENDING>RISK_CHECKING>RISK_CHECKED>PAYMENT_PROCESSING>PAYMENT_COMPLETED>POST_PROCESSING>INVOICE_PENDING>NOTIFY_PENDING>NOTIFYING>COMPLETED'")"
pf_eq "the risk service's 422: FAILED at RISK_CHECK, after one attempt, with a dead letter" \
	"FAILED|RISK_CHECK|http_422|1|1" \
	"$(q -c "SELECT o.status || '|' || (o.error ->> 'step') || '|' || (o.error ->> 'code') || '|' ||
			 (SELECT attempt FROM payflow.steps s WHERE s.operation_id = o.id AND s.step_name = 'RISK_CHECK') || '|' ||
			 (SELECT count(*) FROM payflow.dead_letters d WHERE d.operation_id = o.id AND d.step_name = 'RISK_CHECK')
			 FROM payflow.operations o WHERE payment_id = '$P-$RISK_REFUSED'")"
pf_eq "the risk service's two 503s: retried, done at the third attempt" "COMPLETED|3" \
	"$(q -c "SELECT o.status || '|' || s.attempt FROM payflow.operations o JOIN payflow.steps s
			 ON s.operation_id = o.id AND s.step_name = 'RISK_CHECK' WHERE payment_id = '$P-$RISK_RETRIED'")"
pf_eq "the unreachable customer: FAILED at NOTIFY_CUSTOMER (P0001, permanent), after charge and invoice" \
	"FAILED|NOTIFY_CUSTOMER|P0001|1" \
	"$(q -c "SELECT o.status || '|' || (o.error ->> 'step') || '|' || (o.error ->> 'code') || '|' ||
			 (SELECT attempt FROM payflow.steps s WHERE s.operation_id = o.id AND s.step_name = 'NOTIFY_CUSTOMER')
			 FROM payflow.operations o WHERE payment_id = '$P-$NOTIFY_REFUSED'")"
pf_eq "the SQL step's result is stored under its result name" "$((N - 2))" \
	"$(q -c "SELECT count(*) FROM payflow.operations o WHERE payment_id LIKE '$P-%' AND status = 'COMPLETED'
			 AND pipeline_version = $v3
			 AND (SELECT convert_from(payflow.payload_get(s.result_ref), 'UTF8')::jsonb FROM payflow.steps s
				  WHERE s.operation_id = o.id AND s.step_name = 'NOTIFY_CUSTOMER')
				 = '{\"notified\": true, \"channel\": \"email\"}'")"

# ---- side effects: once each ----
payments=$(q -c "SELECT string_agg(quote_literal(payment_id), ',') FROM payflow.operations
				 WHERE payment_id LIKE '$P-%' AND status = 'COMPLETED'")
pf_eq "one charge per completed operation, and the unreachable customer's; none for the risk-refused one" \
	"$((completed + 1))|0" \
	"$(legacy -c "SELECT count(*) FILTER (WHERE payment_id IN ($payments, '$P-$NOTIFY_REFUSED')) || '|' ||
				  count(*) FILTER (WHERE payment_id = '$P-$RISK_REFUSED') FROM charges WHERE payment_id LIKE '$P-%'")"
pf_eq "duplicate_charges() is empty" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "one notification per operation that reached the step and was not refused" "$((N - 2))" \
	"$(q -c "SELECT count(*) FROM notify.sent n JOIN payflow.operations o ON o.id = n.operation_id
			 WHERE o.payment_id LIKE '$P-%'")"
# (which operation each key names: the step results' check below)
risk_calls() { api "$RISK_PORT" GET /_invoices | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
	const all=JSON.parse(s).invoices, keys=new Set(all.map(i=>i.idempotencyKey));
	const keyed=all.filter(i=>/^pay_[0-9A-Z]{26}:risk_check$/.test(i.idempotencyKey)).length;
	console.log(`${all.length}|${keys.size}|${keyed}`)})'; }
pf_eq "the risk service acted once per operation (the 422 one never), keyed <operation id>:risk_check" \
	"$((N - 1))|$((N - 1))|$((N - 1))" "$(risk_calls)"
pf_eq "the risk answer is RISK_CHECK's result" "$((N - 2))" \
	"$(q -c "SELECT count(*) FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id
			 WHERE o.payment_id LIKE '$P-%' AND o.status = 'COMPLETED' AND s.step_name = 'RISK_CHECK'
			 AND s.result ->> 'object' = 'invoice' AND s.result ->> 'idempotencyKey' = o.id || ':risk_check'")"

pf_ok "every call to the risk service carried PAYFLOW_STEP_AUTHORIZATION as its Authorization header" \
	bash -c "[ \$(grep -c '\"authorization\":\"Bearer $RISK_TOKEN\"' '$DIR/risk-api/server.log') -ge $((N + 1)) ] &&
		! grep '\"path\":\"/invoices\"' '$DIR/risk-api/server.log' | grep -vq '\"authorization\":\"Bearer $RISK_TOKEN\"'"
pf_ok "the token is in no worker's or the relay's log" bash -c "! grep -qF '$RISK_TOKEN' '$DIR'/*.log"

# ---- events: the new steps' requests went to their queues, the shipped ones unchanged ----
pf_eq "one RiskCheckRequested and one NotifyCustomerRequested per operation that reached the step" \
	"$N|$((N - 1))" \
	"$(q -c "SELECT count(DISTINCT p.operation_id) FILTER (WHERE p.event_type = 'RiskCheckRequested' AND p.destination = 'risk-requests')
			 || '|' || count(DISTINCT p.operation_id) FILTER (WHERE p.event_type = 'NotifyCustomerRequested'
															   AND p.destination = 'notify-requests')
			 FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
			 WHERE o.payment_id LIKE '$P-%' AND o.payment_id <> '$P-before'")"

# ---- the DLQ path of the new queue ----
in_dlq() {
	[ "$(node test/emulator/sqs-count.mjs "$(dlq_url risk-requests)" | sed -n 's/.*"visible":\([0-9]*\).*/\1/p')" = 1 ]
}
pf_ok "the malformed message on risk-requests ended in its DLQ" pf_wait_for 30 in_dlq
pf_eq "and in payflow.dead_letters, as a message the worker could not read" "1" \
	"$(q -c "SELECT count(*) FROM payflow.dead_letters WHERE source = 'message' AND queue LIKE '%risk-requests%'
			 AND error ->> 'code' = 'bad_json'")"
pf_ok "the relay and the five workers are still running" \
	kill -0 "$PID_relay" "$PID_risk" "$PID_payment" "$PID_postprocess" "$PID_invoice" "$PID_notify"

# ---- removing a step the operations in flight still have is refused; once done, allowed ----
pf_eq "remove_step while nothing is in flight: a new version without NOTIFY_CUSTOMER" "$((v3 + 1))" \
	"$(q -c "SELECT payflow.remove_step('NOTIFY_CUSTOMER')")"
pf_done
