#!/bin/bash
# The operator console in Debian's chromium (headless, playwright-core)
# against payflow-api and PostgreSQL (test/browser/console.mjs): a tenant
# key is refused; sign in; the overview's charts refresh and it shows a
# step's limit and circuit breaker and a tenant's quota; the list opens a
# FAILED operation whose payment id and error hold HTML (shown as text);
# its timeline shows each attempt's error; Replay (confirmed) and a worker
# take it to COMPLETED; a cancel after a worker started shows what PF001
# means; a dead letter is replayed.  Screenshots in $PF_TEST_OUTPUT_DIR (or
# the test's folder, kept on failure); every admin response is validated
# against the OpenAPI document.
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init console-browser
[ -x /usr/bin/chromium ] || { echo "not ok - /usr/bin/chromium is missing (Debian's chromium, test/lib/deps.sh)"; exit 1; }
q -c "SET client_min_messages = warning" -c "GRANT payflow_console TO pf_api" >/dev/null
test/browser/install.sh >/dev/null
workers/console/vendor.sh
OUT=${PF_TEST_OUTPUT_DIR:-$API_DIR}/console-screenshots
mkdir -p "$OUT"
TENANT=t-$API_RUN
TKEY=$(api_key "$TENANT")
ANAME=console-$API_RUN
AKEY=$(q -c "SELECT payflow.create_admin_key('$ANAME')")
api_start console 4851
# a breaker and a limit for the overview to show (inert: it never sees a
# million claims, nor a thousand at once; the replayed operation's last step
# still takes the held path: step_dispatch.sql); the cluster is shared
# with the tests after this one, so they go when the browser is done
q -c "SELECT payflow.set_step_breaker('CREATE_INVOICE', 0.5, 1000000)" >/dev/null
q -c "SELECT payflow.set_step_limit('CREATE_INVOICE', 1000)" >/dev/null
q -c "SELECT payflow.set_tenant_quota('$TENANT', 1000)" >/dev/null

# fail_twice ID: two attempts, the second one final, as workers report them
fail_twice() {
	q -c "SELECT payflow.claim_step('$1', 'PROCESS_PAYMENT', 'worker-a')" >/dev/null
	q -c "SELECT payflow.fail_step('$1', 'PROCESS_PAYMENT', 'worker-a', '{\"code\":\"timeout\",\"message\":\"no answer\"}', true)" >/dev/null
	q -c "UPDATE payflow.operations SET step_next_attempt_at = now() WHERE id = '$1'" >/dev/null
	q -c "SELECT payflow.claim_step('$1', 'PROCESS_PAYMENT', 'worker-b')" >/dev/null
	q -c "SELECT payflow.fail_step('$1', 'PROCESS_PAYMENT', 'worker-b', '{\"code\":\"declined\",\"message\":\"<script>alert(2)</script><b>card declined</b>\"}', false)" >/dev/null
}
PID_HTML="<img src=x onerror=alert(1)>-$API_RUN"
post_payment "$TKEY" "$PID_HTML" '{"amount": 5, "note": "secret-details"}' >/dev/null
FAILED_OP=$(json_field operationId)
fail_twice "$FAILED_OP"
post_payment "$TKEY" "dl-$API_RUN" '{"amount": 6}' >/dev/null
DL_OP=$(json_field operationId)
fail_twice "$DL_OP"
DL=$(q -c "SELECT id FROM payflow.dead_letters WHERE operation_id = '$DL_OP' AND replayed_at IS NULL")
post_payment "$TKEY" "pending-$API_RUN" '{"amount": 7}' >/dev/null
PENDING_OP=$(json_field operationId)

node -e 'console.log(JSON.stringify({ openapi: "workers/console/openapi.json", tenant: process.argv[1], tenantKey: process.argv[2],
		adminKey: process.argv[3], adminName: process.argv[4], failedOp: process.argv[5], paymentId: process.argv[6],
		errorMessage: "<script>alert(2)</script><b>card declined</b>", pendingOp: process.argv[7], deadLetter: Number(process.argv[8]),
		deadLetterOp: process.argv[9] }))' "$TENANT" "$TKEY" "$AKEY" "$ANAME" "$FAILED_OP" "$PID_HTML" "$PENDING_OP" "$DL" "$DL_OP" \
	>"$API_DIR/context.json"
rc=0
node test/browser/console.mjs "$API_URL" "$OUT" <"$API_DIR/context.json" || rc=$?
q -c "SELECT payflow.clear_step_breaker('CREATE_INVOICE')" >/dev/null
q -c "SELECT payflow.clear_step_limit('CREATE_INVOICE')" >/dev/null
q -c "SELECT payflow.clear_tenant_quota('$TENANT')" >/dev/null
pf_eq "the console's browser run" 0 "$rc"
pf_eq "screenshots of each page" 8 "$(ls "$OUT"/{sign-in-refused,overview,operations,operation-failed,operation-completed,cancel-refused,dead-letters,webhook-failures}.png 2>/dev/null | wc -l)"
pf_eq "the replay was the admin key's" "admin:$ANAME" \
	"$(q -c "SELECT actor FROM payflow.operation_history WHERE operation_id = '$FAILED_OP' AND reason = 'replay'")"
[ "$rc" = 0 ] || echo "# screenshots: $OUT"
[ -n "${PF_TEST_OUTPUT_DIR:-}" ] || [ "$rc" != 0 ] || rm -rf "$OUT"
api_stop "$API_PID"
# the answers this script got itself (post_payment), like every API test's
api_contract_check
pf_done
