#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# Full SQS batches (issue 13) against the emulator, with what held before
# batching still holding:
#
#   poison      a received batch of ten holding one unparseable message: the
#               other nine complete and are deleted (nine delete entries, the
#               poison never deleted), the poison is dead-lettered alone
#               (recorded once, moved to the DLQ by the redrive policy)
#   kill -9     a worker killed while a batch of ten runs (slow legacy calls)
#               and another killed with its deletes still waiting for their
#               batch: every payment completes, charged once; the messages
#               that come back are skipped
#   FIFO        the relay fills SendMessageBatch from many message groups;
#               within a group (several operations of one payment id) the
#               events arrive in the order they were submitted
#
# Batch sizes depend on timing: they are printed, not asserted (the unit
# test test_sqs_batches counts calls of a fake SQS exactly). Uses the
# running cluster (make check's).
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init sqs-batches 4797 4798 3
P=batches-$WK_RUN
T0=$(q -c "SELECT now()")

# the worker's own count of its SQS calls, from its exit line: "<calls> <entries>"
sqs_count() {
	grep '"msg":"SQS calls"' "$WK_DIR/$1.log" | tail -n 1 |
		node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const j=s?JSON.parse(s).sqs:{};
			const c=j[process.argv[1]]||{calls:0,entries:0};console.log(c.calls+" "+c.entries)})' "$2"
}
visible() { node test/emulator/sqs-count.mjs "$1" | sed -n 's/.*"visible":\([0-9]*\).*/\1/p'; }
stop_worker() {
	kill -TERM "$1"
	wait "$1" 2>/dev/null || true
}
# is_count N QUERY: the query answers N (pf_wait_for runs it again each time)
is_count() { [ "$(q -c "$2")" = "$1" ]; }
is_visible() { [ "$(visible "$2")" = "$1" ]; }
queue_idle() {
	[ "$(node test/emulator/sqs-count.mjs "$1" | sed -n 's/.*"visible":\([0-9]*\),"notVisible":\([0-9]*\).*/\1 \2/p')" = "0 0" ]
}
statuses_are() {
	local status=$1 op
	shift
	for op in "$@"; do wk_has_status "$op" "$status" || return 1; done
}

# ---- a poison message in a batch of ten ----
ops=()
for i in $(seq 1 9); do ops+=("$(wk_submit "$P-p$i")"); done
wk_start_relay
pf_ok "the relay sends the nine payment requests" pf_wait_for 30 is_visible 9 "$PAYFLOW_QUEUE_URL"
kill -TERM "$WK_PID_RELAY"
wait "$WK_PID_RELAY" 2>/dev/null || true
poison="not json: $P-poison"
printf '%s\n' "{\"destination\":\"payment-requests\",\"body\":\"$poison\"}" | node test/soak/sqs-send.mjs >/dev/null
# ten slots, and all ten waiting: the first receive asks for (and gets) ten
wk_start_worker poison PAYFLOW_CONCURRENCY=10 PAYFLOW_SQS_BATCH_WAIT_MS=200
pf_ok "the nine beside the poison complete" pf_wait_for 30 statuses_are PAYMENT_COMPLETED "${ops[@]}"
pf_ok "the poison is recorded as a dead letter on its last receive" pf_wait_for 40 is_count 1 \
	"SELECT count(*) FROM payflow.dead_letters WHERE message_body = '$poison'"
pf_ok "the redrive policy moves it to the DLQ" pf_wait_for 30 is_visible 1 "$WK_DLQ_URL"
stop_worker "$WK_PID_poison"
read -r calls entries <<<"$(sqs_count poison DeleteMessageBatch)"
pf_eq "nine delete entries: the nine, never the poison" 9 "$entries"
read -r rcalls rentries <<<"$(sqs_count poison ReceiveMessage)"
wk_log "deletes: $entries in $calls call(s); receives: $rentries message(s) in $rcalls call(s)"
pf_eq "the poison was dead-lettered alone" 1 "$(q -c "SELECT count(*) FROM payflow.dead_letters WHERE queue = 'payment-requests' AND created_at >= '$T0'")"
pf_eq "nothing left in the queue" 0 "$(visible "$PAYFLOW_QUEUE_URL")"
node test/emulator/sqs-read.mjs "$WK_DLQ_URL" --delete --idle 1 >/dev/null

# ---- kill -9 while a batch of ten runs ----
ops2=()
for i in $(seq 1 10); do
	ops2+=("$(wk_submit "$P-k$i")")
	legacy -c "SELECT set_fault('slow', payment_id => '$P-k$i', seconds => 3)" >/dev/null
done
wk_start_relay
wk_start_worker first PAYFLOW_CONCURRENCY=10
pf_ok "the ten are claimed" pf_wait_for 20 is_count 10 \
	"SELECT count(*) FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id
	  WHERE o.payment_id LIKE '$P-k%' AND s.lease_owner IS NOT NULL"
sleep 1
wk_kill9 "$WK_PID_first"
wk_start_worker second PAYFLOW_CONCURRENCY=10
pf_ok "every payment of the killed batch completes" pf_wait_for 60 statuses_are PAYMENT_COMPLETED "${ops2[@]}"
wk_invariants "${ops2[@]}"

# ---- kill -9 with deletes waiting for their batch ----
legacy -c "SELECT clear_faults()" >/dev/null
stop_worker "$WK_PID_second"
ops3=()
for i in $(seq 1 6); do ops3+=("$(wk_submit "$P-d$i")"); done
wk_start_worker lazy PAYFLOW_CONCURRENCY=10 PAYFLOW_SQS_DELETE_WAIT_MS=1000
pf_ok "six payments complete" pf_wait_for 30 statuses_are PAYMENT_COMPLETED "${ops3[@]}"
wk_kill9 "$WK_PID_lazy"
wk_start_worker after PAYFLOW_CONCURRENCY=10
pf_ok "the queue drains (deletes lost with the process come back and are skipped)" \
	pf_wait_for 30 queue_idle "$PAYFLOW_QUEUE_URL"
wk_log "messages redelivered after the kill and skipped: $(grep -c 'step skipped' "$WK_DIR/after.log" || true)"
wk_invariants "${ops3[@]}"
stop_worker "$WK_PID_after"

# ---- deletes wait for their batch longer than the rest ----
# PAYFLOW_SQS_BATCH_WAIT_MS=0 sends every other partial batch at once;
# deletes still wait PAYFLOW_SQS_DELETE_WAIT_MS for company (a step's
# outcome is committed before its delete is queued: waiting costs nothing)
ops4=()
for i in $(seq 1 6); do ops4+=("$(wk_submit "$P-c$i")"); done
wk_start_worker coalesce PAYFLOW_CONCURRENCY=10 PAYFLOW_SQS_BATCH_WAIT_MS=0 PAYFLOW_SQS_DELETE_WAIT_MS=1000
pf_ok "six more payments complete" pf_wait_for 30 statuses_are PAYMENT_COMPLETED "${ops4[@]}"
pf_ok "... and their messages are deleted" pf_wait_for 30 queue_idle "$PAYFLOW_QUEUE_URL"
stop_worker "$WK_PID_coalesce"
read -r dcalls dentries <<<"$(sqs_count coalesce DeleteMessageBatch)"
wk_log "deletes with a 1 s window: $dentries in $dcalls call(s)"
pf_eq "six delete entries" 6 "$dentries"
pf_ok "... in at most two calls, though every other batch left at once" test "$dcalls" -le 2
kill -TERM "$WK_PID_RELAY"
wait "$WK_PID_RELAY" 2>/dev/null || true

# ---- FIFO: batches filled from many groups, order kept within each ----
fifo=$(echo "$PAYFLOW_QUEUE_URLS_FIFO" | tr ',' '\n' | sed -n 's/^payment-requests=//p')
for round in 1 2 3; do
	for g in 1 2 3 4; do
		q -c "SELECT payflow.submit('$P-g$g', '{\"amount\": $round, \"currency\": \"EUR\"}', idempotency_key => '$P-g$g-$round')" >/dev/null
	done
	q -c "SELECT count(payflow.submit('$P-s$round-' || n, '{\"amount\": 1, \"currency\": \"EUR\"}')) FROM generate_series(1, 12) n" >/dev/null
done
expected=$(q -c "SELECT string_agg(payment_id || ' ' || id, E'\n' ORDER BY payment_id, created_at, id)
				 FROM payflow.operations WHERE payment_id LIKE '$P-g%'")
PAYFLOW_QUEUE_URLS=$PAYFLOW_QUEUE_URLS_FIFO wk_start_relay
pf_ok "the relay sends the 48 events to the FIFO queue" pf_wait_for 30 is_count 0 \
	"SELECT count(*) FROM payflow.outbox o JOIN payflow.operations p ON p.id = o.operation_id WHERE p.payment_id LIKE '$P-%'"
kill -TERM "$WK_PID_RELAY"
wait "$WK_PID_RELAY" 2>/dev/null || true
got=$(node test/emulator/sqs-read.mjs "$fifo" --delete --idle 2 |
	node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const seen={};const out=[];
		for(const l of s.split("\n")){if(!l)continue;const b=JSON.parse(JSON.parse(l).body);
			if(!b.paymentId.includes("-g"))continue;out.push(b.paymentId+" "+b.operationId)}
		console.log(out.sort((a,b)=>a.split(" ")[0]<b.split(" ")[0]?-1:a.split(" ")[0]>b.split(" ")[0]?1:0).join("\n"))})')
pf_eq "each group's events arrive in submission order" "$expected" "$got"
read -r scalls sentries <<<"$(grep '"msg":"stopped' "$WK_DIR/relay.log" | tail -n 1 |
	node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const c=JSON.parse(s).sqs.SendMessageBatch||{};
		console.log((c.calls||0)+" "+(c.entries||0))})')"
wk_log "FIFO relay: $sentries events in $scalls SendMessageBatch call(s)"
pf_done
