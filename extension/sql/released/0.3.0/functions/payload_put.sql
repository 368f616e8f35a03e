CREATE FUNCTION payflow.payload_put(operation_id text, name text, content bytea,
									step text DEFAULT NULL, worker_id text DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	d payflow.step_definitions;
	s payflow.steps;
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_text('name', name, 100);
	IF name !~ '^[A-Za-z0-9][A-Za-z0-9._-]*$' THEN
		RAISE EXCEPTION 'invalid payload name "%"', name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Names use letters, digits, ".", "_" and "-".';
	END IF;
	IF content IS NULL THEN
		RAISE EXCEPTION 'content must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT FROM payflow.operations o WHERE o.id = payload_put.operation_id) THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	IF step IS NULL OR worker_id IS NULL THEN
		RAISE EXCEPTION 'only the lease holder of a running step may write a payload'
			USING ERRCODE = 'PF004', HINT = 'Pass the step and the worker_id that claimed it.';
	END IF;
	d := payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	SELECT * INTO s FROM payflow.steps t
	 WHERE t.operation_id = payload_put.operation_id AND t.step_name = d.step_name;
	IF s.status IS DISTINCT FROM 'RUNNING' OR s.lease_owner IS DISTINCT FROM worker_id THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', worker_id, d.step_name
			USING ERRCODE = 'PF004', DETAIL = format('Operation %s.', operation_id);
	ELSIF name IS DISTINCT FROM d.result_name THEN
		RAISE EXCEPTION 'step % writes only its result payload', d.step_name
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = CASE WHEN d.result_name IS NULL THEN format('Step %s has no result payload.', d.step_name)
								ELSE format('Its name is %s.', d.result_name) END;
	END IF;
	RETURN payflow._payload_write(operation_id, name, content);
END
$$;
