-- payflow: operations and the application's API.
--
-- Failing an operation (a status change that writes its history row), the
-- one statement that creates an operation, and what the application calls:
-- submit, submit_ref, status, history, cancel and changes.

-- Fails an operation at its open step: step FAILED, operation FAILED (one
-- update of its row), a dead letter, and its version's failed event
-- (OperationFailed).  The caller holds the row lock.
CREATE OR REPLACE FUNCTION payflow._fail_operation(o payflow.operations, p_error jsonb, p_actor text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_summary jsonb := payflow._mask_card_numbers(jsonb_strip_nulls(jsonb_build_object(
		'step', o.current_step,
		'code', p_error -> 'code',
		'message', p_error -> 'message')));
	v_no integer;
BEGIN
	UPDATE payflow.operations
	   SET status = 'FAILED', updated_at = now(), terminal_at = now(), error = v_summary,
		   step_status = 'FAILED', step_last_error = p_error,
		   step_pending_since = NULL, step_next_attempt_at = NULL, step_lease_expires_at = NULL,
		   history_no = history_no + 1, held_step = NULL
	 WHERE id = o.id
	RETURNING history_no INTO v_no;
	PERFORM payflow._status_recorded(o.id, v_no, o.status, 'FAILED',
									 coalesce(v_summary ->> 'message', v_summary ->> 'code', 'failed'), p_actor);
	INSERT INTO payflow.dead_letters (source, operation_id, step_name, error, attempts)
	VALUES ('step', o.id, o.current_step, payflow._mask_card_numbers(p_error), o.step_attempt);
	PERFORM payflow._emit(o.id, o.payment_id, o.correlation_id,
						  (SELECT p.failed_event FROM payflow.pipelines p WHERE p.version = o.pipeline_version),
						  'operation-events', o.step_attempt,
						  jsonb_build_object('status', 'FAILED', 'failedStep', o.current_step, 'error', v_summary));
END
$$;

-- Whether a request given again with an operation's idempotency key is the
-- one that made it (else PF002): the same payment id, and the same details
-- (submit: p_content, and p_mac its keyed checksum, which the caller made
-- already) or the same reference (submit_ref: p_ref; store, key and
-- checksum, as 0.4's hash took them).  Told by what the operation keeps
-- anyway, not by a hash of its own (0.4 kept one, 33 bytes of every row):
-- the keyed checksum of a request payflow stores (request_mac), or, for an
-- operation made by 0.4, the reference it kept, whose plain checksum is of
-- the same bytes; a submit_ref's key is never under its own operation's
-- (the payload named exists before the operation does).
CREATE OR REPLACE FUNCTION payflow._same_request(o payflow.operations, p_payment_id text, p_ref jsonb,
												 p_content bytea, p_mac bytea)
	RETURNS boolean
	LANGUAGE sql STABLE
	AS $$
	SELECT coalesce(o.payment_id = p_payment_id AND CASE
		WHEN p_content IS NOT NULL THEN
			CASE WHEN o.request_mac IS NOT NULL THEN o.request_mac = p_mac
				 ELSE o.request_ref ->> 'key' = payflow._payload_key(o.id, 'request.json')
					  AND payflow._checksum_matches(p_content, o.request_ref ->> 'checksum') END
		ELSE o.request_mac IS NULL AND o.request_ref ->> 'key' <> payflow._payload_key(o.id, 'request.json')
			 AND o.request_ref ->> 'store' = p_ref ->> 'store' AND o.request_ref ->> 'key' = p_ref ->> 'key'
			 AND o.request_ref ->> 'checksum' = p_ref ->> 'checksum' END, false)
$$;
REVOKE ALL ON FUNCTION payflow._same_request(payflow.operations, text, jsonb, bytea, bytea) FROM PUBLIC;

-- Creates an operation, or returns the one its idempotency key already
-- names.  Concurrent calls with one key serialise on the unique index: the
-- second waits for the first to commit, then finds its row.  One statement
-- writes all four rows (the first step opens in the operation's row, and
-- the row is its "submitted" history: history.sql):
-- submit is the hottest path and every statement costs an executor
-- start-up.  The operation starts on the newest pipeline version, in its
-- first step's ready status, with that step's request.
CREATE OR REPLACE FUNCTION payflow._create_operation(p_payment_id text, p_idempotency_key text,
										  p_correlation_id text,
										  p_request_ref jsonb, p_content bytea, p_priority smallint,
										  p_traceparent bytea)
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
	-- a request stored here is kept as its checksum and size (tables.sql)
	v_mac bytea := CASE WHEN p_request_ref IS NULL THEN payflow._content_mac(p_content) END;
	v_ref jsonb := coalesce(p_request_ref,
							payflow._request_ref(v_id, NULL, v_mac, octet_length(p_content)));
	v_tenant text := payflow._current_tenant();
	v_created text;
	v_held text;
	v_existing payflow.operations;
BEGIN
	WITH f AS MATERIALIZED (
		SELECT d.*,
			   -- a first step with a limit is held for a slot (step_dispatch.sql)
			   CASE WHEN EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = d.step_name)
					THEN d.step_name END AS held_step
		  FROM payflow.step_definitions d
		 WHERE d.pipeline_version = payflow._pipeline_version() AND d.position = 1
	), op AS (
		INSERT INTO payflow.operations (id, tenant, payment_id, idempotency_key,
										correlation_id, request_ref, status, current_step, pipeline_version,
										submitted_by, priority, held_step, traceparent, request_mac, request_size)
		SELECT v_id, v_tenant, p_payment_id, p_idempotency_key, p_correlation_id, p_request_ref,
			   f.ready_status, f.step_name, f.pipeline_version, session_user, p_priority, f.held_step,
			   p_traceparent, v_mac, CASE WHEN v_mac IS NOT NULL THEN octet_length(p_content) END
		  FROM f
		 WHERE payflow._within_quota(v_tenant)	-- (tenant_quotas.sql)
		ON CONFLICT ON CONSTRAINT operations_idempotency_key DO NOTHING
		RETURNING id, status, current_step
	), payload AS (
		INSERT INTO payflow.payloads (key, content)
		SELECT v_ref ->> 'key', p_content
		  FROM op WHERE p_content IS NOT NULL
	), outbox_in AS (
		-- its first step's request (the log renders it)
		SELECT v_event_id AS event_id, op.id AS operation_id, p_payment_id AS group_key,
			   f.request_event AS event_type, f.destination,
			   payflow._event_body(v_event_id, op.id, p_payment_id, p_correlation_id, f.request_event, 1,
								   jsonb_build_object(f.input_field, v_ref)) AS body,
			   f.position::smallint AS rendered, 1 AS n
		  FROM op, f
		 WHERE f.held_step IS NULL
	),
	--@@ include outbox_write_ctes.sql @@
	SELECT op.id, f.held_step INTO v_created, v_held FROM op, f;

	IF v_held IS NOT NULL THEN
		-- this one, or a held one before it, if the step has a slot free
		PERFORM payflow._dispatch_held(v_held);
	END IF;
	IF v_created IS NULL THEN
		SELECT * INTO v_existing FROM payflow.operations
		 WHERE tenant = v_tenant AND idempotency_key = p_idempotency_key;
		IF NOT FOUND THEN
			-- not a conflict: the tenant is past its quota
			PERFORM payflow._quota_exceeded(v_tenant);
		ELSIF NOT payflow._same_request(v_existing, p_payment_id, p_request_ref, p_content, v_mac) THEN
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

-- Identifiers that end up in message attributes and logs may not hold
-- control characters: SQS refuses them in attribute values, and a newline
-- would split a log line.  Nor
-- U+FFFE or U+FFFF, the only other characters PostgreSQL's UTF-8 can hold
-- that SQS refuses in a message body or attribute (it takes #x9, #xA, #xD,
-- #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF): an event naming one would
-- be refused at every try of the relay.  The same class of bad input as a
-- control character, so the same SQLSTATE (22023).
CREATE OR REPLACE FUNCTION payflow._require_printable(arg_name text, value text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	IF value ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION '% must not contain control characters', arg_name
			USING ERRCODE = 'invalid_parameter_value';
	ELSIF value ~ '[\uFFFE\uFFFF]' THEN
		RAISE EXCEPTION '% must not contain U+FFFE or U+FFFF', arg_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'SQS refuses these characters in messages.';
	END IF;
END
$$;

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

---------------------------------------------------------------------------
-- Public API: the application (payflow_app)
---------------------------------------------------------------------------

-- Creates an operation for a payment request and returns its id at once.
-- traceparent: the caller's W3C trace context, which the operation's spans
-- continue; a new trace when NULL (trace_context.sql).
CREATE OR REPLACE FUNCTION payflow.submit(payment_id text, details jsonb,
							   idempotency_key text DEFAULT NULL,
							   correlation_id text DEFAULT NULL,
							   priority integer DEFAULT 0,
							   traceparent text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_content bytea;
BEGIN
	-- The checks as one expression (no statement to run); only bad input
	-- takes the helpers, which raise the precise error.
	IF payment_id IS NULL OR payment_id = '' OR length(payment_id) > 255 OR payment_id ~ '[[:cntrl:]\uFFFE\uFFFF]'
	   OR idempotency_key = '' OR length(idempotency_key) > 255 OR idempotency_key ~ '[[:cntrl:]\uFFFE\uFFFF]'
	   OR correlation_id = '' OR length(correlation_id) > 255 OR correlation_id ~ '[[:cntrl:]\uFFFE\uFFFF]'
	   OR details IS NULL OR jsonb_typeof(details) <> 'object' OR priority NOT BETWEEN -100 AND 100 THEN
		PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
		PERFORM payflow._require_object('details', details);
		PERFORM payflow._require_priority(priority);
	END IF;
	v_content := convert_to(details::text, 'UTF8');
	IF octet_length(v_content) > payflow._setting('payload_max_bytes')::bigint THEN
		PERFORM payflow._require_size('details', octet_length(v_content));
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		NULL, v_content, coalesce(priority, 0)::smallint, payflow._traceparent(traceparent));
END
$$;

-- Same as submit, for a request whose payload is already stored (S3, or a
-- "pg" payload written earlier); only its reference is kept.
CREATE OR REPLACE FUNCTION payflow.submit_ref(payment_id text, store text, key text, checksum text, size bigint,
								   idempotency_key text DEFAULT NULL,
								   correlation_id text DEFAULT NULL,
								   priority integer DEFAULT 0,
								   traceparent text DEFAULT NULL)
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
	PERFORM payflow._require_text('checksum', checksum, 76);
	IF store NOT IN ('pg', 's3') THEN
		RAISE EXCEPTION 'unknown payload store "%"', store
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	END IF;
	-- keyed (content_mac.sql), or the caller's own plain digest
	IF checksum !~ '^(hmac-sha256|sha256):[0-9a-f]{64}$' THEN
		RAISE EXCEPTION 'invalid checksum "%"', checksum
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A checksum is "hmac-sha256:" (or "sha256:") followed by 64 lower-case hex digits.';
	END IF;
	IF size IS NULL OR size < 0 THEN
		RAISE EXCEPTION 'size must be a non-negative number of bytes'
			USING ERRCODE = CASE WHEN size IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF store = 'pg' THEN
		-- Only a payload of an operation the caller may see (its tenant's):
		-- another tenant's key answers exactly like an unknown one, so keys
		-- cannot be probed, checksums not guessed, and no tenant's request
		-- charged for another.
		SELECT p.* INTO v_stored
		  FROM payflow.payloads p JOIN payflow.operations o ON o.id = payflow._payload_operation(p.key)
		 WHERE p.key = submit_ref.key AND payflow._visible(o.tenant);
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', key USING ERRCODE = 'no_data_found';
		ELSIF NOT payflow._checksum_matches(v_stored.content, checksum) OR octet_length(v_stored.content) <> size THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', key USING ERRCODE = 'PF005';
		END IF;
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		jsonb_build_object('store', store, 'key', key, 'checksum', checksum, 'size', size),
		NULL, payflow._require_priority(priority), payflow._traceparent(traceparent));
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
			   'attempts', CASE WHEN o.step_status = 'SUCCEEDED'
								THEN (SELECT r.attempt FROM payflow.step_results r
									   WHERE r.operation_id = o.id AND r.step_name = o.current_step)
								ELSE o.step_attempt END,
			   'nextAttemptAt', payflow._iso(o.step_next_attempt_at),
			   'error', coalesce(o.error, CASE WHEN o.step_status = 'RETRY_WAIT' THEN o.step_last_error END),
			   'result', o.result,
			   'correlationId', o.correlation_id,
			   'traceId', payflow._trace_id(o.traceparent),
			   'terminal', payflow._is_terminal(o.status),
			   'createdAt', payflow._iso(o.created_at),
			   'updatedAt', payflow._iso(o.updated_at),
			   'completedAt', payflow._iso(o.terminal_at))
	  INTO v_doc
	  FROM payflow.operations o
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
		  FROM payflow._operation_history h		-- (history.sql)
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
	v_no integer;
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
	UPDATE payflow.operations
	   SET status = 'CANCELLED', updated_at = now(), terminal_at = now(),
		   error = jsonb_strip_nulls(jsonb_build_object('code', 'cancelled', 'message', reason)),
		   step_status = CASE WHEN step_status IN ('PENDING', 'RETRY_WAIT') THEN 'CANCELLED' ELSE step_status END,
		   step_pending_since = NULL, step_next_attempt_at = NULL, history_no = history_no + 1,
		   held_step = NULL		-- no longer waits for a slot (step_dispatch.sql)
	 WHERE id = o.id
	RETURNING history_no INTO v_no;
	PERFORM payflow._status_recorded(o.id, v_no, o.status, 'CANCELLED', coalesce(reason, 'cancelled'), session_user);
	RETURN true;
END
$$;

-- The status changes of the given operations of the current tenant after
-- history id after_id, for event streams (the HTTP edge's SSE).  Ids grow
-- in commit order within one operation (its row lock serialises them), not
-- across operations: callers keep a last-seen id per operation.
CREATE OR REPLACE FUNCTION payflow.changes(operation_ids text[], after_id bigint DEFAULT 0)
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
		  JOIN payflow._operation_history h ON h.operation_id = o.id		-- (history.sql)
		 WHERE o.id = ANY (changes.operation_ids) AND h.operation_id = ANY (changes.operation_ids)
		   AND payflow._visible(o.tenant)
		   AND h.id > coalesce(changes.after_id, 0)
		 ORDER BY h.operation_id, h.id;
END
$$;
