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
