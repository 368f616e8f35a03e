-- payflow: the post-processing hooks.
--
-- The shipped default_postprocess and invoke_postprocess, which runs a
-- hook (text, jsonb) -> jsonb with the caller's rights inside the
-- statement that completes the step (--role postprocess and --role sql).

-- The post-processing hook that ships with payflow: the invoice input from
-- the request details and the payment result.  Fields are copied by name,
-- so nothing else in the details (a card number, say) ever reaches the
-- invoice API.  Hooks have this signature: (operation_id text,
-- payment_result jsonb) -> jsonb, the invoice input.
CREATE OR REPLACE FUNCTION payflow.default_postprocess(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_answer jsonb;
BEGIN
	-- The checks as one expression; only bad input takes the helpers, which
	-- raise the precise error.  Then one statement: the hook runs for every
	-- operation post-processed, and a statement each for the checks, the
	-- operation and the request cost it some 20 us (test/bench/README.md).
	IF operation_id IS NULL OR operation_id !~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$'
	   OR payment_result IS NULL OR jsonb_typeof(payment_result) <> 'object' THEN
		PERFORM payflow._require_operation_id(operation_id);
		PERFORM payflow._require_object('payment_result', payment_result);
	END IF;
	-- Details in S3 are not readable from here: the invoice input then
	-- carries the payment fields only.
	SELECT jsonb_strip_nulls(jsonb_build_object(
			   'operationId', o.id,
			   'paymentId', o.payment_id,
			   'amount', d.details -> 'amount',
			   'currency', d.details -> 'currency',
			   'customer', d.details -> 'customer',
			   'description', d.details -> 'description',
			   'paymentReference', coalesce(payment_result -> 'charge_id', payment_result -> 'chargeId',
											payment_result -> 'transactionId')))
	  INTO v_answer
	  FROM payflow.operations o
	  LEFT JOIN LATERAL (
		SELECT convert_from(p.content, 'UTF8')::jsonb AS details
		  FROM payflow._request_ref(o.id, o.request_ref, o.request_mac, o.request_size) r
		  JOIN payflow.payloads p ON p.key = r ->> 'key'
		 WHERE r ->> 'store' = 'pg') d ON true
	 WHERE o.id = default_postprocess.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	RETURN v_answer;
END
$$;

-- Runs a post-processing hook with the caller's rights (SECURITY INVOKER:
-- a hook named by a worker's configuration must never run as the
-- extension's owner) and checks its signature and answer.  The worker calls
-- it inside complete_step's statement, so the hook runs in the same
-- transaction that completes POST_PROCESS and emits InvoiceRequested.
CREATE OR REPLACE FUNCTION payflow.invoke_postprocess(hook regprocedure, operation_id text, payment_result jsonb)
	RETURNS jsonb
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_name text;
	v_answer jsonb;
BEGIN
	IF hook IS NULL THEN
		RAISE EXCEPTION 'hook must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT format('%I.%I', n.nspname, p.proname) INTO v_name
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE p.oid = hook AND p.proargtypes = '25 3802'::oidvector AND p.prorettype = 3802 AND p.prokind = 'f';
	IF v_name IS NULL THEN
		RAISE EXCEPTION 'post-processing hook % must take (text, jsonb) and return jsonb', hook
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	EXECUTE format('SELECT %s($1, $2)', v_name) INTO v_answer USING operation_id, payment_result;
	IF v_answer IS NULL OR jsonb_typeof(v_answer) <> 'object' THEN
		RAISE EXCEPTION 'post-processing hook % must return a JSON object', hook
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN v_answer;
END
$$;

-- A hook step (post-processing, --role sql) for up to 100 operations in
-- one statement and one transaction: claim_steps, then for each step it
-- claimed to run with a "pg" input, the hook (invoke_postprocess) and
-- complete_steps of all of them.  Runs with the caller's rights, like
-- invoke_postprocess.  One row per item: the claim's answer, the
-- completion's answer when the step was done here, or the item's error.
--  - A hook that raises fails its item alone (a subtransaction): no
--    completion, the error, and the claim stays; the worker then takes the
--    usual path for it (the hook again, its error classified and recorded).
--  - An item not done here (claim answer other than run, an input in S3)
--    has its claim's answer and no completion: the usual path goes on.
--    An id given twice (a message delivered twice into one batch) is
--    answered busy by claim_steps, so its hook runs once; the repeat gets
--    the completion too, so that its message is deleted as done.
--  - What a hook wrote commits with its step's completion or not at all:
--    should complete_steps refuse an item the batch just claimed, the whole
--    call fails (PF004 or the item's own code), and nothing of it stays.
--  - The hooks of all items run in one statement (one plan, one
--    subtransaction; with the shipped hook in batches of ten, 0.33-0.37
--    CPU ms per item against 0.38-0.42 for a statement and a subtransaction
--    each).  Should one raise or answer anything but a JSON
--    object, that statement is rolled back with what every hook wrote, and
--    each item runs again on its own as above: a hook may then run twice for
--    an item, its first run undone.
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
	v_run_tokens text[] := '{}';	-- their claims' lease tokens
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
		v_run_tokens := v_run_tokens || (r.answer ->> 'leaseToken');
	END LOOP;

	-- the hook's name if it has invoke_postprocess's signature (which, else,
	-- raises for each item below); this runs as the caller, so no helper
	-- function (none of payflow's internal ones is the caller's to execute)
	SELECT format('%I.%I', n.nspname, p.proname) INTO v_name
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	 WHERE p.oid = hook AND p.proargtypes = '25 3802'::oidvector AND p.prorettype = 3802 AND p.prokind = 'f';
	IF v_name IS NOT NULL AND cardinality(v_run_ids) > 0 THEN
		BEGIN
			-- an input that is no JSON object is left to the usual path, which
			-- says why.  The shipped hook by a statement of its own, whose
			-- plan is kept; any other is named at run time, and EXECUTE plans
			-- its statement at each batch (the shipped hook that way: 328
			-- against 299 us an item in batches of five, test/bench/README.md).
			-- The two statements are the same but for the hook's name.
			IF hook = 'payflow.default_postprocess(text,jsonb)'::regprocedure THEN
				SELECT array_agg(CASE WHEN jsonb_typeof(x.j) = 'object' THEN payflow.default_postprocess(x.id, x.j) END
								 ORDER BY x.n)
				  INTO v_results
				  FROM (SELECT u.id, convert_from(u.input, 'UTF8')::jsonb AS j, u.n
						  FROM unnest(v_run_ids, v_run_inputs) WITH ORDINALITY AS u(id, input, n)) x;
			ELSE
				EXECUTE format('SELECT array_agg(CASE WHEN jsonb_typeof(x.j) = ''object'' THEN %s(x.id, x.j) END ORDER BY x.n)
								  FROM (SELECT u.id, convert_from(u.input, ''UTF8'')::jsonb AS j, u.n
										  FROM unnest($1, $2) WITH ORDINALITY AS u(id, input, n)) x', v_name)
					INTO v_results USING v_run_ids, v_run_inputs;
			END IF;
			FOR v_n IN 1 .. cardinality(v_run_ids) LOOP
				IF v_results[v_n] IS NOT NULL AND jsonb_typeof(v_results[v_n]) = 'object' THEN
					v_items := v_items || jsonb_build_array(jsonb_build_object('operationId', v_run_ids[v_n],
																			   'result', v_results[v_n],
																			   'leaseToken', v_run_tokens[v_n]));
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
						'result', payflow.invoke_postprocess(hook, v_run_ids[v_n], v_input),
						'leaseToken', v_run_tokens[v_n]));
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
