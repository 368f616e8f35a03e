-- payflow: tracked asynchronous payment operations.
--
-- The shared source of the full install script of the current version, for
-- both flavours.  extension/sql/assemble.sh puts one flavour's helpers where
-- this file says "--@@ flavour helpers @@" (and its grants at "--@@ flavour
-- grants @@"): extension/sql/flavour-c/ (C functions, CREATE EXTENSION
-- payflow) or extension/sql/flavour-sql/ (their SQL twins: the plain SQL
-- install and the pg_tle extension for Amazon RDS and Aurora, make
-- dist-sql).  Tables and business rules exist here only.  Later versions
-- ship payflow--A--B.sql update scripts instead of editing what was
-- released.
--
-- This file holds the guards, the roles and the privileges; each concern
-- is a file of its own, put in place of its "--@@ include FILE @@" line:
-- tables.sql, common.sql (internal helpers), content_mac.sql (keyed
-- checksums of payload content), payloads.sql, outbox.sql,
-- operations.sql (the application's API), tenants.sql, steps.sql (what
-- workers call), hooks.sql, consumers.sql, webhooks.sql, scheduler.sql
-- (replay, run_scheduler), purge.sql, s3_purge.sql (what the S3 sweeper
-- deletes), metrics.sql, pipeline.sql (the
-- pipeline as data), admin_operation.sql, admin_dead_letters.sql, admin.sql and admin_list.sql (the console's
-- API); comments.sql says in one line what each public function does
-- (\df+).  The order matters where a SQL-language function reads another
-- (its body is checked at creation).
--
-- Tables hold the state, functions the rules.  Every public function is
-- SECURITY DEFINER with a pinned search_path: the roles payflow_app,
-- payflow_worker and payflow_admin get EXECUTE on what they need; the only
-- table privileges are reads: payflow_app its own tenant's operations and
-- their history (row-level security), payflow_admin everything but secrets.

\echo Use "CREATE EXTENSION payflow" to load this file. \quit

-- One flavour per database: the other one's objects would collide halfway
-- through this script, with a message that names neither.
DO $one_flavour$
BEGIN
	IF to_regprocedure('payflow._flavour()') IS NOT NULL THEN
		RAISE EXCEPTION 'payflow is already installed in this database (flavour "%")',
			payflow._flavour()
			USING ERRCODE = 'duplicate_object',
				  HINT = 'Use one flavour per database.  To replace the C-free flavour, '
						 'DROP SCHEMA payflow CASCADE first (this deletes its operations).';
	END IF;
END
$one_flavour$;

-- Roles are cluster-wide and survive DROP EXTENSION; create them only once.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_app') THEN
		CREATE ROLE payflow_app NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_worker') THEN
		CREATE ROLE payflow_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_admin') THEN
		CREATE ROLE payflow_admin NOLOGIN;
	END IF;
	-- payflow_worker is the union of these, one per kind of edge process,
	-- so that each login gets only what its program calls
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_relay') THEN
		CREATE ROLE payflow_relay NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_step_worker') THEN
		CREATE ROLE payflow_step_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_postprocess_worker') THEN
		CREATE ROLE payflow_postprocess_worker NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'payflow_webhook_worker') THEN
		CREATE ROLE payflow_webhook_worker NOLOGIN;
	END IF;
END
$roles$;

---------------------------------------------------------------------------
-- Flavour helpers: C functions (C flavour) or their SQL twins (C-free)
---------------------------------------------------------------------------

--@@ flavour helpers @@
--@@ flavour include seal.sql @@
--@@ flavour include status_changes.sql @@

--@@ include tables.sql @@
--@@ include outbox_log.sql @@
--@@ include payload_key.sql @@
--@@ include step_results.sql @@

---------------------------------------------------------------------------
-- The transition check, derived from the pipeline definition (C, or its
-- PL/pgSQL twin); the trigger that calls it is in pipeline.sql
---------------------------------------------------------------------------

--@@ flavour include transitions.sql @@

--@@ include common.sql @@
--@@ include content_mac.sql @@

--@@ include history.sql @@

--@@ include payloads.sql @@

--@@ include outbox.sql @@

--@@ flavour include wake_listeners.sql @@

--@@ include trace_context.sql @@
--@@ include operations.sql @@

--@@ include submit_many.sql @@

--@@ include outbox_dead_letter.sql @@
--@@ include reconcile.sql @@

--@@ include tenants.sql @@
--@@ include authenticate.sql @@

--@@ include step_grants.sql @@
--@@ include step_limits.sql @@
--@@ include step_breakers.sql @@
--@@ include step_dispatch.sql @@
--@@ include tenant_quotas.sql @@
--@@ include steps.sql @@

--@@ include hooks.sql @@

--@@ include consumers.sql @@

--@@ include webhooks.sql @@

--@@ include scheduler.sql @@
--@@ include partitions.sql @@
--@@ include purge.sql @@
--@@ include s3_purge.sql @@

--@@ include metrics.sql @@

---------------------------------------------------------------------------
-- Privileges
---------------------------------------------------------------------------

REVOKE ALL ON ALL TABLES IN SCHEMA payflow FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA payflow FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA payflow FROM PUBLIC;
GRANT USAGE ON SCHEMA payflow TO payflow_app, payflow_worker, payflow_admin,
	payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker;

GRANT EXECUTE ON FUNCTION
	payflow.submit(text, jsonb, text, text, integer, text),
	payflow.submit_many(jsonb),
	payflow.submit_ref(text, text, text, text, bigint, text, text, integer, text),
	payflow.status(text),
	payflow.history(text),
	payflow.cancel(text, text),
	payflow.authenticate(text),
	payflow.changes(text[], bigint),
	payflow._current_tenant()
	TO payflow_app;

-- Each kind of edge process gets only what it calls (its login is granted
-- one of these roles; deploy/sql/install.sql); payflow_worker holds them all.
GRANT EXECUTE ON FUNCTION
	payflow.outbox_claim(integer, text, integer),
	payflow.outbox_ack(uuid[], text[], text),
	payflow.outbox_nack(uuid, text, text)
	TO payflow_relay;
GRANT EXECUTE ON FUNCTION
	payflow.status(text),
	payflow.claim_step(text, text, text, integer),
	payflow.heartbeat(text, text, text, integer, text),
	payflow.save_step_ref(text, text, text, text, text),
	payflow.complete_step(text, text, text, jsonb, jsonb, text),
	payflow.fail_step(text, text, text, jsonb, boolean, text),
	payflow.claim_steps(text, text, text[], integer),
	payflow.heartbeat_steps(text, text, text[], integer, text[]),
	payflow.complete_steps(text, text, jsonb),
	payflow.fail_steps(text, text, jsonb),
	payflow.payload_get(jsonb),
	payflow.payload_put(text, text, bytea, text, text, text),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text),
	payflow.backoff_delay(integer, interval, interval, float8)
	TO payflow_step_worker;
-- the post-processing role runs steps and hooks
GRANT payflow_step_worker TO payflow_postprocess_worker;
GRANT EXECUTE ON FUNCTION
	payflow.default_postprocess(text, jsonb),
	payflow.invoke_postprocess(regprocedure, text, jsonb),
	payflow.run_hook_steps(text, text, regprocedure, text[], integer)
	TO payflow_postprocess_worker;
-- the webhook role delivers; it runs no step
GRANT EXECUTE ON FUNCTION
	payflow.webhook_target(text, uuid, text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb),
	payflow.mark_consumed(text, uuid),
	payflow.record_dead_letter(text, text, jsonb, text)
	TO payflow_webhook_worker;
GRANT payflow_relay, payflow_step_worker, payflow_postprocess_worker, payflow_webhook_worker TO payflow_worker;

-- The admin can do what the other two can, plus operations and reading
-- every table for investigation; only the retry columns of the pipeline
-- definition are writable.  Not what the webhook worker alone does: its
-- webhook_target returns the tenants' signing secrets in clear.
--@@ include admin_roles.sql @@
GRANT EXECUTE ON FUNCTION
	payflow.replay(text),
	payflow.run_scheduler(integer),
	payflow.purge(integer),
	payflow.schedule_purge(text),
	payflow.schedule_scheduler(),
	payflow.create_api_key(text, text),
	payflow.revoke_api_key(bigint),
	payflow.set_webhook(text, text),
	payflow.delete_webhook(text),
	payflow.replay_webhook(bigint),
	payflow.metrics()
	TO payflow_admin;
GRANT EXECUTE ON PROCEDURE payflow.run_scheduler_for(integer) TO payflow_admin;
-- schedule_purge and schedule_scheduler run as their caller (so do their
-- jobs), and so does the helper they share.
GRANT EXECUTE ON FUNCTION payflow._cron_schedule(text, text, text) TO payflow_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA payflow TO payflow_admin;
-- (The views call functions as their reader: the admin may call the ones
-- its views compute with, granted beside each view: step_results.sql,
-- outbox.sql.)
REVOKE SELECT ON payflow.api_keys FROM payflow_admin;
GRANT SELECT (id, tenant, name, created_at, revoked_at) ON payflow.api_keys TO payflow_admin;
REVOKE SELECT ON payflow.webhooks FROM payflow_admin;
GRANT SELECT (tenant, url, created_at, updated_at, previous_until) ON payflow.webhooks TO payflow_admin;
REVOKE SELECT ON payflow._webhook_key FROM payflow_admin;
REVOKE SELECT ON payflow._content_key FROM payflow_admin;
GRANT UPDATE (max_attempts, retry_base_delay, retry_max_delay) ON payflow.step_definitions TO payflow_admin;

-- Tenant isolation in the database, not only in the HTTP edge: payflow_app
-- reads its own tenant's operations and their history and nothing else
-- (the tenant is the one authenticate() bound to the transaction; '' for
-- plain SQL callers).  The functions above filter by tenant themselves:
-- they run as the owner, whom row-level security does not restrict.
GRANT SELECT (id, tenant, payment_id, idempotency_key, correlation_id, status, current_step,
			  result, error, created_at, updated_at, terminal_at)
	ON payflow.operations TO payflow_app;
-- operation_history is a view (history.sql) that shows the rows of the
-- operations the caller may see: payflow._visible, as in the functions.
GRANT SELECT ON payflow.operation_history TO payflow_app;
ALTER TABLE payflow.operations ENABLE ROW LEVEL SECURITY;
CREATE POLICY operations_of_tenant ON payflow.operations FOR SELECT TO payflow_app
	USING (tenant = (SELECT payflow._current_tenant()));
CREATE POLICY operations_for_admin ON payflow.operations FOR SELECT TO payflow_admin USING (true);

--@@ include pipeline.sql @@

--@@ include admin_operation.sql @@
--@@ include admin_dead_letters.sql @@
--@@ include admin_actions.sql @@
--@@ include admin.sql @@
--@@ include admin_list.sql @@
--@@ include step_attempts.sql @@
--@@ include admin_stuck.sql @@

--@@ include comments.sql @@

--@@ include backup.sql @@

--@@ flavour grants @@
