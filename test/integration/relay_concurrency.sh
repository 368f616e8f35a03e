#!/bin/bash
# Two payflow-relay processes side by side on 1,000 events: the database
# hands each row to one relay (outbox_claim, FOR UPDATE SKIP LOCKED), so
# every event arrives, and none twice (no claim can expire within this test's
# 30 s leases); both relays take part.
#
# Uses the running cluster from test/lib/cluster.sh and its own emulator
# (ports 4624/4625, a private run dir). Rows of earlier tests may sit in the
# outbox; this test only counts its own (payment ids with a per-run prefix).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/relay_common.bash

relay_init rc 4624
queue=$(tr ',' '\n' <<<"$PAYFLOW_QUEUE_URLS" | sed -n 's|^payment-requests=||p')

# "sent" in a relay's last statistics line
sent_by() { grep '"msg":"stopped' "$1" | tail -n 1 | sed -n 's/.*"sent":\([0-9]*\).*/\1/p'; }

start_relay a PAYFLOW_WORKER_ID="relay-a-$run" PAYFLOW_RELAY_IN_FLIGHT=4
relay_a=$relay_pid
start_relay b PAYFLOW_WORKER_ID="relay-b-$run" PAYFLOW_RELAY_IN_FLIGHT=4
relay_b=$relay_pid
sleep 1

# five commits of 200, so both relays are woken several times
for part in 0 1 2 3 4; do
	q -c "SELECT count(payflow.submit('$run-' || g, jsonb_build_object('amount', g)))
			FROM generate_series($((part * 200 + 1)), $((part * 200 + 200))) g" >/dev/null
done
q -c "SELECT event_id FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
	   WHERE o.payment_id LIKE '$run-%'
	  UNION ALL
	  SELECT event_id FROM payflow.outbox WHERE message_group_id LIKE '$run-%'" | sort >"$work/ids.txt"
pf_eq "1,000 events to send" 1000 "$(wc -l <"$work/ids.txt")"

pf_ok "two relays empty the outbox" pf_wait_for 60 outbox_empty_of "$run"
stop_relay "$relay_a"
pf_eq "relay a: exit 0 after SIGTERM" 0 "$relay_status"
stop_relay "$relay_b"
pf_eq "relay b: exit 0 after SIGTERM" 0 "$relay_status"

node test/emulator/sqs-read.mjs "$queue" --idle 2 --visibility 300 >"$work/messages.jsonl"
read -r messages distinct missing <<<"$(node -e '
const fs = require("fs");
const [messagesFile, idsFile, prefix] = process.argv.slice(1);
const expected = new Set(fs.readFileSync(idsFile, "utf8").split("\n").filter(Boolean));
const ids = fs.readFileSync(messagesFile, "utf8").split("\n").filter(Boolean)
	.map((l) => JSON.parse(JSON.parse(l).body)).filter((b) => b.paymentId.startsWith(prefix + "-"))
	.map((b) => b.eventId);
const seen = new Set(ids);
console.log(ids.length, seen.size, [...expected].filter((id) => !seen.has(id)).length);' \
	"$work/messages.jsonl" "$work/ids.txt" "$run")"
pf_eq "every one of the 1,000 events arrived" "1000 0" "$distinct $missing"
pf_eq "no event was sent by both relays" 1000 "$messages"
sent_a=$(sent_by "$work/relay-a.log")
sent_b=$(sent_by "$work/relay-b.log")
echo "# relay a sent $sent_a, relay b sent $sent_b"
pf_ok "both relays took part" test "${sent_a:-0}" -gt 0 -a "${sent_b:-0}" -gt 0
pf_eq "outbox_published has each event once" "1000|1000" \
	"$(q -c "SELECT count(*), count(DISTINCT event_id) FROM payflow.outbox_published p
			   JOIN payflow.operations o ON o.id = p.operation_id WHERE o.payment_id LIKE '$run-%'")"

pf_done
