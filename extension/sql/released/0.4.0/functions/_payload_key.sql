CREATE OR REPLACE FUNCTION payflow._payload_key(p_operation_id text, p_name text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	AS $$
	SELECT 'payments/' || p_operation_id || '/' || p_name
$$;
