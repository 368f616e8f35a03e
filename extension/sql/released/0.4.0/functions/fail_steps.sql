CREATE FUNCTION payflow.fail_steps(step text, worker_id text, items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(true, step, worker_id, items, NULL);
END
$$;
