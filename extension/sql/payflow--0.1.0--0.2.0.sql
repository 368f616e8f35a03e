-- payflow 0.1.0 -> 0.2.0: tenants for the HTTP edge (authenticate, tenant-
-- scoped submit/status/history/cancel, row-level security for payflow_app),
-- the status-change feed for event streams (changes, NOTIFY payflow_status)
-- and webhooks (set_webhook, webhook_target, failures and their replay);
-- fixes from the bad-input review: no control characters in identifiers,
-- FIFO-safe message group ids, size limits on step results, NULL checks.
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

-- The role the caller acts as (login role or SET ROLE), also inside a
-- SECURITY DEFINER function, where current_user is the owner.
CREATE FUNCTION payflow._outer_role() RETURNS text
	AS 'MODULE_PATHNAME', 'payflow_outer_role' LANGUAGE C STABLE;

-- Binds a tenant to the current transaction; only authenticate() calls it.
CREATE FUNCTION payflow._set_tenant(tenant text) RETURNS void
	AS 'MODULE_PATHNAME', 'payflow_set_tenant' LANGUAGE C VOLATILE STRICT;

-- Identifiers that end up in hashes, message attributes and logs may not
-- hold control characters: the request hash of submit_ref joins fields with
-- newlines, and SQS refuses control characters in attribute values.
CREATE FUNCTION payflow._require_printable(arg_name text, value text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION '% must not contain control characters', arg_name
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
END
$$;

-- The message group of a payment's events: the payment id itself when SQS
-- FIFO accepts it as a MessageGroupId (at most 128 characters of letters,
-- digits and ASCII punctuation), else "sha256:" and its hash, which keeps
-- one group per payment.
CREATE FUNCTION payflow._message_group_id(payment_id text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT CASE WHEN length(payment_id) <= 128 AND payment_id ~ '^[!-~]+$' THEN payment_id
				ELSE 'sha256:' || encode(sha256(convert_to(payment_id, 'UTF8')), 'hex') END
$$;

-- Whether the caller may see an operation of this tenant: one of the
-- tenant authenticate() bound to the transaction ('' when none), or, for an
-- administrator (a member of payflow_admin, superusers included) who bound
-- none, every tenant's, so that operators can look up any operation.  The
-- caller's role decides (login or SET ROLE), not the functions' owner.
CREATE FUNCTION payflow._visible(op_tenant text) RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT op_tenant = payflow._current_tenant()
		   OR (payflow._current_tenant() = ''
			   AND pg_has_role(payflow._outer_role(), 'payflow_admin', 'USAGE'))
$$;

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

-- metrics(): the steps finished in the last hour, without reading the others.
CREATE INDEX steps_finished_idx ON payflow.steps (finished_at) WHERE finished_at IS NOT NULL;

-- Validates the arguments submit and submit_ref share.
CREATE OR REPLACE FUNCTION payflow._require_submit(payment_id text, idempotency_key text, correlation_id text)
	RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	PERFORM payflow._require_text('payment_id', payment_id, 255);
	PERFORM payflow._require_printable('payment_id', payment_id);
	IF idempotency_key IS NOT NULL THEN
		PERFORM payflow._require_text('idempotency_key', idempotency_key, 255);
		PERFORM payflow._require_printable('idempotency_key', idempotency_key);
	END IF;
	IF correlation_id IS NOT NULL THEN
		PERFORM payflow._require_text('correlation_id', correlation_id, 255);
		PERFORM payflow._require_printable('correlation_id', correlation_id);
	END IF;
END
$$;

-- Appends an event to the outbox and returns its id.
CREATE OR REPLACE FUNCTION payflow._emit(p_operation_id text, p_payment_id text, p_correlation_id text,
							  p_event_type text, p_destination text, p_attempt integer,
							  p_extra jsonb)
	RETURNS uuid
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_event_id uuid := gen_random_uuid();
BEGIN
	INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination,
								message_group_id, body, attributes)
	VALUES (v_event_id, p_operation_id, p_event_type, p_destination, payflow._message_group_id(p_payment_id),
			payflow._event_body(v_event_id, p_operation_id, p_payment_id, p_correlation_id,
								p_event_type, p_attempt, p_extra),
			payflow._event_attributes(p_operation_id, p_correlation_id, p_event_type));
	PERFORM payflow._outbox_written();
	RETURN v_event_id;
END
$$;

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
		SELECT v_event_id, op.id, 'PaymentRequested', 'payment-requests', payflow._message_group_id(p_payment_id),
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

-- Same as submit, for a request whose payload is already stored (S3, or a
-- "pg" payload written earlier); only its reference is kept.
CREATE OR REPLACE FUNCTION payflow.submit_ref(payment_id text, store text, key text, checksum text, size bigint,
								   idempotency_key text DEFAULT NULL,
								   correlation_id text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_stored payflow.payloads;
BEGIN
	PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
	PERFORM payflow._require_text('store', store, 16);
	PERFORM payflow._require_text('key', key, 1024);
	PERFORM payflow._require_printable('key', key);
	PERFORM payflow._require_text('checksum', checksum, 71);
	IF store NOT IN ('pg', 's3') THEN
		RAISE EXCEPTION 'unknown payload store "%"', store
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	END IF;
	IF checksum !~ '^sha256:[0-9a-f]{64}$' THEN
		RAISE EXCEPTION 'invalid checksum "%"', checksum
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A checksum is "sha256:" followed by 64 lower-case hex digits.';
	END IF;
	IF size IS NULL OR size < 0 THEN
		RAISE EXCEPTION 'size must be a non-negative number of bytes'
			USING ERRCODE = CASE WHEN size IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF store = 'pg' THEN
		SELECT * INTO v_stored FROM payflow.payloads p WHERE p.key = submit_ref.key;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', key USING ERRCODE = 'no_data_found';
		ELSIF v_stored.checksum <> checksum OR v_stored.size <> size THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', key USING ERRCODE = 'PF005';
		END IF;
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		sha256(convert_to(payment_id || E'\n' || store || E'\n' || key || E'\n' || checksum, 'UTF8')),
		jsonb_build_object('store', store, 'key', key, 'checksum', checksum, 'size', size),
		NULL);
END
$$;

-- The status document of an operation of the current tenant (another
-- tenant's operation is reported like an unknown one: PF003; see _visible).
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
	 WHERE o.id = status.operation_id AND payflow._visible(o.tenant);
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
				    WHERE o.id = history.operation_id AND payflow._visible(o.tenant)) THEN
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
	IF NOT payflow._visible(o.tenant) THEN
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

-- Renews a lease; false when this worker no longer holds it.  Touches one
-- unindexed column: a HOT update.
CREATE OR REPLACE FUNCTION payflow.heartbeat(operation_id text, step text, worker_id text,
								  lease_seconds integer DEFAULT 300)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('step', step, 64);
	PERFORM payflow._require_worker(worker_id, lease_seconds);
	UPDATE payflow.steps
	   SET lease_expires_at = now() + make_interval(secs => lease_seconds)
	 WHERE steps.operation_id = heartbeat.operation_id AND step_name = step
	   AND status = 'RUNNING' AND lease_owner = worker_id;
	IF FOUND THEN
		RETURN true;
	END IF;
	IF NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = heartbeat.operation_id) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	PERFORM payflow._step_definition(step);		-- an unknown step is an error (22023)
	RETURN false;
END
$$;

-- Saves an external job reference with a running step (submit-poll mode),
-- so a worker that takes the step over resumes polling instead of
-- submitting again.
CREATE OR REPLACE FUNCTION payflow.save_step_ref(operation_id text, step text, worker_id text, external_ref text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('step', step, 64);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_text('external_ref', external_ref, 1000);
	UPDATE payflow.steps s
	   SET external_ref = save_step_ref.external_ref
	 WHERE s.operation_id = save_step_ref.operation_id AND s.step_name = step
	   AND s.status = 'RUNNING' AND s.lease_owner = worker_id;
	IF NOT FOUND THEN
		IF NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = save_step_ref.operation_id) THEN
			PERFORM payflow._unknown_operation(operation_id);
		END IF;
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', worker_id, step
			USING ERRCODE = 'PF004', DETAIL = format('Operation %s.', operation_id);
	END IF;
	RETURN true;
END
$$;

-- Records a step's success in one transaction: step done, status advanced,
-- result stored, the next event in the outbox.  A repeated call returns the
-- first call's answer.
CREATE OR REPLACE FUNCTION payflow.complete_step(operation_id text, step text, worker_id text, result jsonb,
									  result_ref jsonb DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
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
	s := payflow._lock_step(o.id, d.step_name);
	IF s.status = 'SUCCEEDED' THEN
		RETURN s.completion;
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status
			USING ERRCODE = 'PF006',
				  HINT = 'A FAILED operation can be re-run with payflow.replay(); the step keeps its idempotency key.';
	END IF;
	PERFORM payflow._require_lease_holder(s, o.id, d.step_name, worker_id);

	IF v_ref IS NULL AND d.result_name IS NOT NULL THEN
		v_ref := payflow._payload_write(o.id, d.result_name, convert_to(result::text, 'UTF8'));
	END IF;

	PERFORM payflow._set_status(o.id, o.status, d.done_status, lower(d.step_name) || ' done', worker_id);

	SELECT * INTO n FROM payflow.step_definitions WHERE position = d.position + 1;
	IF FOUND THEN
		INSERT INTO payflow.steps (operation_id, step_name, input_ref, pending_since)
		VALUES (o.id, n.step_name, v_ref, now());
		UPDATE payflow.operations SET current_step = n.step_name WHERE id = o.id;
		v_event_type := n.request_event;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, n.request_event,
									n.destination, 1, jsonb_build_object(n.input_field, v_ref));
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
		UPDATE payflow.operations SET result = complete_step.result WHERE id = o.id;
		v_event_type := 'OperationCompleted';
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, 'OperationCompleted',
									'operation-events', s.attempt,
									jsonb_build_object('status', d.done_status, 'result', result));
	END IF;

	v_answer := jsonb_build_object('action', 'completed', 'status', d.done_status,
								   'eventType', v_event_type, 'eventId', v_event_id);
	UPDATE payflow.steps
	   SET status = 'SUCCEEDED', result = complete_step.result, result_ref = v_ref,
		   completion = v_answer, finished_at = now(),
		   lease_expires_at = NULL, pending_since = NULL, next_attempt_at = NULL
	 WHERE steps.operation_id = o.id AND step_name = d.step_name;
	RETURN v_answer;
END
$$;

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay.
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

	o := payflow._lock_operation(operation_id);
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

	PERFORM payflow._fail_operation(o, s,
		CASE WHEN retryable THEN error || jsonb_build_object('attemptsExhausted', true) ELSE error END,
		worker_id);
	RETURN jsonb_build_object('action', 'failed');
END
$$;

-- Claims up to max_events outbox rows for a relay, oldest first, at most
-- one per message group: a later event of a group is never handed out
-- while an earlier one is unacked, so per-payment order holds even with
-- several relays.  A claim is a lease: rows of a relay that died come
-- back after lease_seconds.
CREATE OR REPLACE FUNCTION payflow.outbox_claim(max_events integer, relay_id text, lease_seconds integer DEFAULT 30)
	RETURNS TABLE (event_id uuid, destination text, message_group_id text, dedup_id text,
				   body text, attributes jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('relay_id', relay_id, 200);
	PERFORM payflow._require_worker(relay_id, lease_seconds);
	IF max_events IS NULL OR max_events < 1 OR max_events > 10000 THEN
		RAISE EXCEPTION 'max_events must be between 1 and 10000' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN QUERY
		WITH candidates AS (
			SELECT c.ctid
			  FROM payflow.outbox c
			 WHERE c.available_at <= now()
			   AND (c.claim_expires_at IS NULL OR c.claim_expires_at <= now())
			   AND NOT EXISTS (SELECT FROM payflow.outbox e
								WHERE e.message_group_id = c.message_group_id AND e.seq < c.seq)
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
				  u.body::text, u.attributes;
END
$$;

-- Periodic work, run by the background worker (or pg_cron):
-- 1. expired leases: the step is retried (attempt + 1 at the next claim),
--    or the operation fails once max_attempts runs all died;
-- 2. due retries: the step's request event is emitted again;
-- 3. stuck steps, PENDING for payflow.stuck_after with no event of their
--    payment waiting in the outbox: the request event is emitted again.
--    This recovers operations whose message a queue lost.
-- Each part handles at most max_rows rows; rows locked by a worker are
-- skipped and seen next time.
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
BEGIN
	IF max_rows IS NULL THEN
		RAISE EXCEPTION 'max_rows must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF max_rows < 1 THEN
		RAISE EXCEPTION 'max_rows must be positive' USING ERRCODE = 'invalid_parameter_value';
	END IF;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'RUNNING' AND lease_expires_at < now()
			  ORDER BY claimed_at LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'RUNNING' OR s.lease_expires_at >= now();
		d := payflow._step_definition(s.step_name);
		v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
		IF s.attempt >= v_max THEN
			PERFORM payflow._fail_operation(o, s,
				jsonb_build_object('code', 'lease_expired',
								   'message', format('lease expired on attempt %s of %s', s.attempt, v_max)),
				'payflow scheduler');
			v_failed := v_failed + 1;
		ELSE
			-- lease_owner stays: the late worker may still report its outcome
			-- until another worker claims the step.
			UPDATE payflow.steps
			   SET status = 'RETRY_WAIT', next_attempt_at = now(), lease_expires_at = NULL,
				   last_error = jsonb_build_object('code', 'lease_expired',
												   'message', format('lease of %s expired', s.lease_owner))
			 WHERE operation_id = s.operation_id AND step_name = s.step_name;
			v_expired := v_expired + 1;
		END IF;
	END LOOP;

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'RETRY_WAIT' AND next_attempt_at <= now()
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

	FOR r IN SELECT operation_id, step_name FROM payflow.steps
			  WHERE status = 'PENDING' AND pending_since < now() - v_stuck_after
			  ORDER BY pending_since LIMIT max_rows
	LOOP
		SELECT * INTO o FROM payflow.operations WHERE id = r.operation_id FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		s := payflow._lock_step(r.operation_id, r.step_name);
		CONTINUE WHEN s.status IS DISTINCT FROM 'PENDING' OR s.pending_since >= now() - v_stuck_after;
		-- Re-armed either way, so the scan moves on to older rows next time.
		UPDATE payflow.steps SET pending_since = now()
		 WHERE operation_id = s.operation_id AND step_name = s.step_name;
		-- An event of this payment still in the outbox will be delivered;
		-- another copy would only be a duplicate.
		CONTINUE WHEN EXISTS (SELECT FROM payflow.outbox
							   WHERE message_group_id = payflow._message_group_id(o.payment_id));
		PERFORM payflow._emit_step_request(o, s);
		v_stuck := v_stuck + 1;
	END LOOP;

	RETURN jsonb_build_object('expiredLeases', v_expired,
							  'failedAfterLeaseExpiry', v_failed,
							  'retriesDue', v_due,
							  'stuckRedriven', v_stuck);
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

-- Health figures for dashboards and alarms.  Scraped often (the HTTP edge's
-- /metrics), so it never scans all retained operations: every operation not
-- yet terminal has exactly one step PENDING, RUNNING or RETRY_WAIT, found
-- through the steps' partial indexes; recent terminal operations and
-- finished steps come from the terminal_at and finished_at indexes.  Its
-- cost follows the work in flight and the last hour, not the retention.
CREATE OR REPLACE FUNCTION payflow.metrics() RETURNS jsonb
	LANGUAGE sql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
	WITH active AS (
		SELECT s.operation_id, s.step_name, s.status AS step_status, o.status, o.updated_at
		  FROM payflow.steps s
		  JOIN payflow.operations o ON o.id = s.operation_id
		 -- ORed, not IN (...): each arm matches one partial index (BitmapOr)
		 WHERE s.status = 'PENDING' OR s.status = 'RUNNING' OR s.status = 'RETRY_WAIT'
	), recent AS (
		SELECT id, status FROM payflow.operations WHERE terminal_at > now() - interval '1 hour'
	), finished AS (
		SELECT s.step_name, s.status, extract(epoch FROM s.finished_at - s.claimed_at) AS run_seconds
		  FROM payflow.steps s
		 WHERE s.finished_at > now() - interval '1 hour'
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
		'outbox', (
			SELECT jsonb_build_object(
					   'backlog', count(*),
					   'inFlight', count(*) FILTER (WHERE claim_expires_at > now()),
					   'failing', count(*) FILTER (WHERE last_error IS NOT NULL),
					   'oldestAgeSeconds', round(coalesce(extract(epoch FROM now() - min(created_at)), 0)::numeric, 3))
			  FROM payflow.outbox),
		'steps', (
			SELECT coalesce(jsonb_object_agg(d.step_name, jsonb_build_object(
					   'pending', coalesce(a.pending, 0), 'running', coalesce(a.running, 0),
					   'retryWaiting', coalesce(a.retry_waiting, 0),
					   'finishedLastHour', coalesce(f.finished, 0),
					   'runSecondsP50', round(f.p50::numeric, 3), 'runSecondsP95', round(f.p95::numeric, 3))), '{}'::jsonb)
			  FROM payflow.step_definitions d
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
		RAISE EXCEPTION 'operation_ids must not be null' USING ERRCODE = 'null_value_not_allowed';
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
		   AND payflow._visible(o.tenant)
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
	v_body jsonb;
	v_id bigint;
BEGIN
	IF event_id IS NULL THEN
		RAISE EXCEPTION 'event_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('body', body, 262144);
	BEGIN
		v_body := body::jsonb;
	EXCEPTION WHEN invalid_text_representation THEN
		RAISE EXCEPTION 'body is not JSON' USING ERRCODE = 'invalid_text_representation';
	END;
	IF jsonb_typeof(v_body) IS DISTINCT FROM 'object' OR jsonb_typeof(v_body -> 'eventType') IS DISTINCT FROM 'string' THEN
		RAISE EXCEPTION 'body must be an event: a JSON object with an "eventType"'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
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
			v_body, attempts, error)
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
	IF key_id IS NULL THEN
		RAISE EXCEPTION 'key_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF NOT EXISTS (SELECT FROM payflow.api_keys k WHERE k.id = key_id) THEN
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
	IF failure_id IS NULL THEN
		RAISE EXCEPTION 'failure_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO f FROM payflow.webhook_failures w WHERE w.id = failure_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'webhook failure % does not exist', failure_id USING ERRCODE = 'no_data_found';
	ELSIF f.replayed_at IS NOT NULL THEN
		RETURN false;
	END IF;
	INSERT INTO payflow.outbox (event_id, operation_id, event_type, destination,
								message_group_id, body, attributes)
	VALUES (gen_random_uuid(), f.operation_id, f.body ->> 'eventType', 'operation-events',
			payflow._message_group_id(coalesce(f.body ->> 'paymentId', f.operation_id)), f.body,
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
