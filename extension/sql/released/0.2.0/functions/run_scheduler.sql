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
