-- payflow: the step engine, what workers call.
--
-- Claims with leases, heartbeats, saved external references, completions
-- and failures with retry scheduling (exponential back-off with jitter),
-- single and batched (claim_steps, complete_steps, fail_steps), each item
-- with its own answer.  A late report after a takeover gets PF004.
--
-- The open step of an operation is part of its operations row (0.5.0,
-- tables.sql): a claim, a heartbeat, a retry or a completion is one update
-- of that row, and a completion also writes the step's step_results row.

---------------------------------------------------------------------------
-- Public API: workers (payflow_worker)
---------------------------------------------------------------------------

-- Whether a step of an operation is done (it has its step_results row).
CREATE OR REPLACE FUNCTION payflow._step_done(p_operation_id text, p_step text) RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET plan_cache_mode = force_generic_plan	-- as _step_bound
	AS $$
BEGIN
	RETURN EXISTS (SELECT FROM payflow.step_results r
					WHERE r.operation_id = p_operation_id AND r.step_name = p_step);
END
$$;

-- claim_step's full logic, for every case the fast path (_claim_fast)
-- does not take: "run" (new step, due retry, expired lease), "skip" (done,
-- failed, terminal, retry not yet due) or "busy" (another worker's lease is
-- live, or the step is not ready yet); and the argument errors.
CREATE OR REPLACE FUNCTION payflow._claim_step_full(operation_id text, step text, worker_id text,
													lease_seconds integer)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
	v_takeover boolean := false;
	v_max integer;
	v_from text;
	v_to text;
	v_limited jsonb;
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
	IF o.current_step <> d.step_name OR o.step_status = 'SUCCEEDED' THEN
		IF payflow._step_done(o.id, d.step_name) THEN
			RETURN jsonb_build_object('action', 'skip', 'reason', 'done', 'status', o.status);
		END IF;
		-- The event that opens this step has not been written yet.
		RETURN jsonb_build_object('action', 'busy', 'reason', 'not_ready', 'status', o.status);
	END IF;

	CASE o.step_status
		WHEN 'FAILED', 'CANCELLED' THEN
			RETURN jsonb_build_object('action', 'skip', 'reason', lower(o.step_status), 'status', o.status);
		WHEN 'RETRY_WAIT' THEN
			IF o.step_next_attempt_at > now() THEN
				-- The scheduler re-emits the request when the retry is due.
				RETURN jsonb_build_object('action', 'skip', 'reason', 'retry_scheduled',
										  'nextAttemptAt', payflow._iso(o.step_next_attempt_at));
			END IF;
		WHEN 'RUNNING' THEN
			IF o.step_lease_expires_at > now() THEN
				RETURN jsonb_build_object('action', 'busy', 'reason', 'leased',
										  'leaseExpiresAt', payflow._iso(o.step_lease_expires_at));
			END IF;
			-- The holder died or stalled: take over, or give up at the limit.
			v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
			IF o.step_attempt >= v_max THEN
				PERFORM payflow._fail_operation(o,
					jsonb_build_object('code', 'lease_expired',
									   'message', format('lease expired on attempt %s of %s', o.step_attempt, v_max)),
					worker_id);
				RETURN jsonb_build_object('action', 'skip', 'reason', 'failed', 'status', 'FAILED');
			END IF;
			v_takeover := true;
		ELSE
			NULL;					-- PENDING
	END CASE;

	-- A step under a limit (step_limits.sql): admitted, or "limited" with
	-- nothing changed and no attempt used.
	v_limited := payflow._take_step_slot(o, d.step_name);
	IF v_limited IS NOT NULL THEN
		RETURN v_limited;
	END IF;

	-- One update: the lease, and the status when the claim changes it.
	v_from := o.status;
	v_to := CASE WHEN o.status = d.ready_status THEN d.running_status ELSE o.status END;
	UPDATE payflow.operations
	   SET status = v_to, updated_at = CASE WHEN v_to <> v_from THEN now() ELSE updated_at END,
		   step_attempt = step_attempt + 1, step_claimed_at = now(), step_lease_owner = worker_id,
		   step_lease_token = gen_random_uuid(),
		   step_status = 'RUNNING', step_pending_since = NULL, step_next_attempt_at = NULL,
		   step_lease_expires_at = now() + make_interval(secs => lease_seconds),
		   held_step = NULL,		-- a held one claimed by a stray message (step_dispatch.sql)
		   -- a claim that moves the status is a change of the history, told
		   -- by this row while the attempt runs (history.sql)
		   history_no = history_no + CASE WHEN v_to <> v_from THEN 1 ELSE 0 END,
		   step_claim_no = CASE WHEN v_to <> v_from THEN history_no + 1 END
	 WHERE id = o.id
	RETURNING * INTO o;
	IF v_to <> v_from THEN
		PERFORM payflow._status_changed();
	END IF;

	RETURN jsonb_strip_nulls(jsonb_build_object(
		'action', 'run',
		'attempt', o.step_attempt,
		'idempotencyKey', o.id || ':' || lower(d.step_name),
		'input', payflow._step_input(o.id, o.pipeline_version, o.request_ref, o.request_mac, o.request_size),
		'leaseExpiresAt', payflow._iso(o.step_lease_expires_at),
		'leaseToken', o.step_lease_token,
		'takeover', v_takeover,
		'externalRef', o.step_external_ref,
		'paymentId', o.payment_id,
		'correlationId', o.correlation_id,
		'pipelineVersion', o.pipeline_version,
		'inputField', d.input_field,
		'resultName', d.result_name));
END
$$;

-- Renews a lease; false when this worker no longer holds it (or presents
-- the wrong lease token, or none for a step bound to roles).  Touches one
-- unindexed column: a HOT update.
CREATE OR REPLACE FUNCTION payflow.heartbeat(operation_id text, step text, worker_id text,
											 lease_seconds integer DEFAULT 300, lease_token text DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('step', step, 64);
	PERFORM payflow._require_worker(worker_id, lease_seconds);
	PERFORM payflow._require_step_role(step);
	UPDATE payflow.operations o
	   SET step_lease_expires_at = now() + make_interval(secs => lease_seconds)
	 WHERE o.id = heartbeat.operation_id AND o.current_step = step
	   AND o.step_status = 'RUNNING' AND o.step_lease_owner = worker_id
	   -- a wrong token, or none for a step bound to roles: not this lease
	   AND CASE WHEN lease_token IS NULL THEN NOT payflow._step_bound(step)
				ELSE o.step_lease_token::text = lease_token END;
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

-- heartbeat for several steps of one kind at once (at most 100), as a
-- worker's lease renewer holds them: one update for the batch.  One row
-- per item (item = its position in operation_ids, lease_tokens[item] its
-- token, NULL for none): held, heartbeat's answer, or for that item alone
-- error = {"code": SQLSTATE, "message"} (PF003 an unknown operation,
-- 22P02 a malformed id) with held NULL.  The update takes an id's first
-- item; an item it did not renew is answered by heartbeat itself, alone
-- (the rare path).  A call of heartbeat an item cost the database 47 us a
-- renewal with a thousand leases held (test/bench/worker.sh).
CREATE OR REPLACE FUNCTION payflow.heartbeat_steps(step text, worker_id text, operation_ids text[],
												   lease_seconds integer DEFAULT 300, lease_tokens text[] DEFAULT NULL)
	RETURNS TABLE (item integer, operation_id text, held boolean, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	-- (as _claim_fast's: one plan, an index probe an item in id order)
	SET plan_cache_mode = force_generic_plan
	SET enable_seqscan = off
	SET jit = off
	SET enable_bitmapscan = off
	SET enable_hashjoin = off
	SET enable_mergejoin = off
	AS $$
DECLARE
	v_renewed integer[];
	v_access record;
BEGIN
	PERFORM payflow._require_text('step', step, 64);
	PERFORM payflow._require_worker(worker_id, lease_seconds);
	PERFORM payflow._require_batch('operation_ids', cardinality(operation_ids));
	IF lease_tokens IS NOT NULL AND cardinality(lease_tokens) <> cardinality(operation_ids) THEN
		RAISE EXCEPTION 'lease_tokens has % items, operation_ids %', cardinality(lease_tokens),
			cardinality(operation_ids)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Give a token for each operation (NULL for a step bound to no role), or no array.';
	END IF;
	-- whether the login may act on the step, and whether it is bound, in
	-- one statement (_step_access); 42501 from _require_step_role
	SELECT a.role_ok, a.bound INTO v_access FROM payflow._step_access(step) a;
	IF NOT v_access.role_ok THEN
		PERFORM payflow._require_step_role(step);
	END IF;
	-- the rows locked in id order (as the batch claims and completions
	-- lock theirs): two batches wait for each other, never deadlock
	WITH i AS MATERIALIZED (
		SELECT DISTINCT ON (x.id) x.id, x.token
		  FROM unnest(operation_ids, coalesce(lease_tokens, ARRAY[]::text[])) WITH ORDINALITY AS x(id, token, n)
		 WHERE x.id IS NOT NULL
		 ORDER BY x.id, x.n
	), renewed AS (
		UPDATE payflow.operations o
		   SET step_lease_expires_at = now() + make_interval(secs => lease_seconds)
		  FROM i
		 WHERE o.id = i.id AND o.current_step = step
		   AND o.step_status = 'RUNNING' AND o.step_lease_owner = worker_id
		   -- a wrong token, or none for a step bound to roles: not this lease
		   AND CASE WHEN i.token IS NULL THEN NOT v_access.bound ELSE o.step_lease_token::text = i.token END
		RETURNING o.id
	)
	SELECT coalesce(array_agg(x.n::integer), '{}') INTO v_renewed
	  FROM renewed r JOIN unnest(operation_ids) WITH ORDINALITY AS x(id, n) ON x.id = r.id;
	IF cardinality(v_renewed) < cardinality(operation_ids) THEN
		PERFORM payflow._step_definition(step);		-- an unknown step is an error (22023)
	END IF;
	FOR v_n IN 1 .. cardinality(operation_ids) LOOP
		item := v_n; operation_id := operation_ids[v_n]; held := true; error := NULL;
		IF NOT v_n = ANY (v_renewed) THEN
			-- the rare path: why not, for this item alone
			BEGIN
				held := payflow.heartbeat(operation_ids[v_n], step, worker_id, lease_seconds, lease_tokens[v_n]);
			EXCEPTION WHEN OTHERS THEN
				held := NULL;
				error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
			END;
		END IF;
		RETURN NEXT;
	END LOOP;
END
$$;

-- Saves an external job reference with a running step (submit-poll mode),
-- so a worker that takes the step over resumes polling instead of
-- submitting again.
CREATE OR REPLACE FUNCTION payflow.save_step_ref(operation_id text, step text, worker_id text, external_ref text,
												 lease_token text DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('step', step, 64);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_text('external_ref', external_ref, 1000);
	PERFORM payflow._require_step_role(step);
	UPDATE payflow.operations o
	   SET step_external_ref = save_step_ref.external_ref
	 WHERE o.id = save_step_ref.operation_id AND o.current_step = step
	   AND o.step_status = 'RUNNING' AND o.step_lease_owner = worker_id
	   AND CASE WHEN lease_token IS NULL THEN NOT payflow._step_bound(step)
				ELSE o.step_lease_token::text = lease_token END;
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

-- Raises PF004 unless the worker is the one that ran the operation's open
-- step p_step.  A worker whose lease expired may still report as long as
-- nobody else claimed the step since: its external call carried the step's
-- idempotency key, so its outcome is the outcome.
CREATE OR REPLACE FUNCTION payflow._require_lease_holder(o payflow.operations, p_step text, p_worker text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF o.current_step IS DISTINCT FROM p_step OR o.step_lease_owner IS NULL THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Step %s of operation %s has not been claimed.', p_step, o.id);
	ELSIF o.step_lease_owner <> p_worker THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Worker %s claimed step %s of operation %s after this worker''s lease expired.',
								  o.step_lease_owner, p_step, o.id);
	END IF;
END
$$;

-- A reference a worker hands on as a step's result must name a payload of
-- that operation: its own pg payload with the checksum it claims, or an S3
-- key under payments/<id>/ (22023 otherwise, P0002/PF005 as payload_get).
CREATE OR REPLACE FUNCTION payflow._require_own_ref(p_operation_id text, p_ref jsonb) RETURNS void
	LANGUAGE plpgsql STABLE
	SET plan_cache_mode = force_generic_plan	-- as payload_get (payloads.sql)
	AS $$
DECLARE
	p payflow.payloads;
BEGIN
	PERFORM payflow._require_text('result_ref.key', p_ref ->> 'key', 1024);
	PERFORM payflow._require_text('result_ref.checksum', p_ref ->> 'checksum', 76);
	IF p_ref ->> 'store' IS DISTINCT FROM 'pg' AND p_ref ->> 'store' IS DISTINCT FROM 's3' THEN
		RAISE EXCEPTION 'unknown payload store "%"', coalesce(p_ref ->> 'store', 'missing')
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	ELSIF NOT starts_with(p_ref ->> 'key', payflow._payload_key(p_operation_id, '')) THEN
		RAISE EXCEPTION 'result_ref must name a payload of operation %', p_operation_id
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Its key is %s; keys of this operation start with payments/%s/.',
								  p_ref ->> 'key', p_operation_id);
	ELSIF p_ref ->> 'store' = 'pg' THEN
		SELECT * INTO p FROM payflow.payloads WHERE key = p_ref ->> 'key';	-- (the operation's: above)
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', p_ref ->> 'key' USING ERRCODE = 'no_data_found';
		ELSIF NOT payflow._checksum_matches(p.content, p_ref ->> 'checksum') THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', p.key USING ERRCODE = 'PF005';
		END IF;
	END IF;
END
$$;

-- A completion's answer, as the first complete_step call gave it: the
-- step's done status and the event its completion wrote (the next step's
-- request, or the version's completed event).  Kept as the event id alone:
-- the rest follows from the operation's pipeline version, which never
-- changes (100 bytes less per completed step than the answer itself).
CREATE OR REPLACE FUNCTION payflow._completion_answer(o payflow.operations, d payflow.step_definitions, p_event_id uuid)
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
CREATE OR REPLACE FUNCTION payflow._complete_step_full(operation_id text, step text, worker_id text, result jsonb,
													   result_ref jsonb, lease_token text)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	d payflow.step_definitions;
	n payflow.step_definitions;
	o payflow.operations;
	v_done payflow.step_results;
	v_ref jsonb := result_ref;
	v_written boolean := false;		-- the result is the payload v_ref names
	v_input jsonb;
	v_event_id uuid;
	v_event_type text;
	v_held boolean := false;
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
	SELECT * INTO v_done FROM payflow.step_results r WHERE r.operation_id = o.id AND r.step_name = d.step_name;
	IF FOUND THEN
		RETURN payflow._completion_answer(o, d, v_done.completed_event_id);
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status
			USING ERRCODE = 'PF006',
				  HINT = 'A FAILED operation can be re-run with payflow.replay(); the step keeps its idempotency key.';
	END IF;
	PERFORM payflow._require_lease_holder(o, d.step_name, worker_id);
	PERFORM payflow._require_lease_token(o, lease_token);
	IF v_ref IS NOT NULL THEN
		PERFORM payflow._require_own_ref(o.id, v_ref);
	END IF;

	IF v_ref IS NULL AND d.result_name IS NOT NULL THEN
		v_ref := payflow._payload_write(o.id, d.result_name, convert_to(result::text, 'UTF8'));
		v_written := true;
	END IF;

	n := payflow._next_step(o.pipeline_version, d.position);
	v_input := payflow._step_input(o.id, o.pipeline_version, o.request_ref, o.request_mac, o.request_size);
	IF n.step_name IS NOT NULL THEN
		v_event_type := n.request_event;
		v_held := EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = n.step_name);
		IF NOT v_held THEN
			-- A step without a result payload hands its own input on.
			v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, n.request_event,
										n.destination, 1, jsonb_build_object(n.input_field, coalesce(v_ref, v_input)));
		END IF;
		-- the next step opens in the same row; one with a limit is held for
		-- a slot, its request sent when it has one (step_dispatch.sql)
		UPDATE payflow.operations
		   SET current_step = n.step_name, status = d.done_status, updated_at = now(),
			   step_created_at = now(),
			   step_external_ref = NULL, step_attempt = 0, step_claimed_at = NULL, step_lease_owner = NULL,
			   step_status = 'PENDING', step_pending_since = now(), step_next_attempt_at = NULL,
			   step_last_error = NULL, step_lease_expires_at = NULL,
			   history_no = history_no + 1, step_claim_no = NULL,
			   held_step = CASE WHEN v_held THEN n.step_name END
		 WHERE id = o.id;
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
		SELECT p.completed_event INTO v_event_type FROM payflow.pipelines p WHERE p.version = o.pipeline_version;
		v_event_id := payflow._emit(o.id, o.payment_id, o.correlation_id, v_event_type,
									'operation-events', o.step_attempt,
									jsonb_build_object('status', d.done_status, 'result', result));
		UPDATE payflow.operations
		   SET status = d.done_status, updated_at = now(), terminal_at = now(),
			   result = _complete_step_full.result, step_status = 'SUCCEEDED',
			   step_pending_since = NULL, step_next_attempt_at = NULL, step_lease_expires_at = NULL,
			   history_no = history_no + 1, step_claim_no = NULL
		 WHERE id = o.id;
	END IF;
	PERFORM payflow._status_changed();

	-- also the step's claimed and done history (history.sql)
	INSERT INTO payflow.step_results (operation_id, step_name, created_at, claimed_at, attempt, lease_owner,
									  external_ref, result_ref, completed_event_id, result, claim_no, done_no)
	VALUES (o.id, d.step_name, o.step_created_at, o.step_claimed_at, o.step_attempt, o.step_lease_owner,
			o.step_external_ref, v_ref, v_event_id,
			-- kept here only when no payload and no operation result holds it
			CASE WHEN NOT v_written AND n.step_name IS NOT NULL THEN result END,
			o.step_claim_no, o.history_no + 1);
	IF v_held THEN
		-- after the row above, which holds the next step's input
		PERFORM payflow._dispatch_held(n.step_name);
	END IF;
	-- (no eventId when the next step is held: its request is sent with its slot)
	RETURN jsonb_strip_nulls(jsonb_build_object('action', 'completed', 'status', d.done_status,
												'eventType', v_event_type, 'eventId', v_event_id));
END
$$;

-- Records a step's failure: a retry scheduled with backoff while attempts
-- remain and the error is retryable, else the operation fails.
-- error is {"code":…, "message":…} and may carry "retryAfterSeconds"
-- (e.g. from an HTTP Retry-After) which lengthens the delay up to
-- retry_max_delay, and "outcomeUnknown": true when the attempt may have had
-- its effect (then the last attempt ends the operation as outcome_unknown).
CREATE OR REPLACE FUNCTION payflow.fail_step(operation_id text, step text, worker_id text, error jsonb,
											 retryable boolean, lease_token text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	o payflow.operations;
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
	PERFORM payflow._require_step_role(d.step_name);
	-- Card numbers never reach the step, the status document, history,
	-- dead letters or OperationFailed.
	error := payflow._mask_card_numbers(error);

	o := payflow._lock_operation(operation_id);
	d := payflow._require_step_of(o, d.step_name);
	IF payflow._step_done(o.id, d.step_name) THEN
		RETURN jsonb_build_object('action', 'skip', 'reason', 'done');
	ELSIF o.current_step = d.step_name AND o.step_status = 'FAILED' THEN
		RETURN jsonb_build_object('action', 'failed');
	ELSIF payflow._is_terminal(o.status) THEN
		RAISE EXCEPTION 'operation "%" is already %', o.id, o.status USING ERRCODE = 'PF006';
	END IF;
	PERFORM payflow._require_lease_holder(o, d.step_name, worker_id);
	PERFORM payflow._require_lease_token(o, lease_token);
	IF o.step_status = 'RETRY_WAIT' AND o.step_last_error = error THEN
		-- The same report again (a worker retrying its own call).
		RETURN jsonb_build_object('action', 'retry', 'attempt', o.step_attempt,
								  'nextAttemptAt', payflow._iso(o.step_next_attempt_at));
	END IF;

	v_max := coalesce(d.max_attempts, payflow._setting('max_attempts')::integer);
	IF retryable AND o.step_attempt < v_max THEN
		v_base := coalesce(d.retry_base_delay, payflow._seconds('retry_base_delay'));
		v_cap := coalesce(d.retry_max_delay, payflow._seconds('retry_max_delay'));
		v_delay := payflow.backoff_delay(greatest(o.step_attempt - 1, 0), v_base, v_cap,
										 payflow._setting('retry_jitter')::float8);
		IF jsonb_typeof(error -> 'retryAfterSeconds') = 'number' THEN
			-- compared as numeric: 1e400 is a JSON number but no float8
			v_retry_after := make_interval(secs => greatest(least((error ->> 'retryAfterSeconds')::numeric,
																  extract(epoch FROM v_cap)), 0)::float8);
			v_delay := greatest(v_delay, v_retry_after);
		END IF;
		UPDATE payflow.operations
		   SET updated_at = now(), step_status = 'RETRY_WAIT', step_next_attempt_at = now() + v_delay,
			   step_last_error = fail_step.error, step_lease_expires_at = NULL
		 WHERE id = o.id
		RETURNING * INTO o;
		PERFORM payflow._slot_freed(d.step_name, ARRAY[o.id]);
		RETURN jsonb_build_object('action', 'retry', 'attempt', o.step_attempt,
								  'nextAttemptAt', payflow._iso(o.step_next_attempt_at));
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
	PERFORM payflow._fail_operation(o,
		CASE WHEN retryable THEN error || jsonb_build_object('attemptsExhausted', true) ELSE error END,
		worker_id);
	PERFORM payflow._slot_freed(d.step_name, ARRAY[o.id]);
	RETURN jsonb_build_object('action', 'failed');
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
	PERFORM payflow._require_step_role(step);
	IF payflow._step_limited(step) THEN
		-- before the operation's row (step_limits.sql); the full path counts
		PERFORM payflow._lock_step_limit(step);
		RETURN payflow._claim_step_full(operation_id, step, worker_id, lease_seconds);
	END IF;
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
												 result_ref jsonb DEFAULT NULL, lease_token text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	-- The fast path first, as in complete_steps: it takes nothing from a
	-- login the step is not bound to, which the full path's check below
	-- refuses (42501); the check as a statement ahead of it cost every call.
	IF result_ref IS NULL THEN
		SELECT f.answer INTO v_answer
		  FROM payflow._complete_fast(step, worker_id,
									  jsonb_build_array(jsonb_build_object('operationId', operation_id,
																		   'result', result,
																		   'leaseToken', lease_token))) f;
		IF FOUND THEN
			RETURN v_answer;	-- (its slot freed by the fast path, if the step has a limit)
		END IF;
	END IF;
	PERFORM payflow._require_step_role(step);
	v_answer := payflow._complete_step_full(operation_id, step, worker_id, result, result_ref, lease_token);
	PERFORM payflow._slot_freed(step, ARRAY[operation_id]);
	RETURN v_answer;
END
$$;

-- The lean step engine.  A worker that received several messages claims
-- their steps in one statement and completes them in one statement
-- (claim_steps, complete_steps, fail_steps); the single-item functions
-- above are the public contract and take the same paths.  Each batch
-- function has a fast path, one statement for every item in the common
-- case (a PENDING or due step of a running operation; a completion by the
-- lease holder), and hands every other item to the full single-item logic
-- (_claim_step_full, _complete_step_full, fail_step) one by one, each in a
-- subtransaction of its own so that one item's error is that item's answer
-- and never aborts the others.  The fast paths validate arguments inside
-- the statement: an item they do not take is answered by the full logic,
-- which raises the precise error.

-- The fast paths' plans are made once per session (a generic plan: a
-- statement of this size costs more to plan than to run) and pinned to
-- index probes and nested loops, whatever the statistics say of tables that
-- were empty when the plan was made (see outbox_claim).

-- A payload's content if it matches the reference's keyed checksum, else
-- NULL (then the worker reads it through payload_get, which also takes a
-- plain checksum made before 0.5.0).  The key comes as its two pads
-- (content_mac.sql): a batch's claim reads them once, and this is inlined
-- into its statement.
CREATE OR REPLACE FUNCTION payflow._verified_content(p_inner_pad bytea, p_outer_pad bytea, p_ref jsonb,
													 p_content bytea)
	RETURNS bytea
	LANGUAGE sql IMMUTABLE
	AS $$
	SELECT CASE WHEN payflow._checksum_with(p_inner_pad, p_outer_pad, p_content) = p_ref ->> 'checksum'
				THEN p_content END
$$;

-- The verified content of a "pg" input reference, else NULL.
CREATE OR REPLACE FUNCTION payflow._inline_input(p_ref jsonb) RETURNS bytea
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	-- PL/pgSQL, whose plan is kept: as a SQL function reading a table (never
	-- inlined) each call started an executor of its own (20 us, a claim each)
	RETURN (SELECT payflow._verified_content(k.inner_pad, k.outer_pad, p_ref, p.content)
			  FROM payflow.payloads p, payflow._content_key k
			 WHERE p_ref ->> 'store' = 'pg' AND p.key = p_ref ->> 'key');
END
$$;

-- Fast claim of the steps of several operations: one update of each
-- operation's row.  The update locks them in id order (two batches never
-- deadlock; single-item functions lock one operation) and waits for one
-- another transaction holds; one that changed meanwhile goes to the full
-- path.
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
DECLARE
	-- byte-wise, as the column compares ids (tables.sql): the range must
	-- hold every id of the batch in the column's own order
	v_lo text COLLATE "C";
	v_hi text COLLATE "C";
	v_inner_pad bytea;	-- the content key's (content_mac.sql), read once a call
	v_outer_pad bytea;
BEGIN
	-- The batch's id range: step_results (partitioned by operation_id, a
	-- partition a day) is read within it too, so that the plan prunes the
	-- other days' partitions as it starts.  Matched by a join alone, each
	-- call set up a scan of every day kept: a claim or a completion cost
	-- 10-13 % more with 7 days than with none (test/bench/README.md).
	-- With it, the key that verifies the inputs: _checksum per row read it
	-- in a statement of its own each time.
	SELECT b.lo, b.hi, k.inner_pad, k.outer_pad INTO v_lo, v_hi, v_inner_pad, v_outer_pad
	  FROM (SELECT min(x COLLATE "C") AS lo, max(x COLLATE "C") AS hi FROM unnest(p_operation_ids) x) b
	  LEFT JOIN payflow._content_key k ON true;
	RETURN QUERY
	WITH i AS MATERIALIZED (
		SELECT x.id, min(x.n)::integer AS n
		  FROM unnest(p_operation_ids) WITH ORDINALITY AS x(id, n)
		 WHERE x.id IS NOT NULL
		 GROUP BY x.id
	), x AS MATERIALIZED (
		-- what the claim changes from, read without a lock: the update below
		-- takes a row only if it still is so (a concurrent change re-checks it)
		-- an index probe per item (= ANY): as a join with i, the generic plan
		-- read every operation in flight (operations_open_idx) at each claim
		SELECT o.id, o.status, d.ready_status, d.running_status, d.input_field, d.result_name
		  FROM payflow.operations o
		  JOIN payflow.step_definitions d ON d.pipeline_version = o.pipeline_version AND d.step_name = p_step
		 WHERE o.id = ANY (p_operation_ids) AND o.current_step = p_step AND o.terminal_at IS NULL
		   AND (o.step_status = 'PENDING' OR (o.step_status = 'RETRY_WAIT' AND o.step_next_attempt_at <= now()))
		   AND length(p_worker_id) BETWEEN 1 AND 200 AND p_lease_seconds BETWEEN 1 AND 86400
		 ORDER BY o.id
	), c AS (
		-- one HOT update per operation, no lock taken before it; rows are
		-- locked in id order (x's), so two batches never deadlock
		UPDATE payflow.operations o
		   SET status = CASE WHEN x.status = x.ready_status THEN x.running_status ELSE x.status END,
			   updated_at = CASE WHEN x.status = x.ready_status AND x.running_status <> x.ready_status
								 THEN now() ELSE o.updated_at END,	-- checked by operations_transition
			   step_attempt = o.step_attempt + 1, step_claimed_at = now(), step_lease_owner = p_worker_id,
			   step_lease_token = gen_random_uuid(), step_status = 'RUNNING', step_pending_since = NULL, step_next_attempt_at = NULL,
			   step_lease_expires_at = now() + make_interval(secs => p_lease_seconds),
			   held_step = NULL,	-- (step_dispatch.sql; NULL to NULL keeps the update HOT)
			   -- a claim that moves the status is a change of the history, told
			   -- by this row while the attempt runs (history.sql)
			   history_no = o.history_no + CASE WHEN x.status = x.ready_status AND x.running_status <> x.ready_status
												THEN 1 ELSE 0 END,
			   step_claim_no = CASE WHEN x.status = x.ready_status AND x.running_status <> x.ready_status
									THEN o.history_no + 1 END
		  FROM x
		 WHERE o.id = x.id AND o.status = x.status AND o.current_step = p_step
		   AND (o.step_status = 'PENDING' OR (o.step_status = 'RETRY_WAIT' AND o.step_next_attempt_at <= now()))
		RETURNING o.id AS operation_id, o.step_attempt AS attempt, o.request_ref, o.request_mac, o.request_size,
				  o.step_lease_expires_at AS lease_expires_at, o.step_lease_token AS lease_token,
				  o.step_external_ref AS external_ref,
				  x.status, o.payment_id, o.correlation_id, o.pipeline_version,
				  x.ready_status, x.running_status, x.input_field, x.result_name,
				  CASE WHEN o.step_claim_no IS NOT NULL THEN payflow._status_changed() END AS woken
	)
	SELECT i.n, c.operation_id,
		   jsonb_strip_nulls(jsonb_build_object(
			   'action', 'run',
			   'attempt', c.attempt,
			   'idempotencyKey', c.operation_id || ':' || lower(p_step),
			   'input', inp.input_ref,
			   'leaseExpiresAt', payflow._iso(c.lease_expires_at),
			   'leaseToken', c.lease_token,
			   'takeover', false,
			   'externalRef', c.external_ref,
			   'paymentId', c.payment_id,
			   'correlationId', c.correlation_id,
			   'pipelineVersion', c.pipeline_version,
			   'inputField', c.input_field,
			   'resultName', c.result_name)),
		   -- _inline_input as a join: a call per row cost 16 us
		   payflow._verified_content(v_inner_pad, v_outer_pad, inp.input_ref, p.content)
	  FROM c
	  JOIN i ON i.id = c.operation_id
	  -- _step_input as a join, for the same reason
	  -- (OFFSET 0 keeps it a sub-select evaluated once a row: pulled up, the
	  -- expression was copied to each of its five uses, five probes a row)
	  CROSS JOIN LATERAL (
		SELECT coalesce((SELECT payflow._result_ref(sr.operation_id, rd.result_name, sr.result_ref, sr.result_mac,
													sr.result_size)
						   FROM payflow.step_results sr
						   JOIN payflow.step_definitions rd ON rd.pipeline_version = c.pipeline_version
														   AND rd.step_name = sr.step_name
						  WHERE sr.operation_id = c.operation_id
							AND (sr.result_ref IS NOT NULL OR sr.result_mac IS NOT NULL)
							AND sr.operation_id BETWEEN v_lo AND v_hi
						  ORDER BY rd.position DESC LIMIT 1),
						payflow._request_ref(c.operation_id, c.request_ref, c.request_mac, c.request_size)) AS input_ref
		OFFSET 0) inp
	  -- (within the batch's keys, every key of an operation lying in its own
	  -- range, payloads.sql: the other days' partitions pruned as above)
	  LEFT JOIN payflow.payloads p ON inp.input_ref ->> 'store' = 'pg' AND p.key = inp.input_ref ->> 'key'
									  AND p.key >= payflow._payload_key(v_lo, '') AND p.key < payflow._payload_keys_end(v_hi);
	-- (data-modifying CTEs run to completion whether or not they are read)
END
$$;

-- claim_step for several operations at once (at most 100): one row per
-- item (item = its position in operation_ids; a repeated id is answered
-- again, as a second claim_step call would be: busy), with claim_step's
-- answer or, for that item alone, error = {"code": SQLSTATE, "message"}.
-- input carries the step's input payload when it is in the "pg" store.
CREATE OR REPLACE FUNCTION payflow.claim_steps(step text, worker_id text, operation_ids text[],
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
	v_gate text;
	v_ids text[] := operation_ids;	-- what the fast path may claim (NULL: not it)
	v_claimed text[];
BEGIN
	-- 42501 for a login the step is not bound to; then the step's limit and
	-- breaker locked before any operation's row, and whether the batch
	-- needs the admission (step_limits.sql)
	v_gate := payflow._gate_step_claims(step, operation_ids);
	-- The fast path first: it checks the arguments inside its statement and
	-- takes no item of a call with a wrong one, so the checks below run only
	-- when some item needs the full logic (each is a statement: 40 us a
	-- call when they ran first).
	IF cardinality(operation_ids) <= 100 THEN
		v_done := array_fill(false, ARRAY[cardinality(operation_ids)]);
		IF v_gate = 'admit' THEN
			-- the limit decides for the whole batch; an item it refuses is
			-- answered here, one it admits goes to the fast path
			FOR r IN SELECT a.operation_id, a.answer FROM payflow._admit_step_claims(step, operation_ids) a
					  WHERE a.answer IS NOT NULL LOOP
				FOR v_n IN 1 .. cardinality(operation_ids) LOOP
					CONTINUE WHEN operation_ids[v_n] IS DISTINCT FROM r.operation_id OR v_done[v_n];
					item := v_n; operation_id := r.operation_id; answer := r.answer; input := NULL; error := NULL;
					v_done[v_n] := true;
					v_ids[v_n] := NULL;
					v_fast := v_fast + 1;
					RETURN NEXT;
				END LOOP;
			END LOOP;
		END IF;
		FOR r IN SELECT * FROM payflow._claim_fast(step, worker_id, v_ids, lease_seconds) LOOP
			item := r.item; operation_id := r.operation_id; answer := r.answer; input := r.input; error := NULL;
			v_done[r.item] := true;
			v_fast := v_fast + 1;
			v_claimed := v_claimed || r.operation_id;
			RETURN NEXT;
		END LOOP;
		IF v_gate = 'admit' AND v_claimed IS NOT NULL THEN
			PERFORM payflow._record_step_slots(step, v_claimed);
		END IF;
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

-- At most 100 items per batch call (22023), not NULL (22004).
CREATE OR REPLACE FUNCTION payflow._require_batch(arg_name text, n integer) RETURNS void
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

-- Fast completion of steps by their lease holder: for each item
-- {"operationId", "result"} (no resultRef) whose step is RUNNING under
-- p_worker_id in a running operation, in one statement: the operation's
-- row advanced to the next step (or ended), the step's step_results row
-- (which also tells its history), the result payload written (when the step has
-- a result name), and the next request event (or OperationCompleted) in
-- the outbox.  Items it
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
	v_bound boolean;
	v_lo text COLLATE "C";	-- (as _claim_fast's)
	v_hi text COLLATE "C";
	v_inner_pad bytea;
	v_outer_pad bytea;
BEGIN
	-- The step as the newest version that has it defines it; operations of
	-- older versions (in flight across a pipeline change) take the full path.
	-- With it, in the same statement (each statement a call costs some
	-- 5 us): the next step (none after the last) and the version's
	-- completed event; whether the login may act on the step, and whether
	-- the step is bound (_step_access); whether the step has a limit; and,
	-- as _claim_fast's, the batch's id range (the other days' step_results
	-- and payloads pruned) and the key that makes the results' checksums.
	SELECT sd AS d, nx AS n, p.completed_event, a.role_ok, a.bound,
		   EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = nx.step_name) AS next_limited,
		   EXISTS (SELECT FROM payflow.step_limits l WHERE l.step_name = p_step) AS limited,
		   b.lo, b.hi, k.inner_pad, k.outer_pad
	  INTO r
	  FROM payflow.step_definitions sd
	  JOIN payflow.pipelines p ON p.version = sd.pipeline_version
	  LEFT JOIN payflow.step_definitions nx ON nx.pipeline_version = sd.pipeline_version
										   AND nx.position = sd.position + 1
	  CROSS JOIN payflow._step_access(p_step) a
	  CROSS JOIN (SELECT min((e ->> 'operationId') COLLATE "C") AS lo, max((e ->> 'operationId') COLLATE "C") AS hi
					FROM jsonb_array_elements(p_items) e) b
	  LEFT JOIN payflow._content_key k ON true
	 WHERE sd.step_name = p_step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND OR NOT r.role_ok OR r.next_limited THEN
		-- (complete_steps' full path raises 42501 for a login the step is
		-- not bound to; a next step with a limit is held for a slot: the
		-- full path's work, step_dispatch.sql)
		RETURN;
	END IF;
	d := r.d;
	n := r.n;
	v_last := n.step_name IS NULL;
	v_completed_event := r.completed_event;
	v_bound := r.bound;
	v_lo := r.lo;
	v_hi := r.hi;
	v_inner_pad := r.inner_pad;
	v_outer_pad := r.outer_pad;
	RETURN QUERY
	WITH i AS MATERIALIZED (
		SELECT DISTINCT ON (x.e ->> 'operationId')
			   x.n::integer AS n, x.e ->> 'operationId' AS id, x.e -> 'result' AS result, x.e ->> 'leaseToken' AS token,
			   convert_to((x.e -> 'result')::text, 'UTF8') AS content, gen_random_uuid() AS event_id
		  FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, n)
		 WHERE jsonb_typeof(x.e -> 'result') = 'object'
		   AND coalesce(x.e -> 'resultRef', 'null'::jsonb) = 'null'::jsonb
		 ORDER BY x.e ->> 'operationId', x.n
	), x AS MATERIALIZED (
		-- the open step as the completion finds it, read without a lock: the
		-- update below takes a row only if its attempt is still this one
		SELECT o.id, o.status, o.payment_id, o.correlation_id, o.step_attempt, o.step_lease_token, o.step_claimed_at,
			   o.step_created_at, o.step_external_ref, o.step_claim_no,
			   -- _step_input as a sub-select: a call per row cost 16 us at best.
			   -- Only the next step's request reads it, and only when this step
			   -- has no result of its own to hand on: read only then (none of
			   -- the default pipeline's steps needs it).
			   CASE WHEN d.result_name IS NULL AND NOT v_last THEN
			   coalesce((SELECT payflow._result_ref(sr.operation_id, rd.result_name, sr.result_ref, sr.result_mac,
													sr.result_size)
						   FROM payflow.step_results sr
						   JOIN payflow.step_definitions rd ON rd.pipeline_version = o.pipeline_version
														   AND rd.step_name = sr.step_name
						  WHERE sr.operation_id = o.id AND (sr.result_ref IS NOT NULL OR sr.result_mac IS NOT NULL)
							AND sr.operation_id BETWEEN v_lo AND v_hi
						  ORDER BY rd.position DESC LIMIT 1),
					payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size)) END AS input_ref,
			   i.n, i.result, i.content, i.event_id,
			   -- the result payload's keyed checksum: step_results keeps it, and
			   -- the reference is rendered from it (_result_ref)
			   CASE WHEN d.result_name IS NOT NULL THEN payflow._mac_with(v_inner_pad, v_outer_pad, i.content)
			   END AS result_mac
		  FROM payflow.operations o JOIN i ON i.id = o.id
		 WHERE o.status = d.running_status AND o.pipeline_version = d.pipeline_version
		   AND o.current_step = d.step_name AND o.step_status = 'RUNNING' AND o.step_lease_owner = p_worker_id
		   -- the claim's token; none only for a step bound to no role
		   AND CASE WHEN i.token IS NULL THEN NOT v_bound ELSE o.step_lease_token::text = i.token END
		   AND octet_length(i.content) <= v_max_bytes
		   AND (NOT v_last OR octet_length(i.result::text) <= 65536)
		   AND (d.result_name IS NULL OR NOT EXISTS (
				SELECT FROM payflow.payloads p WHERE p.key = payflow._payload_key(o.id, d.result_name)
				   AND p.key >= payflow._payload_key(v_lo, '') AND p.key < payflow._payload_keys_end(v_hi)))
		 ORDER BY o.id
	), s AS (
		-- one update per operation: the next step opens in the same row (the
		-- last step's completion ends the operation)
		UPDATE payflow.operations op
		   SET status = d.done_status, updated_at = now(),	-- checked by operations_transition
			   current_step = coalesce(n.step_name, op.current_step),
			   terminal_at = CASE WHEN v_last THEN now() END,
			   result = CASE WHEN v_last THEN x.result ELSE op.result END,
			   step_created_at = CASE WHEN v_last THEN op.step_created_at ELSE now() END,
			   step_external_ref = CASE WHEN v_last THEN op.step_external_ref END,
			   step_attempt = CASE WHEN v_last THEN op.step_attempt ELSE 0 END,
			   step_claimed_at = CASE WHEN v_last THEN op.step_claimed_at END,
			   step_lease_owner = CASE WHEN v_last THEN op.step_lease_owner END,
			   step_status = CASE WHEN v_last THEN 'SUCCEEDED' ELSE 'PENDING' END,
			   step_pending_since = CASE WHEN v_last THEN NULL ELSE now() END,
			   step_next_attempt_at = NULL,
			   step_last_error = CASE WHEN v_last THEN op.step_last_error END,
			   step_lease_expires_at = NULL,
			   history_no = op.history_no + 1, step_claim_no = NULL
		  FROM x
		 WHERE op.id = x.id AND op.status = x.status AND op.current_step = d.step_name
		   AND op.step_status = 'RUNNING' AND op.step_lease_owner = p_worker_id AND op.step_attempt = x.step_attempt
		   AND op.step_lease_token IS NOT DISTINCT FROM x.step_lease_token
		RETURNING x.id AS operation_id, x.step_attempt AS attempt, x.result, x.result_mac,
				  payflow._result_ref(x.id, d.result_name, NULL, x.result_mac, octet_length(x.content)) AS result_ref,
				  x.input_ref, x.n, x.content,
				  x.event_id, x.status, x.payment_id, x.correlation_id, x.step_created_at, x.step_claimed_at,
				  x.step_external_ref, x.step_claim_no, op.history_no AS done_no,
				  payflow._status_changed() AS woken
	), p AS (
		INSERT INTO payflow.payloads (key, content)
		SELECT s.result_ref ->> 'key', s.content
		  FROM s WHERE s.result_ref IS NOT NULL
	), r AS (
		-- also the step's claimed and done history (history.sql)
		INSERT INTO payflow.step_results (operation_id, step_name, created_at, claimed_at, attempt, lease_owner,
										  external_ref, result_mac, result_size, completed_event_id, result,
										  claim_no, done_no)
		SELECT s.operation_id, d.step_name, s.step_created_at, s.step_claimed_at, s.attempt, p_worker_id,
			   s.step_external_ref, s.result_mac, CASE WHEN s.result_mac IS NOT NULL THEN octet_length(s.content) END,
			   s.event_id,
			   -- kept here only when no payload and no operation result holds it
			   CASE WHEN s.result_ref IS NULL AND NOT v_last THEN s.result END,
			   s.step_claim_no, s.done_no
		  FROM s
	), outbox_in AS (
		-- the next step's request, or the operation's completed event (one
		-- event per operation: no order to keep)
		SELECT s.event_id, s.operation_id, s.payment_id AS group_key,
			   coalesce(n.request_event, v_completed_event) AS event_type,
			   coalesce(n.destination, 'operation-events') AS destination,
			   payflow._event_body(s.event_id, s.operation_id, s.payment_id, s.correlation_id,
								   coalesce(n.request_event, v_completed_event),
								   CASE WHEN v_last THEN s.attempt ELSE 1 END,
								   CASE WHEN v_last THEN jsonb_build_object('status', d.done_status, 'result', s.result)
										ELSE jsonb_build_object(n.input_field, coalesce(s.result_ref, s.input_ref)) END) AS body,
			   -- the log renders these bodies (_rendered_event_body)
			   CASE WHEN v_last THEN 0 ELSE n.position END::smallint AS rendered,
			   s.n
		  FROM s
	),
	--@@ include outbox_write_ctes.sql @@
	SELECT s.n, s.operation_id,
		   jsonb_build_object('action', 'completed', 'status', d.done_status,
							  'eventType', coalesce(n.request_event, v_completed_event), 'eventId', s.event_id)
	  FROM s;
	IF r.limited THEN
		-- the slots of the attempts done go to the next held operations
		-- (step_dispatch.sql; complete_steps frees those of its full path's
		-- items after them)
		PERFORM payflow._slot_freed(p_step, ARRAY(SELECT e ->> 'operationId' FROM jsonb_array_elements(p_items) e));
	END IF;
END
$$;

-- complete_step for several steps of one kind at once (at most 100):
-- items is a JSON array of {"operationId", "result", "resultRef"}; one row
-- per item with complete_step's answer or, for that item alone, an error.
CREATE OR REPLACE FUNCTION payflow.complete_steps(step text, worker_id text, items jsonb)
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
	-- items of a known step by a valid worker id whose login may act on the
	-- step, and frees their slots if the step has a limit.
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
	PERFORM payflow._require_step_role(step);
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(false, step, worker_id, items, v_done);
	IF jsonb_typeof(items) = 'array' THEN
		-- the full path's items (the fast path freed its own)
		PERFORM payflow._slot_freed(step, ARRAY(SELECT x.e ->> 'operationId'
												  FROM jsonb_array_elements(items) WITH ORDINALITY AS x(e, n)
												 WHERE NOT coalesce(v_done[x.n], false)));
	END IF;
END
$$;

-- The items of complete_steps (p_fail false) or fail_steps (true) not in
-- p_done (NULL: none), one by one through the single-item logic, each in a
-- subtransaction: its answer, or its error for it alone.
CREATE OR REPLACE FUNCTION payflow._outcomes_one_by_one(p_fail boolean, p_step text, p_worker_id text, p_items jsonb,
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
													  nullif(v_e -> 'resultRef', 'null'::jsonb), v_e ->> 'leaseToken');
			ELSIF jsonb_typeof(v_e -> 'retryable') IS DISTINCT FROM 'boolean' THEN
				RAISE EXCEPTION 'retryable must be true or false' USING ERRCODE = 'invalid_parameter_value';
			ELSE
				answer := payflow.fail_step(v_e ->> 'operationId', p_step, p_worker_id, v_e -> 'error',
											(v_e ->> 'retryable')::boolean, v_e ->> 'leaseToken');
			END IF;
		EXCEPTION WHEN OTHERS THEN
			answer := NULL;
			error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
		END;
		RETURN NEXT;
	END LOOP;
END
$$;

-- A JSON array of 1 to 100 objects (22004, 22023).
CREATE OR REPLACE FUNCTION payflow._require_items(items jsonb) RETURNS void
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

-- fail_step for several steps of one kind at once (at most 100): items is
-- a JSON array of {"operationId", "error", "retryable"}; one row per item
-- with fail_step's answer or, for that item alone, an error.  Failures are
-- the rare path: each item takes fail_step's own logic.
CREATE OR REPLACE FUNCTION payflow.fail_steps(step text, worker_id text, items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	PERFORM payflow._require_step_role(step);
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(true, step, worker_id, items, NULL);
END
$$;
