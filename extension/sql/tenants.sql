-- payflow: tenants and their API keys.
--
-- authenticate binds a session to the tenant of an API key; admins create
-- and revoke keys (only their hashes are stored).

-- authenticate(): authenticate.sql.

-- Creates an API key for the HTTP edge.  The secret is returned once and
-- only its sha256 is stored.
CREATE FUNCTION payflow.create_api_key(tenant text, name text DEFAULT NULL) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_secret text := 'pfk_' || payflow._random_token(32);
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	IF name IS NOT NULL THEN
		PERFORM payflow._require_text('name', name, 200);
	END IF;
	INSERT INTO payflow.api_keys (tenant, name, key_hash)
	VALUES (create_api_key.tenant, create_api_key.name, sha256(convert_to(v_secret, 'UTF8')));
	RETURN v_secret;
END
$$;

-- Revokes an API key: authenticate() refuses it from the next call on.
-- False when it was already revoked.
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
