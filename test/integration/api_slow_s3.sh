#!/bin/bash
# payflow-api while S3 is slow (issue 26, M2).  Large POST /payments bodies
# go to S3 (the claim check); the upload runs with the HTTP thread's own
# S3 client and no database connection held, so a slow upload holds only
# its own request.  Before, each held a slot of the pool for its whole
# upload: as many slow uploads as slots froze every endpoint, /readyz
# included.
#
# With a pool of one connection, the emulator's SigV4 front holds an S3
# PUT for 6 s (a slow S3, POST /_front/hold); while it waits, /readyz, a
# small POST /payments and GET /operations/{id} answer (before, all three
# waited for the pool and got 503); then the upload completes (202), its
# object stored.  (libmicrohttpd's threads each serve several connections:
# a request that lands on the uploading thread waits for it, so only the
# answers are checked, not how soon they came.)
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init api-slow-s3
KEY=$(api_key "t-$API_RUN")
export PAYFLOW_EMULATOR_PORT=4822 PAYFLOW_EMULATOR_BACKEND_PORT=4823 PAYFLOW_EMULATOR_RUN_DIR=$API_DIR/emulator
api_test_cleanup() { test/emulator/stop.sh >/dev/null 2>&1 || true; }
test/emulator/stop.sh >/dev/null 2>&1 || true
eval "$(test/emulator/start.sh 2>"$API_DIR/emulator-start.log")" || { cat "$API_DIR/emulator-start.log"; exit 1; }
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_S3_BUCKET
front=http://127.0.0.1:$PAYFLOW_EMULATOR_PORT

api_start slow 4806 PAYFLOW_STORE=s3 PAYFLOW_API_S3_THRESHOLD=1024 PAYFLOW_API_POOL_SIZE=1 PAYFLOW_API_POOL_WAIT_MS=500

puts() { curl -fsS "$front/_front/calls" | jq '.["S3 PUT"] // 0'; }
puts_before=$(puts)
curl -fsS -X POST "$front/_front/hold" -H 'content-type: application/json' \
	-d '{"action": "S3 PUT", "ms": 6000, "count": 1}' >/dev/null
note=$(head -c 3000 /dev/zero | tr '\0' 'n')
printf '{"paymentId": "%s-big", "details": {"amount": 9, "currency": "EUR", "note": "%s"}}' "$API_RUN" "$note" >"$API_DIR/big.json"
curl -sS -o "$API_DIR/big.out" -w '%{http_code}' -X POST "$API_URL/payments" -H "Authorization: Bearer $KEY" \
	-H 'Content-Type: application/json' --data-binary @"$API_DIR/big.json" >"$API_DIR/big.code" &
big_pid=$!
uploading() { [ "$(puts)" -ge $((puts_before + 1)) ]; }
pf_ok "an upload is held by the slow S3" pf_wait_for 10 uploading

# while it waits (6 s), with a pool of one connection
pf_eq "/readyz answers" "200 ready" "$(http GET "$API_URL/readyz" "") $(json_field status)"
pf_eq "a small POST /payments answers" 202 \
	"$(http POST "$API_URL/payments" "$KEY" --data-binary "{\"paymentId\": \"$API_RUN-small\", \"details\": {\"amount\": 1}}")"
small=$(json_field operationId)
pf_eq "GET /operations/{id} answers" 200 "$(http GET "$API_URL/operations/$small" "$KEY")"

wait "$big_pid" || true
pf_eq "then the large payment is accepted" 202 "$(cat "$API_DIR/big.code")"
pf_eq "... its details in S3" 1 \
	"$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id = '$API_RUN-big' AND request_ref->>'store' = 's3'")"
api_contract_check
pf_done
