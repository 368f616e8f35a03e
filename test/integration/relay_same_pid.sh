#!/bin/bash
# payflow-relay reconnects to a session that reports the backend PID of the
# one it lost, and keeps delivering: its prepared statements belong to a
# connection generation (pg.c), not to a PID, so the new session prepares
# them again instead of failing every statement with 26000 and dropping acks.
#
# How the same PID is made, for real: the relay connects through
# test/lib/pg_fixed_pid_proxy.mjs, which passes everything through but
# reports one fixed PID in every session's BackendKeyData. Each session is
# still a real backend of its own, as behind a pooler or after a server
# restart in a fresh PID namespace (where PIDs repeat). The test kills the
# relay's backend with pg_terminate_backend, the relay reconnects through
# the proxy and is told the same PID, and events submitted after that must
# still arrive and be acked.
#
# Uses the running cluster from test/lib/cluster.sh and its own emulator
# (ports 4626/4627, a private run dir). Rows of earlier tests may sit in the
# outbox; this test only counts its own (payment ids with a per-run prefix).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/integration/relay_common.bash

proxy_pid=
relay_test_cleanup() { [ -z "$proxy_pid" ] || pf_kill_ours TERM "$proxy_pid"; }
relay_init rp 4626
queue=$(queue_url "$PAYFLOW_QUEUE_URLS" payment-requests)
app=payflow-relay-same-pid-$$

node test/lib/pg_fixed_pid_proxy.mjs 127.0.0.1 "$PGPORT" 4242 >"$work/proxy.log" 2>&1 &
proxy_pid=$!
pf_ok "the proxy listens" pf_wait_for 10 grep -q '"listening"' "$work/proxy.log"
proxy_port=$(sed -n 's/.*"listening":\([0-9]*\).*/\1/p' "$work/proxy.log")
sessions() { grep -c '"session"' "$work/proxy.log" || true; }
# asked again on every try (a "$(sessions)" argument would be counted once)
reconnected() { [ "$(sessions)" -ge 2 ]; }

submit() {
	q -c "SELECT count(payflow.submit('$run-$1-' || g, jsonb_build_object('amount', g)))
			FROM generate_series(1, $2) g" >/dev/null
}
relay_backend() { q -c "SELECT pid FROM pg_stat_activity WHERE application_name = '$app'"; }
has_backend() { [ -n "$(relay_backend)" ]; }

start_relay a PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_QUEUE_URLS="payment-requests=$queue" \
	PAYFLOW_DATABASE_URL="host=127.0.0.1 port=$proxy_port user=$PGUSER dbname=$PGDATABASE sslmode=disable gssencmode=disable application_name=$app"
relay=$relay_pid

# a first round over the first session: the statements get prepared
submit a 20
pf_ok "round one: 20 events delivered and acked" pf_wait_for 60 outbox_empty_of "$run-a"
first=$(relay_backend)
pf_ok "the relay has one backend" test -n "$first"

# the controlled reconnect: a new backend, the same reported PID
q -c "SELECT pg_terminate_backend($first, 5000)" >/dev/null
pf_ok "the relay reconnects through the proxy" pf_wait_for 30 reconnected
pf_wait_for 10 has_backend || true
second=$(relay_backend)
pf_ok "its new session is another backend ($first, then ${second:-none})" test -n "$second" -a "$second" != "$first"
pf_eq "both sessions told the relay the same PID" "4242 4242" \
	"$(sed -n 's/.*"reportedPid":\([0-9]*\).*/\1/p' "$work/proxy.log" | head -n 2 | tr '\n' ' ' | sed 's/ $//')"

# a second round after the reconnect: needs statements prepared in the new session
submit b 20
pf_ok "round two, after the reconnect: 20 events delivered and acked" pf_wait_for 60 outbox_empty_of "$run-b"
pf_ok "no statement failed with 26000 (prepared statement does not exist)" \
	bash -c "! grep -q '26000\|does not exist' '$work/relay-a.log'"
pf_ok "no ack was dropped" bash -c "! grep -q 'dropping' '$work/relay-a.log'"

stop_relay "$relay"
pf_eq "the relay stops cleanly (exit 0)" 0 "$relay_status"
q -c "SELECT event_id FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
	   WHERE o.payment_id LIKE '$run-%'" | sort >"$work/ids.txt"
pf_eq "40 events published" 40 "$(wc -l <"$work/ids.txt")"
read_queue "$queue" "$work/messages.jsonl"
missing=$(node -e '
const fs = require("fs");
const [messagesFile, idsFile] = process.argv.slice(1);
const seen = new Set(fs.readFileSync(messagesFile, "utf8").split("\n").filter(Boolean)
	.map((l) => JSON.parse(JSON.parse(l).body).eventId));
console.log(fs.readFileSync(idsFile, "utf8").split("\n").filter(Boolean).filter((id) => !seen.has(id)).length);' \
	"$work/messages.jsonl" "$work/ids.txt")
pf_eq "every published event is on the queue" 0 "$missing"
if [ "$PF_FAILURES" -ne 0 ]; then
	echo "--- relay log (last 30 lines)"
	tail -n 30 "$work/relay-a.log" | cut -c1-300
	echo "--- proxy log"
	cat "$work/proxy.log"
fi
pf_done
