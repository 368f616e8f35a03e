CREATE FUNCTION payflow._require_own_ref(p_operation_id text, p_ref jsonb) RETURNS void
	LANGUAGE plpgsql STABLE
	AS $$
DECLARE
	p payflow.payloads;
BEGIN
	PERFORM payflow._require_text('result_ref.key', p_ref ->> 'key', 1024);
	PERFORM payflow._require_text('result_ref.checksum', p_ref ->> 'checksum', 71);
	IF p_ref ->> 'store' IS DISTINCT FROM 'pg' AND p_ref ->> 'store' IS DISTINCT FROM 's3' THEN
		RAISE EXCEPTION 'unknown payload store "%"', coalesce(p_ref ->> 'store', 'missing')
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use "pg" or "s3".';
	ELSIF left(p_ref ->> 'key', length(p_operation_id) + 10) <> 'payments/' || p_operation_id || '/' THEN
		RAISE EXCEPTION 'result_ref must name a payload of operation %', p_operation_id
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Its key is %s; keys of this operation start with payments/%s/.',
								  p_ref ->> 'key', p_operation_id);
	ELSIF p_ref ->> 'store' = 'pg' THEN
		SELECT * INTO p FROM payflow.payloads WHERE key = p_ref ->> 'key' AND operation_id = p_operation_id;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'payload "%" does not exist', p_ref ->> 'key' USING ERRCODE = 'no_data_found';
		ELSIF p.checksum IS DISTINCT FROM p_ref ->> 'checksum' THEN
			RAISE EXCEPTION 'checksum mismatch for payload "%"', p.key USING ERRCODE = 'PF005';
		END IF;
	END IF;
END
$$;
