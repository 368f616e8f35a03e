CREATE OR REPLACE FUNCTION payflow.claim_step(operation_id text, step text, worker_id text,
								   lease_seconds integer DEFAULT 300)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	SELECT f.answer INTO v_answer FROM payflow._claim_fast(step, worker_id, ARRAY[operation_id], lease_seconds) f;
	IF FOUND THEN
		RETURN v_answer;
	END IF;
	RETURN payflow._claim_step_full(operation_id, step, worker_id, lease_seconds);
END
$$;
