#!/bin/bash
# payflow-relay delivers the outbox to SQS, read back with an independent
# reader (the AWS SDK for JavaScript, test/emulator/sqs-read.mjs):
#
#   - woken by the scheduler worker's NOTIFY: with a 30 s poll interval a
#     submitted event still arrives within seconds;
#   - 1,000 submits -> exactly 1,000 PaymentRequested messages on a standard
#     queue, bodies verbatim, attributes eventType/operationId/correlationId,
#     the outbox empty afterwards and outbox_published holding the SQS
#     message ids; fewer database statements than SendMessageBatch calls
#     (acks are gathered);
#   - a trickle of events, each alone: two statements each (the claim and
#     the ack that carries a claim), not three;
#   - the same on a FIFO queue, with MessageGroupId = paymentId and
#     MessageDeduplicationId = eventId;
#   - SIGTERM in the middle of a stream: exit 0, every sent event acked,
#     nothing left claimed; a new relay sends the rest, no duplicates;
#   - a row for a destination with no queue URL is nacked with a clear error
#     and stays in the outbox (never dropped).
#
# Uses the running cluster from test/lib/cluster.sh and its own emulator
# (ports 4620/4621, a private run dir). Rows of earlier tests may sit in the
# outbox; this test only counts its own (payment ids with a per-run prefix).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/relay_common.bash

nowhere_event=
relay_test_cleanup() {
	[ -z "$nowhere_event" ] || pf_psql -Atqc "DELETE FROM payflow.outbox WHERE event_id = '$nowhere_event'" >/dev/null 2>&1 || true
}
relay_init rd 4620

standard=$(queue_url "$PAYFLOW_QUEUE_URLS" payment-requests)
fifo=$(queue_url "$PAYFLOW_QUEUE_URLS_FIFO" payment-requests)
# other queues of the emulator serve as separate sinks, one per phase
sink_notify=$(queue_url "$PAYFLOW_QUEUE_URLS" operation-events)
sink_drain=$(queue_url "$PAYFLOW_QUEUE_URLS" invoice-requests)



# submit PREFIX N: N operations in one statement, payment ids PREFIX-1..N
submit() {
	q -c "SELECT count(payflow.submit('$1-' || g, jsonb_build_object('amount', g, 'currency', 'EUR'),
										 correlation_id => 'corr-$1-' || g))
			FROM generate_series(1, $2) g" >/dev/null
}

# the outbox rows of a prefix, one JSON object per line
snapshot() {
	q -c "SELECT json_build_object('eventId', event_id, 'body', body::text)
			FROM payflow.outbox WHERE message_group_id LIKE '$1-%' ORDER BY seq" >"$2"
}



# verify MESSAGES EXPECTED PREFIX FIFO: compares the messages of a prefix with
# the outbox rows snapshotted before they were sent; prints name=value lines
verify() {
	node --input-type=module -e '
import { readFileSync } from "node:fs";
const [messagesFile, expectedFile, prefix, fifo] = process.argv.slice(1);
const lines = (f) => readFileSync(f, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const expected = new Map(lines(expectedFile).map((r) => [r.eventId, r]));
const mine = lines(messagesFile).filter((m) => JSON.parse(m.body).paymentId.startsWith(prefix + "-"));
const ids = new Set();
let verbatim = 0, attributesOk = 0, fifoOk = 0, eventType = 0;
for (const m of mine) {
	const body = JSON.parse(m.body);
	ids.add(body.eventId);
	const row = expected.get(body.eventId);
	if (row && row.body === m.body) verbatim++;
	if (body.eventType === "PaymentRequested") eventType++;
	const a = m.messageAttributes;
	if (a.eventType?.StringValue === body.eventType && a.operationId?.StringValue === body.operationId &&
		a.correlationId?.StringValue === body.correlationId && a.eventType?.DataType === "String")
		attributesOk++;
	if (m.attributes.MessageGroupId === body.paymentId && m.attributes.MessageDeduplicationId === body.eventId)
		fifoOk++;
}
const missing = [...expected.keys()].filter((id) => !ids.has(id)).length;
const unexpected = [...ids].filter((id) => !expected.has(id)).length;
console.log(`messages=${mine.length}\ndistinct=${ids.size}\nmissing=${missing}\nunexpected=${unexpected}`);
console.log(`verbatim=${verbatim}\nattributes=${attributesOk}\npaymentRequested=${eventType}`);
if (fifo === "fifo") console.log(`fifo=${fifoOk}`);
' "$@"
}
field() { sed -n "s/^$1=//p" <<<"$2"; }
# count_of MESSAGES PREFIX: how many messages carry a payment id of the prefix
count_of() {
	node -e 'let n = 0;
		for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean))
			if (JSON.parse(JSON.parse(l).body).paymentId.startsWith(process.argv[2] + "-")) n++;
		console.log(n);' "$1" "$2"
}

# --- a row for a destination nobody configured: nacked, never dropped
nowhere_event=$(q -c "INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination, message_group_id, body)
					  VALUES (gen_random_uuid(), 'pay_00000000000000000000000000', 'PaymentRequested', 'nowhere-$run',
							  '$run-nowhere', '{\"eventType\": \"PaymentRequested\"}')
					  RETURNING event_id")

# --- woken by NOTIFY: the poll interval is far longer than the wait
start_relay notify PAYFLOW_POLL_INTERVAL_MS=30000 \
	PAYFLOW_QUEUE_URLS="payment-requests=$sink_notify,payment-completed=$sink_notify"
notify_relay=$relay_pid
# submit once it LISTENs (a loaded machine may take seconds to get there; a
# submit before that would only be seen by the 30 s poll)
listening() { grep -q '"listening on payflow_outbox' "$work/relay-notify.log"; }
pf_ok "the relay listens" pf_wait_for 30 listening
submit "$run-n" 1
pf_ok "a submit wakes the relay through NOTIFY (poll interval 30 s, delivered within 15 s)" \
	pf_wait_for 15 outbox_empty_of "$run-n"
read_queue "$sink_notify" "$work/notify.jsonl"
pf_eq "the woken relay's message is on the queue" 1 "$(count_of "$work/notify.jsonl" "$run-n")"
stop_relay "$notify_relay"
pf_eq "SIGTERM on an idle relay: exit 0" 0 "$relay_status"

# --- a trickle: events one at a time, each alone on the relay.  Each costs
# the statement of the claim its NOTIFY asked for and one that writes its
# ack (with a claim that finds nothing); the ack no longer asks for a third,
# a claim of its own, after a statement that had claimed already.
start_relay trickle PAYFLOW_POLL_INTERVAL_MS=30000 \
	PAYFLOW_QUEUE_URLS="payment-requests=$sink_notify,payment-completed=$sink_notify"
trickle_relay=$relay_pid
sleep 1
for i in $(seq 1 20); do
	submit "$run-t-$i" 1
	sleep 0.1
done
pf_ok "the relay sends a trickle of 20 events" pf_wait_for 10 outbox_empty_of "$run-t"
sleep 0.5
stop_relay "$trickle_relay"
stats=$(grep '"msg":"stopped' "$work/relay-trickle.log" | tail -n 1)
statements=$(sed -n 's/.*"statements":\([0-9]*\).*/\1/p' <<<"$stats")
echo "# 20 events one at a time: $statements database statements"
# Three per event would be 60 and more; start-up, shutdown and an event that
# lands while a claim runs add a few (42-47 seen, the most with make
# check's lanes loading the machine).
pf_ok "a lone event costs two statements, not three ($statements for 20 events)" \
	test "${statements:-999999}" -le 52

# --- 1,000 events on a standard queue
submit "$run-s" 1000
snapshot "$run-s" "$work/standard-rows.jsonl"
pf_eq "1,000 outbox rows to send" 1000 "$(wc -l <"$work/standard-rows.jsonl")"
start_relay standard PAYFLOW_RELAY_IN_FLIGHT=4
standard_relay=$relay_pid
pf_ok "the relay empties the outbox of 1,000 events" pf_wait_for 60 outbox_empty_of "$run-s"
read_queue "$standard" "$work/standard.jsonl"
result=$(verify "$work/standard.jsonl" "$work/standard-rows.jsonl" "$run-s" standard)
pf_eq "standard queue: exactly 1,000 messages" 1000 "$(field messages "$result")"
pf_eq "standard queue: 1,000 distinct event ids" 1000 "$(field distinct "$result")"
pf_eq "standard queue: every outbox event id arrived" 0 "$(field missing "$result")"
pf_eq "standard queue: no event that was not in the outbox" 0 "$(field unexpected "$result")"
pf_eq "standard queue: every body equals the outbox body" 1000 "$(field verbatim "$result")"
pf_eq "standard queue: every message is a PaymentRequested" 1000 "$(field paymentRequested "$result")"
pf_eq "standard queue: eventType/operationId/correlationId attributes" 1000 "$(field attributes "$result")"
pf_eq "outbox_published holds the 1,000 events with their SQS message ids" "1000|1000" \
	"$(q -c "SELECT count(*), count(p.message_id) FROM payflow.outbox_published p
			   JOIN payflow.operations o ON o.id = p.operation_id WHERE o.payment_id LIKE '$run-s-%'")"
q -c "SELECT p.message_id FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
	   WHERE o.payment_id LIKE '$run-s-%'" | sort >"$work/published-ids.txt"
node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
	const m = JSON.parse(l); if (JSON.parse(m.body).paymentId.startsWith(process.argv[2] + "-")) console.log(m.messageId); }' \
	"$work/standard.jsonl" "$run-s" | sort >"$work/queue-ids.txt"
pf_ok "the message ids in outbox_published are those SQS gave the messages" \
	cmp -s "$work/published-ids.txt" "$work/queue-ids.txt"
stop_relay "$standard_relay"
pf_eq "SIGTERM: exit 0" 0 "$relay_status"
# In a backlog, the acks of calls that finish while a statement runs, or
# within 5 ms of each other, share the next statement: fewer statements than
# calls (43-54 for 100 here; a relay that wrote its acks after each call,
# as this one did before, also stayed under, with 57-69: the trickle above
# is what tells them apart).
stats=$(grep '"msg":"stopped' "$work/relay-standard.log" | tail -n 1)
calls=$(sed -n 's/.*"calls":\([0-9]*\).*/\1/p' <<<"$stats")
statements=$(sed -n 's/.*"statements":\([0-9]*\).*/\1/p' <<<"$stats")
echo "# 1,000 events: $calls SendMessageBatch calls, $statements database statements"
pf_ok "acks of several calls share a statement ($statements statements for $calls calls)" \
	test "${statements:-999999}" -lt "${calls:-0}"

# --- the same on a FIFO queue
submit "$run-f" 1000
snapshot "$run-f" "$work/fifo-rows.jsonl"
start_relay fifo PAYFLOW_QUEUE_URLS="$PAYFLOW_QUEUE_URLS_FIFO"
fifo_relay=$relay_pid
pf_ok "the relay empties the outbox of 1,000 events (FIFO)" pf_wait_for 60 outbox_empty_of "$run-f"
read_queue "$fifo" "$work/fifo.jsonl"
result=$(verify "$work/fifo.jsonl" "$work/fifo-rows.jsonl" "$run-f" fifo)
pf_eq "FIFO queue: exactly 1,000 messages" 1000 "$(field messages "$result")"
pf_eq "FIFO queue: every outbox event id arrived, once" "1000 0 0" \
	"$(field distinct "$result") $(field missing "$result") $(field unexpected "$result")"
pf_eq "FIFO queue: every body equals the outbox body" 1000 "$(field verbatim "$result")"
pf_eq "FIFO queue: attributes" 1000 "$(field attributes "$result")"
pf_eq "FIFO queue: MessageGroupId = paymentId, MessageDeduplicationId = eventId" 1000 "$(field fifo "$result")"
stop_relay "$fifo_relay"
pf_eq "SIGTERM: exit 0 (FIFO)" 0 "$relay_status"

# --- SIGTERM while a stream flows: finish what is in flight, ack it, exit 0
submit "$run-d" 3000
snapshot "$run-d" "$work/drain-rows.jsonl"
start_relay drain PAYFLOW_RELAY_IN_FLIGHT=2 \
	PAYFLOW_QUEUE_URLS="payment-requests=$sink_drain,payment-completed=$sink_drain"
drain_relay=$relay_pid
some_published() { [ "$(published_of "$run-d")" -ge 200 ]; }
pf_wait_for 30 some_published || true
stop_relay "$drain_relay"
pf_eq "SIGTERM mid-stream: exit 0" 0 "$relay_status"
pf_ok "the relay says it finished and wrote back what was in flight" \
	grep -q '"msg":"stopped: every call in flight finished' "$work/relay-drain.log"
published=$(published_of "$run-d")
left=$(in_outbox "$run-d")
echo "# drained after $published of 3000 published; $left left in the outbox"
pf_eq "published + still in the outbox = all 3,000" 3000 "$((published + left))"
pf_eq "no row is left claimed by the stopped relay" 0 \
	"$(q -c "SELECT count(*) FROM payflow.outbox WHERE message_group_id LIKE '$run-d-%' AND claimed_by IS NOT NULL")"
read_queue "$sink_drain" "$work/drain-1.jsonl"
result=$(verify "$work/drain-1.jsonl" "$work/drain-rows.jsonl" "$run-d" standard)
pf_eq "every message sent before the stop was acked (queue = outbox_published)" "$published" \
	"$(field messages "$result")"
start_relay drain-rest PAYFLOW_QUEUE_URLS="payment-requests=$sink_drain,payment-completed=$sink_drain"
rest_relay=$relay_pid
pf_ok "a new relay sends the rest" pf_wait_for 60 outbox_empty_of "$run-d"
# When the first relay sent everything before its stop, the outbox is empty
# at once: let the new relay start (and take over SIGTERM) before stopping
# it, or the signal's default action ends it (143) before it could drain.
rest_started() { grep -q '"msg":"starting"' "$work/relay-drain-rest.log"; }
pf_wait_for 30 rest_started || true
stop_relay "$rest_relay"
pf_eq "SIGTERM: exit 0 (second relay)" 0 "$relay_status"
# the first read left its messages in flight; this one sees the others
node test/emulator/sqs-read.mjs "$sink_drain" --idle 2 --visibility 300 >"$work/drain-2.jsonl"
cat "$work/drain-1.jsonl" "$work/drain-2.jsonl" >"$work/drain.jsonl"
result=$(verify "$work/drain.jsonl" "$work/drain-rows.jsonl" "$run-d" standard)
pf_eq "after the drain and a restart: all 3,000 delivered exactly once" "3000 3000 0" \
	"$(field messages "$result") $(field distinct "$result") $(field missing "$result")"

# --- the row nobody could send is still there, with the reason
pf_eq "an unknown destination's row stays in the outbox, nacked with the reason" \
	"1|t|t" \
	"$(q -c "SELECT count(*), bool_and(attempts >= 1),
					bool_and(last_error LIKE 'no queue URL configured for destination \"nowhere-$run\"%')
			   FROM payflow.outbox WHERE event_id = '$nowhere_event'")"
pf_ok "the relay logs the unknown destination as a warning with the event id" \
	grep -q "\"level\":\"warn\".*no queue URL configured for destination.*\"eventId\":\"$nowhere_event\"" "$work"/relay-*.log
pf_ok "no log line is anything but JSON" node -e '
	for (const f of process.argv.slice(1))
		for (const l of require("fs").readFileSync(f, "utf8").split("\n").filter(Boolean)) JSON.parse(l);' \
	"$work"/relay-*.log
pf_ok "the secret access key never reaches the logs" bash -c "! grep -qF -- '$AWS_SECRET_ACCESS_KEY' $work/relay-*.log"

pf_done
