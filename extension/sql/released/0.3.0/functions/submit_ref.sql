CREATE OR REPLACE FUNCTION payflow.submit_ref(payment_id text, store text, key text, checksum text, size bigint,
								   idempotency_key text DEFAULT NULL,
								   correlation_id text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_stored payflow.payloads;
BEGIN
	PERFORM payflow._require_submit(payment_id, idempotency_key, correlation_id);
	PERFORM payflow._require_text('store', store, 16);
	PERFORM payflow._require_text('key', key, 1024);
	PERFORM payflow._require_printable('key', key);
	PERFORM payflow._require_text('checksum', checksum, 71);
	IF store NOT IN ('pg', 's3') THEN
		RAISE EXCEPTION 'unknown payload store "%"', store
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	END IF;
	IF checksum !~ '^sha256:[0-9a-f]{64}$' THEN
		RAISE EXCEPTION 'invalid checksum "%"', checksum
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A checksum is "sha256:" followed by 64 lower-case hex digits.';
	END IF;
	IF size IS NULL OR size < 0 THEN
		RAISE EXCEPTION 'size must be a non-negative number of bytes'
			USING ERRCODE = CASE WHEN size IS NULL THEN 'null_value_not_allowed'
								 ELSE 'invalid_parameter_value' END;
	END IF;
	IF store = 'pg' THEN
		-- Only a payload of an operation the caller may see (its tenant's):
		-- another tenant's key answers exactly like an unknown one, so keys
		-- cannot be probed, checksums not guessed, and no tenant's request
		-- charged for another.
		SELECT p.* INTO v_stored
		  FROM payflow.payloads p JOIN payflow.operations o ON o.id = p.operation_id
		 WHERE p.key = submit_ref.key AND payflow._visible(o.tenant);
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', key USING ERRCODE = 'no_data_found';
		ELSIF v_stored.checksum <> checksum OR v_stored.size <> size THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', key USING ERRCODE = 'PF005';
		END IF;
	END IF;
	RETURN payflow._create_operation(
		payment_id, coalesce(idempotency_key, payment_id), correlation_id,
		sha256(convert_to(payment_id || E'\n' || store || E'\n' || key || E'\n' || checksum, 'UTF8')),
		jsonb_build_object('store', store, 'key', key, 'checksum', checksum, 'size', size),
		NULL);
END
$$;
