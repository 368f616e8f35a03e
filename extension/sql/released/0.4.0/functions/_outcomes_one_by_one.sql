CREATE FUNCTION payflow._outcomes_one_by_one(p_fail boolean, p_step text, p_worker_id text, p_items jsonb,
											 p_done boolean[])
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE
	AS $$
DECLARE
	v_e jsonb;
BEGIN
	FOR v_n IN 1 .. jsonb_array_length(p_items) LOOP
		CONTINUE WHEN coalesce(p_done[v_n], false);
		v_e := p_items -> (v_n - 1);
		item := v_n; operation_id := v_e ->> 'operationId'; error := NULL;
		BEGIN
			IF NOT p_fail THEN
				answer := payflow._complete_step_full(v_e ->> 'operationId', p_step, p_worker_id, v_e -> 'result',
													  nullif(v_e -> 'resultRef', 'null'::jsonb));
			ELSIF jsonb_typeof(v_e -> 'retryable') IS DISTINCT FROM 'boolean' THEN
				RAISE EXCEPTION 'retryable must be true or false' USING ERRCODE = 'invalid_parameter_value';
			ELSE
				answer := payflow.fail_step(v_e ->> 'operationId', p_step, p_worker_id, v_e -> 'error',
											(v_e ->> 'retryable')::boolean);
			END IF;
		EXCEPTION WHEN OTHERS THEN
			answer := NULL;
			error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
		END;
		RETURN NEXT;
	END LOOP;
END
$$;
