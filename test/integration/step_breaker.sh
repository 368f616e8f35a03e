#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# A circuit breaker on PROCESS_PAYMENT (issue 27) against the real
# pipeline: the legacy fixture fails half its calls (a transient fault on
# every other payment), the breaker opens, and while it is open no attempt
# of the step starts: the workers are told "limited" and hand the messages
# back.  Operations submitted meanwhile wait (not FAILED).  Then the
# fixture recovers: a probe succeeds, the breaker closes, and every
# operation completes, each charged once.
#
# A correctness check under load: no timing threshold, only counts and the
# order of what the database recorded.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

N=${PF_BREAKER_OPS:-20}
LATE=5
wk_init step-breaker "${PAYFLOW_TEST_EMULATOR_PORT:-4760}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4761}" 20
p=brk-$WK_RUN
# the cluster is shared with the tests after this one: the breaker and the
# retry settings go back, pass or fail
saved=$(q -c "SELECT coalesce(max_attempts::text, 'NULL') || ',' || coalesce(quote_literal(retry_base_delay), 'NULL') || ','
				  || coalesce(quote_literal(retry_max_delay), 'NULL')
			 FROM payflow.step_definitions WHERE pipeline_version = 1 AND step_name = 'PROCESS_PAYMENT'")
restore() {
	q -c "SELECT payflow.clear_step_breaker('PROCESS_PAYMENT')" >/dev/null 2>&1 || true
	q -c "UPDATE payflow.step_definitions SET (max_attempts, retry_base_delay, retry_max_delay) = ($saved)
		  WHERE pipeline_version = 1 AND step_name = 'PROCESS_PAYMENT'" >/dev/null 2>&1 || true
	legacy -c "SELECT clear_faults()" >/dev/null 2>&1 || true
}
trap 'restore; wk_cleanup' EXIT
# retries soon and many: the operations must outlast the outage, not fail
q -c "UPDATE payflow.step_definitions SET max_attempts = 100, retry_base_delay = '1 second', retry_max_delay = '2 seconds'
	  WHERE pipeline_version = 1 AND step_name = 'PROCESS_PAYMENT'" >/dev/null
q -c "SELECT payflow.set_step_breaker('PROCESS_PAYMENT', 0.5, 6, 60, 3, 1)" >/dev/null
for n in $(seq 2 2 "$N"); do
	legacy -c "SELECT set_fault('transient', payment_id => '$p-$n', count => NULL, fn => 'charge')" >/dev/null
done

wk_start_relay
wk_start_worker w1 PAYFLOW_CONCURRENCY=4
q -c "SELECT count(payflow.submit('$p-' || n, jsonb_build_object('amount', n, 'currency', 'EUR')))
	  FROM generate_series(1, $N) n" >/dev/null

opened() { [ "$(q -c "SELECT count(*) FROM payflow.step_breaker_events WHERE step_name = 'PROCESS_PAYMENT' AND state = 'OPEN'")" -ge 1 ]; }
pf_ok "half the legacy calls failing opens the breaker" pf_wait_for 120 opened
wk_log "$(q -c "SELECT reason FROM payflow.step_breaker_events WHERE step_name = 'PROCESS_PAYMENT' AND state = 'OPEN' ORDER BY id LIMIT 1")"
# submitted while it is open: they wait, and complete once it closes
q -c "SELECT count(payflow.submit('$p-late-' || n, jsonb_build_object('amount', n, 'currency', 'EUR')))
	  FROM generate_series(1, $LATE) n" >/dev/null
pf_eq "... the operations wait: none FAILED" 0 \
	"$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND status = 'FAILED'")"
# a cool-down or two with the fault on (probes fail and open it again), then the back end recovers
twice() { [ "$(q -c "SELECT count(*) FROM payflow.step_breaker_events WHERE step_name = 'PROCESS_PAYMENT' AND state = 'HALF_OPEN'")" -ge 1 ]; }
pf_ok "... and after its cool-down it lets a probe through" pf_wait_for 60 twice
legacy -c "SELECT clear_faults()" >/dev/null
wk_log "the legacy fixture recovered"

done_count() {
	q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND status = 'PAYMENT_COMPLETED'"
}
all_done() { [ "$(done_count)" -ge $((N + LATE)) ]; }
pf_ok "every operation completed after the recovery, those submitted while it was open too" pf_wait_for 300 all_done
closed() { [ "$(q -c "SELECT state FROM payflow.step_breakers WHERE step_name = 'PROCESS_PAYMENT'")" = CLOSED ]; }
pf_ok "the breaker closed" pf_wait_for 30 closed
wk_log "breaker events: $(q -c "SELECT string_agg(state, ' ' ORDER BY id) FROM payflow.step_breaker_events WHERE step_name = 'PROCESS_PAYMENT'")"

# While open, no attempt of the step started: every claim of it (the
# attempts that failed, those that succeeded) fell outside each interval
# from an OPEN to the HALF_OPEN after it.
pf_eq "no attempt started while the breaker was open" 0 "$(q -c "
	WITH ev AS (
		SELECT state, at, lead(at) OVER (ORDER BY id) AS until
		  FROM payflow.step_breaker_events WHERE step_name = 'PROCESS_PAYMENT'
	), open AS (SELECT at, coalesce(until, 'infinity') AS until FROM ev WHERE state = 'OPEN'),
	claims AS (
		SELECT a.started_at AS at FROM payflow.step_attempts a JOIN payflow.operations o ON o.id = a.operation_id
		 WHERE o.payment_id LIKE '$p-%' AND a.step_name = 'PROCESS_PAYMENT'
		UNION ALL
		SELECT r.claimed_at FROM payflow.step_results r JOIN payflow.operations o ON o.id = r.operation_id
		 WHERE o.payment_id LIKE '$p-%' AND r.step_name = 'PROCESS_PAYMENT'
	)
	SELECT count(*) FROM claims c JOIN open w ON c.at > w.at AND c.at < w.until")"
pf_ok "the worker was told the breaker is open and handed messages back" \
	grep -q '"step limited (breaker_open)' "$WK_DIR/w1.log"
pf_eq "no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "one charge per operation" $((N + LATE)) \
	"$(legacy -c "SELECT count(DISTINCT payment_id) FROM call_log WHERE fn = 'charge' AND outcome = 'ok' AND payment_id LIKE '$p-%'")"
pf_done
