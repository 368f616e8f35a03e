CREATE OR REPLACE FUNCTION payflow._message_group_id(payment_id text) RETURNS text
	LANGUAGE sql STABLE PARALLEL SAFE
	AS $$
	SELECT CASE WHEN length(payment_id) <= 128 AND payment_id ~ '^[!-~]+$' THEN payment_id
				ELSE 'sha256:' || encode(sha256(convert_to(payment_id, 'UTF8')), 'hex') END
$$;
