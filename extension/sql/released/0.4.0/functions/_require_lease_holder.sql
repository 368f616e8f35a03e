CREATE FUNCTION payflow._require_lease_holder(s payflow.steps, p_operation_id text,
											  p_step text, p_worker text)
	RETURNS void
	LANGUAGE plpgsql
	AS $$
BEGIN
	IF s.operation_id IS NULL OR s.lease_owner IS NULL THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Step %s of operation %s has not been claimed.', p_step, p_operation_id);
	ELSIF s.lease_owner <> p_worker THEN
		RAISE EXCEPTION 'worker "%" does not hold the lease of step %', p_worker, p_step
			USING ERRCODE = 'PF004',
				  DETAIL = format('Worker %s claimed step %s of operation %s after this worker''s lease expired.',
								  s.lease_owner, p_step, p_operation_id);
	END IF;
END
$$;
