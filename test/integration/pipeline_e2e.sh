#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# The whole pipeline end to end: payflow.submit() -> payflow-relay -> SQS
# (the local emulator) -> payflow-worker --role payment (legacy DBMS fixture
# over psqlODBC) -> postprocess (payflow.default_postprocess) -> invoice
# (the invoice API stand-in) -> COMPLETED, with faults in both external
# systems, all fixed in advance (seeded), none of them left to chance:
#
#   legacy DBMS     ~10% of payments fail transiently once or twice (40001);
#                   three fail after charging (the retry's look-up finds the
#                   charge); one loses its connection after charging; one
#                   card is declined (P0001, permanent)
#   invoice API     15% of requests fail transiently (500/502/503/504/429,
#                   seeded); three answer 503 after creating the invoice; one
#                   answers after the worker's time-out, having created it;
#                   one operation's invoice is refused (400, permanent)
#
# and checks: every operation COMPLETED except the two permanently faulted
# ones, FAILED with a dead letter each; legacy charges of completed
# operations = invoices = completed operations (the invoice-refused one is
# charged, not invoiced); duplicate_charges() empty; one invoice per
# operation and key; the outbox drained; the work queues and their DLQs
# empty.  Uses the running cluster (make check's); prints figures.
#
#   PIPELINE_OPERATIONS=300    PIPELINE_RELAY=auto|c|node
#   PIPELINE_TIMEOUT=110       seconds for every operation to end
#
# The relay is workers/bin/payflow-relay when it builds; otherwise (or with
# PIPELINE_RELAY=node) a small Node loop moves the outbox: outbox_claim ->
# SendMessageBatch -> outbox_ack.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
source test/lib/cluster.sh
source test/lib/roles_env.sh
source test/lib/assert.sh
source test/lib/proc.sh

N=${PIPELINE_OPERATIONS:-300}
TIMEOUT=${PIPELINE_TIMEOUT:-110}
RELAY_KIND=${PIPELINE_RELAY:-auto}
EMU_PORT=${PIPELINE_EMULATOR_PORT:-4687}
INV_PORT=${PIPELINE_INVOICE_API_PORT:-4689}
RUN=$$
P=e2e-$RUN
DECLINED=77
REFUSED=150

q() { pf_psql -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }
say() { printf '# %s\n' "$*"; }

DIR=$(mktemp -d /tmp/payflow-pipeline-e2e.XXXXXX)
PIDS=()
cleanup() {
	local pid
	pf_kill_ours 9 "${PIDS[@]}"
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		rm -f "/tmp/psqlodbc_payflow-worker_$(id -un)$pid.log"
	done
	q -c "UPDATE payflow.step_definitions SET retry_base_delay = NULL, retry_max_delay = NULL, max_attempts = NULL" \
		>/dev/null 2>&1 || true
	legacy -c "SELECT clear_faults()" >/dev/null 2>&1 || true
	PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	test/emulator/stop.sh >/dev/null 2>&1 || true
	if [ "$PF_FAILURES" -ne 0 ]; then
		cp "$DIR/invoice-api/server.log" "$DIR/invoice-api.log" 2>/dev/null || true
		for f in "$DIR"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $(basename "$f") (last 30 lines)"
			tail -n 30 "$f" | cut -c1-400
		done
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT

[ -x workers/bin/payflow-worker ] || { echo "not ok - workers/bin/payflow-worker is missing (make -C workers)"; exit 1; }
if [ "$RELAY_KIND" = auto ]; then
	RELAY_KIND=node
	make -s -C workers bin/payflow-relay >"$DIR/relay-build.log" 2>&1 && [ -x workers/bin/payflow-relay ] && RELAY_KIND=c
fi

# ---- the stack ----
export PAYFLOW_EMULATOR_PORT=$EMU_PORT PAYFLOW_EMULATOR_BACKEND_PORT=$((EMU_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=5
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$DIR/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS PAYFLOW_DLQ_URLS
queue_url() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }
dlq_url() { echo "$PAYFLOW_DLQ_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }

export PAYFLOW_INVOICE_API_PORT=$INV_PORT PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api
eval "$(test/fixtures/invoice-api/start.sh 2>"$DIR/invoice-api-start.log")"
export PAYFLOW_INVOICE_URL
api() {
	local method=$1 path=$2 body=${3:-}
	local args=(-fsS -X "$method" "http://127.0.0.1:$INV_PORT$path")
	[ -z "$body" ] || args+=(-H 'Content-Type: application/json' -d "$body")
	curl "${args[@]}"
}
api POST /_reset >/dev/null

pf_roles_env "$DIR"
export PAYFLOW_LOG_LEVEL=info PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_VISIBILITY_TIMEOUT=10
export PAYFLOW_CONCURRENCY=16 PAYFLOW_INVOICE_TIMEOUT_MS=2000

# retries in a second or two; the invoice step may meet several random faults in a row
q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'" \
	-c "UPDATE payflow.step_definitions SET max_attempts = 10 WHERE step_name = 'CREATE_INVOICE'" >/dev/null

# ---- faults, fixed in advance ----
legacy >/dev/null <<SQL
SELECT clear_faults();
SELECT setseed(0.42);
SELECT count(set_fault('transient', payment_id => '$P-' || n, count => 1 + (random() * 1.2)::int, fn => 'charge'))
  FROM generate_series(1, $N) n WHERE random() < 0.10 AND n NOT IN ($DECLINED, 11, 22, 33, 44);
SELECT set_fault('transient', payment_id => '$P-' || n, fn => 'charge', after_charge => true) FROM unnest(ARRAY[11, 22, 33]) n;
SELECT set_fault('disconnect', payment_id => '$P-44', fn => 'charge', after_charge => true);
SELECT set_fault('permanent', payment_id => '$P-$DECLINED', fn => 'charge');
SQL
api POST /_faults '{"mode": "random", "transientRate": 0.15, "seed": 42}' >/dev/null
for n in 5 55 155; do
	api POST /_faults "{\"mode\": \"status\", \"status\": 503, \"afterCreate\": true, \"match\": {\"paymentId\": \"$P-$n\"}}" >/dev/null
done
api POST /_faults "{\"mode\": \"slow\", \"seconds\": 3, \"afterCreate\": true, \"match\": {\"paymentId\": \"$P-99\"}}" >/dev/null
api POST /_faults "{\"mode\": \"status\", \"status\": 400, \"count\": null, \"match\": {\"paymentId\": \"$P-$REFUSED\"}}" >/dev/null

# ---- the processes ----
# only this test's operations in flight (test/lib/cluster.sh)
pf_forget_leftovers
# start NAME COMMAND...: in the background, log in $DIR/NAME.log, pid in PID_<NAME>
start() {
	local name=$1
	shift
	"$@" >"$DIR/$name.log" 2>&1 &
	PIDS+=($!)
	printf -v "PID_$name" '%s' "$!"
}
if [ "$RELAY_KIND" = c ]; then
	start relay workers/bin/payflow-relay
else
	cat >"$DIR/relay.mjs" <<'JS'
// A stand-in relay: outbox_claim -> SendMessageBatch (10 a call) -> outbox_ack.
import { execFileSync } from "node:child_process";
import { pathToFileURL } from "node:url";
const emulator = await import(pathToFileURL(process.argv[2]).href);
const { SQSClient, SendMessageBatchCommand } = emulator.requireFromCache("@aws-sdk/client-sqs");
const routes = Object.fromEntries(process.env.PAYFLOW_QUEUE_URLS.split(",").map((p) => p.split("=")));
const sqs = new SQSClient({ endpoint: process.env.AWS_ENDPOINT_URL, region: emulator.clientRegion(),
	credentials: emulator.clientCredentials() });
const psql = (sql) => execFileSync(process.env.PSQL, ["-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql],
	{ encoding: "utf8" }).trim();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
for (;;) {
	const rows = JSON.parse(psql("SELECT coalesce(json_agg(c), '[]') FROM payflow.outbox_claim(100, 'e2e-node-relay', 30) c"));
	if (rows.length === 0) {
		await sleep(100);
		continue;
	}
	const acked = [];
	const sends = [];
	for (let i = 0; i < rows.length; i += 10) {
		const chunk = rows.slice(i, i + 10);
		for (const dest of new Set(chunk.map((r) => r.destination))) {
			const batch = chunk.filter((r) => r.destination === dest);
			sends.push(sqs.send(new SendMessageBatchCommand({
				QueueUrl: routes[dest],
				Entries: batch.map((r, k) => ({
					Id: String(k), MessageBody: r.body,
					MessageAttributes: Object.fromEntries(Object.entries(r.attributes ?? {})
						.filter(([, v]) => typeof v === "string" && v !== "")
						.map(([name, v]) => [name, { DataType: "String", StringValue: v }])),
				})),
			})).then((out) => {
				for (const ok of out.Successful ?? []) acked.push(batch[Number(ok.Id)].event_id);
			}, (err) => console.error(`send to ${dest} failed: ${err.message}`)));
		}
	}
	await Promise.all(sends);
	if (acked.length > 0)
		psql(`SELECT payflow.outbox_ack(ARRAY[${acked.map((id) => `'${id}'`).join(",")}]::uuid[], NULL, 'e2e-node-relay')`);
}
JS
	PSQL=$PF_PGBIN/psql start relay node "$DIR/relay.mjs" "$REPO/test/emulator/emulator-config.mjs"
fi
for role in payment postprocess invoice; do
	case $role in
		payment) queue=payment-requests ;;
		postprocess) queue=payment-completed ;;
		invoice) queue=invoice-requests ;;
	esac
	PAYFLOW_QUEUE_URL=$(queue_url $queue) PAYFLOW_WORKER_ID=e2e-$role-$RUN \
		start "$role" workers/bin/payflow-worker --role "$role"
done
for role in payment postprocess invoice; do
	pf_wait_for 15 grep -q '"payflow-worker started"' "$DIR/$role.log" || say "the $role worker did not say it started"
done

# ---- submit, then wait until every operation ended ----
say "$N operations, relay: $RELAY_KIND, concurrency $PAYFLOW_CONCURRENCY per worker"
t0=$(date +%s.%N)
q -c "SELECT count(payflow.submit('$P-' || n,
		jsonb_build_object('amount', (100 + n) || '.50', 'currency', 'EUR', 'customer', 'C-' || (n % 17),
						   'description', 'order ' || n),
		correlation_id => 'corr-$P-' || n,
		-- every third one continues a caller's trace; the others start one
		traceparent => CASE WHEN n % 3 = 0 THEN '00-' || md5('$P-' || n) || '-' || left(md5('span-' || n), 16) || '-01' END))
	  FROM generate_series(1, $N) n" >/dev/null
t_submitted=$(date +%s.%N)
open_ops() {
	q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$P-%' AND status NOT IN ('COMPLETED', 'FAILED')"
}
deadline=$((SECONDS + TIMEOUT))
next_report=$((SECONDS + 10))
while [ "$(open_ops)" != 0 ] && [ $SECONDS -lt $deadline ]; do
	if [ $SECONDS -ge $next_report ]; then
		say "$(q -c "SELECT string_agg(status || ' ' || n, ', ' ORDER BY status) FROM
					  (SELECT status, count(*) n FROM payflow.operations WHERE payment_id LIKE '$P-%' GROUP BY status) s")"
		next_report=$((SECONDS + 10))
	fi
	sleep 0.5
done
t_done=$(date +%s.%N)

# ---- what became of them ----
pf_eq "every operation ended" 0 "$(open_ops)"
completed=$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$P-%' AND status = 'COMPLETED'")
pf_eq "every operation COMPLETED except the two permanently faulted ones" $((N - 2)) "$completed"
pf_eq "the declined card and the refused invoice FAILED, with a dead letter each" \
	"$P-$DECLINED|PROCESS_PAYMENT|P0001,$P-$REFUSED|CREATE_INVOICE|http_400" \
	"$(q -c "SELECT string_agg(o.payment_id || '|' || d.step_name || '|' || (d.error->>'code'), ',' ORDER BY d.step_name DESC)
			 FROM payflow.operations o JOIN payflow.dead_letters d ON d.operation_id = o.id AND d.source = 'step'
			 WHERE o.payment_id LIKE '$P-%' AND o.status = 'FAILED'")"
pf_eq "completed operations went the whole way (6 transitions each)" "$completed" \
	"$(q -c "SELECT count(*) FROM payflow.operations o WHERE payment_id LIKE '$P-%' AND status = 'COMPLETED'
			 AND (SELECT string_agg(h.to_status, '>' ORDER BY h.n)
				  FROM payflow.history(o.id) WITH ORDINALITY h(at, from_status, to_status, reason, actor, n)) =
				 'PENDING>PAYMENT_PROCESSING>PAYMENT_COMPLETED>POST_PROCESSING>INVOICE_PENDING>COMPLETED'")"

completed_payments=$(q -c "SELECT string_agg(quote_literal(payment_id), ',') FROM payflow.operations
						   WHERE payment_id LIKE '$P-%' AND status = 'COMPLETED'")
charges_completed=$(legacy -c "SELECT count(*) FROM charges WHERE payment_id IN ($completed_payments)")
charges_all=$(legacy -c "SELECT count(*) FROM charges WHERE payment_id LIKE '$P-%'")
invoices=$(api GET /_invoices | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
	const inv=JSON.parse(s).invoices.filter(i=>String(i.input.paymentId).startsWith(process.argv[1]));
	const ops=new Set(inv.map(i=>i.input.operationId)), keys=new Set(inv.map(i=>i.idempotencyKey));
	const keyed=inv.filter(i=>i.idempotencyKey===`${i.input.operationId}:create_invoice`).length;
	console.log(`${inv.length}|${ops.size}|${keys.size}|${keyed}`)})' "$P-")
pf_eq "legacy charges of completed operations = invoices = completed operations" \
	"$completed|$completed" "$charges_completed|${invoices%%|*}"
pf_eq "one charge more: the operation whose invoice was refused (charged, not invoiced)" $((completed + 1)) "$charges_all"
pf_eq "duplicate_charges() is empty" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "no duplicate invoice: one per operation, one per key, keyed <op>:create_invoice" \
	"$completed|$completed|$completed|$completed" "$invoices"
pf_eq "every invoice carries its operation's amount as submitted" "$completed" \
	"$(api GET /_invoices | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
		const inv=JSON.parse(s).invoices.filter(i=>String(i.input.paymentId).startsWith(process.argv[1]));
		console.log(inv.filter(i=>String(i.input.amount)===`${100+Number(i.input.paymentId.split("-").pop())}.50`).length)})' "$P-")"

outbox_empty() { [ "$(q -c "SELECT count(*) FROM payflow.outbox o JOIN payflow.operations p ON p.id = o.operation_id
							  WHERE p.payment_id LIKE '$P-%'")" = 0 ]; }
pf_ok "outbox drained" pf_wait_for 20 outbox_empty
queues_empty() {
	local total
	total=$(node test/emulator/sqs-count.mjs "$(queue_url payment-requests)" "$(queue_url payment-completed)" \
		"$(queue_url invoice-requests)" | sed -n 's/.*"visible":\([0-9]*\),"notVisible":\([0-9]*\).*/\1+\2/p' | paste -sd+ | bc)
	[ "${total:-1}" = 0 ]
}
pf_ok "work queues empty (every message deleted after its outcome committed)" pf_wait_for 20 queues_empty
queues_empty || {
	# what is left, and whose: for the next look
	node test/emulator/sqs-count.mjs "$(queue_url payment-requests)" "$(queue_url payment-completed)" \
		"$(queue_url invoice-requests)" | sed 's/^/# left: /' || true
	q -c "SELECT 'in flight: ' || count(*) || ' operations not ended, ' || (SELECT count(*) FROM payflow.outbox) || ' outbox rows'
			FROM payflow.operations WHERE terminal_at IS NULL" | sed 's/^/# /' || true
}
dlq_total=$(node test/emulator/sqs-count.mjs "$(dlq_url payment-requests)" "$(dlq_url payment-completed)" \
	"$(dlq_url invoice-requests)" | sed -n 's/.*"visible":\([0-9]*\).*/\1/p' | paste -sd+ | bc)
pf_eq "no message reached a DLQ" 0 "$dlq_total"
# ---- one trace per operation (issue 29) ----
# Every worker line about an operation names the operation's trace (the
# relay sent it as the SQS attribute "traceparent"), each attempt a span of
# its own under it: a trace the caller gave is continued, not replaced.
q -c "SELECT id || ' ' || payflow._trace_id(traceparent) || ' ' || status || ' ' || (payflow._traceparent_text(traceparent) LIKE '00-' || md5(payment_id) || '-%')
	  FROM payflow.operations WHERE payment_id LIKE '$P-%'" >"$DIR/traces"
pf_eq "every operation has a trace; every third one the caller's" "$N $((N / 3))" \
	"$(wc -l <"$DIR/traces") $(grep -c ' true$' "$DIR/traces")"
trace_check=$(python3 - "$DIR/traces" "$DIR/payment.log" "$DIR/postprocess.log" "$DIR/invoice.log" <<'PY'
import json, sys
traces = {}
completed = set()
for line in open(sys.argv[1]):
    op, trace, status = line.split()[:3]
    traces[op] = trace
    if status == "COMPLETED":
        completed.add(op)
lines = wrong = 0
roles = set()
spans = {}
for path in sys.argv[2:]:
    for text in open(path):
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        op = entry.get("operationId")
        if op not in traces or "traceId" not in entry:
            continue
        lines += 1
        roles.add(path)
        if entry["traceId"] != traces[op] or len(entry.get("spanId", "")) != 16:
            wrong += 1
        spans.setdefault(op, set()).add(entry["spanId"])
# an operation's three steps are three spans at least (more with retries)
ops_with_spans = sum(1 for op, s in spans.items() if op in completed and len(s) >= 3)
print(f"{len(roles)} {wrong} {ops_with_spans} {lines}")
PY
)
read -r trace_roles trace_wrong trace_ops trace_lines <<<"$trace_check"
say "trace ids: $trace_lines worker log lines checked"
pf_eq "each worker's lines carry their operation's trace id, none another" "3 0" "$trace_roles $trace_wrong"
pf_eq "each completed operation's three steps are three spans of its trace" "$completed" "$trace_ops"
pf_ok "the relay and the three workers are still running" kill -0 "$PID_relay" "$PID_payment" "$PID_postprocess" "$PID_invoice"

# ---- figures ----
elapsed=$(echo "$t_done - $t0" | bc)
say "$(printf '%d operations ended in %.1f s (%.0f/s end to end; submit took %.2f s)' "$N" "$elapsed" \
	"$(echo "$N / $elapsed" | bc -l)" "$(echo "$t_submitted - $t0" | bc)")"
say "retries by step: $(q -c "SELECT string_agg(step_name || ' ' || r, ', ' ORDER BY step_name) FROM
	(SELECT step_name, sum(attempt - 1) r FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id
	 WHERE o.payment_id LIKE '$P-%' GROUP BY step_name) x")"
say "submit -> COMPLETED: $(q -c "SELECT 'p50 ' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY s)::numeric, 2) ||
	' s, p95 ' || round(percentile_cont(0.95) WITHIN GROUP (ORDER BY s)::numeric, 2) || ' s, max ' || round(max(s)::numeric, 2) || ' s'
	FROM (SELECT extract(epoch FROM terminal_at - created_at) s FROM payflow.operations
		  WHERE payment_id LIKE '$P-%' AND status = 'COMPLETED') x")"
say "invoice API: $(api GET /_stats)"
say "legacy calls: $(legacy -c "SELECT string_agg(fn || ' ' || outcome || ' ' || n, ', ') FROM
	(SELECT fn, outcome, count(*) n FROM call_log WHERE payment_id LIKE '$P-%' GROUP BY fn, outcome ORDER BY fn, outcome) x")"
pf_done
