CREATE OR REPLACE FUNCTION payflow.run_hook_steps(step text, worker_id text, hook regprocedure, operation_ids text[],
									   lease_seconds integer DEFAULT 300)
	RETURNS TABLE (item integer, operation_id text, answer jsonb, completion jsonb, error jsonb)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	r record;
	c record;
	v_answers jsonb[] := '{}';		-- by item
	v_errors jsonb[] := '{}';
	v_done jsonb := '{}';			-- operation id -> its completion
	v_items jsonb := '[]';			-- complete_steps' items
	v_input jsonb;
	v_name text;
	v_run_items integer[] := '{}';	-- the items claimed to run with a "pg" input
	v_run_ids text[] := '{}';
	v_run_inputs bytea[] := '{}';
	v_results jsonb[];				-- the batch's answers, NULL where the input is no object
	v_batched boolean := false;
BEGIN
	IF hook IS NULL THEN
		RAISE EXCEPTION 'hook must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	FOR r IN SELECT * FROM payflow.claim_steps(step, worker_id, operation_ids, lease_seconds) LOOP
		v_answers[r.item] := r.answer;
		v_errors[r.item] := r.error;
		CONTINUE WHEN r.error IS NOT NULL OR r.answer ->> 'action' IS DISTINCT FROM 'run' OR r.input IS NULL;
		v_run_items := v_run_items || r.item;
		v_run_ids := v_run_ids || r.operation_id;
		v_run_inputs := v_run_inputs || r.input;
	END LOOP;

	-- the hook's name if it has invoke_postprocess's signature (which, else,
	-- raises for each item below); this runs as the caller, so no helper
	-- function (none of payflow's internal ones is the caller's to execute)
	SELECT format('%I.%I', n.nspname, p.proname) INTO v_name
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE p.oid = hook AND p.proargtypes = '25 3802'::oidvector AND p.prorettype = 3802 AND p.prokind = 'f';
	IF v_name IS NOT NULL AND cardinality(v_run_ids) > 0 THEN
		BEGIN
			-- an input that is no JSON object is left to the usual path, which says why
			EXECUTE format('SELECT array_agg(CASE WHEN jsonb_typeof(x.j) = ''object'' THEN %s(x.id, x.j) END ORDER BY x.n)
							  FROM (SELECT u.id, convert_from(u.input, ''UTF8'')::jsonb AS j, u.n
									  FROM unnest($1, $2) WITH ORDINALITY AS u(id, input, n)) x', v_name)
				INTO v_results USING v_run_ids, v_run_inputs;
			FOR v_n IN 1 .. cardinality(v_run_ids) LOOP
				IF v_results[v_n] IS NOT NULL AND jsonb_typeof(v_results[v_n]) = 'object' THEN
					v_items := v_items || jsonb_build_array(jsonb_build_object('operationId', v_run_ids[v_n],
																			   'result', v_results[v_n]));
				ELSIF jsonb_typeof(convert_from(v_run_inputs[v_n], 'UTF8')::jsonb) = 'object' THEN
					RAISE EXCEPTION 'a hook answered no JSON object';	-- undone, then item by item
				END IF;
			END LOOP;
			v_batched := true;
		EXCEPTION WHEN OTHERS THEN
			v_items := '[]';
		END;
	END IF;
	IF NOT v_batched THEN
		FOR v_n IN 1 .. cardinality(v_run_ids) LOOP
			BEGIN
				v_input := convert_from(v_run_inputs[v_n], 'UTF8')::jsonb;
				IF jsonb_typeof(v_input) = 'object' THEN	-- else the usual path says why
					v_items := v_items || jsonb_build_array(jsonb_build_object(
						'operationId', v_run_ids[v_n],
						'result', payflow.invoke_postprocess(hook, v_run_ids[v_n], v_input)));
				END IF;
			EXCEPTION WHEN OTHERS THEN
				v_errors[v_run_items[v_n]] := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
			END;
		END LOOP;
	END IF;
	IF jsonb_array_length(v_items) > 0 THEN
		FOR c IN SELECT * FROM payflow.complete_steps(step, worker_id, v_items) LOOP
			IF c.error IS NOT NULL THEN
				RAISE EXCEPTION 'step % of operation % could not be completed after its hook: %',
					step, c.operation_id, c.error ->> 'message'
					USING ERRCODE = coalesce(c.error ->> 'code', 'PF004');
			END IF;
			v_done := v_done || jsonb_build_object(c.operation_id, c.answer);
		END LOOP;
	END IF;
	FOR v_n IN 1 .. cardinality(operation_ids) LOOP
		item := v_n;
		operation_id := operation_ids[v_n];
		answer := v_answers[v_n];
		error := v_errors[v_n];
		completion := CASE WHEN error IS NULL THEN v_done -> operation_id END;
		RETURN NEXT;
	END LOOP;
END
$$;
