-- pgTAP: each role can do exactly what it needs and nothing more.
--
--   payflow_app     submit, submit_ref, status, history, cancel,
--                   authenticate, changes (+ _current_tenant for its
--                   row-level security policies); reads its tenant's
--                   operations and history; writes no table
--   payflow_worker  step, outbox, payload, consumer and webhook-delivery
--                   functions; reads and writes no table
--   payflow_admin   every public function; reads every table but the
--                   secrets; writes only the retry columns of the pipeline
--   a plain login role: nothing at all
--
-- The function lists are probed, not only looked up: under each role every
-- function of schema payflow is called with NULL arguments, and the ones
-- that do not fail with 42501 are the ones it can call.  The secrets
-- (api_keys.key_hash, webhooks.secret) are readable only by the functions.
-- Every SECURITY DEFINER function pins its search_path, and none of the
-- internal "_" functions is executable by PUBLIC.
-- Runs in one transaction that is rolled back.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;

\ir setting_probe.psql
SELECT plan(77);

CREATE ROLE rp_app LOGIN IN ROLE payflow_app;
CREATE ROLE rp_worker LOGIN IN ROLE payflow_worker;
CREATE ROLE rp_admin LOGIN IN ROLE payflow_admin;
CREATE ROLE rp_nobody LOGIN;
CREATE ROLE rp_relay LOGIN IN ROLE payflow_relay;
CREATE ROLE rp_step LOGIN IN ROLE payflow_step_worker;
CREATE ROLE rp_postprocess LOGIN IN ROLE payflow_postprocess_worker;
CREATE ROLE rp_webhook LOGIN IN ROLE payflow_webhook_worker;
CREATE ROLE rp_s3sweep LOGIN IN ROLE payflow_s3_sweeper;

-- The functions of schema payflow the current role can call: each is
-- called with NULL arguments; a refusal is 42501 (function or schema),
-- anything else (an answer, or a validation error) means it ran.  The
-- NULLs are volatile: the planner folds a STRICT function of constant
-- NULLs away before the privilege check would run.
CREATE FUNCTION public.rp_callable() RETURNS SETOF text
	LANGUAGE plpgsql AS $$
DECLARE
	p record;
BEGIN
	FOR p IN SELECT f.oid, f.proname, f.prokind,
					(SELECT coalesce(string_agg(format('(CASE WHEN random() < 2 THEN NULL END)::%s',
													  format_type(t, NULL)), ', ' ORDER BY i), '')
					   FROM unnest(f.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)) AS args
			   FROM pg_catalog.pg_proc f
			  WHERE f.pronamespace = 'payflow'::regnamespace
	LOOP
		BEGIN
			EXECUTE format(CASE p.prokind WHEN 'p' THEN 'CALL payflow.%I(%s)' ELSE 'SELECT payflow.%I(%s)' END,
						   p.proname, p.args);
			RETURN NEXT p.oid::regprocedure::text;
		EXCEPTION
			-- refused by payflow's own privileges; a refusal further in (a
			-- scheduling function calling pg_cron) means the call got in
			WHEN insufficient_privilege THEN
				IF SQLERRM !~ ('^permission denied for (function|procedure) ' || p.proname || '$')
				   AND SQLERRM <> 'permission denied for schema payflow' THEN
					RETURN NEXT p.oid::regprocedure::text;
				END IF;
			WHEN OTHERS THEN
				RETURN NEXT p.oid::regprocedure::text;
		END;
	END LOOP;
END
$$;

-- Table statements the current role gets past the privilege check with:
-- INSERT, UPDATE (of the first plain column), DELETE and TRUNCATE of every
-- payflow table, and SELECT of the secret columns.
CREATE FUNCTION public.rp_writable() RETURNS SETOF text
	LANGUAGE plpgsql AS $$
DECLARE
	t record;
	stmt text;
BEGIN
	FOR t IN SELECT c.relname,
					(SELECT a.attname FROM pg_catalog.pg_attribute a
					  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
						AND a.attidentity = '' AND a.attgenerated = ''
					  ORDER BY a.attnum LIMIT 1) AS col
			   FROM pg_catalog.pg_class c
			  WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind = 'r'
	LOOP
		FOREACH stmt IN ARRAY ARRAY[
			format('INSERT INTO payflow.%I DEFAULT VALUES', t.relname),
			format('UPDATE payflow.%I SET %I = %I', t.relname, t.col, t.col),
			format('DELETE FROM payflow.%I', t.relname),
			format('TRUNCATE payflow.%I', t.relname)]
		LOOP
			BEGIN
				EXECUTE stmt;
				RETURN NEXT stmt;
			EXCEPTION
				WHEN insufficient_privilege THEN
					NULL;
				WHEN OTHERS THEN
					RETURN NEXT stmt;
			END;
		END LOOP;
	END LOOP;
	FOREACH stmt IN ARRAY ARRAY['SELECT key_hash FROM payflow.api_keys',
								'SELECT secret_sealed FROM payflow.webhooks',
								'SELECT previous_secret_sealed FROM payflow.webhooks',
								'SELECT key FROM payflow._webhook_key',
								'SELECT key FROM payflow._content_key',
								'SELECT request_mac FROM payflow.operations',
								'SELECT content FROM payflow.payloads']
	LOOP
		BEGIN
			EXECUTE stmt;
			RETURN NEXT stmt;
		EXCEPTION
			WHEN insufficient_privilege THEN
				NULL;
		END;
	END LOOP;
END
$$;

-- Whether the current role reads every row of a view with every column
-- computed (each row as text, so that none is left out); false on a
-- refusal.
CREATE FUNCTION public.rp_view_reads(v regclass) RETURNS boolean
	LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('SELECT sum(length(x::text)) FROM %s x', v);
	RETURN true;
EXCEPTION WHEN insufficient_privilege THEN
	RETURN false;
END
$$;

-- what the design grants (DESIGN §1 and the 0.2.0 contract)
CREATE TEMP TABLE rp_expected (role text, fn text);
INSERT INTO rp_expected
SELECT 'app', unnest(ARRAY[
	'payflow.submit(text,jsonb,text,text,integer,text)',
	'payflow.submit_many(jsonb)',
	'payflow.submit_ref(text,text,text,text,bigint,text,text,integer,text)',
	'payflow.status(text)',
	'payflow.history(text)',
	'payflow.cancel(text,text)',
	'payflow.authenticate(text)',
	'payflow.changes(text[],bigint)',
	'payflow._current_tenant()'])
UNION ALL
SELECT 'worker', unnest(ARRAY[
	'payflow.status(text)',
	'payflow.claim_step(text,text,text,integer)',
	'payflow.heartbeat(text,text,text,integer,text)',
	'payflow.save_step_ref(text,text,text,text,text)',
	'payflow.complete_step(text,text,text,jsonb,jsonb,text)',
	'payflow.fail_step(text,text,text,jsonb,boolean,text)',
	'payflow.claim_steps(text,text,text[],integer)',
	'payflow.heartbeat_steps(text,text,text[],integer,text[])',
	'payflow.complete_steps(text,text,jsonb)',
	'payflow.fail_steps(text,text,jsonb)',
	'payflow.payload_get(jsonb)',
	'payflow.payload_put(text,text,bytea,text,text,text)',
	'payflow.payload_mac_key()',
	'payflow.mark_consumed(text,uuid)',
	'payflow.record_dead_letter(text,text,jsonb,text)',
	'payflow.default_postprocess(text,jsonb)',
	'payflow.invoke_postprocess(regprocedure,text,jsonb)',
	'payflow.run_hook_steps(text,text,regprocedure,text[],integer)',
	'payflow.outbox_claim(integer,text,integer)',
	'payflow.outbox_ack(uuid[],text[],text)',
	'payflow.outbox_nack(uuid,text,text)',
	'payflow.outbox_dead_letter(uuid,text,text)',
	'payflow.backoff_delay(integer,interval,interval,double precision)',
	'payflow.webhook_target(text,uuid,text)',
	'payflow.record_webhook_failure(uuid,text,text,integer,jsonb)',
	'payflow.s3_unretained_keys(text[])',
	'payflow.pipeline(integer)']);
-- (all but the webhook worker's own two: webhook_target returns the
-- signing secrets in clear; and the S3 sweeper's, which the admin needs not)
INSERT INTO rp_expected
SELECT DISTINCT 'admin', fn FROM rp_expected
 WHERE fn NOT IN ('payflow.webhook_target(text,uuid,text)', 'payflow.record_webhook_failure(uuid,text,text,integer,jsonb)',
				  'payflow.s3_unretained_keys(text[])')
UNION
SELECT 'admin', unnest(ARRAY[
	'payflow.replay(text)',
	'payflow.run_scheduler(integer)',
	'payflow.purge(integer)',
	'payflow.schedule_purge(text)',
	'payflow.create_api_key(text,text)',
	'payflow.revoke_api_key(bigint)',
	'payflow.create_admin_key(text)',
	'payflow.set_webhook(text,text)',
	'payflow.delete_webhook(text)',
	'payflow.replay_webhook(bigint)',
	'payflow.metrics()',
	'payflow.schedule_scheduler()',
	'payflow.run_scheduler_for(integer)',
	'payflow._cron_schedule(text,text,text)',
	'payflow.add_destination(text,text)',
	'payflow.add_step(text,text,text,text,text,text,text,text,text,text,integer,interval,interval,text)',
	'payflow.remove_step(text,text)',
	'payflow.grant_step(text,regrole)',
	'payflow.revoke_step(text,regrole)',
	'payflow.set_step_limit(text,integer,integer,numeric)',
	'payflow.clear_step_limit(text)',
	'payflow.set_step_breaker(text,numeric,integer,integer,integer,integer)',
	'payflow.clear_step_breaker(text)',
	'payflow.set_tenant_quota(text,integer)',
	'payflow.clear_tenant_quota(text)',
	'payflow.reconcile(jsonb,text[])',
	-- what the admin's views compute with (a view calls functions as its reader)
	'payflow._payload_key(text,text)',
	'payflow._result_ref(text,text,jsonb,bytea,integer)',
	'payflow._request_ref(text,jsonb,bytea,integer)',
	'payflow._step_input(text,integer,jsonb,bytea,integer,integer)',
	'payflow._outbox_event_route(payflow.outbox_events)',
	'payflow._message_group_id(text)']);
-- payflow_worker is the union of one role per kind of edge process
INSERT INTO rp_expected
SELECT 'relay', unnest(ARRAY['payflow.outbox_claim(integer,text,integer)', 'payflow.outbox_ack(uuid[],text[],text)',
							 'payflow.outbox_nack(uuid,text,text)', 'payflow.outbox_dead_letter(uuid,text,text)'])
UNION ALL
SELECT 'step', fn FROM rp_expected
 WHERE role = 'worker' AND fn !~ '(outbox_|webhook|postprocess|run_hook_steps|s3_)'
UNION ALL
SELECT 'webhook', unnest(ARRAY['payflow.webhook_target(text,uuid,text)',
							   'payflow.record_webhook_failure(uuid,text,text,integer,jsonb)',
							   'payflow.mark_consumed(text,uuid)', 'payflow.record_dead_letter(text,text,jsonb,text)',
							   'payflow.pipeline(integer)'])
UNION ALL
SELECT 's3sweep', 'payflow.s3_unretained_keys(text[])';
INSERT INTO rp_expected
SELECT 'postprocess', fn FROM rp_expected WHERE role = 'step'
UNION ALL
SELECT 'postprocess', unnest(ARRAY['payflow.default_postprocess(text,jsonb)',
								   'payflow.invoke_postprocess(regprocedure,text,jsonb)',
								   'payflow.run_hook_steps(text,text,regprocedure,text[],integer)']);
-- the C-free flavour's settings live in a table, changed by the admin
INSERT INTO rp_expected
SELECT 'admin', unnest(ARRAY['payflow.set_setting(text,text)', 'payflow.reset_setting(text)'])
 WHERE :'flavour' = 'sql';
GRANT SELECT ON rp_expected TO PUBLIC;

-- a tenant with a key and a webhook, one of its operations, and one of
-- tenant ''.  (authenticate() would bind the tenant for the rest of this
-- one transaction, so the tenant's operation is moved there by hand; the
-- app authenticates last in its section for the same reason.)
SELECT payflow.create_api_key('rp-tenant') AS key \gset
SELECT payflow.set_webhook('rp-tenant', 'https://hooks.test/rp') AS whsec \gset
SELECT payflow.submit('rp-pay-t', '{"amount": 1}') AS op_t \gset
UPDATE payflow.operations SET tenant = 'rp-tenant' WHERE id = :'op_t';
-- and one that failed, so that payflow published an OperationFailed event
-- for it (webhooks are delivered for published events only)
SELECT payflow.submit('rp-pay-f', '{"amount": 1}') AS op_f \gset
UPDATE payflow.operations SET tenant = 'rp-tenant' WHERE id = :'op_f';
SELECT payflow.claim_step(:'op_f', 'PROCESS_PAYMENT', 'rp-setup') IS NOT NULL
	   AND payflow.fail_step(:'op_f', 'PROCESS_PAYMENT', 'rp-setup', '{"code": "X"}', false) IS NOT NULL AS failed \gset
SELECT event_id AS ev_f, body AS body_f FROM payflow.outbox
 WHERE operation_id = :'op_f' AND destination = 'operation-events' \gset
SELECT payflow.submit('rp-pay-1', '{"amount": 1}') AS op \gset
SELECT payflow._request_ref(id, request_ref, request_mac, request_size)::text AS ref FROM payflow.operations WHERE id = :'op' \gset

---------------------------------------------------------------------------
-- Catalog hygiene
---------------------------------------------------------------------------
SELECT is(
	(SELECT array_agg(p.oid::regprocedure::text ORDER BY 1) FROM pg_proc p
	  WHERE p.pronamespace = 'payflow'::regnamespace AND p.prosecdef
		AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, payflow, pg_temp'], false)),
	NULL, 'every SECURITY DEFINER function of payflow pins search_path = pg_catalog, payflow, pg_temp');
SELECT is(
	(SELECT array_agg(p.oid::regprocedure::text ORDER BY 1) FROM pg_proc p
	  WHERE p.pronamespace = 'payflow'::regnamespace AND p.proname ~ '^_'
		AND has_function_privilege('public', p.oid, 'EXECUTE')),
	NULL, 'no internal "_" function is executable by PUBLIC');
SELECT is(
	(SELECT array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text) FROM pg_proc p
	  WHERE p.pronamespace = 'payflow'::regnamespace AND p.proname ~ '^_'
		AND (has_function_privilege('payflow_worker', p.oid, 'EXECUTE')
			 OR has_function_privilege('payflow_admin', p.oid, 'EXECUTE'))),
	ARRAY['payflow._cron_schedule(text,text,text)', 'payflow._current_tenant()',
		  'payflow._message_group_id(text)', 'payflow._outbox_event_route(payflow.outbox_events)',
		  'payflow._payload_key(text,text)', 'payflow._request_ref(text,jsonb,bytea,integer)',
		  'payflow._result_ref(text,text,jsonb,bytea,integer)',
		  'payflow._step_input(text,integer,jsonb,bytea,integer,integer)'],
	'of the internal functions only _current_tenant() (used by the RLS policies), _cron_schedule '
	'(used by the scheduling functions, which run as the caller) and what the admin''s views compute '
	'with (they call functions as their reader) are executable by a payflow role');
SELECT is(
	(SELECT array_agg(p.oid::regprocedure::text ORDER BY 1) FROM pg_proc p
	  WHERE p.pronamespace = 'payflow'::regnamespace AND p.prosecdef AND p.proname ~ '^_'),
	CASE :'flavour' WHEN 'sql' THEN ARRAY['payflow._current_tenant()'] END,
	'no internal function is SECURITY DEFINER (they run inside the public ones; the C-free '
	'_current_tenant, which the RLS policies call, reads the key that signs tenant bindings)');
SELECT is(
	(SELECT array_agg(r ORDER BY r) FROM unnest(ARRAY['payflow_app', 'payflow_worker', 'payflow_admin', 'public']) r
	  WHERE has_schema_privilege(r, 'payflow', 'CREATE')),
	NULL, 'no role may create objects in schema payflow (it is on every pinned search_path)');
SELECT is(
	(SELECT array_agg(rolname::text ORDER BY rolname) FROM pg_roles
	  WHERE rolname IN ('payflow_app', 'payflow_worker', 'payflow_admin', 'payflow_relay', 'payflow_step_worker',
						'payflow_postprocess_worker', 'payflow_webhook_worker', 'payflow_s3_sweeper',
						'payflow_payload_mac')
		AND (rolcanlogin OR rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls OR rolreplication)),
	NULL, 'the payflow roles cannot log in and hold no special attribute (no BYPASSRLS)');
SELECT ok(NOT pg_has_role('payflow_app', 'payflow_worker', 'MEMBER')
		  AND NOT pg_has_role('payflow_app', 'payflow_admin', 'MEMBER')
		  AND NOT pg_has_role('payflow_worker', 'payflow_app', 'MEMBER')
		  AND NOT pg_has_role('payflow_worker', 'payflow_admin', 'MEMBER'),
		  'app and worker cannot become each other or the admin');
SELECT is(
	(SELECT array_agg(format('%s.%s', c.relname, a.attname) ORDER BY 1)
	   FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
	   CROSS JOIN unnest(ARRAY['payflow_app', 'payflow_worker', 'payflow_admin', 'public']) r
	  WHERE c.oid IN ('payflow.api_keys'::regclass, 'payflow.webhooks'::regclass, 'payflow._webhook_key'::regclass,
					  'payflow._content_key'::regclass)
		AND a.attname IN ('key_hash', 'secret_sealed', 'previous_secret_sealed', 'key', 'inner_pad', 'outer_pad')
		AND has_column_privilege(r, c.oid, a.attnum, 'SELECT')),
	NULL, 'no role may read api_keys.key_hash, the sealed webhook secrets, their key or the checksum key');
SELECT is(
	(SELECT array_agg(DISTINCT c.relname::text ORDER BY c.relname::text) FROM pg_class c
	  WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind = 'r'
		AND has_any_column_privilege('payflow_app', c.oid, 'SELECT')),
	ARRAY['operations'],
	'the app reads only the operations table (row-level security keeps it to its tenant)');
SELECT is(
	(SELECT array_agg(c.relname::text ORDER BY c.relname::text) FROM pg_class c
	  WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind = 'v'
		AND has_any_column_privilege('payflow_app', c.oid, 'SELECT')),
	ARRAY['operation_history'], 'and the view of their history, which shows its tenant''s only');
SELECT is(
	(SELECT array_agg(format('%s:%s', c.relname, p) ORDER BY 1) FROM pg_class c
	  CROSS JOIN unnest(ARRAY['payflow_app', 'payflow_worker', 'payflow_admin', 'public']) r
	  CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p
	  WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind IN ('r', 'S')
		AND (has_table_privilege(r, c.oid, p)
			 OR (p IN ('INSERT', 'UPDATE') AND has_any_column_privilege(r, c.oid, p)
				 AND NOT (r = 'payflow_admin' AND c.relname = 'step_definitions' AND p = 'UPDATE')))),
	NULL, 'no role writes a payflow table or sequence (only the admin''s retry columns of step_definitions)');
SELECT is(
	(SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM pg_attribute a
	  WHERE a.attrelid = 'payflow.step_definitions'::regclass AND a.attnum > 0
		AND has_column_privilege('payflow_admin', a.attrelid, a.attnum, 'UPDATE')),
	ARRAY['max_attempts', 'retry_base_delay', 'retry_max_delay'],
	'the admin may tune exactly the retry columns of the pipeline');

---------------------------------------------------------------------------
-- The application
---------------------------------------------------------------------------
SET ROLE rp_app;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''app''',
			  'app can call exactly submit, submit_ref, status, history, cancel, authenticate, changes');
SELECT is_empty('SELECT * FROM public.rp_writable()',
				'app writes no payflow table and reads no secret, hash or payload column');
SELECT lives_ok($$SELECT payflow.submit('rp-pay-2', '{"amount": 2}')$$, 'app submits');
SELECT lives_ok($$SELECT payflow.submit_ref('rp-pay-3', 's3', 'k', 'sha256:' || repeat('0', 64), 1)$$, 'app submits a reference');
SELECT lives_ok(format($$SELECT payflow.status(%L)$$, :'op'), 'app reads status');
SELECT lives_ok(format($$SELECT * FROM payflow.history(%L)$$, :'op'), 'app reads history');
SELECT lives_ok(format($$SELECT * FROM payflow.changes(ARRAY[%L])$$, :'op'), 'app reads the change feed');
SELECT lives_ok(format($$SELECT payflow.cancel(%L, 'rp')$$, :'op'), 'app cancels');
SELECT throws_ok($$SELECT request_ref FROM payflow.operations$$, '42501', NULL, 'app cannot read payload references');
SELECT throws_ok($$SELECT request_mac FROM payflow.operations$$, '42501', NULL, 'app cannot read payload checksums');
SELECT throws_ok(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'x')$$, :'op'), '42501',
				 'permission denied for function claim_step', 'app cannot claim steps');
SELECT throws_ok(format($$SELECT payflow.webhook_target(%L)$$, :'op'), '42501',
				 'permission denied for function webhook_target', 'app cannot read webhook secrets');
SELECT throws_ok($$SELECT payflow.create_api_key('rp-other')$$, '42501', NULL, 'app cannot make API keys');
SELECT throws_ok($$SELECT payflow._set_tenant('rp-tenant')$$, '42501', NULL, 'app cannot bind a tenant without a key');
SELECT is(public.tap_try_setting('max_attempts', '1000'), '5', 'app cannot change payflow policy settings');
SELECT throws_ok(format($$SELECT payflow.status(%L)$$, :'op_t'), 'PF003', NULL,
				 'without the key, the tenant''s operation does not exist for the app');
SELECT is((SELECT count(*)::int FROM payflow.operations WHERE id = :'op_t'), 0,
		  'without the key, row-level security hides the tenant''s row');
-- from here on this transaction is the tenant's
SELECT is((SELECT t FROM payflow.authenticate(:'key') t), 'rp-tenant', 'app authenticates with an API key');
SELECT is(payflow.status(:'op_t') ->> 'paymentId', 'rp-pay-t', 'with the key, app reads its tenant''s operation');
SELECT is((SELECT count(*)::int FROM payflow.operations o WHERE o.id IN (:'op', :'op_t')), 1,
		  'with the key, row-level security shows the tenant''s row and hides tenant ''''');
SELECT is_empty($$SELECT v.relname FROM pg_class v
				   WHERE v.relnamespace = 'payflow'::regnamespace AND v.relkind = 'v'
					 AND has_table_privilege(v.oid, 'SELECT')
					 AND NOT public.rp_view_reads(v.oid::regclass)$$,
				'app reads every column of the views it may select from (operation_history)');
SELECT cmp_ok((SELECT count(*)::int FROM payflow.operation_history WHERE id IS NOT NULL), '>', 0,
			  '... its tenant''s history among them');
RESET ROLE;

---------------------------------------------------------------------------
-- The worker
---------------------------------------------------------------------------
SET ROLE rp_worker;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''worker''',
			  'worker can call exactly the step, outbox, payload, consumer and webhook-delivery functions');
SELECT is_empty('SELECT * FROM public.rp_writable()',
				'worker writes no payflow table and reads no secret, hash or payload column');
SELECT lives_ok(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'rp-w')$$, :'op_t'), 'worker claims');
SELECT lives_ok(format($$SELECT payflow.heartbeat(%L, 'PROCESS_PAYMENT', 'rp-w')$$, :'op_t'), 'worker heartbeats');
SELECT lives_ok(format($$SELECT payflow.payload_get(request_ref) FROM (SELECT %L::jsonb AS request_ref) r$$, :'ref'), 'worker reads payloads');
SELECT lives_ok(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'rp-w', '{"tx": 1}')$$, :'op_t'), 'worker completes');
SELECT lives_ok($$SELECT payflow.outbox_ack(ARRAY(SELECT event_id FROM payflow.outbox_claim(100, 'rp-relay')),
											  NULL, 'rp-relay')$$,
				'worker (relay) claims the outbox and acks what it sent');
SELECT lives_ok($$SELECT payflow.mark_consumed('rp', gen_random_uuid())$$, 'worker marks events consumed');
SELECT lives_ok($$SELECT payflow.record_dead_letter('q', 'garbage', '{"code": "bad_json"}')$$, 'worker dead-letters a message');
SELECT is((SELECT payflow.webhook_target(:'op_f', :'ev_f', :'body_f') ->> 'secret'), :'whsec',
		  'worker (webhook role) gets the signing secret through webhook_target, for a published event');
SELECT lives_ok(format($$SELECT payflow.record_webhook_failure(%L, %L, %L, 3, '{}')$$, :'ev_f', :'op_f', :'body_f'),
				'worker records a failed webhook delivery');
SELECT throws_ok($$SELECT payflow.submit('rp-pay-4', '{}')$$, '42501', 'permission denied for function submit', 'worker cannot submit');
SELECT throws_ok($$SELECT payflow.authenticate('x')$$, '42501', NULL, 'worker cannot authenticate as a tenant');
SELECT throws_ok($$SELECT payflow.replay_webhook(1)$$, '42501', NULL, 'worker cannot replay webhooks');
SELECT throws_ok($$SELECT * FROM payflow.webhook_failures$$, '42501', NULL, 'worker cannot read tables');
RESET ROLE;

-- each kind of edge process: exactly what its program calls
SET ROLE rp_relay;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''relay''',
			  'the relay role can call exactly the outbox functions');
RESET ROLE;
SET ROLE rp_step;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''step''',
			  'the step worker role (payment, invoice) can call exactly the step, payload and consumer functions');
RESET ROLE;
SET ROLE rp_postprocess;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''postprocess''',
			  'the post-processing role can call the step functions and the hooks, nothing more');
RESET ROLE;
SET ROLE rp_webhook;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''webhook''',
			  'the webhook role can call exactly webhook_target, record_webhook_failure and the consumer functions');
RESET ROLE;
SET ROLE rp_s3sweep;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''s3sweep''',
			  'the S3 sweeper role can call exactly s3_unretained_keys');
RESET ROLE;

---------------------------------------------------------------------------
-- The admin
---------------------------------------------------------------------------
SET ROLE rp_admin;
SELECT set_eq('SELECT * FROM public.rp_callable()', 'SELECT fn FROM rp_expected WHERE role = ''admin''',
			  'admin can call every public function (and _current_tenant), no other internal one');
SELECT set_eq('SELECT * FROM public.rp_writable()', ARRAY['SELECT request_mac FROM payflow.operations',
														 'SELECT content FROM payflow.payloads'],
			  'admin writes no payflow table, reads no secret (it may read payloads and their checksums)');
SELECT lives_ok($$SELECT payflow.metrics()$$, 'admin reads metrics');
SELECT lives_ok($$SELECT payflow.run_scheduler(10)$$, 'admin runs the scheduler');
SELECT lives_ok($$SELECT payflow.purge(10)$$, 'admin purges');
SELECT lives_ok($$SELECT payflow.revoke_api_key(id) FROM payflow.api_keys WHERE tenant = 'rp-tenant'$$, 'admin revokes API keys');
SELECT throws_ok(format($$SELECT payflow.authenticate(%L)$$, :'key'), '28000', 'invalid API key', 'a revoked key no longer authenticates');
SELECT lives_ok($$SELECT payflow.set_webhook('rp-tenant', 'https://hooks.test/rp2')$$, 'admin rotates a webhook');
SELECT lives_ok($$SELECT payflow.replay_webhook(id) FROM payflow.webhook_failures$$, 'admin replays webhook failures');
SELECT lives_ok($$SELECT payflow.delete_webhook('rp-tenant')$$, 'admin deletes a webhook');
SELECT lives_ok($$SELECT tenant, url FROM payflow.webhooks$$, 'admin reads webhook URLs');
SELECT throws_ok($$SELECT secret_sealed FROM payflow.webhooks$$, '42501', NULL, 'admin cannot read webhook secrets');
SELECT throws_ok($$SELECT key FROM payflow._webhook_key$$, '42501', NULL, '... nor the key they are sealed with');
SELECT throws_ok(format($$SELECT payflow.webhook_target(%L, %L, %L)$$, :'op_f', :'ev_f', :'body_f'), '42501',
				 'permission denied for function webhook_target',
				 '... nor the secrets through webhook_target: it does not hold the webhook worker''s role');
SELECT throws_ok($$SELECT * FROM payflow.api_keys$$, '42501', NULL, 'admin cannot read key hashes, not even by *');
SELECT is((SELECT count(*)::int FROM payflow.operations WHERE id IN (:'op', :'op_t')), 2,
		  'admin sees the operations of every tenant');
-- every column of every view the admin may read, computed (each row as
-- text): a view calls functions as its reader, and one the admin may not
-- call refused the whole read
SELECT is_empty($$SELECT v.relname FROM pg_class v
				   WHERE v.relnamespace = 'payflow'::regnamespace AND v.relkind = 'v'
					 AND has_table_privilege(v.oid, 'SELECT')
					 AND NOT public.rp_view_reads(v.oid::regclass)$$,
				'admin reads every column of every view it may select from');
SELECT cmp_ok((SELECT count(*)::int FROM payflow.steps WHERE input_ref IS NOT NULL AND result_ref IS NOT NULL), '>', 0,
			  '... the steps view''s references among them');
SELECT cmp_ok((SELECT count(*)::int FROM payflow.outbox_published WHERE event_type IS NOT NULL), '>', 0,
			  '... and the published events'' types');
RESET ROLE;

---------------------------------------------------------------------------
-- A login role with none of the payflow roles
---------------------------------------------------------------------------
SET ROLE rp_nobody;
SELECT is_empty('SELECT * FROM public.rp_callable()', 'a plain role can call no payflow function');
SELECT is_empty('SELECT * FROM public.rp_writable()', 'a plain role can touch no payflow table');
SELECT throws_ok(format($$SELECT payflow.status(%L)$$, :'op'), '42501', 'permission denied for schema payflow',
				 'a plain role does not even see the schema');
RESET ROLE;

-- search_path hijack of authenticate: a planted sha256() that returns the
-- hash of an existing key would let any string in; it is never used
CREATE SCHEMA rp_evil;
GRANT USAGE, CREATE ON SCHEMA rp_evil TO rp_app;
SELECT payflow.create_api_key('rp-hijacked') AS key2 \gset
SET ROLE rp_app;
CREATE FUNCTION rp_evil.sha256(bytea) RETURNS bytea LANGUAGE sql
	AS $f$ SELECT pg_catalog.sha256(pg_catalog.convert_to(current_setting('rp.key'), 'UTF8')) $f$;
CREATE FUNCTION rp_evil.convert_to(text, name) RETURNS bytea LANGUAGE sql AS $f$ SELECT '\x00'::bytea $f$;
SET LOCAL rp.key = :'key2';
SET search_path = rp_evil, pg_catalog, pg_temp, public;
SELECT throws_ok($$SELECT payflow.authenticate('not-a-key')$$, '28000', 'invalid API key',
				 'authenticate uses pg_catalog.sha256 whatever the caller''s search_path');
RESET search_path;
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
