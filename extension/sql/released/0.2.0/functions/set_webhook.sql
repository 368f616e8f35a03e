CREATE FUNCTION payflow.set_webhook(tenant text, url text) RETURNS text
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
DECLARE
	v_secret text := 'whsec_' || payflow._random_token(32);
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	PERFORM payflow._require_text('url', url, 2000);
	IF url !~* '^https?://[^/?#[:space:]]+([/?#][^[:space:]]*)?$' THEN
		RAISE EXCEPTION 'invalid webhook URL "%"', url
			USING ERRCODE = 'invalid_parameter_value', HINT = 'Use an http:// or https:// URL.';
	END IF;
	INSERT INTO payflow.webhooks AS w (tenant, url, secret)
	VALUES (set_webhook.tenant, set_webhook.url, v_secret)
	ON CONFLICT ON CONSTRAINT webhooks_pkey DO UPDATE
		SET url = EXCLUDED.url, secret = EXCLUDED.secret, updated_at = now();
	RETURN v_secret;
END
$$;
