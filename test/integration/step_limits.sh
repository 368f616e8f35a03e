#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# A step limit across every worker (issue 27): PROCESS_PAYMENT limited to
# five attempts at once, 200 operations, three payment workers of ten
# executors each, calls of half a second in the legacy fixture. The fixture's own log of calls says
# how many ran at once: never more than five, although thirty executors
# wait; every operation completes, each charged once, no attempt used by a
# "limited" answer. The backlog waits in the database, not in the queue:
# a request goes out only with a free slot (step_dispatch.sql).
# Half-way one worker is killed (-9) holding its slots: they free
# themselves when its leases expire, and the others finish its work.
#
# A correctness check under load: no timing threshold, only counts.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

N=${PF_LIMIT_OPS:-200}
LIMIT=5
CALL_SECONDS=0.5
wk_init step-limits "${PAYFLOW_TEST_EMULATOR_PORT:-4750}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4751}" 20
p=lim-$WK_RUN
# the cluster is shared with the tests after this one: the limit goes, pass or fail
clear_limit() { q -c "SELECT payflow.clear_step_limit('PROCESS_PAYMENT')" >/dev/null 2>&1 || true; }
trap 'clear_limit; wk_cleanup' EXIT
q -c "SELECT payflow.set_step_limit('PROCESS_PAYMENT', $LIMIT)" >/dev/null
legacy -c "SELECT set_fault('slow', seconds => $CALL_SECONDS, count => NULL, fn => 'charge')" >/dev/null
wk_start_relay
for k in 1 2 3; do
	wk_start_worker "w$k" PAYFLOW_CONCURRENCY=10
done
started=$EPOCHREALTIME
q -c "SELECT count(payflow.submit('$p-' || n, jsonb_build_object('amount', n, 'currency', 'EUR')))
	  FROM generate_series(1, $N) n" >/dev/null
# at once, before a call of a second can end: $LIMIT requests sent, the rest held
held=$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND held_step IS NOT NULL")
pf_ok "the backlog waits in the database: $held of $N held, not sent" \
	test "$held" -ge $((N - 2 * LIMIT)) -a "$held" -le $((N - LIMIT))

calls() { legacy -c "SELECT count(*) FROM call_log WHERE fn = 'charge' AND payment_id LIKE '$p-%'"; }
a_third() { [ "$(calls)" -ge $((N / 3)) ]; }
pf_ok "a third of the calls made" pf_wait_for 120 a_third
# killed while it runs a step: its slot waits for the lease to expire
w1_running() {
	[ "$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND step_status = 'RUNNING'
				AND step_lease_owner = 'w1-$WK_RUN'")" -gt 0 ]
}
pf_wait_for 30 w1_running || true
killed_at=$EPOCHREALTIME
kill -9 "$WK_PID_w1"
wk_log "killed w1 (pid $WK_PID_w1) with $(q -c "SELECT count(*) FROM payflow.operations
	WHERE payment_id LIKE '$p-%' AND step_status = 'RUNNING' AND step_lease_owner = 'w1-$WK_RUN'") step(s) running"

done_count() {
	q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND status = 'PAYMENT_COMPLETED'"
}
all_done() { [ "$(done_count)" -ge "$N" ]; }
pf_ok "all $N operations completed" pf_wait_for 300 all_done
awk -v a="$started" -v b="$EPOCHREALTIME" -v n="$N" -v l="$LIMIT" -v c="$CALL_SECONDS" \
	'BEGIN { printf "# %d operations in %.1f s: %.2f/s (the limit allows %.1f/s)\n", n, b - a, n / (b - a), l / c }'
# before the kill, whose slots wait for their leases to expire: the calls
# that ended from the first one's start to the kill (the fixture's clock)
legacy -c "SELECT format('# before the kill: %s calls ended in %s s: %s/s', n, round(s, 1), round(n / s, 2))
			 FROM (SELECT count(*) FILTER (WHERE ended_at <= to_timestamp($killed_at)) AS n,
						  extract(epoch FROM to_timestamp($killed_at) - min(started_at))::numeric AS s
					 FROM call_log WHERE fn = 'charge' AND payment_id LIKE '$p-%') c"

# the most calls that overlapped: at each call's start, how many had started and not ended
most=$(legacy -c "SELECT max((SELECT count(*) FROM call_log b
							   WHERE b.fn = 'charge' AND b.payment_id LIKE '$p-%' AND b.started_at <= a.started_at
								 AND (b.ended_at IS NULL OR b.ended_at > a.started_at)))
					FROM call_log a WHERE a.fn = 'charge' AND a.payment_id LIKE '$p-%'")
wk_log "at most $most legacy calls at once"
pf_ok "the legacy DBMS never had more than $LIMIT calls at once ($most), with 30 executors waiting" test "$most" -le "$LIMIT"
pf_ok "... and the limit was used: several at once ($most)" test "$most" -ge 2
pf_eq "no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "one charge per operation" "$N" \
	"$(legacy -c "SELECT count(DISTINCT payment_id) FROM call_log WHERE fn = 'charge' AND outcome = 'ok' AND payment_id LIKE '$p-%'")"
wk_log "limited answers (a message handed back): $(cat "$WK_DIR"/w*.log | grep -c '"step limited' || true)"
pf_eq "no attempt used by a limited answer: attempts beyond the first are the killed worker's" 0 \
	"$(q -c "SELECT count(*) FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id
			  WHERE o.payment_id LIKE '$p-%' AND s.step_name = 'PROCESS_PAYMENT' AND s.attempt > 1
				AND NOT EXISTS (SELECT FROM payflow.step_attempts a WHERE a.operation_id = o.id
								   AND a.worker = 'w1-$WK_RUN')")"
# every slot came back, the killed worker's too: with the workers stopped,
# five fresh claims run and a sixth is limited
kill -TERM "$WK_PID_w2" "$WK_PID_w3"
wait "$WK_PID_w2" "$WK_PID_w3" || true
q -c "SELECT count(payflow.submit('$p-after-' || n, '{\"amount\": 1}')) FROM generate_series(1, $((LIMIT + 1))) n" >/dev/null
pf_eq "no slot left behind: $LIMIT fresh claims run, one more is limited" \
	"$(printf 'run,%.0s' $(seq 1 "$LIMIT"))limited" \
	"$(q -c "SELECT string_agg(c.answer ->> 'action', ',' ORDER BY c.item)
			  FROM payflow.claim_steps('PROCESS_PAYMENT', 'probe-$WK_RUN',
				   (SELECT array_agg(id ORDER BY payment_id) FROM payflow.operations WHERE payment_id LIKE '$p-after-%')) c")"
q -c "SELECT payflow.clear_step_limit('PROCESS_PAYMENT')" >/dev/null
pf_done
