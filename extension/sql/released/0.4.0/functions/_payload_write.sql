CREATE OR REPLACE FUNCTION payflow._payload_write(p_operation_id text, p_name text, p_content bytea)
	RETURNS jsonb
	LANGUAGE plpgsql
	AS $$
DECLARE
	v_key text := payflow._payload_key(p_operation_id, p_name);
	v_checksum text := payflow._checksum(p_content);
	v_existing text;
BEGIN
	PERFORM payflow._require_size('payload', octet_length(p_content));
	INSERT INTO payflow.payloads (key, operation_id, checksum, size, content)
	VALUES (v_key, p_operation_id, v_checksum, octet_length(p_content), p_content)
	ON CONFLICT (key) DO NOTHING;
	IF NOT FOUND THEN
		SELECT checksum INTO v_existing FROM payflow.payloads WHERE key = v_key;
		IF v_existing <> v_checksum THEN
			RAISE EXCEPTION 'payload "%" already exists with other content', v_key
				USING ERRCODE = 'unique_violation',
					  DETAIL = 'Payload keys are written once; a reference may already be in flight.';
		END IF;
	END IF;
	RETURN jsonb_build_object('store', 'pg', 'key', v_key, 'checksum', v_checksum,
							  'size', octet_length(p_content));
END
$$;
