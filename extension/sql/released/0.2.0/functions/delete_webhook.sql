CREATE FUNCTION payflow.delete_webhook(tenant text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE SECURITY DEFINER
	SET search_path = pg_catalog, payflow, pg_temp
	AS $$
BEGIN
	PERFORM payflow._require_text('tenant', tenant, 200);
	DELETE FROM payflow.webhooks w WHERE w.tenant = delete_webhook.tenant;
	RETURN FOUND;
END
$$;
