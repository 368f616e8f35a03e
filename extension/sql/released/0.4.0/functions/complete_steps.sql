CREATE FUNCTION payflow.complete_steps(step text, worker_id text, items jsonb)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	v_done boolean[];
	v_fast integer := 0;
BEGIN
	-- The fast path first, as in claim_steps: it takes only well-formed
	-- items of a known step by a valid worker id.
	IF jsonb_typeof(items) = 'array' AND jsonb_array_length(items) BETWEEN 1 AND 100 THEN
		v_done := array_fill(false, ARRAY[jsonb_array_length(items)]);
		FOR r IN SELECT * FROM payflow._complete_fast(step, worker_id, items) LOOP
			item := r.item; operation_id := r.operation_id; answer := r.answer; error := NULL;
			v_done[r.item] := true;
			v_fast := v_fast + 1;
			RETURN NEXT;
		END LOOP;
		IF v_fast = jsonb_array_length(items) THEN
			RETURN;
		END IF;
	END IF;
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, 1);
	PERFORM payflow._require_items(items);
	RETURN QUERY SELECT * FROM payflow._outcomes_one_by_one(false, step, worker_id, items, v_done);
END
$$;
