-- Tenants of the HTTP edge: authenticate() binds an API key's tenant to
-- the transaction; submit/status/history/cancel/changes and row-level
-- security then see that tenant only.
SELECT payflow.create_api_key('tenant-a', 'a') AS key_a \gset
SELECT payflow.create_api_key('tenant-b', 'b') AS key_b \gset
SELECT left(:'key_a', 4) AS prefix, length(:'key_a') AS length;

-- A bound tenant lasts until the end of the transaction, committed or not.
BEGIN;
SELECT payflow.authenticate(:'key_a') AS tenant;
SELECT payflow._current_tenant() AS inside;
SELECT payflow.submit('t-pay-1', '{"amount": 1}') AS op_a \gset
COMMIT;
SELECT payflow._current_tenant() = '' AS forgotten_after_commit;
BEGIN;
SELECT payflow.authenticate(:'key_b') AS tenant;
ROLLBACK;
SELECT payflow._current_tenant() = '' AS forgotten_after_rollback;
SELECT tenant FROM payflow.operations WHERE id = :'op_a';

-- The tenants' index holds only the operations that have one, the payment
-- ids' only those with an idempotency key of their own: 300 without either
-- (tenant '', the key their payment id) add no entry to them (they would
-- fill a page of each)
BEGIN;
SELECT pg_relation_size('payflow.operations_tenant_id_idx') AS tenant_idx_size,
	   pg_relation_size('payflow.operations_payment_id_idx') AS payment_idx_size \gset
SELECT count(payflow.submit('t-none-' || g, '{"amount": 1}')) AS submitted_without_tenant FROM generate_series(1, 300) g;
SELECT pg_relation_size('payflow.operations_tenant_id_idx') = :tenant_idx_size AS no_entry_without_tenant,
	   pg_relation_size('payflow.operations_payment_id_idx') = :payment_idx_size AS no_entry_without_own_key,
	   (SELECT count(*) FROM payflow.operations WHERE tenant = '' AND payment_id LIKE 't-none-%') AS listed_by_tenant;
ROLLBACK;

-- One statement: the FROM item runs before the select list.
SELECT payflow.status(:'op_a') ->> 'status' AS status_as_a FROM payflow.authenticate(:'key_a');
SELECT payflow.submit('t-pay-1', '{"amount": 1}') = :'op_a' AS same_op_as_a
  FROM payflow.authenticate(:'key_a');

-- Tenant B: the same payment id and key make another operation (keys are
-- per tenant), and A's operation looks unknown to B and to plain SQL.
SELECT payflow.submit('t-pay-1', '{"amount": 1}') AS op_b FROM payflow.authenticate(:'key_b') \gset
SELECT :'op_b' <> :'op_a' AS distinct_ops;
SELECT payflow.submit('t-pay-1', '{"amount": 1}') NOT IN (:'op_a', :'op_b') AS sql_tenant_has_its_own;
BEGIN;
SELECT payflow.authenticate(:'key_b') IS NOT NULL AS as_b;
SELECT * FROM pf_try(format($$SELECT payflow.status(%L)$$, :'op_a'));
SELECT * FROM pf_try(format($$SELECT payflow.history(%L)$$, :'op_a'));
SELECT * FROM pf_try(format($$SELECT payflow.cancel(%L)$$, :'op_a'));
SELECT count(*) AS changes_of_a_seen_by_b FROM payflow.changes(ARRAY[:'op_a', :'op_b']) c WHERE c.operation_id = :'op_a';
SELECT count(*) AS changes_of_b FROM payflow.changes(ARRAY[:'op_a', :'op_b']) c WHERE c.operation_id = :'op_b';
COMMIT;
-- Without a bound tenant: an application role sees only tenant '' ...
CREATE ROLE regress_plain_app IN ROLE payflow_app;
SET ROLE regress_plain_app;
SELECT * FROM pf_try(format($$SELECT payflow.status(%L)$$, :'op_a'));
SELECT * FROM pf_try(format($$SELECT payflow.history(%L)$$, :'op_a'));
RESET ROLE;
DROP ROLE regress_plain_app;
-- ... an administrator (here the superuser, or SET ROLE to a payflow_admin
-- member) every tenant's, so operators can look any operation up
SELECT payflow.status(:'op_a') ->> 'paymentId' AS admin_sees_it;
CREATE ROLE regress_admin IN ROLE payflow_admin;
SET ROLE regress_admin;
SELECT payflow.status(:'op_a') ->> 'paymentId' AS admin_role_sees_it;
SELECT count(*) AS admin_changes FROM payflow.changes(ARRAY[:'op_a', :'op_b']);
RESET ROLE;
DROP ROLE regress_admin;
-- ... unless it binds a tenant itself
SELECT * FROM pf_try(format($$SELECT payflow.status(%L) FROM payflow.authenticate(%L)$$, :'op_a', :'key_b'));
SELECT status FROM payflow.operations WHERE id = :'op_a';

-- changes(): the transitions after a history id, per operation, terminal flagged.
SELECT c ->> 'action' AS action FROM payflow.claim_step(:'op_a', 'PROCESS_PAYMENT', 'w') c;
SELECT payflow.complete_step(:'op_a', 'PROCESS_PAYMENT', 'w', '{"tx": 1}') ->> 'status' AS status;
-- A set-returning function goes in the select list to run after the FROM item.
SELECT (c).from_status, (c).to_status, (c).terminal
  FROM (SELECT payflow.changes(ARRAY[:'op_a']) AS c FROM payflow.authenticate(:'key_a')) x;
SELECT min(id) AS first_id FROM payflow.operation_history WHERE operation_id = :'op_a' \gset
SELECT (payflow.changes(ARRAY[:'op_a'], :first_id)).to_status FROM payflow.authenticate(:'key_a');
SELECT count(*) AS unknown_id_changes
  FROM (SELECT payflow.changes(ARRAY['pay_00000000000000000000000000']) FROM payflow.authenticate(:'key_a')) x;
SELECT * FROM pf_try($$SELECT payflow.changes(NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.changes(array_fill('x'::text, ARRAY[10001]))$$);

-- Cancel as the owner tenant works.
SELECT payflow.submit('t-pay-2', '{}') AS op_a2 FROM payflow.authenticate(:'key_a') \gset
SELECT payflow.cancel(:'op_a2', 'by a') AS cancelled FROM payflow.authenticate(:'key_a');

-- Bad keys: one error for unknown, empty, NULL, too long and revoked.
SELECT * FROM pf_try($$SELECT payflow.authenticate('pfk_0000')$$);
SELECT * FROM pf_try($$SELECT payflow.authenticate('')$$);
SELECT * FROM pf_try($$SELECT payflow.authenticate(NULL)$$);
SELECT * FROM pf_try(format($$SELECT payflow.authenticate(%L)$$, repeat('k', 201)));
SELECT id AS key_b_id FROM payflow.api_keys WHERE tenant = 'tenant-b' \gset
SELECT payflow.revoke_api_key(:key_b_id) AS revoked, payflow.revoke_api_key(:key_b_id) AS again;
SELECT * FROM pf_try(format($$SELECT payflow.authenticate(%L)$$, :'key_b'));
SELECT * FROM pf_try($$SELECT payflow.revoke_api_key(-1)$$);

-- Row-level security for payflow_app's direct reads.
SELECT payflow._flavour() AS flavour \gset
CREATE ROLE regress_tenant_app IN ROLE payflow_app;
SET ROLE regress_tenant_app;
SELECT count(*) AS sql_tenant_ops, bool_and(tenant = '') AS all_sql_tenant FROM payflow.operations WHERE payment_id LIKE 't-pay-%';
BEGIN;
SELECT payflow.authenticate(:'key_a') AS tenant;
SELECT payment_id, status FROM payflow.operations ORDER BY payment_id;
SELECT count(DISTINCT operation_id) AS ops_in_history FROM payflow.operation_history;
COMMIT;
SELECT * FROM pf_try($$SELECT request_mac FROM payflow.operations$$);
SELECT * FROM pf_try($$SELECT * FROM payflow.steps$$);
SELECT * FROM pf_try($$SELECT payflow._set_tenant('tenant-a')$$);
SELECT * FROM pf_try($$UPDATE payflow.operations SET tenant = 'tenant-a'$$);
-- The C flavour reserves the payflow.* prefix; the C-free one lets anyone
-- set a placeholder, which binds nothing.
SELECT sqlstate = CASE :'flavour' WHEN 'c' THEN '42602' ELSE '00000' END AS refused_or_ignored
  FROM pf_try($$SET payflow.tenant = 'tenant-a'$$);
SELECT count(*) AS still_sql_tenant_only FROM payflow.operations WHERE tenant <> '';
-- Forging the C-free flavour's signed binding: a binding read in one
-- transaction, replayed in the next; the same context with another
-- tenant; a bad signature.  None binds a tenant (the C flavour refuses
-- the SETs, so tenant-a stays bound where authenticate() bound it).
BEGIN;
SELECT payflow.authenticate(:'key_a') AS tenant;
SELECT coalesce(current_setting('payflow.tenant_binding', true), '') AS binding \gset
COMMIT;
BEGIN;
SELECT true AS tried FROM pf_try(format('SET LOCAL payflow.tenant_binding = %L', :'binding'));
SELECT payflow._current_tenant() = '' AS replayed_binding_binds_nothing,
	   count(*) FILTER (WHERE tenant <> '') AS foreign_rows_seen
  FROM payflow.operations;
COMMIT;
BEGIN;
SELECT payflow.authenticate(:'key_a') AS tenant;
SELECT true AS tried
  FROM pf_try(format('SET LOCAL payflow.tenant_binding = %L',
					 regexp_replace(coalesce(current_setting('payflow.tenant_binding', true), ''),
									'\.[0-9a-f]*\.', '.' || encode('tenant-b', 'hex') || '.')));
SELECT payflow._current_tenant() = CASE :'flavour' WHEN 'c' THEN 'tenant-a' ELSE '' END AS other_tenant_same_signature_binds_nothing;
SELECT true AS tried
  FROM pf_try(format('SET LOCAL payflow.tenant_binding = %L',
					 regexp_replace(coalesce(current_setting('payflow.tenant_binding', true), ''),
									'[0-9a-f]{64}$', repeat('0', 64))));
SELECT payflow._current_tenant() = CASE :'flavour' WHEN 'c' THEN 'tenant-a' ELSE '' END AS bad_signature_binds_nothing;
COMMIT;
-- A temporary function named like payflow's helpers, first on the
-- search_path, changes nothing: payflow's functions pin theirs.
CREATE FUNCTION pg_temp._current_tenant() RETURNS text LANGUAGE sql AS $$ SELECT 'tenant-a'::text $$;
CREATE FUNCTION pg_temp._hmac(data text, key bytea) RETURNS bytea LANGUAGE sql AS $$ SELECT ''::bytea $$;
SET search_path = pg_temp, payflow, public;
SELECT count(*) AS still_sql_tenant_only_with_temp_functions FROM payflow.operations WHERE tenant <> '';
RESET search_path;
DROP FUNCTION pg_temp._current_tenant(), pg_temp._hmac(text, bytea);
RESET ROLE;
DROP ROLE regress_tenant_app;

-- A rolled-back subtransaction restores the tenant it replaced.
SELECT payflow.create_api_key('tenant-c', 'c') AS key_c \gset
BEGIN;
SELECT payflow.authenticate(:'key_a') AS tenant;
SAVEPOINT s1;
SELECT payflow.authenticate(:'key_c') AS tenant;
ROLLBACK TO SAVEPOINT s1;
SELECT payflow._current_tenant() AS after_rollback_to_savepoint;
SAVEPOINT s2;
SELECT payflow.authenticate(:'key_c') AS tenant;
RELEASE SAVEPOINT s2;
SELECT payflow._current_tenant() AS after_release;
COMMIT;
-- ... and a PL/pgSQL exception block is a subtransaction too
BEGIN;
SELECT set_config('regress.key_c', :'key_c', true) IS NOT NULL AS set;
DO $$
BEGIN
	BEGIN
		PERFORM payflow.authenticate(current_setting('regress.key_c'));
		RAISE EXCEPTION 'boom' USING ERRCODE = 'division_by_zero';
	EXCEPTION WHEN division_by_zero THEN
		RAISE NOTICE 'tenant after the failed block: "%"', payflow._current_tenant();
	END;
END
$$;
COMMIT;
-- a tenant name of 200 multi-byte characters authenticates
SELECT payflow.create_api_key(repeat('é', 200), 'long') AS key_long \gset
SELECT length(payflow.authenticate(:'key_long')) AS tenant_length;

-- submit_ref with the pg store names only the caller's tenant's payloads:
-- another tenant's key answers exactly like an unknown one, whatever the
-- checksum (no existence oracle, no checksum guessing, no charging one
-- tenant's request for another's operation).  (An administrator who bound
-- no tenant sees every tenant's, as in status.)
SELECT payflow._request_ref(id, request_ref, request_mac, request_size) ->> 'key' AS key_a, payflow._request_ref(id, request_ref, request_mac, request_size) ->> 'checksum' AS sum_a, (payflow._request_ref(id, request_ref, request_mac, request_size) ->> 'size')::bigint AS size_a
  FROM payflow.operations WHERE id = :'op_a' \gset
SELECT payflow.create_api_key('tenant-b', 'b2') AS key_b2, payflow.create_api_key('tenant-a', 'a2') AS key_a2 \gset
CREATE ROLE regress_ref_app IN ROLE payflow_app;
SET ROLE regress_ref_app;
SELECT * FROM pf_try(format($$SELECT payflow.submit_ref('t-ref-1', 'pg', %L, %L, %s) FROM payflow.authenticate(%L)$$,
							:'key_a', :'sum_a', :'size_a', :'key_b2'));
SELECT * FROM pf_try(format($$SELECT payflow.submit_ref('t-ref-1', 'pg', %L, %L, %s) FROM payflow.authenticate(%L)$$,
							:'key_a', 'sha256:' || repeat('0', 64), :'size_a', :'key_b2'));
SELECT * FROM pf_try(format($$SELECT payflow.submit_ref('t-ref-1', 'pg', %L, %L, %s) FROM payflow.authenticate(%L)$$,
							replace(:'key_a', 'request', 'nothing'), :'sum_a', :'size_a', :'key_b2'));
SELECT * FROM pf_try(format($$SELECT payflow.submit_ref('t-ref-1', 'pg', %L, %L, %s)$$, :'key_a', :'sum_a', :'size_a'));
-- its own tenant may (a new request for the same stored details)
SELECT payflow.submit_ref('t-ref-2', 'pg', :'key_a', :'sum_a', :'size_a') ~ '^pay_' AS own_payload_ok
  FROM payflow.authenticate(:'key_a2');
RESET ROLE;
DROP ROLE regress_ref_app;

-- an admin key is no tenant key, in any form: its hash is over
-- "payflow-admin:<secret>", which authenticate() must not take either
SELECT payflow.create_admin_key('t-ops') AS admin_key \gset
SELECT * FROM pf_try(format($$SELECT payflow.authenticate(%L)$$, :'admin_key'));
SELECT * FROM pf_try(format($$SELECT payflow.authenticate(%L)$$, 'payflow-admin:' || :'admin_key'));
SELECT * FROM pf_try(format($$SELECT payflow.submit('t-admin-1', '{"amount": 1}') FROM payflow.authenticate(%L)$$,
							'payflow-admin:' || :'admin_key'));
SELECT count(*) AS submitted_with_an_admin_key FROM payflow.operations WHERE payment_id = 't-admin-1';
