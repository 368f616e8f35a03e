CREATE OR REPLACE FUNCTION payflow._payload_keys_end(p_operation_id text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '0'
$$;
