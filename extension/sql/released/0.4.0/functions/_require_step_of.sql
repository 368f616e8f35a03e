CREATE OR REPLACE FUNCTION payflow._require_step_of(o payflow.operations, p_step text) RETURNS payflow.step_definitions
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	d payflow.step_definitions := payflow._step_of(o.pipeline_version, p_step);
BEGIN
	IF d.step_name IS NULL THEN
		RAISE EXCEPTION 'step % is not in pipeline version % of operation %', p_step, o.pipeline_version, o.id
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Operations finish on the pipeline version they started with.';
	END IF;
	RETURN d;
END
$$;
