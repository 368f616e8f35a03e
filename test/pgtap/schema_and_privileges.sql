-- pgTAP: schema, SECURITY DEFINER hygiene, and least privilege per role.
-- Runs in one transaction that is rolled back.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pgtap;

\ir setting_probe.psql
SELECT plan(78);

-- schema
SELECT has_schema('payflow');
-- (the C-free flavour keeps in tables what C keeps in GUCs and memory)
SELECT tables_are('payflow', ARRAY['operations', 'history_events', 'history_events_default', 'step_results', 'step_results_default', 'purge_position', 'step_definitions',
	'outbox', 'outbox_events', 'outbox_events_default', 'outbox_batches', 'outbox_batches_default', 'outbox_position', 'payloads', 'payloads_default', 'consumed_events', 'dead_letters', 'api_keys',
	'webhooks', 'webhook_failures', 'operation_events', 'admin_actions', 'step_attempts', 'step_attempts_default', 'step_grants', 'step_limits', 'step_slots', 'step_breakers', 'step_breaker_events', 'tenant_quotas',
	'pipelines', 'destinations', 'scheduler_sweep', '_outbox_cursor', '_webhook_key', '_content_key']
	|| CASE :'flavour' WHEN 'sql' THEN ARRAY['settings', '_tenant_key', '_wakeup_marks'] ELSE '{}' END);
SELECT has_role(r) FROM unnest(ARRAY['payflow_app', 'payflow_worker', 'payflow_admin']) r;
SELECT col_is_pk('payflow', 'step_results_default', ARRAY['operation_id', 'step_name'], 'a step done is keyed by (operation_id, step_name)');
SELECT has_view('payflow', 'steps', 'steps is a view of the open steps (in operations) and the steps done');
SELECT has_view('payflow', 'operation_history', 'operation_history is a view: most changes are rendered from the rows');
SELECT col_is_unique('payflow', 'operations', ARRAY['idempotency_key', 'tenant'], 'one operation per idempotency key');
-- every public function says what it does (\df+; extension/sql/comments.sql)
SELECT is((SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1) FROM pg_proc p
			WHERE p.pronamespace = 'payflow'::regnamespace AND p.proname !~ '^_'
			  AND obj_description(p.oid, 'pg_proc') IS NULL), NULL,
		  'every public function has a COMMENT');
-- hot tables are built for churn
SELECT ok((SELECT reloptions @> ARRAY['fillfactor=30'] FROM pg_class WHERE oid = 'payflow.outbox'::regclass), 'outbox leaves room for HOT updates (a claim updates whole pages)');
SELECT ok((SELECT reloptions @> ARRAY['fillfactor=70'] FROM pg_class WHERE oid = 'payflow.operations'::regclass), 'operations leave room for the HOT updates of their open steps');
SELECT ok((SELECT bool_or(o LIKE 'autovacuum_vacuum_scale_factor=%') FROM pg_class, unnest(reloptions) o WHERE oid = 'payflow.outbox'::regclass), 'outbox has its own autovacuum settings');
-- storage v2: the outbox's work list writes no WAL; the log it is rebuilt
-- from after a crash, and the sequence of its seqs, are durable
SELECT ok((SELECT relpersistence = 'u' FROM pg_class WHERE oid = 'payflow.outbox'::regclass), 'the outbox work list is unlogged');
SELECT ok((SELECT bool_and(relpersistence = 'p') FROM pg_class
			WHERE oid IN ('payflow.outbox_events'::regclass, 'payflow.outbox_events_default'::regclass, 'payflow.outbox_batches'::regclass, 'payflow.outbox_batches_default'::regclass,
						  'payflow.outbox_position'::regclass, 'payflow.outbox_seq_seq'::regclass)),
		  'the outbox log, its batches, its position and its sequence are logged');
SELECT has_view('payflow', 'outbox_published', 'the published log is a view of the batches');
-- a heartbeat changes no indexed column, so it can be a HOT update
SELECT ok(NOT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
					   WHERE i.indrelid = 'payflow.operations'::regclass
						 AND a.attname = 'step_lease_expires_at'
						 AND (a.attnum = ANY (i.indkey) OR pg_get_expr(i.indpred, i.indrelid) LIKE '%step_lease_expires_at%')),
		  'step_lease_expires_at is in no index of payflow.operations');
-- nor does a claim (the status, the attempt, the lease, claimed_at, pending_since)
SELECT ok(NOT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
					   WHERE i.indrelid = 'payflow.operations'::regclass
						 AND a.attname IN ('status', 'updated_at', 'step_status', 'step_attempt', 'step_lease_owner',
										   'step_lease_expires_at', 'step_claimed_at', 'step_pending_since',
										   'step_external_ref')
						 AND (a.attnum = ANY (i.indkey)
							  OR pg_get_expr(i.indpred, i.indrelid) ~ ('\m' || a.attname || '\M'))),
		  'claims, heartbeats and saved refs change no indexed column of payflow.operations');
-- nor does a completion that opens the next step in the same row (only the
-- last one sets terminal_at, which is indexed)
SELECT ok(NOT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
					   WHERE i.indrelid = 'payflow.operations'::regclass
						 AND a.attname IN ('current_step', 'status', 'updated_at', 'step_created_at',
										   'step_external_ref', 'step_attempt', 'step_claimed_at', 'step_lease_owner',
										   'step_status', 'step_pending_since', 'step_last_error',
										   'step_lease_expires_at')
						 AND (a.attnum = ANY (i.indkey)
							  OR pg_get_expr(i.indpred, i.indrelid) ~ ('\m' || a.attname || '\M'))),
		  'completions that open the next step change no indexed column of payflow.operations');
SELECT ok(NOT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
					   WHERE i.indrelid = 'payflow.outbox'::regclass
						 AND a.attname IN ('claimed_by', 'claim_expires_at', 'attempts', 'available_at')
						 AND (a.attnum = ANY (i.indkey) OR pg_get_expr(i.indpred, i.indrelid) ~ a.attname)),
		  'claims and nacks change no indexed column of payflow.outbox');

-- every public function but two is SECURITY DEFINER with a pinned search_path
SELECT is(
	(SELECT array_agg(p.proname ORDER BY p.proname) FROM pg_proc p
	  WHERE p.pronamespace = 'payflow'::regnamespace AND p.proname !~ '^_'
		AND NOT (p.prosecdef AND p.proconfig @> ARRAY['search_path=pg_catalog, payflow, pg_temp'])),
	ARRAY['backoff_delay', 'invoke_postprocess', 'run_hook_steps', 'run_scheduler_for', 'schedule_purge', 'schedule_scheduler']::name[],
	'only backoff_delay (pure), invoke_postprocess and run_hook_steps (hooks run as the caller), schedule_purge and '
	'schedule_scheduler (jobs run as the scheduling role) and run_scheduler_for (commits) are not SECURITY DEFINER');
SELECT ok((SELECT bool_and(proconfig @> ARRAY['search_path=pg_catalog, payflow, pg_temp']) FROM pg_proc
			WHERE oid IN ('payflow.schedule_purge(text)'::regprocedure, 'payflow.schedule_scheduler()'::regprocedure,
						  'payflow.invoke_postprocess(regprocedure,text,jsonb)'::regprocedure,
						  'payflow.run_hook_steps(text,text,regprocedure,text[],integer)'::regprocedure)),
		  'schedule_purge, schedule_scheduler, invoke_postprocess and run_hook_steps pin search_path too');
SELECT is(
	(SELECT count(*)::int FROM pg_proc p WHERE p.pronamespace = 'payflow'::regnamespace
		AND has_function_privilege('public', p.oid, 'EXECUTE')),
	0, 'PUBLIC may execute no payflow function');
SELECT is(
	(SELECT count(*)::int FROM pg_class c WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind = 'r'
		AND (has_table_privilege('public', c.oid, 'SELECT') OR has_table_privilege('payflow_worker', c.oid, 'SELECT'))),
	0, 'PUBLIC and worker read no payflow table directly');
-- the app reads its tenant's operations and history, under row-level security
SELECT is(
	(SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c
	  WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind = 'r'
		AND has_any_column_privilege('payflow_app', c.oid, 'SELECT')),
	ARRAY['operations'],
	'the app reads only the operations table');
SELECT is(
	(SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c
	  WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind = 'v'
		AND has_any_column_privilege('payflow_app', c.oid, 'SELECT')),
	ARRAY['operation_history'],
	'and the view operation_history, of its tenant''s operations');
SELECT ok((SELECT bool_and(relrowsecurity) FROM pg_class
			WHERE oid IN ('payflow.operations'::regclass)),
		  'row-level security is on for the table the app reads');
SELECT ok(NOT has_column_privilege('payflow_app', 'payflow.operations', 'request_mac', 'SELECT'), 'the app does not read request checksums');
SELECT ok(NOT has_column_privilege('payflow_admin', 'payflow.api_keys', 'key_hash', 'SELECT'), 'not even the admin reads key hashes');
SELECT ok(NOT has_column_privilege('payflow_admin', 'payflow.webhooks', 'secret_sealed', 'SELECT'), 'nor webhook secrets');

-- login roles for the role tests
CREATE ROLE tap_app LOGIN IN ROLE payflow_app;
CREATE ROLE tap_worker LOGIN IN ROLE payflow_worker;
CREATE ROLE tap_admin LOGIN IN ROLE payflow_admin;
CREATE ROLE tap_nobody LOGIN;
SELECT payflow.submit('tap-pay-1', '{"amount": 1}') AS op \gset
SELECT payflow._request_ref(id, request_ref, request_mac, request_size)::text AS ref FROM payflow.operations WHERE id = :'op' \gset

-- the application: submit, status, history, cancel; nothing else
SET ROLE tap_app;
SELECT lives_ok($$SELECT payflow.submit('tap-pay-2', '{"amount": 2}')$$, 'app submits');
SELECT lives_ok($$SELECT payflow.submit_ref('tap-pay-3', 's3', 'k', 'sha256:' || repeat('0', 64), 1)$$, 'app submits a reference');
SELECT lives_ok(format($$SELECT payflow.status(%L)$$, :'op'), 'app reads status');
SELECT lives_ok(format($$SELECT * FROM payflow.history(%L)$$, :'op'), 'app reads history');
SELECT throws_ok(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'x')$$, :'op'), '42501', NULL, 'app cannot claim steps');
SELECT throws_ok(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'x', '{}')$$, :'op'), '42501', NULL, 'app cannot complete steps');
SELECT throws_ok(format($$SELECT payflow.payload_get(%L)$$, :'ref'), '42501', NULL, 'app cannot read payloads');
SELECT throws_ok($$SELECT * FROM payflow.outbox_claim(10, 'x')$$, '42501', NULL, 'app cannot claim the outbox');
SELECT throws_ok(format($$SELECT payflow.replay(%L)$$, :'op'), '42501', NULL, 'app cannot replay');
SELECT throws_ok($$SELECT payflow.purge()$$, '42501', NULL, 'app cannot purge');
SELECT throws_ok($$SELECT payflow.metrics()$$, '42501', NULL, 'app cannot read metrics');
SELECT throws_ok($$SELECT payflow.create_api_key('t')$$, '42501', NULL, 'app cannot create API keys');
SELECT throws_ok($$SELECT * FROM payflow.operations$$, '42501', NULL, 'app cannot read the operations table');
SELECT throws_ok($$SELECT * FROM payflow.payloads$$, '42501', NULL, 'app cannot read the payloads table');
SELECT throws_ok($$UPDATE payflow.operations SET status = 'COMPLETED'$$, '42501', NULL, 'app cannot write tables');
SELECT throws_ok($$SELECT payflow._status_recorded('pay_x', 2, 'PENDING', 'COMPLETED', '', '')$$, '42501', NULL, 'app cannot call internal helpers');
RESET ROLE;

-- the worker: steps, outbox, payloads; not submit, not operations
SET ROLE tap_worker;
SELECT lives_ok(format($$SELECT payflow.claim_step(%L, 'PROCESS_PAYMENT', 'tap-w')$$, :'op'), 'worker claims');
SELECT lives_ok(format($$SELECT payflow.heartbeat(%L, 'PROCESS_PAYMENT', 'tap-w')$$, :'op'), 'worker heartbeats');
SELECT lives_ok(format($$SELECT payflow.payload_get(%L)$$, :'ref'), 'worker reads payloads');
SELECT lives_ok(format($$SELECT payflow.complete_step(%L, 'PROCESS_PAYMENT', 'tap-w', '{"tx": 1}')$$, :'op'), 'worker completes');
SELECT lives_ok($$SELECT * FROM payflow.outbox_claim(1, 'tap-relay')$$, 'worker (relay) claims the outbox');
SELECT lives_ok($$SELECT payflow.outbox_ack(ARRAY[]::uuid[], NULL, 'tap-relay')$$, 'worker (relay) acks');
SELECT lives_ok($$SELECT payflow.mark_consumed('tap', gen_random_uuid())$$, 'worker marks events consumed');
SELECT lives_ok($$SELECT payflow.record_dead_letter('q', 'garbage', '{"code": "bad_json"}')$$, 'worker dead-letters a message');
SELECT throws_ok($$SELECT payflow.submit('tap-pay-4', '{}')$$, '42501', NULL, 'worker cannot submit');
SELECT throws_ok(format($$SELECT payflow.cancel(%L)$$, :'op'), '42501', NULL, 'worker cannot cancel');
SELECT throws_ok(format($$SELECT payflow.replay(%L)$$, :'op'), '42501', NULL, 'worker cannot replay');
SELECT throws_ok($$SELECT payflow.purge()$$, '42501', NULL, 'worker cannot purge');
SELECT throws_ok($$SELECT payflow.run_scheduler()$$, '42501', NULL, 'worker cannot run the scheduler');
SELECT throws_ok($$SELECT * FROM payflow.steps$$, '42501', NULL, 'worker cannot read tables');
RESET ROLE;

-- the admin: everything through functions, read-only tables, retry tuning
SET ROLE tap_admin;
SELECT lives_ok($$SELECT payflow.submit('tap-pay-5', '{}')$$, 'admin submits');
SELECT lives_ok($$SELECT payflow.metrics()$$, 'admin reads metrics');
SELECT lives_ok($$SELECT payflow.run_scheduler(10)$$, 'admin runs the scheduler');
SELECT lives_ok($$SELECT payflow.purge(10)$$, 'admin purges');
SELECT lives_ok($$SELECT payflow.create_api_key('tenant-x')$$, 'admin creates API keys');
SELECT lives_ok(format($$SELECT payflow.replay(%L)$$, :'op'), 'admin replays');
SELECT lives_ok($$SELECT count(*) FROM payflow.operations$$, 'admin reads operations');
SELECT lives_ok($$SELECT count(*) FROM payflow.dead_letters$$, 'admin reads dead letters');
SELECT lives_ok($$UPDATE payflow.step_definitions SET max_attempts = 7 WHERE step_name = 'PROCESS_PAYMENT'$$, 'admin tunes retries per step');
SELECT throws_ok($$UPDATE payflow.step_definitions SET destination = 'evil' WHERE step_name = 'PROCESS_PAYMENT'$$, '42501', NULL, 'admin cannot rewire the pipeline');
SELECT throws_ok($$SELECT key_hash FROM payflow.api_keys$$, '42501', NULL, 'admin cannot read key hashes');
SELECT throws_ok($$DELETE FROM payflow.operations$$, '42501', NULL, 'admin cannot delete rows behind payflow''s back');
SELECT is(public.tap_try_setting('max_attempts', '1000'), '5', 'policy settings are superuser-only');
RESET ROLE;

-- a role outside payflow gets nothing
SET ROLE tap_nobody;
SELECT throws_ok($$SELECT payflow.status('pay_00000000000000000000000000')$$, '42501', NULL, 'outsider cannot call payflow');
RESET ROLE;

-- search_path hijack: objects planted ahead of pg_catalog in the caller's
-- path are never used by SECURITY DEFINER functions
CREATE SCHEMA tap_evil;
GRANT USAGE, CREATE ON SCHEMA tap_evil TO tap_app;
SET ROLE tap_app;
CREATE FUNCTION tap_evil.sha256(bytea) RETURNS bytea LANGUAGE sql AS $$ SELECT '\x00'::bytea $$;
CREATE FUNCTION tap_evil.length(text) RETURNS integer LANGUAGE sql AS $$ SELECT 0 $$;
CREATE FUNCTION tap_evil.jsonb_typeof(jsonb) RETURNS text LANGUAGE sql AS $$ SELECT 'object'::text $$;
CREATE TABLE tap_evil.operations (id text);
-- pg_catalog is searched first unless listed: list it after the planted schema
SET search_path = tap_evil, pg_catalog, pg_temp, public;
CREATE TEMP TABLE payloads (key text);
SELECT payflow.submit('tap-hijack', '{"amount": 3}') AS hijack_op \gset
SELECT throws_ok($$SELECT payflow.submit(repeat('x', 300), '{}')$$, '22001', NULL, 'length checks use pg_catalog.length');
SELECT throws_ok($$SELECT payflow.submit('tap-arr', '[1]')$$, '22023', NULL, 'type checks use pg_catalog.jsonb_typeof');
RESET search_path;
RESET ROLE;
SELECT is((SELECT 'hmac-sha256:' || encode(request_mac, 'hex') FROM payflow.operations WHERE id = :'hijack_op'),
		  (SELECT 'hmac-sha256:' || encode(pg_catalog.sha256(k.outer_pad || pg_catalog.sha256(k.inner_pad
				  || convert_to('{"amount": 3}', 'UTF8'))), 'hex') FROM payflow._content_key k),
		  'checksums use pg_catalog.sha256 whatever the caller''s search_path');
SELECT is((SELECT count(*)::int FROM tap_evil.operations), 0, 'the planted table was never written');

SELECT * FROM finish();
ROLLBACK;
