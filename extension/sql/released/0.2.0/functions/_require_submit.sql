CREATE OR REPLACE FUNCTION payflow._require_submit(payment_id text, idempotency_key text, correlation_id text)
	RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	AS $$
BEGIN
	PERFORM payflow._require_text('payment_id', payment_id, 255);
	PERFORM payflow._require_printable('payment_id', payment_id);
	IF idempotency_key IS NOT NULL THEN
		PERFORM payflow._require_text('idempotency_key', idempotency_key, 255);
		PERFORM payflow._require_printable('idempotency_key', idempotency_key);
	END IF;
	IF correlation_id IS NOT NULL THEN
		PERFORM payflow._require_text('correlation_id', correlation_id, 255);
		PERFORM payflow._require_printable('correlation_id', correlation_id);
	END IF;
END
$$;
