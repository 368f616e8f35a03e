#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# payflow-worker --role invoice against the invoice API stand-in
# (test/fixtures/invoice-api), fed by payflow-relay through the local SQS
# emulator.  Operations reach INVOICE_PENDING through a stand-in payer and
# post-processor in SQL, so faults can be armed for each operation (matched
# by its operationId) before its InvoiceRequested goes out.  Every branch of
# the classification:
#
#   2xx             COMPLETED, result {"invoiceId","httpStatus"}, the
#                   operation's result, OperationCompleted published, the
#                   invoice keyed <op>:create_invoice with the stored input
#   replay          an invoice already made under the key (200 +
#                   Idempotent-Replayed), and 503 after creating it: the retry
#                   gets the same invoice, one invoice per operation
#   429             Retry-After: 3 honoured: nextAttemptAt >= the 429 + 3 s,
#                   and the next call no sooner
#   503             twice, then created: attempt 3
#   slow            longer than PAYFLOW_INVOICE_TIMEOUT_MS: curl:28,
#                   retried, one invoice
#   dropped         connection closed without an answer: tried again on a
#                   new connection (by curl for a kept connection, else the
#                   database's retry of curl:52), one invoice
#   400             permanent: FAILED after one call, a dead letter, no invoice
#   2xx without id  permanent: no_invoice_id
#   drain           SIGTERM during a call that would take 8 s: the call is
#                   interrupted when the drain time ends, the lease given
#                   back, the worker exits 0 at once; the next worker finishes
#   authorization   PAYFLOW_INVOICE_AUTHORIZATION reaches the API as the
#                   Authorization header of every call, and no log line; a
#                   value with a line break stops start-up
#   kill -9         a worker killed with five calls in flight: the next one
#                   takes the steps over (attempt 2) and gets the invoices the
#                   dead one's calls created; no duplicate invoice
#
# and ends with: invoices == completed operations, one per key.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-invoice 4684 4685 3
INV_PORT=${PAYFLOW_TEST_INVOICE_API_PORT:-4686}
export PAYFLOW_QUEUE_URL
PAYFLOW_QUEUE_URL=$(wk_queue_url invoice-requests)
export PAYFLOW_INVOICE_API_PORT=$INV_PORT PAYFLOW_INVOICE_API_RUN_DIR=$WK_DIR/invoice-api

inv_cleanup() {
	if [ "$PF_FAILURES" -ne 0 ]; then
		cp "$PAYFLOW_INVOICE_API_RUN_DIR/server.log" "$WK_DIR/invoice-api.log" 2>/dev/null || true
	fi
	test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	q -c "UPDATE payflow.step_definitions SET max_attempts = NULL" >/dev/null 2>&1 || true
	wk_cleanup
}
trap inv_cleanup EXIT

eval "$(test/fixtures/invoice-api/start.sh 2>"$WK_DIR/invoice-api-start.log")"
export PAYFLOW_INVOICE_URL
# api METHOD PATH [JSON [curl options...]]: the stand-in's API and controls
api() {
	local method=$1 path=$2 body=${3:-}
	local args=(-fsS -X "$method" "http://127.0.0.1:$INV_PORT$path")
	[ -z "$body" ] || args+=(-H 'Content-Type: application/json' -d "$body")
	shift $(($# < 3 ? $# : 3))
	curl "${args[@]}" "$@"
}
api POST /_reset >/dev/null
# retries due in a second; a Retry-After of 3 s fits under the cap
q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '5 seconds'" >/dev/null

wk_start_relay

# inv_start NAME VAR=value...: an invoice worker on invoice-requests
inv_start() {
	local name=$1
	shift
	env PAYFLOW_WORKER_ID="$name-$WK_RUN" "$@" workers/bin/payflow-worker --role invoice >"$WK_DIR/$name.log" 2>&1 &
	WK_PIDS+=($!)
	printf -v "WK_PID_$name" '%s' "$!"
	pf_wait_for 10 grep -q '"payflow-worker started"' "$WK_DIR/$name.log" ||
		echo "# worker $name did not say it started"
}

# inv_paid PAYMENT_ID: submitted, paid and post-processed up to the
# invoice input, which is not released yet; prints the operation id
inv_paid() {
	local op
	op=$(wk_submit "$1")
	q -c "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'stand-in-$WK_RUN', 60)" \
		-c "SELECT payflow.complete_step('$op', 'PROCESS_PAYMENT', 'stand-in-$WK_RUN', '{\"charge_id\": \"ch_$1\"}')" \
		-c "SELECT payflow.claim_step('$op', 'POST_PROCESS', 'stand-in-$WK_RUN', 60)" >/dev/null
	echo "$op"
}
invoice_input_of() { echo "{\"operationId\": \"$1\", \"paymentId\": \"$2\", \"amount\": 12.50, \"currency\": \"EUR\", \"customer\": \"C-1\"}"; }
# inv_release OP PAYMENT_ID: post-processing done, InvoiceRequested out
inv_release() {
	q -c "SELECT payflow.complete_step('$1', 'POST_PROCESS', 'stand-in-$WK_RUN', '$(invoice_input_of "$1" "$2")')" >/dev/null
}
inv_ready() {
	local op
	op=$(inv_paid "$1")
	inv_release "$op" "$1"
	echo "$op"
}
# fault OP JSON: a fault of the stand-in for this operation only
fault() { api POST /_faults "{\"match\": {\"operationId\": \"$1\"}, $2}" >/dev/null; }

step_of() { q -c "SELECT $2 FROM payflow.steps WHERE operation_id = '$1' AND step_name = 'CREATE_INVOICE'"; }
# invoices_of OP: invoices the stand-in holds for the operation's key
invoices_of() {
	api GET /_invoices | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
		console.log(JSON.parse(s).invoices.filter(i=>i.idempotencyKey===process.argv[1]).length)})' "$1:create_invoice"
}
invoice_id_of() {
	api GET /_invoices | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
		console.log(JSON.parse(s).invoices.filter(i=>i.idempotencyKey===process.argv[1]).map(i=>i.id).join(","))})' "$1:create_invoice"
}
# calls_of OP: POST /invoices requests the stand-in logged for the key, as "status@startMs" lines
calls_of() {
	grep -F "\"key\":\"$1:create_invoice\"" "$PAYFLOW_INVOICE_API_RUN_DIR/server.log" |
		node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{for(const l of s.trim().split("\n").filter(Boolean)){
			const r=JSON.parse(l);console.log(`${r.status}@${Date.parse(r.time)-r.ms}@${Date.parse(r.time)}`)}})'
}
n_calls() { calls_of "$1" | grep -c . || true; }

p=inv-$WK_RUN
ALL=()

# ---- phase 1: one worker, every branch ----
INV_TOKEN="Bearer inv-token-$WK_RUN-s3cr3t"
inv_start w1 PAYFLOW_CONCURRENCY=8 PAYFLOW_INVOICE_TIMEOUT_MS=1500 PAYFLOW_HTTP_CONNECT_TIMEOUT_MS=1000 \
	PAYFLOW_INVOICE_AUTHORIZATION="$INV_TOKEN"

happy=()
for i in 1 2 3; do
	happy+=("$(inv_ready "$p-ok-$i")")
done
ALL+=("${happy[@]}")

# the invoice exists already under the operation's key (an earlier attempt whose answer was lost)
pre=$(inv_paid "$p-pre")
pre_id=$(api POST /invoices "$(invoice_input_of "$pre" "$p-pre")" -H "Idempotency-Key: $pre:create_invoice" |
	node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).id))')
inv_release "$pre" "$p-pre"
# created, then the client hears 503: the ambiguous outcome
after=$(inv_paid "$p-after")
fault "$after" '"mode": "status", "status": 503, "afterCreate": true'
inv_release "$after" "$p-after"
throttled=$(inv_paid "$p-429")
fault "$throttled" '"mode": "status", "status": 429, "retryAfter": 3'
inv_release "$throttled" "$p-429"
unavailable=$(inv_paid "$p-503")
fault "$unavailable" '"mode": "status", "status": 503, "count": 2'
inv_release "$unavailable" "$p-503"
slow=$(inv_paid "$p-slow")
fault "$slow" '"mode": "slow", "seconds": 3'
inv_release "$slow" "$p-slow"
dropped=$(inv_paid "$p-drop")
fault "$dropped" '"mode": "drop"'
inv_release "$dropped" "$p-drop"
rejected=$(inv_paid "$p-400")
fault "$rejected" '"mode": "status", "status": 400'
inv_release "$rejected" "$p-400"
ALL+=("$pre" "$after" "$throttled" "$unavailable" "$slow" "$dropped" "$rejected")

for op in "${happy[@]}"; do
	wk_wait_status "$op" COMPLETED 20 || true
done
completed=0
results=0
keyed=0
for op in "${happy[@]}"; do
	[ "$(wk_status "$op")" = COMPLETED ] && completed=$((completed + 1))
	id=$(invoice_id_of "$op")
	[ "$(step_of "$op" "result::text")" = "{\"invoiceId\": \"$id\", \"httpStatus\": 201}" ] &&
		[ "$(q -c "SELECT result->>'invoiceId' FROM payflow.operations WHERE id = '$op'")" = "$id" ] &&
		results=$((results + 1))
	[ "$(invoices_of "$op")" = 1 ] && keyed=$((keyed + 1))
done
pf_eq "2xx: 3 operations COMPLETED" 3 "$completed"
pf_eq "2xx: result {invoiceId, httpStatus: 201} on the step and the operation" 3 "$results"
pf_eq "2xx: one invoice each, keyed <op>:create_invoice" 3 "$keyed"
op=${happy[0]}
pf_eq "2xx: history ends INVOICE_PENDING -> COMPLETED" "POST_PROCESSING>INVOICE_PENDING INVOICE_PENDING>COMPLETED" \
	"$(q -c "SELECT string_agg(from_status || '>' || to_status, ' ' ORDER BY at) FROM
			 (SELECT * FROM payflow.history('$op') ORDER BY at DESC LIMIT 2) h")"
pf_eq "2xx: the invoice carries the stored invoice input" "12.5|EUR|$op" \
	"$(api GET "/invoices/$(invoice_id_of "$op")" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
		const i=JSON.parse(s).input;console.log(`${i.amount}|${i.currency}|${i.operationId}`)})')"
completed_event() {
	[ "$(q -c "SELECT count(*) FROM payflow.outbox_published WHERE operation_id = '$op'
			   AND event_type = 'OperationCompleted' AND destination = 'operation-events'")" = 1 ]
}
pf_ok "2xx: OperationCompleted published to operation-events" pf_wait_for 10 completed_event
# authorizations_of OP: the Authorization headers of the calls for the key, one per line
authorizations_of() {
	grep -F "\"key\":\"$1:create_invoice\"" "$PAYFLOW_INVOICE_API_RUN_DIR/server.log" |
		node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{for(const l of s.trim().split("\n").filter(Boolean))
			console.log(JSON.parse(l).authorization)})'
}
pf_eq "authorization: the API got PAYFLOW_INVOICE_AUTHORIZATION as the Authorization header" "$INV_TOKEN" \
	"$(authorizations_of "$op" | sort -u)"
pf_ok "authorization: not in the worker's log (redacted as a secret)" bash -c "! grep -qF 'inv-token-$WK_RUN' '$WK_DIR/w1.log'"
out=$(env PAYFLOW_INVOICE_AUTHORIZATION="$(printf 'Bearer x\r\nX-Injected: 1')" workers/bin/payflow-worker --role invoice 2>&1) && rc=0 || rc=$?
pf_eq "authorization: a value with a line break stops start-up (exit 2, one line)" \
	"2|payflow-worker: invalid PAYFLOW_INVOICE_AUTHORIZATION: holds a control character" "$rc|$out"
pf_eq "2xx: status() says COMPLETED, terminal, with completedAt" "COMPLETED|true|true" \
	"$(q -c "SELECT s->>'status' || '|' || (s->>'terminal') || '|' || (s->>'completedAt' IS NOT NULL) FROM payflow.status('$op') s")"

pf_ok "replay: COMPLETED" wk_wait_status "$pre" COMPLETED 20
pf_eq "replay: the invoice made earlier, answered 200, still one invoice" "$pre_id|200|1" \
	"$(step_of "$pre" "(result->>'invoiceId') || '|' || (result->>'httpStatus')")|$(invoices_of "$pre")"
pf_ok "replay: logged as such" wk_log_has w1 "$pre" "replayed the invoice of an earlier call"

pf_ok "503 after creating: COMPLETED" wk_wait_status "$after" COMPLETED 20
pf_eq "503 after creating: attempt 2 got the invoice of attempt 1 (200), one invoice" "2|200|1" \
	"$(step_of "$after" "attempt || '|' || (result->>'httpStatus')")|$(invoices_of "$after")"

pf_ok "429: COMPLETED" wk_wait_status "$throttled" COMPLETED 20
# fail_step's answer to the 429, as the worker logged it
next_at_ms=$(grep -F "\"operationId\":\"$throttled\"" "$WK_DIR/w1.log" | grep -F '"code":"http_429"' |
	node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
		console.log(Date.parse(JSON.parse(s.trim().split("\n")[0]).answer.nextAttemptAt))})')
mapfile -t calls < <(calls_of "$throttled")
first_end=$(echo "${calls[0]}" | cut -d@ -f3)
second_start=$(echo "${calls[1]:-0@0@0}" | cut -d@ -f2)
pf_eq "429: two calls, 429 then 201" "429,201" "$(printf '%s\n' "${calls[@]}" | cut -d@ -f1 | paste -sd,)"
pf_ok "429: nextAttemptAt >= the 429 + Retry-After 3 s ($((next_at_ms - first_end)) ms)" \
	test $((next_at_ms - first_end)) -ge 3000
pf_ok "429: the retry came no sooner ($((second_start - first_end)) ms after)" test $((second_start - first_end)) -ge 3000
pf_eq "429: the error carried retryAfterSeconds" "http_429|3" \
	"$(step_of "$throttled" "(last_error->>'code') || '|' || (last_error->>'retryAfterSeconds')")"

pf_ok "503 twice: COMPLETED" wk_wait_status "$unavailable" COMPLETED 20
pf_eq "503 twice: attempt 3, three calls, one invoice" "3|503,503,201|1" \
	"$(step_of "$unavailable" attempt)|$(calls_of "$unavailable" | cut -d@ -f1 | paste -sd,)|$(invoices_of "$unavailable")"

pf_ok "slow: COMPLETED" wk_wait_status "$slow" COMPLETED 25
pf_eq "slow: timed out (curl:28) on attempt 1, done on attempt 2, one invoice" "2|curl:28|1" \
	"$(step_of "$slow" "attempt || '|' || (last_error->>'code')")|$(invoices_of "$slow")"

pf_ok "dropped: COMPLETED" wk_wait_status "$dropped" COMPLETED 20
# A connection kept from an earlier call that closes without an answer is
# retried once by curl itself on a new one (safe: same key); otherwise it is
# curl:52 and the database's retry.
pf_eq "dropped: the connection closed without an answer, then created once" "dropped,201|1" \
	"$(calls_of "$dropped" | cut -d@ -f1 | paste -sd,)|$(invoices_of "$dropped")"

pf_ok "400: FAILED" wk_wait_status "$rejected" FAILED 20
pf_eq "400: one call, no retry, no invoice" "1|1|0" \
	"$(step_of "$rejected" attempt)|$(n_calls "$rejected")|$(invoices_of "$rejected")"
pf_eq "400: a dead letter with http_400 and the API's message" "http_400|invoice answered HTTP 400: injected 400|400" \
	"$(q -c "SELECT (error->>'code') || '|' || (error->>'message') || '|' || (error->>'httpStatus')
			 FROM payflow.dead_letters WHERE operation_id = '$rejected' AND source = 'step'")"
pp_stop() {
	local pid_var="WK_PID_$1"
	kill -TERM "${!pid_var}" 2>/dev/null || true
	wait "${!pid_var}" 2>/dev/null || true
}
pp_stop w1

# ---- phase 2: a 2xx without an id, from a stand-in of our own ----
cat >"$WK_DIR/noid.mjs" <<'JS'
import http from "node:http";
http.createServer((req, res) => {
	req.resume();
	req.on("end", () => { res.writeHead(201, { "Content-Type": "application/json" }); res.end('{"status":"issued"}'); });
}).listen(Number(process.argv[2]), "127.0.0.1", () => console.log("listening"));
JS
node "$WK_DIR/noid.mjs" $((INV_PORT + 1)) >"$WK_DIR/noid.log" 2>&1 &
WK_PIDS+=($!)
pf_wait_for 10 grep -q listening "$WK_DIR/noid.log" || true
inv_start noid PAYFLOW_INVOICE_URL="http://127.0.0.1:$((INV_PORT + 1))/invoices"
noid=$(inv_ready "$p-noid")
pf_ok "2xx without id: FAILED" wk_wait_status "$noid" FAILED 20
pf_eq "2xx without id: no_invoice_id, permanent" "1|no_invoice_id" \
	"$(step_of "$noid" "attempt || '|' || (last_error->>'code')")"
pp_stop noid

# ---- phase 3: SIGTERM during a long call ----
inv_start drainer PAYFLOW_DRAIN_SECONDS=1 PAYFLOW_INVOICE_TIMEOUT_MS=30000
long=$(inv_paid "$p-drain")
fault "$long" '"mode": "slow", "seconds": 8'
inv_release "$long" "$p-drain"
ALL+=("$long")
in_flight() { [ "$(api GET /_stats | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).inFlight))')" -ge "$1" ]; }
pf_ok "drain: the call is in flight" pf_wait_for 15 in_flight 1
t0=$SECONDS
kill -TERM "$WK_PID_drainer"
rc=0
wait "$WK_PID_drainer" || rc=$?
pf_eq "drain: exit 0 after the drain time, not after the 8 s call" "0|yes" "$rc|$([ $((SECONDS - t0)) -le 5 ] && echo yes || echo "no ($((SECONDS - t0)) s)")"
pf_ok "drain: the call was interrupted, the step abandoned and its message released" \
	wk_log_has drainer "$long" "step abandoned at shutdown"
inv_start w2 PAYFLOW_CONCURRENCY=8
pf_ok "drain: the next worker completes it" wk_wait_status "$long" COMPLETED 25
pf_eq "drain: one invoice" 1 "$(invoices_of "$long")"
pp_stop w2

# ---- phase 4: kill -9 with five calls in flight ----
api POST /_faults '{"mode": "slow", "seconds": 3, "count": null}' >/dev/null
inv_start victim PAYFLOW_CONCURRENCY=8 PAYFLOW_INVOICE_TIMEOUT_MS=20000
killed=()
for i in 1 2 3 4 5; do
	killed+=("$(inv_ready "$p-kill-$i")")
done
ALL+=("${killed[@]}")
pf_ok "kill -9: five calls in flight" pf_wait_for 15 in_flight 5
wk_kill9 "$WK_PID_victim"
api DELETE /_faults >/dev/null
inv_start rescuer PAYFLOW_CONCURRENCY=8
taken=0
for op in "${killed[@]}"; do
	wk_wait_status "$op" COMPLETED 40 && taken=$((taken + 1))
done
pf_eq "kill -9: all five COMPLETED by the next worker" 5 "$taken"
over=0
single=0
for op in "${killed[@]}"; do
	[ "$(step_of "$op" "attempt || '|' || lease_owner")" = "2|rescuer-$WK_RUN" ] && over=$((over + 1))
	[ "$(invoices_of "$op")" = 1 ] && single=$((single + 1))
done
pf_eq "kill -9: taken over (attempt 2, by the new worker)" 5 "$over"
pf_eq "kill -9: one invoice each, the dead worker's calls' invoices replayed" 5 "$single"
pf_ok "kill -9: the replays were logged" \
	test "$(grep -c 'replayed the invoice of an earlier call' "$WK_DIR/rescuer.log")" -ge 5

# ---- every operation of this test ----
n_completed=$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND status = 'COMPLETED'")
summary=$(api GET /_invoices | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
	const inv=JSON.parse(s).invoices.filter(i=>i.input.paymentId?.startsWith(process.argv[1]));
	const ops=new Set(inv.map(i=>i.input.operationId)); const keys=new Set(inv.map(i=>i.idempotencyKey));
	console.log(`${inv.length}|${ops.size}|${keys.size}`)})' "$p-")
pf_eq "invoices == completed operations, one per operation and key" "$n_completed|$n_completed|$n_completed" "$summary"
pf_eq "every operation ended (COMPLETED, or FAILED for the 400 and the missing id)" "0|2" \
	"$(q -c "SELECT count(*) FILTER (WHERE status NOT IN ('COMPLETED', 'FAILED')) || '|' || count(*) FILTER (WHERE status = 'FAILED')
			 FROM payflow.operations WHERE payment_id LIKE '$p-%'")"
pf_done
