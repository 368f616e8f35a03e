#!/bin/bash
# payflow-api's admin API (/admin/…) over loopback with curl, every answer
# validated against the OpenAPI document (workers/console/openapi.json):
#
#   keys      no key / unknown / revoked: 401; a tenant key: 403 and nothing changes
#   list      filters, cursor paging, 400 naming the parameter; the plan of the
#             listing on 1,000,000 operations uses indexes (auto_explain), no Seq Scan
#   detail    transitions, attempts with worker and error, payload refs only
#   actions   replay (409 PF009 when not FAILED), cancel (409 PF001 after a worker
#             started), the key's name as actor; dead letters and webhook failures
#   document  valid OpenAPI 3.1 (a broken copy is refused), served at /openapi.json;
#             the console's files with a strict Content-Security-Policy; every
#             answer above validated against it (api_contract_check)
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init api-admin
q -c "SET client_min_messages = warning" -c "GRANT payflow_console TO pf_api" >/dev/null
test/browser/install.sh >/dev/null
workers/console/vendor.sh
TKEY=$(api_key "t-$API_RUN")
AKEY=$(q -c "SELECT payflow.create_admin_key('ops-$API_RUN')")
# admin METHOD PATH KEY [curl args]: http on a path of this instance
admin() { http "$1" "$API_URL$2" "$3" "${@:4}"; }
count() { q -c "SELECT count(*) FROM $1"; }

api_start admin 4850

# ---- operations to look at: one FAILED after a retry, with HTML in its payment id and error
P="<img src=x onerror=alert(1)>-$API_RUN"
pf_eq "a tenant payment: 202" 202 "$(post_payment "$TKEY" "$P" '{"amount": 5, "card": "secret-details-4111"}')"
OP=$(json_field operationId)
q -c "SELECT payflow.claim_step('$OP', 'PROCESS_PAYMENT', 'worker-a')" >/dev/null
q -c "SELECT payflow.fail_step('$OP', 'PROCESS_PAYMENT', 'worker-a', '{\"code\":\"timeout\",\"message\":\"no answer\"}', true)" >/dev/null
q -c "UPDATE payflow.operations SET step_next_attempt_at = now() WHERE id = '$OP'" >/dev/null
q -c "SELECT payflow.claim_step('$OP', 'PROCESS_PAYMENT', 'worker-b')" >/dev/null
q -c "SELECT payflow.fail_step('$OP', 'PROCESS_PAYMENT', 'worker-b', '{\"code\":\"declined\",\"message\":\"<script>alert(2)</script>\"}', false)" >/dev/null
pf_eq "it FAILED" FAILED "$(q -c "SELECT status FROM payflow.operations WHERE id = '$OP'")"
post_payment "$TKEY" "pending-$API_RUN" '{"amount": 6}' >/dev/null
PENDING_OP=$(json_field operationId)
post_payment "$TKEY" "started-$API_RUN" '{"amount": 7}' >/dev/null
STARTED_OP=$(json_field operationId)
q -c "SELECT payflow.claim_step('$STARTED_OP', 'PROCESS_PAYMENT', 'worker-c')" >/dev/null

# ---- keys: only admin keys, and nothing changes otherwise
before=$(q -c "SELECT count(*) FROM payflow.operation_history WHERE operation_id = '$OP'")
pf_eq "no key: 401" 401 "$(admin POST "/admin/operations/$OP/replay" "")"
pf_eq "401 is a JSON error" unauthorized "$(json_field error.code)"
pf_eq "an unknown admin key: 401" 401 "$(admin GET /admin/operations "pfa_$(printf '0%.0s' {1..64})")"
pf_eq "a tenant key: 403" 403 "$(admin POST "/admin/operations/$OP/replay" "$TKEY")"
pf_eq "403 is a JSON error" forbidden "$(json_field error.code)"
pf_eq "a tenant key cannot list either" 403 "$(admin GET /admin/operations "$TKEY")"
pf_eq "... nor replay dead letters" 403 "$(admin POST /admin/dead-letters/replay "$TKEY" -H 'Content-Type: application/json' --data-binary '{"ids":[1]}')"
pf_eq "nothing changed: still FAILED, no new history" "FAILED $before" \
	"$(q -c "SELECT status FROM payflow.operations WHERE id = '$OP'") $(q -c "SELECT count(*) FROM payflow.operation_history WHERE operation_id = '$OP'")"
pf_eq "an admin key cannot submit payments" 401 "$(post_payment "$AKEY" "admin-$API_RUN" '{"amount": 1}')"
pf_eq "whoami: the key's name" "ops-$API_RUN" "$(admin GET /admin/whoami "$AKEY" >/dev/null; json_field name)"

# ---- the list
pf_eq "list: 200" 200 "$(admin GET "/admin/operations?tenant=t-$API_RUN" "$AKEY")"
pf_eq "list: the tenant's three, newest first" "$STARTED_OP $PENDING_OP $OP" \
	"$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).items.map((o) => o.operationId).join(" "))' "$API_DIR/body")"
pf_eq "list: no details in it" 0 "$(grep -c 'secret-details' "$API_DIR/body" || true)"
pf_eq "status=FAILED" "$OP" "$(admin GET "/admin/operations?status=FAILED&tenant=t-$API_RUN" "$AKEY" >/dev/null; json_field items.0.operationId)"
enc=$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$P")
pf_eq "paymentId (percent-encoded HTML)" "$P" "$(admin GET "/admin/operations?paymentId=$enc" "$AKEY" >/dev/null; json_field items.0.paymentId)"
pf_eq "errorCode" "$OP" "$(admin GET "/admin/operations?errorCode=declined&tenant=t-$API_RUN" "$AKEY" >/dev/null; json_field items.0.operationId)"
pf_eq "a page of one names the next" "$PENDING_OP" \
	"$(admin GET "/admin/operations?tenant=t-$API_RUN&limit=1&after=$STARTED_OP" "$AKEY" >/dev/null; json_field items.0.operationId)"
pf_eq "... and the next page goes on" "$OP" \
	"$(admin GET "/admin/operations?tenant=t-$API_RUN&limit=1&after=$(json_field next)" "$AKEY" >/dev/null; json_field items.0.operationId)"
for bad in "status=LOST:status" "limit=0:limit" "limit=x:limit" "createdFrom=yesterday:createdFrom" "step=NOPE:step" \
	"after=pay_x:after" "colour=red:colour" "status=FAILED&status=PENDING:status" "tenant=%ZZ:tenant"; do
	pf_eq "400 names the parameter for ${bad%%:*}" "400 invalid_parameter ${bad##*:}" \
		"$(admin GET "/admin/operations?${bad%%:*}" "$AKEY") $(json_field error.code) $(json_field error.parameter)"
done
pf_eq "a bad filter with a tenant key is 403 first" 403 "$(admin GET "/admin/operations?status=LOST" "$TKEY")"
# (no operation of the document: the check wants 404, or 405 with the documented methods)
pf_eq "an unknown admin path: 404 JSON" "404 not_found" "$(http GET "$API_URL/admin/nope" "$AKEY") $(json_field error.code)"
pf_eq "GET on an action: 405 with Allow" "405 POST" "$(http GET "$API_URL/admin/operations/$OP/replay" "$AKEY") $(header Allow)"

# ---- one operation
pf_eq "detail: 200" 200 "$(admin GET "/admin/operations/$OP" "$AKEY")"
pf_eq "the attempts, with worker, outcome and error" "worker-a:RETRY_WAIT:timeout worker-b:FAILED:declined" \
	"$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).attempts.map((a) => `${a.worker}:${a.outcome}:${a.error.code}`).join(" "))' "$API_DIR/body")"
pf_eq "the error as written (escaped by the console, not here)" "<script>alert(2)</script>" "$(json_field error.message)"
pf_eq "refs only: no details" 0 "$(grep -c 'secret-details' "$API_DIR/body" || true)"
pf_eq "unknown id: 404 PF003" "404 PF003" "$(admin GET /admin/operations/pay_00000000000000000000000000 "$AKEY") $(json_field error.code)"
pf_eq "malformed id: 400 names id" "400 id" "$(admin GET "/admin/operations/pay_%3Cx%3E" "$AKEY") $(json_field error.parameter)"

# ---- actions
pf_eq "replay of a PENDING operation: 409 PF009" "409 PF009" "$(admin POST "/admin/operations/$PENDING_OP/replay" "$AKEY") $(json_field error.code)"
pf_eq "cancel after a worker started: 409 PF001" "409 PF001" "$(admin POST "/admin/operations/$STARTED_OP/cancel" "$AKEY") $(json_field error.code)"
pf_eq "... and it is still running" PAYMENT_PROCESSING "$(q -c "SELECT status FROM payflow.operations WHERE id = '$STARTED_OP'")"
pf_eq "cancel with a reason: 200" "200 CANCELLED" \
	"$(admin POST "/admin/operations/$PENDING_OP/cancel" "$AKEY" -H 'Content-Type: application/json' --data-binary '{"reason":"duplicate order"}') $(json_field status)"
pf_eq "a reason that is no string: 400" "400 reason" \
	"$(admin POST "/admin/operations/$PENDING_OP/cancel" "$AKEY" --data-binary '{"reason":7}') $(json_field error.parameter)"
pf_eq "the cancel's actor is the key's name" "admin:ops-$API_RUN|duplicate order" \
	"$(q -c "SELECT actor || '|' || reason FROM payflow.operation_history WHERE operation_id = '$PENDING_OP' ORDER BY id DESC LIMIT 1")"
pf_eq "dead letters: the failed one is open" true \
	"$(admin GET /admin/dead-letters "$AKEY" >/dev/null; node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).items.some((d) => d.operationId === process.argv[2] && d.replayable))' "$API_DIR/body" "$OP")"
pf_eq "... with its operation's trace id" "$(q -c "SELECT payflow._trace_id(traceparent) FROM payflow.operations WHERE id = '$OP'")" \
	"$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).items.find((d) => d.operationId === process.argv[2]).traceId)' "$API_DIR/body" "$OP")"
DL=$(q -c "SELECT id FROM payflow.dead_letters WHERE operation_id = '$OP' AND replayed_at IS NULL")
pf_eq "replay many: ids must be a list" "400 ids" \
	"$(admin POST /admin/dead-letters/replay "$AKEY" --data-binary '{"ids":"all"}') $(json_field error.parameter)"
pf_eq "replay many: malformed JSON is 400" 400 "$(admin POST /admin/dead-letters/replay "$AKEY" --data-binary '{"ids":')"
pf_eq "replay the dead letter and an unknown one" "200 true false" \
	"$(admin POST /admin/dead-letters/replay "$AKEY" -H 'Content-Type: application/json' --data-binary "{\"ids\":[$DL, 999999999]}") $(json_field results.0.replayed) $(json_field results.1.replayed)"
pf_eq "the operation runs again, replayed by the key" "PENDING admin:ops-$API_RUN" \
	"$(q -c "SELECT o.status || ' ' || h.actor FROM payflow.operations o JOIN payflow.operation_history h ON h.operation_id = o.id
			 WHERE o.id = '$OP' ORDER BY h.id DESC LIMIT 1")"
pf_eq "replaying it again: PF009 in the result" PF009 \
	"$(admin POST "/admin/dead-letters/$DL/replay" "$AKEY" >/dev/null; json_field results.0.code)"
pf_eq "webhook failures: 200" 200 "$(admin GET "/admin/webhook-failures?open=all" "$AKEY")"
pf_eq "webhook replay of an unknown one" "200 P0002" "$(admin POST /admin/webhook-failures/424242/replay "$AKEY") $(json_field results.0.code)"
pf_eq "stuck: 200" 200 "$(admin GET /admin/stuck "$AKEY")"
pf_eq "metrics: a day in 96 buckets" "200 96" \
	"$(admin GET "/admin/metrics?window=day" "$AKEY") $(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).buckets.length)' "$API_DIR/body")"
pf_eq "metrics: a bad window is 400" "400 window" "$(admin GET "/admin/metrics?window=week" "$AKEY") $(json_field error.parameter)"
pf_eq "every action is in admin_actions under the key's name" 0 \
	"$(q -c "SELECT count(*) FROM payflow.admin_actions WHERE actor <> 'admin:ops-$API_RUN' AND at > now() - interval '1 minute'")"

# ---- a revoked key is refused from the next request on
AKEY2=$(q -c "SELECT payflow.create_admin_key('revoked-$API_RUN')")
pf_eq "before revoking: 200" 200 "$(admin GET /admin/whoami "$AKEY2")"
q -c "SELECT payflow.revoke_api_key(id) FROM payflow.api_keys WHERE name = 'revoked-$API_RUN' AND kind = 'admin'" >/dev/null
pf_eq "revoked: 401" 401 "$(admin GET /admin/whoami "$AKEY2")"

# ---- the document and the console's files
pf_eq "GET /openapi.json: 200" 200 "$(admin GET /openapi.json "")"
pf_eq "... the document in the repository" "$(sha256sum <workers/console/openapi.json)" "$(sha256sum <"$API_DIR/body")"
pf_eq "... its version is the extension's (extension/payflow.control, the one place it is written)" \
	"$(sed -n "s/^default_version = '\(.*\)'/\1/p" extension/payflow.control)" \
	"$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).info.version)' workers/console/openapi.json)"
pf_eq "/console/: the page" 200 "$(http GET "$API_URL/console/" "")"
csp=$(header Content-Security-Policy)
pf_eq "strict CSP: scripts from this origin only" 1 "$(grep -c "script-src 'self';" <<<"$csp")"
pf_eq "... no inline script allowed" 0 "$(grep -c "unsafe-inline\|unsafe-eval" <<<"$csp")"
pf_eq "... and no inline script in the page" 0 "$(grep -ciE '<script>|<script [^>]*>[^<]' "$API_DIR/body")"
pf_eq "/console redirects to /console/" "308 /console/" "$(http GET "$API_URL/console" "") $(header Location)"
pf_eq "/console/operations/<id> is the page too" 200 "$(http GET "$API_URL/console/operations/$OP" "")"
pf_eq "uPlot is served from here" 200 "$(http GET "$API_URL/console/vendor/uPlot.iife.min.js" "")"
pf_eq "a path out of the folder: 404" 404 "$(http GET "$API_URL/console/../console.js" "" --path-as-is)"
pf_eq "a dot file: 404" 404 "$(http GET "$API_URL/console/.gitignore" "")"

# ---- the plan of the list with 1,000,000 retained operations: index scans only
q -c "INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key, status, current_step,
									   request_ref, created_at, updated_at, terminal_at)
	  SELECT 'pay_' || lpad(upper(to_hex(i)), 26, '0'), 'bulk-$API_RUN-' || (i % 50), 'bulk-' || i, 'bulk-$API_RUN-' || i,
			 CASE WHEN i % 1000 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, 'CREATE_INVOICE', '{}',
			 now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'
		FROM generate_series(1, 1000000) i" >/dev/null
q -c "ANALYZE payflow.operations" >/dev/null
plan() {
	pf_psql -Atq -c "LOAD 'auto_explain'" -c "SET auto_explain.log_min_duration = 0" -c "SET auto_explain.log_nested_statements = on" \
		-c "SET auto_explain.log_level = notice" -c "SET client_min_messages = notice" -c "SET auto_explain.log_format = text" \
		-c "SELECT payflow.admin_operations('$AKEY', '$1')->'scanned'" 2>&1 | grep -v "^[0-9]*$"
}
for filters in '{}' '{"status":"FAILED"}' "{\"tenant\":\"bulk-$API_RUN-7\"}" '{"paymentId":"bulk-77"}' \
	'{"createdFrom":"2000-01-01","createdTo":"2999-01-01","limit":"200"}' "{\"after\":\"pay_0000000000000000000000FFFF\"}"; do
	p=$(plan "$filters")
	# (by payment id: a BitmapOr of the idempotency key's index and
	# operations_payment_id_idx, admin.sql)
	pf_eq "list $filters: the plan reads operations through an index" 1 \
		"$(grep -cE 'Index (Only )?Scan( Backward)? using [a-z_]+ on operations|Bitmap Heap Scan on operations' <<<"$p" |
			sed 's/^[1-9][0-9]*$/1/')"
	pf_eq "list $filters: no Seq Scan on operations" 0 "$(grep -c 'Seq Scan on operations' <<<"$p" || true)"
done
pf_eq "list by payment id: a BitmapOr of the idempotency key's index and the payment ids'" 2 \
	"$(grep -cE 'Bitmap Index Scan on (operations_idempotency_key|operations_payment_id_idx)\b' <<<"$(plan '{"paymentId":"bulk-77"}')")"
echo "$(plan '{"status":"FAILED"}')" >"$API_DIR/plan-failed.txt"
t0=$(date +%s%N)
for _ in 1 2 3 4 5; do admin GET "/admin/operations?status=FAILED&limit=50" "$AKEY" >/dev/null; done
ms=$(( ($(date +%s%N) - t0) / 5000000 ))
echo "# a page of FAILED operations among 1,000,000: ${ms} ms (each page reads at most 5000)"
# (a figure, not a check: tests never fail on timing; what bounds the work
# is the window below, and the plans above)
pf_eq "... it reads one window and says where to go on" "5000 true" \
	"$(json_field scanned) $([ -n "$(json_field next)" ] && echo true || echo false)"
t0=$(date +%s%N)
admin GET "/admin/operations?paymentId=bulk-424242" "$AKEY" >/dev/null
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
pf_eq "a payment id among a million: found" "bulk-424242" "$(json_field items.0.paymentId)"
echo "# a payment id among 1,000,000: ${ms} ms"
q -c "DELETE FROM payflow.operations WHERE tenant LIKE 'bulk-$API_RUN-%'" >/dev/null

# ---- every response above against the document; and a broken document is refused
api_contract_check
node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1])); d.paths["/payments"].post.responses = "none"; require("fs").writeFileSync(process.argv[2], JSON.stringify(d))' \
	workers/console/openapi.json "$API_DIR/broken.json"
pf_ok "a broken document is refused by the validator" bash -c "! node test/browser/openapi-check.mjs '$API_DIR/broken.json' >/dev/null"
node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1])); d.components.schemas.OperationRow.required.push("nonexistent"); require("fs").writeFileSync(process.argv[2], JSON.stringify(d))' \
	workers/console/openapi.json "$API_DIR/stricter.json"
pf_ok "a response that does not match fails the check" bash -c "! node test/browser/openapi-check.mjs '$API_DIR/stricter.json' '$API_EXCHANGES' >/dev/null"

api_stop "$API_PID"
pf_done
