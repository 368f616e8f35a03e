#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# No secret and no card data leaks: a short real pipeline (payflow-api when
# built, the relay, the payment, postprocess, invoice and webhook workers,
# the SQS emulator, the legacy DBMS and the invoice API and webhook
# receiver stand-ins) runs with known, unique values of
#
#   AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, a password in
#   PAYFLOW_DATABASE_URL and in PAYFLOW_LEGACY_ODBC, an API key (and a
#   wrong one a client sent), a webhook signing secret, and card-like
#   fields in the details: a unique Luhn-valid card number, "cvv",
#   "cardNumber"
#
# and afterwards searches, for each value:
#
#   every span the processes exported (OpenTelemetry, to a local OTLP
#   receiver, with a collector token in OTEL_EXPORTER_OTLP_HEADERS that is
#   searched too), every process log (relay, workers, api, psqlODBC's CommLog of the
#   payment worker, the two stand-ins), every message body and its
#   attributes that went through the queues (read from each queue, stage by
#   stage, before the next consumer runs), what the invoice API and the
#   webhook receiver were sent, every payflow table but payloads and the
#   API keys' hashes (the outbox log, dead_letters, webhook_failures,
#   operations, steps, history, the webhooks with their sealed secrets,
#   ...), and the lines the PostgreSQL server logged during the run.
#
# and, for each request (card number included), its plain SHA-256 and the
# plain hash of its payment id and details (what the idempotency check
# used to keep): those name the card number to anyone who can guess the
# other fields (issue 26, M4).  The API puts the tenant's requests to S3
# (PAYFLOW_STORE=s3, a low threshold), so the bucket's keys and each
# object's metadata are searched too.
#
# It must find none.  Positive controls prove the search works and the
# values were in play: the card number is found in payflow.payloads (where
# the request legitimately lives) by the same search; the AWS secret and
# session token are in the relay's environment; the API accepted the key
# (202) and refused the wrong one (401); the receiver verified the
# webhooks' signatures made with the secret.
#
# Ports: emulator 4963/4964, invoice stand-in 4965, webhook receiver 4966,
# payflow-api 4967, OTLP receiver 4968 (PAYFLOW_TEST_LEAKS_PORT_BASE moves all six).
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/payload_checksum.sh

BASE=${PAYFLOW_TEST_LEAKS_PORT_BASE:-4963}
EMU_PORT=$BASE INV_PORT=$((BASE + 2)) RECV_PORT=$((BASE + 3)) API_PORT=$((BASE + 4)) OTLP_PORT=$((BASE + 5))
RUN=leak$$
P=$RUN
q() { pf_psql -Atq "$@"; }
legacy() { pf_psql -d legacy -Atq "$@"; }
say() { printf '# %s\n' "$*"; }

DIR=$(mktemp -d /tmp/payflow-secret-leaks.XXXXXX)
CAP=$DIR/captured			# everything searched lands here, one file per source
mkdir -p "$CAP"
PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		rm -f "/tmp/psqlodbc_payflow-worker_$(id -un)$pid.log"
	done
	q -c "UPDATE payflow.step_definitions SET retry_base_delay = NULL, retry_max_delay = NULL" >/dev/null 2>&1 || true
	q -c "SELECT payflow.delete_webhook('$RUN-tenant')" >/dev/null 2>&1 || true
	legacy -c "SELECT clear_faults()" >/dev/null 2>&1 || true
	PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	PAYFLOW_WEBHOOK_RECEIVER_RUN_DIR=$DIR/receiver test/fixtures/webhook-receiver/stop.sh >/dev/null 2>&1 || true
	PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator test/emulator/stop.sh >/dev/null 2>&1 || true
	if [ "$PF_FAILURES" -ne 0 ]; then
		for f in "$DIR"/*.log; do
			[ -f "$f" ] || continue
			echo "--- $(basename "$f") (last 20 lines)"
			tail -n 20 "$f" | cut -c1-300
		done
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT
for bin in payflow-relay payflow-worker; do
	[ -x "workers/bin/$bin" ] || { echo "not ok - workers/bin/$bin is missing (make -C workers)"; exit 1; }
done

# ---- the known values ----
rand() { od -An -N8 -tx8 /dev/urandom | tr -d ' \n'; }
AWS_SECRET=leakcheck-aws-secret-$(rand)
SESSION_TOKEN=leakcheck-session-token-$(rand)
DB_PASSWORD=leakcheck-db-password-$(rand)
OTLP_TOKEN=leakcheck-otlp-token-$(rand)
WRONG_KEY=pfk_$(rand)$(rand)$(rand)$(rand)
# a card number no other test uses: 4 + 14 random digits + the Luhn digit
CARD=$(node -e 'let d="4";for(let i=0;i<14;i++)d+=Math.floor(Math.random()*10);let s=0;
	for(let i=0;i<15;i++){let n=+d[14-i];if(i%2===0){n*=2;if(n>9)n-=9}s+=n}console.log(d+(10-s%10)%10)')
PG_LOG=$PF_CLUSTER_DIR/postgres.log
PG_LOG_START=$(($(stat -c %s "$PG_LOG" 2>/dev/null || echo 0) + 1))

# ---- the stack ----
export PAYFLOW_EMULATOR_PORT=$EMU_PORT PAYFLOW_EMULATOR_BACKEND_PORT=$((EMU_PORT + 1))
export PAYFLOW_EMULATOR_RUN_DIR=$DIR/emulator PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT=10
# the front accepts only this secret: every signed call proves it was used
export PAYFLOW_TEST_AWS_SECRET_ACCESS_KEY=$AWS_SECRET
eval "$(test/emulator/start.sh 2>"$DIR/emulator-start.log")"
export AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY PAYFLOW_QUEUE_URLS
export AWS_SESSION_TOKEN=$SESSION_TOKEN
queue_url() { echo "$PAYFLOW_QUEUE_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }

export PAYFLOW_INVOICE_API_PORT=$INV_PORT PAYFLOW_INVOICE_API_RUN_DIR=$DIR/invoice-api
eval "$(test/fixtures/invoice-api/start.sh 2>"$DIR/invoice-api-start.log")"
export PAYFLOW_INVOICE_URL
curl -fsS -X POST "http://127.0.0.1:$INV_PORT/_reset" >/dev/null
export PAYFLOW_WEBHOOK_RECEIVER_PORT=$RECV_PORT PAYFLOW_WEBHOOK_RECEIVER_RUN_DIR=$DIR/receiver
eval "$(test/fixtures/webhook-receiver/start.sh 2>"$DIR/receiver-start.log")"
RECV=$PAYFLOW_WEBHOOK_RECEIVER_URL

export PAYFLOW_LEGACY_ODBC
PAYFLOW_LEGACY_ODBC=$(test/fixtures/legacy/setup.sh 2>"$DIR/legacy-setup.log")
# the fixture's client authenticates with a password: that one is searched
ODBC_PASSWORD=$(echo "$PAYFLOW_LEGACY_ODBC" | sed -n 's/.*Pwd=\([^;]*\).*/\1/p')
[ -n "$ODBC_PASSWORD" ] || { echo "not ok - the legacy fixture's connection string has no Pwd"; exit 1; }
legacy -c "SELECT clear_faults()" -c "SELECT set_fault('permanent', payment_id => '$P-declined', fn => 'charge')" >/dev/null
# trust authentication: the password is carried, never checked
export PAYFLOW_DATABASE_URL="postgresql://postgres:$DB_PASSWORD@127.0.0.1:$PF_PGPORT/$PF_DB"
export PAYFLOW_LEGACY_CALL='SELECT * FROM charge(:idempotency_key, :payment_id, :details.amount, :details.currency)'
export PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
export PAYFLOW_LOG_LEVEL=debug PAYFLOW_POLL_INTERVAL_MS=200 PAYFLOW_VISIBILITY_TIMEOUT=5
q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'" >/dev/null

API_KEY=$(q -c "SELECT payflow.create_api_key('$RUN-tenant', 'leak test')")
WEBHOOK_SECRET=$(q -c "SELECT payflow.set_webhook('$RUN-tenant', '$RECV/leak')")
curl -fsS -X POST "$RECV/_secrets" -H 'Content-Type: application/json' \
	-d "{\"path\": \"/leak\", \"secret\": \"$WEBHOOK_SECRET\"}" >/dev/null

# start NAME COMMAND...: in the background, log in $DIR/NAME.log, pid in PID_<NAME>
start() {
	local name=$1
	shift
	"$@" >"$DIR/$name.log" 2>&1 &
	PIDS+=($!)
	printf -v "PID_$name" '%s' "$!"
}
start_worker() {
	PAYFLOW_QUEUE_URL=$(queue_url "$2") PAYFLOW_WORKER_ID=$RUN-$1 start "$1" workers/bin/payflow-worker --role "$1"
	pf_wait_for 15 grep -qs '"payflow-worker started"' "$DIR/$1.log" || say "the $1 worker did not say it started"
}
# every process exports its spans (issue 29): they are searched too
test/otel/install.sh
start otlp node test/otel/receiver.mjs "$OTLP_PORT" "$DIR/spans.jsonl"
pf_wait_for 10 curl -fsS "http://127.0.0.1:$OTLP_PORT/_stats" -o /dev/null || say "the OTLP receiver did not start"
export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_PORT OTEL_BSP_SCHEDULE_DELAY=200
export OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20$OTLP_TOKEN"
start relay workers/bin/payflow-relay

# ---- operations with card data: through the API (its tenant), and plain SQL ----
details() {
	printf '{"amount": "%s", "currency": "EUR", "customer": "C-%s", "cardNumber": "%s", "cvv": "737", "cardHolder": "LEAK TESTER"}' \
		"$1" "$2" "$CARD"
}
HAVE_API=0
if [ -x workers/bin/payflow-api ]; then
	HAVE_API=1
	# the tenant's requests go to S3: their keys and metadata are searched
	PAYFLOW_LISTEN=127.0.0.1:$API_PORT PAYFLOW_STORE=s3 PAYFLOW_API_S3_THRESHOLD=64 start api workers/bin/payflow-api
	pf_wait_for 15 curl -fsS "http://127.0.0.1:$API_PORT/healthz" -o /dev/null || say "payflow-api did not answer /healthz"
fi
# tenant_submit PAYMENT_ID AMOUNT: an operation of the tenant, with its API key
tenant_submit() {
	if [ $HAVE_API = 1 ]; then
		curl -sS -o "$DIR/api-answer.json" -w '%{http_code}' -X POST "http://127.0.0.1:$API_PORT/payments" \
			-H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
			-H "X-Correlation-Id: corr-$1" -d "{\"paymentId\": \"$1\", \"details\": $(details "$2" "$1")}"
	else
		q -c "SET ROLE payflow_app" -c "SELECT payflow.submit('$1', '$(details "$2" "$1")'::jsonb, NULL, 'corr-$1')
										FROM payflow.authenticate('$API_KEY')" >/dev/null
		echo 202
	fi
}
codes=""
for n in 1 2 3; do
	codes="$codes$(tenant_submit "$P-t$n" "$n.50") "
done
codes="$codes$(tenant_submit "$P-declined" "9.99")"
pf_eq "the tenant's requests were accepted with its API key (202 each)" "202 202 202 202" "$codes"
if [ $HAVE_API = 1 ]; then
	pf_eq "a request with a wrong API key is refused (401)" 401 \
		"$(curl -sS -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$API_PORT/payments" \
			-H "Authorization: Bearer $WRONG_KEY" -H 'Content-Type: application/json' \
			-d "{\"paymentId\": \"$P-wrong\", \"details\": $(details 1.00 wrong)}")"
fi
q -c "SELECT payflow.submit('$P-s' || n, format('$(details "%s.75" "%s")', n, n)::jsonb, correlation_id => 'corr-$P-s' || n)
	  FROM generate_series(1, 2) n" >/dev/null
mapfile -t OPS < <(q -c "SELECT id FROM payflow.operations WHERE payment_id LIKE '$P-%' ORDER BY id")
pf_eq "6 operations submitted" 6 "${#OPS[@]}"
IDS="'$(IFS=,; echo "${OPS[*]}" | sed "s/,/','/g")'"

# ---- the pipeline, one stage at a time; each queue read before its consumer starts ----
outbox_drained() { [ "$(q -c "SELECT count(*) FROM payflow.outbox WHERE operation_id IN ($IDS)")" = 0 ]; }
# capture QUEUE N: the messages waiting in QUEUE (body and attributes), left
# there, N events of this run among them.  The cluster is shared with the
# tests before this one, whose events still waiting in the outbox this
# run's relay sends too (a clean-clone run read six messages, some of
# them other tests', and missed one of its own), and delivery is at least
# once: the reader takes every message waiting, the check counts this
# run's events.
capture() {
	pf_wait_for 30 outbox_drained || say "the outbox kept events of this run"
	node test/emulator/sqs-read.mjs "$(queue_url "$1")" --max 200 --idle 3 --visibility 5 >"$CAP/queue-$1.jsonl"
	pf_eq "$1: the $2 events of this run read before their consumer runs" "$2" \
		"$(RUN_OPS="${OPS[*]}" node -e 'const ops = new Set(process.env.RUN_OPS.split(" "));
			const ids = new Set(require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)
				.map((l) => { try { return JSON.parse(JSON.parse(l).body); } catch { return {}; } })
				.filter((b) => ops.has(b.operationId)).map((b) => b.eventId));
			console.log(ids.size)' "$CAP/queue-$1.jsonl")"
}
# stage CHECK...: a pipeline stage must work, or nothing after it can be judged
stage() {
	pf_ok "$@"
	[ "$PF_FAILURES" = 0 ] || { echo "# the pipeline broke: stopping here"; pf_done; }
}
count_status() { q -c "SELECT count(*) FROM payflow.operations WHERE id IN ($IDS) AND status IN ($1)"; }
reached() { [ "$(count_status "$1")" = "$2" ]; }

capture payment-requests 6
start_worker payment payment-requests
stage "payment: 5 paid, the declined card FAILED" pf_wait_for 60 reached "'PAYMENT_COMPLETED'" 5
stage "payment: the declined one FAILED" pf_wait_for 30 reached "'FAILED'" 1
capture payment-completed 5
start_worker postprocess payment-completed
stage "postprocess: 5 invoice inputs made" pf_wait_for 60 reached "'INVOICE_PENDING'" 5
capture invoice-requests 5
start_worker invoice invoice-requests
stage "invoice: 5 COMPLETED" pf_wait_for 60 reached "'COMPLETED'" 5
capture operation-events 6
PAYFLOW_WEBHOOK_ALLOW_HTTP=true PAYFLOW_WEBHOOK_MAX_ATTEMPTS=3 PAYFLOW_WEBHOOK_BACKOFF_BASE_SECONDS=1 \
	start_worker webhook operation-events
# the tenant's four operations: three completed, one failed
delivered() { [ "$(curl -fsS "$RECV/_deliveries?path=/leak" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>
	console.log(JSON.parse(s).uniqueEventIds))')" = 4 ]; }
stage "webhook: the tenant's 4 terminal events delivered, signatures verified with the secret" pf_wait_for 60 delivered
pf_eq "webhook: no signature failure" 0 "$(curl -fsS "$RECV/_deliveries" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>
	console.log(JSON.parse(s).signatureFailures))')"
events_consumed() {
	local total
	total=$(node test/emulator/sqs-count.mjs "$(queue_url operation-events)" |
		sed -n 's/.*"visible":\([0-9]*\),"notVisible":\([0-9]*\).*/\1+\2/p' | bc)
	[ "${total:-1}" = 0 ]
}
pf_ok "webhook: operation-events consumed" pf_wait_for 30 events_consumed

# ---- collect everything else that was written or sent ----
curl -fsS "$RECV/_deliveries" >"$CAP/webhook-receiver-deliveries.json"
curl -fsS "http://127.0.0.1:$INV_PORT/_invoices" >"$CAP/invoice-api-invoices.json"
for name in relay payment postprocess invoice webhook api; do
	[ -f "$DIR/$name.log" ] && cp "$DIR/$name.log" "$CAP/process-$name.log"
done
cp "$DIR/invoice-api/server.log" "$CAP/process-invoice-api.log" 2>/dev/null || true
cp "$DIR/receiver/server.log" "$CAP/process-webhook-receiver.log" 2>/dev/null || true
cp "/tmp/psqlodbc_payflow-worker_$(id -un)$PID_payment.log" "$CAP/process-payment-odbc-commlog.log" 2>/dev/null || true
sleep 0.5	# the processes' last spans: they export every 200 ms
cp "$DIR/spans.jsonl" "$CAP/otlp-spans.jsonl" 2>/dev/null || : >"$CAP/otlp-spans.jsonl"
# a line the server must log (an error and its statement), to prove the excerpt is the right one
# the bucket: every key, and each object's metadata (HeadObject)
node --input-type=module -e '
	import { clientCredentials, clientRegion, requireFromCache } from "./test/emulator/emulator-config.mjs";
	const { S3Client, ListObjectsV2Command, HeadObjectCommand } = requireFromCache("@aws-sdk/client-s3");
	const s3 = new S3Client({ endpoint: process.env.AWS_ENDPOINT_URL, region: clientRegion(),
							  credentials: clientCredentials(), forcePathStyle: true });
	const Bucket = process.env.PAYFLOW_S3_BUCKET;
	let ContinuationToken;
	do {
		const page = await s3.send(new ListObjectsV2Command({ Bucket, ContinuationToken }));
		for (const o of page.Contents ?? []) {
			const head = await s3.send(new HeadObjectCommand({ Bucket, Key: o.Key }));
			console.log(JSON.stringify({ key: o.Key, metadata: head.Metadata ?? {} }));
		}
		ContinuationToken = page.NextContinuationToken;
	} while (ContinuationToken);
' >"$CAP/s3-objects.jsonl"
q -c "SELECT 1 / 0 AS leakcheck_marker_$RUN" >/dev/null 2>&1 || true
marker_logged() { tail -c +"$PG_LOG_START" "$PG_LOG" | grep -qs "leakcheck_marker_$RUN"; }
pf_wait_for 10 marker_logged || true
tail -c +"$PG_LOG_START" "$PG_LOG" >"$CAP/postgresql-server.log"
# every payflow table and view as text (the views show what is rendered,
# as the history of the common path and payflow.steps), but payloads (the
# request lives there) and the two secret columns, which only the
# functions read: the rows of this run (they name one of its operations,
# or its tenant)
RUN_ROWS="~ '($RUN|$(IFS='|'; echo "${OPS[*]}"))'"
# (a partitioned table whole, as its parent: 'p'; its partitions not again)
for t in $(q -c "SELECT relname FROM pg_class WHERE relnamespace = 'payflow'::regnamespace AND relkind IN ('r', 'p', 'v')
				 AND NOT relispartition AND relname NOT IN ('payloads', 'api_keys', 'webhooks') ORDER BY 1"); do
	q -c "COPY (SELECT * FROM payflow.$t t WHERE t::text $RUN_ROWS) TO STDOUT" >"$CAP/table-$t.txt"
done
q -c "COPY (SELECT id, tenant, name FROM payflow.api_keys t WHERE t::text $RUN_ROWS) TO STDOUT" >"$CAP/table-api_keys.txt"
# the webhooks whole: the secret is sealed there (0.5.0), so its row may
# be searched like any other: the sealed bytes as hex, and as text (escape:
# printable bytes as they are, where a secret kept in clear would show)
q -c "COPY (SELECT * FROM payflow.webhooks t WHERE t::text $RUN_ROWS) TO STDOUT" >"$CAP/table-webhooks.txt"
q -c "SELECT encode(t.secret_sealed, 'escape') FROM payflow.webhooks t WHERE t::text $RUN_ROWS" \
	>"$CAP/table-webhooks-sealed-bytes.txt"
pf_ok "control: this run's webhook row, its sealed secret included, is among what is searched" \
	test -s "$CAP/table-webhooks-sealed-bytes.txt"
# (each table that must hold rows of this run holds some, and every
# operation of the run is among the operations captured: a total over the
# tables hid a table never captured)
pf_eq "control: the table rows of this run were found (operations, history, steps, outbox log, dead letters)" \
	"operations ${#OPS[@]} operation_history yes steps yes outbox_events yes dead_letters yes" \
	"$(printf 'operations %s' "$(for op in "${OPS[@]}"; do grep -F "$op" "$CAP/table-operations.txt" | head -1; done | grep -c .)"
	for f in operation_history steps outbox_events dead_letters; do
		printf ' %s %s' "$f" "$([ "$(grep -c . "$CAP/table-$f.txt" 2>/dev/null)" -gt 0 ] && echo yes || echo no)"
	done)"
say "searched: $(ls "$CAP" | wc -l) files, $(cat "$CAP"/* | wc -c) bytes"

# ---- the search ----
# found VALUE FILE...: the files that contain VALUE (as is, or JSON-escaped)
found() {
	local value=$1
	shift
	grep -lF -e "$value" -e "$(printf '%s' "$value" | sed 's/"/\\"/g')" "$@" 2>/dev/null | xargs -r -n1 basename | paste -sd' '
}
for pair in "AWS_SECRET_ACCESS_KEY=$AWS_SECRET" "AWS_SESSION_TOKEN=$SESSION_TOKEN" \
	"database password=$DB_PASSWORD" "ODBC password=$ODBC_PASSWORD" "API key=$API_KEY" "collector token=$OTLP_TOKEN" \
	"wrong API key=$WRONG_KEY" "webhook secret=$WEBHOOK_SECRET" "card number=$CARD" \
	'the cardNumber field="cardNumber"' 'the cvv field="cvv"' 'the card holder=LEAK TESTER'; do
	what=${pair%%=*}
	value=${pair#*=}
	pf_eq "no $what in any log, message, request sent, table or server log line" "" "$(found "$value" "$CAP"/*)"
done

# the unkeyed hashes of each request: its details' SHA-256 (as they were
# stored: in PostgreSQL, or the bytes the API put to S3) and the plain
# hash of payment id and details
for n in 1 2 3; do
	printf '%s' "$(details "$n.50" "$P-t$n")" >"$DIR/details-t$n.json"
done
printf '%s' "$(details 9.99 "$P-declined")" >"$DIR/details-declined.json"
mapfile -t PLAIN_HASHES < <(
	for f in "$DIR"/details-*.json; do
		sha256sum "$f" | cut -d' ' -f1
		id=$(basename "$f" .json)
		id=$P-${id#details-}
		{ printf '%s\0' "$id"; cat "$f"; } | sha256sum | cut -d' ' -f1
	done
	q -c "SELECT encode(sha256(p.content), 'hex'), encode(sha256(convert_to(o.payment_id, 'UTF8') || '\x00'::bytea || p.content), 'hex')
			FROM payflow.operations o JOIN payflow.payloads p ON p.key = payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size) ->> 'key' WHERE o.id IN ($IDS)" | tr '|' '\n')
pf_eq "control: the plain hashes of all 6 requests are known (2 each)" 12 "${#PLAIN_HASHES[@]}"
leaked=""
for h in "${PLAIN_HASHES[@]}"; do
	leaked="$leaked$(found "$h" "$CAP"/* || true)"
done
pf_eq "no plain SHA-256 of a request (or of its payment id and details) in any log, message, S3 key or metadata, table or server log line" \
	"" "$leaked"
if [ $HAVE_API = 1 ]; then
	in_s3=0
	for f in "$DIR"/details-t1.json "$DIR"/details-t2.json "$DIR"/details-t3.json "$DIR"/details-declined.json; do
		grep -qF "\"key\":\"$(pf_request_key "$f")\"" "$CAP/s3-objects.jsonl" && in_s3=$((in_s3 + 1))
	done
	pf_eq "control: the tenant's 4 requests are in S3, named by their keyed checksums" 4 "$in_s3"
fi
# (every request of the run: the tenant's in S3, the two submitted in SQL as pg payloads)
want_sums=$(q -c "SELECT payflow._request_ref(id, request_ref, request_mac, request_size) ->> 'checksum' FROM payflow.operations WHERE id IN ($IDS) ORDER BY 1")
found_sums=0
for sum in $want_sums; do
	grep -qF "$sum" "$CAP/queue-payment-requests.jsonl" && found_sums=$((found_sums + 1))
done
pf_eq "control: the messages carry the keyed checksums of the requests" "${#OPS[@]}" "$found_sums"
if [ "$found_sums" != "${#OPS[@]}" ]; then
	say "wanted: $want_sums"
	say "in the messages: $(grep -oE '"(hmac-)?sha256:[0-9a-f]{64}' "$CAP/queue-payment-requests.jsonl" | sort -u | tr '\n' ' ')"
fi

# ---- positive controls ----
q -c "COPY (SELECT convert_from(content, 'UTF8') FROM payflow.payloads
			WHERE key IN (SELECT payflow._request_ref(id, request_ref, request_mac, request_size)->>'key' FROM payflow.operations WHERE id IN ($IDS))) TO STDOUT" \
	>"$DIR/control-payloads.txt"
pf_eq "control: the same search finds the card number in payflow.payloads, where the requests live" \
	control-payloads.txt "$(found "$CARD" "$DIR/control-payloads.txt")"
pf_eq "control: and its fields" control-payloads.txt "$(found '"cvv"' "$DIR/control-payloads.txt")"
pf_ok "control: the relay ran with the AWS secret and the session token in its environment" \
	bash -c "tr '\0' '\n' </proc/$PID_relay/environ | grep -qxF 'AWS_SECRET_ACCESS_KEY=$AWS_SECRET' &&
			 tr '\0' '\n' </proc/$PID_relay/environ | grep -qxF 'AWS_SESSION_TOKEN=$SESSION_TOKEN'"
pf_eq "control: the PostgreSQL log excerpt searched is this run's (it holds the marker error logged on purpose)" \
	postgresql-server.log "$(found "leakcheck_marker_$RUN" "$CAP/postgresql-server.log")"
pf_ok "control: the spans searched are this run's: its operations' attempts, decoded by the receiver" \
	grep -qF '"name":"PROCESS_PAYMENT attempt"' "$CAP/otlp-spans.jsonl"
pf_ok "control: every process is still running" kill -0 "$PID_relay" "$PID_payment" "$PID_postprocess" "$PID_invoice" "$PID_webhook"
pf_done
