CREATE OR REPLACE FUNCTION payflow.submit(payment_id text, details jsonb,
							   idempotency_key text DEFAULT NULL,
							   correlation_id text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_content bytea;
BEGIN
	-- The checks as one expression (no statement to run); only bad input
	-- takes the helpers, which raise the precise error.
	IF payment_id IS NULL OR payment_id = '' OR length(payment_id) > 255 OR payment_id ~ '[[:cntrl:]]'
	   OR idempotency_key = '' OR length(idempotency_key) > 255 OR idempotency_key ~ '[[:cntrl:]]'
	   OR correlation_id = '' OR length(correlation_id) > 255 OR correlation_id ~ '[[:cntrl:]]'
	   OR details IS NULL OR jsonb_typeof(details) <> 'object' THEN
		PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
		PERFORM payflow._require_object('details', details);
	END IF;
	v_content := convert_to(details::text, 'UTF8');
	IF octet_length(v_content) > payflow._setting('payload_max_bytes')::bigint THEN
		PERFORM payflow._require_size('details', octet_length(v_content));
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		sha256(convert_to(payment_id, 'UTF8') || '\x00'::bytea || v_content),
		NULL, v_content);
END
$$;
