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
