#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# SIGTERM drains a payment worker (visibility 4 s, lease 6 s):
#
#   in time       a 3 s call in flight, 6 s to drain: no more receives, the
#                 call finishes and is recorded (PAYMENT_COMPLETED) before
#                 the worker exits 0
#   out of time   a 15 s call, 2 s to drain: the call is cancelled
#                 (SQLCancel), the lease given back and the message made
#                 visible again; exit 0; another worker completes the step
#                 with one charge
#   second TERM   exits at once (128 + 15) without recording anything; the
#                 lease expires and another worker takes over, one charge
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-drain 4675 4676 5
wk_start_relay
p=wd-$WK_RUN

# wait_exit PID: its exit status in $rc (in this shell: $(...) could not wait for it)
wait_exit() {
	rc=0
	wait "$1" || rc=$?
}

# ---- in time
legacy -c "SELECT set_fault('slow', payment_id => '$p-in-time', seconds => 3)" >/dev/null
wk_start_worker w1 PAYFLOW_DRAIN_SECONDS=6
op1=$(wk_submit "$p-in-time")
pf_ok "in time: w1 is in the call" pf_wait_for 15 wk_log_has w1 "$op1" '"step claimed"'
started=$SECONDS
kill -TERM "$WK_PID_w1"
wait_exit "$WK_PID_w1"
pf_eq "in time: w1 exits 0" 0 "$rc"
pf_ok "in time: within the drain time (took $((SECONDS - started)) s)" test $((SECONDS - started)) -le 9
pf_eq "in time: the call finished and was recorded before the exit" PAYMENT_COMPLETED "$(wk_status "$op1")"
pf_ok "in time: it said it drained cleanly" grep -q '"msg":"payflow-worker stopped","handled":[0-9]*,"clean":true' "$WK_DIR/w1.log"

# ---- out of time
legacy -c "SELECT set_fault('slow', payment_id => '$p-late', seconds => 15)" >/dev/null
wk_start_worker w2 PAYFLOW_DRAIN_SECONDS=2
op2=$(wk_submit "$p-late")
pf_ok "out of time: w2 is in the call" pf_wait_for 15 wk_log_has w2 "$op2" '"step claimed"'
started=$SECONDS
kill -TERM "$WK_PID_w2"
wait_exit "$WK_PID_w2"
pf_eq "out of time: w2 exits 0" 0 "$rc"
pf_ok "out of time: soon after the 2 s drain time (took $((SECONDS - started)) s)" test $((SECONDS - started)) -le 5
pf_ok "out of time: the step was abandoned and its message released" \
	wk_log_has w2 "$op2" '"step abandoned at shutdown; message made visible again"'
pf_eq "out of time: the legacy call was cancelled (57014)" "error|57014" \
	"$(legacy -c "SELECT outcome, sqlstate FROM call_log WHERE payment_id = '$p-late' ORDER BY call_id LIMIT 1")"
pf_eq "out of time: nothing recorded by w2" PAYMENT_PROCESSING "$(wk_status "$op2")"
wk_start_worker w3 PAYFLOW_DRAIN_SECONDS=1
pf_ok "out of time: another worker completes it" wk_wait_status "$op2" PAYMENT_COMPLETED 20
pf_ok "out of time: ... namely w3" wk_log_has w3 "$op2" '"step completed"'
kill -TERM "$WK_PID_w3"
wait_exit "$WK_PID_w3"
pf_eq "w3 exits 0" 0 "$rc"

# ---- a second SIGTERM
legacy -c "SELECT set_fault('slow', payment_id => '$p-twice', seconds => 10)" >/dev/null
wk_start_worker w4 PAYFLOW_DRAIN_SECONDS=30
op3=$(wk_submit "$p-twice")
pf_ok "second TERM: w4 is in the call" pf_wait_for 15 wk_log_has w4 "$op3" '"step claimed"'
kill -TERM "$WK_PID_w4"
sleep 0.5
started=$SECONDS
kill -TERM "$WK_PID_w4"
wait_exit "$WK_PID_w4"
pf_eq "second TERM: w4 exits at once with 143" 143 "$rc"
pf_ok "second TERM: at once (took $((SECONDS - started)) s)" test $((SECONDS - started)) -le 1
pf_ok "second TERM: it said so" grep -q '"msg":"second Terminated: exiting at once' "$WK_DIR/w4.log"
wk_start_worker w5
pf_ok "second TERM: the lease expires and w5 completes the step" wk_wait_status "$op3" PAYMENT_COMPLETED 40
pf_eq "second TERM: attempt 2" 2 "$(wk_attempts "$op3")"

wk_invariants "$op1" "$op2" "$op3"
pf_done
