CREATE OR REPLACE FUNCTION payflow._step_definition(step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions;
BEGIN
	PERFORM payflow._require_text('step', step, 64);
	SELECT * INTO d FROM payflow.step_definitions sd WHERE sd.step_name = step
	 ORDER BY sd.pipeline_version DESC LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'unknown step "%"', step
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = format('Steps are %s.', payflow._step_list(payflow._pipeline_version()));
	END IF;
	RETURN d;
END
$$;
