#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# payflow-worker --role payment against the legacy DBMS fixture (psqlODBC),
# fed by payflow-relay through the local SQS emulator, one worker with
# visibility 4 s (heartbeat every 1.3 s, lease 6 s).  All cases run at once:
#
#   happy path      PENDING -> PAYMENT_PROCESSING -> PAYMENT_COMPLETED, result
#                   stored through the claim check, one charge each
#   long call       12 s = three visibility timeouts: never redelivered
#                   (receive count 1, one legacy call, attempt 1)
#   transient       two failures (40001), retried by the database with
#                   back-off until the charge goes through, once
#   permanent       P0001 "card declined": FAILED, a dead letter, no retry
#   lost connection the session dies right after the charge (08S01): the
#                   call runs once more on a new connection, same key, and
#                   gets the same charge back
#   timed out, yet charged
#                   the charge commits, then the call outlives
#                   PAYFLOW_LEGACY_TIMEOUT (57014): the look-up, run at once,
#                   finds the charge (in the same attempt, so even a last
#                   attempt cannot end FAILED after charging), no second call
#   bad payload     a request whose stored bytes no longer match their
#                   checksum: PF005, FAILED, no legacy call
#   poison          garbage and an unknown eventVersion: logged, left to the
#                   redrive policy, in the DLQ after 3 receives, garbage also
#                   in payflow.dead_letters; the worker serves on
#
# and workers/tests/test_worker_odbc.c against the fixture.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-payment 4671 4672 3
wk_start_relay
wk_start_worker w1 PAYFLOW_CONCURRENCY=8 PAYFLOW_LEGACY_TIMEOUT=14

p=wp-$WK_RUN
legacy -c "SELECT set_fault('slow', payment_id => '$p-long', seconds => 12)" \
	-c "SELECT set_fault('transient', payment_id => '$p-transient', count => 2)" \
	-c "SELECT set_fault('permanent', payment_id => '$p-declined')" \
	-c "SELECT set_fault('disconnect', payment_id => '$p-disconnect', fn => 'charge', after_charge => true)" \
	-c "SELECT set_fault('slow', payment_id => '$p-timeout', seconds => 30, fn => 'charge', after_charge => true)" \
	>/dev/null

# the bad payload: corrupted after submit, before any worker can read it
# (the relay only sends after the commit, so lock the row while corrupting)
bad=$(q -c "BEGIN" -c "SELECT payflow.submit('$p-corrupt', '{\"amount\": 3, \"currency\": \"EUR\"}')" \
	-c "UPDATE payflow.payloads SET content = convert_to('{\"amount\": 3000, \"currency\": \"EUR\"}', 'UTF8')
		WHERE key = (SELECT payflow._request_ref(id, request_ref, request_mac, request_size)->>'key' FROM payflow.operations WHERE payment_id = '$p-corrupt')" \
	-c "COMMIT" | grep '^pay_')

happy=()
for i in 1 2 3 4 5; do
	happy+=("$(wk_submit "$p-ok-$i" "{\"amount\": $i.50, \"currency\": \"EUR\", \"customer\": \"C-$i\"}")")
done
long=$(wk_submit "$p-long")
transient=$(wk_submit "$p-transient")
declined=$(wk_submit "$p-declined")
disconnect=$(wk_submit "$p-disconnect")
timeout=$(wk_submit "$p-timeout")

send_raw() {
	node --input-type=module -e '
		import { clientCredentials, clientRegion, requireFromCache } from "./test/emulator/emulator-config.mjs";
		const { SQSClient, SendMessageCommand } = requireFromCache("@aws-sdk/client-sqs");
		const [url, body] = process.argv.slice(1);
		const sqs = new SQSClient({ endpoint: new URL(url).origin, region: clientRegion(), credentials: clientCredentials() });
		await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: body }));
	' "$PAYFLOW_QUEUE_URL" "$1"
}
send_raw "this is not JSON {"
send_raw "{\"eventType\":\"PaymentRequested\",\"eventVersion\":99,\"eventId\":\"0b5c1d6e-8f4a-4c2b-9d3e-1a2b3c4d5e6f\",\"operationId\":\"${happy[0]}\"}"

for op in "${happy[@]}"; do
	wk_wait_status "$op" PAYMENT_COMPLETED 20 || true
done
completed=0
histories=0
stored=0
charged=0
for i in 1 2 3 4 5; do
	op=${happy[$((i - 1))]}
	[ "$(wk_status "$op")" = PAYMENT_COMPLETED ] && completed=$((completed + 1))
	[ "$(q -c "SELECT string_agg(coalesce(from_status, '-') || '>' || to_status, ' ' ORDER BY at) FROM payflow.history('$op')")" = \
		"->PENDING PENDING>PAYMENT_PROCESSING PAYMENT_PROCESSING>PAYMENT_COMPLETED" ] && histories=$((histories + 1))
	# the result went through the extension's claim-check store, checksum and all
	[ "$(q -c "SELECT convert_from(payflow.payload_get(result_ref), 'UTF8')::jsonb->>'amount'
			   FROM payflow.steps WHERE operation_id = '$op' AND step_name = 'PROCESS_PAYMENT'")" = "$i.50" ] &&
		stored=$((stored + 1))
	[ "$(legacy -c "SELECT charge_count('$p-ok-$i')")" = 1 ] && charged=$((charged + 1))
done
pf_eq "happy path: 5 operations PAYMENT_COMPLETED" 5 "$completed"
pf_eq "happy path: history PENDING -> PAYMENT_PROCESSING -> PAYMENT_COMPLETED" 5 "$histories"
pf_eq "happy path: result stored, amount as submitted (12.50 stays 12.50)" 5 "$stored"
pf_eq "happy path: one charge each" 5 "$charged"
pf_ok "happy path: correlation id and charge id in the worker's log" \
	grep -q "\"correlationId\":\"corr-$p-ok-1\".*\"charge_id\":\"ch_" "$WK_DIR/w1.log"

pf_ok "permanent failure: operation FAILED" wk_wait_status "$declined" FAILED 15
pf_eq "permanent failure: one attempt, no retry" 1 "$(wk_attempts "$declined")"
pf_eq "permanent failure: the legacy call was made once" 1 "$(legacy -c "SELECT call_count('charge', '$p-declined')")"
pf_eq "permanent failure: a dead letter with the SQLSTATE" "step|P0001|card declined" \
	"$(q -c "SELECT source, error->>'code', error->>'message' FROM payflow.dead_letters WHERE operation_id = '$declined'")"
pf_eq "permanent failure: nothing charged" 0 "$(legacy -c "SELECT charge_count('$p-declined')")"

pf_ok "transient failures: retried until PAYMENT_COMPLETED" wk_wait_status "$transient" PAYMENT_COMPLETED 30
pf_eq "transient failures: three attempts (two 40001, then success)" 3 "$(wk_attempts "$transient")"
pf_ok "transient failures: each retry was scheduled by the database" \
	test "$(grep -F "\"operationId\":\"$transient\"" "$WK_DIR/w1.log" | grep -c '"action":"retry"')" = 2
pf_eq "transient failures: charged once" 1 "$(legacy -c "SELECT charge_count('$p-transient')")"

pf_ok "bad payload: FAILED" wk_wait_status "$bad" FAILED 15
pf_eq "bad payload: failed with PF005, no retry" "PF005|1" \
	"$(q -c "SELECT last_error->>'code', attempt FROM payflow.steps WHERE operation_id = '$bad' AND step_name = 'PROCESS_PAYMENT'")"
pf_eq "bad payload: the legacy DBMS never called" 0 "$(legacy -c "SELECT call_count(NULL, '$p-corrupt')")"

pf_ok "long call: PAYMENT_COMPLETED" wk_wait_status "$long" PAYMENT_COMPLETED 25
pf_eq "long call: one attempt" 1 "$(wk_attempts "$long")"
pf_eq "long call: one legacy call" 1 "$(legacy -c "SELECT call_count('charge', '$p-long')")"
pf_ok "long call: never redelivered (every line about it has receiveCount 1)" \
	bash -c "! grep -F '\"operationId\":\"$long\"' '$WK_DIR/w1.log' | grep -q '\"receiveCount\":[02-9]'"
pf_ok "long call: took longer than three visibility timeouts" \
	test "$(legacy -c "SELECT extract(epoch FROM ended_at - started_at) >= 12 FROM call_log WHERE payment_id = '$p-long'")" = t

pf_ok "lost connection: PAYMENT_COMPLETED" wk_wait_status "$disconnect" PAYMENT_COMPLETED 15
pf_eq "lost connection: in the first attempt" 1 "$(wk_attempts "$disconnect")"
pf_eq "lost connection: the call ran twice (session ended, then on a new connection)" "disconnected,ok" \
	"$(legacy -c "SELECT string_agg(outcome, ',' ORDER BY call_id) FROM call_log
				  WHERE payment_id = '$p-disconnect'")"
# on a connection the thread had used before, the call is made once more
# at once; on a fresh one the look-up finds the charge (role_payment.c)
lost_logged() {
	wk_log_has w1 "$disconnect" "legacy connection lost (08S01" ||
		wk_log_has w1 "$disconnect" "look-up found the charge of the call that was cut off"
}
pf_ok "lost connection: logged" lost_logged
pf_eq "lost connection: one charge" 1 "$(legacy -c "SELECT charge_count('$p-disconnect')")"

pf_ok "timed out, yet charged: PAYMENT_COMPLETED" wk_wait_status "$timeout" PAYMENT_COMPLETED 30
pf_eq "timed out, yet charged: the call timed out (57014), then the look-up" "charge 57014,lookup_charge" \
	"$(legacy -c "SELECT string_agg(fn || coalesce(' ' || sqlstate, ''), ',' ORDER BY call_id) FROM call_log
				  WHERE payment_id = '$p-timeout'")"
pf_ok "timed out, yet charged: the look-up found the charge" \
	wk_log_has w1 "$timeout" '"look-up found the charge of the call that was cut off"'
pf_eq "timed out, yet charged: attempt 1 completed with that charge" \
	"1|$(legacy -c "SELECT charge_id FROM charges WHERE payment_id = '$p-timeout'")" \
	"$(q -c "SELECT attempt, result->>'charge_id' FROM payflow.steps WHERE operation_id = '$timeout' AND step_name = 'PROCESS_PAYMENT'")"

dlq_count() {
	node test/emulator/sqs-count.mjs "$WK_DLQ_URL" | sed -n 's/.*"visible":\([0-9]*\).*/\1/p'
}
dlq_has_two() { [ "$(dlq_count)" = 2 ]; }
pf_ok "poison: both messages in the DLQ after 3 receives" pf_wait_for 30 dlq_has_two
pf_ok "poison: logged with its receive count, left to the redrive policy" \
	grep -q '"msg":"message left to the queue.s redrive policy.*"code":"bad_json".*"receiveCount":3' "$WK_DIR/w1.log"
pf_ok "poison: unknown eventVersion logged as such" grep -q '"code":"unknown_version"' "$WK_DIR/w1.log"
pf_eq "poison: recorded with record_dead_letter on its last receive" "message|bad_json|this is not JSON {" \
	"$(q -c "SELECT source, error->>'code', message_body FROM payflow.dead_letters
			 WHERE source = 'message' AND message_body = 'this is not JSON {' ORDER BY id DESC LIMIT 1")"

after=$(wk_submit "$p-after")
pf_ok "the worker serves on after the poison" wk_wait_status "$after" PAYMENT_COMPLETED 15
pf_ok "the worker is still running" kill -0 "$WK_PID_w1"

# the ODBC layer itself against psqlODBC: types, SQLSTATEs, time-out, cancel, reconnect
make -s -C workers build/tests/test_worker_odbc >/dev/null
workers/build/tests/test_worker_odbc >"$WK_DIR/test_worker_odbc.log" 2>&1 &
odbc_test=$!
odbc_rc=0
wait "$odbc_test" || odbc_rc=$?
rm -f "/tmp/psqlodbc_test_worker_odbc_$(id -un)$odbc_test.log"
pf_eq "ODBC layer through psqlODBC ($(tail -n 1 "$WK_DIR/test_worker_odbc.log"))" 0 "$odbc_rc"

wk_invariants "${happy[@]}" "$long" "$transient" "$declined" "$bad" "$after" "$disconnect" "$timeout"
pf_done
