#!/bin/bash
# Event-stream slots under pressure:
#
#   per key          one API key holds at most PAYFLOW_API_MAX_STREAMS_PER_KEY
#                    streams: past that 429 with Retry-After and a JSON error,
#                    while other keys still get theirs; all slots taken: 503
#                    with Retry-After
#   hang-ups         a client that vanishes while its stream waits frees the
#                    slot at once (the hub watches suspended sockets), not at
#                    the next keep-alive comment (15 s here)
#   one key, 10,001  10,001 operations followed under one key, past the
#                    10,000 ids payflow.changes() takes per call (54000): the
#                    hub asks in batches, and every stream gets its events
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init api-streams
P=$API_RUN
KA=$(api_key "sa-$API_RUN")
KB=$(api_key "sb-$API_RUN")
KC=$(api_key "sc-$API_RUN")
# 10,001 streams: as many client sockets here
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

submit() {
	local code
	code=$(post_payment "$1" "$2" '{"amount": 5}')
	[ "$code" = 202 ] || { echo "not ok - POST /payments for $2: $code $(cat "$API_DIR/body")" >&2; exit 1; }
	json_field operationId
}
stream_has() { grep -qs "\"status\":\"$2\"" "$1"; }
CURLS=()
api_test_cleanup() {
	local pid
	for pid in "${CURLS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}
# follow NAME KEY OP: a stream in the background, its output in $API_DIR/NAME.sse
follow() {
	sse "$API_URL/operations/$3/events" "$2" "$API_DIR/$1.sse" -m 300 &
	CURLS+=($!)
	eval "pid_$1=\$!"
}
streams_held() { [ "$(metric payflow_api_event_streams)" = "$1" ]; }

# ==== caps: 3 per key, 6 in all; keep-alive comments every 15 s (the most)
api_start cap 4840 PAYFLOW_API_MAX_STREAMS_PER_KEY=3 PAYFLOW_API_MAX_STREAMS=6 PAYFLOW_API_MAX_CONNECTIONS=64 \
	PAYFLOW_POLL_INTERVAL_MS=600000 PAYFLOW_API_IDLE_TIMEOUT=3600
opA=$(submit "$KA" "$P-a")
opB=$(submit "$KB" "$P-b")
opC=$(submit "$KC" "$P-c")
for i in 1 2 3; do follow "a$i" "$KA" "$opA"; done
a_open() { for i in 1 2 3; do stream_has "$API_DIR/a$i.sse" PENDING || return 1; done; }
pf_ok "key A follows its operation three times" pf_wait_for 20 a_open
pf_eq "a fourth stream of key A: 429" "429 too_many_streams" \
	"$(http GET "$API_URL/operations/$opA/events" "$KA" -m 10) $(json_field error.code)"
pf_eq "... with Retry-After" 1 "$(header Retry-After)"
pf_eq "... and a JSON body" application/json "$(header Content-Type)"
follow b1 "$KB" "$opB"
pf_ok "key B still gets a stream" pf_wait_for 20 stream_has "$API_DIR/b1.sse" PENDING
follow c1 "$KC" "$opC"
follow c2 "$KC" "$opC"
c_open() { stream_has "$API_DIR/c1.sse" PENDING && stream_has "$API_DIR/c2.sse" PENDING; }
pf_ok "key C two" pf_wait_for 20 c_open
pf_eq "every slot of the process taken: 503" "503 unavailable" \
	"$(http GET "$API_URL/operations/$opC/events" "$KC" -m 10) $(json_field error.code)"
pf_eq "... with Retry-After" 1 "$(header Retry-After)"

# ==== the clients of key A vanish: their slots come free at once
for i in 1 2 3; do
	eval "kill -KILL \$pid_a$i"
	eval "wait \$pid_a$i" 2>/dev/null || true
done
pf_ok "the three streams of the vanished clients are freed before any keep-alive" pf_wait_for 10 streams_held 3
follow a4 "$KA" "$opA"
pf_ok "key A gets a stream again" pf_wait_for 20 stream_has "$API_DIR/a4.sse" PENDING
api_stop "$API_PID"
pf_eq "SIGTERM: exit 0 with streams open" 0 "$api_status"

# ==== 10,001 operations under one key
N=10001
if [ "$(ulimit -n)" -lt $((N + 500)) ]; then
	pf_skip "10,001 streams under one key" "ulimit -n is $(ulimit -n), $((N + 500)) needed"
	api_contract_check
	pf_done
	exit 0
fi
api_start many 4841 PAYFLOW_API_MAX_STREAMS=10100 PAYFLOW_API_MAX_STREAMS_PER_KEY=10100 \
	PAYFLOW_API_MAX_CONNECTIONS=10300 PAYFLOW_API_MAX_CONNECTIONS_PER_ADDRESS=0 PAYFLOW_API_IDLE_TIMEOUT=3600
q -c "BEGIN" -c "SELECT FROM payflow.authenticate('$KA')" \
	-c "SELECT count(payflow.submit('$P-many-' || n, '{\"amount\": 1}')) FROM generate_series(1, $N) n" \
	-c "COMMIT" >/dev/null
q -c "SELECT id FROM payflow.operations WHERE payment_id LIKE '$P-many-%'" >"$API_DIR/many.ids"
pf_eq "$N operations of one tenant" $N "$(wc -l <"$API_DIR/many.ids")"
cat >"$API_DIR/streams.mjs" <<'JS'
// node streams.mjs URL KEY IDS_FILE: one event stream per operation id,
// spread over 127.0.0.10-19 (port space); prints "open N" once every stream
// got its first status, then, when all ended, one JSON line: how many ended
// with each "<http status> <statuses…>[ error <code>]".  A connection the
// kernel resets before any answer (10,001 connects at once can overflow a
// listen queue on a loaded machine) is tried again, as an EventSource
// reconnects; the retries are printed ("reconnected N") before the JSON.
import http from "node:http";
import { readFileSync } from "node:fs";
const [url, key, file] = process.argv.slice(2);
const ids = readFileSync(file, "utf8").trim().split("\n");
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const outcomes = {};
let pending = ids.length, first = 0, reconnected = 0;
const open = (id, i, tries) => {
	const statuses = [];
	let buf = "", error = "", answered = false;
	const end = (outcome) => {
		outcomes[outcome] = (outcomes[outcome] || 0) + 1;
		if (--pending === 0) {
			if (reconnected) console.log(`reconnected ${reconnected}`);
			console.log(JSON.stringify(outcomes));
			process.exit(0);
		}
	};
	const req = http.get(`${url}/operations/${id}/events`,
		{ agent, headers: { Authorization: `Bearer ${key}` }, localAddress: `127.0.0.${10 + (i % 10)}` }, (res) => {
			answered = true;
			res.setEncoding("utf8");
			res.on("data", (d) => {
				buf += d;
				for (let k; (k = buf.indexOf("\n\n")) >= 0; buf = buf.slice(k + 2)) {
					const ev = buf.slice(0, k), m = ev.match(/^data: (.*)$/m);
					if (!m) continue;
					if (/^event: status$/m.test(ev)) {
						statuses.push(JSON.parse(m[1]).status);
						if (statuses.length === 1 && ++first === ids.length) console.log(`open ${first}`);
					} else if (/^event: error$/m.test(ev)) error = ` error ${JSON.parse(m[1]).error.code}`;
				}
			});
			res.on("end", () => end(`${res.statusCode} ${statuses.join(" ")}${error}`));
		});
	req.on("error", (e) => {
		if (!answered && e.code === "ECONNRESET" && tries < 3) {
			reconnected++;
			setTimeout(() => open(id, i, tries + 1), 200);
		} else end(`failed ${e.code || e.message}`);
	});
};
ids.forEach((id, i) => open(id, i, 0));
JS
timeout 600 node "$API_DIR/streams.mjs" "$API_URL" "$KA" "$API_DIR/many.ids" >"$API_DIR/many.out" 2>&1 &
clients=$!
CURLS+=("$clients")
all_open() { grep -q "^open $N" "$API_DIR/many.out"; }
pf_ok "$N streams under one key, each with its first event (PENDING)" pf_wait_for 120 all_open
q -c "BEGIN" -c "SELECT FROM payflow.authenticate('$KA')" \
	-c "SELECT count(payflow.cancel(id, 'api_streams')) FROM payflow.operations WHERE payment_id LIKE '$P-many-%'" \
	-c "COMMIT" >/dev/null
rc=0
wait "$clients" || rc=$?
pf_eq "every stream ended by itself" 0 "$rc"
pf_eq "every one of the $N got PENDING then CANCELLED, and no error" "{\"200 PENDING CANCELLED\":$N}" \
	"$(tail -1 "$API_DIR/many.out")"
api_stop "$API_PID"
pf_eq "SIGTERM: exit 0" 0 "$api_status"
# the curl streams and every error (the 10,001 node streams are not recorded)
api_contract_check
pf_done
