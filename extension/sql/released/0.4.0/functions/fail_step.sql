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
