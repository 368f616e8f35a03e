#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# kill -9 of a payment worker in the middle of its legacy call, in both
# modes.  The step's lease (6 s; visibility 4 s) runs out, the request comes
# back (the queue redelivers it, and the scheduler re-emits it), a second
# worker takes the step over (attempt 2), and the legacy side still has
# exactly one charge:
#
#   blocking      the dead worker's call goes on in the legacy DBMS and
#                 charges; the second worker's look-up or call with the same
#                 idempotency key returns that charge
#   submit-poll   the dead worker had saved its legacy_ref; the second worker
#                 resumes polling it and never submits again
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-takeover "${PAYFLOW_TEST_EMULATOR_PORT:-4673}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4674}" 5

wk_start_relay
p=wt-$WK_RUN

# ---- blocking
legacy -c "SELECT set_fault('slow', payment_id => '$p-blocking', seconds => 8)" >/dev/null
wk_start_worker a1
op=$(wk_submit "$p-blocking")
pf_ok "blocking: worker a1 claimed the step" pf_wait_for 15 wk_log_has a1 "$op" '"step claimed"'
call_started() { [ "$(legacy -c "SELECT call_count('charge', '$p-blocking')")" -ge 1 ]; }
pf_ok "blocking: its legacy call is running" pf_wait_for 5 call_started
wk_kill9 "$WK_PID_a1"
wk_log "killed a1 (pid $WK_PID_a1) in the middle of its call"
wk_start_worker b1

pf_ok "blocking: PAYMENT_COMPLETED after the takeover" wk_wait_status "$op" PAYMENT_COMPLETED 40
pf_eq "blocking: the step ran twice (attempt 2)" 2 "$(wk_attempts "$op")"
pf_ok "blocking: worker b1 completed it" wk_log_has b1 "$op" '"step completed"'
pf_eq "blocking: exactly one charge" 1 "$(legacy -c "SELECT charge_count('$p-blocking')")"
pf_eq "blocking: the charge is the dead worker's (same key, same charge)" \
	"$(legacy -c "SELECT charge_id FROM charges WHERE payment_id = '$p-blocking'")" \
	"$(q -c "SELECT result->>'charge_id' FROM payflow.steps WHERE operation_id = '$op' AND step_name = 'PROCESS_PAYMENT'")"
# b1 drains while the next part runs: whatever it still receives it releases at once
kill -TERM "$WK_PID_b1"

# ---- submit-poll
legacy -c "SELECT set_job_delay(8)" >/dev/null
poll_settings=(PAYFLOW_LEGACY_MODE=submit-poll PAYFLOW_LEGACY_POLL_INTERVAL_MS=500)
wk_start_worker a2 "${poll_settings[@]}"
op2=$(wk_submit "$p-poll")
pf_ok "submit-poll: worker a2 submitted the job" pf_wait_for 15 wk_log_has a2 "$op2" '"legacy job submitted"'
ref=$(q -c "SELECT external_ref FROM payflow.steps WHERE operation_id = '$op2' AND step_name = 'PROCESS_PAYMENT'")
pf_ok "submit-poll: legacy_ref saved with the step before polling ($ref)" test -n "$ref"
polled() { [ "$(legacy -c "SELECT call_count('charge_status', '$p-poll')")" -ge 1 ]; }
pf_ok "submit-poll: a2 is polling" pf_wait_for 5 polled
wk_kill9 "$WK_PID_a2"
wk_log "killed a2 (pid $WK_PID_a2) while its job runs"
wk_start_worker b2 "${poll_settings[@]}"

pf_ok "submit-poll: PAYMENT_COMPLETED after the takeover" wk_wait_status "$op2" PAYMENT_COMPLETED 40
pf_eq "submit-poll: attempt 2" 2 "$(wk_attempts "$op2")"
pf_ok "submit-poll: b2 resumed polling the saved legacy_ref" \
	wk_log_has b2 "$op2" "\"resuming the poll of the legacy job an earlier attempt submitted\",\"operationId\":\"$op2\""
pf_ok "submit-poll: ... the same job ($ref)" wk_log_has b2 "$op2" "\"legacyRef\":\"$ref\""
pf_eq "submit-poll: submitted once" 1 "$(legacy -c "SELECT call_count('submit_charge', '$p-poll')")"
pf_eq "submit-poll: exactly one charge" 1 "$(legacy -c "SELECT charge_count('$p-poll')")"

wk_invariants "$op" "$op2"
pf_done
