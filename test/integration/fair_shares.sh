#!/bin/bash
# Fair shares and priorities on a limited step (issue 27, step_dispatch.sql).
# PROCESS_PAYMENT is limited to four attempts at once; two payment workers
# of ten executors; calls of half a second in the legacy fixture.
#
# Tenant A submits a burst of 10,000 payments. Once its work runs, tenant B
# submits ten, and A one more at priority 9. What B and the urgent one
# waited for is counted in claims, not in seconds: how many of A's burst
# started their call between B's submit and B's first call (a turn is the
# LIMIT slots turning over once). The burst's backlog waits in the
# database, so B does not queue behind it: its first call comes within two
# turns, all ten finish while A still holds thousands, and the legacy DBMS
# never sees more than four calls at once. Then A's backlog is cancelled
# (the cluster is shared with the tests after this one).
#
# A correctness check under load: no timing threshold, only counts.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

BURST=${PF_FAIR_BURST:-10000}
LIMIT=4
wk_init fair-shares "${PAYFLOW_TEST_EMULATOR_PORT:-4780}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4781}" 20
p=fair-$WK_RUN
finish() {
	# A's backlog goes (cancelled, never sent), then the limit
	q -c "SELECT count(payflow.cancel(id, 'fair_shares cleanup')) FROM payflow.operations
		  WHERE payment_id LIKE '$p-%' AND status = 'PENDING' AND held_step IS NOT NULL" >/dev/null 2>&1 || true
	q -c "SELECT payflow.clear_step_limit('PROCESS_PAYMENT')" >/dev/null 2>&1 || true
	wk_cleanup
}
trap finish EXIT
key_a=$(q -c "SELECT payflow.create_api_key('$p-a', 'fair_shares A')")
key_b=$(q -c "SELECT payflow.create_api_key('$p-b', 'fair_shares B')")
q -c "SELECT payflow.set_step_limit('PROCESS_PAYMENT', $LIMIT)" >/dev/null
legacy -c "SELECT set_fault('slow', seconds => 0.5, count => NULL, fn => 'charge')" >/dev/null
wk_start_relay
for k in 1 2; do
	wk_start_worker "w$k" PAYFLOW_CONCURRENCY=10
done

# A's burst: ten arrays of a thousand
started=$EPOCHREALTIME
for ((k = 0; k < BURST / 1000; k++)); do
	q -c "SELECT count(*) FROM payflow.authenticate('$key_a'),
			   payflow.submit_many((SELECT jsonb_agg(jsonb_build_object('payment_id', '$p-a-' || n,
										 'details', jsonb_build_object('amount', n, 'currency', 'EUR')))
									 FROM generate_series($k * 1000 + 1, $k * 1000 + 1000) n))" >/dev/null
done
awk -v a="$started" -v b="$EPOCHREALTIME" -v n="$BURST" 'BEGIN { printf "# %d submitted in %.1f s\n", n, b - a }'
# one snapshot: requests sent, calls done, operations held
IFS='|' read -r sent paid held <<<"$(q -c "
	SELECT (SELECT count(*) FROM payflow.outbox_events e JOIN payflow.operations o ON o.id = e.operation_id
			 WHERE o.payment_id LIKE '$p-a-%' AND (payflow._outbox_event_route(e)).event_type = 'PaymentRequested'),
		   (SELECT count(*) FROM payflow.step_results r JOIN payflow.operations o ON o.id = r.operation_id
			 WHERE o.payment_id LIKE '$p-a-%' AND r.step_name = 'PROCESS_PAYMENT'),
		   (SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-a-%' AND held_step IS NOT NULL)")"
wk_log "after the burst: $sent requests sent, $paid calls done, $held held"
pf_ok "the burst waits in the database: a request only with a slot ($sent sent <= $paid done + $LIMIT)" \
	test "$sent" -le $((paid + LIMIT))
pf_eq "... the rest held, none lost" "$BURST" $((sent + held))

a_done() { q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-a-%' AND status = 'PAYMENT_COMPLETED'"; }
a_running() { [ "$(a_done)" -ge $((2 * LIMIT)) ]; }
pf_ok "A's burst runs" pf_wait_for 120 a_running

# B's ten, then A's urgent one
for n in $(seq 1 10); do
	q -c "SELECT payflow.submit('$p-b-$n', '{\"amount\": 1, \"currency\": \"EUR\"}') FROM payflow.authenticate('$key_b')" >/dev/null
done
q -c "SELECT payflow.submit('$p-urgent', '{\"amount\": 1, \"currency\": \"EUR\"}', priority => 9)
	  FROM payflow.authenticate('$key_a')" >/dev/null

b_done() { q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-b-%' AND status = 'PAYMENT_COMPLETED'"; }
all_b() { [ "$(b_done)" -ge 10 ] && [ "$(wk_status "$(q -c "SELECT id FROM payflow.operations WHERE payment_id = '$p-urgent'")")" = PAYMENT_COMPLETED ]; }
pf_ok "B's ten and the urgent one completed" pf_wait_for 120 all_b
held_then=$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-a-%' AND held_step IS NOT NULL")
pf_ok "... while A still had thousands waiting ($held_then)" test "$held_then" -ge $((BURST / 2))

# claims of A's burst that started between a submit and that operation's
# first call, from the legacy fixture's own call log
a_calls_before() {	# a_calls_before SUBMITTED_AT FIRST_CALL_AT
	legacy -c "SELECT count(*) FROM call_log WHERE fn = 'charge' AND payment_id LIKE '$p-a-%'
				  AND started_at > '$1' AND started_at < '$2'"
}
b_submitted=$(q -c "SELECT min(created_at) FROM payflow.operations WHERE payment_id LIKE '$p-b-%'")
b_first=$(legacy -c "SELECT min(started_at) FROM call_log WHERE fn = 'charge' AND payment_id LIKE '$p-b-%'")
before_b=$(a_calls_before "$b_submitted" "$b_first")
u_submitted=$(q -c "SELECT created_at FROM payflow.operations WHERE payment_id = '$p-urgent'")
u_first=$(legacy -c "SELECT min(started_at) FROM call_log WHERE fn = 'charge' AND payment_id = '$p-urgent'")
before_u=$(a_calls_before "$u_submitted" "$u_first")
# A's requests already sent when B's arrived may start first (at most
# LIMIT); a second turn is the slack for a dispatch racing B's commit
wk_log "A's calls started before B's first: $before_b; before the urgent one: $before_u (a turn: $LIMIT)"
pf_ok "B's first call within two turns of the slots, not behind A's burst ($before_b <= 2 x $LIMIT)" \
	test "$before_b" -le $((2 * LIMIT))
pf_ok "the priority 9 within two turns too ($before_u <= 2 x $LIMIT)" test "$before_u" -le $((2 * LIMIT))
# B holds the fewest slots while it has work: of the calls after B's first,
# B's ten come before A's next ten-and-more
b_last=$(legacy -c "SELECT max(started_at) FROM call_log WHERE fn = 'charge' AND payment_id LIKE '$p-b-%'")
a_meanwhile=$(a_calls_before "$b_first" "$b_last")
wk_log "A's calls while B's ten started: $a_meanwhile"
pf_ok "B's ten shared the slots with A's burst, not behind it ($a_meanwhile <= 10 + 2 x $LIMIT)" \
	test "$a_meanwhile" -le $((10 + 2 * LIMIT))

most=$(legacy -c "SELECT max((SELECT count(*) FROM call_log b
							   WHERE b.fn = 'charge' AND b.payment_id LIKE '$p-%' AND b.started_at <= a.started_at
								 AND (b.ended_at IS NULL OR b.ended_at > a.started_at)))
					FROM call_log a WHERE a.fn = 'charge' AND a.payment_id LIKE '$p-%'")
pf_ok "the legacy DBMS never had more than $LIMIT calls at once ($most)" test "$most" -le "$LIMIT"
pf_eq "no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "no attempt beyond the first" 0 \
	"$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND step_attempt > 1")"
pf_done
