CREATE FUNCTION payflow._lock_step(p_operation_id text, p_step text) RETURNS payflow.steps
	LANGUAGE sql
	AS $$
	SELECT * FROM payflow.steps WHERE operation_id = p_operation_id AND step_name = p_step FOR UPDATE
$$;
