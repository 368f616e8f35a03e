#!/bin/bash
# payflow-relay when SQS refuses single entries of a SendMessageBatch that
# otherwise succeeds (a partial batch failure, which fauxqs never makes by
# itself: the SigV4 front refuses chosen entries, POST /_front/refuse):
#
#   - refused as retryable (InternalError, no sender fault), twice: the
#     entry is never acked; it stays in the outbox with the error, is sent
#     again after its back-off and arrives once; the other entries of its
#     batches arrive at once.  A relay that acked refused entries with the
#     rest would lose that event: it would never arrive;
#   - refused for good (InvalidMessageContents, a sender fault): the event
#     is not retried for ever but becomes a dead letter (source 'event'),
#     its operation fails at its step (EVENT_REFUSED) and the app hears of
#     it (OperationFailed is delivered); the rest flows on;
#   - the request and then the OperationFailed of one operation refused for
#     good: two dead letters, the operation FAILED, nothing left to retry.
#
# Uses the running cluster from test/lib/cluster.sh and its own emulator
# (ports 4628/4629).  Counts only its own events (payment ids with a
# per-run prefix).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/relay_common.bash

relay_init rr 4628
front="http://127.0.0.1:$PAYFLOW_EMULATOR_PORT"
requests=$(queue_url "$PAYFLOW_QUEUE_URLS" payment-requests)
terminal=$(queue_url "$PAYFLOW_QUEUE_URLS" operation-events)

# refuse MATCH CODE SENDER_FAULT COUNT: the front refuses the next COUNT
# SendMessageBatch entries whose body holds MATCH
refuse() {
	curl -sf -X POST "$front/_front/refuse" -H 'content-type: application/json' \
		-d "$(jq -nc --arg m "$1" --arg c "$2" --argjson s "$3" --argjson n "$4" \
			'{action: "SendMessageBatch", match: $m, code: $c, senderFault: $s, count: $n, message: "refused by the test"}')" \
		>/dev/null
}
refused_count() {	# refused_count MATCH_CODE: entries the front refused with that code
	curl -sf "$front/_front/refused" | jq --arg c "$1" '[.[] | select(.code == $c)] | length'
}
status_of() { q -c "SELECT status || '|' || coalesce(error ->> 'code', '') FROM payflow.operations WHERE payment_id = '$1'"; }
is_status() { [ "$(status_of "$1")" = "$2" ]; }
logged() { grep -q "$1" "$2"; }
# ids_on FILE PREFIX EVENT_TYPE: the event ids of that type and payment-id prefix in a queue dump
ids_on() {
	node -e '
const [file, prefix, type] = process.argv.slice(1);
for (const l of require("fs").readFileSync(file, "utf8").split("\n").filter(Boolean)) {
	const b = JSON.parse(JSON.parse(l).body);
	if (b.paymentId.startsWith(prefix) && b.eventType === type) console.log(b.eventId);
}' "$@" | sort
}

# --- retryable refusals: never acked, sent again, delivered once
refuse "\"$run-t-7\"" InternalError false 2
q -c "SELECT count(payflow.submit('$run-t-' || g, jsonb_build_object('amount', g))) FROM generate_series(1, 20) g" >/dev/null
q -c "SELECT event_id FROM payflow.outbox WHERE message_group_id LIKE '$run-t-%' ORDER BY 1" >"$work/t-ids.txt"
start_relay main
relay=$relay_pid
refused_at_least() { [ "$(refused_count "$2")" -ge "$1" ]; }
pf_ok "the front refused the entry twice (retryable)" pf_wait_for 20 refused_at_least 2 InternalError
pf_ok "the relay logs the refusal and keeps the event" \
	pf_wait_for 10 logged 'InternalError.*stays in the outbox and is retried' "$work/relay-main.log"
pf_ok "after its back-off the refused event is delivered too (outbox empty)" \
	pf_wait_for 30 outbox_empty_of "$run-t"
pf_eq "acked once, after the refusals" "1" \
	"$(q -c "SELECT count(*) FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
			  WHERE o.payment_id = '$run-t-7'")"
pf_eq "the front refused it exactly twice" 2 "$(refused_count InternalError)"

# --- refused for good: a dead letter, the operation fails, nothing loops
refuse "\"$run-p-1\"" InvalidMessageContents true 1
q -c "SELECT count(payflow.submit('$run-p-' || g, jsonb_build_object('amount', g))) FROM generate_series(1, 5) g" >/dev/null
pf_ok "the operation whose request SQS refuses for good fails at its step" \
	pf_wait_for 20 is_status "$run-p-1" "FAILED|EVENT_REFUSED"
pf_ok "the relay logs it as a dead letter" \
	logged 'InvalidMessageContents.*becomes a dead letter and its step fails' "$work/relay-main.log"
pf_eq "the refused event is a dead letter (source event), with its body" "1|payment-requests|PaymentRequested|EVENT_REFUSED" \
	"$(q -c "SELECT count(*), max(queue), max(d.message_body::jsonb ->> 'eventType'), max(d.error ->> 'code')
			  FROM payflow.dead_letters d JOIN payflow.operations o ON o.id = d.operation_id
			 WHERE o.payment_id = '$run-p-1' AND d.source = 'event'")"
pf_eq "and the failed step one an operator can replay" "1" \
	"$(q -c "SELECT count(*) FROM payflow.dead_letters d JOIN payflow.operations o ON o.id = d.operation_id
			  WHERE o.payment_id = '$run-p-1' AND d.source = 'step' AND d.step_name = 'PROCESS_PAYMENT'")"
pf_ok "everything of these operations left the outbox" pf_wait_for 20 outbox_empty_of "$run-p"
for g in 2 3 4 5; do
	pf_eq "the others went on ($run-p-$g PENDING)" "PENDING|" "$(status_of "$run-p-$g")"
done

# --- a request, then its OperationFailed, refused for good
refuse "\"$run-f-1\"" MessageTooLong true 2
q -c "SELECT payflow.submit('$run-f-1', '{\"amount\": 1}')" >/dev/null
pf_ok "the request refused for good fails the operation" pf_wait_for 20 is_status "$run-f-1" "FAILED|EVENT_REFUSED"
pf_ok "its OperationFailed, refused for good too, leaves the outbox" pf_wait_for 20 outbox_empty_of "$run-f"
pf_eq "two event dead letters: the request and the terminal event" "payment-requests,operation-events" \
	"$(q -c "SELECT string_agg(queue, ',' ORDER BY d.id) FROM payflow.dead_letters d JOIN payflow.operations o ON o.id = d.operation_id
			  WHERE o.payment_id = '$run-f-1' AND d.source = 'event'")"
pf_eq "the operation stays FAILED" "FAILED|EVENT_REFUSED" "$(status_of "$run-f-1")"
pf_eq "the front refused three entries for good in all" 3 \
	"$(( $(refused_count InvalidMessageContents) + $(refused_count MessageTooLong) ))"

stop_relay "$relay"
pf_eq "exit 0 after SIGTERM" 0 "$relay_status"

# --- what SQS holds: every event once, none of the refused-for-good ones
read_queue "$requests" "$work/requests.jsonl"
read_queue "$terminal" "$work/terminal.jsonl"
pf_eq "all 20 retryable-case requests on the queue, each once" "$(sort "$work/t-ids.txt" | paste -sd,)" \
	"$(ids_on "$work/requests.jsonl" "$run-t-" PaymentRequested | paste -sd,)"
pf_eq "the requests of the others arrived, the refused one did not" "4" \
	"$(ids_on "$work/requests.jsonl" "$run-p-" PaymentRequested | wc -l)"
pf_eq "the app heard of the failed operation (OperationFailed on operation-events)" "1" \
	"$(ids_on "$work/terminal.jsonl" "$run-p-1" OperationFailed | wc -l)"
pf_eq "nothing of the doubly refused operation reached SQS" "0 0" \
	"$(ids_on "$work/requests.jsonl" "$run-f-" PaymentRequested | wc -l) $(ids_on "$work/terminal.jsonl" "$run-f-" OperationFailed | wc -l)"
pf_ok "no log line is anything but JSON" node -e '
	for (const f of process.argv.slice(1))
		for (const l of require("fs").readFileSync(f, "utf8").split("\n").filter(Boolean)) JSON.parse(l);' \
	"$work"/relay-*.log

pf_done
