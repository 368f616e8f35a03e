# test/soak/faults.bash — one function per fault kind of the plan
# (plan.bash).  Sourced by run.sh after stack.bash.
#
#   soak_inject KIND ARGS    injects it and appends
#                            "kind<TAB>args<TAB>started_ms<TAB>ended_ms<TAB>injected(t|f)"
#                            to faults.tsv; ended is when the system is whole again
#                            (the process restarted, the server back), or the start
#                            for faults armed in an external system.
#
# A fault that cannot be armed (the database is down for the legacy
# fixture's set_fault, say) is recorded as not injected rather than retried:
# the report counts only what really happened.

SOAK_POISON_KINDS=(garbage truncated wrong-types unknown-version unknown-operation wrong-queue)
SOAK_POISON_COUNT=0

soak_legacy() { pf_psql -d legacy -Atq "$@" >/dev/null 2>>"$SOAK_DIR/faults.log"; }

soak_invoice_fault() {
	curl -fsS --max-time 5 -X POST -H 'Content-Type: application/json' -d "$1" \
		"http://127.0.0.1:$SOAK_INVOICE_PORT/_faults" >/dev/null 2>>"$SOAK_DIR/faults.log"
}

soak_pause_workers() {
	local name
	for name in payment postprocess invoice; do
		[ "${SOAK_DOWN_UNTIL[$name]}" != 0 ] || pf_kill_ours "$1" "${SOAK_PID[$name]}"
	done
}

soak_bool() { [ "$1" = 1 ] && echo true || echo false; }

soak_inject() {
	local kind=$1 args=$2 started ok=t
	local a b
	read -r a b <<<"$args"
	soak_now_ms
	started=$SOAK_NOW
	case $kind in
		kill-*)
			soak_kill9 "${kind#kill-}" "$a"
			SOAK_NOW=$((started + a)) ;;
		pg-restart)
			# a crash as far as PostgreSQL is concerned: no checkpoint, every
			# backend gone at once, crash recovery at the next start
			pf_as_postgres "$PF_PGBIN/pg_ctl" -D "$PF_CLUSTER_DIR/data" -m immediate -w stop >/dev/null 2>&1 || ok=f
			sleep "$(awk -v ms="$a" 'BEGIN { printf "%.3f", ms / 1000 }')"
			pf_cluster_start >>"$SOAK_DIR/faults.log" 2>&1 || { echo "soak: PostgreSQL did not come back"; ok=f; }
			soak_now_ms ;;
		emulator-restart)
			# In memory: every queued message is gone, the queues come back
			# empty.  The workers are paused (SIGSTOP, well within their
			# leases) for a few seconds first, so that messages are waiting
			# in every queue when they are lost.
			soak_pause_workers STOP
			sleep 4
			test/emulator/stop.sh >/dev/null 2>>"$SOAK_DIR/faults.log" || ok=f
			soak_pause_workers CONT
			sleep "$(awk -v ms="$a" 'BEGIN { printf "%.3f", ms / 1000 }')"
			soak_emulator_up || { echo "soak: the emulator did not come back"; ok=f; }
			soak_now_ms ;;
		legacy-slow) soak_legacy -c "SELECT set_fault('slow', seconds => $a, count => $b, fn => 'charge')" || ok=f ;;
		legacy-timeout)
			# longer than the worker's query time-out; half of them after charging
			soak_legacy -c "SELECT set_fault('slow', seconds => $((SOAK_LEGACY_TIMEOUT + 2)), count => $a, fn => 'charge',
											 after_charge => $(soak_bool "$b"))" || ok=f ;;
		legacy-transient) soak_legacy -c "SELECT set_fault('transient', count => $a, fn => 'charge')" || ok=f ;;
		legacy-disconnect)
			soak_legacy -c "SELECT set_fault('disconnect', count => $a, fn => 'charge', after_charge => $(soak_bool "$b"))" ||
				ok=f ;;
		legacy-permanent) soak_legacy -c "SELECT set_fault('permanent', count => $a, fn => 'charge')" || ok=f ;;
		invoice-429) soak_invoice_fault "{\"mode\":\"status\",\"status\":429,\"retryAfter\":$b,\"count\":$a}" || ok=f ;;
		invoice-503) soak_invoice_fault "{\"mode\":\"status\",\"status\":503,\"count\":$a}" || ok=f ;;
		invoice-timeout)
			soak_invoice_fault "{\"mode\":\"slow\",\"seconds\":$((SOAK_INVOICE_TIMEOUT_MS / 1000 + 2)),\"count\":$a,
								 \"afterCreate\":$(soak_bool "$b")}" || ok=f ;;
		invoice-drop) soak_invoice_fault "{\"mode\":\"drop\",\"count\":$a,\"afterCreate\":$(soak_bool "$b")}" || ok=f ;;
		duplicates) soak_send_duplicates "$a" || ok=f ;;
		poison) soak_send_poison "$a" || ok=f ;;
		*) echo "soak: unknown fault kind $kind"; ok=f ;;
	esac
	[ "${kind%%-*}" = kill ] || [ "$kind" = pg-restart ] || [ "$kind" = emulator-restart ] || SOAK_NOW=$started
	printf '%s\t%s\t%s\t%s\t%s\n' "$kind" "$args" "$started" "$SOAK_NOW" "$ok" >>"$SOAK_DIR/faults.tsv"
}

# Copies of events already published (same eventId, same body but for
# createdAt), as SQS's at-least-once delivery makes them: the newest ones,
# whose operations are likely still in flight.
soak_send_duplicates() {
	local count=$1 lines
	lines=$(pf_psql -Atq -c "
		SELECT json_build_object('destination', p.destination, 'eventId', p.event_id, 'operationId', o.id,
			'body', payflow._event_body(p.event_id, o.id, o.payment_id, o.correlation_id, p.event_type,
										greatest(s.attempt, 1), jsonb_build_object(d.input_field, s.input_ref))::text)
		  FROM (SELECT * FROM payflow.outbox_published WHERE destination <> 'operation-events'
				 ORDER BY published_at DESC LIMIT 100) p
		  JOIN payflow.operations o ON o.id = p.operation_id
		  JOIN payflow.step_definitions d ON d.request_event = p.event_type
		  JOIN payflow.steps s ON s.operation_id = o.id AND s.step_name = d.step_name
		 ORDER BY md5(p.event_id::text) LIMIT $count" 2>>"$SOAK_DIR/faults.log") || return 1
	[ -n "$lines" ] || return 1
	soak_now_ms
	node test/soak/sqs-send.mjs <<<"$lines" 2>>"$SOAK_DIR/faults.log" |
		sed "s/\$/\t$SOAK_NOW/" >>"$SOAK_DIR/duplicates.tsv"
	[ "${PIPESTATUS[0]}" = 0 ]
}

# Messages no worker can handle, each carrying a marker so that it can be
# found again in payflow.dead_letters or a DLQ.
soak_send_poison() {
	local count=$1 i kind queue marker body lines="" uuid fake_op sent=()
	local queues=(payment-requests payment-completed invoice-requests)
	local types=(PaymentRequested PaymentCompleted InvoiceRequested)
	local fields=(payload result invoiceInput)
	local q other ref='{"store":"pg","key":"payments/none/request.json","checksum":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":2}'
	for ((i = 0; i < count; i++)); do
		SOAK_POISON_COUNT=$((SOAK_POISON_COUNT + 1))
		kind=${SOAK_POISON_KINDS[$((SOAK_POISON_COUNT % ${#SOAK_POISON_KINDS[@]}))]}
		q=$((SOAK_POISON_COUNT % 3))
		other=$(((q + 1) % 3))
		queue=${queues[$q]}
		# the x ends the number: marker 1 must not match inside marker 12
		marker="soak-poison-$SOAK_SEED-${SOAK_POISON_COUNT}x"
		uuid=$(cat /proc/sys/kernel/random/uuid)
		# well-formed (pay_ + 26 Crockford base32), never issued: payflow's ids start with 0
		fake_op=$(printf 'pay_7ZZZZZZZZZZZZZZZZZZZZ%03d' $((SOAK_POISON_COUNT % 1000)))
		case $kind in
			garbage) body="<<$marker: not JSON at all>>" ;;
			truncated) body="{\"eventType\":\"${types[$q]}\",\"eventVersion\":1,\"correlationId\":\"$marker\",\"operationId\":\"pay_01" ;;
			wrong-types) body="{\"eventType\":\"${types[$q]}\",\"eventVersion\":\"one\",\"eventId\":42,\"operationId\":[\"$marker\"],\"attempt\":\"x\",\"${fields[$q]}\":\"not an object\"}" ;;
			unknown-version) body="{\"eventType\":\"${types[$q]}\",\"eventVersion\":99,\"eventId\":\"$uuid\",\"operationId\":\"$fake_op\",\"paymentId\":\"$marker\",\"attempt\":1,\"correlationId\":\"$marker\",\"createdAt\":\"2026-01-01T00:00:00.000Z\",\"${fields[$q]}\":$ref}" ;;
			unknown-operation) body="{\"eventType\":\"${types[$q]}\",\"eventVersion\":1,\"eventId\":\"$uuid\",\"operationId\":\"$fake_op\",\"paymentId\":\"$marker\",\"attempt\":1,\"correlationId\":\"$marker\",\"createdAt\":\"2026-01-01T00:00:00.000Z\",\"${fields[$q]}\":$ref}" ;;
			wrong-queue) body="{\"eventType\":\"${types[$other]}\",\"eventVersion\":1,\"eventId\":\"$uuid\",\"operationId\":\"$fake_op\",\"paymentId\":\"$marker\",\"attempt\":1,\"correlationId\":\"$marker\",\"createdAt\":\"2026-01-01T00:00:00.000Z\",\"${fields[$other]}\":$ref}" ;;
		esac
		lines+=$(node -e 'console.log(JSON.stringify({destination: process.argv[1], body: process.argv[2]}))' "$queue" "$body")$'\n'
		sent+=("$marker	$kind	$queue")
	done
	soak_now_ms
	node test/soak/sqs-send.mjs <<<"$lines" >/dev/null 2>>"$SOAK_DIR/faults.log" || return 1
	for i in "${sent[@]}"; do
		printf '%s\t%s\n' "$i" "$SOAK_NOW" >>"$SOAK_DIR/poison.tsv"
	done
}
