-- payflow 0.3.0 -> 0.4.0.
--
-- The lean, batched step engine: claim_steps, complete_steps and
-- fail_steps take up to 100 items, each with its own answer or error;
-- claim_step and complete_step take one statement in the common case
-- (_claim_fast, _complete_fast) and the full logic otherwise
-- (_claim_step_full, _complete_step_full); a claim returns a "pg" input
-- payload inline; outbox_claim's plan pinned to index probes; submit checks
-- its arguments in one expression and _create_operation wakes the relays
-- from its one statement; card masking leaves UUIDs alone; one outbox
-- writer (_outbox_write) and one payload key rule (_payload_key).
--
-- The pipeline as data: payflow.pipelines (versions, terminal events),
-- payflow.destinations (the queues) and step_definitions per version;
-- operations record the version they started with (those written before
-- this update: 1); the transition check is a trigger derived from the
-- definition; add_step, remove_step, add_destination and pipeline().
--
-- extension/sql/payflow.sql is the shared source of 0.4.0; a test checks
-- that installing 0.4.0 and updating from each older version give the same
-- schema.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.4.0'" to load this file. \quit

-- The pipeline as data (see payflow.sql for the tables' comments).
CREATE TABLE payflow.destinations (
	name text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,80}$'),
	description text,
	created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payflow.destinations (name, description) VALUES
	('payment-requests', 'PaymentRequested: payflow-worker --role payment'),
	('payment-completed', 'PaymentCompleted: payflow-worker --role postprocess'),
	('invoice-requests', 'InvoiceRequested: payflow-worker --role invoice'),
	('operation-events', 'the terminal events: webhooks, notifications');

CREATE TABLE payflow.pipelines (
	version integer PRIMARY KEY CHECK (version >= 1),
	completed_event text NOT NULL,
	failed_event text NOT NULL,
	note text,
	created_by text NOT NULL DEFAULT session_user,
	created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payflow.pipelines (version, completed_event, failed_event, note)
VALUES (1, 'OperationCompleted', 'OperationFailed', 'the default pipeline');

-- Claims, heartbeats and completions become HOT updates, and an update on
-- the same page logs a short diff (see tables.sql): steps is rebuilt with
-- its columns in the order a step's life changes them, its fillfactor 50,
-- and without the scheduler's partial indexes on status and finished_at:
-- run_scheduler sweeps the operations in flight from where it stopped
-- (operations_open_idx, made with operations below; scheduler.sql).
-- The rebuild rewrites every retained step once, under the update's lock.
-- The functions whose signatures name the row type go with the old table
-- and are created again below.
DROP FUNCTION payflow._lock_step(text, text);
DROP FUNCTION payflow._emit_step_request(payflow.operations, payflow.steps);
DROP FUNCTION payflow._fail_operation(payflow.operations, payflow.steps, jsonb, text);
DROP FUNCTION payflow._require_lease_holder(payflow.steps, text, text, text);
ALTER TABLE payflow.steps RENAME TO steps_0_3_0;
ALTER TABLE payflow.steps_0_3_0 DROP CONSTRAINT steps_pkey, DROP CONSTRAINT steps_status_check;
DROP INDEX payflow.steps_pending_idx, payflow.steps_running_idx, payflow.steps_retry_idx,
	payflow.steps_finished_idx;
CREATE TABLE payflow.steps (
	-- The columns are in the order the step's life changes them: PostgreSQL
	-- logs an update on the same page as the bytes between the longest
	-- common prefix and suffix of the old and new row, so what a claim
	-- changes sits together after what it never changes (the input ref),
	-- and what a completion adds comes last.
	operation_id text COLLATE "C" NOT NULL,
	step_name text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	input_ref jsonb,
	external_ref text,				-- e.g. the legacy job of submit-poll mode
	attempt integer NOT NULL DEFAULT 0,
	lease_owner text,
	claimed_at timestamptz,
	status text NOT NULL DEFAULT 'PENDING'
		CHECK (status IN ('PENDING', 'RUNNING', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
	lease_expires_at timestamptz,
	pending_since timestamptz,		-- set while PENDING: stuck detection
	next_attempt_at timestamptz,	-- set while RETRY_WAIT, and only then
	result jsonb,
	result_ref jsonb,
	completed_event_id uuid,		-- the event its completion wrote: a repeated complete_step's answer
	last_error jsonb,
	finished_at timestamptz,		-- set when SUCCEEDED, FAILED or CANCELLED, and only then
	PRIMARY KEY (operation_id, step_name)
) WITH (fillfactor = 50,
		autovacuum_vacuum_scale_factor = 0.02,
		autovacuum_analyze_scale_factor = 0.05,
		autovacuum_vacuum_cost_delay = 0);
INSERT INTO payflow.steps (operation_id, step_name, created_at, input_ref, external_ref, attempt, lease_owner, claimed_at, status, lease_expires_at, pending_since, next_attempt_at, result, result_ref, completed_event_id, last_error, finished_at)
SELECT operation_id, step_name, created_at, input_ref, external_ref, attempt, lease_owner, claimed_at, status, lease_expires_at, pending_since, next_attempt_at, result, result_ref, (completion ->> 'eventId')::uuid, last_error, finished_at
  FROM payflow.steps_0_3_0;
DROP TABLE payflow.steps_0_3_0;
CREATE INDEX steps_retry_idx ON payflow.steps (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
GRANT SELECT ON payflow.steps TO payflow_admin;

-- Locks a step's row (after its operation's); all NULL when it does not exist.
CREATE FUNCTION payflow._lock_step(p_operation_id text, p_step text) RETURNS payflow.steps
	LANGUAGE sql
	AS $$
	SELECT * FROM payflow.steps WHERE operation_id = p_operation_id AND step_name = p_step FOR UPDATE
$$;

-- Raises PF004 unless the worker is the one that ran the step.  A worker
-- whose lease expired may still report as long as nobody else claimed the
-- step since: its external call carried the step's idempotency key, so its
-- outcome is the outcome.
CREATE FUNCTION payflow._require_lease_holder(s payflow.steps, p_operation_id text,
											  p_step text, p_worker text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF s.operation_id IS NULL OR s.lease_owner IS NULL THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Step %s of operation %s has not been claimed.', p_step, p_operation_id);
	ELSIF s.lease_owner <> p_worker THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Worker %s claimed step %s of operation %s after this worker''s lease expired.',
								  s.lease_owner, p_step, p_operation_id);
	END IF;
END
$$;

CREATE TABLE payflow.scheduler_sweep (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	after_operation text COLLATE "C" NOT NULL DEFAULT '',
	updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payflow.scheduler_sweep DEFAULT VALUES;
GRANT SELECT ON payflow.scheduler_sweep TO payflow_admin;

-- The outbox writer, a batch of events in one statement (see outbox.sql).
-- A payload's content if it matches its reference's checksum (see steps.sql).
CREATE OR REPLACE FUNCTION payflow._verified_content(p_ref jsonb, p_content bytea) RETURNS bytea
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT CASE WHEN payflow._checksum(p_content) = p_ref ->> 'checksum' THEN p_content END $$;

CREATE OR REPLACE FUNCTION payflow._outbox_write_all(p_event_ids uuid[], p_operation_ids text[], p_group_keys text[],
										  p_event_types text[], p_destinations text[], p_bodies jsonb[])
	RETURNS integer
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_n integer;
BEGIN
	-- An xid before a seq: payflow._outbox_cursor relies on it (a
	-- transaction's first write would otherwise draw the seq and only then
	-- take its xid).  Every caller has written before, so this is a lookup.
	PERFORM pg_catalog.pg_current_xact_id();
	INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination, message_group_id, body)
	SELECT e.event_id, e.operation_id, e.event_type, e.destination, payflow._message_group_id(e.group_key), e.body
	  FROM unnest(p_event_ids, p_operation_ids, p_group_keys, p_event_types, p_destinations, p_bodies) WITH ORDINALITY
		   AS e(event_id, operation_id, group_key, event_type, destination, body, n)
	 ORDER BY e.n;
	GET DIAGNOSTICS v_n = ROW_COUNT;
	IF 'operation-events' = ANY (p_destinations) THEN
		INSERT INTO payflow.operation_events (event_id, operation_id, body_sha256)
		SELECT (e.body ->> 'eventId')::uuid, e.operation_id, sha256(convert_to(e.body::text, 'UTF8'))
		  FROM unnest(p_operation_ids, p_destinations, p_bodies) AS e(operation_id, destination, body)
		 WHERE e.destination = 'operation-events'
		ON CONFLICT (event_id) DO NOTHING;
	END IF;
	IF v_n > 0 THEN
		PERFORM payflow._outbox_written();
	END IF;
	RETURN v_n;
END
$$;

CREATE OR REPLACE FUNCTION payflow._pipeline_version() RETURNS integer
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	RETURN (SELECT max(p.version) FROM payflow.pipelines p);
END
$$;

-- The steps so far are version 1.
ALTER TABLE payflow.step_definitions
	ADD COLUMN pipeline_version integer NOT NULL DEFAULT 1 REFERENCES payflow.pipelines,
	ADD CHECK (step_name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	ADD CHECK (position >= 1),
	ADD FOREIGN KEY (destination) REFERENCES payflow.destinations,
	DROP CONSTRAINT step_definitions_pkey,
	DROP CONSTRAINT step_definitions_position_key,
	ADD PRIMARY KEY (pipeline_version, step_name),
	ADD UNIQUE (pipeline_version, position);
ALTER TABLE payflow.step_definitions ALTER COLUMN pipeline_version DROP DEFAULT;

-- operations is rebuilt with its columns in the order an operation's life
-- changes them (see tables.sql), like steps above; the operations written
-- before this update ran on version 1, new ones take the newest version.
-- Its policies, grants and row-level security are made again, and so is
-- history's policy, which reads it; the transition trigger comes with
-- pipeline.sql below.
DROP FUNCTION payflow._lock_operation(text);
DROP POLICY operations_of_tenant ON payflow.operations;
DROP POLICY operations_for_admin ON payflow.operations;
DROP POLICY history_of_tenant ON payflow.operation_history;
ALTER TABLE payflow.operations RENAME TO operations_0_3_0;
ALTER TABLE payflow.operations_0_3_0 DROP CONSTRAINT operations_pkey, DROP CONSTRAINT operations_idempotency_key;
DROP INDEX payflow.operations_terminal_idx, payflow.operations_payloads_idx;
CREATE TABLE payflow.operations (
	id text COLLATE "C" PRIMARY KEY,
	tenant text COLLATE "C" NOT NULL DEFAULT '',
	payment_id text COLLATE "C" NOT NULL,
	idempotency_key text COLLATE "C" NOT NULL,
	request_hash bytea NOT NULL,	-- sha256 of payment id + details (PF002)
	correlation_id text,
	request_ref jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	pipeline_version integer NOT NULL DEFAULT payflow._pipeline_version(),	-- started on it, finishes on it
	current_step text NOT NULL DEFAULT 'PROCESS_PAYMENT',
	status text NOT NULL DEFAULT 'PENDING',
	updated_at timestamptz NOT NULL DEFAULT now(),
	terminal_at timestamptz,
	result jsonb,
	error jsonb,
	payloads_purged_at timestamptz,
	CONSTRAINT operations_idempotency_key UNIQUE (tenant, idempotency_key)
) WITH (fillfactor = 80);
INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key, request_hash, correlation_id, request_ref, created_at, pipeline_version, current_step, status, updated_at, terminal_at, result, error, payloads_purged_at)
SELECT id, tenant, payment_id, idempotency_key, request_hash, correlation_id, request_ref, created_at, 1, current_step, status, updated_at, terminal_at, result, error, payloads_purged_at
  FROM payflow.operations_0_3_0;
DROP TABLE payflow.operations_0_3_0;
CREATE INDEX operations_terminal_idx ON payflow.operations (terminal_at)
	WHERE terminal_at IS NOT NULL;
CREATE INDEX operations_payloads_idx ON payflow.operations (terminal_at)
	WHERE terminal_at IS NOT NULL AND payloads_purged_at IS NULL;
CREATE INDEX operations_open_idx ON payflow.operations (id) WHERE terminal_at IS NULL;
GRANT SELECT ON payflow.operations TO payflow_admin;
GRANT SELECT (id, tenant, payment_id, idempotency_key, correlation_id, status, current_step,
			  result, error, created_at, updated_at, terminal_at)
	ON payflow.operations TO payflow_app;
ALTER TABLE payflow.operations ENABLE ROW LEVEL SECURITY;
CREATE POLICY operations_of_tenant ON payflow.operations FOR SELECT TO payflow_app
	USING (tenant = (SELECT payflow._current_tenant()));
CREATE POLICY history_of_tenant ON payflow.operation_history FOR SELECT TO payflow_app
	USING (EXISTS (SELECT FROM payflow.operations o WHERE o.id = operation_history.operation_id));
CREATE POLICY operations_for_admin ON payflow.operations FOR SELECT TO payflow_admin USING (true);

-- Locks an operation's row, else PF003.  Lock order everywhere: the
-- operation, then its step, so step functions never deadlock each other.
CREATE FUNCTION payflow._lock_operation(p_operation_id text) RETURNS payflow.operations
	LANGUAGE plpgsql
	AS $$
DECLARE
	o payflow.operations;
BEGIN
	SELECT * INTO o FROM payflow.operations WHERE id = p_operation_id FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(p_operation_id);
	END IF;
	RETURN o;
END
$$;


-- The transition check takes the version; replay gets its permission
-- from _allow_replay instead of a flag any caller of _set_status could pass.
DROP FUNCTION payflow._check_transition(text, text, boolean);
DROP FUNCTION payflow._set_status(text, text, text, text, text, boolean);

--@@ flavour include transitions.sql @@

-- (pipeline as data: functions that read the definition; from payflow.sql)

-- Writes a payload of the "pg" store for a step's result; returns its ref
-- (for complete_step's result_ref).  Only the worker holding the lease of
-- the running step may, and only under the step's result name: anyone else
-- could take the key first, and the step's completion would then fail
-- after the payment was made.
-- A hook step for a batch of operations in one transaction (see hooks.sql).
CREATE OR REPLACE FUNCTION payflow._message_group_id(payment_id text) RETURNS text
	LANGUAGE sql STABLE PARALLEL SAFE
	AS $$
	SELECT CASE WHEN length(payment_id) <= 128 AND payment_id ~ '^[!-~]+$' THEN payment_id
				ELSE 'sha256:' || encode(sha256(convert_to(payment_id, 'UTF8')), 'hex') END
$$;

CREATE OR REPLACE FUNCTION payflow._event_attributes(p_operation_id text, p_correlation_id text, p_event_type text)
	RETURNS jsonb
	LANGUAGE sql STABLE
	AS $$
	SELECT jsonb_strip_nulls(jsonb_build_object('eventType', p_event_type,
												'operationId', p_operation_id,
												'correlationId', p_correlation_id))
$$;

CREATE OR REPLACE FUNCTION payflow.run_hook_steps(step text, worker_id text, hook regprocedure, operation_ids text[],
									   lease_seconds integer DEFAULT 300)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, completion jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	c record;
	v_answers jsonb[] := '{}';		-- by item
	v_errors jsonb[] := '{}';
	v_done jsonb := '{}';			-- operation id -> its completion
	v_items jsonb := '[]';			-- complete_steps' items
	v_input jsonb;
	v_name text;
	v_run_items integer[] := '{}';	-- the items claimed to run with a "pg" input
	v_run_ids text[] := '{}';
	v_run_inputs bytea[] := '{}';
	v_results jsonb[];				-- the batch's answers, NULL where the input is no object
	v_batched boolean := false;
BEGIN
	IF hook IS NULL THEN
		RAISE EXCEPTION 'hook must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	FOR r IN SELECT * FROM payflow.claim_steps(step, worker_id, operation_ids, lease_seconds) LOOP
		v_answers[r.item] := r.answer;
		v_errors[r.item] := r.error;
		CONTINUE WHEN r.error IS NOT NULL OR r.answer ->> 'action' IS DISTINCT FROM 'run' OR r.input IS NULL;
		v_run_items := v_run_items || r.item;
		v_run_ids := v_run_ids || r.operation_id;
		v_run_inputs := v_run_inputs || r.input;
	END LOOP;

	-- the hook's name if it has invoke_postprocess's signature (which, else,
	-- raises for each item below); this runs as the caller, so no helper
	-- function (none of payflow's internal ones is the caller's to execute)
	SELECT format('%I.%I', n.nspname, p.proname) INTO v_name
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE p.oid = hook AND p.proargtypes = '25 3802'::oidvector AND p.prorettype = 3802 AND p.prokind = 'f';
	IF v_name IS NOT NULL AND cardinality(v_run_ids) > 0 THEN
		BEGIN
			-- an input that is no JSON object is left to the usual path, which says why
			EXECUTE format('SELECT array_agg(CASE WHEN jsonb_typeof(x.j) = ''object'' THEN %s(x.id, x.j) END ORDER BY x.n)
							  FROM (SELECT u.id, convert_from(u.input, ''UTF8'')::jsonb AS j, u.n
									  FROM unnest($1, $2) WITH ORDINALITY AS u(id, input, n)) x', v_name)
				INTO v_results USING v_run_ids, v_run_inputs;
			FOR v_n IN 1 .. cardinality(v_run_ids) LOOP
				IF v_results[v_n] IS NOT NULL AND jsonb_typeof(v_results[v_n]) = 'object' THEN
					v_items := v_items || jsonb_build_array(jsonb_build_object('operationId', v_run_ids[v_n],
																			   'result', v_results[v_n]));
				ELSIF jsonb_typeof(convert_from(v_run_inputs[v_n], 'UTF8')::jsonb) = 'object' THEN
					RAISE EXCEPTION 'a hook answered no JSON object';	-- undone, then item by item
				END IF;
			END LOOP;
			v_batched := true;
		EXCEPTION WHEN OTHERS THEN
			v_items := '[]';
		END;
	END IF;
	IF NOT v_batched THEN
		FOR v_n IN 1 .. cardinality(v_run_ids) LOOP
			BEGIN
				v_input := convert_from(v_run_inputs[v_n], 'UTF8')::jsonb;
				IF jsonb_typeof(v_input) = 'object' THEN	-- else the usual path says why
					v_items := v_items || jsonb_build_array(jsonb_build_object(
						'operationId', v_run_ids[v_n],
						'result', payflow.invoke_postprocess(hook, v_run_ids[v_n], v_input)));
				END IF;
			EXCEPTION WHEN OTHERS THEN
				v_errors[v_run_items[v_n]] := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
			END;
		END LOOP;
	END IF;
	IF jsonb_array_length(v_items) > 0 THEN
		FOR c IN SELECT * FROM payflow.complete_steps(step, worker_id, v_items) LOOP
			IF c.error IS NOT NULL THEN
				RAISE EXCEPTION 'step % of operation % could not be completed after its hook: %',
					step, c.operation_id, c.error ->> 'message'
					USING ERRCODE = coalesce(c.error ->> 'code', 'PF004');
			END IF;
			v_done := v_done || jsonb_build_object(c.operation_id, c.answer);
		END LOOP;
	END IF;
	FOR v_n IN 1 .. cardinality(operation_ids) LOOP
		item := v_n;
		operation_id := operation_ids[v_n];
		answer := v_answers[v_n];
		error := v_errors[v_n];
		completion := CASE WHEN error IS NULL THEN v_done -> operation_id END;
		RETURN NEXT;
	END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION payflow._require_own_ref(p_operation_id text, p_ref jsonb) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	p payflow.payloads;
BEGIN
	PERFORM payflow._require_text('result_ref.key', p_ref ->> 'key', 1024);
	PERFORM payflow._require_text('result_ref.checksum', p_ref ->> 'checksum', 71);
	IF p_ref ->> 'store' IS DISTINCT FROM 'pg' AND p_ref ->> 'store' IS DISTINCT FROM 's3' THEN
		RAISE EXCEPTION 'unknown payload store "%"', coalesce(p_ref ->> 'store', 'missing')
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	ELSIF NOT starts_with(p_ref ->> 'key', payflow._payload_key(p_operation_id, '')) THEN
		RAISE EXCEPTION 'result_ref must name a payload of operation %', p_operation_id
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Its key is %s; keys of this operation start with payments/%s/.',
								  p_ref ->> 'key', p_operation_id);
	ELSIF p_ref ->> 'store' = 'pg' THEN
		SELECT * INTO p FROM payflow.payloads WHERE key = p_ref ->> 'key' AND operation_id = p_operation_id;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', p_ref ->> 'key' USING ERRCODE = 'no_data_found';
		ELSIF p.checksum IS DISTINCT FROM p_ref ->> 'checksum' THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', p.key USING ERRCODE = 'PF005';
		END IF;
	END IF;
END
$$;

CREATE OR REPLACE FUNCTION payflow.replay_webhook(failure_id bigint) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	f payflow.webhook_failures;
BEGIN
	IF failure_id IS NULL THEN
		RAISE EXCEPTION 'failure_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO f FROM payflow.webhook_failures w WHERE w.id = failure_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'webhook failure % does not exist', failure_id USING ERRCODE = 'no_data_found';
	ELSIF f.replayed_at IS NOT NULL THEN
		RETURN false;
	END IF;
	PERFORM payflow._outbox_write(gen_random_uuid(), f.operation_id, coalesce(f.body ->> 'paymentId', f.operation_id),
								  f.body ->> 'eventType', 'operation-events', f.body);
	UPDATE payflow.webhook_failures w SET replayed_at = now() WHERE w.id = f.id;
	RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION payflow.purge(max_rows integer DEFAULT 10000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_payloads integer;
	v_operations integer;
	v_published integer;
	v_consumed integer;
	v_dead integer;
	v_webhooks integer;
	v_cron integer := 0;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	WITH ops AS (
		SELECT id FROM payflow.operations
		 WHERE terminal_at IS NOT NULL AND payloads_purged_at IS NULL
		   AND terminal_at < now() - payflow._seconds('retention_payloads')
		   AND status IN ('COMPLETED', 'CANCELLED')
		 ORDER BY terminal_at LIMIT max_rows
		   FOR UPDATE SKIP LOCKED
	), marked AS (
		UPDATE payflow.operations o SET payloads_purged_at = now() FROM ops WHERE o.id = ops.id
	)
	DELETE FROM payflow.payloads p USING ops
	 WHERE p.key >= payflow._payload_key(ops.id, '') AND p.key < payflow._payload_keys_end(ops.id);
	GET DIAGNOSTICS v_payloads = ROW_COUNT;

	WITH ops AS (
		SELECT id FROM payflow.operations
		 WHERE terminal_at IS NOT NULL
		   AND terminal_at < now() - CASE WHEN status = 'FAILED'
										  THEN payflow._seconds('retention_failed')
										  ELSE payflow._seconds('retention_completed') END
		 ORDER BY terminal_at LIMIT max_rows
		   FOR UPDATE SKIP LOCKED
	), del_steps AS (
		DELETE FROM payflow.steps c USING ops WHERE c.operation_id = ops.id
	), del_history AS (
		DELETE FROM payflow.operation_history c USING ops WHERE c.operation_id = ops.id
	), del_payloads AS (
		-- "0" follows "/": the range holds exactly the keys under payments/<id>/
		DELETE FROM payflow.payloads c USING ops
		 WHERE c.key >= payflow._payload_key(ops.id, '') AND c.key < payflow._payload_keys_end(ops.id)
	), del_dead AS (
		DELETE FROM payflow.dead_letters c USING ops WHERE c.operation_id = ops.id
	), del_events AS (
		DELETE FROM payflow.operation_events c USING ops WHERE c.operation_id = ops.id
	)
	DELETE FROM payflow.operations o USING ops WHERE o.id = ops.id;
	GET DIAGNOSTICS v_operations = ROW_COUNT;

	DELETE FROM payflow.outbox_published
	 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.outbox_published
							  WHERE published_at < now() - payflow._seconds('retention_published')
							  LIMIT max_rows));
	GET DIAGNOSTICS v_published = ROW_COUNT;

	DELETE FROM payflow.consumed_events
	 WHERE ctid = ANY (ARRAY(SELECT ctid FROM payflow.consumed_events
							  WHERE consumed_at < now() - payflow._seconds('retention_consumed')
							  LIMIT max_rows));
	GET DIAGNOSTICS v_consumed = ROW_COUNT;

	-- Message dead letters have no operation; keep them as long as failures.
	DELETE FROM payflow.dead_letters
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.dead_letters
							WHERE created_at < now() - payflow._seconds('retention_failed')
							ORDER BY created_at LIMIT max_rows));
	GET DIAGNOSTICS v_dead = ROW_COUNT;

	-- Failed webhook deliveries: kept as long as failed operations, counted
	-- from their last failure.
	DELETE FROM payflow.webhook_failures
	 WHERE id = ANY (ARRAY(SELECT id FROM payflow.webhook_failures
							WHERE updated_at < now() - payflow._seconds('retention_failed')
							ORDER BY updated_at LIMIT max_rows));
	GET DIAGNOSTICS v_webhooks = ROW_COUNT;

	IF to_regclass('cron.job_run_details') IS NOT NULL THEN
		EXECUTE $sql$
			DELETE FROM cron.job_run_details
			 WHERE runid = ANY (ARRAY(
				SELECT d.runid FROM cron.job_run_details d JOIN cron.job j USING (jobid)
				 WHERE j.jobname LIKE 'payflow%' AND d.end_time < now() - $1
				 LIMIT $2))
		$sql$ USING payflow._seconds('retention_published'), max_rows;
		GET DIAGNOSTICS v_cron = ROW_COUNT;
	END IF;

	RETURN jsonb_build_object('payloads', v_payloads,
							  'operations', v_operations,
							  'publishedEvents', v_published,
							  'consumedEvents', v_consumed,
							  'deadLetters', v_dead,
							  'webhookFailures', v_webhooks,
							  'cronRunDetails', v_cron,
							  'more', greatest(v_payloads, v_operations, v_published,
											   v_consumed, v_dead, v_webhooks, v_cron) >= max_rows);
END
$$;

CREATE OR REPLACE FUNCTION payflow._emit(p_operation_id text, p_payment_id text, p_correlation_id text,
							  p_event_type text, p_destination text, p_attempt integer,
							  p_extra jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_event_id uuid := gen_random_uuid();
BEGIN
	RETURN payflow._outbox_write(v_event_id, p_operation_id, p_payment_id, p_event_type, p_destination,
								 payflow._event_body(v_event_id, p_operation_id, p_payment_id, p_correlation_id,
													 p_event_type, p_attempt, p_extra));
END
$$;

CREATE OR REPLACE FUNCTION payflow._payload_write(p_operation_id text, p_name text, p_content bytea)
	RETURNS jsonb
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_key text := payflow._payload_key(p_operation_id, p_name);
	v_checksum text := payflow._checksum(p_content);
	v_existing text;
BEGIN
	PERFORM payflow._require_size('payload', octet_length(p_content));
	INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
	VALUES (v_key, p_operation_id, v_checksum, octet_length(p_content), p_content)
	ON CONFLICT (key) DO NOTHING;
	IF NOT FOUND THEN
		SELECT checksum INTO v_existing FROM payflow.payloads WHERE key = v_key;
		IF v_existing <> v_checksum THEN
			RAISE EXCEPTION 'payload "%" already exists with other content', v_key
				USING ERRCODE = 'unique_violation',
					  DETAIL = 'Payload keys are written once; a reference may already be in flight.';
		END IF;
	END IF;
	RETURN jsonb_build_object('store', 'pg', 'key', v_key, 'checksum', v_checksum,
							  'size', octet_length(p_content));
END
$$;

CREATE OR REPLACE FUNCTION payflow._outbox_write(p_event_id uuid, p_operation_id text, p_group_key text,
									  p_event_type text, p_destination text, p_body jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
BEGIN
	PERFORM payflow._outbox_write_all(ARRAY[p_event_id], ARRAY[p_operation_id], ARRAY[p_group_key],
									  ARRAY[p_event_type], ARRAY[p_destination], ARRAY[p_body]);
	RETURN p_event_id;
END
$$;

CREATE OR REPLACE FUNCTION payflow._payload_keys_end(p_operation_id text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '0'
$$;

CREATE OR REPLACE FUNCTION payflow._payload_key(p_operation_id text, p_name text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '/' || p_name
$$;

CREATE OR REPLACE FUNCTION payflow.payload_put(operation_id text, name text, content bytea,
									step text DEFAULT NULL, worker_id text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('name', name, 100);
	IF name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
		RAISE EXCEPTION 'invalid payload name "%"', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Names use letters, digits, ".", "_" and "-".';
	END IF;
	IF content IS NULL THEN
		RAISE EXCEPTION 'content must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO o FROM payflow.operations t WHERE t.id = payload_put.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF step IS NULL OR worker_id IS NULL THEN
		RAISE EXCEPTION 'only the lease holder of a running step may write a payload'
			USING ERRCODE = 'PF004', HINT = 'Pass the step and the worker_id that claimed it.';
	END IF;
	d := payflow._step_definition(step);
	d := payflow._require_step_of(o, d.step_name);
	PERFORM payflow._require_worker(worker_id, 1);
	SELECT * INTO s FROM payflow.steps t
	 WHERE t.operation_id = payload_put.operation_id AND t.step_name = d.step_name;
	IF s.status IS DISTINCT FROM 'RUNNING' OR s.lease_owner IS DISTINCT FROM worker_id THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', worker_id, d.step_name
			USING ERRCODE = 'PF004', DETAIL = format('Operation %s.', operation_id);
	ELSIF name IS DISTINCT FROM d.result_name THEN
		RAISE EXCEPTION 'step % writes only its result payload', d.step_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = CASE WHEN d.result_name IS NULL THEN format('Step %s has no result payload.', d.step_name)
								ELSE format('Its name is %s.', d.result_name) END;
	END IF;
	RETURN payflow._payload_write(operation_id, name, content);
END
$$;

-- The outbox figures of metrics(), from where the live rows begin
-- (payflow._outbox_cursor) by outbox_seq_idx: a sequential scan read every
-- page of the outbox's heap at each scrape, and while a snapshot is held
-- open those are all the rows acked since.
CREATE FUNCTION payflow._outbox_figures() RETURNS jsonb
	LANGUAGE plpgsql STABLE
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	AS $$
BEGIN
	RETURN (SELECT jsonb_build_object(
					   'backlog', count(*),
					   'inFlight', count(*) FILTER (WHERE o.claim_expires_at > now()),
					   'failing', count(*) FILTER (WHERE o.last_error IS NOT NULL),
					   'oldestAgeSeconds', round(coalesce(extract(epoch FROM now() - min(o.created_at)), 0)::numeric, 3))
			  FROM payflow.outbox o
			 WHERE o.seq > 0	-- outbox_seq_idx's predicate (see outbox_claim)
			   AND o.seq >= coalesce((SELECT k.low_seq FROM payflow._outbox_cursor k), 0));
END
$$;

-- Health figures for dashboards and alarms.  Scraped often (the HTTP edge's
-- /metrics), so it never scans all retained operations: every operation not
-- yet terminal (operations_open_idx) has exactly one open step, its
-- current_step (PENDING, RUNNING or RETRY_WAIT); recent terminal
-- operations come from the terminal_at index.  A step that finished in the
-- last hour belongs to an operation still in flight or to one that ended
-- since, so those two sets' steps are all there is to read for it.  Its
-- cost follows the work in flight and the last hour, not the retention.
CREATE OR REPLACE FUNCTION payflow.metrics() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
	WITH in_flight AS MATERIALIZED (
		SELECT o.id, o.status, o.updated_at, o.current_step
		  FROM payflow.operations o
		 WHERE o.terminal_at IS NULL	-- operations_open_idx's predicate
	), active AS (
		-- each operation's steps by a probe of steps_pkey (LATERAL ... OFFSET 0
		-- keeps it a nested loop): a merge or hash join would read the steps
		-- of every retained operation
		SELECT s.operation_id, s.step_name, s.status AS step_status, o.status, o.updated_at
		  FROM in_flight o
		 CROSS JOIN LATERAL (SELECT t.operation_id, t.step_name, t.status FROM payflow.steps t
							  WHERE t.operation_id = o.id AND t.step_name = o.current_step OFFSET 0) s
		 WHERE s.status IN ('PENDING', 'RUNNING', 'RETRY_WAIT')
	), recent AS MATERIALIZED (
		SELECT id, status FROM payflow.operations WHERE terminal_at > now() - interval '1 hour'
	), finished AS (
		SELECT s.step_name, s.status, extract(epoch FROM s.finished_at - s.claimed_at) AS run_seconds
		  FROM (SELECT id FROM in_flight UNION ALL SELECT id FROM recent) o
		 CROSS JOIN LATERAL (SELECT t.step_name, t.status, t.finished_at, t.claimed_at FROM payflow.steps t
							  WHERE t.operation_id = o.id AND t.finished_at > now() - interval '1 hour' OFFSET 0) s
	)
	SELECT jsonb_build_object(
		'operations', (
			SELECT coalesce(jsonb_object_agg(status, jsonb_build_object(
					   'count', n, 'oldestAgeSeconds', round(age::numeric, 3))), '{}'::jsonb)
			  FROM (SELECT status, count(*) AS n, extract(epoch FROM now() - min(updated_at)) AS age
					  FROM active GROUP BY status) a),
		'finishedLastHour', (
			SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb)
			  FROM (SELECT status, count(*) AS n FROM recent GROUP BY status) r),
		'outbox', payflow._outbox_figures(),
		'steps', (
			SELECT coalesce(jsonb_object_agg(d.step_name, jsonb_build_object(
					   'pending', coalesce(a.pending, 0), 'running', coalesce(a.running, 0),
					   'retryWaiting', coalesce(a.retry_waiting, 0),
					   'finishedLastHour', coalesce(f.finished, 0),
					   'runSecondsP50', round(f.p50::numeric, 3), 'runSecondsP95', round(f.p95::numeric, 3))), '{}'::jsonb)
			  FROM (SELECT DISTINCT sd.step_name FROM payflow.step_definitions sd) d
			  LEFT JOIN (SELECT step_name,
								count(*) FILTER (WHERE step_status = 'PENDING') AS pending,
								count(*) FILTER (WHERE step_status = 'RUNNING') AS running,
								count(*) FILTER (WHERE step_status = 'RETRY_WAIT') AS retry_waiting
						   FROM active GROUP BY step_name) a ON a.step_name = d.step_name
			  LEFT JOIN (SELECT step_name, count(*) AS finished,
								percentile_cont(0.5) WITHIN GROUP (ORDER BY run_seconds)
									FILTER (WHERE status = 'SUCCEEDED') AS p50,
								percentile_cont(0.95) WITHIN GROUP (ORDER BY run_seconds)
									FILTER (WHERE status = 'SUCCEEDED') AS p95
						   FROM finished GROUP BY step_name) f ON f.step_name = d.step_name),
		'failureRateLastHour', (
			SELECT round(coalesce(count(*) FILTER (WHERE status = 'FAILED')::numeric
								  / nullif(count(*) FILTER (WHERE status IN ('COMPLETED', 'FAILED')), 0), 0), 4)
			  FROM recent),
		'deadLetters', (
			SELECT jsonb_build_object(
					   'open', count(*) FILTER (WHERE replayed_at IS NULL),
					   'lastHour', count(*) FILTER (WHERE created_at > now() - interval '1 hour'))
			  FROM payflow.dead_letters),
		'webhookFailures', (
			SELECT jsonb_build_object(
					   'open', count(*) FILTER (WHERE replayed_at IS NULL),
					   'lastHour', count(*) FILTER (WHERE updated_at > now() - interval '1 hour'))
			  FROM payflow.webhook_failures))
$$;

-- The post-processing hook that ships with payflow: the invoice input from
-- the request details and the payment result.  Fields are copied by name,
-- so nothing else in the details (a card number, say) ever reaches the
-- invoice API.  Hooks have this signature: (operation_id text,
-- payment_result jsonb) -> jsonb, the invoice input.
CREATE OR REPLACE FUNCTION payflow.default_postprocess(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
	v_details jsonb := '{}';
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_object('payment_result', payment_result);
	SELECT * INTO o FROM payflow.operations WHERE id = default_postprocess.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	-- Details in S3 are not readable from here: the invoice input then
	-- carries the payment fields only.
	SELECT convert_from(p.content, 'UTF8')::jsonb INTO v_details
	  FROM payflow.payloads p
	 WHERE p.key = o.request_ref ->> 'key' AND o.request_ref ->> 'store' = 'pg';
	RETURN jsonb_strip_nulls(jsonb_build_object(
		'operationId', o.id,
		'paymentId', o.payment_id,
		'amount', v_details -> 'amount',
		'currency', v_details -> 'currency',
		'customer', v_details -> 'customer',
		'description', v_details -> 'description',
		'paymentReference', coalesce(payment_result -> 'charge_id', payment_result -> 'chargeId',
									 payment_result -> 'transactionId')));
END
$$;

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost;
-- 3. due retries: the step's request event is emitted again.
-- 1 and 2 come from a sweep of the operations in flight
-- (operations_open_idx), each with its one open step (current_step): no
-- index names a lease or a status, so that claims, heartbeats and
-- completions stay HOT updates.  A call looks at up to 10 x max_rows
-- operations from where the last one stopped (payflow.scheduler_sweep) and
-- starts over from the first when it reaches the end: with fewer in flight
-- than that, every call sees them all; with more, a lease is found expired
-- within (operations in flight / (10 x max_rows)) calls, which the README
-- states.  3 comes from steps_retry_idx by due time.  Each part handles at
-- most max_rows rows; rows locked by a worker are skipped and seen next
-- time.
CREATE OR REPLACE FUNCTION payflow.run_scheduler(max_rows integer DEFAULT 1000) RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	o payflow.operations;
	s payflow.steps;
	d payflow.step_definitions;
	v_max integer;
	v_stuck_after interval := payflow._seconds('stuck_after');
	v_expired integer := 0;
	v_failed integer := 0;
	v_due integer := 0;
	v_stuck integer := 0;
	v_sweep payflow.scheduler_sweep;
	v_scan integer;
	v_seen integer := 0;
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_scan := least(max_rows, 100000) * 10;

	-- One sweep at a time (pg_cron may start a call while one runs): a
	-- second caller skips 1 and 2 this time.
	SELECT * INTO v_sweep FROM payflow.scheduler_sweep FOR UPDATE SKIP LOCKED;
	IF FOUND THEN
		FOR r IN SELECT x.operation_id, x.step_name, x.status, x.lease_expires_at, x.pending_since
				   FROM payflow.operations f
				   -- a probe of steps_pkey per operation (see metrics())
				  CROSS JOIN LATERAL (SELECT t.* FROM payflow.steps t
									   WHERE t.operation_id = f.id AND t.step_name = f.current_step OFFSET 0) x
				  WHERE f.terminal_at IS NULL	-- operations_open_idx's predicate
					-- byte-wise, as operations_open_idx orders them
					AND f.id > v_sweep.after_operation COLLATE "C"
				  ORDER BY f.id LIMIT v_scan
		LOOP
			EXIT WHEN v_expired + v_failed >= max_rows OR v_stuck >= max_rows;
			v_seen := v_seen + 1;
			v_sweep.after_operation := r.operation_id;
			CONTINUE WHEN NOT ((r.status = 'RUNNING' AND r.lease_expires_at < now())
							   OR (r.status = 'PENDING' AND r.pending_since < now() - v_stuck_after));
			SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
			CONTINUE WHEN NOT FOUND;
			s := payflow._lock_step(r.operation_id, r.step_name);
			IF s.status = 'RUNNING' AND s.lease_expires_at < now() THEN
				d := payflow._step_of(o.pipeline_version, s.step_name);
				v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
				IF s.attempt >= v_max THEN
					PERFORM payflow._fail_operation(o, s,
						jsonb_build_object('code', 'lease_expired',
										   'message', format('lease expired on attempt %s of %s', s.attempt, v_max)),
						'payflow scheduler');
					v_failed := v_failed + 1;
				ELSE
					-- lease_owner stays: the late worker may still report its outcome
					-- until another worker claims the step.  Due at once: part 3
					-- below emits its request in this call.
					UPDATE payflow.steps
					   SET status = 'RETRY_WAIT', next_attempt_at = now(), lease_expires_at = NULL,
						   last_error = jsonb_build_object('code', 'lease_expired',
														   'message', format('lease of %s expired', s.lease_owner))
					 WHERE operation_id = s.operation_id AND step_name = s.step_name;
					v_expired := v_expired + 1;
				END IF;
			ELSIF s.status = 'PENDING' AND s.pending_since < now() - v_stuck_after THEN
				-- Re-armed either way, so it is not stuck again until stuck_after.
				UPDATE payflow.steps SET pending_since = now()
				 WHERE operation_id = s.operation_id AND step_name = s.step_name;
				-- An event of this payment still in the outbox will be delivered;
				-- another copy would only be a duplicate.
				CONTINUE WHEN EXISTS (SELECT FROM payflow.outbox
									   WHERE message_group_id = payflow._message_group_id(o.payment_id));
				PERFORM payflow._emit_step_request(o, s);
				v_stuck := v_stuck + 1;
			END IF;
		END LOOP;
		IF v_seen < v_scan AND v_expired + v_failed < max_rows AND v_stuck < max_rows THEN
			-- the end of the operations in flight: the next call starts from the first
			v_sweep.after_operation := '';
		END IF;
		UPDATE payflow.scheduler_sweep SET after_operation = v_sweep.after_operation, updated_at = now() WHERE id;
	END IF;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE next_attempt_at <= now() AND status = 'RETRY_WAIT'
			  ORDER BY next_attempt_at LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'RETRY_WAIT' OR s.next_attempt_at > now();
		UPDATE payflow.steps
		   SET status = 'PENDING', pending_since = now(), next_attempt_at = NULL
		 WHERE operation_id = s.operation_id AND step_name = s.step_name;
		PERFORM payflow._emit_step_request(o, s);
		v_due := v_due + 1;
	END LOOP;

	PERFORM payflow._wake_listeners();
	RETURN jsonb_build_object('expiredLeases', v_expired,
							  'failedAfterLeaseExpiry', v_failed,
							  'retriesDue', v_due,
							  'stuckRedriven', v_stuck);
END
$$;

-- Re-runs a FAILED operation from the step that failed, with a fresh
-- attempt budget and the same idempotency key.  False if not FAILED.
CREATE OR REPLACE FUNCTION payflow.replay(operation_id text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
	s payflow.steps;
	d payflow.step_definitions;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	o := payflow._lock_operation(operation_id);
	IF o.status <> 'FAILED' THEN
		RETURN false;
	END IF;
	SELECT * INTO s FROM payflow.steps
	 WHERE steps.operation_id = o.id AND status = 'FAILED' FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'operation "%" has no failed step to replay', o.id
			USING ERRCODE = 'PF001';
	END IF;
	d := payflow._step_of(o.pipeline_version, s.step_name);

	-- the one FAILED -> ready move operations_transition lets through
	PERFORM payflow._allow_replay(o.id);
	PERFORM payflow._set_status(o.id, 'FAILED', d.ready_status, 'replay', session_user);
	UPDATE payflow.operations
	   SET error = NULL, current_step = s.step_name, payloads_purged_at = NULL
	 WHERE id = o.id
	RETURNING * INTO o;
	UPDATE payflow.steps
	   SET status = 'PENDING', attempt = 0, pending_since = now(), finished_at = NULL,
		   next_attempt_at = NULL, lease_expires_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = s.step_name
	RETURNING * INTO s;
	UPDATE payflow.dead_letters SET replayed_at = now()
	 WHERE dead_letters.operation_id = o.id AND replayed_at IS NULL;
	PERFORM payflow._emit_step_request(o, s);
	RETURN true;
END
$$;

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay, and "outcomeUnknown": true when the attempt may have had
-- its effect (then the last attempt ends the operation as outcome_unknown).
CREATE OR REPLACE FUNCTION payflow.fail_step(operation_id text, step text, worker_id text, error jsonb,
								  retryable boolean)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_max integer;
	v_base interval;
	v_cap interval;
	v_delay interval;
	v_retry_after interval;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_object('error', error);
	IF retryable IS NULL THEN
		RAISE EXCEPTION 'retryable must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_size('error', octet_length(error::text));
	-- Card numbers never reach the step, the status document, history,
	-- dead letters or OperationFailed.
	error := payflow._mask_card_numbers(error);

	o := payflow._lock_operation(operation_id);
	d := payflow._require_step_of(o, d.step_name);
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'done');
	ELSIF s.status = 'FAILED' THEN
		RETURN jsonb_build_object('action', 'failed');
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status USING ERRCODE = 'PF006';
	END IF;
	PERFORM payflow._require_lease_holder(s, o.id, d.step_name, worker_id);
	IF s.status = 'RETRY_WAIT' AND s.last_error = error THEN
		-- The same report again (a worker retrying its own call).
		RETURN jsonb_build_object('action', 'retry', 'attempt', s.attempt,
								  'nextAttemptAt', payflow._iso(s.next_attempt_at));
	END IF;

	v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
	IF retryable AND s.attempt < v_max THEN
		v_base := coalesce(d.retry_base_delay, payflow._seconds('retry_base_delay'));
		v_cap := coalesce(d.retry_max_delay, payflow._seconds('retry_max_delay'));
		v_delay := payflow.backoff_delay(greatest(s.attempt - 1, 0), v_base, v_cap,
										 payflow._setting('retry_jitter')::float8);
		IF jsonb_typeof(error -> 'retryAfterSeconds') = 'number' THEN
			-- compared as numeric: 1e400 is a JSON number but no float8
			v_retry_after := make_interval(secs => greatest(least((error ->> 'retryAfterSeconds')::numeric,
																  extract(epoch FROM v_cap)), 0)::float8);
			v_delay := greatest(v_delay, v_retry_after);
		END IF;
		UPDATE payflow.steps
		   SET status = 'RETRY_WAIT', next_attempt_at = now() + v_delay, last_error = error,
			   lease_expires_at = NULL
		 WHERE steps.operation_id = o.id AND step_name = d.step_name
		RETURNING * INTO s;
		UPDATE payflow.operations SET updated_at = now() WHERE id = o.id;
		RETURN jsonb_build_object('action', 'retry', 'attempt', s.attempt,
								  'nextAttemptAt', payflow._iso(s.next_attempt_at));
	END IF;

	IF retryable AND error -> 'outcomeUnknown' = 'true'::jsonb THEN
		-- The worker says this attempt may have had its effect (a call cut
		-- off after the DBMS got it, that no look-up cleared up): the last
		-- one must not end as a plain failure, or the client resubmits a
		-- payment that may be charged.
		error := jsonb_build_object(
			'code', 'outcome_unknown', 'class', 'outcome_unknown',
			'message', 'outcome unknown: the last attempt was cut off after the downstream system got it, '
					   'so it may have charged; do not resubmit it, reconcile it with the downstream system '
					   '(a dead letter holds it)',
			'cause', error - 'outcomeUnknown');
	END IF;
	PERFORM payflow._fail_operation(o, s,
		CASE WHEN retryable THEN error || jsonb_build_object('attemptsExhausted', true) ELSE error END,
		worker_id);
	RETURN jsonb_build_object('action', 'failed');
END
$$;

-- Fails an operation at a step: step FAILED, operation FAILED, a dead
-- letter, and its version's failed event (OperationFailed).  Caller holds
-- both row locks.
CREATE OR REPLACE FUNCTION payflow._fail_operation(o payflow.operations, s payflow.steps,
										p_error jsonb, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_summary jsonb := payflow._mask_card_numbers(jsonb_strip_nulls(jsonb_build_object(
		'step', s.step_name,
		'code', p_error -> 'code',
		'message', p_error -> 'message')));
BEGIN
	UPDATE payflow.steps
	   SET status = 'FAILED', last_error = p_error, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE operation_id = s.operation_id AND step_name = s.step_name;
	PERFORM payflow._set_status(o.id, o.status, 'FAILED',
								coalesce(v_summary ->> 'message', v_summary ->> 'code', 'failed'), p_actor);
	UPDATE payflow.operations SET error = v_summary WHERE id = o.id;
	INSERT INTO payflow.dead_letters (source, operation_id, step_name, error, attempts)
	VALUES ('step', o.id, s.step_name, payflow._mask_card_numbers(p_error), s.attempt);
	PERFORM payflow._emit(o.id, o.payment_id, o.correlation_id,
						  (SELECT p.failed_event FROM payflow.pipelines p WHERE p.version = o.pipeline_version),
						  'operation-events', s.attempt,
						  jsonb_build_object('status', 'FAILED', 'failedStep', s.step_name, 'error', v_summary));
END
$$;

-- Changes an operation's status and appends the history row; the trigger
-- operations_transition checks the move.  The caller holds the operation's
-- row lock.
CREATE OR REPLACE FUNCTION payflow._set_status(p_operation_id text, p_from text, p_to text,
									p_reason text, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	UPDATE payflow.operations
	   SET status = p_to,
		   updated_at = now(),
		   terminal_at = CASE WHEN payflow._is_terminal(p_to) THEN now() END
	 WHERE id = p_operation_id;
	INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
	VALUES (p_operation_id, p_from, p_to, left(p_reason, 500), p_actor);
	PERFORM payflow._status_changed();
END
$$;

-- Emits the event that asks a worker to run a step (first run, retry,
-- re-drive or replay).
CREATE OR REPLACE FUNCTION payflow._emit_step_request(o payflow.operations, s payflow.steps)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, s.step_name);
BEGIN
	RETURN payflow._emit(o.id, o.payment_id, o.correlation_id, d.request_event, d.destination,
						 s.attempt + 1, jsonb_build_object(d.input_field, s.input_ref));
END
$$;

-- A step of the version an operation runs on, else 22023: a report for a
-- step that operation's pipeline does not have.
CREATE OR REPLACE FUNCTION payflow._require_step_of(o payflow.operations, p_step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, p_step);
BEGIN
	IF d.step_name IS NULL THEN
		RAISE EXCEPTION 'step % is not in pipeline version % of operation %', p_step, o.pipeline_version, o.id
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Operations finish on the pipeline version they started with.';
	END IF;
	RETURN d;
END
$$;

-- The definition of a step by name in the newest version that has it,
-- else 22023.  Step functions check names with it before they know the
-- operation, then read the operation's own version (_step_of).
CREATE OR REPLACE FUNCTION payflow._step_definition(step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions;
BEGIN
	PERFORM payflow._require_text('step', step, 64);
	SELECT * INTO d FROM payflow.step_definitions sd WHERE sd.step_name = step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'unknown step "%"', step
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('Steps are %s.', payflow._step_list(payflow._pipeline_version()));
	END IF;
	RETURN d;
END
$$;

REVOKE ALL ON FUNCTION
	payflow._payload_key(text, text),
	payflow._payload_keys_end(text),
	payflow._outbox_write(uuid, text, text, text, text, jsonb)
	FROM PUBLIC;
REVOKE ALL ON FUNCTION
	payflow._lock_operation(text),
	payflow._lock_step(text, text),
	payflow._require_lease_holder(payflow.steps, text, text, text),
	payflow._emit_step_request(payflow.operations, payflow.steps),
	payflow._fail_operation(payflow.operations, payflow.steps, jsonb, text)
	FROM PUBLIC;
REVOKE ALL ON FUNCTION
	payflow._pipeline_version(),
	payflow._require_step_of(payflow.operations, text),
	payflow._set_status(text, text, text, text, text)
	FROM PUBLIC;
GRANT SELECT ON payflow.destinations, payflow.pipelines TO payflow_admin;

-- At most 100 items per batch call (22023), not NULL (22004).
CREATE FUNCTION payflow._require_batch(arg_name text, n integer) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF n IS NULL THEN
		RAISE EXCEPTION '% must not be null or empty', arg_name USING ERRCODE = 'null_value_not_allowed';
	ELSIF n > 100 THEN
		RAISE EXCEPTION '% has % items; the limit is 100', arg_name, n USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- A JSON array of 1 to 100 objects (22004, 22023).
CREATE FUNCTION payflow._require_items(items jsonb) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF items IS NULL THEN
		RAISE EXCEPTION 'items must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF jsonb_typeof(items) <> 'array' THEN
		RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = 'invalid_parameter_value',
			DETAIL = format('Got a JSON %s.', jsonb_typeof(items));
	ELSIF jsonb_array_length(items) > 100 THEN
		RAISE EXCEPTION 'items has % entries; the limit is 100', jsonb_array_length(items)
			USING ERRCODE = 'invalid_parameter_value';
	ELSIF EXISTS (SELECT FROM jsonb_array_elements(items) e WHERE jsonb_typeof(e) <> 'object') THEN
		RAISE EXCEPTION 'every item must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- The verified content of a "pg" input reference, else NULL.
CREATE OR REPLACE FUNCTION payflow._inline_input(p_ref jsonb) RETURNS bytea
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	-- PL/pgSQL, whose plan is kept: as a SQL function reading a table (never
	-- inlined) each call started an executor of its own (20 us, a claim each)
	RETURN (SELECT payflow._verified_content(p_ref, p.content)
			  FROM payflow.payloads p
			 WHERE p_ref ->> 'store' = 'pg' AND p.key = p_ref ->> 'key');
END
$$;

-- claim_step's full logic, for every case the fast path (_claim_fast)
-- does not take: "run" (new step, due retry, expired lease), "skip" (done,
-- failed, terminal, retry not yet due) or "busy" (another worker's lease is
-- live, or the step is not ready yet); and the argument errors.
CREATE FUNCTION payflow._claim_step_full(operation_id text, step text, worker_id text,
										 lease_seconds integer)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_takeover boolean := false;
	v_max integer;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, lease_seconds);

	o := payflow._lock_operation(operation_id);
	IF payflow._is_terminal(o.status) THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'terminal', 'status', o.status);
	END IF;
	-- The operation runs on the version it started with.
	d := payflow._step_of(o.pipeline_version, d.step_name);
	IF d.step_name IS NULL THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'not_in_pipeline',
								  'pipelineVersion', o.pipeline_version, 'status', o.status);
	END IF;
	s := payflow._lock_step(o.id, d.step_name);
	IF s.operation_id IS NULL THEN
		-- The event that creates this step has not been written yet.
		RETURN jsonb_build_object('action', 'busy', 'reason', 'not_ready', 'status', o.status);
	END IF;

	CASE s.status
		WHEN 'SUCCEEDED' THEN
			RETURN jsonb_build_object('action', 'skip', 'reason', 'done', 'status', o.status);
		WHEN 'FAILED', 'CANCELLED' THEN
			RETURN jsonb_build_object('action', 'skip', 'reason', lower(s.status), 'status', o.status);
		WHEN 'RETRY_WAIT' THEN
			IF s.next_attempt_at > now() THEN
				-- The scheduler re-emits the request when the retry is due.
				RETURN jsonb_build_object('action', 'skip', 'reason', 'retry_scheduled',
										  'nextAttemptAt', payflow._iso(s.next_attempt_at));
			END IF;
		WHEN 'RUNNING' THEN
			IF s.lease_expires_at > now() THEN
				RETURN jsonb_build_object('action', 'busy', 'reason', 'leased',
										  'leaseExpiresAt', payflow._iso(s.lease_expires_at));
			END IF;
			-- The holder died or stalled: take over, or give up at the limit.
			v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
			IF s.attempt >= v_max THEN
				PERFORM payflow._fail_operation(o, s,
					jsonb_build_object('code', 'lease_expired',
									   'message', format('lease expired on attempt %s of %s', s.attempt, v_max)),
					worker_id);
				RETURN jsonb_build_object('action', 'skip', 'reason', 'failed', 'status', 'FAILED');
			END IF;
			v_takeover := true;
		ELSE
			NULL;					-- PENDING
	END CASE;

	UPDATE payflow.steps
	   SET status = 'RUNNING', attempt = attempt + 1, lease_owner = worker_id,
		   lease_expires_at = now() + make_interval(secs => lease_seconds),
		   claimed_at = now(), pending_since = NULL, next_attempt_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = d.step_name
	RETURNING * INTO s;

	IF o.status = d.ready_status AND d.running_status <> d.ready_status THEN
		PERFORM payflow._set_status(o.id, o.status, d.running_status, 'claimed', worker_id);
	END IF;

	RETURN jsonb_strip_nulls(jsonb_build_object(
		'action', 'run',
		'attempt', s.attempt,
		'idempotencyKey', o.id || ':' || lower(d.step_name),
		'input', s.input_ref,
		'leaseExpiresAt', payflow._iso(s.lease_expires_at),
		'takeover', v_takeover,
		'externalRef', s.external_ref,
		'paymentId', o.payment_id,
		'correlationId', o.correlation_id,
		'pipelineVersion', o.pipeline_version,
		'inputField', d.input_field,
		'resultName', d.result_name));
END
$$;

-- A completion's answer, as the first complete_step call gave it: the
-- step's done status and the event its completion wrote (the next step's
-- request, or the version's completed event).  Kept as the event id alone:
-- the rest follows from the operation's pipeline version, which never
-- changes (100 bytes less per completed step than the answer itself).
CREATE FUNCTION payflow._completion_answer(o payflow.operations, d payflow.step_definitions, p_event_id uuid)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	n payflow.step_definitions := payflow._next_step(o.pipeline_version, d.position);
BEGIN
	RETURN jsonb_build_object('action', 'completed', 'status', d.done_status,
							  'eventType', coalesce(n.request_event,
													(SELECT p.completed_event FROM payflow.pipelines p
													  WHERE p.version = o.pipeline_version)),
							  'eventId', p_event_id);
END
$$;


-- complete_step's full logic, for every case the fast path
-- (_complete_fast) does not take (a repeated call, a result_ref, a late
-- report after the lease expired) and the argument errors.
CREATE FUNCTION payflow._complete_step_full(operation_id text, step text, worker_id text, result jsonb,
											result_ref jsonb)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	d payflow.step_definitions;
	n payflow.step_definitions;
	o payflow.operations;
	s payflow.steps;
	v_ref jsonb := result_ref;
	v_event_id uuid;
	v_event_type text;
	v_answer jsonb;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_object('result', result);
	PERFORM payflow._require_size('result', octet_length(result::text));
	IF v_ref IS NOT NULL THEN
		PERFORM payflow._require_object('result_ref', v_ref);
	END IF;

	o := payflow._lock_operation(operation_id);
	d := payflow._require_step_of(o, d.step_name);
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN payflow._completion_answer(o, d, s.completed_event_id);
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status
			USING ERRCODE = 'PF006',
				  HINT = 'A FAILED operation can be re-run with payflow.replay(); the step keeps its idempotency key.';
	END IF;
	PERFORM payflow._require_lease_holder(s, o.id, d.step_name, worker_id);
	IF v_ref IS NOT NULL THEN
		PERFORM payflow._require_own_ref(o.id, v_ref);
	END IF;

	IF v_ref IS NULL AND d.result_name IS NOT NULL THEN
		v_ref := payflow._payload_write(o.id, d.result_name, convert_to(result::text, 'UTF8'));
	END IF;

	PERFORM payflow._set_status(o.id, o.status, d.done_status, lower(d.step_name) || ' done', worker_id);

	n := payflow._next_step(o.pipeline_version, d.position);
	IF n.step_name IS NOT NULL THEN
		-- A step without a result payload hands its own input on.
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		VALUES (o.id, n.step_name, coalesce(v_ref, s.input_ref), now());
		UPDATE payflow.operations SET current_step = n.step_name WHERE id = o.id;
		v_event_type := n.request_event;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, n.request_event,
									n.destination, 1, jsonb_build_object(n.input_field, coalesce(v_ref, s.input_ref)));
	ELSE
		-- The last result travels inline in OperationCompleted; SQS takes
		-- 256 KiB per message, so it is held to a quarter of that.
		IF octet_length(result::text) > 65536 THEN
			RAISE EXCEPTION 'result of the last step is too large'
				USING ERRCODE = 'PF007',
					  DETAIL = format('It has %s bytes; the result of %s travels in the OperationCompleted event and may have 65536.',
									  octet_length(result::text), d.step_name),
					  HINT = 'Return a reference (an id or a URL) instead of the document.';
		END IF;
		UPDATE payflow.operations SET result = _complete_step_full.result WHERE id = o.id;
		SELECT p.completed_event INTO v_event_type FROM payflow.pipelines p WHERE p.version = o.pipeline_version;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, v_event_type,
									'operation-events', s.attempt,
									jsonb_build_object('status', d.done_status, 'result', result));
	END IF;

	v_answer := jsonb_build_object('action', 'completed', 'status', d.done_status,
								   'eventType', v_event_type, 'eventId', v_event_id);
	UPDATE payflow.steps
	   SET status = 'SUCCEEDED', result = _complete_step_full.result,
		   result_ref = v_ref,
		   completed_event_id = v_event_id, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = d.step_name;
	RETURN v_answer;
END
$$;

-- Fast claim of the steps of several operations.  Operations are locked in
-- id order (two batches never deadlock; single-item functions lock one
-- operation), SKIP LOCKED: a locked one goes to the full path, which waits.
-- Returns the claimed items: their position in operation_ids, the claim's
-- answer, and the input payload when it is a verified "pg" payload, so
-- that the worker needs no payload_get.
CREATE OR REPLACE FUNCTION payflow._claim_fast(p_step text, p_worker_id text, p_operation_ids text[],
									p_lease_seconds integer)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, input bytea)
	LANGUAGE plpgsql VOLATILE
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_hashjoin = off
	SET enable_mergejoin = off
	AS $$
BEGIN
	RETURN QUERY
	WITH i AS MATERIALIZED (
		SELECT x.id, min(x.n)::integer AS n
		  FROM unnest(p_operation_ids) WITH ORDINALITY AS x(id, n)
		 WHERE x.id IS NOT NULL
		 GROUP BY x.id
	), o AS MATERIALIZED (
		SELECT o.id, o.status, o.payment_id, o.correlation_id, o.pipeline_version
		  FROM payflow.operations o
		 WHERE o.id IN (SELECT i.id FROM i)
		   AND NOT payflow._is_terminal(o.status)
		 ORDER BY o.id
		   FOR UPDATE SKIP LOCKED
	), c AS (
		UPDATE payflow.steps s
		   SET status = 'RUNNING', attempt = s.attempt + 1, lease_owner = p_worker_id,
			   lease_expires_at = now() + make_interval(secs => p_lease_seconds),
			   claimed_at = now(), pending_since = NULL, next_attempt_at = NULL
		  FROM o, payflow.step_definitions d
		 WHERE s.operation_id = o.id AND s.step_name = p_step
		   AND d.pipeline_version = o.pipeline_version AND d.step_name = p_step
		   AND (s.status = 'PENDING' OR (s.status = 'RETRY_WAIT' AND s.next_attempt_at <= now()))
		   AND length(p_worker_id) BETWEEN 1 AND 200 AND p_lease_seconds BETWEEN 1 AND 86400
		RETURNING s.operation_id, s.attempt, s.input_ref, s.lease_expires_at, s.external_ref,
				  o.status, o.payment_id, o.correlation_id, o.pipeline_version,
				  d.ready_status, d.running_status, d.input_field, d.result_name
	), st AS (
		UPDATE payflow.operations op
		   SET status = c.running_status, updated_at = now()	-- checked by operations_transition
		  FROM c
		 WHERE op.id = c.operation_id AND c.status = c.ready_status AND c.running_status <> c.ready_status
		RETURNING op.id, c.status AS from_status, c.running_status AS to_status
	), h AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT st.id, st.from_status, st.to_status, 'claimed', p_worker_id FROM st
		RETURNING payflow._status_changed()
	)
	SELECT i.n, c.operation_id,
		   jsonb_strip_nulls(jsonb_build_object(
			   'action', 'run',
			   'attempt', c.attempt,
			   'idempotencyKey', c.operation_id || ':' || lower(p_step),
			   'input', c.input_ref,
			   'leaseExpiresAt', payflow._iso(c.lease_expires_at),
			   'takeover', false,
			   'externalRef', c.external_ref,
			   'paymentId', c.payment_id,
			   'correlationId', c.correlation_id,
			   'pipelineVersion', c.pipeline_version,
			   'inputField', c.input_field,
			   'resultName', c.result_name)),
		   -- _inline_input as a join: a call per row cost 16 us
		   payflow._verified_content(c.input_ref, p.content)
	  FROM c
	  JOIN i ON i.id = c.operation_id
	  LEFT JOIN payflow.payloads p ON c.input_ref ->> 'store' = 'pg' AND p.key = c.input_ref ->> 'key';
	-- (data-modifying CTEs run to completion whether or not they are read)
END
$$;

-- Fast completion of steps by their lease holder: for each item
-- {"operationId", "result"} (no resultRef) whose step is RUNNING under
-- p_worker_id in a running operation, in one statement: the step done with
-- its answer, the result payload written (when the step has a result
-- name), the status advanced with its history row, the next step created
-- and its request event (or OperationCompleted) in the outbox.  Items it
-- does not take (another state, a resultRef, a result too large, a payload
-- key already written) are left to _complete_step_full.
CREATE OR REPLACE FUNCTION payflow._complete_fast(p_step text, p_worker_id text, p_items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb)
	LANGUAGE plpgsql VOLATILE
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_hashjoin = off
	SET enable_mergejoin = off
	AS $$
DECLARE
	r record;
	d payflow.step_definitions;
	n payflow.step_definitions;
	v_max_bytes bigint := payflow._setting('payload_max_bytes')::bigint;
	v_last boolean;
	v_completed_event text;
BEGIN
	-- The step as the newest version that has it defines it; operations of
	-- older versions (in flight across a pipeline change) take the full path.
	-- With it, in the same statement, the next step (none after the last)
	-- and the version's completed event.
	SELECT sd AS d, nx AS n, p.completed_event INTO r
	  FROM payflow.step_definitions sd
	  JOIN payflow.pipelines p ON p.version = sd.pipeline_version
	  LEFT JOIN payflow.step_definitions nx ON nx.pipeline_version = sd.pipeline_version
										   AND nx.position = sd.position + 1
	 WHERE sd.step_name = p_step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	d := r.d;
	n := r.n;
	v_last := n.step_name IS NULL;
	v_completed_event := r.completed_event;
	RETURN QUERY
	WITH i AS MATERIALIZED (
		SELECT DISTINCT ON (x.e ->> 'operationId')
			   x.n::integer AS n, x.e ->> 'operationId' AS id, x.e -> 'result' AS result,
			   convert_to((x.e -> 'result')::text, 'UTF8') AS content, gen_random_uuid() AS event_id
		  FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, n)
		 WHERE jsonb_typeof(x.e -> 'result') = 'object'
		   AND coalesce(x.e -> 'resultRef', 'null'::jsonb) = 'null'::jsonb
		 ORDER BY x.e ->> 'operationId', x.n
	), o AS MATERIALIZED (
		SELECT o.id, o.status, o.payment_id, o.correlation_id
		  FROM payflow.operations o
		 WHERE o.id IN (SELECT i.id FROM i) AND o.status = d.running_status
		   AND o.pipeline_version = d.pipeline_version
		 ORDER BY o.id
		   FOR UPDATE SKIP LOCKED
	), s AS (
		UPDATE payflow.steps s
		   SET status = 'SUCCEEDED', result = i.result,
			   result_ref = CASE WHEN d.result_name IS NOT NULL THEN
					jsonb_build_object('store', 'pg', 'key', payflow._payload_key(o.id, d.result_name),
									   'checksum', payflow._checksum(i.content), 'size', octet_length(i.content))
				END,
			   completed_event_id = i.event_id, finished_at = now(), lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
		  FROM o JOIN i ON i.id = o.id
		 WHERE s.operation_id = o.id AND s.step_name = d.step_name
		   AND s.status = 'RUNNING' AND s.lease_owner = p_worker_id
		   AND octet_length(i.content) <= v_max_bytes
		   AND (NOT v_last OR octet_length(i.result::text) <= 65536)
		   AND (d.result_name IS NULL OR NOT EXISTS (
				SELECT FROM payflow.payloads p WHERE p.key = payflow._payload_key(o.id, d.result_name)))
		RETURNING s.operation_id, s.attempt, s.result, s.result_ref, s.input_ref, i.n, i.content,
				  i.event_id, o.status, o.payment_id, o.correlation_id
	), p AS (
		INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
		SELECT s.result_ref ->> 'key', s.operation_id, s.result_ref ->> 'checksum', octet_length(s.content), s.content
		  FROM s WHERE s.result_ref IS NOT NULL
	), st AS (
		UPDATE payflow.operations op
		   SET status = d.done_status, updated_at = now(),	-- checked by operations_transition
			   current_step = coalesce(n.step_name, op.current_step),
			   result = CASE WHEN v_last THEN s.result ELSE op.result END,
			   terminal_at = CASE WHEN v_last THEN now() END
		  FROM s
		 WHERE op.id = s.operation_id
	), h AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT s.operation_id, s.status, d.done_status, lower(d.step_name) || ' done', p_worker_id FROM s
		RETURNING payflow._status_changed()
	), ns AS (
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		SELECT s.operation_id, n.step_name, coalesce(s.result_ref, s.input_ref), now() FROM s WHERE NOT v_last
	), e AS MATERIALIZED (
		SELECT s.operation_id, s.event_id, s.payment_id,
			   coalesce(n.request_event, v_completed_event) AS event_type,
			   coalesce(n.destination, 'operation-events') AS destination,
			   payflow._event_body(s.event_id, s.operation_id, s.payment_id, s.correlation_id,
								   coalesce(n.request_event, v_completed_event),
								   CASE WHEN v_last THEN s.attempt ELSE 1 END,
								   CASE WHEN v_last THEN jsonb_build_object('status', d.done_status, 'result', s.result)
										ELSE jsonb_build_object(n.input_field, coalesce(s.result_ref, s.input_ref)) END) AS body
		  FROM s
	), ev AS (
		-- the aggregates of one scan see the rows in one order, so the
		-- arrays line up (one event per operation: no order to keep)
		SELECT payflow._outbox_write_all(array_agg(e.event_id), array_agg(e.operation_id),
										 array_agg(e.payment_id), array_agg(e.event_type),
										 array_agg(e.destination), array_agg(e.body)) AS written
		  FROM e
	)
	-- ev is read here, so it runs (once, for all the events)
	SELECT s.n, s.operation_id,
		   jsonb_build_object('action', 'completed', 'status', d.done_status,
							  'eventType', coalesce(n.request_event, v_completed_event), 'eventId', s.event_id)
	  FROM s LEFT JOIN ev ON true;
END
$$;

-- The items of complete_steps (p_fail false) or fail_steps (true) not in
-- p_done (NULL: none), one by one through the single-item logic, each in a
-- subtransaction: its answer, or its error for it alone.
CREATE FUNCTION payflow._outcomes_one_by_one(p_fail boolean, p_step text, p_worker_id text, p_items jsonb,
											 p_done boolean[])
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	v_e jsonb;
BEGIN
	FOR v_n IN 1 .. jsonb_array_length(p_items) LOOP
		CONTINUE WHEN coalesce(p_done[v_n], false);
		v_e := p_items -> (v_n - 1);
		item := v_n; operation_id := v_e ->> 'operationId'; error := NULL;
		BEGIN
			IF NOT p_fail THEN
				answer := payflow._complete_step_full(v_e ->> 'operationId', p_step, p_worker_id, v_e -> 'result',
													  nullif(v_e -> 'resultRef', 'null'::jsonb));
			ELSIF jsonb_typeof(v_e -> 'retryable') IS DISTINCT FROM 'boolean' THEN
				RAISE EXCEPTION 'retryable must be true or false' USING ERRCODE = 'invalid_parameter_value';
			ELSE
				answer := payflow.fail_step(v_e ->> 'operationId', p_step, p_worker_id, v_e -> 'error',
											(v_e ->> 'retryable')::boolean);
			END IF;
		EXCEPTION WHEN OTHERS THEN
			answer := NULL;
			error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
		END;
		RETURN NEXT;
	END LOOP;
END
$$;

-- claim_step for several operations at once (at most 100): one row per
-- item (item = its position in operation_ids; a repeated id is answered
-- again, as a second claim_step call would be: busy), with claim_step's
-- answer or, for that item alone, error = {"code": SQLSTATE, "message"}.
-- input carries the step's input payload when it is in the "pg" store.
CREATE FUNCTION payflow.claim_steps(step text, worker_id text, operation_ids text[],
									lease_seconds integer DEFAULT 300)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, input bytea, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	v_done boolean[];
	v_n integer;
	v_fast integer := 0;
BEGIN
	-- The fast path first: it checks the arguments inside its statement and
	-- takes no item of a call with a wrong one, so the checks below run only
	-- when some item needs the full logic (each is a statement: 40 us a
	-- call when they ran first).
	IF cardinality(operation_ids) <= 100 THEN
		v_done := array_fill(false, ARRAY[cardinality(operation_ids)]);
		FOR r IN SELECT * FROM payflow._claim_fast(step, worker_id, operation_ids, lease_seconds) LOOP
			item := r.item; operation_id := r.operation_id; answer := r.answer; input := r.input; error := NULL;
			v_done[r.item] := true;
			v_fast := v_fast + 1;
			RETURN NEXT;
		END LOOP;
		IF v_fast = cardinality(operation_ids) THEN
			RETURN;
		END IF;
	END IF;
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, lease_seconds);
	PERFORM payflow._require_batch('operation_ids', cardinality(operation_ids));
	FOR v_n IN 1 .. cardinality(operation_ids) LOOP
		CONTINUE WHEN v_done[v_n];
		item := v_n; operation_id := operation_ids[v_n]; input := NULL; error := NULL;
		BEGIN
			answer := payflow._claim_step_full(operation_ids[v_n], step, worker_id, lease_seconds);
			IF answer ->> 'action' = 'run' THEN
				input := payflow._inline_input(answer -> 'input');
			END IF;
		EXCEPTION WHEN OTHERS THEN
			answer := NULL;
			error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
		END;
		RETURN NEXT;
	END LOOP;
END
$$;

-- complete_step for several steps of one kind at once (at most 100):
-- items is a JSON array of {"operationId", "result", "resultRef"}; one row
-- per item with complete_step's answer or, for that item alone, an error.
CREATE FUNCTION payflow.complete_steps(step text, worker_id text, items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	v_done boolean[];
	v_fast integer := 0;
BEGIN
	-- The fast path first, as in claim_steps: it takes only well-formed
	-- items of a known step by a valid worker id.
	IF jsonb_typeof(items) = 'array' AND jsonb_array_length(items) BETWEEN 1 AND 100 THEN
		v_done := array_fill(false, ARRAY[jsonb_array_length(items)]);
		FOR r IN SELECT * FROM payflow._complete_fast(step, worker_id, items) LOOP
			item := r.item; operation_id := r.operation_id; answer := r.answer; error := NULL;
			v_done[r.item] := true;
			v_fast := v_fast + 1;
			RETURN NEXT;
		END LOOP;
		IF v_fast = jsonb_array_length(items) THEN
			RETURN;
		END IF;
	END IF;
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(false, step, worker_id, items, v_done);
END
$$;

-- fail_step for several steps of one kind at once (at most 100): items is
-- a JSON array of {"operationId", "error", "retryable"}; one row per item
-- with fail_step's answer or, for that item alone, an error.  Failures are
-- the rare path: each item takes fail_step's own logic.
CREATE FUNCTION payflow.fail_steps(step text, worker_id text, items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(true, step, worker_id, items, NULL);
END
$$;

-- Room for a second version of every row of a page, so that claims stay
-- HOT (see payflow.sql); pages written from now on.
ALTER TABLE payflow.outbox SET (fillfactor = 30);

-- An event's SQS attributes (eventType, operationId, correlationId) are
-- read from its body when it is claimed: 90 bytes less per event, and they
-- cannot disagree with the body.
ALTER TABLE payflow.outbox DROP COLUMN attributes;

-- The claim's seq-order index becomes partial on a predicate only the
-- claim states, so that no other query can use it (see tables.sql).  The
-- outbox holds only the backlog: the rebuild is short.
DROP INDEX payflow.outbox_seq_idx;
CREATE INDEX outbox_seq_idx ON payflow.outbox (seq) WHERE seq > 0;

-- A UUID's digit groups are no card number (dead-lettered bodies kept
-- their event ids altered now and then).
CREATE OR REPLACE FUNCTION payflow._mask_card_numbers(value text) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	-- A UUID's digit groups are no card number: "17678424-4288-4eea-..."
	-- holds the Luhn-valid run 1767842442884, and masking it would change
	-- event ids and operation bodies kept in dead letters for replay.
	-- UUIDs are set aside behind placeholders of non-digits while runs are
	-- looked for, then put back.
	c_uuid constant text := '[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}';
	v_uuids text[];
	v_match text;
	v_digits text;
	v_sum integer;
	v_digit integer;
	v_out text := value;
BEGIN
	IF value !~ '[0-9]{4}' THEN
		RETURN value;
	END IF;
	-- (a text already holding the placeholder mark is searched whole:
	-- masking too much is the safe side)
	IF strpos(value, chr(57344)) = 0 THEN
		v_uuids := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(value, '(' || c_uuid || ')', 'g') m);
		FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
			v_out := replace(v_out, v_uuids[i], chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345));
		END LOOP;
	END IF;
	FOR v_match IN SELECT DISTINCT m[1] FROM regexp_matches(v_out, '(?<![0-9])([0-9](?:[ -]?[0-9]){12,18})(?![0-9])', 'g') m LOOP
		v_digits := regexp_replace(v_match, '[^0-9]', '', 'g');
		v_sum := 0;
		FOR i IN 1..length(v_digits) LOOP
			v_digit := substr(v_digits, length(v_digits) - i + 1, 1)::integer;
			IF i % 2 = 0 THEN
				v_digit := v_digit * 2;
				IF v_digit > 9 THEN
					v_digit := v_digit - 9;
				END IF;
			END IF;
			v_sum := v_sum + v_digit;
		END LOOP;
		IF v_sum % 10 = 0 THEN
			v_out := replace(v_out, v_match, repeat('*', length(v_digits) - 4) || right(v_digits, 4));
		END IF;
	END LOOP;
	FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
		v_out := replace(v_out, chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345), v_uuids[i]);
	END LOOP;
	RETURN v_out;
END
$$;

-- Claims a step for a worker: "run" (new step, due retry, expired lease),
-- "skip" (done, failed, terminal, retry not yet due) or "busy" (another
-- worker's lease is live, or the step is not ready yet).  The common case
-- is one statement (_claim_fast); the others take _claim_step_full.
CREATE OR REPLACE FUNCTION payflow.claim_step(operation_id text, step text, worker_id text,
								   lease_seconds integer DEFAULT 300)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	SELECT f.answer INTO v_answer FROM payflow._claim_fast(step, worker_id, ARRAY[operation_id], lease_seconds) f;
	IF FOUND THEN
		RETURN v_answer;
	END IF;
	RETURN payflow._claim_step_full(operation_id, step, worker_id, lease_seconds);
END
$$;

-- Records a step's success in one transaction: step done, status advanced,
-- result stored, the next event in the outbox.  A repeated call returns the
-- first call's answer.  The common case is one statement (_complete_fast).
CREATE OR REPLACE FUNCTION payflow.complete_step(operation_id text, step text, worker_id text, result jsonb,
									  result_ref jsonb DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	IF result_ref IS NULL THEN
		SELECT f.answer INTO v_answer
		  FROM payflow._complete_fast(step, worker_id,
									  jsonb_build_array(jsonb_build_object('operationId', operation_id,
																		   'result', result))) f;
		IF FOUND THEN
			RETURN v_answer;
		END IF;
	END IF;
	RETURN payflow._complete_step_full(operation_id, step, worker_id, result, result_ref);
END
$$;

-- Where the outbox's live rows begin: the claim starts there, not at the
-- acked rows VACUUM has not removed yet (see tables.sql and outbox.sql).
CREATE UNLOGGED TABLE payflow._outbox_cursor (
	id boolean PRIMARY KEY DEFAULT true CHECK (id),
	low_seq bigint NOT NULL DEFAULT 0,
	pending_end bigint,
	moved_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	moved_by xid8,
	reset_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO payflow._outbox_cursor DEFAULT VALUES;
GRANT SELECT ON payflow._outbox_cursor TO payflow_admin;

CREATE FUNCTION payflow._outbox_cursor_move() RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	k record;
	v_end bigint;
	v_low bigint;
BEGIN
	SELECT c.low_seq, c.pending_end, c.reset_at, c.moved_by, c.xmin AS written_by INTO k
	  FROM payflow._outbox_cursor c FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		-- Another session is moving it, or a crash emptied the table.  (Not
		-- INSERT ... ON CONFLICT first: it would wait for the other session.)
		SELECT c.low_seq INTO v_low FROM payflow._outbox_cursor c;
		IF NOT FOUND THEN
			INSERT INTO payflow._outbox_cursor DEFAULT VALUES ON CONFLICT DO NOTHING;
		END IF;
		RETURN coalesce(v_low, 0);
	END IF;
	v_low := k.low_seq;
	-- the sequence's next value, before the snapshots of the statements below
	SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END INTO v_end
	  FROM payflow.outbox_seq_seq s;
	IF v_low > v_end OR k.reset_at < clock_timestamp() - interval '1 minute' THEN
		v_low := 0;
		k.reset_at := clock_timestamp();
	ELSIF k.pending_end IS NOT NULL AND k.moved_by IS DISTINCT FROM pg_catalog.pg_current_xact_id() THEN
		-- (a move earlier in this transaction has not ended: the next one
		-- will look)
		-- One statement, one snapshot: the horizon check and the rows it
		-- sees.  The xid that wrote this version of the row, as an xid8: the
		-- snapshot's xmax is newer (that transaction has ended: its row lock
		-- is ours), and the distance is under 2^32 (else the result is newer
		-- than the truth, which only delays the move).  Not this
		-- transaction's xid: it may be older than that one.
		SELECT CASE WHEN x.horizon > x.xmax - (x.xmax % 4294967296 - k.written_by::text::numeric + 4294967296) % 4294967296
					THEN LEAST(k.pending_end,
							   (SELECT o.seq FROM payflow.outbox o
								 WHERE o.seq > 0 AND o.seq >= k.low_seq	-- outbox_seq_idx
								 ORDER BY o.seq LIMIT 1))
					ELSE k.low_seq END
		  INTO v_low
		  FROM (SELECT pg_catalog.pg_snapshot_xmin(s.s)::text::numeric AS horizon,
					   pg_catalog.pg_snapshot_xmax(s.s)::text::numeric AS xmax
				  FROM (SELECT pg_catalog.pg_current_snapshot() AS s) s) x;
		v_low := GREATEST(k.low_seq, v_low);
	END IF;
	-- Written in a subtransaction, whose first write takes a new xid: newer
	-- than the xid of every transaction that drew a seq below v_end, and it
	-- is the row version's xmin, which the next move reads back.  (Not the
	-- snapshot's xmax: that is the newest ended xid + 1, and a running writer
	-- can hold a newer one.  Nor this transaction's xid, which it may have
	-- taken before such a writer took its own.)
	BEGIN
		UPDATE payflow._outbox_cursor c
		   SET low_seq = v_low, pending_end = v_end, moved_at = clock_timestamp(), reset_at = k.reset_at,
			   moved_by = pg_catalog.pg_current_xact_id();
	EXCEPTION WHEN OTHERS THEN
		RAISE;
	END;
	RETURN v_low;
END
$$;

-- Claims up to max_events outbox rows for a relay, oldest first, at most
-- one per message group: a later event of a group is never handed out
-- while an earlier one is unacked, so per-payment order holds even with
-- several relays.  A claim is a lease: rows of a relay that died come
-- back after lease_seconds.
--
-- The plan is pinned to index probes whatever the statistics say (see
-- outbox.sql): the scan can use outbox_seq_idx only, the group-head probe
-- outbox_group_idx only, and no sort.
CREATE OR REPLACE FUNCTION payflow.outbox_claim(max_events integer, relay_id text, lease_seconds integer DEFAULT 30)
	RETURNS TABLE (event_id uuid, destination text, message_group_id text, dedup_id text,
				   body text, attributes jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	SET enable_seqscan = off
	-- a disabled node costs 1e10, which would JIT-compile every call (200 ms)
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_sort = off
	AS $$
DECLARE
	v_low bigint;
	v_moved_at timestamptz;
BEGIN
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	-- Capped: one relay login must not be able to lease the whole outbox
	-- for a day.
	IF max_events IS NULL OR max_events < 1 OR max_events > 1000 THEN
		RAISE EXCEPTION 'max_events must be between 1 and 1000' USING ERRCODE = 'invalid_parameter_value';
	ELSIF lease_seconds IS NULL OR lease_seconds < 1 OR lease_seconds > 600 THEN
		RAISE EXCEPTION 'lease_seconds must be between 1 and 600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT k.low_seq, k.moved_at INTO v_low, v_moved_at FROM payflow._outbox_cursor k;
	IF v_moved_at IS NULL OR v_moved_at < clock_timestamp() - interval '100 milliseconds' THEN
		v_low := payflow._outbox_cursor_move();
	END IF;
	RETURN QUERY
		WITH candidates AS (
			SELECT c.ctid
			  FROM payflow.outbox c
			 WHERE c.seq > 0	-- outbox_seq_idx's predicate: see above
			   AND c.seq >= v_low
			   AND c.available_at <= now()
			   AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now())
			   AND c.seq = (SELECT e.seq FROM payflow.outbox e
							 WHERE e.message_group_id = c.message_group_id
							 ORDER BY e.message_group_id, e.seq LIMIT 1)
			 ORDER BY c.seq
			 LIMIT max_events
			   FOR UPDATE SKIP LOCKED
		)
		UPDATE payflow.outbox u
		   SET claimed_by = relay_id,
			   claim_expires_at = now() + make_interval(secs => lease_seconds),
			   attempts = u.attempts + 1
		  FROM candidates
		 WHERE u.ctid = candidates.ctid
		RETURNING u.event_id, u.destination, u.message_group_id, u.event_id::text,
				  u.body::text,
				  -- the attributes follow the body, so they can never tell another story
				  payflow._event_attributes(u.operation_id, u.body ->> 'correlationId', u.event_type);
END
$$;

-- The C-free flavour's wake-up probe walks the outbox from the cursor too.
--@@ flavour include wake_listeners.sql @@

-- Creates an operation, or returns the one its idempotency key already
-- names.  Concurrent calls with one key serialise on the unique index: the
-- second waits for the first to commit, then finds its row.  One statement
-- writes all five rows: submit is the hottest path and every statement
-- costs an executor start-up.
CREATE OR REPLACE FUNCTION payflow._create_operation(p_payment_id text, p_idempotency_key text,
										  p_correlation_id text, p_request_hash bytea,
										  p_request_ref jsonb, p_content bytea)
	RETURNS text
	LANGUAGE plpgsql
	-- One plan per session, not a custom one at each of the first five
	-- calls and then the generic one: in the pipeline bench (sessions of
	-- a hundred submits) the five cost 0.33 ms each.  No scan here depends
	-- on the statistics: keys and the conflict check of a unique index.
	SET plan_cache_mode = force_generic_plan
	AS $$
DECLARE
	v_id text := payflow._new_operation_id();
	v_event_id uuid := gen_random_uuid();
	v_ref jsonb := coalesce(p_request_ref,
							jsonb_build_object('store', 'pg',
											   'key', payflow._payload_key(v_id, 'request.json'),
											   'checksum', payflow._checksum(p_content),
											   'size', octet_length(p_content)));
	v_tenant text := payflow._current_tenant();
	v_created text;
	v_existing payflow.operations;
BEGIN
	WITH f AS MATERIALIZED (
		SELECT d.* FROM payflow.step_definitions d
		 WHERE d.pipeline_version = payflow._pipeline_version() AND d.position = 1
	), op AS (
		INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key, request_hash,
										correlation_id, request_ref, status, current_step, pipeline_version)
		SELECT v_id, v_tenant, p_payment_id, p_idempotency_key, p_request_hash, p_correlation_id, v_ref,
			   f.ready_status, f.step_name, f.pipeline_version
		  FROM f
		ON CONFLICT ON CONSTRAINT operations_idempotency_key DO NOTHING
		RETURNING id, status, current_step
	), payload AS (
		INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
		SELECT v_ref ->> 'key', op.id, v_ref ->> 'checksum', octet_length(p_content), p_content
		  FROM op WHERE p_content IS NOT NULL
	), step AS (
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		SELECT op.id, op.current_step, v_ref, now() FROM op
	), history AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT op.id, NULL, op.status, 'submitted', session_user FROM op
	), event AS (
		SELECT payflow._outbox_write_all(ARRAY[v_event_id], ARRAY[op.id], ARRAY[p_payment_id],
										 ARRAY[f.request_event], ARRAY[f.destination],
										 ARRAY[payflow._event_body(v_event_id, op.id, p_payment_id, p_correlation_id,
																   f.request_event, 1,
																   jsonb_build_object(f.input_field, v_ref))])
		  FROM op, f
	)
	-- event is read here, so it runs
	SELECT op.id INTO v_created FROM op LEFT JOIN event ON true;

	IF v_created IS NULL THEN
		SELECT * INTO v_existing FROM payflow.operations
		 WHERE tenant = v_tenant AND idempotency_key = p_idempotency_key;
		IF v_existing.request_hash <> p_request_hash THEN
			RAISE EXCEPTION 'idempotency key "%" was already used with other details', p_idempotency_key
				USING ERRCODE = 'PF002',
					  DETAIL = format('Operation %s was created with this key.', v_existing.id),
					  HINT = 'Use a new idempotency key for a new payment request.';
		END IF;
		RETURN v_existing.id;
	END IF;
	RETURN v_id;
END
$$;

-- Creates an operation for a payment request and returns its id at once.
CREATE OR REPLACE FUNCTION payflow.submit(payment_id text, details jsonb,
							   idempotency_key text DEFAULT NULL,
							   correlation_id text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_content bytea;
BEGIN
	-- The checks as one expression (no statement to run); only bad input
	-- takes the helpers, which raise the precise error.
	IF payment_id IS NULL OR payment_id = '' OR length(payment_id) > 255 OR payment_id ~ '[[:cntrl:]]'
	   OR idempotency_key = '' OR length(idempotency_key) > 255 OR idempotency_key ~ '[[:cntrl:]]'
	   OR correlation_id = '' OR length(correlation_id) > 255 OR correlation_id ~ '[[:cntrl:]]'
	   OR details IS NULL OR jsonb_typeof(details) <> 'object' THEN
		PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
		PERFORM payflow._require_object('details', details);
	END IF;
	v_content := convert_to(details::text, 'UTF8');
	IF octet_length(v_content) > payflow._setting('payload_max_bytes')::bigint THEN
		PERFORM payflow._require_size('details', octet_length(v_content));
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		sha256(convert_to(payment_id, 'UTF8') || '\x00'::bytea || v_content),
		NULL, v_content);
END
$$;

-- outbox_ack keeps one generic plan per session (see outbox.sql: it was
-- planned again in most calls).
ALTER FUNCTION payflow.outbox_ack(uuid[], text[], text)
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	SET jit = off;

REVOKE ALL ON FUNCTION
	payflow._require_batch(text, integer),
	payflow._require_items(jsonb),
	payflow._inline_input(jsonb),
	payflow._verified_content(jsonb, bytea),
	payflow._claim_step_full(text, text, text, integer),
	payflow._complete_step_full(text, text, text, jsonb, jsonb),
	payflow._completion_answer(payflow.operations, payflow.step_definitions, uuid),
	payflow._claim_fast(text, text, text[], integer),
	payflow._complete_fast(text, text, jsonb),
	payflow._outcomes_one_by_one(boolean, text, text, jsonb, boolean[]),
	payflow.claim_steps(text, text, text[], integer),
	payflow.complete_steps(text, text, jsonb),
	payflow.fail_steps(text, text, jsonb),
	payflow.run_hook_steps(text, text, regprocedure, text[], integer),
	payflow._outbox_write_all(uuid[], text[], text[], text[], text[], jsonb[]),
	payflow._outbox_cursor_move(),
	payflow._outbox_figures()
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	payflow.claim_steps(text, text, text[], integer),
	payflow.complete_steps(text, text, jsonb),
	payflow.fail_steps(text, text, jsonb)
	TO payflow_step_worker;
GRANT EXECUTE ON FUNCTION payflow.run_hook_steps(text, text, regprocedure, text[], integer)
	TO payflow_postprocess_worker;

-- run_scheduler_for sleeps its nap in slices of 50 ms, each its own
-- transaction, so it no longer holds the xmin horizon back for the whole
-- nap (see scheduler.sql).
CREATE OR REPLACE PROCEDURE payflow.run_scheduler_for(seconds integer DEFAULT 58)
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_until timestamptz;
	v_naptime float8;
	v_wake timestamptz;
BEGIN
	IF seconds IS NULL OR seconds < 1 OR seconds > 3600 THEN
		RAISE EXCEPTION 'seconds must be between 1 and 3600' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_until := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => seconds);
	LOOP
		PERFORM payflow.run_scheduler();
		COMMIT;
		v_naptime := payflow._setting('scheduler_naptime')::float8 OPERATOR(pg_catalog./) 1000;
		v_wake := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => v_naptime);
		EXIT WHEN v_wake OPERATOR(pg_catalog.>) v_until;
		LOOP
			PERFORM pg_catalog.pg_sleep(LEAST(0.05, pg_catalog.date_part('epoch',
								v_wake OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())));
			COMMIT;
			EXIT WHEN pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) v_wake;
		END LOOP;
	END LOOP;
END
$$;

--@@ include pipeline.sql @@

--@@ include admin.sql @@

--@@ include comments.sql @@
