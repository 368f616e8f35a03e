#!/bin/bash
# shellcheck disable=SC2154  # PID_<name>, WK_PID_<name>: set by name (printf -v) when a program starts
# ECS task scale-in protection in payflow-worker --role payment, against a
# stand-in of the ECS agent (test/fixtures/ecs-agent/server.mjs, one task
# per worker: ECS_AGENT_URI=http://127.0.0.1:<port>/api/<task>), visibility
# 4 s, PAYFLOW_PROTECTION_MINUTES=1 with the stand-in granting only 12 s of
# it (its ExpirationDate), renewed when less than 6 s are left:
#
#   long call     an 18 s call, longer than the 12 s protection: enabled
#                 once the message is taken (before the call ends), renewed
#                 before each expiry while it runs, released after
#                 PAYFLOW_PROTECTION_IDLE_SECONDS (3 s) without a message,
#                 never enabled while idle before it
#   drain         SIGTERM during a call: the call finishes, the protection
#                 is released after it, exit 0
#   500           the agent answers 500: the payment completes (one attempt,
#                 never redelivered: heartbeats go on), the calls are retried
#                 with back-off and logged once, not per call
#   hang          the agent never answers: the same, and SIGTERM still ends
#                 the worker promptly with exit 0
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

AGENT_PORT=4942
wk_init worker-protection 4940 4941 3
AGENT=http://127.0.0.1:$AGENT_PORT
node test/fixtures/ecs-agent/server.mjs --port "$AGENT_PORT" >"$WK_DIR/ecs-agent.log" 2>&1 &
WK_PIDS+=($!)
pf_wait_for 10 curl -fsS -o /dev/null "$AGENT/_health" || echo "# the ECS agent stand-in did not start"
wk_start_relay
p=wpr-$WK_RUN

mode() { curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' -d "$1" "$AGENT/_mode"; }
calls() { curl -fsS "$AGENT/_calls?task=$1"; }
# calls TASK | count JQ_FILTER
count() { jq "[.[] | select($1)] | length"; }
enables() { calls "$1" | count '.body | fromjson? | .ProtectionEnabled == true'; }
releases() { calls "$1" | count '.body | fromjson? | .ProtectionEnabled == false'; }
# at_least N COMMAND...: COMMAND prints a number >= N (for pf_wait_for, which reruns it)
at_least() {
	local n=$1
	shift
	[ "$("$@")" -ge "$n" ]
}
# when OP reached its last status, ms since the epoch
done_ms() { q -c "SELECT (extract(epoch FROM max(at)) * 1000)::bigint FROM payflow.history('$1')"; }
wait_exit() {
	rc=0
	wait "$1" || rc=$?
}
PROTECTION=(PAYFLOW_DRAIN_SECONDS=6 PAYFLOW_PROTECTION_MINUTES=1 PAYFLOW_PROTECTION_RENEW_SECONDS=6 PAYFLOW_PROTECTION_IDLE_SECONDS=3)

# ---- long call
mode '{"task":"a","mode":"ok","expireSeconds":12}'
legacy -c "SELECT set_fault('slow', payment_id => '$p-long', seconds => 18)" \
	-c "SELECT set_fault('slow', payment_id => '$p-drain', seconds => 4)" \
	-c "SELECT set_fault('slow', payment_id => '$p-500', seconds => 6)" \
	-c "SELECT set_fault('slow', payment_id => '$p-hang', seconds => 6)" >/dev/null
wk_start_worker a "ECS_AGENT_URI=$AGENT/api/a" "${PROTECTION[@]}" PAYFLOW_CONCURRENCY=2 PAYFLOW_LEGACY_TIMEOUT=30
sleep 2
pf_eq "idle at start: no protection call" 0 "$(calls a | jq length)"
long=$(wk_submit "$p-long")
pf_ok "long call: protection enabled once the message is taken" pf_wait_for 20 at_least 1 enables a
pf_eq "long call: enabled while the call runs" PAYMENT_PROCESSING "$(wk_status "$long")"
pf_ok "long call: PAYMENT_COMPLETED" wk_wait_status "$long" PAYMENT_COMPLETED 40
long_done=$(done_ms "$long")
pf_ok "long call: released after the idle time" pf_wait_for 20 at_least 1 releases a
ca=$(calls a)
pf_eq "long call: every call answered 200" "" "$(jq -r '.[] | select(.answered != 200) | .body' <<<"$ca")"
pf_eq "long call: ExpiresInMinutes is PAYFLOW_PROTECTION_MINUTES" 1 \
	"$(jq '[.[] | .body | fromjson | select(.ProtectionEnabled) | .ExpiresInMinutes] | unique | .[]' <<<"$ca")"
pf_ok "long call: renewed during the call (at least 2 renewals of a 12 s protection in 18 s)" \
	test "$(jq --argjson d "$long_done" '[.[] | select(.at < $d and (.body | fromjson).ProtectionEnabled)] | length' <<<"$ca")" -ge 3
pf_eq "long call: each renewal came before the protection it renewed expired" "[]" \
	"$(jq -c --argjson d "$long_done" '[.[] | select((.body | fromjson).ProtectionEnabled)] as $e
		| [range(1; $e | length) | select($e[.].at >= $e[. - 1].expirationMs)] ' <<<"$ca")"
pf_eq "long call: protected until the step completed (the last enable's expiry is after it)" true \
	"$(jq --argjson d "$long_done" '[.[] | select((.body | fromjson).ProtectionEnabled)] | last | .expirationMs > $d' <<<"$ca")"
pf_ok "long call: the release came after the idle time ($(( $(jq '[.[] | select((.body | fromjson).ProtectionEnabled == false)][0].at' <<<"$ca") - long_done )) ms after completion)" \
	test "$(jq --argjson d "$long_done" '[.[] | select((.body | fromjson).ProtectionEnabled == false)][0].at - $d' <<<"$ca")" -ge 2000
pf_eq "long call: nothing enabled after the release" 0 \
	"$(jq '(map((.body | fromjson).ProtectionEnabled == false) | index(true)) as $r | .[$r:] | map(select((.body | fromjson).ProtectionEnabled)) | length' <<<"$ca")"

# ---- drain: SIGTERM while a call runs
n_before=$(calls a | jq length)
drain=$(wk_submit "$p-drain")
pf_ok "drain: protection enabled for the new message" pf_wait_for 20 at_least "$(( $(jq '[.[] | select((.body | fromjson).ProtectionEnabled)] | length' <<<"$ca") + 1 ))" enables a
pf_ok "drain: the call runs" pf_wait_for 15 wk_log_has a "$drain" '"step claimed"'
kill -TERM "$WK_PID_a"
wait_exit "$WK_PID_a"
pf_eq "drain: exit 0" 0 "$rc"
pf_eq "drain: the call finished before the exit" PAYMENT_COMPLETED "$(wk_status "$drain")"
drain_done=$(done_ms "$drain")
pf_eq "drain: released once, after the step completed" 1 \
	"$(calls a | jq --argjson n "$n_before" --argjson d "$drain_done" \
		'.[$n:] | map(select((.body | fromjson).ProtectionEnabled == false and .at >= $d)) | length')"

# ---- the agent answers 500
mode '{"task":"b","mode":"status","status":500}'
wk_start_worker b "ECS_AGENT_URI=$AGENT/api/b" "${PROTECTION[@]}" PAYFLOW_LEGACY_TIMEOUT=30
t0=$SECONDS
failing=$(wk_submit "$p-500")
pf_ok "500: PAYMENT_COMPLETED" wk_wait_status "$failing" PAYMENT_COMPLETED 30
pf_ok "500: not delayed (6 s call, done in $((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 25
pf_eq "500: one attempt" 1 "$(wk_attempts "$failing")"
# (a worker that exited just before may have taken the message on its last long poll: the
# receive count alone says nothing; one claim and one attempt say the message stayed ours)
pf_eq "500: claimed once, never taken over (heartbeats went on)" 1 \
	"$(grep -F "\"operationId\":\"$failing\"" "$WK_DIR/b.log" | grep -c '"step claimed"' || true)"
pf_ok "500: the agent was called again (retries)" test "$(calls b | jq length)" -ge 2
pf_ok "500: every call answered 500" test "$(calls b | count '.answered != 500')" = 0
warned=$(grep -c 'the ECS agent call failed' "$WK_DIR/b.log" || true)
pf_ok "500: failures logged, rate-limited ($warned line(s) for $(calls b | jq length) calls)" \
	test "$warned" -ge 1 -a "$warned" -lt "$(calls b | jq length)"
kill -TERM "$WK_PID_b"
wait_exit "$WK_PID_b"
pf_eq "500: exit 0" 0 "$rc"

# ---- the agent never answers
mode '{"task":"c","mode":"hang"}'
wk_start_worker c "ECS_AGENT_URI=$AGENT/api/c" "${PROTECTION[@]}" PAYFLOW_LEGACY_TIMEOUT=30
t0=$SECONDS
hanging=$(wk_submit "$p-hang")
pf_ok "hang: PAYMENT_COMPLETED" wk_wait_status "$hanging" PAYMENT_COMPLETED 30
pf_ok "hang: not delayed (6 s call, done in $((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 25
pf_eq "hang: one attempt" 1 "$(wk_attempts "$hanging")"
# (a worker that exited just before may have taken the message on its last long poll: the
# receive count alone says nothing; one claim and one attempt say the message stayed ours)
pf_eq "hang: claimed once, never taken over (heartbeats went on)" 1 \
	"$(grep -F "\"operationId\":\"$hanging\"" "$WK_DIR/c.log" | grep -c '"step claimed"' || true)"
pf_ok "hang: the agent was called again after time-outs" test "$(calls c | jq length)" -ge 2
pf_ok "hang: the time-outs were logged" grep -q 'the ECS agent call failed' "$WK_DIR/c.log"
t0=$SECONDS
kill -TERM "$WK_PID_c"
wait_exit "$WK_PID_c"
pf_eq "hang: exit 0" 0 "$rc"
pf_ok "hang: SIGTERM ended it promptly ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 20

wk_invariants "$long" "$drain" "$failing" "$hanging"
pf_done
