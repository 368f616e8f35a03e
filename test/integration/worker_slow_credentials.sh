#!/bin/bash
# A slow container-credentials endpoint holds up neither the relay's sends
# nor a worker's heartbeats: credentials are refreshed ahead of their expiry
# by a thread of their own (aws_credentials.c), and the loops sign with the
# cached ones meanwhile.
#
# The relay and a payment worker take their credentials from
# AWS_CONTAINER_CREDENTIALS_FULL_URI, served by test/lib/slow_credentials.mjs:
# the first answer comes at once and expires in 303 s, so the refresh is due
# 3 s later, and the stand-in then holds every request open without an
# answer (the client gives up after its 5 s time-out and tries again). While
# one such request stays open:
#
#   - an event submitted then is sent by the relay and acked;
#   - the worker, which holds a payment whose legacy call takes 90 s
#     (started after the relay's part, which can take minutes on a loaded
#     machine), renews its SQS visibility and its step's lease in the
#     database.
#
# "While open" is checked causally, not with a clock: the request that was
# open before the submit (or before the lease was read) must still be open
# once the send (or the renewal) is seen. Before the fix the loops fetched
# credentials themselves, so nothing moved until that request ended. Each
# check gets several requests to pass on (a loaded machine may take longer
# than one request's 5 s); the relay's starts on a request that has just
# opened. The relay is checked first and quickly, before the credentials
# first given expire. At the end the stand-in answers again: both take up
# the new credentials, and the payments complete.
#
# Uses the running cluster and its own emulator (ports 4686/4687).
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-creds 4686 4687 3
P=creds-$WK_RUN
creds_pid=

sc_cleanup() {
	[ -z "$creds_pid" ] || pf_kill_ours TERM "$creds_pid"
	wk_cleanup
}
trap sc_cleanup EXIT

node test/lib/slow_credentials.mjs "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" 303 >"$WK_DIR/credentials.log" 2>&1 &
creds_pid=$!
pf_wait_for 10 grep -q '"listening"' "$WK_DIR/credentials.log" || { echo "not ok - the credentials stand-in starts"; exit 1; }
creds_port=$(sed -n 's/.*"listening":\([0-9]*\).*/\1/p' "$WK_DIR/credentials.log")
front=$AWS_ENDPOINT_URL
# from here on the edge processes find no key in the environment (the node helpers fall back to the test key)
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
export AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:$creds_port/creds
# tell the two clients apart (tokens are secrets: the logs redact them, so no common word)
RELAY_TOKEN=tok-r-$WK_RUN-x
WORKER_TOKEN=tok-w-$WK_RUN-x

state() { curl -fsS "http://127.0.0.1:$creds_port/_state"; }
# open_request TOKEN [MAX_AGE_MS]: "id openedAt" of an open (held) request of
# that client (opened at most MAX_AGE_MS ago), if any
open_request() {
	state | jq -r --arg t "$1" --argjson age "${2:-1e15}" \
		'[.[$t].open[] | select(now * 1000 - .openedAt <= $age)][0] // empty | "\(.id) \(.openedAt)"'
}
has_open_request() { [ -n "$(open_request "$1")" ]; }
has_fresh_request() { [ -n "$(open_request "$1" 1500)" ]; }
still_open() { [ "$(state | jq --arg t "$1" --argjson id "$2" '[.[$t].open[] | select(.id == $id)] | length')" = 1 ]; }

legacy -c "SELECT set_fault('slow', payment_id => '$P-long', seconds => 90)" >/dev/null
AWS_CONTAINER_AUTHORIZATION_TOKEN=$RELAY_TOKEN wk_start_relay
wk_start_worker w1 AWS_CONTAINER_AUTHORIZATION_TOKEN=$WORKER_TOKEN PAYFLOW_LEGACY_TIMEOUT=150
long=$(wk_submit "$P-long")
claimed() { [ "$(q -c "SELECT status FROM payflow.steps WHERE operation_id = '$long' AND step_name = 'PROCESS_PAYMENT'")" = RUNNING ]; }
pf_ok "the worker runs the 90 s payment" pf_wait_for 30 claimed

# --- the relay sends while its refresh hangs (checked first: the credentials
# the stand-in first gave expire 303 s after the start, and the worker's
# check can take minutes on a loaded machine)
# its request event was published (not "one event": the payment worker
# completes it within moments, and its PaymentCompleted follows; a check
# for exactly one event missed that window now and then: CI failed so)
published() {
	[ "$(q -c "SELECT count(*) FROM payflow.outbox_published p JOIN payflow.operations o ON o.id = p.operation_id
				WHERE o.payment_id = '$1' AND p.event_type = 'PaymentRequested'")" -ge 1 ]
}
relay_ok=no
ops=("$long")
# a request that opened under 1.5 s ago leaves the relay 3.5 s of the
# refresher's 5 s to send in; its refreshes come 3 in ~16 s, then 15 s apart
for try in 1 2 3 4 5; do
	pf_wait_for 60 has_fresh_request "$RELAY_TOKEN" || { wk_log "try $try: no new request of the relay for 60 s"; break; }
	read -r id opened <<<"$(open_request "$RELAY_TOKEN" 1500)"
	[ -n "$id" ] || { wk_log "try $try: the new request was gone at once"; continue; }
	ops+=("$(wk_submit "$P-r$try")")
	pf_wait_for 30 published "$P-r$try" || { wk_log "try $try: not sent within 30 s"; continue; }
	if still_open "$RELAY_TOKEN" "$id"; then
		relay_ok=yes
		wk_log "try $try: sent while request $id was open"
		break
	fi
	wk_log "try $try: request $id ended before the event was sent"
done
pf_eq "the relay sends and acks an event while a credentials refresh hangs" yes "$relay_ok"
[ "$relay_ok" = yes ] || grep -i 'credential' "$WK_DIR/relay.log" | tail -n 5 | sed 's/^/    /' || true

# --- the worker renews its lease and the message's visibility while its refresh hangs
# On a loaded machine the relay's part can outlast the first payment's 90 s
# call (CI once took four tries of 30 s): a second one of 90 s, started now,
# is in its call while the worker's part runs.
legacy -c "SELECT set_fault('slow', payment_id => '$P-long2', seconds => 90)" >/dev/null
long2=$(wk_submit "$P-long2")
ops+=("$long2")
claimed2() { [ "$(q -c "SELECT status FROM payflow.steps WHERE operation_id = '$long2' AND step_name = 'PROCESS_PAYMENT'")" = RUNNING ]; }
pf_ok "the worker runs a second 90 s payment" pf_wait_for 60 claimed2
lease() { q -c "SELECT lease_expires_at FROM payflow.steps WHERE operation_id = '$long2' AND step_name = 'PROCESS_PAYMENT'"; }
lease_moved() { [ "$(lease)" != "$1" ]; }
renewals_since() { curl -fsS "$front/_front/visibility?since=$1" | jq 'length'; }
renewed_since() { [ "$(renewals_since "$1")" -gt 0 ]; }
worker_ok=no
visibility_ok=no
for try in 1 2 3; do
	pf_wait_for 40 has_open_request "$WORKER_TOKEN" || break
	read -r id opened <<<"$(open_request "$WORKER_TOKEN")"
	before=$(lease)
	pf_wait_for 20 lease_moved "$before" || { wk_log "try $try: the lease did not move"; continue; }
	if still_open "$WORKER_TOKEN" "$id"; then
		worker_ok=yes
		# the same heartbeat's visibility change leaves in a batch of its own a
		# few ms after the lease's update (coalesced with the other messages'):
		# wait for it, then check the request is still open
		pf_wait_for 2 renewed_since "$opened" || true
		renewed=$(renewals_since "$opened")
		if [ "$renewed" -gt 0 ] && still_open "$WORKER_TOKEN" "$id"; then
			visibility_ok=yes
			wk_log "try $try: renewed while request $id was open ($renewed visibility change(s) since it opened)"
			break
		fi
		wk_log "try $try: the lease moved while request $id was open, the visibility change not yet ($renewed)"
		continue
	fi
	wk_log "try $try: request $id ended before the lease was renewed"
done
pf_eq "the worker renews its step's lease while a credentials refresh hangs" yes "$worker_ok"
pf_eq "... and the message's visibility (ChangeMessageVisibility reached the queue)" yes "$visibility_ok"

# --- the endpoint answers again: the new credentials are taken up, everything completes
curl -fsS -X POST "http://127.0.0.1:$creds_port/_answer" >/dev/null
refreshed() { [ "$(state | jq --arg t "$1" '.[$t].answered')" -ge 2 ]; }
pf_ok "the relay's refresh gets an answer" pf_wait_for 40 refreshed "$RELAY_TOKEN"
pf_ok "the worker's refresh gets an answer" pf_wait_for 40 refreshed "$WORKER_TOKEN"
ops+=("$(wk_submit "$P-after")")
for op in "${ops[@]}"; do
	wk_wait_status "$op" PAYMENT_COMPLETED 150 || wk_log "$op is $(wk_status "$op")"
done
pf_ok "no SQS call was refused for its credentials" \
	bash -c "! grep -q 'SignatureDoesNotMatch\|InvalidClientTokenId\|CredentialsPending' '$WK_DIR/relay.log' '$WK_DIR/w1.log'"
wk_invariants "${ops[@]}"
pf_done
