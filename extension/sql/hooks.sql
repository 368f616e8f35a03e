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
CREATE FUNCTION payflow.default_postprocess(operation_id text, payment_result jsonb) RETURNS jsonb
	LANGUAGE plpgsql STABLE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	o payflow.operations;
	v_details jsonb := '{}';
BEGIN
	PERFORM payflow._require_operation_id(operation_id);
	PERFORM payflow._require_object('payment_result', payment_result);
	SELECT * INTO o FROM payflow.operations WHERE id = default_postprocess.operation_id;
	IF NOT FOUND THEN
		PERFORM payflow._unknown_operation(operation_id);
	END IF;
	-- Details in S3 are not readable from here: the invoice input then
	-- carries the payment fields only.
	SELECT convert_from(p.content, 'UTF8')::jsonb INTO v_details
	  FROM payflow.payloads p
	 WHERE p.key = o.request_ref ->> 'key' AND o.request_ref ->> 'store' = 'pg';
	RETURN jsonb_strip_nulls(jsonb_build_object(
		'operationId', o.id,
		'paymentId', o.payment_id,
		'amount', v_details -> 'amount',
		'currency', v_details -> 'currency',
		'customer', v_details -> 'customer',
		'description', v_details -> 'description',
		'paymentReference', coalesce(payment_result -> 'charge_id', payment_result -> 'chargeId',
									 payment_result -> 'transactionId')));
END
$$;

-- Runs a post-processing hook with the caller's rights (SECURITY INVOKER:
-- a hook named by a worker's configuration must never run as the
-- extension's owner) and checks its signature and answer.  The worker calls
-- it inside complete_step's statement, so the hook runs in the same
-- transaction that completes POST_PROCESS and emits InvoiceRequested.
CREATE FUNCTION payflow.invoke_postprocess(hook regprocedure, operation_id text, payment_result jsonb)
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
