#!/bin/bash
# payflow-relay under faults; nothing is lost in any of them:
#
#   - wrong credentials (a bad secret, an unknown key id): the AWS error code
#     (SignatureDoesNotMatch, InvalidClientTokenId) is logged, nothing is
#     published, the rows stay in the outbox with the error; restarted with
#     the right secret, the relay delivers everything;
#   - kill -9 in the middle of a stream: a new relay delivers every event
#     once the dead relay's claims expire; the only duplicates are events
#     that were sent but not yet acked, at most PAYFLOW_RELAY_IN_FLIGHT
#     batches of ten;
#   - the emulator stopped and started again under a running relay: the
#     relay logs the outage, keeps running and delivers what was submitted
#     meanwhile once SQS is back (fauxqs starts empty; start.sh recreates
#     the queues under the same URLs);
#   - PostgreSQL restarted in the middle of a stream: the relay keeps
#     running, reconnects and LISTENs again by itself; every event arrives
#     (those sent but not acked before the restart may arrive twice).
#
# Uses the running cluster from test/lib/cluster.sh and its own emulator
# (ports 4622/4623, a private run dir). Rows of earlier tests may sit in the
# outbox; this test only counts its own (payment ids with a per-run prefix).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/relay_common.bash

relay_test_cleanup() {
	# whatever happened, leave the cluster running for the tests after this one
	pf_cluster_start >/dev/null 2>&1 || true
}
relay_init rf 4622
secret=$AWS_SECRET_ACCESS_KEY

# one queue of the emulator per scenario, so each reads only its own
sink_auth=$(queue_url "$PAYFLOW_QUEUE_URLS" payment-requests)
sink_kill=$(queue_url "$PAYFLOW_QUEUE_URLS" invoice-requests)
sink_outage=$(queue_url "$PAYFLOW_QUEUE_URLS" operation-events)
sink_db=$(queue_url "$PAYFLOW_QUEUE_URLS" payment-completed)
routes() { echo "payment-requests=$1,payment-completed=$1"; }



# submit PREFIX N: N operations in one statement, payment ids PREFIX-1..N
submit() {
	q -c "SELECT count(payflow.submit('$1-' || g, jsonb_build_object('amount', g)))
			FROM generate_series(1, $2) g" >/dev/null
}
event_ids_of() {
	q -c "SELECT event_id FROM payflow.outbox WHERE message_group_id LIKE '$1-%' ORDER BY 1" >"$2"
}
logged() { grep -q "$1" "$2"; }


# tally MESSAGES EXPECTED_IDS PREFIX: "messages distinct missing" of the prefix
tally() {
	node -e '
const fs = require("fs");
const [messagesFile, idsFile, prefix] = process.argv.slice(1);
const expected = new Set(fs.readFileSync(idsFile, "utf8").split("\n").filter(Boolean));
const ids = fs.readFileSync(messagesFile, "utf8").split("\n").filter(Boolean)
	.map((l) => JSON.parse(JSON.parse(l).body)).filter((b) => b.paymentId.startsWith(prefix + "-"))
	.map((b) => b.eventId);
const seen = new Set(ids);
console.log(ids.length, seen.size, [...expected].filter((id) => !seen.has(id)).length);' "$@"
}

# --- wrong credentials: the AWS error code in the log, nothing published
submit "$run-a" 50
event_ids_of "$run-a" "$work/auth-ids.txt"
start_relay bad-secret AWS_SECRET_ACCESS_KEY="not-$secret" PAYFLOW_QUEUE_URLS="$(routes "$sink_auth")"
bad_relay=$relay_pid
pf_ok "a wrong secret: the relay logs SignatureDoesNotMatch" \
	pf_wait_for 15 logged '"errorCode":"SignatureDoesNotMatch"' "$work/relay-bad-secret.log"
stop_relay "$bad_relay"
pf_eq "a relay whose sends all fail still stops cleanly (exit 0)" 0 "$relay_status"
start_relay bad-key AWS_ACCESS_KEY_ID=AKIDNOSUCHKEY PAYFLOW_QUEUE_URLS="$(routes "$sink_auth")"
bad_relay=$relay_pid
pf_ok "an unknown access key: the relay logs InvalidClientTokenId" \
	pf_wait_for 15 logged '"errorCode":"InvalidClientTokenId"' "$work/relay-bad-key.log"
stop_relay "$bad_relay"
pf_eq "exit 0 after SIGTERM (unknown key)" 0 "$relay_status"
pf_eq "with wrong credentials nothing is published" "0" \
	"$(node test/emulator/sqs-count.mjs "$sink_auth" | node -e 'const c = JSON.parse(require("fs").readFileSync(0, "utf8"));
		console.log(c.visible + c.notVisible + c.delayed)')"
pf_eq "the rows stay in the outbox, nacked with the AWS error" "50|t" \
	"$(q -c "SELECT count(*), bool_or(last_error LIKE '%SignatureDoesNotMatch%' OR last_error LIKE '%InvalidClientTokenId%')
			   FROM payflow.outbox WHERE message_group_id LIKE '$run-a-%'")"
pf_ok "the wrong secret is never logged" bash -c "! grep -qF -- 'not-$secret' $work/relay-bad-*.log"
start_relay good-secret PAYFLOW_QUEUE_URLS="$(routes "$sink_auth")"
good_relay=$relay_pid
# the nacks backed the rows off (1 s, 2 s, 4 s, ...): give it time
pf_ok "restarted with the right secret, the relay delivers everything" pf_wait_for 45 outbox_empty_of "$run-a"
stop_relay "$good_relay"
pf_eq "exit 0 after SIGTERM (right secret)" 0 "$relay_status"
read_queue "$sink_auth" "$work/auth.jsonl"
pf_eq "all 50 on the queue, once each" "50 50 0" "$(tally "$work/auth.jsonl" "$work/auth-ids.txt" "$run-a")"

# --- kill -9 mid-stream: claims expire, a new relay sends the rest
in_flight=4
submit "$run-k" 3000
event_ids_of "$run-k" "$work/kill-ids.txt"
start_relay killed PAYFLOW_RELAY_IN_FLIGHT=$in_flight PAYFLOW_RELAY_LEASE_SECONDS=5 \
	PAYFLOW_QUEUE_URLS="$(routes "$sink_kill")"
killed_relay=$relay_pid
some_published() { [ "$(published_of "$run-k")" -ge 300 ]; }
pf_wait_for 30 some_published || true
kill -KILL "$killed_relay"
wait "$killed_relay" 2>/dev/null || true
echo "# killed after $(published_of "$run-k") of 3000 were acked; $(q -c "SELECT count(*) FROM payflow.outbox
	WHERE message_group_id LIKE '$run-k-%' AND claim_expires_at > now()") rows still claimed"
start_relay after-kill PAYFLOW_RELAY_IN_FLIGHT=$in_flight PAYFLOW_RELAY_LEASE_SECONDS=5 \
	PAYFLOW_QUEUE_URLS="$(routes "$sink_kill")"
after_relay=$relay_pid
pf_ok "after kill -9 a new relay delivers the rest (claims expire after 5 s)" pf_wait_for 60 outbox_empty_of "$run-k"
stop_relay "$after_relay"
pf_eq "exit 0 after SIGTERM (relay after the kill)" 0 "$relay_status"
read_queue "$sink_kill" "$work/kill.jsonl"
read -r messages distinct missing <<<"$(tally "$work/kill.jsonl" "$work/kill-ids.txt" "$run-k")"
duplicates=$((messages - distinct))
echo "# $messages messages, $distinct distinct events, $duplicates duplicates"
pf_eq "after kill -9 every event was delivered" "3000 0" "$distinct $missing"
# the README's bound: in-flight calls and as many again whose acks are being written
pf_ok "duplicates ($duplicates) are at most the sent-and-unacked bound (2 x $in_flight batches of 10)" \
	test "$duplicates" -le $((2 * in_flight * 10))

# --- SQS goes away and comes back under a running relay
start_relay outage PAYFLOW_QUEUE_URLS="$(routes "$sink_outage")"
outage_relay=$relay_pid
submit "$run-o1" 100
pf_ok "before the outage: delivered" pf_wait_for 30 outbox_empty_of "$run-o1"
test/emulator/stop.sh >/dev/null 2>&1
submit "$run-o2" 100
event_ids_of "$run-o2" "$work/outage-ids.txt"
pf_ok "during the outage the relay logs the failed sends" \
	pf_wait_for 20 logged '"errorCode":"NetworkError"' "$work/relay-outage.log"
pf_ok "during the outage the events wait in the outbox" test "$(in_outbox "$run-o2")" = 100
pf_ok "the relay keeps running during the outage" kill -0 "$outage_relay"
start_emulator
pf_ok "SQS back: the relay delivers what was submitted during the outage" pf_wait_for 60 outbox_empty_of "$run-o2"
pf_ok "the relay logs that SQS accepts messages again" logged 'SQS accepts messages again' "$work/relay-outage.log"
stop_relay "$outage_relay"
pf_eq "exit 0 after SIGTERM (outage)" 0 "$relay_status"
read_queue "$sink_outage" "$work/outage.jsonl"
pf_eq "all 100 of the outage on the (new) queue" "100 100 0" "$(tally "$work/outage.jsonl" "$work/outage-ids.txt" "$run-o2")"

# --- PostgreSQL restarts under a running relay (a 30 s poll: only its own
# reconnect and LISTEN bring the events submitted after the restart)
submit "$run-p" 2000
event_ids_of "$run-p" "$work/pg-ids.txt"
start_relay pg-restart PAYFLOW_RELAY_IN_FLIGHT=$in_flight PAYFLOW_RELAY_LEASE_SECONDS=5 \
	PAYFLOW_POLL_INTERVAL_MS=30000 PAYFLOW_QUEUE_URLS="$(routes "$sink_db")"
pg_relay=$relay_pid
pg_some_published() { [ "$(published_of "$run-p")" -ge 300 ]; }
pf_wait_for 30 pg_some_published || true
pf_cluster_stop
sleep 2
pf_ok "the relay keeps running while PostgreSQL is down" kill -0 "$pg_relay"
pf_cluster_start
pf_ok "PostgreSQL back: the relay delivers the rest of the stream" pf_wait_for 60 outbox_empty_of "$run-p"
submit "$run-p-late" 10
q -c "SELECT event_id FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
	   WHERE o.payment_id LIKE '$run-p-late-%' UNION ALL
	  SELECT event_id FROM payflow.outbox WHERE message_group_id LIKE '$run-p-late-%'" >>"$work/pg-ids.txt"
pf_ok "after the restart the relay is woken by NOTIFY again (delivered within 10 s, poll 30 s)" \
	pf_wait_for 10 outbox_empty_of "$run-p-late"
pf_ok "the relay logged the lost connection" logged 'PostgreSQL connection lost' "$work/relay-pg-restart.log"
stop_relay "$pg_relay"
pf_eq "exit 0 after SIGTERM (PostgreSQL restart)" 0 "$relay_status"
read_queue "$sink_db" "$work/pg.jsonl"
read -r messages distinct missing <<<"$(tally "$work/pg.jsonl" "$work/pg-ids.txt" "$run-p")"
echo "# $messages messages, $distinct distinct events"
pf_eq "across the PostgreSQL restart every event was delivered" "2010 0" "$distinct $missing"
pf_ok "duplicates ($((messages - distinct))) are at most the sent-and-unacked bound" \
	test $((messages - distinct)) -le $((2 * in_flight * 10))

pf_ok "no log line is anything but JSON" node -e '
	for (const f of process.argv.slice(1))
		for (const l of require("fs").readFileSync(f, "utf8").split("\n").filter(Boolean)) JSON.parse(l);' \
	"$work"/relay-*.log
pf_ok "the secret access key never reaches the logs" bash -c "! grep -qF -- '$secret' $work/relay-*.log"

pf_done
