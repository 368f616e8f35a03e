#!/bin/bash
# payflow-api over loopback with curl: every endpoint and every error.
#
#   POST /payments   202 + Location + Retry-After, idempotent replay, 409 PF002,
#                    400 / 422 / 413 (declared, chunked, PF007), 401 + WWW-Authenticate
#   S3 claim check   a body above the threshold goes to S3 (emulator): the
#                    object read back through S3 is the details as written
#                    and hashes to the reference's checksum
#   GET /operations/{id}   200 (+ Retry-After until terminal), 404
#   /metrics /healthz /readyz, 404/405, the pool's 503, SIGTERM drains,
#   /readyz 503 while PostgreSQL is down and 200 again after it restarts,
#   invalid settings stop start-up with one line, no key or details in logs
#   contract         every answer above matches the OpenAPI document; a stricter
#                    copy of it finds mismatches in the same answers
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init api-http
KEY=$(api_key "t-$API_RUN")
P=$API_RUN

# the S3 emulator, for the claim-check instance
export PAYFLOW_EMULATOR_PORT=4820 PAYFLOW_EMULATOR_BACKEND_PORT=4821 PAYFLOW_EMULATOR_RUN_DIR=$API_DIR/emulator
api_test_cleanup() { test/emulator/stop.sh >/dev/null 2>&1 || true; }
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$API_DIR/emulator-start.log")" || { cat "$API_DIR/emulator-start.log"; exit 1; }

api_start main 4800
MAIN_PID=$API_PID

# ---- access
pf_eq "no key: 401" 401 "$(post_payment "" "$P-1" '{"amount":1}')"
pf_eq "401 names the scheme in WWW-Authenticate" 'Bearer realm="payflow"' "$(header WWW-Authenticate)"
pf_eq "401 is a JSON error" unauthorized "$(json_field error.code)"
pf_eq "unknown key: 401" 401 "$(post_payment "pfk_0000000000000000000000000000000000000000000000000000000000000000" "$P-1" '{"amount":1}')"
pf_eq "unknown key: GET is 401 too" 401 "$(http GET "$API_URL/operations/pay_01M8MXX8MVKW6A5CDXYRQQ8026" "nope")"

# ---- POST /payments
pf_eq "POST /payments: 202" 202 "$(post_payment "$KEY" "$P-1" '{"amount": 12.50, "currency": "EUR", "card": "card-4111-secret"}' -H "X-Correlation-Id: corr-$P")"
op1=$(json_field operationId)
pf_eq "202 body: status PENDING" PENDING "$(json_field status)"
pf_eq "Location names the operation" "/operations/$op1" "$(header Location)"
pf_eq "Retry-After on 202" 1 "$(header Retry-After)"
pf_eq "the correlation id comes back" "corr-$P" "$(header X-Correlation-Id)"
pf_eq "the operation is the tenant's, with the details as written" "t-$API_RUN|corr-$P|12.50" \
	"$(q -c "SELECT o.tenant, o.correlation_id, convert_from(p.content, 'UTF8')::jsonb->>'amount'
			  FROM payflow.operations o JOIN payflow.payloads p ON payflow._payload_operation(p.key) = o.id WHERE o.id = '$op1'")"
pf_eq "same key, same body (other spacing): 202" 202 "$(post_payment "$KEY" "$P-1" '{"amount":12.50,"currency":"EUR","card":"card-4111-secret"}')"
pf_eq "... and the same operation" "$op1" "$(json_field operationId)"
pf_eq "same key, other details: 409" 409 "$(post_payment "$KEY" "$P-1" '{"amount": 99}')"
pf_eq "409 names PF002" PF002 "$(json_field error.code)"
pf_eq "Idempotency-Key header: 202" 202 "$(post_payment "$KEY" "$P-2" '{"amount": 2}' -H "Idempotency-Key: order-$P")"
op2=$(json_field operationId)
pf_eq "the key is the header's" "order-$P" "$(q -c "SELECT idempotency_key FROM payflow.operations WHERE id = '$op2'")"
pf_eq "same Idempotency-Key, another payment: 409 PF002" "409 PF002" \
	"$(post_payment "$KEY" "$P-3" '{"amount": 2}' -H "Idempotency-Key: order-$P") $(json_field error.code)"
pf_eq "a number beyond 64 bits is valid JSON: 202" 202 "$(post_payment "$KEY" "$P-bigint" '{"amount": 123456789012345678901234567890}')"
pf_eq "... and kept as written" "123456789012345678901234567890" \
	"$(q -c "SELECT convert_from(content, 'UTF8')::jsonb->>'amount' FROM payflow.payloads WHERE payflow._payload_operation(key) = '$(json_field operationId)'")"
pf_eq "malformed JSON: 400" "400 malformed_json" "$(post_payment "$KEY" "$P-4" '{"amount": ' ) $(json_field error.code)"
pf_eq "empty body: 400" 400 "$(http POST "$API_URL/payments" "$KEY" --data-binary '')"
pf_eq "repeated member: 400" 400 "$(http POST "$API_URL/payments" "$KEY" --data-binary '{"paymentId":"a","paymentId":"b","details":{}}')"
pf_eq "a priority: 202, kept with the operation" "202 7" \
	"$(http POST "$API_URL/payments" "$KEY" --data-binary "{\"paymentId\":\"$P-prio\",\"details\":{\"amount\":1},\"priority\":7}") $(
		q -c "SELECT priority FROM payflow.operations WHERE id = '$(json_field operationId)'")"
# W3C trace context: the operation continues the caller's trace under the
# request's own span; none, or one that does not parse, starts a new trace
# (never a 4xx: the recommendation says to restart)
TRACE=4bf92f3577b34da6a3ce929d0e0e4736
pf_eq "traceparent: 202, the operation in the caller's trace" "202 $TRACE" \
	"$(post_payment "$KEY" "$P-trace" '{"amount":1}' -H "traceparent: 00-$TRACE-00f067aa0ba902b7-01" \
		-H "tracestate: congo=t61rcWkgMzE") $(q -c "SELECT payflow._trace_id(traceparent) FROM payflow.operations
												  WHERE id = '$(json_field operationId)'")"
op_trace=$(json_field operationId)
pf_ok "... under the request's span, not the caller's" \
	test "$(q -c "SELECT substr(payflow._traceparent_text(traceparent), 37, 16) FROM payflow.operations WHERE id = '$op_trace'")" != 00f067aa0ba902b7
pf_eq "GET /operations/{id} names the trace" "$TRACE" "$(http GET "$API_URL/operations/$op_trace" "$KEY" >/dev/null; json_field traceId)"
pf_ok "the API's log line of that payment names the trace and its span" \
	grep -q "\"operationId\":\"$op_trace\".*\"traceId\":\"$TRACE\",\"spanId\":\"[0-9a-f]\{16\}\"" "$API_DIR"/api-main.log
for bad_trace in "00-$TRACE-0000000000000000-01" "not a trace" "ff-$TRACE-00f067aa0ba902b7-01"; do
	pf_eq "traceparent '$bad_trace': 202, a new trace" "202 new" \
		"$(post_payment "$KEY" "$P-trace-$RANDOM" '{"amount":1}' -H "traceparent: $bad_trace") $(
			q -c "SELECT CASE WHEN payflow._traceparent_text(traceparent) ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-01$'
							  AND payflow._trace_id(traceparent) <> '$TRACE'
						 THEN 'new' ELSE payflow._traceparent_text(traceparent) END FROM payflow.operations WHERE id = '$(json_field operationId)'")"
done
for bad in '[1,2]' '{"details":{}}' '{"paymentId":"x"}' '{"paymentId":7,"details":{}}' \
	'{"paymentId":"x","details":"amount=1"}' '{"paymentId":"x","details":{},"extra":1}' '{"paymentId":"","details":{}}' \
	'{"paymentId":"x","details":{},"priority":101}' '{"paymentId":"x","details":{},"priority":1.5}' \
	'{"paymentId":"x","details":{},"priority":"7"}'; do
	pf_eq "422 for $bad" "422" "$(http POST "$API_URL/payments" "$KEY" --data-binary "$bad")"
done
pf_eq "422 is a JSON error with a message" "invalid_request" \
	"$(http POST "$API_URL/payments" "$KEY" --data-binary '{"paymentId":7,"details":{}}' >/dev/null; json_field error.code)"
pf_eq "an empty paymentId is the database's 22023" 22023 \
	"$(http POST "$API_URL/payments" "$KEY" --data-binary '{"paymentId":"","details":{}}' >/dev/null; json_field error.code)"

# ---- 413: declared, chunked, and details above payflow.payload_max_bytes
head -c 1100000 /dev/zero | tr '\0' 'x' >"$API_DIR/big.txt"
printf '{"paymentId":"%s-big","details":{"blob":"' "$P" >"$API_DIR/huge.json"
cat "$API_DIR/big.txt" >>"$API_DIR/huge.json"
printf '"}}' >>"$API_DIR/huge.json"
pf_eq "body over PAYFLOW_API_MAX_BODY: 413" "413 payload_too_large" \
	"$(http POST "$API_URL/payments" "$KEY" --data-binary @"$API_DIR/huge.json") $(json_field error.code)"
pf_eq "chunked body over the limit: 413" 413 \
	"$(http POST "$API_URL/payments" "$KEY" -H 'Transfer-Encoding: chunked' --data-binary @"$API_DIR/huge.json")"
head -c 300000 /dev/zero | tr '\0' 'y' >"$API_DIR/mid.txt"
printf '{"paymentId":"%s-mid","details":{"blob":"%s"}}' "$P" "$(cat "$API_DIR/mid.txt")" >"$API_DIR/mid.json"
pf_eq "details above payflow.payload_max_bytes without S3: 413 PF007" "413 PF007" \
	"$(http POST "$API_URL/payments" "$KEY" --data-binary @"$API_DIR/mid.json") $(json_field error.code)"
pf_ok "the API still answers after the oversize bodies" api_healthy "$API_URL"

# ---- GET /operations/{id}
pf_eq "GET /operations/{id}: 200" 200 "$(http GET "$API_URL/operations/$op1" "$KEY")"
pf_eq "the status document" "$op1|$P-1|PENDING|corr-$P" \
	"$(echo "$(json_field operationId)|$(json_field paymentId)|$(json_field status)|$(json_field correlationId)")"
pf_eq "Retry-After while not terminal" 1 "$(header Retry-After)"
q -c "BEGIN" -c "SELECT payflow.authenticate('$KEY')" -c "SELECT payflow.cancel('$op2', 'test')" -c "COMMIT" >/dev/null
pf_eq "a terminal operation: 200" "200 CANCELLED" "$(http GET "$API_URL/operations/$op2" "$KEY") $(json_field status)"
pf_eq "... without Retry-After" "" "$(header Retry-After)"
pf_eq "unknown id: 404 PF003" "404 PF003" "$(http GET "$API_URL/operations/pay_01M8MXX8MVKW6A5CDXYRQQ8099" "$KEY") $(json_field error.code)"
pf_eq "malformed id: 404" 404 "$(http GET "$API_URL/operations/not-an-id" "$KEY")"
pf_eq "unknown path: 404 JSON" "404 not_found" "$(http GET "$API_URL/nothing" "") $(json_field error.code)"
pf_eq "wrong method: 405 with Allow" "405 POST" "$(http GET "$API_URL/payments" "$KEY") $(header Allow)"
pf_eq "/healthz" 200 "$(http GET "$API_URL/healthz" "")"
pf_eq "/readyz" "200 ready" "$(http GET "$API_URL/readyz" "") $(json_field status)"
big_header=$(head -c 40000 /dev/zero | tr '\0' 'h')
code=$(http GET "$API_URL/healthz" "" -H "X-Big: $big_header")
pf_ok "headers over PAYFLOW_API_MAX_HEADER_BYTES are refused ($code)" test "$code" -ge 400 -a "$code" -lt 500

# ---- the S3 claim check (a second instance with PAYFLOW_STORE=s3)
api_start s3 4801 PAYFLOW_STORE=s3 PAYFLOW_API_S3_THRESHOLD=1024
S3_URL=$API_URL
# details as written, with spacing and a number that must not change
details=$(printf '{ "amount": 12.50, "currency": "EUR", "note": "%s" }' "$(head -c 5000 /dev/zero | tr '\0' 'n')")
printf '%s' "$details" >"$API_DIR/details.json"
printf '{"paymentId": "%s-s3", "details": %s}' "$P" "$details" >"$API_DIR/s3.json"
pf_eq "a body above the threshold: 202" 202 "$(http POST "$S3_URL/payments" "$KEY" --data-binary @"$API_DIR/s3.json")"
op_s3=$(json_field operationId)
expected_sum=$(pf_payload_checksum "$API_DIR/details.json")
pf_eq "its reference names S3, the details' keyed checksum and size" \
	"s3|$expected_sum|$(wc -c <"$API_DIR/details.json" | tr -d ' ')" \
	"$(q -c "SELECT payflow._request_ref(id, request_ref, request_mac, request_size)->>'store', payflow._request_ref(id, request_ref, request_mac, request_size)->>'checksum', payflow._request_ref(id, request_ref, request_mac, request_size)->>'size' FROM payflow.operations WHERE id = '$op_s3'")"
pf_eq "nothing of it in PostgreSQL" 0 "$(q -c "SELECT count(*) FROM payflow.payloads WHERE payflow._payload_operation(key) = '$op_s3'")"
s3_key=$(q -c "SELECT payflow._request_ref(id, request_ref, request_mac, request_size)->>'key' FROM payflow.operations WHERE id = '$op_s3'")
# issue 26, M4: the object is named by the keyed checksum, never by a
# plain SHA-256 of the request, which would name its card number
pf_eq "its S3 key is its keyed checksum" "$(pf_request_key "$API_DIR/details.json")" "$s3_key"
pf_ok "... in which no plain sha256 of the details appears" \
	bash -c '! grep -qF "$(sha256sum "$1" | cut -d" " -f1)" <<<"$2"' _ "$API_DIR/details.json" "$s3_key"
node --input-type=module -e '
	import { writeFileSync } from "node:fs";
	import { clientCredentials, clientRegion, requireFromCache } from "./test/emulator/emulator-config.mjs";
	const { S3Client, GetObjectCommand } = requireFromCache("@aws-sdk/client-s3");
	const [key, file] = process.argv.slice(1);
	const s3 = new S3Client({ endpoint: process.env.AWS_ENDPOINT_URL, region: clientRegion(),
							  credentials: clientCredentials(), forcePathStyle: true });
	const out = await s3.send(new GetObjectCommand({ Bucket: process.env.PAYFLOW_S3_BUCKET, Key: key }));
	writeFileSync(file, await out.Body.transformToByteArray());
' "$s3_key" "$API_DIR/readback.json"
pf_eq "read back through S3: its keyed checksum is the reference's" "$expected_sum" "$(pf_payload_checksum "$API_DIR/readback.json")"
pf_ok "read back through S3: the details byte for byte" cmp -s "$API_DIR/details.json" "$API_DIR/readback.json"
pf_eq "the same big request again: the same operation" "202 $op_s3" \
	"$(http POST "$S3_URL/payments" "$KEY" --data-binary @"$API_DIR/s3.json") $(json_field operationId)"
# the scanner that hashes details while they arrive must not be fooled:
# "details" inside a string, nested members named details, an escaped name
tricky_details='{"details": {"x": "\"details\": {"}, "n": [1, {"details": 2}], "pad": "'$(head -c 3000 /dev/zero | tr '\0' 'p')'"}'
printf '%s' "$tricky_details" >"$API_DIR/tricky.details"
printf '{"paymentId": "%s", "details": %s}' "$P-\\\"details\\\":{tricky" "$tricky_details" >"$API_DIR/tricky.json"
pf_eq "tricky body, sent chunked: 202" 202 \
	"$(http POST "$S3_URL/payments" "$KEY" -H 'Transfer-Encoding: chunked' --data-binary @"$API_DIR/tricky.json")"
pf_eq "... the checksum is that of the details exactly" "$(pf_payload_checksum "$API_DIR/tricky.details")" \
	"$(q -c "SELECT payflow._request_ref(id, request_ref, request_mac, request_size)->>'checksum' FROM payflow.operations WHERE id = '$(json_field operationId)'")"
printf '{"paymentId": "%s-escaped", "d\\u0065tails": %s}' "$P" "$tricky_details" >"$API_DIR/escaped.json"
pf_eq "a member name written with escapes: 202" 202 "$(http POST "$S3_URL/payments" "$KEY" --data-binary @"$API_DIR/escaped.json")"
pf_eq "... the same checksum" "$(pf_payload_checksum "$API_DIR/tricky.details")" \
	"$(q -c "SELECT payflow._request_ref(id, request_ref, request_mac, request_size)->>'checksum' FROM payflow.operations WHERE id = '$(json_field operationId)'")"
pf_eq "a small body on the S3 instance stays in PostgreSQL" 202 "$(API_URL=$S3_URL post_payment "$KEY" "$P-small" '{"amount": 1}')"
pf_eq "... (pg reference)" pg "$(q -c "SELECT payflow._request_ref(id, request_ref, request_mac, request_size)->>'store' FROM payflow.operations WHERE id = '$(json_field operationId)'")"
pf_eq "details of 300 kB go to S3 on this instance (no PF007)" 202 "$(http POST "$S3_URL/payments" "$KEY" --data-binary @"$API_DIR/mid.json")"
pf_eq "an unknown key uploads nothing: 401 before S3" 401 "$(http POST "$S3_URL/payments" "bad-key-123" --data-binary @"$API_DIR/s3.json")"
api_stop "$API_PID"
API_URL=http://127.0.0.1:4800

# ---- /metrics moves
before=$(metric 'payflow_api_requests_total{route="/payments",status="202"}')
post_payment "$KEY" "$P-m" '{"amount": 3}' >/dev/null
after=$(metric 'payflow_api_requests_total{route="/payments",status="202"}')
pf_eq "/metrics: the 202 counter moved by one" "$((before + 1))" "$after"
pf_ok "/metrics: 409 and 422 counted" test "$(metric 'payflow_api_requests_total{route="/payments",status="409"}')" -ge 2
pf_ok "/metrics: latency histogram" test "$(metric 'payflow_api_request_duration_seconds_count{route="/payments"}')" -ge 10
pf_eq "/metrics: payflow.metrics() flattened" 1 "$(metric payflow_up)"
pf_ok "/metrics: operations per status" test "$(metric 'payflow_operations_count{key="PENDING"}')" -ge 1

# ---- the pool: a held lock keeps the only connection busy -> 503, then SIGTERM drains
api_start pool 4802 PAYFLOW_API_POOL_SIZE=1 PAYFLOW_API_POOL_WAIT_MS=300 PAYFLOW_DRAIN_SECONDS=60 \
	PAYFLOW_API_STATEMENT_TIMEOUT_MS=120000
POOL_PID=$API_PID
lock_fifo=$API_DIR/lock.fifo
mkfifo "$lock_fifo"
# authenticate() reads payflow.api_keys: an exclusive lock makes it wait
( pf_psql -q <"$lock_fifo" >/dev/null 2>&1 ) &
exec 7>"$lock_fifo"
echo "BEGIN; LOCK TABLE payflow.api_keys IN ACCESS EXCLUSIVE MODE;" >&7
locked() { [ "$(q -c "SELECT count(*) FROM pg_locks WHERE relation = 'payflow.api_keys'::regclass AND mode = 'AccessExclusiveLock' AND granted")" = 1 ]; }
pf_ok "a session holds payflow.api_keys" pf_wait_for 10 locked
api_curl "$API_DIR/slow.body" "$API_DIR/slow.headers" GET "$API_URL/operations/$op1" -H "Authorization: Bearer $KEY" >"$API_DIR/slow.code" &
slow=$!
waiting() { [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'pf_api' AND wait_event_type = 'Lock'")" -ge 1 ]; }
pf_ok "a request waits on the lock" pf_wait_for 10 waiting
pf_eq "the only connection is busy: 503" "503 unavailable" "$(http GET "$API_URL/operations/$op1" "$KEY") $(json_field error.code)"
pf_eq "503 carries Retry-After" 1 "$(header Retry-After)"
kill -TERM "$POOL_PID"
refused() { ! curl -s -m 2 -o /dev/null "$API_URL/healthz"; }
pf_ok "SIGTERM: no new connections" pf_wait_for 15 refused
pf_ok "SIGTERM: the request in flight is still waiting" kill -0 "$slow"
echo "COMMIT;" >&7
exec 7>&-
wait "$slow" || true
pf_eq "SIGTERM: the request in flight finished with 200" 200 "$(cat "$API_DIR/slow.code")"
api_status=0
wait "$POOL_PID" || api_status=$?
pf_eq "SIGTERM: exit 0 after the drain" 0 "$api_status"

# ---- kill -9 with a POST in flight: the client retries the same request
# and gets one operation, whether or not the first attempt committed
api_start crash 4803
CRASH_PID=$API_PID
( pf_psql -q <"$lock_fifo" >/dev/null 2>&1 ) &
exec 7>"$lock_fifo"
echo "BEGIN; LOCK TABLE payflow.api_keys IN ACCESS EXCLUSIVE MODE;" >&7
pf_ok "a session holds payflow.api_keys again" pf_wait_for 10 locked
curl -s -o /dev/null -m 30 -X POST -H "Authorization: Bearer $KEY" \
	--data-binary "{\"paymentId\":\"$P-crash\",\"details\":{\"amount\":9}}" "$API_URL/payments" &
crash_client=$!
pf_ok "a POST waits in the database" pf_wait_for 10 waiting
kill -KILL "$CRASH_PID"
wait "$CRASH_PID" 2>/dev/null || true
wait "$crash_client" 2>/dev/null || true
echo "COMMIT;" >&7
exec 7>&-
api_start crash-again 4804
pf_eq "the client's retry after the crash: 202" 202 "$(post_payment "$KEY" "$P-crash" '{"amount":9}')"
pf_eq "... and exactly one operation for it" 1 "$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id = '$P-crash'")"
api_stop "$API_PID"

# ---- PostgreSQL stopped: /readyz 503, POST 503; started: 200 again
pf_cluster_stop
API_URL=http://127.0.0.1:4800	# the main instance; the pool's is gone
pf_eq "/readyz while PostgreSQL is down: 503" "503 unavailable" "$(http GET "$API_URL/readyz" "") $(json_field error.code)"
pf_eq "POST while PostgreSQL is down: 503" 503 "$(post_payment "$KEY" "$P-down" '{"amount": 4}')"
pf_eq "/healthz still 200 (the process is up)" 200 "$(http GET "$API_URL/healthz" "")"
pf_cluster_start
ready() { [ "$(http GET "$API_URL/readyz" "")" = 200 ]; }
pf_ok "/readyz 200 again after PostgreSQL restarted" pf_wait_for 30 ready
pf_eq "POST works again" 202 "$(post_payment "$KEY" "$P-up" '{"amount": 5}')"

# ---- start-up: invalid settings stop it with one line
for bad in PAYFLOW_API_POOL_SIZE=0 PAYFLOW_API_MAX_BODY=abc PAYFLOW_LISTEN=nowhere; do
	out=$(env "$bad" "$API_BIN" 2>&1 >/dev/null) && rc=0 || rc=$?
	pf_eq "invalid $bad: exit 2 with one line naming it" "2 1 yes" \
		"$rc $(printf '%s\n' "$out" | wc -l) $(grep -q "invalid ${bad%%=*}" <<<"$out" && echo yes)"
done

# ---- logs: JSON lines, never the key or the details
api_stop "$MAIN_PID"
pf_eq "SIGTERM: the main instance exits 0" 0 "$api_status"
pf_ok "logs are JSON lines" node -e '
	const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
	for (const l of lines) JSON.parse(l);' "$API_DIR/api-main.log"
pf_ok "the logs never hold an API key" sh -c "! grep -h -e '$KEY' -e 'pfk_' $API_DIR/api-*.log"
pf_ok "the logs never hold details" sh -c "! grep -h -e 'card-4111' -e 'nnnnnnnn' $API_DIR/api-*.log"

# ---- every answer above against the OpenAPI document, and the check can
# fail: a stricter copy (no 409 for POST /payments, a status member and a
# 202 header the server does not give) finds each of those in these answers
api_contract_check
node -e 'const fs = require("fs"), d = JSON.parse(fs.readFileSync(process.argv[1]));
	delete d.paths["/payments"].post.responses["409"];
	d.components.schemas.Status.required.push("settledAt");
	d.paths["/payments"].post.responses["202"].headers["X-Request-Id"] = { required: true, schema: { type: "string" } };
	fs.writeFileSync(process.argv[2], JSON.stringify(d));' workers/console/openapi.json "$API_DIR/stricter.json"
stricter=$(node test/browser/openapi-check.mjs "$API_DIR/stricter.json" "$API_EXCHANGES" || true)
pf_eq "the stricter copy: 409 undocumented, settledAt missing, X-Request-Id missing" "yes yes yes" "$(
	for want in 'POST /payments -> 409: status 409 is not documented for POST /payments' \
		"GET /operations/$op1 -> 200: body must have required property 'settledAt'" \
		'POST /payments -> 202: header X-Request-Id is missing'; do
		grep -qF "$want" <<<"$stricter" && echo yes || echo "no ($want)"
	done | paste -sd ' ')"
pf_ok "... and fails" sh -c "! node test/browser/openapi-check.mjs '$API_DIR/stricter.json' '$API_EXCHANGES' >/dev/null"
pf_done
