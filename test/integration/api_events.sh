#!/bin/bash
# GET /operations/{id}/events: an event stream follows an operation to
# COMPLETED while a "worker" (SQL claim_step/complete_step as
# payflow_worker, no queues needed) drives its steps; the statuses arrive
# in order, one event per change, and the stream ends by itself. The API
# runs with its fallback poll at 10 minutes, so only the database's
# NOTIFY payflow_status can have woken it. Then Last-Event-ID, many
# concurrent clients served by ONE listening connection, and SIGTERM
# ending open streams. Every answer, each event of the streams, matches
# the OpenAPI document.
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init api-events
KEY=$(api_key "te-$API_RUN")
P=$API_RUN
q -c "DO \$\$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pf_api_worker') THEN
			CREATE ROLE pf_api_worker LOGIN IN ROLE payflow_worker;
		END IF;
	  END \$\$" >/dev/null
worker() { PGUSER=pf_api_worker pf_psql -Atq -c "$1" >/dev/null; }
claim() { worker "SELECT payflow.claim_step('$1', '$2', 'api-events-test')"; }
complete() { worker "SELECT payflow.complete_step('$1', '$2', 'api-events-test', '{\"ok\": true}')"; }
STEPS=$(q -c "SELECT string_agg(step_name, ' ' ORDER BY position) FROM payflow.step_definitions")

# keep-alive comments every 2 s (half the idle time-out) find vanished clients fast
api_start events 4810 PAYFLOW_POLL_INTERVAL_MS=600000 PAYFLOW_API_POOL_SIZE=4 PAYFLOW_API_IDLE_TIMEOUT=4
submit() {
	local code
	code=$(post_payment "$KEY" "$1" '{"amount": 7, "currency": "EUR"}')
	[ "$code" = 202 ] || { echo "not ok - POST /payments for $1: $code $(cat "$API_DIR/body")" >&2; exit 1; }
	json_field operationId
}
statuses_in() { sed -n 's/^data: .*"status":"\([A-Z_]*\)".*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'; }
history_of() { q -c "SELECT string_agg(to_status, ' ' ORDER BY id) FROM payflow.operation_history WHERE operation_id = '$1'"; }
stream_has() { grep -qs "\"status\":\"$2\"" "$1"; }

# ---- one stream, one operation, step by step
op=$(submit "$P-one")
sse "$API_URL/operations/$op/events" "$KEY" "$API_DIR/one.sse" -m 120 &
stream=$!
pf_ok "the stream opens with the operation's history so far (PENDING)" pf_wait_for 15 stream_has "$API_DIR/one.sse" PENDING
pf_ok "Content-Type: text/event-stream" grep -qi '^content-type: text/event-stream' "$API_DIR/one.sse.headers"
for step in $STEPS; do
	claim "$op" "$step"
	running=$(q -c "SELECT status FROM payflow.operations WHERE id = '$op'")
	pf_ok "$step claimed: $running arrives (NOTIFY, not the poll)" pf_wait_for 20 stream_has "$API_DIR/one.sse" "$running"
	complete "$op" "$step"
	done_status=$(q -c "SELECT status FROM payflow.operations WHERE id = '$op'")
	pf_ok "$step done: $done_status arrives" pf_wait_for 20 stream_has "$API_DIR/one.sse" "$done_status"
done
stream_rc=0
wait "$stream" || stream_rc=$?
pf_eq "the stream ended by itself after COMPLETED" 0 "$stream_rc"
pf_eq "one event per status change, in order (the history)" "$(history_of "$op")" "$(statuses_in "$API_DIR/one.sse")"
pf_eq "the last event is terminal" COMPLETED "$(statuses_in "$API_DIR/one.sse" | awk '{print $NF}')"
pf_ok "... and says so" sh -c "grep '^data:' '$API_DIR/one.sse' | tail -1 | grep -q '\"terminal\":true'"
pf_ok "event ids grow" sh -c "sed -n 's/^id: //p' '$API_DIR/one.sse' | sort -n -c"

# ---- Last-Event-ID resumes after the given event
third=$(sed -n 's/^id: //p' "$API_DIR/one.sse" | sed -n 3p)
sse "$API_URL/operations/$op/events" "$KEY" "$API_DIR/resume.sse" -m 30 -H "Last-Event-ID: $third"
pf_eq "Last-Event-ID: only the later events, then the end" "$(history_of "$op" | cut -d' ' -f4-)" "$(statuses_in "$API_DIR/resume.sse")"

# ---- many clients, one LISTEN connection
cat >"$API_DIR/clients.mjs" <<'JS'
// node clients.mjs URL KEY PER_OP OP...: PER_OP event streams per operation;
// prints "open N" once every stream answered, then one line per stream:
// "<op> <http status> <statuses…>".
import http from "node:http";
const [url, key, perOp, ...ops] = process.argv.slice(2);
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
let pending = 0, answered = 0;
const lines = [];
const total = ops.length * Number(perOp);
for (const op of ops) for (let i = 0; i < Number(perOp); i++) {
	pending++;
	const statuses = [];
	let buf = "";
	const finish = (line) => { lines.push(line); if (--pending === 0) { console.log(lines.join("\n")); process.exit(0); } };
	http.get(`${url}/operations/${op}/events`, { agent, headers: { Authorization: `Bearer ${key}` } }, (res) => {
		if (++answered === total) console.log(`open ${total}`);
		res.setEncoding("utf8");
		res.on("data", (d) => {
			buf += d;
			for (let k; (k = buf.indexOf("\n\n")) >= 0; buf = buf.slice(k + 2)) {
				const ev = buf.slice(0, k), m = ev.match(/^data: (.*)$/m);
				if (m && /^event: status$/m.test(ev)) statuses.push(JSON.parse(m[1]).status);
			}
		});
		res.on("end", () => finish(`${op} ${res.statusCode} ${statuses.join(" ")}`));
	}).on("error", (e) => finish(`${op} error ${e.message}`));
}
JS
N_OPS=10
PER_OP=20
ops=()
for i in $(seq 1 $N_OPS); do ops+=("$(submit "$P-many-$i")"); done
node "$API_DIR/clients.mjs" "$API_URL" "$KEY" "$PER_OP" "${ops[@]}" >"$API_DIR/many.out" 2>&1 &
clients=$!
all_open() { grep -q "^open $((N_OPS * PER_OP))" "$API_DIR/many.out"; }
pf_ok "$((N_OPS * PER_OP)) streams open" pf_wait_for 30 all_open
pf_eq "one listening connection for all of them" 1 \
	"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'pf_api' AND application_name = 'payflow-api events'")"
pf_ok "and no more database connections than the pool + 1" \
	test "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'pf_api'")" -le 5
# half are cancelled (tenant-bound, as the app would), half run every step
for i in $(seq 0 $((N_OPS - 1))); do
	if [ $((i % 2)) = 0 ]; then
		q -c "BEGIN" -c "SELECT FROM payflow.authenticate('$KEY')" -c "SELECT payflow.cancel('${ops[$i]}', 'test')" -c "COMMIT" >/dev/null
	else
		for step in $STEPS; do claim "${ops[$i]}" "$step"; complete "${ops[$i]}" "$step"; done
	fi
done
clients_rc=0
wait "$clients" || clients_rc=$?
pf_eq "every stream ended by itself" 0 "$clients_rc"
pf_eq "every stream got its operation's whole history" "$((N_OPS * PER_OP))" "$(
	n=0
	for i in $(seq 0 $((N_OPS - 1))); do
		expected="${ops[$i]} 200 $(history_of "${ops[$i]}")"
		n=$((n + $(grep -cxF "$expected" "$API_DIR/many.out" || true)))
	done
	echo $n)"
pf_eq "cancelled ones end with CANCELLED" "$((N_OPS / 2 * PER_OP))" "$(grep -c ' CANCELLED$' "$API_DIR/many.out" || true)"
pf_eq "completed ones end with COMPLETED" "$((N_OPS / 2 * PER_OP))" "$(grep -c ' COMPLETED$' "$API_DIR/many.out" || true)"

# ---- clients that vanish (kill -9) while their streams wait: found by the
# keep-alive comments, their streams freed
op_gone=$(submit "$P-gone")
node "$API_DIR/clients.mjs" "$API_URL" "$KEY" 30 "$op_gone" >"$API_DIR/gone.out" 2>&1 &
gone=$!
gone_open() { grep -q "^open 30" "$API_DIR/gone.out"; }
pf_ok "30 streams open on one operation" pf_wait_for 30 gone_open
streams_held() { [ "$(metric payflow_api_event_streams)" = "$1" ]; }
pf_ok "/metrics counts them" pf_wait_for 15 streams_held 30
kill -KILL "$gone"
wait "$gone" 2>/dev/null || true
pf_ok "the streams of vanished clients are freed" pf_wait_for 30 streams_held 0

# ---- PostgreSQL restarts under an open stream: the hub reconnects, LISTENs
# again, and the stream goes on (the poll is still 10 minutes away)
op_restart=$(submit "$P-restart")
sse "$API_URL/operations/$op_restart/events" "$KEY" "$API_DIR/restart.sse" -m 120 &
restart_stream=$!
pf_ok "a stream follows an operation" pf_wait_for 15 stream_has "$API_DIR/restart.sse" PENDING
pf_cluster_stop
pf_cluster_start
for step in $STEPS; do claim "$op_restart" "$step"; complete "$op_restart" "$step"; done
pf_ok "after the restart its changes still arrive, to COMPLETED" pf_wait_for 30 stream_has "$API_DIR/restart.sse" COMPLETED
rc=0
wait "$restart_stream" || rc=$?
pf_eq "... and the stream ends by itself" 0 "$rc"
pf_eq "... with every change once, in order" "$(history_of "$op_restart")" "$(statuses_in "$API_DIR/restart.sse")"

# ---- SIGTERM ends open streams and exits 0
op_open=$(submit "$P-open")
for i in 1 2 3; do
	sse "$API_URL/operations/$op_open/events" "$KEY" "$API_DIR/open-$i.sse" -m 60 &
	eval "open_$i=\$!"
done
opened() { for i in 1 2 3; do stream_has "$API_DIR/open-$i.sse" PENDING || return 1; done; }
pf_ok "three streams follow a PENDING operation" pf_wait_for 15 opened
api_stop "$API_PID"
pf_eq "SIGTERM: exit 0 with streams open" 0 "$api_status"
for i in 1 2 3; do
	rc=0
	eval "wait \$open_$i" || rc=$?
	pf_eq "SIGTERM: stream $i was closed cleanly" 0 "$rc"
done
# the curl streams' events included (the node clients' are not recorded)
api_contract_check
pf_done
