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
