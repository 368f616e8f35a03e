#!/bin/bash
# POST /payments under load: requests that wait for a submit statement go
# together into one payflow.submit_many (workers/src/api/submit_batch.h),
# with the answers single submits give.
#
# A pool of two connections lets one submit statement run at a time. A
# session holds payflow.api_keys locked, so the first POST's statement
# (authenticate reads the table) waits in the database while the next ones
# queue in payflow-api (/metrics: payflow_api_submits_waiting); then the
# lock goes:
#
#   - nine queued requests, six with one tenant's key and three with
#     another's: two statements, one a key, every request 202 with an
#     operation of its own, exactly one operation per payment;
#   - four queued requests of which one reuses an idempotency key with
#     other details (PF002) and one replays an earlier request: the batch
#     fails as a whole (submit_many is all or nothing), each runs again
#     alone, and each gets the answer it would have got alone: 202, 409
#     PF002, 202 with the earlier operation, 202.
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init api-submit-batch
KA=$(api_key "sa-$API_RUN" a)
KB=$(api_key "sb-$API_RUN" b)
P=$API_RUN
# a pool wait far above the test's: no request gives up (503) while the lock is held
api_start batch "${PAYFLOW_TEST_API_BATCH_PORT:-4807}" PAYFLOW_API_POOL_SIZE=2 PAYFLOW_API_THREADS=32 \
	PAYFLOW_API_POOL_WAIT_MS=60000 PAYFLOW_API_STATEMENT_TIMEOUT_MS=60000

lock_fifo=$API_DIR/lock.fifo
mkfifo "$lock_fifo"
( pf_psql -q <"$lock_fifo" >/dev/null 2>&1 ) &
exec 7>"$lock_fifo"
locked() { [ "$(q -c "SELECT count(*) FROM pg_locks WHERE relation = 'payflow.api_keys'::regclass AND mode = 'AccessExclusiveLock' AND granted")" = 1 ]; }
in_lock_wait() { [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'pf_api' AND wait_event_type = 'Lock'")" -ge 1 ]; }
# payflow_api_submits_waiting, asked with a time limit: an HTTP thread reads
# all the connections it accepted, so a request of /metrics that thread took
# with a POST waits behind the POST's (blocking) handler; the next asks again
waiting_now() {
	curl -s -m 1 "$API_URL/metrics" 2>/dev/null | awk '$1 == "payflow_api_submits_waiting" { print $2 }'
}
waiting_is() { [ "$(waiting_now)" = "$1" ]; }

# post NAME KEY PAYMENT DETAILS [curl args...]: in the background, its code in NAME.code
post() {
	local name=$1 key=$2 pid=$3 details=$4
	shift 4
	api_curl "$API_DIR/$name.body" "$API_DIR/$name.headers" POST "$API_URL/payments" \
		-H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
		--data-binary "{\"paymentId\":\"$pid\",\"details\":$details}" "$@" >"$API_DIR/$name.code" &
	POSTS+=($!)
}
# queue NAME KEY PAYMENT DETAILS [curl args...]: post, then wait until it waits
# in the queue: its HTTP thread is then taken, so the next connection goes
# to another (a thread still reading a request may accept a second one,
# which would then wait behind the first)
QUEUED=0
queue() {
	post "$@"
	QUEUED=$((QUEUED + 1))
	pf_wait_for 10 waiting_is "$QUEUED" || {
		echo "not ok - request $1 waits in the queue (waiting: $(waiting_now))"
		exit 1
	}
}
field() { node -e 'const v = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); let x = v; for (const k of process.argv[2].split(".")) x = x?.[k]; console.log(x ?? "")' "$API_DIR/$1.body" "$2"; }

# hold the lock, start the first request, queue COUNT more (post calls in between), release
hold() {
	echo "BEGIN; LOCK TABLE payflow.api_keys IN ACCESS EXCLUSIVE MODE;" >&7
	pf_ok "a session holds payflow.api_keys" pf_wait_for 10 locked
}
release() {
	echo "COMMIT;" >&7
	wait_posts
	QUEUED=0
}
POSTS=()
wait_posts() {
	local pid
	for pid in "${POSTS[@]}"; do wait "$pid" || true; done
	POSTS=()
}

# ---- nine queued behind one, two keys
statements0=$(metric payflow_api_submit_statements_total)
requests0=$(metric payflow_api_submit_requests_total)
hold
post first "$KA" "$P-first" '{"amount": 1}'
pf_ok "the first request's statement waits on the lock" pf_wait_for 10 in_lock_wait
for i in 1 2 3; do
	queue "a$i" "$KA" "$P-a$i" "{\"amount\": $((10 + i))}"
	queue "b$i" "$KB" "$P-b$i" "{\"amount\": $((20 + i))}"
done
for i in 4 5 6; do queue "a$i" "$KA" "$P-a$i" "{\"amount\": $((10 + i))}"; done
pf_ok "nine requests wait for a turn (payflow_api_submits_waiting)" waiting_is 9
release
codes=$(for n in first a1 a2 a3 a4 a5 a6 b1 b2 b3; do cat "$API_DIR/$n.code"; echo; done | sort | uniq -c | awk '{print $2 "x" $1}' | paste -sd' ')
pf_eq "every request: 202" "202x10" "$codes"
pf_eq "two statements for the nine: one a key" 3 "$(($(metric payflow_api_submit_statements_total) - statements0))"
pf_eq "... submitting the ten" 10 "$(($(metric payflow_api_submit_requests_total) - requests0))"
pf_eq "exactly one operation per payment" "10|10" \
	"$(q -c "SELECT count(DISTINCT payment_id) || '|' || count(*) FROM payflow.operations WHERE payment_id LIKE '$P-%'")"
mismatched=0
for n in a1 a2 a3 a4 a5 a6 b1 b2 b3; do
	op=$(field "$n" operationId)
	[ "$(q -c "SELECT payment_id || ' ' || tenant FROM payflow.operations WHERE id = '$op'")" = "$P-$n s${n:0:1}-$API_RUN" ] ||
		mismatched=$((mismatched + 1))
done
pf_eq "each answer names its own payment's operation, in its key's tenant" 0 "$mismatched"
pf_eq "... and Location points at it" "/operations/$(field a3 operationId)" \
	"$(sed -n 's/^Location: *//Ip' "$API_DIR/a3.headers" | tr -d '\r')"
# the same request again in SQL, in the key's tenant: the same operation (other details would be PF002)
pf_eq "the details arrived as sent" "$(field a3 operationId)" \
	"$(PGUSER=pf_api pf_psql -Atq -c "SELECT payflow.submit('$P-a3', '{\"amount\": 13}') FROM payflow.authenticate('$KA') OFFSET 0")"

# ---- one bad request in a batch: each runs alone, each gets its own answer
post_payment "$KA" "$P-keyed" '{"amount": 30}' -H "Idempotency-Key: k-$P" >/dev/null
keyed_op=$(json_field operationId)
statements0=$(metric payflow_api_submit_statements_total)
hold
post first2 "$KA" "$P-first2" '{"amount": 2}'
pf_ok "the first request's statement waits on the lock" pf_wait_for 10 in_lock_wait
queue good1 "$KA" "$P-good1" '{"amount": 31}'
queue reused "$KA" "$P-keyed" '{"amount": 99}' -H "Idempotency-Key: k-$P"
queue replay "$KA" "$P-keyed" '{"amount": 30}' -H "Idempotency-Key: k-$P"
queue good2 "$KA" "$P-good2" '{"amount": 32}'
pf_ok "four requests wait for a turn" waiting_is 4
release
pf_eq "the others: 202" "202 202 202" "$(cat "$API_DIR/first2.code") $(cat "$API_DIR/good1.code") $(cat "$API_DIR/good2.code")"
pf_eq "the key reused with other details: 409 PF002, as alone" "409 PF002" "$(cat "$API_DIR/reused.code") $(field reused error.code)"
pf_eq "the replay: 202 with the earlier operation" "202 $keyed_op" "$(cat "$API_DIR/replay.code") $(field replay operationId)"
pf_eq "the batch failed, then the four ran alone" 6 "$(($(metric payflow_api_submit_statements_total) - statements0))"
pf_eq "one operation for the key" 1 "$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id = '$P-keyed'")"
exec 7>&-

# ---- light load: a request alone runs alone
statements0=$(metric payflow_api_submit_statements_total)
pf_eq "a lone request: 202" 202 "$(post_payment "$KA" "$P-alone" '{"amount": 40}')"
pf_eq "... in a statement of its own" 1 "$(($(metric payflow_api_submit_statements_total) - statements0))"

api_contract_check
pf_done
