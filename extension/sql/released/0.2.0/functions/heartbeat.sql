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
