-- The admin API of the console (extension/sql/admin.sql): admin keys, the
-- operations list and its filters, one operation's timeline, actions with
-- the key's name as actor, dead letters, webhook failures, stuck steps,
-- metrics over time, and bad input.
SET payflow.retry_jitter = 0;
SET payflow.retry_base_delay = 0;

-- admin keys: pfa_ and 64 hex digits, once; only a hash is kept
SELECT payflow.create_admin_key('ops-alice') AS akey \gset
SELECT :'akey' ~ '^pfa_[0-9a-f]{64}$' AS key_format;
SELECT kind, tenant, name, revoked_at IS NULL AS live FROM payflow.api_keys WHERE name = 'ops-alice';
SELECT count(*) AS secret_stored FROM payflow.api_keys
 WHERE key_hash = sha256(convert_to(:'akey', 'UTF8')) OR encode(key_hash, 'hex') LIKE '%' || substr(:'akey', 5, 16) || '%';
SELECT payflow.admin_whoami(:'akey') - 'keyId' AS whoami;
-- an admin key binds no tenant: it cannot submit payments
SELECT * FROM pf_try(format('SELECT payflow.authenticate(%L)', :'akey'));
-- a tenant key is known but refused; no key, an unknown key: 28000
SELECT payflow.create_api_key('t-console') AS tkey \gset
SELECT * FROM pf_try(format('SELECT payflow.admin_whoami(%L)', :'tkey'));
SELECT * FROM pf_try($$SELECT payflow.admin_whoami(NULL)$$);
SELECT * FROM pf_try($$SELECT payflow.admin_whoami('pfa_0000')$$);
SELECT * FROM pf_try($$SELECT payflow.create_admin_key('')$$);
SELECT * FROM pf_try($$SELECT payflow.create_admin_key(E'a\nb')$$);

-- operations of one tenant, one FAILED with HTML in its payment id and error
BEGIN;
SELECT payflow.authenticate(:'tkey') IS NOT NULL AS bound;
SELECT payflow.submit('<b>pay-1</b>', '{"amount": 1}') AS op1 \gset
SELECT payflow.submit('pay-2', '{"amount": 2}') AS op2 \gset
SELECT payflow.submit('pay-3', '{"amount": 3}') AS op3 \gset
COMMIT;
-- (other files leave operations behind: the lists below keep to this tenant)
SELECT c ->> 'action' AS claim FROM payflow.claim_step(:'op1', 'PROCESS_PAYMENT', 'w-1') c;
SELECT f ->> 'action' AS first FROM payflow.fail_step(:'op1', 'PROCESS_PAYMENT', 'w-1',
	'{"code": "timeout", "message": "the DBMS did not answer"}', true) f;
UPDATE payflow.operations SET step_next_attempt_at = now() WHERE id = :'op1';
SELECT c ->> 'action' AS claim FROM payflow.claim_step(:'op1', 'PROCESS_PAYMENT', 'w-2') c;
SELECT f ->> 'action' AS second FROM payflow.fail_step(:'op1', 'PROCESS_PAYMENT', 'w-2',
	'{"code": "declined", "message": "<script>alert(1)</script> card declined"}', false) f;

-- the list: newest first, each filter, no details or result
SELECT jsonb_array_length(l -> 'items') AS n, l -> 'next' AS next,
	   (l -> 'items' -> 0 ->> 'operationId') = :'op3' AS newest_first
  FROM payflow.admin_operations(:'akey', '{"tenant": "t-console"}') l;
SELECT jsonb_path_query_array(l, '$.items[*].paymentId') AS failed
  FROM payflow.admin_operations(:'akey', '{"status": "FAILED", "tenant": "t-console"}') l;
SELECT jsonb_path_query_array(l, '$.items[*].paymentId') AS of_tenant
  FROM payflow.admin_operations(:'akey', '{"tenant": "t-console"}') l;
SELECT jsonb_path_query_array(l, '$.items[*].paymentId') AS by_payment
  FROM payflow.admin_operations(:'akey', '{"paymentId": "pay-2", "tenant": "t-console"}') l;
SELECT jsonb_path_query_array(l, '$.items[*].paymentId') AS by_error
  FROM payflow.admin_operations(:'akey', '{"errorCode": "declined", "tenant": "t-console"}') l;
SELECT jsonb_path_query_array(l, '$.items[*].paymentId') AS by_step_status
  FROM payflow.admin_operations(:'akey', '{"step": "PROCESS_PAYMENT", "status": "PENDING", "tenant": "t-console"}') l;
SELECT jsonb_array_length(l -> 'items') AS in_range
  FROM payflow.admin_operations(:'akey', jsonb_build_object('tenant', 't-console', 'createdFrom', to_char(now() - interval '1 minute', 'YYYY-MM-DD"T"HH24:MI:SSOF'),
														   'createdTo', to_char(now() + interval '1 minute', 'YYYY-MM-DD"T"HH24:MI:SSOF'))) l;
SELECT jsonb_array_length(l -> 'items') AS before_range
  FROM payflow.admin_operations(:'akey', '{"createdTo": "2001-01-01", "tenant": "t-console"}') l;
SELECT jsonb_array_length(l -> 'items') AS after_range
  FROM payflow.admin_operations(:'akey', '{"createdFrom": "2999-01-01T00:00:00Z", "tenant": "t-console"}') l;
SELECT (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(l -> 'items' -> 0) k) AS fields
  FROM payflow.admin_operations(:'akey', '{"limit": "1", "tenant": "t-console"}') l;
-- cursor paging: two pages of one, then the last, then nothing
SELECT l ->> 'next' = :'op3' AS next_is_last_item FROM payflow.admin_operations(:'akey', '{"limit": "1", "tenant": "t-console"}') l;
SELECT jsonb_path_query_array(l, '$.items[*].paymentId') AS page2, l ->> 'next' = :'op2' AS more
  FROM payflow.admin_operations(:'akey', jsonb_build_object('tenant', 't-console', 'limit', '1', 'after', :'op3')) l;
SELECT jsonb_path_query_array(l, '$.items[*].paymentId') AS page3, l -> 'next' AS next
  FROM payflow.admin_operations(:'akey', jsonb_build_object('tenant', 't-console', 'limit', '5', 'after', :'op2')) l;
-- bad filters name the parameter
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"status": "LOST"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"step": "X"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"limit": "0"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"limit": "abc"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"createdFrom": "tomorrow"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"createdFrom": "2025-02-30"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"createdFrom": "2025-02-02", "createdTo": "2025-02-01"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"after": "x"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"colour": "red"}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '{"status": 1}')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operations(%L, '[]')$$, :'akey'));

-- one operation: transitions, attempts with worker and error, refs only
SELECT d ->> 'status' AS status, d ->> 'paymentId' AS payment_id, d -> 'actions' AS actions,
	   d ? 'result' AS has_result, d -> 'request' ? 'content' AS request_content
  FROM payflow.admin_operation(:'akey', :'op1') d;
SELECT t ->> 'from' AS from_status, t ->> 'to' AS to_status, t ->> 'reason' AS reason, t ->> 'actor' AS actor
  FROM payflow.admin_operation(:'akey', :'op1') d, jsonb_array_elements(d -> 'transitions') t;
SELECT a ->> 'step' AS step, a ->> 'attempt' AS attempt, a ->> 'worker' AS worker, a ->> 'outcome' AS outcome,
	   a -> 'error' ->> 'code' AS code, a ->> 'startedAt' IS NOT NULL AS started
  FROM payflow.admin_operation(:'akey', :'op1') d, jsonb_array_elements(d -> 'attempts') a;
SELECT p ->> 'key' LIKE 'payments/pay_%/request.json' AS ref_key, p ? 'content' AS content
  FROM payflow.admin_operation(:'akey', :'op1') d, jsonb_array_elements(d -> 'payloads') p;
SELECT e ->> 'eventType' AS event, e ->> 'messageId' IS NULL AS unpublished
  FROM payflow.admin_operation(:'akey', :'op1') d, jsonb_array_elements(d -> 'events') e ORDER BY 1;
SELECT * FROM pf_try(format($$SELECT payflow.admin_operation(%L, 'pay_00000000000000000000000000')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operation(%L, '<x>')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_operation(%L, %L)$$, :'tkey', :'op1'));

-- dead letters, then replay: the key's name is the actor
SELECT count(*) AS open, bool_and((i ->> 'replayable')::boolean) AS replayable, bool_or(i ? 'message_body') AS body_shown
  FROM payflow.admin_dead_letters(:'akey', '{"limit": "200"}') l, jsonb_array_elements(l -> 'items') i
 WHERE i ->> 'operationId' = :'op1';
SELECT (i ->> 'id')::bigint AS dl FROM payflow.admin_dead_letters(:'akey', '{"limit": "200"}') l, jsonb_array_elements(l -> 'items') i
 WHERE i ->> 'operationId' = :'op1' \gset
SELECT * FROM pf_try(format($$SELECT payflow.admin_replay(%L, %L)$$, :'akey', :'op2'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_replay(%L, %L)$$, :'tkey', :'op1'));
SELECT status FROM payflow.operations WHERE id = :'op1';
SELECT r -> 'results' -> 0 ->> 'replayed' AS replayed
  FROM payflow.admin_replay_dead_letters(:'akey', jsonb_build_array(:dl)) r;
SELECT status FROM payflow.operations WHERE id = :'op1';
SELECT to_status, actor FROM payflow.history(:'op1') ORDER BY at DESC, to_status LIMIT 1;
SELECT r -> 'results' -> 0 ->> 'code' AS again, r -> 'results' -> 1 ->> 'code' AS unknown
  FROM payflow.admin_replay_dead_letters(:'akey', jsonb_build_array(:dl, 999999)) r;
SELECT * FROM pf_try(format($$SELECT payflow.admin_replay_dead_letters(%L, '[]')$$, :'akey'));
SELECT * FROM pf_try(format($$SELECT payflow.admin_replay_dead_letters(%L, '["1"]')$$, :'akey'));
SELECT count(*) AS open_after FROM payflow.admin_dead_letters(:'akey', '{"limit": "200"}') l, jsonb_array_elements(l -> 'items') i
 WHERE i ->> 'operationId' = :'op1';
SELECT count(*) AS replayed_ones FROM payflow.admin_dead_letters(:'akey', '{"open": "false", "limit": "200"}') l, jsonb_array_elements(l -> 'items') i
 WHERE i ->> 'operationId' = :'op1';
SELECT * FROM pf_try(format($$SELECT payflow.admin_dead_letters(%L, '{"open": "maybe"}')$$, :'akey'));

-- cancel: PENDING only; once a worker started it, PF001 and nothing changes
SELECT c - 'operationId' AS cancelled FROM payflow.admin_cancel(:'akey', :'op2') c;
SELECT to_status, actor FROM payflow.history(:'op2') ORDER BY at DESC LIMIT 1;
SELECT c ->> 'action' AS claim FROM payflow.claim_step(:'op3', 'PROCESS_PAYMENT', 'w-3') c;
SELECT * FROM pf_try(format($$SELECT payflow.admin_cancel(%L, %L)$$, :'akey', :'op3'));
SELECT status FROM payflow.operations WHERE id = :'op3';
SELECT action, actor, target = :'op2' AS target FROM payflow.admin_actions WHERE actor = 'admin:ops-alice' ORDER BY id;

-- stuck steps and metrics over time
-- in one transaction: the scheduler running beside the test must not act on it first
BEGIN;
UPDATE payflow.operations SET step_lease_expires_at = now() - interval '1 minute' WHERE id = :'op3';
SELECT i ->> 'reason' AS reason, i ->> 'worker' AS worker
  FROM payflow.admin_stuck(:'akey') s, jsonb_array_elements(s -> 'items') i WHERE i ->> 'operationId' = :'op3';
COMMIT;
SELECT m ->> 'window' AS win, jsonb_array_length(m -> 'buckets') AS buckets, m ->> 'bucketSeconds' AS secs,
	   (SELECT sum((b ->> 'cancelled')::int) FROM jsonb_array_elements(m -> 'buckets') b) >= 1 AS cancelled,
	   m -> 'now' ? 'operations' AS has_now
  FROM payflow.admin_metrics(:'akey') m;
SELECT jsonb_array_length(m -> 'buckets') AS day_buckets FROM payflow.admin_metrics(:'akey', '{"window": "day"}') m;
SELECT * FROM pf_try(format($$SELECT payflow.admin_metrics(%L, '{"window": "week"}')$$, :'akey'));

-- webhook failures: none yet, then one, replayed once
SELECT l -> 'items' AS none FROM payflow.admin_webhook_failures(:'akey') l;
SELECT * FROM pf_try(format($$SELECT payflow.admin_replay_webhook_failures(%L, '[424242]')$$, :'akey'));
SELECT r -> 'results' -> 0 ->> 'code' AS unknown_failure FROM payflow.admin_replay_webhook_failures(:'akey', '[424242]') r;

-- an operation right the first time: its attempts are its steps rows, and
-- the hot path wrote no step_attempts row for it
SELECT payflow.submit('ok-1', '{"amount": 4}') AS op4 \gset
SELECT count(*) AS steps_done
  FROM unnest(ARRAY['PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE']) st,
	   LATERAL (SELECT payflow.claim_step(:'op4', st, 'w-ok') ->> 'action' AS a) c,
	   LATERAL (SELECT payflow.complete_step(:'op4', st, 'w-ok', '{"ok": true}') ->> 'action' AS a) d
 WHERE c.a = 'run' AND d.a = 'completed';
SELECT payflow.status(:'op4') ->> 'status' AS op4_status,
	   (SELECT count(*) FROM payflow.step_attempts WHERE operation_id = :'op4') AS attempt_rows;
SELECT a ->> 'step' AS step, a ->> 'attempt' AS attempt, a ->> 'worker' AS worker, a ->> 'outcome' AS outcome,
	   a -> 'error' AS error, a ->> 'startedAt' IS NOT NULL AND a ->> 'finishedAt' IS NOT NULL AS timed
  FROM payflow.admin_operation(:'akey', :'op4') d, jsonb_array_elements(d -> 'attempts') a;

-- by payment id, also an operation whose idempotency key is its own, not
-- its payment id (operations_payment_id_idx holds only those; the others
-- are found by the idempotency key's index)
BEGIN;
SELECT payflow.authenticate(:'tkey') IS NOT NULL AS bound;
SELECT payflow.submit('pay-2', '{"amount": 22}', idempotency_key => 'order-22') AS op2b \gset
SELECT jsonb_path_query_array(l, '$.items[*].operationId') = jsonb_build_array(:'op2b', :'op2') AS both_by_payment
  FROM payflow.admin_operations(:'akey', '{"paymentId": "pay-2", "tenant": "t-console"}') l;
ROLLBACK;

SELECT payflow.create_admin_key('ops-bob') AS akey2 \gset
-- revoked: refused from the next call on
SELECT payflow.revoke_api_key(id) AS revoked FROM payflow.api_keys WHERE name = 'ops-alice' AND kind = 'admin';
SELECT * FROM pf_try(format('SELECT payflow.admin_whoami(%L)', :'akey'));
-- the app role calls none of it
SELECT has_function_privilege('payflow_app', 'payflow.admin_operations(text, jsonb)', 'EXECUTE') AS app_may_list,
	   has_function_privilege('payflow_console', 'payflow.admin_operations(text, jsonb)', 'EXECUTE') AS console_may_list,
	   has_function_privilege('payflow_console', 'payflow.create_admin_key(text)', 'EXECUTE') AS console_may_mint;
SELECT count(payflow.admin_cancel(:'akey2', id, 'test over')) AS cancelled_at_end
  FROM payflow.operations WHERE tenant = 't-console' AND status = 'PENDING';
-- nothing left for the scheduler tests that follow: the running one ends
SELECT f ->> 'action' AS ended FROM payflow.fail_step(:'op3', 'PROCESS_PAYMENT', 'w-3', '{"code": "test_over"}', false) f;
