#!/bin/bash
# payflow-worker --role postprocess, fed by payflow-relay through the local
# SQS emulator.  The payment step is completed in SQL by a stand-in payer,
# so each PaymentCompleted carries a payment result this test chose.  One
# worker at a time (they share the payment-completed queue):
#
#   default hook    payflow.default_postprocess(text,jsonb): PAYMENT_COMPLETED
#                   -> POST_PROCESSING -> INVOICE_PENDING, the invoice input
#                   from the details and the charge, InvoiceRequested emitted
#   custom hook     a function of the test's: its answer is the invoice input,
#                   the row it writes commits with the step; a 40001 inside
#                   it is retried and its writes of the failed tries are rolled
#                   back (one transaction with complete_step); a RAISE
#                   (P0001) fails the operation with a dead letter, its write
#                   rolled back too
#   bad hook        a function of the wrong signature: 22023, FAILED after
#                   one attempt, a dead letter; settings that name no
#                   argument types or no hook at all stop start-up
#   HTTP hook       a tiny loopback server: {"operationId","paymentResult"}
#                   with Idempotency-Key = <op>:post_process; its answer is
#                   stored as it came (12.50 stays 12.50); 503 + Retry-After
#                   then success (attempt 2, after >= 1 s); 400 and a 2xx that
#                   is not JSON fail for good
#   PAYFLOW_STORE=s3  the HTTP hook's answer becomes the object
#                   payments/<op>/invoice-input.attempt-1.json (the attempt in the name), byte for byte; a SQL
#                   hook's answer, made inside the database, stays in its store
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-postprocess 4681 4682 3
HOOK_PORT=${PAYFLOW_TEST_HOOK_PORT:-4683}
export PAYFLOW_QUEUE_URL
PAYFLOW_QUEUE_URL=$(wk_queue_url payment-completed)
export PAYFLOW_DRAIN_SECONDS=2

pp_cleanup() {
	q -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS pp_test CASCADE" >/dev/null 2>&1 || true
	wk_cleanup
}
trap pp_cleanup EXIT

q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '3 seconds'" >/dev/null
q >/dev/null <<'SQL'
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS pp_test CASCADE;
CREATE SCHEMA pp_test;
CREATE TABLE pp_test.hook_calls (operation_id text NOT NULL, at timestamptz NOT NULL DEFAULT now());
-- non-transactional: counts every try, rolled back or not
CREATE SEQUENCE pp_test.flaky_tries;
CREATE FUNCTION pp_test.custom_hook(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO pp_test.hook_calls (operation_id) VALUES (custom_hook.operation_id);
	IF payment_result ->> 'charge_id' LIKE 'ch_flaky%' AND nextval('pp_test.flaky_tries') <= 2 THEN
		RAISE EXCEPTION 'could not serialize access' USING ERRCODE = 'serialization_failure';
	END IF;
	IF payment_result ->> 'charge_id' LIKE 'ch_reject%' THEN
		RAISE EXCEPTION 'customer % has no billing address', payment_result ->> 'customer';
	END IF;
	RETURN jsonb_build_object('operationId', operation_id, 'lines', jsonb_build_array('custom'),
							  'totalCents', (payment_result ->> 'amount')::numeric * 100,
							  'chargeRef', payment_result ->> 'charge_id');
END
$$;
CREATE FUNCTION pp_test.wrong_signature(operation_id text) RETURNS jsonb
	LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;
SQL

wk_start_relay

# pp_start NAME VAR=value...: a postprocess worker on payment-completed
pp_start() {
	local name=$1
	shift
	env PAYFLOW_WORKER_ID="$name-$WK_RUN" "$@" workers/bin/payflow-worker --role postprocess \
		>"$WK_DIR/$name.log" 2>&1 &
	WK_PIDS+=($!)
	printf -v "WK_PID_$name" '%s' "$!"
	pf_wait_for 10 grep -q '"payflow-worker started"' "$WK_DIR/$name.log" ||
		echo "# worker $name did not say it started"
}

# pp_stop NAME: SIGTERM, drained
pp_stop() {
	local pid_var="WK_PID_$1"
	kill -TERM "${!pid_var}" 2>/dev/null || true
	wait "${!pid_var}" 2>/dev/null || true
}

# pp_paid PAYMENT_ID CHARGE_ID [CUSTOMER]: an operation whose payment a stand-in
# payer completed with a result of our choice; prints the operation id
pp_paid() {
	local op
	op=$(wk_submit "$1" "{\"amount\": 12.50, \"currency\": \"EUR\", \"customer\": \"${3:-C-1}\", \"card\": \"4111111111111111\"}")
	q -c "SELECT payflow.claim_step('$op', 'PROCESS_PAYMENT', 'payer-$WK_RUN', 60)" \
		-c "SELECT payflow.complete_step('$op', 'PROCESS_PAYMENT', 'payer-$WK_RUN',
				'{\"charge_id\": \"$2\", \"status\": \"CHARGED\", \"amount\": 12.50, \"customer\": \"${3:-C-1}\"}')" \
		>/dev/null
	echo "$op"
}

step_of() { q -c "SELECT $3 FROM payflow.steps WHERE operation_id = '$1' AND step_name = '$2'"; }
invoice_input() { q -c "SELECT convert_from(payflow.payload_get(input_ref), 'UTF8') FROM payflow.steps
						WHERE operation_id = '$1' AND step_name = 'CREATE_INVOICE'"; }
dead_letter() { q -c "SELECT error->>'code' FROM payflow.dead_letters WHERE operation_id = '$1' AND source = 'step'"; }
path_of() {
	# in history's order (the claim and the completion of a SQL hook's step share one timestamp: one transaction)
	q -c "SELECT string_agg(coalesce(from_status, '-') || '>' || to_status, ' ' ORDER BY n)
		  FROM payflow.history('$1') WITH ORDINALITY AS h(at, from_status, to_status, reason, actor, n)"
}
PATH_OK="->PENDING PENDING>PAYMENT_PROCESSING PAYMENT_PROCESSING>PAYMENT_COMPLETED PAYMENT_COMPLETED>POST_PROCESSING POST_PROCESSING>INVOICE_PENDING"

p=pp-$WK_RUN

# ---- settings that cannot work stop start-up with one line ----
rc=0
out=$(PAYFLOW_POSTPROCESS_FUNCTION=payflow.default_postprocess workers/bin/payflow-worker --role postprocess 2>&1) || rc=$?
pf_eq "start-up: a hook without argument types is refused (exit 2, one line)" \
	"2|payflow-worker: invalid PAYFLOW_POSTPROCESS_FUNCTION: expected a function with its argument types, e.g. payflow.default_postprocess(text,jsonb)" \
	"$rc|$out"
rc=0
out=$(PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)' PAYFLOW_POSTPROCESS_URL=http://127.0.0.1:1/pp \
	workers/bin/payflow-worker --role postprocess 2>&1) || rc=$?
pf_eq "start-up: both hooks at once are refused" \
	"2|payflow-worker: invalid PAYFLOW_POSTPROCESS_URL: set PAYFLOW_POSTPROCESS_FUNCTION or PAYFLOW_POSTPROCESS_URL, not both" "$rc|$out"

# ---- the default hook ----
pp_start sqldefault PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
default_ops=()
for i in 1 2 3; do
	default_ops+=("$(pp_paid "$p-default-$i" "ch_default_$i" "C-$i")")
done
ok=0
paths=0
inputs=0
for i in 1 2 3; do
	op=${default_ops[$((i - 1))]}
	wk_wait_status "$op" INVOICE_PENDING 20 && ok=$((ok + 1))
	[ "$(path_of "$op")" = "$PATH_OK" ] && paths=$((paths + 1))
	[ "$(q -c "SELECT input = jsonb_build_object('operationId', '$op', 'paymentId', '$p-default-$i', 'amount', 12.50,
				'currency', 'EUR', 'customer', 'C-$i', 'paymentReference', 'ch_default_$i')
			   FROM (SELECT '$(invoice_input "$op")'::jsonb AS input) x")" = t ] && inputs=$((inputs + 1))
done
pf_eq "default hook: 3 operations INVOICE_PENDING" 3 "$ok"
pf_eq "default hook: history ... PAYMENT_COMPLETED -> POST_PROCESSING -> INVOICE_PENDING" 3 "$paths"
pf_eq "default hook: invoice input from details and charge (no card number)" 3 "$inputs"
pf_eq "default hook: claimed, run and completed in one transaction (one timestamp for both status changes)" 1 \
	"$(q -c "SELECT count(DISTINCT at) FROM payflow.history('${default_ops[0]}')
			  WHERE to_status IN ('POST_PROCESSING', 'INVOICE_PENDING')")"
pf_ok "default hook: ... said by the worker" wk_log_has sqldefault "${default_ops[0]}" '"oneTransaction":true'

op=${default_ops[0]}
pf_eq "default hook: CREATE_INVOICE waits with the invoice input in the pg store" \
	"PENDING|pg|payments/$op/invoice-input.json" \
	"$(step_of "$op" CREATE_INVOICE "status, input_ref->>'store', input_ref->>'key'")"
has_invoice_requested() {
	[ "$(q -c "SELECT count(*) FROM payflow.outbox_published
			   WHERE operation_id = '$op' AND event_type = 'InvoiceRequested' AND destination = 'invoice-requests'")" = 1 ]
}
pf_ok "default hook: InvoiceRequested published to invoice-requests" pf_wait_for 10 has_invoice_requested
pf_eq "default hook: one attempt, done" "1|SUCCEEDED" "$(step_of "$op" POST_PROCESS "attempt || '|' || status")"
pf_ok "default hook: the worker logged the completion" wk_log_has sqldefault "$op" '"msg":"step completed"'
pp_stop sqldefault

# ---- a custom hook ----
pp_start sqlcustom PAYFLOW_POSTPROCESS_FUNCTION='pp_test.custom_hook(text, jsonb)'
custom1=$(pp_paid "$p-custom-1" ch_custom_1)
custom2=$(pp_paid "$p-custom-2" ch_custom_2)
flaky=$(pp_paid "$p-flaky" ch_flaky)
reject=$(pp_paid "$p-reject" ch_reject C-404)
pf_ok "custom hook: INVOICE_PENDING" wk_wait_status "$custom1" INVOICE_PENDING 20
pf_ok "custom hook: second one too" wk_wait_status "$custom2" INVOICE_PENDING 20
pf_eq "custom hook: its answer is the invoice input" \
	"{\"lines\": [\"custom\"], \"chargeRef\": \"ch_custom_1\", \"totalCents\": 1250.00, \"operationId\": \"$custom1\"}" \
	"$(invoice_input "$custom1")"
pf_eq "custom hook: its write committed with the step, once per operation" "1|1" \
	"$(q -c "SELECT count(*) FILTER (WHERE operation_id = '$custom1') || '|' || count(*) FILTER (WHERE operation_id = '$custom2')
			 FROM pp_test.hook_calls")"
pf_ok "custom hook, 40001 twice: INVOICE_PENDING" wk_wait_status "$flaky" INVOICE_PENDING 30
pf_eq "custom hook, 40001 twice: three tries in attempt 1, the failed tries' writes rolled back" "3|1|1" \
	"$(q -c "SELECT (SELECT last_value FROM pp_test.flaky_tries) || '|' || count(*) FROM pp_test.hook_calls
			 WHERE operation_id = '$flaky'")|$(step_of "$flaky" POST_PROCESS attempt)"
pf_ok "custom hook, RAISE: FAILED" wk_wait_status "$reject" FAILED 20
pf_eq "custom hook, RAISE: one attempt, a dead letter with P0001 and the hook's message" \
	"1|P0001|customer C-404 has no billing address|postprocess" \
	"$(q -c "SELECT d.attempts || '|' || (d.error->>'code') || '|' || (d.error->>'message') || '|' || (d.error->>'source')
			 FROM payflow.dead_letters d WHERE d.operation_id = '$reject' AND d.source = 'step'")"
pf_eq "custom hook, RAISE: its write rolled back, no invoice step" "0|0" \
	"$(q -c "SELECT (SELECT count(*) FROM pp_test.hook_calls WHERE operation_id = '$reject') || '|' ||
				 (SELECT count(*) FROM payflow.steps WHERE operation_id = '$reject' AND step_name = 'CREATE_INVOICE')")"
pp_stop sqlcustom

# ---- a hook of the wrong signature ----
pp_start sqlbad PAYFLOW_POSTPROCESS_FUNCTION='pp_test.wrong_signature(text)'
bad=$(pp_paid "$p-badhook" ch_badhook)
pf_ok "wrong signature: FAILED" wk_wait_status "$bad" FAILED 20
pf_eq "wrong signature: 22023 after one attempt, no retry" "1|FAILED|22023" \
	"$(step_of "$bad" POST_PROCESS "attempt || '|' || status || '|' || (last_error->>'code')")"
pf_eq "wrong signature: a dead letter with 22023" 22023 "$(dead_letter "$bad")"
pf_ok "wrong signature: the reason is in the error" \
	test "$(q -c "SELECT error->>'message' LIKE '%must take (text, jsonb) and return jsonb%' FROM payflow.operations WHERE id = '$bad'")" = t
pf_eq "wrong signature: status() says FAILED with the error" "FAILED|22023" \
	"$(q -c "SELECT payflow.status('$bad')->>'status' || '|' || (payflow.status('$bad')->'error'->>'code')")"
pp_stop sqlbad

# ---- the HTTP hook ----
cat >"$WK_DIR/hook.mjs" <<'JS'
// A post-processing hook over HTTP for the test: 503 + Retry-After once for
// charges ch_flaky*, 400 for ch_bad*, a 2xx that is not JSON for ch_text*,
// else the invoice input, with the amount copied as written in the request.
import http from "node:http";
import { appendFileSync } from "node:fs";
const [port, logFile] = process.argv.slice(2);
const tries = new Map();
http.createServer((req, res) => {
	let body = "";
	req.on("data", (chunk) => { body += chunk; });
	req.on("end", () => {
		const key = req.headers["idempotency-key"] ?? null;
		let doc = null;
		try { doc = JSON.parse(body); } catch { /* answered below */ }
		const charge = doc?.paymentResult?.charge_id ?? "";
		const n = (tries.get(key) ?? 0) + 1;
		tries.set(key, n);
		let status = 200;
		let text;
		const headers = { "Content-Type": "application/json" };
		if (charge.startsWith("ch_flaky") && n === 1) {
			status = 503;
			headers["Retry-After"] = "1";
			text = '{"error":{"message":"hook busy"}}';
		} else if (charge.startsWith("ch_bad")) {
			status = 400;
			text = '{"error":{"message":"no billing address"}}';
		} else if (charge.startsWith("ch_text")) {
			headers["Content-Type"] = "text/plain";
			text = "thanks";
		} else {
			const amount = body.match(/"amount":\s*([0-9.]+)/)?.[1] ?? "null";
			text = `{"operationId": ${JSON.stringify(doc.operationId)}, "amount": ${amount}, "currency": "EUR",` +
				` "source": "http-hook", "paymentReference": ${JSON.stringify(charge)}}`;
		}
		appendFileSync(logFile, `${JSON.stringify({ at: Date.now(), key, status, body, contentType: req.headers["content-type"],
			authorization: req.headers.authorization ?? null })}\n`);
		res.writeHead(status, headers);
		res.end(text);
	});
}).listen(Number(port), "127.0.0.1", () => console.log(`hook listening on ${port}`));
JS
node "$WK_DIR/hook.mjs" "$HOOK_PORT" "$WK_DIR/hook-requests.jsonl" >"$WK_DIR/hook.log" 2>&1 &
WK_PIDS+=($!)
pf_wait_for 10 grep -q listening "$WK_DIR/hook.log" || echo "# the hook server did not start"

PP_TOKEN="Bearer pp-token-$WK_RUN-s3cr3t"
pp_start http PAYFLOW_POSTPROCESS_URL="http://127.0.0.1:$HOOK_PORT/postprocess" PAYFLOW_POSTPROCESS_TIMEOUT_MS=5000 \
	PAYFLOW_POSTPROCESS_AUTHORIZATION="$PP_TOKEN"
h1=$(pp_paid "$p-http-1" ch_http_1)
h2=$(pp_paid "$p-http-2" ch_http_2)
hflaky=$(pp_paid "$p-http-flaky" ch_flaky_http)
hbad=$(pp_paid "$p-http-bad" ch_bad_http)
htext=$(pp_paid "$p-http-text" ch_text_http)

hook_requests() { grep -cF "\"key\":\"$1:post_process\"" "$WK_DIR/hook-requests.jsonl" || true; }
pf_ok "HTTP hook: INVOICE_PENDING" wk_wait_status "$h1" INVOICE_PENDING 20
pf_ok "HTTP hook: second one too" wk_wait_status "$h2" INVOICE_PENDING 20
pf_eq "HTTP hook: its answer stored as it came (12.50 stays 12.50)" \
	"{\"amount\": 12.50, \"source\": \"http-hook\", \"currency\": \"EUR\", \"operationId\": \"$h1\", \"paymentReference\": \"ch_http_1\"}" \
	"$(invoice_input "$h1")"
request=$(grep -F "\"key\":\"$h1:post_process\"" "$WK_DIR/hook-requests.jsonl" | head -n 1)
pf_eq "HTTP hook: one JSON POST with Idempotency-Key <op>:post_process" "1|application/json" \
	"$(hook_requests "$h1")|$(echo "$request" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).contentType))')"
pf_eq "HTTP hook: body {operationId, paymentResult} with the payment result as stored" \
	"{\"operationId\":\"$h1\",\"paymentResult\":{\"amount\": 12.50, \"status\": \"CHARGED\", \"customer\": \"C-1\", \"charge_id\": \"ch_http_1\"}}" \
	"$(echo "$request" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).body))')"

pf_eq "HTTP hook: PAYFLOW_POSTPROCESS_AUTHORIZATION sent as the Authorization header" "$PP_TOKEN" \
	"$(echo "$request" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).authorization))')"
pf_ok "HTTP hook: the token is in no log line of the worker" bash -c "! grep -qF 'pp-token-$WK_RUN' '$WK_DIR/http.log'"
pf_ok "HTTP hook, 503 then 200: INVOICE_PENDING" wk_wait_status "$hflaky" INVOICE_PENDING 30
pf_eq "HTTP hook, 503 then 200: attempt 2, the 503 kept as the last error with Retry-After" "2|http_503|1" \
	"$(step_of "$hflaky" POST_PROCESS "attempt || '|' || (last_error->>'code') || '|' || (last_error->>'retryAfterSeconds')")"
pf_eq "HTTP hook, 503 then 200: two calls with the same key" 2 "$(hook_requests "$hflaky")"
gap=$(grep -F "\"key\":\"$hflaky:post_process\"" "$WK_DIR/hook-requests.jsonl" |
	node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const t=s.trim().split("\n").map(l=>JSON.parse(l).at);console.log(t[1]-t[0])})')
pf_ok "HTTP hook, 503 then 200: the retry came after Retry-After (${gap} ms >= 1000)" test "$gap" -ge 1000

pf_ok "HTTP hook, 400: FAILED" wk_wait_status "$hbad" FAILED 20
pf_eq "HTTP hook, 400: one call, a dead letter with http_400 and the hook's message" \
	"1|http_400|postprocess answered HTTP 400: no billing address" \
	"$(hook_requests "$hbad")|$(q -c "SELECT (error->>'code') || '|' || (error->>'message') FROM payflow.dead_letters
									 WHERE operation_id = '$hbad' AND source = 'step'")"
pf_ok "HTTP hook, 2xx not JSON: FAILED" wk_wait_status "$htext" FAILED 20
pf_eq "HTTP hook, 2xx not JSON: invalid_answer, permanent" "1|invalid_answer" \
	"$(step_of "$htext" POST_PROCESS "attempt || '|' || (last_error->>'code')")"
pp_stop http
pf_ok "HTTP hook: the worker drained and exited 0 on SIGTERM" grep -q '"payflow-worker stopped".*"clean":true' "$WK_DIR/http.log"

# ---- PAYFLOW_STORE=s3 ----
s3_get() {
	node --input-type=module -e '
		import { writeFileSync } from "node:fs";
		import { clientCredentials, clientRegion, requireFromCache } from "./test/emulator/emulator-config.mjs";
		const { S3Client, GetObjectCommand } = requireFromCache("@aws-sdk/client-s3");
		const [key, file] = process.argv.slice(1);
		const s3 = new S3Client({ endpoint: process.env.AWS_ENDPOINT_URL, region: clientRegion(),
								  credentials: clientCredentials(), forcePathStyle: true });
		const out = await s3.send(new GetObjectCommand({ Bucket: process.env.PAYFLOW_S3_BUCKET, Key: key }));
		writeFileSync(file, await out.Body.transformToByteArray());
	' "$@"
}
pp_start https3 PAYFLOW_POSTPROCESS_URL="http://127.0.0.1:$HOOK_PORT/postprocess" PAYFLOW_STORE=s3
hs3=$(pp_paid "$p-http-s3" ch_http_s3)
pf_ok "s3 store, HTTP hook: INVOICE_PENDING" wk_wait_status "$hs3" INVOICE_PENDING 20
pf_eq "s3 store, HTTP hook: no Authorization header without the setting" null \
	"$(grep -F "\"key\":\"$hs3:post_process\"" "$WK_DIR/hook-requests.jsonl" | head -n 1 |
		node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s).authorization))')"
pf_eq "s3 store, HTTP hook: the invoice input's reference names S3" "s3|payments/$hs3/invoice-input.attempt-1.json" \
	"$(step_of "$hs3" CREATE_INVOICE "(input_ref->>'store') || '|' || (input_ref->>'key')")"
s3_get "payments/$hs3/invoice-input.attempt-1.json" "$WK_DIR/invoice-input.json" || true
pf_eq "s3 store, HTTP hook: the object is the hook's answer byte for byte" \
	"{\"operationId\": \"$hs3\", \"amount\": 12.50, \"currency\": \"EUR\", \"source\": \"http-hook\", \"paymentReference\": \"ch_http_s3\"}" \
	"$(cat "$WK_DIR/invoice-input.json" 2>/dev/null)"
pf_eq "s3 store, HTTP hook: its checksum and size match the reference" \
	"$(pf_payload_checksum "$WK_DIR/invoice-input.json")|$(wc -c <"$WK_DIR/invoice-input.json" | tr -d ' ')" \
	"$(step_of "$hs3" CREATE_INVOICE "(input_ref->>'checksum') || '|' || (input_ref->>'size')")"
pp_stop https3
pp_start sqls3 PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)' PAYFLOW_STORE=s3
ss3=$(pp_paid "$p-sql-s3" ch_sql_s3)
pf_ok "s3 store, SQL hook: INVOICE_PENDING" wk_wait_status "$ss3" INVOICE_PENDING 20
pf_eq "s3 store, SQL hook: the answer stays in the database's store" "pg|payments/$ss3/invoice-input.json" \
	"$(step_of "$ss3" CREATE_INVOICE "(input_ref->>'store') || '|' || (input_ref->>'key')")"
pp_stop sqls3

pf_eq "no operation left in between" 0 \
	"$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND status NOT IN ('INVOICE_PENDING', 'FAILED')")"
pf_done
