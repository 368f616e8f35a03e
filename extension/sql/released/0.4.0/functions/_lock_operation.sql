CREATE FUNCTION payflow._lock_operation(p_operation_id text) RETURNS payflow.operations
	LANGUAGE plpgsql
	AS $$
DECLARE
	o payflow.operations;
BEGIN
	SELECT * INTO o FROM payflow.operations WHERE id = p_operation_id FOR UPDATE;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(p_operation_id);
	END IF;
	RETURN o;
END
$$;
