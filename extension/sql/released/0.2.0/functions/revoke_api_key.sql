CREATE FUNCTION payflow.revoke_api_key(key_id bigint) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	IF key_id IS NULL THEN
		RAISE EXCEPTION 'key_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	ELSIF NOT EXISTS (SELECT FROM payflow.api_keys k WHERE k.id = key_id) THEN
		RAISE EXCEPTION 'API key % does not exist', key_id USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE payflow.api_keys k SET revoked_at = now() WHERE k.id = key_id AND k.revoked_at IS NULL;
	RETURN FOUND;
END
$$;
