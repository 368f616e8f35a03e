#!/bin/bash
# shellcheck disable=SC2154  # WK_PID_<name>: set by name (printf -v) when a worker starts
# A payment worker whose legacy call charges after its operation ended
# (issue 26, M7).  The worker stalls (SIGSTOP) in the middle of its call;
# its lease runs out on the last attempt and the scheduler fails the
# operation (lease_expired); the legacy DBMS finishes the call meanwhile
# and charges.  When the worker resumes it holds a real charge that
# complete_step refuses (PF006: the operation ended).  Before, it deleted
# the message and only logged the result: a charge nothing in the database
# showed.  Now the result goes to payflow.dead_letters (code
# result_after_end, with the charge), where reconciliation finds it.
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-result-after-end "${PAYFLOW_TEST_EMULATOR_PORT:-4646}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4647}" 5
wk_start_relay
p=wra-$WK_RUN

legacy -c "SELECT set_fault('slow', payment_id => '$p-late', seconds => 5)" >/dev/null
# (in a session of its own: a stopped process in the test's process group
# is sent SIGHUP by the kernel when that group becomes orphaned, as when
# a process of the harness whose parent is outside the group exits: the
# worker died of it in a CI run instead of resuming)
wk_start_worker a setsid
op=$(wk_submit "$p-late")
pf_ok "worker a claimed the step" pf_wait_for 15 wk_log_has a "$op" '"step claimed"'
call_started() { [ "$(legacy -c "SELECT call_count('charge', '$p-late')")" -ge 1 ]; }
pf_ok "its legacy call is running" pf_wait_for 5 call_started
kill -STOP "$WK_PID_a"
wk_log "stopped a (pid $WK_PID_a) in the middle of its call"

# What the scheduler does to a stalled worker's step on its last attempt
# (the attempt is raised past max_attempts instead of waiting for five).
q -c "UPDATE payflow.operations SET step_attempt = 99, step_lease_expires_at = now() - interval '1 second'
	  WHERE id = '$op' AND current_step = 'PROCESS_PAYMENT'" >/dev/null
q -c "SELECT payflow.run_scheduler()" >/dev/null
pf_eq "the operation FAILED: lease_expired" "FAILED|lease_expired" \
	"$(q -c "SELECT status || '|' || (error ->> 'code') FROM payflow.operations WHERE id = '$op'")"
call_ended() { [ "$(legacy -c "SELECT count(*) FROM call_log WHERE fn = 'charge' AND payment_id = '$p-late' AND ended_at IS NOT NULL")" = 1 ]; }
pf_ok "the legacy call ended meanwhile" pf_wait_for 15 call_ended
pf_eq "... and charged" 1 "$(legacy -c "SELECT charge_count('$p-late')")"

kill -CONT "$WK_PID_a"
wk_log "resumed a"
recorded() { [ "$(q -c "SELECT count(*) FROM payflow.dead_letters WHERE operation_id = '$op' AND error ->> 'code' = 'result_after_end'")" = 1 ]; }
pf_ok "the charge the operation does not show is a dead letter (result_after_end)" pf_wait_for 20 recorded
pf_eq "... holding the legacy DBMS's charge id" \
	"$(legacy -c "SELECT charge_id FROM charges WHERE payment_id = '$p-late'")" \
	"$(q -c "SELECT error -> 'result' ->> 'charge_id' FROM payflow.dead_letters WHERE operation_id = '$op' AND error ->> 'code' = 'result_after_end'")"
pf_eq "... the step and the attempt that charged" "PROCESS_PAYMENT|1" \
	"$(q -c "SELECT (error ->> 'step') || '|' || (error ->> 'attempt') FROM payflow.dead_letters WHERE operation_id = '$op' AND error ->> 'code' = 'result_after_end'")"
pf_ok "the worker says so in its log" wk_log_has a "$op" "recorded as a dead letter for reconciliation"
pf_eq "the operation stays FAILED, charged once" "FAILED|1" "$(wk_status "$op")|$(legacy -c "SELECT charge_count('$p-late')")"
pf_ok "the worker is still running" kill -0 "$WK_PID_a"

wk_invariants "$op"
pf_done
