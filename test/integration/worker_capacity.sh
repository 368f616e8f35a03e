#!/bin/bash
# A few hundred long legacy calls in one payment worker, with a short
# visibility timeout: every held message's visibility and every step's
# lease must be renewed in time by the heartbeat, so nothing is redelivered,
# no lease is lost, and the legacy DBMS gets exactly one call per operation.
# Half-way the worker's lease-renewal session is frozen (SIGSTOP of its
# PostgreSQL backend) for a few seconds: the heartbeat falls behind, says so,
# counts it in /metrics and stops receiving; once the session runs again it
# catches up and still nothing is lost or called twice.
#
# A correctness check under load: no timing threshold, only counts.
#
#   PF_CAPACITY_CALLS=250    concurrent calls (the cluster allows 700 sessions:
#                            each legacy session holds a second, dblink, one)
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

N=${PF_CAPACITY_CALLS:-250}
# long enough that all N are still running once the last one starts, even
# on a loaded 2-core machine (the ramp: relay, receives, N ODBC connects)
CALL_SECONDS=30
METRICS_PORT=${PAYFLOW_TEST_METRICS_PORT:-4692}
wk_init worker-capacity "${PAYFLOW_TEST_EMULATOR_PORT:-4690}" "${PAYFLOW_TEST_EMULATOR_BACKEND_PORT:-4691}" 5
wk_start_relay
p=cap-$WK_RUN

legacy -c "SELECT set_fault('slow', seconds => $CALL_SECONDS, count => NULL, fn => 'charge')" >/dev/null
# visibility 4 s: a heartbeat every 1.3 s, leases of 6 s
wk_start_worker cap PAYFLOW_CONCURRENCY="$N" PAYFLOW_LEGACY_TIMEOUT=$((CALL_SECONDS * 4)) \
	PAYFLOW_METRICS_LISTEN=127.0.0.1:$METRICS_PORT
metric() {
	curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 ~ "^" m "[{]" {print $2}'
}
pf_eq "/metrics answers with the worker's concurrency" "$N" "$(metric payflow_worker_concurrency)"
pf_eq "/metrics: anything else is a JSON 404" 404 \
	"$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$METRICS_PORT/other")"

q -c "SELECT count(payflow.submit('$p-' || n, jsonb_build_object('amount', n, 'currency', 'EUR')))
	  FROM generate_series(1, $N) n" >/dev/null
running() { legacy -c "SELECT count(*) FROM call_log WHERE fn = 'charge' AND ended_at IS NULL AND payment_id LIKE '$p-%'"; }
all_running() { [ "$(running)" -ge "$N" ]; }
pf_ok "all $N legacy calls run at once" pf_wait_for 90 all_running

# freeze the session that renews the leases, mid-calls
backend=$(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'payflow-worker heartbeat'")
pf_ok "the lease renewer has its own session" test -n "$backend"
# Thawed as soon as the worker has said so: the freeze must stay well under
# the 6 s lease (the last renewal may be a tick older than the freeze), or
# the scheduler rightly expires the leases and the step is no longer ours.
frozen_at=$EPOCHREALTIME
kill -STOP "$backend"
behind() { grep -q '"heartbeat behind' "$WK_DIR/cap.log"; }
pf_ok "frozen renewals: the heartbeat says it is behind" pf_wait_for 10 behind
pf_ok "... and /metrics shows it" test "$(metric payflow_worker_heartbeat_behind)" = 1
kill -CONT "$backend"
awk -v a="$frozen_at" -v b="$EPOCHREALTIME" 'BEGIN { printf "# the renewal session was frozen for %.1f s (leases: 6 s)\n", b - a }'
caught_up() { grep -q '"heartbeat caught up' "$WK_DIR/cap.log"; }
pf_ok "the session runs again: the heartbeat catches up" pf_wait_for 15 caught_up
pf_ok "... /metrics counted the lag" test "$(metric payflow_worker_heartbeat_behind_total)" -ge 1

done_count() {
	q -c "SELECT count(*) FROM payflow.operations WHERE payment_id LIKE '$p-%' AND status = 'PAYMENT_COMPLETED'"
}
all_done() { [ "$(done_count)" -ge "$N" ]; }
pf_ok "all $N operations completed" pf_wait_for $((CALL_SECONDS * 5)) all_done
pf_eq "the legacy DBMS got exactly one call per operation" "$N" \
	"$(legacy -c "SELECT count(*) FROM call_log WHERE fn = 'charge' AND payment_id LIKE '$p-%'")"
pf_eq "no duplicate charges" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_eq "no message was redelivered" 0 "$(grep -c '"receiveCount":[02-9]' "$WK_DIR/cap.log" || true)"
pf_eq "no lease was lost (log)" 0 "$(grep -c '"lease lost' "$WK_DIR/cap.log" || true)"
pf_eq "no lease was lost (/metrics)" 0 "$(metric payflow_worker_leases_lost_total)"
pf_eq "one attempt per operation" 0 "$(q -c "SELECT count(*) FROM payflow.steps s JOIN payflow.operations o ON o.id = s.operation_id
	WHERE o.payment_id LIKE '$p-%' AND s.step_name = 'PROCESS_PAYMENT' AND s.attempt > 1")"
pf_ok "/metrics counted lease renewals" test "$(metric payflow_worker_leases_renewed_total)" -gt "$N"
pf_done
