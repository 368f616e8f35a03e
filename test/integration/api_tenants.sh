#!/bin/bash
# Tenant isolation, enforced by the database: tenant A cannot read,
# cancel, follow (changes / event stream) or collide idempotency keys with
# tenant B's operations, through the API or in SQL as payflow_app; a
# revoked key is refused (401) and ends its open streams; row-level
# security shows a payflow_app session only its tenant's rows; a tenant
# past its quota of open operations is answered 429 with Retry-After.
set -euo pipefail
source "$(dirname "$0")/api_common.bash"

api_init api-tenants
TA=ta-$API_RUN
TB=tb-$API_RUN
KA=$(api_key "$TA" a)
KB=$(api_key "$TB" b)
KA2=$(api_key "$TA" a-second)
api_start tenants 4805
P=$API_RUN

# as the API's login role, a session of payflow_app (not a superuser)
app() { PGUSER=pf_api pf_psql -Atq "$@"; }
app_as() {
	local key=$1
	shift
	app -c "BEGIN" -c "SELECT FROM payflow.authenticate('$key')" "$@" -c "COMMIT" 2>&1
}

# the same Idempotency-Key and payment id in both tenants: two operations
pf_eq "A submits" 202 "$(post_payment "$KA" "$P-pay" '{"amount": 1}' -H "Idempotency-Key: shared-$P")"
opA=$(json_field operationId)
pf_eq "B submits with the same key and payment id, other details: 202, not 409" 202 \
	"$(post_payment "$KB" "$P-pay" '{"amount": 2}' -H "Idempotency-Key: shared-$P")"
opB=$(json_field operationId)
pf_ok "... a different operation" test "$opA" != "$opB"
pf_eq "B's replay finds B's operation" "202 $opB" \
	"$(post_payment "$KB" "$P-pay" '{"amount": 2}' -H "Idempotency-Key: shared-$P") $(json_field operationId)"
pf_eq "a second key of A finds A's operation" "202 $opA" \
	"$(post_payment "$KA2" "$P-pay" '{"amount": 1}' -H "Idempotency-Key: shared-$P") $(json_field operationId)"

# reading
pf_eq "A reads A's operation" 200 "$(http GET "$API_URL/operations/$opA" "$KA")"
pf_eq "A cannot read B's operation: 404" "404 PF003" "$(http GET "$API_URL/operations/$opB" "$KA") $(json_field error.code)"
cp "$API_DIR/body" "$API_DIR/other-tenant.body"
http GET "$API_URL/operations/pay_01M8MXX8MVKW6A5CDXYRQQ8000" "$KA" >/dev/null
pf_ok "... exactly as for an id that does not exist" cmp -s "$API_DIR/body" "$API_DIR/other-tenant.body"
pf_eq "A cannot follow B's operation: 404" 404 "$(http GET "$API_URL/operations/$opB/events" "$KA" -m 5)"

# SQL as payflow_app (the API's own role), tenant bound by authenticate()
pf_ok "A cannot cancel B's operation (PF003)" sh -c "app_out=\$(PGUSER=pf_api $PF_PGBIN/psql -X -Atq -c \"SELECT payflow.cancel('$opB') FROM payflow.authenticate('$KA')\" 2>&1); echo \"\$app_out\" | grep -q 'unknown operation\|PF003\|does not exist'"
pf_eq "... and B's operation is still PENDING" PENDING "$(q -c "SELECT status FROM payflow.operations WHERE id = '$opB'")"
pf_eq "A cannot see B's status" 1 "$(app -c "SELECT payflow.status('$opB') FROM payflow.authenticate('$KA')" 2>&1 | grep -c 'does not exist')"
pf_eq "changes(): A sees nothing of B's operation" 0 \
	"$(app -c "SELECT count(*) FROM payflow.authenticate('$KA') a(t) CROSS JOIN LATERAL payflow.changes(CASE WHEN a.t IS NOT NULL THEN ARRAY['$opB'] END, 0) c")"
pf_eq "changes(): B sees its own" 1 \
	"$(app -c "SELECT count(*) FROM payflow.authenticate('$KB') a(t) CROSS JOIN LATERAL payflow.changes(CASE WHEN a.t IS NOT NULL THEN ARRAY['$opB'] END, 0) c")"

# row-level security on the tables themselves
pf_eq "RLS: A's session reads only A's operations" "1|0" \
	"$(app_as "$KA" -c "SELECT count(*) FILTER (WHERE tenant = '$TA'), count(*) FILTER (WHERE tenant <> '$TA') FROM payflow.operations" | sed -n 1p)"
pf_eq "RLS: A's session reads only A's history" "0" \
	"$(app_as "$KA" -c "SELECT count(*) FROM payflow.operation_history WHERE operation_id = '$opB'" | sed -n 1p)"
pf_eq "RLS: without authenticate() no tenant's rows" 0 \
	"$(app -c "SELECT count(*) FROM payflow.operations WHERE tenant IN ('$TA', '$TB')")"
pf_ok "payflow.tenant cannot be forged by a SQL caller" sh -c \
	"PGUSER=pf_api $PF_PGBIN/psql -X -Atq -c \"SET payflow.tenant = '$TB'\" 2>&1 | grep -q 'permission denied\|ERROR'"
pf_ok "the API key table is not readable by payflow_app" sh -c \
	"PGUSER=pf_api $PF_PGBIN/psql -X -Atq -c 'SELECT count(*) FROM payflow.api_keys' 2>&1 | grep -q 'permission denied'"

# guessing: ids of B's that A tries all look like unknown ones
for i in 1 2 3; do
	post_payment "$KB" "$P-guess-$i" '{"amount": 3}' >/dev/null
	pf_eq "A guessing B's id #$i: 404" 404 "$(http GET "$API_URL/operations/$(json_field operationId)" "$KA")"
done

# a revoked key: 401 at once, and its open stream ends with an error event
sse "$API_URL/operations/$opA/events" "$KA2" "$API_DIR/revoked.sse" -m 30 &
stream=$!
first_event() { grep -qs '^event: status' "$API_DIR/revoked.sse"; }
pf_ok "A's second key follows A's operation" pf_wait_for 15 first_event
q -c "SELECT payflow.revoke_api_key(id) FROM payflow.api_keys WHERE tenant = '$TA' AND name = 'a-second'" >/dev/null
pf_eq "revoked key: POST 401" 401 "$(post_payment "$KA2" "$P-revoked" '{"amount": 1}')"
pf_eq "revoked key: GET 401" 401 "$(http GET "$API_URL/operations/$opA" "$KA2")"
pf_eq "the other key of the tenant still works" 200 "$(http GET "$API_URL/operations/$opA" "$KA")"
stream_rc=0
wait "$stream" || stream_rc=$?
pf_eq "the revoked key's stream ended by itself" 0 "$stream_rc"
pf_ok "... with an unauthorized error event" grep -q '"code":"unauthorized"' "$API_DIR/revoked.sse"

# back-pressure (issue 27): B past its quota of open operations gets 429
# with the wait payflow computed; a retry of an accepted request still 202
q -c "SELECT payflow.set_tenant_quota('$TB', (SELECT count(*)::int FROM payflow.operations
												 WHERE tenant = '$TB' AND terminal_at IS NULL))" >/dev/null
pf_eq "B past its quota: POST 429" 429 "$(post_payment "$KB" "$P-over" '{"amount": 4}')"
pf_eq "... a JSON error, quota_exceeded" quota_exceeded "$(json_field error.code)"
retry_after=$(header Retry-After)
pf_ok "... with Retry-After, the seconds payflow named ($retry_after)" \
	bash -c "[[ '$retry_after' =~ ^[0-9]+\$ ]] && grep -q \"retry after $retry_after s\" '$API_DIR/body'"
pf_eq "... and nothing written" 0 "$(q -c "SELECT count(*) FROM payflow.operations WHERE payment_id = '$P-over'")"
pf_eq "an accepted request sent again: 202, its operation" "202 $opB" \
	"$(post_payment "$KB" "$P-pay" '{"amount": 2}' -H "Idempotency-Key: shared-$P") $(json_field operationId)"
pf_eq "A has no quota: 202" 202 "$(post_payment "$KA" "$P-a-free" '{"amount": 5}')"
q -c "SELECT payflow.clear_tenant_quota('$TB')" >/dev/null

api_stop "$API_PID"
pf_eq "SIGTERM: exit 0" 0 "$api_status"
api_contract_check
pf_done
