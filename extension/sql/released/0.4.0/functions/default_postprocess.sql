CREATE OR REPLACE FUNCTION payflow.default_postprocess(operation_id text, payment_result jsonb) RETURNS jsonb
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
