#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# Bad messages sent straight to the work queues (payment-requests,
# payment-completed, invoice-requests) while the real relay and the payment,
# postprocess and invoice workers run and real operations flow through:
#
#   garbage, truncated JSON, a JSON array, duplicate keys, no or unknown or
#   non-string eventType, unknown or non-integer eventVersion, wrong field
#   types (eventId, operationId, attempt, createdAt, the reference), a
#   missing reference, a malformed checksum, another queue's event type, a
#   well-formed operation id nobody issued
#
# Each is logged as a JSON line naming its problem (code) with its message
# id and receive count, left to the queue's redrive policy (never deleted,
# never retried forever): on its last receive (3) it is recorded in
# payflow.dead_letters (source message, the queue, the code, the body as
# sent) and the queue then moves it to its DLQ.  Beside them, through the
# relay:
#
#   checksum mismatch   an operation whose stored request was altered: the
#                       payment worker refuses it (PF005), the operation
#                       FAILED with a step dead letter, no charge
#   purged payload      a live operation whose request payload vanished:
#                       payload_missing, FAILED, no charge
#   purged, terminal    copies of the events of a COMPLETED operation whose
#                       payloads were purged: skipped and deleted, no dead
#                       letter
#
# and at the end: every real operation COMPLETED (charged once, invoiced
# once), the workers and relay never restarted (same pids, one start line
# each), every bad message accounted for (in its DLQ and in dead_letters,
# nothing left in the work queues).
#
# Ports: emulator 4960/4961, invoice stand-in 4962 (PAYFLOW_TEST_* to move).
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init bad-messages "${PAYFLOW_TEST_EMULATOR_PORT:-4960}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4961}" 3
INV_PORT=${PAYFLOW_TEST_INVOICE_API_PORT:-4962}
export PAYFLOW_INVOICE_API_PORT=$INV_PORT PAYFLOW_INVOICE_API_RUN_DIR=$WK_DIR/invoice-api
P=bm-$WK_RUN

bm_cleanup() {
	if [ "$PF_FAILURES" -ne 0 ]; then
		cp "$PAYFLOW_INVOICE_API_RUN_DIR/server.log" "$WK_DIR/invoice-api.log" 2>/dev/null || true
	fi
	test/fixtures/invoice-api/stop.sh >/dev/null 2>&1 || true
	wk_cleanup
}
trap bm_cleanup EXIT

eval "$(test/fixtures/invoice-api/start.sh 2>"$WK_DIR/invoice-api-start.log")"
export PAYFLOW_INVOICE_URL
curl -fsS -X POST "http://127.0.0.1:$INV_PORT/_reset" >/dev/null
export PAYFLOW_POSTPROCESS_FUNCTION='payflow.default_postprocess(text,jsonb)'
q -c "UPDATE payflow.step_definitions SET retry_base_delay = '1 second', retry_max_delay = '2 seconds'" >/dev/null
dlq_url() { echo "$PAYFLOW_DLQ_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }

# ---- the real stack ----
wk_start_relay
# bm_start ROLE QUEUE: a worker of ROLE on QUEUE, log in $WK_DIR/ROLE.log
bm_start() {
	env PAYFLOW_WORKER_ID="bm-$1-$WK_RUN" PAYFLOW_QUEUE_URL="$(wk_queue_url "$2")" \
		workers/bin/payflow-worker --role "$1" >"$WK_DIR/$1.log" 2>&1 &
	WK_PIDS+=($!)
	printf -v "PID_$1" '%s' "$!"
	pf_wait_for 15 grep -qs '"payflow-worker started"' "$WK_DIR/$1.log" || wk_log "the $1 worker did not say it started"
}
bm_start payment payment-requests
bm_start postprocess payment-completed
bm_start invoice invoice-requests
PIDS_AT_START="$WK_PID_RELAY $PID_payment $PID_postprocess $PID_invoice"

# ---- the bad messages, three queues at once ----
QUEUES=(payment-requests payment-completed invoice-requests)
TYPES=(PaymentRequested PaymentCompleted InvoiceRequested)
FIELDS=(payload result invoiceInput)
ZEROS=0000000000000000000000000000000000000000000000000000000000000000
# event ids whose first groups form a Luhn-valid run (17678424-4288-4 ->
# 1767842442884): no card number, so their dead letters keep them as sent
LUHN_IDS=(17678424-4288-4eea-b643-769411a65bd3 93054072-5203-4e79-83fa-968e33398ecb 08824935-2711-4c35-8f68-b8d378077cb5)
CASE_QUEUE=()
CASE_CODE=()
CASE_BODY=()
add() { CASE_QUEUE+=("$1"); CASE_CODE+=("$2"); CASE_BODY+=("$3"); }
for i in 0 1 2; do
	qn=${QUEUES[$i]} t=${TYPES[$i]} f=${FIELDS[$i]} other=${TYPES[$(((i + 1) % 3))]}
	m=$P-$qn
	# well-formed (pay_ + 26 Crockford base32) and never issued
	fake=$(printf 'pay_0ZZZZZZZZZZZZZZZZZZZZZZZ%02d' "$i")
	ref="{\"store\":\"pg\",\"key\":\"payments/$fake/request.json\",\"checksum\":\"sha256:$ZEROS\",\"size\":2}"
	# env TYPE VERSION EVENT_ID OPERATION_ID ATTEMPT CREATED_AT MARKER [extra members]
	env_json() {
		printf '{"eventType":%s,"eventVersion":%s,"eventId":%s,"operationId":%s,"paymentId":"%s","attempt":%s,"correlationId":"%s","createdAt":%s%s}' \
			"$1" "$2" "$3" "$4" "$7" "$5" "$7" "$6" "${8:-}"
	}
	ok_env() { env_json "\"$t\"" 1 "\"$(cat /proc/sys/kernel/random/uuid)\"" "\"$fake\"" 1 '"2026-01-01T00:00:00.000Z"' "$1" "${2:-}"; }
	add "$qn" bad_json "<<$m-garbage: not JSON at all>>"
	add "$qn" bad_json "{\"eventType\":\"$t\",\"eventVersion\":1,\"correlationId\":\"$m-truncated\",\"operationId\":\"pay_01"
	add "$qn" bad_json "[\"$m-array\",{\"eventType\":\"$t\"}]"
	add "$qn" bad_json "{\"eventType\":\"$t\",\"eventType\":\"$other\",\"correlationId\":\"$m-duplicate-keys\"}"
	add "$qn" unknown_type "{\"correlationId\":\"$m-no-type\"}"
	add "$qn" unknown_type "$(env_json '"PaymentRefunded"' 1 '"x"' "\"$fake\"" 1 '"2026-01-01T00:00:00Z"' "$m-unknown-type")"
	add "$qn" unknown_type "$(env_json 7 1 '"x"' "\"$fake\"" 1 '"2026-01-01T00:00:00Z"' "$m-type-number")"
	add "$qn" unknown_version "$(env_json "\"$t\"" 99 '"x"' "\"$fake\"" 1 '"2026-01-01T00:00:00Z"' "$m-version-99" ",\"$f\":$ref")"
	add "$qn" unknown_version "$(env_json "\"$t\"" '"1"' '"x"' "\"$fake\"" 1 '"2026-01-01T00:00:00Z"' "$m-version-string" ",\"$f\":$ref")"
	add "$qn" bad_field "$(env_json "\"$t\"" 1 42 "\"$fake\"" 1 '"2026-01-01T00:00:00Z"' "$m-event-id-number" ",\"$f\":$ref")"
	add "$qn" bad_field "$(env_json "\"$t\"" 1 "\"$(cat /proc/sys/kernel/random/uuid)\"" '"pay_123"' 1 '"2026-01-01T00:00:00Z"' "$m-short-op" ",\"$f\":$ref")"
	add "$qn" bad_field "$(env_json "\"$t\"" 1 "\"$(cat /proc/sys/kernel/random/uuid)\"" "[\"$fake\"]" 1 '"2026-01-01T00:00:00Z"' "$m-op-array" ",\"$f\":$ref")"
	add "$qn" bad_field "$(env_json "\"$t\"" 1 "\"$(cat /proc/sys/kernel/random/uuid)\"" "\"$fake\"" '"x"' '"2026-01-01T00:00:00Z"' "$m-attempt-string" ",\"$f\":$ref")"
	add "$qn" bad_field "$(env_json "\"$t\"" 1 "\"$(cat /proc/sys/kernel/random/uuid)\"" "\"$fake\"" 1 '"yesterday"' "$m-created-at" ",\"$f\":$ref")"
	add "$qn" bad_field "$(ok_env "$m-ref-string" ",\"$f\":\"payments/$fake/request.json\"")"
	add "$qn" bad_field "$(ok_env "$m-bad-checksum" ",\"$f\":{\"store\":\"pg\",\"key\":\"payments/$fake/request.json\",\"checksum\":\"md5:1234\",\"size\":2}")"
	add "$qn" missing_field "$(ok_env "$m-no-ref")"
	add "$qn" unexpected_event_type "$(env_json "\"$other\"" 1 "\"$(cat /proc/sys/kernel/random/uuid)\"" "\"$fake\"" 1 '"2026-01-01T00:00:00Z"' "$m-other-queue" ",\"${FIELDS[$(((i + 1) % 3))]}\":$ref")"
	add "$qn" unknown_operation "$(ok_env "$m-unknown-op" ",\"$f\":$ref")"
	add "$qn" unknown_operation "$(env_json "\"$t\"" 1 "\"${LUHN_IDS[$i]}\"" "\"$fake\"" 1 '"2026-01-01T00:00:00.000Z"' "$m-luhn-event-id" ",\"$f\":$ref")"
done
N_BAD=${#CASE_BODY[@]}

# send LINES: {"destination","body"} lines to the queues, past the relay
send() { node test/soak/sqs-send.mjs >/dev/null; }
# as_lines: "queue<TAB>body" on stdin -> the JSON lines send() reads
as_lines() {
	node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{for(const l of s.split("\n")){
		if(!l)continue;const t=l.indexOf("\t");console.log(JSON.stringify({destination:l.slice(0,t),body:l.slice(t+1)}))}})'
}

# ---- real operations, and the bad messages among them ----
REAL=20
q -c "SELECT count(payflow.submit('$P-ok-' || n, jsonb_build_object('amount', n || '.25', 'currency', 'EUR', 'customer', 'C-' || n),
								   correlation_id => 'corr-$P-ok-' || n)) FROM generate_series(1, $REAL / 2) n" >/dev/null
for ((k = 0; k < N_BAD; k++)); do
	printf '%s\t%s\n' "${CASE_QUEUE[$k]}" "${CASE_BODY[$k]}"
done | as_lines | send
wk_log "$N_BAD bad messages sent to the three work queues"

# checksum mismatch: the stored request altered after submit, in the same transaction
TAMPERED=$(pf_psql -Atq -v p="$P" <<'SQL'
BEGIN;
SELECT payflow.submit(:'p' || '-tampered', '{"amount": "10.00", "currency": "EUR"}') AS op \gset
UPDATE payflow.payloads SET content = convert_to('{"amount": "99999.00", "currency": "EUR"}', 'UTF8')
 WHERE key = 'payments/' || :'op' || '/request.json';
COMMIT;
SELECT :'op';
SQL
)
# purged payload under a live operation
VANISHED=$(pf_psql -Atq -v p="$P" <<'SQL'
BEGIN;
SELECT payflow.submit(:'p' || '-vanished', '{"amount": "11.00", "currency": "EUR"}') AS op \gset
DELETE FROM payflow.payloads WHERE key = 'payments/' || :'op' || '/request.json';
COMMIT;
SELECT :'op';
SQL
)
q -c "SELECT count(payflow.submit('$P-ok-' || n, jsonb_build_object('amount', n || '.25', 'currency', 'EUR', 'customer', 'C-' || n),
								   correlation_id => 'corr-$P-ok-' || n)) FROM generate_series($REAL / 2 + 1, $REAL) n" >/dev/null
mapfile -t REAL_OPS < <(q -c "SELECT id FROM payflow.operations WHERE payment_id LIKE '$P-ok-%' ORDER BY id")

all_real_completed() {
	[ "$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$P-ok-%' AND status = 'COMPLETED'")" = "$REAL" ]
}
pf_ok "all $REAL real operations submitted among the bad messages COMPLETED" pf_wait_for 90 all_real_completed
pf_ok "checksum mismatch: the altered request's operation FAILED" wk_wait_status "$TAMPERED" FAILED 60
pf_eq "checksum mismatch: one step dead letter, PF005, at PROCESS_PAYMENT" "step|PROCESS_PAYMENT|PF005" \
	"$(q -c "SELECT string_agg(source || '|' || step_name || '|' || (error->>'code'), ',') FROM payflow.dead_letters
			 WHERE operation_id = '$TAMPERED'")"
pf_ok "checksum mismatch: logged by the payment worker" \
	wk_log_has payment "$TAMPERED" '"code":"PF005"'
pf_ok "purged payload: the operation FAILED" wk_wait_status "$VANISHED" FAILED 60
pf_eq "purged payload: one step dead letter, payload_missing" "step|PROCESS_PAYMENT|payload_missing" \
	"$(q -c "SELECT string_agg(source || '|' || step_name || '|' || (error->>'code'), ',') FROM payflow.dead_letters
			 WHERE operation_id = '$VANISHED'")"
pf_eq "neither was charged" "0|0" \
	"$(legacy -c "SELECT charge_count('$P-tampered') || '|' || charge_count('$P-vanished')")"

# purged, terminal: copies of a COMPLETED operation's events after its payloads went
DONE_OP=${REAL_OPS[0]}
q -c "UPDATE payflow.operations SET payloads_purged_at = now() WHERE id = '$DONE_OP'" \
	-c "DELETE FROM payflow.payloads WHERE key LIKE 'payments/$DONE_OP/%'" >/dev/null
# (built by the extension's own event builder: well-formed events come from one place)
q -c "SELECT d.destination || chr(9) || payflow._event_body(gen_random_uuid(), o.id, o.payment_id, o.correlation_id,
		d.request_event, 1, jsonb_build_object(d.input_field, s.input_ref))::text
	  FROM payflow.operations o JOIN payflow.steps s ON s.operation_id = o.id
	  JOIN payflow.step_definitions d ON d.step_name = s.step_name
	 WHERE o.id = '$DONE_OP' ORDER BY d.position" | as_lines | send
skipped_everywhere() {
	local role
	for role in payment postprocess invoice; do
		wk_log_has "$role" "$DONE_OP" '"step skipped (terminal), message deleted"' || return 1
	done
}
pf_ok "purged, terminal: each role skipped its copy and deleted it" pf_wait_for 60 skipped_everywhere

# ---- every bad message accounted for ----
bad_recorded() {
	[ "$(q -c "SELECT count(*) FROM payflow.dead_letters WHERE source = 'message' AND message_body LIKE '%$P-%'")" -ge "$N_BAD" ]
}
pf_ok "every bad message reached payflow.dead_letters on its last receive" pf_wait_for 90 bad_recorded
dlq_total() {
	node test/emulator/sqs-count.mjs "$(dlq_url payment-requests)" "$(dlq_url payment-completed)" "$(dlq_url invoice-requests)" |
		sed -n 's/.*"visible":\([0-9]*\),"notVisible":\([0-9]*\).*/\1+\2/p' | paste -sd+ | bc
}
dlq_full() { [ "$(dlq_total)" -ge "$N_BAD" ]; }
pf_ok "every bad message moved to its queue's DLQ after 3 receives" pf_wait_for 90 dlq_full
pf_eq "the DLQs hold exactly the bad messages" "$N_BAD" "$(dlq_total)"

recorded=$(mktemp "$WK_DIR/recorded.XXXXXX")
q -F $'\t' -c "SELECT queue, error->>'code', error->>'receiveCount', error->>'messageId', md5(message_body)
			   FROM payflow.dead_letters WHERE source = 'message' AND message_body LIKE '%$P-%'" >"$recorded"
wrong=0
for ((k = 0; k < N_BAD; k++)); do
	sum=$(printf '%s' "${CASE_BODY[$k]}" | md5sum | cut -d' ' -f1)
	line=$(awk -F'\t' -v s="$sum" '$5 == s' "$recorded")
	got=$(echo "$line" | cut -f1-3)
	expected=$(printf '%s\t%s\t3' "${CASE_QUEUE[$k]}" "${CASE_CODE[$k]}")
	msg_id=$(echo "$line" | cut -f4)
	role=$(case ${CASE_QUEUE[$k]} in payment-requests) echo payment ;; payment-completed) echo postprocess ;; *) echo invoice ;; esac)
	if [ "$(echo "$line" | grep -c .)" != 1 ] || [ "$got" != "$expected" ]; then
		wrong=$((wrong + 1))
		wk_log "dead letter of ${CASE_QUEUE[$k]} ${CASE_BODY[$k]:0:90}: expected '$expected', got '$got'"
	elif [ "$(grep -F "\"messageId\":\"$msg_id\"" "$WK_DIR/$role.log" |
			grep -F '"msg":"message left to the queue' | grep -cF "\"code\":\"${CASE_CODE[$k]}\"")" != 3 ]; then
		wrong=$((wrong + 1))
		wk_log "${CASE_CODE[$k]} on ${CASE_QUEUE[$k]}: not logged once per receive (3) by the $role worker"
	fi
done
pf_eq "each bad message: one dead letter (its queue, its problem, receive 3, its exact body) and three log lines naming the problem" \
	0 "$wrong"
pf_eq "the purged copies left no dead letter" 0 \
	"$(q -c "SELECT count(*) FROM payflow.dead_letters WHERE operation_id = '$DONE_OP' OR message_body LIKE '%$DONE_OP%'")"
DLQ_BODIES=$(for qn in "${QUEUES[@]}"; do
		node test/emulator/sqs-read.mjs "$(dlq_url "$qn")" --max "$(printf '%s\n' "${CASE_QUEUE[@]}" | grep -cx "$qn")" \
			--idle 5 --visibility 30
	done |
	node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const c=require("crypto");
		for(const l of s.split("\n").filter(Boolean))console.log(c.createHash("md5").update(JSON.parse(l).body).digest("hex"))})' | sort)
pf_eq "the DLQ bodies are the bad messages as sent" \
	"$(for ((k = 0; k < N_BAD; k++)); do printf '%s' "${CASE_BODY[$k]}" | md5sum | cut -d' ' -f1; done | sort | md5sum)" \
	"$(echo "$DLQ_BODIES" | md5sum)"
work_queues_empty() {
	local total
	total=$(node test/emulator/sqs-count.mjs "$(wk_queue_url payment-requests)" "$(wk_queue_url payment-completed)" \
		"$(wk_queue_url invoice-requests)" | sed -n 's/.*"visible":\([0-9]*\),"notVisible":\([0-9]*\).*/\1+\2/p' | paste -sd+ | bc)
	[ "${total:-1}" = 0 ]
}
pf_ok "the work queues are empty (nothing retried forever)" pf_wait_for 30 work_queues_empty
work_queues_empty || {
	# what is left, and whose: for the next look
	node test/emulator/sqs-count.mjs "$(wk_queue_url payment-requests)" "$(wk_queue_url payment-completed)" \
		"$(wk_queue_url invoice-requests)" | sed 's/^/# left: /' || true
	q -c "SELECT 'in flight: ' || count(*) || ' operations not ended, ' || (SELECT count(*) FROM payflow.outbox) || ' outbox rows'
			FROM payflow.operations WHERE terminal_at IS NULL" | sed 's/^/# /' || true
}

# ---- the real work, untouched ----
charged_once=0
for op in "${REAL_OPS[@]}"; do
	[ "$(legacy -c "SELECT charge_count('$(wk_payment_of "$op")')")" = 1 ] && charged_once=$((charged_once + 1))
done
pf_eq "every real operation charged exactly once" "$REAL" "$charged_once"
pf_eq "duplicate_charges() is empty" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "one invoice per real operation" "$REAL|$REAL" \
	"$(curl -fsS "http://127.0.0.1:$INV_PORT/_invoices" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{
		const inv=JSON.parse(s).invoices.filter(i=>String(i.input.paymentId).startsWith(process.argv[1]));
		console.log(`${inv.length}|${new Set(inv.map(i=>i.idempotencyKey)).size}`)})' "$P-ok-")"
pf_ok "the relay and the three workers still run with the pids they started with" kill -0 $PIDS_AT_START
for role in payment postprocess invoice; do
	pf_eq "the $role worker started once (never restarted) and logged no crash" "1|0" \
		"$(grep -c '"payflow-worker started"' "$WK_DIR/$role.log")|$(grep -ciE 'segmentation|abort|core dumped|double free' "$WK_DIR/$role.log" || true)"
done
wk_log "bad messages: $N_BAD, dead letters of theirs: $(grep -c . "$recorded"), real operations: $REAL completed"
pf_done
