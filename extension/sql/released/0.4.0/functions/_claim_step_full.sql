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
