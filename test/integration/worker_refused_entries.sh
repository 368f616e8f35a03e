#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# A payment worker when SQS refuses single entries of its batch calls
# (partial failures, made by the SigV4 front's POST /_front/refuse), with
# the invariants of every worker test (nothing lost, one charge each):
#
#   deletes refused as retryable (InternalError): sent again in a later
#   batch; no message comes back, no step runs twice
#   deletes refused for good (ReceiptHandleIsInvalid, a sender fault): the
#   message comes back after its visibility timeout, its step is found
#   done and skipped, and it is deleted then; no second charge
#   visibility renewals refused during long calls (InternalError): the next
#   heartbeat renews them; no message comes back while its call runs
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-refused 4632 4633 5
P=refused-$WK_RUN
front="http://127.0.0.1:$PAYFLOW_EMULATOR_PORT"

# refuse ACTION CODE SENDER_FAULT COUNT: the next COUNT entries of ACTION
refuse() {
	curl -sf -X POST "$front/_front/refuse" -H 'content-type: application/json' \
		-d "{\"action\":\"$1\",\"match\":\"\",\"code\":\"$2\",\"senderFault\":$3,\"count\":$4}" >/dev/null
}
refused() {	# refused ACTION CODE: entries the front refused so far
	curl -sf "$front/_front/refused" | jq --arg a "$1" --arg c "$2" '[.[] | select(.action == $a and .code == $c)] | length'
}
statuses_are() {
	local status=$1 op
	shift
	for op in "$@"; do wk_has_status "$op" "$status" || return 1; done
}
queue_idle() {
	[ "$(node test/emulator/sqs-count.mjs "$1" | sed -n 's/.*"visible":\([0-9]*\),"notVisible":\([0-9]*\).*/\1 \2/p')" = "0 0" ]
}
skipped() { grep -c 'step skipped' "$WK_DIR/worker.log" || true; }
at_least() { [ "$("${@:2}")" -ge "$1" ]; }

wk_start_relay
wk_start_worker worker PAYFLOW_CONCURRENCY=10 PAYFLOW_SQS_DELETE_WAIT_MS=200

# ---- deletes refused as retryable
refuse DeleteMessageBatch InternalError false 3
ops_a=()
for i in $(seq 1 6); do ops_a+=("$(wk_submit "$P-a$i")"); done
pf_ok "six payments complete" pf_wait_for 30 statuses_are PAYMENT_COMPLETED "${ops_a[@]}"
pf_ok "the queue drains" pf_wait_for 30 queue_idle "$PAYFLOW_QUEUE_URL"
pf_eq "the front refused three deletes" 3 "$(refused DeleteMessageBatch InternalError)"
pf_ok "the worker sent them again" pf_wait_for 10 grep -q 'SQS delete failed for a message (.*); sent again' "$WK_DIR/worker.log"
sleep $((PAYFLOW_VISIBILITY_TIMEOUT + 2))
pf_eq "no message came back (nothing skipped)" 0 "$(skipped)"
wk_invariants "${ops_a[@]}"

# ---- deletes refused for good
refuse DeleteMessageBatch ReceiptHandleIsInvalid true 2
ops_b=()
for i in $(seq 1 4); do ops_b+=("$(wk_submit "$P-b$i")"); done
pf_ok "four payments complete" pf_wait_for 30 statuses_are PAYMENT_COMPLETED "${ops_b[@]}"
# (the deletes leave in a batch after the completions: wait for their answer)
pf_ok "the worker says the two messages come back" \
	pf_wait_for 10 grep -q 'SQS delete failed for a message: .*comes back after its visibility timeout' "$WK_DIR/worker.log"
pf_ok "they come back, are found done and skipped" pf_wait_for 30 at_least 2 skipped
pf_ok "and are deleted then (the queue drains)" pf_wait_for 30 queue_idle "$PAYFLOW_QUEUE_URL"
pf_eq "one attempt each" "1 1 1 1" "$(for op in "${ops_b[@]}"; do wk_attempts "$op"; done | paste -sd' ')"
wk_invariants "${ops_b[@]}"

# ---- visibility renewals refused during long calls
before=$(skipped)
ops_c=()
for i in $(seq 1 3); do
	# the fault first: the worker is running and takes the request at once
	legacy -c "SELECT set_fault('slow', payment_id => '$P-c$i', seconds => $((PAYFLOW_VISIBILITY_TIMEOUT * 2)))" >/dev/null
	ops_c+=("$(wk_submit "$P-c$i")")
done
pf_ok "the three long calls are running" pf_wait_for 20 statuses_are PAYMENT_PROCESSING "${ops_c[@]}"
refuse ChangeMessageVisibilityBatch InternalError false 3
pf_ok "the three complete" pf_wait_for 40 statuses_are PAYMENT_COMPLETED "${ops_c[@]}"
pf_ok "the front refused renewals meanwhile" at_least 1 refused ChangeMessageVisibilityBatch InternalError
pf_ok "the queue drains" pf_wait_for 30 queue_idle "$PAYFLOW_QUEUE_URL"
pf_eq "no message came back while its call ran (nothing skipped)" "$before" "$(skipped)"
pf_eq "one attempt each" "1 1 1" "$(for op in "${ops_c[@]}"; do wk_attempts "$op"; done | paste -sd' ')"
wk_invariants "${ops_c[@]}"

kill -TERM "$WK_PID_worker"
wait "$WK_PID_worker" 2>/dev/null || true
pf_done
