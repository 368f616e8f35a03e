CREATE OR REPLACE FUNCTION payflow.complete_step(operation_id text, step text, worker_id text, result jsonb,
									  result_ref jsonb DEFAULT NULL)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	IF result_ref IS NULL THEN
		SELECT f.answer INTO v_answer
		  FROM payflow._complete_fast(step, worker_id,
									  jsonb_build_array(jsonb_build_object('operationId', operation_id,
																		   'result', result))) f;
		IF FOUND THEN
			RETURN v_answer;
		END IF;
	END IF;
	RETURN payflow._complete_step_full(operation_id, step, worker_id, result, result_ref);
END
$$;
