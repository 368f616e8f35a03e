CREATE FUNCTION payflow.authenticate(api_key text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
BEGIN
	IF api_key IS NOT NULL AND octet_length(api_key) BETWEEN 1 AND 200 THEN
		SELECT k.tenant INTO v_tenant
		  FROM payflow.api_keys k
		 WHERE k.key_hash = sha256(convert_to(api_key, 'UTF8')) AND k.revoked_at IS NULL;
	END IF;
	IF v_tenant IS NULL THEN
		RAISE EXCEPTION 'invalid API key'
			USING ERRCODE = 'invalid_authorization_specification',
				  HINT = 'Use a key made by payflow.create_api_key() that was not revoked.';
	END IF;
	PERFORM payflow._set_tenant(v_tenant);
	RETURN v_tenant;
END
$$;
