-- payflow: authenticate(), the tenant of an API key (0.5.0: a file of its
-- own, so that the update script takes the same definition).

-- Checks an API key of the HTTP edge and binds its tenant to the current
-- transaction: submit, status, history, cancel and changes then act in that
-- tenant, and row-level security shows payflow_app only its rows.  An
-- autocommit caller puts both in one statement:
--   SELECT payflow.status($2) FROM payflow.authenticate($1);
-- Unknown, revoked or empty keys all get the same error (28000), and so
-- does an admin key in any form: its stored hash is over
-- "payflow-admin:<secret>", so that string would otherwise match it and bind
-- the empty tenant (0.5.0: only tenant keys are read).
CREATE OR REPLACE FUNCTION payflow.authenticate(api_key text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_tenant text;
BEGIN
	IF api_key IS NOT NULL AND octet_length(api_key) BETWEEN 1 AND 200 THEN
		SELECT k.tenant INTO v_tenant
		  FROM payflow.api_keys k
		 WHERE k.key_hash = sha256(convert_to(api_key, 'UTF8')) AND k.kind = 'tenant' AND k.revoked_at IS NULL;
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
