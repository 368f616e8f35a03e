CREATE FUNCTION payflow.claim_steps(step text, worker_id text, operation_ids text[],
									lease_seconds integer DEFAULT 300)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, input bytea, error jsonb)
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	v_done boolean[];
	v_n integer;
	v_fast integer := 0;
BEGIN
	-- The fast path first: it checks the arguments inside its statement and
	-- takes no item of a call with a wrong one, so the checks below run only
	-- when some item needs the full logic (each is a statement: 40 us a
	-- call when they ran first).
	IF cardinality(operation_ids) <= 100 THEN
		v_done := array_fill(false, ARRAY[cardinality(operation_ids)]);
		FOR r IN SELECT * FROM payflow._claim_fast(step, worker_id, operation_ids, lease_seconds) LOOP
			item := r.item; operation_id := r.operation_id; answer := r.answer; input := r.input; error := NULL;
			v_done[r.item] := true;
			v_fast := v_fast + 1;
			RETURN NEXT;
		END LOOP;
		IF v_fast = cardinality(operation_ids) THEN
			RETURN;
		END IF;
	END IF;
	PERFORM payflow._step_definition(step);
	PERFORM payflow._require_worker(worker_id, lease_seconds);
	PERFORM payflow._require_batch('operation_ids', cardinality(operation_ids));
	FOR v_n IN 1 .. cardinality(operation_ids) LOOP
		CONTINUE WHEN v_done[v_n];
		item := v_n; operation_id := operation_ids[v_n]; input := NULL; error := NULL;
		BEGIN
			answer := payflow._claim_step_full(operation_ids[v_n], step, worker_id, lease_seconds);
			IF answer ->> 'action' = 'run' THEN
				input := payflow._inline_input(answer -> 'input');
			END IF;
		EXCEPTION WHEN OTHERS THEN
			answer := NULL;
			error := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
		END;
		RETURN NEXT;
	END LOOP;
END
$$;
