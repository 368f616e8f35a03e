-- payflow 0.1.0 -> 0.2.0: tenants for the HTTP edge (authenticate, tenant-
-- scoped submit/status/history/cancel, row-level security for payflow_app),
-- the status-change feed for event streams (changes, NOTIFY payflow_status)
-- and webhooks (set_webhook, webhook_target, failures and their replay).
-- extension/sql/payflow.sql is the full script of 0.2.0; a test checks that
-- installing 0.2.0 and updating 0.1.0 give the same schema.

\echo Use "ALTER EXTENSION payflow UPDATE TO '0.2.0'" to load this file. \quit

-- Marks this transaction as one that changed an operation's status
-- (NOTIFY payflow_status for event streams at commit).
CREATE FUNCTION payflow._status_changed() RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_status_changed' LANGUAGE C VOLATILE;

-- The tenant payflow.authenticate() bound to this transaction, else ''.
-- Backend-local state, hence PARALLEL RESTRICTED.
CREATE FUNCTION payflow._current_tenant() RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_current_tenant' LANGUAGE C STABLE PARALLEL RESTRICTED;

-- Binds a tenant to the current transaction; only authenticate() calls it.
CREATE FUNCTION payflow._set_tenant(tenant text) RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_set_tenant' LANGUAGE C VOLATILE STRICT;

-- A tenant's webhook: where its OperationCompleted / OperationFailed events
-- are POSTed, and the secret they are signed with (HMAC-SHA256).  The
-- secret is kept in clear because the webhook worker must sign with it;
-- only set_webhook (once) and webhook_target (payflow_worker) return it.
CREATE TABLE payflow.webhooks (
	tenant text COLLATE "C" PRIMARY KEY,
	url text NOT NULL,
	secret text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now()
);

-- Webhook deliveries that failed their last attempt: one row per event,
-- kept until replayed and purged like failed operations.
CREATE TABLE payflow.webhook_failures (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	event_id uuid NOT NULL UNIQUE,
	operation_id text COLLATE "C" NOT NULL,
	tenant text COLLATE "C" NOT NULL,
	url text NOT NULL,
	body jsonb NOT NULL,
	attempts integer NOT NULL,
	error jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	replayed_at timestamptz
);

CREATE INDEX webhook_failures_updated_idx ON payflow.webhook_failures (updated_at);

-- Changes an operation's status after the C transition check and appends
-- the history row.  The caller holds the operation's row lock.
CREATE OR REPLACE FUNCTION payflow._set_status(p_operation_id text, p_from text, p_to text,
									p_reason text, p_actor text, p_replay boolean DEFAULT false)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	UPDATE payflow.operations
	   SET status = payflow._check_transition(p_from, p_to, p_replay),
		   updated_at = now(),
		   terminal_at = CASE WHEN payflow._is_terminal(p_to) THEN now() END
	 WHERE id = p_operation_id;
	INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
	VALUES (p_operation_id, p_from, p_to, left(p_reason, 500), p_actor);
	PERFORM payflow._status_changed();
END
$$;

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
	AS $$
DECLARE
	v_id text := payflow._new_operation_id();
	v_event_id uuid := gen_random_uuid();
	v_ref jsonb := coalesce(p_request_ref,
							jsonb_build_object('store', 'pg',
											   'key', 'payments/' || v_id || '/request.json',
											   'checksum', payflow._checksum(p_content),
											   'size', octet_length(p_content)));
	v_tenant text := payflow._current_tenant();
	v_created text;
	v_existing payflow.operations;
BEGIN
	WITH op AS (
		INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key, request_hash,
										correlation_id, request_ref)
		VALUES (v_id, v_tenant, p_payment_id, p_idempotency_key, p_request_hash, p_correlation_id, v_ref)
		ON CONFLICT ON CONSTRAINT operations_idempotency_key DO NOTHING
		RETURNING id
	), payload AS (
		INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
		SELECT v_ref ->> 'key', op.id, v_ref ->> 'checksum', octet_length(p_content), p_content
		  FROM op WHERE p_content IS NOT NULL
	), step AS (
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		SELECT op.id, 'PROCESS_PAYMENT', v_ref, now() FROM op
	), history AS (
		INSERT INTO payflow.operation_history (operation_id, from_status, to_status, reason, actor)
		SELECT op.id, NULL, 'PENDING', 'submitted', session_user FROM op
	), event AS (
		INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination,
									message_group_id, body, attributes)
		SELECT v_event_id, op.id, 'PaymentRequested', 'payment-requests', p_payment_id,
			   payflow._event_body(v_event_id, op.id, p_payment_id, p_correlation_id,
								   'PaymentRequested', 1, jsonb_build_object('payload', v_ref)),
			   payflow._event_attributes(op.id, p_correlation_id, 'PaymentRequested')
		  FROM op
	)
	SELECT id INTO v_created FROM op;

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
	PERFORM payflow._outbox_written();
	RETURN v_id;
END
$$;

-- The status document of an operation of the current tenant (another
-- tenant's operation is reported like an unknown one: PF003).
CREATE OR REPLACE FUNCTION payflow.status(operation_id text) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_doc jsonb;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	SELECT jsonb_build_object(
			   'operationId', o.id,
			   'paymentId', o.payment_id,
			   'status', o.status,
			   'currentStep', o.current_step,
			   'attempts', coalesce(s.attempt, 0),
			   'nextAttemptAt', payflow._iso(s.next_attempt_at),
			   'error', coalesce(o.error, CASE WHEN s.status = 'RETRY_WAIT' THEN s.last_error END),
			   'result', o.result,
			   'correlationId', o.correlation_id,
			   'terminal', payflow._is_terminal(o.status),
			   'createdAt', payflow._iso(o.created_at),
			   'updatedAt', payflow._iso(o.updated_at),
			   'completedAt', payflow._iso(o.terminal_at))
	  INTO v_doc
	  FROM payflow.operations o
	  LEFT JOIN payflow.steps s ON s.operation_id = o.id AND s.step_name = o.current_step
	 WHERE o.id = status.operation_id AND o.tenant = payflow._current_tenant();
	IF v_doc IS NULL THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN v_doc;
END
$$;

-- The status transitions of an operation of the current tenant, oldest first.
CREATE OR REPLACE FUNCTION payflow.history(operation_id text)
	RETURNS TABLE (at timestamptz, from_status text, to_status text, reason text, actor text)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	IF NOT EXISTS (SELECT FROM payflow.operations o
				    WHERE o.id = history.operation_id AND o.tenant = payflow._current_tenant()) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN QUERY
		SELECT h.at, h.from_status, h.to_status, h.reason, h.actor
		  FROM payflow.operation_history h
		 WHERE h.operation_id = history.operation_id
		 ORDER BY h.id;
END
$$;

-- Cancels a PENDING operation of the current tenant.  False if it was already cancelled; PF006
-- if it ended otherwise; PF001 once a worker has started it.
CREATE OR REPLACE FUNCTION payflow.cancel(operation_id text, reason text DEFAULT NULL) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	IF reason IS NOT NULL THEN
		PERFORM payflow._require_text('reason', reason, 500);
	END IF;
	o := payflow._lock_operation(operation_id);
	IF o.tenant <> payflow._current_tenant() THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF o.status = 'CANCELLED' THEN
		RETURN false;
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status USING ERRCODE = 'PF006';
	END IF;
	PERFORM payflow._set_status(o.id, o.status, 'CANCELLED', coalesce(reason, 'cancelled'), session_user);
	UPDATE payflow.operations
	   SET error = jsonb_strip_nulls(jsonb_build_object('code', 'cancelled', 'message', reason))
	 WHERE id = o.id;
	UPDATE payflow.steps
	   SET status = 'CANCELLED', pending_since = NULL, next_attempt_at = NULL, finished_at = now()
	 WHERE steps.operation_id = o.id AND status IN ('PENDING', 'RETRY_WAIT');
	RETURN true;
END
$$;

-- TTL clean-up in bounded batches (each kind at most max_rows rows per
-- call; "more" says whether to call again):
-- payloads of completed/cancelled operations after retention_payloads;
-- operations (with steps, history, payloads, dead letters) after
-- retention_completed, or retention_failed for FAILED ones; the published
-- log; old consumed-event ids; and pg_cron's run details of payflow's jobs,
-- which pg_cron never prunes itself.
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
	IF max_rows IS NULL OR max_rows < 1 THEN
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
	 WHERE p.key >= 'payments/' || ops.id || '/' AND p.key < 'payments/' || ops.id || '0';
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
		 WHERE c.key >= 'payments/' || ops.id || '/' AND c.key < 'payments/' || ops.id || '0'
	), del_dead AS (
		DELETE FROM payflow.dead_letters c USING ops WHERE c.operation_id = ops.id
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

-- Health figures for dashboards and alarms.
CREATE OR REPLACE FUNCTION payflow.metrics() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
	SELECT jsonb_build_object(
		'operations', (
			SELECT coalesce(jsonb_object_agg(status, jsonb_build_object(
					   'count', n, 'oldestAgeSeconds', round(age::numeric, 3))), '{}'::jsonb)
			  FROM (SELECT status, count(*) AS n,
						   extract(epoch FROM now() - min(updated_at)) AS age
					  FROM payflow.operations GROUP BY status) s),
		'outbox', (
			SELECT jsonb_build_object(
					   'backlog', count(*),
					   'inFlight', count(*) FILTER (WHERE claim_expires_at > now()),
					   'failing', count(*) FILTER (WHERE last_error IS NOT NULL),
					   'oldestAgeSeconds', round(coalesce(extract(epoch FROM now() - min(created_at)), 0)::numeric, 3))
			  FROM payflow.outbox),
		'steps', (
			SELECT coalesce(jsonb_object_agg(step_name, jsonb_build_object(
					   'pending', pending, 'running', running, 'retryWaiting', retry_waiting,
					   'finishedLastHour', finished,
					   'runSecondsP50', round(p50::numeric, 3), 'runSecondsP95', round(p95::numeric, 3))), '{}'::jsonb)
			  FROM (SELECT step_name,
						   count(*) FILTER (WHERE status = 'PENDING') AS pending,
						   count(*) FILTER (WHERE status = 'RUNNING') AS running,
						   count(*) FILTER (WHERE status = 'RETRY_WAIT') AS retry_waiting,
						   count(*) FILTER (WHERE finished_at > now() - interval '1 hour') AS finished,
						   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - claimed_at))
							   FILTER (WHERE status = 'SUCCEEDED' AND finished_at > now() - interval '1 hour') AS p50,
						   percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - claimed_at))
							   FILTER (WHERE status = 'SUCCEEDED' AND finished_at > now() - interval '1 hour') AS p95
					  FROM payflow.steps GROUP BY step_name) s),
		'failureRateLastHour', (
			SELECT round(coalesce(count(*) FILTER (WHERE status = 'FAILED')::numeric
								  / nullif(count(*) FILTER (WHERE status IN ('COMPLETED', 'FAILED')), 0), 0), 4)
			  FROM payflow.operations
			 WHERE terminal_at > now() - interval '1 hour'),
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

-- Checks an API key of the HTTP edge and binds its tenant to the current
-- transaction: submit, status, history, cancel and changes then act in that
-- tenant, and row-level security shows payflow_app only its rows.  An
-- autocommit caller puts both in one statement:
--   SELECT payflow.status($2) FROM payflow.authenticate($1);
-- Unknown, revoked or empty keys all get the same error (28000).
CREATE FUNCTION payflow.authenticate(api_key text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
BEGIN
	IF api_key IS NOT NULL AND octet_length(api_key) BETWEEN 1 AND 200 THEN
		SELECT k.tenant INTO v_tenant
		  FROM payflow.api_keys k
		 WHERE k.key_hash = sha256(convert_to(api_key, 'UTF8')) AND k.revoked_at IS NULL;
	END IF;
	IF v_tenant IS NULL THEN
		RAISE EXCEPTION 'invalid API key'
			USING ERRCODE = 'invalid_authorization_specification',
				  HINT = 'Use a key made by payflow.create_api_key() that was not revoked.';
	END IF;
	PERFORM payflow._set_tenant(v_tenant);
	RETURN v_tenant;
END
$$;

-- The status changes of the given operations of the current tenant after
-- history id after_id, for event streams (the HTTP edge's SSE).  Ids grow
-- in commit order within one operation (its row lock serialises them), not
-- across operations: callers keep a last-seen id per operation.
CREATE FUNCTION payflow.changes(operation_ids text[], after_id bigint DEFAULT 0)
	RETURNS TABLE (operation_id text, id bigint, at timestamptz, from_status text,
				   to_status text, reason text, terminal boolean)
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF operation_ids IS NULL THEN
		RAISE EXCEPTION 'operation_ids must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	ELSIF cardinality(operation_ids) > 10000 THEN
		RAISE EXCEPTION 'at most 10000 operation ids per call'
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	RETURN QUERY
		SELECT h.operation_id, h.id, h.at, h.from_status, h.to_status, h.reason,
			   payflow._is_terminal(h.to_status)
		  FROM payflow.operations o
		  JOIN payflow.operation_history h ON h.operation_id = o.id
		 WHERE o.id = ANY (changes.operation_ids)
		   AND o.tenant = payflow._current_tenant()
		   AND h.id > coalesce(changes.after_id, 0)
		 ORDER BY h.operation_id, h.id;
END
$$;

-- Where and how to deliver the webhook of an operation's tenant:
-- {"tenant","url","secret"}, or NULL when the tenant has no webhook.
CREATE FUNCTION payflow.webhook_target(operation_id text) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	SELECT o.tenant INTO v_tenant FROM payflow.operations o WHERE o.id = webhook_target.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN (SELECT jsonb_build_object('tenant', w.tenant, 'url', w.url, 'secret', w.secret)
			  FROM payflow.webhooks w WHERE w.tenant = v_tenant);
END
$$;

-- Records a webhook delivery that failed its last attempt (the delivery's
-- dead letter).  Idempotent per event: a second failure of the same event
-- (after a replay) updates the row, which is open for replay again.
CREATE FUNCTION payflow.record_webhook_failure(event_id uuid, operation_id text, body text,
											   attempts integer, error jsonb)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
	v_id bigint;
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('body', body, 262144);
	IF attempts IS NULL OR attempts < 1 THEN
		RAISE EXCEPTION 'attempts must be at least 1'
			USING ERRCODE = CASE WHEN attempts IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF error IS NOT NULL THEN
		PERFORM payflow._require_object('error', error);
	END IF;
	SELECT o.tenant INTO v_tenant FROM payflow.operations o
	 WHERE o.id = record_webhook_failure.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	INSERT INTO payflow.webhook_failures AS f (event_id, operation_id, tenant, url, body, attempts, error)
	VALUES (record_webhook_failure.event_id, record_webhook_failure.operation_id, v_tenant,
			coalesce((SELECT w.url FROM payflow.webhooks w WHERE w.tenant = v_tenant), ''),
			body::jsonb, attempts, error)
	ON CONFLICT ON CONSTRAINT webhook_failures_event_id_key DO UPDATE
		SET attempts = EXCLUDED.attempts, error = EXCLUDED.error, url = EXCLUDED.url,
			updated_at = now(), replayed_at = NULL
	RETURNING f.id INTO v_id;
	RETURN v_id;
END
$$;

-- Revokes an API key: authenticate() refuses it from the next call on.
-- False when it was already revoked.
CREATE FUNCTION payflow.revoke_api_key(key_id bigint) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF NOT EXISTS (SELECT FROM payflow.api_keys k WHERE k.id = key_id) THEN
		RAISE EXCEPTION 'API key % does not exist', key_id USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE payflow.api_keys k SET revoked_at = now() WHERE k.id = key_id AND k.revoked_at IS NULL;
	RETURN FOUND;
END
$$;

-- Registers (or replaces) a tenant's webhook URL and returns a new signing
-- secret, once.  Replacing rotates the secret.
CREATE FUNCTION payflow.set_webhook(tenant text, url text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_secret text := 'whsec_' || payflow._random_token(32);
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	PERFORM payflow._require_text('url', url, 2000);
	IF url !~* '^https?://[^/?#[:space:]]+([/?#][^[:space:]]*)?$' THEN
		RAISE EXCEPTION 'invalid webhook URL "%"', url
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use an http:// or https:// URL.';
	END IF;
	INSERT INTO payflow.webhooks AS w (tenant, url, secret)
	VALUES (set_webhook.tenant, set_webhook.url, v_secret)
	ON CONFLICT ON CONSTRAINT webhooks_pkey DO UPDATE
		SET url = EXCLUDED.url, secret = EXCLUDED.secret, updated_at = now();
	RETURN v_secret;
END
$$;

-- Removes a tenant's webhook; false when it had none.
CREATE FUNCTION payflow.delete_webhook(tenant text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	DELETE FROM payflow.webhooks w WHERE w.tenant = delete_webhook.tenant;
	RETURN FOUND;
END
$$;

-- Sends a failed webhook delivery again: the same event body goes back to
-- the operation-events queue (a new outbox row; the body's eventId is
-- unchanged, so receivers can de-duplicate).  False if already replayed.
CREATE FUNCTION payflow.replay_webhook(failure_id bigint) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	f payflow.webhook_failures;
BEGIN
	SELECT * INTO f FROM payflow.webhook_failures w WHERE w.id = failure_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'webhook failure % does not exist', failure_id USING ERRCODE = 'no_data_found';
	ELSIF f.replayed_at IS NOT NULL THEN
		RETURN false;
	END IF;
	INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination,
								message_group_id, body, attributes)
	VALUES (gen_random_uuid(), f.operation_id, f.body ->> 'eventType', 'operation-events',
			coalesce(f.body ->> 'paymentId', f.operation_id), f.body,
			payflow._event_attributes(f.operation_id, f.body ->> 'correlationId', f.body ->> 'eventType'));
	UPDATE payflow.webhook_failures w SET replayed_at = now() WHERE w.id = f.id;
	PERFORM payflow._outbox_written();
	RETURN true;
END
$$;

-- Privileges of what is new (re-running the blanket revokes is harmless).
REVOKE ALL ON ALL TABLES IN SCHEMA payflow FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA payflow FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	payflow.authenticate(text),
	payflow.changes(text[], bigint),
	payflow._current_tenant()
	TO payflow_app;

GRANT EXECUTE ON FUNCTION
	payflow.webhook_target(text),
	payflow.record_webhook_failure(uuid, text, text, integer, jsonb)
	TO payflow_worker;

GRANT EXECUTE ON FUNCTION
	payflow.revoke_api_key(bigint),
	payflow.set_webhook(text, text),
	payflow.delete_webhook(text),
	payflow.replay_webhook(bigint)
	TO payflow_admin;
GRANT SELECT ON payflow.webhook_failures TO payflow_admin;
GRANT SELECT (tenant, url, created_at, updated_at) ON payflow.webhooks TO payflow_admin;

-- Tenant isolation in the database, not only in the HTTP edge: payflow_app
-- reads its own tenant's operations and their history and nothing else
-- (the tenant is the one authenticate() bound to the transaction; '' for
-- plain SQL callers).  The functions above filter by tenant themselves:
-- they run as the owner, whom row-level security does not restrict.
GRANT SELECT (id, tenant, payment_id, idempotency_key, correlation_id, status, current_step,
			  result, error, created_at, updated_at, terminal_at)
	ON payflow.operations TO payflow_app;
GRANT SELECT ON payflow.operation_history TO payflow_app;
ALTER TABLE payflow.operations ENABLE ROW LEVEL SECURITY;
ALTER TABLE payflow.operation_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY operations_of_tenant ON payflow.operations FOR SELECT TO payflow_app
	USING (tenant = payflow._current_tenant());
CREATE POLICY history_of_tenant ON payflow.operation_history FOR SELECT TO payflow_app
	USING (EXISTS (SELECT FROM payflow.operations o WHERE o.id = operation_history.operation_id));
CREATE POLICY operations_for_admin ON payflow.operations FOR SELECT TO payflow_admin USING (true);
CREATE POLICY history_for_admin ON payflow.operation_history FOR SELECT TO payflow_admin USING (true);
